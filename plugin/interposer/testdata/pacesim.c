/* A model of one time-sliced GPU shared by two processes, driving the pure
 * control code of src/pace.c with a simulated clock (no GPU, no sleeping).
 *
 * The GPU runs one kernel at a time, in launch order (a context switch at
 * kernel boundaries: time-slicing at its coarsest). Each process launches a
 * kernel, waits for it, spends its CPU gap, launches again; its pacer is
 * told each kernel's measured run time. Kernel run times vary +-25%
 * (a fixed pseudo-random sequence, so runs are reproducible).
 *
 *   pacesim caps PCT_A KERN_A_US PCT_B KERN_B_US SECONDS [nocontrol]
 *     two saturating processes under compute caps: "share A <pct>", "share B <pct>"
 *   pacesim tgs steady|bursty SECONDS FROM [nocontrol]
 *     production alone, then with an opportunistic job under the TGS loop;
 *     figures over [FROM, SECONDS]: production's work alone and shared, the
 *     idle time it leaves alone, the opportunistic job's GPU time.
 *     production: 4 ms kernels and GAP us (default 1000) of CPU between them;
 *     the opportunistic job: OPPK us kernels (default 2000) back to back.
 *   pacesim step PCT KERN_US FACTOR SECONDS WINDOW
 *     one saturating process at PCT, alone on the GPU, measuring one launch
 *     in GS_SAMPLE as the library does (src/pace.h, gs_sampler): kernels of
 *     KERN_US for SECONDS, then FACTOR times as long; "window <i> <pct>",
 *     its share over each run of WINDOW kernels after the step (while its
 *     GPU time stays under 40 windows' worth), and "overall <pct>" over
 *     them all
 *   pacesim crumbs PCT STEP_NS
 *     a pacer at PCT owes one 1 ms kernel; it is asked for its delay every
 *     STEP_NS ns (threads of a task taking it in turn): "paid after ms
 *     <ms>", when the delay is 0 (-1: not within a second)
 * "nocontrol" runs the same without the controller (pacer and TGS off). */
#include "../src/pace.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MS 1000000ull
#define SEC 1000000000ull

enum { CAPPED, PRODUCTION, OPPORTUNISTIC };

struct proc {
    int cls;
    uint64_t kern_ns, gap_ns;
    int running, sampled, measured; /* sampled: one launch in GS_SAMPLE measured */
    uint32_t count;
    struct gs_sampler samp;
    uint64_t t_next, charged, cur_kern;
    uint64_t busy, work; /* within the measured interval */
    struct gs_pacer pacer;
    struct gs_tgs tgs;
    struct gs_tgs_producer producer;
    void (*on_launch)(struct proc *, uint64_t now); /* the step scenario's */
};

static int control = 1, bursty;
static uint64_t rng = 88172645463325252ull;

static uint64_t jitter(uint64_t ns)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return ns * 3 / 4 + rng % (ns / 2 + 1);
}

/* Production's load: steady, or 1.5 s of work then 1 s idle. */
static int active(uint64_t t, uint64_t *resume)
{
    if (!bursty)
        return 1;
    uint64_t ph = t % (2500 * MS);
    *resume = t - ph + 2500 * MS;
    return ph < 1500 * MS;
}

/* Runs the processes from 0 to end; busy and work are counted from `from`. */
static void simulate(struct proc *p, int n, uint64_t from, uint64_t end)
{
    struct gs_tgs_channel chan = {.magic = GS_TGS_MAGIC};
    uint64_t gpu_free = 0;
    for (;;) {
        struct proc *q = &p[0];
        for (int i = 1; i < n; i++)
            if (p[i].t_next < q->t_next)
                q = &p[i];
        uint64_t now = q->t_next;
        if (now >= end)
            return;
        if (q->running) { /* its kernel finished: the measurement */
            if (q->measured)
                gs_pacer_done(&q->pacer, q->charged, q->cur_kern, q->count);
            q->running = 0;
            q->t_next = now + q->gap_ns;
            continue;
        }
        uint64_t resume;
        if (q->cls == PRODUCTION && !active(now, &resume)) {
            q->t_next = resume;
            continue;
        }
        if (q->cls == OPPORTUNISTIC && control)
            gs_pacer_set_share(&q->pacer, gs_tgs_share(&q->tgs, &chan, now), now);
        uint64_t d = control ? gs_pacer_delay(&q->pacer, now) : 0;
        if (d) {
            q->t_next = now + d;
            continue;
        }
        q->charged = gs_pacer_launch(&q->pacer, now);
        q->measured = !q->sampled || gs_sample_pick(&q->samp, &q->pacer);
        if (q->measured)
            q->count = q->sampled ? gs_sample_take(&q->samp, &q->charged) : 1;
        else
            gs_sample_skip(&q->samp, q->charged);
        if (q->on_launch)
            q->on_launch(q, now);
        if (q->cls == PRODUCTION)
            gs_tgs_produce(&chan, &q->producer, now, 1);
        q->cur_kern = jitter(q->kern_ns);
        uint64_t start = now > gpu_free ? now : gpu_free;
        gpu_free = start + q->cur_kern;
        if (start >= from) {
            q->busy += q->cur_kern;
            q->work++;
        }
        q->running = 1;
        q->t_next = gpu_free;
    }
}

/* The step scenario: at `at` the kernels grow `factor` times; from the
 * first launch after it, each run of `window` launches is a window (from
 * its first launch to the next window's first). */
static struct {
    uint64_t at, factor, window, n_launch, t0, busy0;
    int n, started;
    double busy[40], wall[40];
} step;

static void step_launch(struct proc *q, uint64_t now)
{
    if (now < step.at)
        return;
    if (!step.started) {
        step.started = 1;
        q->kern_ns *= step.factor;
        q->cur_kern = 0;
        step.t0 = now;
        step.busy0 = q->busy;
    }
    if (step.n_launch++ == step.window && step.n < 40) {
        step.busy[step.n] = (double)(q->busy - step.busy0);
        step.wall[step.n++] = (double)(now - step.t0);
        step.t0 = now, step.busy0 = q->busy, step.n_launch = 1;
    }
}

static void init(struct proc *p, int cls, uint32_t share, uint64_t kern, uint64_t gap)
{
    memset(p, 0, sizeof *p);
    p->cls = cls;
    p->kern_ns = kern;
    p->gap_ns = gap;
    gs_pacer_init(&p->pacer, control ? share : GS_SHARE_FULL, 100 * MS, 0);
    gs_tgs_init(&p->tgs, 100 * MS, 0);
    p->producer.idle_ns = 50 * MS;
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[argc - 1], "nocontrol") == 0) {
        control = 0;
        argc--;
    }
    if (argc == 7 && strcmp(argv[1], "caps") == 0) {
        uint64_t end = strtoull(argv[6], NULL, 10) * SEC;
        struct proc p[2];
        init(&p[0], CAPPED, atoi(argv[2]) * 10, strtoull(argv[3], NULL, 10) * 1000, 0);
        init(&p[1], CAPPED, atoi(argv[4]) * 10, strtoull(argv[5], NULL, 10) * 1000, 0);
        simulate(p, 2, 0, end);
        printf("share A %.2f\nshare B %.2f\n", 100.0 * p[0].busy / end, 100.0 * p[1].busy / end);
        return 0;
    }
    if (argc == 5 && strcmp(argv[1], "tgs") == 0) {
        bursty = strcmp(argv[2], "bursty") == 0;
        uint64_t end = strtoull(argv[3], NULL, 10) * SEC, from = strtoull(argv[4], NULL, 10) * SEC;
        uint64_t opp_kern = getenv("OPPK") ? strtoull(getenv("OPPK"), NULL, 10) * 1000 : 2 * MS;
        uint64_t prod_gap = getenv("GAP") ? strtoull(getenv("GAP"), NULL, 10) * 1000 : MS;
        struct proc alone[1], shared[2];
        init(&alone[0], PRODUCTION, GS_SHARE_FULL, 4 * MS, prod_gap);
        simulate(alone, 1, from, end);
        rng = 88172645463325252ull; /* the same kernels again */
        init(&shared[0], PRODUCTION, GS_SHARE_FULL, 4 * MS, prod_gap);
        init(&shared[1], OPPORTUNISTIC, GS_SHARE_FULL, opp_kern, 0);
        simulate(shared, 2, from, end);
        uint64_t idle = (end - from) - alone[0].busy;
        printf("production alone %llu\nproduction shared %llu\n",
               (unsigned long long)alone[0].work, (unsigned long long)shared[0].work);
        printf("production kept %.2f\n", 100.0 * shared[0].work / alone[0].work);
        printf("idle alone ms %llu\nopportunistic ms %llu\n", (unsigned long long)(idle / MS),
               (unsigned long long)(shared[1].busy / MS));
        printf("opportunistic of idle %.2f\n", 100.0 * shared[1].busy / idle);
        return 0;
    }
    if (argc == 7 && strcmp(argv[1], "step") == 0) {
        uint64_t kern = strtoull(argv[3], NULL, 10) * 1000, before = strtoull(argv[5], NULL, 10) * SEC;
        step.factor = strtoull(argv[4], NULL, 10);
        step.window = strtoull(argv[6], NULL, 10);
        step.at = before;
        struct proc p[1];
        init(&p[0], CAPPED, atoi(argv[2]) * 10, kern, 0);
        p[0].sampled = 1;
        p[0].on_launch = step_launch;
        /* long enough for 40 windows of the longer kernels at the share */
        uint64_t after = 40 * step.window * kern * step.factor * GS_SHARE_FULL / (atoi(argv[2]) * 10);
        simulate(p, 1, 0, before + after);
        double busy = 0, wall = 0;
        for (int i = 0; i < step.n; i++) {
            printf("window %d %.2f\n", i, 100.0 * step.busy[i] / step.wall[i]);
            busy += step.busy[i], wall += step.wall[i];
        }
        printf("overall %.2f\n", wall ? 100.0 * busy / wall : 0);
        return 0;
    }
    if (argc == 4 && strcmp(argv[1], "crumbs") == 0) {
        struct gs_pacer p;
        uint64_t now = SEC, step = strtoull(argv[3], NULL, 10);
        gs_pacer_init(&p, atoi(argv[2]) * 10, 100 * MS, now);
        gs_pacer_done(&p, gs_pacer_launch(&p, now), MS, 1);
        double paid = -1;
        for (uint64_t t = now; step && t <= now + SEC; t += step)
            if (gs_pacer_delay(&p, t) == 0) {
                paid = (double)(t - now) / MS;
                break;
            }
        printf("paid after ms %.4f\n", paid);
        return 0;
    }
    fprintf(stderr, "usage: see the comment at the top of pacesim.c\n");
    return 2;
}
