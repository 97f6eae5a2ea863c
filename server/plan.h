/* plan: the coordinator's pure planning. Upload targets for every kind of
 * put (docs/service.md "Uploads") and the pieces of a reshard ("Resharding")
 * are computed here from index maps and device ownership alone: no registry,
 * no network, no clock, so every rule is unit-tested on its own
 * (tests/test_server_plan.c).
 *
 * Ownership: every _create function fills caller-provided outputs with
 * malloc'd memory released by the matching _free function; inputs are
 * borrowed. Thread-safety: no shared state; safe from any thread. */
#ifndef SM_SERVER_PLAN_H
#define SM_SERVER_PLAN_H

#include "sm_sharding.h"
#include "sm_svc.h"

/* Upload targets of PUT_WHOLE (one per distinct index, listing every
 * replica in mesh order, targets in order of first appearance) or
 * PUT_SHARDS (one per device, mesh order) from a devices_indices_map
 * (slices[0..n), mesh order). On SM_OK *out (n_out entries) is owned by the
 * caller (sm_plan_targets_free). SM_EINVAL for SM_PUT_LOCAL. */
sm_err sm_plan_targets_create(const sm_device_slice *slices, int n, sm_put_kind kind,
                              sm_svc_upload_target **out, int *n_out, char *err, size_t errlen);

/* Upload targets of one process of a PUT_LOCAL plan: its devices grouped
 * by identical local_slice (groups in order of first appearance, devices
 * in mesh order). Ownership as above. */
sm_err sm_plan_local_targets_create(const sm_local_proc *proc, sm_svc_upload_target **out,
                                    int *n_out, char *err, size_t errlen);

/* Frees targets and their device lists. NULL ok. */
void sm_plan_targets_free(sm_svc_upload_target *t, int n);

/* ---- reshard ---------------------------------------------------------- */

/* Where a device lives: the worker id that owns it and whether that worker
 * is alive. */
typedef struct {
    uint32_t worker;
    int alive;
} sm_plan_owner;

/* One piece of a new shard: src_box (in the source shard's coordinates) of
 * the source shard on src_device, copied to dst_offset of the new shard. */
typedef struct {
    int src_pos; /* its source's position in src[] */
    int32_t src_device;
    uint32_t src_worker;
    sm_index src_box;
    int64_t dst_offset[SM_MAX_RANK];
} sm_plan_piece;

/* A new device's shard and the pieces it is made of. */
typedef struct {
    int32_t device;
    uint32_t worker;
    sm_index index; /* its box of the global array */
    sm_shape shape; /* shard shape */
    int npieces;
    sm_plan_piece *pieces; /* owned */
} sm_plan_shard;

typedef struct {
    int nshards;
    sm_plan_shard *shards; /* owned; one per new device, mesh order */
} sm_plan_reshard;

/* Plans a reshard from the source index map (src[0..nsrc), with its
 * owners src_own[]) to the destination map (dst[0..ndst), with dst_own[]).
 * For every new device and every distinct source box overlapping its box,
 * the piece comes from a source device on the same worker holding that box
 * if one exists (lowest replica id first), else from the replica with the
 * lowest replica id on an alive worker. A source box with no copy on an
 * alive worker is SM_EUNAVAILABLE naming the box. Both maps must cover the
 * same global shape (same rank). On SM_OK *out is owned by the caller
 * (sm_plan_reshard_free). */
sm_err sm_plan_reshard_create(const sm_device_slice *src, const sm_plan_owner *src_own, int nsrc,
                              const sm_device_slice *dst, const sm_plan_owner *dst_own, int ndst,
                              sm_plan_reshard *out, char *err, size_t errlen);

/* Frees what sm_plan_reshard_create made and zeroes *p. NULL ok. */
void sm_plan_reshard_free(sm_plan_reshard *p);

#endif
