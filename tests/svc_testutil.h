/* Helpers shared by the Check suites of common/rpc that serve and call on
 * loopback inside one process (tests/test_rpc_*.c): a server on a free
 * port, the channel to it once it is started, the receive and the reply of
 * handlers of the test service (proto/shmap_test.proto's Msg), and
 * comparisons of shapes and boxes. Everything here is static inline;
 * helpers that assert do so with Check. */
#ifndef SM_SVC_TESTUTIL_H
#define SM_SVC_TESTUTIL_H

#include <check.h>
#include <stdio.h>

#include "sm_checksum.h"
#include "sm_rpc.h"
#include "sm_rpc_proto.h"
#include "sm_svc.h"

#define MSG_DESC (&shmap__test__msg__descriptor)

typedef Shmap__Test__Msg Msg;

/* A plaintext server without a token on a free loopback port, not started
 * (add its methods, then svt_start); asserts it is made. */
static inline sm_rpc_server *svt_server(void)
{
    sm_rpc_server *srv = NULL;
    char err[256];
    sm_rpc_server_opts o = {.addr = "127.0.0.1:0"};
    ck_assert_msg(sm_rpc_server_create(&o, &srv, err, sizeof err) == SM_OK, "%s", err);
    return srv;
}

/* Starts srv and returns a channel without a token to it (the caller frees
 * it, before the server); asserts both. */
static inline sm_rpc_channel *svt_start(sm_rpc_server *srv)
{
    sm_rpc_channel *ch = NULL;
    char err[256], target[64];
    ck_assert_msg(sm_rpc_server_start(srv, err, sizeof err) == SM_OK, "%s", err);
    snprintf(target, sizeof target, "127.0.0.1:%d", sm_rpc_server_port(srv));
    ck_assert_msg(sm_rpc_channel_create(target, NULL, &ch, err, sizeof err) == SM_OK, "%s", err);
    return ch;
}

/* In a handler: the request of call (the caller frees it), or NULL after
 * finishing the call with the error of the receive. */
static inline ProtobufCMessage *svt_recv(sm_rpc_call *call)
{
    ProtobufCMessage *m = NULL;
    char err[256];
    sm_err e = sm_rpc_recv(call, &m, err, sizeof err);
    if (e)
        sm_rpc_finish(call, e, err, NULL);
    return e ? NULL : m;
}

/* Finishes an upload call: with e and err when it failed, else with a Msg
 * of count chunks received, the checksum ck of their data, whether the
 * last came (last) and the size (MiB). */
static inline void svt_upload_finish(sm_rpc_call *call, sm_err e, const char *err, uint32_t count,
                                     sm_checksum *ck, int last, uint32_t size)
{
    if (e) {
        sm_rpc_finish(call, e, err, NULL);
        return;
    }
    Msg rep = SHMAP__TEST__MSG__INIT;
    rep.count = count;
    rep.checksum = sm_checksum_digest(ck);
    rep.last = last;
    rep.size = size;
    sm_rpc_finish(call, SM_OK, NULL, &rep.base);
}

static inline void shape_same(const sm_shape *a, const sm_shape *b)
{
    ck_assert_int_eq(a->rank, b->rank);
    for (int d = 0; d < a->rank; d++)
        ck_assert_int_eq(a->dims[d], b->dims[d]);
}

static inline void index_same(const sm_index *a, const sm_index *b)
{
    ck_assert_int_eq(a->rank, b->rank);
    for (int d = 0; d < a->rank; d++) {
        ck_assert_int_eq(a->r[d].start, b->r[d].start);
        ck_assert_int_eq(a->r[d].stop, b->r[d].stop);
    }
}

#endif
