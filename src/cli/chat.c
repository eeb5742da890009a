/* edge0 chat MODEL: a multi-turn conversation in the terminal.
 *
 * The session keeps every token of the conversation: each turn appends
 * only its own tokens (the end of the last answer, the new user message and
 * the generation prompt), so the history is never evaluated twice.
 * Ctrl-C stops the answer being generated; at the prompt it only reminds
 * how to leave. */
#include "cli/cli.h"
#include "cli/opts.h"
#include "util/json.h"
#include "edge0.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *HELP =
    "usage: edge0 chat MODEL [--system TEXT] [--prompt-file FILE] [--ctx N] [--no-think]\n"
    "\n"
    "Chats with MODEL, streaming each answer as it is generated. The conversation\n"
    "stays in the session: each turn evaluates only its own new tokens.\n"
    "\n"
    "  --system TEXT       a system message for the conversation\n"
    "  --prompt-file FILE  the first message, from FILE (\"-\": stdin), then the chat\n"
    "  --ctx N             context size in tokens (default 4096)\n"
    "  --no-think          start with thinking off (/think on|off switches it)\n"
    "\n"
    "At the prompt: line editing and history (Up/Down; kept in\n"
    "~/.local/state/edge0/history), a line ending in \\ continues on the next, a\n"
    "paste stays one message. /help lists the commands: /reset starts over, /stats\n"
    "shows speed and cache statistics, /think on|off switches the model's thinking,\n"
    "/quit (or /exit, or Ctrl-D on an empty line) leaves. Ctrl-C stops the answer\n"
    "being generated.\n"
    "\n";

static const char *COMMANDS_HELP =
    "/help            this list\n"
    "/reset           forget the conversation and start over\n"
    "/stats           speed, memory and expert-cache statistics so far\n"
    "/think on|off    let the model think before answering, or not\n"
    "/quit, /exit     leave (Ctrl-D on an empty line too)\n"
    "A line ending in \\ continues on the next; Ctrl-C stops an answer.";

static volatile sig_atomic_t interrupted;

static void on_sigint(int sig) {
    (void)sig;
    interrupted = 1;
}

static int piece(void *user, const char *text, size_t len) {
    (void)user;
    if (interrupted) return 1;
    fwrite(text, 1, len, stdout);
    fflush(stdout);
    return 0;
}

/* JSON string literal of s into a malloc'd buffer (util/json.h). */
static char *json_str_of(const char *s) {
    sbuf b = {0};
    sb_json_str(&b, s, strlen(s));
    if (b.oom) sb_free(&b);
    return b.p;
}

/* The text this turn appends: on the first turn the rendered system and
 * user messages, later the end of the previous answer and the user message,
 * each followed by the generation prompt. */
static int turn_text(e0_chat_format format, const char *system, const char *user, bool first, bool think,
                     char **out, size_t *len, char *err) {
    char *u = json_str_of(user), *sy = system && first ? json_str_of(system) : NULL, *msgs = NULL, *r = NULL;
    size_t rl = 0;
    int rc = E0_ENOMEM;
    if (u && (!system || !first || sy)) {
        size_t n = strlen(u) + (sy ? strlen(sy) : 0) + 96;
        if ((msgs = malloc(n))) {
            if (sy) snprintf(msgs, n, "[{\"role\":\"system\",\"content\":%s},{\"role\":\"user\",\"content\":%s}]", sy, u);
            else snprintf(msgs, n, "[{\"role\":\"user\",\"content\":%s}]", u);
            e0_chat_opts co;
            e0_chat_opts_default(&co);
            co.format = format; /* the model's own template */
            co.enable_thinking = think;
            rc = e0_chat_render(msgs, strlen(msgs), &co, &r, &rl, err);
        }
    }
    if (!rc) {
        const char *close = first ? "" : "<|im_end|>\n"; /* the answer stopped before its end-of-turn token */
        *len = strlen(close) + rl;
        if ((*out = malloc(*len + 1))) snprintf(*out, *len + 1, "%s%s", close, r);
        else rc = E0_ENOMEM;
    }
    if (rc == E0_ENOMEM) snprintf(err, E0_ERR_MAX, "out of memory");
    free(u);
    free(sy);
    free(msgs);
    free(r);
    return rc;
}

/* The conversation across turns. */
typedef struct {
    e0_engine *eng;
    e0_session *s;
    e0_text *text;
    const char *system;
    const e0_sample_opts *sample;
    long ctx;
    bool think, first, color;
    int32_t *prompt; /* the last turn's ids, the history before them included */
} chat_conv;

/* A line that is a command (/help, /reset, ...): runs it. 2: leave the
 * chat; 1: done; 0: not a command, a message to send. */
static int chat_command(chat_conv *c, const char *line) {
    if (!strcmp(line, "/exit") || !strcmp(line, "/quit")) return 2;
    if (!strcmp(line, "/help")) {
        printf("%s", COMMANDS_HELP);
        return 1;
    }
    if (!strcmp(line, "/reset")) {
        e0_session_reset(c->s);
        c->first = true;
        printf("(conversation reset)");
        return 1;
    }
    if (!strcmp(line, "/stats")) {
        printf("conversation: %d of %ld context tokens\n", e0_session_pos(c->s), c->ctx);
        cli_print_stats(c->eng, stdout);
        return 1;
    }
    if (!strncmp(line, "/think", 6)) {
        const char *arg = line + 6 + strspn(line + 6, " ");
        if (!strcmp(arg, "on") || !strcmp(arg, "off")) c->think = !strcmp(arg, "on");
        printf("(thinking %s%s)", c->think ? "on" : "off", *arg && strcmp(arg, "on") && strcmp(arg, "off") ? "; use /think on|off" : "");
        return 1;
    }
    if (line[0] == '/') {
        printf("(unknown command %s; /help lists them)", line);
        return 1;
    }
    return 0;
}

/* One turn: the message after the history, the answer streamed, its
 * counts. 0 (a turn that failed said why), or -1 out of memory (err). */
static int chat_turn(chat_conv *c, const char *line, char *err) {
    char *delta = NULL;
    size_t dl;
    int32_t *ids = NULL;
    size_t n_ids, n_hist;
    if (turn_text(e0_text_chat_format(c->text), c->system, line, c->first, c->think, &delta, &dl, err) || e0_text_encode(c->text, delta, dl, &ids, &n_ids, err)) {
        free(delta);
        printf("error: %s", err);
        return 0;
    }
    free(delta);
    const int32_t *hist = e0_session_history(c->s, &n_hist);
    if (!c->first && n_hist + n_ids + 1 > (size_t)c->ctx) {
        printf("(the context is full: %zu of %ld tokens used and this turn needs %zu more; /reset to start over, "
               "or restart with a larger --ctx)", n_hist, c->ctx, n_ids);
        free(ids);
        return 0;
    }
    free(c->prompt);
    c->prompt = malloc((n_hist + n_ids) * sizeof *c->prompt);
    if (!c->prompt) {
        free(ids);
        snprintf(err, E0_ERR_MAX, "out of memory");
        return -1;
    }
    memcpy(c->prompt, hist, n_hist * sizeof *c->prompt);
    memcpy(c->prompt + n_hist, ids, n_ids * sizeof *c->prompt);
    free(ids);
    e0_gen_result r;
    int rc = e0_generate(c->s, c->text, c->prompt, n_hist + n_ids, c->sample, piece, NULL, &r, err);
    if (rc == E0_ERANGE) {
        printf("(this message does not fit in the context of %ld tokens; /reset or use a larger --ctx)", c->ctx);
        return 0;
    }
    if (rc) {
        printf("\nerror: %s", err);
        c->first = true; /* a failed evaluation resets the session */
        return 0;
    }
    c->first = false;
    const char *why = r.finish == E0_FINISH_CANCELLED ? " stopped"
                      : r.finish == E0_FINISH_CONTEXT ? " -- the context is full; /reset to start over"
                      : r.finish == E0_FINISH_LENGTH  ? " (max tokens)"
                                                      : "";
    printf("\n%s[%d new prompt tokens (%d reused), %.1f tok/s prefill; %d tokens, %.1f tok/s%s]%s",
           c->color ? "\033[2m" : "", r.prompt_tokens - r.reused_tokens, r.reused_tokens,
           r.prefill_s > 0 ? (r.prompt_tokens - r.reused_tokens) / r.prefill_s : 0.0, r.completion_tokens,
           r.decode_s > 0 ? r.completion_tokens / r.decode_s : 0.0, why, c->color ? "\033[0m" : "");
    return 0;
}

int cmd_chat(int argc, char **argv) {
    const char *model = NULL, *system = NULL;
    char *first_msg = NULL; /* --prompt-file */
    long ctx = 4096;
    bool think = true;
    cli_engine ce;
    cli_engine_init(&ce);
    ce.sampling = true;
    const cli_opt opts[] = {
        CLI_OPT("--system", CLI_STR, &system),
        CLI_OPT("--prompt-file", CLI_FN, &first_msg, .fn = cli_opt_text_file, .need = "a file name"),
        CLI_OPT("--ctx", CLI_LONG, &ctx, .lo = 16, .hi = 1 << 24),
        CLI_OPT("--no-think", CLI_CLEAR, &think),
        {0},
    };
    const cli_args args = {.cmd = "chat", .help = HELP, .ce = &ce, .opts = opts, .pos = &model};
    const int parsed = cli_parse(&args, argc, argv);
    if (parsed) {
        free(first_msg);
        return parsed == 1 ? 0 : 2;
    }
    if (!model) {
        cli_error("chat needs MODEL (see edge0 chat --help)");
        free(first_msg);
        return 2;
    }
    if (cli_engine_finish(&ce) != 0) {
        free(first_msg);
        return 2;
    }
    ce.eo.n_ctx = (int32_t)ctx; /* a budget keeps room for this session's KV cache */
    char err[E0_ERR_MAX];
    e0_engine *eng = NULL;
    e0_session *s = NULL;
    e0_text *text = NULL;
    cli_line *in = NULL;
    char *line = NULL;
    chat_conv c = {0};
    int status = 1;
    if (e0_engine_open(&eng, model, &ce.eo, err) != E0_OK || e0_text_open(&text, model, err) != E0_OK) goto out;
    cli_engine_opened(&ce, eng);
    e0_session_opts so;
    e0_session_opts_default(&so);
    so.n_ctx = (int32_t)ctx;
    if (e0_session_new(eng, &so, &s, err) != E0_OK) goto out;
    struct sigaction sa = {0};
    sa.sa_handler = on_sigint; /* no SA_RESTART: a read at the prompt returns EINTR */
    sigaction(SIGINT, &sa, NULL);
    e0_model_info info;
    e0_engine_info(eng, &info);
    printf("edge0 chat: %s (%s, %d layers, %d experts, top-%d), context %ld tokens. /help lists "
           "the commands\n",
           model, info.family, info.n_layers, info.n_experts, info.top_k, ctx);
    c = (chat_conv){eng, s, text, system, &ce.sample, ctx, think, true, cli_color(), NULL};
    in = cli_line_open();
    if (!in) {
        snprintf(err, sizeof err, "out of memory");
        goto out;
    }
    for (;;) {
        free(line);
        line = NULL;
        printf("\n");
        interrupted = 0;
        bool intr = false;
        if (first_msg) { /* --prompt-file: the first turn */
            line = first_msg;
            first_msg = NULL;
            printf("> %s\n", line);
        } else if (!(line = cli_line_read(in, &intr))) {
            if (intr) {
                printf("\n(Ctrl-C stops an answer; /quit or Ctrl-D leaves)");
                continue;
            }
            printf("\n");
            break;
        }
        if (!line[strspn(line, " \t\r\n")]) continue; /* empty or blank: nothing to send */
        cli_line_add_history(in, line);
        const int cmd = chat_command(&c, line);
        if (cmd == 2) break;
        if (cmd == 1) continue;
        if (chat_turn(&c, line, err)) goto out;
    }
    if (ce.stats) {
        printf("\n");
        cli_print_stats(eng, stdout);
    }
    status = 0;
out:
    if (status) cli_error("%s", err);
    free(line);
    cli_line_close(in);
    free(first_msg);
    free(c.prompt);
    e0_text_free(text);
    e0_session_free(s);
    e0_engine_free(eng);
    return status;
}
