/* libshmap: the C client library of shmap.
 *
 * A client connects to a coordinator and uploads arrays with a NamedSharding
 * (mesh + PartitionSpec), queries how they are sharded, fetches them back,
 * reshards and deletes them. See docs/service.md for what each call does on
 * the wire.
 *
 * Conventions: every call returns sm_err (SM_OK = 0) and, on failure, writes
 * one sentence into err[errlen] (the server's own sentence for remote
 * errors). The client handle is opaque and may be used from several threads
 * at once; each call blocks until done or until its deadline. Structures the
 * library fills (sm_array_info, lists) are owned by the caller and released
 * with the matching _free function. The value types sm_mesh, sm_pspec,
 * sm_shape, sm_index, sm_array come from the shmap core headers included
 * below. */
#ifndef SHMAP_H
#define SHMAP_H

#include <stdint.h>

#include "sm_array.h"
#include "sm_dtype.h"
#include "sm_err.h"
#include "sm_info.h"
#include "sm_mesh.h"
#include "sm_pspec.h"
#include "sm_shape.h"
#include "sm_sharding.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SHMAP_PROTOCOL_VERSION 1

typedef struct sm_client sm_client;

/* Parses a command-line reference: all digits is an id, anything else a name.
 * Borrows text (the ref points into it). */
sm_array_ref sm_array_ref_parse(const char *text);

typedef struct {
    const char *token;  /* shared secret sent as x-shmap-token; NULL: none */
    int64_t timeout_ms; /* deadline of each unary call; 0: 30000 */
    /* Called during long transfers with bytes done and total; may be NULL. */
    void (*progress)(void *user, int64_t done, int64_t total);
    void *progress_user;
    /* 1: every upload and download goes through the coordinator (its relay),
     * never straight to a worker, e.g. when workers sit behind NAT. 0 (the
     * default): direct where the worker can be reached, relay otherwise.
     * sm_client_opts_from_env sets it from SHMAP_RELAY=1. */
    int relay_only;
    /* TLS (each a PEM file's path, or PEM text; NULL: none). tls_ca alone:
     * the coordinator's certificate must be signed by it, and transfers go
     * through the coordinator (workers accept only callers with a client
     * certificate). With tls_cert and tls_key too (a client certificate
     * signed by the cluster's CA): mutual TLS, and direct transfers to
     * workers. All NULL: plaintext. Read and checked at connect. */
    const char *tls_ca;
    const char *tls_cert;
    const char *tls_key;
    /* N > 0: the client's array pool (sm_client_pool: the data of the
     * arrays it returns) keeps up to N MiB of freed array memory (blocks
     * of 1 MiB and more, each for 10 s) for the next array of about the
     * same size: a program that fetches arrays over and over
     * (sm_client_get, then sm_array_free) then skips the page faults of
     * fresh memory, which cost about as much as the transfer. 0 (the
     * default): it keeps nothing. Each client has its own pool; nothing is
     * set for the process. At most 1048576. */
    int64_t cache_mb;
    /* 1: uploads and downloads never go through shared memory, as across
     * hosts. 0 (the default): a buffer of sm_client_alloc moves through
     * shared memory to and from every worker that proves it shares this
     * host's memory. sm_client_opts_from_env sets it from
     * SHMAP_TRANSPORT=grpc. */
    int no_shm;
    /* N > 0: an upload from ordinary memory (not sm_client_alloc's) or a
     * download into it, of 4 MiB or more, with workers that share this
     * host's memory is copied through a staging segment of the client
     * instead of streamed (the worker copies on from there), and up to N
     * MiB of such segments are kept, their pages mapped, for the next
     * transfers: a fresh segment's pages cost about as much as streaming
     * the bytes, a kept one's nothing. The least recently used go when a
     * transfer needs room; all go at sm_client_close. An array larger
     * than N MiB streams. 0: no staging (every such transfer streams).
     * SM_CLIENT_STAGE_MB_DEFAULT is what a NULL opts gets and what
     * shmapctl, the Python package and the benchmarks set;
     * sm_client_opts_from_env sets it from SHMAP_CLIENT_STAGE_MB. At most
     * 1048576. */
    int64_t stage_mb;
} sm_client_opts;

#define SM_CLIENT_STAGE_MB_DEFAULT 1024

/* Fills the fields of *o that the environment sets, for a program whose
 * users configure it that way (shmapctl, the Python package and the
 * benchmarks call it before connecting): SHMAP_RELAY set and not "0" sets
 * relay_only; SHMAP_TRANSPORT=grpc sets no_shm; SHMAP_CLIENT_CACHE_MB=N sets
 * cache_mb; SHMAP_CLIENT_STAGE_MB=N sets stage_mb. Other fields, and
 * these when their variable is unset or empty, are left as they are.
 * SM_EINVAL, naming the variable, for a cache or staging size that is no
 * whole number of MiB from 0 to 1048576. The library reads the environment nowhere
 * else: a program that does not call this is configured by its opts alone. */
sm_err sm_client_opts_from_env(sm_client_opts *o, char *err, size_t errlen);

/* Connects to target ("host:port") and negotiates the protocol version.
 * opts may be NULL (all defaults, stage_mb SM_CLIENT_STAGE_MB_DEFAULT);
 * SM_EINVAL for a cache_mb or stage_mb out of range.
 * *out is owned by the caller (sm_client_close). */
sm_err sm_client_connect(const char *target, const sm_client_opts *opts, sm_client **out, char *err,
                         size_t errlen);
void sm_client_close(sm_client *c);
/* The client's array pool (borrowed): where the data of the arrays it
 * returns comes from (each records it), with the cache opts->cache_mb set
 * and no limit; for sm_array_pool_stats, or to change the cache
 * (sm_array_pool_cache_set). sm_client_close gives it up; arrays fetched
 * before stay valid until sm_array_free. */
sm_array_pool *sm_client_pool(sm_client *c);

/* ---- arrays in shared memory ------------------------------------------- */

/* Allocates nbytes (0 counts as 1) for an array the program fills or
 * reads itself, in a shared-memory segment of this host (/dev/shm), its
 * pages allocated now: uploads from it (sm_client_put, sm_client_put_shards
 * ...) and downloads into it (sm_client_get_into) with a worker on this
 * host are copied by the worker straight between it and the shard, once,
 * with no bytes streamed (docs/service.md "Transfers through shared
 * memory"). An array that starts anywhere inside the buffer and ends in it
 * counts. Where /dev/shm has no room, ordinary memory (the transfers then
 * stream as usual). The memory is zero-filled. *out is 64-byte aligned and stays valid until
 * sm_client_free or sm_client_close (which frees every buffer left). */
sm_err sm_client_alloc(sm_client *c, size_t nbytes, void **out, char *err, size_t errlen);
/* Frees a buffer of sm_client_alloc (its segment unlinked). NULL, or a
 * pointer c did not allocate, is ignored. No transfer may be using it. */
void sm_client_free(sm_client *c, void *p);

/* ---- devices and meshes ------------------------------------------------- */

/* Lists the workers; *out is an array of *n entries, released with free(). */
sm_err sm_client_devices(sm_client *c, sm_worker_info **out, int *n, char *err, size_t errlen);

/* Creates a mesh on the service. If default_order, mesh->devices is ignored
 * and the service picks its default order (minor axis inside one worker).
 * name may be NULL. */
sm_err sm_client_mesh_create(sm_client *c, const sm_mesh *mesh, int default_order, const char *name,
                             sm_mesh_info *out, char *err, size_t errlen);
/* Looks a mesh up by name, or by id if name is NULL. */
sm_err sm_client_mesh_get(sm_client *c, sm_mesh_id id, const char *name, sm_mesh_info *out,
                          char *err, size_t errlen);
/* *out: *n entries, released with free(). */
sm_err sm_client_mesh_list(sm_client *c, sm_mesh_info **out, int *n, char *err, size_t errlen);

/* ---- arrays ------------------------------------------------------------- */

/* device_put: uploads a whole array (dtype, shape, row-major data; data is
 * borrowed for the call) with a sharding. name may be NULL. On success the
 * array is ready and *out describes it (out may be NULL). */
sm_err sm_client_put(sm_client *c, sm_dtype dtype, const sm_shape *shape, const void *data,
                     const sm_sharding_ref *sh, const char *name, sm_array_info *out, char *err,
                     size_t errlen);

/* Uploads a .npy file without reading it whole into memory (mapped). */
sm_err sm_client_put_file(sm_client *c, const char *path, const sm_sharding_ref *sh,
                          const char *name, sm_array_info *out, char *err, size_t errlen);

/* make_array_from_single_device_arrays: one shard per device of the mesh
 * (devices[k] receives shards[k]); every device of the mesh must be given
 * and every shard must have the shard shape. */
sm_err sm_client_put_shards(sm_client *c, sm_dtype dtype, const sm_shape *global,
                            const sm_sharding_ref *sh, const char *name, int nshards,
                            const int32_t *devices, const sm_array *const *shards,
                            sm_array_info *out, char *err, size_t errlen);

/* make_array_from_callback: cb is called once per distinct index and returns
 * that block (owned by the library afterwards), or NULL to fail the upload. */
typedef sm_array *(*sm_index_callback)(void *user, const sm_index *index);
sm_err sm_client_put_callback(sm_client *c, sm_dtype dtype, const sm_shape *global,
                              const sm_sharding_ref *sh, const char *name, sm_index_callback cb,
                              void *user, sm_array_info *out, char *err, size_t errlen);

/* make_array_from_process_local_data, one call per process: sends process
 * `process`'s local data. global may be NULL (inferred). name is required:
 * the parts meet by name. Returns once this part is accepted; the array is
 * ready when every process's part has arrived, and fails if one does not
 * arrive within deadline_ms (0: 60000). */
sm_err sm_client_put_local(sm_client *c, int process, const sm_array *local,
                           const sm_sharding_ref *sh, const char *name, const sm_shape *global,
                           int64_t deadline_ms, sm_array_info *out, char *err, size_t errlen);

/* Fetches a whole ready array; *out owned by the caller (sm_array_free). */
sm_err sm_client_get(sm_client *c, sm_array_ref ref, sm_array **out, char *err, size_t errlen);
/* sm_client_get of the array that info describes (from sm_client_put or
 * sm_client_describe), without asking for its description again. A stale
 * description (the array deleted, a worker lost) makes the fetch fail; every
 * shard's shape, size and checksum are checked as with sm_client_get. */
sm_err sm_client_get_described(sm_client *c, const sm_array_info *info, sm_array **out, char *err,
                               size_t errlen);
/* sm_client_get_described into the caller's memory: dst holds dstlen bytes,
 * which must be the array's size (row-major, global shape). Fetching into a
 * buffer that is reused saves mapping fresh memory for every fetch (a page
 * fault per 4 KiB, which costs as much as moving the data on loopback). On
 * failure dst holds part of the array. */
sm_err sm_client_get_into(sm_client *c, const sm_array_info *info, void *dst, size_t dstlen,
                          char *err, size_t errlen);
/* Fetches a whole ready array into a .npy file, holding one shard at a time. */
sm_err sm_client_get_file(sm_client *c, sm_array_ref ref, const char *path, char *err,
                          size_t errlen);
/* Fetches one device's shard. */
sm_err sm_client_get_shard(sm_client *c, sm_array_ref ref, int32_t device, sm_array **out,
                           char *err, size_t errlen);

sm_err sm_client_describe(sm_client *c, sm_array_ref ref, sm_array_info *out, char *err,
                          size_t errlen);
/* *out: *n entries, released with sm_array_info_list_free. */
sm_err sm_client_list(sm_client *c, sm_array_info **out, int *n, char *err, size_t errlen);
/* Creates a resharded copy (new_name may be NULL); the source is unchanged. */
sm_err sm_client_reshard(sm_client *c, sm_array_ref ref, const sm_sharding_ref *sh,
                         const char *new_name, sm_array_info *out, char *err, size_t errlen);
sm_err sm_client_delete(sm_client *c, sm_array_ref ref, char *err, size_t errlen);
/* Keeps replicas copies of every block on distinct workers (1 or 2): with
 * 2, each block the mesh keeps on one worker only gets a copy on another
 * worker, made before the call returns, so the array survives either
 * worker's loss (it turns degraded, is read from the copies, and is
 * repaired when the worker comes back). 1 drops the copies. The array must
 * be ready; out (may be NULL) lists the copies (out->copies). */
sm_err sm_client_replicate(sm_client *c, sm_array_ref ref, int replicas, sm_array_info *out,
                           char *err, size_t errlen);

/* ---- checkpoints (docs/service.md "Checkpoints") ----------------------- */

/* Saves a ready array as a checkpoint in dir: the workers holding it each
 * write their distinct shards (one .npy file per distinct shard, replicas
 * once) straight to dir, in parallel, then one of them writes
 * dir/manifest.json; no data passes through the client or the
 * coordinator. dir must be visible to every worker at the same path (the
 * same host, or a shared filesystem); a relative dir is made absolute
 * against this process's working directory. dir is created if missing; one
 * that holds a manifest already is refused (SM_EEXIST). A failed save
 * leaves no manifest, so it never looks like a checkpoint. bf16 arrays are
 * SM_EUNIMPLEMENTED. bytes and files (may be NULL) receive the size and count
 * of the .npy files. The call waits up to 10 minutes, or the client's
 * timeout_ms if longer. */
sm_err sm_client_save(sm_client *c, sm_array_ref ref, const char *dir, int64_t *bytes, int *files,
                      char *err, size_t errlen);

/* Loads the checkpoint in dir (made absolute as for sm_client_save) as a
 * new ready array with sharding sh (any mesh and spec that fit the stored
 * shape, whatever sharding it was saved with) and name (may be NULL): each
 * worker reads the stored files its devices need and checks each file's
 * size, xxHash3-64 and header against the manifest first. A damaged
 * checkpoint (a file truncated, corrupted or missing, a missing or
 * malformed manifest) is SM_EDATALOSS naming the file; a dir that does not
 * exist is SM_ENOTFOUND. out (may be NULL) describes the new array. Waits
 * as sm_client_save does. */
sm_err sm_client_load(sm_client *c, const char *dir, const sm_sharding_ref *sh, const char *name,
                      sm_array_info *out, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif

#endif
