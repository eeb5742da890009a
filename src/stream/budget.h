/* Sizing the streaming layer from a memory budget (--mem-budget). */
#ifndef E0_STREAM_BUDGET_H
#define E0_STREAM_BUDGET_H

#include "edge0.h"
#include "weights/weights.h"

#include <stddef.h>

/* Bytes of one LRU slot: an expert bundle laid out in aligned spans for
 * direct reads (stream/bundle.h), so a little more than its expert bytes. */
size_t budget_bundle_bytes(const e0_model *m);
/* The expert bytes of the largest bundle (what a miss reads). */
size_t budget_bundle_data(const e0_model *m);

/* Bytes of one cached K or V value of a KV cache of type t. */
static inline uint32_t budget_kv_elem_bytes(e0_kv_type t) {
    return t == E0_KV_F16 ? 2 : 4;
}

/* One attention layer's K and V for n positions, in values of type t. */
uint64_t budget_kv_layer_bytes(const e0_config *c, uint64_t n, e0_kv_type t);
/* One DeltaNet layer's conv state and recurrent state (floats). */
uint64_t budget_conv_bytes(const e0_config *c);
uint64_t budget_rec_bytes(const e0_config *c);

/* KV cache (values of type kv), DeltaNet states and scratch of one session
 * of n_ctx positions (as e0_session_new sizes them); with mtp, the MTP
 * block's state too (model/mtp.c: its KV cache, the DeltaNet states kept
 * for a rejected draft, its hidden rows). */
uint64_t budget_session_bytes(const e0_config *c, int32_t n_ctx, e0_kv_type kv, bool mtp);

/* Sets o->layer.cache_slots (and caps prefetch_cap, staged/hot/full-layer
 * buffers) so that resident weights + *n_seqs sessions of `n_ctx`
 * positions + stream buffers + cache fit in o->mem_budget. *n_seqs
 * E0_SEQS_AUTO: the most, up to E0_AUTO_SEQS, that leave the cache two
 * tokens' working set (at least one). Writes what it chose into note.
 * E0_EINVAL when even the resident part does not fit. */
int budget_apply(e0_engine_opts *o, const e0_model *m, int32_t n_ctx, int32_t *n_seqs, char *note,
                 size_t note_len, char *err);

#endif
