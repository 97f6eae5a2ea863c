/* shmap-coordinator: the one address clients need. Serves
 * shmap.v1.Coordinator (handlers.c, and jobs.c for shard_map jobs) over the
 * registry (registry.c), runs
 * the reaper (reaper.c) and, in the embedded default, its own workers
 * (local.c). Shuts down cleanly on SIGTERM / SIGINT, taken with sigwait on
 * the main thread (every other thread has them blocked). */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "handlers.h"
#include "jobs.h"
#include "local.h"
#include "metrics.h"
#include "reaper.h"
#include "sm_config.h"
#include "sm_log.h"
#include "sm_rpc.h"

#define SM_STR_(x) #x
#define SM_STR(x)  SM_STR_(x)

enum {
    CFG_LISTEN,
    CFG_PORT_FILE,
    CFG_LOCAL_WORKERS,
    CFG_DEVICES,
    CFG_WORKER_BINARY,
    CFG_TOKEN,
    CFG_TLS_CERT,
    CFG_TLS_KEY,
    CFG_TLS_CA,
    CFG_TLS_SERVER_NAME,
    CFG_HEARTBEAT,
    CFG_LOST_AFTER,
    CFG_DEADLINE,
    CFG_JOB_KEEP_S,
    CFG_JOB_KEEP_MAX,
    CFG_JOB_QUEUE_MAX,
    CFG_MAX_MESSAGE_MB,
    CFG_MAX_PROGRAM_OPS,
    CFG_MAX_ARRAY_MB,
    CFG_MAX_NAME_LENGTH,
    CFG_MAX_CLIENT_STREAMS,
    CFG_METRICS,
    CFG_LOG_LEVEL,
    CFG_LOG_FORMAT,
    CFG_STATE_DIR,
    CFG_TOKENS,
    CFG_EXIT_WITH_PARENT,
    CFG_COUNT
};

static const sm_config_row cfg_rows[CFG_COUNT] = {
    [CFG_LISTEN] = {"listen", 'l', SM_CFG_STRING, "0.0.0.0:7070", "SHMAP_LISTEN",
                    "Address to serve on, host:port; port 0 picks a free port."},
    [CFG_PORT_FILE] = {"port-file", 0, SM_CFG_STRING, NULL, NULL,
                       "Once serving, write the bound port and a newline to this file "
                       "(atomically)."},
    [CFG_LOCAL_WORKERS] = {"local-workers", 'w', SM_CFG_INT, "0", NULL,
                           "Start this many shmap-worker processes on loopback."},
    [CFG_DEVICES] = {"devices-per-worker", 'd', SM_CFG_INT, "4", NULL,
                     "Devices of each local worker."},
    [CFG_WORKER_BINARY] = {"worker-binary", 0, SM_CFG_STRING, NULL, NULL,
                           "The shmap-worker program for local workers (default: beside this "
                           "program, else ../worker/shmap-worker from its directory)."},
    [CFG_TOKEN] = {"token", 't', SM_CFG_STRING, NULL, "SHMAP_TOKEN",
                   "Shared token every call must carry (none if unset); with --tokens, the "
                   "cluster's own token (workers, and clients that see every tenant's "
                   "arrays)."},
    [CFG_TOKENS] = {"tokens", 0, SM_CFG_STRING, NULL, "SHMAP_TOKENS",
                    "Tenants: a file of lines 'TENANT TOKEN [max-bytes=N[K|M|G]] "
                    "[max-jobs=N]' (# comments), read again on SIGHUP. A tenant's token "
                    "opens its own arrays, meshes, names and jobs only (another's are "
                    "NOT_FOUND), within its quotas, and no worker port (its transfers go "
                    "through this coordinator). Needs --token."},
    [CFG_TLS_CERT] = SM_RPC_TLS_CONFIG_ROWS(
        "Serve TLS with this PEM certificate (it must name the host clients and workers dial), "
        "also shown to workers as this process's client certificate; with --tls-key and "
        "--tls-ca. Unset: plaintext.",
        "PEM CA certificate that signs the cluster's certificates: workers must present one it "
        "signs to register or heartbeat (mutual TLS); clients need only trust it.",
        "Name the workers' certificates must carry, instead of the host of each worker's "
        "address (one name for a whole cluster)."),
    [CFG_HEARTBEAT] = {"heartbeat-ms", 0, SM_CFG_INT, "500", NULL,
                       "Heartbeat period told to workers, in milliseconds."},
    [CFG_LOST_AFTER] = {"lost-after-ms", 0, SM_CFG_INT, "3000", NULL,
                        "A worker silent this long is marked lost, in milliseconds."},
    [CFG_DEADLINE] = {"default-deadline-ms", 0, SM_CFG_INT, "60000", NULL,
                      "Time a pending array has to receive all its data, in milliseconds."},
    [CFG_JOB_KEEP_S] = {"job-keep-s", 0, SM_CFG_INT, SM_STR(SM_JOBS_KEEP_S), NULL,
                        "An ended job's record (state, error, outputs) is kept this long, in "
                        "seconds; GetJob of an older one is NOT_FOUND."},
    [CFG_JOB_KEEP_MAX] = {"job-keep-max", 0, SM_CFG_INT, SM_STR(SM_JOBS_KEEP_MAX), NULL,
                          "At most this many ended jobs' records are kept, the most recent "
                          "ones."},
    [CFG_JOB_QUEUE_MAX] = {"job-queue-max", 0, SM_CFG_INT, SM_STR(SM_JOBS_QUEUE_MAX), NULL,
                           "At most this many submitted jobs wait to start; one more is "
                           "refused RESOURCE_EXHAUSTED."},
    [CFG_MAX_MESSAGE_MB] = {"max-message-mb", 0, SM_CFG_INT, "8", NULL,
                            "Largest message a call may send, in MiB, 1..8 (8: the clients' own "
                            "limit; data moves in 1 MiB chunks, programs and descriptions are "
                            "what grow); a larger one is refused RESOURCE_EXHAUSTED."},
    [CFG_MAX_PROGRAM_OPS] = {"max-program-ops", 0, SM_CFG_INT, SM_STR(SM_JOBS_MAX_OPS), NULL,
                             "Most ops a submitted program may have, loops unrolled; a larger "
                             "one is refused RESOURCE_EXHAUSTED."},
    [CFG_MAX_ARRAY_MB] = {"max-array-mb", 0, SM_CFG_INT, "0", NULL,
                          "Largest array (one full copy) an upload, reshard or job may create, "
                          "in MiB; 0: no limit but the workers' memory. A larger one is refused "
                          "RESOURCE_EXHAUSTED."},
    [CFG_MAX_NAME_LENGTH] = {"max-name-length", 0, SM_CFG_INT, "127", NULL,
                             "Longest array name, in characters (1..127); a longer one is "
                             "refused INVALID_ARGUMENT."},
    [CFG_MAX_CLIENT_STREAMS] = {"max-client-streams", 0, SM_CFG_INT, "64", NULL,
                                "Most uploads and downloads (streaming calls) one client "
                                "connection may have open at once, 1..100000 (a libshmap client "
                                "opens up to 8); one more is refused RESOURCE_EXHAUSTED."},
    [CFG_METRICS] = SM_METRICS_CONFIG_ROW("SHMAP_METRICS_LISTEN"),
    [CFG_LOG_LEVEL] = SM_LOG_CONFIG_ROWS,
    [CFG_STATE_DIR] = {"state-dir", 0, SM_CFG_STRING, NULL, "SHMAP_STATE_DIR",
                       "Keep the registry (meshes, arrays, workers, jobs' records) in SQLite "
                       "in this directory, so a restarted coordinator gets its arrays back "
                       "from the workers. Unset: memory only, except with --local-workers on "
                       "a fixed port, which keep it in ./shmap-state-PORT under the working "
                       "directory; 'none': memory only."},
    [CFG_EXIT_WITH_PARENT] = {"exit-with-parent", 0, SM_CFG_BOOL, "false", NULL,
                              "Stop (SIGTERM: a clean stop, local workers included) when the "
                              "process that started this one ends, however it ends (a test "
                              "harness, a supervisor that does not reap its children)."},
};

/* Threads that run queued shard_map jobs. */
#define JOB_THREADS 2

static const char usage[] = "usage: shmap-coordinator [options]\n\n"
                            "Serves the shmap.v1.Coordinator service: the registry of workers, "
                            "meshes and sharded arrays.";

static int usage_error(const char *msg)
{
    fprintf(stderr, "shmap-coordinator: %s\n", msg);
    return 2;
}

static int check_range(const sm_config_value *v, int row, int64_t lo, int64_t hi, char *msg,
                       size_t len)
{
    if (v[row].i >= lo && v[row].i <= hi)
        return 0;
    snprintf(msg, len, "--%s must be between %lld and %lld, got %lld", cfg_rows[row].name,
             (long long)lo, (long long)hi, (long long)v[row].i);
    return 1;
}

/* Writes "PORT\n" to path via a temporary file and rename. */
static sm_err write_port_file(const char *path, int port, char *err, size_t errlen)
{
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
    FILE *f = fopen(tmp, "w");
    if (!f)
        return sm_fail(err, errlen, SM_EIO, "cannot write port file '%s': %s", tmp,
                       strerror(errno));
    int bad = fprintf(f, "%d\n", port) < 0;
    bad |= fclose(f) != 0;
    if (bad || rename(tmp, path) != 0) {
        unlink(tmp);
        return sm_fail(err, errlen, SM_EIO, "cannot write port file '%s': %s", path,
                       strerror(errno));
    }
    return SM_OK;
}

int main(int argc, char **argv)
{
    sm_config_value v[CFG_COUNT];
    char err[1024], msg[256], binary[4200] = "";
    sigset_t sigs;
    int sig = 0, rc = 1;
    sm_registry *reg = NULL;
    sm_tenants *tenants = NULL;
    sm_coord coord;
    sm_handlers_init(&coord, NULL, NULL, 0);
    sm_rpc_server *srv = NULL;
    sm_reaper *reaper = NULL;
    sm_local *local = NULL;
    sm_cjobs *jobs = NULL;
    sm_metrics *metrics = NULL;
    sm_rpc_tls *tls = NULL;

    sm_err e = sm_config_parse(cfg_rows, CFG_COUNT, v, argc, argv, usage, NULL, err, sizeof err);
    if (e == SM_ECANCELLED)
        return 0;
    if (e)
        return usage_error(err);
    if (check_range(v, CFG_LOCAL_WORKERS, 0, 64, msg, sizeof msg) ||
        check_range(v, CFG_DEVICES, 1, SM_MAX_WORKER_DEVICES, msg, sizeof msg) ||
        check_range(v, CFG_HEARTBEAT, 10, 3600000, msg, sizeof msg) ||
        check_range(v, CFG_LOST_AFTER, v[CFG_HEARTBEAT].i, 86400000, msg, sizeof msg) ||
        check_range(v, CFG_DEADLINE, 1, 86400000, msg, sizeof msg) ||
        check_range(v, CFG_JOB_KEEP_S, 0, 31 * 86400, msg, sizeof msg) ||
        check_range(v, CFG_JOB_KEEP_MAX, 0, 100000000, msg, sizeof msg) ||
        check_range(v, CFG_JOB_QUEUE_MAX, 1, 1000000, msg, sizeof msg) ||
        check_range(v, CFG_MAX_MESSAGE_MB, 1, SM_RPC_MAX_MSG >> 20, msg, sizeof msg) ||
        check_range(v, CFG_MAX_PROGRAM_OPS, 1, 1000000, msg, sizeof msg) ||
        check_range(v, CFG_MAX_ARRAY_MB, 0, (int64_t)1 << 40, msg, sizeof msg) ||
        check_range(v, CFG_MAX_NAME_LENGTH, 1, SM_NAME_MAX - 1, msg, sizeof msg) ||
        check_range(v, CFG_MAX_CLIENT_STREAMS, 1, 100000, msg, sizeof msg))
        return usage_error(msg);
    if (sm_log_configure(v[CFG_LOG_LEVEL].s, v[CFG_LOG_FORMAT].s, err, sizeof err))
        return usage_error(err);
    /* SIGTERM is blocked below: the sigwait takes it, as any stop */
    if (v[CFG_EXIT_WITH_PARENT].i && (prctl(PR_SET_PDEATHSIG, SIGTERM) != 0 || getppid() == 1))
        return usage_error("--exit-with-parent: the parent is already gone.");
    setenv("SHMAP_LOG_FORMAT", v[CFG_LOG_FORMAT].s, 1); /* local workers log alike */
    sm_log_set_name("shmap-coordinator");
    sm_rpc_tls_opts tls_opts;
    if (sm_rpc_tls_opts_from_config(&v[CFG_TLS_CERT], &tls_opts))
        return usage_error("--tls-cert, --tls-key and --tls-ca go together: the coordinator "
                           "serves with its certificate, shows it to workers and verifies "
                           "theirs with the CA");
    if (v[CFG_LOCAL_WORKERS].i > 0) {
        if (v[CFG_WORKER_BINARY].s)
            snprintf(binary, sizeof binary, "%s", v[CFG_WORKER_BINARY].s);
        else if (sm_local_default_binary(binary, sizeof binary, err, sizeof err))
            return usage_error(err);
        if (access(binary, X_OK) != 0) {
            snprintf(msg, sizeof msg, "worker binary '%.200s' is not an executable file", binary);
            return usage_error(msg);
        }
    }

    /* Every thread started from here on inherits this mask. */
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    sm_rpc_malloc_tune();
    sm_rpc_log_through_sm();
    sm_rpc_init();
    const char *token = v[CFG_TOKEN].s && *v[CFG_TOKEN].s ? v[CFG_TOKEN].s : NULL;
    if (v[CFG_TOKENS].s && *v[CFG_TOKENS].s) {
        if (!token) {
            snprintf(err, sizeof err,
                     "--tokens needs --token: the cluster's own processes (workers) use it, "
                     "tenants use theirs");
            e = SM_EINVAL;
            goto fail;
        }
        if ((e = sm_tenants_load(v[CFG_TOKENS].s, &tenants, err, sizeof err)))
            goto fail;
        SM_INFO("tenants: %d from %s (SIGHUP reads it again)", sm_tenants_count(tenants),
                v[CFG_TOKENS].s);
    }
    if ((e = sm_rpc_tls_create(&tls_opts, &tls, err, sizeof err)))
        goto fail;
    if (tls)
        SM_INFO("TLS: %s; clients must trust the CA, workers must present a certificate it "
                "signs",
                sm_rpc_tls_describe(tls));
    else
        sm_log(sm_rpc_addr_is_loopback(v[CFG_LISTEN].s) ? SM_LOG_INFO : SM_LOG_WARN,
               "plaintext: no TLS (--tls-cert, --tls-key, --tls-ca); anyone on the network can "
               "read the traffic and the token, use it on loopback or a trusted network only");
    int deadline = (int)v[CFG_DEADLINE].i;
    if ((e = sm_registry_create((uint32_t)deadline, (uint32_t)v[CFG_HEARTBEAT].i, &reg, err,
                                sizeof err)))
        goto fail;
    /* --local-workers on a fixed port: a durable default, so the embedded
     * cluster started again the same way gets its arrays back */
    const char *state_dir = v[CFG_STATE_DIR].s;
    char default_state[64];
    const char *colon = strrchr(v[CFG_LISTEN].s, ':');
    int lport = colon ? atoi(colon + 1) : 0;
    if (state_dir && (!*state_dir || !strcmp(state_dir, "none"))) {
        state_dir = NULL;
    } else if (!state_dir && v[CFG_LOCAL_WORKERS].i > 0 && lport > 0) {
        snprintf(default_state, sizeof default_state, "shmap-state-%d", lport);
        state_dir = default_state;
        SM_INFO("state dir ./%s (the default of --local-workers on a fixed port; --state-dir "
                "none keeps everything in memory)",
                state_dir);
    }
    if (state_dir && (e = sm_registry_open_state(reg, state_dir, err, sizeof err)))
        goto fail;
    sm_registry_set_limits(reg, v[CFG_MAX_ARRAY_MB].i << 20, (int)v[CFG_MAX_NAME_LENGTH].i);
    /* a worker that registers before the local ones cannot take their place */
    sm_registry_reserve(reg, (int)v[CFG_LOCAL_WORKERS].i, (int)v[CFG_DEVICES].i);
    coord.reg = reg;
    coord.token = token;
    coord.call_deadline_ms = deadline;
    coord.tls = tls;
    coord.tenants = tenants;
    if (tenants) { /* tenants' transfers go straight to the workers with grants */
        coord.grants = 1;
        sm_grant_key_derive(token, &coord.grant_key);
    }
    sm_registry_set_tenants(reg, tenants);
    sm_cjobs_config jobs_cfg = sm_cjobs_config_default(JOB_THREADS);
    jobs_cfg.keep_ms = v[CFG_JOB_KEEP_S].i * 1000;
    jobs_cfg.keep_max = (int)v[CFG_JOB_KEEP_MAX].i;
    jobs_cfg.queue_max = (int)v[CFG_JOB_QUEUE_MAX].i;
    jobs_cfg.max_ops = (int)v[CFG_MAX_PROGRAM_OPS].i;
    sm_rpc_server_opts so = {.addr = v[CFG_LISTEN].s,
                             .token = token,
                             .max_message_bytes = (int)(v[CFG_MAX_MESSAGE_MB].i << 20),
                             .tls = tls,
                             .max_client_streams = (int)v[CFG_MAX_CLIENT_STREAMS].i,
                             .max_client_streams_name = "--max-client-streams",
                             .authenticate = tenants ? sm_tenants_authenticate : NULL,
                             .authenticate_user = tenants};
    if ((e = sm_rpc_server_create(&so, &srv, err, sizeof err)) ||
        (e = sm_svc_coord_serve(srv, sm_handlers_ops(), &coord, "shmap-coordinator", err,
                                sizeof err)) ||
        (e = sm_cjobs_create(&coord, &jobs_cfg, &jobs, err, sizeof err)) ||
        (e = sm_svc_coord_jobs_serve(srv, sm_cjobs_ops(), jobs, err, sizeof err)) ||
        (e = sm_rpc_server_start(srv, err, sizeof err)))
        goto fail;
    int port = sm_rpc_server_port(srv);
    SM_INFO("serving shmap.v1.Coordinator on %s (port %d)%s%s", v[CFG_LISTEN].s, port,
            tls ? " over TLS" : " in plaintext", token ? " with a token" : "");
    if (v[CFG_PORT_FILE].s && (e = write_port_file(v[CFG_PORT_FILE].s, port, err, sizeof err)))
        goto fail;
    if ((e = sm_reaper_start(reg, v[CFG_LOST_AFTER].i, 100, deadline, &reaper, err, sizeof err)))
        goto fail;
    if (v[CFG_METRICS].s && *v[CFG_METRICS].s) {
        int mport;
        if ((e = sm_metrics_start(v[CFG_METRICS].s, reg, jobs, srv, &metrics, &mport, err,
                                  sizeof err)))
            goto fail;
        SM_INFO("serving Prometheus metrics on http://%s/metrics (port %d)", v[CFG_METRICS].s,
                mport);
    }
    if (v[CFG_LOCAL_WORKERS].i > 0) {
        sm_local_opts lo = {binary,
                            (int)v[CFG_LOCAL_WORKERS].i,
                            (int)v[CFG_DEVICES].i,
                            port,
                            token,
                            deadline,
                            state_dir,
                            v[CFG_TLS_CERT].s,
                            v[CFG_TLS_KEY].s,
                            v[CFG_TLS_CA].s,
                            v[CFG_TLS_SERVER_NAME].s};
        if ((e = sm_local_start(&lo, reg, &local, err, sizeof err)))
            goto fail;
    }
    for (;;) {
        while (sigwait(&sigs, &sig) != 0)
            ;
        if (sig != SIGHUP)
            break;
        if (!tenants)
            SM_INFO("SIGHUP: no --tokens to read again");
        else if (sm_tenants_reload(tenants, err, sizeof err))
            SM_ERROR("SIGHUP: %s; the tenants stay as they were", err);
        else
            SM_INFO("SIGHUP: tenants read again: %d", sm_tenants_count(tenants));
    }
    SM_INFO("signal %d: shutting down", sig);
    rc = 0;
fail:
    if (rc)
        SM_ERROR("%s", err);
    sm_metrics_stop(metrics);
    sm_cjobs_stop(jobs); /* wakes handlers blocked in WaitJob */
    if (srv)
        sm_rpc_server_stop(srv);
    sm_local_stop(local, 5000);
    sm_reaper_stop(reaper);
    sm_rpc_server_free(srv);
    sm_cjobs_free(jobs);
    if (sm_handlers_drain(&coord, 5000) == 0) { /* else a repair still uses them: exit without */
        sm_registry_free(reg);
        sm_rpc_tls_free(tls);
        sm_tenants_free(tenants);
    }
    sm_rpc_shutdown_or_exit(2000, rc); /* or _exit(rc) after 2 s */
    if (!rc)
        SM_INFO("stopped");
    return rc;
}
