/* Helpers for the end-to-end server tests (srvutil.h). */
#include "srvutil.h"

#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "edge0.h"
#include "server/server.h"
#include "synth/synth.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
}

const char *su_model(const char *dir) {
    static char m[4200];
    char err[E0_ERR_MAX], cmd[8800];
    snprintf(m, sizeof m, "%s/m", dir);
    if (e0_synth_write(e0_synth_find("tiny"), m, 11, err)) fail_msg("%s", err);
    snprintf(cmd, sizeof cmd, "cp assets/qwen3-tokenizer/tokenizer.json %s/", m);
    assert_int_equal(tu_run(cmd), 0);
    return m;
}

char *su_read_all(FILE *f) {
    size_t cap = 1 << 16, n = 0, r;
    char *b = malloc(cap);
    while ((r = fread(b + n, 1, cap - n - 1, f)) > 0)
        if ((n += r) + 1 == cap) b = realloc(b, cap *= 2);
    b[n] = 0;
    return b;
}

char *su_slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return strdup("");
    char *b = su_read_all(f);
    fclose(f);
    return b;
}

void su_start(su_server *s, const char *dir, const char *model, const char *name, const char *args) {
    snprintf(s->log, sizeof s->log, "%s/%s.log", dir, name);
    char cmd[9000];
    snprintf(cmd, sizeof cmd, "exec %s serve %s --port 0 --io pread --temp 0 %s 2>%s >&2", tu_bin(), model, args, s->log);
    s->pid = fork();
    assert_true(s->pid >= 0);
    if (s->pid == 0) {
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    static const char AT[] = "listening on http://127.0.0.1:";
    for (int i = 0; i < 1200; i++) {
        char *log = su_slurp(s->log);
        const char *at = strstr(log, AT);
        if (at) {
            s->port = atoi(at + strlen(AT));
            free(log);
            assert_true(s->port > 0);
            return;
        }
        int st;
        if (waitpid(s->pid, &st, WNOHANG) == s->pid) fail_msg("the server exited before listening:\n%s", log);
        free(log);
        sleep_ms(50);
    }
    fail_msg("the server did not start listening in 60 s");
}

void su_stop(su_server *s) {
    kill(s->pid, SIGTERM);
    int st = 0;
    double t0 = now();
    while (waitpid(s->pid, &st, WNOHANG) == 0) {
        if (now() - t0 > 30) {
            kill(s->pid, SIGKILL);
            waitpid(s->pid, &st, 0);
            fail_msg("the server did not stop within 30 s of SIGTERM");
        }
        sleep_ms(20);
    }
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        fail_msg("the server exited with status %d:\n%s", WIFEXITED(st) ? WEXITSTATUS(st) : -1, su_slurp(s->log));
}

int su_http(int port, const char *dir, const char *method, const char *path, const char *body, const char *headers,
            char **out) {
    static int seq;
    char file[4400] = "", cmd[10000];
    if (body) {
        char name[64];
        snprintf(name, sizeof name, "su-body-%d.json", __atomic_add_fetch(&seq, 1, __ATOMIC_RELAXED));
        char *p = tu_write(dir, name, body, strlen(body));
        snprintf(file, sizeof file, "%s", p);
        free(p);
    }
    snprintf(cmd, sizeof cmd, "curl -sS -N -X %s %s%s%s -w '\\n%%{http_code}' %s 'http://127.0.0.1:%d%s'", method,
             body ? "--data-binary @" : "", file, body ? " -H 'Content-Type: application/json'" : "",
             headers ? headers : "", port, path);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    char *b = su_read_all(p);
    pclose(p);
    char *nl = strrchr(b, '\n');
    assert_non_null(nl);
    int status = atoi(nl + 1);
    *nl = 0;
    if (out) *out = b;
    else free(b);
    return status;
}

char *su_completion_answer(const char *resp) {
    cJSON *j = su_json(resp, "a completion");
    cJSON *o = cJSON_CreateObject();
    cJSON_AddItemToObject(o, "text", cJSON_Duplicate(su_at(j, "choices.0.text"), 1));
    cJSON_AddItemToObject(o, "tokens", cJSON_Duplicate(su_at(j, "choices.0.logprobs.tokens"), 1));
    cJSON_AddItemToObject(o, "lp", cJSON_Duplicate(su_at(j, "choices.0.logprobs.token_logprobs"), 1));
    cJSON_AddItemToObject(o, "finish", cJSON_Duplicate(su_at(j, "choices.0.finish_reason"), 1));
    cJSON_AddItemToObject(o, "usage", cJSON_Duplicate(su_at(j, "usage.completion_tokens"), 1));
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    cJSON_Delete(j);
    return s;
}

const cJSON *su_at(const cJSON *j, const char *path) {
    char buf[256];
    snprintf(buf, sizeof buf, "%s", path);
    const cJSON *v = j;
    for (char *save, *t = strtok_r(buf, ".", &save); t && v; t = strtok_r(NULL, ".", &save))
        v = t[0] >= '0' && t[0] <= '9' ? cJSON_GetArrayItem(v, atoi(t)) : cJSON_GetObjectItemCaseSensitive(v, t);
    if (!v) fail_msg("no %s in %s", path, cJSON_PrintUnformatted(j));
    return v;
}

const char *su_str(const cJSON *j, const char *path) {
    const cJSON *v = su_at(j, path);
    if (!cJSON_IsString(v)) fail_msg("%s is not a string in %s", path, cJSON_PrintUnformatted(j));
    return v->valuestring;
}

double su_num(const cJSON *j, const char *path) {
    const cJSON *v = su_at(j, path);
    if (!cJSON_IsNumber(v)) fail_msg("%s is not a number in %s", path, cJSON_PrintUnformatted(j));
    return v->valuedouble;
}

cJSON *su_json(const char *text, const char *what) {
    cJSON *j = cJSON_Parse(text);
    if (!j) fail_msg("%s: not JSON: %s", what, text);
    return j;
}

/* ---- a scripted generator for in-process servers -------------------------- */

static pthread_mutex_t prompt_mu = PTHREAD_MUTEX_INITIALIZER;
static char *last_prompt;

/* The length of the longest prefix of s[0..n) that ends on a character boundary. */
static size_t utf8_whole(const char *s, size_t n) {
    size_t i = n, back = 0;
    while (i > 0 && back < 4 && ((unsigned char)s[i - 1] & 0xC0) == 0x80) i--, back++;
    if (i == 0) return n;
    unsigned char c = (unsigned char)s[i - 1];
    size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    return back + 1 < need ? i - 1 : n;
}

/* Evaluates the prompt (after the part of the session's history it starts
 * with) and then the script's tokens one by one, as e0_generate would, so
 * the session holds what a real answer leaves behind and the server's
 * prompt reuse sees it. */
int su_scripted(e0_session *s, const e0_text *t, const int32_t *prompt, size_t n, const e0_sample_opts *o,
                    e0_token_fn fn, void *user, e0_gen_result *r, char *err) {
    (void)o;
    memset(r, 0, sizeof *r);
    r->prompt_tokens = (int32_t)n;
    size_t hn, same = 0;
    const int32_t *h = e0_session_history(s, &hn);
    while (same < hn && same < n && h[same] == prompt[same]) same++;
    if (same < hn || same == n) {
        e0_session_reset(s);
        same = 0;
    }
    r->reused_tokens = (int32_t)same;
    int rc = e0_session_eval(s, prompt + same, n - same, E0_LOGITS_NONE, NULL, err);
    char *text = NULL, *done = NULL;
    size_t len, dlen, sent = 0, ns = 0;
    int32_t *ids = NULL;
    if (!rc) rc = e0_text_decode(t, prompt, n, &text, &len, err);
    if (rc) return rc;
    pthread_mutex_lock(&prompt_mu);
    free(last_prompt);
    last_prompt = strdup(text);
    pthread_mutex_unlock(&prompt_mu);
    const char *p = text, *at = NULL;
    while ((p = strstr(p, "SCRIPT:"))) at = p += 7;
    const char *end = at ? strstr(at, "<|im_end|>") : NULL, *tr = at ? strstr(at, "\n</tool_response>") : NULL;
    if (tr && (!end || tr < end)) end = tr;
    if (!end) end = at = text + len;
    r->finish = E0_FINISH_STOP;
    if (end > at && end[-1] == '~') end--, r->finish = E0_FINISH_LENGTH;
    if (end > at) rc = e0_text_encode(t, at, (size_t)(end - at), &ids, &ns, err);
    for (size_t i = 0; !rc && i < ns; i++) {
        free(done);
        if ((rc = e0_text_decode(t, ids, i + 1, &done, &dlen, err))) break;
        size_t cut = i + 1 == ns ? dlen : utf8_whole(done, dlen);
        r->completion_tokens++;
        e0_token_info tok = {.id = ids[i]};
        if (fn(user, &tok, done + sent, cut > sent ? cut - sent : 0)) {
            r->finish = E0_FINISH_CANCELLED;
            break;
        }
        if (cut > sent) sent = cut;
        rc = e0_session_eval(s, &ids[i], 1, E0_LOGITS_NONE, NULL, err);
    }
    free(done);
    free(ids);
    free(text);
    return rc;
}

char *su_last_prompt(void) {
    pthread_mutex_lock(&prompt_mu);
    char *p = strdup(last_prompt ? last_prompt : "");
    pthread_mutex_unlock(&prompt_mu);
    return p;
}

void su_scripted_free(void) {
    pthread_mutex_lock(&prompt_mu);
    free(last_prompt);
    last_prompt = NULL;
    pthread_mutex_unlock(&prompt_mu);
}

void su_inproc_open(su_inproc *ip) {
    memset(ip, 0, sizeof *ip);
    ip->dir = tu_tmpdir();
    char err[E0_ERR_MAX];
    const char *m = su_model(ip->dir);
    e0_engine_opts eo;
    e0_engine_opts_default(&eo);
    if (e0_engine_open(&ip->eng, m, &eo, err) || e0_text_open(&ip->text, m, err)) fail_msg("%s", err);
}

void su_inproc_start(su_inproc *ip, const char *key, e0_chat_format format, const char *cors) {
    char err[E0_ERR_MAX];
    srv_opts so;
    srv_opts_default(&so);
    so.engine = ip->eng;
    so.text = ip->text;
    so.model_name = "m";
    so.port = 0;
    so.api_key = key;
    so.n_ctx = 2048;
    so.cors = cors;
    so.generate = su_scripted;
    so.defaults.chat_format = format;
    if (srv_start(&ip->srv, &so, err)) fail_msg("%s", err);
    ip->port = srv_port(ip->srv);
}

void su_inproc_stop(su_inproc *ip) {
    srv_stop(ip->srv);
    ip->srv = NULL;
}

void su_inproc_close(su_inproc *ip) {
    if (ip->srv) su_inproc_stop(ip);
    e0_text_free(ip->text);
    e0_engine_free(ip->eng);
    su_scripted_free();
    tu_rmtree(ip->dir);
    free(ip->dir);
    memset(ip, 0, sizeof *ip);
}

double su_metric(int port, const char *dir, const char *headers, const char *name) {
    char *out, key[256];
    assert_int_equal(su_http(port, dir, "GET", "/metrics", NULL, headers, &out), 200);
    snprintf(key, sizeof key, "\n%s ", name);
    const char *at = strstr(out, key);
    if (!at) fail_msg("no %s in /metrics", name);
    double v = atof(at + strlen(key));
    free(out);
    return v;
}
