/* Sampling chain; the order and formulas are documented in sampler.h.
 *
 * Hot path: the logits are copied once into w[] (penalised logits in id
 * order: the penalties touch only the tokens in the window), and the
 * truncations avoid sorting the whole vocabulary. Greedy is an argmax over
 * w[] (one vector pass for the maximum, one for its first index); top-k up
 * to HEAP_MAX_K keeps a heap of the k best and skips, sixteen at a time, the
 * logits not above the heap's worst, which after the first few thousand ids
 * is nearly all of them; larger top-k, top-p without top-k and min-p alone
 * build the whole candidate array (id, logit): top-p then sorts a growing
 * prefix (bucket pass below), min-p is a linear filter. These scans are the
 * serial part of every decode step (a sequence's sampling runs on one
 * thread while the compute pool waits), so they are written for the 150k-
 * 250k vocabularies of the Qwen models: ~0.9 ms a token with one scalar
 * pass over (id, logit) pairs and a scalar heap, tens of microseconds now.
 * No allocation after sampler_new.
 *
 * Traps:
 *  - top-p must normalise over the candidates left after top-k, not over the
 *    vocabulary, and it sees untempered logits (llama.cpp order).
 *  - Weights are exp(logit - max): a -inf max (everything masked) or +inf
 *    logits would give NaN; a NaN difference means "equal to the max" here.
 *  - The repetition penalty divides a positive logit but multiplies a
 *    negative one (both push it down); it applies once per distinct token,
 *    not once per occurrence.
 */
#include "text/sampler.h"

#include "quant/mat.h"
#include "util/err.h"
#include "util/rng.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

typedef struct {
    float logit;
    int32_t id;
} cand;

struct sampler {
    sampler_params p;
    int32_t n_vocab;
    uint64_t seed;
    uint64_t rng[4];
    cand *c;        /* [n_vocab] candidates of the current step */
    float *w;       /* [n_vocab] the penalised logits in id order (NaN read as -inf);
                       once candidates are chosen, w[0..m) are their weights */
    int32_t *count; /* [n_vocab] scratch, all zero between calls */
    int32_t *hist;  /* [penalty_last_n] ring of accepted tokens */
    int32_t hist_len, hist_pos;
    /* the last draw, for sampler_logprobs: greedy (w[] holds every token's
     * penalised logit in id order) or c[0..last_m) with weights w[] summing
     * to last_z */
    bool last_greedy;
    size_t last_m;
    double last_z;
};

/* ---- PRNG: splitmix64 seeds xoshiro256** ----------------------------------- */


static uint64_t rotl(uint64_t x, int k) {
    return (x << k) | (x >> (64 - k));
}

static uint64_t rng_next(uint64_t s[4]) {
    uint64_t r = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return r;
}

/* Uniform in [0, 1) with 53 random bits. */
static double rng_unit(uint64_t s[4]) {
    return (double)(rng_next(s) >> 11) * 0x1.0p-53;
}

static void rng_seed(sampler *s) {
    uint64_t x = s->seed;
    for (int i = 0; i < 4; i++)
        s->rng[i] = splitmix64(&x);
}

/* ---- params --------------------------------------------------------------- */

void sampler_params_default(sampler_params *p) {
    p->temperature = 0.8f;
    p->top_k = 40;
    p->top_p = 0.95f;
    p->min_p = 0.05f;
    p->repeat_penalty = 1.0f;
    p->presence_penalty = 0.0f;
    p->frequency_penalty = 0.0f;
    p->penalty_last_n = 64;
    p->seed = SAMPLER_SEED_RANDOM;
}

static int check_params(const sampler_params *p, char *err) {
    if (!(isfinite(p->temperature) && p->temperature >= 0))
        return e0_fail(err, E0_EINVAL, "temperature: %g is not a finite value >= 0",
                       (double)p->temperature);
    if (p->top_k < 0)
        return e0_fail(err, E0_EINVAL, "top_k: %d is negative (0 disables it)", p->top_k);
    if (!(p->top_p > 0 && p->top_p <= 1))
        return e0_fail(err, E0_EINVAL, "top_p: %g is outside (0, 1] (1 disables it)",
                       (double)p->top_p);
    if (!(p->min_p >= 0 && p->min_p <= 1))
        return e0_fail(err, E0_EINVAL, "min_p: %g is outside [0, 1] (0 disables it)",
                       (double)p->min_p);
    if (!(isfinite(p->repeat_penalty) && p->repeat_penalty > 0))
        return e0_fail(err, E0_EINVAL,
                       "repeat_penalty: %g is not a finite value > 0 (1 disables it)",
                       (double)p->repeat_penalty);
    if (!isfinite(p->presence_penalty))
        return e0_fail(err, E0_EINVAL, "presence_penalty: %g is not finite",
                       (double)p->presence_penalty);
    if (!isfinite(p->frequency_penalty))
        return e0_fail(err, E0_EINVAL, "frequency_penalty: %g is not finite",
                       (double)p->frequency_penalty);
    if (p->penalty_last_n < 0 || p->penalty_last_n > SAMPLER_MAX_LAST_N)
        return e0_fail(err, E0_EINVAL, "penalty_last_n: %d is outside [0, %d]", p->penalty_last_n,
                       SAMPLER_MAX_LAST_N);
    return 0;
}

static uint64_t fresh_seed(void) {
    uint64_t x = 0;
    if (getrandom(&x, sizeof x, 0) != (ssize_t)sizeof x) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        x = (uint64_t)ts.tv_sec * 1000000007ull ^ (uint64_t)ts.tv_nsec ^ (uint64_t)(uintptr_t)&x;
    }
    return x == SAMPLER_SEED_RANDOM ? 0 : x;
}

int sampler_new(const sampler_params *p, int32_t vocab_size, sampler **out, char *err) {
    if (!p || !out) return e0_fail(err, E0_EINVAL, "sampler_new: NULL argument");
    *out = NULL;
    int rc = check_params(p, err);
    if (rc) return rc;
    if (vocab_size <= 0)
        return e0_fail(err, E0_EINVAL, "vocab_size: %d is not positive", vocab_size);
    sampler *s = calloc(1, sizeof *s);
    if (!s) return e0_fail(err, E0_ENOMEM, "sampler_new: out of memory");
    s->p = *p;
    s->n_vocab = vocab_size;
    s->c = malloc((size_t)vocab_size * sizeof *s->c);
    s->w = malloc((size_t)vocab_size * sizeof *s->w);
    s->count = calloc((size_t)vocab_size, sizeof *s->count);
    s->hist = malloc((size_t)(p->penalty_last_n ? p->penalty_last_n : 1) * sizeof *s->hist);
    if (!s->c || !s->w || !s->count || !s->hist) {
        sampler_free(s);
        return e0_fail(err, E0_ENOMEM, "sampler_new: out of memory (vocab %d)", vocab_size);
    }
    s->seed = p->seed == SAMPLER_SEED_RANDOM ? fresh_seed() : p->seed;
    rng_seed(s);
    *out = s;
    return 0;
}

void sampler_free(sampler *s) {
    if (!s) return;
    free(s->c);
    free(s->w);
    free(s->count);
    free(s->hist);
    free(s);
}

void sampler_reset(sampler *s) {
    s->hist_len = s->hist_pos = 0;
    rng_seed(s);
}

uint64_t sampler_seed(const sampler *s) {
    return s->seed;
}

int sampler_accept(sampler *s, int32_t token) {
    if (token < 0 || token >= s->n_vocab) return E0_ERANGE;
    int32_t n = s->p.penalty_last_n;
    if (n == 0) return 0;
    s->hist[s->hist_pos] = token;
    s->hist_pos = (s->hist_pos + 1) % n;
    if (s->hist_len < n) s->hist_len++;
    return 0;
}

/* ---- stage 1: penalties ---------------------------------------------------- */

static bool penalties_on(const sampler *s) {
    const sampler_params *p = &s->p;
    return s->hist_len > 0 && (p->repeat_penalty != 1.0f || p->presence_penalty != 0.0f ||
                               p->frequency_penalty != 0.0f);
}

static float penalize1(const sampler_params *p, float l, int32_t count) {
    l = l <= 0 ? l * p->repeat_penalty : l / p->repeat_penalty;
    return l - ((float)count * p->frequency_penalty + p->presence_penalty);
}

/* Counts the window into s->count; returns the window length. Each caller
 * then visits the window, penalises a token when its count is non-zero and
 * clears the count, so each distinct token is penalised once and s->count is
 * all zero again afterwards. */
static int32_t count_window(sampler *s) {
    for (int32_t i = 0; i < s->hist_len; i++)
        s->count[s->hist[i]]++;
    return s->hist_len;
}

void sampler_penalize(sampler *s, float *logits) {
    if (!penalties_on(s)) return;
    for (int32_t i = 0, n = count_window(s); i < n; i++) {
        int32_t t = s->hist[i];
        if (!s->count[t]) continue;
        logits[t] = penalize1(&s->p, logits[t], s->count[t]);
        s->count[t] = 0;
    }
}

/* The logits as the sampler reads them: NaN is -inf. */
static inline float logit_of(float l) {
    return l == l ? l : -INFINITY;
}

/* w[0..n) = logits, with the penalties applied to the window's tokens. */
static void penalised_copy(sampler *s, const float *logits, size_t n) {
    memcpy(s->w, logits, n * sizeof *s->w);
    if (!penalties_on(s)) return;
    for (int32_t i = 0, nh = count_window(s); i < nh; i++) {
        int32_t t = s->hist[i];
        if (!s->count[t]) continue;
        s->w[t] = penalize1(&s->p, logit_of(s->w[t]), s->count[t]);
        s->count[t] = 0;
    }
}

/* ---- scans over the vocabulary ------------------------------------------------------
 * AVX-512 where the CPU has it (a function attribute and a check at run
 * time, so the build needs no -m flags), else the same scans in scalar C. */
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define SAMPLER_X86 1

__attribute__((target("avx512f"))) static float max_avx512(const float *x, size_t n) {
    __m512 m = _mm512_set1_ps(-INFINITY);
    size_t i = 0;
    for (; i + 16 <= n; i += 16) /* maxps returns its second operand when one is NaN: m */
        m = _mm512_max_ps(_mm512_loadu_ps(x + i), m);
    if (i < n) {
        const __mmask16 k = (__mmask16)((1u << (n - i)) - 1);
        m = _mm512_max_ps(_mm512_mask_loadu_ps(_mm512_set1_ps(-INFINITY), k, x + i), m);
    }
    return _mm512_reduce_max_ps(m);
}

__attribute__((target("avx512f"))) static size_t above_avx512(const float *x, size_t i, size_t n,
                                                              float thr, bool eq) {
    const __m512 t = _mm512_set1_ps(thr);
    for (; i + 16 <= n; i += 16) {
        const __m512 v = _mm512_loadu_ps(x + i);
        const __mmask16 k = eq ? _mm512_cmp_ps_mask(v, t, _CMP_EQ_OQ) : _mm512_cmp_ps_mask(v, t, _CMP_GT_OQ);
        if (k) return i + (size_t)__builtin_ctz(k);
    }
    for (; i < n; i++)
        if (eq ? x[i] == thr : x[i] > thr) return i;
    return n;
}

static bool have_avx512(void) {
    static int have = -1; /* the kernels' CPU check, once; a benign race: every thread finds the same */
    if (have < 0) have = e0_kernels_supported(E0_KERNELS_AVX512) ? 1 : 0;
    return have;
}
#else
#define SAMPLER_X86 0
#endif

/* The largest of x[0..n), NaN read as -inf; -inf when all are. */
static float vocab_max(const float *x, size_t n) {
#if SAMPLER_X86
    if (have_avx512()) return max_avx512(x, n);
#endif
    float m = -INFINITY;
    for (size_t i = 0; i < n; i++)
        if (x[i] > m) m = x[i];
    return m;
}

/* The first j in [i, n) with x[j] > thr (eq: x[j] == thr), else n. */
static size_t vocab_next(const float *x, size_t i, size_t n, float thr, bool eq) {
#if SAMPLER_X86
    if (have_avx512()) return above_avx512(x, i, n, thr, eq);
#endif
    for (; i < n; i++)
        if (eq ? x[i] == thr : x[i] > thr) return i;
    return n;
}

size_t e0_argmax(const float *x, size_t n) {
    if (n == 0) return 0;
    const float m = vocab_max(x, n);
    if (m == -INFINITY) return 0; /* every logit -inf or NaN: the first */
    return vocab_next(x, 0, n, m, true);
}

/* ---- ordering and selection ------------------------------------------------------ */

/* a comes before b: higher logit, then lower id (a total order). */
static inline bool before(const cand *a, const cand *b) {
    return a->logit > b->logit || (a->logit == b->logit && a->id < b->id);
}

static int cand_cmp(const void *pa, const void *pb) {
    const cand *a = pa, *b = pb;
    return before(a, b) ? -1 : before(b, a) ? 1 : 0;
}

static inline void cswap(cand *c, size_t i, size_t j) {
    cand t = c[i];
    c[i] = c[j];
    c[j] = t;
}

/* Moves the m best of c[0..n) to c[0..m), unordered (quickselect with a
 * median-of-three pivot). */
static void select_top(cand *c, size_t n, size_t m) {
    size_t lo = 0, hi = n;
    if (m == 0 || m >= n) return;
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2, last = hi - 1;
        if (before(&c[mid], &c[lo])) cswap(c, mid, lo);
        if (before(&c[last], &c[lo])) cswap(c, last, lo);
        if (before(&c[last], &c[mid])) cswap(c, last, mid);
        cswap(c, mid, last); /* the median is the pivot, at `last` */
        cand piv = c[last];
        size_t st = lo;
        for (size_t i = lo; i < last; i++)
            if (before(&c[i], &piv)) cswap(c, i, st++);
        cswap(c, st, last);
        if (m < st)
            hi = st;
        else if (m > st + 1)
            lo = st + 1;
        else
            break;
    }
}

/* The same for small m: a heap of the m best kept in c[0..m) with the worst
 * at the root; one comparison for most of the vocabulary. */
static void heap_down(cand *h, size_t m, size_t i) {
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, w = i;
        if (l < m && before(&h[w], &h[l])) w = l;
        if (r < m && before(&h[w], &h[r])) w = r;
        if (w == i) return;
        cswap(h, i, w);
        i = w;
    }
}

static void heap_top(cand *c, size_t n, size_t m) {
    for (size_t i = m / 2; i-- > 0;)
        heap_down(c, m, i);
    for (size_t i = m; i < n; i++)
        if (before(&c[i], &c[0])) {
            c[0] = c[i];
            heap_down(c, m, 0);
        }
}

/* c[0..m) = the m best of the penalised logits w[0..n) (0 < m < n),
 * unordered: heap_top over (i, w[i]) without writing the other candidates.
 * A later id never beats an equal logit already kept (ids ascend), so only
 * logits above the heap's worst can enter, and the scan skips the rest. */
static void heap_top_w(cand *c, const float *w, size_t n, size_t m) {
    for (size_t i = 0; i < m; i++)
        c[i] = (cand){logit_of(w[i]), (int32_t)i};
    for (size_t i = m / 2; i-- > 0;)
        heap_down(c, m, i);
    for (size_t i = vocab_next(w, m, n, c[0].logit, false); i < n;
         i = vocab_next(w, i + 1, n, c[0].logit, false)) {
        c[0] = (cand){w[i], (int32_t)i};
        heap_down(c, m, 0);
    }
}

#define HEAP_MAX_K 256

/* c[0..k) = the k best, sorted. */
static void top_k(cand *c, size_t n, size_t k) {
    if (k <= HEAP_MAX_K)
        heap_top(c, n, k);
    else
        select_top(c, n, k);
    qsort(c, k, sizeof *c, cand_cmp);
}

/* exp(l - max), with a NaN difference (inf - inf) read as equal to max. */
static inline float weight(float l, float max, float inv_t) {
    float d = l - max;
    return d == d ? expf(d * inv_t) : 1.0f;
}

static float max_logit(const cand *c, size_t n) {
    float m = c[0].logit;
    for (size_t i = 1; i < n; i++)
        if (c[i].logit > m) m = c[i].logit;
    return m;
}

/* ---- top-p ---------------------------------------------------------------------
 *
 * On a sorted list (after top-k) a running sum. On the whole vocabulary a
 * bucket pass instead of a sort: logits fall into TP_BUCKETS buckets of
 * width TP_RANGE / TP_BUCKETS below the max (the last one takes the rest);
 * the bucket masses locate the bucket where the running mass crosses top_p;
 * buckets above it are kept whole and unsorted, and only that one bucket is
 * sorted to find the exact cut. The kept set is the same as a full sort's. */
#define TP_BUCKETS 1024
#define TP_RANGE   32.0f

static inline size_t bucket_of(float l, float mx) {
    float d = (mx - l) * ((float)TP_BUCKETS / TP_RANGE);
    if (!(d >= 0)) return 0; /* NaN: inf - inf, equal to the max */
    return d < (float)(TP_BUCKETS - 1) ? (size_t)d : TP_BUCKETS - 1;
}

static size_t top_p_sorted(const cand *c, size_t m, float mx, float p) {
    double z = 0, cum = 0;
    for (size_t i = 0; i < m; i++)
        z += weight(c[i].logit, mx, 1.0f);
    double target = (double)p * z;
    for (size_t i = 0; i < m; i++) {
        cum += weight(c[i].logit, mx, 1.0f);
        if (cum >= target) return i + 1;
    }
    return m;
}

static size_t top_p_buckets(cand *c, size_t m, float mx, float p) {
    double mass[TP_BUCKETS] = {0}, z = 0;
    for (size_t i = 0; i < m; i++) {
        float w = weight(c[i].logit, mx, 1.0f);
        mass[bucket_of(c[i].logit, mx)] += w;
        z += w;
    }
    double target = (double)p * z, cum = 0;
    size_t k = 0;
    for (; k < TP_BUCKETS; k++) {
        if (cum + mass[k] >= target) break;
        cum += mass[k];
    }
    if (k == TP_BUCKETS) return m; /* rounding: everything */
    /* three-way partition: buckets < k, == k, > k */
    size_t lo = 0, mid = 0, hi = m;
    while (mid < hi) {
        size_t b = bucket_of(c[mid].logit, mx);
        if (b < k)
            cswap(c, lo++, mid++);
        else if (b == k)
            mid++;
        else
            cswap(c, mid, --hi);
    }
    qsort(c + lo, mid - lo, sizeof *c, cand_cmp);
    for (size_t i = lo; i < mid; i++) {
        cum += weight(c[i].logit, mx, 1.0f);
        if (cum >= target) return i + 1;
    }
    return mid;
}

/* log p of candidate i of the last draw; logz: greedy's log-normaliser. */
static float cand_logprob(const sampler *s, size_t i, float logz) {
    double lp = s->last_greedy ? (double)logit_of(s->w[i]) - logz : log(s->w[i] / s->last_z);
    return lp > SAMPLER_LOGPROB_MIN ? (float)lp : SAMPLER_LOGPROB_MIN; /* -inf, or NaN from 0 / 0 */
}

int32_t sampler_logprobs(const sampler *s, int32_t id, float *lp, int32_t n_top, int32_t *top_ids, float *top_lps) {
    const cand *c = s->c;
    size_t m = s->last_m;
    float logz = 0;
    if (s->last_greedy) { /* log-sum-exp of the penalised logits */
        const float mx = vocab_max(s->w, m);
        double z = 0;
        for (size_t i = 0; isfinite(mx) && i < m; i++)
            z += exp((double)logit_of(s->w[i]) - mx);
        logz = isfinite(mx) ? mx + (float)log(z) : 0;
    }
    *lp = SAMPLER_LOGPROB_MIN;
    int32_t k = 0;
    for (size_t i = 0; i < m; i++) {
        const float l = cand_logprob(s, i, logz);
        const int32_t ci = s->last_greedy ? (int32_t)i : c[i].id;
        if (ci == id) *lp = l;
        if (n_top <= 0) continue;
        /* insertion into the sorted top list; ties: lower id first */
        int32_t at = k;
        while (at > 0 && (top_lps[at - 1] < l || (top_lps[at - 1] == l && top_ids[at - 1] > ci)))
            at--;
        if (at >= n_top) continue;
        int32_t last = k < n_top ? k : n_top - 1;
        for (int32_t j = last; j > at; j--)
            top_ids[j] = top_ids[j - 1], top_lps[j] = top_lps[j - 1];
        top_ids[at] = ci;
        top_lps[at] = l;
        if (k < n_top) k++;
    }
    return k;
}

bool sampler_greedy(const sampler *s) {
    /* also for a temperature so small that 1 / T overflows */
    return s->p.temperature <= 0 || isinf(1.0f / s->p.temperature);
}

/* Stages 1-5 and the weights of stage 6: c[0..last_m) with weights
 * w[0..last_m) summing to last_z (greedy: w[] the penalised logits in id
 * order, and the argmax returned; else -1). What a draw then reads. */
static int32_t filter(sampler *s, const float *logits) {
    const sampler_params *p = &s->p;
    cand *c = s->c;
    size_t n = (size_t)s->n_vocab;
    penalised_copy(s, logits, n);
    if (sampler_greedy(s)) {
        s->last_greedy = true;
        s->last_m = n;
        return (int32_t)e0_argmax(s->w, n);
    }

    size_t m = n; /* candidates left: c[0..m) */
    bool sorted = false;
    if (p->top_k > 0 && (size_t)p->top_k < n && p->top_k <= HEAP_MAX_K) {
        m = (size_t)p->top_k;
        heap_top_w(c, s->w, n, m);
        qsort(c, m, sizeof *c, cand_cmp);
        sorted = true;
    } else {
        for (size_t i = 0; i < n; i++)
            c[i] = (cand){logit_of(s->w[i]), (int32_t)i};
        if (p->top_k > 0 && (size_t)p->top_k < n) {
            m = (size_t)p->top_k;
            top_k(c, n, m);
            sorted = true;
        }
    }
    /* every stage keeps the maximum, so it is found once */
    float mx = sorted ? c[0].logit : max_logit(c, m);
    if (p->top_p < 1.0f)
        m = sorted ? top_p_sorted(c, m, mx, p->top_p) : top_p_buckets(c, m, mx, p->top_p);

    if (p->min_p > 0.0f) {
        float thr = mx + logf(p->min_p);
        size_t k = 0;
        if (sorted) {
            while (k < m && c[k].logit >= thr)
                k++;
        } else {
            for (size_t i = 0; i < m; i++)
                if (c[i].logit >= thr) c[k++] = c[i];
        }
        m = k ? k : 1; /* the maximum passes; k == 0 cannot happen */
    }

    float inv_t = 1.0f / p->temperature, *w = s->w;
    double z = 0;
    for (size_t i = 0; i < m; i++)
        z += w[i] = weight(c[i].logit, mx, inv_t);
    s->last_greedy = false;
    s->last_m = m;
    s->last_z = z;
    return -1;
}

int32_t sampler_sample(sampler *s, const float *logits) {
    if (!logits) return E0_EINVAL;
    const int32_t g = filter(s, logits);
    if (g >= 0) return g;
    cand *c = s->c;
    const float *w = s->w;
    const size_t m = s->last_m;
    double u = rng_unit(s->rng) * s->last_z, cum = 0;
    for (size_t i = 0; i < m; i++) {
        cum += w[i];
        if (u < cum) return c[i].id;
    }
    /* u landed on the rounding slack at the end: the last token with weight */
    for (size_t i = m; i-- > 0;)
        if (w[i] > 0) return c[i].id;
    return c[0].id;
}

void sampler_dist(sampler *s, const float *logits, float *p) {
    const int32_t g = filter(s, logits);
    memset(p, 0, (size_t)s->n_vocab * sizeof *p);
    if (g >= 0) {
        p[g] = 1.0f;
        return;
    }
    for (size_t i = 0; i < s->last_m; i++)
        p[s->c[i].id] = (float)(s->w[i] / s->last_z);
}

int32_t sampler_draw(sampler *s, const float *w) {
    const size_t n = (size_t)s->n_vocab;
    double z = 0, cum = 0;
    for (size_t i = 0; i < n; i++)
        z += w[i];
    if (!(z > 0)) return -1;
    const double u = rng_unit(s->rng) * z;
    for (size_t i = 0; i < n; i++) {
        cum += w[i];
        if (u < cum && w[i] > 0) return (int32_t)i;
    }
    for (size_t i = n; i-- > 0;) /* u on the rounding slack: the last with weight */
        if (w[i] > 0) return (int32_t)i;
    return -1;
}

int32_t sampler_spec(sampler *s, const float *logits, int32_t d, const float *q, float *p, float *rest) {
    sampler_dist(s, logits, p);
    const double u = rng_unit(s->rng);
    if (u * (double)q[d] < (double)p[d]) return d; /* u < p(d) / q(d) */
    for (int32_t i = 0; i < s->n_vocab; i++)
        rest[i] = p[i] > q[i] ? p[i] - q[i] : 0.0f;
    const int32_t id = sampler_draw(s, rest);
    return id >= 0 ? id : sampler_draw(s, p); /* p == q: nothing left over, p itself */
}

static inline bool allowed_id(const uint32_t *allowed, int32_t id) {
    return (allowed[id >> 5] >> (id & 31)) & 1;
}

int32_t sampler_resample(sampler *s, const uint32_t *allowed) {
    cand *c = s->c;
    size_t m = s->last_m;
    if (s->last_greedy) { /* w[] is every token's logit in id order */
        float *w = s->w;
        size_t best = m;
        for (size_t i = 0; i < m; i++) {
            if (!allowed_id(allowed, (int32_t)i)) w[i] = -INFINITY;
            else if (best == m || logit_of(w[i]) > logit_of(w[best])) best = i;
        }
        return best == m ? -1 : (int32_t)best;
    }
    double z = 0;
    for (size_t i = 0; i < m; i++) {
        if (!allowed_id(allowed, c[i].id)) s->w[i] = 0;
        z += s->w[i];
    }
    if (!(z > 0)) return -1;
    s->last_z = z;
    double u = rng_unit(s->rng) * z, cum = 0;
    for (size_t i = 0; i < m; i++) {
        cum += s->w[i];
        if (u < cum && s->w[i] > 0) return c[i].id;
    }
    for (size_t i = m; i-- > 0;)
        if (s->w[i] > 0) return c[i].id;
    return -1;
}
