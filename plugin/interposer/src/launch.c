/* gpushare CUDA interposer: kernel launches, paced to the task's share of
 * GPU time (src/pace.c) and, for production tasks, counted into the GPU's
 * TGS channel (README, "Compute control"); the exported launch hooks that call it are
 * in launchhooks.c.
 *
 * What a launch costs depends on the task, decided once, at its first
 * launch (gs_launch_setup), and kept in `gs_launch_mode`:
 *   M_PASS     no compute limit: a load of the mode and the real call, nothing
 *              else (not under gpushare; compute_pct 100 and not
 *              opportunistic; production without a TGS channel);
 *   M_PRODUCE  production with a channel: a clock read and a few relaxed
 *              atomic adds into the channel, never a wait;
 *   M_PACE     compute_pct < 100, or opportunistic: under one mutex (the
 *              pacer is not thread-safe), harvest the measured run times of
 *              finished kernels (polled, never waited for), wait (nanosleep,
 *              the mutex released) until the pacer's debt is paid, then
 *              launch between two CUDA events from the launch context's
 *              pool, on the kernel's own stream. A launch into a stream
 *              being captured runs nothing: it passes straight through; a
 *              graph launch (cuGraphLaunch) is paced by its measured time.
 * No path allocates or calls getenv; only M_PACE locks. */
#define _GNU_SOURCE
#include "gpushare.h"
#include "launch.h"
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

/* The driver's types a paced launch uses (CUDA 12 cuda.h, 64-bit). */
typedef void *CUevent;
typedef void *CUcontext;

enum { CUDA_ERROR_NOT_READY = 600 };
enum { CAPTURE_NONE = 0, CAPTURE_MODE_RELAXED = 2 }; /* CUstreamCaptureStatus, CUstreamCaptureMode */

/* The driver calls a paced launch makes: not intercepted (no hook of ours
 * in front of them), found in the real driver at setup. The last three may
 * be missing (an old driver): then no capture is seen, and the events are
 * the first paced context's. */
static struct {
    CUresult (*create)(CUevent *, unsigned);
    CUresult (*destroy)(CUevent);
    CUresult (*record)(CUevent, CUstream);
    CUresult (*query)(CUevent);
    CUresult (*elapsed)(float *, CUevent, CUevent);
    CUresult (*capturing)(CUstream, int *);  /* cuStreamIsCapturing */
    CUresult (*exchange)(int *);             /* cuThreadExchangeStreamCaptureMode */
    CUresult (*current)(CUcontext *);        /* cuCtxGetCurrent */
} ev;

int gs_launch_mode; /* written once, by gs_launch_setup (release), read by every launch */

#define MS 1000000ull
#define WINDOW_NS (100 * MS)  /* the pacer's credit window and the TGS window */
#define IDLE_NS (50 * MS)     /* a production gap longer than this is idle */
#define MAX_SLEEP_NS (20 * MS) /* a long wait is re-decided at least this often */
#define TURN_AHEAD_NS (2 * MS) /* a task in its turn may queue this much ahead, at least */
#define POOL 64               /* event pairs per context: measured in flight at most */
#define CTXS 4                /* contexts with a pool of events at once */
/* One launch in GS_SAMPLE, at random, is measured between two events; the
 * others are charged the mean and settled on the next measurement
 * (src/pace.h, gs_sampler). The driver's four event calls per measured
 * kernel so cost a quarter per launch. */

/* M_PRODUCE's state: what gs_tgs_produce keeps between launches (its
 * last_ns is exchanged atomically, so threads may share it). */
static struct gs_tgs_channel *chan;
static struct gs_tgs_producer producer = {.idle_ns = IDLE_NS};

/* M_PACE's state, under pace.mu. Each context that launches paced work
 * has a pool of event pairs (events belong to a context, and die with it),
 * a ring of measured launches in flight, oldest at head. The pacer is the task's, in the usage region
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
    int sliced;     /* time-sliced: launches wait for the task's turn (slice.c) */
    struct pool {
        int made;      /* the events exist, in ctx */
        CUcontext ctx;
        uint64_t used; /* the last launch that used it: the least recent goes */
        CUevent start[POOL], end[POOL];
        uint64_t charged[POOL];
        uint32_t count[POOL]; /* the launches a measurement stands for (gs_sample_take) */
        uint8_t graph[POOL]; /* a graph launch: not a kernel's run time */
        unsigned head, n;
        int dev;                 /* its context's device in the region (-1: unknown) */
        struct gs_pacer *pacer;  /* that device's pacer; NULL: P */
        uint64_t unpriced[2];    /* launches charged 0 for want of a mean: kernels, graphs */
        struct gs_sampler samp;  /* which kernels are measured; those not, till the next */
    } pools[CTXS];
    uint64_t launches;
    uint64_t graph_est;   /* mean measured graph launch (EWMA, 1/8) */
    uint64_t unpriced[2]; /* the same, of launches without a pool: P's */
    int gave_up;          /* the ring stayed full with no mean for a window */
} pace = {.mu = PTHREAD_MUTEX_INITIALIZER};

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts); /* shared by every process of the host */
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Drops a pool: its events (those of a destroyed context fail, and are
 * gone anyway) and its measurements in flight (they stay charged at the
 * mean). */
static void drop_pool(struct pool *p)
{
    for (int i = 0; p->made && i < POOL; i++) {
        ev.destroy(p->start[i]);
        ev.destroy(p->end[i]);
    }
    p->made = 0;
    p->head = p->n = 0;
    p->pacer = NULL;
    p->dev = -1;
    p->samp.skipped = 0, p->samp.skipped_ns = 0; /* they stay charged at the mean */
    for (int g = 0; g < 2; g++) /* charged to P when there is a mean */
        pace.unpriced[g] += p->unpriced[g], p->unpriced[g] = 0;
}

/* Makes p's events in the current context ctx. 0 on success. */
static int make_events(struct pool *p, CUcontext ctx)
{
    drop_pool(p);
    int i = 0;
    for (; i < POOL; i++) {
        if (ev.create(&p->start[i], 0) != CUDA_SUCCESS)
            break;
        if (ev.create(&p->end[i], 0) != CUDA_SUCCESS) {
            ev.destroy(p->start[i]);
            break;
        }
    }
    if (i < POOL) {
        while (i--) {
            ev.destroy(p->start[i]);
            ev.destroy(p->end[i]);
        }
        return -1;
    }
    p->made = 1;
    p->ctx = ctx;
    /* its device (ctx is current): each device of the task has a pacer of
     * its own, a share of each GPU (README, "A pacer per device") */
    p->dev = shared_pacer ? gs_region_current_device() : -1;
    p->pacer = NULL;
    return 0;
}

/* The pacer of p's device, made by the first pool of the device; P when
 * the device is unknown (or without a region: the process's own). Not
 * under plock (it takes the region's mutex). */
static struct gs_pacer *pacer_of(struct pool *p, uint64_t now)
{
    if (p && !p->pacer && p->dev >= 0)
        p->pacer = gs_region_device_pacer(p->dev, pace.base, WINDOW_NS, now);
    return p && p->pacer ? p->pacer : P;
}

/* The current context (NULL when unknown): asked once per paced launch. */
static CUcontext current_ctx(void)
{
    CUcontext ctx = NULL;
    if (ev.current && ev.current(&ctx) != CUDA_SUCCESS)
        ctx = NULL;
    return ctx;
}

/* The pool of ctx, the current context, made (the least recently used one
 * dropped) if it has none; NULL when no events can be made. */
static struct pool *pool_here(CUcontext ctx)
{
    struct pool *p = &pace.pools[0];
    for (int i = 0; i < CTXS; i++) {
        struct pool *q = &pace.pools[i];
        if (q->made && q->ctx == ctx) {
            p = q;
            goto found;
        }
        if (!q->made || q->used < p->used)
            p = q;
        if (!q->made)
            break;
    }
    if (make_events(p, ctx) != 0)
        return NULL;
found:
    p->used = ++pace.launches;
    return p;
}

static void *driver_sym(void *h, const char *name)
{
    return dlsym(h, name); /* through our dlsym: names outside the hook table go to glibc's */
}

/* The real driver's calls and the pool of the context current at the first
 * paced launch. 0 on success. */
static int make_pool(void)
{
    Dl_info info;
    void *h = NULL;
    if (gs_hooks[H_cuLaunchKernel].real && dladdr(gs_hooks[H_cuLaunchKernel].real, &info) && info.dli_fname)
        h = dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD);
    if (!h)
        return -1;
    *(void **)&ev.create = driver_sym(h, "cuEventCreate");
    *(void **)&ev.destroy = driver_sym(h, "cuEventDestroy_v2");
    *(void **)&ev.record = driver_sym(h, "cuEventRecord");
    *(void **)&ev.query = driver_sym(h, "cuEventQuery");
    *(void **)&ev.elapsed = driver_sym(h, "cuEventElapsedTime");
    *(void **)&ev.capturing = driver_sym(h, "cuStreamIsCapturing");
    *(void **)&ev.exchange = driver_sym(h, "cuThreadExchangeStreamCaptureMode");
    *(void **)&ev.current = driver_sym(h, "cuCtxGetCurrent");
    dlclose(h); /* RTLD_NOLOAD: drops only our reference */
    if (!ev.create || !ev.destroy || !ev.record || !ev.query || !ev.elapsed)
        return -1;
    return pool_here(current_ctx()) ? 0 : -1;
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
            chan = gs_tgs_open(1);
            m = chan ? M_PRODUCE : M_PASS;
            break;
        case GS_CLASS_OPPORTUNISTIC:
            chan = gs_tgs_open(0);
            m = chan || share < GS_SHARE_FULL ? M_PACE : M_PASS;
            break;
        default:
            m = share < GS_SHARE_FULL ? M_PACE : M_PASS;
        }
        if (gs_slice_quantum_ns && gs_lim.klass_id != GS_CLASS_PRODUCTION && gs_slice_open() == 0)
            m = M_PACE, pace.sliced = 1;
        else if (m == M_PACE && !chan && share < GS_SHARE_FULL && gs_turns_open() == 0)
            pace.sliced = 1; /* capped: in turns with the GPU's other capped tasks (slice.c) */
    }
    if (m == M_PACE) {
        /* the pacers first: the first pool's device picks its own */
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
        if (make_pool() != 0) {
            fprintf(stderr, "gpushare: cannot create CUDA events to measure kernels: "
                            "launches are not paced\n");
            m = M_PASS;
        }
    }
    __atomic_store_n(&gs_launch_mode, m, __ATOMIC_RELEASE);
}

int gs_launch_setup(void)
{
    pthread_once(&setup_once, setup_mode);
    return __atomic_load_n(&gs_launch_mode, __ATOMIC_ACQUIRE);
}

void gs_launch_produce(void)
{
    gs_tgs_produce(chan, &producer, now_ns(), 1);
}

/* This thread's capture interaction mode made relaxed (and back): the
 * event queries below are "potentially unsafe" calls, which in global mode
 * would invalidate a capture any thread of the process has under way (and
 * in thread-local mode one of this thread's). They are safe here: they ask
 * about our own events, on streams that are not capturing. */
static int relaxed(void)
{
    int m = CAPTURE_MODE_RELAXED;
    if (ev.exchange && ev.exchange(&m) != CUDA_SUCCESS)
        m = -1;
    return m;
}
static void restore(int m)
{
    if (ev.exchange && m >= 0)
        ev.exchange(&m);
}

static uint64_t *est_of(int graph, struct gs_pacer *pc) { return graph ? &pace.graph_est : &pc->est_ns; }

/* The count of launches charged nothing for want of a mean, to pc: its
 * pool's, else P's. */
static uint64_t *unpriced_for(struct gs_pacer *pc)
{
    for (int c = 0; c < CTXS; c++)
        if (pace.pools[c].made && pace.pools[c].pacer == pc)
            return pace.pools[c].unpriced;
    return pace.unpriced;
}

/* Launches charged nothing for want of a mean are charged it, to pc, once
 * there is one. */
static void price(uint64_t unpriced[2], struct gs_pacer *pc)
{
    for (int g = 0; g < 2; g++) {
        uint64_t e = *est_of(g, pc);
        if (e && unpriced[g]) {
            pc->debt_ns += (int64_t)(e * unpriced[g]);
            unpriced[g] = 0;
        }
    }
}

/* Feeds the pacer the run times of the finished launches, oldest first per
 * context, never waiting; the caller holds pace.mu and plock. A measurement
 * the driver will not give (an event of a destroyed context) stays charged
 * at what it was charged. Launches charged nothing for want of a mean are
 * charged it once there is one. */
static void harvest(void)
{
    int any = 0;
    for (int c = 0; c < CTXS; c++)
        any |= pace.pools[c].n != 0;
    if (!any)
        return;
    int m = relaxed();
    for (int c = 0; c < CTXS; c++) {
        struct pool *p = &pace.pools[c];
        struct gs_pacer *pc = p->pacer ? p->pacer : P;
        while (p->n) {
            unsigned i = p->head;
            CUresult r = ev.query(p->end[i]);
            if (r == CUDA_ERROR_NOT_READY)
                break;
            float ms = 0;
            if (r == CUDA_SUCCESS && ev.elapsed(&ms, p->start[i], p->end[i]) == CUDA_SUCCESS && ms >= 0) {
                uint64_t busy = (uint64_t)((double)ms * 1e6);
                if (p->graph[i]) {
                    gs_pacer_settle(pc, p->charged[i], busy);
                    pace.graph_est = pace.graph_est ? pace.graph_est + ((int64_t)busy - (int64_t)pace.graph_est) / 8 : busy;
                } else {
                    gs_pacer_done(pc, p->charged[i], busy, p->count[i]);
                }
            } else if (!p->charged[i]) {
                p->unpriced[p->graph[i]]++;
            }
            p->head = (i + 1) % POOL;
            p->n--;
        }
        price(p->unpriced, pc);
    }
    restore(m);
    price(pace.unpriced, P);
}

/* Whether s is capturing (or its capture was invalidated): what is
 * launched there does not run now, it is recorded into a graph. */
int gs_launch_capturing(CUstream s)
{
    int st = CAPTURE_NONE;
    if (!ev.capturing)
        return 0;
    return ev.capturing(s, &st) != CUDA_SUCCESS || st != CAPTURE_NONE;
}

/* Before a paced launch (graph: a graph launch): returns with pace.mu
 * held, the debt paid and the start event recorded on the stream; *pl and
 * *slot name the pair, *slot -1 when the launch goes unmeasured (charged
 * at the mean). Never waits on the GPU: its events are polled. */
void gs_pace_before(CUstream s, int graph, struct pool **pl, int *slot, uint64_t *charged,
                    struct gs_pacer **pcp)
{
    pthread_mutex_lock(&pace.mu);
    uint64_t now = now_ns();
    CUcontext ctx = current_ctx(); /* this thread's: the same after any wait below */
    struct pool *p = pool_here(ctx);
    struct gs_pacer *pc = *pcp = pacer_of(p, now); /* the launch's device's */
    /* No mean yet and the ring full: the launch cannot be priced; wait for
     * the oldest, polled, the lock released, at most one window (it may
     * wait for work submitted later: a stream wait, a collective). */
    for (uint64_t waited = 0; p && p->n == POOL && !*est_of(graph, pc) && !pace.gave_up; waited += MS) {
        if (waited >= WINDOW_NS) {
            pace.gave_up = 1;
            break;
        }
        pthread_mutex_unlock(&pace.mu);
        struct timespec ms = {0, (long)MS};
        nanosleep(&ms, NULL);
        pthread_mutex_lock(&pace.mu);
        plock();
        harvest();
        punlock();
    }
    for (;;) {
        /* one take of the task's pacer per launch (plock: the region's
         * mutex), none while sleeping */
        now = now_ns();
        /* time-sliced: out of its turn, wait; in it, the pool's share */
        uint32_t base = pace.base;
        /* what a task outside the rotation gets (none mapped, or full) */
        struct gs_turn turn = {.pool = base, .ask = MAX_SLEEP_NS};
        uint64_t ahead = 0, ask = MAX_SLEEP_NS;
        uint64_t d = pace.sliced ? gs_slice_turn(now, &turn) : 0;
        if (d)
            goto sleep;
        if (pace.sliced) {
            /* in its turn a task is paced even at the whole GPU, so that
             * what it queues ahead (a framework queues hundreds of kernels)
             * is bounded: enough to keep the GPU busy while the host wakes
             * (two kernels, 2 ms at least), never past the turn; and it
             * asks again before it would look idle (slice.c), or the next
             * task would take the turn it is about to use */
            base = turn.pool < GS_SHARE_FULL ? turn.pool : GS_SHARE_FULL - 1;
            ahead = 2 * pc->est_ns > TURN_AHEAD_NS ? 2 * pc->est_ns : TURN_AHEAD_NS;
            if (ahead > turn.left)
                ahead = turn.left;
            ask = turn.ask;
        }
        plock();
        harvest();
        if (turn.resumed)
            gs_pacer_resume(pc, now);
        /* the share from the read-only limits (or the TGS loop), never the
         * region's copy, which the task can write (README, who can reach
         * a reservation's state) */
        uint32_t t = pace.tgs_on ? gs_tgs_share(&pace.tgs, chan, now) : GS_SHARE_FULL;
        gs_pacer_set_share(pc, t < GS_SHARE_FULL ? t : base, now);
        d = gs_pacer_delay_ahead(pc, now, ahead);
        if (!d) {
            *charged = *est_of(graph, pc);
            gs_pacer_charge(pc, now, *charged);
            punlock();
            break;
        }
        punlock();
    sleep:
        if (d > MAX_SLEEP_NS)
            d = MAX_SLEEP_NS;
        if (d > ask)
            d = ask;
        pthread_mutex_unlock(&pace.mu);
        struct timespec ts = {(time_t)(d / 1000000000ull), (long)(d % 1000000000ull)};
        nanosleep(&ts, NULL);
        pthread_mutex_lock(&pace.mu);
    }
    /* again: while the lock was released another thread may have given
     * this pool to a context of its own (more than CTXS at once) */
    if (!p || !p->made || p->ctx != ctx)
        p = pool_here(ctx);
    *slot = -1;
    *pl = p;
    /* graph launches are all measured: they differ from one another */
    int measure = p && (graph ? 1 : gs_sample_pick(&p->samp, pc));
    if (!measure || p->n == POOL)
        return; /* unmeasured: gs_pace_after */
    unsigned i = (p->head + p->n) % POOL;
    CUresult r = ev.record(p->start[i], s);
    if (r != CUDA_SUCCESS && r != CUDA_ERROR_NOT_READY) {
        /* the context was reset (same handle, its events gone): new ones */
        if (make_events(p, p->ctx) == 0)
            i = p->head, r = ev.record(p->start[i], s);
        else
            *pl = NULL;
    }
    if (r == CUDA_SUCCESS)
        *slot = (int)i;
}

/* After it: the end event, and pace.mu released. A launch the driver refused
 * ran nothing: its charge (to pc) is taken back. */
void gs_pace_after(CUstream s, int graph, struct pool *p, int slot, uint64_t charged,
                   struct gs_pacer *pc, CUresult r)
{
    if (r != CUDA_SUCCESS) {
        plock();
        pc->debt_ns -= (int64_t)charged;
        punlock();
    } else if (slot >= 0 && ev.record(p->end[slot], s) == CUDA_SUCCESS) {
        /* a kernel's measurement stands for the unmeasured ones before it */
        p->count[slot] = graph ? 1 : gs_sample_take(&p->samp, &charged);
        p->charged[slot] = charged;
        p->graph[slot] = (uint8_t)graph;
        p->n++;
    } else if (!charged) { /* unmeasured, and no mean yet: charged it when there is one */
        unpriced_for(pc)[graph]++;
    } else if (p && !graph) { /* unmeasured: settled on the next measurement */
        gs_sample_skip(&p->samp, charged);
    }
    pthread_mutex_unlock(&pace.mu);
}
