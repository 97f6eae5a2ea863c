/* sm_time: the monotonic clock every module reads, and absolute deadlines
 * for the timed waits of pthreads.
 *
 *   struct timespec until = sm_time_after_ms(CLOCK_MONOTONIC, 500);
 *   while (!ready && pthread_cond_timedwait(&cv, &mu, &until) == 0)
 *       ;
 *
 * The clock is the one the condition variable waits on (CLOCK_REALTIME for
 * one made without attributes). */
#ifndef SM_TIME_H
#define SM_TIME_H

#include <pthread.h>
#include <stdint.h>
#include <time.h>

/* Initializes cv to wait on CLOCK_MONOTONIC, for deadlines from
 * sm_time_after_ms(CLOCK_MONOTONIC, ...); pthread_cond_init's result. */
int sm_time_cond_init(pthread_cond_t *cv);

/* The time ms milliseconds (>= 0) from now on clock. */
struct timespec sm_time_after_ms(clockid_t clock, int64_t ms);

/* CLOCK_MONOTONIC in nanoseconds, microseconds, milliseconds: for
 * durations and deadlines within one process. */
int64_t sm_time_mono_ns(void);
int64_t sm_time_mono_us(void);
int64_t sm_time_mono_ms(void);

/* A bounded spin before a blocking wait, for a waiter whose partner (a
 * thread or process of the same collective) usually arrives within
 * microseconds: it polls, giving up the CPU every few turns, instead of
 * sleeping at once and paying a wake-up (tens to hundreds of microseconds
 * on a virtual machine). Only while the threads taking part are few for
 * the host's CPUs (sm_spin_us): with many more, the partner the spinner
 * waits for is likely waiting for its CPU, and a spin only delays it.
 *
 *   sm_spin sp = sm_spin_start(sm_spin_us(group_size));
 *   while (!ready() && sm_spin_more(&sp))
 *       ;
 *   then the blocking wait, which finds ready() at once if it became so. */
#define SM_SPIN_US_DEFAULT 100
#define SM_SPIN_US_MAX     10000

typedef struct {
    int64_t until_ns;
    unsigned turns;
} sm_spin;

/* The spin for a wait among threads busy threads of this host (the members
 * of a collective): the process's spin (SM_SPIN_US_DEFAULT unless set)
 * while they are at most twice the CPUs this process may keep busy
 * (sm_sys_cpus: its affinity mask, or its cgroup's CPU quota when lower,
 * read once), else 0. */
int64_t sm_spin_us(int threads);
/* Sets the process's spin, 0 (never spin) to SM_SPIN_US_MAX microseconds
 * (clamped): a worker's --spin-us. Thread-safe; waits that began keep
 * theirs. */
void sm_spin_set_us(int64_t us);
/* A spin of at most us microseconds from now (0: none). */
sm_spin sm_spin_start(int64_t us);
/* One turn (a pause, or every few turns a sched_yield and a look at the
 * clock); 0 once the time is up. */
int sm_spin_more(sm_spin *s);

#endif
