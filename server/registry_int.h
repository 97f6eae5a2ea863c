/* registry_int: the registry's records, shared by registry.c (workers,
 * meshes, time), registry_array.c (arrays, uploads) and registry_reshard.c.
 * Not for use outside the registry. Every function here expects r->mu
 * held. */
#ifndef SM_SERVER_REGISTRY_INT_H
#define SM_SERVER_REGISTRY_INT_H

#include <pthread.h>
#include <stdio.h>
#include <sqlite3.h>

#include "registry.h"
#include "sm_htab.h"
#include "sm_tenant.h"

typedef struct {
    uint32_t id;
    char address[SM_ADDR_MAX];
    char host[64];
    int process_index;
    int alive;
    int64_t last_seen;
    int ndevices;
    int32_t first_device; /* devices first_device .. first_device+ndevices-1 */
    int spilled_any;      /* its last heartbeat listed spilled shards */
    int64_t device_bytes[SM_MAX_WORKER_DEVICES];
    sm_rpc_channel *ch; /* owned */
    int nshm_peers;     /* workers proven to share memory with it */
    uint32_t shm_peers[SM_MAX_SHM_PEERS];
} sm_reg_worker;

typedef struct {
    uint64_t id;
    char name[64];
    sm_mesh mesh;
    char tenant[SM_TENANT_MAX]; /* who made it ("" the cluster); names are per tenant */
} sm_reg_mesh;

/* A copy of one block kept on another worker than the mesh's devices
 * holding it (Replicate): stored there under its own id (SM_REG_COPY_ID)
 * and one of that worker's devices. */
typedef struct {
    int of;          /* the mesh position whose block it holds */
    uint32_t worker; /* the worker holding it */
    int32_t device;  /* a device of that worker */
    unsigned char filled;
} sm_reg_copy;

/* The id the copy of array id's block `of` is stored under on its worker:
 * never an array's own id (those count up from 1, below 2^40). */
#define SM_REG_COPY_BIT        (UINT64_C(1) << 62)
#define SM_REG_COPY_ID(id, of) (SM_REG_COPY_BIT | ((uint64_t)(of) + 1) << 40 | (id))
#define SM_REG_IS_COPY_ID(id)  (((id)&SM_REG_COPY_BIT) != 0)
#define SM_REG_COPY_OWNER(id)  ((id) & ((UINT64_C(1) << 40) - 1))
#define SM_REG_COPY_OF(id)     ((int)(((id) >> 40) & 0x3fffff) - 1)

typedef struct sm_reg_array {
    struct sm_reg_array *prev, *next; /* the listed arrays, in creation order */
    uint64_t id;
    char name[SM_NAME_MAX];     /* "" or unique among its tenant's listed arrays; never changes */
    char tenant[SM_TENANT_MAX]; /* who made it ("" the cluster); others get NOT_FOUND */
    sm_dtype dtype;
    sm_shape shape, shard_shape;
    uint64_t mesh_id;
    char mesh_name[64];
    sm_sharding sharding;
    sm_array_state state;
    char error[512];
    int n;                   /* mesh devices */
    sm_device_slice *slices; /* [n], mesh order */
    uint32_t *worker;        /* [n] worker id per position */
    unsigned char *filled;   /* [n] */
    unsigned char *busy;     /* [n] an upload to it is in flight */
    uint64_t *sums;          /* [n] xxHash3-64 of each shard as uploaded; 0: unknown */
    unsigned char *spilled;  /* [n] its worker's last heartbeat listed it as spilled to disk */
    int64_t deadline;        /* now_ms-based */
    uint32_t deadline_ms;    /* as requested, for messages */
    /* PUT_LOCAL: the processes (process indices, in order) owning the
     * mesh's devices, and the local shape every part has. */
    int local;
    sm_shape local_shape;
    int nprocs;
    int *proc_index;             /* [nprocs] */
    unsigned char *proc_started; /* [nprocs] the process called CreateArray */
    /* DEGRADED: a repair (registry_repair.c) is in flight; a failed one is
     * tried again from repair_after (now_ms-based) */
    int repairing;
    int64_t repair_after;
    int ncopies;
    sm_reg_copy *copies; /* [ncopies] */
    int unsaved;         /* a job's pending output: no record until it is ready */
} sm_reg_array;

/* Points t at worker w (its id, channel and address; t's devices are
 * left as they are). */
static inline void sm_reg_target_set(sm_reg_target *t, const sm_reg_worker *w)
{
    t->worker_id = w->id;
    t->ch = w->ch;
    snprintf(t->address, sizeof t->address, "%s", w->address);
}

/* Slots: an array's places holding a block, its mesh positions 0..n-1 then
 * its copies n..n+ncopies-1 (registry_repair.c). */
static inline int sm_reg_nslots(const sm_reg_array *a)
{
    return a->n + a->ncopies;
}
static inline uint32_t sm_reg_slot_worker(const sm_reg_array *a, int s)
{
    return s < a->n ? a->worker[s] : a->copies[s - a->n].worker;
}
static inline int32_t sm_reg_slot_device(const sm_reg_array *a, int s)
{
    return s < a->n ? a->slices[s].device : a->copies[s - a->n].device;
}
static inline int sm_reg_slot_filled(const sm_reg_array *a, int s)
{
    return s < a->n ? a->filled[s] : a->copies[s - a->n].filled;
}
static inline int sm_reg_slot_block(const sm_reg_array *a, int s)
{
    return s < a->n ? s : a->copies[s - a->n].of;
}
/* The id the slot's shard is stored under on its worker. */
static inline uint64_t sm_reg_slot_store_id(const sm_reg_array *a, int s)
{
    return s < a->n ? a->id : SM_REG_COPY_ID(a->id, a->copies[s - a->n].of);
}
/* The slot of a's shard stored as (store id, device), -1 if none. */
int sm_reg_slot_find(const sm_reg_array *a, uint64_t store_id, int32_t device);
/* Whether slot s's shard is present on an alive worker. */
int sm_reg_slot_present(sm_registry *r, const sm_reg_array *a, int s);

struct sm_registry {
    pthread_mutex_t mu;
    uint32_t default_deadline_ms, heartbeat_ms;
    sm_reg_worker **workers;
    int nworkers, capworkers;
    sm_reg_mesh **meshes;
    int nmeshes, capmeshes;
    /* The listed arrays: a list in creation order (what ListArrays returns)
     * and two indexes into it, by id and by name (named arrays only). Only
     * sm_reg_array_insert and sm_reg_array_unlink change them. */
    sm_reg_array *arrays, *last_array;
    int narrays;
    sm_htab array_ids, array_names;
    uint32_t next_worker;
    int32_t next_device;
    /* Kept for the coordinator's local workers (sm_registry_reserve). */
    int reserved_processes, reserved_devices;
    uint64_t epoch; /* random id of this coordinator run, echoed by heartbeats */
    uint64_t next_mesh, next_array;
    int64_t max_array_bytes; /* --max-array-mb; 0: none */
    sm_tenants *tenants;     /* --tokens: their quotas; NULL: none */
    int max_name_len;        /* --max-name-length */
    /* The state dir's database (registry_state.c); NULL: memory only. */
    sqlite3 *db;
    /* sm_reg_run's prepared statements, by the address of their SQL text
     * (each a string literal of one call site) */
    struct {
        const char *sql;
        sqlite3_stmt *st;
    } stmts[24];
    /* What the counters row holds: ids are handed out in blocks, so most
     * changes need not rewrite it (a restart starts past the block). */
    int ids_saved;
    uint32_t saved_worker;
    int32_t saved_device;
    uint64_t saved_mesh_hw, saved_array_hw, saved_job_hw;
    /* Some array may have a repair to make (it turned DEGRADED, or copies
     * were placed or lost); cleared by a sm_registry_repairs_begin scan
     * that finds none, so heartbeats need not scan every array. */
    int repair_hint;
    int tx_depth;         /* open sm_reg_tx_begin calls */
    int tx_failed;        /* a write inside the open transaction failed */
    int mesh_types_unset; /* loading a schema-3 database: meshes have no axis types */
    /* The write-ahead log's pages since its last checkpoint, and when a
     * commit last added to it (sm_registry_checkpoint). */
    int wal_pages;
    int64_t wal_change_ms;
};

/* An array name against --max-name-length (r->mu held). */
sm_err sm_reg_array_name_check(const sm_registry *r, const char *name, char *err, size_t errlen);

/* Grows a pointer vector by one slot; 0 on success, -1 out of memory. */
int sm_reg_vec_push(void ***v, int *n, int *cap, void *item);

sm_reg_worker *sm_reg_worker_by_id(sm_registry *r, uint32_t id);
sm_reg_worker *sm_reg_worker_of_device(sm_registry *r, int32_t device);
sm_reg_mesh *sm_reg_mesh_find(sm_registry *r, uint64_t id, const char *name);
/* Checks a user-chosen name: at most max-1 bytes, not all digits. */
sm_err sm_reg_name_check(const char *what, const char *name, size_t max, char *err, size_t errlen);

/* Formats, in increasing order, the devices of a at the positions where
 * pick[p] is set ("4,5,6"); returns how many. */
int sm_reg_device_list(const sm_reg_array *a, const unsigned char *pick, char *buf, size_t len);

/* The state an array that was once ready has now (registry_repair.c):
 * READY when every position's shard is present on an alive worker,
 * DEGRADED when some are not but every block (index) still has a present
 * copy on an alive worker, LOST otherwise (and always when a position is
 * missing from an unreduced array, whose blocks are not copies). */
sm_array_state sm_reg_array_health(sm_registry *r, const sm_reg_array *a);
/* Moves a (READY, DEGRADED or LOST) to sm_reg_array_health's state, with a
 * sentence naming the missing devices and, where given, why (a worker's
 * loss or return), saved; logs the change. */
void sm_reg_array_update_health(sm_registry *r, sm_reg_array *a, const char *why);

/* The repair of a's missing shards on w that have a live copy, among
 * slots from..to-1 (all of one store id: the mesh's positions, or one
 * copy): one Assemble of them, each from a live copy. 0: nothing to copy;
 * 1: *rep filled (release it with sm_reg_repair_release); -1: out of
 * memory. */
int sm_reg_repair_build(sm_registry *r, const sm_reg_array *a, const sm_reg_worker *w, int from,
                        int to, sm_reg_repair *rep);
void sm_reg_repair_release(sm_reg_repair *rep);
/* sm_reg_repair_build's repair, when there is one, appended to *reps (its
 * count *nreps) and counted in a->repairing. SM_ENOMEM (what: "planning
 * repairs", for the sentence) leaves *reps as it was. */
sm_err sm_reg_repair_add(sm_registry *r, sm_reg_array *a, const sm_reg_worker *w, int from, int to,
                         sm_reg_repair **reps, int *nreps, const char *what, char *err,
                         size_t errlen);

/* Resolves a sharding reference into a mesh and spec (inline meshes are
 * registered, or matched to an identical registered one). */
sm_err sm_reg_sharding_resolve(sm_registry *r, const sm_sharding_ref *ref, sm_sharding *out,
                               sm_reg_mesh **mesh, char *err, size_t errlen);

/* The listed array ref names: by id if ref.id.v, else by name. NULL with
 * SM_ENOTFOUND (or SM_EINVAL for an empty ref) in err when there is none. */
sm_reg_array *sm_reg_array_find(sm_registry *r, sm_array_ref ref, char *err, size_t errlen);
/* sm_reg_array_find as an error: SM_OK with *out the array and, when label
 * is not NULL, its label (sm_reg_array_label) in label; else SM_ENOTFOUND,
 * or SM_EINVAL for an empty ref, with sm_reg_array_find's sentence. */
sm_err sm_reg_array_get(sm_registry *r, sm_array_ref ref, sm_reg_array **out, char *label,
                        size_t labellen, char *err, size_t errlen);
/* The array of id that an operation (what: "the upload") began on, with
 * its label in label: SM_EPRECONDITION when it was deleted since. */
sm_err sm_reg_array_during(sm_registry *r, sm_array_id id, const char *what, sm_reg_array **out,
                           char *label, size_t labellen, char *err, size_t errlen);
/* "array 'x'" or "array 17" into buf. */
const char *sm_reg_array_label(const sm_reg_array *a, char *buf, size_t len);
void sm_reg_array_destroy(sm_reg_array *a);
/* Removes a from the list and its indexes (not freed); a no-op if a is not
 * listed. */
void sm_reg_array_unlink(sm_registry *r, sm_reg_array *a);
/* Sets a->error to msg (truncated to fit). */
void sm_reg_array_set_error(sm_reg_array *a, const char *msg);
/* Fails a pending array with msg and appends frees for its shards on alive
 * workers. */
void sm_reg_array_fail(sm_registry *r, sm_reg_array *a, const char *msg, sm_reg_free **frees,
                       int *nfrees);
/* Appends one free per alive worker holding devices of a (all of them if
 * filled_only is 0, else only filled or busy ones). */
void sm_reg_array_frees(sm_registry *r, const sm_reg_array *a, int filled_only, sm_reg_free **frees,
                        int *nfrees);
/* Allocates an array record of n devices; NULL when out of memory. */
sm_reg_array *sm_reg_array_alloc(int n);
/* A new pending array record (not yet listed) for sharding s, validated
 * against shape; worker[] gives each mesh position's worker. */
sm_err sm_reg_array_new(sm_registry *r, const char *name, sm_dtype dtype, const sm_sharding *s,
                        const sm_reg_mesh *rm, const sm_shape *shape, const uint32_t *worker,
                        int64_t now_ms, uint32_t deadline_ms, sm_reg_array **out, char *err,
                        size_t errlen);
/* Lists a (last) and gives it the next id; its name, if any, must not be
 * taken (callers check with sm_reg_array_find). SM_ENOMEM changes nothing. */
sm_err sm_reg_array_insert(sm_registry *r, sm_reg_array *a, char *err, size_t errlen);
/* Fills info from a. */
sm_err sm_reg_array_info(sm_registry *r, const sm_reg_array *a, sm_array_info *info, char *err,
                         size_t errlen);
/* Looks up the worker of every mesh device of s (into worker[]); a device
 * no alive worker holds is SM_EUNAVAILABLE. */
sm_err sm_reg_mesh_workers(sm_registry *r, const sm_mesh *m, uint32_t *worker, char *err,
                           size_t errlen);

/* What a reshard or a load asks of its new array (r->mu held): name ("":
 * none) valid and not taken, and ref resolved into *s on *rm with no
 * unreduced axes (what names the sharding in that message). */
sm_err sm_reg_array_target(sm_registry *r, const char *name, const sm_sharding_ref *ref,
                           const char *what, sm_sharding *s, sm_reg_mesh **rm, char *err,
                           size_t errlen);

/* Where the pieces of a plan turned into Assembles read from: a reshard's
 * source array (its slots, on workers: each piece names its worker's
 * address, or "" for the worker itself), or a load's checkpoint (array
 * NULL: the files of dir, borrowed by every part). */
typedef struct {
    const sm_reg_array *array;
    const char *dir;
    int nfiles;
    sm_svc_ckpt_file *files;
} sm_reg_assemble_src;
/* Turns plan into one Assemble per destination worker of the new array
 * new_id (of dtype): *out (malloc'd, *nout parts, freed with
 * sm_registry_assemble_free). With r->mu held. SM_ENOMEM changes
 * nothing. */
sm_err sm_reg_assemble_build(sm_registry *r, const sm_reg_assemble_src *src, sm_dtype dtype,
                             uint64_t new_id, const sm_plan_reshard *plan, sm_reg_assemble **out,
                             int *nout, char *err, size_t errlen);
/* Plans moving the blocks slices[0..n) (owned as own says) into the
 * pending array a (device p on worker[p]), turns the plan into Assembles
 * reading from src and lists a (sm_reg_array_insert), with r->mu held.
 * SM_OK: a belongs to the registry; else nothing changed. */
sm_err sm_reg_assemble_plan(sm_registry *r, const sm_reg_assemble_src *src,
                            const sm_device_slice *slices, const sm_plan_owner *own, int n,
                            sm_reg_array *a, const uint32_t *worker, sm_reg_assemble **parts,
                            int *nparts, char *err, size_t errlen);

/* ---- persistence (registry_state.c) ------------------------------------
 * Each call writes one change, with the id counters, in one transaction of
 * its own, or in the enclosing sm_reg_tx_begin / sm_reg_tx_end (nestable)
 * so that a change touching many records commits whole. No-ops without a
 * database. A failed write is logged as an error: memory stays the
 * authority for this run, and the next restart sees the last commit. */
void sm_reg_tx_begin(sm_registry *r);
void sm_reg_tx_end(sm_registry *r);
void sm_reg_save_array(sm_registry *r, const sm_reg_array *a);
void sm_reg_save_array_gone(sm_registry *r, uint64_t id);
/* Rewrites the rows of a's copies (Replicate). */
void sm_reg_save_copies(sm_registry *r, const sm_reg_array *a);
/* Records the id counters if the ids handed out passed what is recorded
 * (in a transaction of its own, or the enclosing one). */
void sm_reg_save_ids(sm_registry *r);
void sm_reg_save_worker(sm_registry *r, const sm_reg_worker *w);
void sm_reg_save_mesh(sm_registry *r, const sm_reg_mesh *m);
/* sm_registry_job_save under r->mu (in the enclosing transaction, if any). */
void sm_reg_job_save_locked(sm_registry *r, uint64_t id, int state, const char *error,
                            const char *tenant);

#endif
