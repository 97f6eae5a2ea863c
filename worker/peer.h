/* peer: this worker's connections to its peers, and pulling a box of a
 * peer's shard into a local buffer (the remote pieces of Assemble).
 *
 * One channel per peer address (an sm_rpc_chans cache), created on first
 * use and kept until sm_peer_free (channels connect lazily and reconnect by
 * themselves).
 *
 * With shared memory (sm_peer_shm_enable), a peer that proves it shares
 * this worker's memory (Worker.ShmProbe: it reads back a probe segment
 * this worker made; once per address, a failure tried again after 60 s)
 * writes the box into a staging file of this worker instead of streaming
 * it (GetShard with a ShmRef naming the file), and this worker copies it
 * into place: no piece byte goes through gRPC. The staging files come
 * from a pool of this worker (sm_shm_pool: /dev/shm/shmap-<random>-fff,
 * kept with their pages between pulls, at most 4 idle, unlinked by
 * sm_peer_free and, after a kill -9, by the next sweep of the host); a
 * pull charges the pages it uses to the memory limit until it ends. A
 * piece with no room there (limit, /dev/shm, 16 files in use) or from a
 * peer that refuses the ShmRef takes the stream.
 *
 * Threads: every function is thread-safe; any number of fetches may run at
 * once, on the same or different peers. */
#ifndef SM_WORKER_PEER_H
#define SM_WORKER_PEER_H

#include <stddef.h>
#include <stdint.h>

#include "sm_array.h"
#include "sm_err.h"
#include "sm_rpc.h"
#include "sm_svc.h"

typedef struct sm_peer sm_peer;

/* token: sent to peers (NULL or "" for none; copied). tls: NULL for
 * plaintext, else the worker's TLS settings (borrowed; must outlive p),
 * mutual TLS to every peer. deadline_ms: the deadline of one fetch. */
sm_err sm_peer_create(const char *token, const sm_rpc_tls *tls, int deadline_ms, sm_peer **out,
                      char *err, size_t errlen);
/* Lets fetches go through shared memory with the peers that prove they
 * share it (see above); the pages of staging files in use are charged to
 * charge (borrowed; NULL: no limit). Call before any fetch. */
sm_err sm_peer_shm_enable(sm_peer *p, sm_array_pool *charge, char *err, size_t errlen);
/* Frees every channel and staging file (unlinked); no fetch may be
 * running. NULL ok. */
void sm_peer_free(sm_peer *p);

/* The channel to address ("host:port"), created on first use. Borrowed: it
 * lives until sm_peer_free. */
sm_err sm_peer_channel(sm_peer *p, const char *address, sm_rpc_channel **out, char *err,
                       size_t errlen);

/* Downloads the box `box` of the shard of (array, device) held by the worker
 * at address with Worker.GetShard (through shared memory or the stream, see
 * above), and writes it, as it arrives, into dst
 * (row-major, shape dst_shape, dtype t) at dst_off. Checks the reply's shape
 * (must be the box's), dtype (must be t), byte count and checksum (mismatch:
 * SM_EDATALOSS). The box must fit dst at dst_off (SM_EINVAL). Its calls
 * end by until_ms (CLOCK_MONOTONIC ms, sm_time_mono_ms; 0: only the
 * cache's deadline of each call applies). On failure part of the region
 * may have been written. Errors are the peer's status or a sentence naming
 * the peer. */
sm_err sm_peer_fetch(sm_peer *p, const char *address, sm_array_id array, int32_t device,
                     const sm_index *box, sm_dtype t, void *dst, const sm_shape *dst_shape,
                     const int64_t *dst_off, int64_t until_ms, char *err, size_t errlen);

#endif
