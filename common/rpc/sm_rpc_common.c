/* sm_rpc_common: lifecycle, status mapping, message packing. */
#include <malloc.h>
#include <stdlib.h>
#include <string.h>

#include "sm_rpc_internal.h"

/* Multi-MiB messages are allocated and freed on every chunk: keep them off
 * mmap (no map/unmap and page faults per message), but cap the malloc
 * arenas. gRPC and the handler pools run many threads; with one arena per
 * thread each one keeps its own freed chunks, and a relaying coordinator's
 * peak RSS grew with the size of the array it relayed (556 MiB for a 1 GiB
 * upload, against 150 MiB with two arenas). MALLOC_ARENA_MAX in the
 * environment still overrides the cap. */
void sm_rpc_init(void)
{
    mallopt(M_MMAP_THRESHOLD, 64 << 20);
    mallopt(M_TRIM_THRESHOLD, 128 << 20);
    if (!getenv("MALLOC_ARENA_MAX"))
        mallopt(M_ARENA_MAX, 2);
    grpc_init();
}

void sm_rpc_shutdown(void)
{
    grpc_shutdown();
}

int sm_rpc_status_from_err(sm_err e)
{
    switch (e) {
    case SM_OK:
        return GRPC_STATUS_OK;
    case SM_EINVAL:
    case SM_EFORMAT:
        return GRPC_STATUS_INVALID_ARGUMENT;
    case SM_EOVERFLOW:
        return GRPC_STATUS_OUT_OF_RANGE;
    case SM_ENOTFOUND:
        return GRPC_STATUS_NOT_FOUND;
    case SM_EEXIST:
        return GRPC_STATUS_ALREADY_EXISTS;
    case SM_EPRECONDITION:
        return GRPC_STATUS_FAILED_PRECONDITION;
    case SM_ERESOURCE:
    case SM_ENOMEM:
        return GRPC_STATUS_RESOURCE_EXHAUSTED;
    case SM_EUNAVAILABLE:
        return GRPC_STATUS_UNAVAILABLE;
    case SM_ETIMEOUT:
        return GRPC_STATUS_DEADLINE_EXCEEDED;
    case SM_EDATALOSS:
        return GRPC_STATUS_DATA_LOSS;
    case SM_EAUTH:
        return GRPC_STATUS_UNAUTHENTICATED;
    case SM_EPERM:
        return GRPC_STATUS_PERMISSION_DENIED;
    case SM_ECANCELLED:
        return GRPC_STATUS_CANCELLED;
    case SM_EUNIMPLEMENTED:
        return GRPC_STATUS_UNIMPLEMENTED;
    default:
        return GRPC_STATUS_INTERNAL;
    }
}

sm_err sm_rpc_err_from_status(int status)
{
    switch (status) {
    case GRPC_STATUS_OK:
        return SM_OK;
    case GRPC_STATUS_CANCELLED:
        return SM_ECANCELLED;
    case GRPC_STATUS_INVALID_ARGUMENT:
        return SM_EINVAL;
    case GRPC_STATUS_DEADLINE_EXCEEDED:
        return SM_ETIMEOUT;
    case GRPC_STATUS_NOT_FOUND:
        return SM_ENOTFOUND;
    case GRPC_STATUS_ALREADY_EXISTS:
        return SM_EEXIST;
    case GRPC_STATUS_PERMISSION_DENIED:
        return SM_EPERM;
    case GRPC_STATUS_RESOURCE_EXHAUSTED:
        return SM_ERESOURCE;
    case GRPC_STATUS_FAILED_PRECONDITION:
    case GRPC_STATUS_ABORTED:
        return SM_EPRECONDITION;
    case GRPC_STATUS_OUT_OF_RANGE:
        return SM_EOVERFLOW;
    case GRPC_STATUS_UNIMPLEMENTED:
        return SM_EUNIMPLEMENTED;
    case GRPC_STATUS_UNAVAILABLE:
        return SM_EUNAVAILABLE;
    case GRPC_STATUS_DATA_LOSS:
        return SM_EDATALOSS;
    case GRPC_STATUS_UNAUTHENTICATED:
        return SM_EAUTH;
    default: /* UNKNOWN, INTERNAL, anything new */
        return SM_EINTERNAL;
    }
}

const char *sm_rpc_status_name(int status)
{
    static const char *const names[] = {
        "OK",
        "CANCELLED",
        "UNKNOWN",
        "INVALID_ARGUMENT",
        "DEADLINE_EXCEEDED",
        "NOT_FOUND",
        "ALREADY_EXISTS",
        "PERMISSION_DENIED",
        "RESOURCE_EXHAUSTED",
        "FAILED_PRECONDITION",
        "ABORTED",
        "OUT_OF_RANGE",
        "UNIMPLEMENTED",
        "INTERNAL",
        "UNAVAILABLE",
        "DATA_LOSS",
        "UNAUTHENTICATED",
    };
    if (status < 0 || (size_t)status >= sizeof names / sizeof names[0])
        return "UNKNOWN";
    return names[status];
}

void sm_rpc_msg_free(ProtobufCMessage *msg)
{
    if (msg)
        protobuf_c_message_free_unpacked(msg, NULL);
}

sm_err sm_rpc_pack(const ProtobufCMessage *msg, const char *what, grpc_byte_buffer **out, char *err,
                   size_t errlen)
{
    *out = NULL;
    size_t n = protobuf_c_message_get_packed_size(msg);
    if (n > SM_RPC_MAX_MSG)
        return sm_fail(err, errlen, SM_ERESOURCE,
                       "%s message %s of %zu bytes exceeds the limit of %d bytes", what,
                       msg->descriptor->name, n, SM_RPC_MAX_MSG);
    uint8_t *b = malloc(n ? n : 1);
    if (!b)
        return sm_fail(err, errlen, SM_ENOMEM, "cannot allocate %zu bytes for a %s message", n,
                       what);
    protobuf_c_message_pack(msg, b);
    grpc_slice s = grpc_slice_new(b, n, free); /* the slice owns b */
    *out = grpc_raw_byte_buffer_create(&s, 1);
    grpc_slice_unref(s);
    return SM_OK;
}

sm_err sm_rpc_unpack(grpc_byte_buffer *bb, const ProtobufCMessageDescriptor *desc, const char *what,
                     ProtobufCMessage **out, char *err, size_t errlen)
{
    *out = NULL;
    grpc_byte_buffer_reader r;
    if (!grpc_byte_buffer_reader_init(&r, bb))
        return sm_fail(err, errlen, SM_EFORMAT, "%s message could not be read", what);
    grpc_slice all = grpc_byte_buffer_reader_readall(&r);
    grpc_byte_buffer_reader_destroy(&r);
    *out = protobuf_c_message_unpack(desc, NULL, GRPC_SLICE_LENGTH(all), GRPC_SLICE_START_PTR(all));
    size_t n = GRPC_SLICE_LENGTH(all);
    grpc_slice_unref(all);
    if (!*out)
        return sm_fail(err, errlen, SM_EFORMAT, "%s message of %zu bytes is not a valid %s", what,
                       n, desc->name);
    return SM_OK;
}

void sm_rpc_fill_args(grpc_arg *args, size_t *n)
{
    size_t i = 0;
    args[i].type = GRPC_ARG_INTEGER;
    args[i].key = GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH;
    args[i++].value.integer = SM_RPC_MAX_MSG;
    args[i].type = GRPC_ARG_INTEGER;
    args[i].key = GRPC_ARG_MAX_SEND_MESSAGE_LENGTH;
    args[i++].value.integer = SM_RPC_MAX_MSG;
    *n = i;
}

gpr_timespec sm_rpc_deadline(int ms)
{
    return gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC), gpr_time_from_millis(ms, GPR_TIMESPAN));
}
