/* The one input check of a mixed batch (gp_stage.h): decode steps,
 * prefills and mixed batches of every executor are refused by it alike. */
#include "gp_stage.h"

static const char *kind_name(gp_batch_kind k)
{
    return k == GP_BATCH_DECODE ? "decode" : "prefill";
}

gp_status gp_batch_check(const gp_batch *b, const gp_batch_limits *lim, const char *who, long long *rows,
                         long long *prefill_rows)
{
    if (!who)
        who = "batch";
    if (!b || !lim)
        GP_FAIL(GP_ERR_INVALID_ARG, "%s: batch %p and limits %p are required", who, (const void *)b,
                (const void *)lim);
    if (b->n_parts < 1 || b->n_parts > lim->max_seqs || !b->parts)
        GP_FAIL(GP_ERR_INVALID_ARG, "%s: %d sequences, allowed 1..%d (the max batch)%s", who, b->n_parts,
                lim->max_seqs, b->parts ? "" : ", and the parts must not be NULL");
    long long total = 0, pre = 0;
    bool decode_seen = false;
    for (int i = 0; i < b->n_parts; i++) {
        const gp_batch_part *p = &b->parts[i];
        if (p->seq < 0 || p->seq >= lim->max_seqs)
            GP_FAIL(GP_ERR_INVALID_ARG, "%s: sequence id %d: allowed [0, %d]", who, p->seq, lim->max_seqs - 1);
        for (int j = 0; j < i; j++)
            if (b->parts[j].seq == p->seq)
                GP_FAIL(GP_ERR_INVALID_ARG, "%s: sequence id %d appears twice in one batch", who, p->seq);
        if (p->kind != GP_BATCH_PREFILL && p->kind != GP_BATCH_DECODE)
            GP_FAIL(GP_ERR_INVALID_ARG, "%s: sequence %d: part kind %d, allowed %d (prefill) or %d (decode)", who,
                    p->seq, (int)p->kind, (int)GP_BATCH_PREFILL, (int)GP_BATCH_DECODE);
        if (p->kind == GP_BATCH_DECODE)
            decode_seen = true;
        else if (decode_seen)
            GP_FAIL(GP_ERR_INVALID_ARG, "%s: the prefill part of sequence %d follows a decode part; the prefill "
                    "parts come first", who, p->seq);
        if (p->n < 1 || !p->tokens || (p->kind == GP_BATCH_DECODE && p->n != 1))
            GP_FAIL(GP_ERR_INVALID_ARG, "%s: %s part of sequence %d has %d tokens, allowed %s%s", who,
                    kind_name(p->kind), p->seq, p->n, p->kind == GP_BATCH_DECODE ? "1" : "at least 1",
                    p->tokens ? "" : " (and tokens, which are NULL)");
        /* room first: a part longer than it never has its tokens read */
        const int len = lim->seq_len ? lim->seq_len(lim->ctx, p->seq) : 0;
        if ((long long)len + p->n > lim->max_context)
            GP_FAIL(GP_ERR_STATE, "%s: %d tokens do not fit sequence %d: it holds %d tokens and the max context "
                    "is %d", who, p->n, p->seq, len, lim->max_context);
        for (int t = 0; t < p->n; t++)
            if (p->tokens[t] < 0 || p->tokens[t] >= lim->vocab)
                GP_FAIL(GP_ERR_INVALID_ARG, "%s: token %d at position %d of sequence %d's %s part: allowed [0, %d]",
                        who, p->tokens[t], t, p->seq, kind_name(p->kind), lim->vocab - 1);
        total += p->n;
        if (p->kind == GP_BATCH_PREFILL)
            pre += p->n;
    }
    if (lim->max_rows > 0 && total > lim->max_rows)
        GP_FAIL(GP_ERR_INVALID_ARG, "%s: %lld tokens in one batch, allowed at most %d", who, total, lim->max_rows);
    if (rows)
        *rows = total;
    if (prefill_rows)
        *prefill_rows = pre;
    return GP_OK;
}
