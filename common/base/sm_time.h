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

#endif
