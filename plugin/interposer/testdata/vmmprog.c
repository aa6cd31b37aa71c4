/* A driver-API test program for memory the driver keeps after a free
 * (vmm_test.go): VMM handles, stream-ordered pools, graph memory nodes, and
 * exec. Finds every function with dlsym from dlopen("libcuda.so.1") (the
 * interposer answers intercepted names), or with argv[1] "procaddr" through
 * cuGetProcAddress_v2 (CUDA 12 style; what is not a driver function, from
 * dlsym). Runs the commands on its command line; each prints
 * "<cmd> <rc> [values]". Commands that make something append it to a list;
 * later commands name it by its index in that list (I, H, V, P below).
 *   create:N        cuMemCreate of N bytes
 *   createx:N       the same, exportable as a POSIX file descriptor
 *   export:H        cuMemExportToShareableHandle of H (an fd, listed)
 *   import:F        cuMemImportFromShareableHandle of fd F (a handle, of
 *                   the exported one's size for map)
 *   reserve:N       cuMemAddressReserve of N bytes
 *   map:V:H         cuMemMap handle H at the start of range V, whole handle
 *   unmap:V:N       cuMemUnmap of N bytes at the start of range V
 *   release:H       cuMemRelease
 *   alloc:N         cuMemAlloc_v2;  free:I cuMemFree_v2
 *   async:N         cuMemAllocAsync (the device's pool); freeasync:I cuMemFreeAsync
 *   defpool         cuDeviceGetMemPool;  poolcreate  cuMemPoolCreate
 *   poolalloc:P:N   cuMemAllocFromPoolAsync from pool P
 *   threshold:P:N   CU_MEMPOOL_ATTR_RELEASE_THRESHOLD of pool P := N
 *   reserved:P      its CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT ("reserved <rc> <bytes>")
 *   graph           cuGraphCreate
 *   graphnode:G:N   cuGraphAddMemAllocNode of N bytes in graph G, on
 *                   the current device
 *   inst:G          cuGraphInstantiateWithFlags of graph G (listed)
 *   launch:E        cuGraphLaunch of executable E on the NULL stream
 *   gtrim           cuDeviceGraphMemTrim of the current device
 *   ctx:D           cuCtxCreate_v2 on device D (current from then on)
 *   stream          cuStreamCreate (listed)
 *   capture:S       cuStreamBeginCapture_v2 of stream S, global mode
 *   asyncon:S:N     cuMemAllocAsync of N bytes on stream S
 *   endcap:S        cuStreamEndCapture of stream S (the graph, listed)
 *   replay:G        cuGraphInstantiateWithFlags of graph G, then
 *                   cuGraphLaunch of it on the NULL stream (which
 *                   allocates its memory nodes, as the driver does)
 *   race:T:N        T threads, started together, each cuMemAllocAsync
 *                   of N bytes ("race 0 <grants>"; each grant is held)
 *   info            cuMemGetInfo_v2 ("info <rc> <free> <total>")
 *   fake            what the fake device really holds ("fake 0 <bytes>")
 *   peak            the most it ever held ("peak 0 <bytes>")
 *   exec            execs this program again with the commands after it
 *                   (same pid, a new image)
 *   wait            blocks until stdin closes ("wait 0" after) */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef int CUresult;
typedef unsigned long long u64;

typedef struct {
    char poolProps[88];
    const void *accessDescs;
    size_t accessDescCount;
    size_t bytesize;
    u64 dptr;
} MEM_ALLOC_NODE_PARAMS;

static void *lib;
static int (*gpa2)(const char *, void **, int, unsigned long long, int *);

static void *sym(const char *name)
{
    void *p = NULL;
    int st = -1;
    if (!gpa2 || gpa2(name, &p, 12000, 0, &st) != 0 || st != 0)
        p = dlsym(lib, name);
    if (!p) {
        fprintf(stderr, "vmmprog: cannot resolve %s\n", name);
        exit(3);
    }
    return p;
}

#define CALL(type, name) ((type)sym(name))

static u64 held[4096], sizes[4096];
static int nheld;

static void hold(u64 v, u64 size)
{
    if (nheld < 4096) {
        sizes[nheld] = size;
        held[nheld++] = v;
    }
}

/* race: each thread's allocation, after a barrier */
static pthread_barrier_t bar;
static u64 race_n;
static struct { u64 p; CUresult r; } races[64];

static void *racer(void *arg)
{
    int k = (int)(intptr_t)arg;
    CUresult (*f)(u64 *, size_t, void *) = CALL(CUresult (*)(u64 *, size_t, void *), "cuMemAllocAsync");
    pthread_barrier_wait(&bar);
    races[k].r = f(&races[k].p, race_n, NULL);
    return NULL;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    lib = dlopen("libcuda.so.1", RTLD_NOW);
    if (!lib || argc < 2) {
        fprintf(stderr, "vmmprog: %s\n", lib ? "usage" : dlerror());
        return 3;
    }
    if (strcmp(argv[1], "procaddr") == 0)
        *(void **)&gpa2 = sym("cuGetProcAddress_v2");
    int dev;
    void *ctx;
    if (CALL(CUresult (*)(unsigned), "cuInit")(0) ||
        CALL(CUresult (*)(int *, int), "cuDeviceGet")(&dev, 0) ||
        CALL(CUresult (*)(void **, unsigned, int), "cuCtxCreate_v2")(&ctx, 0, dev))
        return 3;
    for (int i = 2; i < argc; i++) {
        char *c = argv[i], *arg = strchr(c, ':');
        u64 a = 0, b = 0, v = 0;
        if (arg)
            sscanf(arg + 1, "%llu:%llu", &a, &b);
        CUresult r = 0;
        if (strncmp(c, "create:", 7) == 0) {
            r = CALL(CUresult (*)(u64 *, size_t, const void *, u64), "cuMemCreate")(&v, a, NULL, 0);
            if (!r) hold(v, a);
        } else if (strncmp(c, "createx:", 8) == 0) {
            int prop[8] = {1, 1}; /* pinned, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR */
            r = CALL(CUresult (*)(u64 *, size_t, const void *, u64), "cuMemCreate")(&v, a, prop, 0);
            if (!r) hold(v, a);
        } else if (strncmp(c, "export:", 7) == 0) {
            int fd = -1;
            r = CALL(CUresult (*)(void *, u64, int, u64), "cuMemExportToShareableHandle")(&fd, held[a], 1, 0);
            if (!r) hold((u64)fd, sizes[a]);
        } else if (strncmp(c, "import:", 7) == 0) {
            r = CALL(CUresult (*)(u64 *, void *, int), "cuMemImportFromShareableHandle")(
                &v, (void *)(uintptr_t)held[a], 1);
            if (!r) hold(v, sizes[a]);
        } else if (strncmp(c, "reserve:", 8) == 0) {
            r = CALL(CUresult (*)(u64 *, size_t, size_t, u64, u64), "cuMemAddressReserve")(&v, a, 0, 0, 0);
            if (!r) hold(v, a);
        } else if (strncmp(c, "map:", 4) == 0) {
            r = CALL(CUresult (*)(u64, size_t, size_t, u64, u64), "cuMemMap")(held[a], sizes[b], 0, held[b], 0);
        } else if (strncmp(c, "unmap:", 6) == 0) {
            r = CALL(CUresult (*)(u64, size_t), "cuMemUnmap")(held[a], b);
        } else if (strncmp(c, "release:", 8) == 0) {
            r = CALL(CUresult (*)(u64), "cuMemRelease")(held[a]);
        } else if (strncmp(c, "alloc:", 6) == 0) {
            r = CALL(CUresult (*)(u64 *, size_t), "cuMemAlloc_v2")(&v, a);
            if (!r) hold(v, a);
        } else if (strncmp(c, "free:", 5) == 0) {
            r = CALL(CUresult (*)(u64), "cuMemFree_v2")(held[a]);
        } else if (strncmp(c, "async:", 6) == 0) {
            r = CALL(CUresult (*)(u64 *, size_t, void *), "cuMemAllocAsync")(&v, a, NULL);
            if (!r) hold(v, a);
        } else if (strncmp(c, "freeasync:", 10) == 0) {
            r = CALL(CUresult (*)(u64, void *), "cuMemFreeAsync")(held[a], NULL);
        } else if (strcmp(c, "defpool") == 0) {
            void *p = NULL;
            r = CALL(CUresult (*)(void **, int), "cuDeviceGetMemPool")(&p, dev);
            if (!r) hold((uintptr_t)p, 0);
        } else if (strcmp(c, "poolcreate") == 0) {
            void *p = NULL;
            char props[88] = {0};
            r = CALL(CUresult (*)(void **, const void *), "cuMemPoolCreate")(&p, props);
            if (!r) hold((uintptr_t)p, 0);
        } else if (strncmp(c, "poolalloc:", 10) == 0) {
            r = CALL(CUresult (*)(u64 *, size_t, void *, void *), "cuMemAllocFromPoolAsync")(
                &v, b, (void *)(uintptr_t)held[a], NULL);
            if (!r) hold(v, b);
        } else if (strncmp(c, "threshold:", 10) == 0) {
            r = CALL(CUresult (*)(void *, int, void *), "cuMemPoolSetAttribute")((void *)(uintptr_t)held[a], 4, &b);
        } else if (strncmp(c, "reserved:", 9) == 0) {
            r = CALL(CUresult (*)(void *, int, void *), "cuMemPoolGetAttribute")((void *)(uintptr_t)held[a], 5, &v);
            printf("reserved %d %llu\n", r, v);
            continue;
        } else if (strcmp(c, "graph") == 0) {
            void *g = NULL;
            r = CALL(CUresult (*)(void **, unsigned), "cuGraphCreate")(&g, 0);
            if (!r) hold((uintptr_t)g, 0);
        } else if (strncmp(c, "graphnode:", 10) == 0) {
            MEM_ALLOC_NODE_PARAMS p;
            memset(&p, 0, sizeof p);
            int loc[4] = {1, 0, 1, dev}; /* pinned, location: device dev */
            memcpy(p.poolProps, loc, sizeof loc);
            p.bytesize = b;
            void *node = NULL;
            r = CALL(CUresult (*)(void **, void *, const void *, size_t, MEM_ALLOC_NODE_PARAMS *),
                     "cuGraphAddMemAllocNode")(&node, (void *)(uintptr_t)held[a], NULL, 0, &p);
        } else if (strncmp(c, "replay:", 7) == 0) {
            void *exec = NULL;
            r = CALL(CUresult (*)(void **, void *, u64), "cuGraphInstantiateWithFlags")(
                &exec, (void *)(uintptr_t)held[a], 0);
            if (!r)
                r = CALL(CUresult (*)(void *, void *), "cuGraphLaunch")(exec, NULL);
        } else if (strncmp(c, "race:", 5) == 0) {
            pthread_t t[64];
            int nt = a < 64 ? (int)a : 64, grants = 0;
            race_n = b;
            pthread_barrier_init(&bar, NULL, (unsigned)nt);
            for (int k = 0; k < nt; k++)
                pthread_create(&t[k], NULL, racer, (void *)(intptr_t)k);
            for (int k = 0; k < nt; k++)
                pthread_join(t[k], NULL);
            for (int k = 0; k < nt; k++)
                if (races[k].r == 0) {
                    grants++;
                    hold(races[k].p, b);
                }
            printf("race 0 %d\n", grants);
            continue;
        } else if (strcmp(c, "peak") == 0) {
            printf("peak 0 %llu\n", (u64)CALL(uint64_t (*)(void), "fakecuda_peak")());
            continue;
        } else if (strncmp(c, "inst:", 5) == 0) {
            void *exec = NULL;
            r = CALL(CUresult (*)(void **, void *, u64), "cuGraphInstantiateWithFlags")(
                &exec, (void *)(uintptr_t)held[a], 0);
            if (!r) hold((uintptr_t)exec, 0);
        } else if (strncmp(c, "launch:", 7) == 0) {
            r = CALL(CUresult (*)(void *, void *), "cuGraphLaunch")((void *)(uintptr_t)held[a], NULL);
        } else if (strcmp(c, "stream") == 0) {
            void *st = NULL;
            r = CALL(CUresult (*)(void **, unsigned), "cuStreamCreate")(&st, 0);
            if (!r) hold((uintptr_t)st, 0);
        } else if (strncmp(c, "capture:", 8) == 0) {
            r = CALL(CUresult (*)(void *, int), "cuStreamBeginCapture_v2")((void *)(uintptr_t)held[a], 0);
        } else if (strncmp(c, "asyncon:", 8) == 0) {
            r = CALL(CUresult (*)(u64 *, size_t, void *), "cuMemAllocAsync")(&v, b, (void *)(uintptr_t)held[a]);
            if (!r) hold(v, b);
        } else if (strncmp(c, "endcap:", 7) == 0) {
            void *gr = NULL;
            r = CALL(CUresult (*)(void *, void **), "cuStreamEndCapture")((void *)(uintptr_t)held[a], &gr);
            if (!r) hold((uintptr_t)gr, 0);
        } else if (strcmp(c, "gtrim") == 0) {
            r = CALL(CUresult (*)(int), "cuDeviceGraphMemTrim")(dev);
        } else if (strncmp(c, "ctx:", 4) == 0) {
            r = CALL(CUresult (*)(int *, int), "cuDeviceGet")(&dev, (int)a);
            if (!r)
                r = CALL(CUresult (*)(void **, unsigned, int), "cuCtxCreate_v2")(&ctx, 0, dev);
        } else if (strcmp(c, "info") == 0) {
            size_t f = 0, t = 0;
            r = CALL(CUresult (*)(size_t *, size_t *), "cuMemGetInfo_v2")(&f, &t);
            printf("info %d %zu %zu\n", r, f, t);
            continue;
        } else if (strcmp(c, "fake") == 0) {
            printf("fake 0 %llu\n", (u64)CALL(uint64_t (*)(void), "fakecuda_used")());
            continue;
        } else if (strcmp(c, "exec") == 0) {
            printf("exec 0\n");
            argv[i] = argv[1]; /* argv[0], the mode, then the rest */
            argv[i - 1] = argv[0];
            execv("/proc/self/exe", argv + i - 1);
            perror("vmmprog: exec");
            return 3;
        } else if (strcmp(c, "wait") == 0) {
            char buf[64];
            while (read(0, buf, sizeof buf) > 0)
                ;
        } else {
            fprintf(stderr, "vmmprog: unknown command %s\n", c);
            return 2;
        }
        printf("%.*s %d\n", (int)(arg ? arg - c : (long)strlen(c)), c, r);
    }
    return 0;
}
