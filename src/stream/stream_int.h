/* The inside of the streaming SwitchGLU (switchglu.h), shared by its
 * files, one way: experts.c (reading a bundle, computing an expert: what
 * every path uses), paths.c (the seed's staged, hot and whole-layer
 * paths), switchglu.c (exact, speculative loads, the dispatch of a call to
 * a path) and setup.c (building and freeing a stream, the memory-pressure
 * monitor). Nothing outside src/stream includes this. */
#ifndef E0_STREAM_STREAM_INT_H
#define E0_STREAM_STREAM_INT_H

#include "stream/switchglu.h"

#include "stream/iopool.h"
#include "stream/xcache.h"
#include "util/clock.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <time.h>

enum { SPEC_MAX = 256 }; /* speculative loads in flight, at most */
/* Reads in flight per whole-layer load, each over its own part of every
 * tensor: the disk gives more to several streams than to one
 * (docs/experiments.md section 12). */
enum { FL_PARTS = 4 };

/* A staged slot fill or a whole-layer read running on the prefetch pool. */
typedef struct {
    e0_stream *s;
    int layer;
    atomic_int busy;
    iopool_job node;
} bg_job;

typedef struct {
    /* staged decode: staged_n slots */
    int32_t *slot_exp;    /* expert held (valid when ready), written by the fill job */
    int32_t *slot_target; /* expert the pending fill writes */
    atomic_int *slot_ready;
    uint8_t *slot_buf;        /* [staged_n, bundle_bytes] */
    int32_t *pred, npred;     /* predicted set for the next call */
    int32_t *prev, nprev;     /* experts the last token routed to */
    int32_t *asm_set, nasm;   /* set the slots were last assembled for */
    int32_t *forced, nforced; /* tests: a prediction that overrides predict(), or -1 */
    bg_job fill;
    /* hot: decayed usage and a resident stack */
    float *usage;
    int64_t calls;
    int32_t *hot_exp;   /* [hot_cap], -1 empty */
    uint8_t *hot_buf;   /* NULL when not resident */
    uint64_t hot_stamp; /* last use, for the hot_window */
    /* full layer: where each expert's bytes sit in a layer buffer */
    bool contiguous; /* each range index is one span over all experts */
    size_t *reg;     /* [nr] region of range index i in the layer buffer */
    uint64_t *base;  /* [nr] file offset of expert 0's range i */
    size_t layer_bytes;
} layer_state;

/* The memory-pressure monitor (pressure_fn): a thread that watches the
 * memory left under the machine's and the cgroup's limits while a budget
 * sizes the cache, and gives cache slots back when it runs short. */
typedef struct {
    pthread_t th;
    bool running;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool stop;
    _Atomic uint64_t shrinks, grows; /* limit changes down / up */
} pressure_mon;

struct e0_stream {
    const e0_model *m;
    e0_engine_opts o;
    pressure_mon pm;
    int n_layers, E, H;
    /* the main layers: [0, n_main); layer n_main, when n_layers is one
     * more, is the MTP block's (weights.h e0_mtp), run by the draft after
     * the main pass, not by it: the next-layer guesses (speculative loads,
     * staged slots, whole-layer reads) stop at n_main */
    int n_main;
    xcache *xc;
    iopool *load, *pre;
    size_t bundle_bytes;  /* buffer stride of one bundle (XB_ALIGN multiple) */
    uint64_t bundle_data; /* expert bytes of the largest bundle */
    bool direct;          /* O_DIRECT reads: under a memory budget */
    xb_plan *plans;       /* [n_layers * E], MoE layers only */
    xb_order order;
    uint8_t *overflow; /* one bundle read outside the LRU */
    layer_state *ls;
    int hot_cap, hot_resident;
    uint64_t hot_clock;
    int last_moe, first_moe;
    /* whole-layer double buffer */
    uint8_t *fl_buf[2];
    int fl_layer[2]; /* layer held or being read, -1 none */
    bg_job fl_job[2][FL_PARTS];
    atomic_int fl_bad[2]; /* a part of the read into buffer b failed */
    e0_expert *fl_views;  /* [E]: the routed experts' views into a layer buffer */
    int32_t *npanel;      /* [E]: of the current call's pairs of each expert, how many (listed
                             first) take the panel arithmetic (stream_experts) */
    size_t fl_bytes;
    /* on-demand load jobs of the current layer */
    struct load_job {
        e0_stream *s;
        const xb_plan *plan;
        xentry *e;
        iopool_job node;
    } * ld;
    /* speculative loads on the prefetch pool (see spec_next) */
    struct spec_job {
        e0_stream *s;
        const xb_plan *plan;
        xentry *e;
        atomic_int busy; /* set by the engine thread, cleared by the job when done */
        iopool_job node;
    } spec[SPEC_MAX];
    uint8_t *spec_pending; /* [n_layers * E]: loaded speculatively for this layer's next step:
                              SPEC_LO, or SPEC_HI for a guess past the first k/2 that prefetch_k
                              0 made; engine thread */
    /* prefetch_k 0: whether the guesses past the first k/2 are made, from
     * how many of the last window's were routed to (spec_next) */
    bool spec_hi;
    uint32_t spec_hi_loads, spec_hi_used, spec_calls;
    /* whether the first k/2 guesses are made only on probing calls, from
     * how many of the last window's were routed to (spec_next) */
    bool spec_lo_off;
    uint32_t spec_lo_loads, spec_lo_used;
    uint8_t *touched;      /* [n_layers * E]: experts routed to since the last reset */
    /* counters: atomics, as I/O threads add bytes */
    atomic_uint_fast64_t bytes_read;
    stream_counters c;      /* the rest, engine thread only */
    float *tw;              /* parallel_experts: per-thread buffers */
    size_t tw_cap;          /* floats */
    pthread_mutex_t err_mu; /* guards io_err */
    char io_err[E0_ERR_MAX];
};

static const xb_plan *plan_of(const e0_stream *s, int layer, int e) {
    return &s->plans[(size_t)layer * (size_t)s->E + (size_t)e];
}

static inline bool in_set(const int32_t *set, int n, int32_t e) {
    for (int i = 0; i < n; i++)
        if (set[i] == e) return true;
    return false;
}

/* out[0..n): the n experts (n <= E <= 4096) with the largest logits, best
 * first, the lower id among equals. */
static inline void best_of(const float *logits, int E, int n, int32_t *out) {
    bool taken[4096] = {false};
    for (int c = 0; c < n; c++) {
        int best = -1;
        for (int e = 0; e < E; e++)
            if (!taken[e] && (best < 0 || logits[e] > logits[best])) best = e;
        taken[best] = true;
        out[c] = best;
    }
}

/* The experts of a call that go through the exact path after all: rest[i]
 * (nrest of them) with pairs rpairs[rstart[i] .. rstart[i+1]). */
typedef struct {
    int32_t *rest, *rstart, *rpairs;
    int nrest, rp;
} exact_rest;

/* Expert i of the call's grouping (stream_experts: ws->exps, ws->start,
 * ws->order) to the exact path's list. */
static inline void to_exact(exact_rest *r, const e0_scratch *ws, int i) {
    r->rest[r->nrest] = ws->exps[i];
    r->rstart[r->nrest++] = r->rp;
    for (int q = ws->start[i]; q < ws->start[i + 1]; q++)
        r->rpairs[r->rp++] = ws->order[q];
}

/* ---- experts.c: reading bundles, computing experts ------------------------ */

void note_io_error(e0_stream *s, const char *msg);
int read_bundle(e0_stream *s, const xb_plan *p, uint8_t *buf, char *err);
int fetch_bundle(e0_stream *s, int layer, int e, uint8_t *buf, char *err);
void run_expert(e0_stream *s, const e0_expert *x, const float *in, const int32_t *pairs,
                       int n, int k, int np, float *eo, e0_scratch *ws);
bool parallel_experts(e0_stream *s, const e0_expert *experts, xentry *const *ent,
                             int layer, const int32_t *exps, const int32_t *start, int n,
                             const int32_t *pairs, const float *in, int k, float *eo, int *rc);
void resident_experts(e0_stream *s, const e0_expert *experts, const int32_t *exps,
                             const int32_t *start, int n, const int32_t *pairs, const float *in,
                             int k, float *eo, e0_scratch *ws);

/* ---- paths.c: the seed's paths -------------------------------------------- */

void bg_wait(bg_job *j);
void stage(e0_stream *s, int layer);
void predict(e0_stream *s, int layer, const float *x);
int hot_refresh(e0_stream *s, int layer, int n_hot, char *err);
void layer_views(const e0_stream *s, int layer, int e, const uint8_t *buf, e0_expert *v);
bool full_applies(const e0_stream *s, int layer);
int layer_buffer(e0_stream *s, int layer, bool prefill, uint8_t **out, char *err);
void staged_experts(e0_stream *s, int layer, const float *x, float *w, int k, int n, float *eo,
                    e0_scratch *ws, exact_rest *r);
int hot_experts(e0_stream *s, int layer, const float *x, bool decode, int k, int n, float *eo,
                e0_scratch *ws, exact_rest *r, char *err);

#endif
