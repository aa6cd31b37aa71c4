/* gpushare CUDA interposer: the TGS channel of the reservation's GPU, as
 * the launch hook (src/launch.c) opens it at the task's first launch
 * (README, "The TGS channel"). Out of launch.c to keep it short. */
#define _GNU_SOURCE
#include "gpushare.h"
#include "pace.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

/* The channel file the plugin creates per GPU (plugin/limits.go): the
 * struct at offset 0 of a file of exactly this size. */
#define GS_TGS_FILE_SIZE 4096
#define GS_TGS_VERSION 1

/* <gs_dir>/tgs, mapped: the plugin's per-GPU channel; NULL when absent (a
 * plugin without TGS, or a task outside gpushare's reservations) or not
 * one of ours, with a line on stderr for the latter. */
struct gs_tgs_channel *gs_tgs_open(int writable)
{
    char path[sizeof gs_dir + 8];
    snprintf(path, sizeof path, "%s/tgs", gs_dir);
    int fd = open(path, (writable ? O_RDWR : O_RDONLY) | O_CLOEXEC);
    if (fd < 0) {
        if (errno != ENOENT)
            fprintf(stderr, "gpushare: cannot open the TGS channel %s: %m\n", path);
        return NULL;
    }
    void *m = MAP_FAILED; /* its size by lseek: fstat needs glibc 2.33 (glibc_compat.h) */
    if (lseek(fd, 0, SEEK_END) == GS_TGS_FILE_SIZE)
        m = mmap(NULL, GS_TGS_FILE_SIZE, PROT_READ | (writable ? PROT_WRITE : 0), MAP_SHARED, fd, 0);
    close(fd);
    struct gs_tgs_channel *c = m;
    if (m == MAP_FAILED || c->magic != GS_TGS_MAGIC || c->version != GS_TGS_VERSION) {
        fprintf(stderr, "gpushare: %s is not a TGS channel of this version: ignored\n", path);
        if (m != MAP_FAILED)
            munmap(m, GS_TGS_FILE_SIZE);
        return NULL;
    }
    return c;
}
