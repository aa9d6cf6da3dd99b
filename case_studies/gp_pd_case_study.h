/* pd_case_study: when the prefill/decode split pays, read from a fitted
 * latency model. The report needs no GPU, so CI tests it on synthetic
 * profiles; the program measures a profile on the GPU or loads one. */
#ifndef GP_PD_CASE_STUDY_H
#define GP_PD_CASE_STUDY_H

#include <stdio.h>

#include <jansson.h>

#include "gp_common.h"
#include "gp_pipeline.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Writes the report of m (its predictions at its profile's points) as
 * markdown to md (NULL: none) and as a new JSON object to *json (json NULL:
 * none; the caller decrefs it):
 *  - decode: each decode point the profile measured on every SM (rows, their
 *    contexts summed), the step on every SM, and per split alone, beside a
 *    prefill batch, and beside / every SM;
 *  - prefill: each prompt (tokens, position) measured on every SM, alone
 *    there, per split alone and beside decode steps, and beside / every SM;
 *  - work done, per decode point at the largest prompt n at position 0: per
 *    split T = PREFILL(split, beside, n), k = T / DECODE(split, beside) the
 *    decode steps in that time, the mixed alternative M = MIXED(rows,
 *    context, n - rows) + max(k - 1, 0) x DECODE(every SM), and pays = M / T
 *    (> 1: the split does the same work faster); one closing line per point
 *    and one overall.
 * GP_ERR_INVALID_ARG for a model without decode or prefill points on every
 * SM, or one that cannot predict a set the report needs (naming it);
 * GP_ERR_NO_MEMORY; GP_ERR_IO when md cannot be written. */
gp_status gp_cs_pd_report(const gp_pd_model *m, FILE *md, json_t **json);

#ifdef __cplusplus
}
#endif

#endif
