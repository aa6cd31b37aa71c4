/* gpushare CUDA interposer: kernel launches, paced to the task's share of
 * GPU time (src/pace.c) and, for production tasks, counted into the GPU's
 * TGS channel (README, "Compute control").
 *
 * What a launch costs depends on the task, decided once, at its first
 * launch (setup), and kept in `mode`:
 *   M_PASS     no compute limit: a load of `mode` and the real call, nothing
 *              else (not under gpushare; compute_pct 100 and not
 *              opportunistic; production without a TGS channel);
 *   M_PRODUCE  production with a channel: a clock read and a few relaxed
 *              atomic adds into the channel, never a wait;
 *   M_PACE     compute_pct < 100, or opportunistic: under one mutex (the
 *              pacer is not thread-safe), harvest the measured run times of
 *              finished kernels, wait (nanosleep, the mutex released) until
 *              the pacer's debt is paid, then launch between two CUDA events
 *              from a fixed pool, on the kernel's own stream.
 * No path allocates or calls getenv; only M_PACE locks. */
#define _GNU_SOURCE
#include "gpushare.h"
#include "pace.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

/* The launch API's own driver types (CUDA 12 cuda.h layouts, 64-bit). */
typedef void *CUfunction;
typedef void *CUevent;
typedef struct CUlaunchAttribute_st CUlaunchAttribute; /* only passed through */
typedef struct {
    unsigned gridDimX, gridDimY, gridDimZ;
    unsigned blockDimX, blockDimY, blockDimZ;
    unsigned sharedMemBytes;
    CUstream hStream;
    CUlaunchAttribute *attrs;
    unsigned numAttrs;
} CUlaunchConfig;

enum { CUDA_ERROR_NOT_READY = 600 };
#define CU_STREAM_PER_THREAD ((CUstream)0x2)

typedef CUresult (*cuLaunchKernel_fn)(CUfunction, unsigned, unsigned, unsigned, unsigned,
                                      unsigned, unsigned, unsigned, CUstream, void **, void **);
typedef cuLaunchKernel_fn cuLaunchKernel_ptsz_fn;
typedef CUresult (*cuLaunchKernelEx_fn)(const CUlaunchConfig *, CUfunction, void **, void **);
typedef cuLaunchKernelEx_fn cuLaunchKernelEx_ptsz_fn;
typedef CUresult (*cuLaunchCooperativeKernel_fn)(CUfunction, unsigned, unsigned, unsigned,
                                                 unsigned, unsigned, unsigned, unsigned,
                                                 CUstream, void **);
typedef cuLaunchCooperativeKernel_fn cuLaunchCooperativeKernel_ptsz_fn;

/* The event calls: not intercepted (no hook of ours in front of them), found
 * in the real driver at setup. */
static struct {
    CUresult (*create)(CUevent *, unsigned);
    CUresult (*record)(CUevent, CUstream);
    CUresult (*query)(CUevent);
    CUresult (*sync)(CUevent);
    CUresult (*elapsed)(float *, CUevent, CUevent);
} ev;

/* The channel file the plugin creates per GPU (plugin/limits.go): the
 * struct at offset 0 of a file of exactly this size. */
#define GS_TGS_FILE_SIZE 4096
#define GS_TGS_VERSION 1

enum { M_UNSET = 0, M_PASS, M_PRODUCE, M_PACE };
static int mode; /* written once, by setup (release), read by every launch */

#define MS 1000000ull
#define WINDOW_NS (100 * MS)  /* the pacer's credit window and the TGS window */
#define IDLE_NS (50 * MS)     /* a production gap longer than this is idle */
#define MAX_SLEEP_NS (20 * MS) /* a long wait is re-decided at least this often */
#define POOL 64               /* event pairs: kernels measured in flight at most */
/* One launch in SAMPLE, chosen at random (no period for a workload to
 * alias with), is measured between two events; the others are charged the
 * measured mean run time, which the samples keep current. The driver's four
 * event calls per measured kernel so cost a quarter per launch. Until a
 * first measurement every launch is measured. */
#define SAMPLE 4

/* M_PRODUCE's state: what gs_tgs_produce keeps between launches (its
 * last_ns is exchanged atomically, so threads may share it). */
static struct gs_tgs_channel *chan;
static struct gs_tgs_producer producer = {.idle_ns = IDLE_NS};

/* M_PACE's state, under pace.mu. The pool's pairs form a ring of kernels
 * in flight, oldest at head. The pacer is the task's, in the usage region
 * shared by its processes (P, used between plock and punlock: the region's
 * robust mutex), so that a task of several processes is held to its share
 * in all, not each; without a region, this process's own (pace.pacer). */
static struct gs_pacer *P;
static int shared_pacer;
static void plock(void)
{
    if (shared_pacer)
        gs_region_lock();
}
static void punlock(void)
{
    if (shared_pacer)
        gs_region_unlock();
}

static struct {
    pthread_mutex_t mu;
    struct gs_pacer pacer;
    struct gs_tgs tgs;
    uint32_t base;  /* the share without production present: compute_pct */
    int tgs_on;     /* opportunistic with a channel */
    CUevent start[POOL], end[POOL];
    uint64_t charged[POOL];
    unsigned head, n;
    uint32_t rng; /* xorshift: which launches are measured */
} pace = {.mu = PTHREAD_MUTEX_INITIALIZER};

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts); /* shared by every process of the host */
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* <gs_dir>/tgs, mapped: the plugin's per-GPU channel; NULL when absent (a
 * plugin without TGS, or a task outside gpushare's reservations) or not
 * one of ours, with a line on stderr for the latter. */
static struct gs_tgs_channel *open_channel(int writable)
{
    char path[sizeof gs_dir + 8];
    snprintf(path, sizeof path, "%s/tgs", gs_dir);
    int fd = open(path, (writable ? O_RDWR : O_RDONLY) | O_CLOEXEC);
    if (fd < 0) {
        if (errno != ENOENT)
            fprintf(stderr, "gpushare: cannot open the TGS channel %s: %m\n", path);
        return NULL;
    }
    struct stat st;
    void *m = MAP_FAILED;
    if (fstat(fd, &st) == 0 && st.st_size == GS_TGS_FILE_SIZE)
        m = mmap(NULL, GS_TGS_FILE_SIZE, PROT_READ | (writable ? PROT_WRITE : 0), MAP_SHARED, fd, 0);
    close(fd);
    struct gs_tgs_channel *c = m;
    if (m == MAP_FAILED || c->magic != GS_TGS_MAGIC || c->version != GS_TGS_VERSION) {
        fprintf(stderr, "gpushare: %s is not a TGS channel of this version: ignored\n", path);
        if (m != MAP_FAILED)
            munmap(m, GS_TGS_FILE_SIZE);
        return NULL;
    }
    return c;
}

/* The real driver's event calls and the pool, in the context current at the
 * first paced launch. 0 on success. */
static int make_pool(void)
{
    Dl_info info;
    void *h = NULL;
    if (gs_hooks[H_cuLaunchKernel].real && dladdr(gs_hooks[H_cuLaunchKernel].real, &info) && info.dli_fname)
        h = dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD);
    if (!h)
        return -1;
    /* through our dlsym: names outside the hook table go to glibc's */
    *(void **)&ev.create = dlsym(h, "cuEventCreate");
    *(void **)&ev.record = dlsym(h, "cuEventRecord");
    *(void **)&ev.query = dlsym(h, "cuEventQuery");
    *(void **)&ev.sync = dlsym(h, "cuEventSynchronize");
    *(void **)&ev.elapsed = dlsym(h, "cuEventElapsedTime");
    dlclose(h); /* RTLD_NOLOAD: drops only our reference */
    if (!ev.create || !ev.record || !ev.query || !ev.sync || !ev.elapsed)
        return -1;
    for (int i = 0; i < POOL; i++)
        if (ev.create(&pace.start[i], 0) != CUDA_SUCCESS || ev.create(&pace.end[i], 0) != CUDA_SUCCESS)
            return -1; /* those made are kept: a few events, once */
    return 0;
}

static pthread_once_t setup_once = PTHREAD_ONCE_INIT;

static void setup_mode(void)
{
    gs_load_driver();
    int m = M_PASS;
    uint32_t share = (uint32_t)gs_lim.compute_pct * 10;
    if (gs_dir[0]) {
        switch (gs_lim.klass_id) {
        case GS_CLASS_PRODUCTION: /* never paced */
            chan = open_channel(1);
            m = chan ? M_PRODUCE : M_PASS;
            break;
        case GS_CLASS_OPPORTUNISTIC:
            chan = open_channel(0);
            m = chan || share < GS_SHARE_FULL ? M_PACE : M_PASS;
            break;
        default:
            m = share < GS_SHARE_FULL ? M_PACE : M_PASS;
        }
    }
    if (m == M_PACE) {
        if (make_pool() != 0) {
            fprintf(stderr, "gpushare: cannot create CUDA events to measure kernels: "
                            "launches are not paced\n");
            m = M_PASS;
        } else {
            uint64_t now = now_ns();
            pace.base = share;
            pace.tgs_on = chan != NULL;
            P = gs_region_pacer(share, WINDOW_NS, now);
            shared_pacer = P != NULL;
            if (!P) { /* no region: this process paces itself */
                gs_pacer_init(&pace.pacer, share, WINDOW_NS, now);
                P = &pace.pacer;
            }
            gs_tgs_init(&pace.tgs, WINDOW_NS, now);
        }
    }
    __atomic_store_n(&mode, m, __ATOMIC_RELEASE);
}

static int setup(void)
{
    pthread_once(&setup_once, setup_mode);
    return __atomic_load_n(&mode, __ATOMIC_ACQUIRE);
}

static void produce(void)
{
    gs_tgs_produce(chan, &producer, now_ns(), 1);
}

/* Feeds the pacer the run times of the finished kernels, oldest first,
 * without blocking; the caller holds pace.mu and plock. A measurement the driver will not give (an event of
 * another context, say) settles at what was charged. */
static void harvest(void)
{
    while (pace.n) {
        unsigned i = pace.head;
        CUresult r = ev.query(pace.end[i]);
        if (r == CUDA_ERROR_NOT_READY)
            return;
        float ms = 0;
        uint64_t busy = pace.charged[i];
        if (r == CUDA_SUCCESS && ev.elapsed(&ms, pace.start[i], pace.end[i]) == CUDA_SUCCESS && ms >= 0)
            busy = (uint64_t)((double)ms * 1e6);
        gs_pacer_done(P, pace.charged[i], busy);
        pace.head = (i + 1) % POOL;
        pace.n--;
    }
}

/* Before a paced launch: returns with pace.mu held, the debt paid and the
 * start event recorded on the stream; *slot is the pair's index, or -1 when
 * the launch goes unmeasured (charged at the mean). */
static void pace_before(CUstream s, int *slot, uint64_t *charged)
{
    pthread_mutex_lock(&pace.mu);
    uint64_t now;
    if (pace.n == POOL) /* POOL kernels still running: wait for the oldest */
        ev.sync(pace.end[pace.head]);
    for (;;) {
        /* one take of the task's pacer per launch (plock: the region's
         * mutex), none while sleeping */
        now = now_ns();
        plock();
        harvest();
        if (pace.tgs_on) {
            uint32_t t = gs_tgs_share(&pace.tgs, chan, now);
            gs_pacer_set_share(P, t < GS_SHARE_FULL ? t : pace.base, now);
        }
        uint64_t d = gs_pacer_delay(P, now);
        if (!d) {
            *charged = gs_pacer_launch(P, now);
            punlock();
            break;
        }
        punlock();
        if (d > MAX_SLEEP_NS)
            d = MAX_SLEEP_NS;
        pthread_mutex_unlock(&pace.mu);
        struct timespec ts = {(time_t)(d / 1000000000ull), (long)(d % 1000000000ull)};
        nanosleep(&ts, NULL);
        pthread_mutex_lock(&pace.mu);
    }
    *slot = -1;
    uint32_t x = pace.rng ? pace.rng : 0x9e3779b9u;
    x ^= x << 13, x ^= x >> 17, x ^= x << 5;
    pace.rng = x;
    int measure = x % SAMPLE == 0 || __atomic_load_n(&P->est_ns, __ATOMIC_RELAXED) == 0;
    if (measure && pace.n < POOL) {
        unsigned i = (pace.head + pace.n) % POOL;
        if (ev.record(pace.start[i], s) == CUDA_SUCCESS)
            *slot = (int)i;
    }
}

/* After it: the end event, and pace.mu released. A launch the driver refused
 * ran nothing: its charge is taken back. */
static void pace_after(CUstream s, int slot, uint64_t charged, CUresult r)
{
    if (r != CUDA_SUCCESS) {
        plock();
        P->debt_ns -= (int64_t)charged;
        punlock();
    }
    else if (slot >= 0 && ev.record(pace.end[slot], s) == CUDA_SUCCESS) {
        pace.charged[slot] = charged;
        pace.n++;
    }
    pthread_mutex_unlock(&pace.mu);
}

/* One hook: the exported function is the whole path of a task without a
 * compute limit (a load of mode and of the real function, a tail call);
 * everything else is in name##_slow, kept out of line so the fast path
 * sets up no frame. A _ptsz variant's NULL stream is the per-thread
 * default stream, which the (legacy) event record names
 * CU_STREAM_PER_THREAD. */
#define LAUNCH_HOOK(name, ptsz, stream, params, args)                           \
    static __attribute__((noinline)) CUresult name##_slow params                \
    {                                                                           \
        int m = __atomic_load_n(&mode, __ATOMIC_ACQUIRE);                       \
        if (m == M_UNSET)                                                       \
            m = setup();                                                        \
        name##_fn real = (name##_fn)gs_hooks[H_##name].real;                    \
        if (!real)                                                              \
            return CUDA_ERROR_NOT_FOUND;                                        \
        if (m == M_PASS)                                                        \
            return real args;                                                   \
        if (m == M_PRODUCE) {                                                   \
            produce();                                                          \
            return real args;                                                   \
        }                                                                       \
        CUstream s_ = (stream);                                                 \
        if ((ptsz) && s_ == NULL)                                               \
            s_ = CU_STREAM_PER_THREAD;                                          \
        int slot_;                                                              \
        uint64_t charged_;                                                      \
        pace_before(s_, &slot_, &charged_);                                     \
        CUresult r_ = real args;                                                \
        pace_after(s_, slot_, charged_, r_);                                    \
        return r_;                                                              \
    }                                                                           \
    EXPORT CUresult name params                                                 \
    {                                                                           \
        name##_fn real = (name##_fn)gs_hooks[H_##name].real;                    \
        if (__builtin_expect(__atomic_load_n(&mode, __ATOMIC_ACQUIRE) == M_PASS && real, 1)) \
            return real args;                                                   \
        return name##_slow args;                                                \
    }

#define KPARAMS(tail)                                                           \
    (CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, \
     unsigned bz, unsigned shmem, CUstream hs, void **kp tail)
#define EXTRA , void **extra
#define NOTHING

LAUNCH_HOOK(cuLaunchKernel, 0, hs, KPARAMS(EXTRA), (f, gx, gy, gz, bx, by, bz, shmem, hs, kp, extra))
LAUNCH_HOOK(cuLaunchKernel_ptsz, 1, hs, KPARAMS(EXTRA), (f, gx, gy, gz, bx, by, bz, shmem, hs, kp, extra))
LAUNCH_HOOK(cuLaunchCooperativeKernel, 0, hs, KPARAMS(NOTHING), (f, gx, gy, gz, bx, by, bz, shmem, hs, kp))
LAUNCH_HOOK(cuLaunchCooperativeKernel_ptsz, 1, hs, KPARAMS(NOTHING), (f, gx, gy, gz, bx, by, bz, shmem, hs, kp))
LAUNCH_HOOK(cuLaunchKernelEx, 0, cfg ? cfg->hStream : NULL,
            (const CUlaunchConfig *cfg, CUfunction f, void **kp, void **extra), (cfg, f, kp, extra))
LAUNCH_HOOK(cuLaunchKernelEx_ptsz, 1, cfg ? cfg->hStream : NULL,
            (const CUlaunchConfig *cfg, CUfunction f, void **kp, void **extra), (cfg, f, kp, extra))
