/* The OpenAI protocol's bodies (openai.c): answers of /v1/chat/completions
 * and /v1/completions, their error objects, and the pieces the event
 * stream (http.c) reuses. Beside anthropic.c, the second protocol. */
#ifndef E0_SERVER_OPENAI_H
#define E0_SERVER_OPENAI_H

#include "server/http_int.h"
#include "server/json.h"

#include <stdbool.h>
#include <stddef.h>

/* {"error": {...}} for e (malloc'd). */
char *srv_openai_error_json(const srv_error *e, size_t *len);
/* The finish_reason of a done job. */
const char *srv_openai_finish(const srv_job *j);
/* Pieces of an answer or of a stream's chunk, appended to b. */
void srv_openai_call_json(srv_buf *b, const srv_call *c, int index, bool with_head, bool stream, const char *a, size_t n);
void srv_openai_usage_json(srv_buf *b, const e0_gen_result *r);
void srv_openai_timings_json(srv_buf *b, const srv_job *j);
void srv_openai_head_json(srv_buf *b, const srv *S, const srv_job *j, const char *object);
void srv_openai_logprobs_json(srv_buf *b, const srv *S, const srv_job *j, size_t from, size_t to);
void srv_openai_comp_logprobs_json(srv_buf *b, const srv *S, const srv_job *j, size_t from, size_t to, size_t *chars);
/* The whole answer of a done job (malloc'd), or NULL out of memory. */
char *srv_openai_answer_json(const srv *S, const srv_job *j, size_t *len);

#endif
