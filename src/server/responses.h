/* The OpenAI Responses API, a third front over the same engine:
 * POST /v1/responses (and /responses), plain and streamed (docs/design.md §8.8).
 *
 * As the Anthropic front does (anthropic.h), a Responses request is
 * translated into the chat request it means (request.h) and goes through
 * the same parser, renderer, engine thread, reasoning splitter and
 * tool-call parser; only the answer is written in the Responses shape.
 *
 *     srv_request r;  srv_resp_info *info;  char *prompt;  size_t n;  srv_error e;
 *     if (srv_responses_request(&r, &info, body, len, &defaults, &prompt, &n, &e)) reply(e);
 *     ... tokenize, submit as a job with j->responses and j->resp = info ...
 *     body = srv_responses_json(j, model, &len);              // or the stream:
 *     srv_resp_stream st = {0};
 *     srv_resp_stream_events(&st, &out, j, model);            // j->mu held; again on news
 *
 * Translation (request side, responses_req.c):
 *   instructions        string -> the system prompt; system and developer
 *                       messages in `input` join it (a blank line between,
 *                       in order), since the chat templates take one system
 *                       message, first (as the Anthropic front does)
 *   input               string (one user message) or items:
 *     message             {role: user | assistant | system | developer, content:
 *                         string | parts input_text / output_text / refusal};
 *                         input_image, input_file, input_audio are a 400
 *     reasoning           summary_text (or content reasoning_text) -> the
 *                         thinking of that assistant turn (reasoning_content;
 *                         the template drops it for turns before the last query);
 *                         encrypted_content is ignored (edge0 never makes any)
 *     function_call       {call_id, name, namespace?, arguments} -> the turn's tool_calls
 *     function_call_output {call_id, output: string | input_text parts} -> a tool message
 *     item_reference      a 400: edge0 keeps no responses
 *     Consecutive reasoning, assistant message and function_call items form
 *     one assistant turn; its texts are joined with nothing between, so the
 *     answer edge0 gave comes back as the one content it recorded and the
 *     next turn continues the session (engine.h, prompt reuse).
 *   tools               function {name, description, parameters, strict} ->
 *                       a chat tool; namespace {name, tools: [function...]}
 *                       (Codex) -> its functions, named NS__NAME in the prompt
 *                       (Codex's flat form) and answered as {name, namespace};
 *                       every other type (web_search, file_search, mcp,
 *                       custom, local_shell, ...) is left out of the prompt and
 *                       reported (info->ignored: the header
 *                       x-edge0-ignored-tools and a log line), never an error
 *   tool_choice         auto | none | required | {type: "function", name}
 *   text.format         text | json_object | json_schema {name, schema, strict}
 *                       -> response_format (constrained decoding); verbosity
 *                       is accepted and has no effect. With a forced call
 *                       (tool_choice required or a function) the call is the
 *                       whole output, so the format is checked and not
 *                       applied (the Agents SDK sends both on its first turn)
 *   reasoning           {effort, summary}: effort "none" or "minimal" turns
 *                       thinking off, any other effort on, absent: the
 *                       server's default; summary is accepted: the summary
 *                       edge0 returns is the whole thinking
 *   max_output_tokens, temperature [0, 2], top_p, parallel_tool_calls, stream
 *   metadata            object, echoed
 *   store               accepted and echoed as false: edge0 keeps nothing
 *   include, prompt_cache_key, prompt_cache_retention, client_metadata, user,
 *   safety_identifier, service_tier, truncation, stream_options, model:
 *                       checked, and without effect
 *   refused with a 400 naming them: previous_response_id and conversation
 *   (nothing is kept), background true, prompt, top_logprobs > 0,
 *   max_tool_calls > 1, include "message.output_text.logprobs", a hosted or
 *   allowed_tools tool_choice. Other unknown fields are ignored.
 *
 * Answers (responses.c): a response {id "resp_" + 24 letters and digits,
 * object "response", created_at, status completed | incomplete (with
 * incomplete_details {reason: "max_output_tokens"}, also for a full
 * context), model, output, usage, and the request's parameters}; output
 * items in the order they were generated: reasoning {id "rs_...", summary:
 * [{type: "summary_text", text}]}, message {id "msg_...", role
 * "assistant", status, content: [{type: "output_text", text, annotations:
 * []}]}, function_call {id "fc_...", call_id, name, arguments, status}.
 * The stream is OpenAI's event sequence, each event named by its data's
 * type with a sequence_number from 0: response.created,
 * response.in_progress, per item output_item.added ... output_item.done
 * (with the content_part / output_text, reasoning_summary_part /
 * reasoning_summary_text and function_call_arguments events between), then
 * response.completed or response.incomplete with the whole response (as
 * srv_responses_json writes it), or error and response.failed.
 *
 * Threads: reentrant; the stream writer runs with the job's mutex held. */
#ifndef E0_SERVER_RESPONSES_H
#define E0_SERVER_RESPONSES_H

#include "server/engine.h"
#include "server/request.h"

#include <stdbool.h>
#include <stddef.h>

/* What the answer needs of the request beyond srv_request (owned by the job). */
typedef struct srv_resp_info {
    char *echo;    /* the request's parameters the response repeats: JSON members "k":v,... */
    char *ignored; /* the tool types left out of the prompt, comma-separated, or NULL */
    cJSON *names;  /* namespaced functions [{"flat", "namespace", "name"}], or NULL */
} srv_resp_info;

void srv_resp_info_free(srv_resp_info *info);

/* Parses and translates a Responses body into *r and *info and renders its
 * prompt (*prompt malloc'd). 0, or -1 with *e filled (400, or 500 out of
 * memory); *r, *info and *prompt are then empty. */
int srv_responses_request(srv_request *r, srv_resp_info **info, const char *body, size_t len, const srv_defaults *d,
                          char **prompt, size_t *prompt_len, srv_error *e);

/* The whole response of a done job (malloc'd), or NULL out of memory. */
char *srv_responses_json(const srv_job *j, const char *model, size_t *len);

enum { SRV_RESP_NONE, SRV_RESP_REASONING, SRV_RESP_TEXT };

/* A stream's progress: what was sent of the job's answer. */
typedef struct {
    size_t r_sent, c_sent; /* bytes of reasoning and content sent */
    int calls_sent;
    int index;             /* the output_index of the open item, or of the next one */
    int open;              /* the open item: SRV_RESP_* */
    size_t open_from;      /* where the open item's text begins (in reasoning or content) */
    int seq;               /* the next event's sequence_number */
    int phase;             /* 0: nothing sent, 1: response.created sent, 2: all sent */
} srv_resp_stream;

/* The job has something the stream has not sent yet (j->mu held). */
bool srv_resp_stream_news(const srv_resp_stream *st, const srv_job *j);
/* Appends the events for what is new (j->mu held). */
void srv_resp_stream_events(srv_resp_stream *st, srv_buf *out, const srv_job *j, const char *model);

#endif
