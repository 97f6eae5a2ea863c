/* Check suite for common/rpc/sm_svc, part 1: Coordinator round trips. A
 * real sm_rpc server on 127.0.0.1:0 in the test process serves fake
 * Coordinator handlers (below) that record what they received and answer
 * fixed values; every client call must carry every field across exactly, in
 * both directions. Streams and Worker calls are in test_rpc_svc_stream.c;
 * errors, UNIMPLEMENTED and malformed messages in test_rpc_svc_bad.c. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sm_rpc_msg.h"
#include "sm_svc.h"
#include "suite_main.h"
#include "svc_testutil.h"

#define DL 5000 /* deadline of every call, ms */

/* ---- what the fake handlers received ------------------------------------------ */

typedef struct {
    int has_mesh, default_order;
    sm_mesh mesh;
    char mesh_name[64]; /* "(null)" for NULL */
    sm_mesh_id mesh_id;
    sm_pspec spec;
} rec_sharding;

typedef struct {
    int calls;
    char name[160];
    sm_mesh mesh;
    int default_order;
    sm_mesh_id mesh_id;
    sm_array_ref ref; /* name points at ref_name */
    char ref_name[160];
    /* create_array */
    sm_svc_create_array_req car;
    rec_sharding sh;
    /* reshard */
    sm_svc_reshard_req rs;
    /* register / heartbeat */
    sm_svc_register_req reg;
    char reg_addr[160], reg_host[80];
    sm_svc_heartbeat_req hb;
} rec;

/* The fixed answers and the test's server and channel. */
typedef struct {
    rec r;
    sm_array_info info; /* shards owned */
    sm_mesh_info minfo[2];
    sm_worker_info workers[2];
    sm_rpc_server *srv;
    sm_rpc_channel *ch;
} fixture;

static fixture fx; /* one per forked test */

static void copy_sharding(const sm_sharding_ref *s, rec_sharding *o)
{
    o->has_mesh = s->mesh != NULL;
    if (s->mesh)
        o->mesh = *s->mesh;
    o->default_order = s->default_order;
    snprintf(o->mesh_name, sizeof o->mesh_name, "%s", s->mesh_name ? s->mesh_name : "(null)");
    o->mesh_id = s->mesh_id;
    o->spec = s->spec;
}

static sm_array_info info_copy(const sm_array_info *in)
{
    sm_array_info o = *in;
    o.shards = malloc((size_t)in->nshards * sizeof *o.shards);
    memcpy(o.shards, in->shards, (size_t)in->nshards * sizeof *o.shards);
    return o;
}

/* ---- fake coordinator ------------------------------------------------------------- */

static sm_err f_list_devices(void *u, sm_worker_info **out, int *n, char *err, size_t errlen)
{
    rec *r = u;
    r->calls++;
    *out = malloc(sizeof fx.workers);
    memcpy(*out, fx.workers, sizeof fx.workers);
    *n = 2;
    return SM_OK;
}

static sm_err f_create_mesh(void *u, const char *name, const sm_mesh *mesh, int default_order,
                            sm_mesh_info *out, char *err, size_t errlen)
{
    rec *r = u;
    r->calls++;
    snprintf(r->name, sizeof r->name, "%s", name);
    r->mesh = *mesh;
    r->default_order = default_order;
    *out = fx.minfo[0];
    return SM_OK;
}

static sm_err f_get_mesh(void *u, sm_mesh_id id, const char *name, sm_mesh_info *out, char *err,
                         size_t errlen)
{
    rec *r = u;
    r->calls++;
    r->mesh_id = id;
    snprintf(r->name, sizeof r->name, "%s", name);
    *out = fx.minfo[1];
    return SM_OK;
}

static sm_err f_list_meshes(void *u, sm_mesh_info **out, int *n, char *err, size_t errlen)
{
    ((rec *)u)->calls++;
    *out = malloc(sizeof fx.minfo);
    memcpy(*out, fx.minfo, sizeof fx.minfo);
    *n = 2;
    return SM_OK;
}

static sm_err f_create_array(void *u, const sm_svc_create_array_req *req,
                             sm_svc_create_array_reply *out, char *err, size_t errlen)
{
    rec *r = u;
    r->calls++;
    r->car = *req;
    snprintf(r->name, sizeof r->name, "%s", req->name);
    r->car.name = r->name;
    copy_sharding(&req->sharding, &r->sh);
    out->array = info_copy(&fx.info);
    out->ntargets = 2;
    out->targets = calloc(2, sizeof *out->targets);
    for (int t = 0; t < 2; t++) {
        out->targets[t].ndevices = 2;
        out->targets[t].devices = malloc(2 * sizeof(int32_t));
        out->targets[t].devices[0] = fx.info.shards[2 * t].device;
        out->targets[t].devices[1] = fx.info.shards[2 * t + 1].device;
        out->targets[t].global_index = fx.info.shards[2 * t].index;
        out->targets[t].local_slice = (sm_index){2, {{t, t + 1}, {0, 6}}};
    }
    return SM_OK;
}

static void keep_ref(rec *r, sm_array_ref ref)
{
    snprintf(r->ref_name, sizeof r->ref_name, "%s", ref.name);
    r->ref = ref;
    r->ref.name = r->ref_name;
}

static sm_err f_describe(void *u, sm_array_ref ref, sm_array_info *out, char *err, size_t errlen)
{
    rec *r = u;
    r->calls++;
    keep_ref(r, ref);
    *out = info_copy(&fx.info);
    return SM_OK;
}

static sm_err f_list_arrays(void *u, sm_array_info **out, int *n, char *err, size_t errlen)
{
    ((rec *)u)->calls++;
    *out = calloc(2, sizeof **out);
    (*out)[0] = info_copy(&fx.info);
    (*out)[1] = info_copy(&fx.info);
    (*out)[1].id.v = 99;
    snprintf((*out)[1].name, sizeof(*out)[1].name, "second");
    (*out)[1].state = SM_ARRAY_LOST;
    snprintf((*out)[1].error, sizeof(*out)[1].error, "devices 0, 1 are gone with worker 0");
    *n = 2;
    return SM_OK;
}

static sm_err f_delete(void *u, sm_array_ref ref, char *err, size_t errlen)
{
    rec *r = u;
    r->calls++;
    keep_ref(r, ref);
    return SM_OK;
}

static sm_err f_reshard(void *u, const sm_svc_reshard_req *req, sm_array_info *out, char *err,
                        size_t errlen)
{
    rec *r = u;
    r->calls++;
    keep_ref(r, req->array);
    r->rs = *req;
    snprintf(r->name, sizeof r->name, "%s", req->name);
    r->rs.name = r->name;
    copy_sharding(&req->sharding, &r->sh);
    *out = info_copy(&fx.info);
    return SM_OK;
}

static sm_err f_register(void *u, const sm_svc_register_req *req, sm_svc_register_reply *out,
                         char *err, size_t errlen)
{
    rec *r = u;
    r->calls++;
    r->reg = *req;
    snprintf(r->reg_addr, sizeof r->reg_addr, "%s", req->address);
    snprintf(r->reg_host, sizeof r->reg_host, "%s", req->host);
    out->worker_id.v = 5;
    out->ndevices = req->ndevices;
    for (int i = 0; i < req->ndevices; i++)
        out->devices[i] = 40 + i;
    out->process_index = 3;
    out->heartbeat_ms = 500;
    return SM_OK;
}

static sm_err f_heartbeat(void *u, const sm_svc_heartbeat_req *req, int *known, char *err,
                          size_t errlen)
{
    rec *r = u;
    r->calls++;
    r->hb = *req;
    *known = req->worker_id.v == 5;
    return SM_OK;
}

/* Workers are served with no handlers: only Negotiate answers. */
static const sm_svc_worker_ops worker_ops;

static const sm_svc_coord_ops coord_ops = {
    .list_devices = f_list_devices,
    .create_mesh = f_create_mesh,
    .get_mesh = f_get_mesh,
    .list_meshes = f_list_meshes,
    .create_array = f_create_array,
    .describe = f_describe,
    .list_arrays = f_list_arrays,
    .delete_array = f_delete,
    .reshard = f_reshard,
    .register_worker = f_register,
    .heartbeat = f_heartbeat,
};

/* ---- fixture ---------------------------------------------------------------------- */

static void make_answers(void)
{
    char err[256];
    const char *names[] = {"i", "j"};
    const int64_t sizes[] = {2, 2};
    const int32_t devs[] = {3, 2, 1, 0};
    sm_array_info *a = &fx.info;
    ck_assert_int_eq(sm_mesh_init(&a->sharding.mesh, 2, names, sizes, devs, 4, err, sizeof err),
                     SM_OK);
    ck_assert_int_eq(sm_pspec_parse("P('i', None)", &a->sharding.spec, err, sizeof err), SM_OK);
    a->id.v = 17;
    snprintf(a->name, sizeof a->name, "weights");
    a->dtype = SM_F32;
    a->shape = (sm_shape){2, {8, 6}};
    ck_assert_int_eq(
        sm_sharding_shard_shape(&a->sharding, &a->shape, &a->shard_shape, err, sizeof err), SM_OK);
    a->mesh_id.v = 7;
    snprintf(a->mesh_name, sizeof a->mesh_name, "grid");
    sm_sharding_type_str(&a->sharding, a->dtype, &a->shape, a->type, sizeof a->type);
    a->state = SM_ARRAY_READY;
    a->bytes = 8 * 6 * 4;
    sm_device_slice sl[4];
    ck_assert_int_eq(sm_sharding_indices(&a->sharding, &a->shape, sl, err, sizeof err), SM_OK);
    a->nshards = 4;
    a->shards = calloc(4, sizeof *a->shards);
    for (int p = 0; p < 4; p++) {
        sm_shard_info *s = &a->shards[p];
        s->device = sl[p].device;
        s->worker_id.v = (uint32_t)sl[p].device / 2;
        snprintf(s->worker_address, sizeof s->worker_address, "127.0.0.1:%d",
                 5000 + sl[p].device / 2);
        memcpy(s->coords, sl[p].coords, sizeof s->coords);
        s->index = sl[p].index;
        s->replica_id = sl[p].replica_id;
        s->present = p != 3;
    }

    fx.minfo[0].id.v = 7;
    snprintf(fx.minfo[0].name, sizeof fx.minfo[0].name, "grid");
    fx.minfo[0].mesh = a->sharding.mesh;
    fx.minfo[1].id.v = 8;
    ck_assert_int_eq(
        sm_mesh_parse("x=8 axis_types=(Auto)", NULL, 0, &fx.minfo[1].mesh, err, sizeof err), SM_OK);

    for (int w = 0; w < 2; w++) {
        sm_worker_info *wi = &fx.workers[w];
        wi->id.v = (uint32_t)w + 1;
        snprintf(wi->address, sizeof wi->address, "10.0.0.%d:7071", w + 1);
        snprintf(wi->host, sizeof wi->host, "node%d", w);
        wi->process_index = w;
        wi->alive = w == 0;
        wi->ms_since_heartbeat = 250 + w;
        wi->ndevices = 2;
        for (int d = 0; d < 2; d++) {
            wi->devices[d] = 2 * w + d;
            wi->device_bytes[d] = (int64_t)1 << (33 + d);
        }
    }
}

static void setup(void)
{
    char err[256];
    memset(&fx, 0, sizeof fx);
    sm_rpc_init();
    make_answers();
    fx.srv = svt_server();
    ck_assert_int_eq(sm_svc_coord_serve(fx.srv, &coord_ops, &fx.r, "coord-test 1", err, sizeof err),
                     SM_OK);
    ck_assert_int_eq(
        sm_svc_worker_serve(fx.srv, &worker_ops, &fx.r, "worker-test 1", err, sizeof err), SM_OK);
    fx.ch = svt_start(fx.srv);
}

static void teardown(void)
{
    sm_rpc_channel_free(fx.ch);
    sm_rpc_server_free(fx.srv);
    sm_array_info_free(&fx.info);
    sm_rpc_shutdown();
}

/* ---- comparisons ------------------------------------------------------------------ */

static void mesh_same(const sm_mesh *a, const sm_mesh *b)
{
    ck_assert_int_eq(a->naxes, b->naxes);
    for (int i = 0; i < a->naxes; i++) {
        ck_assert_str_eq(a->names[i], b->names[i]);
        ck_assert_int_eq(a->sizes[i], b->sizes[i]);
    }
    ck_assert_int_eq(a->ndevices, b->ndevices);
    for (int i = 0; i < a->ndevices; i++)
        ck_assert_int_eq(a->devices[i], b->devices[i]);
    ck_assert_uint_eq(a->auto_axes, b->auto_axes);
}

static void spec_same(const sm_pspec *a, const sm_pspec *b)
{
    ck_assert_int_eq(a->nentries, b->nentries);
    for (int i = 0; i < a->nentries; i++) {
        ck_assert_int_eq(a->e[i].naxes, b->e[i].naxes);
        ck_assert_int_eq(a->e[i].is_tuple, b->e[i].is_tuple);
        for (int k = 0; k < a->e[i].naxes; k++)
            ck_assert_str_eq(a->e[i].axes[k], b->e[i].axes[k]);
    }
}

static void info_same(const sm_array_info *a, const sm_array_info *b)
{
    ck_assert_uint_eq(a->id.v, b->id.v);
    ck_assert_str_eq(a->name, b->name);
    ck_assert_int_eq(a->dtype, b->dtype);
    shape_same(&a->shape, &b->shape);
    shape_same(&a->shard_shape, &b->shard_shape);
    ck_assert_uint_eq(a->mesh_id.v, b->mesh_id.v);
    ck_assert_str_eq(a->mesh_name, b->mesh_name);
    mesh_same(&a->sharding.mesh, &b->sharding.mesh);
    spec_same(&a->sharding.spec, &b->sharding.spec);
    ck_assert_str_eq(a->type, b->type);
    ck_assert_int_eq(a->state, b->state);
    ck_assert_str_eq(a->error, b->error);
    ck_assert_int_eq(a->bytes, b->bytes);
    ck_assert_int_eq(a->nshards, b->nshards);
    for (int i = 0; i < a->nshards; i++) {
        const sm_shard_info *x = &a->shards[i], *y = &b->shards[i];
        ck_assert_int_eq(x->device, y->device);
        ck_assert_uint_eq(x->worker_id.v, y->worker_id.v);
        ck_assert_str_eq(x->worker_address, y->worker_address);
        for (int k = 0; k < a->sharding.mesh.naxes; k++)
            ck_assert_int_eq(x->coords[k], y->coords[k]);
        index_same(&x->index, &y->index);
        ck_assert_int_eq(x->replica_id, y->replica_id);
        ck_assert_int_eq(x->present, y->present);
    }
}

/* ---- tests ------------------------------------------------------------------------ */

START_TEST(test_negotiate)
{
    char err[256] = "", server[64] = "";
    uint32_t v = 0;
    ck_assert_int_eq(
        sm_svc_negotiate(fx.ch, 0, "test 0.1", &v, server, sizeof server, DL, err, sizeof err),
        SM_OK);
    ck_assert_uint_eq(v, 1);
    ck_assert_str_eq(server, "coord-test 1");
    ck_assert_int_eq(
        sm_svc_negotiate(fx.ch, 1, NULL, &v, server, sizeof server, DL, err, sizeof err), SM_OK);
    ck_assert_str_eq(server, "worker-test 1");
    ck_assert_int_eq(fx.r.calls, 0);
}
END_TEST

START_TEST(test_list_devices)
{
    char err[256] = "";
    sm_worker_info *w = NULL;
    int n = 0;
    ck_assert_int_eq(sm_svc_coord_list_devices(fx.ch, DL, &w, &n, err, sizeof err), SM_OK);
    ck_assert_int_eq(n, 2);
    for (int i = 0; i < 2; i++) {
        const sm_worker_info *a = &w[i], *b = &fx.workers[i];
        ck_assert_uint_eq(a->id.v, b->id.v);
        ck_assert_str_eq(a->address, b->address);
        ck_assert_str_eq(a->host, b->host);
        ck_assert_int_eq(a->process_index, b->process_index);
        ck_assert_int_eq(a->alive, b->alive);
        ck_assert_int_eq(a->ms_since_heartbeat, b->ms_since_heartbeat);
        ck_assert_int_eq(a->ndevices, b->ndevices);
        for (int d = 0; d < a->ndevices; d++) {
            ck_assert_int_eq(a->devices[d], b->devices[d]);
            ck_assert_int_eq(a->device_bytes[d], b->device_bytes[d]);
        }
    }
    free(w);
}
END_TEST

/* _i: 0 explicit device order, 1 default order. */
START_TEST(test_create_mesh)
{
    char err[256] = "";
    sm_mesh m;
    const int32_t devs[] = {5, 4, 3, 2, 1, 0};
    ck_assert_int_eq(
        sm_mesh_parse(_i ? "data=2,model=3" : "data=2,model=3 axis_types=(Explicit, Auto)",
                      _i ? NULL : devs, _i ? 0 : 6, &m, err, sizeof err),
        SM_OK);
    sm_mesh_info out;
    ck_assert_int_eq(sm_svc_coord_create_mesh(fx.ch, DL, "pod", &m, _i, &out, err, sizeof err),
                     SM_OK);
    ck_assert_str_eq(fx.r.name, "pod");
    ck_assert_int_eq(fx.r.default_order, _i);
    if (_i == 0)
        mesh_same(&fx.r.mesh, &m);
    else {
        ck_assert_int_eq(fx.r.mesh.naxes, 2);
        ck_assert_str_eq(fx.r.mesh.names[1], "model");
        ck_assert_int_eq(fx.r.mesh.sizes[1], 3);
    }
    ck_assert_uint_eq(out.id.v, 7);
    ck_assert_str_eq(out.name, "grid");
    mesh_same(&out.mesh, &fx.minfo[0].mesh);
}
END_TEST

START_TEST(test_get_and_list_meshes)
{
    char err[256] = "";
    sm_mesh_info out;
    ck_assert_int_eq(
        sm_svc_coord_get_mesh(fx.ch, DL, (sm_mesh_id){0}, "grid", &out, err, sizeof err), SM_OK);
    ck_assert_uint_eq(fx.r.mesh_id.v, 0);
    ck_assert_str_eq(fx.r.name, "grid");
    ck_assert_uint_eq(out.id.v, 8);
    ck_assert_str_eq(out.name, "");
    mesh_same(&out.mesh, &fx.minfo[1].mesh);
    ck_assert_int_eq(
        sm_svc_coord_get_mesh(fx.ch, DL, (sm_mesh_id){42}, NULL, &out, err, sizeof err), SM_OK);
    ck_assert_uint_eq(fx.r.mesh_id.v, 42);
    ck_assert_str_eq(fx.r.name, "");

    sm_mesh_info *list = NULL;
    int n = 0;
    ck_assert_int_eq(sm_svc_coord_list_meshes(fx.ch, DL, &list, &n, err, sizeof err), SM_OK);
    ck_assert_int_eq(n, 2);
    for (int i = 0; i < 2; i++) {
        ck_assert_uint_eq(list[i].id.v, fx.minfo[i].id.v);
        ck_assert_str_eq(list[i].name, fx.minfo[i].name);
        mesh_same(&list[i].mesh, &fx.minfo[i].mesh);
    }
    free(list);
}
END_TEST

/* The sharding forms of CreateArray: inline with explicit devices, inline
 * with the default order, by name, by id; plus a PUT_LOCAL request. */
typedef struct {
    const char *spec;
    int mesh_inline, default_order;
    const char *mesh_name;
    uint64_t mesh_id;
    sm_put_kind kind;
    int has_shape, scalar;
} car_case;

static const car_case car_cases[] = {
    {"P(('i','j'), None)", 1, 0, NULL, 0, SM_PUT_WHOLE, 1},
    {"P('j', 'i')", 1, 1, NULL, 0, SM_PUT_SHARDS, 1},
    {"P(None, ('j',))", 0, 0, "grid", 0, SM_PUT_WHOLE, 1},
    {"P()", 0, 0, NULL, 7, SM_PUT_LOCAL, 0},
    {"P((), 'i')", 0, 0, "grid", 7, SM_PUT_LOCAL, 1},
    {"P()", 0, 0, "grid", 0, SM_PUT_WHOLE, 1, 1}, /* a scalar shape is still present */
};

START_TEST(test_create_array)
{
    const car_case *c = &car_cases[_i];
    char err[256] = "";
    sm_mesh m;
    const int32_t devs[] = {0, 2, 1, 3};
    ck_assert_int_eq(sm_mesh_parse("i=2,j=2", devs, 4, &m, err, sizeof err), SM_OK);
    sm_svc_create_array_req req;
    memset(&req, 0, sizeof req);
    req.name = _i == 0 ? NULL : "x";
    req.dtype = SM_BF16;
    req.has_shape = c->has_shape;
    req.shape = c->scalar ? (sm_shape){0, {0}} : (sm_shape){3, {8, 4, 2}};
    req.sharding.mesh = c->mesh_inline ? &m : NULL;
    req.sharding.default_order = c->default_order;
    req.sharding.mesh_name = c->mesh_name;
    req.sharding.mesh_id.v = c->mesh_id;
    ck_assert_int_eq(sm_pspec_parse(c->spec, &req.sharding.spec, err, sizeof err), SM_OK);
    req.kind = c->kind;
    req.process = c->kind == SM_PUT_LOCAL ? 3 : 0;
    req.local_shape = (sm_shape){3, {4, 4, 0}};
    req.deadline_ms = 1500;
    sm_svc_create_array_reply out;
    ck_assert_int_eq(sm_svc_coord_create_array(fx.ch, DL, &req, &out, err, sizeof err), SM_OK);

    const rec *r = &fx.r;
    ck_assert_str_eq(r->car.name, _i == 0 ? "" : "x");
    ck_assert_int_eq(r->car.dtype, SM_BF16);
    ck_assert_int_eq(r->car.has_shape, c->has_shape);
    if (c->has_shape)
        shape_same(&r->car.shape, &req.shape);
    ck_assert_int_eq(r->car.kind, c->kind);
    ck_assert_int_eq(r->car.process, req.process);
    shape_same(&r->car.local_shape, &req.local_shape);
    ck_assert_uint_eq(r->car.deadline_ms, 1500);
    ck_assert_int_eq(r->sh.has_mesh, c->mesh_inline);
    ck_assert_int_eq(r->sh.default_order, c->default_order);
    if (c->mesh_inline && !c->default_order)
        mesh_same(&r->sh.mesh, &m);
    if (c->mesh_inline && c->default_order) {
        ck_assert_int_eq(r->sh.mesh.ndevices, 4);
        ck_assert_str_eq(r->sh.mesh.names[0], "i");
    }
    ck_assert_str_eq(r->sh.mesh_name, c->mesh_name ? c->mesh_name : "(null)");
    ck_assert_uint_eq(r->sh.mesh_id.v, c->mesh_id);
    spec_same(&r->sh.spec, &req.sharding.spec);

    info_same(&out.array, &fx.info);
    ck_assert_int_eq(out.ntargets, 2);
    for (int t = 0; t < 2; t++) {
        ck_assert_int_eq(out.targets[t].ndevices, 2);
        ck_assert_int_eq(out.targets[t].devices[0], fx.info.shards[2 * t].device);
        ck_assert_int_eq(out.targets[t].devices[1], fx.info.shards[2 * t + 1].device);
        index_same(&out.targets[t].global_index, &fx.info.shards[2 * t].index);
        sm_index ls = {2, {{t, t + 1}, {0, 6}}};
        index_same(&out.targets[t].local_slice, &ls);
    }
    sm_svc_create_array_reply_free(&out);
}
END_TEST

START_TEST(test_describe_list_delete)
{
    char err[256] = "";
    sm_array_info info;
    ck_assert_int_eq(
        sm_svc_coord_describe(fx.ch, DL, (sm_array_ref){{17}, NULL}, &info, err, sizeof err),
        SM_OK);
    ck_assert_uint_eq(fx.r.ref.id.v, 17);
    ck_assert_str_eq(fx.r.ref.name, "");
    info_same(&info, &fx.info);
    sm_array_info_free(&info);
    ck_assert_int_eq(
        sm_svc_coord_describe(fx.ch, DL, (sm_array_ref){{0}, "weights"}, &info, err, sizeof err),
        SM_OK);
    ck_assert_uint_eq(fx.r.ref.id.v, 0);
    ck_assert_str_eq(fx.r.ref.name, "weights");
    sm_array_info_free(&info);

    sm_array_info *list = NULL;
    int n = 0;
    ck_assert_int_eq(sm_svc_coord_list_arrays(fx.ch, DL, &list, &n, err, sizeof err), SM_OK);
    ck_assert_int_eq(n, 2);
    info_same(&list[0], &fx.info);
    ck_assert_uint_eq(list[1].id.v, 99);
    ck_assert_str_eq(list[1].name, "second");
    ck_assert_int_eq(list[1].state, SM_ARRAY_LOST);
    ck_assert_str_eq(list[1].error, "devices 0, 1 are gone with worker 0");
    ck_assert_int_eq(list[1].nshards, 4);
    sm_array_info_list_free(list, n);

    ck_assert_int_eq(sm_svc_coord_delete(fx.ch, DL, (sm_array_ref){{0}, "old"}, err, sizeof err),
                     SM_OK);
    ck_assert_str_eq(fx.r.ref.name, "old");
    ck_assert_int_eq(fx.r.calls, 4);
}
END_TEST

START_TEST(test_reshard)
{
    char err[256] = "";
    sm_svc_reshard_req req;
    memset(&req, 0, sizeof req);
    req.array = (sm_array_ref){{17}, NULL};
    req.sharding.mesh_name = "grid";
    ck_assert_int_eq(sm_pspec_parse("P(None, ('i', 'j'))", &req.sharding.spec, err, sizeof err),
                     SM_OK);
    req.name = "w2";
    req.deadline_ms = 900;
    sm_array_info out;
    ck_assert_int_eq(sm_svc_coord_reshard(fx.ch, DL, &req, &out, err, sizeof err), SM_OK);
    ck_assert_uint_eq(fx.r.ref.id.v, 17);
    ck_assert_str_eq(fx.r.rs.name, "w2");
    ck_assert_uint_eq(fx.r.rs.deadline_ms, 900);
    ck_assert_int_eq(fx.r.sh.has_mesh, 0);
    ck_assert_str_eq(fx.r.sh.mesh_name, "grid");
    spec_same(&fx.r.sh.spec, &req.sharding.spec);
    info_same(&out, &fx.info);
    sm_array_info_free(&out);
}
END_TEST

START_TEST(test_register_heartbeat)
{
    char err[256] = "";
    sm_svc_register_req req = {"127.0.0.1:7101", 4, -1, "box7"};
    sm_svc_register_reply rep;
    ck_assert_int_eq(sm_svc_coord_register(fx.ch, DL, &req, &rep, err, sizeof err), SM_OK);
    ck_assert_str_eq(fx.r.reg_addr, "127.0.0.1:7101");
    ck_assert_str_eq(fx.r.reg_host, "box7");
    ck_assert_int_eq(fx.r.reg.ndevices, 4);
    ck_assert_int_eq(fx.r.reg.process_index, -1);
    ck_assert_uint_eq(rep.worker_id.v, 5);
    ck_assert_int_eq(rep.ndevices, 4);
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(rep.devices[i], 40 + i);
    ck_assert_int_eq(rep.process_index, 3);
    ck_assert_uint_eq(rep.heartbeat_ms, 500);

    sm_svc_heartbeat_req hb;
    memset(&hb, 0, sizeof hb);
    hb.worker_id.v = 5;
    hb.ndevices = 3;
    hb.device_bytes[0] = 0;
    hb.device_bytes[1] = (int64_t)1 << 40;
    hb.device_bytes[2] = 7;
    int known = -1;
    ck_assert_int_eq(sm_svc_coord_heartbeat(fx.ch, DL, &hb, &known, err, sizeof err), SM_OK);
    ck_assert_int_eq(known, 1);
    ck_assert_uint_eq(fx.r.hb.worker_id.v, 5);
    ck_assert_int_eq(fx.r.hb.ndevices, 3);
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(fx.r.hb.device_bytes[i], hb.device_bytes[i]);
    hb.worker_id.v = 6;
    ck_assert_int_eq(sm_svc_coord_heartbeat(fx.ch, DL, &hb, &known, err, sizeof err), SM_OK);
    ck_assert_int_eq(known, 0);
}
END_TEST

static Suite *svc_suite(void)
{
#define N(a) ((int)(sizeof(a) / sizeof((a)[0])))
    return SUITE_CASE(suite_create("rpc_svc"), "round_trip", 30, SUITE_CHECKED(setup, teardown),
                      {test_negotiate}, {test_list_devices}, {test_create_mesh, 2},
                      {test_get_and_list_meshes}, {test_create_array, N(car_cases)},
                      {test_describe_list_delete}, {test_reshard}, {test_register_heartbeat});
#undef N
}

int main(void)
{
    return suite_main(svc_suite());
}
