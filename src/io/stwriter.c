/* The streaming safetensors writer. See stwriter.h: the layout (shards,
 * headers, jobs), the run (worker threads, ordered pwrites, progress,
 * cancel), the index and the atomic directory. */
#include "io/stwriter.h"

#include "util/arr.h"
#include "util/err.h"
#include "util/file.h"
#include "util/sbuf.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

double stw_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- layout ----------------------------------------------------------------- */

stw_item *stw_items(stw *w, size_t n) {
    free(w->items);
    w->items = calloc(n ? n : 1, sizeof *w->items);
    w->n = w->items ? n : 0;
    return w->items;
}

static uint64_t item_bytes(const stw_item *t) {
    return (uint64_t)t->rows * (t->wrow + 2 * t->srow);
}

/* One shard's header: every tensor of its items. */
static int shard_header(stw *w, int sh, size_t *i, const char *format) {
    sbuf b = {0};
    sb_printf(&b, "{\"__metadata__\":{\"format\":\"%s\"}", format);
    for (; *i < w->n && w->items[*i].shard == (uint32_t)sh; (*i)++) {
        const stw_item *t = &w->items[*i];
        const uint64_t o = t->off, wb = (uint64_t)t->rows * t->wrow,
                       sb = (uint64_t)t->rows * t->srow;
        w->data_bytes[sh] = o + item_bytes(t);
        if (!t->bits) {
            st_header_entry(&b, t->name, "", st_dtype_name(t->dtype), t->ndim, t->shape, o, o + wb);
            continue;
        }
        uint64_t shp[ST_MAX_DIMS];
        memcpy(shp, t->shape, sizeof shp);
        shp[t->ndim - 1] = (uint64_t)t->cols * (uint64_t)t->bits / 32;
        st_header_entry(&b, t->name, ".weight", "U32", t->ndim, shp, o, o + wb);
        shp[t->ndim - 1] = (uint64_t)(t->cols / t->group);
        st_header_entry(&b, t->name, ".scales", "BF16", t->ndim, shp, o + wb, o + wb + sb);
        st_header_entry(&b, t->name, ".biases", "BF16", t->ndim, shp, o + wb + sb, o + wb + 2 * sb);
    }
    sb_printf(&b, "}");
    int rc = b.oom || st_header_pack(b.p, b.n, &w->hdr[sh], &w->hdr_len[sh]) != 0;
    sb_free(&b);
    return rc ? -1 : 0;
}

/* Jobs of about job_bytes: whole rows, each item's rows in order. */
static int make_jobs(stw *w, uint64_t job_bytes) {
    free(w->jobs);
    w->jobs = NULL;
    w->njobs = 0;
    size_t cap = w->n + 64;
    if (!(w->jobs = malloc(cap * sizeof *w->jobs))) return -1;
    for (size_t i = 0; i < w->n; i++) {
        const stw_item *t = &w->items[i];
        const uint64_t out = t->wrow + 2 * t->srow, cost = t->row_cost ? t->row_cost : out;
        int64_t per = cost ? (int64_t)(job_bytes / cost) : t->rows;
        if (per < 1) per = 1;
        for (int64_t r0 = 0; r0 < t->rows; r0 += per) {
            if (arr_reserve((void **)&w->jobs, &cap, w->njobs + 1, sizeof *w->jobs)) return -1;
            const int64_t k = t->rows - r0 < per ? t->rows - r0 : per;
            w->jobs[w->njobs++] = (stw_job){(uint32_t)i, r0, k};
            if ((uint64_t)k * cost > w->max_cost) w->max_cost = (uint64_t)k * cost;
            if ((size_t)k * out > w->max_out) w->max_out = (size_t)k * out;
        }
    }
    return 0;
}

int stw_layout(stw *w, const stw_layout_opts *o, char *err) {
    const uint64_t max = o->shard_bytes ? o->shard_bytes : (5ull << 30);
    uint64_t used = 0;
    int cur = 0;
    for (size_t i = 0; i < w->n; i++) {
        stw_item *t = &w->items[i];
        if (t->bits) {
            t->wrow = (size_t)t->cols * (size_t)t->bits / 8;
            t->srow = (size_t)(t->cols / t->group) * 2;
            w->n_tensors += 3;
        } else {
            t->wrow = (size_t)t->cols * st_dtype_size(t->dtype);
            w->n_tensors++;
        }
        if (used > 0 && used + item_bytes(t) > max) {
            cur++;
            used = 0;
        }
        t->shard = (uint32_t)cur;
        t->off = used;
        used += item_bytes(t);
    }
    w->nshards = cur + 1;
    w->data_bytes = calloc((size_t)w->nshards, sizeof *w->data_bytes);
    w->hdr = calloc((size_t)w->nshards, sizeof *w->hdr);
    w->hdr_len = calloc((size_t)w->nshards, sizeof *w->hdr_len);
    if (!w->data_bytes || !w->hdr || !w->hdr_len) return e0_fail(err, E0_ENOMEM, "out of memory");
    size_t i = 0;
    for (int sh = 0; sh < w->nshards; sh++) {
        if (shard_header(w, sh, &i, o->format) != 0)
            return e0_fail(err, E0_ENOMEM, "out of memory");
        w->total_data += w->data_bytes[sh];
        w->total_bytes += w->hdr_len[sh] + w->data_bytes[sh];
    }
    if (make_jobs(w, o->job_bytes) != 0) return e0_fail(err, E0_ENOMEM, "out of memory");
    return 0;
}

int stw_layout_raw(stw *w, uint64_t job_bytes, char *err) {
    w->total_data = 0;
    w->nshards = 0;
    for (size_t i = 0; i < w->n; i++) {
        const stw_item *t = &w->items[i];
        if (t->bits) return e0_fail(err, E0_EINVAL, "%s: a raw item is quantized", t->name);
        w->total_data += item_bytes(t);
        if ((int)t->shard + 1 > w->nshards) w->nshards = (int)t->shard + 1;
    }
    w->total_bytes = w->total_data;
    w->n_tensors = w->n;
    if (make_jobs(w, job_bytes) != 0) return e0_fail(err, E0_ENOMEM, "out of memory");
    return 0;
}

void stw_free(stw *w) {
    for (int i = 0; w->hdr && i < w->nshards; i++)
        free(w->hdr[i]);
    free(w->hdr);
    free(w->hdr_len);
    free(w->data_bytes);
    free(w->items);
    free(w->jobs);
    memset(w, 0, sizeof *w);
}

/* ---- the run ------------------------------------------------------------------ */

struct stw_run {
    const stw *w;
    const stw_write_opts *o;
    int *fds;
    char **paths;
    uint64_t *cum; /* [njobs + 1] src_bytes before each job (prefetch only) */
    atomic_size_t next;
    atomic_uint_fast64_t done, written;
    atomic_int failed, running;
    pthread_mutex_t mu; /* guards err, err_code, turn and pf_next */
    pthread_cond_t cv;  /* turn advanced or failed */
    size_t turn;        /* the job whose rows are written next */
    size_t pf_next;     /* the next job to prefetch */
    char err[E0_ERR_MAX];
    int err_code;
};

void stw_fail(stw_run *r, int code, const char *fmt, ...) {
    pthread_mutex_lock(&r->mu);
    if (!atomic_load(&r->failed)) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(r->err, sizeof r->err, fmt, ap);
        va_end(ap);
        r->err_code = code;
        atomic_store(&r->failed, 1);
    }
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

bool stw_stopped(stw_run *r) {
    return atomic_load(&r->failed);
}

void stw_done(stw_run *r, uint64_t n) {
    atomic_fetch_add(&r->done, n);
}

int stw_pwrite(int fd, const void *buf, size_t len, uint64_t off) {
    const uint8_t *b = buf;
    while (len) {
        ssize_t k = pwrite(fd, b, len, (off_t)off);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return -1;
        b += k;
        len -= (size_t)k;
        off += (uint64_t)k;
    }
    return 0;
}

/* Asks for the source of jobs up to prefetch_bytes ahead of job i, so the
 * disk has a queue while the workers compute. */
static void prefetch(stw_run *r, size_t i) {
    for (;;) {
        pthread_mutex_lock(&r->mu);
        const size_t k = r->pf_next;
        const bool go = k < r->w->njobs && r->cum[k] < r->cum[i] + r->o->prefetch_bytes;
        if (go) r->pf_next = k + 1;
        pthread_mutex_unlock(&r->mu);
        if (!go) return;
        r->o->prefetch(r->o->ctx, &r->w->jobs[k]);
    }
}

static void run_job(stw_run *r, size_t i, uint8_t *buf, void *scratch) {
    const stw_job *j = &r->w->jobs[i];
    const stw_item *t = &r->w->items[j->item];
    const size_t nw = (size_t)j->n * t->wrow, ns = (size_t)j->n * t->srow;
    const stw_out out = {buf, (uint16_t *)(void *)(buf + nw), (uint16_t *)(void *)(buf + nw + ns),
                         scratch};
    r->o->produce(r->o->ctx, r, j, &out);
    if (stw_stopped(r)) return;
    const uint32_t sh = t->shard;
    const uint64_t base = (r->w->hdr_len ? r->w->hdr_len[sh] : 0) + t->off,
                   wb = (uint64_t)t->rows * t->wrow;
    const struct {
        const void *b;
        size_t len;
        uint64_t off;
    } piece[3] = {
        {out.w, nw, base + (uint64_t)j->r0 * t->wrow},
        {out.scales, ns, base + wb + (uint64_t)j->r0 * t->srow},
        {out.biases, ns, base + wb + (uint64_t)t->rows * t->srow + (uint64_t)j->r0 * t->srow},
    };
    /* Rows go out in job order (= file order): production overlaps, the
     * page cache sees one sequential stream per shard and threads never
     * contend for a file's lock. */
    pthread_mutex_lock(&r->mu);
    while (r->turn != i && !stw_stopped(r))
        pthread_cond_wait(&r->cv, &r->mu);
    pthread_mutex_unlock(&r->mu);
    for (int q = 0; q < (t->bits ? 3 : 1) && !stw_stopped(r); q++) {
        if (r->o->write) {
            char e[E0_ERR_MAX];
            const int rc = r->o->write(r->o->ctx, sh, piece[q].off, piece[q].b, piece[q].len, e);
            if (rc) {
                stw_fail(r, rc, "%s", e);
                return;
            }
        } else if (stw_pwrite(r->fds[sh], piece[q].b, piece[q].len, piece[q].off) != 0) {
            stw_fail(r, E0_EIO, "%s: write failed: %s", r->paths[sh],
                     strerror(errno ? errno : EIO));
            return;
        }
        atomic_fetch_add(&r->written, piece[q].len);
    }
    pthread_mutex_lock(&r->mu);
    r->turn = i + 1;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

static void *worker(void *arg) {
    stw_run *r = arg;
    const size_t nb = r->w->max_out, ns = r->o->scratch_bytes;
    uint8_t *buf = malloc(nb ? nb : 1);
    void *scratch = malloc(ns ? ns : 1);
    if (!buf || !scratch)
        stw_fail(r, E0_ENOMEM, "out of memory allocating %zu-byte buffers", nb + ns);
    while (buf && scratch && !stw_stopped(r)) {
        const size_t i = atomic_fetch_add(&r->next, 1);
        if (i >= r->w->njobs) break;
        if (r->o->prefetch) prefetch(r, i);
        run_job(r, i, buf, scratch);
    }
    free(buf);
    free(scratch);
    atomic_fetch_sub(&r->running, 1);
    return NULL;
}

static void report(const stw_run *r, stw_phase ph) {
    if (!r->o->progress) return;
    const stw_progress p = {.phase = ph,
                            .done = atomic_load(&r->done),
                            .written = atomic_load(&r->written),
                            .seconds = stw_now() - r->o->t0};
    r->o->progress(r->o->ctx, &p);
}

static int run_workers(stw_run *r) {
    const stw_write_opts *o = r->o;
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    int nt = o->n_threads > 0 ? o->n_threads : (int)(ncpu > 0 ? (ncpu < 8 ? ncpu : 8) : 2);
    if ((size_t)nt > r->w->njobs) nt = (int)r->w->njobs;
    if (nt < 1) nt = 1;
    pthread_t *th = calloc((size_t)nt, sizeof *th);
    if (!th) {
        stw_fail(r, E0_ENOMEM, "out of memory");
        return -1;
    }
    int started = 0;
    atomic_store(&r->running, nt);
    for (; started < nt; started++)
        if (pthread_create(&th[started], NULL, worker, r) != 0) {
            atomic_fetch_sub(&r->running, nt - started);
            stw_fail(r, E0_EIO, "cannot start a worker thread");
            break;
        }
    double last = 0;
    while (atomic_load(&r->running) > 0) {
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
        if (o->cancel && *o->cancel) stw_fail(r, E0_EINVAL, "interrupted");
        const double t = stw_now();
        if (t - last >= 0.1) {
            report(r, STW_WRITING);
            last = t;
        }
    }
    for (int i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    free(th);
    if (o->cancel && *o->cancel) stw_fail(r, E0_EINVAL, "interrupted");
    if (!atomic_load(&r->failed) && atomic_load(&r->written) != r->w->total_data)
        stw_fail(r, E0_EIO, "internal error: wrote %llu of %llu bytes",
                 (unsigned long long)atomic_load(&r->written),
                 (unsigned long long)r->w->total_data);
    if (!atomic_load(&r->failed)) report(r, STW_WRITING);
    return atomic_load(&r->failed) ? -1 : 0;
}

int stw_run_jobs(stw *w, const stw_write_opts *o, char *err) {
    if (!o->write) return e0_fail(err, E0_EINVAL, "stw_run_jobs needs a write hook");
    stw_run r = {.w = w, .o = o};
    pthread_mutex_init(&r.mu, NULL);
    pthread_cond_init(&r.cv, NULL);
    int rc = 0;
    if (o->prefetch) {
        rc = e0_fail(err, E0_EINVAL, "stw_run_jobs: prefetch is not supported");
    } else if (run_workers(&r) != 0) {
        rc = e0_fail(err, r.err_code ? r.err_code : E0_EIO, "%s", r.err);
    } else if (o->sync) {
        report(&r, STW_SYNCING);
    }
    pthread_cond_destroy(&r.cv);
    pthread_mutex_destroy(&r.mu);
    return rc;
}

/* ---- the index and the directory ------------------------------------------------ */

static void shard_name(const stw *w, int sh, char *buf, size_t n) {
    if (w->nshards == 1)
        snprintf(buf, n, "model.safetensors");
    else
        snprintf(buf, n, "model-%05d-of-%05d.safetensors", sh + 1, w->nshards);
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* model.safetensors.index.json: {"metadata": {"total_size"}, "weight_map"}, names sorted. */
static char *index_json(const stw *w) {
    char **lines = calloc(w->n_tensors + 1, sizeof *lines);
    if (!lines) return NULL;
    size_t k = 0;
    bool oom = false;
    for (size_t i = 0; i < w->n && !oom; i++) {
        const stw_item *t = &w->items[i];
        static const char *const sfx[] = {".weight", ".scales", ".biases"};
        char f[64];
        shard_name(w, (int)t->shard, f, sizeof f);
        for (int j = 0; j < (t->bits ? 3 : 1) && !oom; j++) {
            const size_t len = strlen(t->name) + strlen(f) + 16;
            if (!(lines[k] = malloc(len)))
                oom = true;
            else
                snprintf(lines[k++], len, "\"%s%s\": \"%s\"", t->name, t->bits ? sfx[j] : "", f);
        }
    }
    sbuf b = {0};
    if (!oom) {
        qsort(lines, k, sizeof *lines, cmp_str);
        sb_printf(&b, "{\n  \"metadata\": {\n    \"total_size\": %llu\n  },\n  \"weight_map\": {\n",
                  (unsigned long long)w->total_data);
        for (size_t i = 0; i < k; i++)
            sb_printf(&b, "    %s%s\n", lines[i], i + 1 < k ? "," : "");
        sb_printf(&b, "  }\n}\n");
    }
    for (size_t i = 0; i < k; i++)
        free(lines[i]);
    free(lines);
    if (oom || b.oom) {
        sb_free(&b);
        return NULL;
    }
    return b.p;
}

int stw_write_text(const char *path, const char *text, bool sync, char *err) {
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) return e0_fail(err, E0_EIO, "%s: cannot create: %s", path, strerror(errno));
    int rc = stw_pwrite(fd, text, strlen(text), 0) != 0 || (sync && fsync(fd) != 0);
    int e = errno;
    if (close(fd) != 0) rc = 1;
    return rc ? e0_fail(err, E0_EIO, "%s: write failed: %s", path, strerror(e)) : 0;
}

static char *parent_dir(const char *path) {
    const char *sl = strrchr(path, '/');
    if (!sl) return strdup(".");
    if (sl == path) return strdup("/");
    return strndup(path, (size_t)(sl - path));
}

static void sync_dir(const char *dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
}

int stw_check_space(const char *dst, uint64_t need, char *err) {
    char *par = parent_dir(dst);
    if (!par) return e0_fail(err, E0_ENOMEM, "out of memory");
    struct statvfs v;
    int rc = 0;
    if (statvfs(par, &v) != 0) {
        rc = e0_fail(err, errno == ENOENT ? E0_ENOTFOUND : E0_EIO, "%s: %s", par, strerror(errno));
    } else {
        const uint64_t avail = (uint64_t)v.f_bavail * (uint64_t)v.f_frsize;
        if (avail < need + (64u << 20))
            rc = e0_fail(err, E0_EIO, "%s: the checkpoint needs %.2f GB but only %.2f GB are free",
                         par, (double)need / 1e9, (double)avail / 1e9);
    }
    free(par);
    return rc;
}

static int rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    return remove(path) != 0 && errno != ENOENT ? -1 : 0;
}

static void rmtree(const char *dir) {
    nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* Moves the finished tmp to dst: never over an existing dst unless
 * `replace`, and then by an atomic exchange where the kernel has one, the
 * old tree removed afterwards. */
static int install(const char *tmp, const char *dst, bool replace, char *err) {
    struct stat st;
    const bool exists = lstat(dst, &st) == 0;
    if (exists && !replace)
        return e0_fail(err, E0_EINVAL, "%s appeared while it was being written; not replacing it",
                       dst);
    if (!exists) {
#ifdef RENAME_NOREPLACE
        if (renameat2(AT_FDCWD, tmp, AT_FDCWD, dst, RENAME_NOREPLACE) == 0) return 0;
        if (errno != EINVAL && errno != ENOSYS)
            return e0_fail(err, errno == EEXIST || errno == ENOTEMPTY ? E0_EINVAL : E0_EIO,
                           "rename %s -> %s: %s", tmp, dst, strerror(errno));
#endif
        if (rename(tmp, dst) != 0)
            return e0_fail(err, E0_EIO, "rename %s -> %s: %s", tmp, dst, strerror(errno));
        return 0;
    }
#ifdef RENAME_EXCHANGE
    if (renameat2(AT_FDCWD, tmp, AT_FDCWD, dst, RENAME_EXCHANGE) == 0) {
        rmtree(tmp); /* now the old dst */
        return 0;
    }
#endif
    const size_t l = strlen(dst) + 16;
    char *old = malloc(l);
    if (!old) return e0_fail(err, E0_ENOMEM, "out of memory");
    snprintf(old, l, "%s.old-XXXXXX", dst);
    int rc = 0;
    if (!mkdtemp(old) || rename(dst, old) != 0) {
        rc = e0_fail(err, E0_EIO, "cannot move %s aside: %s", dst, strerror(errno));
    } else if (rename(tmp, dst) != 0) {
        rc = e0_fail(err, E0_EIO, "rename %s -> %s: %s", tmp, dst, strerror(errno));
        rename(old, dst);
    } else {
        rmtree(old);
    }
    free(old);
    return rc;
}

/* Creates the shards in dir: space reserved up front (ENOSPC now, not at
 * 90%), headers written. */
static int open_shards(stw_run *r, const char *dir, int *nopen, char *err) {
    const stw *w = r->w;
    for (int sh = 0; sh < w->nshards; sh++) {
        char name[64];
        shard_name(w, sh, name, sizeof name);
        if (!(r->paths[sh] = e0_path_join(dir, name)))
            return e0_fail(err, E0_ENOMEM, "out of memory");
        r->fds[sh] = open(r->paths[sh], O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (r->fds[sh] < 0)
            return e0_fail(err, E0_EIO, "%s: cannot create: %s", r->paths[sh], strerror(errno));
        (*nopen)++;
        const uint64_t size = w->hdr_len[sh] + w->data_bytes[sh];
        const int e = r->o->sparse ? EOPNOTSUPP : posix_fallocate(r->fds[sh], 0, (off_t)size);
        if (e && e != EOPNOTSUPP && e != EINVAL)
            return e0_fail(err, E0_EIO, "%s: cannot reserve %.2f GB: %s", r->paths[sh],
                           (double)size / 1e9, strerror(e));
        if (e && ftruncate(r->fds[sh], (off_t)size) != 0)
            return e0_fail(err, E0_EIO, "%s: cannot size: %s", r->paths[sh], strerror(errno));
        if (stw_pwrite(r->fds[sh], w->hdr[sh], w->hdr_len[sh], 0) != 0)
            return e0_fail(err, E0_EIO, "%s: write failed: %s", r->paths[sh], strerror(errno));
    }
    return 0;
}

/* After the shards' data: synced, the index and the caller's files, closed. */
static int close_shards(stw_run *r, const char *dir, int *nopen, char *err) {
    const stw *w = r->w;
    const stw_write_opts *o = r->o;
    int rc = 0;
    if (o->sync) {
        report(r, STW_SYNCING);
        for (int sh = 0; sh < w->nshards && !rc; sh++)
            if (fsync(r->fds[sh]) != 0)
                rc = e0_fail(err, E0_EIO, "%s: fsync failed: %s", r->paths[sh], strerror(errno));
    }
    if (!rc && o->finish) rc = o->finish(o->ctx, dir, o->sync, err);
    if (!rc && (w->nshards > 1 || o->always_index)) {
        char *idx = index_json(w), *path = e0_path_join(dir, "model.safetensors.index.json");
        rc = idx && path ? stw_write_text(path, idx, o->sync, err)
                         : e0_fail(err, E0_ENOMEM, "out of memory");
        free(idx);
        free(path);
    }
    for (int sh = 0; sh < *nopen; sh++)
        if (close(r->fds[sh]) != 0 && !rc)
            rc = e0_fail(err, E0_EIO, "%s: close failed: %s", r->paths[sh], strerror(errno));
    *nopen = 0;
    return rc;
}

int stw_write(stw *w, const char *dst, const stw_write_opts *o, char *err) {
    int rc = o->sparse ? 0 : stw_check_space(dst, w->total_bytes, err);
    if (rc) return rc;
    stw_run r = {.w = w, .o = o};
    pthread_mutex_init(&r.mu, NULL);
    pthread_cond_init(&r.cv, NULL);
    const size_t tl = strlen(dst) + 16;
    char *tmp = malloc(tl);
    r.fds = malloc((size_t)w->nshards * sizeof *r.fds);
    r.paths = calloc((size_t)w->nshards, sizeof *r.paths);
    r.cum = malloc((w->njobs + 1) * sizeof *r.cum);
    int nopen = 0;
    bool made_dir = false;
    if (!tmp || !r.fds || !r.paths || !r.cum) {
        rc = e0_fail(err, E0_ENOMEM, "out of memory");
        goto done;
    }
    r.cum[0] = 0;
    for (size_t i = 0; i < w->njobs; i++) { /* jobs never cover an item of 0 rows */
        const stw_item *t = &w->items[w->jobs[i].item];
        r.cum[i + 1] = r.cum[i] + t->src_bytes / (uint64_t)t->rows * (uint64_t)w->jobs[i].n;
    }
    snprintf(tmp, tl, "%s.tmp-XXXXXX", dst);
    if (!mkdtemp(tmp)) {
        rc = e0_fail(err, E0_EIO, "%s: cannot create a directory next to it: %s", dst,
                     strerror(errno));
        goto done;
    }
    made_dir = true;
    chmod(tmp, 0755); /* mkdtemp makes it private; a model directory is not */
    if ((rc = open_shards(&r, tmp, &nopen, err))) goto done;
    if (!o->sparse && run_workers(&r) != 0) {
        rc = e0_fail(err, r.err_code ? r.err_code : E0_EIO, "%s", r.err);
        goto done;
    }
    if ((rc = close_shards(&r, tmp, &nopen, err))) goto done;
    if (o->cancel && *o->cancel) {
        rc = e0_fail(err, E0_EINVAL, "interrupted");
        goto done;
    }
    if (o->sync) sync_dir(tmp);
    if ((rc = install(tmp, dst, o->replace, err))) goto done;
    made_dir = false;
    if (o->sync) {
        char *par = parent_dir(dst);
        if (par) sync_dir(par);
        free(par);
    }
    report(&r, STW_DONE);
done:
    for (int sh = 0; sh < nopen; sh++)
        close(r.fds[sh]);
    if (made_dir) rmtree(tmp); /* leave nothing that looks finished */
    for (int sh = 0; r.paths && sh < w->nshards; sh++)
        free(r.paths[sh]);
    free(r.paths);
    free(r.fds);
    free(r.cum);
    free(tmp);
    pthread_cond_destroy(&r.cv);
    pthread_mutex_destroy(&r.mu);
    return rc;
}

void stw_sync_parent(const char *path) {
    char *par = parent_dir(path);
    if (par) sync_dir(par);
    free(par);
}

/* ---- writing ----------------------------------------------------------- */

void st_header_entry(void *json_sbuf, const char *name, const char *suffix, const char *dtype,
                     int ndim, const uint64_t *shape, uint64_t begin, uint64_t end) {
    sbuf *b = json_sbuf;
    sb_printf(b, ",\"%s%s\":{\"dtype\":\"%s\",\"shape\":[", name, suffix, dtype);
    for (int d = 0; d < ndim; d++)
        sb_printf(b, "%s%llu", d ? "," : "", (unsigned long long)shape[d]);
    sb_printf(b, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)begin,
              (unsigned long long)end);
}

int st_header_pack(const char *json, size_t len, char **out, size_t *out_len) {
    const size_t hl = (len + 7) & ~(size_t)7;
    char *h = malloc(8 + hl);
    if (!h) return E0_ENOMEM;
    for (int k = 0; k < 8; k++)
        h[k] = (char)(uint8_t)((uint64_t)hl >> (8 * k));
    memcpy(h + 8, json, len);
    memset(h + 8 + len, ' ', hl - len);
    *out = h;
    *out_len = 8 + hl;
    return 0;
}

int st_write(const char *path, const st_wtensor *t, size_t n, const char *const *meta,
             size_t n_meta, char *err) {
    cJSON *root = cJSON_CreateObject();
    if (!root) return e0_fail(err, E0_ENOMEM, "out of memory");
    int rc = 0;
    uint64_t off = 0;
    uint64_t *offs = calloc(n + 1, sizeof *offs);
    char *tmp = NULL, *json = NULL;
    FILE *f = NULL;
    if (!offs) {
        rc = e0_fail(err, E0_ENOMEM, "out of memory");
        goto done;
    }
    if (n_meta) {
        cJSON *m = cJSON_AddObjectToObject(root, "__metadata__");
        for (size_t i = 0; m && i + 1 < n_meta; i += 2)
            cJSON_AddStringToObject(m, meta[i], meta[i + 1]);
    }
    for (size_t i = 0; i < n; i++) {
        uint64_t bytes = st_dtype_size(t[i].dtype);
        for (int d = 0; d < t[i].ndim; d++)
            bytes *= t[i].shape[d];
        off = (off + 7) & ~(uint64_t)7;
        offs[i] = off;
        cJSON *e = cJSON_AddObjectToObject(root, t[i].name);
        cJSON_AddStringToObject(e, "dtype", st_dtype_name(t[i].dtype));
        cJSON *sh = cJSON_AddArrayToObject(e, "shape");
        for (int d = 0; d < t[i].ndim; d++)
            cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)t[i].shape[d]));
        cJSON *o = cJSON_AddArrayToObject(e, "data_offsets");
        cJSON_AddItemToArray(o, cJSON_CreateNumber((double)off));
        cJSON_AddItemToArray(o, cJSON_CreateNumber((double)(off + bytes)));
        off += bytes;
    }
    offs[n] = off;
    json = cJSON_PrintUnformatted(root);
    size_t tl = strlen(path) + 5;
    tmp = malloc(tl);
    if (!json || !tmp) {
        rc = e0_fail(err, E0_ENOMEM, "out of memory");
        goto done;
    }
    snprintf(tmp, tl, "%s.tmp", path);
    size_t jl = strlen(json);
    uint64_t hl = (jl + 7) & ~(size_t)7; /* pad with spaces so data starts 8-aligned */
    if (!(f = fopen(tmp, "wb"))) {
        rc = e0_fail(err, E0_EIO, "%s: cannot create: %s", tmp, strerror(errno));
        goto done;
    }
    uint8_t len8[8];
    for (int i = 0; i < 8; i++)
        len8[i] = (uint8_t)(hl >> (8 * i));
    static const char pad[8] = "        ";
    static const uint8_t zero[8];
    int ok = fwrite(len8, 8, 1, f) == 1 && fwrite(json, 1, jl, f) == jl &&
             fwrite(pad, 1, hl - jl, f) == hl - jl;
    uint64_t at = 0;
    for (size_t i = 0; ok && i < n; i++) {
        if (offs[i] > at) ok = fwrite(zero, 1, offs[i] - at, f) == offs[i] - at;
        uint64_t bytes = st_dtype_size(t[i].dtype);
        for (int d = 0; d < t[i].ndim; d++)
            bytes *= t[i].shape[d];
        if (ok && bytes) ok = fwrite(t[i].data, 1, bytes, f) == bytes;
        at = offs[i] + bytes;
    }
    if (fclose(f) != 0) ok = 0;
    f = NULL;
    if (!ok || rename(tmp, path) != 0) {
        rc = e0_fail(err, E0_EIO, "%s: write failed: %s", path, strerror(errno));
        unlink(tmp);
    }
done:
    if (f) fclose(f);
    free(tmp);
    free(json);
    free(offs);
    cJSON_Delete(root);
    return rc;
}

int e0_save_f32(const char *path, const char *name, int64_t rows, int64_t cols, const float *data,
                char *err) {
    st_wtensor t = {.name = name, .dtype = ST_F32, .ndim = 2, .shape = {(uint64_t)rows, (uint64_t)cols},
                    .data = data};
    return st_write(path, &t, 1, NULL, 0, err);
}
