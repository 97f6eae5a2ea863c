/* Check suite for common/rpc: a real server on 127.0.0.1:0 inside the test
 * process, driven by the blocking client API over real sockets. The test
 * service is shmap.test.Echo (proto/shmap_test.proto). */
#include <arpa/inet.h>
#include <check.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "sm_checksum.h"
#include "sm_rpc_msg.h"
#include "sm_rpc_proto.h"
#include "sm_time.h"
#include "suite_main.h"
#include "svc_testutil.h"

#define MIB        (1u << 20)
#define P_UNARY    "/shmap.test.Echo/Unary"
#define P_UPLOAD   "/shmap.test.Echo/Upload"
#define P_DOWNLOAD "/shmap.test.Echo/Download"
#define P_CHAT     "/shmap.test.Echo/Chat"
#define P_HEALTH   "/grpc.health.v1.Health/Check"

/* ---- test server ------------------------------------------------------- */

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int active;    /* handlers running */
    int cancelled; /* handlers that saw SM_ECANCELLED */
    int held;      /* "hold" handlers waiting for a "release" */
    int released;  /* a "release" call arrived */
} state;

typedef struct {
    state st;
    sm_rpc_server *srv;
    sm_rpc_channel *ch;
    char target[64];
} fixture;

static void st_add(state *s, int *field, int d)
{
    pthread_mutex_lock(&s->mu);
    *field += d;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

/* Waits until *field >= want, at most ms; returns the last value seen. */
static int st_wait(state *s, int *field, int want, int ms)
{
    double end = sm_time_mono_ms() + ms;
    pthread_mutex_lock(&s->mu);
    while (*field < want && sm_time_mono_ms() < end) {
        pthread_mutex_unlock(&s->mu);
        usleep(2000);
        pthread_mutex_lock(&s->mu);
    }
    int v = *field;
    pthread_mutex_unlock(&s->mu);
    return v;
}

/* A message carrying n bytes of data, zeros (the caller frees data.data). */
static Msg msg_data(size_t n)
{
    Msg m = SHMAP__TEST__MSG__INIT;
    m.data.len = n;
    m.data.data = calloc(1, n ? n : 1);
    return m;
}

static void fill(uint8_t *p, size_t n, uint32_t seq)
{
    for (size_t k = 0; k < n; k++)
        p[k] = (uint8_t)(seq * 131u + k * 7u + (k >> 12));
}

static void note_err(state *s, sm_err e)
{
    if (e == SM_ECANCELLED)
        st_add(s, &s->cancelled, 1);
}

static void h_unary(sm_rpc_call *call, void *user)
{
    state *s = user;
    ProtobufCMessage *m = svt_recv(call);
    if (!m)
        return;
    Msg *req = (Msg *)m;
    if (strcmp(req->text, "fail") == 0) {
        sm_rpc_finish(call, SM_ENOTFOUND, "array 17 does not exist", NULL);
    } else if (strcmp(req->text, "sleep") == 0) {
        double end = sm_time_mono_ms() + 5000;
        while (!sm_rpc_call_cancelled(call) && sm_time_mono_ms() < end)
            usleep(5000);
        if (sm_rpc_call_cancelled(call))
            note_err(s, SM_ECANCELLED);
        sm_rpc_finish(call, SM_ECANCELLED, "gave up", NULL);
    } else if (strcmp(req->text, "bigreply") == 0) {
        Msg rep = msg_data(SM_RPC_MAX_MSG + MIB);
        ck_assert_int_eq(sm_rpc_finish(call, SM_OK, NULL, &rep.base), SM_ERESOURCE);
        free(rep.data.data);
    } else if (strcmp(req->text, "hold") == 0) {
        /* blocks until another call of this server releases it, without
         * telling the module (no sm_rpc_may_block) */
        st_add(s, &s->held, 1);
        double end = sm_time_mono_ms() + 10000;
        pthread_mutex_lock(&s->mu);
        while (!s->released && sm_time_mono_ms() < end) {
            pthread_mutex_unlock(&s->mu);
            usleep(1000);
            pthread_mutex_lock(&s->mu);
        }
        int ok = s->released;
        pthread_mutex_unlock(&s->mu);
        sm_rpc_finish(call, ok ? SM_OK : SM_ETIMEOUT, ok ? NULL : "never released", ok ? m : NULL);
    } else if (strcmp(req->text, "release") == 0) {
        st_add(s, &s->released, 1);
        sm_rpc_finish(call, SM_OK, NULL, m);
    } else if (strcmp(req->text, "none") == 0) {
        /* return without a status: the module answers INTERNAL */
    } else {
        sm_rpc_finish(call, SM_OK, NULL, m); /* echo */
    }
    sm_rpc_msg_free(m);
}

static void h_upload(sm_rpc_call *call, void *user)
{
    state *s = user;
    st_add(s, &s->active, 1);
    sm_checksum *ck = sm_checksum_create();
    ProtobufCMessage *m;
    char err[256];
    sm_err e;
    uint32_t count = 0;
    uint64_t bytes = 0;
    int last_ok = 0;
    while ((e = sm_rpc_recv(call, &m, err, sizeof err)) == SM_OK && m) {
        Msg *c = (Msg *)m;
        if (c->seq != count) {
            snprintf(err, sizeof err, "chunk %u arrived out of order (expected %u)", c->seq, count);
            e = SM_EINVAL;
            sm_rpc_msg_free(m);
            break;
        }
        sm_checksum_update(ck, c->data.data, c->data.len);
        bytes += c->data.len;
        count++;
        if (c->last) {
            last_ok = c->checksum == sm_checksum_digest(ck);
            if (!last_ok) {
                snprintf(err, sizeof err, "checksum mismatch after %u chunks", count);
                e = SM_EDATALOSS;
                sm_rpc_msg_free(m);
                break;
            }
        }
        sm_rpc_msg_free(m);
    }
    if (e == SM_OK && !last_ok) { /* ended early: a client gone, or a bug */
        e = sm_rpc_call_wait_cancelled(call, 1000) ? SM_ECANCELLED : SM_EINVAL;
        snprintf(err, sizeof err, "the upload ended after %u chunks, before its last", count);
    }
    note_err(s, e);
    svt_upload_finish(call, e, err, count, ck, last_ok, (uint32_t)(bytes / MIB));
    sm_checksum_free(ck);
    st_add(s, &s->active, -1);
}

static void h_download(sm_rpc_call *call, void *user)
{
    state *s = user;
    st_add(s, &s->active, 1);
    ProtobufCMessage *m = svt_recv(call);
    char err[256];
    if (!m) {
        st_add(s, &s->active, -1);
        return;
    }
    sm_err e = SM_OK;
    Msg *req = (Msg *)m;
    int forever = strcmp(req->text, "forever") == 0;
    sm_checksum *ck = sm_checksum_create();
    Msg c = msg_data(req->size);
    for (uint32_t i = 0; forever || i < req->count; i++) {
        fill(c.data.data, c.data.len, i);
        sm_checksum_update(ck, c.data.data, c.data.len);
        c.seq = i;
        c.checksum = sm_checksum_digest(ck);
        c.last = !forever && i + 1 == req->count;
        if ((e = sm_rpc_send(call, &c.base, err, sizeof err)))
            break;
    }
    note_err(s, e);
    sm_rpc_finish(call, e, err, NULL);
    free(c.data.data);
    sm_checksum_free(ck);
    sm_rpc_msg_free(m);
    st_add(s, &s->active, -1);
}

static void h_chat(sm_rpc_call *call, void *user)
{
    state *s = user;
    ProtobufCMessage *m;
    char err[256];
    sm_err e;
    while ((e = sm_rpc_recv(call, &m, err, sizeof err)) == SM_OK && m) {
        Msg *c = (Msg *)m;
        if (strcmp(c->text, "stop") == 0) {
            sm_rpc_msg_free(m);
            sm_rpc_finish(call, SM_EPRECONDITION, "chat stopped by request", NULL);
            return;
        }
        c->seq = c->seq * 2 + 1;
        e = sm_rpc_send(call, m, err, sizeof err);
        sm_rpc_msg_free(m);
        if (e)
            break;
    }
    note_err(s, e);
    if (e) {
        sm_rpc_finish(call, e, err, NULL);
        return;
    }
    sm_rpc_finish(call, SM_OK, NULL, NULL);
}

static void fx_start_cap(fixture *f, const char *server_token, const char *client_token,
                         int max_handlers)
{
    memset(f, 0, sizeof *f);
    pthread_mutex_init(&f->st.mu, NULL);
    pthread_cond_init(&f->st.cv, NULL);
    sm_rpc_init();
    char err[256] = "";
    sm_rpc_server_opts o = {
        .addr = "127.0.0.1:0", .token = server_token, .max_handlers = max_handlers};
    ck_assert_msg(sm_rpc_server_create(&o, &f->srv, err, sizeof err) == SM_OK, "%s", err);
    const sm_rpc_method rows[] = {
        {P_UNARY, SM_RPC_UNARY, MSG_DESC, h_unary, &f->st},
        {P_UPLOAD, SM_RPC_CLIENT_STREAM, MSG_DESC, h_upload, &f->st},
        {P_DOWNLOAD, SM_RPC_SERVER_STREAM, MSG_DESC, h_download, &f->st},
        {P_CHAT, SM_RPC_BIDI, MSG_DESC, h_chat, &f->st},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
        ck_assert_int_eq(sm_rpc_server_add(f->srv, &rows[i], err, sizeof err), SM_OK);
    ck_assert_int_eq(sm_rpc_server_add(f->srv, &rows[0], err, sizeof err), SM_EEXIST);
    ck_assert_int_eq(sm_rpc_server_start(f->srv, err, sizeof err), SM_OK);
    ck_assert_int_gt(sm_rpc_server_port(f->srv), 0);
    snprintf(f->target, sizeof f->target, "127.0.0.1:%d", sm_rpc_server_port(f->srv));
    ck_assert_int_eq(sm_rpc_channel_create(f->target, client_token, &f->ch, err, sizeof err),
                     SM_OK);
    ck_assert_msg(sm_rpc_channel_wait_ready(f->ch, 5000, err, sizeof err) == SM_OK, "%s", err);
}

static void fx_start(fixture *f, const char *server_token, const char *client_token)
{
    fx_start_cap(f, server_token, client_token, 0);
}

static void fx_stop(fixture *f)
{
    sm_rpc_channel_free(f->ch);
    sm_rpc_server_free(f->srv);
    sm_rpc_shutdown();
    pthread_mutex_destroy(&f->st.mu);
    pthread_cond_destroy(&f->st.cv);
}

/* The server and channel of the tests of the "server" case (a checked
 * fixture: each test has its own, in its own process). */
static fixture fx;

static void fx_setup(void)
{
    fx_start(&fx, NULL, NULL);
}

static void fx_teardown(void)
{
    fx_stop(&fx);
}

/* Unary call with text and a payload of n bytes; the reply is freed. */
static sm_err call_unary(sm_rpc_channel *ch, const char *path, const char *text, size_t n,
                         int deadline_ms, char *err, size_t errlen)
{
    Msg req = SHMAP__TEST__MSG__INIT;
    req.text = (char *)text;
    req.data.len = n;
    req.data.data = n ? malloc(n) : NULL;
    if (n)
        fill(req.data.data, n, 3);
    ProtobufCMessage *rep = NULL;
    sm_err e = sm_rpc_unary(ch, path, &req.base, MSG_DESC, &rep, deadline_ms, err, errlen);
    if (e == SM_OK) {
        Msg *r = (Msg *)rep;
        ck_assert_uint_eq(r->data.len, n);
        ck_assert(n == 0 || memcmp(r->data.data, req.data.data, n) == 0);
        ck_assert_str_eq(r->text, text);
    } else {
        ck_assert_ptr_null(rep);
    }
    sm_rpc_msg_free(rep);
    free(req.data.data);
    return e;
}

/* ---- tests ----------------------------------------------------------- */

START_TEST(test_status_mapping)
{
    static const struct {
        sm_err e;
        const char *status;
        sm_err back;
    } rows[] = {
        {SM_OK, "OK", SM_OK},
        {SM_EINVAL, "INVALID_ARGUMENT", SM_EINVAL},
        {SM_EFORMAT, "INVALID_ARGUMENT", SM_EINVAL},
        {SM_EOVERFLOW, "OUT_OF_RANGE", SM_EOVERFLOW},
        {SM_ENOTFOUND, "NOT_FOUND", SM_ENOTFOUND},
        {SM_EEXIST, "ALREADY_EXISTS", SM_EEXIST},
        {SM_EPRECONDITION, "FAILED_PRECONDITION", SM_EPRECONDITION},
        {SM_ERESOURCE, "RESOURCE_EXHAUSTED", SM_ERESOURCE},
        {SM_ENOMEM, "RESOURCE_EXHAUSTED", SM_ERESOURCE},
        {SM_EUNAVAILABLE, "UNAVAILABLE", SM_EUNAVAILABLE},
        {SM_ETIMEOUT, "DEADLINE_EXCEEDED", SM_ETIMEOUT},
        {SM_EDATALOSS, "DATA_LOSS", SM_EDATALOSS},
        {SM_EAUTH, "UNAUTHENTICATED", SM_EAUTH},
        {SM_EPERM, "PERMISSION_DENIED", SM_EPERM},
        {SM_ECANCELLED, "CANCELLED", SM_ECANCELLED},
        {SM_EUNIMPLEMENTED, "UNIMPLEMENTED", SM_EUNIMPLEMENTED},
        {SM_EIO, "INTERNAL", SM_EINTERNAL},
        {SM_EUNSUPPORTED, "INTERNAL", SM_EINTERNAL},
        {SM_EINTERNAL, "INTERNAL", SM_EINTERNAL},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        int st = sm_rpc_status_from_err(rows[i].e);
        ck_assert_str_eq(sm_rpc_status_name(st), rows[i].status);
        ck_assert_int_eq(sm_rpc_err_from_status(st), rows[i].back);
    }
    ck_assert_int_eq(sm_rpc_err_from_status(2 /* UNKNOWN */), SM_EINTERNAL);
    ck_assert_int_eq(sm_rpc_err_from_status(99), SM_EINTERNAL);
    ck_assert_str_eq(sm_rpc_status_name(99), "UNKNOWN");
}
END_TEST

START_TEST(test_checksum)
{
    size_t n = 3 * MIB + 17;
    uint8_t *p = malloc(n);
    fill(p, n, 9);
    sm_checksum *c = sm_checksum_create();
    ck_assert_ptr_nonnull(c);
    uint64_t empty = sm_checksum_digest(c);
    ck_assert_uint_eq(empty, sm_checksum_oneshot(NULL, 0));
    for (size_t off = 0; off < n; off += 100003)
        sm_checksum_update(c, p + off, off + 100003 <= n ? 100003 : n - off);
    ck_assert_uint_eq(sm_checksum_digest(c), sm_checksum_oneshot(p, n));
    p[n / 2] ^= 1;
    ck_assert_uint_ne(sm_checksum_digest(c), sm_checksum_oneshot(p, n));
    sm_checksum_reset(c);
    ck_assert_uint_eq(sm_checksum_digest(c), empty);
    sm_checksum_free(c);
    free(p);
}
END_TEST

/* One unary call of the echo service (text and a payload of size bytes)
 * and what it must give: the code, and the error text's start, a part of
 * it or all of it (NULL: not checked). */
typedef struct {
    const char *text;
    size_t size;
    int deadline_ms;
    sm_err want;
    const char *err_starts, *err_has, *err_is;
} unary_case;

/* Makes the calls of cases (n) on a fresh server, in order. */
static void unary_cases_run(const unary_case *cases, size_t n)
{
    fixture f;
    fx_start(&f, NULL, NULL);
    for (size_t k = 0; k < n; k++) {
        const unary_case *c = &cases[k];
        char err[256] = "";
        sm_err e = call_unary(f.ch, P_UNARY, c->text, c->size, c->deadline_ms, err, sizeof err);
        ck_assert_msg(e == c->want, "'%s': %s, not %s: %s", c->text, sm_err_name(e),
                      sm_err_name(c->want), err);
        ck_assert_msg(!c->err_starts || strstr(err, c->err_starts) == err, "%s", err);
        ck_assert_msg(!c->err_has || strstr(err, c->err_has) != NULL, "%s", err);
        if (c->err_is)
            ck_assert_str_eq(err, c->err_is);
    }
    fx_stop(&f);
}

#define UNARY_CASES_RUN(c) unary_cases_run((c), sizeof(c) / sizeof((c)[0]))

START_TEST(test_unary_roundtrip)
{
    static const unary_case c[] = {
        {"hello", 100, 5000, SM_OK},
        {"", 0, 5000, SM_OK},
        /* a handler that forgets its status gives INTERNAL, not a hang */
        {"none", 0, 5000, SM_EINTERNAL, "INTERNAL: "},
        /* deadline must be positive */
        {"x", 0, 0, SM_EINVAL},
    };
    UNARY_CASES_RUN(c);
}
END_TEST

START_TEST(test_large_payload)
{
    static const unary_case c[] = {
        {"big", 6 * MIB, 10000, SM_OK},
        {"big", SM_RPC_MAX_MSG + MIB, 10000, SM_ERESOURCE, NULL, "exceeds the limit"},
        {"bigreply", 0, 10000, SM_ERESOURCE, "RESOURCE_EXHAUSTED: "},
    };
    UNARY_CASES_RUN(c);
}
END_TEST

START_TEST(test_error_status)
{
    static const unary_case c[] = {
        {"fail", 10, 5000, SM_ENOTFOUND, NULL, NULL, "NOT_FOUND: array 17 does not exist"},
    };
    UNARY_CASES_RUN(c);
}
END_TEST

START_TEST(test_client_stream)
{
    char err[256];
    sm_rpc_stream *st;
    ck_assert_int_eq(sm_rpc_cstream_open(fx.ch, P_UPLOAD, 20000, &st, err, sizeof err), SM_OK);
    sm_checksum *ck = sm_checksum_create();
    Msg c = msg_data(MIB);
    for (uint32_t i = 0; i < 64; i++) {
        fill(c.data.data, MIB, i);
        sm_checksum_update(ck, c.data.data, MIB);
        c.seq = i;
        c.last = i == 63;
        c.checksum = c.last ? sm_checksum_digest(ck) : 0;
        ck_assert_msg(sm_rpc_cstream_send(st, &c.base, err, sizeof err) == SM_OK, "%s", err);
    }
    ProtobufCMessage *rep;
    ck_assert_msg(sm_rpc_cstream_finish(st, MSG_DESC, &rep, err, sizeof err) == SM_OK, "%s", err);
    Msg *r = (Msg *)rep;
    ck_assert_uint_eq(r->count, 64);
    ck_assert_uint_eq(r->size, 64);
    ck_assert(r->last);
    ck_assert_uint_eq(r->checksum, sm_checksum_digest(ck));
    sm_rpc_msg_free(rep);

    /* a corrupted chunk is caught by the checksum: DATA_LOSS with its sentence */
    ck_assert_int_eq(sm_rpc_cstream_open(fx.ch, P_UPLOAD, 20000, &st, err, sizeof err), SM_OK);
    c.seq = 0;
    c.last = 1;
    c.checksum = sm_checksum_digest(ck); /* wrong for this one chunk */
    ck_assert_int_eq(sm_rpc_cstream_send(st, &c.base, err, sizeof err), SM_OK);
    ck_assert_int_eq(sm_rpc_cstream_finish(st, MSG_DESC, &rep, err, sizeof err), SM_EDATALOSS);
    ck_assert_str_eq(err, "DATA_LOSS: checksum mismatch after 1 chunks");
    ck_assert_ptr_null(rep);

    /* chunks out of order: the server ends the call; the client's next sends
     * or its finish report INVALID_ARGUMENT */
    ck_assert_int_eq(sm_rpc_cstream_open(fx.ch, P_UPLOAD, 20000, &st, err, sizeof err), SM_OK);
    c.last = 0;
    c.seq = 5;
    sm_err e = SM_OK;
    for (int i = 0; i < 50 && e == SM_OK; i++)
        e = sm_rpc_cstream_send(st, &c.base, err, sizeof err);
    sm_err e2 = sm_rpc_cstream_finish(st, MSG_DESC, &rep, err, sizeof err);
    ck_assert(e == SM_OK || e == SM_EINVAL);
    ck_assert_int_eq(e2, SM_EINVAL);
    ck_assert_str_eq(err, "INVALID_ARGUMENT: chunk 5 arrived out of order (expected 0)");
    free(c.data.data);
    sm_checksum_free(ck);
}
END_TEST

START_TEST(test_server_stream)
{
    char err[256];
    Msg req = SHMAP__TEST__MSG__INIT;
    req.count = 64;
    req.size = MIB;
    sm_rpc_stream *st;
    ck_assert_int_eq(sm_rpc_sstream_open(fx.ch, P_DOWNLOAD, &req.base, 20000, &st, err, sizeof err),
                     SM_OK);
    sm_checksum *ck = sm_checksum_create();
    uint8_t *want = malloc(MIB);
    uint32_t n = 0;
    ProtobufCMessage *m;
    sm_err e;
    while ((e = sm_rpc_sstream_recv(st, MSG_DESC, &m, err, sizeof err)) == SM_OK && m) {
        Msg *c = (Msg *)m;
        ck_assert_uint_eq(c->seq, n);
        ck_assert_uint_eq(c->data.len, MIB);
        fill(want, MIB, n);
        ck_assert(memcmp(want, c->data.data, MIB) == 0);
        sm_checksum_update(ck, c->data.data, c->data.len);
        ck_assert_uint_eq(c->checksum, sm_checksum_digest(ck));
        ck_assert_int_eq(c->last, n == 63);
        n++;
        sm_rpc_msg_free(m);
    }
    ck_assert_msg(e == SM_OK, "%s", err);
    ck_assert_uint_eq(n, 64);
    /* after the end, recv keeps reporting the end */
    ck_assert_int_eq(sm_rpc_sstream_recv(st, MSG_DESC, &m, err, sizeof err), SM_OK);
    ck_assert_ptr_null(m);
    sm_rpc_stream_free(st);
    free(want);
    sm_checksum_free(ck);
}
END_TEST

START_TEST(test_bidi)
{
    char err[256];
    sm_rpc_stream *st;
    ck_assert_int_eq(sm_rpc_bidi_open(fx.ch, P_CHAT, 10000, &st, err, sizeof err), SM_OK);
    Msg c = msg_data(4096);
    for (uint32_t i = 0; i < 20; i++) {
        fill(c.data.data, 4096, i);
        c.seq = i;
        ck_assert_int_eq(sm_rpc_bidi_send(st, &c.base, err, sizeof err), SM_OK);
        ProtobufCMessage *m;
        ck_assert_int_eq(sm_rpc_bidi_recv(st, MSG_DESC, &m, err, sizeof err), SM_OK);
        ck_assert_ptr_nonnull(m);
        Msg *r = (Msg *)m;
        ck_assert_uint_eq(r->seq, 2 * i + 1);
        ck_assert(memcmp(r->data.data, c.data.data, 4096) == 0);
        sm_rpc_msg_free(m);
    }
    ck_assert_int_eq(sm_rpc_bidi_close_send(st, err, sizeof err), SM_OK);
    ProtobufCMessage *m;
    ck_assert_msg(sm_rpc_bidi_recv(st, MSG_DESC, &m, err, sizeof err) == SM_OK, "%s", err);
    ck_assert_ptr_null(m);
    sm_rpc_stream_free(st);
    free(c.data.data);
}
END_TEST

typedef struct {
    sm_rpc_stream *st;
    sm_err result;
    char err[256];
} bidi_sender;

static void *bidi_sender_main(void *arg)
{
    bidi_sender *b = arg;
    Msg c = SHMAP__TEST__MSG__INIT;
    c.text = "stop";
    b->result = sm_rpc_bidi_send(b->st, &c.base, b->err, sizeof b->err);
    c.text = "";
    c.data.len = MIB;
    c.data.data = calloc(1, MIB);
    for (int i = 0; i < 10000 && b->result == SM_OK; i++)
        b->result = sm_rpc_bidi_send(b->st, &c.base, b->err, sizeof b->err);
    free(c.data.data);
    return NULL;
}

/* The server ends a bidi call while the client's sender thread is blocked on
 * flow control: the receiver sees the status and the sender is released. */
START_TEST(test_bidi_server_ends)
{
    char err[256];
    bidi_sender b = {0};
    ck_assert_int_eq(sm_rpc_bidi_open(fx.ch, P_CHAT, 20000, &b.st, err, sizeof err), SM_OK);
    double t0 = sm_time_mono_ms();
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, bidi_sender_main, &b), 0);
    ProtobufCMessage *m;
    ck_assert_int_eq(sm_rpc_bidi_recv(b.st, MSG_DESC, &m, err, sizeof err), SM_EPRECONDITION);
    ck_assert_str_eq(err, "FAILED_PRECONDITION: chat stopped by request");
    pthread_join(th, NULL);
    ck_assert_int_eq(b.result, SM_EPRECONDITION);
    ck_assert_str_eq(b.err, "FAILED_PRECONDITION: chat stopped by request");
    ck_assert_double_lt(sm_time_mono_ms() - t0, 2000);
    sm_rpc_stream_free(b.st);
}
END_TEST

/* A message that does not parse as the method's request type. */
START_TEST(test_malformed)
{
    char err[256];
    /* field 1 is an enum (varint) here but a string in HealthCheckRequest */
    Grpc__Health__V1__HealthCheckResponse bad = GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__INIT;
    bad.status = GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING;
    ProtobufCMessage *rep;
    ck_assert_int_eq(
        sm_rpc_unary(fx.ch, P_HEALTH, &bad.base, MSG_DESC, &rep, 5000, err, sizeof err), SM_EINVAL);
    ck_assert_msg(strstr(err, "is not a valid grpc.health.v1.HealthCheckRequest") != NULL, "%s",
                  err);
    ck_assert_int_eq(call_unary(fx.ch, P_UNARY, "still there", 10, 5000, err, sizeof err), SM_OK);
}
END_TEST

START_TEST(test_unimplemented)
{
    char err[256];
    double t0 = sm_time_mono_ms();
    ck_assert_int_eq(call_unary(fx.ch, "/shmap.test.Echo/Nope", "x", 0, 10000, err, sizeof err),
                     SM_EUNIMPLEMENTED);
    ck_assert_msg(strstr(err, "UNIMPLEMENTED: method /shmap.test.Echo/Nope") == err, "%s", err);
    ck_assert_int_eq(call_unary(fx.ch, "/no.Such/Thing", "x", 0, 10000, err, sizeof err),
                     SM_EUNIMPLEMENTED);
    ck_assert_double_lt(sm_time_mono_ms() - t0, 1000);
    /* and a stream to an unknown method */
    sm_rpc_stream *st;
    ck_assert_int_eq(sm_rpc_cstream_open(fx.ch, "/no.Such/Stream", 10000, &st, err, sizeof err),
                     SM_OK);
    ProtobufCMessage *rep;
    ck_assert_int_eq(sm_rpc_cstream_finish(st, MSG_DESC, &rep, err, sizeof err), SM_EUNIMPLEMENTED);
    ck_assert_double_lt(sm_time_mono_ms() - t0, 2000);
}
END_TEST

START_TEST(test_token)
{
    fixture f;
    fx_start(&f, "s3cret", NULL);
    char err[256];
    ck_assert_int_eq(call_unary(f.ch, P_UNARY, "x", 0, 5000, err, sizeof err), SM_EAUTH);
    ck_assert_msg(strstr(err, "UNAUTHENTICATED: ") == err, "%s", err);
    /* health checks need no token (probes) */
    Grpc__Health__V1__HealthCheckRequest hreq = GRPC__HEALTH__V1__HEALTH_CHECK_REQUEST__INIT;
    ProtobufCMessage *hrep;
    ck_assert_int_eq(sm_rpc_unary(f.ch, P_HEALTH, &hreq.base,
                                  &grpc__health__v1__health_check_response__descriptor, &hrep, 5000,
                                  err, sizeof err),
                     SM_OK);
    sm_rpc_msg_free(hrep);
    const struct {
        const char *token;
        sm_err want;
    } rows[] = {{"wrong", SM_EAUTH}, {"s3cre", SM_EAUTH}, {"s3cret!", SM_EAUTH}, {"s3cret", SM_OK}};
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        sm_rpc_channel *ch;
        ck_assert_int_eq(sm_rpc_channel_create(f.target, rows[i].token, &ch, err, sizeof err),
                         SM_OK);
        ck_assert_int_eq(call_unary(ch, P_UNARY, "x", 10, 5000, err, sizeof err), rows[i].want);
        /* streams are checked too */
        sm_rpc_stream *st;
        ck_assert_int_eq(sm_rpc_bidi_open(ch, P_CHAT, 5000, &st, err, sizeof err), SM_OK);
        ck_assert_int_eq(sm_rpc_bidi_close_send(st, err, sizeof err), SM_OK);
        ProtobufCMessage *m;
        ck_assert_int_eq(sm_rpc_bidi_recv(st, MSG_DESC, &m, err, sizeof err), rows[i].want);
        ck_assert_ptr_null(m);
        sm_rpc_stream_free(st);
        sm_rpc_channel_free(ch);
    }
    fx_stop(&f);
}
END_TEST

START_TEST(test_health)
{
    char err[256];
    const struct {
        const char *service;
        sm_err want;
    } rows[] = {
        {"", SM_OK},
        {"shmap.test.Echo", SM_OK},
        {"grpc.health.v1.Health", SM_OK},
        {"shmap.test.Nope", SM_ENOTFOUND},
        {"shmap.test", SM_ENOTFOUND},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        Grpc__Health__V1__HealthCheckRequest req = GRPC__HEALTH__V1__HEALTH_CHECK_REQUEST__INIT;
        req.service = (char *)rows[i].service;
        ProtobufCMessage *rep;
        sm_err e = sm_rpc_unary(fx.ch, P_HEALTH, &req.base,
                                &grpc__health__v1__health_check_response__descriptor, &rep, 5000,
                                err, sizeof err);
        ck_assert_int_eq(e, rows[i].want);
        if (e == SM_OK) {
            ck_assert_int_eq(((Grpc__Health__V1__HealthCheckResponse *)rep)->status,
                             GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING);
            sm_rpc_msg_free(rep);
        } else {
            ck_assert_msg(strstr(err, "NOT_FOUND: ") == err, "%s", err);
        }
    }
}
END_TEST

START_TEST(test_deadline)
{
    char err[256];
    double t0 = sm_time_mono_ms();
    ck_assert_int_eq(call_unary(fx.ch, P_UNARY, "sleep", 0, 300, err, sizeof err), SM_ETIMEOUT);
    ck_assert_msg(strstr(err, "DEADLINE_EXCEEDED: ") == err, "%s", err);
    ck_assert_double_lt(sm_time_mono_ms() - t0, 2000);
    /* the handler notices the cancellation */
    ck_assert_int_eq(st_wait(&fx.st, &fx.st.cancelled, 1, 3000), 1);
}
END_TEST

START_TEST(test_client_cancel)
{
    char err[256];
    sm_rpc_stream *st;
    ck_assert_int_eq(sm_rpc_cstream_open(fx.ch, P_UPLOAD, 20000, &st, err, sizeof err), SM_OK);
    Msg c = msg_data(1000);
    for (uint32_t i = 0; i < 3; i++) {
        c.seq = i;
        ck_assert_int_eq(sm_rpc_cstream_send(st, &c.base, err, sizeof err), SM_OK);
    }
    ck_assert_int_eq(st_wait(&fx.st, &fx.st.active, 1, 3000), 1);
    sm_rpc_stream_free(st); /* cancels mid-stream */
    ck_assert_int_eq(st_wait(&fx.st, &fx.st.cancelled, 1, 3000), 1);

    /* a server stream abandoned by its client: the sending handler is cancelled */
    Msg req = SHMAP__TEST__MSG__INIT;
    req.text = "forever";
    req.size = 64 * 1024;
    ck_assert_int_eq(sm_rpc_sstream_open(fx.ch, P_DOWNLOAD, &req.base, 20000, &st, err, sizeof err),
                     SM_OK);
    ProtobufCMessage *m;
    ck_assert_int_eq(sm_rpc_sstream_recv(st, MSG_DESC, &m, err, sizeof err), SM_OK);
    ck_assert_ptr_nonnull(m);
    sm_rpc_msg_free(m);
    sm_rpc_stream_free(st);
    ck_assert_int_eq(st_wait(&fx.st, &fx.st.cancelled, 2, 3000), 2);

    /* the server keeps serving */
    ck_assert_int_eq(call_unary(fx.ch, P_UNARY, "still there", 10, 5000, err, sizeof err), SM_OK);
    free(c.data.data);
}
END_TEST

/* A loopback address where nobody listens (a port bound, never listened
 * on, then closed). */
static void dead_target(char *buf, size_t len)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&a, &al), 0);
    close(fd);
    snprintf(buf, len, "127.0.0.1:%d", ntohs(a.sin_port));
}

START_TEST(test_dead_port)
{
    sm_rpc_init();
    char target[64], err[256];
    dead_target(target, sizeof target);
    sm_rpc_channel *ch;
    ck_assert_int_eq(sm_rpc_channel_create(target, NULL, &ch, err, sizeof err), SM_OK);
    double t0 = sm_time_mono_ms();
    ck_assert_int_eq(call_unary(ch, P_UNARY, "x", 0, 10000, err, sizeof err), SM_EUNAVAILABLE);
    ck_assert_msg(strstr(err, "UNAVAILABLE: ") == err, "%s", err);
    sm_rpc_stream *st;
    ck_assert_int_eq(sm_rpc_cstream_open(ch, P_UPLOAD, 10000, &st, err, sizeof err),
                     SM_EUNAVAILABLE);
    ck_assert_double_lt(sm_time_mono_ms() - t0, 2000);
    ck_assert_int_eq(sm_rpc_channel_wait_ready(ch, 300, err, sizeof err), SM_EUNAVAILABLE);
    sm_rpc_channel_free(ch);

    /* binding a port that is taken fails cleanly; a server never started frees */
    sm_rpc_server *s1, *s2;
    sm_rpc_server_opts o = {.addr = "127.0.0.1:0"};
    ck_assert_int_eq(sm_rpc_server_create(&o, &s1, err, sizeof err), SM_OK);
    snprintf(target, sizeof target, "127.0.0.1:%d", sm_rpc_server_port(s1));
    o.addr = target;
    ck_assert_int_eq(sm_rpc_server_create(&o, &s2, err, sizeof err), SM_EUNAVAILABLE);
    ck_assert_ptr_null(s2);
    sm_rpc_server_free(s1);
    sm_rpc_shutdown();
}
END_TEST

/* The channel cache: one channel per address, shared; a target that does
 * not connect within ready_ms is refused until retry_ms have passed. */
START_TEST(test_chans)
{
    fixture f;
    fx_start(&f, NULL, NULL);
    char err[256] = "", dead[64];
    dead_target(dead, sizeof dead);

    sm_rpc_chans *c = sm_rpc_chans_create(NULL, NULL, 0, 0); /* no readiness check */
    sm_rpc_channel *c1 = NULL, *c2 = NULL, *c3 = NULL;
    ck_assert_int_eq(sm_rpc_chans_get(c, f.target, &c1, err, sizeof err), SM_OK);
    ck_assert_int_eq(sm_rpc_chans_get(c, f.target, &c2, err, sizeof err), SM_OK);
    ck_assert_ptr_eq(c1, c2);
    ck_assert_int_eq(call_unary(c1, P_UNARY, "cached", 0, 5000, err, sizeof err), SM_OK);
    ck_assert_int_eq(sm_rpc_chans_get(c, dead, &c3, err, sizeof err), SM_OK); /* lazy */
    ck_assert_ptr_ne(c3, c1);
    sm_rpc_chans_unreachable(c, dead); /* a no-op without ready_ms */
    int unreachable = -1;
    ck_assert_int_eq(sm_rpc_chans_count(c, &unreachable), 2);
    ck_assert_int_eq(unreachable, 0);
    sm_rpc_chans_free(c);

    c = sm_rpc_chans_create("tok", NULL, 300, 60000);
    ck_assert_int_eq(sm_rpc_chans_get(c, dead, &c3, err, sizeof err), SM_EUNAVAILABLE);
    ck_assert_ptr_null(c3);
    ck_assert_int_eq(sm_rpc_chans_get(c, dead, &c3, err, sizeof err), SM_EUNAVAILABLE);
    ck_assert_msg(strstr(err, "not tried again yet"), "%s", err); /* refused at once */
    ck_assert_int_eq(sm_rpc_chans_get(c, f.target, &c1, err, sizeof err), SM_OK);
    ck_assert_ptr_nonnull(c1);
    sm_rpc_chans_unreachable(c, f.target);
    ck_assert_int_eq(sm_rpc_chans_count(c, &unreachable), 2);
    ck_assert_int_eq(unreachable, 2);
    ck_assert_int_eq(sm_rpc_chans_get(c, f.target, &c2, err, sizeof err), SM_EUNAVAILABLE);
    sm_rpc_chans_free(c);

    c = sm_rpc_chans_create(NULL, NULL, 300, 0); /* retried at once */
    ck_assert_int_eq(sm_rpc_chans_get(c, f.target, &c1, err, sizeof err), SM_OK);
    sm_rpc_chans_unreachable(c, f.target);
    ck_assert_int_eq(sm_rpc_chans_get(c, f.target, &c2, err, sizeof err), SM_OK); /* reconnects */
    ck_assert_ptr_eq(c1, c2);
    ck_assert_int_eq(sm_rpc_chans_count(c, &unreachable), 1);
    ck_assert_int_eq(unreachable, 0);
    sm_rpc_chans_free(c);
    fx_stop(&f);
}
END_TEST

typedef struct {
    char addr[64];
    sm_rpc_server *srv;
} late_server;

static void *late_server_main(void *arg)
{
    late_server *ls = arg;
    usleep(400000);
    char err[256];
    sm_rpc_server_opts o = {.addr = ls->addr};
    if (sm_rpc_server_create(&o, &ls->srv, err, sizeof err) == SM_OK &&
        sm_rpc_server_start(ls->srv, err, sizeof err) != SM_OK) {
        sm_rpc_server_free(ls->srv);
        ls->srv = NULL;
    }
    return NULL;
}

/* Start-up rendezvous: a client waits for a server that starts later. */
START_TEST(test_wait_ready)
{
    sm_rpc_init();
    late_server ls = {0};
    dead_target(ls.addr, sizeof ls.addr);
    char err[256];
    sm_rpc_channel *ch;
    ck_assert_int_eq(sm_rpc_channel_create(ls.addr, NULL, &ch, err, sizeof err), SM_OK);
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, late_server_main, &ls), 0);
    double t0 = sm_time_mono_ms();
    ck_assert_msg(sm_rpc_channel_wait_ready(ch, 5000, err, sizeof err) == SM_OK, "%s", err);
    ck_assert_double_lt(sm_time_mono_ms() - t0, 3000);
    pthread_join(th, NULL);
    ck_assert_ptr_nonnull(ls.srv);
    Grpc__Health__V1__HealthCheckRequest req = GRPC__HEALTH__V1__HEALTH_CHECK_REQUEST__INIT;
    ProtobufCMessage *rep;
    ck_assert_int_eq(sm_rpc_unary(ch, P_HEALTH, &req.base,
                                  &grpc__health__v1__health_check_response__descriptor, &rep, 5000,
                                  err, sizeof err),
                     SM_OK);
    sm_rpc_msg_free(rep);
    sm_rpc_channel_free(ch);
    sm_rpc_server_free(ls.srv);
    sm_rpc_shutdown();
}
END_TEST

typedef struct {
    fixture *f;
    int server_stream;
    sm_err result;
    int *release; /* set by the main thread after the stop */
} stream_client;

static void *stream_client_main(void *arg)
{
    stream_client *sc = arg;
    char err[256];
    sm_rpc_stream *st;
    if (sc->server_stream) {
        Msg req = SHMAP__TEST__MSG__INIT;
        req.text = "forever";
        req.size = MIB;
        sc->result =
            sm_rpc_sstream_open(sc->f->ch, P_DOWNLOAD, &req.base, 20000, &st, err, sizeof err);
        if (sc->result)
            return NULL;
        ProtobufCMessage *m;
        /* read one chunk, then stop reading so the handler blocks in send */
        sc->result = sm_rpc_sstream_recv(st, MSG_DESC, &m, err, sizeof err);
        sm_rpc_msg_free(m);
        while (!__atomic_load_n(sc->release, __ATOMIC_ACQUIRE))
            usleep(2000);
        while ((sc->result = sm_rpc_sstream_recv(st, MSG_DESC, &m, err, sizeof err)) == SM_OK && m)
            sm_rpc_msg_free(m);
        sm_rpc_stream_free(st);
    } else {
        sc->result = sm_rpc_cstream_open(sc->f->ch, P_UPLOAD, 20000, &st, err, sizeof err);
        if (sc->result)
            return NULL;
        Msg c = msg_data(64 * 1024);
        sm_err e = SM_OK;
        for (uint32_t i = 0; i < 5000 && e == SM_OK; i++) {
            c.seq = i;
            e = sm_rpc_cstream_send(st, &c.base, err, sizeof err);
            usleep(2000);
        }
        ProtobufCMessage *rep;
        sc->result = sm_rpc_cstream_finish(st, MSG_DESC, &rep, err, sizeof err);
        sm_rpc_msg_free(rep);
        free(c.data.data);
    }
    return NULL;
}

START_TEST(test_stop_with_streams)
{
    int release = 0;
    stream_client sc[8];
    pthread_t th[8];
    for (int i = 0; i < 8; i++) {
        sc[i] = (stream_client){&fx, i % 2, SM_OK, &release};
        ck_assert_int_eq(pthread_create(&th[i], NULL, stream_client_main, &sc[i]), 0);
    }
    int act = st_wait(&fx.st, &fx.st.active, 8, 5000);
    ck_assert_int_eq(act, 8);
    usleep(100000);
    double t0 = sm_time_mono_ms();
    sm_rpc_server_stop(fx.srv);
    ck_assert_double_lt(sm_time_mono_ms() - t0, 2000);
    ck_assert_int_eq(fx.st.active, 0);
    __atomic_store_n(&release, 1, __ATOMIC_RELEASE);
    for (int i = 0; i < 8; i++) {
        pthread_join(th[i], NULL);
        ck_assert_msg(sc[i].result != SM_OK, "stream %d ended OK", i);
    }
}
END_TEST

typedef struct {
    fixture *f;
    int id;
    int ok;
} unary_client;

static void *unary_client_main(void *arg)
{
    unary_client *u = arg;
    char err[256], text[32];
    for (int i = 0; i < 50; i++) {
        snprintf(text, sizeof text, "t%d-%d", u->id, i);
        if (call_unary(u->f->ch, P_UNARY, text, (size_t)(i * 97 + u->id), 10000, err, sizeof err) ==
            SM_OK)
            u->ok++;
    }
    return NULL;
}

/* 8 threads x 50 calls on one channel; the server has only 3 handler
 * threads, so calls also wait in its queue. */
START_TEST(test_concurrent_unary)
{
    fixture f;
    fx_start_cap(&f, NULL, NULL, 3);
    unary_client u[8];
    pthread_t th[8];
    for (int i = 0; i < 8; i++) {
        u[i] = (unary_client){&f, i, 0};
        ck_assert_int_eq(pthread_create(&th[i], NULL, unary_client_main, &u[i]), 0);
    }
    for (int i = 0; i < 8; i++) {
        pthread_join(th[i], NULL);
        ck_assert_int_eq(u[i].ok, 50);
    }
    fx_stop(&f);
}
END_TEST

typedef struct {
    fixture *f;
    int *go;      /* set by the main thread: send the rest */
    int sent_one; /* the first chunk went out */
    sm_err result;
    uint32_t count;
} paused_upload;

/* An upload stream that sends one chunk, waits for *go, sends 9 more. */
static void *paused_upload_main(void *arg)
{
    paused_upload *p = arg;
    char err[256];
    sm_rpc_stream *st;
    if ((p->result = sm_rpc_cstream_open(p->f->ch, P_UPLOAD, 20000, &st, err, sizeof err)))
        return NULL;
    sm_checksum *ck = sm_checksum_create();
    Msg c = msg_data(256 * 1024);
    sm_err e = SM_OK;
    for (uint32_t i = 0; i < 10 && e == SM_OK; i++) {
        fill(c.data.data, c.data.len, i);
        sm_checksum_update(ck, c.data.data, c.data.len);
        c.seq = i;
        c.last = i == 9;
        c.checksum = c.last ? sm_checksum_digest(ck) : 0;
        e = sm_rpc_cstream_send(st, &c.base, err, sizeof err);
        if (i == 0) {
            __atomic_store_n(&p->sent_one, 1, __ATOMIC_RELEASE);
            while (!__atomic_load_n(p->go, __ATOMIC_ACQUIRE))
                usleep(1000);
        }
    }
    ProtobufCMessage *rep = NULL;
    p->result = sm_rpc_cstream_finish(st, MSG_DESC, &rep, err, sizeof err);
    if (!p->result && !e) {
        Msg *r = (Msg *)rep;
        p->count = r->last && r->checksum == sm_checksum_digest(ck) ? r->count : 0;
    }
    sm_rpc_msg_free(rep);
    free(c.data.data);
    sm_checksum_free(ck);
    return NULL;
}

/* Stream handlers waiting for their next message (the first of them on the
 * thread that drains the queue, which then routes completions itself) do
 * not hold up other calls, even after a quiet spell in which no idle thread
 * watches the queue: unary calls are served promptly meanwhile, with the
 * handler threads at their cap, and the streams then end intact. */
START_TEST(test_calls_during_streams)
{
    fixture f;
    fx_start_cap(&f, NULL, NULL, 3);
    char err[256];
    int go = 0;
    paused_upload p[2];
    pthread_t th[2];
    for (int round = 0; round < 3; round++) {
        __atomic_store_n(&go, 0, __ATOMIC_RELEASE);
        for (int i = 0; i < 2; i++) {
            p[i] = (paused_upload){&f, &go, 0, SM_EINTERNAL, 0};
            ck_assert_int_eq(pthread_create(&th[i], NULL, paused_upload_main, &p[i]), 0);
        }
        ck_assert_int_eq(st_wait(&f.st, &f.st.active, 2, 5000), 2);
        for (int i = 0; i < 2; i++)
            while (!__atomic_load_n(&p[i].sent_one, __ATOMIC_ACQUIRE))
                usleep(1000);
        usleep(300 * 1000); /* quiet: no idle thread watches the queue */
        for (int k = 0; k < 20; k++) {
            char text[32];
            snprintf(text, sizeof text, "r%d-%d", round, k);
            double t0 = sm_time_mono_ms();
            sm_err e = call_unary(f.ch, P_UNARY, text, (size_t)k * 1000, 5000, err, sizeof err);
            ck_assert_msg(e == SM_OK, "call %d of round %d: %s", k, round, err);
            ck_assert_msg(sm_time_mono_ms() - t0 < 1000, "call %d of round %d took %.0f ms", k,
                          round, sm_time_mono_ms() - t0);
        }
        __atomic_store_n(&go, 1, __ATOMIC_RELEASE);
        for (int i = 0; i < 2; i++) {
            pthread_join(th[i], NULL);
            ck_assert_msg(p[i].result == SM_OK, "stream %d ended %s", i, sm_err_name(p[i].result));
            ck_assert_uint_eq(p[i].count, 10);
        }
        for (double end = sm_time_mono_ms() + 5000;
             __atomic_load_n(&f.st.active, __ATOMIC_ACQUIRE) > 0 && sm_time_mono_ms() < end;)
            usleep(1000); /* the handlers count down after their reply */
        ck_assert_int_eq(__atomic_load_n(&f.st.active, __ATOMIC_ACQUIRE), 0);
    }
    fx_stop(&f);
}
END_TEST

typedef struct {
    fixture *f;
    sm_err e;
    double took_ms;
} hold_client;

static void *hold_main(void *arg)
{
    hold_client *h = arg;
    char err[256];
    double t0 = sm_time_mono_ms();
    h->e = call_unary(h->f->ch, P_UNARY, "hold", 0, 20000, err, sizeof err);
    h->took_ms = sm_time_mono_ms() - t0;
    return NULL;
}

/* A handler that blocks without saying so (the first call after a quiet
 * spell runs on the thread that drains the queue) does not hold up the
 * server: the next call, the one that releases it, is served within
 * milliseconds, on the same channel and on a new one. */
START_TEST(test_blocked_handler)
{
    char err[256];
    for (int round = 0; round < 2; round++) {
        usleep(300 * 1000); /* quiet: no thread watches the queue */
        pthread_mutex_lock(&fx.st.mu);
        fx.st.released = 0;
        fx.st.held = 0;
        pthread_mutex_unlock(&fx.st.mu);
        hold_client h = {&fx, SM_EINTERNAL, 0};
        pthread_t th;
        ck_assert_int_eq(pthread_create(&th, NULL, hold_main, &h), 0);
        ck_assert_int_eq(st_wait(&fx.st, &fx.st.held, 1, 5000), 1);
        sm_rpc_channel *ch = fx.ch, *other = NULL;
        if (round == 1) {
            ck_assert_int_eq(sm_rpc_channel_create(fx.target, NULL, &other, err, sizeof err),
                             SM_OK);
            ch = other;
        }
        double t0 = sm_time_mono_ms();
        ck_assert_msg(call_unary(ch, P_UNARY, "release", 0, 5000, err, sizeof err) == SM_OK, "%s",
                      err);
        double took = sm_time_mono_ms() - t0;
        pthread_join(th, NULL);
        sm_rpc_channel_free(other);
        ck_assert_msg(h.e == SM_OK, "the held call ended %s", sm_err_name(h.e));
        ck_assert_msg(took < 1000, "round %d: the releasing call took %.0f ms", round, took);
        ck_assert_msg(h.took_ms < 2000, "round %d: the held call took %.0f ms", round, h.took_ms);
    }
}
END_TEST

int main(void)
{
    /* SM_TEST_ONLY=name runs one test (debugging) */
    Suite *s = SUITE_CASE(suite_create("rpc"), "rpc", 30, NULL, {test_status_mapping},
                          {test_checksum}, {test_unary_roundtrip}, {test_large_payload},
                          {test_error_status}, {test_token}, {test_dead_port}, {test_chans},
                          {test_wait_ready}, {test_concurrent_unary}, {test_calls_during_streams});
    /* the tests on the default server of the fixture */
    SUITE_CASE(s, "server", 30, SUITE_CHECKED(fx_setup, fx_teardown), {test_client_stream},
               {test_server_stream}, {test_bidi}, {test_bidi_server_ends}, {test_malformed},
               {test_unimplemented}, {test_health}, {test_deadline}, {test_client_cancel},
               {test_stop_with_streams}, {test_blocked_handler});
    return suite_main(s);
}
