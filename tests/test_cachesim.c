/* The cache policy simulator (stream/cachesim.h) on hand-made traces whose
 * hit counts are worked out in the comments, and properties that hold on
 * any trace: nothing beats Belady, a cache that holds every key misses only
 * on first requests, and warm-up requests are not counted. */
#include "testutil.h"

#include "edge0.h"
#include "stream/cachesim.h"

#include <stdlib.h>

/* Router logits for the traces below: 16 keys are 2 layers x 8 experts;
 * one observation of one token before every request, of the requested
 * key's layer, its logits from a fixed pseudo-random stream. */
enum { OBS_MAX = 3000, OBS_E = 8 };
static size_t obs_at[OBS_MAX];
static int32_t obs_layer[OBS_MAX], obs_tokens[OBS_MAX];
static float obs_logits[OBS_MAX * OBS_E];

static cachesim_obs make_obs(const uint32_t *k, size_t n) {
    uint64_t r = 7;
    for (size_t i = 0; i < n && i < OBS_MAX; i++) {
        obs_at[i] = i;
        obs_layer[i] = (int32_t)(k[i] / OBS_E);
        obs_tokens[i] = 1;
        for (int e = 0; e < OBS_E; e++) {
            r = r * 6364136223846793005ull + 1442695040888963407ull;
            obs_logits[i * OBS_E + (size_t)e] = (float)((r >> 40) % 1000) / 250.0f;
        }
    }
    return (cachesim_obs){n, obs_at, obs_layer, obs_tokens, obs_logits, 2, OBS_E};
}

static uint64_t run(cachesim_policy p, const uint32_t *k, size_t n, size_t from, int32_t cap,
                    double half_life) {
    char err[E0_ERR_MAX];
    uint64_t h = 0;
    const cachesim_obs o = make_obs(k, n);
    if (cachesim_run(p, k, n, from, 16, cap, half_life, &o, &h, err)) fail_msg("%s", err);
    return h;
}

/* The textbook string 1 2 3 4 1 2 5 1 2 3 4 5 with 3 slots.
 * Belady: 1 2 3 miss; 4 misses and evicts 3 (next use 9, 1 and 2 sooner);
 * 1 2 hit; 5 misses and evicts 4 (next use 10); 1 2 hit; 3 misses (1 and 2
 * never come back: one goes); 4 misses (the other goes); 5 hits: 5 hits.
 * LRU: only the 1 2 after 5 hit: 2 hits (10 faults, as in the textbooks).
 * LFU without decay, counts kept across evictions, least recent on ties:
 * 4 evicts 1, 1 evicts 2, 2 evicts 3, 5 evicts 4 (count 1 against 2, 2);
 * 1 2 hit; 3 (count 2) evicts 5 (1); 4 (2) evicts 3 (2, older); 5 evicts
 * 4: 2 hits. */
static void test_textbook(void **state) {
    (void)state;
    const uint32_t k[] = {1, 2, 3, 4, 1, 2, 5, 1, 2, 3, 4, 5};
    const size_t n = sizeof k / sizeof *k;
    assert_int_equal(run(CACHESIM_BELADY, k, n, 0, 3, 0), 5);
    assert_int_equal(run(CACHESIM_LRU, k, n, 0, 3, 0), 2);
    assert_int_equal(run(CACHESIM_LFU, k, n, 0, 3, 0), 2);
    /* with 4 slots Belady faults 6 times: 6 hits; LRU 4 hits (8 faults) */
    assert_int_equal(run(CACHESIM_BELADY, k, n, 0, 4, 0), 6);
    assert_int_equal(run(CACHESIM_LRU, k, n, 0, 4, 0), 4);
    /* from = 7: only the last five requests count (1 2 hit, 3 4 miss, 5 hits) */
    assert_int_equal(run(CACHESIM_BELADY, k, n, 7, 3, 0), 3);
}

/* A A B B, then a scan C D E F, then A B, 3 slots. LRU loses A and B to the
 * scan: 2 hits. ARC moved A and B to its frequency list T2 on their second
 * request; the scan only cycles through T1 (C goes to ghost B1 on D, D on
 * E, and F finds T1 + B1 full, drops C's ghost and moves E): A and B hit
 * again, 4 hits. Belady keeps them too (the scan keys never return): 4.
 * LFU without decay: A and B have count 2, the scan keys 1: 4 hits. */
static void test_scan_resistance(void **state) {
    (void)state;
    const uint32_t k[] = {0, 0, 1, 1, 2, 3, 4, 5, 0, 1};
    const size_t n = sizeof k / sizeof *k;
    assert_int_equal(run(CACHESIM_LRU, k, n, 0, 3, 0), 2);
    assert_int_equal(run(CACHESIM_ARC, k, n, 0, 3, 0), 4);
    assert_int_equal(run(CACHESIM_BELADY, k, n, 0, 3, 0), 4);
    assert_int_equal(run(CACHESIM_LFU, k, n, 0, 3, 0), 4);
}

/* Decay: key 0 requested 3 times long ago, key 3 seven times, key 1 twice
 * just now, then key 2 finds the 3 slots full. Without decay 1 (count 2)
 * goes; with a half-life of 1 request 0's old requests weigh almost
 * nothing and 0 goes, so the final request of 1 (the only one counted)
 * hits. */
static void test_lfu_decay(void **state) {
    (void)state;
    const uint32_t k[] = {0, 0, 0, 3, 3, 3, 3, 3, 3, 3, 1, 1, 2, 1};
    const size_t n = sizeof k / sizeof *k;
    /* no decay: counts 0:3, 3:7, 1:2 -> 1 goes, the last 1 misses */
    assert_int_equal(run(CACHESIM_LFU, k, n, 13, 3, 0), 0);
    /* half-life 1: 0's three requests weigh 2^0..2^2, 1's two 2^10, 2^11 -> 0 goes */
    assert_int_equal(run(CACHESIM_LFU, k, n, 13, 3, 1), 1);
}

/* The router policy by hand: 1 layer of 4 experts, one request per step,
 * every step's logits [10 0 0 0] (expert 0 at probability ~1). One layer
 * is always the one under way, so a step holds its own requests and the
 * step before's. Requests 0 1 2 0 with 2 slots: at request 2 key 1 is held
 * and 0, popular as it is, goes: no hit. Requests 0 1 2 3 0 with 3 slots:
 * at request 3, 2 is held and of 0 (~3) and 1 (~0) 1 goes: the last
 * request of 0 hits, where LRU evicts 0 and misses it. With all logits
 * equal the probabilities tie and the least recent goes, as in LRU. */
static void test_router(void **state) {
    (void)state;
    const uint32_t k[] = {0, 1, 2, 3, 0}, k4[] = {0, 1, 2, 0};
    size_t at[5] = {0, 1, 2, 3, 4};
    int32_t layer[5] = {0}, tokens[5] = {1, 1, 1, 1, 1};
    float lg[20] = {0};
    cachesim_obs o = {5, at, layer, tokens, lg, 1, 4};
    char err[E0_ERR_MAX];
    uint64_t h;
    assert_int_equal(cachesim_run(CACHESIM_ROUTER, k, 5, 0, 4, 3, 0, &o, &h, err), 0);
    assert_int_equal(h, 0);
    for (int i = 0; i < 5; i++)
        lg[i * 4] = 10.0f;
    assert_int_equal(cachesim_run(CACHESIM_ROUTER, k4, 4, 0, 4, 2, 0, &o, &h, err), 0);
    assert_int_equal(h, 0);
    assert_int_equal(cachesim_run(CACHESIM_ROUTER, k, 5, 0, 4, 3, 0, &o, &h, err), 0);
    assert_int_equal(h, 1);
    assert_int_equal(cachesim_run(CACHESIM_LRU, k, 5, 0, 4, 3, 0, &o, &h, err), 0);
    assert_int_equal(h, 0);
    /* one call of 5 tokens before the first request: a single step, every
     * key held, so the least popular held one goes (1 and 2 tie at ~0,
     * and 1 was requested first): the same hit */
    o = (cachesim_obs){1, at, layer, (int32_t[]){5}, lg, 1, 4};
    assert_int_equal(cachesim_run(CACHESIM_ROUTER, k, 5, 0, 4, 3, 0, &o, &h, err), 0);
    assert_int_equal(h, 1);
    /* without logits, or logits that do not fit the keys, it cannot run */
    assert_int_equal(cachesim_run(CACHESIM_ROUTER, k, 4, 0, 4, 2, 0, NULL, &h, err), E0_EINVAL);
    o = (cachesim_obs){1, at, layer, tokens, lg, 2, 4};
    assert_int_equal(cachesim_run(CACHESIM_ROUTER, k, 4, 0, 4, 2, 0, &o, &h, err), E0_EINVAL);
    o = (cachesim_obs){2, (size_t[]){3, 1}, layer, tokens, lg, 1, 4};
    assert_int_equal(cachesim_run(CACHESIM_ROUTER, k, 4, 0, 4, 2, 0, &o, &h, err), E0_EINVAL);
}

/* The recent policy by hand (half-life 2 steps: a request weighs 2^(-s/2)
 * after s steps; popularity weight 0.5), 1 layer of 4 experts, one request
 * a step. All logits equal: every key's popularity term is the same 0.5,
 * so the decayed counts decide. Requests 0 0 0 1 2 0 with 2 slots: at
 * request 2, key 0's count is (1 + 2^-0.5 + 2^-1) x 2^-1 = 1.10 and key
 * 1's 2^-0.5 = 0.71: 1 goes and the last 0 hits: 3 hits (steps 2, 3, 6),
 * where LRU evicts 0 (2 hits) and so does the router policy (1 is held as
 * the previous step's). Logits [10 0 0 0]: requests 0 1 2 0 with 2 slots:
 * at request 2 key 0 scores 2^-1 + 0.5 x 4 x ~1 = 2.5, key 1 0.71 + ~0:
 * 1 goes, 0 hits (1 hit); the router policy holds 1 and misses (0). */
static void test_recent(void **state) {
    (void)state;
    const uint32_t k[] = {0, 0, 0, 1, 2, 0}, k4[] = {0, 1, 2, 0};
    size_t at[6] = {0, 1, 2, 3, 4, 5};
    int32_t layer[6] = {0}, tokens[6] = {1, 1, 1, 1, 1, 1};
    float lg[24] = {0};
    cachesim_obs o = {6, at, layer, tokens, lg, 1, 4};
    char err[E0_ERR_MAX];
    uint64_t h;
    assert_int_equal(cachesim_run(CACHESIM_RECENT, k, 6, 0, 4, 2, 0, &o, &h, err), 0);
    assert_int_equal(h, 3);
    assert_int_equal(cachesim_run(CACHESIM_LRU, k, 6, 0, 4, 2, 0, &o, &h, err), 0);
    assert_int_equal(h, 2);
    assert_int_equal(cachesim_run(CACHESIM_ROUTER, k, 6, 0, 4, 2, 0, &o, &h, err), 0);
    assert_int_equal(h, 2);
    /* warm-up requests are not counted: from 3 on only the last 0 hits */
    assert_int_equal(cachesim_run(CACHESIM_RECENT, k, 6, 3, 4, 2, 0, &o, &h, err), 0);
    assert_int_equal(h, 1);
    for (int i = 0; i < 6; i++)
        lg[i * 4] = 10.0f;
    o.n = 4;
    assert_int_equal(cachesim_run(CACHESIM_RECENT, k4, 4, 0, 4, 2, 0, &o, &h, err), 0);
    assert_int_equal(h, 1);
    assert_int_equal(cachesim_run(CACHESIM_ROUTER, k4, 4, 0, 4, 2, 0, &o, &h, err), 0);
    assert_int_equal(h, 0);
    /* it needs the router logits, as the router policy does */
    assert_int_equal(cachesim_run(CACHESIM_RECENT, k4, 4, 0, 4, 2, 0, NULL, &h, err), E0_EINVAL);
}

/* Random traces: Belady is never beaten, a cache as large as the key set
 * misses only the first request of each key, and cap 1 hits only repeats. */
static void test_properties(void **state) {
    (void)state;
    uint32_t k[3000];
    uint64_t r = 99;
    for (int trial = 0; trial < 4; trial++) {
        for (size_t i = 0; i < 3000; i++) {
            r = r * 6364136223846793005ull + 1442695040888963407ull;
            const uint32_t u = (uint32_t)(r >> 40) % 1000;
            k[i] = trial & 1 ? (uint32_t)(u * u) / 62500u : u % 16; /* skewed or uniform */
        }
        size_t distinct = 0, repeats = 0;
        int seen[16] = {0};
        for (size_t i = 0; i < 3000; i++) {
            distinct += !seen[k[i]]++;
            repeats += i > 0 && k[i] == k[i - 1];
        }
        for (int32_t cap = 1; cap <= 16; cap++) {
            const uint64_t best = run(CACHESIM_BELADY, k, 3000, 0, cap, 0);
            for (int p = 0; p < CACHESIM_BELADY; p++) {
                assert_true(run((cachesim_policy)p, k, 3000, 0, cap, cap) <= best);
                if (cap == 16)
                    assert_int_equal(run((cachesim_policy)p, k, 3000, 0, cap, cap),
                                     3000 - distinct);
                if (cap == 1)
                    assert_int_equal(run((cachesim_policy)p, k, 3000, 0, cap, cap), repeats);
            }
            if (cap == 16) assert_int_equal(best, 3000 - distinct);
        }
    }
}

static void test_bad_input(void **state) {
    (void)state;
    const uint32_t k[] = {1, 99};
    char err[E0_ERR_MAX];
    uint64_t h;
    assert_int_equal(cachesim_run(CACHESIM_LRU, k, 2, 0, 16, 4, 0, NULL, &h, err), E0_EINVAL);
    assert_int_equal(cachesim_run(CACHESIM_LRU, k, 1, 0, 16, 0, 0, NULL, &h, err), E0_EINVAL);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_textbook),  cmocka_unit_test(test_scan_resistance),
        cmocka_unit_test(test_lfu_decay), cmocka_unit_test(test_router),
        cmocka_unit_test(test_recent),    cmocka_unit_test(test_properties),
        cmocka_unit_test(test_bad_input),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
