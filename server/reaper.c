/* reaper: deadlines and lost workers. See reaper.h. */
#include "reaper.h"

#include <pthread.h>
#include <stdlib.h>
#include <time.h>

#include "relay.h"
#include "sm_log.h"
#include "sm_time.h"
#include "sm_tpool.h"

struct sm_reaper {
    sm_registry *reg;
    int64_t lost_after_ms;
    int period_ms, call_deadline_ms;
    pthread_mutex_t mu;
    pthread_cond_t cv; /* CLOCK_MONOTONIC */
    int stop;
    pthread_t th;
};

static void *sm_reaper_run(void *arg)
{
    sm_reaper *rp = arg;
    pthread_mutex_lock(&rp->mu);
    while (!rp->stop) {
        struct timespec ts = sm_time_after_ms(CLOCK_MONOTONIC, rp->period_ms);
        while (!rp->stop && pthread_cond_timedwait(&rp->cv, &rp->mu, &ts) == 0)
            ;
        if (rp->stop)
            break;
        pthread_mutex_unlock(&rp->mu);
        sm_reg_free *f = NULL;
        int nf = 0;
        sm_registry_reap(rp->reg, sm_time_mono_ms(), rp->lost_after_ms, &f, &nf);
        sm_registry_checkpoint(rp->reg, sm_time_mono_ms());
        sm_relay_free(f, nf, rp->call_deadline_ms);
        free(f);
        pthread_mutex_lock(&rp->mu);
    }
    pthread_mutex_unlock(&rp->mu);
    return NULL;
}

sm_err sm_reaper_start(sm_registry *r, int64_t lost_after_ms, int period_ms, int call_deadline_ms,
                       sm_reaper **out, char *err, size_t errlen)
{
    sm_reaper *rp = calloc(1, sizeof *rp);
    *out = NULL;
    if (!rp)
        return sm_fail(err, errlen, SM_ENOMEM, "out of memory starting the reaper");
    rp->reg = r;
    rp->lost_after_ms = lost_after_ms;
    rp->period_ms = period_ms > 0 ? period_ms : 100;
    rp->call_deadline_ms = call_deadline_ms;
    if (sm_tpool_thread_start(&rp->mu, &rp->cv, &rp->th, sm_reaper_run, rp)) {
        free(rp);
        return sm_fail(err, errlen, SM_ERESOURCE, "cannot start the reaper thread");
    }
    *out = rp;
    return SM_OK;
}

void sm_reaper_stop(sm_reaper *rp)
{
    if (!rp)
        return;
    sm_tpool_thread_end(&rp->mu, &rp->cv, &rp->stop, rp->th);
    free(rp);
}
