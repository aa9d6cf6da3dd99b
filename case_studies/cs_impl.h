/* Helpers shared by the case study's option, split and writer files; private
 * to case_studies/ (the public surface is gp_case_study.h). */
#ifndef GP_CS_IMPL_H
#define GP_CS_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "gp_case_study.h"

/* The program's name in messages and the usage. */
#define CS_PROG "decode_pipeline_case_study"
/* A numeric constant of another folder's header as text, for messages and
 * the usage built at compile time. */
#define CS_STR_(x) #x
#define CS_STR(x) CS_STR_(x)

/* ------------------------------------------------------------ parsing */

/* Strict unsigned decimal: digits only (no sign, space or base prefix), at
 * most max. 0 on success; otherwise -1 and *why says what is wrong ("empty",
 * "negative", "not a number", "trailing characters 'x' after the number",
 * "too large"). */
int cs_parse_u64(const char *text, uint64_t max, uint64_t *out, char *why, size_t why_len);

/* Splits a comma-separated list into items, in a copy the caller frees
 * (*copy). Refuses an empty list, an empty item and more than cap items:
 * -1 with *why naming the problem. */
int cs_split_list(const char *value, char **copy, char **items, int cap, int *n, char *why, size_t why_len);

/* ------------------------------------------------------------ workloads */

/* The H100 definition of a preset ("small", "large"): 0 when name is one. */
int cs_workload_preset(const char *name, int *B, int *C);

/* ------------------------------------------------------------ names */

/* 0 and *out for "off", "ratio", "model"; -1 otherwise. */
int cs_rebalance_parse(const char *text, gp_rebalance_policy *out);

/* "56:76", "56" (F the rest) */
void cs_req_text(const gp_split_req *r, char *buf, size_t len);
/* Requested and obtained split of a row: "seq", "56:76", "56:rest";
 * obtained adds " shared" when the pair was not partitioned. */
void cs_row_req_text(const gp_cs_row *r, char *buf, size_t len);
void cs_row_got_text(const gp_cs_row *r, char *buf, size_t len);
/* The attention count a row is plotted at (obtained when partitioned). */
int cs_row_attn_x(const gp_cs_row *r);

/* True when the row carries a full stage-time trace. */
bool cs_row_has_trace(const gp_cs_row *r);

/* ------------------------------------------------------------ JSON */

/* A JSON string of s; bytes that are not valid UTF-8 (a checkpoint path, a
 * driver message) become '?' rather than failing the whole report. */
struct json_t *cs_json_text(const char *s);

/* A JSON builder that remembers any failed allocation, so writers read as a
 * list of fields with one check at the end (cs_json.c, cs_tuning.c). */
typedef struct cs_jb {
    bool failed;
} cs_jb;
void cs_put(cs_jb *b, struct json_t *obj, const char *key, struct json_t *v);
/* JSON has no NaN or infinity: an absent figure is null. */
struct json_t *cs_json_real(double v);
void cs_put_real(cs_jb *b, struct json_t *obj, const char *key, double v);
void cs_put_int(cs_jb *b, struct json_t *obj, const char *key, long long v);
void cs_put_bool(cs_jb *b, struct json_t *obj, const char *key, bool v);
void cs_put_str(cs_jb *b, struct json_t *obj, const char *key, const char *s);
void cs_append(cs_jb *b, struct json_t *arr, struct json_t *v);

/* ------------------------------------------------------------ output files */

/* Opens path for writing; NULL with GP_ERR_IO text naming what and the path. */
FILE *cs_open_out(const char *path, const char *what);
/* Closes f; GP_ERR_IO naming the path when any write failed (ENOSPC, EIO). */
gp_status cs_close_out(FILE *f, const char *path, const char *what);

#endif
