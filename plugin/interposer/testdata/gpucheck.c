/* gpucheck: the driver-API program of `make gpu-check` (gpucheck_test.go).
 * It finds the driver as the CUDA runtime does (dlopen("libcuda.so.1") and
 * dlsym from the handle, which the interposer answers), so the same program
 * runs over NVIDIA's real driver on a GPU and over the fake driver of the
 * tests (testdata/fakecuda.c), where its report is tested in CI.
 *
 * Kernels: on a real driver, a PTX kernel (below) loaded with
 * cuModuleLoadData, so no nvcc is needed: a chain of dependent FMAs whose
 * length is calibrated to the wanted run time. On the fake driver (which
 * exports fakecuda_busy_ns) the fake's "k<us>" kernels.
 *
 * Commands, one output line each:
 *   info            "info <rc> <total> <free> <device total> <name>"
 *   fill:MIB[:MIN]  allocate MIB MiB chunks until refused, then (MIN given)
 *                   halve the chunk at each refusal down to MIN MiB:
 *                   "fill <rc of the last refusal> <bytes got>"
 *   take:MIB        one allocation of MIB MiB: "take <rc> <bytes got>"
 *   hold:MS         sleep MS ms, keeping what was got ("hold 0")
 *   calib:US        the kernel of about US µs: "calib <rc> <N> <alone ns>",
 *                   N its iterations (the fake's: US), alone ns its GPU
 *                   time measured alone (run it without a compute cap:
 *                   under one, the events around a kernel also span the
 *                   pacer's wait before it)
 *   spin:N:MS[:SKIP[:GAP[:DEPTH]]]  kernels of N (from calib) for MS ms,
 *                   two in flight (DEPTH launched, then waited for: a deep
 *                   queue, as a framework's), or with GAP µs of host time (a
 *                   sleep) after each kernel one at a time: "spin <rc> <kernels> <wall
 *                   ns>", the kernels finished and the time after the first
 *                   SKIP ms; the work done is kernels x alone ns
 *   capture:N:K     on a stream of its own, a capture in global mode
 *                   (cuStreamBeginCapture_v2) of K launches of N, then
 *                   cuStreamEndCapture and cuGraphInstantiateWithFlags:
 *                   "capture <rc>" (the first failure's)
 *   replay:MS[:SKIP]  launches of that graph (cuGraphLaunch) on its stream,
 *                   two in flight, for MS ms: "replay <rc> <replays> <wall
 *                   ns>" after the first SKIP ms
 *   launchbench:C   C launches of the shortest kernel (the fake's k0; on a
 *                   GPU, one iteration), in batches of 256 each waited for
 *                   untimed: "launchbench <rc> <ns per launch>", the host
 *                   time in cuLaunchKernel
 *   allocbench:C    C pairs of cuMemAlloc_v2 (1 MiB) and cuMemFree_v2:
 *                   "allocbench <rc> <ns per pair>"
 * Exit 4 when the driver cannot be initialised ("init <rc>" first). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef int CUresult;

static const char ptx[] =
    ".version 6.0\n"
    ".target sm_50\n"
    ".address_size 64\n"
    ".visible .entry spin(.param .u64 n, .param .u64 out)\n"
    "{\n"
    "  .reg .pred %p;\n"
    "  .reg .b64 %rd<5>;\n"
    "  .reg .f32 %f<2>;\n"
    "  ld.param.u64 %rd1, [n];\n"
    "  ld.param.u64 %rd2, [out];\n"
    "  mov.u64 %rd3, 0;\n"
    "  mov.f32 %f1, 0f3F800000;\n"
    "LOOP:\n"
    "  fma.rn.f32 %f1, %f1, 0f3F7FFFFF, 0f3A83126F;\n"
    "  add.u64 %rd3, %rd3, 1;\n"
    "  setp.lt.u64 %p, %rd3, %rd1;\n"
    "  @%p bra LOOP;\n"
    "  cvta.to.global.u64 %rd4, %rd2;\n"
    "  st.global.f32 [%rd4], %f1;\n"
    "  ret;\n"
    "}\n";

static struct {
    CUresult (*init)(unsigned);
    CUresult (*devget)(int *, int);
    CUresult (*name)(char *, int, int);
    CUresult (*ctx)(void **, unsigned, int);
    CUresult (*alloc)(unsigned long long *, size_t);
    CUresult (*info)(size_t *, size_t *);
    CUresult (*total)(size_t *, int);
    CUresult (*modload)(void **, const void *);
    CUresult (*getfn)(void **, void *, const char *);
    CUresult (*launch)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                       void *, void **, void **);
    CUresult (*evcreate)(void **, unsigned);
    CUresult (*evrecord)(void *, void *);
    CUresult (*evsync)(void *);
    CUresult (*elapsed)(float *, void *, void *);
    CUresult (*sync)(void);
    CUresult (*free)(unsigned long long);
    /* stream capture and graphs: looked up when used */
    CUresult (*stream)(void **, unsigned);
    CUresult (*begin)(void *, int);
    CUresult (*end)(void *, void **);
    CUresult (*inst)(void **, void *, unsigned long long);   /* cuGraphInstantiateWithFlags */
    CUresult (*inst_v2)(void **, void *, void *, char *, size_t); /* before CUDA 11.4 */
    CUresult (*glaunch)(void *, void *);
} cu;

static void *lib;

static void *sym(const char *n, int need)
{
    void *f = dlsym(lib, n);
    if (!f && need) {
        fprintf(stderr, "gpucheck: the driver has no %s\n", n);
        exit(3);
    }
    return f;
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int fake;          /* the tests' fake driver */
static void *mod, *ev0, *ev1;
static unsigned long long out_buf;
static void *strm, *gexec; /* capture's stream and graph */

/* One kernel of n iterations (or the fake's f), waited for; its GPU time. */
static CUresult timed(void *f, unsigned long long n, double *ms)
{
    void *params[] = {&n, &out_buf};
    float t = 0;
    CUresult r = cu.evrecord(ev0, NULL);
    if (!r)
        r = cu.launch(f, 1, 1, 1, 1, 1, 1, 0, NULL, fake ? NULL : params, NULL);
    if (!r)
        r = cu.evrecord(ev1, NULL);
    if (!r)
        r = cu.evsync(ev1);
    if (!r)
        r = cu.elapsed(&t, ev0, ev1);
    *ms = t;
    return r;
}

/* The function of kernels of n: the fake's k<n>, else spin. */
static CUresult function(unsigned long long n, void **f)
{
    if (fake) {
        char name[32];
        snprintf(name, sizeof name, "k%llu", n);
        return cu.getfn(f, mod, name);
    }
    return cu.getfn(f, mod, "spin");
}

/* The kernel of about us µs: the fake's by name; on a GPU, spin with an
 * iteration count found by doubling and then scaling to the measured time. */
static CUresult kernel(unsigned long long us, void **f, unsigned long long *n)
{
    *n = us;
    CUresult r = function(us, f);
    if (fake)
        return r;
    double ms = 0;
    unsigned long long k = 1024;
    while (!r && (r = timed(*f, k, &ms)) == 0 && ms < 2 && k < (1ull << 40))
        k *= 2;
    if (!r && ms > 0)
        k = (unsigned long long)((double)k * ((double)us / 1000.0) / ms) + 1;
    *n = k;
    return r;
}

/* One launch of f (kernels of n) on s. */
static CUresult launch1(void *f, unsigned long long *n, void *s)
{
    void *params[] = {n, &out_buf};
    return cu.launch(f, 1, 1, 1, 1, 1, 1, 0, s, fake ? NULL : params, NULL);
}

/* What the kernels need: the module, two events, a word of output. */
static CUresult prepare(void)
{
    CUresult r = mod ? 0 : cu.modload(&mod, ptx);
    if (!r && !ev0)
        r = cu.evcreate(&ev0, 0) || cu.evcreate(&ev1, 0);
    if (!r && !out_buf)
        r = cu.alloc(&out_buf, 4);
    return r;
}

static void sleep_ns(uint64_t ns)
{
    struct timespec ts = {(time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull)};
    nanosleep(&ts, NULL);
}

/* The window of spin and replay: what was done after skip ms of ms. */
struct window {
    uint64_t t0, from, end, w0, done;
};

static void window_start(struct window *w, unsigned long long ms, unsigned long long skip)
{
    w->t0 = now_ns();
    w->from = w->t0 + skip * 1000000ull;
    w->end = w->t0 + ms * 1000000ull;
    w->w0 = skip ? 0 : w->t0;
    w->done = 0;
}

/* n more finished; 1 while the window runs. */
static int window_count(struct window *w, unsigned long long n)
{
    uint64_t t = now_ns();
    if (w->w0)
        w->done += n;
    else if (t >= w->from)
        w->w0 = t;
    return t < w->end;
}

static void window_print(const char *what, CUresult r, struct window *w)
{
    uint64_t t = now_ns();
    printf("%s %d %llu %llu\n", what, r, (unsigned long long)w->done,
           (unsigned long long)(w->w0 ? t - w->w0 : 0));
}

static void *need(const char *n)
{
    void *f = dlsym(lib, n);
    if (!f)
        fprintf(stderr, "gpucheck: the driver has no %s\n", n);
    return f;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    lib = dlopen("libcuda.so.1", RTLD_NOW);
    if (!lib) {
        printf("init -1 %s\n", dlerror());
        return 4;
    }
    *(void **)&cu.init = sym("cuInit", 1);
    *(void **)&cu.devget = sym("cuDeviceGet", 1);
    *(void **)&cu.name = sym("cuDeviceGetName", 0);
    *(void **)&cu.ctx = sym("cuCtxCreate_v2", 1);
    *(void **)&cu.alloc = sym("cuMemAlloc_v2", 1);
    *(void **)&cu.free = sym("cuMemFree_v2", 1);
    *(void **)&cu.info = sym("cuMemGetInfo_v2", 1);
    *(void **)&cu.total = sym("cuDeviceTotalMem_v2", 1);
    *(void **)&cu.modload = sym("cuModuleLoadData", 1);
    *(void **)&cu.getfn = sym("cuModuleGetFunction", 1);
    *(void **)&cu.launch = sym("cuLaunchKernel", 1);
    *(void **)&cu.evcreate = sym("cuEventCreate", 1);
    *(void **)&cu.evrecord = sym("cuEventRecord", 1);
    *(void **)&cu.evsync = sym("cuEventSynchronize", 1);
    *(void **)&cu.elapsed = sym("cuEventElapsedTime", 1);
    *(void **)&cu.sync = sym("cuCtxSynchronize", 1);
    fake = dlsym(lib, "fakecuda_busy_ns") != NULL;

    int dev = 0;
    void *ctx;
    CUresult r = cu.init(0);
    if (!r)
        r = cu.devget(&dev, 0);
    if (!r)
        r = cu.ctx(&ctx, 0, dev);
    if (r) {
        printf("init %d\n", r);
        return 4;
    }
    for (int i = 1; i < argc; i++) {
        char *c = argv[i], *arg = strchr(c, ':');
        unsigned long long a = 0, b = 0, x = 0, y = 0, z = 0;
        if (arg)
            sscanf(arg + 1, "%llu:%llu:%llu:%llu:%llu", &a, &b, &x, &y, &z);
        if (strcmp(c, "info") == 0) {
            size_t fr = 0, tot = 0, dt = 0;
            char name[256] = "unknown";
            r = cu.info(&fr, &tot);
            if (!r)
                r = cu.total(&dt, dev);
            if (cu.name)
                cu.name(name, sizeof name, dev);
            printf("info %d %zu %zu %zu %s\n", r, tot, fr, dt, name);
        } else if (strncmp(c, "fill:", 5) == 0) {
            unsigned long long p, got = 0, chunk = a << 20, least = (b ? b : a) << 20;
            while (chunk) {
                while ((r = cu.alloc(&p, chunk)) == 0)
                    got += chunk;
                chunk = chunk / 2 >= least ? chunk / 2 : 0;
            }
            printf("fill %d %llu\n", r, got);
        } else if (strncmp(c, "take:", 5) == 0) {
            unsigned long long p;
            r = cu.alloc(&p, a << 20);
            printf("take %d %llu\n", r, r ? 0 : a << 20);
        } else if (strncmp(c, "hold:", 5) == 0) {
            sleep_ns(a * 1000000ull);
            printf("hold 0\n");
        } else if (strncmp(c, "calib:", 6) == 0) {
            void *f = NULL;
            unsigned long long n = a;
            double ms = 0, best = 0;
            r = prepare();
            if (!r)
                r = kernel(a, &f, &n);
            for (int k = 0; k < 5 && !r; k++) /* the least of five: the kernel alone */
                if ((r = timed(f, n, &ms)) == 0 && (best == 0 || ms < best))
                    best = ms;
            printf("calib %d %llu %llu\n", r, n, (unsigned long long)(best * 1e6));
        } else if (strncmp(c, "spin:", 5) == 0) {
            void *f = NULL;
            unsigned long long n = a;
            struct window w;
            r = prepare();
            if (!r)
                r = function(a, &f);
            window_start(&w, b, x);
            /* without a gap, two kernels in flight, then wait: the GPU is
             * kept busy while the host wakes up, so a share is bounded by
             * its cap, not by the host's latency */
            for (int more = 1; more && !r;) {
                unsigned k = y ? 1 : z ? (unsigned)z : 2;
                for (unsigned j = 0; j < k && !r; j++)
                    r = launch1(f, &n, NULL);
                if (!r)
                    r = cu.sync();
                if (!r && y)
                    sleep_ns(y * 1000ull);
                more = window_count(&w, k);
            }
            window_print("spin", r, &w);
        } else if (strncmp(c, "capture:", 8) == 0) {
            void *f = NULL, *g = NULL;
            unsigned long long n = a;
            *(void **)&cu.stream = need("cuStreamCreate");
            *(void **)&cu.begin = need("cuStreamBeginCapture_v2");
            *(void **)&cu.end = need("cuStreamEndCapture");
            *(void **)&cu.inst = dlsym(lib, "cuGraphInstantiateWithFlags");
            *(void **)&cu.inst_v2 = cu.inst ? NULL : need("cuGraphInstantiate_v2");
            r = cu.stream && cu.begin && cu.end && (cu.inst || cu.inst_v2) ? prepare() : 500; /* not found */
            if (!r)
                r = function(a, &f);
            if (!r && !strm)
                r = cu.stream(&strm, 0);
            if (!r)
                r = cu.begin(strm, 0); /* CU_STREAM_CAPTURE_MODE_GLOBAL */
            for (unsigned long long k = 0; k < b && !r; k++)
                r = launch1(f, &n, strm);
            if (!r)
                r = cu.end(strm, &g);
            if (!r)
                r = cu.inst ? cu.inst(&gexec, g, 0) : cu.inst_v2(&gexec, g, NULL, NULL, 0);
            printf("capture %d\n", r);
        } else if (strncmp(c, "replay:", 7) == 0) {
            struct window w;
            *(void **)&cu.glaunch = need("cuGraphLaunch");
            r = !gexec ? 400 : !cu.glaunch ? 500 : 0; /* no graph: invalid handle */
            window_start(&w, a, b);
            for (int more = 1; more && !r;) {
                r = cu.glaunch(gexec, strm);
                if (!r)
                    r = cu.glaunch(gexec, strm);
                if (!r)
                    r = cu.sync();
                more = window_count(&w, 2);
            }
            window_print("replay", r, &w);
        } else if (strncmp(c, "launchbench:", 12) == 0) {
            void *f = NULL;
            unsigned long long n = fake ? 0 : 1;
            uint64_t spent = 0;
            r = prepare();
            if (!r)
                r = function(n, &f);
            for (unsigned long long k = 0; k < a && !r;) {
                unsigned long long batch = a - k < 256 ? a - k : 256;
                uint64_t t0 = now_ns();
                for (unsigned long long j = 0; j < batch && !r; j++)
                    r = launch1(f, &n, NULL);
                spent += now_ns() - t0;
                if (!r)
                    r = cu.sync();
                k += batch;
            }
            printf("launchbench %d %.1f\n", r, a ? (double)spent / (double)a : 0);
        } else if (strncmp(c, "allocbench:", 11) == 0) {
            unsigned long long p;
            uint64_t t0 = now_ns();
            for (unsigned long long k = 0; k < a && !r; k++)
                if ((r = cu.alloc(&p, 1 << 20)) == 0)
                    r = cu.free(p);
            printf("allocbench %d %.1f\n", r, a ? (double)(now_ns() - t0) / (double)a : 0);
        } else {
            fprintf(stderr, "gpucheck: unknown command %s\n", c);
            return 2;
        }
    }
    return 0;
}
