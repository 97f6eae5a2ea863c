/* Check suite for common/rpc/sm_svc, part 2: streams and Worker calls. A
 * real sm_rpc server on 127.0.0.1:0 in the test process serves fake
 * handlers that record what they received: uploads (Coordinator.Upload and
 * Worker.PutShard) must arrive with every header field, offset, byte and
 * the checksum intact, downloads (Download, GetShard) likewise in the other
 * direction, and FreeArray, Assemble (shards with pieces) and Stats must
 * round-trip every field. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sm_checksum.h"
#include "sm_rpc_msg.h"
#include "sm_svc.h"
#include "suite_main.h"
#include "svc_testutil.h"

#define DL 5000 /* deadline of every call, ms */

/* What the fake handlers received. */
typedef struct {
    int calls;
    char ref_name[160];
    /* free_array */
    sm_array_id free_id;
    int free_n;
    int32_t free_devs[16];
    /* assemble */
    sm_svc_assemble_req asm_req;
    sm_svc_assemble_shard asm_shards[4];
    sm_svc_piece asm_pieces[4][4];
    char asm_addr[4][4][64];
    /* upload */
    int up_n, up_header_at, up_last_at;
    sm_svc_upload_header up_header;
    int32_t up_devs[8];
    int64_t up_offsets[8];
    size_t up_lens[8];
    uint8_t up_data[256];
    size_t up_total;
    uint64_t up_checksum, up_computed;
    /* download */
    sm_svc_download_req dl;
} rec;

typedef struct {
    rec r;
    uint8_t blob[96];
    sm_rpc_server *srv;
    sm_rpc_channel *ch;
} fixture;

static fixture fx; /* one per forked test */

/* ---- fake handlers ------------------------------------------------------------------ */

/* Reads the whole stream; answers bytes, its own checksum, ready. */
static sm_err f_upload(void *u, sm_svc_upload_in *in, sm_svc_upload_reply *out, char *err,
                       size_t errlen)
{
    rec *r = u;
    r->calls++;
    r->up_header_at = r->up_last_at = -1;
    sm_checksum *ck = sm_checksum_create();
    sm_svc_upload_msg m;
    int end = 0;
    sm_err e;
    while ((e = sm_svc_upload_recv(in, &m, &end, err, errlen)) == SM_OK && !end) {
        int i = r->up_n++;
        if (m.has_header) {
            r->up_header_at = i;
            r->up_header = m.header;
            if (m.header.ndevices > 0)
                memcpy(r->up_devs, m.header.devices, (size_t)m.header.ndevices * sizeof(int32_t));
            r->up_header.devices = r->up_devs;
        }
        if (m.last) {
            r->up_last_at = i;
            r->up_checksum = m.checksum;
        }
        r->up_offsets[i] = m.offset;
        r->up_lens[i] = m.len;
        if (m.len)
            memcpy(r->up_data + r->up_total, m.data, m.len);
        r->up_total += m.len;
        sm_checksum_update(ck, m.data, m.len);
    }
    r->up_computed = sm_checksum_digest(ck);
    sm_checksum_free(ck);
    if (e)
        return e;
    out->bytes = (int64_t)r->up_total;
    out->checksum = r->up_computed;
    out->array_ready = 1;
    return SM_OK;
}

/* Sends fx.blob as a [4,6] f32 shard in chunks of 40, 40 and 16 bytes. */
static sm_err f_download(void *u, const sm_svc_download_req *req, sm_svc_download_out *out,
                         char *err, size_t errlen)
{
    rec *r = u;
    r->calls++;
    r->dl = *req;
    snprintf(r->ref_name, sizeof r->ref_name, "%s", req->array.name);
    r->dl.array.name = r->ref_name;
    static const size_t lens[3] = {40, 40, 16};
    size_t off = 0;
    for (int i = 0; i < 3; i++) {
        sm_svc_chunk c = {0};
        if (i == 0) {
            c.has_meta = 1;
            c.shape = (sm_shape){2, {4, 6}};
            c.dtype = SM_F32;
            c.total_bytes = sizeof fx.blob;
        }
        c.offset = (int64_t)off;
        c.data = fx.blob + off;
        c.len = lens[i];
        c.last = i == 2;
        c.checksum = i == 2 ? sm_checksum_oneshot(fx.blob, sizeof fx.blob) : 0;
        sm_err e = sm_svc_download_send(out, &c, err, errlen);
        if (e)
            return e;
        off += lens[i];
    }
    return SM_OK;
}

static sm_err f_free_array(void *u, sm_array_id id, int ndevices, const int32_t *devices, char *err,
                           size_t errlen)
{
    rec *r = u;
    r->calls++;
    r->free_id = id;
    r->free_n = ndevices;
    if (ndevices > 0)
        memcpy(r->free_devs, devices, (size_t)ndevices * sizeof *devices);
    return SM_OK;
}

static sm_err f_assemble(void *u, const sm_svc_assemble_req *req, int64_t *bytes, char *err,
                         size_t errlen)
{
    rec *r = u;
    r->calls++;
    r->asm_req = *req;
    r->asm_req.shards = r->asm_shards;
    for (int i = 0; i < req->nshards && i < 4; i++) {
        r->asm_shards[i] = req->shards[i];
        r->asm_shards[i].pieces = r->asm_pieces[i];
        for (int k = 0; k < req->shards[i].npieces && k < 4; k++) {
            r->asm_pieces[i][k] = req->shards[i].pieces[k];
            snprintf(r->asm_addr[i][k], 64, "%s", req->shards[i].pieces[k].src_address);
            r->asm_pieces[i][k].src_address = r->asm_addr[i][k];
        }
    }
    *bytes = 1234;
    return SM_OK;
}

static sm_err f_stats(void *u, sm_svc_worker_stats *out, char *err, size_t errlen)
{
    ((rec *)u)->calls++;
    out->ndevices = 3;
    for (int i = 0; i < 3; i++) {
        out->devices[i] = 8 + i;
        out->device_bytes[i] = 1000 * (i + 1);
    }
    out->shards = 17;
    return SM_OK;
}

static const sm_svc_worker_ops worker_ops = {
    .put_shard = f_upload,
    .get_shard = f_download,
    .free_array = f_free_array,
    .assemble = f_assemble,
    .stats = f_stats,
};

/* ---- fixture ---------------------------------------------------------------------- */

static const sm_svc_coord_ops coord_ops = {.upload = f_upload, .download = f_download};

static void setup(void)
{
    char err[256];
    memset(&fx, 0, sizeof fx);
    for (size_t k = 0; k < sizeof fx.blob; k++)
        fx.blob[k] = (uint8_t)(k * 37 + 11);
    sm_rpc_init();
    fx.srv = svt_server();
    ck_assert_int_eq(sm_svc_coord_serve(fx.srv, &coord_ops, &fx.r, "coord", err, sizeof err),
                     SM_OK);
    ck_assert_int_eq(sm_svc_worker_serve(fx.srv, &worker_ops, &fx.r, "worker", err, sizeof err),
                     SM_OK);
    fx.ch = svt_start(fx.srv);
}

static void teardown(void)
{
    sm_rpc_channel_free(fx.ch);
    sm_rpc_server_free(fx.srv);
    sm_rpc_shutdown();
}

/* ---- tests ------------------------------------------------------------------------ */

START_TEST(test_worker_calls)
{
    char err[256] = "";
    const int32_t devs[] = {4, 6, 5};
    ck_assert_int_eq(
        sm_svc_worker_free_array(fx.ch, DL, (sm_array_id){33}, 3, devs, err, sizeof err), SM_OK);
    ck_assert_uint_eq(fx.r.free_id.v, 33);
    ck_assert_int_eq(fx.r.free_n, 3);
    ck_assert_int_eq(fx.r.free_devs[2], 5);
    ck_assert_int_eq(
        sm_svc_worker_free_array(fx.ch, DL, (sm_array_id){34}, 0, NULL, err, sizeof err), SM_OK);
    ck_assert_int_eq(fx.r.free_n, 0);

    sm_svc_piece pieces[3] = {
        {NULL, {17}, 3, {2, {{0, 2}, {0, 6}}}, {0, 0}},
        {"10.0.0.2:7071", {17}, 1, {2, {{2, 4}, {1, 3}}}, {2, 5}},
        {"", {18}, 0, {1, {{5, 9}}}, {11}},
    };
    sm_svc_assemble_shard shards[2] = {
        {2, {2, {4, 6}}, 2, pieces},
        {9, {1, {16}}, 1, pieces + 2},
    };
    sm_svc_assemble_req req = {{55}, SM_I64, 2, shards};
    int64_t bytes = 0;
    ck_assert_int_eq(sm_svc_worker_assemble(fx.ch, DL, &req, &bytes, err, sizeof err), SM_OK);
    ck_assert_int_eq(bytes, 1234);
    const sm_svc_assemble_req *g = &fx.r.asm_req;
    ck_assert_uint_eq(g->array_id.v, 55);
    ck_assert_int_eq(g->dtype, SM_I64);
    ck_assert_int_eq(g->nshards, 2);
    for (int i = 0; i < 2; i++) {
        ck_assert_int_eq(g->shards[i].device, shards[i].device);
        shape_same(&g->shards[i].shape, &shards[i].shape);
        ck_assert_int_eq(g->shards[i].npieces, shards[i].npieces);
        for (int k = 0; k < shards[i].npieces; k++) {
            const sm_svc_piece *x = &g->shards[i].pieces[k], *y = &shards[i].pieces[k];
            ck_assert_str_eq(x->src_address, y->src_address ? y->src_address : "");
            ck_assert_uint_eq(x->src_array.v, y->src_array.v);
            ck_assert_int_eq(x->src_device, y->src_device);
            index_same(&x->src_box, &y->src_box);
            for (int d = 0; d < y->src_box.rank; d++)
                ck_assert_int_eq(x->dst_offset[d], y->dst_offset[d]);
        }
    }

    sm_svc_worker_stats st;
    ck_assert_int_eq(sm_svc_worker_stats_get(fx.ch, DL, &st, err, sizeof err), SM_OK);
    ck_assert_int_eq(st.ndevices, 3);
    ck_assert_int_eq(st.devices[2], 10);
    ck_assert_int_eq(st.device_bytes[1], 2000);
    ck_assert_int_eq(st.shards, 17);
}
END_TEST

/* _i: 0 Coordinator.Upload, 1 Worker.PutShard. Header-only first message,
 * three data chunks, a data-less last message with the checksum. */
START_TEST(test_upload_stream)
{
    char err[256] = "";
    sm_svc_upload_stream *st;
    ck_assert_int_eq(sm_svc_upload_open(fx.ch, _i, DL, &st, err, sizeof err), SM_OK);
    int32_t devs[3] = {6, 2, 7};
    sm_svc_upload_msg m = {0};
    m.has_header = 1;
    m.header = (sm_svc_upload_header){{17}, 3, devs, {2, {4, 6}}, SM_F32, sizeof fx.blob};
    ck_assert_int_eq(sm_svc_upload_send(st, &m, err, sizeof err), SM_OK);
    static const size_t lens[3] = {50, 30, 16};
    size_t off = 0;
    for (int i = 0; i < 3; i++) {
        sm_svc_upload_msg d = {0};
        d.offset = (int64_t)off;
        d.data = fx.blob + off;
        d.len = lens[i];
        ck_assert_int_eq(sm_svc_upload_send(st, &d, err, sizeof err), SM_OK);
        off += lens[i];
    }
    sm_svc_upload_msg last = {0};
    last.offset = (int64_t)off;
    last.last = 1;
    last.checksum = sm_checksum_oneshot(fx.blob, sizeof fx.blob);
    ck_assert_int_eq(sm_svc_upload_send(st, &last, err, sizeof err), SM_OK);
    sm_svc_upload_reply rep;
    ck_assert_int_eq(sm_svc_upload_finish(st, &rep, err, sizeof err), SM_OK);

    const rec *r = &fx.r;
    ck_assert_int_eq(r->up_n, 5);
    ck_assert_int_eq(r->up_header_at, 0);
    ck_assert_int_eq(r->up_last_at, 4);
    ck_assert_uint_eq(r->up_header.array_id.v, 17);
    ck_assert_int_eq(r->up_header.ndevices, 3);
    ck_assert_int_eq(r->up_header.devices[0], 6);
    ck_assert_int_eq(r->up_header.devices[2], 7);
    shape_same(&r->up_header.shape, &m.header.shape);
    ck_assert_int_eq(r->up_header.dtype, SM_F32);
    ck_assert_int_eq(r->up_header.total_bytes, 96);
    ck_assert_int_eq(r->up_offsets[1], 0);
    ck_assert_int_eq(r->up_offsets[2], 50);
    ck_assert_int_eq(r->up_offsets[3], 80);
    ck_assert_int_eq(r->up_offsets[4], 96);
    ck_assert_uint_eq(r->up_lens[0], 0);
    ck_assert_uint_eq(r->up_lens[3], 16);
    ck_assert_uint_eq(r->up_total, 96);
    ck_assert_mem_eq(r->up_data, fx.blob, 96);
    ck_assert_uint_eq(r->up_checksum, last.checksum);
    ck_assert_uint_eq(r->up_computed, last.checksum);
    ck_assert_int_eq(rep.bytes, 96);
    ck_assert_uint_eq(rep.checksum, last.checksum);
    ck_assert_int_eq(rep.array_ready, 1);
}
END_TEST

/* _i: 0 Coordinator.Download, 1 Worker.GetShard; with and without a box. */
START_TEST(test_download_stream)
{
    char err[256] = "";
    sm_svc_download_req req = {{{0}, "weights"}, 3, _i, {2, {{1, 3}, {0, 6}}}};
    sm_svc_download_stream *st;
    ck_assert_int_eq(sm_svc_download_open(fx.ch, _i, &req, DL, &st, err, sizeof err), SM_OK);
    uint8_t got[96];
    size_t total = 0;
    int n = 0, end = 0;
    uint64_t sum = 0;
    sm_svc_chunk c;
    while (sm_svc_download_recv(st, &c, &end, err, sizeof err) == SM_OK && !end) {
        ck_assert_int_eq(c.has_meta, n == 0);
        if (n == 0) {
            ck_assert_int_eq(c.shape.rank, 2);
            ck_assert_int_eq(c.shape.dims[1], 6);
            ck_assert_int_eq(c.dtype, SM_F32);
            ck_assert_int_eq(c.total_bytes, 96);
        }
        ck_assert_int_eq(c.offset, (int64_t)total);
        ck_assert_uint_le(total + c.len, sizeof got);
        memcpy(got + total, c.data, c.len);
        total += c.len;
        ck_assert_int_eq(c.last, n == 2);
        if (c.last)
            sum = c.checksum;
        n++;
    }
    ck_assert_msg(end, "stream ended with an error: %s", err);
    sm_svc_download_free(st);
    ck_assert_int_eq(n, 3);
    ck_assert_uint_eq(total, 96);
    ck_assert_mem_eq(got, fx.blob, 96);
    ck_assert_uint_eq(sum, sm_checksum_oneshot(got, total));
    ck_assert_str_eq(fx.r.dl.array.name, "weights");
    ck_assert_int_eq(fx.r.dl.device, 3);
    ck_assert_int_eq(fx.r.dl.has_box, _i);
    if (_i)
        index_same(&fx.r.dl.box, &req.box);
}
END_TEST

static Suite *svc_stream_suite(void)
{
    return SUITE_CASE(suite_create("rpc_svc_stream"), "streams", 30, SUITE_CHECKED(setup, teardown),
                      {test_worker_calls}, {test_upload_stream, 2}, {test_download_stream, 2});
}

int main(void)
{
    return suite_main(svc_stream_suite());
}
