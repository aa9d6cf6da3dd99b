/* libFuzzer target for gp_config_parse_json: any bytes as config.json. A
 * config that parses must validate and give finite RoPE frequencies. */
#include <math.h>
#include <string.h>

#include "fuzz_target.h"

/* RoPE tables beyond this are real configs' business, not the parser's. */
#define FUZZ_MAX_HEAD_DIM 4096

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    gp_config c;
    memset(&c, 0x5a, sizeof c);
    const gp_config before = c;
    gp_clear_error();
    gp_status s = gp_config_parse_json((const char *)data, size, "fuzz/config.json", &c);
    if (s != GP_OK) {
        fuzz_check_failure(s, "gp_config_parse_json");
        FUZZ_REQUIRE(memcmp(&c, &before, sizeof c) == 0, "a failed parse wrote its output");
        return 0;
    }
    FUZZ_REQUIRE(memchr(data, '\0', size) == NULL, "accepted JSON text with a NUL byte");
    gp_clear_error();
    s = gp_config_validate(&c);
    FUZZ_REQUIRE(s == GP_OK, "parsed config does not validate: %s", gp_last_error());
    FUZZ_REQUIRE(memchr(c.name, '\0', sizeof c.name) != NULL, "name is not terminated");
    (void)gp_config_param_count(&c);
    FUZZ_REQUIRE(gp_config_qkv_rows(&c) > 0, "qkv rows %d", gp_config_qkv_rows(&c));
    if (c.head_dim <= FUZZ_MAX_HEAD_DIM) {
        float inv[FUZZ_MAX_HEAD_DIM / 2];
        gp_rope_inv_freq(&c, inv);
        for (int i = 0; i < c.head_dim / 2; i++)
            FUZZ_REQUIRE(isfinite(inv[i]) && inv[i] >= 0.0f, "inv_freq[%d] = %g", i,
                         (double)inv[i]);
    }
    return 0;
}
