#include "testutil.h"

#include "edge0.h"
#include "synth/synth.h"
#include "util/file.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

const char *tu_shared(const char *rel) {
    static char buf[4096];
    const char *root = getenv("E0_SHARED");
    snprintf(buf, sizeof buf, "%s/%s", root && *root ? root : "../shared", rel);
    return buf;
}

const char *const TU_CHECKPOINTS[TU_NCHECKPOINTS][2] = {
    {"qwen3moe", "hf"},         {"qwen3moe", "hf-fused"},  {"qwen3moe", "mlx"},
    {"qwen3next", "hf"},        {"qwen3next", "hf-fused"}, {"qwen3next", "mlx"},
    {"qwen35moe", "hf"},        {"qwen35moe", "hf-fused"}, {"qwen35moe", "mlx"},
    {"qwen35moe", "mlx-fused"},
    {"gguf/tiny-qwen35moe", "model-Q4_K_M.gguf"}, {"gguf/tiny-qwen3moe", "model-Q4_K_M.gguf"},
    {"gguf/qwen3next", "model-Q4_0.gguf"},        {"gguf/qwen35moe", "model-Q8_0.gguf"},
    {"gguf/tiny-qwen35moe", "model-IQ4_XS.gguf"},
};

int tu_is_gguf(const char *family) {
    return strncmp(family, "gguf/", 5) == 0;
}

const char *tu_checkpoint(const char *family, const char *layout) {
    char rel[256];
    snprintf(rel, sizeof rel, "%s%s/%s", tu_is_gguf(family) ? "" : "fixtures/", family, layout);
    return tu_shared(rel);
}

const char *tu_bin(void) {
    const char *b = getenv("E0_BIN");
    return b && *b ? b : "build/edge0";
}

char *tu_tmpdir(void) {
    char *t = strdup("/tmp/edge0-test-XXXXXX");
    assert_non_null(t);
    assert_non_null(mkdtemp(t));
    return t;
}

void tu_rmtree(const char *dir) {
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

double tu_rel_l2(const float *a, const float *b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - (double)b[i];
        num += d * d;
        den += (double)b[i] * (double)b[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

size_t tu_argmax(const float *v, size_t n) {
    size_t b = 0;
    for (size_t i = 1; i < n; i++)
        if (v[i] > v[b]) b = i;
    return b;
}

const float *tu_f32(const st_set *s, const char *name, size_t numel) {
    const st_tensor *t = st_get(s, name);
    if (!t) fail_msg("tensor %s missing", name);
    assert_int_equal(t->dtype, ST_F32);
    assert_int_equal(st_numel(t), numel);
    return (const float *)t->data;
}

const int32_t *tu_i32(const st_set *s, const char *name, size_t *numel) {
    const st_tensor *t = st_get(s, name);
    if (!t) fail_msg("tensor %s missing", name);
    assert_int_equal(t->dtype, ST_I32);
    *numel = (size_t)st_numel(t);
    return (const int32_t *)t->data;
}

char *tu_write(const char *dir, const char *name, const void *data, size_t len) {
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    assert_non_null(p);
    snprintf(p, n, "%s/%s", dir, name);
    FILE *f = fopen(p, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, len, f), len);
    assert_int_equal(fclose(f), 0);
    return p;
}

int tu_run(const char *cmd) {
    int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

double tu_matmul_nmse(const e0_mat *m, int64_t T, int64_t ldx, int64_t ldy, float (*rnd)(void)) {
    float *x = malloc((size_t)(T * ldx) * sizeof *x);
    float *y = malloc((size_t)(T * ldy) * sizeof *y), *yr = malloc((size_t)(T * ldy) * sizeof *yr);
    assert_true(x && y && yr);
    for (int64_t i = 0; i < T * ldx; i++)
        x[i] = rnd();
    for (int64_t i = 0; i < T * ldy; i++)
        y[i] = yr[i] = 1234.5f;
    mat_matmul(m, x, ldx, T, y, ldy);
    mat_matmul_ref(m, x, ldx, T, yr, ldy);
    double num = 0, den = 0;
    for (int64_t t = 0; t < T; t++) {
        for (int64_t r = 0; r < m->rows; r++) {
            const double d = (double)y[t * ldy + r] - yr[t * ldy + r];
            num += d * d;
            den += (double)yr[t * ldy + r] * yr[t * ldy + r];
        }
        for (int64_t r = m->rows; r < ldy; r++)
            assert_true(y[t * ldy + r] == 1234.5f);
    }
    free(x);
    free(y);
    free(yr);
    return den > 0 ? num / den : num;
}

char *tu_synth_sticky(const char *root, const char *name, double P) {
    char *dir = e0_path_join(root, name);
    e0_synth_opts so;
    e0_synth_opts_default(&so);
    so.no_sync = 1;
    so.route_stickiness = P;
    char err[E0_ERR_MAX];
    if (e0_synth_write_opts(e0_synth_find("tiny"), dir, &so, err)) fail_msg("%s: %s", dir, err);
    return dir;
}

char *tu_synth_profile(const char *root, const char *name, const char *profile) {
    char *dir = e0_path_join(root, name);
    e0_synth_opts so;
    e0_synth_opts_default(&so);
    so.no_sync = 1;
    so.route_profile = profile;
    char err[E0_ERR_MAX];
    if (e0_synth_write_opts(e0_synth_find("tiny"), dir, &so, err)) fail_msg("%s: %s", dir, err);
    return dir;
}

e0_engine *tu_open_cached(const char *dir, int32_t slots, int policy, int32_t layers,
                          int32_t experts, int32_t top_k) {
    e0_engine_opts eo;
    e0_engine_opts_default(&eo);
    eo.n_threads = 2;
    eo.io = E0_IO_PREAD; /* the trace is the shared cache's */
    eo.layer.cache_slots = slots;
    if (policy >= 0) eo.layer.cache_policy = policy;
    eo.layer.prefetch_cap = 0; /* no speculative loads: every request is the router's */
    e0_engine *e;
    char err[E0_ERR_MAX];
    if (e0_engine_open(&e, dir, &eo, err)) fail_msg("%s: %s", dir, err);
    e0_model_info in;
    e0_engine_info(e, &in);
    assert_int_equal(in.n_layers, layers);
    assert_int_equal(in.n_experts, experts);
    assert_int_equal(in.top_k, top_k);
    return e;
}

const tu_config TU_CONFIGS[TU_NCONFIGS] = {
    {"exact, 1-slot LRU", E0_PATH_EXACT, E0_IO_PREAD, 1, ""},
    {"exact, LRU", E0_PATH_EXACT, E0_IO_PREAD, 4096, ""},
    {"exact, 3-slot LRU + prefetch", E0_PATH_AUTO, E0_IO_PREAD, 3, "prefetch_threads=2"},
    {"staged n4", E0_PATH_STAGED, E0_IO_PREAD, 8, "staged=true staged_n=4"},
    {"hot 4/interval 1", E0_PATH_HOT, E0_IO_PREAD, 8, "hot_per_layer=4 hot_update_interval=1"},
    {"full", E0_PATH_FULL, E0_IO_PREAD, 8, ""},
    {"mmap", E0_PATH_AUTO, E0_IO_MMAP, 0, ""},
    {"load (repacked)", E0_PATH_AUTO, E0_IO_LOAD, 0, ""},
};

void tu_apply_config(e0_engine_opts *o, const tu_config *c, int threads) {
    char err[E0_ERR_MAX], buf[256];
    e0_engine_opts_default(o);
    o->n_threads = threads;
    o->path = c->path;
    o->io = c->io;
    o->budget_mode = E0_BUDGET_OFF;
    if (c->slots) o->layer.cache_slots = c->slots;
    o->layer.load_threads = 2;
    o->layer.prefetch_threads = 0;
    snprintf(buf, sizeof buf, "%s", c->opts);
    for (char *tok = strtok(buf, " "); tok; tok = strtok(NULL, " ")) {
        char *eq = strchr(tok, '=');
        assert_non_null(eq);
        *eq = 0;
        if (e0_opts_set(o, tok, eq + 1, err)) fail_msg("%s", err);
    }
}
