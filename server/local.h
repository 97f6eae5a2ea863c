/* local: the embedded default's worker processes. Starts N shmap-worker
 * processes on loopback (posix_spawn, with a clean signal mask, and
 * --exit-with-parent so that they end with the coordinator however it
 * ends; with a state dir, worker k keeps DIR/worker-k), watches
 * each with a waitpid thread — an exit marks that worker lost at once —
 * and on stop sends SIGTERM, waits, then SIGKILL.
 *
 * Ownership: sm_local_start returns a handle owned by the caller, released
 * by sm_local_stop. The registry is borrowed and must outlive it.
 * Thread-safety: start and stop from one thread (main); the waiter threads
 * only touch the handle under its mutex and the registry. */
#ifndef SM_SERVER_LOCAL_H
#define SM_SERVER_LOCAL_H

#include "registry.h"

typedef struct sm_local sm_local;

typedef struct {
    const char *binary;    /* shmap-worker path */
    int nworkers;          /* >= 1 */
    int devices;           /* per worker */
    int coord_port;        /* the coordinator's bound port (workers dial 127.0.0.1) */
    const char *token;     /* NULL for none; given to workers as SHMAP_TOKEN */
    int call_deadline_ms;  /* FreeArray calls after a loss */
    const char *state_dir; /* the coordinator's; NULL: none. Worker k gets DIR/worker-k */
    /* The coordinator's TLS settings, given to workers as SHMAP_TLS_CERT,
     * SHMAP_TLS_KEY, SHMAP_TLS_CA and SHMAP_TLS_SERVER_NAME; NULL: none. */
    const char *tls_cert, *tls_key, *tls_ca, *tls_server_name;
} sm_local_opts;

/* Finds the default worker binary: "shmap-worker" beside this program
 * (/proc/self/exe), else "../worker/shmap-worker" from its directory (the
 * build tree). SM_ENOTFOUND naming both paths. */
sm_err sm_local_default_binary(char *out, size_t len, char *err, size_t errlen);

/* Spawns the workers (process indices 0..N-1). On failure the ones already
 * started are stopped. */
sm_err sm_local_start(const sm_local_opts *o, sm_registry *r, sm_local **out, char *err,
                      size_t errlen);

/* Stops every worker still running (SIGTERM; SIGKILL after grace_ms), reaps
 * them, joins the threads and frees l. NULL ok. */
void sm_local_stop(sm_local *l, int grace_ms);

#endif
