/* The check after generation: a small JSON Schema validator for the keywords
 * a grammar does not enforce (text/schema.h: uniqueItems, not, multipleOf,
 * minProperties, maxProperties, propertyNames, and a minLength / maxLength
 * beside a pattern or format), run on the finished output.
 *
 *     char why[E0_ERR_MAX];
 *     if (schema_check(schema, value, why, sizeof why) > 0) ... // retry, or report why
 *
 * It validates the keywords the schema compiler accepts: type, enum, const,
 * properties, required, additionalProperties, items, minItems, maxItems,
 * uniqueItems, minLength, maxLength (in code points), minimum, maximum and
 * their exclusive forms, multipleOf, anyOf, oneOf (as anyOf, like the
 * grammar), allOf, not, $ref to "#", "#/$defs/NAME" or
 * "#/definitions/NAME", minProperties, maxProperties, propertyNames.
 * pattern and format are not re-checked (the grammar wrote them), so
 * inside "not" they count as satisfied. Pure; bounded by SCHEMA_MAX_DEPTH. */
#ifndef E0_TEXT_SCHEMA_CHECK_H
#define E0_TEXT_SCHEMA_CHECK_H

#include <cjson/cJSON.h>
#include <stddef.h>

/* 0: value satisfies schema; 1: it does not (why: the path and keyword at
 * fault, e.g. "/tags: uniqueItems"). */
int schema_check(const cJSON *schema, const cJSON *value, char *why, size_t why_len);

#endif
