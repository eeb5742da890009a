/* The 16-row panel kernels of the ggml types with integer activations
 * (AVX-512 VNNI; kernels_ggml_vnni.c has the row kernels, the header
 * comment and the choice between them). */
#include "quant/kernels_ggml_vnni.h"

#if defined(__x86_64__)

/* ---- 16-row panels (batches) ----------------------------------------------
 * For T >= K_PANEL_MIN_T tokens. The row kernels above spend a few float
 * operations per 256 columns of every (row, token) and decode each block
 * again for every token tile; here the lanes are 16 rows, the weights are
 * decoded once per panel and PANEL_TB tokens, and the float work is once
 * per sub-block for 16 rows.
 *
 * Activations (k_prep_qk with blk = 32): d per 32 columns, P planes,
 * natural order; xks per 16 columns. Weights: the codes u of 16 rows
 * (Q8_0: w + 128; IQ4_XS / IQ4_NL: k[q] + 128; the other 32-column types:
 * q32_codes), transposed so that a vector holds 4 consecutive columns
 * of each of the 16 rows (pk[c / 4]): vpdpbusd of it with the 4 activation
 * bytes of those columns, broadcast, adds 4 products to every row, exactly.
 * Scales per sub-block (Q4_K / Q5_K: 32 columns, d sc_s; Q6_K: 16 columns,
 * d sc_s; IQ4_XS: 32 columns, d (ls_s - 32); the 32-column types: the
 * block, d) and the mins / offsets per 16 columns (Q4_K / Q5_K: dmin m_s;
 * Q6_K: 32 d sc_s; IQ4_XS: 128 d (ls_s - 32); the 32-column types: o d, o
 * the codes' offset above; Q4_1 / Q5_1: -m, so that the fnmadd below adds
 * m xks) as 16-row float vectors.
 *
 * Per (row, token), over sub-blocks s in order (tot = 0):
 *   P = 1:  B = sum u q1                         f = float(B)
 *   P = 2:  B = (sum u q1) << 8 + sum u q2       f = float(B)
 *   P = 3:  A = sum u q1, B = (sum u q2) << 8 + sum u q3,  f = fma(float(A), 65536, float(B))
 *   tot = fma(f, sc_s * dl_g, tot)               (g: the 32 columns holding s)
 *   tot = fnmadd(m_k, xks_k, tot) for each 16 columns k of s, in order
 *   y = tot
 * The sums are exact in int32 (|B| <= 32 x 63 x 128 x 257 < 2^27; Q8_0:
 * 32 x 255 x 128 x 257 < 2^29; IQ4_XS / IQ4_NL: 32 x 241 x 128 x 257 <
 * 2^28). The result
 * does not depend on which rows or tokens share a tile, on the thread split
 * or on T, as long as T >= K_PANEL_MIN_T. */

#define QKP_TB   64    /* tokens per packing of a panel */

/* The packed panel of the calling thread: codes (a vector per 4 columns),
 * scales (one vector per sub-block, at most one per 16 columns) and mins /
 * offsets (one per 16 columns). */
static _Thread_local __m512i qkp_pk[QKP_MAXC / 4];
static _Thread_local __m512 qkp_sc[QKP_MAXC / 16], qkp_mn[QKP_MAXC / 16];

/* Rows r..r+nr (nr <= 16; the others zero) of a 32-column type into the
 * panel: per block, the codes u of 16 rows (q32_codes), 4 columns a
 * vector; sc = d and, for its two 16-column halves, mn = off d (the
 * codes' offset) or -m (Q4_1 / Q5_1: the min is added). */
INLV void qkp_pack_q32(const int type, const e0_mat *m, int64_t r, int nr) {
    const int64_t bs = q32_bsize(type), nb = m->cols / 32, rb = nb * bs;
    const uint8_t *w = (const uint8_t *)m->w + r * rb;
    const float off = q32_off(type);
    for (int64_t b = 0; b < nb; b += 2) {
        const int two = b + 1 < nb;
        __m512i v[16];
        for (int i = 0; i < 16; i++) {
            if (i >= nr) {
                v[i] = _mm512_setzero_si512();
                continue;
            }
            const uint8_t *blk = w + i * rb + b * bs;
            const __m256i lo = q32_codes(type, blk);
            const __m256i hi = two ? q32_codes(type, blk + bs) : _mm256_setzero_si256();
            v[i] = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
        }
        k_tr16(v); /* v[c]: columns 4c .. 4c + 3 of blocks b (c < 8), b + 1 of the 16 rows */
        for (int c = 0; c < (two ? 16 : 8); c++)
            qkp_pk[8 * b + c] = v[c];
        for (int k = 0; k <= two; k++) {
            float d[16], mn[16];
            for (int i = 0; i < 16; i++) {
                const uint8_t *blk = w + i * rb + (b + k) * bs;
                d[i] = i < nr ? qk_half(blk, 0) : 0.0f;
                mn[i] = i >= nr ? 0.0f : Q32_MIN(type) ? -qk_half(blk, 2) : off * d[i];
            }
            qkp_sc[b + k] = _mm512_loadu_ps(d);
            qkp_mn[2 * (b + k)] = qkp_mn[2 * (b + k) + 1] = _mm512_loadu_ps(mn);
        }
    }
}

/* Rows r..r+nr of m (nr <= 16; the others zero) into the panel. */
INLV void qkp_pack(const int type, const e0_mat *m, int64_t r, int nr) {
    if (QK_IS32(type)) {
        qkp_pack_q32(type, m, r, nr);
        return;
    }
    const int bsize = qk_bsize(type);
    const int64_t nb = m->cols / GGML_QK_K, rb = nb * bsize;
    const uint8_t *w = (const uint8_t *)m->w + r * rb;
    const __m512i lo4 = _mm512_set1_epi8(0x0f), m30 = _mm512_set1_epi8(0x30);
    for (int64_t b = 0; b < nb; b++) {
        __m512i v[16];
        /* per row, 16 floats: Q4_K / Q5_K d sc_0..7 then dmin m_0..7; Q6_K d sc_0..15;
         * IQ4_XS d sc_0..7 (then zeros) */
        for (int i = 0; i < 16; i++) {
            if (i >= nr) {
                v[i] = _mm512_setzero_si512();
                continue;
            }
            qk_blk k;
            qk_begin(type, w + i * rb + b * bsize, &k);
            v[i] = _mm512_castps_si512(
                type == GGML_IQ4_XS ? _mm512_mul_ps(k.d, _mm512_cvtepi32_ps(k.S))
                : QK_IS45(type)
                    ? _mm512_mul_ps(_mm512_mask_blend_ps((__mmask16)0xFF00, k.d, k.dmin), k.sm)
                    : _mm512_mul_ps(k.d, _mm512_cvtepi32_ps(
                                             _mm512_cvtepi16_epi32(_mm512_castsi512_si256(k.S)))));
        }
        k_tr16(v);
        if (QK_IS45(type))
            for (int s = 0; s < 8; s++) {
                qkp_sc[b * 8 + s] = _mm512_castsi512_ps(v[s]);
                qkp_mn[b * 16 + 2 * s] = qkp_mn[b * 16 + 2 * s + 1] = _mm512_castsi512_ps(v[8 + s]);
            }
        else if (type == GGML_IQ4_XS)
            for (int s = 0; s < 8; s++) { /* the offset of the codes (+128): 128 d sc_s */
                qkp_sc[b * 8 + s] = _mm512_castsi512_ps(v[s]);
                qkp_mn[b * 16 + 2 * s] = qkp_mn[b * 16 + 2 * s + 1] =
                    _mm512_mul_ps(_mm512_set1_ps(128.0f), _mm512_castsi512_ps(v[s]));
            }
        else
            for (int s = 0; s < 16; s++) {
                qkp_sc[b * 16 + s] = _mm512_castsi512_ps(v[s]);
                qkp_mn[b * 16 + s] =
                    _mm512_mul_ps(_mm512_set1_ps(32.0f), _mm512_castsi512_ps(v[s]));
            }
        __m512i *pk = qkp_pk + b * 64;
        if (type == GGML_IQ4_XS) {
            /* qs[64h ..]: word c holds bytes 4c.. of sub-block s = 4h + c / 4:
             * low nibbles its columns 4 (c % 4).., high nibbles 16 + 4 (c % 4).. */
            const __m512i tbl = iq4_table();
            for (int h = 0; h < 2; h++) {
                for (int i = 0; i < 16; i++)
                    v[i] = i < nr ? _mm512_loadu_si512(w + i * rb + b * bsize +
                                                       offsetof(ggml_block_iq4_xs, qs) + 64 * h)
                                  : _mm512_setzero_si512();
                k_tr16(v);
                for (int c = 0; c < 16; c++) {
                    const int s = 4 * h + c / 4;
                    pk[8 * s + c % 4] = _mm512_shuffle_epi8(tbl, _mm512_and_si512(v[c], lo4));
                    pk[8 * s + 4 + c % 4] = _mm512_shuffle_epi8(
                        tbl, _mm512_and_si512(_mm512_srli_epi32(v[c], 4), lo4));
                }
            }
        } else if (QK_IS45(type)) {
            /* qs[64h ..]: word c < 8 holds columns 4c.. of sub-blocks 4h (low
             * nibbles) and 4h + 1 (high); word 8 + c those of 4h + 2, 4h + 3.
             * Q5_K: qh word c holds the fifth bits of columns 4c.. of every
             * sub-block s (bit s of each byte), moved to bit 4 (32-bit
             * shifts: bit 4 of a byte comes from bit s of the same byte). */
            const size_t qs_off = type == GGML_Q4_K ? offsetof(ggml_block_q4_K, qs)
                                                    : offsetof(ggml_block_q5_K, qs);
            __m512i qh[16];
            if (type == GGML_Q5_K) {
                /* 64 bytes from qh: qh[0..31] then qs[0..31] (unused) */
                for (int i = 0; i < 16; i++)
                    qh[i] = i < nr ? _mm512_loadu_si512(w + i * rb + b * bsize +
                                                        offsetof(ggml_block_q5_K, qh))
                                   : _mm512_setzero_si512();
                k_tr16(qh);
            }
            const __m512i m10 = _mm512_set1_epi8(0x10);
            for (int h = 0; h < 2; h++) {
                for (int i = 0; i < 16; i++)
                    v[i] = i < nr ? _mm512_loadu_si512(w + i * rb + b * bsize + qs_off + 64 * h)
                                  : _mm512_setzero_si512();
                k_tr16(v);
                for (int c = 0; c < 16; c++) {
                    const int s = 4 * h + (c >= 8 ? 2 : 0);
                    __m512i lo = _mm512_and_si512(v[c], lo4);
                    __m512i hi = _mm512_and_si512(_mm512_srli_epi32(v[c], 4), lo4);
                    if (type == GGML_Q5_K) {
                        const __m512i q = qh[c % 8];
                        const __m512i b0 =
                            s <= 4 ? _mm512_slli_epi32(q, 4 - s) : _mm512_srli_epi32(q, s - 4);
                        const __m512i b1 = s + 1 <= 4 ? _mm512_slli_epi32(q, 4 - s - 1)
                                                      : _mm512_srli_epi32(q, s + 1 - 4);
                        lo = _mm512_ternarylogic_epi32(lo, b0, m10, 0xF8);
                        hi = _mm512_ternarylogic_epi32(hi, b1, m10, 0xF8);
                    }
                    pk[8 * s + c % 8] = lo;
                    pk[8 * (s + 1) + c % 8] = hi;
                }
            }
        } else {
            /* ql[64h ..]: word c < 8 holds columns 4c.. of runs 0 (low) and 2
             * (high) of half h, word 8 + c runs 1 and 3; qh word 8h + c their
             * high bits (2r, 2r + 1 for run r) */
            __m512i qh[16];
            for (int i = 0; i < 16; i++)
                qh[i] =
                    i < nr
                        ? _mm512_loadu_si512(w + i * rb + b * bsize + offsetof(ggml_block_q6_K, qh))
                        : _mm512_setzero_si512();
            k_tr16(qh);
            for (int h = 0; h < 2; h++) {
                for (int i = 0; i < 16; i++)
                    v[i] = i < nr ? _mm512_loadu_si512(w + i * rb + b * bsize +
                                                       offsetof(ggml_block_q6_K, ql) + 64 * h)
                                  : _mm512_setzero_si512();
                k_tr16(v);
                for (int c = 0; c < 8; c++) {
                    const __m512i q0 = v[c], q1 = v[8 + c], hb = qh[8 * h + c];
                    __m512i *o = pk + 32 * h + c; /* run r: column 128h + 32r + 4c */
                    o[0] = _mm512_ternarylogic_epi32(_mm512_and_si512(q0, lo4),
                                                     _mm512_slli_epi32(hb, 4), m30, 0xF8);
                    o[8] = _mm512_ternarylogic_epi32(_mm512_and_si512(q1, lo4),
                                                     _mm512_slli_epi32(hb, 2), m30, 0xF8);
                    o[16] = _mm512_ternarylogic_epi32(
                        _mm512_and_si512(_mm512_srli_epi32(q0, 4), lo4), hb, m30, 0xF8);
                    o[24] =
                        _mm512_ternarylogic_epi32(_mm512_and_si512(_mm512_srli_epi32(q1, 4), lo4),
                                                  _mm512_srli_epi32(hb, 2), m30, 0xF8);
                }
            }
        }
    }
}

/* acc[t] += the products of one plane over nv vectors of codes from pk;
 * xp[t]: the plane's bytes of those columns. */
INLV void qkp_plane(__m512i acc[8], const __m512i *pk, const int nv, const int8_t *const xp[8],
                    const int TT) {
    UNROLL
    for (int v = 0; v < nv; v++) {
        const __m512i wv = pk[v];
        UNROLL
        for (int t = 0; t < TT; t++) {
            int32_t e;
            memcpy(&e, xp[t] + 4 * v, 4);
            acc[t] = _mm512_dpbusd_epi32(acc[t], wv, _mm512_set1_epi32(e));
        }
    }
}

INLV void qkp_tile(const int type, int64_t cols, const k_act *a, int64_t t0, const int TT,
                   const int P, float *y, int64_t ldy, __mmask16 rmask) {
    const int CS = type == GGML_Q6_K ? 16 : 32, NV = CS / 4; /* columns per sub-block */
    const int8_t *xt[8];
    const float *xd[8], *xs[8];
    __m512 tot[8];
    UNROLL
    for (int t = 0; t < TT; t++) {
        xt[t] = a->xk + (t0 + t) * a->ldxk;
        xd[t] = a->xkd + (t0 + t) * a->ldxkd;
        xs[t] = a->xks + (t0 + t) * a->ldxks;
        tot[t] = _mm512_setzero_ps();
    }
    for (int64_t s = 0; s < cols / CS; s++) {
        const int64_t c0 = s * CS, g = c0 / 32, off = c0 % 32;
        const __m512i *pk = qkp_pk + c0 / 4;
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
                xp[t] = xt[t] + g * 3 * 32 + off;
            }
            qkp_plane(A, pk, NV, xp, TT);
        }
        UNROLL
        for (int t = 0; t < TT; t++)
            xp[t] = xt[t] + (g * P + (P == 3)) * 32 + off;
        qkp_plane(B, pk, NV, xp, TT);
        if (P >= 2) {
            UNROLL
            for (int t = 0; t < TT; t++) {
                B[t] = _mm512_slli_epi32(B[t], 8);
                xp[t] += 32;
            }
            qkp_plane(B, pk, NV, xp, TT);
        }
        UNROLL
        for (int t = 0; t < TT; t++)
            f[t] = P == 3 ? _mm512_fmadd_ps(_mm512_cvtepi32_ps(A[t]), _mm512_set1_ps(65536.0f),
                                            _mm512_cvtepi32_ps(B[t]))
                          : _mm512_cvtepi32_ps(B[t]);
        const __m512 sc = qkp_sc[s];
        UNROLL
        for (int t = 0; t < TT; t++) {
            tot[t] = _mm512_fmadd_ps(f[t], _mm512_mul_ps(sc, _mm512_set1_ps(xd[t][g])), tot[t]);
            UNROLL
            for (int k = 0; k < CS / 16; k++)
                tot[t] = _mm512_fnmadd_ps(qkp_mn[c0 / 16 + k], _mm512_set1_ps(xs[t][c0 / 16 + k]),
                                          tot[t]);
        }
    }
    UNROLL
    for (int t = 0; t < TT; t++)
        _mm512_mask_storeu_ps(y + (t0 + t) * ldy, rmask, tot[t]);
}

/* The next panel's bytes into L2 while this one computes. */
INLV void qkp_prefetch(const int type, const e0_mat *m, int64_t r, int64_t nr) {
    const size_t rb = (size_t)ggml_row_bytes((uint32_t)type, (uint64_t)m->cols);
    const char *w = (const char *)m->w + (size_t)r * rb;
    for (size_t o = 0; o < (size_t)nr * rb; o += 64)
        _mm_prefetch(w + o, _MM_HINT_T1);
}

typedef void (*qkp_tile_fn)(int64_t, const k_act *, int64_t, float *, int64_t, __mmask16);

INLV void qkp_rows(const int type, const e0_mat *m, const k_act *a, int64_t r0, int64_t r1,
                   float *y, int64_t ldy, const qkp_tile_fn tiles[4]) {
    for (int64_t tb = 0; tb < a->T; tb += QKP_TB) {
        const int64_t te = tb + QKP_TB < a->T ? tb + QKP_TB : a->T;
        for (int64_t r = r0; r < r1; r += 16) {
            const int nr = r1 - r >= 16 ? 16 : (int)(r1 - r);
            const __mmask16 rmask = (__mmask16)((1u << nr) - 1);
            qkp_pack(type, m, r, nr);
            if (r + 16 < r1) qkp_prefetch(type, m, r + 16, r1 - r - 16 >= 16 ? 16 : r1 - r - 16);
            for (int64_t t0 = tb; t0 < te;) {
                const int64_t left = te - t0;
                const int TT = left >= 8 ? 8 : left >= 4 ? 4 : left >= 2 ? 2 : 1;
                tiles[TT == 8   ? 0
                      : TT == 4 ? 1
                      : TT == 2 ? 2
                                : 3](m->cols, a, t0, y + r, ldy, rmask);
                t0 += TT;
            }
        }
    }
}

#define QKP_TILE(NAME, TYPE, P, TT)                                                                \
    TGTV static void qkp_##NAME##_##P##_##TT(int64_t cols, const k_act *a, int64_t t0, float *y,   \
                                             int64_t ldy, __mmask16 rmask) {                       \
        qkp_tile(TYPE, cols, a, t0, TT, P, y, ldy, rmask);                                         \
    }
#define QKP_KERNEL(NAME, TYPE, P)                                                                  \
    QKP_TILE(NAME, TYPE, P, 8)                                                                     \
    QKP_TILE(NAME, TYPE, P, 4)                                                                     \
    QKP_TILE(NAME, TYPE, P, 2)                                                                     \
    QKP_TILE(NAME, TYPE, P, 1)                                                                     \
    TGTV void qkp_##NAME##_##P##_rows(const e0_mat *m, const k_act *a, int64_t r0,                 \
                                             int64_t r1, float *y, int64_t ldy) {                  \
        static const qkp_tile_fn t[4] = {qkp_##NAME##_##P##_8, qkp_##NAME##_##P##_4,               \
                                         qkp_##NAME##_##P##_2, qkp_##NAME##_##P##_1};              \
        qkp_rows(TYPE, m, a, r0, r1, y, ldy, t);                                                   \
    }

QKP_KERNEL(q4_K, GGML_Q4_K, 1)
QKP_KERNEL(q4_K, GGML_Q4_K, 2)
QKP_KERNEL(q4_K, GGML_Q4_K, 3)
QKP_KERNEL(q6_K, GGML_Q6_K, 1)
QKP_KERNEL(q6_K, GGML_Q6_K, 2)
QKP_KERNEL(q6_K, GGML_Q6_K, 3)
QKP_KERNEL(q5_K, GGML_Q5_K, 1)
QKP_KERNEL(q5_K, GGML_Q5_K, 2)
QKP_KERNEL(q5_K, GGML_Q5_K, 3)
QKP_KERNEL(q8_0, GGML_Q8_0, 1)
QKP_KERNEL(q8_0, GGML_Q8_0, 2)
QKP_KERNEL(q8_0, GGML_Q8_0, 3)
QKP_KERNEL(iq4_xs, GGML_IQ4_XS, 1)
QKP_KERNEL(iq4_xs, GGML_IQ4_XS, 2)
QKP_KERNEL(iq4_xs, GGML_IQ4_XS, 3)
QKP_KERNEL(iq4_nl, GGML_IQ4_NL, 1)
QKP_KERNEL(iq4_nl, GGML_IQ4_NL, 2)
QKP_KERNEL(iq4_nl, GGML_IQ4_NL, 3)
QKP_KERNEL(q4_0, GGML_Q4_0, 1)
QKP_KERNEL(q4_0, GGML_Q4_0, 2)
QKP_KERNEL(q4_0, GGML_Q4_0, 3)
QKP_KERNEL(q4_1, GGML_Q4_1, 1)
QKP_KERNEL(q4_1, GGML_Q4_1, 2)
QKP_KERNEL(q4_1, GGML_Q4_1, 3)
QKP_KERNEL(q5_0, GGML_Q5_0, 1)
QKP_KERNEL(q5_0, GGML_Q5_0, 2)
QKP_KERNEL(q5_0, GGML_Q5_0, 3)
QKP_KERNEL(q5_1, GGML_Q5_1, 1)
QKP_KERNEL(q5_1, GGML_Q5_1, 2)
QKP_KERNEL(q5_1, GGML_Q5_1, 3)

#endif
