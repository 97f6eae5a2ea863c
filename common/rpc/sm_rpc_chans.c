/* sm_rpc_chans: the channel cache of sm_rpc.h. A process talks to a few
 * dozen targets at most, so the table is a list searched in order. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "sm_rpc.h"
#include "sm_time.h"

typedef struct chan {
    char *address;
    sm_rpc_channel *ch;
    int unreachable;
    int64_t since_ms; /* sm_time_mono_ms when it was found unreachable */
    int shm;          /* sm_rpc_chans_shm: 0 unknown, 1 shares memory, -1 not */
    int64_t shm_ms;   /* when shm was set */
    struct chan *next;
} chan;

struct sm_rpc_chans {
    pthread_mutex_t mu;
    char *token;
    const sm_rpc_tls *tls;
    int ready_ms, retry_ms;
    chan *head;
};

sm_rpc_chans *sm_rpc_chans_create(const char *token, const sm_rpc_tls *tls, int ready_ms,
                                  int retry_ms)
{
    sm_rpc_chans *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    if (token && *token && !(c->token = strdup(token))) {
        free(c);
        return NULL;
    }
    c->tls = tls;
    c->ready_ms = ready_ms;
    c->retry_ms = retry_ms;
    pthread_mutex_init(&c->mu, NULL);
    return c;
}

void sm_rpc_chans_free(sm_rpc_chans *c)
{
    if (!c)
        return;
    while (c->head) {
        chan *h = c->head;
        c->head = h->next;
        sm_rpc_channel_free(h->ch);
        free(h->address);
        free(h);
    }
    pthread_mutex_destroy(&c->mu);
    free(c->token);
    free(c);
}

static void chan_unreachable(chan *h)
{
    h->unreachable = 1;
    h->since_ms = sm_time_mono_ms();
}

/* Under c->mu: SM_OK when h may be used now, trying to connect it again
 * once its retry time is over. */
static sm_err chan_usable(sm_rpc_chans *c, chan *h, char *err, size_t errlen)
{
    if (!h->unreachable)
        return SM_OK;
    if (sm_time_mono_ms() - h->since_ms < c->retry_ms)
        return sm_fail(err, errlen, SM_EUNAVAILABLE,
                       "%s was unreachable less than %d ms ago; not tried again yet", h->address,
                       c->retry_ms);
    if (sm_rpc_channel_wait_ready(h->ch, c->ready_ms, err, errlen)) {
        chan_unreachable(h);
        return SM_EUNAVAILABLE;
    }
    h->unreachable = 0;
    return SM_OK;
}

sm_err sm_rpc_chans_get(sm_rpc_chans *c, const char *address, sm_rpc_channel **out, char *err,
                        size_t errlen)
{
    sm_err e = SM_OK;
    *out = NULL;
    pthread_mutex_lock(&c->mu);
    chan *h = c->head;
    while (h && strcmp(h->address, address))
        h = h->next;
    if (h) {
        if (!(e = chan_usable(c, h, err, errlen)))
            *out = h->ch;
        goto out;
    }
    if (!(h = calloc(1, sizeof *h)) || !(h->address = strdup(address))) {
        e = sm_fail(err, errlen, SM_ENOMEM, "out of memory connecting to %s", address);
        goto fail;
    }
    if ((e = sm_rpc_channel_create_tls(address, c->token, c->tls, &h->ch, err, errlen)))
        goto fail;
    h->next = c->head;
    c->head = h;
    if (c->ready_ms > 0 && (e = sm_rpc_channel_wait_ready(h->ch, c->ready_ms, err, errlen)))
        chan_unreachable(h);
    else
        *out = h->ch;
    goto out;
fail:
    if (h)
        free(h->address);
    free(h);
out:
    pthread_mutex_unlock(&c->mu);
    return e;
}

void sm_rpc_chans_unreachable(sm_rpc_chans *c, const char *address)
{
    if (c->ready_ms <= 0)
        return;
    pthread_mutex_lock(&c->mu);
    for (chan *h = c->head; h; h = h->next)
        if (!strcmp(h->address, address))
            chan_unreachable(h);
    pthread_mutex_unlock(&c->mu);
}

int sm_rpc_chans_count(sm_rpc_chans *c, int *unreachable)
{
    int n = 0, u = 0;
    pthread_mutex_lock(&c->mu);
    for (chan *h = c->head; h; h = h->next, n++)
        u += h->unreachable;
    pthread_mutex_unlock(&c->mu);
    if (unreachable)
        *unreachable = u;
    return n;
}

int sm_rpc_chans_shm(sm_rpc_chans *c, const char *address, int64_t *since_ms)
{
    int same = 0;
    pthread_mutex_lock(&c->mu);
    for (chan *h = c->head; h; h = h->next)
        if (!strcmp(h->address, address)) {
            same = h->shm;
            *since_ms = h->shm_ms;
            break; /* one channel per address */
        }
    pthread_mutex_unlock(&c->mu);
    return same;
}

void sm_rpc_chans_set_shm(sm_rpc_chans *c, const char *address, int same)
{
    pthread_mutex_lock(&c->mu);
    for (chan *h = c->head; h; h = h->next)
        if (!strcmp(h->address, address)) {
            h->shm = same;
            h->shm_ms = sm_time_mono_ms();
        }
    pthread_mutex_unlock(&c->mu);
}
