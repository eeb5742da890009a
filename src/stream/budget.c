#include "stream/budget.h"

#include "stream/bundle.h"
#include "util/err.h"

#include <stdio.h>
#include <string.h>

static double gib(uint64_t b) {
    return (double)b / (double)(1ull << 30);
}

/* b in the largest unit that keeps it >= 1: "1.0 KiB", "512.0 MiB", "7.80 GiB". */
static const char *size_str(char *buf, size_t n, uint64_t b) {
    if (b >= (1ull << 30))
        snprintf(buf, n, "%.2f GiB", gib(b));
    else if (b >= (1ull << 20))
        snprintf(buf, n, "%.1f MiB", (double)b / (1 << 20));
    else
        snprintf(buf, n, "%.1f KiB", (double)b / 1024);
    return buf;
}

/* The largest bundle plan of the model, as the stream sizes its slots: the
 * expert bytes are the same for every bundle, the alignment slack depends
 * on where each range sits in the file. */
static int largest_plan(const e0_model *m, xb_plan *out) {
    int rc = E0_ENOTFOUND;
    memset(out, 0, sizeof *out);
    for (int l = 0; l < model_layers(m); l++)
        for (int e = 0; m->layers[l].moe && e < m->cfg.n_experts; e++) {
            xb_plan p;
            if (xb_plan_expert(m, l, e, XB_ORDER_MATH, &p, NULL) != 0) continue;
            if (rc != 0 || p.bytes > out->bytes) *out = p;
            rc = 0;
        }
    return rc;
}

/* A slot's size: the expert bytes plus the slack of aligned spans. */
size_t budget_bundle_bytes(const e0_model *m) {
    xb_plan p;
    return largest_plan(m, &p) == 0 ? p.bytes : 0;
}

size_t budget_bundle_data(const e0_model *m) {
    xb_plan p;
    return largest_plan(m, &p) == 0 ? p.data : 0;
}

uint64_t budget_kv_layer_bytes(const e0_config *c, uint64_t n, e0_kv_type t) {
    return 2 * n * (uint64_t)c->n_kv_heads * (uint64_t)c->head_dim * budget_kv_elem_bytes(t);
}

uint64_t budget_conv_bytes(const e0_config *c) {
    return sizeof(float) * (uint64_t)(c->conv_kernel - 1) *
           (2 * (uint64_t)c->lin_k_heads * c->lin_k_dim + (uint64_t)c->lin_v_heads * c->lin_v_dim);
}

uint64_t budget_rec_bytes(const e0_config *c) {
    return sizeof(float) * (uint64_t)c->lin_v_heads * c->lin_k_dim * c->lin_v_dim;
}

/* KV cache, DeltaNet states and scratch of one session (as e0_session_new sizes them). */
uint64_t budget_session_bytes(const e0_config *c, int32_t n_ctx, e0_kv_type kv_type, bool mtp) {
    uint64_t kv = 0, lin = 0;
    const uint64_t Kd = (uint64_t)c->lin_k_heads * c->lin_k_dim,
                   Vd = (uint64_t)c->lin_v_heads * c->lin_v_dim;
    for (int l = 0; l < c->n_layers; l++) {
        if (c->layer_linear[l])
            lin += budget_conv_bytes(c) + budget_rec_bytes(c);
        else
            kv += budget_kv_layer_bytes(c, (uint64_t)n_ctx, kv_type);
    }
    const uint64_t B = 512, H = (uint64_t)c->hidden, k = (uint64_t)c->top_k;
    uint64_t scratch =
        4 * B * (8 * H + k * H + 4 * (2 * Kd + 2 * Vd) + 4 * (uint64_t)c->n_heads * c->head_dim) +
        4 * (uint64_t)n_ctx;
    if (mtp) /* its KV cache, a second copy of the DeltaNet states, hidden rows [B + 2, H] and [B, 2H] */
        kv += budget_kv_layer_bytes(c, (uint64_t)n_ctx, kv_type) + lin + 4 * ((B + 2) * H + B * 2 * H);
    return kv + lin + scratch;
}

int budget_apply(e0_engine_opts *o, const e0_model *m, int32_t n_ctx, int32_t *n_seqs, char *note,
                 size_t note_len, char *err) {
    e0_layer_opts *lo = &o->layer;
    const e0_config *c = &m->cfg;
    xb_plan p0;
    largest_plan(m, &p0); /* all zero when there is none */
    const uint64_t bundle = p0.bytes;
    int moe_layers = 0;
    for (int l = 0; l < model_layers(m); l++) /* the MTP block's too */
        moe_layers += m->layers[l].moe;
    /* resident: non-expert weights (mapped, in the page cache), a session,
     * and a margin for the process itself (code, allocator, I/O buffers) */
    const uint64_t weights = m->weight_bytes - m->expert_bytes;
    const uint64_t one = budget_session_bytes(c, n_ctx, o->kv_type, m->mtp.on);
    const uint64_t margin = (64ull << 20) + o->reserve_bytes;
    uint64_t buffers = bundle; /* the overflow bundle */
    if (lo->staged) buffers += (uint64_t)moe_layers * (uint64_t)lo->staged_n * bundle;
    int hot = lo->hot_per_layer > lo->prefill_hot ? lo->hot_per_layer : lo->prefill_hot;
    if (hot)
        buffers +=
            (uint64_t)(lo->hot_window ? lo->hot_window : moe_layers) * (uint64_t)hot * bundle;
    if (lo->full_layer_prefill) buffers += 2 * (uint64_t)c->n_experts * bundle;
    const uint64_t ws_bytes = 2 * (uint64_t)moe_layers * (uint64_t)c->top_k * bundle;
    if (*n_seqs == E0_SEQS_AUTO) { /* the most sessions that leave two tokens' working set cached */
        int32_t n = E0_AUTO_SEQS;
        while (n > 1 && o->mem_budget < weights + (uint64_t)n * one + margin + buffers + ws_bytes) n--;
        *n_seqs = n;
    }
    if (*n_seqs < 1) *n_seqs = 1;
    const uint64_t sess = (uint64_t)*n_seqs * one;
    const uint64_t fixed = weights + sess + margin + buffers;
    if (o->mem_budget < fixed + bundle) {
        char b0[32], b1[32], b2[32], b3[32], b4[32];
        return e0_fail(err, E0_EINVAL,
                       "--mem-budget %s is too small: non-expert weights %s + %d session(s) %s + stream "
                       "buffers %s + margin need %s before any expert is cached (try a larger "
                       "budget, --prefill-ondemand, or fewer staged/hot slots)",
                       size_str(b0, sizeof b0, o->mem_budget), size_str(b1, sizeof b1, weights),
                       (int)*n_seqs, size_str(b2, sizeof b2, sess), size_str(b3, sizeof b3, buffers),
                       size_str(b4, sizeof b4, fixed + bundle));
    }
    uint64_t slots = (o->mem_budget - fixed) / bundle;
    if (slots > (uint64_t)moe_layers * (uint64_t)c->n_experts)
        slots = (uint64_t)moe_layers * (uint64_t)c->n_experts;
    lo->cache_slots = (int32_t)slots;
    if (lo->prefetch_cap > lo->cache_slots / 2) lo->prefetch_cap = lo->cache_slots / 2;
    const int32_t ws = moe_layers * c->top_k;
    snprintf(
        note, note_len,
        "mem budget %.2f GiB: non-expert weights %.2f GiB, %d session(s) %.2f GiB, stream buffers %.2f "
        "GiB -> "
        "cache_slots=%d (%.2f GiB in %.2f MiB slots = %.2f MiB bundle + %.1f%% alignment slack for "
        "direct reads; %.1f%% of all experts), prefetch_cap=%d%s",
        gib(o->mem_budget), gib(weights), (int)*n_seqs, gib(sess), gib(buffers), lo->cache_slots,
        gib((uint64_t)lo->cache_slots * bundle), (double)bundle / (1 << 20),
        (double)p0.data / (1 << 20),
        p0.data ? 100.0 * (double)(bundle - p0.data) / (double)p0.data : 0.0,
        100.0 * (double)lo->cache_slots / ((double)moe_layers * c->n_experts), lo->prefetch_cap,
        lo->cache_slots < ws ? "; below one token's working set, so no hits across tokens" : "");
    return 0;
}
