/* Which chat format a Jinja chat template asks for (see chat.h).
 *
 * Markers, not a parse: a template is only ever rendered by edge0's own C
 * renderer, so all detection needs is to recognise the families it
 * renders and refuse the rest loudly. The markers are literal strings the
 * families' templates print: ChatML's turn opener, Qwen3.5's XML tool-call
 * form (Qwen3 prints JSON inside <tool_call>), and Qwen3's think block
 * (Qwen2.5's ChatML template has none). */
#include "text/chat.h"

#include "util/err.h"

#include <stdio.h>
#include <string.h>

static bool has(const char *s, size_t n, const char *lit) {
    return memmem(s, n, lit, strlen(lit)) != NULL;
}

int chat_format_detect(const char *template_text, size_t len, chat_format *out, char *err) {
    if (!out) return e0_fail(err, E0_EINVAL, "chat_format_detect: no output");
    if (!template_text || !len)
        return e0_fail(err, E0_EUNSUPPORTED,
                       "there is no chat template: edge0 renders ChatML (Qwen3, Qwen3.5) "
                       "templates only");
    if (!has(template_text, len, CHAT_IM_START)) {
        /* how it begins, printable ASCII only, to tell the user which one it is */
        char head[61];
        size_t k = 0;
        for (size_t i = 0; i < len && k < sizeof head - 1; i++) {
            unsigned char c = (unsigned char)template_text[i];
            head[k++] = c >= 0x20 && c < 0x7f ? (char)c : ' ';
        }
        head[k] = 0;
        return e0_fail(err, E0_EUNSUPPORTED,
                       "the chat template is not one edge0 renders (only ChatML templates with "
                       "%s: Qwen3, Qwen3.5); it begins \"%s%s\"",
                       CHAT_IM_START, head, len > k ? "..." : "");
    }
    if (has(template_text, len, "<function="))
        *out = CHAT_FORMAT_QWEN35;
    else if (has(template_text, len, "<think>"))
        *out = CHAT_FORMAT_QWEN3;
    else
        *out = CHAT_FORMAT_CHATML;
    return 0;
}

const char *chat_format_name(chat_format f) {
    switch (f) {
    case CHAT_FORMAT_QWEN3:
        return "qwen3";
    case CHAT_FORMAT_QWEN35:
        return "qwen3.5";
    case CHAT_FORMAT_CHATML:
        return "chatml";
    }
    return "?";
}
