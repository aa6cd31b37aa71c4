/* gpushare CUDA interposer: time-slicing, Gandiva style (issue 46 part 2;
 * README, "Time-slicing").
 *
 * The time-sliced tasks of one GPU take turns: one quantum each, round
 * robin, in a rotation kept in the GPU's slice file (the plugin makes one
 * per GPU and links it into each reservation's directory as "slice", like
 * the TGS channel). A task is a member (its reservation, named by the
 * limits' timeslice_id, so the processes of one task are one member and a
 * task that forks gets no more turns); out of its turn its launches wait
 * in the launch hook (src/launch.c), its memory stays. In its turn it runs
 * with the POOL: the sum of the present members' compute caps (each from
 * its own read-only limits), at most the whole GPU; over a round each gets
 * the pool's time for its quantum, so the GPU's time-sliced tasks together
 * never run beyond the sum of their caps.
 *
 * The turn passes when the holder's quantum is over and another member is
 * waiting, or at once when the holder has not launched for a while (idle,
 * or dead: no process of it launches any more, so nobody waits for it).
 * A member is present while it launches or waits; one gone for
 * SLICE_STALE_NS gives its entry up. Each member counts the time it waited
 * for its turn (suspended_ns) and its turns, which the plugin reports.
 *
 * Side by side (issue 46 part 3): capped tasks (compute_pct < 100, not
 * time-sliced) join the same rotation (gs_turns_open), so that two of them
 * never have kernels on the GPU at once. Without MPS the GPU time-slices
 * the contexts of two processes that both have work: each switch costs
 * time, and the events around a kernel then also span the other's slice,
 * so a task paced on its own measurements is charged for its neighbour's
 * work (on an H200 and an H100, caps of 30% and 70% gave 30% and 63.5%).
 * In turns, the GPU switches once a turn, and a kernel's measured time is
 * its own. A capped member's turn is its share of a round (turn_ms, 100 ms
 * by default: 30 ms of 100 for a 30% cap), and in it the holder runs with
 * the pool of the caps of the members that want the GPU (the holder, those
 * waiting, those that launched in their turn within a round: wants), so
 * that over a round each gets its cap; a member alone,
 * or beside idle ones, runs at its own cap, paced as before. Under MPS a
 * task's compute_pct is 100 (its limit is MPS's thread percentage), so it
 * never takes turns: MPS runs clients' kernels together, without switches. */
#define _GNU_SOURCE
#include "gpushare.h"

#include <errno.h>
#include <stddef.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define MS 1000000ull
#define SLICE_PRESENT_NS (1000 * MS) /* a member not seen for this long is absent */
#define SLICE_STALE_NS (10000 * MS)  /* ... and for this long gives its entry up */
#define SLICE_IDLE_MAX_NS (200 * MS) /* a holder idle this long (or a quarter quantum) loses its turn */
#define TURN_ROUND_MS 100            /* a round of capped turns when the limits do not say (turn_ms) */
#define TURN_IDLE_MIN_NS (10 * MS)   /* a capped holder is idle after this long at least */

_Static_assert(sizeof(struct gs_slice_member) == 64, "plugin/slice.go reads 64-byte members");
_Static_assert(offsetof(struct gs_slice, m) == 96, "plugin/slice.go reads members from offset 96");
_Static_assert(sizeof(struct gs_slice) <= GS_SLICE_FILE_SIZE, "the rotation fits its file");

uint64_t gs_slice_quantum_ns;
static struct gs_slice *S;
static int me = -1;           /* this task's member, -1: none yet */
static uint64_t my_id;
static int capped;            /* a capped task taking turns (gs_turns_open), not time-sliced */
static uint64_t turn_ns;      /* ... its turn: its share of a round */

/* The member's id: the limits' timeslice_id, else a hash of the
 * reservation's directory (an older plugin; all of a task's processes
 * read the same). Never 0 (a free entry). */
static uint64_t member_id(void)
{
    uint64_t h = gs_lim.timeslice_id;
    if (!h) {
        h = 1469598103934665603ull; /* FNV-1a */
        for (const char *c = gs_dir; *c; c++)
            h = (h ^ (uint8_t)*c) * 1099511628211ull;
    }
    return h ? h : 1;
}

/* GPUSHARE_TIMESLICE_QUANTUM_MS (the scheduler's pin writes it for a
 * time-sliced group): whole milliseconds, clamped to [10 ms, 1 h] (the
 * scheduler's timeslice.quantum range); absent,
 * not time-sliced; malformed, not time-sliced, with a line on stderr. */
void gs_slice_env(const char *v)
{
    unsigned long long ms;
    if (!v)
        return;
    if (gs_parse_u64(v, &ms) < 0 || ms == 0) {
        fprintf(stderr, "gpushare: GPUSHARE_TIMESLICE_QUANTUM_MS=%s: not a whole number of milliseconds "
                        "over 0: launches are not time-sliced\n", v);
        return;
    }
    if (ms < 10)
        ms = 10;
    if (ms > 3600000)
        ms = 3600000;
    gs_slice_quantum_ns = ms * MS;
}

/* Maps the rotation; what each failure means for the task is said with
 * "so" (a missing file is said only when want is set). */
static int open_rotation(int want, const char *so)
{
    char path[sizeof gs_dir + 8];
    snprintf(path, sizeof path, "%s/slice", gs_dir);
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0) {
        if (want || errno != ENOENT)
            fprintf(stderr, "gpushare: %s cannot be opened (%m): %s\n", path, so);
        return -1;
    }
    void *m = MAP_FAILED; /* its size by lseek: fstat needs glibc 2.33 (glibc_compat.h) */
    if (lseek(fd, 0, SEEK_END) == GS_SLICE_FILE_SIZE)
        m = mmap(NULL, GS_SLICE_FILE_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    struct gs_slice *s = m;
    if (m == MAP_FAILED || s->magic != GS_SLICE_MAGIC || s->version != GS_SLICE_VERSION) {
        fprintf(stderr, "gpushare: %s is not a time-slice rotation of this version: %s\n", path, so);
        if (m != MAP_FAILED)
            munmap(m, GS_SLICE_FILE_SIZE);
        return -1;
    }
    /* the mutex, made by the first process to map the file (the plugin
     * writes zeros): 0 not made, 1 being made, 2 made */
    uint32_t zero = 0;
    if (__atomic_compare_exchange_n(&s->init, &zero, 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
        pthread_mutexattr_t a;
        pthread_mutexattr_init(&a);
        pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
        pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
        pthread_mutex_init(&s->lock.mu, &a);
        pthread_mutexattr_destroy(&a);
        __atomic_store_n(&s->init, 2, __ATOMIC_RELEASE);
    }
    for (int i = 0; i < 1000 && __atomic_load_n(&s->init, __ATOMIC_ACQUIRE) != 2; i++)
        usleep(1000);
    if (__atomic_load_n(&s->init, __ATOMIC_ACQUIRE) != 2) {
        fprintf(stderr, "gpushare: %s: its lock was never made: %s\n", path, so);
        munmap(m, GS_SLICE_FILE_SIZE);
        return -1;
    }
    my_id = member_id();
    S = s;
    return 0;
}

int gs_slice_open(void)
{
    return open_rotation(1, "GPUSHARE_TIMESLICE_QUANTUM_MS is set, but launches are not time-sliced");
}

int gs_turns_open(void)
{
    uint64_t round = gs_lim.turn_set ? gs_lim.turn_ms : TURN_ROUND_MS;
    if (round == 0 || gs_lim.compute_pct >= 100)
        return -1;
    if (open_rotation(0, "this task is paced on its own, not in turns with the GPU's other capped tasks") != 0)
        return -1;
    turn_ns = round * MS * (uint64_t)gs_lim.compute_pct / 100;
    if (turn_ns < MS)
        turn_ns = MS;
    capped = 1;
    return 0;
}

static int lock(void)
{
    int r = pthread_mutex_lock(&S->lock.mu);
    if (r == EOWNERDEAD) /* a process died inside: the state is a few words, each whole */
        r = pthread_mutex_consistent(&S->lock.mu);
    return r;
}

static int present(const struct gs_slice_member *m, uint64_t now)
{
    return m->id && m->seen_ns + SLICE_PRESENT_NS >= now; /* seen_ns may be past now: read before the lock */
}

/* This task's entry, found or claimed (a free one, or one absent for
 * SLICE_STALE_NS); -1 when the table is full. */
static int mine(uint64_t now)
{
    if (me >= 0 && S->m[me].id == my_id)
        return me;
    int free = -1;
    for (int i = 0; i < GS_SLICE_MEMBERS; i++) {
        if (S->m[i].id == my_id)
            return me = i;
        if (free < 0 && (!S->m[i].id || (S->m[i].seen_ns + SLICE_STALE_NS < now && S->holder != (uint32_t)i + 1)))
            free = i;
    }
    if (free < 0)
        return -1;
    memset(&S->m[free], 0, sizeof S->m[free]);
    S->m[free].id = my_id;
    return me = free;
}

/* The turn's length: the least quantum of the present members, so a task
 * that sets a longer one for itself lengthens nobody's wait. */
static uint64_t quantum(uint64_t now)
{
    uint64_t q = capped ? turn_ns : gs_slice_quantum_ns;
    for (int i = 0; i < GS_SLICE_MEMBERS; i++)
        if (present(&S->m[i], now) && S->m[i].quantum_ns && S->m[i].quantum_ns < q)
            q = S->m[i].quantum_ns;
    return q;
}

/* The next waiting present member after h (1-based; 0 none), round robin;
 * -1 when nobody waits. */
static int next_waiting(uint32_t h, uint64_t now)
{
    for (int k = 1; k <= GS_SLICE_MEMBERS; k++) {
        int j = (int)((h + GS_SLICE_MEMBERS - 1 + (uint32_t)k) % GS_SLICE_MEMBERS);
        if (present(&S->m[j], now) && S->m[j].want_since_ns)
            return j;
    }
    return -1;
}

/* Member j's turn: a capped member's is its own (its share of a round), a
 * time-sliced one's the rotation's quantum. */
static uint64_t turn_of(const struct gs_slice_member *m, uint64_t now)
{
    return m->flags & GS_SLICE_CAPPED ? m->quantum_ns : quantum(now);
}

static void give(int j, uint64_t now)
{
    struct gs_slice_member *m = &S->m[j];
    if (m->want_since_ns && now > m->want_since_ns)
        m->suspended_ns += now - m->want_since_ns;
    m->want_since_ns = 0;
    m->turns++;
    m->active_ns = now;
    S->holder = (uint32_t)j + 1;
    S->turn_end_ns = now + turn_of(m, now);
    S->turns++;
}

/* Whether capped member o wants the GPU: it waits for a turn, or launched
 * in its own turn less than a round ago (a task between two launches, or
 * waiting for its kernels, still wants it). */
static int wants(const struct gs_slice_member *o, uint64_t now)
{
    uint64_t round = o->share ? o->quantum_ns * GS_SHARE_FULL / o->share : 0;
    return o->want_since_ns || o->active_ns + round > now;
}

/* The holder's pool: the caps of the present members, at most the GPU; of
 * capped ones only those that want the GPU (the holder, i, and the
 * others: wants), so that a capped task beside idle ones keeps its own cap. */
static uint32_t pool_of(int i, uint64_t now)
{
    uint32_t sum = 0;
    for (int j = 0; j < GS_SLICE_MEMBERS; j++) {
        const struct gs_slice_member *o = &S->m[j];
        if (present(o, now) && (!capped || j == i || wants(o, now)))
            sum += o->share > GS_SHARE_FULL ? GS_SHARE_FULL : o->share;
    }
    return sum < GS_SHARE_FULL ? sum : GS_SHARE_FULL;
}

uint64_t gs_slice_turn(uint64_t now, struct gs_turn *t)
{
    if (!S || lock() != 0)
        return 0;
    int i = mine(now);
    if (i < 0) {
        static int said;
        if (!__atomic_exchange_n(&said, 1, __ATOMIC_RELAXED))
            fprintf(stderr, "gpushare: the GPU's time-slice rotation is full (%d tasks): launches are not time-sliced\n",
                    GS_SLICE_MEMBERS);
        pthread_mutex_unlock(&S->lock.mu);
        return 0;
    }
    struct gs_slice_member *m = &S->m[i];
    if (!present(m, now))
        m->want_since_ns = 0; /* back after an absence: that was no wait for a turn */
    m->seen_ns = now;
    m->quantum_ns = capped ? turn_ns : gs_slice_quantum_ns;
    m->flags = capped ? GS_SLICE_CAPPED : 0;
    m->share = (uint32_t)gs_lim.compute_pct * 10; /* from the read-only limits */
    uint32_t h = S->holder;
    const struct gs_slice_member *hm = h >= 1 && h <= GS_SLICE_MEMBERS && S->m[h - 1].id ? &S->m[h - 1] : NULL;
    uint64_t q = quantum(now), idle = q / 4 < SLICE_IDLE_MAX_NS ? q / 4 : SLICE_IDLE_MAX_NS;
    if (capped && idle < TURN_IDLE_MIN_NS) /* a short turn: launches a few ms apart are still busy */
        idle = TURN_IDLE_MIN_NS;
    if (hm != m) {
        if (!m->want_since_ns)
            m->want_since_ns = now; /* suspended from now, until its turn */
        if (!hm || now >= S->turn_end_ns || now >= hm->active_ns + idle || !present(hm, now))
            give(next_waiting(h, now), now); /* m waits: there is one */
    } else if (now >= S->turn_end_ns) {
        int n = next_waiting(h, now);
        if (n >= 0)
            give(n, now);
        else
            S->turn_end_ns = now + turn_of(m, now); /* nobody waits: another turn */
    }
    uint64_t wait = 0;
    if (S->holder == (uint32_t)i + 1) {
        static uint64_t seen_turn; /* the turns this process saw begin */
        t->resumed = m->turns != seen_turn;
        seen_turn = m->turns;
        m->active_ns = now;
        t->pool = pool_of(i, now);
        t->left = S->turn_end_ns > now ? S->turn_end_ns - now : 0;
        t->ask = idle / 2 > MS ? idle / 2 : MS;
    } else {
        /* until the quantum's end, or the holder seen idle */
        const struct gs_slice_member *o = &S->m[S->holder - 1];
        wait = S->turn_end_ns > now ? S->turn_end_ns - now : MS;
        uint64_t until_idle = o->active_ns + idle > now ? o->active_ns + idle - now : MS;
        if (until_idle < wait)
            wait = until_idle;
    }
    pthread_mutex_unlock(&S->lock.mu);
    return wait;
}
