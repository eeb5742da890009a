/* AVX-512 VNNI kernels of ggml weights (Q4_K, Q5_K, Q6_K, IQ4_XS; Q8_0,
 * Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL: quant/ggml.h)
 * against integer activations (quant/kernels.h, k_prep_qk): row kernels for
 * calls of fewer than K_PANEL_MIN_T tokens (decode), 16-row panels for
 * larger ones (described at their section below). Each has one arithmetic
 * per (row, token); the two differ.
 *
 * ---- row kernels (k-quants) ----
 * Activations are quantized per 256 columns, the k-quants' super-block, so
 * one activation scale meets one weight block: d = amax / 127,
 * n = rint(x * (1 / d) * 256^(P-1)) as P = 1..3 signed base-256 digits
 * q1 q2 q3 (~8, 16 or 24 bits; x ~ dl n with dl = d / 256^(P-1)), each
 * plane in natural column order (Q4_K / Q5_K: reordered, below); per 16
 * columns the sum of the quantized x, xks = dl * (sum n).
 *
 * Weights are used as their unsigned codes u (Q4_K 0..15; Q5_K 0..31, the
 * nibble plus 16 for its bit of qh; Q6_K 0..63, its -32 offset left out),
 * 64 columns per vector. The mins (Q4_K / Q5_K: dmin m_s) and the offset
 * (Q6_K: 32 d sc_s) meet the sums of the quantized x per 16 columns, in
 * float, once per super-block.
 *
 * Q4_K / Q5_K: vpdpbusd adds u_c q_c over 4 columns into each int32 lane,
 * and the vectors take their columns so that every lane keeps one
 * sub-block through the block: vector j holds, in its 8-byte groups g = 0..3,
 * columns 64g + 8j .. + 7 (sub-block 2g) and in g = 4..7 columns 64(g - 4)
 * + 32 + 8j .. + 7 (sub-block 2(g - 4) + 1), which are the low and high
 * nibbles of 8 bytes of qs each (qk_codes45); the activations are stored
 * in the same order (K_NEED_XK45, k_order_qk45). So the sub-block scales
 * wait for the end of the block, one float multiply per lane, and the
 * planes are summed in int32:
 *   I_p = vpdpbusd chain over the vectors of a half h (plane p; Q4_K one
 *         half, j = 0..3; Q5_K two, j = 0, 1 and 2, 3)
 *   C_h = I_1 256^(P-1) + ... + I_P            (int32, shifts and adds)
 *   f   = float(C_0) (+ float(C_1), Q5_K), times the lane's sc_s
 * C_h is sum u n over its lane's 16 (Q5_K: 8) columns, n the activation's
 * integer: |C_h| <= 16 x 15 x 127 x 65536 (Q5_K: 8 x 31 x ..) < 2^31, so
 * it is exact (the shifts may wrap on the way; the sum fits); float(C_h)
 * rounds to 24 bits, the one rounding these steps add.
 *
 * Q6_K: vpmaddubsw forms u_c q_c + u_{c+1} q_{c+1} (|.| <= 2 * 63 * 128, no
 * saturation) in natural column order; vpdpwssd multiplies that by the
 * pair's sub-block scale (int16) and adds pairs into int32 lanes:
 *   I_p = vpdpwssd chain over the block's vectors j = 0..3 (from 0), plane p
 *   f   = float(I_1)                           (P = 1)
 *       = fma(float(I_1), 256, float(I_2))     (P = 2)
 *       = fma(float(I_1), 65536, fma(float(I_2), 256, float(I_3)))  (P = 3)
 * Every int32 lane sum is exact and below 2^24 (4 vectors x 2 pairs x
 * 16128 x 128 = 16.5M), so float(I_p) is exact too.
 *
 * Then, per (row, token), super-blocks b in order, tot = 0:
 *   tot = fma(f, d_b * dl_b, tot)              (d_b: the block's f16 d)
 *   tot = fnmadd(m_b, xks_b, tot)              (m_b per 16 columns: Q4_K /
 *                                              Q5_K dmin m_s, Q6_K 32 d sc_s)
 *   y = reduce_add(tot)
 * The only roundings after the activations' are those of the float steps
 * above. A tile of R rows x TT tokens shares weight decoding and activation
 * loads; the order above is the same in every tile, for every T and thread
 * split.
 *
 * IQ4_XS rows are Q4_K's super-block, one scale per 32 columns (sc_s = ls_s
 * - 32, -32..31), codes through ggml_iq4nl_values: u = k[q] + 128 (1..241,
 * vpshufb of a 16-byte table). u_c q_c + u_{c+1} q_{c+1} can reach 2 x 241
 * x 128 = 61696 and would saturate vpmaddubsw, so vpdpbusd forms the 4
 * products of each int32 lane (lanes 0-7 sub-block 2j, 8-15 sub-block 2j
 * + 1) and vpmulld multiplies them by the lane's sc_s:
 *   I_p = sum over j = 0..3 in order of vpmulld(vpdpbusd(0, u_j, q_p), s_j)
 * then f and tot as above, with m per 16 columns = 128 d sc_s (the +128 of
 * the codes meets xks). |I_p| <= 4 x (4 x 241 x 128) x 32 = 15.8M < 2^24:
 * exact in int32 and in float.
 *
 * ---- row kernels (Q8_0 and the other 32-column types) ----
 * Q8_0 has a weight scale d_b per 32 columns, so a scale per 256 columns on
 * the activations would save nothing (the float step is per 32 columns
 * anyway) and rows need only be a multiple of 32 (the tiny fixtures' expert
 * rows are 128 wide): the activations are the panels' (k_prep_qk with blk =
 * 32, K_NEED_XK32): dl_b per 32 columns, P planes per block, xks per 16.
 * Lanes: a vector holds one block (32 columns) of two rows, row 2v in lanes
 * 0-7 and row 2v + 1 in lanes 8-15 (a lone row: lanes 0-7, the high half's
 * scale 0), so the activations of a block are one 32-byte broadcast and its
 * dl one scalar; lane k of a row sums columns 4k .. 4k + 3 of the block.
 * Weights: u = w + 128 (w ^ 0x80, 0..255: vpdpbusd's unsigned operand);
 * the offset comes back as 128 xks, like the k-quants' mins. The other
 * 32-column types (q32_codes) are the same kernel with their codes as u
 * and their own offset o: Q4_0 the nibble (o = 8), Q5_0 the nibble plus 16
 * for its bit of qh (o = 16), IQ4_NL k[q] + 128 (o = 128); Q4_1 / Q5_1 the
 * unsigned code (o = 0) and the min m_b, added per block.
 *
 * Summation order, per (row, token), blocks b in order, tot = 0 (8 lanes):
 *   I_p = vpdpbusd(0, u, q_p)                  (plane p, one instruction)
 *   f   = as for the k-quants from the I_p
 *   (x_b: xks of the block's two 16-column halves in lanes 0 and 4, 0
 *   elsewhere; c_b = o x_b)
 *   g   = fmsub(f, dl_b, c_b)                  (Q4_1 / Q5_1: g = f dl_b)
 *   tot = fma(g, d_b, tot)
 *   tot = fma(m_b, x_b, tot)                   (Q4_1 / Q5_1 only)
 *   y = the 8 lanes summed: (l0..3 + l4..7), then halves, then pairs
 * |I_p| <= 4 x 255 x 128 = 130560 < 2^24: exact in int32 and float. The
 * order does not depend on which half of a vector the row is in, the tile,
 * T or the thread split. Q8_0 is built for 1 and 2 planes (avx512-q8,
 * -q16): with 3 the float steps per 32 columns cost as much as the f32
 * kernels' conversion of the int8 weights, so avx512-mixed runs those for
 * Q8_0 rows and these panels for batches; the same holds, measured, for
 * Q4_1 and IQ4_NL, whose f32 kernels look each block's 16 values up in a
 * table (docs/experiments.md section 32). 24-bit rows are built for Q4_0
 * (faster with weights streamed from memory, slower from L2), Q5_0 and
 * Q5_1 (faster in both: their f32 kernels need a 32-entry table).
 */
#include "quant/kernels_ggml_vnni.h"


void k_order_qk45(int8_t *xk, int64_t cols, int planes) {
    for (int64_t b = 0; b < cols / GGML_QK_K * planes; b++) {
        int8_t *v = xk + b * GGML_QK_K, tmp[GGML_QK_K];
        memcpy(tmp, v, sizeof tmp);
        for (int j = 0; j < 4; j++)
            for (int q = 0; q < 8; q++)
                memcpy(v + 64 * j + 8 * q, tmp + (q < 4 ? 64 * q : 64 * (q - 4) + 32) + 8 * j, 8);
    }
}

#if defined(__x86_64__)

/* Q4_K / Q5_K: the codes of vector j of the block in the rows' lane order
 * (header comment): qwords q = 0..3 the low nibbles of qs[32q + 8j ..
 * 32q + 8j + 7] (columns 64q + 8j ..), q = 4..7 the high nibbles of the
 * same bytes of segment q - 4 (columns 64(q - 4) + 32 + 8j ..). So lanes
 * 2q, 2q + 1 hold sub-block 2q (q < 4) or 2(q - 4) + 1 in every vector.
 * Q5_K adds 16 where the column's bit of qh[8j + b] is set (bit 2q, or
 * 2(q - 4) + 1). */
INLV __m512i qk_codes45(const int type, const uint8_t *b, const int j) {
    const uint8_t *qs =
        b + (type == GGML_Q4_K ? offsetof(ggml_block_q4_K, qs) : offsetof(ggml_block_q5_K, qs));
    const __m512i q = _mm512_permutex2var_epi64(
        _mm512_loadu_si512(qs), _mm512_setr_epi64(j, 4 + j, 8 + j, 12 + j, j, 4 + j, 8 + j, 12 + j),
        _mm512_loadu_si512(qs + 64));
    const __m512i nib = _mm512_and_si512(_mm512_mask_srli_epi16(q, (__mmask32)0xFFFF0000u, q, 4),
                                         _mm512_set1_epi8(0x0f));
    if (type == GGML_Q4_K) return nib;
    const __m512i qh = _mm512_set1_epi64((long long)e0_ld64(b + offsetof(ggml_block_q5_K, qh), (size_t)j));
    const __m512i sel = _mm512_setr_epi64(0x0101010101010101ll, 0x0404040404040404ll,
                                          0x1010101010101010ll, 0x4040404040404040ll,
                                          0x0202020202020202ll, 0x0808080808080808ll,
                                          0x2020202020202020ll, (long long)0x8080808080808080ull);
    return _mm512_mask_add_epi8(nib, _mm512_test_epi8_mask(qh, sel), nib, _mm512_set1_epi8(16));
}

/* Q6_K and IQ4_XS: the codes of columns 64j .. 64j + 63 of the block, as
 * bytes, in natural order. */
INLV __m512i qk_codes(const int type, const uint8_t *b, const int j) {
    const __m512i lo4 = _mm512_set1_epi8(0x0f);
    if (type == GGML_IQ4_XS) {
        /* qs[32j ..] is sub-blocks 2j, 2j + 1, 16 bytes each: low nibbles
         * their first 16 columns, high nibbles the next 16; 128-bit lanes
         * [Q0 Q0 Q1 Q1], high nibbles in lanes 1 and 3, through the table */
        const __m512i q = _mm512_castsi256_si512(_mm256_loadu_si256(
            (const __m256i *)(const void *)(b + offsetof(ggml_block_iq4_xs, qs) + 32 * j)));
        const __m512i q2 = _mm512_shuffle_i64x2(q, q, _MM_SHUFFLE(1, 1, 0, 0));
        const __m512i nib =
            _mm512_and_si512(_mm512_mask_srli_epi16(q2, (__mmask32)0xFF00FF00u, q2, 4), lo4);
        return _mm512_shuffle_epi8(iq4_table(), nib);
    }
    /* Q6_K, half h: ql[64h ..] low nibbles are its columns 0..63, high
     * nibbles 64..127; qh[32h + l] bits 2k, 2k + 1 are the high bits of
     * column 32k + l. */
    const int h = j / 2, hi = j % 2;
    const __m512i ql = _mm512_loadu_si512(b + offsetof(ggml_block_q6_K, ql) + 64 * h);
    const __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256(
        (const __m256i *)(const void *)(b + offsetof(ggml_block_q6_K, qh) + 32 * h)));
    /* the two high bits moved to bits 4-5 of each byte (16-bit shifts: what
     * crosses into the next byte lands outside bits 4-5) */
    const __m512i nib =
        hi ? _mm512_and_si512(_mm512_srli_epi16(ql, 4), lo4) : _mm512_and_si512(ql, lo4);
    const __m512i cnt = _mm512_inserti64x4(_mm512_set1_epi16(hi ? 0 : 4), _mm256_set1_epi16(2), 1);
    const __m512i hb = hi ? _mm512_srlv_epi16(qh, cnt) : _mm512_sllv_epi16(qh, cnt);
    return _mm512_ternarylogic_epi32(nib, hb, _mm512_set1_epi8(0x30), 0xF8); /* nib | (hb & 0x30) */
}

/* Q6_K: the vpermw index of vector j, the sub-block of each pair of
 * columns; IQ4_XS: the vpermd index, the sub-block of each 4 columns. */
INLV __m512i qk_sidx(const int type, const int j) {
    if (type == GGML_IQ4_XS)
        return _mm512_inserti64x4(_mm512_set1_epi32(2 * j), _mm256_set1_epi32(2 * j + 1), 1);
    int16_t ix[32];
    for (int e = 0; e < 32; e++)
        ix[e] = (int16_t)(4 * j + e / 8);
    return _mm512_loadu_si512(ix);
}

/* A tile's row pointers (rows r.. of rb bytes each) and its tokens'
 * activation planes, scales and sums (quant/kernels.h, k_act). */
INLV void tile_rows(const e0_mat *m, const k_act *a, int64_t r, const int R, int64_t t0, const int TT,
                    int64_t rb, const uint8_t **w, const int8_t **xq, const float **xd, const float **xs) {
    UNROLL
    for (int i = 0; i < R; i++)
        w[i] = (const uint8_t *)m->w + (r + i) * rb;
    UNROLL
    for (int t = 0; t < TT; t++) {
        xq[t] = a->xk + (t0 + t) * a->ldxk;
        xd[t] = a->xkd + (t0 + t) * a->ldxkd;
        xs[t] = a->xks + (t0 + t) * a->ldxks;
    }
}

/* The planes' sums of one lane group combined: I_1 256^(P-1) + ... + I_P
 * (wrapping int32 steps; the result fits, header comment). */
INLV __m512i qk_horner(const __m512i *I, const int P) {
    __m512i c = I[0];
    UNROLL
    for (int p = 1; p < P; p++)
        c = _mm512_add_epi32(_mm512_slli_epi32(c, 8), I[p]);
    return c;
}

/* The planes' sums in float: float(I_P) + 256 float(I_{P-1}) + ... (fma,
 * from the lowest plane; each I_p exact in float). */
INLV __m512 qk_planes(const __m512i *I, const int P) {
    __m512 v = _mm512_cvtepi32_ps(I[P - 1]);
    if (P == 3) v = _mm512_fmadd_ps(_mm512_cvtepi32_ps(I[1]), _mm512_set1_ps(256.0f), v);
    if (P >= 2)
        v = _mm512_fmadd_ps(_mm512_cvtepi32_ps(I[0]), _mm512_set1_ps(P == 3 ? 65536.0f : 256.0f), v);
    return v;
}

/* One super-block b of a tile's rows: adds its terms to tot (the steps
 * of the header comment). */
INLV void qk_tile_block(const int type, const int P, const int R, const int TT, const int64_t b,
                        const int64_t rb, const uint8_t *const w[4], const int8_t *const xq[4],
                        const float *const xd[4], const float *const xs[4], const __m512i sidx[4],
                        __m512 tot[4][4]) {
    const int bsize = qk_bsize(type);
    qk_blk k[4];
    const uint8_t *blk[4];
    UNROLL
    for (int i = 0; i < R; i++) {
        blk[i] = w[i] + b * bsize;
        const char *pf = (const char *)(blk[i] + R * rb);
        _mm_prefetch(pf, _MM_HINT_T0);
        _mm_prefetch(pf + 64, _MM_HINT_T0);
        _mm_prefetch(pf + 128, _MM_HINT_T0);
        if (bsize > 192) _mm_prefetch(pf + 192, _MM_HINT_T0);
        qk_begin(type, blk[i], &k[i]);
    }
    /* the float value of each lane of (row, token) before d dl */
    __m512 f[4][4];
    if (QK_IS45(type)) {
        /* I[h][p]: plane p's vpdpbusd sums over the vectors of half h
         * (Q4_K: one half, all four vectors; Q5_K: two, j = 2h, 2h + 1) */
        enum { H45 = 2 };
        const int nh = type == GGML_Q4_K ? 1 : 2;
        __m512i I[4][4][H45][3];
        UNROLL
        for (int j = 0; j < 4; j++) {
            const int h = nh == 1 ? 0 : j / 2, first = nh == 1 ? j == 0 : j % 2 == 0;
            UNROLL
            for (int i = 0; i < R; i++) {
                const __m512i u = qk_codes45(type, blk[i], j);
                UNROLL
                for (int t = 0; t < TT; t++)
                    UNROLL
                for (int p = 0; p < P; p++) {
                    const __m512i x =
                        _mm512_loadu_si512(xq[t] + (b * P + p) * GGML_QK_K + 64 * j);
                    I[i][t][h][p] = _mm512_dpbusd_epi32(
                        first ? _mm512_setzero_si512() : I[i][t][h][p], u, x);
                }
            }
        }
        /* the lanes' sub-blocks: 0 0 2 2 4 4 6 6 1 1 3 3 5 5 7 7 */
        const __m512i lidx = _mm512_setr_epi32(0, 0, 2, 2, 4, 4, 6, 6, 1, 1, 3, 3, 5, 5, 7, 7);
        UNROLL
        for (int i = 0; i < R; i++) {
            const __m512 s = _mm512_permutexvar_ps(lidx, k[i].sm);
            UNROLL
            for (int t = 0; t < TT; t++) {
                __m512 v = _mm512_cvtepi32_ps(qk_horner(I[i][t][0], P));
                if (nh == 2) v = _mm512_add_ps(v, _mm512_cvtepi32_ps(qk_horner(I[i][t][1], P)));
                f[i][t] = _mm512_mul_ps(v, s);
            }
        }
    } else {
        /* Q6_K: vpmaddubsw pairs, vpdpwssd by the pair's sub-block
         * scale; IQ4_XS (codes up to 241): vpdpbusd, then vpmulld by
         * the lane's scale; per plane over the block's vectors */
        __m512i I[4][4][3];
        UNROLL
        for (int j = 0; j < 4; j++) {
            UNROLL
            for (int i = 0; i < R; i++) {
                const __m512i u = qk_codes(type, blk[i], j);
                const __m512i s = type == GGML_IQ4_XS ? _mm512_permutexvar_epi32(sidx[j], k[i].S)
                                                      : _mm512_permutexvar_epi16(sidx[j], k[i].S);
                UNROLL
                for (int t = 0; t < TT; t++)
                    UNROLL
                for (int p = 0; p < P; p++) {
                    const __m512i x =
                        _mm512_loadu_si512(xq[t] + (b * P + p) * GGML_QK_K + 64 * j);
                    if (type == GGML_IQ4_XS) {
                        const __m512i pr = _mm512_mullo_epi32(
                            _mm512_dpbusd_epi32(_mm512_setzero_si512(), u, x), s);
                        I[i][t][p] = j ? _mm512_add_epi32(I[i][t][p], pr) : pr;
                    } else {
                        I[i][t][p] = _mm512_dpwssd_epi32(
                            j ? I[i][t][p] : _mm512_setzero_si512(), _mm512_maddubs_epi16(u, x), s);
                    }
                }
            }
        }
        UNROLL
        for (int i = 0; i < R; i++)
            UNROLL
        for (int t = 0; t < TT; t++)
            f[i][t] = qk_planes(I[i][t], P);
    }
    UNROLL
    for (int t = 0; t < TT; t++) {
        const __m512 dl = _mm512_set1_ps(xd[t][b]);
        const __m512 xsv = _mm512_loadu_ps(xs[t] + 16 * b);
        UNROLL
        for (int i = 0; i < R; i++) {
            tot[i][t] = _mm512_fmadd_ps(f[i][t], _mm512_mul_ps(k[i].d, dl), tot[i][t]);
            tot[i][t] = _mm512_fnmadd_ps(k[i].m, xsv, tot[i][t]);
        }
    }
}

INLV void qk_tile(const e0_mat *m, const k_act *a, int64_t r, const int R, int64_t t0, const int TT,
                  const int type, const int P, float *y, int64_t ldy) {
    const int64_t nb = m->cols / GGML_QK_K, rb = nb * qk_bsize(type);
    const uint8_t *w[4];
    const int8_t *xq[4];
    const float *xd[4], *xs[4];
    tile_rows(m, a, r, R, t0, TT, rb, w, xq, xd, xs);
    __m512i sidx[4];
    UNROLL
    for (int j = 0; j < 4; j++)
        sidx[j] = QK_IS45(type) ? _mm512_setzero_si512() : qk_sidx(type, j);
    __m512 tot[4][4];
    UNROLL
    for (int i = 0; i < R; i++)
        UNROLL
    for (int t = 0; t < TT; t++)
        tot[i][t] = _mm512_setzero_ps();
    if (QK_IS45(type) && nb == 2) {
        /* Q4_K / Q5_K rows of two blocks (the experts' down projections):
         * straight code, so that the two blocks' independent work
         * interleaves (+12-30% at 1-3 tokens; Q6_K mixed: docs/experiments.md
         * section 60) */
        qk_tile_block(type, P, R, TT, 0, rb, w, xq, xd, xs, sidx, tot);
        qk_tile_block(type, P, R, TT, 1, rb, w, xq, xd, xs, sidx, tot);
    } else {
        for (int64_t b = 0; b < nb; b++)
            qk_tile_block(type, P, R, TT, b, rb, w, xq, xd, xs, sidx, tot);
    }
    UNROLL
    for (int i = 0; i < R; i++)
        UNROLL
    for (int t = 0; t < TT; t++)
        y[(t0 + t) * ldy + r + i] = _mm512_reduce_add_ps(tot[i][t]);
}

typedef void (*qk_tile_fn)(const e0_mat *, const k_act *, int64_t, int64_t, float *, int64_t);

/* Tiles per type and plane count: 4 rows x 1 token, 2 rows x 2, 3 or 4
 * tokens, and single rows of each. */
#define QK_TILE(NAME, TYPE, P, R, TT)                                                              \
    TGTV static void qk_##NAME##_##P##_##R##x##TT(const e0_mat *m, const k_act *a, int64_t r,      \
                                                  int64_t t0, float *y, int64_t ldy) {             \
        qk_tile(m, a, r, R, t0, TT, TYPE, P, y, ldy);                                              \
    }
#define QK_KERNEL(NAME, TYPE, P)                                                                   \
    QK_TILE(NAME, TYPE, P, 4, 1)                                                                   \
    QK_TILE(NAME, TYPE, P, 2, 2)                                                                   \
    QK_TILE(NAME, TYPE, P, 2, 3)                                                                   \
    QK_TILE(NAME, TYPE, P, 2, 4)                                                                   \
    QK_TILE(NAME, TYPE, P, 1, 1)                                                                   \
    QK_TILE(NAME, TYPE, P, 1, 2)                                                                   \
    QK_TILE(NAME, TYPE, P, 1, 3)                                                                   \
    QK_TILE(NAME, TYPE, P, 1, 4)                                                                   \
    TGTV static void qk_##NAME##_##P##_rows(const e0_mat *m, const k_act *a, int64_t r0,           \
                                            int64_t r1, float *y, int64_t ldy) {                   \
        static const qk_tile_fn t[8] = {qk_##NAME##_##P##_4x1, qk_##NAME##_##P##_2x2,              \
                                        qk_##NAME##_##P##_2x3, qk_##NAME##_##P##_2x4,              \
                                        qk_##NAME##_##P##_1x1, qk_##NAME##_##P##_1x2,              \
                                        qk_##NAME##_##P##_1x3, qk_##NAME##_##P##_1x4};             \
        qk_rows(m, a, r0, r1, y, ldy, t, m->cols >= QK_SEQ_NB * GGML_QK_K);                        \
    }

/* k-quant rows of at least this many blocks run one token alone through
 * single-row tiles (qk_rows' seq): the weights are then read as one
 * sequential stream, which the hardware prefetchers follow at about twice
 * the rate of a 4-row tile's four interleaved streams (docs/experiments.md
 * section 53). Not the 32-column types: their vectors hold two rows, so a
 * single row halves the work per instruction (measured: half the speed). */
#define QK_SEQ_NB 4

/* tiles: [TT - 1] the multi-row tile for TT tokens (4 rows for TT = 1, else
 * 2), [4 + TT - 1] its single-row twin; seq: single rows for TT = 1. */
INLV void qk_rows(const e0_mat *m, const k_act *a, int64_t r0, int64_t r1, float *y, int64_t ldy,
                  const qk_tile_fn tiles[8], const bool seq) {
    for (int64_t rb = r0; rb < r1; rb += QK_RB) {
        const int64_t re = rb + QK_RB < r1 ? rb + QK_RB : r1;
        for (int64_t t0 = 0; t0 < a->T;) {
            const int64_t left = a->T - t0;
            const int TT = left >= 4 ? 4 : (int)left;
            const int R = TT > 1 ? 2 : seq ? 1 : 4;
            int64_t r = rb;
            for (; R > 1 && r + R <= re; r += R)
                tiles[TT - 1](m, a, r, t0, y, ldy);
            for (; r < re; r++)
                tiles[4 + TT - 1](m, a, r, t0, y, ldy);
            t0 += TT;
        }
    }
}

QK_KERNEL(q4_K, GGML_Q4_K, 1)
QK_KERNEL(q4_K, GGML_Q4_K, 2)
QK_KERNEL(q6_K, GGML_Q6_K, 1)
QK_KERNEL(q6_K, GGML_Q6_K, 2)
QK_KERNEL(q4_K, GGML_Q4_K, 3)
QK_KERNEL(q6_K, GGML_Q6_K, 3)
QK_KERNEL(q5_K, GGML_Q5_K, 1)
QK_KERNEL(q5_K, GGML_Q5_K, 2)
QK_KERNEL(q5_K, GGML_Q5_K, 3)
QK_KERNEL(iq4_xs, GGML_IQ4_XS, 1)
QK_KERNEL(iq4_xs, GGML_IQ4_XS, 2)
QK_KERNEL(iq4_xs, GGML_IQ4_XS, 3)

/* ---- row kernels of the 32-column types (described in the header comment) ---- */


/* The sum of 8 lanes, in one fixed order. */
INLV float q8r_red8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

INLV void q8r_tile(const e0_mat *m, const k_act *a, int64_t r, const int R, int64_t t0,
                   const int TT, const int type, const int P, float *y, int64_t ldy) {
    const int NP = (R + 1) / 2; /* vectors: rows 2v (low lanes) and 2v + 1 (high) */
    const int64_t bs = q32_bsize(type), nb = m->cols / 32, rb = nb * bs;
    /* blocks per prefetch of 128 bytes of each row */
    const int64_t pfm = bs > 32 ? 1 : 3;
    const float off = q32_off(type);
    const uint8_t *w[4];
    const int8_t *xq[4];
    const float *xd[4], *xs[4];
    tile_rows(m, a, r, R, t0, TT, rb, w, xq, xd, xs);
    const __m512i cidx = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1);
    __m512 tot[2][4];
    UNROLL
    for (int v = 0; v < NP; v++)
        UNROLL
    for (int t = 0; t < TT; t++)
        tot[v][t] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        __m512i u[2];
        __m512 dw[2], mw[2];
        UNROLL
        for (int v = 0; v < NP; v++) {
            const uint8_t *p0 = w[2 * v] + b * bs;
            const __m256i lo = q32_codes(type, p0);
            __m256i hi, dh, mh;
            if (2 * v + 1 < R) {
                const uint8_t *p1 = w[2 * v + 1] + b * bs;
                hi = q32_codes(type, p1);
                dh = _mm256_mask_set1_epi16(_mm256_set1_epi16((short)e0_ld16(p0, 0)),
                                            (__mmask16)0xFF00, (short)e0_ld16(p1, 0));
                mh = _mm256_mask_set1_epi16(_mm256_set1_epi16((short)e0_ld16(p0, 1)),
                                            (__mmask16)0xFF00, (short)e0_ld16(p1, 1));
            } else {
                hi = _mm256_setzero_si256();
                dh = _mm256_maskz_set1_epi16((__mmask16)0x00FF, (short)e0_ld16(p0, 0));
                mh = _mm256_maskz_set1_epi16((__mmask16)0x00FF, (short)e0_ld16(p0, 1));
            }
            if (!(b & pfm)) {
                const char *pf = (const char *)(p0 + R * rb);
                _mm_prefetch(pf, _MM_HINT_T0);
                _mm_prefetch(pf + 64, _MM_HINT_T0);
                if (2 * v + 1 < R) {
                    _mm_prefetch(pf + rb, _MM_HINT_T0);
                    _mm_prefetch(pf + rb + 64, _MM_HINT_T0);
                }
            }
            u[v] = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
            dw[v] = _mm512_cvtph_ps(dh);
            if (Q32_MIN(type)) mw[v] = _mm512_cvtph_ps(mh);
        }
        UNROLL
        for (int t = 0; t < TT; t++) {
            const int8_t *xb = xq[t] + b * P * 32;
            const __m512 dl = _mm512_set1_ps(xd[t][b]);
            /* xks of the block's two 16-column halves, lanes 0 and 4 of each row */
            const __m512 cx = _mm512_maskz_permutexvar_ps(
                (__mmask16)0x1111, cidx,
                _mm512_castps128_ps512(_mm_castsi128_ps(
                    _mm_loadl_epi64((const __m128i *)(const void *)(xs[t] + 2 * b)))));
            const __m512 c = _mm512_mul_ps(_mm512_set1_ps(off), cx);
            __m512i x[3];
            UNROLL
            for (int p = 0; p < P; p++)
                x[p] = _mm512_broadcast_i64x4(
                    _mm256_loadu_si256((const __m256i *)(const void *)(xb + 32 * p)));
            UNROLL
            for (int v = 0; v < NP; v++) {
                __m512i I[3];
                UNROLL
                for (int p = 0; p < P; p++)
                    I[p] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), u[v], x[p]);
                __m512 f = _mm512_cvtepi32_ps(I[P - 1]);
                if (P == 3)
                    f = _mm512_fmadd_ps(_mm512_cvtepi32_ps(I[1]), _mm512_set1_ps(256.0f), f);
                if (P >= 2)
                    f = _mm512_fmadd_ps(_mm512_cvtepi32_ps(I[0]),
                                        _mm512_set1_ps(P == 3 ? 65536.0f : 256.0f), f);
                if (Q32_MIN(type)) {
                    tot[v][t] = _mm512_fmadd_ps(_mm512_mul_ps(f, dl), dw[v], tot[v][t]);
                    tot[v][t] = _mm512_fmadd_ps(mw[v], cx, tot[v][t]);
                } else {
                    tot[v][t] = _mm512_fmadd_ps(_mm512_fmsub_ps(f, dl, c), dw[v], tot[v][t]);
                }
            }
        }
    }
    UNROLL
    for (int v = 0; v < NP; v++)
        UNROLL
    for (int t = 0; t < TT; t++) {
        y[(t0 + t) * ldy + r + 2 * v] = q8r_red8(_mm512_castps512_ps256(tot[v][t]));
        if (2 * v + 1 < R)
            y[(t0 + t) * ldy + r + 2 * v + 1] = q8r_red8(_mm512_extractf32x8_ps(tot[v][t], 1));
    }
}

#define Q8R_TILE(NAME, TYPE, P, R, TT)                                                             \
    TGTV static void q8r_##NAME##_##P##_##R##x##TT(const e0_mat *m, const k_act *a, int64_t r,     \
                                                   int64_t t0, float *y, int64_t ldy) {            \
        q8r_tile(m, a, r, R, t0, TT, TYPE, P, y, ldy);                                             \
    }
#define Q8R_KERNEL(NAME, TYPE, P)                                                                  \
    Q8R_TILE(NAME, TYPE, P, 4, 1)                                                                  \
    Q8R_TILE(NAME, TYPE, P, 2, 2)                                                                  \
    Q8R_TILE(NAME, TYPE, P, 2, 3)                                                                  \
    Q8R_TILE(NAME, TYPE, P, 2, 4)                                                                  \
    Q8R_TILE(NAME, TYPE, P, 1, 1)                                                                  \
    Q8R_TILE(NAME, TYPE, P, 1, 2)                                                                  \
    Q8R_TILE(NAME, TYPE, P, 1, 3)                                                                  \
    Q8R_TILE(NAME, TYPE, P, 1, 4)                                                                  \
    TGTV static void q8r_##NAME##_##P##_rows(const e0_mat *m, const k_act *a, int64_t r0,          \
                                             int64_t r1, float *y, int64_t ldy) {                  \
        static const qk_tile_fn t[8] = {                                                           \
            q8r_##NAME##_##P##_4x1, q8r_##NAME##_##P##_2x2, q8r_##NAME##_##P##_2x3,                \
            q8r_##NAME##_##P##_2x4, q8r_##NAME##_##P##_1x1, q8r_##NAME##_##P##_1x2,                \
            q8r_##NAME##_##P##_1x3, q8r_##NAME##_##P##_1x4};                                       \
        qk_rows(m, a, r0, r1, y, ldy, t, false);                                                   \
    }

/* No 24-bit twin for Q8_0, IQ4_NL and Q4_1: at 3 planes these rows run
 * no faster than the f32 kernels (docs/experiments.md sections 30 and 32),
 * which MIXED keeps for their rows (qk_table). */
Q8R_KERNEL(q8_0, GGML_Q8_0, 1)
Q8R_KERNEL(q8_0, GGML_Q8_0, 2)
Q8R_KERNEL(iq4_nl, GGML_IQ4_NL, 1)
Q8R_KERNEL(iq4_nl, GGML_IQ4_NL, 2)
Q8R_KERNEL(q4_0, GGML_Q4_0, 1)
Q8R_KERNEL(q4_0, GGML_Q4_0, 2)
Q8R_KERNEL(q4_0, GGML_Q4_0, 3)
Q8R_KERNEL(q4_1, GGML_Q4_1, 1)
Q8R_KERNEL(q4_1, GGML_Q4_1, 2)
Q8R_KERNEL(q5_0, GGML_Q5_0, 1)
Q8R_KERNEL(q5_0, GGML_Q5_0, 2)
Q8R_KERNEL(q5_0, GGML_Q5_0, 3)
Q8R_KERNEL(q5_1, GGML_Q5_1, 1)
Q8R_KERNEL(q5_1, GGML_Q5_1, 2)
Q8R_KERNEL(q5_1, GGML_Q5_1, 3)

/* k_prep_qk (mat.c) vectorized; bit-identical to it. */
TGTV void k_avx512_prep_qk(const float *x, int64_t cols, int blk, int planes, int8_t *xk,
                           float *xkd, float *xks) {
    const int64_t nb = cols / blk;
    const int nv = blk / 16;
    const float scale = planes == 3 ? 65536.0f : planes == 2 ? 256.0f : 1.0f;
    for (int64_t b = 0; b < nb; b++) {
        const float *xv = x + b * blk;
        __m512 am = _mm512_setzero_ps();
        for (int v = 0; v < nv; v++)
            am = _mm512_max_ps(am, _mm512_abs_ps(_mm512_loadu_ps(xv + 16 * v)));
        const float d = _mm512_reduce_max_ps(am) / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        const float dl = d / scale;
        const __m512 vid = _mm512_set1_ps(id), vscale = _mm512_set1_ps(scale);
        const __m512i lo = _mm512_set1_epi32(-128), hi = _mm512_set1_epi32(127);
        for (int v = 0; v < nv; v++) {
            const __m512i n = _mm512_cvtps_epi32(
                _mm512_mul_ps(_mm512_mul_ps(_mm512_loadu_ps(xv + 16 * v), vid), vscale));
            __m512i q1 = n;
            for (int p = planes - 1; p > 0;
                 p--) { /* the sign-extended low byte, then the rest / 256 */
                const __m512i q = _mm512_srai_epi32(_mm512_slli_epi32(q1, 24), 24);
                q1 = _mm512_srai_epi32(_mm512_sub_epi32(q1, q), 8);
                _mm_storeu_si128((__m128i *)(void *)(xk + (b * planes + p) * blk + 16 * v),
                                 _mm512_cvtepi32_epi8(q));
            }
            q1 = _mm512_max_epi32(_mm512_min_epi32(q1, hi), lo);
            _mm_storeu_si128((__m128i *)(void *)(xk + b * planes * blk + 16 * v),
                             _mm512_cvtepi32_epi8(q1));
            xks[b * nv + v] = dl * (float)_mm512_reduce_add_epi32(n);
        }
        xkd[b] = dl;
    }
}

/* Kernels per type: panels, then rows, for 1..3 planes (NULL: none). */
typedef struct {
    uint32_t type;
    k_rows_fn panel[3], rows[3];
} qk_kernels;

#define QK_ROWS(N, K) {K##_##N##_1_rows, K##_##N##_2_rows, K##_##N##_3_rows}
static const qk_kernels qk_table[] = {
    {GGML_Q4_K, QK_ROWS(q4_K, qkp), QK_ROWS(q4_K, qk)},
    {GGML_Q5_K, QK_ROWS(q5_K, qkp), QK_ROWS(q5_K, qk)},
    {GGML_Q6_K, QK_ROWS(q6_K, qkp), QK_ROWS(q6_K, qk)},
    {GGML_IQ4_XS, QK_ROWS(iq4_xs, qkp), QK_ROWS(iq4_xs, qk)},
    /* Q8_0: no 24-bit rows (the f32 kernels, as fast, exact) */
    {GGML_Q8_0, QK_ROWS(q8_0, qkp), {q8r_q8_0_1_rows, q8r_q8_0_2_rows, NULL}},
    /* IQ4_NL, Q4_1: no 24-bit rows either (measured no faster, section 32) */
    {GGML_IQ4_NL, QK_ROWS(iq4_nl, qkp), {q8r_iq4_nl_1_rows, q8r_iq4_nl_2_rows, NULL}},
    {GGML_Q4_0, QK_ROWS(q4_0, qkp), QK_ROWS(q4_0, q8r)},
    {GGML_Q4_1, QK_ROWS(q4_1, qkp), {q8r_q4_1_1_rows, q8r_q4_1_2_rows, NULL}},
    {GGML_Q5_0, QK_ROWS(q5_0, qkp), QK_ROWS(q5_0, q8r)},
    {GGML_Q5_1, QK_ROWS(q5_1, qkp), QK_ROWS(q5_1, q8r)},
};

k_rows_fn k_avx512_ggml_int_pick(const e0_mat *m, int planes, int64_t T, int64_t panel_t,
                                 int *need) {
    if (m->type != E0_W_GGML || planes < 1 || planes > 3) return NULL;
    const qk_kernels *k = NULL;
    for (size_t i = 0; i < sizeof qk_table / sizeof *qk_table; i++)
        if (qk_table[i].type == m->gtype) k = &qk_table[i];
    if (!k || m->cols % (QK_IS32(m->gtype) ? 32 : GGML_QK_K) != 0) return NULL;
    const bool panel = T >= panel_t && m->cols <= QKP_MAXC;
    const k_rows_fn fn = panel ? k->panel[planes - 1] : k->rows[planes - 1];
    if (!fn) return NULL;
    *need = planes == 3 ? K_NEED_XK3 : planes == 2 ? K_NEED_XK2 : K_NEED_XK;
    /* activations per 32 columns in the panels and the 32-column types' rows */
    if (panel || QK_IS32(m->gtype)) *need |= K_NEED_XK32;
    else if (QK_IS45(m->gtype)) *need |= K_NEED_XK45;
    return fn;
}

#else

void k_avx512_prep_qk(const float *x, int64_t cols, int blk, int planes, int8_t *xk, float *xkd,
                      float *xks) {
    k_prep_qk(x, cols, blk, planes, xk, xkd, xks);
}

k_rows_fn k_avx512_ggml_int_pick(const e0_mat *m, int planes, int64_t T, int64_t panel_t,
                                 int *need) {
    (void)m, (void)planes, (void)T, (void)panel_t, (void)need;
    return NULL;
}

#endif
