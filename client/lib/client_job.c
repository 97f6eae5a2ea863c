/* client_job: shard_map jobs (shmap_job.h) over the Coordinator's
 * SubmitJob (with or without waiting), WaitJob, GetJob and CancelJob. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "client_internal.h"
#include "shmap_job.h"
#include "sm_svc_job.h"
#include "sm_time.h"

/* The server blocks at most this long in one WaitJob; longer waits loop. */
#define CLIENT_WAIT_SLICE_MS 5000

/* Verifies a copy of p here: the wire form carries no position of the
 * `return`, so this is where an output's error gets its file:line:col. */
static sm_err job_verify_here(const sm_program *p, int check_vma, char *err, size_t errlen)
{
    uint8_t *buf = NULL;
    size_t len = 0;
    sm_program *copy = NULL;
    sm_err e = sm_svc_program_encode(p, &buf, &len, err, errlen);
    if (!e)
        e = sm_svc_program_decode(buf, len, &copy, err, errlen);
    free(buf);
    if (!e) {
        copy->ret_line = p->ret_line;
        copy->ret_col = p->ret_col;
        e = sm_program_verify(copy, check_vma != 0, err, errlen);
    }
    sm_program_free(copy);
    return e;
}

/* The coordinator verifies every program before anything runs, so a job
 * goes out unverified; when it comes back SM_EINVAL, a program error is
 * reported as the local verifier words it (with its position), any other
 * as the coordinator did. */
static sm_err job_refused(const sm_program *p, int check_vma, sm_err e, char *err, size_t errlen)
{
    char mine[1024];
    if (e == SM_EINVAL && job_verify_here(p, check_vma, mine, sizeof mine) != SM_OK)
        return sm_fail(err, errlen, SM_EINVAL, "%s", mine);
    return e;
}

/* Checks the arguments and fills req for the wire. */
static sm_err job_request(const sm_program *p, int nargs, const sm_array_ref *args,
                          const char *const *out_names, int check_vma, uint32_t deadline_ms,
                          sm_svc_submit_req *req, char *err, size_t errlen)
{
    if (!p)
        return sm_fail(err, errlen, SM_EINVAL, "a job needs a program");
    if (nargs < 0 || (nargs > 0 && !args))
        return sm_fail(err, errlen, SM_EINVAL, "a job with %d arguments needs their list", nargs);
    memset(req, 0, sizeof *req);
    req->program = (sm_program *)p; /* only read */
    req->nargs = nargs;
    req->args = (sm_array_ref *)args;
    req->nout_names = out_names ? p->nreturns : 0;
    req->out_names = (const char **)out_names;
    req->check_vma = check_vma != 0;
    req->deadline_ms = deadline_ms;
    return SM_OK;
}

sm_err sm_job_submit(sm_client *c, const sm_program *p, int nargs, const sm_array_ref *args,
                     const char *const *out_names, int check_vma, uint32_t deadline_ms,
                     sm_job_id *out, char *err, size_t errlen)
{
    sm_svc_submit_req req;
    out->v = 0;
    sm_err e = job_request(p, nargs, args, out_names, check_vma, deadline_ms, &req, err, errlen);
    if (!e && (e = sm_svc_job_submit(c->ch, c->timeout_ms, &req, out, err, errlen)))
        e = job_refused(p, check_vma, e, err, errlen);
    return e;
}

static int job_ended(sm_job_state s)
{
    return s == SM_JOB_DONE || s == SM_JOB_FAILED || s == SM_JOB_CANCELLED;
}

/* The next wait slice before end (INT64_MAX: none): 0 when end passed. */
static uint32_t wait_slice(int64_t end)
{
    int64_t left = end == INT64_MAX ? CLIENT_WAIT_SLICE_MS : end - sm_time_mono_ms();
    return left <= 0 ? 0 : left > CLIENT_WAIT_SLICE_MS ? CLIENT_WAIT_SLICE_MS : (uint32_t)left;
}

/* Waits (WaitJob slices) until the job ended or end passed; *out already
 * describes it as last seen. On an error out->id still names the job. */
static sm_err wait_until(sm_client *c, int64_t end, sm_job_info *out, char *err, size_t errlen)
{
    sm_job_id id = out->id;
    for (;;) {
        uint32_t slice = wait_slice(end);
        if (job_ended(out->state) || slice == 0)
            return SM_OK;
        sm_job_info_free(out);
        sm_err e = sm_svc_job_wait(c->ch, c->timeout_ms, id, slice, out, err, errlen);
        if (e)
            out->id = id;
        if (e || sm_time_mono_ms() >= end)
            return e;
    }
}

sm_err sm_job_wait(sm_client *c, sm_job_id id, int64_t timeout_ms, sm_job_info *out, char *err,
                   size_t errlen)
{
    int64_t end = timeout_ms < 0 ? INT64_MAX : sm_time_mono_ms() + timeout_ms;
    memset(out, 0, sizeof *out);
    sm_err e = sm_svc_job_wait(c->ch, c->timeout_ms, id, wait_slice(end), out, err, errlen);
    return e ? e : wait_until(c, end, out, err, errlen);
}

sm_err sm_job_run(sm_client *c, const sm_program *p, int nargs, const sm_array_ref *args,
                  const char *const *out_names, int check_vma, uint32_t deadline_ms,
                  int64_t timeout_ms, sm_job_info *out, char *err, size_t errlen)
{
    int64_t end = timeout_ms < 0 ? INT64_MAX : sm_time_mono_ms() + timeout_ms;
    sm_svc_submit_req req;
    memset(out, 0, sizeof *out);
    sm_err e = job_request(p, nargs, args, out_names, check_vma, deadline_ms, &req, err, errlen);
    if (e)
        return e;
    /* wait_ms 0 would mean "do not wait": ask for at least 1 ms. */
    uint32_t slice = wait_slice(end);
    req.wait_ms = slice ? slice : 1;
    e = sm_svc_job_submit_wait(c->ch, c->timeout_ms, &req, out, err, errlen);
    if (e)
        return job_refused(p, check_vma, e, err, errlen);
    return wait_until(c, end, out, err, errlen);
}

sm_err sm_job_status(sm_client *c, sm_job_id id, sm_job_info *out, char *err, size_t errlen)
{
    return sm_svc_job_get(c->ch, c->timeout_ms, id, out, err, errlen);
}

sm_err sm_job_cancel(sm_client *c, sm_job_id id, sm_job_info *out, char *err, size_t errlen)
{
    return sm_svc_job_cancel(c->ch, c->timeout_ms, id, out, err, errlen);
}
