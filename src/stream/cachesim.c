#include "stream/cachesim.h"
#include "stream/routecount.h"

#include "edge0.h"
#include "util/err.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>


const char *cachesim_name(cachesim_policy p) {
    static const char *const names[CACHESIM_N] = {"lru", "lfu", "arc", "router", "recent", "belady"};
    return p >= 0 && p < CACHESIM_N ? names[p] : "?";
}

/* ---- intrusive lists over key ids ------------------------------------------
 * Every key is in at most one list; head = least recent, tail = most recent. */

enum { NIL = -1 };

typedef struct {
    int32_t head, tail, size;
} klist;

typedef struct {
    int32_t *prev, *next; /* [n_keys] */
    uint8_t *in;          /* [n_keys]: which list (0: none) */
} klinks;

static void kl_remove(klinks *k, klist *l, int32_t x) {
    if (k->prev[x] != NIL)
        k->next[k->prev[x]] = k->next[x];
    else
        l->head = k->next[x];
    if (k->next[x] != NIL)
        k->prev[k->next[x]] = k->prev[x];
    else
        l->tail = k->prev[x];
    k->prev[x] = k->next[x] = NIL;
    k->in[x] = 0;
    l->size--;
}

static void kl_push(klinks *k, klist *l, uint8_t id, int32_t x) {
    k->prev[x] = l->tail;
    k->next[x] = NIL;
    if (l->tail != NIL)
        k->next[l->tail] = x;
    else
        l->head = x;
    l->tail = x;
    k->in[x] = id;
    l->size++;
}

/* ---- policies ---------------------------------------------------------------- */

static uint64_t run_lru(const uint32_t *keys, size_t n, size_t from, klinks *k, int32_t cap) {
    klist l = {NIL, NIL, 0};
    uint64_t hits = 0;
    for (size_t i = 0; i < n; i++) {
        const int32_t x = (int32_t)keys[i];
        if (k->in[x]) {
            hits += i >= from;
            kl_remove(k, &l, x);
        } else if (l.size == cap) {
            kl_remove(k, &l, l.head);
        }
        kl_push(k, &l, 1, x);
    }
    return hits;
}

double cachesim_log2_add(double a, double b) {
    if (a == -INFINITY) return b;
    const double hi = a > b ? a : b, lo = a > b ? b : a;
    return hi + log2(1.0 + exp2(lo - hi));
}

/* A policy that evicts the cached key of lowest score (least recent on
 * ties): LFU's decayed counts and the router policy's scores. request()
 * counts request i of key x before it is looked up. */
typedef struct scorer scorer;
struct scorer {
    void (*request)(scorer *, size_t i, uint32_t x);
    double (*score)(const scorer *, uint32_t x);
};

static uint64_t run_scored(const uint32_t *keys, size_t n, size_t from, uint32_t n_keys,
                           int32_t cap, scorer *sc, int32_t *slot_of, int32_t *slots,
                           size_t *last) {
    for (uint32_t x = 0; x < n_keys; x++)
        slot_of[x] = NIL;
    int32_t used = 0;
    uint64_t hits = 0;
    for (size_t i = 0; i < n; i++) {
        const int32_t x = (int32_t)keys[i];
        sc->request(sc, i, (uint32_t)x);
        last[x] = i;
        if (slot_of[x] != NIL) {
            hits += i >= from;
            continue;
        }
        int32_t s = used;
        if (used < cap) {
            used++;
        } else {
            s = 0;
            double best = sc->score(sc, (uint32_t)slots[0]);
            for (int32_t q = 1; q < cap; q++) {
                const double v = sc->score(sc, (uint32_t)slots[q]);
                if (v < best || (v == best && last[slots[q]] < last[slots[s]])) best = v, s = q;
            }
            slot_of[slots[s]] = NIL;
        }
        slots[s] = x;
        slot_of[x] = s;
    }
    return hits;
}

/* LFU: log2 of each key's decayed count (cachesim_log2_add). */
typedef struct {
    scorer base;
    double *score, half_life;
} lfu_scorer;

static void lfu_request(scorer *sc, size_t i, uint32_t x) {
    lfu_scorer *l = (lfu_scorer *)sc;
    l->score[x] = cachesim_log2_add(l->score[x], l->half_life > 0 ? (double)i / l->half_life : 0.0);
}

static double lfu_score(const scorer *sc, uint32_t x) {
    return ((const lfu_scorer *)sc)->score[x];
}

/* The router policy: observations replayed before the request they preceded. */
typedef struct {
    scorer base;
    routecount *rc;
    const cachesim_obs *o;
    const float *lg; /* the next observation's logits */
    size_t j;        /* the next observation */
} router_scorer;

static void router_request(scorer *sc, size_t i, uint32_t x) {
    router_scorer *r = (router_scorer *)sc;
    const cachesim_obs *o = r->o;
    for (; r->j < o->n && o->at[r->j] <= i; r->j++) {
        routecount_observe(r->rc, o->layer[r->j], r->lg, o->tokens[r->j]);
        r->lg += (size_t)o->tokens[r->j] * (size_t)o->n_experts;
    }
    routecount_request(r->rc, x);
}

static double router_score(const scorer *sc, uint32_t x) {
    return routecount_score(((const router_scorer *)sc)->rc, x);
}

static double recent_score(const scorer *sc, uint32_t x) {
    return routecount_recent_score(((const router_scorer *)sc)->rc, x, CACHESIM_RECENT_POP_WEIGHT);
}

/* Observations fit the keys: layers x experts = n_keys, each call's layer
 * and tokens in range, in request order. */
static int check_obs(const cachesim_obs *o, size_t n, uint32_t n_keys, char *err) {
    if (!o || !o->n)
        return e0_fail(err, E0_EINVAL, "the router policy needs the trace's router logits");
    if (o->n_layers < 1 || o->n_experts < 1 ||
        (uint64_t)o->n_layers * (uint64_t)o->n_experts != n_keys || !o->logits)
        return e0_fail(err, E0_EINVAL, "router logits of %d layers x %d experts for %u keys",
                       o->n_layers, o->n_experts, n_keys);
    for (size_t j = 0; j < o->n; j++)
        if (o->layer[j] < 0 || o->layer[j] >= o->n_layers || o->tokens[j] < 1 || o->at[j] > n ||
            (j && o->at[j] < o->at[j - 1]))
            return e0_fail(err, E0_EINVAL, "router observation %zu (layer %d, %d tokens, at %zu) "
                           "is out of range or order", j, o->layer[j], o->tokens[j], o->at[j]);
    return 0;
}

enum { L_T1 = 1, L_T2, L_B1, L_B2 };

static uint64_t run_arc(const uint32_t *keys, size_t n, size_t from, klinks *k, int32_t cap) {
    klist t1 = {NIL, NIL, 0}, t2 = t1, b1 = t1, b2 = t1;
    double p = 0; /* target size of T1 */
    uint64_t hits = 0;
    for (size_t i = 0; i < n; i++) {
        const int32_t x = (int32_t)keys[i];
        const uint8_t where = k->in[x];
        if (where == L_T1 || where == L_T2) { /* hit: now frequent */
            hits += i >= from;
            kl_remove(k, where == L_T1 ? &t1 : &t2, x);
            kl_push(k, &t2, L_T2, x);
            continue;
        }
        bool replace = true;
        if (where == L_B1) {
            p = fmin((double)cap, p + fmax((double)b2.size / b1.size, 1.0));
            kl_remove(k, &b1, x);
        } else if (where == L_B2) {
            p = fmax(0.0, p - fmax((double)b1.size / b2.size, 1.0));
            kl_remove(k, &b2, x);
        } else if (t1.size + b1.size == cap) {
            if (t1.size < cap) {
                kl_remove(k, &b1, b1.head);
            } else { /* T1 is the whole cache: drop its oldest outright */
                kl_remove(k, &t1, t1.head);
                replace = false;
            }
        } else if (t1.size + t2.size + b1.size + b2.size >= cap) {
            if (t1.size + t2.size + b1.size + b2.size == 2 * cap) kl_remove(k, &b2, b2.head);
        } else {
            replace = false; /* the cache is not full yet */
        }
        if (replace && t1.size + t2.size >= cap) { /* REPLACE(x, p) */
            if (t1.size > 0 && (t1.size > p || (where == L_B2 && t1.size == p))) {
                const int32_t v = t1.head;
                kl_remove(k, &t1, v);
                kl_push(k, &b1, L_B1, v);
            } else {
                const int32_t v = t2.head;
                kl_remove(k, &t2, v);
                kl_push(k, &b2, L_B2, v);
            }
        }
        if (where == L_B1 || where == L_B2)
            kl_push(k, &t2, L_T2, x);
        else
            kl_push(k, &t1, L_T1, x);
    }
    return hits;
}

static uint64_t run_belady(const uint32_t *keys, size_t n, size_t from, uint32_t n_keys,
                           int32_t cap, int32_t *slot_of, int32_t *slots, size_t *next,
                           size_t *next_of) {
    for (uint32_t x = 0; x < n_keys; x++) {
        slot_of[x] = NIL;
        next_of[x] = SIZE_MAX; /* here: the next request of x seen walking backwards */
    }
    for (size_t i = n; i-- > 0;) {
        next[i] = next_of[keys[i]];
        next_of[keys[i]] = i;
    }
    int32_t used = 0;
    uint64_t hits = 0;
    for (size_t i = 0; i < n; i++) {
        const int32_t x = (int32_t)keys[i];
        next_of[x] = next[i]; /* now: x's next request after i */
        if (slot_of[x] != NIL) {
            hits += i >= from;
            continue;
        }
        int32_t s = used;
        if (used < cap) {
            used++;
        } else { /* the key requested furthest ahead */
            s = 0;
            for (int32_t j = 1; j < cap; j++)
                if (next_of[slots[j]] > next_of[slots[s]]) s = j;
            slot_of[slots[s]] = NIL;
        }
        slots[s] = x;
        slot_of[x] = s;
    }
    return hits;
}

int cachesim_run(cachesim_policy p, const uint32_t *keys, size_t n, size_t from, uint32_t n_keys,
                 int32_t cap, double half_life, const cachesim_obs *obs, uint64_t *hits,
                 char *err) {
    *hits = 0;
    if (p < 0 || p >= CACHESIM_N) return e0_fail(err, E0_EINVAL, "unknown cache policy %d", p);
    if (cap < 1 || n_keys < 1 || n_keys > INT32_MAX)
        return e0_fail(err, E0_EINVAL, "cache simulation needs >= 1 slot and 1..2^31 keys");
    for (size_t i = 0; i < n; i++)
        if (keys[i] >= n_keys)
            return e0_fail(err, E0_EINVAL, "trace key %u at %zu is not below %u", keys[i], i,
                           n_keys);
    routecount counts = {0};
    if (p == CACHESIM_ROUTER || p == CACHESIM_RECENT) {
        int rc0 = check_obs(obs, n, n_keys, err);
        if (!rc0)
            rc0 = routecount_init(&counts, obs->n_layers, obs->n_experts,
                                  half_life > 0 ? half_life : INFINITY, err);
        if (!rc0 && p == CACHESIM_RECENT)
            rc0 = routecount_track_use(&counts, CACHESIM_RECENT_HALF_LIFE, err);
        if (rc0) return rc0;
    }
    klinks k = {malloc(n_keys * sizeof(int32_t)), malloc(n_keys * sizeof(int32_t)),
                calloc(n_keys, 1)};
    int32_t *slots = malloc((size_t)cap * sizeof *slots);
    size_t *a = malloc((n > n_keys ? n : n_keys) * sizeof *a), *b = malloc(n_keys * sizeof *b);
    double *score = malloc(n_keys * sizeof *score);
    int rc = 0;
    if (!k.prev || !k.next || !k.in || !slots || !a || !b || !score) {
        rc = e0_fail(err, E0_ENOMEM, "out of memory simulating a cache over %u keys", n_keys);
        goto out;
    }
    for (uint32_t x = 0; x < n_keys; x++)
        k.prev[x] = k.next[x] = NIL;
    switch (p) {
    case CACHESIM_LRU:
        *hits = run_lru(keys, n, from, &k, cap);
        break;
    case CACHESIM_ARC:
        *hits = run_arc(keys, n, from, &k, cap);
        break;
    case CACHESIM_LFU: {
        for (uint32_t x = 0; x < n_keys; x++)
            score[x] = -INFINITY;
        lfu_scorer l = {{lfu_request, lfu_score}, score, half_life};
        *hits = run_scored(keys, n, from, n_keys, cap, &l.base, k.prev, slots, a);
        break;
    }
    case CACHESIM_ROUTER: {
        router_scorer r = {{router_request, router_score}, &counts, obs, obs->logits, 0};
        *hits = run_scored(keys, n, from, n_keys, cap, &r.base, k.prev, slots, a);
        break;
    }
    case CACHESIM_RECENT: {
        router_scorer r = {{router_request, recent_score}, &counts, obs, obs->logits, 0};
        *hits = run_scored(keys, n, from, n_keys, cap, &r.base, k.prev, slots, a);
        break;
    }
    case CACHESIM_BELADY:
        *hits = run_belady(keys, n, from, n_keys, cap, k.prev, slots, a, b);
        break;
    default:
        break;
    }
out:
    free(k.prev);
    free(k.next);
    free(k.in);
    free(slots);
    free(a);
    free(b);
    free(score);
    routecount_free(&counts);
    return rc;
}
