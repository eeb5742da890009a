/* Batched decode (e0_session_eval_batch, issue 16): N sequences decoded
 * together in one forward pass per step give each sequence logits
 * bit-identical (memcmp) to decoding it alone:
 *  - on every fixture family and layout (hf, hf-fused, mlx, mlx-fused) and
 *    GGUF files (k-quants, Q4_0, Q8_0), with prompts of different lengths;
 *  - with sequences joining and leaving between steps (a finished
 *    sequence's session reset and reused), in a different order every
 *    step, 1 to 5 at once;
 *  - through every expert path (exact with a 1-slot and a large LRU,
 *    staged, hot, whole-layer, mapped, loaded and repacked), with 1 and 2
 *    compute threads, under the default and the exact kernel sets;
 *  - five copies of one sequence (every routed expert then runs over five
 *    tokens) give five copies of its logits, computing and reading each
 *    routed expert once per step, as the one sequence alone does;
 *  - route stickiness (a synthetic model) follows each sequence's own past;
 *  - invalid calls (repeated or foreign sessions, ids outside the vocabulary,
 *    a full context) fail and change nothing.
 *  - underneath, mat_matmul_decode gives every token of a call the result
 *    of its one-token call, under every kernel set, on every matrix kind.
 * make test also runs it under ThreadSanitizer, on three of the models. */
#include "testutil.h"

#include "edge0.h"
#include "model/model.h"
#include "quant/mat.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *model_path(int mi) {
    return tu_checkpoint(TU_CHECKPOINTS[mi][0], TU_CHECKPOINTS[mi][1]);
}

/* ---- the schedule ----------------------------------------------------------
 * Sequence q is prefilled with its prompt (alone) just before step join[q],
 * then decodes one id per step in steps join[q] .. join[q] + nd[q] - 1,
 * in the session slot[q]. Slot 1 is reused: sequence 1 leaves after step 2,
 * sequence 5 takes its session (reset) at step 4. Batch sizes per step:
 * 2, 3, 4, 4, 5, 5, 2, 1. */
enum { NSEQ = 6, NSLOT = 5, STEPS = 8, MAXP = 16, MAXD = 8 };
static const int PROMPT[NSEQ] = {4, 1, 9, 13, 6, 3};
static const int JOIN[NSEQ] = {0, 0, 1, 2, 3, 4};
static const int ND[NSEQ] = {6, 3, 5, 4, 4, 4};
static const int SLOT[NSEQ] = {0, 1, 2, 3, 4, 1};

typedef struct {
    int32_t prompt[NSEQ][MAXP];
    int32_t dec[NSEQ][MAXD];
    size_t V;
    /* ref[q]: [ND[q] + 1, V], the prompt's last logits, then each step's */
    float *ref[NSEQ];
} plan;

static uint32_t lcg(uint32_t *st) {
    *st = *st * 1664525u + 1013904223u;
    return *st >> 8;
}

static void plan_ids(plan *p, int32_t vocab, uint32_t seed) {
    uint32_t st = seed;
    for (int q = 0; q < NSEQ; q++) {
        for (int i = 0; i < PROMPT[q]; i++)
            p->prompt[q][i] = (int32_t)(lcg(&st) % (uint32_t)vocab);
        for (int i = 0; i < ND[q]; i++)
            p->dec[q][i] = (int32_t)(lcg(&st) % (uint32_t)vocab);
    }
}

static e0_engine *open_model(int mi, const e0_engine_opts *o) {
    char err[E0_ERR_MAX];
    e0_engine *e;
    if (e0_engine_open(&e, model_path(mi), o, err))
        fail_msg("%s/%s: %s", TU_CHECKPOINTS[mi][0], TU_CHECKPOINTS[mi][1], err);
    return e;
}

static e0_session *new_session(e0_engine *e) {
    char err[E0_ERR_MAX];
    e0_session_opts so;
    e0_session_opts_default(&so);
    so.n_ctx = 64;
    so.n_batch = 16;
    e0_session *s;
    if (e0_session_new(e, &so, &s, err)) fail_msg("%s", err);
    return s;
}

/* Each sequence alone: prefill, then one decode step per id. */
static void reference(e0_engine *e, plan *p) {
    char err[E0_ERR_MAX];
    const size_t V = p->V;
    for (int q = 0; q < NSEQ; q++) {
        e0_session *s = new_session(e);
        p->ref[q] = malloc((size_t)(ND[q] + 1) * V * sizeof(float));
        assert_non_null(p->ref[q]);
        if (e0_session_eval(s, p->prompt[q], (size_t)PROMPT[q], E0_LOGITS_LAST, p->ref[q], err))
            fail_msg("%s", err);
        for (int i = 0; i < ND[q]; i++)
            if (e0_session_eval(s, &p->dec[q][i], 1, E0_LOGITS_LAST, p->ref[q] + (size_t)(i + 1) * V,
                                err))
                fail_msg("%s", err);
        e0_session_free(s);
    }
}

static void plan_free(plan *p) {
    for (int q = 0; q < NSEQ; q++)
        free(p->ref[q]);
}

/* The schedule through e0_session_eval_batch; every logit row against the
 * reference. `what` names the configuration in a failure. */
static void run_schedule(e0_engine *e, const plan *p, const char *what) {
    char err[E0_ERR_MAX];
    const size_t V = p->V;
    e0_session *slots[NSLOT];
    for (int i = 0; i < NSLOT; i++)
        slots[i] = new_session(e);
    float *lg = malloc((size_t)NSLOT * V * sizeof *lg);
    assert_non_null(lg);
    int sizes = 0; /* batch sizes seen, as a bit set */
    for (int step = 0; step < STEPS; step++) {
        e0_session *b[NSLOT];
        int32_t ids[NSLOT];
        int who[NSLOT], n = 0;
        for (int q = 0; q < NSEQ; q++) {
            if (step < JOIN[q] || step >= JOIN[q] + ND[q]) continue;
            e0_session *s = slots[SLOT[q]];
            if (step == JOIN[q]) { /* joins: its prompt alone, in a fresh (or reset) session */
                e0_session_reset(s);
                if (e0_session_eval(s, p->prompt[q], (size_t)PROMPT[q], E0_LOGITS_LAST, lg, err))
                    fail_msg("%s", err);
                if (memcmp(lg, p->ref[q], V * sizeof *lg))
                    fail_msg("%s: sequence %d: prompt logits differ", what, q);
            }
            who[n] = q;
            n++;
        }
        /* a different order every step */
        for (int i = 0; i < n; i++) {
            const int q = who[(i + step) % n];
            b[i] = slots[SLOT[q]];
            ids[i] = p->dec[q][step - JOIN[q]];
        }
        sizes |= 1 << n;
        if (e0_session_eval_batch(b, ids, (size_t)n, lg, err)) fail_msg("%s: %s", what, err);
        for (int i = 0; i < n; i++) {
            const int q = who[(i + step) % n];
            const float *want = p->ref[q] + (size_t)(step - JOIN[q] + 1) * V;
            if (memcmp(lg + (size_t)i * V, want, V * sizeof *lg))
                fail_msg("%s: step %d, %d sequences: sequence %d (row %d, position %d) differs "
                         "from its decode alone (rel L2 %.3g)",
                         what, step, n, q, i, PROMPT[q] + step - JOIN[q],
                         tu_rel_l2(lg + (size_t)i * V, want, V));
        }
    }
    assert_int_equal(sizes, 2 | 4 | 8 | 16 | 32); /* 1 to 5 sequences */
    free(lg);
    for (int i = 0; i < NSLOT; i++)
        e0_session_free(slots[i]);
}

/* Five copies of sequence 3 together: five copies of its logits, each
 * routed expert computed (and read) once per step, as for one alone. The
 * cache evicts by LRU here: the router policy (the default) sums every
 * token's probabilities, so five copies weigh popularity five times
 * against recency and may rightly keep other bundles than one alone. */
static void run_copies(int mi, const e0_engine_opts *opts, const plan *p, const char *what) {
    char err[E0_ERR_MAX];
    e0_engine_opts lru = *opts;
    lru.layer.cache_policy = E0_CACHE_LRU;
    const e0_engine_opts *o = &lru;
    const size_t V = p->V;
    const int q = 3;
    uint64_t calls[2], misses[2];
    for (int copies = 1; copies <= NSLOT; copies += NSLOT - 1) {
        e0_engine *e = open_model(mi, o);
        e0_session *b[NSLOT];
        int32_t ids[NSLOT];
        float *lg = malloc((size_t)NSLOT * V * sizeof *lg);
        assert_non_null(lg);
        for (int i = 0; i < copies; i++) {
            b[i] = new_session(e);
            if (e0_session_eval(b[i], p->prompt[q], (size_t)PROMPT[q], E0_LOGITS_NONE, NULL, err))
                fail_msg("%s", err);
        }
        e0_engine_stats_reset(e);
        for (int step = 0; step < ND[q]; step++) {
            for (int i = 0; i < copies; i++)
                ids[i] = p->dec[q][step];
            if (e0_session_eval_batch(b, ids, (size_t)copies, lg, err))
                fail_msg("%s: %s", what, err);
            for (int i = 0; i < copies; i++)
                if (memcmp(lg + (size_t)i * V, p->ref[q] + (size_t)(step + 1) * V, V * sizeof *lg))
                    fail_msg("%s: %d copies, step %d: copy %d differs from the sequence alone",
                             what, copies, step, i);
        }
        e0_stats st;
        e0_engine_stats(e, &st);
        calls[copies > 1] = st.expert_calls;
        misses[copies > 1] = st.lru_misses;
        assert_int_equal(st.decode_tokens, (uint64_t)(copies * ND[q]));
        for (int i = 0; i < copies; i++)
            e0_session_free(b[i]);
        free(lg);
        e0_engine_free(e);
    }
    if (calls[1] != calls[0] || misses[1] != misses[0])
        fail_msg("%s: 5 copies computed %llu expert products and missed the LRU %llu times; one "
                 "sequence alone %llu and %llu",
                 what, (unsigned long long)calls[1], (unsigned long long)misses[1],
                 (unsigned long long)calls[0], (unsigned long long)misses[0]);
}

/* ---- configurations (TU_CONFIGS) ------------------------------------------ */

/* Under ThreadSanitizer (make test: ~20x slower) the threads are what is
 * under test: three models (separate bf16, fused mlx, GGUF k-quants) carry
 * every configuration, and the kernel sweep (one thread's arithmetic) runs
 * on one model, one kernel set and two batch sizes. */
#if defined(__SANITIZE_THREAD__)
enum { TSAN = 1 };
#else
enum { TSAN = 0 };
#endif
static bool model_on(int mi) {
    return !TSAN || mi == 0 || mi == 9 || mi == 10;
}

/* Every model x configuration under one kernel set; `all`: every
 * configuration on every model, else three configurations per model. */
static void matrix(bool all) {
    long runs = 0;
    for (int mi = 0; mi < TU_NCHECKPOINTS; mi++) {
        if (!model_on(mi)) continue;
        e0_engine_opts o;
        e0_engine_opts_default(&o);
        o.path = E0_PATH_EXACT;
        o.io = E0_IO_MMAP;
        o.n_threads = 1;
        e0_engine *e = open_model(mi, &o);
        e0_model_info info;
        e0_engine_info(e, &info);
        plan p = {.V = (size_t)info.vocab_size};
        plan_ids(&p, info.vocab_size, 1234u + (uint32_t)mi);
        reference(e, &p);
        e0_engine_free(e);
        for (int ci = 0; ci < TU_NCONFIGS; ci++) {
            if (!all && ci % 3 != mi % 3) continue;
            const int threads = 1 + (ci + mi) % 2;
            char what[256];
            snprintf(what, sizeof what, "%s/%s %s, kernels %s, %d thread%s", TU_CHECKPOINTS[mi][0],
                     TU_CHECKPOINTS[mi][1], TU_CONFIGS[ci].name, e0_kernels_name(), threads,
                     threads > 1 ? "s" : "");
            tu_apply_config(&o, &TU_CONFIGS[ci], threads);
            e = open_model(mi, &o);
            run_schedule(e, &p, what);
            e0_engine_free(e);
            if (ci % 3 == 0) run_copies(mi, &o, &p, what);
            runs++;
        }
        plan_free(&p);
    }
    printf("  %ld configurations under %s: every batched sequence bit-identical to its decode "
           "alone\n",
           runs, e0_kernels_name());
}

static void test_batch_default_kernels(void **state) {
    (void)state;
    matrix(true);
}

/* The exact kernel set (24-bit activations in rows, panels from 4 tokens
 * up) and the f32 one. */
static void test_batch_other_kernels(void **state) {
    (void)state;
    const e0_kernels sets[] = {E0_KERNELS_EXACT, E0_KERNELS_F32};
    for (size_t i = 0; i < sizeof sets / sizeof *sets; i++) {
        assert_int_equal(e0_set_kernels(sets[i]), 0);
        matrix(false);
    }
    assert_int_equal(e0_set_kernels(E0_KERNELS_AUTO), 0);
}

/* The batching schedule on a synthetic checkpoint whose router keeps a
 * history (the ids from seed), its reference run alone; label names it. */
static void batch_history(char *root, char *dir, unsigned seed, const char *label) {
    char err[E0_ERR_MAX];
    e0_engine_opts o;
    e0_engine_opts_default(&o);
    o.n_threads = 2;
    o.io = E0_IO_MMAP;
    e0_engine *e;
    if (e0_engine_open(&e, dir, &o, err)) fail_msg("%s", err);
    e0_model_info info;
    e0_engine_info(e, &info);
    plan p = {.V = (size_t)info.vocab_size};
    plan_ids(&p, info.vocab_size, seed);
    reference(e, &p);
    run_schedule(e, &p, label);
    plan_free(&p);
    e0_engine_free(e);
    free(dir);
    tu_rmtree(root);
    free(root);
}

/* A routing profile's recency bonus follows each sequence's own past. */
static void test_batch_profile(void **state) {
    (void)state;
    char *root = tu_tmpdir();
    batch_history(root, tu_synth_profile(root, "profile", "qwen36"), 98u, "tiny synth, route profile qwen36");
}

/* Route stickiness keeps each sequence's own previous experts. */
static void test_batch_sticky(void **state) {
    (void)state;
    char *root = tu_tmpdir();
    batch_history(root, tu_synth_sticky(root, "sticky", 0.5), 99u, "tiny synth, route stickiness 0.5");
}

/* ---- the kernels alone --------------------------------------------------- */

/* mat_matmul_decode over T tokens against mat_matmul_decode of each token
 * alone, bit for bit, and where mat_matmul_t_free, mat_matmul over the T
 * tokens against mat_matmul of each alone; returns whether mat_matmul over
 * the T tokens differed from decode (the prefill arithmetic). */
static bool decode_rows_match(const e0_mat *m, int T, const char *what) {
    const size_t cols = (size_t)m->cols, rows = (size_t)m->rows;
    float *x = malloc((size_t)T * cols * sizeof *x), *y = malloc((size_t)T * rows * sizeof *y),
          *y1 = malloc(rows * sizeof *y1), *yp = malloc((size_t)T * rows * sizeof *yp);
    assert_true(x && y && y1 && yp);
    uint32_t st = (uint32_t)(T * 7919 + (int)rows);
    for (size_t i = 0; i < (size_t)T * cols; i++)
        x[i] = ((float)(lcg(&st) % 20001u) - 10000.0f) / 5000.0f;
    mat_matmul_decode(m, x, (int64_t)cols, T, y, (int64_t)rows);
    mat_matmul(m, x, (int64_t)cols, T, yp, (int64_t)rows);
    for (int t = 0; t < T; t++) {
        mat_matmul_decode(m, x + (size_t)t * cols, (int64_t)cols, 1, y1, (int64_t)rows);
        if (memcmp(y + (size_t)t * rows, y1, rows * sizeof *y1))
            fail_msg("%s [%zu x %zu], kernels %s: token %d of %d differs from its one-token call",
                     what, rows, cols, e0_kernels_name(), t, T);
        if (!mat_matmul_t_free(m)) continue;
        mat_matmul(m, x + (size_t)t * cols, (int64_t)cols, 1, y1, (int64_t)rows);
        if (memcmp(yp + (size_t)t * rows, y1, rows * sizeof *y1))
            fail_msg("%s [%zu x %zu], kernels %s: token %d of %d differs from its one-token "
                     "prefill call",
                     what, rows, cols, e0_kernels_name(), t, T);
    }
    const bool differs = memcmp(y, yp, (size_t)T * rows * sizeof *y) != 0;
    free(x);
    free(y);
    free(y1);
    free(yp);
    return differs;
}

/* Every kind of matrix a model computes with: projections, routers,
 * shared experts, an expert, lm_head. */
static int model_mats(const e0_engine *e, const e0_mat **out, int cap) {
    const e0_model *m = &e->model;
    int n = 0;
    out[n++] = &m->lm_head;
    for (int l = 0; l < m->cfg.n_layers && n + 24 <= cap; l++) {
        const e0_layer *ly = &m->layers[l];
        const e0_mat *mats[] = {&ly->q,       &ly->k,     &ly->v,       &ly->o,      &ly->out,
                                &ly->router,  &ly->sh_gate, &ly->sh_up, &ly->sh_down, &ly->sh_router,
                                &ly->mlp_gate, &ly->mlp_up, &ly->mlp_down, &ly->qkvz, &ly->ba,
                                &ly->qkv,     &ly->z,     &ly->b,       &ly->a};
        for (size_t i = 0; i < sizeof mats / sizeof *mats; i++)
            if (mats[i]->rows > 0 && mats[i]->w) out[n++] = mats[i];
        if (ly->moe && ly->experts) {
            out[n++] = &ly->experts[0].gate;
            out[n++] = &ly->experts[0].down;
        }
    }
    return n;
}

/* mat_matmul_decode under every kernel set, on the file layout and on the
 * 16-row panels made at load, for 4-bit and 8-bit mlx, bf16 and ggml
 * (Q4_K, Q5_0, Q6_K, Q8_0, Q4_0) matrices, over 2 to 9 tokens. */
static void test_matmul_decode(void **state) {
    (void)state;
    const int models[] = {9, 7, 10, 12}; /* qwen35moe mlx-fused, hf-fused; Q4_K_M; Q4_0 */
    const e0_io_mode ios[] = {E0_IO_MMAP, E0_IO_LOAD};
    const e0_kernels sets[] = {E0_KERNELS_AVX512_MIXED, E0_KERNELS_AVX512_Q24,
                               E0_KERNELS_AVX512_Q16,   E0_KERNELS_AVX512_Q8,
                               E0_KERNELS_AVX512,       E0_KERNELS_AVX2,
                               E0_KERNELS_REF};
    const int Ts[] = {4, 9, 2, 3, 5, 8};
    const size_t nmodels = TSAN ? 1 : sizeof models / sizeof *models,
                 /* under TSan: MIXED (one arithmetic at every T on mlx
                  * weights) and Q24 (rows, then panels from 4 tokens) */
                 nsets = TSAN ? 2 : sizeof sets / sizeof *sets,
                 nT = TSAN ? 2 : sizeof Ts / sizeof *Ts;
    long checks = 0, differ = 0;
    for (size_t mi = 0; mi < nmodels; mi++)
        for (size_t ii = 0; ii < sizeof ios / sizeof *ios; ii++) {
            assert_int_equal(e0_set_kernels(E0_KERNELS_AUTO), 0); /* repacks at load */
            e0_engine_opts o;
            e0_engine_opts_default(&o);
            o.io = ios[ii];
            o.n_threads = 2;
            e0_engine *e = open_model(models[mi], &o);
            const e0_mat *mats[256];
            const int n = model_mats(e, mats, 256);
            for (size_t ki = 0; ki < nsets; ki++) {
                if (!e0_kernels_supported(sets[ki])) continue;
                assert_int_equal(e0_set_kernels(sets[ki]), 0);
                for (int i = 0; i < n; i++)
                    for (size_t ti = 0; ti < nT; ti++) {
                        differ += decode_rows_match(mats[i], Ts[ti], model_path(models[mi]));
                        checks++;
                    }
            }
            e0_engine_free(e);
        }
    assert_int_equal(e0_set_kernels(E0_KERNELS_AUTO), 0);
    printf("  %ld matrix x kernel set x T checks bit-identical per token; the prefill arithmetic "
           "differs in %ld of them\n",
           checks, differ);
    assert_true(differ > 0); /* the test would see the wrong arithmetic */
}

/* Calls that cannot run fail before anything changes. */
static void test_batch_invalid(void **state) {
    (void)state;
    char err[E0_ERR_MAX];
    e0_engine_opts o;
    e0_engine_opts_default(&o);
    o.io = E0_IO_MMAP;
    e0_engine *e = open_model(8, &o), *e2 = open_model(8, &o);
    e0_session *a = new_session(e), *b = new_session(e), *c = new_session(e2);
    e0_session_opts so;
    e0_session_opts_default(&so);
    so.n_ctx = 2;
    e0_session *full;
    if (e0_session_new(e, &so, &full, err)) fail_msg("%s", err);
    const int32_t two[2] = {5, 6};
    if (e0_session_eval(full, two, 2, E0_LOGITS_NONE, NULL, err)) fail_msg("%s", err);
    if (e0_session_eval(a, two, 1, E0_LOGITS_NONE, NULL, err)) fail_msg("%s", err);
    e0_model_info info;
    e0_engine_info(e, &info);
    float *lg = malloc(2 * (size_t)info.vocab_size * sizeof *lg);
    const int32_t ids[2] = {1, 2}, bad[2] = {1, info.vocab_size};
    e0_session *same[2] = {a, a}, *foreign[2] = {a, c}, *ctx[2] = {a, full}, *ok[2] = {a, b},
               *null[2] = {a, NULL};
    assert_int_equal(e0_session_eval_batch(same, ids, 2, lg, err), E0_EINVAL);
    assert_non_null(strstr(err, "same session"));
    assert_int_equal(e0_session_eval_batch(foreign, ids, 2, lg, err), E0_EINVAL);
    assert_non_null(strstr(err, "another engine"));
    assert_int_equal(e0_session_eval_batch(null, ids, 2, lg, err), E0_EINVAL);
    assert_int_equal(e0_session_eval_batch(ok, bad, 2, lg, err), E0_ERANGE);
    assert_non_null(strstr(err, "vocabulary"));
    assert_int_equal(e0_session_eval_batch(ctx, ids, 2, lg, err), E0_ERANGE);
    assert_non_null(strstr(err, "full"));
    assert_int_equal(e0_session_eval_batch(ok, ids, 0, lg, err), E0_EINVAL);
    assert_int_equal(e0_session_pos(a), 1);
    assert_int_equal(e0_session_pos(b), 0);
    assert_int_equal(e0_session_pos(full), 2);
    /* and a valid one advances both, logits or not */
    assert_int_equal(e0_session_eval_batch(ok, ids, 2, NULL, err), 0);
    assert_int_equal(e0_session_pos(a), 2);
    assert_int_equal(e0_session_pos(b), 1);
    size_t n;
    const int32_t *h = e0_session_history(a, &n);
    assert_int_equal(n, 2);
    assert_int_equal(h[1], 1);
    free(lg);
    e0_session_free(a);
    e0_session_free(b);
    e0_session_free(c);
    e0_session_free(full);
    e0_engine_free(e);
    e0_engine_free(e2);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matmul_decode),
        cmocka_unit_test(test_batch_invalid),
        cmocka_unit_test(test_batch_default_kernels),
        cmocka_unit_test(test_batch_other_kernels),
        cmocka_unit_test(test_batch_sticky),
        cmocka_unit_test(test_batch_profile),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
