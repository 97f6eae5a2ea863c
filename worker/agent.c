#include "agent.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sm_array.h"
#include "sm_log.h"
#include "sm_program.h"
#include "sm_rpc.h"
#include "sm_shm.h"
#include "sm_time.h"
#include "sm_tpool.h"

#define AGENT_BACKOFF_MIN_MS 100
#define AGENT_BACKOFF_MAX_MS 2000
#define AGENT_CALL_MS        3000

struct sm_agent {
    char *coordinator, *token, *address, *host;
    int ndevices, process_index;
    uint32_t worker_id; /* asked for at the first registration; 0: any */
    int ndevices_asked;
    int32_t devices_asked[SM_MAX_WORKER_DEVICES];
    void (*on_identity)(void *user, const sm_svc_register_reply *id);
    void *on_identity_user;
    sm_store *store;
    int shm_sweep_s;
    int64_t swept_ms; /* when the host's /dev/shm was last swept (monotonic) */
    sm_rpc_channel *ch;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int stopping;                   /* under mu */
    int registered;                 /* under mu */
    sm_svc_register_reply identity; /* under mu */
};

/* Sleeps ms or until stopping; returns 1 when stopping. */
static int agent_sleep(sm_agent *a, int ms)
{
    struct timespec ts = sm_time_after_ms(CLOCK_MONOTONIC, ms);
    pthread_mutex_lock(&a->mu);
    while (!a->stopping && pthread_cond_timedwait(&a->cv, &a->mu, &ts) == 0)
        ;
    int stop = a->stopping;
    pthread_mutex_unlock(&a->mu);
    return stop;
}

static int agent_stopping(sm_agent *a)
{
    pthread_mutex_lock(&a->mu);
    int s = a->stopping;
    pthread_mutex_unlock(&a->mu);
    return s;
}

/* One registration attempt; on success the store gets the new identity. */
static sm_err agent_register(sm_agent *a, char *err, size_t errlen)
{
    sm_svc_register_req req = {.address = a->address,
                               .ndevices = a->ndevices,
                               .process_index = a->process_index,
                               .host = a->host,
                               .program_level = SM_PROGRAM_LEVEL,
                               .version = SM_VERSION};
    sm_svc_register_reply rep, old;
    sm_svc_held_shard *held = NULL;
    sm_err e;
    memset(&rep, 0, sizeof rep);
    pthread_mutex_lock(&a->mu);
    old = a->identity;
    pthread_mutex_unlock(&a->mu);
    /* Registering again: ask for the same identity and offer the shards
     * still held, so the coordinator can adopt them. */
    if (old.worker_id.v && old.ndevices == a->ndevices) {
        req.worker_id = old.worker_id;
        req.devices = old.devices;
        if (req.process_index < 0)
            req.process_index = old.process_index;
    } else if (a->worker_id) {
        req.worker_id.v = a->worker_id;
        if (a->ndevices_asked == a->ndevices)
            req.devices = a->devices_asked;
    }
    if ((e = sm_rpc_channel_wait_ready(a->ch, 1000, err, errlen)))
        return e;
    if ((e = sm_store_held(a->store, &held, &req.nheld, err, errlen)))
        return e;
    req.held = held;
    e = sm_svc_coord_register(a->ch, AGENT_CALL_MS, &req, &rep, err, errlen);
    free(held);
    if (e)
        return e;
    if (rep.ndevices < 1 || rep.ndevices > SM_MAX_WORKER_DEVICES)
        return sm_fail(err, errlen, SM_EFORMAT, "the coordinator gave this worker %d devices",
                       rep.ndevices);
    if (rep.ndevices != a->ndevices)
        SM_WARN("asked for %d devices, the coordinator gave %d", a->ndevices, rep.ndevices);
    if ((e = sm_store_renew_identity(a->store, rep.worker_id.v, rep.ndevices, rep.devices,
                                     rep.keep_shards, err, errlen)))
        return e;
    if (rep.heartbeat_ms == 0)
        rep.heartbeat_ms = 500;
    pthread_mutex_lock(&a->mu);
    a->identity = rep;
    a->registered = 1;
    pthread_mutex_unlock(&a->mu);
    if (a->on_identity)
        a->on_identity(a->on_identity_user, &rep);
    SM_INFO("registered with %s as worker %u, process index %d, devices %d..%d, heartbeat %u ms",
            a->coordinator, rep.worker_id.v, rep.process_index, (int)rep.devices[0],
            (int)rep.devices[rep.ndevices - 1], rep.heartbeat_ms);
    return SM_OK;
}

/* One heartbeat; *known = 0 when the coordinator forgot this worker. */
static sm_err agent_heartbeat(sm_agent *a, const sm_svc_register_reply *id, int *known, char *err,
                              size_t errlen)
{
    sm_svc_heartbeat_req req;
    memset(&req, 0, sizeof req);
    req.worker_id = id->worker_id;
    req.epoch = id->epoch;
    req.ndevices = sm_store_stats(a->store, NULL, req.device_bytes, NULL);
    sm_svc_held_shard *spilled = NULL;
    req.nspilled = sm_store_spilled(a->store, &spilled, SM_SVC_SPILLED_MAX);
    req.spilled = spilled;
    sm_err e = sm_svc_coord_heartbeat(a->ch, AGENT_CALL_MS, &req, known, err, errlen);
    free(spilled);
    return e;
}

/* Every shm_sweep_s: what killed processes (clients above all: workers
 * sweep at their start and after a failed job) left in /dev/shm. */
static void agent_sweep_shm(sm_agent *a)
{
    int64_t now = sm_time_mono_ms();
    if (a->shm_sweep_s <= 0 || now - a->swept_ms < (int64_t)a->shm_sweep_s * 1000)
        return;
    a->swept_ms = now;
    int n = sm_shm_sweep(SM_SHM_SWEEP_AGE_S);
    if (n)
        SM_INFO("removed %d shared-memory segment(s) left by processes that ended", n);
}

static void *agent_main(void *arg)
{
    sm_agent *a = arg;
    char err[512];
    int backoff = AGENT_BACKOFF_MIN_MS, failures = 0, hb_failing = 0;
    while (!agent_stopping(a)) {
        pthread_mutex_lock(&a->mu);
        int registered = a->registered;
        sm_svc_register_reply id = a->identity;
        pthread_mutex_unlock(&a->mu);
        if (!registered) {
            sm_err e = agent_register(a, err, sizeof err);
            if (!e) {
                backoff = AGENT_BACKOFF_MIN_MS;
                failures = 0;
                continue;
            }
            if (failures++ % 10 == 0)
                SM_WARN("cannot register with coordinator %s yet (%s); retrying", a->coordinator,
                        err);
            if (agent_sleep(a, backoff))
                break;
            backoff = backoff * 2 > AGENT_BACKOFF_MAX_MS ? AGENT_BACKOFF_MAX_MS : backoff * 2;
            continue;
        }
        if (agent_sleep(a, (int)id.heartbeat_ms))
            break;
        sm_array_pool_trim(sm_store_pool(a->store)); /* freed blocks kept too long go back */
        agent_sweep_shm(a);
        int known = 1;
        sm_err e = agent_heartbeat(a, &id, &known, err, sizeof err);
        if (e) {
            if (!hb_failing++)
                SM_WARN("heartbeat to coordinator %s failed (%s); will keep trying", a->coordinator,
                        err);
            continue;
        }
        if (hb_failing)
            SM_INFO("heartbeats to coordinator %s succeed again", a->coordinator);
        hb_failing = 0;
        if (!known) {
            int64_t shards = 0;
            sm_store_stats(a->store, NULL, NULL, &shards);
            SM_WARN("coordinator %s no longer knows worker %u (restarted?); registering again "
                    "with the same identity and offering back %lld shard(s)",
                    a->coordinator, id.worker_id.v, (long long)shards);
            pthread_mutex_lock(&a->mu);
            a->registered = 0;
            pthread_mutex_unlock(&a->mu);
        }
    }
    return NULL;
}

static void agent_free(sm_agent *a)
{
    sm_rpc_channel_free(a->ch);
    pthread_cond_destroy(&a->cv);
    pthread_mutex_destroy(&a->mu);
    free(a->coordinator);
    free(a->token);
    free(a->address);
    free(a->host);
    free(a);
}

sm_err sm_agent_start(const sm_agent_config *cfg, sm_agent **out, char *err, size_t errlen)
{
    sm_err e;
    sm_agent *a = calloc(1, sizeof *a);
    if (!a)
        return sm_fail(err, errlen, SM_ENOMEM, "out of memory starting the agent");
    pthread_mutex_init(&a->mu, NULL);
    sm_time_cond_init(&a->cv);
    a->coordinator = strdup(cfg->coordinator);
    a->token = strdup(cfg->token ? cfg->token : "");
    a->address = strdup(cfg->address);
    a->host = strdup(cfg->host ? cfg->host : "");
    a->ndevices = cfg->ndevices;
    a->process_index = cfg->process_index;
    a->worker_id = cfg->worker_id;
    a->ndevices_asked = cfg->ndevices_asked;
    memcpy(a->devices_asked, cfg->devices_asked, sizeof a->devices_asked);
    a->on_identity = cfg->on_identity;
    a->on_identity_user = cfg->on_identity_user;
    a->store = cfg->store;
    a->shm_sweep_s = cfg->shm_sweep_s;
    a->swept_ms = sm_time_mono_ms(); /* main swept at the start */
    if (!a->coordinator || !a->token || !a->address || !a->host) {
        e = sm_fail(err, errlen, SM_ENOMEM, "out of memory starting the agent");
        goto fail;
    }
    if ((e = sm_rpc_channel_create_tls(a->coordinator, a->token, cfg->tls, &a->ch, err, errlen)))
        goto fail;
    if (pthread_create(&a->thread, NULL, agent_main, a)) {
        e = sm_fail(err, errlen, SM_ERESOURCE, "cannot start the agent thread");
        goto fail;
    }
    *out = a;
    return SM_OK;
fail:
    agent_free(a);
    return e;
}

void sm_agent_stop(sm_agent *a)
{
    if (!a)
        return;
    sm_tpool_thread_stop(&a->mu, &a->cv, &a->stopping, a->thread);
    agent_free(a);
}

int sm_agent_identity(sm_agent *a, sm_svc_register_reply *out)
{
    pthread_mutex_lock(&a->mu);
    int r = a->registered;
    if (r && out)
        *out = a->identity;
    pthread_mutex_unlock(&a->mu);
    return r;
}
