/* Calls NVIDIA's real libcuda.so.1 on a machine without a GPU, as a program
 * would before it knows there is none, and prints each call's result:
 *   init <rc>            cuInit(0)
 *   count <rc>           cuDeviceGetCount
 *   alloc <rc>           cuMemAlloc_v2 of argv[2] bytes, three times
 *   info <rc>            cuMemGetInfo_v2
 *   total <rc>           cuDeviceTotalMem_v2 of device 0
 *   launch <rc>          cuLaunchKernel of a NULL function, twice
 * argv[1] is "direct" (built with -DLINKED against libcuda.so.1) or "dlsym"
 * (dlopen + dlsym). Exit status 0 means no call crashed. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;

#ifdef LINKED
CUresult cuInit(unsigned);
CUresult cuDeviceGetCount(int *);
CUresult cuMemAlloc_v2(CUdeviceptr *, size_t);
CUresult cuMemGetInfo_v2(size_t *, size_t *);
CUresult cuDeviceTotalMem_v2(size_t *, int);
CUresult cuLaunchKernel(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                        unsigned, void *, void **, void **);
#endif

int main(int argc, char **argv)
{
    CUresult (*init)(unsigned);
    CUresult (*count)(int *);
    CUresult (*alloc)(CUdeviceptr *, size_t);
    CUresult (*info)(size_t *, size_t *);
    CUresult (*total)(size_t *, int);
    CUresult (*launch)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                       unsigned, void *, void **, void **);
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc < 3)
        return 2;
    if (strcmp(argv[1], "direct") == 0) {
#ifdef LINKED
        init = cuInit; count = cuDeviceGetCount; alloc = cuMemAlloc_v2;
        info = cuMemGetInfo_v2; total = cuDeviceTotalMem_v2; launch = cuLaunchKernel;
#else
        return 2;
#endif
    } else {
        void *h = dlopen("libcuda.so.1", RTLD_NOW);
        if (!h) {
            printf("dlopen %s\n", dlerror());
            return 3;
        }
        *(void **)&init = dlsym(h, "cuInit");
        *(void **)&count = dlsym(h, "cuDeviceGetCount");
        *(void **)&alloc = dlsym(h, "cuMemAlloc_v2");
        *(void **)&info = dlsym(h, "cuMemGetInfo_v2");
        *(void **)&total = dlsym(h, "cuDeviceTotalMem_v2");
        *(void **)&launch = dlsym(h, "cuLaunchKernel");
        if (!init || !count || !alloc || !info || !total || !launch) {
            printf("dlsym missing a driver function\n");
            return 3;
        }
    }
    size_t n = strtoull(argv[2], NULL, 10), f = 0, t = 0;
    int devs = 0;
    CUdeviceptr p = 0;
    printf("init %d\n", init(0));
    printf("count %d\n", count(&devs));
    for (int i = 0; i < 3; i++)
        printf("alloc %d\n", alloc(&p, n));
    printf("info %d\n", info(&f, &t));
    printf("total %d\n", total(&t, 0));
    for (int i = 0; i < 2; i++)
        printf("launch %d\n", launch(NULL, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL));
    return 0;
}
