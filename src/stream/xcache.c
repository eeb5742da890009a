#include "stream/xcache.h"

#include "stream/cachesim.h"
#include "stream/xpolicy.h"

#include "util/bigbuf.h"

#include "edge0.h"
#include "util/err.h"

#include <math.h>
#include <sys/mman.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* RETIRED: a slot past the limit (xcache_set_limit), its memory given back. */
enum { ST_FREE, ST_LOADING, ST_READY, ST_RETIRED };

struct xentry {
    int32_t layer, expert; /* key, valid unless FREE */
    int state;
    int32_t pins;
    uint8_t *buf;
    xentry *prev, *next; /* LRU list of unpinned READY entries (head = oldest) */
    bool in_lru;
};

struct xcache {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int32_t n_slots, n_layers, n_experts;
    size_t bundle_bytes;
    xentry *e;
    uint8_t *mem;
    size_t mem_bytes; /* the slots' block, rounded up to pages */
    int32_t *table; /* [n_layers * n_experts]: entry index or -1 */
    xentry *lru_head, *lru_tail;
    int32_t limit;  /* slots [limit, n_slots) are retired or retire on release */
    int32_t n_free; /* FREE entries are found by scanning from `free_hint` */
    int32_t free_hint;
    uint64_t *hits, *misses; /* per layer */
    xpolicy pol;             /* the eviction policy's scores (stream/xpolicy.h) */
    uint32_t *trace;         /* [trace_cap] demand requests, in order */
    size_t trace_cap, trace_n;
    uint64_t trace_dropped;
    /* the router logits observed while tracing (cachesim_obs): obs_n layer
     * calls, their logits in obs_logits[0, obs_used) of obs_cap floats */
    size_t *obs_at;
    int32_t *obs_layer, *obs_tokens;
    float *obs_logits;
    size_t obs_n, obs_calls, obs_used, obs_cap;
    uint64_t obs_dropped;
};

static void lru_unlink(xcache *c, xentry *e) {
    if (!e->in_lru) return;
    if (e->prev)
        e->prev->next = e->next;
    else
        c->lru_head = e->next;
    if (e->next)
        e->next->prev = e->prev;
    else
        c->lru_tail = e->prev;
    e->prev = e->next = NULL;
    e->in_lru = false;
}

static void lru_push(xcache *c, xentry *e) { /* most recently released at the tail */
    e->prev = c->lru_tail;
    e->next = NULL;
    if (c->lru_tail)
        c->lru_tail->next = e;
    else
        c->lru_head = e;
    c->lru_tail = e;
    e->in_lru = true;
}

static void lru_push_head(xcache *c, xentry *e) { /* first in line for eviction */
    e->prev = NULL;
    e->next = c->lru_head;
    if (c->lru_head)
        c->lru_head->prev = e;
    else
        c->lru_tail = e;
    c->lru_head = e;
    e->in_lru = true;
}

int xcache_new(xcache **out, int32_t n_slots, size_t bundle_bytes, int32_t n_layers,
               int32_t n_experts, char *err) {
    *out = NULL;
    xcache *c = calloc(1, sizeof *c);
    if (!c) return e0_fail(err, E0_ENOMEM, "out of memory");
    c->n_slots = n_slots;
    c->n_layers = n_layers;
    c->n_experts = n_experts;
    c->bundle_bytes = bundle_bytes;
    c->e = calloc((size_t)(n_slots ? n_slots : 1), sizeof *c->e);
    c->table = malloc((size_t)n_layers * (size_t)n_experts * sizeof *c->table);
    c->hits = calloc((size_t)n_layers, sizeof *c->hits);
    c->misses = calloc((size_t)n_layers, sizeof *c->misses);
        /* 2 MiB-aligned (huge pages), so page-aligned for direct reads into the slots (bundle_bytes from a plan
     * is a multiple of the alignment, so every slot is aligned too) */
    const size_t A = 4096, total = ((size_t)n_slots * bundle_bytes + A - 1) & ~(A - 1);
    if (n_slots && bundle_bytes) c->mem = e0_big_alloc(total);
    c->mem_bytes = c->mem ? total : 0;
    if (!c->e || !c->table || !c->hits || !c->misses || (n_slots && bundle_bytes && !c->mem)) {
        xcache_free(c);
        return e0_fail(err, E0_ENOMEM,
                       "out of memory for an expert cache of %d bundles of %zu bytes", n_slots,
                       bundle_bytes);
    }
    for (size_t i = 0; i < (size_t)n_layers * (size_t)n_experts; i++)
        c->table[i] = -1;
    for (int32_t i = 0; i < n_slots; i++)
        c->e[i].buf = c->mem + (size_t)i * bundle_bytes;
    c->n_free = n_slots;
    c->limit = n_slots;
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    *out = c;
    return 0;
}

uint8_t *xcache_mem(const xcache *c, size_t *bytes) {
    *bytes = c->mem_bytes;
    return c->mem;
}

void xcache_free(xcache *c) {
    if (!c) return;
    if (c->e) {
        pthread_mutex_destroy(&c->mu);
        pthread_cond_destroy(&c->cv);
    }
    free(c->mem);
    free(c->e);
    free(c->table);
    free(c->hits);
    free(c->misses);
    free(c->trace);
    free(c->obs_at);
    free(c->obs_layer);
    free(c->obs_tokens);
    free(c->obs_logits);
    xpolicy_free(&c->pol);
    free(c);
}

int xcache_set_policy(xcache *c, int policy, double half_life, char *err) {
    return xpolicy_set(&c->pol, policy, half_life, c->n_layers, c->n_experts, "the cache", err);
}

/* The unpinned READY entry LFU, ROUTER or RECENT evicts: the lowest score, the
 * least recently released (earliest in the list) on ties. O(evictable)
 * under `mu`: ~1k-5k entries, a few microseconds per miss against a
 * bundle read of about a millisecond. */
static xentry *lowest_victim(xcache *c) {
    xentry *v = c->lru_head;
    double best = INFINITY;
    for (xentry *e = c->lru_head; e; e = e->next) {
        const double s = xpolicy_score(&c->pol, (size_t)e->layer * (size_t)c->n_experts + (size_t)e->expert);
        if (s < best) best = s, v = e;
    }
    return v;
}

/* A FREE slot, else an unpinned READY one, evicted by the policy. */
static xentry *take_slot(xcache *c) {
    if (c->n_free > 0)
        for (int32_t k = 0; k < c->n_slots; k++) {
            int32_t i = (c->free_hint + k) % c->n_slots;
            if (c->e[i].state == ST_FREE) {
                c->free_hint = i + 1;
                c->n_free--;
                return &c->e[i];
            }
        }
    xentry *v = c->pol.policy == E0_CACHE_LRU ? c->lru_head : lowest_victim(c);
    if (!v) return NULL;
    lru_unlink(c, v);
    c->table[(size_t)v->layer * (size_t)c->n_experts + (size_t)v->expert] = -1;
    return v;
}

xentry *xcache_acquire(xcache *c, int32_t layer, int32_t expert, bool demand, bool *need_load) {
    *need_load = false;
    pthread_mutex_lock(&c->mu);
    const size_t key = (size_t)layer * (size_t)c->n_experts + (size_t)expert;
    xentry *e = NULL;
    if (demand) xpolicy_request(&c->pol, key, true);
    if (demand && c->trace) {
        if (c->trace_n < c->trace_cap)
            c->trace[c->trace_n++] = (uint32_t)key;
        else
            c->trace_dropped++;
    }
    if (c->table[key] >= 0) {
        e = &c->e[c->table[key]];
        lru_unlink(c, e);
        e->pins++;
        if (demand) c->hits[layer]++;
    } else {
        if (demand) c->misses[layer]++;
        if ((e = take_slot(c))) {
            /* a prefetch (the next layer's predicted experts, ~99% routed to) that loads is
             * a request now (xpolicy_request) */
            if (!demand) xpolicy_request(&c->pol, key, false);
            e->layer = layer;
            e->expert = expert;
            e->state = ST_LOADING;
            e->pins = 1;
            c->table[key] = (int32_t)(e - c->e);
            *need_load = true;
        }
    }
    pthread_mutex_unlock(&c->mu);
    return e;
}

xentry *xcache_lookup(xcache *c, int32_t layer, int32_t expert) {
    pthread_mutex_lock(&c->mu);
    int32_t i = c->table[(size_t)layer * (size_t)c->n_experts + (size_t)expert];
    xentry *e = i >= 0 && c->e[i].state == ST_READY ? &c->e[i] : NULL;
    if (e) {
        lru_unlink(c, e);
        e->pins++;
    }
    pthread_mutex_unlock(&c->mu);
    return e;
}

void xcache_loaded(xcache *c, xentry *e, bool ok) {
    pthread_mutex_lock(&c->mu);
    if (ok) {
        e->state = ST_READY;
    } else { /* unkeyed: waiters see the failure, the slot frees on the last release */
        c->table[(size_t)e->layer * (size_t)c->n_experts + (size_t)e->expert] = -1;
        e->expert = -1;
    }
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

int xcache_wait(xcache *c, xentry *e) {
    pthread_mutex_lock(&c->mu);
    while (e->state == ST_LOADING && e->expert >= 0)
        pthread_cond_wait(&c->cv, &c->mu);
    int rc = e->state == ST_READY ? 0 : -1;
    pthread_mutex_unlock(&c->mu);
    return rc;
}

/* Gives a slot's memory back to the kernel (its pages read as zeros if
 * the slot is used again) and marks it RETIRED; the caller holds `mu` and
 * has taken the entry out of the table and the list. */
static void retire(xcache *c, xentry *e) {
    const uintptr_t pg = 4096, a = ((uintptr_t)e->buf + pg - 1) & ~(pg - 1),
                    b = ((uintptr_t)e->buf + c->bundle_bytes) & ~(pg - 1);
    if (b > a) madvise((void *)a, b - a, MADV_DONTNEED);
    e->state = ST_RETIRED;
}

static void release(xcache *c, xentry *e, bool first) {
    pthread_mutex_lock(&c->mu);
    if (--e->pins == 0) {
        const bool past = e - c->e >= c->limit;
        if (e->state == ST_READY && past) { /* the limit came down while it was in use */
            c->table[(size_t)e->layer * (size_t)c->n_experts + (size_t)e->expert] = -1;
            retire(c, e);
        } else if (e->state == ST_READY && first) {
            lru_push_head(c, e);
        } else if (e->state == ST_READY) {
            lru_push(c, e);
        } else if (e->expert < 0 && past) {
            retire(c, e);
        } else if (e->expert < 0) { /* a failed load: back to FREE */
            e->state = ST_FREE;
            c->n_free++;
        }
    }
    pthread_mutex_unlock(&c->mu);
}

void xcache_release(xcache *c, xentry *e) { release(c, e, false); }

void xcache_release_first(xcache *c, xentry *e) { release(c, e, true); }

void xcache_set_limit(xcache *c, int32_t n) {
    if (n < 0) n = 0;
    if (n > c->n_slots) n = c->n_slots;
    pthread_mutex_lock(&c->mu);
    c->limit = n;
    for (int32_t i = 0; i < c->n_slots; i++) {
        xentry *e = &c->e[i];
        if (i < n) {
            if (e->state == ST_RETIRED) {
                e->state = ST_FREE;
                c->n_free++;
            }
        } else if (e->state == ST_FREE) {
            c->n_free--;
            retire(c, e);
        } else if (e->state == ST_READY && e->pins == 0) {
            lru_unlink(c, e);
            c->table[(size_t)e->layer * (size_t)c->n_experts + (size_t)e->expert] = -1;
            retire(c, e);
        } /* pinned or loading: retires on its last release */
    }
    pthread_mutex_unlock(&c->mu);
}

int32_t xcache_limit(xcache *c) {
    pthread_mutex_lock(&c->mu);
    const int32_t n = c->limit;
    pthread_mutex_unlock(&c->mu);
    return n;
}

uint8_t *xentry_buf(xentry *e) {
    return e->buf;
}
int32_t xcache_slots(const xcache *c) {
    return c->n_slots;
}

void xcache_usage(xcache *c, int32_t *used, int32_t *pinned) {
    pthread_mutex_lock(&c->mu);
    int32_t u = 0, p = 0;
    for (int32_t i = 0; i < c->n_slots; i++) {
        u += c->e[i].state != ST_FREE && c->e[i].state != ST_RETIRED;
        p += c->e[i].pins > 0;
    }
    pthread_mutex_unlock(&c->mu);
    *used = u;
    *pinned = p;
}

void xcache_layer_stats(xcache *c, int32_t layer, uint64_t *hits, uint64_t *misses) {
    pthread_mutex_lock(&c->mu);
    *hits = c->hits[layer];
    *misses = c->misses[layer];
    pthread_mutex_unlock(&c->mu);
}

void xcache_reset_stats(xcache *c) {
    pthread_mutex_lock(&c->mu);
    memset(c->hits, 0, (size_t)c->n_layers * sizeof *c->hits);
    memset(c->misses, 0, (size_t)c->n_layers * sizeof *c->misses);
    pthread_mutex_unlock(&c->mu);
}

int xcache_trace_start(xcache *c, size_t cap, size_t obs_floats, char *err) {
    const size_t E = (size_t)(c->n_experts > 0 ? c->n_experts : 1), calls = obs_floats / E;
    uint32_t *t = NULL;
    size_t *at = NULL;
    int32_t *layer = NULL, *tokens = NULL;
    float *logits = NULL;
    if (cap && !(t = malloc(cap * sizeof *t)))
        return e0_fail(err, E0_ENOMEM, "out of memory for a trace of %zu requests", cap);
    if (calls && (!(at = malloc(calls * sizeof *at)) || !(layer = malloc(calls * sizeof *layer)) ||
                  !(tokens = malloc(calls * sizeof *tokens)) ||
                  !(logits = malloc(calls * E * sizeof *logits)))) {
        free(t);
        free(at);
        free(layer);
        free(tokens);
        return e0_fail(err, E0_ENOMEM, "out of memory for a trace of %zu router logits",
                       obs_floats);
    }
    pthread_mutex_lock(&c->mu);
    uint32_t *old = c->trace;
    size_t *old_at = c->obs_at;
    int32_t *old_layer = c->obs_layer, *old_tokens = c->obs_tokens;
    float *old_logits = c->obs_logits;
    c->trace = t;
    c->trace_cap = cap;
    c->trace_n = 0;
    c->trace_dropped = 0;
    c->obs_at = at;
    c->obs_layer = layer;
    c->obs_tokens = tokens;
    c->obs_logits = logits;
    c->obs_calls = calls;
    c->obs_cap = calls * E;
    c->obs_n = c->obs_used = 0;
    c->obs_dropped = 0;
    pthread_mutex_unlock(&c->mu);
    free(old);
    free(old_at);
    free(old_layer);
    free(old_tokens);
    free(old_logits);
    return 0;
}

void xcache_observe(xcache *c, int32_t layer, const float *logits, int32_t T) {
    if (layer < 0 || layer >= c->n_layers || T < 1) return;
    pthread_mutex_lock(&c->mu);
    xpolicy_observe(&c->pol, layer, logits, T);
    if (c->obs_calls) {
        const size_t f = (size_t)T * (size_t)c->n_experts;
        if (c->obs_n < c->obs_calls && f <= c->obs_cap - c->obs_used) {
            c->obs_at[c->obs_n] = c->trace_n;
            c->obs_layer[c->obs_n] = layer;
            c->obs_tokens[c->obs_n] = T;
            memcpy(c->obs_logits + c->obs_used, logits, f * sizeof *logits);
            c->obs_n++;
            c->obs_used += f;
        } else {
            c->obs_dropped++;
        }
    }
    pthread_mutex_unlock(&c->mu);
}

void xcache_trace_obs(xcache *c, cachesim_obs *out) {
    pthread_mutex_lock(&c->mu);
    out->n = c->obs_dropped ? 0 : c->obs_n; /* an incomplete stream replays nothing */
    out->at = c->obs_at;
    out->layer = c->obs_layer;
    out->tokens = c->obs_tokens;
    out->logits = c->obs_logits;
    out->n_layers = c->n_layers;
    out->n_experts = c->n_experts;
    pthread_mutex_unlock(&c->mu);
}

const uint32_t *xcache_trace(xcache *c, size_t *n, uint64_t *dropped) {
    pthread_mutex_lock(&c->mu);
    *n = c->trace_n;
    if (dropped) *dropped = c->trace_dropped;
    const uint32_t *t = c->trace;
    pthread_mutex_unlock(&c->mu);
    return t;
}
