/* e2e_tenants: a cluster with tenants (--tokens): each tenant sees its own
 * arrays, meshes, names and jobs only (another's are NOT_FOUND, never
 * "forbidden"), names are per tenant, quotas refuse RESOURCE_EXHAUSTED, a
 * tenant's token opens no worker port (its transfers go through the
 * coordinator), a wrong token is UNAUTHENTICATED, the cluster's token sees
 * everything, and SIGHUP reads the file again. Real processes. */
#define _GNU_SOURCE
#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "shmap_job.h"
#include "sm_rpc.h"
#include "sm_svc.h"

#define CLUSTER "cluster-token-0123456789"
#define ALICE   "alice-token-0123456789abc"
#define BOB     "bob-token-0123456789abcdef"
#define CAROL   "carol-token-0123456789abcde"

static harness_cluster *g_h;
static char g_tokens[512];
static char *g_dir;

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
    char err[512], state[512];
    snprintf(state, sizeof state, "%s/state", g_dir);
    const char *args[] = {"--tokens", g_tokens, "--state-dir", state, NULL};
    harness_opts o = {.nworkers = 2, .devices_per_worker = 2, .token = CLUSTER, .coord_args = args};
    sm_err e = harness_cluster_start(&o, &g_h, err, sizeof err);
    ck_assert_msg(e == SM_OK, "cluster: %s", err);
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
    harness_cluster_stop(g_h);
    g_h = NULL;
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
    sm_program *p = NULL;
    ck_assert_int_eq(sm_program_parse("mesh i=4\n"
                                      "shard_map f(x: f32[8,256] @ P('i')) -> P('i'):\n"
                                      "    return x + x\n",
                                      "f.shmap", &p, err, sizeof err),
                     SM_OK);
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
    sm_worker_info *w = NULL;
    int n = 0;
    ck_assert_int_eq(sm_client_devices(root, &w, &n, err, sizeof err), SM_OK);
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

/* A job that keeps a job thread busy for a while: 64 products of
 * 128x512 by 512x512 blocks on each of 4 devices. */
static const char *busy_text = "mesh i=4\n"
                               "shard_map busy(a: f32[512,512] @ P('i'), w: f32[512,512] @ "
                               "P()) -> P('i'):\n"
                               "    z = a\n"
                               "    for k in range(64):\n"
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
    sm_program *p = NULL;
    ck_assert_int_eq(sm_program_parse(busy_text, "busy.shmap", &p, err, sizeof err), SM_OK);
    sm_array_ref args[2] = {{{0}, "a"}, {{0}, "w"}};
    sm_job_id ids[4];
    int n = 0;
    sm_err e = SM_OK;
    /* two run (the coordinator's job threads), the third waits, the fourth is one too many;
     * a job that ended before the next was submitted leaves room for one more */
    for (int k = 0; k < 8 && (e = sm_job_submit(bob, p, 2, args, NULL, 1, 0, &ids[n % 4], err,
                                                sizeof err)) == SM_OK;
         k++)
        n++;
    ck_assert_msg(e == SM_ERESOURCE, "%d jobs submitted; then %s: %s", n, sm_err_name(e), err);
    ck_assert_int_ge(n, 3);
    ck_assert_msg(strstr(err, "tenant bob already has 1 jobs waiting to start") &&
                      strstr(err, "max-jobs in --tokens"),
                  "%s", err);
    /* alice's jobs do not count against bob's quota */
    sm_job_id theirs;
    sm_array_info none = put_as(alice, "x", 8, SM_OK);
    sm_program *q = NULL;
    ck_assert_int_eq(sm_program_parse("mesh i=4\n"
                                      "shard_map f(x: f32[8,256] @ P('i')) -> P('i'):\n"
                                      "    return x + x\n",
                                      "f.shmap", &q, err, sizeof err),
                     SM_OK);
    sm_array_ref x = {{0}, "x"};
    ck_assert_msg(sm_job_submit(alice, q, 1, &x, NULL, 1, 0, &theirs, err, sizeof err) == SM_OK,
                  "%s", err);
    sm_job_info info;
    ck_assert_int_eq(sm_job_wait(alice, theirs, 60000, &info, err, sizeof err), SM_OK);
    ck_assert_int_eq(info.state, SM_JOB_DONE);
    sm_job_info_free(&info);
    for (int k = 0; k < n && k < 4; k++) {
        ck_assert_int_eq(sm_job_cancel(bob, ids[(n - 1 - k) % 4], &info, err, sizeof err), SM_OK);
        sm_job_info_free(&info);
    }
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
    sm_program *p = NULL;
    ck_assert_int_eq(sm_program_parse("mesh i=4\n"
                                      "shard_map f(x: f32[8,256] @ P('i')) -> P('i'):\n"
                                      "    return x + x\n",
                                      "f.shmap", &p, err, sizeof err),
                     SM_OK);
    sm_array_ref arg = {{0}, "x"};
    sm_job_info done;
    ck_assert_msg(sm_job_run(bob, p, 1, &arg, NULL, 1, 0, 60000, &done, err, sizeof err) == SM_OK,
                  "%s", err);
    ck_assert_int_eq(done.state, SM_JOB_DONE);
    sm_client_close(bob);
    harness_cluster_stop(g_h);
    g_h = NULL;
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

int main(void)
{
    Suite *s = suite_create("e2e_tenants");
    TCase *tc = tcase_create("tenants");
    tcase_set_timeout(tc, 120);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_isolation);
    tcase_add_test(tc, test_tokens);
    tcase_add_test(tc, test_max_jobs);
    tcase_add_test(tc, test_jobs_restart);
    suite_add_tcase(s, tc);
    return harness_run_suite(s);
}
