/* Included at the end of fakecuda.c (one translation unit: it shares the
 * fake device memory, `live`, `used`, `total` and `mu`). Memory the real
 * driver keeps after the program let it go, as the driver documents it:
 *
 *   - VMM handles (cuMemCreate): the physical memory is freed "when all
 *     outstanding mappings to the memory are unmapped and when all
 *     outstanding references to the handle ... are also released"
 *     (cuMemRelease, cuMemUnmap): a reference count of one for the handle
 *     and one per mapping, in either order. cuMemRetainAllocationHandle
 *     takes one more handle reference (each needs its cuMemRelease: NCCL's
 *     free retains, releases, unmaps, releases); a handle with no handle
 *     reference left cannot be mapped or exported.
 *   - cuMemExportToShareableHandle: only for a handle type the allocation
 *     was created with (CUmemAllocationProp.requestedHandleTypes), else
 *     CUDA_ERROR_INVALID_VALUE; a POSIX file descriptor here is a memfd,
 *     its inode naming the allocation.
 *   - cuMemImportFromShareableHandle: a new handle (one handle reference
 *     of its own) to the exported allocation, which stays until "all
 *     outstanding references to the handle (including its shareable
 *     counterparts)" and mappings are gone (cuMemRelease): an importer
 *     keeps it after its creator released and unmapped it. The fake finds
 *     the allocation by the descriptor's inode in its own table, so an
 *     import is of this process's export (the tests' importer stands for
 *     another process: the library cannot tell them apart).
 *   - cuMemGetAllocationGranularity: 2 MiB, minimum and recommended;
 *     cuMemSetAccess: the range must start at a mapping.
 *   - Stream-ordered pools (cuMemAllocAsync, cuMemAllocFromPoolAsync): a
 *     free returns memory to its pool, which keeps up to its release
 *     threshold (CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, default 0) reserved and
 *     gives the rest back at the next synchronization; here at the free, as
 *     if the stream synchronized then. An allocation reuses the pool's idle
 *     reserve first. cuMemPoolTrimTo gives idle reserve back; the
 *     reserved and used figures are the pool's attributes. On a stream
 *     being captured an allocation is a memory node of the capture's
 *     graph instead (testdata/fakegraphmem.c).
 *   - Graph memory (cuGraphAddMemAllocNode): the node gets a virtual
 *     address when added; the physical memory comes from its device's
 *     graph pool (the node's pool location) when the graph is launched
 *     (kept for later launches until cuDeviceGraphMemTrim gives back what
 *     no executing graph uses), and each device's reserve is its
 *     CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT. cuGraphGetNodes,
 *     cuGraphNodeGetType and cuGraphMemAllocNodeGetParams list a graph's
 *     memory nodes.
 *     fakevmm_graph_launch is what a graph launch calls (testdata/
 *     fakecapture.c's cuGraphLaunch, on the graph it was instantiated
 *     from).
 */

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- VMM handles -------------------------------------------------------- */

#define MAXH 4096
/* A slot per handle: refs (the allocation's references: its handles' and
 * mappings') are kept in the allocation's own slot, of (an imported
 * handle's slot names its allocation's; a created one's, itself, + 1). */
static struct { uint64_t h; uint32_t refs, hrefs; int released, types, of; uint64_t ino; } handles[MAXH];
static struct { uint64_t va, h, size; } vmaps[MAXH];
static uint64_t next_va = 0x7f0000000000ull;

/* Under mu: the slot of handle slot i's allocation. */
static int alloc_of(int i) { return handles[i].of ? handles[i].of - 1 : i; }

/* Under mu: drops one reference of handle slot i's allocation; the
 * allocation to free (its last reference gone) or 0. Its imported handles
 * go with it. */
static uint64_t unref(int i)
{
    i = alloc_of(i);
    if (--handles[i].refs)
        return 0;
    uint64_t h = handles[i].h;
    handles[i].h = 0;
    for (int k = 0; k < MAXH; k++)
        if (handles[k].h && handles[k].of == i + 1)
            handles[k].h = 0;
    return h;
}

static int handle_slot(uint64_t h)
{
    for (int i = 0; i < MAXH; i++)
        if (h && handles[i].h == h)
            return i;
    return -1;
}

CUresult cuMemCreate(unsigned long long *h, size_t n, const void *prop, unsigned long long f)
{
    (void)f;
    CUresult r = fake_alloc(h, n); /* the handle's value is a fake address */
    if (r)
        return r;
    pthread_mutex_lock(&mu);
    int i;
    for (i = 0; i < MAXH && handles[i].h; i++)
        ;
    if (i < MAXH) {
        handles[i].h = *h;
        handles[i].refs = handles[i].hrefs = 1; /* the handle's own reference */
        handles[i].released = 0;
        handles[i].types = prop ? ((const int *)prop)[1] : 0; /* requestedHandleTypes */
        handles[i].of = 0;
        handles[i].ino = 0;
    }
    pthread_mutex_unlock(&mu);
    if (i == MAXH)
        fake_free(*h);
    return i < MAXH ? 0 : 2;
}

CUresult cuMemRelease(unsigned long long h)
{
    uint64_t gone = 0;
    pthread_mutex_lock(&mu);
    int i = handle_slot(h);
    if (i >= 0 && !handles[i].released) {
        handles[i].released = --handles[i].hrefs == 0;
        gone = unref(i);
    }
    pthread_mutex_unlock(&mu);
    if (gone)
        fake_free(gone);
    return i >= 0 ? 0 : 1;
}

CUresult cuMemAddressReserve(CUdeviceptr *p, size_t size, size_t align, CUdeviceptr addr,
                             unsigned long long f)
{
    (void)align;
    (void)addr;
    (void)f;
    pthread_mutex_lock(&mu);
    *p = next_va;
    next_va += (size + (2u << 20) - 1) / (2u << 20) * (2u << 20);
    pthread_mutex_unlock(&mu);
    return 0;
}

CUresult cuMemAddressFree(CUdeviceptr p, size_t size) { (void)p; (void)size; return 0; }

/* A released handle cannot be mapped again (it is no longer the program's). */
CUresult cuMemMap(CUdeviceptr va, size_t size, size_t off, unsigned long long h,
                  unsigned long long f)
{
    (void)size;
    (void)off;
    (void)f;
    CUresult r = 1;
    pthread_mutex_lock(&mu);
    int i = handle_slot(h);
    for (int m = 0; i >= 0 && !handles[i].released && m < MAXH; m++) {
        if (!vmaps[m].va) {
            vmaps[m].va = va;
            vmaps[m].h = h;
            vmaps[m].size = size;
            handles[alloc_of(i)].refs++;
            r = 0;
            break;
        }
    }
    pthread_mutex_unlock(&mu);
    return r;
}

/* Every mapping that starts in [va, va+size). */
CUresult cuMemUnmap(CUdeviceptr va, size_t size)
{
    uint64_t gone[MAXH];
    int ng = 0, found = 0;
    pthread_mutex_lock(&mu);
    for (int m = 0; m < MAXH; m++) {
        if (!vmaps[m].va || vmaps[m].va < va || vmaps[m].va - va >= size)
            continue;
        int i = handle_slot(vmaps[m].h);
        uint64_t g = i >= 0 ? unref(i) : 0;
        if (g)
            gone[ng++] = g;
        vmaps[m].va = 0;
        found = 1;
    }
    pthread_mutex_unlock(&mu);
    for (int k = 0; k < ng; k++)
        fake_free(gone[k]);
    return found ? 0 : 1;
}

/* The handle mapped at addr, with one more handle reference. */
CUresult cuMemRetainAllocationHandle(unsigned long long *h, void *addr)
{
    CUresult r = 1;
    pthread_mutex_lock(&mu);
    for (int m = 0; m < MAXH; m++) {
        int i = vmaps[m].va ? handle_slot(vmaps[m].h) : -1;
        if (i >= 0 && vmaps[m].va <= (uintptr_t)addr && (uintptr_t)addr - vmaps[m].va < vmaps[m].size) {
            handles[alloc_of(i)].refs++;
            handles[i].hrefs++;
            handles[i].released = 0;
            *h = handles[i].h;
            r = 0;
            break;
        }
    }
    pthread_mutex_unlock(&mu);
    return r;
}

/* The mapping at p (VMM memory: its range is the mapping's). */
CUresult cuMemGetAddressRange_v2(CUdeviceptr *base, size_t *size, CUdeviceptr p)
{
    CUresult r = 1;
    pthread_mutex_lock(&mu);
    for (int m = 0; m < MAXH; m++) {
        if (vmaps[m].va && vmaps[m].va <= p && p - vmaps[m].va < vmaps[m].size) {
            if (base)
                *base = vmaps[m].va;
            if (size)
                *size = vmaps[m].size;
            r = 0;
            break;
        }
    }
    pthread_mutex_unlock(&mu);
    return r;
}

CUresult cuMemGetAllocationGranularity(size_t *g, const void *prop, int option)
{
    (void)prop;
    (void)option;
    *g = 2u << 20;
    return 0;
}

CUresult cuMemSetAccess(CUdeviceptr va, size_t size, const void *desc, size_t count)
{
    CUresult r = 1;
    pthread_mutex_lock(&mu);
    for (int m = 0; size && desc && count && m < MAXH; m++)
        if (vmaps[m].va && vmaps[m].va == va)
            r = 0;
    pthread_mutex_unlock(&mu);
    return r;
}

/* type: CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR (1) gives an fd. */
CUresult cuMemExportToShareableHandle(void *out, unsigned long long h, int type, unsigned long long f)
{
    (void)f;
    pthread_mutex_lock(&mu);
    int i = handle_slot(h);
    int ok = i >= 0 && handles[i].hrefs && (handles[alloc_of(i)].types & type) && type == 1;
    int fd = ok ? memfd_create("fakecuda-export", MFD_CLOEXEC) : -1;
    struct stat st;
    if (fd >= 0 && fstat(fd, &st) == 0)
        handles[alloc_of(i)].ino = st.st_ino;
    pthread_mutex_unlock(&mu);
    if (!ok)
        return 1;
    if (fd < 0)
        return 2;
    *(int *)out = fd;
    return 0;
}

/* type 1: osHandle is the descriptor, as an integer in the pointer. */
CUresult cuMemImportFromShareableHandle(unsigned long long *h, void *osHandle, int type)
{
    struct stat st;
    if (!h || type != 1 || fstat((int)(intptr_t)osHandle, &st) != 0)
        return 1;
    CUresult r = 1;
    pthread_mutex_lock(&mu);
    for (int a = 0; a < MAXH; a++) {
        if (!handles[a].h || handles[a].of || handles[a].ino != st.st_ino)
            continue;
        int i;
        for (i = 0; i < MAXH && handles[i].h; i++)
            ;
        if (i == MAXH) {
            r = 2;
            break;
        }
        handles[i].h = next_va; /* a value of its own */
        next_va += 2u << 20;
        handles[i].hrefs = 1;
        handles[i].refs = 0;
        handles[i].released = 0;
        handles[i].types = 0;
        handles[i].of = a + 1;
        handles[i].ino = 0;
        handles[a].refs++; /* the import's reference to the allocation */
        *h = handles[i].h;
        r = 0;
        break;
    }
    pthread_mutex_unlock(&mu);
    return r;
}

/* ---- stream-ordered pools ----------------------------------------------- */

enum { F_POOL = 4, MAXP = 16 }; /* live[].flags: F_POOL | pool index << 8 */
static struct { int live; uint64_t reserved, used, threshold; } pools[MAXP] = {{1, 0, 0, 0}};

static void *pool_handle(int i) { return (void *)(uintptr_t)(0x1000 + i); }

/* The pool's index; NULL is the device's (the tests' cuprog passes NULL). */
static int pool_of(void *p)
{
    uintptr_t i = p ? (uintptr_t)p - 0x1000 : 0;
    return i < MAXP && pools[i].live ? (int)i : -1;
}

static CUresult pool_alloc(int pi, CUdeviceptr *out, size_t n)
{
    if (!out || !n || pi < 0)
        return 1;
    /* FAKECUDA_POOL_ALLOC_US: the call takes that long before it looks at
     * the pool (a real driver's is not instant), so threads allocating at
     * once overlap in it */
    const char *slow = getenv("FAKECUDA_POOL_ALLOC_US");
    if (slow)
        usleep((useconds_t)atol(slow));
    CUresult r = 2;
    pthread_mutex_lock(&mu);
    init_total();
    uint64_t idle = pools[pi].reserved - pools[pi].used;
    uint64_t grow = n > idle ? n - idle : 0;
    for (int i = 0; grow <= total - used && i < MAXA; i++) {
        if (!live[i].addr) {
            live[i].addr = next_addr;
            live[i].size = n;
            live[i].flags = F_POOL | (unsigned)pi << 8;
            *out = next_addr;
            next_addr += (n + 255) / 256 * 256 + 256;
            used += grow;
            peak = used > peak ? used : peak;
            pools[pi].reserved += grow;
            pools[pi].used += n;
            r = 0;
            break;
        }
    }
    pthread_mutex_unlock(&mu);
    return r;
}

/* Under mu, from fake_free: what the device gets back when an allocation
 * of size bytes is freed; a pool keeps up to its threshold. */
static uint64_t fakevmm_freed(unsigned flags, uint64_t size)
{
    if (!(flags & F_POOL))
        return size;
    int pi = (int)(flags >> 8);
    pools[pi].used -= size;
    uint64_t keep = pools[pi].reserved < pools[pi].threshold ? pools[pi].reserved : pools[pi].threshold;
    keep = keep > pools[pi].used ? keep : pools[pi].used;
    uint64_t back = pools[pi].reserved - keep;
    pools[pi].reserved = keep;
    return back;
}

static CUresult captured_alloc(void *s, size_t n, CUdeviceptr *out, int *captured); /* fakegraphmem.c */

/* On a stream being captured: a memory node of the capture's graph. */
static CUresult stream_alloc(int pi, CUdeviceptr *p, size_t n, void *s)
{
    int captured;
    pthread_mutex_lock(&mu);
    CUresult r = captured_alloc(s, n, p, &captured);
    pthread_mutex_unlock(&mu);
    return captured ? r : pool_alloc(pi, p, n);
}

CUresult cuMemAllocAsync(CUdeviceptr *p, size_t n, void *s) { return stream_alloc(0, p, n, s); }
CUresult cuMemAllocAsync_ptsz(CUdeviceptr *p, size_t n, void *s) { return stream_alloc(0, p, n, s); }
CUresult cuMemAllocFromPoolAsync(CUdeviceptr *p, size_t n, void *pl, void *s) { return stream_alloc(pool_of(pl), p, n, s); }
CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *p, size_t n, void *pl, void *s) { return stream_alloc(pool_of(pl), p, n, s); }

CUresult cuDeviceGetMemPool(void **p, int dev) { *p = pool_handle(0); return dev ? 101 : 0; }
CUresult cuDeviceGetDefaultMemPool(void **p, int dev) { return cuDeviceGetMemPool(p, dev); }

CUresult cuMemPoolCreate(void **p, const void *props)
{
    (void)props;
    CUresult r = 2;
    pthread_mutex_lock(&mu);
    for (int i = 1; i < MAXP; i++) {
        if (!pools[i].live) {
            pools[i].live = 1;
            pools[i].reserved = pools[i].used = pools[i].threshold = 0;
            *p = pool_handle(i);
            r = 0;
            break;
        }
    }
    pthread_mutex_unlock(&mu);
    return r;
}

/* The pool's idle reserve goes back at once; what its live allocations
 * use, when they are freed (a pool with none left is gone). */
CUresult cuMemPoolDestroy(void *p)
{
    int i = pool_of(p);
    if (i <= 0)
        return 1; /* the device's default pool cannot be destroyed */
    pthread_mutex_lock(&mu);
    used -= pools[i].reserved - pools[i].used;
    pools[i].reserved = pools[i].used;
    pools[i].threshold = 0;
    pools[i].live = pools[i].used != 0;
    pthread_mutex_unlock(&mu);
    return 0;
}

/* CUmemPool_attribute: 4 release threshold, 5 reserved, 7 used (cuuint64_t). */
CUresult cuMemPoolSetAttribute(void *p, int attr, void *v)
{
    int i = pool_of(p);
    if (i < 0 || !v)
        return 1;
    if (attr == 4) {
        pthread_mutex_lock(&mu);
        pools[i].threshold = *(uint64_t *)v;
        pthread_mutex_unlock(&mu);
    }
    return 0;
}

CUresult cuMemPoolGetAttribute(void *p, int attr, void *v)
{
    int i = pool_of(p);
    if (i < 0 || !v)
        return 1;
    pthread_mutex_lock(&mu);
    uint64_t x = attr == 4 ? pools[i].threshold : attr == 5 ? pools[i].reserved : attr == 7 ? pools[i].used : 0;
    pthread_mutex_unlock(&mu);
    *(uint64_t *)v = x;
    return 0;
}

/* Gives idle reserve back until the pool holds at most keep (never what
 * its live allocations use). */
CUresult cuMemPoolTrimTo(void *p, size_t keep)
{
    int i = pool_of(p);
    if (i < 0)
        return 1;
    pthread_mutex_lock(&mu);
    uint64_t k = keep > pools[i].used ? keep : pools[i].used;
    if (pools[i].reserved > k) {
        used -= pools[i].reserved - k;
        pools[i].reserved = k;
    }
    pthread_mutex_unlock(&mu);
    return 0;
}

#include "fakegraphmem.c" /* graph memory */

/* cuGetProcAddress's names for this file's functions. */
#define FV(n) {#n, (void *)n}
static const struct { const char *name; void *fn; } vmm_table[] = {
    FV(cuMemCreate), FV(cuMemRelease), FV(cuMemAddressReserve), FV(cuMemAddressFree),
    FV(cuMemMap), FV(cuMemUnmap), FV(cuDeviceGetMemPool), FV(cuDeviceGetDefaultMemPool),
    FV(cuMemPoolCreate), FV(cuMemPoolSetAttribute), FV(cuMemPoolGetAttribute),
    FV(cuMemPoolTrimTo), FV(cuGraphAddMemAllocNode), FV(cuGraphAddMemFreeNode),
    FV(cuDeviceGetGraphMemAttribute), FV(cuDeviceGraphMemTrim), FV(cuMemRetainAllocationHandle),
    FV(cuGraphGetNodes), FV(cuGraphNodeGetType), FV(cuGraphMemAllocNodeGetParams),
    FV(cuMemGetAddressRange_v2), FV(cuMemGetAllocationGranularity), FV(cuMemSetAccess),
    FV(cuMemExportToShareableHandle), FV(cuMemImportFromShareableHandle), FV(cuMemPoolDestroy),
};

static void *fakevmm_find(const char *n)
{
    for (size_t i = 0; i < sizeof vmm_table / sizeof vmm_table[0]; i++)
        if (strcmp(vmm_table[i].name, n) == 0)
            return vmm_table[i].fn;
    return NULL;
}
