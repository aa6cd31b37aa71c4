/* gpushare CUDA interposer: where the usage region's file is, and its
 * opening (region.c maps it): the reservation's key (GPUSHARE_REGION) and
 * the layout the plugin's Reserve makes (plugin/regionkey.go). */
#define _GNU_SOURCE
#include "gpushare.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Opens the usage file `usage` in the directory dfd, creating it (0600,
 * this process's user) if absent; never through a symbolic link. */
static int open_usage(int dfd)
{
    int fd = openat(dfd, "usage", O_RDWR | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT) {
        fd = openat(dfd, "usage", O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd < 0 && errno == EEXIST) /* another process made it meanwhile */
            fd = openat(dfd, "usage", O_RDWR | O_NOFOLLOW | O_CLOEXEC);
    }
    return fd;
}

/* The reservation's key (GPUSHARE_REGION, read at load): 32 hex digits the
 * plugin's Reserve drew and put in the task's environment, the name of the
 * directory under <dir>/region where the task's usage file lives. The
 * environment of a process is readable by its own user and root only, so
 * no other user learns it, nor creates a file there first (issue 44). */
#define KEY_LEN 32
static char region_key[KEY_LEN + 1];

__attribute__((constructor)) static void read_region_key(void)
{
    const char *k = getenv("GPUSHARE_REGION");
    if (!k || strlen(k) != KEY_LEN)
        return;
    for (int i = 0; i < KEY_LEN; i++)
        if (!isxdigit((unsigned char)k[i]) || isupper((unsigned char)k[i]))
            return; /* never a path: no '/', no ".." */
    memcpy(region_key, k, KEY_LEN + 1);
}

/* The usage file for path (<dir>/usage). The plugin makes <dir>/region
 * (root's, 0711: nobody but root creates, lists or removes anything
 * there) and in it, at each Reserve, <dir>/region/<key> (1733: the task's
 * processes may create a file there, nobody but root list it or remove
 * another's file), the key in the task's environment: the region is
 * <dir>/region/<key>/usage, created by the task's first process, 0600 and
 * its user's (README, "Who can reach a reservation's state"). Another user
 * who knows <dir> cannot name that directory, so has put nothing there.
 * Without the key (a process that cleared its environment) no region: no
 * memory. Without region/ (a directory the tests make, an older plugin's) it is
 * <dir>/usage, created 0600 if absent. */
int gs_region_file(const char *path)
{
    char dir[4096];
    const char *slash = strrchr(path, '/');
    size_t n = slash ? (size_t)(slash - path) : 0;
    if (n == 0 || n >= sizeof dir - 16 - KEY_LEN)
        return -1;
    memcpy(dir, path, n);
    memcpy(dir + n, "/region", 8);
    int dfd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC); /* no read permission needed */
    if (dfd >= 0) {
        /* never region/usage, which another user could have made in an
         * older plugin's 1733 region/ (issue 44) */
        int kfd = region_key[0] ? openat(dfd, region_key, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) : -1;
        close(dfd);
        if (kfd < 0) {
            fprintf(stderr, "gpushare: %s has no usage region for this process's GPUSHARE_REGION "
                            "(%s): refusing GPU memory\n", dir, region_key[0] ? "not found" : "unset");
            return -1;
        }
        snprintf(dir + n + 7, sizeof dir - n - 7, "/%s", region_key);
        dfd = kfd;
    } else {
        dir[n] = 0;
        dfd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
        if (dfd < 0)
            return -1;
    }
    int fd = open_usage(dfd);
    if (fd < 0 && (errno == EACCES || errno == EPERM))
        fprintf(stderr, "gpushare: %s/usage belongs to another user: every process of a task "
                        "must run as the user whose process first used the GPU (this one runs "
                        "as uid %d)\n", dir, (int)geteuid());
    close(dfd);
    return fd;
}
