/* Speculative decoding with the MTP block (model/mtp.c, edge0.h
 * e0_session_draft / _verify / _rollback), on tests/data/mtp: the Hugging
 * Face folder and the GGUF files llama.cpp's converter made of it.
 *  - the block's logits against the PyTorch reference (tools/train/
 *    qwen35.py, tests/data/mtp/mtp_ref.safetensors), drafted step by step
 *    and after prefills of every length (--kernels exact, 1e-4 rel L2);
 *  - a verify pass of two ids gives each the bits two one-token steps give,
 *    and a rollback leaves the session as one step of the first leaves it
 *    (its next logits, bit for bit), in the default and the exact kernels;
 *  - the options: --mtp on without a block, on a GPU engine (CPU-only).
 */
#include "srvutil.h"
#include "testutil.h"

#include "edge0.h"
#include "model/model.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { V = 1024 };

static const char *MODELS[] = {"tests/data/mtp/hf", "tests/data/mtp/model-F32.gguf",
                               "tests/data/mtp/model-Q8_0.gguf", "tests/data/mtp/model-Q4_0.gguf"};
enum { NMODELS = sizeof MODELS / sizeof *MODELS };

static e0_engine *open_mtp(const char *path, e0_mtp_mode mode) {
    char err[E0_ERR_MAX];
    e0_engine_opts o;
    e0_engine_opts_default(&o);
    o.n_threads = 2;
    o.mtp = mode;
    e0_engine *e;
    if (e0_engine_open(&e, path, &o, err)) fail_msg("%s: %s", path, err);
    return e;
}

static e0_session *new_session(e0_engine *e, int n_ctx) {
    char err[E0_ERR_MAX];
    e0_session_opts so;
    e0_session_opts_default(&so);
    so.n_ctx = n_ctx;
    e0_session *s;
    if (e0_session_new(e, &so, &s, err)) fail_msg("%s", err);
    return s;
}

#define CHECK(call)                                                                                \
    do {                                                                                           \
        char err_[E0_ERR_MAX];                                                                     \
        if ((call) != 0) fail_msg("%s: %s", #call, err_);                                        \
    } while (0)
#define ERR err_

/* ---- the block's logits against the reference ------------------------------ */

/* MTP logits at positions 0..N-2 of the reference prompt from one engine:
 * step by step (eval one id, draft the next), and, for every t, after a
 * prefill of ids[0..t] in one evaluation (the block's catch-up over the
 * prompt); the worst rel L2 of each form into *step, *prefill. */
static void mtp_vs_ref(const char *path, const int32_t *ids, size_t N, const float *ref, double *step,
                       double *prefill) {
    e0_engine *e = open_mtp(path, E0_MTP_ON);
    e0_model_info info;
    e0_engine_info(e, &info);
    assert_int_equal(info.mtp_on, 1);
    assert_int_equal(info.vocab_size, V);
    e0_session *s = new_session(e, 64);
    float *lg = malloc(V * sizeof *lg), *q = malloc(V * sizeof *q);
    *step = *prefill = 0;
    for (size_t t = 0; t + 1 < N; t++) {
        CHECK(e0_session_eval(s, ids + t, 1, E0_LOGITS_LAST, lg, ERR));
        CHECK(e0_session_draft(s, ids[t + 1], q, ERR));
        const double r = tu_rel_l2(q, ref + t * V, V);
        *step = r > *step ? r : *step;
    }
    for (size_t t = 0; t + 1 < N; t++) {
        e0_session_reset(s);
        CHECK(e0_session_eval(s, ids, t + 1, E0_LOGITS_LAST, lg, ERR));
        CHECK(e0_session_draft(s, ids[t + 1], q, ERR));
        const double r = tu_rel_l2(q, ref + t * V, V);
        *prefill = r > *prefill ? r : *prefill;
    }
    free(lg), free(q);
    e0_session_free(s);
    e0_engine_free(e);
}

static void test_mtp_reference(void **state) {
    (void)state;
    assert_int_equal(e0_set_kernels(E0_KERNELS_EXACT), 0);
    char err[E0_ERR_MAX];
    st_set *g;
    if (st_set_open_file(&g, "tests/data/mtp/mtp_ref.safetensors", err)) fail_msg("%s", err);
    size_t N;
    const int32_t *ids = tu_i32(g, "input_ids", &N);
    const float *ref = tu_f32(g, "mtp_logits", (N - 1) * V);
    for (int i = 0; i < 2; i++) { /* the folder and the F32 file: the reference's own weights */
        double step, prefill;
        mtp_vs_ref(MODELS[i], ids, N, ref, &step, &prefill);
        printf("  %s: MTP logits vs PyTorch, %zu positions: worst rel L2 %.3g step by step, %.3g after "
               "prefills\n",
               MODELS[i], N - 1, step, prefill);
        assert_true(step <= 1e-4);
        assert_true(prefill <= 1e-4);
    }
    /* an mlx folder (8-bit) with the block kept as the HF source has it
     * (convert --keep-mtp): its norms zero-centred, its experts per expert,
     * beside stacked 8-bit main layers; the quantization moves the logits */
    char *dir = tu_tmpdir(), cmd[16384], mlx[4200];
    snprintf(mlx, sizeof mlx, "%s/mlx", dir);
    snprintf(cmd, sizeof cmd, "%s convert %s %s --keep-mtp --bits 8 --group-size 32 > %s/convert.txt 2>&1", tu_bin(),
             MODELS[0], mlx, dir);
    assert_int_equal(tu_run(cmd), 0);
    double step, prefill;
    mtp_vs_ref(mlx, ids, N, ref, &step, &prefill);
    printf("  mlx 8-bit with the block kept (convert --keep-mtp): worst rel L2 %.3g step by step, %.3g after "
           "prefills\n",
           step, prefill);
    assert_true(step <= 3e-2 && prefill <= 3e-2);
    tu_rmtree(dir);
    free(dir);
    st_set_free(g);
    e0_set_kernels(E0_KERNELS_AUTO);
}

/* ---- verify passes: the bits of one-token steps ---------------------------- */

/* A pseudo-random id in [0, V - 3) (ordinary tokens). */
static int32_t rnd_id(uint64_t *h) {
    *h ^= *h >> 31, *h *= 0xbf58476d1ce4e5b9ull, *h ^= *h >> 29;
    return (int32_t)(*h % (V - 3));
}

/* On one model: a prompt, then rounds of: draft from the next id x, verify
 * [x, d] in s, step x (and d when accepted) one at a time in a twin
 * session, compare the rows bit for bit; a rejected d is rolled back. d is
 * in turn the twin's own next id (accepted), the draft's argmax (on these
 * random MTP weights nearly always rejected) and a random id. Returns the
 * rows that differ; the rejections into *rejects. */
static int verify_rounds(e0_engine *e, uint64_t seed, int rounds, int *rejects) {
    e0_session *s = new_session(e, 256), *r = new_session(e, 256);
    float *lv = malloc(2 * V * sizeof *lv), *l1 = malloc(V * sizeof *l1), *l2 = malloc(V * sizeof *l2),
          *q = malloc(V * sizeof *q);
    uint64_t h = seed;
    int32_t prompt[12];
    for (int i = 0; i < 12; i++)
        prompt[i] = rnd_id(&h);
    CHECK(e0_session_eval(s, prompt, 12, E0_LOGITS_LAST, l1, ERR));
    CHECK(e0_session_eval(r, prompt, 12, E0_LOGITS_LAST, l2, ERR));
    assert_memory_equal(l1, l2, V * sizeof *l1);
    int32_t x = (int32_t)e0_argmax(l1, V);
    int bad = 0;
    for (int k = 0; k < rounds; k++) {
        CHECK(e0_session_draft(s, x, q, ERR));
        CHECK(e0_session_eval(r, &x, 1, E0_LOGITS_LAST, l1, ERR));
        const int32_t a = (int32_t)e0_argmax(l1, V);
        const int32_t d = k % 3 == 0 ? a : k % 3 == 1 ? (int32_t)e0_argmax(q, V) : rnd_id(&h);
        const int32_t two[2] = {x, d};
        CHECK(e0_session_verify(s, two, lv, ERR));
        bad += memcmp(lv, l1, V * sizeof *l1) != 0;
        if (a == d) { /* accepted: the twin steps d too */
            CHECK(e0_session_eval(r, &d, 1, E0_LOGITS_LAST, l2, ERR));
            bad += memcmp(lv + V, l2, V * sizeof *l2) != 0;
            x = (int32_t)e0_argmax(l2, V);
        } else { /* rejected: s is back at the twin's position */
            CHECK(e0_session_rollback(s, true, ERR));
            ++*rejects;
            x = a;
        }
        assert_int_equal(e0_session_pos(s), e0_session_pos(r));
    }
    /* after it all, one more step of each: the states are the same */
    CHECK(e0_session_eval(s, &x, 1, E0_LOGITS_LAST, l1, ERR));
    CHECK(e0_session_eval(r, &x, 1, E0_LOGITS_LAST, l2, ERR));
    bad += memcmp(l1, l2, V * sizeof *l1) != 0;
    free(lv), free(l1), free(l2), free(q);
    e0_session_free(s);
    e0_session_free(r);
    return bad;
}

/* The default kernels (16-bit panel arithmetic for 4-bit weights at every
 * T), the exact ones, and Q8 (whose arithmetic changes from K_PANEL_MIN_T
 * tokens: a verify pass's two stay below). edge0's DeltaNet has one form,
 * the recurrent one, token by token in every pass. */
static void test_verify_bits(void **state) {
    (void)state;
    const e0_kernels sets[] = {E0_KERNELS_AUTO, E0_KERNELS_EXACT, E0_KERNELS_AVX512_Q8};
    for (size_t k = 0; k < sizeof sets / sizeof *sets; k++) {
        if (!e0_kernels_supported(sets[k])) continue;
        assert_int_equal(e0_set_kernels(sets[k]), 0);
        for (int i = 0; i < NMODELS; i++) {
            e0_engine *e = open_mtp(MODELS[i], E0_MTP_ON);
            int rejects = 0, bad = 0;
            for (uint64_t seed = 1; seed <= 3; seed++)
                bad += verify_rounds(e, seed * 0x9e3779b97f4a7c15ull, 24, &rejects);
            printf("  %s, kernels %s: 72 verify passes (%d rejected): %d rows differ from one-token "
                   "steps\n",
                   MODELS[i], e0_kernels_name(), rejects, bad);
            assert_int_equal(bad, 0);
            assert_true(rejects > 0 && rejects < 72);
            e0_engine_free(e);
        }
    }
    e0_set_kernels(E0_KERNELS_AUTO);
}

/* ---- the block's experts through every streaming path ---------------------- */

/* A fixed script of evaluations, drafts and verify passes (with rollbacks)
 * on one engine: every draft's and verify pass's logits, in order. */
static float *script(e0_engine *e, int variant, size_t *n_out) {
    e0_session *s = new_session(e, 128);
    const size_t rows = 1 + 3 * 16;
    float *out = malloc(rows * 2 * V * sizeof *out), *lg = out;
    int32_t prompt[9] = {3 + variant, 141, 59, 265, 358, 979, 323, 846, 264};
    CHECK(e0_session_eval(s, prompt, 9, E0_LOGITS_LAST, lg, ERR));
    int32_t x = (int32_t)e0_argmax(lg, V);
    lg += V;
    for (int k = 0; k < 16; k++) {
        CHECK(e0_session_draft(s, x, lg, ERR));
        const int32_t d = k % 2 ? (int32_t)e0_argmax(lg, V) : (int32_t)(k * 37 % (V - 3));
        lg += V;
        const int32_t two[2] = {x, d};
        CHECK(e0_session_verify(s, two, lg, ERR));
        x = (int32_t)e0_argmax(lg, V);
        if (k % 4 == 3) { /* keep both: the next id from the second row */
            x = (int32_t)e0_argmax(lg + V, V);
        } else {
            CHECK(e0_session_rollback(s, true, ERR));
        }
        lg += 2 * V;
    }
    *n_out = (size_t)(lg - out);
    e0_session_free(s);
    return out;
}

/* script() of variants 0, 1 and 2 together, each pass one
 * e0_session_verify_batch of the three (variant 2 evaluates its id alone
 * every other pass: counts 2, 2, 1), drafts and decisions as script()'s:
 * each variant's logits, bit for bit those of script() alone (verify rows,
 * kept and rolled-back seconds alike). */
static void batch_script(e0_engine *e) {
    enum { NS = 3 };
    e0_session *s[NS];
    float *out[NS], *lg[NS];
    int32_t x[NS];
    for (int v = 0; v < NS; v++) {
        s[v] = new_session(e, 128);
        lg[v] = out[v] = malloc((1 + 3 * 16) * 2 * V * sizeof *out[v]);
        int32_t prompt[9] = {3 + v, 141, 59, 265, 358, 979, 323, 846, 264};
        CHECK(e0_session_eval(s[v], prompt, 9, E0_LOGITS_LAST, lg[v], ERR));
        x[v] = (int32_t)e0_argmax(lg[v], V);
        lg[v] += V;
    }
    static float rows[2 * NS * V];
    for (int k = 0; k < 16; k++) {
        int32_t ids[2 * NS], cnt[NS];
        int nid = 0;
        for (int v = 0; v < NS; v++) {
            cnt[v] = v == 2 && k % 2 ? 1 : 2;
            ids[nid++] = x[v];
            if (cnt[v] == 1) continue;
            CHECK(e0_session_draft(s[v], x[v], lg[v], ERR));
            ids[nid++] = k % 2 ? (int32_t)e0_argmax(lg[v], V) : (int32_t)(k * 37 % (V - 3));
            lg[v] += V;
        }
        CHECK(e0_session_verify_batch(s, ids, cnt, NS, rows, ERR));
        for (int v = 0, r = 0; v < NS; r += cnt[v++]) {
            memcpy(lg[v], rows + (size_t)r * V, (size_t)cnt[v] * V * sizeof *rows);
            x[v] = (int32_t)e0_argmax(lg[v], V);
            if (cnt[v] == 2) {
                if (k % 4 == 3) x[v] = (int32_t)e0_argmax(lg[v] + V, V);
                else CHECK(e0_session_rollback(s[v], true, ERR));
            }
            lg[v] += (size_t)cnt[v] * V;
        }
    }
    for (int v = 0; v < 2; v++) { /* variant 2's script differs: compared step by step below */
        size_t n;
        float *want = script(e, v, &n);
        assert_int_equal((size_t)(lg[v] - out[v]), n);
        if (memcmp(want, out[v], n * sizeof *want)) fail_msg("variant %d: the batched passes differ from script()", v);
        free(want);
    }
    /* variant 2 alone with the same counts: a verify pass, then a plain step, in turn */
    e0_session *a = new_session(e, 128);
    float *one = malloc((1 + 3 * 16) * 2 * V * sizeof *one), *l = one;
    int32_t prompt[9] = {5, 141, 59, 265, 358, 979, 323, 846, 264};
    CHECK(e0_session_eval(a, prompt, 9, E0_LOGITS_LAST, l, ERR));
    int32_t y = (int32_t)e0_argmax(l, V);
    l += V;
    for (int k = 0; k < 16; k++) {
        if (k % 2) {
            CHECK(e0_session_eval(a, &y, 1, E0_LOGITS_LAST, l, ERR));
            y = (int32_t)e0_argmax(l, V);
            l += V;
            continue;
        }
        CHECK(e0_session_draft(a, y, l, ERR));
        const int32_t two[2] = {y, (int32_t)(k * 37 % (V - 3))};
        l += V;
        CHECK(e0_session_verify(a, two, l, ERR));
        y = (int32_t)e0_argmax(l, V);
        if (k % 4 == 3) y = (int32_t)e0_argmax(l + V, V);
        else CHECK(e0_session_rollback(a, true, ERR));
        l += 2 * V;
    }
    assert_int_equal(l - one, lg[2] - out[2]);
    if (memcmp(one, out[2], (size_t)(l - one) * sizeof *one)) fail_msg("variant 2: the batched passes differ");
    free(one);
    e0_session_free(a);
    for (int v = 0; v < NS; v++) {
        free(out[v]);
        e0_session_free(s[v]);
    }
}

/* The block's experts are an extra layer of the expert stream: every path
 * and I/O mode of the engine-level tests gives the drafts and verify
 * passes of the exact path, bit for bit (the Q4_0 file: 4-bit experts,
 * repacked under --io load). */
static void test_mtp_paths(void **state) {
    (void)state;
    char err[E0_ERR_MAX];
    size_t n0 = 0;
    float *ref = NULL;
    for (int c = 0; c < TU_NCONFIGS; c++) {
        e0_engine_opts o;
        tu_apply_config(&o, &TU_CONFIGS[c], 2);
        o.mtp = E0_MTP_ON;
        e0_engine *e;
        if (e0_engine_open(&e, MODELS[3], &o, err)) fail_msg("%s: %s", TU_CONFIGS[c].name, err);
        size_t n;
        float *got = script(e, 0, &n);
        batch_script(e); /* verify passes batched: the same bits */
        e0_stats st;
        e0_engine_stats(e, &st);
        if (!ref) {
            ref = got, n0 = n;
        } else {
            assert_int_equal(n, n0);
            if (memcmp(got, ref, n * sizeof *got))
                fail_msg("%s: the drafts and verify passes differ from the exact path's", TU_CONFIGS[c].name);
            free(got);
        }
        printf("  %-30s bit-identical; %llu drafts, %llu rejected, %llu expert calls\n", TU_CONFIGS[c].name,
               (unsigned long long)st.mtp_drafts, (unsigned long long)st.mtp_rejected,
               (unsigned long long)st.expert_calls);
        e0_engine_free(e);
    }
    free(ref);
}

/* ---- generation: greedy with drafts is greedy without -------------------- */

typedef struct {
    int32_t ids[256];
    int n;
} tok_list;

static int collect(void *user, const e0_token_info *tok, const char *text, size_t len) {
    (void)text, (void)len;
    tok_list *l = user;
    if (tok && l->n < 256) l->ids[l->n++] = tok->id;
    return 0;
}

/* e0_generate_tokens of `max` tokens from `prompt` (text), greedy, on e;
 * the tokens into *out, the session's final history into hist (its count returned). */
static size_t generate(e0_engine *e, const e0_text *t, const char *prompt, int max, tok_list *out,
                       int32_t *hist, const e0_sample_opts *so_in) {
    char err[E0_ERR_MAX];
    e0_session *s = new_session(e, 512);
    int32_t *ids;
    size_t n;
    if (e0_text_encode(t, prompt, strlen(prompt), &ids, &n, err)) fail_msg("%s", err);
    e0_sample_opts so;
    if (so_in) {
        so = *so_in;
    } else {
        e0_sample_opts_default(&so);
        so.temperature = 0;
    }
    so.max_tokens = max;
    e0_gen_result r;
    out->n = 0;
    if (e0_generate_tokens(s, t, ids, n, &so, collect, out, &r, err)) fail_msg("%s", err);
    size_t nh;
    const int32_t *h = e0_session_history(s, &nh);
    memcpy(hist, h, nh * sizeof *h);
    free(ids);
    e0_session_free(s);
    return nh;
}

static const char *PROMPTS[] = {
    "The quick brown fox",
    "<|im_start|>user\nWrite a poem about the sea.<|im_end|>\n<|im_start|>assistant\n",
    "1, 2, 3, 4, 5,",
    "In the beginning",
};

/* Every file with the block and the folder: 64 greedy tokens of several
 * prompts with drafts (every pass verified, most drafts rejected on these
 * random MTP weights) are the tokens and the session history of the same
 * engine options without the block, and repetition penalties too. */
static void test_greedy_same(void **state) {
    (void)state;
    char err[E0_ERR_MAX];
    for (int i = 0; i < NMODELS; i++) {
        e0_text *t;
        if (e0_text_open(&t, MODELS[i], err)) fail_msg("%s", err);
        e0_engine *on = open_mtp(MODELS[i], E0_MTP_ON), *off = open_mtp(MODELS[i], E0_MTP_OFF);
        uint64_t drafts = 0, rejected = 0;
        for (size_t p = 0; p < sizeof PROMPTS / sizeof *PROMPTS; p++)
            for (int pen = 0; pen < 2; pen++) {
                e0_sample_opts so;
                e0_sample_opts_default(&so);
                so.temperature = 0;
                so.repeat_penalty = pen ? 1.3f : 1.0f;
                static tok_list a, b;
                static int32_t ha[600], hb[600];
                e0_engine_stats_reset(on);
                const size_t na = generate(on, t, PROMPTS[p], 64, &a, ha, &so);
                const size_t nb = generate(off, t, PROMPTS[p], 64, &b, hb, &so);
                e0_stats st;
                e0_engine_stats(on, &st);
                drafts += st.mtp_drafts, rejected += st.mtp_rejected;
                assert_true(st.mtp_drafts > 0);
                assert_int_equal(a.n, b.n);
                assert_memory_equal(a.ids, b.ids, (size_t)a.n * sizeof *a.ids);
                assert_int_equal(na, nb);
                assert_memory_equal(ha, hb, na * sizeof *ha);
            }
        printf("  %s: 8 greedy generations of 64 tokens identical with and without drafts (%llu drafts, "
               "%llu rejected)\n",
               MODELS[i], (unsigned long long)drafts, (unsigned long long)rejected);
        e0_engine_free(on);
        e0_engine_free(off);
        e0_text_free(t);
    }
}

/* A server's decode (src/server/engine.c decode_step): three greedy
 * generations stepped together, each pass one e0_session_verify_batch of
 * every generation's id and, where its session drafts, the draft after it
 * (the third session keeps no MTP state: one id each pass), drafts run one
 * by one before it (e0_gen_pass_ids), the rows handed back by
 * e0_gen_pass_done. Each generation's tokens and history are those of the
 * engine without the block generating it alone. */
static void test_verify_batch(void **state) {
    (void)state;
    char err[E0_ERR_MAX];
    enum { NG = 3, MAX = 48 };
    for (int i = 0; i < NMODELS; i++) {
        e0_text *t;
        if (e0_text_open(&t, MODELS[i], err)) fail_msg("%s", err);
        e0_engine *on = open_mtp(MODELS[i], E0_MTP_ON), *off = open_mtp(MODELS[i], E0_MTP_OFF);
        e0_sample_opts so;
        e0_sample_opts_default(&so);
        so.temperature = 0;
        so.max_tokens = MAX;
        e0_session *ss[NG];
        e0_gen *g[NG];
        static tok_list got[NG];
        int32_t *prompt[NG];
        bool live[NG];
        for (int k = 0; k < NG; k++) {
            e0_session_opts o;
            e0_session_opts_default(&o);
            o.n_ctx = 512;
            o.mtp = k < 2;
            if (e0_session_new(on, &o, &ss[k], err)) fail_msg("%s", err);
            size_t n;
            if (e0_text_encode(t, PROMPTS[k], strlen(PROMPTS[k]), &prompt[k], &n, err)) fail_msg("%s", err);
            got[k].n = 0;
            if (e0_gen_begin(&g[k], ss[k], t, prompt[k], n, &so, collect, &got[k], err)) fail_msg("%s", err);
            if (e0_gen_prefill(g[k], 0, err)) fail_msg("%s", err);
            int32_t next;
            live[k] = e0_gen_step(g[k], &next, err) == E0_GEN_EVAL;
        }
        e0_engine_stats_reset(on);
        int passes = 0, two = 0;
        for (;;) {
            e0_session *ps[NG];
            int32_t ids[2 * NG], cnt[NG];
            int who[NG], np = 0, nid = 0;
            for (int k = 0; k < NG; k++) {
                if (!live[k]) continue;
                cnt[np] = e0_gen_pass_ids(g[k], ids + nid, err);
                if (cnt[np] < 1) fail_msg("generation %d: %s", k, err);
                assert_true(k < 2 || cnt[np] == 1);
                two += cnt[np] == 2;
                ps[np] = ss[k];
                nid += cnt[np];
                who[np++] = k;
            }
            if (!np) break;
            static float lg[2 * NG * V];
            if (e0_session_verify_batch(ps, ids, cnt, (size_t)np, lg, err)) fail_msg("%s", err);
            passes++;
            for (int j = 0, row = 0; j < np; row += cnt[j++]) {
                int32_t next;
                const int rc = e0_gen_pass_done(g[who[j]], lg + (size_t)row * V, &next, err);
                if (rc < 0) fail_msg("%s", err);
                live[who[j]] = rc == E0_GEN_EVAL;
            }
        }
        e0_stats st;
        e0_engine_stats(on, &st);
        for (int k = 0; k < NG; k++) {
            static tok_list want;
            static int32_t hw[600];
            const size_t nw = generate(off, t, PROMPTS[k], MAX, &want, hw, &so);
            assert_int_equal(got[k].n, want.n);
            assert_memory_equal(got[k].ids, want.ids, (size_t)want.n * sizeof *want.ids);
            size_t nh;
            const int32_t *h = e0_session_history(ss[k], &nh);
            assert_int_equal(nh, nw);
            assert_memory_equal(h, hw, nw * sizeof *h);
            e0_gen_free(g[k]);
            e0_session_free(ss[k]);
            free(prompt[k]);
        }
        assert_true(st.mtp_drafts > 0 && two > 0);
        printf("  %s: 3 greedy generations of %d tokens in %d batched passes (%d with a draft; %llu rejected) "
               "are those without the block\n",
               MODELS[i], MAX, passes, two, (unsigned long long)st.mtp_rejected);
        e0_engine_free(on);
        e0_engine_free(off);
        e0_text_free(t);
    }
}

/* --mtp-vocab: a draft over the first 64 ids scores them as the full
 * head does, bit for bit, the others -inf (never drafted), and greedy
 * generation with such drafts is still the generation without the block. */
static void test_mtp_vocab(void **state) {
    (void)state;
    char err[E0_ERR_MAX];
    e0_engine *eng[2];
    for (int k = 0; k < 2; k++) {
        e0_engine_opts o;
        e0_engine_opts_default(&o);
        o.n_threads = 2;
        o.mtp = E0_MTP_ON;
        o.mtp_vocab = k ? 64 : -1;
        if (e0_engine_open(&eng[k], MODELS[2], &o, err)) fail_msg("%s", err);
    }
    static float lg[2][V], q[2][V];
    const int32_t prompt[5] = {3, 141, 59, 265, 358};
    for (int k = 0; k < 2; k++) {
        e0_session *s = new_session(eng[k], 64);
        CHECK(e0_session_eval(s, prompt, 5, E0_LOGITS_LAST, lg[k], ERR));
        CHECK(e0_session_draft(s, (int32_t)e0_argmax(lg[k], V), q[k], ERR));
        e0_session_free(s);
    }
    assert_memory_equal(q[0], q[1], 64 * sizeof(float));
    for (int i = 64; i < V; i++) assert_true(isinf(q[1][i]) && q[1][i] < 0);
    e0_text *t;
    if (e0_text_open(&t, MODELS[2], err)) fail_msg("%s", err);
    e0_engine *off = open_mtp(MODELS[2], E0_MTP_OFF);
    static tok_list a, b;
    static int32_t ha[600], hb[600];
    e0_engine_stats_reset(eng[1]);
    const size_t na = generate(eng[1], t, PROMPTS[0], 48, &a, ha, NULL);
    const size_t nb = generate(off, t, PROMPTS[0], 48, &b, hb, NULL);
    e0_stats st;
    e0_engine_stats(eng[1], &st);
    assert_true(st.mtp_drafts > 0);
    assert_int_equal(a.n, b.n);
    assert_memory_equal(a.ids, b.ids, (size_t)a.n * sizeof *a.ids);
    assert_int_equal(na, nb);
    assert_memory_equal(ha, hb, na * sizeof *ha);
    printf("  drafts over 64 of 1024 ids: the full head's scores there; 48 greedy tokens (%llu drafts) those "
           "without the block\n",
           (unsigned long long)st.mtp_drafts);
    e0_engine_free(off);
    e0_text_free(t);
    e0_engine_free(eng[0]);
    e0_engine_free(eng[1]);
}

/* --mtp auto's decision (model.h e0_mtp_auto) from given pass times: one-id
 * passes of 10 ms (100 tok/s) and verify passes of 15 ms, in alternating
 * blocks of 4 (one-id passes first), 8 each: keeping
 * both ids (133 tok/s) turns drafting on, keeping 1.5 a pass (100 tok/s,
 * under the 5% margin) turns it off; on, 4 one-id passes follow each 16 verify passes and
 * a window of 32 verify passes that keep one id each (67 tok/s) turns it
 * off. Off, sessions stop drafting and the block stops catching up. Then on
 * the engine: greedy generation under auto is the generation without the
 * block, whatever it decided. */
static void auto_pass(e0_engine *e, bool drop) {
    if (mtp_auto_drafts(e)) {
        mtp_auto_verify(e, 0.015);
        if (drop) mtp_auto_dropped(e);
    } else {
        mtp_auto_plain(e, 0.010);
    }
}

/* MEASURE's 16 passes; drop_half: every other verify pass keeps one id */
static void auto_feed(e0_engine *e, bool drop_half) {
    for (int i = 0; i < 16; i++) {
        assert_int_equal(mtp_auto_drafts(e), (i / 4) % 2 == 1); /* blocks of 4, one-id first */
        auto_pass(e, drop_half && i % 2 == 1);
    }
}

static void test_mtp_auto(void **state) {
    (void)state;
    char err[E0_ERR_MAX];
    e0_engine *e = open_mtp(MODELS[2], E0_MTP_AUTO);
    assert_true(e->mtp_auto_on);
    auto_feed(e, false);
    assert_true(mtp_auto_drafts(e));
    assert_int_equal(e->mtp_auto.state, MTP_AUTO_ON);
    int plain = 0, passes = 0;
    while (e->mtp_auto.state == MTP_AUTO_ON && passes < 100) {
        plain += !mtp_auto_drafts(e);
        auto_pass(e, true);
        passes++;
        mtp_auto_drafts(e); /* decides at the window's end */
    }
    assert_int_equal(e->mtp_auto.state, MTP_AUTO_OFF);
    assert_int_equal(passes, 40); /* 32 drafting passes, 4 one-id passes after each 16 */
    assert_int_equal(plain, 8);
    assert_false(mtp_auto_drafts(e));
    e->mtp_auto = (e0_mtp_auto){.state = MTP_AUTO_MEASURE};
    auto_feed(e, true);
    assert_false(mtp_auto_drafts(e));
    assert_int_equal(e->mtp_auto.state, MTP_AUTO_OFF);
    assert_non_null(strstr(e0_engine_mtp_note(e), "not drafting"));
    /* off: a session neither drafts nor keeps the block's rows */
    e0_session *s = new_session(e, 64);
    static float lg[V];
    const int32_t p[3] = {3, 141, 59};
    CHECK(e0_session_eval(s, p, 3, E0_LOGITS_LAST, lg, ERR));
    assert_false(e0_session_can_draft(s));
    assert_false(s->mtp->sync);
    e0_session_free(s);
    e0_engine_free(e);
    /* greedy under auto, from a fresh engine (it measures, decides, drafts or not) */
    e0_text *t;
    if (e0_text_open(&t, MODELS[2], err)) fail_msg("%s", err);
    e0_engine *au = open_mtp(MODELS[2], E0_MTP_AUTO), *off = open_mtp(MODELS[2], E0_MTP_OFF);
    static tok_list a, b;
    static int32_t ha[600], hb[600];
    for (size_t q = 0; q < sizeof PROMPTS / sizeof *PROMPTS; q++) {
        const size_t na = generate(au, t, PROMPTS[q], 48, &a, ha, NULL);
        const size_t nb = generate(off, t, PROMPTS[q], 48, &b, hb, NULL);
        assert_int_equal(a.n, b.n);
        assert_memory_equal(a.ids, b.ids, (size_t)a.n * sizeof *a.ids);
        assert_int_equal(na, nb);
        assert_memory_equal(ha, hb, na * sizeof *ha);
    }
    printf("  decisions from given times: on, then off, and off; greedy under auto the same ids (%s)\n",
           e0_engine_mtp_note(au));
    e0_engine_free(au);
    e0_engine_free(off);
    e0_text_free(t);
}

/* ---- generation: sampling with drafts has the distribution without ------- */

/* P(X > x) for X chi-square with k degrees of freedom (Wilson-Hilferty). */
static double chi2_sf(double x, int k) {
    const double z = (cbrt(x / k) - (1 - 2.0 / (9 * k))) / sqrt(2.0 / (9 * k));
    return 0.5 * erfc(z / sqrt(2));
}

/* The two-sample (homogeneity) chi-square of counts a[K], b[K] (equal
 * totals), over the categories with any count; *dof gets theirs. */
static double chi2_two(const int *a, const int *b, int K, int *dof) {
    double x = 0;
    int used = 0;
    for (int i = 0; i < K; i++) {
        if (a[i] + b[i] == 0) continue;
        const double e = (a[i] + b[i]) / 2.0;
        x += (a[i] - e) * (a[i] - e) / e + (b[i] - e) * (b[i] - e) / e;
        used++;
    }
    *dof = used - 1;
    return x;
}

/* 2000 sampled continuations of 3 tokens (temperature 1.5, no filters:
 * p and the drafts' q overlap, so drafts are kept often and rejected
 * often) with drafts and without, seeds 1..2000 each: the second and third
 * tokens' distributions (ids mod 8, and the pair mod 4; an end of turn a
 * category of its own) are the same
 * (two-sample chi-square, p > 1e-3). The first token comes from the
 * prefill's logits before any draft: the same draws, the same ids. */
static void test_sampled_same(void **state) {
    (void)state;
    char err[E0_ERR_MAX];
    e0_text *t;
    if (e0_text_open(&t, MODELS[2], err)) fail_msg("%s", err);
    e0_engine *on = open_mtp(MODELS[2], E0_MTP_ON), *off = open_mtp(MODELS[2], E0_MTP_OFF);
    e0_session *son = new_session(on, 64), *soff = new_session(off, 64);
    int32_t *ids;
    size_t n;
    if (e0_text_encode(t, PROMPTS[0], strlen(PROMPTS[0]), &ids, &n, err)) fail_msg("%s", err);
    enum { N = 2000 };
    int c2[2][9] = {{0}}, c3[2][9] = {{0}}, c23[2][17] = {{0}}, same1 = 0;
    e0_engine_stats_reset(on);
    for (int k = 0; k < N; k++) {
        tok_list l[2];
        for (int arm = 0; arm < 2; arm++) {
            e0_sample_opts so;
            e0_sample_opts_default(&so);
            so.temperature = 1.5f, so.top_k = 0, so.top_p = 1, so.min_p = 0;
            so.seed = (uint64_t)k + 1;
            so.max_tokens = 3;
            e0_gen_result r;
            l[arm].n = 0;
            if (e0_generate_tokens(arm ? soff : son, t, ids, n, &so, collect, &l[arm], &r, err))
                fail_msg("%s", err);
            const int m = l[arm].n; /* fewer than 3: an end of turn drawn, a category of its own */
            c2[arm][m > 1 ? l[arm].ids[1] % 8 : 8]++;
            c3[arm][m > 2 ? l[arm].ids[2] % 8 : 8]++;
            c23[arm][m > 2 ? l[arm].ids[1] % 4 * 4 + l[arm].ids[2] % 4 : 16]++;
        }
        same1 += l[0].ids[0] == l[1].ids[0];
    }
    e0_stats st;
    e0_engine_stats(on, &st);
    int d2, d3, d23;
    const double x2 = chi2_two(c2[0], c2[1], 9, &d2), x3 = chi2_two(c3[0], c3[1], 9, &d3),
                 x23 = chi2_two(c23[0], c23[1], 17, &d23);
    printf("  %d continuations: %llu drafts, %llu kept (%.1f%%); chi-square token 2: %.2f (%d dof, p %.3g), "
           "token 3: %.2f (%d dof, p %.3g), the pair: %.2f (%d dof, p %.3g); first tokens equal %d/%d\n",
           N, (unsigned long long)st.mtp_drafts, (unsigned long long)(st.mtp_drafts - st.mtp_rejected),
           100.0 * (double)(st.mtp_drafts - st.mtp_rejected) / (double)st.mtp_drafts, x2, d2,
           chi2_sf(x2, d2), x3, d3, chi2_sf(x3, d3), x23, d23, chi2_sf(x23, d23), same1, N);
    assert_int_equal(same1, N);
    assert_true(st.mtp_drafts > N / 2 && st.mtp_rejected > 0 && st.mtp_rejected < st.mtp_drafts);
    assert_true(chi2_sf(x2, d2) > 1e-3 && chi2_sf(x3, d3) > 1e-3 && chi2_sf(x23, d23) > 1e-3);
    free(ids);
    e0_session_free(son);
    e0_session_free(soff);
    e0_engine_free(on);
    e0_engine_free(off);
    e0_text_free(t);
}

/* ---- snapshots carry the block's state --------------------------------------- */

/* Rounds of draft + verify (kept every third) from x in s: the drafts' and
 * verify passes' logits appended at *out. */
static void rounds(e0_session *s, int32_t *x, int n, float **out) {
    for (int k = 0; k < n; k++) {
        CHECK(e0_session_draft(s, *x, *out, ERR));
        const int32_t two[2] = {*x, (int32_t)e0_argmax(*out, V)};
        *out += V;
        CHECK(e0_session_verify(s, two, *out, ERR));
        if (k % 3 == 2) {
            *x = (int32_t)e0_argmax(*out + V, V);
        } else {
            *x = (int32_t)e0_argmax(*out, V);
            CHECK(e0_session_rollback(s, true, ERR));
        }
        *out += 2 * V;
    }
}

/* A session snapshotted after a prompt and drafting rounds (and right
 * after a draft) and restored into another: the restored one's drafts and
 * verify passes are the original's, bit for bit. A snapshot of a session
 * that does not draft restores into one that does as one that cannot. */
static void test_mtp_snapshot(void **state) {
    (void)state;
    char err[E0_ERR_MAX];
    e0_engine *e = open_mtp(MODELS[1], E0_MTP_ON);
    e0_session *a = new_session(e, 128), *b = new_session(e, 128);
    float *la = malloc(40 * 3 * V * sizeof *la), *lb = malloc(40 * 3 * V * sizeof *lb), *pa = la, *pb = lb;
    const int32_t prompt[6] = {11, 22, 33, 44, 55, 66};
    CHECK(e0_session_eval(a, prompt, 6, E0_LOGITS_LAST, pa, ERR));
    int32_t xa = (int32_t)e0_argmax(pa, V);
    rounds(a, &xa, 5, &pa);
    for (int form = 0; form < 2; form++) {
        float q[V];
        if (form == 1) CHECK(e0_session_draft(a, xa, q, ERR)); /* a draft not verified yet */
        e0_snapshot *snap;
        CHECK(e0_session_snapshot(a, &snap, ERR));
        CHECK(e0_session_restore(b, snap, ERR));
        e0_snapshot_free(snap);
        assert_true(e0_session_can_draft(b));
        int32_t xb = xa;
        float *sa = pa;
        pb = lb;
        rounds(a, &xa, 6, &pa);
        rounds(b, &xb, 6, &pb);
        assert_int_equal(pa - sa, pb - lb);
        assert_memory_equal(sa, lb, (size_t)(pb - lb) * sizeof *lb);
    }
    /* from a session that does not draft: no drafts after the restore */
    e0_session_opts so;
    e0_session_opts_default(&so);
    so.mtp = 0;
    e0_session *c;
    if (e0_session_new(e, &so, &c, err)) fail_msg("%s", err);
    CHECK(e0_session_eval(c, prompt, 6, E0_LOGITS_LAST, la, ERR));
    e0_snapshot *snap;
    CHECK(e0_session_snapshot(c, &snap, ERR));
    CHECK(e0_session_restore(b, snap, ERR));
    assert_false(e0_session_can_draft(b));
    e0_snapshot_free(snap);
    e0_session_reset(b);
    CHECK(e0_session_eval(b, prompt, 6, E0_LOGITS_LAST, la, ERR));
    assert_true(e0_session_can_draft(b));
    free(la), free(lb);
    e0_session_free(a), e0_session_free(b), e0_session_free(c);
    e0_engine_free(e);
}

/* ---- options ------------------------------------------------------------------ */

static void test_mtp_open(void **state) {
    (void)state;
    char err[E0_ERR_MAX];
    e0_engine_opts o;
    e0_engine_opts_default(&o);
    assert_int_equal(o.mtp, E0_MTP_OFF);
    o.mtp = E0_MTP_ON;
    e0_engine *e = NULL;
    /* no block: a clear error naming the file */
    assert_int_equal(e0_engine_open(&e, "tests/data/mtp/model-Q8_0-nomtp.gguf", &o, err), E0_ENOTFOUND);
    printf("  --mtp on, no block: %s\n", err);
    assert_non_null(strstr(err, "model-Q8_0-nomtp.gguf"));
    assert_non_null(strstr(err, "no multi-token-prediction (MTP) block"));
    /* auto: nothing without a block; with one, the block loaded (mtp_auto decides when to draft) */
    o.mtp = E0_MTP_AUTO;
    e0_model_info info;
    if (e0_engine_open(&e, "tests/data/mtp/model-Q8_0-nomtp.gguf", &o, err)) fail_msg("%s", err);
    e0_engine_info(e, &info);
    assert_int_equal(info.mtp_on, 0);
    e0_session *s = new_session(e, 64);
    assert_false(e0_session_can_draft(s));
    float q[V];
    assert_int_equal(e0_session_draft(s, 1, q, err), E0_EINVAL);
    e0_session_free(s);
    e0_engine_free(e);
    if (e0_engine_open(&e, "tests/data/mtp/model-Q8_0.gguf", &o, err)) fail_msg("%s", err);
    e0_engine_info(e, &info);
    assert_int_equal(info.mtp_on, 1);
    e0_engine_free(e);
    o.mtp = E0_MTP_ON;
    if (e0_engine_open(&e, "tests/data/mtp/model-Q8_0.gguf", &o, err)) fail_msg("%s", err);
    e0_engine_info(e, &info);
    assert_int_equal(info.mtp_on, 1);
    /* the block is the model's: its bytes counted, its tensors used */
    e0_engine_opts off;
    e0_engine_opts_default(&off);
    e0_engine *r;
    if (e0_engine_open(&r, "tests/data/mtp/model-Q8_0.gguf", &off, err)) fail_msg("%s", err);
    e0_model_info ri;
    e0_engine_info(r, &ri);
    assert_int_equal(ri.mtp_on, 0);
    assert_int_equal(info.weight_bytes, ri.weight_bytes + info.mtp_bytes);
    e0_engine_free(r);
    /* a session that does not draft (e0_session_opts.mtp 0) */
    e0_session_opts so;
    e0_session_opts_default(&so);
    so.mtp = 0;
    if (e0_session_new(e, &so, &s, err)) fail_msg("%s", err);
    const int32_t ids[3] = {5, 6, 7};
    CHECK(e0_session_eval(s, ids, 3, E0_LOGITS_LAST, q, ERR));
    assert_false(e0_session_can_draft(s));
    assert_int_equal(e0_session_draft(s, 8, q, err), E0_EINVAL);
    assert_int_equal(e0_session_rollback(s, true, err), E0_EINVAL);
    e0_session_free(s);
    e0_engine_free(e);
}

/* The command line: demo's answer (text and --ids) with --mtp on is the one
 * with --mtp off, --stats reports the drafts; bench reports them and forces
 * an acceptance with --mtp-accept (its ids checked against the run without
 * drafts); the errors name the option and the file. */
static void test_mtp_cli(void **state) {
    (void)state;
    char *dir = tu_tmpdir(), cmd[8192];
    const char *bin = tu_bin(), *q8 = MODELS[2];
    char script[8192], path[4200];
    snprintf(path, sizeof path, "%s/case.sh", dir);
    /* demo: everything before the timings line but the plan's notes (the memory available), with and without */
    snprintf(script, sizeof script,
             "set -e\n"
             "%s demo %s --prompt 'Tell me a story' --temp 0 --max-tokens 40 --mtp on --stats --threads 2 > %s/on.txt 2>&1\n"
             "%s demo %s --prompt 'Tell me a story' --temp 0 --max-tokens 40 --mtp off --threads 2 > %s/off.txt 2>&1\n"
             "grep -q 'MTP drafts: [0-9]* verified' %s/on.txt\n"
             "diff <(sed '/^edge0:/d; /^load /,$d' %s/on.txt) <(sed '/^edge0:/d; /^load /,$d' %s/off.txt)\n"
             "%s demo %s --ids 1,2,3,4,5 --max-tokens 30 --mtp on --threads 2 > %s/on.txt 2>&1\n"
             "%s demo %s --ids 1,2,3,4,5 --max-tokens 30 --mtp off --threads 2 > %s/off.txt 2>&1\n"
             "diff <(sed '/^edge0:/d; /^load /,$d' %s/on.txt) <(sed '/^edge0:/d; /^load /,$d' %s/off.txt)\n"
             "%s bench %s --prefill 16 --decode 48 --skip-cold --mtp-accept 0.8 --threads 2 > %s/bench.txt 2>&1\n"
             "grep -q 'forced), ' %s/bench.txt\n"
             "grep -q 'the same ids' %s/bench.txt\n"
             "%s bench %s --prefill 16 --decode 16 --skip-cold --json --mtp on --threads 2 2>/dev/null | grep -q "
             "decode_mtp_acceptance\n"
             "%s bench --help | grep -q mtp-accept\n",
             bin, q8, dir, bin, q8, dir, dir, dir, dir, bin, q8, dir, bin, q8, dir, dir, dir, bin, q8, dir, dir, dir,
             bin, q8, bin);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(script, f);
    fclose(f);
    snprintf(cmd, sizeof cmd, "bash %s", path);
    if (tu_run(cmd) != 0) fail_msg("the demo / bench case failed (see %s: on.txt, off.txt, bench.txt)", dir);
    struct {
        const char *args, *want;
        int rc;
    } bad[] = {
        {"demo tests/data/mtp/model-Q8_0-nomtp.gguf --mtp on --max-tokens 2",
         "model-Q8_0-nomtp.gguf has no multi-token-prediction (MTP) block", 1},
        {"demo tests/data/mtp/model-Q8_0.gguf --mtp maybe", "--mtp: 'maybe' is not auto, on or off", 2},
        {"bench tests/data/mtp/model-Q8_0.gguf --mtp off --mtp-accept 0.5", "--mtp-accept forces", 2},
        {"bench tests/data/mtp/model-Q8_0.gguf --mtp-accept 1.5", "is not a probability", 2},
        {"bench tests/data/mtp/model-Q8_0-nomtp.gguf --mtp-accept 0.5 --skip-cold",
         "model-Q8_0-nomtp.gguf has no multi-token-prediction (MTP) block", 1},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        snprintf(cmd, sizeof cmd, "%s %s > %s/err.txt 2>&1; test $? = %d && grep -qF -- \"%s\" %s/err.txt", bin,
                 bad[i].args, dir, bad[i].rc, bad[i].want, dir);
        if (tu_run(cmd) != 0) {
            snprintf(cmd, sizeof cmd, "cat %s/err.txt", dir);
            tu_run(cmd);
            fail_msg("edge0 %s: not exit %d with '%s'", bad[i].args, bad[i].rc, bad[i].want);
        }
    }
    tu_rmtree(dir);
    free(dir);
}

/* The trained demo model (assets/demo-model, whose drafts are mostly
 * right: 82% kept, greedy, over 40 prompts): greedy generations with
 * drafts are the generations without, and most drafts stand. */
static void test_mtp_demo_model(void **state) {
    (void)state;
    char err[E0_ERR_MAX];
    const char *dm = "assets/demo-model";
    e0_text *t;
    if (e0_text_open(&t, dm, err)) fail_msg("%s", err);
    e0_engine *on = open_mtp(dm, E0_MTP_ON), *off = open_mtp(dm, E0_MTP_OFF);
    static const char *ask[] = {"What does happiness mean?", "Tell me about rivers.", "Define kindness.",
                                "What is the opposite of hot?"};
    uint64_t drafts = 0, rejected = 0;
    for (size_t i = 0; i < sizeof ask / sizeof *ask; i++) {
        char prompt[256];
        snprintf(prompt, sizeof prompt, "<|im_start|>user\n%s<|im_end|>\n<|im_start|>assistant\n<think>\n", ask[i]);
        static tok_list a, b;
        static int32_t ha[600], hb[600];
        e0_engine_stats_reset(on);
        const size_t na = generate(on, t, prompt, 48, &a, ha, NULL);
        const size_t nb = generate(off, t, prompt, 48, &b, hb, NULL);
        e0_stats st;
        e0_engine_stats(on, &st);
        drafts += st.mtp_drafts, rejected += st.mtp_rejected;
        assert_int_equal(a.n, b.n);
        assert_memory_equal(a.ids, b.ids, (size_t)a.n * sizeof *a.ids);
        assert_int_equal(na, nb);
        assert_memory_equal(ha, hb, na * sizeof *ha);
    }
    printf("  %s: 4 greedy answers identical with and without drafts; %llu drafts, %llu kept\n", dm,
           (unsigned long long)drafts, (unsigned long long)(drafts - rejected));
    assert_true(drafts > 0 && (drafts - rejected) * 2 > drafts);
    e0_engine_free(on);
    e0_engine_free(off);
    e0_text_free(t);
}

/* ---- serve: drafts in batched decode passes -------------------------------- */

typedef struct {
    int port;
    const char *dir, *prompt;
    int status;
    char *resp;
} srv_req;

static void *post(void *arg) {
    srv_req *r = arg;
    char body[512];
    snprintf(body, sizeof body, "{\"prompt\":\"%s\",\"max_tokens\":40,\"temperature\":0,\"logprobs\":1}",
             r->prompt);
    r->status = su_http(r->port, r->dir, "POST", "/v1/completions", body, NULL, &r->resp);
    return NULL;
}

/* `edge0 serve --parallel 3 --mtp on`: three greedy requests admitted
 * together (--gather 3) decode in shared passes with drafts, and answer
 * what `--parallel 1 --mtp off` answers each alone, log-probabilities
 * too; /metrics counts the drafts. */
static void test_mtp_serve(void **state) {
    (void)state;
    char *dir = tu_tmpdir();
    su_server on, off;
    su_start(&on, dir, MODELS[2], "mtp-on", "--parallel 3 --gather 3 --mtp on --ctx 512 --cache-ram 0 --threads 2");
    su_start(&off, dir, MODELS[2], "mtp-off", "--parallel 1 --mtp off --ctx 512 --cache-ram 0 --threads 2");
    static const char *P[3] = {"The quick brown fox", "1, 2, 3, 4, 5,", "In the beginning"};
    srv_req r[3];
    pthread_t th[3];
    for (int i = 0; i < 3; i++) {
        r[i] = (srv_req){.port = on.port, .dir = dir, .prompt = P[i]};
        assert_int_equal(pthread_create(&th[i], NULL, post, &r[i]), 0);
    }
    for (int i = 0; i < 3; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < 3; i++) {
        if (r[i].status != 200) fail_msg("request %d: status %d: %s", i, r[i].status, r[i].resp);
        srv_req a = {.port = off.port, .dir = dir, .prompt = P[i]};
        post(&a);
        assert_int_equal(a.status, 200);
        char *got = su_completion_answer(r[i].resp), *want = su_completion_answer(a.resp);
        if (strcmp(got, want)) fail_msg("request %d with drafts, batched:\n%s\nwithout, alone:\n%s", i, got, want);
        free(got), free(want), free(a.resp), free(r[i].resp);
    }
    const double drafts = su_metric(on.port, dir, NULL, "edge0_mtp_drafts_total");
    const double three = su_metric(on.port, dir, NULL, "edge0_decode_passes_total{batch=\"3\"}");
    printf("  3 requests at once: %.0f drafts verified, %.0f decode passes of all three; the answers of "
           "--mtp off alone\n",
           drafts, three);
    assert_true(drafts > 0 && three > 0);
    su_stop(&on);
    su_stop(&off);
    tu_rmtree(dir);
    free(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mtp_reference),
        cmocka_unit_test(test_verify_bits),
        cmocka_unit_test(test_mtp_paths),
        cmocka_unit_test(test_greedy_same),
        cmocka_unit_test(test_verify_batch),
        cmocka_unit_test(test_mtp_vocab),
        cmocka_unit_test(test_mtp_auto),
        cmocka_unit_test(test_sampled_same),
        cmocka_unit_test(test_mtp_snapshot),
        cmocka_unit_test(test_mtp_open),
        cmocka_unit_test(test_mtp_cli),
        cmocka_unit_test(test_mtp_demo_model),
        cmocka_unit_test(test_mtp_serve),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
