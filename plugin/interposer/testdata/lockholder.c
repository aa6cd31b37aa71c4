/* Takes the lock of a reservation's usage region (argv[1]), says "locked" and
 * waits to be killed: a process that dies holding the lock. */
#include "../src/gpushare.h"

#include <fcntl.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    if (argc != 2)
        return 2;
    int fd = open(argv[1], O_RDWR);
    if (fd < 0)
        return 3;
    struct gs_region *r = mmap(NULL, sizeof *r, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (r == MAP_FAILED || r->magic != GS_MAGIC)
        return 3;
    if (pthread_mutex_lock(&r->lock) != 0)
        return 3;
    printf("locked\n");
    fflush(stdout);
    for (;;)
        pause();
}
