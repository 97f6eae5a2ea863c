/* sm_svc_job: the Coordinator's job methods (SubmitJob, WaitJob, GetJob,
 * CancelJob): adapters and client calls, with the same conventions as
 * sm_svc_coord_serve.c and sm_svc_coord.c. The Program conversion is in
 * sm_svc_job_conv.c; the Worker's job methods in sm_svc_job_worker.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sm_svc_internal.h"
#include "sm_svc_job.h"

#define SM_SVC_MAX_OUTPUTS 1024

/* ---- JobInfo conversions ------------------------------------------------------------ */

static Shmap__V1__JobInfo *job_info_enc(sm_arena *a, const sm_job_info *in)
{
    Shmap__V1__JobInfo *p = SM_SVC_NEW(a, Shmap__V1__JobInfo, shmap__v1__job_info__init);
    if (!p)
        return NULL;
    p->job_id = in->id.v;
    p->state = (Shmap__V1__JobState)in->state;
    p->error = (char *)in->error;
    p->queued_us = in->queued_us;
    p->run_us = in->run_us;
    if (in->noutputs > 0 && in->outputs) {
        p->outputs = sm_arena_alloc(a, (size_t)in->noutputs * sizeof *p->outputs);
        if (!p->outputs)
            return NULL;
        for (int i = 0; i < in->noutputs; i++)
            if (!(p->outputs[p->n_outputs++] = sm_svc_array_info_enc(a, &in->outputs[i])))
                return NULL;
    }
    return p;
}

/* out->outputs is malloc'd (sm_job_info_free); nothing is left allocated on
 * failure. */
static sm_err job_info_dec(const ProtobufCMessage *m, void *o, char *err, size_t errlen)
{
    const Shmap__V1__JobInfo *p = (const Shmap__V1__JobInfo *)m;
    sm_job_info *out = o;
    char what[64];
    sm_err e;
    memset(out, 0, sizeof *out);
    if (p->state < SHMAP__V1__JOB_STATE__JOB_QUEUED ||
        p->state > SHMAP__V1__JOB_STATE__JOB_CANCELLED)
        return sm_fail(err, errlen, SM_EINVAL, "JobInfo.state is %d, which is not a known state",
                       (int)p->state);
    if ((e = sm_svc_str_dec(p->error, sizeof out->error, "JobInfo.error", out->error, err,
                            errlen)) ||
        (e = sm_svc_count_dec(p->n_outputs, SM_SVC_MAX_OUTPUTS, "JobInfo", "outputs", err, errlen)))
        return e;
    out->id.v = p->job_id;
    out->state = (sm_job_state)p->state;
    out->queued_us = p->queued_us;
    out->run_us = p->run_us;
    if (p->n_outputs) {
        out->outputs = calloc(p->n_outputs, sizeof *out->outputs);
        if (!out->outputs)
            return sm_fail(err, errlen, SM_ENOMEM, "cannot allocate %zu outputs", p->n_outputs);
    }
    for (size_t i = 0; i < p->n_outputs; i++) {
        snprintf(what, sizeof what, "JobInfo.outputs[%zu]", i);
        if ((e = sm_svc_array_info_dec(p->outputs[i], what, &out->outputs[i], err, errlen))) {
            out->noutputs = (int)i;
            sm_job_info_free(out);
            return e;
        }
    }
    out->noutputs = (int)p->n_outputs;
    return SM_OK;
}

/* ---- adapters ---------------------------------------------------------------------- */

typedef struct {
    const sm_svc_coord_job_ops *ops;
    void *user;
} job_ctx;

static void job_info_del(void *p)
{
    sm_job_info_free(p);
}

static sm_err submit(SM_SVC_UNARY_ARGS)
{
    const job_ctx *c = ctx;
    const Shmap__V1__SubmitJobRequest *r = (const Shmap__V1__SubmitJobRequest *)m;
    Shmap__V1__SubmitJobReply *rep = (Shmap__V1__SubmitJobReply *)rp;
    char what[64];
    sm_svc_submit_req req;
    memset(&req, 0, sizeof req);
    sm_job_id id = {0};
    sm_job_info *info = NULL;
    sm_err e;
    if ((e = sm_svc_count_dec(r->n_args, SM_SVC_MAX_OUTPUTS, "SubmitJobRequest", "args", err,
                              errlen)) ||
        (e = sm_svc_count_dec(r->n_out_names, SM_SVC_MAX_OUTPUTS, "SubmitJobRequest", "out_names",
                              err, errlen)))
        goto done;
    req.args = sm_arena_alloc(a, (r->n_args ? r->n_args : 1) * sizeof *req.args);
    req.out_names =
        sm_arena_alloc(a, (r->n_out_names ? r->n_out_names : 1) * sizeof *req.out_names);
    if (!req.args || !req.out_names) {
        e = sm_fail(err, errlen, SM_ENOMEM, "cannot allocate a request");
        goto done;
    }
    for (size_t i = 0; i < r->n_args; i++) {
        snprintf(what, sizeof what, "SubmitJobRequest.args[%zu]", i);
        if ((e = sm_svc_array_ref_dec(r->args[i], what, &req.args[i], err, errlen)))
            goto done;
    }
    for (size_t i = 0; i < r->n_out_names; i++) {
        snprintf(what, sizeof what, "SubmitJobRequest.out_names[%zu]", i);
        if ((e = sm_svc_str_dec(r->out_names[i], SM_NAME_MAX, what, NULL, err, errlen)))
            goto done;
        req.out_names[i] = r->out_names[i] ? r->out_names[i] : "";
    }
    if ((e = sm_svc_program_dec(r->program, "SubmitJobRequest.program", &req.program, err, errlen)))
        goto done;
    if (r->n_args != (size_t)req.program->nparams) {
        e = sm_fail(err, errlen, SM_EINVAL,
                    "the job has %zu arguments but program '%s' takes %d parameters", r->n_args,
                    req.program->name, req.program->nparams);
        goto done;
    }
    if (r->n_out_names > (size_t)req.program->nreturns) {
        e = sm_fail(err, errlen, SM_EINVAL,
                    "the job names %zu outputs but program '%s' returns %d values", r->n_out_names,
                    req.program->name, req.program->nreturns);
        goto done;
    }
    req.nargs = (int)r->n_args;
    req.nout_names = (int)r->n_out_names;
    req.check_vma = !r->no_check_vma;
    req.deadline_ms = r->deadline_ms;
    req.wait_ms = r->wait_ms;
    if (req.wait_ms && c->ops->submit_wait) {
        if (!(info = sm_svc_arena_obj(a, sizeof *info, job_info_del)))
            e = sm_fail(err, errlen, SM_ENOMEM, "cannot allocate a job info");
        else
            e = c->ops->submit_wait(c->user, &req, info, err, errlen);
        id = info ? info->id : id;
    } else {
        e = c->ops->submit(c->user, &req, &id, err, errlen);
    }
    req.program = NULL; /* the handler's now */
done:
    sm_program_free(req.program);
    rep->job_id = id.v;
    if (!e && info && !(rep->info = job_info_enc(a, info)))
        e = sm_fail(err, errlen, SM_ENOMEM, "out of memory describing job %llu",
                    (unsigned long long)id.v);
    return e;
}

/* WaitJob / GetJob / CancelJob: a JobRef in, a JobInfo out. */
typedef enum { REF_WAIT, REF_GET, REF_CANCEL } ref_kind;

static sm_err job_ref_call(SM_SVC_UNARY_ARGS, ref_kind kind)
{
    const job_ctx *c = ctx;
    const Shmap__V1__JobRef *r = (const Shmap__V1__JobRef *)m;
    sm_job_info *info = sm_svc_arena_obj(a, sizeof *info, job_info_del);
    sm_job_id id = {r->job_id};
    sm_err e;
    if (!info)
        e = sm_fail(err, errlen, SM_ENOMEM, "cannot allocate a job info");
    else if (kind == REF_WAIT)
        e = c->ops->wait(c->user, id, r->wait_ms, info, err, errlen);
    else if (kind == REF_GET)
        e = c->ops->get(c->user, id, info, err, errlen);
    else
        e = c->ops->cancel(c->user, id, info, err, errlen);
    if (e)
        return e;
    Shmap__V1__JobInfo *p = job_info_enc(a, info);
    if (!p)
        return sm_svc_enc_nomem(err, errlen);
    memcpy(rp, p, sizeof *p);
    return SM_OK;
}

static sm_err wait_job(SM_SVC_UNARY_ARGS)
{
    return job_ref_call(ctx, m, rp, a, err, errlen, REF_WAIT);
}

static sm_err get_job(SM_SVC_UNARY_ARGS)
{
    return job_ref_call(ctx, m, rp, a, err, errlen, REF_GET);
}

static sm_err cancel_job(SM_SVC_UNARY_ARGS)
{
    return job_ref_call(ctx, m, rp, a, err, errlen, REF_CANCEL);
}

sm_err sm_svc_coord_jobs_serve(sm_rpc_server *s, const sm_svc_coord_job_ops *ops, void *user,
                               char *err, size_t errlen)
{
    static const sm_svc_coord_job_ops none; /* ops NULL: every method UNIMPLEMENTED */
    job_ctx *ctx = sm_svc_keep_alloc(sizeof *ctx);
    if (!ctx)
        return sm_fail(err, errlen, SM_ENOMEM, "cannot allocate the job adapters");
    const sm_svc_coord_job_ops *o = ctx->ops = ops ? ops : &none;
    ctx->user = user;
    const sm_svc_row rows[] = {
#define ROW(name, req, rep, fn, op)                                                                \
    SM_SVC_UNARY_ROW(SM_SVC_COORD_PATH(name), req, rep, fn, o->op != NULL)
        ROW("SubmitJob", shmap__v1__submit_job_request, shmap__v1__submit_job_reply, submit,
            submit),
        ROW("WaitJob", shmap__v1__job_ref, shmap__v1__job_info, wait_job, wait),
        ROW("GetJob", shmap__v1__job_ref, shmap__v1__job_info, get_job, get),
        ROW("CancelJob", shmap__v1__job_ref, shmap__v1__job_info, cancel_job, cancel),
#undef ROW
    };
    return sm_svc_add_rows(s, ctx, rows, sizeof rows / sizeof rows[0], err, errlen);
}

/* ---- client calls ------------------------------------------------------------------ */

/* The SubmitJobRequest of req in a, or NULL when out of memory. */
static Shmap__V1__SubmitJobRequest *submit_enc(sm_arena *a, const sm_svc_submit_req *req)
{
    Shmap__V1__SubmitJobRequest *p = a ? sm_arena_alloc(a, sizeof *p) : NULL;
    if (!p)
        return NULL;
    shmap__v1__submit_job_request__init(p);
    if (!(p->program = sm_svc_program_enc(a, req->program)))
        return NULL;
    int na = req->nargs > 0 ? req->nargs : 0, nn = req->nout_names > 0 ? req->nout_names : 0;
    if (na && !(p->args = sm_arena_alloc(a, (size_t)na * sizeof *p->args)))
        return NULL;
    for (int i = 0; i < na; i++)
        if (!(p->args[p->n_args++] = sm_svc_array_ref_enc(a, req->args[i])))
            return NULL;
    if (nn && !(p->out_names = sm_arena_alloc(a, (size_t)nn * sizeof *p->out_names)))
        return NULL;
    for (int i = 0; i < nn; i++)
        p->out_names[p->n_out_names++] =
            (char *)(req->out_names && req->out_names[i] ? req->out_names[i] : "");
    p->no_check_vma = !req->check_vma;
    p->deadline_ms = req->deadline_ms;
    p->wait_ms = req->wait_ms;
    return p;
}

/* Sends SubmitJob; *reply is the caller's (sm_rpc_msg_free). */
static sm_err submit_call(sm_rpc_channel *ch, int deadline_ms, const sm_svc_submit_req *req,
                          ProtobufCMessage **reply, char *err, size_t errlen)
{
    sm_arena *a = sm_arena_create(0);
    Shmap__V1__SubmitJobRequest *p = submit_enc(a, req);
    if (!p) {
        sm_arena_free(a);
        return sm_fail(err, errlen, SM_ENOMEM, "out of memory encoding a job");
    }
    sm_err e =
        sm_rpc_unary(ch, SM_SVC_COORD_PATH("SubmitJob"), &p->base,
                     &shmap__v1__submit_job_reply__descriptor, reply, deadline_ms, err, errlen);
    sm_arena_free(a);
    return e;
}

sm_err sm_svc_job_submit(sm_rpc_channel *ch, int deadline_ms, const sm_svc_submit_req *req,
                         sm_job_id *out, char *err, size_t errlen)
{
    out->v = 0;
    ProtobufCMessage *m;
    sm_err e = submit_call(ch, deadline_ms, req, &m, err, errlen);
    if (e)
        return e;
    out->v = ((const Shmap__V1__SubmitJobReply *)m)->job_id;
    sm_rpc_msg_free(m);
    return SM_OK;
}

sm_err sm_svc_job_submit_wait(sm_rpc_channel *ch, int deadline_ms, const sm_svc_submit_req *req,
                              sm_job_info *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    int64_t dl = (int64_t)deadline_ms + req->wait_ms;
    ProtobufCMessage *m;
    sm_err e = submit_call(ch, dl > INT32_MAX ? INT32_MAX : (int)dl, req, &m, err, errlen);
    if (e)
        return e;
    const Shmap__V1__SubmitJobReply *r = (const Shmap__V1__SubmitJobReply *)m;
    if (!r->info) { /* a coordinator that does not wait */
        out->id.v = r->job_id;
        out->state = SM_JOB_QUEUED;
    } else if (!(e = job_info_dec(&r->info->base, out, err, errlen)) && out->id.v != r->job_id) {
        e = sm_fail(err, errlen, SM_EFORMAT, "SubmitJobReply describes job %llu but names job %llu",
                    (unsigned long long)out->id.v, (unsigned long long)r->job_id);
        sm_job_info_free(out);
        memset(out, 0, sizeof *out);
    }
    sm_rpc_msg_free(m);
    return e;
}

static sm_err job_ref_client(sm_rpc_channel *ch, const char *path, int deadline_ms, sm_job_id id,
                             uint32_t wait_ms, sm_job_info *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    Shmap__V1__JobRef req;
    shmap__v1__job_ref__init(&req);
    req.job_id = id.v;
    req.wait_ms = wait_ms;
    return sm_svc_unary(ch, path, deadline_ms, &req.base, &shmap__v1__job_info__descriptor,
                        job_info_dec, out, err, errlen);
}

sm_err sm_svc_job_wait(sm_rpc_channel *ch, int deadline_ms, sm_job_id id, uint32_t wait_ms,
                       sm_job_info *out, char *err, size_t errlen)
{
    int64_t dl = (int64_t)deadline_ms + wait_ms;
    return job_ref_client(ch, SM_SVC_COORD_PATH("WaitJob"), dl > INT32_MAX ? INT32_MAX : (int)dl,
                          id, wait_ms, out, err, errlen);
}

sm_err sm_svc_job_get(sm_rpc_channel *ch, int deadline_ms, sm_job_id id, sm_job_info *out,
                      char *err, size_t errlen)
{
    return job_ref_client(ch, SM_SVC_COORD_PATH("GetJob"), deadline_ms, id, 0, out, err, errlen);
}

sm_err sm_svc_job_cancel(sm_rpc_channel *ch, int deadline_ms, sm_job_id id, sm_job_info *out,
                         char *err, size_t errlen)
{
    return job_ref_client(ch, SM_SVC_COORD_PATH("CancelJob"), deadline_ms, id, 0, out, err, errlen);
}
