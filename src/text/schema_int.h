/* The schema compiler's shared internals (schema.c, schema_json.c,
 * schema_tools.c, schema_num.c): the compile context and the pieces each
 * file makes for the others. Not an API: text/schema.h is. */
#ifndef E0_TEXT_SCHEMA_INT_H
#define E0_TEXT_SCHEMA_INT_H

#include "text/schema.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SC_MAX_REFS        256
#define SC_MAX_MERGE_STEPS 4096

typedef struct {
    gram_builder *b;
    char *err;
    int rc;
    const cJSON *doc; /* what "#" means */
    struct {
        const cJSON *target;
        int32_t rule;
    } refs[SC_MAX_REFS];
    int n_refs;
    int32_t ws, chr, str, num, any, key_free_json, key_free_xml, think_ws;
    cJSON *owned; /* schemas made by sc_merge, freed when the compile ends */
    int32_t merge_steps; /* flatten / merge calls so far (SC_MAX_MERGE_STEPS: $refs can make them exponential) */
    char path[256];
} sc;

enum { T_NULL = 1, T_BOOL = 2, T_INT = 4, T_NUM = 8, T_STR = 16, T_ARR = 32, T_OBJ = 64, T_ALL = 127 };

typedef struct {
    int32_t child, next; /* first child, next sibling; -1 */
    uint8_t byte;
    bool term;
} tnode;

typedef struct {
    tnode *n;
    int32_t len;
    size_t cap;
} trie;

/* The members of an object schema, in order: listed properties, then the
 * required keys the properties do not list. */
typedef struct {
    const char **key;
    const cJSON **schema; /* NULL: any value */
    bool *req;
    int n;
    bool extra;               /* other keys allowed */
    const cJSON *extra_schema; /* their schema, NULL: any */
} members;

/* Errors: the first one sticks, prefixed by the schema path; every call
 * after it returns -1. */
int32_t sc_fail(sc *c, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
int32_t sc_chk(sc *c, int32_t r); /* the builder's own error as the schema's */
size_t sc_path_push(sc *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void sc_path_pop(sc *c, size_t n);
gram_set sc_range_set(unsigned lo, unsigned hi);

/* JSON pieces (schema_json.c), made once each where they do not vary. */
int32_t sc_ws(sc *c);
int32_t sc_char(sc *c);
int32_t sc_string(sc *c, int32_t min, int32_t max);
int32_t sc_int(sc *c, bool sign, bool zero);
int32_t sc_number(sc *c, bool sign);
int32_t sc_list(sc *c, const char *open, const char *close, int32_t item, int32_t min, int32_t max);
int32_t sc_any(sc *c);
int sc_trie_add(trie *t, const char *s, size_t len);
int32_t sc_trie_exact(sc *c, const trie *t, int32_t node);
int32_t sc_trie_except(sc *c, const trie *t, int32_t node, const gram_set *cs, const char *term, int32_t free_r,
                       int depth);

/* Keywords (schema_json.c): the lists of known ones, $ref targets. */
const cJSON *sc_kw(const cJSON *s, const char *name);
int sc_check_keywords(sc *c, const cJSON *s);
const char *sc_other_keyword(const cJSON *s, const char *const *allowed, size_t n);
const cJSON *sc_resolve_ref(sc *c, const cJSON *ref);

/* Schemas (schema.c). */
int sc_types_of(sc *c, const cJSON *s, int *out);
int32_t sc_enum(sc *c, const cJSON *s, int types, bool raw);
int32_t sc_extra_key(sc *c, const char *const *keys, int n, bool xml);
void sc_members_free(members *m);
int sc_members_get(sc *c, const cJSON *s, members *m);
int32_t sc_object(sc *c, const cJSON *s, int depth);
int32_t sc_value(sc *c, const cJSON *s, int depth);

/* allOf and keywords beside $ref / anyOf / oneOf merged into one schema
 * (schema_merge.c), owned by c; NULL after an error. */
const cJSON *sc_merge(sc *c, const cJSON *s);
cJSON *sc_distribute(sc *c, cJSON *r, int depth);

/* Bounded numbers (schema_num.c): minimum, maximum and their exclusive forms. */
bool sc_has_bounds(const cJSON *s);
int32_t sc_int_bounded(sc *c, const cJSON *s);
int32_t sc_number_bounded(sc *c, const cJSON *s);

/* Strings with pattern / format / lengths (schema.c); raw: the XML form's
 * unquoted value. */
int32_t sc_string_schema(sc *c, const cJSON *s, bool raw);

#endif
