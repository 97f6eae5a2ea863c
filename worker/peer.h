/* peer: this worker's connections to its peers, and pulling a box of a
 * peer's shard into a local buffer (the remote pieces of Assemble).
 *
 * One channel per peer address (an sm_rpc_chans cache), created on first
 * use and kept until sm_peer_free (channels connect lazily and reconnect by
 * themselves).
 *
 * Threads: every function is thread-safe; any number of fetches may run at
 * once, on the same or different peers. */
#ifndef SM_WORKER_PEER_H
#define SM_WORKER_PEER_H

#include <stddef.h>
#include <stdint.h>

#include "sm_err.h"
#include "sm_rpc.h"
#include "sm_svc.h"

typedef struct sm_peer sm_peer;

/* token: sent to peers (NULL or "" for none; copied). tls: NULL for
 * plaintext, else the worker's TLS settings (borrowed; must outlive p),
 * mutual TLS to every peer. deadline_ms: the deadline of one fetch. */
sm_err sm_peer_create(const char *token, const sm_rpc_tls *tls, int deadline_ms, sm_peer **out,
                      char *err, size_t errlen);
/* Frees every channel; no fetch may be running. NULL ok. */
void sm_peer_free(sm_peer *p);

/* The channel to address ("host:port"), created on first use. Borrowed: it
 * lives until sm_peer_free. */
sm_err sm_peer_channel(sm_peer *p, const char *address, sm_rpc_channel **out, char *err,
                       size_t errlen);

/* Downloads the box `box` of the shard of (array, device) held by the worker
 * at address with Worker.GetShard, and writes it, as it arrives, into dst
 * (row-major, shape dst_shape, dtype t) at dst_off. Checks the reply's shape
 * (must be the box's), dtype (must be t), byte count and checksum (mismatch:
 * SM_EDATALOSS). The box must fit dst at dst_off (SM_EINVAL). On failure
 * part of the region may have been written. Errors are the peer's status or
 * a sentence naming the peer. */
sm_err sm_peer_fetch(sm_peer *p, const char *address, sm_array_id array, int32_t device,
                     const sm_index *box, sm_dtype t, void *dst, const sm_shape *dst_shape,
                     const int64_t *dst_off, char *err, size_t errlen);

#endif
