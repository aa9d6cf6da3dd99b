/* Host-side token sampling (temperature, top-k, top-p, min-p) over one row
 * of fp32 logits, with a seeded xoshiro256** generator; the repeat penalty. */
#include "gp_tools.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void gp_rng_seed(gp_rng *r, uint64_t seed, uint64_t stream)
{
    /* Mixing the stream in through its own splitmix step keeps (seed, stream)
     * pairs apart: seed + stream alone would make (1, 0) and (0, 1) equal. */
    uint64_t x = seed, y = stream ^ 0x6a09e667f3bcc909ull;
    x ^= splitmix64(&y);
    for (int i = 0; i < 4; i++)
        r->s[i] = splitmix64(&x);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t gp_rng_next(gp_rng *r)
{
    uint64_t *s = r->s;
    uint64_t out = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return out;
}

double gp_rng_uniform(gp_rng *r)
{
    return (double)(gp_rng_next(r) >> 11) * 0x1.0p-53;
}

gp_status gp_sample_params_check(const gp_sample_params *p, int vocab)
{
    if (!(p->temperature >= 0.0 && p->temperature <= GP_SAMPLE_MAX_TEMPERATURE))
        GP_FAIL(GP_ERR_INVALID_ARG, "--temperature %g is out of range; allowed: [0, %g] (0: greedy)",
                p->temperature, GP_SAMPLE_MAX_TEMPERATURE);
    if (p->top_k < 0 || p->top_k > vocab)
        GP_FAIL(GP_ERR_INVALID_ARG, "--top-k %d is out of range; allowed: [0, %d] (the vocabulary; 0: off)",
                p->top_k, vocab);
    if (!(p->top_p > 0.0 && p->top_p <= 1.0))
        GP_FAIL(GP_ERR_INVALID_ARG, "--top-p %g is out of range; allowed: (0, 1] (1: off)", p->top_p);
    if (!(p->min_p >= 0.0 && p->min_p <= 1.0))
        GP_FAIL(GP_ERR_INVALID_ARG, "--min-p %g is out of range; allowed: [0, 1] (0: off)", p->min_p);
    return GP_OK;
}

gp_status gp_sampler_init(gp_sampler *s, int vocab)
{
    memset(s, 0, sizeof *s);
    if (vocab < 1)
        GP_FAIL(GP_ERR_INVALID_ARG, "gp_sampler_init: vocab %d; allowed: >= 1", vocab);
    s->vocab = vocab;
    s->idx = malloc((size_t)vocab * sizeof *s->idx);
    s->prob = malloc((size_t)vocab * sizeof *s->prob);
    s->seen = calloc((size_t)vocab, sizeof *s->seen);
    if (!s->idx || !s->prob || !s->seen) {
        gp_sampler_free(s);
        GP_FAIL(GP_ERR_NO_MEMORY, "sampler: out of memory for %d candidates", vocab);
    }
    return GP_OK;
}

void gp_sampler_free(gp_sampler *s)
{
    free(s->idx);
    free(s->prob);
    free(s->seen);
    memset(s, 0, sizeof *s);
}

static float key(const float *logits, int32_t i)
{
    float v = logits[i];
    return isnan(v) ? -INFINITY : v;
}

/* The candidate order: a ranks before b. */
static bool ahead(const float *logits, int32_t a, int32_t b)
{
    float ka = key(logits, a), kb = key(logits, b);
    return ka > kb || (ka == kb && a < b);
}

/* Min-heap by rank (the root ranks last), for the k best of the vocabulary. */
static void sift_down(const float *logits, int32_t *h, int n, int i)
{
    for (;;) {
        int l = 2 * i + 1, r = l + 1, m = i;
        if (l < n && ahead(logits, h[m], h[l]))
            m = l;
        if (r < n && ahead(logits, h[m], h[r]))
            m = r;
        if (m == i)
            return;
        int32_t t = h[i];
        h[i] = h[m];
        h[m] = t;
        i = m;
    }
}

/* The best k ids of the ids in h[0..n) (n >= k) into h[0..k), by rank. */
static void best_k(const float *logits, int32_t *h, int n, int k)
{
    for (int i = k / 2 - 1; i >= 0; i--)
        sift_down(logits, h, k, i);
    for (int i = k; i < n; i++)
        if (ahead(logits, h[i], h[0])) {
            h[0] = h[i];
            sift_down(logits, h, k, 0);
        }
    /* heap sort: pop the last-ranked to the end */
    for (int end = k - 1; end > 0; end--) {
        int32_t t = h[0];
        h[0] = h[end];
        h[end] = t;
        sift_down(logits, h, end, 0);
    }
}

/* The weights exp((l - max) / T) of s->idx[0..n) into s->prob; their sum. */
static double weigh(gp_sampler *s, const float *logits, int n, float max, double t)
{
    double sum = 0.0;
    for (int i = 0; i < n; i++) {
        float l = key(logits, s->idx[i]);
        double w = l == -INFINITY ? 0.0 : exp(((double)l - (double)max) / t);
        s->prob[i] = w;
        sum += w;
    }
    return sum;
}

/* Fills s->idx / s->prob with the kept candidates and their (unnormalised)
 * weights; returns their count and *sum their total weight. Candidates are
 * in rank order when top-k or top-p truncated them, in id order otherwise. */
static int candidates(gp_sampler *s, const gp_sample_params *p, const float *logits, double *sum)
{
    int V = s->vocab;
    float max = -INFINITY;
    for (int i = 0; i < V; i++)
        if (key(logits, i) > max)
            max = key(logits, i);
    double t = p->temperature;
    for (int i = 0; i < V; i++)
        s->idx[i] = i;
    if (max == -INFINITY) { /* nothing has weight: the argmax rule's id 0 */
        s->prob[0] = 1.0;
        *sum = 1.0;
        return 1;
    }
    int n = V;
    bool ranked = false;
    if (p->top_k > 0 && p->top_k < V) {
        best_k(logits, s->idx, V, p->top_k);
        n = p->top_k;
        ranked = true;
    }
    double total = weigh(s, logits, n, max, t);
    if (p->top_p < 1.0) {
        if (!ranked) {
            /* The nucleus is a prefix of the rank order, so it lies inside
             * every prefix {w >= theta} whose mass already reaches top_p:
             * sort only that, lowering theta until it does. s->prob is
             * still indexed by id here. */
            double goal = p->top_p * total, theta = 1e-4;
            for (;;) {
                double mass = 0.0;
                int m = 0;
                for (int i = 0; i < V; i++)
                    if (s->prob[i] >= theta) {
                        mass += s->prob[i];
                        s->idx[m++] = i;
                    }
                if (mass >= goal || theta == 0.0) {
                    best_k(logits, s->idx, m, m);
                    n = m;
                    break;
                }
                theta = theta > 1e-300 ? theta * 1e-4 : 0.0;
            }
            weigh(s, logits, n, max, t); /* the nucleus is of the whole mass, total */
        }
        double goal = p->top_p * total, cum = 0.0;
        int keep = 0;
        while (keep < n) {
            cum += s->prob[keep++];
            if (cum >= goal)
                break;
        }
        n = keep;
        total = cum;
    }
    if (p->min_p > 0.0) {
        /* weights are relative to the top logit, which every truncation
         * keeps: its weight is 1, so the bar is min_p itself; filtering in
         * place keeps the candidates' order */
        int keep = 0;
        total = 0.0;
        for (int i = 0; i < n; i++)
            if (s->prob[i] >= p->min_p) {
                s->idx[keep] = s->idx[i];
                s->prob[keep++] = s->prob[i];
                total += s->prob[i];
            }
        n = keep;
    }
    *sum = total;
    return n;
}

int gp_sample_candidates(gp_sampler *s, const gp_sample_params *p, const float *logits)
{
    if (p->temperature <= 0.0) {
        s->idx[0] = gp_sample(s, p, logits, NULL);
        s->prob[0] = 1.0;
        return 1;
    }
    double sum = 0.0;
    int n = candidates(s, p, logits, &sum);
    for (int i = 0; i < n; i++)
        s->prob[i] /= sum;
    return n;
}

int32_t gp_sample(gp_sampler *s, const gp_sample_params *p, const float *logits, gp_rng *rng)
{
    if (p->temperature <= 0.0) {
        int32_t best = 0;
        for (int i = 1; i < s->vocab; i++)
            if (key(logits, i) > key(logits, best))
                best = i;
        return best;
    }
    double sum = 0.0;
    int n = candidates(s, p, logits, &sum);
    double u = gp_rng_uniform(rng) * sum, cum = 0.0;
    int last = 0;
    for (int i = 0; i < n; i++) {
        if (s->prob[i] <= 0.0)
            continue;
        last = i;
        cum += s->prob[i];
        if (u < cum)
            return s->idx[i];
    }
    return s->idx[last]; /* u rounded past the total */
}

gp_repeat_params gp_repeat_default_params(void)
{
    return (gp_repeat_params){.penalty = 1.0, .last_n = GP_REPEAT_DEFAULT_LAST_N};
}

gp_status gp_repeat_params_check(const gp_repeat_params *r)
{
    if (!(r->penalty > 0.0 && r->penalty <= GP_REPEAT_MAX_PENALTY))
        GP_FAIL(GP_ERR_INVALID_ARG, "--repeat-penalty %g is out of range; allowed: (0, %g] (1: off)", r->penalty,
                GP_REPEAT_MAX_PENALTY);
    if (r->last_n < -1)
        GP_FAIL(GP_ERR_INVALID_ARG, "--repeat-last-n %d is out of range; allowed: -1 (the whole context), 0 (off) "
                "or a count of tokens", r->last_n);
    return GP_OK;
}

bool gp_repeat_on(const gp_repeat_params *r)
{
    return r->penalty != 1.0 && r->last_n != 0;
}

void gp_repeat_penalize(gp_sampler *s, const gp_repeat_params *r, float *logits, const int32_t *ctx, long n)
{
    if (!gp_repeat_on(r))
        return;
    long from = r->last_n < 0 || r->last_n >= n ? 0 : n - r->last_n;
    float pen = (float)r->penalty;
    /* llama.cpp's rule: a repeated token's logit moves toward less likely
     * whatever its sign, once however often the token repeats */
    for (long i = from; i < n; i++) {
        int32_t t = ctx[i];
        if (t < 0 || t >= s->vocab || s->seen[t])
            continue;
        s->seen[t] = 1;
        logits[t] = logits[t] <= 0.0f ? logits[t] * pen : logits[t] / pen;
    }
    for (long i = from; i < n; i++)
        if (ctx[i] >= 0 && ctx[i] < s->vocab)
            s->seen[ctx[i]] = 0;
}
