/* sm_svc_internal: what the sm_svc*.c files share: proto <-> core
 * conversions (sm_svc_conv.c), the stream objects (sm_svc_stream.c) and the
 * adapter context. Includes protobuf-c headers: never include it outside
 * common/rpc.
 *
 * Encoders build proto messages for packing only: their memory comes from an
 * sm_arena (freed at once after the call) and repeated scalar fields may point
 * straight into the C struct they came from, which must outlive the packing.
 * They return NULL only when out of memory.
 *
 * Decoders validate everything (the network is untrusted) and return SM_OK or
 * SM_EINVAL with one sentence naming the field (`what`, e.g.
 * "ArrayInfo.shards[2].index"). A NULL submessage decodes as its proto3
 * default (an empty Shape is a scalar). Strings returned as pointers point
 * into the proto message and live as long as it does. */
#ifndef SM_SVC_INTERNAL_H
#define SM_SVC_INTERNAL_H

#include <string.h>

#include "sm_arena.h"
#include "sm_ir.h"
#include "sm_rpc_msg.h"
#include "sm_rpc_proto.h"
#include "sm_svc.h"

#define SM_SVC_COORD_PATH(m)  "/shmap.v1.Coordinator/" m
#define SM_SVC_WORKER_PATH(m) "/shmap.v1.Worker/" m
/* Longest list accepted in a reply (arrays, meshes, upload targets). */
#define SM_SVC_MAX_LIST 65536
/* Mesh names: the size of sm_mesh_info.name. */
#define SM_SVC_MESH_NAME_MAX 64
/* Checkpoint directory paths (bytes, with the NUL) and manifest texts. */
#define SM_SVC_PATH_MAX     4096
#define SM_SVC_MANIFEST_MAX (4 << 20)
/* Handler error sentences. */
#define SM_SVC_ERRLEN 512

/* memcpy that accepts src == NULL when n == 0 (empty repeated fields). */
static inline void sm_svc_copy(void *dst, const void *src, size_t n)
{
    if (n)
        memcpy(dst, src, n);
}

/* A rank from a C struct, clamped to 0..SM_MAX_RANK so that a caller's bug
 * cannot make an encoder read past the struct. */
static inline size_t sm_svc_rank(int rank)
{
    return rank < 0 ? 0 : rank > SM_MAX_RANK ? SM_MAX_RANK : (size_t)rank;
}

/* ---- adapter context ----------------------------------------------------- */

/* One served service: its ops, user pointer and server name. */
typedef struct {
    const sm_svc_coord_ops *coord;   /* or NULL */
    const sm_svc_worker_ops *worker; /* or NULL */
    void *user;
    char server_name[128];
} sm_svc_ctx;

/* A new context (never freed: see sm_svc_negotiate.c), or NULL. */
sm_svc_ctx *sm_svc_ctx_create(const sm_svc_coord_ops *coord, const sm_svc_worker_ops *worker,
                              void *user, const char *server_name);
/* Registers the Negotiate method of the service with this path. */
sm_err sm_svc_negotiate_add(sm_rpc_server *s, const char *path, sm_svc_ctx *ctx, char *err,
                            size_t errlen);

/* A zeroed block that lives as long as the process (an adapter context: see
 * sm_svc_negotiate.c), marked as kept for LeakSanitizer; NULL when out of
 * memory. */
void *sm_svc_keep_alloc(size_t size);

/* In an adapter: ends the call with UNIMPLEMENTED and returns when the
 * handler fn is NULL. */
#define SM_SVC_REQUIRE(call, fn)                                                                   \
    do {                                                                                           \
        if (!(fn)) {                                                                               \
            sm_svc_finish_unimplemented(call);                                                     \
            return;                                                                                \
        }                                                                                          \
    } while (0)

/* ---- unary adapters (sm_svc_negotiate.c) ------------------------------------ */

/* The part of one unary method that differs from the others: decodes and
 * validates req (a bad request is SM_EINVAL without calling the handler),
 * calls the handler with ctx and encodes its result into rep, which is
 * initialised to the method's reply type. Everything the reply points to
 * comes from a, or is handed to a with sm_arena_defer, and is freed once the
 * call has finished; req lives until then too. Returns SM_OK, or the error
 * with its sentence in err (an encoder out of memory: sm_svc_enc_nomem). */
typedef sm_err (*sm_svc_unary_fn)(const void *ctx, const ProtobufCMessage *req,
                                  ProtobufCMessage *rep, sm_arena *a, char *err, size_t errlen);
/* The parameter list of an sm_svc_unary_fn, for defining one: the request
 * is m, the reply rp. */
#define SM_SVC_UNARY_ARGS                                                                          \
    const void *ctx, const ProtobufCMessage *m, ProtobufCMessage *rp, sm_arena *a, char *err,      \
        size_t errlen

/* One method of a service: a unary one (fn), or a streaming one whose
 * handler (stream, of kind) is called with the service's context. */
typedef struct {
    const char *path;
    const ProtobufCMessageDescriptor *request, *reply; /* reply: unary only */
    sm_svc_unary_fn fn;
    int present;      /* 0: the handler is NULL; calls get UNIMPLEMENTED */
    int cluster_only; /* as in sm_rpc_method */
    sm_rpc_kind kind;
    sm_rpc_handler stream;
    int grant; /* as in sm_rpc_method */
} sm_svc_row;

/* Rows: path, request and reply types by their protobuf-c prefix
 * (shmap__v1__empty), fn and whether the handler is there; or a streaming
 * method's kind, request type and handler. */
#define SM_SVC_UNARY_ROW(path, req, rep, fn, present)                                              \
    {                                                                                              \
        path, &req##__descriptor, &rep##__descriptor, fn, present, 0, SM_RPC_UNARY, NULL           \
    }
#define SM_SVC_STREAM_ROW(path, kind, req, handler)                                                \
    {                                                                                              \
        path, &req##__descriptor, NULL, NULL, 1, 0, kind, handler, 0                               \
    }
/* A streaming method that takes grants in place of the cluster token. */
#define SM_SVC_GRANT_ROW(path, kind, req, handler)                                                 \
    {                                                                                              \
        path, &req##__descriptor, NULL, NULL, 1, 0, kind, handler, 1                               \
    }

/* Registers the n methods of rows, stopping at the first failure. Each
 * unary one is served by one adapter that receives the request, runs the
 * row's fn with ctx, finishes the call with the reply or the error and
 * frees the rest. ctx must live as long as the server (sm_svc_keep_alloc). */
sm_err sm_svc_add_rows(sm_rpc_server *s, const void *ctx, const sm_svc_row *rows, size_t n,
                       char *err, size_t errlen);
/* A zeroed block of a (NULL when out of memory) whose contents fn frees
 * when a is freed: for a handler's output that the reply points into. */
void *sm_svc_arena_obj(sm_arena *a, size_t size, void (*fn)(void *));
/* SM_ENOMEM with the sentence of a reply the server could not encode. */
sm_err sm_svc_enc_nomem(char *err, size_t errlen);

/* Ends a call with e and msg (sm_strerror(e) when msg is empty). */
void sm_svc_finish_err(sm_rpc_call *call, sm_err e, const char *msg);
/* Ends a call: with e (and err) when the handler failed, else with reply
 * (NULL: the encoder ran out of memory). */
void sm_svc_finish(sm_rpc_call *call, sm_err e, const char *err, const ProtobufCMessage *reply);
/* Ends a call with UNIMPLEMENTED naming its method. */
void sm_svc_finish_unimplemented(sm_rpc_call *call);
/* Receives the one request of a unary or server-streaming call. On failure
 * the call is finished (the error sent) and NULL returned. */
ProtobufCMessage *sm_svc_recv_request(sm_rpc_call *call);
/* Client side: turns a reply decoding failure (sentence in tmp) into
 * SM_EFORMAT naming the method. */
sm_err sm_svc_bad_reply(const char *path, const char *tmp, char *err, size_t errlen);

/* The number of the bytes field "data" of desc's messages (UploadMsg,
 * DataChunk, CollMsg). */
uint32_t sm_svc_data_field(const ProtobufCMessageDescriptor *desc);
/* Sends m on client stream st, or else on call. Without release, as it
 * is; with release, m's data field (data, which this clears) goes without
 * a copy and release(arg) runs once the network layer lets go of it (as
 * sm_rpc_cstream_send_data and sm_rpc_send_data say). */
sm_err sm_svc_send_data(sm_rpc_stream *st, sm_rpc_call *call, ProtobufCMessage *m,
                        ProtobufCBinaryData *data, sm_rpc_release_fn release, void *arg, char *err,
                        size_t errlen);
/* The data fields of a stream's message (msg: its name in errors; an
 * UploadMsg, DataChunk or CollMsg): offset >= 0 into *out_offset, data
 * (borrowed from the message, NULL when empty), last and checksum. */
sm_err sm_svc_data_dec(const char *msg, int64_t offset, const ProtobufCBinaryData *data,
                       protobuf_c_boolean last, uint64_t checksum, int64_t *out_offset,
                       const void **out_data, size_t *out_len, int *out_last,
                       uint64_t *out_checksum, char *err, size_t errlen);

/* Decodes a reply message m into out; a failure sentence goes to err. */
typedef sm_err (*sm_svc_reply_dec)(const ProtobufCMessage *m, void *out, char *err, size_t errlen);
/* Client side, one unary call: req (NULL: an Empty message) to path, the
 * reply (of type desc) decoded by dec into out (dec NULL: the reply is
 * dropped). A reply dec rejects is SM_EFORMAT naming the method. req is
 * borrowed for the call. */
sm_err sm_svc_unary(sm_rpc_channel *ch, const char *path, int deadline_ms,
                    const ProtobufCMessage *req, const ProtobufCMessageDescriptor *desc,
                    sm_svc_reply_dec dec, void *out, char *err, size_t errlen);

/* Server side, the next message of a client stream: frees *cur, then
 * receives into *cur, or sets *end (and *ended, which makes later calls end
 * at once) when the client has finished. */
sm_err sm_svc_stream_next(sm_rpc_call *call, ProtobufCMessage **cur, int *ended, int *end,
                          char *err, size_t errlen);

/* ---- stream adapters (sm_svc_stream.c) ------------------------------------ */

typedef sm_err (*sm_svc_upload_fn)(void *user, sm_svc_upload_in *in, sm_svc_upload_reply *out,
                                   char *err, size_t errlen);
typedef sm_err (*sm_svc_download_fn)(void *user, const sm_svc_download_req *req,
                                     sm_svc_download_out *out, char *err, size_t errlen);
/* Serve an upload (client-streaming) or download (server-streaming) call with
 * fn (NULL: UNIMPLEMENTED). shm_ok: the service takes a ShmRef (the
 * worker's, from a caller with the cluster's credential); 0: a ShmRef is
 * refused (SM_EINVAL). */
void sm_svc_serve_upload(sm_rpc_call *call, sm_svc_upload_fn fn, void *user, int shm_ok);
void sm_svc_serve_download(sm_rpc_call *call, sm_svc_download_fn fn, void *user, int shm_ok);

/* A message of type T in arena a, initialized with init (its __init
 * function); NULL out of memory. */
#define SM_SVC_NEW(a, T, init)                                                                     \
    ({                                                                                             \
        T *p_ = sm_arena_alloc((a), sizeof(T));                                                    \
        if (p_)                                                                                    \
            init(p_);                                                                              \
        p_;                                                                                        \
    })

/* ---- encoders ---------------------------------------------------------------- */

Shmap__V1__DType sm_svc_dtype_enc(sm_dtype t);
Shmap__V1__Shape *sm_svc_shape_enc(sm_arena *a, const sm_shape *s);
Shmap__V1__Box *sm_svc_box_enc(sm_arena *a, const sm_index *ix);
/* with_devices 0: the default order (no devices sent). name may be NULL. */
Shmap__V1__Mesh *sm_svc_mesh_enc(sm_arena *a, uint64_t id, const char *name, const sm_mesh *m,
                                 int with_devices);
Shmap__V1__PartitionSpec *sm_svc_pspec_enc(sm_arena *a, const sm_pspec *p);
Shmap__V1__Sharding *sm_svc_sharding_ref_enc(sm_arena *a, const sm_sharding_ref *r);
Shmap__V1__ArrayRef *sm_svc_array_ref_enc(sm_arena *a, sm_array_ref r);
/* r encoded into p (caller storage; the name borrowed from r). */
void sm_svc_array_ref_fill(sm_array_ref r, Shmap__V1__ArrayRef *p);
Shmap__V1__ArrayInfo *sm_svc_array_info_enc(sm_arena *a, const sm_array_info *in);
Shmap__V1__WorkerInfo *sm_svc_worker_info_enc(sm_arena *a, const sm_worker_info *w);
Shmap__V1__UploadTarget *sm_svc_target_enc(sm_arena *a, const sm_svc_upload_target *t);

/* ---- decoders ---------------------------------------------------------------- */

/* n <= max, else SM_EINVAL "<what> has n <unit>; at most max are allowed". */
sm_err sm_svc_count_dec(size_t n, size_t max, const char *what, const char *unit, char *err,
                        size_t errlen);
/* strlen(s) < cap (s NULL is ""); copies into buf when buf is not NULL. */
sm_err sm_svc_str_dec(const char *s, size_t cap, const char *what, char *buf, char *err,
                      size_t errlen);
sm_err sm_svc_dtype_dec(int v, const char *what, sm_dtype *out, char *err, size_t errlen);
sm_err sm_svc_shape_dec(const Shmap__V1__Shape *p, const char *what, sm_shape *out, char *err,
                        size_t errlen);
sm_err sm_svc_box_dec(const Shmap__V1__Box *p, const char *what, sm_index *out, char *err,
                      size_t errlen);
/* 1 when the mesh has neither axes nor devices (a reference by id or name). */
int sm_svc_mesh_is_ref(const Shmap__V1__Mesh *p);
/* An inline mesh (built with sm_mesh_init); *default_order (may be NULL) is
 * set when no devices were given (then devices are 0..n-1). name (may be
 * NULL) receives the name, SM_SVC_MESH_NAME_MAX bytes. */
sm_err sm_svc_mesh_dec(const Shmap__V1__Mesh *p, const char *what, sm_mesh *out, int *default_order,
                       char *name, char *err, size_t errlen);
sm_err sm_svc_mesh_info_dec(const Shmap__V1__Mesh *p, const char *what, sm_mesh_info *out,
                            char *err, size_t errlen);
sm_err sm_svc_pspec_dec(const Shmap__V1__PartitionSpec *p, const char *what, sm_pspec *out,
                        char *err, size_t errlen);
/* Fills out; an inline mesh is decoded into *mesh (out->mesh points to it);
 * a reference's name points into p (NULL when empty). A missing mesh, or a
 * reference with neither id nor name, is SM_EINVAL. */
sm_err sm_svc_sharding_ref_dec(const Shmap__V1__Sharding *p, const char *what, sm_mesh *mesh,
                               sm_sharding_ref *out, char *err, size_t errlen);
/* name points into p ("" when empty). */
sm_err sm_svc_array_ref_dec(const Shmap__V1__ArrayRef *p, const char *what, sm_array_ref *out,
                            char *err, size_t errlen);
/* out->shards is malloc'd (sm_array_info_free); nothing is left allocated on
 * failure. */
sm_err sm_svc_array_info_dec(const Shmap__V1__ArrayInfo *p, const char *what, sm_array_info *out,
                             char *err, size_t errlen);
sm_err sm_svc_worker_info_dec(const Shmap__V1__WorkerInfo *p, const char *what, sm_worker_info *out,
                              char *err, size_t errlen);
/* out->devices is malloc'd (free). */
sm_err sm_svc_target_dec(const Shmap__V1__UploadTarget *p, const char *what,
                         sm_svc_upload_target *out, char *err, size_t errlen);
/* devices point into p. */
sm_err sm_svc_upload_msg_dec(const Shmap__V1__UploadMsg *p, sm_svc_upload_msg *out, char *err,
                             size_t errlen);
sm_err sm_svc_chunk_dec(const Shmap__V1__DataChunk *p, sm_svc_chunk *out, char *err, size_t errlen);
/* Encoders of the stream messages into caller storage (no allocation):
 * shape/header/box are the submessage slots. */
void sm_svc_upload_msg_enc(const sm_svc_upload_msg *m, Shmap__V1__UploadMsg *p,
                           Shmap__V1__UploadHeader *h, Shmap__V1__Shape *sh);
void sm_svc_chunk_enc(const sm_svc_chunk *c, Shmap__V1__DataChunk *p, Shmap__V1__Shape *sh);
/* DownloadRequest: ar and box are the submessage slots; box start/stop
 * arrays need 2 * SM_MAX_RANK int64s in boxbuf. */
void sm_svc_download_req_enc(const sm_svc_download_req *r, Shmap__V1__DownloadRequest *p,
                             Shmap__V1__ArrayRef *ar, Shmap__V1__Box *box, int64_t *boxbuf);
sm_err sm_svc_download_req_dec(const Shmap__V1__DownloadRequest *p, sm_svc_download_req *out,
                               char *err, size_t errlen);

/* ---- Program conversion (sm_svc_job_conv.c) -------------------------------- */

/* Encoders and decoders of the conventions above; the decoded program is
 * the caller's (sm_program_free). */
Shmap__V1__Program *sm_svc_program_enc(sm_arena *a, const sm_program *p);
sm_err sm_svc_program_dec(const Shmap__V1__Program *m, const char *what, sm_program **out,
                          char *err, size_t errlen);

#endif
