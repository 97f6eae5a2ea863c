/* sm_tpool: a cache of threads for short parallel work that must all run at
 * once (a job's device threads, its RunJob calls), so a job does not pay a
 * pthread_create per task.
 *
 * sm_tpool_start runs a task at once: on an idle thread of the pool, or on
 * a new thread when none is idle. A task therefore never waits for another
 * task to free a thread, and tasks may wait for each other (collectives).
 * A thread whose task returned waits for the next one; beyond max_idle idle
 * threads it exits instead. Tasks are counted in a group (caller-owned) and
 * sm_tpool_group_wait returns once every task started in it has returned.
 *
 * sm_tpool_run hands the indices 0..n-1 to a few threads that take the
 * next one as they finish (a parallel for loop that stops at the first
 * failure).
 *
 * Thread-safety: every function may be called from any thread, except
 * sm_tpool_free (no start may run concurrently with it). */
#ifndef SM_TPOOL_H
#define SM_TPOOL_H

#include <pthread.h>

#include "sm_err.h"

typedef struct sm_tpool sm_tpool;

/* The tasks one caller waits for; init before the first start, wait once
 * after the last one (wait also releases it). */
typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int pending;
} sm_tpool_group;

/* A pool keeping at most max_idle (>= 0) idle threads; *out is the
 * caller's (sm_tpool_free). Starts no thread yet. */
sm_err sm_tpool_create(int max_idle, sm_tpool **out, char *err, size_t errlen);
/* Waits for every running task to return, ends the idle threads and frees
 * the pool. NULL is a no-op. */
void sm_tpool_free(sm_tpool *p);

void sm_tpool_group_init(sm_tpool_group *g);
/* Runs fn(arg) on a pool thread, counted in g. SM_ERESOURCE (nothing
 * started, g unchanged) if no thread was idle and none could be created.
 * arg is borrowed until fn returns. */
sm_err sm_tpool_start(sm_tpool *p, sm_tpool_group *g, void (*fn)(void *), void *arg);
/* Waits until every task started in g has returned, then releases g. */
void sm_tpool_group_wait(sm_tpool_group *g);

/* One index of sm_tpool_run: SM_OK, or the error with its sentence in err. */
typedef sm_err (*sm_tpool_index_fn)(void *user, int i, char *err, size_t errlen);
/* Runs fn(user, i, ...) for every i in [0, n) on up to width threads: the
 * caller's and width - 1 of p (p NULL: threads started for this call; fewer
 * when they cannot be had, down to the caller's alone). Hands out no index
 * after the first failure, whose code and sentence it returns once every
 * running fn has returned. */
sm_err sm_tpool_run(sm_tpool *p, int n, int width, sm_tpool_index_fn fn, void *user, char *err,
                    size_t errlen);

/* Stops a thread of a module's own (not a pool's) that waits on cv under
 * mu for work or for *stop: sets *stop under mu, wakes every waiter of cv
 * and joins th. */
void sm_tpool_thread_stop(pthread_mutex_t *mu, pthread_cond_t *cv, int *stop, pthread_t th);
/* Such a thread with its lock and condition from start to end:
 * sm_tpool_thread_start initialises mu and cv (cv on CLOCK_MONOTONIC, for
 * sm_time_after_ms) and runs fn(arg) on *th; if the thread cannot start
 * it destroys both again and returns SM_ERESOURCE. sm_tpool_thread_end
 * stops it (sm_tpool_thread_stop) and destroys mu and cv. */
sm_err sm_tpool_thread_start(pthread_mutex_t *mu, pthread_cond_t *cv, pthread_t *th,
                             void *(*fn)(void *), void *arg);
void sm_tpool_thread_end(pthread_mutex_t *mu, pthread_cond_t *cv, int *stop, pthread_t th);

#endif
