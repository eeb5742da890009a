/* Engine and session: the public API of edge0.h over the model. */
#include "gpu/gmodel.h"
#include "model/model.h"

#include "model/forward.h"
#include "stream/budget.h"
#include "stream/cachesim.h"
#include "stream/switchglu.h"
#include "util/err.h"
#include "util/clock.h"
#include "util/meminfo.h"
#include "util/pool.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

/* Bytes an automatic budget leaves to everything else under the limit
 * (the allocator, the page cache's share of reads, other programs). */
const char *e0_io_name(e0_io_mode io) {
    static const char *const names[E0_IO_MODES] = {"auto", "pread", "mmap", "load"};
    return (unsigned)io < E0_IO_MODES ? names[io] : "?";
}

const char *e0_kv_name(e0_kv_type t) {
    return t == E0_KV_F32 ? "f32" : t == E0_KV_F16 ? "f16" : "?";
}

const char *e0_mtp_name(e0_mtp_mode m) {
    return m == E0_MTP_OFF ? "off" : m == E0_MTP_ON ? "on" : m == E0_MTP_AUTO ? "auto" : "?";
}

/* --mtp: the MTP block made part of the model when asked for and possible
 * (after the GPU plan: the block drafts on the CPU only). */
static int resolve_mtp(e0_engine *e, const char *model_dir, char *err) {
    const e0_mtp_mode want = e->opts.mtp;
    const int n = e->model.mtp.n_layers;
    if (want == E0_MTP_OFF) return 0;
    if (want != E0_MTP_ON && want != E0_MTP_AUTO)
        return e0_fail(err, E0_EINVAL, "mtp %d is not E0_MTP_OFF, E0_MTP_ON or E0_MTP_AUTO", (int)want);
    /* auto: the block loaded where it can draft (a CPU engine, a block in the file), and drafting
     * turned on only where this machine measures it to pay (mtp_auto; on the 2-core VM of session
     * 32 it did not: 35B shape 1.02x / 0.98x at acceptance 0.75, 0.91x at 0.62, 0.58x at 0) */
    if (want == E0_MTP_AUTO && (e->gpu_ordinal >= 0 || !n)) return 0;
    if (e->gpu_ordinal >= 0)
        return e0_fail(err, E0_EUNSUPPORTED,
                       "--mtp on: speculative decoding with the MTP block is CPU-only for now, and "
                       "the engine computes on GPU %d (--gpu off computes on the CPU; --mtp off or "
                       "auto runs on the GPU without it)",
                       e->gpu_ordinal);
    if (!n)
        return e0_fail(err, E0_ENOTFOUND,
                       "--mtp on: %s has no multi-token-prediction (MTP) block to draft with (a "
                       "GGUF file needs nextn_predict_layers, a Hugging Face folder mtp.* tensors; "
                       "--mtp auto runs without)",
                       model_dir);
    const int32_t V = e->model.cfg.vocab, want_v = e->opts.mtp_vocab;
    if (want_v < -1) return e0_fail(err, E0_EINVAL, "mtp_vocab %d is not -1 (all), 0 (auto) or a count", want_v);
    /* whole panels of 16 rows (a repacked head's views start on one) */
    const int32_t dv = want_v == -1 ? V : want_v == 0 ? (V > 65536 ? 32768 : V) : (want_v + 15) / 16 * 16;
    e->model.mtp.draft_vocab = dv < V ? dv : V;
    e->mtp_auto_on = want == E0_MTP_AUTO;
    e->mtp_auto = (e0_mtp_auto){.state = MTP_AUTO_MEASURE};
    return model_mtp_load(&e->model, err);
}

static uint64_t auto_headroom(uint64_t avail) {
    return (256ull << 20) + avail / 32;
}

/* E0_IO_AUTO: the whole checkpoint loaded into memory when it fits (no page
 * faults, huge pages: docs/experiments.md section 20); pread into the
 * bounded LRU when memory is budgeted or short, where the kernel's
 * residency would thrash. Without a budget, choosing to read experts on
 * demand sets one (E0_BUDGET_AUTO): the smaller of the cgroup's limit and
 * MemAvailable, less auto_headroom. An I/O mode the caller chose keeps the
 * cache_slots it gave. */
static int choose_io(e0_engine *e, char *err) {
    const uint64_t cg = mem_cgroup_limit(), host = mem_available(), w = e->model.weight_bytes;
    const bool by_cg = cg && (!host || cg < host);
    const uint64_t avail = by_cg ? cg : host;
    const char *why;
    const bool chosen = e->opts.io == E0_IO_AUTO;
    /* a loaded checkpoint cannot be reclaimed: asked for where it cannot fit,
     * say so rather than be killed by the OOM killer half-way */
    if (e->opts.io == E0_IO_LOAD && e->opts.mem_budget && w > e->opts.mem_budget)
        return e0_fail(err, E0_EINVAL,
                       "--io load keeps the whole checkpoint (%.2f GiB) in memory, more than "
                       "--mem-budget %.2f GiB; drop --io load (a budget reads experts on demand)",
                       (double)w / (1u << 30), (double)e->opts.mem_budget / (1u << 30));
    if (e->opts.io == E0_IO_LOAD && avail && w > avail)
        return e0_fail(err, E0_ENOMEM,
                       "--io load needs the whole checkpoint (%.2f GiB) in memory but only %.2f GiB "
                       "is available%s; use --io pread or --mem-budget",
                       (double)w / (1u << 30), (double)avail / (1u << 30),
                       by_cg ? " (the cgroup's limit)" : "");
    if (e->opts.io != E0_IO_AUTO) {
        why = "as requested";
    } else if (e->opts.mem_budget) {
        e->opts.io = E0_IO_PREAD;
        why = "a memory budget is set";
    } else if (avail && w < avail / 10 * 8) {
        e->opts.io = E0_IO_LOAD;
        why = "the checkpoint fits in 80% of available memory";
    } else {
        e->opts.io = E0_IO_PREAD;
        why = "the checkpoint does not fit in 80% of available memory";
    }
    if (e->opts.io == E0_IO_MMAP) e->opts.layer.warm_willneed = 1;
    int n = snprintf(e->io_note, sizeof e->io_note,
                     "io %s: %s (checkpoint %.2f GiB, available %.2f GiB%s)", e0_io_name(e->opts.io),
                     why, (double)w / (1u << 30), (double)avail / (1u << 30),
                     by_cg ? ": the cgroup's limit" : "");
    if (chosen && e->opts.io == E0_IO_PREAD && !e->opts.mem_budget &&
        e->opts.budget_mode == E0_BUDGET_AUTO && avail > 2 * auto_headroom(avail)) {
        e->opts.mem_budget = avail - auto_headroom(avail);
        e->auto_budget = true;
        if (n > 0 && (size_t)n < sizeof e->io_note)
            snprintf(e->io_note + n, sizeof e->io_note - (size_t)n,
                     "; --mem-budget auto: %.2f GiB (available less %.2f GiB of headroom)",
                     (double)e->opts.mem_budget / (1u << 30),
                     (double)auto_headroom(avail) / (1u << 30));
    }
    return 0;
}

/* What open decides before it reads anything: the model's headers, top-k,
 * the I/O mode and the budget's cache size. e0_engine_plan stops here. */
static int engine_prepare(e0_engine **out, const char *model_dir, const e0_engine_opts *o,
                          char *err) {
    *out = NULL;
    e0_engine *e = calloc(1, sizeof *e);
    if (!e) return e0_fail(err, E0_ENOMEM, "out of memory");
    if (o)
        e->opts = *o;
    else
        e0_engine_opts_default(&e->opts);
    int rc = model_load(&e->model, model_dir, err);
    if (rc) {
        free(e);
        return rc;
    }
    const e0_config *c = &e->model.cfg;
    e->top_k = e->opts.layer.top_k > 0 ? e->opts.layer.top_k : c->top_k;
    if (e->top_k > c->n_experts)
        rc = e0_fail(err, E0_EINVAL, "top_k %d exceeds the model's %d experts", e->top_k,
                     c->n_experts);
    if (!rc && e->opts.kv_type != E0_KV_F32 && e->opts.kv_type != E0_KV_F16)
        rc = e0_fail(err, E0_EINVAL, "kv_type %d is not E0_KV_F32 or E0_KV_F16",
                     (int)e->opts.kv_type);
    const bool budget_given = e->opts.mem_budget != 0;
    if (!rc) rc = engine_gpu_plan(e, e->opts.n_ctx > 0 ? e->opts.n_ctx : 4096, err);
    if (!rc) rc = resolve_mtp(e, model_dir, err);
    if (!rc) rc = choose_io(e, err);
    const int32_t n_ctx = e->opts.n_ctx > 0 ? e->opts.n_ctx : 4096;
    e->n_seqs = e->opts.n_seqs == E0_SEQS_AUTO ? E0_SEQS_AUTO : e->opts.n_seqs < 1 ? 1 : e->opts.n_seqs;
    if (!rc && !e->opts.mem_budget && e->n_seqs == E0_SEQS_AUTO) {
        /* no budget: sessions may take half of what the checkpoint leaves */
        const uint64_t cg = mem_cgroup_limit(), host = mem_available();
        const uint64_t avail = cg && (!host || cg < host) ? cg : host;
        const uint64_t w = e->opts.io == E0_IO_PREAD ? 0 : e->model.weight_bytes;
        const uint64_t room = avail > w ? (avail - w) / 2 : 0,
                       one = budget_session_bytes(c, n_ctx, e->opts.kv_type, e->model.mtp.on);
        int32_t n = E0_AUTO_SEQS;
        while (n > 1 && (uint64_t)n * one > room) n--;
        e->n_seqs = n;
    }
    if (!rc && e->opts.mem_budget) {
        rc = budget_apply(&e->opts, &e->model, n_ctx, &e->n_seqs, e->budget_note, sizeof e->budget_note, err);
        if (rc && !budget_given) { /* say where the budget came from */
            char why[E0_ERR_MAX];
            snprintf(why, sizeof why, "%s", err);
            rc = e0_fail(err, rc, "%s; no --mem-budget was given, so it is the memory available: %s",
                         why, e->io_note);
        }
    }
    if (!rc && e->gpu_ordinal >= 0 && e->n_seqs > e->gpu_seqs) /* on the GPU: what its VRAM plan holds */
        e->n_seqs = e->gpu_seqs;
    if (rc) {
        model_free(&e->model);
        free(e);
        return rc;
    }
    *out = e;
    return 0;
}

int e0_engine_open(e0_engine **out, const char *model_dir, const e0_engine_opts *o, char *err) {
    pool_init(o ? o->n_threads : 0); /* the process's compute pool; fewer threads on failure */
    e0_engine *e;
    int rc = engine_prepare(&e, model_dir, o, err);
    if (rc) return rc;
    if (!rc && e->opts.io == E0_IO_PREAD) {
        uint64_t pinned;
        rc = model_pin_resident(&e->model, &pinned, err);
        const size_t used = strlen(e->io_note);
        if (!rc && used < sizeof e->io_note)
            snprintf(e->io_note + used, sizeof e->io_note - used,
                     "; %.1f MiB of resident weights copied out of the file mappings",
                     (double)pinned / (1u << 20));
    }
    if (!rc && e->opts.io == E0_IO_LOAD) {
        const double t0 = now_s();
        rc = model_load_weights(&e->model, e->opts.load_progress, e->opts.load_ctx, err);
        const size_t used = strlen(e->io_note);
        if (!rc && used < sizeof e->io_note)
            snprintf(e->io_note + used, sizeof e->io_note - used, "; loaded in %.1f s",
                     now_s() - t0);
    }
    if (!rc && e->opts.io == E0_IO_LOAD && mat_p16_wanted()) {
        /* the loaded copy is ours: the decode kernels' layout (mat.h) */
        const double t0 = now_s();
        const int n = model_repack(&e->model, e->opts.repack_progress, e->opts.load_ctx);
        const size_t used = strlen(e->io_note);
        if (n && used < sizeof e->io_note)
            snprintf(e->io_note + used, sizeof e->io_note - used,
                     "; %d matrices in 16-row panels in %.1f s", n, now_s() - t0);
    }
    if (!rc) {
        const double t0 = now_s();
        rc = stream_new(&e->stream, &e->model, &e->opts, err);
        const double dt = now_s() - t0;
        const size_t used = strlen(e->budget_note);
        if (!rc && e->opts.mem_budget && used < sizeof e->budget_note)
            snprintf(e->budget_note + used, sizeof e->budget_note - used,
                     "; cache memory committed in %.1f s", dt); /* faulted in up front: bigbuf.h */
    }
    if (!rc) rc = engine_gpu_open(e, err);
    if (rc) {
        stream_free(e->stream);
        model_free(&e->model);
        free(e);
        return rc;
    }
    *out = e;
    return 0;
}

/* Parameters of a matrix (its logical shape, whatever the storage). */
static uint64_t mat_params(const e0_mat *m) {
    return (uint64_t)m->rows * (uint64_t)m->cols;
}

int e0_engine_plan(const char *model_dir, const e0_engine_opts *o, e0_plan *p, char *err) {
    memset(p, 0, sizeof *p);
    e0_engine *e;
    int rc = engine_prepare(&e, model_dir, o, err);
    if (rc) return rc;
    const e0_model *m = &e->model;
    const e0_config *c = &m->cfg;
    e0_engine_info(e, &p->info);
    uint64_t dense = mat_params(&m->embed), routed = 0, per_expert = 0;
    if (m->lm_head.w != m->embed.w) dense += mat_params(&m->lm_head);
    for (int l = 0; l < c->n_layers; l++) {
        const e0_layer *ly = &m->layers[l];
        const e0_mat *mats[] = {&ly->q,       &ly->k,      &ly->v,       &ly->o,       &ly->out,
                                &ly->router,  &ly->sh_gate, &ly->sh_up,  &ly->sh_down, &ly->sh_router,
                                &ly->mlp_gate, &ly->mlp_up, &ly->mlp_down};
        for (size_t i = 0; i < sizeof mats / sizeof *mats; i++)
            dense += mat_params(mats[i]);
        /* the linear attention's input projections: packed, or flat views */
        dense += ly->qkvz.rows ? mat_params(&ly->qkvz) : mat_params(&ly->qkv) + mat_params(&ly->z);
        dense += ly->ba.rows ? mat_params(&ly->ba) : mat_params(&ly->b) + mat_params(&ly->a);
        if (!ly->moe || !ly->experts) continue;
        const e0_expert *x = &ly->experts[0];
        per_expert = mat_params(&x->gate) + mat_params(&x->up) + mat_params(&x->down);
        routed += per_expert * (uint64_t)c->n_experts;
        p->moe_layers++;
        p->active_params += per_expert * (uint64_t)e->top_k;
    }
    p->params = dense + routed;
    p->active_params += dense - mat_params(&m->embed); /* one embedding row per token */
    for (int l = 0; l < c->n_layers; l++)
        if (c->layer_linear && c->layer_linear[l])
            p->state_bytes += budget_conv_bytes(c) + budget_rec_bytes(c);
        else
            p->kv_bytes_per_1k += budget_kv_layer_bytes(c, 1000, e->opts.kv_type);
    p->io = e->opts.io;
    p->mem_budget = e->opts.mem_budget;
    p->auto_budget = e->auto_budget;
    p->n_seqs = e->n_seqs;
    p->session_bytes =
        budget_session_bytes(c, e->opts.n_ctx > 0 ? e->opts.n_ctx : 4096, e->opts.kv_type, m->mtp.on);
    p->cache_slots = e->opts.mem_budget || e->opts.io == E0_IO_PREAD ? e->opts.layer.cache_slots : 0;
    p->bundle_bytes = budget_bundle_data(m);
    p->slot_bytes = budget_bundle_bytes(m);
    p->n_bundles = (uint64_t)p->moe_layers * (uint64_t)c->n_experts;
    snprintf(p->io_note, sizeof p->io_note, "%s", e->io_note);
    snprintf(p->budget_note, sizeof p->budget_note, "%s", e->budget_note);
    p->gpu = e->gpu_ordinal;
    snprintf(p->gpu_note, sizeof p->gpu_note, "%s", e->gpu_note);
    if (e->gpu_ordinal >= 0) {
        p->gpu_weight_bytes = e->gpu_weight_bytes;
        p->gpu_session_bytes = e->gpu_session_bytes;
        p->gpu_slots = e->gpu_slots;
        p->gpu_slot_bytes = e->gpu_slot_bytes;
        p->vram_budget = e->gpu_budget;
    }
    model_free(&e->model);
    free(e);
    return 0;
}

void e0_engine_free(e0_engine *e) {
    if (!e) return;
    engine_gpu_close(e);
    stream_free(e->stream);
    model_free(&e->model);
    free(e);
}

void e0_engine_info(const e0_engine *e, e0_model_info *info) {
    const e0_model *m = &e->model;
    memset(info, 0, sizeof *info);
    info->family = m->cfg.family_name;
    info->layout = m->layout;
    info->vocab_size = m->cfg.vocab;
    info->n_layers = m->cfg.n_layers;
    info->hidden_size = m->cfg.hidden;
    info->n_experts = m->cfg.n_experts;
    info->top_k = e->top_k;
    info->weight_bytes = m->weight_bytes;
    info->expert_bytes = m->expert_bytes;
    info->mtp_layers = m->mtp.n_layers;
    info->mtp_bytes = m->mtp.bytes;
    info->mtp_on = m->mtp.on;
}

void e0_session_opts_default(e0_session_opts *o) {
    memset(o, 0, sizeof *o);
    o->n_ctx = 4096;
    o->n_batch = 512;
    o->mtp = 1;
}

void e0_session_free(e0_session *s) {
    if (!s) return;
    session_gpu_free(s);
    mtp_session_free(s);
    const int L = s->m->cfg.n_layers;
    for (int i = 0; i < model_layers(s->m); i++) { /* the MTP block's KV cache too */
        if (s->kc) free(s->kc[i]);
        if (s->vc) free(s->vc[i]);
        if (i >= L) continue;
        if (s->conv) free(s->conv[i]);
        if (s->rec) free(s->rec[i]);
    }
    free(s->kc);
    free(s->vc);
    free(s->conv);
    free(s->rec);
    free(s->hist);
    free(s->route_hist);
    if (s->own) pass_release(s->own);
    free(s->own);
    float **bufs[] = {&s->s.x,   &s->s.h,      &s->s.y,    &s->s.q,       &s->s.k,    &s->s.v,
                      &s->s.att, &s->s.scores, &s->s.proj, &s->s.mix,     &s->s.hist, &s->s.zz,
                      &s->s.bb,  &s->s.aa,     &s->s.o,    &s->s.rlogits, &s->s.rw,   &s->s.xs,
                      &s->s.g,   &s->s.u,      &s->s.ys,   &s->s.eo,      &s->s.shg, &s->s.rope_cs};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
        free(*bufs[i]);
    free(s->s.ridx);
    free(s->s.count);
    free(s->s.order);
    free(s->s.exps);
    free(s->s.start);
    free(s->s.rest);
    free(s->s.rstart);
    free(s->s.rpairs);
    free(s->s.xent);
    free(s);
}

static size_t imax(size_t a, size_t b) {
    return a > b ? a : b;
}

/* calloc of n floats (at least one), counting failures in *bad. */
static float *fbuf(size_t n, int *bad) {
    float *p = calloc(n ? n : 1, sizeof *p);
    *bad |= !p;
    return p;
}

/* A KV cache buffer of n values of es bytes on transparent huge pages:
 * decode reads one row (a few hundred bytes per KV head) of every cached
 * position of every layer, ~100 MB per token on Qwen3-30B-A3B at 576
 * positions in f32, and with 4 KiB pages nearly every row is a TLB miss
 * (bench/bench_attend: 9.2 -> 6.9 ms of CPU per token with huge pages). Pages are committed as
 * positions are written, 2 MiB at a time; rows past the session's
 * position are never read, so the buffer is not cleared. Free with free(). */
static void *kv_buf(size_t n, size_t es, int *bad) {
    const size_t huge = (size_t)2 << 20, bytes = (n * es + huge - 1) & ~(huge - 1);
    void *p = aligned_alloc(huge, bytes ? bytes : huge);
    *bad |= !p;
#ifdef MADV_HUGEPAGE
    if (p) madvise(p, bytes, MADV_HUGEPAGE); /* advice: without THP, 4 KiB pages */
#endif
    return p;
}

int e0_session_new(e0_engine *e, const e0_session_opts *o, e0_session **out, char *err) {
    *out = NULL;
    e0_session_opts d;
    e0_session_opts_default(&d);
    if (!o) o = &d;
    const e0_model *m = &e->model;
    const e0_config *c = &m->cfg;
    if (o->n_ctx < 0 || o->n_batch < 0)
        return e0_fail(err, E0_EINVAL, "n_ctx and n_batch must not be negative");
    e0_session *s = calloc(1, sizeof *s);
    if (!s) return e0_fail(err, E0_ENOMEM, "out of memory");
    s->eng = e;
    s->m = m;
    s->n_ctx = o->n_ctx ? o->n_ctx : d.n_ctx;
    s->n_batch = o->n_batch ? o->n_batch : d.n_batch;
    if (s->n_batch > s->n_ctx) s->n_batch = s->n_ctx;
    const size_t B = (size_t)s->n_batch, H = (size_t)c->hidden, L = (size_t)c->n_layers;
    const size_t kvd = (size_t)c->n_kv_heads * c->head_dim;
    const size_t Kd = (size_t)c->lin_k_heads * c->lin_k_dim,
                 Vd = (size_t)c->lin_v_heads * c->lin_v_dim;
    const size_t C = 2 * Kd + Vd, K = (size_t)c->conv_kernel, topk = (size_t)e->top_k;
    const size_t inter =
        imax(imax((size_t)c->moe_inter, (size_t)c->shared_inter), (size_t)c->dense_inter);
    int bad = 0;
    const size_t kv_es = budget_kv_elem_bytes(e->opts.kv_type);
    const bool mtp = o->mtp && m->mtp.on && e->gpu_ordinal < 0; /* the MTP block drafts on the CPU */
    s->kc = calloc(L + 1, sizeof *s->kc); /* [L]: the MTP block's */
    s->vc = calloc(L + 1, sizeof *s->vc);
    s->conv = calloc(L, sizeof *s->conv);
    s->rec = calloc(L, sizeof *s->rec);
    s->hist = calloc((size_t)s->n_ctx, sizeof *s->hist);
    bad |= !s->kc || !s->vc || !s->conv || !s->rec || !s->hist;
    if (config_route_kept(c)) {
        if (c->n_experts > 65536 || topk > E0_STICKY_MAX_K) {
            e0_session_free(s);
            return e0_fail(err, E0_EUNSUPPORTED,
                           "route stickiness and routing profiles need at most 65536 experts and top-k %d",
                           E0_STICKY_MAX_K);
        }
        s->route_hist = calloc((size_t)s->n_ctx * L * topk, sizeof *s->route_hist);
        bad |= !s->route_hist;
    }
    for (size_t i = 0; !bad && i < L; i++) {
        if (m->layers[i].linear) {
            s->conv[i] = fbuf((K - 1) * C, &bad);
            s->rec[i] = fbuf((size_t)c->lin_v_heads * c->lin_k_dim * c->lin_v_dim, &bad);
        } else {
            s->kc[i] = kv_buf((size_t)s->n_ctx * kvd, kv_es, &bad);
            s->vc[i] = kv_buf((size_t)s->n_ctx * kvd, kv_es, &bad);
        }
    }
    if (mtp && !bad) {
        s->kc[L] = kv_buf((size_t)s->n_ctx * kvd, kv_es, &bad);
        s->vc[L] = kv_buf((size_t)s->n_ctx * kvd, kv_es, &bad);
    }
    e0_scratch *S = &s->s;
    size_t qrows = (size_t)c->n_heads * c->head_dim * (c->attn_gated ? 2 : 1);
    S->x = fbuf(B * H, &bad);
    S->h = fbuf(B * H, &bad);
    S->y = fbuf(B * H, &bad);
    S->q = fbuf(B * qrows, &bad);
    S->k = fbuf(B * kvd, &bad);
    S->v = fbuf(B * kvd, &bad);
    S->att = fbuf(B * (size_t)c->n_heads * c->head_dim, &bad);
    S->nscores = pool_threads();
    S->scores = fbuf((size_t)S->nscores * E0_ATTN_GROUP * (size_t)s->n_ctx, &bad);
    S->rope_cs = fbuf((size_t)c->rotary_dim + 2, &bad);
    S->proj = fbuf(B * (2 * Kd + 2 * Vd), &bad);
    S->mix = fbuf(B * C, &bad);
    S->hist = fbuf((K ? K - 1 + B : 0) * C, &bad);
    S->zz = fbuf(B * Vd, &bad);
    S->bb = fbuf(B * (size_t)c->lin_v_heads, &bad);
    S->aa = fbuf(B * (size_t)c->lin_v_heads, &bad);
    S->o = fbuf(B * imax(Vd, 2 * (size_t)c->lin_v_heads), &bad);
    S->rlogits = fbuf(B * (size_t)c->n_experts, &bad);
    S->rw = fbuf(B * topk, &bad);
    S->xs = fbuf(B * H, &bad);
    S->g = fbuf(B * inter, &bad);
    S->u = fbuf(B * inter, &bad);
    S->ys = fbuf(B * H, &bad);
    S->eo = fbuf(B * topk * H, &bad);
    S->shg = fbuf(B, &bad);
    S->ridx = calloc(B * topk, sizeof *S->ridx);
    S->count = calloc((size_t)c->n_experts, sizeof *S->count);
    S->order = calloc(B * topk, sizeof *S->order);
    const size_t E1 = (size_t)c->n_experts + 1;
    S->exps = calloc(E1, sizeof *S->exps);
    S->start = calloc(E1, sizeof *S->start);
    S->rest = calloc(E1, sizeof *S->rest);
    S->rstart = calloc(E1, sizeof *S->rstart);
    S->rpairs = calloc(B * topk, sizeof *S->rpairs);
    S->xent = calloc(E1, sizeof *S->xent);
    bad |= !S->ridx || !S->count || !S->order || !S->exps || !S->start || !S->rest || !S->rstart ||
           !S->rpairs || !S->xent;
    if (bad) {
        e0_session_free(s);
        return e0_fail(err, E0_ENOMEM, "out of memory allocating a session of %d positions",
                       o->n_ctx);
    }
    int grc = mtp ? mtp_session_new(s, err) : 0;
    if (!grc) grc = session_gpu_new(s, err);
    if (grc) {
        e0_session_free(s);
        return grc;
    }
    *out = s;
    return 0;
}

void e0_session_reset(e0_session *s) {
    const e0_config *c = &s->m->cfg;
    const size_t Kd = (size_t)c->lin_k_heads * c->lin_k_dim,
                 Vd = (size_t)c->lin_v_heads * c->lin_v_dim;
    for (int i = 0; i < c->n_layers; i++)
        if (s->m->layers[i].linear) {
            memset(s->conv[i], 0, (size_t)(c->conv_kernel - 1) * (2 * Kd + Vd) * sizeof(float));
            memset(s->rec[i], 0,
                   (size_t)c->lin_v_heads * c->lin_k_dim * c->lin_v_dim * sizeof(float));
        }
    s->pos = 0; /* the KV cache past pos is never read */
    s->pass = NULL;
    mtp_reset(s);
    if (s->gs) {
        char err[E0_ERR_MAX];
        if (gpu_sess_reset(s->gs, err)) /* the device failed: nothing evaluates on it again */
            fprintf(stderr, "edge0: resetting a GPU session: %s\n", err);
    }
}

int32_t e0_session_pos(const e0_session *s) {
    return s->pos;
}

const int32_t *e0_session_history(const e0_session *s, size_t *n) {
    *n = (size_t)s->pos;
    return s->hist;
}

int32_t e0_session_reusable(const e0_session *s, const int32_t *prompt, size_t n) {
    int32_t common = 0;
    while (common < s->pos && (size_t)common < n && s->hist[common] == prompt[common])
        common++;
    bool recurrent = false;
    for (int i = 0; i < s->m->cfg.n_layers; i++)
        recurrent |= s->m->layers[i].linear;
    if (!recurrent) {
        if ((size_t)common >= n) common = (int32_t)n - 1; /* the last id must run for its logits */
        return common < 0 ? 0 : common;
    }
    return common == s->pos && (size_t)common < n ? common : 0;
}

int32_t session_prepare(e0_session *s, const int32_t *prompt, size_t n) {
    const int32_t keep = e0_session_reusable(s, prompt, n);
    if (keep == 0) {
        e0_session_reset(s); /* recurrent states too: they cannot be rewound */
    } else if (keep < s->pos) {
        s->pos = keep; /* the KV cache past pos is never read */
        mtp_desync(s); /* its held rows are of positions past keep */
    }
    return keep;
}

/* Session ss[i] (not NULL) of a pass over several: of session 0's engine
 * and none of ss[0..i). */
int session_check_distinct(e0_session *const *ss, size_t i, char *err) {
    if (ss[i]->eng != ss[0]->eng)
        return e0_fail(err, E0_EINVAL, "session %zu belongs to another engine than session 0", i);
    for (size_t j = 0; j < i; j++)
        if (ss[j] == ss[i])
            return e0_fail(err, E0_EINVAL, "sessions %zu and %zu are the same session", j, i);
    return 0;
}

/* The checks of an evaluation of n ids at the session's next positions. */
int session_check_ids(const e0_session *s, const int32_t *ids, size_t n, char *err) {
    const int vocab = s->m->cfg.vocab;
    if (n == 0) return e0_fail(err, E0_EINVAL, "no ids to evaluate");
    if (session_part_layer(s) >= 0)
        return e0_fail(err, E0_EINVAL, "a prefill pass paused between layers is in progress");
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= vocab)
            return e0_fail(err, E0_ERANGE,
                           "token id %d at index %zu is outside the vocabulary [0, %d)", ids[i], i,
                           vocab);
    if (n > (size_t)(s->n_ctx - s->pos))
        return e0_fail(err, E0_ERANGE,
                       "%zu more positions do not fit: %d of the context's %d are used", n, s->pos,
                       s->n_ctx);
    return 0;
}

/* The same for a batched decode step of n sessions. */
static int batch_failed(e0_session *const *ss, size_t n, int rc, char *err) {
    for (size_t i = 0; i < n; i++)
        e0_session_reset(ss[i]);
    return e0_wrap(err, rc, "evaluation failed; the %zu sessions were reset", n);
}

/* The same for one session's evaluation. */
static int session_failed(e0_session *s, int rc, char *err) {
    e0_session_reset(s);
    return e0_wrap(err, rc, "evaluation failed; the session was reset");
}


int e0_session_eval(e0_session *s, const int32_t *ids, size_t n, e0_logits_mode mode, float *logits,
                    char *err) {
    const e0_model *m = s->m;
    const e0_config *c = &m->cfg;
    if (mode != E0_LOGITS_NONE && !logits) return e0_fail(err, E0_EINVAL, "logits buffer is NULL");
    int crc = session_check_ids(s, ids, n, err);
    if (crc) return crc;
    const int H = c->hidden, V = c->vocab;
    const double t0 = now_s();
    if (s->gs) {
        int rc = session_gpu_eval(s, ids, n, mode, logits, err);
        if (rc) return session_failed(s, rc, err);
        n = n > 1 ? n : 1;
        e0_engine *eg = s->eng;
        *(n > 1 ? &eg->prefill_tokens : &eg->decode_tokens) += n;
        *(n > 1 ? &eg->prefill_s : &eg->decode_s) += now_s() - t0;
        return 0;
    }
    mtp_before(s, ids[0]);
    const uint64_t read0 = stream_bytes_read(s->eng->stream);
    const double mtp0 = s->eng->mtp_s;
    for (size_t done = 0; done < n;) {
        int T = (int)(n - done < (size_t)s->n_batch ? n - done : (size_t)s->n_batch);
        e0_run run;
        const e0_batch b = batch_one(s, T, &run);
        int rc = forward(&b, ids + done, err);
        if (rc) return session_failed(s, rc, err); /* the states are partly updated: start over */
        if (mode == E0_LOGITS_ALL) {
            rmsnorm(s->s.x, m->final_norm, H, T, c->rms_eps, s->s.h);
            batch_matmul(&b, &m->lm_head, s->s.h, H, logits + done * V, V);
        } else if (mode == E0_LOGITS_LAST && done + (size_t)T == n) {
            rmsnorm(s->s.x + (size_t)(T - 1) * H, m->final_norm, H, 1, c->rms_eps, s->s.h);
            mat_matmul_decode(&m->lm_head, s->s.h, H, 1, logits, V); /* as pass_logits */
        }
        mtp_take(s, s->s.x, T); /* after the logits: the block's pass overwrites the scratch */
        if ((rc = mtp_catch_up(s, err))) return session_failed(s, rc, err);
        done += (size_t)T;
    }
    int frc = st_set_fault(m->st, err); /* the mapping lost data under us (SIGBUS guard) */
    if (frc) return session_failed(s, frc, err);
    e0_engine *e = s->eng;
    if (n > 1) {
        e->prefill_tokens += n;
        e->prefill_s += now_s() - t0;
    } else {
        e->decode_tokens += n;
        e->decode_s += now_s() - t0;
        e->decode_bytes_read += stream_bytes_read(e->stream) - read0;
        /* --mtp auto's plain rate, of a session that could draft (without the block's catch-up) */
        if (s->mtp) mtp_auto_plain(e, now_s() - t0 - (e->mtp_s - mtp0));
    }
    return 0;
}

/* Two positions in one pass, each with the arithmetic of a one-token
 * step: the decode paths and row kernels (forward.h batch_one gives a
 * batch of fewer than K_PANEL_MIN_T tokens the row kernels; decode set
 * here picks the decode expert paths too), the recurrent DeltaNet, and
 * the state after the first position kept (deltanet.c, mtp->keep). */
int e0_session_verify(e0_session *s, const int32_t *ids, float *logits, char *err) {
    if (!s || !ids || !logits) return e0_fail(err, E0_EINVAL, "verify: the session, ids or logits are NULL");
    if (!s->mtp)
        return e0_fail(err, E0_EINVAL, "verify: the session has no MTP block (the engine's mtp option, "
                                       "e0_session_opts.mtp)");
    int rc = session_check_ids(s, ids, 2, err);
    if (rc) return e0_wrap(err, rc, "verify");
    const e0_model *m = s->m;
    const e0_config *c = &m->cfg;
    const int H = c->hidden;
    const double t0 = now_s();
    const uint64_t read0 = stream_bytes_read(s->eng->stream);
    mtp_before(s, ids[0]);
    e0_mtp_state *t = s->mtp;
    if (t->sync && t->npend > 0 && (rc = mtp_catch_up_with(s, ids[0], err)))
        return session_failed(s, rc, err);
    e0_run run;
    e0_batch b = batch_one(s, 2, &run);
    b.decode = true;
    t->keep = true;
    rc = forward(&b, ids, err);
    t->keep = false;
    if (!rc) rc = st_set_fault(m->st, err); /* the mapping lost data under us (SIGBUS guard) */
    if (rc) return session_failed(s, rc, err);
    rmsnorm(s->s.x, m->final_norm, H, 2, c->rms_eps, s->s.h);
    mat_matmul_decode(&m->lm_head, s->s.h, H, 2, logits, c->vocab); /* each row as a step's */
    mtp_take(s, s->s.x, 2); /* held: ids[1] may be rejected */
    t->verified = true;
    e0_engine *e = s->eng;
    e->mtp_drafts++;
    e->decode_tokens += 2;
    e->decode_s += now_s() - t0;
    e->decode_bytes_read += stream_bytes_read(e->stream) - read0;
    mtp_auto_verify(e, now_s() - t0 + t->draft_s);
    t->draft_s = 0;
    return 0;
}

/* e0_session_eval_batch and e0_session_verify_batch: session i evaluates
 * cnt[i] ids (1, or 2 as a verify pass: cnt NULL gives 1 each), taken in
 * order from ids; logits get one row per id. */
static int eval_batch(e0_session *const *ss, const int32_t *ids, const int32_t *cnt, size_t n, float *logits,
                      char *err) {
    if (n == 0) return e0_fail(err, E0_EINVAL, "no sessions to evaluate");
    if (!ss || !ids) return e0_fail(err, E0_EINVAL, "sessions or ids are NULL");
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        if (!ss[i]) return e0_fail(err, E0_EINVAL, "session %zu is NULL", i);
        int rc = session_check_distinct(ss, i, err);
        if (rc) return rc;
        const int k = cnt ? cnt[i] : 1;
        if (k != 1 && k != 2) return e0_fail(err, E0_EINVAL, "session %zu: %d ids (1, or 2 to verify)", i, k);
        if (k == 2 && !ss[i]->mtp)
            return e0_fail(err, E0_EINVAL, "session %zu: verify without an MTP block (the engine's mtp option, "
                                           "e0_session_opts.mtp)", i);
        if (ss[i]->pos >= ss[i]->n_ctx)
            return e0_fail(err, E0_ERANGE, "session %zu: its context of %d positions is full", i, ss[i]->n_ctx);
        if ((rc = session_check_ids(ss[i], ids + total, (size_t)k, err))) return e0_wrap(err, rc, "session %zu", i);
        total += (size_t)k;
    }
    if (ss[0]->gs && n > 1 && session_gpu_batch_on(ss[0])) { /* on the GPU: one pass for all of them */
        const double t0 = now_s();
        int rc = session_gpu_eval_batch(ss, n, ids, logits, err);
        if (rc) return batch_failed(ss, n, rc, err);
        e0_engine *eg = ss[0]->eng;
        eg->decode_tokens += n;
        eg->decode_s += now_s() - t0;
        return 0;
    }
    if (ss[0]->gs) { /* on the GPU: one session after another */
        const int V1 = ss[0]->m->cfg.vocab;
        for (size_t i = 0; i < n; i++) {
            int rc = e0_session_eval(ss[i], ids + i, 1, logits ? E0_LOGITS_LAST : E0_LOGITS_NONE,
                                     logits ? logits + i * (size_t)V1 : NULL, err);
            if (rc) return e0_wrap(err, rc, "session %zu", i);
        }
        return 0;
    }
    const e0_model *m = ss[0]->m;
    const e0_config *c = &m->cfg;
    const int H = c->hidden, V = c->vocab;
    const double t0 = now_s();
    e0_engine *e = ss[0]->eng;
    const uint64_t read0 = stream_bytes_read(e->stream);
    const double mtp0 = e->mtp_s;
    e0_run runs[E0_BATCH_MAX];
    size_t at = 0; /* ids (and logits rows) of the sessions before `done` */
    for (size_t done = 0; done < n;) {
        /* the pass runs in the scratch of its first session, n_batch ids at most */
        e0_session *lead = ss[done];
        const int cap = lead->n_batch < E0_BATCH_MAX ? lead->n_batch : E0_BATCH_MAX;
        int T = 0, nr = 0;
        for (; done + (size_t)nr < n; nr++) {
            e0_session *s = ss[done + (size_t)nr];
            const int k = cnt ? cnt[done + (size_t)nr] : 1;
            if (nr && T + k > cap) break;
            runs[nr] = (e0_run){s, T, k};
            mtp_before(s, ids[at + (size_t)T]);
            if (k == 2 && s->mtp->sync && s->mtp->npend > 0) { /* verify without a draft first */
                int rc = mtp_catch_up_with(s, ids[at + (size_t)T], err);
                if (rc) return batch_failed(ss, n, rc, err);
            }
            if (k == 2) s->mtp->keep = true; /* deltanet.c keeps the states after the first id */
            T += k;
        }
        const e0_batch b = {.S = &lead->s, .run = runs, .nrun = nr, .T = T, .decode = true};
        int rc = forward(&b, ids + at, err);
        for (int r = 0; r < nr; r++)
            if (runs[r].s->mtp) runs[r].s->mtp->keep = false;
        if (!rc) rc = st_set_fault(m->st, err); /* the mapping lost data under us (SIGBUS guard) */
        if (rc) return batch_failed(ss, n, rc, err);
        if (logits) { /* Tp 0: each row with the one-token arithmetic (mat_matmul_decode's) */
            rmsnorm(lead->s.x, m->final_norm, H, T, c->rms_eps, lead->s.h);
            batch_matmul(&b, &m->lm_head, lead->s.h, H, logits + at * (size_t)V, V);
        }
        /* every run's rows first: a catch-up runs in its session's scratch, the lead's among them */
        for (int r = 0; r < nr; r++)
            mtp_take(runs[r].s, lead->s.x + (size_t)runs[r].t0 * H, runs[r].n);
        for (int r = 0; r < nr; r++) {
            e0_session *s = runs[r].s;
            if (runs[r].n == 2) { /* held: the second id may be rejected (e0_session_rollback) */
                s->mtp->verified = true;
                e->mtp_drafts++;
            } else if ((rc = mtp_catch_up(s, err))) {
                return batch_failed(ss, n, rc, err);
            }
        }
        done += (size_t)nr;
        at += (size_t)T;
    }
    e->decode_tokens += total;
    e->decode_s += now_s() - t0;
    e->decode_bytes_read += stream_bytes_read(e->stream) - read0;
    if (n == 1 && total == 1) { /* one sequence alone: --mtp auto's measurements as e0_session_eval's */
        mtp_auto_plain(e, now_s() - t0 - (e->mtp_s - mtp0));
    } else if (n == 1) {
        mtp_auto_verify(e, now_s() - t0 + ss[0]->mtp->draft_s);
        ss[0]->mtp->draft_s = 0;
    }
    return 0;
}

int e0_session_eval_batch(e0_session *const *ss, const int32_t *ids, size_t n, float *logits, char *err) {
    return eval_batch(ss, ids, NULL, n, logits, err);
}

int e0_session_verify_batch(e0_session *const *ss, const int32_t *ids, const int32_t *n_ids, size_t n,
                            float *logits, char *err) {
    if (!n_ids) return e0_fail(err, E0_EINVAL, "verify: the id counts are NULL");
    return eval_batch(ss, ids, n_ids, n, logits, err);
}
