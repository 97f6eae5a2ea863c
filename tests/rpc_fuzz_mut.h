/* rpc_fuzz_mut: the mutation library of the robustness suite of the real
 * processes (tests/test_rpc_fuzz_proc.c): a seeded random source, protobuf
 * messages of any type built and changed by reflection (9+ dims, negative
 * sizes, 2^62, 10 KB names, counts past the limits), byte-level mutations
 * of encoded messages (bit flips, truncation, inserted bytes, huge and
 * overlong varints, field numbers out of range, wrong wire types, lying
 * lengths), a message that packs to exactly given bytes, and sequences of
 * encoded messages for client streams. Knows nothing of shmap's methods.
 * Every function is thread-safe when each thread has its own fuzz_rng. */
#ifndef RPC_FUZZ_MUT_H
#define RPC_FUZZ_MUT_H

#include <stddef.h>
#include <stdint.h>

#include "sm_rpc_proto.h"

/* A splitmix64 stream: the same seed gives the same cases. */
typedef struct {
    uint64_t s;
} fuzz_rng;

uint64_t fuzz_rnd(fuzz_rng *r);
/* Uniform in 0..n-1 (0 when n is 0). */
uint64_t fuzz_below(fuzz_rng *r, uint64_t n);

/* A random message of type d at nesting depth (0 at the top); malloc'd,
 * free with sm_rpc_msg_free. */
ProtobufCMessage *fuzz_gen_msg(fuzz_rng *r, const ProtobufCMessageDescriptor *d, int depth);
/* Replaces one field somewhere in m (descending into set sub-messages) with
 * a random value; m must own its fields (as unpacked or generated). */
void fuzz_mutate_msg(fuzz_rng *r, ProtobufCMessage *m, int depth);

/* m packed into a malloc'd buffer of *n bytes. */
uint8_t *fuzz_pack(const ProtobufCMessage *m, size_t *n);

/* A message that packs to exactly bytes b: no fields, one unknown field of
 * tag 0 whose wire type byte is b[0] and whose data is the rest. */
typedef struct {
    Shmap__V1__Empty m;
    ProtobufCMessageUnknownField uf;
} fuzz_raw_msg;

/* Fills r to pack to b (n bytes, borrowed for r's life); returns it. */
const ProtobufCMessage *fuzz_raw_of(fuzz_raw_msg *r, const uint8_t *b, size_t n);

/* Encoded bytes with room to grow (b malloc'd, cap > n). */
typedef struct {
    uint8_t *b;
    size_t n, cap;
} fuzz_buf;

/* One byte-level mutation of x. */
void fuzz_mutate_bytes(fuzz_rng *r, fuzz_buf *x);

/* Prints "fuzz case WHAT (N bytes):" and the first 1 KiB of b in hex to
 * stderr. */
void fuzz_hexdump(const char *what, const uint8_t *b, size_t n);

/* A sequence of encoded messages for one client stream (at most 128). */
typedef struct {
    fuzz_buf m[128];
    int n;
} fuzz_seq;

/* Appends m packed, or a copy of the n bytes at b; asserts there is room. */
void fuzz_seq_add(fuzz_seq *s, const ProtobufCMessage *m);
void fuzz_seq_add_raw(fuzz_seq *s, const uint8_t *b, size_t n);
/* Frees the messages of s and empties it. */
void fuzz_seq_free(fuzz_seq *s);

#endif
