/* relay: the coordinator's bulk-data paths. An upload from a client is
 * checked against the registry and forwarded, message by message, to
 * Worker.PutShard on every worker holding one of its devices (one stream
 * per worker, at most one chunk in memory); a download is forwarded from
 * Worker.GetShard. Also sends FreeArray requests.
 *
 * Thread-safety: every function may run on many handler threads at once;
 * the registry is the only shared state. */
#ifndef SM_SERVER_RELAY_H
#define SM_SERVER_RELAY_H

#include "registry.h"

/* Coordinator.Upload (docs/service.md "Uploads" step 2-3): reads the
 * client's stream from in, relays it, marks the devices filled on success
 * and fills out. Worker streams get the time left before the array's
 * deadline (at least a second). Errors are the client's (SM_EINVAL ...) or the
 * worker's status, with the worker's sentence. */
sm_err sm_relay_upload(sm_registry *r, sm_svc_upload_in *in, sm_svc_upload_reply *out, char *err,
                       size_t errlen);

/* Coordinator.Download: forwards the worker's GetShard stream of req's
 * device to out. Only READY arrays. */
sm_err sm_relay_download(sm_registry *r, const sm_svc_download_req *req, sm_svc_download_out *out,
                         int deadline_ms, char *err, size_t errlen);

/* Sends each FreeArray of frees[0..n) (skipping NULL channels); failures
 * are logged, not returned. */
/* CommitShards: reserves req's devices (sm_registry_commit_begin), asks
 * every worker holding them (Worker.ShardInfo, deadline_ms) whether each
 * shard is present with req's size and checksum, and only then marks them
 * filled. Absent: SM_EPRECONDITION; another size or checksum: SM_EDATALOSS;
 * on any failure the workers' copies are freed and the devices may be sent
 * again until the array's deadline. */
sm_err sm_relay_commit(sm_registry *r, const sm_svc_commit_req *req, sm_svc_upload_reply *out,
                       int deadline_ms, char *err, size_t errlen);

void sm_relay_free(const sm_reg_free *frees, int n, int deadline_ms);

/* Removes a leading "STATUS_NAME: " (as sm_rpc writes it) from err, so a
 * worker's sentence reaches the client once. */
void sm_relay_strip_status(char *err);

#endif
