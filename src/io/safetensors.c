/* Safetensors reader/writer. See safetensors.h for the checks. */
#include "io/safetensors.h"

#include "io/st_internal.h"
#include "util/arr.h"
#include "util/err.h"
#include "util/file.h"
#include "util/sbuf.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static const struct {
    const char *name;
    size_t size;
} DTYPES[ST_NDTYPES] = {
    [ST_BOOL] = {"BOOL", 1},       [ST_U8] = {"U8", 1},           [ST_I8] = {"I8", 1},
    [ST_F8_E4M3] = {"F8_E4M3", 1}, [ST_F8_E5M2] = {"F8_E5M2", 1}, [ST_U16] = {"U16", 2},
    [ST_I16] = {"I16", 2},         [ST_F16] = {"F16", 2},         [ST_BF16] = {"BF16", 2},
    [ST_U32] = {"U32", 4},         [ST_I32] = {"I32", 4},         [ST_F32] = {"F32", 4},
    [ST_U64] = {"U64", 8},         [ST_I64] = {"I64", 8},         [ST_F64] = {"F64", 8},
    [ST_GGML] = {"GGML", 0}, /* GGUF block types: bytes per row from quant/ggml.h */
};

const char *st_dtype_name(st_dtype t) {
    return (unsigned)t < ST_NDTYPES ? DTYPES[t].name : "?";
}
size_t st_dtype_size(st_dtype t) {
    return (unsigned)t < ST_NDTYPES ? DTYPES[t].size : 0;
}

/* GGML is not a safetensors dtype: only GGUF sets have it. */
static int dtype_parse(const char *s, st_dtype *out) {
    for (int i = 0; i < ST_NDTYPES; i++)
        if (i != ST_GGML && strcmp(s, DTYPES[i].name) == 0) {
            *out = (st_dtype)i;
            return 0;
        }
    return -1;
}

/* A JSON number that is an exact non-negative integer below 2^53. */
static int json_u64(const cJSON *v, uint64_t *out) {
    if (!cJSON_IsNumber(v)) return -1;
    double d = v->valuedouble;
    if (!(d >= 0.0) || d > 9007199254740992.0 || d != (double)(uint64_t)d) return -1;
    *out = (uint64_t)d;
    return 0;
}

void st_header_free(st_header *h) {
    if (!h) return;
    for (size_t i = 0; i < h->n; i++)
        free(h->entries[i].name);
    free(h->entries);
    for (size_t i = 0; i < h->n_meta; i++)
        free(h->meta[i]);
    free(h->meta);
    memset(h, 0, sizeof *h);
}

const char *st_header_meta(const st_header *h, const char *key) {
    for (size_t i = 0; i + 1 < h->n_meta; i += 2)
        if (strcmp(h->meta[i], key) == 0) return h->meta[i + 1];
    return NULL;
}

static int cmp_begin(const void *a, const void *b) {
    const st_entry *x = *(const st_entry *const *)a, *y = *(const st_entry *const *)b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

static int cmp_name(const void *a, const void *b) {
    return strcmp((*(const st_entry *const *)a)->name, (*(const st_entry *const *)b)->name);
}

static int parse_meta(st_header *h, const cJSON *m, const char *fname, char *err) {
    if (!cJSON_IsObject(m))
        return e0_fail(err, E0_EFORMAT, "%s: __metadata__ is not an object", fname);
    size_t n = (size_t)cJSON_GetArraySize(m);
    h->meta = calloc(2 * n + 1, sizeof *h->meta);
    if (!h->meta) return e0_fail(err, E0_ENOMEM, "%s: out of memory", fname);
    const cJSON *kv;
    cJSON_ArrayForEach(kv, m) {
        if (!cJSON_IsString(kv))
            return e0_fail(err, E0_EFORMAT, "%s: __metadata__ value of \"%s\" is not a string",
                           fname, kv->string);
        h->meta[h->n_meta] = strdup(kv->string);
        h->meta[h->n_meta + 1] = strdup(kv->valuestring);
        h->n_meta += 2;
        if (!h->meta[h->n_meta - 2] || !h->meta[h->n_meta - 1])
            return e0_fail(err, E0_ENOMEM, "%s: out of memory", fname);
    }
    return 0;
}

static int parse_entry(st_entry *e, const cJSON *v, uint64_t data_size, const char *fname,
                       char *err) {
    const char *tn = e->name;
    if (!cJSON_IsObject(v))
        return e0_fail(err, E0_EFORMAT, "%s: tensor %s: header entry is not an object", fname, tn);
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(v, "dtype");
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(v, "shape");
    const cJSON *of = cJSON_GetObjectItemCaseSensitive(v, "data_offsets");
    if (!cJSON_IsString(dt) || dtype_parse(dt->valuestring, &e->dtype) != 0)
        return e0_fail(err, E0_EFORMAT, "%s: tensor %s: missing or unknown dtype", fname, tn);
    if (!cJSON_IsArray(sh) || cJSON_GetArraySize(sh) > ST_MAX_DIMS)
        return e0_fail(err, E0_EFORMAT, "%s: tensor %s: shape must be an array of at most %d dims",
                       fname, tn, ST_MAX_DIMS);
    uint64_t numel = 1;
    const cJSON *d;
    e->ndim = 0;
    cJSON_ArrayForEach(d, sh) {
        uint64_t dim;
        if (json_u64(d, &dim) != 0)
            return e0_fail(err, E0_EFORMAT,
                           "%s: tensor %s: shape entry is not a non-negative integer", fname, tn);
        e->shape[e->ndim++] = dim;
        if (__builtin_mul_overflow(numel, dim, &numel))
            return e0_fail(err, E0_EFORMAT, "%s: tensor %s: shape overflows", fname, tn);
    }
    if (!cJSON_IsArray(of) || cJSON_GetArraySize(of) != 2 ||
        json_u64(cJSON_GetArrayItem(of, 0), &e->begin) != 0 ||
        json_u64(cJSON_GetArrayItem(of, 1), &e->end) != 0)
        return e0_fail(err, E0_EFORMAT,
                       "%s: tensor %s: data_offsets must be two non-negative integers", fname, tn);
    if (e->begin > e->end)
        return e0_fail(err, E0_EFORMAT, "%s: tensor %s: data_offsets begin %llu > end %llu", fname,
                       tn, (unsigned long long)e->begin, (unsigned long long)e->end);
    if (e->end > data_size)
        return e0_fail(err, E0_EFORMAT,
                       "%s: tensor %s: data ends at byte %llu of the data section but the file "
                       "holds only %llu (truncated file or offsets out of range)",
                       fname, tn, (unsigned long long)e->end, (unsigned long long)data_size);
    uint64_t want;
    size_t es = st_dtype_size(e->dtype);
    if (__builtin_mul_overflow(numel, (uint64_t)es, &want) || want != e->end - e->begin)
        return e0_fail(err, E0_EFORMAT,
                       "%s: tensor %s: shape x dtype is %llu bytes but data_offsets span %llu",
                       fname, tn, (unsigned long long)(numel * es),
                       (unsigned long long)(e->end - e->begin));
    return 0;
}

int st_header_parse(st_header *h, const uint8_t *buf, size_t buf_len, uint64_t file_size,
                    const char *fname, char *err) {
    memset(h, 0, sizeof *h);
    if (buf_len < 8 || file_size < 8)
        return e0_fail(err, E0_EFORMAT, "%s: file too short for a safetensors header (%llu bytes)",
                       fname, (unsigned long long)file_size);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--)
        hlen = hlen << 8 | buf[i];
    if (hlen > file_size - 8)
        return e0_fail(err, E0_EFORMAT,
                       "%s: header length %llu runs past the end of the file (%llu bytes)", fname,
                       (unsigned long long)hlen, (unsigned long long)file_size);
    if (hlen > ST_MAX_HEADER)
        return e0_fail(err, E0_EFORMAT, "%s: header length %llu exceeds the %u-byte limit", fname,
                       (unsigned long long)hlen, ST_MAX_HEADER);
    if (hlen > buf_len - 8)
        return e0_fail(err, E0_EFORMAT, "%s: header is %llu bytes but only %zu were read", fname,
                       (unsigned long long)hlen, buf_len - 8);
    h->data_start = 8 + hlen;
    uint64_t data_size = file_size - h->data_start;

    cJSON *root = cJSON_ParseWithLength((const char *)buf + 8, (size_t)hlen);
    if (!root) return e0_fail(err, E0_EFORMAT, "%s: header is not valid JSON", fname);
    int rc = 0;
    st_entry **order = NULL;
    if (!cJSON_IsObject(root)) {
        rc = e0_fail(err, E0_EFORMAT, "%s: header JSON is not an object", fname);
        goto done;
    }
    size_t cap = (size_t)cJSON_GetArraySize(root);
    h->entries = calloc(cap ? cap : 1, sizeof *h->entries);
    if (!h->entries) {
        rc = e0_fail(err, E0_ENOMEM, "%s: out of memory", fname);
        goto done;
    }
    const cJSON *v;
    cJSON_ArrayForEach(v, root) {
        if (strcmp(v->string, "__metadata__") == 0) {
            if (h->meta) {
                rc = e0_fail(err, E0_EFORMAT, "%s: __metadata__ appears twice", fname);
                goto done;
            }
            if ((rc = parse_meta(h, v, fname, err)) != 0) goto done;
            continue;
        }
        st_entry *e = &h->entries[h->n];
        if (!(e->name = strdup(v->string))) {
            rc = e0_fail(err, E0_ENOMEM, "%s: out of memory", fname);
            goto done;
        }
        h->n++;
        if ((rc = parse_entry(e, v, data_size, fname, err)) != 0) goto done;
    }
    order = malloc((h->n ? h->n : 1) * sizeof *order);
    if (!order) {
        rc = e0_fail(err, E0_ENOMEM, "%s: out of memory", fname);
        goto done;
    }
    for (size_t i = 0; i < h->n; i++)
        order[i] = &h->entries[i];
    qsort(order, h->n, sizeof *order, cmp_name);
    for (size_t i = 1; i < h->n; i++)
        if (strcmp(order[i - 1]->name, order[i]->name) == 0) {
            rc = e0_fail(err, E0_EFORMAT, "%s: tensor %s appears twice in the header", fname,
                         order[i]->name);
            goto done;
        }
    qsort(order, h->n, sizeof *order, cmp_begin);
    const st_entry *prev = NULL;
    for (size_t i = 0; i < h->n; i++) {
        if (order[i]->begin == order[i]->end) continue; /* empty tensors overlap nothing */
        if (prev && order[i]->begin < prev->end) {
            rc = e0_fail(err, E0_EFORMAT, "%s: tensors %s and %s overlap in the data section",
                         fname, prev->name, order[i]->name);
            goto done;
        }
        prev = order[i];
    }
done:
    free(order);
    cJSON_Delete(root);
    if (rc) st_header_free(h);
    return rc;
}

/* ---- opened sets ------------------------------------------------------- */

static uint64_t hash_str(const char *s) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}

const st_tensor *st_get(const st_set *s, const char *name) {
    if (!s || !s->nslots) return NULL;
    for (size_t i = hash_str(name) & (s->nslots - 1);; i = (i + 1) & (s->nslots - 1)) {
        uint32_t v = s->slots[i];
        if (!v) return NULL;
        if (strcmp(s->tensors[v - 1].name, name) == 0) return &s->tensors[v - 1];
    }
}

size_t st_count(const st_set *s) {
    return s->n;
}
const st_tensor *st_at(const st_set *s, size_t i) {
    return i < s->n ? &s->tensors[i] : NULL;
}
const char *st_file_path(const st_set *s, uint32_t f) {
    return f < s->nfiles ? s->files[f].path : "?";
}
int st_file_fd(const st_set *s, uint32_t f) {
    return f < s->nfiles ? s->files[f].fd : -1;
}
const char *st_meta(const st_set *s, const char *key) {
    return s->nfiles ? st_header_meta(&s->files[0].hdr, key) : NULL;
}

int st_locate(const st_set *s, const void *p, uint32_t *file, uint64_t *off) {
    const uint8_t *q = p;
    for (uint32_t i = 0; i < s->nfiles; i++)
        if (q >= s->files[i].map && q < s->files[i].map + s->files[i].size) {
            *file = i;
            *off = (uint64_t)(q - s->files[i].map);
            return 0;
        }
    return E0_ENOTFOUND;
}

int st_advise(const st_set *s, uint32_t file, uint64_t off, uint64_t len, int advice) {
    if (file >= s->nfiles || off > s->files[file].size || len > s->files[file].size - off)
        return E0_ERANGE;
    const uint64_t page = 4096, a = off & ~(page - 1);
    return madvise((void *)(s->files[file].map + a), len + (off - a), advice) == 0 ? 0 : E0_EIO;
}

uint64_t st_numel(const st_tensor *t) {
    uint64_t n = 1;
    for (int i = 0; i < t->ndim; i++)
        n *= t->shape[i];
    return n;
}

/* nbytes / shape[0] is exact for every dtype as long as a slice holds whole
 * rows: a ggml block type packs each row of shape[ndim-1] values into
 * blocks, so nbytes = rows x row bytes and a 1-D block tensor (one row)
 * has no byte-addressable slices. */
int st_slice(const st_tensor *t, uint64_t i, uint64_t *off, uint64_t *len) {
    if (t->ndim < 1 || i >= t->shape[0]) return E0_ERANGE;
    if (t->dtype == ST_GGML && t->ndim < 2) return E0_EINVAL;
    uint64_t per = t->nbytes / t->shape[0];
    *off = t->off + i * per;
    *len = per;
    return 0;
}

int st_pread(const st_set *s, uint32_t file, uint64_t off, uint64_t len, void *dst, char *err) {
    if (file >= s->nfiles || off > s->files[file].size || len > s->files[file].size - off)
        return e0_fail(err, E0_ERANGE, "read of %llu bytes at %llu is outside %s",
                       (unsigned long long)len, (unsigned long long)off, st_file_path(s, file));
    uint8_t *p = dst;
    while (len) {
        ssize_t r = pread(s->files[file].fd, p, len > (1u << 30) ? (1u << 30) : len, (off_t)off);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0)
            return e0_fail(err, E0_EIO, "%s: read failed at offset %llu: %s", s->files[file].path,
                           (unsigned long long)off, r < 0 ? strerror(errno) : "unexpected end of file");
        p += r;
        off += (uint64_t)r;
        len -= (uint64_t)r;
    }
    return 0;
}

/* ---- direct reads ------------------------------------------------------- */

/* The span is read in aligned pieces of at most 1 GiB. A read that fails
 * with EINVAL (the filesystem or device wants another alignment, or does
 * not do O_DIRECT after all) turns direct reads of the shard off for good;
 * the range, or what is left of it, is then read through the page cache.
 * The descriptor stays open until st_set_free: another thread may be
 * inside a read on it. */
int st_pread_direct(const st_set *s, uint32_t file, uint64_t off, uint64_t len, void *dst,
                    bool *direct, char *err) {
    if (direct) *direct = false;
    if (file >= s->nfiles || off > s->files[file].size || len > s->files[file].size - off)
        return e0_fail(err, E0_ERANGE, "read of %llu bytes at %llu is outside %s",
                       (unsigned long long)len, (unsigned long long)off, st_file_path(s, file));
    st_file *f = &s->files[file]; /* only its atomics change */
    const uint64_t A = ST_DIRECT_ALIGN, a = off & ~(A - 1), end = off + len;
    if (!atomic_load_explicit(&f->direct_on, memory_order_relaxed) ||
        ((uintptr_t)dst - off) % A != 0 || len == 0)
        return st_pread(s, file, off, len, dst, err);
    uint8_t *base = (uint8_t *)dst - (off - a); /* where byte `a` lands */
    const uint64_t span_end = (end + A - 1) & ~(A - 1);
    uint64_t pos = a;
    while (pos < end) {
        if (pos % A != 0) break; /* a short read left us unaligned: finish buffered */
        const uint64_t want = span_end - pos;
        ssize_t r;
        if (atomic_exchange_explicit(&f->fail_next, false, memory_order_relaxed)) {
            r = -1;
            errno = EINVAL;
        } else {
            r = pread(f->dfd, base + (pos - a), want > (1u << 30) ? (1u << 30) : want, (off_t)pos);
        }
        if (r < 0 && errno == EINTR) continue;
        if (r < 0 && errno == EINVAL) {
            atomic_store_explicit(&f->direct_on, false, memory_order_relaxed);
            break;
        }
        if (r <= 0)
            return e0_fail(err, E0_EIO, "%s: direct read failed at offset %llu: %s", f->path,
                           (unsigned long long)pos, r < 0 ? strerror(errno) : "unexpected end of file");
        pos += (uint64_t)r;
    }
    if (pos < end) { /* fall back for the rest */
        const uint64_t from = pos > off ? pos : off;
        return st_pread(s, file, from, end - from, (uint8_t *)dst + (from - off), err);
    }
    if (direct) *direct = true;
    return 0;
}

bool st_direct_on(const st_set *s, uint32_t file) {
    return file < s->nfiles && atomic_load(&s->files[file].direct_on);
}

void st_debug_direct_einval(st_set *s) {
    for (uint32_t i = 0; i < s->nfiles; i++)
        atomic_store(&s->files[i].fail_next, true);
}

/* Mappings start on a 2 MiB boundary and own whole 2 MiB pages (the tail
 * past the file's last page is reserved, inaccessible), so that st_set_load
 * can move a copy on transparent huge pages into the same addresses. */
#define HUGE_PAGE  ((uint64_t)2 << 20)

uint64_t st_map_span(uint64_t size) {
    return (size + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1);
}

/* span bytes of fresh anonymous memory at a 2 MiB boundary, or NULL. */
uint8_t *st_reserve_aligned(uint64_t span, int prot) {
    uint8_t *r = mmap(NULL, span + HUGE_PAGE, prot, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (r == MAP_FAILED) return NULL;
    uint8_t *a = (uint8_t *)(((uintptr_t)r + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1));
    if (a > r) munmap(r, (size_t)(a - r));
    munmap(a + span, (size_t)(r + span + HUGE_PAGE - (a + span)));
    return a;
}

static const uint8_t *map_aligned(int fd, uint64_t size) {
    uint8_t *a = st_reserve_aligned(st_map_span(size), PROT_NONE);
    if (!a) return NULL;
    if (mmap(a, size, PROT_READ, MAP_SHARED | MAP_FIXED, fd, 0) == MAP_FAILED) {
        const int e = errno;
        munmap(a, st_map_span(size));
        errno = e;
        return NULL;
    }
    return a;
}

/* ---- SIGBUS guard -------------------------------------------------------------
 * A table of live mappings that the handler reads without locks: a slot is
 * claimed with a compare-and-swap on `base` and freed by storing 0. The
 * handler only reads the table, calls mmap (a plain system call on Linux)
 * and stores atomics. */
#define GUARD_SLOTS 256

static struct {
    _Atomic(uintptr_t) base;
    _Atomic(uint64_t) span;
    _Atomic(uint64_t) fault; /* offset of the first fault + 1, or 0 */
} g_guard[GUARD_SLOTS];

static struct sigaction g_prev; /* the SIGBUS action before ours, for faults not ours */

static void on_sigbus(int sig, siginfo_t *si, void *uc) {
    const uintptr_t a = (uintptr_t)si->si_addr;
    for (int i = 0; i < GUARD_SLOTS; i++) {
        const uintptr_t b = atomic_load(&g_guard[i].base);
        if (!b || a < b || a - b >= atomic_load(&g_guard[i].span)) continue;
        const uintptr_t page = a & ~(uintptr_t)4095;
        if (mmap((void *)page, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) ==
            MAP_FAILED)
            break;
        uint64_t none = 0;
        atomic_compare_exchange_strong(&g_guard[i].fault, &none, (uint64_t)(a - b) + 1);
        return; /* the read runs again and sees zeros */
    }
    /* not ours: whoever handled SIGBUS before, else the default action */
    if (g_prev.sa_flags & SA_SIGINFO) {
        g_prev.sa_sigaction(sig, si, uc);
    } else if (g_prev.sa_handler != SIG_DFL && g_prev.sa_handler != SIG_IGN) {
        g_prev.sa_handler(sig);
    } else {
        signal(sig, SIG_DFL);
    }
}

/* Ours unless it already is (a test harness may have put its own in
 * place since: that one becomes the previous action). */
static void guard_install(void) {
    struct sigaction sa, cur;
    sigaction(SIGBUS, NULL, &cur);
    if ((cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction == on_sigbus) return;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_sigbus;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGBUS, &sa, &g_prev);
}

static int guard_add(const uint8_t *base, uint64_t span) {
    guard_install();
    for (int i = 0; i < GUARD_SLOTS; i++) {
        uintptr_t none = 0;
        if (atomic_load(&g_guard[i].base) == 0 &&
            atomic_compare_exchange_strong(&g_guard[i].base, &none, (uintptr_t)1)) {
            atomic_store(&g_guard[i].span, span);
            atomic_store(&g_guard[i].fault, 0);
            atomic_store(&g_guard[i].base, (uintptr_t)base);
            return i;
        }
    }
    return -1; /* more mappings than slots: those go unguarded */
}

int st_set_fault(const st_set *s, char *err) {
    for (uint32_t i = 0; i < s->nfiles; i++) {
        const st_file *f = &s->files[i];
        if (f->guard < 0) continue;
        const uint64_t at = atomic_load(&g_guard[f->guard].fault);
        if (at)
            return e0_fail(err, E0_EIO,
                           "%s: the file shrank while edge0 had it mapped (a read at offset %llu "
                           "found no data): restore the file and restart, or use --io pread",
                           f->path, (unsigned long long)(at - 1));
    }
    return 0;
}

static void file_close(st_file *f) {
    if (f->guard >= 0) atomic_store(&g_guard[f->guard].base, 0);
    if (f->map && f->map != MAP_FAILED) munmap((void *)f->map, st_map_span(f->size));
    if (f->fd >= 0) close(f->fd);
    if (f->dfd >= 0) close(f->dfd);
    st_header_free(&f->hdr);
    if (f->gguf) f->gguf_free(f->gguf);
    free(f->path);
}

void st_set_free(st_set *s) {
    if (!s) return;
    for (uint32_t i = 0; i < s->nfiles; i++)
        file_close(&s->files[i]);
    free(s->files);
    free(s->tensors);
    free(s->slots);
    free(s);
}

int st_file_map(st_file *f, const char *path, char *err) {
    memset(f, 0, sizeof *f);
    f->fd = f->dfd = -1;
    f->guard = -1;
    atomic_init(&f->direct_on, false);
    atomic_init(&f->fail_next, false);
    if (!(f->path = strdup(path))) return e0_fail(err, E0_ENOMEM, "out of memory");
    f->fd = open(path, O_RDONLY | O_CLOEXEC);
    if (f->fd < 0)
        return e0_fail(err, errno == ENOENT ? E0_ENOTFOUND : E0_EIO, "%s: cannot open: %s", path,
                       strerror(errno));
    struct stat st;
    if (fstat(f->fd, &st) != 0 || !S_ISREG(st.st_mode))
        return e0_fail(err, E0_EIO, "%s: not a regular file", path);
    f->size = (uint64_t)st.st_size;
    if (f->size == 0) return 0; /* nothing to map: each format's parser says "too short" */
    /* a second descriptor for reads that bypass the page cache; a
     * filesystem without O_DIRECT refuses the open (EINVAL) */
    f->dfd = open(path, O_RDONLY | O_CLOEXEC | O_DIRECT);
    atomic_store(&f->direct_on, f->dfd >= 0);
    if (!(f->map = map_aligned(f->fd, f->size)))
        return e0_fail(err, E0_EIO, "%s: mmap failed: %s", path, strerror(errno));
    f->guard = guard_add(f->map, f->size);
    return 0;
}

static int file_open(st_file *f, const char *path, char *err) {
    int rc = st_file_map(f, path, err);
    if (rc) return rc;
    if (f->size < 8)
        return e0_fail(err, E0_EFORMAT, "%s: file too short for a safetensors header (%llu bytes)",
                       path, (unsigned long long)f->size);
    return st_header_parse(&f->hdr, f->map, f->size, f->size, path, err);
}

int st_set_alloc(st_set **out, uint32_t nfiles, char *err) {
    st_set *s = calloc(1, sizeof *s);
    if (!s || !(s->files = calloc(nfiles ? nfiles : 1, sizeof *s->files))) {
        free(s);
        return e0_fail(err, E0_ENOMEM, "out of memory");
    }
    for (uint32_t i = 0; i < (nfiles ? nfiles : 1); i++)
        s->files[i].guard = -1;
    *out = s;
    return 0;
}

int st_set_reserve(st_set *s, size_t n, char *err) {
    if (n >= UINT32_MAX) return e0_fail(err, E0_EFORMAT, "too many tensors");
    s->tensors = calloc(n ? n : 1, sizeof *s->tensors);
    s->nslots = 16;
    while (s->nslots < 2 * n)
        s->nslots <<= 1;
    s->slots = calloc(s->nslots, sizeof *s->slots);
    if (!s->tensors || !s->slots) return e0_fail(err, E0_ENOMEM, "out of memory");
    return 0;
}

int st_set_add(st_set *s, const st_tensor *t, char *err) {
    const st_tensor *dup = st_get(s, t->name);
    if (dup)
        return e0_fail(err, E0_EFORMAT, "tensor %s is in both %s and %s", t->name,
                       s->files[dup->file].path, s->files[t->file].path);
    s->tensors[s->n] = *t;
    size_t i = hash_str(t->name) & (s->nslots - 1);
    while (s->slots[i])
        i = (i + 1) & (s->nslots - 1);
    s->slots[i] = (uint32_t)++s->n;
    return 0;
}

static int set_index(st_set *s, char *err) {
    size_t n = 0;
    for (uint32_t i = 0; i < s->nfiles; i++)
        n += s->files[i].hdr.n;
    int rc = st_set_reserve(s, n, err);
    for (uint32_t fi = 0; fi < s->nfiles && !rc; fi++) {
        const st_file *f = &s->files[fi];
        for (size_t k = 0; k < f->hdr.n && !rc; k++) {
            const st_entry *e = &f->hdr.entries[k];
            st_tensor t = {.name = e->name, .dtype = e->dtype, .ndim = e->ndim, .file = fi};
            memcpy(t.shape, e->shape, sizeof t.shape);
            t.off = f->hdr.data_start + e->begin;
            t.nbytes = e->end - e->begin;
            t.data = f->map + t.off;
            rc = st_set_add(s, &t, err);
        }
    }
    return rc;
}

static int set_open_paths(st_set **out, char **paths, uint32_t n, char *err) {
    st_set *s;
    int rc = st_set_alloc(&s, n, err);
    if (rc) return rc;
    for (uint32_t i = 0; i < n && !rc; i++) {
        rc = file_open(&s->files[i], paths[i], err);
        s->nfiles = i + 1;
    }
    if (!rc) rc = set_index(s, err);
    if (rc) {
        st_set_free(s);
        return rc;
    }
    *out = s;
    return 0;
}

int st_set_open_file(st_set **out, const char *path, char *err) {
    char *p = (char *)path;
    return set_open_paths(out, &p, 1, err);
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* model.safetensors.index.json: {"weight_map": {"tensor": "shard file"}}. Shard
 * names are plain file names in `dir` (no '/'), each opened once; every
 * tensor the map names must be in the shard it names. */
static int open_index(st_set **out, const char *dir, const char *ipath, char *err) {
    char *text = NULL;
    size_t len = 0;
    int rc = e0_read_file(ipath, &text, &len, 256u << 20, err);
    if (rc) return rc;
    cJSON *root = cJSON_ParseWithLength(text, len);
    free(text);
    if (!root) return e0_fail(err, E0_EFORMAT, "%s: not valid JSON", ipath);
    const cJSON *wm = cJSON_GetObjectItemCaseSensitive(root, "weight_map");
    char **names = NULL, **paths = NULL;
    uint32_t nf = 0;
    if (!cJSON_IsObject(wm)) {
        rc = e0_fail(err, E0_EFORMAT, "%s: \"weight_map\" missing or not an object", ipath);
        goto done;
    }
    size_t cnt = (size_t)cJSON_GetArraySize(wm);
    names = calloc(cnt + 1, sizeof *names);
    if (!names) {
        rc = e0_fail(err, E0_ENOMEM, "out of memory");
        goto done;
    }
    const cJSON *v;
    size_t k = 0;
    cJSON_ArrayForEach(v, wm) {
        if (!cJSON_IsString(v) || !v->valuestring[0] || strchr(v->valuestring, '/') ||
            strcmp(v->valuestring, "..") == 0 || strcmp(v->valuestring, ".") == 0) {
            rc = e0_fail(err, E0_EFORMAT, "%s: weight_map entry for %s is not a file name in %s",
                         ipath, v->string, dir);
            goto done;
        }
        names[k++] = v->valuestring;
    }
    qsort(names, k, sizeof *names, cmp_str);
    paths = calloc(k + 1, sizeof *paths);
    if (!paths) {
        rc = e0_fail(err, E0_ENOMEM, "out of memory");
        goto done;
    }
    for (size_t i = 0; i < k; i++)
        if (i == 0 || strcmp(names[i], names[i - 1]) != 0) {
            if (!(paths[nf++] = e0_path_join(dir, names[i]))) {
                rc = e0_fail(err, E0_ENOMEM, "out of memory");
                goto done;
            }
        }
    if (nf == 0) {
        rc = e0_fail(err, E0_EFORMAT, "%s: weight_map is empty", ipath);
        goto done;
    }
    if ((rc = set_open_paths(out, paths, nf, err)) != 0) {
        if (rc == E0_ENOTFOUND) e0_wrap(err, rc, "shard listed in %s is missing", ipath);
        goto done;
    }
    cJSON_ArrayForEach(v, wm) {
        const st_tensor *t = st_get(*out, v->string);
        const char *want = v->valuestring;
        const char *have = t ? strrchr(st_file_path(*out, t->file), '/') + 1 : NULL;
        if (!t || strcmp(have, want) != 0) {
            rc = e0_fail(err, E0_ENOTFOUND,
                         "%s: tensor %s is listed in shard %s but not found there", ipath,
                         v->string, want);
            st_set_free(*out);
            *out = NULL;
            goto done;
        }
    }
done:
    for (uint32_t i = 0; i < nf; i++)
        free(paths[i]);
    free(paths);
    free(names);
    cJSON_Delete(root);
    return rc;
}

int st_set_open_dir(st_set **out, const char *dir, char *err) {
    *out = NULL;
    char *p = e0_path_join(dir, "model.safetensors.index.json");
    if (!p) return e0_fail(err, E0_ENOMEM, "out of memory");
    int rc;
    if (e0_file_exists(p)) {
        rc = open_index(out, dir, p, err);
        free(p);
        return rc;
    }
    free(p);
    p = e0_path_join(dir, "model.safetensors");
    if (!p) return e0_fail(err, E0_ENOMEM, "out of memory");
    if (e0_file_exists(p)) {
        rc = st_set_open_file(out, p, err);
        free(p);
        return rc;
    }
    free(p);
    DIR *d = opendir(dir);
    if (!d)
        return e0_fail(err, E0_ENOTFOUND, "%s: cannot open directory: %s", dir, strerror(errno));
    char **paths = NULL;
    uint32_t n = 0;
    size_t cap = 0;
    rc = 0;
    struct dirent *de;
    while ((de = readdir(d)) && !rc) {
        size_t l = strlen(de->d_name);
        if (l < 12 || strcmp(de->d_name + l - 12, ".safetensors") != 0) continue;
        if (arr_reserve((void **)&paths, &cap, (size_t)n + 1, sizeof *paths)) {
            rc = e0_fail(err, E0_ENOMEM, "out of memory");
            break;
        }
        if (!(paths[n] = e0_path_join(dir, de->d_name)))
            rc = e0_fail(err, E0_ENOMEM, "out of memory");
        else
            n++;
    }
    closedir(d);
    if (!rc && n == 0)
        rc = e0_fail(err, E0_ENOTFOUND,
                     "%s: no model.safetensors, model.safetensors.index.json or *.safetensors "
                     "file",
                     dir);
    if (!rc) {
        qsort(paths, n, sizeof *paths, cmp_str);
        rc = set_open_paths(out, paths, n, err);
    }
    for (uint32_t i = 0; i < n; i++)
        free(paths[i]);
    free(paths);
    return rc;
}

