/* harness: test helpers that start a real shmap cluster (shmap-coordinator
 * with local workers, from $SHMAP_COORDINATOR_BIN) on free loopback ports,
 * run shmapctl ($SHMAPCTL) capturing its output, and manage temp dirs.
 *
 * Secure mode (SM_TEST_SECURE=1 in the environment, or harness_opts.secure):
 * a cluster whose options name no token and no TLS files is started with
 * TLS (certificates made once per process by $SM_TLS_CERTS, i.e.
 * scripts/tls_certs.sh, with openssl), the cluster's token and a tokens file
 * of two tenants (HARNESS_TENANT, HARNESS_OTHER). Its clients
 * (harness_connect, harness_channel, harness_shmapctl) then carry the first
 * tenant's token and trust the CA, with no client certificate, as a client
 * from outside would; harness_use_cluster_credential switches them to the
 * cluster's own credential. A secure cluster is checked at start to refuse
 * a plaintext client and a wrong token. A cluster whose options set a
 * token or TLS files is started as they say, secure mode or not; a suite
 * that starts its own processes takes the flags from harness_secure_flags.
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
#include "sm_program.h"
#include "sm_rpc.h"
#include "suite_main.h"

/* Secure mode's tokens (tenants HARNESS_TENANT and HARNESS_OTHER). */
#define HARNESS_CLUSTER_TOKEN "harness-cluster-token-0123456789"
#define HARNESS_TENANT        "alice"
#define HARNESS_TENANT_TOKEN  "harness-alice-token-0123456789ab"
#define HARNESS_OTHER         "bob"
#define HARNESS_OTHER_TOKEN   "harness-bob-token-0123456789abcd"

typedef struct {
    int nworkers;
    int devices_per_worker;
    const char *token;             /* NULL: none */
    const char *const *coord_args; /* more coordinator flags, NULL-terminated (NULL: none) */
    /* TLS files (NULL: plaintext): the coordinator's (and its workers')
     * --tls-cert/--tls-key/--tls-ca, also used by harness_connect. */
    const char *tls_cert, *tls_key, *tls_ca;
    const char *target_host; /* the host clients dial (NULL: 127.0.0.1) */
    int secure;              /* 1: secure mode whatever SM_TEST_SECURE says */
} harness_opts;

typedef struct {
    pid_t pid; /* the coordinator (also its process group id) */
    int port;
    char target[64]; /* "127.0.0.1:PORT" */
    char dir[256];   /* temp dir: port file, logs */
    /* What the test's clients carry: the token ("" none) and TLS files
     * ("" when plaintext; tls_cert/tls_key "" for a client without a
     * certificate). */
    char token[64];
    char tls_cert[512], tls_key[512], tls_ca[512];
    /* The cluster's own credential, what its workers present: its token
     * and, over TLS, a client certificate its CA signed ("" none). Outside
     * secure mode the same as the clients'. */
    char cluster_token[64], cluster_cert[512], cluster_key[512];
    int secure; /* 1: started in secure mode */
    int nworkers, ndevices;
} harness_cluster;

/* Whether SM_TEST_SECURE asks for secure mode ("1"). */
int harness_secure(void);
/* Secure mode's files (made on first use, removed at exit): the CA, the
 * cluster's certificate and key (coordinator and workers), a client
 * certificate and key, and the tokens file. NULL (err set) when they cannot
 * be made. */
typedef struct {
    char ca[512], cert[512], key[512], client_cert[512], client_key[512], tokens[512];
} harness_secure_files;
const harness_secure_files *harness_secure_files_get(char *err, size_t errlen);

/* Starts a cluster and waits (at most 30 s) for its port file and for every
 * worker to be alive. On failure prints the coordinator's log to stderr.
 * *out is owned by the caller (harness_cluster_stop). */
sm_err harness_cluster_start(const harness_opts *o, harness_cluster **out, char *err,
                             size_t errlen);
/* For a suite fixture: starts a cluster of nworkers x devices_per_worker
 * (no token), or prints "<suite>: <error>" to stderr and exits 1. */
harness_cluster *harness_cluster_up(int nworkers, int devices_per_worker, const char *suite);
/* The same for a cluster as o says; on failure prints "<what>: <error>". */
harness_cluster *harness_cluster_up_opts(const harness_opts *o, const char *what);
/* In a Check test: starts a cluster of nworkers x devices_per_worker
 * whose workers have --memory-limit-mb limit_mb (SHMAP_MEMORY_LIMIT_MB,
 * set for the start only), asserting it started. */
harness_cluster *harness_cluster_limited(int nworkers, int devices_per_worker, int limit_mb);
/* SIGTERM to the coordinator, waits up to 5 s, then SIGKILL to its whole
 * process group; removes the temp dir and frees h. NULL is ignored. */
void harness_cluster_stop(harness_cluster *h);
/* For a suite fixture: harness_cluster_stop(*h), then *h = NULL. */
void harness_cluster_down(harness_cluster **h);

/* In a Check test of a suite that starts its own coordinator or workers:
 * in secure mode (SM_TEST_SECURE=1) writes into argv (room for max) the
 * flags a process of a secure cluster takes (TLS with the cluster's
 * certificate, --token, and for a coordinator --tokens; strings that live
 * as long as the process) and sets h's client credentials as
 * harness_cluster_start does; returns how many. 0 outside secure mode. */
int harness_secure_flags(harness_cluster *h, int coordinator, char **argv, int max);

/* From now on h's clients (harness_connect, harness_client,
 * harness_channel, harness_shmapctl) carry the cluster's own credential:
 * for suites that by design use what only the cluster may (worker ports,
 * checkpoint directories). Changes nothing outside secure mode. */
void harness_use_cluster_credential(harness_cluster *h);

/* The options harness_connect uses (token, TLS files of h's clients;
 * pointers into h), for a test that sets more of them. */
sm_client_opts harness_client_opts(const harness_cluster *h);
/* Connects a client to the cluster (with its token and TLS files, if any,
 * and what the environment sets: sm_client_opts_from_env). */
sm_err harness_connect(const harness_cluster *h, sm_client **out, char *err, size_t errlen);
/* In a Check test: harness_connect, asserting it succeeds. The caller
 * closes the client. */
sm_client *harness_client(const harness_cluster *h);
/* In a Check test: a raw channel to target (NULL: the coordinator) with
 * the credential of h's clients, asserting it is made. Free it with
 * sm_rpc_channel_free (its TLS credentials live until the process ends). */
sm_rpc_channel *harness_channel(const harness_cluster *h, const char *target);
/* A reference to an array by id alone. */
sm_array_ref harness_id_ref(sm_array_id id);
/* Runs every test of s in this process (CK_NOFORK: the clusters live in
 * this process and gRPC is not fork-safe), frees s; returns the exit code
 * of a suite program (1 when a test failed). */
int harness_run_suite(Suite *s);
/* What main() of a suite named name returns when its tests share the
 * clusters up starts and down stops: harness_run_suite of its one case,
 * "cluster" (timeout seconds), with the tests listed as SUITE_CASE takes
 * them. */
#define HARNESS_CLUSTER_SUITE(name, timeout, up, down, ...)                                        \
    harness_run_suite(SUITE_CASE(suite_create(name), "cluster", (timeout),                         \
                                 SUITE_UNCHECKED((up), (down)), __VA_ARGS__))

/* Pids of the cluster's worker processes (children of the coordinator), at
 * most max; returns the count. */
int harness_worker_pids(const harness_cluster *h, pid_t *out, int max);

/* In a Check test: uploads x through c with the sharding (axes, spec) of
 * harness_sharding under name (NULL: none), asserting it succeeds; returns
 * its id. */
sm_array_id harness_put(sm_client *c, const sm_array *x, const char *axes, const char *spec,
                        const char *name);

/* In a Check test: gets ref through c, asserting it succeeds and holds an
 * array of want's dtype and shape with its bytes (a failure names the
 * caller's line and the first byte that differs). */
void harness_assert_get_at(int line, sm_client *c, sm_array_ref ref, const sm_array *want);
#define harness_assert_get(c, ...) harness_assert_get_at(__LINE__, (c), __VA_ARGS__)

/* In a Check test: harness_assert_get of the array info describes, then
 * deletes it (asserting that succeeds) and frees info. */
void harness_assert_get_delete_at(int line, sm_client *c, sm_array_info *info,
                                  const sm_array *want);
#define harness_assert_get_delete(c, info, want)                                                   \
    harness_assert_get_delete_at(__LINE__, (c), (info), (want))

/* In a Check test: the program text parses (name: its file in messages),
 * asserting it does; the caller frees it (sm_program_free). */
sm_program *harness_program(const char *text, const char *name);

/* In a Check test: the workers c's ListDevices names (*n of them),
 * asserting it answers; the caller frees the array. */
sm_worker_info *harness_workers(sm_client *c, int *n);

/* In a Check test: the sum of the bytes on devices the workers c's
 * ListDevices names report (with alive_only, the alive workers only). */
int64_t harness_bytes_held(sm_client *c, int alive_only);

/* The address of the first worker c's ListDevices names into out (len);
 * SM_ENOTFOUND when it names none. */
sm_err harness_first_worker(sm_client *c, char *out, size_t len, char *err, size_t errlen);

/* Polls describe until the array reaches state (or timeout_ms passes);
 * returns the last state seen (0 if describe failed). */
int harness_wait_state(sm_client *c, sm_array_ref ref, int state, int timeout_ms);

/* Waits until exactly `alive` workers are alive (at most timeout_ms). */
sm_err harness_wait_workers(sm_client *c, int alive, int timeout_ms, char *err, size_t errlen);

/* How many names in /dev/shm start with prefix and do not end with except
 * (NULL: none); each is printed to stderr as "<who>: /dev/shm/NAME is left". */
int harness_shm_left(const char *prefix, const char *except, const char *who);

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
 * SHMAP_TARGET (and SHMAP_TOKEN, SHMAP_TLS_CA/CERT/KEY) set for cluster h's
 * clients (h may be NULL: none of them set).
 * Returns 0, or -1 if it could not be started. Free r with harness_run_free. */
int harness_shmapctl(const harness_cluster *h, harness_run *r, const char *const *args);
void harness_run_free(harness_run *r);

/* In a Check test: asserts that text holds each of words (NULL-terminated),
 * naming the one it lacks. HARNESS_HAS(text, "a", "b", ...) lists them. */
void harness_assert_has(const char *text, const char *const *words);
#define HARNESS_HAS(text, ...) harness_assert_has((text), (const char *const[]){__VA_ARGS__, NULL})

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
