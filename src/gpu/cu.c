/* libcuda.so.1 opened at run time (gpu/cu.h says why). */
#include "gpu/cu.h"

#include "edge0.h"

#include <dlfcn.h>
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
        {(void **)&a->Init, "cuInit", NULL},
        {(void **)&a->DriverGetVersion, "cuDriverGetVersion", NULL},
        {(void **)&a->DeviceGetCount, "cuDeviceGetCount", NULL},
        {(void **)&a->DeviceGet, "cuDeviceGet", NULL},
        {(void **)&a->DeviceGetName, "cuDeviceGetName", NULL},
        {(void **)&a->DeviceTotalMem, "cuDeviceTotalMem_v2", NULL},
        {(void **)&a->DeviceGetAttribute, "cuDeviceGetAttribute", NULL},
        {(void **)&a->DevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", NULL},
        {(void **)&a->DevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2",
         "cuDevicePrimaryCtxRelease"},
        {(void **)&a->CtxSetCurrent, "cuCtxSetCurrent", NULL},
        {(void **)&a->CtxSynchronize, "cuCtxSynchronize", NULL},
        {(void **)&a->MemGetInfo, "cuMemGetInfo_v2", NULL},
        {(void **)&a->MemAlloc, "cuMemAlloc_v2", NULL},
        {(void **)&a->MemFree, "cuMemFree_v2", NULL},
        {(void **)&a->MemHostAlloc, "cuMemHostAlloc", NULL},
        {(void **)&a->MemFreeHost, "cuMemFreeHost", NULL},
        {(void **)&a->MemHostRegister, "cuMemHostRegister_v2", "cuMemHostRegister"},
        {(void **)&a->MemHostUnregister, "cuMemHostUnregister", NULL},
        {(void **)&a->MemcpyHtoD, "cuMemcpyHtoD_v2", NULL},
        {(void **)&a->MemcpyDtoH, "cuMemcpyDtoH_v2", NULL},
        {(void **)&a->MemcpyDtoD, "cuMemcpyDtoD_v2", NULL},
        {(void **)&a->MemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2", NULL},
        {(void **)&a->MemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2", NULL},
        {(void **)&a->MemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2", NULL},
        {(void **)&a->MemsetD8Async, "cuMemsetD8Async", NULL},
        {(void **)&a->ModuleLoadDataEx, "cuModuleLoadDataEx", NULL},
        {(void **)&a->ModuleUnload, "cuModuleUnload", NULL},
        {(void **)&a->ModuleGetFunction, "cuModuleGetFunction", NULL},
        {(void **)&a->FuncSetAttribute, "cuFuncSetAttribute", NULL},
        {(void **)&a->LaunchKernel, "cuLaunchKernel", NULL},
        {(void **)&a->StreamCreate, "cuStreamCreate", NULL},
        {(void **)&a->StreamDestroy, "cuStreamDestroy_v2", "cuStreamDestroy"},
        {(void **)&a->StreamSynchronize, "cuStreamSynchronize", NULL},
        {(void **)&a->EventCreate, "cuEventCreate", NULL},
        {(void **)&a->EventDestroy, "cuEventDestroy_v2", "cuEventDestroy"},
        {(void **)&a->EventRecord, "cuEventRecord", NULL},
        {(void **)&a->EventSynchronize, "cuEventSynchronize", NULL},
        {(void **)&a->EventElapsedTime, "cuEventElapsedTime_v2", "cuEventElapsedTime"},
        {(void **)&a->GetErrorName, "cuGetErrorName", NULL},
        {(void **)&a->GetErrorString, "cuGetErrorString", NULL},
    };
    for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
        void *f = dlsym(h, syms[i].name);
        if (!f && syms[i].old) f = dlsym(h, syms[i].old);
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
