/* gpushare CUDA interposer: memory the driver keeps after the program let
 * it go (README, "Charging"):
 *
 *   - VMM handles. The driver frees a cuMemCreate handle's physical memory
 *     only when the handle is released (cuMemRelease) and no range still
 *     maps it (cuMemUnmap), in either order (CUDA driver API, cuMemRelease:
 *     "The memory allocation will be freed when all outstanding mappings to
 *     the memory are unmapped and when all outstanding references to the
 *     handle ... are also released"). The charge taken at cuMemCreate stays
 *     until both. cuMemRetainAllocationHandle takes one more reference to
 *     the handle (the same value, as the driver guarantees), which needs a
 *     cuMemRelease of its own: NCCL's free retains, releases, unmaps and
 *     releases, and the memory stays until that last release.
 *   - Stream-ordered pools (cuMemAllocAsync, cuMemAllocFromPoolAsync). A
 *     pool keeps freed memory reserved up to its release threshold
 *     (CU_MEMPOOL_ATTR_RELEASE_THRESHOLD; XLA and TensorFlow set it high).
 *     A pool is charged what it reserves (CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT),
 *     settled after each of its allocations and frees and before memory
 *     info; an allocation is charged ahead what the pool's idle reserve
 *     cannot cover, then settled, one step per pool (its step lock). A charge
 *     that would go over the cap first trims every pool this process used
 *     (cuMemPoolTrimTo(pool, 0): idle reserve back to the driver) and tries
 *     again (gs_trim_reserved, from gs_charge).
 *   - Graph memory: src/graphmem.c (trimmed and settled from here).
 *
 * Both tables are process-local (handles and pools are a process's own);
 * a forked child starts without them, as it starts without CUDA state. */
#define _GNU_SOURCE
#include "gpushare.h"

#include <pthread.h>
#include <stdlib.h>

#define EXPORT __attribute__((visibility("default")))
#define L gs_lim

typedef unsigned long long CUmemGenericAllocationHandle;
typedef void *CUmemoryPool;

typedef CUresult (*cuMemCreate_fn)(CUmemGenericAllocationHandle *, size_t, const void *, unsigned long long);
typedef CUresult (*cuMemRelease_fn)(CUmemGenericAllocationHandle);
typedef CUresult (*cuMemRetainAllocationHandle_fn)(CUmemGenericAllocationHandle *, void *);
typedef CUresult (*cuMemImportFromShareableHandle_fn)(CUmemGenericAllocationHandle *, void *, int);
typedef CUresult (*cuMemMap_fn)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long);
typedef CUresult (*cuMemUnmap_fn)(CUdeviceptr, size_t);
typedef CUresult (*cuMemAllocAsync_fn)(CUdeviceptr *, size_t, CUstream);
typedef cuMemAllocAsync_fn cuMemAllocAsync_ptsz_fn;
typedef CUresult (*cuMemAllocFromPoolAsync_fn)(CUdeviceptr *, size_t, CUmemoryPool, CUstream);
typedef cuMemAllocFromPoolAsync_fn cuMemAllocFromPoolAsync_ptsz_fn;

#define REAL(n) GS_REAL(n)
#define NEED(f)                     \
    if (!(f))                       \
        return CUDA_ERROR_NOT_FOUND

/* ---- VMM handles ------------------------------------------------------ */

/* refs: the handle's references (its creation or import and each
 * retain), maps: the ranges mapping it; the driver frees it when both are
 * 0 (for this process: an imported allocation may live on in another).
 * bytes 0: imported, charged at its first mapping. */
struct handle { CUmemGenericAllocationHandle h; uint64_t bytes; uint32_t maps, refs; };
struct mapping { CUdeviceptr va; CUmemGenericAllocationHandle h; };

static struct handle *hs;
static struct mapping *ms;
static size_t nh, caph, nm, capm;
static pthread_mutex_t vmu = PTHREAD_MUTEX_INITIALIZER;

/* Grows *arr (of *cap elements of size sz) to hold n+1; 0 ok. */
static int room(void **arr, size_t *cap, size_t n, size_t sz)
{
    if (n < *cap)
        return 0;
    size_t c = *cap ? *cap * 2 : 64;
    void *p = realloc(*arr, c * sz);
    if (!p)
        return -1;
    *arr = p;
    *cap = c;
    return 0;
}

static struct handle *find_handle(CUmemGenericAllocationHandle h)
{
    for (size_t i = 0; i < nh; i++)
        if (hs[i].h == h)
            return &hs[i];
    return NULL;
}

/* Under vmu: drops a handle whose memory the driver freed; its bytes. */
static uint64_t drop_handle(struct handle *e)
{
    uint64_t b = e->bytes;
    *e = hs[--nh];
    return b;
}

EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *h, size_t n, const void *prop,
                            unsigned long long flags)
{
    cuMemCreate_fn f = REAL(cuMemCreate);
    NEED(f);
    if (!L.have_memory)
        return f(h, n, prop, flags);
    if (gs_charge(n) != CUDA_SUCCESS)
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult r = f(h, n, prop, flags);
    if (r != CUDA_SUCCESS) {
        gs_uncharge(n);
        return r;
    }
    pthread_mutex_lock(&vmu);
    /* no room to remember it: the charge stays for good (never under-charged) */
    if (room((void **)&hs, &caph, nh, sizeof *hs) == 0)
        hs[nh++] = (struct handle){*h, n, 0, 1};
    pthread_mutex_unlock(&vmu);
    return r;
}

EXPORT CUresult cuMemMap(CUdeviceptr va, size_t size, size_t off, CUmemGenericAllocationHandle h,
                         unsigned long long flags)
{
    cuMemMap_fn f = REAL(cuMemMap);
    NEED(f);
    CUresult r = f(va, size, off, h, flags);
    if (r != CUDA_SUCCESS || !L.have_memory)
        return r;
    uint64_t charge = 0;
    pthread_mutex_lock(&vmu);
    struct handle *e = find_handle(h);
    /* a handle we never saw made (nor imported) is not followed */
    if (e && e->refs && room((void **)&ms, &capm, nm, sizeof *ms) == 0) {
        e->maps++;
        ms[nm++] = (struct mapping){va, h};
        if (!e->bytes) /* imported: the mapping says how large */
            charge = e->bytes = size;
    }
    pthread_mutex_unlock(&vmu);
    /* the memory is held now: charged, over the cap if even a trim of
     * idle reserve cannot make room (a refusal here would be an error
     * cuMemMap does not return) */
    if (charge && gs_charge(charge) != CUDA_SUCCESS)
        gs_region_force_charge(charge);
    return r;
}

/* An allocation another process exported (PyTorch's CUDA IPC, vLLM's
 * workers, NCCL's cuMem buffers): the driver keeps it while any process
 * holds a reference or a mapping (cuMemRelease: "including its shareable
 * counterparts"), so its exporter's charge may go while this process
 * holds it (issue 44, 10). The importer is charged too, from its first
 * mapping (the import does not say how large) until its last release and
 * unmap, as a handle it made. The same handle back (an import of this
 * process's own export, where the driver gives the handle again) is one
 * more reference, as a retain. */
EXPORT CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *h, void *os, int type)
{
    cuMemImportFromShareableHandle_fn f = REAL(cuMemImportFromShareableHandle);
    NEED(f);
    CUresult r = f(h, os, type);
    if (r != CUDA_SUCCESS || !L.have_memory || !h)
        return r;
    pthread_mutex_lock(&vmu);
    struct handle *e = find_handle(*h);
    if (e)
        e->refs++;
    else if (room((void **)&hs, &caph, nh, sizeof *hs) == 0)
        hs[nh++] = (struct handle){*h, 0, 0, 1};
    pthread_mutex_unlock(&vmu);
    return r;
}

/* Unmaps every mapping that starts in [va, va+size), as the driver does. */
EXPORT CUresult cuMemUnmap(CUdeviceptr va, size_t size)
{
    cuMemUnmap_fn f = REAL(cuMemUnmap);
    NEED(f);
    CUresult r = f(va, size);
    if (r != CUDA_SUCCESS || !L.have_memory)
        return r;
    uint64_t freed = 0;
    pthread_mutex_lock(&vmu);
    for (size_t i = 0; i < nm;) {
        if (ms[i].va < va || ms[i].va - va >= size) {
            i++;
            continue;
        }
        struct handle *e = find_handle(ms[i].h);
        ms[i] = ms[--nm];
        if (e && e->maps && --e->maps == 0 && !e->refs)
            freed += drop_handle(e);
    }
    pthread_mutex_unlock(&vmu);
    gs_uncharge(freed);
    return r;
}

EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle h)
{
    cuMemRelease_fn f = REAL(cuMemRelease);
    NEED(f);
    CUresult r = f(h);
    if (r != CUDA_SUCCESS || !L.have_memory)
        return r;
    uint64_t freed = 0;
    pthread_mutex_lock(&vmu);
    struct handle *e = find_handle(h);
    if (e && e->refs && --e->refs == 0 && e->maps == 0)
        freed = drop_handle(e);
    pthread_mutex_unlock(&vmu);
    gs_uncharge(freed);
    return r;
}

/* One more reference to the handle mapped at addr: the charge stays until
 * its cuMemRelease too. */
EXPORT CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *h, void *addr)
{
    cuMemRetainAllocationHandle_fn f = REAL(cuMemRetainAllocationHandle);
    NEED(f);
    CUresult r = f(h, addr);
    if (r != CUDA_SUCCESS || !L.have_memory || !h)
        return r;
    pthread_mutex_lock(&vmu);
    struct handle *e = find_handle(*h);
    if (e)
        e->refs++;
    pthread_mutex_unlock(&vmu);
    return r;
}

/* ---- stream-ordered pools --------------------------------------------- */

enum {
    ATTR_RESERVED_MEM_CURRENT = 5,       /* CUmemPool_attribute */
    ATTR_USED_MEM_CURRENT = 7,
};
#define MAX_POOLS 64

/* step: held from an allocation's charge to its settle, so threads
 * allocating from one pool at once never count the same idle reserve
 * (issue 44, 8); frees of the pool settle under it too. Lock order:
 * step, then pmu; under pmu a step is only tried (trim, memory info). */
static struct { CUmemoryPool p; uint64_t charged; pthread_mutex_t step; } pools[MAX_POOLS];
static int npools;
static pthread_mutex_t pmu = PTHREAD_MUTEX_INITIALIZER;

typedef CUresult (*attr_fn)(CUmemoryPool, int, void *);
typedef CUresult (*trim_fn)(CUmemoryPool, size_t);
typedef CUresult (*getdev_fn)(CUdevice *);
typedef CUresult (*devpool_fn)(CUmemoryPool *, CUdevice);

/* Driver functions called, not intercepted: looked up once. */
static attr_fn pool_attr;
static trim_fn pool_trim;
static getdev_fn ctx_dev;
static devpool_fn dev_pool;
static pthread_once_t syms_once = PTHREAD_ONCE_INIT;

static void load_syms(void)
{
    pool_attr = (attr_fn)gs_driver_sym("cuMemPoolGetAttribute");
    pool_trim = (trim_fn)gs_driver_sym("cuMemPoolTrimTo");
    ctx_dev = (getdev_fn)gs_driver_sym("cuCtxGetDevice");
    dev_pool = (devpool_fn)gs_driver_sym("cuDeviceGetMemPool");
}

/* The pool cuMemAllocAsync takes from: the current device's; NULL when the
 * driver cannot say (then the allocation is charged by its size). */
static CUmemoryPool current_pool(void)
{
    CUdevice d;
    CUmemoryPool p = NULL;
    if (!ctx_dev || !dev_pool || ctx_dev(&d) != CUDA_SUCCESS || dev_pool(&p, d) != CUDA_SUCCESS)
        return NULL;
    return p;
}

/* Under pmu: the pool's entry, added if new; -1 when the table is full. */
static int pool_index(CUmemoryPool p)
{
    for (int i = 0; i < npools; i++)
        if (pools[i].p == p)
            return i;
    if (npools == MAX_POOLS)
        return -1;
    pools[npools].p = p;
    pools[npools].charged = 0;
    pthread_mutex_init(&pools[npools].step, NULL);
    return npools++;
}

/* Under pmu: the pool's charge becomes what it reserves; ahead is what an
 * allocation from it was charged before the call. A pool the driver no
 * longer knows (destroyed) reserves nothing. Settled after the fact, so a
 * pool that reserves more than it was charged ahead (fragmentation) can
 * take the use a little over the cap until the next trim. */
static void settle(int i, uint64_t ahead)
{
    unsigned long long reserved = 0;
    if (!pool_attr || pool_attr(pools[i].p, ATTR_RESERVED_MEM_CURRENT, &reserved) != CUDA_SUCCESS)
        reserved = 0;
    uint64_t have = pools[i].charged + ahead;
    if (reserved > have)
        gs_region_force_charge(reserved - have);
    else
        gs_region_uncharge(have - reserved);
    pools[i].charged = reserved;
}

void gs_settle_reserved(void)
{
    if (!L.have_memory)
        return;
    pthread_mutex_lock(&pmu);
    for (int i = 0; i < npools; i++) {
        if (pthread_mutex_trylock(&pools[i].step) != 0)
            continue; /* an allocation in flight settles it */
        settle(i, 0);
        pthread_mutex_unlock(&pools[i].step);
    }
    pthread_mutex_unlock(&pmu);
    gs_settle_graph();
}

int gs_trim_reserved(void)
{
    pthread_once(&syms_once, load_syms);
    int trimmed = 0;
    pthread_mutex_lock(&pmu);
    for (int i = 0; i < npools; i++) {
        /* a pool an allocation is in flight on (this thread's own: trimming
         * it would only raise what that allocation must be charged) */
        if (pthread_mutex_trylock(&pools[i].step) != 0)
            continue;
        uint64_t before = pools[i].charged;
        if (pool_trim)
            pool_trim(pools[i].p, 0);
        settle(i, 0);
        trimmed |= pools[i].charged < before;
        pthread_mutex_unlock(&pools[i].step);
    }
    pthread_mutex_unlock(&pmu);
    return trimmed | gs_trim_graph();
}

/* One allocation from a pool: charge ahead what its idle reserve cannot
 * cover, call, settle, all under the pool's step lock (pool_begin to
 * pool_end), so concurrent allocations from one pool never each count the
 * same idle reserve (issue 44, 8: 8 threads asking 3 GiB of a pool with
 * 3 GiB idle got 5 grants). A pool the driver cannot describe is charged
 * the whole size. */
#define POOL_ALLOC(pool, cur, call)                                          \
    do {                                                                     \
        if (!L.have_memory)                                                  \
            return (call);                                                   \
        uint64_t a_ = n;                                                     \
        int i_ = pool_begin((cur) ? NULL : (pool), (cur), &a_);              \
        if (gs_charge(a_) != CUDA_SUCCESS) {                                 \
            pool_end(i_);                                                    \
            return CUDA_ERROR_OUT_OF_MEMORY;                                 \
        }                                                                    \
        CUresult r_ = (call);                                                \
        return pool_settle_alloc(r_, i_, dptr, a_);                          \
    } while (0)

/* The pool's idle reserve (reserved less used): what an allocation from it
 * need not add. 0 when the driver answered. */
static int pool_idle(CUmemoryPool p, uint64_t *idle)
{
    unsigned long long res = 0, use = 0;
    if (!pool_attr || pool_attr(p, ATTR_RESERVED_MEM_CURRENT, &res) != CUDA_SUCCESS ||
        pool_attr(p, ATTR_USED_MEM_CURRENT, &use) != CUDA_SUCCESS)
        return -1;
    *idle = use < res ? res - use : 0;
    return 0;
}

/* Starts an allocation of *n bytes from pool (the current device's when
 * cur): the pool's index, its step lock held, and *n lowered to what its
 * idle reserve cannot cover; -1 (nothing held, *n whole) for a pool the
 * driver cannot describe or the table cannot hold. */
static int pool_begin(CUmemoryPool pool, int cur, uint64_t *n)
{
    pthread_once(&syms_once, load_syms);
    CUmemoryPool p = cur ? current_pool() : pool;
    if (!p)
        return -1;
    pthread_mutex_lock(&pmu);
    int i = pool_index(p);
    pthread_mutex_unlock(&pmu);
    if (i < 0)
        return -1;
    pthread_mutex_lock(&pools[i].step);
    uint64_t idle = 0;
    if (pool_idle(p, &idle) != 0) {
        pthread_mutex_unlock(&pools[i].step);
        return -1;
    }
    *n = *n > idle ? *n - idle : 0;
    return i;
}

static void pool_end(int i)
{
    if (i >= 0)
        pthread_mutex_unlock(&pools[i].step);
}

/* Ends the allocation pool_begin started; ahead: what it was charged
 * before the call. */
static CUresult pool_settle_alloc(CUresult r, int i, CUdeviceptr *dptr, uint64_t ahead)
{
    if (i >= 0) {
        pthread_mutex_lock(&pmu);
        settle(i, ahead);
        CUmemoryPool p = pools[i].p;
        pthread_mutex_unlock(&pmu);
        pool_end(i);
        if (r == CUDA_SUCCESS)
            gs_track_add(GS_POOLPTR, *dptr, (uint64_t)(uintptr_t)p);
    } else if (r == CUDA_SUCCESS) {
        gs_track_add(GS_PTR, *dptr, ahead); /* pool unknown: keeps its charge */
    } else {
        gs_uncharge(ahead);
    }
    return r;
}

EXPORT CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t n, CUstream s)
{
    cuMemAllocAsync_fn f = REAL(cuMemAllocAsync);
    NEED(f);
    POOL_ALLOC(NULL, 1, f(dptr, n, s));
}

EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t n, CUstream s)
{
    cuMemAllocAsync_ptsz_fn f = REAL(cuMemAllocAsync_ptsz);
    NEED(f);
    POOL_ALLOC(NULL, 1, f(dptr, n, s));
}

EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t n, CUmemoryPool p, CUstream s)
{
    cuMemAllocFromPoolAsync_fn f = REAL(cuMemAllocFromPoolAsync);
    NEED(f);
    POOL_ALLOC(p, 0, f(dptr, n, p, s));
}

EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t n, CUmemoryPool p, CUstream s)
{
    cuMemAllocFromPoolAsync_ptsz_fn f = REAL(cuMemAllocFromPoolAsync_ptsz);
    NEED(f);
    POOL_ALLOC(p, 0, f(dptr, n, p, s));
}

/* After the free of a pool's allocation (gpushare_cuda.c): the pool
 * settles, what it keeps reserved stays charged. */
CUresult gs_pool_free(CUdeviceptr p, CUresult r, uint64_t pool)
{
    if (r != CUDA_SUCCESS) {
        gs_track_add(GS_POOLPTR, p, pool); /* refused: still live */
        return r;
    }
    pthread_mutex_lock(&pmu);
    int i = pool_index((CUmemoryPool)(uintptr_t)pool);
    pthread_mutex_unlock(&pmu);
    if (i >= 0) {
        pthread_mutex_lock(&pools[i].step); /* after an allocation in flight */
        pthread_mutex_lock(&pmu);
        settle(i, 0);
        pthread_mutex_unlock(&pmu);
        pthread_mutex_unlock(&pools[i].step);
    }
    return r;
}

static void after_fork_child(void)
{
    hs = NULL; /* the parent's copies leak in the child: fork-safe */
    ms = NULL;
    nh = caph = nm = capm = 0;
    npools = 0;
    pthread_mutex_init(&vmu, NULL);
    pthread_mutex_init(&pmu, NULL);
}

__attribute__((constructor)) static void vmm_init(void)
{
    pthread_atfork(NULL, NULL, after_fork_child);
}
