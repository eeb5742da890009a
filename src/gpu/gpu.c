/* A GPU device: context, kernels, memory, weight uploads (gpu/gpu.h). */
#include "gpu/gpu.h"

#include "edge0.h"
#include "quant/ggml.h"
#include "util/err.h"
#include "util/file.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* kernels.ptx, embedded by gpu/ptx.S, NUL-terminated */
extern const char e0_gpu_ptx[];

static int cu_fail(const gpu_dev *d, char *err, int code, const char *what, CUresult r) {
    char b[200];
    return e0_fail(err, code, "GPU %d: %s: %s", d ? d->ordinal : 0, what, cu_errstr(r, b, sizeof b));
}

#define CU(d, call, what)                                                    \
    do {                                                                     \
        CUresult r_ = (call);                                                \
        if (r_ != CU_SUCCESS) return cu_fail((d), err, E0_EIO, (what), r_); \
    } while (0)

int gpu_count(int *n, char *err) {
    *n = 0;
    char why[E0_ERR_MAX];
    const cu_api *cu = cu_load(why);
    if (!cu) return e0_fail(err, E0_EUNSUPPORTED, "%s", why);
    CUresult r = cu->DeviceGetCount(n);
    if (r != CU_SUCCESS) return cu_fail(NULL, err, E0_EUNSUPPORTED, "cuDeviceGetCount", r);
    if (*n == 0) return e0_fail(err, E0_EUNSUPPORTED, "the NVIDIA driver sees no GPU");
    return 0;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static const char *const fmt_names[GPU_F_COUNT] = {
    "f32", "bf16", "f16", "qa4", "qa8", "q4_0", "q4_1", "q5_0", "q5_1",
    "q8_0", "q2_k", "q3_k", "q4_k", "q5_k", "q6_k", "iq4_nl", "iq4_xs"};

static int load_module(gpu_dev *d, char *err) {
    char log[4096] = "";
    int opts[2] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
    void *vals[2] = {log, (void *)(uintptr_t)sizeof log};
    /* $E0_GPU_PTX: another build of the kernels (experiments: two kernel sources A/B in one run) */
    const char *pf = getenv("E0_GPU_PTX");
    char *alt = NULL;
    if (pf && *pf) {
        size_t n = 0;
        const int rc = e0_read_file(pf, &alt, &n, 64u << 20, err);
        if (rc) return e0_wrap(err, rc, "$E0_GPU_PTX");
    }
    const double t0 = now_s();
    CUresult r = d->cu->ModuleLoadDataEx(&d->mod, alt ? alt : e0_gpu_ptx, 2, opts, vals);
    free(alt);
    d->jit_s = now_s() - t0;
    if (r != CU_SUCCESS) {
        char b[200];
        return e0_fail(err, E0_EUNSUPPORTED, "GPU %d (%s): loading the kernels: %s%s%s", d->ordinal,
                       d->name, cu_errstr(r, b, sizeof b), *log ? ": " : "", log);
    }
    struct {
        CUfunction *f;
        const char *name;
    } fs[] = {
        {&d->k.rmsnorm, "rmsnorm"},       {&d->k.add_inplace, "add_inplace"},
        {&d->k.swiglu, "swiglu"},         {&d->k.qk_norm_rope, "qk_norm_rope"},
        {&d->k.kv_store, "kv_store"},     {&d->k.attend_warps, "attend_warps"},
        {&d->k.attend_split, "attend_split"}, {&d->k.attend_merge, "attend_merge"},
        {&d->k.dn_unpack, "dn_unpack"},   {&d->k.dn_conv, "dn_conv"},
        {&d->k.dn_qknorm, "dn_qknorm"},   {&d->k.dn_rec, "dn_rec"},
        {&d->k.dn_rec32, "dn_rec32"},     {&d->k.dn_rec64, "dn_rec64"},
        {&d->k.dn_rec128, "dn_rec128"},
        {&d->k.route, "route"},           {&d->k.route_profile, "route_profile"},
        {&d->k.moe_sort, "moe_sort"},
        {&d->k.moe_stage, "moe_stage"},   {&d->k.moe_combine, "moe_combine"},
    };
    for (size_t i = 0; i < sizeof fs / sizeof fs[0]; i++)
        CU(d, d->cu->ModuleGetFunction(fs[i].f, d->mod, fs[i].name), fs[i].name);
    /* each product form, one kernel a weight format: "<form>_<format>" */
    struct {
        CUfunction *f;
        const char *form;
    } forms[] = {{d->k.mm, "mm"},   {d->k.mmx, "mmx"}, {d->k.mmt, "mmt"}, {d->k.mmtx, "mmtx"},
                 {d->k.mmg, "mmg"}, {d->k.mmxg, "mmxg"}, {d->k.mmm, "mmm"}};
    for (size_t i = 0; i < sizeof forms / sizeof forms[0]; i++)
        for (int f = 0; f < GPU_F_COUNT; f++) {
            char name[32];
            snprintf(name, sizeof name, "%s_%s", forms[i].form, fmt_names[f]);
            CU(d, d->cu->ModuleGetFunction(&forms[i].f[f], d->mod, name), name);
        }
    return 0;
}

/* The PCIe (or NVLink-C2C) bandwidth from pinned host memory into the
 * device: three 32 MiB copies, timed with events (~5 ms on PCIe 4). What
 * an expert missing from the device costs to bring in; 0 when pinned
 * memory cannot be had. */
static void measure_h2d(gpu_dev *d) {
    const size_t n = 32u << 20;
    void *h = NULL;
    CUdeviceptr p = 0;
    CUevent a = NULL, b = NULL;
    const cu_api *cu = d->cu;
    if (cu->MemHostAlloc(&h, n, CU_MEMHOSTALLOC_PORTABLE) != CU_SUCCESS) return;
    if (cu->MemAlloc(&p, n) == CU_SUCCESS && cu->EventCreate(&a, CU_EVENT_DEFAULT) == CU_SUCCESS &&
        cu->EventCreate(&b, CU_EVENT_DEFAULT) == CU_SUCCESS) {
        memset(h, 1, n);
        cu->MemcpyHtoDAsync(p, h, n, d->st); /* warm up */
        cu->EventRecord(a, d->st);
        for (int i = 0; i < 3; i++) cu->MemcpyHtoDAsync(p, h, n, d->st);
        cu->EventRecord(b, d->st);
        float ms = 0;
        if (cu->EventSynchronize(b) == CU_SUCCESS && cu->EventElapsedTime(&ms, a, b) == CU_SUCCESS && ms > 0)
            d->h2d_gbs = 3.0 * (double)n / (ms * 1e-3) / 1e9;
    }
    if (a) cu->EventDestroy(a);
    if (b) cu->EventDestroy(b);
    if (p) cu->MemFree(p);
    cu->MemFreeHost(h);
}

/* Device-to-device copy bandwidth (bytes read + written a second), the
 * limit of a resident decode: three copies of 256 MiB. */
static void measure_d2d(gpu_dev *d) {
    const size_t n = 256u << 20;
    CUdeviceptr p = 0, q = 0;
    CUevent a = NULL, b = NULL;
    const cu_api *cu = d->cu;
    if (cu->MemAlloc(&p, n) == CU_SUCCESS && cu->MemAlloc(&q, n) == CU_SUCCESS &&
        cu->EventCreate(&a, CU_EVENT_DEFAULT) == CU_SUCCESS && cu->EventCreate(&b, CU_EVENT_DEFAULT) == CU_SUCCESS) {
        cu->MemsetD8Async(p, 1, n, d->st);
        cu->MemcpyDtoDAsync(q, p, n, d->st); /* warm up */
        cu->EventRecord(a, d->st);
        for (int i = 0; i < 3; i++) cu->MemcpyDtoDAsync(q, p, n, d->st);
        cu->EventRecord(b, d->st);
        float ms = 0;
        if (cu->EventSynchronize(b) == CU_SUCCESS && cu->EventElapsedTime(&ms, a, b) == CU_SUCCESS && ms > 0)
            d->d2d_gbs = 3.0 * 2.0 * (double)n / (ms * 1e-3) / 1e9;
    }
    if (a) cu->EventDestroy(a);
    if (b) cu->EventDestroy(b);
    if (q) cu->MemFree(q);
    if (p) cu->MemFree(p);
}

int gpu_open(gpu_dev **out, int ordinal, char *err) {
    *out = NULL;
    int n;
    int rc = gpu_count(&n, err);
    if (rc) return rc;
    if (ordinal < 0 || ordinal >= n)
        return e0_fail(err, E0_EINVAL, "there is no GPU %d: the driver sees %d (0..%d)", ordinal, n, n - 1);
    gpu_dev *d = calloc(1, sizeof *d);
    if (!d) return e0_fail(err, E0_ENOMEM, "out of memory");
    d->cu = cu_load(NULL);
    d->ordinal = ordinal;
    const cu_api *cu = d->cu;
    CUresult r = cu->DeviceGet(&d->dev, ordinal);
    if (r == CU_SUCCESS) r = cu->DeviceGetName(d->name, (int)sizeof d->name, d->dev);
    if (r == CU_SUCCESS) r = cu->DeviceTotalMem(&d->total, d->dev);
    if (r == CU_SUCCESS) r = cu->DeviceGetAttribute(&d->cc_major, CU_ATTR_COMPUTE_CAPABILITY_MAJOR, d->dev);
    if (r == CU_SUCCESS) r = cu->DeviceGetAttribute(&d->cc_minor, CU_ATTR_COMPUTE_CAPABILITY_MINOR, d->dev);
    if (r == CU_SUCCESS) r = cu->DeviceGetAttribute(&d->sms, CU_ATTR_MULTIPROCESSOR_COUNT, d->dev);
    if (r == CU_SUCCESS) r = cu->DevicePrimaryCtxRetain(&d->ctx, d->dev);
    if (r != CU_SUCCESS) {
        rc = cu_fail(d, err, E0_EIO, "opening the device", r);
        free(d);
        return rc;
    }
    r = cu->CtxSetCurrent(d->ctx);
    size_t total = 0;
    if (r == CU_SUCCESS) r = cu->MemGetInfo(&d->free_at_open, &total);
    if (r == CU_SUCCESS) r = cu->StreamCreate(&d->st, CU_STREAM_NON_BLOCKING);
    if (r == CU_SUCCESS) r = cu->StreamCreate(&d->cs, CU_STREAM_NON_BLOCKING);
    if (r == CU_SUCCESS) r = cu->EventCreate(&d->ev_st, CU_EVENT_DISABLE_TIMING);
    if (r == CU_SUCCESS) r = cu->EventCreate(&d->ev_cs[0], CU_EVENT_DISABLE_TIMING);
    if (r == CU_SUCCESS) r = cu->EventCreate(&d->ev_cs[1], CU_EVENT_DISABLE_TIMING);
    if (r != CU_SUCCESS) {
        rc = cu_fail(d, err, E0_EIO, "creating a context and stream", r);
        cu->DevicePrimaryCtxRelease(d->dev);
        free(d);
        return rc;
    }
    if (d->cc_major < 7 || (d->cc_major == 7 && d->cc_minor < 5)) {
        rc = e0_fail(err, E0_EUNSUPPORTED,
                     "GPU %d (%s) is compute capability %d.%d; edge0's kernels need 7.5 (Turing) or later",
                     ordinal, d->name, d->cc_major, d->cc_minor);
        gpu_close(d);
        return rc;
    }
    rc = load_module(d, err);
    if (rc) {
        gpu_close(d);
        return rc;
    }
    measure_h2d(d);
    measure_d2d(d);
    const char *pv = getenv("E0_GPU_PROFILE");
    d->profile = pv && *pv == '1' && cu->EventCreate(&d->pa, CU_EVENT_DEFAULT) == CU_SUCCESS &&
                 cu->EventCreate(&d->pb, CU_EVENT_DEFAULT) == CU_SUCCESS;
    gpu_trace_open(d);
    const char *gv = getenv("E0_GPU_GRAPH"), *fv = getenv("E0_GPU_FUSE");
    gpu_set_graphs(d, !(gv && *gv == '0'));
    d->fuse = !(fv && *fv == '0');
    /* $E0_GPU_VEC_WARPS=N (1, 2 or 4): a vector product of too few rows to give every SM two blocks of
     * 8 warps takes blocks of as few as N warps instead (experiments: not yet measured on a card) */
    const char *vw = getenv("E0_GPU_VEC_WARPS");
    d->vec_warps_min = vw && (*vw == '1' || *vw == '2' || *vw == '4') ? *vw - '0' : 8;
    /* a decode token's attention in N blocks a head (attend_split), "auto" (the default): about one
     * block an SM (q36 on an H100: 169.7 / 175.7 -> 182.4 tok/s, session 34); 1: one block a head
     * (attend_warps) */
    const char *av = getenv("E0_GPU_SPLIT");
    d->attn_split = !av || !*av || !strcmp(av, "auto") ? 0 : atoi(av);
    if (d->attn_split < 0 || d->attn_split > GPU_ATT_SPLIT_MAX) d->attn_split = 0;
    const char *fl = getenv("E0_GPU_FAIL_LAUNCH");
    d->fail_at = fl && *fl ? atol(fl) : 0;
    const char *wv = getenv("E0_GPU_WHOLE"), *sv = getenv("E0_GPU_SEGMENTS");
    d->whole = !(wv && *wv == '0');
    d->segments = !(sv && *sv == '0');
    *out = d;
    return 0;
}

void gpu_close(gpu_dev *d) {
    if (!d) return;
    d->cu->CtxSetCurrent(d->ctx);
    gpu_trace_close(d);
    if (d->profile) {
        double total = 0;
        for (int i = 0; i < d->nprof; i++) total += d->prof[i].ms;
        fprintf(stderr, "GPU %d profile (E0_GPU_PROFILE): %.1f ms in kernels\n", d->ordinal, total);
        for (int i = 0; i < d->nprof; i++)
            fprintf(stderr, "  %-22s %8llu launches %10.2f ms %5.1f%% %8.2f us each\n", d->prof[i].what,
                    (unsigned long long)d->prof[i].n, d->prof[i].ms, 100.0 * d->prof[i].ms / (total > 0 ? total : 1),
                    1000.0 * d->prof[i].ms / (double)d->prof[i].n);
        d->cu->EventDestroy(d->pa);
        d->cu->EventDestroy(d->pb);
    }
    if (d->ev_st) d->cu->EventDestroy(d->ev_st);
    for (int i = 0; i < 2; i++)
        if (d->ev_cs[i]) d->cu->EventDestroy(d->ev_cs[i]);
    if (d->cs) d->cu->StreamDestroy(d->cs);
    if (d->st) d->cu->StreamDestroy(d->st);
    if (d->mod) d->cu->ModuleUnload(d->mod);
    d->cu->DevicePrimaryCtxRelease(d->dev);
    free(d);
}

int gpu_alloc(gpu_dev *d, CUdeviceptr *p, size_t bytes, const char *what, char *err) {
    *p = 0;
    if (!bytes) bytes = 1;
    if (d->arena_cuts && d->arena_used + gpu_up256(bytes) <= d->arena_bytes) {
        *p = d->arena + d->arena_used;
        d->arena_used += gpu_up256(bytes);
        return 0;
    }
    CUresult r = d->cu->MemAlloc(p, bytes);
    if (r == CU_ERROR_OUT_OF_MEMORY) {
        size_t fr = 0, tot = 0;
        d->cu->MemGetInfo(&fr, &tot);
        return e0_fail(err, E0_ENOMEM,
                       "GPU %d (%s): out of device memory for %s: %.1f MiB asked, %.1f MiB free of %.1f GiB "
                       "(edge0 holds %.1f MiB)",
                       d->ordinal, d->name, what, (double)bytes / 1048576.0, (double)fr / 1048576.0,
                       (double)tot / 1073741824.0, (double)d->held / 1048576.0);
    }
    if (r != CU_SUCCESS) return cu_fail(d, err, E0_EIO, what, r);
    d->held += bytes;
    return 0;
}

void gpu_free(gpu_dev *d, CUdeviceptr p, size_t bytes) {
    if (!p || (d->arena && p >= d->arena && p < d->arena + d->arena_bytes)) return;
    d->cu->MemFree(p);
    d->held -= bytes ? bytes : 1;
}

int gpu_arena_open(gpu_dev *d, size_t bytes, bool *opened, char *err) {
    *opened = false;
    if (d->arena) return 0;
    int rc = gpu_alloc(d, &d->arena, bytes, "the model's weights", err);
    if (rc) return rc;
    d->arena_bytes = bytes, d->arena_used = 0, d->arena_cuts = *opened = true;
    return 0;
}

void gpu_arena_stop(gpu_dev *d) { d->arena_cuts = false; }

void gpu_arena_free(gpu_dev *d) {
    const CUdeviceptr a = d->arena;
    if (!a) return;
    d->arena = 0, d->arena_cuts = false;
    gpu_free(d, a, d->arena_bytes);
    d->arena_bytes = d->arena_used = 0;
}

int gpu_put(gpu_dev *d, CUdeviceptr dst, const void *src, size_t bytes, char *err) {
    if (!bytes) return 0;
    /* a pageable source: the driver stages it, so src is free on return */
    CU(d, d->cu->MemcpyHtoDAsync(dst, src, bytes, d->st), "copy to the device");
    return 0;
}

int gpu_get(gpu_dev *d, void *dst, CUdeviceptr src, size_t bytes, char *err) {
    if (!bytes) return 0;
    CU(d, d->cu->MemcpyDtoHAsync(dst, src, bytes, d->st), "copy from the device");
    CU(d, d->cu->StreamSynchronize(d->st), "waiting for the device");
    return 0;
}

int gpu_get_n(gpu_dev *d, int n, void *const *dst, const CUdeviceptr *src, const size_t *bytes, char *err) {
    for (int i = 0; i < n; i++)
        if (bytes[i]) CU(d, d->cu->MemcpyDtoHAsync(dst[i], src[i], bytes[i], d->st), "copy from the device");
    CU(d, d->cu->StreamSynchronize(d->st), "waiting for the device");
    return 0;
}

int gpu_host_alloc(gpu_dev *d, void **p, size_t bytes, const char *what, char *err) {
    *p = NULL;
    if (d->cu->MemHostAlloc(p, bytes ? bytes : 1, 0) != CU_SUCCESS) {
        *p = NULL;
        return e0_fail(err, E0_ENOMEM, "%zu bytes of pinned host memory for %s", bytes, what);
    }
    return 0;
}

void gpu_host_free(gpu_dev *d, void *p) {
    if (p) d->cu->MemFreeHost(p);
}

int gpu_zero(gpu_dev *d, CUdeviceptr p, size_t bytes, char *err) {
    if (!bytes) return 0;
    CU(d, d->cu->MemsetD8Async(p, 0, bytes, d->st), "clearing device memory");
    return 0;
}

int gpu_copy_after(gpu_dev *d, char *err) {
    CU(d, d->cu->EventRecord(d->ev_st, d->st), "ordering the copy stream");
    CU(d, d->cu->StreamWaitEvent(d->cs, d->ev_st, 0), "ordering the copy stream");
    return 0;
}

int gpu_put_copy(gpu_dev *d, CUdeviceptr dst, const void *src, size_t bytes, char *err) {
    if (!bytes) return 0;
    CU(d, d->cu->MemcpyHtoDAsync(dst, src, bytes, d->cs), "copy to the device");
    return 0;
}

int gpu_copy_mark(gpu_dev *d, int i, char *err) {
    CU(d, d->cu->EventRecord(d->ev_cs[i & 1], d->cs), "marking the copy stream");
    return 0;
}

int gpu_wait_copy_mark(gpu_dev *d, int i, char *err) {
    CU(d, d->cu->StreamWaitEvent(d->st, d->ev_cs[i & 1], 0), "waiting for the copy stream");
    return 0;
}

int gpu_sync(gpu_dev *d, char *err) {
    CU(d, d->cu->StreamSynchronize(d->cs), "waiting for the device's copies");
    CU(d, d->cu->StreamSynchronize(d->st), "waiting for the device");
    return 0;
}

/* The injected failure of fail_at (tests), when this launch is it. */
static int injected(gpu_dev *d, const char *what, char *err) {
    if (d->fail_at <= 0 || --d->fail_at > 0) return 0;
    return e0_fail(err, E0_EIO, "GPU %d (%s): %s: an injected device error ($E0_GPU_FAIL_LAUNCH)", d->ordinal,
                   d->name, what);
}

int gpu_launch(gpu_dev *d, CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
               unsigned shmem, void **args, const char *what, char *err) {
    if (!gx || !gy || !gz || d->launch_off) return 0;
    if (injected(d, what, err)) return E0_EIO;
    if (d->profile) d->cu->EventRecord(d->pa, d->st);
    CU(d, d->cu->LaunchKernel(f, gx, gy, gz, bx, 1, 1, shmem, d->st, args, NULL), what);
    if (d->profile) {
        float ms = 0;
        d->cu->EventRecord(d->pb, d->st);
        d->cu->EventSynchronize(d->pb);
        d->cu->EventElapsedTime(&ms, d->pa, d->pb);
        int i = 0;
        while (i < d->nprof && strcmp(d->prof[i].what, what)) i++;
        if (i == d->nprof && d->nprof < GPU_PROF_MAX) d->prof[d->nprof++] = (gpu_prof){what, 0, 0};
        if (i < d->nprof) d->prof[i].n++, d->prof[i].ms += ms;
    }
    return 0;
}

/* ---- weight matrices ---------------------------------------------------- */

int gpu_fmt_of(const e0_mat *m, gpu_fmt *f, char *err) {
    if (m->cols % 32)
        return e0_fail(err, E0_EUNSUPPORTED, "a matrix of %lld columns (the GPU kernels need a multiple of 32)",
                       (long long)m->cols);
    switch (m->type) {
    case E0_W_F32: *f = GPU_F_F32; return 0;
    case E0_W_BF16: *f = GPU_F_BF16; return 0;
    case E0_W_F16: *f = GPU_F_F16; return 0;
    case E0_W_QAFF:
        if (m->layout != E0_L_ROWS)
            return e0_fail(err, E0_EUNSUPPORTED, "a matrix in 16-row panels (the GPU reads the file layout)");
        if (m->group < 32 || (m->bits != 4 && m->bits != 8))
            return e0_fail(err, E0_EUNSUPPORTED, "mlx %d-bit group %d (the GPU kernels take 4 and 8 bits, groups of 32 or more)",
                           m->bits, m->group);
        *f = m->bits == 4 ? GPU_F_QA4 : GPU_F_QA8;
        return 0;
    case E0_W_GGML:
        switch (m->gtype) {
        case GGML_F32: *f = GPU_F_F32; return 0;
        case GGML_F16: *f = GPU_F_F16; return 0;
        case GGML_BF16: *f = GPU_F_BF16; return 0;
        case GGML_Q4_0: *f = GPU_F_Q4_0; return 0;
        case GGML_Q4_1: *f = GPU_F_Q4_1; return 0;
        case GGML_Q5_0: *f = GPU_F_Q5_0; return 0;
        case GGML_Q5_1: *f = GPU_F_Q5_1; return 0;
        case GGML_Q8_0: *f = GPU_F_Q8_0; return 0;
        case GGML_Q2_K: *f = GPU_F_Q2_K; return 0;
        case GGML_Q3_K: *f = GPU_F_Q3_K; return 0;
        case GGML_Q4_K: *f = GPU_F_Q4_K; return 0;
        case GGML_Q5_K: *f = GPU_F_Q5_K; return 0;
        case GGML_Q6_K: *f = GPU_F_Q6_K; return 0;
        case GGML_IQ4_NL: *f = GPU_F_IQ4_NL; return 0;
        case GGML_IQ4_XS: *f = GPU_F_IQ4_XS; return 0;
        default: break;
        }
        return e0_fail(err, E0_EUNSUPPORTED, "ggml type %u has no GPU kernel", m->gtype);
    }
    return e0_fail(err, E0_EUNSUPPORTED, "weight type %d has no GPU kernel", (int)m->type);
}

/* Device bytes of the weights and of the scales (each of scales, biases). */
static void part_bytes(const e0_mat *m, uint64_t *wb, uint64_t *sb) {
    *wb = (uint64_t)mat_row_bytes(m) * (uint64_t)m->rows;
    *sb = m->type == E0_W_QAFF ? (uint64_t)mat_srow_bytes(m) * (uint64_t)m->rows : 0;
}

/* Rounded up so every stacked part starts 256-byte aligned. */

uint64_t gpu_mat_bytes(const e0_mat *m) {
    uint64_t wb, sb;
    part_bytes(m, &wb, &sb);
    return gpu_up256(wb) + 2 * gpu_up256(sb);
}

static void mat_fill(gpu_mat *g, const e0_mat *m, gpu_fmt f) {
    memset(g, 0, sizeof *g);
    g->row_bytes = (int64_t)mat_row_bytes(m);
    g->srow_bytes = m->type == E0_W_QAFF ? (int64_t)mat_srow_bytes(m) : 0;
    g->rows = (int32_t)m->rows;
    g->cols = (int32_t)m->cols;
    g->fmt = (int32_t)f;
    g->group = m->group;
    g->stype = (int32_t)m->stype;
}

int gpu_mat_upload_stack(gpu_dev *d, const e0_mat *const *ms, int n, gpu_mat *out,
                         const char *what, char *err) {
    memset(out, 0, sizeof *out);
    gpu_fmt f;
    char why[E0_ERR_MAX];
    int rc = gpu_fmt_of(ms[0], &f, why);
    if (rc) return e0_fail(err, rc, "%s: %s", what, why);
    for (int i = 1; i < n; i++)
        if (ms[i]->type != ms[0]->type || ms[i]->rows != ms[0]->rows || ms[i]->cols != ms[0]->cols ||
            ms[i]->gtype != ms[0]->gtype || ms[i]->bits != ms[0]->bits || ms[i]->group != ms[0]->group ||
            ms[i]->stype != ms[0]->stype)
            return e0_fail(err, E0_EFORMAT, "%s: part %d differs in shape or format from part 0", what, i);
    uint64_t wb, sb;
    part_bytes(ms[0], &wb, &sb);
    const uint64_t ew = gpu_up256(wb), es = gpu_up256(sb);
    gpu_mat g;
    mat_fill(&g, ms[0], f);
    g.estride = (int64_t)ew;
    g.sstride = (int64_t)es;
    rc = gpu_alloc(d, &g.w, ew * (uint64_t)n, what, err);
    if (!rc && sb) rc = gpu_alloc(d, &g.s, es * (uint64_t)n, what, err);
    if (!rc && sb) rc = gpu_alloc(d, &g.b, es * (uint64_t)n, what, err);
    for (int i = 0; !rc && i < n; i++) {
        rc = gpu_put(d, g.w + ew * (uint64_t)i, ms[i]->w, wb, err);
        if (!rc && sb) rc = gpu_put(d, g.s + es * (uint64_t)i, ms[i]->scales, sb, err);
        if (!rc && sb) rc = gpu_put(d, g.b + es * (uint64_t)i, ms[i]->biases, sb, err);
    }
    /* the staged copies of pageable memory must finish before the caller's
     * pages change (mappings may be dropped after upload) */
    if (!rc) rc = gpu_sync(d, err);
    if (rc) {
        gpu_mat_free(d, &g, n);
        return rc;
    }
    *out = g;
    return 0;
}

int gpu_mat_shape(const e0_mat *m, gpu_mat *out, uint64_t *wbytes, uint64_t *sbytes, char *err) {
    gpu_fmt f;
    int rc = gpu_fmt_of(m, &f, err);
    if (rc) return rc;
    uint64_t wb, sb;
    part_bytes(m, &wb, &sb);
    mat_fill(out, m, f);
    *wbytes = gpu_up256(wb);
    *sbytes = gpu_up256(sb);
    return 0;
}

int gpu_mat_put(gpu_dev *d, const gpu_mat *g, int64_t i, const e0_mat *m, bool copy_stream, char *err) {
    int (*put)(gpu_dev *, CUdeviceptr, const void *, size_t, char *) = copy_stream ? gpu_put_copy : gpu_put;
    uint64_t wb, sb;
    part_bytes(m, &wb, &sb);
    int rc = put(d, g->w + (uint64_t)i * (uint64_t)g->estride, m->w, wb, err);
    if (!rc && sb) rc = put(d, g->s + (uint64_t)i * (uint64_t)g->sstride, m->scales, sb, err);
    if (!rc && sb) rc = put(d, g->b + (uint64_t)i * (uint64_t)g->sstride, m->biases, sb, err);
    return rc;
}

int gpu_mat_get(gpu_dev *d, const gpu_mat *g, int64_t i, const e0_mat *m, bool copy_stream, char *err) {
    CUstream st = copy_stream ? d->cs : d->st;
    uint64_t wb, sb;
    part_bytes(m, &wb, &sb);
    /* m's memory is the caller's to write: a host cache slot that m views */
    CU(d, d->cu->MemcpyDtoHAsync((void *)(uintptr_t)m->w, g->w + (uint64_t)i * (uint64_t)g->estride, wb, st),
       "copy from the device");
    if (sb) {
        CU(d, d->cu->MemcpyDtoHAsync((void *)(uintptr_t)m->scales, g->s + (uint64_t)i * (uint64_t)g->sstride, sb, st),
           "copy from the device");
        CU(d, d->cu->MemcpyDtoHAsync((void *)(uintptr_t)m->biases, g->b + (uint64_t)i * (uint64_t)g->sstride, sb, st),
           "copy from the device");
    }
    return 0;
}

int gpu_mat_upload(gpu_dev *d, const e0_mat *m, gpu_mat *out, const char *what, char *err) {
    const e0_mat *one[1] = {m};
    return gpu_mat_upload_stack(d, one, 1, out, what, err);
}

void gpu_mat_free(gpu_dev *d, gpu_mat *m, int n) {
    const uint64_t rows = (uint64_t)(m->rows > 0 ? m->rows : 0);
    const uint64_t ew = m->estride ? (uint64_t)m->estride : gpu_up256((uint64_t)m->row_bytes * rows);
    const uint64_t es = m->sstride ? (uint64_t)m->sstride : gpu_up256((uint64_t)m->srow_bytes * rows);
    gpu_free(d, m->w, ew * (uint64_t)n);
    gpu_free(d, m->s, es * (uint64_t)n);
    gpu_free(d, m->b, es * (uint64_t)n);
    memset(m, 0, sizeof *m);
}

/* Input rows the matmul kernels stage in shared memory at once (at most
 * kernels.cu's TT = 4), within the 48 KiB every card gives a block without
 * asking: each row takes cols / 32 chunks of 36 floats (XS). */
static int staged_rows(const gpu_mat *W, unsigned *shmem) {
    const unsigned row = (unsigned)(W->cols / 32) * 36u * 4u;
    int g = (int)((48u * 1024u) / row);
    if (g > 4) g = 4;
    if (g < 1) g = 1;
    *shmem = (unsigned)g * row;
    return g;
}

static int g_tile_t = -1;

int gpu_tile_min_t(void) {
    if (g_tile_t < 0) {
        const char *v = getenv("E0_GPU_TILE_T");
        g_tile_t = v && *v ? atoi(v) : 16;
        if (g_tile_t < 0) g_tile_t = 0;
    }
    return g_tile_t;
}

void gpu_set_tile_min_t(int t) { g_tile_t = t; }

/* The widest input the vector forms stage: one row's 340 chunks fill the 48 KiB. */
enum { VEC_MAX_COLS = 10880 };

/* Which form a product takes: tiles for T tokens (gpu_mm), or for T * k
 * pairs over max_act experts, where tiles pay off from gpu_tile_min_t()
 * pairs an expert on average (a prefill of 64 ids over 256 experts gives
 * each about 2). */
static bool tiles_for(int T) { return T >= gpu_tile_min_t(); }
static bool expert_tiles_for(int T, int k, int max_act) {
    return (int64_t)T * k >= (int64_t)gpu_tile_min_t() * max_act;
}

static int too_wide(const gpu_mat *W, char *err) {
    return e0_fail(err, E0_EUNSUPPORTED, "a matrix of %d columns (the GPU kernels take %d)", W->cols, VEC_MAX_COLS);
}

/* Warps (rows) a block of the vector forms for a launch of `rows` rows in
 * all: 8, or fewer (down to $E0_GPU_VEC_WARPS) while that leaves fewer than
 * two blocks an SM. */
static int vec_warps(const gpu_dev *d, int64_t rows) {
    const int64_t sms = d->sms > 0 ? d->sms : 1;
    int w = 8;
    while (w > d->vec_warps_min && rows / w < 2 * sms) w /= 2;
    return w;
}

/* Blocks of w warps of the vector forms' plain and gate-up products: one
 * a w rows, at most 64 warps an SM; a taller matrix (the lm_head) has each
 * warp take every grid's-worth row after its first, with its input staged
 * once. */
static unsigned vec_blocks(const gpu_dev *d, int rows, int w) {
    const unsigned want = (unsigned)((rows + w - 1) / w), most = (64u / (unsigned)w) * (unsigned)(d->sms > 0 ? d->sms : 1);
    return want < most ? want : most;
}

int gpu_mm(gpu_dev *d, const gpu_mat *W, CUdeviceptr x, int64_t ldx, CUdeviceptr y, int64_t ldy,
           int T, char *err) {
    if (tiles_for(T)) {
        long long lx = ldx, ly = ldy;
        void *args[] = {(void *)W, &x, &lx, &y, &ly, &T};
        return gpu_launch(d, d->k.mmt[W->fmt], (unsigned)((W->rows + 63) / 64), (unsigned)((T + 63) / 64), 1,
                          256, 0, args, "mm (tiles)", err);
    }
    if (W->cols > VEC_MAX_COLS) return too_wide(W, err);
    long long lx = ldx, ly = ldy;
    unsigned shmem;
    int g = staged_rows(W, &shmem);
    void *args[] = {(void *)W, &x, &lx, &y, &ly, &T, &g};
    const int w = vec_warps(d, W->rows);
    return gpu_launch(d, d->k.mm[W->fmt], vec_blocks(d, W->rows, w), 1, 1, 32u * (unsigned)w, shmem, args, "mm", err);
}

int gpu_mmx(gpu_dev *d, const gpu_mat *W, int max_act, CUdeviceptr nact, CUdeviceptr exps,
            CUdeviceptr start, CUdeviceptr order, int k, bool by_pair, CUdeviceptr x, int64_t ldx,
            CUdeviceptr y, int64_t ldy, int T, char *err) {
    if (expert_tiles_for(T, k, max_act)) {
        long long lx = ldx, ly = ldy;
        int bp = by_pair;
        void *args[] = {(void *)W, &nact, &exps, &start, &order, &k, &bp, &x, &lx, &y, &ly};
        return gpu_launch(d, d->k.mmtx[W->fmt], (unsigned)((W->rows + 63) / 64), 1, (unsigned)max_act, 256,
                          0, args, "mm (expert tiles)", err);
    }
    if (W->cols > VEC_MAX_COLS) return too_wide(W, err);
    long long lx = ldx, ly = ldy;
    int bp = by_pair;
    unsigned shmem;
    int g = staged_rows(W, &shmem);
    void *args[] = {(void *)W, &nact, &exps, &start, &order, &k, &bp, &x, &lx, &y, &ly, &g};
    const int w = vec_warps(d, (int64_t)W->rows * k);
    return gpu_launch(d, d->k.mmx[W->fmt], (unsigned)((W->rows + w - 1) / w), 1, (unsigned)max_act, 32u * (unsigned)w,
                      shmem, args, "mm (experts)", err);
}

/* ---- CUDA graphs --------------------------------------------------------- */

bool gpu_graphs_on(const gpu_dev *d) { return d->graphs; }

void gpu_set_graphs(gpu_dev *d, bool on) {
    const cu_api *cu = d->cu;
    d->graphs = on && !d->profile && cu->StreamBeginCapture && cu->StreamEndCapture &&
                cu->GraphInstantiateWithFlags && cu->GraphLaunch && cu->GraphExecDestroy && cu->GraphDestroy;
}

int gpu_capture_begin(gpu_dev *d, char *err) {
    CU(d, d->cu->StreamBeginCapture(d->st, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL), "starting a graph capture");
    return 0;
}

int gpu_capture_end(gpu_dev *d, bool keep, CUgraphExec *out, char *err) {
    *out = NULL;
    CUgraph g = NULL;
    const CUresult r = d->cu->StreamEndCapture(d->st, &g);
    if (!keep || r != CU_SUCCESS) {
        if (g) d->cu->GraphDestroy(g);
        if (keep) return cu_fail(d, err, E0_EIO, "ending a graph capture", r);
        return 0;
    }
    const CUresult ri = d->cu->GraphInstantiateWithFlags(out, g, 0);
    d->cu->GraphDestroy(g);
    if (ri != CU_SUCCESS) {
        *out = NULL;
        return cu_fail(d, err, E0_EIO, "instantiating a graph", ri);
    }
    return 0;
}

int gpu_graph_launch(gpu_dev *d, CUgraphExec g, char *err) {
    if (injected(d, "a decode step's graph", err)) return E0_EIO;
    CU(d, d->cu->GraphLaunch(g, d->st), "launching a graph");
    return 0;
}

void gpu_graph_free(gpu_dev *d, CUgraphExec g) {
    if (g) d->cu->GraphExecDestroy(g);
}

/* ---- the fused forms ------------------------------------------------------ */

int gpu_swiglu(gpu_dev *d, CUdeviceptr g, CUdeviceptr u, long long n, char *err) {
    void *args[] = {&g, &u, &n};
    return gpu_launch(d, d->k.swiglu, (unsigned)((n + 255) / 256), 1, 1, 256, 0, args, "swiglu", err);
}

/* Whether gpu_mm takes the vector form for T tokens (else tiles, or too wide). */
static bool vector_form(const gpu_mat *W, int T) { return !tiles_for(T) && W->cols <= VEC_MAX_COLS; }

static bool same_form(const gpu_mat *a, const gpu_mat *b) { return a->fmt == b->fmt && a->cols == b->cols; }

int gpu_mm_multi(gpu_dev *d, int n, const gpu_mat *const *W, CUdeviceptr x, int64_t ldx,
                 const CUdeviceptr *y, const int64_t *ldy, int T, char *err) {
    if (!d->fuse || n < 2 || n > 4 || !vector_form(W[0], T)) {
        int rc = 0;
        for (int i = 0; !rc && i < n; i++) rc = gpu_mm(d, W[i], x, ldx, y[i], ldy[i], T, err);
        return rc;
    }
    /* the matrices of one form in one launch each (a Q4_K_M mix gives a layer's q and k one
     * format and its v another, or its DeltaNet qkv Q6_K beside a Q4_K z, b and a: two launches,
     * not three or four); a form held by one matrix alone as gpu_mm */
    bool done[4] = {false, false, false, false};
    int rc = 0;
    for (int i = 0; !rc && i < n; i++) {
        if (done[i]) continue;
        int in[4], m = 0; /* the matrices of W[i]'s form not yet launched */
        int64_t rows = 0;
        for (int j = i; j < n; j++)
            if (!done[j] && same_form(W[j], W[i])) done[j] = true, in[m++] = j, rows += W[j]->rows;
        const int w = vec_warps(d, rows);
        gpu_multi M;
        memset(&M, 0, sizeof M);
        for (; M.n < m; M.n++) {
            const int j = in[M.n];
            M.W[M.n] = *W[j];
            M.y[M.n] = y[j];
            M.ldy[M.n] = ldy[j];
            M.first[M.n + 1] = M.first[M.n] + (W[j]->rows + w - 1) / w;
        }
        if (M.n == 1) {
            rc = gpu_mm(d, W[i], x, ldx, y[i], ldy[i], T, err);
            continue;
        }
        for (int j = M.n + 1; j < 5; j++) M.first[j] = M.first[M.n];
        long long lx = ldx;
        unsigned shmem;
        int g = staged_rows(W[i], &shmem);
        void *args[] = {&M, &x, &lx, &T, &g};
        rc = gpu_launch(d, d->k.mmm[W[i]->fmt], (unsigned)M.first[M.n], 1, 1, 32u * (unsigned)w, shmem, args,
                        "mm (grouped)", err);
    }
    return rc;
}

int gpu_mm_glu(gpu_dev *d, const gpu_mat *G, const gpu_mat *U, CUdeviceptr x, int64_t ldx,
               CUdeviceptr g, CUdeviceptr u, int T, char *err) {
    if (!d->fuse || !vector_form(G, T) || !same_form(G, U) || G->rows != U->rows) {
        int rc = gpu_mm(d, G, x, ldx, g, G->rows, T, err);
        if (!rc) rc = gpu_mm(d, U, x, ldx, u, U->rows, T, err);
        if (!rc) rc = gpu_swiglu(d, g, u, (long long)T * G->rows, err);
        return rc;
    }
    long long lx = ldx, ly = G->rows;
    unsigned shmem;
    int gs = staged_rows(G, &shmem);
    void *args[] = {(void *)G, (void *)U, &x, &lx, &g, &ly, &T, &gs};
    const int w = vec_warps(d, G->rows);
    return gpu_launch(d, d->k.mmg[G->fmt], vec_blocks(d, G->rows, w), 1, 1, 32u * (unsigned)w, shmem, args,
                      "mm (gate, up)", err);
}

int gpu_mmx_glu(gpu_dev *d, const gpu_mat *G, const gpu_mat *U, int max_act, CUdeviceptr nact,
                CUdeviceptr exps, CUdeviceptr start, CUdeviceptr order, int k, CUdeviceptr x,
                int64_t ldx, CUdeviceptr g, CUdeviceptr u, int T, char *err) {
    const bool vector = !expert_tiles_for(T, k, max_act) && G->cols <= VEC_MAX_COLS;
    if (!d->fuse || !vector || !same_form(G, U) || G->rows != U->rows) {
        int rc = gpu_mmx(d, G, max_act, nact, exps, start, order, k, false, x, ldx, g, G->rows, T, err);
        if (!rc) rc = gpu_mmx(d, U, max_act, nact, exps, start, order, k, false, x, ldx, u, U->rows, T, err);
        if (!rc) rc = gpu_swiglu(d, g, u, (long long)T * k * G->rows, err);
        return rc;
    }
    long long lx = ldx, ly = G->rows;
    unsigned shmem;
    int gs = staged_rows(G, &shmem);
    void *args[] = {(void *)G, (void *)U, &nact, &exps, &start, &order, &k, &x, &lx, &g, &ly, &gs};
    const int w = vec_warps(d, (int64_t)G->rows * k);
    return gpu_launch(d, d->k.mmxg[G->fmt], (unsigned)((G->rows + w - 1) / w), 1, (unsigned)max_act, 32u * (unsigned)w,
                      shmem, args, "mm (experts' gate, up)", err);
}
