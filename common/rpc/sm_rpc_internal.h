/* sm_rpc_internal: helpers shared by the server and client halves of sm_rpc.
 * Includes gRPC headers: never include it outside the .c files of common/rpc. */
#ifndef SM_RPC_INTERNAL_H
#define SM_RPC_INTERNAL_H

#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/slice.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>

#include "sm_rpc_msg.h"

/* Packs msg into a new byte buffer (*out, owned by the caller, destroyed with
 * grpc_byte_buffer_destroy). SM_ERESOURCE above SM_RPC_MAX_MSG, SM_ENOMEM.
 * what names the message in the error sentence ("request", "reply"). */
sm_err sm_rpc_pack(const ProtobufCMessage *msg, const char *what, grpc_byte_buffer **out, char *err,
                   size_t errlen);

/* Unpacks bb (borrowed) as desc into *out (owned by the caller, freed with
 * sm_rpc_msg_free; nothing in it points into bb). SM_EFORMAT if it does not
 * parse, SM_ENOMEM. Messages of 64 KiB or more are read straight from bb's
 * slices and their singular bytes field copied once into its own malloc'd
 * block (one copy instead of readall's plus protobuf-c's). */
sm_err sm_rpc_unpack(grpc_byte_buffer *bb, const ProtobufCMessageDescriptor *desc, const char *what,
                     ProtobufCMessage **out, char *err, size_t errlen);

/* Packs a data message: msg (its bytes field number `field` empty) followed
 * by that field holding data[0..len), referenced, not copied, from the byte
 * buffer; release(arg) runs once gRPC drops the last reference (at once when
 * len is 0 or on failure). Errors as for sm_rpc_pack. */
sm_err sm_rpc_pack_data(const ProtobufCMessage *msg, uint32_t field, const void *data, size_t len,
                        sm_rpc_release_fn release, void *arg, const char *what,
                        grpc_byte_buffer **out, char *err, size_t errlen);

/* Unpacks bb (borrowed) as a data message of type desc whose bytes field
 * number `field` is copied to where sink->place says (see sm_rpc_sink);
 * *out as for sm_rpc_unpack with that field empty, *len the payload length.
 * SM_EFORMAT if it does not parse, the place error if place refuses,
 * SM_EINTERNAL if field is not a singular bytes field of desc. */
sm_err sm_rpc_unpack_data(grpc_byte_buffer *bb, const ProtobufCMessageDescriptor *desc,
                          uint32_t field, const sm_rpc_sink *sink, const char *what,
                          ProtobufCMessage **out, size_t *len, char *err, size_t errlen);

/* Fills args (room for at least 2) with the message-size limits shared by
 * servers and channels; *n is set to the number filled. */
void sm_rpc_fill_args(grpc_arg *args, size_t *n);

/* Credentials for t (NULL: insecure ones); the caller releases them. */
grpc_channel_credentials *sm_rpc_tls_channel_creds(const sm_rpc_tls *t);
grpc_server_credentials *sm_rpc_tls_server_creds(const sm_rpc_tls *t, int require_client_cert);
/* The name a channel expects in servers' certificates (NULL: the host). */
const char *sm_rpc_tls_server_name(const sm_rpc_tls *t);
/* 1 if the peer of a server call presented a client certificate the TLS
 * handshake verified. */
int sm_rpc_tls_peer_has_cert(grpc_call *call);

/* Open streams per client (sm_rpc_peers.c). A table allowing max streams
 * per key (a peer, as grpc_call_get_peer names it); thread-safe. */
typedef struct sm_rpc_peers sm_rpc_peers;
sm_rpc_peers *sm_rpc_peers_create(int max); /* NULL when out of memory */
void sm_rpc_peers_free(sm_rpc_peers *p);    /* NULL ok */
/* Counts one more stream of key: 1, or 0 (nothing counted) when key has
 * max open already or memory ran out. */
int sm_rpc_peers_take(sm_rpc_peers *p, const char *key);
/* Counts one stream of key less (after a take that returned 1). */
void sm_rpc_peers_give(sm_rpc_peers *p, const char *key);

/* Deadline ms from now on the monotonic clock. */
gpr_timespec sm_rpc_deadline(int ms);

#endif
