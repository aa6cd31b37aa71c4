/* gpushare CUDA interposer: declarations shared by its two source files.
 * Internal header; nothing here is an API for tasks. */
#ifndef GPUSHARE_H
#define GPUSHARE_H

#include "glibc_compat.h" /* first: the glibc versions the library asks for */

#include <stddef.h>
#include <stdint.h>

/* The driver types every hook needs (no CUDA headers): 64-bit ABI. */
typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef void *CUstream;

enum {
    CUDA_SUCCESS = 0,
    CUDA_ERROR_OUT_OF_MEMORY = 2,
    CUDA_ERROR_NOT_INITIALIZED = 3,
    CUDA_ERROR_NOT_FOUND = 500,
};

/* The task's class (gpushare.class): production is never paced; an
 * opportunistic task is paced by the TGS loop. */
enum gs_class { GS_CLASS_NORMAL = 0, GS_CLASS_PRODUCTION, GS_CLASS_OPPORTUNISTIC };

/* The reservation's limits, read once at load from the limits file. */
struct gs_limits {
    int have_memory;        /* memory_bytes present: allocations are capped */
    uint64_t memory_bytes;  /* the reservation's memory, summed over its processes */
    int compute_pct;        /* the share of GPU time, percent (100: not paced) */
    char klass[32];         /* production | opportunistic | "" (hooks.c: class_of) */
    enum gs_class klass_id;
    int unified;                  /* unified_memory=1: see unified.c */
    uint64_t unified_extra_bytes; /* what an opportunistic task may hold beyond the cap */
    uint64_t context_bytes; /* charged to each process that uses the driver: its context */
    uint64_t timeslice_id;  /* the reservation in its GPU's time-slice rotation (slice.c) */
    int whole_gpus;         /* whole GPUs the reservation holds (0: a fraction; compose.c) */
    int turn_set;           /* turn_ms present */
    uint64_t turn_ms;       /* capped tasks side by side take turns of a round this long (slice.c); 0: they do not */
};

/* A task's GPUs put back together from its merged reservations (compose.c):
 * the plugin's Reserve sets GS_ENV_GPU_PREFIX<NVML index>=<UUID> and
 * GS_ENV_GPU_PREFIX<index>GS_ENV_GPU_SHARES_SUFFIX=<shares> (plugin/reserve.go,
 * EnvGPUPrefix and EnvGPUSharesSuffix). gs_compose runs once, at load, before
 * any driver call; gs_composed is the number of GPUs it composed (0: none). */
#define GS_ENV_GPU_PREFIX "GPUSHARE_GPU_"
#define GS_ENV_GPU_SHARES_SUFFIX "_SHARES"
void gs_compose(void);
extern int gs_composed;

/* Parses the key=value limits file at path. Returns 0 on success, -1 when the
 * file cannot be read or a line is malformed (the caller then fails closed). */
int gs_limits_read(const char *path, struct gs_limits *out);
/* A whole decimal number (digits only) into *out; -1 when s is empty,
 * holds anything else, or overflows (limits.c). */
int gs_parse_u64(const char *s, unsigned long long *out);

/* The usage region shared by the reservation's processes (region.c): the
 * layout of the file "usage", here so a test can hold its lock. */
#include <pthread.h>

#include "pace.h"

#define GS_MAGIC 0x67737234u /* "gsr4": per-device charges and pacers */
#define GS_SLOTS 1024
#define GS_DEVS 8 /* devices of a task told apart: more share the task's own entry */

struct gs_slot {
    int32_t pid;    /* 0: free */
    uint32_t locked; /* 1: the process holds an fcntl write lock on this slot's bytes */
    uint64_t start; /* /proc/<pid>/stat starttime: tells a reused pid apart */
    uint64_t bytes;
};

struct gs_region {
    uint32_t magic;
    uint32_t nslots;
    pthread_mutex_t lock;
    uint64_t total;   /* the sum of the slots' bytes, kept so a charge is O(1) */
    uint32_t hiwater; /* slots at or above this index were never used */
    uint32_t pacer_ready; /* pacer initialised (by the first paced launch) */
    /* The task's compute pacer, shared by its processes (src/launch.c):
     * the share is the task's, not each process's. Under lock. */
    struct gs_pacer pacer;
    /* The task's devices (issue 29, 6 and 9d), each named by its UUID
     * (cuDeviceGetUuid, NVML's "GPU-..."), in the order first used: what
     * is charged on each (the sum of the slots' dev_bytes) and each one's
     * pacer, so a task with shares of two GPUs gets its share of each. */
    uint32_t ndev, dev_pad;
    struct gs_device {
        uint8_t uuid[16];
        uint64_t bytes;
        struct gs_pacer pacer;
        uint32_t pacer_ready, pad;
    } dev[GS_DEVS];
    uint64_t dev_bytes[GS_SLOTS][GS_DEVS]; /* each slot's charges, per device */
    struct gs_slot slot[GS_SLOTS]; /* last: the plugin reads them from the end */
};


int gs_region_open(const char *path);          /* 0 ok, -1 unusable */
/* The usage file for path (<dir>/usage), opened read-write, created if
 * absent (regionfile.c); -1 with a line on stderr when it cannot be. */
int gs_region_file(const char *path);
/* The task's shared pacer, initialised with share and window by its first
 * user; NULL without a region. Use it between gs_region_lock (0: held)
 * and gs_region_unlock. */
struct gs_pacer *gs_region_pacer(uint32_t share, uint64_t window_ns, uint64_t now);
int gs_region_lock(void);
void gs_region_unlock(void);
int gs_region_charge(uint64_t bytes, uint64_t cap); /* 0 charged, -1 over the cap */
void gs_region_uncharge(uint64_t bytes);
void gs_region_force_charge(uint64_t bytes);   /* after the fact: pitch rounding */
uint64_t gs_region_used(void);                 /* the reservation's use, dead reclaimed */
/* The task's device of the current context (its index in the region's
 * table, added when new), or -1 (no context, no region, a full table). */
int gs_region_current_device(void);
/* Device dev's pacer (dev from gs_region_current_device), initialised as
 * gs_region_pacer's; NULL without a region or dev < 0. */
struct gs_pacer *gs_region_device_pacer(int dev, uint32_t share, uint64_t window_ns, uint64_t now);
/* The use of the device named by uuid (16 bytes): what is charged on it,
 * and what is charged on the task's other devices (dead reclaimed);
 * charges of no known device (a process's context) count as the
 * device's. */
void gs_region_device_use(const uint8_t uuid[16], uint64_t *here, uint64_t *elsewhere);
void gs_region_claim(void); /* this process's slot, with its context's charge, now */

/* Process-local record of what each live allocation was charged, so a free
 * returns exactly that (region.c). Kinds keep a device pointer, a cuMemCreate
 * handle and a CUarray apart even if their numeric values coincide. */
enum gs_kind { GS_PTR = 1, GS_HANDLE = 2, GS_ARRAY = 3, GS_MIPMAP = 4,
               GS_POOLPTR = 5 /* a pool's allocation: the record holds its pool */ };
int gs_track_add(enum gs_kind kind, uint64_t key, uint64_t bytes); /* 0 ok, -1 no memory */
int gs_track_remove(enum gs_kind kind, uint64_t key, uint64_t *bytes); /* 0 found */

/* Charging (gpushare_cuda.c): gs_charge is CUDA_SUCCESS or
 * CUDA_ERROR_OUT_OF_MEMORY; over the cap it trims the pools first. What the
 * driver keeps after a free (vmm.c): pools' reserve, settled into the
 * charge, trimmed on the way to a refusal (1: something was given back). */
CUresult gs_charge(uint64_t bytes);
void gs_uncharge(uint64_t bytes);
void gs_settle_reserved(void);
int gs_trim_reserved(void);
/* Graph memory (graphmem.c): each device's graph reserve settled into the
 * charge (cheap when this process never had any), trimmed (1: something
 * was given back); a graph launch's charge ahead (graph launches only,
 * when gs_graph_mem: 1 a charge was taken, 0 none needed, -1 refused) and
 * its settle after. */
void gs_settle_graph(void);
int gs_trim_graph(void);
extern int gs_graph_mem;
#define GS_GRAPH_DEVS 8
int gs_graph_launch_begin(void *exec, uint64_t ahead[GS_GRAPH_DEVS]);
void gs_graph_launch_end(void *exec, const uint64_t ahead[GS_GRAPH_DEVS], CUresult r);
CUresult gs_pool_free(CUdeviceptr p, CUresult r, uint64_t pool);

/* Time-slicing (slice.c; README, "Time-slicing"): the GPU's rotation, the
 * file "slice" the plugin makes per GPU (plugin/slice.go reads it: keep
 * the layout in step). Members are reservations. */
#define GS_SLICE_MAGIC 0x67737473u /* "gsts" */
#define GS_SLICE_VERSION 1
#define GS_SLICE_FILE_SIZE 4096
#define GS_SLICE_MEMBERS 48
struct gs_slice_member { /* 64 bytes */
    uint64_t id;            /* the reservation's timeslice_id; 0: free */
    uint32_t share, flags;  /* its compute cap, permille; GS_SLICE_CAPPED */
    uint64_t quantum_ns;    /* the quantum its task was given */
    uint64_t seen_ns;       /* its latest launch or ask: present while recent */
    uint64_t want_since_ns; /* when its present wait for a turn began; 0: none */
    uint64_t suspended_ns;  /* time its launches waited for their turn, in all */
    uint64_t turns;         /* turns it was given */
    uint64_t active_ns;     /* its latest launch in its turn: idle holders lose it */
};
struct gs_slice {
    uint32_t magic, version;
    uint32_t init, holder; /* init: 2 once the mutex is made; holder: member + 1, 0 none */
    uint64_t turn_end_ns, turns;
    union {
        pthread_mutex_t mu; /* robust, process-shared */
        char pad[64];
    } lock;
    struct gs_slice_member m[GS_SLICE_MEMBERS]; /* at offset 96 */
};
#define GS_SLICE_CAPPED 1u /* a capped task taking turns side by side (gs_turns_open), not time-sliced */
/* From GPUSHARE_TIMESLICE_QUANTUM_MS at load (hooks.c), clamped; 0: the
 * task is not time-sliced. */
extern uint64_t gs_slice_quantum_ns;
void gs_slice_env(const char *value); /* sets it from the variable's value */
/* Maps <gs_dir>/slice: 0, or -1 with a line on stderr. */
int gs_slice_open(void);
/* A capped task (compute_pct < 100, not time-sliced) joins its GPU's
 * rotation to take turns with the other capped tasks there (slice.c, "Side
 * by side"): 0, or -1 (no rotation, or turn_ms=0), silently: it is then
 * paced on its own, as before. */
int gs_turns_open(void);
/* The task's turn, as gs_slice_turn finds it. */
struct gs_turn {
    uint32_t pool; /* the pool's share, permille */
    int resumed;   /* 1 at this process's first launch of a new turn */
    uint64_t left; /* what is left of the turn, ns */
    uint64_t ask;  /* the holder asks again within this, or it looks idle */
};
/* At a launch: 0 when it is the task's turn (*t filled) or when the task
 * has no place in the rotation (*t left as it was), else how long to wait
 * before asking again. */
uint64_t gs_slice_turn(uint64_t now, struct gs_turn *t);

/* ---- the hook table (hooks.c) ----------------------------------------
 * Each intercepted driver symbol, with our hook and the real function. A
 * hook in any source file finds its real function with GS_REAL(name),
 * given a typedef name##_fn; the driver is loaded at the first use. */

/* Every intercepted symbol, once. The _ptsz variants are what
 * cuGetProcAddress hands out under per-thread default streams. */
#define GS_HOOKS(X)                                                         \
    X(cuMemAlloc_v2) X(cuMemAllocPitch_v2) X(cuMemAllocManaged)             \
    X(cuMemAllocAsync) X(cuMemAllocAsync_ptsz) X(cuMemAllocFromPoolAsync)   \
    X(cuMemAllocFromPoolAsync_ptsz) X(cuMemCreate) X(cuArrayCreate_v2)      \
    X(cuArray3DCreate_v2) X(cuMemFree_v2) X(cuMemFreeAsync)                 \
    X(cuMemFreeAsync_ptsz) X(cuMemRelease) X(cuArrayDestroy)                \
    X(cuMemGetInfo_v2) X(cuDeviceTotalMem_v2) X(cuGetProcAddress)           \
    X(cuGetProcAddress_v2) X(cuMemMap) X(cuMemUnmap)                        \
    X(cuMemRetainAllocationHandle) X(cuMemImportFromShareableHandle)        \
    X(cuGraphAddMemAllocNode) X(cuGraphInstantiateWithFlags)                \
    X(cuGraphInstantiate_v2) X(cuGraphInstantiateWithParams)                \
    X(cuGraphInstantiateWithParams_ptsz) X(cuGraphExecDestroy)              \
    X(cuGraphUpload) X(cuGraphUpload_ptsz)                                  \
    X(cuMipmappedArrayCreate) X(cuMipmappedArrayDestroy)                   \
    X(cuLaunchKernel) X(cuLaunchKernel_ptsz) X(cuLaunchKernelEx)            \
    X(cuLaunchKernelEx_ptsz) X(cuLaunchCooperativeKernel)                   \
    X(cuLaunchCooperativeKernel_ptsz) X(cuGraphLaunch) X(cuGraphLaunch_ptsz) \
    X(cuLaunch) X(cuLaunchGrid) X(cuLaunchGridAsync)

#define GS_X_ENUM(n) H_##n,
enum { GS_HOOKS(GS_X_ENUM) H_COUNT };

struct gs_hook {
    const char *name;
    void *hook; /* ours */
    void *real; /* the driver's, NULL when it lacks the symbol */
};
/* The table (hooks.c): names and our hooks are constants; .real is written
 * once, by gs_load_driver. */
extern struct gs_hook gs_hooks[H_COUNT];

/* The reservation's limits, read once at load (hooks.c). */
extern struct gs_limits gs_lim;
/* The reservation's directory ("" when not under gpushare). */
extern char gs_dir[4096];
/* Loads the real driver and resolves every .real, once; cheap after that. */
void gs_load_driver(void);
#define GS_REAL(n) ((n##_fn)(gs_load_driver(), gs_hooks[H_##n].real))
/* The hook standing for a real driver function, or p itself. */
void *gs_to_hook(void *p);
/* A driver function we call but do not stand in front of (cuMemAdvise):
 * the real driver's, or NULL. Loads the driver; not for hot paths. */
void *gs_driver_sym(const char *name);
/* glibc's dlsym (ours answers with hooks): for nvml.c's own lookups. */
void *gs_real_dlsym(void *handle, const char *name);
/* Opens the reservation's usage region, once (a process that only asks
 * NVML never loads the driver, but must see the reservation's use). */
void gs_load_region(void);

/* Unified memory (unified.c): whether this task's device allocations become
 * managed memory, and those allocations. cuMemAllocManaged lives there. */
int gs_unified_converts(void);
CUresult gs_unified_alloc(CUdeviceptr *dptr, size_t n);
CUresult gs_unified_pitch(CUdeviceptr *dptr, size_t *pitch, size_t w, size_t h, unsigned elem);

/* NVML (nvml.c): the hook for an intercepted nvml* name, or NULL. */
void *gs_nvml_hook(const char *name);

#endif
