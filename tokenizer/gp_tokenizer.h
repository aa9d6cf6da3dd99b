/* Tokenizers for Llama-family models: HF tokenizer.json (byte-level BPE as in
 * Llama 3 / Qwen2 / GPT-2, SentencePiece-style BPE as in Llama 2 / Mistral)
 * and Llama 3's tiktoken-format tokenizer.model; encode, decode and a
 * streaming detokenizer. Docs: docs/ARCHITECTURE.md §7. */
#ifndef GP_TOKENIZER_H
#define GP_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gp_common.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gp_tokenizer gp_tokenizer; /* opaque */

/* path: a tokenizer.json, or a tiktoken-format tokenizer.model. A
 * SentencePiece protobuf tokenizer.model, a normalizer, pre-tokenizer, model
 * or decoder outside the supported forms is GP_ERR_UNSUPPORTED naming it. */
gp_status gp_tokenizer_load(const char *path, gp_tokenizer **out);
/* dir/tokenizer.json, else dir/tokenizer.model; when neither exists,
 * GP_ERR_NOT_FOUND with a message naming both files looked for. A tiktoken
 * tokenizer.model has no special tokens: its BOS is dir/config.json's
 * bos_token_id (none when absent or null, or when tokenizer_config.json's
 * add_bos_token is false), added before every text as HF's Llama 3
 * tokenizer does; gp_tokenizer_load of the file alone adds none. */
gp_status gp_tokenizer_load_dir(const char *dir, gp_tokenizer **out);
void gp_tokenizer_free(gp_tokenizer *t);

/* Encode len bytes of UTF-8 text (invalid UTF-8 is GP_ERR_INVALID_ARG naming
 * the byte offset). add_special: apply the post-processor (BOS) as HF's
 * encode(text) does by default; the tiktoken form has none. *ids is
 * malloc'd (free()), *n its count. Safe to call from several threads at once. */
gp_status gp_tokenizer_encode(const gp_tokenizer *t, const char *text, size_t len, bool add_special,
                              int32_t **ids, size_t *n);
/* Decode ids (each must be < vocab size: GP_ERR_INVALID_ARG naming the id and
 * the range otherwise); skip_special drops special added tokens. *text
 * malloc'd and NUL-terminated, *len its length. Bytes that are not valid
 * UTF-8 become U+FFFD as HF's decode shows them. */
gp_status gp_tokenizer_decode(const gp_tokenizer *t, const int32_t *ids, size_t n, bool skip_special,
                              char **text, size_t *len);
int32_t gp_tokenizer_vocab_size(const gp_tokenizer *t); /* ids are 0..vocab_size-1, added tokens included */
int32_t gp_tokenizer_bos_id(const gp_tokenizer *t);     /* -1 when the post-processor adds none */
/* Token id of an exact token string as the file spells it (added or vocab),
 * -1 if absent (e.g. to look up "<|eot_id|>"). */
int32_t gp_tokenizer_token_id(const gp_tokenizer *t, const char *token);

/* Streaming detokenizer for printing tokens as they arrive: push one id, get
 * the text that is now complete (bytes of a partial UTF-8 character, a run of
 * byte-fallback tokens and SentencePiece's leading-space rule held back until
 * they are decided); flush returns the rest. The concatenation of all pieces
 * is gp_tokenizer_decode of all ids. Output pointers are malloc'd
 * (NUL-terminated, possibly empty), caller frees. */
typedef struct gp_detok gp_detok;
gp_status gp_detok_create(const gp_tokenizer *t, bool skip_special, gp_detok **out);
gp_status gp_detok_push(gp_detok *d, int32_t id, char **text, size_t *len);
gp_status gp_detok_flush(gp_detok *d, char **text, size_t *len);
void gp_detok_free(gp_detok *d);

#ifdef __cplusplus
}
#endif

#endif
