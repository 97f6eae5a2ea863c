/* sm_svc_job_worker: the Worker's job methods (RunJob, CancelJob, and the
 * Exchange stream of collective blocks): adapters and client calls, with
 * the conventions of sm_svc_worker.c and sm_svc_stream.c. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sm_log.h"
#include "sm_shm.h"
#include "sm_svc_internal.h"
#include "sm_svc_job.h"
#include "sm_time.h"

#define SM_SVC_MAX_JOB_ARRAYS 1024

/* ---- RunJobRequest conversions ---------------------------------------------------- */

static Shmap__V1__RunJobRequest *run_job_enc(sm_arena *a, const sm_svc_run_job_req *req)
{
    Shmap__V1__RunJobRequest *p =
        SM_SVC_NEW(a, Shmap__V1__RunJobRequest, shmap__v1__run_job_request__init);
    if (!p)
        return NULL;
    p->job_id = req->job_id.v;
    p->deadline_ms = req->deadline_ms;
    p->shm_key = req->shm_key;
    if (!(p->program = sm_svc_program_enc(a, req->program)))
        return NULL;
    int ni = req->ninputs > 0 ? req->ninputs : 0, no = req->noutputs > 0 ? req->noutputs : 0;
    int np = req->npeers > 0 ? req->npeers : 0;
    p->input_arrays = sm_arena_alloc(a, (size_t)(ni ? ni : 1) * sizeof *p->input_arrays);
    p->output_arrays = sm_arena_alloc(a, (size_t)(no ? no : 1) * sizeof *p->output_arrays);
    p->peers = sm_arena_alloc(a, (size_t)(np ? np : 1) * sizeof *p->peers);
    if (!p->input_arrays || !p->output_arrays || !p->peers)
        return NULL;
    for (int i = 0; i < ni; i++)
        p->input_arrays[i] = req->inputs[i].v;
    for (int i = 0; i < no; i++)
        p->output_arrays[i] = req->outputs[i].v;
    p->n_input_arrays = (size_t)ni;
    p->n_output_arrays = (size_t)no;
    for (int i = 0; i < np; i++) {
        const sm_svc_peer *s = &req->peers[i];
        Shmap__V1__PeerDevices *q =
            SM_SVC_NEW(a, Shmap__V1__PeerDevices, shmap__v1__peer_devices__init);
        if (!q)
            return NULL;
        q->address = (char *)s->address;
        q->n_devices = s->ndevices < 0                       ? 0
                       : s->ndevices > SM_MAX_WORKER_DEVICES ? SM_MAX_WORKER_DEVICES
                                                             : (size_t)s->ndevices;
        q->devices = (int32_t *)s->devices;
        q->shm_domain = s->shm_domain;
        p->peers[p->n_peers++] = q;
    }
    return p;
}

/* Fills out (inputs, outputs and peers malloc'd into *mem, one block freed
 * with free; the program is new and the caller's). */
static sm_err run_job_dec(const Shmap__V1__RunJobRequest *p, sm_svc_run_job_req *out, void **mem,
                          char *err, size_t errlen)
{
    char what[96];
    sm_err e;
    memset(out, 0, sizeof *out);
    *mem = NULL;
    if ((e = sm_svc_count_dec(p->n_input_arrays, SM_SVC_MAX_JOB_ARRAYS, "RunJobRequest",
                              "input_arrays", err, errlen)) ||
        (e = sm_svc_count_dec(p->n_output_arrays, SM_SVC_MAX_JOB_ARRAYS, "RunJobRequest",
                              "output_arrays", err, errlen)) ||
        (e = sm_svc_count_dec(p->n_peers, SM_MAX_DEVICES, "RunJobRequest", "peers", err, errlen)))
        return e;
    size_t ids = (p->n_input_arrays + p->n_output_arrays) * sizeof(sm_array_id);
    uint8_t *blk = malloc(ids + p->n_peers * sizeof(sm_svc_peer) + 1);
    if (!blk)
        return sm_fail(err, errlen, SM_ENOMEM, "cannot allocate a job request");
    out->inputs = (sm_array_id *)blk;
    out->outputs = out->inputs + p->n_input_arrays;
    out->peers = (sm_svc_peer *)(blk + ids);
    for (size_t i = 0; i < p->n_input_arrays; i++)
        out->inputs[i].v = p->input_arrays[i];
    for (size_t i = 0; i < p->n_output_arrays; i++)
        out->outputs[i].v = p->output_arrays[i];
    for (size_t i = 0; i < p->n_peers; i++) {
        const Shmap__V1__PeerDevices *q = p->peers[i];
        sm_svc_peer *s = &out->peers[i];
        memset(s, 0, sizeof *s);
        snprintf(what, sizeof what, "RunJobRequest.peers[%zu].address", i);
        if ((e = sm_svc_str_dec(q->address, SM_ADDR_MAX, what, s->address, err, errlen)))
            goto fail;
        snprintf(what, sizeof what, "RunJobRequest.peers[%zu]", i);
        if ((e = sm_svc_count_dec(q->n_devices, SM_MAX_WORKER_DEVICES, what, "devices", err,
                                  errlen)))
            goto fail;
        s->ndevices = (int)q->n_devices;
        sm_svc_copy(s->devices, q->devices, q->n_devices * sizeof *q->devices);
        s->shm_domain = q->shm_domain;
    }
    if ((e = sm_svc_program_dec(p->program, "RunJobRequest.program", &out->program, err, errlen)))
        goto fail;
    if (!out->program->has_devices) {
        e = sm_fail(err, errlen, SM_EINVAL,
                    "RunJobRequest.program.mesh has no devices; a job's mesh is sent with them");
        goto fail;
    }
    if (p->n_input_arrays != (size_t)out->program->nparams ||
        p->n_output_arrays != (size_t)out->program->nreturns) {
        e = sm_fail(err, errlen, SM_EINVAL,
                    "RunJobRequest has %zu input_arrays and %zu output_arrays but the program "
                    "takes %d parameters and returns %d values",
                    p->n_input_arrays, p->n_output_arrays, out->program->nparams,
                    out->program->nreturns);
        goto fail;
    }
    out->job_id.v = p->job_id;
    out->ninputs = (int)p->n_input_arrays;
    out->noutputs = (int)p->n_output_arrays;
    out->npeers = (int)p->n_peers;
    out->deadline_ms = p->deadline_ms;
    out->shm_key = p->shm_key;
    *mem = blk;
    return SM_OK;
fail:
    sm_program_free(out->program);
    out->program = NULL;
    free(blk);
    return e;
}

static void coll_msg_enc(const sm_svc_coll_msg *m, Shmap__V1__CollMsg *p)
{
    shmap__v1__coll_msg__init(p);
    p->job_id = m->job_id.v;
    p->seq = m->seq;
    p->src_device = m->src_device;
    p->dst_device = m->dst_device;
    p->offset = m->offset;
    p->data.len = m->len;
    p->data.data = (uint8_t *)m->data;
    p->total_bytes = m->total_bytes;
    p->last = m->last != 0;
    p->checksum = m->checksum;
}

static sm_err coll_msg_dec(const Shmap__V1__CollMsg *p, sm_svc_coll_msg *out, char *err,
                           size_t errlen)
{
    memset(out, 0, sizeof *out);
    sm_err e = sm_svc_data_dec("CollMsg", p->offset, &p->data, p->last, p->checksum, &out->offset,
                               &out->data, &out->len, &out->last, &out->checksum, err, errlen);
    if (e)
        return e;
    if (p->total_bytes < 0)
        return sm_fail(err, errlen, SM_EINVAL, "CollMsg.total_bytes is %" PRId64 "; must be >= 0",
                       p->total_bytes);
    if (p->src_device < 0)
        return sm_fail(err, errlen, SM_EINVAL, "CollMsg.src_device is %d; must be >= 0",
                       (int)p->src_device);
    if (p->dst_device < -1)
        return sm_fail(err, errlen, SM_EINVAL, "CollMsg.dst_device is %d; must be >= -1",
                       (int)p->dst_device);
    out->job_id.v = p->job_id;
    out->seq = p->seq;
    out->src_device = p->src_device;
    out->dst_device = p->dst_device;
    out->total_bytes = p->total_bytes;
    return SM_OK;
}

/* ---- adapters ---------------------------------------------------------------------- */

typedef struct {
    const sm_svc_worker_job_ops *ops;
    void *user;
} job_ctx;

#define OP(c, name) SM_SVC_REQUIRE(call, (c)->ops->name)

static sm_err run_job(SM_SVC_UNARY_ARGS)
{
    const job_ctx *c = ctx;
    Shmap__V1__RunJobReply *rep = (Shmap__V1__RunJobReply *)rp;
    sm_svc_run_job_req req;
    void *mem = NULL;
    int64_t bytes = 0;
    (void)a;
    sm_err e = run_job_dec((const Shmap__V1__RunJobRequest *)m, &req, &mem, err, errlen);
    if (!e)
        e = c->ops->run_job(c->user, &req, &bytes, err, errlen); /* takes req.program */
    free(mem);
    rep->output_bytes = bytes;
    return e;
}

static sm_err cancel_job(SM_SVC_UNARY_ARGS)
{
    const job_ctx *c = ctx;
    (void)rp;
    (void)a;
    return c->ops->cancel_job(c->user, (sm_job_id){((const Shmap__V1__JobRef *)m)->job_id}, err,
                              errlen);
}

static sm_err shm_probe(SM_SVC_UNARY_ARGS)
{
    const job_ctx *c = ctx;
    const Shmap__V1__ShmProbeRequest *p = (const Shmap__V1__ShmProbeRequest *)m;
    Shmap__V1__ShmProbeReply *rep = (Shmap__V1__ShmProbeReply *)rp;
    sm_svc_shm_probe_req req = {.create = p->create};
    sm_svc_shm_probe_reply *out = sm_arena_alloc(a, sizeof *out);
    if (!out)
        return sm_svc_enc_nomem(err, errlen);
    sm_err e =
        sm_svc_str_dec(p->read, sizeof req.read, "ShmProbeRequest.read", req.read, err, errlen);
    if (!e)
        e = sm_svc_str_dec(p->drop, sizeof req.drop, "ShmProbeRequest.drop", req.drop, err, errlen);
    if (!e)
        e = c->ops->shm_probe(c->user, &req, out, err, errlen);
    rep->name = out->name;
    rep->cookie = out->cookie;
    rep->protocol = out->protocol;
    return e;
}

/* Number of CollMsg's payload field. */
struct sm_svc_coll_in {
    sm_rpc_call *call;
    ProtobufCMessage *cur; /* the message the last msg points into */
    int ended;
};

sm_err sm_svc_coll_recv(sm_svc_coll_in *in, sm_svc_coll_msg *msg, int *end, char *err,
                        size_t errlen)
{
    sm_err e = sm_svc_stream_next(in->call, &in->cur, &in->ended, end, err, errlen);
    if (e || *end)
        return e;
    return coll_msg_dec((const Shmap__V1__CollMsg *)in->cur, msg, err, errlen);
}

typedef struct {
    const sm_svc_coll_sink *sink;
    sm_svc_coll_msg *msg;
} coll_place_ctx;

static sm_err coll_place(void *user, const ProtobufCMessage *m, size_t len, void **dst, char *err,
                         size_t errlen)
{
    coll_place_ctx *x = user;
    sm_err e = coll_msg_dec((const Shmap__V1__CollMsg *)m, x->msg, err, errlen);
    if (e)
        return e;
    x->msg->data = NULL;
    x->msg->len = len;
    return x->sink->place(x->sink->user, x->msg, dst, err, errlen);
}

sm_err sm_svc_coll_recv_into(sm_svc_coll_in *in, const sm_svc_coll_sink *sink, sm_svc_coll_msg *msg,
                             int *end, char *err, size_t errlen)
{
    coll_place_ctx x = {sink, msg};
    sm_rpc_sink rs = {coll_place, sink->copied, &x, 0, sink->user}; /* combined right away */
    size_t len;
    *end = 0;
    sm_rpc_msg_free(in->cur);
    in->cur = NULL;
    if (in->ended) {
        *end = 1;
        return SM_OK;
    }
    sm_err e = sm_rpc_recv_data(in->call, sm_svc_data_field(&shmap__v1__coll_msg__descriptor), &rs,
                                &in->cur, &len, err, errlen);
    if (!e && !in->cur)
        in->ended = *end = 1;
    return e;
}

static void exchange(sm_rpc_call *call, void *u)
{
    const job_ctx *c = u;
    OP(c, exchange);
    sm_svc_coll_in in = {call, NULL, 0};
    int64_t bytes = 0;
    char err[SM_SVC_ERRLEN] = "";
    sm_err e = c->ops->exchange(c->user, &in, &bytes, err, sizeof err);
    sm_rpc_msg_free(in.cur);
    Shmap__V1__CollAck rep;
    shmap__v1__coll_ack__init(&rep);
    rep.bytes = bytes;
    sm_svc_finish(call, e, err, &rep.base);
}

sm_err sm_svc_worker_jobs_serve(sm_rpc_server *s, const sm_svc_worker_job_ops *ops, void *user,
                                char *err, size_t errlen)
{
    static const sm_svc_worker_job_ops none; /* ops NULL: every method UNIMPLEMENTED */
    job_ctx *ctx = sm_svc_keep_alloc(sizeof *ctx);
    if (!ctx)
        return sm_fail(err, errlen, SM_ENOMEM, "cannot allocate the worker job adapters");
    ctx->ops = ops ? ops : &none;
    ctx->user = user;
    const sm_svc_worker_job_ops *o = ctx->ops;
    const sm_svc_row rows[] = {
#define ROW(name, req, rep, fn)                                                                    \
    SM_SVC_UNARY_ROW(SM_SVC_WORKER_PATH(name), req, rep, fn, o->fn != NULL)
        ROW("RunJob", shmap__v1__run_job_request, shmap__v1__run_job_reply, run_job),
        ROW("CancelJob", shmap__v1__job_ref, shmap__v1__empty, cancel_job),
        SM_SVC_STREAM_ROW(SM_SVC_WORKER_PATH("Exchange"), SM_RPC_CLIENT_STREAM, shmap__v1__coll_msg,
                          exchange),
        ROW("ShmProbe", shmap__v1__shm_probe_request, shmap__v1__shm_probe_reply, shm_probe),
#undef ROW
    };
    return sm_svc_add_rows(s, ctx, rows, sizeof rows / sizeof rows[0], err, errlen);
}

/* ---- client calls ------------------------------------------------------------------ */

sm_err sm_svc_worker_run_job(sm_rpc_channel *ch, int deadline_ms, const sm_svc_run_job_req *req,
                             int64_t *output_bytes, char *err, size_t errlen)
{
    sm_arena *a = sm_arena_create(0);
    Shmap__V1__RunJobRequest *p = a ? run_job_enc(a, req) : NULL;
    if (!p) {
        sm_arena_free(a);
        return sm_fail(err, errlen, SM_ENOMEM, "out of memory encoding a job");
    }
    ProtobufCMessage *m;
    sm_err e = sm_rpc_unary(ch, SM_SVC_WORKER_PATH("RunJob"), &p->base,
                            &shmap__v1__run_job_reply__descriptor, &m, deadline_ms, err, errlen);
    sm_arena_free(a);
    if (e)
        return e;
    if (output_bytes)
        *output_bytes = ((const Shmap__V1__RunJobReply *)m)->output_bytes;
    sm_rpc_msg_free(m);
    return SM_OK;
}

typedef struct {
    sm_svc_run_job_done done;
    sm_svc_run_job_watch watch;
    void *user;
} run_job_all_ctx;

static int run_job_all_watch(void *user, int i, char *why, size_t whylen)
{
    const run_job_all_ctx *c = user;
    return c->watch(c->user, i, why, whylen);
}

static void run_job_all_done(void *user, int i, sm_err e, ProtobufCMessage *reply, const char *err)
{
    const run_job_all_ctx *c = user;
    int64_t bytes = reply ? ((const Shmap__V1__RunJobReply *)reply)->output_bytes : 0;
    if (reply)
        sm_rpc_msg_free(reply);
    c->done(c->user, i, e, bytes, err);
}

sm_err sm_svc_worker_run_job_all(sm_rpc_channel *const *chs, int n, int deadline_ms,
                                 const sm_svc_run_job_req *req, sm_svc_run_job_done done,
                                 sm_svc_run_job_watch watch, void *user, char *err, size_t errlen)
{
    sm_arena *a = sm_arena_create(0);
    Shmap__V1__RunJobRequest *p = a ? run_job_enc(a, req) : NULL;
    if (!p) {
        sm_arena_free(a);
        return sm_fail(err, errlen, SM_ENOMEM, "out of memory encoding a job");
    }
    run_job_all_ctx c = {done, watch, user};
    sm_err e = sm_rpc_unary_all(
        chs, n, SM_SVC_WORKER_PATH("RunJob"), &p->base, &shmap__v1__run_job_reply__descriptor,
        deadline_ms, run_job_all_done, watch ? run_job_all_watch : NULL, &c, err, errlen);
    sm_arena_free(a);
    return e;
}

sm_err sm_svc_worker_cancel_job(sm_rpc_channel *ch, int deadline_ms, sm_job_id id, char *err,
                                size_t errlen)
{
    Shmap__V1__JobRef p;
    shmap__v1__job_ref__init(&p);
    p.job_id = id.v;
    return sm_svc_unary(ch, SM_SVC_WORKER_PATH("CancelJob"), deadline_ms, &p.base,
                        &shmap__v1__empty__descriptor, NULL, NULL, err, errlen);
}

sm_err sm_svc_worker_shm_probe(sm_rpc_channel *ch, int deadline_ms, const sm_svc_shm_probe_req *req,
                               sm_svc_shm_probe_reply *out, char *err, size_t errlen)
{
    Shmap__V1__ShmProbeRequest p;
    shmap__v1__shm_probe_request__init(&p);
    p.create = req->create != 0;
    p.read = (char *)req->read;
    p.drop = (char *)req->drop;
    ProtobufCMessage *m;
    memset(out, 0, sizeof *out);
    sm_err e = sm_rpc_unary(ch, SM_SVC_WORKER_PATH("ShmProbe"), &p.base,
                            &shmap__v1__shm_probe_reply__descriptor, &m, deadline_ms, err, errlen);
    if (e)
        return e;
    const Shmap__V1__ShmProbeReply *r = (const Shmap__V1__ShmProbeReply *)m;
    e = sm_svc_str_dec(r->name, sizeof out->name, "ShmProbeReply.name", out->name, err, errlen);
    out->cookie = r->cookie;
    out->protocol = r->protocol;
    sm_rpc_msg_free(m);
    return e;
}

int sm_svc_shm_probe_agree(const sm_svc_shm_probe_reply *made, const sm_svc_shm_probe_reply *seen)
{
    return made->cookie != 0 && seen->cookie == made->cookie && seen->protocol == made->protocol;
}

int sm_svc_shm_prove(sm_rpc_channel *a, sm_rpc_channel *b, int deadline_ms)
{
    char err[SM_SVC_ERRLEN];
    sm_svc_shm_probe_req rq = {.create = 1};
    sm_svc_shm_probe_reply made, seen;
    if (sm_svc_worker_shm_probe(a, deadline_ms, &rq, &made, err, sizeof err) || !made.name[0])
        return 0;
    sm_svc_shm_probe_req rd = {0};
    snprintf(rd.read, sizeof rd.read, "%s", made.name);
    int ok = sm_svc_worker_shm_probe(b, deadline_ms, &rd, &seen, err, sizeof err) == SM_OK &&
             sm_svc_shm_probe_agree(&made, &seen);
    sm_svc_shm_probe_req dr = {0};
    snprintf(dr.drop, sizeof dr.drop, "%s", made.name);
    (void)sm_svc_worker_shm_probe(a, deadline_ms, &dr, &seen, err, sizeof err);
    return ok;
}

int sm_svc_shm_prove_here(sm_rpc_channel *ch, int deadline_ms)
{
    char err[SM_SVC_ERRLEN];
    sm_svc_shm_probe_req rq;
    sm_svc_shm_probe_reply rp;
    uint64_t cookie = 0;
    int same = 0;
    memset(&rq, 0, sizeof rq);
    if (sm_shm_probe_create(rq.read, &cookie, err, sizeof err))
        return 0;
    same = sm_svc_worker_shm_probe(ch, deadline_ms, &rq, &rp, err, sizeof err) == SM_OK &&
           rp.cookie == cookie;
    (void)sm_shm_probe_drop(rq.read, err, sizeof err); /* unread: still ours */
    return same;
}

int sm_svc_shm_same(sm_rpc_chans *chans, const char *addr, sm_rpc_channel *ch, int deadline_ms,
                    int64_t retry_ms)
{
    int64_t since = 0;
    int same = sm_rpc_chans_shm(chans, addr, &since);
    if (same < 0 && retry_ms > 0 && sm_time_mono_ms() - since >= retry_ms)
        same = 0;
    if (same)
        return same > 0;
    same = sm_svc_shm_prove_here(ch, deadline_ms);
    SM_DEBUG("the worker at %s %s this process's memory", addr, same ? "shares" : "does not share");
    sm_rpc_chans_set_shm(chans, addr, same ? 1 : -1);
    return same;
}

void sm_svc_shm_refused(sm_rpc_chans *chans, const char *addr)
{
    sm_rpc_chans_set_shm(chans, addr, -1);
}

void sm_svc_shm_domains(int n, int (*prove)(void *user, int i, int j), void *user, uint32_t *domain)
{
    for (int i = 0; i < n; i++)
        domain[i] = 0;
    for (int i = 0; i < n; i++) {
        if (domain[i])
            continue;
        for (int j = i + 1; j < n; j++) /* the first worker of each group proves the others */
            if (!domain[j] && prove(user, i, j))
                domain[i] = domain[j] = (uint32_t)i + 1;
    }
}

struct sm_svc_coll_stream {
    sm_rpc_stream *st;
};

sm_err sm_svc_coll_open(sm_rpc_channel *ch, int deadline_ms, sm_svc_coll_stream **out, char *err,
                        size_t errlen)
{
    *out = NULL;
    sm_svc_coll_stream *c = calloc(1, sizeof *c);
    if (!c)
        return sm_fail(err, errlen, SM_ENOMEM, "cannot allocate an exchange stream");
    sm_err e =
        sm_rpc_cstream_open(ch, SM_SVC_WORKER_PATH("Exchange"), deadline_ms, &c->st, err, errlen);
    if (e) {
        free(c);
        return e;
    }
    *out = c;
    return SM_OK;
}

sm_err sm_svc_coll_send(sm_svc_coll_stream *st, const sm_svc_coll_msg *msg, char *err,
                        size_t errlen)
{
    Shmap__V1__CollMsg p;
    coll_msg_enc(msg, &p);
    return sm_svc_send_data(st->st, NULL, &p.base, &p.data, msg->release, msg->release_arg, err,
                            errlen);
}

sm_err sm_svc_coll_finish(sm_svc_coll_stream *st, int64_t *bytes, char *err, size_t errlen)
{
    ProtobufCMessage *m = NULL;
    sm_err e = sm_rpc_cstream_finish(st->st, &shmap__v1__coll_ack__descriptor, &m, err, errlen);
    free(st);
    if (e)
        return e;
    if (bytes)
        *bytes = ((const Shmap__V1__CollAck *)m)->bytes;
    sm_rpc_msg_free(m);
    return SM_OK;
}

void sm_svc_coll_abort(sm_svc_coll_stream *st)
{
    if (!st)
        return;
    sm_rpc_stream_free(st->st);
    free(st);
}
