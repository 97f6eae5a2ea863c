/* comm_grpc_net: the transport of comm_grpc over Worker.Exchange streams
 * (sm_svc_coll_*), on the channels of the worker's peer cache, with
 * Negotiate as the liveness probe. */
#include "comm_grpc.h"
#include "peer.h"

static sm_err sm_cgn_open(void *user, const char *address, int timeout_ms, void **stream, char *err,
                          size_t errlen)
{
    sm_rpc_channel *ch;
    sm_err e = sm_peer_channel(user, address, &ch, err, errlen);
    if (e)
        return e;
    return sm_svc_coll_open(ch, timeout_ms, (sm_svc_coll_stream **)stream, err, errlen);
}

static sm_err sm_cgn_send(void *stream, const sm_svc_coll_msg *m, char *err, size_t errlen)
{
    return sm_svc_coll_send(stream, m, err, errlen);
}

static sm_err sm_cgn_finish(void *stream, char *err, size_t errlen)
{
    return sm_svc_coll_finish(stream, NULL, err, errlen);
}

static void sm_cgn_abort(void *stream)
{
    sm_svc_coll_abort(stream);
}

static sm_err sm_cgn_probe(void *user, const char *address, int timeout_ms, char *err,
                           size_t errlen)
{
    sm_rpc_channel *ch;
    uint32_t version;
    sm_err e = sm_peer_channel(user, address, &ch, err, errlen);
    if (e)
        return e;
    return sm_svc_negotiate(ch, 1, "shmap-worker", &version, NULL, 0, timeout_ms, err, errlen);
}

const sm_comm_grpc_transport sm_comm_grpc_net = {
    .open = sm_cgn_open,
    .send = sm_cgn_send,
    .finish = sm_cgn_finish,
    .abort = sm_cgn_abort,
    .probe = sm_cgn_probe,
};
