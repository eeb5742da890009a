/* libFuzzer target for the chat renderer (and, on what it renders, the
 * reasoning split, the stop-string matcher and json.dumps).
 *
 * Input: JSON. An array is the messages (options from the input length);
 * an object is {"messages": [...], "tools": [...], "add_generation_prompt":
 * bool, "enable_thinking": bool}. Checked: no crash or leak; a failure has a
 * message; the rendered length matches; the split slices lie inside the
 * text; streaming the text through the stop matcher in uneven pieces gives
 * back exactly the text before the first stop string; json.dumps of the
 * input parses back (unless it holds an overflowed number: Infinity). */
#include "text/chat.h"

#include "edge0.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static void check(int ok) {
    if (!ok) abort();
}

static void stream_check(const char *text, size_t len) {
    static const char *stops[] = {"<|im_end|>", "</tool_call>", "\n\n"};
    chat_stop *s;
    char err[E0_ERR_MAX];
    check(chat_stop_new(&s, stops, 3, err) == 0);
    size_t first = len;
    for (int k = 0; k < 3; k++) {
        const char *at = memmem(text, len, stops[k], strlen(stops[k]));
        if (at && (size_t)(at - text) < first) first = (size_t)(at - text);
    }
    char *got = malloc(len + 1);
    check(got != NULL);
    size_t n = 0, pos = 0;
    int stop = -1;
    chat_emit e;
    for (size_t step = 1; pos < len; step = step % 7 + 1) {
        size_t k = step < len - pos ? step : len - pos;
        check(chat_stop_feed(s, text + pos, k, &e) == 0);
        check(n + e.len <= len);
        memcpy(got + n, e.text, e.len);
        n += e.len;
        pos += k;
        stop = e.stop;
    }
    chat_stop_finish(s, &e);
    check(n + e.len <= len);
    memcpy(got + n, e.text, e.len);
    n += e.len;
    check((stop >= 0) == (first < len));
    check(n == first && memcmp(got, text, n) == 0);
    free(got);
    chat_stop_free(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    cJSON *j = cJSON_ParseWithLength((const char *)data, size);
    if (!j) return 0;
    chat_opts o;
    chat_opts_default(&o);
    const cJSON *messages = j;
    if (cJSON_IsObject(j)) {
        messages = cJSON_GetObjectItemCaseSensitive(j, "messages");
        o.tools = cJSON_GetObjectItemCaseSensitive(j, "tools");
        o.add_generation_prompt =
            !cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(j, "add_generation_prompt"));
        o.enable_thinking = !cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(j, "enable_thinking"));
    } else {
        o.add_generation_prompt = size & 1;
        o.enable_thinking = size & 2;
    }
    char err[E0_ERR_MAX] = "", *out = NULL;
    size_t len = 0;
    /* both templates: Qwen3's and Qwen3.5's */
    for (int f = 0; f < 2; f++) {
        o.format = f ? CHAT_FORMAT_QWEN35 : CHAT_FORMAT_QWEN3;
        out = NULL;
        err[0] = 0;
        int rc = messages ? chat_render(messages, &o, &out, &len, err) : E0_EINVAL;
        if (rc == 0) {
            check(out != NULL && strlen(out) == len);
            chat_split sp;
            chat_split_reasoning(out, len, &sp);
            check(sp.content >= out && sp.content + sp.content_len <= out + len);
            check(sp.reasoning >= out && sp.reasoning + sp.reasoning_len <= out + len);
            if (!f) stream_check(out, len);
            free(out);
        } else if (messages) {
            check(rc < 0 && err[0] != 0);
        }
    }
    char *dump = NULL;
    if (chat_json_dumps(j, "input", &dump, err) == 0) {
        /* "1e999" parses to inf, which json.dumps writes as Infinity, as
         * Python does; that is not JSON, so it cannot parse back */
        cJSON *back = cJSON_Parse(dump);
        check(back != NULL || strstr(dump, "Infinity") || strstr(dump, "NaN"));
        cJSON_Delete(back);
        free(dump);
    }
    cJSON_Delete(j);
    return 0;
}
