/* st_pread_direct_many (io/uring.c): scattered direct reads submitted
 * together give the bytes of the file, with and without io_uring; the
 * EINVAL fallback, a range outside the file and a misaligned destination
 * behave as st_pread_direct's; a thread's ring goes with the thread. */
#include "testutil.h"
#include "io/gguf.h"
#include "io/safetensors.h"
#include <dirent.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { NR = 9 };

typedef struct {
    st_set *s;
    st_read rd[NR];
    const uint8_t *want[NR]; /* the mapped bytes of each range */
    uint8_t *mem;            /* one aligned block holding every range's span */
} reads;

static st_set *open_fixture(void) {
    st_set *s = NULL;
    char err[E0_ERR_MAX] = "";
    const char *path = tu_shared("gguf/tiny-qwen35moe/model-Q4_K_M.gguf");
    if (st_set_open_gguf(&s, path, err)) fail_msg("%s: %s", path, err);
    return s;
}

/* NR slices of the 3-D (stacked expert) tensors, from several tensors, as
 * a bundle's ranges are: each at its offset modulo 4096 in its own span. */
static void plan(reads *r, st_set *s) {
    memset(r, 0, sizeof *r);
    r->s = s;
    size_t at = 0;
    uint64_t off[NR], len[NR];
    uint32_t file[NR];
    int n = 0;
    for (size_t i = 0; i < st_count(s) && n < NR; i++) {
        const st_tensor *t = st_at(s, i);
        if (t->ndim != 3) continue;
        uint64_t o, l;
        assert_int_equal(st_slice(t, (uint64_t)n % t->shape[0], &o, &l), 0);
        file[n] = t->file;
        off[n] = o;
        len[n] = l;
        r->want[n] = t->data + (o - t->off);
        n++;
    }
    assert_int_equal(n, NR);
    size_t spans[NR];
    for (int i = 0; i < NR; i++) {
        spans[i] = at + off[i] % 4096;
        at += (off[i] % 4096 + len[i] + 4095) & ~(size_t)4095;
    }
    r->mem = aligned_alloc(4096, at);
    assert_non_null(r->mem);
    memset(r->mem, 0xa5, at);
    for (int i = 0; i < NR; i++)
        r->rd[i] = (st_read){file[i], off[i], len[i], r->mem + spans[i]};
}

static void check(const reads *r) {
    for (int i = 0; i < NR; i++)
        if (memcmp(r->rd[i].dst, r->want[i], r->rd[i].len) != 0)
            fail_msg("range %d (%llu bytes at %llu) differs from the file", i,
                     (unsigned long long)r->rd[i].len, (unsigned long long)r->rd[i].off);
}

/* The bytes, through the ring and without it; the ring reads every range
 * when the kernel offers io_uring and the file takes O_DIRECT. */
static void test_bytes(void **state) {
    (void)state;
    st_set *s = open_fixture();
    char err[E0_ERR_MAX];
    for (int on = 1; on >= 0; on--) {
        st_debug_uring(on);
        reads r;
        plan(&r, s);
        const uint64_t before = st_uring_reads();
        bool direct = false;
        assert_int_equal(st_pread_direct_many(s, r.rd, NR, &direct, err), 0);
        check(&r);
        const uint64_t ring = st_uring_reads() - before;
        const bool can = st_direct_on(s, 0);
        printf("  io_uring %s: %llu of %d ranges through the ring, O_DIRECT %s\n",
               on ? (e0_uring_on() ? "on" : "unavailable") : "off", (unsigned long long)ring, NR,
               can ? "on" : "off (the filesystem refuses it)");
        assert_int_equal(direct, can);
        if (on && can && e0_uring_on()) assert_int_equal(ring, NR);
        if (!on) assert_int_equal(ring, 0);
        free(r.mem);
    }
    st_debug_uring(true);
    st_set_free(s);
}

/* A destination not aligned with its offset is read through the page
 * cache (not direct) while the others still go direct; a range past the
 * end fails naming the file, and the ring is usable afterwards. */
static void test_mixed_and_errors(void **state) {
    (void)state;
    st_set *s = open_fixture();
    char err[E0_ERR_MAX] = "";
    reads r;
    plan(&r, s);
    uint8_t *odd = malloc(r.rd[4].len + 1);
    assert_non_null(odd);
    uint8_t *keep = r.rd[4].dst;
    r.rd[4].dst = odd + 1; /* malloc gives 16-aligned memory; offsets here are multiples of 16 */
    assert_true(((uintptr_t)r.rd[4].dst - r.rd[4].off) % 4096 != 0);
    bool direct = true;
    assert_int_equal(st_pread_direct_many(s, r.rd, NR, &direct, err), 0);
    assert_false(direct);
    check(&r);
    r.rd[4].dst = keep;

    st_read bad = r.rd[2];
    bad.off = 1ull << 40;
    st_read two[2] = {r.rd[0], bad};
    assert_int_equal(st_pread_direct_many(s, two, 2, NULL, err), E0_ERANGE);
    assert_non_null(strstr(err, "model-Q4_K_M.gguf"));
    assert_non_null(strstr(err, "outside"));

    memset(r.mem, 0, 4096);
    assert_int_equal(st_pread_direct_many(s, r.rd, NR, NULL, err), 0);
    check(&r);
    free(odd);
    free(r.mem);
    st_set_free(s);
}

/* The filesystem rejecting O_DIRECT (EINVAL) mid-batch: the bytes still
 * arrive, through the page cache, and direct reads stay off afterwards. */
static void test_einval(void **state) {
    (void)state;
    st_set *s = open_fixture();
    char err[E0_ERR_MAX];
    reads r;
    plan(&r, s);
    const bool can = st_direct_on(s, 0);
    st_debug_direct_einval(s);
    bool direct = true;
    assert_int_equal(st_pread_direct_many(s, r.rd, NR, &direct, err), 0);
    check(&r);
    assert_false(direct && can);
    assert_false(st_direct_on(s, 0));
    free(r.mem);
    st_set_free(s);
}

static int count_fds(void) {
    DIR *d = opendir("/proc/self/fd");
    assert_non_null(d);
    int n = 0;
    while (readdir(d))
        n++;
    closedir(d);
    return n;
}

static void *reader(void *arg) {
    reads *r = arg;
    char err[E0_ERR_MAX];
    return (void *)(intptr_t)st_pread_direct_many(r->s, r->rd, NR, NULL, err);
}

/* Threads that read and exit leave no ring behind (each ring is a file
 * descriptor and two mappings): 64 threads in turn, the same descriptors
 * open after as before. */
static void test_thread_exit(void **state) {
    (void)state;
    st_set *s = open_fixture();
    reads r;
    plan(&r, s);
    const int fds = count_fds();
    for (int i = 0; i < 64; i++) {
        pthread_t t;
        assert_int_equal(pthread_create(&t, NULL, reader, &r), 0);
        void *rc;
        assert_int_equal(pthread_join(t, &rc), 0);
        assert_int_equal((intptr_t)rc, 0);
    }
    check(&r);
    assert_int_equal(count_fds(), fds);
    free(r.mem);
    st_set_free(s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bytes),
        cmocka_unit_test(test_mixed_and_errors),
        cmocka_unit_test(test_einval),
        cmocka_unit_test(test_thread_exit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
