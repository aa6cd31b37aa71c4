/* gpushare CUDA interposer: the hook table, the limits and the driver
 * loaded once, and dlsym (see gpushare_cuda.c for how a call reaches a hook).
 *
 * Limits are read once, at load, from /run/gpushare when it holds a limits
 * file (the plugin's read-only mount in an isolated task), else from the
 * directory named by GPUSHARE_LIMITS (raw_exec); file "limits", the usage
 * region is the file "usage" beside it. GPUSHARE_REAL_LIBCUDA names the
 * real driver library, for tests only. Setting either variable after the
 * process started changes nothing, as they are never read again. */
#define _GNU_SOURCE
#include "gpushare.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Where the plugin mounts a reservation's directory in an isolated task. */
#ifndef GS_FIXED_DIR
#define GS_FIXED_DIR "/run/gpushare"
#endif

#define EXPORT __attribute__((visibility("default")))

struct gs_limits gs_lim;
static char real_path[4096] = "libcuda.so.1";
static char usage_path[4096];
char gs_dir[4096];
static pthread_once_t load_once = PTHREAD_ONCE_INIT, driver_once = PTHREAD_ONCE_INIT,
                      region_once = PTHREAD_ONCE_INIT;
static void *driver; /* the real driver's handle */
static void *(*real_dlsym)(void *, const char *);

/* The real dlsym, found with dlvsym (which we do not interpose): our own
 * dlsym would answer with our hooks. The version names differ by
 * architecture and glibc release. */
static void find_real_dlsym(void)
{
    static const char *vers[] = {"GLIBC_2.34", "GLIBC_2.17", "GLIBC_2.2.5", "GLIBC_2.0"};
    for (size_t i = 0; !real_dlsym && i < sizeof vers / sizeof vers[0]; i++)
        real_dlsym = (void *(*)(void *, const char *))dlvsym(RTLD_NEXT, "dlsym", vers[i]);
}

/* The task's class: the limits file's class= when the plugin wrote one,
 * else the job's gpushare.class meta, which Nomad puts in the task's
 * environment (NOMAD_META_<key>, '.' made '_', as written and upper case).
 * The meta is the user's own declaration and the environment the task's:
 * a task that claims production is not paced (README, what escapes it). */
static enum gs_class class_of(char *klass)
{
    if (!klass[0]) {
        const char *m = getenv("NOMAD_META_gpushare_class");
        if (!m)
            m = getenv("NOMAD_META_GPUSHARE_CLASS");
        if (m)
            snprintf(klass, sizeof gs_lim.klass, "%s", m);
    }
    if (strcmp(klass, "production") == 0)
        return GS_CLASS_PRODUCTION;
    if (strcmp(klass, "opportunistic") == 0)
        return GS_CLASS_OPPORTUNISTIC;
    return GS_CLASS_NORMAL;
}

/* At load: the environment and the limits file, read here and never again,
 * so what the task sets later changes nothing. Nothing heavier: every
 * process of the task loads the library, most never touch the GPU. */
static void load_limits(void)
{
    gs_compose(); /* the task's GPUs first: nothing below may read them stale */
    const char *lib = getenv("GPUSHARE_REAL_LIBCUDA");
    if (lib && *lib)
        snprintf(real_path, sizeof real_path, "%s", lib);
    /* The plugin mounts the reservation's directory read-only at a fixed
     * path in a filesystem-isolated task (exec, docker): there it wins over
     * the environment, which the task controls. raw_exec tasks see the
     * host, where only GPUSHARE_LIMITS names it. */
    const char *dir = getenv("GPUSHARE_LIMITS");
    if (access(GS_FIXED_DIR "/limits", F_OK) == 0)
        dir = GS_FIXED_DIR;
    if (!dir || !*dir)
        return; /* not under gpushare: pass everything through */
    char path[4096];
    snprintf(path, sizeof path, "%s/limits", dir);
    if (gs_limits_read(path, &gs_lim) != 0) {
        /* fail closed: a broken limits file must not mean "no limit" */
        fprintf(stderr, "gpushare: cannot read limits %s: refusing GPU memory\n", path);
        gs_lim.have_memory = 1;
        gs_lim.memory_bytes = 0;
        return;
    }
    if (gs_composed > gs_lim.whole_gpus && gs_lim.whole_gpus > 0) {
        /* whole GPUs of several reservations (compose.c): the file is the
         * last one's, its cap that reservation's GPUs alone; the task holds
         * every GPU it sees whole, so no cap but the GPUs' own (and no
         * unified memory, whose room is counted from the cap) */
        gs_lim.have_memory = 0;
        gs_lim.context_bytes = 0;
        gs_lim.unified = 0;
    }
    snprintf(usage_path, sizeof usage_path, "%s/usage", dir);
    snprintf(gs_dir, sizeof gs_dir, "%s", dir);
    gs_lim.klass_id = class_of(gs_lim.klass);
    gs_slice_env(getenv("GPUSHARE_TIMESLICE_QUANTUM_MS"));
}

/* At the first driver call: the real driver and the usage region. */
static void load_driver_once(void)
{
    pthread_once(&load_once, load_limits);
    find_real_dlsym();
    void *h = dlopen(real_path, RTLD_NOW | RTLD_LOCAL);
    if (!h)
        fprintf(stderr, "gpushare: cannot load the CUDA driver: %s\n", dlerror());
    for (int i = 0; i < H_COUNT && h && real_dlsym; i++)
        gs_hooks[i].real = real_dlsym(h, gs_hooks[i].name);
    driver = h;
    gs_load_region();
    if (gs_lim.context_bytes)
        gs_region_claim(); /* the context's charge, before the first query */
}

static void load_region_once(void)
{
    pthread_once(&load_once, load_limits);
    /* the region also holds the task's compute pacer: opened for a
     * compute limit too (without one, only memory needs it) */
    int paced = gs_lim.compute_pct < 100 || gs_lim.klass_id == GS_CLASS_OPPORTUNISTIC || gs_slice_quantum_ns;
    if ((gs_lim.have_memory || paced) && usage_path[0] && gs_region_open(usage_path) != 0) {
        if (gs_lim.have_memory)
            fprintf(stderr, "gpushare: cannot open the reservation's usage region (in %s): refusing GPU memory\n", gs_dir);
        else
            fprintf(stderr, "gpushare: cannot open the reservation's usage region (in %s): compute paced per process\n", gs_dir);
    }
}

void gs_load_region(void)
{
    pthread_once(&region_once, load_region_once);
}

void *gs_driver_sym(const char *name)
{
    gs_load_driver();
    return driver && real_dlsym ? real_dlsym(driver, name) : NULL;
}

void *gs_real_dlsym(void *handle, const char *name)
{
    if (!real_dlsym)
        find_real_dlsym();
    return real_dlsym ? real_dlsym(handle, name) : NULL;
}

/* Runs at load; the first hook also makes sure of it, in case another
 * library's constructor reaches the driver before ours ran. */
__attribute__((constructor)) static void gs_load(void)
{
    pthread_once(&load_once, load_limits);
}

void gs_load_driver(void)
{
    pthread_once(&driver_once, load_driver_once);
}

/* The driver picked the function for the caller's version and flags; if it
 * is one we stand in front of, hand out our hook instead. */
void *gs_to_hook(void *p)
{
    for (int i = 0; p && i < H_COUNT; i++)
        if (gs_hooks[i].real == p)
            return gs_hooks[i].hook;
    return p;
}

/* dlsym: intercepted names from any handle get our hook, if the library
 * behind the handle has the symbol at all (cu*: the table here; nvml*:
 * nvml.c's). Every other name goes straight to the real dlsym as a
 * tail call, so the return address it sees (which RTLD_NEXT is relative to)
 * is still the caller's. Needs nothing but the real dlsym: libraries
 * that call dlsym from their constructors reach here before ours ran. */
EXPORT void *dlsym(void *handle, const char *name)
{
    if (!real_dlsym)
        find_real_dlsym();
    if (!real_dlsym)
        return NULL; /* not glibc: nothing sensible to forward to */
    if (name[0] == 'c' && name[1] == 'u') {
        for (int i = 0; i < H_COUNT; i++)
            if (strcmp(gs_hooks[i].name, name) == 0)
                return real_dlsym(handle, name) ? gs_hooks[i].hook : NULL;
    } else if (strncmp(name, "nvml", 4) == 0) {
        void *hook = gs_nvml_hook(name); /* NVML's table: nvml.c */
        if (hook)
            return real_dlsym(handle, name) ? hook : NULL;
    }
    return real_dlsym(handle, name);
}

/* The table. The hooks live in several source files with their own types;
 * here each is declared only to take its address. */
#define X_DECL(n) void n(void);
GS_HOOKS(X_DECL)
#undef X_DECL
#define X_FILL(n) [H_##n] = {#n, (void *)n, NULL},
struct gs_hook gs_hooks[H_COUNT] = {GS_HOOKS(X_FILL)};
#undef X_FILL
