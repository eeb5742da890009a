/* util/arr.h and util/sbuf.h: growth keeps the contents, the capacity
 * doubles and never shrinks, and a request that cannot fit in a size_t
 * fails with the array left as it was. */
#include "testutil.h"

#include "util/arr.h"
#include "util/sbuf.h"

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

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_arr_reserve),
        cmocka_unit_test(test_sbuf),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
