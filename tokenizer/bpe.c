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
    int32_t mrank, mid;  /* the merge of this symbol and next: rank and merged id; mrank -1: none */
} bpe_sym;

/* A candidate is only its key, rank << 32 | left symbol's index (HF and
 * tiktoken tie-break leftmost): 8 bytes, so a long piece's heap stays small
 * enough for the caches. It is live while the left symbol's mrank is still
 * that rank; one that names the left symbol's current pair at the same rank
 * stands for that pair, whose key it is, so acting on it is right too. */
struct gp_bpe_scratch {
    bpe_sym *sym;   /* [sym_cap] */
    uint64_t *heap; /* [heap_cap] */
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
    if (n > s->heap_cap) { /* the first candidates; merges push more (heap_push grows it) */
        size_t cap = n < 64 ? 64 : n;
        uint64_t *v = realloc(s->heap, cap * sizeof *v);
        if (!v)
            GP_FAIL(GP_ERR_NO_MEMORY, "tokenizer: cannot allocate BPE candidates for a %zu-byte piece", n);
        s->heap = v;
        s->heap_cap = cap;
    }
    return GP_OK;
}

static void sift_down(uint64_t *h, size_t n, size_t i, uint64_t key)
{
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n)
            break;
        if (c + 1 < n && h[c + 1] < h[c])
            c++;
        if (h[c] >= key)
            break;
        h[i] = h[c];
        i = c;
    }
    h[i] = key;
}

static gp_status heap_push(gp_bpe_scratch *s, uint64_t key)
{
    if (s->n_heap == s->heap_cap) {
        size_t cap = 2 * s->heap_cap;
        uint64_t *v = realloc(s->heap, cap * sizeof *v);
        if (!v)
            GP_FAIL(GP_ERR_NO_MEMORY, "tokenizer: cannot allocate %zu BPE candidates", cap);
        s->heap = v;
        s->heap_cap = cap;
    }
    size_t i = s->n_heap++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (s->heap[p] <= key)
            break;
        s->heap[i] = s->heap[p];
        i = p;
    }
    s->heap[i] = key;
    return GP_OK;
}

static uint64_t heap_pop(gp_bpe_scratch *s)
{
    uint64_t top = s->heap[0], last = s->heap[--s->n_heap];
    if (s->n_heap)
        sift_down(s->heap, s->n_heap, 0, last);
    return top;
}

/* The merge of symbols l and r, if the model has one: recorded on l and,
 * when push, pushed as a candidate. */
static gp_status consider(const gp_tokenizer *t, gp_bpe_scratch *s, const char *p, int32_t l, int32_t r, bool push)
{
    bpe_sym *a = &s->sym[l];
    const bpe_sym *b = &s->sym[r];
    int32_t rank, id;
    a->mrank = -1;
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
    a->mrank = rank;
    a->mid = id;
    uint64_t key = ((uint64_t)(uint32_t)rank << 32) | (uint32_t)l;
    if (!push) {
        s->heap[s->n_heap++] = key;
        return GP_OK;
    }
    return heap_push(s, key);
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
    s->sym[k - 1].mrank = -1;
    for (size_t i = 0; i + 1 < k; i++) /* k - 1 <= heap_cap: appended, then made a heap in O(k) */
        GP_TRY(consider(t, s, p, (int32_t)i, (int32_t)i + 1, false));
    for (size_t i = s->n_heap / 2; i-- > 0;)
        sift_down(s->heap, s->n_heap, i, s->heap[i]);
    while (s->n_heap) {
        uint64_t key = heap_pop(s);
        int32_t l = (int32_t)(uint32_t)key, rank = (int32_t)(key >> 32);
        bpe_sym *a = &s->sym[l];
        if (a->len == 0 || a->next < 0 || a->mrank != rank)
            continue; /* stale: a neighbour merged since */
        bpe_sym *b = &s->sym[a->next];
        a->len += b->len;
        a->id = a->mid;
        a->next = b->next;
        if (b->next >= 0)
            s->sym[b->next].prev = l;
        b->len = 0;
        if (a->prev >= 0)
            GP_TRY(consider(t, s, p, a->prev, l, true));
        if (a->next >= 0)
            GP_TRY(consider(t, s, p, l, a->next, true));
        else
            a->mrank = -1;
    }
    for (int32_t i = 0; i >= 0; i = s->sym[i].next)
        GP_TRY(gp_ids_push(out, s->sym[i].id));
    return GP_OK;
}
