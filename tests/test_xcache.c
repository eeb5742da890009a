/* The shared expert LRU: eviction order, pinning, capacity, failed loads,
 * and many threads acquiring and releasing at once (this program also runs
 * under ThreadSanitizer in `make test`). */
#include "testutil.h"

#include "stream/iopool.h"
#include "stream/xcache.h"

#include "edge0.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { BUNDLE = 256, LAYERS = 4, EXPERTS = 16 };

static xcache *make(int slots) {
    xcache *c;
    char err[512];
    if (xcache_new(&c, slots, BUNDLE, LAYERS, EXPERTS, err)) fail_msg("%s", err);
    return c;
}

/* Acquire, load if needed (buffer stamped with the key), release. */
static bool touch(xcache *c, int l, int e) {
    bool need;
    xentry *x = xcache_acquire(c, l, e, true, &need);
    if (!x) return false;
    if (need) {
        memset(xentry_buf(x), l * EXPERTS + e, BUNDLE);
        xcache_loaded(c, x, true);
    }
    assert_int_equal(xcache_wait(c, x), 0);
    assert_int_equal(xentry_buf(x)[BUNDLE - 1], (uint8_t)(l * EXPERTS + e));
    xcache_release(c, x);
    return true;
}

static bool present(xcache *c, int l, int e) {
    xentry *x = xcache_lookup(c, l, e);
    if (x) xcache_release(c, x);
    return x != NULL;
}

static void test_eviction_order(void **state) {
    (void)state;
    xcache *c = make(3);
    touch(c, 0, 1);
    touch(c, 0, 2);
    touch(c, 1, 1); /* same expert id, other layer: another key */
    touch(c, 0, 1); /* most recent now: order 0.2, 1.1, 0.1 */
    touch(c, 2, 5); /* evicts 0.2, the least recently released */
    assert_false(present(c, 0, 2));
    assert_true(present(c, 1, 1)); /* lookup refreshes it: order 0.1, 2.5, 1.1 */
    touch(c, 3, 3);                /* evicts 0.1 */
    assert_false(present(c, 0, 1));
    assert_true(present(c, 2, 5) && present(c, 1, 1) && present(c, 3, 3));
    uint64_t h, m;
    xcache_layer_stats(c, 0, &h, &m);
    assert_int_equal(h, 1); /* the second touch of 0.1 */
    assert_int_equal(m, 2);
    xcache_free(c);
}

/* xcache_release_first (a GPU's host cache giving back a bundle the VRAM
 * now holds): the entry is the next victim, ahead of older ones, and the
 * ones released the usual way keep their order behind it. */
static void test_release_first(void **state) {
    (void)state;
    xcache *c = make(3);
    touch(c, 0, 1);
    touch(c, 0, 2);
    bool need;
    xentry *x = xcache_acquire(c, 1, 1, true, &need);
    assert_non_null(x);
    assert_true(need);
    memset(xentry_buf(x), 1 * EXPERTS + 1, BUNDLE);
    xcache_loaded(c, x, true);
    xcache_release_first(c, x); /* order now 1.1, 0.1, 0.2: 1.1 first out although the latest */
    touch(c, 2, 5);             /* evicts 1.1 */
    assert_false(present(c, 1, 1));
    assert_true(present(c, 0, 1)); /* the lookup refreshes 0.1: order 0.2, 2.5, 0.1 */
    touch(c, 3, 3);                /* evicts 0.2, the least recently released */
    assert_false(present(c, 0, 2));
    assert_true(present(c, 0, 1) && present(c, 2, 5) && present(c, 3, 3));
    xcache_free(c);
}

static void test_pinned_never_evicted(void **state) {
    (void)state;
    xcache *c = make(2);
    bool need;
    xentry *a = xcache_acquire(c, 0, 0, true, &need);
    assert_non_null(a);
    assert_true(need);
    xcache_loaded(c, a, true);
    touch(c, 0, 1);
    touch(c, 0, 2); /* evicts 0.1, never the pinned 0.0 */
    assert_false(present(c, 0, 1));
    xentry *b = xcache_acquire(c, 0, 3, true, &need); /* evicts 0.2 */
    assert_non_null(b);
    /* both slots pinned: no room, and a hit on a pinned entry still works */
    assert_null(xcache_acquire(c, 1, 1, true, &need));
    xentry *a2 = xcache_acquire(c, 0, 0, true, &need);
    assert_ptr_equal(a2, a);
    assert_false(need);
    int32_t used, pinned;
    xcache_usage(c, &used, &pinned);
    assert_int_equal(used, 2);
    assert_int_equal(pinned, 2);
    xcache_loaded(c, b, true);
    xcache_release(c, b);
    xcache_release(c, a2);
    xcache_release(c, a);
    assert_true(present(c, 0, 0) && present(c, 0, 3));
    xcache_free(c);
}

static void test_failed_load(void **state) {
    (void)state;
    xcache *c = make(2);
    bool need;
    xentry *x = xcache_acquire(c, 1, 2, true, &need);
    xentry *y = xcache_acquire(c, 1, 2, true, &need); /* a second user of the loading entry */
    assert_ptr_equal(x, y);
    assert_false(need);
    xcache_loaded(c, x, false);
    assert_int_equal(xcache_wait(c, y), -1);
    xcache_release(c, x);
    xcache_release(c, y);
    assert_false(present(c, 1, 2));
    int32_t used, pinned;
    xcache_usage(c, &used, &pinned);
    assert_int_equal(used, 0); /* the slot is free again */
    assert_true(touch(c, 1, 2));
    xcache_free(c);
}

/* Memory pressure: a lower limit evicts the unpinned entries past it at
 * once and a pinned one at its release; no more entries than the limit are
 * held afterwards; raising it again makes room for all of them. */
static void test_limit(void **state) {
    (void)state;
    xcache *c = make(5);
    for (int e = 0; e < 5; e++)
        touch(c, 0, e); /* slots 0..4 hold experts 0..4 */
    xentry *pin = xcache_lookup(c, 0, 4); /* slot 4: past the limit below */
    assert_non_null(pin);
    xcache_set_limit(c, 2);
    assert_int_equal(xcache_limit(c), 2);
    int32_t used, pinned;
    xcache_usage(c, &used, &pinned);
    assert_int_equal(used, 3); /* slots 0, 1 and the pinned 4 */
    assert_true(present(c, 0, 0) && present(c, 0, 1));
    assert_false(present(c, 0, 2) || present(c, 0, 3));
    assert_int_equal(xentry_buf(pin)[BUNDLE - 1], 4); /* untouched while pinned */
    xcache_release(c, pin);
    assert_false(present(c, 0, 4));
    for (int i = 0; i < 200; i++) {
        assert_true(touch(c, i % LAYERS, (i * 7) % EXPERTS));
        xcache_usage(c, &used, &pinned);
        assert_true(used <= 2);
    }
    xcache_set_limit(c, 5);
    for (int e = 0; e < 5; e++)
        touch(c, 3, e);
    for (int e = 0; e < 5; e++)
        assert_true(present(c, 3, e));
    xcache_usage(c, &used, &pinned);
    assert_int_equal(used, 5);
    xcache_free(c);
}

static void test_capacity_random(void **state) {
    (void)state;
    xcache *c = make(5);
    uint64_t r = 12345;
    for (int i = 0; i < 20000; i++) {
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        assert_true(touch(c, (int)(r >> 33) % LAYERS, (int)(r >> 45) % EXPERTS));
        int32_t used, pinned;
        xcache_usage(c, &used, &pinned);
        assert_true(used <= 5);
        assert_int_equal(pinned, 0);
    }
    xcache_free(c);
}

/* LFU: the entry with the fewest (decayed) demand requests goes, whatever
 * the order of release; a pinned entry never goes, however rarely used; a
 * prefetched entry counts as one request, so it is not the first victim. */
static void test_lfu(void **state) {
    (void)state;
    xcache *c = make(3);
    char err[512];
    assert_int_equal(xcache_set_policy(c, E0_CACHE_LFU, 1e9, err), 0); /* ~no decay */
    for (int i = 0; i < 3; i++) touch(c, 0, 1);
    for (int i = 0; i < 2; i++) touch(c, 0, 2);
    touch(c, 0, 3);
    touch(c, 0, 1); /* LRU order now 0.2, 0.3, 0.1; counts 4, 2, 1 */
    touch(c, 1, 0); /* LFU evicts 0.3 (count 1), not the least recent 0.2 */
    assert_false(present(c, 0, 3));
    assert_true(present(c, 0, 1) && present(c, 0, 2) && present(c, 1, 0));
    /* 0.3 comes back with its history (count 2 now) and evicts 1.0 (count 1) */
    touch(c, 0, 3);
    assert_false(present(c, 1, 0));
    /* pin the rarest (0.3, count 2): 0.2 (count 2, unpinned) goes instead */
    bool need;
    xentry *p = xcache_acquire(c, 0, 3, true, &need); /* count 3 now */
    assert_false(need);
    touch(c, 2, 0);
    touch(c, 2, 0); /* 2.0: count 2 */
    assert_false(present(c, 0, 2));
    touch(c, 2, 1); /* 0.1 (5) and pinned 0.3 stay: 2.0 (2) goes */
    assert_false(present(c, 2, 0));
    assert_true(present(c, 0, 1) && present(c, 0, 3) && present(c, 2, 1));
    xcache_release(c, p);
    assert_int_equal(xcache_set_policy(c, E0_CACHE_LFU, 1e9, err), 0); /* counts start over */
    xcache_free(c);
    /* a prefetch of a never-requested key is not the next miss's victim */
    c = make(3);
    assert_int_equal(xcache_set_policy(c, E0_CACHE_LFU, 1e9, err), 0);
    touch(c, 0, 0);
    touch(c, 0, 1);
    xentry *q = xcache_acquire(c, 3, 3, false, &need);
    assert_true(need);
    xcache_loaded(c, q, true);
    xcache_release(c, q);
    touch(c, 3, 4); /* evicts 0.0 (one request, the oldest), not the prefetched 3.3 */
    assert_true(present(c, 3, 3));
    assert_false(present(c, 0, 0));
    assert_int_equal(xcache_set_policy(c, 7, 1, err), E0_EINVAL);
    xcache_free(c);
}

/* One step's router logits for layer l: expert `fav` far ahead of the
 * others (probability ~1), or all equal (fav < 0: 1/16 each). */
static void observe(xcache *c, int l, int fav) {
    float lg[EXPERTS] = {0};
    if (fav >= 0) lg[fav] = 30.0f;
    xcache_observe(c, l, lg, 1);
}

/* A prefetch that loads (layer l, expert e). */
static void prefetch(xcache *c, int l, int e) {
    bool need;
    xentry *q = xcache_acquire(c, l, e, false, &need);
    assert_true(q && need);
    xcache_loaded(c, q, true);
    xcache_release(c, q);
}

/* Router policy (routecount.h): the keys a layer requested in its latest
 * step (and, while that layer's requests are under way, in the step
 * before) are held; the rest go least popular first (their summed router
 * probabilities); held keys go last, least popular first, the least
 * recently released on ties. Two layers; layer 0's router favours expert
 * 5 (probability ~1 for it, ~0 for the others), layer 1's is uniform. */
static void test_router(void **state) {
    (void)state;
    xcache *c = make(4);
    char err[512];
    assert_int_equal(xcache_set_policy(c, E0_CACHE_ROUTER, 0, err), E0_EINVAL);
    assert_int_equal(xcache_set_policy(c, E0_CACHE_ROUTER, 1e9, err), 0); /* ~no decay */
    observe(c, 0, 5), touch(c, 0, 5), observe(c, 1, -1), touch(c, 1, 1); /* step 1 */
    observe(c, 0, 5), touch(c, 0, 2), observe(c, 1, -1), touch(c, 1, 2); /* step 2: full */
    observe(c, 0, 5); /* step 3, layer 0 under way: 0.2 (step 2) and 1.2 held */
    touch(c, 0, 3);   /* of 0.5 (probabilities ~3) and 1.1 (2/16), 1.1 goes, though
                       * 0.5 is the least recently released */
    assert_false(present(c, 1, 1));
    assert_true(present(c, 0, 5) && present(c, 0, 2) && present(c, 1, 2));
    touch(c, 0, 4); /* held: 0.2 (the previous token's), 0.3, 1.2; 0.5, popular as it is, goes */
    assert_false(present(c, 0, 5));
    assert_true(present(c, 0, 2) && present(c, 0, 3) && present(c, 1, 2));
    observe(c, 1, -1); /* layer 0's requests are over: 0.2 is no longer held */
    touch(c, 1, 7);
    assert_false(present(c, 0, 2));
    assert_true(present(c, 0, 3) && present(c, 0, 4) && present(c, 1, 2) && present(c, 1, 7));
    /* a prefetch with every entry held: the least popular held one goes, 0.3
     * and 0.4 tie at ~0 and 0.3 was released first */
    prefetch(c, 1, 9);
    assert_false(present(c, 0, 3));
    /* step 4: the prefetched 1.9 is held as layer 1's request of step 3; of
     * the others only 1.2 (step 2) is not */
    observe(c, 0, 5), touch(c, 0, 6);
    assert_false(present(c, 1, 2));
    assert_true(present(c, 1, 9) && present(c, 1, 7) && present(c, 0, 6));
    xcache_free(c);
}

/* Many threads: every acquired bundle carries its own key's stamp (no entry
 * is reused while pinned), every acquire is matched by a release. */
typedef struct {
    xcache *c;
    int seed;
    atomic_long *full;
} worker_arg;

static void *worker(void *p) {
    worker_arg *a = p;
    uint64_t r = (uint64_t)a->seed * 7919u + 1;
    for (int i = 0; i < 20000; i++) {
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        int l = (int)(r >> 33) % LAYERS, e = (int)(r >> 45) % EXPERTS;
        bool need;
        xentry *x = xcache_acquire(a->c, l, e, true, &need);
        if (!x) {
            atomic_fetch_add(a->full, 1);
            continue;
        }
        if (need) {
            memset(xentry_buf(x), l * EXPERTS + e, BUNDLE);
            xcache_loaded(a->c, x, (r & 63) != 0); /* some loads fail */
        }
        if ((r & 7) == 0) observe(a->c, l, e); /* the router policy's counts */
        if (xcache_wait(a->c, x) == 0) {
            const uint8_t *b = xentry_buf(x);
            for (int k = 0; k < BUNDLE; k += 37)
                if (b[k] != (uint8_t)(l * EXPERTS + e)) abort();
        }
        xcache_release(a->c, x);
    }
    return NULL;
}

static void test_concurrent(void **state) {
    (void)state;
    for (int policy = E0_CACHE_LRU; policy <= E0_CACHE_RECENT; policy++) {
        xcache *c = make(12);
        char err[512];
        assert_int_equal(xcache_set_policy(c, policy, 50, err), 0);
        atomic_long full = 0;
        pthread_t th[8];
        worker_arg args[8];
        for (int i = 0; i < 8; i++) {
            args[i] = (worker_arg){c, i, &full};
            assert_int_equal(pthread_create(&th[i], NULL, worker, &args[i]), 0);
        }
        for (int i = 0; i < 8; i++)
            pthread_join(th[i], NULL);
        int32_t used, pinned;
        xcache_usage(c, &used, &pinned);
        assert_int_equal(pinned, 0);
        assert_true(used <= 12);
        uint64_t hits = 0, misses = 0;
        for (int l = 0; l < LAYERS; l++) {
            uint64_t h, m;
            xcache_layer_stats(c, l, &h, &m);
            hits += h;
            misses += m;
        }
        printf("  8 threads x 20000 ops: %llu hits, %llu misses, %ld times every slot was pinned\n",
               (unsigned long long)hits, (unsigned long long)misses, (long)atomic_load(&full));
        assert_int_equal(hits + misses, 8 * 20000);
        xcache_free(c);
    }
}

/* The I/O pool runs every job, from several submitters, and drains. */
static void job(void *p) { atomic_fetch_add((atomic_long *)p, 1); }

static void test_iopool(void **state) {
    (void)state;
    for (int n = 0; n <= 4; n += 4) {
        iopool *p;
        char err[512];
        assert_int_equal(iopool_new(&p, n, err), 0);
        atomic_long count = 0;
        static iopool_job nodes[10000]; /* caller-owned: no allocation per job */
        for (int i = 0; i < 10000; i++) iopool_submit(p, &nodes[i], job, &count);
        iopool_drain(p);
        assert_int_equal(atomic_load(&count), 10000);
        iopool_free(p);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_eviction_order), cmocka_unit_test(test_pinned_never_evicted),
        cmocka_unit_test(test_failed_load),    cmocka_unit_test(test_capacity_random),
        cmocka_unit_test(test_limit),          cmocka_unit_test(test_release_first),
        cmocka_unit_test(test_concurrent),     cmocka_unit_test(test_iopool),
        cmocka_unit_test(test_lfu), cmocka_unit_test(test_router),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
