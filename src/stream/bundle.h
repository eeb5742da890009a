/* Expert bundles: the bytes of one routed expert, as the streaming layer
 * moves them (docs/design.md §3).
 *
 * The bundle order follows the argument order of the math:
 *   separate: (up_proj, gate_proj, down_proj), each (weight, scales, biases),
 *             so the stacked arguments (w_u, s_u, b_u, w_g, s_g, b_g, w_d, s_d, b_d)
 *             line up with swiglu(up, gate) = silu(gate) * up;
 *   fused:    (gate_up_proj, down_proj); gate_up holds the expert's gate rows
 *             on top and its up rows below, so splitting it in halves gives
 *             (gate, up).
 * xb_views() reads parts by position. A plan built in another order (the
 * historical gate-first bug, XB_ORDER_GATE_FIRST, kept for the test that
 * proves the order matters) silently computes silu(up) * gate.
 *
 * Buffer layout, made for O_DIRECT (io/safetensors.h st_pread_direct): each
 * range owns the XB_ALIGN-aligned span of the file that encloses it, and
 * the spans sit one after another in the buffer, each starting at a
 * multiple of XB_ALIGN. So a range's bytes lie at the same offset modulo
 * XB_ALIGN in the buffer as in the file, a direct read of its span lands
 * them in place, and the kernels read them where they lie (unaligned, as in
 * the mapping). Every buffer that holds bundles (LRU slots, staged slots,
 * hot stacks, the overflow and whole-layer buffers) starts XB_ALIGN-aligned
 * and strides by plan sizes, which are multiples of XB_ALIGN. The slack
 * (the span bytes outside the ranges, < 2 * XB_ALIGN per range) is read but
 * never used: `bytes` counts it, `data` does not.
 */
#ifndef E0_STREAM_BUNDLE_H
#define E0_STREAM_BUNDLE_H

#include "io/safetensors.h"
#include "weights/weights.h"

#define XB_MAX_RANGES 9
#define XB_ALIGN      ST_DIRECT_ALIGN

typedef enum { XB_ORDER_MATH, XB_ORDER_GATE_FIRST } xb_order;

typedef struct {
    uint32_t file;
    uint64_t off, len; /* absolute in the shard */
    size_t at;         /* offset in the bundle buffer */
} xb_range;

typedef struct {
    int nparts;     /* 3 separate, 2 fused */
    e0_mat tmpl[3]; /* shape and type of each part, in bundle order */
    int nr;         /* ranges: 1 per part for float weights, 3 for quantized */
    xb_range r[XB_MAX_RANGES];
    size_t bytes;  /* buffer size the bundle needs: its spans, a multiple of XB_ALIGN */
    uint64_t data; /* the expert's bytes in the checkpoint: the sum of the range lengths */
} xb_plan;

/* Plans expert `e` of MoE layer `layer`: byte ranges from its views into the
 * mapping. */
int xb_plan_expert(const e0_model *m, int layer, int e, xb_order order, xb_plan *out, char *err);

/* Reads every range of `p` into buf (p->bytes) through the page cache. */
int xb_read(const st_set *st, const xb_plan *p, uint8_t *buf, char *err);
/* The same with O_DIRECT where the shard allows it; buf XB_ALIGN-aligned.
 * *all_direct (may be NULL) says whether every range went direct (else some
 * went through the page cache: io/safetensors.h st_pread_direct). The
 * ranges are in flight together (st_pread_direct_many). */
int xb_read_direct(const st_set *st, const xb_plan *p, uint8_t *buf, bool *all_direct, char *err);

/* Views of the bundle in buf, by position (see the order above). */
void xb_views(const xb_plan *p, const uint8_t *buf, e0_expert *out);

/* madvise(WILLNEED) over the plan's ranges. */
void xb_willneed(const st_set *st, const xb_plan *p);

#endif
