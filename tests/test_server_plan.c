/* Check suite for the coordinator's pure parts: plan.c (upload targets of
 * every put kind over the data-loading-guide layout (64,128) on 4 workers x
 * 2 devices; reshard pieces with same-worker preference and replica choice)
 * and the registry (ids, names, default mesh order, explicit order errors,
 * uploads and state transitions, deadlines, lost workers). No network: the
 * registry is given NULL channels and a hand-driven clock. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan.h"
#include "registry.h"
#include "relay.h"
#include "sm_log.h"
#include "server_testutil.h"
#include "suite_main.h"

#define N(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* Mesh i=4,j=2 over devices 0..7 (worker k holds devices 2k, 2k+1). */
static void mesh42(sm_mesh *m)
{
    char err[256];
    ck_assert_int_eq(sm_mesh_parse("i=4,j=2", NULL, 0, m, err, sizeof err), SM_OK);
}

static void slices_of(const char *spec, const sm_shape *g, sm_device_slice *out)
{
    sm_mesh m;
    sm_pspec p;
    sm_sharding s;
    char err[256];
    mesh42(&m);
    ck_assert_int_eq(sm_pspec_parse(spec, &p, err, sizeof err), SM_OK);
    ck_assert_msg(sm_sharding_init(&s, &m, &p, g, err, sizeof err) == SM_OK, "%s", err);
    ck_assert_int_eq(sm_sharding_indices(&s, g, out, err, sizeof err), SM_OK);
}

static const sm_shape g64x128 = {2, {64, 128}};

/* ---- targets -------------------------------------------------------------- */

typedef struct {
    const char *spec;
    sm_put_kind kind;
    int ntargets;
    int ndev0;          /* devices in the first target */
    int32_t devs0[8];   /* the first target's devices */
    int64_t box1[2][2]; /* the second target's box (if ntargets > 1) */
} target_case;

static const target_case target_cases[] = {
    {"P('i','j')", SM_PUT_WHOLE, 8, 1, {0}, {{0, 16}, {64, 128}}},
    {"P('i','j')", SM_PUT_SHARDS, 8, 1, {0}, {{0, 16}, {64, 128}}},
    {"P('i', None)", SM_PUT_WHOLE, 4, 2, {0, 1}, {{16, 32}, {0, 128}}},
    {"P('i', None)", SM_PUT_SHARDS, 8, 1, {0}, {{0, 16}, {0, 128}}},
    {"P()", SM_PUT_WHOLE, 1, 8, {0, 1, 2, 3, 4, 5, 6, 7}, {{0}}},
    {"P()", SM_PUT_SHARDS, 8, 1, {0}, {{0, 64}, {0, 128}}},
    {"P(None, ('i','j'))", SM_PUT_WHOLE, 8, 1, {0}, {{0, 64}, {16, 32}}},
    {"P('j', None)", SM_PUT_WHOLE, 2, 4, {0, 2, 4, 6}, {{32, 64}, {0, 128}}},
};

START_TEST(test_targets_table)
{
    const target_case *c = &target_cases[_i];
    sm_device_slice sl[8];
    sm_svc_upload_target *t;
    int nt;
    char err[256];
    slices_of(c->spec, &g64x128, sl);
    ck_assert_int_eq(sm_plan_targets_create(sl, 8, c->kind, &t, &nt, err, sizeof err), SM_OK);
    ck_assert_int_eq(nt, c->ntargets);
    ck_assert_int_eq(t[0].ndevices, c->ndev0);
    for (int k = 0; k < c->ndev0; k++)
        ck_assert_int_eq(t[0].devices[k], c->devs0[k]);
    if (nt > 1)
        for (int d = 0; d < 2; d++) {
            ck_assert_int_eq(t[1].global_index.r[d].start, c->box1[d][0]);
            ck_assert_int_eq(t[1].global_index.r[d].stop, c->box1[d][1]);
        }
    sm_plan_targets_free(t, nt);
}
END_TEST

START_TEST(test_targets_local_kind_refused)
{
    sm_device_slice sl[8];
    sm_svc_upload_target *t;
    int nt;
    char err[256];
    slices_of("P('i')", &g64x128, sl);
    ck_assert_int_eq(sm_plan_targets_create(sl, 8, SM_PUT_LOCAL, &t, &nt, err, sizeof err),
                     SM_EINVAL);
}
END_TEST

/* PUT_LOCAL over 4 processes x 2 devices: local shape, expected global
 * shape, targets of process 1 and the local slice of its first target. */
typedef struct {
    const char *spec;
    sm_shape local;
    sm_shape global;
    int ntargets;
    int ndev0;
    int64_t slice0[2][2];
    int64_t global0[2][2];
} local_case;

static const local_case local_cases[] = {
    /* the data-loading guide: dimension 1 over all 8 devices */
    {"P(None, ('i','j'))",
     {2, {64, 32}},
     {2, {64, 128}},
     2,
     1,
     {{0, 64}, {0, 16}},
     {{0, 64}, {32, 48}}},
    {"P('i', None)",
     {2, {16, 128}},
     {2, {64, 128}},
     1,
     2,
     {{0, 16}, {0, 128}},
     {{16, 32}, {0, 128}}},
    {"P('i','j')", {2, {16, 128}}, {2, {64, 128}}, 2, 1, {{0, 16}, {0, 64}}, {{16, 32}, {0, 64}}},
    {"P()", {2, {64, 128}}, {2, {64, 128}}, 1, 2, {{0, 64}, {0, 128}}, {{0, 64}, {0, 128}}},
};

START_TEST(test_local_targets_table)
{
    const local_case *c = &local_cases[_i];
    sm_mesh m;
    sm_pspec p;
    sm_sharding s;
    char err[256];
    int ndev[4] = {2, 2, 2, 2};
    int32_t devs[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    sm_proc_map pm = {4, ndev, devs};
    sm_local_plan *plan;
    sm_svc_upload_target *t;
    int nt;
    mesh42(&m);
    ck_assert_int_eq(sm_pspec_parse(c->spec, &p, err, sizeof err), SM_OK);
    s.mesh = m;
    s.spec = p;
    ck_assert_msg(sm_local_plan_create(&s, &pm, &c->local, NULL, &plan, err, sizeof err) == SM_OK,
                  "%s", err);
    ck_assert(sm_shape_equal(&plan->global_shape, &c->global));
    ck_assert_int_eq(sm_plan_local_targets_create(&plan->procs[1], &t, &nt, err, sizeof err),
                     SM_OK);
    ck_assert_int_eq(nt, c->ntargets);
    ck_assert_int_eq(t[0].ndevices, c->ndev0);
    ck_assert_int_eq(t[0].devices[0], 2);
    for (int d = 0; d < 2; d++) {
        ck_assert_int_eq(t[0].local_slice.r[d].start, c->slice0[d][0]);
        ck_assert_int_eq(t[0].local_slice.r[d].stop, c->slice0[d][1]);
        ck_assert_int_eq(t[0].global_index.r[d].start, c->global0[d][0]);
        ck_assert_int_eq(t[0].global_index.r[d].stop, c->global0[d][1]);
    }
    sm_plan_targets_free(t, nt);
    sm_local_plan_free(plan);
}
END_TEST

/* ---- reshard pieces ---------------------------------------------------------- */

static void owners(sm_plan_owner *o, int dead_worker)
{
    for (int d = 0; d < 8; d++)
        o[d] = (sm_plan_owner){(uint32_t)(d / 2 + 1), (d / 2 + 1) != dead_worker};
}

/* *p = the plan from spec `from` to spec `to` over g64x128, two devices a
 * worker, every worker alive. */
static void plan_ok(const char *from, const char *to, sm_plan_reshard *p)
{
    sm_device_slice src[8], dst[8];
    sm_plan_owner so[8], downer[8];
    char err[256];
    slices_of(from, &g64x128, src);
    slices_of(to, &g64x128, dst);
    owners(so, 0);
    owners(downer, 0);
    ck_assert_int_eq(sm_plan_reshard_create(src, so, 8, dst, downer, 8, p, err, sizeof err), SM_OK);
}

START_TEST(test_reshard_rows_to_columns)
{
    sm_plan_reshard p;
    plan_ok("P('i', None)", "P(None, 'j')", &p);
    ck_assert_int_eq(p.nshards, 8);
    /* device 1 (worker 1, j=1): box [0:64, 64:128] from all four row blocks */
    const sm_plan_shard *s = &p.shards[1];
    ck_assert_int_eq(s->device, 1);
    ck_assert_int_eq(s->shape.dims[0], 64);
    ck_assert_int_eq(s->shape.dims[1], 64);
    ck_assert_int_eq(s->npieces, 4);
    /* rows 0:16: devices 0 and 1 both on worker 1; lowest replica there */
    ck_assert_int_eq(s->pieces[0].src_device, 0);
    ck_assert_int_eq(s->pieces[0].src_worker, 1);
    /* rows 16:32: worker 2, replica 0 = device 2 */
    ck_assert_int_eq(s->pieces[1].src_device, 2);
    ck_assert_int_eq(s->pieces[1].src_box.r[0].start, 0);
    ck_assert_int_eq(s->pieces[1].src_box.r[0].stop, 16);
    ck_assert_int_eq(s->pieces[1].src_box.r[1].start, 64);
    ck_assert_int_eq(s->pieces[1].src_box.r[1].stop, 128);
    ck_assert_int_eq(s->pieces[1].dst_offset[0], 16);
    ck_assert_int_eq(s->pieces[1].dst_offset[1], 0);
    /* device 7 (worker 4): rows 48:64 from its own worker, device 6 */
    ck_assert_int_eq(p.shards[7].pieces[3].src_device, 6);
    ck_assert_int_eq(p.shards[7].pieces[3].src_worker, 4);
    sm_plan_reshard_free(&p);
}
END_TEST

START_TEST(test_reshard_same_worker_preferred)
{
    sm_plan_reshard p;
    plan_ok("P()", "P('i','j')", &p);
    for (int d = 0; d < 8; d++) {
        ck_assert_int_eq(p.shards[d].npieces, 1);
        /* the lowest replica on the same worker: device 2*(d/2) */
        ck_assert_int_eq(p.shards[d].pieces[0].src_device, 2 * (d / 2));
        ck_assert_int_eq(p.shards[d].pieces[0].src_box.r[0].start, p.shards[d].index.r[0].start);
        ck_assert_int_eq(p.shards[d].pieces[0].dst_offset[0], 0);
    }
    sm_plan_reshard_free(&p);
}
END_TEST

START_TEST(test_reshard_replica_choice_and_dead)
{
    sm_device_slice src[8], dst[8];
    sm_plan_owner so[8], downer[8];
    sm_plan_reshard p;
    char err[256];
    /* columns replicated over i: box j=0 on devices 0,2,4,6 (replicas
     * 0..3); worker 1 (devices 0,1) is dead; the new shards live on a
     * worker 99 holding nothing, so the lowest live replica is device 2 */
    slices_of("P(None, 'j')", &g64x128, src);
    slices_of("P()", &g64x128, dst);
    owners(so, 1);
    for (int d = 0; d < 8; d++)
        downer[d] = (sm_plan_owner){99, 1};
    ck_assert_int_eq(sm_plan_reshard_create(src, so, 8, dst, downer, 8, &p, err, sizeof err),
                     SM_OK);
    ck_assert_int_eq(p.shards[0].npieces, 2);
    ck_assert_int_eq(p.shards[0].pieces[0].src_device, 2);
    ck_assert_int_eq(p.shards[0].pieces[1].src_device, 3);
    ck_assert_int_eq(p.shards[0].pieces[1].dst_offset[1], 64);
    sm_plan_reshard_free(&p);
    /* rows: the block 0:16 lives only on dead worker 1 */
    slices_of("P('i', None)", &g64x128, src);
    ck_assert_int_eq(sm_plan_reshard_create(src, so, 8, dst, downer, 8, &p, err, sizeof err),
                     SM_EUNAVAILABLE);
    ck_assert_ptr_nonnull(strstr(err, "[0:16, 0:128]"));
    ck_assert_ptr_null(p.shards);
}
END_TEST

/* ---- registry ----------------------------------------------------------------- */

static void reg_mesh(sm_registry *r, const char *name, const char *axes)
{
    sm_mesh m;
    sm_mesh_info mi;
    char err[256];
    ck_assert_int_eq(sm_mesh_parse(axes, NULL, 0, &m, err, sizeof err), SM_OK);
    ck_assert_msg(sm_registry_mesh_create(r, name, &m, 1, &mi, err, sizeof err) == SM_OK, "%s",
                  err);
}

static sm_err reg_array(sm_registry *r, const char *name, const char *mesh, const char *spec,
                        sm_put_kind kind, uint32_t deadline, sm_svc_create_array_reply *out,
                        char *err, size_t errlen)
{
    sm_svc_create_array_req req = st_create_req(name, mesh, spec, g64x128, kind, deadline);
    return sm_registry_array_create(r, &req, T0, out, err, errlen);
}

static void reply_free(sm_svc_create_array_reply *rep)
{
    sm_plan_targets_free(rep->targets, rep->ntargets);
    sm_array_info_free(&rep->array);
}

/* reg_with_workers, then mesh "m" of axes. */
static sm_registry *reg_with_mesh(int nworkers, int ndev, const char *axes)
{
    sm_registry *r = st_registry(nworkers, ndev);
    reg_mesh(r, "m", axes);
    return r;
}

/* Creates array name over mesh "m" (must succeed); returns its id. */
static sm_array_id reg_array_ok(sm_registry *r, const char *name, const char *spec,
                                sm_put_kind kind, uint32_t deadline)
{
    sm_svc_create_array_reply rep;
    char err[256];
    ck_assert_msg(reg_array(r, name, "m", spec, kind, deadline, &rep, err, sizeof err) == SM_OK,
                  "%s", err);
    sm_array_id id = rep.array.id;
    reply_free(&rep);
    return id;
}

/* Uploads the f32 shard of shape s on devs[0..n) of array id at T0 (begin
 * and a successful end, both must succeed); returns whether the array is
 * ready, and the number of targets in *nt unless NULL. */
static int reg_upload_ok(sm_registry *r, sm_array_id id, int32_t *devs, int n, sm_shape s, int *nt)
{
    char err[256];
    sm_svc_upload_header h = {id, n, devs, s, SM_F32, 4};
    for (int d = 0; d < s.rank; d++)
        h.total_bytes *= s.dims[d];
    sm_reg_target *t;
    int ntargets, ready;
    int64_t left;
    ck_assert_msg(sm_registry_upload_begin(r, &h, T0, &t, &ntargets, &left, err, sizeof err) ==
                      SM_OK,
                  "%s", err);
    free(t);
    if (nt)
        *nt = ntargets;
    ck_assert_int_eq(sm_registry_upload_end(r, id, devs, n, 1, &ready, err, sizeof err), SM_OK);
    return ready;
}

/* The description of array ref, which must exist; free it with
 * sm_array_info_free. */
static sm_array_info reg_describe(sm_registry *r, sm_array_ref ref)
{
    sm_array_info info;
    char err[256];
    ck_assert_msg(sm_registry_array_describe(r, ref, &info, err, sizeof err) == SM_OK, "%s", err);
    return info;
}

/* Workers that ask for process index k get devices k * ndevices onward,
 * whatever order they register in; taken ids fall back to the next free. */
START_TEST(test_registry_device_ids_by_process)
{
    sm_registry *r;
    char err[256];
    ck_assert_int_eq(sm_registry_create(60000, 500, &r, err, sizeof err), SM_OK);
    static const struct {
        const char *addr;
        int process, first;
    } rows[] = {
        {"127.0.0.1:9003", 3, 6}, {"127.0.0.1:9001", 1, 2},  {"127.0.0.1:9000", 0, 0},
        {"127.0.0.1:9002", 2, 4}, {"127.0.0.1:9004", -1, 8}, /* next free after 0..7 */
    };
    for (size_t k = 0; k < sizeof rows / sizeof rows[0]; k++) {
        sm_svc_register_req req = {rows[k].addr, 2, rows[k].process, "h"};
        sm_svc_register_reply rep;
        ck_assert_int_eq(st_worker_add(r, &req, &rep, err, sizeof err), SM_OK);
        ck_assert_int_eq(rep.devices[0], rows[k].first);
        ck_assert_int_eq(rep.devices[1], rows[k].first + 1);
    }
    sm_registry_free(r);
}
END_TEST

START_TEST(test_registry_workers)
{
    sm_registry *r = st_registry(4, 2);
    char err[256];
    sm_svc_register_reply rep;
    sm_svc_register_req taken = {"127.0.0.1:9100", 2, 1, "h"};
    ck_assert_int_eq(st_worker_add(r, &taken, &rep, err, sizeof err), SM_EEXIST);
    ck_assert_ptr_nonnull(strstr(err, "process index 1"));
    sm_svc_register_req bad = {"127.0.0.1:9101", 0, -1, "h"};
    ck_assert_int_eq(st_worker_add(r, &bad, &rep, err, sizeof err), SM_EINVAL);
    sm_svc_register_req asked = {"127.0.0.1:9102", 4, 7, "h"};
    ck_assert_int_eq(st_worker_add(r, &asked, &rep, err, sizeof err), SM_OK);
    ck_assert_int_eq(rep.worker_id.v, 5); /* ids never reused, failures take none */
    ck_assert_int_eq(rep.process_index, 7);
    ck_assert_int_eq(rep.devices[0], 28); /* process 7 x 4 devices: ids 28..31 */
    ck_assert(rep.epoch != 0 && rep.epoch == sm_registry_epoch(r));
    sm_svc_heartbeat_req hb = {
        .worker_id = {5}, .epoch = rep.epoch, .ndevices = 4, .device_bytes = {100, 0, 0, 0}};
    ck_assert_int_eq(sm_registry_worker_heartbeat(r, &hb, T0 + 10), 1);
    /* another coordinator run's worker 5 (a restart): not this worker 5 */
    hb.epoch = rep.epoch + 1;
    ck_assert_int_eq(sm_registry_worker_heartbeat(r, &hb, T0 + 10), 0);
    hb.epoch = rep.epoch;
    hb.worker_id.v = 77;
    ck_assert_int_eq(sm_registry_worker_heartbeat(r, &hb, T0 + 10), 0);
    sm_worker_info *wi;
    int n;
    ck_assert_int_eq(sm_registry_workers_list(r, T0 + 20, &wi, &n, err, sizeof err), SM_OK);
    ck_assert_int_eq(n, 5);
    ck_assert_int_eq(wi[4].device_bytes[0], 100);
    ck_assert_int_eq(wi[4].ms_since_heartbeat, 10);
    ck_assert_int_eq(wi[0].ms_since_heartbeat, 20);
    free(wi);
    sm_registry_free(r);
}
END_TEST

START_TEST(test_registry_meshes)
{
    sm_registry *r = st_registry(4, 2);
    sm_mesh m;
    sm_mesh_info mi;
    char err[256];
    ck_assert_int_eq(sm_mesh_parse("i=4,j=2", NULL, 0, &m, err, sizeof err), SM_OK);
    ck_assert_int_eq(sm_registry_mesh_create(r, "m", &m, 1, &mi, err, sizeof err), SM_OK);
    ck_assert_int_eq(mi.id.v, 1);
    for (int k = 0; k < 8; k++)
        ck_assert_int_eq(mi.mesh.devices[k], k);
    ck_assert_int_eq(sm_registry_mesh_create(r, "m", &m, 1, &mi, err, sizeof err), SM_EEXIST);
    ck_assert_int_eq(sm_registry_mesh_create(r, "42", &m, 1, &mi, err, sizeof err), SM_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "digits"));
    /* x=4 takes the first two whole workers; x=3 one whole worker and the
     * first device of the next (jax.make_mesh takes the first N devices) */
    ck_assert_int_eq(sm_mesh_parse("x=4", NULL, 0, &m, err, sizeof err), SM_OK);
    ck_assert_int_eq(sm_registry_mesh_create(r, NULL, &m, 1, &mi, err, sizeof err), SM_OK);
    ck_assert_int_eq(mi.mesh.devices[3], 3);
    ck_assert_int_eq(mi.id.v, 2);
    ck_assert_int_eq(sm_mesh_parse("x=3", NULL, 0, &m, err, sizeof err), SM_OK);
    ck_assert_int_eq(sm_registry_mesh_create(r, NULL, &m, 1, &mi, err, sizeof err), SM_OK);
    ck_assert_int_eq(mi.mesh.devices[2], 2);
    ck_assert_int_eq(sm_mesh_parse("x=9", NULL, 0, &m, err, sizeof err), SM_OK);
    ck_assert_int_eq(sm_registry_mesh_create(r, NULL, &m, 1, &mi, err, sizeof err), SM_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "have 8 in all"));
    /* explicit orders */
    int32_t rev[4] = {7, 6, 5, 4};
    ck_assert_int_eq(sm_mesh_parse("x=4", rev, 4, &m, err, sizeof err), SM_OK);
    ck_assert_int_eq(sm_registry_mesh_create(r, "rev", &m, 0, &mi, err, sizeof err), SM_OK);
    ck_assert_int_eq(mi.mesh.devices[0], 7);
    m.devices[0] = 9;
    ck_assert_int_eq(sm_registry_mesh_create(r, "bad", &m, 0, &mi, err, sizeof err), SM_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "device 9"));
    m.devices[0] = 6;
    ck_assert_int_eq(sm_registry_mesh_create(r, "dup", &m, 0, &mi, err, sizeof err), SM_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "device 6"));
    ck_assert_int_eq(sm_registry_mesh_get(r, (sm_mesh_id){0}, "rev", &mi, err, sizeof err), SM_OK);
    ck_assert_int_eq(mi.id.v, 4); /* x=3 took 3; failed creations take no id */
    ck_assert_int_eq(sm_registry_mesh_get(r, (sm_mesh_id){99}, NULL, &mi, err, sizeof err),
                     SM_ENOTFOUND);
    sm_mesh_info *list;
    int n;
    ck_assert_int_eq(sm_registry_mesh_list(r, &list, &n, err, sizeof err), SM_OK);
    ck_assert_int_eq(n, 4);
    free(list);
    sm_registry_free(r);
}
END_TEST

START_TEST(test_registry_array_names_and_errors)
{
    sm_registry *r = reg_with_mesh(4, 2, "i=4,j=2");
    sm_svc_create_array_reply rep;
    char err[256];
    ck_assert_int_eq(reg_array(r, "a", "m", "P('i','j')", SM_PUT_WHOLE, 0, &rep, err, sizeof err),
                     SM_OK);
    ck_assert_int_eq(rep.array.id.v, 1);
    ck_assert_str_eq(rep.array.type, "f32[64@i,128@j]");
    ck_assert_int_eq(rep.array.state, SM_ARRAY_PENDING);
    ck_assert_int_eq(rep.array.nshards, 8);
    ck_assert_int_eq(rep.array.shards[3].worker_id.v, 2);
    ck_assert_int_eq(rep.array.shards[3].present, 0);
    ck_assert_int_eq(rep.ntargets, 8);
    reply_free(&rep);
    ck_assert_int_eq(reg_array(r, "a", "m", "P('i')", SM_PUT_WHOLE, 0, &rep, err, sizeof err),
                     SM_EEXIST);
    ck_assert_int_eq(reg_array(r, "007", "m", "P('i')", SM_PUT_WHOLE, 0, &rep, err, sizeof err),
                     SM_EINVAL);
    ck_assert_int_eq(reg_array(r, "b", "nomesh", "P('i')", SM_PUT_WHOLE, 0, &rep, err, sizeof err),
                     SM_ENOTFOUND);
    ck_assert_ptr_nonnull(strstr(err, "nomesh"));
    ck_assert_int_eq(reg_array(r, "b", "m", "P('k')", SM_PUT_WHOLE, 0, &rep, err, sizeof err),
                     SM_EINVAL);
    ck_assert_int_eq(
        reg_array(r, "b", "m", "P(None, None, 'i')", SM_PUT_WHOLE, 0, &rep, err, sizeof err),
        SM_EINVAL);
    ck_assert_int_eq(reg_array(r, "b", "m", "P(None)", SM_PUT_SHARDS, 0, &rep, err, sizeof err),
                     SM_OK);
    ck_assert_int_eq(rep.array.id.v, 2);
    reply_free(&rep);
    sm_array_info *list;
    int n;
    ck_assert_int_eq(sm_registry_array_list(r, &list, &n, err, sizeof err), SM_OK);
    ck_assert_int_eq(n, 2);
    sm_array_info_list_free(list, n);
    sm_reg_free *f;
    int nf;
    ck_assert_int_eq(
        sm_registry_array_delete(r, (sm_array_ref){{1}, NULL}, &f, &nf, err, sizeof err), SM_OK);
    ck_assert_int_eq(nf, 4); /* every worker had devices */
    free(f);
    ck_assert_int_eq(
        sm_registry_array_delete(r, (sm_array_ref){{1}, NULL}, &f, &nf, err, sizeof err),
        SM_ENOTFOUND);
    ck_assert_int_eq(reg_array(r, "c", "m", "P()", SM_PUT_WHOLE, 0, &rep, err, sizeof err), SM_OK);
    ck_assert_int_eq(rep.array.id.v, 3); /* never reused */
    reply_free(&rep);
    sm_registry_free(r);
}
END_TEST

START_TEST(test_registry_upload_states)
{
    sm_registry *r = reg_with_mesh(4, 2, "i=4,j=2");
    char err[256];
    sm_array_id id = reg_array_ok(r, "a", "P('i', None)", SM_PUT_WHOLE, 0);
    int32_t devs[2] = {2, 3};
    sm_svc_upload_header h = {id, 2, devs, {2, {16, 128}}, SM_F32, 16 * 128 * 4};
    sm_reg_target *t;
    int nt, ready;
    int64_t left;
    /* header errors */
    struct {
        sm_svc_upload_header h;
        sm_err code;
        const char *words;
    } bad[] = {
        {{id, 2, devs, {2, {16, 64}}, SM_F32, 16 * 64 * 4}, SM_EINVAL, "shard shape"},
        {{id, 2, devs, {2, {16, 128}}, SM_F64, 16 * 128 * 4}, SM_EINVAL, "dtype"},
        {{id, 2, devs, {2, {16, 128}}, SM_F32, 7}, SM_EINVAL, "bytes"},
        {{{99}, 2, devs, {2, {16, 128}}, SM_F32, 16 * 128 * 4}, SM_ENOTFOUND, "99"},
        {{id, 0, devs, {2, {16, 128}}, SM_F32, 16 * 128 * 4}, SM_EINVAL, "devices"},
    };
    for (int k = 0; k < N(bad); k++) {
        ck_assert_int_eq(
            sm_registry_upload_begin(r, &bad[k].h, T0, &t, &nt, &left, err, sizeof err),
            bad[k].code);
        ck_assert_msg(strstr(err, bad[k].words), "case %d: %s", k, err);
    }
    int32_t odd[2] = {1, 2};
    h.devices = odd;
    ck_assert_int_eq(sm_registry_upload_begin(r, &h, T0, &t, &nt, &left, err, sizeof err),
                     SM_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "different boxes"));
    int32_t out[2] = {2, 42};
    h.devices = out;
    ck_assert_int_eq(sm_registry_upload_begin(r, &h, T0, &t, &nt, &left, err, sizeof err),
                     SM_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "device 42"));
    h.devices = devs;
    ck_assert_int_eq(sm_registry_upload_begin(r, &h, T0 + 5, &t, &nt, &left, err, sizeof err),
                     SM_OK);
    ck_assert_int_eq(nt, 1);
    ck_assert_int_eq(t[0].worker_id, 2);
    ck_assert_int_eq(t[0].ndevices, 2);
    ck_assert_int_eq(left, 60000 - 5);
    free(t);
    /* a second upload of the same devices while the first runs */
    ck_assert_int_eq(sm_registry_upload_begin(r, &h, T0, &t, &nt, &left, err, sizeof err),
                     SM_EPRECONDITION);
    ck_assert_ptr_nonnull(strstr(err, "being uploaded"));
    /* a failed upload may be sent again */
    ck_assert_int_eq(sm_registry_upload_end(r, id, devs, 2, 0, &ready, err, sizeof err), SM_OK);
    ck_assert_int_eq(sm_registry_upload_begin(r, &h, T0, &t, &nt, &left, err, sizeof err), SM_OK);
    free(t);
    ck_assert_int_eq(sm_registry_upload_end(r, id, devs, 2, 1, &ready, err, sizeof err), SM_OK);
    ck_assert_int_eq(ready, 0);
    ck_assert_int_eq(sm_registry_upload_begin(r, &h, T0, &t, &nt, &left, err, sizeof err),
                     SM_EPRECONDITION);
    ck_assert_ptr_nonnull(strstr(err, "already has its data"));
    sm_array_id got;
    sm_reg_target w;
    ck_assert_int_eq(
        sm_registry_download_begin(r, (sm_array_ref){{0}, "a"}, 2, &got, &w, err, sizeof err),
        SM_EPRECONDITION);
    ck_assert_str_eq(err, "array 'a' is pending (2 of 8 shards arrived)");
    for (int k = 0; k < 4; k++) {
        if (k == 1)
            continue;
        int32_t d[2] = {2 * k, 2 * k + 1};
        ready = reg_upload_ok(r, id, d, 2, (sm_shape){2, {16, 128}}, NULL);
    }
    ck_assert_int_eq(ready, 1);
    sm_array_info info = reg_describe(r, (sm_array_ref){id, NULL});
    ck_assert_int_eq(info.state, SM_ARRAY_READY);
    ck_assert_int_eq(info.shards[5].present, 1);
    ck_assert_int_eq(info.shards[5].replica_id, 1);
    ck_assert_int_eq(info.bytes, 64 * 128 * 4);
    sm_array_info_free(&info);
    ck_assert_int_eq(
        sm_registry_download_begin(r, (sm_array_ref){{0}, "a"}, 5, &got, &w, err, sizeof err),
        SM_OK);
    ck_assert_int_eq(w.worker_id, 3);
    ck_assert_int_eq(
        sm_registry_download_begin(r, (sm_array_ref){{0}, "a"}, 50, &got, &w, err, sizeof err),
        SM_EINVAL);
    sm_registry_free(r);
}
END_TEST

START_TEST(test_registry_deadline)
{
    sm_registry *r = reg_with_mesh(4, 2, "i=4,j=2");
    char err[256];
    sm_array_id id = reg_array_ok(r, "a", "P('i', 'j')", SM_PUT_SHARDS, 100);
    int32_t d0 = 0;
    int ready;
    for (int k = 0; k < 6; k++) {
        d0 = k;
        reg_upload_ok(r, id, &d0, 1, (sm_shape){2, {16, 64}}, NULL);
    }
    sm_reg_free *f = NULL;
    int nf = 0;
    sm_registry_reap(r, T0 + 99, 1000000, &f, &nf);
    ck_assert_int_eq(nf, 0);
    sm_registry_reap(r, T0 + 100, 1000000, &f, &nf);
    ck_assert_int_eq(nf, 4); /* every device, filled or not (direct uploads) */
    ck_assert_int_eq(f[0].t.ndevices, 2);
    free(f);
    sm_array_info info = reg_describe(r, (sm_array_ref){id, NULL});
    ck_assert_int_eq(info.state, SM_ARRAY_FAILED);
    ck_assert_str_eq(
        info.error, "array 'a' failed: devices 6,7 never received data before the 100 ms deadline");
    ck_assert_int_eq(info.shards[0].present, 0);
    sm_array_info_free(&info);
    /* an upload finishing after the failure is told to free its data */
    ck_assert_int_eq(sm_registry_upload_end(r, id, &d0, 1, 1, &ready, err, sizeof err),
                     SM_EPRECONDITION);
    sm_registry_free(r);
}
END_TEST

START_TEST(test_registry_local)
{
    sm_registry *r = reg_with_mesh(4, 2, "i=4,j=2");
    sm_svc_create_array_reply rep;
    char err[256];
    sm_svc_create_array_req req = {0};
    req.name = "loc";
    req.dtype = SM_F32;
    req.sharding.mesh_name = "m";
    ck_assert_int_eq(sm_pspec_parse("P(None, ('i','j'))", &req.sharding.spec, err, sizeof err),
                     SM_OK);
    req.kind = SM_PUT_LOCAL;
    req.process = 1;
    req.local_shape = (sm_shape){2, {64, 32}};
    req.deadline_ms = 50;
    ck_assert_int_eq(sm_registry_array_create(r, &req, T0, &rep, err, sizeof err), SM_OK);
    ck_assert_int_eq(rep.array.shape.dims[1], 128);
    ck_assert_int_eq(rep.ntargets, 2);
    ck_assert_int_eq(rep.targets[1].devices[0], 3);
    ck_assert_int_eq(rep.targets[1].local_slice.r[1].start, 16);
    sm_array_id id = rep.array.id;
    reply_free(&rep);
    /* a later part must agree */
    req.process = 2;
    req.local_shape = (sm_shape){2, {64, 16}};
    ck_assert_int_eq(sm_registry_array_create(r, &req, T0, &rep, err, sizeof err), SM_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "[64,32]"));
    req.local_shape = (sm_shape){2, {64, 32}};
    req.dtype = SM_I32;
    ck_assert_int_eq(sm_registry_array_create(r, &req, T0, &rep, err, sizeof err), SM_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "dtype"));
    req.dtype = SM_F32;
    req.process = 9;
    ck_assert_int_eq(sm_registry_array_create(r, &req, T0, &rep, err, sizeof err), SM_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "process 9"));
    req.process = 2;
    ck_assert_int_eq(sm_registry_array_create(r, &req, T0, &rep, err, sizeof err), SM_OK);
    ck_assert_int_eq(rep.array.id.v, id.v);
    ck_assert_int_eq(rep.targets[0].devices[0], 4);
    reply_free(&rep);
    /* processes 0..3 upload, except 1 and 3 */
    for (int p = 0; p < 4; p += 2)
        for (int k = 0; k < 2; k++) {
            int32_t d = 2 * p + k;
            reg_upload_ok(r, id, &d, 1, (sm_shape){2, {64, 16}}, NULL);
        }
    sm_reg_free *f = NULL;
    int nf = 0;
    sm_registry_reap(r, T0 + 60, 1000000, &f, &nf);
    free(f);
    sm_array_info info = reg_describe(r, (sm_array_ref){id, NULL});
    ck_assert_int_eq(info.state, SM_ARRAY_FAILED);
    ck_assert_str_eq(info.error, "array 'loc' failed: processes 1,3 never sent their parts "
                                 "before the 50 ms deadline");
    sm_array_info_free(&info);
    sm_registry_free(r);
}
END_TEST

/* A replicated array outlives a worker's loss (DEGRADED, readable) and is
 * repaired when the worker registers again under its id: its missing
 * shards are copied back from the live copies. */
START_TEST(test_registry_repair)
{
    sm_registry *r = reg_with_mesh(2, 4, "i=2,j=4");
    char err[256];
    int nt;
    /* columns over j, replicated over i: each block on both workers */
    sm_array_id cols = reg_array_ok(r, "cols", "P(None, 'j')", SM_PUT_WHOLE, 0);
    for (int k = 0; k < 4; k++) {
        int32_t pair[2] = {k, 4 + k};
        ck_assert_int_eq(reg_upload_ok(r, cols, pair, 2, (sm_shape){2, {64, 32}}, &nt), k == 3);
        ck_assert_int_eq(nt, 2);
    }
    sm_reg_free *f = NULL;
    int nf = 0;
    ck_assert_int_eq(sm_registry_worker_lose(r, 1, -1, "killed", &f, &nf), 1);
    free(f);
    sm_array_info info = reg_describe(r, (sm_array_ref){cols, NULL});
    ck_assert_int_eq(info.state, SM_ARRAY_DEGRADED);
    ck_assert_ptr_nonnull(strstr(info.error, "devices 0,1,2,3 are gone (worker 1 at "
                                             "127.0.0.1:9000: killed)"));
    sm_array_info_free(&info);
    /* nothing to repair while worker 1 is away; worker 2 holds all it should */
    sm_reg_repair *reps;
    int nr;
    ck_assert_int_eq(sm_registry_repairs_begin(r, 1, T0, &reps, &nr, err, sizeof err), SM_OK);
    ck_assert_int_eq(nr, 0);
    ck_assert_int_eq(sm_registry_repairs_begin(r, 2, T0, &reps, &nr, err, sizeof err), SM_OK);
    ck_assert_int_eq(nr, 0);
    /* worker 1 comes back empty under its id and devices */
    int32_t devs[4] = {0, 1, 2, 3};
    sm_svc_register_req again = {"127.0.0.1:9100", 4, 0, "host", {1}, devs, 0, NULL};
    sm_svc_register_reply rr;
    ck_assert_int_eq(st_worker_add(r, &again, &rr, err, sizeof err), SM_OK);
    ck_assert_int_eq(rr.worker_id.v, 1);
    info = reg_describe(r, (sm_array_ref){cols, NULL});
    ck_assert_int_eq(info.state, SM_ARRAY_DEGRADED);
    ck_assert_ptr_nonnull(strstr(info.error, "came back without some of its shards"));
    sm_array_info_free(&info);
    ck_assert_int_eq(sm_registry_repairs_begin(r, 1, T0, &reps, &nr, err, sizeof err), SM_OK);
    ck_assert_int_eq(nr, 1);
    const sm_reg_assemble *pa = &reps[0].part;
    ck_assert_int_eq(reps[0].array.v, cols.v);
    ck_assert_int_eq(pa->t.worker_id, 1);
    ck_assert_int_eq(pa->req.array_id.v, cols.v);
    ck_assert_int_eq(pa->req.nshards, 4);
    for (int k = 0; k < 4; k++) {
        const sm_svc_assemble_shard *sh = &pa->req.shards[k];
        ck_assert_int_eq(sh->device, k);
        ck_assert_int_eq(sh->npieces, 1);
        /* device k's copy is device 4 + k's (same column block), on worker 2 */
        ck_assert_int_eq(sh->pieces[0].src_device, 4 + k);
        ck_assert_str_eq(sh->pieces[0].src_address, "127.0.0.1:9001");
        ck_assert_int_eq(sh->pieces[0].src_box.r[0].stop, 64);
        ck_assert_int_eq(sh->pieces[0].src_box.r[1].stop, 32);
    }
    /* in flight: not handed out twice */
    sm_reg_repair *again_reps;
    int nagain;
    ck_assert_int_eq(sm_registry_repairs_begin(r, 1, T0, &again_reps, &nagain, err, sizeof err),
                     SM_OK);
    ck_assert_int_eq(nagain, 0);
    /* a failed copy is tried again a second later */
    sm_registry_repair_end(r, &reps[0], T0, 0, "peer gone");
    sm_registry_repairs_free(reps, nr);
    ck_assert_int_eq(sm_registry_repairs_begin(r, 1, T0 + 500, &reps, &nr, err, sizeof err), SM_OK);
    ck_assert_int_eq(nr, 0);
    ck_assert_int_eq(sm_registry_repairs_begin(r, 1, T0 + 1000, &reps, &nr, err, sizeof err),
                     SM_OK);
    ck_assert_int_eq(nr, 1);
    sm_registry_repair_end(r, &reps[0], T0 + 1000, 1, "");
    sm_registry_repairs_free(reps, nr);
    info = reg_describe(r, (sm_array_ref){cols, NULL});
    ck_assert_int_eq(info.state, SM_ARRAY_READY);
    ck_assert_str_eq(info.error, "");
    for (int k = 0; k < 8; k++)
        ck_assert_int_eq(info.shards[k].present, 1);
    sm_array_info_free(&info);
    sm_registry_free(r);
}
END_TEST

/* Replicate 2: one copy of every block one worker alone holds, on another
 * worker, each copy on a device of its own, made by repairs like a lost
 * shard's; the array then survives either worker's loss. (Blocks already on
 * two workers get none: e2e_durable.) */
START_TEST(test_registry_replicate)
{
    sm_registry *r = reg_with_mesh(2, 4, "i=2,j=4");
    char err[256];
    int nt;
    int32_t all[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    /* rows over i: worker 1 holds rows 0:32 on devices 0-3, worker 2 the rest */
    sm_array_id rows = reg_array_ok(r, "rows", "P('i')", SM_PUT_WHOLE, 0);
    ck_assert_int_eq(reg_upload_ok(r, rows, all, 4, (sm_shape){2, {32, 128}}, &nt), 0);
    sm_svc_replicate_req rq = {{rows, NULL}, 2, 0};
    sm_reg_repair *reps = NULL;
    sm_reg_free *frees = NULL;
    int nr = 0, nf = 0;
    /* pending: refused */
    ck_assert_int_eq(sm_registry_replicate_begin(r, &rq, &reps, &nr, &frees, &nf, err, sizeof err),
                     SM_EPRECONDITION);
    ck_assert_int_eq(reg_upload_ok(r, rows, all + 4, 4, (sm_shape){2, {32, 128}}, &nt), 1);
    rq.replicas = 3;
    ck_assert_int_eq(sm_registry_replicate_begin(r, &rq, &reps, &nr, &frees, &nf, err, sizeof err),
                     SM_EINVAL);
    rq.replicas = 2;
    ck_assert_msg(sm_registry_replicate_begin(r, &rq, &reps, &nr, &frees, &nf, err, sizeof err) ==
                      SM_OK,
                  "%s", err);
    /* two blocks (rows 0:32 on worker 1, rows 32:64 on worker 2): a copy of
     * each on the other worker, made by one repair per worker */
    ck_assert_int_eq(nr, 2);
    for (int k = 0; k < nr; k++) {
        const sm_reg_assemble *pa = &reps[k].part;
        ck_assert_int_eq(pa->req.nshards, 1);
        ck_assert(pa->req.array_id.v != rows.v); /* stored under the copy id */
        uint32_t from = pa->t.worker_id == 1 ? 2 : 1;
        ck_assert_str_eq(pa->req.shards[0].pieces[0].src_address,
                         from == 1 ? "127.0.0.1:9000" : "127.0.0.1:9001");
        ck_assert_int_eq(pa->req.shards[0].pieces[0].src_array.v, rows.v);
        ck_assert_int_eq(pa->req.shards[0].shape.dims[0], 32);
        ck_assert_int_eq(sm_registry_repair_end(r, &reps[k], T0, 1, ""), 1);
    }
    sm_registry_repairs_free(reps, nr);
    sm_array_info info = reg_describe(r, (sm_array_ref){rows, NULL});
    ck_assert_int_eq(info.ncopies, 2);
    for (int k = 0; k < 2; k++) {
        ck_assert_int_eq(info.copies[k].present, 1);
        ck_assert_int_eq(info.copies[k].replica_id, -1);
        ck_assert(info.copies[k].stored_as != 0);
        ck_assert_int_eq(info.copies[k].index.r[0].start, k ? 32 : 0);
        ck_assert_uint_eq(info.copies[k].worker_id.v, k ? 1 : 2);
    }
    sm_array_info_free(&info);
    /* worker 2 is lost: every block still has a live copy */
    sm_reg_free *f = NULL;
    int nfr = 0;
    ck_assert_int_eq(sm_registry_worker_lose(r, 2, -1, "killed", &f, &nfr), 1);
    free(f);
    info = reg_describe(r, (sm_array_ref){rows, NULL});
    ck_assert_int_eq(info.state, SM_ARRAY_DEGRADED);
    sm_array_info_free(&info);
    /* deleting frees the copies under their id */
    f = NULL;
    nfr = 0;
    ck_assert_int_eq(
        sm_registry_array_delete(r, (sm_array_ref){rows, NULL}, &f, &nfr, err, sizeof err), SM_OK);
    int copies_freed = 0;
    for (int k = 0; k < nfr; k++)
        copies_freed += f[k].array.v != rows.v;
    ck_assert_int_eq(copies_freed, 1); /* worker 1's copy; worker 2 is gone */
    free(f);
    sm_registry_free(r);
}
END_TEST

START_TEST(test_registry_lost_worker)
{
    sm_registry *r = reg_with_mesh(2, 4, "i=2,j=4");
    sm_svc_create_array_reply rep;
    char err[256];
    sm_array_id id = reg_array_ok(r, "ready", "P()", SM_PUT_WHOLE, 0);
    int32_t all[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    int nt;
    ck_assert_int_eq(reg_upload_ok(r, id, all, 8, g64x128, &nt), 1);
    ck_assert_int_eq(nt, 2);
    /* rows over i: worker 2 alone holds rows 32:64 */
    sm_array_id rows = reg_array_ok(r, "rows", "P('i')", SM_PUT_WHOLE, 0);
    ck_assert_int_eq(reg_upload_ok(r, rows, all, 4, (sm_shape){2, {32, 128}}, &nt), 0);
    ck_assert_int_eq(reg_upload_ok(r, rows, all + 4, 4, (sm_shape){2, {32, 128}}, &nt), 1);
    reg_array_ok(r, "pend", "P()", SM_PUT_WHOLE, 0);
    /* worker 1 keeps beating, worker 2 goes silent */
    sm_svc_heartbeat_req hb = {.worker_id = {1}, .epoch = sm_registry_epoch(r), .ndevices = 4};
    ck_assert_int_eq(sm_registry_worker_heartbeat(r, &hb, T0 + 2500), 1);
    sm_reg_free *f = NULL;
    int nf = 0;
    sm_registry_reap(r, T0 + 3000, 3000, &f, &nf);
    ck_assert_int_eq(sm_registry_workers_alive(r), 2);
    sm_registry_reap(r, T0 + 3001, 3000, &f, &nf);
    ck_assert_int_eq(sm_registry_workers_alive(r), 1);
    free(f);
    /* replicated on both workers: every block still has a live copy */
    sm_array_info info = reg_describe(r, (sm_array_ref){{0}, "ready"});
    ck_assert_int_eq(info.state, SM_ARRAY_DEGRADED);
    ck_assert_str_eq(info.error,
                     "array 'ready' is degraded: devices 4,5,6,7 are gone (worker 2 at "
                     "127.0.0.1:9001: no heartbeat for 3001 ms); every block still has a copy "
                     "on a live worker, so it can be read and resharded, and the missing shards "
                     "are copied back when their worker returns");
    ck_assert_int_eq(info.shards[0].present, 1);
    ck_assert_int_eq(info.shards[4].present, 0);
    sm_array_info_free(&info);
    info = reg_describe(r, (sm_array_ref){{0}, "rows"});
    ck_assert_int_eq(info.state, SM_ARRAY_LOST);
    ck_assert_ptr_nonnull(strstr(info.error, "array 'rows' is lost: devices 4,5,6,7 are gone"));
    sm_array_info_free(&info);
    info = reg_describe(r, (sm_array_ref){{0}, "pend"});
    ck_assert_int_eq(info.state, SM_ARRAY_FAILED);
    sm_array_info_free(&info);
    hb.worker_id.v = 2;
    ck_assert_int_eq(sm_registry_worker_heartbeat(r, &hb, T0 + 3002), 0);
    /* the lost worker's process index can be taken again */
    sm_svc_register_req again = {"127.0.0.1:9001", 4, 1, "h"};
    sm_svc_register_reply rr;
    ck_assert_int_eq(st_worker_add(r, &again, &rr, err, sizeof err), SM_OK);
    ck_assert_int_eq(rr.worker_id.v, 3);
    ck_assert_int_eq(rr.devices[0], 8);
    /* a new array over the old mesh is refused: its devices are gone */
    ck_assert_int_eq(reg_array(r, "x", "m", "P()", SM_PUT_WHOLE, 0, &rep, err, sizeof err),
                     SM_EUNAVAILABLE);
    /* loss by process index (a local worker exited) */
    f = NULL;
    nf = 0;
    ck_assert_int_eq(sm_registry_worker_lose(r, 0, 1, "exited", &f, &nf), 1);
    ck_assert_int_eq(sm_registry_worker_lose(r, 0, 1, "exited", &f, &nf), 0);
    free(f);
    sm_registry_free(r);
}
END_TEST

START_TEST(test_registry_reshard)
{
    sm_registry *r = reg_with_mesh(4, 2, "i=4,j=2");
    char err[256];
    sm_array_id id = reg_array_ok(r, "a", "P()", SM_PUT_WHOLE, 0);
    sm_svc_reshard_req rq = {0};
    rq.array.id = id;
    rq.sharding.mesh_name = "m";
    ck_assert_int_eq(sm_pspec_parse("P('i','j')", &rq.sharding.spec, err, sizeof err), SM_OK);
    rq.name = "b";
    sm_array_id nid;
    sm_reg_assemble *parts;
    int np;
    ck_assert_int_eq(sm_registry_reshard_begin(r, &rq, T0, &nid, &parts, &np, err, sizeof err),
                     SM_EPRECONDITION);
    int32_t all[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    reg_upload_ok(r, id, all, 8, g64x128, NULL);
    ck_assert_int_eq(sm_pspec_parse("P('q')", &rq.sharding.spec, err, sizeof err), SM_OK);
    ck_assert_int_eq(sm_registry_reshard_begin(r, &rq, T0, &nid, &parts, &np, err, sizeof err),
                     SM_EINVAL);
    ck_assert_int_eq(sm_pspec_parse("P('i','j')", &rq.sharding.spec, err, sizeof err), SM_OK);
    ck_assert_int_eq(sm_registry_reshard_begin(r, &rq, T0, &nid, &parts, &np, err, sizeof err),
                     SM_OK);
    ck_assert_int_eq(nid.v, 2);
    ck_assert_int_eq(np, 4);
    ck_assert_int_eq(parts[1].t.worker_id, 2);
    ck_assert_int_eq(parts[1].req.nshards, 2);
    ck_assert_int_eq(parts[1].req.array_id.v, 2);
    ck_assert_int_eq(parts[1].req.shards[1].device, 3);
    ck_assert_int_eq(parts[1].req.shards[1].npieces, 1);
    ck_assert_str_eq(parts[1].req.shards[1].pieces[0].src_address, ""); /* local piece */
    ck_assert_int_eq(parts[1].req.shards[1].pieces[0].src_array.v, 1);
    sm_registry_assemble_free(parts, np);
    sm_array_info info;
    ck_assert_int_eq(sm_registry_reshard_end(r, nid, 1, &info, err, sizeof err), SM_OK);
    ck_assert_int_eq(info.state, SM_ARRAY_READY);
    ck_assert_str_eq(info.type, "f32[64@i,128@j]");
    sm_array_info_free(&info);
    /* a failed reshard leaves no array behind */
    rq.name = "c";
    ck_assert_int_eq(sm_registry_reshard_begin(r, &rq, T0, &nid, &parts, &np, err, sizeof err),
                     SM_OK);
    sm_registry_assemble_free(parts, np);
    ck_assert_int_eq(sm_registry_reshard_end(r, nid, 0, &info, err, sizeof err), SM_OK);
    ck_assert_int_eq(
        sm_registry_array_describe(r, (sm_array_ref){{0}, "c"}, &info, err, sizeof err),
        SM_ENOTFOUND);
    sm_registry_free(r);
}
END_TEST

START_TEST(test_relay_strip_status)
{
    static const char *const cases[][2] = {
        {"DATA_LOSS: checksum mismatch", "checksum mismatch"},
        {"NOT_FOUND: array 3 does not exist", "array 3 does not exist"},
        {"plain sentence", "plain sentence"},
        {"Mixed: case stays", "Mixed: case stays"},
        {"", ""},
    };
    for (int k = 0; k < N(cases); k++) {
        char buf[128];
        snprintf(buf, sizeof buf, "%s", cases[k][0]);
        sm_relay_strip_status(buf);
        ck_assert_str_eq(buf, cases[k][1]);
    }
}
END_TEST

static Suite *server_plan_suite(void)
{
    Suite *s =
        SUITE_CASE(suite_create("server_plan"), "plan", 0, NULL,
                   {test_targets_table, N(target_cases)}, {test_targets_local_kind_refused},
                   {test_local_targets_table, N(local_cases)}, {test_reshard_rows_to_columns},
                   {test_reshard_same_worker_preferred}, {test_reshard_replica_choice_and_dead});
    return SUITE_CASE(s, "registry", 0, NULL, {test_registry_workers},
                      {test_registry_device_ids_by_process}, {test_registry_meshes},
                      {test_registry_array_names_and_errors}, {test_registry_upload_states},
                      {test_registry_deadline}, {test_registry_local}, {test_registry_lost_worker},
                      {test_registry_repair}, {test_registry_replicate}, {test_registry_reshard},
                      {test_relay_strip_status});
}

int main(void)
{
    sm_log_set_level(SM_LOG_ERROR);
    return suite_main(server_plan_suite());
}
