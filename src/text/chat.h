/* The Qwen chat format (ChatML) and the text-side helpers of generation.
 *
 * chat_render turns an OpenAI-style messages array into the prompt string
 * that the Qwen3 chat_template (tokenizer_config.json, Jinja) renders, byte
 * for byte: system / user / assistant / tool messages, reasoning blocks,
 * tool definitions and tool calls, the generation prompt and the empty think
 * block of enable_thinking=false. The template is implemented as C logic, not
 * interpreted; see chat.c for the rules it follows.
 *
 *     chat_opts o;
 *     chat_opts_default(&o);
 *     o.enable_thinking = false;
 *     char *prompt;
 *     if (chat_render(messages, &o, &prompt, NULL, err)) ...;   // then e0_tokenizer_encode
 *     free(prompt);
 *
 * chat_stop holds back streamed text that may be the start of a stop string,
 * and chat_split_reasoning separates <think>...</think> from the answer.
 *
 * Threads: chat_render and chat_split_reasoning are reentrant; a chat_stop
 * belongs to one stream and one thread at a time.
 */
#ifndef E0_TEXT_CHAT_H
#define E0_TEXT_CHAT_H

#include <stdbool.h>
#include <stddef.h>

#include <cjson/cJSON.h>

#define CHAT_IM_START "<|im_start|>" /* token 151644 in Qwen3 */
#define CHAT_IM_END   "<|im_end|>"   /* token 151645, the turn's end (EOS) */

typedef enum {
    CHAT_FORMAT_QWEN3 = 1,
    CHAT_FORMAT_QWEN35,
    CHAT_FORMAT_CHATML,
} chat_format;

typedef struct {
    /* Which template: Qwen3's (also for CHAT_FORMAT_CHATML, and 0) or
     * Qwen3.5's. Default CHAT_FORMAT_QWEN3. */
    chat_format format;
    /* Appends "<|im_start|>assistant\n". Default true (the template's own
     * default is false; an engine renders prompts to generate from them). */
    bool add_generation_prompt;
    /* false appends "<think>\n\n</think>\n\n" after the generation prompt, as
     * the template does for enable_thinking=false. Default true. */
    bool enable_thinking;
    /* Tool definitions (a JSON array, each rendered with Python's
     * json.dumps into the system prompt) or NULL; an empty array is no tools.
     * Borrowed for the duration of the call. */
    const cJSON *tools;
} chat_opts;

void chat_opts_default(chat_opts *o);

/* Renders `messages` (a JSON array of {"role", "content", ...}) into a
 * malloc'd NUL-terminated UTF-8 string *out (length in *len if len != NULL).
 * Qwen3.5's template differs from Qwen3's as chat.c's second section says
 * (trimmed contents, XML tool calls, "<think>\n" opened by the generation
 * prompt, a system message only first, at least one user query).
 *
 * Accepted message fields (others are ignored, as by the template):
 *   role               "system" | "user" | "assistant" | "tool"
 *   content            string, or an array of {"type": "text", "text": ...}
 *                      parts (joined with "\n", as vLLM and llama.cpp do);
 *                      null or absent only for "assistant" (read as "")
 *   reasoning_content  assistant only: string or null
 *   tool_calls         assistant only: array of {"function": {"name",
 *                      "arguments"}} or {"name", "arguments"}; arguments a
 *                      JSON string (inserted verbatim) or a JSON value
 *                      (rendered with json.dumps)
 *   tool_call_id, name accepted and not rendered (the template ignores them)
 * Errors: E0_EFORMAT naming the message index and field ("messages[2].role:
 * unknown role \"developer\""), E0_EINVAL for a NULL argument, E0_ENOMEM. */
int chat_render(const cJSON *messages, const chat_opts *o, char **out, size_t *len, char *err);

/* Python json.dumps(v, ensure_ascii=False) of a cJSON value, as a malloc'd
 * string. Separators ", " and ": ", keys in document order, non-ASCII kept,
 * control characters escaped as Python does. An integral number below 2^53
 * in magnitude prints as an integer (cJSON does not keep whether the source
 * wrote "1" or "1.0"); others print as Python's repr(float). `what` names
 * the value in error messages. */
int chat_json_dumps(const cJSON *v, const char *what, char **out, char *err);

/* ---- Stop strings over a stream of decoded text -----------------------
 *
 * Feed each decoded piece; the matcher reports the text that is safe to show
 * now. Text that could be the beginning of a stop string is held back until
 * it is resolved, and so is an incomplete UTF-8 sequence at the end (a
 * byte-level BPE token may end inside a character), so every emitted chunk
 * ends on a character boundary. When a stop string completes, the text before
 * it is emitted, the stop string and everything after it are dropped, and
 * later feeds emit nothing. */
typedef struct chat_stop chat_stop;

typedef struct {
    const char *text; /* safe to emit; valid until the next call on the matcher */
    size_t len;
    int stop; /* index of the stop string that was hit, or -1 */
} chat_emit;

/* Copies the n stop strings (none may be empty). n == 0 still holds back
 * incomplete UTF-8. */
int chat_stop_new(chat_stop **out, const char *const *stops, size_t n, char *err);
/* Appends `len` bytes. e->stop >= 0 once a stop string has been hit (and on
 * every later call). Returns 0 or E0_ENOMEM. */
int chat_stop_feed(chat_stop *s, const char *piece, size_t len, chat_emit *e);
/* End of generation: emits whatever is still held back (a partial stop
 * match that never completed, an incomplete UTF-8 sequence) unless a stop
 * string was hit. */
void chat_stop_finish(chat_stop *s, chat_emit *e);
/* Forgets the stream; the stop strings are kept. */
void chat_stop_reset(chat_stop *s);
void chat_stop_free(chat_stop *s);

/* ---- Reasoning / answer split -----------------------------------------
 *
 * Splits a finished assistant output the way llama.cpp (reasoning_format
 * "deepseek") and vLLM's Qwen3 reasoning parser return it:
 *   "<think>R</think>C"  -> reasoning R, content C
 *   "R</think>C"         -> reasoning R, content C (a prompt that opened the
 *                           think block, as Qwen3-2507 / Qwen3.5 templates do)
 *   "<think>R" (no end)  -> reasoning R, content "" (cut off while thinking)
 *   "C" (no </think>)    -> no reasoning, content C unchanged
 * The opening tag counts only at the start (after whitespace). R is trimmed
 * of surrounding whitespace and C of leading whitespace, as llama.cpp does,
 * which is also what the template strips when the message is rendered back.
 * The slices point into `text`; nothing is allocated. */
typedef struct {
    bool has_reasoning;
    const char *reasoning;
    size_t reasoning_len;
    const char *content;
    size_t content_len;
} chat_split;

void chat_split_reasoning(const char *text, size_t len, chat_split *out);

/* ---- Which format a model's chat template asks for ---------------------
 *
 * A GGUF file (tokenizer.chat_template) or tokenizer_config.json carries
 * the template as Jinja; edge0 does not interpret Jinja but renders the
 * formats it knows in C (chat_render). chat_format_detect tells which one a
 * template is, from the markers each family's template has:
 *   <|im_start|> and the XML tool-call form "<function=" -> CHAT_FORMAT_QWEN35
 *   <|im_start|> and a think block "<think>"            -> CHAT_FORMAT_QWEN3
 *   <|im_start|> otherwise (Qwen2.5, other ChatML)      -> CHAT_FORMAT_CHATML
 * chat_render implements Qwen3's template (used for Qwen3 and other ChatML)
 * and Qwen3.5's (chat_opts.format). */

/* Detects the format of template_text[0..len). A NULL or empty template, or
 * one without <|im_start|>, is E0_EUNSUPPORTED with a message saying that
 * the template is not one edge0 renders (and how it begins). */
int chat_format_detect(const char *template_text, size_t len, chat_format *out, char *err);
/* "qwen3", "qwen3.5", "chatml"; "?" for anything else. */
const char *chat_format_name(chat_format f);

#endif
