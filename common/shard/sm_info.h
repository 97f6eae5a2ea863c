/* sm_info: how the service describes its workers, meshes and arrays: plain
 * value structs shared by the coordinator, the wire layer (common/rpc) and
 * the client library. Structs with a pointer own what it points to and are
 * released with their _free function; the rest are plain values. */
#ifndef SM_INFO_H
#define SM_INFO_H

#include <stdint.h>

#include "sm_dtype.h"
#include "sm_mesh.h"
#include "sm_shape.h"
#include "sm_sharding.h"

#define SM_MAX_WORKER_DEVICES 256
/* Largest grant a shard's description carries (sm_grant.h: 40 bytes). */
#define SM_SHARD_GRANT_MAX 48
#define SM_MAX_SHM_PEERS   64
#define SM_NAME_MAX        128
#define SM_ADDR_MAX        128

/* Ids that cross the wire are typed, so mixing them up does not compile. */
typedef struct {
    uint64_t v;
} sm_array_id;
typedef struct {
    uint64_t v;
} sm_mesh_id;
typedef struct {
    uint64_t v;
} sm_job_id;
typedef struct {
    uint32_t v; /* 0: none */
} sm_worker_id;

/* Names an array: by id when id.v != 0, else by name (borrowed). */
typedef struct {
    sm_array_id id;
    const char *name;
} sm_array_ref;

/* The sharding of an upload or reshard: exactly one of mesh (inline),
 * mesh_name or mesh_id names the mesh; spec is the PartitionSpec. An inline
 * mesh with default_order set gets the service's default device order. */
typedef struct {
    const sm_mesh *mesh;
    int default_order;
    const char *mesh_name;
    sm_mesh_id mesh_id;
    sm_pspec spec;
} sm_sharding_ref;

typedef struct {
    sm_worker_id id;
    char address[SM_ADDR_MAX];
    char host[64];
    int process_index;
    int alive;
    int64_t ms_since_heartbeat;
    int ndevices;
    int32_t devices[SM_MAX_WORKER_DEVICES];
    int64_t device_bytes[SM_MAX_WORKER_DEVICES];
    /* Workers proven to share memory with this one (their collectives go
     * through it); known once a job ran on both. */
    int nshm_peers;
    sm_worker_id shm_peers[SM_MAX_SHM_PEERS];
} sm_worker_info;

typedef struct {
    sm_mesh_id id;
    char name[64];
    sm_mesh mesh;
} sm_mesh_info;

typedef enum {
    SM_ARRAY_PENDING = 1,
    SM_ARRAY_READY = 2,
    SM_ARRAY_FAILED = 3,
    SM_ARRAY_LOST = 4,
    /* was ready; some devices are gone, but every block still has a copy on
     * a live worker, so it can be read and resharded (not used by jobs) */
    SM_ARRAY_DEGRADED = 5,
} sm_array_state;

/* "pending", "ready", "failed", "lost", "degraded" ("?" otherwise). */
const char *sm_array_state_name(sm_array_state s);

typedef struct {
    int32_t device;
    sm_worker_id worker_id;
    char worker_address[SM_ADDR_MAX];
    int64_t coords[SM_MAX_AXES];
    sm_index index;
    int replica_id;
    int present;
    int spilled;        /* present, on its worker's disk only (read back on use) */
    uint64_t stored_as; /* a copy (sm_array_info.copies): the id it is stored under on its
                           worker, to read it with; 0 for the mesh's own shards */
    /* Described to a tenant: the grant of the transfer the shard admits
     * now straight with its worker (upload while missing, download once
     * present), grant_len bytes; 0: none. A secret: never print it. */
    int grant_len;
    unsigned char grant[SM_SHARD_GRANT_MAX];
} sm_shard_info;

typedef struct {
    sm_array_id id;
    char name[SM_NAME_MAX];
    sm_dtype dtype;
    sm_shape shape;
    sm_shape shard_shape;
    sm_mesh_id mesh_id;
    char mesh_name[64];
    sm_sharding sharding;
    char type[256]; /* JAX type string, e.g. f32[8@i,16] */
    sm_array_state state;
    char error[512];
    int64_t bytes; /* bytes of one full copy */
    int nshards;
    sm_shard_info *shards; /* owned (malloc); one per mesh device, mesh order */
    /* Copies of blocks kept on other workers (Replicate): device is the
     * holder's device, index the block, replica_id -1; owned (malloc). */
    int ncopies;
    sm_shard_info *copies;
} sm_array_info;

/* Frees info->shards and zeroes the count; the struct itself is the
 * caller's. NULL is ignored. */
void sm_array_info_free(sm_array_info *info);
/* Frees every entry's shards, then the list itself (free). */
void sm_array_info_list_free(sm_array_info *list, int n);

typedef enum {
    SM_JOB_QUEUED = 1,
    SM_JOB_RUNNING = 2,
    SM_JOB_DONE = 3,
    SM_JOB_FAILED = 4,
    SM_JOB_CANCELLED = 5,
} sm_job_state;

/* "queued", "running", "done", "failed", "cancelled" ("?" otherwise). */
const char *sm_job_state_name(sm_job_state s);

typedef struct {
    sm_job_id id;
    sm_job_state state;
    char error[1024]; /* why FAILED or CANCELLED */
    int noutputs;
    sm_array_info *outputs; /* owned; when DONE, one per returned value, in order */
    int64_t queued_us;      /* submit to start */
    int64_t run_us;         /* start to end */
} sm_job_info;

/* Frees the outputs (and their shards); the struct itself is the caller's. */
void sm_job_info_free(sm_job_info *info);

#endif
