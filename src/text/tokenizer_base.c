/* What every part of the tokenizer builds on (tokenizer_impl.h): byte
 * buffers, hashing and vocabulary lookup, the byte-level alphabet, UTF-8
 * validation. */
#include "text/tokenizer_impl.h"

#include "util/arr.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---- Buffers, hashing, UTF-8 ----------------------------------------------- */

int tok_buf_reserve(tok_buf *b, size_t extra) {
    if (extra > SIZE_MAX - b->n) return -1;
    return arr_reserve((void **)&b->p, &b->cap, b->n + extra, 1);
}

int tok_buf_put(tok_buf *b, const void *s, size_t n) {
    if (tok_buf_reserve(b, n)) return -1;
    if (n) memcpy(b->p + b->n, s, n);
    b->n += n;
    return 0;
}

void tok_buf_free(tok_buf *b) {
    free(b->p);
    *b = (tok_buf){0};
}

uint32_t tok_hash(const void *s, size_t n) {
    const uint8_t *p = s;
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 16777619u;
    return h;
}

int32_t tok_vocab_get(const tok_tokenizer *t, const char *s, size_t n) {
    uint32_t h = tok_hash(s, n);
    for (size_t i = h & t->vocab_mask;; i = (i + 1) & t->vocab_mask) {
        const tok_vslot *v = &t->vocab[i];
        if (v->id < 0) return -1;
        if (v->hash == h && v->len == n && !memcmp(t->arena + v->off, s, n)) return v->id;
    }
}

/* Bytes 0x21-0x7E, 0xA1-0xAC, 0xAE-0xFF stand for themselves; the other 68
 * get U+0100.. in byte order (GPT-2 bytes_to_unicode). */
static bool byte_is_self(uint32_t b) {
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

uint32_t tok_byte_cp(uint8_t b) {
    if (byte_is_self(b)) return b;
    if (b <= 0x20) return 256u + b;               /* 0x00-0x20: 33 bytes */
    if (b <= 0xA0) return 256u + 33 + (b - 0x7F); /* 0x7F-0xA0: 34 bytes */
    return 256u + 67;                             /* 0xAD */
}

int tok_cp_byte(uint32_t cp) {
    if (cp < 256) return byte_is_self(cp) ? (int)cp : -1;
    if (cp < 256 + 33) return (int)(cp - 256);
    if (cp < 256 + 67) return (int)(cp - 256 - 33 + 0x7F);
    if (cp == 256 + 67) return 0xAD;
    return -1;
}

/* Length of the valid sequence at s (n > 0 bytes), 0 if it is not one. */
size_t utf8_seq(const uint8_t *s, size_t n) {
    uint8_t c = s[0], lo = 0x80, hi = 0xBF;
    size_t need;
    if (c < 0x80) return 1;
    if (c < 0xC2) return 0;
    if (c < 0xE0) {
        need = 1;
    } else if (c < 0xF0) {
        need = 2, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
    } else if (c < 0xF5) {
        need = 3, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
    } else {
        return 0;
    }
    if (n <= need || s[1] < lo || s[1] > hi) return 0;
    for (size_t k = 2; k <= need; k++)
        if ((s[k] & 0xC0) != 0x80) return 0;
    return need + 1;
}

size_t tok_utf8_valid(const uint8_t *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        if (s[i] < 0x80) {
            i++;
            continue;
        }
        size_t k = utf8_seq(s + i, n - i);
        if (!k) break;
        i += k;
    }
    return i;
}
