/* Private to the tuning profile (cs_tuning*.c): the workload features of the
 * cold-start rule, the rule itself and the loaded profile's layout. */
#ifndef GP_CS_TUNING_IMPL_H
#define GP_CS_TUNING_IMPL_H

#include <stdbool.h>

#include "gp_case_study.h"

#define CS_TUNING_FORMAT "greenpipe-tuning"
#define CS_TUNING_VERSION 1

/* What the performance model (docs/ARCHITECTURE.md §5) says about a workload on a
 * model, the inputs of the rule. Per layer, bf16 weights:
 *   attention stage t_A = GEMM(QKV + O weights, B tokens) + KV pass(B x C),
 *   FFN stage       t_F = GEMM(gate/up/down weights, B tokens),
 * each GEMM or pass costing max(bytes / HBM rate, flops / GEMM rate). */
typedef struct cs_features {
    double attn_ms, ffn_ms; /* t_A, t_F per layer, whole batch, all SMs */
    double attn_frac;       /* t_A / (t_A + t_F): the attention share of the sequential work */
    double seq_ms;          /* L (t_A + t_F) + LM head: the sequential engine's estimate */
    double floor2_ms;       /* gp_step_floor with M = 2: the best any split can do */
    double headroom;        /* seq_ms / floor2_ms: how much a split could gain at most */
} cs_features;
void cs_tuning_features(const gp_config *cfg, int B, int C, cs_features *out);

/* One measured workload, as the rule saw it. */
typedef struct cs_point {
    char workload[32];
    int B, C;
    bool has_seq;          /* the seq row ran: "won" is known */
    bool won;              /* the best split beat seq */
    double headroom, attn_frac;
    double best_share;     /* attention share of the best split (won only) */
    int best_attn_sms, M;
    unsigned depth;
    gp_placement placement;
    int gemm_tune;         /* GEMM candidates its rows were timed with (0: the heuristic's pick) */
    double speedup;        /* seq ms / best split ms (0: unknown) */
} cs_point;

/* The cold-start rule: split iff headroom >= threshold (never when
 * !split), attention share k0 + k1 attn_frac, M and depth of the nearest
 * winning point in (log2 B, log2 C). */
typedef struct cs_rule {
    bool split;            /* false: seq for every workload */
    double threshold;
    double k0, k1;
    int training_errors;
    int n_points;
    cs_point *points;      /* [n_points] */
} cs_rule;

/* Fits the rule to the points (owned by the caller, borrowed by rule). */
void cs_rule_fit(cs_point *points, int n, cs_rule *rule);
/* The rule's choice for (B, C) on cfg and info (share rounded to a valid
 * split, remainder on F). */
gp_status cs_rule_pick(const cs_rule *rule, const gp_config *cfg, const gp_sm_info *info, int B, int C,
                       gp_cs_choice *out);

/* A best measured configuration as stored in the profile. */
typedef struct cs_best {
    int B, C;
    gp_cs_choice choice;
} cs_best;

#define CS_DEVICE_NAMES 8

struct gp_cs_tuning {
    char path[GP_CS_PATH];
    char name[32];         /* "name", else the file name without .json */
    char source[600];      /* "source" as one sentence; "" when the profile has none */
    /* "device": what a shipped profile applies to (has_device false: not said) */
    bool has_device;
    char device_names[CS_DEVICE_NAMES][128];
    int n_device_names;
    int device_sm_count, device_cc_major, device_cc_minor;
    int sm_count;          /* of the device the profile was measured on */
    gp_config shape;       /* the model's shape fields (name, layers, widths, heads) */
    int n_best;
    cs_best *best;         /* [n_best] */
    cs_rule rule;          /* points owned here */
};

/* Same layer shapes: measurements of one apply to the other. */
bool cs_same_shape(const gp_config *a, const gp_config *b);

#endif
