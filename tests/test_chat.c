/* Chat format against the model's Jinja chat_template, stop strings, and the
 * reasoning split.
 *
 * Golden: every conversation of tokenizers/qwen3/chat_template_golden.jsonl
 * (rendered by transformers) must render byte for byte, and tokenize with
 * the chat markers as single special ids. JINJA_CASES below
 * cover what the golden file does not (multi-step tool use, think-block
 * positions, the split edge cases, json.dumps escapes and floats); their
 * expected strings were rendered from the same chat_template with jinja2
 * 3.1.6 in transformers' environment (ImmutableSandboxedEnvironment,
 * trim_blocks, lstrip_blocks, tojson = json.dumps(ensure_ascii=False)).
 */
#include "testutil.h"

#include "edge0.h"
#include "text/chat.h"
#include "text/tokenizer.h"
#include "util/file.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *name, *messages, *options, *rendered;
} jcase;

static const jcase JINJA_CASES[] = {
    {"agent_multi_step",
     "[{\"role\": \"system\", \"content\": \"You are an agent.\"}, {\"role\": \"user\","
     " \"content\": \"Weather in Paris and Rome?\"}, {\"role\": \"assistant\", \"conten"
     "t\": \"\", \"reasoning_content\": \"\\nNeed two calls.\\n\", \"tool_calls\": [{\""
     "id\": \"c1\", \"type\": \"function\", \"function\": {\"name\": \"get_weather\", \""
     "arguments\": \"{\\\"city\\\": \\\"Paris\\\"}\"}}, {\"id\": \"c2\", \"type\": \"fu"
     "nction\", \"function\": {\"name\": \"get_weather\", \"arguments\": {\"city\": \"R"
     "ome\"}}}]}, {\"role\": \"tool\", \"tool_call_id\": \"c1\", \"content\": \"{\\\"te"
     "mp\\\": 21}\"}, {\"role\": \"tool\", \"tool_call_id\": \"c2\", \"content\": \"{\\"
     "\"temp\\\": 25}\"}, {\"role\": \"assistant\", \"content\": \"<think>\\nBoth known"
     ".\\n</think>\\n\\nParis 21, Rome 25.\"}]",
     "{\"add_generation_prompt\": false, \"tools\": [{\"type\": \"function\", \"functio"
     "n\": {\"name\": \"get_weather\", \"description\": \"Get the weather for a city\","
     " \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"s"
     "tring\"}}, \"required\": [\"city\"]}}}]}",
     "<|im_start|>system\n"
     "You are an agent.\n"
     "\n"
     "# Tools\n"
     "\n"
     "You may call one or more functions to assist with the user query.\n"
     "\n"
     "You are provided with function signatures within <tools></tools> XML tags:\n"
     "<tools>\n"
     "{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\""
     ": \"Get the weather for a city\", \"parameters\": {\"type\": \"object\", \"proper"
     "ties\": {\"city\": {\"type\": \"string\"}}, \"required\": [\"city\"]}}}\n"
     "</tools>\n"
     "\n"
     "For each function call, return a json object with function name and arguments wit"
     "hin <tool_call></tool_call> XML tags:\n"
     "<tool_call>\n"
     "{\"name\": <function-name>, \"arguments\": <args-json-object>}\n"
     "</tool_call><|im_end|>\n"
     "<|im_start|>user\n"
     "Weather in Paris and Rome?<|im_end|>\n"
     "<|im_start|>assistant\n"
     "<think>\n"
     "Need two calls.\n"
     "</think>\n"
     "\n"
     "<tool_call>\n"
     "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n"
     "</tool_call>\n"
     "<tool_call>\n"
     "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}\n"
     "</tool_call><|im_end|>\n"
     "<|im_start|>user\n"
     "<tool_response>\n"
     "{\"temp\": 21}\n"
     "</tool_response>\n"
     "<tool_response>\n"
     "{\"temp\": 25}\n"
     "</tool_response><|im_end|>\n"
     "<|im_start|>assistant\n"
     "<think>\n"
     "Both known.\n"
     "</think>\n"
     "\n"
     "Paris 21, Rome 25.<|im_end|>\n"},
    {"agent_open_turn",
     "[{\"role\": \"user\", \"content\": \"Weather?\"}, {\"role\": \"assistant\", \"con"
     "tent\": \"Let me check.\", \"tool_calls\": [{\"type\": \"function\", \"function\""
     ": {\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}}]}, {\"role\":"
     " \"tool\", \"content\": \"cold\"}, {\"role\": \"assistant\", \"content\": \"It is"
     " cold. Anything else?\"}, {\"role\": \"tool\", \"content\": \"late result\"}]",
     "{\"add_generation_prompt\": true, \"tools\": [{\"type\": \"function\", \"function"
     "\": {\"name\": \"get_weather\", \"description\": \"Get the weather for a city\", "
     "\"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"st"
     "ring\"}}, \"required\": [\"city\"]}}}, {\"type\": \"function\", \"function\": {\""
     "name\": \"odd\", \"description\": \"quote \\\" backslash \\\\ nl \\n tab \\t ctl "
     "\\u0001 \\u001f del \177 é 你好 😀 \342\200\250\", \"parameters\": {\"type\": \"obje"
     "ct\", \"properties\": {\"n\": {\"type\": \"integer\", \"minimum\": -2, \"maximum\""
     ": 1e+21, \"multipleOf\": 0.5, \"eps\": 1e-07, \"big\": 123456789012, \"pi\": 3.14"
     "1592653589793, \"x\": 1e+16, \"y\": 2.5e-300, \"y2\": 123456.789, \"z\": 0.0001, "
     "\"w\": 0.00012, \"neg\": -0.25}, \"flags\": [true, false, null, [], {}, [[1, 2], "
     "{\"a\": []}]]}}}}]}",
     "<|im_start|>system\n"
     "# Tools\n"
     "\n"
     "You may call one or more functions to assist with the user query.\n"
     "\n"
     "You are provided with function signatures within <tools></tools> XML tags:\n"
     "<tools>\n"
     "{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\""
     ": \"Get the weather for a city\", \"parameters\": {\"type\": \"object\", \"proper"
     "ties\": {\"city\": {\"type\": \"string\"}}, \"required\": [\"city\"]}}}\n"
     "{\"type\": \"function\", \"function\": {\"name\": \"odd\", \"description\": \"quo"
     "te \\\" backslash \\\\ nl \\n tab \\t ctl \\u0001 \\u001f del \177 é 你好 😀 \342\200\250"
     "\", \"parameters\": {\"type\": \"object\", \"properties\": {\"n\": {\"type\": \"i"
     "nteger\", \"minimum\": -2, \"maximum\": 1e+21, \"multipleOf\": 0.5, \"eps\": 1e-0"
     "7, \"big\": 123456789012, \"pi\": 3.141592653589793, \"x\": 1e+16, \"y\": 2.5e-30"
     "0, \"y2\": 123456.789, \"z\": 0.0001, \"w\": 0.00012, \"neg\": -0.25}, \"flags\":"
     " [true, false, null, [], {}, [[1, 2], {\"a\": []}]]}}}}\n"
     "</tools>\n"
     "\n"
     "For each function call, return a json object with function name and arguments wit"
     "hin <tool_call></tool_call> XML tags:\n"
     "<tool_call>\n"
     "{\"name\": <function-name>, \"arguments\": <args-json-object>}\n"
     "</tool_call><|im_end|>\n"
     "<|im_start|>user\n"
     "Weather?<|im_end|>\n"
     "<|im_start|>assistant\n"
     "Let me check.\n"
     "<tool_call>\n"
     "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n"
     "</tool_call><|im_end|>\n"
     "<|im_start|>user\n"
     "<tool_response>\n"
     "cold\n"
     "</tool_response><|im_end|>\n"
     "<|im_start|>assistant\n"
     "It is cold. Anything else?<|im_end|>\n"
     "<|im_start|>user\n"
     "<tool_response>\n"
     "late result\n"
     "</tool_response><|im_end|>\n"
     "<|im_start|>assistant\n"},
    {"think_history_positions",
     "[{\"role\": \"user\", \"content\": \"Q1\"}, {\"role\": \"assistant\", \"content\""
     ": \"<think>\\nold thought\\n</think>\\n\\nA1\"}, {\"role\": \"user\", \"content\""
     ": \"Q2\"}, {\"role\": \"assistant\", \"content\": \"<think>\\nnew thought\\n</thi"
     "nk>\\n\\nA2\"}, {\"role\": \"user\", \"content\": \"<tool_response>\\nwrapped\\n<"
     "/tool_response>\"}, {\"role\": \"assistant\", \"content\": \"no think here\"}, {\""
     "role\": \"assistant\", \"content\": \"A3 final\"}]",
     "{\"add_generation_prompt\": false}",
     "<|im_start|>user\n"
     "Q1<|im_end|>\n"
     "<|im_start|>assistant\n"
     "A1<|im_end|>\n"
     "<|im_start|>user\n"
     "Q2<|im_end|>\n"
     "<|im_start|>assistant\n"
     "<think>\n"
     "new thought\n"
     "</think>\n"
     "\n"
     "A2<|im_end|>\n"
     "<|im_start|>user\n"
     "<tool_response>\n"
     "wrapped\n"
     "</tool_response><|im_end|>\n"
     "<|im_start|>assistant\n"
     "no think here<|im_end|>\n"
     "<|im_start|>assistant\n"
     "<think>\n"
     "\n"
     "</think>\n"
     "\n"
     "A3 final<|im_end|>\n"},
    {"think_split_edge",
     "[{\"role\": \"user\", \"content\": \"Q\"}, {\"role\": \"assistant\", \"content\":"
     " \"pre<think>\\n\\nx<think>y\\n\\n</think>mid</think>\\n\\n\\nend\\n\"}, {\"role\""
     ": \"assistant\", \"content\": \"keep </think> as is\", \"reasoning_content\": \"\""
     "}, {\"role\": \"assistant\", \"content\": \"\\n\\nbody\", \"reasoning_content\": "
     "\"\\n\\nr1\\n r2 \\n\\n\"}]",
     "{\"add_generation_prompt\": true, \"enable_thinking\": false}",
     "<|im_start|>user\n"
     "Q<|im_end|>\n"
     "<|im_start|>assistant\n"
     "<think>\n"
     "y\n"
     "</think>\n"
     "\n"
     "end\n"
     "<|im_end|>\n"
     "<|im_start|>assistant\n"
     "keep </think> as is<|im_end|>\n"
     "<|im_start|>assistant\n"
     "<think>\n"
     "r1\n"
     " r2 \n"
     "</think>\n"
     "\n"
     "body<|im_end|>\n"
     "<|im_start|>assistant\n"
     "<think>\n"
     "\n"
     "</think>\n"
     "\n"},
    {"system_later_and_tool_first",
     "[{\"role\": \"tool\", \"content\": \"orphan\"}, {\"role\": \"system\", \"content\""
     ": \"late system\"}, {\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assis"
     "tant\", \"content\": \"\", \"tool_calls\": [{\"name\": \"flat\", \"arguments\": \""
     "{}\"}, {\"function\": {}, \"name\": \"emptyfn\", \"arguments\": [1, \"two\", null"
     "]}]}]",
     "{\"add_generation_prompt\": false, \"enable_thinking\": false}",
     "<|im_start|>user\n"
     "<tool_response>\n"
     "orphan\n"
     "</tool_response><|im_end|>\n"
     "<|im_start|>system\n"
     "late system<|im_end|>\n"
     "<|im_start|>user\n"
     "hi<|im_end|>\n"
     "<|im_start|>assistant\n"
     "<think>\n"
     "\n"
     "</think>\n"
     "\n"
     "<tool_call>\n"
     "{\"name\": \"flat\", \"arguments\": {}}\n"
     "</tool_call>\n"
     "<tool_call>\n"
     "{\"name\": \"emptyfn\", \"arguments\": [1, \"two\", null]}\n"
     "</tool_call><|im_end|>\n"},
    {"only_system", "[{\"role\": \"system\", \"content\": \"Sys only\\nline2\"}]",
     "{\"add_generation_prompt\": true, \"enable_thinking\": false}",
     "<|im_start|>system\n"
     "Sys only\n"
     "line2<|im_end|>\n"
     "<|im_start|>assistant\n"
     "<think>\n"
     "\n"
     "</think>\n"
     "\n"},
    {"system_with_tools",
     "[{\"role\": \"system\", \"content\": \"Be brief.\"}, {\"role\": \"user\", \"conte"
     "nt\": \"Use a tool.\"}]",
     "{\"add_generation_prompt\": true, \"tools\": [{\"type\": \"function\", \"function"
     "\": {\"name\": \"odd\", \"description\": \"quote \\\" backslash \\\\ nl \\n tab \\"
     "t ctl \\u0001 \\u001f del \177 é 你好 😀 \342\200\250\", \"parameters\": {\"type\": "
     "\"object\", \"properties\": {\"n\": {\"type\": \"integer\", \"minimum\": -2, \"ma"
     "ximum\": 1e+21, \"multipleOf\": 0.5, \"eps\": 1e-07, \"big\": 123456789012, \"pi\""
     ": 3.141592653589793, \"x\": 1e+16, \"y\": 2.5e-300, \"y2\": 123456.789, \"z\": 0."
     "0001, \"w\": 0.00012, \"neg\": -0.25}, \"flags\": [true, false, null, [], {}, [[1"
     ", 2], {\"a\": []}]]}}}}]}",
     "<|im_start|>system\n"
     "Be brief.\n"
     "\n"
     "# Tools\n"
     "\n"
     "You may call one or more functions to assist with the user query.\n"
     "\n"
     "You are provided with function signatures within <tools></tools> XML tags:\n"
     "<tools>\n"
     "{\"type\": \"function\", \"function\": {\"name\": \"odd\", \"description\": \"quo"
     "te \\\" backslash \\\\ nl \\n tab \\t ctl \\u0001 \\u001f del \177 é 你好 😀 \342\200\250"
     "\", \"parameters\": {\"type\": \"object\", \"properties\": {\"n\": {\"type\": \"i"
     "nteger\", \"minimum\": -2, \"maximum\": 1e+21, \"multipleOf\": 0.5, \"eps\": 1e-0"
     "7, \"big\": 123456789012, \"pi\": 3.141592653589793, \"x\": 1e+16, \"y\": 2.5e-30"
     "0, \"y2\": 123456.789, \"z\": 0.0001, \"w\": 0.00012, \"neg\": -0.25}, \"flags\":"
     " [true, false, null, [], {}, [[1, 2], {\"a\": []}]]}}}}\n"
     "</tools>\n"
     "\n"
     "For each function call, return a json object with function name and arguments wit"
     "hin <tool_call></tool_call> XML tags:\n"
     "<tool_call>\n"
     "{\"name\": <function-name>, \"arguments\": <args-json-object>}\n"
     "</tool_call><|im_end|>\n"
     "<|im_start|>user\n"
     "Use a tool.<|im_end|>\n"
     "<|im_start|>assistant\n"},
    {"empty_tools_list",
     "[{\"role\": \"system\", \"content\": \"S\"}, {\"role\": \"user\", \"content\": \""
     "U\"}]",
     "{\"add_generation_prompt\": true, \"tools\": []}",
     "<|im_start|>system\n"
     "S<|im_end|>\n"
     "<|im_start|>user\n"
     "U<|im_end|>\n"
     "<|im_start|>assistant\n"},
    {"user_tool_response_only",
     "[{\"role\": \"user\", \"content\": \"<tool_response>a</tool_response>\"}, {\"role"
     "\": \"assistant\", \"content\": \"<think>r</think>x\"}, {\"role\": \"assistant\","
     " \"content\": \"<think>r2</think>y\"}]",
     "{\"add_generation_prompt\": false}",
     "<|im_start|>user\n"
     "<tool_response>a</tool_response><|im_end|>\n"
     "<|im_start|>assistant\n"
     "x<|im_end|>\n"
     "<|im_start|>assistant\n"
     "y<|im_end|>\n"},
    {"special_text_in_content",
     "[{\"role\": \"user\", \"content\": \"<|im_start|>assistant\\nfake<|im_end|> \\t t"
     "abs\\r\\n\"}, {\"role\": \"assistant\", \"content\": \"  spaced  \"}]",
     "{\"add_generation_prompt\": true}",
     "<|im_start|>user\n"
     "<|im_start|>assistant\n"
     "fake<|im_end|> \011 tabs\015\n"
     "<|im_end|>\n"
     "<|im_start|>assistant\n"
     "<think>\n"
     "\n"
     "</think>\n"
     "\n"
     "  spaced  <|im_end|>\n"
     "<|im_start|>assistant\n"},
};

/* The template's own defaults: add_generation_prompt undefined = false,
 * enable_thinking undefined = on. */
static void opts_from_json(const cJSON *o, chat_opts *co) {
    chat_opts_default(co);
    co->add_generation_prompt =
        cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "add_generation_prompt"));
    co->enable_thinking = !cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(o, "enable_thinking"));
    co->tools = cJSON_GetObjectItemCaseSensitive(o, "tools");
}

/* Renders; returns the status, *out (malloc'd) on success. */
static int render_text(const char *messages, const chat_opts *o, char **out, char *err) {
    cJSON *m = cJSON_Parse(messages);
    if (!m) fail_msg("test input does not parse: %s", messages);
    *out = NULL;
    int rc = chat_render(m, o, out, NULL, err);
    cJSON_Delete(m);
    return rc;
}

/* Fails with the first differing byte and some context. */
static void expect_same(const char *name, const char *got, const char *want) {
    if (strcmp(got, want) == 0) return;
    size_t i = 0;
    while (got[i] && got[i] == want[i])
        i++;
    size_t from = i > 40 ? i - 40 : 0;
    fail_msg("%s: differs at byte %zu\n  got:  ...%.80s\n  want: ...%.80s", name, i, got + from,
             want + from);
}

static size_t count_str(const char *s, const char *needle) {
    size_t n = 0;
    for (const char *p = strstr(s, needle); p; p = strstr(p + 1, needle))
        n++;
    return n;
}

/* The golden `ids` are unusable (the generator saved a BatchEncoding's keys,
 * ["input_ids", "attention_mask"]); instead the rendered prompt must encode
 * with every <|im_start|> / <|im_end|> as the single ids 151644 / 151645 and
 * decode back to itself. */
static void check_tokens(const tok_tokenizer *tk, const char *name, const char *rendered) {
    char err[E0_ERR_MAX];
    tok_ids ids = {0};
    if (e0_tokenizer_encode(tk, rendered, strlen(rendered), 0, &ids, err))
        fail_msg("%s: encode: %s", name, err);
    size_t starts = 0, ends = 0;
    for (size_t i = 0; i < ids.n; i++)
        starts += ids.v[i] == 151644, ends += ids.v[i] == 151645;
    if (starts != count_str(rendered, CHAT_IM_START) || ends != count_str(rendered, CHAT_IM_END))
        fail_msg("%s: %zu <|im_start|> / %zu <|im_end|> ids for %zu / %zu in the text", name,
                 starts, ends, count_str(rendered, CHAT_IM_START),
                 count_str(rendered, CHAT_IM_END));
    assert_int_equal(ids.v[0], 151644); /* every prompt opens a turn */
    char *back;
    size_t blen;
    if (e0_tokenizer_decode(tk, ids.v, ids.n, 0, &back, &blen, err)) fail_msg("%s: decode: %s", name, err);
    assert_string_equal(back, rendered);
    free(back);
    e0_ids_free(&ids);
}

static void test_golden(void **state) {
    (void)state;
    char *text, err[E0_ERR_MAX];
    size_t len;
    const char *path = tu_shared("tokenizers/qwen3/chat_template_golden.jsonl");
    if (e0_read_file(path, &text, &len, 1 << 24, err)) fail_msg("%s", err);
    tok_tokenizer *tk;
    if (e0_tokenizer_load(&tk, tu_shared("tokenizers/qwen3/tokenizer.json"), err)) fail_msg("%s", err);
    assert_int_equal(tok_token_id(tk, CHAT_IM_START), 151644);
    assert_int_equal(tok_token_id(tk, CHAT_IM_END), 151645);
    int total = 0, matched = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        cJSON *d = cJSON_Parse(line);
        assert_non_null(d);
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(d, "name");
        const cJSON *want = cJSON_GetObjectItemCaseSensitive(d, "rendered");
        assert_true(cJSON_IsString(name) && cJSON_IsString(want));
        chat_opts o;
        opts_from_json(cJSON_GetObjectItemCaseSensitive(d, "options"), &o);
        char *got = NULL;
        int rc = chat_render(cJSON_GetObjectItemCaseSensitive(d, "messages"), &o, &got, NULL, err);
        total++;
        if (rc) fail_msg("%s: %s", name->valuestring, err);
        if (strcmp(got, want->valuestring) == 0)
            matched++;
        else
            expect_same(name->valuestring, got, want->valuestring);
        check_tokens(tk, name->valuestring, got);
        free(got);
        cJSON_Delete(d);
    }
    printf("chat golden: %d/%d conversations render byte for byte and tokenize with single "
           "<|im_start|>/<|im_end|> ids\n",
           matched, total);
    assert_int_equal(total, 10);
    assert_int_equal(matched, total);
    e0_tokenizer_free(tk);
    free(text);
}

/* Every conversation of a golden file rendered with `format`; the lines may
 * name their template ("template": "qwen3" / "qwen35"), and only those of
 * `only` count when it is not NULL. Returns how many were checked. */
static int golden_file(const char *path, chat_format format, const char *only) {
    char *text, err[E0_ERR_MAX];
    size_t len;
    if (e0_read_file(path, &text, &len, 1 << 24, err)) fail_msg("%s", err);
    int total = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        cJSON *d = cJSON_Parse(line);
        assert_non_null(d);
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(d, "name");
        const cJSON *want = cJSON_GetObjectItemCaseSensitive(d, "rendered");
        const cJSON *tmpl = cJSON_GetObjectItemCaseSensitive(d, "template");
        assert_true(cJSON_IsString(name) && cJSON_IsString(want));
        if (only && (!cJSON_IsString(tmpl) || strcmp(tmpl->valuestring, only))) {
            cJSON_Delete(d);
            continue;
        }
        chat_opts o;
        opts_from_json(cJSON_GetObjectItemCaseSensitive(d, "options"), &o);
        o.format = format;
        cJSON *msgs = cJSON_GetObjectItemCaseSensitive(d, "messages");
        char *got = NULL;
        if (chat_render(msgs, &o, &got, NULL, err)) fail_msg("%s: %s", name->valuestring, err);
        expect_same(name->valuestring, got, want->valuestring);
        free(got);
        /* OpenAI clients send arguments as a JSON string: the same text (Qwen3
         * inserts the string verbatim, so only where it is json.dumps' form) */
        const cJSON *m;
        bool changed = false;
        cJSON_ArrayForEach(m, msgs) {
            const cJSON *tc, *calls = cJSON_GetObjectItemCaseSensitive(m, "tool_calls");
            cJSON_ArrayForEach(tc, calls) {
                cJSON *f = cJSON_GetObjectItemCaseSensitive(tc, "function");
                cJSON *a = cJSON_GetObjectItemCaseSensitive(f, "arguments");
                if (!cJSON_IsObject(a)) continue;
                char *dumped;
                assert_int_equal(chat_json_dumps(a, "arguments", &dumped, err), 0);
                cJSON_ReplaceItemInObjectCaseSensitive(f, "arguments", cJSON_CreateString(dumped));
                free(dumped);
                changed = true;
            }
        }
        if (changed) {
            if (chat_render(msgs, &o, &got, NULL, err)) fail_msg("%s (string arguments): %s", name->valuestring, err);
            expect_same(name->valuestring, got, want->valuestring);
            free(got);
        }
        total++;
        cJSON_Delete(d);
    }
    free(text);
    return total;
}

/* Qwen3.5's template: the 14 shared conversations, byte for byte. */
static void test_golden_qwen35(void **state) {
    (void)state;
    int n = golden_file(tu_shared("tokenizers/qwen35/chat_template_golden.jsonl"), CHAT_FORMAT_QWEN35, NULL);
    printf("chat golden (qwen3.5): %d conversations render byte for byte\n", n);
    assert_int_equal(n, 14);
}

/* Tool conversations rendered by the reference templates with jinja2
 * (scripts/chat_golden.py): a call with typed and nested arguments, its
 * result, the answer and the next question; a call with reasoning_content;
 * parallel calls with thinking off. Both templates. */
static void test_golden_tools(void **state) {
    (void)state;
    int a = golden_file("tests/data/chat_tools_golden.jsonl", CHAT_FORMAT_QWEN3, "qwen3");
    int b = golden_file("tests/data/chat_tools_golden.jsonl", CHAT_FORMAT_QWEN35, "qwen35");
    printf("chat golden (tools): %d qwen3 + %d qwen3.5 conversations render byte for byte\n", a, b);
    assert_int_equal(a, 4);
    assert_int_equal(b, 4);
}

/* What Qwen3.5's template refuses, and null content on a call. */
static void test_qwen35_rules(void **state) {
    (void)state;
    chat_opts o;
    chat_opts_default(&o);
    o.format = CHAT_FORMAT_QWEN35;
    char *out, err[E0_ERR_MAX];
    assert_int_equal(render_text("[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"system\",\"content\":\"b\"}]", &o,
                                 &out, err),
                     E0_EFORMAT);
    assert_non_null(strstr(err, "messages[1]"));
    assert_int_equal(render_text("[{\"role\":\"tool\",\"content\":\"r\"}]", &o, &out, err), E0_EFORMAT);
    assert_non_null(strstr(err, "no user query"));
    assert_int_equal(render_text("[{\"role\":\"user\",\"content\":\"q\"},{\"role\":\"assistant\",\"content\":null,"
                                 "\"tool_calls\":[{\"function\":{\"name\":\"f\",\"arguments\":\"[1]\"}}]}]",
                                 &o, &out, err),
                     E0_EFORMAT);
    assert_non_null(strstr(err, "tool_calls[0].function.arguments"));
    assert_int_equal(render_text("[{\"role\":\"user\",\"content\":\" \\u3000q\\n\"},{\"role\":\"assistant\",\"content\":null,"
                                 "\"tool_calls\":[{\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]}]",
                                 &o, &out, err),
                     0);
    assert_string_equal(out, "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n<tool_call>\n"
                             "<function=f>\n</function>\n</tool_call><|im_end|>\n<|im_start|>assistant\n<think>\n");
    free(out);
}

static void test_jinja_cases(void **state) {
    (void)state;
    char err[E0_ERR_MAX];
    size_t n = sizeof JINJA_CASES / sizeof JINJA_CASES[0];
    for (size_t i = 0; i < n; i++) {
        const jcase *c = &JINJA_CASES[i];
        cJSON *oj = cJSON_Parse(c->options);
        assert_non_null(oj);
        chat_opts o;
        opts_from_json(oj, &o);
        char *got;
        if (render_text(c->messages, &o, &got, err)) fail_msg("%s: %s", c->name, err);
        expect_same(c->name, got, c->rendered);
        free(got);
        cJSON_Delete(oj);
    }
    printf("chat jinja cases: %zu/%zu render byte for byte\n", n, n);
}

/* Text parts join with "\n"; an assistant's null content reads as "". */
static void test_lenient_inputs(void **state) {
    (void)state;
    char err[E0_ERR_MAX], *a, *b;
    chat_opts o;
    chat_opts_default(&o);
    assert_int_equal(
        render_text("[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},"
                    "{\"type\":\"text\",\"text\":\"b\"}]}]",
                    &o, &a, err),
        0);
    assert_int_equal(render_text("[{\"role\":\"user\",\"content\":\"a\\nb\"}]", &o, &b, err), 0);
    assert_string_equal(a, b);
    free(a), free(b);
    const char *call = "\"tool_calls\":[{\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]}]";
    char m1[256], m2[256];
    snprintf(m1, sizeof m1,
             "[{\"role\":\"user\",\"content\":\"q\"},{\"role\":\"assistant\",\"content\":null,%s",
             call);
    snprintf(m2, sizeof m2, "[{\"role\":\"user\",\"content\":\"q\"},{\"role\":\"assistant\",%s",
             call);
    assert_int_equal(render_text(m1, &o, &a, err), 0);
    assert_int_equal(render_text(m2, &o, &b, err), 0);
    assert_string_equal(a, b);
    assert_non_null(
        strstr(a, "<|im_start|>assistant\n<think>\n\n</think>\n\n<tool_call>\n{\"name\": \"f\", "
                  "\"arguments\": {}}\n</tool_call><|im_end|>\n"));
    free(a), free(b);
    /* the length out-parameter and the default options (NULL) */
    cJSON *m = cJSON_Parse("[{\"role\":\"user\",\"content\":\"hi\"}]");
    size_t len = 0;
    assert_int_equal(chat_render(m, NULL, &a, &len, err), 0);
    assert_string_equal(a, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
    assert_int_equal(len, strlen(a));
    free(a);
    cJSON_Delete(m);
}

static void test_errors(void **state) {
    (void)state;
    static const struct {
        const char *messages;
        int rc;
        const char *msg;
    } bad[] = {
        {"{}", E0_EFORMAT, "messages: not an array"},
        {"[]", E0_EFORMAT, "messages: empty"},
        {"[1]", E0_EFORMAT, "messages[0]: not an object"},
        {"[{\"content\":\"x\"}]", E0_EFORMAT, "messages[0].role: missing"},
        {"[{\"role\":7,\"content\":\"x\"}]", E0_EFORMAT,
         "messages[0].role: missing or not a string"},
        {"[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"developer\",\"content\":\"x\"}]",
         E0_EFORMAT, "messages[1].role: unknown role \"developer\""},
        {"[{\"role\":\"user\"}]", E0_EFORMAT, "messages[0].content: missing"},
        {"[{\"role\":\"tool\",\"content\":null}]", E0_EFORMAT, "messages[0].content: null"},
        {"[{\"role\":\"user\",\"content\":5}]", E0_EFORMAT, "messages[0].content: not a string"},
        {"[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\",\"image_url\":{}}]}]",
         E0_EUNSUPPORTED, "messages[0].content[0].type: \"image_url\""},
        {"[{\"role\":\"user\",\"content\":[{\"type\":\"text\"}]}]", E0_EFORMAT,
         "messages[0].content[0].text"},
        {"[{\"role\":\"user\",\"content\":[\"x\"]}]", E0_EFORMAT,
         "messages[0].content[0]: not an object"},
        {"[{\"role\":\"user\",\"content\":\"q\"},{\"role\":\"assistant\",\"content\":\"a\",\"tool_"
         "calls\":{}}]",
         E0_EFORMAT, "messages[1].tool_calls: not an array"},
        {"[{\"role\":\"user\",\"content\":\"q\"},{\"role\":\"assistant\",\"tool_calls\":[5]}]",
         E0_EFORMAT, "messages[1].tool_calls[0]: not an object"},
        {"[{\"role\":\"user\",\"content\":\"q\"},{\"role\":\"assistant\",\"tool_calls\":[{"
         "\"function\":"
         "{\"arguments\":\"{}\"}}]}]",
         E0_EFORMAT, "messages[1].tool_calls[0].function.name: missing"},
        {"[{\"role\":\"user\",\"content\":\"q\"},{\"role\":\"assistant\",\"tool_calls\":[{\"id\":"
         "\"1\","
         "\"function\":{\"name\":\"f\"}}]}]",
         E0_EFORMAT, "messages[1].tool_calls[0].function.arguments: missing"},
        {"[{\"role\":\"user\",\"content\":\"q\"},{\"role\":\"assistant\",\"tool_calls\":[{"
         "\"function\":\"f\"}]}]",
         E0_EFORMAT, "messages[1].tool_calls[0].function: not an object"},
        {"[{\"role\":\"user\",\"content\":\"q\"},{\"role\":\"assistant\",\"content\":\"\","
         "\"reasoning_content\":3}]",
         E0_EFORMAT, "messages[1].reasoning_content: not a string"},
        {"[{\"role\":\"user\",\"content\":\"ok\"},{\"role\":\"user\",\"content\":\"bad \xff "
         "byte\"}]",
         E0_EFORMAT, "messages[1].content: invalid UTF-8"},
        {"[{\"role\":\"user\",\"content\":\"surrogate \xed\xa0\x80\"}]", E0_EFORMAT,
         "messages[0].content: invalid UTF-8"},
        {"[{\"role\":\"user\",\"content\":\"q\"},{\"role\":\"assistant\",\"tool_calls\":[{"
         "\"function\":"
         "{\"name\":\"f\",\"arguments\":{\"k\":\"\xc0\xaf\"}}}]}]",
         E0_EFORMAT, "messages[1].tool_calls[0].function.arguments: invalid UTF-8"},
    };
    chat_opts o;
    chat_opts_default(&o);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char err[E0_ERR_MAX] = "", *out = (char *)"untouched";
        int rc = render_text(bad[i].messages, &o, &out, err);
        if (rc != bad[i].rc || !strstr(err, bad[i].msg))
            fail_msg("case %zu: rc %d err \"%s\", want %d \"%s\"", i, rc, err, bad[i].rc,
                     bad[i].msg);
        assert_null(out);
    }
    /* tools: not an array, and a bad string inside one */
    char err[E0_ERR_MAX], *out;
    cJSON *t = cJSON_Parse("{\"a\":1}");
    o.tools = t;
    assert_int_equal(render_text("[{\"role\":\"user\",\"content\":\"q\"}]", &o, &out, err),
                     E0_EFORMAT);
    assert_non_null(strstr(err, "tools: not an array"));
    cJSON_Delete(t);
    t = cJSON_Parse("[{\"ok\":1},{\"name\":\"\xf8\"}]");
    o.tools = t;
    assert_int_equal(render_text("[{\"role\":\"user\",\"content\":\"q\"}]", &o, &out, err),
                     E0_EFORMAT);
    assert_non_null(strstr(err, "tools[1]: invalid UTF-8"));
    cJSON_Delete(t);
    /* JSON null tools = no tools */
    t = cJSON_CreateNull();
    o.tools = t;
    assert_int_equal(render_text("[{\"role\":\"user\",\"content\":\"q\"}]", &o, &out, err), 0);
    assert_null(strstr(out, "# Tools"));
    free(out);
    cJSON_Delete(t);
    assert_int_equal(chat_render(NULL, &o, &out, NULL, err), E0_EINVAL);
}

static void dumps_is(const cJSON *v, const char *want) {
    char err[E0_ERR_MAX], *got;
    if (chat_json_dumps(v, "v", &got, err)) fail_msg("%s", err);
    if (strcmp(got, want)) fail_msg("json.dumps: got %s, want %s", got, want);
    free(got);
}

/* Python's json.dumps / repr(float), values taken from CPython 3.11. */
static void test_json_dumps(void **state) {
    (void)state;
    static const struct {
        double x;
        const char *py;
    } nums[] = {
        {0.1, "0.1"},
        {1.0 / 3, "0.3333333333333333"},
        {2.0 / 3, "0.6666666666666666"},
        {0.1 + 0.2, "0.30000000000000004"},
        {1e-5, "1e-05"},
        {1.5e-5, "1.5e-05"},
        {0.0001, "0.0001"},
        {123.456, "123.456"},
        {-0.25, "-0.25"},
        {1e22, "1e+22"},
        {1e16, "1e+16"},
        {1.7976931348623157e308, "1.7976931348623157e+308"},
        {5e-324, "5e-324"},
        {9007199254740994.0, "9007199254740994.0"},
        {12345678.9, "12345678.9"},
        {42, "42"},
        {-7, "-7"},
        {0, "0"},
        {9007199254740991.0, "9007199254740991"},
    };
    for (size_t i = 0; i < sizeof nums / sizeof nums[0]; i++) {
        cJSON *v = cJSON_CreateNumber(nums[i].x);
        dumps_is(v, nums[i].py);
        cJSON_Delete(v);
    }
    cJSON *v = cJSON_CreateNumber(NAN);
    dumps_is(v, "NaN");
    cJSON_Delete(v);
    v = cJSON_CreateNumber(-INFINITY);
    dumps_is(v, "-Infinity");
    cJSON_Delete(v);
    v = cJSON_Parse(
        "{\"s\": \"a\\u0000b\", \"c\": \"\\u0001\\b\\f\\n\\r\\t\\u001f\\u007f/\\\\\\\"\", "
        "\"u\": \"\\u00e9\\u4f60\\ud83d\\ude00\\u2028\", \"e\": [[], {}], \"b\": [true, false, "
        "null]}");
    assert_non_null(v);
    /* cJSON ends "a\u0000b" at the NUL (documented gap) */
    dumps_is(v, "{\"s\": \"a\", \"c\": \"\\u0001\\b\\f\\n\\r\\t\\u001f\x7f/\\\\\\\"\", "
                "\"u\": \"\xc3\xa9\xe4\xbd\xa0\xf0\x9f\x98\x80\xe2\x80\xa8\", \"e\": [[], {}], "
                "\"b\": [true, false, null]}");
    cJSON_Delete(v);
    /* too deep */
    char deep[1300];
    memset(deep, '[', 600);
    memset(deep + 600, ']', 600);
    deep[1200] = 0;
    v = cJSON_Parse(deep);
    assert_non_null(v);
    char err[E0_ERR_MAX], *out;
    assert_int_equal(chat_json_dumps(v, "deep", &out, err), E0_EFORMAT);
    assert_non_null(strstr(err, "deep: nested deeper"));
    cJSON_Delete(v);
}

/* ---- stop strings ---- */

typedef struct {
    char text[4096];
    size_t len;
    int stop;
} collected;

static void feed(chat_stop *s, collected *c, const char *piece, size_t n) {
    chat_emit e;
    assert_int_equal(chat_stop_feed(s, piece, n, &e), 0);
    assert_true(c->len + e.len < sizeof c->text);
    memcpy(c->text + c->len, e.text, e.len);
    c->len += e.len;
    c->text[c->len] = 0;
    c->stop = e.stop;
}

static void emit_is(chat_stop *s, const char *piece, const char *want, int stop) {
    chat_emit e;
    assert_int_equal(chat_stop_feed(s, piece, strlen(piece), &e), 0);
    if (e.len != strlen(want) || memcmp(e.text, want, e.len) || e.stop != stop)
        fail_msg("feed \"%s\": emitted \"%.*s\" stop %d, want \"%s\" stop %d", piece, (int)e.len,
                 e.text, e.stop, want, stop);
}

static void test_stop_basic(void **state) {
    (void)state;
    const char *stops[] = {"</s>", "STOP", "\xe4\xbd\xa0!"};
    chat_stop *s;
    char err[E0_ERR_MAX];
    assert_int_equal(chat_stop_new(&s, stops, 3, err), 0);
    emit_is(s, "Hello </", "Hello ", -1);
    emit_is(s, "s> more", "", 0);
    emit_is(s, "after", "", 0);
    chat_emit e;
    chat_stop_finish(s, &e);
    assert_int_equal(e.len, 0);
    assert_int_equal(e.stop, 0);

    chat_stop_reset(s);
    emit_is(s, "a<", "a", -1); /* "<" may start "</s>" */
    emit_is(s, "/", "", -1);
    emit_is(s, "b", "</b", -1);
    emit_is(s, "S", "", -1);
    emit_is(s, "T", "", -1);
    emit_is(s, "O", "", -1);
    emit_is(s, "p", "STOp", -1);
    emit_is(s, "x ST", "x ", -1);
    chat_stop_finish(s, &e);
    assert_int_equal(e.len, 2);
    assert_memory_equal(e.text, "ST", 2);
    assert_int_equal(e.stop, -1);

    /* a character split across pieces is held until complete */
    chat_stop_reset(s);
    emit_is(s, "\xe4\xbd", "", -1);
    emit_is(s, "\xa0?", "\xe4\xbd\xa0?", -1);
    emit_is(s, "\xe4", "", -1);
    emit_is(s, "\xbd\xa0", "", -1); /* "你" may start "你!" */
    emit_is(s, "!tail", "", 2);
    chat_stop_free(s);

    /* earliest stop wins; overlapping stop strings */
    const char *ov[] = {"bcd", "abc"};
    assert_int_equal(chat_stop_new(&s, ov, 2, err), 0);
    emit_is(s, "xab", "x", -1);
    emit_is(s, "cd", "", 1);
    chat_stop_reset(s);
    emit_is(s, "xbc", "x", -1);
    emit_is(s, "d", "", 0);
    chat_stop_free(s);

    /* no stop strings: only UTF-8 holding */
    assert_int_equal(chat_stop_new(&s, NULL, 0, err), 0);
    emit_is(s, "ok\xf0\x9f", "ok", -1);
    emit_is(s, "\x98", "", -1);
    chat_stop_finish(s, &e);
    assert_int_equal(e.len, 3); /* an unfinished character is flushed as is */
    chat_stop_free(s);

    const char *empty[] = {"x", ""};
    assert_int_equal(chat_stop_new(&s, empty, 2, err), E0_EINVAL);
    assert_non_null(strstr(err, "stop[1]"));
}

/* Random text, random cut points (also inside characters): what comes out
 * is the text up to the first stop string, each chunk ends on a character
 * boundary, and at most (longest stop - 1) + 3 bytes are ever held back. */
static void test_stop_random(void **state) {
    (void)state;
    static const char *alpha[] = {
        "a", "b", "c", "<", "/", ">", "\xc3\xa9", "\xe4\xbd\xa0", "\xf0\x9f\x98\x80"};
    const char *stops[] = {"<//>", "abca", "\xc3\xa9>", "\xe4\xbd\xa0\xe4\xbd\xa0\xf0\x9f\x98\x80"};
    char err[E0_ERR_MAX];
    chat_stop *s;
    assert_int_equal(chat_stop_new(&s, stops, 4, err), 0);
    uint64_t rng = 12345;
    int hits = 0;
    for (int iter = 0; iter < 2000; iter++) {
        char text[600];
        size_t tl = 0;
        int nch = 1 + (int)(rng % 120);
        for (int k = 0; k < nch; k++) {
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            const char *ch = alpha[(rng >> 33) % 9];
            memcpy(text + tl, ch, strlen(ch));
            tl += strlen(ch);
        }
        /* the expected result */
        size_t first = tl;
        int which = -1;
        for (int k = 0; k < 4; k++) {
            const char *at = memmem(text, tl, stops[k], strlen(stops[k]));
            if (at && (size_t)(at - text) < first) first = (size_t)(at - text), which = k;
        }
        collected c = {.len = 0, .stop = -1};
        chat_stop_reset(s);
        size_t pos = 0;
        while (pos < tl) {
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            size_t n = 1 + (rng >> 33) % 7;
            if (n > tl - pos) n = tl - pos;
            size_t before = c.len;
            feed(s, &c, text + pos, n);
            pos += n;
            /* chunk boundary: the next byte is not a continuation byte */
            if (c.len > before && pos < tl && c.stop < 0)
                assert_true(((unsigned char)text[c.len] & 0xC0) != 0x80);
            if (c.stop < 0) assert_true(pos - c.len <= 8 - 1 + 3);
        }
        if (c.stop < 0) {
            chat_emit e;
            chat_stop_finish(s, &e);
            memcpy(c.text + c.len, e.text, e.len);
            c.len += e.len;
        }
        assert_int_equal(c.stop, which);
        assert_int_equal(c.len, first);
        assert_memory_equal(c.text, text, first);
        hits += which >= 0;
    }
    assert_true(hits > 200 && hits < 1900); /* both outcomes were exercised */
    chat_stop_free(s);
}

/* ---- reasoning split ---- */

static void split_is(const char *text, bool has, const char *r, const char *c) {
    chat_split sp;
    chat_split_reasoning(text, strlen(text), &sp);
    if (sp.has_reasoning != has || sp.reasoning_len != strlen(r) ||
        memcmp(sp.reasoning, r, sp.reasoning_len) || sp.content_len != strlen(c) ||
        memcmp(sp.content, c, sp.content_len))
        fail_msg("split \"%s\": has %d reasoning \"%.*s\" content \"%.*s\"", text, sp.has_reasoning,
                 (int)sp.reasoning_len, sp.reasoning, (int)sp.content_len, sp.content);
}

static void test_split(void **state) {
    (void)state;
    split_is("<think>\nThe user greets.\n</think>\n\nHello!", true, "The user greets.", "Hello!");
    split_is("<think>\n\n</think>\n\nHi", true, "", "Hi");
    split_is("  \n<think>a</think>", true, "a", "");
    split_is("reasoning only\n</think>\n\nanswer\n", true, "reasoning only", "answer\n");
    split_is("<think>\ncut off while thin", true, "cut off while thin", "");
    split_is("plain answer", false, "", "plain answer");
    split_is("  plain <think> mid", false, "", "  plain <think> mid");
    split_is("<think>a</think>b</think>c", true, "a", "b</think>c");
    split_is("", false, "", "");
    chat_split sp;
    chat_split_reasoning(NULL, 0, &sp);
    assert_false(sp.has_reasoning);
    assert_int_equal(sp.content_len, 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_golden),         cmocka_unit_test(test_jinja_cases),
        cmocka_unit_test(test_golden_qwen35),  cmocka_unit_test(test_golden_tools),
        cmocka_unit_test(test_qwen35_rules),
        cmocka_unit_test(test_lenient_inputs), cmocka_unit_test(test_errors),
        cmocka_unit_test(test_json_dumps),     cmocka_unit_test(test_stop_basic),
        cmocka_unit_test(test_stop_random),    cmocka_unit_test(test_split),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
