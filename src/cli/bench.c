/* edge0 bench MODEL: speed against this machine's own limits, measured in
 * the same run. Absolute times drift on shared machines; ratios to the
 * memory and disk bandwidth measured a moment earlier do not (as much).
 *
 *  1. DRAM read bandwidth: every compute thread streams its share of a
 *     1 GiB buffer; best of 3.
 *  2. Checkpoint read bandwidth from disk: up to 2 GiB of the largest
 *     shard read as the engine reads experts under a budget, O_DIRECT
 *     with 8 threads (4 MiB preads); where O_DIRECT is refused, buffered
 *     after dropping the shard's pages (posix_fadvise DONTNEED).
 *  3. Cold: the checkpoint's pages dropped, prefill N ids, decode D tokens.
 *  4. Warm: every shard read once into the page cache, the same again.
 *
 * Ratios: decode warm = expert+dense bytes touched per token / time per
 * token / DRAM bandwidth; decode cold = expert bytes read per token / time
 * per token / disk bandwidth; whole-layer reads / expert bytes of the
 * layers loaded. */
#include "cli/cli.h"
#include "cli/opts.h"

#include <cjson/cJSON.h>
#include <fcntl.h>
#include <immintrin.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *HELP =
    "usage: edge0 bench MODEL [--prefill N] [--decode N] [--skip-cold] [--skip-warm] [--warm-up] [--json]\n"
    "                         [--stats] [--trace FILE] [--replay FILE] [--batch LIST]\n"
    "                         [--mtp-accept P]\n"
    "\n"
    "Measures DRAM and checkpoint read bandwidth, then prefill (default 512 ids)\n"
    "and decode (default 64 tokens), cold (checkpoint pages dropped) and warm\n"
    "(checkpoint in the page cache), and reports every speed as a ratio to the\n"
    "bandwidth measured in the same run. Where the experts are in memory (--io\n"
    "load or mmap), the warm run first makes one untimed pass of the same lengths\n"
    "in its session and resets it, as llama-bench warms up: a process's and a\n"
    "session's first pass pay allocations and page faults that a running server\n"
    "does not. The cold run and runs through the expert cache have no warm-up,\n"
    "unless --warm-up: then every timed run, cold or warm, first makes that\n"
    "untimed pass (other ids than the timed ones), as llama-bench does before\n"
    "each test; a cold run then times the second pass after the pages were\n"
    "dropped, with whatever the expert caches (RAM, VRAM) kept from the first.\n"
    "Its sessions hold --prefill + --decode + 1 positions, as llama-bench sizes\n"
    "its context, and a --mem-budget plans for sessions of that size, not for\n"
    "the 4096 positions of chat's default.\n"
    "\n"
    "With --stats (and the expert cache, i.e. pread I/O as under --mem-budget),\n"
    "each phase records its (layer, expert) cache requests and replays the\n"
    "decode's through LRU, decayed-count LFU, ARC and the offline optimum\n"
    "(Belady) at 10%, 30% and 50% of all experts, the prefill warming each.\n"
    "--trace FILE writes the last phase's requests: a '# layers L experts E\n"
    "decode_from F top_k K' line, then 'layer expert' per request, each decode\n"
    "token's after a '# token T' line (T = 0, 1, ...).\n"
    "\n"
    "--replay FILE routes every decode token by a recorded trace instead of the\n"
    "router: --trace's format (scripts/route_convert.py makes one from a published\n"
    "capture, e.g. bench/routes/real/), for this model's layers, experts and\n"
    "top-k. Decode token t takes the trace's token t mod its length (the prefill\n"
    "routes by the router); a token's layers the trace does not name, too. The\n"
    "model still computes: the trace's experts, weighted with the router's own\n"
    "probabilities for them, renormalised over the k as the model does. The\n"
    "cache, the reads and the timing are then those of that routing; speculative\n"
    "loads and the router-reading cache policies (router, recent: the default)\n"
    "still see the router's logits (--opt prefetch_cap=0 --opt cache_policy=lru\n"
    "leave them out). Under --batch, sequence i of N starts at the trace's token\n"
    "i * length / N. CPU only.\n"
    "\n"
    "--batch LIST (e.g. 1,2,4,8) adds batched decode, the server's continuous\n"
    "batching without the server: for each N, N sequences each prefill their\n"
    "own --prefill ids, then decode --decode tokens together, one forward pass\n"
    "(e0_session_eval_batch) per step; reported as generated tokens/s of all N\n"
    "(llama-batched-bench's S_TG, for scripts/peer_batched.sh) and against N = 1,\n"
    "with the expert bytes read from the checkpoint per generated token (under a\n"
    "memory budget: what one read serving several sequences saves).\n"
    "With only --batch wanted, add --skip-cold --skip-warm.\n"
    "\n"
    "Decode drafts with the checkpoint's MTP block when the engine has it (--mtp on,\n"
    "below; the default, auto, once it measured drafting to pay): greedy, the\n"
    "same ids as without; the report adds the drafts' acceptance, the tokens per\n"
    "decode pass and the expert bytes read per decoded token. --mtp-accept P (a\n"
    "test hook for random-weight checkpoints, whose drafts are nearly never right;\n"
    "needs the block: edge0 synth --mtp writes one) forces the acceptance: each\n"
    "phase first decodes without drafts twice (the answer key; the second run is\n"
    "reported: it finds the expert cache as the first left it, as the drafting run\n"
    "does), then with drafts that are the key's next id with probability P (a\n"
    "seeded coin) and a wrong id otherwise, and checks that the ids are the key's:\n"
    "the speed at acceptance P of a block that costs what this one costs. In the\n"
    "cold phase the key's runs warm what the drafting run reads. It drafts as\n"
    "--mtp on does, or, given --mtp auto, as auto decides at that acceptance.\n"
    "\n";

/* ---- DRAM bandwidth ---------------------------------------------------- */

typedef struct {
    const uint8_t *p;
    size_t n;
    uint64_t sink;
} rd_arg;

__attribute__((target("avx2"))) static uint64_t read_avx2(const uint8_t *p, size_t n) {
    __m256i a = _mm256_setzero_si256(), b = a, c = a, d = a;
    for (size_t i = 0; i + 128 <= n; i += 128) {
        a = _mm256_xor_si256(a, _mm256_load_si256((const __m256i *)(p + i)));
        b = _mm256_xor_si256(b, _mm256_load_si256((const __m256i *)(p + i + 32)));
        c = _mm256_xor_si256(c, _mm256_load_si256((const __m256i *)(p + i + 64)));
        d = _mm256_xor_si256(d, _mm256_load_si256((const __m256i *)(p + i + 96)));
    }
    a = _mm256_xor_si256(_mm256_xor_si256(a, b), _mm256_xor_si256(c, d));
    return (uint64_t)_mm256_extract_epi64(a, 0) ^ (uint64_t)_mm256_extract_epi64(a, 3);
}

static uint64_t read_scalar(const uint8_t *p, size_t n) {
    uint64_t s0 = 0, s1 = 0, v0, v1;
    for (size_t i = 0; i + 16 <= n; i += 16) {
        memcpy(&v0, p + i, 8);
        memcpy(&v1, p + i + 8, 8);
        s0 ^= v0;
        s1 ^= v1;
    }
    return s0 ^ s1;
}

static void *rd_thread(void *arg) {
    rd_arg *a = arg;
    a->sink = __builtin_cpu_supports("avx2") ? read_avx2(a->p, a->n) : read_scalar(a->p, a->n);
    return NULL;
}

/* Called before the engine opens: its 1 GiB buffer is not in the budget, and
 * allocated beside a budgeted cache in a capped cgroup it set off the
 * memory-pressure monitor, whose shrink and later regrowth (page faults)
 * then fell into the timed runs (docs/experiments.md, session 31, issue 40). */
static double dram_bandwidth(int threads) {
    const size_t N = 1u << 30;
    uint8_t *buf = aligned_alloc(4096, N);
    if (!buf) return 0;
    memset(buf, 1, N); /* fault every page in */
    double best = 0;
    for (int rep = 0; rep < 3; rep++) {
        pthread_t th[64];
        rd_arg a[64];
        double t0 = now_s();
        for (int i = 0; i < threads; i++) {
            a[i] = (rd_arg){buf + N / (size_t)threads * (size_t)i, N / (size_t)threads, 0};
            pthread_create(&th[i], NULL, rd_thread, &a[i]);
        }
        for (int i = 0; i < threads; i++)
            pthread_join(th[i], NULL);
        double bw = (double)N / (now_s() - t0);
        if (bw > best) best = bw;
    }
    free(buf);
    return best;
}

/* ---- disk bandwidth ------------------------------------------------------ */

typedef struct {
    int fd;
    off_t start, len, step;
    uint64_t got;
} dk_arg;

enum { DK_THREADS = 8, DK_CHUNK = 4 << 20 };

static void *dk_thread(void *arg) {
    dk_arg *a = arg;
    enum { CH = DK_CHUNK };
    char *buf = aligned_alloc(4096, CH); /* O_DIRECT: aligned buffer, offsets and sizes */
    for (off_t o = a->start; buf && o < a->len; o += a->step) {
        ssize_t r = pread(a->fd, buf, CH, o);
        if (r <= 0) break;
        a->got += (uint64_t)r;
    }
    free(buf);
    return NULL;
}

static double disk_bandwidth(e0_engine *e) {
    const char *path = NULL;
    off_t best = 0;
    for (int32_t i = 0; i < e0_engine_files(e); i++) {
        struct stat st;
        if (stat(e0_engine_file(e, i), &st) == 0 && st.st_size > best)
            best = st.st_size, path = e0_engine_file(e, i);
    }
    if (!path) return 0;
    /* 4 MiB preads at queue depth 8 read 1.3-2.0x what 16 MiB buffered
     * ones at depth 4 did on the project's VMs (docs/experiments.md
     * section 75): the probe is the limit the decode's O_DIRECT reads meet */
    int fd = open(path, O_RDONLY | O_DIRECT);
    if (fd < 0) fd = open(path, O_RDONLY);
    if (fd < 0) return 0;
    off_t len = best < (off_t)(2ll << 30) ? best : (off_t)(2ll << 30);
    posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    enum { T = DK_THREADS };
    pthread_t th[T];
    dk_arg a[T];
    double t0 = now_s();
    for (int i = 0; i < T; i++) {
        a[i] = (dk_arg){fd, (off_t)i * DK_CHUNK, len, (off_t)T * DK_CHUNK, 0};
        pthread_create(&th[i], NULL, dk_thread, &a[i]);
    }
    uint64_t got = 0;
    for (int i = 0; i < T; i++) {
        pthread_join(th[i], NULL);
        got += a[i].got;
    }
    double bw = (double)got / (now_s() - t0);
    posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    close(fd);
    return bw;
}

/* ---- one phase: prefill then decode ------------------------------------- */

typedef struct {
    double prefill_s, decode_s;
    e0_stats p, d;   /* stats of the prefill and of the decode */
    double distinct; /* mean distinct experts per MoE layer during decode */
    int moe_layers;
    bool traced;     /* the cache's requests were recorded */
    size_t decode_from; /* trace index of the first decode request */
    size_t *tok_at;     /* [decode + 1] trace index of each decode token's first request */
    e0_routes *routes;  /* --replay's trace (the phase's caller owns it), or NULL */
    int n_decode;
    /* --mtp-accept: the acceptance forced (< 0: none), and the decode time of
     * the run without drafts that gave the key */
    double accept, key_decode_s;
    char mtp_note[256]; /* --mtp auto's decision after the decode (e0_engine_mtp_note) */
    e0_cache_study study[3]; /* at STUDY_SHARES of all experts */
    int policy;              /* the engine cache's own (E0_CACHE_*) */
} phase;

static const double STUDY_SHARES[3] = {0.10, 0.30, 0.50};

/* The prompts' ids: n pseudo-random ids in [0, vocab), the generator's
 * state *h carried from one call to the next. */
#define BENCH_SEED 0x9e3779b97f4a7c15ull
static void random_ids(uint64_t *h, int32_t *ids, int n, int32_t vocab) {
    for (int i = 0; i < n; i++) {
        *h ^= *h >> 31, *h *= 0xbf58476d1ce4e5b9ull, *h ^= *h >> 29;
        ids[i] = (int32_t)(*h % (uint64_t)vocab);
    }
}

/* One untimed pass of n_prefill ids (other than the timed ones) and up to
 * two decode steps in s, then s reset: what the timed pass then finds is a
 * running server's slot (bench's HELP). */
static int warm_up(e0_session *s, int32_t *ids, int n_prefill, int n_decode, float *logits,
                   int32_t vocab, char *err) {
    uint64_t h = ~BENCH_SEED;
    random_ids(&h, ids, n_prefill, vocab);
    int rc = e0_session_eval(s, ids, (size_t)n_prefill, E0_LOGITS_LAST, logits, err);
    for (int k = 0; k < 2 && k < n_decode && !rc; k++) {
        const int32_t id = (int32_t)e0_argmax(logits, (size_t)vocab);
        rc = e0_session_eval(s, &id, 1, E0_LOGITS_LAST, logits, err);
    }
    if (!rc) e0_session_reset(s);
    return rc;
}

/* cli_greedy's on_id: each decoded id's first trace index (an id a draft
 * gave shares its pass's requests with the one before it), and progress. */
typedef struct {
    e0_engine *e;
    phase *ph;
    double t0;
    int n;
} decode_mark;

static void mark_token(void *user, int k, int32_t id) {
    (void)id;
    decode_mark *m = user;
    if (m->ph->tok_at) m->ph->tok_at[k] = e0_engine_trace(m->e, NULL);
    if (isatty(2) && k) fprintf(stderr, "\r  decode %d/%d, %.2f tok/s ", k, m->n, k / (now_s() - m->t0));
}

/* --mtp-accept's key: the ids greedy decoding gives without drafts, in a
 * session that does not draft, warmed up as the drafting one is (warm).
 * It runs twice and the second run's decode time goes to ph->key_decode_s:
 * the drafting run decodes the same ids at the same positions, so it finds
 * the expert cache as the first run left it, and so does the second. */
static int decode_key(e0_engine *e, phase *ph, int32_t *ids, int n_prefill, int n_decode, bool warm,
                      float *logits, int32_t *key, char *err) {
    e0_model_info info;
    e0_engine_info(e, &info);
    e0_session_opts so;
    e0_session_opts_default(&so);
    so.n_ctx = n_prefill + n_decode + 1;
    so.mtp = 0;
    e0_session *s;
    int rc = e0_session_new(e, &so, &s, err);
    if (rc) return rc;
    if (warm) rc = warm_up(s, ids, n_prefill, n_decode, logits, info.vocab_size, err);
    for (int run = 0; !rc && run < 2; run++) {
        uint64_t h = BENCH_SEED;
        random_ids(&h, ids, n_prefill, info.vocab_size); /* the phase's prompt */
        e0_session_reset(s);
        if ((rc = e0_session_eval(s, ids, (size_t)n_prefill, E0_LOGITS_LAST, logits, err))) break;
        const double t0 = now_s();
        rc = cli_greedy(s, logits, info.vocab_size, n_decode, key, NULL, NULL, NULL, err);
        ph->key_decode_s = now_s() - t0;
    }
    e0_session_free(s);
    return rc;
}

static int run_phase(e0_engine *e, int n_prefill, int n_decode, bool trace, bool warm,
                     phase *out, char *err) {
    e0_model_info info;
    e0_engine_info(e, &info);
    out->traced = false;
    out->policy = e0_engine_cache_policy(e);
    e0_session_opts so;
    e0_session_opts_default(&so);
    so.n_ctx = n_prefill + n_decode + 1;
    e0_session *s;
    int rc = e0_session_new(e, &so, &s, err);
    if (rc) return rc;
    int32_t *ids = malloc((size_t)n_prefill * sizeof *ids);
    float *logits = malloc((size_t)info.vocab_size * sizeof *logits);
    int32_t *dec = malloc(2 * (size_t)n_decode * sizeof *dec), *key = dec + n_decode;
    cli_mtp_force force = {.key = key, .accept = out->accept, .rng = BENCH_SEED};
    if (!ids || !logits || !dec) {
        rc = E0_ENOMEM;
        snprintf(err, E0_ERR_MAX, "out of memory");
        goto out;
    }
    if (warm && (rc = warm_up(s, ids, n_prefill, n_decode, logits, info.vocab_size, err))) goto out;
    if (trace) { /* at most every token's top-k in every layer */
        const size_t cap = (size_t)(n_prefill + n_decode) * (size_t)info.n_layers * (size_t)info.top_k;
        rc = e0_engine_trace_start(e, cap, (size_t)(n_prefill + n_decode), err);
        if (rc == E0_EUNSUPPORTED)
            fprintf(stderr, "edge0 bench: no cache policy study: %s\n", err);
        else if (rc)
            goto out;
        out->traced = rc == 0;
        rc = 0;
    }
    out->n_decode = n_decode;
    free(out->tok_at);
    out->tok_at = out->traced ? calloc((size_t)n_decode + 1, sizeof *out->tok_at) : NULL;
    uint64_t h = BENCH_SEED;
    random_ids(&h, ids, n_prefill, info.vocab_size);
    if (out->accept >= 0 && (rc = decode_key(e, out, ids, n_prefill, n_decode, warm, logits, key, err))) goto out;
    e0_engine_stats_reset(e);
    double t0 = now_s();
    if ((rc = e0_session_eval(s, ids, (size_t)n_prefill, E0_LOGITS_LAST, logits, err))) goto out;
    out->prefill_s = now_s() - t0;
    out->decode_from = e0_engine_trace(e, NULL);
    if (out->routes && (rc = e0_session_replay(s, out->routes, 0, err))) goto out;
    e0_engine_stats(e, &out->p);
    e0_engine_stats_reset(e);
    t0 = now_s();
    decode_mark mark = {e, out, t0, n_decode};
    /* greedy, drafting with the MTP block when the engine has it */
    if ((rc = cli_greedy(s, logits, info.vocab_size, n_decode, dec, out->accept >= 0 ? &force : NULL, mark_token,
                         &mark, err)))
        goto out;
    if (isatty(2)) fprintf(stderr, "\r\033[K");
    if (out->tok_at) out->tok_at[n_decode] = e0_engine_trace(e, NULL);
    out->decode_s = now_s() - t0;
    if (out->accept >= 0 && memcmp(dec, key, (size_t)n_decode * sizeof *dec)) {
        snprintf(err, E0_ERR_MAX, "--mtp-accept: the ids decoded with drafts differ from those without (a bug)");
        rc = E0_EINVAL;
        goto out;
    }
    e0_engine_stats(e, &out->d);
    snprintf(out->mtp_note, sizeof out->mtp_note, "%s", e0_engine_mtp_note(e));
    out->distinct = 0;
    out->moe_layers = 0;
    for (int l = 0; l < info.n_layers; l++) {
        int d = e0_engine_distinct_experts(e, l);
        if (d) {
            out->distinct += d;
            out->moe_layers++;
        }
    }
    if (out->moe_layers) out->distinct /= out->moe_layers;
    const int32_t all = info.n_layers * info.n_experts;
    for (int i = 0; out->traced && i < 3; i++) {
        const int32_t slots = (int32_t)(STUDY_SHARES[i] * all + 0.5);
        if ((rc = e0_engine_cache_study(e, slots, out->decode_from, &out->study[i], err))) goto out;
    }
out:
    free(ids);
    free(logits);
    free(dec);
    e0_session_free(s);
    return rc;
}

static double per_tok(uint64_t bytes, uint64_t tokens) {
    return tokens ? (double)bytes / (double)tokens : 0;
}

static void report_json(cJSON *root, const char *name, const phase *ph, int n_prefill, int n_decode,
                        double ptok, double dtok, double io_frac, double touched, double read,
                        double warm_ratio, double cold_ratio, uint64_t lk) {
    cJSON *o = cJSON_AddObjectToObject(root, name);
    cJSON_AddNumberToObject(o, "prefill_tokens", n_prefill);
    cJSON_AddNumberToObject(o, "prefill_tok_s", ptok);
    cJSON_AddNumberToObject(o, "prefill_io_wait_fraction", io_frac);
    cJSON_AddNumberToObject(o, "prefill_bytes_read", (double)ph->p.bytes_read);
    cJSON_AddNumberToObject(o, "prefill_whole_layer_loads", (double)ph->p.full_layers);
    cJSON_AddNumberToObject(o, "decode_tokens", n_decode);
    cJSON_AddNumberToObject(o, "decode_tok_s", dtok);
    cJSON_AddNumberToObject(o, "decode_bytes_touched_per_token", touched);
    cJSON_AddNumberToObject(o, "decode_bytes_read_per_token", read);
    cJSON_AddNumberToObject(o, "decode_touched_bw_over_dram_bw", warm_ratio);
    cJSON_AddNumberToObject(o, "decode_read_bw_over_disk_bw", cold_ratio);
    cJSON_AddNumberToObject(o, "decode_lru_hit_rate",
                            lk ? (double)ph->d.lru_hits / (double)lk : 0);
    cJSON_AddNumberToObject(o, "decode_distinct_experts_per_layer", ph->distinct);
    cJSON_AddNumberToObject(o, "decode_io_wait_s", ph->d.io_wait_s);
    cJSON_AddNumberToObject(o, "decode_spec_loads", (double)ph->d.spec_loads);
    cJSON_AddNumberToObject(o, "decode_spec_used", (double)ph->d.spec_used);
    if (ph->d.mtp_drafts) { /* speculative decoding with the MTP block */
        cJSON_AddNumberToObject(o, "decode_mtp_drafts", (double)ph->d.mtp_drafts);
        cJSON_AddNumberToObject(o, "decode_mtp_acceptance",
                                (double)(ph->d.mtp_drafts - ph->d.mtp_rejected) / (double)ph->d.mtp_drafts);
        cJSON_AddNumberToObject(o, "decode_tokens_per_pass", cli_tokens_per_pass(&ph->d));
        cJSON_AddNumberToObject(o, "decode_mtp_s", ph->d.mtp_s);
    }
    if (ph->accept >= 0) {
        cJSON_AddNumberToObject(o, "mtp_accept_forced", ph->accept);
        cJSON_AddNumberToObject(o, "decode_tok_s_without_drafts", ph->n_decode / ph->key_decode_s);
    }
    if (ph->d.cache_slots) { /* what memory pressure left usable (stream/setup.c) */
        cJSON_AddNumberToObject(o, "cache_slots", ph->d.cache_slots);
        cJSON_AddNumberToObject(o, "cache_limit_decode_start", ph->p.cache_limit);
        cJSON_AddNumberToObject(o, "cache_limit_decode_end", ph->d.cache_limit);
        cJSON_AddNumberToObject(o, "pressure_shrinks", (double)ph->d.pressure_shrinks);
        cJSON_AddNumberToObject(o, "pressure_grows", (double)ph->d.pressure_grows);
    }
    if (ph->d.vram_slots) {
        const uint64_t vk = ph->d.vram_hits + ph->d.vram_misses;
        cJSON_AddNumberToObject(o, "decode_vram_hit_rate", vk ? (double)ph->d.vram_hits / (double)vk : 0);
        cJSON_AddNumberToObject(o, "decode_pcie_bytes_per_token", per_tok(ph->d.pcie_bytes, ph->d.decode_tokens));
        cJSON_AddNumberToObject(o, "prefill_pcie_bytes", (double)ph->p.pcie_bytes);
        cJSON_AddNumberToObject(o, "pcie_gbs", ph->d.pcie_gbs);
        cJSON_AddNumberToObject(o, "decode_prefetched_per_token", per_tok(ph->d.vram_prefetched, ph->d.decode_tokens));
        cJSON_AddNumberToObject(o, "decode_host_experts_per_token", per_tok(ph->d.vram_host_experts, ph->d.decode_tokens));
        cJSON_AddNumberToObject(o, "decode_prefetch_used", ph->d.vram_prefetched ? (double)ph->d.vram_prefetch_used / (double)ph->d.vram_prefetched : 0);
        if (ph->d.host_cache_slots) {
            const uint64_t hk = ph->d.host_cache_hits + ph->d.host_cache_misses;
            cJSON_AddNumberToObject(o, "decode_host_cache_hit_rate", hk ? (double)ph->d.host_cache_hits / (double)hk : 0);
            cJSON_AddNumberToObject(o, "decode_disk_bytes_per_token", per_tok(ph->d.disk_bytes, ph->d.decode_tokens));
            cJSON_AddNumberToObject(o, "prefill_disk_bytes", (double)ph->p.disk_bytes);
        }
    }
    if (ph->d.gpu_token_bytes) {
        cJSON_AddNumberToObject(o, "decode_gpu_bytes_per_token", (double)ph->d.gpu_token_bytes);
        cJSON_AddNumberToObject(o, "gpu_memory_copy_gbs", ph->d.hbm_gbs);
        cJSON_AddNumberToObject(o, "decode_gpu_bw_over_memory_bw",
                                ph->d.hbm_gbs > 0 ? (double)ph->d.gpu_token_bytes * dtok / 1e9 / ph->d.hbm_gbs : 0);
    }
    if (ph->traced) {
        cJSON_AddStringToObject(o, "cache_policy", e0_cache_policy_name(ph->policy));
        cJSON *a = cJSON_AddArrayToObject(o, "cache_policy_study");
        for (int i = 0; i < 3; i++) {
            const e0_cache_study *cs = &ph->study[i];
            cJSON *r = cJSON_CreateObject();
            cJSON_AddNumberToObject(r, "share_of_experts", STUDY_SHARES[i]);
            cJSON_AddNumberToObject(r, "slots", cs->slots);
            cJSON_AddNumberToObject(r, "requests", (double)cs->requests);
            for (int p = 0; p < E0_POLICIES; p++)
                if ((p != E0_POLICY_ROUTER && p != E0_POLICY_RECENT) || cs->router_replayed)
                    cJSON_AddNumberToObject(r, e0_policy_name((e0_policy)p),
                                            cs->requests ? (double)cs->hits[p] / (double)cs->requests
                                                         : 0);
            cJSON_AddItemToArray(a, r);
        }
    }
}

static void report(const char *name, const phase *ph, int n_prefill, int n_decode, double dram,
                   double disk, uint64_t dense_bytes, bool mmap_io, bool json, cJSON *root) {
    const double ptok = n_prefill / ph->prefill_s, dtok = n_decode / ph->decode_s;
    const double touched = per_tok(ph->d.bytes_touched, ph->d.decode_tokens) + (double)dense_bytes;
    const double read = per_tok(ph->d.bytes_read, ph->d.decode_tokens);
    const double warm_ratio = touched * dtok / dram, cold_ratio = read * dtok / disk;
    const double io_frac = ph->p.io_wait_s / ph->prefill_s;
    const uint64_t lk = ph->d.lru_hits + ph->d.lru_misses;
    if (json) {
        report_json(root, name, ph, n_prefill, n_decode, ptok, dtok, io_frac, touched, read, warm_ratio,
                    cold_ratio, lk);
        return;
    }
    printf("%s:\n", name);
    printf("  prefill %d tokens: %.2f tok/s, I/O wait %.0f%% of the time, read %.1f MiB", n_prefill,
           ptok, 100 * io_frac, (double)ph->p.bytes_read / (1 << 20));
    if (ph->p.full_layers)
        printf(", %llu whole-layer loads", (unsigned long long)ph->p.full_layers);
    if (ph->p.vram_slots)
        printf(", %.1f MiB copied into the VRAM expert cache", (double)ph->p.pcie_bytes / (1 << 20));
    if (ph->p.host_cache_slots)
        printf(", %.1f MiB read into the host expert cache", (double)ph->p.disk_bytes / (1 << 20));
    printf("\n  decode %d tokens: %.2f tok/s, %.0f ms/token\n", n_decode, dtok, 1e3 / dtok);
    if (ph->d.gpu_token_bytes) {
        const double tb = (double)ph->d.gpu_token_bytes;
        printf("    the GPU reads %.1f MiB/token (dense weights + top-k experts a layer) -> %.1f GB/s = %.1f%% "
               "of the device memory's %.0f GB/s (copy, measured at start)\n",
               tb / (1 << 20), tb * dtok / 1e9, ph->d.hbm_gbs > 0 ? 100 * tb * dtok / 1e9 / ph->d.hbm_gbs : 0.0,
               ph->d.hbm_gbs);
    } else {
        printf("    touched %.1f MiB/token (experts + resident weights) -> %.2f GB/s = %.0f%% of DRAM "
               "bandwidth\n",
               touched / (1 << 20), touched * dtok / 1e9, 100 * warm_ratio);
    }
    if (!ph->d.gpu_token_bytes) { /* the CPU's streaming (the GPU reads the checkpoint's mapping) */
        if (mmap_io)
            printf("    the checkpoint is read through the mapping (--io mmap: page faults) or at open\n"
                   "    (--io load), so reads are not counted here\n");
        else
            printf("    read %.1f MiB/token from the checkpoint -> %.2f GB/s = %.0f%% of disk bandwidth\n",
                   read / (1 << 20), read * dtok / 1e9, 100 * cold_ratio);
        printf("    cache hit rate %.1f%%, I/O wait %.2f s, distinct experts per layer %.1f\n",
               lk ? 100.0 * (double)ph->d.lru_hits / (double)lk : 0.0, ph->d.io_wait_s, ph->distinct);
    }
    if (ph->d.vram_slots) {
        const uint64_t vk = ph->d.vram_hits + ph->d.vram_misses;
        const double pb = per_tok(ph->d.pcie_bytes, ph->d.decode_tokens);
        printf("    VRAM expert cache (%d slots): hit rate %.1f%%, %.1f MiB/token over PCIe (%.1f staged by the device) -> "
               "%.2f GB/s = %.0f%% of the %.1f GB/s measured at start; routing read back %.2f s, copies %.2f s\n",
               ph->d.vram_slots, vk ? 100.0 * (double)ph->d.vram_hits / (double)vk : 0.0, pb / (1 << 20),
               per_tok(ph->d.pcie_staged_bytes, ph->d.decode_tokens) / (1 << 20),
               pb * dtok / 1e9, ph->d.pcie_gbs > 0 ? 100 * pb * dtok / 1e9 / ph->d.pcie_gbs : 0.0,
               ph->d.pcie_gbs, ph->d.vram_wait_s, ph->d.vram_copy_s);
        if (ph->d.vram_host_experts || ph->d.vram_host_timed)
            printf("    misses computed by the host instead of copied in: %.1f/token, %.2f s; up to %d a MoE call%s\n",
                   per_tok(ph->d.vram_host_experts, ph->d.decode_tokens), ph->d.vram_host_s, ph->d.vram_host_max,
                   ph->d.vram_host_timed ? " (timed while decoding)" : "");
        if (ph->d.vram_prefetched)
            printf("    next layer's experts guessed and copied ahead: %.1f/token, %.0f%% of them routed to\n",
                   per_tok(ph->d.vram_prefetched, ph->d.decode_tokens),
                   100.0 * (double)ph->d.vram_prefetch_used / (double)ph->d.vram_prefetched);
    }
    if (ph->d.host_cache_slots) {
        const uint64_t hk = ph->d.host_cache_hits + ph->d.host_cache_misses;
        const double db = per_tok(ph->d.disk_bytes, ph->d.decode_tokens);
        printf("    host expert cache (%d slots, pinned): hit rate %.1f%%, read %.1f MiB/token from the checkpoint -> "
               "%.2f GB/s = %.0f%% of disk bandwidth; reads %.2f s; %.1f experts/token given up by the VRAM kept\n",
               ph->d.host_cache_slots, hk ? 100.0 * (double)ph->d.host_cache_hits / (double)hk : 0.0, db / (1 << 20),
               db * dtok / 1e9, disk > 0 ? 100 * db * dtok / disk : 0.0, ph->d.disk_read_s,
               per_tok(ph->d.host_cache_kept, ph->d.decode_tokens));
    }
    if (ph->d.pressure_shrinks || ph->d.pressure_grows)
        printf("    memory pressure: %d of %d cache slots usable at the decode's start, %d at its end "
               "(the limit went down %llu times and up %llu times since open)\n",
               ph->p.cache_limit, ph->d.cache_slots, ph->d.cache_limit,
               (unsigned long long)ph->d.pressure_shrinks, (unsigned long long)ph->d.pressure_grows);
    if (ph->d.mtp_drafts) {
        const uint64_t kept = ph->d.mtp_drafts - ph->d.mtp_rejected;
        printf("    MTP drafts: %llu verified, %llu kept (acceptance %.1f%%%s), %.2f tokens per pass, the "
               "block's time %.3f s; expert bytes read per decoded token %.1f MiB\n",
               (unsigned long long)ph->d.mtp_drafts, (unsigned long long)kept,
               100.0 * (double)kept / (double)ph->d.mtp_drafts, ph->accept >= 0 ? ", forced" : "",
               cli_tokens_per_pass(&ph->d), ph->d.mtp_s, read / (1 << 20));
    }
    if (*ph->mtp_note) printf("    %s\n", ph->mtp_note);
    if (ph->accept >= 0)
        printf("    without drafts (the key's second run): %.2f tok/s; with them %.2f tok/s = %.2fx, the same "
               "ids\n",
               ph->n_decode / ph->key_decode_s, dtok, dtok * ph->key_decode_s / ph->n_decode);
    if (ph->d.spec_loads)
        printf("    speculative loads %.1f per token, %.1f%% of them routed to\n",
               (double)ph->d.spec_loads / n_decode,
               100.0 * (double)ph->d.spec_used / (double)ph->d.spec_loads);
    if (ph->traced) {
        printf("    cache policies on this decode's %llu requests (simulated, the prefill warms each; "
               "hit rates; this run's cache: %s):\n",
               (unsigned long long)ph->study[0].requests, e0_cache_policy_name(ph->policy));
        for (int i = 0; i < 3; i++) {
            const e0_cache_study *cs = &ph->study[i];
            printf("      %2.0f%% of experts (%5d slots):", 100 * STUDY_SHARES[i], cs->slots);
            for (int p = 0; p < E0_POLICIES; p++)
                if ((p != E0_POLICY_ROUTER && p != E0_POLICY_RECENT) || cs->router_replayed)
                    printf(" %s %5.1f%%", e0_policy_name((e0_policy)p),
                           cs->requests ? 100.0 * (double)cs->hits[p] / (double)cs->requests : 0.0);
                else
                    printf(" %s n/a", e0_policy_name((e0_policy)p));
            printf("\n");
        }
        if (ph->study[0].dropped)
            printf("      (%llu requests past the trace's capacity were not replayed)\n",
                   (unsigned long long)ph->study[0].dropped);
    }
}

/* The phase's requests as text, for replaying other policies offline and
 * for --replay (io/routes.h): each decode token's after a '# token' line. */
static int write_trace(e0_engine *e, const char *path, const phase *ph, char *err) {
    e0_model_info info;
    e0_engine_info(e, &info);
    const uint32_t *keys;
    const size_t n = e0_engine_trace(e, &keys);
    FILE *f = fopen(path, "w");
    if (!f) {
        snprintf(err, E0_ERR_MAX, "%s: cannot create the trace file", path);
        return E0_EIO;
    }
    fprintf(f, "# layers %d experts %d decode_from %zu top_k %d\n", info.n_layers, info.n_experts,
            ph->decode_from, info.top_k);
    for (size_t i = 0, t = 0; i < n; i++) {
        for (; ph->tok_at && (int)t < ph->n_decode && ph->tok_at[t] == i; t++)
            fprintf(f, "# token %zu\n", t);
        fprintf(f, "%u %u\n", keys[i] / (uint32_t)info.n_experts, keys[i] % (uint32_t)info.n_experts);
    }
    if (fclose(f) != 0) {
        snprintf(err, E0_ERR_MAX, "%s: write failed", path);
        return E0_EIO;
    }
    return 0;
}

/* ---- batched decode (--batch) ------------------------------------------ */

enum { BATCH_LEVELS = 16, BATCH_SEQS_MAX = 256 };

/* N sequences, each prefilled with its own n_prefill pseudo-random ids (one
 * e0_session_eval each), then n_decode greedy steps of all N in one
 * e0_session_eval_batch pass each: the prefill and decode times. */
static int run_batched(e0_engine *e, const e0_routes *routes, int N, int n_prefill, int n_decode,
                       double *prefill_s, double *decode_s, double *read, char *err) {
    e0_model_info info;
    e0_engine_info(e, &info);
    e0_session_opts so;
    e0_session_opts_default(&so);
    so.n_ctx = n_prefill + n_decode + 1;
    so.mtp = 0; /* batched steps do not draft: no MTP block work in them */
    e0_session **ss = calloc((size_t)N, sizeof *ss);
    int32_t *ids = malloc((size_t)(n_prefill > N ? n_prefill : N) * sizeof *ids);
    float *logits = malloc((size_t)N * (size_t)info.vocab_size * sizeof *logits);
    int rc = 0;
    if (!ss || !ids || !logits) {
        rc = E0_ENOMEM;
        snprintf(err, E0_ERR_MAX, "out of memory for %d sequences", N);
        goto out;
    }
    uint64_t h = BENCH_SEED;
    *prefill_s = 0;
    for (int i = 0; i < N; i++) {
        if ((rc = e0_session_new(e, &so, &ss[i], err))) goto out;
        random_ids(&h, ids, n_prefill, info.vocab_size); /* each sequence its own prompt */
        const double t0 = now_s();
        rc = e0_session_eval(ss[i], ids, (size_t)n_prefill, E0_LOGITS_LAST,
                             logits + (size_t)i * (size_t)info.vocab_size, err);
        *prefill_s += now_s() - t0;
        /* --replay: sequence i of N from the trace's token i * length / N */
        const int32_t nt = e0_routes_tokens(routes);
        if (!rc && routes)
            rc = e0_session_replay(ss[i], routes, (int32_t)((int64_t)i * nt / N), err);
        if (rc) goto out;
    }
    e0_engine_stats_reset(e);
    const double t0 = now_s();
    for (int k = 0; k < n_decode; k++) {
        for (int i = 0; i < N; i++) /* greedy */
            ids[i] = (int32_t)e0_argmax(logits + (size_t)i * (size_t)info.vocab_size,
                                             (size_t)info.vocab_size);
        if ((rc = e0_session_eval_batch(ss, ids, (size_t)N, logits, err))) goto out;
        if (isatty(2))
            fprintf(stderr, "\r  batch %d: decode %d/%d, %.2f tok/s ", N, k + 1, n_decode,
                    (double)N * (k + 1) / (now_s() - t0));
    }
    if (isatty(2)) fprintf(stderr, "\r\033[K");
    *decode_s = now_s() - t0;
    e0_stats st;
    e0_engine_stats(e, &st);
    *read = (double)st.bytes_read / ((double)N * n_decode); /* expert bytes per generated token */
out:
    for (int i = 0; ss && i < N; i++) e0_session_free(ss[i]);
    free(ss);
    free(ids);
    free(logits);
    return rc;
}

/* --batch's list: 1..BATCH_LEVELS values in [1, BATCH_SEQS_MAX], ascending. */
static int parse_batch_list(const char *v, int *lv, int *n) {
    int32_t *ids;
    size_t k;
    if (cli_parse_ids("--batch", v, &ids, &k)) return -1;
    int rc = 0;
    if (k > BATCH_LEVELS) {
        cli_error("--batch: at most %d levels", BATCH_LEVELS);
        rc = -1;
    }
    for (size_t i = 0; !rc && i < k; i++) {
        if (ids[i] < 1 || ids[i] > BATCH_SEQS_MAX || (i && ids[i] <= ids[i - 1])) {
            cli_error("--batch: '%s' is not an ascending list of sequence counts in [1, %d]", v,
                      BATCH_SEQS_MAX);
            rc = -1;
        }
        lv[i] = ids[i];
    }
    *n = (int)k;
    free(ids);
    return rc;
}

static void report_batched(const int *lv, int nl, const double *pp, const double *tg, const double *rd,
                           int n_prefill, int n_decode, bool json, cJSON *root) {
    cJSON *a = json ? cJSON_AddArrayToObject(root, "batched") : NULL;
    if (!json)
        printf("batched decode (%d-id prompt per sequence, then %d steps):\n"
               "  seqs  prefill tok/s  decode agg tok/s  step ms  x N=1  MiB read/token\n",
               n_prefill, n_decode);
    for (int i = 0; i < nl; i++) {
        const double agg = (double)lv[i] * n_decode / tg[i], base = (double)lv[0] * n_decode / tg[0];
        const double ptok = (double)lv[i] * n_prefill / pp[i];
        if (json) {
            cJSON *r = cJSON_CreateObject();
            cJSON_AddNumberToObject(r, "seqs", lv[i]);
            cJSON_AddNumberToObject(r, "prefill_tok_s", ptok);
            cJSON_AddNumberToObject(r, "decode_agg_tok_s", agg);
            cJSON_AddNumberToObject(r, "step_ms", 1e3 * tg[i] / n_decode);
            cJSON_AddNumberToObject(r, "decode_bytes_read_per_token", rd[i]);
            cJSON_AddItemToArray(a, r);
        } else {
            printf("  %4d  %13.2f  %16.2f  %7.1f  %5.2fx  %14.1f%s\n", lv[i], ptok, agg,
                   1e3 * tg[i] / n_decode, agg / base, rd[i] / (1 << 20),
                   lv[0] == 1 ? "" : " (x: of the first level)");
        }
    }
}

/* What bench runs on: the model and the machine's bandwidths, as JSON
 * fields or two lines. */
static void report_setup(e0_engine *e, const char *model, const e0_model_info *info, int threads,
                         e0_kv_type kv, double dram, double disk, bool json, cJSON *root) {
    if (json) {
        cJSON_AddStringToObject(root, "model", model);
        cJSON_AddStringToObject(root, "family", info->family);
        cJSON_AddStringToObject(root, "io", e0_engine_io_note(e));
        cJSON_AddNumberToObject(root, "threads", threads);
        cJSON_AddStringToObject(root, "kernels", e0_kernels_name());
        cJSON_AddStringToObject(root, "kv_type", e0_kv_name(kv));
        cJSON_AddNumberToObject(root, "dram_bw", dram);
        cJSON_AddNumberToObject(root, "disk_bw", disk);
        cJSON_AddStringToObject(root, "expert_reads", e0_uring_on() ? "io_uring" : "pread");
    } else {
        printf("model %s (%s, %s): %.2f GiB of weights, %.2f GiB of experts; %s\n", model,
               info->family, info->layout, (double)info->weight_bytes / (1u << 30),
               (double)info->expert_bytes / (1u << 30), e0_engine_io_note(e));
        printf("machine: DRAM read %.1f GB/s (%d threads), checkpoint read from disk %.2f GB/s "
               "(expert reads: %s); kernels %s, KV cache %s\n",
               dram / 1e9, threads, disk / 1e9, e0_uring_on() ? "io_uring" : "pread",
               e0_kernels_name(), e0_kv_name(kv));
    }
}

/* Batched decode at each level (after an untimed warm-up), reported. */
static int bench_batched(e0_engine *e, const e0_routes *routes, const int *levels, int n_levels,
                         int n_prefill, int n_decode, bool json, cJSON *root, char *err) {
    double pp[BATCH_LEVELS], tg[BATCH_LEVELS], rd[BATCH_LEVELS];
    /* untimed: the first passes' page faults (scratch, KV cache) and caches */
    fprintf(stderr, "edge0 bench: batched decode, warming up...\n");
    if (run_batched(e, routes, levels[0], 8, 4, &pp[0], &tg[0], &rd[0], err)) return -1;
    for (int i = 0; i < n_levels; i++) {
        fprintf(stderr, "edge0 bench: batched decode, %d sequences...\n", levels[i]);
        if (run_batched(e, routes, levels[i], n_prefill, n_decode, &pp[i], &tg[i], &rd[i], err))
            return -1;
    }
    report_batched(levels, n_levels, pp, tg, rd, n_prefill, n_decode, json, root);
    return 0;
}

/* --batch: the levels and their count. */
typedef struct {
    int *lv, *n;
} batch_list;

static int opt_batch(void *ptr, const char *name, const char *v) {
    const batch_list *b = ptr;
    return parse_batch_list(v, b->lv, b->n);
}

/* --replay FILE for e's model, said in the report. */
static int load_replay(e0_engine *e, const char *path, e0_routes **out, bool json, cJSON *root,
                       char *err) {
    int rc = e0_routes_load(e, path, out, err);
    if (rc) return rc;
    const int32_t n = e0_routes_tokens(*out);
    if (json) {
        cJSON_AddStringToObject(root, "replay", path);
        cJSON_AddNumberToObject(root, "replay_tokens", n);
    } else {
        printf("routing: replayed from %s (%d decode tokens: decode token t takes the trace's "
               "token t mod %d; the router's weights for its experts)\n",
               path, n, n);
    }
    return 0;
}

/* --mtp-accept P: the probability, and the engine's MTP block asked for
 * (--mtp on unless --mtp auto was given, whose decision is then measured
 * at P: a clear error when the checkpoint has none). -1 on a bad one. */
static int parse_accept(const char *v, cli_engine *ce, double *out) {
    char *end;
    *out = strtod(v, &end);
    if (end == v || *end || !(*out >= 0 && *out <= 1)) {
        cli_error("--mtp-accept: '%s' is not a probability in [0, 1]", v);
        return -1;
    }
    if (ce->eo.mtp == E0_MTP_OFF) {
        cli_error("--mtp-accept forces the acceptance of MTP drafts: it needs --mtp on or auto");
        return -1;
    }
    if (!ce->mtp_set) ce->eo.mtp = E0_MTP_ON;
    return 0;
}

static void print_json(const cJSON *root) {
    char *s = cJSON_Print(root);
    if (s) puts(s);
    free(s);
}

/* --warm-up, said beside the machine's figures */
static void report_warm_up(bool on, bool json, cJSON *root) {
    if (json)
        cJSON_AddBoolToObject(root, "warm_up_every_run", on);
    else if (on)
        printf("each timed run after an untimed pass of other ids in its session (--warm-up)\n");
}

int cmd_bench(int argc, char **argv) {
    const char *model = NULL, *trace_path = NULL, *replay_path = NULL, *accept_arg = NULL;
    long n_prefill = 512, n_decode = 64;
    bool json = false, skip_cold = false, skip_warm = false, warm_up_all = false;
    int levels[BATCH_LEVELS], n_levels = 0;
    cli_engine ce;
    cli_engine_init(&ce);
    batch_list batch = {levels, &n_levels};
    const cli_opt opts[] = {
        CLI_OPT("--prefill", CLI_LONG, &n_prefill, .lo = 1, .hi = 1 << 20),
        CLI_OPT("--decode", CLI_LONG, &n_decode, .lo = 1, .hi = 1 << 20),
        CLI_OPT("--trace", CLI_STR, &trace_path, .need = "a file name"),
        CLI_OPT("--replay", CLI_STR, &replay_path, .need = "a routing trace file"),
        CLI_OPT("--batch", CLI_FN, &batch, .fn = opt_batch),
        CLI_OPT("--json", CLI_SET, &json),
        CLI_OPT("--skip-cold", CLI_SET, &skip_cold),
        CLI_OPT("--skip-warm", CLI_SET, &skip_warm),
        CLI_OPT("--warm-up", CLI_SET, &warm_up_all),
        CLI_OPT("--mtp-accept", CLI_STR, &accept_arg, .need = "a probability in [0, 1]"),
        {0},
    };
    const cli_args args = {.cmd = "bench", .help = HELP, .ce = &ce, .opts = opts, .pos = &model};
    const int parsed = cli_parse(&args, argc, argv);
    if (parsed) return parsed == 1 ? 0 : 2;
    if (!model) return cli_error("bench needs MODEL (see edge0 bench --help)"), 2;
    double accept = -1; /* --mtp-accept */
    if (cli_engine_finish(&ce) || (accept_arg && parse_accept(accept_arg, &ce, &accept))) return 2;
    /* a budget keeps room for the sessions bench opens (the largest batch's, each of
     * n_prefill + n_decode + 1 positions, as llama-bench sizes its context), not for
     * one default 4096-position session (after cli_engine_finish, which starts the
     * options from their defaults) */
    if (n_levels) ce.eo.n_seqs = levels[n_levels - 1];
    ce.eo.n_ctx = (int32_t)(n_prefill + n_decode + 1);
    char err[E0_ERR_MAX];
    const int threads = ce.eo.n_threads > 0 ? ce.eo.n_threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
    fprintf(stderr, "edge0 bench: measuring DRAM bandwidth (%d threads)...\n", threads);
    const double dram = dram_bandwidth(threads < 64 ? threads : 64);
    e0_engine *e = NULL;
    if (e0_engine_open(&e, model, &ce.eo, err) != E0_OK) {
        cli_error("%s", err);
        return 1;
    }
    cli_engine_opened(&ce, e);
    e0_model_info info;
    e0_engine_info(e, &info);
    fprintf(stderr, "edge0 bench: measuring checkpoint read bandwidth...\n");
    const double disk = disk_bandwidth(e);
    const uint64_t dense = info.weight_bytes - info.expert_bytes;
    /* resident weights touched per decode token: all but the experts and the embedding table
     * (one row of it); an estimate that counts the lm_head and every dense projection once */
    const uint64_t dense_touched =
        dense - (uint64_t)info.vocab_size * (uint64_t)info.hidden_size / 2;
    const bool loaded = strncmp(e0_engine_io_note(e), "io load", 7) == 0;
    const bool mmap_io = loaded || strncmp(e0_engine_io_note(e), "io mmap", 7) == 0;
    cJSON *root = cJSON_CreateObject();
    report_setup(e, model, &info, threads, ce.eo.kv_type, dram, disk, json, root);
    report_warm_up(warm_up_all, json, root);
    int status = 0;
    phase ph = {.accept = accept};
    if (replay_path && load_replay(e, replay_path, &ph.routes, json, root, err)) goto fail;
    const bool trace = ce.stats || trace_path;
    if (!skip_cold) {
        e0_engine_drop_cache(e);
        if (loaded) { /* the copy in memory is what --io load reads: load it again, from disk */
            e0_engine_free(e);
            fprintf(stderr, "edge0 bench: loading the checkpoint from disk...\n");
            if (e0_engine_open(&e, model, &ce.eo, err) != E0_OK) {
                e = NULL;
                goto fail;
            }
            if (!json) printf("cold: %s\n", e0_engine_io_note(e));
        }
        fprintf(stderr, "edge0 bench: cold run (checkpoint pages dropped)...\n");
        if (run_phase(e, (int)n_prefill, (int)n_decode, trace, warm_up_all, &ph, err)) goto fail;
        if (trace_path && ph.traced && write_trace(e, trace_path, &ph, err)) goto fail;
        report("cold", &ph, (int)n_prefill, (int)n_decode, dram, disk, dense_touched, mmap_io, json,
               root);
    }
    if (!skip_warm) {
        /* a fresh engine: only the page cache is warm, not the LRU (--io load: the engine
         * already holds the checkpoint, and a cold run's engine would have it too) */
        if (!loaded || !skip_cold) {
            e0_engine_free(e);
            if (e0_engine_open(&e, model, &ce.eo, err) != E0_OK) {
                e = NULL;
                goto fail;
            }
            if (!loaded) {
                fprintf(stderr, "edge0 bench: reading the checkpoint into the page cache...\n");
                e0_engine_warm_cache(e);
            }
        }
        fprintf(stderr, "edge0 bench: warm run...\n");
        if (run_phase(e, (int)n_prefill, (int)n_decode, trace, mmap_io || warm_up_all, &ph, err)) goto fail;
        if (trace_path && ph.traced && write_trace(e, trace_path, &ph, err)) goto fail;
        report("warm", &ph, (int)n_prefill, (int)n_decode, dram, disk, dense_touched, mmap_io, json,
               root);
    }
    if (n_levels) {
        if (skip_warm && !loaded) { /* as the warm run: the checkpoint in the page cache */
            fprintf(stderr, "edge0 bench: reading the checkpoint into the page cache...\n");
            e0_engine_warm_cache(e);
        }
        if (bench_batched(e, ph.routes, levels, n_levels, (int)n_prefill, (int)n_decode, json, root,
                          err))
            goto fail;
    }
    if (json) print_json(root);
    if (!json) printf("peak RSS %.0f MiB\n", (double)cli_peak_rss() / (1 << 20));
    goto done;
fail:
    cli_error("%s", err);
    status = 1;
done:
    free(ph.tok_at);
    e0_routes_free(ph.routes);
    cJSON_Delete(root);
    e0_engine_free(e);
    return status;
}
