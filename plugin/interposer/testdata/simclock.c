/* The fake GPU's clock: a simulated CLOCK_MONOTONIC for the compute tests.
 *
 * LD_PRELOADed (before the library) into every process of a test that
 * shares one fake GPU, with FAKECUDA_CLOCK naming a small file they all
 * map. It replaces CLOCK_MONOTONIC (clock_gettime) and the sleeps
 * (nanosleep, clock_nanosleep on CLOCK_MONOTONIC, usleep) with a virtual
 * clock kept in that file, so the library's pacer, the TGS loop, the fake
 * GPU's timeline (testdata/fakegpu.c: kernels end at a virtual time, a
 * synchronize sleeps until then) and the test program's windows all read
 * one clock that the host's speed and load cannot move.
 *
 * A sequential discrete-event simulation whose events are the programs'
 * own calls: one participating thread runs at a time; when it waits (a
 * sleep, a wait for a kernel) the next one due runs, and virtual time jumps
 * to its wake-up. Host CPU time takes no virtual time; a thread the host
 * keeps off the CPU holds the clock, it does not miss it. Threads due at
 * the same virtual time run in an order fixed by their keys (the process's
 * FAKECUDA_PARTY, then the thread's place in its process: main first, then
 * in creation order) and the time, shuffled so that no process always goes
 * first, as none does on a GPU; so a run's figures are the same on every
 * run, on any machine, under any load.
 *
 * Participants ("actors"): the main thread of each process (from load; it
 * waits for its turn before main), and every thread made through
 * pthread_create (registered by its creator before it exists; it waits for
 * its turn before it runs); a thread leaves at its end, a process at exit
 * (or, killed, when a waiter finds its pid gone). A thread blocked in
 * pthread_join is away: it needs no time, and the threads it waits for do;
 * back, it waits for its turn. A thread that blocks otherwise (a mutex)
 * while it has the turn holds the simulation: the library never sleeps
 * holding a lock another thread of the test waits for, and with one thread
 * running at a time no thread waits for a lock another one holds.
 *
 * FAKECUDA_PARTIES=N: the clock stands still until N processes have joined
 * the round, so processes started together start at the same virtual time
 * however far apart the host starts them (a round begins when a process
 * joins a clock nobody uses; the clock carries on from where it stood). A
 * party that never comes is waited for 60 s of real time, then the round
 * goes on with a line on stderr: a liveness bound, not part of any figure.
 *
 * Without FAKECUDA_CLOCK every call is the C library's. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))
#define MAGIC 0x636c6b73u /* "sklc" */
#define ACTORS 512
#define START_NS 1000000000000ull /* 1000 s: far from 0, as a host's clock is */
#define PARTY_WAIT_NS 60000000000ull

enum { FREE = 0, RUN, WAIT, AWAY };

struct actor {
    int32_t pid, state;
    uint32_t seq; /* futex word: bumped when the actor is woken */
    uint32_t pad;
    uint64_t wake; /* WAIT: the virtual time it sleeps until */
    uint64_t key;  /* the order among actors due at the same time */
};

struct clk {
    uint32_t magic;
    int32_t parties, joined; /* this round's */
    int32_t pad;
    uint64_t now;
    pthread_mutex_t mu; /* robust, process-shared */
    struct actor a[ACTORS];
};

static struct clk *C;
static __thread int me = -1;
static int my_parties = 1;
static uint64_t my_party;   /* FAKECUDA_PARTY: this process's place in the run */
static uint32_t my_threads; /* threads made by this process, under the lock */

static int (*real_gettime)(clockid_t, struct timespec *);
static int (*real_nanosleep)(const struct timespec *, struct timespec *);
static int (*real_clock_nanosleep)(clockid_t, int, const struct timespec *, struct timespec *);
static int (*real_usleep)(useconds_t);
static int (*real_create)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);
static int (*real_join)(pthread_t, void **);

static void lock(void)
{
    if (pthread_mutex_lock(&C->mu) == EOWNERDEAD)
        pthread_mutex_consistent(&C->mu); /* a killed holder: its slots are reaped */
}

static void unlock(void) { pthread_mutex_unlock(&C->mu); }

static void futex_wake(uint32_t *w)
{
    syscall(SYS_futex, w, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

static uint64_t real_ns(void)
{
    struct timespec ts;
    real_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* A free slot for this process's thread number n, as state (WAIT: due
 * now); -1 when none is left (the thread then runs outside the
 * simulation, reading its clock). Under the lock. */
static int take(uint32_t n, int state)
{
    for (int i = 0; i < ACTORS; i++)
        if (C->a[i].state == FREE) {
            C->a[i].pid = getpid();
            C->a[i].state = state;
            C->a[i].wake = C->now;
            C->a[i].key = my_party << 32 | n;
            return i;
        }
    fprintf(stderr, "simclock: more than %d threads: one left out of the simulation\n", ACTORS);
    return -1;
}

static void drop(int i)
{
    C->a[i].state = FREE;
    C->a[i].pid = 0;
}

/* The order of actors due at the same time: a hash of key and time (a
 * fixed shuffle per instant, so no process always goes first), then the
 * key. */
static uint64_t rank(const struct actor *a)
{
    uint64_t x = a->key ^ (a->wake * 0x9e3779b97f4a7c15ull);
    x ^= x >> 30, x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27, x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static int before(const struct actor *a, const struct actor *b)
{
    if (a->wake != b->wake)
        return a->wake < b->wake;
    uint64_t ra = rank(a), rb = rank(b);
    return ra != rb ? ra < rb : a->key < b->key;
}

/* Once no actor runs (and the round's parties are in), the next actor due
 * (the earliest wake-up, then in the order of before) gets the turn, and
 * time jumps to its wake-up. Under the lock. */
static void advance(void)
{
    if (C->joined < C->parties)
        return;
    int next = -1;
    for (int i = 0; i < ACTORS; i++) {
        struct actor *a = &C->a[i];
        if (a->state == RUN)
            return;
        if (a->state == WAIT && (next < 0 || before(a, &C->a[next])))
            next = i;
    }
    if (next < 0)
        return;
    struct actor *a = &C->a[next];
    if (a->wake > C->now)
        __atomic_store_n(&C->now, a->wake, __ATOMIC_RELEASE);
    a->state = RUN;
    __atomic_add_fetch(&a->seq, 1, __ATOMIC_RELEASE);
    futex_wake(&a->seq);
}

/* The slots of processes that died without leaving. Under the lock. */
static void reap(void)
{
    for (int i = 0; i < ACTORS; i++)
        if (C->a[i].state != FREE && kill(C->a[i].pid, 0) != 0 && errno == ESRCH)
            drop(i);
}

/* Waits, under the lock, until actor i has the turn (it is WAIT, due at
 * some time: another actor's advance gives it the turn). */
static void turn(int i)
{
    struct actor *a = &C->a[i];
    advance();
    uint64_t since = real_ns();
    while (a->state == WAIT) {
        uint32_t seq = a->seq;
        unlock();
        struct timespec poll = {0, 100000000}; /* real time: to notice the dead */
        syscall(SYS_futex, &a->seq, FUTEX_WAIT, seq, &poll, NULL, 0);
        lock();
        if (a->state != WAIT)
            break;
        reap();
        if (C->joined < C->parties && real_ns() - since > PARTY_WAIT_NS) {
            fprintf(stderr, "simclock: %d of %d processes joined in 60 s: going on without the others\n",
                    C->joined, C->parties);
            C->parties = C->joined;
        }
        advance();
    }
}

static void sleep_until(uint64_t t)
{
    lock();
    if (me < 0)
        me = take(++my_threads, RUN);
    if (me >= 0 && t > C->now) {
        C->a[me].state = WAIT;
        C->a[me].wake = t;
        turn(me);
    }
    unlock();
}

static uint64_t now(void) { return __atomic_load_n(&C->now, __ATOMIC_ACQUIRE); }

static void leave(void)
{
    if (!C)
        return;
    lock();
    int32_t pid = getpid();
    for (int i = 0; i < ACTORS; i++)
        if (C->a[i].state != FREE && C->a[i].pid == pid)
            drop(i);
    me = -1;
    advance();
    unlock();
}

/* A forked child is a new process of the round: its own main thread,
 * running (its parent, which has the turn, waits for it or goes on). */
static void after_fork_child(void)
{
    lock();
    my_threads = 0;
    me = take(0, RUN);
    unlock();
}

#define REAL(var, name) *(void **)&var = dlsym(RTLD_NEXT, name)

__attribute__((constructor)) static void init(void)
{
    REAL(real_gettime, "clock_gettime");
    REAL(real_nanosleep, "nanosleep");
    REAL(real_clock_nanosleep, "clock_nanosleep");
    REAL(real_usleep, "usleep");
    REAL(real_create, "pthread_create");
    REAL(real_join, "pthread_join");
    const char *path = getenv("FAKECUDA_CLOCK"), *parties = getenv("FAKECUDA_PARTIES");
    const char *party = getenv("FAKECUDA_PARTY");
    if (!path || !*path)
        return;
    if (parties && atoi(parties) > 0)
        my_parties = atoi(parties);
    if (party && atoi(party) > 0)
        my_party = (uint64_t)atoi(party);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (fd < 0 || flock(fd, LOCK_EX) != 0 || ftruncate(fd, sizeof(struct clk)) != 0) {
        fprintf(stderr, "simclock: cannot open %s: %m\n", path);
        exit(3);
    }
    void *m = mmap(NULL, sizeof(struct clk), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) {
        fprintf(stderr, "simclock: cannot map %s: %m\n", path);
        exit(3);
    }
    struct clk *c = m;
    if (c->magic != MAGIC) { /* the first process: flock keeps the others out */
        pthread_mutexattr_t a;
        pthread_mutexattr_init(&a);
        pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
        pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
        pthread_mutex_init(&c->mu, &a);
        pthread_mutexattr_destroy(&a);
        c->now = START_NS;
        c->magic = MAGIC;
    }
    flock(fd, LOCK_UN);
    close(fd);
    C = c;
    lock();
    reap();
    int used = 0;
    for (int i = 0; i < ACTORS && !used; i++)
        used = C->a[i].state != FREE;
    if (!used) /* a new round */
        C->joined = C->parties = 0;
    C->joined++;
    if (my_parties > C->parties)
        C->parties = my_parties;
    me = take(0, WAIT); /* main waits for its turn: the parties in key order */
    if (me >= 0)
        turn(me);
    unlock();
    pthread_atfork(NULL, NULL, after_fork_child);
    atexit(leave);
}

static int simulated(clockid_t clk) { return C && clk == CLOCK_MONOTONIC; }

static uint64_t ns_of(const struct timespec *ts)
{
    return (uint64_t)ts->tv_sec * 1000000000ull + (uint64_t)ts->tv_nsec;
}

EXPORT int clock_gettime(clockid_t clk, struct timespec *ts)
{
    if (!simulated(clk))
        return real_gettime(clk, ts);
    uint64_t t = now();
    ts->tv_sec = (time_t)(t / 1000000000ull);
    ts->tv_nsec = (long)(t % 1000000000ull);
    return 0;
}

EXPORT int nanosleep(const struct timespec *req, struct timespec *rem)
{
    if (!C)
        return real_nanosleep(req, rem);
    sleep_until(now() + ns_of(req));
    if (rem)
        rem->tv_sec = 0, rem->tv_nsec = 0;
    return 0;
}

EXPORT int clock_nanosleep(clockid_t clk, int flags, const struct timespec *req, struct timespec *rem)
{
    if (!simulated(clk))
        return real_clock_nanosleep(clk, flags, req, rem);
    sleep_until(flags & TIMER_ABSTIME ? ns_of(req) : now() + ns_of(req));
    if (rem && !(flags & TIMER_ABSTIME))
        rem->tv_sec = 0, rem->tv_nsec = 0;
    return 0;
}

EXPORT int usleep(useconds_t us)
{
    if (!C)
        return real_usleep(us);
    sleep_until(now() + (uint64_t)us * 1000);
    return 0;
}

struct start {
    void *(*fn)(void *);
    void *arg;
    int slot;
};

static void *trampoline(void *p)
{
    struct start s = *(struct start *)p;
    free(p);
    me = s.slot;
    if (me >= 0) { /* its turn first */
        lock();
        turn(me);
        unlock();
    }
    void *r = s.fn(s.arg);
    if (me >= 0) {
        lock();
        drop(me);
        me = -1;
        advance();
        unlock();
    }
    return r;
}

EXPORT int pthread_create(pthread_t *th, const pthread_attr_t *attr, void *(*fn)(void *), void *arg)
{
    struct start *s;
    if (!C || !(s = malloc(sizeof *s)))
        return real_create(th, attr, fn, arg);
    s->fn = fn;
    s->arg = arg;
    lock();
    s->slot = take(++my_threads, WAIT);
    unlock();
    int r = real_create(th, attr, trampoline, s);
    if (r != 0) {
        lock();
        if (s->slot >= 0)
            drop(s->slot);
        advance();
        unlock();
        free(s);
    }
    return r;
}

EXPORT int pthread_join(pthread_t th, void **ret)
{
    if (!C || me < 0)
        return real_join(th, ret);
    lock();
    C->a[me].state = AWAY;
    advance();
    unlock();
    int r = real_join(th, ret);
    lock();
    C->a[me].state = WAIT; /* back: due now, in its turn */
    C->a[me].wake = C->now;
    turn(me);
    unlock();
    return r;
}
