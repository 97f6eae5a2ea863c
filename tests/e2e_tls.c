/* e2e_tls: a real cluster (coordinator + 2 local workers) over TLS, with
 * certificates made at test time by scripts/tls_certs.sh (openssl): the
 * cluster's CA, its cluster certificate (SAN 127.0.0.1 and localhost) and
 * a client certificate, and a second, unrelated CA with its own
 * certificates (the stranger's).
 *
 * - A client with only the CA puts, gets and runs a job whose psum
 *   crosses the two workers (worker<->worker over mutual TLS); its data
 *   goes through the coordinator, since it has no client certificate.
 * - A client with the client certificate does the same over direct
 *   transfers.
 * - Refused: a plaintext client, a client trusting the stranger's CA, a
 *   client offering the stranger's certificate; RegisterWorker and
 *   Heartbeat from a caller without a client certificate
 *   (PERMISSION_DENIED); a worker port called without a client certificate
 *   or in plaintext; a real shmap-worker with the stranger's certificate
 *   never registers.
 * - Start-up: a key of another certificate, a missing file, a partial set
 *   of flags are refused with a sentence naming the file or flags.
 * - With tenants (--token and --tokens), a tenant's client with the CA
 *   alone moves its data straight to the workers with grants; the worker
 *   ports take a caller without a certificate for nothing else. */
#define _GNU_SOURCE
#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "client_internal.h"
#include "harness.h"
#include "harness_proc.h"
#include "harness_svc.h"
#include "shmap_job.h"
#include "sm_rpc.h"
#include "sm_svc.h"
#include "suite_main.h"

static char *g_dir;        /* temp dir: cluster/ and stranger/ certificates */
static harness_cluster *g; /* the TLS cluster */
static char g_worker[256]; /* a worker's address (from ListDevices) */
static char g_ca[600], g_cert[600], g_key[600], g_ccert[600], g_ckey[600];
static char g_xca[600], g_xcert[600], g_xkey[600]; /* the stranger's */

static void path(char *out, const char *sub, const char *file)
{
    snprintf(out, 600, "%s/%s/%s", g_dir, sub, file);
}

/* Runs argv (NULL-terminated), output to log (NULL: /dev/null); returns
 * its exit status (128 + signal), or -1 if it could not start. */
static int run(char *const *argv, const char *log)
{
    pid_t pid = harness_spawn_log(argv, log, HARNESS_SPAWN_PATH);
    int st;
    if (pid < 0 || waitpid(pid, &st, 0) != pid)
        return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static char *slurp(const char *file)
{
    FILE *f = fopen(file, "r");
    char *buf = calloc(1, 65536);
    if (f && buf)
        buf[fread(buf, 1, 65535, f)] = 0;
    if (f)
        fclose(f);
    return buf;
}

/* The cluster's and the stranger's certificates into g_dir; exits on
 * failure (before any test runs). */
static void certs_make(void)
{
    const char *script = getenv("SM_TLS_CERTS");
    char dir[600];
    if (!script || !*script || !(g_dir = harness_tmpdir())) {
        fprintf(stderr, "e2e_tls: SM_TLS_CERTS (scripts/tls_certs.sh) is not set\n");
        exit(1);
    }
    for (int k = 0; k < 2; k++) {
        snprintf(dir, sizeof dir, "%s/%s", g_dir, k ? "stranger" : "cluster");
        char *argv[] = {"bash", (char *)script, dir, "localhost", "127.0.0.1", NULL};
        if (run(argv, NULL) != 0) {
            fprintf(stderr, "e2e_tls: %s failed (is openssl installed?)\n", script);
            exit(1);
        }
    }
    path(g_ca, "cluster", "ca.pem");
    path(g_cert, "cluster", "cluster.pem");
    path(g_key, "cluster", "cluster.key");
    path(g_ccert, "cluster", "client.pem");
    path(g_ckey, "cluster", "client.key");
    path(g_xca, "stranger", "ca.pem");
    path(g_xcert, "stranger", "cluster.pem");
    path(g_xkey, "stranger", "cluster.key");
}

static void cluster_up(void)
{
    char err[512];
    harness_opts o = {.nworkers = 2,
                      .devices_per_worker = 2,
                      .tls_cert = g_cert,
                      .tls_key = g_key,
                      .tls_ca = g_ca};
    g = harness_cluster_up_opts(&o, "e2e_tls");
    sm_client *c = harness_client(g);
    if (harness_first_worker(c, g_worker, sizeof g_worker, err, sizeof err)) {
        fprintf(stderr, "e2e_tls: devices: %s\n", err);
        exit(1);
    }
    sm_client_close(c);
}

static void cluster_down(void)
{
    harness_cluster_down(&g);
}

/* Connects with the given TLS files (NULL: none); returns the error code
 * (the client, if any, in *out). */
static sm_err connect_tls(const char *ca, const char *cert, const char *key, sm_client **out,
                          char *err, size_t errlen)
{
    sm_client_opts o = {.timeout_ms = 10000, .tls_ca = ca, .tls_cert = cert, .tls_key = key};
    *out = NULL;
    return sm_client_connect(g->target, &o, out, err, errlen);
}

/* put, get (bit-exact), a job whose psum crosses both workers, its result
 * checked, everything deleted. */
static void put_get_run(sm_client *c)
{
    char err[1024];
    sm_mesh mesh;
    sm_sharding_ref sh = harness_sharding(&mesh, "i=4", NULL, 0, "P('i')");
    sm_shape s = HARNESS_SHAPE(8, 6);
    sm_array *x = harness_array_iota(SM_F32, &s, 3), *back = NULL;
    sm_array_info info;
    ck_assert_msg(sm_client_put(c, SM_F32, &s, x->data, &sh, NULL, &info, err, sizeof err) == SM_OK,
                  "put: %s", err);
    ck_assert_msg(sm_client_get(c, harness_id_ref(info.id), &back, err, sizeof err) == SM_OK,
                  "get: %s", err);
    ck_assert_int_eq(memcmp(back->data, x->data, 8 * 6 * sizeof(float)), 0);
    sm_array_free(back);
    back = NULL;

    /* Devices 0,1 are on one worker and 2,3 on the other: the psum over
     * 'i' adds blocks of both workers. */
    sm_program *p = harness_program("mesh i=4\n"
                                    "shard_map f(a: f32[8,6] @ P('i')) -> P(None):\n"
                                    "    return psum(a, 'i')\n",
                                    "tls.shmap");
    sm_array_ref args[1] = {harness_id_ref(info.id)};
    sm_job_info job;
    sm_err e = sm_job_run(c, p, 1, args, NULL, 1, 0, 30000, &job, err, sizeof err);
    ck_assert_msg(e == SM_OK, "job: %s", err);
    ck_assert_msg(job.state == SM_JOB_DONE, "job %s: %s", sm_job_state_name(job.state), job.error);
    ck_assert_int_eq(job.noutputs, 1);
    ck_assert_int_eq(sm_client_get(c, harness_id_ref(job.outputs[0].id), &back, err, sizeof err),
                     SM_OK);
    const float *in = x->data, *out = back->data;
    for (int r = 0; r < 2; r++)
        for (int k = 0; k < 6; k++) {
            float want = 0;
            for (int b = 0; b < 4; b++)
                want += in[(b * 2 + r) * 6 + k];
            ck_assert_msg(out[r * 6 + k] == want, "psum[%d,%d] = %g, want %g", r, k,
                          (double)out[r * 6 + k], (double)want);
        }
    ck_assert_int_eq(sm_client_delete(c, harness_id_ref(job.outputs[0].id), err, sizeof err),
                     SM_OK);
    ck_assert_int_eq(sm_client_delete(c, harness_id_ref(info.id), err, sizeof err), SM_OK);
    sm_job_info_free(&job);
    sm_program_free(p);
    sm_array_free(back);
    sm_array_free(x);
    sm_array_info_free(&info);
}

/* Clients that trust the CA: with the CA alone (no client certificate: no
 * direct channel to a worker, the relay), and with a client certificate
 * (the worker accepts it: transfers go there directly). */
static const struct {
    const char *name;
    int cert; /* 1: with the client certificate */
} tls_clients[] = {
    {"ca_client_relays: connect with the CA", 0},
    {"cert_client_direct: connect with a client certificate", 1},
};

START_TEST(test_tls_client)
{
    sm_client *c;
    char err[1024];
    int cert = tls_clients[_i].cert;
    sm_err e = connect_tls(g_ca, cert ? g_ccert : NULL, cert ? g_ckey : NULL, &c, err, sizeof err);
    ck_assert_msg(e == SM_OK, "%s: %s", tls_clients[_i].name, err);
    int direct = client_worker_channel(c, g_worker) != NULL;
    ck_assert_msg(direct == cert, "%s: a direct channel to the worker: %d", tls_clients[_i].name,
                  direct);
    put_get_run(c);
    sm_client_close(c);
}
END_TEST

/* _i: 0 plaintext, 1 trusting the stranger's CA, 2 offering the
 * stranger's certificate (trusting the right CA). */
START_TEST(test_client_refused)
{
    sm_client *c;
    char err[1024];
    const char *ca = _i == 0 ? NULL : _i == 1 ? g_xca : g_ca;
    sm_err e =
        connect_tls(ca, _i == 2 ? g_xcert : NULL, _i == 2 ? g_xkey : NULL, &c, err, sizeof err);
    ck_assert_msg(e == SM_EUNAVAILABLE, "case %d: connect gave %s: %s", _i, sm_err_name(e), err);
    ck_assert_ptr_null(c);
    if (_i == 0)
        ck_assert_msg(strstr(err, "--tls-ca"), "no hint at TLS: %s", err);
}
END_TEST

/* A channel to target with the given TLS files (NULL ca: plaintext). */
static sm_rpc_channel *channel(const char *target, const char *ca, const char *cert,
                               const char *key, sm_rpc_tls **tls)
{
    sm_rpc_channel *ch = NULL;
    char err[512];
    sm_rpc_tls_opts o = {cert, key, ca, NULL};
    ck_assert_msg(sm_rpc_tls_create(&o, tls, err, sizeof err) == SM_OK, "%s", err);
    ck_assert_int_eq(sm_rpc_channel_create_tls(target, NULL, *tls, &ch, err, sizeof err), SM_OK);
    return ch;
}

/* ---- tenants over TLS ---------------------------------------------------- */

#define CLUSTER "cluster-token-0123456789"
#define ALICE   "alice-token-0123456789abc"

static harness_cluster *g_t; /* a TLS cluster with tenants */

static void tenants_up(void)
{
    char tokens[700];
    snprintf(tokens, sizeof tokens, "%s/tokens", g_dir);
    FILE *f = fopen(tokens, "w");
    if (!f || fputs("alice " ALICE "\n", f) < 0 || fclose(f)) {
        fprintf(stderr, "e2e_tls: cannot write %s\n", tokens);
        exit(1);
    }
    const char *args[] = {"--tokens", tokens, NULL};
    harness_opts o = {.nworkers = 2,
                      .devices_per_worker = 2,
                      .token = CLUSTER,
                      .coord_args = args,
                      .tls_cert = g_cert,
                      .tls_key = g_key,
                      .tls_ca = g_ca};
    g_t = harness_cluster_up_opts(&o, "e2e_tls: the cluster with tenants");
}

static void tenants_down(void)
{
    harness_cluster_down(&g_t);
}

/* GetShard of array id's shard on device from the worker at addr over TLS
 * with the CA alone (and cert, key if not NULL), with token and grant
 * (NULL: none), read to its end. */
static sm_err tls_get(const char *addr, const char *token, const char *cert, const char *key,
                      sm_array_id id, int32_t device, const unsigned char *grant, char *err,
                      size_t errlen)
{
    sm_rpc_tls *tls = NULL;
    sm_rpc_channel *ch = NULL;
    sm_rpc_tls_opts o = {cert, key, g_ca, NULL};
    ck_assert_int_eq(sm_rpc_tls_create(&o, &tls, err, errlen), SM_OK);
    ck_assert_int_eq(sm_rpc_channel_create_tls(addr, token, tls, &ch, err, errlen), SM_OK);
    sm_err e = harness_svc_get_shard(ch, id, device, grant, err, errlen);
    sm_rpc_channel_free(ch);
    sm_rpc_tls_free(tls);
    return e;
}

/* A tenant's client with the CA alone moves its data straight to and from
 * the workers with the coordinator's grants (their ports take a caller
 * without a client certificate for PutShard and GetShard with grants,
 * nothing else); the cluster's token without the certificate opens no
 * worker method. */
START_TEST(test_tenant_grants)
{
    sm_client_opts o = {.timeout_ms = 10000, .token = ALICE, .tls_ca = g_ca};
    sm_client *c = NULL;
    char err[1024];
    ck_assert_msg(sm_client_connect(g_t->target, &o, &c, err, sizeof err) == SM_OK, "%s", err);
    char addr[SM_ADDR_MAX];
    ck_assert_msg(harness_first_worker(c, addr, sizeof addr, err, sizeof err) == SM_OK, "%s", err);
    ck_assert_ptr_nonnull(client_worker_channel(c, addr)); /* direct, without a certificate */
    put_get_run(c);
    /* the worker port, without a client certificate */
    sm_mesh mesh;
    sm_sharding_ref sh = harness_sharding(&mesh, "i=4", NULL, 0, "P('i')");
    sm_shape s = HARNESS_SHAPE(8, 6);
    sm_array *x = harness_array_iota(SM_F32, &s, 3);
    sm_array_info put, info;
    ck_assert_msg(sm_client_put(c, SM_F32, &s, x->data, &sh, "g", &put, err, sizeof err) == SM_OK,
                  "put: %s", err);
    ck_assert_int_eq(sm_client_describe(c, (sm_array_ref){{0}, "g"}, &info, err, sizeof err),
                     SM_OK);
    const sm_shard_info *sa = &info.shards[0];
    ck_assert_int_eq(sa->grant_len, SM_GRANT_LEN);
    ck_assert_msg(tls_get(sa->worker_address, ALICE, NULL, NULL, info.id, sa->device, sa->grant,
                          err, sizeof err) == SM_OK,
                  "%s", err);
    sm_err e =
        tls_get(sa->worker_address, ALICE, NULL, NULL, info.id, sa->device, NULL, err, sizeof err);
    ck_assert_msg(e == SM_EAUTH && strstr(err, "nor a grant"), "%s: %s", sm_err_name(e), err);
    /* the cluster's token is half its credential over TLS: no grant, no read */
    e = tls_get(sa->worker_address, CLUSTER, NULL, NULL, info.id, sa->device, NULL, err,
                sizeof err);
    ck_assert_msg(e == SM_EAUTH, "%s: %s", sm_err_name(e), err);
    ck_assert_msg(tls_get(sa->worker_address, CLUSTER, g_ccert, g_ckey, info.id, sa->device, NULL,
                          err, sizeof err) == SM_OK,
                  "%s", err);
    /* and every other worker method needs the certificate */
    sm_rpc_tls *tls = NULL;
    sm_rpc_tls_opts to = {NULL, NULL, g_ca, NULL};
    sm_rpc_channel *ch = NULL;
    ck_assert_int_eq(sm_rpc_tls_create(&to, &tls, err, sizeof err), SM_OK);
    ck_assert_int_eq(
        sm_rpc_channel_create_tls(sa->worker_address, CLUSTER, tls, &ch, err, sizeof err), SM_OK);
    sm_svc_worker_stats st;
    e = sm_svc_worker_stats_get(ch, 10000, &st, err, sizeof err);
    ck_assert_msg(e == SM_EPERM && strstr(err, "client certificate"), "%s: %s", sm_err_name(e),
                  err);
    uint32_t version = 0;
    e = sm_svc_negotiate(ch, 1, "e2e_tls", &version, NULL, 0, 10000, err, sizeof err);
    ck_assert_msg(e == SM_EPERM, "%s: %s", sm_err_name(e), err);
    sm_rpc_channel_free(ch);
    sm_rpc_tls_free(tls);
    sm_array_free(x);
    sm_array_info_free(&put);
    sm_array_info_free(&info);
    sm_client_close(c);
}
END_TEST

/* RegisterWorker and Heartbeat need a client certificate of the cluster's
 * CA; the same channel is served other methods. */
START_TEST(test_register_needs_cert)
{
    sm_rpc_tls *tls = NULL;
    sm_rpc_channel *ch = channel(g->target, g_ca, NULL, NULL, &tls);
    char err[1024];
    uint32_t version = 0;
    char server[64];
    ck_assert_msg(sm_svc_negotiate(ch, 0, "e2e_tls", &version, server, sizeof server, 10000, err,
                                   sizeof err) == SM_OK,
                  "%s", err);
    sm_svc_register_req req = {
        .address = "127.0.0.1:9", .ndevices = 2, .process_index = -1, .host = "impostor"};
    sm_svc_register_reply rep;
    sm_err e = sm_svc_coord_register(ch, 10000, &req, &rep, err, sizeof err);
    ck_assert_msg(e == SM_EPERM, "register gave %s: %s", sm_err_name(e), err);
    ck_assert_msg(strstr(err, "PERMISSION_DENIED") && strstr(err, "client certificate"), "%s", err);
    sm_svc_heartbeat_req hb = {.worker_id = {1}};
    int known = -1;
    e = sm_svc_coord_heartbeat(ch, 10000, &hb, &known, err, sizeof err);
    ck_assert_msg(e == SM_EPERM, "heartbeat gave %s: %s", sm_err_name(e), err);
    sm_rpc_channel_free(ch);
    sm_rpc_tls_free(tls);
    /* still two workers, nothing registered */
    sm_client *c = harness_client(g);
    ck_assert_msg(harness_wait_workers(c, 2, 1, err, sizeof err) == SM_OK, "%s", err);
    int n = 0;
    sm_worker_info *w = harness_workers(c, &n);
    ck_assert_int_eq(n, 2);
    free(w);
    sm_client_close(c);
}
END_TEST

/* A worker port: _i 0 the client certificate is served (the address is
 * right), 1 the CA alone and 2 plaintext are refused at the handshake. */
START_TEST(test_worker_port)
{
    sm_rpc_tls *tls = NULL;
    sm_rpc_channel *ch = channel(g_worker, _i == 2 ? NULL : g_ca, _i == 0 ? g_ccert : NULL,
                                 _i == 0 ? g_ckey : NULL, &tls);
    sm_svc_worker_stats st;
    char err[1024];
    memset(&st, 0, sizeof st);
    sm_err e = sm_svc_worker_stats_get(ch, 10000, &st, err, sizeof err);
    if (_i == 0)
        ck_assert_msg(e == SM_OK, "stats with a client certificate: %s", err);
    else
        ck_assert_msg(e == SM_EUNAVAILABLE, "case %d: stats gave %s: %s", _i, sm_err_name(e), err);
    sm_rpc_channel_free(ch);
    sm_rpc_tls_free(tls);
}
END_TEST

/* A real shmap-worker with the stranger's certificate (trusting the
 * cluster's CA, so it can reach the coordinator) never registers. */
START_TEST(test_stranger_worker)
{
    const char *bin = getenv("SHMAP_WORKER");
    char log[600];
    ck_assert_msg(bin && *bin, "SHMAP_WORKER is not set");
    snprintf(log, sizeof log, "%s/stranger.log", g_dir);
    char *argv[] = {(char *)bin,   "--coordinator",      g->target, "--devices", "1",    "--listen",
                    "127.0.0.1:0", "--tls-cert",         g_xcert,   "--tls-key", g_xkey, "--tls-ca",
                    g_ca,          "--exit-with-parent", NULL};
    pid_t pid = harness_spawn_log(argv, log, 0);
    ck_assert_int_gt(pid, 0);
    /* it retries registration; give it well over one attempt */
    harness_sleep_ms(1500);
    int st;
    int exited = waitpid(pid, &st, WNOHANG) == pid;
    sm_client *c = harness_client(g);
    int n = 0;
    sm_worker_info *w = harness_workers(c, &n);
    free(w);
    sm_client_close(c);
    if (!exited) {
        kill(pid, SIGTERM);
        waitpid(pid, &st, 0);
    }
    char *text = slurp(log);
    ck_assert_msg(!exited, "the stranger worker exited at once:\n%s", text);
    ck_assert_msg(n == 2, "%d workers after the stranger tried to register:\n%s", n, text);
    ck_assert_msg(!strstr(text, "registered with"), "the stranger registered:\n%s", text);
    ck_assert_msg(strstr(text, "cannot register"), "no failed registration in:\n%s", text);
    free(text);
}
END_TEST

/* Start-up refusals: _i 0 a key of another certificate, 1 a missing CA
 * file, 2 a certificate without key and CA; exit 1 or 2 with a sentence
 * naming the file or the flags. */
START_TEST(test_start_refused)
{
    const char *bin = getenv(_i == 1 ? "SHMAP_WORKER" : "SHMAP_COORDINATOR_BIN");
    char log[600], missing[600];
    snprintf(log, sizeof log, "%s/start%d.log", g_dir, _i);
    snprintf(missing, sizeof missing, "%s/no-such-ca.pem", g_dir);
    const char *key = _i == 0 ? g_xkey : g_key, *ca = _i == 1 ? missing : g_ca;
    char *argv[16] = {(char *)bin, "--listen", "127.0.0.1:0", "--tls-cert", g_cert};
    int na = 5;
    if (_i == 1) {
        argv[na++] = "--coordinator";
        argv[na++] = g->target;
    }
    if (_i != 2) {
        argv[na++] = "--tls-key";
        argv[na++] = (char *)key;
        argv[na++] = "--tls-ca";
        argv[na++] = (char *)ca;
    }
    argv[na] = NULL;
    int rc = run(argv, log);
    char *text = slurp(log);
    ck_assert_msg(rc == (_i == 2 ? 2 : 1), "case %d: exit %d:\n%s", _i, rc, text);
    const char *want[] = {"is not the private key of the certificate", "no-such-ca.pem",
                          "--tls-cert, --tls-key and --tls-ca go together"};
    ck_assert_msg(strstr(text, want[_i]), "case %d: no '%s' in:\n%s", _i, want[_i], text);
    if (_i == 0)
        ck_assert_msg(strstr(text, g_xkey), "the key file is not named:\n%s", text);
    free(text);
}
END_TEST

/* The coordinator says at start that it serves TLS. */
START_TEST(test_logged)
{
    char file[600];
    snprintf(file, sizeof file, "%s/coordinator.log", g->dir);
    char *text = slurp(file);
    ck_assert_msg(strstr(text, "over TLS") && strstr(text, "mutual TLS"), "%s", text);
    ck_assert_msg(!strstr(text, "plaintext: no TLS"), "%s", text);
    free(text);
}
END_TEST

/* --tls-server-name: a certificate that names shmap-cluster and localhost
 * but not 127.0.0.1, the address every worker is dialled at. */
static harness_cluster *g_named;

static void named_up(void)
{
    char dir[600], cert[600], key[600], ca[600];
    snprintf(dir, sizeof dir, "%s/named", g_dir);
    char *argv[] = {"bash", getenv("SM_TLS_CERTS"), dir, "shmap-cluster", "localhost", NULL};
    if (run(argv, NULL) != 0) {
        fprintf(stderr, "e2e_tls: %s failed\n", argv[1]);
        exit(1);
    }
    path(cert, "named", "cluster.pem");
    path(key, "named", "cluster.key");
    path(ca, "named", "ca.pem");
    const char *more[] = {"--tls-server-name", "shmap-cluster", NULL};
    harness_opts o = {.nworkers = 2,
                      .devices_per_worker = 2,
                      .tls_cert = cert,
                      .tls_key = key,
                      .tls_ca = ca,
                      .coord_args = more,
                      .target_host = "localhost"};
    g_named = harness_cluster_up_opts(&o, "e2e_tls: a cluster with --tls-server-name");
}

static void named_down(void)
{
    harness_cluster_down(&g_named);
}

/* Both workers registered and their links work (a job's psum), though
 * their addresses are not in the certificate; a client dialling
 * 127.0.0.1 is refused (clients check the host they dial). */
START_TEST(test_server_name)
{
    sm_client *c = harness_client(g_named);
    char err[1024];
    ck_assert_msg(harness_wait_workers(c, 2, 1, err, sizeof err) == SM_OK, "%s", err);
    put_get_run(c);
    sm_client_close(c);
    char target[64];
    snprintf(target, sizeof target, "127.0.0.1:%d", g_named->port);
    sm_client_opts o = {.timeout_ms = 10000, .tls_ca = g_named->tls_ca};
    sm_err e = sm_client_connect(target, &o, &c, err, sizeof err);
    ck_assert_msg(e == SM_EUNAVAILABLE, "connect to 127.0.0.1 gave %s: %s", sm_err_name(e), err);
    ck_assert_msg(strstr(err, "name the host dialled"), "no hint at the name: %s", err);
}
END_TEST

int main(void)
{
    Suite *s = SUITE_CASE(
        suite_create("e2e_tls"), "tls", 60, SUITE_UNCHECKED(cluster_up, cluster_down),
        {test_logged}, {test_tls_client, 2}, {test_client_refused, 3}, {test_register_needs_cert},
        {test_worker_port, 3}, {test_stranger_worker}, {test_start_refused, 3});
    SUITE_CASE(s, "server_name", 60, SUITE_UNCHECKED(named_up, named_down), {test_server_name});
    SUITE_CASE(s, "tenants", 60, SUITE_UNCHECKED(tenants_up, tenants_down), {test_tenant_grants});
    certs_make();
    int rc = harness_run_suite(s);
    harness_rmdir(g_dir);
    return rc;
}
