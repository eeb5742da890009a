/* LayerOptions: defaults, presets and `field=value` parsing (docs/design.md §4.6).
 * One table describes every field, so parsing, printing and the list of
 * names cannot drift apart. */
#include "edge0.h"
#include "util/err.h"

#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum { F_BOOL, F_INT, F_FLOAT, F_POLICY } ftype;

static const char *const POLICY_NAMES[] = {"lru", "lfu", "router", "recent"}; /* E0_CACHE_* */
enum { NPOLICIES = sizeof POLICY_NAMES / sizeof *POLICY_NAMES };
_Static_assert(NPOLICIES == 4, "the unknown-policy message names every policy");

static const struct {
    const char *name;
    ftype type;
    size_t off;
    double lo, hi;
} FIELDS[] = {
#define B(f) {#f, F_BOOL, offsetof(e0_layer_opts, f), 0, 1}
#define I(f, lo, hi) {#f, F_INT, offsetof(e0_layer_opts, f), lo, hi}
#define R(f, lo, hi) {#f, F_FLOAT, offsetof(e0_layer_opts, f), lo, hi}
    B(staged), I(staged_n, 1, 256), I(staged_trigger, 1, 1024), B(staged_replace), B(staged_sync),
    B(asm_cache), B(incr_stack), B(incr_writeback), I(hot_per_layer, 0, 65536),
    I(hot_update_interval, 1, 1 << 20), R(hot_decay, 0, 1), R(pin_bonus, 0, 1e6),
    I(cache_slots, 0, 1 << 24), I(prefetch_cap, 0, 1 << 20), I(load_threads, 1, 256),
    I(prefetch_threads, 0, 256), I(prefetch_k, 0, 1024), B(full_layer_prefill),
    I(prefill_full_layers, 0, 1 << 16), I(hot_window, 0, 1 << 16), I(prefill_hot, 0, 65536),
    B(warm_willneed), I(top_k, 0, 1024),
    {"cache_policy", F_POLICY, offsetof(e0_layer_opts, cache_policy), 0, NPOLICIES - 1},
    R(cache_half_life, 0.01, 1e6), R(router_half_life, 0.01, 1e9),
#undef B
#undef I
#undef R
};
enum { NFIELDS = sizeof FIELDS / sizeof *FIELDS };

void e0_engine_opts_default(e0_engine_opts *o) {
    memset(o, 0, sizeof *o);
    e0_layer_opts *l = &o->layer;
    l->staged_n = 8;
    l->staged_trigger = 8;
    l->staged_sync = 1;
    l->asm_cache = 1;
    l->hot_update_interval = 4;
    l->hot_decay = 0.75f;
    l->pin_bonus = 2.0f;
    l->cache_slots = 64;
    l->prefetch_cap = 48;
    l->load_threads = 8;
    l->prefetch_threads = 4;
    l->cache_policy = E0_CACHE_RECENT; /* docs/experiments.md, session 29 cache policy */
    l->cache_half_life = 1.0f;
    l->router_half_life = 256.0f;
    o->path = E0_PATH_AUTO;
    o->io = E0_IO_AUTO;
    o->gpu = E0_GPU_OFF;
}

const char *e0_opts_presets(void) { return "staged_k4, prod_k8, staged_k8"; }

const char *e0_cache_policy_name(int policy) { return POLICY_NAMES[policy >= 0 && policy < NPOLICIES ? policy : 0]; }

int e0_opts_preset(e0_engine_opts *o, const char *name, char *err) {
    e0_layer_opts *l = &o->layer;
    if (strcmp(name, "staged_k4") == 0) {
        l->staged = 1;
        l->staged_n = 4;
        l->prefill_hot = 32;
        l->full_layer_prefill = 0; /* on-demand prefill */
        l->warm_willneed = 1;
        l->incr_stack = 1;
        l->incr_writeback = 1;
    } else if (strcmp(name, "prod_k8") == 0) {
        l->staged = 0;
        l->full_layer_prefill = 1;
    } else if (strcmp(name, "staged_k8") == 0) {
        l->staged = 1;
        l->staged_n = 8;
        l->full_layer_prefill = 1;
    } else {
        return e0_fail(err, E0_EINVAL, "unknown preset '%s' (known: %s)", name, e0_opts_presets());
    }
    l->cache_slots = 64; /* shared by every preset */
    return 0;
}

int e0_opts_set(e0_engine_opts *o, const char *field, const char *value, char *err) {
    for (int i = 0; i < NFIELDS; i++) {
        if (strcmp(FIELDS[i].name, field) != 0) continue;
        char *p = (char *)&o->layer + FIELDS[i].off, *end;
        errno = 0;
        if (FIELDS[i].type == F_BOOL) {
            int v;
            if (!strcmp(value, "true") || !strcmp(value, "1") || !strcmp(value, "on")) v = 1;
            else if (!strcmp(value, "false") || !strcmp(value, "0") || !strcmp(value, "off")) v = 0;
            else return e0_fail(err, E0_EINVAL, "option %s: '%s' is not true or false", field, value);
            memcpy(p, &v, sizeof v);
            return 0;
        }
        if (FIELDS[i].type == F_POLICY) {
            for (int32_t v = 0; v < NPOLICIES; v++)
                if (!strcmp(value, POLICY_NAMES[v])) {
                    memcpy(p, &v, sizeof v);
                    return 0;
                }
            return e0_fail(err, E0_EINVAL, "option %s: '%s' is not %s, %s, %s or %s", field, value, POLICY_NAMES[0],
                           POLICY_NAMES[1], POLICY_NAMES[2], POLICY_NAMES[3]);
        }
        double d = strtod(value, &end);
        if (errno || end == value || *end || !(d >= FIELDS[i].lo && d <= FIELDS[i].hi) ||
            (FIELDS[i].type == F_INT && d != floor(d)))
            return e0_fail(err, E0_EINVAL, "option %s: '%s' is not %s in [%g, %g]", field, value,
                           FIELDS[i].type == F_INT ? "an integer" : "a number", FIELDS[i].lo, FIELDS[i].hi);
        if (FIELDS[i].type == F_INT) {
            int32_t v = (int32_t)d;
            memcpy(p, &v, sizeof v);
        } else {
            float v = (float)d;
            memcpy(p, &v, sizeof v);
        }
        return 0;
    }
    char names[1024];
    size_t n = 0;
    for (int i = 0; i < NFIELDS && n < sizeof names; i++)
        n += (size_t)snprintf(names + n, sizeof names - n, "%s%s", i ? ", " : "", FIELDS[i].name);
    return e0_fail(err, E0_EINVAL, "unknown option '%s' (fields: %s)", field, names);
}

int e0_opts_format(const e0_engine_opts *o, char *buf, size_t len) {
    size_t n = 0;
    for (int i = 0; i < NFIELDS; i++) {
        const char *p = (const char *)&o->layer + FIELDS[i].off;
        int w;
        if (FIELDS[i].type == F_FLOAT) {
            float v;
            memcpy(&v, p, sizeof v);
            w = snprintf(buf + n, n < len ? len - n : 0, "%s=%g\n", FIELDS[i].name, v);
        } else {
            int32_t v;
            memcpy(&v, p, sizeof v);
            if (FIELDS[i].type == F_POLICY) w = snprintf(buf + n, n < len ? len - n : 0, "%s=%s\n", FIELDS[i].name, e0_cache_policy_name(v));
            else if (FIELDS[i].type == F_BOOL) w = snprintf(buf + n, n < len ? len - n : 0, "%s=%s\n", FIELDS[i].name, v ? "true" : "false");
            else w = snprintf(buf + n, n < len ? len - n : 0, "%s=%d\n", FIELDS[i].name, v);
        }
        if (w < 0) return E0_EINVAL;
        n += (size_t)w;
    }
    return n < len ? 0 : E0_ERANGE;
}
