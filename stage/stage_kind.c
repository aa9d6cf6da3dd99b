/* Names of the stage kinds, for messages and reports. */
#include "gp_stage.h"

const char *gp_stage_kind_name(gp_stage_kind k)
{
    static const char *const names[GP_STAGE_COUNT] = {"embed", "attn", "ffn", "qkv", "attn_core", "o_ffn_qkv",
                                                      "head"};
    return (unsigned)k < GP_STAGE_COUNT ? names[k] : "unknown";
}
