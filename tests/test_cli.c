/* The command line as a new user meets it (issue 17): each message that
 * used to mislead, and the one it says now; flag errors before any model is
 * read; --version; each command's --help listing only its own options. */
#include "testutil.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static char *dir;

/* Runs `edge0 ARGS`, stdout and stderr into dir/out.txt: the exit status. */
static int run(const char *args) {
    char cmd[16384];
    snprintf(cmd, sizeof cmd, "%s %s > %s/out.txt 2>&1", tu_bin(), args, dir);
    return tu_run(cmd);
}

/* dir/out.txt, the last run's output (up to 64 KiB). */
static const char *out_txt(void) {
    char path[4200];
    snprintf(path, sizeof path, "%s/out.txt", dir);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    return buf;
}

/* dir/out.txt holds `text`, or the test fails showing it. */
static void says(const char *what, const char *text) {
    const char *buf = out_txt();
    if (!strstr(buf, text)) fail_msg("%s: expected '%s' in:\n%s", what, text, buf);
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void test_flags_before_model(void **state) {
    (void)state;
    char args[4400];
    /* a bad flag is named even though the model does not exist either */
    snprintf(args, sizeof args, "demo %s/missing --temp -1", dir);
    assert_int_equal(run(args), 2);
    says("--temp -1", "--temp: -1 is out of range: it takes a number >= 0");
    snprintf(args, sizeof args, "chat %s/missing --top-p 2", dir);
    assert_int_equal(run(args), 2);
    says("--top-p 2", "--top-p: 2 is out of range");
    snprintf(args, sizeof args, "serve %s/missing --min-p 7", dir);
    assert_int_equal(run(args), 2);
    says("--min-p 7", "--min-p: 7 is out of range");
    /* a missing model: a message at once (no model is read, nothing is built) */
    snprintf(args, sizeof args, "chat %s/missing", dir);
    const double t0 = now();
    assert_int_not_equal(run(args), 0);
    const double dt = now() - t0;
    says("missing model", "no such file or directory (MODEL is a model directory with "
                          "config.json, or a .gguf file)");
    printf("  a missing model is reported in %.0f ms\n", dt * 1e3);
    assert_true(dt < 2.0); /* generous: the point is that nothing is loaded */
}

static void test_model_messages(void **state) {
    (void)state;
    assert_int_not_equal(run("info Qwen/Qwen3-30B-A3B-Instruct-2507"), 0);
    says("a repository id", "It looks like a Hugging Face repository id");
    says("a repository id", "huggingface-cli download Qwen/Qwen3-30B-A3B-Instruct-2507");
    char args[4400];
    snprintf(args, sizeof args, "info %s", tu_shared("fixtures/qwen3moe"));
    assert_int_not_equal(run(args), 0);
    says("a folder of checkpoints", "holds 3: hf/, hf-fused/, mlx/; pass one of them");
    snprintf(args, sizeof args, "info %s", tu_shared("fixtures/README.md"));
    assert_int_not_equal(run(args), 0);
    says("a file that is not GGUF", "is a file but not a GGUF file");
    /* a GGUF file is a model */
    snprintf(args, sizeof args, "info %s", tu_shared("gguf/qwen3moe/model-Q4_0.gguf"));
    assert_int_equal(run(args), 0);
    says("a GGUF file", "layout gguf");
}

static void test_sizes_and_threads(void **state) {
    (void)state;
    char args[4400];
    snprintf(args, sizeof args, "logits %s --ids 1 --out %s/o.st --mem-budget 1K",
             tu_shared("fixtures/qwen3moe/mlx"), dir);
    assert_int_not_equal(run(args), 0);
    says("--mem-budget 1K", "--mem-budget 1.0 KiB is too small");
    assert_int_equal(run("logits --mem-budget lots"), 2);
    says("--mem-budget lots", "not a size such as 8G or 512M, auto or off");
    snprintf(args, sizeof args, "logits %s --ids 1 --out %s/o.st --threads 999",
             tu_shared("fixtures/qwen3moe/mlx"), dir);
    assert_int_equal(run(args), 0);
    says("--threads 999", "--threads 999 is more than this machine's");
    /* a GPU's option where the engine computes on the CPU is said, not dropped (test_gpu's
     * test_cpu_options_on_gpu: the converse) */
    snprintf(args, sizeof args, "logits %s --ids 1 --out %s/o.st --gpu off --vram-budget 8G",
             tu_shared("fixtures/qwen3moe/mlx"), dir);
    assert_int_equal(run(args), 0);
    says("--vram-budget on the CPU", "warning: --vram-budget sizes what a GPU holds, and the engine computes on the CPU");
    snprintf(args, sizeof args, "logits %s --ids 1 --out %s/o.st --gpu off", tu_shared("fixtures/qwen3moe/mlx"), dir);
    assert_int_equal(run(args), 0);
    if (strstr(out_txt(), "warning")) fail_msg("a warning without --vram-budget:\n%s", out_txt());
}

/* bench --batch: each level's batched decode reported (on an f16 KV cache,
 * which the machine line names); a bad list refused before the model is
 * read. (That a sequence decoded in a batch gets the
 * logits it gets alone is test_batch's.) */
static void test_bench_batch(void **state) {
    (void)state;
    char args[4400];
    snprintf(args, sizeof args, "bench %s/missing --batch 4,2", dir);
    assert_int_equal(run(args), 2);
    says("--batch 4,2", "--batch: '4,2' is not an ascending list of sequence counts in [1, 256]");
    assert_int_equal(run("bench x --batch 0"), 2);
    says("--batch 0", "not an ascending list");
    snprintf(args, sizeof args,
             "bench %s --skip-cold --skip-warm --batch 1,3 --prefill 5 --decode 3 --threads 1 "
             "--kv-type f16",
             tu_shared("fixtures/qwen35moe/mlx"));
    assert_int_equal(run(args), 0);
    says("bench --batch", "; kernels ");
    says("bench --batch", ", KV cache f16\n");
    says("bench --batch", "batched decode (5-id prompt per sequence, then 3 steps):");
    says("bench --batch", "\n     1 ");
    says("bench --batch", "\n     3 ");
    says("bench --batch", "x N=1  MiB read/token\n");
    says("bench --batch", "1.00x  ");
}

/* The size of one session in the memory plan that dir/out.txt shows ("N
 * session(s) SIZE"), in MiB; *n gets N. */
static double plan_sessions(int *n) {
    const char *buf = out_txt();
    const char *p = strstr(buf, " session(s) ");
    if (!p) fail_msg("no memory plan in:\n%s", buf);
    while (p > buf && p[-1] != ' ') p--;
    double v;
    char unit[4];
    if (sscanf(p, "%d session(s) %lf %3s", n, &v, unit) != 3) fail_msg("bad plan in:\n%s", buf);
    return v * (!strcmp(unit, "GiB") ? 1024.0 : !strcmp(unit, "KiB") ? 1.0 / 1024 : 1.0) / *n;
}

/* bench under --mem-budget plans for the sessions it opens: --batch's
 * largest count of them, each of --prefill + --decode + 1 positions, not
 * one session of chat's 4096 (which is what `info` plans for). */
static void test_bench_budget(void **state) {
    (void)state;
    char args[4400];
    const char *m = tu_shared("fixtures/qwen35moe/mlx");
    int n;
    snprintf(args, sizeof args, "info %s --mem-budget 128M", m);
    assert_int_equal(run(args), 0);
    const double chat_one = plan_sessions(&n);
    assert_int_equal(n, 1);
    snprintf(args, sizeof args,
             "bench %s --skip-cold --skip-warm --batch 1,3 --prefill 5 --decode 3 --threads 1 "
             "--mem-budget 128M",
             m);
    assert_int_equal(run(args), 0);
    const double bench_one = plan_sessions(&n);
    assert_int_equal(n, 3);
    printf("  one session in the plan: info %.2f MiB, bench (9 positions) %.2f MiB\n", chat_one,
           bench_one);
    assert_true(bench_one < chat_one);
    /* the DRAM bandwidth's 1 GiB buffer comes and goes before the budgeted cache is
     * committed (beside it, in a capped cgroup, it set off the pressure monitor), and
     * the cold run reports the slots memory pressure left usable: all of them here */
    snprintf(args, sizeof args,
             "bench %s --skip-warm --prefill 3 --decode 1 --threads 1 --mem-budget 128M --json", m);
    assert_int_equal(run(args), 0);
    const char *buf = out_txt(), *dram = strstr(buf, "measuring DRAM bandwidth"),
               *plan = strstr(buf, "mem budget ");
    if (!dram || !plan || dram > plan) fail_msg("DRAM bandwidth not measured before open:\n%s", buf);
    int slots = 0, start = -1;
    const char *p = strstr(buf, "\"cache_slots\":"), *q = strstr(buf, "\"cache_limit_decode_start\":");
    if (!p || !q || sscanf(p, "\"cache_slots\": %d", &slots) != 1 ||
        sscanf(q, "\"cache_limit_decode_start\": %d", &start) != 1)
        fail_msg("no cache slots in bench's json:\n%s", buf);
    assert_true(slots > 0);
    assert_int_equal(start, slots);
    says("bench --json under a budget", "\"pressure_shrinks\":\t0,");
}

/* bench --warm-up: a cold run under --mem-budget first makes an untimed pass
 * of other ids (as llama-bench warms up), so its timed prefill finds some
 * experts in the cache and reads fewer bytes than the same run without it;
 * the figures still count the timed pass alone (4 experts a decode token). */
static long prefill_read(const char *buf) {
    const char *p = strstr(buf, "\"prefill_bytes_read\":");
    long v = -1;
    if (!p || sscanf(p, "\"prefill_bytes_read\": %ld", &v) != 1)
        fail_msg("no prefill_bytes_read in:\n%s", buf);
    return v;
}

static void test_bench_warm_up(void **state) {
    (void)state;
    char args[4400];
    const char *m = tu_shared("fixtures/qwen35moe/mlx");
    const char *common = "--skip-warm --prefill 3 --decode 1 --threads 1 --mem-budget 128M --json";
    snprintf(args, sizeof args, "bench %s %s", m, common);
    assert_int_equal(run(args), 0);
    says("bench without --warm-up", "\"warm_up_every_run\":\tfalse,");
    const long cold = prefill_read(out_txt());
    snprintf(args, sizeof args, "bench %s %s --warm-up", m, common);
    assert_int_equal(run(args), 0);
    says("bench --warm-up", "\"warm_up_every_run\":\ttrue,");
    says("bench --warm-up", "\"decode_distinct_experts_per_layer\":\t4,");
    const long warmed = prefill_read(out_txt());
    printf("  cold prefill read %ld bytes, after a warm-up pass %ld\n", cold, warmed);
    assert_true(cold > 0);
    assert_true(warmed < cold);
}

/* bench's warm run under --io load: an untimed warm-up pass in the session
 * first (HELP), then the timed pass alone in the figures: one decode token
 * touches exactly top-k = 4 of the fixture's 32 experts per layer (the
 * warm-up's routes, other ids, would add to that were they counted). */
static void test_bench_warm(void **state) {
    (void)state;
    char args[4400];
    snprintf(args, sizeof args,
             "bench %s --io load --skip-cold --prefill 3 --decode 1 --threads 1 --json",
             tu_shared("fixtures/qwen35moe/mlx"));
    assert_int_equal(run(args), 0);
    says("bench warm", "\"warm\":");
    says("bench warm", "\"prefill_tokens\":\t3,");
    says("bench warm", "\"decode_distinct_experts_per_layer\":\t4,");
}

static void test_help_and_version(void **state) {
    (void)state;
    assert_int_equal(run("--version"), 0);
    says("--version", "edge0 0.");
    says("--version", "(git ");
    says("--version", "kernels on this CPU: ");
    /* sampling options only where something is sampled */
    const char *no[] = {"bench", "logits", "info"}, *yes[] = {"demo", "chat", "serve"};
    for (int i = 0; i < 3; i++) {
        char args[64], cmd[8400];
        snprintf(args, sizeof args, "%s --help", no[i]);
        assert_int_equal(run(args), 0);
        snprintf(cmd, sizeof cmd, "! grep -q -- '--temp' %s/out.txt", dir);
        if (tu_run(cmd) != 0) fail_msg("%s --help lists --temp, which it does not use", no[i]);
        snprintf(args, sizeof args, "%s --help", yes[i]);
        assert_int_equal(run(args), 0);
        says(yes[i], "--temp T");
    }
    assert_int_equal(run("logits --temp 0"), 2);
    says("logits --temp", "logits: unknown option '--temp'");
    assert_int_equal(run("demo --help"), 0);
    says("demo --help", "--prompt-file FILE");
    says("demo --help", "--system TEXT");
    assert_int_equal(run("chat --help"), 0);
    says("chat --help", "--prompt-file FILE");
}

/* demo --prompt-file: the file's text (both lines) is the message; a
 * missing file is named. */
static void test_demo_prompt_file(void **state) {
    (void)state;
    char path[4200], args[9000];
    snprintf(path, sizeof path, "%s/prompt.txt", dir);
    FILE *f = fopen(path, "w");
    fputs("What is in this file?\nTwo lines.\n", f);
    fclose(f);
    snprintf(args, sizeof args, "demo --prompt-file %s --system 'Be brief.' --max-tokens 2", path);
    assert_int_equal(run(args), 0);
    says("--prompt-file", "> What is in this file?\nTwo lines.");
    snprintf(args, sizeof args, "demo --prompt-file %s/none.txt", dir);
    assert_int_equal(run(args), 2);
    says("--prompt-file missing", "--prompt-file: cannot open");
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* `edge0 demo` with no model answers its fixed prompt in words (issue 41):
 * with the trained demo model of assets/demo-model, greedy, at least 90% of
 * the answer's words (after its think block) are in Debian's wamerican
 * list (/usr/share/dict/american-english, lowercased), and there are at
 * least five. */
static void test_demo_words(void **state) {
    (void)state;
    if (access("assets/demo-model/model.safetensors", R_OK) != 0) {
        printf("  skipped: assets/demo-model is not in this tree (the demo model is trained on the device: "
               "tools/train/device_train.sh)\n");
        skip();
    }
    FILE *f = fopen("/usr/share/dict/american-english", "r");
    if (!f) fail_msg("/usr/share/dict/american-english: %s (Debian's wamerican package; scripts/deps.sh installs it)",
                     strerror(errno));
    size_t n = 0, cap = 1 << 17;
    char **words = malloc(cap * sizeof *words), line[256];
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        for (char *c = line; *c; c++) *c = (char)tolower((unsigned char)*c);
        if (n == cap) words = realloc(words, (cap *= 2) * sizeof *words);
        words[n++] = strdup(line);
    }
    fclose(f);
    qsort(words, n, sizeof *words, cmp_str);
    assert_int_equal(run("demo --temp 0 --max-tokens 64"), 0);
    const char *out = out_txt(), *a = strstr(out, "\n> ");
    assert_non_null(a);
    a = strchr(a + 3, '\n');
    const char *end = strstr(a, "\n\nload ");
    assert_non_null(end);
    for (const char *t; (t = strstr(a, "</think>")) && t < end;) a = t + 8;
    int total = 0, known = 0;
    char unknown[1024] = "";
    for (const char *c = a; c < end;) {
        if (!isalpha((unsigned char)*c)) {
            c++;
            continue;
        }
        char w[128];
        size_t k = 0;
        while (c < end && (isalpha((unsigned char)*c) || *c == '\'')) {
            if (k < sizeof w - 1) w[k++] = (char)tolower((unsigned char)*c);
            c++;
        }
        w[k] = 0;
        if (k > 2 && !strcmp(w + k - 2, "'s")) w[k - 2] = 0; /* a possessive: the word */
        const char *key = w;
        total++;
        if (bsearch(&key, words, n, sizeof *words, cmp_str)) {
            known++;
        } else if (strlen(unknown) + strlen(w) + 2 < sizeof unknown) {
            strcat(unknown, " ");
            strcat(unknown, w);
        }
    }
    printf("  the demo's answer: %d words, %d in the dictionary (%.1f%%); not:%s\n", total, known,
           total ? 100.0 * known / total : 0.0, unknown);
    if (total < 5 || known * 10 < total * 9) fail_msg("the demo's answer is not words:\n%s", out);
    for (size_t i = 0; i < n; i++) free(words[i]);
    free(words);
}

/* A port in use: one line, ours, saying what to do (libmicrohttpd's own
 * "Failed to bind" line no longer printed before it). */
static void test_port_in_use(void **state) {
    (void)state;
    char cmd[16384];
    snprintf(cmd, sizeof cmd,
             "python3 -c \"import socket, time; s = socket.socket(); s.bind(('127.0.0.1', 0)); "
             "s.listen(); open('%s/port', 'w').write(str(s.getsockname()[1])); time.sleep(60)\" & "
             "echo $! > %s/pid; for i in $(seq 50); do [ -s %s/port ] && break; sleep 0.1; done",
             dir, dir, dir);
    assert_int_equal(tu_run(cmd), 0);
    char path[4200];
    snprintf(path, sizeof path, "%s/port", dir);
    FILE *f = fopen(path, "r");
    int port = 0;
    assert_non_null(f);
    assert_int_equal(fscanf(f, "%d", &port), 1);
    fclose(f);
    char args[8400];
    snprintf(args, sizeof args, "serve %s --port %d",
             tu_shared("gguf/tiny-qwen35moe/model-Q4_K_M.gguf"), port);
    assert_int_not_equal(run(args), 0);
    says("port in use", "another program is using it (pick another --port");
    snprintf(cmd, sizeof cmd, "! grep -q 'Failed to bind' %s/out.txt; rc=$?; kill $(cat %s/pid); exit $rc",
             dir, dir);
    assert_int_equal(tu_run(cmd), 0);
}

int main(void) {
    dir = tu_tmpdir();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_flags_before_model), cmocka_unit_test(test_model_messages),
        cmocka_unit_test(test_sizes_and_threads),  cmocka_unit_test(test_bench_batch), cmocka_unit_test(test_bench_budget), cmocka_unit_test(test_bench_warm),
        cmocka_unit_test(test_bench_warm_up),
        cmocka_unit_test(test_help_and_version),
        cmocka_unit_test(test_demo_prompt_file),  cmocka_unit_test(test_port_in_use),
        cmocka_unit_test(test_demo_words),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    tu_rmtree(dir);
    free(dir);
    return rc;
}
