/* rpc_fuzz: what the parts of the robustness suite of the real processes
 * share (tests/test_rpc_fuzz_proc.c: the cluster, its invariants and the
 * unary fuzzing; rpc_fuzz_req.c: the table of methods with their request
 * templates and the upload cases; rpc_fuzz_stream.c: the stream fuzzing;
 * rpc_fuzz_mut.c: the mutations). One suite program; not thread-safe except
 * where a function says so. */
#ifndef RPC_FUZZ_H
#define RPC_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "harness.h"
#include "rpc_fuzz_mut.h"
#include "sm_rpc.h"
#include "sm_svc.h"

#define CALL_MS   10000 /* deadline of every fuzz call */
#define PROMPT_MS 5000  /* every answer must come within this */
#define MAX_RAW   512
#define C_PATH(m) "/shmap.v1.Coordinator/" m
#define W_PATH(m) "/shmap.v1.Worker/" m

/* ---- the cluster (one per suite; test_rpc_fuzz_proc.c) --------------------- */

typedef struct {
    harness_cluster *h; /* the coordinator: pid (its process group), target, dir */
    sm_rpc_channel *coord;
    sm_rpc_channel *wch[2];
    char waddr[2][SM_ADDR_MAX];
    uint32_t wid[2];
    int32_t wdev[2][4];
    pid_t wpid[2];
    sm_array_id keep;    /* READY, checked bit-exact after every batch */
    sm_array_id pending; /* PENDING, receives only garbage until the last test */
    uint64_t seed;
    int n; /* cases per method and kind */
} fuzz_cluster;

extern fuzz_cluster cl;
extern int32_t mesh_devs[8]; /* mesh m's devices, in mesh order */

/* The last 8 KiB of the coordinator's log (its workers' too) to stderr. */
void print_log(void);

/* Records the outcome of one call (into codes, by gRPC status, if not NULL)
 * and fails the test on a hang, a transport failure, an unparsable OK reply
 * or a dead process, printing b (n bytes) in hex. */
void judge(const char *path, int worker, sm_err e, const char *err, int64_t ms, const char *kind,
           const uint8_t *b, size_t n, int *codes);

/* 1 if a failed call's text is gRPC's own (the connection failed) rather
 * than a status the server chose. Thread-safe. */
int transport_failure(sm_err e, const char *err);

/* Uploads data (nbytes) to devs of id at the coordinator in chunks. */
sm_err upload(sm_array_id id, const int32_t *devs, int ndev, sm_shape shape, const void *data,
              size_t nbytes, size_t chunk, char *err, size_t errlen);

/* ---- the methods under test (rpc_fuzz_req.c) ------------------------------- */

/* What a fuzz case may not do, because it would be a legitimate request that
 * deletes or overwrites the arrays the invariants watch. G_SAVE,
 * G_WRITE_CKPT: a checkpoint write (Save, WriteCheckpoint) is sent only when
 * its directory is relative (refused) or inside the suite's ckpt dir. */
typedef enum { G_NONE, G_DELETE, G_FREE, G_ASSEMBLE, G_RUNJOB, G_SAVE, G_WRITE_CKPT } guard;

typedef struct {
    const char *path;
    int worker; /* 0: the coordinator, 1: worker 0 */
    const ProtobufCMessageDescriptor *req, *rep;
    guard g;
    uint8_t *tmpl[4]; /* valid encoded requests (built at start) */
    size_t ntmpl[4];
    int nt;
    int codes[17], skipped;
} method;

/* Every unary method of both services, one row each. */
extern method methods[];
extern const int nmethods;

/* 1 if id (or, with id 0, name) is one of the arrays the invariants watch.
 * Thread-safe. */
int is_kept(uint64_t id, const char *name);
/* 1 if b parses as m's request and would legitimately delete or overwrite
 * the watched arrays, or write files outside the suite's own dir.
 * Thread-safe. */
int touches_kept(const method *m, const uint8_t *b, size_t n);
/* The row of worker's (1) or the coordinator's (0) method name; asserts
 * there is one. */
method *method_of(int worker, const char *name);
/* Encodes the valid requests of every method (the cluster must be up);
 * templates_free frees them. */
void build_templates(void);
void templates_free(void);

/* The designed upload streams: each breaks the protocol in one way. */
typedef enum {
    UP_NO_HEADER,
    UP_HEADER_TWICE,
    UP_OFF_BACKWARDS,
    UP_OFF_OVERLAP,
    UP_OFF_PAST_END,
    UP_OFF_NEGATIVE,
    UP_TOTAL_HUGE,
    UP_TOTAL_NEGATIVE,
    UP_DATA_AFTER_LAST,
    UP_AFTER_FULL_LAST,
    UP_BAD_CHECKSUM,
    UP_TINY_BAD_SUM,
    UP_TINY_SHORT,
    UP_MORE_THAN_TOTAL,
    UP_NO_LAST,
    UP_EMPTY,
    UP_SHAPE_9D,
    UP_SHAPE_HUGE,
    UP_SHAPE_NEGATIVE,
    UP_BAD_DTYPE,
    UP_NO_DEVICES,
    UP_DUP_DEVICES,
    UP_UNKNOWN_DEVICE,
    UP_MANY_DEVICES,
    UP_WRONG_SHAPE,
    UP_BATCH_BAD_SECOND,
    UP_BATCH_MID_SUM,
    UP_BATCH_SAME_DEVICE,
    UP_BATCH_OTHER_ARRAY,
    UP_BATCH_NO_LAST,
    UP_NCASES
} up_case;

extern const char *const up_names[UP_NCASES];

/* Appends the messages of upload case c of data (nb = 2048 bytes, a
 * [16,32] f32) for array id to devs to s. */
void upload_case(fuzz_seq *s, up_case c, uint64_t id, const int32_t *devs, int ndevs,
                 const uint8_t *data, size_t nb);

/* ---- streams (rpc_fuzz_stream.c) ------------------------------------------- */

/* Sends s on a client stream to path and finishes it (or, with abort_after
 * >= 0, abandons it after that many messages). Returns the status; judges
 * promptness and transport failures. */
sm_err run_cstream(sm_rpc_channel *ch, int worker, const char *path, const fuzz_seq *s,
                   const ProtobufCMessageDescriptor *rep_desc, int abort_after, const char *kind,
                   char *err, size_t errlen);

/* The values of the whole [16,32] test array of salt (malloc'd, *nb bytes). */
uint8_t *full_data(float salt, size_t *nb);

void fuzz_uploads(void);
void fuzz_downloads(void);
void fuzz_exchange(void);
void fuzz_aborts(void);

#endif
