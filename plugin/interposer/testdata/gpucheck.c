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
 *   fill:MIB        allocate MIB MiB chunks until refused:
 *                   "fill <rc of the refusal> <bytes got>"
 *   take:MIB        one allocation of MIB MiB: "take <rc> <bytes got>"
 *   hold:MS         sleep MS ms, keeping what was got ("hold 0")
 *   calib:US        the kernel of about US µs: "calib <rc> <N> <alone ns>",
 *                   N its iterations (the fake's: US), alone ns its GPU
 *                   time measured alone (run it without a compute cap:
 *                   under one, the events around a kernel also span the
 *                   pacer's wait before it)
 *   spin:N:MS       kernels of N (from calib), two in flight, for MS ms:
 *                   "spin <rc> <kernels> <wall ns>"; the work done is
 *                   kernels x alone ns
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

/* The kernel of about us µs: the fake's by name; on a GPU, spin with an
 * iteration count found by doubling and then scaling to the measured time. */
static CUresult kernel(unsigned long long us, void **f, unsigned long long *n)
{
    if (fake) {
        char name[32];
        snprintf(name, sizeof name, "k%llu", us);
        *n = us;
        return cu.getfn(f, mod, name);
    }
    CUresult r = cu.getfn(f, mod, "spin");
    double ms = 0;
    unsigned long long k = 1024;
    while (!r && (r = timed(*f, k, &ms)) == 0 && ms < 2 && k < (1ull << 40))
        k *= 2;
    if (!r && ms > 0)
        k = (unsigned long long)((double)k * ((double)us / 1000.0) / ms) + 1;
    *n = k;
    return r;
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
        unsigned long long a = 0, b = 0;
        if (arg)
            sscanf(arg + 1, "%llu:%llu", &a, &b);
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
            unsigned long long p, got = 0, chunk = a << 20;
            while (chunk && (r = cu.alloc(&p, chunk)) == 0)
                got += chunk;
            printf("fill %d %llu\n", r, got);
        } else if (strncmp(c, "take:", 5) == 0) {
            unsigned long long p;
            r = cu.alloc(&p, a << 20);
            printf("take %d %llu\n", r, r ? 0 : a << 20);
        } else if (strncmp(c, "hold:", 5) == 0) {
            struct timespec ts = {(time_t)(a / 1000), (long)(a % 1000) * 1000000};
            nanosleep(&ts, NULL);
            printf("hold 0\n");
        } else if (strncmp(c, "calib:", 6) == 0 || strncmp(c, "spin:", 5) == 0) {
            void *f = NULL;
            unsigned long long n = a, kernels = 0;
            double ms = 0;
            r = mod ? 0 : cu.modload(&mod, ptx);
            if (!r && !ev0)
                r = cu.evcreate(&ev0, 0) || cu.evcreate(&ev1, 0);
            if (!r && !out_buf)
                r = cu.alloc(&out_buf, 4);
            if (c[0] == 'c') {
                if (!r)
                    r = kernel(a, &f, &n);
                double best = 0;
                for (int k = 0; k < 5 && !r; k++) /* the least of five: the kernel alone */
                    if ((r = timed(f, n, &ms)) == 0 && (best == 0 || ms < best))
                        best = ms;
                printf("calib %d %llu %llu\n", r, n, (unsigned long long)(best * 1e6));
                continue;
            }
            if (!r && fake) {
                char name[32];
                snprintf(name, sizeof name, "k%llu", a);
                r = cu.getfn(&f, mod, name);
            } else if (!r) {
                r = cu.getfn(&f, mod, "spin");
            }
            uint64_t t0 = now_ns(), end = t0 + b * 1000000ull;
            /* two kernels in flight, then wait: the GPU is kept busy while
             * the host wakes up, so a share is bounded by its cap, not by
             * the host's latency */
            void *params[] = {&n, &out_buf};
            while (!r && now_ns() < end) {
                r = cu.launch(f, 1, 1, 1, 1, 1, 1, 0, NULL, fake ? NULL : params, NULL);
                if (!r)
                    r = cu.launch(f, 1, 1, 1, 1, 1, 1, 0, NULL, fake ? NULL : params, NULL);
                if (!r)
                    r = cu.sync();
                kernels += 2;
            }
            printf("spin %d %llu %llu\n", r, kernels, (unsigned long long)(now_ns() - t0));
        } else {
            fprintf(stderr, "gpucheck: unknown command %s\n", c);
            return 2;
        }
    }
    return 0;
}
