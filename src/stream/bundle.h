/* Expert bundles: the bytes of one routed expert, as the streaming layer
 * moves them (DESIGN.md §3).
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
 * In the buffer each range starts at a multiple of XB_ALIGN bytes.
 */
#ifndef E0_STREAM_BUNDLE_H
#define E0_STREAM_BUNDLE_H

#include "io/safetensors.h"
#include "model/model.h"

#define XB_MAX_RANGES 9
#define XB_ALIGN 64

typedef enum { XB_ORDER_MATH, XB_ORDER_GATE_FIRST } xb_order;

typedef struct {
    uint32_t file;
    uint64_t off, len; /* absolute in the shard */
    size_t at;         /* offset in the bundle buffer */
} xb_range;

typedef struct {
    int nparts;          /* 3 separate, 2 fused */
    e0_mat tmpl[3];      /* shape and type of each part, in bundle order */
    int nr;              /* ranges: 1 per part for float weights, 3 for quantized */
    xb_range r[XB_MAX_RANGES];
    size_t bytes;        /* buffer size the bundle needs */
} xb_plan;

/* Plans expert `e` of MoE layer `layer`: byte ranges from its views into the
 * mapping. */
int xb_plan_expert(const e0_model *m, int layer, int e, xb_order order, xb_plan *out, char *err);

/* Reads every range of `p` into buf (p->bytes). Returns bytes read via *n. */
int xb_read(const st_set *st, const xb_plan *p, uint8_t *buf, char *err);

/* Views of the bundle in buf, by position (see the order above). */
void xb_views(const xb_plan *p, const uint8_t *buf, e0_expert *out);

/* madvise(WILLNEED) over the plan's ranges. */
void xb_willneed(const st_set *st, const xb_plan *p);

#endif
