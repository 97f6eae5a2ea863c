/* sm_rpc_wire: messages to and from gRPC byte buffers (sm_rpc_internal.h):
 * packing, with a data message's payload referenced rather than copied, and
 * unpacking, where large messages are scanned field by field in the
 * protobuf wire format straight from the buffer's slices. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sm_array.h"
#include "sm_rpc_internal.h"

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

static void sm_rpc_release_none(void *arg)
{
    (void)arg;
}

sm_err sm_rpc_pack_data(const ProtobufCMessage *msg, uint32_t field, const void *data, size_t len,
                        sm_rpc_release_fn release, void *arg, const char *what,
                        grpc_byte_buffer **out, char *err, size_t errlen)
{
    *out = NULL;
    if (len == 0) {
        if (release)
            release(arg);
        return sm_rpc_pack(msg, what, out, err, errlen);
    }
    if (!release)
        release = sm_rpc_release_none;
    size_t n = protobuf_c_message_get_packed_size(msg);
    uint8_t *b = malloc(n + 20);
    if (!b) {
        release(arg);
        return sm_fail(err, errlen, SM_ENOMEM, "cannot allocate %zu bytes for a %s message", n,
                       what);
    }
    protobuf_c_message_pack(msg, b);
    /* the payload field last: a parser takes fields in any order */
    uint64_t v[2] = {(uint64_t)field << 3 | 2, len};
    for (int i = 0; i < 2; i++) {
        for (; v[i] >= 0x80; v[i] >>= 7)
            b[n++] = (uint8_t)(v[i] | 0x80);
        b[n++] = (uint8_t)v[i];
    }
    if (len > SM_RPC_MAX_MSG || n + len > SM_RPC_MAX_MSG) {
        free(b);
        release(arg);
        return sm_fail(err, errlen, SM_ERESOURCE,
                       "%s message %s of %zu bytes exceeds the limit of %d bytes", what,
                       msg->descriptor->name, n + len, SM_RPC_MAX_MSG);
    }
    grpc_slice s[2];
    s[0] = grpc_slice_new(b, n, free); /* the slice owns b */
    s[1] = grpc_slice_new_with_user_data((void *)data, len, release, arg);
    *out = grpc_raw_byte_buffer_create(s, 2);
    grpc_slice_unref(s[0]);
    grpc_slice_unref(s[1]); /* the byte buffer holds the last reference */
    return SM_OK;
}

/* ---- unpack without copying a large bytes field twice --------------------
 * readall copies the whole slice chain into one buffer and protobuf-c's
 * unpack copies each bytes field out of it again. For large messages the
 * top-level fields are scanned straight from the slices instead: the other
 * fields go to a small side buffer that protobuf-c unpacks, and the pieces
 * of one singular bytes field (its last occurrence, as in protobuf-c) are
 * only located in the slices, then copied once to their destination: their
 * own malloc'd block (sm_rpc_unpack), or where a sink says
 * (sm_rpc_unpack_data). Anything unusual falls back to readall + unpack. */

/* Below this packed size the plain path is as fast. */
#define SM_RPC_SPLIT_MIN (64 << 10)

typedef struct {
    const uint8_t *p;
    size_t n;
} sm_rpc_piece;

typedef struct {
    grpc_byte_buffer_reader r;
    const uint8_t *p, *end;
    /* results of the scan */
    uint8_t *rest; /* every other field, in wire format */
    size_t nrest, cap;
    const ProtobufCFieldDescriptor *bf; /* the field located in pieces */
    sm_rpc_piece *pc;
    size_t npc, pccap, dlen;
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

/* Copies n bytes to dst (NULL: records them as pieces); 0 if the buffer
 * ends first, -1 if out of memory. */
static int sm_rpc_cur_take(sm_rpc_cur *c, uint8_t *dst, size_t n)
{
    while (n) {
        if (!sm_rpc_cur_fill(c))
            return 0;
        size_t k = (size_t)(c->end - c->p);
        if (k > n)
            k = n;
        if (dst) {
            memcpy(dst, c->p, k);
            dst += k;
        } else {
            if (c->npc == c->pccap) {
                size_t ncap = c->pccap ? 2 * c->pccap : 64;
                sm_rpc_piece *np = realloc(c->pc, ncap * sizeof *np);
                if (!np)
                    return -1;
                c->pc = np;
                c->pccap = ncap;
            }
            c->pc[c->npc++] = (sm_rpc_piece){c->p, k};
        }
        c->p += k;
        n -= k;
    }
    return 1;
}

/* Whether f is a bytes field that can be taken out of a message. */
static int sm_rpc_field_splits(const ProtobufCFieldDescriptor *f)
{
    return f && f->type == PROTOBUF_C_TYPE_BYTES && f->label != PROTOBUF_C_LABEL_REPEATED &&
           !(f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF);
}

/* Scans bb's top-level fields (reader already initialised): want (or, when
 * NULL, the first splittable bytes field met) into pieces, the rest into
 * c->rest. 1: done; 0: unusual or malformed, use the plain path; -1: out of
 * memory. */
static int sm_rpc_scan(sm_rpc_cur *c, size_t total, const ProtobufCMessageDescriptor *desc,
                       const ProtobufCFieldDescriptor *want)
{
    c->bf = want;
    while (sm_rpc_cur_fill(c)) {
        uint8_t hdr[20];
        uint64_t tag, len = 0;
        size_t nt = sm_rpc_cur_varint(c, &tag, hdr), nl = 0;
        if (!nt || tag >> 3 == 0 || tag >> 3 > UINT32_MAX)
            return 0;
        unsigned wt = (unsigned)(tag & 7);
        if (wt == 0) {
            nl = sm_rpc_cur_varint(c, &len, hdr + nt);
            if (!nl)
                return 0;
            len = 0;
        } else if (wt == 1 || wt == 5) {
            len = wt == 1 ? 8 : 4;
        } else if (wt == 2) {
            nl = sm_rpc_cur_varint(c, &len, hdr + nt);
            if (!nl)
                return 0;
        } else {
            return 0; /* groups: let protobuf-c decide */
        }
        if (len > total)
            return 0;
        const ProtobufCFieldDescriptor *f =
            protobuf_c_message_descriptor_get_field(desc, (unsigned)(tag >> 3));
        if (wt == 2 && f && (c->bf ? f == c->bf : sm_rpc_field_splits(f))) {
            c->bf = f;
            c->npc = 0; /* last occurrence wins, as in protobuf-c */
            c->dlen = len;
            int r = sm_rpc_cur_take(c, NULL, len);
            if (r <= 0)
                return r;
            continue;
        }
        size_t need = c->nrest + nt + nl + len;
        if (need > c->cap) {
            size_t ncap = c->cap ? c->cap : 256;
            while (ncap < need)
                ncap *= 2;
            uint8_t *nr = realloc(c->rest, ncap);
            if (!nr)
                return -1;
            c->rest = nr;
            c->cap = ncap;
        }
        memcpy(c->rest + c->nrest, hdr, nt + nl);
        c->nrest += nt + nl;
        if (sm_rpc_cur_take(c, c->rest + c->nrest, len) <= 0)
            return 0;
        c->nrest += len;
    }
    return c->bf != NULL;
}

/* The split path: SM_OK with *out set (the pieces of c->bf still to be
 * placed, the field empty in *out), or SM_OK with *out NULL when the caller
 * should use the plain path (also for malformed input, so that protobuf-c
 * reports it); SM_ENOMEM. Call sm_rpc_cur_done after either. */
static sm_err sm_rpc_unpack_split(sm_rpc_cur *c, grpc_byte_buffer *bb, size_t total,
                                  const ProtobufCMessageDescriptor *desc,
                                  const ProtobufCFieldDescriptor *want, ProtobufCMessage **out,
                                  char *err, size_t errlen)
{
    memset(c, 0, sizeof *c);
    *out = NULL;
    if (!grpc_byte_buffer_reader_init(&c->r, bb))
        return SM_OK;
    int r = sm_rpc_scan(c, total, desc, want);
    if (r < 0)
        return sm_fail(err, errlen, SM_ENOMEM, "out of memory unpacking a %s", desc->name);
    if (r > 0)
        *out = protobuf_c_message_unpack(desc, NULL, c->nrest,
                                         c->rest ? c->rest : (const uint8_t *)"");
    return SM_OK;
}

static void sm_rpc_cur_done(sm_rpc_cur *c)
{
    free(c->rest);
    free(c->pc);
    grpc_byte_buffer_reader_destroy(&c->r);
}

/* Copies the located pieces to dst, calling copied after each. */
static void sm_rpc_cur_place(const sm_rpc_cur *c, uint8_t *dst, const sm_rpc_sink *sink)
{
    for (size_t i = 0; i < c->npc; i++) {
        /* copied reads the source, still cached, whichever way dst was
         * written. */
        if (sink && sink->cold)
            sm_copy_stream(dst, c->pc[i].p, c->pc[i].n);
        else
            memcpy(dst, c->pc[i].p, c->pc[i].n);
        if (sink && sink->copied)
            sink->copied(sink->copied_user ? sink->copied_user : sink->user, c->pc[i].p,
                         c->pc[i].n);
        dst += c->pc[i].n;
    }
}

static ProtobufCBinaryData *sm_rpc_field_bytes(ProtobufCMessage *m,
                                               const ProtobufCFieldDescriptor *f)
{
    return (ProtobufCBinaryData *)((char *)m + f->offset);
}

static sm_err sm_rpc_unpack_plain(grpc_byte_buffer *bb, const ProtobufCMessageDescriptor *desc,
                                  const char *what, ProtobufCMessage **out, char *err,
                                  size_t errlen)
{
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

sm_err sm_rpc_unpack(grpc_byte_buffer *bb, const ProtobufCMessageDescriptor *desc, const char *what,
                     ProtobufCMessage **out, char *err, size_t errlen)
{
    *out = NULL;
    size_t total = grpc_byte_buffer_length(bb);
    if (total >= SM_RPC_SPLIT_MIN) {
        sm_rpc_cur c;
        sm_err e = sm_rpc_unpack_split(&c, bb, total, desc, NULL, out, err, errlen);
        uint8_t *d = NULL;
        if (!e && *out && !(d = malloc(c.dlen ? c.dlen : 1))) {
            e = sm_fail(err, errlen, SM_ENOMEM, "cannot allocate %zu bytes for %s.%s", c.dlen,
                        desc->name, c.bf->name);
            sm_rpc_msg_free(*out);
            *out = NULL;
        }
        if (d) {
            sm_rpc_cur_place(&c, d, NULL);
            ProtobufCBinaryData *bd = sm_rpc_field_bytes(*out, c.bf);
            bd->data = d;
            bd->len = c.dlen;
            if (c.bf->label == PROTOBUF_C_LABEL_OPTIONAL)
                *(protobuf_c_boolean *)((char *)*out + c.bf->quantifier_offset) = 1;
        }
        sm_rpc_cur_done(&c);
        if (e || *out)
            return e;
    }
    return sm_rpc_unpack_plain(bb, desc, what, out, err, errlen);
}

sm_err sm_rpc_unpack_data(grpc_byte_buffer *bb, const ProtobufCMessageDescriptor *desc,
                          uint32_t field, const sm_rpc_sink *sink, const char *what,
                          ProtobufCMessage **out, size_t *len, char *err, size_t errlen)
{
    *out = NULL;
    *len = 0;
    const ProtobufCFieldDescriptor *f = protobuf_c_message_descriptor_get_field(desc, field);
    if (!sm_rpc_field_splits(f))
        return sm_fail(err, errlen, SM_EINTERNAL, "field %u of %s is not a singular bytes field",
                       field, desc->name);
    sm_rpc_cur c;
    void *dst = NULL;
    sm_err e = sm_rpc_unpack_split(&c, bb, grpc_byte_buffer_length(bb), desc, f, out, err, errlen);
    if (!e && *out) {
        *len = c.dlen;
        e = sink->place(sink->user, *out, c.dlen, &dst, err, errlen);
        if (!e && c.dlen)
            sm_rpc_cur_place(&c, dst, sink);
    }
    sm_rpc_cur_done(&c);
    if (e || *out)
        goto done;
    /* the plain path: unpack, then move the field out of the message */
    if ((e = sm_rpc_unpack_plain(bb, desc, what, out, err, errlen)))
        return e;
    ProtobufCBinaryData *bd = sm_rpc_field_bytes(*out, f), d = *bd;
    const ProtobufCBinaryData *def = f->default_value;
    if (def && d.data == def->data)
        d.data = NULL; /* a default shared by every message: not ours */
    bd->data = NULL;
    bd->len = 0;
    *len = d.len;
    e = sink->place(sink->user, *out, d.len, &dst, err, errlen);
    if (!e && d.len) {
        memcpy(dst, d.data, d.len);
        if (sink->copied)
            sink->copied(sink->copied_user ? sink->copied_user : sink->user, dst, d.len);
    }
    free(d.data);
done:
    if (e) {
        sm_rpc_msg_free(*out);
        *out = NULL;
        *len = 0;
    }
    return e;
}
