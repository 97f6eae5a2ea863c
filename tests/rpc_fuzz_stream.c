/* rpc_fuzz_stream: the stream fuzzing of the robustness suite: upload
 * streams (Upload, PutShard) broken in the designed ways plus random, raw
 * and mutated sequences; downloads of bad boxes, devices and arrays;
 * Exchange messages for jobs nobody runs; streams abandoned midway. */
#include "rpc_fuzz.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness_svc.h"
#include "sm_checksum.h"
#include "sm_rpc_msg.h"
#include "sm_time.h"

sm_err run_cstream(sm_rpc_channel *ch, int worker, const char *path, const fuzz_seq *s,
                   const ProtobufCMessageDescriptor *rep_desc, int abort_after, const char *kind,
                   char *err, size_t errlen)
{
    sm_rpc_stream *st = NULL;
    ProtobufCMessage *rep = NULL;
    fuzz_raw_msg rm;
    int64_t t0 = sm_time_mono_ms();
    sm_err e = sm_rpc_cstream_open(ch, path, CALL_MS, &st, err, errlen);
    for (int i = 0; !e && i < s->n; i++) {
        if (abort_after >= 0 && i == abort_after)
            break;
        e = sm_rpc_cstream_send(st, fuzz_raw_of(&rm, s->m[i].b, s->m[i].n), err, errlen);
    }
    if (abort_after >= 0) {
        sm_rpc_stream_free(st);
        return SM_ECANCELLED;
    }
    if (st) /* finish reports the server's status, also after a failed send */
        e = sm_rpc_cstream_finish(st, rep_desc, &rep, err, errlen);
    sm_rpc_msg_free(rep);
    judge(path, worker, e, err, sm_time_mono_ms() - t0, kind, s->n ? s->m[0].b : NULL,
          s->n ? s->m[0].n : 0, NULL);
    return e;
}

uint8_t *full_data(float salt, size_t *nb)
{
    sm_index all = {0};
    all.rank = 2;
    all.r[0].stop = 16;
    all.r[1].stop = 32;
    return (uint8_t *)harness_box_f32(&all, salt, nb);
}

/* Every designed bad upload to the coordinator (the pending array) and to a
 * worker (a fresh array id) is refused; then random, raw and mutated
 * sequences get a status. */
void fuzz_uploads(void)
{
    size_t nb;
    uint8_t *data = full_data(0.25f, &nb);
    char err[1024];
    fuzz_rng r = {cl.seed ^ 0x0B10Au};
    for (int c = 0; c < UP_NCASES; c++) {
        for (int w = 0; w < 2; w++) {
            fuzz_seq s = {0};
            uint64_t id = w ? 5000000 + (uint64_t)c : cl.pending.v;
            const int32_t *devs = w ? cl.wdev[1] : mesh_devs;
            upload_case(&s, (up_case)c, id, devs, w ? 4 : 8, data, nb);
            char kind[96];
            snprintf(kind, sizeof kind, "upload: %s", up_names[c]);
            sm_err e =
                run_cstream(w ? cl.wch[1] : cl.coord, w, w ? W_PATH("PutShard") : C_PATH("Upload"),
                            &s, &shmap__v1__upload_reply__descriptor, -1, kind, err, sizeof err);
            if (getenv("SM_FUZZ_VERBOSE"))
                fprintf(stderr, "fuzz: %-34s %-12s %s\n", kind, w ? "worker" : "coordinator", err);
            ck_assert_msg(e != SM_OK, "%s to %s was accepted", kind,
                          w ? "a worker" : "the coordinator");
            if (w) { /* and nothing of it was kept */
                sm_svc_shard_state st[4];
                ck_assert_int_eq(sm_svc_worker_shard_info(cl.wch[1], CALL_MS, (sm_array_id){id}, 4,
                                                          cl.wdev[1], st, err, sizeof err),
                                 SM_OK);
                for (int k = 0; k < 4; k++)
                    ck_assert_msg(!st[k].present, "%s left a shard on device %d", kind,
                                  (int)cl.wdev[1][k]);
            }
            fuzz_seq_free(&s);
        }
    }
    /* the kept array (READY) refuses any upload */
    fuzz_seq s = {0};
    upload_case(&s, UP_BAD_CHECKSUM, cl.keep.v, mesh_devs, 8, data, nb);
    ck_assert_int_ne(run_cstream(cl.coord, 0, C_PATH("Upload"), &s,
                                 &shmap__v1__upload_reply__descriptor, -1,
                                 "upload to a ready array", err, sizeof err),
                     SM_OK);
    fuzz_seq_free(&s);
    for (int k = 0; k < cl.n; k++) {
        for (int w = 0; w < 2; w++) {
            int how = (int)fuzz_below(&r, 3);
            const char *kind = how == 0   ? "upload: random messages"
                               : how == 1 ? "upload: raw bytes"
                                          : "upload: mutated valid";
            if (how == 0) {
                for (int i = 0, n = 1 + (int)fuzz_below(&r, 6); i < n; i++) {
                    ProtobufCMessage *m = fuzz_gen_msg(&r, &shmap__v1__upload_msg__descriptor, 0);
                    Shmap__V1__UploadMsg *u = (Shmap__V1__UploadMsg *)m;
                    if (w && u->header && is_kept(u->header->array_id, NULL))
                        u->header->array_id = 6000000;
                    fuzz_seq_add(&s, m);
                    sm_rpc_msg_free(m);
                }
            } else if (how == 1) {
                uint8_t b[MAX_RAW];
                for (int i = 0, n = 1 + (int)fuzz_below(&r, 4); i < n; i++) {
                    size_t len = fuzz_below(&r, MAX_RAW + 1);
                    for (size_t j = 0; j < len; j++)
                        b[j] = (uint8_t)fuzz_rnd(&r);
                    fuzz_seq_add_raw(&s, b, len);
                }
            } else {
                /* to the pending array only cases with a wrong checksum,
                 * which no mutation repairs: it must stay pending */
                up_case c = w                   ? (up_case)fuzz_below(&r, UP_NCASES)
                            : fuzz_below(&r, 2) ? UP_TINY_BAD_SUM
                                                : UP_BAD_CHECKSUM;
                upload_case(&s, c, w ? 6000001 + (uint64_t)k : cl.pending.v,
                            w ? cl.wdev[1] : mesh_devs, w ? 4 : 8, data, nb);
                for (int i = 0, n = 1 + (int)fuzz_below(&r, 3); s.n && i < n; i++)
                    fuzz_mutate_bytes(&r, &s.m[fuzz_below(&r, (uint64_t)s.n)]);
            }
            run_cstream(w ? cl.wch[1] : cl.coord, w, w ? W_PATH("PutShard") : C_PATH("Upload"), &s,
                        &shmap__v1__upload_reply__descriptor, -1, kind, err, sizeof err);
            fuzz_seq_free(&s);
        }
    }
    free(data);
}

/* Downloads req from the coordinator (worker 0) or a worker (1); returns the
 * status after reading the whole stream and checking its byte count. */
static sm_err run_download(int worker, const ProtobufCMessage *req, const uint8_t *raw, size_t nraw,
                           const char *kind, char *err, size_t errlen)
{
    sm_rpc_stream *st = NULL;
    fuzz_raw_msg rm;
    const char *path = worker ? W_PATH("GetShard") : C_PATH("Download");
    int64_t t0 = sm_time_mono_ms(), total = -1, got = 0;
    const ProtobufCMessage *m = req ? req : fuzz_raw_of(&rm, raw, nraw);
    sm_err e =
        sm_rpc_sstream_open(worker ? cl.wch[0] : cl.coord, path, m, CALL_MS, &st, err, errlen);
    while (!e) {
        ProtobufCMessage *c = NULL;
        e = sm_rpc_sstream_recv(st, &shmap__v1__data_chunk__descriptor, &c, err, errlen);
        if (e || !c)
            break;
        Shmap__V1__DataChunk *dc = (Shmap__V1__DataChunk *)c;
        if (total < 0)
            total = dc->total_bytes;
        else if (dc->shape && got == total) /* the next shard of a several-device stream */
            total += dc->total_bytes;
        got += (int64_t)dc->data.len;
        sm_rpc_msg_free(c);
        if (got > ((int64_t)64 << 20) || sm_time_mono_ms() - t0 > PROMPT_MS) {
            sm_rpc_stream_free(st);
            ck_abort_msg("%s (%s): %lld bytes, still streaming", path, kind, (long long)got);
        }
    }
    sm_rpc_stream_free(st);
    judge(path, worker, e, err, sm_time_mono_ms() - t0, kind, raw, nraw, NULL);
    if (!e)
        ck_assert_msg(got == total, "%s (%s): %lld bytes of a stream of total_bytes %lld", path,
                      kind, (long long)got, (long long)total);
    return e;
}

void fuzz_downloads(void)
{
    char err[1024];
    fuzz_rng r = {cl.seed ^ 0xD0u};
    /* boxes in shard coordinates of an [8,8] shard */
    static const struct {
        const char *name;
        int n_start, n_stop;
        int64_t start[10], stop[10];
    } boxes[] = {
        {"start > stop", 2, 2, {4, 4}, {2, 8}},
        {"negative start", 2, 2, {-1, 0}, {8, 8}},
        {"stop past shard", 2, 2, {0, 0}, {9, 8}},
        {"rank 1", 1, 1, {0}, {8}},
        {"rank 3", 3, 3, {0, 0, 0}, {8, 8, 1}},
        {"rank 9", 9, 9, {0}, {8, 8, 1, 1, 1, 1, 1, 1, 1}},
        {"2^62 stop", 2, 2, {0, 0}, {(int64_t)1 << 62, (int64_t)1 << 62}},
        {"INT64_MIN start", 2, 2, {INT64_MIN, INT64_MIN}, {8, 8}},
        {"INT64_MAX both", 2, 2, {INT64_MAX, INT64_MAX}, {INT64_MAX, INT64_MAX}},
        {"start without stop", 2, 0, {0, 0}, {0}},
        {"stop without start", 0, 2, {0}, {8, 8}},
        {"ragged", 2, 1, {0, 0}, {8}},
    };
    for (size_t b = 0; b < sizeof boxes / sizeof boxes[0]; b++) {
        for (int w = 0; w < 2; w++) {
            Shmap__V1__ArrayRef ref = SHMAP__V1__ARRAY_REF__INIT;
            ref.id = cl.keep.v;
            Shmap__V1__Box box = SHMAP__V1__BOX__INIT;
            box.n_start = (size_t)boxes[b].n_start;
            box.start = (int64_t *)boxes[b].start;
            box.n_stop = (size_t)boxes[b].n_stop;
            box.stop = (int64_t *)boxes[b].stop;
            Shmap__V1__DownloadRequest rq = SHMAP__V1__DOWNLOAD_REQUEST__INIT;
            rq.array = &ref;
            rq.device = cl.wdev[0][0];
            rq.box = &box;
            char kind[96];
            snprintf(kind, sizeof kind, "download: %s", boxes[b].name);
            ck_assert_msg(run_download(w, &rq.base, NULL, 0, kind, err, sizeof err) != SM_OK,
                          "%s from %s was served", kind, w ? "a worker" : "the coordinator");
        }
    }
    /* bad devices and refs */
    static const int32_t devs[] = {-1, 8, 999, INT32_MAX, INT32_MIN};
    for (size_t d = 0; d < sizeof devs / sizeof devs[0]; d++)
        for (int w = 0; w < 2; w++) {
            Shmap__V1__ArrayRef ref = SHMAP__V1__ARRAY_REF__INIT;
            ref.id = cl.keep.v;
            Shmap__V1__DownloadRequest rq = SHMAP__V1__DOWNLOAD_REQUEST__INIT;
            rq.array = &ref;
            rq.device = devs[d];
            ck_assert_int_ne(
                run_download(w, &rq.base, NULL, 0, "download: bad device", err, sizeof err), SM_OK);
            rq.array = NULL;
            rq.device = cl.wdev[0][0];
            ck_assert_int_ne(
                run_download(w, &rq.base, NULL, 0, "download: no array", err, sizeof err), SM_OK);
        }
    /* several devices in one stream: served by a worker only, each device
     * once, no box, device the first of them */
    {
        Shmap__V1__ArrayRef ref = SHMAP__V1__ARRAY_REF__INIT;
        ref.id = cl.keep.v;
        int32_t many[4] = {cl.wdev[0][2], cl.wdev[0][0], cl.wdev[0][3], cl.wdev[0][1]};
        Shmap__V1__DownloadRequest rq = SHMAP__V1__DOWNLOAD_REQUEST__INIT;
        rq.array = &ref;
        rq.device = many[0];
        rq.n_devices = 4;
        rq.devices = many;
        ck_assert_int_eq(run_download(1, &rq.base, NULL, 0, "download: 4 devices", err, sizeof err),
                         SM_OK);
        ck_assert_int_eq(run_download(0, &rq.base, NULL, 0, "download: 4 devices from the relay",
                                      err, sizeof err),
                         SM_EINVAL);
        rq.device = many[1];
        ck_assert_int_eq(
            run_download(1, &rq.base, NULL, 0, "download: device not devices[0]", err, sizeof err),
            SM_EINVAL);
        rq.device = many[0];
        many[2] = many[0];
        ck_assert_int_eq(
            run_download(1, &rq.base, NULL, 0, "download: a device twice", err, sizeof err),
            SM_EINVAL);
        many[2] = cl.wdev[1][0]; /* another worker's: refused as when asked alone */
        Shmap__V1__DownloadRequest one = SHMAP__V1__DOWNLOAD_REQUEST__INIT;
        one.array = &ref;
        one.device = many[2];
        sm_err alone = run_download(1, &one.base, NULL, 0, "download: not held", err, sizeof err);
        ck_assert_int_ne(alone, SM_OK);
        ck_assert_int_eq(
            run_download(1, &rq.base, NULL, 0, "download: a device not held", err, sizeof err),
            alone);
        many[2] = cl.wdev[0][3];
        Shmap__V1__Box box = SHMAP__V1__BOX__INIT;
        int64_t start[2] = {0, 0}, stop[2] = {1, 1};
        box.n_start = box.n_stop = 2;
        box.start = start;
        box.stop = stop;
        rq.box = &box;
        ck_assert_int_eq(
            run_download(1, &rq.base, NULL, 0, "download: devices and a box", err, sizeof err),
            SM_EINVAL);
    }
    /* the pending array cannot be read */
    Shmap__V1__ArrayRef pref = SHMAP__V1__ARRAY_REF__INIT;
    pref.id = cl.pending.v;
    Shmap__V1__DownloadRequest prq = SHMAP__V1__DOWNLOAD_REQUEST__INIT;
    prq.array = &pref;
    ck_assert_int_eq(run_download(0, &prq.base, NULL, 0, "download: pending", err, sizeof err),
                     SM_EPRECONDITION);
    for (int k = 0; k < cl.n; k++) {
        for (int w = 0; w < 2; w++) {
            if (fuzz_below(&r, 2)) {
                ProtobufCMessage *m = fuzz_gen_msg(&r, &shmap__v1__download_request__descriptor, 0);
                Shmap__V1__DownloadRequest *d = (Shmap__V1__DownloadRequest *)m;
                if (fuzz_below(&r, 2) && d->array) { /* often the real array */
                    d->array->id = cl.keep.v;
                    d->device = fuzz_below(&r, 2) ? cl.wdev[0][fuzz_below(&r, 4)] : d->device;
                }
                size_t n;
                uint8_t *b = fuzz_pack(m, &n);
                sm_rpc_msg_free(m);
                run_download(w, NULL, b, n, "download: random request", err, sizeof err);
                free(b);
            } else {
                uint8_t b[MAX_RAW];
                size_t n = fuzz_below(&r, 64);
                for (size_t j = 0; j < n; j++)
                    b[j] = (uint8_t)fuzz_rnd(&r);
                run_download(w, NULL, b, n, "download: raw bytes", err, sizeof err);
            }
        }
    }
}

/* Collective messages for jobs no worker runs: random, mutated and raw. */
void fuzz_exchange(void)
{
    char err[1024];
    fuzz_rng r = {cl.seed ^ 0xE8u};
    uint8_t data[64];
    for (size_t i = 0; i < sizeof data; i++)
        data[i] = (uint8_t)i;
    for (int k = 0; k < cl.n; k++) {
        fuzz_seq s = {0};
        int how = (int)fuzz_below(&r, 3);
        for (int i = 0, n = 1 + (int)fuzz_below(&r, 6); i < n; i++) {
            if (how == 0) {
                ProtobufCMessage *m = fuzz_gen_msg(&r, &shmap__v1__coll_msg__descriptor, 0);
                fuzz_seq_add(&s, m);
                sm_rpc_msg_free(m);
            } else if (how == 1) {
                Shmap__V1__CollMsg c = SHMAP__V1__COLL_MSG__INIT;
                c.job_id = 777777 + (uint64_t)k;
                c.seq = (uint32_t)i;
                c.src_device = cl.wdev[1][0];
                c.dst_device = cl.wdev[0][0];
                c.data.data = data;
                c.data.len = sizeof data;
                c.total_bytes = sizeof data;
                c.last = 1;
                c.checksum = sm_checksum_oneshot(data, sizeof data);
                fuzz_seq_add(&s, &c.base);
                if (fuzz_below(&r, 2)) /* else valid, for a job nobody runs */
                    fuzz_mutate_bytes(&r, &s.m[s.n - 1]);
            } else {
                uint8_t b[MAX_RAW];
                size_t len = fuzz_below(&r, MAX_RAW + 1);
                for (size_t j = 0; j < len; j++)
                    b[j] = (uint8_t)fuzz_rnd(&r);
                fuzz_seq_add_raw(&s, b, len);
            }
        }
        sm_err e =
            run_cstream(cl.wch[0], 1, W_PATH("Exchange"), &s, &shmap__v1__coll_ack__descriptor, -1,
                        how == 0   ? "exchange: random"
                        : how == 1 ? "exchange: mutated"
                                   : "exchange: raw",
                        err, sizeof err);
        if (getenv("SM_FUZZ_VERBOSE"))
            fprintf(stderr, "fuzz: exchange %d: %s\n", how, e ? err : "OK");
        fuzz_seq_free(&s);
    }
}

/* Streams abandoned midway (sm_rpc_stream_free before finish): uploads to
 * the coordinator and a worker, exchanges, downloads after one chunk. */
void fuzz_aborts(void)
{
    size_t nb;
    uint8_t *data = full_data(0.25f, &nb);
    char err[1024];
    int rounds = cl.n / 4 + 1;
    for (int k = 0; k < rounds; k++) {
        fuzz_seq s = {0};
        upload_case(&s, UP_TINY_SHORT, cl.pending.v, mesh_devs, 8, data, nb);
        run_cstream(cl.coord, 0, C_PATH("Upload"), &s, &shmap__v1__upload_reply__descriptor,
                    1 + k % 10, "abort upload", err, sizeof err);
        fuzz_seq_free(&s);
        upload_case(&s, UP_TINY_SHORT, 7000000 + (uint64_t)k, cl.wdev[1], 4, data, nb);
        run_cstream(cl.wch[1], 1, W_PATH("PutShard"), &s, &shmap__v1__upload_reply__descriptor,
                    k % 10, "abort putshard", err, sizeof err);
        fuzz_seq_free(&s);
        Shmap__V1__CollMsg c = SHMAP__V1__COLL_MSG__INIT;
        c.job_id = 888888;
        c.data.data = data;
        c.data.len = 64;
        c.total_bytes = 128;
        fuzz_seq_add(&s, &c.base);
        run_cstream(cl.wch[0], 1, W_PATH("Exchange"), &s, &shmap__v1__coll_ack__descriptor, 1,
                    "abort exchange", err, sizeof err);
        fuzz_seq_free(&s);
        for (int w = 0; w < 2; w++) {
            Shmap__V1__ArrayRef ref = SHMAP__V1__ARRAY_REF__INIT;
            ref.id = cl.keep.v;
            Shmap__V1__DownloadRequest rq = SHMAP__V1__DOWNLOAD_REQUEST__INIT;
            rq.array = &ref;
            rq.device = cl.wdev[0][k % 4];
            sm_rpc_stream *st = NULL;
            ProtobufCMessage *m = NULL;
            if (sm_rpc_sstream_open(w ? cl.wch[0] : cl.coord,
                                    w ? W_PATH("GetShard") : C_PATH("Download"), &rq.base, CALL_MS,
                                    &st, err, sizeof err) == SM_OK &&
                k % 2 == 0)
                sm_rpc_sstream_recv(st, &shmap__v1__data_chunk__descriptor, &m, err, sizeof err);
            sm_rpc_msg_free(m);
            sm_rpc_stream_free(st);
        }
    }
    free(data);
}
