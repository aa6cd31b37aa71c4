/* gpushare CUDA interposer: a task's GPUs put back together (issue 45).
 *
 * On nodes with one device group per GPU (the plugin's device_groups =
 * "gpu") a task of k whole GPUs asks for them as k device blocks, and
 * Nomad merges the k reservations' environment by overwriting: the last
 * block's CUDA_VISIBLE_DEVICES wins. Each reservation also sets
 * GPUSHARE_GPU_<NVML index>=<UUID> and GPUSHARE_GPU_<index>_SHARES=<its
 * shares of that GPU>, names unique per GPU, so all of them survive. At
 * load, before any driver call, when the environment holds two or more
 * GPUs and every one of them is whole (_SHARES = GPUSHARE_SHARES_PER_GPU),
 * CUDA_VISIBLE_DEVICES and NVIDIA_VISIBLE_DEVICES become their UUIDs in
 * index order and GPUSHARE_SHARES / GPUSHARE_FRACTION the task's total;
 * gs_composed says how many (hooks.c then lifts the memory cap, which was
 * one reservation's, when the limits file says its GPUs were whole).
 * One GPU changes nothing; a fraction among several leaves the
 * environment as Nomad merged it, with a line on stderr. */
#define _GNU_SOURCE
#include "gpushare.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern char **environ;

#define MAX_GPUS 64 /* NVML indices told apart */
#define UUID_MAX 96

int gs_composed;

struct gpu {
    char uuid[UUID_MAX];
    long shares; /* 0: no _SHARES variable; -1: malformed */
};

/* A decimal index after the prefix, then the rest of the name: "=" or
 * "_SHARES=". Returns the index, or -1 when the name is not one of ours. */
static int parse_name(const char *e, const char **rest)
{
    const char *s = e + sizeof GS_ENV_GPU_PREFIX - 1, *p = s;
    int idx = 0;
    for (; *p >= '0' && *p <= '9'; p++)
        idx = idx < MAX_GPUS ? idx * 10 + (*p - '0') : MAX_GPUS;
    if (p == s || (s[0] == '0' && p - s > 1))
        return -1;
    *rest = p;
    return idx;
}

/* A UUID goes into a comma-separated list: no commas, blanks or '=', not
 * empty, not too long. */
static int uuid_ok(const char *v)
{
    size_t n = strlen(v);
    return n > 0 && n < UUID_MAX && strcspn(v, ", \t\n=") == n;
}

static void compose(void)
{
    static struct gpu gpus[MAX_GPUS];
    int ngpu = 0, bad = 0;
    for (char **e = environ; e && *e; e++) {
        if (strncmp(*e, GS_ENV_GPU_PREFIX, sizeof GS_ENV_GPU_PREFIX - 1) != 0)
            continue;
        const char *rest;
        int idx = parse_name(*e, &rest);
        if (idx < 0)
            continue; /* GPUSHARE_GPU_<not a number>: not ours */
        if (idx >= MAX_GPUS) {
            bad = 1;
            continue;
        }
        if (*rest == '=') {
            if (!uuid_ok(rest + 1)) {
                bad = 1;
                continue;
            }
            if (!gpus[idx].uuid[0])
                ngpu++;
            snprintf(gpus[idx].uuid, sizeof gpus[idx].uuid, "%s", rest + 1);
        } else if (strncmp(rest, GS_ENV_GPU_SHARES_SUFFIX "=", sizeof GS_ENV_GPU_SHARES_SUFFIX) == 0) {
            unsigned long long n;
            gpus[idx].shares = gs_parse_u64(rest + sizeof GS_ENV_GPU_SHARES_SUFFIX, &n) == 0 && n < 1000000 ? (long)n : -1;
        }
    }
    if (ngpu < 2)
        return; /* one GPU, or none: the environment is already right */
    unsigned long long per = 0;
    char list[MAX_GPUS * UUID_MAX], why[160] = "";
    const char *p = getenv("GPUSHARE_SHARES_PER_GPU");
    if (!p || gs_parse_u64(p, &per) != 0 || per == 0)
        snprintf(why, sizeof why, "GPUSHARE_SHARES_PER_GPU is unset or malformed");
    size_t len = 0;
    for (int i = 0; i < MAX_GPUS; i++) {
        if (!gpus[i].uuid[0]) {
            if (gpus[i].shares && !why[0]) /* _SHARES without its GPU */
                snprintf(why, sizeof why, "GPU %d has %s%d%s but no %s%d", i, GS_ENV_GPU_PREFIX, i,
                         GS_ENV_GPU_SHARES_SUFFIX, GS_ENV_GPU_PREFIX, i);
            continue;
        }
        if (gpus[i].shares <= 0 && !why[0])
            snprintf(why, sizeof why, "GPU %d has no valid %s%d%s", i, GS_ENV_GPU_PREFIX, i,
                     GS_ENV_GPU_SHARES_SUFFIX);
        else if (gpus[i].shares != (long)per && !why[0])
            snprintf(why, sizeof why, "GPU %d holds %ld of its %llu shares", i, gpus[i].shares, per);
        len += (size_t)snprintf(list + len, sizeof list - len, "%s%s", len ? "," : "", gpus[i].uuid);
    }
    if (bad && !why[0])
        snprintf(why, sizeof why, "a %s<index> variable or GPUSHARE_SHARES_PER_GPU is malformed",
                 GS_ENV_GPU_PREFIX);
    if (why[0]) {
        fprintf(stderr, "gpushare: %d GPUs in this task's reservations, not all whole (%s): "
                        "leaving CUDA_VISIBLE_DEVICES=%s as Nomad merged it\n",
                ngpu, why, getenv("CUDA_VISIBLE_DEVICES") ? getenv("CUDA_VISIBLE_DEVICES") : "");
        return;
    }
    char num[32];
    setenv("CUDA_VISIBLE_DEVICES", list, 1);
    setenv("NVIDIA_VISIBLE_DEVICES", list, 1);
    snprintf(num, sizeof num, "%llu", per * (unsigned long long)ngpu);
    setenv("GPUSHARE_SHARES", num, 1);
    snprintf(num, sizeof num, "%d", ngpu);
    setenv("GPUSHARE_FRACTION", num, 1);
    gs_composed = ngpu;
}

static pthread_once_t compose_once = PTHREAD_ONCE_INIT;

/* Also called first thing at load (hooks.c), in case another library's
 * constructor reaches the driver before ours ran. */
void gs_compose(void)
{
    pthread_once(&compose_once, compose);
}

/* Before the library's other constructors (101: the first priority a
 * program may use) and so before any driver call through it. */
__attribute__((constructor(101))) static void compose_at_load(void)
{
    gs_compose();
}
