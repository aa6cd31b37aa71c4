/* A fake libcuda.so.1 for tests on machines without a GPU: the driver calls
 * the interposer tests make, over fake device memory of FAKECUDA_TOTAL_BYTES
 * (default 1 GiB) per process. Addresses are handed out, never backed.
 * fakecuda_used() (not a driver call) tells a test what the "device" really
 * holds, behind the interposer's back. Link with -Wl,-Bsymbolic so that
 * cuGetProcAddress hands out this library's own functions, as the real
 * driver does, not whatever a preloaded library exports under those names.
 * Kernels, events and the GPU shared by processes: testdata/fakegpu.c. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
typedef struct {
    size_t Width, Height;
    int Format;
    unsigned NumChannels;
} AD;
typedef struct {
    size_t Width, Height, Depth;
    int Format;
    unsigned NumChannels, Flags;
} AD3;

#define MAXA 65536
static struct { uint64_t addr, size; unsigned flags; } live[MAXA]; /* flags: F_MANAGED | F_PREFER_DEV */
static uint64_t used, total, next_addr = 0x700000000000ull;
static uint64_t peak; /* the most used ever held: fakecuda_peak() */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

static void init_total(void)
{
    if (!total) {
        const char *t = getenv("FAKECUDA_TOTAL_BYTES");
        total = t ? strtoull(t, NULL, 10) : (1ull << 30);
    }
}

static CUresult fake_alloc(unsigned long long *out, uint64_t n)
{
    if (!out || !n)
        return 1; /* CUDA_ERROR_INVALID_VALUE */
    CUresult r = 2;
    pthread_mutex_lock(&mu);
    init_total();
    if (n <= total - used) {
        for (int i = 0; i < MAXA; i++) {
            if (!live[i].addr) {
                live[i].addr = next_addr;
                live[i].size = n;
                live[i].flags = 0;
                *out = next_addr;
                next_addr += (n + 255) / 256 * 256 + 256;
                used += n;
                peak = used > peak ? used : peak;
                r = 0;
                break;
            }
        }
    }
    pthread_mutex_unlock(&mu);
    return r;
}

/* testdata/fakevmm.c, included at the end */
static uint64_t fakevmm_freed(unsigned flags, uint64_t size);
static void *fakevmm_find(const char *name);

static CUresult fake_free(uint64_t a)
{
    CUresult r = 1;
    pthread_mutex_lock(&mu);
    for (int i = 0; i < MAXA; i++) {
        if (a && live[i].addr == a) {
            used -= fakevmm_freed(live[i].flags, live[i].size); /* a pool keeps some */
            live[i].addr = 0;
            r = 0;
            break;
        }
    }
    pthread_mutex_unlock(&mu);
    return r;
}

uint64_t fakecuda_used(void) { return used; }
uint64_t fakecuda_peak(void) { return peak; }

/* not a driver call: the end of the RTLD_NEXT chain of testdata/nextlib.c */
int gs_probe(void) { return 1; }

/* CUDA_VISIBLE_DEVICES as the driver read it at cuInit (not a driver
 * call: cuprog's "visible"), to show what the library composed before. */
static char visible[1024] = "-";
const char *fakecuda_visible(void) { return visible; }
CUresult cuInit(unsigned f)
{
    (void)f;
    const char *v = getenv("CUDA_VISIBLE_DEVICES");
    if (v && strcmp(visible, "-") == 0)
        snprintf(visible, sizeof visible, "%s", v);
    init_total();
    return 0;
}

/* FAKECUDA_DEVICES devices (default 1), ordinals 0..n-1; their memory is
 * one pool (the fake's `total`), their GPU timelines testdata/fakegpu.c's. */
static int ndevices(void)
{
    const char *n = getenv("FAKECUDA_DEVICES");
    int v = n ? atoi(n) : 1;
    return v < 1 ? 1 : v > 8 ? 8 : v;
}
CUresult cuDeviceGetCount(int *n) { *n = ndevices(); return 0; }
CUresult cuDeviceGet(int *d, int ord) { if (ord < 0 || ord >= ndevices()) return 101; *d = ord; return 0; }

/* Not a driver call: device ord's UUID, the 16 bytes NVML's fake names
 * (testdata/fakenvml.c, "GPU-" and their hex): the same scheme on both. */
void fakecuda_uuid(int ord, unsigned char u[16])
{
    for (int i = 0; i < 15; i++)
        u[i] = (unsigned char)(0x10 * i + 7);
    u[15] = (unsigned char)ord;
}
void fakegpu_count(void); /* testdata/fakegpu.c: a call a paced launch may make */
CUresult cuDeviceGetUuid(unsigned char *u, int d)
{
    fakegpu_count();
    if (d < 0 || d >= ndevices())
        return 101; /* CUDA_ERROR_INVALID_DEVICE */
    fakecuda_uuid(d, u);
    return 0;
}
CUresult cuCtxCreate_v2(void **c, unsigned f, int d); /* testdata/fakecapture.c */

CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n) { return fake_alloc(p, n); }
CUresult cuMemAllocManaged(CUdeviceptr *p, size_t n, unsigned f);
/* pools and VMM handles: testdata/fakevmm.c */
CUresult cuMemAllocAsync(CUdeviceptr *p, size_t n, void *s);
CUresult cuMemAllocAsync_ptsz(CUdeviceptr *p, size_t n, void *s);
CUresult cuMemAllocFromPoolAsync(CUdeviceptr *p, size_t n, void *pl, void *s);
CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *p, size_t n, void *pl, void *s);
CUresult cuMemCreate(unsigned long long *h, size_t n, const void *prop, unsigned long long f);

/* pitch aligned to 256 bytes: less than the interposer's 512-byte estimate */
CUresult cuMemAllocPitch_v2(CUdeviceptr *p, size_t *pitch, size_t w, size_t h, unsigned e)
{
    (void)e;
    *pitch = (w + 255) / 256 * 256;
    return fake_alloc(p, (uint64_t)*pitch * h);
}

static uint64_t elem(int f) { return f == 1 || f == 8 ? 1 : f == 2 || f == 9 || f == 0x10 ? 2 : 4; }

CUresult cuArrayCreate_v2(void **a, const AD *d)
{
    unsigned long long p;
    CUresult r = fake_alloc(&p, elem(d->Format) * d->NumChannels * d->Width * (d->Height ? d->Height : 1));
    *a = (void *)(uintptr_t)p;
    return r;
}

CUresult cuArray3DCreate_v2(void **a, const AD3 *d)
{
    unsigned long long p;
    CUresult r = fake_alloc(&p, elem(d->Format) * d->NumChannels * d->Width *
                                    (d->Height ? d->Height : 1) * (d->Depth ? d->Depth : 1));
    *a = (void *)(uintptr_t)p;
    return r;
}

CUresult cuMemFree_v2(CUdeviceptr p) { return fake_free(p); }
CUresult cuMemFreeAsync(CUdeviceptr p, void *s) { (void)s; return fake_free(p); }
CUresult cuMemFreeAsync_ptsz(CUdeviceptr p, void *s) { (void)s; return fake_free(p); }
CUresult cuMemRelease(unsigned long long h);
CUresult cuArrayDestroy(void *a) { return fake_free((uintptr_t)a); }

CUresult cuMemGetInfo_v2(size_t *f, size_t *t)
{
    pthread_mutex_lock(&mu);
    init_total();
    *f = total - used;
    *t = total;
    pthread_mutex_unlock(&mu);
    return 0;
}

CUresult cuDeviceTotalMem_v2(size_t *b, int d) { (void)d; init_total(); *b = total; return 0; }

CUresult cuGetProcAddress(const char *, void **, int, unsigned long long);
CUresult cuMipmappedArrayCreate(void **, const AD3 *, unsigned);
CUresult cuMipmappedArrayDestroy(void *);
CUresult cuMemAdvise(CUdeviceptr, size_t, int, int);
CUresult cuCtxGetDevice(int *);
CUresult cuGetProcAddress_v2(const char *, void **, int, unsigned long long, int *);

/* testdata/fakegpu.c: the GPU timeline, launches, events, modules and
 * synchronization; declared here only to take their addresses */
#define FAKEGPU(X)                                                              \
    X(cuLaunchKernel) X(cuLaunchKernel_ptsz) X(cuLaunchKernelEx)                \
    X(cuLaunchKernelEx_ptsz) X(cuLaunchCooperativeKernel)                       \
    X(cuLaunchCooperativeKernel_ptsz) X(cuLaunch) X(cuLaunchGrid)               \
    X(cuLaunchGridAsync) X(cuEventCreate) X(cuEventDestroy_v2)                  \
    X(cuEventRecord) X(cuEventRecord_ptsz) X(cuEventQuery) X(cuEventSynchronize) \
    X(cuEventElapsedTime) X(cuStreamSynchronize) X(cuStreamSynchronize_ptsz)    \
    X(cuCtxSynchronize) X(cuModuleLoadData) X(cuModuleGetFunction)
#define DECL(n) void n(void);
FAKEGPU(DECL)
#define EC(n) E(n),

#define E(n) {#n, (void *)n}
static const struct { const char *name; void *fn; } table[] = {
    E(cuInit), E(cuDeviceGet), E(cuCtxCreate_v2), E(cuMemAlloc_v2), E(cuMemAllocManaged),
    E(cuMemAllocAsync), E(cuMemAllocAsync_ptsz), E(cuMemAllocFromPoolAsync),
    E(cuMemAllocFromPoolAsync_ptsz), E(cuMemCreate), E(cuMemAllocPitch_v2),
    E(cuArrayCreate_v2), E(cuArray3DCreate_v2), E(cuMemFree_v2), E(cuMemFreeAsync),
    E(cuMemFreeAsync_ptsz), E(cuMemRelease), E(cuArrayDestroy), E(cuMemGetInfo_v2),
    E(cuDeviceTotalMem_v2), E(cuGetProcAddress), E(cuGetProcAddress_v2),
    E(cuMipmappedArrayCreate), E(cuMipmappedArrayDestroy), E(cuMemAdvise), E(cuCtxGetDevice),
    E(cuDeviceGetCount), E(cuDeviceGetUuid),
    FAKEGPU(EC)
};

static void *find(const char *n)
{
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (strcmp(table[i].name, n) == 0)
            return table[i].fn;
    return fakevmm_find(n);
}

/* Like the driver: a base name, the caller's version and flags pick the
 * variant (per-thread-stream _ptsz for flag 2, else the newest _v2). */
CUresult cuGetProcAddress_v2(const char *sym, void **pfn, int ver, unsigned long long flags, int *st)
{
    char n[128];
    void *f = NULL;
    if (flags & 2) {
        snprintf(n, sizeof n, "%s_ptsz", sym);
        f = find(n);
    }
    if (!f && ver >= 3020) {
        snprintf(n, sizeof n, "%s_v2", sym);
        f = find(n);
    }
    if (!f)
        f = find(sym);
    *pfn = f;
    if (st)
        *st = f ? 0 : 1;
    return f ? 0 : 500;
}

CUresult cuGetProcAddress(const char *sym, void **pfn, int ver, unsigned long long flags)
{
    return cuGetProcAddress_v2(sym, pfn, ver, flags, NULL);
}

/* ---- mipmapped arrays and managed memory (issue 20) ---- */

/* Every level, each halving the extents (never below 1), the level count
 * clamped to [1, 1 + log2(largest extent)], as the driver does. */
CUresult cuMipmappedArrayCreate(void **m, const AD3 *d, unsigned levels)
{
    size_t w = d->Width, h = d->Height, z = d->Depth, big = w > h ? w : h;
    unsigned most = 1;
    for (big = big > z ? big : z; big > 1; big >>= 1)
        most++;
    levels = levels < 1 ? 1 : levels > most ? most : levels;
    uint64_t n = 0;
    for (unsigned l = 0; l < levels; l++) {
        n += elem(d->Format) * d->NumChannels * w * (h ? h : 1) * (z ? z : 1);
        w = w > 1 ? w / 2 : w;
        h = h > 1 ? h / 2 : h;
        z = z > 1 ? z / 2 : z;
    }
    unsigned long long p;
    CUresult r = fake_alloc(&p, n);
    *m = (void *)(uintptr_t)p;
    return r;
}

CUresult cuMipmappedArrayDestroy(void *m) { return fake_free((uintptr_t)m); }

enum { F_MANAGED = 1, F_PREFER_DEV = 2 };

/* Sets flag on the live allocation at a; 1 (CUDA_ERROR_INVALID_VALUE) when
 * there is none, or when need is set and the allocation lacks it. */
static CUresult mark(uint64_t a, unsigned flag, unsigned need)
{
    CUresult r = 1;
    pthread_mutex_lock(&mu);
    for (int i = 0; i < MAXA; i++) {
        if (a && live[i].addr == a && (live[i].flags & need) == need) {
            live[i].flags |= flag;
            r = 0;
            break;
        }
    }
    pthread_mutex_unlock(&mu);
    return r;
}

CUresult cuMemAllocManaged(CUdeviceptr *p, size_t n, unsigned f)
{
    (void)f;
    CUresult r = fake_alloc(p, n);
    return r ? r : mark(*p, F_MANAGED, 0);
}


/* Records CU_MEM_ADVISE_SET_PREFERRED_LOCATION (3) for device 0 on managed
 * memory; other advice is accepted and forgotten. */
CUresult cuMemAdvise(CUdeviceptr p, size_t n, int advice, int dev)
{
    (void)n;
    if (advice == 3 && dev == 0)
        return mark(p, F_PREFER_DEV, F_MANAGED);
    return 0;
}

/* Not a driver call: the live managed bytes, and of them those advised to
 * stay on the device. */
uint64_t fakecuda_managed(uint64_t *preferred)
{
    uint64_t m = 0, d = 0;
    pthread_mutex_lock(&mu);
    for (int i = 0; i < MAXA; i++) {
        if (live[i].addr && (live[i].flags & F_MANAGED))
            m += live[i].size;
        if (live[i].addr && (live[i].flags & F_PREFER_DEV))
            d += live[i].size;
    }
    pthread_mutex_unlock(&mu);
    *preferred = d;
    return m;
}

#include "fakecapture.c" /* streams, capture, graphs, stream waits, contexts */

#include "fakevmm.c"
