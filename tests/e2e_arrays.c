/* e2e_arrays: arrays through a real cluster (coordinator + worker
 * processes on loopback) with libshmap: device_put / get round trips for
 * every layout of the data loading guide, several meshes and dtypes, a
 * multi-chunk array, per-device shards, per-index callbacks, process-local
 * uploads from concurrent clients, resharding, names and deletion. */
#include <check.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "harness.h"
#include "suite_main.h"

/* Clusters shared by the suite: 2 workers x 4 devices and 1 worker x 8. */
static harness_cluster *g_two, *g_one;

static void clusters_up(void)
{
    g_two = harness_cluster_up(2, 4, "e2e_arrays");
    g_one = harness_cluster_up(1, 8, "e2e_arrays");
}

static void clusters_down(void)
{
    harness_cluster_stop(g_two);
    harness_cluster_stop(g_one);
    g_two = g_one = NULL;
}

/* Asserts a and b hold the same bytes, naming the first difference. */
#define assert_same(a, b, n) assert_same_at(__LINE__, a, b, n)
static void assert_same_at(int line, const void *a, const void *b, int64_t n)
{
    const unsigned char *p = a, *q = b;
    int64_t i = 0;
    if (memcmp(a, b, (size_t)n) == 0)
        return;
    while (p[i] == q[i])
        i++;
    ck_assert_msg(0, "line %d: byte %lld of %lld differs: %u != %u", line, (long long)i,
                  (long long)n, p[i], q[i]);
}

/* The description agrees with the sharding computed locally, and the
 * default device order keeps the minor axis inside one worker. */
static void check_info(const sm_array_info *info, sm_dtype t, const sm_shape *shape,
                       const sm_sharding_ref *sh)
{
    sm_device_slice ix[SM_MAX_DEVICES];
    char err[512], type[256];

    ck_assert_int_eq(info->state, SM_ARRAY_READY);
    ck_assert_int_eq(info->dtype, t);
    ck_assert(sm_shape_equal(&info->shape, shape));
    ck_assert(sm_pspec_equal(&info->sharding.spec, &sh->spec));
    if (sh->mesh && !sh->default_order)
        ck_assert_int_eq(memcmp(info->sharding.mesh.devices, sh->mesh->devices,
                                sizeof(int32_t) * (size_t)sh->mesh->ndevices),
                         0);
    ck_assert_int_eq(sm_sharding_indices(&info->sharding, shape, ix, err, sizeof err), SM_OK);
    ck_assert_int_eq(info->nshards, info->sharding.mesh.ndevices);
    for (int i = 0; i < info->nshards; i++) {
        ck_assert_int_eq(info->shards[i].device, ix[i].device);
        ck_assert(sm_index_equal(&info->shards[i].index, &ix[i].index));
        ck_assert_int_eq(info->shards[i].replica_id, ix[i].replica_id);
        ck_assert(info->shards[i].present);
    }
    sm_sharding_type_str(&info->sharding, t, shape, type, sizeof type);
    ck_assert_str_eq(info->type, type);
    if (sh->mesh && sh->default_order && sh->mesh->naxes > 1) {
        const sm_mesh *m = &info->sharding.mesh;
        int64_t minor = m->sizes[m->naxes - 1];
        for (int i = 0; i < info->nshards; i++)
            if (i % minor)
                ck_assert_uint_eq(info->shards[i].worker_id.v, info->shards[i - 1].worker_id.v);
    }
}

/* Puts x with sh, checks the description, gets it back bit-exact, deletes. */
static void round_trip(sm_client *c, const sm_array *x, const sm_sharding_ref *sh)
{
    sm_array_info info;
    char err[512];

    sm_err e = sm_client_put(c, x->dtype, &x->shape, x->data, sh, NULL, &info, err, sizeof err);
    ck_assert_msg(e == SM_OK, "put: %s", err);
    check_info(&info, x->dtype, &x->shape, sh);
    harness_assert_get_delete(c, &info, x);
}

typedef struct {
    const char *axes;
    int32_t devices[8]; /* all zero: default order */
    const char *spec;
} layout;

/* The data loading guide's layouts of a (64,128) array over 8 devices. */
static const layout guide_layouts[] = {
    {"x=8", {0}, "P(None, 'x')"},
    {"x=8", {0, 2, 4, 6, 1, 3, 5, 7}, "P(None, 'x')"},
    {"x=8", {7, 6, 5, 4, 3, 2, 1, 0}, "P('x')"},
    {"x=4,y=2", {0}, "P('x', 'y')"},
    {"x=4,y=2", {0}, "P()"},
    {"x=4,y=2", {0}, "P('x')"},        /* replicas along y: inside one worker */
    {"x=4,y=2", {0}, "P('y')"},        /* replicas along x: across workers */
    {"x=4,y=2", {0}, "P(None, 'x')"},  /* replicated along y, sharded on dim 1 */
    {"x=2,y=4", {0}, "P(('x', 'y'))"}, /* product of axes */
};
#define N_GUIDE ((int)(sizeof guide_layouts / sizeof guide_layouts[0]))

static void run_layout(const harness_cluster *h, int i)
{
    const layout *l = &guide_layouts[i];
    sm_client *c = harness_client(h);
    sm_mesh mesh;
    int explicit_order = l->devices[0] || l->devices[1];
    sm_sharding_ref sh = harness_sharding(&mesh, l->axes, explicit_order ? l->devices : NULL,
                                          explicit_order ? 8 : 0, l->spec);
    sm_shape s = HARNESS_SHAPE(64, 128);
    sm_array *x = harness_array_iota(SM_F32, &s, (uint64_t)i);
    round_trip(c, x, &sh);
    sm_array_free(x);
    sm_client_close(c);
}

START_TEST(guide_layouts_two_workers)
{
    run_layout(g_two, _i);
}
END_TEST

START_TEST(guide_layouts_one_worker)
{
    run_layout(g_one, _i);
}
END_TEST

/* Meshes (8,), (4,2), (2,2,2) on both clusters, rank 1 to 3 arrays. */
typedef struct {
    const char *axes;
    const char *spec;
    int rank;
    int64_t dims[3];
} mesh_case;

static const mesh_case mesh_cases[] = {
    {"a=8", "P('a')", 1, {64}},
    {"a=8", "P(None, 'a')", 2, {4, 32}},
    {"a=4,b=2", "P('a', 'b')", 2, {8, 16}},
    {"a=4,b=2", "P('b', 'a')", 2, {8, 16}},
    {"a=2,b=2,c=2", "P('a', 'b', 'c')", 3, {4, 6, 8}},
    {"a=2,b=2,c=2", "P(('a', 'c'), None, 'b')", 3, {8, 3, 4}},
    {"a=2,b=2,c=2", "P('c')", 3, {2, 5, 3}},
    /* arrays of no elements (a dimension of size 0), as numpy and JAX have them */
    {"a=4,b=2", "P(None, 'b')", 2, {0, 8}},
    {"a=4,b=2", "P('a', 'b')", 2, {0, 8}},
    {"a=2,b=2,c=2", "P('a', None, 'c')", 3, {4, 0, 2}},
};
#define N_MESH ((int)(sizeof mesh_cases / sizeof mesh_cases[0]))

START_TEST(meshes)
{
    const mesh_case *m = &mesh_cases[_i % N_MESH];
    const harness_cluster *h = _i < N_MESH ? g_two : g_one;
    sm_client *c = harness_client(h);
    sm_mesh mesh;
    sm_sharding_ref sh = harness_sharding(&mesh, m->axes, NULL, 0, m->spec);
    sm_shape s = harness_shape_of(m->rank, m->dims);
    sm_array *x = harness_array_iota(SM_I32, &s, 100 + (uint64_t)_i);
    round_trip(c, x, &sh);
    sm_array_free(x);
    sm_client_close(c);
}
END_TEST

static const sm_dtype dtypes[] = {SM_F32, SM_F64, SM_I32, SM_I64, SM_U8, SM_BOOL, SM_F16, SM_BF16};

START_TEST(dtype_round_trips)
{
    sm_client *c = harness_client(g_two);
    sm_mesh mesh;
    sm_sharding_ref sh = harness_sharding(&mesh, "x=4,y=2", NULL, 0, "P('x', 'y')");
    sm_shape s = HARNESS_SHAPE(8, 6);
    sm_array *x = harness_array_iota(dtypes[_i], &s, 7);
    round_trip(c, x, &sh);
    sm_array_free(x);
    sm_client_close(c);
}
END_TEST

/* Shards larger than one 4 MiB chunk, in memory and through .npy files. */
START_TEST(multi_chunk)
{
    sm_client *c = harness_client(g_two);
    sm_mesh mesh;
    sm_shape s = HARNESS_SHAPE(3000, 1024); /* 12.3 MB of f32 */
    sm_array *x = harness_array_iota(SM_F32, &s, 11), *back = NULL;
    static const int32_t pair[2] = {1, 6}; /* one device on each worker */
    sm_sharding_ref sh = harness_sharding(&mesh, "x=2", pair, 2, "P('x')");
    round_trip(c, x, &sh); /* two 6 MB shards */
    sm_sharding_ref rep = harness_sharding(&mesh, "x=2", pair, 2, "P()");
    round_trip(c, x, &rep); /* one 12 MB shard on both devices */

    char *dir = harness_tmpdir(), in[512], out[512], err[512];
    snprintf(in, sizeof in, "%s/in.npy", dir);
    snprintf(out, sizeof out, "%s/out.npy", dir);
    ck_assert_int_eq(sm_npy_write(in, x, err, sizeof err), SM_OK);
    sm_mesh m2;
    sm_sharding_ref sh2 = harness_sharding(&m2, "x=4,y=2", NULL, 0, "P(None, 'y')");
    sm_array_info info;
    sm_err e = sm_client_put_file(c, in, &sh2, "big", &info, err, sizeof err);
    ck_assert_msg(e == SM_OK, "put_file: %s", err);
    e = sm_client_get_file(c, harness_id_ref(info.id), out, err, sizeof err);
    ck_assert_msg(e == SM_OK, "get_file: %s", err);
    ck_assert_int_eq(sm_npy_read(out, &back, err, sizeof err), SM_OK);
    ck_assert(sm_shape_equal(&back->shape, &x->shape));
    assert_same(back->data, x->data, x->nbytes);
    ck_assert_int_eq(sm_client_delete(c, harness_id_ref(info.id), err, sizeof err), SM_OK);
    sm_array_info_free(&info);
    sm_array_free(back);
    harness_rmdir(dir);
    sm_array_free(x);
    sm_client_close(c);
}
END_TEST

/* SHMAP_CLIENT_CACHE_MB: an array fetched, freed and fetched again gets
 * the memory of the one before (no fresh pages); a bad value is refused
 * when connecting. */
START_TEST(client_cache)
{
    char err[512];
    sm_client *c = NULL;
    setenv("SHMAP_CLIENT_CACHE_MB", "lots", 1);
    sm_err e = harness_connect(g_two, &c, err, sizeof err);
    ck_assert_int_eq(e, SM_EINVAL);
    ck_assert_msg(strstr(err, "SHMAP_CLIENT_CACHE_MB") && strstr(err, "'lots'"), "%s", err);
    unsetenv("SHMAP_CLIENT_CACHE_MB");
    sm_client_opts big = {.cache_mb = ((int64_t)1 << 20) + 1};
    ck_assert_int_eq(sm_client_connect(g_two->target, &big, &c, err, sizeof err), SM_EINVAL);
    ck_assert_msg(strstr(err, "cache_mb") && strstr(err, "1048577"), "%s", err);
    setenv("SHMAP_CLIENT_CACHE_MB", "64", 1);
    c = harness_client(g_two);
    unsetenv("SHMAP_CLIENT_CACHE_MB");
    sm_mesh mesh;
    sm_shape s = HARNESS_SHAPE(1024, 1024); /* 4 MiB of f32 */
    sm_array *x = harness_array_iota(SM_F32, &s, 12);
    sm_sharding_ref sh = harness_sharding(&mesh, "x=8", NULL, 0, "P('x')");
    sm_array_info info;
    ck_assert_int_eq(sm_client_put(c, SM_F32, &s, x->data, &sh, NULL, &info, err, sizeof err),
                     SM_OK);
    sm_array_pool_info before, after;
    sm_array_pool_stats(sm_client_pool(c), &before);
    ck_assert_uint_eq(before.max_bytes, (size_t)64 << 20);
    for (int k = 0; k < 3; k++) {
        harness_assert_get(c, harness_id_ref(info.id), x);
    }
    sm_array_pool_stats(sm_client_pool(c), &after);
    ck_assert_msg(after.hits - before.hits >= 2, "%lld reuses in 3 fetches",
                  (long long)(after.hits - before.hits));
    ck_assert_uint_le(after.held_bytes, (size_t)64 << 20);
    sm_array_pool_cache_set(sm_client_pool(c), 0, 0); /* a cache of none gives all back */
    sm_array_pool_stats(sm_client_pool(c), &after);
    ck_assert_uint_eq(after.held_bytes, 0);
    ck_assert_int_eq(sm_client_delete(c, harness_id_ref(info.id), err, sizeof err), SM_OK);
    sm_array_info_free(&info);
    sm_array_free(x);
    sm_client_close(c);
}
END_TEST

/* Copies box ix of x into a new array. */
static sm_array *slice_of(const sm_array *x, const sm_index *ix)
{
    sm_shape s = sm_index_shape(ix);
    sm_array *a = NULL;
    int64_t off[SM_MAX_RANK], zero[SM_MAX_RANK] = {0};
    char err[256];
    for (int d = 0; d < ix->rank; d++)
        off[d] = ix->r[d].start;
    ck_assert_int_eq(sm_array_create(x->dtype, &s, &a, err, sizeof err), SM_OK);
    ck_assert_int_eq(sm_block_copy(a->data, &s, zero, x->data, &x->shape, off, s.dims,
                                   sm_dtype_size(x->dtype), err, sizeof err),
                     SM_OK);
    return a;
}

START_TEST(put_shards_and_callback)
{
    sm_client *c = harness_client(g_two);
    sm_mesh mesh;
    sm_sharding_ref sh = harness_sharding(&mesh, "x=4,y=2", NULL, 0, "P('x')");
    sm_shape s = HARNESS_SHAPE(8, 16);
    sm_array *x = harness_array_iota(SM_F64, &s, 3), *back = NULL;
    sm_mesh_info mi;
    char err[512];
    /* The service's default order depends on which worker registered first:
     * ask for it, then give every device the shard of its mesh position. */
    ck_assert_int_eq(sm_client_mesh_create(c, &mesh, 1, NULL, &mi, err, sizeof err), SM_OK);
    mesh = mi.mesh;
    sh.default_order = 0;
    sm_sharding sharding = {.mesh = mesh, .spec = sh.spec};
    sm_device_slice ix[8];
    sm_array *shards[8];
    int32_t devs[8];
    sm_array_info info;

    ck_assert_int_eq(sm_sharding_indices(&sharding, &s, ix, err, sizeof err), SM_OK);
    for (int i = 0; i < 8; i++) {
        devs[i] = ix[i].device;
        shards[i] = slice_of(x, &ix[i].index);
    }
    sm_err e = sm_client_put_shards(c, SM_F64, &s, &sh, "shards", 8, devs,
                                    (const sm_array *const *)shards, &info, err, sizeof err);
    ck_assert_msg(e == SM_OK, "put_shards: %s", err);
    ck_assert_int_eq(info.state, SM_ARRAY_READY);
    harness_assert_get(c, harness_id_ref(info.id), x);
    /* One device's shard alone. */
    ck_assert_int_eq(
        sm_client_get_shard(c, harness_id_ref(info.id), devs[5], &back, err, sizeof err), SM_OK);
    ck_assert_int_eq(memcmp(back->data, shards[5]->data, (size_t)shards[5]->nbytes), 0);
    sm_array_free(back);
    sm_array_info_free(&info);

    /* A shard of the wrong shape is refused, as is a missing device. */
    sm_shape bad = HARNESS_SHAPE(2, 8);
    sm_array *wrong = harness_array_iota(SM_F64, &bad, 1);
    sm_array *saved = shards[3];
    shards[3] = wrong;
    e = sm_client_put_shards(c, SM_F64, &s, &sh, NULL, 8, devs, (const sm_array *const *)shards,
                             NULL, err, sizeof err);
    ck_assert_int_eq(e, SM_EINVAL);
    shards[3] = saved;
    e = sm_client_put_shards(c, SM_F64, &s, &sh, NULL, 7, devs, (const sm_array *const *)shards,
                             NULL, err, sizeof err);
    ck_assert_int_eq(e, SM_EINVAL);
    sm_array_free(wrong);
    for (int i = 0; i < 8; i++)
        sm_array_free(shards[i]);
    sm_array_free(x);
    sm_client_close(c);
}
END_TEST

static sm_array *callback_block(void *user, const sm_index *ix)
{
    int *calls = (int *)user + 1;
    (*calls)++;
    return slice_of(*(sm_array **)((int *)user + 2), ix);
}

START_TEST(put_callback)
{
    sm_client *c = harness_client(g_two);
    sm_mesh mesh;
    sm_sharding_ref sh = harness_sharding(&mesh, "x=4,y=2", NULL, 0, "P('y')");
    sm_shape s = HARNESS_SHAPE(6, 5);
    sm_array *x = harness_array_iota(SM_I64, &s, 5);
    struct {
        int pad, calls;
        sm_array *x;
    } user = {0, 0, x};
    sm_array_info info;
    char err[512];
    sm_err e = sm_client_put_callback(c, SM_I64, &s, &sh, NULL, callback_block, &user, &info, err,
                                      sizeof err);
    ck_assert_msg(e == SM_OK, "put_callback: %s", err);
    ck_assert_int_eq(user.calls, 2); /* once per distinct index */
    harness_assert_get_delete(c, &info, x);
    sm_array_free(x);
    sm_client_close(c);
}
END_TEST

/* ---- process-local uploads ---------------------------------------------------- */

typedef struct {
    const harness_cluster *h;
    const char *name;
    int process;
    sm_array *local;
    const sm_sharding_ref *sh;
    sm_err e;
    char err[512];
} local_part;

static void *send_part(void *arg)
{
    local_part *p = arg;
    sm_client *c = NULL;
    if ((p->e = harness_connect(p->h, &c, p->err, sizeof p->err)))
        return NULL;
    p->e = sm_client_put_local(c, p->process, p->local, p->sh, p->name, NULL, 20000, NULL, p->err,
                               sizeof p->err);
    sm_client_close(c);
    return NULL;
}

/* Plans a process-local upload with the cluster's real process map. */
static sm_local_plan *plan_parts(sm_client *c, const sm_mesh *mesh, const sm_pspec *spec,
                                 const sm_shape *local)
{
    sm_sharding s = {.mesh = *mesh, .spec = *spec};
    int n = 0, ndev[16], total = 0;
    int32_t devs[SM_MAX_DEVICES];
    sm_local_plan *plan = NULL;
    char err[512];

    sm_worker_info *w = harness_workers(c, &n);
    ck_assert_int_le(n, 16);
    for (int p = 0; p < n; p++)
        for (int i = 0; i < n; i++)
            if (w[i].process_index == p) {
                ndev[p] = w[i].ndevices;
                memcpy(devs + total, w[i].devices, sizeof(int32_t) * (size_t)w[i].ndevices);
                total += w[i].ndevices;
            }
    free(w);
    /* The mesh the service picks by default, as the upload will use it. */
    sm_mesh_info mi;
    ck_assert_int_eq(sm_client_mesh_create(c, mesh, 1, NULL, &mi, err, sizeof err), SM_OK);
    s.mesh = mi.mesh;
    sm_proc_map pm = {.nprocs = n, .proc_ndev = ndev, .proc_devices = devs};
    sm_err e = sm_local_plan_create(&s, &pm, local, NULL, &plan, err, sizeof err);
    ck_assert_msg(e == SM_OK, "plan: %s", err);
    return plan;
}

START_TEST(put_local_two_clients)
{
    sm_client *c = harness_client(g_two);
    sm_mesh mesh;
    sm_sharding_ref sh = harness_sharding(&mesh, "x=4,y=2", NULL, 0, "P('x', 'y')");
    sm_shape g = HARNESS_SHAPE(64, 128), ls = HARNESS_SHAPE(32, 128);
    sm_array *x = harness_array_iota(SM_F32, &g, 21);
    sm_local_plan *plan = plan_parts(c, &mesh, &sh.spec, &ls);
    local_part parts[2];
    pthread_t th[2];
    char err[512];

    ck_assert(sm_shape_equal(&plan->global_shape, &g));
    for (int p = 0; p < 2; p++) {
        sm_array *loc = NULL;
        ck_assert_int_eq(sm_array_create(SM_F32, &ls, &loc, err, sizeof err), SM_OK);
        for (int k = 0; k < plan->procs[p].ndevices; k++) {
            const sm_local_device *d = &plan->procs[p].devices[k];
            sm_shape bs = sm_index_shape(&d->global_index);
            int64_t so[2] = {d->global_index.r[0].start, d->global_index.r[1].start};
            int64_t lo[2] = {d->local_slice.r[0].start, d->local_slice.r[1].start};
            sm_block_copy(loc->data, &ls, lo, x->data, &g, so, bs.dims, 4, err, sizeof err);
        }
        parts[p] =
            (local_part){.h = g_two, .name = "local2", .process = p, .local = loc, .sh = &sh};
        pthread_create(&th[p], NULL, send_part, &parts[p]);
    }
    for (int p = 0; p < 2; p++) {
        pthread_join(th[p], NULL);
        ck_assert_msg(parts[p].e == SM_OK, "process %d: %s", p, parts[p].err);
        sm_array_free(parts[p].local);
    }
    sm_array_ref ref = {.name = "local2"};
    ck_assert_int_eq(harness_wait_state(c, ref, SM_ARRAY_READY, 10000), SM_ARRAY_READY);
    harness_assert_get(c, ref, x);
    ck_assert_int_eq(sm_client_delete(c, ref, err, sizeof err), SM_OK);
    sm_local_plan_free(plan);
    sm_array_free(x);
    sm_client_close(c);
}
END_TEST

START_TEST(put_local_missing_part_fails)
{
    sm_client *c = harness_client(g_two);
    sm_mesh mesh;
    sm_sharding_ref sh = harness_sharding(&mesh, "x=4,y=2", NULL, 0, "P('x', 'y')");
    sm_shape ls = HARNESS_SHAPE(4, 8);
    sm_array *loc = harness_array_iota(SM_F32, &ls, 2), *back = NULL;
    sm_array_info info;
    char err[512];
    sm_err e = sm_client_put_local(c, 0, loc, &sh, "half", NULL, 500, &info, err, sizeof err);
    ck_assert_msg(e == SM_OK, "put_local: %s", err);
    ck_assert_int_eq(info.state, SM_ARRAY_PENDING);
    sm_array_ref ref = {.name = "half"};
    ck_assert_int_eq(harness_wait_state(c, ref, SM_ARRAY_FAILED, 10000), SM_ARRAY_FAILED);
    ck_assert_int_eq(sm_client_get(c, ref, &back, err, sizeof err), SM_EPRECONDITION);
    sm_client_delete(c, ref, err, sizeof err);
    sm_array_info_free(&info);
    sm_array_free(loc);
    sm_client_close(c);
}
END_TEST

/* ---- reshard, names, delete ---------------------------------------------------- */

START_TEST(reshard_every_pair)
{
    static const char *specs[] = {"P('x', 'y')", "P(None, 'x')", "P()", "P(('x', 'y'))"};
    sm_client *c = harness_client(g_two);
    sm_shape s = HARNESS_SHAPE(16, 8);
    sm_array *x = harness_array_iota(SM_I32, &s, 9);
    /* Settle: earlier tests' frees reach the coordinator with heartbeats. */
    int64_t base = harness_bytes_held(c, 0), prev = -1;
    while (base != prev) {
        harness_sleep_ms(700);
        prev = base;
        base = harness_bytes_held(c, 0);
    }
    char err[512];

    for (int a = 0; a < 4; a++) {
        sm_mesh mesh;
        sm_sharding_ref sa = harness_sharding(&mesh, "x=4,y=2", NULL, 0, specs[a]);
        sm_array_info src;
        ck_assert_int_eq(sm_client_put(c, SM_I32, &s, x->data, &sa, NULL, &src, err, sizeof err),
                         SM_OK);
        for (int b = 0; b < 4; b++) {
            sm_mesh m2;
            sm_sharding_ref sb = harness_sharding(&m2, "x=4,y=2", NULL, 0, specs[b]);
            sm_array_info dst;
            sm_array *back = NULL;
            sm_err e =
                sm_client_reshard(c, harness_id_ref(src.id), &sb, NULL, &dst, err, sizeof err);
            ck_assert_msg(e == SM_OK, "reshard %s -> %s: %s", specs[a], specs[b], err);
            ck_assert(sm_pspec_equal(&dst.sharding.spec, &sb.spec));
            ck_assert_int_eq(harness_wait_state(c, harness_id_ref(dst.id), SM_ARRAY_READY, 10000),
                             SM_ARRAY_READY);
            ck_assert_int_eq(sm_client_get(c, harness_id_ref(dst.id), &back, err, sizeof err),
                             SM_OK);
            ck_assert_msg(memcmp(back->data, x->data, (size_t)x->nbytes) == 0,
                          "values changed in reshard %s -> %s", specs[a], specs[b]);
            sm_array_free(back);
            ck_assert_int_eq(sm_client_delete(c, harness_id_ref(dst.id), err, sizeof err), SM_OK);
            sm_array_info_free(&dst);
        }
        ck_assert_int_eq(sm_client_delete(c, harness_id_ref(src.id), err, sizeof err), SM_OK);
        sm_array_info_free(&src);
    }
    /* Heartbeats carry the freed bytes back within a few hundred ms. */
    int64_t now = 0;
    for (int tries = 0; tries < 100 && (now = harness_bytes_held(c, 0)) != base; tries++)
        harness_sleep_ms(50);
    ck_assert_int_eq(now, base);
    sm_array_free(x);
    sm_client_close(c);
}
END_TEST

START_TEST(names_attach_and_delete)
{
    sm_client *a = harness_client(g_two), *b = harness_client(g_two);
    sm_mesh mesh;
    sm_sharding_ref sh = harness_sharding(&mesh, "x=8", NULL, 0, "P('x')");
    sm_shape s = HARNESS_SHAPE(16);
    sm_array *x = harness_array_iota(SM_U8, &s, 4), *back = NULL;
    sm_array_info info, seen;
    sm_array_info *list = NULL;
    int n = 0, found = 0;
    char err[512];

    ck_assert_int_eq(sm_client_put(a, SM_U8, &s, x->data, &sh, "shared", &info, err, sizeof err),
                     SM_OK);
    ck_assert_str_eq(info.name, "shared");
    /* A second client attaches by name and by id. */
    sm_array_ref by_name = sm_array_ref_parse("shared");
    ck_assert_int_eq(sm_client_describe(b, by_name, &seen, err, sizeof err), SM_OK);
    ck_assert_uint_eq(seen.id.v, info.id.v);
    sm_array_info_free(&seen);
    ck_assert_int_eq(sm_client_get(b, by_name, &back, err, sizeof err), SM_OK);
    ck_assert_int_eq(memcmp(back->data, x->data, 16), 0);
    ck_assert_int_eq(sm_client_list(b, &list, &n, err, sizeof err), SM_OK);
    for (int i = 0; i < n; i++)
        found += list[i].id.v == info.id.v;
    ck_assert_int_eq(found, 1);
    sm_array_info_list_free(list, n);
    /* Deleted by the second client: gone for both. */
    ck_assert_int_eq(sm_client_delete(b, by_name, err, sizeof err), SM_OK);
    ck_assert_int_eq(sm_client_describe(a, harness_id_ref(info.id), &seen, err, sizeof err),
                     SM_ENOTFOUND);
    sm_array_free(back);
    back = NULL;
    ck_assert_int_eq(sm_client_get(a, by_name, &back, err, sizeof err), SM_ENOTFOUND);
    sm_array_info_free(&info);
    sm_array_free(x);
    sm_client_close(a);
    sm_client_close(b);
}
END_TEST

START_TEST(meshes_by_name)
{
    sm_client *c = harness_client(g_two);
    sm_mesh mesh, m2;
    sm_mesh_info mi, got;
    sm_mesh_info *list = NULL;
    int n = 0;
    char err[512];

    ck_assert_int_eq(sm_mesh_parse("i=4,j=2", NULL, 0, &mesh, err, sizeof err), SM_OK);
    ck_assert_int_eq(sm_client_mesh_create(c, &mesh, 1, "mij", &mi, err, sizeof err), SM_OK);
    ck_assert_int_eq(mi.mesh.ndevices, 8);
    ck_assert_int_eq(sm_client_mesh_get(c, (sm_mesh_id){0}, "mij", &got, err, sizeof err), SM_OK);
    ck_assert_uint_eq(got.id.v, mi.id.v);
    ck_assert_int_eq(sm_client_mesh_list(c, &list, &n, err, sizeof err), SM_OK);
    ck_assert_int_ge(n, 1);
    free(list);
    /* An upload that names the mesh. */
    sm_sharding_ref sh;
    memset(&sh, 0, sizeof sh);
    sh.mesh_name = "mij";
    ck_assert_int_eq(sm_pspec_parse("P('i', 'j')", &sh.spec, err, sizeof err), SM_OK);
    sm_shape s = HARNESS_SHAPE(8, 16);
    sm_array *x = harness_array_iota(SM_F32, &s, 8);
    sm_array_info info;
    ck_assert_int_eq(sm_client_put(c, SM_F32, &s, x->data, &sh, NULL, &info, err, sizeof err),
                     SM_OK);
    ck_assert_uint_eq(info.mesh_id.v, mi.id.v);
    ck_assert_str_eq(info.type, "f32[8@i,16@j]");
    sm_client_delete(c, harness_id_ref(info.id), err, sizeof err);
    sm_array_info_free(&info);
    (void)m2;
    sm_array_free(x);
    sm_client_close(c);
}
END_TEST

/* A .npy file whose data is column-major (numpy saves a transposed array
 * so) uploads as the array its header describes: the client converts it
 * (sm_npy_read) instead of sending the bytes as they lie. */
START_TEST(put_file_column_major)
{
    sm_client *c = harness_client(g_two);
    sm_mesh mesh;
    sm_sharding_ref sh = harness_sharding(&mesh, "x=4,y=2", NULL, 0, "P('x', 'y')");
    sm_shape s = HARNESS_SHAPE(8, 6);
    sm_array *x = harness_array_iota(SM_I32, &s, 3), *back = NULL;
    unsigned char hdr[4096] = {0};
    size_t hlen;
    char err[512], in[512], out[512], *dir = harness_tmpdir();
    ck_assert_int_eq(sm_npy_format_header(SM_I32, &s, hdr, sizeof hdr, &hlen, err, sizeof err),
                     SM_OK);
    char *f = strstr((char *)hdr + 10, "False"); /* the dict, after the preamble */
    ck_assert_ptr_nonnull(f);
    memcpy(f, "True ", 5);
    int32_t col[48];
    for (int i = 0; i < 8; i++)
        for (int j = 0; j < 6; j++)
            col[j * 8 + i] = ((int32_t *)x->data)[i * 6 + j];
    snprintf(in, sizeof in, "%s/colmajor.npy", dir);
    snprintf(out, sizeof out, "%s/out.npy", dir);
    FILE *fp = fopen(in, "wb");
    ck_assert_ptr_nonnull(fp);
    ck_assert_uint_eq(fwrite(hdr, 1, hlen, fp), hlen);
    ck_assert_uint_eq(fwrite(col, 1, sizeof col, fp), sizeof col);
    fclose(fp);
    sm_array_info info;
    sm_err e = sm_client_put_file(c, in, &sh, NULL, &info, err, sizeof err);
    ck_assert_msg(e == SM_OK, "put_file: %s", err);
    ck_assert_str_eq(info.type, "i32[8@x,6@y]");
    e = sm_client_get_file(c, harness_id_ref(info.id), out, err, sizeof err);
    ck_assert_msg(e == SM_OK, "get_file: %s", err);
    ck_assert_int_eq(sm_npy_read(out, &back, err, sizeof err), SM_OK);
    ck_assert(sm_shape_equal(&back->shape, &s));
    assert_same(back->data, x->data, x->nbytes);
    sm_client_delete(c, harness_id_ref(info.id), err, sizeof err);
    sm_array_info_free(&info);
    sm_array_free(back);
    sm_array_free(x);
    harness_rmdir(dir);
    sm_client_close(c);
}
END_TEST

int main(void)
{
    return HARNESS_CLUSTER_SUITE(
        "e2e_arrays", 120, clusters_up, clusters_down, {guide_layouts_two_workers, N_GUIDE},
        {guide_layouts_one_worker, N_GUIDE}, {meshes, 2 * N_MESH},
        {dtype_round_trips, (int)(sizeof dtypes / sizeof dtypes[0])}, {multi_chunk}, {client_cache},
        {put_shards_and_callback}, {put_callback}, {put_local_two_clients},
        {put_local_missing_part_fails}, {reshard_every_pair}, {names_attach_and_delete},
        {meshes_by_name}, {put_file_column_major});
}
