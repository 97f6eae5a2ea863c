/* sm_rpc_msg: the message-level half of sm_rpc — method registration,
 * the calls a handler makes, and client calls — in protobuf-c messages.
 *
 * Only common/rpc includes this header: the rest of shmap talks to the
 * network through sm_svc.h (plain C types) and the lifecycle functions of
 * sm_rpc.h. See sm_rpc.h for the threading model, errors and limits. */
#ifndef SM_RPC_MSG_H
#define SM_RPC_MSG_H

#include <protobuf-c/protobuf-c.h>

#include "sm_rpc.h"

/* Frees a message returned by this module (protobuf_c_message_free_unpacked
 * with the default allocator). NULL is ignored. */
void sm_rpc_msg_free(ProtobufCMessage *msg);

/* ---- bulk data without copies -------------------------------------------
 * A data message is a protobuf message with one singular bytes field (the
 * payload) and a few small fields. These calls move the payload without the
 * copies of pack and unpack: a send references the caller's memory from the
 * gRPC byte buffer; a receive parses the small fields and copies the payload
 * straight from the received slices to where the receiver wants it. */

/* Called once gRPC no longer references memory sent without a copy (on any
 * thread, possibly after the send returned, the call ended or the stream was
 * freed). */
typedef void (*sm_rpc_release_fn)(void *arg);

/* Where the payload of a received data message goes. */
typedef struct {
    /* Called once per message after every other field was unpacked into msg
     * (its payload field left empty), with len the payload length. Returns
     * SM_OK with *dst at len writable bytes (may stay NULL when len is 0), or
     * an error with a sentence in err: the message is refused with it. */
    sm_err (*place)(void *user, const ProtobufCMessage *msg, size_t len, void **dst, char *err,
                    size_t errlen);
    /* Called after each piece of the payload was copied to dst + the bytes
     * before it, in order, with the piece's bytes (the received copy, equal
     * to what was written); may be NULL. */
    void (*copied)(void *user, const void *p, size_t n);
    void *user;
    /* 1: dst is not read again soon (a stored shard, a fetched array): the
     * copy bypasses the cache (sm_copy_stream). 0: a plain memcpy, for data
     * that is combined right after it lands. */
    int cold;
    /* The argument of copied when it is not user (a sink that passes on
     * another's copied); NULL: user. */
    void *copied_user;
} sm_rpc_sink;

/* One incoming call; owned by the server, borrowed by its handler for the
 * duration of the handler function. */
typedef struct sm_rpc_call sm_rpc_call;

typedef enum {
    SM_RPC_UNARY,         /* one request, one reply */
    SM_RPC_CLIENT_STREAM, /* N requests, one reply */
    SM_RPC_SERVER_STREAM, /* one request, N replies */
    SM_RPC_BIDI,          /* N requests, M replies */
} sm_rpc_kind;

/* Runs on a handler thread, may block. It must end the call with
 * sm_rpc_finish() (if it returns without, the client gets INTERNAL). It must
 * return promptly once sm_rpc_recv/sm_rpc_send report SM_ECANCELLED or
 * sm_rpc_call_cancelled() is true: sm_rpc_server_stop() waits for it. */
typedef void (*sm_rpc_handler)(sm_rpc_call *call, void *user);

typedef struct {
    const char *path;                          /* "/shmap.v1.Worker/PutShard"; copied */
    sm_rpc_kind kind;                          /* streaming shape */
    const ProtobufCMessageDescriptor *request; /* request message type */
    sm_rpc_handler handler;                    /* called once per call */
    void *user;                                /* borrowed; passed to handler */
    int cluster_only;                          /* 1: only the cluster's own processes (workers, the
                                                  coordinator) may call it: a call with a tenant's token
                                                  (sm_rpc_server_opts.authenticate), or on a TLS server
                                                  one from a caller that presented no client certificate
                                                  signed by its CA, gets PERMISSION_DENIED */
    int grant;                                 /* 1: a call without the server's token is not
                                                  refused but handed to the handler, which must
                                                  then check the transfer's grants
                                                  (sm_rpc_call_authenticated 0) */
} sm_rpc_method;

/* Registers one method (the row is copied). Only before start; a duplicate
 * path is SM_EEXIST. Not thread-safe against other calls on the server. */
sm_err sm_rpc_server_add(sm_rpc_server *s, const sm_rpc_method *m, char *err, size_t errlen);

/* ---- server call (used only by the handler that owns the call) ---------
 * recv and send may run concurrently on two threads (bidi); every other pair
 * of call functions must not. */

/* Next request message. SM_OK with *msg set: the caller owns it (free with
 * sm_rpc_msg_free). SM_OK with *msg == NULL: the client half-closed (end of
 * stream; for unary and server-streaming methods after the one request).
 * SM_ECANCELLED: the client went away, the deadline passed or the server is
 * stopping. SM_EFORMAT: the message did not parse. SM_EINVAL: a unary or
 * server-streaming call arrived without a request.
 * gRPC ends a cancelled stream like a half-close; recv reports SM_ECANCELLED
 * when the cancellation is already known (usually), so a stream that ends
 * before its last message should be checked with sm_rpc_call_wait_cancelled
 * (protocols mark their last message; shmap's carry size and checksum). */
sm_err sm_rpc_recv(sm_rpc_call *call, ProtobufCMessage **msg, char *err, size_t errlen);

/* Sends one reply message (server-streaming and bidi methods only, else
 * SM_EPRECONDITION); msg is borrowed and may be freed on return. Blocks until
 * gRPC took it (flow control). SM_ECANCELLED as for recv; SM_ERESOURCE if
 * larger than SM_RPC_MAX_MSG. */
sm_err sm_rpc_send(sm_rpc_call *call, const ProtobufCMessage *msg, char *err, size_t errlen);

/* Receives the next request of a data message type (the method's request
 * type; field: the number of its singular bytes field) and copies the
 * payload to where sink->place says. Results as for sm_rpc_recv; on SM_OK
 * with *msg set, *len is the payload length and msg's payload field is
 * empty. A place error is returned as is (err holds its sentence). Any
 * encoding protobuf-c accepts is accepted (unusual ones with one copy
 * more); malformed input is SM_EFORMAT. */
sm_err sm_rpc_recv_data(sm_rpc_call *call, uint32_t field, const sm_rpc_sink *sink,
                        ProtobufCMessage **msg, size_t *len, char *err, size_t errlen);

/* Like sm_rpc_send, with msg's bytes field number `field` (left empty in
 * msg) set to data[0..len) without a copy: data must stay valid and
 * unchanged until release(arg) runs. release runs exactly once, also when
 * the send fails (release may be NULL when len is 0). */
sm_err sm_rpc_send_data(sm_rpc_call *call, const ProtobufCMessage *msg, uint32_t field,
                        const void *data, size_t len, sm_rpc_release_fn release, void *arg,
                        char *err, size_t errlen);

/* Ends the call with a status: code (SM_OK or an error mapped by
 * sm_rpc_status_from_err), msg the sentence sent as status details (may be
 * NULL; copied), reply the final message when code is SM_OK (borrowed; NULL
 * for none; required by unary and client-streaming methods, optional last
 * message of streaming ones). Does not wait for delivery.
 * Call once; later calls are SM_EPRECONDITION. If the reply is too large the
 * client gets RESOURCE_EXHAUSTED and this returns SM_ERESOURCE. */
sm_err sm_rpc_finish(sm_rpc_call *call, sm_err code, const char *msg,
                     const ProtobufCMessage *reply);

/* 1 once the call was cancelled (client gone, deadline passed, server
 * stopping), else 0. Thread-safe; cheap enough to poll in long work. */
int sm_rpc_call_cancelled(sm_rpc_call *call);
/* 1 if the call carries the server's token (or a tenant's, with tenants),
 * or the server takes no token; 0 for a call of a grant method let
 * through without one, which needs grants. */
int sm_rpc_call_authenticated(const sm_rpc_call *call);
/* The x-shmap-token the call carries (*len bytes, valid for the call's
 * life; "" and 0 when none). */
const unsigned char *sm_rpc_call_token(const sm_rpc_call *call, size_t *len);
/* The server's grant key (sm_rpc_server_opts.grant_key), NULL if none. */
const sm_grant_key *sm_rpc_call_grant_key(const sm_rpc_call *call);

/* Like sm_rpc_call_cancelled, but waits up to timeout_ms for the call's
 * close to be known. Use it when a stream ends early (no last message): a
 * client that went away can look like a half-close for a moment. Returns 1
 * if cancelled, 0 if not (or not known within the timeout). */
int sm_rpc_call_wait_cancelled(sm_rpc_call *call, int timeout_ms);

/* Method path of the call ("/shmap.v1.Worker/PutShard"); borrowed. */
const char *sm_rpc_call_path(const sm_rpc_call *call);

/* A client streaming call (client-streaming, server-streaming or bidi). Used
 * by one thread at a time, except that bidi send and recv may run on two
 * threads at once. */
typedef struct sm_rpc_stream sm_rpc_stream;

/* Unary call of path with req (borrowed). On SM_OK *reply is a new message of
 * type reply_desc owned by the caller (sm_rpc_msg_free); on error *reply is
 * NULL and err holds "<STATUS>: <details>". deadline_ms > 0. Thread-safe. */
sm_err sm_rpc_unary(sm_rpc_channel *ch, const char *path, const ProtobufCMessage *req,
                    const ProtobufCMessageDescriptor *reply_desc, ProtobufCMessage **reply,
                    int deadline_ms, char *err, size_t errlen);

/* Called by sm_rpc_unary_all for call i once it ended: e and err ("<STATUS>:
 * <details>") as sm_rpc_unary returns them; on SM_OK reply is the callee's
 * (sm_rpc_msg_free), else NULL. */
typedef void (*sm_rpc_unary_done)(void *user, int i, sm_err e, ProtobufCMessage *reply,
                                  const char *err);

/* Asked by sm_rpc_unary_all about call i while it is still pending: a
 * non-zero return ends it at once with SM_EUNAVAILABLE and the sentence
 * written to why (its peer is known to be gone, say, while its connection
 * still looks open). */
typedef int (*sm_rpc_unary_watch)(void *user, int i, char *why, size_t whylen);

/* How often sm_rpc_unary_all asks its watch, in milliseconds. */
#define SM_RPC_WATCH_MS 100

/* The same unary call of path with req (borrowed, packed once) on chs[0..n)
 * at once, from the calling thread, without a thread per call. done runs on
 * this thread for each call as it ends, in the order they end (at once for
 * a NULL channel: SM_EUNAVAILABLE); it may block, the other calls go on.
 * watch (may be NULL) is asked about every pending call every
 * SM_RPC_WATCH_MS. Returns once every call ended: SM_OK, or an error before
 * any call started (done not called). deadline_ms > 0 covers each call. */
sm_err sm_rpc_unary_all(sm_rpc_channel *const *chs, int n, const char *path,
                        const ProtobufCMessage *req, const ProtobufCMessageDescriptor *reply_desc,
                        int deadline_ms, sm_rpc_unary_done done, sm_rpc_unary_watch watch,
                        void *user, char *err, size_t errlen);
/* As sm_rpc_unary_all, with call i sending reqs[i] (nreq == n), or every
 * call reqs[0] (nreq == 1). */
sm_err sm_rpc_unary_each(sm_rpc_channel *const *chs, int n, const char *path,
                         const ProtobufCMessage *const *reqs, int nreq,
                         const ProtobufCMessageDescriptor *reply_desc, int deadline_ms,
                         sm_rpc_unary_done done, sm_rpc_unary_watch watch, void *user, char *err,
                         size_t errlen);

/* Client-streaming call: open, send N times, finish. The deadline covers the
 * whole call. A failed send returns the server's final status (finish then
 * returns the same status); a send blocked on flow control is released
 * within ~50 ms once the server has ended the call. finish half-closes,
 * waits for the reply (owned by the caller) and always frees the stream;
 * to abandon a call instead, use sm_rpc_stream_free(). */
sm_err sm_rpc_cstream_open(sm_rpc_channel *ch, const char *path, int deadline_ms,
                           sm_rpc_stream **out, char *err, size_t errlen);
sm_err sm_rpc_cstream_send(sm_rpc_stream *st, const ProtobufCMessage *msg, char *err,
                           size_t errlen);
sm_err sm_rpc_cstream_finish(sm_rpc_stream *st, const ProtobufCMessageDescriptor *reply_desc,
                             ProtobufCMessage **reply, char *err, size_t errlen);

/* sm_rpc_cstream_send of a data message without a copy of its payload,
 * as sm_rpc_send_data describes. */
sm_err sm_rpc_cstream_send_data(sm_rpc_stream *st, const ProtobufCMessage *msg, uint32_t field,
                                const void *data, size_t len, sm_rpc_release_fn release, void *arg,
                                char *err, size_t errlen);

/* Server-streaming call: open with the one request (borrowed), then recv
 * until SM_OK with *msg == NULL (the server finished with OK) or an error
 * (the server's status, or SM_EFORMAT if a message did not parse). Free the
 * stream with sm_rpc_stream_free(). */
sm_err sm_rpc_sstream_open(sm_rpc_channel *ch, const char *path, const ProtobufCMessage *req,
                           int deadline_ms, sm_rpc_stream **out, char *err, size_t errlen);
sm_err sm_rpc_sstream_recv(sm_rpc_stream *st, const ProtobufCMessageDescriptor *desc,
                           ProtobufCMessage **msg, char *err, size_t errlen);

/* sm_rpc_sstream_recv of a data message (type desc, payload field number
 * field) whose payload is copied to where sink->place says, as for
 * sm_rpc_recv_data. */
sm_err sm_rpc_sstream_recv_data(sm_rpc_stream *st, const ProtobufCMessageDescriptor *desc,
                                uint32_t field, const sm_rpc_sink *sink, ProtobufCMessage **msg,
                                size_t *len, char *err, size_t errlen);

/* Bidi call: open, then send / recv in any order (one sender thread and one
 * receiver thread may run at once), close_send to half-close, recv until
 * SM_OK with *msg == NULL. A failed send returns the server's final status
 * as for cstream. If the server ends the call while a send is blocked on
 * flow control, that send is released as soon as the receiver sees the end;
 * a caller that sends and receives on one thread, and lets the server's
 * window fill, waits for the deadline instead. Free with
 * sm_rpc_stream_free(). */
sm_err sm_rpc_bidi_open(sm_rpc_channel *ch, const char *path, int deadline_ms, sm_rpc_stream **out,
                        char *err, size_t errlen);
sm_err sm_rpc_bidi_send(sm_rpc_stream *st, const ProtobufCMessage *msg, char *err, size_t errlen);
sm_err sm_rpc_bidi_close_send(sm_rpc_stream *st, char *err, size_t errlen);
sm_err sm_rpc_bidi_recv(sm_rpc_stream *st, const ProtobufCMessageDescriptor *desc,
                        ProtobufCMessage **msg, char *err, size_t errlen);

/* Frees a stream. If the call has not ended it is cancelled (the server sees
 * SM_ECANCELLED). No other operation on st may be in progress. NULL ok. */
void sm_rpc_stream_free(sm_rpc_stream *st);

#endif
