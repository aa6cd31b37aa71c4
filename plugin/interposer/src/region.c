/* gpushare CUDA interposer: the usage region shared by the reservation's
 * processes, and the process-local allocation records (the limits file is
 * limits.c's).
 *
 * The region is one file mmap'ed MAP_SHARED by every process of the
 * reservation: a header with a robust, process-shared mutex, the total, and
 * one slot per process (pid, start time, bytes charged). A process changes
 * only its own slot and the total, under the mutex, so check-and-charge is
 * atomic across processes and costs no scan. The mutex is robust: a process
 * killed while holding it does not wedge the others (the next locker gets
 * EOWNERDEAD, rebuilds the total from the slots, which are the truth, and
 * marks the mutex consistent). A
 * process holds a write lock (fcntl) on its slot's bytes of the file while
 * it lives: the kernel drops it at exit, whatever pid namespace the process
 * or the one asking is in, so a slot whose lock nobody holds is a dead
 * process's (its flag "locked" says the lock was taken; else the pid is
 * looked up in /proc, as before). Dead slots are looked for without the
 * mutex (one F_GETLK per slot), only when a charge would go over the cap
 * or someone asks for the use; the mutex is taken only to free them. */
#define _GNU_SOURCE
#include "gpushare.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- shared usage region -------------------------------------------- */

static struct gs_region *R;
static __thread int tl_dev = -2; /* the device a charge carries: below */
static int op_device(void);
static int R_fd = -1;        /* kept open: closing it would drop our slot's lock */
static int my_slot = -1;     /* reset in a forked child */
static pid_t my_pid;
static uint64_t my_start;

static uint64_t at_most(uint64_t a, uint64_t b) { return a < b ? a : b; }

/* Under the lock: slot i's charges leave the total and its devices'. */
static void drop_charges(uint32_t i)
{
    R->total -= at_most(R->slot[i].bytes, R->total);
    R->slot[i].bytes = 0;
    for (int d = 0; d < GS_DEVS; d++) {
        R->dev[d].bytes -= at_most(R->dev_bytes[i][d], R->dev[d].bytes);
        R->dev_bytes[i][d] = 0;
    }
}

/* Under the lock: b more charged to slot i, on device d (-1: none known). */
static void add_charge(int i, int d, uint64_t b)
{
    R->slot[i].bytes += b;
    R->total += b;
    if (d >= 0 && d < GS_DEVS) {
        R->dev_bytes[i][d] += b;
        R->dev[d].bytes += b;
    }
}

/* Under the lock: b less charged to slot i (never below 0), on device d. */
static void sub_charge(int i, int d, uint64_t b)
{
    uint64_t x = at_most(R->slot[i].bytes, b);
    R->slot[i].bytes -= x;
    R->total -= at_most(x, R->total);
    if (d >= 0 && d < GS_DEVS) {
        uint64_t y = at_most(R->dev_bytes[i][d], x);
        R->dev_bytes[i][d] -= y;
        R->dev[d].bytes -= at_most(y, R->dev[d].bytes);
    }
}

/* Reads starttime and state of pid from /proc. 0 when found. */
static int proc_stat(pid_t pid, uint64_t *start, char *state)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return -1;
    buf[n] = 0;
    char *p = strrchr(buf, ')'); /* the command name may hold spaces */
    if (!p || p[1] != ' ')
        return -1;
    p += 2;
    *state = *p;
    /* state is field 3, starttime field 22: skip 19 more fields */
    for (int i = 0; i < 19 && p; i++) {
        p = strchr(p, ' ');
        if (p)
            p++;
    }
    if (!p)
        return -1;
    char digits[24];
    size_t len = 0;
    while (p[len] >= '0' && p[len] <= '9' && len < sizeof digits - 1)
        len++;
    memcpy(digits, p, len);
    digits[len] = 0;
    unsigned long long v;
    if (gs_parse_u64(digits, &v) < 0)
        return -1;
    *start = v;
    return 0;
}

/* The fcntl lock range of slot i: its own bytes in the file. */
static struct flock slot_range(uint32_t i, short type)
{
    struct flock l = {.l_type = type, .l_whence = SEEK_SET, .l_len = sizeof(struct gs_slot),
                      .l_start = (off_t)offsetof(struct gs_region, slot) + (off_t)i * (off_t)sizeof(struct gs_slot)};
    return l;
}

static int slot_dead(const struct gs_slot *s, uint32_t i)
{
    if (s->pid <= 0)
        return 0;
    if (s->locked) {
        struct flock l = slot_range(i, F_WRLCK);
        if (fcntl(R_fd, F_GETLK, &l) != 0)
            return 0; /* cannot tell: keep the charge */
        return l.l_type == F_UNLCK;
    }
    if (kill(s->pid, 0) == -1 && errno == ESRCH)
        return 1;
    uint64_t st;
    char state;
    if (proc_stat(s->pid, &st, &state) != 0)
        return 0; /* cannot tell (no /proc): keep the charge, err on the safe side */
    return state == 'Z' || state == 'X' || st != s->start;
}

/* Under the lock: frees slot i, its bytes leave the total. */
static void free_dead(uint32_t i)
{
    drop_charges(i);
    memset(&R->slot[i], 0, sizeof R->slot[i]);
}

/* Under the lock (all slots taken: rare): frees the slots of dead processes. */
static void reclaim_dead_locked(void)
{
    for (uint32_t i = 0; i < R->hiwater && i < GS_SLOTS; i++)
        if ((int)i != my_slot && R->slot[i].pid && slot_dead(&R->slot[i], i))
            free_dead(i);
}

static int lock(void);
static void unlock(void);

/* Without the lock: finds the slots of dead processes (a copy of each slot
 * checked, so no syscall runs under the mutex), then frees under it those
 * unchanged since and still dead. Returns how many were freed. */
static int reclaim_dead(void)
{
    uint32_t dead[64], n = 0, hi = __atomic_load_n(&R->hiwater, __ATOMIC_RELAXED);
    for (uint32_t i = 0; i < hi && i < GS_SLOTS && n < 64; i++) {
        struct gs_slot c = R->slot[i]; /* racy copy: confirmed under the lock */
        if ((int)i != my_slot && c.pid && slot_dead(&c, i))
            dead[n++] = i;
    }
    int freed = 0;
    if (n == 0 || lock() != 0)
        return 0;
    for (uint32_t k = 0; k < n; k++) {
        struct gs_slot *s = &R->slot[dead[k]];
        if (s->pid && (int)dead[k] != my_slot && slot_dead(s, dead[k])) {
            free_dead(dead[k]);
            freed++;
        }
    }
    unlock();
    return freed;
}

static int lock(void)
{
    int r = pthread_mutex_lock(&R->lock);
    if (r == EOWNERDEAD) {
        /* The holder died, perhaps between updating its slot and the total:
         * the slots are the truth, the total is rebuilt from them. */
        uint64_t t = 0;
        for (int i = 0; i < GS_SLOTS; i++)
            t += R->slot[i].bytes;
        R->total = t;
        for (int d = 0; d < GS_DEVS; d++) {
            R->dev[d].bytes = 0;
            for (int i = 0; i < GS_SLOTS; i++)
                R->dev[d].bytes += R->dev_bytes[i][d];
        }
        R->hiwater = GS_SLOTS;
        r = pthread_mutex_consistent(&R->lock);
    }
    return r;
}

static void unlock(void)
{
    pthread_mutex_unlock(&R->lock);
}

int gs_region_lock(void) { return R ? lock() : -1; }
void gs_region_unlock(void) { unlock(); }

struct gs_pacer *gs_region_pacer(uint32_t share, uint64_t window_ns, uint64_t now)
{
    if (!R || lock() != 0)
        return NULL;
    if (!R->pacer_ready) {
        gs_pacer_init(&R->pacer, share, window_ns, now);
        R->pacer_ready = 1;
    }
    unlock();
    return &R->pacer;
}

static int free_slot(void)
{
    for (int i = 0; i < GS_SLOTS; i++)
        if (R->slot[i].pid == 0)
            return i;
    return -1;
}

/* Under the lock: this process's slot, claimed on first use. */
static struct gs_slot *mine(void)
{
    if (my_slot >= 0)
        return &R->slot[my_slot];
    my_pid = getpid();
    char state;
    if (proc_stat(my_pid, &my_start, &state) != 0)
        my_start = 0;
    /* A slot of this pid and start time is this process's before an exec:
     * the old image's driver state (and memory) went with it, so its
     * charge goes too, and the slot is taken over. */
    int i = -1;
    for (uint32_t k = 0; k < R->hiwater && k < GS_SLOTS && i < 0; k++)
        if (R->slot[k].pid == my_pid && R->slot[k].start == my_start)
            i = (int)k;
    if (i >= 0)
        drop_charges((uint32_t)i);
    if (i < 0)
        i = free_slot();
    if (i < 0) {
        reclaim_dead_locked(); /* all slots taken: only now look for the dead */
        i = free_slot();
    }
    if (i < 0)
        return NULL;
    /* a new slot (or an exec'd image's) holds one context: charged even
     * over the cap (the driver made it), then allocations are refused */
    /* the lock says we live, to any process in any pid namespace */
    struct flock l = slot_range((uint32_t)i, F_WRLCK);
    R->slot[i].locked = R_fd >= 0 && fcntl(R_fd, F_SETLK, &l) == 0;
    R->slot[i].pid = my_pid;
    R->slot[i].start = my_start;
    R->slot[i].bytes = 0;
    add_charge(i, -1, gs_lim.context_bytes); /* no device known: the task's */
    if ((uint32_t)i >= R->hiwater)
        R->hiwater = i + 1;
    my_slot = i;
    return &R->slot[i];
}

static void after_fork_child(void);

/* After an exec (same pid, a new image): the old image's slot is taken
 * over at once (mine), so its charge is gone before anyone asks. */
static void adopt_slot(void)
{
    pid_t pid = getpid();
    if (lock() != 0)
        return;
    for (uint32_t k = 0; k < R->hiwater && k < GS_SLOTS; k++) {
        if (R->slot[k].pid == pid) {
            mine();
            break;
        }
    }
    unlock();
}

int gs_region_open(const char *path)
{
    int fd = gs_region_file(path);
    if (fd < 0)
        return -1;
    /* flock serialises first-time initialisation only; later the mutex rules */
    if (flock(fd, LOCK_EX) != 0) {
        close(fd);
        return -1;
    }
    int rc = -1;
    void *m = MAP_FAILED;
    off_t size = lseek(fd, 0, SEEK_END); /* not fstat: glibc 2.33 (glibc_compat.h) */
    if (size < 0)
        goto out;
    if ((size_t)size < sizeof(struct gs_region) &&
        ftruncate(fd, sizeof(struct gs_region)) != 0)
        goto out;
    m = mmap(NULL, sizeof(struct gs_region), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED)
        goto out;
    struct gs_region *r = m;
    if (r->magic != GS_MAGIC) {
        pthread_mutexattr_t a;
        pthread_mutexattr_init(&a);
        pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
        pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
        memset(r, 0, sizeof *r);
        pthread_mutex_init(&r->lock, &a);
        pthread_mutexattr_destroy(&a);
        r->nslots = GS_SLOTS;
        __atomic_store_n(&r->magic, GS_MAGIC, __ATOMIC_RELEASE);
    } else if (r->nslots != GS_SLOTS) {
        munmap(m, sizeof(struct gs_region));
        goto out; /* a region of another layout: refuse rather than misread it */
    }
    R = r;
    R_fd = fd;
    pthread_atfork(NULL, NULL, after_fork_child);
    adopt_slot();
    rc = 0;
out:
    flock(fd, LOCK_UN);
    if (rc != 0)
        close(fd);
    return rc;
}

int gs_region_charge(uint64_t bytes, uint64_t cap)
{
    int d = R ? gs_region_current_device() : -1;
    tl_dev = d;
    for (int pass = 0; R; pass++) {
        if (lock() != 0)
            return -1;
        struct gs_slot *s = mine();
        int rc = -1;
        if (s && R->total <= cap && bytes <= cap - R->total) {
            add_charge(my_slot, d, bytes);
            rc = 0;
        }
        unlock();
        /* only on the way to a refusal, outside the lock: look for the dead */
        if (rc == 0 || !s || pass > 0 || reclaim_dead() == 0)
            return rc;
    }
    return -1;
}

void gs_region_claim(void)
{
    if (!R || lock() != 0)
        return;
    mine();
    unlock();
}

void gs_region_force_charge(uint64_t bytes)
{
    if (!R)
        return;
    int d = op_device();
    if (lock() != 0)
        return;
    if (mine())
        add_charge(my_slot, d, bytes);
    unlock();
}

void gs_region_uncharge(uint64_t bytes)
{
    if (!R)
        return;
    int d = op_device();
    tl_dev = -2;
    if (lock() != 0)
        return;
    if (mine())
        sub_charge(my_slot, d, bytes);
    unlock();
}

/* ---- the task's devices ----------------------------------------------
 * Each charge is also the device's of the context current when it was
 * made (cuCtxGetDevice, its UUID by cuDeviceGetUuid): NVML reports each
 * device's own use, and launch.c paces each device apart. A record
 * (gs_track_add) keeps its charge's device, so its free returns it there
 * whatever context is current then: tl_dev carries the device from the
 * charge to the record, and from the record (gs_track_remove) to the
 * uncharge, on the thread doing both (-2: none carried). */
typedef CUresult (*ctx_device_fn)(CUdevice *);
typedef CUresult (*device_uuid_fn)(uint8_t *, CUdevice);
static ctx_device_fn ctx_device;
static device_uuid_fn device_uuid;
static pthread_once_t devsyms_once = PTHREAD_ONCE_INIT;
#define ORDINALS 64
static int ordinal_dev[ORDINALS]; /* a CUDA ordinal's index in the table, + 1; 0: not yet */

static void devsyms(void)
{
    ctx_device = (ctx_device_fn)gs_driver_sym("cuCtxGetDevice");
    device_uuid = (device_uuid_fn)gs_driver_sym("cuDeviceGetUuid_v2");
    if (!device_uuid)
        device_uuid = (device_uuid_fn)gs_driver_sym("cuDeviceGetUuid");
}

/* Under the lock: uuid's index in the table, added when new (add); -1
 * when absent or the table is full. */
static int dev_index(const uint8_t *uuid, int add)
{
    uint32_t n = R->ndev < GS_DEVS ? R->ndev : GS_DEVS;
    for (uint32_t i = 0; i < n; i++)
        if (memcmp(R->dev[i].uuid, uuid, 16) == 0)
            return (int)i;
    if (!add || n >= GS_DEVS)
        return -1;
    memcpy(R->dev[n].uuid, uuid, 16);
    R->ndev = n + 1;
    return (int)n;
}

int gs_region_current_device(void)
{
    if (!R)
        return -1;
    pthread_once(&devsyms_once, devsyms);
    CUdevice ord;
    if (!ctx_device || !device_uuid || ctx_device(&ord) != CUDA_SUCCESS || ord < 0)
        return -1;
    if (ord < ORDINALS) {
        int c = __atomic_load_n(&ordinal_dev[ord], __ATOMIC_RELAXED);
        if (c)
            return c - 1;
    }
    uint8_t uuid[16];
    if (device_uuid(uuid, ord) != CUDA_SUCCESS || lock() != 0)
        return -1;
    int d = dev_index(uuid, 1);
    unlock();
    if (d >= 0 && ord < ORDINALS)
        __atomic_store_n(&ordinal_dev[ord], d + 1, __ATOMIC_RELAXED);
    return d;
}

/* The device of a charge or uncharge made now: the one a record or a
 * charge of this thread carries, else the current context's. */
static int op_device(void)
{
    return tl_dev != -2 ? tl_dev : gs_region_current_device();
}

struct gs_pacer *gs_region_device_pacer(int dev, uint32_t share, uint64_t window_ns, uint64_t now)
{
    if (!R || dev < 0 || dev >= GS_DEVS || lock() != 0)
        return NULL;
    struct gs_device *d = &R->dev[dev];
    if (!d->pacer_ready) {
        gs_pacer_init(&d->pacer, share, window_ns, now);
        d->pacer_ready = 1;
    }
    unlock();
    return &d->pacer;
}

void gs_region_device_use(const uint8_t uuid[16], uint64_t *here, uint64_t *elsewhere)
{
    *here = *elsewhere = 0;
    if (!R)
        return;
    reclaim_dead();
    if (lock() != 0)
        return;
    int d = dev_index(uuid, 0);
    uint64_t known = 0, mine_b = d >= 0 ? R->dev[d].bytes : 0;
    for (uint32_t i = 0; i < R->ndev && i < GS_DEVS; i++)
        known += R->dev[i].bytes;
    *elsewhere = known - at_most(mine_b, known);
    *here = R->total - at_most(*elsewhere, R->total);
    unlock();
}

uint64_t gs_region_used(void)
{
    if (!R)
        return 0;
    reclaim_dead();
    if (lock() != 0)
        return 0;
    uint64_t u = R->total;
    unlock();
    return u;
}

/* A process that exits normally hands its slot back at once: the driver
 * frees its memory as it ends, and the others need not find it dead first. */
__attribute__((destructor)) static void release_slot(void)
{
    if (!R || my_slot < 0 || my_pid != getpid() || lock() != 0)
        return;
    drop_charges((uint32_t)my_slot);
    memset(&R->slot[my_slot], 0, sizeof R->slot[my_slot]);
    struct flock l = slot_range((uint32_t)my_slot, F_UNLCK);
    fcntl(R_fd, F_SETLK, &l);
    my_slot = -1;
    unlock();
}

/* ---- process-local allocation records -------------------------------- */

#define GS_BUCKETS 4096

struct gs_rec {
    struct gs_rec *next;
    uint64_t key;
    uint64_t bytes;
    int kind;
    int dev; /* the device it was charged on (-1: none known) */
};

static struct gs_rec *buckets[GS_BUCKETS];
static pthread_mutex_t track_lock = PTHREAD_MUTEX_INITIALIZER;

static unsigned bucket(int kind, uint64_t key)
{
    uint64_t h = (key ^ (uint64_t)kind) * 0x9E3779B97F4A7C15ull;
    return (unsigned)(h >> 52) & (GS_BUCKETS - 1);
}

int gs_track_add(enum gs_kind kind, uint64_t key, uint64_t bytes)
{
    struct gs_rec *r = malloc(sizeof *r);
    if (!r)
        return -1;
    r->key = key;
    r->bytes = bytes;
    r->kind = kind;
    r->dev = op_device();
    tl_dev = -2;
    unsigned b = bucket(kind, key);
    pthread_mutex_lock(&track_lock);
    r->next = buckets[b];
    buckets[b] = r;
    pthread_mutex_unlock(&track_lock);
    return 0;
}

int gs_track_remove(enum gs_kind kind, uint64_t key, uint64_t *bytes)
{
    unsigned b = bucket(kind, key);
    struct gs_rec *found = NULL;
    pthread_mutex_lock(&track_lock);
    for (struct gs_rec **p = &buckets[b]; *p; p = &(*p)->next) {
        if ((*p)->kind == (int)kind && (*p)->key == key) {
            found = *p;
            *p = found->next;
            break;
        }
    }
    pthread_mutex_unlock(&track_lock);
    if (!found)
        return -1;
    *bytes = found->bytes;
    tl_dev = found->dev; /* its uncharge (or its record again) goes there */
    free(found);
    return 0;
}

/* A forked child is a new process with nothing charged: it claims its own
 * slot on first use and forgets the parent's records (CUDA contexts do not
 * survive fork; the records are dropped, not freed, to stay fork-safe). */
static void after_fork_child(void)
{
    my_slot = -1;
    memset(buckets, 0, sizeof buckets);
    pthread_mutex_init(&track_lock, NULL);
}
