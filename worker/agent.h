/* agent: the worker's side of its relation with the coordinator, on one
 * background thread: register (retrying with backoff until the coordinator
 * answers), install the identity it hands out (worker id, global device ids,
 * process index) in the store, then heartbeat every heartbeat_ms with the
 * bytes held per device; before each heartbeat it trims the store's
 * array pool (freed blocks kept longer than its idle time go back). A
 * heartbeat answered with known = 0 (the coordinator restarted, or marked
 * this worker lost) registers again asking for the same worker id and
 * device ids and offering the shards still held; the coordinator adopts
 * those of arrays it knows and frees the others. If it hands out another
 * identity, the store drops every shard. Every shm_sweep_s seconds (if
 * set) it also sweeps the host's /dev/shm (sm_shm_sweep) of the segments
 * killed processes left: a client killed with kill -9, whose files no
 * live process holds, leaves nothing behind for longer than that plus
 * their minimum age, SM_SHM_SWEEP_AGE_S.
 *
 * Threads: sm_agent_start/sm_agent_stop from one thread (main);
 * sm_agent_identity from any thread. */
#ifndef SM_WORKER_AGENT_H
#define SM_WORKER_AGENT_H

#include <stddef.h>
#include <stdint.h>

#include "sm_err.h"
#include "sm_rpc.h"
#include "sm_svc.h"
#include "store.h"

typedef struct {
    const char *coordinator; /* "host:port" */
    const char *token;       /* NULL or "" for none */
    const sm_rpc_tls *tls;   /* NULL: plaintext; borrowed, must outlive the agent */
    const char *address;     /* this worker's advertised "host:port" */
    const char *host;        /* host name reported at registration; NULL ok */
    int ndevices;
    int process_index;  /* -1: let the coordinator assign one */
    uint32_t worker_id; /* identity to ask for at the first registration; 0: any */
    int ndevices_asked; /* with worker_id: the global device ids to ask for (0: any) */
    int32_t devices_asked[SM_MAX_WORKER_DEVICES];
    /* Called (if set) on the agent's thread after each registration, with
     * the identity installed in the store. */
    void (*on_identity)(void *user, const sm_svc_register_reply *id);
    void *on_identity_user;
    sm_store *store; /* borrowed; must outlive the agent */
    int shm_sweep_s; /* seconds between sweeps of the host's /dev/shm; 0: none */
} sm_agent_config;

typedef struct sm_agent sm_agent;

/* Copies cfg's strings and starts the thread. On SM_OK *out is owned by the
 * caller and released with sm_agent_stop. */
sm_err sm_agent_start(const sm_agent_config *cfg, sm_agent **out, char *err, size_t errlen);

/* Wakes the thread, waits for it (at most one call in flight, bounded by
 * its deadline) and frees the agent. NULL ok. */
void sm_agent_stop(sm_agent *a);

/* 1 and *out filled while registered, else 0. */
int sm_agent_identity(sm_agent *a, sm_svc_register_reply *out);

#endif
