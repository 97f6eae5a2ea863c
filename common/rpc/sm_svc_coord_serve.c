/* sm_svc_coord_serve: the Coordinator service adapters. Each one decodes and
 * validates the request (a bad request is answered INVALID_ARGUMENT without
 * calling the handler), calls the handler and encodes its result; the
 * receiving, finishing and freeing around it is sm_svc_add_rows's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sm_svc_internal.h"

/* Frees of the handlers' outputs, run when the call's arena goes. */
static void info_free(void *p)
{
    sm_array_info_free(p);
}

typedef struct {
    void *list;
    int n;
} out_list;

static void info_list_free(void *p)
{
    out_list *l = p;
    sm_array_info_list_free(l->list, l->n);
}

static void list_free(void *p)
{
    free(((out_list *)p)->list);
}

static void create_array_reply_free(void *p)
{
    sm_svc_create_array_reply_free(p);
}

/* One item of a handler's list encoded into a, or NULL out of memory. */
typedef void *(*item_enc)(sm_arena *a, const void *item);

/* A list handler's answer l (e: the handler's result), its items of size
 * bytes encoded by enc into rp's repeated field. */
static sm_err list_reply(sm_err e, ProtobufCMessage *rp, const char *field, sm_arena *a,
                         const out_list *l, size_t size, item_enc enc, char *err, size_t errlen)
{
    if (e)
        return e;
    const ProtobufCFieldDescriptor *f =
        protobuf_c_message_descriptor_get_field_by_name(rp->descriptor, field);
    size_t *n = (size_t *)((char *)rp + f->quantifier_offset);
    void **items = sm_arena_alloc(a, (size_t)(l->n > 0 ? l->n : 1) * sizeof *items);
    if (!items)
        return sm_svc_enc_nomem(err, errlen);
    *(void ***)((char *)rp + f->offset) = items;
    for (int i = 0; i < l->n; i++)
        if (!(items[(*n)++] = enc(a, (const char *)l->list + (size_t)i * size)))
            return sm_svc_enc_nomem(err, errlen);
    return SM_OK;
}

static void *worker_enc(sm_arena *a, const void *w)
{
    return sm_svc_worker_info_enc(a, w);
}

static sm_err list_devices(SM_SVC_UNARY_ARGS)
{
    const sm_svc_ctx *c = ctx;
    out_list *l = sm_svc_arena_obj(a, sizeof *l, list_free);
    (void)m;
    sm_err e =
        !l ? sm_svc_enc_nomem(err, errlen)
           : c->coord->list_devices(c->user, (sm_worker_info **)&l->list, &l->n, err, errlen);
    return list_reply(e, rp, "workers", a, l, sizeof(sm_worker_info), worker_enc, err, errlen);
}

/* Copies the fields of an encoded message into the reply rp of the same type. */
static sm_err reply_copy(ProtobufCMessage *rp, const ProtobufCMessage *p, char *err, size_t errlen)
{
    if (!p)
        return sm_svc_enc_nomem(err, errlen);
    memcpy(rp, p, p->descriptor->sizeof_message);
    return SM_OK;
}

static sm_err mesh_reply(ProtobufCMessage *rp, sm_arena *a, const sm_mesh_info *info, char *err,
                         size_t errlen)
{
    Shmap__V1__Mesh *p = sm_svc_mesh_enc(a, info->id.v, info->name, &info->mesh, 1);
    return reply_copy(rp, p ? &p->base : NULL, err, errlen);
}

static sm_err create_mesh(SM_SVC_UNARY_ARGS)
{
    const sm_svc_ctx *c = ctx;
    const Shmap__V1__CreateMeshRequest *r = (const Shmap__V1__CreateMeshRequest *)m;
    sm_mesh_info *info = sm_arena_alloc(a, sizeof *info);
    sm_mesh *mesh = sm_arena_alloc(a, sizeof *mesh);
    int default_order = 0;
    sm_err e = SM_OK;
    if (!info || !mesh)
        e = sm_fail(err, errlen, SM_ENOMEM, "cannot allocate a mesh");
    else if (r->mesh && sm_svc_mesh_is_ref(r->mesh))
        e = sm_fail(err, errlen, SM_EINVAL,
                    "CreateMeshRequest.mesh has no axes; give axis_names and axis_sizes");
    else
        e = sm_svc_mesh_dec(r->mesh, "CreateMeshRequest.mesh", mesh, &default_order, NULL, err,
                            errlen);
    if (!e)
        e = c->coord->create_mesh(c->user, r->mesh->name ? r->mesh->name : "", mesh, default_order,
                                  info, err, errlen);
    return e ? e : mesh_reply(rp, a, info, err, errlen);
}

static sm_err get_mesh(SM_SVC_UNARY_ARGS)
{
    const sm_svc_ctx *c = ctx;
    const Shmap__V1__Mesh *r = (const Shmap__V1__Mesh *)m;
    sm_mesh_info *info = sm_arena_alloc(a, sizeof *info);
    sm_err e = info ? sm_svc_str_dec(r->name, SM_SVC_MESH_NAME_MAX, "Mesh.name", NULL, err, errlen)
                    : sm_fail(err, errlen, SM_ENOMEM, "cannot allocate a mesh");
    if (!e)
        e = c->coord->get_mesh(c->user, (sm_mesh_id){r->id}, r->name ? r->name : "", info, err,
                               errlen);
    return e ? e : mesh_reply(rp, a, info, err, errlen);
}

static void *mesh_enc(sm_arena *a, const void *item)
{
    const sm_mesh_info *m = item;
    return sm_svc_mesh_enc(a, m->id.v, m->name, &m->mesh, 1);
}

static sm_err list_meshes(SM_SVC_UNARY_ARGS)
{
    const sm_svc_ctx *c = ctx;
    out_list *l = sm_svc_arena_obj(a, sizeof *l, list_free);
    (void)m;
    sm_err e = !l ? sm_svc_enc_nomem(err, errlen)
                  : c->coord->list_meshes(c->user, (sm_mesh_info **)&l->list, &l->n, err, errlen);
    return list_reply(e, rp, "meshes", a, l, sizeof(sm_mesh_info), mesh_enc, err, errlen);
}

static sm_err create_array(SM_SVC_UNARY_ARGS)
{
    const sm_svc_ctx *c = ctx;
    const Shmap__V1__CreateArrayRequest *r = (const Shmap__V1__CreateArrayRequest *)m;
    Shmap__V1__CreateArrayReply *rep = (Shmap__V1__CreateArrayReply *)rp;
    sm_mesh *mesh = sm_arena_alloc(a, sizeof *mesh);
    sm_svc_create_array_reply *out = sm_svc_arena_obj(a, sizeof *out, create_array_reply_free);
    sm_svc_create_array_req req;
    memset(&req, 0, sizeof req);
    sm_err e;
    if (!mesh || !out)
        e = sm_fail(err, errlen, SM_ENOMEM, "cannot allocate a request");
    else if (!(e = sm_svc_str_dec(r->name, SM_NAME_MAX, "CreateArrayRequest.name", NULL, err,
                                  errlen)) &&
             !(e = sm_svc_dtype_dec(r->dtype, "CreateArrayRequest.dtype", &req.dtype, err,
                                    errlen)) &&
             !(e = sm_svc_shape_dec(r->shape, "CreateArrayRequest.shape", &req.shape, err,
                                    errlen)) &&
             !(e = sm_svc_shape_dec(r->local_shape, "CreateArrayRequest.local_shape",
                                    &req.local_shape, err, errlen)) &&
             !(e = sm_svc_sharding_ref_dec(r->sharding, "CreateArrayRequest.sharding", mesh,
                                           &req.sharding, err, errlen))) {
        if ((unsigned)r->kind > SHMAP__V1__PUT_KIND__PUT_LOCAL)
            e = sm_fail(err, errlen, SM_EINVAL,
                        "CreateArrayRequest.kind is %d, which is not a known kind (0 to 2)",
                        (int)r->kind);
    }
    if (!e) {
        req.name = r->name ? r->name : "";
        req.has_shape = r->shape != NULL;
        req.kind = (sm_put_kind)r->kind;
        req.process = r->process;
        req.deadline_ms = r->deadline_ms;
        e = c->coord->create_array(c->user, &req, out, err, errlen);
    }
    if (e)
        return e;
    rep->array = sm_svc_array_info_enc(a, &out->array);
    rep->targets =
        sm_arena_alloc(a, (size_t)(out->ntargets > 0 ? out->ntargets : 1) * sizeof *rep->targets);
    if (!rep->array || !rep->targets)
        return sm_svc_enc_nomem(err, errlen);
    for (int i = 0; i < out->ntargets; i++)
        if (!(rep->targets[rep->n_targets++] = sm_svc_target_enc(a, &out->targets[i])))
            return sm_svc_enc_nomem(err, errlen);
    return SM_OK;
}

static void upload(sm_rpc_call *call, void *u)
{
    const sm_svc_ctx *c = u;
    sm_svc_serve_upload(call, c->coord->upload, c->user, 0);
}

static void download(sm_rpc_call *call, void *u)
{
    const sm_svc_ctx *c = u;
    sm_svc_serve_download(call, c->coord->download, c->user, 0);
}

/* A handler's answer info (e: the handler's result) encoded into rp. */
static sm_err info_reply(sm_err e, ProtobufCMessage *rp, sm_arena *a, const sm_array_info *info,
                         char *err, size_t errlen)
{
    if (e)
        return e;
    Shmap__V1__ArrayInfo *p = sm_svc_array_info_enc(a, info);
    return reply_copy(rp, p ? &p->base : NULL, err, errlen);
}

/* The array info a request answered with an ArrayInfo is filled into and,
 * unless mesh is NULL, the mesh of its sharding, in a. */
static sm_err info_req_alloc(sm_arena *a, sm_mesh **mesh, sm_array_info **info, char *err,
                             size_t errlen)
{
    if (mesh && !(*mesh = sm_arena_alloc(a, sizeof **mesh)))
        return sm_fail(err, errlen, SM_ENOMEM, "cannot allocate a request");
    if (!(*info = sm_svc_arena_obj(a, sizeof **info, info_free)))
        return sm_fail(err, errlen, SM_ENOMEM, "cannot allocate a request");
    return SM_OK;
}

/* A request's new array name and sharding (msg: the message's name in
 * errors), the sharding's mesh into mesh. */
static sm_err name_sharding_dec(const char *msg, const char *name, const Shmap__V1__Sharding *sh,
                                sm_mesh *mesh, sm_sharding_ref *out, char *err, size_t errlen)
{
    char what[64];
    snprintf(what, sizeof what, "%s.name", msg);
    sm_err e = sm_svc_str_dec(name, SM_NAME_MAX, what, NULL, err, errlen);
    if (e)
        return e;
    snprintf(what, sizeof what, "%s.sharding", msg);
    return sm_svc_sharding_ref_dec(sh, what, mesh, out, err, errlen);
}

static sm_err describe(SM_SVC_UNARY_ARGS)
{
    const sm_svc_ctx *c = ctx;
    sm_array_ref ref;
    sm_array_info *info = sm_svc_arena_obj(a, sizeof *info, info_free);
    sm_err e =
        info ? sm_svc_array_ref_dec((const Shmap__V1__ArrayRef *)m, "ArrayRef", &ref, err, errlen)
             : sm_fail(err, errlen, SM_ENOMEM, "cannot allocate an array info");
    if (!e)
        e = c->coord->describe(c->user, ref, info, err, errlen);
    return info_reply(e, rp, a, info, err, errlen);
}

static void *array_enc(sm_arena *a, const void *info)
{
    return sm_svc_array_info_enc(a, info);
}

static sm_err list_arrays(SM_SVC_UNARY_ARGS)
{
    const sm_svc_ctx *c = ctx;
    out_list *l = sm_svc_arena_obj(a, sizeof *l, info_list_free);
    (void)m;
    sm_err e = !l ? sm_svc_enc_nomem(err, errlen)
                  : c->coord->list_arrays(c->user, (sm_array_info **)&l->list, &l->n, err, errlen);
    return list_reply(e, rp, "arrays", a, l, sizeof(sm_array_info), array_enc, err, errlen);
}

static sm_err delete_array(SM_SVC_UNARY_ARGS)
{
    const sm_svc_ctx *c = ctx;
    sm_array_ref ref;
    (void)rp;
    (void)a;
    sm_err e = sm_svc_array_ref_dec((const Shmap__V1__ArrayRef *)m, "ArrayRef", &ref, err, errlen);
    return e ? e : c->coord->delete_array(c->user, ref, err, errlen);
}

static sm_err reshard(SM_SVC_UNARY_ARGS)
{
    const sm_svc_ctx *c = ctx;
    const Shmap__V1__ReshardRequest *r = (const Shmap__V1__ReshardRequest *)m;
    sm_mesh *mesh;
    sm_array_info *info;
    sm_svc_reshard_req req;
    memset(&req, 0, sizeof req);
    sm_err e = info_req_alloc(a, &mesh, &info, err, errlen);
    if (!e &&
        !(e = sm_svc_array_ref_dec(r->array, "ReshardRequest.array", &req.array, err, errlen)) &&
        !(e = name_sharding_dec("ReshardRequest", r->name, r->sharding, mesh, &req.sharding, err,
                                errlen))) {
        req.name = r->name ? r->name : "";
        req.deadline_ms = r->deadline_ms;
        e = c->coord->reshard(c->user, &req, info, err, errlen);
    }
    return info_reply(e, rp, a, info, err, errlen);
}

static sm_err replicate(SM_SVC_UNARY_ARGS)
{
    const sm_svc_ctx *c = ctx;
    const Shmap__V1__ReplicateRequest *r = (const Shmap__V1__ReplicateRequest *)m;
    sm_array_info *info;
    sm_svc_replicate_req req;
    memset(&req, 0, sizeof req);
    sm_err e = info_req_alloc(a, NULL, &info, err, errlen);
    if (!e &&
        !(e = sm_svc_array_ref_dec(r->array, "ReplicateRequest.array", &req.array, err, errlen))) {
        req.replicas = r->replicas;
        req.deadline_ms = r->deadline_ms;
        e = c->coord->replicate(c->user, &req, info, err, errlen);
    }
    return info_reply(e, rp, a, info, err, errlen);
}

static sm_err save(SM_SVC_UNARY_ARGS)
{
    const sm_svc_ctx *c = ctx;
    const Shmap__V1__SaveRequest *r = (const Shmap__V1__SaveRequest *)m;
    Shmap__V1__SaveReply *rep = (Shmap__V1__SaveReply *)rp;
    sm_svc_save_req req;
    sm_svc_save_reply out = {0};
    (void)a;
    memset(&req, 0, sizeof req);
    sm_err e = sm_svc_array_ref_dec(r->array, "SaveRequest.array", &req.array, err, errlen);
    if (!e)
        e = sm_svc_str_dec(r->dir, SM_SVC_PATH_MAX, "SaveRequest.dir", NULL, err, errlen);
    if (!e) {
        req.dir = r->dir ? r->dir : "";
        req.deadline_ms = r->deadline_ms;
        e = c->coord->save(c->user, &req, &out, err, errlen);
    }
    rep->bytes = out.bytes;
    rep->files = out.files;
    rep->dir = (char *)(req.dir ? req.dir : "");
    return e;
}

static sm_err load(SM_SVC_UNARY_ARGS)
{
    const sm_svc_ctx *c = ctx;
    const Shmap__V1__LoadRequest *r = (const Shmap__V1__LoadRequest *)m;
    sm_mesh *mesh;
    sm_array_info *info;
    sm_svc_load_req req;
    memset(&req, 0, sizeof req);
    sm_err e = info_req_alloc(a, &mesh, &info, err, errlen);
    if (!e &&
        !(e = sm_svc_str_dec(r->dir, SM_SVC_PATH_MAX, "LoadRequest.dir", NULL, err, errlen)) &&
        !(e = name_sharding_dec("LoadRequest", r->name, r->sharding, mesh, &req.sharding, err,
                                errlen))) {
        req.dir = r->dir ? r->dir : "";
        req.name = r->name ? r->name : "";
        req.deadline_ms = r->deadline_ms;
        e = c->coord->load(c->user, &req, info, err, errlen);
    }
    return info_reply(e, rp, a, info, err, errlen);
}

static sm_err register_worker(SM_SVC_UNARY_ARGS)
{
    const sm_svc_ctx *c = ctx;
    const Shmap__V1__RegisterWorkerRequest *r = (const Shmap__V1__RegisterWorkerRequest *)m;
    Shmap__V1__RegisterWorkerReply *rep = (Shmap__V1__RegisterWorkerReply *)rp;
    sm_svc_register_reply *out = sm_arena_alloc(a, sizeof *out);
    if (!out)
        return sm_svc_enc_nomem(err, errlen);
    sm_err e;
    if (!(e = sm_svc_str_dec(r->address, SM_ADDR_MAX, "RegisterWorkerRequest.address", NULL, err,
                             errlen)) &&
        !(e = sm_svc_str_dec(r->host, 64, "RegisterWorkerRequest.host", NULL, err, errlen))) {
        if (r->ndevices < 1 || r->ndevices > SM_MAX_WORKER_DEVICES)
            e = sm_fail(err, errlen, SM_EINVAL,
                        "RegisterWorkerRequest.ndevices is %d; a worker has 1 to %d devices",
                        (int)r->ndevices, SM_MAX_WORKER_DEVICES);
        else if (r->process_index < -1)
            e = sm_fail(err, errlen, SM_EINVAL,
                        "RegisterWorkerRequest.process_index is %d; must be >= 0 (or -1: assign)",
                        (int)r->process_index);
    }
    if (!e && r->n_devices && r->n_devices != (size_t)r->ndevices)
        e = sm_fail(err, errlen, SM_EINVAL,
                    "RegisterWorkerRequest lists %zu device ids for %d devices", r->n_devices,
                    (int)r->ndevices);
    if (!e && r->n_held > SM_SVC_HELD_MAX)
        e = sm_fail(err, errlen, SM_EINVAL,
                    "RegisterWorkerRequest offers %zu shards; at most %d are taken", r->n_held,
                    SM_SVC_HELD_MAX);
    sm_svc_held_shard *held = NULL;
    if (!e && r->n_held && !(held = sm_arena_alloc(a, r->n_held * sizeof *held)))
        e = sm_fail(err, errlen, SM_ENOMEM, "out of memory reading a registration");
    for (size_t k = 0; !e && k < r->n_held; k++) {
        if (!r->held[k]) {
            e = sm_fail(err, errlen, SM_EINVAL, "RegisterWorkerRequest.held[%zu] is empty", k);
            break;
        }
        held[k] =
            (sm_svc_held_shard){r->held[k]->array_id, r->held[k]->device, r->held[k]->checksum};
    }
    if (!e) {
        sm_svc_register_req req = {r->address ? r->address : "",
                                   r->ndevices,
                                   r->process_index,
                                   r->host ? r->host : "",
                                   {r->worker_id},
                                   r->n_devices ? r->devices : NULL,
                                   (int)r->n_held,
                                   held,
                                   r->program_level,
                                   r->version ? r->version : ""};
        e = c->coord->register_worker(c->user, &req, out, err, errlen);
    }
    if (!e && (out->ndevices < 0 || out->ndevices > SM_MAX_WORKER_DEVICES))
        e = sm_fail(err, errlen, SM_EINTERNAL, "the handler returned %d devices", out->ndevices);
    if (e)
        return e;
    rep->worker_id = out->worker_id.v;
    rep->n_devices = (size_t)out->ndevices;
    rep->devices = out->devices;
    rep->process_index = out->process_index;
    rep->heartbeat_ms = out->heartbeat_ms;
    rep->epoch = out->epoch;
    rep->keep_shards = out->keep_shards != 0;
    return SM_OK;
}

static sm_err heartbeat(SM_SVC_UNARY_ARGS)
{
    const sm_svc_ctx *c = ctx;
    const Shmap__V1__HeartbeatRequest *r = (const Shmap__V1__HeartbeatRequest *)m;
    Shmap__V1__HeartbeatReply *rep = (Shmap__V1__HeartbeatReply *)rp;
    int known = 0;
    sm_svc_held_shard *spilled = NULL;
    sm_err e = sm_svc_count_dec(r->n_device_bytes, SM_MAX_WORKER_DEVICES, "HeartbeatRequest",
                                "device_bytes", err, errlen);
    if (!e)
        e = sm_svc_count_dec(r->n_spilled, SM_SVC_SPILLED_MAX, "HeartbeatRequest", "spilled", err,
                             errlen);
    if (!e && r->n_spilled && !(spilled = sm_arena_alloc(a, r->n_spilled * sizeof *spilled)))
        e = sm_fail(err, errlen, SM_ENOMEM, "out of memory reading a heartbeat");
    if (!e) {
        sm_svc_heartbeat_req req;
        memset(&req, 0, sizeof req);
        req.worker_id.v = r->worker_id;
        req.epoch = r->epoch;
        req.ndevices = (int)r->n_device_bytes;
        sm_svc_copy(req.device_bytes, r->device_bytes, r->n_device_bytes * sizeof *r->device_bytes);
        for (size_t k = 0; k < r->n_spilled; k++)
            spilled[k] = (sm_svc_held_shard){r->spilled[k] ? r->spilled[k]->array_id : 0,
                                             r->spilled[k] ? r->spilled[k]->device : -1, 0};
        req.nspilled = (int)r->n_spilled;
        req.spilled = spilled;
        e = c->coord->heartbeat(c->user, &req, &known, err, errlen);
    }
    rep->known = known != 0;
    return e;
}

static sm_err commit_shards(SM_SVC_UNARY_ARGS)
{
    const sm_svc_ctx *c = ctx;
    const Shmap__V1__CommitShardsRequest *r = (const Shmap__V1__CommitShardsRequest *)m;
    Shmap__V1__UploadReply *rep = (Shmap__V1__UploadReply *)rp;
    sm_svc_upload_reply out = {0};
    sm_err e = sm_svc_count_dec(r->n_devices, SM_MAX_DEVICES, "CommitShardsRequest", "devices", err,
                                errlen);
    if (!e && r->bytes < 0)
        e = sm_fail(err, errlen, SM_EINVAL, "CommitShardsRequest.bytes is negative (%lld)",
                    (long long)r->bytes);
    if (!e)
        e = sm_svc_count_dec(r->n_targets, SM_MAX_DEVICES, "CommitShardsRequest", "targets", err,
                             errlen);
    if (!e && r->n_targets > 0 && (r->n_devices > 0 || r->bytes || r->checksum))
        e = sm_fail(err, errlen, SM_EINVAL,
                    "a CommitShardsRequest gives either devices or targets, not both");
    sm_svc_commit_target *t = e ? NULL : sm_arena_alloc(a, (r->n_targets + 1) * sizeof *t);
    if (!e && !t)
        e = sm_fail(err, errlen, SM_ENOMEM, "out of memory decoding a commit");
    for (size_t k = 0; !e && k < r->n_targets; k++) {
        const Shmap__V1__CommitTarget *p = r->targets[k];
        e = sm_svc_count_dec(p->n_devices, SM_MAX_DEVICES, "CommitTarget", "devices", err, errlen);
        if (!e && p->bytes < 0)
            e = sm_fail(err, errlen, SM_EINVAL, "CommitTarget.bytes is negative (%lld)",
                        (long long)p->bytes);
        t[k] = (sm_svc_commit_target){(int)p->n_devices, p->devices, p->checksum, p->bytes};
    }
    if (!e) {
        sm_svc_commit_req req = {{r->array_id}, (int)r->n_devices, r->devices, r->checksum,
                                 r->bytes,      (int)r->n_targets, t};
        e = c->coord->commit_shards(c->user, &req, &out, err, errlen);
    }
    rep->bytes = out.bytes;
    rep->checksum = out.checksum;
    rep->array_ready = out.array_ready != 0;
    return e;
}

sm_err sm_svc_coord_serve(sm_rpc_server *s, const sm_svc_coord_ops *ops, void *user,
                          const char *server_name, char *err, size_t errlen)
{
    static const sm_svc_coord_ops none; /* ops NULL: every method UNIMPLEMENTED */
    const sm_svc_coord_ops *o = ops ? ops : &none;
    sm_svc_ctx *ctx = sm_svc_ctx_create(o, NULL, user, server_name);
    if (!ctx)
        return sm_fail(err, errlen, SM_ENOMEM, "cannot allocate the coordinator adapters");
    const sm_svc_row rows[] = {
#define ROW(name, req, rep, fn)                                                                    \
    SM_SVC_UNARY_ROW(SM_SVC_COORD_PATH(name), req, rep, fn, o->fn != NULL)
/* called by workers only: with TLS, refused to callers without a cluster certificate */
#define ROW_CLUSTER(name, req, rep, fn)                                                            \
    {SM_SVC_COORD_PATH(name), &req##__descriptor, &rep##__descriptor, fn, o->fn != NULL, 1}
        ROW("ListDevices", shmap__v1__empty, shmap__v1__list_devices_reply, list_devices),
        ROW("CreateMesh", shmap__v1__create_mesh_request, shmap__v1__mesh, create_mesh),
        ROW("GetMesh", shmap__v1__mesh, shmap__v1__mesh, get_mesh),
        ROW("ListMeshes", shmap__v1__empty, shmap__v1__list_meshes_reply, list_meshes),
        SM_SVC_STREAM_ROW(SM_SVC_COORD_PATH("Upload"), SM_RPC_CLIENT_STREAM, shmap__v1__upload_msg,
                          upload),
        SM_SVC_STREAM_ROW(SM_SVC_COORD_PATH("Download"), SM_RPC_SERVER_STREAM,
                          shmap__v1__download_request, download),
        ROW("CreateArray", shmap__v1__create_array_request, shmap__v1__create_array_reply,
            create_array),
        ROW("Describe", shmap__v1__array_ref, shmap__v1__array_info, describe),
        ROW("ListArrays", shmap__v1__empty, shmap__v1__list_arrays_reply, list_arrays),
        ROW("Delete", shmap__v1__array_ref, shmap__v1__empty, delete_array),
        ROW("Reshard", shmap__v1__reshard_request, shmap__v1__array_info, reshard),
        ROW("Replicate", shmap__v1__replicate_request, shmap__v1__array_info, replicate),
        ROW_CLUSTER("RegisterWorker", shmap__v1__register_worker_request,
                    shmap__v1__register_worker_reply, register_worker),
        ROW_CLUSTER("Heartbeat", shmap__v1__heartbeat_request, shmap__v1__heartbeat_reply,
                    heartbeat),
        ROW("CommitShards", shmap__v1__commit_shards_request, shmap__v1__upload_reply,
            commit_shards),
        ROW("Save", shmap__v1__save_request, shmap__v1__save_reply, save),
        ROW("Load", shmap__v1__load_request, shmap__v1__array_info, load),
#undef ROW
#undef ROW_CLUSTER
    };
    sm_err e = sm_svc_negotiate_add(s, SM_SVC_COORD_PATH("Negotiate"), ctx, err, errlen);
    return e ? e : sm_svc_add_rows(s, ctx, rows, sizeof rows / sizeof rows[0], err, errlen);
}
