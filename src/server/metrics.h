/* Server counters and their Prometheus text exposition (GET /metrics).
 *
 * Threads: every function may be called from any thread; one mutex guards
 * all fields. The engine statistics are a snapshot that only the engine
 * thread takes (e0_engine_stats is not safe against a running eval), after
 * each request and about once a second while one runs. */
#ifndef E0_SERVER_METRICS_H
#define E0_SERVER_METRICS_H

#include "edge0.h"

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#define SRV_METRIC_ROWS 96
#define SRV_HISTO_MAX 16

/* A histogram: counts per bucket (not cumulative; the exposition sums them). */
typedef struct {
    const double *le; /* [n] upper bounds, increasing (static) */
    int n;
    uint64_t count[SRV_HISTO_MAX]; /* [n] */
    uint64_t total;
    double sum;
} srv_histo;

typedef struct {
    pthread_mutex_t mu;
    struct {
        const char *endpoint; /* static */
        int status;
        uint64_t n;
    } rows[SRV_METRIC_ROWS]; /* requests by (endpoint, status) */
    int n_rows;
    uint64_t prompt_tokens, cached_tokens, completion_tokens, cancelled;
    double duration_sum;      /* seconds, generation requests */
    uint64_t duration_le[10]; /* histogram buckets (cumulative at exposition) */
    uint64_t duration_n;
    e0_stats engine;          /* snapshot */
    /* constrained decoding (requests with a grammar) */
    uint64_t grammar_requests, grammar_tokens, grammar_masks;
    double grammar_s, grammar_decode_s; /* time constraining tokens; the decode time of those requests */
    double grammar_compile_s;           /* time compiling their schemas into grammars */
    /* continuous batching (engine.h): decode passes by their batch size,
     * prefill passes by the sequences they carried (merged chunks), time to
     * first token and between tokens of each request */
    int slots, batch_last;
    srv_histo batch, prefill_seqs, ttft, itl;
    /* decode passes and their time by batch size [1, E0_MAX_SEQS]: the
     * throughput of N sequences stepped together, apart from the passes a
     * prompt's prefill left short of N */
    uint64_t batch_passes[E0_MAX_SEQS + 1];
    double batch_s[E0_MAX_SEQS + 1];
    /* the prefix cache (prefix.h), a snapshot; budget 0: no cache */
    uint64_t pc_hits, pc_misses, pc_tokens, pc_entries, pc_bytes, pc_budget, pc_evictions;
} srv_metrics;

void srv_metrics_init(srv_metrics *m);
void srv_metrics_free(srv_metrics *m);
void srv_metrics_request(srv_metrics *m, const char *endpoint, int status);
/* A finished generation request. */
void srv_metrics_generation(srv_metrics *m, int32_t prompt, int32_t cached, int32_t completion, int cancelled,
                            double seconds);
void srv_metrics_engine(srv_metrics *m, const e0_stats *st);
/* A finished request with a grammar: its tokens, full masks, and the time
 * spent constraining them next to its decode time (e0_gen_result). */
void srv_metrics_grammar(srv_metrics *m, const e0_gen_result *r, double compile_s);
/* The scheduler's slots (the gauge edge0_slots). */
void srv_metrics_slots(srv_metrics *m, int slots);
/* The prefix cache's counters (prefix_counters), as they stand. */
void srv_metrics_prefix(srv_metrics *m, uint64_t hits, uint64_t misses, uint64_t tokens, uint64_t entries,
                        uint64_t bytes, uint64_t budget, uint64_t evictions);
/* A decode pass of `batch` sequences that took `seconds`. */
void srv_metrics_batch(srv_metrics *m, int batch, double seconds);
/* A prefill pass (one forward pass, however paused) over chunks of `seqs` sequences. */
void srv_metrics_prefill_pass(srv_metrics *m, int seqs);
/* A generated token: first of its request (seconds since arrival: TTFT),
 * else seconds since the request's previous token (inter-token latency). */
void srv_metrics_token(srv_metrics *m, int first, double seconds);
/* The exposition text, malloc'd. queue_depth / running (active slots) / capacity come from the queue. */
char *srv_metrics_text(srv_metrics *m, int queue_depth, int running, int queue_capacity, size_t *len);

#endif
