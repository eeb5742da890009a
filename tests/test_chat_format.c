/* chat_format_detect on the real Qwen3 and Qwen3.5 templates, a Qwen2.5-
 * style ChatML template, and templates edge0 does not render. */
#include "testutil.h"

#include "edge0.h"
#include "text/chat.h"
#include "util/file.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *read_shared(const char *rel, size_t *len) {
    char *buf, err[E0_ERR_MAX];
    if (e0_read_file(tu_shared(rel), &buf, len, 1 << 24, err)) fail_msg("%s", err);
    return buf;
}

static void test_qwen_templates(void **state) {
    (void)state;
    char err[E0_ERR_MAX] = "";
    chat_format f = 0;
    size_t len;
    char *cfg = read_shared("tokenizers/qwen3/tokenizer_config.json", &len);
    cJSON *j = cJSON_ParseWithLength(cfg, len);
    assert_non_null(j);
    const char *q3 = cJSON_GetObjectItem(j, "chat_template")->valuestring;
    assert_int_equal(chat_format_detect(q3, strlen(q3), &f, err), 0);
    assert_int_equal(f, CHAT_FORMAT_QWEN3);
    assert_string_equal(chat_format_name(f), "qwen3");
    cJSON_Delete(j);
    free(cfg);
    char *q35 = read_shared("tokenizers/qwen35/chat_template.jinja", &len);
    assert_int_equal(chat_format_detect(q35, len, &f, err), 0);
    assert_int_equal(f, CHAT_FORMAT_QWEN35);
    assert_string_equal(chat_format_name(f), "qwen3.5");
    free(q35);
    /* Qwen2.5's template: ChatML turns, no think block */
    const char *q25 = "{%- for message in messages %}{{- '<|im_start|>' + message.role + '\\n' + "
                      "message.content + '<|im_end|>' + '\\n' }}{%- endfor %}{%- if "
                      "add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}";
    assert_int_equal(chat_format_detect(q25, strlen(q25), &f, err), 0);
    assert_int_equal(f, CHAT_FORMAT_CHATML);
    assert_string_equal(chat_format_name(f), "chatml");
    assert_string_equal(chat_format_name((chat_format)99), "?");
}

static void test_unsupported(void **state) {
    (void)state;
    char err[E0_ERR_MAX] = "";
    chat_format f = 0;
    const char *llama3 = "{{- bos_token }}{%- for message in messages %}{{- '<|start_header_id|>' "
                         "+ message['role'] + '<|end_header_id|>\\n\\n' }}{%- endfor %}";
    assert_int_equal(chat_format_detect(llama3, strlen(llama3), &f, err), E0_EUNSUPPORTED);
    print_message("  %s\n", err);
    assert_non_null(strstr(err, "not one edge0 renders"));
    assert_non_null(strstr(err, "{{- bos_token }}"));
    /* the marker past the given length does not count */
    const char *cut = "{{ x }}<|im_start|>";
    assert_int_equal(chat_format_detect(cut, 7, &f, err), E0_EUNSUPPORTED);
    assert_int_equal(chat_format_detect(NULL, 0, &f, err), E0_EUNSUPPORTED);
    assert_non_null(strstr(err, "no chat template"));
    assert_int_equal(chat_format_detect("", 0, &f, err), E0_EUNSUPPORTED);
    assert_int_equal(chat_format_detect("x", 1, NULL, err), E0_EINVAL);
    /* control bytes and a long head are shown cut and printable */
    char big[300];
    memset(big, 'a', sizeof big);
    big[3] = '\n';
    assert_int_equal(chat_format_detect(big, sizeof big, &f, err), E0_EUNSUPPORTED);
    assert_non_null(strstr(err, "aaa aaaa"));
    assert_non_null(strstr(err, "...\""));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_qwen_templates),
        cmocka_unit_test(test_unsupported),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
