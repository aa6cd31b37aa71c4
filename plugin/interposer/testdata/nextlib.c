/* A second preloaded library that wraps gs_probe (defined by the fake driver)
 * and finds the wrapped one with dlsym(RTLD_NEXT), as preloaded wrappers do.
 * RTLD_NEXT is relative to the caller: if the interposer's dlsym forwarded
 * the call as its own, the search would start after the interposer and find
 * this wrapper again. gs_probe returns 2 when RTLD_NEXT was right, -1 when it
 * found the wrapper itself, 0 when it found nothing. */
#define _GNU_SOURCE
#include <dlfcn.h>

int gs_probe(void)
{
    int (*next)(void) = (int (*)(void))dlsym(RTLD_NEXT, "gs_probe");
    if (!next)
        return 0;
    if (next == gs_probe)
        return -1;
    return next() + 1;
}
