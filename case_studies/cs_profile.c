/* The profile a default run follows: whether it was measured on this device,
 * and the configuration it knows best for a workload (its measurement when
 * the device matches, else its cold-start rule), with the row's tag and the
 * sentence the report gives the choice. */
#include <stdio.h>
#include <string.h>

#include "cs_tuning_impl.h"

bool gp_cs_tuning_device_matches(const gp_cs_tuning *t, const gp_cs_device *d, char *why, size_t why_len)
{
    char dummy[8];
    if (!why || why_len == 0) {
        why = dummy;
        why_len = sizeof dummy;
    }
    why[0] = '\0';
    if (!t || !d) {
        snprintf(why, why_len, "no profile or no device");
        return false;
    }
    if (!t->has_device) {
        snprintf(why, why_len, "the profile names no device");
        return false;
    }
    bool named = false;
    for (int i = 0; i < t->n_device_names && !named; i++)
        named = strcmp(t->device_names[i], d->name) == 0;
    /* name, SM count and compute capability: a cut-down part or a new
     * stepping under a known name is another device for split timings */
    if (!named)
        snprintf(why, why_len, "the GPU is \"%s\", the profile's is \"%s\"%s", d->name, t->device_names[0],
                 t->n_device_names > 1 ? " (or another it names)" : "");
    else if (d->sm_count != t->device_sm_count)
        snprintf(why, why_len, "the GPU has %d SMs, the profile's %d", d->sm_count, t->device_sm_count);
    else if (d->cc_major != t->device_cc_major || d->cc_minor != t->device_cc_minor)
        snprintf(why, why_len, "the GPU is compute capability %d.%d, the profile's %d.%d", d->cc_major, d->cc_minor,
                 t->device_cc_major, t->device_cc_minor);
    else
        return true;
    return false;
}

const char *gp_cs_tuning_name(const gp_cs_tuning *t)
{
    return t ? t->name : "";
}

const char *gp_cs_tuning_source(const gp_cs_tuning *t)
{
    return t ? t->source : "";
}

static void choice_text(const gp_cs_choice *c, char *buf, size_t len)
{
    if (c->seq)
        snprintf(buf, len, "seq");
    else
        snprintf(buf, len, "A=%d M=%d depth %u %s, --gemm-tune %d", c->attn_sms, c->M, c->depth,
                 gp_placement_name(c->placement), c->gemm_tune);
}

gp_status gp_cs_profile_choose(const gp_cs_tuning *t, const gp_cs_device *d, const gp_config *cfg,
                               const gp_sm_info *info, const gp_cs_workload *w, gp_cs_profile_choice *out)
{
    if (!t || !d || !cfg || !info || !w || !out)
        GP_FAIL(GP_ERR_INVALID_ARG, "profile choice: profile, device, config, SM info, workload and out must be "
                "non-NULL");
    memset(out, 0, sizeof *out);
    char why[256];
    bool match = gp_cs_tuning_device_matches(t, d, why, sizeof why);
    gp_cs_choice rule, best;
    bool found = false;
    GP_TRY(gp_cs_tuning_pick(t, cfg, info, w->B, w->C, &rule, &best, &found));
    char text[160];
    if (match && found) {
        out->best_known = true;
        out->choice = best;
        snprintf(out->tag, sizeof out->tag, "best-known (%.17s)", t->name);
        choice_text(&best, text, sizeof text);
        snprintf(out->note, sizeof out->note, "Profile %s for %s: best known %s (%.3f ms when measured)%s.",
                 t->name, w->label, text, best.ms, best.seq ? "; the seq row is that configuration" : "");
    } else {
        out->choice = rule;
        snprintf(out->tag, sizeof out->tag, "cold-start rule");
        choice_text(&rule, text, sizeof text);
        snprintf(out->note, sizeof out->note, "Profile %s for %s: not measured here (%s), so its cold-start rule: "
                 "%s%s.", t->name, w->label,
                 !match ? why : "no measurement of this workload on this model", text,
                 rule.seq ? " (the seq row)" : "");
    }
    if (!out->choice.seq && out->choice.depth == 0)
        out->choice.depth = GP_RING_DEFAULT_DEPTH; /* a profile written with depth 0 meant the default */
    out->row = !out->choice.seq;
    return GP_OK;
}
