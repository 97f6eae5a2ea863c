/* sm_svc: the shmap.v1 protocol (proto/shmap.proto) in plain C types.
 *
 * This is the boundary the coordinator, the workers and the client library
 * program against: client calls that take and return C structs, and server
 * adapters that decode requests into C structs, call a const vtable of
 * handlers, and encode their results. Neither gRPC nor protobuf-c types
 * appear here; every conversion between proto messages and shmap's core types
 * (sm_mesh, sm_pspec, sm_shape, sm_index, sm_array_info, ...) lives in
 * common/rpc and nowhere else.
 *
 * Ownership: request structs are borrowed by the call. Reply structs are
 * filled by the callee; pointers in them (lists, shards) are malloc'd and
 * owned by whoever receives the reply, released with the matching _free
 * function (or free() where said). On the server side the adapter owns
 * what a handler writes into a reply and frees it after sending.
 *
 * Threads: client calls are thread-safe (one channel may serve many
 * threads). Handlers run on the rpc server's handler threads, one call per
 * thread, many at once. Every client call takes a deadline in milliseconds. */
#ifndef SM_SVC_H
#define SM_SVC_H

#include <stddef.h>
#include <stdint.h>

#include "sm_err.h"
#include "sm_info.h"
#include "sm_pspec.h"
#include "sm_shape.h"

/* Opaque types of sm_rpc.h (same typedefs, repeated on purpose). */
typedef struct sm_rpc_server sm_rpc_server;
typedef struct sm_rpc_channel sm_rpc_channel;
typedef struct sm_rpc_chans sm_rpc_chans;

#define SM_SVC_PROTOCOL_MIN 1
#define SM_SVC_PROTOCOL_MAX 1
/* Senders cut bulk transfers into chunks of this size (bytes). Receivers
 * take any size up to the message limit; 1 MiB (rather than 4) keeps a
 * chunk in the cache between its checksum and its copy on both sides, and
 * lets the receiver place one chunk while the next arrives. */
#define SM_SVC_CHUNK (1 << 20)

/* ---- version negotiation -------------------------------------------------
 * Both services answer Negotiate from the version range and the server name
 * given at registration; no handler is needed. */

/* Client side, either service: on SM_OK *version is the agreed version and
 * server (if not NULL) the peer's name. No overlap: SM_EPRECONDITION naming
 * both ranges. */
sm_err sm_svc_negotiate(sm_rpc_channel *ch, int worker_service, const char *client_name,
                        uint32_t *version, char *server, size_t server_len, int deadline_ms,
                        char *err, size_t errlen);
/* sm_svc_negotiate, and *relay_only (NULL ok) 1 when the server says the
 * caller is a tenant whose token workers do not take, *grants (NULL ok) 1
 * when it also says the shards it describes to the caller carry grants
 * that workers take instead (sm_shard_info.grant). */
sm_err sm_svc_negotiate_relay(sm_rpc_channel *ch, int worker_service, const char *client_name,
                              uint32_t *version, char *server, size_t server_len, int *relay_only,
                              int *grants, int deadline_ms, char *err, size_t errlen);

/* ---- bulk transfer messages ---------------------------------------------- */

/* A box of a client's array in a shared-memory segment of the worker's
 * host (ShmRef in shmap.proto): name is empty for none. On receipt the
 * adapter checks the name is a shmap segment's (sm_shm rules), offset >=
 * 0 and box inside global, and refuses a ShmRef from a caller without the
 * cluster's credential (SM_EPERM) and one sent to the coordinator
 * (SM_EINVAL). */
#define SM_SVC_SHM_NAME_MAX 64
typedef struct {
    char name[SM_SVC_SHM_NAME_MAX];
    int64_t offset; /* of the array's first byte in the segment */
    sm_shape global;
    sm_index box; /* in global's coordinates */
} sm_svc_shm_ref;

/* First message of an upload (Coordinator.Upload / Worker.PutShard). */
typedef struct {
    sm_array_id array_id;
    int ndevices;
    int32_t *devices; /* ndevices entries; owned as the enclosing struct says */
    sm_shape shape;   /* shard shape */
    sm_dtype dtype;
    int64_t total_bytes;
    /* Sending to a worker without the cluster's token: a grant
     * (SM_GRANT_LEN bytes) per device, back to back; NULL: none. Not
     * filled on receipt (the adapter checks them). */
    const unsigned char *grants;
    /* PutShard: the shard's bytes are in this segment (name "" none);
     * the message is then the target's last one, without data. */
    sm_svc_shm_ref shm;
} sm_svc_upload_header;

/* One upload message: optional header, then data at offset; the last one has
 * last = 1 and the xxHash3-64 checksum of all data bytes. */
typedef struct {
    int has_header;
    sm_svc_upload_header header;
    int64_t offset;
    const void *data; /* borrowed (send) / valid until the next recv (receive) */
    size_t len;
    int last;
    uint64_t checksum;
    /* send: 1 if data stays valid and unchanged until the stream is finished
     * or aborted; it is then sent without a copy (finish and abort wait until
     * the network layer let go of it, at most 5 s: see sm_svc_stream.c).
     * 0: data is copied. */
    int stable;
} sm_svc_upload_msg;

/* Most targets one Worker.PutShard stream takes. */
#define SM_SVC_MAX_BATCH 64

typedef struct {
    int64_t bytes;     /* all targets' */
    uint64_t checksum; /* the last target's */
    int array_ready;
    int ntargets; /* PutShard: each target's bytes and checksum, in order */
    int64_t target_bytes[SM_SVC_MAX_BATCH];
    uint64_t target_checksum[SM_SVC_MAX_BATCH];
} sm_svc_upload_reply;

/* One download message (Coordinator.Download / Worker.GetShard). The first
 * has has_meta = 1 with shape, dtype and total_bytes. */
typedef struct {
    int has_meta;
    sm_shape shape;
    sm_dtype dtype;
    int64_t total_bytes;
    int64_t offset;
    const void *data; /* as in sm_svc_upload_msg */
    size_t len;
    int last;
    uint64_t checksum;
    /* send: if release is set, data is sent without a copy and must stay
     * valid and unchanged until release(release_arg) runs: exactly once, on
     * any thread, possibly after the send returned (also when it failed).
     * NULL: data is copied. */
    void (*release)(void *arg);
    void *release_arg;
} sm_svc_chunk;

/* Receiving without a copy: where the data of each received message goes.
 * place runs once per message, after its other fields were decoded and
 * validated into *msg (msg->data NULL, msg->len the data length); it returns
 * SM_OK with *dst at msg->len writable bytes (may stay NULL when len is 0),
 * or an error with a sentence in err, which the receive then returns.
 * copied (may be NULL) runs after each piece of the data was written to
 * *dst, in order, with the piece as written (for a running checksum).
 * user goes to both, and is not NULL when copied is set. */
typedef struct {
    sm_err (*place)(void *user, const sm_svc_upload_msg *msg, void **dst, char *err, size_t errlen);
    void (*copied)(void *user, const void *p, size_t n);
    void *user;
} sm_svc_upload_sink;

typedef struct {
    sm_err (*place)(void *user, const sm_svc_chunk *chunk, void **dst, char *err, size_t errlen);
    void (*copied)(void *user, const void *p, size_t n);
    void *user;
} sm_svc_chunk_sink;

typedef struct {
    sm_array_ref array;
    int32_t device;
    int has_box;
    sm_index box; /* sub-box in shard coordinates */
    /* Worker.GetShard: ndevices > 0 asks for the whole shards of devices
     * (borrowed) in one stream, in order; device is devices[0], no box. */
    int ndevices;
    const int32_t *devices;
    /* As sm_svc_upload_header.grants: one per device asked for. */
    const unsigned char *grants;
    /* GetShard of one device: write the data into this segment (name ""
     * none) and send one chunk with meta, last and the checksum only. */
    sm_svc_shm_ref shm;
} sm_svc_download_req;

/* Client side of an upload stream. */
typedef struct sm_svc_upload_stream sm_svc_upload_stream;
/* worker_service: 1 → Worker.PutShard, 0 → Coordinator.Upload. */
sm_err sm_svc_upload_open(sm_rpc_channel *ch, int worker_service, int deadline_ms,
                          sm_svc_upload_stream **out, char *err, size_t errlen);
/* msg borrowed. A failure returns the server's final status; the stream must
 * still be released with sm_svc_upload_finish or sm_svc_upload_abort. */
sm_err sm_svc_upload_send(sm_svc_upload_stream *st, const sm_svc_upload_msg *msg, char *err,
                          size_t errlen);
/* Half-closes, waits for the reply, frees the stream. reply may be NULL. */
sm_err sm_svc_upload_finish(sm_svc_upload_stream *st, sm_svc_upload_reply *reply, char *err,
                            size_t errlen);
/* Cancels the call (the server sees SM_ECANCELLED) and frees the stream. */
void sm_svc_upload_abort(sm_svc_upload_stream *st);

/* Client side of a download stream. */
typedef struct sm_svc_download_stream sm_svc_download_stream;
sm_err sm_svc_download_open(sm_rpc_channel *ch, int worker_service, const sm_svc_download_req *req,
                            int deadline_ms, sm_svc_download_stream **out, char *err,
                            size_t errlen);
/* Next chunk. SM_OK with *end = 1: the stream finished with OK (chunk not
 * filled). chunk->data is valid until the next recv or free. */
sm_err sm_svc_download_recv(sm_svc_download_stream *st, sm_svc_chunk *chunk, int *end, char *err,
                            size_t errlen);
/* sm_svc_download_recv with the data copied to where sink->place says
 * (chunk->data stays NULL). A place error is returned as is. */
sm_err sm_svc_download_recv_into(sm_svc_download_stream *st, const sm_svc_chunk_sink *sink,
                                 sm_svc_chunk *chunk, int *end, char *err, size_t errlen);
/* Frees the stream, cancelling it if it has not ended. NULL ok. */
void sm_svc_download_free(sm_svc_download_stream *st);

/* Server side of an upload: what a handler reads from.
 *
 * The adapter decodes each message faithfully and validates its fields
 * (header shape rank and dims, dtype, device count <= SM_MAX_DEVICES,
 * offset and total_bytes >= 0: SM_EINVAL), but does NOT check the protocol
 * order: that has_header is set on the first message only, that offset ==
 * bytes received so far, that last is set exactly once and that the byte
 * total and checksum match are the handler's checks. */
typedef struct sm_svc_upload_in sm_svc_upload_in;
/* Next message; SM_OK with *end = 1 at the end of the stream. msg->data and
 * msg->header.devices are valid until the next recv (the adapter frees the
 * last message after the handler returns). A client that went away is
 * SM_ECANCELLED. */
sm_err sm_svc_upload_recv(sm_svc_upload_in *in, sm_svc_upload_msg *msg, int *end, char *err,
                          size_t errlen);
/* sm_svc_upload_recv with the data copied to where sink->place says
 * (msg->data stays NULL). A place error is returned as is. */
sm_err sm_svc_upload_recv_into(sm_svc_upload_in *in, const sm_svc_upload_sink *sink,
                               sm_svc_upload_msg *msg, int *end, char *err, size_t errlen);
int sm_svc_upload_cancelled(sm_svc_upload_in *in);

/* Server side of a download: what a handler writes to. */
typedef struct sm_svc_download_out sm_svc_download_out;
/* chunk borrowed; blocks for flow control. */
sm_err sm_svc_download_send(sm_svc_download_out *out, const sm_svc_chunk *chunk, char *err,
                            size_t errlen);
int sm_svc_download_cancelled(sm_svc_download_out *out);

/* ---- coordinator messages ------------------------------------------------ */

typedef enum { SM_PUT_WHOLE = 0, SM_PUT_SHARDS = 1, SM_PUT_LOCAL = 2 } sm_put_kind;

typedef struct {
    const char *name; /* NULL or "" for none */
    sm_dtype dtype;
    int has_shape;
    sm_shape shape; /* global; optional for SM_PUT_LOCAL */
    sm_sharding_ref sharding;
    sm_put_kind kind;
    int process;          /* SM_PUT_LOCAL */
    sm_shape local_shape; /* SM_PUT_LOCAL */
    uint32_t deadline_ms; /* 0: default */
    int job_output;       /* not on the wire: a job's result, which may be unreduced */
} sm_svc_create_array_req;

typedef struct {
    int ndevices;
    int32_t *devices; /* owned */
    sm_index global_index;
    sm_index local_slice; /* SM_PUT_LOCAL only */
} sm_svc_upload_target;

typedef struct {
    sm_array_info array;
    int ntargets;
    sm_svc_upload_target *targets; /* owned, each with its devices */
} sm_svc_create_array_reply;

void sm_svc_create_array_reply_free(sm_svc_create_array_reply *r);

typedef struct {
    sm_array_ref array;
    sm_sharding_ref sharding;
    const char *name; /* of the new array; NULL for none */
    uint32_t deadline_ms;
} sm_svc_reshard_req;

typedef struct {
    sm_array_ref array;
    int replicas; /* copies of every block on distinct workers: 1 or 2 */
    uint32_t deadline_ms;
} sm_svc_replicate_req;

/* Coordinator.Save / Load (docs/service.md "Checkpoints"). dir is an
 * absolute path as the workers see it. */
typedef struct {
    sm_array_ref array;
    const char *dir;
    uint32_t deadline_ms;
} sm_svc_save_req;

typedef struct {
    int64_t bytes; /* of the .npy files */
    int files;     /* .npy files written, one per distinct shard */
} sm_svc_save_reply;

typedef struct {
    const char *dir;
    sm_sharding_ref sharding;
    const char *name; /* of the new array; NULL or "" for none */
    uint32_t deadline_ms;
} sm_svc_load_req;

/* A shard a registering worker still holds (RegisterWorker.held); at most
 * SM_SVC_HELD_MAX are taken. */
#define SM_SVC_HELD_MAX (1 << 20)
typedef struct {
    uint64_t array;
    int32_t device;
    uint64_t checksum; /* 0: unknown */
} sm_svc_held_shard;

typedef struct {
    const char *address;
    int ndevices;
    int process_index; /* -1: assign */
    const char *host;
    /* Registering again: the identity asked for (worker_id 0: a new worker;
     * devices NULL: any ids, else ndevices global ids) and the shards still
     * held (borrowed). */
    sm_worker_id worker_id;
    const int32_t *devices;
    int nheld;
    const sm_svc_held_shard *held;
    uint32_t program_level; /* SM_PROGRAM_LEVEL of the worker; 0: older */
    const char *version;    /* the worker's build version; NULL or "": unknown */
} sm_svc_register_req;

typedef struct {
    sm_worker_id worker_id;
    int ndevices;
    int32_t devices[SM_MAX_WORKER_DEVICES];
    int process_index;
    uint32_t heartbeat_ms;
    uint64_t epoch;  /* the coordinator run; echoed in every heartbeat */
    int keep_shards; /* 1: the identity asked for was given back and the offered shards the
                        coordinator keeps were adopted; 0: drop every shard */
} sm_svc_register_reply;

/* Spilled shards a heartbeat lists at most. */
#define SM_SVC_SPILLED_MAX 4096

typedef struct {
    sm_worker_id worker_id;
    uint64_t epoch; /* from the registration reply */
    int ndevices;
    int64_t device_bytes[SM_MAX_WORKER_DEVICES];
    /* The shards spilled to disk (checksum unused), the whole list; borrowed. */
    int nspilled;
    const sm_svc_held_shard *spilled;
} sm_svc_heartbeat_req;

/* One upload target of a batched commit. */
typedef struct {
    int ndevices;
    const int32_t *devices; /* borrowed */
    uint64_t checksum;      /* of the shard bytes */
    int64_t bytes;
} sm_svc_commit_target;

/* Coordinator.CommitShards: the devices of one upload target (ndevices,
 * devices, checksum, bytes), or of ntargets targets (then ndevices is 0),
 * written directly to their workers with Worker.PutShard, to be marked
 * filled: all of them or none. */
typedef struct {
    sm_array_id array_id;
    int ndevices;
    const int32_t *devices; /* borrowed */
    uint64_t checksum;      /* of the shard bytes */
    int64_t bytes;
    int ntargets;
    const sm_svc_commit_target *targets; /* borrowed */
} sm_svc_commit_req;

/* The coordinator's handlers. Every handler returns SM_OK or an error with
 * one sentence in err (sent to the client as the status details). List
 * outputs (*out, *n) are malloc'd by the handler and freed by the adapter.
 *
 * Adapter contract (both services): outputs are zeroed before the handler
 * runs and freed by the adapter after it returns, whatever it returned (so
 * a failing handler leaves them NULL or valid, never freed). Requests are
 * decoded and validated first; a malformed one is answered INVALID_ARGUMENT
 * naming the field, without calling the handler. Strings in decoded
 * requests point into the request message (valid during the call) and are
 * never NULL ("" for none), except sm_sharding_ref.mesh_name, NULL when the
 * mesh is not named. A NULL function pointer answers UNIMPLEMENTED. */
typedef struct {
    sm_err (*list_devices)(void *user, sm_worker_info **out, int *n, char *err, size_t errlen);
    /* req->mesh.ndevices == 0 (no devices given) means the default order. */
    sm_err (*create_mesh)(void *user, const char *name, const sm_mesh *mesh, int default_order,
                          sm_mesh_info *out, char *err, size_t errlen);
    sm_err (*get_mesh)(void *user, sm_mesh_id id, const char *name, sm_mesh_info *out, char *err,
                       size_t errlen);
    sm_err (*list_meshes)(void *user, sm_mesh_info **out, int *n, char *err, size_t errlen);
    sm_err (*create_array)(void *user, const sm_svc_create_array_req *req,
                           sm_svc_create_array_reply *out, char *err, size_t errlen);
    sm_err (*upload)(void *user, sm_svc_upload_in *in, sm_svc_upload_reply *out, char *err,
                     size_t errlen);
    sm_err (*download)(void *user, const sm_svc_download_req *req, sm_svc_download_out *out,
                       char *err, size_t errlen);
    sm_err (*describe)(void *user, sm_array_ref ref, sm_array_info *out, char *err, size_t errlen);
    sm_err (*list_arrays)(void *user, sm_array_info **out, int *n, char *err, size_t errlen);
    sm_err (*delete_array)(void *user, sm_array_ref ref, char *err, size_t errlen);
    sm_err (*reshard)(void *user, const sm_svc_reshard_req *req, sm_array_info *out, char *err,
                      size_t errlen);
    sm_err (*replicate)(void *user, const sm_svc_replicate_req *req, sm_array_info *out, char *err,
                        size_t errlen);
    sm_err (*register_worker)(void *user, const sm_svc_register_req *req,
                              sm_svc_register_reply *out, char *err, size_t errlen);
    /* *known = 0 tells the worker to register again. */
    sm_err (*heartbeat)(void *user, const sm_svc_heartbeat_req *req, int *known, char *err,
                        size_t errlen);
    /* out->bytes, checksum and array_ready as for an upload. */
    sm_err (*commit_shards)(void *user, const sm_svc_commit_req *req, sm_svc_upload_reply *out,
                            char *err, size_t errlen);
    sm_err (*save)(void *user, const sm_svc_save_req *req, sm_svc_save_reply *out, char *err,
                   size_t errlen);
    sm_err (*load)(void *user, const sm_svc_load_req *req, sm_array_info *out, char *err,
                   size_t errlen);
} sm_svc_coord_ops;

/* Registers every Coordinator method (and Negotiate, answered with
 * server_name, copied) on s, before sm_rpc_server_start. ops and user are
 * borrowed for the server's lifetime (ops NULL: every method but Negotiate
 * answers UNIMPLEMENTED). Allocates one small adapter context that is never
 * freed (sm_rpc has no hook to learn when s is freed). */
sm_err sm_svc_coord_serve(sm_rpc_server *s, const sm_svc_coord_ops *ops, void *user,
                          const char *server_name, char *err, size_t errlen);

/* Client calls to a coordinator. */
sm_err sm_svc_coord_list_devices(sm_rpc_channel *ch, int deadline_ms, sm_worker_info **out, int *n,
                                 char *err, size_t errlen);
sm_err sm_svc_coord_create_mesh(sm_rpc_channel *ch, int deadline_ms, const char *name,
                                const sm_mesh *mesh, int default_order, sm_mesh_info *out,
                                char *err, size_t errlen);
sm_err sm_svc_coord_get_mesh(sm_rpc_channel *ch, int deadline_ms, sm_mesh_id id, const char *name,
                             sm_mesh_info *out, char *err, size_t errlen);
sm_err sm_svc_coord_list_meshes(sm_rpc_channel *ch, int deadline_ms, sm_mesh_info **out, int *n,
                                char *err, size_t errlen);
sm_err sm_svc_coord_create_array(sm_rpc_channel *ch, int deadline_ms,
                                 const sm_svc_create_array_req *req, sm_svc_create_array_reply *out,
                                 char *err, size_t errlen);
sm_err sm_svc_coord_describe(sm_rpc_channel *ch, int deadline_ms, sm_array_ref ref,
                             sm_array_info *out, char *err, size_t errlen);
sm_err sm_svc_coord_list_arrays(sm_rpc_channel *ch, int deadline_ms, sm_array_info **out, int *n,
                                char *err, size_t errlen);
sm_err sm_svc_coord_delete(sm_rpc_channel *ch, int deadline_ms, sm_array_ref ref, char *err,
                           size_t errlen);
sm_err sm_svc_coord_reshard(sm_rpc_channel *ch, int deadline_ms, const sm_svc_reshard_req *req,
                            sm_array_info *out, char *err, size_t errlen);
sm_err sm_svc_coord_replicate(sm_rpc_channel *ch, int deadline_ms, const sm_svc_replicate_req *req,
                              sm_array_info *out, char *err, size_t errlen);
sm_err sm_svc_coord_register(sm_rpc_channel *ch, int deadline_ms, const sm_svc_register_req *req,
                             sm_svc_register_reply *out, char *err, size_t errlen);
sm_err sm_svc_coord_heartbeat(sm_rpc_channel *ch, int deadline_ms, const sm_svc_heartbeat_req *req,
                              int *known, char *err, size_t errlen);
sm_err sm_svc_coord_commit_shards(sm_rpc_channel *ch, int deadline_ms, const sm_svc_commit_req *req,
                                  sm_svc_upload_reply *out, char *err, size_t errlen);
sm_err sm_svc_coord_save(sm_rpc_channel *ch, int deadline_ms, const sm_svc_save_req *req,
                         sm_svc_save_reply *out, char *err, size_t errlen);
sm_err sm_svc_coord_load(sm_rpc_channel *ch, int deadline_ms, const sm_svc_load_req *req,
                         sm_array_info *out, char *err, size_t errlen);

/* ---- worker messages -------------------------------------------------------- */

typedef struct {
    const char *src_address; /* NULL or "": this worker */
    sm_array_id src_array;
    int32_t src_device;
    sm_index src_box; /* in the source shard's coordinates */
    int64_t dst_offset[SM_MAX_RANK];
    int src_file; /* > 0: from the request's ckpt_files[src_file - 1] instead */
} sm_svc_piece;

typedef struct {
    int32_t device;
    sm_shape shape;
    int npieces;
    sm_svc_piece *pieces;
} sm_svc_assemble_shard;

/* Most chunks a checkpoint file is checked in (see sm_svc_ckpt_file). */
#define SM_SVC_CKPT_CHUNKS 64

/* One .npy file of a checkpoint (a plain name inside its directory). */
typedef struct {
    const char *file;
    int32_t device;    /* WriteCheckpoint: the device whose shard it holds */
    sm_shape shape;    /* Assemble: the stored shard's shape */
    int64_t bytes;     /* of the whole file */
    uint64_t checksum; /* xxHash3-64 of the whole file */
    /* The file in chunks of chunk_bytes (the last may be shorter), nchunks
     * of them (1..SM_SVC_CKPT_CHUNKS; 0 in a WriteCheckpoint request), and
     * the xxHash3-64 of each: a reader checks the chunks it reads. */
    int64_t chunk_bytes;
    int nchunks;
    uint64_t chunk_sums[SM_SVC_CKPT_CHUNKS];
} sm_svc_ckpt_file;

/* Most files one Assemble request may read (the distinct shards of an
 * array). */
#define SM_SVC_MAX_CKPT_FILES SM_MAX_DEVICES

typedef struct {
    sm_array_id array_id;
    sm_dtype dtype;
    int nshards;
    sm_svc_assemble_shard *shards;
    /* Load: pieces with src_file > 0 come from these files of ckpt_dir. */
    const char *ckpt_dir; /* NULL or "" when nfiles is 0 */
    int nfiles;
    sm_svc_ckpt_file *files;
} sm_svc_assemble_req;

/* Worker.WriteCheckpoint: the shards of array_id on files[k].device, each
 * into dir/files[k].file; or (nfiles 0) manifest into dir/manifest.json. */
typedef struct {
    sm_array_id array_id;
    const char *dir;
    int nfiles; /* 0..SM_MAX_WORKER_DEVICES */
    const sm_svc_ckpt_file *files;
    const char *manifest; /* NULL or "" when nfiles > 0 */
} sm_svc_ckpt_write_req;

typedef struct {
    int ndevices;
    int32_t devices[SM_MAX_WORKER_DEVICES];
    int64_t device_bytes[SM_MAX_WORKER_DEVICES];
    int64_t shards;
    int64_t shm_transfer_bytes;        /* moved through segments (clients', peers' staging) */
    int64_t peer_shm_bytes;            /* reshard pieces pulled from peers through shared memory */
    int64_t peer_grpc_bytes;           /* ... and over GetShard streams */
    int64_t collective_in_place_bytes; /* read from peers' array memory where it lies */
} sm_svc_worker_stats;

/* What a worker holds of one array on one device (Worker.ShardInfo). */
typedef struct {
    int32_t device;
    int present;
    int64_t bytes;
    uint64_t checksum; /* xxHash3-64 of the shard bytes */
} sm_svc_shard_state;

/* The worker's handlers (contract as for sm_svc_coord_ops). */
typedef struct {
    sm_err (*put_shard)(void *user, sm_svc_upload_in *in, sm_svc_upload_reply *out, char *err,
                        size_t errlen);
    sm_err (*get_shard)(void *user, const sm_svc_download_req *req, sm_svc_download_out *out,
                        char *err, size_t errlen);
    /* ndevices == 0: every local device. */
    sm_err (*free_array)(void *user, sm_array_id id, int ndevices, const int32_t *devices,
                         char *err, size_t errlen);
    sm_err (*assemble)(void *user, const sm_svc_assemble_req *req, int64_t *bytes, char *err,
                       size_t errlen);
    sm_err (*stats)(void *user, sm_svc_worker_stats *out, char *err, size_t errlen);
    /* out has ndevices (1..SM_MAX_WORKER_DEVICES) entries, one per device. */
    sm_err (*shard_info)(void *user, sm_array_id id, int ndevices, const int32_t *devices,
                         sm_svc_shard_state *out, char *err, size_t errlen);
    /* out has req->nfiles entries (file and device copied from the request);
     * the handler fills bytes and checksum. */
    sm_err (*write_checkpoint)(void *user, const sm_svc_ckpt_write_req *req, sm_svc_ckpt_file *out,
                               char *err, size_t errlen);
    /* *text: the manifest, malloc'd (the adapter frees it). */
    sm_err (*read_manifest)(void *user, const char *dir, char **text, char *err, size_t errlen);
} sm_svc_worker_ops;

/* As sm_svc_coord_serve, for every Worker method. */
sm_err sm_svc_worker_serve(sm_rpc_server *s, const sm_svc_worker_ops *ops, void *user,
                           const char *server_name, char *err, size_t errlen);

/* Client calls to a worker (from the coordinator or a peer). Upload and
 * download streams: sm_svc_upload_open / sm_svc_download_open with
 * worker_service = 1. */
sm_err sm_svc_worker_free_array(sm_rpc_channel *ch, int deadline_ms, sm_array_id id, int ndevices,
                                const int32_t *devices, char *err, size_t errlen);
sm_err sm_svc_worker_assemble(sm_rpc_channel *ch, int deadline_ms, const sm_svc_assemble_req *req,
                              int64_t *bytes, char *err, size_t errlen);
sm_err sm_svc_worker_stats_get(sm_rpc_channel *ch, int deadline_ms, sm_svc_worker_stats *out,
                               char *err, size_t errlen);
/* out: ndevices (1..SM_MAX_WORKER_DEVICES) entries, in the order asked. */
sm_err sm_svc_worker_shard_info(sm_rpc_channel *ch, int deadline_ms, sm_array_id id, int ndevices,
                                const int32_t *devices, sm_svc_shard_state *out, char *err,
                                size_t errlen);
/* out: req->nfiles entries (bytes and checksum filled; file points into
 * req). */
sm_err sm_svc_worker_write_checkpoint(sm_rpc_channel *ch, int deadline_ms,
                                      const sm_svc_ckpt_write_req *req, sm_svc_ckpt_file *out,
                                      char *err, size_t errlen);
/* *text malloc'd (free). */
sm_err sm_svc_worker_read_manifest(sm_rpc_channel *ch, int deadline_ms, const char *dir,
                                   char **text, char *err, size_t errlen);
/* One worker's part of sm_svc_worker_shard_info_all: its devices and room
 * for as many states (in), and how its call went (out). */
typedef struct {
    int ndevices;
    const int32_t *devices;
    sm_svc_shard_state *out;
    sm_err e;
    char err[512];
} sm_svc_shard_query;
/* ShardInfo about array id on the workers of chs[0..n) at once, worker i
 * about q[i]. */
void sm_svc_worker_shard_info_all(sm_rpc_channel *const *chs, int n, int deadline_ms,
                                  sm_array_id id, sm_svc_shard_query *q);

#endif
