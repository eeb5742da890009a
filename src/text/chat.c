/* The Qwen3 chat_template in C, stop strings, and the reasoning split.
 *
 * ---- What the template does (tokenizer_config.json "chat_template") ------
 *
 * 1. Header. With tools: "<|im_start|>system\n", then messages[0].content +
 *    "\n\n" if the first message is a system message, then the "# Tools"
 *    preamble with one json.dumps(tool) line per tool, then the tool-call
 *    instructions and "<|im_end|>\n". Without tools: a first system message
 *    alone becomes "<|im_start|>system\n" + content + "<|im_end|>\n".
 * 2. last_query_index: scanning from the end, the index of the last user
 *    message whose content is not a "<tool_response>...</tool_response>"
 *    wrapper; len-1 if there is none.
 * 3. Each message in order:
 *    - user, or system other than the first: "<|im_start|>ROLE\n" + content
 *      + "<|im_end|>\n". (The first system message was done in 1.)
 *    - assistant: reasoning = reasoning_content if given (not null), and
 *      then content is left as is; otherwise, if content contains "</think>",
 *      content = text after the LAST "</think>", lstrip('\n'), and reasoning =
 *      text before the FIRST "</think>", rstrip('\n'), after the last
 *      "<think>" in it, lstrip('\n').
 *      After the last user query (index > last_query_index), and if this is
 *      the last message or reasoning is non-empty, the think block is kept:
 *      "<|im_start|>assistant\n<think>\n" + reasoning.strip('\n') +
 *      "\n</think>\n\n" + content.lstrip('\n'). Otherwise (earlier turns, or
 *      a later turn with no reasoning that is not the last message) it is
 *      dropped: "<|im_start|>assistant\n" + content.
 *      Then each tool call: "\n" before it unless it is the first and content
 *      is empty, "<tool_call>\n{\"name\": \"NAME\", \"arguments\": ARGS}\n
 *      </tool_call>", ARGS verbatim if a string, else json.dumps. A call with a
 *      "function" member that is a non-empty object uses that object.
 *      Then "<|im_end|>\n".
 *    - tool: consecutive tool messages share one user turn:
 *      "<|im_start|>user" before the first of a run, "\n<tool_response>\n" +
 *      content + "\n</tool_response>" for each, "<|im_end|>\n" after the last.
 * 4. add_generation_prompt: "<|im_start|>assistant\n", plus
 *    "<think>\n\n</think>\n\n" when enable_thinking is false.
 *
 * Details that are easy to get wrong:
 *  - `tojson` is transformers' override: json.dumps(ensure_ascii=False) with
 *    ", " / ": " separators and insertion order, not Jinja's HTML-escaping one.
 *  - The think split uses the LAST "</think>" for content but the FIRST for
 *    reasoning; only '\n' is stripped, never spaces.
 *  - The "\n" before the first tool call depends on the content after the
 *    think split, before its lstrip.
 *  - A final assistant message always gets a think block (possibly empty)
 *    when it follows the last user query: "no_generation_prompt" renders
 *    "<think>\n\n</think>\n\n" before "Hello!".
 *  - Tool results count as user turns for grouping, but not as queries for
 *    last_query_index, and only when wrapped exactly in <tool_response> tags.
 *
 * Where this is stricter than Jinja: an unknown role, a non-string content
 * (other than text parts), a missing tool name or arguments, invalid UTF-8
 * are errors, where the template would render nothing, "" or fail later.
 * Known gaps: a string with an embedded U+0000 ends there (cJSON strings are
 * NUL-terminated); "1.0" in a tool schema prints as "1" (see chat_json_dumps);
 * duplicate JSON keys are all printed where Python keeps the last.
 */
#include "text/chat.h"
#include "text/slice.h"

#include "util/err.h"
#include "util/sbuf.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- string slices (the Python str methods the template uses) ----------- */

/* slice, sl_of, sl_find: text/slice.h */

static const char *sl_find_last(slice s, const char *needle) {
    size_t k = strlen(needle);
    if (k > s.n) return NULL;
    for (size_t i = s.n - k + 1; i-- > 0;)
        if (memcmp(s.p + i, needle, k) == 0) return s.p + i;
    return NULL;
}

static bool sl_starts(slice s, const char *pre) {
    size_t k = strlen(pre);
    return s.n >= k && memcmp(s.p, pre, k) == 0;
}

static bool sl_ends(slice s, const char *suf) {
    size_t k = strlen(suf);
    return s.n >= k && memcmp(s.p + s.n - k, suf, k) == 0;
}

static slice sl_lstrip_nl(slice s) {
    while (s.n && s.p[0] == '\n')
        s.p++, s.n--;
    return s;
}

static slice sl_rstrip_nl(slice s) {
    while (s.n && s.p[s.n - 1] == '\n')
        s.n--;
    return s;
}

static void sb_sl(sbuf *b, slice s) {
    sb_put(b, s.p, s.n);
}

/* Strict UTF-8: no overlongs, no surrogates, nothing above U+10FFFF. */
static bool utf8_valid(const char *s, size_t n) {
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        unsigned c = p[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t need;
        unsigned lo = 0x80, hi = 0xBF;
        if (c >= 0xC2 && c <= 0xDF)
            need = 1;
        else if (c == 0xE0)
            need = 2, lo = 0xA0;
        else if (c >= 0xE1 && c <= 0xEC)
            need = 2;
        else if (c == 0xED)
            need = 2, hi = 0x9F;
        else if (c >= 0xEE && c <= 0xEF)
            need = 2;
        else if (c == 0xF0)
            need = 3, lo = 0x90;
        else if (c >= 0xF1 && c <= 0xF3)
            need = 3;
        else if (c == 0xF4)
            need = 3, hi = 0x8F;
        else
            return false;
        if (n - i - 1 < need) return false;
        if (p[i + 1] < lo || p[i + 1] > hi) return false;
        for (size_t k = 2; k <= need; k++)
            if ((p[i + k] & 0xC0) != 0x80) return false;
        i += need + 1;
    }
    return true;
}

/* ---- json.dumps(ensure_ascii=False) --------------------------------------- */

#define JSON_MAX_DEPTH 512

static void json_str(sbuf *b, const char *s) {
    static const char hex[] = "0123456789abcdef";
    const char *run = s;
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c >= 0x20 && c != '"' && c != '\\') continue;
        sb_put(b, run, (size_t)(s - run));
        run = s + 1;
        char e[7] = {'\\', 0, 0, 0, 0, 0, 0};
        size_t n = 2;
        switch (c) {
        case '"':
            e[1] = '"';
            break;
        case '\\':
            e[1] = '\\';
            break;
        case '\n':
            e[1] = 'n';
            break;
        case '\r':
            e[1] = 'r';
            break;
        case '\t':
            e[1] = 't';
            break;
        case '\b':
            e[1] = 'b';
            break;
        case '\f':
            e[1] = 'f';
            break;
        default:
            e[1] = 'u', e[2] = '0', e[3] = '0', e[4] = hex[c >> 4], e[5] = hex[c & 15];
            n = 6;
        }
        sb_put(b, e, n);
    }
    sb_put(b, run, (size_t)(s - run));
}

/* Python's repr(float): the shortest digits that read back to x, in fixed
 * notation when the decimal exponent is in [-4, 16), else d.ddde+XX. */
static void json_float(sbuf *b, double x) {
    char e[48];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(e, sizeof e, "%.*e", prec - 1, x);
        if (strtod(e, NULL) == x) break;
    }
    const char *p = e;
    char out[64], dig[24];
    size_t nd = 0, o = 0;
    if (*p == '-') out[o++] = '-', p++;
    for (; *p && *p != 'e'; p++)
        if (*p >= '0' && *p <= '9' && nd < sizeof dig) dig[nd++] = *p;
    int exp10 = *p == 'e' ? atoi(p + 1) : 0;
    while (nd > 1 && dig[nd - 1] == '0')
        nd--;
    int decpt = exp10 + 1; /* x = 0.DIGITS * 10^decpt */
    if (decpt > -4 && decpt <= 16) {
        if (decpt <= 0) {
            out[o++] = '0', out[o++] = '.';
            for (int i = 0; i < -decpt; i++)
                out[o++] = '0';
            memcpy(out + o, dig, nd), o += nd;
        } else if ((size_t)decpt >= nd) {
            memcpy(out + o, dig, nd), o += nd;
            for (size_t i = nd; i < (size_t)decpt; i++)
                out[o++] = '0';
            out[o++] = '.', out[o++] = '0';
        } else {
            memcpy(out + o, dig, (size_t)decpt), o += (size_t)decpt;
            out[o++] = '.';
            memcpy(out + o, dig + decpt, nd - (size_t)decpt), o += nd - (size_t)decpt;
        }
        sb_put(b, out, o);
    } else {
        out[o++] = dig[0];
        if (nd > 1) {
            out[o++] = '.';
            memcpy(out + o, dig + 1, nd - 1), o += nd - 1;
        }
        int ex = decpt - 1;
        o += (size_t)snprintf(out + o, sizeof out - o, "e%c%02d", ex < 0 ? '-' : '+', abs(ex));
        sb_put(b, out, o);
    }
}

static void json_number(sbuf *b, double x) {
    char t[32];
    if (isnan(x))
        sb_puts(b, "NaN");
    else if (isinf(x))
        sb_puts(b, x > 0 ? "Infinity" : "-Infinity");
    else if (x == floor(x) && fabs(x) < 9007199254740992.0) {
        snprintf(t, sizeof t, "%lld", (long long)x);
        sb_puts(b, t);
    } else
        json_float(b, x);
}

static int json_put(sbuf *b, const cJSON *v, int depth, const char *what, char *err) {
    if (depth > JSON_MAX_DEPTH)
        return e0_fail(err, E0_EFORMAT, "%s: nested deeper than %d", what, JSON_MAX_DEPTH);
    if (cJSON_IsNull(v))
        sb_puts(b, "null");
    else if (cJSON_IsTrue(v))
        sb_puts(b, "true");
    else if (cJSON_IsFalse(v))
        sb_puts(b, "false");
    else if (cJSON_IsNumber(v))
        json_number(b, v->valuedouble);
    else if (cJSON_IsString(v)) {
        if (!v->valuestring) return e0_fail(err, E0_EFORMAT, "%s: string without text", what);
        if (!utf8_valid(v->valuestring, strlen(v->valuestring)))
            return e0_fail(err, E0_EFORMAT, "%s: invalid UTF-8 in a string", what);
        sb_puts(b, "\"");
        json_str(b, v->valuestring);
        sb_puts(b, "\"");
    } else if (cJSON_IsArray(v) || cJSON_IsObject(v)) {
        bool obj = cJSON_IsObject(v);
        sb_puts(b, obj ? "{" : "[");
        for (const cJSON *c = v->child; c; c = c->next) {
            if (c != v->child) sb_puts(b, ", ");
            if (obj) {
                if (!c->string)
                    return e0_fail(err, E0_EFORMAT, "%s: object member without a key", what);
                if (!utf8_valid(c->string, strlen(c->string)))
                    return e0_fail(err, E0_EFORMAT, "%s: invalid UTF-8 in a key", what);
                sb_puts(b, "\"");
                json_str(b, c->string);
                sb_puts(b, "\": ");
            }
            int rc = json_put(b, c, depth + 1, what, err);
            if (rc) return rc;
        }
        sb_puts(b, obj ? "}" : "]");
    } else if (cJSON_IsRaw(v) && v->valuestring) {
        sb_puts(b, v->valuestring);
    } else {
        return e0_fail(err, E0_EFORMAT, "%s: not a JSON value", what);
    }
    return 0;
}

int chat_json_dumps(const cJSON *v, const char *what, char **out, char *err) {
    if (!v || !out) return e0_fail(err, E0_EINVAL, "chat_json_dumps: NULL argument");
    sbuf b = {0};
    int rc = json_put(&b, v, 0, what ? what : "value", err);
    if (!rc) sb_put(&b, "", 0);
    if (!rc && b.oom) rc = e0_fail(err, E0_ENOMEM, "%s: out of memory", what ? what : "value");
    if (rc) {
        free(b.p);
        return rc;
    }
    *out = b.p;
    return 0;
}

/* ---- messages ----------------------------------------------------------- */

enum { ROLE_SYSTEM, ROLE_USER, ROLE_ASSISTANT, ROLE_TOOL };
static const char *const ROLE_NAME[] = {"system", "user", "assistant", "tool"};

typedef struct {
    int role;
    slice content;
    char *owned; /* content joined from text parts */
    bool has_reasoning;
    slice reasoning;
    const cJSON *tool_calls; /* a non-empty array, or NULL */
} chat_msg;

static int msg_content(const cJSON *m, size_t i, const char *sep, chat_msg *out, char *err) {
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(m, "content");
    if (!c || cJSON_IsNull(c)) {
        if (out->role == ROLE_ASSISTANT) {
            out->content = sl_of("");
            return 0;
        }
        return e0_fail(err, E0_EFORMAT, "messages[%zu].content: %s for a %s message", i,
                       c ? "null" : "missing", ROLE_NAME[out->role]);
    }
    if (cJSON_IsString(c) && c->valuestring) {
        out->content = sl_of(c->valuestring);
    } else if (cJSON_IsArray(c)) {
        sbuf b = {0};
        size_t j = 0;
        for (const cJSON *part = c->child; part; part = part->next, j++) {
            const cJSON *type = cJSON_GetObjectItemCaseSensitive(part, "type");
            const cJSON *text = cJSON_GetObjectItemCaseSensitive(part, "text");
            int rc = 0;
            if (!cJSON_IsObject(part))
                rc = e0_fail(err, E0_EFORMAT, "messages[%zu].content[%zu]: not an object", i, j);
            else if (!cJSON_IsString(type) || !type->valuestring)
                rc = e0_fail(err, E0_EFORMAT,
                             "messages[%zu].content[%zu].type: missing or not a string", i, j);
            else if (strcmp(type->valuestring, "text") != 0)
                rc = e0_fail(err, E0_EUNSUPPORTED,
                             "messages[%zu].content[%zu].type: \"%.64s\" parts are not supported "
                             "(text only)",
                             i, j, type->valuestring);
            else if (!cJSON_IsString(text) || !text->valuestring)
                rc = e0_fail(err, E0_EFORMAT,
                             "messages[%zu].content[%zu].text: missing or not a string", i, j);
            if (rc) {
                free(b.p);
                return rc;
            }
            if (j) sb_puts(&b, sep);
            sb_puts(&b, text->valuestring);
        }
        sb_put(&b, "", 0);
        if (b.oom) {
            free(b.p);
            return e0_fail(err, E0_ENOMEM, "messages[%zu].content: out of memory", i);
        }
        out->owned = b.p;
        out->content = (slice){b.p, b.n};
    } else {
        return e0_fail(err, E0_EFORMAT,
                       "messages[%zu].content: not a string or an array of text parts", i);
    }
    if (!utf8_valid(out->content.p, out->content.n))
        return e0_fail(err, E0_EFORMAT, "messages[%zu].content: invalid UTF-8", i);
    return 0;
}

/* sep: what joins text parts ("\n" for Qwen3, as vLLM and llama.cpp do;
 * "" for Qwen3.5, whose template concatenates them). */
static int msg_parse(const cJSON *m, size_t i, const char *sep, chat_msg *out, char *err) {
    if (!cJSON_IsObject(m)) return e0_fail(err, E0_EFORMAT, "messages[%zu]: not an object", i);
    const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
    if (!cJSON_IsString(role) || !role->valuestring)
        return e0_fail(err, E0_EFORMAT, "messages[%zu].role: missing or not a string", i);
    out->role = -1;
    for (int r = 0; r < 4; r++)
        if (strcmp(role->valuestring, ROLE_NAME[r]) == 0) out->role = r;
    if (out->role < 0)
        return e0_fail(
            err, E0_EFORMAT,
            "messages[%zu].role: unknown role \"%.64s\" (expected system, user, assistant or tool)",
            i, role->valuestring);
    int rc = msg_content(m, i, sep, out, err);
    if (rc) return rc;
    if (out->role != ROLE_ASSISTANT) return 0;

    const cJSON *rs = cJSON_GetObjectItemCaseSensitive(m, "reasoning_content");
    if (rs && !cJSON_IsNull(rs)) {
        if (!cJSON_IsString(rs) || !rs->valuestring)
            return e0_fail(err, E0_EFORMAT, "messages[%zu].reasoning_content: not a string", i);
        out->has_reasoning = true;
        out->reasoning = sl_of(rs->valuestring);
        if (!utf8_valid(out->reasoning.p, out->reasoning.n))
            return e0_fail(err, E0_EFORMAT, "messages[%zu].reasoning_content: invalid UTF-8", i);
    }
    const cJSON *tc = cJSON_GetObjectItemCaseSensitive(m, "tool_calls");
    if (tc && !cJSON_IsNull(tc)) {
        if (!cJSON_IsArray(tc))
            return e0_fail(err, E0_EFORMAT, "messages[%zu].tool_calls: not an array", i);
        if (tc->child) out->tool_calls = tc;
    }
    return 0;
}

/* One "<tool_call>" block. */
static int put_tool_call(sbuf *b, const cJSON *tc, size_t i, size_t j, char *err) {
    if (!cJSON_IsObject(tc))
        return e0_fail(err, E0_EFORMAT, "messages[%zu].tool_calls[%zu]: not an object", i, j);
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(tc, "function");
    const char *where = "";
    if (f && !cJSON_IsNull(f)) {
        if (!cJSON_IsObject(f))
            return e0_fail(err, E0_EFORMAT, "messages[%zu].tool_calls[%zu].function: not an object",
                           i, j);
        if (f->child) tc = f, where = ".function"; /* `{% if tool_call.function %}` */
    }
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(tc, "name");
    if (!cJSON_IsString(name) || !name->valuestring)
        return e0_fail(err, E0_EFORMAT,
                       "messages[%zu].tool_calls[%zu]%s.name: missing or not a string", i, j,
                       where);
    if (!utf8_valid(name->valuestring, strlen(name->valuestring)))
        return e0_fail(err, E0_EFORMAT, "messages[%zu].tool_calls[%zu]%s.name: invalid UTF-8", i, j,
                       where);
    const cJSON *args = cJSON_GetObjectItemCaseSensitive(tc, "arguments");
    if (!args)
        return e0_fail(err, E0_EFORMAT, "messages[%zu].tool_calls[%zu]%s.arguments: missing", i, j,
                       where);
    sb_puts(b, "<tool_call>\n{\"name\": \"");
    sb_puts(b, name->valuestring);
    sb_puts(b, "\", \"arguments\": ");
    if (cJSON_IsString(args) && args->valuestring) {
        if (!utf8_valid(args->valuestring, strlen(args->valuestring)))
            return e0_fail(err, E0_EFORMAT,
                           "messages[%zu].tool_calls[%zu]%s.arguments: invalid UTF-8", i, j, where);
        sb_puts(b, args->valuestring);
    } else {
        char what[96];
        snprintf(what, sizeof what, "messages[%zu].tool_calls[%zu]%s.arguments", i, j, where);
        int rc = json_put(b, args, 0, what, err);
        if (rc) return rc;
    }
    sb_puts(b, "}\n</tool_call>");
    return 0;
}

static void put_header(sbuf *b, const chat_msg *m, bool tools) {
    if (tools) {
        sb_puts(b, "<|im_start|>system\n");
        if (m[0].role == ROLE_SYSTEM) {
            sb_sl(b, m[0].content);
            sb_puts(b, "\n\n");
        }
        sb_puts(
            b,
            "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
            "You are provided with function signatures within <tools></tools> XML tags:\n<tools>");
    } else if (m[0].role == ROLE_SYSTEM) {
        sb_puts(b, "<|im_start|>system\n");
        sb_sl(b, m[0].content);
        sb_puts(b, "<|im_end|>\n");
    }
}

static const char TOOLS_TAIL[] =
    "\n</tools>\n\nFor each function call, return a json object with function name and arguments "
    "within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, "
    "\"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n";

/* An assistant message's content with a think block, as both templates
 * read it: the reasoning is what lies between the last "<think>" before
 * the first "</think>" and that "</think>", the content what follows the
 * last "</think>"; each loses its newlines at the seam. Content without
 * "</think>" stays as it is (reasoning untouched). */
static void split_think(slice *content, slice *reasoning) {
    const char *end_first = sl_find(*content, "</think>");
    if (!end_first) return;
    const char *end_last = sl_find_last(*content, "</think>");
    slice before = sl_rstrip_nl((slice){content->p, (size_t)(end_first - content->p)});
    const char *open = sl_find_last(before, "<think>");
    if (open) {
        size_t skip = (size_t)(open - before.p) + strlen("<think>");
        before.p += skip, before.n -= skip;
    }
    *reasoning = sl_lstrip_nl(before);
    const char *after = end_last + strlen("</think>");
    *content = sl_lstrip_nl((slice){after, (size_t)(content->p + content->n - after)});
}

static int put_assistant(sbuf *b, const chat_msg *m, size_t i, size_t n, size_t last_query,
                         char *err) {
    slice content = m->content, reasoning = sl_of("");
    if (m->has_reasoning) {
        reasoning = m->reasoning;
    } else {
        split_think(&content, &reasoning);
    }
    sb_puts(b, "<|im_start|>assistant\n");
    if (i > last_query && (i + 1 == n || reasoning.n)) {
        sb_puts(b, "<think>\n");
        sb_sl(b, sl_rstrip_nl(sl_lstrip_nl(reasoning)));
        sb_puts(b, "\n</think>\n\n");
        sb_sl(b, sl_lstrip_nl(content));
    } else {
        sb_sl(b, content);
    }
    if (m->tool_calls) {
        size_t j = 0;
        for (const cJSON *tc = m->tool_calls->child; tc; tc = tc->next, j++) {
            if (j || content.n) sb_puts(b, "\n");
            int rc = put_tool_call(b, tc, i, j, err);
            if (rc) return rc;
        }
    }
    sb_puts(b, "<|im_end|>\n");
    return 0;
}

void chat_opts_default(chat_opts *o) {
    o->format = CHAT_FORMAT_QWEN3;
    o->add_generation_prompt = true;
    o->enable_thinking = true;
    o->tools = NULL;
}

/* The tools as both templates list them: each JSON object on its own line. */
static int put_tools(sbuf *b, const cJSON *tools, char *err) {
    size_t k = 0;
    for (const cJSON *t = tools->child; t; t = t->next, k++) {
        char what[48];
        snprintf(what, sizeof what, "tools[%zu]", k);
        sb_puts(b, "\n");
        int rc = json_put(b, t, 0, what, err);
        if (rc) return rc;
    }
    return 0;
}

static int render(sbuf *b, const cJSON *messages, const chat_opts *o, chat_msg *m, size_t n,
                  char *err) {
    size_t i = 0;
    int rc;
    for (const cJSON *it = messages->child; it; it = it->next, i++)
        if ((rc = msg_parse(it, i, "\n", &m[i], err))) return rc;

    bool tools = o->tools && o->tools->child;
    put_header(b, m, tools);
    if (tools) {
        if ((rc = put_tools(b, o->tools, err))) return rc;
        sb_puts(b, TOOLS_TAIL);
    }

    size_t last_query = n - 1;
    for (size_t k = n; k-- > 0;) {
        if (m[k].role == ROLE_USER && !(sl_starts(m[k].content, "<tool_response>") &&
                                        sl_ends(m[k].content, "</tool_response>"))) {
            last_query = k;
            break;
        }
    }

    for (i = 0; i < n; i++) {
        switch (m[i].role) {
        case ROLE_SYSTEM:
            if (i == 0) break; /* rendered by the header */
            /* fall through */
        case ROLE_USER:
            sb_puts(b, "<|im_start|>");
            sb_puts(b, ROLE_NAME[m[i].role]);
            sb_puts(b, "\n");
            sb_sl(b, m[i].content);
            sb_puts(b, "<|im_end|>\n");
            break;
        case ROLE_ASSISTANT:
            if ((rc = put_assistant(b, &m[i], i, n, last_query, err))) return rc;
            break;
        case ROLE_TOOL:
            if (i == 0 || m[i - 1].role != ROLE_TOOL) sb_puts(b, "<|im_start|>user");
            sb_puts(b, "\n<tool_response>\n");
            sb_sl(b, m[i].content);
            sb_puts(b, "\n</tool_response>");
            if (i + 1 == n || m[i + 1].role != ROLE_TOOL) sb_puts(b, "<|im_end|>\n");
            break;
        }
    }
    if (o->add_generation_prompt) {
        sb_puts(b, "<|im_start|>assistant\n");
        if (!o->enable_thinking) sb_puts(b, "<think>\n\n</think>\n\n");
    }
    return 0;
}

/* ---- Qwen3.5's template (tokenizers/qwen35/chat_template.jinja) ---------
 *
 * What it does differently from Qwen3's:
 *  - every content is `render_content(...)|trim`: text parts concatenated,
 *    then Python's str.strip() (Unicode whitespace, not only '\n');
 *  - tools: "# Tools\n\nYou have access to the following functions:\n\n<tools>",
 *    one tojson line per tool, "\n</tools>", the XML-call instructions, and
 *    only then the first system message ("\n\n" + content, if not empty);
 *  - a system message anywhere but first, or no user query at all (only
 *    tool results), is an error;
 *  - assistant: reasoning_content if it is a string, else the "</think>"
 *    split of the content; reasoning trimmed; the think block is printed for
 *    every assistant message after the last user query (Qwen3 prints it
 *    only for the last message or a non-empty reasoning);
 *  - tool calls as XML: "\n\n" before the first if the content is not empty,
 *    "\n" between calls; per argument "<parameter=K>\nV\n</parameter>\n"
 *    where V is tojson for objects and arrays and Python's str() otherwise
 *    (True, False, None, 3, 2.5, the string as is). The template needs
 *    arguments as a mapping; an OpenAI client sends a JSON string, which is
 *    parsed first (as llama.cpp and vLLM do);
 *  - a tool message right after a non-tool message opens a user turn (a
 *    tool message first in the list does not: `loop.previtem` is undefined);
 *  - the generation prompt opens the think block: "<think>\n", or the empty
 *    block "<think>\n\n</think>\n\n" with enable_thinking=false. */

static const char TOOLS35_HEAD[] = "# Tools\n\nYou have access to the following functions:\n\n<tools>";
static const char TOOLS35_TAIL[] =
    "\n</tools>\n\nIf you choose to call a function ONLY reply in the following format with NO suffix:\n\n"
    "<tool_call>\n<function=example_function_name>\n<parameter=example_parameter_1>\nvalue_1\n</parameter>\n"
    "<parameter=example_parameter_2>\nThis is the value for the second parameter\nthat can span\nmultiple lines\n"
    "</parameter>\n</function>\n</tool_call>\n\n<IMPORTANT>\nReminder:\n- Function calls MUST follow the specified "
    "format: an inner <function=...></function> block must be nested within <tool_call></tool_call> XML tags\n"
    "- Required parameters MUST be specified\n- You may provide optional reasoning for your function call in "
    "natural language BEFORE the function call, but NOT after\n- If there is no function call available, answer "
    "the question like normal with your current knowledge and do not tell the user about function calls\n"
    "</IMPORTANT>";

/* The code point of the UTF-8 sequence that starts at s[0] (valid UTF-8), its length in *k. */
static unsigned utf8_at(const unsigned char *s, size_t *k) {
    unsigned c = s[0];
    if (c < 0x80) return *k = 1, c;
    if (c < 0xE0) return *k = 2, (c & 0x1F) << 6 | (s[1] & 0x3F);
    if (c < 0xF0) return *k = 3, (c & 0x0F) << 12 | (s[1] & 0x3F) << 6 | (s[2] & 0x3F);
    return *k = 4, (c & 0x07) << 18 | (s[1] & 0x3F) << 12 | (s[2] & 0x3F) << 6 | (s[3] & 0x3F);
}

/* Python's str.isspace(). */
static bool py_space(unsigned c) {
    return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

/* Python's str.strip() of valid UTF-8. */
static slice sl_py_strip(slice s) {
    const unsigned char *p = (const unsigned char *)s.p;
    size_t i = 0, k;
    while (i < s.n && py_space(utf8_at(p + i, &k)))
        i += k;
    size_t end = i, j = i;
    while (j < s.n) {
        unsigned c = utf8_at(p + j, &k);
        j += k;
        if (!py_space(c)) end = j;
    }
    return (slice){s.p + i, end - i};
}

/* Python's str() of an argument value, or tojson for objects and arrays. */
static int put_param35(sbuf *b, const cJSON *v, const char *what, char *err) {
    if (cJSON_IsObject(v) || cJSON_IsArray(v)) return json_put(b, v, 0, what, err);
    if (cJSON_IsString(v)) {
        if (!utf8_valid(v->valuestring, strlen(v->valuestring)))
            return e0_fail(err, E0_EFORMAT, "%s: invalid UTF-8", what);
        sb_puts(b, v->valuestring);
    } else if (cJSON_IsTrue(v))
        sb_puts(b, "True");
    else if (cJSON_IsFalse(v))
        sb_puts(b, "False");
    else if (cJSON_IsNull(v))
        sb_puts(b, "None");
    else if (cJSON_IsNumber(v))
        json_number(b, v->valuedouble);
    else
        return e0_fail(err, E0_EFORMAT, "%s: not a JSON value", what);
    return 0;
}

static int put_tool_call35(sbuf *b, const cJSON *tc, size_t i, size_t j, bool first, bool text_before, char *err) {
    if (!cJSON_IsObject(tc))
        return e0_fail(err, E0_EFORMAT, "messages[%zu].tool_calls[%zu]: not an object", i, j);
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(tc, "function");
    const char *where = "";
    if (f && !cJSON_IsNull(f)) {
        if (!cJSON_IsObject(f))
            return e0_fail(err, E0_EFORMAT, "messages[%zu].tool_calls[%zu].function: not an object", i, j);
        tc = f, where = ".function"; /* `{% if tool_call.function is defined %}` */
    }
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(tc, "name");
    if (!cJSON_IsString(name) || !name->valuestring || !utf8_valid(name->valuestring, strlen(name->valuestring)))
        return e0_fail(err, E0_EFORMAT, "messages[%zu].tool_calls[%zu]%s.name: missing or not a UTF-8 string", i, j,
                       where);
    sb_puts(b, first ? (text_before ? "\n\n<tool_call>\n<function=" : "<tool_call>\n<function=")
                     : "\n<tool_call>\n<function=");
    sb_puts(b, name->valuestring);
    sb_puts(b, ">\n");
    const cJSON *args = cJSON_GetObjectItemCaseSensitive(tc, "arguments");
    cJSON *parsed = NULL;
    if (cJSON_IsString(args) && args->valuestring) { /* OpenAI's form: a JSON object as a string */
        parsed = cJSON_Parse(args->valuestring);
        if (!cJSON_IsObject(parsed)) {
            cJSON_Delete(parsed);
            return e0_fail(err, E0_EFORMAT,
                           "messages[%zu].tool_calls[%zu]%s.arguments: a string that is not a JSON object", i, j,
                           where);
        }
        args = parsed;
    }
    int rc = 0;
    if (args && !cJSON_IsNull(args)) {
        if (!cJSON_IsObject(args))
            rc = e0_fail(err, E0_EFORMAT, "messages[%zu].tool_calls[%zu]%s.arguments: not an object", i, j, where);
        for (const cJSON *a = rc ? NULL : args->child; a && !rc; a = a->next) {
            char what[96];
            snprintf(what, sizeof what, "messages[%zu].tool_calls[%zu]%s.arguments", i, j, where);
            if (!a->string || !utf8_valid(a->string, strlen(a->string))) {
                rc = e0_fail(err, E0_EFORMAT, "%s: a key that is not UTF-8", what);
                break;
            }
            sb_puts(b, "<parameter=");
            sb_puts(b, a->string);
            sb_puts(b, ">\n");
            rc = put_param35(b, a, what, err);
            sb_puts(b, "\n</parameter>\n");
        }
    }
    cJSON_Delete(parsed);
    if (rc) return rc;
    sb_puts(b, "</function>\n</tool_call>");
    return 0;
}

static int put_assistant35(sbuf *b, const chat_msg *m, size_t i, size_t last_query, char *err) {
    slice content = sl_py_strip(m->content), reasoning = sl_of("");
    if (m->has_reasoning) {
        reasoning = m->reasoning;
    } else {
        split_think(&content, &reasoning);
    }
    reasoning = sl_py_strip(reasoning);
    sb_puts(b, "<|im_start|>assistant\n");
    if (i > last_query) {
        sb_puts(b, "<think>\n");
        sb_sl(b, reasoning);
        sb_puts(b, "\n</think>\n\n");
    }
    sb_sl(b, content);
    if (m->tool_calls) {
        bool text_before = sl_py_strip(content).n > 0;
        size_t j = 0;
        for (const cJSON *tc = m->tool_calls->child; tc; tc = tc->next, j++) {
            int rc = put_tool_call35(b, tc, i, j, j == 0, text_before, err);
            if (rc) return rc;
        }
    }
    sb_puts(b, "<|im_end|>\n");
    return 0;
}

static int render35(sbuf *b, const cJSON *messages, const chat_opts *o, chat_msg *m, size_t n, char *err) {
    size_t i = 0;
    int rc;
    for (const cJSON *it = messages->child; it; it = it->next, i++)
        if ((rc = msg_parse(it, i, "", &m[i], err))) return rc;
    for (i = 1; i < n; i++)
        if (m[i].role == ROLE_SYSTEM)
            return e0_fail(err, E0_EFORMAT,
                           "messages[%zu]: a system message must be the first message (Qwen3.5's template)", i);

    bool tools = o->tools && o->tools->child;
    if (tools) {
        sb_puts(b, "<|im_start|>system\n");
        sb_puts(b, TOOLS35_HEAD);
        if ((rc = put_tools(b, o->tools, err))) return rc;
        sb_puts(b, TOOLS35_TAIL);
        if (m[0].role == ROLE_SYSTEM && sl_py_strip(m[0].content).n) {
            sb_puts(b, "\n\n");
            sb_sl(b, sl_py_strip(m[0].content));
        }
        sb_puts(b, "<|im_end|>\n");
    } else if (m[0].role == ROLE_SYSTEM) {
        sb_puts(b, "<|im_start|>system\n");
        sb_sl(b, sl_py_strip(m[0].content));
        sb_puts(b, "<|im_end|>\n");
    }

    size_t last_query = SIZE_MAX;
    for (size_t k = n; k-- > 0;) {
        slice c = sl_py_strip(m[k].content);
        if (m[k].role == ROLE_USER && !(sl_starts(c, "<tool_response>") && sl_ends(c, "</tool_response>"))) {
            last_query = k;
            break;
        }
    }
    if (last_query == SIZE_MAX)
        return e0_fail(err, E0_EFORMAT, "messages: no user query (Qwen3.5's template needs a user message)");

    for (i = 0; i < n; i++) {
        slice content = sl_py_strip(m[i].content);
        switch (m[i].role) {
        case ROLE_SYSTEM:
            break; /* the first, rendered by the header */
        case ROLE_USER:
            sb_puts(b, "<|im_start|>user\n");
            sb_sl(b, content);
            sb_puts(b, "<|im_end|>\n");
            break;
        case ROLE_ASSISTANT:
            if ((rc = put_assistant35(b, &m[i], i, last_query, err))) return rc;
            break;
        case ROLE_TOOL:
            if (i > 0 && m[i - 1].role != ROLE_TOOL) sb_puts(b, "<|im_start|>user");
            sb_puts(b, "\n<tool_response>\n");
            sb_sl(b, content);
            sb_puts(b, "\n</tool_response>");
            if (i + 1 == n || m[i + 1].role != ROLE_TOOL) sb_puts(b, "<|im_end|>\n");
            break;
        }
    }
    if (o->add_generation_prompt)
        sb_puts(b, o->enable_thinking ? "<|im_start|>assistant\n<think>\n" : "<|im_start|>assistant\n<think>\n\n</think>\n\n");
    return 0;
}

int chat_render(const cJSON *messages, const chat_opts *o, char **out, size_t *len, char *err) {
    if (!messages || !out) return e0_fail(err, E0_EINVAL, "chat_render: NULL argument");
    chat_opts def;
    if (!o) {
        chat_opts_default(&def);
        o = &def;
    }
    if (!cJSON_IsArray(messages)) return e0_fail(err, E0_EFORMAT, "messages: not an array");
    if (o->tools && !cJSON_IsNull(o->tools) && !cJSON_IsArray(o->tools))
        return e0_fail(err, E0_EFORMAT, "tools: not an array");
    size_t n = 0;
    for (const cJSON *it = messages->child; it; it = it->next)
        n++;
    if (n == 0) return e0_fail(err, E0_EFORMAT, "messages: empty array");

    chat_msg *m = calloc(n, sizeof *m);
    if (!m) return e0_fail(err, E0_ENOMEM, "messages: out of memory (%zu messages)", n);
    sbuf b = {0};
    chat_opts oo = *o;
    if (oo.tools && !cJSON_IsArray(oo.tools)) oo.tools = NULL; /* JSON null */
    int rc = oo.format == CHAT_FORMAT_QWEN35 ? render35(&b, messages, &oo, m, n, err)
                                             : render(&b, messages, &oo, m, n, err);
    for (size_t i = 0; i < n; i++)
        free(m[i].owned);
    free(m);
    if (!rc) sb_put(&b, "", 0);
    if (!rc && b.oom) rc = e0_fail(err, E0_ENOMEM, "chat_render: out of memory");
    if (rc) {
        free(b.p);
        return rc;
    }
    *out = b.p;
    if (len) *len = b.n;
    return 0;
}

