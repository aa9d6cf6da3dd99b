/* Tests of the end-of-sequence ids generate reads from a checkpoint: every
 * accepted form of eos_token_id, which file wins, and every refused value
 * with its message. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "gp_tools.h"

static gp_status parse(const char *text, gp_eos_ids *e, bool *found)
{
    return gp_eos_parse_json(text, strlen(text), "g.json", 100, e, found);
}

static void test_forms(void **state)
{
    (void)state;
    gp_eos_ids e;
    bool found;
    assert_int_equal(parse("{\"eos_token_id\": 2}", &e, &found), GP_OK);
    assert_true(found);
    assert_int_equal(e.n, 1);
    assert_int_equal(e.ids[0], 2);
    assert_int_equal(parse("{\"eos_token_id\": [7, 9, 7, 0]}", &e, &found), GP_OK);
    assert_int_equal(e.n, 3); /* duplicates kept once */
    assert_true(gp_eos_has(&e, 0) && gp_eos_has(&e, 9) && !gp_eos_has(&e, 2));
    assert_int_equal(parse("{\"eos_token_id\": null}", &e, &found), GP_OK);
    assert_false(found);
    assert_int_equal(parse("{\"bos_token_id\": 1}", &e, &found), GP_OK);
    assert_false(found);
    assert_int_equal(e.n, 0);
    assert_int_equal(parse("{\"eos_token_id\": []}", &e, &found), GP_OK);
    assert_true(found);
    assert_int_equal(e.n, 0);
}

static void test_bad(void **state)
{
    (void)state;
    struct { const char *text, *needle; } bad[] = {
        {"{\"eos_token_id\": 100}", "g.json: eos_token_id 100 is outside the vocabulary; allowed: [0, 99]"},
        {"{\"eos_token_id\": -1}", "eos_token_id -1 is outside"},
        {"{\"eos_token_id\": \"2\"}", "g.json: eos_token_id: expected an integer token id or a list of them"},
        {"{\"eos_token_id\": [1, 2.5]}", "expected an integer"},
        {"{\"eos_token_id\": [[1]]}", "expected an integer"},
        {"{\"eos_token_id\": true}", "expected an integer"},
        {"{\"eos_token_id\": 2", "g.json: invalid JSON at line"},
        {"[2]", "g.json: expected a JSON object"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        gp_eos_ids e;
        bool found;
        assert_int_equal(parse(bad[i].text, &e, &found), GP_ERR_FORMAT);
        if (!strstr(gp_last_error(), bad[i].needle))
            fail_msg("'%s': message '%s' does not mention '%s'", bad[i].text, gp_last_error(), bad[i].needle);
    }
}

static void put(const char *dir, const char *name, const char *text)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (!text) {
        unlink(path);
        return;
    }
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void test_dirs(void **state)
{
    (void)state;
    char dir[] = "/tmp/gp_eos_XXXXXX";
    assert_non_null(mkdtemp(dir));
    gp_eos_ids e;
    /* generation_config.json wins */
    put(dir, "config.json", "{\"eos_token_id\": 3}");
    put(dir, "generation_config.json", "{\"eos_token_id\": [4, 5]}");
    assert_int_equal(gp_eos_load_dir(dir, 100, &e), GP_OK);
    assert_string_equal(e.from, "generation_config.json");
    assert_int_equal(e.n, 2);
    assert_int_equal(e.ids[0], 4);
    /* without the key there, or without the file, config.json's */
    put(dir, "generation_config.json", "{\"bos_token_id\": 1}");
    assert_int_equal(gp_eos_load_dir(dir, 100, &e), GP_OK);
    assert_string_equal(e.from, "config.json");
    assert_int_equal(e.ids[0], 3);
    put(dir, "generation_config.json", NULL);
    assert_int_equal(gp_eos_load_dir(dir, 100, &e), GP_OK);
    assert_string_equal(e.from, "config.json");
    /* neither: none */
    put(dir, "config.json", "{}");
    assert_int_equal(gp_eos_load_dir(dir, 100, &e), GP_OK);
    assert_null(e.from);
    assert_int_equal(e.n, 0);
    /* a malformed generation_config.json is refused, naming it */
    put(dir, "generation_config.json", "{");
    assert_int_equal(gp_eos_load_dir(dir, 100, &e), GP_ERR_FORMAT);
    assert_non_null(strstr(gp_last_error(), "generation_config.json: invalid JSON"));
    put(dir, "generation_config.json", NULL);
    put(dir, "config.json", NULL);
    rmdir(dir);
    /* the committed checkpoints name 2 in both files */
    assert_int_equal(gp_eos_load_dir(GP_TEST_DATA_DIR "/tiny", 256, &e), GP_OK);
    assert_string_equal(e.from, "generation_config.json");
    assert_int_equal(e.n, 1);
    assert_int_equal(e.ids[0], 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_forms),
        cmocka_unit_test(test_bad),
        cmocka_unit_test(test_dirs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
