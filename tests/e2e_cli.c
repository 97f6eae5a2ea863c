/* e2e_cli: the online shmapctl subcommands against a real cluster of 4
 * workers x 2 devices (the data loading guide's 4 processes): --help and
 * usage errors, devices, meshes, put / describe --json / get / get-shard /
 * reshard / ls / rm, put-shards, and put-local from 4 concurrent shmapctl
 * processes. */
#include <check.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "suite_main.h"

static harness_cluster *g_h;
static char *g_dir;

static void cluster_up(void)
{
    g_h = harness_cluster_up(4, 2, "e2e_cli");
    if (!(g_dir = harness_tmpdir())) {
        fprintf(stderr, "e2e_cli: cannot create a temp dir\n");
        exit(1);
    }
}

static void cluster_down(void)
{
    harness_cluster_stop(g_h);
    harness_rmdir(g_dir);
    g_h = NULL;
    g_dir = NULL;
}

/* Runs shmapctl; checks the exit code; returns the run (caller frees). */
static harness_run ctl(int want, const char *const *args)
{
    harness_run r;
    ck_assert_int_eq(harness_shmapctl(g_h, &r, args), 0);
    ck_assert_msg(r.code == want, "shmapctl %s: exit %d, want %d; stderr: %s", args[0], r.code,
                  want, r.err);
    if (want != 0) {
        ck_assert_msg(strncmp(r.err, "shmapctl: ", 10) == 0, "stderr: %s", r.err);
        ck_assert_msg(strchr(r.err, '\n') == r.err + strlen(r.err) - 1, "one line: %s", r.err);
    }
    return r;
}

static json_t *ctl_json(const char *const *args)
{
    harness_run r = ctl(0, args);
    json_error_t je;
    json_t *j = json_loads(r.out, 0, &je);
    ck_assert_msg(j != NULL, "shmapctl %s printed no JSON: %s (%s)", args[0], je.text, r.out);
    harness_run_free(&r);
    return j;
}

static char *path_in(const char *name)
{
    static char buf[8][512];
    static int k;
    char *p = buf[k++ % 8];
    snprintf(p, 512, "%s/%s", g_dir, name);
    return p;
}

static void write_npy(const char *path, const sm_array *a)
{
    char err[512];
    ck_assert_msg(sm_npy_write(path, a, err, sizeof err) == SM_OK, "%s", err);
}

static void check_npy_equal(const char *path, const sm_array *want)
{
    sm_array *a = NULL;
    char err[512];
    ck_assert_msg(sm_npy_read(path, &a, err, sizeof err) == SM_OK, "%s", err);
    ck_assert_int_eq(a->dtype, want->dtype);
    ck_assert(sm_shape_equal(&a->shape, &want->shape));
    ck_assert_int_eq(memcmp(a->data, want->data, (size_t)want->nbytes), 0);
    sm_array_free(a);
}

/* Runs shmapctl, which must succeed, dropping its output. */
static void ctl_ok(const char *const *args)
{
    harness_run r = ctl(0, args);
    harness_run_free(&r);
}

/* shmapctl get name into file (in the temp dir) holds want. */
static void get_equal(const char *name, const char *file, const sm_array *want)
{
    const char *args[] = {"get", name, path_in(file), NULL};
    ctl_ok(args);
    check_npy_equal(path_in(file), want);
}

/* get_equal, then `shmapctl rm name`; frees want. */
static void get_equal_rm(const char *name, const char *file, sm_array *want)
{
    const char *rm[] = {"rm", name, NULL};
    get_equal(name, file, want);
    ctl_ok(rm);
    sm_array_free(want);
}

static const char *commands[] = {"devices",   "mesh", "put",       "put-shards",
                                 "put-local", "get",  "get-shard", "describe",
                                 "reshard",   "rm",   "ls"};

START_TEST(help_for_every_command)
{
    const char *args[] = {commands[_i], "--help", NULL};
    harness_run r = ctl(0, args);
    HARNESS_HAS(r.out, "Usage: shmapctl", "Example", "--target");
    harness_run_free(&r);
}
END_TEST

START_TEST(usage_errors)
{
    const char *a1[] = {"put", "x.npy", "--mesh", "x=8", NULL}; /* no --spec */
    const char *a2[] = {"ls", "--bogus", NULL};
    const char *a3[] = {"get", "x", NULL};
    const char *a4[] = {"get-shard", "x", "out.npy", NULL}; /* no --device */
    const char *a5[] = {"put-local", "x.npy", "--mesh", "x=8", "--spec", "P()", NULL};
    const char *a6[] = {"mesh", "frobnicate", NULL};
    const char *const *all[] = {a1, a2, a3, a4, a5, a6};
    for (int i = 0; i < 6; i++) {
        harness_run r = ctl(2, all[i]);
        harness_run_free(&r);
    }
    /* Not a usage error but a failure: exit 1. */
    const char *a7[] = {"describe", "nothing-here", NULL};
    harness_run r = ctl(1, a7);
    ck_assert_ptr_nonnull(strstr(r.err, "NOT_FOUND"));
    harness_run_free(&r);
    const char *a8[] = {"ls", "--target", "127.0.0.1:1", NULL};
    r = ctl(1, a8);
    harness_run_free(&r);
}
END_TEST

START_TEST(devices_json)
{
    const char *args[] = {"devices", "--json", NULL};
    json_t *j = ctl_json(args);
    ck_assert(json_is_array(j));
    ck_assert_int_eq(json_array_size(j), 4);
    int procs = 0;
    for (size_t i = 0; i < 4; i++) {
        json_t *w = json_array_get(j, i);
        ck_assert_str_eq(json_string_value(json_object_get(w, "state")), "alive");
        ck_assert_int_eq(json_array_size(json_object_get(w, "devices")), 2);
        ck_assert_ptr_nonnull(json_string_value(json_object_get(w, "address")));
        procs |= 1 << json_integer_value(json_object_get(w, "process_index"));
    }
    ck_assert_int_eq(procs, 0xf);
    json_decref(j);
}
END_TEST

START_TEST(meshes)
{
    const char *c1[] = {"mesh", "create", "i=4,j=2", "--name", "grid", "--json", NULL};
    json_t *m = ctl_json(c1);
    ck_assert_str_eq(json_string_value(json_object_get(m, "name")), "grid");
    ck_assert_int_eq(json_array_size(json_object_get(m, "devices")), 8);
    json_decref(m);
    const char *c2[] = {"mesh", "create", "k=8", "--devices", "7,6,5,4,3,2,1,0", "--json", NULL};
    m = ctl_json(c2);
    ck_assert_int_eq(json_integer_value(json_array_get(json_object_get(m, "devices"), 0)), 7);
    json_decref(m);
    const char *c3[] = {"mesh", "describe", "grid", "--json", NULL};
    m = ctl_json(c3);
    ck_assert_int_eq(json_integer_value(json_array_get(json_object_get(m, "sizes"), 1)), 2);
    json_decref(m);
    /* axis types: kept by the service, part of the mesh */
    const char *c5[] = {"mesh",   "create", "i=4,j=2,axis_types=(Auto,Explicit)",
                        "--name", "auto",   NULL};
    harness_run r = ctl(0, c5);
    ck_assert_msg(strstr(r.out, "Mesh('i': 4, 'j': 2, axis_types=(Auto, Explicit))"), "%s", r.out);
    harness_run_free(&r);
    const char *c6[] = {"mesh", "describe", "auto", "--json", NULL};
    m = ctl_json(c6);
    json_t *types = json_object_get(m, "axis_types");
    ck_assert_str_eq(json_string_value(json_array_get(types, 0)), "Auto");
    ck_assert_str_eq(json_string_value(json_array_get(types, 1)), "Explicit");
    json_decref(m);
    const char *c4[] = {"mesh", "ls", "--json", NULL};
    m = ctl_json(c4);
    ck_assert_int_ge(json_array_size(m), 3);
    json_decref(m);
}
END_TEST

/* describe --json has every documented key, and its index map is JAX's. */
static void check_describe_json(json_t *d, const char *type)
{
    static const char *keys[] = {"name", "id",   "dtype", "shape",  "type",
                                 "mesh", "spec", "state", "devices"};
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++)
        ck_assert_msg(json_object_get(d, keys[k]) != NULL, "describe --json lacks '%s'", keys[k]);
    json_t *mesh = json_object_get(d, "mesh");
    ck_assert_ptr_nonnull(json_object_get(mesh, "axes"));
    ck_assert_ptr_nonnull(json_object_get(mesh, "sizes"));
    ck_assert_ptr_nonnull(json_object_get(mesh, "devices"));
    ck_assert_str_eq(json_string_value(json_object_get(d, "type")), type);
    ck_assert_str_eq(json_string_value(json_object_get(d, "state")), "ready");
    json_t *devs = json_object_get(d, "devices");
    ck_assert_int_eq(json_array_size(devs), 8);
    for (size_t i = 0; i < 8; i++) {
        json_t *e = json_array_get(devs, i);
        static const char *dk[] = {"device", "worker", "coords", "index", "replica_id"};
        for (size_t k = 0; k < 5; k++)
            ck_assert_msg(json_object_get(e, dk[k]) != NULL, "device entry lacks '%s'", dk[k]);
    }
}

START_TEST(put_describe_get_reshard_rm)
{
    sm_shape s = HARNESS_SHAPE(64, 128);
    sm_array *x = harness_array_iota(SM_F32, &s, 42);
    write_npy(path_in("a.npy"), x);
    const char *p1[] = {"put",         path_in("a.npy"), "--mesh", "x=4,y=2", "--spec",
                        "P('x', 'y')", "--name",         "a",      "--json",  NULL};
    json_t *j = ctl_json(p1);
    ck_assert_str_eq(json_string_value(json_object_get(j, "name")), "a");
    json_decref(j);

    const char *d1[] = {"describe", "a", "--json", NULL};
    j = ctl_json(d1);
    check_describe_json(j, "f32[64@x,128@y]");
    /* Mesh position 3 is (1, 1): rows [16, 32), columns [64, 128). */
    json_t *e = json_array_get(json_object_get(j, "devices"), 3);
    json_t *order = json_object_get(json_object_get(j, "mesh"), "devices");
    ck_assert_int_eq(json_integer_value(json_object_get(e, "device")),
                     json_integer_value(json_array_get(order, 3)));
    ck_assert_int_eq(json_integer_value(json_array_get(json_object_get(e, "coords"), 1)), 1);
    json_t *ix = json_object_get(e, "index");
    ck_assert_int_eq(json_integer_value(json_array_get(json_array_get(ix, 0), 0)), 16);
    ck_assert_int_eq(json_integer_value(json_array_get(json_array_get(ix, 1), 1)), 128);
    json_decref(j);

    const char *d2[] = {"describe", "a", NULL};
    harness_run r = ctl(0, d2);
    HARNESS_HAS(r.out, "f32[64@x,128@y]", "[16:32, 64:128]");
    harness_run_free(&r);

    get_equal("a", "a_out.npy", x);

    const char *g2[] = {"get-shard", "a", "--device", "5", path_in("a3.npy"), NULL};
    ctl_ok(g2);
    sm_array *s3 = NULL;
    char err[512];
    ck_assert_int_eq(sm_npy_read(path_in("a3.npy"), &s3, err, sizeof err), SM_OK);
    sm_shape want = HARNESS_SHAPE(16, 64);
    ck_assert(sm_shape_equal(&s3->shape, &want));
    sm_array_free(s3);

    const char *rs[] = {"reshard", "a", "--spec", "P(None, 'x')", "--name", "b", "--json", NULL};
    j = ctl_json(rs);
    ck_assert_str_eq(json_string_value(json_object_get(j, "type")), "f32[64,128@x]");
    json_decref(j);
    get_equal("b", "b_out.npy", x);

    const char *l1[] = {"ls", "--json", NULL};
    j = ctl_json(l1);
    int seen = 0;
    for (size_t i = 0; i < json_array_size(j); i++) {
        const char *n = json_string_value(json_object_get(json_array_get(j, i), "name"));
        seen += n && (!strcmp(n, "a") || !strcmp(n, "b"));
    }
    ck_assert_int_eq(seen, 2);
    json_decref(j);

    /* put --replicas 2: a copy of every block on the other worker, listed
     * by describe; a third replica is a usage error */
    const char *pr[] = {
        "put", path_in("a.npy"), "--mesh", "x=4,y=2", "--spec", "P('x', 'y')", "--name",
        "c",   "--replicas",     "2",      "--json",  NULL};
    j = ctl_json(pr);
    json_t *copies = json_object_get(j, "copies");
    ck_assert_int_eq((int)json_array_size(copies), 8);
    for (size_t i = 0; i < json_array_size(copies); i++)
        ck_assert(json_is_true(json_object_get(json_array_get(copies, i), "present")));
    json_decref(j);
    const char *d3[] = {"describe", "c", NULL};
    r = ctl(0, d3);
    ck_assert_ptr_nonnull(strstr(r.out, "copies (kept on other workers"));
    harness_run_free(&r);
    get_equal("c", "c_out.npy", x);
    const char *p3[] = {"put",         path_in("a.npy"), "--mesh", "x=4,y=2",    "--spec",
                        "P('x', 'y')", "--name",         "d",      "--replicas", "3",
                        NULL};
    r = ctl(2, p3);
    ck_assert_ptr_nonnull(strstr(r.err, "--replicas needs an integer from 1 to 2"));
    harness_run_free(&r);

    const char *rm[] = {"rm", "a", "b", "c", NULL};
    ctl_ok(rm);
    r = ctl(1, d1);
    ck_assert_ptr_nonnull(strstr(r.err, "NOT_FOUND"));
    harness_run_free(&r);
    sm_array_free(x);
}
END_TEST

START_TEST(put_shards_cli)
{
    sm_shape shard = HARNESS_SHAPE(1, 4), g = HARNESS_SHAPE(8, 4);
    sm_array *x = harness_array_iota(SM_I32, &g, 8);
    char args_buf[8][600];
    const char *args[32] = {"put-shards", "--mesh", "x=8",     "--devices", "0,1,2,3,4,5,6,7",
                            "--spec",     "P('x')", "--shape", "8,4",       "--dtype",
                            "i32",        "--name", "ps"};
    int n = 13;
    for (int d = 0; d < 8; d++) {
        sm_array *blk = NULL;
        char err[256], name[32];
        ck_assert_int_eq(sm_array_create(SM_I32, &shard, &blk, err, sizeof err), SM_OK);
        memcpy(blk->data, (char *)x->data + d * 16, 16);
        snprintf(name, sizeof name, "s%d.npy", d);
        write_npy(path_in(name), blk);
        snprintf(args_buf[d], sizeof args_buf[d], "%d=%s", d, path_in(name));
        sm_array_free(blk);
    }
    /* With the explicit order 0..7, device d holds row d. */
    for (int d = 0; d < 7; d++)
        args[n++] = args_buf[d];
    args[n] = NULL;
    harness_run r = ctl(1, args); /* device 7 missing */
    harness_run_free(&r);
    args[n++] = args_buf[7];
    args[n] = NULL;
    args[12] = "ps2";
    ctl_ok(args);
    get_equal_rm("ps2", "ps_out.npy", x);
}
END_TEST

typedef struct {
    const char *const *args;
    harness_run r;
} ctl_job;

static void *ctl_thread(void *arg)
{
    ctl_job *j = arg;
    harness_shmapctl(g_h, &j->r, j->args);
    return NULL;
}

/* make_array_from_process_local_data from 4 processes at once, each sending
 * only the rows its 2 devices need. */
START_TEST(put_local_four_processes)
{
    sm_shape g = HARNESS_SHAPE(64, 128), ls = HARNESS_SHAPE(16, 128);
    sm_array *x = harness_array_iota(SM_F32, &g, 64);
    const char *args[4][16];
    char files[4][512], procs[4][8];
    ctl_job jobs[4];
    pthread_t th[4];

    for (int p = 0; p < 4; p++) {
        sm_array *loc = NULL;
        char err[256];
        ck_assert_int_eq(sm_array_create(SM_F32, &ls, &loc, err, sizeof err), SM_OK);
        memcpy(loc->data, (char *)x->data + (size_t)p * 16 * 128 * 4, (size_t)loc->nbytes);
        snprintf(files[p], sizeof files[p], "%s/local%d.npy", g_dir, p);
        write_npy(files[p], loc);
        sm_array_free(loc);
        snprintf(procs[p], sizeof procs[p], "%d", p);
        const char *a[] = {"put-local",     files[p], "--process", procs[p], "--name",
                           "loaded",        "--mesh", "x=4,y=2",   "--spec", "P('x', 'y')",
                           "--deadline-ms", "20000",  NULL};
        memcpy(args[p], a, sizeof a);
        jobs[p].args = args[p];
        pthread_create(&th[p], NULL, ctl_thread, &jobs[p]);
    }
    for (int p = 0; p < 4; p++) {
        pthread_join(th[p], NULL);
        ck_assert_msg(jobs[p].r.code == 0, "process %d: %s", p, jobs[p].r.err);
        harness_run_free(&jobs[p].r);
    }
    sm_client *c = harness_client(g_h);
    ck_assert_int_eq(harness_wait_state(c, sm_array_ref_parse("loaded"), SM_ARRAY_READY, 10000),
                     SM_ARRAY_READY);
    sm_client_close(c);
    get_equal_rm("loaded", "loaded.npy", x);
}
END_TEST

int main(void)
{
    return HARNESS_CLUSTER_SUITE(
        "e2e_cli", 120, cluster_up, cluster_down,
        {help_for_every_command, (int)(sizeof commands / sizeof commands[0])}, {usage_errors},
        {devices_json}, {meshes}, {put_describe_get_reshard_rm}, {put_shards_cli},
        {put_local_four_processes});
}
