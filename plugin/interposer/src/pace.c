/* gpushare compute control: the pacer and the TGS loop (see pace.h).
 * Pure code: time and measurements come in as arguments. */
#include "pace.h"

/* ---- the compute pacer ------------------------------------------------ */

/* The kernels' mean run time: an exponential average of the measured
 * ones, weight 1/GS_EWMA, except that a measurement more than half again
 * or less than two thirds of it is taken as the mean at once: the
 * kernels changed (a prefill after decode steps). The +-25% a kernel's
 * run time varies by on its own never does that. */
#define GS_EWMA 8

void gs_pacer_init(struct gs_pacer *p, uint32_t share, uint64_t window_ns, uint64_t now)
{
    p->share = share;
    p->rem = 0;
    p->window_ns = window_ns;
    p->last_ns = now;
    p->debt_ns = 0;
    p->est_ns = 0;
}

/* Brings the debt up to now: the share earns share/1000 of the elapsed
 * time. Credit is capped, so a task idle for a minute cannot then hold the
 * GPU for 18 seconds; the cap is one window's worth of its share. */
static void earn(struct gs_pacer *p, uint64_t now)
{
    if (now <= p->last_ns)
        return;
    uint64_t dt = now - p->last_ns;
    p->last_ns = now;
    int64_t credit_max = (int64_t)(p->window_ns * p->share / GS_SHARE_FULL);
    int64_t earned;
    if (dt > p->window_ns * 4) {
        earned = credit_max + p->debt_ns;
        p->rem = 0;
    } else {
        /* exact: the fraction of a ns earned is kept for the next take,
         * else threads taking the pacer every few ns would earn nothing
         * and wait for ever (a delay is rounded up, an earning down) */
        uint64_t x = dt * p->share + p->rem;
        earned = (int64_t)(x / GS_SHARE_FULL);
        p->rem = (uint32_t)(x % GS_SHARE_FULL);
    }
    p->debt_ns -= earned;
    if (p->debt_ns < -credit_max)
        p->debt_ns = -credit_max;
}

void gs_pacer_set_share(struct gs_pacer *p, uint32_t share, uint64_t now)
{
    if (share == p->share)
        return;
    if (p->share >= GS_SHARE_FULL) {
        /* was not paced: what it ran then is not owed now */
        p->debt_ns = 0;
        p->rem = 0;
        p->last_ns = now;
    } else {
        earn(p, now); /* at the old share up to now */
    }
    p->share = share;
}

void gs_pacer_resume(struct gs_pacer *p, uint64_t now)
{
    if (p->debt_ns < 0)
        p->debt_ns = 0;
    p->rem = 0;
    p->last_ns = now;
}

uint64_t gs_pacer_delay_ahead(struct gs_pacer *p, uint64_t now, uint64_t ahead_ns)
{
    if (p->share >= GS_SHARE_FULL)
        return 0;
    earn(p, now);
    int64_t over = p->debt_ns - (int64_t)ahead_ns;
    if (over <= 0)
        return 0;
    if (p->share == 0)
        return p->window_ns; /* nothing earned ever: check again later */
    /* the time it takes the share to earn the debt back, rounded up: a
     * delay that earns nothing would be asked again forever */
    return ((uint64_t)over * GS_SHARE_FULL + p->share - 1) / p->share;
}

uint64_t gs_pacer_delay(struct gs_pacer *p, uint64_t now)
{
    return gs_pacer_delay_ahead(p, now, 0);
}

void gs_pacer_charge(struct gs_pacer *p, uint64_t now, uint64_t ns)
{
    if (p->share >= GS_SHARE_FULL)
        return;
    earn(p, now);
    p->debt_ns += (int64_t)ns;
}

uint64_t gs_pacer_launch(struct gs_pacer *p, uint64_t now)
{
    if (p->share >= GS_SHARE_FULL)
        return 0;
    gs_pacer_charge(p, now, p->est_ns);
    return p->est_ns;
}

void gs_pacer_settle(struct gs_pacer *p, uint64_t charged_ns, uint64_t busy_ns)
{
    if (p->share < GS_SHARE_FULL)
        p->debt_ns += (int64_t)busy_ns - (int64_t)charged_ns;
}

void gs_pacer_done(struct gs_pacer *p, uint64_t charged_ns, uint64_t busy_ns, uint32_t n)
{
    /* the mean run time is learnt even unpaced, ready for when a share is
     * set; far from the mean, taken at once (GS_EWMA) */
    uint64_t e = p->est_ns;
    if (e == 0 || busy_ns > e + e / 2 || busy_ns + busy_ns / 2 < e)
        e = busy_ns;
    else
        e += ((int64_t)busy_ns - (int64_t)e) / GS_EWMA;
    p->est_ns = e;
    /* this kernel at its run time, the unmeasured ones before it at the
     * mean now: both the mean's change and its own are settled */
    if (p->share < GS_SHARE_FULL)
        p->debt_ns += (int64_t)busy_ns + (int64_t)e * (int64_t)(n ? n - 1 : 0) - (int64_t)charged_ns;
}

/* ---- which launches are measured -------------------------------------- */

int gs_sample_pick(struct gs_sampler *s, const struct gs_pacer *p)
{
    uint32_t x = s->rng ? s->rng : 0x9e3779b9u;
    x ^= x << 13, x ^= x >> 17, x ^= x << 5;
    s->rng = x;
    return p->est_ns == 0 || x % GS_SAMPLE == 0;
}

void gs_sample_skip(struct gs_sampler *s, uint64_t charged_ns)
{
    s->skipped++;
    s->skipped_ns += charged_ns;
}

uint32_t gs_sample_take(struct gs_sampler *s, uint64_t *charged_ns)
{
    uint32_t n = 1 + s->skipped;
    *charged_ns += s->skipped_ns;
    s->skipped = 0;
    s->skipped_ns = 0;
    return n;
}

/* ---- TGS -------------------------------------------------------------- */

/* Production's launch path: atomic adds only, never a wait. A gap longer
 * than idle_ns is the job's own idleness (data loading, a phase between
 * epochs), not slowness, so it is left out of active time. */
void gs_tgs_produce(struct gs_tgs_channel *c, struct gs_tgs_producer *p, uint64_t now,
                    uint64_t work)
{
    /* exchanged, so the threads of a process may share one producer */
    uint64_t prev = __atomic_exchange_n(&p->last_ns, now, __ATOMIC_RELAXED);
    if (prev && now > prev && now - prev <= p->idle_ns)
        __atomic_fetch_add(&c->active_ns, now - prev, __ATOMIC_RELAXED);
    __atomic_fetch_add(&c->work, work, __ATOMIC_RELAXED);
    if (__atomic_load_n(&c->last_ns, __ATOMIC_RELAXED) < now)
        __atomic_store_n(&c->last_ns, now, __ATOMIC_RELAXED);
}

/* The loop's constants. A 2-point step each 100 ms window reaches a 20%
 * share in a second; a decrease to 4/5 (gentler than TCP's 1/2) keeps the
 * sawtooth's mean near its top, so the opportunistic task gets most of what
 * production leaves; production is held within 3% of its best rate. */
enum {
    TGS_STEP = 20,      /* permille added per window */
    TGS_FLOOR = 10,     /* the least share: keeps the opportunistic job alive */
    TGS_START = 50,
    TGS_REBASE = 10,    /* windows at the floor before the reference is rebased */
};
#define TGS_MARGIN 0.04

void gs_tgs_init(struct gs_tgs *t, uint64_t window_ns, uint64_t now)
{
    t->window_ns = window_ns;
    t->next_ns = now + window_ns;
    t->absent_ns = window_ns / 2;
    t->seen_work = t->seen_active = 0;
    t->ref = t->rate = 0;
    t->share = TGS_START;
    t->floor_windows = 0;
}

/* One window's decision on production's rate (work per active ns). */
static void window(struct gs_tgs *t, double sample)
{
    /* one window holds a few dozen kernels whose run times vary: smooth
     * over windows, or the noise alone reads as harm and starves the job */
    t->rate = t->rate ? t->rate + (sample - t->rate) / 4 : sample;
    double rate = t->rate;
    if (rate > t->ref)
        t->ref = rate;
    if (rate >= t->ref * (1 - TGS_MARGIN)) {
        t->share = t->share + TGS_STEP > GS_SHARE_FULL ? GS_SHARE_FULL : t->share + TGS_STEP;
        t->floor_windows = 0;
        return;
    }
    t->share = t->share * 4 / 5;
    if (t->share > TGS_FLOOR)
        return;
    t->share = TGS_FLOOR;
    /* At the floor and production still slower than its best: that is not
     * our doing (its work changed), so its present rate becomes the best. */
    if (++t->floor_windows >= TGS_REBASE) {
        t->ref = rate;
        t->floor_windows = 0;
    }
}

uint32_t gs_tgs_share(struct gs_tgs *t, const struct gs_tgs_channel *c, uint64_t now)
{
    uint64_t last = __atomic_load_n(&c->last_ns, __ATOMIC_RELAXED);
    int present = last && now >= last ? now - last <= t->absent_ns : last != 0;
    if (now >= t->next_ns) {
        t->next_ns = now + t->window_ns;
        uint64_t w = __atomic_load_n(&c->work, __ATOMIC_RELAXED);
        uint64_t a = __atomic_load_n(&c->active_ns, __ATOMIC_RELAXED);
        uint64_t dw = w - t->seen_work, da = a - t->seen_active;
        t->seen_work = w;
        t->seen_active = a;
        /* too little of the window active to judge: no change */
        if (present && da >= t->window_ns / 4 && dw > 0)
            window(t, (double)dw / (double)da);
    }
    return present ? t->share : GS_SHARE_FULL;
}
