/* pd_case_study: when prefill and decode on two SM partitions pay against
 * the mixed batch on every SM. Loads a profile (--profile, no GPU) or
 * measures one through the backend's adaptive split, fits it and writes the
 * report (gp_cs_pd_report) as markdown and JSON. */
#include <getopt.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gp_engine.h"
#include "gp_model.h"
#include "gp_pd_case_study.h"
#include "gp_tools.h"

#define PROG "pd_case_study"

typedef struct pd_opts {
    const char *profile, *model, *save_profile, *markdown, *json;
    long max_batch, max_context, prefill_chunk;
    long splits[GP_PD_MAX_SPLITS];
    int n_splits;
    gp_dtype dtype;
    const char *measuring_flag; /* the first flag that asks for a measurement, for the --profile refusal */
} pd_opts;

static void usage(FILE *f)
{
    fprintf(f,
            "usage: " PROG " --profile FILE [--markdown FILE] [--json FILE]\n"
            "       " PROG " --model PRESET|DIR [--max-batch N] [--max-context N] [--prefill-chunk N]\n"
            "                     [--splits D1,D2,...] [--dtype auto|bf16|fp16] [--save-profile FILE]\n"
            "                     [--markdown FILE] [--json FILE]\n"
            "\n"
            "When prefill and decode on two SM partitions pay against the mixed batch (chunked prefill's\n"
            "step) on every SM: decode and prefill steps per split against every SM, and the work each\n"
            "split does in a prefill batch's time against the mixed batch, from the fitted latency model.\n"
            "\n"
            "  --profile FILE        a prefill/decode profile (greenpipe serve --pd-profile-save, or\n"
            "                        --save-profile here): load, fit, report; needs no GPU\n"
            "  --model PRESET|DIR    measure a profile on the GPU with this model (a preset's synthetic\n"
            "                        weights or a checkpoint directory)\n"
            "  --max-batch N         decode rows of the server measured; default 24 (2..4096)\n"
            "  --max-context N       tokens per sequence; default 16896 (at most the model's)\n"
            "  --prefill-chunk N     the prefill lanes' rows; default 2048 (1..%d)\n"
            "  --splits D1,D2,...    decode SMs of each candidate pair (the prefill partition the rest);\n"
            "                        default 16,32,48,64; at most %d\n"
            "  --dtype auto|bf16|fp16  the engine's dtype; default auto\n"
            "  --save-profile FILE   write the measured profile (JSON)\n"
            "  --markdown FILE       the report; default stdout\n"
            "  --json FILE           the same numbers as JSON\n"
            "  --help                this text\n",
            GP_ENGINE_MAX_PREFILL_CHUNK, GP_PD_MAX_SPLITS);
}

static int bad_value(const char *flag, const char *value, const char *allowed)
{
    fprintf(stderr, PROG ": %s '%s': %s\n", flag, value, allowed);
    return 2;
}

static int refused(gp_status st)
{
    (void)st;
    fprintf(stderr, PROG ": %s\n", gp_last_error());
    return 2;
}

/* 0: go on; else the exit code. */
static int parse(int argc, char **argv, pd_opts *o)
{
    enum { O_PROFILE = 1000, O_MODEL, O_MAX_BATCH, O_MAX_CONTEXT, O_CHUNK, O_SPLITS, O_DTYPE, O_SAVE, O_MD, O_JSON,
           O_HELP };
    static const struct option opts[] = {
        {"profile", required_argument, NULL, O_PROFILE},
        {"model", required_argument, NULL, O_MODEL},
        {"max-batch", required_argument, NULL, O_MAX_BATCH},
        {"max-context", required_argument, NULL, O_MAX_CONTEXT},
        {"prefill-chunk", required_argument, NULL, O_CHUNK},
        {"splits", required_argument, NULL, O_SPLITS},
        {"dtype", required_argument, NULL, O_DTYPE},
        {"save-profile", required_argument, NULL, O_SAVE},
        {"markdown", required_argument, NULL, O_MD},
        {"json", required_argument, NULL, O_JSON},
        {"help", no_argument, NULL, O_HELP},
        {NULL, 0, NULL, 0},
    };
    *o = (pd_opts){.max_batch = 24, .max_context = 16896, .prefill_chunk = 2048, .splits = {16, 32, 48, 64},
                   .n_splits = 4, .dtype = GP_DTYPE_AUTO};
    opterr = 0;
    optind = 1;
    int c;
    while ((c = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
        gp_status st = GP_OK;
        if (c >= O_MODEL && c <= O_SAVE && !o->measuring_flag)
            o->measuring_flag = gp_opt_name(opts, c);
        switch (c) {
        case O_PROFILE: st = gp_parse_path(optarg, "--profile"); o->profile = optarg; break;
        case O_MODEL: o->model = optarg; break;
        case O_MAX_BATCH: st = gp_parse_long(optarg, 2, 4096, "--max-batch", &o->max_batch); break;
        case O_MAX_CONTEXT: st = gp_parse_long(optarg, 2, INT32_MAX, "--max-context", &o->max_context); break;
        case O_CHUNK:
            st = gp_parse_long(optarg, 1, GP_ENGINE_MAX_PREFILL_CHUNK, "--prefill-chunk", &o->prefill_chunk);
            break;
        case O_SPLITS:
            st = gp_parse_long_list(optarg, 1, 4096, "--splits", o->splits, GP_PD_MAX_SPLITS, &o->n_splits);
            break;
        case O_DTYPE:
            if (gp_dtype_parse(optarg, GP_DTYPE_ALLOW_AUTO, &o->dtype) != GP_OK)
                return bad_value("--dtype", optarg, "not a dtype. allowed: auto, bf16 or fp16");
            break;
        case O_SAVE: st = gp_check_out_file(optarg, "--save-profile"); o->save_profile = optarg; break;
        case O_MD: st = gp_check_out_file(optarg, "--markdown"); o->markdown = optarg; break;
        case O_JSON: st = gp_check_out_file(optarg, "--json"); o->json = optarg; break;
        case O_HELP: usage(stdout); return -1;
        case ':':
            fprintf(stderr, PROG ": %s needs a value\n", argv[optind - 1]);
            return 2;
        default:
            fprintf(stderr, PROG ": unknown or ambiguous option '%s'\n", argv[optind - 1]);
            usage(stderr);
            return 2;
        }
        if (st != GP_OK)
            return refused(st);
    }
    if (optind < argc)
        return bad_value("argument", argv[optind], "not an option. allowed: the flags of --help");
    if (o->profile && o->measuring_flag) {
        fprintf(stderr, PROG ": --profile loads a profile; --%s is for measuring one on the GPU. allowed: --profile "
                "with --markdown and --json only\n", o->measuring_flag);
        return 2;
    }
    if (!o->profile && !o->model) {
        fprintf(stderr, PROG ": nothing to report: give --profile FILE (no GPU) or --model PRESET|DIR (measures "
                "on the GPU)\n");
        return 2;
    }
    return 0;
}

/* Measures a profile through the backend's adaptive split: the same lanes
 * and points greenpipe serve --pd-split auto measures at start-up. */
static int measure(const pd_opts *o, gp_pd_model **out)
{
    gp_model_source src;
    if (gp_model_source_resolve(o->model, 0, &src) != GP_OK) {
        fprintf(stderr, PROG ": --model '%s': %s\n", o->model, gp_last_error());
        return 2;
    }
    if (o->max_context > src.cfg.max_context) {
        fprintf(stderr, PROG ": --max-context %ld is beyond the model's max context %d; allowed: 2..%d\n",
                o->max_context, src.cfg.max_context, src.cfg.max_context);
        return 2;
    }
    gp_backend_params bp = gp_backend_default_params(GP_BACKEND_CUDA);
    bp.n_seqs = (int)o->max_batch;
    bp.max_context = (int)o->max_context;
    bp.prefill_chunk = (int)o->prefill_chunk;
    bp.dtype = o->dtype;
    bp.pd_lanes = true;
    bp.n_pd_splits = o->n_splits;
    for (int i = 0; i < o->n_splits; i++)
        bp.pd_decode_sms[i] = (int)o->splits[i];
    bp.pd_profile_save = o->save_profile;
    bp.pd_planner = gp_pd_planner_default_params(); /* the backend checks its targets; the report plans nothing */
    gp_backend *b = NULL;
    gp_status st = gp_backend_open(&src, &bp, &b);
    if (st != GP_OK) {
        if (st == GP_ERR_NO_DEVICE) /* one line a script can match, whatever the library's words */
            fprintf(stderr, PROG ": %s%s\n", strstr(gp_last_error(), "no CUDA GPU usable") ? "" : "no CUDA GPU usable: ",
                    gp_last_error());
        else
            fprintf(stderr, PROG ": measuring the profile: %s: %s\n", gp_status_str(st), gp_last_error());
        return st == GP_ERR_INVALID_ARG ? 2 : 1;
    }
    /* the backend owns its model; refit from its profile so ours outlives it */
    const gp_pd_model *bm = gp_backend_pd_model(b);
    st = bm ? gp_pd_model_fit(gp_pd_model_profile(bm), out) : GP_ERR_STATE;
    if (!bm)
        fprintf(stderr, PROG ": the backend measured no prefill/decode profile\n");
    else if (st != GP_OK)
        fprintf(stderr, PROG ": fitting the measured profile: %s\n", gp_last_error());
    gp_backend_close(b);
    return st == GP_OK ? 0 : 1;
}

static int load(const char *path, gp_pd_model **out)
{
    gp_pd_profile p = {0};
    gp_status st = gp_pd_profile_load(path, &p);
    if (st != GP_OK) {
        fprintf(stderr, PROG ": --profile %s: %s\n", path, gp_last_error());
        return gp_input_exit_code(st);
    }
    st = gp_pd_model_fit(&p, out);
    gp_pd_profile_free(&p);
    if (st != GP_OK) {
        fprintf(stderr, PROG ": --profile %s: %s\n", path, gp_last_error());
        return gp_input_exit_code(st);
    }
    return 0;
}

int main(int argc, char **argv)
{
    pd_opts o;
    int rc = parse(argc, argv, &o);
    if (rc)
        return rc < 0 ? 0 : rc;
    gp_pd_model *m = NULL;
    rc = o.profile ? load(o.profile, &m) : measure(&o, &m);
    if (rc)
        return rc;
    FILE *md = stdout;
    if (o.markdown && !(md = fopen(o.markdown, "w"))) {
        fprintf(stderr, PROG ": --markdown %s: cannot open for writing\n", o.markdown);
        gp_pd_model_destroy(m);
        return 1;
    }
    json_t *json = NULL;
    gp_status st = gp_cs_pd_report(m, md, o.json ? &json : NULL);
    if (md != stdout && fclose(md) != 0 && st == GP_OK) {
        gp_set_error("--markdown %s: writing failed", o.markdown);
        st = GP_ERR_IO;
    }
    if (st == GP_OK && json && json_dump_file(json, o.json, JSON_INDENT(2)) != 0) {
        gp_set_error("--json %s: writing failed", o.json);
        st = GP_ERR_IO;
    }
    if (st != GP_OK)
        fprintf(stderr, PROG ": %s\n", gp_last_error());
    json_decref(json);
    gp_pd_model_destroy(m);
    return st == GP_OK ? 0 : st == GP_ERR_INVALID_ARG ? 2 : 1;
}
