/* The engine's statistics, notes and cache studies: the public API of
 * edge0.h that reads an open engine (model/model.h). */
#include "model/model.h"

#include "gpu/gmodel.h"

#include "stream/cachesim.h"
#include "stream/switchglu.h"
#include "util/err.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

void e0_engine_stats(e0_engine *e, e0_stats *st) {
    memset(st, 0, sizeof *st);
    st->prefill_tokens = e->prefill_tokens;
    st->decode_tokens = e->decode_tokens;
    st->prefill_s = e->prefill_s;
    st->decode_s = e->decode_s;
    st->mtp_drafts = e->mtp_drafts;
    st->mtp_rejected = e->mtp_rejected;
    st->mtp_s = e->mtp_s;
    st->decode_bytes_read = e->decode_bytes_read;
    stream_counters c;
    stream_counters_get(e->stream, &c);
    st->bytes_read = c.bytes_read;
    st->bytes_touched = c.bytes_touched;
    st->expert_calls = c.expert_calls;
    for (int l = 0; l < model_layers(&e->model); l++) { /* the MTP block's experts too */
        uint64_t h, m;
        stream_layer_stats(e->stream, l, &h, &m);
        st->lru_hits += h;
        st->lru_misses += m;
        st->working_set += e->model.layers[l].moe ? e->top_k : 0;
    }
    st->cache_slots = stream_cache_slots(e->stream);
    stream_pressure(e->stream, &st->cache_limit, &st->pressure_shrinks, &st->pressure_grows);
    st->bundle_bytes = stream_bundle_bytes(e->stream);
    st->staged_hits = c.staged_hits;
    st->exact_fallbacks = c.exact_fallbacks;
    st->drops = c.drops;
    st->predicted_routed = c.predicted_routed;
    st->routed_staged = c.routed_staged;
    st->hot_hits = c.hot_hits;
    st->hot_misses = c.hot_misses;
    st->full_layers = c.full_layers;
    st->overflow_reads = c.overflow_reads;
    st->spec_loads = c.spec_loads;
    st->spec_used = c.spec_used;
    st->io_wait_s = c.io_wait_s;
    st->compute_s = c.compute_s;
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) == 0) st->peak_rss = (uint64_t)ru.ru_maxrss * 1024u;
    if (e->gpu) {
        st->pcie_gbs = e->gpu->h2d_gbs;
        st->hbm_gbs = e->gpu->d2d_gbs;
        st->gpu_token_bytes = e->gpu_token_bytes;
    }
    const gpu_vcache *vc = e->gmodel ? e->gmodel->vc : NULL;
    if (vc) {
        st->vram_slots = vc->n_slots;
        st->vram_hits = vc->hits;
        st->vram_misses = vc->misses;
        st->pcie_bytes = vc->bytes_in + vc->bytes_staged;
        st->pcie_staged_bytes = vc->bytes_staged;
        st->vram_wait_s = vc->wait_s;
        st->vram_copy_s = vc->copy_s;
        st->host_pinned = vc->pinned;
        st->vram_prefetched = vc->prefetched;
        st->vram_prefetch_used = vc->prefetch_used;
        st->vram_host_experts = vc->hm ? vc->hm->experts : 0;
        st->vram_host_s = vc->hm ? vc->hm->s : 0;
        st->vram_host_max = vc->hm ? vc->hm->max : 0;
        st->vram_host_timed = vc->hm && vc->hm->tuning;
        gpu_hstats h;
        hcache_stats(e->gmodel, &h);
        st->host_cache_slots = h.slots;
        st->host_cache_hits = h.hits;
        st->host_cache_misses = h.misses;
        st->host_cache_kept = h.kept;
        st->disk_bytes = h.bytes_read;
        st->disk_read_s = h.read_s;
    }
}

void e0_engine_layer_stats(e0_engine *e, int32_t layer, uint64_t *hits, uint64_t *misses) {
    *hits = *misses = 0;
    if (layer < 0 || layer >= e->model.cfg.n_layers) return;
    const gpu_vcache *vc = e->gmodel ? e->gmodel->vc : NULL;
    if (vc) { /* on the GPU under a VRAM budget: its cache's lookups */
        *hits = vc->lhits[layer], *misses = vc->lmisses[layer];
        return;
    }
    stream_layer_stats(e->stream, layer, hits, misses);
}

void e0_engine_stats_reset(e0_engine *e) {
    stream_counters_reset(e->stream);
    gpu_vcache *vc = e->gmodel ? e->gmodel->vc : NULL;
    if (vc) {
        vc->hits = vc->misses = vc->bytes_in = vc->bytes_staged = vc->prefetched = vc->prefetch_used = 0;
        vc->wait_s = vc->copy_s = 0;
        for (int l = 0; l < vc->n_layers; l++) vc->lhits[l] = vc->lmisses[l] = 0;
        hcache_reset_stats(e->gmodel);
        if (vc->hm) vc->hm->experts = 0, vc->hm->s = 0;
    }
    e->prefill_tokens = e->decode_tokens = 0;
    e->prefill_s = e->decode_s = 0;
    e->mtp_drafts = e->mtp_rejected = e->decode_bytes_read = 0;
    e->mtp_s = 0;
}

int32_t e0_engine_distinct_experts(const e0_engine *e, int32_t layer) {
    if (layer < 0 || layer >= e->model.cfg.n_layers || !e->model.layers[layer].moe) return 0;
    return stream_distinct_experts(e->stream, layer);
}

int32_t e0_engine_files(const e0_engine *e) {
    int32_t n = 0;
    while (st_file_fd(e->model.st, (uint32_t)n) >= 0)
        n++;
    return n;
}

const char *e0_engine_file(const e0_engine *e, int32_t i) {
    return st_file_path(e->model.st, (uint32_t)i);
}

void e0_engine_drop_cache(e0_engine *e) {
    for (int32_t i = 0; i < e0_engine_files(e); i++)
        posix_fadvise(st_file_fd(e->model.st, (uint32_t)i), 0, 0, POSIX_FADV_DONTNEED);
}

uint64_t e0_engine_warm_cache(e0_engine *e) {
    enum { CHUNK = 16 << 20 };
    char *buf = malloc(CHUNK);
    uint64_t total = 0;
    for (int32_t i = 0; buf && i < e0_engine_files(e); i++) {
        int fd = st_file_fd(e->model.st, (uint32_t)i);
        posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
        for (off_t off = 0;; off += CHUNK) {
            ssize_t r = pread(fd, buf, CHUNK, off);
            if (r <= 0) break;
            total += (uint64_t)r;
        }
    }
    free(buf);
    return total;
}

int32_t e0_engine_seqs(const e0_engine *e) {
    return e->n_seqs;
}

const char *e0_engine_budget_note(const e0_engine *e) {
    return e->budget_note;
}
const char *e0_engine_io_note(const e0_engine *e) {
    return e->io_note;
}

const char *e0_policy_name(e0_policy p) {
    return cachesim_name((cachesim_policy)p);
}

int e0_engine_cache_policy(const e0_engine *e) {
    return e->opts.layer.cache_policy;
}

int e0_engine_trace_start(e0_engine *e, size_t cap, size_t tokens, char *err) {
    const e0_config *c = &e->model.cfg;
    const size_t max_floats = (size_t)256 << 20 >> 2; /* 256 MiB of logits at most */
    size_t floats = (size_t)model_layers(&e->model) * (size_t)c->n_experts; /* the stream's layers */
    floats = tokens > max_floats / (floats ? floats : 1) ? max_floats : tokens * floats;
    return stream_trace_start(e->stream, cap, floats, err);
}

size_t e0_engine_trace(e0_engine *e, const uint32_t **keys) {
    size_t n;
    const uint32_t *t = stream_trace(e->stream, &n, NULL);
    if (keys) *keys = t;
    return n;
}

int e0_engine_cache_study(e0_engine *e, int32_t slots, size_t from, e0_cache_study *out,
                          char *err) {
    _Static_assert((int)E0_POLICIES == (int)CACHESIM_N, "policy lists differ");
    memset(out, 0, sizeof *out);
    size_t n;
    const uint32_t *t = stream_trace(e->stream, &n, &out->dropped);
    if (!t) return e0_fail(err, E0_EINVAL, "no trace recorded (e0_engine_trace_start)");
    if (from > n) from = n;
    out->slots = slots;
    out->requests = n - from;
    const e0_config *c = &e->model.cfg;
    const uint32_t keys = (uint32_t)model_layers(&e->model) * (uint32_t)c->n_experts;
    cachesim_obs obs;
    stream_trace_obs(e->stream, &obs);
    out->router_replayed = obs.n > 0;
    for (int p = 0; p < E0_POLICIES; p++) {
        const bool routed = p == E0_POLICY_ROUTER || p == E0_POLICY_RECENT; /* they read the router */
        if (routed && !out->router_replayed) continue;
        const double h = routed ? (double)e->opts.layer.router_half_life : (double)e->opts.layer.cache_half_life * slots;
        int rc = cachesim_run((cachesim_policy)p, t, n, from, keys, slots, h, &obs, &out->hits[p],
                              err);
        if (rc) return rc;
    }
    return 0;
}
