/* harness: test helpers that start a real shmap cluster (shmap-coordinator
 * with local workers, from $SHMAP_COORDINATOR_BIN) on free loopback ports,
 * run shmapctl ($SHMAPCTL) capturing its output, and manage temp dirs.
 *
 * Processes are started with posix_spawn (no fork handlers run, so it is
 * safe after gRPC is initialised); the coordinator leads a new process group
 * that its workers inherit, so stopping a cluster can end every process it
 * started. Not thread-safe except harness_shmapctl, which any thread may
 * call. */
#ifndef HARNESS_H
#define HARNESS_H

#include <check.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "shmap.h"

typedef struct {
    int nworkers;
    int devices_per_worker;
    const char *token;             /* NULL: none */
    const char *const *coord_args; /* more coordinator flags, NULL-terminated (NULL: none) */
    /* TLS files (NULL: plaintext): the coordinator's (and its workers')
     * --tls-cert/--tls-key/--tls-ca, also used by harness_connect. */
    const char *tls_cert, *tls_key, *tls_ca;
    const char *target_host; /* the host clients dial (NULL: 127.0.0.1) */
} harness_opts;

typedef struct {
    pid_t pid; /* the coordinator (also its process group id) */
    int port;
    char target[64]; /* "127.0.0.1:PORT" */
    char dir[256];   /* temp dir: port file, logs */
    char token[64];
    char tls_cert[512], tls_key[512], tls_ca[512]; /* "" when plaintext */
    int nworkers, ndevices;
} harness_cluster;

/* Starts a cluster and waits (at most 30 s) for its port file and for every
 * worker to be alive. On failure prints the coordinator's log to stderr.
 * *out is owned by the caller (harness_cluster_stop). */
sm_err harness_cluster_start(const harness_opts *o, harness_cluster **out, char *err,
                             size_t errlen);
/* For a suite fixture: starts a cluster of nworkers x devices_per_worker
 * (no token), or prints "<suite>: <error>" to stderr and exits 1. */
harness_cluster *harness_cluster_up(int nworkers, int devices_per_worker, const char *suite);
/* SIGTERM to the coordinator, waits up to 5 s, then SIGKILL to its whole
 * process group; removes the temp dir and frees h. NULL is ignored. */
void harness_cluster_stop(harness_cluster *h);

/* Connects a client to the cluster (with its token and TLS files, if any,
 * and what the environment sets: sm_client_opts_from_env). */
sm_err harness_connect(const harness_cluster *h, sm_client **out, char *err, size_t errlen);
/* In a Check test: harness_connect, asserting it succeeds. The caller
 * closes the client. */
sm_client *harness_client(const harness_cluster *h);
/* A reference to an array by id alone. */
sm_array_ref harness_id_ref(sm_array_id id);
/* Runs every test of s in this process (CK_NOFORK: the clusters live in
 * this process and gRPC is not fork-safe), frees s; returns the exit code
 * of a suite program (1 when a test failed). */
int harness_run_suite(Suite *s);

/* Pids of the cluster's worker processes (children of the coordinator), at
 * most max; returns the count. */
int harness_worker_pids(const harness_cluster *h, pid_t *out, int max);

/* Polls describe until the array reaches state (or timeout_ms passes);
 * returns the last state seen (0 if describe failed). */
int harness_wait_state(sm_client *c, sm_array_ref ref, int state, int timeout_ms);

/* Waits until exactly `alive` workers are alive (at most timeout_ms). */
sm_err harness_wait_workers(sm_client *c, int alive, int timeout_ms, char *err, size_t errlen);

/* A new empty temp dir (malloc'd path; harness_rmdir removes it and frees
 * the path). */
/* Sleeps ms milliseconds. */
void harness_sleep_ms(int ms);
char *harness_tmpdir(void);
void harness_rmdir(char *path);

/* The output of one shmapctl run. */
typedef struct {
    int code; /* exit code; 128 + signal if killed */
    char *out, *err;
} harness_run;

/* Runs $SHMAPCTL with args (NULL-terminated, without the program name) with
 * SHMAP_TARGET (and SHMAP_TOKEN) set for cluster h (h may be NULL).
 * Returns 0, or -1 if it could not be started. Free r with harness_run_free. */
int harness_shmapctl(const harness_cluster *h, harness_run *r, const char *const *args);
void harness_run_free(harness_run *r);

/* Helpers for test data. */
sm_array *harness_array_iota(sm_dtype t, const sm_shape *s, uint64_t seed);
sm_shape harness_shape_of(int rank, const int64_t *dims);
#define HARNESS_SHAPE(...)                                                                         \
    harness_shape_of((int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)),                    \
                     (int64_t[]){__VA_ARGS__})
/* A sharding ref over an inline mesh parsed from axes ("i=4,j=2") with the
 * default order (devices NULL) or explicit devices; spec parsed from text.
 * The ref points into *mesh. Aborts on bad input (a test bug). */
sm_sharding_ref harness_sharding(sm_mesh *mesh, const char *axes, const int32_t *devices,
                                 int ndevices, const char *spec);

#endif
