/* gpushare CUDA interposer: what NVML tells the task about GPU memory.
 *
 * nvidia-smi-like tools and frameworks (PyTorch's memory checks, pynvml)
 * ask NVML, not the driver API, how much memory there is. Under a memory
 * cap, nvmlDeviceGetMemoryInfo(_v2) report the share, per GPU: used = what
 * the reservation's processes (the usage region) hold on that GPU (named
 * by its UUID, as the library charges each allocation to the device of its
 * context), total = the cap less what they hold on their other GPUs (the
 * cap is the task's, over all its GPUs: this is what it may hold here), or
 * the GPU's total if smaller, free = total - used, never more than the GPU
 * really has free.
 *
 * The real functions are NVML's (libnvidia-ml.so.1), not the driver's: a
 * table of its own, loaded at the first NVML hook (a process that never
 * asks NVML never loads it). The same two of the three ways apply as for
 * the driver: symbol interposition, and dlsym (hooks.c asks gs_nvml_hook
 * for names starting "nvml"); NVML has no cuGetProcAddress.
 *
 * GPUSHARE_REAL_LIBNVML names the real library (default
 * libnvidia-ml.so.1), for the tests; read once, at load. */
#define _GNU_SOURCE
#include "gpushare.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))

/* NVML's types (no NVML headers). */
typedef int nvmlReturn_t;
typedef void *nvmlDevice_t;
typedef struct {
    unsigned long long total, free, used;
} nvmlMemory_t;
typedef struct {
    unsigned int version;
    unsigned long long total, reserved, free, used;
} nvmlMemory_v2_t;

enum { NVML_SUCCESS = 0, NVML_ERROR_FUNCTION_NOT_FOUND = 13 };

typedef nvmlReturn_t (*nvmlDeviceGetMemoryInfo_fn)(nvmlDevice_t, nvmlMemory_t *);
typedef nvmlReturn_t (*nvmlDeviceGetMemoryInfo_v2_fn)(nvmlDevice_t, nvmlMemory_v2_t *);

/* Every intercepted NVML symbol, once. */
#define NVML_HOOKS(X) X(nvmlDeviceGetMemoryInfo) X(nvmlDeviceGetMemoryInfo_v2)

#define N_ENUM(n) N_##n,
enum { NVML_HOOKS(N_ENUM) N_COUNT };
#undef N_ENUM

/* The table, filled at the end of the file, after the hooks. */
static struct gs_hook nvml_hooks[N_COUNT];

typedef nvmlReturn_t (*nvmlDeviceGetUUID_fn)(nvmlDevice_t, char *, unsigned);
static nvmlDeviceGetUUID_fn get_uuid; /* called, not intercepted */

static char nvml_path[4096] = "libnvidia-ml.so.1";
static pthread_once_t env_once = PTHREAD_ONCE_INIT, nvml_once = PTHREAD_ONCE_INIT;

static void read_env(void)
{
    const char *p = getenv("GPUSHARE_REAL_LIBNVML");
    if (p && *p)
        snprintf(nvml_path, sizeof nvml_path, "%s", p);
}

/* At load, like the limits: a path set later changes nothing. */
__attribute__((constructor)) static void nvml_load(void)
{
    pthread_once(&env_once, read_env);
}

/* The program has loaded NVML already (it called one of our hooks through
 * it), so this dlopen finds that same library, initialised or not. */
static void load_nvml_once(void)
{
    pthread_once(&env_once, read_env);
    gs_load_region();
    void *h = dlopen(nvml_path, RTLD_NOW | RTLD_LOCAL);
    for (int i = 0; h && i < N_COUNT; i++)
        nvml_hooks[i].real = gs_real_dlsym(h, nvml_hooks[i].name);
    if (h)
        get_uuid = (nvmlDeviceGetUUID_fn)gs_real_dlsym(h, "nvmlDeviceGetUUID");
}

static int hexval(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
         : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* The 16 bytes of dev's UUID ("GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx",
 * the bytes cuDeviceGetUuid gives); -1 when NVML does not say. */
static int uuid_of(nvmlDevice_t dev, uint8_t out[16])
{
    char s[96];
    if (!get_uuid || get_uuid(dev, s, sizeof s) != NVML_SUCCESS)
        return -1;
    s[sizeof s - 1] = 0;
    const char *p = strncmp(s, "GPU-", 4) == 0 ? s + 4 : NULL;
    int n = 0;
    for (; p && *p && n < 32; p++) {
        int v = hexval(*p);
        if (v < 0 && *p != '-')
            return -1;
        if (v >= 0) {
            out[n / 2] = (uint8_t)(n % 2 ? out[n / 2] << 4 | v : v);
            n++;
        }
    }
    return n == 32 ? 0 : -1;
}

#define NVML_REAL(n) \
    ((n##_fn)(pthread_once(&nvml_once, load_nvml_once), nvml_hooks[N_##n].real))

void *gs_nvml_hook(const char *name)
{
    for (int i = 0; i < N_COUNT; i++)
        if (strcmp(nvml_hooks[i].name, name) == 0)
            return nvml_hooks[i].hook;
    return NULL;
}

/* The share's view of dev's figures. used may exceed the cap: an
 * opportunistic task's managed memory beyond it (unified.c). A GPU whose
 * UUID NVML does not give is reported as holding all of the task's use. */
static void share(nvmlDevice_t dev, unsigned long long *total, unsigned long long *free_b,
                  unsigned long long *used)
{
    uint64_t cap = gs_lim.memory_bytes, use, elsewhere = 0;
    uint8_t uuid[16];
    if (uuid_of(dev, uuid) == 0)
        gs_region_device_use(uuid, &use, &elsewhere);
    else
        use = gs_region_used();
    cap = elsewhere < cap ? cap - elsewhere : 0;
    unsigned long long real_free = *free_b;
    if (cap < *total)
        *total = cap;
    *used = use;
    *free_b = use < *total ? *total - use : 0;
    if (*free_b > real_free)
        *free_b = real_free;
}

EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t dev, nvmlMemory_t *m)
{
    nvmlDeviceGetMemoryInfo_fn f = NVML_REAL(nvmlDeviceGetMemoryInfo);
    if (!f)
        return NVML_ERROR_FUNCTION_NOT_FOUND;
    nvmlReturn_t r = f(dev, m);
    if (r == NVML_SUCCESS && gs_lim.have_memory && m)
        share(dev, &m->total, &m->free, &m->used);
    return r;
}

/* reserved (the driver's and firmware's) is the GPU's, not the share's: 0. */
EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t dev, nvmlMemory_v2_t *m)
{
    nvmlDeviceGetMemoryInfo_v2_fn f = NVML_REAL(nvmlDeviceGetMemoryInfo_v2);
    if (!f)
        return NVML_ERROR_FUNCTION_NOT_FOUND;
    nvmlReturn_t r = f(dev, m);
    if (r == NVML_SUCCESS && gs_lim.have_memory && m) {
        share(dev, &m->total, &m->free, &m->used);
        m->reserved = 0;
    }
    return r;
}

#define N_FILL(n) [N_##n] = {#n, (void *)n, NULL},
static struct gs_hook nvml_hooks[N_COUNT] = {NVML_HOOKS(N_FILL)};
#undef N_FILL
