/* Names of the placements of the QKV and O projections (gp_placement) and of
 * where the fill and drain run (gp_fill_drain), for flags, reports and
 * profiles; no CUDA, so the case study's parser and CI use them. */
#include <string.h>

#include "gp_pipeline.h"

const char *gp_placement_name(gp_placement p)
{
    return p == GP_PLACE_QKVO_F ? "qkvo-f" : "qkvo-a";
}

gp_status gp_placement_parse(const char *s, gp_placement *out)
{
    if (s && !strcmp(s, "qkvo-a"))
        *out = GP_PLACE_QKVO_A;
    else if (s && !strcmp(s, "qkvo-f"))
        *out = GP_PLACE_QKVO_F;
    else
        GP_FAIL(GP_ERR_INVALID_ARG, "placement '%s': allowed qkvo-a (QKV and O projections with attention) "
                "or qkvo-f (with the FFN)", s ? s : "(null)");
    return GP_OK;
}

const char *gp_fill_drain_name(gp_fill_drain f)
{
    return f == GP_FILL_DRAIN_PARTITION ? "partition" : "whole";
}

gp_status gp_fill_drain_parse(const char *s, gp_fill_drain *out)
{
    if (s && !strcmp(s, "whole"))
        *out = GP_FILL_DRAIN_WHOLE;
    else if (s && !strcmp(s, "partition"))
        *out = GP_FILL_DRAIN_PARTITION;
    else
        GP_FAIL(GP_ERR_INVALID_ARG, "fill-drain '%s': allowed whole (the stages nothing overlaps run on every "
                "SM) or partition (on the attention and FFN partitions)", s ? s : "(null)");
    return GP_OK;
}
