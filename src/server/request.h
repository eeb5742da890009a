/* Request bodies of the OpenAI-compatible endpoints: JSON in, a validated
 * srv_request out, or an srv_error that says which field is wrong and how.
 *
 *     srv_defaults d;  srv_defaults_init(&d);      // or the server's options
 *     srv_request r;   srv_error e;
 *     if (srv_request_parse(&r, SRV_CHAT, body, len, &d, &e)) reply(e.status, e);
 *     char *prompt; size_t n;
 *     if (srv_request_render(&r, &prompt, &n, &e)) reply(e.status, e);
 *     ...
 *     srv_request_free(&r);
 *
 * The body is hostile input: every field is type-checked and range-checked
 * before use, unknown fields are ignored (as OpenAI clients send many), and
 * nothing here touches a model, so fuzz/fuzz_request.c runs it alone.
 *
 * Accepted fields (both endpoints unless marked):
 *   messages (chat)     non-empty array of {role: system|developer|user|assistant|tool,
 *                       content: string | [{type: "text", text}] | null (assistant)};
 *                       developer is read as system
 *   prompt (completions) string, or an array holding one string
 *   max_tokens, max_completion_tokens   integer >= 1 (the latter wins)
 *   temperature [0, 100], top_p (0, 1], top_k integer (<= 0: off),
 *   min_p [0, 1], presence_penalty / frequency_penalty [-2, 2],
 *   repeat_penalty (0, 10], seed integer, stop string | [string] (<= 16),
 *   stream bool, stream_options {include_usage bool}, n (must be 1),
 *   tools (chat) array of {type: "function", function: {name, description?,
 *   parameters?}}, tool_choice (chat) "auto" | "none" | "required" |
 *   {type: "function", function: {name}}, parallel_tool_calls bool,
 *   chat_template_kwargs {enable_thinking bool},
 *   enable_thinking / think bool (chat), model string (ignored),
 *   logprobs bool and top_logprobs 0..20 (chat),
 *   logprobs integer 0..5 and echo bool (completions: the prompt first in
 *   the text, with logprobs also its tokens' log-probabilities),
 *   user, metadata, store: false (informational; nothing is stored),
 *   response_format {type: "text" | "json_object" | "json_schema",
 *   json_schema: {name, schema?, strict?}}, echo false (chat), best_of 1,
 *   logit_bias {} (their neutral values).
 * Constrained decoding: response_format json_object / json_schema, and
 * tool_choice "required" or a named function, compile a grammar here
 * (text/schema.h; the tool calls in the form of the model's template), so a
 * schema keyword edge0 does not support is a 400 naming it before anything
 * is queued. Both at once is a 400 (only one can be enforced).
 * Refused with a 400 that names the field, because they would otherwise be
 * accepted and ignored: echo true on chat, suffix, best_of > 1, a non-empty
 * logit_bias, store true, the legacy functions / function_call, audio and
 * modalities other than text, prediction, web_search_options,
 * reasoning_effort.
 * JSON null counts as absent everywhere.
 *
 * Threads: reentrant; an srv_request belongs to one thread at a time. */
#ifndef E0_SERVER_REQUEST_H
#define E0_SERVER_REQUEST_H

#include "edge0.h"

#include <stdbool.h>
#include <stddef.h>

#include <cjson/cJSON.h>

#define SRV_MAX_STOP 16
#define SRV_MAX_COMPLETION_LOGPROBS 5 /* completions' logprobs, as OpenAI caps it */

typedef enum { SRV_CHAT, SRV_COMPLETION } srv_kind;

/* An error as the client sees it: {"error": {"message", "type", "code", "param"}}. */
typedef struct {
    int status;       /* HTTP status: 400, 401, 404, 405, 413, 500, 503 */
    const char *type; /* "invalid_request_error", "authentication_error", ... (static) */
    const char *code; /* "invalid_json", "invalid_type", ... (static) */
    char param[64];   /* the offending field ("messages[2].role"), or "" */
    char message[512];
} srv_error;

/* Fills *e and returns -1, so parsers can `return srv_fail(e, ...)`. */
/* cJSON helpers of the fronts that translate a body into the chat request
 * it means (anthropic_req.c, responses_req.c). srv_member: o.name, NULL
 * when absent or null. srv_add_message: {"role": role} appended to msgs,
 * or NULL (out of memory). srv_append_str: s appended to the string member
 * `name` of m (created empty); false when out of memory. */
const cJSON *srv_member(const cJSON *o, const char *name);
cJSON *srv_add_message(cJSON *msgs, const char *role);
bool srv_append_str(cJSON *m, const char *name, const char *s);

int srv_fail(srv_error *e, int status, const char *type, const char *code, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));

/* A request body parsed as a JSON object (the caller deletes it), or NULL
 * with *e a 400: not valid JSON (near which byte), or not an object. */
cJSON *srv_parse_object(const char *body, size_t len, srv_error *e);

/* What a request gets for the fields it leaves out (the server's options). */
typedef struct {
    e0_sample_opts sample; /* max_tokens 0: until end of turn or the end of the context */
    bool enable_thinking;
    e0_chat_format chat_format; /* the model's template (e0_text_chat_format) */
} srv_defaults;

void srv_defaults_init(srv_defaults *d);

typedef struct {
    srv_kind kind;
    cJSON *messages;         /* chat: the messages array (owned) */
    char *tools_json;        /* chat: the tools array as JSON text, or NULL */
    cJSON *tools;            /* chat: the same array (owned), or NULL */
    bool parse_tools;        /* chat: tools given and tool_choice is not "none" */
    e0_chat_format chat_format;
    bool parallel_tool_calls;
    char *prompt;            /* completions: the prompt text (owned) */
    size_t prompt_len;
    bool echo;               /* completions: the answer's text starts with the prompt */
    bool enable_thinking;    /* chat */
    bool hide_thinking;      /* Anthropic's thinking.display "omitted": thinking blocks come back empty */
    bool stream, include_usage;
    e0_sample_opts sample;   /* defaults overridden by the request; .stop points into stop[] or the defaults' */
    char *stop[SRV_MAX_STOP]; /* the request's stop strings (owned) */
    bool force_tools;        /* chat: tool_choice "required" or a named function */
    char *force_name;        /* chat: the named function (owned), or NULL */
    e0_grammar *grammar;     /* the output's grammar (owned; sample.grammar points to it), or NULL */
    double grammar_compile_s; /* the time compiling it */
    cJSON *check_schema;     /* response_format json_schema: checked after generation (owned), or NULL */
} srv_request;

/* Parses and validates a body. 0, or -1 with *e filled (status 400); *r is
 * then empty (srv_request_free is harmless either way). */
int srv_request_parse(srv_request *r, srv_kind kind, const char *body, size_t len, const srv_defaults *d,
                      srv_error *e);

/* The prompt text: the chat messages rendered with the Qwen chat template
 * (e0_chat_render), or the completion prompt. *out is malloc'd. 0, or -1
 * with *e filled (400 for a message the template rejects, 500 for memory). */
int srv_request_render(const srv_request *r, char **out, size_t *len, srv_error *e);

void srv_request_free(srv_request *r);

#endif
