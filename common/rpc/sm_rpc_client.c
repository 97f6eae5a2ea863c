/* sm_rpc_client: blocking client calls, each on its own pluck completion
 * queue, over one shared channel per peer.
 *
 * Streams keep a RECV_STATUS_ON_CLIENT batch pending from the moment they
 * open; whenever an operation fails or the stream ends, that batch is
 * plucked and its status becomes the result. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "sm_log.h"
#include "sm_rpc_internal.h"

struct sm_rpc_channel {
    grpc_channel *ch;
    char *target;
    grpc_metadata md; /* the token, if any */
    size_t nmd;
};

typedef enum { ST_CSTREAM, ST_SSTREAM, ST_BIDI } stream_kind;

struct sm_rpc_stream {
    sm_rpc_channel *ch;
    stream_kind kind;
    char *path;
    grpc_completion_queue *cq;
    grpc_call *call;
    grpc_metadata_array init_md;
    grpc_metadata_array trailing_md;
    grpc_status_code status;
    grpc_slice details;
    int got_md;      /* RECV_INITIAL_METADATA started */
    int half_closed; /* SEND_CLOSE_FROM_CLIENT started */
    /* cstream: the reply receive, pending from open on; it completing while
     * the client still sends means the server ended the call */
    grpc_byte_buffer *watch_bb;
    int watch_pending;

    pthread_mutex_t mu; /* guards the flags below (bidi sender + receiver) */
    int ended;          /* the server's side is over (recv saw the end) */
    int send_active;    /* a send is in progress */

    pthread_mutex_t status_mu; /* serializes plucking the status */
    int done;                  /* the status batch was plucked */
    sm_err result;             /* the mapped status, once done */
    char result_text[512];
    /* distinct tags so a bidi sender and receiver can pluck at once */
    char tag_send, tag_recv, tag_status, tag_misc;
};

static grpc_event pluck(grpc_completion_queue *cq, void *t)
{
    return grpc_completion_queue_pluck(cq, t, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
}

static void cq_free(grpc_completion_queue *cq)
{
    grpc_completion_queue_shutdown(cq);
    while (pluck(cq, NULL).type != GRPC_QUEUE_SHUTDOWN)
        ;
    grpc_completion_queue_destroy(cq);
}

/* Turns a received status into an sm_err and "<STATUS>: <details>". */
static sm_err status_err(grpc_status_code st, grpc_slice details, const char *path, char *err,
                         size_t errlen)
{
    if (st == GRPC_STATUS_OK)
        return SM_OK;
    char *d = grpc_slice_to_c_string(details);
    sm_err e = sm_fail(err, errlen, sm_rpc_err_from_status(st), "%s: %s", sm_rpc_status_name(st),
                       d[0] ? d : path);
    gpr_free(d);
    return e;
}

static grpc_call *call_create(sm_rpc_channel *ch, const char *path, grpc_completion_queue *cq,
                              int deadline_ms)
{
    grpc_slice method = grpc_slice_from_copied_string(path);
    grpc_call *c = grpc_channel_create_call(ch->ch, NULL, GRPC_PROPAGATE_DEFAULTS, cq, method, NULL,
                                            sm_rpc_deadline(deadline_ms), NULL);
    grpc_slice_unref(method);
    return c;
}

/* A call's initial metadata into md[2]: the channel's token, if any, and
 * the request id (this thread's, else a new one). gRPC takes its own
 * reference to the values when the batch starts: md_done then drops ours. */
static void op_send_md(grpc_op *op, const sm_rpc_channel *ch, grpc_metadata md[2])
{
    size_t n = 0;
    char fresh[SM_LOG_RID_LEN];
    const char *rid = sm_log_request_id();
    if (!*rid) {
        sm_log_new_request_id(fresh);
        rid = fresh;
    }
    if (ch->nmd)
        md[n++] = ch->md;
    md[n].key = grpc_slice_from_static_string(SM_RPC_REQUEST_ID_KEY);
    md[n++].value = grpc_slice_from_copied_string(rid);
    memset(op, 0, sizeof *op);
    op->op = GRPC_OP_SEND_INITIAL_METADATA;
    op->data.send_initial_metadata.count = n;
    op->data.send_initial_metadata.metadata = md;
}

static void md_done(const sm_rpc_channel *ch, grpc_metadata md[2])
{
    grpc_slice_unref(md[ch->nmd].value);
}

/* ---- channel ---------------------------------------------------------- */

sm_err sm_rpc_channel_create(const char *target, const char *token, sm_rpc_channel **out, char *err,
                             size_t errlen)
{
    return sm_rpc_channel_create_tls(target, token, NULL, out, err, errlen);
}

sm_err sm_rpc_channel_create_tls(const char *target, const char *token, const sm_rpc_tls *tls,
                                 sm_rpc_channel **out, char *err, size_t errlen)
{
    *out = NULL;
    sm_rpc_channel *ch = calloc(1, sizeof *ch);
    if (!ch || !(ch->target = strdup(target))) {
        free(ch);
        return sm_fail(err, errlen, SM_ENOMEM, "cannot allocate a channel to %s", target);
    }
    if (token && token[0]) {
        ch->md.key = grpc_slice_from_static_string(SM_RPC_TOKEN_KEY);
        ch->md.value = grpc_slice_from_copied_string(token);
        ch->nmd = 1;
    }
    grpc_arg args[8];
    size_t n;
    sm_rpc_fill_args(args, &n);
    const struct {
        const char *key;
        int value;
    } extra[] = {
        /* Retries would buffer bulk streams in memory; callers decide. */
        {GRPC_ARG_ENABLE_RETRIES, 0},
        /* A restarted peer is found again quickly: attempts 200 ms to 2 s
         * apart. gRPC core takes the "minimum reconnect backoff" as the
         * time one attempt (TCP, TLS handshake, HTTP/2 settings) may take:
         * its default, 20 s, not 200 ms, which a TLS handshake on a busy
         * host passes (the call then failed UNAVAILABLE). */
        {GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 200},
        {GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 20000},
        {GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 2000},
    };
    for (size_t i = 0; i < sizeof extra / sizeof extra[0]; i++) {
        args[n].type = GRPC_ARG_INTEGER;
        args[n].key = (char *)extra[i].key;
        args[n++].value.integer = extra[i].value;
    }
    const char *server_name = sm_rpc_tls_server_name(tls);
    if (server_name) {
        args[n].type = GRPC_ARG_STRING;
        args[n].key = GRPC_SSL_TARGET_NAME_OVERRIDE_ARG;
        args[n++].value.string = (char *)server_name;
    }
    grpc_channel_args ca = {n, args};
    grpc_channel_credentials *creds = sm_rpc_tls_channel_creds(tls);
    ch->ch = grpc_channel_create(target, creds, &ca);
    grpc_channel_credentials_release(creds);
    if (!ch->ch) {
        sm_rpc_channel_free(ch);
        return sm_fail(err, errlen, SM_EINVAL, "cannot create a channel to '%s'", target);
    }
    *out = ch;
    return SM_OK;
}

void sm_rpc_channel_free(sm_rpc_channel *ch)
{
    if (!ch)
        return;
    if (ch->ch)
        grpc_channel_destroy(ch->ch);
    if (ch->nmd) {
        grpc_slice_unref(ch->md.key);
        grpc_slice_unref(ch->md.value);
    }
    free(ch->target);
    free(ch);
}

sm_err sm_rpc_channel_wait_ready(sm_rpc_channel *ch, int timeout_ms, char *err, size_t errlen)
{
    gpr_timespec deadline = sm_rpc_deadline(timeout_ms > 0 ? timeout_ms : 0);
    grpc_completion_queue *cq = grpc_completion_queue_create_for_pluck(NULL);
    char t;
    sm_err e = SM_OK;
    for (;;) {
        grpc_connectivity_state st = grpc_channel_check_connectivity_state(ch->ch, 1);
        if (st == GRPC_CHANNEL_READY)
            break;
        if (st == GRPC_CHANNEL_SHUTDOWN ||
            gpr_time_cmp(gpr_now(GPR_CLOCK_MONOTONIC), deadline) >= 0) {
            e = sm_fail(err, errlen, SM_EUNAVAILABLE,
                        "UNAVAILABLE: %s did not become ready within %d ms", ch->target,
                        timeout_ms);
            break;
        }
        grpc_channel_watch_connectivity_state(ch->ch, st, deadline, cq, &t);
        pluck(cq, &t);
    }
    cq_free(cq);
    return e;
}

/* ---- unary ------------------------------------------------------------ */

/* One unary call in flight: everything its one batch fills in. */
typedef struct {
    grpc_call *call;
    grpc_byte_buffer *send_bb; /* owned */
    grpc_metadata_array init_md, trailing_md;
    grpc_byte_buffer *recv_bb;
    grpc_status_code status;
    grpc_slice details;
    int inited; /* unary_start ran: unary_clear has something to free */
    int ended;  /* sm_rpc_unary_all: completed, or cancelled by its watch */
} unary_call;

/* Starts the whole call as one batch (takes send_bb); tag marks its
 * completion on cq. SM_EINTERNAL if gRPC refused the batch. */
static sm_err unary_start(unary_call *u, sm_rpc_channel *ch, const char *path,
                          grpc_byte_buffer *send_bb, grpc_completion_queue *cq, int deadline_ms,
                          void *tag, char *err, size_t errlen)
{
    memset(u, 0, sizeof *u);
    u->inited = 1;
    u->send_bb = send_bb;
    u->status = GRPC_STATUS_UNKNOWN;
    u->details = grpc_empty_slice();
    grpc_metadata_array_init(&u->init_md);
    grpc_metadata_array_init(&u->trailing_md);
    u->call = call_create(ch, path, cq, deadline_ms);
    grpc_op ops[6];
    grpc_metadata md[2];
    memset(ops, 0, sizeof ops);
    op_send_md(&ops[0], ch, md);
    ops[1].op = GRPC_OP_SEND_MESSAGE;
    ops[1].data.send_message.send_message = send_bb;
    ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
    ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
    ops[3].data.recv_initial_metadata.recv_initial_metadata = &u->init_md;
    ops[4].op = GRPC_OP_RECV_MESSAGE;
    ops[4].data.recv_message.recv_message = &u->recv_bb;
    ops[5].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    ops[5].data.recv_status_on_client.trailing_metadata = &u->trailing_md;
    ops[5].data.recv_status_on_client.status = &u->status;
    ops[5].data.recv_status_on_client.status_details = &u->details;
    grpc_call_error ge = grpc_call_start_batch(u->call, ops, 6, tag, NULL);
    md_done(ch, md);
    if (ge != GRPC_CALL_OK)
        return sm_fail(err, errlen, SM_EINTERNAL, "cannot start the call to %s (%d)", path,
                       (int)ge);
    return SM_OK;
}

/* The result of a completed call: its status, then its reply. */
static sm_err unary_result(unary_call *u, const char *path,
                           const ProtobufCMessageDescriptor *reply_desc, ProtobufCMessage **reply,
                           char *err, size_t errlen)
{
    *reply = NULL;
    sm_err e = status_err(u->status, u->details, path, err, errlen);
    if (e)
        return e;
    if (!u->recv_bb)
        return sm_fail(err, errlen, SM_EFORMAT, "the server answered %s with no reply message",
                       path);
    return sm_rpc_unpack(u->recv_bb, reply_desc, "reply", reply, err, errlen);
}

static void unary_clear(unary_call *u)
{
    if (!u->inited)
        return;
    if (u->recv_bb)
        grpc_byte_buffer_destroy(u->recv_bb);
    if (u->send_bb)
        grpc_byte_buffer_destroy(u->send_bb);
    grpc_slice_unref(u->details);
    grpc_metadata_array_destroy(&u->init_md);
    grpc_metadata_array_destroy(&u->trailing_md);
    if (u->call)
        grpc_call_unref(u->call);
}

sm_err sm_rpc_unary(sm_rpc_channel *ch, const char *path, const ProtobufCMessage *req,
                    const ProtobufCMessageDescriptor *reply_desc, ProtobufCMessage **reply,
                    int deadline_ms, char *err, size_t errlen)
{
    *reply = NULL;
    if (deadline_ms <= 0)
        return sm_fail(err, errlen, SM_EINVAL, "call to %s needs a positive deadline, not %d ms",
                       path, deadline_ms);
    grpc_byte_buffer *send_bb;
    sm_err e = sm_rpc_pack(req, "request", &send_bb, err, errlen);
    if (e)
        return e;
    grpc_completion_queue *cq = grpc_completion_queue_create_for_pluck(NULL);
    unary_call u;
    char t;
    e = unary_start(&u, ch, path, send_bb, cq, deadline_ms, &t, err, errlen);
    if (!e) {
        pluck(cq, &t);
        e = unary_result(&u, path, reply_desc, reply, err, errlen);
    }
    unary_clear(&u);
    cq_free(cq);
    return e;
}

/* sm_rpc_unary_all (nreq 1: every call sends bbs[0]) and sm_rpc_unary_each
 * (nreq n: call i sends bbs[i]); takes the buffers. */
static void unary_many(sm_rpc_channel *const *chs, int n, const char *path, grpc_byte_buffer **bbs,
                       int nreq, unary_call *u, const ProtobufCMessageDescriptor *reply_desc,
                       int deadline_ms, sm_rpc_unary_done done, sm_rpc_unary_watch watch,
                       void *user)
{
    /* One completion queue; a call's tag is its slot. A request packed once
     * gives each call its own reference to the same slices. */
    grpc_completion_queue *cq = grpc_completion_queue_create_for_next(NULL);
    char msg[512];
    int pending = 0;
    for (int i = 0; i < n; i++) {
        grpc_byte_buffer *bb;
        if (nreq == 1) {
            bb = grpc_byte_buffer_copy(bbs[0]);
        } else {
            bb = bbs[i];
            bbs[i] = NULL;
        }
        if (!chs[i]) {
            grpc_byte_buffer_destroy(bb);
            done(user, i, SM_EUNAVAILABLE, NULL, "no channel");
            continue;
        }
        sm_err ei = unary_start(&u[i], chs[i], path, bb, cq, deadline_ms, &u[i], msg, sizeof msg);
        if (ei) {
            u[i].ended = 1; /* no completion to wait for */
            done(user, i, ei, NULL, msg);
        } else {
            pending++;
        }
    }
    if (nreq == 1) {
        grpc_byte_buffer_destroy(bbs[0]);
        bbs[0] = NULL;
    }
    while (pending > 0) {
        gpr_timespec until = watch
                                 ? gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                                                gpr_time_from_millis(SM_RPC_WATCH_MS, GPR_TIMESPAN))
                                 : gpr_inf_future(GPR_CLOCK_REALTIME);
        grpc_event ev = grpc_completion_queue_next(cq, until, NULL);
        if (ev.type == GRPC_QUEUE_TIMEOUT) {
            /* Ended by cancelling: the completion arrives with this status. */
            for (int i = 0; i < n; i++) {
                char why[256] = "";
                if (u[i].call && !u[i].ended && watch(user, i, why, sizeof why)) {
                    u[i].ended = 1;
                    grpc_call_cancel_with_status(u[i].call, GRPC_STATUS_UNAVAILABLE, why, NULL);
                }
            }
            continue;
        }
        if (ev.type != GRPC_OP_COMPLETE)
            continue;
        unary_call *c = ev.tag;
        int i = (int)(c - u);
        c->ended = 1;
        ProtobufCMessage *reply = NULL;
        msg[0] = '\0';
        sm_err ei = unary_result(c, path, reply_desc, &reply, msg, sizeof msg);
        pending--;
        done(user, i, ei, reply, msg);
    }
    for (int i = 0; i < n; i++)
        unary_clear(&u[i]);
    grpc_completion_queue_shutdown(cq);
    while (grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type !=
           GRPC_QUEUE_SHUTDOWN)
        ;
    grpc_completion_queue_destroy(cq);
}

sm_err sm_rpc_unary_all(sm_rpc_channel *const *chs, int n, const char *path,
                        const ProtobufCMessage *req, const ProtobufCMessageDescriptor *reply_desc,
                        int deadline_ms, sm_rpc_unary_done done, sm_rpc_unary_watch watch,
                        void *user, char *err, size_t errlen)
{
    return sm_rpc_unary_each(chs, n, path, &req, 1, reply_desc, deadline_ms, done, watch, user, err,
                             errlen);
}

sm_err sm_rpc_unary_each(sm_rpc_channel *const *chs, int n, const char *path,
                         const ProtobufCMessage *const *reqs, int nreq,
                         const ProtobufCMessageDescriptor *reply_desc, int deadline_ms,
                         sm_rpc_unary_done done, sm_rpc_unary_watch watch, void *user, char *err,
                         size_t errlen)
{
    if (deadline_ms <= 0)
        return sm_fail(err, errlen, SM_EINVAL, "call to %s needs a positive deadline, not %d ms",
                       path, deadline_ms);
    if (n <= 0)
        return SM_OK;
    if (nreq != 1 && nreq != n)
        return sm_fail(err, errlen, SM_EINVAL, "%d calls to %s with %d requests", n, path, nreq);
    unary_call *u = calloc((size_t)n, sizeof *u);
    grpc_byte_buffer **bbs = calloc((size_t)nreq, sizeof *bbs);
    sm_err e = SM_OK;
    if (!u || !bbs)
        e = sm_fail(err, errlen, SM_ENOMEM, "cannot allocate %d calls to %s", n, path);
    for (int i = 0; i < nreq && !e; i++)
        e = sm_rpc_pack(reqs[i], "request", &bbs[i], err, errlen);
    if (!e)
        unary_many(chs, n, path, bbs, nreq, u, reply_desc, deadline_ms, done, watch, user);
    for (int i = 0; bbs && i < nreq; i++)
        if (bbs[i])
            grpc_byte_buffer_destroy(bbs[i]);
    free(bbs);
    free(u);
    return e;
}

/* ---- streams ----------------------------------------------------------- */

static void stream_destroy(sm_rpc_stream *st)
{
    if (st->call)
        grpc_call_unref(st->call);
    if (st->cq)
        cq_free(st->cq);
    if (st->watch_bb)
        grpc_byte_buffer_destroy(st->watch_bb);
    grpc_metadata_array_destroy(&st->init_md);
    grpc_metadata_array_destroy(&st->trailing_md);
    grpc_slice_unref(st->details);
    pthread_mutex_destroy(&st->mu);
    pthread_mutex_destroy(&st->status_mu);
    free(st->path);
    free(st);
}

/* Waits for the pending status batch (once) and returns the call's result.
 * Only called once no send can be left blocked (see send_wait). */
static sm_err stream_status(sm_rpc_stream *st, char *err, size_t errlen)
{
    pthread_mutex_lock(&st->status_mu);
    if (!st->done) {
        pluck(st->cq, &st->tag_status);
        st->done = 1;
        st->result =
            status_err(st->status, st->details, st->path, st->result_text, sizeof st->result_text);
    }
    sm_err e = st->result;
    if (e)
        sm_fail(err, errlen, e, "%s", st->result_text);
    pthread_mutex_unlock(&st->status_mu);
    return e;
}

/* Records that the server's side is over; a send still blocked on flow
 * control would then wait for the deadline (gRPC 1.51 fails neither it nor
 * the status after the server's trailers and RST_STREAM), so the call is
 * cancelled to release it. The status already received is kept. */
static void stream_mark_ended(sm_rpc_stream *st)
{
    pthread_mutex_lock(&st->mu);
    st->ended = 1;
    int sending = st->send_active;
    pthread_mutex_unlock(&st->mu);
    if (sending)
        grpc_call_cancel(st->call, NULL);
}

/* Runs one batch and waits for it; returns its success flag (0 also when it
 * could not start, which only a bug of ours causes). */
static int stream_batch(sm_rpc_stream *st, const grpc_op *ops, size_t n, void *t)
{
    if (grpc_call_start_batch(st->call, ops, n, t, NULL) != GRPC_CALL_OK)
        return 0;
    return pluck(st->cq, t).success;
}

/* Waits for the pending send, every SEND_POLL_MS checking whether the server
 * ended the call (cstream: the pending reply receive completed; bidi: the
 * receiver saw the end) and cancelling the call if so. */
#define SEND_POLL_MS 50
static int send_wait(sm_rpc_stream *st)
{
    for (;;) {
        grpc_event ev =
            grpc_completion_queue_pluck(st->cq, &st->tag_send, sm_rpc_deadline(SEND_POLL_MS), NULL);
        if (ev.type == GRPC_OP_COMPLETE)
            return ev.success;
        if (st->kind == ST_CSTREAM && st->watch_pending) {
            ev = grpc_completion_queue_pluck(st->cq, &st->tag_recv, gpr_time_0(GPR_CLOCK_MONOTONIC),
                                             NULL);
            if (ev.type == GRPC_OP_COMPLETE) {
                st->watch_pending = 0;
                pthread_mutex_lock(&st->mu);
                st->ended = 1;
                pthread_mutex_unlock(&st->mu);
            }
        }
        pthread_mutex_lock(&st->mu);
        int ended = st->ended;
        pthread_mutex_unlock(&st->mu);
        if (ended)
            grpc_call_cancel(st->call, NULL);
    }
}

static sm_err stream_open(sm_rpc_channel *ch, const char *path, stream_kind kind,
                          const ProtobufCMessage *req, int deadline_ms, sm_rpc_stream **out,
                          char *err, size_t errlen)
{
    *out = NULL;
    if (deadline_ms <= 0)
        return sm_fail(err, errlen, SM_EINVAL, "call to %s needs a positive deadline, not %d ms",
                       path, deadline_ms);
    grpc_byte_buffer *bb = NULL;
    sm_err e;
    if (req && (e = sm_rpc_pack(req, "request", &bb, err, errlen)))
        return e;
    sm_rpc_stream *st = calloc(1, sizeof *st);
    if (!st || !(st->path = strdup(path))) {
        free(st);
        if (bb)
            grpc_byte_buffer_destroy(bb);
        return sm_fail(err, errlen, SM_ENOMEM, "cannot allocate a stream for %s", path);
    }
    st->ch = ch;
    st->kind = kind;
    st->details = grpc_empty_slice();
    pthread_mutex_init(&st->mu, NULL);
    pthread_mutex_init(&st->status_mu, NULL);
    grpc_metadata_array_init(&st->init_md);
    grpc_metadata_array_init(&st->trailing_md);
    st->cq = grpc_completion_queue_create_for_pluck(NULL);
    st->call = call_create(ch, path, st->cq, deadline_ms);

    grpc_op sop;
    memset(&sop, 0, sizeof sop);
    sop.op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    sop.data.recv_status_on_client.trailing_metadata = &st->trailing_md;
    sop.data.recv_status_on_client.status = &st->status;
    sop.data.recv_status_on_client.status_details = &st->details;
    if (grpc_call_start_batch(st->call, &sop, 1, &st->tag_status, NULL) != GRPC_CALL_OK) {
        st->done = 1; /* nothing pending */
        e = sm_fail(err, errlen, SM_EINTERNAL, "cannot start the call to %s", path);
        goto fail;
    }

    grpc_op ops[3];
    grpc_metadata md[2];
    memset(ops, 0, sizeof ops);
    size_t n = 0;
    op_send_md(&ops[n++], ch, md);
    if (bb) {
        ops[n].op = GRPC_OP_SEND_MESSAGE;
        ops[n++].data.send_message.send_message = bb;
        ops[n++].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
        st->half_closed = 1;
    }
    int started = stream_batch(st, ops, n, &st->tag_misc);
    md_done(ch, md);
    if (!started) {
        e = stream_status(st, err, errlen);
        if (!e)
            e = sm_fail(err, errlen, SM_EUNAVAILABLE, "UNAVAILABLE: the call to %s failed", path);
        goto fail;
    }
    if (kind == ST_CSTREAM) {
        memset(ops, 0, sizeof ops);
        ops[0].op = GRPC_OP_RECV_INITIAL_METADATA;
        ops[0].data.recv_initial_metadata.recv_initial_metadata = &st->init_md;
        ops[1].op = GRPC_OP_RECV_MESSAGE;
        ops[1].data.recv_message.recv_message = &st->watch_bb;
        st->got_md = 1;
        if (grpc_call_start_batch(st->call, ops, 2, &st->tag_recv, NULL) != GRPC_CALL_OK) {
            e = sm_fail(err, errlen, SM_EINTERNAL, "cannot start the reply receive on %s", path);
            goto fail;
        }
        st->watch_pending = 1;
    }
    if (bb)
        grpc_byte_buffer_destroy(bb);
    *out = st;
    return SM_OK;

fail:
    if (bb)
        grpc_byte_buffer_destroy(bb);
    sm_rpc_stream_free(st);
    return e;
}

/* Sends msg, packed by sm_rpc_pack, or by sm_rpc_pack_data with field,
 * data, len, release and arg when field is not 0, and waits until gRPC took
 * it. */
static sm_err stream_send(sm_rpc_stream *st, const ProtobufCMessage *msg, uint32_t field,
                          const void *data, size_t len, sm_rpc_release_fn release, void *arg,
                          char *err, size_t errlen)
{
    pthread_mutex_lock(&st->mu);
    int ended = st->ended;
    if (!ended && !st->half_closed)
        st->send_active = 1;
    pthread_mutex_unlock(&st->mu);
    if (ended || st->half_closed) {
        if (release)
            release(arg);
        sm_err e = stream_status(st, err, errlen);
        if (e)
            return e;
        return sm_fail(err, errlen, SM_EPRECONDITION, "send on %s after its end", st->path);
    }

    grpc_byte_buffer *bb;
    sm_err e =
        field ? sm_rpc_pack_data(msg, field, data, len, release, arg, "request", &bb, err, errlen)
              : sm_rpc_pack(msg, "request", &bb, err, errlen);
    int ok = 0;
    if (e == SM_OK) {
        grpc_op op;
        memset(&op, 0, sizeof op);
        op.op = GRPC_OP_SEND_MESSAGE;
        op.data.send_message.send_message = bb;
        if (grpc_call_start_batch(st->call, &op, 1, &st->tag_send, NULL) == GRPC_CALL_OK)
            ok = send_wait(st);
        grpc_byte_buffer_destroy(bb);
    }
    pthread_mutex_lock(&st->mu);
    st->send_active = 0;
    if (e == SM_OK && !ok)
        st->ended = 1;
    pthread_mutex_unlock(&st->mu);
    if (e || ok)
        return e;
    /* The call is over: the server's status says why. */
    if (st->kind == ST_CSTREAM && st->watch_pending) {
        pluck(st->cq, &st->tag_recv);
        st->watch_pending = 0;
    }
    e = stream_status(st, err, errlen);
    if (!e)
        e = sm_fail(err, errlen, SM_EUNAVAILABLE,
                    "UNAVAILABLE: the server ended %s while the client was still sending",
                    st->path);
    return e;
}

/* The next message as received: SM_OK with *out (the caller destroys it),
 * or with *out NULL once the server finished with OK. */
static sm_err stream_recv_bb(sm_rpc_stream *st, grpc_byte_buffer **out, char *err, size_t errlen)
{
    *out = NULL;
    pthread_mutex_lock(&st->mu);
    int ended = st->ended;
    pthread_mutex_unlock(&st->mu);
    if (ended)
        return stream_status(st, err, errlen);
    grpc_byte_buffer *bb = NULL;
    grpc_op ops[2];
    memset(ops, 0, sizeof ops);
    size_t n = 0;
    if (!st->got_md) {
        ops[n].op = GRPC_OP_RECV_INITIAL_METADATA;
        ops[n++].data.recv_initial_metadata.recv_initial_metadata = &st->init_md;
        st->got_md = 1;
    }
    ops[n].op = GRPC_OP_RECV_MESSAGE;
    ops[n++].data.recv_message.recv_message = &bb;
    int ok = stream_batch(st, ops, n, &st->tag_recv);
    if (!ok || !bb) {
        if (bb)
            grpc_byte_buffer_destroy(bb);
        stream_mark_ended(st);
        sm_err e = stream_status(st, err, errlen);
        if (!e && !ok)
            e = sm_fail(err, errlen, SM_EUNAVAILABLE, "UNAVAILABLE: receive on %s failed",
                        st->path);
        return e; /* SM_OK with *out == NULL: the server finished with OK */
    }
    *out = bb;
    return SM_OK;
}

static sm_err stream_recv(sm_rpc_stream *st, const ProtobufCMessageDescriptor *desc,
                          ProtobufCMessage **msg, char *err, size_t errlen)
{
    grpc_byte_buffer *bb;
    *msg = NULL;
    sm_err e = stream_recv_bb(st, &bb, err, errlen);
    if (e || !bb)
        return e;
    e = sm_rpc_unpack(bb, desc, "reply", msg, err, errlen);
    grpc_byte_buffer_destroy(bb);
    return e;
}

void sm_rpc_stream_free(sm_rpc_stream *st)
{
    if (!st)
        return;
    if (!st->done) {
        grpc_call_cancel(st->call, NULL);
        if (st->watch_pending) {
            pluck(st->cq, &st->tag_recv);
            st->watch_pending = 0;
        }
        pluck(st->cq, &st->tag_status);
        st->done = 1;
    }
    stream_destroy(st);
}

/* ---- client-streaming -------------------------------------------------- */

sm_err sm_rpc_cstream_open(sm_rpc_channel *ch, const char *path, int deadline_ms,
                           sm_rpc_stream **out, char *err, size_t errlen)
{
    return stream_open(ch, path, ST_CSTREAM, NULL, deadline_ms, out, err, errlen);
}

sm_err sm_rpc_cstream_send(sm_rpc_stream *st, const ProtobufCMessage *msg, char *err, size_t errlen)
{
    return stream_send(st, msg, 0, NULL, 0, NULL, NULL, err, errlen);
}

sm_err sm_rpc_cstream_send_data(sm_rpc_stream *st, const ProtobufCMessage *msg, uint32_t field,
                                const void *data, size_t len, sm_rpc_release_fn release, void *arg,
                                char *err, size_t errlen)
{
    return stream_send(st, msg, field, data, len, release, arg, err, errlen);
}

sm_err sm_rpc_cstream_finish(sm_rpc_stream *st, const ProtobufCMessageDescriptor *reply_desc,
                             ProtobufCMessage **reply, char *err, size_t errlen)
{
    *reply = NULL;
    sm_err e;
    pthread_mutex_lock(&st->mu);
    int ended = st->ended;
    pthread_mutex_unlock(&st->mu);
    if (!ended && !st->half_closed) {
        grpc_op op;
        memset(&op, 0, sizeof op);
        op.op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
        st->half_closed = 1;
        stream_batch(st, &op, 1, &st->tag_send); /* failure shows in the status */
    }
    if (st->watch_pending) {
        pluck(st->cq, &st->tag_recv);
        st->watch_pending = 0;
    }
    e = stream_status(st, err, errlen);
    if (e)
        goto out;
    if (!st->watch_bb) {
        e = sm_fail(err, errlen, SM_EFORMAT, "the server answered %s with no reply message",
                    st->path);
        goto out;
    }
    e = sm_rpc_unpack(st->watch_bb, reply_desc, "reply", reply, err, errlen);
out:
    sm_rpc_stream_free(st);
    return e;
}

/* ---- server-streaming -------------------------------------------------- */

sm_err sm_rpc_sstream_open(sm_rpc_channel *ch, const char *path, const ProtobufCMessage *req,
                           int deadline_ms, sm_rpc_stream **out, char *err, size_t errlen)
{
    if (!req)
        return sm_fail(err, errlen, SM_EINVAL, "server-streaming call to %s needs a request", path);
    return stream_open(ch, path, ST_SSTREAM, req, deadline_ms, out, err, errlen);
}

sm_err sm_rpc_sstream_recv(sm_rpc_stream *st, const ProtobufCMessageDescriptor *desc,
                           ProtobufCMessage **msg, char *err, size_t errlen)
{
    return stream_recv(st, desc, msg, err, errlen);
}

sm_err sm_rpc_sstream_recv_data(sm_rpc_stream *st, const ProtobufCMessageDescriptor *desc,
                                uint32_t field, const sm_rpc_sink *sink, ProtobufCMessage **msg,
                                size_t *len, char *err, size_t errlen)
{
    grpc_byte_buffer *bb;
    *msg = NULL;
    *len = 0;
    sm_err e = stream_recv_bb(st, &bb, err, errlen);
    if (e || !bb)
        return e;
    e = sm_rpc_unpack_data(bb, desc, field, sink, "reply", msg, len, err, errlen);
    grpc_byte_buffer_destroy(bb);
    return e;
}

/* ---- bidi ------------------------------------------------------------ */

sm_err sm_rpc_bidi_open(sm_rpc_channel *ch, const char *path, int deadline_ms, sm_rpc_stream **out,
                        char *err, size_t errlen)
{
    return stream_open(ch, path, ST_BIDI, NULL, deadline_ms, out, err, errlen);
}

sm_err sm_rpc_bidi_send(sm_rpc_stream *st, const ProtobufCMessage *msg, char *err, size_t errlen)
{
    return stream_send(st, msg, 0, NULL, 0, NULL, NULL, err, errlen);
}

sm_err sm_rpc_bidi_close_send(sm_rpc_stream *st, char *err, size_t errlen)
{
    pthread_mutex_lock(&st->mu);
    int ended = st->ended;
    pthread_mutex_unlock(&st->mu);
    if (st->half_closed || ended)
        return SM_OK;
    grpc_op op;
    memset(&op, 0, sizeof op);
    op.op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
    st->half_closed = 1;
    if (!stream_batch(st, &op, 1, &st->tag_send))
        return stream_status(st, err, errlen);
    return SM_OK;
}

sm_err sm_rpc_bidi_recv(sm_rpc_stream *st, const ProtobufCMessageDescriptor *desc,
                        ProtobufCMessage **msg, char *err, size_t errlen)
{
    return stream_recv(st, desc, msg, err, errlen);
}
