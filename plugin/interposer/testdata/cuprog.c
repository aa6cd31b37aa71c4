/* A driver-API test program: runs the commands on its command line and
 * prints one line per command. argv[1] picks how it finds the driver:
 *   direct    calls the functions it was linked against (build with -DLINKED)
 *   dlsym     dlopen("libcuda.so.1") and dlsym from the handle
 *   procaddr  cuGetProcAddress_v2 (CUDA 12 style, base names), itself
 *             found with dlsym
 *   procaddr1 the same through cuGetProcAddress (CUDA 11.3 style)
 * Commands (each prints "<cmd> <result> [values]"):
 *   alloc:N managed:N async:N pool:N create:N  allocate N bytes (rc)
 *   pitch:W:H array:W:H array3d:W:H:D          pitched or array allocation (rc)
 *   mipmap:W:H:D:L  mipmapped array of L levels, float, one channel (rc)
 *   fill:N         allocate N-byte blocks until refused ("fill <count> <last rc>")
 *   free:I         free the I-th successful allocation (rc)
 *   info           cuMemGetInfo_v2 ("info <rc> <free> <total>")
 *   total          cuDeviceTotalMem_v2 ("total <rc> <bytes>")
 *   fake           what the fake driver really holds ("fake 0 <bytes>")
 *   umem           of that, managed memory, and managed memory advised to
 *                  stay on the device ("umem 0 <managed> <preferred>")
 *   device:N       a new context on device N, made current (rc): later
 *                  allocations are that device's
 *   setenv:K=V     setenv in this process ("setenv 0")
 *   wait           block until stdin closes ("wait 0" after)
 *   bench:N        N pairs of cuMemAlloc_v2(256 bytes) + cuMemFree_v2
 *                  ("bench 0 <ns per pair>")
 *   infobench:N    N calls of cuMemGetInfo_v2 ("infobench <rc> <ns per call>")
 *   probe          gs_probe() from the global scope ("probe <value>"), see
 *                  testdata/nextlib.c
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
typedef struct { size_t Width, Height; int Format; unsigned NumChannels; } AD;
typedef struct { size_t Width, Height, Depth; int Format; unsigned NumChannels, Flags; } AD3;

static struct {
    CUresult (*init)(unsigned);
    CUresult (*devget)(int *, int);
    CUresult (*ctx)(void **, unsigned, int);
    CUresult (*alloc)(CUdeviceptr *, size_t);
    CUresult (*managed)(CUdeviceptr *, size_t, unsigned);
    CUresult (*async)(CUdeviceptr *, size_t, void *);
    CUresult (*pool)(CUdeviceptr *, size_t, void *, void *);
    CUresult (*create)(unsigned long long *, size_t, const void *, unsigned long long);
    CUresult (*pitch)(CUdeviceptr *, size_t *, size_t, size_t, unsigned);
    CUresult (*array)(void **, const AD *);
    CUresult (*array3d)(void **, const AD3 *);
    CUresult (*free)(CUdeviceptr);
    CUresult (*freeasync)(CUdeviceptr, void *);
    CUresult (*release)(unsigned long long);
    CUresult (*destroy)(void *);
    CUresult (*info)(size_t *, size_t *);
    CUresult (*total)(size_t *, int);
    CUresult (*mipmap)(void **, const AD3 *, unsigned);
    CUresult (*mipdestroy)(void *);
} cu;

#ifdef LINKED
CUresult cuInit(unsigned);
CUresult cuDeviceGet(int *, int);
CUresult cuCtxCreate_v2(void **, unsigned, int);
CUresult cuMemAlloc_v2(CUdeviceptr *, size_t);
CUresult cuMemAllocManaged(CUdeviceptr *, size_t, unsigned);
CUresult cuMemAllocAsync(CUdeviceptr *, size_t, void *);
CUresult cuMemAllocFromPoolAsync(CUdeviceptr *, size_t, void *, void *);
CUresult cuMemCreate(unsigned long long *, size_t, const void *, unsigned long long);
CUresult cuMemAllocPitch_v2(CUdeviceptr *, size_t *, size_t, size_t, unsigned);
CUresult cuArrayCreate_v2(void **, const AD *);
CUresult cuArray3DCreate_v2(void **, const AD3 *);
CUresult cuMemFree_v2(CUdeviceptr);
CUresult cuMemFreeAsync(CUdeviceptr, void *);
CUresult cuMemRelease(unsigned long long);
CUresult cuArrayDestroy(void *);
CUresult cuMemGetInfo_v2(size_t *, size_t *);
CUresult cuDeviceTotalMem_v2(size_t *, int);
CUresult cuMipmappedArrayCreate(void **, const AD3 *, unsigned);
CUresult cuMipmappedArrayDestroy(void *);

static void bind_direct(void)
{
    cu.init = cuInit; cu.devget = cuDeviceGet; cu.ctx = cuCtxCreate_v2;
    cu.alloc = cuMemAlloc_v2; cu.managed = cuMemAllocManaged; cu.async = cuMemAllocAsync;
    cu.pool = cuMemAllocFromPoolAsync; cu.create = cuMemCreate; cu.pitch = cuMemAllocPitch_v2;
    cu.array = cuArrayCreate_v2; cu.array3d = cuArray3DCreate_v2; cu.free = cuMemFree_v2;
    cu.freeasync = cuMemFreeAsync; cu.release = cuMemRelease; cu.destroy = cuArrayDestroy;
    cu.info = cuMemGetInfo_v2; cu.total = cuDeviceTotalMem_v2;
    cu.mipmap = cuMipmappedArrayCreate; cu.mipdestroy = cuMipmappedArrayDestroy;
}
#endif

static void *lib;

static void *need(void *p, const char *name)
{
    if (!p) {
        fprintf(stderr, "cuprog: cannot resolve %s\n", name);
        exit(3);
    }
    return p;
}

#define SYM(field, name) *(void **)&cu.field = need(dlsym(lib, name), name)

static void bind_dlsym(void)
{
    SYM(init, "cuInit"); SYM(devget, "cuDeviceGet"); SYM(ctx, "cuCtxCreate_v2");
    SYM(alloc, "cuMemAlloc_v2"); SYM(managed, "cuMemAllocManaged"); SYM(async, "cuMemAllocAsync");
    SYM(pool, "cuMemAllocFromPoolAsync"); SYM(create, "cuMemCreate"); SYM(pitch, "cuMemAllocPitch_v2");
    SYM(array, "cuArrayCreate_v2"); SYM(array3d, "cuArray3DCreate_v2"); SYM(free, "cuMemFree_v2");
    SYM(freeasync, "cuMemFreeAsync"); SYM(release, "cuMemRelease"); SYM(destroy, "cuArrayDestroy");
    SYM(info, "cuMemGetInfo_v2"); SYM(total, "cuDeviceTotalMem_v2");
    SYM(mipmap, "cuMipmappedArrayCreate"); SYM(mipdestroy, "cuMipmappedArrayDestroy");
}

static CUresult (*gpa1)(const char *, void **, int, unsigned long long);
static CUresult (*gpa2)(const char *, void **, int, unsigned long long, int *);

/* base name, CUDA 12.0, flags: as a CUDA 12 runtime asks */
static void *gpa(const char *name, unsigned long long flags)
{
    void *p = NULL;
    int st = -1;
    CUresult r = gpa2 ? gpa2(name, &p, 12000, flags, &st) : gpa1(name, &p, 12000, flags);
    if (r != 0 || (gpa2 && st != 0))
        p = NULL;
    return need(p, name);
}

#define GPA(field, name, flags) *(void **)&cu.field = gpa(name, flags)

static void bind_procaddr(void)
{
    GPA(init, "cuInit", 0); GPA(devget, "cuDeviceGet", 0); GPA(ctx, "cuCtxCreate", 0);
    GPA(alloc, "cuMemAlloc", 0); GPA(managed, "cuMemAllocManaged", 0);
    GPA(async, "cuMemAllocAsync", 2); /* per-thread default stream: the _ptsz variant */
    GPA(pool, "cuMemAllocFromPoolAsync", 2); GPA(create, "cuMemCreate", 0);
    GPA(pitch, "cuMemAllocPitch", 0); GPA(array, "cuArrayCreate", 0);
    GPA(array3d, "cuArray3DCreate", 0); GPA(free, "cuMemFree", 0);
    GPA(freeasync, "cuMemFreeAsync", 2); GPA(release, "cuMemRelease", 0);
    GPA(destroy, "cuArrayDestroy", 0); GPA(info, "cuMemGetInfo", 0);
    GPA(total, "cuDeviceTotalMem", 0);
    GPA(mipmap, "cuMipmappedArrayCreate", 0); GPA(mipdestroy, "cuMipmappedArrayDestroy", 0);
}

/* successful allocations, in order, for free:I */
static struct { char kind; uint64_t v; } held[4096];
static int nheld;

static void hold(char kind, uint64_t v)
{
    if (nheld < 4096) {
        held[nheld].kind = kind;
        held[nheld++].v = v;
    }
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc < 2)
        return 2;
    const char *mode = argv[1];
    lib = dlopen("libcuda.so.1", RTLD_NOW);
    if (!lib) {
        fprintf(stderr, "cuprog: %s\n", dlerror());
        return 3;
    }
    if (strcmp(mode, "direct") == 0) {
#ifdef LINKED
        bind_direct();
#else
        fprintf(stderr, "cuprog: built without -DLINKED\n");
        return 2;
#endif
    } else if (strcmp(mode, "dlsym") == 0) {
        bind_dlsym();
    } else if (strcmp(mode, "procaddr") == 0 || strcmp(mode, "procaddr1") == 0) {
        if (mode[8] == '1')
            *(void **)&gpa1 = need(dlsym(lib, "cuGetProcAddress"), "cuGetProcAddress");
        else
            *(void **)&gpa2 = need(dlsym(lib, "cuGetProcAddress_v2"), "cuGetProcAddress_v2");
        bind_procaddr();
    } else {
        return 2;
    }
    int dev;
    void *ctx;
    if (cu.init(0) || cu.devget(&dev, 0) || cu.ctx(&ctx, 0, dev)) {
        fprintf(stderr, "cuprog: init failed\n");
        return 3;
    }

    for (int i = 2; i < argc; i++) {
        char *c = argv[i], *arg = strchr(c, ':');
        unsigned long long a = 0, b = 0, d = 0, e = 0;
        if (arg)
            sscanf(arg + 1, "%llu:%llu:%llu:%llu", &a, &b, &d, &e);
        CUdeviceptr p = 0;
        CUresult r = 0;
        if (strncmp(c, "alloc:", 6) == 0) {
            if (!(r = cu.alloc(&p, a))) hold('p', p);
        } else if (strncmp(c, "device:", 7) == 0) {
            if (!(r = cu.devget(&dev, (int)a)))
                r = cu.ctx(&ctx, 0, dev);
        } else if (strncmp(c, "managed:", 8) == 0) {
            if (!(r = cu.managed(&p, a, 1))) hold('p', p);
        } else if (strncmp(c, "async:", 6) == 0) {
            if (!(r = cu.async(&p, a, NULL))) hold('a', p);
        } else if (strncmp(c, "pool:", 5) == 0) {
            if (!(r = cu.pool(&p, a, NULL, NULL))) hold('a', p);
        } else if (strncmp(c, "create:", 7) == 0) {
            unsigned long long h;
            if (!(r = cu.create(&h, a, NULL, 0))) hold('h', h);
        } else if (strncmp(c, "pitch:", 6) == 0) {
            size_t pitch;
            if (!(r = cu.pitch(&p, &pitch, a, b, 4))) hold('p', p);
        } else if (strncmp(c, "array:", 6) == 0) {
            AD desc = {a, b, 0x20, 1}; /* float, one channel */
            void *arr;
            if (!(r = cu.array(&arr, &desc))) hold('r', (uintptr_t)arr);
        } else if (strncmp(c, "array3d:", 8) == 0) {
            AD3 desc = {a, b, d, 0x20, 1, 0};
            void *arr;
            if (!(r = cu.array3d(&arr, &desc))) hold('r', (uintptr_t)arr);
        } else if (strncmp(c, "mipmap:", 7) == 0) {
            AD3 desc = {a, b, d, 0x20, 1, 0};
            void *m;
            if (!(r = cu.mipmap(&m, &desc, (unsigned)e))) hold('m', (uintptr_t)m);
        } else if (strncmp(c, "fill:", 5) == 0) {
            int n = 0;
            while (!(r = cu.alloc(&p, a))) {
                hold('p', p);
                n++;
            }
            printf("fill %d %d\n", n, r);
            continue;
        } else if (strncmp(c, "free:", 5) == 0) {
            if (a >= (unsigned long long)nheld) {
                r = -1;
            } else {
                uint64_t v = held[a].v;
                switch (held[a].kind) {
                case 'p': r = cu.free(v); break;
                case 'a': r = cu.freeasync(v, NULL); break;
                case 'h': r = cu.release(v); break;
                case 'm': r = cu.mipdestroy((void *)(uintptr_t)v); break;
                default: r = cu.destroy((void *)(uintptr_t)v); break;
                }
            }
        } else if (strcmp(c, "info") == 0) {
            size_t f = 0, t = 0;
            r = cu.info(&f, &t);
            printf("info %d %zu %zu\n", r, f, t);
            continue;
        } else if (strcmp(c, "total") == 0) {
            size_t t = 0;
            r = cu.total(&t, dev);
            printf("total %d %zu\n", r, t);
            continue;
        } else if (strcmp(c, "fake") == 0) {
            uint64_t (*used)(void) = need(dlsym(lib, "fakecuda_used"), "fakecuda_used");
            printf("fake 0 %llu\n", (unsigned long long)used());
            continue;
        } else if (strcmp(c, "visible") == 0) {
            const char *(*seen)(void) = need(dlsym(lib, "fakecuda_visible"), "fakecuda_visible");
            printf("visible 0 %s\n", seen());
            continue;
        } else if (strncmp(c, "getenv:", 7) == 0) {
            const char *v = getenv(c + 7);
            printf("getenv 0 %s\n", v ? v : "-");
            continue;
        } else if (strcmp(c, "umem") == 0) {
            uint64_t (*managed)(uint64_t *) = need(dlsym(lib, "fakecuda_managed"), "fakecuda_managed");
            uint64_t pref = 0, m = managed(&pref);
            printf("umem 0 %llu %llu\n", (unsigned long long)m, (unsigned long long)pref);
            continue;
        } else if (strncmp(c, "bench:", 6) == 0) {
            struct timespec t0, t1;
            clock_gettime(CLOCK_MONOTONIC, &t0);
            for (unsigned long long k = 0; k < a && !r; k++)
                if (!(r = cu.alloc(&p, 256)))
                    r = cu.free(p);
            clock_gettime(CLOCK_MONOTONIC, &t1);
            double ns = (t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec);
            printf("bench %d %.1f\n", r, a ? ns / a : 0);
            continue;
        } else if (strncmp(c, "infobench:", 10) == 0) {
            struct timespec t0, t1;
            size_t f, t;
            a = strtoull(c + 10, NULL, 10);
            clock_gettime(CLOCK_MONOTONIC, &t0);
            for (unsigned long long k = 0; k < a && !r; k++)
                r = cu.info(&f, &t);
            clock_gettime(CLOCK_MONOTONIC, &t1);
            double ns = (t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec);
            printf("infobench %d %.1f\n", r, a ? ns / a : 0);
            continue;
        } else if (strcmp(c, "probe") == 0) {
            int (*probe)(void) = need(dlsym(RTLD_DEFAULT, "gs_probe"), "gs_probe");
            printf("probe %d\n", probe());
            continue;
        } else if (strncmp(c, "setenv:", 7) == 0) {
            char *eq = strchr(c + 7, '=');
            if (eq) {
                *eq = 0;
                r = setenv(c + 7, eq + 1, 1);
            }
        } else if (strcmp(c, "wait") == 0) {
            char buf[64];
            while (read(0, buf, sizeof buf) > 0)
                ;
        } else {
            fprintf(stderr, "cuprog: unknown command %s\n", c);
            return 2;
        }
        printf("%.*s %d\n", (int)(arg ? arg - c : (long)strlen(c)), c, r);
    }
    return 0;
}
