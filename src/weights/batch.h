/* What a forward pass hands its layers and the streaming MoE layer: the
 * batch of tokens (runs of sessions) and the scratch they are computed in.
 * The types live below stream/ and model/ because both read them; making
 * a batch (batch_one) and the passes are the forward pass's (model/). */
#ifndef E0_WEIGHTS_BATCH_H
#define E0_WEIGHTS_BATCH_H

#include "edge0.h"
#include "quant/kernels.h"
#include "quant/mat.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

/* Query heads of one KV head that attention takes together (mat_attend_heads). */
#define E0_ATTN_GROUP 8

/* Scratch for a batch of up to n_batch tokens; sized once per session. */
typedef struct {
    float *x, *h, *y;       /* [B, H] residual, normed input, block output */
    float *q, *k, *v, *att; /* attention: [B, q rows], [B, nkv*hd] x2, [B, nh*hd] */
    float *scores;          /* [nscores, E0_ATTN_GROUP, n_ctx]: rows per compute thread */
    float *rope_cs;         /* [rotary_dim]: cos, sin of each rotary pair at one position */
    int nscores;
    float *proj, *mix, *hist; /* DeltaNet: [B, packed rows], [B, conv_dim], [K-1+B, conv_dim] */
    float *zz, *bb, *aa, *o;  /* [B, Vd], [B, Hv], [B, Hv], [B, Vd] */
    float *rlogits, *rw;      /* MoE: [B, E], [B, k] */
    int32_t *ridx, *count, *order;   /* [B, k], [E], [B*k] */
    int32_t *exps, *start;           /* routed experts of a call, their runs in order[]: [E + 1] */
    int32_t *rest, *rstart, *rpairs; /* the part that goes through exact: [E + 1], [E + 1], [B*k] */
    void **xent;                     /* [E] LRU entries pinned by one call */
    float *xs, *g, *u, *ys;          /* gathered: [B, H], [B, I'], [B, I'], [B, H] */
    float *eo;                       /* [B*k, H] per (token, slot) expert output */
    float *shg;                      /* [B] */
} e0_scratch;

/* ---- Forward passes over one or several sequences ----------------------
 * A forward pass runs T tokens in runs: run r is tokens [t0, t0 + n) of the
 * batch, the next n positions of session s (s->pos .. s->pos + n - 1). One
 * session's prefill or decode step is one run; a batched decode step
 * (e0_session_eval_batch) is one run of one token per session; a merged
 * prefill pass (pass_begin) is one run per session, of any lengths. The
 * dense matmuls (projections, shared expert, lm_head) run once over all T
 * tokens, so each weight is read once per pass; attention, the DeltaNet
 * conv and recurrence run per run against that session's KV cache and
 * states; the MoE layer computes each routed expert once over every token
 * routed to it (stream/switchglu.h).
 *
 * Per token, the arithmetic is the one a pass of that run alone gives it.
 * The matmul kernels compute every (row, token) alike whatever the other
 * tokens (mat.h), except that some kernel sets change arithmetic when a
 * call reaches K_PANEL_MIN_T tokens ("panel" arithmetic; below it "row"
 * arithmetic, which mat_matmul_decode gives at any T). So the tokens of
 * runs of K_PANEL_MIN_T or more come first in a pass (tokens [0, Tp)) and
 * the dense matmuls run them in one mat_matmul call, the tokens of shorter
 * runs (decode tokens among them) in one mat_matmul_decode call; in the
 * MoE, each expert's tokens split the same way by how many tokens of their
 * own run route to that expert (switchglu.c). A sequence batched with
 * others therefore gets logits bit-identical to its pass alone. */
typedef struct {
    e0_session *s;
    int t0, n;
} e0_run;

/* Sessions one pass of e0_session_eval_batch takes (more run in several). */
enum { E0_BATCH_MAX = 256 };

typedef struct {
    e0_scratch *S;     /* buffers for the T tokens (a session's scratch, n_batch >= T) */
    const e0_run *run; /* [nrun], in token order, each session at most once; runs of
                          K_PANEL_MIN_T tokens or more first */
    int nrun, T;
    int Tp;      /* tokens [0, Tp) are those of runs of K_PANEL_MIN_T or more (panel arithmetic) */
    bool decode; /* every run is one decode token: the decode expert paths (switchglu.h) */
} e0_batch;

/* The run token t of the batch belongs to. */
static inline int batch_run_of(const e0_batch *b, int t) {
    int lo = 0, hi = b->nrun - 1;
    while (lo < hi) { /* the last run starting at or before t */
        const int mid = (lo + hi + 1) / 2;
        if (b->run[mid].t0 <= t)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

/* y = W x for the batch's T tokens (x: [T, ldx], y: [T, ldy]), each token
 * in its run's arithmetic: mat_matmul over tokens [0, Tp), mat_matmul_decode
 * over [Tp, T). */
static inline void batch_matmul(const e0_batch *b, const e0_mat *m, const float *x, int64_t ldx,
                                float *y, int64_t ldy) {
    if (b->Tp > 0) mat_matmul(m, x, ldx, b->Tp, y, ldy);
    if (b->T > b->Tp)
        mat_matmul_decode(m, x + (size_t)b->Tp * (size_t)ldx, ldx, b->T - b->Tp,
                          y + (size_t)b->Tp * (size_t)ldy, ldy);
}

static inline float e0_silu(float x) {
    return x / (1.0f + expf(-x));
}
static inline float e0_sigmoid(float x) {
    return 1.0f / (1.0f + expf(-x));
}

#endif
