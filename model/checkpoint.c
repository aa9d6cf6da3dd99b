/* A Hugging Face checkpoint directory: config.json plus one or more
 * memory-mapped safetensors files, checked against the config (tensor names
 * from the family's architecture entry) and copied into the engine's fused
 * layout in the checkpoint's own dtype, bit-exact. */
#include "gp_model.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct ck_file {
    char *path;
    void *map; /* NULL for an empty file */
    size_t len;
    gp_st_file *st;
} ck_file;

typedef struct ck_entry {
    const gp_st_tensor *t;
    size_t file; /* index into files */
} ck_entry;

struct gp_checkpoint {
    gp_config cfg;
    char *dir;
    ck_file *files;
    size_t n_files;
    ck_entry *tensors; /* sorted by name, across all files */
    size_t n_tensors;
};

static char *join_path(const char *dir, const char *name)
{
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    if (p)
        snprintf(p, n, "%s/%s", dir, name);
    return p;
}

/* Map path read-only into f (the fd is closed before returning). */
static gp_status map_file(const char *path, ck_file *f)
{
    f->path = strdup(path);
    if (!f->path)
        GP_FAIL(GP_ERR_NO_MEMORY, "%s: out of memory", path);
    int fd;
    uint64_t size;
    bool regular;
    GP_TRY(gp_file_open(path, &fd, &size, &regular));
    if (!regular) {
        close(fd);
        GP_FAIL(GP_ERR_IO, "%s: not a regular file", path);
    }
    if (size > SIZE_MAX) {
        close(fd);
        GP_FAIL(GP_ERR_OVERFLOW, "%s: %llu bytes do not fit in memory", path, (unsigned long long)size);
    }
    f->len = (size_t)size;
    if (f->len > 0) { /* mmap refuses length 0; the parser rejects the empty file */
        void *m = mmap(NULL, f->len, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m == MAP_FAILED) {
            int e = errno;
            close(fd);
            GP_FAIL(GP_ERR_IO, "%s: cannot mmap %zu bytes: %s", path, f->len, strerror(e));
        }
        f->map = m;
    }
    close(fd);
    return gp_st_parse(f->map, f->len, path, &f->st);
}

void gp_checkpoint_close(gp_checkpoint *ck)
{
    if (!ck)
        return;
    for (size_t i = 0; i < ck->n_files; i++) {
        gp_st_free(ck->files[i].st);
        if (ck->files[i].map)
            munmap(ck->files[i].map, ck->files[i].len);
        free(ck->files[i].path);
    }
    free(ck->files);
    free(ck->tensors);
    free(ck->dir);
    free(ck);
}

const gp_config *gp_checkpoint_config(const gp_checkpoint *ck)
{
    return ck ? &ck->cfg : NULL;
}

size_t gp_checkpoint_tensor_count(const gp_checkpoint *ck)
{
    return ck ? ck->n_tensors : 0;
}

const gp_st_tensor *gp_checkpoint_tensor(const gp_checkpoint *ck, size_t i, const char **file)
{
    if (!ck || i >= ck->n_tensors)
        return NULL;
    if (file)
        *file = ck->files[ck->tensors[i].file].path;
    return ck->tensors[i].t;
}

static int cmp_entry(const void *a, const void *b)
{
    return strcmp(((const ck_entry *)a)->t->name, ((const ck_entry *)b)->t->name);
}

static const ck_entry *find_entry(const gp_checkpoint *ck, const char *name)
{
    if (ck->n_tensors == 0)
        return NULL;
    gp_st_tensor t = {.name = (char *)name};
    ck_entry key = {.t = &t};
    return bsearch(&key, ck->tensors, ck->n_tensors, sizeof key, cmp_entry);
}

/* Gather the tensors of every file into one name-sorted list; a name held
 * by two files is an error. */
static gp_status merge_tensors(gp_checkpoint *ck)
{
    size_t n = 0;
    for (size_t i = 0; i < ck->n_files; i++)
        n += gp_st_count(ck->files[i].st);
    ck->tensors = calloc(n ? n : 1, sizeof *ck->tensors);
    if (!ck->tensors)
        GP_FAIL(GP_ERR_NO_MEMORY, "%s: out of memory listing %zu tensors", ck->dir, n);
    for (size_t i = 0; i < ck->n_files; i++)
        for (size_t j = 0; j < gp_st_count(ck->files[i].st); j++)
            ck->tensors[ck->n_tensors++] = (ck_entry){gp_st_get(ck->files[i].st, j), i};
    qsort(ck->tensors, n, sizeof *ck->tensors, cmp_entry);
    for (size_t i = 1; i < n; i++)
        if (strcmp(ck->tensors[i - 1].t->name, ck->tensors[i].t->name) == 0)
            GP_FAIL(GP_ERR_FORMAT, "%s: tensor '%s' is in two shards, %s and %s", ck->dir,
                    ck->tensors[i].t->name, ck->files[ck->tensors[i - 1].file].path,
                    ck->files[ck->tensors[i].file].path);
    return GP_OK;
}

/* Shard names come from the index file: keep them inside the directory. */
static gp_status check_shard_name(const char *name, const char *tensor, const char *label)
{
    if (name[0] == '\0' || strchr(name, '/') || strstr(name, ".."))
        GP_FAIL(GP_ERR_FORMAT,
                "%s: weight_map entry for tensor '%s' names shard '%s'; a shard must be a plain "
                "file name in the checkpoint directory (no '/' or '..')",
                label, tensor, name);
    return GP_OK;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* ------------------------------------------------------------- index */

/* Real indexes are tens of KB (a few MB for the largest MoE models). */
#define GP_ST_INDEX_MAX_BYTES (64u << 20)

typedef struct ix_entry {
    const char *tensor, *shard; /* both owned by gp_st_index.root */
} ix_entry;

struct gp_st_index {
    json_t *root;        /* the parsed JSON; owns every string below */
    ix_entry *e;         /* [n], sorted by tensor name */
    size_t n;
    const char **shards; /* [n_shards], distinct, sorted */
    size_t n_shards;
};

static int cmp_ix_entry(const void *a, const void *b)
{
    return strcmp(((const ix_entry *)a)->tensor, ((const ix_entry *)b)->tensor);
}

void gp_st_index_free(gp_st_index *ix)
{
    if (!ix)
        return;
    free(ix->e);
    free(ix->shards);
    json_decref(ix->root);
    free(ix);
}

size_t gp_st_index_shard_count(const gp_st_index *ix)
{
    return ix ? ix->n_shards : 0;
}

const char *gp_st_index_shard(const gp_st_index *ix, size_t i)
{
    return ix && i < ix->n_shards ? ix->shards[i] : NULL;
}

size_t gp_st_index_tensor_count(const gp_st_index *ix)
{
    return ix ? ix->n : 0;
}

const char *gp_st_index_tensor(const gp_st_index *ix, size_t i, const char **shard)
{
    if (!ix || i >= ix->n)
        return NULL;
    if (shard)
        *shard = ix->e[i].shard;
    return ix->e[i].tensor;
}

const char *gp_st_index_lookup(const gp_st_index *ix, const char *tensor)
{
    if (!ix || !tensor || ix->n == 0)
        return NULL;
    ix_entry key = {.tensor = tensor};
    const ix_entry *e = bsearch(&key, ix->e, ix->n, sizeof key, cmp_ix_entry);
    return e ? e->shard : NULL;
}

/* Check ix->root and fill the sorted tables; ix is freed by the caller on error. */
static gp_status index_fill(gp_st_index *ix, const char *label)
{
    json_t *root = ix->root;
    if (!json_is_object(root))
        GP_FAIL(GP_ERR_FORMAT, "%s: top level must be a JSON object", label);
    json_t *map = json_object_get(root, "weight_map");
    json_t *meta = json_object_get(root, "metadata");
    if (!json_is_object(map))
        GP_FAIL(GP_ERR_FORMAT, "%s: missing 'weight_map' object (tensor name -> shard file)", label);
    if (meta && !json_is_object(meta) && !json_is_null(meta))
        GP_FAIL(GP_ERR_FORMAT, "%s: 'metadata' must be an object", label);
    size_t n = json_object_size(map);
    if (n == 0)
        GP_FAIL(GP_ERR_FORMAT, "%s: 'weight_map' is empty; it must name the shard of every tensor",
                label);
    ix->e = calloc(n, sizeof *ix->e);
    ix->shards = calloc(n, sizeof *ix->shards);
    if (!ix->e || !ix->shards)
        GP_FAIL(GP_ERR_NO_MEMORY, "%s: out of memory for %zu weight_map entries", label, n);
    const char *k;
    json_t *v;
    json_object_foreach(map, k, v) {
        if (!json_is_string(v))
            GP_FAIL(GP_ERR_FORMAT, "%s: weight_map entry for tensor '%s' is not a file name string",
                    label, k);
        GP_TRY(check_shard_name(json_string_value(v), k, label));
        ix->e[ix->n++] = (ix_entry){k, json_string_value(v)};
    }
    /* Tensor names are unique: the parser rejects duplicate keys. */
    qsort(ix->e, ix->n, sizeof *ix->e, cmp_ix_entry);
    for (size_t i = 0; i < ix->n; i++)
        ix->shards[i] = ix->e[i].shard;
    qsort(ix->shards, ix->n, sizeof *ix->shards, cmp_str);
    for (size_t i = 0; i < ix->n; i++)
        if (ix->n_shards == 0 || strcmp(ix->shards[ix->n_shards - 1], ix->shards[i]) != 0)
            ix->shards[ix->n_shards++] = ix->shards[i];
    return GP_OK;
}

gp_status gp_st_index_parse(const char *text, size_t len, const char *label, gp_st_index **out)
{
    if (!label)
        label = "model.safetensors.index.json";
    if (!out)
        GP_FAIL(GP_ERR_INVALID_ARG, "%s: gp_st_index_parse needs an output pointer", label);
    *out = NULL;
    if (!text && len)
        GP_FAIL(GP_ERR_INVALID_ARG, "%s: NULL text of %zu bytes", label, len);
    /* jansson 2.14 skips a NUL byte that follows a number; JSON has none. */
    const char *nul = text ? memchr(text, '\0', len) : NULL;
    if (nul)
        GP_FAIL(GP_ERR_FORMAT, "%s: not valid JSON: NUL byte at offset %zu", label,
                (size_t)(nul - text));
    json_error_t jerr;
    /* jansson refuses a NULL buffer even for length 0. */
    json_t *root = json_loadb(text ? text : "", len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        GP_FAIL(GP_ERR_FORMAT, "%s: not valid JSON: %s (line %d, column %d)", label, jerr.text,
                jerr.line, jerr.column);
    gp_st_index *ix = calloc(1, sizeof *ix);
    if (!ix) {
        json_decref(root);
        GP_FAIL(GP_ERR_NO_MEMORY, "%s: out of memory", label);
    }
    ix->root = root;
    gp_status s = index_fill(ix, label);
    if (s != GP_OK) {
        gp_st_index_free(ix);
        return s;
    }
    *out = ix;
    return GP_OK;
}

/* Map every shard the index names, in name order. */
static gp_status open_shards(gp_checkpoint *ck, const gp_st_index *ix, const char *label)
{
    size_t u = gp_st_index_shard_count(ix);
    ck->files = calloc(u ? u : 1, sizeof *ck->files);
    if (!ck->files)
        GP_FAIL(GP_ERR_NO_MEMORY, "%s: out of memory", label);
    for (size_t i = 0; i < u; i++) {
        char *path = join_path(ck->dir, gp_st_index_shard(ix, i));
        if (!path)
            GP_FAIL(GP_ERR_NO_MEMORY, "%s: out of memory", label);
        ck->n_files++;
        gp_status s = map_file(path, &ck->files[i]);
        free(path);
        GP_TRY(s);
    }
    return GP_OK;
}

/* The index and the shards must agree: every listed tensor is in its shard,
 * and every tensor of a shard is listed, for that shard. */
static gp_status check_weight_map(const gp_checkpoint *ck, const gp_st_index *ix, const char *label)
{
    for (size_t i = 0; i < ck->n_tensors; i++) {
        const ck_entry *e = &ck->tensors[i];
        const char *path = ck->files[e->file].path;
        const char *shard = strrchr(path, '/') + 1;
        const char *listed = gp_st_index_lookup(ix, e->t->name);
        if (!listed)
            GP_FAIL(GP_ERR_FORMAT, "%s: tensor '%s' is in shard %s but weight_map does not list it",
                    label, e->t->name, path);
        if (strcmp(listed, shard) != 0)
            GP_FAIL(GP_ERR_FORMAT, "%s: weight_map puts tensor '%s' in shard '%s' but it is in %s",
                    label, e->t->name, listed, path);
    }
    for (size_t i = 0; i < gp_st_index_tensor_count(ix); i++) {
        const char *shard, *name = gp_st_index_tensor(ix, i, &shard);
        if (!find_entry(ck, name))
            GP_FAIL(GP_ERR_FORMAT,
                    "%s: weight_map names tensor '%s' in shard '%s', which has no such tensor",
                    label, name, shard);
    }
    return GP_OK;
}

static gp_status open_index(gp_checkpoint *ck, const char *index_path)
{
    char *text;
    size_t len;
    GP_TRY(gp_read_file(index_path, GP_ST_INDEX_MAX_BYTES, &text, &len));
    gp_st_index *ix = NULL;
    gp_status s = gp_st_index_parse(text, len, index_path, &ix);
    free(text);
    if (s == GP_OK)
        s = open_shards(ck, ix, index_path);
    if (s == GP_OK)
        s = merge_tensors(ck);
    if (s == GP_OK)
        s = check_weight_map(ck, ix, index_path);
    gp_st_index_free(ix);
    return s;
}

static int is_file(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

/* A single model.safetensors wins over an index when both exist, as in
 * transformers' from_pretrained. */
gp_status gp_checkpoint_open(const char *dir, gp_checkpoint **out)
{
    if (!dir || !out)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_checkpoint_open: dir and out must not be NULL");
    *out = NULL;
    gp_checkpoint *ck = calloc(1, sizeof *ck);
    if (!ck)
        GP_FAIL(GP_ERR_NO_MEMORY, "%s: out of memory", dir);
    gp_status s = GP_OK;
    char *single = NULL, *index = NULL;
    ck->dir = strdup(dir);
    if (!ck->dir) {
        gp_set_error("%s: out of memory", dir);
        s = GP_ERR_NO_MEMORY;
        goto done;
    }
    if ((s = gp_config_load_dir(dir, &ck->cfg)) != GP_OK)
        goto done;
    single = join_path(dir, "model.safetensors");
    index = join_path(dir, "model.safetensors.index.json");
    if (!single || !index) {
        gp_set_error("%s: out of memory", dir);
        s = GP_ERR_NO_MEMORY;
        goto done;
    }
    if (is_file(single)) {
        ck->files = calloc(1, sizeof *ck->files);
        if (!ck->files) {
            gp_set_error("%s: out of memory", dir);
            s = GP_ERR_NO_MEMORY;
            goto done;
        }
        ck->n_files = 1;
        if ((s = map_file(single, &ck->files[0])) == GP_OK)
            s = merge_tensors(ck);
    } else if (is_file(index)) {
        s = open_index(ck, index);
    } else {
        gp_set_error("%s: no weights: looked for model.safetensors and model.safetensors.index.json",
                     dir);
        s = GP_ERR_NOT_FOUND;
    }
done:
    free(single);
    free(index);
    if (s != GP_OK) {
        gp_checkpoint_close(ck);
        return s;
    }
    *out = ck;
    return GP_OK;
}

/* ------------------------------------------------------------- checking */

enum { CK_ROW_VOCAB, CK_ROW_HIDDEN, CK_ROW_Q, CK_ROW_KV, CK_ROW_FFN, CK_ROW_NONE };

/* Shape of each tensor in config units (cols CK_ROW_NONE: 1-D); the names
 * come from the model's architecture entry. */
static const struct { int rows, cols; } ck_dims[GP_AT_COUNT] = {
    [GP_AT_EMBED] = {CK_ROW_VOCAB, CK_ROW_HIDDEN},
    [GP_AT_FINAL_NORM] = {CK_ROW_HIDDEN, CK_ROW_NONE},
    [GP_AT_LM_HEAD] = {CK_ROW_VOCAB, CK_ROW_HIDDEN},
    [GP_AT_ATTN_NORM] = {CK_ROW_HIDDEN, CK_ROW_NONE},
    [GP_AT_Q] = {CK_ROW_Q, CK_ROW_HIDDEN},
    [GP_AT_K] = {CK_ROW_KV, CK_ROW_HIDDEN},
    [GP_AT_V] = {CK_ROW_KV, CK_ROW_HIDDEN},
    [GP_AT_O] = {CK_ROW_HIDDEN, CK_ROW_Q},
    [GP_AT_FFN_NORM] = {CK_ROW_HIDDEN, CK_ROW_NONE},
    [GP_AT_GATE] = {CK_ROW_FFN, CK_ROW_HIDDEN},
    [GP_AT_UP] = {CK_ROW_FFN, CK_ROW_HIDDEN},
    [GP_AT_DOWN] = {CK_ROW_HIDDEN, CK_ROW_FFN},
};

static int64_t dim_of(const gp_config *c, int which)
{
    switch (which) {
    case CK_ROW_VOCAB: return c->vocab;
    case CK_ROW_HIDDEN: return c->hidden;
    case CK_ROW_Q: return (int64_t)c->n_heads * c->head_dim;
    case CK_ROW_KV: return (int64_t)c->n_kv_heads * c->head_dim;
    case CK_ROW_FFN: return c->ffn;
    }
    return 0;
}

typedef struct ck_shape {
    int ndim;
    int64_t d[2];
} ck_shape;

static ck_shape shape_of(const gp_config *c, gp_arch_tensor t)
{
    int rows = ck_dims[t].rows, cols = ck_dims[t].cols;
    ck_shape s = {cols == CK_ROW_NONE ? 1 : 2, {dim_of(c, rows), dim_of(c, cols)}};
    return s;
}

/* Whether the config needs tensor t: lm_head only when the embeddings are
 * untied. */
static int needed(const gp_config *c, gp_arch_tensor t)
{
    return t != GP_AT_LM_HEAD || !c->tied_embeddings;
}

static void format_shape(char *buf, size_t cap, int ndim, const int64_t *d)
{
    size_t at = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < ndim && at < cap; i++)
        at += (size_t)snprintf(buf + at, cap - at, "%s%lld", i ? ", " : "", (long long)d[i]);
    if (at < cap)
        snprintf(buf + at, cap - at, "]");
}

/* The weight of kind, or its bias when bias (1-D, the weight's rows). */
static gp_status check_one(const gp_checkpoint *ck, gp_arch_tensor kind, int layer, bool bias)
{
    char name[256];
    if (!gp_arch_tensor_name(gp_config_arch(&ck->cfg), kind, layer, bias, name, sizeof name))
        snprintf(name, sizeof name, "(tensor %d of layer %d: name too long)", (int)kind, layer);
    ck_shape want = shape_of(&ck->cfg, kind);
    if (bias)
        want.ndim = 1;
    const ck_entry *e = find_entry(ck, name);
    if (!e)
        GP_FAIL(GP_ERR_NOT_FOUND, "%s: tensor '%s' is missing (the config needs it)", ck->dir, name);
    const gp_st_tensor *t = e->t;
    const char *path = ck->files[e->file].path;
    if (t->dtype != GP_DTYPE_F32 && t->dtype != GP_DTYPE_F16 && t->dtype != GP_DTYPE_BF16)
        GP_FAIL(GP_ERR_UNSUPPORTED, "%s: tensor '%s' has dtype %s; weights must be F32, F16 or BF16",
                path, name, gp_dtype_name(t->dtype));
    if (t->ndim != want.ndim || t->shape[0] != want.d[0] || (want.ndim == 2 && t->shape[1] != want.d[1])) {
        char found[160], expect[64];
        format_shape(found, sizeof found, t->ndim, t->shape);
        format_shape(expect, sizeof expect, want.ndim, want.d);
        GP_FAIL(GP_ERR_SHAPE, "%s: tensor '%s' has shape %s but the config expects %s", path, name,
                found, expect);
    }
    return GP_OK;
}

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

/* With tied embeddings an lm_head in the file is ignored (some exporters
 * write the shared matrix twice); the embedding is used for both. */
gp_status gp_checkpoint_check(const gp_checkpoint *ck)
{
    if (!ck)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_checkpoint_check: checkpoint is NULL");
    const gp_config *c = &ck->cfg;
    const gp_arch *a = gp_config_arch(c);
    for (int t = 0; t < GP_AT_FIRST_LAYER; t++)
        if (needed(c, (gp_arch_tensor)t))
            GP_TRY(check_one(ck, (gp_arch_tensor)t, -1, false));
    for (int l = 0; l < c->n_layers; l++) {
        for (int t = GP_AT_FIRST_LAYER; t < GP_AT_COUNT; t++)
            GP_TRY(check_one(ck, (gp_arch_tensor)t, l, false));
        if (c->qkv_bias)
            for (int t = GP_AT_Q; t <= GP_AT_V; t++)
                GP_TRY(check_one(ck, (gp_arch_tensor)t, l, true));
    }
    for (size_t i = 0; i < ck->n_tensors; i++) {
        const char *n = ck->tensors[i].t->name, *path = ck->files[ck->tensors[i].file].path;
        gp_arch_tensor t;
        int layer;
        bool bias;
        if (a->ignored_suffix && ends_with(n, a->ignored_suffix))
            continue;
        if (gp_arch_tensor_parse(a, n, c->n_layers, &t, &layer, &bias)) {
            /* The config refused every bias but q/k/v ones (cfg.qkv_bias). */
            if (bias && !(c->qkv_bias && t >= GP_AT_Q && t <= GP_AT_V))
                GP_FAIL(GP_ERR_UNSUPPORTED,
                        "%s: tensor '%s': bias tensors are not supported unless the config declares "
                        "them (the engine implements q/k/v projection biases only%s)", path, n,
                        c->qkv_bias ? "" : "; this config has none");
            continue;
        }
        if (ends_with(n, ".bias"))
            GP_FAIL(GP_ERR_UNSUPPORTED,
                    "%s: tensor '%s': bias tensors are not supported (the engine implements "
                    "q/k/v projection biases only)", path, n);
        GP_FAIL(GP_ERR_FORMAT, "%s: unexpected tensor '%s' (not part of a %d-layer %s model)",
                path, n, c->n_layers, a->model_type);
    }
    return GP_OK;
}

/* ------------------------------------------------------------- loading */

/* The dtype every weight the config needs is stored in, or F32 when they
 * differ (F32 holds BF16 and F16 values exactly). Only tensors the model
 * uses count: a tied checkpoint's ignored lm_head does not. */
static gp_dtype ck_needed_dtype(const gp_checkpoint *ck)
{
    const gp_config *c = &ck->cfg;
    int first = 1;
    gp_dtype dt = GP_DTYPE_F32;
    for (size_t i = 0; i < ck->n_tensors; i++) {
        const gp_st_tensor *t = ck->tensors[i].t;
        gp_arch_tensor kind;
        int layer;
        bool bias;
        if (!gp_arch_tensor_parse(gp_config_arch(c), t->name, c->n_layers, &kind, &layer, &bias))
            continue; /* ignored (rotary caches) or refused by the check */
        if (kind == GP_AT_LM_HEAD && c->tied_embeddings)
            continue;
        if (t->dtype != GP_DTYPE_F32 && !gp_dtype_is_half(t->dtype))
            return GP_DTYPE_F32; /* the check refuses it */
        if (first)
            dt = t->dtype, first = 0;
        else if (t->dtype != dt)
            return GP_DTYPE_F32;
    }
    return dt;
}

gp_dtype gp_checkpoint_dtype(const gp_checkpoint *ck)
{
    return ck ? ck_needed_dtype(ck) : GP_DTYPE_F32;
}

/* Checkpoint tensor t into dst of dtype dt: the same dtype is copied bit for
 * bit, BF16 or F16 into F32 is widened (exact), anything into BF16 or F16 is
 * converted by gp_weights_convert (round to nearest even; a value fp16
 * cannot hold is refused, naming what). Elements are read with memcpy
 * because the data pointer may be unaligned. *n receives the element count. */
static gp_status copy_tensor(const gp_st_tensor *t, void *dst, gp_dtype dt, const char *what, size_t *n)
{
    *n = (size_t)(t->end - t->begin) / gp_dtype_size(t->dtype);
    const uint8_t *src = t->data;
    if (t->dtype == dt) {
        memcpy(dst, src, *n * gp_dtype_size(dt));
        return GP_OK;
    }
    if (dt != GP_DTYPE_F32)
        return gp_weights_convert(dst, dt, src, t->dtype, *n, what);
    float *d = dst; /* a 16-bit tensor: the check admits only F32, BF16 and F16 */
    for (size_t i = 0; i < *n; i++) {
        uint16_t h;
        memcpy(&h, src + 2 * i, 2);
        d[i] = gp_half_to_f32(h, t->dtype);
    }
    return GP_OK;
}

/* The checkpoint tensors an engine tensor is made of, in the order they
 * follow each other in it (wqkv: q, k, v rows; w_gate_up: gate, up rows;
 * bqkv: the q, k, v biases); a tied lm_head is the embedding. Returns their
 * count, 0 for an unknown kind. */
static int fused_parts(const gp_config *c, gp_tensor_kind kind, gp_arch_tensor parts[3], bool *bias)
{
    *bias = false;
    switch (kind) {
    case GP_T_EMBED: parts[0] = GP_AT_EMBED; return 1;
    case GP_T_FINAL_NORM: parts[0] = GP_AT_FINAL_NORM; return 1;
    case GP_T_LM_HEAD: parts[0] = c->tied_embeddings ? GP_AT_EMBED : GP_AT_LM_HEAD; return 1;
    case GP_T_ATTN_NORM: parts[0] = GP_AT_ATTN_NORM; return 1;
    case GP_T_WO: parts[0] = GP_AT_O; return 1;
    case GP_T_FFN_NORM: parts[0] = GP_AT_FFN_NORM; return 1;
    case GP_T_W_DOWN: parts[0] = GP_AT_DOWN; return 1;
    case GP_T_W_GATE_UP: parts[0] = GP_AT_GATE, parts[1] = GP_AT_UP; return 2;
    case GP_T_WQKV: parts[0] = GP_AT_Q, parts[1] = GP_AT_K, parts[2] = GP_AT_V; return 3;
    case GP_T_BQKV: parts[0] = GP_AT_Q, parts[1] = GP_AT_K, parts[2] = GP_AT_V, *bias = true; return 3;
    }
    return 0;
}

/* gp_checkpoint_fill_tensor after its argument checks: each part is checked
 * (present, its shape, a loadable dtype) before it is read. */
static gp_status fill_tensor(const gp_checkpoint *ck, gp_tensor_kind kind, int layer, void *dst, gp_dtype dt,
                             const char *label)
{
    gp_arch_tensor parts[3];
    bool bias;
    const int n_parts = fused_parts(&ck->cfg, kind, parts, &bias);
    const int at_layer = kind <= GP_T_LM_HEAD ? -1 : layer;
    uint8_t *at = dst;
    for (int i = 0; i < n_parts; i++) {
        GP_TRY(check_one(ck, parts[i], at_layer, bias));
        char name[256], what[384];
        /* check_one found it under this name */
        (void)gp_arch_tensor_name(gp_config_arch(&ck->cfg), parts[i], at_layer, bias, name, sizeof name);
        snprintf(what, sizeof what, "%s (checkpoint tensor '%s')", label ? label : gp_tensor_kind_name(kind), name);
        size_t n;
        GP_TRY(copy_tensor(find_entry(ck, name)->t, at, dt, what, &n));
        at += n * gp_dtype_size(dt);
    }
    return GP_OK;
}

gp_status gp_checkpoint_fill_tensor(const gp_checkpoint *ck, gp_tensor_kind kind, int layer, void *dst,
                                    gp_dtype dtype, const char *label)
{
    if (!ck || !dst)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_checkpoint_fill_tensor: checkpoint and dst must not be NULL");
    const gp_config *c = &ck->cfg;
    if ((unsigned)kind > GP_T_BQKV)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_checkpoint_fill_tensor: %s: tensor kind %d; allowed %d (embed) to %d "
                "(bqkv)", ck->dir, (int)kind, (int)GP_T_EMBED, (int)GP_T_BQKV);
    if (kind > GP_T_LM_HEAD && (layer < 0 || layer >= c->n_layers))
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_checkpoint_fill_tensor: %s: %s of layer %d; the model has layers 0 to %d",
                ck->dir, gp_tensor_kind_name(kind), layer, c->n_layers - 1);
    if (kind == GP_T_BQKV && !c->qkv_bias)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_checkpoint_fill_tensor: %s: bqkv of layer %d, but the config has no "
                "q/k/v biases", ck->dir, layer);
    if (dtype != GP_DTYPE_F32 && !gp_dtype_is_half(dtype))
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_checkpoint_fill_tensor: %s: %s into dtype %s; allowed F32, BF16 or F16",
                ck->dir, gp_tensor_kind_name(kind), gp_dtype_name(dtype));
    return fill_tensor(ck, kind, layer, dst, dtype, label);
}

gp_status gp_checkpoint_load_host(const gp_checkpoint *ck, gp_host_weights *w)
{
    return gp_checkpoint_load_host_ex(ck, w, NULL);
}

/* One engine tensor read into dst, its bytes counted toward progress. */
static gp_status fill_counted(const gp_checkpoint *ck, gp_tensor_kind kind, int layer, void *dst, gp_dtype dt,
                              gp_progress_run *pr, uint64_t *done)
{
    GP_TRY(fill_tensor(ck, kind, layer, dst, dt, NULL));
    *done += gp_synth_numel(&ck->cfg, kind) * gp_dtype_size(dt);
    gp_progress_update(pr, *done);
    return GP_OK;
}

gp_status gp_checkpoint_load_host_ex(const gp_checkpoint *ck, gp_host_weights *w, const gp_progress_cb *progress)
{
    if (!ck || !w)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_checkpoint_load_host: checkpoint and weights must not be NULL");
    GP_TRY(gp_checkpoint_check(ck));
    /* the checkpoint's own dtype (F32 when mixed): every copy below is exact */
    const gp_dtype dt = gp_checkpoint_dtype(ck);
    GP_TRY(gp_host_weights_alloc(&ck->cfg, dt, w));
    const gp_tensor_kind *layer_kinds;
    const int n_kinds = gp_host_layer_kinds(&ck->cfg, &layer_kinds);
    const uint64_t total = gp_host_weights_bytes(&ck->cfg, dt);
    uint64_t done = 0;
    gp_progress_run pr;
    gp_progress_begin(&pr, progress, "loading weights", "B", total);
    gp_status s = fill_counted(ck, GP_T_EMBED, -1, w->embed, dt, &pr, &done);
    if (s == GP_OK)
        s = fill_counted(ck, GP_T_FINAL_NORM, -1, w->final_norm, dt, &pr, &done);
    if (s == GP_OK && !ck->cfg.tied_embeddings) /* tied: lm_head is embed (gp_host_weights_alloc) */
        s = fill_counted(ck, GP_T_LM_HEAD, -1, w->lm_head, dt, &pr, &done);
    for (int l = 0; s == GP_OK && l < ck->cfg.n_layers; l++) {
        gp_layer_weights *L = &w->layers[l];
        void *dst[] = {L->attn_norm, L->wqkv, L->wo, L->ffn_norm, L->w_gate_up, L->w_down, L->bqkv};
        for (int k = 0; s == GP_OK && k < n_kinds; k++)
            s = fill_counted(ck, layer_kinds[k], l, dst[k], dt, &pr, &done);
    }
    gp_progress_end(&pr, done);
    if (s != GP_OK)
        gp_host_weights_free(w);
    return s;
}
