/* gpushare CUDA interposer: transparent unified memory (TGS's second
 * mechanism), when the plugin's limits file says unified_memory=1.
 *
 * An opportunistic task's device allocations (cuMemAlloc_v2,
 * cuMemAllocPitch_v2) become managed memory (cuMemAllocManaged, attached
 * globally): the driver may evict its pages to host memory when the GPU's
 * memory runs short, where device memory would have to stay. The rule for
 * charging, one counter per reservation as before:
 *
 *   - memory that cannot be evicted (everything a production or normal task
 *     allocates, and an opportunistic task's pools, cuMemCreate handles and
 *     arrays) must fit under the cap: charged only while the reservation's
 *     whole use, evictable or not, stays within memory_bytes;
 *   - an opportunistic task's managed memory (converted or its own) may go
 *     beyond the cap, up to memory_bytes + unified_extra_bytes.
 *
 * So what an opportunistic reservation holds on the device that the driver
 * cannot take back never exceeds the share the scheduler gave it, whatever
 * its estimates were; the extra is bounded (it lands in host memory when
 * evicted, and a runaway task must still hit a wall).
 *
 * A production task's own managed allocations get preferred location = its
 * device, so they stay there while opportunistic pages are the ones moved.
 *
 * Frees need nothing here: cuMemFree_v2 frees managed memory too, and the
 * allocation's record returns what it was charged. */
#define _GNU_SOURCE
#include "gpushare.h"

#include <pthread.h>

#define EXPORT __attribute__((visibility("default")))
#define L gs_lim

/* CUDA_ERROR_INVALID_VALUE, CU_MEM_ATTACH_GLOBAL,
 * CU_MEM_ADVISE_SET_PREFERRED_LOCATION (prefixed: gpushare.h may grow them) */
enum { UM_INVALID_VALUE = 1, UM_ATTACH_GLOBAL = 1, UM_PREFER_LOCATION = 3 };

typedef CUresult (*cuMemAllocManaged_fn)(CUdeviceptr *, size_t, unsigned);
typedef CUresult (*advise_fn)(CUdeviceptr, size_t, int, CUdevice);
typedef CUresult (*ctx_device_fn)(CUdevice *);

int gs_unified_converts(void)
{
    return L.unified && L.klass_id == GS_CLASS_OPPORTUNISTIC;
}

/* Charge n against limit, call, record or give the charge back. */
static CUresult managed(CUdeviceptr *dptr, size_t n, unsigned flags, uint64_t limit)
{
    cuMemAllocManaged_fn f = GS_REAL(cuMemAllocManaged);
    if (!f)
        return CUDA_ERROR_NOT_FOUND;
    if (L.have_memory && gs_region_charge(n, limit) != 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult r = f(dptr, n, flags);
    if (L.have_memory) {
        if (r == CUDA_SUCCESS)
            gs_track_add(GS_PTR, *dptr, n);
        else
            gs_region_uncharge(n);
    }
    return r;
}

/* The cap plus what an opportunistic task may hold beyond it as managed
 * memory (saturating). */
static uint64_t evictable_limit(void)
{
    uint64_t l;
    if (__builtin_add_overflow(L.memory_bytes, L.unified_extra_bytes, &l))
        return UINT64_MAX;
    return l;
}

CUresult gs_unified_alloc(CUdeviceptr *dptr, size_t n)
{
    return managed(dptr, n, UM_ATTACH_GLOBAL, evictable_limit());
}

/* The driver picks a pitched allocation's pitch; here it is ours: the width
 * rounded up to 512 bytes (a multiple of every GPU's texture pitch
 * alignment). Element sizes other than 4, 8 and 16 are refused, as the
 * driver does. */
CUresult gs_unified_pitch(CUdeviceptr *dptr, size_t *pitch, size_t w, size_t h, unsigned elem)
{
    if (!dptr || !pitch || !w || !h || (elem != 4 && elem != 8 && elem != 16))
        return UM_INVALID_VALUE;
    uint64_t p, n;
    if (w > UINT64_MAX - 511 || __builtin_mul_overflow((w + 511) / 512 * 512, h, &n))
        return CUDA_ERROR_OUT_OF_MEMORY;
    p = (w + 511) / 512 * 512;
    CUresult r = gs_unified_alloc(dptr, n);
    if (r == CUDA_SUCCESS)
        *pitch = p;
    return r;
}

static advise_fn advise;
static ctx_device_fn ctx_device;
static pthread_once_t advise_once = PTHREAD_ONCE_INIT;

static void find_advise(void)
{
    advise = (advise_fn)gs_driver_sym("cuMemAdvise");
    ctx_device = (ctx_device_fn)gs_driver_sym("cuCtxGetDevice");
}

/* Keeps a production allocation on the current context's device. Advice is
 * a hint: if the driver refuses it, the allocation stands. */
static void prefer_device(CUdeviceptr p, size_t n)
{
    pthread_once(&advise_once, find_advise);
    CUdevice dev;
    if (advise && ctx_device && ctx_device(&dev) == CUDA_SUCCESS)
        advise(p, n, UM_PREFER_LOCATION, dev);
}

EXPORT CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t n, unsigned flags)
{
    if (gs_unified_converts())
        return managed(dptr, n, flags, evictable_limit());
    CUresult r = managed(dptr, n, flags, L.memory_bytes);
    if (r == CUDA_SUCCESS && L.unified && L.klass_id == GS_CLASS_PRODUCTION)
        prefer_device(*dptr, n);
    return r;
}
