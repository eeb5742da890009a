/* The part of NVIDIA's CUDA driver API that edge0 uses, reached at run time.
 *
 * edge0 builds and runs without the CUDA toolkit (CI has neither a GPU nor
 * nvcc): libcuda.so.1, which every NVIDIA driver installs, is opened with
 * dlopen when a GPU is asked for, and its entry points are looked up by
 * name. The declarations below restate the few types and constants of
 * cuda.h that those entry points take, with the ABI the driver has kept
 * stable since CUDA 4 (handles are pointers, CUdeviceptr is 64 bits, the
 * `_v2` entry points take size_t sizes). Nothing here needs cuda.h.
 *
 * Kernels reach the driver as PTX text (src/gpu/kernels.ptx, made from
 * kernels.cu by scripts/gpu_ptx.sh and committed): cuModuleLoadData JIT-
 * compiles it for whatever card is present (docs/design.md says why).
 */
#ifndef E0_GPU_CU_H
#define E0_GPU_CU_H

#include <stddef.h>
#include <stdint.h>

typedef int CUresult; /* CUDA_SUCCESS (0) or a CUDA_ERROR_* code */
typedef int CUdevice;
typedef uint64_t CUdeviceptr;
typedef struct CUctx_st *CUcontext;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;
typedef struct CUgraph_st *CUgraph;
typedef struct CUgraphExec_st *CUgraphExec;

enum {
    CU_SUCCESS = 0,
    CU_ERROR_OUT_OF_MEMORY = 2,
    CU_ERROR_NO_DEVICE = 100,
    CU_ERROR_INVALID_DEVICE = 101,
};

/* cuDeviceGetAttribute */
enum {
    CU_ATTR_MULTIPROCESSOR_COUNT = 16,
    CU_ATTR_COMPUTE_CAPABILITY_MAJOR = 75,
    CU_ATTR_COMPUTE_CAPABILITY_MINOR = 76,
    CU_ATTR_HOST_POINTER_FOR_REGISTERED_MEM = 91,
    CU_ATTR_MAX_SHARED_PER_BLOCK_OPTIN = 97,
};

enum { CU_STREAM_NON_BLOCKING = 1 };
/* cuStreamBeginCapture: only this thread's calls are checked against the capture */
enum { CU_STREAM_CAPTURE_MODE_THREAD_LOCAL = 1 };
enum { CU_EVENT_DEFAULT = 0, CU_EVENT_DISABLE_TIMING = 2 };
enum { CU_MEMHOSTALLOC_PORTABLE = 1 };
/* cuMemHostRegister: READ_ONLY lets a read-only mapping (a checkpoint's) be pinned */
/* DEVICEMAP: the kernels may read it (at the host's own address where
 * the device says CU_ATTR_HOST_POINTER_FOR_REGISTERED_MEM) */
enum { CU_MEMHOSTREGISTER_PORTABLE = 1, CU_MEMHOSTREGISTER_DEVICEMAP = 2, CU_MEMHOSTREGISTER_READ_ONLY = 8 };
/* cuModuleLoadDataEx options */
enum { CU_JIT_ERROR_LOG_BUFFER = 5, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES = 6 };
/* cuFuncSetAttribute */
enum { CU_FUNC_ATTR_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8 };

/* The driver's entry points, filled by cu_load. */
typedef struct {
    CUresult (*Init)(unsigned flags);
    CUresult (*DriverGetVersion)(int *v);
    CUresult (*DeviceGetCount)(int *n);
    CUresult (*DeviceGet)(CUdevice *d, int ordinal);
    CUresult (*DeviceGetName)(char *name, int len, CUdevice d);
    CUresult (*DeviceTotalMem)(size_t *bytes, CUdevice d);
    CUresult (*DeviceGetAttribute)(int *v, int attr, CUdevice d);
    CUresult (*DevicePrimaryCtxRetain)(CUcontext *c, CUdevice d);
    CUresult (*DevicePrimaryCtxRelease)(CUdevice d);
    CUresult (*CtxSetCurrent)(CUcontext c);
    CUresult (*CtxSynchronize)(void);
    CUresult (*MemGetInfo)(size_t *free_b, size_t *total_b);
    CUresult (*MemAlloc)(CUdeviceptr *p, size_t bytes);
    CUresult (*MemFree)(CUdeviceptr p);
    CUresult (*MemHostAlloc)(void **p, size_t bytes, unsigned flags);
    CUresult (*MemFreeHost)(void *p);
    CUresult (*MemHostRegister)(void *p, size_t bytes, unsigned flags);
    CUresult (*MemHostUnregister)(void *p);
    CUresult (*MemcpyHtoD)(CUdeviceptr dst, const void *src, size_t bytes);
    CUresult (*MemcpyDtoH)(void *dst, CUdeviceptr src, size_t bytes);
    CUresult (*MemcpyDtoD)(CUdeviceptr dst, CUdeviceptr src, size_t bytes);
    CUresult (*MemcpyHtoDAsync)(CUdeviceptr dst, const void *src, size_t bytes, CUstream s);
    CUresult (*MemcpyDtoHAsync)(void *dst, CUdeviceptr src, size_t bytes, CUstream s);
    CUresult (*MemcpyDtoDAsync)(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream s);
    CUresult (*MemsetD8Async)(CUdeviceptr p, unsigned char v, size_t n, CUstream s);
    CUresult (*ModuleLoadDataEx)(CUmodule *m, const void *image, unsigned n, int *opts, void **vals);
    CUresult (*ModuleUnload)(CUmodule m);
    CUresult (*ModuleGetFunction)(CUfunction *f, CUmodule m, const char *name);
    CUresult (*FuncSetAttribute)(CUfunction f, int attr, int v);
    CUresult (*LaunchKernel)(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                             unsigned by, unsigned bz, unsigned shmem, CUstream s, void **params,
                             void **extra);
    CUresult (*StreamCreate)(CUstream *s, unsigned flags);
    CUresult (*StreamDestroy)(CUstream s);
    CUresult (*StreamSynchronize)(CUstream s);
    CUresult (*StreamWaitEvent)(CUstream s, CUevent e, unsigned flags);
    CUresult (*EventCreate)(CUevent *e, unsigned flags);
    CUresult (*EventDestroy)(CUevent e);
    CUresult (*EventRecord)(CUevent e, CUstream s);
    CUresult (*EventSynchronize)(CUevent e);
    CUresult (*EventElapsedTime)(float *ms, CUevent a, CUevent b);
    CUresult (*GetErrorName)(CUresult r, const char **s);
    CUresult (*GetErrorString)(CUresult r, const char **s);
    /* CUDA graphs (driver 11.4 or later); NULL where the driver lacks
     * them, and the decode step then launches kernel by kernel */
    CUresult (*StreamBeginCapture)(CUstream s, int mode);
    CUresult (*StreamEndCapture)(CUstream s, CUgraph *g);
    CUresult (*GraphInstantiateWithFlags)(CUgraphExec *e, CUgraph g, unsigned long long flags);
    CUresult (*GraphLaunch)(CUgraphExec e, CUstream s);
    CUresult (*GraphExecDestroy)(CUgraphExec e);
    CUresult (*GraphDestroy)(CUgraph g);
} cu_api;

/* Opens libcuda.so.1 (or $E0_LIBCUDA) once per process and calls cuInit:
 * the API, or NULL with `why` (at least E0_ERR_MAX bytes) saying in one
 * line what is missing ("libcuda.so.1: cannot open shared object file",
 * "cuInit: CUDA_ERROR_NO_DEVICE (no CUDA-capable device is detected)").
 * Thread-safe; the result is kept for the process. */
const cu_api *cu_load(char *why);

/* "NAME (description)" of a driver status, for messages. */
const char *cu_errstr(CUresult r, char *buf, size_t len);

#endif
