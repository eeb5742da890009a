/* libFuzzer: the Messages API request parser (src/server/anthropic_req.c)
 * with the OpenAI request parser it hands the translation to
 * (src/server/request.c), without a model.
 *
 * The input is a request body, parsed as /v1/messages and as
 * /v1/messages/count_tokens. Checked: no crash or leak; a rejection has
 * status 400 (or 500), a code, a type and a message; an accepted request is
 * a chat request whose fields are within their documented ranges, and its
 * prompt is a NUL-terminated string of the length reported. src/server/ is
 * not in the fuzz link (it needs libmicrohttpd), so the two files are
 * compiled in here. */
#include "../src/server/anthropic_req.c"
#include "../src/server/request.c"

#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(int ok) {
    if (!ok) abort();
}

static void one(bool count_only, const char *body, size_t size) {
    srv_defaults d;
    srv_defaults_init(&d);
    srv_request r;
    srv_error e;
    char *prompt;
    size_t len;
    bool prefilled;
    if (srv_anthropic_request(&r, count_only, body, size, &d, &prompt, &len, &prefilled, &e)) {
        check(e.status == 400 || e.status == 500);
        check(e.code && e.type && e.message[0]);
        check(!prompt && !len && !r.messages && !r.tools);
        return;
    }
    const e0_sample_opts *s = &r.sample;
    check(r.kind == SRV_CHAT && cJSON_IsArray(r.messages) && cJSON_GetArraySize(r.messages) > 0);
    check(s->temperature >= 0 && s->temperature <= 1);
    check(s->top_p > 0 && s->top_p <= 1);
    check(s->top_k >= 0 && s->max_tokens >= 0);
    check(count_only || s->max_tokens >= 1);
    check(s->n_stop <= SRV_MAX_STOP);
    for (size_t i = 0; i < s->n_stop; i++) check(s->stop[i] && s->stop[i][0]);
    check(!r.tools == !r.tools_json);
    check(prompt && strlen(prompt) == len);
    check(!prefilled || !r.enable_thinking); /* a prefill is continued with thinking off */
    free(prompt);
    srv_request_free(&r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    one(false, (const char *)data, size);
    one(true, (const char *)data, size);
    return 0;
}
