/* Check suite for shmap-coordinator as a process: each test starts the real
 * binary ($SHMAP_COORDINATOR_BIN) with two embedded workers of four devices
 * on loopback free ports, in a process group of its own (tests/harness.c),
 * and talks to it only through sm_svc client calls: uploads and bit-exact
 * downloads, describe, pending and failed arrays, reshard, delete freeing
 * worker memory, a worker killed with SIGKILL, and SIGTERM shutting
 * everything down. The tests run in this process (CK_NOFORK: gRPC is not
 * fork-safe); teardown, which Check runs after a failed assertion too,
 * kills the whole process group whatever happened. */
#include <check.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness_svc.h"
#include "sm_log.h"
#include "sm_time.h"
#include "server_testutil.h"
#include "suite_main.h"

#define CALL_MS HARNESS_CALL_MS

/* The coordinator under test (one per test, started by the fixture). */
typedef struct {
    harness_cluster *h;
    pid_t pid; /* h's coordinator; 0 once a test has ended it */
    sm_rpc_channel *ch;
} coord_proc;

static coord_proc cp;

static int alive_workers(void)
{
    return harness_svc_alive_workers(cp.ch);
}

static void coord_setup(void)
{
    static const char *const args[] = {"--log-level", "warn", NULL};
    harness_opts o = {.nworkers = 2, .devices_per_worker = 4, .coord_args = args};
    char err[512];
    sm_log_set_level(SM_LOG_ERROR);
    memset(&cp, 0, sizeof cp);
    ck_assert_msg(harness_cluster_start(&o, &cp.h, err, sizeof err) == SM_OK, "%s", err);
    cp.pid = cp.h->pid;
    cp.ch = harness_svc_channel(cp.h);
    ck_assert_int_eq(alive_workers(), 2);
}

static void coord_teardown(void)
{
    if (cp.ch)
        sm_rpc_channel_free(cp.ch);
    if (cp.h && cp.pid == 0)
        cp.h->pid = 0; /* already ended and reaped by the test */
    harness_cluster_stop(cp.h);
    memset(&cp, 0, sizeof cp);
}

/* ---- helpers ------------------------------------------------------------ */

static float *box_data(const sm_index *box, float salt, size_t *nbytes)
{
    return harness_box_f32(box, salt, nbytes);
}

/* Uploads data to devices in chunks of chunk bytes. */
static sm_err upload(sm_array_id id, const int32_t *devs, int ndev, sm_shape shape,
                     const void *data, size_t nbytes, size_t chunk, int *ready, char *err,
                     size_t errlen)
{
    return harness_svc_put(cp.ch, id, devs, ndev, shape, data, nbytes, chunk, ready, err, errlen);
}

static sm_err download(sm_array_ref ref, int32_t device, void **out, size_t *nbytes, char *err,
                       size_t errlen)
{
    return harness_svc_download(cp.ch, ref, device, out, nbytes, err, errlen);
}

static sm_mesh_info make_mesh(const char *name, const char *axes)
{
    return harness_svc_mesh(cp.ch, name, axes);
}

static sm_err create(const char *name, const char *mesh, const char *spec, sm_shape shape,
                     sm_put_kind kind, uint32_t deadline, sm_svc_create_array_reply *rep, char *err,
                     size_t errlen)
{
    sm_svc_create_array_req req = st_create_req(name, mesh, spec, shape, kind, deadline);
    return sm_svc_coord_create_array(cp.ch, CALL_MS, &req, rep, err, errlen);
}

/* Creates name over mesh with PUT_WHOLE and uploads every target. */
static sm_array_id put_whole_on(const char *mesh, const char *name, const char *spec,
                                sm_shape shape, float salt)
{
    sm_svc_create_array_reply rep;
    char err[512];
    ck_assert_msg(create(name, mesh, spec, shape, SM_PUT_WHOLE, 0, &rep, err, sizeof err) == SM_OK,
                  "%s", err);
    int ready = 0;
    for (int t = 0; t < rep.ntargets; t++) {
        size_t nb;
        float *d = box_data(&rep.targets[t].global_index, salt, &nb);
        ck_assert_int_eq(ready, 0);
        sm_err e = upload(rep.array.id, rep.targets[t].devices, rep.targets[t].ndevices,
                          rep.array.shard_shape, d, nb, 1000, &ready, err, sizeof err);
        ck_assert_msg(e == SM_OK, "upload of target %d: %s", t, err);
        free(d);
    }
    ck_assert_int_eq(ready, 1);
    sm_array_id id = rep.array.id;
    sm_svc_create_array_reply_free(&rep);
    return id;
}

static sm_array_id put_whole(const char *name, const char *spec, sm_shape shape, float salt)
{
    return put_whole_on("m", name, spec, shape, salt);
}

static void check_values(sm_array_ref ref, float salt)
{
    harness_svc_check_values(cp.ch, ref, salt);
}

static sm_array_state state_of(sm_array_ref ref, char *error, size_t len)
{
    return harness_svc_state(cp.ch, ref, error, len);
}

static int wait_state(sm_array_ref ref, sm_array_state want, int ms)
{
    return harness_svc_wait_state(cp.ch, ref, want, ms);
}

static int64_t total_device_bytes(void)
{
    sm_worker_info *w = NULL;
    int n = 0;
    int64_t total = 0;
    char err[512];
    ck_assert_int_eq(sm_svc_coord_list_devices(cp.ch, CALL_MS, &w, &n, err, sizeof err), SM_OK);
    for (int i = 0; i < n; i++)
        for (int k = 0; k < w[i].ndevices; k++)
            total += w[i].device_bytes[k];
    free(w);
    return total;
}

/* The local workers (children of the coordinator). */
static int children_of(pid_t pid, pid_t *out, int max)
{
    ck_assert_int_eq(pid, cp.h->pid);
    return harness_worker_pids(cp.h, out, max);
}

static const sm_shape g16x32 = {2, {16, 32}};

/* ---- tests ---------------------------------------------------------------- */

START_TEST(test_roundtrip_and_describe)
{
    char err[512];
    sm_mesh_info mi = make_mesh("m", "i=2,j=4");
    /* default order: the worker with process index 0 first (it need not
     * have registered first, so it may hold devices 4..7) */
    sm_worker_info *w;
    int nw;
    ck_assert_int_eq(sm_svc_coord_list_devices(cp.ch, CALL_MS, &w, &nw, err, sizeof err), SM_OK);
    ck_assert_int_eq(nw, 2);
    const sm_worker_info *p0 = w[0].process_index == 0 ? &w[0] : &w[1];
    const sm_worker_info *p1 = p0 == &w[0] ? &w[1] : &w[0];
    ck_assert_int_eq(p1->process_index, 1);
    for (int k = 0; k < 8; k++)
        ck_assert_int_eq(mi.mesh.devices[k], k < 4 ? p0->devices[k] : p1->devices[k - 4]);
    sm_array_id id = put_whole("a", "P('i','j')", g16x32, 0.5f);
    sm_array_ref ref = {id, NULL};
    check_values(ref, 0.5f);
    check_values((sm_array_ref){{0}, "a"}, 0.5f);

    sm_array_info info;
    ck_assert_int_eq(sm_svc_coord_describe(cp.ch, CALL_MS, ref, &info, err, sizeof err), SM_OK);
    ck_assert_str_eq(info.name, "a");
    ck_assert_str_eq(info.type, "f32[16@i,32@j]");
    ck_assert_str_eq(info.mesh_name, "m");
    ck_assert_int_eq(info.shard_shape.dims[0], 8);
    ck_assert_int_eq(info.shard_shape.dims[1], 8);
    ck_assert_int_eq(info.bytes, 16 * 32 * 4);
    ck_assert_int_eq(info.nshards, 8);
    for (int s = 0; s < 8; s++) {
        ck_assert_int_eq(info.shards[s].present, 1);
        ck_assert_int_eq(info.shards[s].worker_id.v, s < 4 ? p0->id.v : p1->id.v);
        ck_assert_ptr_nonnull(strstr(info.shards[s].worker_address, "127.0.0.1:"));
    }
    ck_assert_int_eq(info.shards[5].coords[0], 1);
    ck_assert_int_eq(info.shards[5].coords[1], 1);
    ck_assert_int_eq(info.shards[5].index.r[1].start, 8);
    sm_array_info_free(&info);
    free(w);

    /* replicated: one target for all 8 devices, each a full copy */
    sm_array_id rid = put_whole("r", "P()", g16x32, 2.0f);
    check_values((sm_array_ref){rid, NULL}, 2.0f);

    /* a pending array cannot be read; bad uploads are refused and change nothing */
    sm_svc_create_array_reply rep;
    ck_assert_int_eq(
        create("p", "m", "P('i', None)", g16x32, SM_PUT_WHOLE, 0, &rep, err, sizeof err), SM_OK);
    void *got;
    size_t nb;
    ck_assert_int_eq(download((sm_array_ref){rep.array.id, NULL}, 0, &got, &nb, err, sizeof err),
                     SM_EPRECONDITION);
    ck_assert_msg(strstr(err, "array 'p' is pending (0 of 8 shards arrived)"), "%s", err);
    float junk[64] = {0};
    sm_shape wrong = {2, {4, 4}};
    ck_assert_int_eq(upload(rep.array.id, rep.targets[0].devices, rep.targets[0].ndevices, wrong,
                            junk, sizeof junk, 1000, NULL, err, sizeof err),
                     SM_EINVAL);
    ck_assert_msg(strstr(err, "shard shape"), "%s", err);
    int32_t nodev = 42;
    ck_assert_int_eq(upload(rep.array.id, &nodev, 1, rep.array.shard_shape, junk, sizeof junk, 1000,
                            NULL, err, sizeof err),
                     SM_EINVAL);
    sm_svc_create_array_reply_free(&rep);
    ck_assert_int_eq(create("a", "m", "P()", g16x32, SM_PUT_WHOLE, 0, &rep, err, sizeof err),
                     SM_EEXIST);
    ck_assert_int_eq(create("12", "m", "P()", g16x32, SM_PUT_WHOLE, 0, &rep, err, sizeof err),
                     SM_EINVAL);
    ck_assert_int_eq(create("q", "m", "P('k')", g16x32, SM_PUT_WHOLE, 0, &rep, err, sizeof err),
                     SM_EINVAL);
    sm_svc_create_array_reply_free(&rep);
    check_values(ref, 0.5f);

    sm_array_info *list;
    int n;
    ck_assert_int_eq(sm_svc_coord_list_arrays(cp.ch, CALL_MS, &list, &n, err, sizeof err), SM_OK);
    ck_assert_int_eq(n, 3);
    sm_array_info_list_free(list, n);
}
END_TEST

START_TEST(test_deadline_fails)
{
    char err[512], error[512];
    make_mesh("m", "i=2,j=4");
    sm_svc_create_array_reply rep;
    ck_assert_int_eq(
        create("late", "m", "P('i', None)", g16x32, SM_PUT_SHARDS, 400, &rep, err, sizeof err),
        SM_OK);
    ck_assert_int_eq(rep.ntargets, 8);
    size_t nb;
    float *d = box_data(&rep.targets[0].global_index, 0, &nb);
    ck_assert_int_eq(upload(rep.array.id, rep.targets[0].devices, 1, rep.array.shard_shape, d, nb,
                            4096, NULL, err, sizeof err),
                     SM_OK);
    free(d);
    sm_array_ref ref = {rep.array.id, NULL};
    ck_assert(wait_state(ref, SM_ARRAY_FAILED, 5000));
    state_of(ref, error, sizeof error);
    /* the uploaded device is the first of process 0: 0 or 4 */
    const char *want = rep.targets[0].devices[0] == 0 ? "devices 1,2,3,4,5,6,7 never received "
                                                        "data before the 400 ms"
                                                      : "devices 0,1,2,3,5,6,7 never received "
                                                        "data before the 400 ms";
    ck_assert_msg(strstr(error, want), "%s", error);
    void *got;
    ck_assert_int_eq(download(ref, 0, &got, &nb, err, sizeof err), SM_EPRECONDITION);
    ck_assert_ptr_nonnull(strstr(err, "failed"));
    sm_svc_create_array_reply_free(&rep);
}
END_TEST

START_TEST(test_reshard_values)
{
    char err[512];
    make_mesh("m", "i=2,j=4");
    sm_array_id id = put_whole("src", "P('i','j')", g16x32, 7.0f);
    const char *specs[] = {"P(None, 'j')", "P('j', 'i')", "P()", "P(('i','j'), None)"};
    for (int k = 0; k < 4; k++) {
        sm_svc_reshard_req rq = {0};
        char name[16];
        snprintf(name, sizeof name, "dst%d", k);
        rq.array.id = id;
        rq.sharding.mesh_name = "m";
        ck_assert_int_eq(sm_pspec_parse(specs[k], &rq.sharding.spec, err, sizeof err), SM_OK);
        rq.name = name;
        sm_array_info info;
        ck_assert_msg(sm_svc_coord_reshard(cp.ch, CALL_MS, &rq, &info, err, sizeof err) == SM_OK,
                      "%s: %s", specs[k], err);
        ck_assert_int_eq(info.state, SM_ARRAY_READY);
        check_values((sm_array_ref){info.id, NULL}, 7.0f);
        sm_array_info_free(&info);
    }
    check_values((sm_array_ref){id, NULL}, 7.0f); /* the source is untouched */
    /* a spec that does not divide the shape is refused */
    sm_svc_reshard_req rq = {0};
    rq.array.id = id;
    rq.sharding.mesh_name = "m";
    sm_mesh_info odd = make_mesh("odd", "x=8");
    (void)odd;
    rq.sharding.mesh_name = "odd";
    ck_assert_int_eq(sm_pspec_parse("P(None, None, 'x')", &rq.sharding.spec, err, sizeof err),
                     SM_OK);
    sm_array_info info;
    ck_assert_int_eq(sm_svc_coord_reshard(cp.ch, CALL_MS, &rq, &info, err, sizeof err), SM_EINVAL);
}
END_TEST

START_TEST(test_delete_frees_worker_memory)
{
    char err[512];
    make_mesh("m", "i=2,j=4");
    sm_array_id id = put_whole("big", "P('i', None)", (sm_shape){2, {256, 512}}, 1.0f);
    int64_t until = sm_time_mono_ms() + 5000;
    while (total_device_bytes() < 4 * 256 * 512 * 4 && sm_time_mono_ms() < until)
        harness_sleep_ms(50);
    /* P('i', None) over i=2,j=4: each row block on 4 devices: 4 full copies */
    ck_assert_int_eq(total_device_bytes(), 4 * 256 * 512 * 4);
    ck_assert_int_eq(sm_svc_coord_delete(cp.ch, CALL_MS, (sm_array_ref){id, NULL}, err, sizeof err),
                     SM_OK);
    until = sm_time_mono_ms() + 5000;
    while (total_device_bytes() != 0 && sm_time_mono_ms() < until)
        harness_sleep_ms(50);
    ck_assert_int_eq(total_device_bytes(), 0);
    ck_assert_int_eq(sm_svc_coord_delete(cp.ch, CALL_MS, (sm_array_ref){id, NULL}, err, sizeof err),
                     SM_ENOTFOUND);
    sm_array_info info;
    ck_assert_int_eq(
        sm_svc_coord_describe(cp.ch, CALL_MS, (sm_array_ref){{0}, "big"}, &info, err, sizeof err),
        SM_ENOTFOUND);
}
END_TEST

/* Mesh m (i=2,j=4) and array name of g16x32 (values of salt) put whole on
 * it, over the coordinator's two worker processes, whose pids go to kids. */
static sm_array_id put_on_two(const char *name, float salt, pid_t kids[8])
{
    make_mesh("m", "i=2,j=4");
    sm_array_id id = put_whole(name, "P('i','j')", g16x32, salt);
    ck_assert_int_eq(children_of(cp.pid, kids, 8), 2);
    return id;
}

START_TEST(test_worker_killed)
{
    char err[512], error[512];
    pid_t kids[8];
    sm_array_id id = put_on_two("k", 3.0f, kids);
    /* which child is process 1 does not matter: either loses half the devices */
    ck_assert_int_eq(kill(kids[1], SIGKILL), 0);
    ck_assert_int_eq(harness_svc_wait_alive(cp.ch, 1, 2000), 1);
    sm_array_ref ref = {id, NULL};
    ck_assert(wait_state(ref, SM_ARRAY_LOST, 2000));
    state_of(ref, error, sizeof error);
    ck_assert_msg(strstr(error, "devices 0,1,2,3 are gone") || strstr(error, "devices 4,5,6,7 are "
                                                                             "gone"),
                  "%s", error);
    void *got;
    size_t nb;
    ck_assert_int_eq(download(ref, 0, &got, &nb, err, sizeof err), SM_EPRECONDITION);
    /* still serving: a mesh over the survivor works end to end */
    make_mesh("m4", "x=4");
    sm_svc_create_array_reply rep;
    ck_assert_int_eq(
        create("after", "m4", "P('x')", g16x32, SM_PUT_WHOLE, 0, &rep, err, sizeof err), SM_OK);
    sm_svc_create_array_reply_free(&rep);
    ck_assert_int_eq(
        create("after2", "m", "P('i')", g16x32, SM_PUT_WHOLE, 0, &rep, err, sizeof err),
        SM_EUNAVAILABLE);
}
END_TEST

START_TEST(test_put_local_two_processes)
{
    char err[512];
    make_mesh("m", "i=2,j=4");
    sm_svc_create_array_req req = {0};
    req.name = "loc";
    req.dtype = SM_F32;
    req.sharding.mesh_name = "m";
    ck_assert_int_eq(sm_pspec_parse("P('i', None)", &req.sharding.spec, err, sizeof err), SM_OK);
    req.kind = SM_PUT_LOCAL;
    req.local_shape = (sm_shape){2, {8, 32}};
    sm_array_id id = {0};
    int ready = 0;
    for (int p = 0; p < 2; p++) {
        sm_svc_create_array_reply rep;
        req.process = p;
        ck_assert_msg(sm_svc_coord_create_array(cp.ch, CALL_MS, &req, &rep, err, sizeof err) ==
                          SM_OK,
                      "process %d: %s", p, err);
        ck_assert_int_eq(rep.array.shape.dims[0], 16); /* inferred */
        ck_assert(p == 0 || rep.array.id.v == id.v);
        id = rep.array.id;
        /* process p's four devices share one row block: one target */
        ck_assert_int_eq(rep.ntargets, 1);
        ck_assert_int_eq(rep.targets[0].ndevices, 4);
        ck_assert_int_eq(rep.targets[0].global_index.r[0].start, 8 * p);
        ck_assert_int_eq(rep.targets[0].local_slice.r[0].start, 0);
        size_t nb;
        float *d = box_data(&rep.targets[0].global_index, 4.0f, &nb);
        ck_assert_int_eq(ready, 0);
        ck_assert_msg(upload(id, rep.targets[0].devices, 4, rep.array.shard_shape, d, nb, 300,
                             &ready, err, sizeof err) == SM_OK,
                      "%s", err);
        free(d);
        sm_svc_create_array_reply_free(&rep);
        if (p == 0) {
            /* a part that disagrees is refused and changes nothing */
            req.process = 1;
            req.local_shape = (sm_shape){2, {8, 16}};
            ck_assert_int_eq(sm_svc_coord_create_array(cp.ch, CALL_MS, &req, &rep, err, sizeof err),
                             SM_EINVAL);
            ck_assert_msg(strstr(err, "[8,32]"), "%s", err);
            req.local_shape = (sm_shape){2, {8, 32}};
        }
    }
    ck_assert_int_eq(ready, 1);
    check_values((sm_array_ref){id, NULL}, 4.0f);
}
END_TEST

/* Sends target 0 of rep in two halves (the header with the first), spoiled
 * as mode says. */
static sm_err raw_upload(const sm_svc_create_array_reply *rep, const float *d, size_t nb,
                         harness_up_mode mode, char *err, size_t errlen)
{
    harness_upload_req u = {.array = rep->array.id,
                            .devices = rep->targets[0].devices,
                            .ndevices = rep->targets[0].ndevices,
                            .dtype = SM_F32,
                            .shape = rep->array.shard_shape,
                            .data = d,
                            .nbytes = (int64_t)nb,
                            .chunk = nb / 2,
                            .mode = mode,
                            .skew = 4,
                            .header_with_data = 1};
    return harness_upload(cp.ch, &u, NULL, err, errlen);
}

START_TEST(test_bad_streams_leave_array_pending)
{
    char err[512];
    make_mesh("m", "i=2,j=4");
    sm_svc_create_array_reply rep;
    ck_assert_int_eq(create("s", "m", "P()", g16x32, SM_PUT_WHOLE, 0, &rep, err, sizeof err),
                     SM_OK);
    size_t nb;
    float *d = box_data(&rep.targets[0].global_index, 9.0f, &nb);
    /* a chunk out of order */
    ck_assert_int_eq(raw_upload(&rep, d, nb, HARNESS_UP_GAP, err, sizeof err), SM_EINVAL);
    ck_assert_msg(strstr(err, "out of order"), "%s", err);
    /* a wrong checksum: the workers refuse the shard */
    ck_assert_int_eq(raw_upload(&rep, d, nb, HARNESS_UP_BAD_SUM, err, sizeof err), SM_EDATALOSS);
    /* a client that goes away mid-upload */
    ck_assert_int_eq(raw_upload(&rep, d, nb, HARNESS_UP_ABORT, err, sizeof err), SM_ECANCELLED);
    char error[512];
    ck_assert_int_eq(state_of((sm_array_ref){rep.array.id, NULL}, error, sizeof error),
                     SM_ARRAY_PENDING);
    /* the target may be sent again (once the coordinator saw the cancel) */
    sm_err e;
    int64_t until = sm_time_mono_ms() + 3000;
    while ((e = raw_upload(&rep, d, nb, HARNESS_UP_OK, err, sizeof err)) == SM_EPRECONDITION &&
           sm_time_mono_ms() < until)
        harness_sleep_ms(20);
    ck_assert_msg(e == SM_OK, "%s", err);
    ck_assert_int_eq(state_of((sm_array_ref){rep.array.id, NULL}, error, sizeof error),
                     SM_ARRAY_READY);
    check_values((sm_array_ref){rep.array.id, NULL}, 9.0f);
    free(d);
    sm_svc_create_array_reply_free(&rep);
}
END_TEST

START_TEST(test_silent_worker_lost_then_back)
{
    char err[512], error[512];
    pid_t kids[8];
    sm_array_id id = put_on_two("z", 5.0f, kids);
    /* a stopped worker sends no heartbeats: lost after --lost-after-ms (3 s) */
    ck_assert_int_eq(kill(kids[0], SIGSTOP), 0);
    ck_assert_int_eq(harness_svc_wait_alive(cp.ch, 1, 8000), 1);
    ck_assert(wait_state((sm_array_ref){id, NULL}, SM_ARRAY_LOST, 1000));
    state_of((sm_array_ref){id, NULL}, error, sizeof error);
    ck_assert_msg(strstr(error, "no heartbeat for"), "%s", error);
    /* resumed, it hears known = false and registers again asking for its
     * old identity (same worker id, devices and process index), offering
     * back the shards it kept: the array is ready again, unchanged */
    ck_assert_int_eq(kill(kids[0], SIGCONT), 0);
    ck_assert_int_eq(harness_svc_wait_alive(cp.ch, 2, 8000), 2);
    sm_worker_info *w;
    int n;
    ck_assert_int_eq(sm_svc_coord_list_devices(cp.ch, CALL_MS, &w, &n, err, sizeof err), SM_OK);
    ck_assert_int_eq(n, 2);
    ck_assert_int_eq(w[0].alive && w[1].alive, 1);
    ck_assert_int_eq(w[0].devices[0] + w[1].devices[0], 4);
    free(w);
    ck_assert(wait_state((sm_array_ref){id, NULL}, SM_ARRAY_READY, 5000));
    check_values((sm_array_ref){id, NULL}, 5.0f);
    sm_array_id id2 = put_whole_on("m", "z2", "P('i','j')", g16x32, 6.0f);
    check_values((sm_array_ref){id2, NULL}, 6.0f);
}
END_TEST

START_TEST(test_sigterm_exits_clean)
{
    pid_t kids[8];
    int n = children_of(cp.pid, kids, 8);
    ck_assert_int_eq(n, 2);
    sm_rpc_channel_free(cp.ch);
    cp.ch = NULL;
    ck_assert_int_eq(kill(cp.pid, SIGTERM), 0);
    int st = 0;
    pid_t got = 0;
    int64_t until = sm_time_mono_ms() + 15000;
    while ((got = waitpid(cp.pid, &st, WNOHANG)) == 0 && sm_time_mono_ms() < until)
        harness_sleep_ms(20);
    ck_assert_int_eq(got, cp.pid);
    cp.pid = 0;
    ck_assert(WIFEXITED(st));
    ck_assert_int_eq(WEXITSTATUS(st), 0);
    for (int k = 0; k < n; k++)
        ck_assert_msg(kill(kids[k], 0) != 0 && errno == ESRCH, "worker %d still exists",
                      (int)kids[k]);
}
END_TEST

static Suite *server_proc_suite(void)
{
    return SUITE_CASE(suite_create("server_proc"), "coordinator", 90,
                      SUITE_CHECKED(coord_setup, coord_teardown), {test_roundtrip_and_describe},
                      {test_deadline_fails}, {test_reshard_values},
                      {test_delete_frees_worker_memory}, {test_worker_killed},
                      {test_put_local_two_processes}, {test_bad_streams_leave_array_pending},
                      {test_silent_worker_lost_then_back}, {test_sigterm_exits_clean});
}

int main(void)
{
    sm_rpc_init(); /* once: the tests share this process */
    int rc = harness_run_suite(server_proc_suite());
    sm_rpc_shutdown();
    return rc;
}
