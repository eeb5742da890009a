/* The progress bar of long commands (synth, convert): on a terminal a bar
 * redrawn in place with bytes, rate and ETA; otherwise one line every 5 s.
 * The rate is taken over a window of about 3 s, so the ETA follows the disk
 * once the page cache has filled. */
#include "cli/cli.h"

#include <stdio.h>
#include <string.h>

static void fmt_eta(char *buf, size_t n, double s) {
    if (!(s >= 0) || s > 360000) snprintf(buf, n, "--:--");
    else if (s >= 3600) snprintf(buf, n, "%d:%02d:%02d", (int)s / 3600, (int)s / 60 % 60, (int)s % 60);
    else snprintf(buf, n, "%d:%02d", (int)s / 60, (int)s % 60);
}

void cli_progress_update(cli_progress *st, cli_phase phase, double done, double total, double seconds) {
    if (seconds - st->win_t >= 3.0 || st->rate == 0) {
        if (seconds > st->win_t + 0.2) st->rate = (done - st->win_d) / (seconds - st->win_t);
        if (seconds - st->win_t >= 3.0) {
            st->win_t = seconds;
            st->win_d = done;
        }
    }
    char eta[32];
    fmt_eta(eta, sizeof eta, st->rate > 0 ? (total - done) / st->rate : -1);
    const double pct = total > 0 ? 100.0 * done / total : 100.0;
    const char *u = st->unit; /* " read" for convert, "" for synth */
    if (st->tty) {
        char bar[31];
        const int fill = (int)(pct * 30 / 100);
        for (int i = 0; i < 30; i++) bar[i] = i < fill ? '#' : '-';
        bar[30] = 0;
        if (phase == CLI_PHASE_WRITING)
            fprintf(stderr, "\r  [%s] %3.0f%%  %6.2f / %.2f GB%s  %7.1f MB/s  ETA %s   ", bar, pct, done / 1e9,
                    total / 1e9, u, st->rate / 1e6, eta);
        else if (phase == CLI_PHASE_SYNCING)
            fprintf(stderr, "\r  [%s] %3.0f%%  %6.2f / %.2f GB%s  syncing to disk...             ", bar, pct,
                    done / 1e9, total / 1e9, u);
        else
            fprintf(stderr, "\r  [%s] 100%%  %6.2f GB%s in %.1f s                                \n", bar,
                    total / 1e9, u, seconds);
        fflush(stderr);
    } else if ((phase == CLI_PHASE_SYNCING && st->last_line > 0) ||
               (phase == CLI_PHASE_WRITING && seconds - st->last_line >= 5.0)) {
        st->last_line = seconds;
        if (phase == CLI_PHASE_SYNCING)
            fprintf(stderr, "edge0 %s: %.2f GB %s in %.1f s, syncing to disk\n", st->cmd, total / 1e9,
                    st->verb, seconds);
        else
            fprintf(stderr, "edge0 %s: %3.0f%%  %.2f / %.2f GB%s  %.1f MB/s  ETA %s\n", st->cmd, pct, done / 1e9,
                    total / 1e9, u, st->rate / 1e6, eta);
    }
}

static volatile sig_atomic_t g_cancel;
static struct sigaction g_old_int, g_old_term;

static void on_cancel_signal(int sig) {
    (void)sig;
    g_cancel = 1;
}

const volatile sig_atomic_t *cli_cancel_begin(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_cancel_signal;
    sigemptyset(&sa.sa_mask);
    g_cancel = 0;
    sigaction(SIGINT, &sa, &g_old_int);
    sigaction(SIGTERM, &sa, &g_old_term);
    return &g_cancel;
}

void cli_cancel_end(void) {
    sigaction(SIGINT, &g_old_int, NULL);
    sigaction(SIGTERM, &g_old_term, NULL);
}
