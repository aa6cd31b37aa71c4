/* frameworks: the driver call sequences real frameworks make, replayed
 * (frameworks_test.go, issue 29). It finds the driver as the CUDA runtime
 * does (dlopen("libcuda.so.1") and dlsym, which the interposer answers), so
 * the same program runs over the tests' fake driver and over NVIDIA's real
 * one (TestGPUCheckFrameworks). One command per run, one result line of
 * "<name> key=value ..." (sizes in bytes):
 *   torch           PyTorch's caching allocator (CUDACachingAllocator.cpp):
 *                   2 MiB small segment, large blocks rounded to 2 MiB
 *                   until the driver refuses, cached blocks freed and the
 *                   allocation retried on OOM, empty_cache
 *   expandable      PyTorch's expandable segments: one VA range of 9/8 of
 *                   the device, grown by 20 MiB handles (cuMemCreate,
 *                   cuMemMap, one cuMemSetAccess per growth) until refused,
 *                   shrunk (cuMemUnmap, cuMemRelease), grown again
 *   graph:MODE:K:US:ITERS:MS   vLLM's decode steps captured into a CUDA
 *                   graph (MODE 0 global, 1 thread-local), K kernels of US
 *                   us (on a GPU the PTX kernel of ITERS iterations), the
 *                   graph replayed for MS ms after as many warming up
 *   sleep           vLLM's sleep mode (CuMemAllocator, cumem_allocator.cpp):
 *                   weights and KV cache by reserve/create/map/access; sleep
 *                   unmaps and releases all, wake creates and maps again
 *   xla:POOL        XLA's cuda_malloc_async (gpu_cudamallocasync_allocator):
 *                   POOL default: the device's pool, cuMemAllocFromPoolAsync
 *                   (XLA); new: cuMemPoolCreate; async: cuMemAllocAsync
 *                   (TensorFlow's and PyTorch's cudaMallocAsync backends).
 *                   Release threshold, preallocation of the pool size and
 *                   its free, allocations until refused (then memory info),
 *                   frees, cuMemPoolTrimTo(0) (PyTorch's emptyCache there)
 *   nccl:ORDER      NCCL's cuMem buffers (alloc.h, ncclCuMemAlloc): POSIX
 *                   fd handles, create, reserve, map, access, exported; a
 *                   registration's retain and release while mapped; freed
 *                   as ncclCuMemFree does (ORDER nccl: retain, release,
 *                   unmap, release) or released right after the map (ORDER
 *                   release-first: the unmap frees)
 * Every line has cap (cuMemGetInfo's total: the share), peak (the most the
 * driver held for this process), uncharged (the most the driver held beyond
 * the library's accounting, cuMemGetInfo's total - free), end, errors (calls
 * that failed unexpectedly) and fail (the first: name:rc). What the driver
 * holds: the fake's fakecuda_used(); on a GPU, NVML's figure for this pid
 * less its figure after the context was made (-1: unknown).
 * Exit 4 when the driver cannot be initialised. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef int CUresult;
typedef unsigned long long u64;
typedef struct { int type, handleTypes, locType, locId; void *win32; unsigned char flags[8]; } Prop;
typedef struct { int locType, locId, flags; } Access;

static const char ptx[] =
    ".version 6.0\n.target sm_50\n.address_size 64\n"
    ".visible .entry spin(.param .u64 n, .param .u64 out)\n{\n"
    "  .reg .pred %p;\n  .reg .b64 %rd<5>;\n  .reg .f32 %f<2>;\n"
    "  ld.param.u64 %rd1, [n];\n  ld.param.u64 %rd2, [out];\n"
    "  mov.u64 %rd3, 0;\n  mov.f32 %f1, 0f3F800000;\nLOOP:\n"
    "  fma.rn.f32 %f1, %f1, 0f3F7FFFFF, 0f3A83126F;\n  add.u64 %rd3, %rd3, 1;\n"
    "  setp.lt.u64 %p, %rd3, %rd1;\n  @%p bra LOOP;\n"
    "  cvta.to.global.u64 %rd4, %rd2;\n  st.global.f32 [%rd4], %f1;\n  ret;\n}\n";

#define FNS(X)                                                                              \
    X(cuInit, (unsigned)) X(cuDeviceGet, (int *, int)) X(cuCtxCreate_v2, (void **, unsigned, int)) \
    X(cuMemAlloc_v2, (u64 *, size_t)) X(cuMemFree_v2, (u64)) X(cuMemGetInfo_v2, (size_t *, size_t *)) \
    X(cuDeviceTotalMem_v2, (size_t *, int))                                                 \
    X(cuMemGetAllocationGranularity, (size_t *, const Prop *, int))                         \
    X(cuMemAddressReserve, (u64 *, size_t, size_t, u64, u64)) X(cuMemAddressFree, (u64, size_t)) \
    X(cuMemCreate, (u64 *, size_t, const Prop *, u64)) X(cuMemMap, (u64, size_t, size_t, u64, u64)) \
    X(cuMemSetAccess, (u64, size_t, const Access *, size_t)) X(cuMemUnmap, (u64, size_t))  \
    X(cuMemRelease, (u64)) X(cuMemRetainAllocationHandle, (u64 *, void *))                  \
    X(cuMemGetAddressRange_v2, (u64 *, size_t *, u64))                                      \
    X(cuMemExportToShareableHandle, (void *, u64, int, u64))                                \
    X(cuMemPoolCreate, (void **, const void *)) X(cuMemPoolDestroy, (void *))               \
    X(cuDeviceGetDefaultMemPool, (void **, int)) X(cuMemPoolSetAttribute, (void *, int, void *)) \
    X(cuMemPoolGetAttribute, (void *, int, void *)) X(cuMemPoolTrimTo, (void *, size_t))    \
    X(cuMemAllocFromPoolAsync, (u64 *, size_t, void *, void *))                             \
    X(cuMemAllocAsync, (u64 *, size_t, void *)) X(cuMemFreeAsync, (u64, void *))            \
    X(cuStreamCreate, (void **, unsigned)) X(cuStreamSynchronize, (void *))                 \
    X(cuStreamBeginCapture_v2, (void *, int)) X(cuStreamEndCapture, (void *, void **))      \
    X(cuStreamIsCapturing, (void *, int *)) X(cuGraphInstantiateWithFlags, (void **, void *, u64)) \
    X(cuGraphLaunch, (void *, void *)) X(cuGraphExecDestroy, (void *)) X(cuGraphDestroy, (void *)) \
    X(cuModuleLoadData, (void **, const void *)) X(cuModuleGetFunction, (void **, void *, const char *)) \
    X(cuLaunchKernel, (void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, \
                       unsigned, void *, void **, void **))
#define DECL(n, a) static CUresult(*n) a;
FNS(DECL)

static void *lib;
static int dev, fake, errors;
static char fail[64] = "-";
static u64 (*fake_used)(void), (*fake_busy)(void);
static u64 cap, peak, uncharged, last_drv;
static long long ctx_base = -1;

/* NVML's figure for this process (a GPU): what the driver holds for it. */
static int (*nv_procs)(void *, unsigned *, void *);
static void *nv_dev;
static size_t nv_stride;

static long long nvml_used(void)
{
    unsigned char buf[64 * 32];
    unsigned n = 64;
    if (!nv_procs || nv_procs(nv_dev, &n, buf) != 0)
        return -1;
    for (unsigned i = 0; i < n && i < 64; i++) {
        unsigned pid;
        u64 used;
        memcpy(&pid, buf + i * nv_stride, 4);
        memcpy(&used, buf + i * nv_stride + 8, 8);
        if ((int)pid == getpid())
            return (long long)used;
    }
    return -1;
}

static void nvml_open(void)
{
    void *h = dlopen("libnvidia-ml.so.1", RTLD_NOW);
    int (*init)(void), (*get)(unsigned, void **);
    if (!h || !(*(void **)&init = dlsym(h, "nvmlInit_v2")) ||
        !(*(void **)&get = dlsym(h, "nvmlDeviceGetHandleByIndex_v2")) || init() || get(0, &nv_dev))
        return;
    nv_stride = 24; /* nvmlProcessInfo_t: pid, usedGpuMemory, GPU and compute instance */
    if (!(*(void **)&nv_procs = dlsym(h, "nvmlDeviceGetComputeRunningProcesses_v3")))
        *(void **)&nv_procs = dlsym(h, "nvmlDeviceGetComputeRunningProcesses_v2");
}

/* What the driver holds for this process's allocations; ~0: unknown. */
static u64 drv(void)
{
    if (fake)
        return fake_used();
    long long u = nvml_used();
    return u < 0 || ctx_base < 0 ? ~0ull : u > ctx_base ? (u64)(u - ctx_base) : 0;
}

/* What the library charges the reservation (cuMemGetInfo: total - free). */
static u64 lib_held(void)
{
    size_t f = 0, t = 0;
    return cuMemGetInfo_v2(&f, &t) ? ~0ull : t - f;
}

/* After each step: the peak, and what the driver held uncharged. */
static void sample(void)
{
    u64 d = drv(), l = lib_held();
    last_drv = d;
    if (d == ~0ull)
        return;
    peak = d > peak ? d : peak;
    if (l != ~0ull && d > l && d - l > uncharged)
        uncharged = d - l;
}

/* rc of a call that must succeed: counted and the first named if not. */
static CUresult ck(const char *what, CUresult r)
{
    if (r && errors++ == 0)
        snprintf(fail, sizeof fail, "%s:%d", what, r);
    return r;
}
#define CK(call) ck(#call, call)

static void result(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
#include <stdarg.h>
static void result(const char *fmt, ...)
{
    sample();
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf(" cap=%llu peak=%llu uncharged=%llu end=%lld errors=%d fail=%s\n", cap, peak, uncharged,
           last_drv == ~0ull ? -1ll : (long long)last_drv, errors, fail);
}

static u64 up(u64 n, u64 g) { return (n + g - 1) / g * g; }
#define MIB (1ull << 20)

/* ---- PyTorch, classic caching allocator ---------------------------------- */
static void torch(void)
{
    static u64 p[4096];
    u64 small, big, x, seg = up(cap / 8 + MIB, 2 * MIB); /* a large block, rounded */
    int n = 0;
    CK(cuMemAlloc_v2(&small, 2 * MIB)); /* the small pool's segment */
    CUresult fill = 0;
    while (n < 4096 && (fill = cuMemAlloc_v2(&p[n], seg)) == 0)
        n++, sample();
    /* half the tensors die: their blocks stay in the cache; a larger request
     * misses the cache, the driver refuses it, the cache is released
     * (cudaFree of every unused segment) and the request retried */
    CUresult first = cuMemAlloc_v2(&big, 2 * seg), retry = -1;
    int cached = n / 2;
    if (first == 2) {
        for (int i = n - cached; i < n; i++)
            CK(cuMemFree_v2(p[i])), sample();
        n -= cached;
        retry = cuMemAlloc_v2(&big, 2 * seg);
    }
    sample();
    /* more than the share even with an empty cache: PyTorch's OOM error
     * (its message reads cuMemGetInfo) */
    size_t f = 0, t = 0;
    CK(cuMemGetInfo_v2(&f, &t));
    CUresult toobig = cuMemAlloc_v2(&x, t + 2 * MIB);
    /* empty_cache after the tensors die */
    for (int i = 0; i < n; i++)
        CK(cuMemFree_v2(p[i]));
    if (!retry)
        CK(cuMemFree_v2(big));
    CK(cuMemFree_v2(small));
    CK(cuMemGetInfo_v2(&f, &t));
    result("torch seg=%llu segs=%d fill_rc=%d first_rc=%d freed=%d retry_rc=%d toobig_rc=%d end_free=%zu",
           seg, n + cached, fill, first, cached, retry, toobig, f);
}

/* ---- PyTorch, expandable segments ------------------------------------------ */
static Prop dev_prop(int types) { return (Prop){1, types, 1, dev, NULL, {0}}; }
static Access rw(void) { return (Access){1, dev, 3}; }

#define MAXH 8192
static u64 hs[MAXH];

/* map(begin, k): PyTorch's ExpandableSegment::map: create every handle,
 * giving back this call's on OOM, then map them and set access once. */
static CUresult grow(u64 base, u64 seg, int begin, int k)
{
    Prop pr = dev_prop(0);
    Access a = rw();
    for (int i = begin; i < begin + k; i++) {
        CUresult r = cuMemCreate(&hs[i], seg, &pr, 0);
        if (r) {
            for (int j = begin; j < i; j++)
                CK(cuMemRelease(hs[j]));
            return r;
        }
    }
    for (int i = begin; i < begin + k; i++)
        CK(cuMemMap(base + i * seg, seg, 0, hs[i], 0));
    CK(cuMemSetAccess(base + begin * seg, k * seg, &a, 1));
    return 0;
}

/* unmapHandles: unmap, then release, handle by handle */
static void shrink(u64 base, u64 seg, int begin, int end)
{
    for (int i = begin; i < end; i++) {
        CK(cuMemUnmap(base + i * seg, seg));
        CK(cuMemRelease(hs[i]));
    }
}

static void expandable(void)
{
    Prop pr = dev_prop(0);
    size_t g = 0, devtotal = 0;
    CK(cuMemGetAllocationGranularity(&g, &pr, 0));
    CK(cuDeviceTotalMem_v2(&devtotal, dev));
    u64 seg = up(20 * MIB, g ? g : 2 * MIB), base = 0;
    u64 maxh = (devtotal + devtotal / 8 + seg - 1) / seg;
    maxh = maxh > MAXH ? MAXH : maxh;
    CK(cuMemAddressReserve(&base, seg * maxh, 0, 0, 0));
    int step = cap / 8 / seg ? (int)(cap / 8 / seg) : 1, n = 0, k;
    CUresult r = 0;
    while ((k = n + step <= (int)maxh ? step : (int)maxh - n) > 0 && (r = grow(base, seg, n, k)) == 0)
        n += k, sample();
    while (n < (int)maxh && (r = grow(base, seg, n, 1)) == 0) /* refused: the last few, one by one */
        n++, sample();
    int full = n;
    shrink(base, seg, n / 2, n);
    n /= 2;
    sample();
    u64 half = last_drv, halflib = lib_held();
    CUresult r2 = 0;
    while (r2 == 0 && n < (int)maxh && (r2 = grow(base, seg, n, 1)) == 0)
        n++, sample();
    shrink(base, seg, 0, n);
    CK(cuMemAddressFree(base, seg * maxh));
    result("expandable seg=%llu handles=%d grow_rc=%d half=%lld half_lib=%llu regrown=%d regrow_rc=%d",
           seg, full, r, (long long)half, halflib, n, r2);
}

/* ---- vLLM: CUDA graphs of decode steps ---------------------------------- */
static u64 now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (u64)ts.tv_sec * 1000000000ull + (u64)ts.tv_nsec;
}

static void graph(int mode, int k, u64 us, u64 iters, u64 ms)
{
    void *s = NULL, *mod = NULL, *f = NULL, *gr = NULL, *ex = NULL;
    u64 out = 0;
    void *params[] = {&iters, &out};
    char name[32];
    snprintf(name, sizeof name, "k%llu", us);
    CK(cuStreamCreate(&s, 1));
    CK(cuMemAlloc_v2(&out, 4));
    CK(cuModuleLoadData(&mod, ptx));
    CK(cuModuleGetFunction(&f, mod, fake ? name : "spin"));
#define STEP(rc) for (int i = 0; i < k && !rc; i++) \
        rc = cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, s, fake ? NULL : params, NULL)
    CUresult eager = 0, launch = 0, cap_rc, end, inst = -1, rep = 0;
    for (int w = 0; w < 8 && !eager; w++) { /* eager warm-up steps, paced */
        STEP(eager);
        if (!eager)
            eager = cuStreamSynchronize(s);
    }
    int capturing = -1;
    cap_rc = cuStreamBeginCapture_v2(s, mode);
    CK(cuStreamIsCapturing(s, &capturing));
    STEP(launch);
    end = cuStreamEndCapture(s, &gr);
    if (!end)
        inst = cuGraphInstantiateWithFlags(&ex, gr, 0);
    u64 replays = 0, t0 = now_ns(), b0 = 0, t1 = 0;
    while (!inst && !rep && now_ns() - t0 < 2 * ms * 1000000ull) {
        if (!t1 && now_ns() - t0 >= ms * 1000000ull) /* warmed up: the window */
            t1 = now_ns(), b0 = fake ? fake_busy() : 0, replays = 0;
        rep = cuGraphLaunch(ex, s);
        if (!rep)
            rep = cuStreamSynchronize(s), replays++;
    }
    u64 wall = t1 ? now_ns() - t1 : 0, busy = fake && t1 ? fake_busy() - b0 : 0;
    if (ex)
        CK(cuGraphExecDestroy(ex));
    if (gr)
        CK(cuGraphDestroy(gr));
    CK(cuMemFree_v2(out));
    result("graph mode=%d eager_rc=%d begin_rc=%d capturing=%d launch_rc=%d end_rc=%d inst_rc=%d replay_rc=%d "
           "replays=%llu kernels=%llu wall_ns=%llu busy_ns=%llu",
           mode, eager, cap_rc, capturing, launch, end, inst, rep, replays, replays * k, wall, busy);
}

/* ---- vLLM: sleep mode ---------------------------------------------------- */
struct region { u64 va, size, h; };

static CUresult create_and_map(struct region *r)
{
    Prop pr = dev_prop(0);
    Access a = rw();
    CUresult e = cuMemCreate(&r->h, r->size, &pr, 0);
    if (e)
        return e;
    CK(cuMemMap(r->va, r->size, 0, r->h, 0));
    CK(cuMemSetAccess(r->va, r->size, &a, 1));
    return 0;
}

static void unmap_and_release(struct region *r)
{
    CK(cuMemUnmap(r->va, r->size));
    CK(cuMemRelease(r->h));
}

static void sleepmode(void)
{
    Prop pr = dev_prop(0);
    size_t g = 0;
    CK(cuMemGetAllocationGranularity(&g, &pr, 0));
    g = g ? g : 2 * MIB;
    /* four weight tensors of 10% of the share, a KV cache of 45%: vLLM's
     * gpu_memory_utilization of 0.9 less its activations' peak */
    struct region rs[5];
    CUresult awake = 0;
    for (int i = 0; i < 5; i++) {
        rs[i].size = up(i < 4 ? cap / 10 : cap * 45 / 100, g);
        CK(cuMemAddressReserve(&rs[i].va, rs[i].size, 0, 0, 0));
        if (!awake)
            awake = create_and_map(&rs[i]);
        sample();
    }
    u64 awake_drv = last_drv, awake_lib = lib_held(), x;
    CUresult extra = cuMemAlloc_v2(&x, up(cap / 5, g)); /* beyond the share */
    if (!extra)
        CK(cuMemFree_v2(x));
    for (int i = 0; i < 5; i++) /* sleep(level=1): weights offloaded, all released */
        unmap_and_release(&rs[i]), sample();
    u64 asleep_drv = last_drv, asleep_lib = lib_held();
    CUresult other = cuMemAlloc_v2(&x, up(cap / 2, g)); /* the room is the task's while asleep */
    if (!other)
        CK(cuMemFree_v2(x));
    CUresult wake = 0;
    for (int i = 0; i < 5 && !wake; i++) /* wake_up: the same addresses */
        wake = create_and_map(&rs[i]), sample();
    u64 woke_drv = last_drv, woke_lib = lib_held();
    for (int i = 0; i < 5; i++) {
        if (!wake)
            unmap_and_release(&rs[i]);
        CK(cuMemAddressFree(rs[i].va, rs[i].size));
    }
    result("sleep awake_rc=%d awake=%lld awake_lib=%llu extra_rc=%d asleep=%lld asleep_lib=%llu other_rc=%d "
           "wake_rc=%d woke=%lld woke_lib=%llu",
           awake, (long long)awake_drv, awake_lib, extra, (long long)asleep_drv, asleep_lib, other, wake,
           (long long)woke_drv, woke_lib);
}

/* ---- XLA / TensorFlow cuda_malloc_async ---------------------------------- */
enum { RELEASE_THRESHOLD = 4, RESERVED_MEM_CURRENT = 5 };

static u64 reserved(void *pool)
{
    u64 v = 0;
    CK(cuMemPoolGetAttribute(pool, RESERVED_MEM_CURRENT, &v));
    return v;
}

static void xla(int mode) /* 0 default pool, 1 new pool, 2 cuMemAllocAsync */
{
    int newpool = mode == 1;
    void *pool = NULL, *s = NULL;
    static u64 p[4096];
    unsigned char props[88] = {0};
    int one = 1, *pp = (int *)props;
    pp[0] = one, pp[2] = one, pp[3] = dev; /* pinned, on the device */
    if (newpool)
        CK(cuMemPoolCreate(&pool, props));
    else
        CK(cuDeviceGetDefaultMemPool(&pool, dev));
    CK(cuStreamCreate(&s, 1));
#define ALLOC(ptr, n) (mode < 2 ? cuMemAllocFromPoolAsync(ptr, n, pool, s) : cuMemAllocAsync(ptr, n, s))
    u64 size = up(cap * 3 / 4, 2 * MIB); /* XLA_PYTHON_CLIENT_MEM_FRACTION=.75 */
    CK(cuMemPoolSetAttribute(pool, RELEASE_THRESHOLD, &size));
    /* preallocation: the pool reserves it, and keeps it once freed */
    CUresult pre = ALLOC(&p[0], size);
    if (!pre)
        CK(cuMemFreeAsync(p[0], s));
    CK(cuStreamSynchronize(s));
    sample();
    u64 pre_res = reserved(pool), chunk = up(cap / 8, 2 * MIB);
    int n = 0;
    CUresult r = 0;
    while (n < 4096 && (r = ALLOC(&p[n], chunk)) == 0)
        n++, sample();
    size_t f = 0, t = 0;
    CK(cuMemGetInfo_v2(&f, &t)); /* XLA's log of the failure */
    u64 full_res = reserved(pool);
    for (int i = 0; i < n; i++)
        CK(cuMemFreeAsync(p[i], s));
    CK(cuStreamSynchronize(s));
    sample();
    u64 kept = reserved(pool), kept_lib = lib_held();
    CK(cuMemPoolTrimTo(pool, 0));
    sample();
    u64 trimmed = reserved(pool), trimmed_lib = lib_held();
    if (newpool)
        CK(cuMemPoolDestroy(pool));
    result("xla pool=%s pre_rc=%d prealloc=%llu allocs=%d alloc_rc=%d full_reserved=%llu kept=%llu "
           "kept_lib=%llu trimmed=%llu trimmed_lib=%llu",
           mode == 1 ? "new" : mode ? "async" : "default", pre, pre_res, n, r, full_res, kept, kept_lib, trimmed, trimmed_lib);
}

/* ---- NCCL cuMem buffers --------------------------------------------------- */
static void nccl(int relfirst)
{
    Prop pr = dev_prop(1); /* CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR */
    Access a = rw();
    size_t g = 0;
    CK(cuMemGetAllocationGranularity(&g, &pr, 0));
    u64 size = up(cap / 5, g ? g : 2 * MIB);
    struct region b[16];
    int n = 0, exported = 0;
    CUresult over = 0;
    while (n < 16) { /* ncclCuMemAlloc */
        if ((over = cuMemCreate(&b[n].h, size, &pr, 0)) != 0)
            break;
        CK(cuMemAddressReserve(&b[n].va, size, g, 0, 0));
        CK(cuMemMap(b[n].va, size, 0, b[n].h, 0));
        CK(cuMemSetAccess(b[n].va, size, &a, 1));
        int fd = -1; /* for the peers (ncclProxy): cuMemExportToShareableHandle */
        if (CK(cuMemExportToShareableHandle(&fd, b[n].h, 1, 0)) == 0 && fd >= 0)
            exported++, close(fd);
        u64 h = 0; /* a registration (ncclCuMemGetAddressRange): retain, release */
        CK(cuMemRetainAllocationHandle(&h, (void *)(uintptr_t)b[n].va));
        CK(cuMemRelease(h));
        if (relfirst)
            CK(cuMemRelease(b[n].h)); /* the mapping keeps the memory */
        n++, sample();
    }
    u64 full = last_drv, between = 0;
    for (int i = 0; i < n; i++) {
        if (relfirst) {
            CK(cuMemUnmap(b[i].va, size));
        } else { /* ncclCuMemFree */
            u64 h = 0;
            size_t sz = 0;
            CK(cuMemRetainAllocationHandle(&h, (void *)(uintptr_t)b[i].va));
            CK(cuMemRelease(h));
            CK(cuMemGetAddressRange_v2(NULL, &sz, b[i].va));
            CK(cuMemUnmap(b[i].va, sz));
            sample(); /* unmapped, not yet released: the driver still holds it */
            between = last_drv == ~0ull || last_drv > between ? last_drv : between;
            CK(cuMemRelease(h));
        }
        CK(cuMemAddressFree(b[i].va, size));
        sample();
    }
    result("nccl order=%s size=%llu bufs=%d over_rc=%d exported=%d full=%lld between=%lld",
           relfirst ? "release-first" : "nccl", size, n, over, exported, (long long)full, (long long)between);
}

static void *sym(const char *n)
{
    void *f = dlsym(lib, n);
    if (!f) {
        fprintf(stderr, "frameworks: the driver has no %s\n", n);
        exit(3);
    }
    return f;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc != 2) {
        fprintf(stderr, "usage: frameworks torch|expandable|graph:M:K:US:ITERS:MS|sleep|xla:POOL|nccl:ORDER\n");
        return 2;
    }
    lib = dlopen("libcuda.so.1", RTLD_NOW);
    if (!lib) {
        printf("init -1 %s\n", dlerror());
        return 4;
    }
#define LOAD(n, a) *(void **)&n = sym(#n);
    FNS(LOAD)
    *(void **)&fake_used = dlsym(lib, "fakecuda_used");
    *(void **)&fake_busy = dlsym(lib, "fakecuda_busy_ns");
    fake = fake_used && fake_busy;
    void *ctx;
    CUresult r = cuInit(0);
    if (!r)
        r = cuDeviceGet(&dev, 0);
    if (!r)
        r = cuCtxCreate_v2(&ctx, 0, dev);
    if (r) {
        printf("init %d\n", r);
        return 4;
    }
    if (!fake) {
        nvml_open();
        ctx_base = nvml_used();
    }
    size_t f = 0, t = 0;
    CK(cuMemGetInfo_v2(&f, &t));
    cap = t;
    char *c = argv[1];
    unsigned long long a[5] = {0};
    char word[32] = "";
    sscanf(c, "%*[^:]:%31[^:]", word);
    if (strcmp(c, "torch") == 0)
        torch();
    else if (strcmp(c, "expandable") == 0)
        expandable();
    else if (sscanf(c, "graph:%llu:%llu:%llu:%llu:%llu", &a[0], &a[1], &a[2], &a[3], &a[4]) == 5)
        graph((int)a[0], (int)a[1], a[2], a[3], a[4]);
    else if (strcmp(c, "sleep") == 0)
        sleepmode();
    else if (strncmp(c, "xla:", 4) == 0)
        xla(strcmp(word, "new") == 0 ? 1 : strcmp(word, "async") == 0 ? 2 : 0);
    else if (strncmp(c, "nccl:", 5) == 0)
        nccl(strcmp(word, "release-first") == 0);
    else {
        fprintf(stderr, "frameworks: unknown command %s\n", c);
        return 2;
    }
    return 0;
}
