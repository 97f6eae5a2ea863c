/* sm_tpool: a cache of detached threads, each parked on its own condition
 * variable while idle (see header). */
#include "sm_tpool.h"

#include <stdio.h>
#include <stdlib.h>

#include "sm_time.h"

/* One pool thread; freed by the thread itself when it exits. */
typedef struct sm_tpool_slot {
    struct sm_tpool_slot *next; /* in the idle stack */
    sm_tpool *pool;
    pthread_cond_t cv;
    void (*fn)(void *); /* the task to run; NULL while idle */
    void *arg;
    sm_tpool_group *g;
} sm_tpool_slot;

struct sm_tpool {
    pthread_mutex_t mu; /* guards everything below and every idle slot */
    pthread_cond_t gone;
    sm_tpool_slot *idle; /* most recently parked first: its stack is warm */
    int nidle, max_idle;
    int nthreads; /* alive, idle or running a task */
    int stopping;
};

sm_err sm_tpool_create(int max_idle, sm_tpool **out, char *err, size_t errlen)
{
    *out = NULL;
    if (max_idle < 0)
        return sm_fail(err, errlen, SM_EINVAL, "a thread pool keeps 0 or more idle threads, not %d",
                       max_idle);
    sm_tpool *p = calloc(1, sizeof *p);
    if (!p)
        return sm_fail(err, errlen, SM_ENOMEM, "out of memory creating a thread pool");
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->gone, NULL);
    p->max_idle = max_idle;
    *out = p;
    return SM_OK;
}

void sm_tpool_free(sm_tpool *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    p->stopping = 1;
    for (sm_tpool_slot *s = p->idle; s; s = s->next)
        pthread_cond_signal(&s->cv);
    p->idle = NULL;
    p->nidle = 0;
    while (p->nthreads > 0)
        pthread_cond_wait(&p->gone, &p->mu);
    pthread_mutex_unlock(&p->mu);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->gone);
    free(p);
}

void sm_tpool_group_init(sm_tpool_group *g)
{
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
    g->pending = 0;
}

static void sm_tpool_group_add(sm_tpool_group *g, int n)
{
    pthread_mutex_lock(&g->mu);
    g->pending += n;
    if (g->pending == 0)
        pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

void sm_tpool_group_wait(sm_tpool_group *g)
{
    pthread_mutex_lock(&g->mu);
    while (g->pending > 0)
        pthread_cond_wait(&g->cv, &g->mu);
    pthread_mutex_unlock(&g->mu);
    pthread_mutex_destroy(&g->mu);
    pthread_cond_destroy(&g->cv);
}

static void *sm_tpool_main(void *arg)
{
    sm_tpool_slot *s = arg;
    sm_tpool *p = s->pool;
    for (;;) {
        s->fn(s->arg);
        sm_tpool_group_add(s->g, -1);
        pthread_mutex_lock(&p->mu);
        s->fn = NULL;
        if (p->stopping || p->nidle >= p->max_idle)
            break;
        s->next = p->idle;
        p->idle = s;
        p->nidle++;
        while (!s->fn && !p->stopping)
            pthread_cond_wait(&s->cv, &p->mu);
        if (!s->fn)
            break; /* stopping: sm_tpool_free took it off the idle stack */
        pthread_mutex_unlock(&p->mu);
    }
    if (--p->nthreads == 0)
        pthread_cond_signal(&p->gone);
    pthread_mutex_unlock(&p->mu);
    pthread_cond_destroy(&s->cv);
    free(s);
    return NULL;
}

sm_err sm_tpool_start(sm_tpool *p, sm_tpool_group *g, void (*fn)(void *), void *arg)
{
    sm_tpool_group_add(g, 1);
    pthread_mutex_lock(&p->mu);
    sm_tpool_slot *s = p->idle;
    if (s) {
        p->idle = s->next;
        p->nidle--;
        s->fn = fn;
        s->arg = arg;
        s->g = g;
        pthread_cond_signal(&s->cv);
        pthread_mutex_unlock(&p->mu);
        return SM_OK;
    }
    s = calloc(1, sizeof *s);
    pthread_attr_t attr;
    int ok = s && pthread_attr_init(&attr) == 0;
    if (ok) {
        s->pool = p;
        s->fn = fn;
        s->arg = arg;
        s->g = g;
        pthread_cond_init(&s->cv, NULL);
        pthread_t th;
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        p->nthreads++;
        if (pthread_create(&th, &attr, sm_tpool_main, s) != 0) {
            p->nthreads--;
            pthread_cond_destroy(&s->cv);
            ok = 0;
        }
        pthread_attr_destroy(&attr);
    }
    pthread_mutex_unlock(&p->mu);
    if (ok)
        return SM_OK;
    free(s);
    sm_tpool_group_add(g, -1);
    return SM_ERESOURCE;
}

/* ---- sm_tpool_run ------------------------------------------------------------ */

typedef struct {
    pthread_mutex_t mu;
    int next, n;
    sm_tpool_index_fn fn;
    void *user;
    sm_err e; /* the first failure */
    char err[1024];
} sm_tpool_for;

static void sm_tpool_for_loop(void *arg)
{
    sm_tpool_for *f = arg;
    char err[sizeof f->err];
    for (;;) {
        pthread_mutex_lock(&f->mu);
        int i = f->e ? f->n : f->next++;
        pthread_mutex_unlock(&f->mu);
        if (i >= f->n)
            return;
        err[0] = 0;
        sm_err e = f->fn(f->user, i, err, sizeof err);
        if (e) {
            pthread_mutex_lock(&f->mu);
            if (!f->e) {
                f->e = e;
                snprintf(f->err, sizeof f->err, "%s", err);
            }
            pthread_mutex_unlock(&f->mu);
        }
    }
}

sm_err sm_tpool_run(sm_tpool *p, int n, int width, sm_tpool_index_fn fn, void *user, char *err,
                    size_t errlen)
{
    sm_tpool_for f = {.n = n, .fn = fn, .user = user};
    sm_tpool *own = NULL;
    char tmp[128];
    if (!p && width > 1 && n > 1 && sm_tpool_create(0, &own, tmp, sizeof tmp) == SM_OK)
        p = own;
    pthread_mutex_init(&f.mu, NULL);
    sm_tpool_group g;
    sm_tpool_group_init(&g);
    for (int k = 1; p && k < width && k < n; k++)
        if (sm_tpool_start(p, &g, sm_tpool_for_loop, &f))
            break;
    sm_tpool_for_loop(&f); /* the caller works too */
    sm_tpool_group_wait(&g);
    sm_tpool_free(own);
    pthread_mutex_destroy(&f.mu);
    return f.e ? sm_fail(err, errlen, f.e, "%s", f.err) : SM_OK;
}

void sm_tpool_thread_stop(pthread_mutex_t *mu, pthread_cond_t *cv, int *stop, pthread_t th)
{
    pthread_mutex_lock(mu);
    *stop = 1;
    pthread_cond_broadcast(cv);
    pthread_mutex_unlock(mu);
    pthread_join(th, NULL);
}

sm_err sm_tpool_thread_start(pthread_mutex_t *mu, pthread_cond_t *cv, pthread_t *th,
                             void *(*fn)(void *), void *arg)
{
    pthread_mutex_init(mu, NULL);
    sm_time_cond_init(cv);
    if (pthread_create(th, NULL, fn, arg) == 0)
        return SM_OK;
    pthread_cond_destroy(cv);
    pthread_mutex_destroy(mu);
    return SM_ERESOURCE;
}

void sm_tpool_thread_end(pthread_mutex_t *mu, pthread_cond_t *cv, int *stop, pthread_t th)
{
    sm_tpool_thread_stop(mu, cv, stop, th);
    pthread_cond_destroy(cv);
    pthread_mutex_destroy(mu);
}
