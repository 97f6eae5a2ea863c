/* Check suite for common/rpc/sm_svc, part 2: what goes wrong. Malformed
 * requests built with the generated protobuf-c types and sent with raw
 * sm_rpc calls must be refused with SM_EINVAL naming the field, without
 * calling the handler; handler errors must reach the client as the same
 * sm_err with their sentence (unary and both streams); NULL ops answer
 * SM_EUNIMPLEMENTED; Negotiate refuses ranges that do not overlap; a
 * malformed reply is SM_EFORMAT on the client. Round trips are in
 * test_rpc_svc.c. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sm_checksum.h"
#include "sm_rpc_msg.h"
#include "sm_rpc_proto.h"
#include "sm_svc.h"
#include "suite_main.h"
#include "svc_testutil.h"

#define DL 5000

#define COORD(m)  "/shmap.v1.Coordinator/" m
#define WORKER(m) "/shmap.v1.Worker/" m

/* ---- fake handlers: count calls, answer per mode -------------------------------- */

typedef enum { MODE_OK, MODE_FAIL, MODE_FAIL_SILENT, MODE_BAD_REPLY } mode;

typedef struct {
    int calls;
    mode mode;
} rec;

typedef struct {
    rec r;
    sm_rpc_server *srv, *empty;
    sm_rpc_channel *ch, *ch_empty;
} fixture;

static fixture fx; /* one per forked test */

static sm_err f_create_mesh(void *u, const char *name, const sm_mesh *mesh, int default_order,
                            sm_mesh_info *out, char *err, size_t errlen)
{
    ((rec *)u)->calls++;
    out->mesh = *mesh;
    return SM_OK;
}

static sm_err f_get_mesh(void *u, sm_mesh_id id, const char *name, sm_mesh_info *out, char *err,
                         size_t errlen)
{
    ((rec *)u)->calls++;
    return sm_fail(err, errlen, SM_ENOTFOUND, "mesh '%s' does not exist", name);
}

static sm_err f_create_array(void *u, const sm_svc_create_array_req *req,
                             sm_svc_create_array_reply *out, char *err, size_t errlen)
{
    ((rec *)u)->calls++;
    char e2[128];
    sm_mesh m;
    const char *names[] = {"i"};
    const int64_t sizes[] = {1};
    sm_mesh_init(&m, 1, names, sizes, NULL, 0, e2, sizeof e2);
    out->array.sharding.mesh = m;
    out->array.state = SM_ARRAY_PENDING;
    return SM_OK;
}

/* Every call fails as the mode says; MODE_BAD_REPLY returns a bad dtype. */
static sm_err f_describe(void *u, sm_array_ref ref, sm_array_info *out, char *err, size_t errlen)
{
    rec *r = u;
    r->calls++;
    if (r->mode == MODE_FAIL_SILENT)
        return SM_EPRECONDITION;
    if (r->mode == MODE_BAD_REPLY) {
        const char *names[] = {"i"};
        const int64_t sizes[] = {1};
        sm_mesh_init(&out->sharding.mesh, 1, names, sizes, NULL, 0, err, errlen);
        out->state = SM_ARRAY_READY;
        out->dtype = (sm_dtype)42;
        out->nshards = 1;
        out->shards = calloc(1, sizeof *out->shards);
        return SM_OK;
    }
    return sm_fail(err, errlen, SM_ENOTFOUND, "array %llu does not exist",
                   (unsigned long long)ref.id.v);
}

static sm_err f_reshard(void *u, const sm_svc_reshard_req *req, sm_array_info *out, char *err,
                        size_t errlen)
{
    ((rec *)u)->calls++;
    return sm_fail(err, errlen, SM_EINTERNAL, "not reached");
}

static sm_err f_register(void *u, const sm_svc_register_req *req, sm_svc_register_reply *out,
                         char *err, size_t errlen)
{
    ((rec *)u)->calls++;
    return SM_OK;
}

static sm_err f_heartbeat(void *u, const sm_svc_heartbeat_req *req, int *known, char *err,
                          size_t errlen)
{
    ((rec *)u)->calls++;
    return SM_OK;
}

/* Reads everything, then fails (as a checksum mismatch would). */
static sm_err f_upload(void *u, sm_svc_upload_in *in, sm_svc_upload_reply *out, char *err,
                       size_t errlen)
{
    rec *r = u;
    r->calls++;
    sm_svc_upload_msg m;
    int end = 0;
    sm_err e;
    while ((e = sm_svc_upload_recv(in, &m, &end, err, errlen)) == SM_OK && !end)
        ;
    if (e)
        return e;
    return sm_fail(err, errlen, SM_EDATALOSS,
                   "checksum mismatch: the shard of array 5 arrived "
                   "damaged");
}

/* One chunk, then the worker is gone. */
static sm_err f_download(void *u, const sm_svc_download_req *req, sm_svc_download_out *out,
                         char *err, size_t errlen)
{
    ((rec *)u)->calls++;
    static const uint8_t bytes[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    sm_svc_chunk c = {1, {1, {2}}, SM_F32, 8, 0, bytes, 8, 0, 0};
    sm_err e = sm_svc_download_send(out, &c, err, errlen);
    if (e)
        return e;
    return sm_fail(err, errlen, SM_EUNAVAILABLE, "worker 2 holding device %d is lost",
                   (int)req->device);
}

static sm_err f_free_array(void *u, sm_array_id id, int ndevices, const int32_t *devices, char *err,
                           size_t errlen)
{
    ((rec *)u)->calls++;
    return SM_OK;
}

static sm_err f_assemble(void *u, const sm_svc_assemble_req *req, int64_t *bytes, char *err,
                         size_t errlen)
{
    ((rec *)u)->calls++;
    return SM_OK;
}

static const sm_svc_coord_ops coord_ops = {
    .create_mesh = f_create_mesh,
    .get_mesh = f_get_mesh,
    .create_array = f_create_array,
    .upload = f_upload,
    .download = f_download,
    .describe = f_describe,
    .reshard = f_reshard,
    .register_worker = f_register,
    .heartbeat = f_heartbeat,
};

static const sm_svc_worker_ops worker_ops = {
    .put_shard = f_upload,
    .get_shard = f_download,
    .free_array = f_free_array,
    .assemble = f_assemble,
};

static const sm_svc_coord_ops no_coord_ops;

static void start(sm_rpc_server **srv, sm_rpc_channel **ch, const sm_svc_coord_ops *c,
                  const sm_svc_worker_ops *w)
{
    char err[256];
    *srv = svt_server();
    ck_assert_int_eq(sm_svc_coord_serve(*srv, c, &fx.r, "coord-bad", err, sizeof err), SM_OK);
    ck_assert_int_eq(sm_svc_worker_serve(*srv, w, &fx.r, "worker-bad", err, sizeof err), SM_OK);
    *ch = svt_start(*srv);
}

static void setup(void)
{
    memset(&fx, 0, sizeof fx);
    sm_rpc_init();
    start(&fx.srv, &fx.ch, &coord_ops, &worker_ops);
    start(&fx.empty, &fx.ch_empty, &no_coord_ops, NULL); /* NULL ops: all unimplemented */
}

static void teardown(void)
{
    sm_rpc_channel_free(fx.ch);
    sm_rpc_channel_free(fx.ch_empty);
    sm_rpc_server_free(fx.srv);
    sm_rpc_server_free(fx.empty);
    sm_rpc_shutdown();
}

/* ---- malformed requests -------------------------------------------------------------- */

/* Storage for one request: a valid baseline of each message, then one
 * field broken by the row. */
typedef struct {
    Shmap__V1__CreateArrayRequest car;
    Shmap__V1__Shape shape, local_shape;
    Shmap__V1__Sharding sh;
    Shmap__V1__Mesh mesh;
    Shmap__V1__PartitionSpec spec;
    Shmap__V1__SpecEntry ent[9], *ents[9];
    char *ent_axes[9];
    char *axis_names[9];
    int64_t dims[9], sizes[9];
    int32_t devs[1100];
    char longname[256];
    Shmap__V1__CreateMeshRequest cm;
    Shmap__V1__ReshardRequest rs;
    Shmap__V1__ArrayRef ar;
    Shmap__V1__RegisterWorkerRequest reg;
    Shmap__V1__HeartbeatRequest hb;
    int64_t bytes[300];
    Shmap__V1__FreeArrayRequest fa;
    Shmap__V1__AssembleRequest as;
    Shmap__V1__AssembleShard ash, *ashp[1];
    Shmap__V1__AssemblePiece ap, *app[1];
    Shmap__V1__Box box;
    int64_t start[2], stop[2], dst[2];
    Shmap__V1__NegotiateRequest ng;
    Shmap__V1__Mesh gm;
} scratch;

static char *longstr(scratch *s, size_t n)
{
    memset(s->longname, 'a', n);
    s->longname[n] = 0;
    return s->longname;
}

/* CreateArrayRequest{name "a", f32[8], mesh i=2 inline, P('i')}. */
static void car_base(scratch *s)
{
    shmap__v1__create_array_request__init(&s->car);
    shmap__v1__shape__init(&s->shape);
    shmap__v1__shape__init(&s->local_shape);
    shmap__v1__sharding__init(&s->sh);
    shmap__v1__mesh__init(&s->mesh);
    shmap__v1__partition_spec__init(&s->spec);
    s->dims[0] = 8;
    s->shape.n_dims = 1;
    s->shape.dims = s->dims;
    static char *const names[9] = {"i", "j", "k", "l", "m", "n", "o", "p", "q"};
    for (int k = 0; k < 9; k++) {
        s->axis_names[k] = names[k];
        s->sizes[k] = 1;
    }
    s->sizes[0] = 2;
    s->mesh.n_axis_names = s->mesh.n_axis_sizes = 1;
    s->mesh.axis_names = s->axis_names;
    s->mesh.axis_sizes = s->sizes;
    for (int k = 0; k < 9; k++) {
        shmap__v1__spec_entry__init(&s->ent[k]);
        s->ents[k] = &s->ent[k];
        s->ent_axes[k] = "i";
        s->ent[k].n_axes = 1;
        s->ent[k].axes = s->ent_axes;
    }
    s->spec.n_entries = 1;
    s->spec.entries = s->ents;
    s->sh.mesh = &s->mesh;
    s->sh.spec = &s->spec;
    s->car.name = "a";
    s->car.dtype = SHMAP__V1__DTYPE__F32;
    s->car.shape = &s->shape;
    s->car.sharding = &s->sh;
    s->car.local_shape = &s->local_shape;
}

typedef struct {
    const char *path;
    int build; /* which mutation (see build()) */
    sm_err code;
    const char *words;
} bad_case;

static const ProtobufCMessageDescriptor *reply_desc(const char *path)
{
    if (strstr(path, "CreateArray"))
        return &shmap__v1__create_array_reply__descriptor;
    if (strstr(path, "CreateMesh") || strstr(path, "GetMesh"))
        return &shmap__v1__mesh__descriptor;
    if (strstr(path, "Reshard") || strstr(path, "Describe"))
        return &shmap__v1__array_info__descriptor;
    if (strstr(path, "RegisterWorker"))
        return &shmap__v1__register_worker_reply__descriptor;
    if (strstr(path, "Heartbeat"))
        return &shmap__v1__heartbeat_reply__descriptor;
    if (strstr(path, "Assemble"))
        return &shmap__v1__assemble_reply__descriptor;
    if (strstr(path, "Negotiate"))
        return &shmap__v1__negotiate_reply__descriptor;
    return &shmap__v1__empty__descriptor;
}

static const bad_case bad_cases[] = {
    {COORD("CreateArray"), 0, SM_OK, NULL},
    {COORD("CreateArray"), 1, SM_EINVAL, "CreateArrayRequest.shape has 9 dimensions"},
    {COORD("CreateArray"), 2, SM_EINVAL, "CreateArrayRequest.shape has dimension 0 of size -4"},
    {COORD("CreateArray"), 3, SM_EINVAL, "CreateArrayRequest.dtype is 99"},
    {COORD("CreateArray"), 4, SM_EINVAL, "CreateArrayRequest.dtype is 0"},
    {COORD("CreateArray"), 5, SM_EINVAL,
     "CreateArrayRequest.sharding.spec.entries[0].axes[0] is 40 bytes long"},
    {COORD("CreateArray"), 6, SM_EINVAL, "spec has 9 entries; at most 8"},
    {COORD("CreateArray"), 7, SM_EINVAL, "entries[0] has 9 axes; at most 8"},
    {COORD("CreateArray"), 8, SM_EINVAL, "empty axis name"},
    {COORD("CreateArray"), 9, SM_EINVAL, "CreateArrayRequest.sharding.mesh has 9 axes"},
    {COORD("CreateArray"), 10, SM_EINVAL, "2 axis names but 1 axis sizes"},
    {COORD("CreateArray"), 11, SM_EINVAL, "has size 0"},
    {COORD("CreateArray"), 12, SM_EINVAL, "appears more than once"},
    {COORD("CreateArray"), 13, SM_EINVAL, "mesh has 1025 devices; at most 1024"},
    {COORD("CreateArray"), 14, SM_EINVAL, "mesh.axis_names[0] is 40 bytes long"},
    {COORD("CreateArray"), 15, SM_EINVAL, "mesh.name is 64 bytes long"},
    {COORD("CreateArray"), 16, SM_EINVAL, "CreateArrayRequest.sharding.mesh is missing"},
    {COORD("CreateArray"), 17, SM_EINVAL, "names no mesh"},
    {COORD("CreateArray"), 18, SM_EINVAL, "CreateArrayRequest.name is 128 bytes long"},
    {COORD("CreateArray"), 19, SM_EINVAL, "CreateArrayRequest.kind is 7"},
    {COORD("CreateArray"), 20, SM_EINVAL, "CreateArrayRequest.local_shape has dimension 1"},
    {COORD("CreateArray"), 21, SM_EINVAL, "4 positions"},
    {COORD("CreateArray"), 22, SM_EINVAL,
     "CreateArrayRequest.sharding.mesh.auto_axes marks axis 1 Auto, but the mesh has 1 axes"},
    {COORD("CreateMesh"), 30, SM_EINVAL, "CreateMeshRequest.mesh has no axes"},
    {COORD("CreateMesh"), 31, SM_EINVAL, "CreateMeshRequest.mesh is missing"},
    {COORD("Reshard"), 32, SM_EINVAL, "ReshardRequest.sharding.spec.entries[0].axes[0] is 40"},
    {COORD("Reshard"), 33, SM_EINVAL, "ReshardRequest.array.name is 200 bytes long"},
    {COORD("RegisterWorker"), 34, SM_EINVAL, "ndevices is 0"},
    {COORD("RegisterWorker"), 35, SM_EINVAL, "ndevices is 300"},
    {COORD("RegisterWorker"), 36, SM_EINVAL, "RegisterWorkerRequest.address is 200 bytes long"},
    {COORD("RegisterWorker"), 37, SM_EINVAL, "process_index is -2"},
    {COORD("Heartbeat"), 38, SM_EINVAL, "HeartbeatRequest has 257 device_bytes; at most 256"},
    {COORD("Describe"), 39, SM_EINVAL, "ArrayRef.name is 200 bytes long"},
    {COORD("GetMesh"), 40, SM_EINVAL, "Mesh.name is 100 bytes long"},
    {WORKER("FreeArray"), 41, SM_EINVAL, "FreeArrayRequest has 1025 devices"},
    {WORKER("Assemble"), 42, SM_OK, NULL},
    {WORKER("Assemble"), 43, SM_EINVAL, "pieces[0].src_box has the range [5, 2) at dimension 1"},
    {WORKER("Assemble"), 44, SM_EINVAL, "src_box has 2 start and 1 stop values"},
    {WORKER("Assemble"), 45, SM_EINVAL, "has 1 dst_offset values but a src_box of rank 2"},
    {WORKER("Assemble"), 46, SM_EINVAL, "AssembleRequest.dtype is 99"},
    {WORKER("Assemble"), 47, SM_EINVAL, "src_box has the range [-1, 2)"},
    {COORD("Negotiate"), 50, SM_EINVAL, "min_version must be <= max_version"},
    {WORKER("Negotiate"), 51, SM_EPRECONDITION, "versions 2 to 3 but worker-bad speaks 1 to 1"},
    {COORD("Negotiate"), 51, SM_EPRECONDITION, "versions 2 to 3 but coord-bad speaks 1 to 1"},
};

static ProtobufCMessage *build(scratch *s, int k)
{
    car_base(s);
    switch (k) {
    case 0:
        break;
    case 1:
        s->shape.n_dims = 9;
        break;
    case 2:
        s->dims[0] = -4;
        break;
    case 3:
        s->car.dtype = (Shmap__V1__DType)99;
        break;
    case 4:
        s->car.dtype = SHMAP__V1__DTYPE__DTYPE_INVALID;
        break;
    case 5:
        s->ent_axes[0] = longstr(s, 40);
        break;
    case 6:
        s->spec.n_entries = 9;
        break;
    case 7:
        s->ent[0].n_axes = 9;
        break;
    case 8:
        s->ent_axes[0] = "";
        break;
    case 9:
        s->mesh.n_axis_names = s->mesh.n_axis_sizes = 9;
        break;
    case 10:
        s->mesh.n_axis_names = 2;
        s->axis_names[1] = "j";
        break;
    case 11:
        s->sizes[0] = 0;
        break;
    case 12:
        s->mesh.n_devices = 2;
        s->mesh.devices = s->devs; /* {0, 0} */
        break;
    case 13:
        s->mesh.n_devices = 1025;
        s->mesh.devices = s->devs;
        break;
    case 14:
        s->axis_names[0] = longstr(s, 40);
        break;
    case 15:
        s->mesh.name = longstr(s, 64);
        break;
    case 16:
        s->car.sharding = NULL;
        break;
    case 17:
        s->mesh.n_axis_names = s->mesh.n_axis_sizes = 0;
        break;
    case 18:
        s->car.name = longstr(s, 128);
        break;
    case 19:
        s->car.kind = (Shmap__V1__PutKind)7;
        break;
    case 20:
        s->local_shape.n_dims = 2;
        s->local_shape.dims = s->dims + 4;
        s->dims[4] = 1;
        s->dims[5] = -1;
        break;
    case 21:
        s->mesh.n_devices = 3;
        s->mesh.devices = s->devs;
        s->sizes[0] = 4;
        s->devs[1] = 1;
        s->devs[2] = 2;
        break;
    case 22:
        s->mesh.auto_axes = 2;
        break;
    case 30:
    case 31:
        shmap__v1__create_mesh_request__init(&s->cm);
        s->mesh.n_axis_names = s->mesh.n_axis_sizes = 0;
        s->mesh.name = "m";
        s->cm.mesh = k == 30 ? &s->mesh : NULL;
        return &s->cm.base;
    case 32:
    case 33:
        shmap__v1__reshard_request__init(&s->rs);
        shmap__v1__array_ref__init(&s->ar);
        s->rs.array = &s->ar;
        s->rs.sharding = &s->sh;
        if (k == 32)
            s->ent_axes[0] = longstr(s, 40);
        else
            s->ar.name = longstr(s, 200);
        return &s->rs.base;
    case 34:
    case 35:
    case 36:
    case 37:
        shmap__v1__register_worker_request__init(&s->reg);
        s->reg.address = "127.0.0.1:1";
        s->reg.ndevices = k == 34 ? 0 : k == 35 ? 300 : 2;
        s->reg.process_index = k == 37 ? -2 : -1;
        if (k == 36)
            s->reg.address = longstr(s, 200);
        return &s->reg.base;
    case 38:
        shmap__v1__heartbeat_request__init(&s->hb);
        s->hb.n_device_bytes = 257;
        s->hb.device_bytes = s->bytes;
        return &s->hb.base;
    case 39:
        shmap__v1__array_ref__init(&s->ar);
        s->ar.name = longstr(s, 200);
        return &s->ar.base;
    case 40:
        shmap__v1__mesh__init(&s->gm);
        s->gm.name = longstr(s, 100);
        return &s->gm.base;
    case 41:
        shmap__v1__free_array_request__init(&s->fa);
        s->fa.n_devices = 1025;
        s->fa.devices = s->devs;
        return &s->fa.base;
    case 42:
    case 43:
    case 44:
    case 45:
    case 46:
    case 47:
        shmap__v1__assemble_request__init(&s->as);
        shmap__v1__assemble_shard__init(&s->ash);
        shmap__v1__assemble_piece__init(&s->ap);
        shmap__v1__box__init(&s->box);
        s->as.dtype = k == 46 ? (Shmap__V1__DType)99 : SHMAP__V1__DTYPE__F64;
        s->as.n_shards = 1;
        s->ashp[0] = &s->ash;
        s->as.shards = s->ashp;
        s->ash.shape = &s->shape;
        s->ash.n_pieces = 1;
        s->app[0] = &s->ap;
        s->ash.pieces = s->app;
        s->ap.src_box = &s->box;
        s->box.n_start = 2;
        s->box.n_stop = k == 44 ? 1 : 2;
        s->box.start = s->start;
        s->box.stop = s->stop;
        s->start[0] = k == 47 ? -1 : 0;
        s->stop[0] = 2;
        s->start[1] = k == 43 ? 5 : 0;
        s->stop[1] = 2;
        s->ap.n_dst_offset = k == 45 ? 1 : 2;
        s->ap.dst_offset = s->dst;
        return &s->as.base;
    case 50:
    case 51:
        shmap__v1__negotiate_request__init(&s->ng);
        s->ng.min_version = k == 50 ? 3 : 2;
        s->ng.max_version = k == 50 ? 1 : 3;
        return &s->ng.base;
    }
    return &s->car.base;
}

START_TEST(test_malformed_unary)
{
    const bad_case *c = &bad_cases[_i];
    scratch *s = calloc(1, sizeof *s);
    ProtobufCMessage *req = build(s, c->build), *rep = NULL;
    char err[512] = "";
    sm_err e = sm_rpc_unary(fx.ch, c->path, req, reply_desc(c->path), &rep, DL, err, sizeof err);
    ck_assert_msg(e == c->code, "%s case %d: got %s (%s), want %s", c->path, c->build,
                  sm_err_name(e), err, sm_err_name(c->code));
    if (c->code == SM_OK) {
        ck_assert_int_eq(fx.r.calls, 1);
        sm_rpc_msg_free(rep);
    } else {
        ck_assert_int_eq(fx.r.calls, 0);
        ck_assert_msg(strstr(err, c->words), "case %d: '%s' lacks '%s'", c->build, err, c->words);
        if (c->code == SM_EINVAL)
            ck_assert_ptr_nonnull(strstr(err, "INVALID_ARGUMENT: "));
    }
    free(s);
}
END_TEST

/* A download request with a bad box never reaches the handler. */
START_TEST(test_malformed_download)
{
    Shmap__V1__DownloadRequest req;
    Shmap__V1__Box box;
    int64_t start[1] = {4}, stop[1] = {3};
    shmap__v1__download_request__init(&req);
    shmap__v1__box__init(&box);
    box.n_start = box.n_stop = 1;
    box.start = start;
    box.stop = stop;
    req.box = &box;
    char err[512] = "";
    sm_rpc_stream *st;
    ck_assert_int_eq(sm_rpc_sstream_open(fx.ch, _i ? WORKER("GetShard") : COORD("Download"),
                                         &req.base, DL, &st, err, sizeof err),
                     SM_OK);
    ProtobufCMessage *m = NULL;
    ck_assert_int_eq(
        sm_rpc_sstream_recv(st, &shmap__v1__data_chunk__descriptor, &m, err, sizeof err),
        SM_EINVAL);
    ck_assert_ptr_null(m);
    ck_assert_ptr_nonnull(strstr(err, "DownloadRequest.box has the range [4, 3)"));
    sm_rpc_stream_free(st);
    ck_assert_int_eq(fx.r.calls, 0);
}
END_TEST

/* An upload message with a bad header: the handler's recv reports it. */
typedef struct {
    int dtype;
    int64_t dim, offset;
    const char *words;
} bad_upload;

static const bad_upload bad_uploads[] = {
    {99, 4, 0, "UploadMsg.header.dtype is 99"},
    {1, -4, 0, "UploadMsg.header.shape has dimension 0 of size -4"},
    {1, 4, -8, "UploadMsg.offset is -8"},
};

START_TEST(test_malformed_upload)
{
    const bad_upload *c = &bad_uploads[_i];
    Shmap__V1__UploadMsg msg;
    Shmap__V1__UploadHeader h;
    Shmap__V1__Shape sh;
    shmap__v1__upload_msg__init(&msg);
    shmap__v1__upload_header__init(&h);
    shmap__v1__shape__init(&sh);
    int64_t dims[1] = {c->dim};
    sh.n_dims = 1;
    sh.dims = dims;
    h.shape = &sh;
    h.dtype = (Shmap__V1__DType)c->dtype;
    msg.header = &h;
    msg.offset = c->offset;
    char err[512] = "";
    sm_rpc_stream *st;
    ck_assert_int_eq(sm_rpc_cstream_open(fx.ch, COORD("Upload"), DL, &st, err, sizeof err), SM_OK);
    sm_err e = sm_rpc_cstream_send(st, &msg.base, err, sizeof err);
    ProtobufCMessage *rep = NULL;
    sm_err f =
        sm_rpc_cstream_finish(st, &shmap__v1__upload_reply__descriptor, &rep, err, sizeof err);
    ck_assert(e == SM_OK || e == SM_EINVAL);
    ck_assert_int_eq(f, SM_EINVAL);
    ck_assert_msg(strstr(err, c->words), "'%s' lacks '%s'", err, c->words);
}
END_TEST

/* ---- handler errors ------------------------------------------------------------------- */

START_TEST(test_handler_error_unary)
{
    char err[512] = "";
    sm_array_info info;
    ck_assert_int_eq(
        sm_svc_coord_describe(fx.ch, DL, (sm_array_ref){{17}, NULL}, &info, err, sizeof err),
        SM_ENOTFOUND);
    ck_assert_str_eq(err, "NOT_FOUND: array 17 does not exist");
    ck_assert_int_eq(info.nshards, 0);
    sm_mesh_info mi;
    ck_assert_int_eq(sm_svc_coord_get_mesh(fx.ch, DL, (sm_mesh_id){0}, "pod", &mi, err, sizeof err),
                     SM_ENOTFOUND);
    ck_assert_str_eq(err, "NOT_FOUND: mesh 'pod' does not exist");
    fx.r.mode = MODE_FAIL_SILENT;
    ck_assert_int_eq(
        sm_svc_coord_describe(fx.ch, DL, (sm_array_ref){{17}, NULL}, &info, err, sizeof err),
        SM_EPRECONDITION);
    ck_assert_str_eq(err, "FAILED_PRECONDITION: failed precondition");
}
END_TEST

START_TEST(test_handler_error_upload)
{
    char err[512] = "";
    sm_svc_upload_stream *st;
    ck_assert_int_eq(sm_svc_upload_open(fx.ch, _i, DL, &st, err, sizeof err), SM_OK);
    int32_t dev = 1;
    uint8_t data[64] = {0};
    sm_svc_upload_msg m = {1, {{5}, 1, &dev, {1, {16}}, SM_F32, 64}, 0, data, 64, 1, 0};
    m.checksum = sm_checksum_oneshot(data, 64) + 1;
    ck_assert_int_eq(sm_svc_upload_send(st, &m, err, sizeof err), SM_OK);
    ck_assert_int_eq(sm_svc_upload_finish(st, NULL, err, sizeof err), SM_EDATALOSS);
    ck_assert_str_eq(err, "DATA_LOSS: checksum mismatch: the shard of array 5 arrived damaged");
}
END_TEST

START_TEST(test_handler_error_download)
{
    char err[512] = "";
    sm_svc_download_req req = {{{5}, NULL}, 9, 0, {0}};
    sm_svc_download_stream *st;
    ck_assert_int_eq(sm_svc_download_open(fx.ch, _i, &req, DL, &st, err, sizeof err), SM_OK);
    sm_svc_chunk c;
    int end = 0;
    ck_assert_int_eq(sm_svc_download_recv(st, &c, &end, err, sizeof err), SM_OK);
    ck_assert_int_eq(end, 0);
    ck_assert_int_eq(c.has_meta, 1);
    ck_assert_uint_eq(c.len, 8);
    ck_assert_int_eq(((const uint8_t *)c.data)[7], 8);
    ck_assert_int_eq(sm_svc_download_recv(st, &c, &end, err, sizeof err), SM_EUNAVAILABLE);
    ck_assert_str_eq(err, "UNAVAILABLE: worker 2 holding device 9 is lost");
    sm_svc_download_free(st);
}
END_TEST

/* Abandoning streams half-way must not leak or hang. */
START_TEST(test_abandon_streams)
{
    char err[512] = "";
    sm_svc_upload_stream *up;
    ck_assert_int_eq(sm_svc_upload_open(fx.ch, 1, DL, &up, err, sizeof err), SM_OK);
    sm_svc_upload_msg m = {0};
    m.len = 4;
    m.data = "abcd";
    ck_assert_int_eq(sm_svc_upload_send(up, &m, err, sizeof err), SM_OK);
    sm_svc_upload_abort(up);
    sm_svc_download_req req = {{{5}, NULL}, 1, 0, {0}};
    sm_svc_download_stream *dl;
    ck_assert_int_eq(sm_svc_download_open(fx.ch, 0, &req, DL, &dl, err, sizeof err), SM_OK);
    sm_svc_download_free(dl);
    sm_svc_download_free(NULL);
    sm_svc_upload_abort(NULL);
}
END_TEST

START_TEST(test_bad_reply)
{
    char err[512] = "";
    sm_array_info info;
    fx.r.mode = MODE_BAD_REPLY;
    ck_assert_int_eq(
        sm_svc_coord_describe(fx.ch, DL, (sm_array_ref){{1}, NULL}, &info, err, sizeof err),
        SM_EFORMAT);
    ck_assert_ptr_nonnull(strstr(err, "/shmap.v1.Coordinator/Describe answered with a malformed"));
    ck_assert_ptr_nonnull(strstr(err, "ArrayInfo.dtype is 43"));
    ck_assert_ptr_null(info.shards);
}
END_TEST

/* ---- unimplemented and negotiate ------------------------------------------------------ */

START_TEST(test_unimplemented)
{
    char err[512] = "";
    sm_rpc_channel *ch = fx.ch_empty;
    sm_array_info info;
    ck_assert_int_eq(
        sm_svc_coord_describe(ch, DL, (sm_array_ref){{1}, NULL}, &info, err, sizeof err),
        SM_EUNIMPLEMENTED);
    ck_assert_ptr_nonnull(strstr(err, "/shmap.v1.Coordinator/Describe is not implemented"));
    sm_worker_info *w = NULL;
    int n = 0;
    ck_assert_int_eq(sm_svc_coord_list_devices(ch, DL, &w, &n, err, sizeof err), SM_EUNIMPLEMENTED);
    ck_assert_int_eq(sm_svc_coord_delete(ch, DL, (sm_array_ref){{1}, NULL}, err, sizeof err),
                     SM_EUNIMPLEMENTED);
    sm_svc_worker_stats stats;
    ck_assert_int_eq(sm_svc_worker_stats_get(ch, DL, &stats, err, sizeof err), SM_EUNIMPLEMENTED);
    ck_assert_ptr_nonnull(strstr(err, "/shmap.v1.Worker/Stats is not implemented"));
    int64_t bytes;
    sm_svc_assemble_req areq = {{1}, SM_F32, 0, NULL};
    ck_assert_int_eq(sm_svc_worker_assemble(ch, DL, &areq, &bytes, err, sizeof err),
                     SM_EUNIMPLEMENTED);
    ck_assert_int_eq(sm_svc_worker_free_array(ch, DL, (sm_array_id){1}, 0, NULL, err, sizeof err),
                     SM_EUNIMPLEMENTED);

    for (int svc = 0; svc < 2; svc++) {
        sm_svc_upload_stream *up;
        ck_assert_int_eq(sm_svc_upload_open(ch, svc, DL, &up, err, sizeof err), SM_OK);
        sm_svc_upload_msg m = {0};
        m.last = 1;
        sm_err e = sm_svc_upload_send(up, &m, err, sizeof err);
        ck_assert(e == SM_OK || e == SM_EUNIMPLEMENTED);
        ck_assert_int_eq(sm_svc_upload_finish(up, NULL, err, sizeof err), SM_EUNIMPLEMENTED);

        sm_svc_download_req req = {{{1}, NULL}, 0, 0, {0}};
        sm_svc_download_stream *dl;
        ck_assert_int_eq(sm_svc_download_open(ch, svc, &req, DL, &dl, err, sizeof err), SM_OK);
        sm_svc_chunk c;
        int end = 0;
        ck_assert_int_eq(sm_svc_download_recv(dl, &c, &end, err, sizeof err), SM_EUNIMPLEMENTED);
        sm_svc_download_free(dl);

        uint32_t v = 0;
        char server[64];
        ck_assert_int_eq(
            sm_svc_negotiate(ch, svc, "t", &v, server, sizeof server, DL, err, sizeof err), SM_OK);
        ck_assert_uint_eq(v, 1);
        ck_assert_str_eq(server, svc ? "worker-bad" : "coord-bad");
    }
    ck_assert_int_eq(fx.r.calls, 0);
}
END_TEST

static Suite *svc_bad_suite(void)
{
#define N(a) ((int)(sizeof(a) / sizeof((a)[0])))
    return SUITE_CASE(suite_create("rpc_svc_bad"), "errors", 30, SUITE_CHECKED(setup, teardown),
                      {test_malformed_unary, N(bad_cases)}, {test_malformed_download, 2},
                      {test_malformed_upload, N(bad_uploads)}, {test_handler_error_unary},
                      {test_handler_error_upload, 2}, {test_handler_error_download, 2},
                      {test_abandon_streams}, {test_bad_reply}, {test_unimplemented});
#undef N
}

int main(void)
{
    return suite_main(svc_bad_suite());
}
