/* The "pipeline statistics" report of a window of steps: a text table for
 * people and a JSON object for tools. */
#include <jansson.h>

#include "gp_pipeline.h"

static void split_text(char *buf, size_t n, const gp_split_info *sp)
{
    if (sp->a_req == 0 && sp->f_req == 0)
        snprintf(buf, n, "seq (all %d %s)", sp->a_got, sp->unit ? sp->unit : "SMs");
    else
        snprintf(buf, n, "%d:%d %s requested, %d:%d obtained%s", sp->a_req, sp->f_req, sp->unit ? sp->unit : "SMs",
                 sp->a_got, sp->f_got, sp->partitioned ? "" : " (unpartitioned)");
}

void gp_stats_report_text(FILE *f, const char *title, const gp_stats_summary *s)
{
    char split[128];
    split_text(split, sizeof split, &s->split);
    fprintf(f, "pipeline statistics%s%s: B=%d, M=%d, %d layers, %d steps, split %s\n", title ? " - " : "",
            title ? title : "", s->B, s->M, s->n_layers, s->steps, split);
    fprintf(f, "  step            %9.3f ms mean (min %.3f, max %.3f), %.0f tokens/s\n", s->step_ms_mean,
            s->step_ms_min, s->step_ms_max, s->tokens_per_s);
    fprintf(f, "  attention       %9.4f ms per layer (all micro-batches), FFN %.4f ms per layer\n",
            s->attn_ms_per_layer, s->ffn_ms_per_layer);
    fprintf(f, "  A->F            %9.4f MB per token (average over layers)\n", s->a2f_mb_per_token);
    fprintf(f, "  backlog         ring occupancy at push %.2f mean, %u max; ready on the device: attention %.2f, "
               "FFN %.2f\n", s->ring_occupancy_mean, s->ring_occupancy_max, s->attn_backlog_mean,
            s->ffn_backlog_mean);
    fprintf(f, "  host waits      producer %.3f ms, consumer %.3f ms per step\n", s->producer_wait_ms,
            s->consumer_wait_ms);
    fprintf(f, "  partition idle  attention %.1f%%, FFN %.1f%% of the step\n", 100 * s->attn_idle_share,
            100 * s->ffn_idle_share);
    fprintf(f, "  | layer | attention ms | FFN ms | A->F MB/token |\n  |---:|---:|---:|---:|\n");
    for (int l = 0; l < s->n_layers; l++)
        fprintf(f, "  | %d | %.4f | %.4f | %.4f |\n", l, s->attn_ms_layer[l], s->ffn_ms_layer[l],
                s->a2f_mb_per_token_layer[l]);
}

void *gp_stats_report_json(const gp_stats_summary *s)
{
    json_t *o = json_object(), *layers = json_array();
    for (int l = 0; l < s->n_layers; l++)
        json_array_append_new(layers, json_pack("{s:i, s:f, s:f, s:f}", "layer", l, "attn_ms", s->attn_ms_layer[l],
                                                "ffn_ms", s->ffn_ms_layer[l], "a2f_mb_per_token",
                                                s->a2f_mb_per_token_layer[l]));
    json_object_set_new(o, "split", json_pack("{s:i, s:i, s:i, s:i, s:b, s:s}", "a_requested", s->split.a_req,
                                              "f_requested", s->split.f_req, "a_obtained", s->split.a_got,
                                              "f_obtained", s->split.f_got, "partitioned", s->split.partitioned,
                                              "unit", s->split.unit ? s->split.unit : "SMs"));
    json_object_update_new(o, json_pack("{s:i, s:i, s:i, s:i, s:f, s:f, s:f, s:f, s:f, s:f, s:f}", "steps", s->steps,
                                        "B", s->B, "M", s->M, "n_layers", s->n_layers, "step_ms_mean", s->step_ms_mean,
                                        "step_ms_min", s->step_ms_min, "step_ms_max", s->step_ms_max, "tokens_per_s",
                                        s->tokens_per_s, "attn_ms_per_layer", s->attn_ms_per_layer,
                                        "ffn_ms_per_layer", s->ffn_ms_per_layer, "a2f_mb_per_token",
                                        s->a2f_mb_per_token));
    json_object_update_new(o, json_pack("{s:f, s:i, s:f, s:f, s:f, s:f, s:f, s:f}", "ring_occupancy_mean",
                                        s->ring_occupancy_mean, "ring_occupancy_max", (int)s->ring_occupancy_max,
                                        "attn_backlog_mean", s->attn_backlog_mean, "ffn_backlog_mean",
                                        s->ffn_backlog_mean, "producer_wait_ms", s->producer_wait_ms,
                                        "consumer_wait_ms", s->consumer_wait_ms, "attn_idle_share",
                                        s->attn_idle_share, "ffn_idle_share", s->ffn_idle_share));
    json_object_set_new(o, "layers", layers);
    return o;
}
