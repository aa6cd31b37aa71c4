/* An NVML test program: runs the commands on its command line and prints
 * one line per command. argv[1] picks how it finds NVML:
 *   direct   calls the functions it was linked against (build with -DLINKED)
 *   dlopen   dlopen("libnvidia-ml.so.1") and dlsym from the handle (pynvml,
 *            PyTorch and go-nvml do)
 * Commands:
 *   init      nvmlInit_v2 ("init <rc>")
 *   info:I    nvmlDeviceGetMemoryInfo of device I
 *             ("info <rc> <total> <free> <used>")
 *   info2:I   nvmlDeviceGetMemoryInfo_v2 of device I
 *             ("info2 <rc> <total> <reserved> <free> <used>")
 *   shutdown  nvmlShutdown ("shutdown <rc>")
 * A device whose handle cannot be had is asked about anyway (handle NULL),
 * as a careless program would. Exit status 0 means no call crashed. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int nvmlReturn_t;
typedef void *nvmlDevice_t;
typedef struct { unsigned long long total, free, used; } nvmlMemory_t;
typedef struct { unsigned int version; unsigned long long total, reserved, free, used; } nvmlMemory_v2_t;

static struct {
    nvmlReturn_t (*init)(void);
    nvmlReturn_t (*shutdown)(void);
    nvmlReturn_t (*handle)(unsigned, nvmlDevice_t *);
    nvmlReturn_t (*info)(nvmlDevice_t, nvmlMemory_t *);
    nvmlReturn_t (*info2)(nvmlDevice_t, nvmlMemory_v2_t *);
} nv;

#ifdef LINKED
nvmlReturn_t nvmlInit_v2(void);
nvmlReturn_t nvmlShutdown(void);
nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned, nvmlDevice_t *);
nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t, nvmlMemory_t *);
nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t, nvmlMemory_v2_t *);
#endif

static void *need(void *p, const char *name)
{
    if (!p) {
        fprintf(stderr, "nvmlprog: cannot resolve %s\n", name);
        exit(3);
    }
    return p;
}

#define SYM(field, name) *(void **)&nv.field = need(dlsym(lib, name), name)

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc < 2)
        return 2;
    if (strcmp(argv[1], "direct") == 0) {
#ifdef LINKED
        nv.init = nvmlInit_v2; nv.shutdown = nvmlShutdown; nv.handle = nvmlDeviceGetHandleByIndex_v2;
        nv.info = nvmlDeviceGetMemoryInfo; nv.info2 = nvmlDeviceGetMemoryInfo_v2;
#else
        fprintf(stderr, "nvmlprog: built without -DLINKED\n");
        return 2;
#endif
    } else if (strcmp(argv[1], "dlopen") == 0) {
        void *lib = dlopen("libnvidia-ml.so.1", RTLD_NOW);
        if (!lib) {
            fprintf(stderr, "nvmlprog: %s\n", dlerror());
            return 3;
        }
        SYM(init, "nvmlInit_v2"); SYM(shutdown, "nvmlShutdown");
        SYM(handle, "nvmlDeviceGetHandleByIndex_v2");
        SYM(info, "nvmlDeviceGetMemoryInfo"); SYM(info2, "nvmlDeviceGetMemoryInfo_v2");
    } else {
        return 2;
    }
    for (int i = 2; i < argc; i++) {
        char *c = argv[i], *arg = strchr(c, ':');
        unsigned idx = arg ? (unsigned)strtoul(arg + 1, NULL, 10) : 0;
        nvmlDevice_t d = NULL;
        if (strcmp(c, "init") == 0) {
            printf("init %d\n", nv.init());
        } else if (strcmp(c, "shutdown") == 0) {
            printf("shutdown %d\n", nv.shutdown());
        } else if (strncmp(c, "info:", 5) == 0) {
            nvmlMemory_t m = {0, 0, 0};
            nv.handle(idx, &d);
            nvmlReturn_t r = nv.info(d, &m);
            printf("info %d %llu %llu %llu\n", r, m.total, m.free, m.used);
        } else if (strncmp(c, "info2:", 6) == 0) {
            nvmlMemory_v2_t m = {sizeof m | 2u << 24, 0, 0, 0, 0};
            nv.handle(idx, &d);
            nvmlReturn_t r = nv.info2(d, &m);
            printf("info2 %d %llu %llu %llu %llu\n", r, m.total, m.reserved, m.free, m.used);
        } else {
            fprintf(stderr, "nvmlprog: unknown command %s\n", c);
            return 2;
        }
    }
    return 0;
}
