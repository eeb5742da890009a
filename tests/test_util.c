/* util/arr.h and util/sbuf.h: growth keeps the contents, the capacity
 * doubles and never shrinks, and a request that cannot fit in a size_t
 * fails with the array left as it was. util/tune.h: the fastest setting is
 * found through noise and straddling steps, kept, and measured again. */
#include "testutil.h"

#include "util/arr.h"
#include "util/sbuf.h"
#include "util/tune.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static void test_arr_reserve(void **state) {
    (void)state;
    int32_t *v = NULL;
    size_t cap = 0;
    assert_int_equal(arr_reserve((void **)&v, &cap, 0, sizeof *v), 0); /* nothing needed */
    assert_null(v);
    assert_int_equal(cap, 0);
    for (int32_t i = 0; i < 1000; i++) {
        assert_int_equal(arr_reserve((void **)&v, &cap, (size_t)i + 1, sizeof *v), 0);
        assert_true(cap >= (size_t)i + 1);
        v[i] = i * 7;
    }
    assert_int_equal(cap, 1024); /* 16, doubled */
    for (int32_t i = 0; i < 1000; i++)
        assert_int_equal(v[i], i * 7);
    int32_t *was = v;
    assert_int_equal(arr_reserve((void **)&v, &cap, 10, sizeof *v), 0); /* never shrinks */
    assert_ptr_equal(v, was);
    assert_int_equal(cap, 1024);
    /* more than a size_t can count in bytes: -1, nothing changed */
    assert_int_equal(arr_reserve((void **)&v, &cap, SIZE_MAX / 2, sizeof *v), -1);
    assert_ptr_equal(v, was);
    assert_int_equal(cap, 1024);
    assert_int_equal(v[999], 999 * 7);
    /* a jump past the next doubling goes to the first power-of-two multiple */
    assert_int_equal(arr_reserve((void **)&v, &cap, 5000, sizeof *v), 0);
    assert_int_equal(cap, 8192);
    assert_int_equal(v[999], 999 * 7);
    free(v);
}

static void test_sbuf(void **state) {
    (void)state;
    sbuf b = {0};
    for (int i = 0; i < 500; i++)
        sb_printf(&b, "%d,", i);
    sb_puts(&b, "end");
    sb_put(&b, "", 0);
    assert_false(b.oom);
    assert_int_equal(b.n, strlen(b.p));
    assert_true(b.n < b.cap);
    assert_memory_equal(b.p, "0,1,2,", 6);
    assert_string_equal(b.p + b.n - 7, "499,end");
    sb_free(&b);
    assert_null(b.p);

    char *p = NULL;
    size_t len = 0, cap = 0;
    assert_int_equal(buf_append(&p, &len, &cap, "", 0), 0); /* an empty string, allocated */
    assert_string_equal(p, "");
    for (int i = 0; i < 100; i++)
        assert_int_equal(buf_append(&p, &len, &cap, "abc", 3), 0);
    assert_int_equal(len, 300);
    assert_int_equal(strlen(p), 300);
    assert_true(cap > len);
    free(p);
}

/* Five settings whose steps take 10, 8, 6, 9 and 12 ms (+-1 ms of noise,
 * and a 50 ms step now and then: a prefill); the first step after a switch
 * takes the mean of the two settings'. */
static void test_tune(void **state) {
    (void)state;
    static const double ms[5] = {10, 8, 6, 9, 12};
    tune t;
    tune_init(&t, 5);
    uint32_t rng = 12345;
    int prev = tune_arm(&t), steps = 0, seen[5] = {0};
    while (t.rounds == 0 && steps < 1000) {
        const int a = tune_arm(&t);
        seen[a] = 1;
        rng = rng * 1664525u + 1013904223u;
        double s = (ms[a] + (double)(rng >> 16 & 0xff) / 128.0 - 1.0) / 1000.0;
        if (a != prev) s = (ms[a] + ms[prev]) / 2000.0;
        if (steps % 37 == 36) s = 0.050;
        tune_step(&t, s);
        prev = a, steps++;
    }
    for (int a = 0; a < 5; a++) assert_int_equal(seen[a], 1);
    assert_int_equal(t.rounds, 1);
    assert_int_equal(tune_arm(&t), 2);
    assert_int_equal(steps, 5 * 2 * TUNE_BLOCK); /* two blocks a setting */
    assert_true(t.med[2] < 0.0065 && t.med[2] > 0.0055);
    for (int i = 0; i < TUNE_KEEP - 1; i++) tune_step(&t, 0.006);
    assert_false(t.measuring); /* kept */
    tune_step(&t, 0.006);
    assert_true(t.measuring); /* then measured again */
    tune t1;
    tune_init(&t1, 1); /* one setting: nothing to measure */
    for (int i = 0; i < 100; i++) tune_step(&t1, 0.01);
    assert_int_equal(tune_arm(&t1), 0);
    assert_false(t1.measuring);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_arr_reserve),
        cmocka_unit_test(test_sbuf),
        cmocka_unit_test(test_tune),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
