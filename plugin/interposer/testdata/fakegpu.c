/* The fake driver's GPU (linked into testdata/fakecuda.c's libcuda.so.1):
 * time-sliced GPUs shared by processes, for the compute tests: one
 * timeline per device (FAKECUDA_DEVICES, testdata/fakecuda.c), a launch
 * and an event on the device of the current context (of the event's), so
 * the kernels of two devices run at once, as on two GPUs.
 *
 * FAKECUDA_GPU names a small file, created if absent and mapped by every
 * process that names it (without it, a GPU of the process's own). It holds
 * the GPU's timeline: kernels of ALL processes run one at a time, in
 * submission order (time-slicing between processes at its coarsest), on
 * CLOCK_MONOTONIC, which every process of the host shares. A launch takes
 * start = max(now, when the GPU frees up), end = start + run time, with one
 * compare-and-swap; nothing spins or sleeps but the synchronize calls.
 *
 * A kernel's run time is its name: cuModuleGetFunction(&f, m, "k<us>")
 * hands out a function of <us> microseconds (encoded in the handle). An
 * event is a point on the same timeline: recorded, it completes when the GPU
 * reaches it (every kernel submitted before it, by any process, is done),
 * so the time between two events around a kernel is the kernel's, plus any
 * kernel another process slipped in between the two records.
 *
 * Per pid, the file counts the GPU time of the kernels submitted (at
 * submission); fakecuda_busy_ns() and fakecuda_kernels() read the
 * caller's, fakecuda_events()
 * the event calls the process made, fakecuda_calls() those and the other
 * calls a paced launch makes, and fakecuda_ptds_records() its event
 * records on CU_STREAM_PER_THREAD, for tests (not driver calls).
 * FAKECUDA_NO_EVENTS set: cuEventCreate fails (CUDA_ERROR_UNKNOWN).
 * FAKECUDA_LOG names a file each kernel's submission is appended to, as
 * "<pid>\n" (O_APPEND: the order of submissions by every process), for the
 * time-slicing tests (slice_test.go).
 *
 * Streams that capture or wait, graphs and contexts are
 * testdata/fakecapture.c's: a launch or an event record asks it first
 * (fakecap_launch, fakecap_record); the event queries and synchronizes ask
 * it whether a capture forbids them (fakecap_unsafe); an event is invalid
 * once its context is destroyed or reset (fakecap_alive). */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

typedef int CUresult;
typedef void *CUstream;

enum { NOT_READY = 600, INVALID_HANDLE = 400, NOT_FOUND = 500, SLOTS = 128 };

struct gpu {
    uint64_t free_ns[8]; /* per device: when the last kernel submitted ends */
    struct {
        int32_t pid;
        uint32_t pad;
        uint64_t busy_ns, kernels;
    } slot[SLOTS];
};

static struct gpu own, *gpu;
static int me = -1;            /* this process's slot */
static uint64_t last_end;      /* this process's last kernel ends (all its streams) */
static uint64_t events;        /* event calls made by this process */
static uint64_t ptds;          /* of which records on CU_STREAM_PER_THREAD */
static pthread_once_t once = PTHREAD_ONCE_INIT;
static int logfd = -1;         /* FAKECUDA_LOG */

static void open_gpu(void)
{
    gpu = &own;
    const char *path = getenv("FAKECUDA_GPU");
    if (path && *path) {
        int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
        /* the same size from every process: a second ftruncate keeps data */
        if (fd >= 0 && ftruncate(fd, sizeof(struct gpu)) == 0) {
            void *m = mmap(NULL, sizeof(struct gpu), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
            if (m != MAP_FAILED)
                gpu = m;
        }
        if (fd >= 0)
            close(fd);
    }
    const char *log = getenv("FAKECUDA_LOG");
    if (log && *log)
        logfd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0666);
    int32_t pid = getpid();
    for (int i = 0; i < SLOTS && me < 0; i++) {
        int32_t zero = 0;
        if (__atomic_compare_exchange_n(&gpu->slot[i].pid, &zero, pid, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
            me = i;
    }
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void sleep_until(uint64_t t)
{
    struct timespec ts = {(time_t)(t / 1000000000ull), (long)(t % 1000000000ull)};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) != 0)
        ;
}

#define FN_BASE 0x6b00000000ull /* a function handle is FN_BASE + its run time in us */

int fakecap_device(void *ctx);  /* testdata/fakecapture.c: a context's device, -1 */
int fakecap_current_device(void); /* the current context's, 0 without one */

/* Device d's timeline (0 for anything out of range). */
static uint64_t *timeline(int d) { return &gpu->free_ns[d >= 0 && d < 8 ? d : 0]; }

static CUresult submit(void *f)
{
    uint64_t h = (uint64_t)(uintptr_t)f;
    if (h < FN_BASE || h - FN_BASE > 10000000)
        return INVALID_HANDLE;
    pthread_once(&once, open_gpu);
    uint64_t run = (h - FN_BASE) * 1000, now = now_ns(), *tl = timeline(fakecap_current_device());
    uint64_t free = __atomic_load_n(tl, __ATOMIC_ACQUIRE), end;
    do
        end = (free > now ? free : now) + run;
    while (!__atomic_compare_exchange_n(tl, &free, end, 1, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE));
    if (logfd >= 0) {
        char line[16];
        int n = snprintf(line, sizeof line, "%d\n", (int)getpid());
        if (write(logfd, line, (size_t)n) != n)
            logfd = -1;
    }
    if (me >= 0) {
        __atomic_fetch_add(&gpu->slot[me].busy_ns, run, __ATOMIC_RELAXED);
        __atomic_fetch_add(&gpu->slot[me].kernels, 1, __ATOMIC_RELAXED);
    }
    uint64_t prev = __atomic_load_n(&last_end, __ATOMIC_RELAXED);
    while (prev < end && !__atomic_compare_exchange_n(&last_end, &prev, end, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
        ;
    return 0;
}

uint64_t fakecuda_busy_ns(void)
{
    pthread_once(&once, open_gpu);
    return me >= 0 ? __atomic_load_n(&gpu->slot[me].busy_ns, __ATOMIC_RELAXED) : 0;
}

uint64_t fakecuda_kernels(void)
{
    pthread_once(&once, open_gpu);
    return me >= 0 ? __atomic_load_n(&gpu->slot[me].kernels, __ATOMIC_RELAXED) : 0;
}

uint64_t fakecuda_events(void) { return __atomic_load_n(&events, __ATOMIC_RELAXED); }

/* The driver calls other than launches and synchronizes a process made:
 * the event calls, and those fakegpu_count counts (cuCtxGetCurrent,
 * cuStreamIsCapturing, cuThreadExchangeStreamCaptureMode, cuCtxGetDevice,
 * cuDeviceGetUuid): what a paced launch adds, for tests (not a driver
 * call). */
static uint64_t other_calls;
void fakegpu_count(void) { __atomic_fetch_add(&other_calls, 1, __ATOMIC_RELAXED); }
uint64_t fakecuda_calls(void) { return fakecuda_events() + __atomic_load_n(&other_calls, __ATOMIC_RELAXED); }
uint64_t fakecuda_ptds_records(void) { return __atomic_load_n(&ptds, __ATOMIC_RELAXED); }

CUresult cuModuleLoadData(void **m, const void *image) { (void)image; *m = (void *)0x6d; return 0; }

CUresult cuModuleGetFunction(void **f, void *m, const char *name)
{
    (void)m;
    char *end;
    if (name[0] != 'k')
        return NOT_FOUND;
    unsigned long us = strtoul(name + 1, &end, 10);
    if (end == name + 1 || *end || us > 10000000)
        return NOT_FOUND;
    *f = (void *)(uintptr_t)(FN_BASE + us);
    return 0;
}

typedef struct {
    unsigned gx, gy, gz, bx, by, bz, shmem;
    CUstream s;
    void *attrs;
    unsigned nattrs;
} Config;

#define KARGS void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz, \
              unsigned shmem, CUstream s, void **kp
#define UNUSED (void)gx, (void)gy, (void)gz, (void)bx, (void)by, (void)bz, (void)shmem, (void)s, (void)kp

/* testdata/fakecapture.c: streams that capture or wait, contexts */
int fakecap_launch(CUstream s, void *f, CUresult *r);
int fakecap_record(CUstream s, void *e, CUresult *r);
CUresult fakecap_unsafe(void);
int fakecap_pending(void);
void fakecap_stamp(void **ctx, uint32_t *gen);
int fakecap_alive(void *ctx, uint32_t gen);

int fakegpu_submit(void *f) { return submit(f); }

/* A launch on s: into its capture, behind its wait, or onto the GPU. */
static CUresult launch_on(CUstream s, void *f)
{
    CUresult r;
    if (fakecap_launch(s, f, &r))
        return r;
    return submit(f);
}

CUresult cuLaunchKernel(KARGS, void **extra) { UNUSED, (void)extra; return launch_on(s, f); }
CUresult cuLaunchKernel_ptsz(KARGS, void **extra) { UNUSED, (void)extra; return launch_on(s, f); }
CUresult cuLaunchCooperativeKernel(KARGS) { UNUSED; return launch_on(s, f); }
CUresult cuLaunchCooperativeKernel_ptsz(KARGS) { UNUSED; return launch_on(s, f); }
/* the legacy launches (before CUDA 4.0; the block shape is the function's,
 * cuFuncSetBlockShape): cuLaunch and cuLaunchGrid on the NULL stream */
CUresult cuLaunch(void *f) { return launch_on(NULL, f); }
CUresult cuLaunchGrid(void *f, int w, int h) { (void)w, (void)h; return launch_on(NULL, f); }
CUresult cuLaunchGridAsync(void *f, int w, int h, CUstream s) { (void)w, (void)h; return launch_on(s, f); }
CUresult cuLaunchKernelEx(const Config *c, void *f, void **kp, void **extra) { (void)kp, (void)extra; return launch_on(c ? c->s : NULL, f); }
CUresult cuLaunchKernelEx_ptsz(const Config *c, void *f, void **kp, void **extra) { (void)kp, (void)extra; return launch_on(c ? c->s : NULL, f); }

/* An event: the time the GPU reaches it; 0 until recorded, PENDING while
 * behind a stream wait. It belongs to the context current at its creation
 * and is invalid once that context is destroyed or reset. */
#define PENDING UINT64_MAX
struct event { uint64_t t; void *ctx; uint32_t gen; };
#define DEAD(e) (!(e) || !fakecap_alive((e)->ctx, (e)->gen))

/* The GPU reaches e now (the work queued before it has been submitted). */
void fakegpu_reach(struct event *e)
{
    pthread_once(&once, open_gpu);
    int d = e->ctx ? fakecap_device(e->ctx) : fakecap_current_device();
    uint64_t now = now_ns(), free = __atomic_load_n(timeline(d), __ATOMIC_ACQUIRE);
    __atomic_store_n(&e->t, free > now ? free : now, __ATOMIC_RELEASE);
}

/* Waits (1 ms steps: other threads run meanwhile, on the simulated clock
 * too) while e is held behind a stream wait, then until the GPU reaches it. */
static void wait_event(struct event *e)
{
    struct timespec ms = {0, 1000000};
    while (__atomic_load_n(&e->t, __ATOMIC_ACQUIRE) == PENDING)
        nanosleep(&ms, NULL);
    sleep_until(e->t);
}

CUresult cuEventCreate(struct event **e, unsigned flags)
{
    (void)flags;
    __atomic_fetch_add(&events, 1, __ATOMIC_RELAXED);
    if (getenv("FAKECUDA_NO_EVENTS")) /* a driver that will not make events */
        return 999;                   /* CUDA_ERROR_UNKNOWN */
    *e = calloc(1, sizeof **e);
    if (*e)
        fakecap_stamp(&(*e)->ctx, &(*e)->gen);
    return *e ? 0 : 2;
}

CUresult cuEventDestroy_v2(struct event *e) { __atomic_fetch_add(&events, 1, __ATOMIC_RELAXED); free(e); return 0; }

CUresult cuEventRecord(struct event *e, CUstream s)
{
    __atomic_fetch_add(&events, 1, __ATOMIC_RELAXED);
    if (s == (CUstream)0x2)
        __atomic_fetch_add(&ptds, 1, __ATOMIC_RELAXED);
    if (DEAD(e))
        return INVALID_HANDLE;
    pthread_once(&once, open_gpu);
    CUresult r;
    if (fakecap_record(s, e, &r)) {
        if (!r)
            e->t = PENDING; /* captured: a node of the graph; or behind a wait */
        return r;
    }
    fakegpu_reach(e);
    return 0;
}

CUresult cuEventRecord_ptsz(struct event *e, CUstream s) { return cuEventRecord(e, s); }

CUresult cuEventQuery(struct event *e)
{
    __atomic_fetch_add(&events, 1, __ATOMIC_RELAXED);
    if (DEAD(e))
        return INVALID_HANDLE;
    CUresult r = fakecap_unsafe();
    if (r)
        return r;
    return now_ns() >= __atomic_load_n(&e->t, __ATOMIC_ACQUIRE) ? 0 : NOT_READY;
}

CUresult cuEventSynchronize(struct event *e)
{
    __atomic_fetch_add(&events, 1, __ATOMIC_RELAXED);
    if (DEAD(e))
        return INVALID_HANDLE;
    CUresult r = fakecap_unsafe();
    if (r)
        return r;
    wait_event(e);
    return 0;
}

CUresult cuEventElapsedTime(float *ms, struct event *a, struct event *b)
{
    __atomic_fetch_add(&events, 1, __ATOMIC_RELAXED);
    if (DEAD(a) || DEAD(b) || !a->t || !b->t)
        return INVALID_HANDLE;
    if (now_ns() < b->t || now_ns() < a->t) /* PENDING too */
        return NOT_READY;
    *ms = (float)((double)((int64_t)b->t - (int64_t)a->t) / 1e6);
    return 0;
}

/* Every synchronize waits for all of the process's work (the fake has one
 * queue), held-back work included: until the waits are met, then the GPU. */
CUresult cuCtxSynchronize(void)
{
    CUresult r = fakecap_unsafe();
    if (r)
        return r;
    struct timespec ms = {0, 1000000};
    while (fakecap_pending())
        nanosleep(&ms, NULL);
    sleep_until(__atomic_load_n(&last_end, __ATOMIC_RELAXED));
    return 0;
}
CUresult cuStreamSynchronize(CUstream s) { (void)s; return cuCtxSynchronize(); }
CUresult cuStreamSynchronize_ptsz(CUstream s) { return cuStreamSynchronize(s); }
