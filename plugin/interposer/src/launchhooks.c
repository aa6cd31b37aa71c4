/* gpushare CUDA interposer: the exported kernel and graph launch hooks.
 * Each is a load of the task's launch mode and a tail call when the task
 * has no compute limit; otherwise its launch is paced or counted by
 * launch.c (gs_pace_before, gs_pace_after, gs_launch_produce). */
#define _GNU_SOURCE
#include "gpushare.h"
#include "launch.h"

#include <stdint.h>

#define EXPORT __attribute__((visibility("default")))

/* The launch API's own driver types (CUDA 12 cuda.h layouts, 64-bit). */
typedef void *CUfunction;
typedef void *CUgraphExec;
typedef struct CUlaunchAttribute_st CUlaunchAttribute; /* only passed through */
typedef struct {
    unsigned gridDimX, gridDimY, gridDimZ;
    unsigned blockDimX, blockDimY, blockDimZ;
    unsigned sharedMemBytes;
    CUstream hStream;
    CUlaunchAttribute *attrs;
    unsigned numAttrs;
} CUlaunchConfig;

typedef CUresult (*cuLaunchKernel_fn)(CUfunction, unsigned, unsigned, unsigned, unsigned,
                                      unsigned, unsigned, unsigned, CUstream, void **, void **);
typedef cuLaunchKernel_fn cuLaunchKernel_ptsz_fn;
typedef CUresult (*cuLaunchKernelEx_fn)(const CUlaunchConfig *, CUfunction, void **, void **);
typedef cuLaunchKernelEx_fn cuLaunchKernelEx_ptsz_fn;
typedef CUresult (*cuLaunchCooperativeKernel_fn)(CUfunction, unsigned, unsigned, unsigned,
                                                 unsigned, unsigned, unsigned, unsigned,
                                                 CUstream, void **);
typedef cuLaunchCooperativeKernel_fn cuLaunchCooperativeKernel_ptsz_fn;
typedef CUresult (*cuGraphLaunch_fn)(CUgraphExec, CUstream);
typedef cuGraphLaunch_fn cuGraphLaunch_ptsz_fn;
/* the legacy launches (the block shape set by cuFuncSetBlockShape) */
typedef CUresult (*cuLaunch_fn)(CUfunction);
typedef CUresult (*cuLaunchGrid_fn)(CUfunction, int, int);
typedef CUresult (*cuLaunchGridAsync_fn)(CUfunction, int, int, CUstream);

#define CU_STREAM_PER_THREAD ((CUstream)0x2)

/* A paced launch (graph: of a graph) on s; not paced when s is capturing:
 * nothing runs then (the graph's launches are paced, by what they run),
 * and event calls there would be recorded into the graph or invalidate it. */
#define PACED(graph, s, call)                                                   \
    do {                                                                        \
        if (gs_launch_capturing(s))                                             \
            return call;                                                        \
        struct pool *pl_;                                                       \
        int slot_;                                                              \
        uint64_t charged_;                                                      \
        struct gs_pacer *pc_;                                                   \
        gs_pace_before(s, graph, &pl_, &slot_, &charged_, &pc_);                \
        CUresult r_ = call;                                                     \
        gs_pace_after(s, graph, pl_, slot_, charged_, pc_, r_);                 \
        return r_;                                                              \
    } while (0)

/* One hook: the exported function is the whole path of a task without a
 * compute limit (a load of mode and of the real function, a tail call);
 * everything else is in name##_slow, kept out of line so the fast path
 * sets up no frame. A _ptsz variant's NULL stream is the per-thread
 * default stream, which the (legacy) event record names
 * CU_STREAM_PER_THREAD. */
#define LAUNCH_HOOK(name, ptsz, stream, params, args)                           \
    static __attribute__((noinline)) CUresult name##_run params                 \
    {                                                                           \
        int m = __atomic_load_n(&gs_launch_mode, __ATOMIC_ACQUIRE);             \
        if (m == M_UNSET)                                                       \
            m = gs_launch_setup();                                              \
        name##_fn real = (name##_fn)gs_hooks[H_##name].real;                    \
        if (!real)                                                              \
            return CUDA_ERROR_NOT_FOUND;                                        \
        if (m == M_PASS)                                                        \
            return real args;                                                   \
        if (m == M_PRODUCE) {                                                   \
            gs_launch_produce();                                                \
            return real args;                                                   \
        }                                                                       \
        CUstream s_ = (stream);                                                 \
        if ((ptsz) && s_ == NULL)                                               \
            s_ = CU_STREAM_PER_THREAD;                                          \
        PACED(GRAPH_##name, s_, real args);                                     \
    }                                                                           \
    /* a graph's memory is charged at its launch (graphmem.c) */               \
    static __attribute__((noinline)) CUresult name##_slow params                \
    {                                                                           \
        if (!GRAPH_##name || !__atomic_load_n(&gs_graph_mem, __ATOMIC_RELAXED)) \
            return name##_run args;                                             \
        uint64_t a_[GS_GRAPH_DEVS];                                             \
        int t_ = gs_graph_launch_begin(GS_FIRST args, a_);                      \
        if (t_ < 0)                                                             \
            return CUDA_ERROR_OUT_OF_MEMORY;                                    \
        CUresult r_ = name##_run args;                                          \
        if (t_)                                                                 \
            gs_graph_launch_end(GS_FIRST args, a_, r_);                         \
        return r_;                                                              \
    }                                                                           \
    EXPORT CUresult name params                                                 \
    {                                                                           \
        name##_fn real = (name##_fn)gs_hooks[H_##name].real;                    \
        if (__builtin_expect(__atomic_load_n(&gs_launch_mode, __ATOMIC_ACQUIRE) == M_PASS && real && \
                             !(GRAPH_##name && __atomic_load_n(&gs_graph_mem, __ATOMIC_RELAXED)), 1)) \
            return real args;                                                   \
        return name##_slow args;                                                \
    }
/* the first argument: a graph launch's executable */
#define GS_FIRST(a, ...) ((void *)(uintptr_t)(a))

/* which hooks launch graphs */
enum { GRAPH_cuLaunchKernel = 0, GRAPH_cuLaunchKernel_ptsz = 0, GRAPH_cuLaunchKernelEx = 0,
       GRAPH_cuLaunchKernelEx_ptsz = 0, GRAPH_cuLaunchCooperativeKernel = 0,
       GRAPH_cuLaunchCooperativeKernel_ptsz = 0, GRAPH_cuGraphLaunch = 1, GRAPH_cuGraphLaunch_ptsz = 1,
       GRAPH_cuLaunch = 0, GRAPH_cuLaunchGrid = 0, GRAPH_cuLaunchGridAsync = 0 };

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
LAUNCH_HOOK(cuGraphLaunch, 0, hs, (CUgraphExec g, CUstream hs), (g, hs))
LAUNCH_HOOK(cuGraphLaunch_ptsz, 1, hs, (CUgraphExec g, CUstream hs), (g, hs))
/* the legacy launches: cuLaunch and cuLaunchGrid run on the NULL stream */
LAUNCH_HOOK(cuLaunch, 0, NULL, (CUfunction f), (f))
LAUNCH_HOOK(cuLaunchGrid, 0, NULL, (CUfunction f, int gw, int gh), (f, gw, gh))
LAUNCH_HOOK(cuLaunchGridAsync, 0, hs, (CUfunction f, int gw, int gh, CUstream hs), (f, gw, gh, hs))
