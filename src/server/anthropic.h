/* The Anthropic Messages API, a second front over the same engine:
 * POST /v1/messages and POST /v1/messages/count_tokens.
 *
 * A Messages request is translated into the OpenAI chat request it means
 * (request.h) and goes through the same parser, renderer, engine thread,
 * reasoning splitter and tool-call parser; only the answer is written in
 * Anthropic's shape. So tool_choice {"type": "any"} and {"type": "tool",
 * "name"} are OpenAI's "required" and named function, and are accepted or
 * refused exactly where those are.
 *
 *     srv_request r;  char *prompt;  size_t n;  srv_error e;
 *     if (srv_anthropic_request(&r, false, body, len, &defaults, &prompt, &n, NULL, &e)) reply(e);
 *     ... tokenize, submit as a job with j->anthropic set ...
 *     body = srv_anthropic_message_json(j, model, &len);       // or the stream:
 *     srv_anth_stream st = {0};
 *     srv_anth_stream_events(&st, &out, j, model);             // j->mu held; again on news
 *
 * Translation (request side, anthropic_req.c):
 *   system            string | [{type: "text", text}]  -> a system message
 *   messages          user / assistant, content a string or blocks:
 *     text              -> the message's text (parts joined as chat.h joins them)
 *     tool_result       -> a tool message {tool_call_id, content}; content a
 *                          string or text blocks; is_error true prefixes "Error: "
 *     tool_use          -> the assistant's tool_calls {id, function: {name, arguments: input}}
 *     thinking          -> the assistant's reasoning_content; redacted_thinking is dropped
 *     a last assistant message of text is a prefill: the prompt ends with
 *     it (thinking off), and the answer continues it
 *   tools             [{name, description?, input_schema}] -> {type: "function", function:
 *                     {name, description, parameters}}; server tools (a type other
 *                     than "custom") are refused
 *   tool_choice       auto | none | any -> "required" | tool -> a named function;
 *                     disable_parallel_tool_use -> parallel_tool_calls false
 *   thinking          {type: "enabled", budget_tokens} / {type: "disabled"} -> the
 *                     Qwen thinking switch; absent: the server's default (serve
 *                     --no-think). budget_tokens is checked as Anthropic checks it
 *                     (>= 1024, < max_tokens) but not enforced: thinking ends when
 *                     the model ends it or max_tokens does
 *   max_tokens (required), temperature [0, 1], top_p, top_k, stop_sequences,
 *   stream, metadata {user_id}, model (required; the server's model answers)
 *   cache_control on blocks and tools is accepted and ignored (the session's
 *   prefix reuse is automatic). Any other field, block type or block member
 *   is a 400 naming it.
 *
 * Answers (anthropic.c): id "msg_" + 24 letters and digits; content blocks
 * thinking (signature ""), text and tool_use (id "toolu_" + the call's 24
 * characters, input the arguments object) in the order they were generated;
 * stop_reason end_turn / max_tokens (also for a full context) /
 * stop_sequence (with stop_sequence) / tool_use; usage {input_tokens,
 * output_tokens}. Errors {"type": "error", "error": {"type", "message"}},
 * with 529 overloaded_error where the OpenAI front says 503.
 *
 * Threads: reentrant; the stream writer runs with the job's mutex held. */
#ifndef E0_SERVER_ANTHROPIC_H
#define E0_SERVER_ANTHROPIC_H

#include "server/engine.h"
#include "server/request.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Parses and translates a Messages body into *r and renders its prompt
 * (*prompt malloc'd). count_only: a count_tokens body (max_tokens may be
 * left out). *prefilled (may be NULL): the prompt ends with a prefill, so
 * it is more than r->messages rendered. 0, or -1 with *e filled (400, or
 * 500 out of memory); *r is then empty. */
int srv_anthropic_request(srv_request *r, bool count_only, const char *body, size_t len, const srv_defaults *d,
                          char **prompt, size_t *prompt_len, bool *prefilled, srv_error *e);

/* Anthropic's error type for an HTTP status, and the status it uses
 * (529 for 503). */
const char *srv_anthropic_error_type(int status);
int srv_anthropic_status(int status);
/* {"type":"error","error":{"type","message"}} (malloc'd), for e->status. */
char *srv_anthropic_error_json(const srv_error *e, size_t *len);

/* prefix + 24 letters and digits from `seed` (splitmix64), NUL-terminated in out[n]. */
void srv_anthropic_id(char *out, size_t n, const char *prefix, uint64_t seed);

/* The whole answer of a done job (malloc'd), or NULL out of memory. */
char *srv_anthropic_message_json(const srv_job *j, const char *model, size_t *len);

/* A stream's progress: what was sent of the job's answer. */
enum { SRV_ANTH_NONE, SRV_ANTH_THINKING, SRV_ANTH_TEXT };
typedef struct {
    size_t r_sent, c_sent; /* bytes of reasoning and content sent */
    int calls_sent;
    int index;             /* the next content block's index */
    int open;              /* the open block: SRV_ANTH_* */
    int phase;             /* 0: nothing sent, 1: message_start sent, 2: all sent */
} srv_anth_stream;

/* The job has something the stream has not sent yet (j->mu held). */
bool srv_anth_stream_news(const srv_anth_stream *st, const srv_job *j);
/* Appends the events for what is new (j->mu held): message_start and a
 * ping first, content block events, and once the job is done
 * message_delta and message_stop (or an error event). */
void srv_anth_stream_events(srv_anth_stream *st, srv_buf *out, const srv_job *j, const char *model);

#endif
