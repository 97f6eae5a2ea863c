/* Check suite for common/rpc/sm_svc_job: the Program conversion (every seed
 * program and every collective's attributes round-trip encode -> decode to
 * an equal program), each job RPC (SubmitJob, WaitJob, GetJob, CancelJob on
 * the Coordinator; RunJob, CancelJob, Exchange on the Worker) through a real
 * sm_rpc server on 127.0.0.1:0 with fake handlers, and malformed Program
 * messages answered INVALID_ARGUMENT without calling the handler. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sm_checksum.h"
#include "sm_rpc_msg.h"
#include "sm_rpc_proto.h"
#include "sm_shm.h"
#include "sm_svc_job.h"
#include "ir_testutil.h"
#include "suite_main.h"
#include "svc_testutil.h"

#define DL   5000 /* deadline of every call, ms */
#define N(a) (int)(sizeof(a) / sizeof((a)[0]))

/* ---- programs ----------------------------------------------------------------------- */

typedef struct {
    const char *name;
    const char *text;
} prog_case;

static const prog_case progs[] = {
    {"matmul_basic",
     "mesh i=4 j=2\n"
     "shard_map matmul_basic(a: f32[8,16] @ P('i','j'), b: f32[16,32] @ P('j', None)) -> "
     "P('i', None):\n"
     "    z = dot(a, b)\n"
     "    return psum(z, 'j')\n"},
    {"matmul_reduce_scatter",
     "mesh i=4 j=2\n"
     "shard_map matmul_reduce_scatter(a: f32[8,16] @ P('i','j'), b: f32[16,32] @ P('j', None)) "
     "-> P('i', 'j'):\n"
     "    z = dot(a, b)\n"
     "    return psum_scatter(z, 'j', scatter_dimension=1, tiled=True)\n"},
    {"f1", "mesh i=4 j=2\n"
           "shard_map f1(x: i32[12,12] @ P('i', None)) -> P('i', 'j'):\n"
           "    return x\n"},
    {"f3", "mesh i=4 j=2\n"
           "shard_map f3(x: i32[12,12] @ P('i', 'j')) -> P('i', None):\n"
           "    return psum(x, 'j')\n"},
    {"f4", "mesh i=4 j=2\n"
           "shard_map f4(x: i32[12,12] @ P('i', 'j')) -> P(None, 'j'):\n"
           "    return psum(x, 'i')\n"},
    {"f5", "mesh i=4 j=2\n"
           "shard_map f5(x: i32[12,12] @ P('i', 'j')) -> P(None, None):\n"
           "    return psum(x, ('i', 'j'))\n"},
    {"collective_matmul", PROG_COLLECTIVE_MATMUL},
    {"collective_matmul_contracting",
     "mesh X=2 Y=4\n"
     "shard_map cm(lhs: f32[8,16] @ P('X','Y'), rhs: f32[16,8] @ P(None,'Y')) -> "
     "P('X','Y'):\n" PROG_CM_CONTRACTING_LOOP
     "    return accum + lhs @ jax.lax.dynamic_slice_in_dim(rhs, (idx + axis_size - 1) % "
     "axis_size * chunk_size, chunk_size)\n"},
    {"slice_and_average", "mesh x=2 y=4\n"
                          "shard_map slice_and_average(x: i32[512] @ P(('x', 'y'))) -> P():\n"
                          "    return jax.lax.pmean(x[:4], axis_name=('x', 'y'))\n"},
    {"two_outputs_devices",
     "mesh i=2 j=2 devices=[3, 2, 1, 0]\n"
     "shard_map two(a: f64[4,4] @ P('i'), s: f32[] @ P()) -> (P('i'), P()):\n"
     "    t = a * 2 + s\n"
     "    m = pmax(sum(t), 'i')\n"
     "    return t, m\n"},
    {"collectives",
     "mesh i=4 j=2\n"
     "shard_map colls(x: f32[8,16] @ P('i', 'j')) -> (P('i', 'j'), P('i', 'j'), P('i', 'j'), "
     "P('i', 'j'), P(None, 'j'), P('j'), P('i', 'j'), P(), P(), P('i', 'j')):\n"
     "    a = all_gather(x, 'i', axis=1, tiled=True)\n"
     "    b = psum_scatter(x, 'j', scatter_dimension=1, tiled=True)\n"
     "    c = ppermute(x, ('i', 'j'), perm=[(0, 1), (1, 2), (2, 3), (3, 0), (5, 4)])\n"
     "    d = all_to_all(x, 'j', 1, 0, tiled=True)\n"
     "    e = pmean(x, 'i')\n"
     "    f = pmin(sum(x, axis=1, keepdims=True), 'i')\n"
     "    g = all_gather(x, 'j', axis=0, tiled=False)\n"
     "    h = pmax(axis_index(('i', 'j')), 'j') + axis_size('i')\n"
     "    k = full((2, 3), 1.5, dtype=f64) + astype(const(7, i32), f64)\n"
     "    m = einsum('ij,kj->ik', x, x) + mean(x)\n"
     "    return a, b, c, d, e, f, g, h, k, m\n"},
    {"shapes",
     "mesh i=2\n"
     "shard_map shapes(x: f32[4,6] @ P('i')) -> (P('i'), P('i'), P('i'), P('i'), P('i')):\n"
     "    a = reshape(transpose(x, (1, 0)), (3, 4))\n"
     "    b = pad(x, ((1, 1), (0, 2)))\n"
     "    c = roll(tile(x, (1, 2)), 3, 1)\n"
     "    d = concatenate((x, x), axis=1)\n"
     "    e = where(x > 0, x, -x) + arange(6, dtype=f32)\n"
     "    return a, b, c, d, e[:, 1:3]\n"},
    /* global-view (jit) programs: shardings, out_sharding, Auto axes, inlined calls */
    {"add_arrays", "mesh X=2 Y=4\n"
                   "jit add_arrays(x: i32[4,1] @ P('X', None), y: i32[1,8] @ P(None, 'Y')):\n"
                   "    ans = x + y\n"
                   "    return ans\n"},
    {"jit_einsum", "mesh X=2 Y=2 axis_types=(Explicit, Auto)\n"
                   "def add2(a, b):\n    return a + b\n"
                   "jit m(In: f32[8,64] @ P('X', 'Y'), W: f32[64,32] @ P('Y', None)) -> P('X'):\n"
                   "    o = jnp.einsum('bd,df->bf', In, W, out_sharding=P('X', None))\n"
                   "    z = auto_axes(add2, out_sharding=P(None, 'Y'))(o, o)\n"
                   "    return reshard(z, P('X', None))\n"},
    {"jit_shard_map", "mesh X=2 Y=4\n"
                      "shard_map g(a: f32[8,8] @ P('X', 'Y')) -> P('X', None):\n"
                      "    return psum(a, 'Y')\n"
                      "jit f(x: f32[8,8] @ P('X', None)):\n    return g(x) * 2\n"},
    /* unreduced specs on the wire: an out_sharding, in and out specs of an
     * inner shard_map, pcast */
    {"jit_unreduced",
     "mesh x=2 y=2\n"
     "shard_map f(a: f32[2,4] @ P('x', 'y'), b: f32[4,2] @ P('y', None)) -> P('x', None, "
     "unreduced={'y'}):\n"
     "    return jax.lax.pcast(jnp.einsum('ab,bc->ac', a, b), 'y', to='unreduced')\n"
     "shard_map ar(c: f32[2,2] @ P('x', None, unreduced={'y'})) -> P('x'):\n"
     "    return psum(c, 'y')\n"
     "jit g(a: f32[2,4] @ P('x', 'y'), b: f32[4,2] @ P('y', None)):\n"
     "    z = jnp.einsum('ab,bc->ac', a, b, out_sharding=P('x', None, unreduced={'y'}))\n"
     "    return reshard(f(a, b) + z, P('x', None)) + ar(z)\n"},
    /* a shard_map program's mesh with its axis types (Mesh.auto_axes) */
    {"shard_map_types", "mesh i=2 j=2 axis_types=(Auto, Explicit)\n"
                        "shard_map t(x: f32[4] @ P('i')) -> P('i'):\n"
                        "    return x * 2\n"},
    /* shard_map Manual over some axes (Program.manual_axes, IrOp.manual_axes) */
    {"partial_manual", "mesh i=4 j=2\n"
                       "shard_map g(x: f32[8,4] @ P('i')) -> P('i'), axis_names={'i'}:\n"
                       "    return psum(x, 'i')\n"
                       "shard_map h(x: f32[8,4] @ P(None, 'j')) -> P(None, 'j'), "
                       "axis_names={'j'}:\n"
                       "    return x + axis_index('j')\n"
                       "jit f(x: f32[8,4] @ P('i')):\n    return h(reshard(g(x), P()))\n"},
    {"partial_manual_nested", "mesh i=2 j=2\n"
                              "shard_map g(x: f32[2,8] @ P(None, 'j')) -> P(None, 'j'):\n"
                              "    return x * x\n"
                              "shard_map h(x: f32[4,8] @ P('i', None)) -> P('i', None), "
                              "axis_names={'i'}:\n"
                              "    return g(x)\n"
                              "jit f(x: f32[4,8] @ P('i', 'j')):\n    return h(x)\n"},
    {"partial_manual_entry", "mesh i=4 j=2\n"
                             "shard_map g(x: f32[8,4] @ P('i')) -> P('i'), axis_names={'i'}:\n"
                             "    return pmax(x, 'i')\n"},
    /* check_vma=False in a shard_map header: of a function called from jit
     * (IrAttrs.unchecked on its shard_map_out), of the entry (Program.unchecked) */
    {"unchecked_call", "mesh i=4\n"
                       "shard_map g(x: f32[8] @ P('i')) -> P(), check_vma=False:\n"
                       "    return x * 2\n"
                       "jit f(x: f32[8] @ P('i')):\n    return g(x)\n"},
    {"unchecked_entry", "mesh i=4 j=2\n"
                        "shard_map g(x: f32[8] @ P('i')) -> P(), axis_names={'i'}, "
                        "check_vma=False:\n"
                        "    return x * 2\n"},
    /* slice strides (IrAttrs.ints3) */
    {"strided_slices", "mesh i=4\n"
                       "shard_map s(x: f32[8,16] @ P('i')) -> P('i'):\n"
                       "    return x[::2, 1:14:3][None]\n"},
};

static sm_program *parse(const char *text, const char *file)
{
    char err[512];
    sm_program *p = NULL;
    sm_err e = sm_program_parse(text, file, &p, err, sizeof err);
    ck_assert_msg(e == SM_OK, "%s: parse: %s", file, err);
    return p;
}

START_TEST(test_program_roundtrip)
{
    const prog_case *c = &progs[_i];
    sm_program *p = parse(c->text, c->name);
    char err[512];
    uint8_t *buf = NULL;
    size_t len = 0;
    ck_assert_int_eq(sm_svc_program_encode(p, &buf, &len, err, sizeof err), SM_OK);
    sm_program *q = NULL;
    sm_err e = sm_svc_program_decode(buf, len, &q, err, sizeof err);
    ck_assert_msg(e == SM_OK, "%s: decode: %s", c->name, err);
    ck_assert_msg(sm_program_equal(p, q), "%s: decoded program differs", c->name);
    ck_assert_str_eq(q->filename, c->name);
    for (int k = 0; k < p->nops; k++) {
        ck_assert_int_eq(p->ops[k].line, q->ops[k].line);
        ck_assert_int_eq(p->ops[k].col, q->ops[k].col);
    }
    for (int v = 0; v < p->nvalues; v++)
        if (p->values[v].name)
            ck_assert_str_eq(p->values[v].name, q->values[v].name);
    ck_assert_int_eq(sm_program_verify(q, 0, err, sizeof err), SM_OK);
    free(buf);
    sm_program_free(q);
    sm_program_free(p);
}
END_TEST

START_TEST(test_program_decode_garbage)
{
    char err[256] = "";
    sm_program *q = (sm_program *)1;
    const uint8_t junk[] = {0xff, 0xff, 0xff, 0xff, 0x0f};
    ck_assert_int_eq(sm_svc_program_decode(junk, sizeof junk, &q, err, sizeof err), SM_EFORMAT);
    ck_assert_ptr_null(q);
    ck_assert_ptr_nonnull(strstr(err, "Program"));
}
END_TEST

/* ---- fake handlers --------------------------------------------------------------------- */

typedef struct {
    int calls;
    sm_program *prog; /* kept from submit / run_job */
    int nargs;
    sm_array_ref args[4];
    char arg_names[4][64];
    int nout_names;
    char out_names[4][64];
    int check_vma;
    uint32_t deadline_ms;
    sm_job_id id;
    uint32_t wait_ms;
    /* run_job */
    sm_job_id job_id;
    int ninputs, noutputs, npeers;
    sm_array_id inputs[4], outputs[4];
    sm_svc_peer peers[2];
    /* exchange */
    int nmsgs;
    int64_t bytes;
    sm_svc_coll_msg first;
    uint64_t checksum;
} rec;

static struct {
    rec r;
    sm_rpc_server *srv;
    sm_rpc_channel *ch;
} fx;

static sm_array_info out_info(int k)
{
    sm_array_info a;
    memset(&a, 0, sizeof a);
    a.id.v = 100 + (uint64_t)k;
    snprintf(a.name, sizeof a.name, "out%d", k);
    a.dtype = SM_F32;
    a.shape = (sm_shape){1, {8}};
    a.shard_shape = (sm_shape){1, {4}};
    a.mesh_id.v = 3;
    snprintf(a.mesh_name, sizeof a.mesh_name, "m");
    char err[128];
    ck_assert_int_eq(sm_mesh_init(&a.sharding.mesh, 1, (const char *[]){"i"}, (int64_t[]){2}, NULL,
                                  2, err, sizeof err),
                     SM_OK);
    ck_assert_int_eq(sm_pspec_parse("P('i')", &a.sharding.spec, err, sizeof err), SM_OK);
    snprintf(a.type, sizeof a.type, "f32[8@i]");
    a.state = SM_ARRAY_READY;
    a.bytes = 32;
    a.nshards = 2;
    a.shards = calloc(2, sizeof *a.shards);
    for (int d = 0; d < 2; d++) {
        a.shards[d].device = d;
        a.shards[d].worker_id.v = 1;
        snprintf(a.shards[d].worker_address, SM_ADDR_MAX, "127.0.0.1:9");
        a.shards[d].coords[0] = d;
        a.shards[d].index = (sm_index){1, {{4 * d, 4 * d + 4}}};
        a.shards[d].present = 1;
    }
    return a;
}

static void fill_info(sm_job_id id, sm_job_state st, sm_job_info *out)
{
    out->id = id;
    out->state = st;
    out->queued_us = 11;
    out->run_us = 22;
    if (st == SM_JOB_DONE) {
        out->noutputs = 2;
        out->outputs = calloc(2, sizeof *out->outputs);
        out->outputs[0] = out_info(0);
        out->outputs[1] = out_info(1);
    } else {
        snprintf(out->error, sizeof out->error, "job %llu was %s here", (unsigned long long)id.v,
                 sm_job_state_name(st));
    }
}

static sm_err f_submit(void *u, sm_svc_submit_req *req, sm_job_id *out, char *err, size_t errlen)
{
    rec *r = u;
    r->calls++;
    sm_program_free(r->prog);
    r->prog = req->program;
    r->nargs = req->nargs;
    for (int i = 0; i < req->nargs && i < 4; i++) {
        r->args[i] = req->args[i];
        snprintf(r->arg_names[i], 64, "%s", req->args[i].name);
        r->args[i].name = r->arg_names[i];
    }
    r->nout_names = req->nout_names;
    for (int i = 0; i < req->nout_names && i < 4; i++)
        snprintf(r->out_names[i], 64, "%s", req->out_names[i]);
    r->check_vma = req->check_vma;
    r->deadline_ms = req->deadline_ms;
    if (req->nargs == 2 && strcmp(req->args[1].name, "fail") == 0)
        return sm_fail(err, errlen, SM_ENOTFOUND, "array 'fail' does not exist");
    out->v = 42;
    return SM_OK;
}

/* Counts a call about job id in the rec u; returns the rec. */
static rec *note_call(void *u, sm_job_id id)
{
    rec *r = u;
    r->calls++;
    r->id = id;
    return r;
}

static sm_err f_wait(void *u, sm_job_id id, uint32_t wait_ms, sm_job_info *out, char *err,
                     size_t errlen)
{
    note_call(u, id)->wait_ms = wait_ms;
    if (id.v == 7)
        return sm_fail(err, errlen, SM_ENOTFOUND, "job 7 does not exist");
    fill_info(id, SM_JOB_DONE, out);
    return SM_OK;
}

/* GetJob answers that the job failed, CancelJob that it was cancelled. */
static sm_err f_get(void *u, sm_job_id id, sm_job_info *out, char *err, size_t errlen)
{
    fill_info(note_call(u, id)->id, SM_JOB_FAILED, out);
    return SM_OK;
}

static sm_err f_cancel(void *u, sm_job_id id, sm_job_info *out, char *err, size_t errlen)
{
    fill_info(note_call(u, id)->id, SM_JOB_CANCELLED, out);
    return SM_OK;
}

/* Records like f_submit; wait_ms 1 stands for a job still running when the
 * wait ends. */
static sm_err f_submit_wait(void *u, sm_svc_submit_req *req, sm_job_info *out, char *err,
                            size_t errlen)
{
    rec *r = u;
    sm_job_id id;
    r->wait_ms = req->wait_ms;
    sm_err e = f_submit(u, req, &id, err, errlen);
    if (e)
        return e;
    fill_info(id, req->wait_ms == 1 ? SM_JOB_RUNNING : SM_JOB_DONE, out);
    return SM_OK;
}

static const sm_svc_coord_job_ops coord_ops = {.submit = f_submit,
                                               .submit_wait = f_submit_wait,
                                               .wait = f_wait,
                                               .get = f_get,
                                               .cancel = f_cancel};
/* A coordinator from before SubmitJob.wait_ms. */
static const sm_svc_coord_job_ops coord_ops_old = {
    .submit = f_submit, .wait = f_wait, .get = f_get, .cancel = f_cancel};

static sm_err f_run_job(void *u, sm_svc_run_job_req *req, int64_t *output_bytes, char *err,
                        size_t errlen)
{
    rec *r = u;
    r->calls++;
    sm_program_free(r->prog);
    r->prog = req->program;
    r->job_id = req->job_id;
    r->ninputs = req->ninputs;
    r->noutputs = req->noutputs;
    r->npeers = req->npeers;
    memcpy(r->inputs, req->inputs, (size_t)req->ninputs * sizeof *req->inputs);
    memcpy(r->outputs, req->outputs, (size_t)req->noutputs * sizeof *req->outputs);
    memcpy(r->peers, req->peers, (size_t)req->npeers * sizeof *req->peers);
    r->deadline_ms = req->deadline_ms;
    *output_bytes = 1234;
    return SM_OK;
}

static sm_err f_cancel_job(void *u, sm_job_id id, char *err, size_t errlen)
{
    note_call(u, id);
    return id.v == 9 ? sm_fail(err, errlen, SM_ENOTFOUND, "no job 9 here") : SM_OK;
}

static sm_err f_exchange(void *u, sm_svc_coll_in *in, int64_t *bytes, char *err, size_t errlen)
{
    rec *r = u;
    r->calls++;
    sm_svc_coll_msg m;
    int end = 0;
    sm_checksum *cs = sm_checksum_create();
    for (;;) {
        sm_err e = sm_svc_coll_recv(in, &m, &end, err, errlen);
        if (e || end) {
            sm_checksum_free(cs);
            if (e)
                return e;
            break;
        }
        if (r->nmsgs++ == 0)
            r->first = m, r->first.data = NULL;
        sm_checksum_update(cs, m.data, m.len);
        r->bytes += (int64_t)m.len;
        if (m.last && sm_checksum_digest(cs) != m.checksum) {
            sm_checksum_free(cs);
            return sm_fail(err, errlen, SM_EDATALOSS, "checksum mismatch");
        }
    }
    *bytes = r->bytes;
    return SM_OK;
}

static const sm_svc_worker_job_ops worker_ops = {
    .run_job = f_run_job, .cancel_job = f_cancel_job, .exchange = f_exchange};

static void setup(void)
{
    char err[256];
    memset(&fx, 0, sizeof fx);
    sm_rpc_init();
    fx.srv = svt_server();
    ck_assert_int_eq(sm_svc_coord_jobs_serve(fx.srv, &coord_ops, &fx.r, err, sizeof err), SM_OK);
    ck_assert_int_eq(sm_svc_worker_jobs_serve(fx.srv, &worker_ops, &fx.r, err, sizeof err), SM_OK);
    fx.ch = svt_start(fx.srv);
}

static void teardown(void)
{
    sm_rpc_channel_free(fx.ch);
    sm_rpc_server_free(fx.srv);
    sm_program_free(fx.r.prog);
    sm_rpc_shutdown();
}

/* ---- coordinator round trips ----------------------------------------------------------- */

START_TEST(test_submit)
{
    sm_program *p = parse(progs[0].text, "mm.shmap");
    char err[512] = "";
    sm_array_ref args[2] = {{{5}, ""}, {{0}, "bee"}};
    const char *names[1] = {"c"};
    sm_svc_submit_req req = {p, 2, args, 1, names, _i == 0, 1500};
    sm_job_id id = {0};
    ck_assert_int_eq(sm_svc_job_submit(fx.ch, DL, &req, &id, err, sizeof err), SM_OK);
    ck_assert_uint_eq(id.v, 42);
    ck_assert_int_eq(fx.r.calls, 1);
    ck_assert(sm_program_equal(p, fx.r.prog));
    ck_assert_int_eq(fx.r.nargs, 2);
    ck_assert_uint_eq(fx.r.args[0].id.v, 5);
    ck_assert_str_eq(fx.r.args[0].name, "");
    ck_assert_uint_eq(fx.r.args[1].id.v, 0);
    ck_assert_str_eq(fx.r.args[1].name, "bee");
    ck_assert_int_eq(fx.r.nout_names, 1);
    ck_assert_str_eq(fx.r.out_names[0], "c");
    ck_assert_int_eq(fx.r.check_vma, _i == 0);
    ck_assert_uint_eq(fx.r.deadline_ms, 1500);
    /* a handler error comes back with its code and sentence */
    args[1].name = "fail";
    ck_assert_int_eq(sm_svc_job_submit(fx.ch, DL, &req, &id, err, sizeof err), SM_ENOTFOUND);
    ck_assert_ptr_nonnull(strstr(err, "array 'fail' does not exist"));
    /* argument count must match the parameters */
    req.nargs = 1;
    ck_assert_int_eq(sm_svc_job_submit(fx.ch, DL, &req, &id, err, sizeof err), SM_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "2 parameters"));
    ck_assert_int_eq(fx.r.calls, 2);
    sm_program_free(p);
}
END_TEST

static void info_same(const sm_array_info *a, const sm_array_info *b);

/* The job's outputs are the two fill_info gives a job that is done. */
static void outputs_same(const sm_job_info *info)
{
    ck_assert_int_eq(info->noutputs, 2);
    for (int k = 0; k < 2; k++) {
        sm_array_info want = out_info(k);
        info_same(&info->outputs[k], &want);
        sm_array_info_free(&want);
    }
}

/* SubmitJob with wait_ms: the reply carries the JobInfo (or the handler's
 * error and no job); a coordinator without submit_wait answers with the id
 * only, and the client reports the job QUEUED. */
START_TEST(test_submit_wait)
{
    sm_program *p = parse(progs[0].text, "mm.shmap");
    char err[512] = "";
    sm_array_ref args[2] = {{{5}, ""}, {{0}, "bee"}};
    const char *names[1] = {"c"};
    sm_svc_submit_req req = {p, 2, args, 1, names, 1, 1500, 300};
    sm_job_info info;
    ck_assert_int_eq(sm_svc_job_submit_wait(fx.ch, DL, &req, &info, err, sizeof err), SM_OK);
    ck_assert_int_eq(fx.r.calls, 1);
    ck_assert_uint_eq(fx.r.wait_ms, 300);
    ck_assert(sm_program_equal(p, fx.r.prog));
    ck_assert_str_eq(fx.r.args[1].name, "bee");
    ck_assert_str_eq(fx.r.out_names[0], "c");
    ck_assert_uint_eq(fx.r.deadline_ms, 1500);
    ck_assert_uint_eq(info.id.v, 42);
    ck_assert_int_eq(info.state, SM_JOB_DONE);
    ck_assert_int_eq(info.queued_us, 11);
    outputs_same(&info);
    sm_job_info_free(&info);
    /* not ended when the wait ran out */
    req.wait_ms = 1;
    ck_assert_int_eq(sm_svc_job_submit_wait(fx.ch, DL, &req, &info, err, sizeof err), SM_OK);
    ck_assert_uint_eq(info.id.v, 42);
    ck_assert_int_eq(info.state, SM_JOB_RUNNING);
    ck_assert_int_eq(info.noutputs, 0);
    sm_job_info_free(&info);
    /* a handler error comes back with its code and sentence, and no job */
    args[1].name = "fail";
    ck_assert_int_eq(sm_svc_job_submit_wait(fx.ch, DL, &req, &info, err, sizeof err), SM_ENOTFOUND);
    ck_assert_ptr_nonnull(strstr(err, "array 'fail' does not exist"));
    ck_assert_uint_eq(info.id.v, 0);
    ck_assert_int_eq(info.noutputs, 0);
    /* checked before the handler: the argument count */
    req.nargs = 1;
    ck_assert_int_eq(sm_svc_job_submit_wait(fx.ch, DL, &req, &info, err, sizeof err), SM_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "2 parameters"));
    ck_assert_int_eq(fx.r.calls, 3);

    /* an older coordinator: submit only, no JobInfo in the reply */
    sm_rpc_server *old = svt_server();
    rec r2;
    memset(&r2, 0, sizeof r2);
    ck_assert_int_eq(sm_svc_coord_jobs_serve(old, &coord_ops_old, &r2, err, sizeof err), SM_OK);
    sm_rpc_channel *ch = svt_start(old);
    req.nargs = 2;
    args[1].name = "bee";
    req.wait_ms = 300;
    ck_assert_int_eq(sm_svc_job_submit_wait(ch, DL, &req, &info, err, sizeof err), SM_OK);
    ck_assert_int_eq(r2.calls, 1);
    ck_assert_uint_eq(info.id.v, 42);
    ck_assert_int_eq(info.state, SM_JOB_QUEUED);
    ck_assert_int_eq(info.noutputs, 0);
    sm_job_info_free(&info);
    sm_rpc_channel_free(ch);
    sm_rpc_server_free(old);
    sm_program_free(r2.prog);
    sm_program_free(p);
}
END_TEST

static void info_same(const sm_array_info *a, const sm_array_info *b)
{
    ck_assert_uint_eq(a->id.v, b->id.v);
    ck_assert_str_eq(a->name, b->name);
    ck_assert_int_eq(a->dtype, b->dtype);
    ck_assert(sm_shape_equal(&a->shape, &b->shape));
    ck_assert_str_eq(a->type, b->type);
    ck_assert_int_eq(a->state, b->state);
    ck_assert_int_eq(a->nshards, b->nshards);
    for (int d = 0; d < a->nshards; d++) {
        ck_assert_int_eq(a->shards[d].device, b->shards[d].device);
        ck_assert_int_eq(a->shards[d].index.r[0].start, b->shards[d].index.r[0].start);
    }
}

START_TEST(test_wait_get_cancel)
{
    char err[512] = "";
    sm_job_info info;
    ck_assert_int_eq(sm_svc_job_wait(fx.ch, DL, (sm_job_id){42}, 250, &info, err, sizeof err),
                     SM_OK);
    ck_assert_uint_eq(fx.r.id.v, 42);
    ck_assert_uint_eq(fx.r.wait_ms, 250);
    ck_assert_uint_eq(info.id.v, 42);
    ck_assert_int_eq(info.state, SM_JOB_DONE);
    ck_assert_int_eq(info.queued_us, 11);
    ck_assert_int_eq(info.run_us, 22);
    outputs_same(&info);
    sm_job_info_free(&info);

    ck_assert_int_eq(sm_svc_job_get(fx.ch, DL, (sm_job_id){43}, &info, err, sizeof err), SM_OK);
    ck_assert_int_eq(info.state, SM_JOB_FAILED);
    ck_assert_str_eq(info.error, "job 43 was failed here");
    ck_assert_int_eq(info.noutputs, 0);
    sm_job_info_free(&info);

    ck_assert_int_eq(sm_svc_job_cancel(fx.ch, DL, (sm_job_id){44}, &info, err, sizeof err), SM_OK);
    ck_assert_int_eq(info.state, SM_JOB_CANCELLED);
    ck_assert_uint_eq(fx.r.id.v, 44);
    sm_job_info_free(&info);

    ck_assert_int_eq(sm_svc_job_wait(fx.ch, DL, (sm_job_id){7}, 0, &info, err, sizeof err),
                     SM_ENOTFOUND);
    ck_assert_ptr_nonnull(strstr(err, "job 7 does not exist"));
    ck_assert_int_eq(fx.r.calls, 4);
}
END_TEST

/* ---- worker round trips ------------------------------------------------------------------ */

START_TEST(test_run_job)
{
    sm_program *p = parse(progs[9].text, "two.shmap"); /* devices=[3,2,1,0] */
    char err[512] = "";
    sm_array_id in[2] = {{10}, {11}}, out[2] = {{20}, {21}};
    sm_svc_peer peers[2];
    memset(peers, 0, sizeof peers);
    snprintf(peers[0].address, SM_ADDR_MAX, "127.0.0.1:1000");
    peers[0].ndevices = 2;
    peers[0].devices[0] = 0, peers[0].devices[1] = 1;
    snprintf(peers[1].address, SM_ADDR_MAX, "127.0.0.1:1001");
    peers[1].ndevices = 2;
    peers[1].devices[0] = 2, peers[1].devices[1] = 3;
    sm_svc_run_job_req req = {{77}, p, 2, in, 2, out, 2, peers, 900};
    int64_t bytes = 0;
    ck_assert_int_eq(sm_svc_worker_run_job(fx.ch, DL, &req, &bytes, err, sizeof err), SM_OK);
    ck_assert_int_eq(bytes, 1234);
    ck_assert(sm_program_equal(p, fx.r.prog));
    ck_assert_int_eq(fx.r.prog->mesh.devices[0], 3);
    ck_assert_uint_eq(fx.r.job_id.v, 77);
    ck_assert_int_eq(fx.r.ninputs, 2);
    ck_assert_uint_eq(fx.r.inputs[1].v, 11);
    ck_assert_int_eq(fx.r.noutputs, 2);
    ck_assert_uint_eq(fx.r.outputs[0].v, 20);
    ck_assert_int_eq(fx.r.npeers, 2);
    ck_assert_str_eq(fx.r.peers[1].address, "127.0.0.1:1001");
    ck_assert_int_eq(fx.r.peers[1].ndevices, 2);
    ck_assert_int_eq(fx.r.peers[1].devices[1], 3);
    ck_assert_uint_eq(fx.r.deadline_ms, 900);
    /* a program without devices cannot run: the coordinator resolves them */
    sm_program *q = parse(progs[0].text, "mm.shmap");
    req.program = q;
    ck_assert_int_eq(sm_svc_worker_run_job(fx.ch, DL, &req, &bytes, err, sizeof err), SM_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "no devices"));
    ck_assert_int_eq(fx.r.calls, 1);
    sm_program_free(q);
    sm_program_free(p);
}
END_TEST

START_TEST(test_cancel_job_worker)
{
    char err[256] = "";
    ck_assert_int_eq(sm_svc_worker_cancel_job(fx.ch, DL, (sm_job_id){5}, err, sizeof err), SM_OK);
    ck_assert_uint_eq(fx.r.id.v, 5);
    ck_assert_int_eq(sm_svc_worker_cancel_job(fx.ch, DL, (sm_job_id){9}, err, sizeof err),
                     SM_ENOTFOUND);
    ck_assert_ptr_nonnull(strstr(err, "no job 9 here"));
}
END_TEST

START_TEST(test_exchange)
{
    char err[256] = "";
    sm_svc_coll_stream *st = NULL;
    ck_assert_int_eq(sm_svc_coll_open(fx.ch, DL, &st, err, sizeof err), SM_OK);
    enum { LEN = 3 << 20 };
    uint8_t *data = malloc(LEN);
    for (int i = 0; i < LEN; i++)
        data[i] = (uint8_t)(i * 7);
    size_t half = LEN / 2;
    sm_svc_coll_msg m = {{31}, 4, 2, -1, 0, data, half, LEN, 0, 0};
    ck_assert_int_eq(sm_svc_coll_send(st, &m, err, sizeof err), SM_OK);
    m.offset = (int64_t)half;
    m.data = data + half;
    m.len = LEN - half;
    m.last = 1;
    m.checksum = sm_checksum_oneshot(data, LEN);
    ck_assert_int_eq(sm_svc_coll_send(st, &m, err, sizeof err), SM_OK);
    int64_t bytes = 0;
    ck_assert_int_eq(sm_svc_coll_finish(st, &bytes, err, sizeof err), SM_OK);
    ck_assert_int_eq(bytes, LEN);
    ck_assert_int_eq(fx.r.nmsgs, 2);
    ck_assert_uint_eq(fx.r.first.job_id.v, 31);
    ck_assert_uint_eq(fx.r.first.seq, 4);
    ck_assert_int_eq(fx.r.first.src_device, 2);
    ck_assert_int_eq(fx.r.first.dst_device, -1);
    ck_assert_int_eq(fx.r.first.total_bytes, LEN);
    /* a bad checksum: DATA_LOSS from the handler */
    ck_assert_int_eq(sm_svc_coll_open(fx.ch, DL, &st, err, sizeof err), SM_OK);
    m.offset = 0, m.data = data, m.len = 100, m.checksum = 1;
    ck_assert_int_eq(sm_svc_coll_send(st, &m, err, sizeof err), SM_OK);
    ck_assert_int_eq(sm_svc_coll_finish(st, NULL, err, sizeof err), SM_EDATALOSS);
    /* a negative offset is rejected by the adapter */
    ck_assert_int_eq(sm_svc_coll_open(fx.ch, DL, &st, err, sizeof err), SM_OK);
    m.offset = -5;
    sm_svc_coll_send(st, &m, err, sizeof err);
    ck_assert_int_eq(sm_svc_coll_finish(st, NULL, err, sizeof err), SM_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "CollMsg.offset"));
    /* an abandoned stream */
    ck_assert_int_eq(sm_svc_coll_open(fx.ch, DL, &st, err, sizeof err), SM_OK);
    sm_svc_coll_abort(st);
    free(data);
}
END_TEST

/* ---- malformed programs -------------------------------------------------------------------- */

typedef struct {
    const char *name;
    void (*mutate)(Shmap__V1__Program *m);
    const char *want; /* in the error sentence */
} bad_case;

/* Mutators change values in place or replace top-level pointers and counts
 * of m, m->mesh, ops[0], ops[0]->attrs and ops[1]->attrs, which the test
 * restores before freeing the message. */
static void m_unknown_op(Shmap__V1__Program *m)
{
    m->ops[0]->op = "dotx";
}
static void m_operand_range(Shmap__V1__Program *m)
{
    m->ops[0]->operands[0] = 99;
}
static void m_operand_count(Shmap__V1__Program *m)
{
    m->ops[0]->n_operands = 1;
}
static void m_bad_perm(Shmap__V1__Program *m)
{
    m->ops[1]->attrs->n_perm = 3;
}
static void m_returns(Shmap__V1__Program *m)
{
    m->returns[0] = -1;
}
static void m_out_specs(Shmap__V1__Program *m)
{
    m->n_out_specs = 0;
}
static void m_mesh_ref(Shmap__V1__Program *m)
{
    m->mesh->n_axis_names = m->mesh->n_axis_sizes = 0;
    m->mesh->id = 3;
}
static void m_no_mesh(Shmap__V1__Program *m)
{
    m->mesh = NULL;
}
static void m_param_dtype(Shmap__V1__Program *m)
{
    m->params[0]->dtype = 99;
}
static void m_param_divide(Shmap__V1__Program *m)
{
    m->params[0]->global->dims[0] = 7;
}
static void m_type_error(Shmap__V1__Program *m)
{
    m->ops[0]->operands[1] = 0; /* dot(a, a): f32[2,8] x f32[2,8] */
}
static void m_axis_name(Shmap__V1__Program *m)
{
    m->ops[1]->attrs->axes[0][0] = 'q';
}
static void m_too_many_ints(Shmap__V1__Program *m)
{
    static int64_t many[40];
    m->ops[0]->attrs->ints = many;
    m->ops[0]->attrs->n_ints = 40;
}

static const bad_case bad_cases[] = {
    {"unknown op", m_unknown_op, ".ops[0].op is 'dotx', which is not a known op"},
    {"operand out of range", m_operand_range, ".ops[0]"},
    {"operand count", m_operand_count, "has 1 operands"},
    {"odd perm", m_bad_perm, ".ops[1].attrs.perm has 3 values"},
    {"returns out of range", m_returns, ".returns[0] is -1"},
    {"out_specs count", m_out_specs, "out_specs"},
    {"mesh reference", m_mesh_ref, ".mesh"},
    {"no mesh", m_no_mesh, ".mesh is missing"},
    {"param dtype", m_param_dtype, ".params[0].dtype"},
    {"param not divisible", m_param_divide, ".params[0] ('a')"},
    {"type error", m_type_error, ".ops[0] (dot)"},
    {"axis name", m_axis_name, ".ops[1] (ppermute)"},
    {"too many ints", m_too_many_ints, ".ops[0].attrs.ints has 40 values"},
};

static const char *bad_text = "mesh i=4 j=2\n"
                              "shard_map bad(a: f32[8,16] @ P('i','j'), b: f32[16,32] @ P('j')) "
                              "-> P('i', None):\n"
                              "    z = dot(a, b)\n"
                              "    y = ppermute(z, 'i', perm=[(0, 1), (1, 0)])\n"
                              "    return psum(y, 'j')\n";

START_TEST(test_malformed_program)
{
    const bad_case *c = &bad_cases[_i];
    sm_program *p = parse(bad_text, "bad.shmap");
    char err[512] = "";
    uint8_t *buf;
    size_t len;
    ck_assert_int_eq(sm_svc_program_encode(p, &buf, &len, err, sizeof err), SM_OK);
    for (int via = 0; via < 3; via++) {
        Shmap__V1__Program *m = shmap__v1__program__unpack(NULL, len, buf);
        ck_assert_ptr_nonnull(m);
        Shmap__V1__Program sm = *m;
        Shmap__V1__Mesh smesh = *m->mesh;
        Shmap__V1__IrOp so0 = *m->ops[0];
        Shmap__V1__IrAttrs sa0 = *m->ops[0]->attrs, sa1 = *m->ops[1]->attrs;
        c->mutate(m);
        sm_err e;
        if (via == 0) { /* the byte form */
            size_t n = protobuf_c_message_get_packed_size(&m->base);
            uint8_t *b2 = malloc(n + 1);
            protobuf_c_message_pack(&m->base, b2);
            sm_program *q = NULL;
            e = sm_svc_program_decode(b2, n, &q, err, sizeof err);
            ck_assert_ptr_null(q);
            free(b2);
        } else if (via == 1) { /* SubmitJob */
            Shmap__V1__SubmitJobRequest r;
            shmap__v1__submit_job_request__init(&r);
            Shmap__V1__ArrayRef a1, a2, *args[2] = {&a1, &a2};
            shmap__v1__array_ref__init(&a1);
            shmap__v1__array_ref__init(&a2);
            a1.id = 1, a2.id = 2;
            r.program = m;
            r.n_args = 2;
            r.args = args;
            ProtobufCMessage *rep = NULL;
            e = sm_rpc_unary(fx.ch, "/shmap.v1.Coordinator/SubmitJob", &r.base,
                             &shmap__v1__submit_job_reply__descriptor, &rep, DL, err, sizeof err);
            sm_rpc_msg_free(rep);
        } else { /* RunJob */
            Shmap__V1__RunJobRequest r;
            shmap__v1__run_job_request__init(&r);
            uint64_t ins[2] = {1, 2}, outs[1] = {3};
            r.program = m;
            r.n_input_arrays = 2;
            r.input_arrays = ins;
            r.n_output_arrays = 1;
            r.output_arrays = outs;
            ProtobufCMessage *rep = NULL;
            e = sm_rpc_unary(fx.ch, "/shmap.v1.Worker/RunJob", &r.base,
                             &shmap__v1__run_job_reply__descriptor, &rep, DL, err, sizeof err);
            sm_rpc_msg_free(rep);
        }
        ck_assert_msg(e == SM_EINVAL, "%s via %d: %s (%d)", c->name, via, err, e);
        ck_assert_msg(strstr(err, c->want), "%s via %d: '%s' lacks '%s'", c->name, via, err,
                      c->want);
        /* undo the pointer and count changes so free_unpacked frees what it
         * allocated */
        *m = sm;
        *m->mesh = smesh;
        *m->ops[0] = so0;
        *m->ops[0]->attrs = sa0;
        *m->ops[1]->attrs = sa1;
        shmap__v1__program__free_unpacked(m, NULL);
    }
    ck_assert_int_eq(fx.r.calls, 0);
    free(buf);
    sm_program_free(p);
}
END_TEST

START_TEST(test_unimplemented)
{
    sm_rpc_server *s = svt_server();
    char err[256];
    ck_assert_int_eq(sm_svc_coord_jobs_serve(s, NULL, NULL, err, sizeof err), SM_OK);
    ck_assert_int_eq(sm_svc_worker_jobs_serve(s, NULL, NULL, err, sizeof err), SM_OK);
    sm_rpc_channel *ch = svt_start(s);
    sm_job_info info;
    ck_assert_int_eq(sm_svc_job_get(ch, DL, (sm_job_id){1}, &info, err, sizeof err),
                     SM_EUNIMPLEMENTED);
    ck_assert_int_eq(sm_svc_worker_cancel_job(ch, DL, (sm_job_id){1}, err, sizeof err),
                     SM_EUNIMPLEMENTED);
    sm_rpc_channel_free(ch);
    sm_rpc_server_free(s);
}
END_TEST

/* The shared-memory proof holds only for the same non-zero cookie and the
 * same protocol: a worker of another segment layout (or one from before
 * the number was sent, 0) shares no domain with this build's. */
START_TEST(test_shm_probe_agree)
{
    sm_svc_shm_probe_reply made = {.cookie = 77, .protocol = SM_SHM_PROTOCOL}, seen = made;
    ck_assert(sm_svc_shm_probe_agree(&made, &seen));
    seen.cookie = 78;
    ck_assert(!sm_svc_shm_probe_agree(&made, &seen));
    seen = made;
    seen.protocol = 0;
    ck_assert(!sm_svc_shm_probe_agree(&made, &seen));
    seen.protocol = SM_SHM_PROTOCOL + 1;
    ck_assert(!sm_svc_shm_probe_agree(&made, &seen));
    made.cookie = seen.cookie = 0;
    seen.protocol = made.protocol;
    ck_assert(!sm_svc_shm_probe_agree(&made, &seen));
}
END_TEST

static Suite *job_suite(void)
{
    Suite *s =
        SUITE_CASE(suite_create("rpc_job"), "program", 0, NULL, {test_program_roundtrip, N(progs)},
                   {test_program_decode_garbage}, {test_shm_probe_agree});
    return SUITE_CASE(s, "rpc", 60, SUITE_CHECKED(setup, teardown), {test_submit, 2},
                      {test_submit_wait}, {test_wait_get_cancel}, {test_run_job},
                      {test_cancel_job_worker}, {test_exchange},
                      {test_malformed_program, N(bad_cases)}, {test_unimplemented});
}

int main(void)
{
    return suite_main(job_suite());
}
