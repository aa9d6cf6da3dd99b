/* The tokenizer's containers: an arena for token strings, open-addressing
 * hash tables for vocabularies (bytes -> id) and merge ranks (id pair ->
 * rank), and the growable id list encode fills. */
#include "tok_impl.h"

#include <stdlib.h>
#include <string.h>

struct gp_arena_blk {
    gp_arena_blk *next;
    size_t used, cap;
    char data[];
};

/* Big blocks: a 128k-token vocabulary is a few MB of strings, and each block
 * is one allocation to check. */
#define GP_ARENA_BLOCK (1u << 20)

char *gp_arena_alloc(gp_arena *a, size_t n)
{
    gp_arena_blk *b = a->head;
    if (!b || b->cap - b->used < n) {
        size_t cap = n > GP_ARENA_BLOCK ? n : GP_ARENA_BLOCK;
        b = malloc(sizeof *b + cap);
        if (!b)
            return NULL;
        b->cap = cap;
        b->used = 0;
        b->next = a->head;
        a->head = b;
    }
    char *p = b->data + b->used;
    b->used += n;
    return p;
}

char *gp_arena_dup(gp_arena *a, const char *s, size_t n)
{
    char *p = gp_arena_alloc(a, n + 1);
    if (p) {
        if (n) /* s may be NULL when n is 0 */
            memcpy(p, s, n);
        p[n] = '\0';
    }
    return p;
}

void gp_arena_free(gp_arena *a)
{
    while (a->head) {
        gp_arena_blk *n = a->head->next;
        free(a->head);
        a->head = n;
    }
}

/* FNV-1a: keys are short (tokens average a few bytes), where it beats
 * block hashes. */
static uint32_t hash_bytes(const char *s, size_t n)
{
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 16777619u;
    return h;
}

static uint32_t table_cap(size_t expect)
{
    uint32_t cap = 16;
    while (cap < 2 * expect + 2 && cap < (1u << 30))
        cap <<= 1;
    return cap;
}

gp_status gp_strtab_init(gp_strtab *t, size_t expect)
{
    t->n = 0;
    t->cap = table_cap(expect);
    t->slots = calloc(t->cap, sizeof *t->slots);
    if (!t->slots)
        GP_FAIL(GP_ERR_NO_MEMORY, "tokenizer: cannot allocate a table of %u entries", t->cap);
    return GP_OK;
}

static gp_status strtab_grow(gp_strtab *t)
{
    gp_strtab bigger = {0};
    bigger.cap = t->cap * 2;
    bigger.slots = calloc(bigger.cap, sizeof *bigger.slots);
    if (!bigger.slots)
        GP_FAIL(GP_ERR_NO_MEMORY, "tokenizer: cannot allocate a table of %u entries", bigger.cap);
    for (uint32_t i = 0; i < t->cap; i++) {
        if (!t->slots[i].key)
            continue;
        uint32_t j = t->slots[i].hash & (bigger.cap - 1);
        while (bigger.slots[j].key)
            j = (j + 1) & (bigger.cap - 1);
        bigger.slots[j] = t->slots[i];
    }
    bigger.n = t->n;
    free(t->slots);
    *t = bigger;
    return GP_OK;
}

gp_status gp_strtab_put(gp_strtab *t, const char *key, size_t len, int32_t val, bool *dup)
{
    if (dup)
        *dup = false;
    if (2 * (t->n + 1) > t->cap)
        GP_TRY(strtab_grow(t));
    uint32_t h = hash_bytes(key, len), j = h & (t->cap - 1);
    for (; t->slots[j].key; j = (j + 1) & (t->cap - 1)) {
        const gp_strtab_slot *s = &t->slots[j];
        if (s->hash == h && s->len == len && !memcmp(s->key, key, len)) {
            if (dup)
                *dup = true;
            return GP_OK;
        }
    }
    t->slots[j] = (gp_strtab_slot){.key = key, .len = (uint32_t)len, .hash = h, .val = val};
    t->n++;
    return GP_OK;
}

int32_t gp_strtab_get(const gp_strtab *t, const char *key, size_t len)
{
    if (!t->slots)
        return -1;
    uint32_t h = hash_bytes(key, len), j = h & (t->cap - 1);
    for (; t->slots[j].key; j = (j + 1) & (t->cap - 1)) {
        const gp_strtab_slot *s = &t->slots[j];
        if (s->hash == h && s->len == len && !memcmp(s->key, key, len))
            return s->val;
    }
    return -1;
}

void gp_strtab_free(gp_strtab *t)
{
    free(t->slots);
    memset(t, 0, sizeof *t);
}

static uint32_t hash_pair(uint64_t k)
{
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    return (uint32_t)k;
}

gp_status gp_pairtab_init(gp_pairtab *t, size_t expect)
{
    t->n = 0;
    t->cap = table_cap(expect);
    t->slots = malloc((size_t)t->cap * sizeof *t->slots);
    if (!t->slots)
        GP_FAIL(GP_ERR_NO_MEMORY, "tokenizer: cannot allocate a merge table of %u entries", t->cap);
    for (uint32_t i = 0; i < t->cap; i++)
        t->slots[i].key = UINT64_MAX;
    return GP_OK;
}

gp_status gp_pairtab_put(gp_pairtab *t, int32_t a, int32_t b, int32_t rank, int32_t id)
{
    if (2 * (t->n + 1) > t->cap) {
        gp_pairtab bigger;
        GP_TRY(gp_pairtab_init(&bigger, t->cap));
        for (uint32_t i = 0; i < t->cap; i++) {
            if (t->slots[i].key == UINT64_MAX)
                continue;
            uint32_t j = hash_pair(t->slots[i].key) & (bigger.cap - 1);
            while (bigger.slots[j].key != UINT64_MAX)
                j = (j + 1) & (bigger.cap - 1);
            bigger.slots[j] = t->slots[i];
        }
        bigger.n = t->n;
        free(t->slots);
        *t = bigger;
    }
    uint64_t k = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
    uint32_t j = hash_pair(k) & (t->cap - 1);
    for (; t->slots[j].key != UINT64_MAX; j = (j + 1) & (t->cap - 1))
        if (t->slots[j].key == k)
            return GP_OK; /* HF keeps the first (lowest) rank of a repeated merge */
    t->slots[j] = (gp_pair_slot){.key = k, .rank = rank, .id = id};
    t->n++;
    return GP_OK;
}

const gp_pair_slot *gp_pairtab_get(const gp_pairtab *t, int32_t a, int32_t b)
{
    if (!t->slots)
        return NULL;
    uint64_t k = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
    uint32_t j = hash_pair(k) & (t->cap - 1);
    for (; t->slots[j].key != UINT64_MAX; j = (j + 1) & (t->cap - 1))
        if (t->slots[j].key == k)
            return &t->slots[j];
    return NULL;
}

void gp_pairtab_free(gp_pairtab *t)
{
    free(t->slots);
    memset(t, 0, sizeof *t);
}

gp_status gp_ids_push(gp_ids *l, int32_t id)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 256;
        int32_t *v = realloc(l->v, cap * sizeof *v);
        if (!v)
            GP_FAIL(GP_ERR_NO_MEMORY, "tokenizer: cannot allocate %zu token ids", cap);
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = id;
    return GP_OK;
}
