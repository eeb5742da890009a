/* libcuda.so.1 opened at run time (gpu/cu.h says why). */
#include "gpu/cu.h"

#include "edge0.h"

#include <dlfcn.h>
#include <stdbool.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static cu_api g_api;
static const cu_api *g_ok;
static char g_why[E0_ERR_MAX];
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

/* Each entry point by its versioned name first (the one cuda.h's macros
 * choose today), then its first name for older drivers. */
typedef struct {
    void **slot;
    const char *name, *old;
    bool optional; /* left NULL where the driver lacks it */
} sym;

static void load_once(void) {
    const char *path = getenv("E0_LIBCUDA");
    if (!path || !*path) path = "libcuda.so.1";
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        snprintf(g_why, sizeof g_why, "no NVIDIA driver: %s", e ? e : path);
        return;
    }
    cu_api *a = &g_api;
    const sym syms[] = {
        {(void **)&a->Init, "cuInit", NULL, false},
        {(void **)&a->DriverGetVersion, "cuDriverGetVersion", NULL, false},
        {(void **)&a->DeviceGetCount, "cuDeviceGetCount", NULL, false},
        {(void **)&a->DeviceGet, "cuDeviceGet", NULL, false},
        {(void **)&a->DeviceGetName, "cuDeviceGetName", NULL, false},
        {(void **)&a->DeviceTotalMem, "cuDeviceTotalMem_v2", NULL, false},
        {(void **)&a->DeviceGetAttribute, "cuDeviceGetAttribute", NULL, false},
        {(void **)&a->DevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", NULL, false},
        {(void **)&a->DevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2",
         "cuDevicePrimaryCtxRelease", false},
        {(void **)&a->CtxSetCurrent, "cuCtxSetCurrent", NULL, false},
        {(void **)&a->CtxSynchronize, "cuCtxSynchronize", NULL, false},
        {(void **)&a->MemGetInfo, "cuMemGetInfo_v2", NULL, false},
        {(void **)&a->MemAlloc, "cuMemAlloc_v2", NULL, false},
        {(void **)&a->MemFree, "cuMemFree_v2", NULL, false},
        {(void **)&a->MemHostAlloc, "cuMemHostAlloc", NULL, false},
        {(void **)&a->MemFreeHost, "cuMemFreeHost", NULL, false},
        {(void **)&a->MemHostRegister, "cuMemHostRegister_v2", "cuMemHostRegister", false},
        {(void **)&a->MemHostUnregister, "cuMemHostUnregister", NULL, false},
        {(void **)&a->MemcpyHtoD, "cuMemcpyHtoD_v2", NULL, false},
        {(void **)&a->MemcpyDtoH, "cuMemcpyDtoH_v2", NULL, false},
        {(void **)&a->MemcpyDtoD, "cuMemcpyDtoD_v2", NULL, false},
        {(void **)&a->MemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2", NULL, false},
        {(void **)&a->MemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2", NULL, false},
        {(void **)&a->MemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2", NULL, false},
        {(void **)&a->MemsetD8Async, "cuMemsetD8Async", NULL, false},
        {(void **)&a->ModuleLoadDataEx, "cuModuleLoadDataEx", NULL, false},
        {(void **)&a->ModuleUnload, "cuModuleUnload", NULL, false},
        {(void **)&a->ModuleGetFunction, "cuModuleGetFunction", NULL, false},
        {(void **)&a->FuncSetAttribute, "cuFuncSetAttribute", NULL, false},
        {(void **)&a->LaunchKernel, "cuLaunchKernel", NULL, false},
        {(void **)&a->StreamCreate, "cuStreamCreate", NULL, false},
        {(void **)&a->StreamDestroy, "cuStreamDestroy_v2", "cuStreamDestroy", false},
        {(void **)&a->StreamSynchronize, "cuStreamSynchronize", NULL, false},
        {(void **)&a->StreamWaitEvent, "cuStreamWaitEvent", NULL, false},
        {(void **)&a->EventCreate, "cuEventCreate", NULL, false},
        {(void **)&a->EventDestroy, "cuEventDestroy_v2", "cuEventDestroy", false},
        {(void **)&a->EventRecord, "cuEventRecord", NULL, false},
        {(void **)&a->EventSynchronize, "cuEventSynchronize", NULL, false},
        {(void **)&a->EventElapsedTime, "cuEventElapsedTime_v2", "cuEventElapsedTime", false},
        {(void **)&a->GetErrorName, "cuGetErrorName", NULL, false},
        {(void **)&a->GetErrorString, "cuGetErrorString", NULL, false},
        {(void **)&a->StreamBeginCapture, "cuStreamBeginCapture_v2", NULL, true},
        {(void **)&a->StreamEndCapture, "cuStreamEndCapture", NULL, true},
        {(void **)&a->GraphInstantiateWithFlags, "cuGraphInstantiateWithFlags", NULL, true},
        {(void **)&a->GraphLaunch, "cuGraphLaunch", NULL, true},
        {(void **)&a->GraphExecDestroy, "cuGraphExecDestroy", NULL, true},
        {(void **)&a->GraphDestroy, "cuGraphDestroy", NULL, true},
    };
    for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
        void *f = dlsym(h, syms[i].name);
        if (!f && syms[i].old) f = dlsym(h, syms[i].old);
        if (!f && syms[i].optional) continue;
        if (!f) {
            snprintf(g_why, sizeof g_why, "%s lacks %s: the NVIDIA driver is too old (edge0 needs 11.0 or later)",
                     path, syms[i].name);
            dlclose(h);
            return;
        }
        *syms[i].slot = f;
    }
    CUresult r = a->Init(0);
    if (r != CU_SUCCESS) {
        char b[160];
        snprintf(g_why, sizeof g_why, "cuInit: %s", cu_errstr(r, b, sizeof b));
        dlclose(h);
        return;
    }
    g_ok = a; /* the library stays open for the process */
}

const cu_api *cu_load(char *why) {
    pthread_once(&g_once, load_once);
    if (!g_ok && why) snprintf(why, E0_ERR_MAX, "%s", g_why);
    return g_ok;
}

const char *cu_errstr(CUresult r, char *buf, size_t len) {
    const char *name = NULL, *desc = NULL;
    if (g_api.GetErrorName) g_api.GetErrorName(r, &name);
    if (g_api.GetErrorString) g_api.GetErrorString(r, &desc);
    if (name && desc)
        snprintf(buf, len, "%s (%s)", name, desc);
    else
        snprintf(buf, len, "CUDA error %d", r);
    return buf;
}
