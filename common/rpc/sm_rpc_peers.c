/* sm_rpc_peers: how many streams each client of a server has open, for
 * sm_rpc_server_opts.max_client_streams. A client is one connection (its
 * peer address and port, as gRPC names it): one libshmap client or one
 * shmapctl run. Entries exist only while their count is above zero, so
 * the table holds the clients with a stream open, a few at a time: a
 * linear search is enough. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "sm_rpc_internal.h"

typedef struct {
    char *key;
    int n;
} peer_count;

struct sm_rpc_peers {
    pthread_mutex_t mu;
    int max;
    peer_count *v;
    int len, cap;
};

sm_rpc_peers *sm_rpc_peers_create(int max)
{
    sm_rpc_peers *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    pthread_mutex_init(&p->mu, NULL);
    p->max = max;
    return p;
}

void sm_rpc_peers_free(sm_rpc_peers *p)
{
    if (!p)
        return;
    for (int i = 0; i < p->len; i++)
        free(p->v[i].key);
    free(p->v);
    pthread_mutex_destroy(&p->mu);
    free(p);
}

int sm_rpc_peers_take(sm_rpc_peers *p, const char *key)
{
    int i, ok = 0;
    pthread_mutex_lock(&p->mu);
    for (i = 0; i < p->len && strcmp(p->v[i].key, key) != 0; i++)
        ;
    if (i < p->len) {
        if (p->v[i].n < p->max) {
            p->v[i].n++;
            ok = 1;
        }
        goto out;
    }
    if (p->len == p->cap) {
        int nc = p->cap ? 2 * p->cap : 16;
        peer_count *nv = realloc(p->v, (size_t)nc * sizeof *nv);
        if (!nv)
            goto out;
        p->v = nv;
        p->cap = nc;
    }
    if (!(p->v[p->len].key = strdup(key)))
        goto out;
    p->v[p->len++].n = 1;
    ok = 1;
out:
    pthread_mutex_unlock(&p->mu);
    return ok;
}

void sm_rpc_peers_give(sm_rpc_peers *p, const char *key)
{
    pthread_mutex_lock(&p->mu);
    for (int i = 0; i < p->len; i++) {
        if (strcmp(p->v[i].key, key) != 0)
            continue;
        if (--p->v[i].n <= 0) {
            free(p->v[i].key);
            p->v[i] = p->v[--p->len];
        }
        break;
    }
    pthread_mutex_unlock(&p->mu);
}
