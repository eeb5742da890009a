/* edge0 chat driven as a person drives it: in tmux, with send-keys, reading
 * the screen. On a tiny synthesized model with the real Qwen3 tokenizer:
 * answers stream, the second turn reuses the first turn's tokens, Ctrl-C
 * stops an answer but not the program, /think, /reset, /stats, a full
 * context says so, /exit leaves with status 0; the prompt's line editing:
 * Up recalls the last message (history kept in a file), a multi-line paste
 * is one turn, a trailing backslash continues, Ctrl-D on a non-empty line
 * sends nothing, blank input is ignored, /help lists the commands. And
 * piped, chat and demo write no escape codes. */
#include "testutil.h"

#include "edge0.h"
#include "synth/synth.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static char sock[64];

/* tmux -L SOCK <args> (args already shell-quoted). */
static void tmux(const char *args) {
    char cmd[16384];
    snprintf(cmd, sizeof cmd, "tmux -L %s %s >/dev/null 2>&1", sock, args);
    tu_run(cmd);
}

static void keys(const char *k) {
    char a[512];
    snprintf(a, sizeof a, "send-keys %s", k);
    tmux(a);
}

/* The screen of session `t` (with 200 lines of history), malloc'd. */
static char *screen(const char *t) {
    char cmd[256];
    snprintf(cmd, sizeof cmd, "tmux -L %s capture-pane -p -J -S -200 -t %s 2>/dev/null", sock, t);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    size_t r;
    while ((r = fread(buf + n, 1, cap - n - 1, p)) > 0) {
        n += r;
        if (n + 1 == cap) buf = realloc(buf, cap *= 2);
    }
    buf[n] = 0;
    pclose(p);
    return buf;
}

/* Polls session t's screen until `needle` appears `times` times (up to 60 s). */
static void wait_for(const char *t, const char *needle, int times) {
    for (int i = 0; i < 600; i++) {
        char *s = screen(t);
        int k = 0;
        for (const char *p = s; (p = strstr(p, needle)); p++) k++;
        if (k >= times) {
            free(s);
            return;
        }
        if (i == 599) fail_msg("session %s never showed '%s' x%d:\n%s", t, needle, times, s);
        free(s);
        struct timespec ts = {0, 100 * 1000000};
        nanosleep(&ts, NULL);
    }
}

static char state_dir[4200]; /* XDG_STATE_HOME of the chats: their history file */

static void start(const char *t, const char *model, const char *args) {
    char cmd[12000];
    snprintf(cmd, sizeof cmd,
             "new-session -d -s %s -x 200 -y 50 \"env XDG_STATE_HOME=%s %s chat %s %s --temp 0 --io pread; "
             "echo EXITED rc=\\$?; sleep 60\"",
             t, state_dir, tu_bin(), model, args);
    tmux(cmd);
    wait_for(t, "/help lists the commands", 1);
}

/* Occurrences of needle on session t's screen now. */
static int count(const char *t, const char *needle) {
    char *s = screen(t);
    int k = 0;
    for (const char *p = s; (p = strstr(p, needle)); p++) k++;
    free(s);
    return k;
}

static void settle(void) {
    struct timespec ts = {1, 0};
    nanosleep(&ts, NULL);
}

static void test_chat_in_tmux(void **state) {
    (void)state;
    if (tu_run("command -v tmux >/dev/null") != 0) fail_msg("tmux is not installed (scripts/deps.sh installs it)");
    char *dir = tu_tmpdir(), model[4200], cmd[8400], err[E0_ERR_MAX];
    snprintf(model, sizeof model, "%s/m", dir);
    if (e0_synth_write(e0_synth_find("tiny"), model, 7, err)) fail_msg("%s", err);
    snprintf(cmd, sizeof cmd, "cp assets/qwen3-tokenizer/tokenizer.json %s/", model);
    assert_int_equal(tu_run(cmd), 0);
    snprintf(sock, sizeof sock, "edge0-test-%d", (int)getpid());
    tmux("kill-server"); /* a server left on this name by an earlier run (pids come back) */
    snprintf(state_dir, sizeof state_dir, "%s/state", dir);

    /* turns, reuse, commands */
    start("a", model, "--max-tokens 24");
    keys("-t a 'Hello there' Enter");
    wait_for("a", "new prompt tokens (0 reused)", 1);
    keys("-t a 'And now?' Enter");
    wait_for("a", "reused)", 2);
    char *s = screen("a");
    const char *second = strstr(strstr(s, "reused)") + 1, "new prompt tokens (");
    assert_non_null(second);
    assert_true(atoi(second + strlen("new prompt tokens (")) > 10); /* turn 1 was not evaluated again */
    free(s);
    keys("-t a /stats Enter");
    wait_for("a", "expert cache hit rate per layer", 1);
    keys("-t a '/think off' Enter");
    wait_for("a", "(thinking off)", 1);
    keys("-t a /reset Enter");
    wait_for("a", "(conversation reset)", 1);
    keys("-t a 'Hi' Enter");
    wait_for("a", "new prompt tokens (0 reused)", 2);
    keys("-t a C-c");
    wait_for("a", "/quit or Ctrl-D leaves", 1);
    keys("-t a /exit Enter");
    wait_for("a", "EXITED rc=0", 1);

    /* Ctrl-C stops an answer, not the program */
    start("b", model, "--ctx 8192");
    keys("-t b 'Tell me a very long story' Enter");
    wait_for("b", "> Tell me a very long story\n", 1);
    keys("-t b C-c");
    wait_for("b", "stopped]", 1);
    keys("-t b /exit Enter");
    wait_for("b", "EXITED rc=0", 1);

    /* a full context says so */
    start("c", model, "--ctx 120");
    keys("-t c 'Hello' Enter");
    wait_for("c", "the context is full; /reset to start over]", 1);
    keys("-t c 'More' Enter");
    wait_for("c", "(the context is full:", 1);
    keys("-t c /exit Enter");
    wait_for("c", "EXITED rc=0", 1);

    /* the prompt's editing */
    const char *turn = "new prompt tokens (";
    start("d", model, "--max-tokens 4");
    keys("-t d 'first message' Enter");
    wait_for("d", turn, 1);
    keys("-t d Up");
    keys("-t d Enter");
    wait_for("d", turn, 2);
    assert_int_equal(count("d", "> first message"), 2); /* Up brought it back */
    tmux("set-buffer 'pasted line one\npasted line two\npasted line three'");
    tmux("paste-buffer -p -t d"); /* bracketed, as terminals paste */
    wait_for("d", "[pasted text #1, 3 lines]", 1);
    keys("-t d Enter");
    wait_for("d", turn, 3);
    settle();
    assert_int_equal(count("d", turn), 3); /* three lines, one turn */
    keys("-t d 'one \\' Enter");
    wait_for("d", "... ", 1);
    keys("-t d 'two' Enter");
    wait_for("d", turn, 4);
    keys("-t d 'not yet'");
    keys("-t d C-d");
    settle();
    assert_int_equal(count("d", turn), 4); /* Ctrl-D on a non-empty line sends nothing */
    keys("-t d C-u '   ' Enter");
    settle();
    assert_int_equal(count("d", turn), 4); /* blank input is not a turn */
    keys("-t d /help Enter");
    wait_for("d", "forget the conversation and start over", 1);
    keys("-t d /quit Enter");
    wait_for("d", "EXITED rc=0", 1);
    char hist[4400];
    snprintf(hist, sizeof hist, "grep -q 'first\\\\040message' %s/edge0/history", state_dir);
    assert_int_equal(tu_run(hist), 0);
    start("e", model, "--max-tokens 4"); /* a new chat recalls the last one's messages */
    keys("-t e Up Up");
    wait_for("e", "> /help", 1);
    keys("-t e C-u /quit Enter");
    wait_for("e", "EXITED rc=0", 1);
    tmux("kill-server");

    /* piped: no escape codes from chat or demo (NO_COLOR unset) */
    char pipe_cmd[40000];
    snprintf(pipe_cmd, sizeof pipe_cmd,
             "printf 'hi\\n/stats\\n/quit\\n' | env -u NO_COLOR XDG_STATE_HOME=%s %s chat %s "
             "--max-tokens 4 --stats > %s/chat.out 2>&1 && env -u NO_COLOR %s demo %s --max-tokens 4 > "
             "%s/demo.out 2>&1 && ! grep -q \"$(printf '\\033')\" %s/chat.out %s/demo.out && "
             "grep -q 'new prompt tokens' %s/chat.out && "
             /* /stats and --stats at the end, on a checkpoint in memory: no cache to size */
             "[ $(grep -c '^stats: prefill' %s/chat.out) = 2 ] && "
             "grep -q 'experts: read from memory' %s/chat.out && ! grep -q 'cache_slots 0' %s/chat.out",
             state_dir, tu_bin(), model, dir, tu_bin(), model, dir, dir, dir, dir, dir, dir, dir);
    assert_int_equal(tu_run(pipe_cmd), 0);
    tu_rmtree(dir);
    free(dir);
}

/* Also after a failure: no chat left waiting in a tmux server. */
static int teardown(void **state) {
    (void)state;
    if (sock[0]) tmux("kill-server");
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test_teardown(test_chat_in_tmux, teardown)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
