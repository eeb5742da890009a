/* Helpers for the end-to-end tests of edge0 serve (test_messages.c,
 * test_completions.c): the tiny synthesized model with the real Qwen3
 * tokenizer, `edge0 serve` as a child process, curl as the client, and a
 * dotted-path reader for JSON answers. Failures fail the running cmocka test. */
#ifndef E0_SRVUTIL_H
#define E0_SRVUTIL_H

#include "testutil.h"
#include "edge0.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <sys/types.h>

typedef struct {
    pid_t pid;
    int port;
    char log[4300];
} su_server;

/* Writes the tiny random model (seed 11) with the Qwen3 tokenizer to dir/m; returns its path (static). */
const char *su_model(const char *dir);
/* Starts `edge0 serve MODEL --port 0 --io pread --temp 0 ARGS`, its log in
 * dir/NAME.log; returns once it listens. */
void su_start(su_server *s, const char *dir, const char *model, const char *name, const char *args);
/* SIGTERM; the server must exit 0 (under ASan: without leaks). */
void su_stop(su_server *s);
/* One request through curl (body through a file in dir); `headers` are
 * curl arguments. *out (may be NULL) gets the body; returns the status. */
int su_http(int port, const char *dir, const char *method, const char *path, const char *body, const char *headers,
            char **out);
/* The whole of a stream or file (malloc'd, NUL-terminated). */
char *su_read_all(FILE *f);
char *su_slurp(const char *path);
/* j at a dotted path ("content.0.text"); fails the test when absent. */
const cJSON *su_at(const cJSON *j, const char *path);
const char *su_str(const cJSON *j, const char *path);
double su_num(const cJSON *j, const char *path);
/* Parses text as JSON; fails the test (showing `what`) when it is not. */
cJSON *su_json(const char *text, const char *what);
/* What must match between two servings of one /v1/completions request with
 * logprobs: the text, the tokens and their log-probabilities, the finish
 * reason and the token count, as one JSON string (malloc'd). */
char *su_completion_answer(const char *resp);

/* A generate function for an in-process server (srv_opts.generate): it
 * answers with the text after the last "SCRIPT:" in the prompt (to the end
 * of that turn or tool result), token by token; a final '~' is left out
 * and ends it as max_tokens would. It keeps the prompt it was given
 * (decoded): su_last_prompt returns a copy ("" before any), su_scripted_free
 * forgets it. */
int su_scripted(e0_session *s, const e0_text *t, const int32_t *prompt, size_t n, const e0_sample_opts *o,
                e0_token_fn fn, void *user, e0_gen_result *r, char *err);
char *su_last_prompt(void);
void su_scripted_free(void);

/* A server in this process over su_model in a new temp dir, answered by
 * su_scripted: su_inproc_open opens the engine and the text; su_inproc_start
 * serves them with the tests' settings (model "m", a free port, api key
 * `key`, 2048 positions, su_scripted) in chat format `format`, with CORS for
 * `cors` (NULL: none); su_inproc_stop stops the server only (to start it
 * again), su_inproc_close everything, the dir included. */
struct srv;
typedef struct {
    char *dir;
    e0_engine *eng;
    e0_text *text;
    struct srv *srv;
    int port;
} su_inproc;
void su_inproc_open(su_inproc *ip);
void su_inproc_start(su_inproc *ip, const char *key, e0_chat_format format, const char *cors);
void su_inproc_stop(su_inproc *ip);
void su_inproc_close(su_inproc *ip);

/* The value of a counter or gauge NAME in GET /metrics. */
double su_metric(int port, const char *dir, const char *headers, const char *name);

#endif
