/* libFuzzer: the JSON schema compiler and the grammar engine
 * (src/text/schema.c, src/text/grammar.c).
 *
 * The input is "SCHEMA\0TEXT": SCHEMA is compiled (as a response_format
 * json_schema, and as the parameters of a tool in both tool-call forms),
 * then TEXT is run through each grammar's matchers byte by byte, with a
 * mask over a vocabulary of the 256 bytes after every byte. Checked: no
 * crash, leak or unbounded time (the compiler refuses what is too large);
 * an error leaves no grammar; a byte is in the mask exactly when the
 * matcher accepts it. */
#include "text/grammar.h"
#include "text/schema.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(int ok) {
    if (!ok) abort();
}

static const uint8_t *byte_token(void *user, int32_t id, size_t *len) {
    static uint8_t bytes[256];
    (void)user;
    bytes[id] = (uint8_t)id;
    *len = 1;
    return &bytes[id];
}

static void run(const gram *g, const gram_vocab *v, const uint8_t *text, size_t n) {
    char err[E0_ERR_MAX];
    uint32_t mask[8];
    for (int root = 0; root < 3; root++) {
        gram_matcher_opts o;
        gram_matcher_opts_default(&o);
        o.root = root;
        gram_matcher *m;
        check(gram_matcher_new(&m, g, v, &o, err) == 0);
        for (size_t i = 0; i < n && i < 512; i++) {
            if (gram_matcher_mask(m, mask)) break;
            bool in = (mask[text[i] >> 5] >> (text[i] & 31)) & 1;
            check(in == gram_matcher_check(m, text[i]));
            if (!in || gram_matcher_accept(m, text[i])) break;
        }
        gram_matcher_free(m);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static gram_vocab *v;
    char err[E0_ERR_MAX];
    if (!v) check(gram_vocab_new(&v, 256, byte_token, NULL, err) == 0);
    const uint8_t *z = memchr(data, 0, size);
    size_t sl = z ? (size_t)(z - data) : size;
    const uint8_t *text = z ? z + 1 : data + size;
    size_t tl = z ? size - sl - 1 : 0;
    cJSON *schema = cJSON_ParseWithLength((const char *)data, sl);
    if (!schema) return 0;
    cJSON *rf = cJSON_CreateObject(), *js = cJSON_AddObjectToObject(rf, "json_schema");
    cJSON_AddStringToObject(rf, "type", "json_schema");
    cJSON_AddStringToObject(js, "name", "fuzz");
    cJSON_AddItemReferenceToObject(js, "schema", schema);
    gram *g = NULL;
    if (e0_grammar_response_format(rf, &g, err) == 0) run(g, v, text, tl);
    else check(g == NULL);
    e0_grammar_free(g);
    cJSON *tools = cJSON_CreateArray(), *t = cJSON_CreateObject(), *f = cJSON_AddObjectToObject(t, "function");
    cJSON_AddItemToArray(tools, t);
    cJSON_AddStringToObject(t, "type", "function");
    cJSON_AddStringToObject(f, "name", "f");
    cJSON_AddItemReferenceToObject(f, "parameters", schema);
    for (int form = 0; form < 2; form++) {
        g = NULL;
        if (e0_grammar_tools(tools, NULL, 2, form ? E0_TOOL_FORM_XML : E0_TOOL_FORM_JSON, &g, err) == 0)
            run(g, v, text, tl);
        else
            check(g == NULL);
        e0_grammar_free(g);
    }
    cJSON_Delete(tools);
    cJSON_Delete(rf);
    cJSON_Delete(schema);
    return 0;
}
