/* gpushare CUDA interposer: what the launch hooks (launchhooks.c) call of
 * the pacing of a launch (launch.c). */
#ifndef GPUSHARE_LAUNCH_H
#define GPUSHARE_LAUNCH_H

#include "gpushare.h"
#include "pace.h"

#include <stdint.h>

/* How a task's launches go, decided at its first launch (launch.c). */
enum { M_UNSET = 0, M_PASS, M_PRODUCE, M_PACE };
extern int gs_launch_mode; /* written once, by gs_launch_setup (release) */

/* Decides the task's mode once and returns it (acquire). */
int gs_launch_setup(void);
/* M_PRODUCE: counts a launch into the GPU's TGS channel. */
void gs_launch_produce(void);
/* Whether s is capturing (or its capture was invalidated). */
int gs_launch_capturing(CUstream s);

/* M_PACE: around a launch on s (graph: of a graph). gs_pace_before returns
 * with the pacer's debt paid, its lock held and the launch's measurement
 * started; gs_pace_after ends it (r: the driver's answer to the launch)
 * and releases the lock. */
struct pool;
void gs_pace_before(CUstream s, int graph, struct pool **pl, int *slot, uint64_t *charged,
                    struct gs_pacer **pcp);
void gs_pace_after(CUstream s, int graph, struct pool *p, int slot, uint64_t charged,
                   struct gs_pacer *pc, CUresult r);

#endif
