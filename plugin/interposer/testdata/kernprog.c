/* A kernel-launching test program (the compute tests; testdata/cuprog.c is
 * the memory one): runs the commands on its command line, one line of
 * output per command. argv[1] picks how it finds the driver, as cuprog does:
 *   direct    calls the functions it was linked against (build with -DLINKED)
 *   dlsym     dlopen("libcuda.so.1") and dlsym from the handle
 *   procaddr  cuGetProcAddress_v2 with the per-thread-stream flag: the
 *             launches are the _ptsz variants
 *   procaddr1 cuGetProcAddress (CUDA 11.3 style), default flags
 * Kernels run on the fake driver's GPU (testdata/fakegpu.c): "k<us>".
 * Commands:
 *   kern:US       later kernels run US microseconds ("kern 0")
 *   gap:US        US microseconds of host time (sleep) after each kernel
 *   via:plain|ex|coop|grid|gridasync|legacy  launch with cuLaunchKernel,
 *                 cuLaunchKernelEx or cuLaunchCooperativeKernel (or their
 *                 _ptsz variants), or the legacy cuLaunchGrid (the NULL
 *                 stream), cuLaunchGridAsync or cuLaunch (the NULL stream)
 *   run:T:F:U     launch a kernel, wait for it (cuCtxSynchronize), sleep the
 *                 gap; again, for T ms; prints "run <rc> <busy> <window>
 *                 <kernels>": the fake GPU's busy ns for this process, the
 *                 ns and the kernels it was given between F ms and U ms (the
 *                 fake's counters, at submission), read by the main thread,
 *                 which sleeps until F and U while other threads launch: the
 *                 window is the same for every process started at once,
 *                 however long one of them waits in a launch
 *   threads:N     later runs launch from N threads
 *   launch:N      N kernels, then cuCtxSynchronize ("launch <rc>")
 *   clock         CLOCK_MONOTONIC now ("clock 0 <ns>"): the simulated clock
 *                 under testdata/simclock.c
 *   events        the event calls this process made ("events 0 <n>")
 *   calls         those and the driver's other calls a paced launch may
 *                 make ("calls 0 <n>": fakecuda_calls)
 *   ptds          of which records on CU_STREAM_PER_THREAD ("ptds 0 <n>")
 *   bench:N       N launches without waiting ("bench <rc> <ns per launch>")
 *   stream        later launches go on a stream of their own (cuStreamCreate)
 *   capture:M:K:N capture K launches on the stream (made if none) in capture
 *                 mode M (0 global, 1 thread-local, 2 relaxed) while another
 *                 thread launches N kernels on the NULL stream ("capture <rc
 *                 of cuStreamEndCapture>"); later launches (and runs) are
 *                 launches of the instantiated graph (cuGraphLaunch)
 *   waitrel:N     the stream waits (cuStreamWaitValue32) for a word, N
 *                 kernels are launched behind the wait, and another thread,
 *                 50 ms in, launches a kernel on a stream of its own and then
 *                 writes the word (cuStreamWriteValue32); then
 *                 cuCtxSynchronize ("waitrel <rc>")
 *   primary       retain the primary context and make it current
 *   reset         reset the primary context (cuDevicePrimaryCtxReset), retain
 *                 it again and make it current
 *   newctx        create a context (current now) and destroy the previous one
 *   device:N      create a context on device N (current now: later
 *                 launches, of every thread, go to that device)
 *   evbench:N     N times the fake driver's event calls a paced launch makes
 *                 (two records, a query, an elapsed time), without a launch
 *                 ("evbench <rc> <ns per set>"): the driver's share of the
 *                 paced path's cost
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef int CUresult;
typedef void *CUstream;
typedef struct {
    unsigned gx, gy, gz, bx, by, bz, shmem;
    CUstream s;
    void *attrs;
    unsigned nattrs;
} Config;

static struct {
    CUresult (*init)(unsigned);
    CUresult (*devget)(int *, int);
    CUresult (*ctx)(void **, unsigned, int);
    CUresult (*modload)(void **, const void *);
    CUresult (*getfn)(void **, void *, const char *);
    CUresult (*launch)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                       unsigned, CUstream, void **, void **);
    CUresult (*launchex)(const Config *, void *, void **, void **);
    CUresult (*coop)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                     unsigned, CUstream, void **);
    CUresult (*sync)(void);
    CUresult (*grid)(void *, int, int);
    CUresult (*gridasync)(void *, int, int, CUstream);
    CUresult (*legacy)(void *);
} cu;

#ifdef LINKED
CUresult cuInit(unsigned);
CUresult cuDeviceGet(int *, int);
CUresult cuCtxCreate_v2(void **, unsigned, int);
CUresult cuModuleLoadData(void **, const void *);
CUresult cuModuleGetFunction(void **, void *, const char *);
CUresult cuLaunchKernel(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                        unsigned, CUstream, void **, void **);
CUresult cuLaunchKernelEx(const Config *, void *, void **, void **);
CUresult cuLaunchCooperativeKernel(void *, unsigned, unsigned, unsigned, unsigned, unsigned,
                                   unsigned, unsigned, CUstream, void **);
CUresult cuCtxSynchronize(void);
CUresult cuLaunchGrid(void *, int, int);
CUresult cuLaunchGridAsync(void *, int, int, CUstream);
CUresult cuLaunch(void *);

static void bind_direct(void)
{
    cu.grid = cuLaunchGrid; cu.gridasync = cuLaunchGridAsync; cu.legacy = cuLaunch;
    cu.init = cuInit; cu.devget = cuDeviceGet; cu.ctx = cuCtxCreate_v2;
    cu.modload = cuModuleLoadData; cu.getfn = cuModuleGetFunction; cu.launch = cuLaunchKernel;
    cu.launchex = cuLaunchKernelEx; cu.coop = cuLaunchCooperativeKernel; cu.sync = cuCtxSynchronize;
}
#endif

static void *lib;

static void *need(void *p, const char *name)
{
    if (!p) {
        fprintf(stderr, "kernprog: cannot resolve %s\n", name);
        exit(3);
    }
    return p;
}

#define SYM(field, name) *(void **)&cu.field = need(dlsym(lib, name), name)

static void bind_dlsym(void)
{
    SYM(init, "cuInit"); SYM(devget, "cuDeviceGet"); SYM(ctx, "cuCtxCreate_v2");
    SYM(modload, "cuModuleLoadData"); SYM(getfn, "cuModuleGetFunction");
    SYM(launch, "cuLaunchKernel"); SYM(launchex, "cuLaunchKernelEx");
    SYM(coop, "cuLaunchCooperativeKernel"); SYM(sync, "cuCtxSynchronize");
    SYM(grid, "cuLaunchGrid"); SYM(gridasync, "cuLaunchGridAsync"); SYM(legacy, "cuLaunch");
}

static CUresult (*gpa1)(const char *, void **, int, unsigned long long);
static CUresult (*gpa2)(const char *, void **, int, unsigned long long, int *);

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

static void bind_procaddr(unsigned long long launch_flags)
{
    GPA(init, "cuInit", 0); GPA(devget, "cuDeviceGet", 0); GPA(ctx, "cuCtxCreate", 0);
    GPA(modload, "cuModuleLoadData", 0); GPA(getfn, "cuModuleGetFunction", 0);
    GPA(launch, "cuLaunchKernel", launch_flags); GPA(launchex, "cuLaunchKernelEx", launch_flags);
    GPA(coop, "cuLaunchCooperativeKernel", launch_flags); GPA(sync, "cuCtxSynchronize", 0);
    GPA(grid, "cuLaunchGrid", launch_flags); GPA(gridasync, "cuLaunchGridAsync", launch_flags);
    GPA(legacy, "cuLaunch", launch_flags);
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void *fn;  /* the current kernel */
static CUstream strm; /* the launches' stream ("stream") */
static void *gexec;   /* "capture": launches replay this graph */
static int via;   /* 0 plain, 1 ex, 2 coop, 3 grid, 4 gridasync, 5 legacy */
static uint64_t gap_ns;

static CUresult launch_on(CUstream s)
{
    Config c = {1, 1, 1, 32, 1, 1, 0, s, NULL, 0};
    switch (via) {
    case 1: return cu.launchex(&c, fn, NULL, NULL);
    case 2: return cu.coop(fn, 1, 1, 1, 32, 1, 1, 0, s, NULL);
    case 3: return cu.grid(fn, 1, 1);
    case 4: return cu.gridasync(fn, 1, 1, s);
    case 5: return cu.legacy(fn);
    default: return cu.launch(fn, 1, 1, 1, 32, 1, 1, 0, s, NULL, NULL);
    }
}

static CUresult (*graph_launch)(void *, CUstream);

static CUresult launch(void)
{
    return gexec ? graph_launch(gexec, strm) : launch_on(strm);
}

/* One launcher of "run": launch, wait, sleep the gap, until end. */
static CUresult cycle(void)
{
    CUresult r = launch();
    if (!r)
        r = cu.sync();
    if (gap_ns) {
        struct timespec ts = {(time_t)(gap_ns / 1000000000ull), (long)(gap_ns % 1000000000ull)};
        nanosleep(&ts, NULL);
    }
    return r;
}

static void sleep_until(uint64_t t)
{
    struct timespec ts = {(time_t)(t / 1000000000ull), (long)(t % 1000000000ull)};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) != 0)
        ;
}

/* The driver calls of stream, capture, waitrel and the contexts' commands,
 * found by dlsym (ours answers cuGraphLaunch with its hook). */
static struct {
    CUresult (*stream_create)(CUstream *, unsigned);
    CUresult (*begin)(CUstream, int);
    CUresult (*end)(CUstream, void **);
    CUresult (*instantiate)(void **, void *, unsigned long long);
    CUresult (*wait)(CUstream, unsigned long long, uint32_t, unsigned);
    CUresult (*write)(CUstream, unsigned long long, uint32_t, unsigned);
    CUresult (*retain)(void **, int);
    CUresult (*reset)(int);
    CUresult (*set_current)(void *);
    CUresult (*destroy)(void *);
} x;

static void bind_extra(void)
{
    *(void **)&x.stream_create = need(dlsym(lib, "cuStreamCreate"), "cuStreamCreate");
    *(void **)&x.begin = need(dlsym(lib, "cuStreamBeginCapture_v2"), "cuStreamBeginCapture_v2");
    *(void **)&x.end = need(dlsym(lib, "cuStreamEndCapture"), "cuStreamEndCapture");
    *(void **)&x.instantiate = need(dlsym(lib, "cuGraphInstantiateWithFlags"), "cuGraphInstantiateWithFlags");
    *(void **)&graph_launch = need(dlsym(lib, "cuGraphLaunch"), "cuGraphLaunch");
    *(void **)&x.wait = need(dlsym(lib, "cuStreamWaitValue32_v2"), "cuStreamWaitValue32_v2");
    *(void **)&x.write = need(dlsym(lib, "cuStreamWriteValue32_v2"), "cuStreamWriteValue32_v2");
    *(void **)&x.retain = need(dlsym(lib, "cuDevicePrimaryCtxRetain"), "cuDevicePrimaryCtxRetain");
    *(void **)&x.reset = need(dlsym(lib, "cuDevicePrimaryCtxReset_v2"), "cuDevicePrimaryCtxReset_v2");
    *(void **)&x.set_current = need(dlsym(lib, "cuCtxSetCurrent"), "cuCtxSetCurrent");
    *(void **)&x.destroy = need(dlsym(lib, "cuCtxDestroy_v2"), "cuCtxDestroy_v2");
}

static void sleep_us(uint64_t us)
{
    struct timespec ts = {(time_t)(us / 1000000), (long)(us % 1000000) * 1000};
    nanosleep(&ts, NULL);
}

/* capture's other thread: N launches on the NULL stream, 100 us apart. */
static void *side(void *n)
{
    CUresult r = 0;
    for (uintptr_t k = 0; k < (uintptr_t)n && !r; k++) {
        r = launch_on(NULL);
        sleep_us(100);
    }
    return (void *)(intptr_t)r;
}

static volatile uint32_t word; /* waitrel's */

/* waitrel's other thread: 50 ms in, a kernel and then the word's release. */
static void *releaser(void *unused)
{
    (void)unused;
    CUstream s;
    sleep_us(50000);
    CUresult r = x.stream_create(&s, 0);
    if (!r)
        r = launch_on(s);
    if (!r)
        r = x.write(s, (uintptr_t)&word, 1, 0);
    return (void *)(intptr_t)r;
}

static void *launcher(void *end)
{
    CUresult r = 0;
    while (!r && now_ns() < *(uint64_t *)end)
        r = cycle();
    return (void *)(intptr_t)r;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc < 2)
        return 2;
    const char *mode = argv[1];
    lib = dlopen("libcuda.so.1", RTLD_NOW);
    if (!lib) {
        fprintf(stderr, "kernprog: %s\n", dlerror());
        return 3;
    }
    if (strcmp(mode, "direct") == 0) {
#ifdef LINKED
        bind_direct();
#else
        fprintf(stderr, "kernprog: built without -DLINKED\n");
        return 2;
#endif
    } else if (strcmp(mode, "dlsym") == 0) {
        bind_dlsym();
    } else if (strcmp(mode, "procaddr") == 0) {
        *(void **)&gpa2 = need(dlsym(lib, "cuGetProcAddress_v2"), "cuGetProcAddress_v2");
        bind_procaddr(2); /* CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM */
    } else if (strcmp(mode, "procaddr1") == 0) {
        *(void **)&gpa1 = need(dlsym(lib, "cuGetProcAddress"), "cuGetProcAddress");
        bind_procaddr(0);
    } else {
        return 2;
    }
    uint64_t (*busy)(void) = need(dlsym(lib, "fakecuda_busy_ns"), "fakecuda_busy_ns");
    uint64_t (*events)(void) = need(dlsym(lib, "fakecuda_events"), "fakecuda_events");
    uint64_t (*kernels)(void) = need(dlsym(lib, "fakecuda_kernels"), "fakecuda_kernels");
    int dev;
    void *ctx, *mod;
    if (cu.init(0) || cu.devget(&dev, 0) || cu.ctx(&ctx, 0, dev) || cu.modload(&mod, "") ||
        cu.getfn(&fn, mod, "k1000")) {
        fprintf(stderr, "kernprog: init failed\n");
        return 3;
    }
    bind_extra();
    int nthreads = 1;
    for (int i = 2; i < argc; i++) {
        char *c = argv[i], *arg = strchr(c, ':');
        unsigned long long a = 0, b = 0, d = 0;
        if (arg)
            sscanf(arg + 1, "%llu:%llu:%llu", &a, &b, &d);
        CUresult r = 0;
        if (strncmp(c, "kern:", 5) == 0) {
            char name[32];
            snprintf(name, sizeof name, "k%llu", a);
            r = cu.getfn(&fn, mod, name);
        } else if (strncmp(c, "gap:", 4) == 0) {
            gap_ns = a * 1000;
        } else if (strncmp(c, "threads:", 8) == 0) {
            nthreads = a < 1 ? 1 : a > 64 ? 64 : (int)a;
        } else if (strncmp(c, "via:", 4) == 0) {
            static const char *vias[] = {"plain", "ex", "coop", "grid", "gridasync", "legacy"};
            via = 0;
            for (int v = 0; v < 6; v++)
                if (strcmp(arg + 1, vias[v]) == 0)
                    via = v;
        } else if (strncmp(c, "run:", 4) == 0) {
            uint64_t t0 = now_ns(), end = t0 + a * 1000000;
            pthread_t th[64];
            for (int j = 0; j < nthreads; j++)
                pthread_create(&th[j], NULL, launcher, &end);
            sleep_until(t0 + b * 1000000);
            uint64_t w0 = now_ns(), b0 = busy(), k0 = kernels();
            sleep_until(t0 + d * 1000000);
            uint64_t w1 = now_ns(), b1 = busy(), k1 = kernels();
            for (int j = 0; j < nthreads; j++) {
                void *tr;
                pthread_join(th[j], &tr);
                if (!r)
                    r = (CUresult)(intptr_t)tr;
            }
            printf("run %d %llu %llu %llu\n", r, (unsigned long long)(b1 - b0),
                   (unsigned long long)(w1 - w0), (unsigned long long)(k1 - k0));
            continue;
        } else if (strcmp(c, "stream") == 0) {
            r = x.stream_create(&strm, 0);
        } else if (strncmp(c, "capture:", 8) == 0) {
            pthread_t th;
            void *g = NULL, *tr = NULL;
            if (!strm)
                r = x.stream_create(&strm, 0);
            if (!r)
                r = x.begin(strm, (int)a);
            if (!r && d)
                pthread_create(&th, NULL, side, (void *)(uintptr_t)d);
            for (unsigned long long k = 0; k < b && !r; k++) {
                r = launch();
                sleep_us(100);
            }
            if (d && !r)
                pthread_join(th, &tr);
            if (!r)
                r = x.end(strm, &g);
            if (!r)
                r = (CUresult)(intptr_t)tr;
            if (!r)
                r = x.instantiate(&gexec, g, 0);
        } else if (strncmp(c, "waitrel:", 8) == 0) {
            pthread_t th;
            void *tr = NULL;
            if (!strm)
                r = x.stream_create(&strm, 0);
            if (!r)
                r = x.wait(strm, (uintptr_t)&word, 1, 0);
            int started = !r && pthread_create(&th, NULL, releaser, NULL) == 0;
            for (unsigned long long k = 0; k < a && !r; k++)
                r = launch();
            if (started && pthread_join(th, &tr) == 0 && !r)
                r = (CUresult)(intptr_t)tr;
            if (!r)
                r = cu.sync();
        } else if (strcmp(c, "primary") == 0 || strcmp(c, "reset") == 0) {
            void *p;
            if (c[0] == 'r')
                r = x.reset(dev);
            if (!r)
                r = x.retain(&p, dev);
            if (!r)
                r = x.set_current(p);
        } else if (strncmp(c, "device:", 7) == 0) {
            r = cu.devget(&dev, (int)a);
            if (!r)
                r = cu.ctx(&ctx, 0, dev);
        } else if (strcmp(c, "newctx") == 0) {
            void *old = ctx;
            r = cu.ctx(&ctx, 0, dev);
            if (!r)
                r = x.destroy(old);
        } else if (strncmp(c, "launch:", 7) == 0) {
            for (unsigned long long k = 0; k < a && !r; k++)
                r = launch();
            if (!r)
                r = cu.sync();
        } else if (strcmp(c, "clock") == 0) {
            printf("clock 0 %llu\n", (unsigned long long)now_ns());
            continue;
        } else if (strcmp(c, "events") == 0) {
            printf("events 0 %llu\n", (unsigned long long)events());
            continue;
        } else if (strcmp(c, "calls") == 0) {
            uint64_t (*n)(void) = need(dlsym(lib, "fakecuda_calls"), "fakecuda_calls");
            printf("calls 0 %llu\n", (unsigned long long)n());
            continue;
        } else if (strcmp(c, "ptds") == 0) {
            uint64_t (*n)(void) = need(dlsym(lib, "fakecuda_ptds_records"), "fakecuda_ptds_records");
            printf("ptds 0 %llu\n", (unsigned long long)n());
            continue;
        } else if (strncmp(c, "bench:", 6) == 0) {
            uint64_t t0 = now_ns();
            for (unsigned long long k = 0; k < a && !r; k++)
                r = launch();
            uint64_t t1 = now_ns();
            printf("bench %d %.2f\n", r, a ? (double)(t1 - t0) / (double)a : 0);
            continue;
        } else if (strncmp(c, "evbench:", 8) == 0) {
            CUresult (*create)(void **, unsigned) = need(dlsym(lib, "cuEventCreate"), "cuEventCreate");
            CUresult (*record)(void *, CUstream) = need(dlsym(lib, "cuEventRecord"), "cuEventRecord");
            CUresult (*query)(void *) = need(dlsym(lib, "cuEventQuery"), "cuEventQuery");
            CUresult (*elapsed)(float *, void *, void *) = need(dlsym(lib, "cuEventElapsedTime"), "cuEventElapsedTime");
            void *e0, *e1;
            float ms;
            r = create(&e0, 0) || create(&e1, 0);
            uint64_t t0 = now_ns();
            for (unsigned long long k = 0; k < a && !r; k++)
                r = record(e0, NULL) || record(e1, NULL) || query(e1) || elapsed(&ms, e0, e1);
            uint64_t t1 = now_ns();
            printf("evbench %d %.2f\n", r, a ? (double)(t1 - t0) / (double)a : 0);
            continue;
        } else {
            fprintf(stderr, "kernprog: unknown command %s\n", c);
            return 2;
        }
        printf("%.*s %d\n", (int)(arg ? arg - c : (long)strlen(c)), c, r);
    }
    return 0;
}
