/* sm_svc_coord: client calls to the Coordinator service. Requests are
 * encoded into an arena freed after the call; replies are validated like
 * requests (a bad reply is SM_EFORMAT naming the method and field). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sm_svc_internal.h"

void sm_svc_create_array_reply_free(sm_svc_create_array_reply *r)
{
    if (!r)
        return;
    sm_array_info_free(&r->array);
    for (int i = 0; r->targets && i < r->ntargets; i++)
        free(r->targets[i].devices);
    free(r->targets);
    r->targets = NULL;
    r->ntargets = 0;
}

static sm_err oom(char *err, size_t errlen)
{
    return sm_fail(err, errlen, SM_ENOMEM, "out of memory encoding a request");
}

/* One item of a list reply decoded into out (a slot of the list). */
typedef sm_err (*list_item_dec)(const void *item, const char *what, void *out, char *err,
                                size_t errlen);

/* A list reply: what to read (the reply's repeated field, its most items,
 * the size of a decoded item, its decoder and what frees the first n
 * decoded items: NULL for plain free) and, decoded, the malloc'd list of n
 * items. */
typedef struct {
    const char *field;
    size_t max, size;
    list_item_dec dec;
    void (*free_list)(void *list, int n);
    void *list;
    size_t n;
} list_reply;

static sm_err list_dec(const ProtobufCMessage *m, void *o, char *err, size_t errlen)
{
    list_reply *r = o;
    const char *msg = m->descriptor->short_name;
    const ProtobufCFieldDescriptor *f =
        protobuf_c_message_descriptor_get_field_by_name(m->descriptor, r->field);
    size_t n = *(const size_t *)((const char *)m + f->quantifier_offset);
    void *const *items = *(void *const *const *)((const char *)m + f->offset);
    char *list = NULL, what[64];
    size_t done = 0;
    sm_err e = sm_svc_count_dec(n, r->max, msg, r->field, err, errlen);
    if (!e && n && !(list = calloc(n, r->size)))
        e = sm_fail(err, errlen, SM_ENOMEM, "cannot allocate %zu %s", n, r->field);
    for (; !e && done < n; done++) {
        snprintf(what, sizeof what, "%s.%s[%zu]", msg, r->field, done);
        e = r->dec(items[done], what, list + done * r->size, err, errlen);
    }
    if (!e) {
        r->list = list;
        r->n = n;
    } else if (r->free_list) {
        r->free_list(list, (int)done);
    } else {
        free(list);
    }
    return e;
}

/* Calls path (no request) and decodes its list reply (desc) by r into
 * *out (malloc'd, *n items; NULL and 0 on failure). */
static sm_err list_call(sm_rpc_channel *ch, const char *path, int deadline_ms,
                        const ProtobufCMessageDescriptor *desc, list_reply r, void **out, int *n,
                        char *err, size_t errlen)
{
    sm_err e = sm_svc_unary(ch, path, deadline_ms, NULL, desc, list_dec, &r, err, errlen);
    *out = r.list;
    *n = (int)r.n;
    return e;
}

static sm_err worker_item_dec(const void *item, const char *what, void *out, char *err,
                              size_t errlen)
{
    return sm_svc_worker_info_dec(item, what, out, err, errlen);
}

sm_err sm_svc_coord_list_devices(sm_rpc_channel *ch, int deadline_ms, sm_worker_info **out, int *n,
                                 char *err, size_t errlen)
{
    list_reply r = {"workers", SM_MAX_DEVICES, sizeof **out, worker_item_dec, NULL, NULL, 0};
    return list_call(ch, SM_SVC_COORD_PATH("ListDevices"), deadline_ms,
                     &shmap__v1__list_devices_reply__descriptor, r, (void **)out, n, err, errlen);
}

static sm_err mesh_dec(const ProtobufCMessage *m, void *out, char *err, size_t errlen)
{
    return sm_svc_mesh_info_dec((const Shmap__V1__Mesh *)m, "Mesh", out, err, errlen);
}

/* A Mesh reply into out. */
static sm_err mesh_call(sm_rpc_channel *ch, const char *path, const ProtobufCMessage *req,
                        int deadline_ms, sm_mesh_info *out, char *err, size_t errlen)
{
    return sm_svc_unary(ch, path, deadline_ms, req, &shmap__v1__mesh__descriptor, mesh_dec, out,
                        err, errlen);
}

sm_err sm_svc_coord_create_mesh(sm_rpc_channel *ch, int deadline_ms, const char *name,
                                const sm_mesh *mesh, int default_order, sm_mesh_info *out,
                                char *err, size_t errlen)
{
    Shmap__V1__CreateMeshRequest req;
    shmap__v1__create_mesh_request__init(&req);
    sm_arena *a = sm_arena_create(4096);
    if (!a || !(req.mesh = sm_svc_mesh_enc(a, 0, name, mesh, !default_order))) {
        sm_arena_free(a);
        return oom(err, errlen);
    }
    sm_err e =
        mesh_call(ch, SM_SVC_COORD_PATH("CreateMesh"), &req.base, deadline_ms, out, err, errlen);
    sm_arena_free(a);
    return e;
}

sm_err sm_svc_coord_get_mesh(sm_rpc_channel *ch, int deadline_ms, sm_mesh_id id, const char *name,
                             sm_mesh_info *out, char *err, size_t errlen)
{
    Shmap__V1__Mesh req;
    shmap__v1__mesh__init(&req);
    req.id = id.v;
    req.name = (char *)(name ? name : "");
    return mesh_call(ch, SM_SVC_COORD_PATH("GetMesh"), &req.base, deadline_ms, out, err, errlen);
}

static sm_err mesh_item_dec(const void *item, const char *what, void *out, char *err, size_t errlen)
{
    return sm_svc_mesh_info_dec(item, what, out, err, errlen);
}

sm_err sm_svc_coord_list_meshes(sm_rpc_channel *ch, int deadline_ms, sm_mesh_info **out, int *n,
                                char *err, size_t errlen)
{
    list_reply r = {"meshes", SM_SVC_MAX_LIST, sizeof **out, mesh_item_dec, NULL, NULL, 0};
    return list_call(ch, SM_SVC_COORD_PATH("ListMeshes"), deadline_ms,
                     &shmap__v1__list_meshes_reply__descriptor, r, (void **)out, n, err, errlen);
}

/* out is left empty on failure. */
static sm_err create_array_dec(const ProtobufCMessage *m, void *o, char *err, size_t errlen)
{
    const Shmap__V1__CreateArrayReply *r = (const Shmap__V1__CreateArrayReply *)m;
    sm_svc_create_array_reply *out = o;
    char what[64];
    sm_err e;
    if (!r->array)
        e = sm_fail(err, errlen, SM_EINVAL, "CreateArrayReply.array is missing");
    else
        e = sm_svc_array_info_dec(r->array, "CreateArrayReply.array", &out->array, err, errlen);
    if (!e)
        e = sm_svc_count_dec(r->n_targets, SM_MAX_DEVICES, "CreateArrayReply", "targets", err,
                             errlen);
    if (!e && r->n_targets && !(out->targets = calloc(r->n_targets, sizeof *out->targets)))
        e = sm_fail(err, errlen, SM_ENOMEM, "cannot allocate %zu targets", r->n_targets);
    for (size_t i = 0; !e && i < r->n_targets; i++) {
        snprintf(what, sizeof what, "CreateArrayReply.targets[%zu]", i);
        e = sm_svc_target_dec(r->targets[i], what, &out->targets[i], err, errlen);
        out->ntargets = (int)i + 1;
    }
    if (e)
        sm_svc_create_array_reply_free(out);
    return e;
}

sm_err sm_svc_coord_create_array(sm_rpc_channel *ch, int deadline_ms,
                                 const sm_svc_create_array_req *req, sm_svc_create_array_reply *out,
                                 char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    Shmap__V1__CreateArrayRequest p;
    shmap__v1__create_array_request__init(&p);
    sm_arena *a = sm_arena_create(4096);
    if (!a)
        return oom(err, errlen);
    p.name = (char *)(req->name ? req->name : "");
    p.dtype = sm_svc_dtype_enc(req->dtype);
    p.shape = req->has_shape ? sm_svc_shape_enc(a, &req->shape) : NULL;
    p.sharding = sm_svc_sharding_ref_enc(a, &req->sharding);
    p.kind = (Shmap__V1__PutKind)req->kind;
    p.process = req->process;
    p.local_shape = sm_svc_shape_enc(a, &req->local_shape);
    p.deadline_ms = req->deadline_ms;
    if ((req->has_shape && !p.shape) || !p.sharding || !p.local_shape) {
        sm_arena_free(a);
        return oom(err, errlen);
    }
    sm_err e = sm_svc_unary(ch, SM_SVC_COORD_PATH("CreateArray"), deadline_ms, &p.base,
                            &shmap__v1__create_array_reply__descriptor, create_array_dec, out, err,
                            errlen);
    sm_arena_free(a);
    return e;
}

static sm_err info_dec(const ProtobufCMessage *m, void *out, char *err, size_t errlen)
{
    return sm_svc_array_info_dec((const Shmap__V1__ArrayInfo *)m, "ArrayInfo", out, err, errlen);
}

/* An ArrayInfo reply into out. */
static sm_err info_call(sm_rpc_channel *ch, const char *path, const ProtobufCMessage *req,
                        int deadline_ms, sm_array_info *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    return sm_svc_unary(ch, path, deadline_ms, req, &shmap__v1__array_info__descriptor, info_dec,
                        out, err, errlen);
}

sm_err sm_svc_coord_describe(sm_rpc_channel *ch, int deadline_ms, sm_array_ref ref,
                             sm_array_info *out, char *err, size_t errlen)
{
    Shmap__V1__ArrayRef req;
    sm_svc_array_ref_fill(ref, &req);
    return info_call(ch, SM_SVC_COORD_PATH("Describe"), &req.base, deadline_ms, out, err, errlen);
}

static sm_err array_item_dec(const void *item, const char *what, void *out, char *err,
                             size_t errlen)
{
    return sm_svc_array_info_dec(item, what, out, err, errlen);
}

static void array_list_free(void *list, int n)
{
    sm_array_info_list_free(list, n);
}

sm_err sm_svc_coord_list_arrays(sm_rpc_channel *ch, int deadline_ms, sm_array_info **out, int *n,
                                char *err, size_t errlen)
{
    list_reply r = {"arrays", SM_SVC_MAX_LIST, sizeof **out, array_item_dec, array_list_free, NULL,
                    0};
    return list_call(ch, SM_SVC_COORD_PATH("ListArrays"), deadline_ms,
                     &shmap__v1__list_arrays_reply__descriptor, r, (void **)out, n, err, errlen);
}

sm_err sm_svc_coord_delete(sm_rpc_channel *ch, int deadline_ms, sm_array_ref ref, char *err,
                           size_t errlen)
{
    Shmap__V1__ArrayRef req;
    sm_svc_array_ref_fill(ref, &req);
    return sm_svc_unary(ch, SM_SVC_COORD_PATH("Delete"), deadline_ms, &req.base,
                        &shmap__v1__empty__descriptor, NULL, NULL, err, errlen);
}

sm_err sm_svc_coord_reshard(sm_rpc_channel *ch, int deadline_ms, const sm_svc_reshard_req *req,
                            sm_array_info *out, char *err, size_t errlen)
{
    Shmap__V1__ReshardRequest p;
    shmap__v1__reshard_request__init(&p);
    sm_arena *a = sm_arena_create(4096);
    if (!a)
        return oom(err, errlen);
    p.array = sm_svc_array_ref_enc(a, req->array);
    p.sharding = sm_svc_sharding_ref_enc(a, &req->sharding);
    p.name = (char *)(req->name ? req->name : "");
    p.deadline_ms = req->deadline_ms;
    sm_err e = !p.array || !p.sharding ? oom(err, errlen)
                                       : info_call(ch, SM_SVC_COORD_PATH("Reshard"), &p.base,
                                                   deadline_ms, out, err, errlen);
    sm_arena_free(a);
    return e;
}

/* The wire form of n held shards: *msgs and the pointer array *ptrs
 * (both malloc'd, NULL when n is 0); -1 when out of memory. */
static int held_enc(const sm_svc_held_shard *in, int n, Shmap__V1__HeldShard **msgs,
                    Shmap__V1__HeldShard ***ptrs)
{
    *msgs = NULL;
    *ptrs = NULL;
    if (n <= 0)
        return 0;
    *msgs = calloc((size_t)n, sizeof **msgs);
    *ptrs = calloc((size_t)n, sizeof **ptrs);
    if (!*msgs || !*ptrs) {
        free(*msgs);
        free(*ptrs);
        return -1;
    }
    for (int k = 0; k < n; k++) {
        shmap__v1__held_shard__init(&(*msgs)[k]);
        (*msgs)[k].array_id = in[k].array;
        (*msgs)[k].device = in[k].device;
        (*msgs)[k].checksum = in[k].checksum;
        (*ptrs)[k] = &(*msgs)[k];
    }
    return 0;
}

sm_err sm_svc_coord_replicate(sm_rpc_channel *ch, int deadline_ms, const sm_svc_replicate_req *req,
                              sm_array_info *out, char *err, size_t errlen)
{
    Shmap__V1__ReplicateRequest p;
    Shmap__V1__ArrayRef ref;
    shmap__v1__replicate_request__init(&p);
    sm_svc_array_ref_fill(req->array, &ref);
    p.array = &ref;
    p.replicas = req->replicas;
    p.deadline_ms = req->deadline_ms;
    return info_call(ch, SM_SVC_COORD_PATH("Replicate"), &p.base, deadline_ms, out, err, errlen);
}

static sm_err save_dec(const ProtobufCMessage *m, void *o, char *err, size_t errlen)
{
    const Shmap__V1__SaveReply *r = (const Shmap__V1__SaveReply *)m;
    sm_svc_save_reply *out = o;
    if (r->bytes < 0 || r->files < 0)
        return sm_fail(err, errlen, SM_EINVAL, "SaveReply has %lld bytes in %d files",
                       (long long)r->bytes, (int)r->files);
    out->bytes = r->bytes;
    out->files = r->files;
    return SM_OK;
}

sm_err sm_svc_coord_save(sm_rpc_channel *ch, int deadline_ms, const sm_svc_save_req *req,
                         sm_svc_save_reply *out, char *err, size_t errlen)
{
    Shmap__V1__SaveRequest p;
    shmap__v1__save_request__init(&p);
    sm_arena *a = sm_arena_create(1024);
    if (!a)
        return oom(err, errlen);
    p.array = sm_svc_array_ref_enc(a, req->array);
    p.dir = (char *)(req->dir ? req->dir : "");
    p.deadline_ms = req->deadline_ms;
    memset(out, 0, sizeof *out);
    sm_err e = !p.array
                   ? oom(err, errlen)
                   : sm_svc_unary(ch, SM_SVC_COORD_PATH("Save"), deadline_ms, &p.base,
                                  &shmap__v1__save_reply__descriptor, save_dec, out, err, errlen);
    sm_arena_free(a);
    return e;
}

sm_err sm_svc_coord_load(sm_rpc_channel *ch, int deadline_ms, const sm_svc_load_req *req,
                         sm_array_info *out, char *err, size_t errlen)
{
    Shmap__V1__LoadRequest p;
    shmap__v1__load_request__init(&p);
    sm_arena *a = sm_arena_create(4096);
    if (!a)
        return oom(err, errlen);
    p.dir = (char *)(req->dir ? req->dir : "");
    p.sharding = sm_svc_sharding_ref_enc(a, &req->sharding);
    p.name = (char *)(req->name ? req->name : "");
    p.deadline_ms = req->deadline_ms;
    sm_err e = !p.sharding ? oom(err, errlen)
                           : info_call(ch, SM_SVC_COORD_PATH("Load"), &p.base, deadline_ms, out,
                                       err, errlen);
    sm_arena_free(a);
    return e;
}

static sm_err register_dec(const ProtobufCMessage *m, void *o, char *err, size_t errlen)
{
    const Shmap__V1__RegisterWorkerReply *r = (const Shmap__V1__RegisterWorkerReply *)m;
    sm_svc_register_reply *out = o;
    memset(out, 0, sizeof *out);
    sm_err e = sm_svc_count_dec(r->n_devices, SM_MAX_WORKER_DEVICES, "RegisterWorkerReply",
                                "devices", err, errlen);
    if (e)
        return e;
    out->worker_id.v = r->worker_id;
    out->ndevices = (int)r->n_devices;
    sm_svc_copy(out->devices, r->devices, r->n_devices * sizeof *r->devices);
    out->process_index = r->process_index;
    out->heartbeat_ms = r->heartbeat_ms;
    out->epoch = r->epoch;
    out->keep_shards = r->keep_shards != 0;
    return SM_OK;
}

sm_err sm_svc_coord_register(sm_rpc_channel *ch, int deadline_ms, const sm_svc_register_req *req,
                             sm_svc_register_reply *out, char *err, size_t errlen)
{
    Shmap__V1__RegisterWorkerRequest p;
    shmap__v1__register_worker_request__init(&p);
    p.address = (char *)(req->address ? req->address : "");
    p.ndevices = req->ndevices;
    p.process_index = req->process_index;
    p.host = (char *)(req->host ? req->host : "");
    p.worker_id = req->worker_id.v;
    p.program_level = req->program_level;
    p.version = (char *)(req->version ? req->version : "");
    if (req->devices) {
        p.n_devices = (size_t)req->ndevices;
        p.devices = (int32_t *)req->devices;
    }
    Shmap__V1__HeldShard *held = NULL, **heldp = NULL;
    if (held_enc(req->held, req->nheld, &held, &heldp))
        return oom(err, errlen);
    p.n_held = req->nheld > 0 ? (size_t)req->nheld : 0;
    p.held = heldp;
    sm_err e =
        sm_svc_unary(ch, SM_SVC_COORD_PATH("RegisterWorker"), deadline_ms, &p.base,
                     &shmap__v1__register_worker_reply__descriptor, register_dec, out, err, errlen);
    free(held);
    free(heldp);
    return e;
}

static sm_err heartbeat_dec(const ProtobufCMessage *m, void *known, char *err, size_t errlen)
{
    (void)err, (void)errlen;
    if (known)
        *(int *)known = ((const Shmap__V1__HeartbeatReply *)m)->known != 0;
    return SM_OK;
}

sm_err sm_svc_coord_heartbeat(sm_rpc_channel *ch, int deadline_ms, const sm_svc_heartbeat_req *req,
                              int *known, char *err, size_t errlen)
{
    if (req->ndevices < 0 || req->ndevices > SM_MAX_WORKER_DEVICES)
        return sm_fail(err, errlen, SM_EINVAL, "a heartbeat carries 0 to %d devices, not %d",
                       SM_MAX_WORKER_DEVICES, req->ndevices);
    Shmap__V1__HeartbeatRequest p;
    shmap__v1__heartbeat_request__init(&p);
    p.worker_id = req->worker_id.v;
    p.epoch = req->epoch;
    p.n_device_bytes = (size_t)req->ndevices;
    p.device_bytes = (int64_t *)req->device_bytes;
    int ns = req->nspilled > 0 ? req->nspilled : 0;
    if (ns > SM_SVC_SPILLED_MAX)
        ns = SM_SVC_SPILLED_MAX;
    Shmap__V1__HeldShard *sp = NULL, **spp = NULL;
    if (held_enc(req->spilled, ns, &sp, &spp))
        return oom(err, errlen);
    p.n_spilled = (size_t)ns;
    p.spilled = spp;
    sm_err e =
        sm_svc_unary(ch, SM_SVC_COORD_PATH("Heartbeat"), deadline_ms, &p.base,
                     &shmap__v1__heartbeat_reply__descriptor, heartbeat_dec, known, err, errlen);
    free(sp);
    free(spp);
    return e;
}

static sm_err commit_dec(const ProtobufCMessage *m, void *o, char *err, size_t errlen)
{
    (void)err, (void)errlen;
    const Shmap__V1__UploadReply *r = (const Shmap__V1__UploadReply *)m;
    sm_svc_upload_reply *out = o;
    if (out) {
        out->bytes = r->bytes;
        out->checksum = r->checksum;
        out->array_ready = r->array_ready != 0;
    }
    return SM_OK;
}

sm_err sm_svc_coord_commit_shards(sm_rpc_channel *ch, int deadline_ms, const sm_svc_commit_req *req,
                                  sm_svc_upload_reply *out, char *err, size_t errlen)
{
    Shmap__V1__CommitShardsRequest p;
    size_t nt = req->ntargets > 0 ? (size_t)req->ntargets : 0;
    Shmap__V1__CommitTarget *t = calloc(nt + 1, sizeof *t);
    Shmap__V1__CommitTarget **tp = calloc(nt + 1, sizeof *tp);
    sm_err e;
    if (!t || !tp) {
        free(t);
        free(tp);
        return sm_fail(err, errlen, SM_ENOMEM, "out of memory encoding a commit");
    }
    shmap__v1__commit_shards_request__init(&p);
    p.array_id = req->array_id.v;
    p.n_devices = req->ndevices > 0 ? (size_t)req->ndevices : 0;
    p.devices = (int32_t *)req->devices;
    p.checksum = req->checksum;
    p.bytes = req->bytes;
    for (size_t k = 0; k < nt; k++) {
        shmap__v1__commit_target__init(&t[k]);
        t[k].n_devices = req->targets[k].ndevices > 0 ? (size_t)req->targets[k].ndevices : 0;
        t[k].devices = (int32_t *)req->targets[k].devices;
        t[k].checksum = req->targets[k].checksum;
        t[k].bytes = req->targets[k].bytes;
        tp[k] = &t[k];
    }
    p.n_targets = nt;
    p.targets = tp;
    e = sm_svc_unary(ch, SM_SVC_COORD_PATH("CommitShards"), deadline_ms, &p.base,
                     &shmap__v1__upload_reply__descriptor, commit_dec, out, err, errlen);
    free(t);
    free(tp);
    return e;
}
