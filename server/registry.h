/* registry: everything the coordinator knows — workers and their devices,
 * meshes, arrays (with the state of every shard) — behind one mutex.
 *
 * The registry never talks to the network. Operations that need workers
 * (uploads, deletes, reshards, failing arrays) are split in two: a registry
 * call validates and changes state under the lock and returns what to send
 * to whom (worker channels, device lists); the caller does the RPCs with no
 * lock held and reports back. Every function takes the current time
 * (now_ms, sm_time_mono_ms) instead of reading a clock, so tests
 * drive time by hand.
 *
 * Ids are never reused. Worker channels are owned by the registry and live
 * until sm_registry_free, so a channel pointer returned by any call stays
 * valid after the lock is released.
 *
 * Thread-safety: every function is safe from any thread. Errors are an
 * sm_err with one sentence in err; a failed call changes nothing. */
#ifndef SM_SERVER_REGISTRY_H
#define SM_SERVER_REGISTRY_H

#include <stdint.h>

#include "ckpt.h"
#include "plan.h"
#include "tenants.h"
#include "sm_info.h"
#include "sm_tenant.h"
#include "sm_svc.h"

typedef struct sm_registry sm_registry;

/* Creates an empty registry. default_deadline_ms: pending arrays fail after
 * this long unless a request gives its own; heartbeat_ms: told to workers
 * at registration. *out is freed with sm_registry_free. */
sm_err sm_registry_create(uint32_t default_deadline_ms, uint32_t heartbeat_ms, sm_registry **out,
                          char *err, size_t errlen);
/* Limits on what clients create (the coordinator's flags): an array's bytes
 * (one full copy; 0: none) and a name's length in characters (at most
 * SM_NAME_MAX - 1). Refusals name the flag. */
void sm_registry_set_limits(sm_registry *r, int64_t max_array_bytes, int max_name_len);
/* Tenants (--tokens; borrowed, NULL: none): every array and mesh belongs to
 * the tenant of the thread that made it (sm_tenant_current), is found and
 * listed by that tenant only (another gets NOT_FOUND; the cluster, tenant
 * "", sees all), its name is unique within its tenant, and a tenant's
 * arrays may not hold more than its max-bytes quota (RESOURCE_EXHAUSTED). */
void sm_registry_set_tenants(sm_registry *r, sm_tenants *t);
/* Keeps the registry in SQLite under dir (created if missing; the file
 * dir/registry.db, WAL mode): checks the database (PRAGMA integrity_check;
 * a damaged one is SM_EDATALOSS with a sentence), takes it for this process
 * alone (another coordinator on it: SM_EPRECONDITION), loads what an
 * earlier run recorded and from then on commits every registry change in
 * one transaction. Loaded workers are lost until they register again;
 * arrays that were ready or lost are LOST until every worker holding them
 * registers again offering its shards (then READY, same id and name);
 * pending ones are FAILED. Ids continue after the largest ever handed out.
 * Call once, right after sm_registry_create, before any other use. */
sm_err sm_registry_open_state(sm_registry *r, const char *dir, char *err, size_t errlen);
/* Closes the database (sm_registry_free does too). */
void sm_registry_close_state(sm_registry *r);
/* A job's record as the database keeps it (state: an sm_job_state). */
typedef struct {
    uint64_t id;
    int state;
    char error[1024];
    char tenant[SM_TENANT_MAX]; /* whose job it is; "" the cluster's */
} sm_reg_job;

/* Records job id's state and error, and its tenant (NULL or "" for the
 * cluster's), in one transaction; the job ids handed out so far are
 * remembered with it. A no-op without a state dir. */
void sm_registry_job_save(sm_registry *r, uint64_t id, int state, const char *error,
                          const char *tenant);
/* 1 if job id `id` can never be handed out again, even after a restart
 * with no record of it (the id counter on disk is past it), or if there is
 * no state dir; 0 if only a record of the job would keep it. */
int sm_registry_job_id_kept(sm_registry *r, uint64_t id);
/* The jobs' records of earlier runs in id order (*out malloc'd, caller
 * frees; NULL and 0 without a state dir) and the largest job id ever
 * handed out (*last_id; 0 if none). */
sm_err sm_registry_jobs_restore(sm_registry *r, uint64_t *last_id, sm_reg_job **out, int *n,
                                char *err, size_t errlen);
/* Keeps process indices 0..nprocesses-1 and device ids below
 * nprocesses * ndevices for the workers that ask for them (the
 * coordinator's local workers, started after it serves): a worker that
 * names no process index gets neither, so one registering first cannot
 * take a local worker's place. Before any worker registers. */
void sm_registry_reserve(sm_registry *r, int nprocesses, int ndevices);
/* Frees everything, including worker channels. Call when nothing else uses
 * the registry (server stopped). NULL ok. */
void sm_registry_free(sm_registry *r);

/* The devices of one array on one worker: what a caller must send there. */
typedef struct {
    uint32_t worker_id;
    sm_rpc_channel *ch; /* borrowed from the registry; may be NULL in tests */
    char address[SM_ADDR_MAX];
    int ndevices;
    int32_t devices[SM_MAX_WORKER_DEVICES];
} sm_reg_target;

/* A request to free one array's shards on one worker. */
typedef struct {
    sm_array_id array;
    sm_reg_target t;
} sm_reg_free;

/* ---- workers ------------------------------------------------------------ */

/* The random id of this coordinator run, echoed by heartbeats. */
uint64_t sm_registry_epoch(const sm_registry *r);

/* Registers a worker. process_index < 0 assigns the lowest index no alive
 * worker holds; a requested index an alive worker holds is SM_EEXIST. A new
 * worker at the address of an alive one replaces it (the old one is marked
 * lost: its process restarted). Device ids continue from the last worker's.
 * ch (may be NULL) is taken on success only. Pending arrays that lose
 * devices this way are failed and their frees appended to *frees / *nfrees
 * (malloc'd, caller frees; may be set even on SM_OK). */
sm_err sm_registry_worker_add(sm_registry *r, const sm_svc_register_req *req, sm_rpc_channel *ch,
                              int64_t now_ms, sm_svc_register_reply *out, sm_reg_free **frees,
                              int *nfrees, char *err, size_t errlen);
/* Records a heartbeat; returns 1 if the worker is known and alive, else 0
 * (the worker must register again). */
int sm_registry_worker_heartbeat(sm_registry *r, const sm_svc_heartbeat_req *req, int64_t now_ms);
/* Marks the alive worker with this id (or, if id is 0, the alive worker
 * with process index process) lost, with why in the log. Ready arrays with
 * shards there turn DEGRADED when every block still has a live copy, else
 * LOST; pending ones FAILED, their frees appended to
 * *frees (as above). Returns 1 if a worker was marked. */
int sm_registry_worker_lose(sm_registry *r, uint32_t id, int process, const char *why,
                            sm_reg_free **frees, int *nfrees);
/* Every worker (lost ones too) in registration order; *out malloc'd. */
sm_err sm_registry_workers_list(sm_registry *r, int64_t now_ms, sm_worker_info **out, int *n,
                                char *err, size_t errlen);
/* Number of alive workers. */
int sm_registry_workers_alive(sm_registry *r);
/* 1 if worker id is registered and alive, 0 if it is lost or unknown. */
int sm_registry_worker_alive(sm_registry *r, uint32_t id);
/* Records that workers a and b proved they share memory (both ways), for
 * the listing; unknown ids are ignored. */
void sm_registry_worker_shm_peer(sm_registry *r, uint32_t a, uint32_t b);

/* ---- meshes --------------------------------------------------------------- */

/* Creates a mesh from mesh's axes; default_order (or mesh->ndevices == 0)
 * fills the devices with the default order over the alive workers in
 * process-index order (whole workers first, then the first devices of the
 * next one, as jax.make_mesh takes the first N devices),
 * else mesh->devices must name registered devices, each once. name may be
 * NULL/"" ; otherwise unique and not all digits. */
sm_err sm_registry_mesh_create(sm_registry *r, const char *name, const sm_mesh *mesh,
                               int default_order, sm_mesh_info *out, char *err, size_t errlen);
/* By id (id.v != 0) or name. SM_ENOTFOUND naming it. */
sm_err sm_registry_mesh_get(sm_registry *r, sm_mesh_id id, const char *name, sm_mesh_info *out,
                            char *err, size_t errlen);
sm_err sm_registry_mesh_list(sm_registry *r, sm_mesh_info **out, int *n, char *err, size_t errlen);

/* ---- arrays ----------------------------------------------------------------- */

/* CreateArray for every put kind (docs/service.md "Uploads"): validates,
 * creates (or, for PUT_LOCAL with an existing name, attaches to) a pending
 * array with its deadline and fills out (owned by the caller,
 * sm_svc_create_array_reply_free). */
sm_err sm_registry_array_create(sm_registry *r, const sm_svc_create_array_req *req, int64_t now_ms,
                                sm_svc_create_array_reply *out, char *err, size_t errlen);

/* Starts an upload: checks the header (array pending, devices of the array
 * and unfilled and not being uploaded, shape the shard shape, dtype and
 * byte count) and reserves the devices. *targets (malloc'd, caller frees)
 * lists them per worker, in worker order; *deadline_ms is the time left
 * before the array's deadline. Every successful begin must be followed by
 * one sm_registry_upload_end with the same devices. */
sm_err sm_registry_upload_begin(sm_registry *r, const sm_svc_upload_header *h, int64_t now_ms,
                                sm_reg_target **targets, int *ntargets, int64_t *deadline_ms,
                                char *err, size_t errlen);
/* Ends an upload: releases the devices and, if ok, marks them filled (the
 * array turns READY when every device is; *ready says so). If the array was
 * deleted or left the pending state meanwhile, returns SM_EPRECONDITION with
 * a sentence: the caller must free what it stored. */
sm_err sm_registry_upload_end(sm_registry *r, sm_array_id id, const int32_t *devices, int n, int ok,
                              int *ready, char *err, size_t errlen);

/* Records the checksum of the shard an upload stored on devices[0..n) of
 * array id (after a successful sm_registry_upload_end), so that a worker
 * offering it back after a restart is checked against it. Unknown arrays
 * and devices are ignored. */
void sm_registry_upload_checksum(sm_registry *r, sm_array_id id, const int32_t *devices, int n,
                                 uint64_t checksum);

/* Starts a commit of a direct upload (CommitShards): as
 * sm_registry_upload_begin with a header of the array's shard shape and
 * dtype and req's devices and byte count. Ended with sm_registry_upload_end. */
sm_err sm_registry_commit_begin(sm_registry *r, const sm_svc_commit_req *req, int64_t now_ms,
                                sm_reg_target **targets, int *ntargets, int64_t *deadline_ms,
                                char *err, size_t errlen);

/* Checks that ref names a READY array holding device and returns the
 * array id and the device's worker. Not ready: SM_EPRECONDITION saying how
 * many shards arrived. */
sm_err sm_registry_download_begin(sm_registry *r, sm_array_ref ref, int32_t device, sm_array_id *id,
                                  sm_reg_target *worker, char *err, size_t errlen);

/* Describe / list (info owned by the caller, sm_array_info_free /
 * sm_array_info_list_free). */
sm_err sm_registry_array_describe(sm_registry *r, sm_array_ref ref, sm_array_info *out, char *err,
                                  size_t errlen);
sm_err sm_registry_array_list(sm_registry *r, sm_array_info **out, int *n, char *err,
                              size_t errlen);

/* Removes an array; *frees lists its shards on alive workers (caller frees
 * the list and sends FreeArray). Unknown: SM_ENOTFOUND. */
sm_err sm_registry_array_delete(sm_registry *r, sm_array_ref ref, sm_reg_free **frees, int *nfrees,
                                char *err, size_t errlen);

/* One worker's part of a reshard. */
typedef struct {
    sm_reg_target t;            /* the worker and its new devices */
    sm_svc_assemble_req req;    /* shards and pieces (owned, see _free) */
    char (*addrs)[SM_ADDR_MAX]; /* one source address per piece (owned) */
} sm_reg_assemble;

/* Starts a reshard: the source must be READY; the new sharding is checked
 * against its global shape; a new pending array (name unique) is created
 * and planned (plan.h). *parts (one per worker, malloc'd) is released
 * with sm_registry_assemble_free. */
sm_err sm_registry_reshard_begin(sm_registry *r, const sm_svc_reshard_req *req, int64_t now_ms,
                                 sm_array_id *new_id, sm_reg_assemble **parts, int *nparts,
                                 char *err, size_t errlen);
void sm_registry_assemble_free(sm_reg_assemble *parts, int n);
/* Ends a reshard: ok marks every device filled (READY) and fills *info
 * (caller frees); otherwise the new array is removed. A new array that left
 * the pending state meanwhile is removed and SM_EPRECONDITION returned. */
sm_err sm_registry_reshard_end(sm_registry *r, sm_array_id id, int ok, sm_array_info *info,
                               char *err, size_t errlen);
/* Ends job `job` whose program ran everywhere, in one transaction: its
 * outputs outs[0..nout) end as sm_registry_reshard_end(ok = 1) ends them
 * (infos[k] filled, caller frees) and its record is saved with state
 * (an sm_job_state) and tenant, as sm_registry_job_save does. One commit
 * rather than one per output plus one for the record: a job's round trip
 * pays for each. If an output cannot end (it left the pending state
 * meanwhile), the error names it ("output K: ..."), the record is not
 * saved (the caller ends the job as failed), and *ndone says how many
 * outputs before it ended (ready; the caller deletes them). */
sm_err sm_registry_job_done(sm_registry *r, uint64_t job, int state, const char *tenant,
                            const sm_array_id *outs, int nout, sm_array_info *infos, int *ndone,
                            char *err, size_t errlen);

/* ---- repairs (registry_repair.c) ---------------------------------------
 * A DEGRADED array (some devices gone, every block still held by a live
 * worker) is repaired when a position's worker is alive again without its
 * shard: the shard is copied back from a live copy by an Assemble of the
 * same array on that worker. The copies Replicate places on other workers
 * (registry_replicate.c) are made, and made again after a loss, the same
 * way, under the array's copy id. */

/* One repair: an Assemble of array's missing devices on one worker. */
typedef struct {
    sm_array_id array;
    sm_reg_assemble part; /* one piece per shard, the whole block of a copy */
} sm_reg_repair;

/* The repairs worker_id can take now (degraded arrays with missing shards
 * on it, not already being repaired, not waiting after a failed try);
 * each is marked in flight until sm_registry_repair_end. *out (malloc'd)
 * is released with sm_registry_repairs_free. */
sm_err sm_registry_repairs_begin(sm_registry *r, uint32_t worker_id, int64_t now_ms,
                                 sm_reg_repair **out, int *nout, char *err, size_t errlen);
/* Ends one repair: ok marks its devices present (READY when every shard is
 * back); a failure is logged with why and tried again a second later.
 * Returns 0 when the array was deleted or failed meanwhile: the caller frees
 * what the repair stored (part.req.array_id on the part's devices). */
int sm_registry_repair_end(sm_registry *r, const sm_reg_repair *rep, int64_t now_ms, int ok,
                           const char *why);
void sm_registry_repairs_free(sm_reg_repair *reps, int n);

/* Replicate (registry_replicate.c): with req->replicas 2, places a copy of
 * every block of a READY array that one worker alone holds on another
 * alive worker (once; kept across restarts) and returns the repairs that
 * make the copies still missing (marked in flight; end each with
 * sm_registry_repair_end). With 1, drops the copies: their frees are
 * appended to *frees. SM_EUNAVAILABLE when no other worker can take a
 * block. */
sm_err sm_registry_replicate_begin(sm_registry *r, const sm_svc_replicate_req *req,
                                   sm_reg_repair **reps, int *nreps, sm_reg_free **frees,
                                   int *nfrees, char *err, size_t errlen);

/* ---- checkpoints (registry_ckpt.c) ------------------------------------------ */

/* One worker's part of a save: the distinct shards it writes. */
typedef struct {
    sm_reg_target t;
    int nfiles;
    sm_svc_ckpt_file files[SM_MAX_WORKER_DEVICES]; /* file points into m's entries */
    int shard[SM_MAX_WORKER_DEVICES];              /* each file's entry in the manifest */
} sm_reg_save_part;

/* Starts a save of a READY array: fills m (dtype, shape, sharding and one
 * entry per distinct box, in order of first appearance in the mesh, with
 * its file name and the devices holding it; bytes and checksum are left 0
 * for the caller to fill from the workers' replies; sm_ckpt_manifest_free)
 * and *parts (one per worker, malloc'd, caller frees): each box is written
 * by the worker of the first device in mesh order holding it. *id is the
 * array's id; label
 * receives "array 'x'" for messages. */
sm_err sm_registry_save_begin(sm_registry *r, sm_array_ref ref, sm_array_id *id,
                              sm_ckpt_manifest *m, sm_reg_save_part **parts, int *nparts,
                              char *label, size_t labellen, char *err, size_t errlen);

/* The first alive worker in registration order (to read a manifest);
 * SM_EUNAVAILABLE when there is none. */
sm_err sm_registry_any_worker(sm_registry *r, sm_reg_target *out, char *err, size_t errlen);

/* Starts a load: a new pending array (name unique, as for a reshard) of
 * m's dtype and shape with req's sharding, planned from m's stored boxes:
 * each device's shard from the pieces of the files it overlaps. *parts
 * (one per worker; sm_registry_assemble_free) read files[k] (m's entry k;
 * borrowed, with req->dir: both must outlive the parts). Ended with
 * sm_registry_reshard_end. */
sm_err sm_registry_load_begin(sm_registry *r, const sm_svc_load_req *req, const sm_ckpt_manifest *m,
                              sm_svc_ckpt_file *files, int64_t now_ms, sm_array_id *new_id,
                              sm_reg_assemble **parts, int *nparts, char *err, size_t errlen);

/* Periodic work: pending arrays past their deadline turn FAILED with a
 * sentence naming the missing processes or devices; alive workers silent
 * for lost_after_ms turn lost (see sm_registry_worker_lose). Frees to send
 * go to *frees (malloc'd, caller frees). */
void sm_registry_reap(sm_registry *r, int64_t now_ms, int64_t lost_after_ms, sm_reg_free **frees,
                      int *nfrees);
/* Periodic work with a state dir: copies the database's write-ahead log
 * into it (a checkpoint, with its fdatasyncs) once no change came for a
 * moment, or the log grew large, so that commits on a request's path do
 * not. No-op without a state dir or with little to copy. */
void sm_registry_checkpoint(sm_registry *r, int64_t now_ms);

#endif
