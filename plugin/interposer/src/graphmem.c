/* gpushare CUDA interposer: graph memory (README, "Memory the driver keeps
 * after a free"; issue 44, 9).
 *
 * A graph's memory nodes (cuGraphAddMemAllocNode, or cuMemAllocAsync
 * captured into a graph) get their physical memory when the graph is
 * launched or uploaded, from the device's graph pool, which keeps it for
 * later launches until cuDeviceGraphMemTrim gives back what no executing
 * graph uses. So:
 *   - at instantiation, the graph's memory nodes are summed per device
 *     (cuGraphGetNodes, cuGraphMemAllocNodeGetParams: the captured ones
 *     too) and the total must fit beside what is charged now, else
 *     CUDA_ERROR_OUT_OF_MEMORY; an executable with memory is remembered;
 *   - its launch (or upload) is charged ahead what it may map: its total,
 *     unless it was launched since the device's reserve last shrank (a
 *     trim, ours or the program's: then it must map again); a launch that
 *     cannot be charged, even after a trim, is refused with
 *     CUDA_ERROR_OUT_OF_MEMORY, as the driver refuses one it cannot back;
 *   - each device's reserve (CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT) is
 *     charged apart, settled after each launch and before each charge:
 *     held[d] = the reserve + what launches in flight were charged ahead.
 * The launch path: a graph launch looks at gs_graph_mem (0 until this
 * process instantiated a graph with memory), then only a graph with
 * memory takes gmu (briefly, never across the launch) and the region's
 * mutex; kernel launches are untouched. */
#define _GNU_SOURCE
#include "gpushare.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))
#define L gs_lim
#define REAL(n) GS_REAL(n)
#define NEED(f)                     \
    if (!(f))                       \
        return CUDA_ERROR_NOT_FOUND
#define ND GS_GRAPH_DEVS /* devices by ordinal; higher ordinals share the last */

typedef void *CUgraph;
typedef void *CUgraphExec;
typedef void *CUgraphNode;
typedef struct {
    int poolProps[22]; /* CUmemPoolProps: allocType, handleTypes, location {type, id}, ... */
    const void *accessDescs;
    size_t accessDescCount;
    size_t bytesize;
    CUdeviceptr dptr; /* out */
} CUDA_MEM_ALLOC_NODE_PARAMS;
enum { LOCATION_DEVICE = 1, NODE_MEM_ALLOC = 10, GRAPH_RESERVED_MEM_CURRENT = 2 };

typedef CUresult (*cuGraphAddMemAllocNode_fn)(CUgraphNode *, CUgraph, const void *, size_t,
                                              CUDA_MEM_ALLOC_NODE_PARAMS *);
typedef CUresult (*cuGraphInstantiateWithFlags_fn)(CUgraphExec *, CUgraph, unsigned long long);
typedef CUresult (*cuGraphInstantiate_v2_fn)(CUgraphExec *, CUgraph, CUgraphNode *, char *, size_t);
typedef CUresult (*cuGraphInstantiateWithParams_fn)(CUgraphExec *, CUgraph, void *);
typedef cuGraphInstantiateWithParams_fn cuGraphInstantiateWithParams_ptsz_fn;
typedef CUresult (*cuGraphExecDestroy_fn)(CUgraphExec);
typedef CUresult (*cuGraphUpload_fn)(CUgraphExec, CUstream);
typedef cuGraphUpload_fn cuGraphUpload_ptsz_fn;

/* Driver functions called, not intercepted: looked up once. */
static CUresult (*get_nodes)(CUgraph, CUgraphNode *, size_t *);
static CUresult (*node_type)(CUgraphNode, int *);
static CUresult (*node_params)(CUgraphNode, CUDA_MEM_ALLOC_NODE_PARAMS *);
static CUresult (*graph_attr)(CUdevice, int, void *);
static CUresult (*graph_trim)(CUdevice);
static CUresult (*ctx_dev)(CUdevice *);
static pthread_once_t syms_once = PTHREAD_ONCE_INIT;

static void load_syms(void)
{
    *(void **)&get_nodes = gs_driver_sym("cuGraphGetNodes");
    *(void **)&node_type = gs_driver_sym("cuGraphNodeGetType");
    *(void **)&node_params = gs_driver_sym("cuGraphMemAllocNodeGetParams");
    *(void **)&graph_attr = gs_driver_sym("cuDeviceGetGraphMemAttribute");
    *(void **)&graph_trim = gs_driver_sym("cuDeviceGraphMemTrim");
    *(void **)&ctx_dev = gs_driver_sym("cuCtxGetDevice");
}

int gs_graph_mem; /* 1 once a graph may hold memory here: launches look */

/* Under gmu: the executables with memory, each device's charge (held:
 * the reserve as last read, plus pending: what launches in flight were
 * charged ahead), and the devices in use (a bit each). */
struct exec { CUgraphExec x; uint64_t need[ND]; int launched; };
static struct exec *xs;
static size_t nx, capx;
static uint64_t held[ND], pending[ND], seen[ND];
static unsigned devs;
static pthread_mutex_t gmu = PTHREAD_MUTEX_INITIALIZER;

static int ord(int d) { return d < 0 ? 0 : d < ND ? d : ND - 1; }

static int current_dev(void)
{
    CUdevice d = 0;
    return ctx_dev && ctx_dev(&d) == CUDA_SUCCESS ? ord(d) : 0;
}

static int node_dev(const CUDA_MEM_ALLOC_NODE_PARAMS *p)
{
    return p->poolProps[2] == LOCATION_DEVICE ? ord(p->poolProps[3]) : current_dev();
}

static void uses(int d)
{
    pthread_mutex_lock(&gmu);
    devs |= 1u << d;
    pthread_mutex_unlock(&gmu);
    __atomic_store_n(&gs_graph_mem, 1, __ATOMIC_RELAXED);
}

/* Under gmu: device d's charge becomes its reserve plus what launches in
 * flight were charged ahead; a reserve that shrank (a trim) unmapped the
 * executables' memory, which their next launch maps again. */
static void settle_dev(int d)
{
    unsigned long long r = 0;
    if (!graph_attr || graph_attr(d, GRAPH_RESERVED_MEM_CURRENT, &r) != CUDA_SUCCESS)
        return; /* kept as it is */
    if (r < seen[d])
        for (size_t i = 0; i < nx; i++)
            if (xs[i].need[d])
                xs[i].launched = 0;
    seen[d] = r;
    uint64_t want = r + pending[d];
    if (want > held[d])
        gs_region_force_charge(want - held[d]);
    else
        gs_region_uncharge(held[d] - want);
    held[d] = want;
}

void gs_settle_graph(void)
{
    if (!__atomic_load_n(&gs_graph_mem, __ATOMIC_RELAXED) || !L.have_memory)
        return;
    pthread_mutex_lock(&gmu);
    for (int d = 0; d < ND; d++)
        if (devs & 1u << d)
            settle_dev(d);
    pthread_mutex_unlock(&gmu);
}

int gs_trim_graph(void)
{
    if (!__atomic_load_n(&gs_graph_mem, __ATOMIC_RELAXED) || !L.have_memory)
        return 0;
    int trimmed = 0;
    pthread_mutex_lock(&gmu);
    for (int d = 0; d < ND; d++) {
        if (!(devs & 1u << d))
            continue;
        uint64_t before = held[d];
        if (graph_trim)
            graph_trim(d);
        settle_dev(d);
        trimmed |= held[d] < before;
    }
    pthread_mutex_unlock(&gmu);
    return trimmed;
}

/* The graph's memory nodes, summed per device into need; -1 when the
 * driver cannot list them. */
static int graph_need(CUgraph g, uint64_t need[ND])
{
    memset(need, 0, ND * sizeof *need);
    size_t n = 0;
    if (!get_nodes || !node_type || !node_params || get_nodes(g, NULL, &n) != CUDA_SUCCESS)
        return -1;
    if (!n)
        return 0;
    CUgraphNode *v = malloc(n * sizeof *v);
    int rc = v && get_nodes(g, v, &n) == CUDA_SUCCESS ? 0 : -1;
    for (size_t i = 0; rc == 0 && i < n; i++) {
        int t;
        CUDA_MEM_ALLOC_NODE_PARAMS p;
        memset(&p, 0, sizeof p);
        if (node_type(v[i], &t) == CUDA_SUCCESS && t == NODE_MEM_ALLOC &&
            node_params(v[i], &p) == CUDA_SUCCESS)
            need[node_dev(&p)] += p.bytesize;
    }
    free(v);
    return rc;
}

static struct exec *find_exec(CUgraphExec x)
{
    for (size_t i = 0; i < nx; i++)
        if (xs[i].x == x)
            return &xs[i];
    return NULL;
}

/* The graph's total must fit now (a trim first if need be); then the
 * executable, when it has memory, is remembered. */
#define INSTANTIATE(exec, graph, call)                                        \
    do {                                                                      \
        if (!L.have_memory)                                                   \
            return (call);                                                    \
        pthread_once(&syms_once, load_syms);                                  \
        uint64_t need_[ND], tot_ = 0;                                         \
        if (graph_need((graph), need_) == 0) {                                \
            for (int d_ = 0; d_ < ND; d_++)                                   \
                tot_ += need_[d_];                                            \
        } else {                                                              \
            uses(current_dev()); /* unknown: its reserve is settled after */  \
        }                                                                     \
        if (tot_ && gs_charge(tot_) != CUDA_SUCCESS)                          \
            return CUDA_ERROR_OUT_OF_MEMORY;                                  \
        gs_uncharge(tot_);                                                    \
        CUresult r_ = (call);                                                 \
        if (r_ == CUDA_SUCCESS && tot_)                                       \
            remember(*(exec), need_);                                         \
        return r_;                                                            \
    } while (0)

static void remember(CUgraphExec x, const uint64_t need[ND])
{
    for (int d = 0; d < ND; d++)
        if (need[d])
            uses(d);
    pthread_mutex_lock(&gmu);
    /* no room: not followed, its reserve still settled after the fact */
    if (nx == capx) {
        size_t c = capx ? capx * 2 : 64;
        struct exec *p = realloc(xs, c * sizeof *xs);
        if (p) {
            xs = p;
            capx = c;
        }
    }
    if (nx < capx) {
        xs[nx].x = x;
        memcpy(xs[nx].need, need, sizeof xs[nx].need);
        xs[nx++].launched = 0;
    }
    pthread_mutex_unlock(&gmu);
}

EXPORT CUresult cuGraphInstantiateWithFlags(CUgraphExec *x, CUgraph g, unsigned long long flags)
{
    cuGraphInstantiateWithFlags_fn f = REAL(cuGraphInstantiateWithFlags);
    NEED(f);
    INSTANTIATE(x, g, f(x, g, flags));
}

EXPORT CUresult cuGraphInstantiate_v2(CUgraphExec *x, CUgraph g, CUgraphNode *err, char *log, size_t n)
{
    cuGraphInstantiate_v2_fn f = REAL(cuGraphInstantiate_v2);
    NEED(f);
    INSTANTIATE(x, g, f(x, g, err, log, n));
}

/* With CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD the driver maps the memory at
 * once: settled by the next charge. */
EXPORT CUresult cuGraphInstantiateWithParams(CUgraphExec *x, CUgraph g, void *params)
{
    cuGraphInstantiateWithParams_fn f = REAL(cuGraphInstantiateWithParams);
    NEED(f);
    INSTANTIATE(x, g, f(x, g, params));
}

EXPORT CUresult cuGraphInstantiateWithParams_ptsz(CUgraphExec *x, CUgraph g, void *params)
{
    cuGraphInstantiateWithParams_ptsz_fn f = REAL(cuGraphInstantiateWithParams_ptsz);
    NEED(f);
    INSTANTIATE(x, g, f(x, g, params));
}

/* Its memory stays in the device's reserve (settled) until a trim. */
EXPORT CUresult cuGraphExecDestroy(CUgraphExec x)
{
    cuGraphExecDestroy_fn f = REAL(cuGraphExecDestroy);
    NEED(f);
    if (__atomic_load_n(&gs_graph_mem, __ATOMIC_RELAXED)) {
        pthread_mutex_lock(&gmu);
        struct exec *e = find_exec(x);
        if (e)
            *e = xs[--nx];
        pthread_mutex_unlock(&gmu);
    }
    return f(x);
}

int gs_graph_launch_begin(void *x, uint64_t ahead[ND])
{
    if (!L.have_memory)
        return 0;
    uint64_t tot = 0;
    pthread_mutex_lock(&gmu);
    struct exec *e = find_exec(x);
    for (int d = 0; e && d < ND; d++) {
        if (e->need[d])
            settle_dev(d); /* a trim since unmapped it */
        ahead[d] = e->launched ? 0 : e->need[d];
        tot += ahead[d];
    }
    pthread_mutex_unlock(&gmu);
    if (!tot)
        return 0;
    if (gs_charge(tot) != CUDA_SUCCESS)
        return -1;
    pthread_mutex_lock(&gmu);
    for (int d = 0; d < ND; d++) {
        pending[d] += ahead[d];
        held[d] += ahead[d];
    }
    pthread_mutex_unlock(&gmu);
    return 1;
}

void gs_graph_launch_end(void *x, const uint64_t ahead[ND], CUresult r)
{
    pthread_mutex_lock(&gmu);
    struct exec *e = find_exec(x);
    if (e && r == CUDA_SUCCESS)
        e->launched = 1;
    for (int d = 0; d < ND; d++) {
        if (!ahead[d])
            continue;
        pending[d] -= ahead[d];
        settle_dev(d);
    }
    pthread_mutex_unlock(&gmu);
}

/* An upload maps the graph's memory as a launch does. */
#define UPLOAD(name)                                                          \
    EXPORT CUresult name(CUgraphExec x, CUstream s)                           \
    {                                                                         \
        name##_fn f = REAL(name);                                             \
        NEED(f);                                                              \
        uint64_t a[ND];                                                       \
        int t = __atomic_load_n(&gs_graph_mem, __ATOMIC_RELAXED) ? gs_graph_launch_begin(x, a) : 0; \
        if (t < 0)                                                            \
            return CUDA_ERROR_OUT_OF_MEMORY;                                  \
        CUresult r = f(x, s);                                                 \
        if (t)                                                                \
            gs_graph_launch_end(x, a, r);                                     \
        return r;                                                             \
    }
UPLOAD(cuGraphUpload)
UPLOAD(cuGraphUpload_ptsz)

/* The node alone must fit beside what is charged now: checked, not
 * charged (its graph's total is checked at instantiation, its memory
 * charged at a launch). */
EXPORT CUresult cuGraphAddMemAllocNode(CUgraphNode *node, CUgraph graph, const void *deps,
                                       size_t ndeps, CUDA_MEM_ALLOC_NODE_PARAMS *p)
{
    cuGraphAddMemAllocNode_fn f = REAL(cuGraphAddMemAllocNode);
    NEED(f);
    if (L.have_memory && p) {
        pthread_once(&syms_once, load_syms);
        if (gs_charge(p->bytesize) != CUDA_SUCCESS)
            return CUDA_ERROR_OUT_OF_MEMORY;
        gs_uncharge(p->bytesize);
    }
    return f(node, graph, deps, ndeps, p);
}

static void after_fork_child(void)
{
    xs = NULL; /* the parent's copy leaks in the child: fork-safe */
    nx = capx = 0;
    memset(held, 0, sizeof held);
    memset(pending, 0, sizeof pending);
    memset(seen, 0, sizeof seen);
    devs = 0;
    gs_graph_mem = 0;
    pthread_mutex_init(&gmu, NULL);
}

__attribute__((constructor)) static void graphmem_init(void)
{
    pthread_atfork(NULL, NULL, after_fork_child);
}
