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
 * The table, the limits and dlsym are in hooks.c; the driver types we need
 * (no CUDA headers) in gpushare.h.
 *
 * Kernel launches are intercepted in launchhooks.c and paced in launch.c
 * (pacing, the TGS channel). */
#define _GNU_SOURCE
#include "gpushare.h"

#include <pthread.h>
#include <stdint.h>

#define EXPORT __attribute__((visibility("default")))

/* The memory hooks' own driver types. */
typedef unsigned long long CUmemGenericAllocationHandle;
typedef unsigned long long cuuint64_t;
typedef void *CUmemoryPool;
typedef void *CUarray;
typedef void *CUmipmappedArray;
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

#define REAL(n) GS_REAL(n)
#define L gs_lim

/* ---- charging -------------------------------------------------------- */

/* Over the cap, the idle reserve of the process's pools goes back to the
 * driver first (vmm.c) and the charge is tried again. */
CUresult gs_charge(uint64_t bytes)
{
    if (!L.have_memory)
        return CUDA_SUCCESS;
    gs_settle_graph(); /* what graph launches allocated since */
    if (gs_region_charge(bytes, L.memory_bytes) == 0)
        return CUDA_SUCCESS;
    if (gs_trim_reserved() && gs_region_charge(bytes, L.memory_bytes) == 0)
        return CUDA_SUCCESS;
    return CUDA_ERROR_OUT_OF_MEMORY;
}

void gs_uncharge(uint64_t bytes)
{
    if (L.have_memory && bytes)
        gs_region_uncharge(bytes);
}

#define charge gs_charge
#define uncharge gs_uncharge

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
typedef CUresult (*cuArrayCreate_v2_fn)(CUarray *, const CUDA_ARRAY_DESCRIPTOR *);
typedef CUresult (*cuArray3DCreate_v2_fn)(CUarray *, const CUDA_ARRAY3D_DESCRIPTOR *);
typedef CUresult (*cuMipmappedArrayCreate_fn)(CUmipmappedArray *, const CUDA_ARRAY3D_DESCRIPTOR *, unsigned);
typedef CUresult (*cuMipmappedArrayDestroy_fn)(CUmipmappedArray);
typedef CUresult (*cuMemFree_v2_fn)(CUdeviceptr);
typedef CUresult (*cuMemFreeAsync_fn)(CUdeviceptr, CUstream);
typedef cuMemFreeAsync_fn cuMemFreeAsync_ptsz_fn;
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
    if (gs_unified_converts())
        return gs_unified_alloc(dptr, n); /* managed memory: unified.c */
    ALLOC_WITH(GS_PTR, *dptr, n, f(dptr, n));
}

/* The pitch is the driver's choice; charge the width rounded up to 512 bytes
 * (the usual texture pitch alignment) first, then settle on the real pitch. */
EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pitch, size_t w, size_t h,
                                   unsigned elem)
{
    cuMemAllocPitch_v2_fn f = REAL(cuMemAllocPitch_v2);
    NEED(f);
    if (gs_unified_converts())
        return gs_unified_pitch(dptr, pitch, w, h, elem);
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

/* Every level: each halves width, height and depth (never below 1; a 1D or
 * 2D array keeps its 0 height or depth). The driver clamps the count to
 * [1, 1 + log2(largest extent)], and so does this. 0 on overflow. */
static uint64_t mipmap_bytes(const CUDA_ARRAY3D_DESCRIPTOR *d, unsigned levels)
{
    size_t w = d->Width, h = d->Height, z = d->Depth;
    size_t big = w > h ? w : h;
    unsigned most = 1;
    for (big = big > z ? big : z; big > 1; big >>= 1)
        most++;
    levels = levels < 1 ? 1 : levels > most ? most : levels;
    uint64_t sum = 0;
    for (unsigned l = 0; l < levels; l++) {
        uint64_t n = array_bytes(w, h, z, d->Format, d->NumChannels);
        if ((!n && w) || __builtin_add_overflow(sum, n, &sum))
            return 0;
        w = w > 1 ? w / 2 : w;
        h = h > 1 ? h / 2 : h;
        z = z > 1 ? z / 2 : z;
    }
    return sum;
}

EXPORT CUresult cuMipmappedArrayCreate(CUmipmappedArray *m, const CUDA_ARRAY3D_DESCRIPTOR *d,
                                       unsigned levels)
{
    cuMipmappedArrayCreate_fn f = REAL(cuMipmappedArrayCreate);
    NEED(f);
    if (!d || !m)
        return f(m, d, levels);
    uint64_t n = mipmap_bytes(d, levels);
    if (!n && d->Width)
        return CUDA_ERROR_OUT_OF_MEMORY;
    ALLOC_WITH(GS_MIPMAP, (uintptr_t)*m, n, f(m, d, levels));
}

/* ---- frees ----------------------------------------------------------- */

/* A pool's allocation (vmm.c): its pool settles, what the pool keeps
 * reserved stays charged; any other pointer returns its own charge. */
#define FREE_PTR(p, call)                                                   \
    do {                                                                    \
        uint64_t pool_;                                                     \
        if (L.have_memory && gs_track_remove(GS_POOLPTR, p, &pool_) == 0)   \
            return gs_pool_free(p, (call), pool_);                          \
        FREE_WITH(GS_PTR, p, call);                                         \
    } while (0)

EXPORT CUresult cuMemFree_v2(CUdeviceptr p)
{
    cuMemFree_v2_fn f = REAL(cuMemFree_v2);
    NEED(f);
    FREE_PTR(p, f(p));
}

/* The memory returns when the stream reaches the free; the charge returns
 * now (a pool's: what the pool still reserves stays charged). A task can so
 * briefly hold a little more than its cap. */
EXPORT CUresult cuMemFreeAsync(CUdeviceptr p, CUstream s)
{
    cuMemFreeAsync_fn f = REAL(cuMemFreeAsync);
    NEED(f);
    FREE_PTR(p, f(p, s));
}

EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr p, CUstream s)
{
    cuMemFreeAsync_ptsz_fn f = REAL(cuMemFreeAsync_ptsz);
    NEED(f);
    FREE_PTR(p, f(p, s));
}

EXPORT CUresult cuArrayDestroy(CUarray a)
{
    cuArrayDestroy_fn f = REAL(cuArrayDestroy);
    NEED(f);
    FREE_WITH(GS_ARRAY, (uintptr_t)a, f(a));
}

EXPORT CUresult cuMipmappedArrayDestroy(CUmipmappedArray m)
{
    cuMipmappedArrayDestroy_fn f = REAL(cuMipmappedArrayDestroy);
    NEED(f);
    FREE_WITH(GS_MIPMAP, (uintptr_t)m, f(m));
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
    gs_settle_reserved(); /* pools' reserve, as the driver has it now */
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

EXPORT CUresult cuGetProcAddress(const char *sym, void **pfn, int ver, cuuint64_t flags)
{
    cuGetProcAddress_fn f = REAL(cuGetProcAddress);
    NEED(f);
    CUresult r = f(sym, pfn, ver, flags);
    if (r == CUDA_SUCCESS && pfn)
        *pfn = gs_to_hook(*pfn);
    return r;
}

EXPORT CUresult cuGetProcAddress_v2(const char *sym, void **pfn, int ver, cuuint64_t flags,
                                    int *status)
{
    cuGetProcAddress_v2_fn f = REAL(cuGetProcAddress_v2);
    NEED(f);
    CUresult r = f(sym, pfn, ver, flags, status);
    if (r == CUDA_SUCCESS && pfn)
        *pfn = gs_to_hook(*pfn);
    return r;
}

