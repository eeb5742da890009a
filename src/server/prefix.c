/* The prefix cache (prefix.h): an LRU list of snapshots under one mutex.
 *
 * Entries are few (each holds a model's whole recurrent state plus its KV
 * rows: tens of MB on real shapes), so a lookup scans the list: it hashes
 * every prefix of the query once, then for each entry shorter than the
 * query compares the hash of the query's prefix of that length with the
 * entry's, and the ids exactly where they agree. */
#include "server/prefix.h"

#include "util/err.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

struct prefix_entry {
    e0_snapshot *snap;  /* owned */
    const int32_t *ids; /* the snapshot's ids: [n] */
    size_t n;
    uint64_t hash;             /* of ids[0..n) */
    size_t bytes;              /* e0_snapshot_bytes */
    int pins;                  /* guarded by mu */
    prefix_entry *prev, *next; /* LRU list, most recently used first; guarded by mu */
};

struct prefix_cache {
    pthread_mutex_t mu;
    prefix_opts o;
    prefix_entry *head, *tail; /* most / least recently used */
    prefix_counters k;         /* bytes, budget and entries included */
};

/* A 64-bit multiply-xorshift mix per id (not cryptographic: a filter). */
static uint64_t hash_default(uint64_t h, int32_t id) {
    h ^= (uint64_t)(uint32_t)id + 0x9e3779b97f4a7c15ull;
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 31;
    return h;
}

void prefix_opts_default(prefix_opts *o) {
    *o = (prefix_opts){.budget = 0, .min_tokens = PREFIX_MIN_TOKENS, .hash_step = NULL};
}

int prefix_new(prefix_cache **out, const prefix_opts *o, char *err) {
    *out = NULL;
    prefix_opts d;
    prefix_opts_default(&d);
    if (!o) o = &d;
    if (o->min_tokens < 0)
        return e0_fail(err, E0_EINVAL, "prefix cache: min_tokens %d is negative", o->min_tokens);
    prefix_cache *c = calloc(1, sizeof *c);
    if (!c) return e0_fail(err, E0_ENOMEM, "prefix cache: out of memory");
    if (pthread_mutex_init(&c->mu, NULL)) {
        free(c);
        return e0_fail(err, E0_ENOMEM, "prefix cache: cannot create its mutex");
    }
    c->o = *o;
    if (!c->o.min_tokens) c->o.min_tokens = PREFIX_MIN_TOKENS;
    if (!c->o.hash_step) c->o.hash_step = hash_default;
    c->k.budget = o->budget;
    *out = c;
    return 0;
}

static void entry_free(prefix_entry *e) {
    e0_snapshot_free(e->snap);
    free(e);
}

void prefix_free(prefix_cache *c) {
    if (!c) return;
    for (prefix_entry *e = c->head, *next; e; e = next) {
        next = e->next;
        entry_free(e);
    }
    pthread_mutex_destroy(&c->mu);
    free(c);
}

/* List surgery; the caller holds mu. */
static void unlink_entry(prefix_cache *c, prefix_entry *e) {
    if (e->prev)
        e->prev->next = e->next;
    else
        c->head = e->next;
    if (e->next)
        e->next->prev = e->prev;
    else
        c->tail = e->prev;
    e->prev = e->next = NULL;
}

static void push_front(prefix_cache *c, prefix_entry *e) {
    e->prev = NULL;
    e->next = c->head;
    if (c->head) c->head->prev = e;
    c->head = e;
    if (!c->tail) c->tail = e;
}

static void touch(prefix_cache *c, prefix_entry *e) {
    if (c->head == e) return;
    unlink_entry(c, e);
    push_front(c, e);
}

static uint64_t hash_ids(const prefix_cache *c, const int32_t *ids, size_t n) {
    uint64_t h = 0;
    for (size_t i = 0; i < n; i++)
        h = c->o.hash_step(h, ids[i]);
    return h;
}

int prefix_put(prefix_cache *c, e0_snapshot *snap) {
    if (!c || !snap) {
        e0_snapshot_free(snap);
        return E0_EINVAL;
    }
    size_t n;
    const int32_t *ids = e0_snapshot_ids(snap, &n);
    const size_t bytes = e0_snapshot_bytes(snap);
    const uint64_t hash = hash_ids(c, ids, n);
    prefix_entry *fresh = malloc(sizeof *fresh), *evicted = NULL;
    int kept = 0;
    pthread_mutex_lock(&c->mu);
    if (!fresh || n < (size_t)c->o.min_tokens || bytes > c->k.budget) {
        c->k.refused++;
        goto out;
    }
    for (prefix_entry *e = c->head; e; e = e->next)
        if (e->n == n && e->hash == hash && !memcmp(e->ids, ids, n * sizeof *ids)) {
            touch(c, e); /* the same state again: keep the one held */
            c->k.duplicates++;
            goto out;
        }
    /* room: least recently used unpinned entries first; never evict when
     * pinned ones alone would still not leave room */
    uint64_t freeable = 0;
    for (prefix_entry *e = c->head; e; e = e->next)
        if (!e->pins) freeable += e->bytes;
    if (c->k.bytes - freeable + bytes > c->k.budget) {
        c->k.refused++;
        goto out;
    }
    for (prefix_entry *e = c->tail, *prev; e && c->k.bytes + bytes > c->k.budget; e = prev) {
        prev = e->prev;
        if (e->pins) continue;
        unlink_entry(c, e);
        c->k.bytes -= e->bytes;
        c->k.entries--;
        c->k.evictions++;
        e->next = evicted; /* freed after the lock */
        evicted = e;
    }
    *fresh = (prefix_entry){.snap = snap, .ids = ids, .n = n, .hash = hash, .bytes = bytes};
    push_front(c, fresh);
    c->k.bytes += bytes;
    c->k.entries++;
    c->k.inserts++;
    kept = 1;
out:
    pthread_mutex_unlock(&c->mu);
    if (!kept) {
        free(fresh);
        e0_snapshot_free(snap);
    }
    while (evicted) {
        prefix_entry *next = evicted->next;
        entry_free(evicted);
        evicted = next;
    }
    return kept;
}

prefix_entry *prefix_get(prefix_cache *c, const int32_t *ids, size_t n, size_t have) {
    if (!c) return NULL;
    /* pre[i]: hash of ids[0..i), for every length an entry may have */
    uint64_t *pre = n ? malloc(n * sizeof *pre) : NULL;
    if (pre) {
        uint64_t h = 0;
        for (size_t i = 0; i < n; i++) {
            pre[i] = h;
            h = c->o.hash_step(h, ids[i]);
        }
    }
    prefix_entry *best = NULL;
    pthread_mutex_lock(&c->mu);
    if (pre)
        for (prefix_entry *e = c->head; e; e = e->next)
            if (e->n < n && e->n > have && (!best || e->n > best->n) && e->hash == pre[e->n] &&
                !memcmp(e->ids, ids, e->n * sizeof *ids))
                best = e;
    if (best) {
        best->pins++;
        touch(c, best);
        c->k.hits++;
        c->k.tokens_reused += best->n;
    } else {
        c->k.misses++;
    }
    pthread_mutex_unlock(&c->mu);
    free(pre);
    return best;
}

const e0_snapshot *prefix_entry_snapshot(const prefix_entry *e) {
    return e->snap;
}

void prefix_release(prefix_cache *c, prefix_entry *e) {
    if (!c || !e) return;
    pthread_mutex_lock(&c->mu);
    e->pins--;
    pthread_mutex_unlock(&c->mu);
}

int32_t prefix_restore(prefix_cache *c, e0_session *s, const int32_t *ids, size_t n, char *err) {
    const int32_t have = e0_session_reusable(s, ids, n);
    prefix_entry *e = prefix_get(c, ids, n, (size_t)have);
    if (!e) return 0;
    int rc = e0_session_restore(s, e->snap, err);
    const int32_t got = (int32_t)e->n;
    pthread_mutex_lock(&c->mu);
    e->pins--;
    if (rc) { /* not reused after all (a session of another engine or a smaller n_ctx) */
        c->k.hits--;
        c->k.misses++;
        c->k.tokens_reused -= e->n;
    }
    pthread_mutex_unlock(&c->mu);
    return rc ? rc : got;
}

void prefix_counters_get(prefix_cache *c, prefix_counters *out) {
    pthread_mutex_lock(&c->mu);
    *out = c->k;
    pthread_mutex_unlock(&c->mu);
}

int prefix_check(prefix_cache *c, char *err) {
    int rc = 0;
    uint64_t bytes = 0, entries = 0;
    pthread_mutex_lock(&c->mu);
    const prefix_entry *prev = NULL;
    for (const prefix_entry *e = c->head; e && !rc; prev = e, e = e->next) {
        if (e->prev != prev)
            rc = e0_fail(err, E0_EINVAL, "prefix cache: entry %llu's back link is wrong",
                         (unsigned long long)entries);
        else if (e->pins < 0)
            rc = e0_fail(err, E0_EINVAL, "prefix cache: entry %llu has %d pins",
                         (unsigned long long)entries, e->pins);
        else if (e->bytes != e0_snapshot_bytes(e->snap))
            rc = e0_fail(err, E0_EINVAL, "prefix cache: entry %llu counts %zu bytes, holds %zu",
                         (unsigned long long)entries, e->bytes, e0_snapshot_bytes(e->snap));
        bytes += e->bytes;
        entries++;
    }
    if (!rc && c->tail != prev)
        rc = e0_fail(err, E0_EINVAL, "prefix cache: the tail is not the last entry");
    else if (!rc && (bytes != c->k.bytes || entries != c->k.entries))
        rc = e0_fail(err, E0_EINVAL,
                     "prefix cache: %llu entries of %llu bytes, counted %llu of %llu",
                     (unsigned long long)entries, (unsigned long long)bytes,
                     (unsigned long long)c->k.entries, (unsigned long long)c->k.bytes);
    else if (!rc && bytes > c->k.budget)
        rc = e0_fail(err, E0_EINVAL, "prefix cache: %llu bytes held, over the budget of %llu",
                     (unsigned long long)bytes, (unsigned long long)c->k.budget);
    pthread_mutex_unlock(&c->mu);
    return rc;
}
