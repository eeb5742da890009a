/* The engine and its sessions on a GPU (model.h, "The GPU"): which device,
 * whether the model fits its VRAM budget, the upload, and a session's
 * evaluation through gpu/gmodel.h. */
#include "gpu/gmodel.h"
#include "model/model.h"
#include "util/err.h"
#include "util/meminfo.h"

#include <stdarg.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static double gib(uint64_t b) { return (double)b / 1073741824.0; }

/* Session geometry the plan holds the budget against: one sequence of
 * n_ctx positions in batches of 512 ids (e0_session_opts' defaults). */
enum { PLAN_BATCH = 512 };

/* $name is set to v (the experiments' switches). */
static bool env_is(const char *name, const char *v) {
    const char *x = getenv(name);
    return x && !strcmp(x, v);
}

/* A named device fails with the reason; E0_GPU_AUTO stays on the CPU and
 * keeps the reason in gpu_note. */
__attribute__((format(printf, 5, 6))) static int cpu_because(e0_engine *e, bool named, char *err,
                                                            int code, const char *fmt, ...) {
    char msg[E0_ERR_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (named) return e0_fail(err, code, "%s", msg);
    snprintf(e->gpu_note, sizeof e->gpu_note, "CPU: %.500s", msg);
    return 0;
}

/* The host's side of a VRAM expert cache: the experts' pages pinned for
 * DMA when the host's memory (the budget, else the cgroup's limit or what
 * is available) holds every expert with 2 GiB to spare; else a host
 * expert cache of what that memory leaves beside a reserve for the process
 * and the driver (max(2.5 GiB, a sixth)), or $E0_GPU_HCACHE bytes (0:
 * none, the misses copied from the mapping through the driver's staging).
 * $E0_GPU_PIN=0 pins nothing (experiments, tests). Writes the decision into
 * e->gpu_host / gpu_host_cache and says it in note (n bytes). */
static void host_plan(e0_engine *e, char *note, size_t n) {
    const uint64_t cg = mem_cgroup_limit(), avail = mem_available();
    const uint64_t host = e->opts.mem_budget ? e->opts.mem_budget : cg && (!avail || cg < avail) ? cg : avail;
    const uint64_t need = e->model.expert_bytes + (2ull << 30);
    const bool nopin = env_is("E0_GPU_PIN", "0");
    e->gpu_host_cache = 0;
    if (!nopin && host >= need) {
        e->gpu_host = GPU_HOST_PIN;
        snprintf(note, n, "; misses from the experts' pages, pinned in host memory for DMA (%.2f GiB)",
                 gib(e->model.expert_bytes));
        return;
    }
    char why[96];
    if (nopin) snprintf(why, sizeof why, "$E0_GPU_PIN=0");
    else snprintf(why, sizeof why, "%.1f GiB with room to spare needs more than the %.1f GiB of host memory",
                  gib(need), gib(host));
    const uint64_t reserve = host / 6 > (5ull << 29) ? host / 6 : (5ull << 29);
    const char *v = getenv("E0_GPU_HCACHE");
    uint64_t want = host > reserve ? host - reserve : 0;
    if (v && *v) want = strtoull(v, NULL, 10);
    if (want > e->model.expert_bytes + (256ull << 20)) want = e->model.expert_bytes + (256ull << 20);
    e->gpu_host = want ? GPU_HOST_CACHE : GPU_HOST_MAP;
    e->gpu_host_cache = want;
    if (want)
        snprintf(note, n, "; experts not pinned (%s): misses read by direct reads into a host expert cache of "
                 "%.2f GiB, pinned for DMA", why, gib(want));
    else
        snprintf(note, n, "; experts not pinned (%s): misses copied from the checkpoint's mapping, staged by the "
                 "driver%s", why, v && *v ? " ($E0_GPU_HCACHE=0)" : "");
}

int engine_gpu_plan(e0_engine *e, int32_t n_ctx, char *err) {
    e->gpu_ordinal = E0_GPU_OFF;
    e->gpu_note[0] = '\0';
    const int32_t want = e->opts.gpu;
    if (want == E0_GPU_OFF) return 0;
    if (want < E0_GPU_AUTO)
        return e0_fail(err, E0_EINVAL, "gpu %d is not a device ordinal, E0_GPU_AUTO or E0_GPU_OFF", want);
    const bool named = want >= 0;
    char why[E0_ERR_MAX];
    int rc;
#define CPU_BECAUSE(code, ...) return cpu_because(e, named, err, (code), __VA_ARGS__)
    int n;
    if ((rc = gpu_count(&n, why))) CPU_BECAUSE(rc, "%s", why);
    const int ord = named ? want : 0;
    gpu_dev *d;
    if ((rc = gpu_open(&d, ord, why))) CPU_BECAUSE(rc, "%s", why);
    const size_t headroom = d->free_at_open / 20 > (512u << 20) ? d->free_at_open / 20 : (512u << 20);
    /* A given budget is the process's whole use of the card, as nvidia-smi
     * shows it: the driver's context and the kernels' module take
     * GPU_CTX_ALLOWANCE of it (an H100 showed 733 MiB over what edge0
     * allocated). The automatic one starts from what is free with the
     * context made, so it has paid for it already. */
    const uint64_t given = e->opts.vram_budget;
    const uint64_t budget = given ? (given > GPU_CTX_ALLOWANCE ? given - GPU_CTX_ALLOWANCE : 0)
                            : d->free_at_open > headroom ? d->free_at_open - headroom : 0;
    char name[sizeof d->name];
    snprintf(name, sizeof name, "%s", d->name);
    const double free_gib = gib(d->free_at_open);
    gpu_close(d); /* engine_gpu_open opens it again: the plan alone (edge0 info) uploads nothing */
    gpu_sizes z;
    if ((rc = gpu_model_sizes(&e->model, &z, why)))
        CPU_BECAUSE(rc, "GPU %d (%s): %s", ord, name, why);
    const uint64_t one = gpu_sess_bytes(&e->model, e->top_k, n_ctx, PLAN_BATCH < n_ctx ? PLAN_BATCH : n_ctx,
                                        e->opts.kv_type == E0_KV_F16);
    /* the sessions: those asked for (a server's slots), or for E0_SEQS_AUTO as
     * many as fit beside the weights and the cache's least, up to E0_AUTO_SEQS
     * and at most a quarter of what the budget leaves beside the dense weights */
    int32_t seqs = e->opts.n_seqs >= 1 ? e->opts.n_seqs : 1;
    if (e->opts.n_seqs == E0_SEQS_AUTO) {
        const uint64_t fixed = z.dense + (uint64_t)z.min_slots * z.slot;
        const uint64_t quarter = budget > z.dense ? (budget - z.dense) / 4 : 0;
        seqs = E0_AUTO_SEQS;
        while (seqs > 1 && (fixed + (uint64_t)seqs * one > budget || (uint64_t)seqs * one > quarter)) seqs--;
    }
    const uint64_t sb = (uint64_t)seqs * one;
    const uint64_t least = z.dense + sb + (uint64_t)z.min_slots * z.slot;
    if (least > budget || (z.experts && !z.slot))
        CPU_BECAUSE(E0_ENOMEM,
                    "GPU %d (%s): the model needs at least %.2f GiB of device memory (%.2f GiB of dense "
                    "weights, %.2f GiB for %d session%s of %d positions, %d expert slots of %.1f MiB) and "
                    "the VRAM budget leaves %.2f GiB for them (%.2f GiB free)%s",
                    ord, name, gib(least), gib(z.dense), gib(sb), seqs, seqs == 1 ? "" : "s", n_ctx,
                    z.min_slots, (double)z.slot / 1048576.0, gib(budget), free_gib,
                    given ? "; 768 MiB of --vram-budget is kept for the driver's context"
                          : "; --vram-budget sets it");
    /* every expert resident when they fit; else as many slots as the budget holds */
    const uint64_t room = budget - z.dense - sb;
    e->gpu_seqs = seqs;
    e->gpu_slots = z.dense + z.experts + sb <= budget ? 0 : (int32_t)(room / z.slot);
    e->gpu_weight_bytes = z.dense + (e->gpu_slots ? (uint64_t)e->gpu_slots * z.slot : z.experts);
    e->gpu_slot_bytes = z.slot;
    e->gpu_session_bytes = one;
    e->gpu_budget = budget;
    e->gpu_token_bytes = z.dense + (e->model.cfg.n_experts ? z.experts / (uint64_t)e->model.cfg.n_experts *
                                                                 (uint64_t)e->top_k : 0);
    if (e->model.cfg.route_stickiness > 0)
        CPU_BECAUSE(E0_EUNSUPPORTED, "GPU %d (%s): this synthetic checkpoint's route stickiness is "
                    "computed on the CPU only", ord, name);
#undef CPU_BECAUSE
    e->gpu_ordinal = ord;
    char tier[200];
    if (e->gpu_slots)
        snprintf(tier, sizeof tier, "%.2f GiB of dense weights and a VRAM expert cache of %d slots (%.2f GiB, "
                 "%.0f%% of the experts, %s policy)", gib(z.dense), e->gpu_slots,
                 gib((uint64_t)e->gpu_slots * z.slot), 100.0 * (double)e->gpu_slots * (double)z.slot / (double)z.experts,
                 e0_cache_policy_name(e->opts.layer.cache_policy));
    else
        snprintf(tier, sizeof tier, "%.2f GiB of weights, every expert resident", gib(z.dense + z.experts));
    char rooms[48] = "";
    if (seqs > 1) snprintf(rooms, sizeof rooms, " (room for %d)", seqs);
    snprintf(e->gpu_note, sizeof e->gpu_note,
             "GPU %d (%s): %s, %.2f GiB per session of %d positions%s, in a VRAM budget of %.2f GiB "
             "(%s%.2f GiB free)",
             ord, name, tier, gib(one), n_ctx, rooms, gib(budget),
             given ? "the given one less 0.75 GiB for the driver; " : "", free_gib);
    if (e->gpu_slots) {
        char hp[300];
        host_plan(e, hp, sizeof hp);
        const size_t used = strlen(e->gpu_note);
        snprintf(e->gpu_note + used, sizeof e->gpu_note - used, "%s", hp);
    }
    /* the device reads the checkpoint's own formats: through the mapping,
     * without loading it into memory or repacking it for the CPU kernels */
    if (e->opts.io == E0_IO_AUTO || e->opts.io == E0_IO_LOAD) e->opts.io = E0_IO_MMAP;
    return 0;
}

/* At open, what host_plan decided (the note says it already); where it
 * cannot be done, what happened instead, for the note. */
static void host_open(e0_engine *e, char *note, size_t n) {
    char why[E0_ERR_MAX];
    note[0] = '\0';
    if (e->gpu_host == GPU_HOST_PIN) {
        if (vcache_pin_host(e->gmodel, why)) {
            snprintf(note, n, "; pinning failed (%.300s): misses staged by the driver", why);
            return;
        }
        /* device-staged decode: off by default, it loses on uniform routing
         * and wins on real-like routing (docs/experiments.md, session 30) */
        bool on = false;
        char no[E0_ERR_MAX] = "off by default; $E0_GPU_STAGE=1 turns it on";
        if (env_is("E0_GPU_STAGE", "1") && vcache_stage_on(e->gmodel, e->top_k, &on, no, why))
            snprintf(no, sizeof no, "%.300s", why);
        /* the host computing some misses itself: off until measured on a card;
         * $E0_GPU_HOST_MISS=N lets it take up to N of each decode MoE call's,
         * =auto the fastest of 0 .. 4, timed while decoding */
        const char *hmv = getenv("E0_GPU_HOST_MISS");
        const int hmax = on || !hmv ? 0 : strcmp(hmv, "auto") == 0 ? -4 : atoi(hmv);
        if (hmax && hostmiss_new(e->gmodel, hmax, why)) {
            snprintf(note, n, "; the host computing misses failed (%.300s)", why);
            return;
        }
        char hnote[64] = "";
        if (hmax > 0) snprintf(hnote, sizeof hnote, ", up to %d a MoE call computed by the host", e->gmodel->vc->hm->max);
        if (hmax < 0)
            snprintf(hnote, sizeof hnote, ", up to 0-%d a MoE call computed by the host (timed)",
                     e->gmodel->vc->hm->tune.n_arms - 1);
        snprintf(note, n, "; a decode step's misses %s%.300s%s%s",
                 on ? "staged by the device" : "copied in by the host (not staged by the device: ",
                 on ? "" : no, on ? "" : ")", hnote);
    } else if (e->gpu_host == GPU_HOST_CACHE) {
        if (hcache_new(e->gmodel, e->gpu_host_cache, why)) {
            snprintf(note, n, "; no host expert cache (%.300s): misses staged by the driver", why);
            return;
        }
        gpu_hstats h;
        hcache_stats(e->gmodel, &h);
        snprintf(note, n, "; the host expert cache holds %d experts (%.0f%%)", h.slots,
                 h.experts ? 100.0 * h.slots / h.experts : 0.0);
    }
}

int engine_gpu_open(e0_engine *e, char *err) {
    if (e->gpu_ordinal < 0) return 0;
    char why[E0_ERR_MAX];
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int rc = gpu_open(&e->gpu, e->gpu_ordinal, why);
    if (!rc) rc = gpu_model_new(&e->gmodel, e->gpu, &e->model, e->top_k, e->gpu_slots, why);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (rc) {
        engine_gpu_close(e);
        if (e->opts.gpu >= 0) return e0_fail(err, rc, "%s", why);
        snprintf(e->gpu_note, sizeof e->gpu_note, "CPU: %.500s", why);
        e->gpu_ordinal = E0_GPU_OFF;
        return 0;
    }
    char pin[900] = "";
    const e0_layer_opts *lo = &e->opts.layer;
    if (e->gmodel->vc &&
        (rc = vcache_set_policy(e->gmodel, lo->cache_policy, lo->cache_half_life, lo->router_half_life, why))) {
        engine_gpu_close(e);
        return e0_fail(err, rc, "%s", why);
    }
    if (e->gmodel->vc) host_open(e, pin, sizeof pin);
    const size_t used = strlen(e->gpu_note);
    if (used < sizeof e->gpu_note &&
        snprintf(e->gpu_note + used, sizeof e->gpu_note - used,
                 "; uploaded in %.1f s; host-to-device %.1f GB/s, device memory %.0f GB/s (measured at "
                 "start)%.800s",
                 (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec),
                 e->gpu->h2d_gbs, e->gpu->d2d_gbs, pin) >= (int)(sizeof e->gpu_note - used))
        memcpy(e->gpu_note + sizeof e->gpu_note - 4, "...", 4); /* said so when cut */
    return 0;
}

void engine_gpu_close(e0_engine *e) {
    gpu_model_free(e->gmodel);
    e->gmodel = NULL;
    gpu_close(e->gpu);
    e->gpu = NULL;
}

const char *e0_engine_gpu_note(const e0_engine *e) { return e->gpu_note; }

int32_t e0_engine_gpu(const e0_engine *e) { return e->gmodel ? e->gpu_ordinal : E0_GPU_OFF; }

int session_gpu_new(e0_session *s, char *err) {
    e0_engine *e = s->eng;
    if (!e->gmodel) return 0;
    return gpu_sess_new(&s->gs, e->gmodel, s->n_ctx, s->n_batch, e->opts.kv_type == E0_KV_F16, err);
}

void session_gpu_free(e0_session *s) {
    gpu_sess_free(s->gs);
    s->gs = NULL;
}

bool session_gpu_batch_on(const e0_session *s) {
    return s->gs && env_is("E0_GPU_BATCH", "1") && !config_route_on(&s->m->cfg);
}

int session_gpu_eval_batch(e0_session *const *ss, size_t n, const int32_t *ids, float *logits, char *err) {
    const int V = ss[0]->m->cfg.vocab;
    for (size_t done = 0; done < n;) {
        const int k = (int)(n - done < GPU_BATCH_MAX ? n - done : GPU_BATCH_MAX);
        gpu_sess *gs[GPU_BATCH_MAX];
        int32_t pos[GPU_BATCH_MAX];
        for (int i = 0; i < k; i++) gs[i] = ss[done + (size_t)i]->gs, pos[i] = ss[done + (size_t)i]->pos;
        int rc = gpu_sess_eval_batch(gs, k, pos, ids + done, logits ? logits + done * (size_t)V : NULL, err);
        if (rc) return rc;
        for (int i = 0; i < k; i++) {
            e0_session *s = ss[done + (size_t)i];
            s->hist[s->pos++] = ids[done + (size_t)i];
        }
        done += (size_t)k;
    }
    return 0;
}

int session_gpu_eval(e0_session *s, const int32_t *ids, size_t n, e0_logits_mode mode, float *logits,
                     char *err) {
    const int V = s->m->cfg.vocab;
    for (size_t done = 0; done < n;) {
        const int T = (int)(n - done < (size_t)s->n_batch ? n - done : (size_t)s->n_batch);
        const bool last = done + (size_t)T == n;
        float *out = mode == E0_LOGITS_ALL ? logits + done * (size_t)V
                     : mode == E0_LOGITS_LAST && last ? logits
                                                      : NULL;
        int rc = gpu_sess_eval(s->gs, s->pos, ids + done, T, mode == E0_LOGITS_ALL, out, err);
        if (rc) return rc;
        memcpy(s->hist + s->pos, ids + done, (size_t)T * sizeof *ids);
        s->pos += T;
        done += (size_t)T;
    }
    return 0;
}
