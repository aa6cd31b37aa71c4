/* A fake libnvidia-ml.so.1 for tests on machines without a GPU: one device
 * whose memory NVML reports as FAKENVML_TOTAL_BYTES (default 16 GiB) of
 * which FAKENVML_USED_BYTES (default 1 GiB) are used, 256 MiB of that
 * reserved by the driver. Like NVML, every call but nvmlInit fails with
 * NVML_ERROR_UNINITIALIZED (1) before nvmlInit, and the _v2 memory call
 * checks the structure's version. */
#include <stdlib.h>

typedef int nvmlReturn_t;
typedef void *nvmlDevice_t;
typedef struct { unsigned long long total, free, used; } nvmlMemory_t;
typedef struct { unsigned int version; unsigned long long total, reserved, free, used; } nvmlMemory_v2_t;

enum { OK = 0, UNINITIALIZED = 1, INVALID_ARGUMENT = 2, VERSION_MISMATCH = 25 };

static int inited;
static int device; /* its address is the handle */

static unsigned long long env(const char *name, unsigned long long def)
{
    const char *v = getenv(name);
    return v ? strtoull(v, NULL, 10) : def;
}

nvmlReturn_t nvmlInit_v2(void) { inited = 1; return OK; }
nvmlReturn_t nvmlShutdown(void) { inited = 0; return OK; }

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned *n)
{
    if (!inited)
        return UNINITIALIZED;
    *n = 1;
    return OK;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned i, nvmlDevice_t *d)
{
    if (!inited)
        return UNINITIALIZED;
    if (i != 0 || !d)
        return INVALID_ARGUMENT;
    *d = &device;
    return OK;
}

static nvmlReturn_t figures(nvmlDevice_t d, unsigned long long *total, unsigned long long *used)
{
    if (!inited)
        return UNINITIALIZED;
    if (d != &device)
        return INVALID_ARGUMENT;
    *total = env("FAKENVML_TOTAL_BYTES", 16ull << 30);
    *used = env("FAKENVML_USED_BYTES", 1ull << 30);
    return OK;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t *m)
{
    unsigned long long t, u;
    nvmlReturn_t r = figures(d, &t, &u);
    if (r == OK && !m)
        r = INVALID_ARGUMENT;
    if (r == OK) {
        m->total = t;
        m->used = u;
        m->free = t - u;
    }
    return r;
}

/* v2: used excludes what the driver reserved */
nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t d, nvmlMemory_v2_t *m)
{
    unsigned long long t, u, reserved = 256ull << 20;
    nvmlReturn_t r = figures(d, &t, &u);
    if (r == OK && !m)
        r = INVALID_ARGUMENT;
    if (r == OK && m->version != (sizeof *m | 2u << 24))
        r = VERSION_MISMATCH;
    if (r == OK) {
        m->total = t;
        m->reserved = reserved;
        m->used = u - reserved;
        m->free = t - u;
    }
    return r;
}
