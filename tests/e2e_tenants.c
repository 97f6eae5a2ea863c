/* e2e_tenants: a cluster with tenants (--tokens): each tenant sees its own
 * arrays, meshes, names and jobs only (another's are NOT_FOUND, never
 * "forbidden"), names are per tenant, quotas refuse RESOURCE_EXHAUSTED, a
 * tenant's token opens a worker's PutShard and GetShard only with the
 * coordinator's grant for exactly that transfer, a wrong token is
 * UNAUTHENTICATED, the cluster's token sees everything, jobs' records keep
 * their tenant across a restart, and SIGHUP reads the file again. Real
 * processes.
 *
 * every_method: on a cluster with TLS and tenants (the harness's secure
 * mode), every method of the Coordinator and Worker services, taken from
 * the generated service descriptors, called from outside: in plaintext,
 * without a certificate, with a wrong token or none, with a tenant's token
 * (every worker method, PutShard and GetShard without a grant; the
 * cluster-only coordinator methods even with a client certificate), and bob's token on alice's
 * objects (NOT_FOUND in the same words as for nothing, or PERMISSION_DENIED where no tenant may
 * call); the cluster's own credential is let in everywhere. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <check.h>
#include <netinet/in.h>
#include <ctype.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "harness.h"
#include "harness_svc.h"
#include "shmap_job.h"
#include "sm_grant.h"
#include "sm_checksum.h"
#include "sm_rpc.h"
#include "sm_rpc_msg.h"
#include "sm_rpc_proto.h"
#include "sm_svc.h"
#include "sm_svc_job.h"
#include "suite_main.h"

#define CLUSTER "cluster-token-0123456789"
#define ALICE   "alice-token-0123456789abc"
#define BOB     "bob-token-0123456789abcdef"
#define CAROL   "carol-token-0123456789abcde"

static harness_cluster *g_h;
static char g_tokens[512];
static char *g_dir;
static int g_mport; /* the coordinator's metrics port */

/* A free loopback port (bound and released). */
static int free_port(void)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    int fd = socket(AF_INET, SOCK_STREAM, 0), port = 0;
    if (fd >= 0 && !bind(fd, (struct sockaddr *)&a, sizeof a) &&
        !getsockname(fd, (struct sockaddr *)&a, &len))
        port = ntohs(a.sin_port);
    if (fd >= 0)
        close(fd);
    ck_assert_int_gt(port, 0);
    return port;
}

/* How many calls of the coordinator's method (its path) have ended, from
 * its metrics (shmap_rpc_duration_seconds_count). */
static long calls_of(const char *method)
{
    static char buf[1 << 20];
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)g_mport),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
    const char *req = "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
    ck_assert_int_eq(write(fd, req, strlen(req)), (ssize_t)strlen(req));
    size_t n = 0;
    ssize_t r;
    while (n + 1 < sizeof buf && (r = read(fd, buf + n, sizeof buf - 1 - n)) > 0)
        n += (size_t)r;
    close(fd);
    buf[n] = 0;
    char key[256];
    snprintf(key, sizeof key, "shmap_rpc_duration_seconds_count{method=\"%s\"} ", method);
    const char *p = strstr(buf, key);
    ck_assert_msg(p, "no %s in the metrics", key);
    return atol(p + strlen(key));
}

static void write_tokens(const char *text)
{
    FILE *f = fopen(g_tokens, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
}

static sm_client *connect_as(const char *token)
{
    sm_client_opts o = {.token = token};
    sm_client *c = NULL;
    char err[512];
    sm_err e = sm_client_connect(g_h->target, &o, &c, err, sizeof err);
    ck_assert_msg(e == SM_OK, "connect: %s", err);
    return c;
}

static sm_array_info put_as(sm_client *c, const char *name, int rows, sm_err want)
{
    sm_mesh mesh;
    sm_sharding_ref sh = harness_sharding(&mesh, "i=4", NULL, 0, "P('i')");
    sm_shape s = HARNESS_SHAPE(rows, 256);
    sm_array *a = harness_array_iota(SM_F32, &s, 5);
    sm_array_info info;
    char err[512];
    memset(&info, 0, sizeof info);
    sm_err e = sm_client_put(c, SM_F32, &s, a->data, &sh, name, &info, err, sizeof err);
    ck_assert_msg(e == want, "put %s: %s (%s)", name, sm_err_name(e), err);
    if (want == SM_ERESOURCE)
        ck_assert_msg(strstr(err, "quota of") && strstr(err, "max-bytes in --tokens"), "%s", err);
    sm_array_free(a);
    return info;
}

/* Starts the cluster of the fixture: 2 workers of 2 devices, tenants from
 * g_tokens, the registry in g_dir/state (so a test can start it again). */
static void cluster_start(void)
{
    char err[512], state[512], metrics[64];
    snprintf(state, sizeof state, "%s/state", g_dir);
    g_mport = free_port();
    snprintf(metrics, sizeof metrics, "127.0.0.1:%d", g_mport);
    const char *args[] = {"--tokens",         g_tokens, "--state-dir", state,
                          "--metrics-listen", metrics,  NULL};
    harness_opts o = {.nworkers = 2, .devices_per_worker = 2, .token = CLUSTER, .coord_args = args};
    sm_err e = harness_cluster_start(&o, &g_h, err, sizeof err);
    ck_assert_msg(e == SM_OK, "cluster: %s", err);
}

/* f(x) = x + x over an f32[8,256] array sharded P('i') on 4 devices. */
static sm_program *twice_program(void)
{
    return harness_program("mesh i=4\n"
                           "shard_map f(x: f32[8,256] @ P('i')) -> P('i'):\n"
                           "    return x + x\n",
                           "f.shmap");
}

static void setup(void)
{
    g_dir = harness_tmpdir();
    snprintf(g_tokens, sizeof g_tokens, "%s/tokens", g_dir);
    write_tokens("# tenant token quotas\n"
                 "alice " ALICE " max-bytes=64K\n"
                 "bob   " BOB "   max-jobs=1   # one queued job at most\n");
    cluster_start();
}

static void teardown(void)
{
    harness_cluster_down(&g_h);
    harness_rmdir(g_dir);
    g_dir = NULL;
}

START_TEST(test_isolation)
{
    sm_client *alice = connect_as(ALICE), *bob = connect_as(BOB), *root = connect_as(CLUSTER);
    char err[512];
    sm_array_info a = put_as(alice, "x", 16, SM_OK); /* 16 KiB, read back through the relay */
    sm_array *back = NULL;
    ck_assert_int_eq(sm_client_get(alice, (sm_array_ref){{0}, "x"}, &back, err, sizeof err), SM_OK);
    sm_array_free(back);
    /* bob: neither by name nor by id, not listed, not deletable */
    sm_array_info info;
    ck_assert_int_eq(sm_client_describe(bob, (sm_array_ref){{0}, "x"}, &info, err, sizeof err),
                     SM_ENOTFOUND);
    ck_assert_int_eq(sm_client_describe(bob, harness_id_ref(a.id), &info, err, sizeof err),
                     SM_ENOTFOUND);
    ck_assert_msg(strstr(err, "does not exist"), "%s", err);
    ck_assert_int_eq(sm_client_delete(bob, harness_id_ref(a.id), err, sizeof err), SM_ENOTFOUND);
    ck_assert_int_eq(sm_client_get(bob, harness_id_ref(a.id), &back, err, sizeof err),
                     SM_ENOTFOUND);
    sm_array_info *list = NULL;
    int n = 0;
    ck_assert_int_eq(sm_client_list(bob, &list, &n, err, sizeof err), SM_OK);
    ck_assert_int_eq(n, 0);
    sm_array_info_list_free(list, n);
    /* names are per tenant: bob's own x */
    sm_array_info b = put_as(bob, "x", 8, SM_OK);
    ck_assert_uint_ne(b.id.v, a.id.v);
    ck_assert_int_eq(sm_client_describe(alice, (sm_array_ref){{0}, "x"}, &info, err, sizeof err),
                     SM_OK);
    ck_assert_uint_eq(info.id.v, a.id.v);
    sm_array_info_free(&info);
    /* a named mesh is the tenant's too */
    sm_mesh m;
    harness_sharding(&m, "i=4", NULL, 0, "P('i')");
    sm_mesh_info mi;
    ck_assert_int_eq(sm_client_mesh_create(alice, &m, 1, "rows", &mi, err, sizeof err), SM_OK);
    ck_assert_int_eq(sm_client_mesh_get(bob, (sm_mesh_id){0}, "rows", &mi, err, sizeof err),
                     SM_ENOTFOUND);
    ck_assert_int_eq(sm_client_mesh_create(bob, &m, 1, "rows", &mi, err, sizeof err), SM_OK);
    /* a tenant names no directory on the workers' hosts */
    int64_t bytes = 0;
    int files = 0;
    ck_assert_int_eq(sm_client_save(alice, (sm_array_ref){{0}, "x"}, "/tmp/shmap-tenant-ckpt",
                                    &bytes, &files, err, sizeof err),
                     SM_EPERM);
    ck_assert_msg(strstr(err, "tenant alice may not name"), "%s", err);
    /* the cluster's token sees both tenants' arrays */
    ck_assert_int_eq(sm_client_list(root, &list, &n, err, sizeof err), SM_OK);
    ck_assert_int_eq(n, 2);
    sm_array_info_list_free(list, n);
    /* alice's quota: 64 KiB, 16 held; 64 more is refused, 32 more is not */
    sm_array_info big = put_as(alice, "big", 64, SM_ERESOURCE);
    sm_array_info ok = put_as(alice, "ok", 32, SM_OK);
    sm_array_info_free(&big);
    sm_array_info_free(&ok);
    /* jobs: bob's job is bob's */
    sm_program *p = twice_program();
    sm_array_ref arg = {{0}, "x"};
    sm_job_info done;
    const char *names[] = {"y"};
    ck_assert_msg(sm_job_run(bob, p, 1, &arg, names, 1, 0, 60000, &done, err, sizeof err) == SM_OK,
                  "%s", err);
    ck_assert_int_eq(done.state, SM_JOB_DONE);
    sm_job_info other;
    ck_assert_int_eq(sm_job_status(alice, done.id, &other, err, sizeof err), SM_ENOTFOUND);
    ck_assert_int_eq(sm_client_describe(bob, (sm_array_ref){{0}, "y"}, &info, err, sizeof err),
                     SM_OK);
    sm_array_info_free(&info);
    ck_assert_int_eq(sm_client_describe(alice, (sm_array_ref){{0}, "y"}, &info, err, sizeof err),
                     SM_ENOTFOUND);
    sm_job_info_free(&done);
    sm_program_free(p);
    sm_array_info_free(&a);
    sm_array_info_free(&b);
    sm_client_close(alice);
    sm_client_close(bob);
    sm_client_close(root);
}
END_TEST

START_TEST(test_tokens)
{
    char err[512];
    sm_client_opts o = {.token = "not-a-token-of-anyone-at-all"};
    sm_client *c = NULL;
    ck_assert_int_eq(sm_client_connect(g_h->target, &o, &c, err, sizeof err), SM_EAUTH);
    /* a tenant's token opens no worker port */
    sm_client *root = connect_as(CLUSTER);
    int n = 0;
    sm_worker_info *w = harness_workers(root, &n);
    ck_assert_int_gt(n, 0);
    sm_rpc_channel *ch = NULL;
    uint32_t version = 0;
    ck_assert_int_eq(sm_rpc_channel_create(w[0].address, ALICE, &ch, err, sizeof err), SM_OK);
    ck_assert_int_eq(
        sm_svc_negotiate(ch, 1, "e2e_tenants", &version, NULL, 0, 10000, err, sizeof err),
        SM_EAUTH);
    sm_rpc_channel_free(ch);
    ck_assert_int_eq(sm_rpc_channel_create(w[0].address, CLUSTER, &ch, err, sizeof err), SM_OK);
    ck_assert_int_eq(
        sm_svc_negotiate(ch, 1, "e2e_tenants", &version, NULL, 0, 10000, err, sizeof err), SM_OK);
    sm_rpc_channel_free(ch);
    free(w);
    sm_client_close(root);
    /* carol is not a tenant yet; after SIGHUP she is */
    o.token = CAROL;
    ck_assert_int_eq(sm_client_connect(g_h->target, &o, &c, err, sizeof err), SM_EAUTH);
    write_tokens("alice " ALICE "\ncarol " CAROL "\n");
    ck_assert_int_eq(kill(g_h->pid, SIGHUP), 0);
    sm_err e = SM_EAUTH;
    for (int k = 0; k < 100 && e == SM_EAUTH; k++) {
        usleep(50000);
        e = sm_client_connect(g_h->target, &o, &c, err, sizeof err);
    }
    ck_assert_msg(e == SM_OK, "carol after SIGHUP: %s", err);
    sm_client_close(c);
    /* bob's token is gone with his line; a file that does not parse keeps
     * the tenants as they were */
    o.token = BOB;
    ck_assert_int_eq(sm_client_connect(g_h->target, &o, &c, err, sizeof err), SM_EAUTH);
    write_tokens("carol short\n");
    ck_assert_int_eq(kill(g_h->pid, SIGHUP), 0);
    usleep(300000);
    o.token = CAROL;
    ck_assert_int_eq(sm_client_connect(g_h->target, &o, &c, err, sizeof err), SM_OK);
    sm_client_close(c);
}
END_TEST

#define COORD_PATH(m) "/shmap.v1.Coordinator/" m

/* calls_of(method) once it is more than before (a handler counts its call
 * as it returns, just after the client saw it end), at most 5 s. */
static long calls_after(const char *method, long before)
{
    long n = calls_of(method);
    for (int k = 0; k < 100 && n <= before; k++) {
        harness_sleep_ms(50);
        n = calls_of(method);
    }
    return n;
}

/* A tenant's upload and download go straight to the workers, with the
 * grants of the shards the coordinator described: the coordinator relays
 * nothing (its Upload and Download count no call), and the same client
 * forced through the relay is counted there. */
START_TEST(test_grants_direct)
{
    sm_client *alice = connect_as(ALICE);
    char err[512];
    long up = calls_of(COORD_PATH("Upload")), down = calls_of(COORD_PATH("Download"));
    long commits = calls_of(COORD_PATH("CommitShards"));
    sm_array_info a = put_as(alice, "a", 16, SM_OK);
    sm_array *back = NULL;
    ck_assert_int_eq(sm_client_get(alice, (sm_array_ref){{0}, "a"}, &back, err, sizeof err), SM_OK);
    sm_shape s = HARNESS_SHAPE(16, 256);
    sm_array *want = harness_array_iota(SM_F32, &s, 5);
    ck_assert_int_eq(memcmp(back->data, want->data, want->nbytes), 0);
    sm_array_free(back);
    ck_assert_int_gt(calls_after(COORD_PATH("CommitShards"), commits), commits);
    ck_assert_int_eq(calls_of(COORD_PATH("Upload")), up);
    ck_assert_int_eq(calls_of(COORD_PATH("Download")), down);
    /* one device's shard alone (sm_client_get_shard) goes straight too */
    ck_assert_int_eq(sm_client_get_shard(alice, (sm_array_ref){{0}, "a"}, a.shards[1].device, &back,
                                         err, sizeof err),
                     SM_OK);
    ck_assert_int_eq(memcmp(back->data, (char *)want->data + back->nbytes, back->nbytes), 0);
    sm_array_free(back);
    ck_assert_int_eq(calls_of(COORD_PATH("Download")), down);
    /* a description whose grants a worker refuses (spoilt here, as an old
     * one's would be expired) is read through the relay */
    sm_array_info d;
    ck_assert_int_eq(sm_client_describe(alice, (sm_array_ref){{0}, "a"}, &d, err, sizeof err),
                     SM_OK);
    for (int k = 0; k < d.nshards; k++) {
        ck_assert_int_eq(d.shards[k].grant_len, SM_GRANT_LEN);
        d.shards[k].grant[SM_GRANT_LEN - 1] ^= 1;
    }
    ck_assert_msg(sm_client_get_described(alice, &d, &back, err, sizeof err) == SM_OK, "%s", err);
    ck_assert_int_eq(memcmp(back->data, want->data, want->nbytes), 0);
    sm_array_free(back);
    ck_assert_int_gt(calls_after(COORD_PATH("Download"), down), down);
    down = calls_of(COORD_PATH("Download"));
    sm_array_info_free(&d);
    /* the control: the relay is counted */
    sm_client_opts o = {.token = ALICE, .relay_only = 1};
    sm_client *relayed = NULL;
    ck_assert_int_eq(sm_client_connect(g_h->target, &o, &relayed, err, sizeof err), SM_OK);
    sm_array_info r = put_as(relayed, "r", 8, SM_OK);
    ck_assert_int_eq(sm_client_get(relayed, (sm_array_ref){{0}, "r"}, &back, err, sizeof err),
                     SM_OK);
    sm_array_free(back);
    ck_assert_int_gt(calls_after(COORD_PATH("Upload"), up), up);
    ck_assert_int_gt(calls_after(COORD_PATH("Download"), down), down);
    sm_array_free(want);
    sm_array_info_free(&a);
    sm_array_info_free(&r);
    sm_client_close(relayed);
    sm_client_close(alice);
}
END_TEST

/* GetShard of array id's shard on device from the worker at addr, as the
 * holder of token with grant (NULL: none), read to its end. */
static sm_err raw_get(const char *addr, const char *token, sm_array_id id, int32_t device,
                      const unsigned char *grant, char *err, size_t errlen)
{
    sm_rpc_channel *ch = NULL;
    ck_assert_int_eq(sm_rpc_channel_create(addr, token, &ch, err, errlen), SM_OK);
    sm_err e = harness_svc_get_shard(ch, id, device, grant, err, errlen);
    sm_rpc_channel_free(ch);
    return e;
}

/* PutShard of a 16x256 f32 shard of array id on device to the worker at
 * addr, as the holder of token with grant (NULL: none). */
static sm_err raw_put(const char *addr, const char *token, sm_array_id id, int32_t device,
                      const unsigned char *grant, char *err, size_t errlen)
{
    sm_rpc_channel *ch = NULL;
    sm_svc_upload_stream *st = NULL;
    static float data[4 * 256];
    ck_assert_int_eq(sm_rpc_channel_create(addr, token, &ch, err, errlen), SM_OK);
    sm_svc_upload_msg m = {.has_header = 1,
                           .header = {.array_id = id,
                                      .ndevices = 1,
                                      .devices = &device,
                                      .shape = HARNESS_SHAPE(4, 256),
                                      .dtype = SM_F32,
                                      .total_bytes = sizeof data,
                                      .grants = grant},
                           .data = data,
                           .len = sizeof data,
                           .last = 1};
    sm_err e = sm_svc_upload_open(ch, 1, 10000, &st, err, errlen);
    if (!e)
        e = sm_svc_upload_send(st, &m, err, errlen);
    sm_err f = st ? sm_svc_upload_finish(st, NULL, err, errlen) : SM_OK;
    sm_rpc_channel_free(ch);
    return e ? e : f;
}

/* The described shard of info on device. */
static const sm_shard_info *shard_on(const sm_array_info *info, int32_t device)
{
    for (int k = 0; k < info->nshards; k++)
        if (info->shards[k].device == device)
            return &info->shards[k];
    ck_abort_msg("array %llu has no shard on device %d", (unsigned long long)info->id.v, device);
    return NULL;
}

static sm_array_info describe_as(sm_client *c, const char *name)
{
    sm_array_info info;
    char err[512];
    ck_assert_int_eq(sm_client_describe(c, (sm_array_ref){{0}, name}, &info, err, sizeof err),
                     SM_OK);
    return info;
}

#define REFUSED(call, code, words)                                                                 \
    do {                                                                                           \
        sm_err e_ = (call);                                                                        \
        ck_assert_msg(e_ == (code), "%s: %s (%s)", #call, sm_err_name(e_), err);                   \
        ck_assert_msg(strstr(err, words), "%s: '%s' lacks '%s'", #call, err, words);               \
    } while (0)

/* A worker takes a grant for exactly the transfer it was made for: not
 * for another array, device or direction, not from another tenant's
 * token, not once expired, not forged; without one a tenant's token opens
 * nothing. */
START_TEST(test_grants_refused)
{
    sm_client *alice = connect_as(ALICE), *bob = connect_as(BOB);
    char err[512];
    sm_array_info pa = put_as(alice, "a", 16, SM_OK), pb = put_as(alice, "b", 16, SM_OK);
    sm_array_info px = put_as(bob, "x", 16, SM_OK);
    sm_array_info a = describe_as(alice, "a"), b = describe_as(alice, "b");
    sm_array_info x = describe_as(bob, "x");
    const sm_shard_info *sa = &a.shards[0], *sa2 = NULL;
    for (int k = 1; k < a.nshards && !sa2; k++)
        if (!strcmp(a.shards[k].worker_address, sa->worker_address))
            sa2 = &a.shards[k];
    ck_assert_ptr_nonnull(sa2); /* two devices of one worker */
    const char *w = sa->worker_address;
    int32_t d = sa->device;
    const unsigned char *ga = sa->grant, *gb = shard_on(&b, d)->grant, *gx = shard_on(&x, d)->grant;
    ck_assert_int_eq(sa->grant_len, SM_GRANT_LEN);
    /* the grant opens its shard, and a tenant's token alone opens nothing */
    ck_assert_msg(raw_get(w, ALICE, a.id, d, ga, err, sizeof err) == SM_OK, "%s", err);
    ck_assert_msg(raw_get(w, ALICE, b.id, d, gb, err, sizeof err) == SM_OK, "%s", err);
    REFUSED(raw_get(w, ALICE, a.id, d, NULL, err, sizeof err), SM_EAUTH, "nor a grant");
    REFUSED(raw_put(w, ALICE, a.id, d, NULL, err, sizeof err), SM_EAUTH, "nor a grant");
    /* array a's grant opens neither array b nor a's shard on another device */
    REFUSED(raw_get(w, ALICE, b.id, d, ga, err, sizeof err), SM_EPERM, "does not open");
    REFUSED(raw_get(w, ALICE, a.id, sa2->device, ga, err, sizeof err), SM_EPERM, "does not open");
    /* nor an upload to the shard it lets one read */
    REFUSED(raw_put(w, ALICE, a.id, d, ga, err, sizeof err), SM_EPERM, "does not open");
    /* another tenant's grant opens nothing of alice's, nor alice's for bob */
    REFUSED(raw_get(w, BOB, a.id, d, gx, err, sizeof err), SM_EPERM, "does not open");
    REFUSED(raw_get(w, ALICE, a.id, d, gx, err, sizeof err), SM_EPERM, "does not open");
    REFUSED(raw_get(w, BOB, a.id, d, ga, err, sizeof err), SM_EPERM, "does not open");
    ck_assert_msg(raw_get(w, BOB, x.id, d, gx, err, sizeof err) == SM_OK, "%s", err);
    /* forged: another MAC, a later expiry, a short grant */
    unsigned char f[SM_GRANT_LEN];
    memcpy(f, ga, sizeof f);
    f[SM_GRANT_LEN - 1] ^= 1;
    REFUSED(raw_get(w, ALICE, a.id, d, f, err, sizeof err), SM_EPERM, "does not open");
    memcpy(f, ga, sizeof f);
    f[5] ^= 0x10; /* about a minute later */
    REFUSED(raw_get(w, ALICE, a.id, d, f, err, sizeof err), SM_EPERM, "does not open");
    /* expired: made with the cluster's key (from its token, as the
     * coordinator makes them) but a second old; a fresh one passes */
    sm_grant_key key;
    unsigned char holder[32];
    sm_grant_key_derive(CLUSTER, &key);
    sm_grant_holder(ALICE, strlen(ALICE), holder);
    sm_grant_make(&key, holder, SM_GRANT_GET, a.id.v, d, sm_grant_now_ms() - 1000, f);
    REFUSED(raw_get(w, ALICE, a.id, d, f, err, sizeof err), SM_EPERM, "expired");
    sm_grant_make(&key, holder, SM_GRANT_GET, a.id.v, d, sm_grant_now_ms() + 30000, f);
    ck_assert_msg(raw_get(w, ALICE, a.id, d, f, err, sizeof err) == SM_OK, "%s", err);
    /* the cluster's token needs no grant */
    ck_assert_msg(raw_get(w, CLUSTER, a.id, d, NULL, err, sizeof err) == SM_OK, "%s", err);
    sm_array_info_free(&a);
    sm_array_info_free(&b);
    sm_array_info_free(&x);
    sm_array_info_free(&pa);
    sm_array_info_free(&pb);
    sm_array_info_free(&px);
    sm_client_close(alice);
    sm_client_close(bob);
}
END_TEST

/* A job that keeps a job thread busy until cancelled: 400 products of
 * 128x512 by 512x512 blocks on each of 4 devices. */
static const char *busy_text = "mesh i=4\n"
                               "shard_map busy(a: f32[512,512] @ P('i'), w: f32[512,512] @ "
                               "P()) -> P('i'):\n"
                               "    z = a\n"
                               "    for k in range(400):\n"
                               "        z = tanh(dot(z, w))\n"
                               "    return z\n";

/* bob's max-jobs=1: with both of the coordinator's job threads busy with
 * his jobs, one more of his waits, and the next is refused
 * RESOURCE_EXHAUSTED naming the quota; alice's quota is her own. */
START_TEST(test_max_jobs)
{
    sm_client *bob = connect_as(BOB), *alice = connect_as(ALICE);
    char err[512];
    sm_mesh m1, m2;
    sm_shape s = HARNESS_SHAPE(512, 512);
    sm_array *a = harness_array_iota(SM_F32, &s, 3);
    for (int64_t i = 0; i < 512 * 512; i++)
        ((float *)a->data)[i] = (float)(i % 5) * 0.001f;
    sm_sharding_ref row = harness_sharding(&m1, "i=4", NULL, 0, "P('i')");
    sm_sharding_ref rep = harness_sharding(&m2, "i=4", NULL, 0, "P()");
    ck_assert_int_eq(sm_client_put(bob, SM_F32, &s, a->data, &row, "a", NULL, err, sizeof err),
                     SM_OK);
    ck_assert_int_eq(sm_client_put(bob, SM_F32, &s, a->data, &rep, "w", NULL, err, sizeof err),
                     SM_OK);
    sm_array_free(a);
    sm_program *p = harness_program(busy_text, "busy.shmap");
    sm_array_ref args[2] = {{{0}, "a"}, {{0}, "w"}};
    sm_job_id ids[3];
    sm_job_info info;
    /* two run (the coordinator has two job threads), the third waits, the
     * fourth is one more than bob's one waiting job */
    for (int k = 0; k < 3; k++) {
        ck_assert_msg(sm_job_submit(bob, p, 2, args, NULL, 1, 0, &ids[k], err, sizeof err) == SM_OK,
                      "job %d: %s", k, err);
        int want = k < 2 ? SM_JOB_RUNNING : SM_JOB_QUEUED;
        int state = -1;
        for (int t = 0; t < 400 && state != want; t++) {
            if (t)
                harness_sleep_ms(25);
            ck_assert_int_eq(sm_job_status(bob, ids[k], &info, err, sizeof err), SM_OK);
            state = info.state;
            sm_job_info_free(&info);
        }
        ck_assert_int_eq(state, want);
    }
    sm_job_id more;
    ck_assert_int_eq(sm_job_submit(bob, p, 2, args, NULL, 1, 0, &more, err, sizeof err),
                     SM_ERESOURCE);
    ck_assert_msg(strstr(err, "tenant bob already has 1 jobs waiting to start") &&
                      strstr(err, "max-jobs in --tokens"),
                  "%s", err);
    /* alice's jobs do not count against bob's quota */
    sm_job_id theirs;
    sm_array_info none = put_as(alice, "x", 8, SM_OK);
    sm_program *q = twice_program();
    sm_array_ref x = {{0}, "x"};
    ck_assert_msg(sm_job_submit(alice, q, 1, &x, NULL, 1, 0, &theirs, err, sizeof err) == SM_OK,
                  "%s", err);
    ck_assert_int_eq(sm_job_status(alice, theirs, &info, err, sizeof err), SM_OK);
    sm_job_info_free(&info);
    for (int k = 2; k >= 0; k--) {
        ck_assert_int_eq(sm_job_cancel(bob, ids[k], &info, err, sizeof err), SM_OK);
        sm_job_info_free(&info);
    }
    ck_assert_int_eq(sm_job_wait(alice, theirs, 60000, &info, err, sizeof err), SM_OK);
    ck_assert_int_eq(info.state, SM_JOB_DONE);
    sm_job_info_free(&info);
    sm_array_info_free(&none);
    sm_program_free(p);
    sm_program_free(q);
    sm_client_close(bob);
    sm_client_close(alice);
}
END_TEST

/* A job's record stays its tenant's across a coordinator restart (the
 * registry in --state-dir): its tenant and the cluster see it, another
 * tenant gets NOT_FOUND. */
START_TEST(test_jobs_restart)
{
    sm_client *bob = connect_as(BOB);
    char err[512];
    sm_array_info a = put_as(bob, "x", 8, SM_OK);
    sm_program *p = twice_program();
    sm_array_ref arg = {{0}, "x"};
    sm_job_info done;
    ck_assert_msg(sm_job_run(bob, p, 1, &arg, NULL, 1, 0, 60000, &done, err, sizeof err) == SM_OK,
                  "%s", err);
    ck_assert_int_eq(done.state, SM_JOB_DONE);
    sm_client_close(bob);
    harness_cluster_down(&g_h);
    cluster_start();
    bob = connect_as(BOB);
    sm_client *alice = connect_as(ALICE), *root = connect_as(CLUSTER);
    sm_job_info info;
    ck_assert_msg(sm_job_status(bob, done.id, &info, err, sizeof err) == SM_OK, "%s", err);
    ck_assert_int_eq(info.state, SM_JOB_DONE);
    sm_job_info_free(&info);
    ck_assert_int_eq(sm_job_status(alice, done.id, &info, err, sizeof err), SM_ENOTFOUND);
    ck_assert_msg(strstr(err, "does not exist"), "%s", err);
    ck_assert_int_eq(sm_job_status(root, done.id, &info, err, sizeof err), SM_OK);
    sm_job_info_free(&info);
    sm_job_info_free(&done);
    sm_array_info_free(&a);
    sm_program_free(p);
    sm_client_close(bob);
    sm_client_close(alice);
    sm_client_close(root);
}
END_TEST

/* ---- every method from outside: TLS and tenants (the harness's secure
 * mode). The methods come from the generated service descriptors, so a new
 * one is called too; the coordinator's must each have a row in g_rows
 * saying what another tenant's call on alice's objects gives. ---------- */

#define DL 10000

static harness_cluster *g_s; /* TLS, the cluster's token, tenants alice and bob */
static char g_sworker[256];  /* a worker's address */
static struct {
    sm_array_id x, pending;
    sm_mesh_id mesh;
    sm_job_id job;
} g_alice; /* alice's objects */

static void secure_up(void)
{
    harness_opts o = {.nworkers = 2, .devices_per_worker = 2, .secure = 1};
    char err[1024];
    g_s = harness_cluster_up_opts(&o, "e2e_tenants: a secure cluster");
    /* the harness's clients are alice (HARNESS_TENANT_TOKEN, the CA alone) */
    sm_client *c = harness_client(g_s);
    sm_array_info x = put_as(c, "x", 8, SM_OK);
    g_alice.x = x.id;
    sm_array_info_free(&x);
    sm_mesh m;
    harness_sharding(&m, "i=4", NULL, 0, "P('i')");
    sm_mesh_info mi;
    ck_assert_int_eq(sm_client_mesh_create(c, &m, 1, "rows", &mi, err, sizeof err), SM_OK);
    g_alice.mesh = mi.id;
    sm_program *p = twice_program();
    sm_array_ref arg = harness_id_ref(g_alice.x);
    sm_job_info done;
    ck_assert_msg(sm_job_run(c, p, 1, &arg, NULL, 1, 0, 60000, &done, err, sizeof err) == SM_OK,
                  "%s", err);
    g_alice.job = done.id;
    sm_job_info_free(&done);
    sm_program_free(p);
    /* an array created and never uploaded, for Upload and CommitShards */
    sm_rpc_channel *ch = harness_channel(g_s, NULL);
    sm_svc_create_array_reply r =
        harness_svc_create(ch, NULL, "i=4", "P('i')", HARNESS_SHAPE(8, 4), SM_PUT_SHARDS, 600000);
    g_alice.pending = r.array.id;
    sm_svc_create_array_reply_free(&r);
    sm_rpc_channel_free(ch);
    ck_assert_msg(harness_first_worker(c, g_sworker, sizeof g_sworker, err, sizeof err) == SM_OK,
                  "%s", err);
    sm_client_close(c);
}

static void secure_down(void)
{
    harness_cluster_down(&g_s);
}

/* A caller from outside: over TLS or not, with the cluster's client
 * certificate or not, with a token (NULL: none). */
typedef struct {
    const char *what;
    int tls, cert;
    const char *token;
} caller;

typedef struct {
    sm_rpc_channel *ch;
    sm_rpc_tls *tls;
} conn;

static conn dial(const caller *k, const char *target)
{
    conn cn = {NULL, NULL};
    char err[512];
    if (k->tls) {
        sm_rpc_tls_opts o = {k->cert ? g_s->cluster_cert : NULL, k->cert ? g_s->cluster_key : NULL,
                             g_s->tls_ca, NULL};
        ck_assert_msg(sm_rpc_tls_create(&o, &cn.tls, err, sizeof err) == SM_OK, "%s", err);
    }
    ck_assert_int_eq(sm_rpc_channel_create_tls(target, k->token, cn.tls, &cn.ch, err, sizeof err),
                     SM_OK);
    return cn;
}

static void hangup(conn *cn)
{
    sm_rpc_channel_free(cn->ch);
    sm_rpc_tls_free(cn->tls);
}

/* Calls method m of service svc with an empty request (a unary call
 * whatever the method's kind: refusals come before any message is read). */
static sm_err call_empty(sm_rpc_channel *ch, const ProtobufCServiceDescriptor *svc,
                         const ProtobufCMethodDescriptor *m, int deadline_ms, char *err,
                         size_t errlen)
{
    char path[256];
    snprintf(path, sizeof path, "/%s/%s", svc->name, m->name);
    ProtobufCMessage *req = calloc(1, m->input->sizeof_message), *rep = NULL;
    ck_assert_ptr_nonnull(req);
    protobuf_c_message_init(m->input, req);
    sm_err e = sm_rpc_unary(ch, path, req, m->output, &rep, deadline_ms, err, errlen);
    if (rep)
        sm_rpc_msg_free(rep);
    free(req);
    return e;
}

/* ---- bob's calls on alice's objects, one per coordinator method ---- */

/* e, having freed *j (*info) when the call filled it. */
static sm_err job_end(sm_err e, sm_job_info *j)
{
    if (!e)
        sm_job_info_free(j);
    return e;
}

static sm_err info_end(sm_err e, sm_array_info *info)
{
    if (!e)
        sm_array_info_free(info);
    return e;
}

static sm_err o_negotiate(sm_rpc_channel *ch, char *err, size_t n)
{
    uint32_t v = 0;
    return sm_svc_negotiate(ch, 0, "e2e_tenants", &v, NULL, 0, DL, err, n);
}

static sm_err o_list_devices(sm_rpc_channel *ch, char *err, size_t n)
{
    sm_worker_info *w = NULL;
    int k = 0;
    sm_err e = sm_svc_coord_list_devices(ch, DL, &w, &k, err, n);
    free(w);
    return e;
}

/* bob's own mesh of alice's mesh's name: names are per tenant */
static sm_err o_create_mesh(sm_rpc_channel *ch, char *err, size_t n)
{
    sm_mesh m;
    sm_mesh_info mi;
    harness_sharding(&m, "i=4", NULL, 0, "P('i')");
    sm_err e = sm_svc_coord_create_mesh(ch, DL, "rows", &m, 1, &mi, err, n);
    if (!e)
        ck_assert_uint_ne(mi.id.v, g_alice.mesh.v);
    return e;
}

static sm_err o_get_mesh(sm_rpc_channel *ch, char *err, size_t n)
{
    sm_mesh_info mi;
    return sm_svc_coord_get_mesh(ch, DL, g_alice.mesh, NULL, &mi, err, n);
}

static sm_err o_list_meshes(sm_rpc_channel *ch, char *err, size_t n)
{
    sm_mesh_info *l = NULL;
    int k = 0;
    sm_err e = sm_svc_coord_list_meshes(ch, DL, &l, &k, err, n);
    for (int i = 0; i < k; i++)
        ck_assert_msg(l[i].id.v != g_alice.mesh.v, "bob lists alice's mesh");
    free(l);
    return e;
}

/* an array over alice's mesh, named by id */
static sm_err o_create_array(sm_rpc_channel *ch, char *err, size_t n)
{
    sm_mesh m;
    sm_svc_create_array_req q = {.dtype = SM_F32, .has_shape = 1, .kind = SM_PUT_SHARDS};
    q.shape = HARNESS_SHAPE(8, 4);
    q.sharding = harness_sharding(&m, "i=4", NULL, 0, "P('i')");
    q.sharding.mesh = NULL;
    q.sharding.mesh_id = g_alice.mesh;
    sm_svc_create_array_reply r;
    sm_err e = sm_svc_coord_create_array(ch, DL, &q, &r, err, n);
    if (!e)
        sm_svc_create_array_reply_free(&r);
    return e;
}

static sm_err o_upload(sm_rpc_channel *ch, char *err, size_t n)
{
    sm_svc_upload_stream *st = NULL;
    float data[8] = {0};
    int32_t dev = 0;
    sm_svc_upload_msg m = {.has_header = 1, .data = data, .len = sizeof data, .last = 1};
    m.header = (sm_svc_upload_header){g_alice.pending,     1,      &dev,
                                      HARNESS_SHAPE(2, 4), SM_F32, (int64_t)sizeof data};
    m.checksum = sm_checksum_oneshot(data, sizeof data);
    sm_svc_upload_reply r;
    sm_err e = sm_svc_upload_open(ch, 0, DL, &st, err, n);
    if (e)
        return e;
    if ((e = sm_svc_upload_send(st, &m, err, n))) {
        sm_svc_upload_abort(st);
        return e;
    }
    return sm_svc_upload_finish(st, &r, err, n);
}

static sm_err o_download(sm_rpc_channel *ch, char *err, size_t n)
{
    sm_svc_download_req q = {.array = harness_id_ref(g_alice.x), .device = 0};
    sm_svc_download_stream *st = NULL;
    sm_svc_chunk c;
    int end = 0;
    sm_err e = sm_svc_download_open(ch, 0, &q, DL, &st, err, n);
    if (!e)
        e = sm_svc_download_recv(st, &c, &end, err, n);
    sm_svc_download_free(st);
    return e;
}

static sm_err o_describe(sm_rpc_channel *ch, char *err, size_t n)
{
    sm_array_info info;
    return info_end(sm_svc_coord_describe(ch, DL, harness_id_ref(g_alice.x), &info, err, n), &info);
}

static sm_err o_list_arrays(sm_rpc_channel *ch, char *err, size_t n)
{
    sm_array_info *l = NULL;
    int k = 0;
    sm_err e = sm_svc_coord_list_arrays(ch, DL, &l, &k, err, n);
    for (int i = 0; i < k; i++)
        ck_assert_msg(l[i].id.v != g_alice.x.v && l[i].id.v != g_alice.pending.v,
                      "bob lists alice's array");
    sm_array_info_list_free(l, k);
    return e;
}

static sm_err o_delete(sm_rpc_channel *ch, char *err, size_t n)
{
    return sm_svc_coord_delete(ch, DL, harness_id_ref(g_alice.x), err, n);
}

static sm_err o_reshard(sm_rpc_channel *ch, char *err, size_t n)
{
    sm_mesh m;
    sm_svc_reshard_req q = {.array = harness_id_ref(g_alice.x)};
    q.sharding = harness_sharding(&m, "i=4", NULL, 0, "P(None)");
    sm_array_info info;
    return info_end(sm_svc_coord_reshard(ch, DL, &q, &info, err, n), &info);
}

static sm_err o_replicate(sm_rpc_channel *ch, char *err, size_t n)
{
    sm_svc_replicate_req q = {.array = harness_id_ref(g_alice.x)};
    sm_array_info info;
    return info_end(sm_svc_coord_replicate(ch, DL, &q, &info, err, n), &info);
}

static sm_err o_register(sm_rpc_channel *ch, char *err, size_t n)
{
    sm_svc_register_req q = {
        .address = "127.0.0.1:9", .ndevices = 2, .process_index = -1, .host = "impostor"};
    sm_svc_register_reply r;
    return sm_svc_coord_register(ch, DL, &q, &r, err, n);
}

static sm_err o_heartbeat(sm_rpc_channel *ch, char *err, size_t n)
{
    sm_svc_heartbeat_req q = {.worker_id = {1}};
    int known = 0;
    return sm_svc_coord_heartbeat(ch, DL, &q, &known, err, n);
}

static sm_err o_commit(sm_rpc_channel *ch, char *err, size_t n)
{
    int32_t dev = 0;
    sm_svc_commit_req q = {g_alice.pending, 1, &dev, 0, 32, 0, NULL};
    sm_svc_upload_reply r;
    return sm_svc_coord_commit_shards(ch, DL, &q, &r, err, n);
}

static sm_err o_submit(sm_rpc_channel *ch, char *err, size_t n)
{
    sm_program *p = twice_program();
    sm_array_ref arg = harness_id_ref(g_alice.x);
    sm_svc_submit_req q = {.program = p, .nargs = 1, .args = &arg, .check_vma = 1};
    sm_job_id id;
    sm_err e = sm_svc_job_submit(ch, DL, &q, &id, err, n);
    sm_program_free(p);
    return e;
}

static sm_err o_wait(sm_rpc_channel *ch, char *err, size_t n)
{
    sm_job_info j;
    return job_end(sm_svc_job_wait(ch, DL, g_alice.job, 100, &j, err, n), &j);
}

static sm_err o_get(sm_rpc_channel *ch, char *err, size_t n)
{
    sm_job_info j;
    return job_end(sm_svc_job_get(ch, DL, g_alice.job, &j, err, n), &j);
}

static sm_err o_cancel(sm_rpc_channel *ch, char *err, size_t n)
{
    sm_job_info j;
    return job_end(sm_svc_job_cancel(ch, DL, g_alice.job, &j, err, n), &j);
}

static sm_err o_save(sm_rpc_channel *ch, char *err, size_t n)
{
    sm_svc_save_req q = {.array = harness_id_ref(g_alice.x), .dir = "/tmp/shmap-tenant-ckpt"};
    sm_svc_save_reply r;
    return sm_svc_coord_save(ch, DL, &q, &r, err, n);
}

static sm_err o_load(sm_rpc_channel *ch, char *err, size_t n)
{
    sm_mesh m;
    sm_svc_load_req q = {.dir = "/tmp/shmap-tenant-ckpt"};
    q.sharding = harness_sharding(&m, "i=4", NULL, 0, "P('i')");
    sm_array_info info;
    return info_end(sm_svc_coord_load(ch, DL, &q, &info, err, n), &info);
}

/* One row per Coordinator method: whether only the cluster's own processes
 * may call it (PERMISSION_DENIED to a caller without a client certificate,
 * and to a tenant's token), and bob's call on alice's objects with what it
 * must give: NOT_FOUND where it names one of them (as for an object that
 * does not exist: no existence leak), PERMISSION_DENIED where no tenant
 * may call it, SM_OK where it names none (and then shows none). */
static const struct {
    const char *name;
    int cluster_only;
    sm_err (*other)(sm_rpc_channel *ch, char *err, size_t n);
    sm_err want;
} g_rows[] = {
    {"Negotiate", 0, o_negotiate, SM_OK},
    {"ListDevices", 0, o_list_devices, SM_OK},
    {"CreateMesh", 0, o_create_mesh, SM_OK},
    {"GetMesh", 0, o_get_mesh, SM_ENOTFOUND},
    {"ListMeshes", 0, o_list_meshes, SM_OK},
    {"CreateArray", 0, o_create_array, SM_ENOTFOUND},
    {"Upload", 0, o_upload, SM_ENOTFOUND},
    {"Download", 0, o_download, SM_ENOTFOUND},
    {"Describe", 0, o_describe, SM_ENOTFOUND},
    {"ListArrays", 0, o_list_arrays, SM_OK},
    {"Delete", 0, o_delete, SM_ENOTFOUND},
    {"Reshard", 0, o_reshard, SM_ENOTFOUND},
    {"Replicate", 0, o_replicate, SM_ENOTFOUND},
    {"RegisterWorker", 1, o_register, SM_EPERM},
    {"Heartbeat", 1, o_heartbeat, SM_EPERM},
    {"CommitShards", 0, o_commit, SM_ENOTFOUND},
    {"SubmitJob", 0, o_submit, SM_ENOTFOUND},
    {"WaitJob", 0, o_wait, SM_ENOTFOUND},
    {"GetJob", 0, o_get, SM_ENOTFOUND},
    {"CancelJob", 0, o_cancel, SM_ENOTFOUND},
    {"Save", 0, o_save, SM_EPERM},
    {"Load", 0, o_load, SM_EPERM},
};
#define NROWS ((int)(sizeof g_rows / sizeof g_rows[0]))

static int row_of(const char *name)
{
    for (int r = 0; r < NROWS; r++)
        if (!strcmp(g_rows[r].name, name))
            return r;
    return -1;
}

/* Every Coordinator method has its row, and every row is a method. */
START_TEST(test_rows_cover_methods)
{
    const ProtobufCServiceDescriptor *svc = &shmap__v1__coordinator__descriptor;
    for (unsigned i = 0; i < svc->n_methods; i++)
        ck_assert_msg(row_of(svc->methods[i].name) >= 0,
                      "Coordinator.%s has no row in g_rows: say what a tenant's call on another "
                      "tenant's objects gives",
                      svc->methods[i].name);
    ck_assert_int_eq(NROWS, (int)svc->n_methods);
}
END_TEST

static const caller g_callers[] = {
    {"plaintext, alice's token", 0, 0, HARNESS_TENANT_TOKEN},
    {"TLS without a certificate, the cluster's token", 1, 0, HARNESS_CLUSTER_TOKEN},
    {"TLS with the client certificate, a wrong token", 1, 1, "wrong-token-0123456789abcdef"},
    {"TLS with the client certificate, no token", 1, 1, NULL},
    {"TLS without a certificate, alice's token", 1, 0, HARNESS_TENANT_TOKEN},
    {"TLS with the client certificate, alice's token", 1, 1, HARNESS_TENANT_TOKEN},
    {"TLS with the client certificate, the cluster's token", 1, 1, HARNESS_CLUSTER_TOKEN},
};

/* What caller k gets from a Coordinator method (row r): -1 when it is let
 * in (the positive control, and alice's own calls: what the handler says
 * of an empty request is not this test's business). */
static int want_coord(const caller *k, int r)
{
    if (!k->tls)
        return SM_EUNAVAILABLE; /* the handshake */
    if (!k->token ||
        (strcmp(k->token, HARNESS_CLUSTER_TOKEN) && strcmp(k->token, HARNESS_TENANT_TOKEN)))
        return SM_EAUTH;
    if (g_rows[r].cluster_only && (!k->cert || strcmp(k->token, HARNESS_CLUSTER_TOKEN)))
        return SM_EPERM;
    return -1;
}

/* ... and from a Worker method: only the cluster's certificate and token
 * together. PutShard and GetShard (grant methods) take a call without
 * them to its grants, and an empty request has none: UNAUTHENTICATED. */
static int want_worker(const caller *k, const char *method)
{
    int grant = !strcmp(method, "PutShard") || !strcmp(method, "GetShard");
    if (!k->tls)
        return SM_EUNAVAILABLE; /* the handshake */
    if (!k->token || strcmp(k->token, HARNESS_CLUSTER_TOKEN))
        return SM_EAUTH;
    if (!k->cert) /* the cluster's token without its certificate */
        return grant ? SM_EAUTH : SM_EPERM;
    return -1;
}

static void check(sm_err e, int want, const char *what, const char *svc, const char *method,
                  const char *err)
{
    if (want >= 0)
        ck_assert_msg(e == (sm_err)want, "%s: %s.%s gave %s, not %s: %s", what, svc, method,
                      sm_err_name(e), sm_err_name((sm_err)want), err);
    else /* let in: whatever the handler says, but no refusal of the caller */
        ck_assert_msg(e != SM_EAUTH && e != SM_EUNAVAILABLE &&
                          !(e == SM_EPERM && strstr(err, "cluster's own processes")),
                      "%s: %s.%s was refused (%s): %s", what, svc, method, sm_err_name(e), err);
}

/* _i: one caller, against every Coordinator and every Worker method. */
START_TEST(test_every_method)
{
    const caller *k = &g_callers[_i];
    const ProtobufCServiceDescriptor *cs = &shmap__v1__coordinator__descriptor,
                                     *ws = &shmap__v1__worker__descriptor;
    char err[1024];
    conn cn = dial(k, g_s->target);
    for (unsigned i = 0; i < cs->n_methods; i++) {
        int r = row_of(cs->methods[i].name);
        ck_assert_int_ge(r, 0);
        int want = want_coord(k, r);
        err[0] = 0;
        /* a call let in must not touch alice's objects: empty requests
         * name none; a short deadline for streams that wait for more */
        sm_err e = call_empty(cn.ch, cs, &cs->methods[i], want >= 0 ? DL : 3000, err, sizeof err);
        check(e, want, k->what, "Coordinator", cs->methods[i].name, err);
    }
    hangup(&cn);
    cn = dial(k, g_sworker);
    for (unsigned i = 0; i < ws->n_methods; i++) {
        int want = want_worker(k, ws->methods[i].name);
        err[0] = 0;
        sm_err e = call_empty(cn.ch, ws, &ws->methods[i], want >= 0 ? DL : 3000, err, sizeof err);
        check(e, want, k->what, "Worker", ws->methods[i].name, err);
    }
    hangup(&cn);
}
END_TEST

/* Every run of digits in s becomes one '#'. */
static void digits_out(char *s)
{
    char *w = s;
    for (const char *r = s; *r; r++)
        if (!isdigit((unsigned char)*r))
            *w++ = *r;
        else if (!isdigit((unsigned char)r[1]))
            *w++ = '#';
    *w = 0;
}

/* bob (TLS, the CA alone, his token) on alice's objects, every Coordinator
 * method; then alice's objects are as they were, and bob's NOT_FOUND for
 * alice's array reads as for an array that never existed. */
START_TEST(test_other_tenant)
{
    const caller bob = {"bob", 1, 0, HARNESS_OTHER_TOKEN};
    const ProtobufCServiceDescriptor *cs = &shmap__v1__coordinator__descriptor;
    char err[1024], err2[1024];
    conn cn = dial(&bob, g_s->target);
    for (unsigned i = 0; i < cs->n_methods; i++) {
        int r = row_of(cs->methods[i].name);
        ck_assert_int_ge(r, 0);
        err[0] = 0;
        sm_err e = g_rows[r].other(cn.ch, err, sizeof err);
        check(e, (int)g_rows[r].want, "bob on alice's objects", "Coordinator", g_rows[r].name, err);
    }
    /* no existence leak: alice's array and one nobody has, the same words */
    sm_array_info info;
    ck_assert_int_eq(
        sm_svc_coord_describe(cn.ch, DL, harness_id_ref(g_alice.x), &info, err, sizeof err),
        SM_ENOTFOUND);
    sm_array_id none = {g_alice.x.v + 100000};
    ck_assert_int_eq(
        sm_svc_coord_describe(cn.ch, DL, harness_id_ref(none), &info, err2, sizeof err2),
        SM_ENOTFOUND);
    digits_out(err);
    digits_out(err2);
    ck_assert_str_eq(err, err2);
    hangup(&cn);
    /* alice's objects are untouched */
    sm_client *c = harness_client(g_s);
    ck_assert_int_eq(sm_client_describe(c, harness_id_ref(g_alice.x), &info, err, sizeof err),
                     SM_OK);
    ck_assert_int_eq(info.state, SM_ARRAY_READY);
    sm_array_info_free(&info);
    ck_assert_int_eq(sm_client_describe(c, harness_id_ref(g_alice.pending), &info, err, sizeof err),
                     SM_OK);
    ck_assert_int_eq(info.state, SM_ARRAY_PENDING);
    sm_array_info_free(&info);
    sm_job_info j;
    ck_assert_int_eq(sm_job_status(c, g_alice.job, &j, err, sizeof err), SM_OK);
    ck_assert_int_eq(j.state, SM_JOB_DONE);
    sm_job_info_free(&j);
    sm_mesh_info mi;
    ck_assert_int_eq(sm_client_mesh_get(c, g_alice.mesh, NULL, &mi, err, sizeof err), SM_OK);
    sm_client_close(c);
}
END_TEST

int main(void)
{
    Suite *s =
        SUITE_CASE(suite_create("e2e_tenants"), "tenants", 120, SUITE_CHECKED(setup, teardown),
                   {test_isolation}, {test_tokens}, {test_grants_direct}, {test_grants_refused},
                   {test_max_jobs}, {test_jobs_restart});
    SUITE_CASE(
        s, "every_method", 300, SUITE_UNCHECKED(secure_up, secure_down), {test_rows_cover_methods},
        {test_every_method, (int)(sizeof g_callers / sizeof g_callers[0])}, {test_other_tenant});
    return harness_run_suite(s);
}
