/* sm_rpc: the only gRPC user in shmap; blocking RPC over gRPC C core 1.51.
 *
 * This header is free of gRPC and protobuf-c: every gRPC object is behind an
 * opaque type. It holds what every process needs (initialisation, status
 * mapping, server and channel lifecycle). The message-level API (method
 * registration, handler calls, client calls in protobuf-c messages) is in
 * sm_rpc_msg.h, which only common/rpc includes; the rest of shmap speaks the
 * protocol through sm_svc.h.
 *
 * Server ("sync over async"). One completion queue and one thread route
 * completions; every active call is handed to a handler thread from a pool
 * that grows on demand up to a cap. A handler is plain blocking code:
 *
 *     static void put_shard(sm_rpc_call *call, void *user)
 *     {
 *         ProtobufCMessage *m;
 *         char err[256];
 *         sm_err e;
 *         while ((e = sm_rpc_recv(call, &m, err, sizeof err)) == SM_OK && m) {
 *             ... use m ...
 *             sm_rpc_msg_free(m);
 *         }
 *         if (e)
 *             return (void)sm_rpc_finish(call, e, err, NULL);
 *         sm_rpc_finish(call, SM_OK, NULL, &reply.base);
 *     }
 *
 * Methods are registered before sm_rpc_server_start() as rows of
 * sm_rpc_method. grpc.health.v1.Health/Check is built in: "" and the service
 * of every registered method answer SERVING, any other name NOT_FOUND. Unknown
 * methods get UNIMPLEMENTED at once. If the server has a token, each call must
 * carry it as metadata "x-shmap-token" or it gets UNAUTHENTICATED (health
 * checks excepted, so that probes without metadata work; a method
 * registered with grant set lets such a call through to its handler, which
 * checks the transfer's grants instead: sm_grant.h, Worker.PutShard and
 * GetShard).
 *
 * Client. A channel per peer target, kept for the process lifetime and shared
 * by threads. Every call is blocking and has a deadline in milliseconds.
 * Calls fail fast (no wait-for-ready): a dead peer gives SM_EUNAVAILABLE at
 * once; use sm_rpc_channel_wait_ready() for start-up rendezvous.
 *
 * Errors. A failed call returns the sm_err mapped from the gRPC status
 * (sm_rpc_err_from_status) and writes "<STATUS>: <details>" into the caller's
 * buffer, e.g. "NOT_FOUND: array 17 does not exist". A server handler
 * reports an error with sm_rpc_finish(call, SM_ENOTFOUND, "array 17 does not
 * exist", NULL), which maps back with sm_rpc_status_from_err.
 *
 * TLS. With an sm_rpc_tls (sm_rpc_tls_create) servers serve TLS and
 * channels speak it; without, both are plaintext. A server either requires
 * a client certificate signed by its CA on every connection (worker ports)
 * or only verifies one if the client offers it (the coordinator's port,
 * where clients with just the CA connect, and worker ports with grants);
 * methods marked cluster_only (sm_rpc_method, or all with
 * all_cluster_only) then refuse callers without one, PERMISSION_DENIED,
 * except that a grant method checks their grants instead.
 *
 * Limits. Messages above SM_RPC_MAX_MSG bytes (packed) are refused on both
 * ends with SM_ERESOURCE / RESOURCE_EXHAUSTED.
 *
 * Lifecycle. sm_rpc_init() before anything else, sm_rpc_shutdown() after
 * every server, channel and stream is freed. */
#ifndef SM_RPC_H
#define SM_RPC_H

#include <stddef.h>
#include <stdint.h>

#include "sm_config.h"
#include "sm_err.h"
#include "sm_grant.h"

/* Largest packed message sent or received, in bytes (8 MiB). */
#define SM_RPC_MAX_MSG (8 << 20)
/* Default cap on handler threads of a server (one per active call). */
#define SM_RPC_DEFAULT_MAX_HANDLERS 256
/* Metadata key that carries the shared token. */
#define SM_RPC_TOKEN_KEY "x-shmap-token"
/* Every call carries its request id (sm_log_request_id) as this metadata;
 * a handler runs with it as its thread's id. */
#define SM_RPC_REQUEST_ID_KEY "x-shmap-request-id"

/* ---- process lifecycle ------------------------------------------------- */

/* Initializes gRPC (grpc_init). Reference counted with sm_rpc_shutdown();
 * call before any other sm_rpc function. Thread-safe. */
void sm_rpc_init(void);

/* Tunes glibc malloc for multi-MiB messages (mmap threshold 64 MiB, trim
 * threshold 512 MiB, at most 2 arenas unless MALLOC_ARENA_MAX is set). The
 * settings are the whole process's: only a program's main() calls this
 * (the coordinator, the worker, shmapctl, the Python package, the
 * benchmarks), once, before it starts threads; libshmap never does. */
void sm_rpc_malloc_tune(void);

/* Sends gRPC's own log lines (gpr_log: a client's failed TLS handshake,
 * say) through sm_log, so they take the process's --log-format and
 * --log-level; GRPC_VERBOSITY still chooses which gRPC writes (default:
 * errors). The setting is the whole process's: only a program's main()
 * calls this, as it does sm_rpc_malloc_tune; libshmap never does. */
void sm_rpc_log_through_sm(void);

/* Releases gRPC (grpc_shutdown). Call once per sm_rpc_init(), after every
 * server, channel and stream has been freed. */
void sm_rpc_shutdown(void);

/* sm_rpc_shutdown for a process about to exit with status rc: if gRPC has
 * not shut down within ms (a gRPC 1.51 executor thread can sit in a 10 s
 * poll that the shutdown joins), logs a warning and ends the process at
 * once with _exit(rc); otherwise returns. */
void sm_rpc_shutdown_or_exit(int ms, int rc);

/* ---- status mapping (the one place each way) ---------------------------- */

/* gRPC status code (0..16, the standard numbering) for an sm_err. */
int sm_rpc_status_from_err(sm_err e);
/* sm_err for a gRPC status code; unknown codes give SM_EINTERNAL. */
sm_err sm_rpc_err_from_status(int status);
/* Upper-case name of a gRPC status ("NOT_FOUND"); never NULL. */
const char *sm_rpc_status_name(int status);

/* ---- TLS ------------------------------------------------------------- */

/* Where the TLS material comes from. Each of cert, key and ca is a PEM
 * file's path, or the PEM text itself (starting "-----BEGIN"); NULL or ""
 * for none. All borrowed for sm_rpc_tls_create only. */
typedef struct {
    const char *cert;        /* this process's certificate (chain, leaf first) */
    const char *key;         /* cert's private key, unencrypted; with cert only */
    const char *ca;          /* CA certificate(s) that sign the peers' certificates */
    const char *server_name; /* channels: the name servers' certificates must carry
                                instead of the target's host (one name for a whole
                                cluster); NULL: the host */
} sm_rpc_tls_opts;

/* The four rows of a server program's sm_config table for its TLS
 * material, in this order: --tls-cert, --tls-key, --tls-ca and
 * --tls-server-name (from SHMAP_TLS_CERT, _KEY, _CA, _SERVER_NAME); the
 * helps of cert, ca and name say what each means to the program. Written
 * after the designator of the first:
 *   [CFG_TLS_CERT] = SM_RPC_TLS_CONFIG_ROWS("...", "...", "..."), */
#define SM_RPC_TLS_CONFIG_ROWS(cert_help, ca_help, name_help)                                      \
    {"tls-cert", 0, SM_CFG_STRING, NULL, "SHMAP_TLS_CERT", cert_help},                             \
        {"tls-key",       0,                                                                       \
         SM_CFG_STRING,   NULL,                                                                    \
         "SHMAP_TLS_KEY", "The PEM private key of --tls-cert (unencrypted)."},                     \
        {"tls-ca", 0, SM_CFG_STRING, NULL, "SHMAP_TLS_CA", ca_help},                               \
    {                                                                                              \
        "tls-server-name", 0, SM_CFG_STRING, NULL, "SHMAP_TLS_SERVER_NAME", name_help              \
    }
/* The options from the values of those four rows (v[0..3], borrowed by
 * *o). 0, or -1 when one or two of --tls-cert, --tls-key and --tls-ca are
 * set: they go together (a usage error, the caller says why). */
int sm_rpc_tls_opts_from_config(const sm_config_value *v, sm_rpc_tls_opts *o);

/* Checked TLS material, shared read-only by servers and channels. */
typedef struct sm_rpc_tls sm_rpc_tls;

/* Reads and checks o. Nothing given (o NULL, or cert, key and ca all unset):
 * SM_OK with *out NULL, which means plaintext everywhere. Else ca is
 * required, cert and key go together, and each must parse and the key must
 * be the certificate's: SM_EIO (unreadable), SM_EFORMAT (no PEM
 * certificate or key), SM_EINVAL (missing part, key of another
 * certificate), each with a sentence naming the file. A certificate that
 * is expired or not signed by ca is only logged as a warning. *out is owned
 * by the caller (sm_rpc_tls_free), and must outlive every server and
 * channel made with it. */
sm_err sm_rpc_tls_create(const sm_rpc_tls_opts *o, sm_rpc_tls **out, char *err, size_t errlen);
void sm_rpc_tls_free(sm_rpc_tls *t);
/* 1 if t holds a certificate of this process (mutual TLS possible). */
int sm_rpc_tls_has_cert(const sm_rpc_tls *t);
/* "certificate PATH (/CN=...), CA PATH" for log lines; "plaintext" for
 * NULL. Borrowed from t. */
const char *sm_rpc_tls_describe(const sm_rpc_tls *t);

/* 1 if addr ("host:port") listens on loopback only (127.x.y.z, localhost,
 * [::1]), where plaintext is safe; 0 otherwise (0.0.0.0, a host's
 * address). */
int sm_rpc_addr_is_loopback(const char *addr);

/* ---- server ---------------------------------------------------------- */

typedef struct sm_rpc_server sm_rpc_server;
typedef struct {
    const char *addr;                    /* "host:port"; port 0 picks a free port. Copied. */
    const char *token;                   /* NULL or "": no authentication. Copied. */
    int max_handlers;                    /* handler thread cap; 0 = SM_RPC_DEFAULT_MAX_HANDLERS.
                                            Calls beyond the cap wait for a free thread. */
    int max_message_bytes;               /* largest message a call may send it; 0 = SM_RPC_MAX_MSG.
                                            gRPC refuses a larger one with RESOURCE_EXHAUSTED
                                            ("received message larger than max"). */
    const sm_rpc_tls *tls;               /* NULL: plaintext. Else it must hold a certificate;
                                            borrowed for sm_rpc_server_create only. */
    int require_client_cert;             /* with tls: 1 refuses every connection without a
                                            client certificate signed by tls's CA (the
                                            handshake fails); 0 accepts clients without one,
                                            verifies one if offered, and refuses them only
                                            the cluster_only methods. */
    int all_cluster_only;                /* with tls: 1 makes every method cluster_only
                                            (health excepted); a grant method then takes a
                                            caller without a certificate as one without the
                                            token: it needs grants. */
    int max_client_streams;              /* most streaming calls (client-, server-streaming,
                                            bidi) one client (one connection) may have open
                                            at once; one more is refused RESOURCE_EXHAUSTED.
                                            0: no limit. */
    const char *max_client_streams_name; /* how the refusal names the limit
                                            ("--max-client-streams"); copied */
    /* Tenants: with authenticate set, a call whose token is not the
     * server's own is passed to it (token bytes, length); it returns 1 and
     * writes the tenant's name (SM_TENANT_MAX) when the token is one of
     * theirs, 0 otherwise (UNAUTHENTICATED, as a wrong token). The handler
     * then runs with sm_tenant_current() naming the tenant ("" for the
     * server's own token). Called on any thread: quick and thread-safe;
     * compare in constant time. */
    int (*authenticate)(void *user, const unsigned char *token, size_t len, char *tenant);
    void *authenticate_user;
    /* Grants (sm_grant.h): the key the grants its grant methods take are
     * checked with (copied); NULL: calls without the token are refused
     * there too. */
    const sm_grant_key *grant_key;
} sm_rpc_server_opts;

/* A handler about to wait for long on something other than its own call
 * (another call of this server, a peer, a job) calls this first: the
 * thread that received the call may still be the one that drains the
 * server's completion queue, and hands it to another thread here. Cheap
 * and harmless anywhere else; without it the queue is taken over anyway
 * after 2 ms. */
void sm_rpc_may_block(void);

/* Milliseconds left before the deadline of the call whose handler runs on
 * this thread (0 once it passed); -1 outside a handler, or when the caller
 * set no deadline. A handler that calls on (a worker pulling from its
 * peers) ends its own calls a little before this, so that its failure,
 * naming whom it waited for, reaches its caller before the caller's own
 * deadline does. */
int64_t sm_rpc_handler_left_ms(void);

/* How long a method's calls took, from its handler's start to its return
 * (a stream's whole life), as a histogram over sm_rpc_latency_bounds_s. */
#define SM_RPC_LATENCY_NBUCKETS 14
extern const double sm_rpc_latency_bounds_s[SM_RPC_LATENCY_NBUCKETS];
typedef struct {
    const char *path; /* "/shmap.v1.Coordinator/Describe"; the server's */
    uint64_t calls;
    double sum_s;
    uint64_t buckets[SM_RPC_LATENCY_NBUCKETS + 1]; /* per bucket, not cumulative; then +Inf */
} sm_rpc_method_stats;
/* Fills out[0..max) with the registered methods' stats (thread-safe while
 * the server runs); returns how many methods there are. */
int sm_rpc_server_stats(sm_rpc_server *s, sm_rpc_method_stats *out, int max);

/* Creates a server and binds opts->addr (plaintext, or TLS with
 * opts->tls). Nothing is served until
 * sm_rpc_server_start(). On success *out is owned by the caller and freed
 * with sm_rpc_server_free(). Bind failure: SM_EUNAVAILABLE. */
sm_err sm_rpc_server_create(const sm_rpc_server_opts *opts, sm_rpc_server **out, char *err,
                            size_t errlen);

/* Starts serving (the CQ thread, the health service, the unimplemented
 * fallback). Call once. */
sm_err sm_rpc_server_start(sm_rpc_server *s, char *err, size_t errlen);

/* The bound TCP port (the real one when the address asked for port 0). */
int sm_rpc_server_port(const sm_rpc_server *s);

/* Stops the server: refuses new calls, cancels every call in flight (blocked
 * handler operations return SM_ECANCELLED), waits for all handlers to return
 * and all calls to be released, then joins every thread. Idempotent. Must not
 * be called from a handler. */
void sm_rpc_server_stop(sm_rpc_server *s);

/* Stops the server if needed and frees it. NULL is ignored. */
void sm_rpc_server_free(sm_rpc_server *s);

/* ---- client ---------------------------------------------------------- */

typedef struct sm_rpc_channel sm_rpc_channel;
/* Creates a channel to target ("host:port"), plaintext, with token (NULL or
 * "" for none; copied) sent on every call. Connects lazily. Thread-safe to
 * use from any number of threads; freed with sm_rpc_channel_free() once no
 * call or stream on it is active. */
sm_err sm_rpc_channel_create(const char *target, const char *token, sm_rpc_channel **out, char *err,
                             size_t errlen);
/* sm_rpc_channel_create over TLS when tls is not NULL (borrowed; it must
 * outlive the channel): the server's certificate must be signed by tls's
 * CA and name the target's host (or tls's server_name), and tls's own
 * certificate, if any, is offered for mutual TLS. A TLS failure shows on
 * the first call as UNAVAILABLE. */
sm_err sm_rpc_channel_create_tls(const char *target, const char *token, const sm_rpc_tls *tls,
                                 sm_rpc_channel **out, char *err, size_t errlen);
void sm_rpc_channel_free(sm_rpc_channel *ch);

/* Waits until the channel is connected, at most timeout_ms. SM_OK when
 * ready, SM_EUNAVAILABLE after the timeout. For start-up rendezvous only. */
sm_err sm_rpc_channel_wait_ready(sm_rpc_channel *ch, int timeout_ms, char *err, size_t errlen);

/* A channel cache: one channel per target address, made with the cache's
 * token and TLS at its first use and kept until the cache is freed. With
 * ready_ms > 0 a new channel must connect within ready_ms, and a target
 * that did not, or that a caller marked unreachable, is refused for
 * retry_ms and then tried the same way again (the lock is held while it
 * connects, so concurrent callers wait for one verdict). Thread-safe. */
typedef struct sm_rpc_chans sm_rpc_chans;

/* token (may be NULL) is copied; tls (may be NULL) is borrowed and must
 * outlive the cache. NULL when out of memory. */
sm_rpc_chans *sm_rpc_chans_create(const char *token, const sm_rpc_tls *tls, int ready_ms,
                                  int retry_ms);
/* Frees every channel: no call may be active on one. NULL is a no-op. */
void sm_rpc_chans_free(sm_rpc_chans *c);
/* The channel to address (borrowed: it lives as long as the cache).
 * SM_EUNAVAILABLE for a target refused as above. */
sm_err sm_rpc_chans_get(sm_rpc_chans *c, const char *address, sm_rpc_channel **out, char *err,
                        size_t errlen);
/* Records that address could not be reached: with ready_ms > 0 it is
 * refused for retry_ms from now on; a no-op otherwise. */
void sm_rpc_chans_unreachable(sm_rpc_chans *c, const char *address);
/* How many channels the cache holds; *unreachable (may be NULL) gets how
 * many of them are marked unreachable. */
int sm_rpc_chans_count(sm_rpc_chans *c, int *unreachable);
/* What is known of a target's memory (sm_svc_shm_same keeps it here, with
 * the channel): 1 it shares this process's memory, -1 it does not (set at
 * *since_ms), 0 not known yet or no such target. set_shm records it for a
 * target the cache holds (a no-op for others). */
int sm_rpc_chans_shm(sm_rpc_chans *c, const char *address, int64_t *since_ms);
void sm_rpc_chans_set_shm(sm_rpc_chans *c, const char *address, int same);

#endif
