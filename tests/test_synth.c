/* edge0 synth: the tiny shapes load in every family and format and evaluate
 * to finite logits; the output directory is atomic; the plans of the real
 * shapes have the released sizes; random weights keep activations O(1) and
 * route close to uniformly (and Zipf-like with --route-skew).
 *
 * Routing is read by a decode loop that runs the engine's own attention and
 * DeltaNet layers and recomputes the MoE block from the layer's weight views
 * (router, experts, shared expert); a check pins that loop to the engine's
 * logits, so the routing it records is the engine's.
 *
 * With E0_SYNTH_ROUTE_MODEL=DIR test_route_model measures a real checkpoint:
 * N greedy decode tokens (E0_SYNTH_ROUTE_TOKENS, default 64; fed
 * pseudo-random ids with E0_SYNTH_ROUTE_FED=1), distinct experts per layer
 * against the uniform expectation, also per window of E0_SYNTH_ROUTE_WINDOW
 * tokens, and the residual RMS of every layer. */
#include "testutil.h"

#include "edge0.h"
#include "model/forward.h"
#include "model/model.h"
#include "io/gguf.h"
#include "synth/synth.h"
#include "quant/ggml.h"
#include "quant/mat.h"
#include "util/file.h"
#include "util/num.h"

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

/* ---- helpers -------------------------------------------------------------- */

/* A fresh temp dir; *dst = its "model" child (not created). */
static char *tmp_model(char **dst) {
    char *root = tu_tmpdir();
    *dst = e0_path_join(root, "model");
    assert_non_null(*dst);
    return root;
}

static void write_ok(const char *shape, const e0_synth_opts *o, const char *dst) {
    char err[E0_ERR_MAX] = "";
    int rc = e0_synth_write_opts(e0_synth_find(shape), dst, o, err);
    if (rc) fail_msg("synth %s: %s", shape, err);
}

/* Entries of dir other than . and .. */
static int count_entries(const char *dir) {
    DIR *d = opendir(dir);
    assert_non_null(d);
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)))
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) n++;
    closedir(d);
    return n;
}

static char *read_text(const char *dir, const char *name) {
    char *p = e0_path_join(dir, name), *text = NULL;
    size_t len;
    char err[E0_ERR_MAX];
    assert_int_equal(e0_read_file(p, &text, &len, 64u << 20, err), 0);
    free(p);
    return text;
}

/* ---- the decode loop that records routing -------------------------------- */

typedef struct {
    int L, E, k, H, V, I;
    uint8_t *used;             /* [L, E] routed at least once (since the last clear) */
    uint32_t *count;           /* [L, E] times routed */
    double *rms_min, *rms_max; /* [L] residual RMS at the router's input */
    float *rl, *g, *u, *ys, *w;
    int32_t *idx;
} tracer;

static void tracer_init(tracer *t, const e0_model *m) {
    const e0_config *c = &m->cfg;
    memset(t, 0, sizeof *t);
    t->L = c->n_layers, t->E = c->n_experts, t->k = c->top_k, t->H = c->hidden, t->V = c->vocab;
    t->I = c->moe_inter > c->shared_inter ? c->moe_inter : c->shared_inter;
    t->used = calloc((size_t)t->L * t->E, 1);
    t->count = calloc((size_t)t->L * t->E, sizeof *t->count);
    t->rms_min = malloc((size_t)t->L * sizeof *t->rms_min);
    t->rms_max = calloc((size_t)t->L, sizeof *t->rms_max);
    t->rl = malloc((size_t)t->E * sizeof *t->rl);
    t->g = malloc((size_t)t->I * sizeof *t->g);
    t->u = malloc((size_t)t->I * sizeof *t->u);
    t->ys = malloc((size_t)t->H * sizeof *t->ys);
    t->w = malloc((size_t)t->k * sizeof *t->w);
    t->idx = malloc((size_t)t->k * sizeof *t->idx);
    assert_true(t->used && t->count && t->rms_min && t->rms_max && t->rl && t->g && t->u && t->ys &&
                t->w && t->idx);
    for (int l = 0; l < t->L; l++)
        t->rms_min[l] = INFINITY;
}

static void tracer_free(tracer *t) {
    free(t->used), free(t->count), free(t->rms_min), free(t->rms_max), free(t->rl);
    free(t->g), free(t->u), free(t->ys), free(t->w), free(t->idx);
}

/* The MoE block of docs/design.md §3 for one token, routing recorded. */
static void moe_step(tracer *t, const e0_model *m, int li, const float *h, float *out,
                     bool record) {
    const e0_config *c = &m->cfg;
    const e0_layer *ly = &m->layers[li];
    const int H = t->H, E = t->E, k = t->k, I = c->moe_inter;
    mat_matmul(&ly->router, h, H, 1, t->rl, E);
    float mx = -INFINITY, sum = 0;
    for (int e = 0; e < E; e++)
        mx = t->rl[e] > mx ? t->rl[e] : mx;
    for (int e = 0; e < E; e++)
        sum += expf(t->rl[e] - mx);
    float ws = 0;
    for (int j = 0; j < k; j++) { /* largest first, lower index on ties */
        int best = -1;
        for (int e = 0; e < E; e++) {
            bool taken = false;
            for (int i = 0; i < j; i++)
                taken |= t->idx[i] == e;
            if (!taken && (best < 0 || t->rl[e] > t->rl[best])) best = e;
        }
        t->idx[j] = best;
        ws += t->w[j] = expf(t->rl[best] - mx) / sum;
    }
    memset(out, 0, (size_t)H * sizeof *out);
    for (int j = 0; j < k; j++) {
        const e0_expert *x = &ly->experts[t->idx[j]];
        const float wj = c->norm_topk ? t->w[j] / ws : t->w[j];
        mat_matmul(&x->gate, h, H, 1, t->g, I);
        mat_matmul(&x->up, h, H, 1, t->u, I);
        for (int i = 0; i < I; i++)
            t->g[i] = e0_silu(t->g[i]) * t->u[i];
        mat_matmul(&x->down, t->g, I, 1, t->ys, H);
        for (int i = 0; i < H; i++)
            out[i] += wj * t->ys[i];
        if (record) {
            t->used[(size_t)li * E + t->idx[j]] = 1;
            t->count[(size_t)li * E + t->idx[j]]++;
        }
    }
    if (!ly->has_shared) return;
    const int Is = c->shared_inter;
    float sg;
    mat_matmul(&ly->sh_router, h, H, 1, &sg, 1);
    mat_matmul(&ly->sh_gate, h, H, 1, t->g, Is);
    mat_matmul(&ly->sh_up, h, H, 1, t->u, Is);
    for (int i = 0; i < Is; i++)
        t->g[i] = e0_silu(t->g[i]) * t->u[i];
    mat_matmul(&ly->sh_down, t->g, Is, 1, t->ys, H);
    for (int i = 0; i < H; i++)
        out[i] += e0_sigmoid(sg) * t->ys[i];
}

/* One decode step of token `id` through session s (the engine's attention,
 * DeltaNet and caches; the MoE above). logits: [V] or NULL. */
static void trace_step(tracer *t, e0_session *s, int32_t id, bool record, float *logits) {
    const e0_model *m = s->m;
    const e0_config *c = &m->cfg;
    e0_scratch *S = &s->s;
    const int H = t->H;
    mat_dequant(&m->embed, id, 0, H, S->x);
    for (int li = 0; li < c->n_layers; li++) {
        const e0_layer *ly = &m->layers[li];
        rmsnorm(S->x, ly->in_norm, H, 1, c->rms_eps, S->h);
        if (ly->linear)
            deltanet_forward(s, li, S->h, 1, S->y);
        else
            attn_forward(s, li, S->h, 1, S->y);
        for (int i = 0; i < H; i++)
            S->x[i] += S->y[i];
        double ss = 0;
        for (int i = 0; i < H; i++)
            ss += (double)S->x[i] * S->x[i];
        const double rms = sqrt(ss / H);
        if (record) {
            t->rms_min[li] = fmin(t->rms_min[li], rms);
            t->rms_max[li] = fmax(t->rms_max[li], rms);
        }
        rmsnorm(S->x, ly->post_norm, H, 1, c->rms_eps, S->h);
        assert_true(ly->moe);
        moe_step(t, m, li, S->h, S->y, record);
        for (int i = 0; i < H; i++)
            S->x[i] += S->y[i];
    }
    s->pos += 1;
    if (logits) {
        rmsnorm(S->x, m->final_norm, H, 1, c->rms_eps, S->h);
        mat_matmul(&m->lm_head, S->h, H, 1, logits, t->V);
    }
}

static int distinct(const tracer *t, int li) {
    int n = 0;
    for (int e = 0; e < t->E; e++)
        n += t->used[(size_t)li * t->E + e];
    return n;
}

static int cmp_u32_desc(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* Share of selections the most used quarter of experts gets when n tokens
 * each pick k of E uniformly (sorting noisy counts makes it > 1/4). */
static double uniform_top_quarter(int E, int k, int n) {
    uint64_t x = 12345;
    uint32_t *cnt = malloc((size_t)E * sizeof *cnt);
    assert_non_null(cnt);
    double top = 0;
    const int reps = 400;
    for (int r = 0; r < reps; r++) {
        memset(cnt, 0, (size_t)E * sizeof *cnt);
        for (int t = 0; t < n; t++) {
            uint64_t picked[8] = {0}; /* E <= 512 */
            for (int j = 0; j < k;) {
                x = x * 6364136223846793005ull + 1442695040888963407ull;
                int e = (int)((x >> 33) % (uint64_t)E);
                if (picked[e / 64] >> (e % 64) & 1) continue;
                picked[e / 64] |= 1ull << (e % 64);
                cnt[e]++;
                j++;
            }
        }
        qsort(cnt, (size_t)E, sizeof *cnt, cmp_u32_desc);
        for (int e = 0; e < E / 4; e++)
            top += cnt[e];
    }
    free(cnt);
    return top / ((double)reps * n * k);
}

/* Expected distinct experts of n tokens that each pick k of E uniformly. */
static double uniform_distinct(int E, int k, int n) {
    return E * (1.0 - pow(1.0 - (double)k / E, n));
}

typedef struct {
    double window_mean; /* distinct experts per layer per window, averaged */
    double total_mean;  /* distinct experts per layer over all tokens, averaged */
    double rms_lo, rms_hi;
    double top_quarter; /* share of selections that went to each layer's most used quarter of
                           experts */
} route_result;

/* Decodes n tokens (fed pseudo-random ids, or greedy when `greedy`) after a
 * 4-token prompt and measures routing over windows of `win` tokens. The
 * first `verify` decode tokens are also run through the public API in a
 * second session: its logits must match the loop's. */
static route_result measure_routing(const char *dir, int n, int win, bool greedy, int verify,
                                    bool verbose) {
    e0_engine *eng;
    char err[E0_ERR_MAX];
    if (e0_engine_open(&eng, dir, NULL, err)) fail_msg("%s", err);
    e0_session *s;
    e0_session_opts so;
    e0_session_opts_default(&so);
    so.n_ctx = n + 8;
    so.n_batch = 1;
    assert_int_equal(e0_session_new(eng, &so, &s, err), 0);
    tracer t;
    tracer_init(&t, s->m);
    float *logits = malloc((size_t)t.V * sizeof *logits),
          *at_verify = malloc((size_t)t.V * sizeof *logits);
    int32_t *ids = malloc((size_t)(n + 4) * sizeof *ids);
    uint8_t *all = calloc((size_t)t.L * t.E, 1);
    uint32_t *sorted = malloc((size_t)t.E * sizeof *sorted);
    assert_true(logits && at_verify && ids && all && sorted);
    uint64_t lcg = 0x2545f4914f6cdd1dull;
    for (int i = 0; i < 4 + n; i++) {
        lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
        ids[i] = (int32_t)((lcg >> 33) % (uint64_t)t.V);
    }
    double win_sum = 0, t0 = (double)clock();
    int wins = 0;
    for (int i = 0; i < 4 + n; i++) {
        const bool dec = i >= 4,
                   want_logits = (greedy && i + 1 < 4 + n) || (verify && i == 3 + verify);
        if (dec && greedy) {
            ids[i] = 0;
            for (int32_t v = 1; v < t.V; v++)
                if (logits[v] > logits[ids[i]]) ids[i] = v;
        }
        trace_step(&t, s, ids[i], dec, want_logits ? logits : NULL);
        if (verify && i == 3 + verify) memcpy(at_verify, logits, (size_t)t.V * sizeof *logits);
        if (!dec) continue;
        const int d = i - 3;
        if (verbose && d % 8 == 0)
            fprintf(stderr, "  token %d/%d: id %d (%.1f s/token)\n", d, n, ids[i],
                    ((double)clock() - t0) / CLOCKS_PER_SEC / (i + 1));
        if (d % win == 0) {
            for (int l = 0; l < t.L; l++)
                win_sum += distinct(&t, l);
            wins += t.L;
            for (size_t j = 0; j < (size_t)t.L * t.E; j++)
                all[j] |= t.used[j];
            memset(t.used, 0, (size_t)t.L * t.E);
        }
    }
    for (size_t j = 0; j < (size_t)t.L * t.E; j++)
        all[j] |= t.used[j];
    memcpy(t.used, all, (size_t)t.L * t.E);
    route_result r = {.window_mean = wins ? win_sum / wins : 0, .rms_lo = INFINITY};
    double top = 0, tot = 0;
    for (int l = 0; l < t.L; l++) {
        r.total_mean += distinct(&t, l) / (double)t.L;
        r.rms_lo = fmin(r.rms_lo, t.rms_min[l]);
        r.rms_hi = fmax(r.rms_hi, t.rms_max[l]);
        memcpy(sorted, t.count + (size_t)l * t.E, (size_t)t.E * sizeof *sorted);
        qsort(sorted, (size_t)t.E, sizeof *sorted, cmp_u32_desc);
        for (int e = 0; e < t.E; e++) {
            tot += sorted[e];
            if (e < t.E / 4) top += sorted[e];
        }
        if (verbose)
            printf("  layer %2d: %3d distinct experts, residual RMS %.2f..%.2f\n", l,
                   distinct(&t, l), t.rms_min[l], t.rms_max[l]);
    }
    r.top_quarter = top / tot;
    if (verbose) {
        int rep = 0;
        for (int i = 5; i < 4 + n; i++)
            rep += ids[i] == ids[i - 1];
        printf("%s: %d %s tokens (%d repeats of the previous token): %.1f distinct experts per "
               "layer (uniform: %.1f "
               "of %d, top-%d); windows of %d: %.1f (uniform %.1f); top quarter of experts got "
               "%.0f%% of "
               "selections (uniform %.0f%%); residual RMS %.2f..%.2f\n",
               dir, n, greedy ? "greedy" : "fed", rep, r.total_mean, uniform_distinct(t.E, t.k, n),
               t.E, t.k, win, r.window_mean, uniform_distinct(t.E, t.k, win), 100 * r.top_quarter,
               100 * uniform_top_quarter(t.E, t.k, n), r.rms_lo, r.rms_hi);
    }

    if (verify) { /* the loop computes what the engine computes */
        e0_session *s2;
        assert_int_equal(e0_session_new(eng, &so, &s2, err), 0);
        for (int i = 0; i < 4 + verify; i++) {
            int rc = e0_session_eval(
                s2, &ids[i], 1, i == 3 + verify ? E0_LOGITS_LAST : E0_LOGITS_NONE, logits, err);
            if (rc) fail_msg("%s", err);
        }
        double rel = tu_rel_l2(at_verify, logits, (size_t)t.V);
        if (rel > 1e-3)
            fail_msg("the routing loop diverges from the engine: logits rel L2 %g", rel);
        e0_session_free(s2);
    }
    free(sorted);
    free(all);
    free(ids);
    free(at_verify);
    free(logits);
    tracer_free(&t);
    e0_session_free(s);
    e0_engine_free(eng);
    return r;
}

/* ---- tests ---------------------------------------------------------------- */

static void test_shapes(void **state) {
    (void)state;
    assert_null(e0_synth_find("nope"));
    assert_true(e0_synth_count() >= 7);
    for (size_t i = 0; i < e0_synth_count(); i++) {
        const e0_synth_shape *s = e0_synth_at(i);
        assert_ptr_equal(e0_synth_find(s->name), s);
        assert_non_null(strstr(e0_synth_names(), s->name));
    }
    /* text-model parameter counts of the released models, and mlx sizes */
    static const struct {
        const char *name;
        double params_lo, params_hi, gb_lo, gb_hi;
        int min_shards;
    } want[] = {
        {"qwen3.6-35b-a3b", 34.0e9, 35.5e9, 18.5, 20.5, 4},
        {"qwen3-30b-a3b", 30.0e9, 31.0e9, 16.0, 18.0, 4},
        {"qwen3-next-80b-a3b", 79.0e9, 81.0e9, 42.0, 46.0, 9},
        {"qwen3.5-122b-a10b", 120.0e9, 124.0e9, 65.0, 71.0, 13},
    };
    e0_synth_opts o;
    e0_synth_opts_default(&o);
    char err[E0_ERR_MAX];
    for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
        e0_synth_info in;
        assert_int_equal(e0_synth_plan_info(e0_synth_find(want[i].name), &o, &in, err), 0);
        printf("  %-20s %.2fB params, %.2f GB, %zu tensors, %d shards\n", want[i].name,
               in.params / 1e9, in.bytes / 1e9, in.n_tensors, in.n_shards);
        assert_true(in.params >= want[i].params_lo && in.params <= want[i].params_hi);
        assert_true(in.bytes / 1e9 >= want[i].gb_lo && in.bytes / 1e9 <= want[i].gb_hi);
        assert_true(in.n_shards >= want[i].min_shards);
    }
    /* hf: bf16, 2 bytes a parameter plus headers */
    o.format = E0_SYNTH_HF;
    e0_synth_info in;
    assert_int_equal(e0_synth_plan_info(e0_synth_find("qwen3-30b-a3b"), &o, &in, err), 0);
    assert_true(in.bytes >= 2 * in.params && in.bytes < 2 * in.params + (64u << 20));
    assert_int_equal(in.n_tensors, 3 + 48 * (2 + 6 + 1 + 3 * 128));
    o.route_skew = -1;
    assert_int_equal(e0_synth_plan_info(e0_synth_find("tiny"), &o, &in, err), E0_EINVAL);
}

/* Every tiny shape in both formats: the engine opens it, reports the
 * family and layout, and prefill + decode give finite logits. */
static void test_tiny_loads(void **state) {
    (void)state;
    static const struct {
        const char *shape, *family, *layout[2];
    } cases[] = {
        {"tiny", "qwen3_5_moe", {"mlx", "hf-fused"}},
        {"tiny-qwen3moe", "qwen3_moe", {"mlx", "hf"}},
        {"tiny-qwen3next", "qwen3_next", {"mlx", "hf"}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++)
        for (int f = 0; f < 2; f++) {
            char *dst, *root = tmp_model(&dst);
            e0_synth_opts o;
            e0_synth_opts_default(&o);
            o.format = f ? E0_SYNTH_HF : E0_SYNTH_MLX;
            o.seed = 7;
            o.no_sync = 1;
            write_ok(cases[c].shape, &o, dst);
            char *cfg = read_text(dst, "config.json");
            assert_non_null(strstr(cfg, "\"edge0_synth\""));
            assert_non_null(strstr(cfg, "\"routing\": \"near-uniform\""));
            assert_true((strstr(cfg, "\"quantization\"") != NULL) == (f == 0));
            free(cfg);
            e0_engine *eng;
            char err[E0_ERR_MAX];
            if (e0_engine_open(&eng, dst, NULL, err))
                fail_msg("%s %s: %s", cases[c].shape, f ? "hf" : "mlx", err);
            e0_model_info info;
            e0_engine_info(eng, &info);
            assert_string_equal(info.family, cases[c].family);
            assert_string_equal(info.layout, cases[c].layout[f]);
            e0_session *s;
            assert_int_equal(e0_session_new(eng, NULL, &s, err), 0);
            const int V = info.vocab_size;
            float *lg = malloc((size_t)V * sizeof *lg);
            assert_non_null(lg);
            int32_t ids[3] = {151644, 872, 198}, next = 1234;
            assert_int_equal(e0_session_eval(s, ids, 3, E0_LOGITS_NONE, NULL, err), 0);
            assert_int_equal(e0_session_eval(s, &next, 1, E0_LOGITS_LAST, lg, err), 0);
            double ss = 0;
            for (int i = 0; i < V; i++) {
                assert_true(isfinite(lg[i]));
                ss += (double)lg[i] * lg[i];
            }
            /* lm_head logits have std ~3 for a unit-RMS final state */
            double rms = sqrt(ss / V);
            assert_true(rms > 0.5 && rms < 20);
            free(lg);
            e0_session_free(s);
            e0_engine_free(eng);
            tu_rmtree(root);
            free(root);
            free(dst);
        }
}

/* --sparse: the same files, headers and config as a full write, but the
 * data sections are holes: almost no blocks on the disk, every weight byte
 * zero, and the checkpoint opens with the full write's parameters. */
static void test_sparse(void **state) {
    (void)state;
    char *dst[2], *root[2];
    for (int v = 0; v < 2; v++) {
        root[v] = tmp_model(&dst[v]);
        e0_synth_opts o;
        e0_synth_opts_default(&o);
        o.no_sync = 1, o.sparse = v;
        write_ok("tiny", &o, dst[v]);
    }
    char *p[2];
    for (int v = 0; v < 2; v++)
        assert_non_null(p[v] = e0_path_join(dst[v], "model.safetensors"));
    struct stat st[2];
    assert_int_equal(stat(p[0], &st[0]), 0);
    assert_int_equal(stat(p[1], &st[1]), 0);
    assert_int_equal(st[0].st_size, st[1].st_size);
    assert_true(st[0].st_blocks * 512 >= st[0].st_size * 9 / 10);
    assert_true(st[1].st_blocks * 512 < st[1].st_size / 10); /* holes, not zeros written */
    char err[E0_ERR_MAX];
    st_set *s[2];
    for (int v = 0; v < 2; v++)
        if (st_set_open_dir(&s[v], dst[v], err)) fail_msg("%s", err);
    assert_int_equal(st_count(s[0]), st_count(s[1]));
    for (size_t i = 0; i < st_count(s[1]); i++) {
        const st_tensor *a = st_at(s[0], i), *b = st_at(s[1], i);
        assert_string_equal(a->name, b->name);
        assert_int_equal(a->nbytes, b->nbytes);
        for (uint64_t k = 0; k < b->nbytes; k++)
            if (((const uint8_t *)b->data)[k]) fail_msg("%s: byte %llu is not zero", b->name,
                                                       (unsigned long long)k);
    }
    char *a = read_text(dst[0], "config.json"), *b = read_text(dst[1], "config.json");
    assert_string_equal(a, b);
    free(a), free(b);
    for (int v = 0; v < 2; v++) {
        st_set_free(s[v]);
        tu_rmtree(root[v]);
        free(root[v]), free(dst[v]), free(p[v]);
    }
}

/* Same seed, same bytes (whatever the thread count); another seed differs. */
static void test_deterministic(void **state) {
    (void)state;
    char *a, *b, *c;
    char *ra = tmp_model(&a), *rb = tmp_model(&b), *rc = tmp_model(&c);
    e0_synth_opts o;
    e0_synth_opts_default(&o);
    o.n_threads = 1;
    o.no_sync = 1;
    write_ok("tiny-qwen3next", &o, a);
    o.n_threads = 3;
    write_ok("tiny-qwen3next", &o, b);
    o.seed = 2;
    write_ok("tiny-qwen3next", &o, c);
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "cmp -s %s/model.safetensors %s/model.safetensors", a, b);
    assert_int_equal(tu_run(cmd), 0);
    snprintf(cmd, sizeof cmd, "cmp -s %s/model.safetensors %s/model.safetensors", a, c);
    assert_int_equal(tu_run(cmd), 1);
    tu_rmtree(ra), tu_rmtree(rb), tu_rmtree(rc);
    free(ra), free(rb), free(rc), free(a), free(b), free(c);
}

/* Small shards: the index names every tensor and the engine loads the set. */
static void test_sharded(void **state) {
    (void)state;
    char *dst, *root = tmp_model(&dst);
    e0_synth_opts o;
    e0_synth_opts_default(&o);
    o.shard_bytes = 4u << 20;
    o.no_sync = 1;
    write_ok("tiny", &o, dst);
    e0_synth_info in;
    char err[E0_ERR_MAX];
    assert_int_equal(e0_synth_plan_info(e0_synth_find("tiny"), &o, &in, err), 0);
    assert_true(in.n_shards >= 3);
    assert_int_equal(count_entries(dst), in.n_shards + 2); /* + config.json + index */
    char name[64];
    snprintf(name, sizeof name, "model-00001-of-%05d.safetensors", in.n_shards);
    char *first = e0_path_join(dst, name);
    assert_true(e0_file_exists(first));
    free(first);
    char *idx = read_text(dst, "model.safetensors.index.json");
    assert_non_null(strstr(idx, "\"total_size\""));
    assert_non_null(strstr(idx, "\"language_model.model.embed_tokens.weight\": \"model-00001-of-"));
    free(idx);
    e0_engine *eng;
    if (e0_engine_open(&eng, dst, NULL, err)) fail_msg("%s", err);
    e0_engine_free(eng);
    tu_rmtree(root);
    free(root);
    free(dst);
}

typedef struct {
    int calls, done_seen, sync_seen;
    uint64_t last;
    volatile sig_atomic_t *cancel;
} prog;

static void on_prog(void *ctx, const e0_synth_progress *p) {
    prog *g = ctx;
    g->calls++;
    assert_true(p->done <= p->total);
    assert_true(p->done >= g->last);
    g->last = p->done;
    g->done_seen |= p->phase == E0_SYNTH_DONE && p->done == p->total;
    g->sync_seen |= p->phase == E0_SYNTH_SYNCING;
    if (g->cancel) *g->cancel = 1; /* interrupt at the first report */
}

/* DST appears whole or not at all: an existing DST (directory, even empty,
 * or file) is refused untouched; a failed or interrupted write leaves
 * nothing next to DST. */
static void test_atomic(void **state) {
    (void)state;
    char *dst, *root = tmp_model(&dst);
    char err[E0_ERR_MAX];
    e0_synth_opts o;
    e0_synth_opts_default(&o);
    prog g = {0};
    o.progress = on_prog;
    o.progress_ctx = &g;
    write_ok("tiny", &o, dst);
    assert_true(g.calls >= 2 && g.done_seen && g.sync_seen);
    assert_int_equal(count_entries(root), 1);
    assert_int_equal(count_entries(dst), 2);
    /* existing: refused, untouched, nothing added */
    assert_int_equal(e0_synth_write_opts(e0_synth_find("tiny"), dst, &o, err), E0_EINVAL);
    assert_non_null(strstr(err, "already exists"));
    assert_int_equal(count_entries(root), 1);
    char *empty = e0_path_join(root, "empty");
    assert_int_equal(mkdir(empty, 0755), 0);
    assert_int_equal(e0_synth_write(e0_synth_find("tiny"), empty, 1, err), E0_EINVAL);
    assert_int_equal(count_entries(empty), 0);
    free(empty);
    /* parent missing: fails, nothing created */
    char *deep = e0_path_join(root, "no/such/dir");
    assert_int_not_equal(e0_synth_write(e0_synth_find("tiny"), deep, 1, err), 0);
    printf("  -> %s\n", err);
    free(deep);
    assert_int_equal(count_entries(root), 2);
    /* interrupted: no DST, no DST.tmp-* */
    volatile sig_atomic_t cancel = 0;
    prog g2 = {.cancel = &cancel};
    o.progress_ctx = &g2;
    o.cancel = &cancel;
    char *dst2 = e0_path_join(root, "cancelled");
    assert_int_equal(e0_synth_write_opts(e0_synth_find("tiny"), dst2, &o, err), E0_EINVAL);
    assert_non_null(strstr(err, "interrupted"));
    assert_int_equal(count_entries(root), 2);
    free(dst2);
    /* the CLI: refuses an existing DST with exit status 1, unknown shape 2 */
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "%s synth --shape tiny '%s' >/dev/null 2>&1", tu_bin(), dst);
    assert_int_equal(tu_run(cmd), 1);
    snprintf(cmd, sizeof cmd, "%s synth --shape nope '%s/x' >/dev/null 2>&1", tu_bin(), root);
    assert_int_equal(tu_run(cmd), 2);
    snprintf(cmd, sizeof cmd, "%s synth --help | grep -q qwen3.6-35b-a3b", tu_bin());
    assert_int_equal(tu_run(cmd), 0);
    snprintf(
        cmd, sizeof cmd,
        "%s synth --shape tiny-qwen3moe --route-skew 1.5 '%s/cli' 2>/dev/null | grep -q 'Zipf'",
        tu_bin(), root);
    assert_int_equal(tu_run(cmd), 0);
    char *cli = e0_path_join(root, "cli");
    char *cfg = read_text(cli, "config.json");
    assert_non_null(strstr(cfg, "\"route_skew\": 1.5"));
    assert_non_null(strstr(cfg, "\"routing\": \"zipf\""));
    free(cfg);
    free(cli);
    tu_rmtree(root);
    free(root);
    free(dst);
}

/* Without skew, 64 decode tokens spread over the experts as if each token
 * picked its top-k uniformly at random (counted in windows of 8 tokens,
 * where the tiny shapes' 32 experts are not yet saturated: expectation
 * 21.0), and the residual stream stays O(1) in every layer. */
static void test_routing_uniform(void **state) {
    (void)state;
    const char *shapes[] = {"tiny", "tiny-qwen3moe", "tiny-qwen3next"};
    const int n_tok[] = {64, 64, 64};
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
        char *dst, *root = tmp_model(&dst);
        e0_synth_opts o;
        e0_synth_opts_default(&o);
        o.no_sync = 1;
        write_ok(shapes[i], &o, dst);
        route_result r = measure_routing(dst, n_tok[i], 8, false, 8, false);
        const e0_synth_shape *s = e0_synth_find(shapes[i]);
        double want = uniform_distinct(s->n_experts, s->top_k, 8);
        const double tq = uniform_top_quarter(s->n_experts, s->top_k, n_tok[i]);
        printf(
            "  %-15s windows of 8: %.1f distinct experts per layer (uniform %.1f); %d tokens: %.1f "
            "(uniform "
            "%.1f); top quarter %.0f%% of selections (uniform %.0f%%); residual RMS %.2f..%.2f\n",
            shapes[i], r.window_mean, want, n_tok[i], r.total_mean,
            uniform_distinct(s->n_experts, s->top_k, n_tok[i]), 100 * r.top_quarter, 100 * tq,
            r.rms_lo, r.rms_hi);
        assert_true(r.window_mean >= 0.9 * want);
        assert_true(r.total_mean >= 0.95 * uniform_distinct(s->n_experts, s->top_k, n_tok[i]));
        assert_true(r.top_quarter < tq + 0.06);
        assert_true(r.rms_lo > 0.3 && r.rms_hi < 4.0);
        tu_rmtree(root);
        free(root);
        free(dst);
    }
}

/* With --route-skew the same model concentrates its routing: the top
 * quarter of experts takes most selections. */
static void test_route_skew(void **state) {
    (void)state;
    char *dst, *root = tmp_model(&dst);
    e0_synth_opts o;
    e0_synth_opts_default(&o);
    o.no_sync = 1;
    o.route_skew = 1.0;
    write_ok("tiny", &o, dst);
    route_result r = measure_routing(dst, 64, 8, false, 0, false);
    const double tq = uniform_top_quarter(32, 4, 64);
    printf("  skew 1.0: windows of 8: %.1f distinct experts per layer; 64 tokens %.1f; top quarter "
           "%.0f%% of "
           "selections (uniform %.0f%%, Zipf(1) ~60%%); residual RMS %.2f..%.2f\n",
           r.window_mean, r.total_mean, 100 * r.top_quarter, 100 * tq, r.rms_lo, r.rms_hi);
    assert_true(r.top_quarter > tq + 0.12);
    assert_true(r.window_mean < 0.85 * uniform_distinct(32, 4, 8));
    assert_true(r.rms_lo > 0.3 && r.rms_hi < 4.0);
    tu_rmtree(root);
    free(root);
    free(dst);
}

/* A measurement, not part of the suite: registered only when
 * E0_SYNTH_ROUTE_MODEL names a real checkpoint. */
static void test_route_model(void **state) {
    (void)state;
    const char *dir = getenv("E0_SYNTH_ROUTE_MODEL"), *nt = getenv("E0_SYNTH_ROUTE_TOKENS");
    const char *fed = getenv("E0_SYNTH_ROUTE_FED"), *wn = getenv("E0_SYNTH_ROUTE_WINDOW");
    int n = nt && atoi(nt) > 0 ? atoi(nt) : 64, win = wn && atoi(wn) > 0 ? atoi(wn) : n;
    route_result r = measure_routing(dir, n, win, !(fed && *fed == '1'), 0, true);
    (void)r;
}

/* ---- GGUF ------------------------------------------------------------------ */

#define QWEN3_TOKENIZER "assets/qwen3-tokenizer/tokenizer.json"

static void gguf_opts(e0_synth_opts *o) {
    e0_synth_opts_default(o);
    o->format = E0_SYNTH_GGUF;
    o->tokenizer = QWEN3_TOKENIZER;
    o->no_sync = 1;
}

/* llama-quantize's type for a tensor under a mix's ftype (llama-quant.cpp,
 * restated from its source rather than from synth_gguf.c; no imatrix;
 * synth's Q5_K fallback is Q5_0 where llama.cpp's is Q5_1). */
static uint32_t mix_type(e0_synth_gguf_mix mix, const char *name, uint32_t n_dims, uint64_t ne0,
                         const e0_synth_shape *sh) {
    if (n_dims < 2 || strstr(name, "_norm.weight") || strstr(name, "ffn_gate_inp.weight") ||
        strstr(name, "ssm_conv1d") || !strstr(name, "weight"))
        return GGML_F32;
    const int n_layers = sh->n_layers;
    int L = -1;
    sscanf(name, "blk.%d.", &L);
    const bool out = !strcmp(name, "output.weight");
    const bool vlike = strstr(name, "attn_v.weight") || strstr(name, "attn_qkv.weight");
    const bool down = strstr(name, "ffn_down") != NULL;
    uint32_t t = GGML_Q4_K;
    switch (mix) {
    case E0_SYNTH_MIX_Q4_K_M: {
        const bool more = L >= 0 && (L < n_layers / 8 || L >= 7 * n_layers / 8 ||
                                     (L - n_layers / 8) % 3 == 2);
        if (out)
            t = ne0 % 256 ? GGML_Q8_0 : GGML_Q6_K;
        else if ((vlike || down) && more)
            t = GGML_Q6_K;
        break;
    }
    case E0_SYNTH_MIX_Q8_0:
        t = GGML_Q8_0;
        break;
    case E0_SYNTH_MIX_Q4_0:
        t = out ? GGML_Q6_K : GGML_Q4_0;
        break;
    case E0_SYNTH_MIX_IQ4_XS:
        t = out ? GGML_Q6_K
            : (vlike && sh->n_heads / sh->n_kv_heads >= 4) || (down && L < n_layers / 8)
                ? GGML_Q5_K
                : GGML_IQ4_XS;
        break;
    }
    if (ne0 % 256)
        t = t == GGML_Q4_K || t == GGML_Q5_K ? GGML_Q5_0
            : t == GGML_Q6_K                 ? GGML_Q8_0
            : t == GGML_IQ4_XS               ? GGML_IQ4_NL
                                             : t;
    return t;
}

/* Every tensor has its type under the mix; every quantized block has a
 * mean of 0 (IQ4 types: within 1% of the rms, their codes' sums are only
 * near 0) and a finite non-zero spread; ssm_a is a decay (-16 < a < -1). */
static void check_gguf_tensors(const char *path, const e0_synth_shape *sh, e0_synth_gguf_mix mix) {
    static const uint32_t ftypes[] = {15, 7, 30, 2};
    st_set *st;
    char err[E0_ERR_MAX];
    if (st_set_open_gguf(&st, path, err)) fail_msg("%s", err);
    const gguf_file *g = st_gguf(st);
    const char *s;
    uint32_t ft;
    assert_int_equal(gguf_get_u32(g, "general.file_type", &ft, err), 0);
    assert_int_equal(ft, ftypes[mix]);
    assert_int_equal(gguf_get_str(g, "tokenizer.ggml.model", &s, err), 0);
    assert_string_equal(s, "gpt2");
    assert_int_equal(gguf_get_str(g, "tokenizer.chat_template", &s, err), 0);
    assert_non_null(strstr(s, "<|im_start|>"));
    size_t n_q = 0;
    bool types_seen[GGML_NTYPES] = {0};
    for (size_t i = 0; i < gguf_n_tensors(g); i++) {
        const gguf_tensor_info *t = gguf_tensor_at(g, i);
        const uint32_t want = mix_type(mix, t->name, t->n_dims, t->ne[0], sh);
        if (t->type != want)
            fail_msg("%s: %s is %s, the mix gives %s", path, t->name, ggml_info(t->type)->name,
                     ggml_info(want)->name);
        if (want != GGML_F32) types_seen[want] = true;
        const st_tensor *x = st_get(st, t->name);
        assert_non_null(x);
        if (strstr(t->name, "ssm_a") && !strstr(t->name, "ssm_alpha"))
            for (uint64_t k = 0; k < t->ne[0]; k++) {
                const float a = e0_ldf32(x->data, k);
                assert_true(a < -0.99f && a > -16.01f);
            }
        if (want == GGML_F32) continue;
        n_q++;
        const ggml_type_info *gi = ggml_info(t->type);
        const int64_t nb = (int64_t)(t->ne[0] / (uint64_t)gi->blck);
        float *y = malloc((size_t)t->ne[0] * sizeof *y);
        assert_non_null(y);
        assert_int_equal(ggml_dequant(t->type, x->data, y, nb), 0); /* row 0 */
        double ss = 0;
        for (uint64_t k = 0; k < t->ne[0]; k++) {
            assert_true(isfinite(y[k]));
            ss += (double)y[k] * y[k];
        }
        const double rms = sqrt(ss / (double)t->ne[0]);
        assert_true(rms > 1e-4 && rms < 10);
        for (uint64_t b0 = 0; b0 < t->ne[0]; b0 += 32) { /* every block / sub-block */
            double sum = 0;
            for (int k = 0; k < 32; k++)
                sum += y[b0 + (uint64_t)k];
            const bool iq4 = t->type == GGML_IQ4_XS || t->type == GGML_IQ4_NL;
            if (fabs(sum / 32) > (iq4 ? 1e-2 : 1e-3) * rms)
                fail_msg("%s: %s row 0 values %llu..: mean %g, rms %g", path, t->name,
                         (unsigned long long)b0, sum / 32, rms);
        }
        free(y);
    }
    assert_true(n_q > 10);
    /* the mix's main type is there */
    static const uint32_t main_type[] = {GGML_Q4_K, GGML_Q8_0, GGML_IQ4_XS, GGML_Q4_0};
    if (!types_seen[main_type[mix]] && !(mix == E0_SYNTH_MIX_IQ4_XS && types_seen[GGML_IQ4_NL]) &&
        !(mix == E0_SYNTH_MIX_Q4_K_M && types_seen[GGML_Q5_0]))
        fail_msg("%s: no %s tensor", path, ggml_info(main_type[mix])->name);
    st_set_free(st);
}

/* Every tiny shape as GGUF: the Q4_K_M types, zero-mean blocks, the engine
 * opens it (gguf layout, tokenizer from the metadata), finite logits, and
 * routing close to uniform: 32 decode tokens use about as many distinct
 * experts per layer as uniform picks would (many more than top-k). */
static void test_gguf_tiny(void **state) {
    (void)state;
    static const struct {
        const char *shape, *family;
    } cases[] = {
        {"tiny", "qwen3_5_moe"},
        {"tiny-qwen3moe", "qwen3_moe"},
        {"tiny-qwen3next", "qwen3_next"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        char *root = tu_tmpdir(), *dst = e0_path_join(root, "m.gguf");
        e0_synth_opts o;
        gguf_opts(&o);
        write_ok(cases[c].shape, &o, dst);
        assert_int_equal(count_entries(root), 1); /* no PATH.tmp left */
        const e0_synth_shape *s = e0_synth_find(cases[c].shape);
        check_gguf_tensors(dst, s, E0_SYNTH_MIX_Q4_K_M);
        e0_engine *eng;
        char err[E0_ERR_MAX];
        if (e0_engine_open(&eng, dst, NULL, err)) fail_msg("%s: %s", cases[c].shape, err);
        e0_model_info info;
        e0_engine_info(eng, &info);
        assert_string_equal(info.family, cases[c].family);
        assert_string_equal(info.layout, "gguf");
        assert_int_equal(info.vocab_size, s->vocab);
        e0_engine_free(eng);
        e0_text *tx; /* the tokenizer from the metadata, chat template included */
        if (e0_text_open(&tx, dst, err)) fail_msg("%s", err);
        int32_t *ids = NULL;
        size_t n_ids = 0;
        assert_int_equal(e0_text_encode(tx, "Hello world<|im_end|>", 21, &ids, &n_ids, err), 0);
        assert_int_equal(n_ids, 3);
        assert_int_equal(ids[2], 151645);
        free(ids);
        e0_text_free(tx);
        route_result r = measure_routing(dst, 32, 8, false, 8, false);
        const double want = uniform_distinct(s->n_experts, s->top_k, 32);
        printf("  %-15s gguf: 32 tokens: %.1f distinct experts per layer (uniform %.1f, top-k "
               "%d); windows of 8: %.1f; residual RMS %.2f..%.2f\n",
               cases[c].shape, r.total_mean, want, s->top_k, r.window_mean, r.rms_lo, r.rms_hi);
        assert_true(r.total_mean >= 0.9 * want && r.total_mean > 4 * s->top_k);
        assert_true(r.window_mean >= 0.85 * uniform_distinct(s->n_experts, s->top_k, 8));
        assert_true(r.rms_lo > 0.3 && r.rms_hi < 4.0);
        tu_rmtree(root);
        free(root);
        free(dst);
    }
}

/* --gguf-mix q8_0 / iq4_xs / q4_0 on the tiny shapes: every tensor has the
 * mix's type, the engine opens the file, and routing stays near uniform
 * (the new generators keep blocks zero-mean); the plan of the 35B shape
 * holds the main type of each mix. */
static void test_gguf_mixes(void **state) {
    (void)state;
    static const e0_synth_gguf_mix mixes[] = {E0_SYNTH_MIX_Q8_0, E0_SYNTH_MIX_IQ4_XS, E0_SYNTH_MIX_Q4_0};
    static const char *const shapes[] = {"tiny", "tiny-qwen3moe"};
    for (size_t m = 0; m < 3; m++)
        for (size_t c = 0; c < 2; c++) {
            char *root = tu_tmpdir(), *dst = e0_path_join(root, "m.gguf");
            e0_synth_opts o;
            gguf_opts(&o);
            o.gguf_mix = mixes[m];
            write_ok(shapes[c], &o, dst);
            const e0_synth_shape *s = e0_synth_find(shapes[c]);
            check_gguf_tensors(dst, s, mixes[m]);
            e0_engine *eng;
            char err[E0_ERR_MAX];
            if (e0_engine_open(&eng, dst, NULL, err)) fail_msg("%s: %s", shapes[c], err);
            e0_engine_free(eng);
            route_result r = measure_routing(dst, 32, 8, false, 8, false);
            const double want = uniform_distinct(s->n_experts, s->top_k, 32);
            printf("  %-15s gguf mix %d: 32 tokens: %.1f distinct experts per layer (uniform "
                   "%.1f); residual RMS %.2f..%.2f\n",
                   shapes[c], (int)mixes[m], r.total_mean, want, r.rms_lo, r.rms_hi);
            assert_true(r.total_mean >= 0.9 * want && r.total_mean > 4 * s->top_k);
            assert_true(r.rms_lo > 0.3 && r.rms_hi < 4.0);
            tu_rmtree(root);
            free(root);
            free(dst);
        }
    /* the real shape: the plan's bytes are mostly the mix's main type */
    static const uint32_t main_type[] = {GGML_Q8_0, GGML_IQ4_XS, GGML_Q4_0};
    for (size_t m = 0; m < 3; m++) {
        e0_synth_opts o;
        gguf_opts(&o);
        o.gguf_mix = mixes[m];
        e0_synth_info in;
        char err[E0_ERR_MAX];
        if (e0_synth_plan_info(e0_synth_find("qwen3.6-35b-a3b"), &o, &in, err)) fail_msg("%s", err);
        printf("  qwen3.6-35b-a3b gguf mix %d: %.2f GB, %.0f%% %s\n", (int)mixes[m],
               (double)in.bytes / 1e9, 100.0 * (double)in.type_bytes[main_type[m]] / (double)in.bytes,
               ggml_info(main_type[m])->name);
        assert_true((double)in.type_bytes[main_type[m]] > 0.8 * (double)in.bytes);
    }
}

/* The real shapes' GGUF plans: llama-quantize Q4_K_M sizes and mix
 * (public Qwen3-30B-A3B Q4_K_M downloads are listed at ~18.6 GB), nothing but
 * Q4_K / Q6_K / F32, Q6_K on output + attn_v-like + both ffn_down of the
 * more-bits layers; refusals. */
static void test_gguf_plan(void **state) {
    (void)state;
    static const struct {
        const char *name;
        double gb_lo, gb_hi;
        unsigned q6k;
    } want[] = {
        {"qwen3.6-35b-a3b", 20.5, 22.0, 1 + 3 * 20},
        {"qwen3-30b-a3b", 18.2, 19.0, 1 + 2 * 24},
        {"qwen3-next-80b-a3b", 45.0, 50.0, 1 + 3 * 24},
        {"qwen3.5-122b-a10b", 70.0, 78.0, 1 + 3 * 24},
    };
    e0_synth_opts o;
    gguf_opts(&o);
    char err[E0_ERR_MAX];
    for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
        e0_synth_info in;
        assert_int_equal(e0_synth_plan_info(e0_synth_find(want[i].name), &o, &in, err), 0);
        printf("  %-20s gguf %.2f GB, %zu tensors: Q4_K %u (%.2f GB), Q6_K %u (%.2f GB), F32 %u\n",
               want[i].name, in.bytes / 1e9, in.n_tensors, in.type_tensors[GGML_Q4_K],
               in.type_bytes[GGML_Q4_K] / 1e9, in.type_tensors[GGML_Q6_K],
               in.type_bytes[GGML_Q6_K] / 1e9, in.type_tensors[GGML_F32]);
        assert_true(in.bytes / 1e9 >= want[i].gb_lo && in.bytes / 1e9 <= want[i].gb_hi);
        assert_int_equal(in.type_tensors[GGML_Q6_K], want[i].q6k);
        assert_int_equal(in.n_tensors, in.type_tensors[GGML_Q4_K] + in.type_tensors[GGML_Q6_K] +
                                           in.type_tensors[GGML_F32]);
        assert_int_equal(in.n_shards, 1);
    }
    e0_synth_info in;
    o.route_skew = 1.0;
    assert_int_equal(e0_synth_plan_info(e0_synth_find("tiny"), &o, &in, err), E0_EUNSUPPORTED);
    o.route_skew = 0;
    o.tokenizer = NULL;
    assert_int_equal(e0_synth_plan_info(e0_synth_find("tiny"), &o, &in, err), E0_EINVAL);
    assert_non_null(strstr(err, "tokenizer"));
}

/* --shard-gb: a split set NAME-0000K-of-0000N.gguf that the engine opens
 * from any part; an existing file is refused; a cancelled write leaves
 * nothing behind. */
static void test_gguf_split_atomic(void **state) {
    (void)state;
    char *root = tu_tmpdir(), *dst = e0_path_join(root, "m.gguf");
    e0_synth_opts o;
    gguf_opts(&o);
    o.shard_bytes = 16u << 20;
    write_ok("tiny-qwen3moe", &o, dst);
    e0_synth_info in;
    char err[E0_ERR_MAX];
    assert_int_equal(e0_synth_plan_info(e0_synth_find("tiny-qwen3moe"), &o, &in, err), 0);
    assert_true(in.n_shards >= 2);
    assert_int_equal(count_entries(root), in.n_shards);
    char name[64];
    snprintf(name, sizeof name, "m-%05d-of-%05d.gguf", in.n_shards, in.n_shards);
    char *last = e0_path_join(root, name);
    e0_engine *eng;
    if (e0_engine_open(&eng, last, NULL, err)) fail_msg("%s", err);
    e0_engine_free(eng);
    /* the parts exist: refused, nothing changed */
    assert_int_equal(e0_synth_write_opts(e0_synth_find("tiny-qwen3moe"), dst, &o, err), E0_EINVAL);
    assert_non_null(strstr(err, "already exists"));
    assert_int_equal(count_entries(root), in.n_shards);
    free(last);
    /* cancelled */
    char *dst2 = e0_path_join(root, "c.gguf");
    volatile sig_atomic_t stop = 1;
    e0_synth_opts oc;
    gguf_opts(&oc);
    oc.cancel = &stop;
    assert_int_equal(e0_synth_write_opts(e0_synth_find("tiny"), dst2, &oc, err), E0_EINVAL);
    assert_int_equal(count_entries(root), in.n_shards);
    free(dst2);
    tu_rmtree(root);
    free(root);
    free(dst);
}

/* Same seed, same bytes whatever the thread count; another seed differs. */
static void test_gguf_deterministic(void **state) {
    (void)state;
    char *root = tu_tmpdir(), cmd[4096];
    const char *names[3] = {"a.gguf", "b.gguf", "c.gguf"};
    for (int i = 0; i < 3; i++) {
        char *dst = e0_path_join(root, names[i]);
        e0_synth_opts o;
        gguf_opts(&o);
        o.n_threads = i == 1 ? 3 : 1;
        o.seed = i == 2 ? 8 : 7;
        write_ok("tiny-qwen3next", &o, dst);
        free(dst);
    }
    snprintf(cmd, sizeof cmd, "cmp -s %s/a.gguf %s/b.gguf && ! cmp -s %s/a.gguf %s/c.gguf", root,
             root, root, root);
    assert_int_equal(tu_run(cmd), 0);
    tu_rmtree(root);
    free(root);
}

/* The CLI end to end: synth --format gguf --dry-run prints the type mix;
 * synth writes the file; demo runs it with nothing beside it. */
static void test_gguf_cli(void **state) {
    (void)state;
    char *dir = tu_tmpdir(), cmd[4096];
    snprintf(cmd, sizeof cmd,
             "%s synth --shape qwen3-30b-a3b --format gguf --dry-run > %s/dry.out 2>&1 && "
             "grep -q 'Q6_K ' %s/dry.out && grep -q 'Q4_K ' %s/dry.out && ! ls %s/*.gguf 2>/dev/null",
             tu_bin(), dir, dir, dir, dir);
    if (tu_run(cmd) != 0) fail_msg("synth --dry-run failed (see %s/dry.out)", dir);
    snprintf(cmd, sizeof cmd,
             "%s synth --shape tiny --format gguf --no-sync %s/m.gguf > %s/synth.out 2>&1 && "
             "%s demo %s/m.gguf --max-tokens 4 --temp 0 > %s/demo.out 2>&1 && "
             "grep -q 'gguf layout' %s/demo.out && grep -q 'decode 4 tokens' %s/demo.out",
             tu_bin(), dir, dir, tu_bin(), dir, dir, dir, dir);
    if (tu_run(cmd) != 0) fail_msg("synth --format gguf + demo failed (see %s)", dir);
    snprintf(cmd, sizeof cmd,
             "%s synth --shape tiny --format gguf --route-skew 1 %s/s.gguf > %s/skew.out 2>&1; "
             "test $? = 2 && grep -q 'route-skew' %s/skew.out",
             tu_bin(), dir, dir, dir);
    if (tu_run(cmd) != 0) fail_msg("synth --format gguf --route-skew was not refused (see %s)", dir);
    tu_rmtree(dir);
    free(dir);
}

/* An argument runs only the tests whose names match it (cmocka filter). */
int main(int argc, char **argv) {
    if (argc > 1) cmocka_set_test_filter(argv[1]);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shapes),        cmocka_unit_test(test_tiny_loads),
        cmocka_unit_test(test_deterministic), cmocka_unit_test(test_sharded),
        cmocka_unit_test(test_atomic),        cmocka_unit_test(test_routing_uniform),
        cmocka_unit_test(test_route_skew),    cmocka_unit_test(test_gguf_tiny),
        cmocka_unit_test(test_gguf_mixes),
        cmocka_unit_test(test_gguf_plan),     cmocka_unit_test(test_gguf_split_atomic),
        cmocka_unit_test(test_gguf_deterministic), cmocka_unit_test(test_gguf_cli),
        cmocka_unit_test(test_sparse),
        cmocka_unit_test(test_route_model), /* last: only with E0_SYNTH_ROUTE_MODEL */
    };
    const char *real = getenv("E0_SYNTH_ROUTE_MODEL");
    const size_t n = sizeof tests / sizeof *tests - (real && *real ? 0 : 1);
    return _cmocka_run_group_tests("test_synth", tests, n, NULL, NULL);
}
