/* sm_rpc_common: lifecycle, status mapping, message packing. */
#include <inttypes.h>
#include <malloc.h>
#include <stdlib.h>
#include <string.h>

#include "sm_rpc_internal.h"

/* Multi-MiB messages are allocated and freed on every chunk: keep them off
 * mmap (no map/unmap and page faults per message), and keep up to 512 MiB
 * of freed heap instead of trimming it, so the multi-MiB blocks of
 * successive jobs reuse memory that is already mapped (a first touch costs
 * a page fault per 4 KiB, slower than filling the page); but cap the malloc
 * arenas. gRPC and the handler pools run many threads; with one arena per
 * thread each one keeps its own freed chunks, and a relaying coordinator's
 * peak RSS grew with the size of the array it relayed (556 MiB for a 1 GiB
 * upload, against 150 MiB with two arenas). MALLOC_ARENA_MAX in the
 * environment still overrides the cap. */
void sm_rpc_init(void)
{
    mallopt(M_MMAP_THRESHOLD, 64 << 20);
    mallopt(M_TRIM_THRESHOLD, 512 << 20);
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

/* ---- one-copy unpack of messages with a large bytes field ----------------
 * readall copies the whole slice chain into one buffer and protobuf-c's
 * unpack copies each bytes field out of it again. For large messages the
 * top-level fields are scanned straight from the slices instead: every
 * occurrence of a singular bytes field is copied once into its own malloc'd
 * buffer, the other fields into a small side buffer that protobuf-c unpacks;
 * the bytes field is then set in the unpacked message, where
 * protobuf_c_message_free_unpacked (default allocator: free) releases it.
 * Anything unusual falls back to readall + unpack. */

/* Below this packed size the plain path is as fast. */
#define SM_RPC_SPLIT_MIN (64 << 10)

typedef struct {
    grpc_byte_buffer_reader r;
    const uint8_t *p, *end;
} sm_rpc_cur;

static int sm_rpc_cur_fill(sm_rpc_cur *c)
{
    grpc_slice *s;
    while (c->p == c->end) {
        if (!grpc_byte_buffer_reader_peek(&c->r, &s))
            return 0;
        c->p = GRPC_SLICE_START_PTR(*s);
        c->end = c->p + GRPC_SLICE_LENGTH(*s);
    }
    return 1;
}

/* Reads a varint into *v, appending its bytes to raw (room for 10) when
 * raw is not NULL; returns its length in bytes, 0 if malformed or cut. */
static size_t sm_rpc_cur_varint(sm_rpc_cur *c, uint64_t *v, uint8_t *raw)
{
    *v = 0;
    for (size_t i = 0; i < 10; i++) {
        if (!sm_rpc_cur_fill(c))
            return 0;
        uint8_t b = *c->p++;
        if (raw)
            raw[i] = b;
        *v |= (uint64_t)(b & 0x7f) << (7 * i);
        if (!(b & 0x80))
            return i + 1;
    }
    return 0;
}

/* Copies n bytes to dst; 0 if the buffer ends first. */
static int sm_rpc_cur_copy(sm_rpc_cur *c, uint8_t *dst, size_t n)
{
    while (n) {
        if (!sm_rpc_cur_fill(c))
            return 0;
        size_t k = (size_t)(c->end - c->p);
        if (k > n)
            k = n;
        memcpy(dst, c->p, k);
        dst += k;
        c->p += k;
        n -= k;
    }
    return 1;
}

/* The split path. SM_OK with *out set, or SM_OK with *out NULL when the
 * caller should use the plain path (also for malformed input, so that
 * protobuf-c reports it); SM_ENOMEM. */
static sm_err sm_rpc_unpack_split(grpc_byte_buffer *bb, size_t total,
                                  const ProtobufCMessageDescriptor *desc, ProtobufCMessage **out,
                                  char *err, size_t errlen)
{
    sm_rpc_cur c = {.p = NULL, .end = NULL};
    const ProtobufCFieldDescriptor *bf = NULL; /* the extracted field */
    uint8_t *data = NULL, *rest = NULL;
    size_t dlen = 0, nrest = 0, cap = 0;
    sm_err e = SM_OK;
    *out = NULL;
    if (!grpc_byte_buffer_reader_init(&c.r, bb))
        return SM_OK;
    while (sm_rpc_cur_fill(&c)) {
        uint8_t hdr[20];
        uint64_t tag, len = 0;
        size_t nt = sm_rpc_cur_varint(&c, &tag, hdr), nl = 0;
        if (!nt || tag >> 3 == 0 || tag >> 3 > UINT32_MAX)
            goto plain;
        unsigned wt = (unsigned)(tag & 7);
        if (wt == 0) {
            nl = sm_rpc_cur_varint(&c, &len, hdr + nt);
            if (!nl)
                goto plain;
            len = 0;
        } else if (wt == 1 || wt == 5) {
            len = wt == 1 ? 8 : 4;
        } else if (wt == 2) {
            nl = sm_rpc_cur_varint(&c, &len, hdr + nt);
            if (!nl)
                goto plain;
        } else {
            goto plain; /* groups: let protobuf-c decide */
        }
        if (len > total)
            goto plain;
        const ProtobufCFieldDescriptor *f =
            protobuf_c_message_descriptor_get_field(desc, (unsigned)(tag >> 3));
        if (wt == 2 && f && f->type == PROTOBUF_C_TYPE_BYTES &&
            f->label != PROTOBUF_C_LABEL_REPEATED && !(f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) &&
            (!bf || bf == f)) {
            /* last occurrence wins, as in protobuf-c */
            uint8_t *d = malloc(len ? len : 1);
            if (!d) {
                e = sm_fail(err, errlen, SM_ENOMEM, "cannot allocate %" PRIu64 " bytes for %s.%s",
                            len, desc->name, f->name);
                goto done;
            }
            if (!sm_rpc_cur_copy(&c, d, len)) {
                free(d);
                goto plain;
            }
            free(data);
            bf = f;
            data = d;
            dlen = len;
            continue;
        }
        size_t need = nrest + nt + nl + len;
        if (need > cap) {
            size_t ncap = cap ? cap : 256;
            while (ncap < need)
                ncap *= 2;
            uint8_t *nr = realloc(rest, ncap);
            if (!nr) {
                e = sm_fail(err, errlen, SM_ENOMEM, "cannot allocate %zu bytes for a message",
                            ncap);
                goto done;
            }
            rest = nr;
            cap = ncap;
        }
        memcpy(rest + nrest, hdr, nt + nl);
        nrest += nt + nl;
        if (!sm_rpc_cur_copy(&c, rest + nrest, len))
            goto plain;
        nrest += len;
    }
    if (!bf)
        goto plain;
    *out = protobuf_c_message_unpack(desc, NULL, nrest, rest ? rest : (const uint8_t *)"");
    if (!*out)
        goto plain;
    ProtobufCBinaryData *bd = (ProtobufCBinaryData *)((char *)*out + bf->offset);
    bd->data = data;
    bd->len = dlen;
    if (bf->label == PROTOBUF_C_LABEL_OPTIONAL)
        *(protobuf_c_boolean *)((char *)*out + bf->quantifier_offset) = 1;
    data = NULL;
    goto done;
plain:
    *out = NULL;
done:
    free(data);
    free(rest);
    grpc_byte_buffer_reader_destroy(&c.r);
    return e;
}

sm_err sm_rpc_unpack(grpc_byte_buffer *bb, const ProtobufCMessageDescriptor *desc, const char *what,
                     ProtobufCMessage **out, char *err, size_t errlen)
{
    *out = NULL;
    size_t total = grpc_byte_buffer_length(bb);
    if (total >= SM_RPC_SPLIT_MIN) {
        sm_err e = sm_rpc_unpack_split(bb, total, desc, out, err, errlen);
        if (e || *out)
            return e;
    }
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
