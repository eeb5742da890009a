/* GGUF writer: the header is built in memory (metadata in call order, then
 * the tensor infos with offsets assigned at add time), written to PATH.tmp,
 * and the caller streams tensor bytes to the offsets it was given; finish
 * sizes the file and renames it into place. See gguf.h. */
#include "io/gguf.h"

#include "quant/ggml.h"
#include "util/arr.h"
#include "util/err.h"
#include "util/sbuf.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The header is binary, built in a util/sbuf: NUL bytes are data here, and
 * the NUL the buffer keeps after its n bytes is never written. */
static void put(sbuf *b, const void *p, size_t n) {
    sb_put(b, p, n);
}

static void put_le(sbuf *b, uint64_t v, unsigned n) {
    uint8_t le[8];
    for (unsigned i = 0; i < n; i++)
        le[i] = (uint8_t)(v >> (8 * i));
    put(b, le, n);
}

static void put_str(sbuf *b, const char *s) {
    size_t l = strlen(s);
    put_le(b, l, 8);
    put(b, s, l);
}

typedef struct {
    char *name;
    uint32_t type;
    int n_dims;
    uint64_t ne[GGUF_MAX_DIMS];
    uint64_t offset, nbytes; /* relative to the data section */
} wtensor;

struct gguf_writer {
    uint32_t alignment;
    sbuf kv; /* the encoded metadata entries */
    uint64_t n_kv;
    char **keys;
    wtensor *t;
    size_t n_t, cap_t;
    uint64_t data_size; /* end of the last tensor */
    char *path, *tmp;
    int fd;
    uint64_t data_start;
    bool opened;
};

static const uint32_t VSIZE[GGUF_NTYPES] = {
    [GGUF_U8] = 1,  [GGUF_I8] = 1,   [GGUF_U16] = 2, [GGUF_I16] = 2, [GGUF_U32] = 4, [GGUF_I32] = 4,
    [GGUF_F32] = 4, [GGUF_BOOL] = 1, [GGUF_U64] = 8, [GGUF_I64] = 8, [GGUF_F64] = 8,
};

int gguf_writer_new(gguf_writer **out, uint32_t alignment, char *err) {
    *out = NULL;
    if (alignment == 0) alignment = GGUF_DEFAULT_ALIGNMENT;
    if (alignment & (alignment - 1))
        return e0_fail(err, E0_EINVAL, "GGUF alignment %u is not a power of two", alignment);
    gguf_writer *w = calloc(1, sizeof *w);
    if (!w) return e0_fail(err, E0_ENOMEM, "out of memory");
    w->alignment = alignment;
    w->fd = -1;
    int rc = 0;
    if (alignment != GGUF_DEFAULT_ALIGNMENT)
        rc = gguf_writer_add_u32(w, "general.alignment", alignment, err);
    if (rc)
        gguf_writer_free(w);
    else
        *out = w;
    return rc;
}

void gguf_writer_free(gguf_writer *w) {
    if (!w) return;
    if (w->fd >= 0) {
        close(w->fd);
        unlink(w->tmp); /* not finished: leave nothing behind */
    }
    for (uint64_t i = 0; i < w->n_kv; i++)
        free(w->keys[i]);
    free(w->keys);
    for (size_t i = 0; i < w->n_t; i++)
        free(w->t[i].name);
    free(w->t);
    free(w->kv.p);
    free(w->path);
    free(w->tmp);
    free(w);
}

/* Starts an entry: checks that the writer is still open for metadata and
 * that the key is new, then writes the key and the type. */
static int kv_begin(gguf_writer *w, const char *key, uint32_t type, char *err) {
    if (w->opened)
        return e0_fail(err, E0_EINVAL, "%s: key %s added after the header was written", w->path,
                       key);
    if (!key[0]) return e0_fail(err, E0_EINVAL, "GGUF writer: empty key");
    for (uint64_t i = 0; i < w->n_kv; i++)
        if (strcmp(w->keys[i], key) == 0)
            return e0_fail(err, E0_EINVAL, "GGUF writer: key %s added twice", key);
    char **nk = realloc(w->keys, (w->n_kv + 1) * sizeof *nk);
    if (!nk) return e0_fail(err, E0_ENOMEM, "out of memory");
    w->keys = nk;
    if (!(w->keys[w->n_kv] = strdup(key))) return e0_fail(err, E0_ENOMEM, "out of memory");
    w->n_kv++;
    put_str(&w->kv, key);
    put_le(&w->kv, type, 4);
    return 0;
}

static int kv_end(gguf_writer *w, char *err) {
    return w->kv.oom ? e0_fail(err, E0_ENOMEM, "out of memory") : 0;
}

int gguf_writer_add_scalar(gguf_writer *w, const char *key, gguf_vtype type, const void *v,
                           char *err) {
    if ((unsigned)type >= GGUF_NTYPES || type == GGUF_ARRAY)
        return e0_fail(err, E0_EINVAL, "GGUF writer: key %s: %s is not a scalar type", key,
                       gguf_vtype_name(type));
    int rc = kv_begin(w, key, type, err);
    if (rc) return rc;
    if (type == GGUF_STRING) {
        put_str(&w->kv, *(const char *const *)v);
    } else {
        uint64_t x = 0;
        memcpy(&x, v, VSIZE[type]); /* little-endian host: the low bytes */
        put_le(&w->kv, x, VSIZE[type]);
    }
    return kv_end(w, err);
}

int gguf_writer_add_u32(gguf_writer *w, const char *key, uint32_t v, char *err) {
    return gguf_writer_add_scalar(w, key, GGUF_U32, &v, err);
}
int gguf_writer_add_i32(gguf_writer *w, const char *key, int32_t v, char *err) {
    return gguf_writer_add_scalar(w, key, GGUF_I32, &v, err);
}
int gguf_writer_add_u64(gguf_writer *w, const char *key, uint64_t v, char *err) {
    return gguf_writer_add_scalar(w, key, GGUF_U64, &v, err);
}
int gguf_writer_add_f32(gguf_writer *w, const char *key, float v, char *err) {
    return gguf_writer_add_scalar(w, key, GGUF_F32, &v, err);
}
int gguf_writer_add_bool(gguf_writer *w, const char *key, bool v, char *err) {
    uint8_t b = v;
    return gguf_writer_add_scalar(w, key, GGUF_BOOL, &b, err);
}
int gguf_writer_add_str(gguf_writer *w, const char *key, const char *v, char *err) {
    return gguf_writer_add_scalar(w, key, GGUF_STRING, &v, err);
}

int gguf_writer_add_arr(gguf_writer *w, const char *key, gguf_vtype elem, const void *data,
                        uint64_t n, char *err) {
    if ((unsigned)elem >= GGUF_NTYPES || elem == GGUF_ARRAY || elem == GGUF_STRING)
        return e0_fail(err, E0_EINVAL, "GGUF writer: key %s: arrays of %s go through %s", key,
                       gguf_vtype_name(elem),
                       elem == GGUF_STRING ? "gguf_writer_add_arr_str" : "nothing (unsupported)");
    int rc = kv_begin(w, key, GGUF_ARRAY, err);
    if (rc) return rc;
    put_le(&w->kv, elem, 4);
    put_le(&w->kv, n, 8);
    put(&w->kv, data, n * VSIZE[elem]);
    return kv_end(w, err);
}

int gguf_writer_add_arr_str(gguf_writer *w, const char *key, const char *const *v, uint64_t n,
                            char *err) {
    int rc = kv_begin(w, key, GGUF_ARRAY, err);
    if (rc) return rc;
    put_le(&w->kv, GGUF_STRING, 4);
    put_le(&w->kv, n, 8);
    for (uint64_t i = 0; i < n; i++)
        put_str(&w->kv, v[i]);
    return kv_end(w, err);
}

int gguf_writer_add_tensor(gguf_writer *w, const char *name, uint32_t gtype, int n_dims,
                           const uint64_t *ne, char *err) {
    if (w->opened)
        return e0_fail(err, E0_EINVAL, "%s: tensor %s added after the header was written", w->path,
                       name);
    const ggml_type_info *ti = ggml_info(gtype);
    if (!ti)
        return e0_fail(err, E0_EINVAL, "GGUF writer: tensor %s: unknown ggml type %u", name, gtype);
    if (n_dims < 1 || n_dims > GGUF_MAX_DIMS)
        return e0_fail(err, E0_EINVAL, "GGUF writer: tensor %s: %d dimensions", name, n_dims);
    for (size_t i = 0; i < w->n_t; i++)
        if (strcmp(w->t[i].name, name) == 0)
            return e0_fail(err, E0_EINVAL, "GGUF writer: tensor %s added twice", name);
    uint64_t rows = 1, row = ggml_row_bytes(gtype, ne[0]), nbytes;
    for (int d = 1; d < n_dims; d++)
        rows *= ne[d];
    if (!row || __builtin_mul_overflow(rows, row, &nbytes))
        return e0_fail(err, E0_EINVAL,
                       "GGUF writer: tensor %s: ne[0] = %" PRIu64 " is not a multiple of the %s "
                       "block size %d",
                       name, ne[0], ti->name, ti->blck);
    if (arr_reserve((void **)&w->t, &w->cap_t, w->n_t + 1, sizeof *w->t))
        return e0_fail(err, E0_ENOMEM, "out of memory");
    wtensor *t = &w->t[w->n_t];
    memset(t, 0, sizeof *t);
    if (!(t->name = strdup(name))) return e0_fail(err, E0_ENOMEM, "out of memory");
    w->n_t++;
    t->type = gtype;
    t->n_dims = n_dims;
    for (int d = 0; d < n_dims; d++)
        t->ne[d] = ne[d];
    const uint64_t a = w->alignment;
    t->offset = (w->data_size + a - 1) / a * a;
    t->nbytes = nbytes;
    w->data_size = t->offset + nbytes;
    return 0;
}

static int write_at(gguf_writer *w, uint64_t off, const void *p, size_t len, char *err) {
    const uint8_t *q = p;
    while (len) {
        ssize_t r = pwrite(w->fd, q, len > (1u << 30) ? (1u << 30) : len, (off_t)off);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0)
            return e0_fail(err, E0_EIO, "%s: write at %" PRIu64 " failed: %s", w->tmp, off,
                           r < 0 ? strerror(errno) : "no progress");
        q += r;
        off += (uint64_t)r;
        len -= (size_t)r;
    }
    return 0;
}

int gguf_writer_open(gguf_writer *w, const char *path, char *err) {
    if (w->opened) return e0_fail(err, E0_EINVAL, "%s: GGUF writer already opened", path);
    sbuf h = {0};
    put(&h, "GGUF", 4);
    put_le(&h, 3, 4);
    put_le(&h, w->n_t, 8);
    put_le(&h, w->n_kv, 8);
    put(&h, w->kv.p, w->kv.n);
    for (size_t i = 0; i < w->n_t; i++) {
        const wtensor *t = &w->t[i];
        put_str(&h, t->name);
        put_le(&h, (uint64_t)t->n_dims, 4);
        for (int d = 0; d < t->n_dims; d++)
            put_le(&h, t->ne[d], 8);
        put_le(&h, t->type, 4);
        put_le(&h, t->offset, 8);
    }
    const uint64_t a = w->alignment;
    w->data_start = (h.n + a - 1) / a * a;
    static const uint8_t zero[256];
    while (h.n < w->data_start)
        put(&h, zero, w->data_start - h.n < sizeof zero ? w->data_start - h.n : sizeof zero);
    int rc = 0;
    size_t tl = strlen(path) + 5;
    if (h.oom || !(w->path = strdup(path)) || !(w->tmp = malloc(tl))) {
        rc = e0_fail(err, E0_ENOMEM, "out of memory");
        goto done;
    }
    snprintf(w->tmp, tl, "%s.tmp", path);
    w->fd = open(w->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (w->fd < 0) {
        rc = e0_fail(err, E0_EIO, "%s: cannot create: %s", w->tmp, strerror(errno));
        goto done;
    }
    w->opened = true;
    rc = write_at(w, 0, h.p, h.n, err);
done:
    free(h.p);
    return rc;
}

uint64_t gguf_writer_tensor_offset(const gguf_writer *w, size_t i) {
    return i < w->n_t ? w->data_start + w->t[i].offset : 0;
}
uint64_t gguf_writer_tensor_bytes(const gguf_writer *w, size_t i) {
    return i < w->n_t ? w->t[i].nbytes : 0;
}

/* Only the data section: the header is written once, by open. */
int gguf_writer_pwrite(gguf_writer *w, uint64_t off, const void *p, size_t len, char *err) {
    if (w->fd < 0) return e0_fail(err, E0_EINVAL, "GGUF writer: write before open or after finish");
    const uint64_t end = w->data_start + w->data_size;
    if (off < w->data_start || off > end || len > end - off)
        return e0_fail(err, E0_ERANGE,
                       "%s: write of %zu bytes at %" PRIu64 " is outside the data section [%" PRIu64
                       ", %" PRIu64 ")",
                       w->tmp, len, off, w->data_start, end);
    return write_at(w, off, p, len, err);
}

int gguf_writer_sync(gguf_writer *w, char *err) {
    if (w->fd < 0) return e0_fail(err, E0_EINVAL, "GGUF writer: sync before open or after finish");
    /* size first, so the synced file is the finished one */
    if (ftruncate(w->fd, (off_t)(w->data_start + w->data_size)) != 0 || fsync(w->fd) != 0)
        return e0_fail(err, E0_EIO, "%s: fsync failed: %s", w->tmp, strerror(errno));
    return 0;
}

int gguf_writer_finish(gguf_writer *w, char *err) {
    if (w->fd < 0) return e0_fail(err, E0_EINVAL, "GGUF writer: finish before open");
    /* the file ends at the last tensor; ftruncate zero-fills any gap */
    int ok = ftruncate(w->fd, (off_t)(w->data_start + w->data_size)) == 0;
    int e = errno;
    if (close(w->fd) != 0 && ok) {
        ok = 0;
        e = errno;
    }
    w->fd = -1;
    if (ok && rename(w->tmp, w->path) != 0) {
        ok = 0;
        e = errno;
    }
    if (!ok) {
        unlink(w->tmp);
        return e0_fail(err, E0_EIO, "%s: write failed: %s", w->path, strerror(e));
    }
    return 0;
}

uint64_t gguf_writer_size(const gguf_writer *w) {
    if (w->opened) return w->data_start + w->data_size;
    /* as gguf_writer_open will lay it out */
    uint64_t h = 24 + w->kv.n;
    for (size_t i = 0; i < w->n_t; i++)
        h += 8 + strlen(w->t[i].name) + 4 + 8 * (uint64_t)w->t[i].n_dims + 4 + 8;
    const uint64_t a = w->alignment;
    return (h + a - 1) / a * a + w->data_size;
}
