/* The tokenizer's private layout, shared by the files of tokenizer/ (and
 * nothing else): hash tables, the arena, the loaded model and the helpers
 * one file needs from another. */
#ifndef GP_TOK_IMPL_H
#define GP_TOK_IMPL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "gp_tokenizer.h"

/* ---- arena: token strings live as long as the tokenizer; blocks never move,
 * so the tables can hold plain pointers into them. */
typedef struct gp_arena_blk gp_arena_blk;
typedef struct gp_arena {
    gp_arena_blk *head;
} gp_arena;
char *gp_arena_alloc(gp_arena *a, size_t n);
char *gp_arena_dup(gp_arena *a, const char *s, size_t n); /* NUL-terminated copy */
void gp_arena_free(gp_arena *a);

/* ---- bytes -> int32 (open addressing, linear probing). Keys are not copied. */
typedef struct gp_strtab_slot {
    const char *key; /* NULL: empty */
    uint32_t len;
    uint32_t hash;
    int32_t val;
} gp_strtab_slot;
typedef struct gp_strtab {
    gp_strtab_slot *slots; /* [cap] */
    uint32_t cap;          /* power of two, at least twice n */
    uint32_t n;
} gp_strtab;
gp_status gp_strtab_init(gp_strtab *t, size_t expect);
/* Inserts key -> val; an existing key keeps its first value (*dup set). */
gp_status gp_strtab_put(gp_strtab *t, const char *key, size_t len, int32_t val, bool *dup);
int32_t gp_strtab_get(const gp_strtab *t, const char *key, size_t len); /* -1: absent */
void gp_strtab_free(gp_strtab *t);

/* ---- merge ranks: (left id, right id) -> (rank, merged id). */
typedef struct gp_pair_slot {
    uint64_t key; /* UINT64_MAX: empty (ids are non-negative int32) */
    int32_t rank;
    int32_t id;
} gp_pair_slot;
typedef struct gp_pairtab {
    gp_pair_slot *slots; /* [cap] */
    uint32_t cap, n;
} gp_pairtab;
gp_status gp_pairtab_init(gp_pairtab *t, size_t expect);
gp_status gp_pairtab_put(gp_pairtab *t, int32_t a, int32_t b, int32_t rank, int32_t id); /* first rank kept */
const gp_pair_slot *gp_pairtab_get(const gp_pairtab *t, int32_t a, int32_t b);
void gp_pairtab_free(gp_pairtab *t);

/* ---- UTF-8 */
/* The next character of s[0..n), n >= 1: its length 1..4 when valid; 0 when
 * s is a valid beginning cut short by its end; -k when the first k bytes are
 * an invalid sequence that decodes to one U+FFFD (the maximal-subpart rule of
 * Rust's from_utf8_lossy and Python's errors="replace"). */
int gp_utf8_next(const unsigned char *s, size_t n);
/* GP_OK, or GP_ERR_INVALID_ARG naming the offset of the first bad byte. */
gp_status gp_utf8_check(const char *s, size_t n);

/* ---- NFC (utf8proc) of valid UTF-8 s[0..n), written from the start of *buf
 * (grown with realloc, *cap its size); *out_len the normalized length.
 * Offsets in its messages are within s. */
gp_status gp_nfc(const char *s, size_t n, char **buf, size_t *cap, size_t *out_len);

/* ---- the model */
typedef enum gp_tok_kind {
    GP_TOK_BYTELEVEL, /* HF byte-level BPE (Llama 3, Qwen2, GPT-2) */
    GP_TOK_SP,        /* HF SentencePiece-style BPE (Llama 2, Mistral) */
    GP_TOK_TIKTOKEN,  /* tiktoken ranks file (Llama 3's tokenizer.model) */
} gp_tok_kind;

typedef struct gp_token {
    const char *str; /* as the file spells it; NULL: no token has this id */
    const char *dec; /* the bytes it decodes to (byte-level mapped back, SP's ▁ as a space) */
    uint32_t len, dec_len;
    int16_t byte;    /* SP byte-fallback token <0xNN>: NN; else -1 */
    bool added, special;
} gp_token;

typedef struct gp_added {
    const char *content;
    uint32_t len;
    int32_t id;
    bool lstrip, rstrip, single_word, special;
    bool normalized; /* matched in the normalized text (HF's second pass); content is then normalized too */
} gp_added;

/* Metaspace's prepend_scheme */
typedef enum gp_ms_prepend { GP_MS_NEVER, GP_MS_FIRST, GP_MS_ALWAYS } gp_ms_prepend;

struct gp_tokenizer {
    gp_tok_kind kind;
    int32_t n_ids;
    gp_token *toks;      /* [n_ids] */
    gp_strtab by_str;    /* the file's spelling -> id, vocab and added tokens */
    gp_strtab by_bytes;  /* BPE symbols: raw bytes (byte-level, tiktoken) or the string (SP) -> id */
    gp_pairtab merges;   /* HF forms */
    int32_t byte_id[256]; /* byte-level/tiktoken: the token of one byte; SP: <0xNN>; -1 absent */
    bool ignore_merges, byte_fallback, fuse_unk;
    int32_t unk_id;      /* -1: none */
    /* pre-tokenizer: split on re (NULL: one piece); byte-level may add a space */
    pcre2_code *re;
    bool jit;
    bool add_prefix_space;
    /* SP normalizer: Prepend("▁") and Replace(" ", "▁"); decoder strips one leading space */
    bool sp_prepend, sp_replace, strip_lead_space;
    bool nfc;            /* normalizer NFC (alone or in a Sequence), applied before the rest */
    /* Metaspace pre-tokenizer (SP kind, normalizer null or NFC): spaces become
     * ▁, ▁ is prepended per ms_prepend, split: pieces start at each ▁ */
    bool metaspace, ms_split;
    gp_ms_prepend ms_prepend;
    /* Metaspace decoder: ▁ -> space, except that the first token loses every ▁
     * when ms_dec_first (prepend_scheme not never); byte tokens stay text */
    bool ms_decoder, ms_dec_first;
    gp_added *added;     /* [n_added], longest first so the first match at a position is the longest */
    int n_added, n_added_normalized;
    int32_t *prefix, *suffix; /* post-processor ids before and after the text */
    int n_prefix, n_suffix;
    gp_arena arena;
};

gp_status gp_tok_alloc(gp_tokenizer **out, gp_tok_kind kind);
gp_status gp_tok_set_ids(gp_tokenizer *t, int32_t n_ids); /* sizes toks, all absent */
gp_status gp_tok_compile_regex(gp_tokenizer *t, const char *pat, size_t len, const char *what);
gp_status gp_tok_load_json(gp_tokenizer *t, const char *path, const char *text, size_t len);
gp_status gp_tok_load_tiktoken(gp_tokenizer *t, const char *path, const char *text, size_t len);
/* dir/config.json's bos_token_id as t's BOS (tokenizer_config.json's add_bos_token
 * false: none); gp_tokenizer_load_dir's step for a tiktoken tokenizer.model. */
gp_status gp_tok_tiktoken_bos(gp_tokenizer *t, const char *dir);

/* Llama 3's pre-tokenizer pattern (also the tiktoken form's). */
extern const char gp_tok_llama3_pattern[];
/* GPT-2's, which HF's ByteLevel(use_regex = true) applies. */
extern const char gp_tok_gpt2_pattern[];

/* Byte-level BPE's alphabet: byte b is written as code point gp_bytelevel_cp(b). */
uint32_t gp_bytelevel_cp(int b);
/* The bytes s[0..n) stands for when every character is a byte-level one
 * (written to out, which holds n bytes); -1 otherwise. */
long gp_bytelevel_decode(const char *s, size_t n, char *out);

/* ---- growable id list (encode's output) */
typedef struct gp_ids {
    int32_t *v;
    size_t n, cap;
} gp_ids;
gp_status gp_ids_push(gp_ids *l, int32_t id);

/* BPE of one pre-token piece s[0..n) (non-empty), ids appended to out.
 * Scratch is reused across pieces of one encode call. */
typedef struct gp_bpe_scratch gp_bpe_scratch;
gp_status gp_bpe_scratch_create(gp_bpe_scratch **out);
void gp_bpe_scratch_free(gp_bpe_scratch *s);
gp_status gp_bpe_piece(const gp_tokenizer *t, gp_bpe_scratch *s, const char *p, size_t n, gp_ids *out);

#endif
