/* harness_svc: sm_svc channels, uploads and downloads for the suites that
 * speak the wire. */
#include "harness_svc.h"
#include "sm_time.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sm_checksum.h"

/* ---- channels ------------------------------------------------------------- */

sm_rpc_channel *harness_svc_dial(const char *target, const char *token)
{
    sm_rpc_channel *ch = NULL;
    char err[512];
    ck_assert_msg(sm_rpc_channel_create(target, token, &ch, err, sizeof err) == SM_OK, "%s: %s",
                  target, err);
    ck_assert_msg(sm_rpc_channel_wait_ready(ch, 10000, err, sizeof err) == SM_OK, "%s: %s", target,
                  err);
    return ch;
}

sm_rpc_channel *harness_svc_channel(const harness_cluster *h)
{
    return harness_svc_dial(h->target, h->token[0] ? h->token : NULL);
}

sm_svc_worker_stats harness_svc_worker_stats(const harness_cluster *h, sm_client *c)
{
    int n = 0;
    char err[512];
    sm_svc_worker_stats sum = {0};
    sm_worker_info *w = harness_workers(c, &n);
    harness_cluster cred = *h;
    harness_use_cluster_credential(&cred);
    for (int k = 0; k < n; k++) {
        sm_rpc_channel *ch = harness_channel(&cred, w[k].address);
        sm_svc_worker_stats st;
        ck_assert_msg(sm_svc_worker_stats_get(ch, 10000, &st, err, sizeof err) == SM_OK,
                      "stats of %s: %s", w[k].address, err);
        sum.shards += st.shards;
        sum.shm_transfer_bytes += st.shm_transfer_bytes;
        sum.peer_shm_bytes += st.peer_shm_bytes;
        sum.peer_grpc_bytes += st.peer_grpc_bytes;
        sum.collective_in_place_bytes += st.collective_in_place_bytes;
        sm_rpc_channel_free(ch);
    }
    free(w);
    return sum;
}

int harness_svc_alive_workers(sm_rpc_channel *ch)
{
    sm_worker_info *w = NULL;
    int n = 0, alive = 0;
    char err[512];
    if (sm_svc_coord_list_devices(ch, HARNESS_CALL_MS, &w, &n, err, sizeof err))
        return -1;
    for (int i = 0; i < n; i++)
        alive += w[i].alive;
    free(w);
    return alive;
}

int harness_svc_wait_alive(sm_rpc_channel *ch, int n, int ms)
{
    int64_t until = sm_time_mono_ms() + ms;
    int got;
    while ((got = harness_svc_alive_workers(ch)) != n && sm_time_mono_ms() < until)
        harness_sleep_ms(20);
    return got;
}

sm_mesh_info harness_svc_mesh(sm_rpc_channel *ch, const char *name, const char *axes)
{
    sm_mesh m;
    sm_mesh_info mi;
    char err[512];
    ck_assert_int_eq(sm_mesh_parse(axes, NULL, 0, &m, err, sizeof err), SM_OK);
    m.ndevices = 0;
    ck_assert_msg(
        sm_svc_coord_create_mesh(ch, HARNESS_CALL_MS, name, &m, 1, &mi, err, sizeof err) == SM_OK,
        "%s", err);
    return mi;
}

sm_svc_create_array_reply harness_svc_create(sm_rpc_channel *ch, const char *name, const char *axes,
                                             const char *spec, sm_shape shape, sm_put_kind kind,
                                             uint32_t deadline_ms)
{
    sm_mesh mesh;
    sm_svc_create_array_req q = {.name = name, .dtype = SM_F32, .has_shape = 1, .shape = shape};
    sm_svc_create_array_reply r;
    char err[512];
    q.sharding = harness_sharding(&mesh, axes, NULL, 0, spec);
    q.kind = kind;
    q.deadline_ms = deadline_ms;
    memset(&r, 0, sizeof r);
    sm_err e = sm_svc_coord_create_array(ch, HARNESS_CALL_MS, &q, &r, err, sizeof err);
    ck_assert_msg(e == SM_OK, "create: %s", err);
    return r;
}

sm_array_state harness_svc_state(sm_rpc_channel *ch, sm_array_ref ref, char *error, size_t len)
{
    sm_array_info info;
    char err[512];
    sm_err e = sm_svc_coord_describe(ch, HARNESS_CALL_MS, ref, &info, err, sizeof err);
    ck_assert_msg(e == SM_OK, "describe %llu: %s", (unsigned long long)ref.id.v, err);
    sm_array_state s = info.state;
    if (error)
        snprintf(error, len, "%s", info.error);
    sm_array_info_free(&info);
    return s;
}

int harness_svc_wait_state(sm_rpc_channel *ch, sm_array_ref ref, sm_array_state want, int ms)
{
    int64_t until = sm_time_mono_ms() + ms;
    while (harness_svc_state(ch, ref, NULL, 0) != want && sm_time_mono_ms() < until)
        harness_sleep_ms(20);
    return harness_svc_state(ch, ref, NULL, 0) == want;
}

/* ---- f32 test data -------------------------------------------------------- */

float harness_val(int64_t i, int64_t j, float salt)
{
    return (float)(i * 1000 + j) + salt;
}

float *harness_box_f32(const sm_index *box, float salt, size_t *nbytes)
{
    int64_t r = box->r[0].stop - box->r[0].start, c = box->r[1].stop - box->r[1].start;
    float *d = malloc(sizeof *d * (size_t)(r * c) + 1);
    ck_assert_ptr_nonnull(d);
    for (int64_t i = 0; i < r; i++)
        for (int64_t j = 0; j < c; j++)
            d[i * c + j] = harness_val(box->r[0].start + i, box->r[1].start + j, salt);
    *nbytes = sizeof *d * (size_t)(r * c);
    return d;
}

/* ---- uploads and downloads ------------------------------------------------ */

static sm_svc_upload_header up_header(const harness_upload_req *u)
{
    return (sm_svc_upload_header){.array_id = u->array,
                                  .ndevices = u->ndevices,
                                  .devices = (int32_t *)u->devices,
                                  .shape = u->shape,
                                  .dtype = u->dtype,
                                  .total_bytes =
                                      u->nbytes + (u->mode == HARNESS_UP_WRONG_TOTAL ? 4 : 0)};
}

/* The data messages of u after its header (which is in m when the header
 * rides on the first of them). */
static sm_err up_send_data(sm_svc_upload_stream *st, const harness_upload_req *u,
                           sm_svc_upload_msg m, char *err, size_t errlen)
{
    const char *data = u->data;
    int64_t chunk = u->chunk ? (int64_t)u->chunk : u->nbytes;
    int64_t skew = u->skew ? u->skew : 8, off = 0;
    uint64_t sum = sm_checksum_oneshot(u->data, (size_t)u->nbytes);
    sm_err e;

    if (u->mode == HARNESS_UP_BACKWARDS) {
        int64_t half = u->nbytes / 2;
        m.offset = half;
        m.data = data + half;
        m.len = (size_t)(u->nbytes - half);
        return sm_svc_upload_send(st, &m, err, errlen);
    }
    for (int k = 0;; k++) {
        int64_t n = u->nbytes - off < chunk ? u->nbytes - off : chunk;
        m.offset = off;
        m.data = data + off;
        m.len = (size_t)n;
        if (k == 1 && u->mode == HARNESS_UP_GAP)
            m.offset += skew;
        if (k == 1 && u->mode == HARNESS_UP_OVERLAP)
            m.offset -= skew;
        if (k == 1 && u->mode == HARNESS_UP_SECOND_HEADER) {
            m.has_header = 1;
            m.header = up_header(u);
        }
        m.last =
            off + n == u->nbytes && u->mode != HARNESS_UP_NO_LAST && u->mode != HARNESS_UP_PAST_END;
        m.checksum = m.last ? sum ^ (u->mode == HARNESS_UP_BAD_SUM ? 1 : 0) : 0;
        if ((e = sm_svc_upload_send(st, &m, err, errlen)))
            return e;
        if (u->mode == HARNESS_UP_ABORT)
            return SM_ECANCELLED;
        off += n;
        if (off == u->nbytes)
            break;
        m = (sm_svc_upload_msg){0};
    }
    if (u->mode == HARNESS_UP_PAST_END) {
        static const char extra[8];
        m = (sm_svc_upload_msg){
            .offset = u->nbytes, .data = extra, .len = sizeof extra, .last = 1, .checksum = sum};
        return sm_svc_upload_send(st, &m, err, errlen);
    }
    return SM_OK;
}

sm_err harness_upload(sm_rpc_channel *ch, const harness_upload_req *u, sm_svc_upload_reply *rep,
                      char *err, size_t errlen)
{
    sm_svc_upload_stream *st = NULL;
    sm_svc_upload_reply r = {0};
    sm_svc_upload_msg m = {.has_header = u->mode != HARNESS_UP_NO_HEADER};
    sm_err e = sm_svc_upload_open(
        ch, u->to_worker, u->deadline_ms ? u->deadline_ms : HARNESS_CALL_MS, &st, err, errlen);
    if (e)
        return e;
    m.header = up_header(u);
    if (!u->header_with_data) {
        /* the header message alone (an empty one with HARNESS_UP_NO_HEADER) */
        if ((e = sm_svc_upload_send(st, &m, err, errlen)))
            goto finish;
        m = (sm_svc_upload_msg){0};
    } else if (u->mode == HARNESS_UP_NO_HEADER) {
        m = (sm_svc_upload_msg){0};
    }
    if (u->mode != HARNESS_UP_HEADER_ONLY)
        e = up_send_data(st, u, m, err, errlen);
    if (e == SM_ECANCELLED && u->mode == HARNESS_UP_ABORT) {
        sm_svc_upload_abort(st);
        return e;
    }
finish:;
    char ferr[512];
    sm_err f = sm_svc_upload_finish(st, &r, ferr, sizeof ferr);
    if (rep)
        *rep = r;
    if (e)
        return e;
    if (f)
        return sm_fail(err, errlen, f, "%s", ferr);
    if (r.bytes != u->nbytes)
        return sm_fail(err, errlen, SM_EINTERNAL, "the reply says %lld bytes, not %lld",
                       (long long)r.bytes, (long long)u->nbytes);
    return SM_OK;
}

sm_err harness_svc_put(sm_rpc_channel *ch, sm_array_id id, const int32_t *devs, int ndev,
                       sm_shape shape, const void *data, size_t nbytes, size_t chunk, int *ready,
                       char *err, size_t errlen)
{
    harness_upload_req u = {0, id, devs, ndev, SM_F32, shape, data, (int64_t)nbytes, chunk};
    sm_svc_upload_reply rep = {0};
    u.header_with_data = 1;
    sm_err e = harness_upload(ch, &u, &rep, err, errlen);
    if (!e && ready)
        *ready = rep.array_ready;
    return e;
}

sm_err harness_svc_download(sm_rpc_channel *ch, sm_array_ref ref, int32_t device, void **out,
                            size_t *nbytes, char *err, size_t errlen)
{
    sm_svc_download_req req = {ref, device, 0, {0}};
    sm_svc_download_stream *st;
    sm_svc_chunk c;
    int end = 0;
    char *buf = NULL;
    int64_t total = -1;
    *out = NULL;
    sm_err e = sm_svc_download_open(ch, 0, &req, HARNESS_CALL_MS, &st, err, errlen);
    if (e)
        return e;
    while (!(e = sm_svc_download_recv(st, &c, &end, err, errlen)) && !end) {
        if (c.has_meta && !buf) {
            total = c.total_bytes;
            buf = malloc((size_t)total + 1);
        }
        if (!buf || c.offset < 0 || c.offset + (int64_t)c.len > total) {
            e = sm_fail(err, errlen, SM_EFORMAT, "bad chunk");
            break;
        }
        memcpy(buf + c.offset, c.data, c.len);
    }
    sm_svc_download_free(st);
    if (e) {
        free(buf);
        return e;
    }
    *out = buf;
    *nbytes = (size_t)total;
    return SM_OK;
}

sm_err harness_svc_get_shard(sm_rpc_channel *ch, sm_array_id id, int32_t device,
                             const unsigned char *grant, char *err, size_t errlen)
{
    sm_svc_download_stream *st = NULL;
    sm_svc_download_req req = {.array = {id, NULL}, .device = device, .grants = grant};
    int end = 0;
    sm_err e = sm_svc_download_open(ch, 1, &req, HARNESS_CALL_MS, &st, err, errlen);
    while (!e && !end) {
        sm_svc_chunk c;
        e = sm_svc_download_recv(st, &c, &end, err, errlen);
    }
    sm_svc_download_free(st);
    return e;
}

void harness_svc_check_values(sm_rpc_channel *ch, sm_array_ref ref, float salt)
{
    sm_array_info info;
    char err[512];
    ck_assert_msg(sm_svc_coord_describe(ch, HARNESS_CALL_MS, ref, &info, err, sizeof err) == SM_OK,
                  "%s", err);
    ck_assert_int_eq(info.state, SM_ARRAY_READY);
    for (int s = 0; s < info.nshards; s++) {
        void *got;
        size_t nb, want_nb;
        ck_assert_msg(harness_svc_download(ch, ref, info.shards[s].device, &got, &nb, err,
                                           sizeof err) == SM_OK,
                      "device %d: %s", info.shards[s].device, err);
        float *want = harness_box_f32(&info.shards[s].index, salt, &want_nb);
        ck_assert_int_eq(nb, want_nb);
        ck_assert_msg(memcmp(got, want, nb) == 0, "device %d: data differs", info.shards[s].device);
        free(got);
        free(want);
    }
    sm_array_info_free(&info);
}
