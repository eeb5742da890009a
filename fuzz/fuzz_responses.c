/* libFuzzer: the Responses API request parser (src/server/responses_req.c)
 * with the OpenAI request parser it hands the translation to
 * (src/server/request.c), without a model.
 *
 * The input is a /v1/responses body. Checked: no crash or leak; a
 * rejection has status 400 (or 500), a code, a type and a message, and
 * leaves nothing allocated; an accepted request is a chat request whose
 * fields are within their documented ranges, its echo is the members of a
 * JSON object, its namespaced names are whole entries, and its prompt is a
 * NUL-terminated string of the length reported. src/server/ is not in the
 * fuzz link (it needs libmicrohttpd), so the two files are compiled in here. */
#include "../src/server/responses_req.c"
#include "../src/server/request.c"

#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_at(int ok, int line) {
    if (ok) return;
    fprintf(stderr, "fuzz_responses.c:%d: check failed\n", line);
    abort();
}
#define check(ok) check_at((ok), __LINE__)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    srv_defaults d;
    srv_defaults_init(&d);
    srv_request r;
    srv_resp_info *info = (srv_resp_info *)1;
    srv_error e;
    char *prompt;
    size_t len;
    if (srv_responses_request(&r, &info, (const char *)data, size, &d, &prompt, &len, &e)) {
        check(e.status == 400 || e.status == 500);
        check(e.code && e.type && e.message[0]);
        check(!prompt && !len && !info && !r.messages && !r.tools);
        return 0;
    }
    const e0_sample_opts *s = &r.sample;
    check(r.kind == SRV_CHAT && cJSON_IsArray(r.messages) && cJSON_GetArraySize(r.messages) > 0);
    check(s->temperature >= 0 && s->temperature <= 2);
    check(s->top_p > 0 && s->top_p <= 1);
    check(s->max_tokens >= 0 && s->n_stop == 0);
    check(!r.tools == !r.tools_json);
    check(prompt && strlen(prompt) == len);
    /* the echo is an object's members; the names, whole entries */
    check(info && info->echo);
    size_t n = strlen(info->echo);
    char *obj = malloc(n + 3);
    check(obj != NULL);
    obj[0] = '{';
    memcpy(obj + 1, info->echo, n);
    memcpy(obj + 1 + n, "}", 2);
    cJSON *o = cJSON_Parse(obj);
    check(cJSON_IsObject(o) && cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(o, "store")));
    cJSON_Delete(o);
    free(obj);
    const cJSON *nm;
    cJSON_ArrayForEach(nm, info->names) {
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(nm, "flat");
        check(cJSON_IsString(f) && strstr(f->valuestring, "__"));
        check(cJSON_IsString(cJSON_GetObjectItemCaseSensitive(nm, "namespace")));
        check(cJSON_IsString(cJSON_GetObjectItemCaseSensitive(nm, "name")));
    }
    check(!info->ignored || (*info->ignored && info->ignored[strlen(info->ignored) - 1] != ','));
    free(prompt);
    srv_request_free(&r);
    srv_resp_info_free(info);
    return 0;
}
