/* The prefix cache: session snapshots (edge0.h, e0_snapshot) kept in RAM
 * within a byte budget (`--cache-ram SIZE`), keyed by the ids they hold,
 * evicted least recently used first. A returning conversation or a shared
 * system prompt restores the longest cached prefix of its prompt into a
 * session and evaluates only the rest.
 *
 * Why snapshots and not the KV cache alone: a hybrid model's DeltaNet
 * layers keep recurrent and conv states that summarise the whole past and
 * cannot be rolled back, so a session can only resume from a point where
 * its complete state was saved. The cache therefore holds checkpoints at
 * the points a next request will branch from.
 *
 * When the server takes one (the policy this module is built for):
 *  - at the end of each prompt's prefill (before the first generated
 *    token): a request that shares the same prompt (a retry, another
 *    sample, the same system prompt and question) or branches after it;
 *  - at the end of each generation, with the answer evaluated (the session
 *    holds prompt + answer): the next turn of the conversation renders as
 *    exactly these ids + "<|im_end|>\n" + the new messages, so it resumes
 *    here and evaluates only the new tokens;
 *  - not for sequences shorter than prefix_opts.min_tokens (default
 *    PREFIX_MIN_TOKENS): a snapshot costs the model's fixed recurrent state
 *    (65.9 MB on the Qwen3.6-35B-A3B shape) whatever its length, and saves
 *    only the prefill of its tokens; prefix_put refuses them.
 * Before a prefill the server calls prefix_restore (or prefix_get) with the
 * prompt's ids: only an entry longer than what the session can already
 * reuse (e0_session_reusable) is restored.
 *
 * Budget: the bytes of the entries held (e0_snapshot_bytes) never exceed
 * the budget, checked on every insert; a snapshot larger than the whole
 * budget is refused, not kept. Pinned entries are never evicted: when only
 * pinned ones stand in the way, the new snapshot is refused.
 *
 * Keys: each entry's ids hash to 64 bits with a rolling hash (the hash of
 * every prefix of a prompt comes out of one pass), which filters; the ids
 * are then compared exactly, so a hash collision never gives a false hit.
 *
 * Ownership: prefix_put takes the snapshot in every case (kept, or freed at
 * once). A successful prefix_get pins one entry for the caller, who makes
 * exactly one prefix_release for it; while pinned the entry stays and its
 * snapshot may be read (restored) outside the lock.
 *
 * Locking: one mutex `mu` guards the entry list, every entry's links and
 * pin count, the byte count and the counters; snapshots are immutable and
 * read by pin holders without it. Any thread may call any function (the
 * engine thread puts, gets and restores; /metrics reads the counters).
 * Snapshots are freed outside the lock. */
#ifndef E0_SERVER_PREFIX_H
#define E0_SERVER_PREFIX_H

#include "edge0.h"

#include <stddef.h>
#include <stdint.h>

typedef struct prefix_cache prefix_cache;
typedef struct prefix_entry prefix_entry;

/* Shortest sequence worth a snapshot (prefix_opts.min_tokens default). */
enum { PREFIX_MIN_TOKENS = 32 };

typedef struct {
    uint64_t budget;    /* bytes of snapshots held at most (--cache-ram); 0 keeps nothing */
    int32_t min_tokens; /* shorter snapshots are refused; 0 = PREFIX_MIN_TOKENS */
    /* the rolling hash: h' = step(h, id) from h = 0 over the ids; NULL = the
     * default 64-bit mix (tests pass a weak one to force collisions) */
    uint64_t (*hash_step)(uint64_t h, int32_t id);
} prefix_opts;

void prefix_opts_default(prefix_opts *o);

typedef struct {
    uint64_t hits;          /* lookups that found a usable prefix */
    uint64_t misses;        /* lookups that did not */
    uint64_t tokens_reused; /* positions the hits hold (prefill not run again) */
    uint64_t inserts;       /* snapshots kept */
    uint64_t refused;       /* snapshots not kept: too short, over the budget, no room */
    uint64_t duplicates;    /* snapshots of ids already cached (the entry is refreshed) */
    uint64_t evictions;     /* entries dropped to make room */
    uint64_t bytes;         /* held now (<= budget) */
    uint64_t budget;
    uint64_t entries; /* held now */
} prefix_counters;

int prefix_new(prefix_cache **out, const prefix_opts *o, char *err);
/* Frees every entry; none may be pinned. */
void prefix_free(prefix_cache *c);

/* Offers a snapshot (its key: e0_snapshot_ids). Takes ownership in every
 * case. Returns 1 if kept (as the most recently used entry, after evicting
 * least recently used unpinned entries until it fits), 0 if not: shorter
 * than min_tokens, larger than the budget, no room beside pinned entries,
 * or an entry with the same ids exists (that entry becomes the most
 * recently used). E0_EINVAL for a NULL cache or snapshot. */
int prefix_put(prefix_cache *c, e0_snapshot *snap);

/* The entry whose ids are the longest prefix of ids[0..n) that is shorter
 * than n (one id must remain to evaluate) and longer than `have` (what the
 * caller can reuse without the cache), pinned, or NULL. Counts a hit (and
 * its length in tokens_reused) or a miss; the entry becomes the most
 * recently used. */
prefix_entry *prefix_get(prefix_cache *c, const int32_t *ids, size_t n, size_t have);
/* The pinned entry's snapshot: valid until prefix_release. */
const e0_snapshot *prefix_entry_snapshot(const prefix_entry *e);
void prefix_release(prefix_cache *c, prefix_entry *e);

/* Before evaluating ids[0..n) on s: restores the longest cached prefix
 * into s when it is longer than what s can reuse itself
 * (e0_session_reusable). Returns the positions restored (0: nothing was,
 * s is unchanged), or a negative status from e0_session_restore (s is
 * unchanged; the lookup counts as a miss). */
int32_t prefix_restore(prefix_cache *c, e0_session *s, const int32_t *ids, size_t n, char *err);

void prefix_counters_get(prefix_cache *c, prefix_counters *out);

/* Walks the entries under the lock and checks the invariants: the list's
 * links both ways, the byte and entry counts against the entries',
 * bytes <= budget, no negative pin count. 0, or E0_EINVAL with what is
 * wrong (for tests). */
int prefix_check(prefix_cache *c, char *err);

#endif
