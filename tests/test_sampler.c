/* Sampler: greedy, reproducibility, the softmax frequencies, what top-p and
 * min-p exclude, the penalty formulas, parameter validation. */
#include "testutil.h"

#include "edge0.h"
#include "text/sampler.h"

#include <float.h>
#include <stdbool.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static sampler_params plain(float temperature, uint64_t seed) {
    sampler_params p;
    sampler_params_default(&p);
    p.temperature = temperature;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.seed = seed;
    return p;
}

static sampler *mk(const sampler_params *p, int32_t vocab) {
    sampler *s;
    char err[E0_ERR_MAX];
    if (sampler_new(p, vocab, &s, err)) fail_msg("%s", err);
    return s;
}

static uint64_t lcg(uint64_t *x) {
    *x = *x * 6364136223846793005ull + 1442695040888963407ull;
    return *x >> 33;
}

static void random_logits(float *l, int n, uint64_t *x, float scale) {
    for (int i = 0; i < n; i++)
        l[i] = scale * ((float)(lcg(x) % 100000) / 50000.0f - 1.0f);
}

static void test_greedy(void **state) {
    (void)state;
    sampler_params p = plain(0.0f, 1);
    sampler *s = mk(&p, 8);
    float l[8] = {0.1f, -2, 3.5f, 3.4f, NAN, 0, -INFINITY, 1};
    assert_int_equal(sampler_sample(s, l), 2);
    l[7] = 3.5f; /* a tie goes to the lower id */
    assert_int_equal(sampler_sample(s, l), 2);
    l[5] = INFINITY;
    assert_int_equal(sampler_sample(s, l), 5);
    float allnan[8];
    for (int i = 0; i < 8; i++)
        allnan[i] = NAN;
    assert_int_equal(sampler_sample(s, allnan), 0);
    sampler_free(s);

    /* top_k = 1 at any temperature is greedy; so is the default chain at T=0 */
    uint64_t x = 7;
    float big[1000];
    sampler_params k1 = plain(1.5f, 3);
    k1.top_k = 1;
    sampler_params d0;
    sampler_params_default(&d0);
    d0.temperature = 0.0f;
    sampler *a = mk(&k1, 1000), *b = mk(&d0, 1000);
    for (int t = 0; t < 300; t++) {
        random_logits(big, 1000, &x, 5.0f);
        int best = 0;
        for (int i = 1; i < 1000; i++)
            if (big[i] > big[best]) best = i;
        assert_int_equal(sampler_sample(a, big), best);
        assert_int_equal(sampler_sample(b, big), best);
    }
    sampler_free(a);
    sampler_free(b);

    /* a denormal temperature (1 / T = inf) is greedy, not NaN */
    sampler_params tiny = plain(1e-40f, 1);
    a = mk(&tiny, 1000);
    for (int t = 0; t < 20; t++) {
        random_logits(big, 1000, &x, 5.0f);
        int best = 0;
        for (int i = 1; i < 1000; i++)
            if (big[i] > big[best]) best = i;
        assert_int_equal(sampler_sample(a, big), best);
    }
    sampler_free(a);
}

/* Same seed: same tokens, also after reset; another seed: other tokens. */
static void test_seed(void **state) {
    (void)state;
    enum { V = 2000, N = 500 };
    float *l = malloc(V * sizeof *l);
    int32_t seq[3][N];
    uint64_t seeds[3] = {42, 42, 43};
    for (int r = 0; r < 3; r++) {
        sampler_params p;
        sampler_params_default(&p); /* top-k 40, top-p 0.95, min-p 0.05, T 0.8 */
        p.temperature = 1.2f;
        p.seed = seeds[r];
        p.repeat_penalty = 1.1f;
        sampler *s = mk(&p, V);
        uint64_t x = 99;
        for (int i = 0; i < N; i++) {
            random_logits(l, V, &x, 3.0f);
            seq[r][i] = sampler_sample(s, l);
            assert_true(seq[r][i] >= 0 && seq[r][i] < V);
            assert_int_equal(sampler_accept(s, seq[r][i]), 0);
        }
        if (r == 0) { /* reset replays the stream */
            sampler_reset(s);
            x = 99;
            for (int i = 0; i < N; i++) {
                random_logits(l, V, &x, 3.0f);
                int32_t t = sampler_sample(s, l);
                assert_int_equal(t, seq[0][i]);
                sampler_accept(s, t);
            }
        }
        assert_int_equal(sampler_seed(s), seeds[r]);
        sampler_free(s);
    }
    assert_memory_equal(seq[0], seq[1], sizeof seq[0]);
    int same = 0;
    for (int i = 0; i < N; i++)
        same += seq[0][i] == seq[2][i];
    assert_true(same < N / 2);

    /* a drawn seed is reported and replays like a given one */
    sampler_params p = plain(1.0f, SAMPLER_SEED_RANDOM);
    sampler *a = mk(&p, V);
    p.seed = sampler_seed(a);
    sampler *b = mk(&p, V);
    uint64_t x = 5;
    for (int i = 0; i < 200; i++) {
        random_logits(l, V, &x, 1.0f);
        assert_int_equal(sampler_sample(a, l), sampler_sample(b, l));
    }
    sampler_free(a);
    sampler_free(b);
    free(l);
}

/* Draw frequencies against softmax(l / T), within 4.5 standard errors. */
static void check_freq(const float *l, int n, float temperature, const sampler_params *p,
                       int draws) {
    sampler *s = mk(p, n);
    int count[16] = {0};
    for (int i = 0; i < draws; i++) {
        int32_t t = sampler_sample(s, l);
        assert_true(t >= 0 && t < n);
        count[t]++;
    }
    double z = 0, w[16], mx = l[0];
    for (int i = 1; i < n; i++)
        mx = l[i] > mx ? l[i] : mx;
    for (int i = 0; i < n; i++)
        z += w[i] = exp((l[i] - mx) / temperature);
    for (int i = 0; i < n; i++) {
        double want = w[i] / z, got = (double)count[i] / draws;
        double tol = 4.5 * sqrt(want * (1 - want) / draws) + 1e-9;
        printf("  T=%.2f token %d: p %.4f freq %.4f (tol %.4f)\n", (double)temperature, i, want,
               got, tol);
        if (fabs(got - want) > tol)
            fail_msg("token %d: frequency %.4f, softmax %.4f", i, got, want);
    }
    sampler_free(s);
}

static void test_distribution(void **state) {
    (void)state;
    const float l[6] = {1.0f, 2.0f, 0.5f, -1.0f, 3.0f, 0.0f};
    sampler_params p = plain(1.0f, 2024);
    check_freq(l, 6, 1.0f, &p, 20000);
    p = plain(0.5f, 77);
    check_freq(l, 6, 0.5f, &p, 20000);
    p = plain(2.0f, 78);
    check_freq(l, 6, 2.0f, &p, 20000);
}

/* Speculative sampling (sampler_spec): a draft d drawn from q, kept with
 * probability min(1, p(d) / q(d)), else redrawn from norm(max(0, p - q)),
 * is distributed as p, the filtered distribution sampler_sample draws
 * from (top-k 5 here, so p is 0 on three tokens q favours), and kept at
 * the rate sum min(p, q). Chi-square over the 8 tokens, 200000 draws. */
static void test_spec(void **state) {
    (void)state;
    const float l[8] = {1.0f, 2.0f, 0.5f, -1.0f, 3.0f, 0.0f, -2.0f, 1.5f};
    const float q[8] = {0.05f, 0.10f, 0.30f, 0.05f, 0.05f, 0.15f, 0.20f, 0.10f};
    sampler_params sp = plain(1.3f, 4141);
    sp.top_k = 5;
    sampler *s = mk(&sp, 8);
    float p[8], rest[8];
    sampler_dist(s, l, p);
    double accept_want = 0, psum = 0;
    for (int i = 0; i < 8; i++)
        accept_want += p[i] < q[i] ? p[i] : q[i], psum += p[i];
    assert_true(fabs(psum - 1) < 1e-5);
    enum { N = 200000 };
    int count[8] = {0}, kept = 0;
    for (int k = 0; k < N; k++) {
        const int32_t d = sampler_draw(s, q);
        const int32_t id = sampler_spec(s, l, d, q, p, rest);
        assert_true(id >= 0 && id < 8 && p[id] > 0);
        count[id]++;
        kept += id == d;
    }
    double chi2 = 0;
    for (int i = 0; i < 8; i++) {
        if (p[i] == 0) {
            assert_int_equal(count[i], 0);
            continue;
        }
        const double e = p[i] * N;
        chi2 += (count[i] - e) * (count[i] - e) / e;
        printf("  token %d: p %.4f q %.4f freq %.4f\n", i, (double)p[i], (double)q[i], (double)count[i] / N);
    }
    /* 4 degrees of freedom (5 tokens p keeps): P(chi2 > 23.5) = 1e-4 */
    printf("  chi-square %.2f (4 dof), kept %.4f of drafts (sum min(p, q) %.4f)\n", chi2, (double)kept / N,
           accept_want);
    assert_true(chi2 < 23.5);
    /* drafts equal to the redrawn id also count as kept here: at least the rule's rate */
    assert_true((double)kept / N > accept_want - 0.01);
    sampler_free(s);
}

/* top-p keeps the smallest prefix reaching the mass: with p = {.5, .3, .15,
 * .05}, top_p 0.75 keeps tokens 0 and 1 (renormalised), 0.9 keeps 0..2. */
static void test_top_p(void **state) {
    (void)state;
    const float l[4] = {logf(0.5f), logf(0.3f), logf(0.15f), logf(0.05f)};
    for (int pass = 0; pass < 2; pass++) {
        sampler_params p = plain(1.0f, 11 + (uint64_t)pass);
        p.top_p = pass ? 0.9f : 0.75f;
        sampler *s = mk(&p, 4);
        int count[4] = {0};
        for (int i = 0; i < 10000; i++)
            count[sampler_sample(s, l)]++;
        int kept = pass ? 3 : 2;
        for (int t = kept; t < 4; t++)
            assert_int_equal(count[t], 0);
        for (int t = 0; t < kept; t++)
            assert_true(count[t] > 0);
        if (!pass) assert_true(fabs(count[0] / 10000.0 - 0.5 / 0.8) < 0.03);
        sampler_free(s);
    }

    /* A large flat-ish vocabulary: top-p needs far more than the first 256
     * sorted candidates. l_i = -0.002 i, shuffled so ids are not in order. */
    enum { V = 20000 };
    float *big = malloc(V * sizeof *big);
    int32_t *perm = malloc(V * sizeof *perm);
    for (int i = 0; i < V; i++)
        perm[i] = i;
    uint64_t x = 3;
    for (int i = V - 1; i > 0; i--) {
        int j = (int)(lcg(&x) % (uint64_t)(i + 1));
        int32_t t = perm[i];
        perm[i] = perm[j], perm[j] = t;
    }
    for (int r = 0; r < V; r++)
        big[perm[r]] = -0.002f * (float)r; /* rank r */
    double z = 0, cum = 0;
    for (int r = 0; r < V; r++)
        z += exp(-0.002 * r);
    int cut = 0;
    while (cum < 0.6 * z)
        cum += exp(-0.002 * cut++);
    sampler_params p = plain(1.0f, 5);
    p.top_p = 0.6f;
    sampler *s = mk(&p, V);
    int32_t *rank = malloc(V * sizeof *rank);
    for (int r = 0; r < V; r++)
        rank[perm[r]] = r;
    int maxrank = 0;
    for (int i = 0; i < 5000; i++) {
        int r = rank[sampler_sample(s, big)];
        if (r > maxrank) maxrank = r;
    }
    printf("  top-p 0.6 over %d tokens: cut at rank %d, highest rank drawn %d\n", V, cut, maxrank);
    assert_true(maxrank < cut + 2);  /* nothing past the cut (float rounding: +-1) */
    assert_true(maxrank > cut - 20); /* and the tail of the kept set is reached */
    sampler_free(s);
    free(big), free(perm), free(rank);
}

/* The bucketed top-p over the whole vocabulary keeps exactly what a full
 * sort keeps. A nucleus of ~20-60 tokens spread over many buckets, the rest
 * far below; T = 1000 makes the draw nearly uniform over the kept set, so
 * 8000 draws reach every kept token: the drawn set must equal the set a
 * sorted reference keeps. */
static int cmp_desc(const void *a, const void *b) {
    const float *x = a, *y = b;
    return *x > *y ? -1 : *x < *y ? 1 : 0;
}

static void test_top_p_exact(void **state) {
    (void)state;
    enum { V = 2000 };
    float *l = malloc(V * sizeof *l), *sorted = malloc(V * sizeof *sorted);
    bool *seen = malloc(V);
    uint64_t x = 1234;
    for (int trial = 0; trial < 12; trial++) {
        int head = 20 + (int)(lcg(&x) % 40);
        float step = 0.005f + 0.065f * (float)(trial % 4) / 3.0f; /* 0.15 to 2 buckets apart */
        for (int i = 0; i < V; i++)
            l[i] = -5.0f * (float)(lcg(&x) % 1000) / 1000.0f;
        for (int j = 0; j < head; j++) { /* the head at random ids */
            int id = (int)(lcg(&x) % V);
            l[id] = 8.0f - step * (float)j + 0.004f * (float)(lcg(&x) % 100) / 100.0f;
        }
        float top_p = 0.5f + 0.45f * (float)(lcg(&x) % 1000) / 1000.0f;
        memcpy(sorted, l, V * sizeof *l);
        qsort(sorted, V, sizeof *sorted, cmp_desc);
        double z = 0, cum = 0;
        for (int i = 0; i < V; i++)
            z += exp((double)sorted[i] - sorted[0]);
        int keep = 0;
        while (keep < V) {
            cum += exp((double)sorted[keep++] - sorted[0]);
            if (cum >= (double)top_p * z) break;
        }
        float thr = sorted[keep - 1]; /* the kept set: l >= thr (values are distinct enough) */
        sampler_params p = plain(1000.0f, 500 + (uint64_t)trial);
        p.top_p = top_p;
        sampler *s = mk(&p, V);
        memset(seen, 0, V);
        for (int i = 0; i < 8000; i++)
            seen[sampler_sample(s, l)] = true;
        int nseen = 0;
        for (int i = 0; i < V; i++) {
            nseen += seen[i];
            if (seen[i] != (l[i] >= thr))
                fail_msg(
                    "trial %d: token %d (logit %g, cut %g) %s", trial, i, (double)l[i], (double)thr,
                    seen[i] ? "drawn but outside the nucleus" : "in the nucleus but never drawn");
        }
        assert_int_equal(nseen, keep);
        sampler_free(s);
    }
    free(l), free(sorted), free(seen);
}

/* min-p keeps p >= min_p * p_max: p = {.6, .3, .07, .03}, min_p 0.1 keeps
 * 0..2 (threshold .06), 0.2 keeps 0..1 (threshold .12). Both with and
 * without a sorted candidate list (top-k on / off). */
static void test_min_p(void **state) {
    (void)state;
    const float l[4] = {logf(0.6f), logf(0.3f), logf(0.07f), logf(0.03f)};
    for (int pass = 0; pass < 4; pass++) {
        sampler_params p = plain(1.0f, 100 + (uint64_t)pass);
        p.min_p = pass & 1 ? 0.2f : 0.1f;
        p.top_k = pass & 2 ? 4 : 0;
        sampler *s = mk(&p, 4);
        int count[4] = {0};
        for (int i = 0; i < 10000; i++)
            count[sampler_sample(s, l)]++;
        int kept = pass & 1 ? 2 : 3;
        for (int t = 0; t < 4; t++) {
            if (t < kept)
                assert_true(count[t] > 0);
            else
                assert_int_equal(count[t], 0);
        }
        sampler_free(s);
    }
    /* top-k 2 excludes the rest too */
    sampler_params p = plain(3.0f, 9);
    p.top_k = 2;
    sampler *s = mk(&p, 4);
    int count[4] = {0};
    for (int i = 0; i < 5000; i++)
        count[sampler_sample(s, l)]++;
    assert_true(count[0] > 0 && count[1] > 0);
    assert_int_equal(count[2] + count[3], 0);
    sampler_free(s);
}

static void test_penalties(void **state) {
    (void)state;
    enum { V = 12 };
    sampler_params p = plain(0.0f, 1);
    p.repeat_penalty = 1.5f;
    p.presence_penalty = 0.3f;
    p.frequency_penalty = 0.2f;
    p.penalty_last_n = 4;
    sampler *s = mk(&p, V);
    float base[V], l[V];
    for (int i = 0; i < V; i++)
        base[i] = 0.5f * (float)i - 2.0f;
    base[5] = 2.0f, base[7] = -1.0f, base[9] = 0.0f;
    /* window of 4: the first accepted token (3) falls out */
    const int32_t hist[] = {3, 5, 5, 7, 9};
    for (int i = 0; i < 5; i++)
        assert_int_equal(sampler_accept(s, hist[i]), 0);
    memcpy(l, base, sizeof l);
    sampler_penalize(s, l);
    for (int i = 0; i < V; i++) {
        float want = base[i];
        if (i == 5) want = 2.0f / 1.5f - (2 * 0.2f + 0.3f);  /* positive: divided; seen twice */
        if (i == 7) want = -1.0f * 1.5f - (1 * 0.2f + 0.3f); /* negative: multiplied */
        if (i == 9) want = 0.0f * 1.5f - (1 * 0.2f + 0.3f);  /* zero counts as negative */
        if (fabsf(l[i] - want) > 1e-6f)
            fail_msg("token %d: %g, want %g", i, (double)l[i], (double)want);
    }
    sampler_free(s);

    /* each penalty alone, and their effect on the choice */
    p = plain(0.0f, 1);
    p.frequency_penalty = 1.0f;
    s = mk(&p, V);
    float f[V] = {0};
    f[2] = 3.0f, f[4] = 1.5f;
    assert_int_equal(sampler_sample(s, f), 2);
    sampler_accept(s, 2);
    assert_int_equal(sampler_sample(s, f), 2); /* 3 - 1 = 2 > 1.5 */
    sampler_accept(s, 2);
    assert_int_equal(sampler_sample(s, f), 4); /* 3 - 2 = 1 < 1.5 */
    sampler_reset(s);                          /* history forgotten */
    assert_int_equal(sampler_sample(s, f), 2);
    sampler_free(s);

    p = plain(0.0f, 1);
    p.presence_penalty = 1.0f;
    s = mk(&p, V);
    for (int i = 0; i < 10; i++)
        sampler_accept(s, 2);
    memcpy(l, f, sizeof l);
    sampler_penalize(s, l);
    assert_true(fabsf(l[2] - 2.0f) < 1e-6f); /* once, however often it was seen */
    sampler_free(s);

    /* penalty_last_n = 0: no history at all */
    p = plain(0.0f, 1);
    p.repeat_penalty = 10.0f;
    p.penalty_last_n = 0;
    s = mk(&p, V);
    sampler_accept(s, 2);
    assert_int_equal(sampler_sample(s, f), 2);
    sampler_free(s);
}

static void test_invalid(void **state) {
    (void)state;
    char err[E0_ERR_MAX];
    sampler *s = NULL;
    sampler_params p;
#define EXPECT_BAD(field, stmt)                                                                    \
    do {                                                                                           \
        sampler_params_default(&p);                                                                \
        stmt;                                                                                      \
        err[0] = 0;                                                                                \
        assert_int_equal(sampler_new(&p, 100, &s, err), E0_EINVAL);                                \
        assert_null(s);                                                                            \
        if (strncmp(err, field ":", strlen(field ":")))                                            \
            fail_msg("%s: message \"%s\"", field, err);                                            \
    } while (0)
    EXPECT_BAD("temperature", p.temperature = -0.1f);
    EXPECT_BAD("temperature", p.temperature = NAN);
    EXPECT_BAD("temperature", p.temperature = INFINITY);
    EXPECT_BAD("top_k", p.top_k = -1);
    EXPECT_BAD("top_p", p.top_p = 0.0f);
    EXPECT_BAD("top_p", p.top_p = 1.01f);
    EXPECT_BAD("top_p", p.top_p = NAN);
    EXPECT_BAD("min_p", p.min_p = -0.01f);
    EXPECT_BAD("min_p", p.min_p = 1.5f);
    EXPECT_BAD("repeat_penalty", p.repeat_penalty = 0.0f);
    EXPECT_BAD("repeat_penalty", p.repeat_penalty = -1.0f);
    EXPECT_BAD("presence_penalty", p.presence_penalty = INFINITY);
    EXPECT_BAD("frequency_penalty", p.frequency_penalty = NAN);
    EXPECT_BAD("penalty_last_n", p.penalty_last_n = -1);
    EXPECT_BAD("penalty_last_n", p.penalty_last_n = SAMPLER_MAX_LAST_N + 1);
    sampler_params_default(&p);
    assert_int_equal(sampler_new(&p, 0, &s, err), E0_EINVAL);
    assert_non_null(strstr(err, "vocab_size"));
    assert_int_equal(sampler_new(NULL, 10, &s, err), E0_EINVAL);
    /* the edges are valid */
    p.temperature = 0, p.top_p = 1, p.min_p = 1, p.top_k = 0, p.penalty_last_n = SAMPLER_MAX_LAST_N;
    assert_int_equal(sampler_new(&p, 10, &s, err), 0);
    assert_int_equal(sampler_accept(s, 10), E0_ERANGE);
    assert_int_equal(sampler_accept(s, -1), E0_ERANGE);
    assert_int_equal(sampler_accept(s, 9), 0);
    assert_int_equal(sampler_sample(s, NULL), E0_EINVAL);
    sampler_free(s);
    sampler_free(NULL);
}

/* Qwen3's vocabulary with the default chain and with top-p alone: a rough
 * cost per token (printed, not asserted). */
/* sampler_logprobs: greedy gives the softmax of the logits; a draw gives
 * softmax(logit / T) over what top-k / top-p / min-p kept (summing to 1 over
 * the kept set, -9999 outside it); the top list is sorted, holds the drawn
 * token when it is asked for enough, and fewer entries when fewer were kept. */
static void test_logprobs(void **state) {
    (void)state;
    enum { V = 1000 };
    float l[V], lp, top_lp[20];
    int32_t top_id[20];
    uint64_t x = 7;
    random_logits(l, V, &x, 4.0f);
    l[17] = 9.0f, l[18] = 8.5f;
    sampler_params p = plain(0.0f, 1);
    sampler *s = mk(&p, V);
    int32_t id = sampler_sample(s, l);
    assert_int_equal(id, 17);
    assert_int_equal(sampler_logprobs(s, id, &lp, 5, top_id, top_lp), 5);
    double z = 0;
    for (int i = 0; i < V; i++) z += exp((double)l[i] - 9.0);
    assert_true(fabs(lp - (-log(z))) < 1e-4);
    assert_int_equal(top_id[0], 17);
    assert_int_equal(top_id[1], 18);
    assert_true(fabs(top_lp[1] - (8.5 - 9.0 - log(z))) < 1e-4);
    for (int k = 1; k < 5; k++) assert_true(top_lp[k - 1] >= top_lp[k]);
    sampler_free(s);

    p = plain(0.7f, 3);
    p.top_k = 8;
    p.min_p = 0.0f;
    s = mk(&p, V);
    for (int round = 0; round < 20; round++) {
        random_logits(l, V, &x, 3.0f);
        id = sampler_sample(s, l);
        int32_t n = sampler_logprobs(s, id, &lp, 20, top_id, top_lp);
        assert_int_equal(n, 8); /* top-k kept 8: the final distribution has 8 tokens */
        double sum = 0;
        bool found = false;
        for (int k = 0; k < n; k++) {
            sum += exp(top_lp[k]);
            if (k) assert_true(top_lp[k - 1] >= top_lp[k]);
            if (top_id[k] == id) found = true, assert_true(top_lp[k] == lp);
        }
        assert_true(found);
        assert_true(fabs(sum - 1.0) < 1e-4);
        /* a token the filters dropped */
        int32_t low = 0;
        for (int i = 1; i < V; i++)
            if (l[i] < l[low]) low = i;
        float lp_low;
        sampler_logprobs(s, low, &lp_low, 0, top_id, top_lp);
        assert_true(lp_low == SAMPLER_LOGPROB_MIN);
    }
    sampler_free(s);
}

/* The large-vocabulary scans (vector argmax, top-k heap that skips 16
 * logits at a time) against a sort of the whole vocabulary: logits with
 * ties, NaN, -inf and +inf in and across blocks and in the tail (V is not
 * a multiple of 16), and penalties that move the maximum. */
typedef struct {
    float l;
    int32_t id;
} ref_cand;

static int ref_cmp(const void *pa, const void *pb) {
    const ref_cand *a = pa, *b = pb;
    if (a->l != b->l) return a->l > b->l ? -1 : 1;
    return a->id < b->id ? -1 : a->id > b->id;
}

static int i32_cmp(const void *a, const void *b) {
    const int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

static void test_vocab_scans(void **state) {
    (void)state;
    enum { V = 151669, K = 20 };
    float *l = malloc(V * sizeof *l);
    ref_cand *r = malloc(V * sizeof *r);
    assert_true(l && r);
    uint64_t x = 11;
    sampler_params g = plain(0.0f, 1), k = plain(1.0f, 2);
    g.repeat_penalty = k.repeat_penalty = 1.5f;
    g.penalty_last_n = k.penalty_last_n = 4;
    k.top_k = K;
    sampler *sg = mk(&g, V), *sk = mk(&k, V);
    for (int t = 0; t < 60; t++) {
        for (int i = 0; i < V; i++) {
            const uint64_t u = lcg(&x) % 1000;
            l[i] = u < 5 ? NAN : u < 50 ? -INFINITY : (float)(lcg(&x) % (t % 3 ? 64 : 100000)) / 8.0f;
        }
        if (t % 4 == 1) l[V - 1] = 1e6f;          /* the maximum in the tail */
        if (t % 4 == 2) l[16 * (t % 9000)] = INFINITY;
        if (t % 10 == 9)
            for (int i = 0; i < V; i++)
                l[i] = i % 2 ? NAN : -INFINITY;   /* nothing finite: id 0 */
        /* the reference: penalties of the last 4 accepted ids, NaN as -inf, full sort */
        const int32_t hist[4] = {t % V, (t * 7919) % V, (t * 104729) % V, t % V};
        for (int i = 0; i < V; i++)
            r[i] = (ref_cand){l[i] == l[i] ? l[i] : -INFINITY, i};
        for (int h = 0; h < 4; h++) {
            if (h == 3) break; /* hist[3] repeats hist[0]: penalised once */
            float *v = &r[hist[h]].l;
            *v = *v <= 0 ? *v * 1.5f : *v / 1.5f;
        }
        qsort(r, V, sizeof *r, ref_cmp);
        for (int h = 0; h < 4; h++) {
            sampler_accept(sg, hist[h]);
            sampler_accept(sk, hist[h]);
        }
        assert_int_equal(sampler_sample(sg, l), r[0].id);
        float lp, tl[K];
        int32_t ti[K];
        sampler_sample(sk, l);
        const int32_t n = sampler_logprobs(sk, r[0].id, &lp, K, ti, tl);
        assert_int_equal(n, K);
        /* the kept candidates as a set (their log-probabilities may tie at
         * the floor when the weights underflow, so not their order) */
        int32_t want[K];
        for (int i = 0; i < K; i++)
            want[i] = r[i].id;
        qsort(ti, K, sizeof *ti, i32_cmp);
        qsort(want, K, sizeof *want, i32_cmp);
        for (int i = 0; i < K; i++)
            if (ti[i] != want[i])
                fail_msg("step %d: the top-%d candidates differ from the sort's (id %d vs %d)", t,
                         K, ti[i], want[i]);
    }
    sampler_free(sg);
    sampler_free(sk);
    free(l);
    free(r);
}

static void test_speed(void **state) {
    (void)state;
    enum { V = 151936, N = 100 };
    float *l = malloc(V * sizeof *l);
    uint64_t x = 1;
    random_logits(l, V, &x, 8.0f);
    for (int mode = 0; mode < 2; mode++) {
        sampler_params p;
        sampler_params_default(&p);
        p.seed = 1;
        if (mode) p.top_k = 0, p.min_p = 0;
        sampler *s = mk(&p, V);
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        for (int i = 0; i < N; i++)
            sampler_accept(s, sampler_sample(s, l));
        clock_gettime(CLOCK_MONOTONIC, &t1);
        double ms =
            ((double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6) / N;
        printf("  vocab %d, %s: %.3f ms per token\n", V, mode ? "top-p 0.95 alone" : "defaults",
               ms);
        sampler_free(s);
    }
    free(l);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_greedy),       cmocka_unit_test(test_seed),
        cmocka_unit_test(test_distribution), cmocka_unit_test(test_top_p),
        cmocka_unit_test(test_top_p_exact),  cmocka_unit_test(test_min_p),
        cmocka_unit_test(test_penalties),    cmocka_unit_test(test_invalid),
        cmocka_unit_test(test_speed),        cmocka_unit_test(test_logprobs),
        cmocka_unit_test(test_vocab_scans),  cmocka_unit_test(test_spec),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
