/* Included by testdata/fakevmm.c (one translation unit with fakecuda.c:
 * it shares the fake device memory, `used`, `total`, `peak` and `mu`).
 * Graph memory as the driver documents it: a memory node's physical
 * memory comes from its device's graph pool when its graph is launched,
 * stays for later launches, and cuDeviceGraphMemTrim gives back what no
 * executing graph uses. */

/* ---- graph memory --------------------------------------------------------- */

typedef struct {
    int poolProps[22]; /* CUmemPoolProps: allocType, handleTypes, location {type, id}, ... */
    const void *accessDescs;
    size_t accessDescCount;
    size_t bytesize;
    CUdeviceptr dptr; /* out */
} MEM_ALLOC_NODE_PARAMS;

/* Each device's graph pool (CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT); the
 * fake's devices share its memory (total, used). */
#define MAXN 1024
#define GDEVS 8
static struct { void *graph; uint64_t bytes; int backed, dev; } gnodes[MAXN];
static int ngnodes;
static uint64_t graph_reserved[GDEVS];

/* Under mu: a node of bytes on dev in graph, its virtual address in *va. */
static CUresult add_node(void *graph, uint64_t bytes, int dev, CUdeviceptr *va)
{
    if (ngnodes == MAXN)
        return 2;
    gnodes[ngnodes].graph = graph;
    gnodes[ngnodes].bytes = bytes;
    gnodes[ngnodes].backed = 0;
    gnodes[ngnodes++].dev = dev;
    *va = next_va; /* virtual only, until a launch */
    next_va += (bytes + (2u << 20) - 1) / (2u << 20) * (2u << 20);
    return 0;
}

/* The node's device: its pool's location (CU_MEM_LOCATION_TYPE_DEVICE, 1),
 * else the current context's. */
CUresult cuGraphAddMemAllocNode(void **node, void *graph, const void *deps, size_t ndeps,
                                MEM_ALLOC_NODE_PARAMS *p)
{
    (void)deps;
    (void)ndeps;
    if (!node || !p || !p->bytesize)
        return 1;
    int dev = p->poolProps[2] == 1 ? p->poolProps[3] : fakecap_current_device();
    if (dev < 0 || dev >= ndevices())
        return 101;
    pthread_mutex_lock(&mu);
    CUresult r = add_node(graph, p->bytesize, dev, &p->dptr);
    if (!r)
        *node = (void *)(uintptr_t)(0x100000 + ngnodes - 1);
    pthread_mutex_unlock(&mu);
    return r;
}

/* Under mu, from the pools' allocations (fakevmm.c): an allocation on a
 * stream being captured is not made, it becomes a memory node of the
 * capture's graph, on the current device (*captured: 1). */
static CUresult captured_alloc(void *s, size_t n, CUdeviceptr *out, int *captured)
{
    struct fstream *st = s ? own(s) : NULL;
    *captured = st && st->cap == CAP_ACTIVE;
    if (!*captured)
        return 0;
    if (!out || !n)
        return 1;
    return add_node(st->g, n, fakecap_current_device(), out);
}

/* A free node returns memory to the graph pool, which keeps it reserved. */
CUresult cuGraphAddMemFreeNode(void **node, void *graph, const void *deps, size_t ndeps,
                               CUdeviceptr dptr)
{
    (void)graph;
    (void)deps;
    (void)ndeps;
    (void)dptr;
    *node = (void *)(uintptr_t)0x200000;
    return 0;
}

/* A graph's nodes: here its memory nodes (its kernels are not nodes in
 * the fake). nodes NULL: their count. */
CUresult cuGraphGetNodes(void *graph, void **nodes, size_t *n)
{
    if (!graph || !n)
        return 1;
    size_t k = 0;
    pthread_mutex_lock(&mu);
    for (int i = 0; i < ngnodes; i++) {
        if (gnodes[i].graph != graph)
            continue;
        if (nodes && k < *n)
            nodes[k] = (void *)(uintptr_t)(0x100000 + i);
        k++;
    }
    pthread_mutex_unlock(&mu);
    *n = k;
    return 0;
}

static int gnode_of(void *node)
{
    uintptr_t i = (uintptr_t)node - 0x100000;
    return i < (uintptr_t)ngnodes ? (int)i : -1;
}

/* CU_GRAPH_NODE_TYPE_MEM_ALLOC is 10. */
CUresult cuGraphNodeGetType(void *node, int *type)
{
    if (!type || gnode_of(node) < 0)
        return 1;
    *type = 10;
    return 0;
}

CUresult cuGraphMemAllocNodeGetParams(void *node, MEM_ALLOC_NODE_PARAMS *p)
{
    int i = gnode_of(node);
    if (!p || i < 0)
        return 1;
    memset(p, 0, sizeof *p);
    p->poolProps[0] = 1; /* pinned */
    p->poolProps[2] = 1; /* on a device */
    p->poolProps[3] = gnodes[i].dev;
    p->bytesize = gnodes[i].bytes;
    return 0;
}

/* Not a driver call: what a launch of graph does to memory, called by
 * testdata/fakecapture.c's cuGraphLaunch. Maps its allocation nodes'
 * memory from each one's device's graph pool, which grows from the device
 * (CUDA_ERROR_OUT_OF_MEMORY when the device cannot); once mapped, later
 * launches reuse it, until a trim gives it back. */
CUresult fakevmm_graph_launch(void *graph)
{
    uint64_t need = 0;
    CUresult r = 0;
    pthread_mutex_lock(&mu);
    init_total();
    for (int i = 0; i < ngnodes; i++)
        if (gnodes[i].graph == graph && !gnodes[i].backed)
            need += gnodes[i].bytes;
    if (need > total - used) {
        r = 2;
    } else {
        for (int i = 0; i < ngnodes; i++) {
            if (gnodes[i].graph == graph && !gnodes[i].backed) {
                gnodes[i].backed = 1;
                graph_reserved[gnodes[i].dev] += gnodes[i].bytes;
            }
        }
        used += need;
        peak = used > peak ? used : peak;
    }
    pthread_mutex_unlock(&mu);
    return r;
}

/* CUgraphMem_attribute: 0 used, 2 reserved (current); everything the pool
 * holds is mapped to some graph here. */
CUresult cuDeviceGetGraphMemAttribute(int dev, int attr, void *v)
{
    if (dev < 0 || dev >= ndevices() || !v)
        return 1;
    pthread_mutex_lock(&mu);
    *(uint64_t *)v = attr == 0 || attr == 2 ? graph_reserved[dev] : 0;
    pthread_mutex_unlock(&mu);
    return 0;
}

/* Gives the device's graph memory not in use by a graph executing or
 * scheduled back (the driver's rule): all of it here, where a graph's
 * memory is done with when its launch returns; its next launch maps it
 * again. */
CUresult cuDeviceGraphMemTrim(int dev)
{
    if (dev < 0 || dev >= ndevices())
        return 1;
    pthread_mutex_lock(&mu);
    for (int i = 0; i < ngnodes; i++)
        if (gnodes[i].dev == dev)
            gnodes[i].backed = 0;
    used -= graph_reserved[dev];
    graph_reserved[dev] = 0;
    pthread_mutex_unlock(&mu);
    return 0;
}
