/* sm_hold: lent buffers given back from other threads. See sm_hold.h. */
#include "sm_hold.h"
#include "sm_time.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

struct sm_hold {
    pthread_mutex_t mu;
    pthread_cond_t cv; /* on CLOCK_MONOTONIC */
    int held;          /* loans not yet released */
    int abandoned;     /* the owner stopped waiting: the last release frees this */
};

sm_hold *sm_hold_create(void)
{
    sm_hold *h = calloc(1, sizeof *h);
    if (!h)
        return NULL;
    pthread_mutex_init(&h->mu, NULL);
    sm_time_cond_init(&h->cv);
    return h;
}

static void hold_destroy(sm_hold *h)
{
    pthread_mutex_destroy(&h->mu);
    pthread_cond_destroy(&h->cv);
    free(h);
}

void sm_hold_take(sm_hold *h)
{
    pthread_mutex_lock(&h->mu);
    h->held++;
    pthread_mutex_unlock(&h->mu);
}

void sm_hold_release(void *arg)
{
    sm_hold *h = arg;
    pthread_mutex_lock(&h->mu);
    int last = --h->held == 0, gone = h->abandoned;
    if (last)
        pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
    if (last && gone)
        hold_destroy(h);
}

int sm_hold_end(sm_hold *h, int wait_ms)
{
    if (!h)
        return 0;
    struct timespec until = sm_time_after_ms(CLOCK_MONOTONIC, wait_ms);
    pthread_mutex_lock(&h->mu);
    while (h->held > 0 && pthread_cond_timedwait(&h->cv, &h->mu, &until) != ETIMEDOUT)
        ;
    int held = h->held;
    h->abandoned = held > 0;
    pthread_mutex_unlock(&h->mu);
    if (!held)
        hold_destroy(h);
    return held;
}
