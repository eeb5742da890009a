/* Merged prefill passes (pass_begin / pass_step, issue 16): the prompt
 * chunks of several sessions in one forward pass give each session logits
 * bit-identical (memcmp) to its own pass of the same chunk, and the same
 * logits in the decode steps after:
 *  - on every checkpoint of TU_CHECKPOINTS, under the default and the
 *    exact kernel sets, through every expert path (exact with a 1-slot and
 *    a large LRU, staged, hot, whole-layer, mapped, loaded and repacked);
 *  - four sessions with chunks of 2, 20, 1 and 9 ids (runs below and above
 *    K_PANEL_MIN_T, given short ones first so that the pass reorders them),
 *    two of them mid-prompt (they already hold ids);
 *  - the pass run whole, or paused after every layer or every half layer
 *    (token mixer, MLP) while a fifth session decodes in between (as the
 *    server's streams do);
 *  - each routed expert computed once per layer for the whole pass: fewer
 *    expert products than the four passes alone;
 *  - invalid passes (repeated sessions, too many ids, a session of a paused
 *    pass evaluated, snapshotted or put in another pass) fail and change
 *    nothing.
 * make test also runs it under ThreadSanitizer, on three of the models. */
#include "testutil.h"

#include "edge0.h"
#include "model/model.h"
#include "quant/mat.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { NS = 4, ND = 3, MAXPRE = 8, MAXC = 20, NE = 16 };
/* session i: PRE[i] ids prefilled alone first, then a chunk of CHUNK[i] ids in the pass */
static const int PRE[NS] = {0, 0, 5, 7};
static const int CHUNK[NS] = {2, 20, 1, 9};

typedef struct {
    int32_t pre[NS][MAXPRE], chunk[NS][MAXC], dec[NS][ND];
    int32_t epre[3], edec[NE]; /* the fifth session: a prompt, then decode ids */
    size_t V;
    float *ref[NS]; /* [ND + 1, V]: the chunk's last logits, then each decode step's */
    float *eref;    /* [NE, V] */
    uint64_t solo_calls;
} plan;

static uint32_t lcg(uint32_t *st) {
    *st = *st * 1664525u + 1013904223u;
    return *st >> 8;
}

static void plan_ids(plan *p, int32_t vocab, uint32_t seed) {
    uint32_t st = seed;
    for (int i = 0; i < NS; i++) {
        for (int j = 0; j < PRE[i]; j++)
            p->pre[i][j] = (int32_t)(lcg(&st) % (uint32_t)vocab);
        for (int j = 0; j < CHUNK[i]; j++)
            p->chunk[i][j] = (int32_t)(lcg(&st) % (uint32_t)vocab);
        for (int j = 0; j < ND; j++)
            p->dec[i][j] = (int32_t)(lcg(&st) % (uint32_t)vocab);
    }
    for (int j = 0; j < 3; j++)
        p->epre[j] = (int32_t)(lcg(&st) % (uint32_t)vocab);
    for (int j = 0; j < NE; j++)
        p->edec[j] = (int32_t)(lcg(&st) % (uint32_t)vocab);
}

static e0_engine *open_model(int mi, const e0_engine_opts *o) {
    char err[E0_ERR_MAX];
    e0_engine *e;
    if (e0_engine_open(&e, tu_checkpoint(TU_CHECKPOINTS[mi][0], TU_CHECKPOINTS[mi][1]), o, err))
        fail_msg("%s/%s: %s", TU_CHECKPOINTS[mi][0], TU_CHECKPOINTS[mi][1], err);
    return e;
}

static e0_session *new_session(e0_engine *e) {
    char err[E0_ERR_MAX];
    e0_session_opts so;
    e0_session_opts_default(&so);
    so.n_ctx = 64;
    so.n_batch = 40;
    e0_session *s;
    if (e0_session_new(e, &so, &s, err)) fail_msg("%s", err);
    return s;
}

static void eval(e0_session *s, const int32_t *ids, size_t n, float *logits) {
    char err[E0_ERR_MAX];
    if (n && e0_session_eval(s, ids, n, logits ? E0_LOGITS_LAST : E0_LOGITS_NONE, logits, err))
        fail_msg("%s", err);
}

/* Each session alone: its earlier ids, its chunk as one pass, its decode steps. */
static void reference(e0_engine *e, plan *p) {
    const size_t V = p->V;
    e0_stats st;
    p->solo_calls = 0;
    for (int i = 0; i < NS; i++) {
        e0_session *s = new_session(e);
        p->ref[i] = malloc((size_t)(ND + 1) * V * sizeof(float));
        assert_non_null(p->ref[i]);
        eval(s, p->pre[i], (size_t)PRE[i], NULL);
        e0_engine_stats_reset(e);
        eval(s, p->chunk[i], (size_t)CHUNK[i], p->ref[i]);
        e0_engine_stats(e, &st); /* the mapped exact path: one product per (layer, expert) per pass */
        p->solo_calls += st.expert_calls;
        for (int j = 0; j < ND; j++)
            eval(s, &p->dec[i][j], 1, p->ref[i] + (size_t)(j + 1) * V);
        e0_session_free(s);
    }
    e0_session *s = new_session(e);
    p->eref = malloc((size_t)NE * V * sizeof(float));
    assert_non_null(p->eref);
    eval(s, p->epre, 3, NULL);
    for (int j = 0; j < NE; j++)
        eval(s, &p->edec[j], 1, p->eref + (size_t)j * V);
    e0_session_free(s);
}

static void plan_free(plan *p) {
    for (int i = 0; i < NS; i++)
        free(p->ref[i]);
    free(p->eref);
}

/* The four chunks in one pass (`pause` 0: whole; 1: paused after every
 * layer; 2: after every half layer; a fifth session decoding in each pause),
 * then ND batched decode steps; every row against the reference. Returns
 * the pass's expert products. */
static uint64_t run_merged(e0_engine *e, const plan *p, int pause, const char *what) {
    char err[E0_ERR_MAX];
    const size_t V = p->V;
    e0_session *ss[NS], *es = new_session(e);
    for (int i = 0; i < NS; i++) {
        ss[i] = new_session(e);
        eval(ss[i], p->pre[i], (size_t)PRE[i], NULL);
    }
    eval(es, p->epre, 3, NULL);
    float *lg = malloc((size_t)(NS + 1) * V * sizeof *lg);
    assert_non_null(lg);
    float *rows[NS];
    const int32_t *ids[NS];
    size_t n[NS];
    for (int i = 0; i < NS; i++) {
        rows[i] = lg + (size_t)i * V;
        ids[i] = p->chunk[i];
        n[i] = (size_t)CHUNK[i];
    }
    e0_engine_stats_reset(e);
    e0_pass pass;
    if (pass_begin(&pass, ss, ids, n, NS, err)) fail_msg("%s: %s", what, err);
    assert_int_equal(pass.b.T, 2 + 20 + 1 + 9);
    assert_int_equal(pass.b.Tp, 20 + 9); /* the long runs first */
    bool done = false;
    int steps = 0, ne = 0;
    while (!done) {
        const int rc = pause == 2 ? pass_step_halves(&pass, 1, rows, &done, err)
                                  : pass_step(&pass, pause, rows, &done, err);
        if (rc) fail_msg("%s: %s", what, err);
        steps++;
        if (!done && ne < NE) { /* another stream decodes while the pass is paused */
            float *el = lg + (size_t)NS * V;
            eval(es, &p->edec[ne], 1, el);
            if (memcmp(el, p->eref + (size_t)ne * V, V * sizeof *el))
                fail_msg("%s: a decode step between the pass's layers differs from alone", what);
            ne++;
        }
    }
    e0_stats st;
    e0_engine_stats(e, &st);
    e0_model_info info;
    e0_engine_info(e, &info);
    assert_int_equal(steps, pause ? pause * info.n_layers : 1);
    for (int i = 0; i < NS; i++) {
        if (memcmp(rows[i], p->ref[i], V * sizeof *lg))
            fail_msg("%s: session %d (chunk of %d after %d ids): merged pass logits differ from its "
                     "pass alone",
                     what, i, CHUNK[i], PRE[i]);
        assert_int_equal(e0_session_pos(ss[i]), PRE[i] + CHUNK[i]);
        assert_int_equal(session_part_layer(ss[i]), -1);
        assert_null(ss[i]->pass);
    }
    for (int j = 0; j < ND; j++) {
        int32_t d[NS];
        for (int i = 0; i < NS; i++)
            d[i] = p->dec[i][j];
        if (e0_session_eval_batch(ss, d, NS, lg, err)) fail_msg("%s: %s", what, err);
        for (int i = 0; i < NS; i++)
            if (memcmp(lg + (size_t)i * V, p->ref[i] + (size_t)(j + 1) * V, V * sizeof *lg))
                fail_msg("%s: session %d: decode step %d after the merged pass differs", what, i, j);
    }
    for (int i = 0; i < NS; i++)
        e0_session_free(ss[i]);
    e0_session_free(es);
    free(lg);
    return st.expert_calls;
}

/* ---- configurations (TU_CONFIGS) ------------------------------------------ */

#if defined(__SANITIZE_THREAD__)
enum { TSAN = 1 };
#else
enum { TSAN = 0 };
#endif
static bool model_on(int mi) {
    return !TSAN || mi == 0 || mi == 9 || mi == 10;
}

/* Every model x configuration (`all`) or three configurations per model,
 * under the kernel set in force. */
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
        plan_ids(&p, info.vocab_size, 777u + (uint32_t)mi);
        reference(e, &p);
        /* the same engine, merged: each routed expert once per layer for all four */
        char what[256];
        snprintf(what, sizeof what, "%s/%s mmap exact, kernels %s", TU_CHECKPOINTS[mi][0],
                 TU_CHECKPOINTS[mi][1], e0_kernels_name());
        const uint64_t merged = run_merged(e, &p, 0, what);
        if (merged >= p.solo_calls)
            fail_msg("%s: the merged pass computed %llu expert products, the four passes alone "
                     "%llu",
                     what, (unsigned long long)merged, (unsigned long long)p.solo_calls);
        e0_engine_free(e);
        for (int ci = 0; ci < TU_NCONFIGS; ci++) {
            if (!all && ci % 3 != mi % 3) continue;
            const int threads = 1 + (ci + mi) % 2;
            snprintf(what, sizeof what, "%s/%s %s, kernels %s, %d thread%s", TU_CHECKPOINTS[mi][0],
                     TU_CHECKPOINTS[mi][1], TU_CONFIGS[ci].name, e0_kernels_name(), threads,
                     threads > 1 ? "s" : "");
            tu_apply_config(&o, &TU_CONFIGS[ci], threads);
            e = open_model(mi, &o);
            run_merged(e, &p, (ci + mi) % 3, what);
            run_merged(e, &p, (ci + mi + 1) % 3, what);
            e0_engine_free(e);
            runs++;
        }
        plan_free(&p);
    }
    printf("  %ld configurations under %s: every session of a merged prefill pass bit-identical "
           "to its pass alone\n",
           runs, e0_kernels_name());
}

static void test_mprefill_default_kernels(void **state) {
    (void)state;
    matrix(true);
}

static void test_mprefill_exact_kernels(void **state) {
    (void)state;
    assert_int_equal(e0_set_kernels(E0_KERNELS_EXACT), 0);
    matrix(false);
    assert_int_equal(e0_set_kernels(E0_KERNELS_AUTO), 0);
}

/* ---- invalid passes ----------------------------------------------------- */

static void test_mprefill_invalid(void **state) {
    (void)state;
    char err[E0_ERR_MAX];
    e0_engine_opts o;
    e0_engine_opts_default(&o);
    o.io = E0_IO_MMAP;
    o.n_threads = 1;
    e0_engine *e = open_model(0, &o);
    e0_session *a = new_session(e), *b = new_session(e), *c = new_session(e);
    int32_t ids[48] = {0};
    for (int i = 0; i < 48; i++)
        ids[i] = i + 1;
    const int32_t *pi[3] = {ids, ids, ids};
    size_t n[3] = {3, 2, 1};
    e0_pass p;
    e0_session *dup[2] = {a, a};
    assert_int_equal(pass_begin(&p, dup, pi, n, 2, err), E0_EINVAL);
    assert_non_null(strstr(err, "same session"));
    e0_session *ab[3] = {a, b, c};
    size_t big[2] = {30, 20}; /* 50 > a's n_batch of 40 */
    assert_int_equal(pass_begin(&p, ab, pi, big, 2, err), E0_EINVAL);
    assert_non_null(strstr(err, "n_batch"));
    size_t zero[2] = {2, 0};
    assert_int_equal(pass_begin(&p, ab, pi, zero, 2, err), E0_EINVAL);
    const int32_t bad[1] = {-3};
    const int32_t *pb[2] = {ids, bad};
    size_t one[2] = {1, 1};
    assert_int_equal(pass_begin(&p, ab, pb, one, 2, err), E0_ERANGE);
    assert_non_null(strstr(err, "session 1"));
    assert_int_equal(pass_begin(&p, ab, pi, n, 0, err), E0_EINVAL);
    assert_int_equal(e0_session_pos(a), 0); /* nothing changed */
    assert_int_equal(e0_session_pos(b), 0);
    assert_int_equal(session_part_layer(a), -1);
    /* a paused pass over a and b: every other evaluation of them is refused */
    assert_int_equal(pass_begin(&p, ab, pi, n, 2, err), 0);
    bool done;
    float *none[2] = {NULL, NULL};
    assert_int_equal(pass_step(&p, 1, none, &done, err), 0);
    assert_false(done);
    assert_int_equal(e0_session_eval(a, ids, 1, E0_LOGITS_NONE, NULL, err), E0_EINVAL);
    e0_session *bc[2] = {b, c};
    assert_int_equal(e0_session_eval_batch(bc, ids, 2, NULL, err), E0_EINVAL);
    assert_int_equal(session_eval_part(b, ids, 1, 1, NULL, &done, err), E0_EINVAL);
    assert_non_null(strstr(err, "merged"));
    e0_pass q;
    assert_int_equal(pass_begin(&q, bc, pi, n, 2, err), E0_EINVAL);
    e0_snapshot *snap;
    assert_int_equal(e0_session_snapshot(a, &snap, err), E0_EINVAL);
    /* c is free: it evaluates while the pass is paused */
    assert_int_equal(e0_session_eval(c, ids, 4, E0_LOGITS_NONE, NULL, err), 0);
    /* paused inside layer 1 (its mixer run), then a step of one layer ends that layer */
    assert_int_equal(pass_step_halves(&p, 1, none, &done, err), 0);
    assert_int_equal(session_part_layer(a), 1);
    assert_int_equal(p.half, 1);
    assert_int_equal(pass_step(&p, 1, none, &done, err), 0);
    assert_true(done || (p.layer == 2 && p.half == 0));
    while (!done)
        assert_int_equal(pass_step(&p, 1, none, &done, err), 0);
    assert_int_equal(pass_step(&p, 1, none, &done, err), E0_EINVAL); /* over */
    assert_int_equal(e0_session_pos(a), 3);
    assert_int_equal(e0_session_pos(b), 2);
    size_t hn;
    const int32_t *h = e0_session_history(b, &hn);
    assert_int_equal(hn, 2);
    assert_int_equal(h[1], 2);
    /* free again: a one-session pass through session_eval_part */
    assert_int_equal(session_eval_part(a, ids, 2, 0, NULL, &done, err), 0);
    assert_true(done);
    assert_int_equal(e0_session_pos(a), 5);
    e0_session_free(a);
    e0_session_free(b);
    e0_session_free(c);
    e0_engine_free(e);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mprefill_invalid),
        cmocka_unit_test(test_mprefill_default_kernels),
        cmocka_unit_test(test_mprefill_exact_kernels),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
