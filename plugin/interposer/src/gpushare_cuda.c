/* gpushare CUDA interposer: holds a task to its reservation's GPU memory.
 *
 * Loaded into every process of a task (LD_PRELOAD here; /etc/ld.so.preload
 * in a later step), it stands in front of the real libcuda.so.1. One hook
 * table lists each intercepted driver symbol with our hook and the real
 * function, resolved once (at the first driver call); the same table
 * answers the three ways a program finds a driver function:
 *   - symbol interposition: the program links libcuda and calls cuMemAlloc_v2,
 *     the dynamic linker finds ours first;
 *   - dlsym: the program dlopens libcuda.so.1 and resolves names from the
 *     handle (the CUDA runtime does), so we interpose dlsym itself;
 *   - cuGetProcAddress(_v2): CUDA 11.3+ runtimes ask the driver for a
 *     version-specific function by base name; we let the real driver pick the
 *     version and swap the pointer it returns for our hook by identity.
 *
 * Limits are read once, at load, from /run/gpushare when it holds a limits
 * file (the plugin's read-only mount in an isolated task), else from the
 * directory named by GPUSHARE_LIMITS (raw_exec); file "limits", the usage
 * region is the file "usage" beside it. GPUSHARE_REAL_LIBCUDA names the
 * real driver library, for tests only. Setting either variable after the
 * process started changes nothing, as they are never read again.
 *
 * Kernel launches are not intercepted here; when they are, their hooks must
 * not allocate, lock or call getenv. */
#define _GNU_SOURCE
#include "gpushare.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Where the plugin mounts a reservation's directory in an isolated task. */
#ifndef GS_FIXED_DIR
#define GS_FIXED_DIR "/run/gpushare"
#endif

#define EXPORT __attribute__((visibility("default")))

/* The few driver types we need (no CUDA headers): 64-bit ABI. */
typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef unsigned long long CUmemGenericAllocationHandle;
typedef unsigned long long cuuint64_t;
typedef void *CUstream;
typedef void *CUmemoryPool;
typedef void *CUarray;
typedef struct {
    size_t Width, Height;
    int Format;
    unsigned NumChannels;
} CUDA_ARRAY_DESCRIPTOR;
typedef struct {
    size_t Width, Height, Depth;
    int Format;
    unsigned NumChannels, Flags;
} CUDA_ARRAY3D_DESCRIPTOR;

enum {
    CUDA_SUCCESS = 0,
    CUDA_ERROR_OUT_OF_MEMORY = 2,
    CUDA_ERROR_NOT_INITIALIZED = 3,
    CUDA_ERROR_NOT_FOUND = 500,
};

/* ---- the hook table -------------------------------------------------- */

/* Every intercepted symbol, once. The _ptsz variants are what
 * cuGetProcAddress hands out under per-thread default streams. */
#define GS_HOOKS(X)                                                         \
    X(cuMemAlloc_v2) X(cuMemAllocPitch_v2) X(cuMemAllocManaged)             \
    X(cuMemAllocAsync) X(cuMemAllocAsync_ptsz) X(cuMemAllocFromPoolAsync)   \
    X(cuMemAllocFromPoolAsync_ptsz) X(cuMemCreate) X(cuArrayCreate_v2)      \
    X(cuArray3DCreate_v2) X(cuMemFree_v2) X(cuMemFreeAsync)                 \
    X(cuMemFreeAsync_ptsz) X(cuMemRelease) X(cuArrayDestroy)                \
    X(cuMemGetInfo_v2) X(cuDeviceTotalMem_v2) X(cuGetProcAddress)           \
    X(cuGetProcAddress_v2)

#define X_ENUM(n) H_##n,
enum { GS_HOOKS(X_ENUM) H_COUNT };

struct gs_hook {
    const char *name;
    void *hook; /* ours */
    void *real; /* the driver's, NULL when it lacks the symbol */
};
static struct gs_hook hooks[H_COUNT]; /* defined, with its names and hooks, at the end */

static struct gs_limits L;
static char real_path[4096] = "libcuda.so.1";
static char usage_path[4096];
static pthread_once_t load_once = PTHREAD_ONCE_INIT, driver_once = PTHREAD_ONCE_INIT;
static void *(*real_dlsym)(void *, const char *);

/* The real dlsym, found with dlvsym (which we do not interpose): our own
 * dlsym would answer with our hooks. The version names differ by
 * architecture and glibc release. */
static void find_real_dlsym(void)
{
    static const char *vers[] = {"GLIBC_2.34", "GLIBC_2.17", "GLIBC_2.2.5", "GLIBC_2.0"};
    for (size_t i = 0; !real_dlsym && i < sizeof vers / sizeof vers[0]; i++)
        real_dlsym = (void *(*)(void *, const char *))dlvsym(RTLD_NEXT, "dlsym", vers[i]);
}

/* At load: the environment and the limits file, read here and never again,
 * so what the task sets later changes nothing. Nothing heavier: every
 * process of the task loads the library, most never touch the GPU. */
static void load_limits(void)
{
    const char *lib = getenv("GPUSHARE_REAL_LIBCUDA");
    if (lib && *lib)
        snprintf(real_path, sizeof real_path, "%s", lib);
    /* The plugin mounts the reservation's directory read-only at a fixed
     * path in a filesystem-isolated task (exec, docker): there it wins over
     * the environment, which the task controls. raw_exec tasks see the
     * host, where only GPUSHARE_LIMITS names it. */
    const char *dir = getenv("GPUSHARE_LIMITS");
    if (access(GS_FIXED_DIR "/limits", F_OK) == 0)
        dir = GS_FIXED_DIR;
    if (!dir || !*dir)
        return; /* not under gpushare: pass everything through */
    char path[4096];
    snprintf(path, sizeof path, "%s/limits", dir);
    if (gs_limits_read(path, &L) != 0) {
        /* fail closed: a broken limits file must not mean "no limit" */
        fprintf(stderr, "gpushare: cannot read limits %s: refusing GPU memory\n", path);
        L.have_memory = 1;
        L.memory_bytes = 0;
        return;
    }
    snprintf(usage_path, sizeof usage_path, "%s/usage", dir);
}

/* At the first driver call: the real driver and the usage region. */
static void load_driver(void)
{
    pthread_once(&load_once, load_limits);
    find_real_dlsym();
    void *h = dlopen(real_path, RTLD_NOW | RTLD_LOCAL);
    if (!h)
        fprintf(stderr, "gpushare: cannot load the CUDA driver: %s\n", dlerror());
    for (int i = 0; i < H_COUNT && h && real_dlsym; i++)
        hooks[i].real = real_dlsym(h, hooks[i].name);
    if (L.have_memory && usage_path[0] && gs_region_open(usage_path) != 0)
        fprintf(stderr, "gpushare: cannot open usage region %s: refusing GPU memory\n", usage_path);
}

/* Runs at load; the first hook also makes sure of it, in case another
 * library's constructor reaches the driver before ours ran. */
__attribute__((constructor)) static void gs_load(void)
{
    pthread_once(&load_once, load_limits);
}

#define REAL(n) ((n##_fn)(pthread_once(&driver_once, load_driver), hooks[H_##n].real))

/* ---- charging -------------------------------------------------------- */

static CUresult charge(uint64_t bytes)
{
    if (!L.have_memory)
        return CUDA_SUCCESS;
    return gs_region_charge(bytes, L.memory_bytes) == 0 ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

static void uncharge(uint64_t bytes)
{
    if (L.have_memory)
        gs_region_uncharge(bytes);
}

/* After a successful allocation: remember what it was charged. If the record
 * cannot be kept the charge stays (freed memory then stays counted, never the
 * other way round). */
static void record(enum gs_kind k, uint64_t key, uint64_t bytes)
{
    if (L.have_memory)
        gs_track_add(k, key, bytes);
}

/* A free: the record is taken out before the real free, so an address the
 * driver hands out again meanwhile is not confused with this one, and put
 * back if the driver refuses the free. */
#define FREE_WITH(kind, key, call)                                  \
    do {                                                            \
        uint64_t b_ = 0;                                            \
        int had_ = L.have_memory && gs_track_remove(kind, key, &b_) == 0; \
        CUresult r_ = (call);                                       \
        if (had_) {                                                 \
            if (r_ == CUDA_SUCCESS)                                 \
                gs_region_uncharge(b_);                             \
            else                                                    \
                gs_track_add(kind, key, b_);                        \
        }                                                           \
        return r_;                                                  \
    } while (0)

/* ---- allocation hooks ------------------------------------------------ */

typedef CUresult (*cuMemAlloc_v2_fn)(CUdeviceptr *, size_t);
typedef CUresult (*cuMemAllocPitch_v2_fn)(CUdeviceptr *, size_t *, size_t, size_t, unsigned);
typedef CUresult (*cuMemAllocManaged_fn)(CUdeviceptr *, size_t, unsigned);
typedef CUresult (*cuMemAllocAsync_fn)(CUdeviceptr *, size_t, CUstream);
typedef cuMemAllocAsync_fn cuMemAllocAsync_ptsz_fn;
typedef CUresult (*cuMemAllocFromPoolAsync_fn)(CUdeviceptr *, size_t, CUmemoryPool, CUstream);
typedef cuMemAllocFromPoolAsync_fn cuMemAllocFromPoolAsync_ptsz_fn;
typedef CUresult (*cuMemCreate_fn)(CUmemGenericAllocationHandle *, size_t, const void *, unsigned long long);
typedef CUresult (*cuArrayCreate_v2_fn)(CUarray *, const CUDA_ARRAY_DESCRIPTOR *);
typedef CUresult (*cuArray3DCreate_v2_fn)(CUarray *, const CUDA_ARRAY3D_DESCRIPTOR *);
typedef CUresult (*cuMemFree_v2_fn)(CUdeviceptr);
typedef CUresult (*cuMemFreeAsync_fn)(CUdeviceptr, CUstream);
typedef cuMemFreeAsync_fn cuMemFreeAsync_ptsz_fn;
typedef CUresult (*cuMemRelease_fn)(CUmemGenericAllocationHandle);
typedef CUresult (*cuArrayDestroy_fn)(CUarray);
typedef CUresult (*cuMemGetInfo_v2_fn)(size_t *, size_t *);
typedef CUresult (*cuDeviceTotalMem_v2_fn)(size_t *, CUdevice);
typedef CUresult (*cuGetProcAddress_fn)(const char *, void **, int, cuuint64_t);
typedef CUresult (*cuGetProcAddress_v2_fn)(const char *, void **, int, cuuint64_t, int *);

/* The common shape: charge, call, record or give the charge back. */
#define ALLOC_WITH(kind, keyexpr, bytes, call)          \
    do {                                                \
        uint64_t n_ = (bytes);                          \
        if (charge(n_) != CUDA_SUCCESS)                 \
            return CUDA_ERROR_OUT_OF_MEMORY;            \
        CUresult r_ = (call);                           \
        if (r_ == CUDA_SUCCESS)                         \
            record(kind, (uint64_t)(keyexpr), n_);      \
        else                                            \
            uncharge(n_);                               \
        return r_;                                      \
    } while (0)

#define NEED(f)                     \
    if (!(f))                       \
        return CUDA_ERROR_NOT_FOUND

EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t n)
{
    cuMemAlloc_v2_fn f = REAL(cuMemAlloc_v2);
    NEED(f);
    ALLOC_WITH(GS_PTR, *dptr, n, f(dptr, n));
}

EXPORT CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t n, unsigned flags)
{
    cuMemAllocManaged_fn f = REAL(cuMemAllocManaged);
    NEED(f);
    ALLOC_WITH(GS_PTR, *dptr, n, f(dptr, n, flags));
}

EXPORT CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t n, CUstream s)
{
    cuMemAllocAsync_fn f = REAL(cuMemAllocAsync);
    NEED(f);
    ALLOC_WITH(GS_PTR, *dptr, n, f(dptr, n, s));
}

EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t n, CUstream s)
{
    cuMemAllocAsync_ptsz_fn f = REAL(cuMemAllocAsync_ptsz);
    NEED(f);
    ALLOC_WITH(GS_PTR, *dptr, n, f(dptr, n, s));
}

EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t n, CUmemoryPool p, CUstream s)
{
    cuMemAllocFromPoolAsync_fn f = REAL(cuMemAllocFromPoolAsync);
    NEED(f);
    ALLOC_WITH(GS_PTR, *dptr, n, f(dptr, n, p, s));
}

EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t n, CUmemoryPool p, CUstream s)
{
    cuMemAllocFromPoolAsync_ptsz_fn f = REAL(cuMemAllocFromPoolAsync_ptsz);
    NEED(f);
    ALLOC_WITH(GS_PTR, *dptr, n, f(dptr, n, p, s));
}

EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *h, size_t n, const void *prop,
                            unsigned long long flags)
{
    cuMemCreate_fn f = REAL(cuMemCreate);
    NEED(f);
    ALLOC_WITH(GS_HANDLE, *h, n, f(h, n, prop, flags));
}

/* The pitch is the driver's choice; charge the width rounded up to 512 bytes
 * (the usual texture pitch alignment) first, then settle on the real pitch. */
EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pitch, size_t w, size_t h,
                                   unsigned elem)
{
    cuMemAllocPitch_v2_fn f = REAL(cuMemAllocPitch_v2);
    NEED(f);
    uint64_t est;
    if (w > UINT64_MAX - 511 || __builtin_mul_overflow((w + 511) / 512 * 512, h, &est))
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (charge(est) != CUDA_SUCCESS)
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult r = f(dptr, pitch, w, h, elem);
    if (r != CUDA_SUCCESS) {
        uncharge(est);
        return r;
    }
    uint64_t real = (uint64_t)*pitch * h;
    if (L.have_memory && real > est)
        gs_region_force_charge(real - est);
    else if (real < est)
        uncharge(est - real);
    record(GS_PTR, *dptr, real);
    return r;
}

/* Bytes per channel of a CUarray_format; formats this table does not know
 * (block-compressed, packed YUV) are counted at 4 bytes, an estimate. */
static uint64_t format_bytes(int format)
{
    switch (format) {
    case 0x01: case 0x08: return 1;            /* (un)signed int8 */
    case 0x02: case 0x09: case 0x10: return 2; /* (un)signed int16, half */
    default: return 4;                         /* int32, float, unknown */
    }
}

/* Width x height x depth x channels x element; 0 on overflow (refused). */
static uint64_t array_bytes(size_t w, size_t h, size_t d, int format, unsigned ch)
{
    uint64_t n = format_bytes(format), out;
    if (__builtin_mul_overflow(n, (uint64_t)(ch ? ch : 1), &out) ||
        __builtin_mul_overflow(out, (uint64_t)w, &out) ||
        __builtin_mul_overflow(out, (uint64_t)(h ? h : 1), &out) ||
        __builtin_mul_overflow(out, (uint64_t)(d ? d : 1), &out))
        return 0;
    return out;
}

EXPORT CUresult cuArrayCreate_v2(CUarray *a, const CUDA_ARRAY_DESCRIPTOR *d)
{
    cuArrayCreate_v2_fn f = REAL(cuArrayCreate_v2);
    NEED(f);
    if (!d || !a)
        return f(a, d); /* let the driver report the bad argument */
    uint64_t n = array_bytes(d->Width, d->Height, 1, d->Format, d->NumChannels);
    if (!n && d->Width)
        return CUDA_ERROR_OUT_OF_MEMORY;
    ALLOC_WITH(GS_ARRAY, (uintptr_t)*a, n, f(a, d));
}

EXPORT CUresult cuArray3DCreate_v2(CUarray *a, const CUDA_ARRAY3D_DESCRIPTOR *d)
{
    cuArray3DCreate_v2_fn f = REAL(cuArray3DCreate_v2);
    NEED(f);
    if (!d || !a)
        return f(a, d);
    uint64_t n = array_bytes(d->Width, d->Height, d->Depth, d->Format, d->NumChannels);
    if (!n && d->Width)
        return CUDA_ERROR_OUT_OF_MEMORY;
    ALLOC_WITH(GS_ARRAY, (uintptr_t)*a, n, f(a, d));
}

/* ---- frees ----------------------------------------------------------- */

EXPORT CUresult cuMemFree_v2(CUdeviceptr p)
{
    cuMemFree_v2_fn f = REAL(cuMemFree_v2);
    NEED(f);
    FREE_WITH(GS_PTR, p, f(p));
}

/* The memory returns when the stream reaches the free; the charge returns
 * now. A task can so briefly hold a little more than its cap. */
EXPORT CUresult cuMemFreeAsync(CUdeviceptr p, CUstream s)
{
    cuMemFreeAsync_fn f = REAL(cuMemFreeAsync);
    NEED(f);
    FREE_WITH(GS_PTR, p, f(p, s));
}

EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr p, CUstream s)
{
    cuMemFreeAsync_ptsz_fn f = REAL(cuMemFreeAsync_ptsz);
    NEED(f);
    FREE_WITH(GS_PTR, p, f(p, s));
}

EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle h)
{
    cuMemRelease_fn f = REAL(cuMemRelease);
    NEED(f);
    FREE_WITH(GS_HANDLE, h, f(h));
}

EXPORT CUresult cuArrayDestroy(CUarray a)
{
    cuArrayDestroy_fn f = REAL(cuArrayDestroy);
    NEED(f);
    FREE_WITH(GS_ARRAY, (uintptr_t)a, f(a));
}

/* ---- what the task sees ---------------------------------------------- */

/* Total is the cap (or the GPU, if smaller); free is what the reservation
 * has left, never more than the GPU really has free. Greedy allocators size
 * themselves from this. */
EXPORT CUresult cuMemGetInfo_v2(size_t *free_b, size_t *total_b)
{
    cuMemGetInfo_v2_fn f = REAL(cuMemGetInfo_v2);
    NEED(f);
    CUresult r = f(free_b, total_b);
    if (r != CUDA_SUCCESS || !L.have_memory || !free_b || !total_b)
        return r;
    uint64_t cap = L.memory_bytes, used = gs_region_used();
    uint64_t left = used < cap ? cap - used : 0;
    if (cap < *total_b)
        *total_b = cap;
    if (left < *free_b)
        *free_b = left;
    return r;
}

EXPORT CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
    cuDeviceTotalMem_v2_fn f = REAL(cuDeviceTotalMem_v2);
    NEED(f);
    CUresult r = f(bytes, dev);
    if (r == CUDA_SUCCESS && L.have_memory && bytes && L.memory_bytes < *bytes)
        *bytes = L.memory_bytes;
    return r;
}

/* ---- the two lookup paths -------------------------------------------- */

/* The driver picked the function for the caller's version and flags; if it
 * is one we stand in front of, hand out our hook instead. */
static void *to_hook(void *p)
{
    for (int i = 0; p && i < H_COUNT; i++)
        if (hooks[i].real == p)
            return hooks[i].hook;
    return p;
}

EXPORT CUresult cuGetProcAddress(const char *sym, void **pfn, int ver, cuuint64_t flags)
{
    cuGetProcAddress_fn f = REAL(cuGetProcAddress);
    NEED(f);
    CUresult r = f(sym, pfn, ver, flags);
    if (r == CUDA_SUCCESS && pfn)
        *pfn = to_hook(*pfn);
    return r;
}

EXPORT CUresult cuGetProcAddress_v2(const char *sym, void **pfn, int ver, cuuint64_t flags,
                                    int *status)
{
    cuGetProcAddress_v2_fn f = REAL(cuGetProcAddress_v2);
    NEED(f);
    CUresult r = f(sym, pfn, ver, flags, status);
    if (r == CUDA_SUCCESS && pfn)
        *pfn = to_hook(*pfn);
    return r;
}

/* dlsym: intercepted names from any handle get our hook, if the driver has
 * the symbol at all. Every other name goes straight to the real dlsym as a
 * tail call, so the return address it sees (which RTLD_NEXT is relative to)
 * is still the caller's. Needs nothing but the real dlsym: libraries
 * that call dlsym from their constructors reach here before ours ran. */
EXPORT void *dlsym(void *handle, const char *name)
{
    if (!real_dlsym)
        find_real_dlsym();
    if (!real_dlsym)
        return NULL; /* not glibc: nothing sensible to forward to */
    if (name[0] == 'c' && name[1] == 'u') {
        for (int i = 0; i < H_COUNT; i++)
            if (strcmp(hooks[i].name, name) == 0)
                return real_dlsym(handle, name) ? hooks[i].hook : NULL;
    }
    return real_dlsym(handle, name);
}

/* Names and our hooks are constants; only .real is written, once, by load_driver. */
#define X_FILL(n) [H_##n] = {#n, (void *)n, NULL},
static struct gs_hook hooks[H_COUNT] = {GS_HOOKS(X_FILL)};
#undef X_FILL
