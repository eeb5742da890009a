#include "util/meminfo.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

uint64_t mem_available(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return 0;
    char line[256];
    unsigned long long kb = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) break;
    fclose(f);
    return (uint64_t)kb * 1024u;
}

static bool read_u64(const char *path, uint64_t *v) {
    FILE *f = fopen(path, "r");
    unsigned long long x;
    bool ok = f && fscanf(f, "%llu", &x) == 1;
    if (f) fclose(f);
    if (ok) *v = x;
    return ok;
}

/* The value of `key` in a memory.stat file (0 if absent). */
static uint64_t stat_key(const char *path, const char *key) {
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char line[256], k[128];
    unsigned long long v, out = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "%127s %llu", k, &v) == 2 && !strcmp(k, key)) {
            out = v;
            break;
        }
    fclose(f);
    return out;
}

/* The directory of the memory cgroup level with the smallest limit, and
 * that limit; false when no level has one. v1 (the memory controller's own
 * hierarchy) wins over v2's unified one when both are listed. */
static bool limiting_cgroup(char *dir, size_t n, uint64_t *limit, bool *v1) {
    FILE *f = fopen("/proc/self/cgroup", "r");
    if (!f) return false;
    char line[4096], rel[4096] = "", base[64] = "";
    while (fgets(line, sizeof line, f)) {
        char *p = strchr(line, ':'), *q = p ? strchr(p + 1, ':') : NULL;
        if (!q) continue;
        q[strcspn(q, "\n")] = 0;
        if (!strncmp(p, ":memory:", 8)) {
            snprintf(base, sizeof base, "/sys/fs/cgroup/memory");
            snprintf(rel, sizeof rel, "%s", q + 1);
            break;
        }
        if (!strncmp(line, "0::", 3) && !base[0]) {
            snprintf(base, sizeof base, "/sys/fs/cgroup");
            snprintf(rel, sizeof rel, "%s", q + 1);
        }
    }
    fclose(f);
    if (!base[0]) return false;
    *v1 = strcmp(base, "/sys/fs/cgroup") != 0;
    const char *file = *v1 ? "memory.limit_in_bytes" : "memory.max";
    uint64_t best = 0;
    for (;;) {
        char path[8300];
        snprintf(path, sizeof path, "%s%s/%s", base, rel, file);
        uint64_t v;
        if (read_u64(path, &v) && v < (1ull << 60) && (!best || v < best)) {
            best = v;
            snprintf(dir, n, "%s%s", base, rel);
        }
        char *slash = strrchr(rel, '/');
        if (!slash || !rel[0]) break;
        *slash = 0;
    }
    *limit = best;
    return best != 0;
}

uint64_t mem_cgroup_limit(void) {
    char dir[8300];
    uint64_t limit = 0;
    bool v1;
    return limiting_cgroup(dir, sizeof dir, &limit, &v1) ? limit : 0;
}

uint64_t mem_headroom(void) {
    uint64_t room = mem_available();
    char dir[8300], path[8400];
    uint64_t limit, usage;
    bool v1;
    if (!limiting_cgroup(dir, sizeof dir, &limit, &v1)) return room;
    snprintf(path, sizeof path, "%s/%s", dir, v1 ? "memory.usage_in_bytes" : "memory.current");
    if (!read_u64(path, &usage)) return room;
    snprintf(path, sizeof path, "%s/memory.stat", dir);
    const uint64_t file = stat_key(path, v1 ? "total_cache" : "file");
    const uint64_t held = usage > file ? usage - file : 0;
    const uint64_t cg = limit > held ? limit - held : 0;
    return !room || cg < room ? cg : room;
}
