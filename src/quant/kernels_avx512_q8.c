/* AVX-512 VNNI kernels (quant/kernels.h): q4 weights against int8
 * activation planes, in rows, in 16-row panels packed per call, on the
 * 16-row panel layout (E0_L_P16) and on the file layout for few tokens;
 * the activations' int8 preparation. Compiled with target attributes, as
 * kernels_avx512.c (whose helpers they share: kernels_avx512.h); the
 * arithmetic of each (row, token) is written above each kernel. */
#include "quant/kernels_avx512.h"

#if defined(__x86_64__)

/* ---- q4 weights x int8 activations (AVX-512 VNNI) ----------------------------
 * Activations are quantized per 32 values (k_prep_q8) into P int8 planes:
 * d = amax / 127, n = rint(x * (1 / d) * 256^(P-1)) split into signed
 * base-256 digits q1 q2 q3, so x ~ d (q1 + q2 / 256 + q3 / 65536): about
 * 8, 16 or 24 bits. A block is
 * 16 words = 128 values; byte j of the block's weights holds columns 2j
 * (low nibble) and 2j + 1 (high nibble), so each plane of xq stores the
 * block's even columns, then its odd ones, and vpdpbusd lane l sums columns
 * 8l..8l+7 exactly in int32. Lane l lies in one weight group and one
 * activation block (xdl: d / 256^(P-1) per lane). Per (row, token):
 *   for each block b: acc = dpbusd(dpbusd(0, lo_b, x1lo_b), hi_b, x1hi_b)
 *                     each further plane p: acc = dpbusd(dpbusd(acc << 8, lo_b, xplo_b), hi_b,
 * xphi_b) tot = fma(float(acc) * xdl_b, s_b, tot) y = reduce_add(tot + bt)       (bt: bias_terms
 * over the group sums of the quantized x) |acc| < 2^31 with three planes (8 columns x 15 x 128 x
 * 65793); float(acc) is exact up to two planes and rounds like any f32 sum with three.
 */

INLV void q4x8_tile(const e0_mat *m, const k_act *a, __m512i gpat, int64_t r, const int R,
                    int64_t t0, const int TT, const int P, float *y, int64_t ldy) {
    const int64_t wpr = m->cols / 8;
    const __m512i lo4 = _mm512_set1_epi8(0x0f);
    const int8_t *xq[8];
    const float *xd[8];
    UNROLL
    for (int t = 0; t < TT; t++) {
        xq[t] = a->xq + (t0 + t) * a->ldxq;
        xd[t] = a->xd + (t0 + t) * a->ldxd;
    }
    __m512 tot[4][8], sc[4] = {0};
    int64_t sbase = -16;
    tile_zero(R, TT, tot);
    for (int64_t b = 0; b * 16 < wpr; b++) {
        __m512i d[4], lo[4], hi[4];
        __m512 sv[4];
        q4_block(m, r, R, gpat, b, sc, &sbase, d, sv);
        UNROLL
        for (int i = 0; i < R; i++) {
            lo[i] = _mm512_and_si512(d[i], lo4);
            hi[i] = _mm512_and_si512(_mm512_srli_epi16(d[i], 4), lo4);
        }
        UNROLL
        for (int t = 0; t < TT; t++) {
            const int8_t *xb = xq[t] + b * 128 * P;
            const __m512i x1l = _mm512_loadu_si512(xb), x1h = _mm512_loadu_si512(xb + 64);
            const __m512 dx = _mm512_loadu_ps(xd[t] + b * 16);
            UNROLL
            for (int i = 0; i < R; i++) {
                /* each plane's sums on their own (short dependency chains),
                 * then acc = (acc << 8) + plane: the same int32 as shifting
                 * between the planes' dot products */
                __m512i pl[3];
                pl[0] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), lo[i], x1l);
                pl[0] = _mm512_dpbusd_epi32(pl[0], hi[i], x1h);
                UNROLL
                for (int p = 1; p < P; p++) {
                    pl[p] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), lo[i],
                                                _mm512_loadu_si512(xb + 128 * p));
                    pl[p] = _mm512_dpbusd_epi32(pl[p], hi[i], _mm512_loadu_si512(xb + 128 * p + 64));
                }
                __m512i acc = pl[0];
                UNROLL
                for (int p = 1; p < P; p++)
                    acc = _mm512_add_epi32(_mm512_slli_epi32(acc, 8), pl[p]);
                tot[i][t] =
                    _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(acc), dx), sv[i], tot[i][t]);
            }
        }
    }
    tile_end(m, a, r, R, t0, TT, tot, y, ldy);
}

#define Q4X8_TILE(R, TT, P)                                                                        \
    TGTV static void q4x8_tile_##R##x##TT##_##P(const e0_mat *m, const k_act *a, __m512i gp,       \
                                                int64_t r, int64_t t0, float *y, int64_t ldy) {    \
        q4x8_tile(m, a, gp, r, R, t0, TT, P, y, ldy);                                              \
    }
/* Per plane count: 4 rows x 1..3 tokens (T < 4: decode, and the experts of
 * a batch that few of its tokens route to), 2 rows x 4 tokens, and single
 * rows of each; a tile decodes a block's nibbles once for all its tokens. */
#define Q4X8_TILES(P)                                                                              \
    Q4X8_TILE(4, 1, P)                                                                             \
    Q4X8_TILE(4, 2, P)                                                                             \
    Q4X8_TILE(4, 3, P)                                                                             \
    Q4X8_TILE(2, 4, P)                                                                             \
    Q4X8_TILE(1, 1, P)                                                                             \
    Q4X8_TILE(1, 2, P)                                                                             \
    Q4X8_TILE(1, 3, P)                                                                             \
    Q4X8_TILE(1, 4, P)
Q4X8_TILES(1)
Q4X8_TILES(2)
Q4X8_TILES(3)

/* tiles: [TT - 1] the multi-row tile for TT tokens (4 rows for TT < 4, 2 for
 * TT = 4), [4 + TT - 1] its single-row twin. */
INLV void q4x8_rows(const e0_mat *m, const k_act *a, int64_t r0, int64_t r1, float *y, int64_t ldy,
                    const q4_tile_fn tiles[8]) {
    const __m512i gp = q4_gpat(m->group);
    for (int64_t rb = r0; rb < r1; rb += RB) {
        const int64_t re = rb + RB < r1 ? rb + RB : r1;
        for (int64_t t0 = 0; t0 < a->T;) {
            const int64_t left = a->T - t0;
            const int TT = left >= 4 ? 4 : (int)left;
            const int R = TT == 4 ? 2 : 4;
            int64_t r = rb;
            for (; r + R <= re; r += R)
                tiles[TT - 1](m, a, gp, r, t0, y, ldy);
            for (; r < re; r++)
                tiles[4 + TT - 1](m, a, gp, r, t0, y, ldy);
            t0 += TT;
        }
    }
}

#define Q4X8_ROWS(P)                                                                               \
    TGTV static void q4x8_rows_##P(const e0_mat *m, const k_act *a, int64_t r0, int64_t r1,       \
                                   float *y, int64_t ldy) {                                        \
        static const q4_tile_fn t[8] = {q4x8_tile_4x1_##P, q4x8_tile_4x2_##P, q4x8_tile_4x3_##P,   \
                                        q4x8_tile_2x4_##P, q4x8_tile_1x1_##P, q4x8_tile_1x2_##P,   \
                                        q4x8_tile_1x3_##P, q4x8_tile_1x4_##P};                     \
        q4x8_rows(m, a, r0, r1, y, ldy, t);                                                        \
    }
Q4X8_ROWS(1)
Q4X8_ROWS(2)
Q4X8_ROWS(3)

/* split_digits (mat.c) of 16 int32 lanes: out[p], sign-extended digits. */
INLV void split_digits16(__m512i n, int planes, __m512i out[3]) {
    __m512i rest = n;
    for (int p = planes - 1; p > 0; p--) { /* sign-extended low byte, then the rest / 256 */
        out[p] = _mm512_srai_epi32(_mm512_slli_epi32(rest, 24), 24);
        rest = _mm512_srai_epi32(_mm512_sub_epi32(rest, out[p]), 8);
    }
    out[0] =
        _mm512_max_epi32(_mm512_min_epi32(rest, _mm512_set1_epi32(127)), _mm512_set1_epi32(-128));
}

/* ---- q4 weights x int8 activations, 16-row panels (batches) -----------------
 * For T >= K_PANEL_MIN_T tokens. The row kernels above spend three float
 * operations per 128 columns of every (row, token) turning lane sums into
 * floats; here the lanes are 16 rows, so the int32 sums run over a whole
 * weight group and the float work is once per group.
 *
 * Activations (k_prep_qg) are quantized per weight group instead of per 32
 * values: d_g = amax_g / 127, n = rint(x / d_g * 256^(P-1)) in signed
 * base-256 digits; per group and plane the even columns, then the odd ones.
 * Weights: 16 rows x 16 words are transposed so that a vector holds one
 * word (8 columns) of 16 rows, split into its low nibbles (even columns) and
 * high nibbles (odd columns) as bytes: vpdpbusd of such a vector with the
 * matching 4 activation bytes, broadcast, adds 4 products to every row.
 * This packing happens once per panel and PANEL_TB tokens.
 *
 * Per (row, token), over groups g in order:
 *   P = 1:  B = sum q x1                         f = float(B)
 *   P = 2:  B = (sum q x1) << 8 + sum q x2       f = float(B)
 *   P = 3:  A = sum q x1, B = (sum q x2) << 8 + sum q x3,  f = fma(float(A), 65536, float(B))
 *   tot = fma(f, s_g * dl_g, tot);  tot = fma(b_g, xsum_g, tot)
 * (dl_g = d_g / 256^(P-1); xsum_g: the sum of the quantized x over the
 * group). Sums are exact in int32: |B| <= 15 * 127 * 128 * 257 < 2^31 for
 * groups up to 128. The result does not depend on which rows or tokens
 * share a tile, on the thread split or on T, as long as T >= K_PANEL_MIN_T. */

#define PANEL_TB        64          /* tokens per packing of a panel */
#define PANEL_MAX_WORDS (K_PANEL_MAX_COLS / 8)

/* Scales and biases of rows r..r+nr (nr <= 16; the other lanes 0) for
 * groups g0 .. g0 + 15 (those before ng), transposed: the first `cnt`
 * groups' 16-row vectors to sv + 16 g and bv + 16 g. */
INLV void sb_tr16(const e0_mat *m, int64_t r, int nr, int64_t g0, int64_t ng, int64_t cnt,
                  float *sv, float *bv) {
    const int64_t n = ng - g0 >= 16 ? 16 : ng - g0;
    __m512i s[16], b[16];
    UNROLL
    for (int i = 0; i < 16; i++) {
        s[i] = i < nr ? _mm512_castps_si512(ld_s16(m->stype, m->scales, (r + i) * ng + g0, n))
                      : _mm512_setzero_si512();
        b[i] = i < nr ? _mm512_castps_si512(ld_s16(m->stype, m->biases, (r + i) * ng + g0, n))
                      : _mm512_setzero_si512();
    }
    k_tr16(s);
    k_tr16(b);
    for (int64_t g = 0; g < cnt; g++) {
        _mm512_storeu_si512(sv + 16 * g, s[g]);
        _mm512_storeu_si512(bv + 16 * g, b[g]);
    }
}

/* Rows r..r+nr (nr <= 16; the others are zero) of m into pk (two vectors
 * per word: low nibbles, high nibbles) and their scales and biases into
 * svp, bvp (16 per group). */
TGTV static void qp_pack(const e0_mat *m, int64_t r, int nr, __m512i *pk, float *svp, float *bvp) {
    const int64_t wpr = m->cols / 8, ng = m->cols / m->group;
    const uint32_t *w = (const uint32_t *)m->w + r * wpr;
    const __m512i lo4 = _mm512_set1_epi8(0x0f);
    for (int64_t c0 = 0; c0 < wpr; c0 += 16) {
        const int64_t left = wpr - c0;
        const __mmask16 k = left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1);
        __m512i v[16];
        UNROLL
        for (int i = 0; i < 16; i++)
            v[i] = i < nr ? _mm512_maskz_loadu_epi32(k, w + i * wpr + c0) : _mm512_setzero_si512();
        k_tr16(v);
        const int nc = left >= 16 ? 16 : (int)left;
        for (int c = 0; c < nc; c++) {
            pk[2 * (c0 + c)] = _mm512_and_si512(v[c], lo4);
            pk[2 * (c0 + c) + 1] = _mm512_and_si512(_mm512_srli_epi32(v[c], 4), lo4);
        }
    }
    /* scales and biases: 16 rows x 16 groups at a time, transposed */
    for (int64_t g0 = 0; g0 < ng; g0 += 16)
        sb_tr16(m, r, nr, g0, ng, ng - g0 >= 16 ? 16 : ng - g0, svp + g0 * 16, bvp + g0 * 16);
}

/* acc[t] += the products of one plane over the group's wpg words; xp[t]:
 * the plane's even columns, its odd ones `half` bytes on. */
INLV void qp_plane(__m512i acc[8], const __m512i *wp, int wpg, const int8_t *const xp[8], int half,
                   const int TT) {
#pragma GCC unroll 4
    for (int w = 0; w < wpg; w++) {
        const __m512i lo = wp[2 * w], hi = wp[2 * w + 1];
        UNROLL
        for (int t = 0; t < TT; t++) {
            int32_t e, o;
            memcpy(&e, xp[t] + 4 * w, 4);
            memcpy(&o, xp[t] + half + 4 * w, 4);
            acc[t] = _mm512_dpbusd_epi32(acc[t], lo, _mm512_set1_epi32(e));
            acc[t] = _mm512_dpbusd_epi32(acc[t], hi, _mm512_set1_epi32(o));
        }
    }
}

INLV void qp_tile(const __m512i *pk, const float *svp, const float *bvp, int64_t ng, int wpg,
                  const k_act *a, int64_t t0, const int TT, const int P, float *y, int64_t ldy,
                  __mmask16 rmask) {
    const int G = 8 * wpg, half = G / 2;
    const int8_t *xt[8];
    const float *xd[8], *xs[8];
    __m512 tot[8];
    UNROLL
    for (int t = 0; t < TT; t++) {
        xt[t] = a->xg + (t0 + t) * a->ldxg;
        xd[t] = a->xgd + (t0 + t) * a->ldxgd;
        xs[t] = a->xgs + (t0 + t) * a->ldxgd;
        tot[t] = _mm512_setzero_ps();
    }
    for (int64_t g = 0; g < ng; g++) {
        const __m512i *wp = pk + g * wpg * 2;
        const int8_t *xp[8];
        __m512i A[8], B[8];
        __m512 f[8];
        UNROLL
        for (int t = 0; t < TT; t++)
            B[t] = _mm512_setzero_si512();
        if (P == 3) {
            UNROLL
            for (int t = 0; t < TT; t++) {
                A[t] = _mm512_setzero_si512();
                xp[t] = xt[t] + g * 3 * G;
            }
            qp_plane(A, wp, wpg, xp, half, TT);
        }
        UNROLL
        for (int t = 0; t < TT; t++)
            xp[t] = xt[t] + (g * P + (P == 3)) * G;
        qp_plane(B, wp, wpg, xp, half, TT);
        if (P >= 2) {
            UNROLL
            for (int t = 0; t < TT; t++) {
                B[t] = _mm512_slli_epi32(B[t], 8);
                xp[t] += G;
            }
            qp_plane(B, wp, wpg, xp, half, TT);
        }
        UNROLL
        for (int t = 0; t < TT; t++)
            f[t] = P == 3 ? _mm512_fmadd_ps(_mm512_cvtepi32_ps(A[t]), _mm512_set1_ps(65536.0f),
                                            _mm512_cvtepi32_ps(B[t]))
                          : _mm512_cvtepi32_ps(B[t]);
        const __m512 sv = _mm512_loadu_ps(svp + 16 * g), bv = _mm512_loadu_ps(bvp + 16 * g);
        UNROLL
        for (int t = 0; t < TT; t++) {
            tot[t] = _mm512_fmadd_ps(f[t], _mm512_mul_ps(sv, _mm512_set1_ps(xd[t][g])), tot[t]);
            tot[t] = _mm512_fmadd_ps(bv, _mm512_set1_ps(xs[t][g]), tot[t]);
        }
    }
    UNROLL
    for (int t = 0; t < TT; t++)
        _mm512_mask_storeu_ps(y + (t0 + t) * ldy, rmask, tot[t]);
}

#define QP_TILE(TT, P)                                                                             \
    TGTV static void qp_tile_##TT##_##P(const __m512i *pk, const float *svp, const float *bvp,     \
                                        int64_t ng, int wpg, const k_act *a, int64_t t0, float *y, \
                                        int64_t ldy, __mmask16 rmask) {                            \
        qp_tile(pk, svp, bvp, ng, wpg, a, t0, TT, P, y, ldy, rmask);                               \
    }
QP_TILE(8, 1)
QP_TILE(4, 1)
QP_TILE(2, 1)
QP_TILE(1, 1)
QP_TILE(8, 2)
QP_TILE(4, 2)
QP_TILE(2, 2)
QP_TILE(1, 2)
QP_TILE(8, 3)
QP_TILE(4, 3)
QP_TILE(2, 3)
QP_TILE(1, 3)

typedef void (*qp_tile_fn)(const __m512i *, const float *, const float *, int64_t, int,
                           const k_act *, int64_t, float *, int64_t, __mmask16);

/* The packed panel of the calling thread: 2 vectors per word, 16 scales and
 * biases per group (groups of at least 32 columns). */
static _Thread_local __m512i qp_pk[2 * PANEL_MAX_WORDS];
static _Thread_local float qp_sv[16 * (PANEL_MAX_WORDS / 4)], qp_bv[16 * (PANEL_MAX_WORDS / 4)];

/* The next panel's bytes into L2 while this one computes: its rows (and
 * their scales and biases) are contiguous, and packing them straight from
 * DRAM stalls on 16 row streams at once. */
INLV void qp_prefetch(const e0_mat *m, int64_t r, int64_t nr) {
    const size_t wb = (size_t)(m->cols / 2),
                 sb = (size_t)(m->cols / m->group) * (m->stype == E0_S_F32 ? 4 : 2);
    const char *w = (const char *)m->w + (size_t)r * wb,
               *sc = (const char *)m->scales + (size_t)r * sb;
    const char *bi = (const char *)m->biases + (size_t)r * sb;
    for (size_t o = 0; o < (size_t)nr * wb; o += 64)
        _mm_prefetch(w + o, _MM_HINT_T1);
    for (size_t o = 0; o < (size_t)nr * sb; o += 64) {
        _mm_prefetch(sc + o, _MM_HINT_T1);
        _mm_prefetch(bi + o, _MM_HINT_T1);
    }
}

INLV void qp_rows(const e0_mat *m, const k_act *a, int64_t r0, int64_t r1, float *y, int64_t ldy,
                  const qp_tile_fn tiles[4]) {
    const int64_t ng = m->cols / m->group;
    const int wpg = (int)(m->group / 8);
    for (int64_t tb = 0; tb < a->T; tb += PANEL_TB) {
        const int64_t te = tb + PANEL_TB < a->T ? tb + PANEL_TB : a->T;
        for (int64_t r = r0; r < r1; r += 16) {
            const int nr = r1 - r >= 16 ? 16 : (int)(r1 - r);
            const __mmask16 rmask = (__mmask16)((1u << nr) - 1);
            qp_pack(m, r, nr, qp_pk, qp_sv, qp_bv);
            if (r + 16 < r1) qp_prefetch(m, r + 16, r1 - r - 16 >= 16 ? 16 : r1 - r - 16);
            for (int64_t t0 = tb; t0 < te;) {
                const int64_t left = te - t0;
                const int TT = left >= 8 ? 8 : left >= 4 ? 4 : left >= 2 ? 2 : 1;
                tiles[TT == 8   ? 0
                      : TT == 4 ? 1
                      : TT == 2 ? 2
                                : 3](qp_pk, qp_sv, qp_bv, ng, wpg, a, t0, y + r, ldy, rmask);
                t0 += TT;
            }
        }
    }
}

TGTV static void qp_rows_1(const e0_mat *m, const k_act *a, int64_t r0, int64_t r1, float *y,
                           int64_t ldy) {
    static const qp_tile_fn t[4] = {qp_tile_8_1, qp_tile_4_1, qp_tile_2_1, qp_tile_1_1};
    qp_rows(m, a, r0, r1, y, ldy, t);
}

TGTV static void qp_rows_2(const e0_mat *m, const k_act *a, int64_t r0, int64_t r1, float *y,
                           int64_t ldy) {
    static const qp_tile_fn t[4] = {qp_tile_8_2, qp_tile_4_2, qp_tile_2_2, qp_tile_1_2};
    qp_rows(m, a, r0, r1, y, ldy, t);
}

TGTV static void qp_rows_3(const e0_mat *m, const k_act *a, int64_t r0, int64_t r1, float *y,
                           int64_t ldy) {
    static const qp_tile_fn t[4] = {qp_tile_8_3, qp_tile_4_3, qp_tile_2_3, qp_tile_1_3};
    qp_rows(m, a, r0, r1, y, ldy, t);
}

/* ---- q4 weights x int8 activations on 16-row panels (E0_L_P16, mat.h) -----
 * The panel arithmetic above, read straight from the layout mat_repack_p16
 * made at load: no packing per call, and one stream of bytes per panel with
 * the scales and biases inline. A vector of the layout is one word (8
 * columns) of 16 rows; its low nibbles (even columns) and high nibbles (odd
 * ones) are split in registers, and vpdpbusd against the matching 4
 * activation bytes, broadcast, adds 4 products to every row.
 *
 * Per (row, token), over groups g in order, with S_p the int32 sum of plane
 * p's products over the group (exact, so the order of the additions does
 * not matter: with few tokens a plane sums into up to four accumulators,
 * split by nibble half and word parity, for short dependency chains):
 *   P = 1:  f = float(S_1)
 *   P = 2:  f = float((S_1 << 8) + S_2)
 *   P = 3:  f = fma(float(S_1), 65536, float((S_2 << 8) + S_3))
 *   tot = fma(f, s_g * dl_g, tot);  tot = fma(b_g, xsum_g, tot)
 * which is qp_tile's float work in qp_tile's order: results are
 * bit-identical to the panel kernels on the file layout, at every T. */

/* Prefetch distance in bytes (14 groups of 64 columns). A decode matvec
 * streams panels at ~20 GB/s per core against a miss latency of several
 * hundred ns on these VMs, so about 8 KiB must be in flight; at 1 KiB the
 * software prefetch did nothing the hardware's did not (experiments 49). */
#ifndef P16_PF
#define P16_PF 8192
#endif

/* 16 scales or biases (BF16 or F16) as f32. */
INLV __m512 p16_s16(e0_stype st, const uint8_t *p) {
    const __m256i h = _mm256_loadu_si256((const __m256i *)p);
    if (st == E0_S_F16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* One word (8 columns) of 16 rows, v, against tokens xt[0..TT) of group
 * g: each plane's products into acc[p][t] (K accumulators per plane: 4 =
 * nibble half x word parity, 2 = nibble half, 1). */
INLV void pg_word(__m512i acc[3][8][4], __m512i v, int w, int64_t g, const int8_t *const xt[8],
                  const int G, const int TT, const int P, const int K) {
    const __m512i lo4 = _mm512_set1_epi8(0x0f);
    const __m512i lo = _mm512_and_si512(v, lo4);
    const __m512i hi = _mm512_and_si512(_mm512_srli_epi32(v, 4), lo4);
    const int kl = K == 4 ? 2 * (w & 1) : 0, kh = K == 1 ? 0 : kl + 1;
    UNROLL
    for (int t = 0; t < TT; t++)
        UNROLL
    for (int p = 0; p < P; p++) {
        const int8_t *xp = xt[t] + (g * P + p) * G;
        int32_t e, o;
        memcpy(&e, xp + 4 * w, 4);
        memcpy(&o, xp + G / 2 + 4 * w, 4);
        acc[p][t][kl] = _mm512_dpbusd_epi32(acc[p][t][kl], lo, _mm512_set1_epi32(e));
        acc[p][t][kh] = _mm512_dpbusd_epi32(acc[p][t][kh], hi, _mm512_set1_epi32(o));
    }
}

INLV void pg_zero(__m512i acc[3][8][4], const int TT, const int P, const int K) {
    UNROLL
    for (int p = 0; p < P; p++)
        UNROLL
    for (int t = 0; t < TT; t++)
        UNROLL
    for (int k = 0; k < K; k++)
        acc[p][t][k] = _mm512_setzero_si512();
}

/* The end of group g: its sums into tot[t] with the 16 rows' scales sv and
 * biases bv, in the order written above. */
INLV void pg_finish(__m512i acc[3][8][4], __m512 sv, __m512 bv, int64_t g, const float *const xd[8],
                    const float *const xs[8], __m512 tot[8], const int TT, const int P,
                    const int K) {
    UNROLL
    for (int t = 0; t < TT; t++) {
        __m512i S[3];
        UNROLL
        for (int p = 0; p < P; p++) {
            S[p] = acc[p][t][0];
            UNROLL
            for (int k = 1; k < K; k++)
                S[p] = _mm512_add_epi32(S[p], acc[p][t][k]);
        }
        const __m512i B = P == 1   ? S[0]
                          : P == 2 ? _mm512_add_epi32(_mm512_slli_epi32(S[0], 8), S[1])
                                   : _mm512_add_epi32(_mm512_slli_epi32(S[1], 8), S[2]);
        const __m512 f = P == 3 ? _mm512_fmadd_ps(_mm512_cvtepi32_ps(S[0]), _mm512_set1_ps(65536.0f),
                                                  _mm512_cvtepi32_ps(B))
                                : _mm512_cvtepi32_ps(B);
        tot[t] = _mm512_fmadd_ps(f, _mm512_mul_ps(sv, _mm512_set1_ps(xd[t][g])), tot[t]);
        tot[t] = _mm512_fmadd_ps(bv, _mm512_set1_ps(xs[t][g]), tot[t]);
    }
}

INLV void pg_act(const k_act *a, int64_t t0, const int TT, const int8_t *xt[8], const float *xd[8],
                 const float *xs[8], __m512 tot[8]) {
    UNROLL
    for (int t = 0; t < TT; t++) {
        xt[t] = a->xg + (t0 + t) * a->ldxg;
        xd[t] = a->xgd + (t0 + t) * a->ldxgd;
        xs[t] = a->xgs + (t0 + t) * a->ldxgd;
        tot[t] = _mm512_setzero_ps();
    }
}

/* Tokens t0..t0+TT of the panel at pan (ng groups of wpg words per row)
 * into y[t, 0..16). */
INLV void p16_tile(const uint8_t *pan, int64_t ng, const int wpg, e0_stype st, const k_act *a,
                   int64_t t0, const int TT, const int P, float *y, int64_t ldy) {
    const int G = 8 * wpg, K = TT == 1 ? 4 : TT <= 3 ? 2 : 1;
    const int64_t gb = (int64_t)wpg * 64 + 64;
    const int8_t *xt[8];
    const float *xd[8], *xs[8];
    __m512 tot[8];
    pg_act(a, t0, TT, xt, xd, xs, tot);
    for (int64_t g = 0; g < ng; g++) {
        const uint8_t *gp = pan + g * gb;
        for (int64_t c = 0; c < gb; c += 64)
            _mm_prefetch((const char *)gp + P16_PF + c, _MM_HINT_T0);
        __m512i acc[3][8][4];
        pg_zero(acc, TT, P, K);
#pragma GCC unroll 16
        for (int w = 0; w < wpg; w++)
            pg_word(acc, _mm512_loadu_si512(gp + 64 * w), w, g, xt, G, TT, P, K);
        pg_finish(acc, p16_s16(st, gp + 64 * wpg), p16_s16(st, gp + 64 * wpg + 32), g, xd, xs, tot,
                  TT, P, K);
    }
    UNROLL
    for (int t = 0; t < TT; t++)
        _mm512_storeu_ps(y + (t0 + t) * ldy, tot[t]);
}

typedef void (*p16_tile_fn)(const uint8_t *, int64_t, e0_stype, const k_act *, int64_t, float *,
                            int64_t);

/* One instance per (tokens, planes, words per group). */
#define P16_TILE(TT, P, W)                                                                         \
    TGTV static void p16_tile_##TT##_##P##_##W(const uint8_t *pan, int64_t ng, e0_stype st,        \
                                               const k_act *a, int64_t t0, float *y,               \
                                               int64_t ldy) {                                      \
        p16_tile(pan, ng, W, st, a, t0, TT, P, y, ldy);                                            \
    }
#define P16_TILES(P, W)                                                                            \
    P16_TILE(8, P, W) P16_TILE(4, P, W) P16_TILE(3, P, W) P16_TILE(2, P, W) P16_TILE(1, P, W)
P16_TILES(1, 4)
P16_TILES(1, 8)
P16_TILES(1, 16)
P16_TILES(2, 4)
P16_TILES(2, 8)
P16_TILES(2, 16)
P16_TILES(3, 4)
P16_TILES(3, 8)
P16_TILES(3, 16)

/* tiles: 8, 4, 3, 2, 1 tokens. Rows [r0, r1) start and end on panels. */
INLV void p16_rows(const e0_mat *m, const k_act *a, int64_t r0, int64_t r1, float *y, int64_t ldy,
                   const p16_tile_fn tiles[5]) {
    const int64_t ng = m->cols / m->group;
    const size_t pb = 16 * mat_row_bytes(m);
    for (int64_t tb = 0; tb < a->T; tb += PANEL_TB) {
        const int64_t te = tb + PANEL_TB < a->T ? tb + PANEL_TB : a->T;
        for (int64_t r = r0; r < r1; r += 16) {
            const uint8_t *pan = (const uint8_t *)m->w + (size_t)(r / 16) * pb;
            for (int64_t t0 = tb; t0 < te;) {
                const int64_t left = te - t0;
                const int TT = left >= 8 ? 8 : left >= 4 ? 4 : (int)left;
                tiles[TT == 8 ? 0 : TT == 4 ? 1 : 5 - TT](pan, ng, m->stype, a, t0, y + r, ldy);
                t0 += TT;
            }
        }
    }
}

#define P16_ROWS(P, W)                                                                             \
    TGTV static void p16_rows_##P##_##W(const e0_mat *m, const k_act *a, int64_t r0, int64_t r1,   \
                                        float *y, int64_t ldy) {                                   \
        static const p16_tile_fn t[5] = {p16_tile_8_##P##_##W, p16_tile_4_##P##_##W,               \
                                         p16_tile_3_##P##_##W, p16_tile_2_##P##_##W,               \
                                         p16_tile_1_##P##_##W};                                    \
        p16_rows(m, a, r0, r1, y, ldy, t);                                                         \
    }
P16_ROWS(1, 4)
P16_ROWS(1, 8)
P16_ROWS(1, 16)
P16_ROWS(2, 4)
P16_ROWS(2, 8)
P16_ROWS(2, 16)
P16_ROWS(3, 4)
P16_ROWS(3, 8)
P16_ROWS(3, 16)

static k_rows_fn p16_pick(const e0_mat *m, int planes) {
    static const k_rows_fn f[3][3] = {{p16_rows_1_4, p16_rows_1_8, p16_rows_1_16},
                                      {p16_rows_2_4, p16_rows_2_8, p16_rows_2_16},
                                      {p16_rows_3_4, p16_rows_3_8, p16_rows_3_16}};
    return f[planes - 1][m->group == 32 ? 0 : m->group == 64 ? 1 : 2];
}

/* ---- the same arithmetic on the file layout, for few tokens -----------------
 * For calls of fewer than K_PANEL_MIN_T tokens on a matrix in the file's
 * layout (--io mmap / pread, and matrices not repacked) under a set that
 * uses the panel arithmetic there (avx512-mixed): qp_rows packs a panel
 * into memory per call, which costs more than the few tokens' work, so
 * here 16 rows x 16 words are transposed in registers (tr16) and fed
 * straight to pg_word; scales and biases are transposed 16 groups at a
 * time onto the stack. Per (row, token) the sums and the float order are
 * p16_tile's: bit-identical to it and to qp_rows. The next panel's rows
 * are prefetched block by block. */
INLV void qf_tile(const e0_mat *m, int64_t r, int nr, const int wpg, const k_act *a, int64_t t0,
                  const int TT, const int P, float *y, int64_t ldy) {
    const int G = 8 * wpg, K = TT == 1 ? 2 : 1;
    const int64_t wpr = m->cols / 8, ng = m->cols / G;
    const uint32_t *w = (const uint32_t *)m->w + r * wpr;
    const __mmask16 rmask = (__mmask16)((1u << nr) - 1);
    const int8_t *xt[8];
    const float *xd[8], *xs[8];
    __m512 tot[8];
    float svs[16 * 16] __attribute__((aligned(64))), bvs[16 * 16] __attribute__((aligned(64)));
    pg_act(a, t0, TT, xt, xd, xs, tot);
    for (int64_t c0 = 0; c0 < wpr; c0 += 16) {
        const int64_t g0 = c0 / wpg;
        if (g0 % 16 == 0) /* scales and biases of groups g0..g0+15, transposed */
            sb_tr16(m, r, nr, g0, ng, 16, svs, bvs);
        const int64_t left = wpr - c0;
        const __mmask16 km = left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1);
        __m512i v[16];
        UNROLL
        for (int i = 0; i < 16; i++) {
            v[i] = i < nr ? _mm512_maskz_loadu_epi32(km, w + i * wpr + c0) : _mm512_setzero_si512();
            _mm_prefetch((const char *)(w + (16 + i) * wpr + c0), _MM_HINT_T0);
        }
        k_tr16(v);
        __m512i acc[3][8][4];
#pragma GCC unroll 16
        for (int k = 0; k < 16; k++) { /* the block's whole groups, word by word */
            const int kw = k % wpg; /* the word in its group */
            const int64_t g = g0 + k / wpg;
            if (kw == 0) pg_zero(acc, TT, P, K);
            if (g < ng) pg_word(acc, v[k], kw, g, xt, G, TT, P, K);
            if (kw == wpg - 1 && g < ng)
                pg_finish(acc, _mm512_load_ps(svs + 16 * (g % 16)),
                          _mm512_load_ps(bvs + 16 * (g % 16)), g, xd, xs, tot, TT, P, K);
        }
    }
    UNROLL
    for (int t = 0; t < TT; t++)
        _mm512_mask_storeu_ps(y + (t0 + t) * ldy + r, rmask, tot[t]);
}

typedef void (*qf_tile_fn)(const e0_mat *, int64_t, int, const k_act *, int64_t, float *, int64_t);

#define QF_TILE(TT, P, W)                                                                          \
    TGTV static void qf_tile_##TT##_##P##_##W(const e0_mat *m, int64_t r, int nr, const k_act *a,  \
                                              int64_t t0, float *y, int64_t ldy) {                 \
        qf_tile(m, r, nr, W, a, t0, TT, P, y, ldy);                                                \
    }
#define QF_TILES(P, W) QF_TILE(3, P, W) QF_TILE(2, P, W) QF_TILE(1, P, W)
QF_TILES(1, 4)
QF_TILES(1, 8)
QF_TILES(1, 16)
QF_TILES(2, 4)
QF_TILES(2, 8)
QF_TILES(2, 16)
QF_TILES(3, 4)
QF_TILES(3, 8)
QF_TILES(3, 16)

/* tiles: 3, 2, 1 tokens. */
INLV void qf_rows(const e0_mat *m, const k_act *a, int64_t r0, int64_t r1, float *y, int64_t ldy,
                  const qf_tile_fn tiles[3]) {
    for (int64_t r = r0; r < r1; r += 16) {
        const int nr = r1 - r >= 16 ? 16 : (int)(r1 - r);
        for (int64_t t0 = 0; t0 < a->T;) {
            const int TT = a->T - t0 >= 3 ? 3 : (int)(a->T - t0);
            tiles[3 - TT](m, r, nr, a, t0, y, ldy);
            t0 += TT;
        }
    }
}

#define QF_ROWS(P, W)                                                                              \
    TGTV static void qf_rows_##P##_##W(const e0_mat *m, const k_act *a, int64_t r0, int64_t r1,    \
                                       float *y, int64_t ldy) {                                    \
        static const qf_tile_fn t[3] = {qf_tile_3_##P##_##W, qf_tile_2_##P##_##W,                  \
                                        qf_tile_1_##P##_##W};                                      \
        qf_rows(m, a, r0, r1, y, ldy, t);                                                          \
    }
QF_ROWS(1, 4)
QF_ROWS(1, 8)
QF_ROWS(1, 16)
QF_ROWS(2, 4)
QF_ROWS(2, 8)
QF_ROWS(2, 16)
QF_ROWS(3, 4)
QF_ROWS(3, 8)
QF_ROWS(3, 16)

static k_rows_fn qf_pick(const e0_mat *m, int planes) {
    static const k_rows_fn f[3][3] = {{qf_rows_1_4, qf_rows_1_8, qf_rows_1_16},
                                      {qf_rows_2_4, qf_rows_2_8, qf_rows_2_16},
                                      {qf_rows_3_4, qf_rows_3_8, qf_rows_3_16}};
    return f[planes - 1][m->group == 32 ? 0 : m->group == 64 ? 1 : 2];
}

/* k_prep_qg (mat.c) vectorized; bit-identical to it. */
TGTV void k_avx512_prep_qg(const float *x, int64_t cols, int group, int planes, int8_t *xg,
                           float *xgd, float *xgs) {
    const int64_t ng = cols / group;
    const int nv = group / 16;
    const float scale = planes == 3 ? 65536.0f : planes == 2 ? 256.0f : 1.0f;
    for (int64_t g = 0; g < ng; g++) {
        const float *xv = x + g * group;
        __m512 am = _mm512_setzero_ps();
        for (int v = 0; v < nv; v++)
            am = _mm512_max_ps(am, _mm512_abs_ps(_mm512_loadu_ps(xv + 16 * v)));
        const float amax = _mm512_reduce_max_ps(am);
        const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        const __m512 vid = _mm512_set1_ps(id), vscale = _mm512_set1_ps(scale);
        int8_t nat[3][128]; /* the group's digits per plane, natural order */
        __m512i sum = _mm512_setzero_si512();
        for (int v = 0; v < nv; v++) {
            const __m512 xs =
                _mm512_mul_ps(_mm512_mul_ps(_mm512_loadu_ps(xv + 16 * v), vid), vscale);
            const __m512i n = _mm512_cvtps_epi32(xs);
            __m512i q[3];
            split_digits16(n, planes, q);
            for (int p = 0; p < planes; p++)
                _mm_storeu_si128((__m128i *)(nat[p] + 16 * v), _mm512_cvtepi32_epi8(q[p]));
            sum = _mm512_add_epi32(sum, n);
        }
        for (int p = 0; p < planes; p++) {
            int8_t *dst = xg + (g * planes + p) * group;
            for (int c = 0; c < group; c += 32) { /* as 16 words: low bytes even, high bytes odd */
                const __m256i wv = _mm256_loadu_si256((const __m256i *)(nat[p] + c));
                _mm_storeu_si128((__m128i *)(dst + c / 2), _mm256_cvtepi16_epi8(wv));
                _mm_storeu_si128((__m128i *)(dst + group / 2 + c / 2),
                                 _mm256_cvtepi16_epi8(_mm256_srli_epi16(wv, 8)));
            }
        }
        const float dl = d / scale;
        xgd[g] = dl;
        xgs[g] = dl * (float)_mm512_reduce_add_epi32(sum);
    }
}

/* k_prep_q8 (mat.c) vectorized; bit-identical to it. */
TGTV void k_avx512_prep_q8(const float *x, int64_t cols, int planes, int8_t *xq, float *xdl,
                           float *xb, int64_t nblk) {
    for (int64_t b = 0; b < nblk; b++) {
        __m512i q[3][8]; /* int32 codes of the block's 128 columns per plane, 16 per vector */
        for (int m4 = 0; m4 < 4; m4++) {
            const int64_t c0 = b * 128 + m4 * 32;
            const int64_t n0 = cols - c0, n1 = cols - c0 - 16;
            const __mmask16 k0 = n0 >= 16 ? (__mmask16)0xFFFF
                                 : n0 > 0 ? (__mmask16)((1u << n0) - 1)
                                          : 0;
            const __mmask16 k1 = n1 >= 16 ? (__mmask16)0xFFFF
                                 : n1 > 0 ? (__mmask16)((1u << n1) - 1)
                                          : 0;
            const __m512 v[2] = {_mm512_maskz_loadu_ps(k0, x + c0),
                                 _mm512_maskz_loadu_ps(k1, x + c0 + 16)};
            const float amax =
                _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v[0]), _mm512_abs_ps(v[1])));
            const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
            const __m512 vid = _mm512_set1_ps(id);
            const __m512 vscale = _mm512_set1_ps(planes == 3   ? 65536.0f
                                                 : planes == 2 ? 256.0f
                                                               : 1.0f);
            __m512i sum = _mm512_setzero_si512();
            for (int h = 0; h < 2; h++) {
                const __m512i n =
                    _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_mul_ps(v[h], vid), vscale));
                __m512i qs[3];
                split_digits16(n, planes, qs);
                for (int p = 0; p < planes; p++)
                    q[p][2 * m4 + h] = qs[p];
                sum = _mm512_add_epi32(sum, n);
            }
            const float dl = planes == 3 ? d / 65536.0f : planes == 2 ? d / 256.0f : d;
            _mm_storeu_ps(xdl + b * 16 + m4 * 4, _mm_set1_ps(dl));
            xb[b * 4 + m4] = dl * (float)_mm512_reduce_add_epi32(sum);
        }
        for (int p = 0; p < planes; p++) {
            /* int32 -> int8 (natural order), then even columns, then odd ones */
            __m512i nat[2];
            for (int h = 0; h < 2; h++)
                nat[h] = _mm512_inserti64x4(
                    _mm512_castsi256_si512(_mm256_set_m128i(_mm512_cvtsepi32_epi8(q[p][4 * h + 1]),
                                                            _mm512_cvtsepi32_epi8(q[p][4 * h]))),
                    _mm256_set_m128i(_mm512_cvtsepi32_epi8(q[p][4 * h + 3]),
                                     _mm512_cvtsepi32_epi8(q[p][4 * h + 2])),
                    1);
            /* as int16 words: the low byte of word j is column 2j, the high byte 2j + 1 */
            const __m256i ev0 = _mm512_cvtepi16_epi8(nat[0]), ev1 = _mm512_cvtepi16_epi8(nat[1]);
            const __m256i od0 = _mm512_cvtepi16_epi8(_mm512_srli_epi16(nat[0], 8));
            const __m256i od1 = _mm512_cvtepi16_epi8(_mm512_srli_epi16(nat[1], 8));
            int8_t *dst = xq + (b * planes + p) * 128;
            _mm512_storeu_si512(dst, _mm512_inserti64x4(_mm512_castsi256_si512(ev0), ev1, 1));
            _mm512_storeu_si512(dst + 64, _mm512_inserti64x4(_mm512_castsi256_si512(od0), od1, 1));
        }
    }
}

k_rows_fn k_avx512_q8_pick(const e0_mat *m, int planes, int64_t T, int64_t panel_t, int *need,
                           int *lanes) {
    if (m->type == E0_W_QAFF && m->layout == E0_L_P16) {
        *lanes = 16;
        *need = planes == 3 ? K_NEED_XG3 : planes == 2 ? K_NEED_XG2 : K_NEED_XG;
        return p16_pick(m, planes);
    }
    if (T >= panel_t && m->type == E0_W_QAFF && m->bits == 4 &&
        (m->group == 32 || m->group == 64 || m->group == 128) && m->cols % m->group == 0 &&
        m->cols / 8 <= PANEL_MAX_WORDS) {
        *lanes = 16;
        *need = planes == 3 ? K_NEED_XG3 : planes == 2 ? K_NEED_XG2 : K_NEED_XG;
        if (T < K_PANEL_MIN_T) return qf_pick(m, planes); /* no packing for a few tokens */
        return planes == 3 ? qp_rows_3 : planes == 2 ? qp_rows_2 : qp_rows_1;
    }
    if (m->type == E0_W_QAFF && m->bits == 4 && m->cols % 8 == 0 && m->group % 32 == 0 &&
        m->cols % m->group == 0 && (128 % m->group == 0 || m->group % 128 == 0)) {
        *lanes = 16;
        *need = (planes == 3 ? K_NEED_XQ3 : planes == 2 ? K_NEED_XQ2 : K_NEED_XQ) | K_NEED_XS;
        return planes == 3 ? q4x8_rows_3 : planes == 2 ? q4x8_rows_2 : q4x8_rows_1;
    }
    return k_avx512_pick(m, need, lanes); /* everything else: f32 activations */
}

#else

k_rows_fn k_avx512_q8_pick(const e0_mat *m, int planes, int64_t T, int64_t panel_t, int *need,
                           int *lanes) {
    (void)m, (void)planes, (void)T, (void)panel_t, (void)need, (void)lanes;
    return NULL;
}

void k_avx512_prep_q8(const float *x, int64_t cols, int planes, int8_t *xq, float *xdl, float *xb,
                      int64_t nblk) {
    k_prep_q8(x, cols, planes, xq, xdl, xb, nblk);
}

void k_avx512_prep_qg(const float *x, int64_t cols, int group, int planes, int8_t *xg, float *xgd,
                      float *xgs) {
    k_prep_qg(x, cols, group, planes, xg, xgd, xgs);
}

#endif
