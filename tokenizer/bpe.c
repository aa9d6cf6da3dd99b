/* BPE of one pre-token piece: a linked list of symbols and a min-heap of
 * candidate merges keyed by (rank, position), so a piece of n bytes costs
 * O(n log n) lookups, never the O(n^2) rescans of the textbook loop. The
 * lowest rank merges first, the leftmost on ties: HF's BPE and tiktoken's
 * _byte_pair_merge agree on that order. */
#include "tok_impl.h"

#include <stdlib.h>
#include <string.h>

typedef struct bpe_sym {
    uint32_t start, len; /* bytes of the piece */
    int32_t id;
    int32_t prev, next;  /* -1 at the ends; len 0 marks a symbol merged away */
} bpe_sym;

typedef struct bpe_cand {
    uint64_t key;        /* rank << 32 | left symbol's index: HF and tiktoken tie-break leftmost */
    int32_t left, right; /* symbol indices when pushed */
    int32_t lid, rid;    /* their ids then: a merge went stale if either changed */
    int32_t id;          /* the merged token */
} bpe_cand;

struct gp_bpe_scratch {
    bpe_sym *sym;   /* [sym_cap] */
    bpe_cand *heap; /* [heap_cap] */
    size_t sym_cap, heap_cap, n_heap;
};

gp_status gp_bpe_scratch_create(gp_bpe_scratch **out)
{
    *out = calloc(1, sizeof **out);
    if (!*out)
        GP_FAIL(GP_ERR_NO_MEMORY, "tokenizer: cannot allocate BPE scratch");
    return GP_OK;
}

void gp_bpe_scratch_free(gp_bpe_scratch *s)
{
    if (!s)
        return;
    free(s->sym);
    free(s->heap);
    free(s);
}

static gp_status reserve(gp_bpe_scratch *s, size_t n)
{
    if (n > s->sym_cap) {
        size_t cap = n < 64 ? 64 : n;
        bpe_sym *v = realloc(s->sym, cap * sizeof *v);
        if (!v)
            GP_FAIL(GP_ERR_NO_MEMORY, "tokenizer: cannot allocate BPE symbols for a %zu-byte piece", n);
        s->sym = v;
        s->sym_cap = cap;
    }
    if (n > s->heap_cap) { /* at most one live candidate per symbol, plus stale ones pushed before */
        size_t cap = n < 64 ? 64 : n;
        bpe_cand *v = realloc(s->heap, cap * sizeof *v);
        if (!v)
            GP_FAIL(GP_ERR_NO_MEMORY, "tokenizer: cannot allocate BPE candidates for a %zu-byte piece", n);
        s->heap = v;
        s->heap_cap = cap;
    }
    return GP_OK;
}

static gp_status heap_push(gp_bpe_scratch *s, bpe_cand c)
{
    if (s->n_heap == s->heap_cap) {
        size_t cap = 2 * s->heap_cap;
        bpe_cand *v = realloc(s->heap, cap * sizeof *v);
        if (!v)
            GP_FAIL(GP_ERR_NO_MEMORY, "tokenizer: cannot allocate %zu BPE candidates", cap);
        s->heap = v;
        s->heap_cap = cap;
    }
    size_t i = s->n_heap++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (s->heap[p].key <= c.key)
            break;
        s->heap[i] = s->heap[p];
        i = p;
    }
    s->heap[i] = c;
    return GP_OK;
}

static bpe_cand heap_pop(gp_bpe_scratch *s)
{
    bpe_cand top = s->heap[0], last = s->heap[--s->n_heap];
    size_t i = 0, n = s->n_heap;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n)
            break;
        if (c + 1 < n && s->heap[c + 1].key < s->heap[c].key)
            c++;
        if (s->heap[c].key >= last.key)
            break;
        s->heap[i] = s->heap[c];
        i = c;
    }
    if (n)
        s->heap[i] = last;
    return top;
}

/* The merge of symbols l and r, if the model has one: pushed as a candidate. */
static gp_status consider(const gp_tokenizer *t, gp_bpe_scratch *s, const char *p, int32_t l, int32_t r)
{
    const bpe_sym *a = &s->sym[l], *b = &s->sym[r];
    int32_t rank, id;
    if (t->kind == GP_TOK_TIKTOKEN) {
        /* tiktoken ranks byte strings, not pairs: the concatenation's rank is
         * the merge's rank and the merged token's id */
        rank = id = gp_strtab_get(&t->by_bytes, p + a->start, (size_t)a->len + b->len);
        if (rank < 0)
            return GP_OK;
    } else {
        const gp_pair_slot *m = gp_pairtab_get(&t->merges, a->id, b->id);
        if (!m)
            return GP_OK;
        rank = m->rank;
        id = m->id;
    }
    return heap_push(s, (bpe_cand){.key = ((uint64_t)(uint32_t)rank << 32) | (uint32_t)l,
                                   .left = l, .right = r, .lid = a->id, .rid = b->id, .id = id});
}

/* The initial symbols: one per byte (byte-level, tiktoken) or per character
 * (SentencePiece, with byte fallback or the unknown token for characters
 * outside the vocabulary). Returns the count. */
static gp_status initial_symbols(const gp_tokenizer *t, gp_bpe_scratch *s, const char *p, size_t n, size_t *count)
{
    size_t k = 0;
    bool prev_unk = false;
    const unsigned char *u = (const unsigned char *)p;
    for (size_t i = 0; i < n;) {
        size_t clen = 1;
        int32_t id;
        if (t->kind == GP_TOK_SP) {
            int c = gp_utf8_next(u + i, n - i);
            clen = c > 0 ? (size_t)c : 1; /* encode checked the text; normalization keeps it valid */
            id = gp_strtab_get(&t->by_bytes, p + i, clen);
            if (id < 0 && t->byte_fallback) {
                bool all = true;
                for (size_t j = 0; j < clen; j++)
                    all = all && t->byte_id[u[i + j]] >= 0;
                if (all) { /* HF falls back to bytes only when every byte has its token */
                    for (size_t j = 0; j < clen; j++)
                        s->sym[k++] = (bpe_sym){.start = (uint32_t)(i + j), .len = 1, .id = t->byte_id[u[i + j]]};
                    prev_unk = false;
                    i += clen;
                    continue;
                }
            }
        } else {
            id = t->byte_id[u[i]];
        }
        if (id < 0) {
            if (t->unk_id < 0) { /* HF drops what it can neither find nor call unknown */
                i += clen;
                continue;
            }
            if (prev_unk && t->fuse_unk) {
                s->sym[k - 1].len += (uint32_t)clen;
                i += clen;
                continue;
            }
            id = t->unk_id;
            prev_unk = true;
        } else {
            prev_unk = false;
        }
        s->sym[k++] = (bpe_sym){.start = (uint32_t)i, .len = (uint32_t)clen, .id = id};
        i += clen;
    }
    *count = k;
    return GP_OK;
}

gp_status gp_bpe_piece(const gp_tokenizer *t, gp_bpe_scratch *s, const char *p, size_t n, gp_ids *out)
{
    if (t->kind == GP_TOK_TIKTOKEN || t->ignore_merges) {
        /* a piece that is itself a token is emitted whole, whatever the merges
         * would make of it (tiktoken always; HF with ignore_merges) */
        int32_t id = gp_strtab_get(&t->by_bytes, p, n);
        if (id >= 0)
            return gp_ids_push(out, id);
    }
    if (n > UINT32_MAX / 2)
        GP_FAIL(GP_ERR_INVALID_ARG, "tokenizer: a %zu-byte pre-token is beyond the 2 GiB limit", n);
    GP_TRY(reserve(s, n));
    size_t k;
    GP_TRY(initial_symbols(t, s, p, n, &k));
    if (k == 0)
        return GP_OK;
    for (size_t i = 0; i < k; i++) {
        s->sym[i].prev = (int32_t)i - 1;
        s->sym[i].next = i + 1 < k ? (int32_t)i + 1 : -1;
    }
    s->n_heap = 0;
    for (size_t i = 0; i + 1 < k; i++)
        GP_TRY(consider(t, s, p, (int32_t)i, (int32_t)i + 1));
    while (s->n_heap) {
        bpe_cand c = heap_pop(s);
        bpe_sym *a = &s->sym[c.left];
        if (a->len == 0 || a->next != c.right || a->id != c.lid || s->sym[c.right].id != c.rid)
            continue; /* stale: a neighbour merged since */
        bpe_sym *b = &s->sym[c.right];
        a->len += b->len;
        a->id = c.id;
        a->next = b->next;
        if (b->next >= 0)
            s->sym[b->next].prev = c.left;
        b->len = 0;
        if (a->prev >= 0)
            GP_TRY(consider(t, s, p, a->prev, c.left));
        if (a->next >= 0)
            GP_TRY(consider(t, s, p, c.left, a->next));
    }
    for (int32_t i = 0; i >= 0; i = s->sym[i].next)
        GP_TRY(gp_ids_push(out, s->sym[i].id));
    return GP_OK;
}
