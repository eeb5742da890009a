/* A failing disk under every expert path (issue 15): reads that fail (EIO),
 * return short, or stall, injected by this program's own pread, which the
 * linker takes over libc's for the engine linked into it (no LD_PRELOAD:
 * the engine's library is static). A failed read ends the evaluation that
 * needed it with an error naming the file and offset; the next evaluation,
 * the disk healthy again, gives the exact logits; a stalled read only
 * costs time. Buffered reads (pread I/O) and direct reads (a budget).
 *
 * The faults are injected at pread, so direct reads go through pread here,
 * not io_uring (st_debug_uring(false)): a ring's read that fails or comes
 * back short is read again through st_pread_direct, the path tested here,
 * and test_uring tests that hand-over. */
#include "testutil.h"

#include "edge0.h"
#include "io/safetensors.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* EIO: the read fails; EOF: it returns 0 (a file cut short); SHORT: it
 * returns part of what was asked, which the reader must complete; STALL:
 * it takes 2 ms. The first two fail an evaluation, the others must not. */
typedef enum { FAULT_NONE, FAULT_EIO, FAULT_EOF, FAULT_SHORT, FAULT_STALL } fault_kind;
static _Atomic int g_fault = FAULT_NONE;
static atomic_long g_reads;

static ssize_t faulty_pread(int fd, void *buf, size_t n, off_t off) {
    atomic_fetch_add(&g_reads, 1);
    switch ((fault_kind)atomic_load(&g_fault)) {
    case FAULT_EIO:
        errno = EIO;
        return -1;
    case FAULT_EOF:
        return 0;
    case FAULT_SHORT:
        if (n > 1) n /= 2; /* the rest is read by the next call, short again */
        if (n > 4096) n = 4096;
        break;
    case FAULT_STALL: {
        struct timespec ts = {0, 2 * 1000000};
        nanosleep(&ts, NULL);
        break;
    }
    case FAULT_NONE:
        break;
    }
    return syscall(SYS_pread64, fd, buf, n, off);
}

ssize_t pread(int fd, void *buf, size_t n, off_t off) {
    return faulty_pread(fd, buf, n, off);
}
ssize_t pread64(int fd, void *buf, size_t n, off_t off) {
    return faulty_pread(fd, buf, n, off);
}

static const struct {
    const char *name;
    e0_path path;
    const char *opts;
} PATHS[] = {
    {"exact", E0_PATH_EXACT, ""},
    {"staged", E0_PATH_STAGED, "staged=true staged_n=4"},
    {"hot", E0_PATH_HOT, "hot_per_layer=4 hot_update_interval=1"},
    {"full", E0_PATH_FULL, ""},
    {"whole-layer prefill", E0_PATH_AUTO, "full_layer_prefill=true prefill_hot=4"},
};

static const int32_t IDS[] = {1, 100, 1000, 5, 77, 9, 300, 12};
enum { N = sizeof IDS / sizeof *IDS, PREFILL = 5 };

/* PREFILL ids as one batch, then one at a time: 0, or the first error. */
static int run(e0_engine *e, float *lg, size_t V, char *err) {
    e0_session *s;
    if (e0_session_new(e, NULL, &s, err)) fail_msg("%s", err);
    int rc = e0_session_eval(s, IDS, PREFILL, E0_LOGITS_ALL, lg, err);
    for (size_t i = PREFILL; !rc && i < N; i++)
        rc = e0_session_eval(s, IDS + i, 1, E0_LOGITS_ALL, lg + i * V, err);
    e0_session_free(s);
    return rc;
}

static void open_path(e0_engine **e, const char *model, int pi, bool direct) {
    char err[E0_ERR_MAX], buf[256];
    e0_engine_opts o;
    e0_engine_opts_default(&o);
    o.path = PATHS[pi].path;
    snprintf(buf, sizeof buf, "%s", PATHS[pi].opts);
    for (char *tok = strtok(buf, " "); tok; tok = strtok(NULL, " ")) {
        char *eq = strchr(tok, '=');
        *eq = 0;
        if (e0_opts_set(&o, tok, eq + 1, err)) fail_msg("%s", err);
    }
    o.io = E0_IO_PREAD;
    if (direct)
        o.mem_budget = 256ull << 20; /* direct reads; the budget sizes the cache... */
    o.layer.cache_slots = 2;         /* ...which stays small, so every step reads */
    if (e0_engine_open(e, model, &o, err)) fail_msg("%s: %s", PATHS[pi].name, err);
}

static void test_faults(void **state) {
    (void)state;
    const char *models[] = {"fixtures/qwen35moe/mlx", "gguf/tiny-qwen35moe/model-Q4_K_M.gguf"};
    st_debug_uring(false);
    for (size_t mi = 0; mi < 2; mi++) {
        char model[4096], err[E0_ERR_MAX];
        snprintf(model, sizeof model, "%s", tu_shared(models[mi]));
        e0_engine_opts o;
        e0_engine_opts_default(&o);
        o.io = E0_IO_LOAD;
        e0_engine *e;
        if (e0_engine_open(&e, model, &o, err)) fail_msg("%s", err);
        e0_model_info info;
        e0_engine_info(e, &info);
        const size_t V = (size_t)info.vocab_size;
        float *ref = malloc(N * V * sizeof *ref), *lg = malloc(N * V * sizeof *lg);
        if (run(e, ref, V, err)) fail_msg("%s", err);
        e0_engine_free(e);
        for (size_t pi = 0; pi < sizeof PATHS / sizeof *PATHS; pi++)
            for (int direct = 0; direct < 2; direct++)
                for (int k = FAULT_EIO; k <= FAULT_STALL; k++) {
                    open_path(&e, model, (int)pi, direct);
                    atomic_store(&g_reads, 0);
                    atomic_store(&g_fault, k);
                    int rc = run(e, lg, V, err);
                    atomic_store(&g_fault, FAULT_NONE);
                    const char *what = k == FAULT_EIO     ? "EIO"
                                       : k == FAULT_EOF   ? "EOF"
                                       : k == FAULT_SHORT ? "short reads"
                                                          : "stalls";
                    assert_true(atomic_load(&g_reads) > 0);
                    if (k >= FAULT_SHORT) {
                        if (rc) fail_msg("%s %s %s: %s", models[mi], PATHS[pi].name, what, err);
                        if (memcmp(lg, ref, N * V * sizeof *lg))
                            fail_msg("%s %s %s: logits differ", models[mi], PATHS[pi].name, what);
                    } else {
                        if (!rc)
                            fail_msg("%s %s%s %s: no error", models[mi], PATHS[pi].name,
                                     direct ? " direct" : "", what);
                        const char *file = mi ? "model-Q4_K_M.gguf" : "model.safetensors";
                        if (!strstr(err, file) || !strstr(err, "offset"))
                            fail_msg("%s %s %s: the error names no file and offset: %s", models[mi],
                                     PATHS[pi].name, what, err);
                        /* the disk is well again: the same engine, exact logits */
                        if (run(e, lg, V, err))
                            fail_msg("%s %s after %s: %s", models[mi], PATHS[pi].name, what, err);
                        if (memcmp(lg, ref, N * V * sizeof *lg))
                            fail_msg("%s %s after %s: logits differ from before the fault",
                                     models[mi], PATHS[pi].name, what);
                    }
                    e0_engine_free(e);
                }
        printf("  %s: EIO, EOF, short reads and stalls on %zu paths x buffered/direct (pread)\n",
               models[mi], sizeof PATHS / sizeof *PATHS);
        free(ref);
        free(lg);
    }
}

int main(void) {
    alarm(600); /* a path that waits forever on a failed read fails the test, not CI */
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_faults)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
