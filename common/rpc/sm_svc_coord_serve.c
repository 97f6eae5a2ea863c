/* sm_svc_coord_serve: the Coordinator service adapters. Each one receives
 * the request, decodes and validates it (a bad request is answered
 * INVALID_ARGUMENT without calling the handler), calls the handler, encodes
 * its result and frees what the handler allocated. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sm_svc_internal.h"

#define OP(c, name) SM_SVC_REQUIRE(call, (c)->coord->name)

static void list_devices(sm_rpc_call *call, void *u)
{
    const sm_svc_ctx *c = u;
    OP(c, list_devices);
    ProtobufCMessage *m = sm_svc_recv_request(call);
    if (!m)
        return;
    sm_rpc_msg_free(m);
    sm_worker_info *list = NULL;
    int n = 0;
    char err[SM_SVC_ERRLEN] = "";
    sm_arena *a = NULL;
    Shmap__V1__ListDevicesReply rep, *rp = NULL;
    sm_err e = c->coord->list_devices(c->user, &list, &n, err, sizeof err);
    if (!e && (a = sm_arena_create(0))) {
        shmap__v1__list_devices_reply__init(&rep);
        rep.workers = sm_arena_alloc(a, (size_t)(n > 0 ? n : 1) * sizeof *rep.workers);
        rp = rep.workers ? &rep : NULL;
        for (int i = 0; rp && i < n; i++)
            if (!(rep.workers[rep.n_workers++] = sm_svc_worker_info_enc(a, &list[i])))
                rp = NULL;
    }
    sm_svc_finish(call, e, err, rp ? &rp->base : NULL);
    if (a)
        sm_arena_free(a);
    free(list);
}

static void mesh_reply(sm_rpc_call *call, sm_err e, const char *err, const sm_mesh_info *info)
{
    sm_arena *a = e ? NULL : sm_arena_create(0);
    Shmap__V1__Mesh *p = a ? sm_svc_mesh_enc(a, info->id.v, info->name, &info->mesh, 1) : NULL;
    sm_svc_finish(call, e, err, p ? &p->base : NULL);
    if (a)
        sm_arena_free(a);
}

static void create_mesh(sm_rpc_call *call, void *u)
{
    const sm_svc_ctx *c = u;
    OP(c, create_mesh);
    ProtobufCMessage *m = sm_svc_recv_request(call);
    if (!m)
        return;
    const Shmap__V1__CreateMeshRequest *r = (const Shmap__V1__CreateMeshRequest *)m;
    char err[SM_SVC_ERRLEN] = "";
    sm_mesh_info *info = calloc(1, sizeof *info);
    sm_mesh *mesh = malloc(sizeof *mesh);
    int default_order = 0;
    sm_err e = SM_OK;
    if (!info || !mesh)
        e = sm_fail(err, sizeof err, SM_ENOMEM, "cannot allocate a mesh");
    else if (r->mesh && sm_svc_mesh_is_ref(r->mesh))
        e = sm_fail(err, sizeof err, SM_EINVAL,
                    "CreateMeshRequest.mesh has no axes; give axis_names and axis_sizes");
    else
        e = sm_svc_mesh_dec(r->mesh, "CreateMeshRequest.mesh", mesh, &default_order, NULL, err,
                            sizeof err);
    if (!e)
        e = c->coord->create_mesh(c->user, r->mesh->name ? r->mesh->name : "", mesh, default_order,
                                  info, err, sizeof err);
    mesh_reply(call, e, err, info);
    free(info);
    free(mesh);
    sm_rpc_msg_free(m);
}

static void get_mesh(sm_rpc_call *call, void *u)
{
    const sm_svc_ctx *c = u;
    OP(c, get_mesh);
    ProtobufCMessage *m = sm_svc_recv_request(call);
    if (!m)
        return;
    const Shmap__V1__Mesh *r = (const Shmap__V1__Mesh *)m;
    char err[SM_SVC_ERRLEN] = "";
    sm_mesh_info *info = calloc(1, sizeof *info);
    sm_err e =
        info ? sm_svc_str_dec(r->name, SM_SVC_MESH_NAME_MAX, "Mesh.name", NULL, err, sizeof err)
             : sm_fail(err, sizeof err, SM_ENOMEM, "cannot allocate a mesh");
    if (!e)
        e = c->coord->get_mesh(c->user, (sm_mesh_id){r->id}, r->name ? r->name : "", info, err,
                               sizeof err);
    mesh_reply(call, e, err, info);
    free(info);
    sm_rpc_msg_free(m);
}

static void list_meshes(sm_rpc_call *call, void *u)
{
    const sm_svc_ctx *c = u;
    OP(c, list_meshes);
    ProtobufCMessage *m = sm_svc_recv_request(call);
    if (!m)
        return;
    sm_rpc_msg_free(m);
    sm_mesh_info *list = NULL;
    int n = 0;
    char err[SM_SVC_ERRLEN] = "";
    sm_arena *a = NULL;
    Shmap__V1__ListMeshesReply rep, *rp = NULL;
    sm_err e = c->coord->list_meshes(c->user, &list, &n, err, sizeof err);
    if (!e && (a = sm_arena_create(0))) {
        shmap__v1__list_meshes_reply__init(&rep);
        rep.meshes = sm_arena_alloc(a, (size_t)(n > 0 ? n : 1) * sizeof *rep.meshes);
        rp = rep.meshes ? &rep : NULL;
        for (int i = 0; rp && i < n; i++)
            if (!(rep.meshes[rep.n_meshes++] =
                      sm_svc_mesh_enc(a, list[i].id.v, list[i].name, &list[i].mesh, 1)))
                rp = NULL;
    }
    sm_svc_finish(call, e, err, rp ? &rp->base : NULL);
    if (a)
        sm_arena_free(a);
    free(list);
}

static void create_array(sm_rpc_call *call, void *u)
{
    const sm_svc_ctx *c = u;
    OP(c, create_array);
    ProtobufCMessage *m = sm_svc_recv_request(call);
    if (!m)
        return;
    const Shmap__V1__CreateArrayRequest *r = (const Shmap__V1__CreateArrayRequest *)m;
    char err[SM_SVC_ERRLEN] = "";
    sm_mesh *mesh = malloc(sizeof *mesh);
    sm_svc_create_array_reply *out = calloc(1, sizeof *out);
    sm_svc_create_array_req req;
    memset(&req, 0, sizeof req);
    sm_arena *a = NULL;
    Shmap__V1__CreateArrayReply rep, *rp = NULL;
    sm_err e;
    if (!mesh || !out)
        e = sm_fail(err, sizeof err, SM_ENOMEM, "cannot allocate a request");
    else if (!(e = sm_svc_str_dec(r->name, SM_NAME_MAX, "CreateArrayRequest.name", NULL, err,
                                  sizeof err)) &&
             !(e = sm_svc_dtype_dec(r->dtype, "CreateArrayRequest.dtype", &req.dtype, err,
                                    sizeof err)) &&
             !(e = sm_svc_shape_dec(r->shape, "CreateArrayRequest.shape", &req.shape, err,
                                    sizeof err)) &&
             !(e = sm_svc_shape_dec(r->local_shape, "CreateArrayRequest.local_shape",
                                    &req.local_shape, err, sizeof err)) &&
             !(e = sm_svc_sharding_ref_dec(r->sharding, "CreateArrayRequest.sharding", mesh,
                                           &req.sharding, err, sizeof err))) {
        if ((unsigned)r->kind > SHMAP__V1__PUT_KIND__PUT_LOCAL)
            e = sm_fail(err, sizeof err, SM_EINVAL,
                        "CreateArrayRequest.kind is %d, which is not a known kind (0 to 2)",
                        (int)r->kind);
    }
    if (!e) {
        req.name = r->name ? r->name : "";
        req.has_shape = r->shape != NULL;
        req.kind = (sm_put_kind)r->kind;
        req.process = r->process;
        req.deadline_ms = r->deadline_ms;
        e = c->coord->create_array(c->user, &req, out, err, sizeof err);
    }
    if (!e && (a = sm_arena_create(0))) {
        shmap__v1__create_array_reply__init(&rep);
        rep.array = sm_svc_array_info_enc(a, &out->array);
        rep.targets = sm_arena_alloc(a, (size_t)(out->ntargets > 0 ? out->ntargets : 1) *
                                            sizeof *rep.targets);
        rp = rep.array && rep.targets ? &rep : NULL;
        for (int i = 0; rp && i < out->ntargets; i++)
            if (!(rep.targets[rep.n_targets++] = sm_svc_target_enc(a, &out->targets[i])))
                rp = NULL;
    }
    sm_svc_finish(call, e, err, rp ? &rp->base : NULL);
    if (a)
        sm_arena_free(a);
    sm_svc_create_array_reply_free(out);
    free(out);
    free(mesh);
    sm_rpc_msg_free(m);
}

static void upload(sm_rpc_call *call, void *u)
{
    const sm_svc_ctx *c = u;
    sm_svc_serve_upload(call, c->coord->upload, c->user);
}

static void download(sm_rpc_call *call, void *u)
{
    const sm_svc_ctx *c = u;
    sm_svc_serve_download(call, c->coord->download, c->user);
}

static void info_reply(sm_rpc_call *call, sm_err e, const char *err, const sm_array_info *info)
{
    sm_arena *a = e ? NULL : sm_arena_create(0);
    Shmap__V1__ArrayInfo *p = a ? sm_svc_array_info_enc(a, info) : NULL;
    sm_svc_finish(call, e, err, p ? &p->base : NULL);
    if (a)
        sm_arena_free(a);
}

static void describe(sm_rpc_call *call, void *u)
{
    const sm_svc_ctx *c = u;
    OP(c, describe);
    ProtobufCMessage *m = sm_svc_recv_request(call);
    if (!m)
        return;
    char err[SM_SVC_ERRLEN] = "";
    sm_array_ref ref;
    sm_array_info *info = calloc(1, sizeof *info);
    sm_err e = info ? sm_svc_array_ref_dec((const Shmap__V1__ArrayRef *)m, "ArrayRef", &ref, err,
                                           sizeof err)
                    : sm_fail(err, sizeof err, SM_ENOMEM, "cannot allocate an array info");
    if (!e)
        e = c->coord->describe(c->user, ref, info, err, sizeof err);
    info_reply(call, e, err, info);
    sm_array_info_free(info);
    free(info);
    sm_rpc_msg_free(m);
}

static void list_arrays(sm_rpc_call *call, void *u)
{
    const sm_svc_ctx *c = u;
    OP(c, list_arrays);
    ProtobufCMessage *m = sm_svc_recv_request(call);
    if (!m)
        return;
    sm_rpc_msg_free(m);
    sm_array_info *list = NULL;
    int n = 0;
    char err[SM_SVC_ERRLEN] = "";
    sm_arena *a = NULL;
    Shmap__V1__ListArraysReply rep, *rp = NULL;
    sm_err e = c->coord->list_arrays(c->user, &list, &n, err, sizeof err);
    if (!e && (a = sm_arena_create(0))) {
        shmap__v1__list_arrays_reply__init(&rep);
        rep.arrays = sm_arena_alloc(a, (size_t)(n > 0 ? n : 1) * sizeof *rep.arrays);
        rp = rep.arrays ? &rep : NULL;
        for (int i = 0; rp && i < n; i++)
            if (!(rep.arrays[rep.n_arrays++] = sm_svc_array_info_enc(a, &list[i])))
                rp = NULL;
    }
    sm_svc_finish(call, e, err, rp ? &rp->base : NULL);
    if (a)
        sm_arena_free(a);
    sm_array_info_list_free(list, n);
}

static void delete_array(sm_rpc_call *call, void *u)
{
    const sm_svc_ctx *c = u;
    OP(c, delete_array);
    ProtobufCMessage *m = sm_svc_recv_request(call);
    if (!m)
        return;
    char err[SM_SVC_ERRLEN] = "";
    sm_array_ref ref;
    sm_err e =
        sm_svc_array_ref_dec((const Shmap__V1__ArrayRef *)m, "ArrayRef", &ref, err, sizeof err);
    if (!e)
        e = c->coord->delete_array(c->user, ref, err, sizeof err);
    Shmap__V1__Empty rep;
    shmap__v1__empty__init(&rep);
    sm_svc_finish(call, e, err, &rep.base);
    sm_rpc_msg_free(m);
}

static void reshard(sm_rpc_call *call, void *u)
{
    const sm_svc_ctx *c = u;
    OP(c, reshard);
    ProtobufCMessage *m = sm_svc_recv_request(call);
    if (!m)
        return;
    const Shmap__V1__ReshardRequest *r = (const Shmap__V1__ReshardRequest *)m;
    char err[SM_SVC_ERRLEN] = "";
    sm_mesh *mesh = malloc(sizeof *mesh);
    sm_array_info *info = calloc(1, sizeof *info);
    sm_svc_reshard_req req;
    memset(&req, 0, sizeof req);
    sm_err e;
    if (!mesh || !info)
        e = sm_fail(err, sizeof err, SM_ENOMEM, "cannot allocate a request");
    else if (!(e = sm_svc_array_ref_dec(r->array, "ReshardRequest.array", &req.array, err,
                                        sizeof err)) &&
             !(e = sm_svc_str_dec(r->name, SM_NAME_MAX, "ReshardRequest.name", NULL, err,
                                  sizeof err)) &&
             !(e = sm_svc_sharding_ref_dec(r->sharding, "ReshardRequest.sharding", mesh,
                                           &req.sharding, err, sizeof err))) {
        req.name = r->name ? r->name : "";
        req.deadline_ms = r->deadline_ms;
        e = c->coord->reshard(c->user, &req, info, err, sizeof err);
    }
    info_reply(call, e, err, info);
    sm_array_info_free(info);
    free(info);
    free(mesh);
    sm_rpc_msg_free(m);
}

static void replicate(sm_rpc_call *call, void *u)
{
    const sm_svc_ctx *c = u;
    OP(c, replicate);
    ProtobufCMessage *m = sm_svc_recv_request(call);
    if (!m)
        return;
    const Shmap__V1__ReplicateRequest *r = (const Shmap__V1__ReplicateRequest *)m;
    char err[SM_SVC_ERRLEN] = "";
    sm_array_info *info = calloc(1, sizeof *info);
    sm_svc_replicate_req req;
    memset(&req, 0, sizeof req);
    sm_err e;
    if (!info)
        e = sm_fail(err, sizeof err, SM_ENOMEM, "cannot allocate a request");
    else if (!(e = sm_svc_array_ref_dec(r->array, "ReplicateRequest.array", &req.array, err,
                                        sizeof err))) {
        req.replicas = r->replicas;
        req.deadline_ms = r->deadline_ms;
        e = c->coord->replicate(c->user, &req, info, err, sizeof err);
    }
    info_reply(call, e, err, info);
    sm_array_info_free(info);
    free(info);
    sm_rpc_msg_free(m);
}

static void save(sm_rpc_call *call, void *u)
{
    const sm_svc_ctx *c = u;
    OP(c, save);
    ProtobufCMessage *m = sm_svc_recv_request(call);
    if (!m)
        return;
    const Shmap__V1__SaveRequest *r = (const Shmap__V1__SaveRequest *)m;
    char err[SM_SVC_ERRLEN] = "";
    sm_svc_save_req req;
    sm_svc_save_reply out = {0};
    memset(&req, 0, sizeof req);
    sm_err e = sm_svc_array_ref_dec(r->array, "SaveRequest.array", &req.array, err, sizeof err);
    if (!e)
        e = sm_svc_str_dec(r->dir, SM_SVC_PATH_MAX, "SaveRequest.dir", NULL, err, sizeof err);
    if (!e) {
        req.dir = r->dir ? r->dir : "";
        req.deadline_ms = r->deadline_ms;
        e = c->coord->save(c->user, &req, &out, err, sizeof err);
    }
    Shmap__V1__SaveReply rep;
    shmap__v1__save_reply__init(&rep);
    rep.bytes = out.bytes;
    rep.files = out.files;
    rep.dir = (char *)req.dir;
    if (!rep.dir)
        rep.dir = "";
    sm_svc_finish(call, e, err, &rep.base);
    sm_rpc_msg_free(m);
}

static void load(sm_rpc_call *call, void *u)
{
    const sm_svc_ctx *c = u;
    OP(c, load);
    ProtobufCMessage *m = sm_svc_recv_request(call);
    if (!m)
        return;
    const Shmap__V1__LoadRequest *r = (const Shmap__V1__LoadRequest *)m;
    char err[SM_SVC_ERRLEN] = "";
    sm_mesh *mesh = malloc(sizeof *mesh);
    sm_array_info *info = calloc(1, sizeof *info);
    sm_svc_load_req req;
    memset(&req, 0, sizeof req);
    sm_err e;
    if (!mesh || !info)
        e = sm_fail(err, sizeof err, SM_ENOMEM, "cannot allocate a request");
    else if (!(e = sm_svc_str_dec(r->dir, SM_SVC_PATH_MAX, "LoadRequest.dir", NULL, err,
                                  sizeof err)) &&
             !(e = sm_svc_str_dec(r->name, SM_NAME_MAX, "LoadRequest.name", NULL, err,
                                  sizeof err)) &&
             !(e = sm_svc_sharding_ref_dec(r->sharding, "LoadRequest.sharding", mesh, &req.sharding,
                                           err, sizeof err))) {
        req.dir = r->dir ? r->dir : "";
        req.name = r->name ? r->name : "";
        req.deadline_ms = r->deadline_ms;
        e = c->coord->load(c->user, &req, info, err, sizeof err);
    }
    info_reply(call, e, err, info);
    if (info)
        sm_array_info_free(info);
    free(info);
    free(mesh);
    sm_rpc_msg_free(m);
}

static void register_worker(sm_rpc_call *call, void *u)
{
    const sm_svc_ctx *c = u;
    OP(c, register_worker);
    ProtobufCMessage *m = sm_svc_recv_request(call);
    if (!m)
        return;
    const Shmap__V1__RegisterWorkerRequest *r = (const Shmap__V1__RegisterWorkerRequest *)m;
    char err[SM_SVC_ERRLEN] = "";
    sm_svc_register_reply out;
    memset(&out, 0, sizeof out);
    sm_err e;
    if (!(e = sm_svc_str_dec(r->address, SM_ADDR_MAX, "RegisterWorkerRequest.address", NULL, err,
                             sizeof err)) &&
        !(e = sm_svc_str_dec(r->host, 64, "RegisterWorkerRequest.host", NULL, err, sizeof err))) {
        if (r->ndevices < 1 || r->ndevices > SM_MAX_WORKER_DEVICES)
            e = sm_fail(err, sizeof err, SM_EINVAL,
                        "RegisterWorkerRequest.ndevices is %d; a worker has 1 to %d devices",
                        (int)r->ndevices, SM_MAX_WORKER_DEVICES);
        else if (r->process_index < -1)
            e = sm_fail(err, sizeof err, SM_EINVAL,
                        "RegisterWorkerRequest.process_index is %d; must be >= 0 (or -1: assign)",
                        (int)r->process_index);
    }
    if (!e && r->n_devices && r->n_devices != (size_t)r->ndevices)
        e = sm_fail(err, sizeof err, SM_EINVAL,
                    "RegisterWorkerRequest lists %zu device ids for %d devices", r->n_devices,
                    (int)r->ndevices);
    if (!e && r->n_held > SM_SVC_HELD_MAX)
        e = sm_fail(err, sizeof err, SM_EINVAL,
                    "RegisterWorkerRequest offers %zu shards; at most %d are taken", r->n_held,
                    SM_SVC_HELD_MAX);
    sm_svc_held_shard *held = NULL;
    if (!e && r->n_held && !(held = calloc(r->n_held, sizeof *held)))
        e = sm_fail(err, sizeof err, SM_ENOMEM, "out of memory reading a registration");
    for (size_t k = 0; !e && k < r->n_held; k++) {
        if (!r->held[k]) {
            e = sm_fail(err, sizeof err, SM_EINVAL, "RegisterWorkerRequest.held[%zu] is empty", k);
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
                                   r->worker_id,
                                   r->n_devices ? r->devices : NULL,
                                   (int)r->n_held,
                                   held};
        e = c->coord->register_worker(c->user, &req, &out, err, sizeof err);
    }
    free(held);
    if (!e && (out.ndevices < 0 || out.ndevices > SM_MAX_WORKER_DEVICES))
        e = sm_fail(err, sizeof err, SM_EINTERNAL, "the handler returned %d devices", out.ndevices);
    Shmap__V1__RegisterWorkerReply rep;
    shmap__v1__register_worker_reply__init(&rep);
    rep.worker_id = out.worker_id;
    rep.n_devices = e ? 0 : (size_t)out.ndevices;
    rep.devices = out.devices;
    rep.process_index = out.process_index;
    rep.heartbeat_ms = out.heartbeat_ms;
    rep.epoch = out.epoch;
    rep.keep_shards = out.keep_shards != 0;
    sm_svc_finish(call, e, err, &rep.base);
    sm_rpc_msg_free(m);
}

static void heartbeat(sm_rpc_call *call, void *u)
{
    const sm_svc_ctx *c = u;
    OP(c, heartbeat);
    ProtobufCMessage *m = sm_svc_recv_request(call);
    if (!m)
        return;
    const Shmap__V1__HeartbeatRequest *r = (const Shmap__V1__HeartbeatRequest *)m;
    char err[SM_SVC_ERRLEN] = "";
    int known = 0;
    sm_svc_held_shard *spilled = NULL;
    sm_err e = sm_svc_count_dec(r->n_device_bytes, SM_MAX_WORKER_DEVICES, "HeartbeatRequest",
                                "device_bytes", err, sizeof err);
    if (!e)
        e = sm_svc_count_dec(r->n_spilled, SM_SVC_SPILLED_MAX, "HeartbeatRequest", "spilled", err,
                             sizeof err);
    if (!e && r->n_spilled && !(spilled = calloc(r->n_spilled, sizeof *spilled)))
        e = sm_fail(err, sizeof err, SM_ENOMEM, "out of memory reading a heartbeat");
    if (!e) {
        sm_svc_heartbeat_req req;
        memset(&req, 0, sizeof req);
        req.worker_id = r->worker_id;
        req.epoch = r->epoch;
        req.ndevices = (int)r->n_device_bytes;
        sm_svc_copy(req.device_bytes, r->device_bytes, r->n_device_bytes * sizeof *r->device_bytes);
        for (size_t k = 0; k < r->n_spilled; k++)
            spilled[k] = (sm_svc_held_shard){r->spilled[k] ? r->spilled[k]->array_id : 0,
                                             r->spilled[k] ? r->spilled[k]->device : -1, 0};
        req.nspilled = (int)r->n_spilled;
        req.spilled = spilled;
        e = c->coord->heartbeat(c->user, &req, &known, err, sizeof err);
    }
    free(spilled);
    Shmap__V1__HeartbeatReply rep;
    shmap__v1__heartbeat_reply__init(&rep);
    rep.known = known != 0;
    sm_svc_finish(call, e, err, &rep.base);
    sm_rpc_msg_free(m);
}

static void commit_shards(sm_rpc_call *call, void *u)
{
    const sm_svc_ctx *c = u;
    OP(c, commit_shards);
    ProtobufCMessage *m = sm_svc_recv_request(call);
    if (!m)
        return;
    const Shmap__V1__CommitShardsRequest *r = (const Shmap__V1__CommitShardsRequest *)m;
    char err[SM_SVC_ERRLEN] = "";
    sm_svc_upload_reply out = {0};
    sm_err e = sm_svc_count_dec(r->n_devices, SM_MAX_DEVICES, "CommitShardsRequest", "devices", err,
                                sizeof err);
    if (!e && r->bytes < 0)
        e = sm_fail(err, sizeof err, SM_EINVAL, "CommitShardsRequest.bytes is negative (%lld)",
                    (long long)r->bytes);
    if (!e)
        e = sm_svc_count_dec(r->n_targets, SM_MAX_DEVICES, "CommitShardsRequest", "targets", err,
                             sizeof err);
    if (!e && r->n_targets > 0 && (r->n_devices > 0 || r->bytes || r->checksum))
        e = sm_fail(err, sizeof err, SM_EINVAL,
                    "a CommitShardsRequest gives either devices or targets, not both");
    sm_svc_commit_target *t = calloc(r->n_targets + 1, sizeof *t);
    if (!e && !t)
        e = sm_fail(err, sizeof err, SM_ENOMEM, "out of memory decoding a commit");
    for (size_t k = 0; !e && k < r->n_targets; k++) {
        const Shmap__V1__CommitTarget *p = r->targets[k];
        e = sm_svc_count_dec(p->n_devices, SM_MAX_DEVICES, "CommitTarget", "devices", err,
                             sizeof err);
        if (!e && p->bytes < 0)
            e = sm_fail(err, sizeof err, SM_EINVAL, "CommitTarget.bytes is negative (%lld)",
                        (long long)p->bytes);
        t[k] = (sm_svc_commit_target){(int)p->n_devices, p->devices, p->checksum, p->bytes};
    }
    if (!e) {
        sm_svc_commit_req req = {{r->array_id}, (int)r->n_devices, r->devices, r->checksum,
                                 r->bytes,      (int)r->n_targets, t};
        e = c->coord->commit_shards(c->user, &req, &out, err, sizeof err);
    }
    free(t);
    Shmap__V1__UploadReply rep;
    shmap__v1__upload_reply__init(&rep);
    rep.bytes = out.bytes;
    rep.checksum = out.checksum;
    rep.array_ready = out.array_ready != 0;
    sm_svc_finish(call, e, err, &rep.base);
    sm_rpc_msg_free(m);
}

sm_err sm_svc_coord_serve(sm_rpc_server *s, const sm_svc_coord_ops *ops, void *user,
                          const char *server_name, char *err, size_t errlen)
{
    static const sm_svc_coord_ops none; /* ops NULL: every method UNIMPLEMENTED */
    sm_svc_ctx *ctx = sm_svc_ctx_create(ops ? ops : &none, NULL, user, server_name);
    if (!ctx)
        return sm_fail(err, errlen, SM_ENOMEM, "cannot allocate the coordinator adapters");
    const sm_rpc_method rows[] = {
#define ROW(name, kind, req, fn) {SM_SVC_COORD_PATH(name), kind, &req##__descriptor, fn, ctx}
/* called by workers only: with TLS, refused to callers without a cluster certificate */
#define ROW_CLUSTER(name, kind, req, fn)                                                           \
    {                                                                                              \
        SM_SVC_COORD_PATH(name), kind, &req##__descriptor, fn, ctx, 1                              \
    }
        ROW("ListDevices", SM_RPC_UNARY, shmap__v1__empty, list_devices),
        ROW("CreateMesh", SM_RPC_UNARY, shmap__v1__create_mesh_request, create_mesh),
        ROW("GetMesh", SM_RPC_UNARY, shmap__v1__mesh, get_mesh),
        ROW("ListMeshes", SM_RPC_UNARY, shmap__v1__empty, list_meshes),
        ROW("CreateArray", SM_RPC_UNARY, shmap__v1__create_array_request, create_array),
        ROW("Upload", SM_RPC_CLIENT_STREAM, shmap__v1__upload_msg, upload),
        ROW("Download", SM_RPC_SERVER_STREAM, shmap__v1__download_request, download),
        ROW("Describe", SM_RPC_UNARY, shmap__v1__array_ref, describe),
        ROW("ListArrays", SM_RPC_UNARY, shmap__v1__empty, list_arrays),
        ROW("Delete", SM_RPC_UNARY, shmap__v1__array_ref, delete_array),
        ROW("Reshard", SM_RPC_UNARY, shmap__v1__reshard_request, reshard),
        ROW("Replicate", SM_RPC_UNARY, shmap__v1__replicate_request, replicate),
        ROW_CLUSTER("RegisterWorker", SM_RPC_UNARY, shmap__v1__register_worker_request,
                    register_worker),
        ROW_CLUSTER("Heartbeat", SM_RPC_UNARY, shmap__v1__heartbeat_request, heartbeat),
        ROW("CommitShards", SM_RPC_UNARY, shmap__v1__commit_shards_request, commit_shards),
        ROW("Save", SM_RPC_UNARY, shmap__v1__save_request, save),
        ROW("Load", SM_RPC_UNARY, shmap__v1__load_request, load),
#undef ROW
#undef ROW_CLUSTER
    };
    sm_err e = sm_svc_negotiate_add(s, SM_SVC_COORD_PATH("Negotiate"), ctx, err, errlen);
    return e ? e : sm_svc_add_methods(s, rows, sizeof rows / sizeof rows[0], err, errlen);
}
