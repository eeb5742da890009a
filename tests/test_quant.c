/* Quantization formats and the reference kernels.
 *  - quant_row on the hf/ bf16 weights reproduces the mlx/ fixture's words,
 *    scales and biases byte for byte (4-bit experts and projections, 8-bit
 *    routers), so dequantization reads the layout exactly as mlx writes it.
 *  - mat_matmul on every weight type and bit width matches a float64
 *    evaluation of the dequantized matrix. */
#include "testutil.h"

#include "io/safetensors.h"
#include "edge0.h"
#include "quant/mat.h"
#include "quant/quantize.h"
#include "util/num.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static st_set *open_st(const char *rel) {
    st_set *s;
    char err[E0_ERR_MAX];
    if (st_set_open_file(&s, tu_shared(rel), err)) fail_msg("%s", err);
    return s;
}

/* Re-quantizes hf tensor `hf_name` and compares with mlx `mlx_base`.{weight,scales,biases}. */
static void check_requant(const st_set *hf, const char *hf_name, const st_set *mlx, const char *mlx_base,
                          int bits) {
    const st_tensor *src = st_get(hf, hf_name);
    char nm[256];
    snprintf(nm, sizeof nm, "%s.weight", mlx_base);
    const st_tensor *w = st_get(mlx, nm);
    snprintf(nm, sizeof nm, "%s.scales", mlx_base);
    const st_tensor *sc = st_get(mlx, nm);
    snprintf(nm, sizeof nm, "%s.biases", mlx_base);
    const st_tensor *bi = st_get(mlx, nm);
    if (!src || !w || !sc || !bi) fail_msg("missing %s or %s.*", hf_name, mlx_base);
    assert_int_equal(src->dtype, ST_BF16);
    const int64_t cols = (int64_t)src->shape[src->ndim - 1], rows = (int64_t)(st_numel(src) / (uint64_t)cols);
    const int group = 64;
    const int64_t W = cols * bits / 32, G = cols / group;
    assert_int_equal(st_numel(w), (uint64_t)(rows * W));
    float *row = malloc((size_t)cols * sizeof *row);
    uint32_t *q = malloc((size_t)W * sizeof *q);
    uint16_t *s = malloc((size_t)G * 2), *b = malloc((size_t)G * 2);
    int64_t bad = 0;
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t c = 0; c < cols; c++) row[c] = e0_bf16_to_f32(e0_ld16(src->data, (size_t)(r * cols + c)));
        quant_row(row, cols, bits, group, q, s, b);
        bad += memcmp(q, w->data + (size_t)(r * W) * 4, (size_t)W * 4) != 0;
        bad += memcmp(s, sc->data + (size_t)(r * G) * 2, (size_t)G * 2) != 0;
        bad += memcmp(b, bi->data + (size_t)(r * G) * 2, (size_t)G * 2) != 0;
    }
    printf("  %s -> %s (%d-bit): %lld rows, %lld mismatching parts\n", hf_name, mlx_base, bits, (long long)rows,
           (long long)bad);
    assert_int_equal(bad, 0);
    free(row);
    free(q);
    free(s);
    free(b);
}

static void test_requant_matches_fixture(void **state) {
    (void)state;
    st_set *hf = open_st("fixtures/qwen3moe/hf-fused/model.safetensors");
    st_set *mx = open_st("fixtures/qwen3moe/mlx/model.safetensors");
    check_requant(hf, "model.embed_tokens.weight", mx, "model.embed_tokens", 4);
    check_requant(hf, "model.layers.1.self_attn.q_proj.weight", mx, "model.layers.1.self_attn.q_proj", 4);
    check_requant(hf, "model.layers.2.mlp.gate.weight", mx, "model.layers.2.mlp.gate", 8);
    check_requant(hf, "model.layers.3.mlp.experts.down_proj", mx, "model.layers.3.mlp.switch_mlp.down_proj", 4);
    st_set_free(hf);
    st_set_free(mx);
    hf = open_st("fixtures/qwen35moe/hf-fused/model.safetensors");
    mx = open_st("fixtures/qwen35moe/mlx-fused/model.safetensors");
    check_requant(hf, "model.language_model.layers.0.mlp.experts.gate_up_proj", mx,
                  "language_model.model.layers.0.mlp.switch_mlp.gate_up_proj", 4);
    check_requant(hf, "model.language_model.layers.0.mlp.shared_expert_gate.weight", mx,
                  "language_model.model.layers.0.mlp.shared_expert_gate", 8);
    check_requant(hf, "model.language_model.layers.0.linear_attn.in_proj_qkv.weight", mx,
                  "language_model.model.layers.0.linear_attn.in_proj_qkv", 4);
    st_set_free(hf);
    st_set_free(mx);
}

static uint64_t rs = 88172645463325252ull;
static float frand(void) { /* xorshift64, uniform in [-1, 1) */
    rs ^= rs << 13;
    rs ^= rs >> 7;
    rs ^= rs << 17;
    return (float)((rs >> 11) * (2.0 / 9007199254740992.0) - 1.0);
}

/* mat_matmul vs float64 over dequantized rows, for one matrix. */
static double matmul_err(const e0_mat *m, int64_t T) {
    float *x = malloc((size_t)(T * m->cols) * sizeof *x), *y = malloc((size_t)(T * m->rows) * sizeof *y);
    float *w = malloc((size_t)m->cols * sizeof *w);
    for (int64_t i = 0; i < T * m->cols; i++) x[i] = frand();
    mat_matmul(m, x, m->cols, T, y, m->rows);
    double num = 0, den = 0;
    for (int64_t r = 0; r < m->rows; r++) {
        mat_dequant(m, r, 0, m->cols, w);
        for (int64_t t = 0; t < T; t++) {
            double d = 0;
            for (int64_t c = 0; c < m->cols; c++) d += (double)w[c] * x[t * m->cols + c];
            num += (y[t * m->rows + r] - d) * (y[t * m->rows + r] - d);
            den += d * d;
        }
    }
    free(x);
    free(y);
    free(w);
    return sqrt(num / den);
}

static void test_kernels_all_types(void **state) {
    (void)state;
    const int64_t R = 37, C = 768, T = 5;
    float *src = malloc((size_t)(R * C) * sizeof *src);
    for (int64_t i = 0; i < R * C; i++) src[i] = frand();
    /* float types */
    uint16_t *bf = malloc((size_t)(R * C) * 2);
    for (int64_t i = 0; i < R * C; i++) bf[i] = e0_f32_to_bf16(src[i]);
    e0_mat m = {.type = E0_W_BF16, .rows = R, .cols = C, .w = bf};
    double e = matmul_err(&m, T);
    printf("  bf16 matmul rel err %.2g\n", e);
    assert_true(e < 1e-6);
    m = (e0_mat){.type = E0_W_F32, .rows = R, .cols = C, .w = src};
    e = matmul_err(&m, T);
    printf("  f32 matmul rel err %.2g\n", e);
    assert_true(e < 1e-6);
    /* f16: 1.0, -2.5, 65504, a subnormal */
    const uint16_t h[4] = {0x3c00, 0xc100, 0x7bff, 0x0001};
    const float want[4] = {1.0f, -2.5f, 65504.0f, 5.9604645e-8f};
    for (int i = 0; i < 4; i++) assert_true(e0_f16_to_f32(h[i]) == want[i]);
    /* quantized: every bit width and group, dequantized values within half a step */
    const int bitss[] = {2, 3, 4, 5, 6, 8}, groups[] = {32, 64, 128};
    for (size_t bi = 0; bi < 6; bi++)
        for (size_t gi = 0; gi < 3; gi++) {
            int bits = bitss[bi], g = groups[gi];
            int64_t W = C * bits / 32, G = C / g;
            uint32_t *q = malloc((size_t)(R * W) * 4);
            uint16_t *s = malloc((size_t)(R * G) * 2), *b = malloc((size_t)(R * G) * 2);
            for (int64_t r = 0; r < R; r++) quant_row(src + r * C, C, bits, g, q + r * W, s + r * G, b + r * G);
            e0_mat qm = {.type = E0_W_QAFF, .rows = R, .cols = C, .bits = bits, .group = g, .stype = E0_S_BF16,
                         .w = q, .scales = s, .biases = b};
            float row[768];
            double sum = 0;
            const double nb = (double)((1 << bits) - 1);
            for (int64_t r = 0; r < R; r++) {
                mat_dequant(&qm, r, 0, C, row);
                for (int64_t c = 0; c < C; c++) {
                    double sc = fabs(e0_bf16_to_f32(s[r * G + c / g])), bs = fabs(e0_bf16_to_f32(b[r * G + c / g]));
                    double err = fabs(row[c] - src[r * C + c]);
                    /* rounding is half a step; the quantizer pins one edge of the
                     * range, so clipping at the other may cost a step; storing
                     * scale and bias in bf16 moves values by up to 2^-8 of them */
                    double bound = sc + (bs + nb * sc) * (1.0 / 256) + 1e-6;
                    if (err > bound)
                        fail_msg("%d-bit group %d row %lld col %lld: |dq - w| = %.3g > %.3g", bits, g, (long long)r,
                                 (long long)c, err, bound);
                    sum += err / sc;
                }
            }
            /* a misplaced bit would cost a step or more on average */
            double mean = sum / (double)(R * C), me = matmul_err(&qm, T);
            if (!(mean < 0.45) || !(me < 1e-6))
                fail_msg("%d-bit group %d: mean |dq - w| %.3f steps, matmul err %.2g", bits, g, mean, me);
            free(q);
            free(s);
            free(b);
        }
    /* views: rows of a stacked matrix are the same as the whole */
    e0_mat whole = {.type = E0_W_BF16, .rows = R, .cols = C, .w = bf};
    e0_mat part = mat_rows(&whole, 10, 7);
    float a[768], c2[768];
    mat_dequant(&whole, 12, 0, C, a);
    mat_dequant(&part, 2, 0, C, c2);
    assert_memory_equal(a, c2, sizeof a);
    free(bf);
    free(src);
}

/* The vectorizable quant_row equals quant_row_ref bit for bit, on every
 * width and group and on awkward rows (huge, constant, zeros, one-sided). */
static void test_quant_row_fast(void **state) {
    (void)state;
    const int64_t cols = 1024;
    float *w = malloc((size_t)cols * sizeof *w);
    uint32_t *qa = malloc((size_t)cols), *qb = malloc((size_t)cols);
    uint16_t *sa = malloc((size_t)cols), *sb = malloc((size_t)cols), *ba = malloc((size_t)cols), *bb = malloc((size_t)cols);
    assert_true(w && qa && qb && sa && sb && ba && bb);
    uint64_t x = 0x9e3779b97f4a7c15ull;
    static const int bits[] = {2, 3, 4, 5, 6, 8}, groups[] = {32, 64, 128};
    int rows = 0;
    for (int rep = 0; rep < 40; rep++) {
        for (int64_t i = 0; i < cols; i++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            float u = (float)(x >> 40) / (float)(1 << 24) - 0.5f;
            switch (rep % 5) {
            case 0: w[i] = u; break;
            case 1: w[i] = u * 1e4f + (i % 64 == 0 ? 3e4f : 0); break;       /* large, skewed */
            case 2: w[i] = i % 128 < 64 ? 0.25f : u * 1e-9f; break;           /* constant, tiny range */
            case 3: w[i] = i % 3 ? 0.0f : u; break;                           /* mostly zeros */
            default: w[i] = u > 0.2f ? u : -fabsf(u) * 0.01f; break;          /* one-sided */
            }
        }
        for (size_t bi = 0; bi < 6; bi++)
            for (size_t gi = 0; gi < 3; gi++) {
                const int B = bits[bi], G = groups[gi];
                const size_t nw = (size_t)(cols * B / 32) * 4, ns = (size_t)(cols / G) * 2;
                memset(qa, 0xab, (size_t)cols);
                memset(qb, 0xcd, (size_t)cols);
                quant_row_ref(w, cols, B, G, qa, sa, ba);
                quant_row(w, cols, B, G, qb, sb, bb);
                assert_memory_equal(qa, qb, nw);
                assert_memory_equal(sa, sb, ns);
                assert_memory_equal(ba, bb, ns);
                rows++;
            }
    }
    printf("  %d rows x %lld columns: quant_row == quant_row_ref\n", rows, (long long)cols);
    free(w), free(qa), free(qb), free(sa), free(sb), free(ba), free(bb);
}

int main(void) {
    e0_set_kernels(E0_KERNELS_EXACT); /* matmul_err's 1e-6 is the exact sets' (quant/mat.h) */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_requant_matches_fixture),
        cmocka_unit_test(test_kernels_all_types),
        cmocka_unit_test(test_quant_row_fast),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
