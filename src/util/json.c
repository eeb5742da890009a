/* JSON string literals (json.h). */
#include "util/json.h"

#include <stdio.h>
#include <string.h>

size_t utf8_len(const unsigned char *s, size_t n) {
    unsigned c = s[0];
    size_t k = c < 0x80 ? 1 : (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3 : (c & 0xf8) == 0xf0 ? 4 : 0;
    if (!k || k > n) return 0;
    for (size_t i = 1; i < k; i++)
        if ((s[i] & 0xc0) != 0x80) return 0;
    unsigned cp = k == 1 ? c : k == 2 ? c & 0x1f : k == 3 ? c & 0x0f : c & 0x07;
    for (size_t i = 1; i < k; i++) cp = cp << 6 | (s[i] & 0x3f);
    static const unsigned MIN[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < MIN[k] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
    return k;
}

void json_str(json_put_fn put, void *ctx, const char *s, size_t n) {
    const unsigned char *p = (const unsigned char *)s;
    put(ctx, "\"", 1);
    size_t run = 0; /* bytes of p copied as they are, not yet written */
    for (size_t i = 0; i < n;) {
        unsigned c = p[i];
        size_t k = c >= 0x20 && c != '"' && c != '\\' ? utf8_len(p + i, n - i) : 0;
        if (k) {
            run += k;
            i += k;
            continue;
        }
        if (run) put(ctx, (const char *)p + i - run, run);
        run = 0;
        char esc[8];
        if (c == '"' || c == '\\') snprintf(esc, sizeof esc, "\\%c", c);
        else if (c == '\n') snprintf(esc, sizeof esc, "\\n");
        else if (c == '\t') snprintf(esc, sizeof esc, "\\t");
        else if (c == '\r') snprintf(esc, sizeof esc, "\\r");
        else if (c < 0x20) snprintf(esc, sizeof esc, "\\u%04x", c);
        else snprintf(esc, sizeof esc, "\\ufffd"); /* invalid UTF-8 */
        put(ctx, esc, strlen(esc));
        i++;
    }
    if (run) put(ctx, (const char *)p + n - run, run);
    put(ctx, "\"", 1);
}

static void sb_put_fn(void *ctx, const char *s, size_t n) {
    sb_printf(ctx, "%.*s", (int)n, s);
}

void sb_json_str(sbuf *b, const char *s, size_t n) {
    json_str(sb_put_fn, b, s, n);
}
