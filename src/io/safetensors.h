/* Safetensors over mmap: one file or a sharded set, every header validated
 * before use.
 *
 * File format: u64 little-endian header length N, N bytes of JSON
 * {"name": {"dtype": "BF16", "shape": [..], "data_offsets": [begin, end]},
 *  "__metadata__": {"k": "v"}}, then the data section; offsets are relative
 * to the data section.
 *
 * Checks (each failure names the file and the tensor): N fits in the file
 * and is at most ST_MAX_HEADER; the JSON is an object of objects; dtype is
 * known; shape is an array of at most ST_MAX_DIMS non-negative integers;
 * begin <= end <= data size; (end - begin) == prod(shape) * element size
 * (overflow-checked); no two tensors overlap; names are unique across shards.
 * Data need not be aligned: the format does not require it, so everything
 * that reads tensor bytes in place uses unaligned loads (util/num.h).
 */
#ifndef E0_IO_SAFETENSORS_H
#define E0_IO_SAFETENSORS_H

#include "edge0.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define ST_MAX_DIMS   8
#define ST_MAX_HEADER (100u << 20) /* as the reference implementation */

typedef enum {
    ST_BOOL,
    ST_U8,
    ST_I8,
    ST_F8_E4M3,
    ST_F8_E5M2,
    ST_U16,
    ST_I16,
    ST_F16,
    ST_BF16,
    ST_U32,
    ST_I32,
    ST_F32,
    ST_U64,
    ST_I64,
    ST_F64,
    ST_GGML, /* a ggml block type (GGUF only): st_tensor.gtype says which */
    ST_NDTYPES
} st_dtype;

const char *st_dtype_name(st_dtype t);
/* Bytes per element; 0 for ST_GGML (whose rows are blocks, quant/ggml.h). */
size_t st_dtype_size(st_dtype t);

/* One header entry; offsets are relative to the data section. */
typedef struct {
    char *name;
    st_dtype dtype;
    int ndim;
    uint64_t shape[ST_MAX_DIMS];
    uint64_t begin, end;
} st_entry;

typedef struct {
    st_entry *entries;
    size_t n;
    uint64_t data_start; /* 8 + header length */
    char **meta;         /* __metadata__ as key, value, key, value, ... */
    size_t n_meta;
} st_header;

/* Parses and validates a header. `buf` holds at least the first 8 + N bytes
 * of a file of `file_size` bytes (buf_len may be smaller than file_size).
 * `fname` is only used in messages. Pure: no I/O, safe to fuzz. */
int st_header_parse(st_header *h, const uint8_t *buf, size_t buf_len, uint64_t file_size,
                    const char *fname, char *err);
void st_header_free(st_header *h);
const char *st_header_meta(const st_header *h, const char *key);

/* A tensor of an opened set. Shapes are outermost first in both formats: a
 * GGUF tensor with ggml ne = [in, out, E] has shape [E, out, in]. */
typedef struct {
    const char *name;
    st_dtype dtype;
    uint32_t gtype; /* GGUF: the ggml type id (ggml_type), also for F32/F16/BF16; else 0 */
    int ndim;
    uint64_t shape[ST_MAX_DIMS];
    uint32_t file; /* shard index in the set */
    uint64_t off;  /* absolute offset in that file */
    uint64_t nbytes;
    const uint8_t *data; /* inside the read-only mapping */
} st_tensor;

typedef struct st_set st_set;

/* Opens `dir`/model.safetensors.index.json and its shards, else
 * `dir`/model.safetensors, else every *.safetensors in `dir` (sorted). */
int st_set_open_dir(st_set **out, const char *dir, char *err);
/* Opens one file. */
int st_set_open_file(st_set **out, const char *path, char *err);
void st_set_free(st_set *s);

const st_tensor *st_get(const st_set *s, const char *name);
size_t st_count(const st_set *s);
const st_tensor *st_at(const st_set *s, size_t i);
const char *st_file_path(const st_set *s, uint32_t file);
int st_file_fd(const st_set *s, uint32_t file);
/* __metadata__ value of the first file, or NULL. */
const char *st_meta(const st_set *s, const char *key);

/* The shard and absolute offset of an address inside one of the set's
 * mappings (as st_tensor.data and views derived from it). */
int st_locate(const st_set *s, const void *p, uint32_t *file, uint64_t *off);
/* madvise over [off, off + len) of shard `file` (e.g. MADV_WILLNEED). */
int st_advise(const st_set *s, uint32_t file, uint64_t off, uint64_t len, int advice);

/* A byte range of the set's mappings, by address. */
typedef struct {
    const uint8_t *p;
    uint64_t len;
} st_span;

/* Reads every file of the set into anonymous memory on transparent huge
 * pages and moves it to the addresses of the file's mapping, so every
 * pointer into the set (tensor data, views made from it) stays valid and
 * now reads memory that page faults, TLB misses on 4 KiB pages and page-
 * cache eviction no longer touch (issue 12: llama.cpp's loaded weights are
 * compared against). The whole pages inside the `nskip` spans of `skip`
 * (any order, may overlap: tensors nothing computes with, such as an MTP
 * head) are not read: they stay mappings of the file. Memory: the files'
 * size less those pages, not reclaimable. `progress` (may be NULL) is
 * called after each chunk with the bytes read so far and the total. Fails
 * with E0_EIO naming the file and offset of a failed read, or E0_ENOMEM;
 * the set stays usable (mapped) on failure. */
typedef void (*st_load_fn)(void *ctx, uint64_t done, uint64_t total);
int st_set_load(st_set *s, const st_span *skip, size_t nskip, st_load_fn progress, void *ctx,
                char *err);
/* The loaded copies made writable (true) or read-only again (false), for
 * transforms in place (model_repack); files not loaded are left alone.
 * 0, or E0_EIO. */
int st_set_writable(st_set *s, bool writable);

/* Copies every page of the set's mappings that holds a byte outside the
 * `n` spans of `skip` (any order, may overlap) into anonymous memory at the
 * same address: reads through those pages then never touch the file again,
 * so a file truncated under a running process cannot raise SIGBUS there
 * (issue 15). For pread I/O, skip = the routed experts and the tensors
 * nothing computes with (an MTP head): every other tensor is resident. Memory: the pinned pages, not reclaimable. E0_EIO naming the
 * file and offset of a failed read, or E0_ENOMEM; *pinned gets the bytes
 * copied. */
int st_set_pin(st_set *s, const st_span *skip, size_t n, uint64_t *pinned, char *err);

/* A read through a mapping past the end of a file that shrank while mapped
 * (truncated under the process) raises SIGBUS. st_file_map installs, once
 * per process, a handler that turns such a fault on one of the set's
 * mappings into zeros (an anonymous page put over the faulting one) and a
 * record; any other SIGBUS keeps its default action. st_set_fault says
 * whether a mapping of the set faulted (the first fault's file and offset
 * in err, as an E0_EIO message): from then on data read through the
 * mapping is not the checkpoint's, and every caller must fail. */
int st_set_fault(const st_set *s, char *err);

/* Number of elements (product of the shape). */
uint64_t st_numel(const st_tensor *t);

/* Byte range of slice i along dimension 0 (e.g. expert i of a stacked
 * [E, out, in] tensor): absolute file offset and length. E0_ERANGE for i
 * past the end; E0_EINVAL for a 1-D tensor of a ggml block type (a slice
 * would split a block). */
int st_slice(const st_tensor *t, uint64_t i, uint64_t *off, uint64_t *len);

/* pread exactly `len` bytes at absolute offset `off` of shard `file`. */
int st_pread(const st_set *s, uint32_t file, uint64_t off, uint64_t len, void *dst, char *err);

/* Direct reads (O_DIRECT) bypass the page cache: no copy out of it, and no
 * page-cache growth to drop afterwards. They move whole ST_DIRECT_ALIGN
 * blocks between aligned file offsets and aligned memory, which covers the
 * logical block size of every common device. */
#define ST_DIRECT_ALIGN 4096u

/* Reads [off, off + len) of shard `file` so that byte `off` lands at `dst`.
 * When dst - off is a multiple of ST_DIRECT_ALIGN and the shard takes
 * O_DIRECT, it reads the enclosing aligned span [off rounded down, off + len
 * rounded up) (the memory must hold it; the slack bytes around the range
 * are overwritten) and sets *direct. Otherwise, or when the filesystem
 * rejects the read (EINVAL, after which direct reads of that shard stay
 * off), it reads exactly the range through the page cache. *direct may be
 * NULL. Thread-safe. */
int st_pread_direct(const st_set *s, uint32_t file, uint64_t off, uint64_t len, void *dst,
                    bool *direct, char *err);
/* One range of st_pread_direct_many: [off, off + len) of shard `file` so
 * that byte `off` lands at dst. */
typedef struct {
    uint32_t file;
    uint64_t off, len;
    void *dst;
} st_read;

/* st_pread_direct of each of rd[0..n), the whole direct reads among them
 * submitted together through io_uring where the kernel offers it (io/uring.c);
 * *all_direct: every range was read direct. The same bytes, the same
 * fallbacks and errors as reading them one by one. Thread-safe. */
int st_pread_direct_many(const st_set *s, const st_read *rd, int n, bool *all_direct, char *err);
/* e0_uring_on (edge0.h, uring.c): whether this thread can submit reads
 * through io_uring. */
/* Ranges read through io_uring so far, all threads. */
uint64_t st_uring_reads(void);
/* Tests: false makes st_pread_direct_many read one range at a time. */
void st_debug_uring(bool on);
/* Whether direct reads of shard `file` are on. */
bool st_direct_on(const st_set *s, uint32_t file);
/* Tests: the next direct read of each shard fails with EINVAL. */
void st_debug_direct_einval(st_set *s);

/* Streaming writers (synth, convert) build headers themselves: one entry
 * ',"NAME SUFFIX":{"dtype":..,"shape":[..],"data_offsets":[begin,end]}'
 * appended to a JSON object already opened, and the finished JSON packed as
 * the u64 length prefix + JSON padded with spaces to a multiple of 8 (so
 * data starts 8-aligned). `json_sbuf` is a util/sbuf.h sbuf; *out is
 * malloc'd. */
void st_header_entry(void *json_sbuf, const char *name, const char *suffix, const char *dtype,
                     int ndim, const uint64_t *shape, uint64_t begin, uint64_t end);
int st_header_pack(const char *json, size_t len, char **out, size_t *out_len);

/* Writing. Tensors are laid out in the given order, each aligned to 8
 * bytes; the file appears atomically (written to PATH.tmp, then renamed). */
typedef struct {
    const char *name;
    st_dtype dtype;
    int ndim;
    uint64_t shape[ST_MAX_DIMS];
    const void *data;
} st_wtensor;

int st_write(const char *path, const st_wtensor *t, size_t n, const char *const *meta,
             size_t n_meta, char *err);

#endif
