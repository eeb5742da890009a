/* A decode pass's timeline on the device (gpu/gpu.h gpu_trace_*): where a
 * VRAM cache's decode step spends its time between the routing readbacks,
 * the misses' copies, the guessed copies on the copy stream and the
 * kernels, which per-kernel timing ($E0_GPU_PROFILE, which waits after
 * every launch) hides by serialising them. Events only: nothing waits
 * until the pass is over. */
#include "gpu/gpu.h"
#include "util/clock.h"

#include <stdio.h>
#include <stdlib.h>

void gpu_trace_open(gpu_dev *d) {
    const char *v = getenv("E0_GPU_TRACE");
    const int at = v ? atoi(v) : 0;
    if (at <= 0 || !(d->trace = calloc(1, sizeof *d->trace))) return;
    d->trace->at = at;
}

void gpu_trace_close(gpu_dev *d) {
    gpu_trace_t *t = d->trace;
    if (!t) return;
    for (int i = 0; i < GPU_TRACE_MAX; i++)
        if (t->ev[i]) d->cu->EventDestroy(t->ev[i]);
    free(t);
    d->trace = NULL;
}

void gpu_trace(gpu_dev *d, bool copy_stream, const char *what, int layer) {
    gpu_trace_t *t = d->trace;
    if (!t || !t->on || t->n >= GPU_TRACE_MAX) return;
    const int i = t->n;
    if (!t->ev[i] && d->cu->EventCreate(&t->ev[i], CU_EVENT_DEFAULT) != CU_SUCCESS) {
        t->ev[i] = NULL;
        return;
    }
    if (d->cu->EventRecord(t->ev[i], copy_stream ? d->cs : d->st) != CU_SUCCESS) return;
    t->what[i] = what, t->layer[i] = layer, t->copy[i] = copy_stream, t->host[i] = now_s();
    t->n++;
}

bool gpu_trace_begin(gpu_dev *d, int T) {
    gpu_trace_t *t = d->trace;
    if (!t || T != 1) return false;
    t->on = ++t->passes == t->at;
    t->n = 0;
    gpu_trace(d, false, "pass", -1);
    return t->on;
}

void gpu_trace_end(gpu_dev *d) {
    gpu_trace_t *t = d->trace;
    if (!t || !t->on) return;
    t->on = false;
    if (!t->n || d->cu->StreamSynchronize(d->cs) != CU_SUCCESS || d->cu->StreamSynchronize(d->st) != CU_SUCCESS)
        return;
    fprintf(stderr, "GPU %d trace (E0_GPU_TRACE=%d): pass %d, %d points; ms from the pass's start, device / host\n",
            d->ordinal, t->at, t->passes, t->n);
    for (int i = 0; i < t->n; i++) {
        float ms = 0;
        if (d->cu->EventElapsedTime(&ms, t->ev[0], t->ev[i]) != CU_SUCCESS) ms = -1;
        fprintf(stderr, "  %8.3f %8.3f  %-6s layer %3d  %s\n", (double)ms, 1e3 * (t->host[i] - t->host[0]),
                t->copy[i] ? "copy" : "stream", t->layer[i], t->what[i]);
    }
}
