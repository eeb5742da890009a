/* GGUF (llama.cpp's checkpoint format), versions 2 and 3, little-endian.
 *
 * File layout (every integer little-endian, strings are u64 length + bytes,
 * no NUL):
 *   "GGUF" | u32 version | u64 n_tensors | u64 n_kv
 *   n_kv x     { string key | u32 value type | value }
 *   n_tensors x { string name | u32 n_dims | i64 ne[n_dims] | u32 ggml type | u64 offset }
 *   padding to general.alignment (default 32) | data section
 * A value is a scalar of its type, a string, or an array: u32 element type,
 * u64 count, then the elements. ne[] is innermost first (ne[0] = row
 * length); a tensor's rows are ne[0] / blck blocks of its ggml type each
 * (quant/ggml.h); offsets are relative to the data section.
 *
 * Checks (each failure names the file and the key or tensor): magic and
 * version (v1 is refused: it had 32-bit counts); every length, count and
 * offset read through a bounds-checked cursor, counts capped by what the
 * rest of the buffer could hold; known value types, no nested arrays; keys
 * and names non-empty, without NUL, unique; general.alignment a power of
 * two; 1 <= n_dims <= 4, every ne >= 1, element count without overflow;
 * the ggml type known to quant/ggml.h (types with a layout but no edge0
 * kernel are accepted: their bytes can still be streamed, the weight loader
 * decides); ne[0] a multiple of the block size; offsets aligned, data inside
 * the file, no two tensors overlapping.
 *
 * A parsed gguf_file keeps views into the buffer it was parsed from (big
 * string arrays such as tokenizer.ggml.tokens are not copied): the buffer
 * must outlive it. Keys, tensor names and scalar strings are copied and
 * NUL-terminated.
 */
#ifndef E0_IO_GGUF_H
#define E0_IO_GGUF_H

#include "io/safetensors.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define GGUF_MAX_DIMS          4
#define GGUF_DEFAULT_ALIGNMENT 32u

/* Metadata value types, GGUF's on-disk numbers. */
typedef enum {
    GGUF_U8 = 0,
    GGUF_I8 = 1,
    GGUF_U16 = 2,
    GGUF_I16 = 3,
    GGUF_U32 = 4,
    GGUF_I32 = 5,
    GGUF_F32 = 6,
    GGUF_BOOL = 7,
    GGUF_STRING = 8,
    GGUF_ARRAY = 9,
    GGUF_U64 = 10,
    GGUF_I64 = 11,
    GGUF_F64 = 12,
    GGUF_NTYPES
} gguf_vtype;

const char *gguf_vtype_name(uint32_t t);

/* A string inside the parsed buffer: not NUL-terminated. */
typedef struct {
    const char *p;
    uint64_t len;
} gguf_str;

/* One tensor info. */
typedef struct {
    const char *name;
    uint32_t n_dims;
    uint64_t ne[GGUF_MAX_DIMS]; /* innermost first; 1 past n_dims */
    uint32_t type;              /* ggml_type */
    uint64_t offset;            /* relative to the data section, a multiple of the alignment */
    uint64_t nbytes;            /* rows x ggml_row_bytes(type, ne[0]) */
} gguf_tensor_info;

typedef struct gguf_file gguf_file;

/* Parses and validates the header of a GGUF file of `file_size` bytes whose
 * first `buf_len` bytes are at `buf` (the whole header must be there; buf
 * may end before the data does). `fname` is used in messages. Pure: no I/O,
 * safe to fuzz. `buf` must outlive *out. */
int gguf_parse(gguf_file **out, const uint8_t *buf, size_t buf_len, uint64_t file_size,
               const char *fname, char *err);
void gguf_free(gguf_file *g);

const char *gguf_fname(const gguf_file *g);
uint32_t gguf_version(const gguf_file *g);
uint32_t gguf_alignment(const gguf_file *g);
/* Absolute file offset of the data section (header end rounded up to the
 * alignment). */
uint64_t gguf_data_start(const gguf_file *g);

size_t gguf_n_tensors(const gguf_file *g);
const gguf_tensor_info *gguf_tensor_at(const gguf_file *g, size_t i);
const gguf_tensor_info *gguf_tensor_find(const gguf_file *g, const char *name);

/* Metadata, in file order. */
size_t gguf_n_kv(const gguf_file *g);
const char *gguf_key_at(const gguf_file *g, size_t i);
bool gguf_has(const gguf_file *g, const char *key);
/* Value type of `key` (GGUF_ARRAY for arrays), or -1 when it is absent. */
int gguf_type(const gguf_file *g, const char *key);

/* Typed getters: 0, or E0_ENOTFOUND (absent), E0_EFORMAT (not a number of
 * that kind / not a string / not a bool), E0_ERANGE (an integer that does
 * not fit the requested type). Integers convert between every integer
 * type when the value fits; get_f32 also takes f64 and any integer. Every
 * message names the file and the key. */
int gguf_get_u32(const gguf_file *g, const char *key, uint32_t *out, char *err);
int gguf_get_i32(const gguf_file *g, const char *key, int32_t *out, char *err);
int gguf_get_u64(const gguf_file *g, const char *key, uint64_t *out, char *err);
int gguf_get_i64(const gguf_file *g, const char *key, int64_t *out, char *err);
int gguf_get_f32(const gguf_file *g, const char *key, float *out, char *err);
int gguf_get_bool(const gguf_file *g, const char *key, bool *out, char *err);
/* NUL-terminated copy, owned by g. */
int gguf_get_str(const gguf_file *g, const char *key, const char **out, char *err);

/* Arrays: element type and length. E0_EFORMAT if `key` is not an array. */
int gguf_get_arr(const gguf_file *g, const char *key, gguf_vtype *elem, uint64_t *n, char *err);
/* Element i of a numeric / bool array, converted as the scalar getters do;
 * E0_ERANGE also for i >= length. */
int gguf_arr_u32(const gguf_file *g, const char *key, uint64_t i, uint32_t *out, char *err);
int gguf_arr_i32(const gguf_file *g, const char *key, uint64_t i, int32_t *out, char *err);
int gguf_arr_i64(const gguf_file *g, const char *key, uint64_t i, int64_t *out, char *err);
int gguf_arr_f32(const gguf_file *g, const char *key, uint64_t i, float *out, char *err);
/* Element i of a string array: a view into the parsed buffer. */
int gguf_arr_str(const gguf_file *g, const char *key, uint64_t i, gguf_str *out, char *err);

/* ---- GGUF as an st_set ----------------------------------------------------
 *
 * `path` names a .gguf file or any part of a split set NAME-0000K-of-0000N.gguf
 * (the other parts are found beside it). Every tensor of every part joins
 * one set; GGUF F32/F16/BF16 tensors get dtype ST_F32/ST_F16/ST_BF16, every
 * other type ST_GGML, all with gtype = the ggml id; shapes are ne reversed
 * (outermost first); nbytes, st_slice, st_pread, st_pread_direct, st_locate
 * and st_advise behave as for safetensors. Split checks: split.count and
 * split.no (0-based) of every part agree with its name, the tensors of all
 * parts add up to split.tensors.count, and a missing part is an error that
 * names the missing file. */
int st_set_open_gguf(st_set **out, const char *path, char *err);
/* The first part's parsed header (all metadata lives there), or NULL for a
 * safetensors set. Owned by the set. */
const gguf_file *st_gguf(const st_set *s);
/* A regular file whose first four bytes are "GGUF". */
bool gguf_is_path(const char *path);

/* ---- writing (gguf_write.c) -----------------------------------------------
 *
 * Builds a v3 header in memory, writes it to PATH.tmp, then the caller
 * writes each tensor's bytes at the offset the writer assigned (in pieces,
 * so a 20 GB file never sits in memory); gguf_writer_finish zero-fills the
 * padding and renames PATH.tmp to PATH. gguf_writer_free without finish
 * removes PATH.tmp.
 *
 *   gguf_writer *w; gguf_writer_new(&w, 32, err);
 *   gguf_writer_add_str(w, "general.architecture", "qwen3moe", err); ...
 *   gguf_writer_add_tensor(w, "blk.0.ffn_up_exps.weight", GGML_Q4_0, 3, ne, err); ...
 *   gguf_writer_open(w, path, err);
 *   gguf_writer_pwrite(w, gguf_writer_tensor_offset(w, 0), bytes, len, err); ...
 *   gguf_writer_finish(w, err); gguf_writer_free(w);
 */
typedef struct gguf_writer gguf_writer;

/* alignment: a power of two (0 means GGUF_DEFAULT_ALIGNMENT; another value
 * is written as general.alignment). */
int gguf_writer_new(gguf_writer **out, uint32_t alignment, char *err);
void gguf_writer_free(gguf_writer *w);
/* Metadata (keys unique; the header is laid out in call order). */
int gguf_writer_add_u32(gguf_writer *w, const char *key, uint32_t v, char *err);
int gguf_writer_add_i32(gguf_writer *w, const char *key, int32_t v, char *err);
int gguf_writer_add_u64(gguf_writer *w, const char *key, uint64_t v, char *err);
int gguf_writer_add_f32(gguf_writer *w, const char *key, float v, char *err);
int gguf_writer_add_bool(gguf_writer *w, const char *key, bool v, char *err);
int gguf_writer_add_str(gguf_writer *w, const char *key, const char *v, char *err);
/* Any scalar type by number: `v` points at one value of `type` (u16 for
 * GGUF_U16 and so on, a NUL-terminated string pointer for GGUF_STRING). */
int gguf_writer_add_scalar(gguf_writer *w, const char *key, gguf_vtype type, const void *v,
                           char *err);
/* An array of n numbers / bools of `elem` laid out as in the file (little-
 * endian, packed: u8 0/1 for bools). */
int gguf_writer_add_arr(gguf_writer *w, const char *key, gguf_vtype elem, const void *data,
                        uint64_t n, char *err);
int gguf_writer_add_arr_str(gguf_writer *w, const char *key, const char *const *v, uint64_t n,
                            char *err);
/* A tensor: ne innermost first (ne[0] a multiple of the type's block size).
 * Its offset is the previous tensor's end rounded up to the alignment. */
int gguf_writer_add_tensor(gguf_writer *w, const char *name, uint32_t gtype, int n_dims,
                           const uint64_t *ne, char *err);
/* Writes the header to PATH.tmp; no metadata or tensor may be added after. */
int gguf_writer_open(gguf_writer *w, const char *path, char *err);
/* Absolute file offset and size of tensor i (valid after gguf_writer_open). */
uint64_t gguf_writer_tensor_offset(const gguf_writer *w, size_t i);
uint64_t gguf_writer_tensor_bytes(const gguf_writer *w, size_t i);
/* Writes bytes at absolute offset `off`, which must lie inside the data
 * section. */
int gguf_writer_pwrite(gguf_writer *w, uint64_t off, const void *p, size_t len, char *err);
/* Sizes PATH.tmp and fsyncs it (before finish, for a durable file). */
int gguf_writer_sync(gguf_writer *w, char *err);
/* Total file size, header included (before gguf_writer_open: what it
 * will be with the metadata and tensors added so far). */
uint64_t gguf_writer_size(const gguf_writer *w);
/* Sizes the file (zero padding after the last tensor), closes it and
 * renames PATH.tmp to PATH. */
int gguf_writer_finish(gguf_writer *w, char *err);

#endif
