/* sm_svc_stream: upload (UploadMsg) and download (DataChunk) streams, both
 * sides, and the DownloadRequest conversions. Data fields are never copied
 * by this layer: sent data points at the caller's buffer (and is copied
 * once by the packing below unless the caller lets it go without a copy),
 * received data into the unpacked message or straight to where a sink
 * says. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sm_log.h"
#include "sm_hold.h"
#include "sm_shm.h"
#include "sm_svc_internal.h"

/* ---- message conversions ------------------------------------------------------ */

/* The slots of one encoded ShmRef (caller storage, no allocation). */
typedef struct {
    Shmap__V1__ShmRef ref;
    Shmap__V1__Shape global;
    Shmap__V1__Box box;
    int64_t boxbuf[2 * SM_MAX_RANK];
} shm_ref_slots;

/* ix encoded into box, its start/stop arrays in boxbuf (2 * SM_MAX_RANK). */
static void box_fill(const sm_index *ix, Shmap__V1__Box *box, int64_t *boxbuf)
{
    shmap__v1__box__init(box);
    box->n_start = box->n_stop = sm_svc_rank(ix->rank);
    box->start = boxbuf;
    box->stop = boxbuf + SM_MAX_RANK;
    for (size_t d = 0; d < box->n_start; d++) {
        box->start[d] = ix->r[d].start;
        box->stop[d] = ix->r[d].stop;
    }
}

/* r encoded into x; NULL when r names no segment. */
static Shmap__V1__ShmRef *shm_ref_enc(const sm_svc_shm_ref *r, shm_ref_slots *x)
{
    if (!r->name[0])
        return NULL;
    shmap__v1__shm_ref__init(&x->ref);
    shmap__v1__shape__init(&x->global);
    x->ref.name = (char *)r->name;
    x->ref.offset = r->offset;
    x->global.n_dims = sm_svc_rank(r->global.rank);
    x->global.dims = (int64_t *)r->global.dims;
    box_fill(&r->box, &x->box, x->boxbuf);
    x->ref.global = &x->global;
    x->ref.box = &x->box;
    return &x->ref;
}

/* A ShmRef decoded and checked: a shmap segment's name, offset >= 0, the
 * box inside global (what = the field's name). p NULL: none. */
static sm_err shm_ref_dec(const Shmap__V1__ShmRef *p, const char *what, sm_svc_shm_ref *out,
                          char *err, size_t errlen)
{
    char sub[96];
    sm_err e;
    memset(out, 0, sizeof *out);
    if (!p)
        return SM_OK;
    const char *name = p->name ? p->name : "";
    if (!sm_shm_name_valid(name))
        return sm_fail(err, errlen, SM_EINVAL,
                       "%s.name '%.80s' is not the name of a shmap shared-memory segment", what,
                       name);
    if (p->offset < 0)
        return sm_fail(err, errlen, SM_EINVAL, "%s.offset is %" PRId64 "; must be >= 0", what,
                       p->offset);
    snprintf(sub, sizeof sub, "%s.global", what);
    if ((e = sm_svc_shape_dec(p->global, sub, &out->global, err, errlen)))
        return e;
    snprintf(sub, sizeof sub, "%s.box", what);
    if ((e = sm_svc_box_dec(p->box, sub, &out->box, err, errlen)) ||
        (e = sm_index_check(&out->box, &out->global, sub, err, errlen)))
        return e == SM_OK ? e : SM_EINVAL;
    snprintf(out->name, sizeof out->name, "%s", name);
    out->offset = p->offset;
    return SM_OK;
}

/* A ShmRef in a message to a service that does not take one (shm_ok 0:
 * the coordinator), or from a caller without the cluster's credential. */
static sm_err shm_ref_allowed(sm_rpc_call *call, const Shmap__V1__ShmRef *p, int shm_ok,
                              const char *method, char *err, size_t errlen)
{
    if (!p)
        return SM_OK;
    if (!shm_ok)
        return sm_fail(err, errlen, SM_EINVAL,
                       "%s takes no ShmRef: shared-memory transfers go to a worker on the "
                       "caller's host",
                       method);
    if (!sm_rpc_call_authenticated(call))
        return sm_fail(err, errlen, SM_EPERM,
                       "transfers through shared memory (ShmRef) need the cluster's credential; "
                       "a tenant's transfers go through the streams");
    return SM_OK;
}

sm_err sm_svc_data_dec(const char *msg, int64_t offset, const ProtobufCBinaryData *data,
                       protobuf_c_boolean last, uint64_t checksum, int64_t *out_offset,
                       const void **out_data, size_t *out_len, int *out_last,
                       uint64_t *out_checksum, char *err, size_t errlen)
{
    if (offset < 0)
        return sm_fail(err, errlen, SM_EINVAL, "%s.offset is %" PRId64 "; must be >= 0", msg,
                       offset);
    *out_offset = offset;
    *out_data = data->len ? data->data : NULL;
    *out_len = data->len;
    *out_last = last != 0;
    *out_checksum = checksum;
    return SM_OK;
}

/* The description of the whole an upload header and a download's first
 * chunk share (what: where they sit, in errors): shape, dtype and
 * total_bytes >= 0. */
static sm_err meta_dec(const char *what, const Shmap__V1__Shape *shape, Shmap__V1__DType dtype,
                       int64_t total_bytes, sm_shape *out_shape, sm_dtype *out_dtype,
                       int64_t *out_total, char *err, size_t errlen)
{
    char sub[64];
    sm_err e;
    snprintf(sub, sizeof sub, "%s.shape", what);
    if ((e = sm_svc_shape_dec(shape, sub, out_shape, err, errlen)))
        return e;
    snprintf(sub, sizeof sub, "%s.dtype", what);
    if ((e = sm_svc_dtype_dec(dtype, sub, out_dtype, err, errlen)))
        return e;
    if (total_bytes < 0)
        return sm_fail(err, errlen, SM_EINVAL, "%s.total_bytes is %" PRId64 "; must be >= 0", what,
                       total_bytes);
    *out_total = total_bytes;
    return SM_OK;
}

void sm_svc_upload_msg_enc(const sm_svc_upload_msg *m, Shmap__V1__UploadMsg *p,
                           Shmap__V1__UploadHeader *h, Shmap__V1__Shape *sh)
{
    shmap__v1__upload_msg__init(p);
    if (m->has_header) {
        shmap__v1__upload_header__init(h);
        shmap__v1__shape__init(sh);
        sh->n_dims = sm_svc_rank(m->header.shape.rank);
        sh->dims = (int64_t *)m->header.shape.dims;
        h->array_id = m->header.array_id.v;
        h->n_devices = m->header.ndevices > 0 ? (size_t)m->header.ndevices : 0;
        h->devices = m->header.devices;
        h->shape = sh;
        h->dtype = sm_svc_dtype_enc(m->header.dtype);
        h->total_bytes = m->header.total_bytes;
        p->header = h;
    }
    p->offset = m->offset;
    p->data.len = m->len;
    p->data.data = (uint8_t *)m->data;
    p->last = m->last != 0;
    p->checksum = m->checksum;
}

sm_err sm_svc_upload_msg_dec(const Shmap__V1__UploadMsg *p, sm_svc_upload_msg *out, char *err,
                             size_t errlen)
{
    sm_err e;
    memset(out, 0, sizeof *out);
    if ((e = sm_svc_data_dec("UploadMsg", p->offset, &p->data, p->last, p->checksum, &out->offset,
                             &out->data, &out->len, &out->last, &out->checksum, err, errlen)))
        return e;
    const Shmap__V1__UploadHeader *h = p->header;
    if (!h)
        return SM_OK;
    out->has_header = 1;
    out->header.array_id.v = h->array_id;
    if ((e = sm_svc_count_dec(h->n_devices, SM_MAX_DEVICES, "UploadMsg.header", "devices", err,
                              errlen)) ||
        (e = meta_dec("UploadMsg.header", h->shape, h->dtype, h->total_bytes, &out->header.shape,
                      &out->header.dtype, &out->header.total_bytes, err, errlen)))
        return e;
    out->header.ndevices = (int)h->n_devices;
    out->header.devices = h->devices;
    return shm_ref_dec(h->shm, "UploadMsg.header.shm", &out->header.shm, err, errlen);
}

void sm_svc_chunk_enc(const sm_svc_chunk *c, Shmap__V1__DataChunk *p, Shmap__V1__Shape *sh)
{
    shmap__v1__data_chunk__init(p);
    if (c->has_meta) {
        shmap__v1__shape__init(sh);
        sh->n_dims = sm_svc_rank(c->shape.rank);
        sh->dims = (int64_t *)c->shape.dims;
        p->shape = sh;
        p->dtype = sm_svc_dtype_enc(c->dtype);
        p->total_bytes = c->total_bytes;
    }
    p->offset = c->offset;
    p->data.len = c->len;
    p->data.data = (uint8_t *)c->data;
    p->last = c->last != 0;
    p->checksum = c->checksum;
}

sm_err sm_svc_chunk_dec(const Shmap__V1__DataChunk *p, sm_svc_chunk *out, char *err, size_t errlen)
{
    sm_err e;
    memset(out, 0, sizeof *out);
    if ((e = sm_svc_data_dec("DataChunk", p->offset, &p->data, p->last, p->checksum, &out->offset,
                             &out->data, &out->len, &out->last, &out->checksum, err, errlen)))
        return e;
    if (!p->shape && p->dtype == SHMAP__V1__DTYPE__DTYPE_INVALID && p->total_bytes == 0)
        return SM_OK;
    out->has_meta = 1;
    return meta_dec("DataChunk", p->shape, p->dtype, p->total_bytes, &out->shape, &out->dtype,
                    &out->total_bytes, err, errlen);
}

void sm_svc_download_req_enc(const sm_svc_download_req *r, Shmap__V1__DownloadRequest *p,
                             Shmap__V1__ArrayRef *ar, Shmap__V1__Box *box, int64_t *boxbuf)
{
    shmap__v1__download_request__init(p);
    sm_svc_array_ref_fill(r->array, ar);
    p->array = ar;
    p->device = r->device;
    p->n_devices = r->ndevices > 0 ? (size_t)r->ndevices : 0;
    p->devices = (int32_t *)r->devices;
    if (r->has_box) {
        box_fill(&r->box, box, boxbuf);
        p->box = box;
    }
}

sm_err sm_svc_download_req_dec(const Shmap__V1__DownloadRequest *p, sm_svc_download_req *out,
                               char *err, size_t errlen)
{
    sm_err e;
    memset(out, 0, sizeof *out);
    out->device = p->device;
    out->has_box = p->box != NULL;
    if ((e = sm_svc_count_dec(p->n_devices, SM_MAX_WORKER_DEVICES, "DownloadRequest", "devices",
                              err, errlen)))
        return e;
    out->ndevices = (int)p->n_devices;
    out->devices = p->devices;
    if (out->ndevices > 0 && (out->has_box || out->device != out->devices[0]))
        return sm_fail(err, errlen, SM_EINVAL,
                       "a DownloadRequest of several devices takes no box, and its device is the "
                       "first of them");
    if ((e = sm_svc_array_ref_dec(p->array, "DownloadRequest.array", &out->array, err, errlen)) ||
        (e = shm_ref_dec(p->shm, "DownloadRequest.shm", &out->shm, err, errlen)))
        return e;
    if (p->shm && out->ndevices > 0)
        return sm_fail(err, errlen, SM_EINVAL,
                       "a DownloadRequest with a ShmRef asks for one device, not several");
    return sm_svc_box_dec(p->box, "DownloadRequest.box", &out->box, err, errlen);
}

/* ---- grants ---------------------------------------------------------------------- */

/* Points g[0..n) at the n grants of SM_GRANT_LEN bytes back to back in
 * grants and *field at g; returns n (0 when more than g holds). */
static size_t grants_enc(const unsigned char *grants, int n, ProtobufCBinaryData *g,
                         ProtobufCBinaryData **field)
{
    if (n < 1 || n > SM_MAX_WORKER_DEVICES)
        return 0;
    for (int k = 0; k < n; k++)
        g[k] = (ProtobufCBinaryData){SM_GRANT_LEN, (uint8_t *)grants + (size_t)k * SM_GRANT_LEN};
    *field = g;
    return (size_t)n;
}

/* A call let through without the server's token (Worker.PutShard and
 * GetShard take grants instead): each of the n devices of the transfer of
 * array in direction dir needs its own grant, made for the token the call
 * carries. SM_OK for a call that carries the token. */
static sm_err grants_check(sm_rpc_call *call, sm_grant_dir dir, uint64_t array, int n,
                           const int32_t *devices, size_t ngrants, const ProtobufCBinaryData *g,
                           char *err, size_t errlen)
{
    const sm_grant_key *k = sm_rpc_call_grant_key(call);
    if (sm_rpc_call_authenticated(call))
        return SM_OK;
    if (!k || ngrants == 0)
        return sm_fail(err, errlen, SM_EAUTH,
                       "the call carries neither the cluster's credential (its " SM_RPC_TOKEN_KEY
                       " token, and over TLS a client certificate of its CA) nor a grant from "
                       "the coordinator");
    if (ngrants != (size_t)n)
        return sm_fail(err, errlen, SM_EPERM,
                       "the %s of array %llu carries %zu grants for %d devices; each device needs "
                       "its own",
                       dir == SM_GRANT_PUT ? "upload" : "download", (unsigned long long)array,
                       ngrants, n);
    size_t tl;
    const unsigned char *tok = sm_rpc_call_token(call, &tl);
    unsigned char holder[32];
    sm_grant_holder(tok, tl, holder);
    int64_t now = sm_grant_now_ms();
    for (int d = 0; d < n; d++) {
        sm_err e = sm_grant_check(k, holder, dir, array, devices[d], g[d].data, g[d].len, now, err,
                                  errlen);
        if (e)
            return e;
    }
    return SM_OK;
}

/* grants_check for an upload message (p NULL: the stream's end). A call
 * without the token gets no further than its first message unless that
 * is a header whose grants pass (*granted then set): data before a header,
 * or an empty stream, is refused as a call without grants. */
static sm_err upload_grants_check(sm_rpc_call *call, const Shmap__V1__UploadMsg *p, int *granted,
                                  int shm_ok, char *err, size_t errlen)
{
    const Shmap__V1__UploadHeader *h = p ? p->header : NULL;
    sm_err se = h ? shm_ref_allowed(call, h->shm, shm_ok, "Coordinator.Upload", err, errlen) : 0;
    if (se)
        return se;
    if (sm_rpc_call_authenticated(call) || (!h && *granted))
        return SM_OK;
    sm_err e = h ? grants_check(call, SM_GRANT_PUT, h->array_id, (int)h->n_devices, h->devices,
                                h->n_grants, h->grants, err, errlen)
                 : grants_check(call, SM_GRANT_PUT, 0, 0, NULL, 0, NULL, err, errlen);
    if (!e)
        *granted = 1;
    return e;
}

/* Number of the payload field of a data message type. */
uint32_t sm_svc_data_field(const ProtobufCMessageDescriptor *desc)
{
    return protobuf_c_message_descriptor_get_field_by_name(desc, "data")->id;
}

sm_err sm_svc_send_data(sm_rpc_stream *st, sm_rpc_call *call, ProtobufCMessage *m,
                        ProtobufCBinaryData *data, sm_rpc_release_fn release, void *arg, char *err,
                        size_t errlen)
{
    if (!release)
        return st ? sm_rpc_cstream_send(st, m, err, errlen) : sm_rpc_send(call, m, err, errlen);
    const void *bytes = data->data;
    size_t len = data->len;
    uint32_t field = sm_svc_data_field(m->descriptor);
    data->len = 0;
    data->data = NULL;
    return st ? sm_rpc_cstream_send_data(st, m, field, bytes, len, release, arg, err, errlen)
              : sm_rpc_send_data(call, m, field, bytes, len, release, arg, err, errlen);
}

/* ---- client: upload --------------------------------------------------------------- */

struct sm_svc_upload_stream {
    sm_rpc_stream *st;
    sm_hold *hold; /* stable sends the network layer still references */
};

/* How long freeing an upload stream waits for the network layer to let go
 * of stable data. Once the call is over that takes milliseconds, except on
 * a connection whose peer stopped reading (a frozen process): its unsent
 * bytes stay referenced until the connection closes. After this wait the
 * stream is freed anyway; by then its call is cancelled, so whatever the
 * kernel may still send from the caller's buffer belongs to a stream the
 * peer discards (and an upload is only ever committed after its checksum
 * matched). */
#define UPLOAD_HOLD_MS 5000

/* Waits (at most UPLOAD_HOLD_MS) until no stable send is referenced any
 * more, then frees u (its rpc stream already freed). */
static void upload_free(sm_svc_upload_stream *u)
{
    int held = sm_hold_end(u->hold, UPLOAD_HOLD_MS);
    free(u);
    if (held)
        SM_WARN("an upload stream was freed while the network still referenced %d of its "
                "chunks (peer not reading)",
                held);
}

static const char *upload_path(int worker_service)
{
    return worker_service ? SM_SVC_WORKER_PATH("PutShard") : SM_SVC_COORD_PATH("Upload");
}

sm_err sm_svc_upload_open(sm_rpc_channel *ch, int worker_service, int deadline_ms,
                          sm_svc_upload_stream **out, char *err, size_t errlen)
{
    *out = NULL;
    sm_svc_upload_stream *u = calloc(1, sizeof *u);
    if (!u)
        return sm_fail(err, errlen, SM_ENOMEM, "cannot allocate an upload stream");
    if (!(u->hold = sm_hold_create())) {
        free(u);
        return sm_fail(err, errlen, SM_ENOMEM, "cannot allocate an upload stream");
    }
    sm_err e =
        sm_rpc_cstream_open(ch, upload_path(worker_service), deadline_ms, &u->st, err, errlen);
    if (e) {
        upload_free(u);
        return e;
    }
    *out = u;
    return SM_OK;
}

sm_err sm_svc_upload_send(sm_svc_upload_stream *st, const sm_svc_upload_msg *msg, char *err,
                          size_t errlen)
{
    Shmap__V1__UploadMsg p;
    Shmap__V1__UploadHeader h;
    Shmap__V1__Shape sh;
    ProtobufCBinaryData g[SM_MAX_WORKER_DEVICES];
    shm_ref_slots shm;
    sm_svc_upload_msg_enc(msg, &p, &h, &sh);
    if (msg->has_header && msg->header.grants)
        h.n_grants = grants_enc(msg->header.grants, msg->header.ndevices, g, &h.grants);
    if (msg->has_header)
        h.shm = shm_ref_enc(&msg->header.shm, &shm);
    int stable = msg->stable && msg->len > 0;
    if (stable)
        sm_hold_take(st->hold);
    return sm_svc_send_data(st->st, NULL, &p.base, &p.data, stable ? sm_hold_release : NULL,
                            st->hold, err, errlen);
}

sm_err sm_svc_upload_finish(sm_svc_upload_stream *st, sm_svc_upload_reply *reply, char *err,
                            size_t errlen)
{
    ProtobufCMessage *m = NULL;
    sm_err e = sm_rpc_cstream_finish(st->st, &shmap__v1__upload_reply__descriptor, &m, err, errlen);
    upload_free(st);
    if (e)
        return e;
    const Shmap__V1__UploadReply *r = (const Shmap__V1__UploadReply *)m;
    if (reply) {
        reply->bytes = r->bytes;
        reply->checksum = r->checksum;
        reply->array_ready = r->array_ready != 0;
        reply->ntargets = 0;
        for (size_t k = 0; k < r->n_targets && k < SM_SVC_MAX_BATCH; k++) {
            reply->target_bytes[k] = r->targets[k]->bytes;
            reply->target_checksum[k] = r->targets[k]->checksum;
            reply->ntargets++;
        }
    }
    sm_rpc_msg_free(m);
    return SM_OK;
}

void sm_svc_upload_abort(sm_svc_upload_stream *st)
{
    if (!st)
        return;
    sm_rpc_stream_free(st->st);
    upload_free(st);
}

/* ---- client: download ------------------------------------------------------------- */

struct sm_svc_download_stream {
    sm_rpc_stream *st;
    ProtobufCMessage *cur; /* the message the last chunk points into */
    const char *path;
};

sm_err sm_svc_download_open(sm_rpc_channel *ch, int worker_service, const sm_svc_download_req *req,
                            int deadline_ms, sm_svc_download_stream **out, char *err, size_t errlen)
{
    *out = NULL;
    sm_svc_download_stream *d = calloc(1, sizeof *d);
    if (!d)
        return sm_fail(err, errlen, SM_ENOMEM, "cannot allocate a download stream");
    d->path = worker_service ? SM_SVC_WORKER_PATH("GetShard") : SM_SVC_COORD_PATH("Download");
    Shmap__V1__DownloadRequest p;
    Shmap__V1__ArrayRef ar;
    Shmap__V1__Box box;
    int64_t boxbuf[2 * SM_MAX_RANK];
    ProtobufCBinaryData g[SM_MAX_WORKER_DEVICES];
    shm_ref_slots shm;
    sm_svc_download_req_enc(req, &p, &ar, &box, boxbuf);
    p.shm = shm_ref_enc(&req->shm, &shm);
    if (req->grants)
        p.n_grants = grants_enc(req->grants, req->ndevices > 0 ? req->ndevices : 1, g, &p.grants);
    sm_err e = sm_rpc_sstream_open(ch, d->path, &p.base, deadline_ms, &d->st, err, errlen);
    if (e) {
        free(d);
        return e;
    }
    *out = d;
    return SM_OK;
}

sm_err sm_svc_download_recv(sm_svc_download_stream *st, sm_svc_chunk *chunk, int *end, char *err,
                            size_t errlen)
{
    *end = 0;
    sm_rpc_msg_free(st->cur);
    st->cur = NULL;
    sm_err e =
        sm_rpc_sstream_recv(st->st, &shmap__v1__data_chunk__descriptor, &st->cur, err, errlen);
    if (e)
        return e;
    if (!st->cur) {
        *end = 1;
        return SM_OK;
    }
    char tmp[SM_SVC_ERRLEN];
    e = sm_svc_chunk_dec((const Shmap__V1__DataChunk *)st->cur, chunk, tmp, sizeof tmp);
    return e ? sm_svc_bad_reply(st->path, tmp, err, errlen) : SM_OK;
}

typedef struct {
    sm_svc_download_stream *st;
    const sm_svc_chunk_sink *sink;
    sm_svc_chunk *chunk;
} chunk_place_ctx;

static sm_err chunk_place(void *user, const ProtobufCMessage *m, size_t len, void **dst, char *err,
                          size_t errlen)
{
    chunk_place_ctx *x = user;
    char tmp[SM_SVC_ERRLEN];
    if (sm_svc_chunk_dec((const Shmap__V1__DataChunk *)m, x->chunk, tmp, sizeof tmp))
        return sm_svc_bad_reply(x->st->path, tmp, err, errlen);
    x->chunk->data = NULL;
    x->chunk->len = len;
    return x->sink->place(x->sink->user, x->chunk, dst, err, errlen);
}

sm_err sm_svc_download_recv_into(sm_svc_download_stream *st, const sm_svc_chunk_sink *sink,
                                 sm_svc_chunk *chunk, int *end, char *err, size_t errlen)
{
    chunk_place_ctx x = {st, sink, chunk};
    /* a shard, a fetched array */
    sm_rpc_sink rs = {chunk_place, sink->copied, &x, 1, sink->user};
    size_t len;
    *end = 0;
    sm_rpc_msg_free(st->cur);
    st->cur = NULL;
    sm_err e = sm_rpc_sstream_recv_data(st->st, &shmap__v1__data_chunk__descriptor,
                                        sm_svc_data_field(&shmap__v1__data_chunk__descriptor), &rs,
                                        &st->cur, &len, err, errlen);
    if (!e && !st->cur)
        *end = 1;
    return e;
}

void sm_svc_download_free(sm_svc_download_stream *st)
{
    if (!st)
        return;
    sm_rpc_msg_free(st->cur);
    sm_rpc_stream_free(st->st);
    free(st);
}

/* ---- server: upload --------------------------------------------------------------- */

struct sm_svc_upload_in {
    sm_rpc_call *call;
    ProtobufCMessage *cur; /* the message the last msg points into */
    int ended;
    int granted; /* a call without the token: its header's grants passed */
    int shm_ok;  /* the service takes a ShmRef (sm_svc_serve_upload) */
};

sm_err sm_svc_upload_recv(sm_svc_upload_in *in, sm_svc_upload_msg *msg, int *end, char *err,
                          size_t errlen)
{
    sm_err e = sm_svc_stream_next(in->call, &in->cur, &in->ended, end, err, errlen);
    if (e)
        return e;
    if ((e = upload_grants_check(in->call, *end ? NULL : (const Shmap__V1__UploadMsg *)in->cur,
                                 &in->granted, in->shm_ok, err, errlen)) ||
        *end)
        return e;
    return sm_svc_upload_msg_dec((const Shmap__V1__UploadMsg *)in->cur, msg, err, errlen);
}

typedef struct {
    const sm_svc_upload_sink *sink;
    sm_svc_upload_msg *msg;
    sm_rpc_call *call;
    int *granted;
    int shm_ok;
} upload_place_ctx;

static sm_err upload_place(void *user, const ProtobufCMessage *m, size_t len, void **dst, char *err,
                           size_t errlen)
{
    upload_place_ctx *x = user;
    sm_err e = upload_grants_check(x->call, (const Shmap__V1__UploadMsg *)m, x->granted, x->shm_ok,
                                   err, errlen);
    if (!e)
        e = sm_svc_upload_msg_dec((const Shmap__V1__UploadMsg *)m, x->msg, err, errlen);
    if (e)
        return e;
    x->msg->data = NULL;
    x->msg->len = len;
    return x->sink->place(x->sink->user, x->msg, dst, err, errlen);
}

sm_err sm_svc_upload_recv_into(sm_svc_upload_in *in, const sm_svc_upload_sink *sink,
                               sm_svc_upload_msg *msg, int *end, char *err, size_t errlen)
{
    upload_place_ctx x = {sink, msg, in->call, &in->granted, in->shm_ok};
    /* a shard, a fetched array */
    sm_rpc_sink rs = {upload_place, sink->copied, &x, 1, sink->user};
    size_t len;
    *end = 0;
    sm_rpc_msg_free(in->cur);
    in->cur = NULL;
    if (in->ended) {
        *end = 1;
        return SM_OK;
    }
    sm_err e = sm_rpc_recv_data(in->call, sm_svc_data_field(&shmap__v1__upload_msg__descriptor),
                                &rs, &in->cur, &len, err, errlen);
    if (!e && !in->cur) {
        in->ended = *end = 1;
        e = upload_grants_check(in->call, NULL, &in->granted, in->shm_ok, err, errlen);
    }
    return e;
}

int sm_svc_upload_cancelled(sm_svc_upload_in *in)
{
    return sm_rpc_call_cancelled(in->call);
}

void sm_svc_serve_upload(sm_rpc_call *call, sm_svc_upload_fn fn, void *user, int shm_ok)
{
    SM_SVC_REQUIRE(call, fn);
    sm_svc_upload_in in = {call, NULL, 0, 0, shm_ok};
    sm_svc_upload_reply out = {0};
    char err[SM_SVC_ERRLEN] = "";
    sm_err e = fn(user, &in, &out, err, sizeof err);
    sm_rpc_msg_free(in.cur);
    Shmap__V1__UploadReply r;
    Shmap__V1__UploadAck ack[SM_SVC_MAX_BATCH], *ackp[SM_SVC_MAX_BATCH];
    shmap__v1__upload_reply__init(&r);
    r.bytes = out.bytes;
    r.checksum = out.checksum;
    r.array_ready = out.array_ready != 0;
    for (int k = 0; k < out.ntargets && k < SM_SVC_MAX_BATCH; k++) {
        shmap__v1__upload_ack__init(&ack[k]);
        ack[k].bytes = out.target_bytes[k];
        ack[k].checksum = out.target_checksum[k];
        ackp[k] = &ack[k];
        r.n_targets++;
    }
    r.targets = ackp;
    sm_svc_finish(call, e, err, &r.base);
}

/* ---- server: download ------------------------------------------------------------- */

struct sm_svc_download_out {
    sm_rpc_call *call;
};

sm_err sm_svc_download_send(sm_svc_download_out *out, const sm_svc_chunk *chunk, char *err,
                            size_t errlen)
{
    Shmap__V1__DataChunk p;
    Shmap__V1__Shape sh;
    sm_svc_chunk_enc(chunk, &p, &sh);
    return sm_svc_send_data(NULL, out->call, &p.base, &p.data, chunk->release, chunk->release_arg,
                            err, errlen);
}

int sm_svc_download_cancelled(sm_svc_download_out *out)
{
    return sm_rpc_call_cancelled(out->call);
}

void sm_svc_serve_download(sm_rpc_call *call, sm_svc_download_fn fn, void *user, int shm_ok)
{
    SM_SVC_REQUIRE(call, fn);
    ProtobufCMessage *m = sm_svc_recv_request(call);
    if (!m)
        return;
    sm_svc_download_req req;
    char err[SM_SVC_ERRLEN] = "";
    const Shmap__V1__DownloadRequest *p = (const Shmap__V1__DownloadRequest *)m;
    sm_err e = shm_ref_allowed(call, p->shm, shm_ok, "Coordinator.Download", err, sizeof err);
    if (!e)
        e = sm_svc_download_req_dec(p, &req, err, sizeof err);
    if (!e)
        e = grants_check(call, SM_GRANT_GET, req.array.id.v, req.ndevices > 0 ? req.ndevices : 1,
                         req.ndevices > 0 ? req.devices : &req.device, p->n_grants, p->grants, err,
                         sizeof err);
    if (!e) {
        sm_svc_download_out out = {call};
        e = fn(user, &req, &out, err, sizeof err);
    }
    sm_rpc_msg_free(m);
    if (e) {
        sm_svc_finish_err(call, e, err);
        return;
    }
    sm_rpc_finish(call, SM_OK, NULL, NULL);
}
