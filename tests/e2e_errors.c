/* e2e_errors: every kind of bad request against a real cluster gets its
 * error code and a sentence, and leaves the service serving: unknown
 * arrays, bad specs, duplicate names, upload headers that disagree with the
 * array, chunks out of order, checksum mismatches, clients that vanish
 * mid-upload, reads of pending arrays, missing or wrong tokens, and a worker
 * killed with SIGKILL. Uploads are driven through sm_svc directly where the
 * library would never send such a stream. */
#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "harness_svc.h"
#include "shmap_job.h"
#include "sm_program.h"
#include "sm_rpc.h"
#include "sm_svc.h"
#include "suite_main.h"

static harness_cluster *g_h;

static void cluster_up(void)
{
    sm_rpc_init();
    g_h = harness_cluster_up(2, 4, "e2e_errors");
}

static void cluster_down(void)
{
    harness_cluster_down(&g_h);
    sm_rpc_shutdown();
}

/* The error text is one sentence naming something. */
static void check_sentence(const char *err)
{
    ck_assert_msg(strlen(err) > 10, "error text too short: '%s'", err);
    ck_assert_msg(!strchr(err, '\n'), "error text has a newline: '%s'", err);
}

START_TEST(unknown_arrays)
{
    sm_client *c = harness_client(g_h);
    sm_array_info info;
    sm_array *a = NULL;
    char err[512];
    sm_array_ref refs[2] = {sm_array_ref_parse("no-such-array"), sm_array_ref_parse("987654")};
    ck_assert_uint_eq(refs[1].id.v, 987654);
    for (int i = 0; i < 2; i++) {
        ck_assert_int_eq(sm_client_describe(c, refs[i], &info, err, sizeof err), SM_ENOTFOUND);
        check_sentence(err);
        ck_assert_int_eq(sm_client_get(c, refs[i], &a, err, sizeof err), SM_ENOTFOUND);
        ck_assert_int_eq(sm_client_get_shard(c, refs[i], 0, &a, err, sizeof err), SM_ENOTFOUND);
        ck_assert_int_eq(sm_client_delete(c, refs[i], err, sizeof err), SM_ENOTFOUND);
        sm_mesh mesh;
        sm_sharding_ref sh = harness_sharding(&mesh, "x=8", NULL, 0, "P()");
        ck_assert_int_eq(sm_client_reshard(c, refs[i], &sh, NULL, NULL, err, sizeof err),
                         SM_ENOTFOUND);
    }
    sm_mesh_info mi;
    ck_assert_int_eq(sm_client_mesh_get(c, (sm_mesh_id){0}, "no-such-mesh", &mi, err, sizeof err),
                     SM_ENOTFOUND);
    sm_client_close(c);
}
END_TEST

/* Specs the service must refuse, on (6,16) over x=4,y=2. */
static const struct {
    const char *spec;
    int rank;
} bad_specs[] = {
    {"P('x')", 2},             /* 6 is not divisible by 4 */
    {"P(('x', 'y'))", 2},      /* nor by 8 */
    {"P('z')", 2},             /* unknown axis */
    {"P('x', 'x')", 2},        /* axis used twice */
    {"P(None, None, 'y')", 2}, /* longer than the rank */
    {"P('y')", 0},             /* a scalar needs P() */
};

START_TEST(bad_specs_refused)
{
    sm_client *c = harness_client(g_h);
    sm_mesh mesh;
    sm_sharding_ref sh = harness_sharding(&mesh, "x=4,y=2", NULL, 0, bad_specs[_i].spec);
    sm_shape s = bad_specs[_i].rank ? HARNESS_SHAPE(6, 16) : harness_shape_of(0, NULL);
    sm_array *x = harness_array_iota(SM_F32, &s, 1);
    char err[512];
    sm_err e = sm_client_put(c, SM_F32, &s, x->data, &sh, NULL, NULL, err, sizeof err);
    ck_assert_msg(e == SM_EINVAL, "%s: got %s (%s)", bad_specs[_i].spec, sm_err_name(e), err);
    check_sentence(err);
    sm_array_free(x);
    sm_client_close(c);
}
END_TEST

START_TEST(duplicate_name)
{
    sm_client *c = harness_client(g_h);
    sm_mesh mesh;
    sm_sharding_ref sh = harness_sharding(&mesh, "x=8", NULL, 0, "P('x')");
    sm_shape s = HARNESS_SHAPE(8);
    sm_array *x = harness_array_iota(SM_I32, &s, 1);
    char err[512];
    ck_assert_int_eq(sm_client_put(c, SM_I32, &s, x->data, &sh, "dup", NULL, err, sizeof err),
                     SM_OK);
    ck_assert_int_eq(sm_client_put(c, SM_I32, &s, x->data, &sh, "dup", NULL, err, sizeof err),
                     SM_EEXIST);
    check_sentence(err);
    ck_assert_int_eq(sm_client_delete(c, sm_array_ref_parse("dup"), err, sizeof err), SM_OK);
    /* names are text: valid UTF-8, no control characters (a C caller's
     * bytes would otherwise reach every client, and logs) */
    ck_assert_int_eq(
        sm_client_put(c, SM_I32, &s, x->data, &sh, "caf\xc3\xa9", NULL, err, sizeof err), SM_OK);
    ck_assert_int_eq(sm_client_delete(c, sm_array_ref_parse("caf\xc3\xa9"), err, sizeof err),
                     SM_OK);
    ck_assert_int_eq(sm_client_put(c, SM_I32, &s, x->data, &sh, "bad\xff", NULL, err, sizeof err),
                     SM_EINVAL);
    ck_assert_msg(strstr(err, "array name is not valid UTF-8 (byte 0xff at 3)"), "%s", err);
    ck_assert_int_eq(
        sm_client_put(c, SM_I32, &s, x->data, &sh, "two\nlines", NULL, err, sizeof err), SM_EINVAL);
    ck_assert_msg(strstr(err, "array name has a control character (0x0a at byte 3)"), "%s", err);
    sm_array_free(x);
    sm_client_close(c);
}
END_TEST

/* ---- raw upload streams ------------------------------------------------------ */

typedef enum {
    RAW_OK,
    RAW_DTYPE,
    RAW_SHAPE,
    RAW_BYTES,
    RAW_ORDER,
    RAW_CHECKSUM,
    RAW_ABORT
} raw_kind;

/* Creates an f32 array of shape s over sh through sm_svc directly (no
 * library checks), which must give 8 upload targets. */
static void raw_create(sm_rpc_channel *ch, const sm_shape *s, const sm_sharding_ref *sh,
                       sm_put_kind kind, sm_svc_create_array_reply *r)
{
    sm_svc_create_array_req q = {
        .dtype = SM_F32, .has_shape = 1, .shape = *s, .sharding = *sh, .kind = kind};
    char err[512];
    memset(r, 0, sizeof *r);
    ck_assert_msg(sm_svc_coord_create_array(ch, 10000, &q, r, err, sizeof err) == SM_OK, "%s", err);
    ck_assert_int_eq(r->ntargets, 8);
}

/* Sends target t of a CreateArray reply (8-byte f32 rows of x) with one
 * defect; returns the first error of the stream. */
static sm_err raw_upload(sm_rpc_channel *ch, const sm_svc_create_array_reply *r, int t,
                         const sm_array *x, raw_kind kind, char *err, size_t errlen)
{
    const sm_svc_upload_target *tg = &r->targets[t];
    sm_shape bs = sm_index_shape(&tg->global_index);
    int64_t off[SM_MAX_RANK], zero[SM_MAX_RANK] = {0}, nbytes = 0;
    char buf[4096];

    for (int d = 0; d < bs.rank; d++)
        off[d] = tg->global_index.r[d].start;
    ck_assert_int_eq(sm_shape_nbytes(&bs, SM_F32, &nbytes, err, errlen), SM_OK);
    ck_assert_int_le(nbytes, (int64_t)sizeof buf);
    ck_assert_int_eq(
        sm_block_copy(buf, &bs, zero, x->data, &x->shape, off, bs.dims, 4, err, errlen), SM_OK);
    static const harness_up_mode mode[] = {
        [RAW_OK] = HARNESS_UP_OK,           [RAW_DTYPE] = HARNESS_UP_OK,
        [RAW_SHAPE] = HARNESS_UP_OK,        [RAW_BYTES] = HARNESS_UP_WRONG_TOTAL,
        [RAW_ORDER] = HARNESS_UP_BACKWARDS, [RAW_CHECKSUM] = HARNESS_UP_BAD_SUM,
        [RAW_ABORT] = HARNESS_UP_ABORT};
    harness_upload_req u = {.array = r->array.id,
                            .devices = tg->devices,
                            .ndevices = tg->ndevices,
                            .dtype = kind == RAW_DTYPE ? SM_I32 : SM_F32,
                            .shape = bs,
                            .data = buf,
                            .nbytes = nbytes,
                            .chunk = (size_t)(nbytes / 2),
                            .mode = mode[kind]};
    if (kind == RAW_SHAPE)
        u.shape.dims[0] += 1;
    return harness_upload(ch, &u, NULL, err, errlen);
}

START_TEST(bad_uploads_then_good)
{
    static const struct {
        raw_kind kind;
        sm_err want;
    } cases[] = {{RAW_DTYPE, SM_EINVAL}, {RAW_SHAPE, SM_EINVAL},       {RAW_BYTES, SM_EINVAL},
                 {RAW_ORDER, SM_EINVAL}, {RAW_CHECKSUM, SM_EDATALOSS}, {RAW_ABORT, SM_ECANCELLED}};
    sm_client *c = harness_client(g_h);
    sm_rpc_channel *ch = NULL;
    sm_mesh mesh;
    sm_sharding_ref sh = harness_sharding(&mesh, "x=4,y=2", NULL, 0, "P('x', 'y')");
    sm_shape s = HARNESS_SHAPE(8, 16);
    sm_array *x = harness_array_iota(SM_F32, &s, 77), *back = NULL;
    sm_svc_create_array_reply r;
    char err[512];

    ch = harness_channel(g_h, NULL);
    raw_create(ch, &s, &sh, SM_PUT_WHOLE, &r);
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        err[0] = 0;
        sm_err e = raw_upload(ch, &r, 0, x, cases[k].kind, err, sizeof err);
        ck_assert_msg(e == cases[k].want, "case %zu: got %s (%s)", k, sm_err_name(e), err);
        if (cases[k].kind != RAW_ABORT)
            check_sentence(err);
    }
    /* Every failed attempt left the array pending and reading it is refused. */
    ck_assert_int_eq(harness_wait_state(c, harness_id_ref(r.array.id), SM_ARRAY_PENDING, 100),
                     SM_ARRAY_PENDING);
    ck_assert_int_eq(sm_client_get(c, harness_id_ref(r.array.id), &back, err, sizeof err),
                     SM_EPRECONDITION);
    sm_svc_download_req dq = {.array = harness_id_ref(r.array.id), .device = 0};
    sm_svc_download_stream *ds = NULL;
    sm_svc_chunk chunk;
    int end = 0;
    sm_err e = sm_svc_download_open(ch, 0, &dq, 10000, &ds, err, sizeof err);
    if (e == SM_OK)
        e = sm_svc_download_recv(ds, &chunk, &end, err, sizeof err);
    sm_svc_download_free(ds);
    ck_assert_msg(e == SM_EPRECONDITION, "download of a pending array: %s (%s)", sm_err_name(e),
                  err);
    /* The same targets, sent properly, complete it. The aborted upload of
     * target 0 holds it until the coordinator has seen the cancel, which a
     * loaded machine may take a moment to do. */
    for (int t = 0; t < r.ntargets; t++) {
        for (int tries = 0; tries < 100; tries++) {
            e = raw_upload(ch, &r, t, x, RAW_OK, err, sizeof err);
            if (!(e == SM_EPRECONDITION && strstr(err, "being uploaded")))
                break;
            usleep(50 * 1000);
        }
        ck_assert_msg(e == SM_OK, "target %d: %s", t, err);
    }
    ck_assert_int_eq(harness_wait_state(c, harness_id_ref(r.array.id), SM_ARRAY_READY, 5000),
                     SM_ARRAY_READY);
    harness_assert_get(c, harness_id_ref(r.array.id), x);
    /* A filled target cannot be sent again. */
    ck_assert_int_ne(raw_upload(ch, &r, 0, x, RAW_OK, err, sizeof err), SM_OK);
    ck_assert_int_eq(sm_client_delete(c, harness_id_ref(r.array.id), err, sizeof err), SM_OK);
    sm_svc_create_array_reply_free(&r);
    sm_rpc_channel_free(ch);
    sm_array_free(back);
    sm_array_free(x);
    sm_client_close(c);
}
END_TEST

/* A put-shards shard of the wrong shape, sent around the library's own
 * check, is refused by the service. */
START_TEST(put_shards_wrong_shape_server_side)
{
    sm_client *c = harness_client(g_h);
    sm_rpc_channel *ch = NULL;
    sm_mesh mesh;
    sm_sharding_ref sh = harness_sharding(&mesh, "x=8", NULL, 0, "P('x')");
    sm_svc_create_array_reply r;
    sm_shape s = HARNESS_SHAPE(16, 4);
    sm_array *x = harness_array_iota(SM_F32, &s, 5);
    char err[512];

    ch = harness_channel(g_h, NULL);
    raw_create(ch, &s, &sh, SM_PUT_SHARDS, &r);
    ck_assert_int_eq(raw_upload(ch, &r, 2, x, RAW_SHAPE, err, sizeof err), SM_EINVAL);
    check_sentence(err);
    sm_client_delete(c, harness_id_ref(r.array.id), err, sizeof err);
    sm_svc_create_array_reply_free(&r);
    sm_rpc_channel_free(ch);
    sm_array_free(x);
    sm_client_close(c);
}
END_TEST

/* A worker of an older program level (one from before levels says 0) is
 * refused at registration with a sentence saying what to upgrade, and
 * nothing is registered; this build's level passes that check. */
START_TEST(old_worker_refused)
{
    harness_cluster own = *g_h; /* with the cluster's credential, as a worker has it */
    harness_use_cluster_credential(&own);
    sm_rpc_channel *ch = harness_channel(&own, NULL);
    sm_svc_register_req req = {
        .address = "127.0.0.1:9", .ndevices = 2, .process_index = -1, .host = "old-box"};
    sm_svc_register_reply rep;
    char err[1024];
    sm_err e = sm_svc_coord_register(ch, 10000, &req, &rep, err, sizeof err);
    ck_assert_msg(e == SM_EPRECONDITION, "register gave %s: %s", sm_err_name(e), err);
    ck_assert_msg(strstr(err, "FAILED_PRECONDITION") &&
                      strstr(err, "this worker (shmap-worker older) runs programs of level 0") &&
                      strstr(err, "upgrade the workers before the coordinator"),
                  "%s", err);
    req.program_level = SM_PROGRAM_LEVEL - 1;
    req.version = "0.0.9";
    e = sm_svc_coord_register(ch, 10000, &req, &rep, err, sizeof err);
    ck_assert_msg(e == SM_EPRECONDITION && strstr(err, "shmap-worker 0.0.9"), "%s", err);
    sm_client *c = harness_client(g_h);
    int n = 0;
    sm_worker_info *w = NULL;
    ck_assert_int_eq(sm_client_devices(c, &w, &n, err, sizeof err), SM_OK);
    for (int k = 0; k < n; k++)
        ck_assert_msg(strcmp(w[k].address, "127.0.0.1:9") != 0, "the old worker was registered");
    free(w);
    sm_client_close(c);
    sm_rpc_channel_free(ch);
}
END_TEST

/* After all of the above the cluster still serves a normal round trip. */
START_TEST(still_serving)
{
    sm_client *c = harness_client(g_h);
    sm_mesh mesh;
    sm_sharding_ref sh = harness_sharding(&mesh, "x=4,y=2", NULL, 0, "P('y', 'x')");
    sm_shape s = HARNESS_SHAPE(4, 8);
    sm_array *x = harness_array_iota(SM_F32, &s, 9);
    sm_array_info info;
    char err[512];
    ck_assert_int_eq(sm_client_put(c, SM_F32, &s, x->data, &sh, NULL, &info, err, sizeof err),
                     SM_OK);
    harness_assert_get_delete(c, &info, x);
    sm_array_free(x);
    sm_client_close(c);
}
END_TEST

START_TEST(tokens)
{
    harness_opts o = {.nworkers = 1, .devices_per_worker = 2, .token = "s3cret"};
    harness_cluster *h = NULL;
    sm_client *c = NULL;
    sm_client_opts co = {0};
    char err[512];
    ck_assert_msg(harness_cluster_start(&o, &h, err, sizeof err) == SM_OK, "start: %s", err);
    ck_assert_int_eq(sm_client_connect(h->target, NULL, &c, err, sizeof err), SM_EAUTH);
    check_sentence(err);
    co.token = "wrong";
    ck_assert_int_eq(sm_client_connect(h->target, &co, &c, err, sizeof err), SM_EAUTH);
    co.token = "s3cret";
    ck_assert_int_eq(sm_client_connect(h->target, &co, &c, err, sizeof err), SM_OK);
    int n = 0;
    sm_worker_info *w = harness_workers(c, &n);
    ck_assert_int_eq(n, 1);
    free(w);
    sm_client_close(c);
    /* shmapctl gets the token from the environment; without it, exit 1. */
    harness_run run;
    const char *args[] = {"ls", NULL};
    ck_assert_int_eq(harness_shmapctl(h, &run, args), 0);
    ck_assert_int_eq(run.code, 0);
    harness_run_free(&run);
    const char *args2[] = {"ls", "--token", "nope", NULL};
    ck_assert_int_eq(harness_shmapctl(h, &run, args2), 0);
    ck_assert_int_eq(run.code, 1);
    ck_assert_ptr_nonnull(strstr(run.err, "shmapctl: "));
    harness_run_free(&run);
    harness_cluster_stop(h);
}
END_TEST

START_TEST(worker_killed)
{
    harness_opts o = {.nworkers = 2, .devices_per_worker = 2};
    harness_cluster *h = NULL;
    sm_client *c = NULL;
    char err[512];
    ck_assert_msg(harness_cluster_start(&o, &h, err, sizeof err) == SM_OK, "start: %s", err);
    c = harness_client(h);
    sm_mesh mesh;
    sm_sharding_ref sh = harness_sharding(&mesh, "x=4", NULL, 0, "P('x')");
    sm_shape s = HARNESS_SHAPE(8, 4);
    sm_array *x = harness_array_iota(SM_F32, &s, 3), *back = NULL;
    sm_array_info info, after;
    ck_assert_int_eq(sm_client_put(c, SM_F32, &s, x->data, &sh, "doomed", &info, err, sizeof err),
                     SM_OK);
    pid_t pids[4];
    int np = harness_worker_pids(h, pids, 4);
    ck_assert_int_eq(np, 2);
    ck_assert_int_eq(kill(pids[0], SIGKILL), 0);
    ck_assert_int_eq(harness_wait_state(c, harness_id_ref(info.id), SM_ARRAY_LOST, 10000),
                     SM_ARRAY_LOST);
    ck_assert_int_eq(sm_client_describe(c, harness_id_ref(info.id), &after, err, sizeof err),
                     SM_OK);
    check_sentence(after.error);
    int missing = 0;
    for (int i = 0; i < after.nshards; i++)
        missing += !after.shards[i].present;
    ck_assert_int_eq(missing, 2);
    sm_array_info_free(&after);
    ck_assert_int_ne(sm_client_get(c, harness_id_ref(info.id), &back, err, sizeof err), SM_OK);
    check_sentence(err);
    /* The coordinator still serves: one worker alive, and its devices take
     * a new array. */
    ck_assert_int_eq(harness_wait_workers(c, 1, 10000, err, sizeof err), SM_OK);
    int n = 0;
    int32_t alive[2];
    sm_worker_info *w = harness_workers(c, &n);
    for (int i = 0; i < n; i++)
        if (w[i].alive)
            memcpy(alive, w[i].devices, sizeof alive);
    free(w);
    sm_mesh m2;
    sm_sharding_ref sh2 = harness_sharding(&m2, "x=2", alive, 2, "P('x')");
    sm_array_info fresh;
    ck_assert_int_eq(sm_client_put(c, SM_F32, &s, x->data, &sh2, NULL, &fresh, err, sizeof err),
                     SM_OK);
    harness_assert_get(c, harness_id_ref(fresh.id), x);
    ck_assert_int_eq(sm_client_delete(c, harness_id_ref(info.id), err, sizeof err), SM_OK);
    sm_array_info_free(&fresh);
    sm_array_info_free(&info);
    sm_array_free(back);
    sm_array_free(x);
    sm_client_close(c);
    harness_cluster_stop(h);
}
END_TEST

/* Workers with a 16 MiB memory limit (SHMAP_MEMORY_LIMIT_MB): an upload
 * and a job output that need more fail RESOURCE_EXHAUSTED with a sentence
 * naming the limit, leave nothing behind and no worker down; what fits
 * still works. */
START_TEST(memory_limit)
{
    harness_cluster *h = harness_cluster_limited(2, 2, 16);
    char err[1024];
    sm_err e;
    sm_client *c = harness_client(h);
    sm_mesh mesh;
    sm_sharding_ref sh = harness_sharding(&mesh, "x=4", NULL, 0, "P('x')");

    /* 64 MiB over 4 devices: 32 MiB on each worker */
    sm_shape big = HARNESS_SHAPE(4096, 4096);
    sm_array *x = harness_array_iota(SM_F32, &big, 5);
    sm_array_info info;
    e = sm_client_put(c, SM_F32, &big, x->data, &sh, "too_big", &info, err, sizeof err);
    ck_assert_msg(e == SM_ERESOURCE, "%d: %s", e, err);
    ck_assert_msg(strstr(err, "limit of 16 MiB"), "%s", err);
    check_sentence(err);
    sm_array_info *all = NULL;
    int n = -1;
    ck_assert_int_eq(sm_client_list(c, &all, &n, err, sizeof err), SM_OK);
    ck_assert_int_eq(n, 0);
    sm_array_info_list_free(all, n);
    sm_array_free(x);

    /* what fits: 8 MiB, 1 MiB per device */
    sm_shape fits = HARNESS_SHAPE(512, 4096);
    x = harness_array_iota(SM_F32, &fits, 6);
    ck_assert_msg(sm_client_put(c, SM_F32, &fits, x->data, &sh, "fits", &info, err, sizeof err) ==
                      SM_OK,
                  "%s", err);
    harness_assert_get(c, harness_id_ref(info.id), x);

    /* a job whose output block is 64 MiB per device */
    sm_program *p = harness_program("mesh x=4\n"
                                    "shard_map outer(a: f32[16384,1] @ P('x'), b: f32[1,4096] "
                                    "@ P(None, None)) -> P('x'):\n"
                                    "    return dot(a, b)\n",
                                    "outer.shmap");
    sm_shape sa = HARNESS_SHAPE(16384, 1), sb = HARNESS_SHAPE(1, 4096);
    sm_array *a = harness_array_iota(SM_F32, &sa, 7), *b = harness_array_iota(SM_F32, &sb, 8);
    sm_mesh m2;
    sm_sharding_ref shb = harness_sharding(&m2, "x=4", NULL, 0, "P(None, None)");
    sm_array_info ia, ib;
    ck_assert_int_eq(sm_client_put(c, SM_F32, &sa, a->data, &sh, NULL, &ia, err, sizeof err),
                     SM_OK);
    ck_assert_int_eq(sm_client_put(c, SM_F32, &sb, b->data, &shb, NULL, &ib, err, sizeof err),
                     SM_OK);
    sm_array_ref args[2] = {harness_id_ref(ia.id), harness_id_ref(ib.id)};
    sm_job_info ji;
    e = sm_job_run(c, p, 2, args, NULL, 1, 0, 60000, &ji, err, sizeof err);
    ck_assert_msg(e == SM_OK, "%s", err);
    ck_assert_msg(ji.state == SM_JOB_FAILED, "%s", sm_job_state_name(ji.state));
    ck_assert_msg(strstr(ji.error, "limit of 16 MiB"), "%s", ji.error);
    check_sentence(ji.error);

    /* a job whose output fits (4 MiB per device, 8 per worker) but not with
     * the buffer its all_gather stages the blocks in (as much again) */
    sm_program *pg = harness_program("mesh x=4\n"
                                     "shard_map gather(g: f32[256,4096] @ P(None, 'x')) -> "
                                     "P(None, None):\n"
                                     "    return all_gather(g, 'x', axis=1, tiled=True)\n",
                                     "gather.shmap");
    sm_shape sg = HARNESS_SHAPE(256, 4096);
    sm_array *g = harness_array_iota(SM_F32, &sg, 9);
    sm_sharding_ref shg = harness_sharding(&m2, "x=4", NULL, 0, "P(None, 'x')");
    sm_array_info ig;
    ck_assert_int_eq(sm_client_put(c, SM_F32, &sg, g->data, &shg, NULL, &ig, err, sizeof err),
                     SM_OK);
    sm_array_ref garg = harness_id_ref(ig.id);
    sm_job_info_free(&ji);
    e = sm_job_run(c, pg, 1, &garg, NULL, 0, 0, 60000, &ji, err, sizeof err);
    ck_assert_msg(e == SM_OK, "%s", err);
    ck_assert_msg(ji.state == SM_JOB_FAILED, "%s", sm_job_state_name(ji.state));
    ck_assert_msg(strstr(ji.error, "all_gather") && strstr(ji.error, "limit of 16 MiB"), "%s",
                  ji.error);
    check_sentence(ji.error);
    ck_assert_int_eq(sm_client_delete(c, garg, err, sizeof err), SM_OK);

    /* nothing was lost: both workers alive, the arrays that fit intact */
    ck_assert_int_eq(harness_wait_workers(c, 2, 10000, err, sizeof err), SM_OK);
    ck_assert_int_eq(sm_client_list(c, &all, &n, err, sizeof err), SM_OK);
    ck_assert_int_eq(n, 3); /* fits, a, b: no job output */
    sm_array_info_list_free(all, n);
    harness_assert_get(c, harness_id_ref(info.id), x);
    sm_array_info_free(&ia);
    sm_array_info_free(&ib);
    sm_array_info_free(&ig);
    sm_array_info_free(&info);
    sm_job_info_free(&ji);
    sm_program_free(p);
    sm_program_free(pg);
    sm_array_free(g);
    sm_array_free(a);
    sm_array_free(b);
    sm_array_free(x);
    sm_client_close(c);
    harness_cluster_stop(h);
}
END_TEST

int main(void)
{
    return HARNESS_CLUSTER_SUITE("e2e_errors", 120, cluster_up, cluster_down, {unknown_arrays},
                                 {bad_specs_refused, (int)(sizeof bad_specs / sizeof bad_specs[0])},
                                 {duplicate_name}, {bad_uploads_then_good},
                                 {put_shards_wrong_shape_server_side}, {old_worker_refused},
                                 {still_serving}, {tokens}, {worker_killed}, {memory_limit});
}
