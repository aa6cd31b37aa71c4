/* A fake libnvidia-ml.so.1 for tests on machines without a GPU:
 * FAKENVML_DEVICES devices (default 1), each one's memory reported as
 * FAKENVML_TOTAL_BYTES (default 16 GiB) of which FAKENVML_USED_BYTES
 * (default 1 GiB) are used, 256 MiB of that reserved by the driver. Like
 * NVML, every call but nvmlInit fails with NVML_ERROR_UNINITIALIZED (1)
 * before nvmlInit, and the _v2 memory call checks the structure's
 * version. NVML numbers devices in PCI order, CUDA fastest first unless
 * CUDA_DEVICE_ORDER=PCI_BUS_ID: here NVML's device i is CUDA's n-1-i,
 * and only the UUID (nvmlDeviceGetUUID; testdata/fakecuda.c's
 * cuDeviceGetUuid) tells which is which. */
#include <stdio.h>
#include <stdlib.h>

typedef int nvmlReturn_t;
typedef void *nvmlDevice_t;
typedef struct { unsigned long long total, free, used; } nvmlMemory_t;
typedef struct { unsigned int version; unsigned long long total, reserved, free, used; } nvmlMemory_v2_t;

enum { OK = 0, UNINITIALIZED = 1, INVALID_ARGUMENT = 2, VERSION_MISMATCH = 25 };

static int inited;
static int devices[8]; /* their addresses are the handles */

static unsigned long long env(const char *name, unsigned long long def)
{
    const char *v = getenv(name);
    return v ? strtoull(v, NULL, 10) : def;
}

static unsigned ndevices(void)
{
    unsigned n = (unsigned)env("FAKENVML_DEVICES", 1);
    return n < 1 ? 1 : n > 8 ? 8 : n;
}

/* The handle's index, or -1. */
static int index_of(nvmlDevice_t d)
{
    for (unsigned i = 0; i < ndevices(); i++)
        if (d == &devices[i])
            return (int)i;
    return -1;
}

nvmlReturn_t nvmlInit_v2(void) { inited = 1; return OK; }
nvmlReturn_t nvmlShutdown(void) { inited = 0; return OK; }

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned *n)
{
    if (!inited)
        return UNINITIALIZED;
    *n = ndevices();
    return OK;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned i, nvmlDevice_t *d)
{
    if (!inited)
        return UNINITIALIZED;
    if (i >= ndevices() || !d)
        return INVALID_ARGUMENT;
    *d = &devices[i];
    return OK;
}

/* "GPU-" and the 16 bytes of CUDA device n-1-i's UUID, in NVML's groups. */
nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t d, char *s, unsigned len)
{
    if (!inited)
        return UNINITIALIZED;
    int i = index_of(d);
    if (i < 0 || !s)
        return INVALID_ARGUMENT;
    unsigned char u[16];
    for (int k = 0; k < 15; k++)
        u[k] = (unsigned char)(0x10 * k + 7);
    u[15] = (unsigned char)(ndevices() - 1 - (unsigned)i);
    char b[64];
    int n = snprintf(b, sizeof b, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
                     u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12],
                     u[13], u[14], u[15]);
    if (n < 0 || (unsigned)n >= len)
        return 7; /* NVML_ERROR_INSUFFICIENT_SIZE */
    snprintf(s, len, "%s", b);
    return OK;
}

static nvmlReturn_t figures(nvmlDevice_t d, unsigned long long *total, unsigned long long *used)
{
    if (!inited)
        return UNINITIALIZED;
    if (index_of(d) < 0)
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
