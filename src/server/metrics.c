/* Prometheus text format 0.0.4: "# HELP", "# TYPE", then one sample per
 * line; counters end in _total, a histogram has cumulative _bucket lines
 * with an le label, _sum and _count. */
#include "server/metrics.h"

#include "util/sbuf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const double BUCKETS[10] = {0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 120};

static const double BATCH_LE[] = {1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64};
static const double TTFT_LE[] = {0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 120};
static const double ITL_LE[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5};
#define N_LE(a) ((int)(sizeof a / sizeof *a))
_Static_assert(N_LE(BATCH_LE) <= SRV_HISTO_MAX && N_LE(TTFT_LE) <= SRV_HISTO_MAX && N_LE(ITL_LE) <= SRV_HISTO_MAX,
               "srv_histo holds SRV_HISTO_MAX buckets");

void srv_metrics_init(srv_metrics *m) {
    memset(m, 0, sizeof *m);
    pthread_mutex_init(&m->mu, NULL);
    m->batch = (srv_histo){.le = BATCH_LE, .n = N_LE(BATCH_LE)};
    m->prefill_seqs = (srv_histo){.le = BATCH_LE, .n = N_LE(BATCH_LE)};
    m->ttft = (srv_histo){.le = TTFT_LE, .n = N_LE(TTFT_LE)};
    m->itl = (srv_histo){.le = ITL_LE, .n = N_LE(ITL_LE)};
}

/* m->mu held */
static void histo_add(srv_histo *h, double v) {
    h->total++;
    h->sum += v;
    for (int b = 0; b < h->n; b++)
        if (v <= h->le[b]) {
            h->count[b]++;
            break;
        }
}

void srv_metrics_prefix(srv_metrics *m, uint64_t hits, uint64_t misses, uint64_t tokens, uint64_t entries,
                        uint64_t bytes, uint64_t budget, uint64_t evictions) {
    pthread_mutex_lock(&m->mu);
    m->pc_hits = hits;
    m->pc_misses = misses;
    m->pc_tokens = tokens;
    m->pc_entries = entries;
    m->pc_bytes = bytes;
    m->pc_budget = budget;
    m->pc_evictions = evictions;
    pthread_mutex_unlock(&m->mu);
}

void srv_metrics_slots(srv_metrics *m, int slots) {
    pthread_mutex_lock(&m->mu);
    m->slots = slots;
    pthread_mutex_unlock(&m->mu);
}

void srv_metrics_batch(srv_metrics *m, int batch, double seconds) {
    pthread_mutex_lock(&m->mu);
    m->batch_last = batch;
    histo_add(&m->batch, batch);
    if (batch >= 1 && batch <= E0_MAX_SEQS) {
        m->batch_passes[batch]++;
        m->batch_s[batch] += seconds;
    }
    pthread_mutex_unlock(&m->mu);
}

void srv_metrics_prefill_pass(srv_metrics *m, int seqs) {
    pthread_mutex_lock(&m->mu);
    histo_add(&m->prefill_seqs, seqs);
    pthread_mutex_unlock(&m->mu);
}

void srv_metrics_token(srv_metrics *m, int first, double seconds) {
    pthread_mutex_lock(&m->mu);
    histo_add(first ? &m->ttft : &m->itl, seconds);
    pthread_mutex_unlock(&m->mu);
}

void srv_metrics_free(srv_metrics *m) { pthread_mutex_destroy(&m->mu); }

void srv_metrics_request(srv_metrics *m, const char *endpoint, int status) {
    pthread_mutex_lock(&m->mu);
    int i = 0;
    while (i < m->n_rows && (m->rows[i].status != status || strcmp(m->rows[i].endpoint, endpoint))) i++;
    if (i == m->n_rows && i < SRV_METRIC_ROWS) {
        m->rows[i].endpoint = endpoint;
        m->rows[i].status = status;
        m->n_rows++;
    }
    if (i < m->n_rows) m->rows[i].n++;
    pthread_mutex_unlock(&m->mu);
}

void srv_metrics_generation(srv_metrics *m, int32_t prompt, int32_t cached, int32_t completion, int cancelled,
                            double seconds) {
    pthread_mutex_lock(&m->mu);
    m->prompt_tokens += (uint64_t)prompt;
    m->cached_tokens += (uint64_t)cached;
    m->completion_tokens += (uint64_t)completion;
    m->cancelled += cancelled != 0;
    m->duration_sum += seconds;
    m->duration_n++;
    for (int b = 0; b < 10; b++)
        if (seconds <= BUCKETS[b]) {
            m->duration_le[b]++;
            break;
        }
    pthread_mutex_unlock(&m->mu);
}

void srv_metrics_engine(srv_metrics *m, const e0_stats *st) {
    pthread_mutex_lock(&m->mu);
    m->engine = *st;
    pthread_mutex_unlock(&m->mu);
}

static void histo(sbuf *b, const char *name, const char *help, const srv_histo *h) {
    sb_printf(b, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    uint64_t cum = 0;
    for (int i = 0; i < h->n; i++) {
        cum += h->count[i];
        sb_printf(b, "%s_bucket{le=\"%g\"} %llu\n", name, h->le[i], (unsigned long long)cum);
    }
    sb_printf(b, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.6f\n%s_count %llu\n", name, (unsigned long long)h->total, name,
              h->sum, name, (unsigned long long)h->total);
}

static void metric(sbuf *b, const char *name, const char *type, const char *help, double v) {
    sb_printf(b, "# HELP %s %s\n# TYPE %s %s\n%s %.17g\n", name, help, name, type, name, v);
}

/* Resident set size now, from /proc/self/statm (0 if unreadable). */
static double rss_now(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long long size = 0, res = 0;
    if (f) {
        if (fscanf(f, "%llu %llu", &size, &res) != 2) res = 0;
        fclose(f);
    }
    return (double)res * (double)sysconf(_SC_PAGESIZE);
}

void srv_metrics_grammar(srv_metrics *m, const e0_gen_result *r, double compile_s) {
    pthread_mutex_lock(&m->mu);
    m->grammar_compile_s += compile_s;
    m->grammar_requests++;
    m->grammar_tokens += (uint64_t)r->completion_tokens;
    m->grammar_masks += (uint64_t)r->masks;
    m->grammar_s += r->mask_s;
    m->grammar_decode_s += r->decode_s;
    pthread_mutex_unlock(&m->mu);
}

/* Speculative decoding with the MTP block (--mtp): each verify pass keeps
 * one id, or two when its draft stands, per sequence (cli_tokens_per_pass's
 * count). */
static void mtp_metrics(sbuf *b, const e0_stats *st) {
    const uint64_t kept = st->mtp_drafts - st->mtp_rejected;
    const uint64_t seq_passes = st->decode_tokens + st->mtp_rejected - st->mtp_drafts;
    metric(b, "edge0_mtp_drafts_total", "counter", "Tokens drafted by the MTP block and verified.",
           (double)st->mtp_drafts);
    metric(b, "edge0_mtp_accepted_total", "counter", "Drafted tokens the model kept.", (double)kept);
    metric(b, "edge0_mtp_acceptance_ratio", "gauge", "Kept drafts over verified drafts since start.",
           st->mtp_drafts ? (double)kept / (double)st->mtp_drafts : 0.0);
    metric(b, "edge0_mtp_seconds_total", "counter", "Time the MTP block ran (drafts and their catch-up).",
           st->mtp_s);
    metric(b, "edge0_decode_tokens_per_pass", "gauge",
           "Tokens a sequence's decode pass hands out (above 1 with MTP drafts kept).",
           seq_passes ? (double)st->decode_tokens / (double)seq_passes : 0.0);
    metric(b, "edge0_decode_expert_bytes_read_per_token", "gauge",
           "Expert bytes read from the checkpoint by decode passes and drafts, per decoded token.",
           st->decode_tokens ? (double)st->decode_bytes_read / (double)st->decode_tokens : 0.0);
}

char *srv_metrics_text(srv_metrics *m, int queue_depth, int running, int queue_capacity, size_t *len) {
    sbuf b = {0};
    pthread_mutex_lock(&m->mu);
    const e0_stats *st = &m->engine;
    sb_printf(&b, "# HELP edge0_requests_total HTTP requests answered, by endpoint and status (499: the client left).\n"
                  "# TYPE edge0_requests_total counter\n");
    for (int i = 0; i < m->n_rows; i++)
        sb_printf(&b, "edge0_requests_total{endpoint=\"%s\",status=\"%d\"} %llu\n", m->rows[i].endpoint, m->rows[i].status,
                  (unsigned long long)m->rows[i].n);
    metric(&b, "edge0_prompt_tokens_total", "counter", "Prompt tokens of finished generation requests.",
           (double)m->prompt_tokens);
    metric(&b, "edge0_cached_prompt_tokens_total", "counter",
           "Prompt tokens reused from the session's KV cache instead of evaluated.", (double)m->cached_tokens);
    metric(&b, "edge0_completion_tokens_total", "counter", "Generated tokens.", (double)m->completion_tokens);
    metric(&b, "edge0_requests_cancelled_total", "counter", "Generation requests cancelled by a client that left.",
           (double)m->cancelled);
    sb_printf(&b, "# HELP edge0_request_duration_seconds Time from arrival to the last token, generation requests.\n"
                  "# TYPE edge0_request_duration_seconds histogram\n");
    uint64_t cum = 0;
    for (int i = 0; i < 10; i++) {
        cum += m->duration_le[i];
        sb_printf(&b, "edge0_request_duration_seconds_bucket{le=\"%g\"} %llu\n", BUCKETS[i], (unsigned long long)cum);
    }
    sb_printf(&b, "edge0_request_duration_seconds_bucket{le=\"+Inf\"} %llu\n", (unsigned long long)m->duration_n);
    sb_printf(&b, "edge0_request_duration_seconds_sum %.6f\nedge0_request_duration_seconds_count %llu\n", m->duration_sum,
              (unsigned long long)m->duration_n);
    metric(&b, "edge0_queue_depth", "gauge", "Requests waiting for the engine.", queue_depth);
    metric(&b, "edge0_queue_capacity", "gauge", "Waiting requests the server accepts before answering 503.",
           queue_capacity);
    metric(&b, "edge0_requests_running", "gauge", "Requests running in the engine's slots (its active slots).",
           running);
    metric(&b, "edge0_slots", "gauge", "Slots (sessions) the scheduler steps together (--parallel).", m->slots);
    metric(&b, "edge0_prefix_cache_hits_total", "counter",
           "Prompts that resumed from a cached session snapshot (--cache-ram).", (double)m->pc_hits);
    metric(&b, "edge0_prefix_cache_misses_total", "counter", "Prompts the prefix cache held no usable prefix of.",
           (double)m->pc_misses);
    metric(&b, "edge0_prefix_cache_tokens_total", "counter",
           "Prompt positions restored from the prefix cache instead of evaluated.", (double)m->pc_tokens);
    metric(&b, "edge0_prefix_cache_entries", "gauge", "Session snapshots the prefix cache holds.",
           (double)m->pc_entries);
    metric(&b, "edge0_prefix_cache_bytes", "gauge", "Bytes of the snapshots held.", (double)m->pc_bytes);
    metric(&b, "edge0_prefix_cache_budget_bytes", "gauge", "The prefix cache's budget (--cache-ram; 0: off).",
           (double)m->pc_budget);
    metric(&b, "edge0_prefix_cache_evictions_total", "counter", "Snapshots dropped to make room.",
           (double)m->pc_evictions);
    metric(&b, "edge0_batch_size", "gauge", "Sequences in the last decode pass.", m->batch_last);
    histo(&b, "edge0_batch_size_per_step", "Decode passes by the number of sequences stepped together.", &m->batch);
    sb_printf(&b, "# HELP edge0_decode_passes_total Decode passes by the number of sequences stepped together.\n"
                  "# TYPE edge0_decode_passes_total counter\n");
    for (int n = 1; n <= E0_MAX_SEQS; n++)
        if (m->batch_passes[n])
            sb_printf(&b, "edge0_decode_passes_total{batch=\"%d\"} %llu\n", n, (unsigned long long)m->batch_passes[n]);
    sb_printf(&b, "# HELP edge0_decode_pass_seconds_total Time in decode passes by the number of sequences stepped together.\n"
                  "# TYPE edge0_decode_pass_seconds_total counter\n");
    for (int n = 1; n <= E0_MAX_SEQS; n++)
        if (m->batch_passes[n]) sb_printf(&b, "edge0_decode_pass_seconds_total{batch=\"%d\"} %.6f\n", n, m->batch_s[n]);
    histo(&b, "edge0_prefill_seqs_per_pass", "Prefill passes by the number of sequences whose prompt chunks they carried.",
          &m->prefill_seqs);
    histo(&b, "edge0_time_to_first_token_seconds", "Time from a request's arrival to its first generated token.",
          &m->ttft);
    histo(&b, "edge0_inter_token_latency_seconds", "Time between consecutive generated tokens of a request.",
          &m->itl);
    metric(&b, "edge0_prefill_tokens_total", "counter", "Prompt tokens evaluated.", (double)st->prefill_tokens);
    metric(&b, "edge0_prefill_seconds_total", "counter", "Time spent evaluating prompts.", st->prefill_s);
    metric(&b, "edge0_prefill_tokens_per_second", "gauge", "Prefill speed since start.",
           st->prefill_s > 0 ? (double)st->prefill_tokens / st->prefill_s : 0.0);
    metric(&b, "edge0_decode_tokens_total", "counter", "Tokens evaluated one at a time.", (double)st->decode_tokens);
    metric(&b, "edge0_decode_seconds_total", "counter", "Time spent in decode steps.", st->decode_s);
    metric(&b, "edge0_decode_tokens_per_second", "gauge", "Decode speed since start.",
           st->decode_s > 0 ? (double)st->decode_tokens / st->decode_s : 0.0);
    mtp_metrics(&b, st);
    metric(&b, "edge0_grammar_requests_total", "counter",
           "Requests decoded under a grammar (response_format json, tool_choice required or named).",
           (double)m->grammar_requests);
    metric(&b, "edge0_grammar_tokens_total", "counter", "Tokens generated under a grammar.", (double)m->grammar_tokens);
    metric(&b, "edge0_grammar_masks_total", "counter",
           "Full token masks computed (the sampled token broke the grammar).", (double)m->grammar_masks);
    metric(&b, "edge0_grammar_seconds_total", "counter",
           "Time spent constraining tokens (checks and masks), part of the decode time.", m->grammar_s);
    metric(&b, "edge0_grammar_compile_seconds_total", "counter",
           "Time compiling schemas and tool definitions into grammars (patterns included).", m->grammar_compile_s);
    metric(&b, "edge0_grammar_decode_seconds_total", "counter", "Decode time of the requests with a grammar.",
           m->grammar_decode_s);
    metric(&b, "edge0_grammar_seconds_per_token", "gauge", "Constraining time per token under a grammar.",
           m->grammar_tokens ? m->grammar_s / (double)m->grammar_tokens : 0.0);
    metric(&b, "edge0_expert_cache_hits_total", "counter", "Expert lookups served by the LRU cache.",
           (double)st->lru_hits);
    metric(&b, "edge0_expert_cache_misses_total", "counter", "Expert lookups that had to read the checkpoint.",
           (double)st->lru_misses);
    metric(&b, "edge0_expert_cache_slots", "gauge", "Expert cache capacity in bundles.", st->cache_slots);
    metric(&b, "edge0_expert_cache_limit", "gauge",
           "Expert cache slots usable now (memory pressure gives slots back).", st->cache_limit);
    metric(&b, "edge0_memory_pressure_shrinks_total", "counter",
           "Times memory pressure lowered the expert cache's limit.", (double)st->pressure_shrinks);
    metric(&b, "edge0_memory_pressure_grows_total", "counter",
           "Times the expert cache's limit came back up after memory pressure.",
           (double)st->pressure_grows);
    metric(&b, "edge0_expert_bytes_read_total", "counter", "Expert bytes read from the checkpoint.",
           (double)st->bytes_read);
    metric(&b, "edge0_expert_bytes_touched_total", "counter", "Expert bytes the kernels read, from any source.",
           (double)st->bytes_touched);
    metric(&b, "edge0_peak_rss_bytes", "gauge", "Peak resident set size.", (double)st->peak_rss);
    pthread_mutex_unlock(&m->mu);
    metric(&b, "edge0_rss_bytes", "gauge", "Resident set size now.", rss_now());
    if (b.oom) {
        free(b.p);
        return NULL;
    }
    *len = b.n;
    return b.p;
}
