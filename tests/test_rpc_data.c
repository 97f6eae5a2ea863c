/* Check suite for the data-message half of common/rpc: sm_rpc_pack_data and
 * sm_rpc_unpack_data on wire bytes built by hand and cut into slices at
 * every boundary (well-formed messages must decode as protobuf-c decodes
 * them, malformed ones must be refused with SM_EFORMAT and never reach the
 * sink), and the zero-copy stream calls over real sockets (payloads
 * arrive intact, every release runs exactly once). The message type is
 * shmap.test.Msg (proto/shmap_test.proto), whose payload is field 1. */
#include <check.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sm_checksum.h"
#include "sm_rpc_internal.h"
#include "sm_rpc_proto.h"
#include "suite_main.h"
#include "svc_testutil.h"

#define MIB       (1u << 20)
#define DATA      1u /* Msg.data */
#define P_UPLOAD  "/shmap.test.Echo/Upload"
#define P_DOWN    "/shmap.test.Echo/Download"
#define MAX_WIRE  (256 << 10)
#define MAX_SLICE 16

/* ---- wire bytes by hand ------------------------------------------------- */

typedef struct {
    uint8_t *b;
    size_t n;
} wire;

static void put_varint(wire *w, uint64_t v)
{
    for (; v >= 0x80; v >>= 7)
        w->b[w->n++] = (uint8_t)(v | 0x80);
    w->b[w->n++] = (uint8_t)v;
}

static void put_bytes(wire *w, uint32_t field, const void *p, size_t n)
{
    put_varint(w, (uint64_t)field << 3 | 2);
    put_varint(w, n);
    memcpy(w->b + w->n, p, n);
    w->n += n;
}

static void put_raw(wire *w, const char *p, size_t n)
{
    memcpy(w->b + w->n, p, n);
    w->n += n;
}

/* A byte buffer holding w cut at the given offsets (ascending, < w->n). */
static grpc_byte_buffer *wire_bb(const wire *w, const size_t *cuts, int ncuts)
{
    grpc_slice s[MAX_SLICE];
    size_t at = 0;
    int n = 0;
    for (int i = 0; i <= ncuts; i++) {
        size_t end = i < ncuts ? cuts[i] : w->n;
        s[n++] = grpc_slice_from_copied_buffer((const char *)w->b + at, end - at);
        at = end;
    }
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(s, (size_t)n);
    for (int i = 0; i < n; i++)
        grpc_slice_unref(s[i]);
    return bb;
}

/* ---- a sink that records what it was given ------------------------------ */

typedef struct {
    uint8_t *buf; /* where place puts the payload */
    size_t cap;
    int placed;        /* place calls */
    size_t place_len;  /* len given to place */
    uint32_t seq_seen; /* msg->seq as place saw it */
    size_t copied;     /* bytes reported by copied, in order */
    int in_order;      /* each piece continued where the last one ended */
    sm_err refuse;     /* place fails with this if not SM_OK */
} rec;

static sm_err rec_place(void *user, const ProtobufCMessage *m, size_t len, void **dst, char *err,
                        size_t errlen)
{
    rec *r = user;
    const Msg *msg = (const Msg *)m;
    r->placed++;
    r->place_len = len;
    r->seq_seen = msg->seq;
    ck_assert_uint_eq(msg->data.len, 0); /* the payload is not in the message */
    if (r->refuse)
        return sm_fail(err, errlen, r->refuse, "refused %zu bytes", len);
    ck_assert_uint_le(len, r->cap);
    *dst = r->buf;
    return SM_OK;
}

static void rec_copied(void *user, const void *p, size_t n)
{
    rec *r = user;
    /* p holds the piece's bytes: what was just written at the next
     * position of the destination */
    if (r->copied + n > r->cap || memcmp(p, r->buf + r->copied, n) != 0)
        r->in_order = 0;
    r->copied += n;
}

static void fill(uint8_t *p, size_t n, uint32_t seed)
{
    for (size_t k = 0; k < n; k++)
        p[k] = (uint8_t)(seed * 131u + k * 7u + (k >> 12));
}

/* Decodes w (cut at cuts) with sm_rpc_unpack_data into r; returns the
 * result, *out the message (caller frees). */
static sm_err decode(const wire *w, const size_t *cuts, int ncuts, rec *r, Msg **out, size_t *len,
                     char *err, size_t errlen)
{
    /* every other decode copies past the cache (sm_copy_stream) */
    static int cold;
    sm_rpc_sink sink = {rec_place, rec_copied, r, cold ^= 1};
    grpc_byte_buffer *bb = wire_bb(w, cuts, ncuts);
    ProtobufCMessage *m = NULL;
    r->placed = 0;
    r->copied = 0;
    r->in_order = 1;
    memset(r->buf, 0xee, r->cap);
    sm_err e = sm_rpc_unpack_data(bb, MSG_DESC, DATA, &sink, "request", &m, len, err, errlen);
    grpc_byte_buffer_destroy(bb);
    *out = (Msg *)m;
    return e;
}

/* ---- tests -------------------------------------------------------------- */

/* Well-formed messages, small (plain path) and large (scanned from the
 * slices), each cut at several places: the same fields as protobuf-c
 * decodes, the payload (last occurrence) in the sink, pieces in order. */
START_TEST(test_unpack_data_wellformed)
{
    static const size_t sizes[] = {0, 1, 100, 70000, 200000};
    uint8_t *pay = malloc(MAX_WIRE), *other = malloc(MAX_WIRE);
    wire w = {malloc(2 * MAX_WIRE + 256), 0};
    rec r = {.buf = malloc(MAX_WIRE), .cap = MAX_WIRE};
    char err[256];
    sm_rpc_init();
    fill(other, MAX_WIRE, 77);
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
        size_t n = sizes[si];
        fill(pay, n, (uint32_t)si);
        for (int layout = 0; layout < 4; layout++) {
            w.n = 0;
            if (layout == 1) /* payload first, then the small fields */
                put_bytes(&w, DATA, pay, n);
            put_varint(&w, 3 << 3 | 0); /* seq = 300 */
            put_varint(&w, 300);
            put_bytes(&w, 2, "hello", 5); /* text */
            if (layout == 2)              /* an earlier payload, replaced */
                put_bytes(&w, DATA, other, n / 2 + 1);
            put_varint(&w, 5 << 3 | 0); /* checksum */
            put_varint(&w, 0x0807060504030201ull);
            put_raw(&w,
                    "\xa1\x06"
                    "12345678",
                    10);                    /* unknown fixed64 field 100 */
            put_raw(&w, "\xa8\x06\x05", 3); /* unknown varint field 101 */
            if (layout != 1 && layout != 3)
                put_bytes(&w, DATA, pay, n);
            put_raw(&w, "\x30\x01", 2); /* last = true */
            size_t want = layout == 3 ? 0 : n;
            for (size_t cut = 1; cut < w.n; cut += w.n / 7 + 1) {
                size_t cuts[3] = {cut / 3, cut, cut + (w.n - cut) / 2};
                int nc = cuts[0] > 0 && cuts[2] > cut && cuts[2] < w.n ? 3 : 1;
                const size_t *cp = nc == 3 ? cuts : &cuts[1];
                Msg *m = NULL;
                size_t len = 99;
                sm_err e = decode(&w, cp, nc, &r, &m, &len, err, sizeof err);
                ck_assert_msg(e == SM_OK, "size %zu layout %d cut %zu: %s", n, layout, cut, err);
                ck_assert_ptr_nonnull(m);
                ck_assert_uint_eq(len, want);
                ck_assert_int_eq(r.placed, 1);
                ck_assert_uint_eq(r.place_len, want);
                ck_assert_uint_eq(r.seq_seen, 300);
                ck_assert_uint_eq(r.copied, want);
                ck_assert(r.in_order);
                ck_assert(want == 0 || memcmp(r.buf, pay, want) == 0);
                ck_assert_uint_eq(m->seq, 300);
                ck_assert_str_eq(m->text, "hello");
                ck_assert_uint_eq(m->checksum, 0x0807060504030201ull);
                ck_assert(m->last);
                ck_assert_uint_eq(m->data.len, 0);
                ck_assert_ptr_null(m->data.data);
                sm_rpc_msg_free(&m->base);
            }
        }
    }
    free(pay);
    free(other);
    free(w.b);
    free(r.buf);
    sm_rpc_shutdown();
}
END_TEST

/* Malformed wire bytes, small and large: SM_EFORMAT, no message, and the
 * sink never told to place anything. */
START_TEST(test_unpack_data_malformed)
{
    static const struct {
        const char *name;
        const char *bytes; /* appended after a valid seq field */
        size_t n;
        int with_big; /* a large valid payload first, so the scanner runs */
    } rows[] = {
        {"varint cut", "\x18\xff", 2, 0},
        {"varint cut after payload", "\x18\xff", 2, 1},
        {"11-byte varint", "\x18\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", 12, 1},
        {"length past the end",
         "\x12\x10"
         "abc",
         5, 1},
        {"payload length past the end",
         "\x0a\x90\x03"
         "abc",
         6, 1},
        {"payload length 2^63", "\x0a\xff\xff\xff\xff\xff\xff\xff\xff\x7f", 10, 1},
        {"field number 0", "\x02\x01x", 3, 1},
        {"payload as a varint", "\x08\x05", 2, 1},
        {"text as a varint", "\x10\x05", 2, 1},
        {"group start", "\x0b", 1, 1},
        {"wire type 7", "\x0f", 1, 1},
        {"fixed64 cut", "\xa1\x06\x01\x02", 4, 1},
        {"checksum as fixed64",
         "\x29"
         "12345678",
         9, 1},
        {"tag cut", "\x80", 1, 1},
    };
    uint8_t *pay = malloc(MAX_WIRE);
    fill(pay, MAX_WIRE, 5);
    wire w = {malloc(MAX_WIRE + 256), 0};
    rec r = {.buf = malloc(MAX_WIRE), .cap = MAX_WIRE};
    char err[256];
    sm_rpc_init();
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        w.n = 0;
        put_varint(&w, 3 << 3 | 0);
        put_varint(&w, 7);
        if (rows[i].with_big)
            put_bytes(&w, DATA, pay, 100000);
        put_raw(&w, rows[i].bytes, rows[i].n);
        for (size_t cut = 1; cut < w.n; cut += w.n / 5 + 1) {
            Msg *m = (Msg *)1;
            size_t len = 99;
            sm_err e = decode(&w, &cut, 1, &r, &m, &len, err, sizeof err);
            ck_assert_msg(e == SM_EFORMAT, "%s (cut %zu): %d %s", rows[i].name, cut, (int)e, err);
            ck_assert_msg(strstr(err, "is not a valid shmap.test.Msg") != NULL, "%s: %s",
                          rows[i].name, err);
            ck_assert_ptr_null(m);
            ck_assert_uint_eq(len, 0);
            ck_assert_int_eq(r.placed, 0);
            ck_assert_uint_eq(r.copied, 0);
        }
    }
    free(pay);
    free(w.b);
    free(r.buf);
    sm_rpc_shutdown();
}
END_TEST

/* A sink that refuses: its error comes back as is, with no message; a
 * field that is not a singular bytes field is our bug (SM_EINTERNAL). */
START_TEST(test_unpack_data_refused)
{
    uint8_t *pay = malloc(MAX_WIRE);
    fill(pay, MAX_WIRE, 3);
    wire w = {malloc(MAX_WIRE + 64), 0};
    rec r = {.buf = malloc(MAX_WIRE), .cap = MAX_WIRE, .refuse = SM_EDATALOSS};
    char err[256];
    static const size_t sizes[] = {10, 100000};
    sm_rpc_init();
    for (size_t i = 0; i < 2; i++) {
        w.n = 0;
        put_bytes(&w, DATA, pay, sizes[i]);
        Msg *m = NULL;
        size_t len = 0;
        ck_assert_int_eq(decode(&w, NULL, 0, &r, &m, &len, err, sizeof err), SM_EDATALOSS);
        ck_assert_str_eq(err, sizes[i] == 10 ? "refused 10 bytes" : "refused 100000 bytes");
        ck_assert_ptr_null(m);
        ck_assert_uint_eq(r.copied, 0);
    }
    sm_rpc_sink sink = {rec_place, rec_copied, &r};
    grpc_byte_buffer *bb = wire_bb(&w, NULL, 0);
    ProtobufCMessage *m = NULL;
    size_t len;
    ck_assert_int_eq(
        sm_rpc_unpack_data(bb, MSG_DESC, 2 /* text */, &sink, "request", &m, &len, err, sizeof err),
        SM_EINTERNAL);
    ck_assert_int_eq(
        sm_rpc_unpack_data(bb, MSG_DESC, 42, &sink, "request", &m, &len, err, sizeof err),
        SM_EINTERNAL);
    grpc_byte_buffer_destroy(bb);
    free(pay);
    free(w.b);
    free(r.buf);
    sm_rpc_shutdown();
}
END_TEST

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int held;     /* references not yet released */
    int released; /* release calls */
} holder;

static void holder_init(holder *h)
{
    pthread_mutex_init(&h->mu, NULL);
    pthread_cond_init(&h->cv, NULL);
    h->held = h->released = 0;
}

static void holder_take(holder *h)
{
    pthread_mutex_lock(&h->mu);
    h->held++;
    pthread_mutex_unlock(&h->mu);
}

static void holder_release(void *arg)
{
    holder *h = arg;
    pthread_mutex_lock(&h->mu);
    h->held--;
    h->released++;
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
}

/* Waits (at most ~10 s) until nothing is held; returns what still is. */
static int holder_wait(holder *h)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += 10;
    pthread_mutex_lock(&h->mu);
    while (h->held > 0 && pthread_cond_timedwait(&h->cv, &h->mu, &ts) == 0)
        ;
    int held = h->held;
    pthread_mutex_unlock(&h->mu);
    return held;
}

/* pack_data: the bytes are a valid Msg with the payload, the payload is
 * referenced (released once, when the buffer goes), and oversize payloads
 * are refused with the release run at once. */
START_TEST(test_pack_data)
{
    sm_rpc_init();
    holder h;
    holder_init(&h);
    char err[256];
    size_t n = 3 * MIB + 5;
    uint8_t *pay = malloc(n);
    fill(pay, n, 11);
    Msg msg = SHMAP__TEST__MSG__INIT;
    msg.seq = 9;
    msg.text = "t";
    grpc_byte_buffer *bb;
    holder_take(&h);
    ck_assert_int_eq(sm_rpc_pack_data(&msg.base, DATA, pay, n, holder_release, &h, "request", &bb,
                                      err, sizeof err),
                     SM_OK);
    ck_assert_int_eq(h.released, 0);
    ProtobufCMessage *m;
    ck_assert_int_eq(sm_rpc_unpack(bb, MSG_DESC, "request", &m, err, sizeof err), SM_OK);
    Msg *got = (Msg *)m;
    ck_assert_uint_eq(got->seq, 9);
    ck_assert_str_eq(got->text, "t");
    ck_assert_uint_eq(got->data.len, n);
    ck_assert(memcmp(got->data.data, pay, n) == 0);
    sm_rpc_msg_free(m);
    grpc_byte_buffer_destroy(bb);
    ck_assert_int_eq(holder_wait(&h), 0);
    ck_assert_int_eq(h.released, 1);

    holder_take(&h);
    ck_assert_int_eq(sm_rpc_pack_data(&msg.base, DATA, pay, SM_RPC_MAX_MSG, holder_release, &h,
                                      "request", &bb, err, sizeof err),
                     SM_ERESOURCE);
    ck_assert_msg(strstr(err, "exceeds the limit") != NULL, "%s", err);
    ck_assert_int_eq(h.released, 2);
    holder_take(&h);
    ck_assert_int_eq(sm_rpc_pack_data(&msg.base, DATA, pay, 0, holder_release, &h, "request", &bb,
                                      err, sizeof err),
                     SM_OK);
    ck_assert_int_eq(h.released, 3);
    grpc_byte_buffer_destroy(bb);
    free(pay);
    sm_rpc_shutdown();
}
END_TEST

/* ---- over real sockets -------------------------------------------------- */

#define NCHUNK 24

/* Upload handler: receives every chunk into one buffer with a sink, checks
 * the running checksum, replies with count and checksum. */
static void h_upload(sm_rpc_call *call, void *user)
{
    (void)user;
    uint8_t *buf = malloc((size_t)NCHUNK * MIB);
    rec r = {.buf = buf, .cap = (size_t)NCHUNK * MIB};
    sm_checksum *ck = sm_checksum_create();
    sm_rpc_sink sink = {rec_place, rec_copied, &r};
    char err[256];
    ProtobufCMessage *m;
    size_t len, at = 0;
    uint32_t count = 0;
    sm_err e;
    while ((e = sm_rpc_recv_data(call, DATA, &sink, &m, &len, err, sizeof err)) == SM_OK && m) {
        sm_checksum_update(ck, r.buf, len);
        at += len;
        r.buf = buf + at;
        r.cap -= len;
        r.copied = 0;
        count++;
        sm_rpc_msg_free(m);
    }
    svt_upload_finish(call, e, err, count, ck, 0, 0);
    sm_checksum_free(ck);
    free(buf);
}

typedef struct {
    holder h;
    uint8_t *src;
} down_src;

/* Download handler: NCHUNK chunks of 1 MiB sent from one buffer without a
 * copy; the buffer outlives the server (released at the end of the test). */
static void h_download(sm_rpc_call *call, void *user)
{
    down_src *d = user;
    char err[256];
    ProtobufCMessage *m = svt_recv(call);
    if (!m)
        return;
    sm_err e = SM_OK;
    sm_rpc_msg_free(m);
    for (uint32_t i = 0; i < NCHUNK && !e; i++) {
        Msg c = SHMAP__TEST__MSG__INIT;
        c.seq = i;
        holder_take(&d->h);
        e = sm_rpc_send_data(call, &c.base, DATA, d->src + (size_t)i * MIB, MIB, holder_release,
                             &d->h, err, sizeof err);
    }
    sm_rpc_finish(call, e, e ? err : NULL, NULL);
}

START_TEST(test_streams_zero_copy)
{
    sm_rpc_init();
    char err[256] = "";
    down_src d;
    holder_init(&d.h);
    size_t total = (size_t)NCHUNK * MIB;
    d.src = malloc(total);
    fill(d.src, total, 21);
    sm_rpc_server *srv = svt_server();
    const sm_rpc_method rows[] = {
        {P_UPLOAD, SM_RPC_CLIENT_STREAM, MSG_DESC, h_upload, NULL},
        {P_DOWN, SM_RPC_SERVER_STREAM, MSG_DESC, h_download, &d},
    };
    for (int i = 0; i < 2; i++)
        ck_assert_int_eq(sm_rpc_server_add(srv, &rows[i], err, sizeof err), SM_OK);
    sm_rpc_channel *ch = svt_start(srv);

    /* upload without copies */
    holder up;
    holder_init(&up);
    sm_rpc_stream *st;
    ck_assert_int_eq(sm_rpc_cstream_open(ch, P_UPLOAD, 20000, &st, err, sizeof err), SM_OK);
    for (uint32_t i = 0; i < NCHUNK; i++) {
        Msg c = SHMAP__TEST__MSG__INIT;
        c.seq = i;
        holder_take(&up);
        ck_assert_msg(sm_rpc_cstream_send_data(st, &c.base, DATA, d.src + (size_t)i * MIB, MIB,
                                               holder_release, &up, err, sizeof err) == SM_OK,
                      "%s", err);
    }
    ProtobufCMessage *rep;
    ck_assert_msg(sm_rpc_cstream_finish(st, MSG_DESC, &rep, err, sizeof err) == SM_OK, "%s", err);
    ck_assert_uint_eq(((Msg *)rep)->count, NCHUNK);
    ck_assert_uint_eq(((Msg *)rep)->checksum, sm_checksum_oneshot(d.src, total));
    sm_rpc_msg_free(rep);
    ck_assert_int_eq(holder_wait(&up), 0);
    ck_assert_int_eq(up.released, NCHUNK);

    /* download without copies, into one buffer */
    Msg req = SHMAP__TEST__MSG__INIT;
    ck_assert_int_eq(sm_rpc_sstream_open(ch, P_DOWN, &req.base, 20000, &st, err, sizeof err),
                     SM_OK);
    uint8_t *dst = malloc(total);
    rec r = {.buf = dst, .cap = total};
    sm_rpc_sink sink = {rec_place, rec_copied, &r};
    size_t at = 0, len;
    uint32_t n = 0;
    ProtobufCMessage *m;
    sm_err e;
    while ((e = sm_rpc_sstream_recv_data(st, MSG_DESC, DATA, &sink, &m, &len, err, sizeof err)) ==
               SM_OK &&
           m) {
        ck_assert_uint_eq(((Msg *)m)->seq, n);
        n++;
        at += len;
        r.buf = dst + at;
        r.cap = total - at;
        r.copied = 0;
        sm_rpc_msg_free(m);
    }
    ck_assert_msg(e == SM_OK, "%s", err);
    ck_assert_uint_eq(n, NCHUNK);
    ck_assert_uint_eq(at, total);
    ck_assert(memcmp(dst, d.src, total) == 0);
    sm_rpc_stream_free(st);

    /* a download abandoned midway: every release still runs */
    ck_assert_int_eq(sm_rpc_sstream_open(ch, P_DOWN, &req.base, 20000, &st, err, sizeof err),
                     SM_OK);
    r.buf = dst;
    r.cap = total;
    ck_assert_int_eq(sm_rpc_sstream_recv_data(st, MSG_DESC, DATA, &sink, &m, &len, err, sizeof err),
                     SM_OK);
    sm_rpc_msg_free(m);
    sm_rpc_stream_free(st);
    sm_rpc_channel_free(ch);
    sm_rpc_server_free(srv);
    ck_assert_int_eq(holder_wait(&d.h), 0);
    ck_assert_int_ge(d.h.released, NCHUNK + 1);
    free(dst);
    free(d.src);
    sm_rpc_shutdown();
}
END_TEST

int main(void)
{
    return suite_main(SUITE_CASE(suite_create("rpc_data"), "core", 120, NULL,
                                 {test_unpack_data_wellformed}, {test_unpack_data_malformed},
                                 {test_unpack_data_refused}, {test_pack_data},
                                 {test_streams_zero_copy}));
}
