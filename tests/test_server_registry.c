/* Check suite for the coordinator registry's array index (server/
 * registry_array.c): arrays are found by id and by name through every way
 * an array enters or leaves the registry. Twenty thousand arrays are
 * created, looked up, half deleted (by id and by name), looked up again and
 * listed in creation order; a deleted id stays unknown and a freed name can
 * be taken again; every way of removing an array (delete by id or by name,
 * a failed reshard, a reshard whose output failed meanwhile) frees its id
 * and name alike, and failing arrays (deadline, lost worker) leaves them
 * listed. No network: one worker of one device with a NULL channel and a
 * hand-driven clock. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "registry.h"
#include "sm_log.h"
#include "server_testutil.h"
#include "suite_main.h"

#define N(a)    ((int)(sizeof(a) / sizeof((a)[0])))
#define NARRAYS 20000

static const sm_shape g4 = {1, {4}};

/* A registry with nworkers workers of one device each and mesh "m" (i=1,
 * the first worker's device). */
static sm_registry *reg_create(int nworkers)
{
    sm_registry *r = st_registry(nworkers, 1);
    char err[256];
    sm_mesh m;
    sm_mesh_info mi;
    ck_assert_int_eq(sm_mesh_parse("i=1", NULL, 0, &m, err, sizeof err), SM_OK);
    ck_assert_int_eq(sm_registry_mesh_create(r, "m", &m, 1, &mi, err, sizeof err), SM_OK);
    return r;
}

/* CreateArray of a whole f32[4] named name ("" for none) over mesh "m". */
static sm_err reg_put(sm_registry *r, const char *name, uint32_t deadline_ms, sm_array_id *id,
                      char *err, size_t errlen)
{
    sm_svc_create_array_req req = st_create_req(name, "m", NULL, g4, SM_PUT_WHOLE, deadline_ms);
    sm_svc_create_array_reply rep;
    sm_err e = sm_registry_array_create(r, &req, T0, &rep, err, errlen);
    if (!e) {
        *id = rep.array.id;
        sm_svc_create_array_reply_free(&rep);
    }
    return e;
}

static sm_array_id reg_put_ok(sm_registry *r, const char *name)
{
    char err[256];
    sm_array_id id = {0};
    ck_assert_msg(reg_put(r, name, 0, &id, err, sizeof err) == SM_OK, "%s: %s", name, err);
    ck_assert_uint_ne(id.v, 0);
    return id;
}

/* Uploads the only shard of array id (it turns READY). */
static void reg_fill(sm_registry *r, sm_array_id id)
{
    char err[256];
    int32_t dev = 0;
    sm_svc_upload_header h = {id, 1, &dev, g4, SM_F32, 16};
    sm_reg_target *t;
    int nt, ready;
    int64_t left;
    ck_assert_msg(sm_registry_upload_begin(r, &h, T0, &t, &nt, &left, err, sizeof err) == SM_OK,
                  "%s", err);
    free(t);
    ck_assert_int_eq(sm_registry_upload_end(r, id, &dev, 1, 1, &ready, err, sizeof err), SM_OK);
    ck_assert_int_eq(ready, 1);
}

/* Describes ref; on SM_OK checks that it is array want_id named want_name,
 * otherwise that the error is SM_ENOTFOUND with msg. */
static void reg_expect(sm_registry *r, sm_array_ref ref, uint64_t want_id, const char *want_name,
                       const char *msg)
{
    char err[256] = "";
    sm_array_info info;
    sm_err e = sm_registry_array_describe(r, ref, &info, err, sizeof err);
    if (want_id) {
        ck_assert_msg(e == SM_OK, "%s", err);
        ck_assert_uint_eq(info.id.v, want_id);
        ck_assert_str_eq(info.name, want_name);
        sm_array_info_free(&info);
    } else {
        ck_assert_int_eq(e, SM_ENOTFOUND);
        ck_assert_str_eq(err, msg);
    }
}

static void expect_id(sm_registry *r, uint64_t id, uint64_t want_id, const char *want_name)
{
    char msg[64];
    snprintf(msg, sizeof msg, "array %llu does not exist", (unsigned long long)id);
    reg_expect(r, (sm_array_ref){{id}, NULL}, want_id, want_name, msg);
}

static void expect_name(sm_registry *r, const char *name, uint64_t want_id)
{
    char msg[128];
    snprintf(msg, sizeof msg, "array '%s' does not exist", name);
    reg_expect(r, (sm_array_ref){{0}, name}, want_id, name, msg);
}

/* Checks that ListArrays gives exactly ids[0..n) in this order. */
static void expect_list(sm_registry *r, const uint64_t *ids, int n)
{
    char err[256];
    sm_array_info *l;
    int nl;
    ck_assert_int_eq(sm_registry_array_list(r, &l, &nl, err, sizeof err), SM_OK);
    ck_assert_int_eq(nl, n);
    for (int k = 0; k < n; k++)
        ck_assert_uint_eq(l[k].id.v, ids[k]);
    sm_array_info_list_free(l, nl);
}

static void reg_delete(sm_registry *r, sm_array_ref ref, sm_err want)
{
    char err[256];
    sm_reg_free *f = NULL;
    int nf = 0;
    ck_assert_int_eq(sm_registry_array_delete(r, ref, &f, &nf, err, sizeof err), want);
    free(f);
}

/* Array k of the scale test: even ones are named "a<k>", odd ones not. */
static const char *scale_name(int k, char *buf, size_t len)
{
    snprintf(buf, len, k % 2 ? "" : "a%d", k);
    return buf;
}

START_TEST(test_index_scale)
{
    sm_registry *r = reg_create(1);
    uint64_t *ids = malloc(sizeof *ids * NARRAYS), *left = malloc(sizeof *left * NARRAYS * 2);
    char name[32];
    int nleft = 0;
    ck_assert_ptr_nonnull(ids);
    ck_assert_ptr_nonnull(left);
    for (int k = 0; k < NARRAYS; k++) {
        ids[k] = reg_put_ok(r, scale_name(k, name, sizeof name)).v;
        ck_assert_uint_eq(ids[k], (uint64_t)k + 1);
    }
    for (int k = 0; k < NARRAYS; k++) {
        expect_id(r, ids[k], ids[k], scale_name(k, name, sizeof name));
        if (*scale_name(k, name, sizeof name))
            expect_name(r, name, ids[k]);
    }
    expect_list(r, ids, NARRAYS);
    /* Delete half: k % 4 == 0 (named) by name, k % 4 == 1 (unnamed) by id. */
    for (int k = 0; k < NARRAYS; k++) {
        if (k % 4 == 0)
            reg_delete(r, (sm_array_ref){{0}, scale_name(k, name, sizeof name)}, SM_OK);
        else if (k % 4 == 1)
            reg_delete(r, (sm_array_ref){{ids[k]}, NULL}, SM_OK);
        else
            left[nleft++] = ids[k];
    }
    ck_assert_int_eq(nleft, NARRAYS / 2);
    for (int k = 0; k < NARRAYS; k++) {
        int gone = k % 4 < 2;
        scale_name(k, name, sizeof name);
        expect_id(r, ids[k], gone ? 0 : ids[k], name);
        if (*name)
            expect_name(r, name, gone ? 0 : ids[k]);
    }
    expect_list(r, left, nleft);
    /* Deleting again finds nothing; names still held cannot be taken. */
    reg_delete(r, (sm_array_ref){{ids[0]}, NULL}, SM_ENOTFOUND);
    reg_delete(r, (sm_array_ref){{0}, "a0"}, SM_ENOTFOUND);
    char err[256];
    sm_array_id id;
    ck_assert_int_eq(reg_put(r, "a2", 0, &id, err, sizeof err), SM_EEXIST);
    ck_assert_str_eq(err, "an array named 'a2' already exists");
    /* The freed names are taken again, by new arrays with new ids, listed last. */
    for (int k = 0; k < NARRAYS; k += 4) {
        uint64_t v = reg_put_ok(r, scale_name(k, name, sizeof name)).v;
        ck_assert_uint_eq(v, (uint64_t)NARRAYS + 1 + (uint64_t)k / 4);
        expect_name(r, name, v);
        expect_id(r, ids[k], 0, NULL);
        left[nleft++] = v;
    }
    expect_list(r, left, nleft);
    /* Everything can go, and then nothing is found. */
    for (int k = 0; k < nleft; k++)
        reg_delete(r, (sm_array_ref){{left[k]}, NULL}, SM_OK);
    expect_list(r, NULL, 0);
    for (int k = 0; k < NARRAYS; k += 2)
        expect_name(r, scale_name(k, name, sizeof name), 0);
    free(ids);
    free(left);
    sm_registry_free(r);
}
END_TEST

/* ---- every way out of the registry --------------------------------------- */

typedef enum {
    GO_DELETE_ID,       /* DeleteArray by id */
    GO_DELETE_NAME,     /* DeleteArray by name */
    GO_RESHARD_FAILED,  /* a reshard's copy failed: its new array is removed */
    GO_RESHARD_EXPIRED, /* the reshard's new array failed (deadline) meanwhile */
    STAY_DEADLINE,      /* a pending array past its deadline: FAILED, still listed */
    STAY_WORKER_LOST,   /* a ready array whose worker is lost: LOST, still listed */
} way;

typedef struct {
    const char *name;
    way how;
    sm_array_state state; /* of the array that stays */
} way_case;

static const way_case way_cases[] = {
    {"delete by id", GO_DELETE_ID, 0},
    {"delete by name", GO_DELETE_NAME, 0},
    {"failed reshard", GO_RESHARD_FAILED, 0},
    {"reshard output expired", GO_RESHARD_EXPIRED, 0},
    {"deadline", STAY_DEADLINE, SM_ARRAY_FAILED},
    {"worker lost", STAY_WORKER_LOST, SM_ARRAY_LOST},
};

/* Starts a reshard of src into a new array named "x" over mesh "m". */
static sm_array_id reshard_to_x(sm_registry *r, sm_array_id src, uint32_t deadline_ms)
{
    char err[256];
    sm_svc_reshard_req rq = {0};
    sm_array_id nid;
    sm_reg_assemble *parts;
    int np;
    rq.array.id = src;
    rq.sharding.mesh_name = "m";
    rq.name = "x";
    rq.deadline_ms = deadline_ms;
    ck_assert_msg(sm_registry_reshard_begin(r, &rq, T0, &nid, &parts, &np, err, sizeof err) ==
                      SM_OK,
                  "%s", err);
    sm_registry_assemble_free(parts, np);
    return nid;
}

START_TEST(test_index_ways_out)
{
    const way_case *c = &way_cases[_i];
    sm_registry *r = reg_create(1);
    char err[256];
    sm_reg_free *f = NULL;
    int nf = 0;
    sm_array_info info;
    sm_array_id before = reg_put_ok(r, "before"), x = {0};
    reg_fill(r, before);
    switch (c->how) {
    case GO_DELETE_ID:
    case GO_DELETE_NAME:
    case STAY_WORKER_LOST:
        x = reg_put_ok(r, "x");
        reg_fill(r, x);
        break;
    case GO_RESHARD_FAILED:
    case GO_RESHARD_EXPIRED:
        x = reshard_to_x(r, before, 100);
        break;
    case STAY_DEADLINE:
        ck_assert_int_eq(reg_put(r, "x", 100, &x, err, sizeof err), SM_OK);
        break;
    }
    sm_array_id after = reg_put_ok(r, "after");
    expect_name(r, "x", x.v);
    expect_id(r, x.v, x.v, "x");
    switch (c->how) {
    case GO_DELETE_ID:
        reg_delete(r, (sm_array_ref){x, NULL}, SM_OK);
        break;
    case GO_DELETE_NAME:
        reg_delete(r, (sm_array_ref){{0}, "x"}, SM_OK);
        break;
    case GO_RESHARD_FAILED:
        ck_assert_int_eq(sm_registry_reshard_end(r, x, 0, NULL, err, sizeof err), SM_OK);
        break;
    case GO_RESHARD_EXPIRED:
        sm_registry_reap(r, T0 + 100, 1000000, &f, &nf);
        ck_assert_int_eq(sm_registry_reshard_end(r, x, 1, &info, err, sizeof err),
                         SM_EPRECONDITION);
        break;
    case STAY_DEADLINE:
        sm_registry_reap(r, T0 + 100, 1000000, &f, &nf);
        break;
    case STAY_WORKER_LOST:
        ck_assert_int_eq(sm_registry_worker_lose(r, 1, 0, "exited", &f, &nf), 1);
        break;
    }
    free(f);
    expect_name(r, "before", before.v);
    expect_name(r, "after", after.v);
    if (c->state) { /* still listed, in its place, by id and by name */
        expect_id(r, x.v, x.v, "x");
        expect_name(r, "x", x.v);
        ck_assert_int_eq(
            sm_registry_array_describe(r, (sm_array_ref){{0}, "x"}, &info, err, sizeof err), SM_OK);
        ck_assert_int_eq(info.state, c->state);
        sm_array_info_free(&info);
        uint64_t ids[] = {before.v, x.v, after.v};
        expect_list(r, ids, N(ids));
        if (c->how != STAY_WORKER_LOST) /* else mesh "m" has no worker left */
            ck_assert_int_eq(reg_put(r, "x", 0, &x, err, sizeof err), SM_EEXIST);
    } else { /* gone by id and by name; the name is free again */
        expect_id(r, x.v, 0, NULL);
        expect_name(r, "x", 0);
        uint64_t ids[] = {before.v, after.v, 0};
        expect_list(r, ids, 2);
        ids[2] = reg_put_ok(r, "x").v;
        ck_assert_uint_gt(ids[2], after.v);
        expect_name(r, "x", ids[2]);
        expect_list(r, ids, 3);
    }
    sm_registry_free(r);
}
END_TEST

/* Only a job's result may be unreduced; Reshard neither moves one (that
 * would not sum its blocks) nor makes one. */
START_TEST(test_unreduced_arrays)
{
    sm_registry *r = reg_create(1);
    char err[512];
    sm_svc_create_array_req req = {0};
    sm_svc_create_array_reply rep;
    req.dtype = SM_F32;
    req.has_shape = 1;
    req.shape = g4;
    req.sharding.mesh_name = "m";
    ck_assert_int_eq(sm_pspec_parse("P(unreduced={'i'})", &req.sharding.spec, err, sizeof err),
                     SM_OK);
    req.kind = SM_PUT_WHOLE;
    ck_assert_int_eq(sm_registry_array_create(r, &req, T0, &rep, err, sizeof err),
                     SM_EUNIMPLEMENTED);
    ck_assert_msg(strstr(err, "only a program's results hold partial sums"), "%s", err);
    req.kind = SM_PUT_SHARDS;
    req.job_output = 1;
    ck_assert_msg(sm_registry_array_create(r, &req, T0, &rep, err, sizeof err) == SM_OK, "%s", err);
    sm_array_id u = rep.array.id;
    ck_assert_str_eq(rep.array.type, "f32[4]{U:i}");
    sm_svc_create_array_reply_free(&rep);
    reg_fill(r, u);
    sm_svc_reshard_req rq = {0};
    sm_array_id nid;
    sm_reg_assemble *parts = NULL;
    int np = 0;
    rq.array.id = u;
    rq.sharding.mesh_name = "m";
    ck_assert_int_eq(sm_registry_reshard_begin(r, &rq, T0, &nid, &parts, &np, err, sizeof err),
                     SM_EUNIMPLEMENTED);
    ck_assert_msg(strstr(err, "resharding it sums its blocks"), "%s", err);
    rq.array.id = reg_put_ok(r, "plain");
    reg_fill(r, rq.array.id);
    rq.sharding.spec = req.sharding.spec;
    ck_assert_int_eq(sm_registry_reshard_begin(r, &rq, T0, &nid, &parts, &np, err, sizeof err),
                     SM_EUNIMPLEMENTED);
    ck_assert_msg(strstr(err, "a reshard's target"), "%s", err);
    sm_registry_free(r);
}
END_TEST

/* Process indices and device ids kept for local workers (2 of 4 devices):
 * a worker naming no index that registers first gets index 2 and devices
 * 8..11; the local workers then get theirs, 0 and 1, devices 0..7. */
START_TEST(test_reserved_for_local)
{
    sm_registry *r;
    char err[256];
    ck_assert_int_eq(sm_registry_create(60000, 500, &r, err, sizeof err), SM_OK);
    sm_registry_reserve(r, 2, 4);
    const struct {
        int index, want_index, want_first;
    } rows[] = {{-1, 2, 8}, {0, 0, 0}, {1, 1, 4}, {-1, 3, 12}};
    for (int k = 0; k < N(rows); k++) {
        char addr[32];
        snprintf(addr, sizeof addr, "127.0.0.1:%d", 9100 + k);
        sm_svc_register_req req = {addr, 4, rows[k].index, "host"};
        sm_svc_register_reply rep;
        sm_reg_free *f = NULL;
        int nf = 0;
        ck_assert_msg(sm_registry_worker_add(r, &req, NULL, T0, &rep, &f, &nf, err, sizeof err) ==
                          SM_OK,
                      "row %d: %s", k, err);
        free(f);
        ck_assert_int_eq(rep.process_index, rows[k].want_index);
        ck_assert_int_eq(rep.devices[0], rows[k].want_first);
    }
    sm_registry_free(r);
}
END_TEST

static Suite *server_registry_suite(void)
{
    return SUITE_CASE(suite_create("server_registry"), "index", 120, NULL, {test_index_scale},
                      {test_index_ways_out, N(way_cases)}, {test_unreduced_arrays},
                      {test_reserved_for_local});
}

int main(void)
{
    sm_log_set_level(SM_LOG_ERROR);
    return suite_main(server_registry_suite());
}
