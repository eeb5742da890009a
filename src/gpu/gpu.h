/* One NVIDIA GPU as edge0 computes on it: the driver context, the kernel
 * module (gpu/kernels.cu, embedded as PTX), a stream, device memory, and
 * weight matrices copied into device memory in their checkpoint formats.
 *
 * Ownership: gpu_open makes a gpu_dev that owns its context reference,
 * module and stream; every gpu_alloc'd buffer belongs to the caller and
 * goes back through gpu_free before gpu_close. A gpu_dev is used by one
 * thread at a time (the engine's owner); work on its stream runs in
 * launch order, so no call below synchronises unless it says so.
 *
 * Errors: every call returns 0 or a negative E0_E* status and writes a
 * message naming the operation and the driver's error into err; device
 * out-of-memory is E0_ENOMEM and says how much was asked for and free.
 */
#ifndef E0_GPU_GPU_H
#define E0_GPU_GPU_H

#include "gpu/cu.h"
#include "quant/mat.h"

#include <stdbool.h>
#include <stdint.h>

/* Weight formats the kernels read; keep in step with kernels.cu's enum. */
typedef enum {
    GPU_F_F32, GPU_F_BF16, GPU_F_F16, GPU_F_QA4, GPU_F_QA8,
    GPU_F_Q4_0, GPU_F_Q4_1, GPU_F_Q5_0, GPU_F_Q5_1, GPU_F_Q8_0,
    GPU_F_Q2_K, GPU_F_Q3_K, GPU_F_Q4_K, GPU_F_Q5_K, GPU_F_Q6_K, GPU_F_IQ4_NL, GPU_F_IQ4_XS,
    GPU_F_COUNT
} gpu_fmt;

/* A matrix in device memory, as the kernels take it (struct gmat in
 * kernels.cu, field for field): `rows` rows of row_bytes from w, in the
 * checkpoint's own format; mlx affine adds rows of srow_bytes of scales (s)
 * and biases (b). Stacked experts: expert e at w + e * estride and
 * s / b + e * sstride, every expert alike. */
typedef struct {
    CUdeviceptr w, s, b;
    int64_t row_bytes, srow_bytes;
    int64_t estride, sstride;
    int32_t rows, cols;
    int32_t fmt, group, stype; /* gpu_fmt; mlx affine group; scales' e0_stype */
    int32_t pad;
    /* The VRAM cache's experts in pinned host memory, where the device
     * brings a decode step's misses in itself (moe_stage; 0 otherwise):
     * expert e at hw + e * hestride, its scales and biases at hs / hb +
     * e * hsstride. */
    CUdeviceptr hw, hs, hb;
    int64_t hestride, hsstride;
} gpu_mat;
_Static_assert(sizeof(gpu_mat) == 120, "gpu_mat mirrors struct gmat");

/* Up to four matrices of one format and width that take the same input,
 * for one launch (struct gmulti in kernels.cu, field for field): blocks
 * first[i] .. first[i + 1] (of a block's warps' rows) compute W[i] into y[i]. */
typedef struct {
    gpu_mat W[4];
    CUdeviceptr y[4];
    int64_t ldy[4];
    int32_t first[5];
    int32_t n;
} gpu_multi;
_Static_assert(sizeof(gpu_multi) == 568, "gpu_multi mirrors struct gmulti");

/* The most blocks a head's decode attention is split into (attend_split). */
enum { GPU_ATT_SPLIT_MAX = 16 };

/* The kernels, looked up once at open. */
typedef struct {
    CUfunction mm[GPU_F_COUNT], mmx[GPU_F_COUNT];   /* vector form: a warp a row, 4 tokens a pass */
    CUfunction mmg[GPU_F_COUNT], mmxg[GPU_F_COUNT]; /* the same, gate and up at once: silu(g) * u */
    CUfunction mmm[GPU_F_COUNT];                    /* the same, up to four matrices at once */
    CUfunction mmt[GPU_F_COUNT], mmtx[GPU_F_COUNT]; /* tiled form: 64 rows x 64 tokens a block */
    CUfunction rmsnorm, add_inplace, swiglu, qk_norm_rope, kv_store, attend_warps, attend_split, attend_merge;
    CUfunction dn_unpack, dn_conv, dn_qknorm, dn_rec, dn_rec32, dn_rec64, dn_rec128;
    CUfunction route, route_profile, moe_sort, moe_stage, moe_combine;
} gpu_kernels;

/* Per-kernel time under $E0_GPU_PROFILE=1: each launch is timed with
 * events (and waited for), summed by its name, and printed at close. */
enum { GPU_PROF_MAX = 48 };
typedef struct {
    const char *what;
    uint64_t n;
    double ms;
} gpu_prof;

/* One decode pass's timeline under $E0_GPU_TRACE=N (gpu/trace.c). */
enum { GPU_TRACE_MAX = 640 };
typedef struct {
    int at;          /* trace the at-th pass of one id (1-based); 0: off */
    int passes;      /* passes of one id so far */
    bool on;         /* this pass is traced */
    int n;           /* points so far */
    CUevent ev[GPU_TRACE_MAX];
    const char *what[GPU_TRACE_MAX];
    int layer[GPU_TRACE_MAX];
    bool copy[GPU_TRACE_MAX]; /* recorded on the copy stream */
    double host[GPU_TRACE_MAX]; /* the host's clock when it recorded the point */
} gpu_trace_t;

typedef struct gpu_dev {
    const cu_api *cu;
    int ordinal;
    CUdevice dev;
    CUcontext ctx;
    CUmodule mod;
    CUstream st;
    CUstream cs;           /* the copy stream: the VRAM cache's whole-layer prefill copies (gpu_copy_after) */
    CUevent ev_st, ev_cs[2]; /* how st and cs wait for each other */
    gpu_kernels k;
    char name[128];
    int cc_major, cc_minor, sms;
    size_t total;          /* device memory */
    size_t free_at_open;   /* what the driver reported free at open */
    uint64_t held;         /* bytes gpu_alloc'd and not freed */
    CUdeviceptr arena;     /* gpu_arena_open's allocation, or 0 */
    size_t arena_bytes, arena_used;
    bool arena_cuts;       /* gpu_alloc cuts from the arena while it has room */
    double jit_s;          /* seconds the PTX took to load */
    double h2d_gbs;        /* host-to-device bandwidth from pinned memory, measured at open */
    double d2d_gbs;        /* device memory copy bandwidth (read + write), measured at open */
    bool profile;          /* $E0_GPU_PROFILE */
    bool graphs;           /* decode steps replayed as CUDA graphs (gpu_graphs_on) */
    bool fuse;             /* the fused matmul forms (gpu_mm_multi, gpu_mm_glu); $E0_GPU_FUSE=0 turns them off */
    bool segments;         /* a budgeted decode step in graphs between its readbacks (gmodel.c seg_plan);
                              on by default (session 38: +6% at 16 GiB); $E0_GPU_SEGMENTS=0 turns it off */
    bool launch_off;       /* gpu_launch does nothing: a segment's graph holds the launches (gmodel.c) */
    int vec_warps_min;     /* the vector products' fewest warps a block ($E0_GPU_VEC_WARPS, experiments: 8) */
    int attn_split;        /* a decode token's attention in this many blocks a head (attend_split, then
                              attend_merge); 0 (the default): about one block an SM (gmodel.c attention);
                              1: one block a head (attend_warps); $E0_GPU_SPLIT=N|auto */
    bool whole;            /* the VRAM cache's whole-layer prefill (vcache_whole_ok); $E0_GPU_WHOLE=0 turns
                              it off */
    long fail_at;          /* tests: the launch (kernel or graph) that many launches from now fails once, as a
                              device error would, without reaching the device; 0: none
                              ($E0_GPU_FAIL_LAUNCH=N at open) */
    CUevent pa, pb;
    gpu_prof prof[GPU_PROF_MAX];
    int nprof;
    gpu_trace_t *trace; /* $E0_GPU_TRACE, or NULL */
} gpu_dev;

/* Devices the driver sees: 0 with *n set, or the reason none can be used
 * in err (no driver, no device: E0_EUNSUPPORTED). */
int gpu_count(int *n, char *err);
/* A pass's timeline (gpu/trace.c): with $E0_GPU_TRACE=N, the N-th pass of
 * one id (a decode step; passes with the host between layers: a VRAM
 * cache's) records an event at each gpu_trace point, on the stream or the
 * copy stream, with the host's clock beside it, and prints them to stderr
 * when gpu_trace_end is reached: when the device got to each point (from
 * the pass's start) against when the host asked for it. gpu_trace_begin
 * returns whether this pass is traced. No-ops otherwise. */
void gpu_trace_open(gpu_dev *d);
void gpu_trace_close(gpu_dev *d);
bool gpu_trace_begin(gpu_dev *d, int T);
void gpu_trace(gpu_dev *d, bool copy_stream, const char *what, int layer);
void gpu_trace_end(gpu_dev *d);
/* Opens device `ordinal` (0-based): its primary context, the kernels, a
 * stream. */
int gpu_open(gpu_dev **out, int ordinal, char *err);
void gpu_close(gpu_dev *d);

int gpu_alloc(gpu_dev *d, CUdeviceptr *p, size_t bytes, const char *what, char *err);
void gpu_free(gpu_dev *d, CUdeviceptr p, size_t bytes);
/* One allocation of `bytes` that gpu_alloc cuts its buffers from (256-byte
 * aligned, as the driver's own) until gpu_arena_stop; gpu_free of a buffer
 * in it does nothing, gpu_arena_free frees it whole. Why: the driver gives
 * an allocation of a MiB or more whole 2 MiB pages, so a model's hundreds
 * of few-MiB matrices took up to ~1.5 MiB each beyond their bytes, which
 * no plan counted (the 30B shape peaked over its budget in session 36).
 * A buffer that does not fit is allocated by itself. One arena a device:
 * 0 (and nothing opened) if one is open already. */
int gpu_arena_open(gpu_dev *d, size_t bytes, bool *opened, char *err);
/* n bytes as gpu_alloc takes them from the arena (and gpu_mat_bytes counts them) */
static inline uint64_t gpu_up256(uint64_t n) { return (n + 255) & ~(uint64_t)255; }
void gpu_arena_stop(gpu_dev *d);
void gpu_arena_free(gpu_dev *d);
/* Copies in launch order on the stream; gpu_get waits for the copy (and
 * all work before it). src of gpu_put may be reused when it returns. */
int gpu_put(gpu_dev *d, CUdeviceptr dst, const void *src, size_t bytes, char *err);
int gpu_get(gpu_dev *d, void *dst, CUdeviceptr src, size_t bytes, char *err);
/* n copies from the device, then one wait: into pinned memory (gpu_host_alloc)
 * they are queued together, one round trip to the device for all of them;
 * into pageable memory the driver waits for each. */
int gpu_get_n(gpu_dev *d, int n, void *const *dst, const CUdeviceptr *src, const size_t *bytes, char *err);
/* Pinned (page-locked) host memory that copies reach by DMA in stream order. */
int gpu_host_alloc(gpu_dev *d, void **p, size_t bytes, const char *what, char *err);
void gpu_host_free(gpu_dev *d, void *p);
int gpu_zero(gpu_dev *d, CUdeviceptr p, size_t bytes, char *err);
/* Waits for the streams' work; a kernel's fault shows here. */
int gpu_sync(gpu_dev *d, char *err);
/* The copy stream beside the stream: gpu_copy_after makes what is put on
 * it next wait for all the stream holds so far; gpu_put_copy copies there
 * (src must stay as it is until the copy is done, unless it is pageable);
 * gpu_copy_mark (i 0 or 1) marks all the copy stream holds so far, and
 * gpu_wait_copy_mark makes the stream's next work wait for what mark i
 * last marked. */
int gpu_copy_after(gpu_dev *d, char *err);
int gpu_put_copy(gpu_dev *d, CUdeviceptr dst, const void *src, size_t bytes, char *err);
int gpu_copy_mark(gpu_dev *d, int i, char *err);
int gpu_wait_copy_mark(gpu_dev *d, int i, char *err);
int gpu_launch(gpu_dev *d, CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
               unsigned shmem, void **args, const char *what, char *err);

/* ---- CUDA graphs ----------------------------------------------------------
 * A decode step (the same launches at every position: the position is read
 * from device memory) is captured once and replayed with one call, which
 * takes the host out of the loop between kernels. On where the driver has
 * graphs (11.4 or later), unless $E0_GPU_GRAPH=0 or the profile is on (its
 * per-launch waits cannot be captured). */
bool gpu_graphs_on(const gpu_dev *d);
void gpu_set_graphs(gpu_dev *d, bool on); /* tests and bench; on only where the driver can */
/* Launches between begin and end are recorded, not run. end with keep
 * false (a launch in between failed) discards the recording and leaves
 * *out NULL; keep true makes it a graph to launch. */
int gpu_capture_begin(gpu_dev *d, char *err);
int gpu_capture_end(gpu_dev *d, bool keep, CUgraphExec *out, char *err);
int gpu_graph_launch(gpu_dev *d, CUgraphExec g, char *err);
void gpu_graph_free(gpu_dev *d, CUgraphExec g);

/* The format of a host matrix, or E0_EUNSUPPORTED naming what the GPU
 * kernels do not read (cols not a multiple of 32, an mlx group under 32,
 * 16-row panels, a ggml type without a kernel). */
int gpu_fmt_of(const e0_mat *m, gpu_fmt *f, char *err);
/* Device bytes gpu_mat_upload takes for m. */
uint64_t gpu_mat_bytes(const e0_mat *m);
/* Copies m into device memory (one allocation). */
int gpu_mat_upload(gpu_dev *d, const e0_mat *m, gpu_mat *out, const char *what, char *err);
/* Copies n matrices of one shape and format (the experts of a layer) into
 * one stacked allocation. */
int gpu_mat_upload_stack(gpu_dev *d, const e0_mat *const *ms, int n, gpu_mat *out,
                         const char *what, char *err);
/* The device form of m without its memory (w, s, b left 0), and the device
 * bytes of its weights and of its scales (and again of its biases), each
 * rounded up to 256: the parts of a slot of the VRAM expert cache. */
int gpu_mat_shape(const e0_mat *m, gpu_mat *out, uint64_t *wbytes, uint64_t *sbytes, char *err);
/* Copies m into part i of g (w + i * estride, s and b + i * sstride), in
 * stream order (m's memory may change when it returns), or with
 * copy_stream on the copy stream (gpu_put_copy: m's memory must stay as it
 * is until the copy is done, as a checkpoint's mapping does). */
int gpu_mat_put(gpu_dev *d, const gpu_mat *g, int64_t i, const e0_mat *m, bool copy_stream, char *err);
/* The reverse, asynchronous on the stream (or the copy stream): stacked
 * matrix i of g into the memory m views (pinned host memory, written when
 * the stream gets there). */
int gpu_mat_get(gpu_dev *d, const gpu_mat *g, int64_t i, const e0_mat *m, bool copy_stream, char *err);
/* Frees what gpu_mat_upload (n = 1) or gpu_mat_upload_stack (n parts) made. */
void gpu_mat_free(gpu_dev *d, gpu_mat *m, int n);

/* Batches of at least this many tokens take the tiled kernels (weights
 * read once per 64 tokens), smaller ones the vector kernels; $E0_GPU_TILE_T
 * overrides it (bench, tests: 0 forces tiles, a large value vectors). */
int gpu_tile_min_t(void);
void gpu_set_tile_min_t(int t); /* tests and bench: -1 goes back to the default */
/* y[t] = W x[t] for t < T (device f32 rows; x: [T, ldx], y: [T, ldy]). */
int gpu_mm(gpu_dev *d, const gpu_mat *W, CUdeviceptr x, int64_t ldx, CUdeviceptr y, int64_t ldy,
           int T, char *err);
/* The same for the pairs of the active experts of a MoE call (kernels.cu
 * mm_moe_body): up to max_act experts; input row p / k (by_pair false)
 * or p of x; output row p of y. The counts stay on the device; the pairs
 * an expert gets on average (T * k / max_act) choose the form as T does
 * for gpu_mm. */
int gpu_mmx(gpu_dev *d, const gpu_mat *W, int max_act, CUdeviceptr nact, CUdeviceptr exps,
            CUdeviceptr start, CUdeviceptr order, int k, bool by_pair, CUdeviceptr x, int64_t ldx,
            CUdeviceptr y, int64_t ldy, int T, char *err);

/* The fused forms. Each gives the bits of the separate calls it stands
 * for (the same sums in the same order), so a model computes the same
 * whether they are on or not; they fall back to the separate calls where
 * they do not apply (tiles, formats that differ, fusion off). */
/* y[i] = W[i] x for i < n <= 4 (gpu_mm each): one launch for each format among them. */
int gpu_mm_multi(gpu_dev *d, int n, const gpu_mat *const *W, CUdeviceptr x, int64_t ldx,
                 const CUdeviceptr *y, const int64_t *ldy, int T, char *err);
/* g[t] = silu(G x[t]) * (U x[t]): [T, G->rows] rows; u [T, U->rows] is
 * scratch for the separate form. */
int gpu_mm_glu(gpu_dev *d, const gpu_mat *G, const gpu_mat *U, CUdeviceptr x, int64_t ldx,
               CUdeviceptr g, CUdeviceptr u, int T, char *err);
/* The same over the pairs of a MoE call (gpu_mmx, by_pair false): g and u
 * [T * k, G->rows]. */
int gpu_mmx_glu(gpu_dev *d, const gpu_mat *G, const gpu_mat *U, int max_act, CUdeviceptr nact,
                CUdeviceptr exps, CUdeviceptr start, CUdeviceptr order, int k, CUdeviceptr x,
                int64_t ldx, CUdeviceptr g, CUdeviceptr u, int T, char *err);
/* g = silu(g) * u over n values. */
int gpu_swiglu(gpu_dev *d, CUdeviceptr g, CUdeviceptr u, long long n, char *err);

#endif
