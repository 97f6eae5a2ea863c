/* traffic: the bytes this worker process moved, by path, for its metrics
 * (shmap_worker_transfer_bytes_total, shmap_worker_shm_transfer_bytes_total,
 * shmap_worker_collective_bytes_total) and Stats.
 * Counters of the process (the worker program, not a library), added to
 * with relaxed atomics where the bytes pass. */
#ifndef SM_WORKER_TRAFFIC_H
#define SM_WORKER_TRAFFIC_H

#include <stdint.h>

typedef enum {
    SM_TRAFFIC_PUT_IN,   /* shard data received by PutShard (uploads, job and reshard writes) */
    SM_TRAFFIC_GET_OUT,  /* shard data sent by GetShard (downloads, peers' reshard pulls) */
    SM_TRAFFIC_PEER_IN,  /* shard pieces pulled from peers (reshards) */
    SM_TRAFFIC_COLL_OUT, /* collective blocks sent to peers (gRPC transport) */
    SM_TRAFFIC_COLL_IN,  /* collective blocks received from peers (gRPC transport) */
    SM_TRAFFIC_SHM_IN,   /* collective bytes read from peers' shared memory */
    SM_TRAFFIC_SHM_DIRECT_IN, /* of those, read from peers' array memory where it lies */
    SM_TRAFFIC_SHM_PUT_IN,    /* shard data copied out of clients' segments (PutShard + ShmRef) */
    SM_TRAFFIC_SHM_GET_OUT,   /* shard data copied into clients' or peers' segments (GetShard +
                               * ShmRef: downloads, peers' reshard pulls) */
    SM_TRAFFIC_SHM_PEER_IN,   /* shard pieces peers wrote into this worker's staging (reshards) */
    SM_TRAFFIC_COUNT
} sm_traffic_kind;

void sm_traffic_add(sm_traffic_kind k, int64_t bytes);
/* The counters since the start. */
void sm_traffic_get(uint64_t out[SM_TRAFFIC_COUNT]);

#endif
