/* The performance model of docs/ARCHITECTURE.md §5: bytes, flops and the floor of
 * one decode step, so every report measures against the same number. */
#include "gp_model.h"

void gp_step_floor(const gp_config *c, int B, double C, int M, gp_step_cost *out)
{
    double params = (double)gp_config_param_count(c);
    double embed = (double)gp_config_vocab_rows(c) * c->hidden; /* a tensor parallel rank's part */
    /* untied: the embedding table is not streamed, only B rows of it are read */
    double read_params = c->tied_embeddings ? params : params - embed;
    double kv_tok = 2.0 * c->n_layers * c->n_kv_heads * c->head_dim * 2.0; /* K+V, bf16 */
    double weights = read_params * 2.0 * (M > 1 ? M : 1);                   /* each micro-batch reads them */
    out->bytes = weights + (double)B * c->hidden * 2.0 + (double)B * C * kv_tok + (double)B * kv_tok;
    out->flops = 2.0 * read_params * B + 4.0 * B * C * c->n_heads * c->head_dim * c->n_layers;
    double t_mem = out->bytes / GP_HBM_BYTES_PER_S, t_flop = out->flops / GP_GEMM_FLOPS_PER_S;
    out->floor_ms = 1e3 * (t_mem > t_flop ? t_mem : t_flop);
}
