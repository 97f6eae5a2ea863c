/* store: the shards a worker holds, keyed by (array id, device).
 *
 * A shard is an immutable, reference-counted host buffer (64-byte aligned)
 * plus its dtype and shape. The store keeps one reference per (array,
 * device); sm_store_get hands out another, so a reader (a GetShard stream, a
 * local assemble piece) keeps the bytes alive even if the shard is freed or
 * replaced meanwhile. A shard is filled while only its creator holds it and
 * becomes visible through sm_store_put, whole or not at all. Shard memory
 * comes from the array pool the store is created with (a worker's: its
 * buffer cache and memory limit), which every shard records.
 *
 * Devices are the worker's global device ids, set at registration with
 * sm_store_set_identity (which also drops every shard, as after a
 * coordinator restart). Until then the store owns no device. Each identity
 * gets a new epoch; a put started under an older epoch is refused.
 *
 * Threads: every sm_store_* function is thread-safe (one mutex, held only
 * for table updates, never while copying data). A shard's refcount is
 * atomic; its contents must not change once it has been put. */
#ifndef SM_WORKER_STORE_H
#define SM_WORKER_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "sm_array.h"
#include "sm_dtype.h"
#include "sm_err.h"
#include "sm_info.h"
#include "sm_shape.h"
#include "sm_svc.h"

/* Alignment of every shard buffer, in bytes. */
#define SM_STORE_ALIGN 64

typedef struct {
    sm_dtype dtype;
    sm_shape shape;
    int64_t nbytes;
    void *data;          /* SM_STORE_ALIGN-aligned; never NULL, even for 0 bytes */
    int refs;            /* private: atomic reference count */
    sm_array_pool *pool; /* private: where data came from (borrowed) */
    /* private: the counted block data lies in, which arrays aliasing the
     * shard's bytes (a job's values, sm_array_alias) share with it: the
     * memory goes back to the pool with the last of them */
    sm_array_block *block;
    /* xxHash3-64 of the bytes, if has_checksum (set by its creator before
     * the put: PutShard records the verified checksum; copies keep it). */
    int has_checksum;
    uint64_t checksum;
} sm_store_shard;

typedef struct sm_store sm_store;

/* ---- shards ------------------------------------------------------------ */

/* A new shard of dtype t and shape s with one reference held by the caller;
 * contents uninitialised, data from pool (NULL: none), which the shard
 * records and gives the data back to when freed. The byte count is
 * overflow-checked (SM_EOVERFLOW); an invalid dtype or shape is SM_EINVAL;
 * a shard larger than the host's physical memory, past the pool's limit,
 * or no memory, is SM_ERESOURCE. */
sm_err sm_store_shard_create(sm_array_pool *pool, sm_dtype t, const sm_shape *s,
                             sm_store_shard **out, char *err, size_t errlen);
/* A new shard (one reference) holding src's bytes without a copy: its
 * dtype, shape, data and checksum, and a reference to its block, so the
 * bytes live until both shards are released. For devices of one worker
 * whose shards have the same bytes (a replicated layout). SM_ERESOURCE
 * when out of memory for the header. */
sm_err sm_store_shard_share(sm_store_shard *src, sm_store_shard **out, char *err, size_t errlen);
/* A new shard (one reference) with a copy of src's dtype, shape and bytes,
 * from src's pool. */
sm_err sm_store_shard_copy(const sm_store_shard *src, sm_store_shard **out, char *err,
                           size_t errlen);
/* Copies src's bytes and checksum into dst, a shard of the same dtype and
 * shape. */
void sm_store_shard_copy_into(const sm_store_shard *src, sm_store_shard *dst);
/* A new shard (one reference) holding the bytes of *a without a copy: it
 * takes over a's data and its pool, and a's reference to its block when
 * other arrays share it (sm_array_alias); copied, into a's pool, instead
 * if it is not SM_STORE_ALIGN-aligned, a is empty, or a's block is more
 * than twice a's bytes (a slice of a larger value: the store keeps no
 * more memory than a shard holds, and twice that at most). On
 * success *a is freed and set to NULL; on failure (SM_ERESOURCE) it is left
 * as it was. */
sm_err sm_store_shard_adopt(sm_array **a, sm_store_shard **out, char *err, size_t errlen);
/* Adds a reference; returns sh. */
sm_store_shard *sm_store_shard_ref(sm_store_shard *sh);
/* Drops a reference, freeing the shard with the last one. NULL ok. */
void sm_store_shard_release(sm_store_shard *sh);

/* ---- the store --------------------------------------------------------- */

/* A store whose shards take their memory from pool (borrowed: it must
 * outlive the store; NULL: no cache, no limit). */
sm_err sm_store_create(sm_array_pool *pool, sm_store **out, char *err, size_t errlen);
/* The pool given to sm_store_create (borrowed). */
sm_array_pool *sm_store_pool(sm_store *st);
/* Frees every shard reference the store holds, then the store. NULL ok. */
void sm_store_free(sm_store *st);

/* Sets the worker id and the global ids of its devices (ndevices <=
 * SM_MAX_WORKER_DEVICES, distinct), drops every shard and starts a new epoch.
 * ndevices == 0 makes the worker own no device (unregistered). */
sm_err sm_store_set_identity(sm_store *st, uint32_t worker_id, int ndevices, const int32_t *devices,
                             char *err, size_t errlen);
/* As sm_store_set_identity, but with keep set and the same worker id and
 * devices as now, the shards stay (a worker registering again with its old
 * identity); the epoch moves on either way. */
sm_err sm_store_renew_identity(sm_store *st, uint32_t worker_id, int ndevices,
                               const int32_t *devices, int keep, char *err, size_t errlen);
/* Every shard held, as (array, device, checksum) in *out (malloc'd, caller
 * frees; NULL when none), *n of them. */
sm_err sm_store_held(sm_store *st, sm_svc_held_shard **out, int *n, char *err, size_t errlen);
/* Told of every shard stored and dropped (a disk copy follows them). Both
 * are called with the store's lock held: they must be quick and must not
 * call the store. put gets a borrowed shard (take a reference to keep
 * it). */
typedef struct {
    void (*put)(void *user, uint64_t array, int32_t device, sm_store_shard *sh);
    void (*drop)(void *user, uint64_t array, int32_t device);
} sm_store_observer;
/* Sets (obs NULL: removes) the observer; obs and user are borrowed until
 * removed. */
void sm_store_observe(sm_store *st, const sm_store_observer *obs, void *user);

/* ---- spilling ------------------------------------------------------------
 * With a spiller (a worker's state dir, disk.c), a shard allocation that
 * the memory limit refuses first spills least-recently-used shards: ones
 * only the store references, whose disk copy is complete, lose their
 * memory and are read back (checksum verified) by the next sm_store_get. */
typedef struct {
    /* Waits until every copy queued so far is on disk (store lock not held). */
    void (*flush)(void *user);
    /* Whether (array, device) has a complete copy on disk (store lock held:
     * quick, and must not call the store). */
    int (*saved)(void *user, uint64_t array, int32_t device);
    /* Reads the copy of (array, device) into sh (allocated with the copy's
     * dtype and shape), checking its checksum; SM_EDATALOSS naming the file
     * if it does not match (store lock not held). */
    sm_err (*load)(void *user, uint64_t array, int32_t device, sm_store_shard *sh, char *err,
                   size_t errlen);
} sm_store_spiller;
/* Sets (sp NULL: removes) the spiller; borrowed until removed. */
void sm_store_spill_to(sm_store *st, const sm_store_spiller *sp, void *user);
/* sm_store_shard_create from st's pool, spilling shards of st (if it has a
 * spiller) to make room when the pool's limit refuses the allocation. */
sm_err sm_store_shard_alloc(sm_store *st, sm_dtype t, const sm_shape *s, sm_store_shard **out,
                            char *err, size_t errlen);
/* Spills least-recently-used shards until want bytes are freed or none is
 * left to spill; returns the bytes freed. */
int64_t sm_store_reclaim(sm_store *st, int64_t want);
/* Every spilled shard, as (array, device, checksum) in *out (malloc'd,
 * caller frees; NULL when none), at most max of them; returns how many. */
int sm_store_spilled(sm_store *st, sm_svc_held_shard **out, int max);
/* Current epoch (0 before the first identity). */
uint64_t sm_store_epoch(sm_store *st);
/* Worker id, or -1 while unregistered. */
int64_t sm_store_worker_id(sm_store *st);

/* SM_OK if device is one of this worker's; otherwise SM_EINVAL naming it
 * (SM_EUNAVAILABLE while unregistered). */
sm_err sm_store_check_device(sm_store *st, int32_t device, char *err, size_t errlen);

/* Stores shards[k] for (array, devices[k]), k < n, replacing what was there,
 * all under one lock so readers see all of them or none. Takes the caller's
 * reference of each shard on SM_OK only; on failure nothing changes and the
 * caller keeps its references. Fails with SM_EINVAL naming a device that is
 * not local or listed twice, SM_EUNAVAILABLE if epoch (from sm_store_epoch
 * when the work began) is no longer current. */
sm_err sm_store_put(sm_store *st, uint64_t epoch, sm_array_id array, int n, const int32_t *devices,
                    sm_store_shard *const *shards, char *err, size_t errlen);

/* On SM_OK *out is a new reference (release it) to the shard of (array,
 * device). A device that is not local: SM_EINVAL; no such shard:
 * SM_ENOTFOUND ("worker 1 holds no shard of array 17 on device 5"). */
sm_err sm_store_get(sm_store *st, sm_array_id array, int32_t device, sm_store_shard **out,
                    char *err, size_t errlen);

/* Drops the shards of array on the listed devices (n == 0: on every local
 * device). Devices must be local (SM_EINVAL, nothing freed); missing shards
 * are not an error. *freed (may be NULL) receives the number dropped. */
sm_err sm_store_free_array(sm_store *st, sm_array_id array, int n, const int32_t *devices,
                           int *freed, char *err, size_t errlen);

/* Snapshot of the devices (in registration order), bytes held per device
 * and the shard count. Arrays have SM_MAX_WORKER_DEVICES entries; any
 * pointer may be NULL. Returns the device count. */
int sm_store_stats(sm_store *st, int32_t *devices, int64_t *bytes, int64_t *shards);

#endif
