/* greenpipe tokenize: text -> ids (or ids -> text with --decode) through a
 * model directory's tokenizer or a tokenizer file; ids as HF's
 * encode(text).ids gives them, so a prompt can be checked against HF. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gp_tokenizer.h"
#include "gp_tools.h"

/* Input files may be whole documents; the cap only stops a wrong path. */
#define TOKENIZE_FILE_CAP ((size_t)1 << 30)

static void tok_usage(FILE *f)
{
    fprintf(f,
            "usage: greenpipe tokenize (--model DIR | --tokenizer FILE) (--text TEXT | --file FILE | --decode IDS)\n"
            "  --model DIR        DIR/tokenizer.json, else DIR/tokenizer.model (tiktoken: its BOS is\n"
            "                     config.json's bos_token_id unless tokenizer_config.json's add_bos_token\n"
            "                     is false, as HF's Llama 3 tokenizer)\n"
            "  --tokenizer FILE   a HF tokenizer.json or a tiktoken-format tokenizer.model\n"
            "  --text TEXT        print TEXT's ids, space-separated on one line (with BOS where the\n"
            "                     tokenizer's post-processor adds it, as HF's encode(text).ids)\n"
            "  --file FILE        the same for FILE's exact bytes (a trailing newline included); '-'\n"
            "                     reads standard input, and pipes and <(...) are read to their end\n"
            "  --decode IDS       print the text of ids like \"128000 9906 1917\" (special tokens shown)\n");
}

/* "12 7 9": whitespace-separated ids, each a non-negative int32. */
static gp_status parse_ids(const char *s, int32_t **ids, size_t *n)
{
    size_t cap = strlen(s) / 2 + 1, k = 0;
    int32_t *v = malloc(cap * sizeof *v);
    if (!v)
        GP_FAIL(GP_ERR_NO_MEMORY, "--decode: out of memory");
    char *copy = strdup(s);
    if (!copy) {
        free(v);
        GP_FAIL(GP_ERR_NO_MEMORY, "--decode: out of memory");
    }
    gp_status st = GP_OK;
    char *save = NULL;
    for (char *tok = strtok_r(copy, " \t\n,", &save); tok; tok = strtok_r(NULL, " \t\n,", &save)) {
        long id;
        if ((st = gp_parse_long(tok, 0, INT32_MAX, "--decode", &id)) != GP_OK)
            break;
        v[k++] = (int32_t)id;
    }
    free(copy);
    if (st == GP_OK && k == 0) {
        gp_set_error("--decode: no ids given; expected ids like \"128000 9906 1917\"");
        st = GP_ERR_INVALID_ARG;
    }
    if (st != GP_OK) {
        free(v);
        return st;
    }
    *ids = v;
    *n = k;
    return GP_OK;
}

/* what names the input in messages: "--text" or "--file PATH" */
static int run(gp_tokenizer *t, const char *text, size_t len, const char *decode, const char *what)
{
    if (decode) {
        int32_t *ids = NULL;
        size_t n = 0;
        char *out = NULL;
        size_t out_len = 0;
        gp_status st = parse_ids(decode, &ids, &n);
        if (st == GP_OK)
            st = gp_tokenizer_decode(t, ids, n, false, &out, &out_len);
        free(ids);
        if (st != GP_OK) {
            fprintf(stderr, "greenpipe tokenize: %s%s\n", strncmp(gp_last_error(), "--decode", 8) ? "--decode: " : "",
                    gp_last_error());
            return st == GP_ERR_NO_MEMORY ? 1 : 2;
        }
        fwrite(out, 1, out_len, stdout);
        putchar('\n');
        free(out);
        return 0;
    }
    int32_t *ids = NULL;
    size_t n = 0;
    gp_status st = gp_tokenizer_encode(t, text, len, true, &ids, &n);
    if (st != GP_OK) {
        fprintf(stderr, "greenpipe tokenize: %s: %s\n", what, gp_last_error());
        return st == GP_ERR_NO_MEMORY ? 1 : 2;
    }
    for (size_t i = 0; i < n; i++)
        printf(i ? " %d" : "%d", (int)ids[i]);
    putchar('\n');
    free(ids);
    return 0;
}

int gp_cmd_tokenize(int argc, char **argv)
{
    enum { O_MODEL = 1, O_TOKENIZER, O_TEXT, O_FILE, O_DECODE, O_HELP };
    static const struct option opts[] = {
        {"model", required_argument, NULL, O_MODEL},   {"tokenizer", required_argument, NULL, O_TOKENIZER},
        {"text", required_argument, NULL, O_TEXT},     {"file", required_argument, NULL, O_FILE},
        {"decode", required_argument, NULL, O_DECODE}, {"help", no_argument, NULL, O_HELP},
        {NULL, 0, NULL, 0},
    };
    const char *val[O_HELP] = {NULL};
    opterr = 0;
    optind = 1;
    int c;
    while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
        if (c == O_HELP || c == 'h') {
            tok_usage(stdout);
            return 0;
        }
        if (c == ':') {
            fprintf(stderr, "greenpipe tokenize: %s needs a value\n", argv[optind - 1]);
            return 2;
        }
        if (c == '?') {
            fprintf(stderr, "greenpipe tokenize: unknown option '%s'\n", argv[optind - 1]);
            tok_usage(stderr);
            return 2;
        }
        if (val[c]) {
            fprintf(stderr, "greenpipe tokenize: --%s given more than once; each option may be given once\n",
                    opts[c - 1].name);
            return 2;
        }
        val[c] = optarg;
    }
    if (optind < argc) {
        fprintf(stderr, "greenpipe tokenize: unexpected argument '%s'\n", argv[optind]);
        tok_usage(stderr);
        return 2;
    }
    if (!val[O_MODEL] == !val[O_TOKENIZER]) {
        fprintf(stderr, "greenpipe tokenize: give exactly one of --model DIR and --tokenizer FILE\n");
        return 2;
    }
    if (!!val[O_TEXT] + !!val[O_FILE] + !!val[O_DECODE] != 1) {
        fprintf(stderr, "greenpipe tokenize: give exactly one of --text TEXT, --file FILE and --decode IDS\n");
        return 2;
    }
    gp_tokenizer *t = NULL;
    gp_status st = val[O_MODEL] ? gp_tokenizer_load_dir(val[O_MODEL], &t) : gp_tokenizer_load(val[O_TOKENIZER], &t);
    if (st != GP_OK) {
        fprintf(stderr, "greenpipe tokenize: %s %s: %s: %s\n", val[O_MODEL] ? "--model" : "--tokenizer",
                val[O_MODEL] ? val[O_MODEL] : val[O_TOKENIZER], gp_status_str(st), gp_last_error());
        return st == GP_ERR_NO_MEMORY ? 1 : 2;
    }
    char *buf = NULL;
    size_t len = 0;
    const char *text = val[O_TEXT];
    if (text) {
        len = strlen(text);
    } else if (val[O_FILE]) {
        st = gp_read_input(val[O_FILE], TOKENIZE_FILE_CAP, &buf, &len);
        if (st != GP_OK) {
            fprintf(stderr, "greenpipe tokenize: --file: %s\n", gp_last_error());
            gp_tokenizer_free(t);
            return gp_input_exit_code(st);
        }
        text = buf;
    }
    char what[4096];
    snprintf(what, sizeof what, "%s%s", val[O_FILE] ? "--file " : "--text", val[O_FILE] ? val[O_FILE] : "");
    int rc = run(t, text, len, val[O_DECODE], what);
    free(buf);
    gp_tokenizer_free(t);
    return rc;
}
