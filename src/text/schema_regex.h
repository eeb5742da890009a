/* ECMAScript regular expressions (JSON Schema "pattern", and the fixed
 * patterns of "format") compiled into grammar rules (text/grammar.h) that
 * produce exactly the strings the expression matches.
 *
 *     int32_t body;
 *     if (rx_rule(b, "^[a-z]{2,8}(-[0-9]+)?$", RX_FORM_JSON, &body, err)) ...  // 400 with err
 *     // body: the characters between the quotes of a JSON string
 *
 * Supported: literals, escapes (\d \w \s \D \W \S, \t \n \r \v \f \0,
 * \xHH, \uXXXX, \u{X...}, \cX, escaped punctuation), classes with ranges
 * and negation ([...], [^...]), ".", groups ((...), (?:...), (?<name>...)),
 * alternation, the quantifiers * + ? {n} {n,} {n,m} (lazy forms read as
 * greedy: a grammar has no preference), and the anchors ^ and $ where they
 * anchor a whole alternative of the pattern. As JSON Schema says, a pattern
 * is unanchored: a side without an anchor lets any characters come before
 * (after) the match.
 *
 * Refused with E0_EUNSUPPORTED and the reason: back-references,
 * lookahead and lookbehind, \b \B, \p{...}, ^ or $ inside the text (not
 * anchoring an alternative), and E0_ERANGE: a pattern longer than
 * RX_MAX_PATTERN bytes, nested deeper than RX_MAX_DEPTH, a count above
 * GRAM_MAX_REP, or one whose expansion (counts multiplied out) passes
 * RX_MAX_EXPANDED characters. Messages do not name the keyword: the caller
 * prefixes it.
 *
 * Forms: RX_FORM_JSON writes each character as a JSON string holds it
 * (quote, backslash and control characters escaped: \" \\ \n ... or \u00XX);
 * RX_FORM_RAW writes raw UTF-8 (the XML tool-call form's parameter values),
 * where "." , negated classes and the unanchored sides never produce '<'
 * (so that a value cannot run into "</parameter>"); a '<' the pattern names
 * itself is produced.
 *
 * Pure: no I/O; fuzz/fuzz_regex.c runs it alone. */
#ifndef E0_TEXT_SCHEMA_REGEX_H
#define E0_TEXT_SCHEMA_REGEX_H

#include "text/grammar.h"

#define RX_MAX_PATTERN  4096
#define RX_MAX_DEPTH    64
#define RX_MAX_EXPANDED 20000

typedef enum { RX_FORM_JSON = 0, RX_FORM_RAW = 1 } rx_form;

/* Adds the rules of `pattern` (UTF-8, NUL-terminated) to b; *out is the
 * rule of the string's characters. 0, or E0_EUNSUPPORTED / E0_ERANGE /
 * E0_EINVAL (a syntax error) / E0_ENOMEM with the reason in err. */
int rx_rule(gram_builder *b, const char *pattern, rx_form form, int32_t *out, char *err);

/* Any one character of the form (JSON: escaped where needed; raw: not '<'). */
int32_t rx_any_char(gram_builder *b, rx_form form);

#endif
