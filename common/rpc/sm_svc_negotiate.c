/* sm_svc_negotiate: protocol version negotiation (both services), the
 * adapter context and the small call helpers every adapter shares. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sm_tenant.h"
#include "sm_svc_internal.h"

/* Provided by LeakSanitizer in sanitizer builds, absent otherwise. */
extern void __lsan_ignore_object(const void *p) __attribute__((weak));

/* The context lives as long as the server that uses it, but sm_rpc has no
 * hook to learn when a server is freed, so it is never released (one small
 * block per served service per process). It is marked as intentionally
 * kept for LeakSanitizer. */
void *sm_svc_keep_alloc(size_t size)
{
    void *p = calloc(1, size);
    if (p && __lsan_ignore_object)
        __lsan_ignore_object(p);
    return p;
}

sm_svc_ctx *sm_svc_ctx_create(const sm_svc_coord_ops *coord, const sm_svc_worker_ops *worker,
                              void *user, const char *server_name)
{
    sm_svc_ctx *c = sm_svc_keep_alloc(sizeof *c);
    if (!c)
        return NULL;
    c->coord = coord;
    c->worker = worker;
    c->user = user;
    snprintf(c->server_name, sizeof c->server_name, "%s", server_name ? server_name : "");
    return c;
}

/* A row of sm_svc_add_rows with the context it runs with. */
typedef struct {
    sm_svc_row row;
    const void *ctx;
} unary_method;

void *sm_svc_arena_obj(sm_arena *a, size_t size, void (*fn)(void *))
{
    void *p = sm_arena_alloc(a, size);
    return p && sm_arena_defer(a, fn, p) == 0 ? p : NULL;
}

sm_err sm_svc_enc_nomem(char *err, size_t errlen)
{
    return sm_fail(err, errlen, SM_ENOMEM, "the server ran out of memory encoding the reply");
}

/* Replies are small: most fit in one block of this size. */
#define UNARY_ARENA_BLOCK 8192

static void unary_serve(sm_rpc_call *call, void *user)
{
    const unary_method *u = user;
    if (!u->row.present) {
        sm_svc_finish_unimplemented(call);
        return;
    }
    ProtobufCMessage *m = sm_svc_recv_request(call);
    if (!m)
        return;
    char err[SM_SVC_ERRLEN] = "";
    sm_arena *a = sm_arena_create(UNARY_ARENA_BLOCK);
    ProtobufCMessage *rep = a ? sm_arena_alloc(a, u->row.reply->sizeof_message) : NULL;
    sm_err e;
    if (!rep) {
        e = sm_fail(err, sizeof err, SM_ENOMEM, "the server ran out of memory for a call to %s",
                    u->row.path);
    } else {
        protobuf_c_message_init(u->row.reply, rep);
        e = u->row.fn(u->ctx, m, rep, a, err, sizeof err);
    }
    sm_svc_finish(call, e, err, rep);
    sm_arena_free(a);
    sm_rpc_msg_free(m);
}

sm_err sm_svc_add_rows(sm_rpc_server *s, const void *ctx, const sm_svc_row *rows, size_t n,
                       char *err, size_t errlen)
{
    unary_method *u = sm_svc_keep_alloc((n ? n : 1) * sizeof *u);
    if (!u)
        return sm_fail(err, errlen, SM_ENOMEM, "cannot allocate %zu method adapters", n);
    sm_err e = SM_OK;
    for (size_t i = 0; !e && i < n; i++) {
        u[i].row = rows[i];
        u[i].ctx = ctx;
        sm_rpc_method m = {rows[i].path, SM_RPC_UNARY,  rows[i].request,
                           unary_serve,  (void *)&u[i], rows[i].cluster_only};
        if (rows[i].stream) /* the context is the handler's own */
            m = (sm_rpc_method){rows[i].path,          rows[i].kind, rows[i].request,
                                rows[i].stream,        (void *)ctx,  rows[i].cluster_only,
                                .grant = rows[i].grant};
        e = sm_rpc_server_add(s, &m, err, errlen);
    }
    return e;
}

void sm_svc_finish_err(sm_rpc_call *call, sm_err e, const char *msg)
{
    sm_rpc_finish(call, e, msg && msg[0] ? msg : sm_strerror(e), NULL);
}

void sm_svc_finish(sm_rpc_call *call, sm_err e, const char *err, const ProtobufCMessage *reply)
{
    if (e)
        sm_svc_finish_err(call, e, err);
    else if (!reply) {
        char err[128];
        sm_svc_finish_err(call, sm_svc_enc_nomem(err, sizeof err), err);
    } else
        sm_rpc_finish(call, SM_OK, NULL, reply);
}

void sm_svc_finish_unimplemented(sm_rpc_call *call)
{
    char msg[256];
    snprintf(msg, sizeof msg, "%s is not implemented by this server", sm_rpc_call_path(call));
    sm_rpc_finish(call, SM_EUNIMPLEMENTED, msg, NULL);
}

ProtobufCMessage *sm_svc_recv_request(sm_rpc_call *call)
{
    ProtobufCMessage *m = NULL;
    char err[SM_SVC_ERRLEN] = "";
    sm_err e = sm_rpc_recv(call, &m, err, sizeof err);
    if (!e && !m)
        e = sm_fail(err, sizeof err, SM_EINVAL, "the call to %s carried no request message",
                    sm_rpc_call_path(call));
    if (e) {
        sm_rpc_msg_free(m);
        sm_svc_finish_err(call, e, err);
        return NULL;
    }
    return m;
}

sm_err sm_svc_bad_reply(const char *path, const char *tmp, char *err, size_t errlen)
{
    return sm_fail(err, errlen, SM_EFORMAT, "%s answered with a malformed reply: %s", path, tmp);
}

sm_err sm_svc_unary(sm_rpc_channel *ch, const char *path, int deadline_ms,
                    const ProtobufCMessage *req, const ProtobufCMessageDescriptor *desc,
                    sm_svc_reply_dec dec, void *out, char *err, size_t errlen)
{
    Shmap__V1__Empty empty;
    shmap__v1__empty__init(&empty);
    ProtobufCMessage *m;
    sm_err e = sm_rpc_unary(ch, path, req ? req : &empty.base, desc, &m, deadline_ms, err, errlen);
    if (e)
        return e;
    char tmp[SM_SVC_ERRLEN];
    e = dec ? dec(m, out, tmp, sizeof tmp) : SM_OK;
    sm_rpc_msg_free(m);
    return e ? sm_svc_bad_reply(path, tmp, err, errlen) : SM_OK;
}

sm_err sm_svc_stream_next(sm_rpc_call *call, ProtobufCMessage **cur, int *ended, int *end,
                          char *err, size_t errlen)
{
    *end = 0;
    sm_rpc_msg_free(*cur);
    *cur = NULL;
    if (*ended) {
        *end = 1;
        return SM_OK;
    }
    sm_err e = sm_rpc_recv(call, cur, err, errlen);
    if (!e && !*cur)
        *ended = *end = 1;
    return e;
}

/* ---- Negotiate ---------------------------------------------------------------- */

static void negotiate_handler(sm_rpc_call *call, void *user)
{
    const sm_svc_ctx *c = user;
    ProtobufCMessage *m = sm_svc_recv_request(call);
    if (!m)
        return;
    const Shmap__V1__NegotiateRequest *r = (const Shmap__V1__NegotiateRequest *)m;
    uint32_t lo = r->min_version, hi = r->max_version;
    sm_rpc_msg_free(m);
    char msg[256];
    if (lo > hi) {
        snprintf(msg, sizeof msg,
                 "NegotiateRequest asks for versions %u to %u; min_version must be <= "
                 "max_version",
                 lo, hi);
        sm_rpc_finish(call, SM_EINVAL, msg, NULL);
        return;
    }
    uint32_t top = hi < SM_SVC_PROTOCOL_MAX ? hi : SM_SVC_PROTOCOL_MAX;
    uint32_t bottom = lo > SM_SVC_PROTOCOL_MIN ? lo : SM_SVC_PROTOCOL_MIN;
    if (top < bottom) {
        snprintf(msg, sizeof msg,
                 "the client speaks protocol versions %u to %u but %s speaks %d to %d; upgrade "
                 "the older side",
                 lo, hi, c->server_name[0] ? c->server_name : "this server", SM_SVC_PROTOCOL_MIN,
                 SM_SVC_PROTOCOL_MAX);
        sm_rpc_finish(call, SM_EPRECONDITION, msg, NULL);
        return;
    }
    Shmap__V1__NegotiateReply rep;
    shmap__v1__negotiate_reply__init(&rep);
    rep.version = top;
    rep.server = (char *)c->server_name;
    rep.relay_only = sm_tenant_current()[0] != 0; /* a tenant's token opens no worker */
    rep.grants = rep.relay_only; /* but a coordinator with tenants grants each transfer */
    sm_rpc_finish(call, SM_OK, NULL, &rep.base);
}

sm_err sm_svc_negotiate_add(sm_rpc_server *s, const char *path, sm_svc_ctx *ctx, char *err,
                            size_t errlen)
{
    sm_rpc_method m = {path, SM_RPC_UNARY, &shmap__v1__negotiate_request__descriptor,
                       negotiate_handler, ctx};
    return sm_rpc_server_add(s, &m, err, errlen);
}

sm_err sm_svc_negotiate(sm_rpc_channel *ch, int worker_service, const char *client_name,
                        uint32_t *version, char *server, size_t server_len, int deadline_ms,
                        char *err, size_t errlen)
{
    return sm_svc_negotiate_relay(ch, worker_service, client_name, version, server, server_len,
                                  NULL, NULL, deadline_ms, err, errlen);
}

sm_err sm_svc_negotiate_relay(sm_rpc_channel *ch, int worker_service, const char *client_name,
                              uint32_t *version, char *server, size_t server_len, int *relay_only,
                              int *grants, int deadline_ms, char *err, size_t errlen)
{
    const char *path =
        worker_service ? SM_SVC_WORKER_PATH("Negotiate") : SM_SVC_COORD_PATH("Negotiate");
    Shmap__V1__NegotiateRequest req;
    shmap__v1__negotiate_request__init(&req);
    req.min_version = SM_SVC_PROTOCOL_MIN;
    req.max_version = SM_SVC_PROTOCOL_MAX;
    req.client = (char *)(client_name ? client_name : "");
    ProtobufCMessage *m;
    sm_err e = sm_rpc_unary(ch, path, &req.base, &shmap__v1__negotiate_reply__descriptor, &m,
                            deadline_ms, err, errlen);
    if (e)
        return e;
    const Shmap__V1__NegotiateReply *r = (const Shmap__V1__NegotiateReply *)m;
    if (r->version < SM_SVC_PROTOCOL_MIN || r->version > SM_SVC_PROTOCOL_MAX) {
        e = sm_fail(err, errlen, SM_EPRECONDITION,
                    "the server '%s' chose protocol version %u but this client speaks %d to %d",
                    r->server ? r->server : "", r->version, SM_SVC_PROTOCOL_MIN,
                    SM_SVC_PROTOCOL_MAX);
    } else {
        if (version)
            *version = r->version;
        if (server && server_len)
            snprintf(server, server_len, "%s", r->server ? r->server : "");
        if (relay_only)
            *relay_only = r->relay_only != 0;
        if (grants)
            *grants = r->grants != 0;
    }
    sm_rpc_msg_free(m);
    return e;
}
