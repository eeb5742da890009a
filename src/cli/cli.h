/* Commands of the edge0 binary. Each returns the process exit status. */
#ifndef E0_CLI_H
#define E0_CLI_H

int cmd_logits(int argc, char **argv);
int cmd_demo(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_synth(int argc, char **argv);

/* Peak resident set size of this process in bytes. */
unsigned long long cli_peak_rss(void);

/* "error: ..." on stderr. */
void cli_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Parses a non-negative integer option value; exits-free: returns -1 on error. */
long cli_parse_long(const char *opt, const char *val, long lo, long hi);
/* Seconds on a monotonic clock. */
double cli_now(void);

#endif
