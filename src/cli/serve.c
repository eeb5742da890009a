/* edge0 serve MODEL: the OpenAI-compatible HTTP server (src/server/server.h).
 *
 * Loads the model, listens, logs one line per request to stderr, and on
 * SIGINT or SIGTERM stops gracefully: queued requests get 503, the running
 * ones have --shutdown-grace seconds to finish before they are cancelled, and
 * the process exits 0. Signals are handled by
 * sigwait on the main thread, so no server thread is ever interrupted. */
#include "cli/cli.h"
#include "cli/opts.h"
#include "edge0.h"
#include "server/server.h"
#include "util/meminfo.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *HELP =
    "usage: edge0 serve MODEL [--host H] [--port P] [--api-key KEY] [--max-queue N] [--ctx N]\n"
    "                         [--body-limit SIZE] [--name NAME] [--no-think] [--cors ORIGIN]\n"
    "                         [--shutdown-grace S] [--parallel N] [--prefill-chunk N]\n"
    "                         [--cache-ram SIZE|auto|0] [--prefill-layers N|all]\n"
    "\n"
    "Serves MODEL over HTTP with the OpenAI API: POST /v1/chat/completions (tool\n"
    "calls included), POST /v1/completions, GET /v1/models[/ID], POST /tokenize and\n"
    "/detokenize, GET /health, GET /metrics (Prometheus). Connections are kept alive.\n"
    "Continuous batching: up to --parallel requests run at once, each in its own\n"
    "slot (a session with its own KV cache and DeltaNet states); every step decodes\n"
    "the next token of all of them in one forward pass, and new requests join\n"
    "between steps. A request that extends a slot's previous conversation goes to\n"
    "that slot and reuses its tokens. The sampling options below are the defaults\n"
    "for fields a request leaves out.\n"
    "\n"
    "  --host H          address to listen on (default 127.0.0.1)\n"
    "  --port P          port (default 8080; 0 picks a free one)\n"
    "  --api-key KEY     require 'Authorization: Bearer KEY' or 'X-Api-Key: KEY'\n"
    "                    (default: $EDGE0_API_KEY, else none);\n"
    "                    /health stays open\n"
    "  --max-queue N     waiting requests before answering 503 (default 64)\n"
    "  --ctx N           context size in tokens, of each slot (default 4096)\n"
    "  --parallel N      slots: requests decoded together (like llama-server's -np);\n"
    "                    default: up to 4, as many as the memory budget leaves room\n"
    "                    for (each slot's KV cache and states for --ctx positions).\n"
    "                    With --mtp on (below) each slot drafts with the MTP block and\n"
    "                    the batched pass verifies every draft (not for a request\n"
    "                    resumed from the prefix cache)\n"
    "  --prefill-chunk N prompt tokens of one request per forward pass (default\n"
    "                    128; chunks of several requests share a pass, at most 512\n"
    "                    ids); answers may depend on N by rounding (the same value\n"
    "                    gives the same answers)\n"
    "  --prefill-layers N while streams decode, a prefill pass advances N layers\n"
    "                    per step and pauses for their decode pass (the answers do\n"
    "                    not depend on N); default 0: the half layers (token mixer,\n"
    "                    MLP) that fit in about one single-sequence decode pass's\n"
    "                    time, from each one's measured time, and no more chunks in\n"
    "                    a pass than keep a half layer within it, so while a\n"
    "                    prompt prefills a running stream's token takes its\n"
    "                    batch's pass plus about one single-sequence pass (the\n"
    "                    prompt's first token comes later); all: never pause (the\n"
    "                    best time to first token and throughput under load, the\n"
    "                    streams wait a whole pass per token)\n"
    "  --cache-ram SIZE  the prefix cache: snapshots of a slot's state (KV cache and\n"
    "                    DeltaNet states) at the end of each prompt and each answer,\n"
    "                    kept within SIZE, least recently used dropped first; a\n"
    "                    returning conversation or a repeated system prompt resumes\n"
    "                    from the longest cached prefix (usage cached_tokens).\n"
    "                    auto (default): 1/8 of the memory available, at most 2G,\n"
    "                    kept out of the memory budget's expert cache; 0: off.\n"
    "                    Off on the GPU (its states are not snapshotted yet)\n"
    "  --body-limit SIZE largest request body (default 1M)\n"
    "  --name NAME       the model id clients see (default: the directory name)\n"
    "  --no-think        thinking off unless a request turns it on\n"
    "  --cors ORIGIN     let browser pages from ORIGIN (or *) call the server:\n"
    "                    Access-Control-Allow-Origin on every answer, OPTIONS preflight (default off)\n"
    "  --gather N        (tests) admit the first requests only once N of them wait,\n"
    "                    so that N requests sent together meet in one batch\n"
    "  --shutdown-grace S  on SIGTERM or SIGINT, seconds the running requests have to finish\n"
    "                    before they are cancelled (a stream then ends with an error event);\n"
    "                    queued requests get 503 at once (default 10)\n"
    "\n";

/* "1M", "64k", "1048576" -> bytes; 0 on error. */
static size_t parse_bytes(const char *s) {
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (end == s || s[0] == '-') return 0;
    if (*end == 'k' || *end == 'K') v <<= 10, end++;
    else if (*end == 'm' || *end == 'M') v <<= 20, end++;
    if (*end == 'i' && end[1] == 'B') end += 2;
    else if (*end == 'B') end++;
    return *end || v > (1ull << 34) ? 0 : (size_t)v;
}

/* The last path component of `dir`, without trailing slashes, into buf. */
static const char *base_name(const char *dir, char *buf, size_t n) {
    size_t len = strlen(dir);
    while (len > 1 && dir[len - 1] == '/') len--;
    size_t b = len;
    while (b > 0 && dir[b - 1] != '/') b--;
    snprintf(buf, n, "%.*s", (int)(len - b), dir + b);
    return buf;
}

static int opt_prefill_layers(void *ptr, const char *name, const char *v) {
    if (!strcmp(v, "all")) {
        *(int *)ptr = -1;
        return 0;
    }
    char *end;
    const long k = strtol(v, &end, 10);
    if (end == v || *end || k < 0 || k > 1 << 20) {
        cli_error("--prefill-layers: '%s' is not a number of layers (0: paced by time) or all", v);
        return -1;
    }
    *(int *)ptr = (int)k;
    return 0;
}

/* --cache-ram: a size, auto or 0 / off. */
typedef struct {
    bool autosize;
    uint64_t bytes;
} cache_size;

static int opt_cache_ram(void *ptr, const char *name, const char *v) {
    cache_size *c = ptr;
    c->autosize = !strcmp(v, "auto");
    c->bytes = 0;
    if (!c->autosize && strcmp(v, "0") && strcmp(v, "off") && !(c->bytes = cli_parse_size(v))) {
        cli_error("--cache-ram: '%s' is not a size such as 2G or 512M, auto, or 0", v);
        return -1;
    }
    return 0;
}

static int opt_body_limit(void *ptr, const char *name, const char *v) {
    if (!(*(size_t *)ptr = parse_bytes(v))) {
        cli_error("--body-limit: '%s' is not a size such as 1M or 65536", v);
        return -1;
    }
    return 0;
}

static int opt_grace(void *ptr, const char *name, const char *v) {
    double *g = ptr;
    char *end;
    *g = strtod(v, &end);
    if (end == v || *end || !(*g >= 0) || *g > 86400) {
        cli_error("--shutdown-grace: '%s' is not a number of seconds in [0, 86400]", v);
        return -1;
    }
    return 0;
}

static int opt_cors(void *ptr, const char *name, const char *v) {
    if (!*v) {
        cli_error("--cors needs an origin such as https://example.com, or *");
        return -1;
    }
    *(const char **)ptr = v;
    return 0;
}

int cmd_serve(int argc, char **argv) {
    const char *model = NULL, *name = NULL;
    srv_opts so;
    srv_opts_default(&so);
    so.api_key = getenv("EDGE0_API_KEY");
    cli_engine ce;
    cli_engine_init(&ce);
    int parallel = 0; /* 0: as many slots as the memory budget allows */
    cache_size cache = {true, 0};
    ce.sampling = true;
    const cli_opt opts[] = {
        CLI_OPT("--no-think", CLI_CLEAR, &so.defaults.enable_thinking),
        CLI_OPT("--host", CLI_STR, &so.host),
        CLI_OPT("--port", CLI_INT, &so.port, .lo = 0, .hi = 65535),
        CLI_OPT("--api-key", CLI_STR, &so.api_key),
        CLI_OPT("--max-queue", CLI_INT, &so.max_queue, .lo = 1, .hi = 1 << 20),
        CLI_OPT("--ctx", CLI_INT, &so.n_ctx, .lo = 16, .hi = 1 << 24),
        CLI_OPT("--parallel", CLI_INT, &parallel, .lo = 1, .hi = E0_MAX_SEQS),
        CLI_OPT("--prefill-chunk", CLI_INT, &so.prefill_chunk, .lo = 1, .hi = 1 << 20),
        CLI_OPT("--prefill-layers", CLI_FN, &so.prefill_layers, .fn = opt_prefill_layers),
        CLI_OPT("--cache-ram", CLI_FN, &cache, .fn = opt_cache_ram),
        CLI_OPT("--body-limit", CLI_FN, &so.body_limit, .fn = opt_body_limit),
        CLI_OPT("--shutdown-grace", CLI_FN, &so.shutdown_grace, .fn = opt_grace),
        CLI_OPT("--cors", CLI_FN, &so.cors, .fn = opt_cors),
        CLI_OPT("--name", CLI_STR, &name),
        CLI_OPT("--gather", CLI_INT, &so.gather, .lo = 1, .hi = 1 << 20),
        {0},
    };
    const cli_args args = {.cmd = "serve", .help = HELP, .ce = &ce, .opts = opts, .pos = &model,
                           .value_first = true};
    const int parsed = cli_parse(&args, argc, argv);
    if (parsed) return parsed == 1 ? 0 : 2;
    if (!model) {
        cli_error("serve needs MODEL (see edge0 serve --help)");
        return 2;
    }
    if (cli_engine_finish(&ce) != 0) return 2;
    ce.eo.n_ctx = so.n_ctx; /* the budget keeps room for every slot's session */
    ce.eo.n_seqs = parallel ? parallel : E0_SEQS_AUTO;
    uint64_t cache_ram = cache.bytes;
    if (cache.autosize) { /* an eighth of what this process may use, at most 2 GiB */
        const uint64_t cg = mem_cgroup_limit(), host = mem_available();
        const uint64_t avail = cg && (!host || cg < host) ? cg : host;
        cache_ram = avail / 8 < (2ull << 30) ? avail / 8 : 2ull << 30;
    }
    ce.eo.reserve_bytes = cache_ram; /* a memory budget leaves room for it */
    so.cache_ram = cache_ram;
    so.defaults.sample = ce.sample;
    char base[256];
    so.model_name = name ? name : base_name(model, base, sizeof base);

    /* Every thread started from here on inherits this mask; only sigwait sees the signals. */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);

    char err[E0_ERR_MAX];
    e0_engine *eng = NULL;
    e0_text *text = NULL;
    srv *s = NULL;
    int status = 1;
    if (e0_engine_open(&eng, model, &ce.eo, err) != E0_OK || e0_text_open(&text, model, err) != E0_OK) goto out;
    cli_engine_opened(&ce, eng);
    e0_model_info info;
    e0_engine_info(eng, &info);
    /* on the GPU the sessions' states are in device memory, which the prefix
     * cache's snapshots do not copy yet: no prefix cache there */
    const bool on_gpu = e0_engine_gpu(eng) >= 0;
    if (on_gpu) so.cache_ram = 0;
    so.engine = eng;
    so.parallel = e0_engine_seqs(eng);
    so.text = text;
    so.defaults.chat_format = e0_text_chat_format(text);
    if (srv_start(&s, &so, err) != 0) goto out;
    char pc[64];
    snprintf(pc, sizeof pc, on_gpu ? "no prefix cache (the states are on the GPU)" : "prefix cache %.2f GiB",
             (double)so.cache_ram / (1u << 30));
    fprintf(stderr,
            "edge0: serving %s (%s, %d layers, %d experts, top-%d) as \"%s\" on %s, %d slot%s%s of %d tokens each "
            "(continuous batching, prefill chunk %d), %s, chat template %s\n",
            model, info.family, info.n_layers, info.n_experts, info.top_k, so.model_name,
            on_gpu ? "the GPU" : "the CPU", so.parallel, so.parallel == 1 ? "" : "s",
            parallel ? "" : " (what memory allows, at most 4; --parallel sets it)", (int)so.n_ctx, so.prefill_chunk,
            pc, so.defaults.chat_format == E0_CHAT_QWEN35 ? "qwen3.5 (XML tool calls)" : "qwen3 (JSON tool calls)");
    fprintf(stderr, "edge0: listening on http://%s%s%s:%d%s\n", strchr(so.host, ':') ? "[" : "", so.host,
            strchr(so.host, ':') ? "]" : "", srv_port(s), so.api_key && *so.api_key ? " (API key required)" : "");
    int sig = 0;
    sigwait(&set, &sig);
    fprintf(stderr, "edge0: %s: stopping (a running request has %g s to finish)\n",
            sig == SIGINT ? "SIGINT" : "SIGTERM", so.shutdown_grace);
    srv_stop(s);
    if (ce.stats) cli_print_stats(eng, stderr);
    status = 0;
out:
    if (status) cli_error("%s", err);
    e0_text_free(text);
    e0_engine_free(eng);
    return status;
}
