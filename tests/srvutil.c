/* Helpers for the end-to-end server tests (srvutil.h). */
#include "srvutil.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "edge0.h"
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
