/* edge0 tokenize (--tokenizer FILE | MODEL) (--text T | --jsonl FILE | --decode IDS | --bench FILE)
 *
 * --text prints the ids as a JSON array; --jsonl reads lines with a "text"
 * field and writes, per line, {"ids": [...], "decoded": "..."}; --bench
 * times loading and encoding (not part of the tests). */
#include "cli/cli.h"
#include "cli/opts.h"
#include "edge0.h"
#include "util/arr.h"
#include "util/file.h"
#include "util/json.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const char *HELP =
    "usage: edge0 tokenize (--tokenizer FILE | MODEL) (--text T | --jsonl FILE | --decode IDS |\n"
    "                      --bench FILE) [--no-special] [--skip-special]\n"
    "\n"
    "Encodes text with a Hugging Face tokenizer.json (byte-level BPE). MODEL is a model\n"
    "directory that holds tokenizer.json. No BOS/EOS is added; special tokens written in\n"
    "the text (\"<|im_start|>\") are matched as tokens.\n"
    "\n"
    "  --tokenizer FILE  the tokenizer.json to use instead of MODEL/tokenizer.json\n"
    "  --text T          print the ids of T as a JSON array\n"
    "  --jsonl FILE      for each line {\"text\": ...} of FILE (\"-\": stdin) print\n"
    "                    {\"ids\": [...], \"decoded\": \"...\"}, decoded = decode(ids)\n"
    "  --decode IDS      print the text of comma-separated ids\n"
    "  --no-special      encode special tokens in the text as plain text\n"
    "  --skip-special    leave special tokens out of decoded text\n"
    "  --bench FILE      print the load time and the encode / decode speed on FILE\n";

static void put_ids(FILE *f, const int32_t *v, size_t n) {
    fputc('[', f);
    for (size_t i = 0; i < n; i++)
        fprintf(f, i ? ", %d" : "%d", v[i]);
    fputc(']', f);
}

static void file_put(void *f, const char *s, size_t n) {
    fwrite(s, 1, n, f);
}

/* A JSON string (util/json.h; the text is valid UTF-8: it comes from
 * e0_tokenizer_decode). */
static void put_json_str(FILE *f, const char *s, size_t n) {
    json_str(file_put, f, s, n);
}

static int parse_ids(const char *s, e0_ids *ids) {
    for (const char *p = s; *p;) {
        char *end;
        errno = 0;
        long x = strtol(p, &end, 10);
        if (end == p || errno || x < 0 || x > INT32_MAX || (*end && *end != ',')) {
            cli_error("--decode: '%s' is not a comma-separated list of non-negative integers", s);
            return -1;
        }
        if (arr_reserve((void **)&ids->v, &ids->cap, ids->n + 1, sizeof *ids->v)) {
            cli_error("out of memory");
            return -1;
        }
        ids->v[ids->n++] = (int32_t)x;
        p = *end ? end + 1 : end;
    }
    return 0;
}

/* Whether a JSON line holds the escape \u0000, which cJSON would silently
 * turn into the end of the string. */
static bool has_nul_escape(const char *s, size_t n) {
    for (size_t i = 0; i + 6 <= n; i++) {
        if (s[i] != '\\' || memcmp(s + i + 1, "u0000", 5)) continue;
        size_t k = 0; /* backslashes right before: odd means this one is an escape */
        while (k < i && s[i - 1 - k] == '\\')
            k++;
        if (k % 2 == 0) return true;
    }
    return false;
}

static int run_jsonl(const e0_tokenizer *tk, const char *path, unsigned eflags, unsigned dflags) {
    FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
    if (!f) {
        cli_error("%s: cannot open: %s", path, strerror(errno));
        return 1;
    }
    char *line = NULL, err[E0_ERR_MAX];
    size_t cap = 0, lineno = 0;
    ssize_t len;
    int status = 0;
    e0_ids ids = {0};
    while (!status && (len = getline(&line, &cap, f)) >= 0) {
        lineno++;
        size_t k = strspn(line, " \t\r\n");
        if (k == (size_t)len) continue;
        cJSON *j = cJSON_ParseWithLength(line, (size_t)len);
        const cJSON *text = cJSON_IsObject(j) ? cJSON_GetObjectItemCaseSensitive(j, "text") : NULL;
        if (!cJSON_IsString(text) || !text->valuestring || has_nul_escape(line, (size_t)len)) {
            cli_error("%s:%zu: %s", path, lineno,
                      !j                      ? "not valid JSON"
                      : !cJSON_IsObject(j)    ? "not a JSON object"
                      : !cJSON_IsString(text) ? "no string field \"text\""
                                              : "\\u0000 in a string is not supported");
            status = 1;
        } else {
            const char *s = text->valuestring;
            char *dec = NULL;
            size_t dn;
            ids.n = 0;
            if (e0_tokenizer_encode(tk, s, strlen(s), eflags, &ids, err) ||
                e0_tokenizer_decode(tk, ids.v, ids.n, dflags, &dec, &dn, err)) {
                cli_error("%s:%zu: %s", path, lineno, err);
                status = 1;
            } else {
                fputs("{\"ids\": ", stdout);
                put_ids(stdout, ids.v, ids.n);
                fputs(", \"decoded\": ", stdout);
                put_json_str(stdout, dec, dn);
                fputs("}\n", stdout);
            }
            free(dec);
        }
        cJSON_Delete(j);
    }
    if (!status && ferror(f)) {
        cli_error("%s: read error", path);
        status = 1;
    }
    free(line);
    e0_ids_free(&ids);
    if (f != stdin) fclose(f);
    return status;
}

/* Load time, then encode FILE as one text and line by line, then decode,
 * each repeated for about a second. */
static int run_bench(const char *tpath, const char *path, unsigned eflags) {
    char err[E0_ERR_MAX], *text;
    size_t len;
    if (e0_read_file(path, &text, &len, (size_t)1 << 31, err)) {
        cli_error("%s", err);
        return 1;
    }
    double best = 1e9;
    e0_tokenizer *tk = NULL;
    for (int i = 0; i < 3; i++) {
        e0_tokenizer_free(tk);
        double t0 = now_s();
        if (e0_tokenizer_load(&tk, tpath, err)) {
            cli_error("%s", err);
            free(text);
            return 1;
        }
        double dt = now_s() - t0;
        if (dt < best) best = dt;
    }
    printf("load     %s: %.1f ms (best of 3), %d ids\n", tpath, best * 1e3, e0_tokenizer_vocab_size(tk));
    e0_ids ids = {0};
    int status = 1;
    size_t iters = 0;
    double t0 = now_s(), dt;
    do {
        ids.n = 0;
        if (e0_tokenizer_encode(tk, text, len, eflags, &ids, err)) goto fail;
        iters++;
    } while ((dt = now_s() - t0) < 1.0);
    printf("encode   %s: %zu bytes -> %zu tokens, %.2f MB/s (whole file, %zu runs)\n", path, len,
           ids.n, (double)len * (double)iters / dt / 1e6, iters);
    e0_ids lids = {0};
    iters = 0;
    t0 = now_s();
    do {
        lids.n = 0;
        for (size_t i = 0; i < len;) {
            const char *nl = memchr(text + i, '\n', len - i);
            size_t e = nl ? (size_t)(nl - text) + 1 : len;
            if (e0_tokenizer_encode(tk, text + i, e - i, eflags, &lids, err)) {
                e0_ids_free(&lids);
                goto fail;
            }
            i = e;
        }
        iters++;
    } while ((dt = now_s() - t0) < 1.0);
    printf("encode   %s: %.2f MB/s (line by line)\n", path, (double)len * (double)iters / dt / 1e6);
    e0_ids_free(&lids);
    iters = 0;
    size_t out_len = 0;
    t0 = now_s();
    do {
        char *s;
        if (e0_tokenizer_decode(tk, ids.v, ids.n, 0, &s, &out_len, err)) goto fail;
        free(s);
        iters++;
    } while ((dt = now_s() - t0) < 1.0);
    printf("decode   %zu tokens -> %zu bytes, %.2f MB/s\n", ids.n, out_len,
           (double)out_len * (double)iters / dt / 1e6);
    status = 0;
fail:
    if (status) cli_error("%s", err);
    e0_ids_free(&ids);
    e0_tokenizer_free(tk);
    free(text);
    return status;
}

int cmd_tokenize(int argc, char **argv) {
    const char *model = NULL, *tpath = NULL, *text = NULL, *jsonl = NULL, *bench = NULL,
               *decode = NULL;
    unsigned eflags = 0, dflags = 0;
    const cli_opt opts[] = {
        CLI_OPT("--tokenizer", CLI_STR, &tpath),
        CLI_OPT("--text", CLI_STR, &text),
        CLI_OPT("--jsonl", CLI_STR, &jsonl),
        CLI_OPT("--bench", CLI_STR, &bench),
        CLI_OPT("--decode", CLI_STR, &decode),
        CLI_OPT("--no-special", CLI_BITS, &eflags, .lo = E0_ENCODE_SPECIAL_AS_TEXT),
        CLI_OPT("--skip-special", CLI_BITS, &dflags, .lo = E0_DECODE_SKIP_SPECIAL),
        {0},
    };
    const cli_args args = {.cmd = "tokenize", .help = HELP, .opts = opts, .pos = &model, .dash_is_arg = true};
    const int parsed = cli_parse(&args, argc, argv);
    if (parsed) return parsed == 1 ? 0 : 2;
    if (!!model + !!tpath != 1 || !!text + !!jsonl + !!bench + !!decode != 1) {
        cli_error("tokenize needs one of --tokenizer FILE or MODEL, and one of --text, --jsonl, "
                  "--decode or --bench (see edge0 tokenize --help)");
        return 2;
    }
    char *joined = NULL;
    if (model) {
        struct stat st;
        if (stat(model, &st) == 0 && S_ISDIR(st.st_mode)) {
            joined = e0_path_join(model, "tokenizer.json");
            if (!joined) {
                cli_error("out of memory");
                return 1;
            }
            tpath = joined;
        } else {
            tpath = model;
        }
    }
    int status = 1;
    char err[E0_ERR_MAX];
    e0_tokenizer *tk = NULL;
    e0_ids ids = {0};
    if (bench) {
        status = run_bench(tpath, bench, eflags);
        goto out;
    }
    if (e0_tokenizer_load(&tk, tpath, err)) {
        cli_error("%s", err);
        goto out;
    }
    if (text) {
        if (e0_tokenizer_encode(tk, text, strlen(text), eflags, &ids, err)) {
            cli_error("%s", err);
            goto out;
        }
        put_ids(stdout, ids.v, ids.n);
        fputc('\n', stdout);
        status = 0;
    } else if (decode) {
        char *s;
        size_t n;
        if (parse_ids(decode, &ids)) {
            status = 2;
            goto out;
        }
        if (e0_tokenizer_decode(tk, ids.v, ids.n, dflags, &s, &n, err)) {
            cli_error("%s", err);
            goto out;
        }
        fwrite(s, 1, n, stdout);
        fputc('\n', stdout);
        free(s);
        status = 0;
    } else {
        status = run_jsonl(tk, jsonl, eflags, dflags);
    }
out:
    if (fflush(stdout) && !status) {
        cli_error("writing the output failed");
        status = 1;
    }
    e0_ids_free(&ids);
    e0_tokenizer_free(tk);
    free(joined);
    return status;
}
