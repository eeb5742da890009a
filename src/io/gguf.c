/* GGUF reader: the header parser, metadata getters, and GGUF files as an
 * st_set. See gguf.h for the format and the checks. */
#include "io/gguf.h"

#include "io/st_internal.h"
#include "quant/ggml.h"
#include "util/arr.h"
#include "util/err.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The smallest encodings, used to cap counts read from the file by what
 * the rest of the buffer could hold: a kv is a key length (8), a 1-byte
 * key, a type (4) and a 1-byte value; a tensor info is a name length (8),
 * a 1-byte name, n_dims (4), no ne, a type (4) and an offset (8). */
#define KV_MIN_BYTES     14u
#define TENSOR_MIN_BYTES 25u

static const struct {
    const char *name;
    uint32_t size; /* bytes of one value; 0 for string and array */
} VTYPES[GGUF_NTYPES] = {
    [GGUF_U8] = {"u8", 1},       [GGUF_I8] = {"i8", 1},     [GGUF_U16] = {"u16", 2},
    [GGUF_I16] = {"i16", 2},     [GGUF_U32] = {"u32", 4},   [GGUF_I32] = {"i32", 4},
    [GGUF_F32] = {"f32", 4},     [GGUF_BOOL] = {"bool", 1}, [GGUF_STRING] = {"string", 0},
    [GGUF_ARRAY] = {"array", 0}, [GGUF_U64] = {"u64", 8},   [GGUF_I64] = {"i64", 8},
    [GGUF_F64] = {"f64", 8},
};

const char *gguf_vtype_name(uint32_t t) {
    return t < GGUF_NTYPES ? VTYPES[t].name : "?";
}

typedef struct {
    char *key;
    uint32_t type;      /* gguf_vtype */
    uint32_t elem;      /* arrays: element type */
    uint64_t n;         /* arrays: length */
    const uint8_t *raw; /* scalars and numeric arrays: the value bytes in the buffer */
    char *str;          /* strings: NUL-terminated copy */
    gguf_str *strs;     /* string arrays: [n] views into the buffer */
} gguf_kv;

struct gguf_file {
    char *fname;
    uint32_t version, alignment;
    uint64_t data_start;
    gguf_kv *kv;
    size_t n_kv;
    uint32_t *kslots; /* open addressing: kv index + 1 */
    size_t nkslots;
    gguf_tensor_info *t;
    size_t n_t;
    uint32_t *tslots; /* open addressing: tensor index + 1 */
    size_t ntslots;
};

/* ---- bounds-checked cursor ----------------------------------------------- */

typedef struct {
    const uint8_t *p;
    uint64_t len, pos;
    const char *fname;
    char *err;
} cursor;

static uint64_t cur_left(const cursor *c) {
    return c->len - c->pos;
}

/* `what` names the field being read, e.g. "key general.name: value". */
static int cur_need(cursor *c, uint64_t n, const char *what) {
    if (n <= cur_left(c)) return 0;
    return e0_fail(c->err, E0_EFORMAT,
                   "%s: %s: needs %" PRIu64 " bytes at offset %" PRIu64 " but only %" PRIu64
                   " remain (truncated header or length out of range)",
                   c->fname, what, n, c->pos, cur_left(c));
}

static uint64_t rd_le(const uint8_t *p, unsigned n) {
    uint64_t v = 0;
    for (unsigned i = n; i-- > 0;)
        v = v << 8 | p[i];
    return v;
}

static int cur_u32(cursor *c, uint32_t *v, const char *what) {
    int rc = cur_need(c, 4, what);
    if (rc) return rc;
    *v = (uint32_t)rd_le(c->p + c->pos, 4);
    c->pos += 4;
    return 0;
}

static int cur_u64(cursor *c, uint64_t *v, const char *what) {
    int rc = cur_need(c, 8, what);
    if (rc) return rc;
    *v = rd_le(c->p + c->pos, 8);
    c->pos += 8;
    return 0;
}

/* A string: u64 length + bytes, as a view. */
static int cur_str(cursor *c, gguf_str *s, const char *what) {
    uint64_t n;
    int rc = cur_u64(c, &n, what);
    if (rc) return rc;
    if ((rc = cur_need(c, n, what))) return rc;
    s->p = (const char *)c->p + c->pos;
    s->len = n;
    c->pos += n;
    return 0;
}

static char *str_dup(gguf_str s) {
    char *d = malloc(s.len + 1);
    if (d) {
        memcpy(d, s.p, s.len);
        d[s.len] = 0;
    }
    return d;
}

/* ---- hash tables ------------------------------------------------------- */

static uint64_t hash_str(const char *s) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}

static size_t slots_for(size_t n) {
    size_t k = 16;
    while (k < 2 * n)
        k <<= 1;
    return k;
}

/* Inserts name `i` (names(i) gives it); returns the index of an equal name
 * already there, or -1. */
static long table_insert(uint32_t *slots, size_t nslots, const char *name, size_t i,
                         const char *(*get)(const void *, size_t), const void *ctx) {
    size_t k = hash_str(name) & (nslots - 1);
    for (; slots[k]; k = (k + 1) & (nslots - 1))
        if (strcmp(get(ctx, slots[k] - 1), name) == 0) return (long)slots[k] - 1;
    slots[k] = (uint32_t)i + 1;
    return -1;
}

static long table_find(const uint32_t *slots, size_t nslots, const char *name,
                       const char *(*get)(const void *, size_t), const void *ctx) {
    if (!nslots) return -1;
    for (size_t k = hash_str(name) & (nslots - 1); slots[k]; k = (k + 1) & (nslots - 1))
        if (strcmp(get(ctx, slots[k] - 1), name) == 0) return (long)slots[k] - 1;
    return -1;
}

static const char *kv_name(const void *g, size_t i) {
    return ((const gguf_file *)g)->kv[i].key;
}
static const char *t_name(const void *g, size_t i) {
    return ((const gguf_file *)g)->t[i].name;
}

/* ---- parsing ------------------------------------------------------------ */

void gguf_free(gguf_file *g) {
    if (!g) return;
    for (size_t i = 0; i < g->n_kv; i++) {
        free(g->kv[i].key);
        free(g->kv[i].str);
        free(g->kv[i].strs);
    }
    for (size_t i = 0; i < g->n_t; i++)
        free((char *)g->t[i].name);
    free(g->kv);
    free(g->t);
    free(g->kslots);
    free(g->tslots);
    free(g->fname);
    free(g);
}

/* Grows *arr (of `size`-byte items) so that index `n` fits, the new items
 * zeroed: gguf_free frees what the first n_kv / n_t entries point to, and
 * an entry whose reading failed halfway is among them. */
static int grow(void **arr, size_t *cap, size_t n, size_t size) {
    const size_t old = *cap;
    if (arr_reserve(arr, cap, n + 1, size)) return E0_ENOMEM;
    memset((char *)*arr + old * size, 0, (*cap - old) * size);
    return 0;
}

/* A key or tensor name: non-empty, no NUL inside (names are C strings here). */
static int read_name(cursor *c, char **out, const char *kind, size_t idx) {
    char what[64];
    snprintf(what, sizeof what, "%s #%zu: name", kind, idx);
    gguf_str s;
    int rc = cur_str(c, &s, what);
    if (rc) return rc;
    if (s.len == 0)
        return e0_fail(c->err, E0_EFORMAT, "%s: %s #%zu has an empty name", c->fname, kind, idx);
    if (memchr(s.p, 0, s.len))
        return e0_fail(c->err, E0_EFORMAT, "%s: %s #%zu: name contains a NUL byte", c->fname, kind,
                       idx);
    if (!(*out = str_dup(s))) return e0_fail(c->err, E0_ENOMEM, "%s: out of memory", c->fname);
    return 0;
}

static int read_value(cursor *c, gguf_kv *kv) {
    char what[320];
    snprintf(what, sizeof what, "key %.256s: value", kv->key);
    if (kv->type >= GGUF_NTYPES)
        return e0_fail(c->err, E0_EFORMAT, "%s: key %s: unknown value type %u", c->fname, kv->key,
                       kv->type);
    int rc;
    if (kv->type == GGUF_STRING) {
        gguf_str s;
        if ((rc = cur_str(c, &s, what))) return rc;
        if (!(kv->str = str_dup(s)))
            return e0_fail(c->err, E0_ENOMEM, "%s: out of memory", c->fname);
        return 0;
    }
    if (kv->type != GGUF_ARRAY) {
        if ((rc = cur_need(c, VTYPES[kv->type].size, what))) return rc;
        kv->raw = c->p + c->pos;
        c->pos += VTYPES[kv->type].size;
        return 0;
    }
    if ((rc = cur_u32(c, &kv->elem, what)) || (rc = cur_u64(c, &kv->n, what))) return rc;
    if (kv->elem == GGUF_ARRAY)
        return e0_fail(c->err, E0_EFORMAT, "%s: key %s: nested arrays are not supported", c->fname,
                       kv->key);
    if (kv->elem >= GGUF_NTYPES)
        return e0_fail(c->err, E0_EFORMAT, "%s: key %s: unknown array element type %u", c->fname,
                       kv->key, kv->elem);
    if (kv->elem != GGUF_STRING) {
        const uint64_t es = VTYPES[kv->elem].size;
        if (kv->n > cur_left(c) / es)
            return e0_fail(c->err, E0_EFORMAT,
                           "%s: key %s: array of %" PRIu64 " %s runs past the end of the header "
                           "(%" PRIu64 " bytes left)",
                           c->fname, kv->key, kv->n, VTYPES[kv->elem].name, cur_left(c));
        kv->raw = c->p + c->pos;
        c->pos += kv->n * es;
        return 0;
    }
    /* every string takes at least its 8-byte length */
    if (kv->n > cur_left(c) / 8)
        return e0_fail(c->err, E0_EFORMAT,
                       "%s: key %s: array of %" PRIu64 " strings cannot fit in the %" PRIu64
                       " header bytes left",
                       c->fname, kv->key, kv->n, cur_left(c));
    if (!(kv->strs = malloc((kv->n ? kv->n : 1) * sizeof *kv->strs)))
        return e0_fail(c->err, E0_ENOMEM, "%s: out of memory", c->fname);
    for (uint64_t i = 0; i < kv->n; i++) {
        snprintf(what, sizeof what, "key %.256s: string %" PRIu64, kv->key, i);
        if ((rc = cur_str(c, &kv->strs[i], what))) return rc;
    }
    return 0;
}

static int read_kvs(gguf_file *g, cursor *c, uint64_t n_kv) {
    if (n_kv > cur_left(c) / KV_MIN_BYTES)
        return e0_fail(c->err, E0_EFORMAT,
                       "%s: %" PRIu64 " metadata entries cannot fit in the %" PRIu64
                       " header bytes left",
                       g->fname, n_kv, cur_left(c));
    size_t cap = 0;
    for (uint64_t i = 0; i < n_kv; i++) {
        if (grow((void **)&g->kv, &cap, g->n_kv, sizeof *g->kv))
            return e0_fail(c->err, E0_ENOMEM, "%s: out of memory", g->fname);
        gguf_kv *kv = &g->kv[g->n_kv];
        int rc = read_name(c, &kv->key, "metadata key", (size_t)i);
        if (rc) return rc;
        g->n_kv++;
        char what[320];
        snprintf(what, sizeof what, "key %.256s: type", kv->key);
        if ((rc = cur_u32(c, &kv->type, what)) || (rc = read_value(c, kv))) return rc;
    }
    g->nkslots = slots_for(g->n_kv);
    if (!(g->kslots = calloc(g->nkslots, sizeof *g->kslots)))
        return e0_fail(c->err, E0_ENOMEM, "%s: out of memory", g->fname);
    for (size_t i = 0; i < g->n_kv; i++)
        if (table_insert(g->kslots, g->nkslots, g->kv[i].key, i, kv_name, g) >= 0)
            return e0_fail(c->err, E0_EFORMAT, "%s: key %s appears twice", g->fname, g->kv[i].key);
    return 0;
}

static int read_tensor(gguf_file *g, cursor *c, gguf_tensor_info *t) {
    char what[320];
    snprintf(what, sizeof what, "tensor %.256s", t->name);
    int rc = cur_u32(c, &t->n_dims, what);
    if (rc) return rc;
    if (t->n_dims > GGUF_MAX_DIMS)
        return e0_fail(c->err, E0_EFORMAT, "%s: tensor %s has %u dimensions (at most %d)", g->fname,
                       t->name, t->n_dims, GGUF_MAX_DIMS);
    uint64_t numel = 1;
    for (int d = 0; d < GGUF_MAX_DIMS; d++)
        t->ne[d] = 1;
    for (uint32_t d = 0; d < t->n_dims; d++) {
        if ((rc = cur_u64(c, &t->ne[d], what))) return rc;
        if ((int64_t)t->ne[d] < 1)
            return e0_fail(c->err, E0_EFORMAT,
                           "%s: tensor %s: dimension %u is %" PRId64 " (must be at least 1)",
                           g->fname, t->name, d, (int64_t)t->ne[d]);
        if (__builtin_mul_overflow(numel, t->ne[d], &numel) || numel > (uint64_t)INT64_MAX)
            return e0_fail(c->err, E0_EFORMAT, "%s: tensor %s: element count overflows", g->fname,
                           t->name);
    }
    if ((rc = cur_u32(c, &t->type, what)) || (rc = cur_u64(c, &t->offset, what))) return rc;
    const ggml_type_info *ti = ggml_info(t->type);
    if (!ti)
        return e0_fail(c->err, E0_EFORMAT,
                       "%s: tensor %s: ggml type %u is unknown (not in quant/ggml.h, or removed "
                       "from ggml)",
                       g->fname, t->name, t->type);
    const uint64_t row = ggml_row_bytes(t->type, t->ne[0]);
    if (!row)
        return e0_fail(c->err, E0_EFORMAT,
                       "%s: tensor %s: row length ne[0] = %" PRIu64
                       " is not a multiple of the %s block size %d",
                       g->fname, t->name, t->ne[0], ti->name, ti->blck);
    if (__builtin_mul_overflow(numel / t->ne[0], row, &t->nbytes))
        return e0_fail(c->err, E0_EFORMAT, "%s: tensor %s: byte size overflows", g->fname, t->name);
    return 0;
}

static int cmp_off(const void *a, const void *b) {
    const gguf_tensor_info *x = *(const gguf_tensor_info *const *)a;
    const gguf_tensor_info *y = *(const gguf_tensor_info *const *)b;
    if (x->offset != y->offset) return x->offset < y->offset ? -1 : 1;
    return x->nbytes < y->nbytes ? -1 : x->nbytes > y->nbytes;
}

/* Offsets aligned, data inside the file, no overlap. */
static int check_layout(gguf_file *g, uint64_t file_size, char *err) {
    if (g->n_t == 0) return 0;
    if (g->data_start > file_size)
        return e0_fail(err, E0_EFORMAT,
                       "%s: the file ends at byte %" PRIu64 ", before its data section (at %" PRIu64
                       "); tensor %s has no data (truncated file)",
                       g->fname, file_size, g->data_start, g->t[0].name);
    const uint64_t data_size = file_size - g->data_start;
    for (size_t i = 0; i < g->n_t; i++) {
        const gguf_tensor_info *t = &g->t[i];
        if (t->offset % g->alignment)
            return e0_fail(err, E0_EFORMAT,
                           "%s: tensor %s: offset %" PRIu64
                           " is not a multiple of the alignment %u",
                           g->fname, t->name, t->offset, g->alignment);
        if (t->offset > data_size || t->nbytes > data_size - t->offset)
            return e0_fail(err, E0_EFORMAT,
                           "%s: tensor %s: data [%" PRIu64 ", +%" PRIu64 ") runs past the end of "
                           "the file (the data section holds %" PRIu64 " bytes: truncated file or "
                           "offset out of range)",
                           g->fname, t->name, t->offset, t->nbytes, data_size);
    }
    const gguf_tensor_info **order = malloc(g->n_t * sizeof *order);
    if (!order) return e0_fail(err, E0_ENOMEM, "%s: out of memory", g->fname);
    for (size_t i = 0; i < g->n_t; i++)
        order[i] = &g->t[i];
    qsort(order, g->n_t, sizeof *order, cmp_off);
    int rc = 0;
    for (size_t i = 1; i < g->n_t && !rc; i++)
        if (order[i]->offset < order[i - 1]->offset + order[i - 1]->nbytes)
            rc = e0_fail(err, E0_EFORMAT, "%s: tensors %s and %s overlap in the data section",
                         g->fname, order[i - 1]->name, order[i]->name);
    free(order);
    return rc;
}

static int read_tensors(gguf_file *g, cursor *c, uint64_t n_t) {
    if (n_t > cur_left(c) / TENSOR_MIN_BYTES)
        return e0_fail(c->err, E0_EFORMAT,
                       "%s: %" PRIu64 " tensor infos cannot fit in the %" PRIu64
                       " header bytes left",
                       g->fname, n_t, cur_left(c));
    size_t cap = 0;
    for (uint64_t i = 0; i < n_t; i++) {
        if (grow((void **)&g->t, &cap, g->n_t, sizeof *g->t))
            return e0_fail(c->err, E0_ENOMEM, "%s: out of memory", g->fname);
        gguf_tensor_info *t = &g->t[g->n_t];
        char *name = NULL;
        int rc = read_name(c, &name, "tensor", (size_t)i);
        if (rc) return rc;
        t->name = name;
        g->n_t++;
        if ((rc = read_tensor(g, c, t))) return rc;
    }
    g->ntslots = slots_for(g->n_t);
    if (!(g->tslots = calloc(g->ntslots, sizeof *g->tslots)))
        return e0_fail(c->err, E0_ENOMEM, "%s: out of memory", g->fname);
    for (size_t i = 0; i < g->n_t; i++)
        if (table_insert(g->tslots, g->ntslots, g->t[i].name, i, t_name, g) >= 0)
            return e0_fail(c->err, E0_EFORMAT, "%s: tensor %s appears twice", g->fname,
                           g->t[i].name);
    return 0;
}

int gguf_parse(gguf_file **out, const uint8_t *buf, size_t buf_len, uint64_t file_size,
               const char *fname, char *err) {
    *out = NULL;
    gguf_file *g = calloc(1, sizeof *g);
    if (!g || !(g->fname = strdup(fname))) {
        free(g);
        return e0_fail(err, E0_ENOMEM, "%s: out of memory", fname);
    }
    cursor c = {buf, buf_len < file_size ? buf_len : file_size, 0, fname, err};
    int rc = 0;
    uint64_t n_t = 0, n_kv = 0;
    if (c.len < 4 || memcmp(buf, "GGUF", 4) != 0) {
        if (c.len < 4)
            rc =
                e0_fail(err, E0_EFORMAT, "%s: file too short for a GGUF header (%" PRIu64 " bytes)",
                        fname, file_size);
        else
            rc = e0_fail(err, E0_EFORMAT,
                         "%s: not a GGUF file (magic %02x %02x %02x %02x, want \"GGUF\")", fname,
                         buf[0], buf[1], buf[2], buf[3]);
        goto done;
    }
    c.pos = 4;
    if ((rc = cur_u32(&c, &g->version, "version"))) goto done;
    if (g->version == 1) {
        rc = e0_fail(err, E0_EUNSUPPORTED,
                     "%s: GGUF version 1 is not supported (it stored 32-bit counts; convert the "
                     "model again with a current llama.cpp)",
                     fname);
        goto done;
    }
    if (g->version != 2 && g->version != 3) {
        rc = e0_fail(err, E0_EUNSUPPORTED,
                     "%s: GGUF version %u is not supported (2 and 3 are; a big-endian file "
                     "reads as a huge version)",
                     fname, g->version);
        goto done;
    }
    if ((rc = cur_u64(&c, &n_t, "tensor count")) || (rc = cur_u64(&c, &n_kv, "metadata count")) ||
        (rc = read_kvs(g, &c, n_kv)))
        goto done;
    g->alignment = GGUF_DEFAULT_ALIGNMENT;
    if (gguf_has(g, "general.alignment")) {
        if ((rc = gguf_get_u32(g, "general.alignment", &g->alignment, err))) goto done;
        if (g->alignment == 0 || (g->alignment & (g->alignment - 1))) {
            rc = e0_fail(err, E0_EFORMAT, "%s: key general.alignment: %u is not a power of two",
                         fname, g->alignment);
            goto done;
        }
    }
    if ((rc = read_tensors(g, &c, n_t))) goto done;
    g->data_start = (c.pos + g->alignment - 1) / g->alignment * g->alignment;
    rc = check_layout(g, file_size, err);
done:
    if (rc) {
        gguf_free(g);
        return rc;
    }
    *out = g;
    return 0;
}

/* ---- accessors ---------------------------------------------------------- */

const char *gguf_fname(const gguf_file *g) {
    return g->fname;
}
uint32_t gguf_version(const gguf_file *g) {
    return g->version;
}
uint32_t gguf_alignment(const gguf_file *g) {
    return g->alignment;
}
uint64_t gguf_data_start(const gguf_file *g) {
    return g->data_start;
}
size_t gguf_n_tensors(const gguf_file *g) {
    return g->n_t;
}
const gguf_tensor_info *gguf_tensor_at(const gguf_file *g, size_t i) {
    return i < g->n_t ? &g->t[i] : NULL;
}
const gguf_tensor_info *gguf_tensor_find(const gguf_file *g, const char *name) {
    long i = table_find(g->tslots, g->ntslots, name, t_name, g);
    return i < 0 ? NULL : &g->t[i];
}
size_t gguf_n_kv(const gguf_file *g) {
    return g->n_kv;
}
const char *gguf_key_at(const gguf_file *g, size_t i) {
    return i < g->n_kv ? g->kv[i].key : NULL;
}

static const gguf_kv *kv_find(const gguf_file *g, const char *key) {
    long i = table_find(g->kslots, g->nkslots, key, kv_name, g);
    return i < 0 ? NULL : &g->kv[i];
}

bool gguf_has(const gguf_file *g, const char *key) {
    return kv_find(g, key) != NULL;
}
int gguf_type(const gguf_file *g, const char *key) {
    const gguf_kv *kv = kv_find(g, key);
    return kv ? (int)kv->type : -1;
}

/* One number read from the file, whatever its type. */
typedef struct {
    enum { NUM_U, NUM_I, NUM_F, NUM_B } kind;
    uint64_t u;
    int64_t i;
    double f;
} num;

static num num_read(uint32_t type, const uint8_t *p) {
    num n = {NUM_U, 0, 0, 0};
    uint64_t v = rd_le(p, VTYPES[type].size);
    switch (type) {
    case GGUF_U8:
    case GGUF_U16:
    case GGUF_U32:
    case GGUF_U64:
        n.u = v;
        break;
    case GGUF_I8:
        n.kind = NUM_I;
        n.i = (int8_t)v;
        break;
    case GGUF_I16:
        n.kind = NUM_I;
        n.i = (int16_t)v;
        break;
    case GGUF_I32:
        n.kind = NUM_I;
        n.i = (int32_t)v;
        break;
    case GGUF_I64:
        n.kind = NUM_I;
        n.i = (int64_t)v;
        break;
    case GGUF_F32: {
        uint32_t b = (uint32_t)v;
        float f;
        memcpy(&f, &b, 4);
        n.kind = NUM_F;
        n.f = f;
        break;
    }
    case GGUF_F64:
        memcpy(&n.f, &v, 8);
        n.kind = NUM_F;
        break;
    default:
        n.kind = NUM_B;
        n.u = v != 0;
        break; /* GGUF_BOOL */
    }
    return n;
}

/* Looks up a scalar (or element i of an array, when arr) of a numeric or
 * bool type. */
static int get_num(const gguf_file *g, const char *key, bool arr, uint64_t i, num *out, char *err) {
    const gguf_kv *kv = kv_find(g, key);
    if (!kv) return e0_fail(err, E0_ENOTFOUND, "%s: key %s is missing", g->fname, key);
    uint32_t t = arr ? kv->elem : kv->type;
    if (arr != (kv->type == GGUF_ARRAY))
        return e0_fail(err, E0_EFORMAT, "%s: key %s is %s%s, not %s", g->fname, key,
                       kv->type == GGUF_ARRAY ? "an array of " : "a ",
                       gguf_vtype_name(kv->type == GGUF_ARRAY ? kv->elem : kv->type),
                       arr ? "an array" : "a single value");
    if (t == GGUF_STRING || t == GGUF_ARRAY)
        return e0_fail(err, E0_EFORMAT, "%s: key %s holds %s, not numbers", g->fname, key,
                       arr ? "strings" : "a string");
    if (arr && i >= kv->n)
        return e0_fail(err, E0_ERANGE,
                       "%s: key %s: index %" PRIu64 " past the array's %" PRIu64 " elements",
                       g->fname, key, i, kv->n);
    *out = num_read(t, kv->raw + (arr ? i * VTYPES[t].size : 0));
    return 0;
}

static int num_int(const gguf_file *g, const char *key, num n, int64_t lo, uint64_t hi, uint64_t *u,
                   int64_t *s, char *err) {
    if (n.kind == NUM_F || n.kind == NUM_B)
        return e0_fail(err, E0_EFORMAT, "%s: key %s is a %s, not an integer", g->fname, key,
                       n.kind == NUM_F ? "float" : "bool");
    bool ok = n.kind == NUM_U ? n.u <= hi : n.i >= lo && (n.i < 0 || (uint64_t)n.i <= hi);
    if (!ok) {
        if (n.kind == NUM_U)
            return e0_fail(err, E0_ERANGE, "%s: key %s: %" PRIu64 " is out of range", g->fname, key,
                           n.u);
        return e0_fail(err, E0_ERANGE, "%s: key %s: %" PRId64 " is out of range", g->fname, key,
                       n.i);
    }
    if (u) *u = n.kind == NUM_U ? n.u : (uint64_t)n.i;
    if (s) *s = n.kind == NUM_U ? (int64_t)n.u : n.i;
    return 0;
}

#define INT_GETTERS(NAME, T, LO, HI, FIELD)                                                        \
    int gguf_get_##NAME(const gguf_file *g, const char *key, T *out, char *err) {                  \
        num n;                                                                                     \
        uint64_t u;                                                                                \
        int64_t s;                                                                                 \
        int rc = get_num(g, key, false, 0, &n, err);                                               \
        if (!rc) rc = num_int(g, key, n, LO, HI, &u, &s, err);                                     \
        if (!rc) *out = (T)FIELD;                                                                  \
        return rc;                                                                                 \
    }
INT_GETTERS(u32, uint32_t, 0, UINT32_MAX, u)
INT_GETTERS(i32, int32_t, INT32_MIN, INT32_MAX, s)
INT_GETTERS(u64, uint64_t, 0, UINT64_MAX, u)
INT_GETTERS(i64, int64_t, INT64_MIN, INT64_MAX, s)

#define ARR_GETTERS(NAME, T, LO, HI, FIELD)                                                        \
    int gguf_arr_##NAME(const gguf_file *g, const char *key, uint64_t i, T *out, char *err) {      \
        num n;                                                                                     \
        uint64_t u;                                                                                \
        int64_t s;                                                                                 \
        int rc = get_num(g, key, true, i, &n, err);                                                \
        if (!rc) rc = num_int(g, key, n, LO, HI, &u, &s, err);                                     \
        if (!rc) *out = (T)FIELD;                                                                  \
        return rc;                                                                                 \
    }
ARR_GETTERS(u32, uint32_t, 0, UINT32_MAX, u)
ARR_GETTERS(i32, int32_t, INT32_MIN, INT32_MAX, s)
ARR_GETTERS(i64, int64_t, INT64_MIN, INT64_MAX, s)

static int num_f32(const gguf_file *g, const char *key, num n, float *out, char *err) {
    switch (n.kind) {
    case NUM_F:
        *out = (float)n.f;
        return 0;
    case NUM_U:
        *out = (float)n.u;
        return 0;
    case NUM_I:
        *out = (float)n.i;
        return 0;
    default:
        return e0_fail(err, E0_EFORMAT, "%s: key %s is a bool, not a number", g->fname, key);
    }
}

int gguf_get_f32(const gguf_file *g, const char *key, float *out, char *err) {
    num n;
    int rc = get_num(g, key, false, 0, &n, err);
    return rc ? rc : num_f32(g, key, n, out, err);
}

int gguf_arr_f32(const gguf_file *g, const char *key, uint64_t i, float *out, char *err) {
    num n;
    int rc = get_num(g, key, true, i, &n, err);
    return rc ? rc : num_f32(g, key, n, out, err);
}

int gguf_get_bool(const gguf_file *g, const char *key, bool *out, char *err) {
    num n;
    int rc = get_num(g, key, false, 0, &n, err);
    if (rc) return rc;
    if (n.kind != NUM_B) return e0_fail(err, E0_EFORMAT, "%s: key %s is not a bool", g->fname, key);
    *out = n.u != 0;
    return 0;
}

int gguf_get_str(const gguf_file *g, const char *key, const char **out, char *err) {
    const gguf_kv *kv = kv_find(g, key);
    if (!kv) return e0_fail(err, E0_ENOTFOUND, "%s: key %s is missing", g->fname, key);
    if (kv->type != GGUF_STRING)
        return e0_fail(err, E0_EFORMAT, "%s: key %s is %s %s, not a string", g->fname, key,
                       kv->type == GGUF_ARRAY ? "an" : "a", gguf_vtype_name(kv->type));
    *out = kv->str;
    return 0;
}

int gguf_get_arr(const gguf_file *g, const char *key, gguf_vtype *elem, uint64_t *n, char *err) {
    const gguf_kv *kv = kv_find(g, key);
    if (!kv) return e0_fail(err, E0_ENOTFOUND, "%s: key %s is missing", g->fname, key);
    if (kv->type != GGUF_ARRAY)
        return e0_fail(err, E0_EFORMAT, "%s: key %s is a %s, not an array", g->fname, key,
                       gguf_vtype_name(kv->type));
    if (elem) *elem = (gguf_vtype)kv->elem;
    if (n) *n = kv->n;
    return 0;
}

int gguf_arr_str(const gguf_file *g, const char *key, uint64_t i, gguf_str *out, char *err) {
    const gguf_kv *kv = kv_find(g, key);
    if (!kv) return e0_fail(err, E0_ENOTFOUND, "%s: key %s is missing", g->fname, key);
    if (kv->type != GGUF_ARRAY || kv->elem != GGUF_STRING)
        return e0_fail(err, E0_EFORMAT, "%s: key %s is not an array of strings", g->fname, key);
    if (i >= kv->n)
        return e0_fail(err, E0_ERANGE,
                       "%s: key %s: index %" PRIu64 " past the array's %" PRIu64 " strings",
                       g->fname, key, i, kv->n);
    *out = kv->strs[i];
    return 0;
}

/* ---- GGUF files as an st_set -------------------------------------------- */

bool gguf_is_path(const char *path) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    struct stat st;
    char m[4];
    bool ok = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && pread(fd, m, 4, 0) == 4 &&
              memcmp(m, "GGUF", 4) == 0;
    close(fd);
    return ok;
}

const gguf_file *st_gguf(const st_set *s) {
    return s && s->nfiles ? s->files[0].gguf : NULL;
}

/* llama.cpp names split parts PREFIX-%05d-of-%05d.gguf, numbered from 1
 * (gguf-split, llama_split_path). Fills the prefix length, part number and
 * count; false for another name. */
static bool split_name(const char *path, size_t *prefix, unsigned *no, unsigned *count) {
    static const char pat[] = "-#####-of-#####.gguf";
    const size_t pl = sizeof pat - 1, l = strlen(path);
    if (l <= pl) return false;
    const char *s = path + l - pl;
    unsigned a = 0, b = 0;
    for (size_t i = 0; i < pl; i++) {
        if (pat[i] == '#') {
            if (s[i] < '0' || s[i] > '9') return false;
            if (i < 6)
                a = a * 10 + (unsigned)(s[i] - '0');
            else
                b = b * 10 + (unsigned)(s[i] - '0');
        } else if (s[i] != pat[i]) {
            return false;
        }
    }
    if (a < 1 || b < 1 || a > b) return false;
    *prefix = l - pl;
    *no = a;
    *count = b;
    return true;
}

static int open_part(st_set *s, const char *path, char *err) {
    st_file *f = &s->files[s->nfiles++];
    int rc = st_file_map(f, path, err);
    if (rc) return rc;
    f->gguf_free = gguf_free;
    return gguf_parse(&f->gguf, f->map, f->size, f->size, path, err);
}

/* split.no (0-based) and split.count of part k (0-based) of n. A file
 * without split keys is a single part. */
static int check_part(const gguf_file *g, uint32_t k, uint32_t n, char *err) {
    uint32_t no = 0, count = 1;
    int rc = 0;
    if (gguf_has(g, "split.count")) rc = gguf_get_u32(g, "split.count", &count, err);
    if (!rc && gguf_has(g, "split.no")) rc = gguf_get_u32(g, "split.no", &no, err);
    if (rc) return rc;
    if (count != n || no != k)
        return e0_fail(err, E0_EFORMAT,
                       "%s: key split.no / split.count: part %u of %u, but the file name (or the "
                       "first part) makes it part %u of %u",
                       gguf_fname(g), no + 1, count, k + 1, n);
    return 0;
}

static st_dtype dtype_of(uint32_t gtype) {
    switch (gtype) {
    case GGML_F32:
        return ST_F32;
    case GGML_F16:
        return ST_F16;
    case GGML_BF16:
        return ST_BF16;
    default:
        return ST_GGML;
    }
}

static int add_tensors(st_set *s, char *err) {
    size_t n = 0;
    for (uint32_t i = 0; i < s->nfiles; i++)
        n += gguf_n_tensors(s->files[i].gguf);
    int rc = st_set_reserve(s, n, err);
    for (uint32_t fi = 0; fi < s->nfiles && !rc; fi++) {
        const st_file *f = &s->files[fi];
        const gguf_file *g = f->gguf;
        for (size_t k = 0; k < gguf_n_tensors(g) && !rc; k++) {
            const gguf_tensor_info *ti = gguf_tensor_at(g, k);
            st_tensor t = {.name = ti->name,
                           .dtype = dtype_of(ti->type),
                           .gtype = ti->type,
                           .ndim = (int)ti->n_dims,
                           .file = fi,
                           .nbytes = ti->nbytes};
            for (uint32_t d = 0; d < ti->n_dims; d++)
                t.shape[d] = ti->ne[ti->n_dims - 1 - d]; /* ne is innermost first */
            t.off = gguf_data_start(g) + ti->offset;
            t.data = f->map + t.off;
            rc = st_set_add(s, &t, err);
        }
    }
    return rc;
}

int st_set_open_gguf(st_set **out, const char *path, char *err) {
    *out = NULL;
    size_t prefix = 0;
    unsigned no = 1, count = 1;
    const bool split = split_name(path, &prefix, &no, &count) && count > 1;
    st_set *s;
    int rc = st_set_alloc(&s, count, err);
    if (rc) return rc;
    if (!split) {
        rc = open_part(s, path, err);
        if (!rc) rc = check_part(s->files[0].gguf, 0, 1, err);
    } else {
        const size_t pl = prefix + sizeof "-00000-of-00000.gguf";
        char *p = malloc(pl);
        if (!p) rc = e0_fail(err, E0_ENOMEM, "out of memory");
        for (unsigned k = 1; k <= count && !rc; k++) {
            snprintf(p, pl, "%.*s-%05u-of-%05u.gguf", (int)prefix, path, k, count);
            if (access(p, F_OK) != 0 && errno == ENOENT) {
                rc = e0_fail(err, E0_ENOTFOUND,
                             "%s: part %u of %u of the split GGUF set of %s is missing", p, k,
                             count, path);
                break;
            }
            if (!(rc = open_part(s, p, err)))
                rc = check_part(s->files[k - 1].gguf, k - 1, count, err);
        }
        free(p);
        uint32_t want = 0;
        if (!rc) rc = gguf_get_u32(s->files[0].gguf, "split.tensors.count", &want, err);
        size_t have = 0;
        for (uint32_t i = 0; i < s->nfiles && !rc; i++)
            have += gguf_n_tensors(s->files[i].gguf);
        if (!rc && have != want)
            rc = e0_fail(err, E0_EFORMAT,
                         "%s: key split.tensors.count is %u but the %u parts hold %zu tensors",
                         s->files[0].path, want, count, have);
    }
    if (!rc) rc = add_tensors(s, err);
    if (rc) {
        st_set_free(s);
        return rc;
    }
    *out = s;
    return 0;
}
