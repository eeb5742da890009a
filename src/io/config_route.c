/* Routing profiles of synthetic checkpoints (io/config.h e0_route_cfg):
 * their keys in config.json's "edge0_synth" and in GGUF metadata, and the
 * per-layer popularity offsets the router adds. */
#include "io/config.h"
#include "io/gguf.h"
#include "util/err.h"
#include "util/rng.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Value ranges, shared by both sources. */
#define POP_MAX    8.0
#define BONUS_MAX  16.0
#define WINDOW_MAX 4096


int config_route_init(e0_config *c, char *err) {
    e0_route_cfg *r = &c->route;
    free(r->bias);
    r->bias = NULL;
    if (!(r->popularity > 0) || c->n_experts <= 0 || c->n_layers <= 0) return 0;
    const int E = c->n_experts;
    float *b = malloc((size_t)c->n_layers * (size_t)E * sizeof *b);
    int32_t *perm = malloc((size_t)E * sizeof *perm);
    if (!b || !perm) {
        free(b);
        free(perm);
        return e0_fail(err, E0_ENOMEM, "out of memory (routing profile)");
    }
    /* In units of the logits' spread: with Gaussian logits and top-k, the
     * selection counts against rank then fall off with a log-log slope of
     * about -popularity (synth/synth.c's route skew uses the same scale). */
    const double norm = E > 1 ? sqrt(2.0 * log((double)E)) / 1.6 : 1.0;
    for (int l = 0; l < c->n_layers; l++) {
        uint64_t s =
            r->seed * 0x100000001b3ull + (uint64_t)l * 0x9e3779b97f4a7c15ull + 0x726f757465ull;
        for (int e = 0; e < E; e++)
            perm[e] = e;
        for (int e = E - 1; e > 0; e--) {
            const int j = (int)(splitmix64(&s) % (uint64_t)(e + 1));
            const int32_t t = perm[e];
            perm[e] = perm[j];
            perm[j] = t;
        }
        for (int rank = 0; rank < E; rank++)
            b[(size_t)l * E + perm[rank]] = (float)(-r->popularity * log(rank + 1.0) / norm);
    }
    free(perm);
    r->bias = b;
    return 0;
}

/* The profile's values in range, else a message naming `key`'s source. */
static int check(const e0_route_cfg *r, const char *where, char *err) {
    if (!(r->popularity >= 0 && r->popularity <= POP_MAX))
        return e0_fail(err, E0_EFORMAT, "%sroute_popularity must be a number in [0, %g]", where,
                       POP_MAX);
    if (!(r->recent >= 0 && r->recent <= BONUS_MAX))
        return e0_fail(err, E0_EFORMAT, "%sroute_recent must be a number in [0, %g]", where,
                       BONUS_MAX);
    if (!(r->window >= 0 && r->window <= BONUS_MAX))
        return e0_fail(err, E0_EFORMAT, "%sroute_window must be a number in [0, %g]", where,
                       BONUS_MAX);
    if (!(r->decay >= 0 && r->decay <= 1))
        return e0_fail(err, E0_EFORMAT, "%sroute_decay must be a number in [0, 1]", where);
    if (r->window_len < 0 || r->window_len > WINDOW_MAX)
        return e0_fail(err, E0_EFORMAT, "%sroute_window_len must be an integer in [0, %d]", where,
                       WINDOW_MAX);
    return 0;
}

/* A number key of "edge0_synth" (absent or null: *out unchanged). */
static int json_num(const cJSON *o, const char *key, const char *path, double *out, char *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v || cJSON_IsNull(v)) return 0;
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble))
        return e0_fail(err, E0_EFORMAT, "%s: \"edge0_synth\".\"%s\" is not a number", path, key);
    *out = v->valuedouble;
    return 0;
}

int config_route_json(e0_config *c, const cJSON *syn, const char *path, char *err) {
    e0_route_cfg *r = &c->route;
    double len = 0, seed = 0;
    const cJSON *nm = cJSON_GetObjectItemCaseSensitive(syn, "route_profile");
    if (nm && !cJSON_IsNull(nm)) {
        if (!cJSON_IsString(nm) || strlen(nm->valuestring) >= sizeof r->name)
            return e0_fail(err, E0_EFORMAT,
                           "%s: \"edge0_synth\".\"route_profile\" must be a string of "
                           "at most %zu bytes",
                           path, sizeof r->name - 1);
        strcpy(r->name, nm->valuestring);
    }
    int rc;
    if ((rc = json_num(syn, "route_popularity", path, &r->popularity, err)) ||
        (rc = json_num(syn, "route_recent", path, &r->recent, err)) ||
        (rc = json_num(syn, "route_window", path, &r->window, err)) ||
        (rc = json_num(syn, "route_decay", path, &r->decay, err)) ||
        (rc = json_num(syn, "route_window_len", path, &len, err)) ||
        (rc = json_num(syn, "route_seed", path, &seed, err)))
        return rc;
    if (!(len >= 0 && len <= WINDOW_MAX && len == floor(len)))
        return e0_fail(err, E0_EFORMAT,
                       "%s: \"edge0_synth\".\"route_window_len\" must be an integer in "
                       "[0, %d]",
                       path, WINDOW_MAX);
    if (!(seed >= 0 && seed <= 9007199254740992.0 && seed == floor(seed)))
        return e0_fail(err, E0_EFORMAT,
                       "%s: \"edge0_synth\".\"route_seed\" must be an integer in "
                       "[0, 2^53]",
                       path);
    r->window_len = (int)len;
    r->seed = (uint64_t)seed;
    char where[300];
    snprintf(where, sizeof where, "%s: edge0_synth.", path);
    if ((rc = check(r, where, err))) return rc;
    return config_route_init(c, err);
}

/* A float key edge0.NAME (absent: *out unchanged). */
static int gguf_num(const gguf_file *g, const char *name, double *out, char *err) {
    char key[64];
    snprintf(key, sizeof key, "edge0.%s", name);
    float v;
    int rc = gguf_get_f32(g, key, &v, err);
    if (rc == E0_ENOTFOUND) return 0;
    if (rc) return rc;
    if (!isfinite(v)) return e0_fail(err, E0_EFORMAT, "%s: %s is not finite", gguf_fname(g), key);
    *out = v;
    return 0;
}

int config_route_gguf(e0_config *c, const gguf_file *g, char *err) {
    e0_route_cfg *r = &c->route;
    const char *nm;
    int rc = gguf_get_str(g, "edge0.route_profile", &nm, err);
    if (rc && rc != E0_ENOTFOUND) return rc;
    if (!rc) {
        if (strlen(nm) >= sizeof r->name)
            return e0_fail(err, E0_EFORMAT, "%s: edge0.route_profile is longer than %zu bytes",
                           gguf_fname(g), sizeof r->name - 1);
        strcpy(r->name, nm);
    }
    uint32_t len = 0;
    if ((rc = gguf_num(g, "route_stickiness", &c->route_stickiness, err)) ||
        (rc = gguf_num(g, "route_popularity", &r->popularity, err)) ||
        (rc = gguf_num(g, "route_recent", &r->recent, err)) ||
        (rc = gguf_num(g, "route_window", &r->window, err)) ||
        (rc = gguf_num(g, "route_decay", &r->decay, err)))
        return rc;
    if ((rc = gguf_get_u32(g, "edge0.route_window_len", &len, err)) && rc != E0_ENOTFOUND)
        return rc;
    if ((rc = gguf_get_u64(g, "edge0.route_seed", &r->seed, err)) && rc != E0_ENOTFOUND) return rc;
    if (len > WINDOW_MAX)
        return e0_fail(err, E0_EFORMAT, "%s: edge0.route_window_len must be an integer in [0, %d]",
                       gguf_fname(g), WINDOW_MAX);
    r->window_len = (int)len;
    if (!(c->route_stickiness >= 0 && c->route_stickiness <= 1))
        return e0_fail(err, E0_EFORMAT, "%s: edge0.route_stickiness must be a number in [0, 1]",
                       gguf_fname(g));
    char where[300];
    snprintf(where, sizeof where, "%s: edge0.", gguf_fname(g));
    if ((rc = check(r, where, err))) return rc;
    return config_route_init(c, err);
}
