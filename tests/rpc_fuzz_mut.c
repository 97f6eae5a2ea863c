/* rpc_fuzz_mut: random values, messages and mutations for the robustness
 * suite of the real processes (tests/test_rpc_fuzz_proc.c). */
#include "rpc_fuzz_mut.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sm_rpc_msg.h"

/* ---- random data --------------------------------------------------------------- */

uint64_t fuzz_rnd(fuzz_rng *r)
{
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

uint64_t fuzz_below(fuzz_rng *r, uint64_t n)
{
    return n ? fuzz_rnd(r) % n : 0;
}

static int64_t fuzz_pick_i64(fuzz_rng *r)
{
    static const int64_t v[] = {0,
                                1,
                                -1,
                                2,
                                3,
                                4,
                                7,
                                8,
                                9,
                                16,
                                255,
                                256,
                                4096,
                                65536,
                                INT32_MAX,
                                INT32_MIN,
                                (int64_t)1 << 31,
                                (int64_t)1 << 32,
                                (int64_t)1 << 53,
                                (int64_t)1 << 62,
                                -((int64_t)1 << 62),
                                INT64_MAX,
                                INT64_MIN};
    if (fuzz_below(r, 8) == 0)
        return (int64_t)fuzz_rnd(r);
    return v[fuzz_below(r, sizeof v / sizeof v[0])];
}

static char *fuzz_pick_str(fuzz_rng *r)
{
    static const char *const v[] = {
        "",           "m",      "i",    "j",           "x",        "fz_keep",
        "fz_pending", "P('i')", "psum", "127.0.0.1:1", "%s%n%s%n", "\xff\xfe\x80",
        "a b c",      "0"};
    uint64_t k = fuzz_below(r, 8);
    if (k == 0) { /* a name of 10 KB */
        size_t n = 10240 + fuzz_below(r, 64);
        char *s = malloc(n + 1);
        memset(s, 'n', n);
        s[n] = 0;
        return s;
    }
    if (k == 1) {
        size_t n = 1 + fuzz_below(r, 40);
        char *s = malloc(n + 1);
        for (size_t i = 0; i < n; i++)
            s[i] = (char)(1 + fuzz_below(r, 255));
        s[n] = 0;
        return s;
    }
    return strdup(v[fuzz_below(r, sizeof v / sizeof v[0])]);
}

/* A count for a repeated field: often 0..3, sometimes 8..129 (e.g. dims). */
static size_t fuzz_pick_count(fuzz_rng *r, int depth)
{
    static const size_t v[] = {0, 1, 2, 3, 4, 8, 9, 10, 17, 33, 65, 129};
    size_t n = fuzz_below(r, 2) ? fuzz_below(r, 4) : v[fuzz_below(r, sizeof v / sizeof v[0])];
    if (depth == 0 && fuzz_below(r, 16) == 0) /* past SM_MAX_WORKER_DEVICES */
        n = 257 + fuzz_below(r, 64);
    return depth > 1 && n > 9 ? 9 : n;
}

/* ---- messages built by reflection ------------------------------------------------ */

static size_t fuzz_elem_size(ProtobufCType t)
{
    switch (t) {
    case PROTOBUF_C_TYPE_INT64:
    case PROTOBUF_C_TYPE_SINT64:
    case PROTOBUF_C_TYPE_SFIXED64:
    case PROTOBUF_C_TYPE_UINT64:
    case PROTOBUF_C_TYPE_FIXED64:
    case PROTOBUF_C_TYPE_DOUBLE:
        return 8;
    case PROTOBUF_C_TYPE_BOOL:
        return sizeof(protobuf_c_boolean);
    case PROTOBUF_C_TYPE_STRING:
        return sizeof(char *);
    case PROTOBUF_C_TYPE_BYTES:
        return sizeof(ProtobufCBinaryData);
    case PROTOBUF_C_TYPE_MESSAGE:
        return sizeof(void *);
    default:
        return 4;
    }
}

/* Writes one random value of f's type at slot (which holds nothing owned). */
static void fuzz_gen_value(fuzz_rng *r, const ProtobufCFieldDescriptor *f, void *slot, int depth)
{
    int64_t v = fuzz_pick_i64(r);
    switch (f->type) {
    case PROTOBUF_C_TYPE_INT64:
    case PROTOBUF_C_TYPE_SINT64:
    case PROTOBUF_C_TYPE_SFIXED64:
    case PROTOBUF_C_TYPE_UINT64:
    case PROTOBUF_C_TYPE_FIXED64:
        memcpy(slot, &v, 8);
        break;
    case PROTOBUF_C_TYPE_DOUBLE: {
        double x = fuzz_below(r, 2) ? (double)v : -0.5;
        memcpy(slot, &x, 8);
        break;
    }
    case PROTOBUF_C_TYPE_FLOAT: {
        float x = (float)v;
        memcpy(slot, &x, 4);
        break;
    }
    case PROTOBUF_C_TYPE_BOOL: {
        protobuf_c_boolean b = (protobuf_c_boolean)fuzz_below(r, 2);
        memcpy(slot, &b, sizeof b);
        break;
    }
    case PROTOBUF_C_TYPE_ENUM: {
        static const int32_t e[] = {-1, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 100, INT32_MAX, INT32_MIN};
        int32_t x = e[fuzz_below(r, sizeof e / sizeof e[0])];
        memcpy(slot, &x, 4);
        break;
    }
    case PROTOBUF_C_TYPE_STRING: {
        char *s = fuzz_pick_str(r);
        memcpy(slot, &s, sizeof s);
        break;
    }
    case PROTOBUF_C_TYPE_BYTES: {
        ProtobufCBinaryData b;
        b.len = fuzz_below(r, 4) ? fuzz_below(r, 64) : 4096 + fuzz_below(r, 4096);
        b.data = malloc(b.len + 1);
        for (size_t i = 0; i < b.len; i++)
            b.data[i] = (uint8_t)fuzz_rnd(r);
        memcpy(slot, &b, sizeof b);
        break;
    }
    case PROTOBUF_C_TYPE_MESSAGE: {
        ProtobufCMessage *m =
            fuzz_gen_msg(r, (const ProtobufCMessageDescriptor *)f->descriptor, depth + 1);
        memcpy(slot, &m, sizeof m);
        break;
    }
    default: {
        int32_t x = (int32_t)v;
        memcpy(slot, &x, 4);
        break;
    }
    }
}

/* Frees what field f of m owns and resets it to its default. */
static void fuzz_field_clear(ProtobufCMessage *m, const ProtobufCFieldDescriptor *f)
{
    char *base = (char *)m;
    size_t n = 1;
    char *arr = base + f->offset;
    if (f->label == PROTOBUF_C_LABEL_REPEATED) {
        n = *(size_t *)(base + f->quantifier_offset);
        arr = *(char **)(base + f->offset);
    }
    for (size_t i = 0; arr && i < n; i++) {
        char *slot = arr + i * fuzz_elem_size(f->type);
        if (f->type == PROTOBUF_C_TYPE_STRING) {
            char *s = *(char **)slot;
            if (s && s != (const char *)f->default_value)
                free(s);
            *(char **)slot = (char *)f->default_value;
        } else if (f->type == PROTOBUF_C_TYPE_BYTES) {
            ProtobufCBinaryData *b = (ProtobufCBinaryData *)slot;
            const ProtobufCBinaryData *dv = f->default_value;
            if (b->data && (!dv || b->data != dv->data))
                free(b->data);
            b->data = NULL;
            b->len = 0;
        } else if (f->type == PROTOBUF_C_TYPE_MESSAGE) {
            sm_rpc_msg_free(*(ProtobufCMessage **)slot);
            *(ProtobufCMessage **)slot = NULL;
        } else {
            memset(slot, 0, fuzz_elem_size(f->type));
        }
    }
    if (f->label == PROTOBUF_C_LABEL_REPEATED) {
        free(arr);
        *(char **)(base + f->offset) = NULL;
        *(size_t *)(base + f->quantifier_offset) = 0;
    } else if (f->label == PROTOBUF_C_LABEL_OPTIONAL && f->quantifier_offset) {
        *(protobuf_c_boolean *)(base + f->quantifier_offset) = 0;
    }
}

/* Sets field f of m (cleared) to a random value or list. */
static void fuzz_field_gen(fuzz_rng *r, ProtobufCMessage *m, const ProtobufCFieldDescriptor *f,
                           int depth)
{
    char *base = (char *)m;
    if (f->type == PROTOBUF_C_TYPE_MESSAGE && depth > 3)
        return;
    if (f->label == PROTOBUF_C_LABEL_REPEATED) {
        size_t n = fuzz_pick_count(r, depth + (f->type == PROTOBUF_C_TYPE_MESSAGE));
        size_t es = fuzz_elem_size(f->type);
        char *arr = n ? calloc(n, es) : NULL;
        for (size_t i = 0; i < n; i++)
            fuzz_gen_value(r, f, arr + i * es, depth);
        *(char **)(base + f->offset) = arr;
        *(size_t *)(base + f->quantifier_offset) = n;
        return;
    }
    fuzz_gen_value(r, f, base + f->offset, depth);
    if (f->label == PROTOBUF_C_LABEL_OPTIONAL && f->quantifier_offset)
        *(protobuf_c_boolean *)(base + f->quantifier_offset) = 1;
}

/* A random message of type d (malloc'd; free with sm_rpc_msg_free). */
ProtobufCMessage *fuzz_gen_msg(fuzz_rng *r, const ProtobufCMessageDescriptor *d, int depth)
{
    ProtobufCMessage *m = calloc(1, d->sizeof_message);
    d->message_init(m);
    for (unsigned i = 0; i < d->n_fields; i++)
        if (fuzz_below(r, 3) != 0)
            fuzz_field_gen(r, m, &d->fields[i], depth);
    return m;
}

/* Replaces one field somewhere in m (descending into set sub-messages) with a
 * random value. */
void fuzz_mutate_msg(fuzz_rng *r, ProtobufCMessage *m, int depth)
{
    const ProtobufCMessageDescriptor *d = m->descriptor;
    if (!d->n_fields)
        return;
    const ProtobufCFieldDescriptor *f = &d->fields[fuzz_below(r, d->n_fields)];
    char *base = (char *)m;
    if (f->type == PROTOBUF_C_TYPE_MESSAGE && fuzz_below(r, 3) != 0) {
        ProtobufCMessage *sub = NULL;
        if (f->label == PROTOBUF_C_LABEL_REPEATED) {
            size_t n = *(size_t *)(base + f->quantifier_offset);
            if (n)
                sub = (*(ProtobufCMessage ***)(base + f->offset))[fuzz_below(r, n)];
        } else {
            sub = *(ProtobufCMessage **)(base + f->offset);
        }
        if (sub) {
            fuzz_mutate_msg(r, sub, depth + 1);
            return;
        }
    }
    fuzz_field_clear(m, f);
    fuzz_field_gen(r, m, f, depth);
}

uint8_t *fuzz_pack(const ProtobufCMessage *m, size_t *n)
{
    *n = protobuf_c_message_get_packed_size(m);
    uint8_t *b = malloc(*n + 1);
    protobuf_c_message_pack(m, b);
    return b;
}

const ProtobufCMessage *fuzz_raw_of(fuzz_raw_msg *r, const uint8_t *b, size_t n)
{
    Shmap__V1__Empty init = SHMAP__V1__EMPTY__INIT;
    r->m = init;
    if (n) {
        r->uf.tag = 0;
        r->uf.wire_type = (ProtobufCWireType)b[0];
        r->uf.len = n - 1;
        r->uf.data = (uint8_t *)b + 1;
        r->m.base.n_unknown_fields = 1;
        r->m.base.unknown_fields = &r->uf;
    }
    return &r->m.base;
}

/* ---- byte-level mutations ------------------------------------------------------ */

static void fuzz_buf_reserve(fuzz_buf *x, size_t more)
{
    if (x->n + more + 1 > x->cap) {
        x->cap = (x->n + more + 1) * 2;
        x->b = realloc(x->b, x->cap);
    }
}

static void fuzz_buf_insert(fuzz_buf *x, size_t at, const uint8_t *p, size_t n)
{
    fuzz_buf_reserve(x, n);
    memmove(x->b + at + n, x->b + at, x->n - at);
    memcpy(x->b + at, p, n);
    x->n += n;
}

static size_t fuzz_varint(uint64_t v, uint8_t *out)
{
    size_t i = 0;
    while (v >= 0x80) {
        out[i++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    out[i++] = (uint8_t)v;
    return i;
}

/* Reads a varint at p (at most end); returns its length or 0. */
static size_t fuzz_read_varint(const uint8_t *p, const uint8_t *end, uint64_t *v)
{
    *v = 0;
    for (size_t i = 0; i < 10 && p + i < end; i++) {
        *v |= (uint64_t)(p[i] & 0x7f) << (7 * i);
        if (!(p[i] & 0x80))
            return i + 1;
    }
    return 0;
}

/* Top-level fields of an encoded message: start of key, of payload (after a
 * length prefix for wire type 2) and end. */
typedef struct {
    size_t key, len_at, payload, end;
    int wt;
} span;

static int fuzz_spans_of(const fuzz_buf *x, span *out, int max)
{
    const uint8_t *p = x->b, *end = x->b + x->n;
    int n = 0;
    while (p < end && n < max) {
        uint64_t key, len = 0;
        size_t kl = fuzz_read_varint(p, end, &key);
        if (!kl)
            break;
        span s = {(size_t)(p - x->b), 0, 0, 0, (int)(key & 7)};
        const uint8_t *q = p + kl;
        s.len_at = (size_t)(q - x->b);
        switch (s.wt) {
        case 0: {
            size_t l = fuzz_read_varint(q, end, &len);
            if (!l)
                return n;
            q += l;
            break;
        }
        case 1:
            q += 8;
            break;
        case 2: {
            size_t l = fuzz_read_varint(q, end, &len);
            if (!l || len > (uint64_t)(end - q - l))
                return n;
            s.payload = (size_t)(q + l - x->b);
            q += l + len;
            break;
        }
        case 5:
            q += 4;
            break;
        default:
            return n;
        }
        if (q > end)
            return n;
        if (s.wt != 2)
            s.payload = s.len_at;
        s.end = (size_t)(q - x->b);
        out[n++] = s;
        p = q;
    }
    return n;
}

/* One byte-level mutation of x. */
void fuzz_mutate_bytes(fuzz_rng *r, fuzz_buf *x)
{
    span sp[256];
    int ns = fuzz_spans_of(x, sp, 256);
    uint8_t tmp[32];
    size_t k;
    switch (fuzz_below(r, 9)) {
    case 0: /* bit flips */
        for (int i = 0, m = 1 + (int)fuzz_below(r, 8); x->n && i < m; i++)
            x->b[fuzz_below(r, x->n)] ^= (uint8_t)(1u << fuzz_below(r, 8));
        break;
    case 1: /* truncation */
        x->n = fuzz_below(r, x->n + 1);
        break;
    case 2: /* inserted random bytes */
        k = 1 + fuzz_below(r, 16);
        for (size_t i = 0; i < k; i++)
            tmp[i] = (uint8_t)fuzz_rnd(r);
        fuzz_buf_insert(x, fuzz_below(r, x->n + 1), tmp, k);
        break;
    case 3: { /* a huge (or overlong, invalid) varint in a field 1..20 */
        size_t n = fuzz_varint((1 + fuzz_below(r, 20)) << 3, tmp);
        if (fuzz_below(r, 2)) {
            n += fuzz_varint(UINT64_MAX, tmp + n);
        } else {
            memset(tmp + n, 0xff, 11);
            n += 11;
            tmp[n++] = 0x01;
        }
        fuzz_buf_insert(x, ns ? sp[fuzz_below(r, (uint64_t)ns)].key : 0, tmp, n);
        break;
    }
    case 4: { /* field numbers out of range: 0, 2^29 - 1, 2^29, 2^32 + 1 */
        static const uint64_t nums[] = {0, (1u << 29) - 1, 1u << 29, (1ull << 32) + 1, 19000};
        size_t n = fuzz_varint((nums[fuzz_below(r, 5)] << 3) | fuzz_below(r, 6), tmp);
        n += fuzz_varint(fuzz_below(r, 2) ? 1 : (1ull << 62), tmp + n);
        fuzz_buf_insert(x, fuzz_below(r, x->n + 1), tmp, n);
        break;
    }
    case 5: /* a wrong wire type on a field */
        if (ns) {
            span s = sp[fuzz_below(r, (uint64_t)ns)];
            x->b[s.key] = (uint8_t)((x->b[s.key] & ~7u) | fuzz_below(r, 8));
        }
        break;
    case 6: /* a length prefix that lies: 2^62, 2^31 - 1, +1, 0 */
        for (int i = 0; i < ns; i++) {
            span s = sp[(i + (int)fuzz_below(r, (uint64_t)ns)) % ns];
            if (s.wt != 2)
                continue;
            static const uint64_t lens[] = {1ull << 62, INT32_MAX, 0, UINT64_MAX};
            uint64_t nl = fuzz_below(r, 5) == 0 ? (s.end - s.payload) + 1 : lens[fuzz_below(r, 4)];
            size_t n = fuzz_varint(nl, tmp);
            memmove(x->b + s.len_at, x->b + s.payload, x->n - s.payload);
            x->n -= s.payload - s.len_at;
            fuzz_buf_insert(x, s.len_at, tmp, n);
            break;
        }
        break;
    case 7: /* a field repeated */
        if (ns) {
            span s = sp[fuzz_below(r, (uint64_t)ns)];
            size_t n = s.end - s.key;
            uint8_t *copy = malloc(n + 1);
            memcpy(copy, x->b + s.key, n);
            fuzz_buf_insert(x, fuzz_below(r, 2) ? x->n : s.key, copy, n);
            free(copy);
        }
        break;
    default: /* a group start or end, or a reserved wire type */
        tmp[0] = (uint8_t)((1 + fuzz_below(r, 15)) << 3 | (3 + fuzz_below(r, 5)));
        fuzz_buf_insert(x, fuzz_below(r, x->n + 1), tmp, 1);
        break;
    }
}

void fuzz_hexdump(const char *what, const uint8_t *b, size_t n)
{
    fprintf(stderr, "fuzz case %s (%zu bytes):", what, n);
    for (size_t i = 0; i < n && i < 1024; i++)
        fprintf(stderr, "%s%02x", i % 32 ? "" : "\n  ", b[i]);
    fprintf(stderr, "\n");
}

/* ---- message sequences --------------------------------------------------------- */

void fuzz_seq_add(fuzz_seq *s, const ProtobufCMessage *m)
{
    ck_assert_int_lt(s->n, 128);
    fuzz_buf *x = &s->m[s->n++];
    x->b = fuzz_pack(m, &x->n);
    x->cap = x->n + 1;
}

void fuzz_seq_add_raw(fuzz_seq *s, const uint8_t *b, size_t n)
{
    ck_assert_int_lt(s->n, 128);
    fuzz_buf *x = &s->m[s->n++];
    x->b = malloc(n + 1);
    memcpy(x->b, b, n);
    x->n = n;
    x->cap = n + 1;
}

void fuzz_seq_free(fuzz_seq *s)
{
    for (int i = 0; i < s->n; i++)
        free(s->m[i].b);
    s->n = 0;
}
