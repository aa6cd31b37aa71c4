/* The fake driver's streams, stream capture, graphs, stream waits and
 * contexts (issue 29): what the real driver enforces and the launch hook
 * must live with. #included at the end of testdata/fakecuda.c; the GPU
 * timeline, kernels and events are testdata/fakegpu.c's, which asks here
 * (fakecap_*) where a launch or an event record goes.
 *
 * Modelled, each after the CUDA driver API's documented rule:
 * - Capture (cuStreamBeginCapture_v2 .. cuStreamEndCapture): work launched
 *   into a capturing stream is not run, it is added to the graph; it runs
 *   when the instantiated graph is launched (cuGraphInstantiateWithFlags,
 *   cuGraphLaunch), once per launch.
 * - "Potentially unsafe API calls" during capture (cudaStreamCaptureMode):
 *   cuEventQuery, cuEventSynchronize, cuStreamSynchronize and
 *   cuCtxSynchronize are prohibited for a thread whose interaction mode
 *   (cuThreadExchangeStreamCaptureMode, default global) is
 *     global:       if it has a capture of its own not begun relaxed, or any
 *                   thread has a capture begun in global mode;
 *     thread-local: if it has a capture of its own not begun relaxed;
 *     relaxed:      never.
 *   A prohibited call fails with CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED (900)
 *   and invalidates the capture(s) it conflicts with: their
 *   cuStreamEndCapture returns CUDA_ERROR_STREAM_CAPTURE_INVALIDATED (901).
 * - Stream waits (cuStreamWaitValue32, CU_STREAM_WAIT_VALUE_GEQ): work
 *   queued behind the wait on its stream does not start, and events
 *   recorded behind it do not complete, until the word reaches the value
 *   (here: a cuStreamWriteValue32 on any stream, applied at once). The word
 *   is host memory in the fake.
 * - Contexts (cuCtxCreate_v2, cuCtxDestroy_v2, cuDevicePrimaryCtxRetain,
 *   cuDevicePrimaryCtxReset_v2): an event belongs to the context current
 *   when it was made; once that context is destroyed or reset, its events
 *   are invalid (CUDA_ERROR_INVALID_HANDLE, 400). The primary context keeps
 *   its handle across a reset, as the driver's does. One current context
 *   per process (the fake's threads share it).
 * Only the default streams (NULL, legacy, per-thread) and streams from
 * cuStreamCreate exist; the default ones never capture nor wait. */
#include <time.h>

enum { CAP_NONE = 0, CAP_ACTIVE = 1, CAP_INVALIDATED = 2 };
enum { MODE_GLOBAL = 0, MODE_THREAD_LOCAL = 1, MODE_RELAXED = 2 };
enum { ERR_ILLEGAL_STATE = 401, ERR_CAPTURE_UNSUPPORTED = 900, ERR_CAPTURE_INVALIDATED = 901 };
#define QMAX 4096
#define GMAX 256
#define SMAX 64

/* a graph: kernels, in order; an executable's src is the graph it was
 * instantiated from, whose memory nodes (testdata/fakevmm.c, keyed by the
 * graph) its launches allocate */
struct fgraph { unsigned n; void *fn[GMAX]; struct fgraph *src; };
CUresult fakevmm_graph_launch(void *graph); /* testdata/fakevmm.c */

struct fstream {
    int cap, cap_mode;
    pthread_t owner;         /* the thread that began the capture */
    struct fgraph *g;        /* being captured */
    volatile uint32_t *word; /* a wait not yet met: NULL when none */
    uint32_t value;
    unsigned nq;
    struct { void *p; int event; } q[QMAX]; /* launched behind the wait */
};

static struct fstream *streams[SMAX]; /* the created ones, under mu */
static __thread int thread_mode = MODE_GLOBAL;

/* fakegpu.c's: the GPU timeline */
int fakegpu_submit(void *f);
void fakegpu_reach(void *event);

static struct fstream *own(void *s)
{
    for (int i = 0; i < SMAX; i++)
        if (s && streams[i] == s)
            return streams[i];
    return NULL;
}

CUresult cuStreamCreate(void **s, unsigned flags)
{
    (void)flags;
    struct fstream *n = calloc(1, sizeof *n);
    if (!n)
        return 2;
    pthread_mutex_lock(&mu);
    for (int i = 0; i < SMAX; i++)
        if (!streams[i]) {
            streams[i] = n;
            *s = n;
            pthread_mutex_unlock(&mu);
            return 0;
        }
    pthread_mutex_unlock(&mu);
    free(n);
    return 2;
}

/* Where a launch on s goes: 1 taken here (captured, or queued behind a
 * wait), *r the result; 0: the GPU runs it now. */
int fakecap_launch(void *s, void *f, CUresult *r)
{
    pthread_mutex_lock(&mu);
    struct fstream *st = own(s);
    int taken = st && (st->cap || st->word);
    *r = 0;
    if (st && st->cap == CAP_INVALIDATED)
        *r = ERR_CAPTURE_INVALIDATED;
    else if (st && st->cap == CAP_ACTIVE)
        *r = st->g->n < GMAX ? (st->g->fn[st->g->n++] = f, 0) : 2;
    else if (st && st->word)
        *r = st->nq < QMAX ? (st->q[st->nq].p = f, st->q[st->nq++].event = 0, 0) : 2;
    pthread_mutex_unlock(&mu);
    return taken;
}

/* An event record on s: 1 taken here (into a capture: an event record
 * node, which never completes an event outside the graph; or behind a
 * wait: it completes when the work before it has run). */
int fakecap_record(void *s, void *e, CUresult *r)
{
    pthread_mutex_lock(&mu);
    struct fstream *st = own(s);
    int taken = st && (st->cap || st->word);
    *r = st && st->cap == CAP_INVALIDATED ? ERR_CAPTURE_INVALIDATED : 0;
    if (st && !st->cap && st->word) {
        if (st->nq < QMAX) {
            st->q[st->nq].p = e;
            st->q[st->nq++].event = 1;
        } else {
            *r = 2;
        }
    }
    pthread_mutex_unlock(&mu);
    return taken;
}

/* A potentially unsafe call by this thread: 0 when legal now, else 900
 * and the captures it conflicts with are invalidated. */
CUresult fakecap_unsafe(void)
{
    if (thread_mode == MODE_RELAXED)
        return 0;
    CUresult r = 0;
    pthread_t me = pthread_self();
    pthread_mutex_lock(&mu);
    for (int i = 0; i < SMAX; i++) {
        struct fstream *st = streams[i];
        if (!st || st->cap != CAP_ACTIVE)
            continue;
        int mine = pthread_equal(st->owner, me) && st->cap_mode != MODE_RELAXED;
        int global = thread_mode == MODE_GLOBAL && st->cap_mode == MODE_GLOBAL;
        if (mine || global) {
            st->cap = CAP_INVALIDATED;
            r = ERR_CAPTURE_UNSUPPORTED;
        }
    }
    pthread_mutex_unlock(&mu);
    return r;
}

/* 1 while any stream has work held behind a wait. */
int fakecap_pending(void)
{
    int n = 0;
    pthread_mutex_lock(&mu);
    for (int i = 0; i < SMAX; i++)
        n |= streams[i] && streams[i]->word;
    pthread_mutex_unlock(&mu);
    return n;
}

void fakegpu_count(void); /* testdata/fakegpu.c: a call a paced launch may make */

CUresult cuThreadExchangeStreamCaptureMode(int *mode)
{
    fakegpu_count();
    int old = thread_mode;
    thread_mode = *mode;
    *mode = old;
    return 0;
}

CUresult cuStreamBeginCapture_v2(void *s, int mode)
{
    struct fgraph *g = calloc(1, sizeof *g);
    pthread_mutex_lock(&mu);
    struct fstream *st = own(s);
    CUresult r = !st || !g ? 1 : st->cap ? ERR_ILLEGAL_STATE : 0;
    if (!r) {
        st->cap = CAP_ACTIVE;
        st->cap_mode = mode;
        st->owner = pthread_self();
        st->g = g;
        g = NULL;
    }
    pthread_mutex_unlock(&mu);
    free(g);
    return r;
}
CUresult cuStreamBeginCapture(void *s, int mode) { return cuStreamBeginCapture_v2(s, mode); }

CUresult cuStreamEndCapture(void *s, struct fgraph **g)
{
    pthread_mutex_lock(&mu);
    struct fstream *st = own(s);
    CUresult r = !st || !st->cap ? ERR_ILLEGAL_STATE : st->cap == CAP_INVALIDATED ? ERR_CAPTURE_INVALIDATED : 0;
    *g = NULL;
    if (st && st->cap) {
        if (r)
            free(st->g);
        else
            *g = st->g;
        st->cap = CAP_NONE;
        st->g = NULL;
    }
    pthread_mutex_unlock(&mu);
    return r;
}

CUresult cuStreamIsCapturing(void *s, int *status)
{
    fakegpu_count();
    pthread_mutex_lock(&mu);
    struct fstream *st = own(s);
    *status = st ? st->cap : CAP_NONE;
    pthread_mutex_unlock(&mu);
    return 0;
}

CUresult cuStreamGetCaptureInfo(void *s, int *status, unsigned long long *id)
{
    if (id)
        *id = (uintptr_t)s;
    return cuStreamIsCapturing(s, status);
}

/* An empty graph, to which nodes are added (cuGraphAddMemAllocNode). */
CUresult cuGraphCreate(struct fgraph **g, unsigned flags)
{
    (void)flags;
    *g = calloc(1, sizeof **g);
    return *g ? 0 : 2;
}

/* A graph's executable is a copy of its kernels, and names the graph for
 * its memory nodes. */
CUresult cuGraphInstantiateWithFlags(struct fgraph **exec, struct fgraph *g, unsigned long long flags)
{
    (void)flags;
    if (!g)
        return 1;
    *exec = malloc(sizeof **exec);
    if (!*exec)
        return 2;
    **exec = *g;
    (*exec)->src = g;
    return 0;
}
CUresult cuGraphDestroy(struct fgraph *g) { free(g); return 0; }
CUresult cuGraphExecDestroy(struct fgraph *g) { free(g); return 0; }

/* Allocates the graph's memory nodes, as the driver does at a launch (from
 * the device's graph pool, once: later launches reuse the reserve;
 * CUDA_ERROR_OUT_OF_MEMORY when the device cannot), then runs its kernels
 * on s (into s's capture, or behind its wait, as any launch on s), in
 * order. */
CUresult cuGraphLaunch(struct fgraph *exec, void *s)
{
    if (!exec)
        return 400;
    CUresult m = fakevmm_graph_launch(exec->src);
    if (m)
        return m;
    for (unsigned i = 0; i < exec->n; i++) {
        CUresult r;
        if (!fakecap_launch(s, exec->fn[i], &r))
            r = fakegpu_submit(exec->fn[i]);
        if (r)
            return r;
    }
    return 0;
}
CUresult cuGraphLaunch_ptsz(struct fgraph *exec, void *s) { return cuGraphLaunch(exec, s); }

CUresult cuStreamWaitValue32_v2(void *s, CUdeviceptr addr, uint32_t value, unsigned flags)
{
    (void)flags; /* CU_STREAM_WAIT_VALUE_GEQ */
    volatile uint32_t *w = (volatile uint32_t *)(uintptr_t)addr;
    pthread_mutex_lock(&mu);
    struct fstream *st = own(s);
    if (st && !st->word && *w < value) {
        st->word = w;
        st->value = value;
    }
    pthread_mutex_unlock(&mu);
    return st ? 0 : 1;
}
CUresult cuStreamWaitValue32(void *s, CUdeviceptr a, uint32_t v, unsigned f) { return cuStreamWaitValue32_v2(s, a, v, f); }

/* Writes the word and lets every stream whose wait is now met run what
 * was queued behind it, in order. */
CUresult cuStreamWriteValue32_v2(void *s, CUdeviceptr addr, uint32_t value, unsigned flags)
{
    (void)s, (void)flags;
    *(volatile uint32_t *)(uintptr_t)addr = value;
    pthread_mutex_lock(&mu);
    for (int i = 0; i < SMAX; i++) {
        struct fstream *st = streams[i];
        if (!st || !st->word || *st->word < st->value)
            continue;
        for (unsigned k = 0; k < st->nq; k++) {
            if (st->q[k].event)
                fakegpu_reach(st->q[k].p);
            else
                fakegpu_submit(st->q[k].p);
        }
        st->nq = 0;
        st->word = NULL;
    }
    pthread_mutex_unlock(&mu);
    return 0;
}
CUresult cuStreamWriteValue32(void *s, CUdeviceptr a, uint32_t v, unsigned f) { return cuStreamWriteValue32_v2(s, a, v, f); }

/* ---- contexts ---- */
struct fctx { int alive; uint32_t gen; int dev; };
static struct fctx primaries[8] = {{1, 1, 0}, {1, 1, 1}, {1, 1, 2}, {1, 1, 3},
                                   {1, 1, 4}, {1, 1, 5}, {1, 1, 6}, {1, 1, 7}}; /* per device */
static struct fctx *current; /* the process's current context */

CUresult cuCtxCreate_v2(void **c, unsigned f, int d)
{
    (void)f;
    if (d < 0 || d >= ndevices())
        return 101; /* CUDA_ERROR_INVALID_DEVICE */
    struct fctx *n = calloc(1, sizeof *n);
    if (!n)
        return 2;
    n->alive = n->gen = 1;
    n->dev = d;
    current = n;
    *c = n;
    return 0;
}
/* The current context's device (device 0 without one, as before the fake
 * had several: the tests that never make a context) */
CUresult cuCtxGetDevice(int *d) { fakegpu_count(); *d = current ? current->dev : 0; return 0; }
/* Not a driver call: the device a context belongs to (fakegpu.c's
 * timelines), -1 for none. */
int fakecap_device(void *ctx) { return ctx ? ((struct fctx *)ctx)->dev : -1; }
int fakecap_current_device(void) { return current ? current->dev : 0; }
CUresult cuCtxDestroy_v2(struct fctx *c)
{
    if (!c || !c->alive)
        return 201; /* CUDA_ERROR_INVALID_CONTEXT */
    c->alive = 0;   /* never freed: a stale handle stays readable here */
    if (current == c)
        current = NULL;
    return 0;
}
CUresult cuCtxSetCurrent(struct fctx *c) { current = c; return 0; }
CUresult cuCtxGetCurrent(struct fctx **c) { fakegpu_count(); *c = current; return 0; }
CUresult cuDevicePrimaryCtxRetain(struct fctx **c, int d)
{
    if (d < 0 || d >= ndevices())
        return 101;
    primaries[d].alive = 1;
    *c = &primaries[d];
    return 0;
}
CUresult cuDevicePrimaryCtxRelease_v2(int d) { (void)d; return 0; }
/* Destroys the primary context's resources; the handle stays. */
CUresult cuDevicePrimaryCtxReset_v2(int d) { if (d < 0 || d >= ndevices()) return 101; primaries[d].gen++; return 0; }

/* An event's context, as stamped at its creation; 1 while it lives. */
void fakecap_stamp(void **ctx, uint32_t *gen) { *ctx = current; *gen = current ? current->gen : 0; }
int fakecap_alive(void *ctx, uint32_t gen)
{
    struct fctx *c = ctx;
    return !c || (c->alive && c->gen == gen);
}
