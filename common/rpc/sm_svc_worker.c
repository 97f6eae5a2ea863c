/* sm_svc_worker: the Worker service: adapters (decode, call the handler,
 * encode) and client calls. PutShard and GetShard share the stream code of
 * sm_svc_stream.c with Coordinator.Upload and Download. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sm_svc_internal.h"

/* ---- CheckpointFile conversions ---------------------------------------------------- */

static Shmap__V1__CheckpointFile *ckpt_file_enc(sm_arena *a, const sm_svc_ckpt_file *f,
                                                int with_shape)
{
    Shmap__V1__CheckpointFile *p =
        SM_SVC_NEW(a, Shmap__V1__CheckpointFile, shmap__v1__checkpoint_file__init);
    if (!p)
        return NULL;
    p->file = (char *)(f->file ? f->file : "");
    p->device = f->device;
    if (with_shape && !(p->shape = sm_svc_shape_enc(a, &f->shape)))
        return NULL;
    p->bytes = f->bytes;
    p->checksum = f->checksum;
    p->chunk_bytes = f->chunk_bytes;
    p->n_chunk_sums = f->nchunks < 0                    ? 0
                      : f->nchunks > SM_SVC_CKPT_CHUNKS ? SM_SVC_CKPT_CHUNKS
                                                        : (size_t)f->nchunks;
    p->chunk_sums = (uint64_t *)f->chunk_sums;
    return p;
}

/* file points into p. The name is checked to be a plain file name (no
 * directory part), so that no request reaches outside its directory. */
static sm_err ckpt_file_dec(const Shmap__V1__CheckpointFile *p, const char *what,
                            sm_svc_ckpt_file *out, char *err, size_t errlen)
{
    char sub[160];
    sm_err e;
    memset(out, 0, sizeof *out);
    snprintf(sub, sizeof sub, "%s.file", what);
    if ((e = sm_svc_str_dec(p->file, 256, sub, NULL, err, errlen)))
        return e;
    const char *f = p->file ? p->file : "";
    if (!*f || strchr(f, '/') || !strcmp(f, ".") || !strcmp(f, ".."))
        return sm_fail(err, errlen, SM_EINVAL,
                       "%s is '%s'; it must be a plain file name inside the checkpoint directory",
                       sub, f);
    snprintf(sub, sizeof sub, "%s.shape", what);
    if ((e = sm_svc_shape_dec(p->shape, sub, &out->shape, err, errlen)))
        return e;
    if (p->bytes < 0)
        return sm_fail(err, errlen, SM_EINVAL, "%s.bytes is negative (%lld)", what,
                       (long long)p->bytes);
    snprintf(sub, sizeof sub, "%s", what);
    if ((e = sm_svc_count_dec(p->n_chunk_sums, SM_SVC_CKPT_CHUNKS, sub, "chunk_sums", err, errlen)))
        return e;
    if (p->n_chunk_sums &&
        (p->chunk_bytes < 1 ||
         (p->bytes + p->chunk_bytes - 1) / p->chunk_bytes != (int64_t)p->n_chunk_sums))
        return sm_fail(err, errlen, SM_EINVAL,
                       "%s has %zu chunk_sums for %lld bytes in chunks of %lld; they do not fit",
                       what, p->n_chunk_sums, (long long)p->bytes, (long long)p->chunk_bytes);
    out->chunk_bytes = p->chunk_bytes;
    out->nchunks = (int)p->n_chunk_sums;
    sm_svc_copy(out->chunk_sums, p->chunk_sums, p->n_chunk_sums * sizeof *p->chunk_sums);
    out->file = f;
    out->device = p->device;
    out->bytes = p->bytes;
    out->checksum = p->checksum;
    return SM_OK;
}

/* A checkpoint directory: non-empty, absolute, at most SM_SVC_PATH_MAX. */
static sm_err ckpt_dir_dec(const char *dir, const char *what, char *err, size_t errlen)
{
    sm_err e = sm_svc_str_dec(dir, SM_SVC_PATH_MAX, what, NULL, err, errlen);
    if (!e && (!dir || dir[0] != '/'))
        e = sm_fail(err, errlen, SM_EINVAL, "%s is '%s'; it must be an absolute path", what,
                    dir ? dir : "");
    return e;
}

/* ---- AssembleRequest conversions ------------------------------------------------- */

static Shmap__V1__AssembleRequest *assemble_enc(sm_arena *a, const sm_svc_assemble_req *req)
{
    Shmap__V1__AssembleRequest *p =
        SM_SVC_NEW(a, Shmap__V1__AssembleRequest, shmap__v1__assemble_request__init);
    if (!p)
        return NULL;
    p->array_id = req->array_id.v;
    p->dtype = sm_svc_dtype_enc(req->dtype);
    int ns = req->nshards > 0 ? req->nshards : 0;
    if (!(p->shards = sm_arena_alloc(a, (size_t)(ns ? ns : 1) * sizeof *p->shards)))
        return NULL;
    p->n_shards = (size_t)ns;
    for (int i = 0; i < ns; i++) {
        const sm_svc_assemble_shard *s = &req->shards[i];
        Shmap__V1__AssembleShard *q = sm_arena_alloc(a, sizeof *q);
        int np = s->npieces > 0 ? s->npieces : 0;
        if (!q)
            return NULL;
        shmap__v1__assemble_shard__init(q);
        q->device = s->device;
        q->shape = sm_svc_shape_enc(a, &s->shape);
        q->pieces = sm_arena_alloc(a, (size_t)(np ? np : 1) * sizeof *q->pieces);
        if (!q->shape || !q->pieces)
            return NULL;
        q->n_pieces = (size_t)np;
        for (int k = 0; k < np; k++) {
            const sm_svc_piece *pc = &s->pieces[k];
            Shmap__V1__AssemblePiece *x =
                SM_SVC_NEW(a, Shmap__V1__AssemblePiece, shmap__v1__assemble_piece__init);
            if (!x)
                return NULL;
            x->src_address = (char *)(pc->src_address ? pc->src_address : "");
            x->src_array = pc->src_array.v;
            x->src_device = pc->src_device;
            if (!(x->src_box = sm_svc_box_enc(a, &pc->src_box)))
                return NULL;
            x->n_dst_offset = sm_svc_rank(pc->src_box.rank);
            x->dst_offset = (int64_t *)pc->dst_offset;
            x->src_file = pc->src_file;
            q->pieces[k] = x;
        }
        p->shards[i] = q;
    }
    int nf = req->nfiles > 0 ? req->nfiles : 0;
    p->ckpt_dir = (char *)(req->ckpt_dir ? req->ckpt_dir : "");
    if (!(p->ckpt_files = sm_arena_alloc(a, (size_t)(nf ? nf : 1) * sizeof *p->ckpt_files)))
        return NULL;
    for (int f = 0; f < nf; f++)
        if (!(p->ckpt_files[p->n_ckpt_files++] = ckpt_file_enc(a, &req->files[f], 1)))
            return NULL;
    return p;
}

static sm_err piece_dec(const Shmap__V1__AssemblePiece *p, const char *what, sm_svc_piece *out,
                        char *err, size_t errlen)
{
    char sub[160];
    sm_err e;
    memset(out, 0, sizeof *out);
    snprintf(sub, sizeof sub, "%s.src_address", what);
    if ((e = sm_svc_str_dec(p->src_address, SM_ADDR_MAX, sub, NULL, err, errlen)))
        return e;
    snprintf(sub, sizeof sub, "%s.src_box", what);
    if ((e = sm_svc_box_dec(p->src_box, sub, &out->src_box, err, errlen)))
        return e;
    if (p->n_dst_offset != (size_t)out->src_box.rank)
        return sm_fail(err, errlen, SM_EINVAL,
                       "%s has %zu dst_offset values but a src_box of rank %d; one per dimension",
                       what, p->n_dst_offset, out->src_box.rank);
    for (size_t d = 0; d < p->n_dst_offset; d++) {
        if (p->dst_offset[d] < 0)
            return sm_fail(err, errlen, SM_EINVAL, "%s.dst_offset[%zu] is %lld; must be >= 0", what,
                           d, (long long)p->dst_offset[d]);
        out->dst_offset[d] = p->dst_offset[d];
    }
    out->src_address = p->src_address ? p->src_address : "";
    out->src_array.v = p->src_array;
    out->src_device = p->src_device;
    out->src_file = p->src_file;
    return SM_OK;
}

/* Decodes into arena memory (strings point into p). */
static sm_err assemble_dec(const Shmap__V1__AssembleRequest *p, sm_arena *a,
                           sm_svc_assemble_req *out, char *err, size_t errlen)
{
    char what[96];
    sm_err e;
    memset(out, 0, sizeof *out);
    out->array_id.v = p->array_id;
    if ((e = sm_svc_dtype_dec(p->dtype, "AssembleRequest.dtype", &out->dtype, err, errlen)) ||
        (e = sm_svc_count_dec(p->n_shards, SM_MAX_WORKER_DEVICES, "AssembleRequest", "shards", err,
                              errlen)))
        return e;
    out->shards = sm_arena_alloc(a, (p->n_shards ? p->n_shards : 1) * sizeof *out->shards);
    if (!out->shards)
        return sm_fail(err, errlen, SM_ENOMEM, "cannot allocate %zu shards", p->n_shards);
    for (size_t i = 0; i < p->n_shards; i++) {
        const Shmap__V1__AssembleShard *q = p->shards[i];
        sm_svc_assemble_shard *s = &out->shards[i];
        snprintf(what, sizeof what, "AssembleRequest.shards[%zu]", i);
        s->device = q->device;
        if ((e = sm_svc_count_dec(q->n_pieces, SM_MAX_DEVICES, what, "pieces", err, errlen)))
            return e;
        char sub[128];
        snprintf(sub, sizeof sub, "%s.shape", what);
        if ((e = sm_svc_shape_dec(q->shape, sub, &s->shape, err, errlen)))
            return e;
        s->pieces = sm_arena_alloc(a, (q->n_pieces ? q->n_pieces : 1) * sizeof *s->pieces);
        if (!s->pieces)
            return sm_fail(err, errlen, SM_ENOMEM, "cannot allocate %zu pieces", q->n_pieces);
        for (size_t k = 0; k < q->n_pieces; k++) {
            snprintf(sub, sizeof sub, "%s.pieces[%zu]", what, k);
            if ((e = piece_dec(q->pieces[k], sub, &s->pieces[k], err, errlen)))
                return e;
        }
        s->npieces = (int)q->n_pieces;
        for (int k = 0; k < s->npieces; k++)
            if (s->pieces[k].src_file < 0 || (size_t)s->pieces[k].src_file > p->n_ckpt_files)
                return sm_fail(err, errlen, SM_EINVAL,
                               "%s.pieces[%d].src_file is %d; the request lists %zu checkpoint "
                               "files",
                               what, k, s->pieces[k].src_file, p->n_ckpt_files);
    }
    out->nshards = (int)p->n_shards;
    if ((e = sm_svc_count_dec(p->n_ckpt_files, SM_SVC_MAX_CKPT_FILES, "AssembleRequest",
                              "ckpt_files", err, errlen)))
        return e;
    if (p->n_ckpt_files && (e = ckpt_dir_dec(p->ckpt_dir, "AssembleRequest.ckpt_dir", err, errlen)))
        return e;
    out->ckpt_dir = p->ckpt_dir ? p->ckpt_dir : "";
    out->files = sm_arena_alloc(a, (p->n_ckpt_files ? p->n_ckpt_files : 1) * sizeof *out->files);
    if (!out->files)
        return sm_fail(err, errlen, SM_ENOMEM, "cannot allocate %zu files", p->n_ckpt_files);
    for (size_t f = 0; f < p->n_ckpt_files; f++) {
        snprintf(what, sizeof what, "AssembleRequest.ckpt_files[%zu]", f);
        if ((e = ckpt_file_dec(p->ckpt_files[f], what, &out->files[f], err, errlen)))
            return e;
    }
    out->nfiles = (int)p->n_ckpt_files;
    return SM_OK;
}

/* ---- adapters ---------------------------------------------------------------------- */

static void put_shard(sm_rpc_call *call, void *u)
{
    const sm_svc_ctx *c = u;
    sm_svc_serve_upload(call, c->worker->put_shard, c->user, 1);
}

static void get_shard(sm_rpc_call *call, void *u)
{
    const sm_svc_ctx *c = u;
    sm_svc_serve_download(call, c->worker->get_shard, c->user, 1);
}

static sm_err free_array(SM_SVC_UNARY_ARGS)
{
    const sm_svc_ctx *c = ctx;
    const Shmap__V1__FreeArrayRequest *r = (const Shmap__V1__FreeArrayRequest *)m;
    (void)rp;
    (void)a;
    sm_err e =
        sm_svc_count_dec(r->n_devices, SM_MAX_DEVICES, "FreeArrayRequest", "devices", err, errlen);
    return e ? e
             : c->worker->free_array(c->user, (sm_array_id){r->array_id}, (int)r->n_devices,
                                     r->devices, err, errlen);
}

static sm_err assemble(SM_SVC_UNARY_ARGS)
{
    const sm_svc_ctx *c = ctx;
    Shmap__V1__AssembleReply *rep = (Shmap__V1__AssembleReply *)rp;
    sm_svc_assemble_req req;
    int64_t bytes = 0;
    sm_err e = assemble_dec((const Shmap__V1__AssembleRequest *)m, a, &req, err, errlen);
    if (!e)
        e = c->worker->assemble(c->user, &req, &bytes, err, errlen);
    rep->bytes = bytes;
    return e;
}

static sm_err stats(SM_SVC_UNARY_ARGS)
{
    const sm_svc_ctx *c = ctx;
    Shmap__V1__WorkerStatsReply *rep = (Shmap__V1__WorkerStatsReply *)rp;
    (void)m;
    sm_svc_worker_stats *out = sm_arena_alloc(a, sizeof *out);
    sm_err e = out ? c->worker->stats(c->user, out, err, errlen)
                   : sm_fail(err, errlen, SM_ENOMEM, "cannot allocate stats");
    if (!e && (out->ndevices < 0 || out->ndevices > SM_MAX_WORKER_DEVICES))
        e = sm_fail(err, errlen, SM_EINTERNAL, "the stats handler returned %d devices",
                    out->ndevices);
    if (e)
        return e;
    rep->n_devices = rep->n_device_bytes = (size_t)out->ndevices;
    rep->devices = out->devices;
    rep->device_bytes = out->device_bytes;
    rep->shards = out->shards;
    rep->shm_transfer_bytes = out->shm_transfer_bytes;
    rep->peer_shm_bytes = out->peer_shm_bytes;
    rep->peer_grpc_bytes = out->peer_grpc_bytes;
    rep->collective_in_place_bytes = out->collective_in_place_bytes;
    return SM_OK;
}

static sm_err shard_info(SM_SVC_UNARY_ARGS)
{
    const sm_svc_ctx *c = ctx;
    const Shmap__V1__ShardInfoRequest *r = (const Shmap__V1__ShardInfoRequest *)m;
    Shmap__V1__ShardInfoReply *rep = (Shmap__V1__ShardInfoReply *)rp;
    sm_svc_shard_state st[SM_MAX_WORKER_DEVICES];
    int n = (int)r->n_devices;
    memset(st, 0, sizeof st);
    sm_err e = sm_svc_count_dec(r->n_devices, SM_MAX_WORKER_DEVICES, "ShardInfoRequest", "devices",
                                err, errlen);
    if (!e && n < 1)
        e = sm_fail(err, errlen, SM_EINVAL, "ShardInfoRequest lists no devices");
    if (!e)
        e = c->worker->shard_info(c->user, (sm_array_id){r->array_id}, n, r->devices, st, err,
                                  errlen);
    if (e)
        return e;
    Shmap__V1__ShardState *ps = sm_arena_alloc(a, (size_t)n * sizeof *ps);
    if (!ps || !(rep->shards = sm_arena_alloc(a, (size_t)n * sizeof *rep->shards)))
        return sm_svc_enc_nomem(err, errlen);
    for (int k = 0; k < n; k++) {
        shmap__v1__shard_state__init(&ps[k]);
        ps[k].device = st[k].device;
        ps[k].present = st[k].present != 0;
        ps[k].bytes = st[k].bytes;
        ps[k].checksum = st[k].checksum;
        rep->shards[k] = &ps[k];
    }
    rep->n_shards = (size_t)n;
    return SM_OK;
}

static sm_err write_checkpoint(SM_SVC_UNARY_ARGS)
{
    const sm_svc_ctx *c = ctx;
    const Shmap__V1__WriteCheckpointRequest *r = (const Shmap__V1__WriteCheckpointRequest *)m;
    Shmap__V1__WriteCheckpointReply *rep = (Shmap__V1__WriteCheckpointReply *)rp;
    char what[80];
    int n = (int)r->n_files;
    sm_err e = sm_svc_count_dec(r->n_files, SM_MAX_WORKER_DEVICES, "WriteCheckpointRequest",
                                "files", err, errlen);
    size_t cap = e || !n ? 1 : (size_t)n; /* ~600 bytes a file: not on the stack */
    sm_svc_ckpt_file *in = sm_arena_alloc(a, cap * sizeof *in);
    sm_svc_ckpt_file *out = sm_arena_alloc(a, cap * sizeof *out);
    Shmap__V1__CheckpointFile *pf = sm_arena_alloc(a, cap * sizeof *pf);
    Shmap__V1__CheckpointFile **pp = sm_arena_alloc(a, cap * sizeof *pp);
    if (!e && (!in || !out || !pf || !pp))
        e = sm_fail(err, errlen, SM_ENOMEM, "out of memory for %d checkpoint files", n);
    if (!e)
        e = ckpt_dir_dec(r->dir, "WriteCheckpointRequest.dir", err, errlen);
    if (!e)
        e = sm_svc_str_dec(r->manifest, SM_SVC_MANIFEST_MAX, "WriteCheckpointRequest.manifest",
                           NULL, err, errlen);
    int has_manifest = r->manifest && *r->manifest;
    if (!e && has_manifest == (n > 0))
        e = sm_fail(err, errlen, SM_EINVAL,
                    "a WriteCheckpointRequest gives either files or a manifest%s",
                    n ? ", not both" : "");
    for (int k = 0; !e && k < n; k++) {
        snprintf(what, sizeof what, "WriteCheckpointRequest.files[%d]", k);
        e = ckpt_file_dec(r->files[k], what, &in[k], err, errlen);
        out[k] = in[k];
        out[k].bytes = 0;
        out[k].checksum = 0;
        out[k].nchunks = 0;
    }
    if (!e) {
        sm_svc_ckpt_write_req req = {
            {r->array_id}, r->dir, n, in, has_manifest ? r->manifest : NULL};
        e = c->worker->write_checkpoint(c->user, &req, out, err, errlen);
    }
    if (e)
        return e;
    for (int k = 0; k < n; k++) {
        shmap__v1__checkpoint_file__init(&pf[k]);
        pf[k].file = (char *)in[k].file;
        pf[k].device = in[k].device;
        pf[k].bytes = out[k].bytes;
        pf[k].checksum = out[k].checksum;
        pf[k].chunk_bytes = out[k].chunk_bytes;
        pf[k].n_chunk_sums =
            out[k].nchunks < 0 || out[k].nchunks > SM_SVC_CKPT_CHUNKS ? 0 : (size_t)out[k].nchunks;
        pf[k].chunk_sums = out[k].chunk_sums;
        pp[k] = &pf[k];
    }
    rep->n_files = (size_t)n;
    rep->files = pp;
    return SM_OK;
}

static void text_free(void *p)
{
    free(*(char **)p);
}

static sm_err read_manifest(SM_SVC_UNARY_ARGS)
{
    const sm_svc_ctx *c = ctx;
    const Shmap__V1__ReadManifestRequest *r = (const Shmap__V1__ReadManifestRequest *)m;
    Shmap__V1__ReadManifestReply *rep = (Shmap__V1__ReadManifestReply *)rp;
    char **text = sm_svc_arena_obj(a, sizeof *text, text_free);
    if (!text)
        return sm_svc_enc_nomem(err, errlen);
    sm_err e = ckpt_dir_dec(r->dir, "ReadManifestRequest.dir", err, errlen);
    if (!e)
        e = c->worker->read_manifest(c->user, r->dir, text, err, errlen);
    if (!e && !*text)
        e = sm_fail(err, errlen, SM_EINTERNAL, "the read_manifest handler returned no text");
    rep->manifest = *text ? *text : "";
    return e;
}

sm_err sm_svc_worker_serve(sm_rpc_server *s, const sm_svc_worker_ops *ops, void *user,
                           const char *server_name, char *err, size_t errlen)
{
    static const sm_svc_worker_ops none; /* ops NULL: every method UNIMPLEMENTED */
    const sm_svc_worker_ops *o = ops ? ops : &none;
    sm_svc_ctx *ctx = sm_svc_ctx_create(NULL, o, user, server_name);
    if (!ctx)
        return sm_fail(err, errlen, SM_ENOMEM, "cannot allocate the worker adapters");
    const sm_svc_row rows[] = {
#define ROW(name, req, rep, fn)                                                                    \
    SM_SVC_UNARY_ROW(SM_SVC_WORKER_PATH(name), req, rep, fn, o->fn != NULL)
        /* a tenant's client may move the shards the coordinator granted it */
        SM_SVC_GRANT_ROW(SM_SVC_WORKER_PATH("PutShard"), SM_RPC_CLIENT_STREAM,
                         shmap__v1__upload_msg, put_shard),
        SM_SVC_GRANT_ROW(SM_SVC_WORKER_PATH("GetShard"), SM_RPC_SERVER_STREAM,
                         shmap__v1__download_request, get_shard),
        ROW("FreeArray", shmap__v1__free_array_request, shmap__v1__empty, free_array),
        ROW("Assemble", shmap__v1__assemble_request, shmap__v1__assemble_reply, assemble),
        ROW("Stats", shmap__v1__empty, shmap__v1__worker_stats_reply, stats),
        ROW("ShardInfo", shmap__v1__shard_info_request, shmap__v1__shard_info_reply, shard_info),
        ROW("WriteCheckpoint", shmap__v1__write_checkpoint_request,
            shmap__v1__write_checkpoint_reply, write_checkpoint),
        ROW("ReadManifest", shmap__v1__read_manifest_request, shmap__v1__read_manifest_reply,
            read_manifest),
#undef ROW
    };
    sm_err e = sm_svc_negotiate_add(s, SM_SVC_WORKER_PATH("Negotiate"), ctx, err, errlen);
    return e ? e : sm_svc_add_rows(s, ctx, rows, sizeof rows / sizeof rows[0], err, errlen);
}

/* ---- client calls ------------------------------------------------------------------ */

sm_err sm_svc_worker_free_array(sm_rpc_channel *ch, int deadline_ms, sm_array_id id, int ndevices,
                                const int32_t *devices, char *err, size_t errlen)
{
    Shmap__V1__FreeArrayRequest p;
    shmap__v1__free_array_request__init(&p);
    p.array_id = id.v;
    p.n_devices = ndevices > 0 ? (size_t)ndevices : 0;
    p.devices = (int32_t *)devices;
    return sm_svc_unary(ch, SM_SVC_WORKER_PATH("FreeArray"), deadline_ms, &p.base,
                        &shmap__v1__empty__descriptor, NULL, NULL, err, errlen);
}

sm_err sm_svc_worker_assemble(sm_rpc_channel *ch, int deadline_ms, const sm_svc_assemble_req *req,
                              int64_t *bytes, char *err, size_t errlen)
{
    sm_arena *a = sm_arena_create(0);
    Shmap__V1__AssembleRequest *p = a ? assemble_enc(a, req) : NULL;
    if (!p) {
        if (a)
            sm_arena_free(a);
        return sm_fail(err, errlen, SM_ENOMEM, "out of memory encoding an assemble request");
    }
    ProtobufCMessage *m;
    sm_err e = sm_rpc_unary(ch, SM_SVC_WORKER_PATH("Assemble"), &p->base,
                            &shmap__v1__assemble_reply__descriptor, &m, deadline_ms, err, errlen);
    sm_arena_free(a);
    if (e)
        return e;
    if (bytes)
        *bytes = ((const Shmap__V1__AssembleReply *)m)->bytes;
    sm_rpc_msg_free(m);
    return SM_OK;
}

static sm_err stats_dec(const ProtobufCMessage *m, void *o, char *err, size_t errlen)
{
    const Shmap__V1__WorkerStatsReply *r = (const Shmap__V1__WorkerStatsReply *)m;
    sm_svc_worker_stats *out = o;
    memset(out, 0, sizeof *out);
    sm_err e = sm_svc_count_dec(r->n_devices, SM_MAX_WORKER_DEVICES, "WorkerStatsReply", "devices",
                                err, errlen);
    if (e)
        return e;
    if (r->n_device_bytes != r->n_devices)
        return sm_fail(err, errlen, SM_EINVAL,
                       "WorkerStatsReply has %zu devices but %zu device_bytes", r->n_devices,
                       r->n_device_bytes);
    out->ndevices = (int)r->n_devices;
    sm_svc_copy(out->devices, r->devices, r->n_devices * sizeof *r->devices);
    sm_svc_copy(out->device_bytes, r->device_bytes, r->n_device_bytes * sizeof *r->device_bytes);
    out->shards = r->shards;
    out->shm_transfer_bytes = r->shm_transfer_bytes;
    out->peer_shm_bytes = r->peer_shm_bytes;
    out->peer_grpc_bytes = r->peer_grpc_bytes;
    out->collective_in_place_bytes = r->collective_in_place_bytes;
    return SM_OK;
}

sm_err sm_svc_worker_stats_get(sm_rpc_channel *ch, int deadline_ms, sm_svc_worker_stats *out,
                               char *err, size_t errlen)
{
    return sm_svc_unary(ch, SM_SVC_WORKER_PATH("Stats"), deadline_ms, NULL,
                        &shmap__v1__worker_stats_reply__descriptor, stats_dec, out, err, errlen);
}

typedef struct {
    int n;
    sm_svc_shard_state *out;
} shard_info_out;

static sm_err shard_info_dec(const ProtobufCMessage *m, void *o, char *err, size_t errlen)
{
    const Shmap__V1__ShardInfoReply *r = (const Shmap__V1__ShardInfoReply *)m;
    shard_info_out *so = o;
    if (r->n_shards != (size_t)so->n)
        return sm_fail(err, errlen, SM_EINVAL, "ShardInfoReply has %zu shards for %d devices",
                       r->n_shards, so->n);
    for (int k = 0; k < so->n; k++) {
        const Shmap__V1__ShardState *p = r->shards[k];
        so->out[k].device = p->device;
        so->out[k].present = p->present != 0;
        so->out[k].bytes = p->bytes;
        so->out[k].checksum = p->checksum;
    }
    return SM_OK;
}

static void shard_info_all_done(void *user, int i, sm_err e, ProtobufCMessage *reply,
                                const char *err)
{
    sm_svc_shard_query *q = (sm_svc_shard_query *)user + i;
    char tmp[SM_SVC_ERRLEN];
    if (!e) {
        shard_info_out so = {q->ndevices, q->out};
        if ((e = shard_info_dec(reply, &so, tmp, sizeof tmp)))
            e = sm_svc_bad_reply(SM_SVC_WORKER_PATH("ShardInfo"), tmp, q->err, sizeof q->err);
    } else {
        snprintf(q->err, sizeof q->err, "%s", err);
    }
    if (reply)
        sm_rpc_msg_free(reply);
    q->e = e;
}

void sm_svc_worker_shard_info_all(sm_rpc_channel *const *chs, int n, int deadline_ms,
                                  sm_array_id id, sm_svc_shard_query *q)
{
    Shmap__V1__ShardInfoRequest *p = calloc((size_t)n + 1, sizeof *p);
    const ProtobufCMessage **reqs = calloc((size_t)n + 1, sizeof *reqs);
    char err[sizeof q->err] = "";
    sm_err e = p && reqs ? SM_OK
                         : sm_fail(err, sizeof err, SM_ENOMEM,
                                   "out of memory asking %d workers about their shards", n);
    for (int i = 0; i < n && !e; i++) {
        q[i].e = SM_OK;
        q[i].err[0] = 0;
        if (q[i].ndevices < 1 || q[i].ndevices > SM_MAX_WORKER_DEVICES) {
            e = sm_fail(err, sizeof err, SM_EINVAL, "ShardInfo asks about 1 to %d devices, not %d",
                        SM_MAX_WORKER_DEVICES, q[i].ndevices);
            break;
        }
        memset(q[i].out, 0, sizeof *q[i].out * (size_t)q[i].ndevices);
        shmap__v1__shard_info_request__init(&p[i]);
        p[i].array_id = id.v;
        p[i].n_devices = (size_t)q[i].ndevices;
        p[i].devices = (int32_t *)q[i].devices;
        reqs[i] = &p[i].base;
    }
    if (!e && n > 0)
        e = sm_rpc_unary_each(chs, n, SM_SVC_WORKER_PATH("ShardInfo"), reqs, n,
                              &shmap__v1__shard_info_reply__descriptor, deadline_ms,
                              shard_info_all_done, NULL, q, err, sizeof err);
    for (int i = 0; e && i < n; i++) { /* no call started: every worker gets the error */
        q[i].e = e;
        snprintf(q[i].err, sizeof q[i].err, "%s", err);
    }
    free(reqs);
    free(p);
}

sm_err sm_svc_worker_shard_info(sm_rpc_channel *ch, int deadline_ms, sm_array_id id, int ndevices,
                                const int32_t *devices, sm_svc_shard_state *out, char *err,
                                size_t errlen)
{
    sm_svc_shard_query q = {.ndevices = ndevices, .devices = devices, .out = out};
    sm_svc_worker_shard_info_all(&ch, 1, deadline_ms, id, &q);
    if (q.e)
        snprintf(err, errlen, "%s", q.err);
    return q.e;
}

/* ---- checkpoints -------------------------------------------------------------------- */

typedef struct {
    const sm_svc_ckpt_write_req *req;
    sm_svc_ckpt_file *out;
} ckpt_write_out;

static sm_err ckpt_write_dec(const ProtobufCMessage *m, void *o, char *err, size_t errlen)
{
    const Shmap__V1__WriteCheckpointReply *r = (const Shmap__V1__WriteCheckpointReply *)m;
    ckpt_write_out *w = o;
    if (r->n_files != (size_t)w->req->nfiles)
        return sm_fail(err, errlen, SM_EINVAL, "WriteCheckpointReply has %zu files for %d asked",
                       r->n_files, w->req->nfiles);
    for (int k = 0; k < w->req->nfiles; k++) {
        if (r->files[k]->bytes < 0)
            return sm_fail(err, errlen, SM_EINVAL,
                           "WriteCheckpointReply.files[%d].bytes is negative", k);
        const Shmap__V1__CheckpointFile *f = r->files[k];
        w->out[k] = w->req->files[k];
        w->out[k].bytes = f->bytes;
        w->out[k].checksum = f->checksum;
        if (f->n_chunk_sums < 1 || f->n_chunk_sums > SM_SVC_CKPT_CHUNKS || f->chunk_bytes < 1 ||
            (f->bytes + f->chunk_bytes - 1) / f->chunk_bytes != (int64_t)f->n_chunk_sums)
            return sm_fail(err, errlen, SM_EINVAL,
                           "WriteCheckpointReply.files[%d] has %zu chunk_sums for %lld bytes in "
                           "chunks of %lld",
                           k, f->n_chunk_sums, (long long)f->bytes, (long long)f->chunk_bytes);
        w->out[k].chunk_bytes = f->chunk_bytes;
        w->out[k].nchunks = (int)f->n_chunk_sums;
        memcpy(w->out[k].chunk_sums, f->chunk_sums, f->n_chunk_sums * sizeof *f->chunk_sums);
    }
    return SM_OK;
}

sm_err sm_svc_worker_write_checkpoint(sm_rpc_channel *ch, int deadline_ms,
                                      const sm_svc_ckpt_write_req *req, sm_svc_ckpt_file *out,
                                      char *err, size_t errlen)
{
    sm_arena *a = sm_arena_create(0);
    Shmap__V1__WriteCheckpointRequest p;
    shmap__v1__write_checkpoint_request__init(&p);
    int n = req->nfiles > 0 ? req->nfiles : 0;
    if (!a || !(p.files = sm_arena_alloc(a, (size_t)(n ? n : 1) * sizeof *p.files)))
        goto oom;
    for (int k = 0; k < n; k++)
        if (!(p.files[p.n_files++] = ckpt_file_enc(a, &req->files[k], 0)))
            goto oom;
    p.array_id = req->array_id.v;
    p.dir = (char *)(req->dir ? req->dir : "");
    p.manifest = (char *)(req->manifest ? req->manifest : "");
    ckpt_write_out w = {req, out};
    sm_err e = sm_svc_unary(ch, SM_SVC_WORKER_PATH("WriteCheckpoint"), deadline_ms, &p.base,
                            &shmap__v1__write_checkpoint_reply__descriptor, ckpt_write_dec, &w, err,
                            errlen);
    sm_arena_free(a);
    return e;
oom:
    if (a)
        sm_arena_free(a);
    return sm_fail(err, errlen, SM_ENOMEM, "out of memory encoding a checkpoint request");
}

static sm_err manifest_dec(const ProtobufCMessage *m, void *o, char *err, size_t errlen)
{
    const Shmap__V1__ReadManifestReply *r = (const Shmap__V1__ReadManifestReply *)m;
    char **text = o;
    if (!(*text = strdup(r->manifest ? r->manifest : "")))
        return sm_fail(err, errlen, SM_ENOMEM, "cannot copy a manifest");
    return SM_OK;
}

sm_err sm_svc_worker_read_manifest(sm_rpc_channel *ch, int deadline_ms, const char *dir,
                                   char **text, char *err, size_t errlen)
{
    Shmap__V1__ReadManifestRequest p;
    shmap__v1__read_manifest_request__init(&p);
    p.dir = (char *)(dir ? dir : "");
    *text = NULL;
    return sm_svc_unary(ch, SM_SVC_WORKER_PATH("ReadManifest"), deadline_ms, &p.base,
                        &shmap__v1__read_manifest_reply__descriptor, manifest_dec, text, err,
                        errlen);
}
