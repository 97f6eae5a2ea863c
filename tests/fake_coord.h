/* fake_coord: a coordinator that only registers shmap-worker processes, for
 * a suite or a bench that drives real workers itself (tests/test_worker_job.c,
 * bench/bench_coll.c). Worker w, in the order workers first register, gets
 * devices w*dpw .. w*dpw+dpw-1 and process index w (registering again from
 * the same address gives the same back); every heartbeat is known. Header
 * only (static functions), without Check, so a bench can use it. Its
 * handlers run on the server's threads: mu guards nreg and addr. */
#ifndef SM_FAKE_COORD_H
#define SM_FAKE_COORD_H

#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "sm_rpc.h"
#include "sm_svc.h"

#define FAKE_COORD_MAX 8

typedef struct {
    pthread_mutex_t mu;
    int max, dpw, heartbeat_ms;             /* at most max workers of dpw devices */
    int nreg;                               /* workers registered so far */
    char addr[FAKE_COORD_MAX][SM_ADDR_MAX]; /* the address worker w registered with */
    sm_rpc_server *srv;
    char target[64]; /* where workers find it: "127.0.0.1:PORT" */
} fake_coord;

static sm_err fake_coord_register(void *user, const sm_svc_register_req *req,
                                  sm_svc_register_reply *out, char *err, size_t errlen)
{
    fake_coord *c = user;
    pthread_mutex_lock(&c->mu);
    int w = 0;
    while (w < c->nreg && strcmp(c->addr[w], req->address))
        w++;
    if (w == c->max || req->ndevices != c->dpw) {
        pthread_mutex_unlock(&c->mu);
        return sm_fail(err, errlen, SM_EINVAL,
                       "the fake coordinator takes %d workers of %d devices", c->max, c->dpw);
    }
    if (w == c->nreg)
        snprintf(c->addr[c->nreg++], SM_ADDR_MAX, "%s", req->address);
    memset(out, 0, sizeof *out);
    out->worker_id.v = (uint32_t)w;
    out->ndevices = c->dpw;
    for (int k = 0; k < c->dpw; k++)
        out->devices[k] = w * c->dpw + k;
    out->process_index = w;
    out->heartbeat_ms = c->heartbeat_ms;
    pthread_mutex_unlock(&c->mu);
    return SM_OK;
}

static sm_err fake_coord_heartbeat(void *user, const sm_svc_heartbeat_req *req, int *known,
                                   char *err, size_t errlen)
{
    *known = 1;
    return SM_OK;
}

/* Starts c (max <= FAKE_COORD_MAX workers of dpw devices, heartbeats every
 * heartbeat_ms) on a free loopback port, serving as name. On failure
 * returns the error with a sentence in err; stop c either way. */
static __attribute__((unused)) sm_err fake_coord_start(fake_coord *c, int max, int dpw,
                                                       int heartbeat_ms, const char *name,
                                                       char *err, size_t errlen)
{
    static const sm_svc_coord_ops ops = {.register_worker = fake_coord_register,
                                         .heartbeat = fake_coord_heartbeat};
    memset(c, 0, sizeof *c);
    pthread_mutex_init(&c->mu, NULL);
    c->max = max;
    c->dpw = dpw;
    c->heartbeat_ms = heartbeat_ms;
    sm_rpc_server_opts o = {.addr = "127.0.0.1:0"};
    sm_err e = sm_rpc_server_create(&o, &c->srv, err, errlen);
    if (!e)
        e = sm_svc_coord_serve(c->srv, &ops, c, name, err, errlen);
    if (!e)
        e = sm_rpc_server_start(c->srv, err, errlen);
    if (!e)
        snprintf(c->target, sizeof c->target, "127.0.0.1:%d", sm_rpc_server_port(c->srv));
    return e;
}

/* Waits (polling every 50 ms, at most 15 s) until n workers registered;
 * returns how many did. */
static __attribute__((unused)) int fake_coord_wait(fake_coord *c, int n)
{
    int got = 0;
    for (int t = 0; t < 300 && got < n; t++) {
        usleep(50 * 1000);
        pthread_mutex_lock(&c->mu);
        got = c->nreg;
        pthread_mutex_unlock(&c->mu);
    }
    return got;
}

/* Waits (at most 100 tries 50 ms apart) until the worker at ch, just
 * registered, reports the dpw devices c handed it (the identity lands just
 * after the reply); returns how many it reports last. */
static __attribute__((unused)) int fake_coord_wait_devices(const fake_coord *c, sm_rpc_channel *ch,
                                                           int call_ms)
{
    sm_svc_worker_stats st = {0};
    char err[256];
    for (int t = 0; t < 100; t++) {
        if (sm_svc_worker_stats_get(ch, call_ms, &st, err, sizeof err) == SM_OK &&
            st.ndevices == c->dpw)
            break;
        usleep(50 * 1000);
    }
    return st.ndevices;
}

/* Stops serving and frees what c holds (c itself is the caller's). */
static __attribute__((unused)) void fake_coord_stop(fake_coord *c)
{
    sm_rpc_server_free(c->srv);
    c->srv = NULL;
    pthread_mutex_destroy(&c->mu);
}

#endif
