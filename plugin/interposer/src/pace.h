/* gpushare compute control: pure functions over a clock and counters.
 *
 * Nothing here reads a clock, allocates, locks or does I/O: the caller
 * passes the time (ns, any monotonic origin) and the measurements, so a
 * test drives it with a fake clock against a model of a shared GPU
 * (testdata/pacesim.c), as NexusGPU's erl crate does (STYLE.md item 14). */
#ifndef GPUSHARE_PACE_H
#define GPUSHARE_PACE_H

#include <stdint.h>

#define GS_SHARE_FULL 1000u /* shares are in permille; FULL means not paced */

/* ---- the compute pacer (time-sliced GPUs) -----------------------------
 *
 * A feedback loop on MEASURED GPU time, not a token rate per launch: debt
 * is the integral of (busy time the task's kernels really took - the time
 * its share earned). A launch waits until the debt is paid. A kernel still
 * running is charged at the mean of the measured run times and corrected
 * when its run time is known, so a task that queues many kernels
 * asynchronously cannot run ahead of its measurements. */
struct gs_pacer {
    uint32_t share;     /* permille of GPU time; >= GS_SHARE_FULL: not paced */
    uint32_t rem;       /* what the last earning left over, in ns x permille
                         * (< GS_SHARE_FULL): kept, so that frequent takes of
                         * the pacer (the threads of a task) lose no credit */
    uint64_t window_ns; /* idle credit is kept at most share x window */
    uint64_t last_ns;   /* when debt was last brought up to date */
    int64_t debt_ns;    /* measured busy - earned; < 0 is banked credit */
    uint64_t est_ns;    /* mean measured kernel run time (EWMA, 1/8) */
};

void gs_pacer_init(struct gs_pacer *p, uint32_t share, uint64_t window_ns, uint64_t now);
/* Changes the share (the TGS loop does, each window). */
void gs_pacer_set_share(struct gs_pacer *p, uint32_t share, uint64_t now);
/* The task resumes after a suspension (time-slicing, slice.c): the time
 * it was suspended earns no credit (it did not hold the GPU); a debt stays. */
void gs_pacer_resume(struct gs_pacer *p, uint64_t now);
/* How long to wait before the next launch (0: launch now). */
uint64_t gs_pacer_delay(struct gs_pacer *p, uint64_t now);
/* The same, the debt allowed to reach ahead_ns first: a task may have that
 * much work queued ahead of what its share has earned (capped tasks in
 * turns, slice.c: enough to keep the GPU busy while the host wakes, never
 * past the turn's end). */
uint64_t gs_pacer_delay_ahead(struct gs_pacer *p, uint64_t now, uint64_t ahead_ns);
/* A launch: returns what it was charged, to hand back to gs_pacer_done. */
uint64_t gs_pacer_launch(struct gs_pacer *p, uint64_t now);
/* A measured kernel finished: busy_ns is its measured run time on the
 * GPU; it stands for n launches (itself and the unmeasured ones before it,
 * gs_sample_take), charged charged_ns in all, which are settled on it. */
void gs_pacer_done(struct gs_pacer *p, uint64_t charged_ns, uint64_t busy_ns, uint32_t n);
/* Work other than one kernel (a graph launch): charged ns now, settled on
 * its measured busy_ns later; neither touches the kernels' mean. */
void gs_pacer_charge(struct gs_pacer *p, uint64_t now, uint64_t ns);
void gs_pacer_settle(struct gs_pacer *p, uint64_t charged_ns, uint64_t busy_ns);

/* ---- which launches are measured ---------------------------------------
 *
 * Measuring a kernel costs driver calls (two event records, a query, an
 * elapsed time), so one launch in GS_SAMPLE is measured, chosen at random
 * (no period a workload could alias with); every one until the pacer has
 * a mean. An unmeasured launch is charged the mean when launched (so a
 * task queueing kernels cannot run ahead) and settled, with the next
 * measured launch, on that one's measured run time: a measurement stands
 * for itself and the unmeasured launches before it. So when kernels change
 * length (prefill, decode) the debt is right from the next measurement on,
 * not after the mean has crept there at 1/8 a measurement. Per process and
 * pool of events (the sampler is not shared): each process's launches are
 * settled on its own measurements. */
#define GS_SAMPLE 4

struct gs_sampler {
    uint32_t rng;        /* xorshift; 0: not yet seeded */
    uint32_t skipped;    /* unmeasured launches since the last measured one */
    uint64_t skipped_ns; /* what they were charged */
};

/* Whether this launch is measured. */
int gs_sample_pick(struct gs_sampler *s, const struct gs_pacer *p);
/* An unmeasured launch, charged charged_ns: settled with the next measured one. */
void gs_sample_skip(struct gs_sampler *s, uint64_t charged_ns);
/* A measured launch, charged *charged_ns, takes the unmeasured ones before
 * it: *charged_ns grows by their charge; returns how many launches its
 * measurement stands for (for gs_pacer_done). */
uint32_t gs_sample_take(struct gs_sampler *s, uint64_t *charged_ns);

/* ---- TGS: production's throughput, opportunistic's rate ---------------
 *
 * The per-GPU channel lives in a small shared-memory file per GPU. Every
 * production process on the GPU adds to its counters at each launch (a few
 * relaxed atomic adds: production is never paced); opportunistic processes
 * only read it. Counters, not per-window figures, so production needs no
 * timer and readers with different windows agree. */
#define GS_TGS_MAGIC 0x67737467u /* "gstg" */
struct gs_tgs_channel {
    uint32_t magic, version;
    uint64_t work;      /* production's work launched (kernels, or blocks) */
    uint64_t active_ns; /* production's time between launches, idle gaps left out */
    uint64_t last_ns;   /* production's latest launch */
};

/* A production process's own state: its previous launch. */
struct gs_tgs_producer {
    uint64_t last_ns;
    uint64_t idle_ns; /* a gap between launches longer than this is idle, not work */
};

void gs_tgs_produce(struct gs_tgs_channel *c, struct gs_tgs_producer *p, uint64_t now,
                    uint64_t work);

/* The opportunistic side: additive increase / multiplicative decrease of
 * its share of GPU time, each window, on production's measured throughput
 * per active second against the best it has shown (its rate alone). */
struct gs_tgs {
    uint64_t window_ns, next_ns, absent_ns;
    uint64_t seen_work, seen_active; /* the channel at the last window */
    double rate;                     /* production's rate (work per active ns), smoothed */
    double ref;                      /* its best smoothed rate: its rate alone */
    uint32_t share;                  /* permille, applied while production is present */
    uint32_t floor_windows;          /* windows at the floor with production still slow */
};

/* <gs_dir>/tgs mapped (read-write for a producer), checked: NULL when
 * absent or not a channel of this version (src/tgschannel.c: the one
 * function here that does I/O, kept out of the pure code). */
struct gs_tgs_channel *gs_tgs_open(int writable);

void gs_tgs_init(struct gs_tgs *t, uint64_t window_ns, uint64_t now);
/* The share the opportunistic task may use now: GS_SHARE_FULL when no
 * production task launched recently. Cheap between windows (two loads). */
uint32_t gs_tgs_share(struct gs_tgs *t, const struct gs_tgs_channel *c, uint64_t now);

#endif
