/* Chat for greenpipe generate --chat and greenpipe chat: the template and
 * its end-of-turn ids, user messages rendered for a batch, and the
 * conversation that prefills only each turn's new tokens onto the KV cache
 * the earlier turns left. */
#include "gen_chat_impl.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

gp_status gen_chat_setup(const gp_tokenizer *tok, const char *dir, const char *name, gen_chat *out)
{
    memset(out, 0, sizeof *out);
    if (name)
        GP_TRY(gp_chat_template_by_name(name, &out->tpl));
    else
        GP_TRY(gp_chat_template_load_dir(dir, &out->tpl));
    /* a stop text the tokenizer splits into pieces cannot end an answer by
     * one id; the EOS ids and --steps still do */
    for (const char *const *t = gp_chat_template_stop_texts(out->tpl); *t; t++) {
        int32_t id = gp_tokenizer_token_id(tok, *t);
        if (id >= 0 && out->n_stop_ids < GEN_CHAT_MAX_STOP_IDS)
            out->stop_ids[out->n_stop_ids++] = id;
    }
    return GP_OK;
}

void gen_chat_free_texts(char **rendered, size_t *rlens, int n)
{
    for (int i = 0; rendered && i < n; i++)
        free(rendered[i]);
    free(rendered);
    free(rlens);
}

gp_status gen_chat_render_each(const gen_chat *c, const char *system, const char *const *texts, const size_t *lens,
                               int n, char ***rendered, size_t **rlens)
{
    *rendered = calloc((size_t)n, sizeof **rendered);
    *rlens = calloc((size_t)n, sizeof **rlens);
    if (!*rendered || !*rlens) {
        gen_chat_free_texts(*rendered, *rlens, n);
        GP_FAIL(GP_ERR_NO_MEMORY, "out of memory for %d chat prompts", n);
    }
    for (int i = 0; i < n; i++) {
        gp_chat_msg m[2];
        size_t k = 0;
        if (system)
            m[k++] = (gp_chat_msg){.role = GP_CHAT_SYSTEM, .content = system, .len = strlen(system)};
        m[k++] = (gp_chat_msg){.role = GP_CHAT_USER, .content = texts[i], .len = lens[i]};
        gp_status st = gp_chat_render(c->tpl, m, k, true, &(*rendered)[i], &(*rlens)[i]);
        if (st != GP_OK) {
            gen_chat_free_texts(*rendered, *rlens, n);
            *rendered = NULL;
            *rlens = NULL;
            return st;
        }
    }
    return GP_OK;
}

/* ------------------------------------------------------------ conversation */

/* The conversation's messages, their texts owned. */
typedef struct convo {
    gp_chat_msg *m;
    size_t n, cap;
} convo;

static gp_status convo_add(convo *c, gp_chat_role role, const char *text, size_t len)
{
    if (c->n == c->cap) {
        size_t cap = c->cap ? 2 * c->cap : 16;
        gp_chat_msg *m = realloc(c->m, cap * sizeof *m);
        if (!m)
            GP_FAIL(GP_ERR_NO_MEMORY, "out of memory for %zu messages", cap);
        c->m = m;
        c->cap = cap;
    }
    char *copy = malloc(len + 1);
    if (!copy)
        GP_FAIL(GP_ERR_NO_MEMORY, "out of memory for a message of %zu bytes", len);
    memcpy(copy, text, len);
    copy[len] = '\0';
    c->m[c->n++] = (gp_chat_msg){.role = role, .content = copy, .len = len};
    return GP_OK;
}

static void convo_drop_last(convo *c)
{
    free((char *)c->m[--c->n].content);
}

static void convo_free(convo *c)
{
    while (c->n)
        convo_drop_last(c);
    free(c->m);
}

/* Token ids, growable. */
typedef struct ids {
    int32_t *v;
    long n, cap;
} ids;

static gp_status ids_add(ids *a, const int32_t *v, long n)
{
    if (a->n + n > a->cap) {
        long cap = a->cap ? a->cap : 256;
        while (cap < a->n + n)
            cap *= 2;
        int32_t *p = realloc(a->v, (size_t)cap * sizeof *p);
        if (!p)
            GP_FAIL(GP_ERR_NO_MEMORY, "out of memory for %ld token ids", cap);
        a->v = p;
        a->cap = cap;
    }
    memcpy(a->v + a->n, v, (size_t)n * sizeof *v);
    a->n += n;
    return GP_OK;
}

/* One user line: up to a newline not preceded by '\' (which joins the next
 * line, the backslash dropped). 1: a line in *buf; 0: end of input with
 * nothing read; -1: the read was interrupted (Ctrl-C) or failed. */
static int read_message(FILE *in, char **buf, size_t *len)
{
    char *line = NULL;
    size_t cap = 0, n = 0;
    bool any = false;
    for (;;) {
        ssize_t r = getline(&line, &cap, in);
        if (r < 0) {
            bool intr = ferror(in) && errno == EINTR;
            clearerr(in);
            free(line);
            if (intr || !any) {
                free(*buf);
                *buf = NULL;
                return intr ? -1 : 0;
            }
            return 1; /* the last line had no newline */
        }
        any = true;
        size_t l = (size_t)r;
        if (l && line[l - 1] == '\n')
            l--;
        if (l && line[l - 1] == '\r')
            l--;
        bool more = l && line[l - 1] == '\\';
        if (more)
            l--;
        char *grown = realloc(*buf, n + l + 2);
        if (!grown) {
            free(line);
            return -1;
        }
        *buf = grown;
        memcpy(*buf + n, line, l);
        n += l;
        if (!more)
            break;
        (*buf)[n++] = '\n';
    }
    free(line);
    (*buf)[n] = '\0';
    *len = n;
    return 1;
}

static void print_ids(const char *what, int turn, const int32_t *v, long n)
{
    fprintf(stderr, "greenpipe: turn %d %s (%ld):", turn, what, n);
    for (long i = 0; i < n; i++)
        fprintf(stderr, " %d", v[i]);
    fprintf(stderr, "\n");
}

/* The text of a reply as printed: tokens without a final stop or EOS id,
 * cut before the first stop string. */
static gp_status reply_text(const gen_chat_env *e, const gp_gen_result *r, char **text, size_t *len)
{
    int n = r->n;
    if (n && (r->stop == GP_GEN_STOP_EOS || r->stop == GP_GEN_STOP_TOKEN))
        n--;
    GP_TRY(gp_tokenizer_decode(e->tok, r->tokens, (size_t)n, true, text, len));
    for (int i = 0; r->stop == GP_GEN_STOP_STRING && i < e->gen.n_stop_strings; i++) {
        char *at = strstr(*text, e->gen.stop_strings[i]);
        if (at) {
            *at = '\0';
            *len = (size_t)(at - *text);
        }
    }
    return GP_OK;
}

/* The tokens of this turn's prefill: the whole conversation into a fresh
 * sequence (*full), or the end of the last reply and the new turn. */
static gp_status turn_tokens(const gen_chat_env *e, const convo *c, bool whole, int32_t unfed, ids *pf, bool *full)
{
    char *text = NULL;
    size_t len = 0;
    gp_status st = GP_ERR_UNSUPPORTED;
    pf->n = 0;
    if (!whole) {
        st = gp_chat_render_delta(e->chat->tpl, c->m, c->n, &text, &len);
        if (st != GP_OK && st != GP_ERR_UNSUPPORTED)
            return st;
    }
    *full = st != GP_OK;
    if (*full)
        GP_TRY(gp_chat_render(e->chat->tpl, c->m, c->n, true, &text, &len));
    else if (unfed >= 0 && (st = ids_add(pf, &unfed, 1)) != GP_OK) {
        free(text);
        return st;
    }
    int32_t *v = NULL;
    size_t n = 0;
    st = gp_tokenizer_encode(e->tok, text, len, false, &v, &n); /* the template wrote BOS */
    free(text);
    if (st == GP_OK)
        st = ids_add(pf, v, (long)n);
    free(v);
    return st;
}

int gen_chat_converse(const gen_chat_env *e, FILE *in, FILE *out)
{
    convo c = {0};
    ids held = {0}, pf = {0};
    int32_t *gen = NULL;
    char *line = NULL;
    size_t line_len = 0;
    int rc = 1, turn = 0;
    bool whole = true;   /* the next turn renders the whole conversation */
    int32_t unfed = -1;  /* the last answer's final token, never fed back */
    bool tty = isatty(fileno(in));
    gp_status st = GP_OK;
    if (e->system && (st = convo_add(&c, GP_CHAT_SYSTEM, e->system, strlen(e->system))) != GP_OK)
        goto fail;
    for (;;) {
        if (tty) {
            fputs("> ", out);
            fflush(out);
        }
        int got = read_message(in, &line, &line_len);
        if (got <= 0) {
            if (got < 0)
                fprintf(stderr, "\ngreenpipe: the conversation ends (Ctrl-C while waiting for a message)\n");
            break;
        }
        if (line_len == 0)
            continue;
        if ((st = convo_add(&c, GP_CHAT_USER, line, line_len)) != GP_OK)
            goto fail;
        bool full;
        if ((st = turn_tokens(e, &c, whole, unfed, &pf, &full)) != GP_OK)
            goto fail;
        long holds = full ? 0 : held.n;
        long room = e->max_context - holds - pf.n + 1; /* the last token is never fed back */
        if (room < 1) {
            fprintf(stderr, "greenpipe chat: this message needs %ld more token(s) beside the %ld the conversation "
                    "holds, beyond its context of %ld (--max-context); the message is dropped: end the "
                    "conversation (Ctrl-D) and start a new one\n", pf.n, holds, e->max_context);
            convo_drop_last(&c);
            continue;
        }
        gp_gen_params gp = e->gen;
        gp.max_tokens = gp.max_tokens && gp.max_tokens <= room ? gp.max_tokens : room;
        if (e->gen.max_tokens > room)
            fprintf(stderr, "greenpipe: turn %d: the answer may take %ld token(s), not --steps %ld: the context "
                    "(--max-context %ld) holds %ld\n", turn + 1, room, e->gen.max_tokens, e->max_context,
                    holds + pf.n);
        int32_t *g = realloc(gen, (size_t)gp.max_tokens * sizeof *g);
        if (!g) {
            st = GP_ERR_NO_MEMORY;
            gp_set_error("out of memory for %ld tokens", gp.max_tokens);
            goto fail;
        }
        gen = g;
        if (full && held.n) {
            e->x.session->reset_seq(e->x.ctx, 0);
            held.n = 0;
        }
        gp_gen_out *go = NULL;
        if ((st = gp_gen_out_create(e->tok, 1, out, &go)) != GP_OK)
            goto fail;
        gp_gen_seq seq = {.seq = 0, .tokens = pf.v, .n = (int)pf.n, .history = held.v, .n_history = held.n,
                          .rng = e->rng};
        gp_gen_result r = {.tokens = gen};
        gp_gen_stats gs;
        *e->gen.interrupt = 0;
        st = gp_gen_run(e->x, e->pl, e->cfg->vocab, &gp, 1, &seq, go, NULL, &r, &gs);
        gp_gen_out_free(go);
        fflush(out);
        if (st != GP_OK) {
            fprintf(stderr, "greenpipe chat: %s: %s: %s\n", gs.failed ? gs.failed : "generation", gp_status_str(st),
                    gp_last_error());
            goto done;
        }
        turn++;
        if (e->verbose_prompt) {
            print_ids(full && turn > 1 ? "prefill, the whole conversation" : "prefill", turn, pf.v, pf.n);
            print_ids("generated", turn, r.tokens, r.n);
        }
        /* the sequence now holds the prefill and every answer token but
         * the last, which the next turn's prefill starts with unless a
         * stop id ended the answer (the template's end-of-turn text follows
         * in its place) */
        if ((st = ids_add(&held, pf.v, pf.n)) != GP_OK || (r.n > 1 && (st = ids_add(&held, r.tokens, r.n - 1)) != GP_OK))
            goto fail;
        bool stop_id = r.stop == GP_GEN_STOP_EOS || r.stop == GP_GEN_STOP_TOKEN;
        unfed = r.n && !stop_id ? r.tokens[r.n - 1] : -1;
        /* a stop string leaves tokens past the text kept: start afresh */
        whole = r.stop == GP_GEN_STOP_STRING;
        char *reply = NULL;
        size_t reply_len = 0;
        if ((st = reply_text(e, &r, &reply, &reply_len)) != GP_OK)
            goto fail;
        st = convo_add(&c, GP_CHAT_ASSISTANT, reply, reply_len);
        free(reply);
        if (st != GP_OK)
            goto fail;
        fprintf(stderr, "greenpipe: turn %d: %d token(s) (stop reason: %s), %ld prefilled%s; time to first token "
                "%.3f s", turn, r.n, gp_gen_stop_name(r.stop), pf.n, full && turn > 1 ? " (the whole conversation)" : "",
                r.ttft_s);
        if (r.n > 1)
            fprintf(stderr, "; decode %.2f tokens/s", gp_gen_decode_rate(&r));
        fprintf(stderr, "; the conversation holds %ld of %ld tokens; host-timed\n", held.n + (unfed >= 0),
                e->max_context);
    }
    rc = 0;
    goto done;
fail:
    fprintf(stderr, "greenpipe chat: %s: %s\n", gp_status_str(st), gp_last_error());
    rc = 1;
done:
    convo_free(&c);
    free(held.v);
    free(pf.v);
    free(gen);
    free(line);
    return rc;
}
