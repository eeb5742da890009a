/* The chat prompt: line editing and history through libedit (BSD-licensed,
 * Debian's libedit; GNU readline's licence does not fit a permissively
 * licensed project) when stdin is a terminal, plain reads otherwise.
 *
 * A turn may span lines: a line ending in a backslash continues on the
 * next, and a paste arrives whole through the terminal's bracketed paste
 * mode (the text between ESC [200~ and ESC [201~ is kept aside and shown as
 * a marker until the line is sent). History lives in
 * $XDG_STATE_HOME/edge0/history (default ~/.local/state/edge0/history). */
#include "cli/cli.h"

#include "util/sbuf.h"

#include <errno.h>
#include <histedit.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <wchar.h>

#define PASTE_MAX (1 << 20)

struct cli_line {
    EditLine *el; /* NULL: stdin is not a terminal */
    History *hist;
    HistEvent ev;
    char path[4096]; /* the history file, "" for none */
    const char *prompt;
    char *paste; /* text of the pastes of the line being edited, one after another */
    size_t paste_len;
    int pastes;
};

static cli_line *g_line; /* libedit's callbacks get no user pointer we can rely on */

static char *prompt_fn(EditLine *el) {
    (void)el;
    return (char *)(g_line && g_line->prompt ? g_line->prompt : "> ");
}

/* Bound to ESC [200~: reads up to ESC [201~ and keeps the text aside. */
static unsigned char paste_fn(EditLine *el, int ch) {
    (void)ch;
    cli_line *l = g_line;
    static const char end[] = "\033[201~";
    size_t matched = 0, start = l->paste_len;
    char c;
    while (el_getc(el, &c) == 1) {
        if (c == end[matched]) {
            if (++matched == sizeof end - 1) break;
            continue;
        }
        for (size_t k = 0; k < matched && l->paste_len < PASTE_MAX; k++)
            l->paste[l->paste_len++] = end[k];
        matched = 0;
        if (c == '\r') c = '\n';
        if (l->paste_len < PASTE_MAX) l->paste[l->paste_len++] = c;
    }
    int lines = 1;
    for (size_t k = start; k < l->paste_len; k++)
        lines += l->paste[k] == '\n' && k + 1 < l->paste_len;
    l->paste[l->paste_len++] = 0; /* each paste ends with a NUL */
    char marker[64];
    snprintf(marker, sizeof marker, "[pasted text #%d, %d line%s]", ++l->pastes, lines,
             lines == 1 ? "" : "s");
    el_insertstr(el, marker);
    return CC_REDISPLAY;
}

static void history_path(char *out, size_t n) {
    const char *state = getenv("XDG_STATE_HOME"), *home = getenv("HOME");
    char dir[4000];
    if (state && *state)
        snprintf(dir, sizeof dir, "%s/edge0", state);
    else if (home && *home)
        snprintf(dir, sizeof dir, "%s/.local/state/edge0", home);
    else {
        out[0] = 0;
        return;
    }
    for (char *p = dir + 1; *p; p++) /* mkdir -p */
        if (*p == '/') {
            *p = 0;
            mkdir(dir, 0700);
            *p = '/';
        }
    mkdir(dir, 0700);
    snprintf(out, n, "%s/history", dir);
}

cli_line *cli_line_open(void) {
    cli_line *l = calloc(1, sizeof *l);
    if (!l) return NULL;
    if (!isatty(STDIN_FILENO) || !isatty(STDOUT_FILENO)) return l;
    if (!(l->paste = malloc(PASTE_MAX + 1)) || !(l->el = el_init("edge0", stdin, stdout, stderr))) {
        free(l->paste);
        l->paste = NULL;
        l->el = NULL;
        return l;
    }
    g_line = l;
    l->hist = history_init();
    history(l->hist, &l->ev, H_SETSIZE, 1000);
    history(l->hist, &l->ev, H_SETUNIQUE, 1);
    history_path(l->path, sizeof l->path);
    if (l->path[0]) history(l->hist, &l->ev, H_LOAD, l->path);
    el_set(l->el, EL_EDITOR, "emacs");
    el_set(l->el, EL_HIST, history, l->hist);
    el_set(l->el, EL_PROMPT, prompt_fn);
    /* the wide call: the narrow one copies name and help with wcsdup and
     * never frees them (LeakSanitizer saw it) */
    el_wset(l->el, EL_ADDFN, L"edge0-paste", L"bracketed paste", paste_fn);
    el_set(l->el, EL_BIND, "\033[200~", "edge0-paste", NULL);
    return l;
}

/* line with each paste marker replaced by its text. */
static char *expand_pastes(cli_line *l, const char *line) {
    size_t cap = strlen(line) + l->paste_len + 1, o = 0;
    char *out = malloc(cap);
    if (!out) return NULL;
    const char *p = line, *next = l->paste;
    for (int k = 1; k <= l->pastes; k++) {
        char marker[64];
        snprintf(marker, sizeof marker, "[pasted text #%d, ", k);
        const char *at = strstr(p, marker), *close = at ? strchr(at, ']') : NULL;
        const size_t plen = strlen(next);
        if (close) {
            memcpy(out + o, p, (size_t)(at - p));
            o += (size_t)(at - p);
            memcpy(out + o, next, plen);
            o += plen;
            p = close + 1;
        }
        next += plen + 1;
    }
    strcpy(out + o, p);
    return out;
}

/* One physical line: malloc'd, without its newline; NULL at end of input
 * (errno EINTR when Ctrl-C interrupted the read). */
static char *read_one(cli_line *l, const char *prompt) {
    if (!l->el) {
        fputs(prompt, stdout);
        fflush(stdout);
        char *buf = NULL;
        size_t cap = 0;
        errno = 0;
        ssize_t n = getline(&buf, &cap, stdin);
        if (n < 0) {
            const int e = errno;
            free(buf);
            if (ferror(stdin)) clearerr(stdin);
            errno = e;
            return NULL;
        }
        buf[strcspn(buf, "\r\n")] = 0;
        return buf;
    }
    l->prompt = prompt;
    int count = 0;
    fputs("\033[?2004h", stdout); /* bracketed paste mode on while we read */
    fflush(stdout);
    const char *s = el_gets(l->el, &count);
    const int e = errno;
    fputs("\033[?2004l", stdout);
    fflush(stdout);
    if (!s || count <= 0) {
        el_reset(l->el);
        errno = count < 0 ? e : 0;
        return NULL;
    }
    char *line = expand_pastes(l, s);
    size_t n = line ? strlen(line) : 0;
    while (n && (line[n - 1] == '\n' || line[n - 1] == '\r'))
        line[--n] = 0;
    return line;
}

char *cli_line_read(cli_line *l, bool *interrupted) {
    *interrupted = false;
    l->paste_len = 0;
    l->pastes = 0;
    char *turn = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        char *line = read_one(l, turn ? "... " : "> ");
        if (!line) {
            *interrupted = errno == EINTR;
            if (turn && !*interrupted) return turn; /* end of input after a continued line */
            free(turn);
            return NULL;
        }
        size_t n = strlen(line);
        const bool more = n && line[n - 1] == '\\';
        if (more) line[--n] = '\n';
        if (buf_append(&turn, &len, &cap, line, n)) {
            free(line);
            free(turn);
            return NULL;
        }
        free(line);
        if (!more) return turn;
    }
}

void cli_line_add_history(cli_line *l, const char *text) {
    if (!l->el) return;
    history(l->hist, &l->ev, H_ENTER, text);
    if (l->path[0]) history(l->hist, &l->ev, H_SAVE, l->path);
}

void cli_line_close(cli_line *l) {
    if (!l) return;
    if (l->el) {
        el_end(l->el);
        history_end(l->hist);
    }
    if (g_line == l) g_line = NULL;
    free(l->paste);
    free(l);
}
