/* Tool calls out of generated text, as the Qwen families write them.
 *
 * Two forms, both inside "<tool_call>" ... "</tool_call>":
 *   Qwen3 (JSON):       <tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>
 *   Qwen3.5 / 3.6 and Qwen3-Coder (XML):
 *       <tool_call>\n<function=f>\n<parameter=a>\nVALUE\n</parameter>\n</function>\n</tool_call>
 * Either form is recognised whatever the chat template: a model that writes
 * the other family's form is still understood. XML parameter values are
 * typed by the tool's JSON schema (tools[i].function.parameters.properties):
 * a "string" parameter (or one the schema does not list) stays a string;
 * number / integer / boolean / object / array / null values are parsed as
 * JSON, and kept as a string when they do not parse.
 *
 *     e0_tc_parser *p;
 *     e0_tc_parser_new(&p, tools, max_calls, err);    // tools: the request's array, borrowed
 *     e0_tc_feed(p, piece, n, &sink, user);           // as text is generated
 *     e0_tc_finish(p, &sink, user);                   // at the end
 *     if (e0_tc_calls(p)) finish_reason = "tool_calls";
 *     e0_tc_parser_free(p);
 *
 * A call is handed to the sink only once it is complete and valid: its name
 * (sink.call), then its arguments as a JSON object text in one or more pieces
 * (sink.args; the pieces concatenate to the whole object). Text that is not a
 * call goes to sink.content: text before a call, text after the last one.
 * Whitespace between a text and a call, or between calls, is dropped. A
 * "<tool_call>" that turns out malformed, and every byte after it, is content
 * (e0_tc_malformed); one cut off by the end of generation (max_tokens) is
 * handed on at e0_tc_finish as far as it got: the XML form with the
 * parameters that were complete (the one cut off left out, so the arguments
 * are a valid object), the JSON form with its name and "{}", nothing when
 * even the name was cut (e0_tc_truncated says so in every case). So the
 * streamed events, however the text is cut into pieces, are the same as for
 * the whole text, and nothing of a call's markup ever reaches content unless
 * the call failed.
 *
 * After max_calls calls (1 when parallel_tool_calls is false) everything
 * else is dropped and e0_tc_full says so, so that the caller can stop
 * generating.
 *
 * Details that are easy to get wrong:
 *  - an XML value may itself hold "</parameter>": a parameter ends at the
 *    first "</parameter>" followed (after whitespace) by "<parameter=" or
 *    "</function>"; likewise a JSON call ends where its object closes, so a
 *    "</tool_call>" inside a string argument does not end it;
 *  - the value's surrounding newline ("\nVALUE\n") is the template's, not the
 *    value's: one leading and one trailing "\n" are removed, nothing else;
 *  - JSON arguments are handed on verbatim (the model's own text), so a
 *    conversation rendered back with them is byte-for-byte the generated
 *    text;
 *  - "arguments" may be given as a string holding a JSON object (some
 *    models do); it is unwrapped.
 *
 * Threads: an e0_tc_parser belongs to one stream and one thread at a time. */
#ifndef E0_TEXT_TOOLCALL_H
#define E0_TEXT_TOOLCALL_H

#include <stdbool.h>
#include <stddef.h>

#include <cjson/cJSON.h>

#include "edge0.h"

#define TC_OPEN  "<tool_call>"
#define TC_CLOSE "</tool_call>"
/* The longest call text kept while waiting for its end; longer is malformed. */
#define TC_MAX_CALL (1u << 20)

/* The parser's API (e0_tc_*) is public: edge0.h. */

#endif
