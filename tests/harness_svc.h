/* harness_svc: test helpers for the suites that drive real shmap processes
 * through sm_svc calls rather than through libshmap (tests/test_*_proc.c,
 * tests/test_worker_job.c and the e2e suites that speak the wire):
 *  - channels to a harness_cluster's coordinator, and calls on it that
 *    assert they succeed;
 *  - uploads, correct or spoiled in one chosen way, and downloads;
 *  - f32 test data whose every element follows from its global index.
 * Every helper that asserts does so with Check (call it from a test or a
 * checked fixture). Not thread-safe. */
#ifndef HARNESS_SVC_H
#define HARNESS_SVC_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "harness.h"
#include "harness_proc.h"
#include "sm_rpc.h"
#include "sm_svc.h"

/* The deadline of the helpers' own calls. */
#define HARNESS_CALL_MS 10000

/* ---- channels ------------------------------------------------------------- */

/* A channel to target (with token, NULL: none) that is connected; asserts.
 * The caller frees it (sm_rpc_channel_free). */
sm_rpc_channel *harness_svc_dial(const char *target, const char *token);
/* harness_svc_dial to h's coordinator with h's token (plaintext). */
sm_rpc_channel *harness_svc_channel(const harness_cluster *h);

/* In a Check test: the byte counters of the Stats of every worker c lists
 * (asked with h's cluster credential: Stats is the cluster's), summed. */
sm_svc_worker_stats harness_svc_worker_stats(const harness_cluster *h, sm_client *c);

/* Workers the coordinator at ch lists as alive; -1 if the call failed. */
int harness_svc_alive_workers(sm_rpc_channel *ch);

/* Polls until the coordinator at ch lists n workers alive, at most ms;
 * returns the last count seen (-1: the call failed). */
int harness_svc_wait_alive(sm_rpc_channel *ch, int n, int ms);

/* Creates mesh name from axes ("i=2,j=4", default device order) on the
 * coordinator at ch; asserts it succeeds. */
sm_mesh_info harness_svc_mesh(sm_rpc_channel *ch, const char *name, const char *axes);

/* CreateArray at the coordinator at ch of an f32 array of shape named name
 * (NULL: none) over the inline mesh axes ("x=8", default device order)
 * with the spec parsed from text, of kind, with a deadline of deadline_ms
 * (0: none); asserts it succeeds. The caller frees the reply
 * (sm_svc_create_array_reply_free). */
sm_svc_create_array_reply harness_svc_create(sm_rpc_channel *ch, const char *name, const char *axes,
                                             const char *spec, sm_shape shape, sm_put_kind kind,
                                             uint32_t deadline_ms);

/* The state of ref at the coordinator, and its error sentence into error
 * (error may be NULL); asserts the describe succeeds. */
sm_array_state harness_svc_state(sm_rpc_channel *ch, sm_array_ref ref, char *error, size_t len);

/* Polls until ref reaches want, at most ms; 1 if it did. */
int harness_svc_wait_state(sm_rpc_channel *ch, sm_array_ref ref, sm_array_state want, int ms);

/* ---- f32 test data -------------------------------------------------------- */

/* The value of a rank-2 f32 test array at global (i, j): i * 1000 + j +
 * salt. */
float harness_val(int64_t i, int64_t j, float salt);

/* The values of box (rank 2) of such an array, row-major, malloc'd; its
 * size in *nbytes. */
float *harness_box_f32(const sm_index *box, float salt, size_t *nbytes);

/* ---- uploads and downloads ------------------------------------------------ */

/* How an upload is spoiled (HARNESS_UP_OK: not at all). */
typedef enum {
    HARNESS_UP_OK,
    HARNESS_UP_NO_HEADER,     /* the data messages alone */
    HARNESS_UP_GAP,           /* the second data message starts skew bytes late */
    HARNESS_UP_OVERLAP,       /* ... skew bytes early */
    HARNESS_UP_PAST_END,      /* the last message is one more, past the end */
    HARNESS_UP_WRONG_TOTAL,   /* the header says 4 bytes more */
    HARNESS_UP_BAD_SUM,       /* the checksum has one bit flipped */
    HARNESS_UP_NO_LAST,       /* no message says last */
    HARNESS_UP_SECOND_HEADER, /* the second data message carries the header again */
    HARNESS_UP_ABORT,         /* cancelled after the first data message: SM_ECANCELLED */
    HARNESS_UP_HEADER_ONLY,   /* the header, then the end of the stream */
    HARNESS_UP_BACKWARDS,     /* the second half alone, first */
} harness_up_mode;

/* One upload: nbytes of data for the devices of array, in data messages of
 * chunk bytes (0: one message) whose last carries the checksum. */
typedef struct {
    int to_worker; /* 1: a worker's PutShard, 0: the coordinator's Upload */
    sm_array_id array;
    const int32_t *devices;
    int ndevices;
    sm_dtype dtype; /* as sent in the header (the data is not converted) */
    sm_shape shape; /* the shard's, as sent in the header */
    const void *data;
    int64_t nbytes;
    size_t chunk;
    harness_up_mode mode;
    int64_t skew;         /* HARNESS_UP_GAP / OVERLAP: bytes (0: 8) */
    int header_with_data; /* 1: the header rides on the first data message */
    int deadline_ms;      /* of the call (0: HARNESS_CALL_MS) */
} harness_upload_req;

/* Sends u over a new stream on ch and ends it. Returns the first error: of
 * a send (err holds its sentence), else the call's status; SM_EINTERNAL if
 * an OK reply counts other than nbytes. *rep (may be NULL) holds the reply. */
sm_err harness_upload(sm_rpc_channel *ch, const harness_upload_req *u, sm_svc_upload_reply *rep,
                      char *err, size_t errlen);

/* A correct f32 upload of data (nbytes) with shard shape to devs of array
 * id at the coordinator at ch, in chunks of chunk bytes (the header with
 * the first); *ready (may be NULL) says whether the array became ready. */
sm_err harness_svc_put(sm_rpc_channel *ch, sm_array_id id, const int32_t *devs, int ndev,
                       sm_shape shape, const void *data, size_t nbytes, size_t chunk, int *ready,
                       char *err, size_t errlen);

/* Downloads device's shard of ref from the coordinator at ch into a
 * malloc'd buffer (*out, *nbytes); a chunk outside the announced size is
 * SM_EFORMAT. */
sm_err harness_svc_download(sm_rpc_channel *ch, sm_array_ref ref, int32_t device, void **out,
                            size_t *nbytes, char *err, size_t errlen);

/* GetShard of array id's shard on device from the worker at ch, with the
 * grant (NULL: none), read to its end and dropped; returns the first
 * error. */
sm_err harness_svc_get_shard(sm_rpc_channel *ch, sm_array_id id, int32_t device,
                             const unsigned char *grant, char *err, size_t errlen);

/* Asserts that ref is READY and each of its shards downloads bit-exact as
 * the harness_val values of salt. */
void harness_svc_check_values(sm_rpc_channel *ch, sm_array_ref ref, float salt);

#endif
