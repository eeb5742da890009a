/* Grammars (text/grammar.h) for structured output: a JSON schema, any JSON
 * object, and the tool calls of the Qwen chat templates.
 *
 *     gram *g;
 *     if (e0_grammar_response_format(response_format, &g, err)) ...   // 400 with err
 *     if (e0_grammar_tools(tools, "get_weather", 1, E0_TOOL_FORM_XML, &g, err)) ...
 *
 * Every grammar has three roots (gram_matcher_opts.root):
 *   SCHEMA_ROOT_PLAIN       the output is the value / the calls, at once;
 *   SCHEMA_ROOT_THINK_OPEN  the prompt opened a think block (Qwen3.5's
 *                           "<think>\n"): free text up to "</think>", a
 *                           little whitespace, then the value;
 *   SCHEMA_ROOT_THINK_MAY   the model may open one itself first (Qwen3 with
 *                           thinking on).
 * The reasoning is not constrained (a budget that closes it is the caller's,
 * see generate.c); the answer after it is.
 *
 * JSON schema keywords (docs/design.md §8.6.1 has the table): type (a name
 * or an array of names: object, array, string, number, integer, boolean,
 * null), properties, required, additionalProperties (false; true, absent or
 * a schema allow other keys), items (one schema), minItems, maxItems, enum,
 * prefixItems (tuples; draft 7's items array and additionalItems too),
 * const, anyOf, oneOf (read as anyOf: a value matches at least one branch,
 * exactly one when the branches are disjoint), allOf (merged:
 * schema_merge.c), minLength, maxLength, pattern (schema_regex.h), format
 * (date, time, date-time, email, uri, uuid, ipv4, ipv6, hostname; others are
 * annotations), minimum / maximum / exclusiveMinimum / exclusiveMaximum
 * (schema_num.c), nullable (OpenAPI), $ref to "#", "#/$defs/NAME" or
 * "#/definitions/NAME" (recursion allowed when it consumes text; keywords
 * beside it merged as allOf), propertyNames and min/maxProperties on maps;
 * the keywords checked after generation (text/schema_check.h): not,
 * uniqueItems, multipleOf, and min/maxProperties, propertyNames elsewhere;
 * the annotations title, description, default, examples, $schema, $id,
 * $anchor, $comment, deprecated, readOnly, writeOnly, contentMediaType,
 * contentEncoding, $defs, definitions. Any other keyword is an
 * E0_EUNSUPPORTED error naming it and where it is (never ignored).
 *
 * Output shape, and the bounds that make a random model finish:
 *  - properties come in the order the schema lists them (required ones
 *    always, optional ones or not), other keys after them; other keys are
 *    written without escapes and never repeat a listed key;
 *  - whitespace between tokens: none, one space, or a newline and up to 32
 *    spaces or tabs (a model cannot loop on spaces);
 *  - integers have at most 15 digits and numbers at most 15 + 15 digits
 *    and a two-digit exponent, so JSON.parse reads them exactly;
 *  - strings are valid UTF-8; \u escapes exclude the surrogates (which
 *    some JSON parsers refuse alone);
 *  - tool calls: at most E0_GRAMMAR_MAX_CALLS in one answer.
 * Limits: schemas nested deeper than SCHEMA_MAX_DEPTH, enums of more than
 * SCHEMA_MAX_ENUM values, and grammars over the builder's limits are
 * E0_ERANGE errors; every error message names the place in the schema.
 *
 * Tool calls (text/toolcall.h parses them back):
 *   E0_TOOL_FORM_JSON (Qwen3):  <tool_call>\n{"name": "NAME", "arguments": {...}}\n</tool_call>
 *   E0_TOOL_FORM_XML (Qwen3.5): <tool_call>\n<function=NAME>\n<parameter=KEY>\nVALUE\n</parameter>\n
 *                              </function>\n</tool_call>
 * calls separated by "\n". In the XML form a parameter's value is written as
 * the tool-call parser reads it: raw text for a parameter it reads as a
 * string (type string, or no type and no anyOf/oneOf), JSON otherwise; a
 * raw value never holds "</parameter>" (one with a pattern, format or
 * length: its wildcards never produce '<').
 *
 * Pure: no model, no I/O; fuzz/fuzz_schema.c runs it alone. */
#ifndef E0_TEXT_SCHEMA_H
#define E0_TEXT_SCHEMA_H

#include "text/grammar.h"

#include <cjson/cJSON.h>

#define SCHEMA_MAX_DEPTH 64
#define SCHEMA_MAX_ENUM  4096

enum { SCHEMA_ROOT_PLAIN = 0, SCHEMA_ROOT_THINK_OPEN = 1, SCHEMA_ROOT_THINK_MAY = 2 };

/* e0_grammar_response_format and e0_grammar_tools (edge0.h) are this
 * file's public entries. */

/* The grammar of a JSON schema value (the value alone). */
int schema_value_grammar(const cJSON *schema, gram **out, char *err);

#endif
