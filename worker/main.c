/* shmap-worker: owns D devices, stores and serves their shards
 * (shmap.v1.Worker), registers with the coordinator and heartbeats.
 *
 * Start-up: pick the OpenBLAS core type (may re-exec), read the config,
 * serve, then register from the agent thread. SIGTERM or SIGINT (taken with
 * sigwait on the main thread, never in a handler) stops the server, joins
 * the threads, frees everything and exits 0. Usage errors exit 2 with one
 * sentence on stderr; a start-up failure exits 1. */
#include <inttypes.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "agent.h"
#include "disk.h"
#include "handlers.h"
#include "job.h"
#include "peer.h"
#include "sm_shm.h"
#include "sm_array.h"
#include "sm_array_arena.h"
#include "sm_config.h"
#include "sm_kern.h"
#include "sm_log.h"
#include "sm_metrics_http.h"
#include "sm_metrics_rpc.h"
#include "sm_rpc.h"
#include "sm_svc.h"
#include "sm_sys.h"
#include "sm_time.h"
#include "store.h"
#include "traffic.h"

enum {
    CFG_COORDINATOR,
    CFG_DEVICES,
    CFG_LISTEN,
    CFG_ADVERTISE,
    CFG_PROCESS_INDEX,
    CFG_TOKEN,
    CFG_TLS_CERT,
    CFG_TLS_KEY,
    CFG_TLS_CA,
    CFG_TLS_SERVER_NAME,
    CFG_BLAS_THREADS,
    CFG_CACHE_MB,
    CFG_MEM_LIMIT_MB,
    CFG_MAX_MESSAGE_MB,
    CFG_METRICS,
    CFG_LOG_LEVEL,
    CFG_LOG_FORMAT,
    CFG_STATE_DIR,
    CFG_WORKER_ID,
    CFG_EXIT_WITH_PARENT,
    CFG_TRANSPORT,
    CFG_SHM_SWEEP_S,
    CFG_SPIN_US,
    CFG_COUNT
};

static const sm_config_row worker_config[CFG_COUNT] = {
    [CFG_COORDINATOR] = {"coordinator", 'c', SM_CFG_STRING, NULL, "SHMAP_COORDINATOR",
                         "Address HOST:PORT of the coordinator to register with (required)."},
    [CFG_DEVICES] = {"devices", 'd', SM_CFG_INT, "4", "SHMAP_DEVICES",
                     "Number of devices this worker owns."},
    [CFG_LISTEN] = {"listen", 'l', SM_CFG_STRING, "0.0.0.0:7171", "SHMAP_LISTEN",
                    "Address HOST:PORT to serve shmap.v1.Worker on; port 0 picks a free port."},
    [CFG_ADVERTISE] = {"advertise", 'a', SM_CFG_STRING, NULL, "SHMAP_ADVERTISE",
                       "Address HOST:PORT the coordinator and peers use to reach this worker "
                       "(default: the listen host, 0.0.0.0 as 127.0.0.1, with the bound port)."},
    [CFG_PROCESS_INDEX] = {"process-index", 'p', SM_CFG_INT, "-1", "SHMAP_PROCESS_INDEX",
                           "Process index to ask the coordinator for; -1 takes the next free "
                           "one."},
    [CFG_TOKEN] = {"token", 't', SM_CFG_STRING, NULL, "SHMAP_TOKEN",
                   "Shared token required on every call to this worker and sent to the "
                   "coordinator and peers."},
    [CFG_TLS_CERT] = SM_RPC_TLS_CONFIG_ROWS(
        "Mutual TLS: serve with this PEM certificate (it must name the host of --advertise) and "
        "show it to the coordinator and peers; with --tls-key and --tls-ca. Unset: plaintext.",
        "PEM CA certificate that signs the cluster's certificates: every caller of this worker "
        "must present a certificate it signs.",
        "Name the coordinator's and peers' certificates must carry, instead of the host of their "
        "addresses (one name for a whole cluster)."),
    [CFG_BLAS_THREADS] = {"blas-threads", 0, SM_CFG_INT, "1", "SHMAP_BLAS_THREADS",
                          "OpenBLAS threads per device."},
    [CFG_CACHE_MB] = {"buffer-cache-mb", 0, SM_CFG_INT, "-1", "SHMAP_BUFFER_CACHE_MB",
                      "Freed shard and job memory kept for reuse, in MiB, each block for at "
                      "most 10 s; -1: an eighth of the memory this worker may use (the "
                      "host's, or the lowest limit of its cgroup and those above it), at most "
                      "4096; 0: none."},
    [CFG_MEM_LIMIT_MB] = {"memory-limit-mb", 0, SM_CFG_INT, "-1", "SHMAP_MEMORY_LIMIT_MB",
                          "Most shard and job memory this worker holds, in MiB; with --state-dir "
                          "the least recently used shards are first spilled there (read back "
                          "on use), else an upload, reshard or job needing more fails "
                          "RESOURCE_EXHAUSTED instead of running the host out of memory. -1: "
                          "90% of the memory this worker may use (the host's, or the lowest limit "
                          "of its cgroup and those above it); 0: no limit."},
    [CFG_MAX_MESSAGE_MB] = {"max-message-mb", 0, SM_CFG_INT, "8", NULL,
                            "Largest message a call may send it, in MiB, 1..8 (shard data "
                            "comes in 1 MiB chunks); a larger one is refused "
                            "RESOURCE_EXHAUSTED."},
    [CFG_METRICS] = SM_METRICS_CONFIG_ROW("SHMAP_WORKER_METRICS_LISTEN"),
    [CFG_LOG_LEVEL] = SM_LOG_CONFIG_ROWS,
    [CFG_STATE_DIR] = {"state-dir", 0, SM_CFG_STRING, NULL, "SHMAP_WORKER_STATE_DIR",
                       "Keep this worker's identity and a copy of every shard (written in the "
                       "background, with its checksum) in this directory; restarted, the "
                       "worker offers those shards back to the coordinator. None if unset."},
    [CFG_WORKER_ID] = {"worker-id", 0, SM_CFG_INT, "0", "SHMAP_WORKER_ID",
                       "Stable worker id to register as (0: the one stored in --state-dir, "
                       "else one the coordinator assigns). Two workers must not share one."},
    [CFG_EXIT_WITH_PARENT] = {"exit-with-parent", 0, SM_CFG_BOOL, "false", NULL,
                              "Stop (SIGTERM) when the process that started this one ends, "
                              "however it ends (the coordinator's --local-workers use it)."},
    [CFG_TRANSPORT] = {"transport", 0, SM_CFG_STRING, "auto", "SHMAP_TRANSPORT",
                       "Collectives and reshard pieces with the workers of this host: auto "
                       "(the default: through shared memory with every worker that proves it "
                       "shares it, gRPC with the others and where shared memory has no room), "
                       "shm (the same, and a warning for each job with workers it shares no "
                       "memory with), or grpc (always gRPC)."},
    [CFG_SHM_SWEEP_S] = {"shm-sweep-s", 0, SM_CFG_INT, "30", "SHMAP_SHM_SWEEP_S",
                         "Every this many seconds, remove from /dev/shm the shmap segments "
                         "that processes killed on this host left (a client's buffers, above "
                         "all), once no live process holds them and they are 10 s old; 0: only "
                         "at the worker's start and after a failed job."},
    [CFG_SPIN_US] = {"spin-us", 0, SM_CFG_INT, "100", "SHMAP_SPIN_US",
                     "Before a collective's wait for its other devices sleeps, it polls for up "
                     "to this many microseconds, yielding the CPU between polls, when the "
                     "collective has at most twice as many devices as the worker may keep "
                     "CPUs busy (its affinity mask, or the lowest CPU quota of its cgroups): a "
                     "wake-up costs more, on a virtual machine above all; 0: never poll (CPUs "
                     "that other busy processes share); at most 10000."},
};

static const char worker_usage[] =
    "usage: shmap-worker --coordinator HOST:PORT [--devices N] [--listen ADDR] [options]\n"
    "\n"
    "Serves D devices of a shmap service: stores, serves and frees shards, and\n"
    "registers with the coordinator, heartbeating until SIGTERM.";

static int usage_error(const char *msg)
{
    fprintf(stderr, "shmap-worker: %s\n", msg);
    return 2;
}

/* Splits "host:port" (host may be "[v6]"); 0 if there is no ':' + digits. */
static int split_host_port(const char *addr, char *host, size_t hostlen, long *port)
{
    const char *colon = strrchr(addr, ':');
    if (!colon || !colon[1])
        return 0;
    char *end = NULL;
    long p = strtol(colon + 1, &end, 10);
    if (*end || p < 0 || p > 65535)
        return 0;
    size_t n = (size_t)(colon - addr);
    if (n >= hostlen)
        return 0;
    memcpy(host, addr, n);
    host[n] = 0;
    *port = p;
    return 1;
}

/* Buffers other than array data (received message pieces, collective
 * scratch) are allocated and freed on every op; array data of 1 MiB and
 * more has its own cache (below). glibc serves blocks at or above the mmap
 * threshold with a fresh mmap, and a thread arena other than the main one
 * cannot hold a block of 64 MiB or more, so such blocks were mapped,
 * page-faulted in and unmapped on every op (a quarter of a worker's cycles
 * in a psum of 64 MiB blocks). One arena (the brk heap) with the mmap
 * threshold at 256 MiB reuses their memory instead; free memory above the
 * trim threshold at the top of the heap still goes back to the system.
 * MALLOC_ARENA_MAX in the environment overrides the arena count;
 * sm_rpc_malloc_tune leaves the count alone when that variable is set, which is
 * why it is set here, before this program starts threads (the core-type
 * re-exec inherits it). */
#define SM_WORKER_MMAP_THRESHOLD (256 << 20)
#define SM_WORKER_TRIM_THRESHOLD (512 << 20)
static void sm_worker_malloc_tune(void)
{
    if (getenv("MALLOC_ARENA_MAX"))
        return;
    mallopt(M_ARENA_MAX, 1);
    setenv("MALLOC_ARENA_MAX", "1", 0);
}

/* Shards and job values of 1 MiB and more are mappings of their own
 * (sm_array_data_alloc from the worker's array pool, made here and lent to
 * the store, through it to jobs and collectives). Uploads, job outputs
 * and reshards free and allocate blocks of the same few sizes over and
 * over; kept for reuse, they skip the page fault per 4 KiB of fresh
 * memory, which on a virtual machine costs more than receiving the bytes.
 * A block unused for 10 s goes back to the system (the agent trims at every
 * heartbeat). */
#define SM_WORKER_CACHE_IDLE_MS 10000
static size_t worker_cache_bytes(int64_t mib)
{
    if (mib >= 0)
        return (size_t)mib << 20;
    uint64_t eighth = sm_sys_memory_bytes() / 8, cap = UINT64_C(4096) << 20;
    return (size_t)(eighth < cap ? eighth : cap);
}

static void worker_identity_saved(void *user, const sm_svc_register_reply *id)
{
    sm_disk_identity_save(user, id->worker_id.v, id->ndevices, id->devices);
}

/* --state-dir: opens it; a stored identity (the same id as --worker-id, if
 * given) goes into the store and the agent's request, and the shard copies
 * of its devices into the store; from then on the disk follows the store. */
static sm_err worker_state_open(const char *dir, sm_store *store, sm_agent_config *acfg,
                                sm_disk **out, char *err, size_t errlen)
{
    uint32_t id = 0;
    int n = 0;
    int32_t devs[SM_MAX_WORKER_DEVICES];
    sm_err e = sm_disk_open(dir, out, err, errlen);
    if (e)
        return e;
    if (sm_disk_identity_load(*out, &id, &n, devs)) {
        if (acfg->worker_id && acfg->worker_id != id)
            return sm_fail(err, errlen, SM_EINVAL,
                           "--worker-id %u differs from the id %u stored in %s/identity; pass "
                           "the same id or another --state-dir",
                           acfg->worker_id, id, dir);
        if (n != acfg->ndevices) {
            SM_WARN("%s/identity is for %d devices, this worker has %d: starting as a new "
                    "worker",
                    dir, n, acfg->ndevices);
        } else if ((e = sm_store_set_identity(store, id, n, devs, err, errlen))) {
            return e;
        } else {
            acfg->worker_id = id;
            acfg->ndevices_asked = n;
            memcpy(acfg->devices_asked, devs, sizeof *devs * (size_t)n);
            int got = sm_disk_restore(*out, store);
            SM_INFO("state dir %s: worker %u, devices %d..%d, %d shard(s) restored from disk", dir,
                    id, (int)devs[0], (int)devs[n - 1], got);
        }
    }
    sm_store_observe(store, sm_disk_observer(), *out);
    sm_store_spill_to(store, sm_disk_spiller(), *out);
    acfg->on_identity = worker_identity_saved;
    acfg->on_identity_user = *out;
    return SM_OK;
}

/* The worker's metrics (--metrics-listen): its devices' shards and bytes,
 * and the memory its shards and jobs may use and use. */
/* What the worker's metrics read (--metrics-listen). */
typedef struct {
    sm_store *store;
    sm_rpc_server *server;
} worker_metrics_src;

/* A shard-traffic counter family: its put (in), get (out) and peer (in)
 * paths. */
static void traffic_metric(sm_strbuf *b, const char *name, const char *help, uint64_t put,
                           uint64_t get, uint64_t peer)
{
    sm_metrics_help(b, name, "counter", help);
    sm_strbuf_printf(b,
                     "%s{path=\"put\",direction=\"in\"} %llu\n"
                     "%s{path=\"get\",direction=\"out\"} %llu\n"
                     "%s{path=\"peer\",direction=\"in\"} %llu\n",
                     name, (unsigned long long)put, name, (unsigned long long)get, name,
                     (unsigned long long)peer);
}

static sm_err worker_metrics(void *user, sm_strbuf *b)
{
    const worker_metrics_src *src = user;
    sm_store *store = src->store;
    int32_t devs[SM_MAX_WORKER_DEVICES];
    int64_t bytes[SM_MAX_WORKER_DEVICES], shards = 0;
    int n = sm_store_stats(store, devs, bytes, &shards);
    sm_array_pool_info ci;
    sm_array_pool_stats(sm_store_pool(store), &ci);
    sm_metrics_help(b, "shmap_worker_build_info", "gauge", "The worker's version.");
    sm_strbuf_printf(b, "shmap_worker_build_info{version=\"%s\"} 1\n", SM_VERSION);
    sm_metrics_help(b, "shmap_worker_device_used_bytes", "gauge", "Bytes of shards per device.");
    for (int k = 0; k < n; k++)
        sm_strbuf_printf(b, "shmap_worker_device_used_bytes{device=\"%d\"} %lld\n", (int)devs[k],
                         (long long)bytes[k]);
    sm_metrics_value(b, "shmap_worker_shards", "gauge", "Shards held on this worker's devices.",
                     (long long)shards);
    sm_metrics_value(b, "shmap_worker_memory_limit_bytes", "gauge",
                     "The most shard and job memory it may hold (--memory-limit-mb; 0: none).",
                     (long long)ci.limit_bytes);
    sm_metrics_value(b, "shmap_worker_memory_used_bytes", "gauge",
                     "Shard and job memory in use, kept blocks included.",
                     (long long)ci.live_bytes);
    sm_metrics_value(b, "shmap_worker_memory_shm_bytes", "gauge",
                     "Of the memory in use: pages of this worker's shared-memory segments "
                     "allocated for running jobs' collectives and reshard pulls in flight.",
                     (long long)ci.other_bytes);
    sm_metrics_value(b, "shmap_worker_memory_arena_bytes", "gauge",
                     "Of the memory in use: array blocks in this worker's file in /dev/shm, "
                     "where its peers on the host read collective inputs in place (kept "
                     "blocks included).",
                     (long long)sm_shm_arena_used(sm_array_pool_arena(sm_store_pool(store))));
    sm_metrics_value(b, "shmap_worker_buffer_cache_bytes", "gauge",
                     "Freed blocks kept for reuse (--buffer-cache-mb).", (long long)ci.held_bytes);
    sm_metrics_help(b, "shmap_worker_buffer_cache_allocations_total", "counter",
                    "Allocations of 1 MiB and more, served from kept blocks (hit) or fresh.");
    sm_strbuf_printf(b,
                     "shmap_worker_buffer_cache_allocations_total{result=\"hit\"} %lld\n"
                     "shmap_worker_buffer_cache_allocations_total{result=\"miss\"} %lld\n",
                     (long long)ci.hits, (long long)ci.misses);
    uint64_t t[SM_TRAFFIC_COUNT];
    sm_traffic_get(t);
    traffic_metric(b, "shmap_worker_transfer_bytes_total",
                   "Shard bytes moved over gRPC: received by PutShard (uploads, reshards), sent "
                   "by GetShard (downloads, peers' pulls), pulled from peers (reshards).",
                   t[SM_TRAFFIC_PUT_IN], t[SM_TRAFFIC_GET_OUT], t[SM_TRAFFIC_PEER_IN]);
    traffic_metric(b, "shmap_worker_shm_transfer_bytes_total",
                   "Shard bytes moved through shared-memory segments on this host: copied out "
                   "of clients' buffers by PutShard, into clients' buffers or peers' staging "
                   "by GetShard (downloads, peers' reshard pulls), out of this worker's "
                   "staging (reshard pieces peers wrote there).",
                   t[SM_TRAFFIC_SHM_PUT_IN], t[SM_TRAFFIC_SHM_GET_OUT], t[SM_TRAFFIC_SHM_PEER_IN]);
    sm_metrics_help(b, "shmap_worker_collective_bytes_total", "counter",
                    "Collective blocks exchanged with other workers, by transport (devices of "
                    "one worker meet in memory and move nothing).");
    sm_strbuf_printf(
        b,
        "shmap_worker_collective_bytes_total{transport=\"grpc\",direction=\"sent\"} %llu\n"
        "shmap_worker_collective_bytes_total{transport=\"grpc\",direction=\"received\"} %llu\n"
        "shmap_worker_collective_bytes_total{transport=\"shm\",direction=\"received\"} %llu\n",
        (unsigned long long)t[SM_TRAFFIC_COLL_OUT], (unsigned long long)t[SM_TRAFFIC_COLL_IN],
        (unsigned long long)t[SM_TRAFFIC_SHM_IN]);
    sm_metrics_help(b, "shmap_worker_collective_in_place_bytes_total", "counter",
                    "Of the collective bytes received through shared memory, those read from "
                    "the peers' array memory where it lies (inputs of 1 MiB and more), with no "
                    "copy or partial written into the peers' segments first.");
    sm_strbuf_printf(b, "shmap_worker_collective_in_place_bytes_total %llu\n",
                     (unsigned long long)t[SM_TRAFFIC_SHM_DIRECT_IN]);
    sm_metrics_rpc(src->server, b);
    return b->oom ? SM_ENOMEM : SM_OK;
}

/* The span of this worker's arena: twice what /dev/shm holds (sparse: only
 * blocks in use have pages; the slack keeps released ranges from crowding
 * the address space), at least 1 GiB, at most 4 TiB; 0 if /dev/shm cannot
 * be read. *reserve: a quarter of /dev/shm, which the arena leaves free
 * for job segments and clients' staging. */
static size_t worker_arena_span(size_t *reserve)
{
    struct statvfs v;
    if (statvfs("/dev/shm", &v))
        return 0;
    uint64_t shm = (uint64_t)v.f_frsize * v.f_blocks, gib = (uint64_t)1 << 30;
    uint64_t total = (shm * 2 + gib - 1) & ~(gib - 1);
    *reserve = (size_t)(shm / 4);
    return (size_t)(total < gib ? gib : total > (gib << 12) ? gib << 12 : total);
}

int main(int argc, char **argv)
{
    sm_config_value cfg[CFG_COUNT];
    char err[512], host[256], advertise[320], hostname[64] = "";
    sm_rpc_server *server = NULL;
    worker_metrics_src msrc = {0};
    sm_array_pool *arrays = NULL;
    sm_store *store = NULL;
    sm_peer *peers = NULL;
    sm_rpc_tls *tls = NULL;
    sm_agent *agent = NULL;
    sm_disk *disk = NULL;
    sm_metrics_http *metrics = NULL;
    sm_jobs *jobs = NULL;
    sm_segmap *segs = NULL;
    sm_handlers ctx;
    long port = 0;
    int rc = 1, rpc_up = 0;
    sigset_t sigs;

    /* Block the stop signals first (the mask survives the core-type re-exec
     * and is inherited by every thread); the main thread takes them with
     * sigwait once the worker is up, so an early SIGTERM is not lost. */
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    sm_worker_malloc_tune(); /* before our threads start; kept across the re-exec */
    sm_kern_coretype_setup(argc, argv);
    sm_err e = sm_config_parse(worker_config, CFG_COUNT, cfg, argc, argv, worker_usage, NULL, err,
                               sizeof err);
    if (e == SM_ECANCELLED)
        return 0;
    if (e)
        return usage_error(err);
    if (!cfg[CFG_COORDINATOR].s || !*cfg[CFG_COORDINATOR].s)
        return usage_error("--coordinator HOST:PORT (or SHMAP_COORDINATOR) is required.");
    if (!split_host_port(cfg[CFG_COORDINATOR].s, host, sizeof host, &port) || port == 0)
        return usage_error("--coordinator must be HOST:PORT with a port in 1..65535.");
    int64_t ndevices = cfg[CFG_DEVICES].i;
    if (ndevices < 1 || ndevices > SM_MAX_WORKER_DEVICES) {
        snprintf(err, sizeof err, "--devices must be in 1..%d, not %lld.", SM_MAX_WORKER_DEVICES,
                 (long long)ndevices);
        return usage_error(err);
    }
    if (cfg[CFG_PROCESS_INDEX].i < -1 || cfg[CFG_PROCESS_INDEX].i > 1000000)
        return usage_error("--process-index must be -1 (assign) or a non-negative index.");
    if (cfg[CFG_BLAS_THREADS].i < 1 || cfg[CFG_BLAS_THREADS].i > 1024)
        return usage_error("--blas-threads must be in 1..1024.");
    if (cfg[CFG_CACHE_MB].i < -1 || cfg[CFG_CACHE_MB].i > (INT64_C(1) << 30))
        return usage_error("--buffer-cache-mb must be -1 (automatic), 0 (none) or a size in MiB.");
    if (cfg[CFG_MEM_LIMIT_MB].i < -1 || cfg[CFG_MEM_LIMIT_MB].i > (INT64_C(1) << 30))
        return usage_error(
            "--memory-limit-mb must be -1 (automatic), 0 (no limit) or a size in MiB.");
    if (cfg[CFG_WORKER_ID].i < 0 || cfg[CFG_WORKER_ID].i >= (INT64_C(1) << 31))
        return usage_error("--worker-id must be 0 (none) or an id in 1..2147483647.");
    if (cfg[CFG_SHM_SWEEP_S].i < 0 || cfg[CFG_SHM_SWEEP_S].i > 86400)
        return usage_error("--shm-sweep-s must be 0 (none) to 86400 seconds.");
    if (cfg[CFG_SPIN_US].i < 0 || cfg[CFG_SPIN_US].i > SM_SPIN_US_MAX)
        return usage_error("--spin-us must be 0 (never poll) to 10000 microseconds.");
    sm_spin_set_us(cfg[CFG_SPIN_US].i);
    if (cfg[CFG_MAX_MESSAGE_MB].i < 1 || cfg[CFG_MAX_MESSAGE_MB].i > (SM_RPC_MAX_MSG >> 20))
        return usage_error("--max-message-mb must be between 1 and 8.");
    const char *transport = cfg[CFG_TRANSPORT].s ? cfg[CFG_TRANSPORT].s : "";
    if (strcmp(transport, "auto") && strcmp(transport, "grpc") && strcmp(transport, "shm"))
        return usage_error("--transport must be auto, grpc or shm.");
    if (sm_log_configure(cfg[CFG_LOG_LEVEL].s, cfg[CFG_LOG_FORMAT].s, err, sizeof err))
        return usage_error(err);
    if (!split_host_port(cfg[CFG_LISTEN].s, host, sizeof host, &port))
        return usage_error("--listen must be HOST:PORT (port 0 picks a free port).");
    if (cfg[CFG_ADVERTISE].s && *cfg[CFG_ADVERTISE].s &&
        (!split_host_port(cfg[CFG_ADVERTISE].s, advertise, sizeof advertise, &port) || port == 0))
        return usage_error("--advertise must be HOST:PORT with a port in 1..65535.");

    sm_rpc_tls_opts tls_opts;
    if (sm_rpc_tls_opts_from_config(&cfg[CFG_TLS_CERT], &tls_opts))
        return usage_error("--tls-cert, --tls-key and --tls-ca go together: a worker serves "
                           "with its certificate, shows it to the coordinator and peers, and "
                           "verifies theirs with the CA.");

    if (cfg[CFG_EXIT_WITH_PARENT].i) {
        pid_t parent = getppid();
        /* SIGTERM is blocked: the sigwait below takes it, as any stop. */
        if (prctl(PR_SET_PDEATHSIG, SIGTERM) != 0 || parent == 1)
            return usage_error("--exit-with-parent: the parent is already gone.");
    }
    sm_log_set_name("worker");
    sm_kern_set_threads((int)cfg[CFG_BLAS_THREADS].i);
    const char *best = sm_kern_best_coretype();
    SM_INFO("OpenBLAS core %s (best for this CPU: %s), %lld thread(s) per device",
            sm_kern_corename(), best ? best : "unknown", (long long)cfg[CFG_BLAS_THREADS].i);

    signal(SIGPIPE, SIG_IGN);

    sm_rpc_malloc_tune();
    sm_rpc_log_through_sm();
    sm_rpc_init();
    mallopt(M_MMAP_THRESHOLD, SM_WORKER_MMAP_THRESHOLD);
    mallopt(M_TRIM_THRESHOLD, SM_WORKER_TRIM_THRESHOLD);
    size_t cache = worker_cache_bytes(cfg[CFG_CACHE_MB].i);
    int64_t limit_mb = cfg[CFG_MEM_LIMIT_MB].i;
    uint64_t limit = limit_mb >= 0 ? (uint64_t)limit_mb << 20 : sm_sys_memory_bytes() / 10 * 9;
    rpc_up = 1;
    if ((e = sm_array_pool_create(&arrays, err, sizeof err)))
        goto fail;
    sm_array_pool_cache_set(arrays, cache, SM_WORKER_CACHE_IDLE_MS);
    sm_array_pool_limit_set(arrays, (size_t)limit);
    if (strcmp(transport, "grpc")) { /* peers on this host read collective inputs in place */
        sm_shm_arena *arena = NULL;
        size_t reserve = 0, span = worker_arena_span(&reserve);
        char why[256] = "/dev/shm cannot be read";
        if (span && !sm_shm_arena_create(span, &arena, why, sizeof why)) {
            sm_shm_arena_reserve_set(arena, reserve);
            sm_array_pool_arena_set(arrays, arena);
        } else
            SM_INFO("array memory stays private (%s): collectives with workers on this host "
                    "copy their inputs (or partials) into shared memory first",
                    why);
    }
    if (cfg[CFG_SPIN_US].i != SM_SPIN_US_DEFAULT)
        SM_INFO("a collective's wait polls for up to %lld us before it sleeps (--spin-us %lld)",
                (long long)cfg[CFG_SPIN_US].i, (long long)cfg[CFG_SPIN_US].i);
    if (limit)
        SM_INFO("shard and job memory limited to %llu MiB (--memory-limit-mb); freed blocks "
                "kept for reuse up to %zu MiB (--buffer-cache-mb)",
                (unsigned long long)(limit >> 20), cache >> 20);
    else
        SM_INFO("no limit on shard and job memory (--memory-limit-mb 0); freed blocks kept for "
                "reuse up to %zu MiB (--buffer-cache-mb)",
                cache >> 20);
    if ((e = sm_store_create(arrays, &store, err, sizeof err)))
        goto fail;
    sm_agent_config acfg = {.ndevices = (int)ndevices, .worker_id = (uint32_t)cfg[CFG_WORKER_ID].i};
    if (cfg[CFG_STATE_DIR].s && *cfg[CFG_STATE_DIR].s &&
        (e = worker_state_open(cfg[CFG_STATE_DIR].s, store, &acfg, &disk, err, sizeof err)))
        goto fail;
    if ((e = sm_rpc_tls_create(&tls_opts, &tls, err, sizeof err)))
        goto fail;
    if (tls)
        SM_INFO("mutual TLS: %s; every caller must present a certificate the CA signs%s",
                sm_rpc_tls_describe(tls),
                cfg[CFG_TOKEN].s && *cfg[CFG_TOKEN].s
                    ? " (but for PutShard and GetShard with the coordinator's grants)"
                    : "");
    else
        sm_log(sm_rpc_addr_is_loopback(cfg[CFG_LISTEN].s) ? SM_LOG_INFO : SM_LOG_WARN,
               "plaintext: no TLS (--tls-cert, --tls-key, --tls-ca); use it on loopback or a "
               "trusted network only");
    if ((e = sm_peer_create(cfg[CFG_TOKEN].s, tls, 120000, &peers, err, sizeof err)))
        goto fail;
    /* with a token, PutShard and GetShard also take the grants the
     * coordinator, which has the same token, gives tenants */
    sm_grant_key grant_key;
    if (cfg[CFG_TOKEN].s && *cfg[CFG_TOKEN].s)
        sm_grant_key_derive(cfg[CFG_TOKEN].s, &grant_key);
    sm_rpc_server_opts opts = {.addr = cfg[CFG_LISTEN].s,
                               .token = cfg[CFG_TOKEN].s,
                               .max_message_bytes = (int)(cfg[CFG_MAX_MESSAGE_MB].i << 20),
                               .tls = tls,
                               /* with grants, a tenant's client has a CA but no
                                  certificate: only the grant methods take it */
                               .require_client_cert = !(cfg[CFG_TOKEN].s && *cfg[CFG_TOKEN].s),
                               .all_cluster_only = 1,
                               .grant_key =
                                   cfg[CFG_TOKEN].s && *cfg[CFG_TOKEN].s ? &grant_key : NULL};
    if ((e = sm_rpc_server_create(&opts, &server, err, sizeof err)))
        goto fail;
    if (cfg[CFG_ADVERTISE].s && *cfg[CFG_ADVERTISE].s) {
        snprintf(advertise, sizeof advertise, "%s", cfg[CFG_ADVERTISE].s);
    } else {
        const char *h = host;
        if (!*h || !strcmp(h, "0.0.0.0") || !strcmp(h, "*"))
            h = "127.0.0.1";
        else if (!strcmp(h, "[::]") || !strcmp(h, "::"))
            h = "[::1]";
        snprintf(advertise, sizeof advertise, "%s:%d", h, sm_rpc_server_port(server));
    }
    /* clients on this host upload and download through their segments,
     * and reshard pieces come from peers on this host through this
     * worker's staging, unless the worker keeps to gRPC */
    if (strcmp(transport, "grpc") && ((e = sm_segmap_create(&segs, err, sizeof err)) ||
                                      (e = sm_peer_shm_enable(peers, arrays, err, sizeof err))))
        goto fail;
    ctx = (sm_handlers){.store = store,
                        .peers = peers,
                        .self_address = advertise,
                        .assemble_threads = ndevices < 4 ? (int)ndevices : 4,
                        .segs = segs};
    int swept = sm_shm_sweep(SM_SHM_SWEEP_AGE_S); /* what workers killed earlier left in /dev/shm */
    if (swept)
        SM_INFO("removed %d shared-memory segment(s) left by processes that ended", swept);
    sm_jobs_config jcfg = {.store = store,
                           .peers = peers,
                           .self_address = advertise,
                           .shm = !strcmp(transport, "shm") ? 2 : strcmp(transport, "grpc") != 0};
    if ((e = sm_jobs_create(&jcfg, &jobs, err, sizeof err)) ||
        (e = sm_svc_worker_serve(server, &sm_handlers_ops, &ctx, "shmap-worker", err,
                                 sizeof err)) ||
        (e = sm_svc_worker_jobs_serve(server, &sm_jobs_ops, jobs, err, sizeof err)) ||
        (e = sm_rpc_server_start(server, err, sizeof err)))
        goto fail;
    SM_INFO("serving shmap.v1.Worker on %s (port %d)%s, advertised as %s, %lld device(s)",
            cfg[CFG_LISTEN].s, sm_rpc_server_port(server), tls ? " over mutual TLS" : "", advertise,
            (long long)ndevices);
    if (cfg[CFG_METRICS].s && *cfg[CFG_METRICS].s) {
        int mport;
        msrc = (worker_metrics_src){store, server};
        if ((e = sm_metrics_http_start(cfg[CFG_METRICS].s, worker_metrics, &msrc, &metrics, &mport,
                                       err, sizeof err)))
            goto fail;
        SM_INFO("serving Prometheus metrics on http://%s/metrics (port %d)", cfg[CFG_METRICS].s,
                mport);
    }

    gethostname(hostname, sizeof hostname - 1);
    acfg.coordinator = cfg[CFG_COORDINATOR].s;
    acfg.token = cfg[CFG_TOKEN].s;
    acfg.tls = tls;
    acfg.address = advertise;
    acfg.host = hostname;
    acfg.process_index = (int)cfg[CFG_PROCESS_INDEX].i;
    acfg.store = store;
    acfg.shm_sweep_s = (int)cfg[CFG_SHM_SWEEP_S].i;
    if ((e = sm_agent_start(&acfg, &agent, err, sizeof err)))
        goto fail;

    int sig = 0;
    while (sigwait(&sigs, &sig) != 0)
        ;
    SM_INFO("received %s; shutting down", sig == SIGTERM ? "SIGTERM" : "SIGINT");
    rc = 0;
fail:
    if (rc)
        SM_ERROR("%s", err);
    sm_metrics_http_stop(metrics);
    sm_jobs_stop(jobs);
    if (server)
        sm_rpc_server_stop(server);
    sm_agent_stop(agent);
    sm_rpc_server_free(server);
    sm_jobs_free(jobs);
    sm_segmap_free(segs);
    sm_peer_free(peers);
    if (store) {
        sm_store_spill_to(store, NULL, NULL);
        sm_store_observe(store, NULL, NULL); /* the disk copies stay */
    }
    sm_disk_free(disk);
    sm_store_free(store);
    sm_array_pool_free(arrays);
    sm_rpc_tls_free(tls);
    if (rpc_up)
        sm_rpc_shutdown_or_exit(2000, rc); /* or _exit(rc) after 2 s */
    if (!rc)
        SM_INFO("stopped");
    return rc;
}
