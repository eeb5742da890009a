/* The streaming safetensors writer of synth and convert: a checkpoint far
 * larger than memory, written in shards by worker threads that each hold
 * one job of rows at a time, into DST.tmp-XXXXXX, renamed to DST once it is
 * complete.
 *
 * Usage:
 *     stw w = {0};
 *     stw_item *it = stw_items(&w, n);          // fill it[0..n)
 *     stw_layout(&w, &(stw_layout_opts){...}, err);
 *     stw_write(&w, dst, &(stw_write_opts){.produce = ..., ...}, err);
 *     stw_free(&w);
 *
 * Items: a float tensor, or a quantized mlx affine module, which is three
 * tensors back to back: NAME.weight (U32 codes [..., out, in*bits/32]),
 * NAME.scales and NAME.biases (BF16 [..., out, in/group]). stw_layout gives
 * every item a shard and an offset (a new shard when the next item would
 * pass shard_bytes; an item never straddles two), builds the headers and
 * splits every item into jobs of whole rows of about job_bytes.
 *
 * stw_write runs the jobs on worker threads: produce() fills the job's rows
 * into the thread's buffers and the rows are pwritten in place, in job
 * order (= file order), so production overlaps and the page cache sees one
 * sequential stream per shard. Memory is threads x (one job + scratch).
 * Then the files are synced, model.safetensors.index.json and the caller's
 * files (finish()) written, and the directory renamed; on any failure or
 * cancel nothing is left behind.
 *
 * Threads: produce() and prefetch() run on the workers, concurrently for
 * different jobs; finish() and progress() on the calling thread, which also
 * polls *cancel (a signal handler's flag, never read by the workers) and
 * turns it into a failure. */
#ifndef E0_IO_STWRITER_H
#define E0_IO_STWRITER_H

#include "io/safetensors.h"

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
    const char *name; /* float: the tensor; quantized: the module (borrowed) */
    int bits, group;  /* bits > 0: quantized */
    st_dtype dtype;   /* float items */
    int ndim;
    uint64_t shape[ST_MAX_DIMS]; /* float: as written; quantized: [..., out, in], in unpacked */
    int64_t rows, cols;          /* the item as rows of cols values; jobs split it by rows */
    uint64_t row_cost;           /* what a row counts towards job_bytes; 0: its output bytes */
    uint64_t src_bytes;          /* what the item reads (the prefetch window counts it) */
    /* set by stw_layout */
    uint32_t shard;
    uint64_t off;      /* in the shard's data section */
    size_t wrow, srow; /* output bytes per row: weight or data; scales (= biases) */
} stw_item;

/* Rows [r0, r0 + n) of item `item`. */
typedef struct {
    uint32_t item;
    int64_t r0, n;
} stw_job;

typedef struct {
    stw_item *items;
    size_t n;
    stw_job *jobs;
    size_t njobs;
    uint64_t max_cost; /* largest job: sum of its rows' row_cost */
    size_t max_out;    /* largest job's output bytes */
    int nshards;
    uint64_t *data_bytes; /* [nshards] data section size */
    char **hdr;           /* [nshards] header: u64 length + padded JSON */
    size_t *hdr_len;
    uint64_t total_data, total_bytes; /* data sections; whole files */
    size_t n_tensors;
} stw;

typedef struct {
    uint64_t shard_bytes; /* largest shard; 0: 5 GiB (as mlx-lm and transformers) */
    uint64_t job_bytes;   /* a job's rows cost about this much */
    const char *format;   /* __metadata__ "format": "mlx", "pt" */
} stw_layout_opts;

/* n zeroed items for the caller to fill, owned by w; NULL when out of memory. */
stw_item *stw_items(stw *w, size_t n);
/* Sizes, shards, offsets, headers and jobs of the items. */
int stw_layout(stw *w, const stw_layout_opts *o, char *err);
/* For a file format the caller lays out itself (GGUF): the items have
 * bits 0, their shard (any file number the caller's write hook knows),
 * off (where row 0 goes) and wrow set; this sizes and splits them into jobs. */
int stw_layout_raw(stw *w, uint64_t job_bytes, char *err);
void stw_free(stw *w);

/* Where produce() puts a job's n rows: n * wrow bytes at `w` and, for a
 * quantized item, n * srow bytes each at `scales` and `biases`. */
typedef struct {
    uint8_t *w;
    uint16_t *scales, *biases;
    void *scratch; /* the thread's own scratch_bytes */
} stw_out;

typedef enum { STW_WRITING, STW_SYNCING, STW_DONE } stw_phase;

typedef struct {
    stw_phase phase;
    uint64_t done;    /* what produce() counted with stw_done */
    uint64_t written; /* data bytes handed to the OS (of stw.total_data) */
    double seconds;   /* since stw_write_opts.t0 */
} stw_progress;

/* One stw_write in progress, as produce() sees it. */
typedef struct stw_run stw_run;

typedef struct {
    int n_threads;           /* 0: one per core, at most 8 */
    bool sync;               /* fsync files and directories before and after the rename */
    bool replace;            /* an existing DST is replaced (atomically where the kernel can) */
    bool always_index;       /* model.safetensors.index.json also for a single shard */
    bool sparse;             /* headers only: the data sections are holes (zeros, no disk) */
    size_t scratch_bytes;    /* per thread, for produce() */
    uint64_t prefetch_bytes; /* prefetch() jobs whose src_bytes start this far ahead */
    double t0;               /* progress seconds count from here (stw_now) */
    const volatile sig_atomic_t *cancel; /* non-zero: stop, fail with E0_EINVAL */
    void *ctx;
    /* Rows of job j into out; on failure calls stw_fail. */
    void (*produce)(void *ctx, stw_run *r, const stw_job *j, const stw_out *out);
    /* Optional: start reading what job j needs, before a worker gets to it. */
    void (*prefetch)(void *ctx, const stw_job *j);
    /* Optional: writes the other files (config.json, ...) into dir, the
     * shards synced and still open. */
    int (*finish)(void *ctx, const char *dir, bool sync, char *err);
    /* Optional: about every 100 ms and once per phase. */
    void (*progress)(void *ctx, const stw_progress *p);
    /* stw_run_jobs only: writes len bytes of item rows at `off` of file
     * `shard` (0 or an E0_* code with err filled). Called in job order,
     * never by two threads at once. */
    int (*write)(void *ctx, uint32_t shard, uint64_t off, const void *p, size_t len, char *err);
} stw_write_opts;

/* Writes the checkpoint laid out in w as the new directory dst. */
int stw_write(stw *w, const char *dst, const stw_write_opts *o, char *err);

/* Runs the jobs of a stw_layout_raw layout through o->write, with the
 * same threads, ordering, progress (a STW_SYNCING report at the end when
 * o->sync: the caller syncs) and cancel as stw_write; no files, headers or
 * directory: the caller owns those. */
int stw_run_jobs(stw *w, const stw_write_opts *o, char *err);
/* fsyncs the directory that holds path (a rename in it becomes durable). */
void stw_sync_parent(const char *path);
/* The directory that will hold dst has need bytes (+64 MiB) free. */
int stw_check_space(const char *dst, uint64_t need, char *err);

/* For produce(): the first failure wins and stops the write. */
void stw_fail(stw_run *r, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
bool stw_stopped(stw_run *r);
/* For produce(): n more units of the caller's work done (stw_progress.done). */
void stw_done(stw_run *r, uint64_t n);

/* Monotonic seconds. */
double stw_now(void);
/* pwrite of exactly len bytes at off; -1 with errno on failure. */
int stw_pwrite(int fd, const void *buf, size_t len, uint64_t off);
/* Creates path (it must not exist) holding text; fsync'd when sync. */
int stw_write_text(const char *path, const char *text, bool sync, char *err);

#endif
