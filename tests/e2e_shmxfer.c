/* e2e_shmxfer: uploads and downloads through shared memory against real
 * clusters (coordinator + 2 worker processes on loopback, the client on
 * their host): arrays in sm_client_alloc buffers round-trip bit-exact over
 * meshes (8,) and (4,2), row, strided-column and replicated shardings,
 * with the workers' Stats proving the bytes went through the segments (and
 * nothing through them with SHMAP_TRANSPORT=grpc clients or with workers
 * run --transport grpc, where the same transfers take the streams); a
 * segment truncated under the worker is DATA_LOSS, a segment that does not
 * exist NOT_FOUND naming it, a ShmRef from a tenant PERMISSION_DENIED and
 * one sent to the coordinator INVALID_ARGUMENT; /dev/shm holds no segment
 * of the client after sm_client_close. Arrays in ordinary memory go
 * through the client's staging segments (sm_client_opts.stage_mb): moved
 * through shared memory, bit-exact, one segment reused, within the bound,
 * streamed below CLIENT_STAGE_MIN, with stage_mb 0, no_shm, --transport
 * grpc workers and a tenant's client. Reshards between the 2 workers
 * over meshes (8,) and (4,2) are bit-exact and move exactly the bytes the
 * plan moves between workers through shared memory (Stats'
 * peer_shm_bytes; over the streams, peer_grpc_bytes, with --transport
 * grpc workers); a worker killed while its peer pulls from it fails the
 * reshard UNAVAILABLE naming it, and its staging files leave /dev/shm;
 * under a memory limit without room for the staging, the pieces take the
 * streams. */
#include <check.h>
#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "client_internal.h"
#include "harness.h"
#include "harness_svc.h"
#include "sm_shm.h"
#include "sm_time.h"
#include "suite_main.h"

static harness_cluster *g_two;
static harness_cluster g_tenant; /* g_two's clients as they were: a tenant's in secure mode */

static void cluster_up(void)
{
    g_two = harness_cluster_up(2, 4, "e2e_shmxfer");
    g_tenant = *g_two;
    /* shared memory is for the cluster's own credential */
    harness_use_cluster_credential(g_two);
}

static void cluster_down(void)
{
    harness_cluster_down(&g_two);
}

/* A client of h; stage_mb 0 (harness_client_opts): no staging. */
static sm_client *connect_staged(const harness_cluster *h, int no_shm, int64_t stage_mb)
{
    sm_client_opts o = harness_client_opts(h);
    sm_client *c = NULL;
    char err[512];
    o.no_shm = no_shm;
    o.stage_mb = stage_mb;
    sm_err e = sm_client_connect(h->target, &o, &c, err, sizeof err);
    ck_assert_msg(e == SM_OK, "connect: %s", err);
    return c;
}

static sm_client *connect_to(const harness_cluster *h, int no_shm)
{
    return connect_staged(h, no_shm, 0);
}

/* What the cluster's workers' Stats say they moved so far: bytes through
 * shared-memory segments (clients' transfers, peers' reshard pulls), and
 * reshard pieces pulled from peers through shared memory and over gRPC. */
typedef struct {
    int64_t shm, peer_shm, peer_grpc;
} moved_bytes;

static moved_bytes worker_moved(const harness_cluster *h, sm_client *c)
{
    sm_svc_worker_stats st = harness_svc_worker_stats(h, c);
    return (moved_bytes){st.shm_transfer_bytes, st.peer_shm_bytes, st.peer_grpc_bytes};
}

/* Bytes the cluster's workers moved through shared-memory segments so far. */
static int64_t shm_bytes(const harness_cluster *h, sm_client *c)
{
    return worker_moved(h, c).shm;
}

/* The names in /dev/shm of this process's client segments. */
static int my_segments(char names[][SM_SHM_NAME_MAX], int max)
{
    char prefix[32];
    int n = 0;
    snprintf(prefix, sizeof prefix, "shmap-c%07x-", (unsigned)getpid() & 0xfffffff);
    DIR *d = opendir("/dev/shm");
    for (struct dirent *e; d && (e = readdir(d));)
        if (!strncmp(e->d_name, prefix, strlen(prefix)) && n < max &&
            strlen(e->d_name) < SM_SHM_NAME_MAX - 1)
            snprintf(names[n++], SM_SHM_NAME_MAX, "/%.*s", SM_SHM_NAME_MAX - 2, e->d_name);
    if (d)
        closedir(d);
    return n;
}

/* Puts an iota array of shape s from a buffer of sm_client_alloc with spec
 * over axes, fetches it into another, compares bit-exact; returns the
 * bytes the workers moved through shared memory meanwhile. */
static int64_t shm_round_trip(const harness_cluster *h, sm_client *c, const char *axes,
                              const char *spec, sm_shape s)
{
    sm_mesh mesh;
    sm_sharding_ref sh = harness_sharding(&mesh, axes, NULL, 0, spec);
    sm_array *x = harness_array_iota(SM_F32, &s, 11);
    void *src = NULL, *dst = NULL;
    sm_array_info info;
    char err[512];
    int64_t before = shm_bytes(h, c);

    ck_assert_int_eq(sm_client_alloc(c, (size_t)x->nbytes, &src, err, sizeof err), SM_OK);
    ck_assert_int_eq(sm_client_alloc(c, (size_t)x->nbytes, &dst, err, sizeof err), SM_OK);
    ck_assert_int_eq((uintptr_t)src % 64, 0);
    memcpy(src, x->data, (size_t)x->nbytes);
    memset(dst, 0xa5, (size_t)x->nbytes);
    sm_err e = sm_client_put(c, SM_F32, &s, src, &sh, NULL, &info, err, sizeof err);
    ck_assert_msg(e == SM_OK, "put %s %s: %s", axes, spec, err);
    ck_assert_int_eq(info.state, SM_ARRAY_READY);
    e = sm_client_get_into(c, &info, dst, (size_t)x->nbytes, err, sizeof err);
    ck_assert_msg(e == SM_OK, "get_into %s %s: %s", axes, spec, err);
    ck_assert_msg(memcmp(dst, x->data, (size_t)x->nbytes) == 0, "%s %s: not bit-exact", axes, spec);
    /* and the plain path (a malloc'd array) reads the same bytes */
    harness_assert_get(c, harness_id_ref(info.id), x);
    ck_assert_int_eq(sm_client_delete(c, harness_id_ref(info.id), err, sizeof err), SM_OK);
    sm_client_free(c, src);
    sm_client_free(c, dst);
    sm_array_info_free(&info);
    int64_t moved = shm_bytes(h, c) - before, nbytes = x->nbytes;
    sm_array_free(x);
    (void)nbytes;
    return moved;
}

/* Every sharding of the suite: the bytes moved through shared memory are
 * at least the array's, both ways (more where replicas are copied to
 * several devices or workers). */
static void round_trips(const harness_cluster *h, sm_client *c, int via_shm)
{
    static const struct {
        const char *axes, *spec;
    } cases[] = {
        {"x=8", "P('x')"},
        {"x=4,y=2", "P('x', 'y')"},
        {"x=4,y=2", "P(None, 'y')"}, /* strided column boxes, replicas on both workers */
        {"x=8", "P(None, 'x')"},     /* strided column boxes */
        {"x=8", "P()"},              /* replicated: one target spanning both workers */
    };
    sm_shape s = HARNESS_SHAPE(64, 40);
    int64_t nbytes = 64 * 40 * 4;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int64_t moved = shm_round_trip(h, c, cases[i].axes, cases[i].spec, s);
        if (via_shm)
            ck_assert_msg(moved >= 2 * nbytes, "%s %s: %lld bytes through shared memory",
                          cases[i].axes, cases[i].spec, (long long)moved);
        else
            ck_assert_msg(moved == 0, "%s %s: %lld bytes through shared memory", cases[i].axes,
                          cases[i].spec, (long long)moved);
    }
}

/* The bytes a reshard from src to dst pulls from other workers, as the
 * coordinator plans it (server/plan.c): for each new shard and each
 * distinct source box overlapping it, nothing if a worker of the new shard
 * holds that box, else the overlap; once per worker for new shards of one
 * box (their pieces are the same, and the devices share one shard). */
static int64_t remote_bytes(const sm_array_info *src, const sm_array_info *dst, int64_t elem)
{
    int64_t total = 0;
    for (int j = 0; j < dst->nshards; j++) {
        const sm_shard_info *d = &dst->shards[j];
        int again = 0;
        for (int k = 0; k < j; k++)
            again |= dst->shards[k].worker_id.v == d->worker_id.v &&
                     sm_index_equal(&dst->shards[k].index, &d->index);
        if (again)
            continue;
        for (int i = 0; i < src->nshards; i++) {
            int first = 1, local = 0;
            for (int q = 0; q < src->nshards; q++)
                if (sm_index_equal(&src->shards[q].index, &src->shards[i].index)) {
                    first &= q >= i;
                    local |= src->shards[q].worker_id.v == d->worker_id.v;
                }
            if (!first || local)
                continue;
            int64_t n = elem;
            for (int r = 0; r < d->index.rank; r++) {
                const sm_range *a = &src->shards[i].index.r[r], *b = &d->index.r[r];
                int64_t lo = a->start > b->start ? a->start : b->start;
                int64_t hi = a->stop < b->stop ? a->stop : b->stop;
                n *= hi > lo ? hi - lo : 0;
            }
            total += n;
        }
    }
    return total;
}

/* Reshards an iota array of shape s from spec `from` to spec `to` over
 * axes (devs: the mesh's devices, NULL for the default), checks the result
 * bit-exact, and that the pieces the workers pulled from each other went
 * through shared memory (via_shm) or over gRPC, exactly the bytes the plan
 * moves between workers; returns those bytes. */
static int64_t reshard_case(const harness_cluster *h, sm_client *c, const char *axes,
                            const int32_t *devs, int ndevs, const char *from, const char *to,
                            sm_shape s, int via_shm)
{
    sm_mesh m1, m2;
    sm_sharding_ref sa = harness_sharding(&m1, axes, devs, ndevs, from);
    sm_sharding_ref sb = harness_sharding(&m2, axes, devs, ndevs, to);
    sm_array *x = harness_array_iota(SM_F32, &s, 7);
    sm_array_info src, dst;
    sm_array *back = NULL;
    char err[512];
    sm_err e = sm_client_put(c, SM_F32, &s, x->data, &sa, NULL, &src, err, sizeof err);
    ck_assert_msg(e == SM_OK, "put %s %s: %s", axes, from, err);
    moved_bytes before = worker_moved(h, c);
    e = sm_client_reshard(c, harness_id_ref(src.id), &sb, NULL, &dst, err, sizeof err);
    ck_assert_msg(e == SM_OK, "reshard %s %s -> %s: %s", axes, from, to, err);
    moved_bytes after = worker_moved(h, c);
    ck_assert_int_eq(sm_client_get(c, harness_id_ref(dst.id), &back, err, sizeof err), SM_OK);
    ck_assert_msg(memcmp(back->data, x->data, (size_t)x->nbytes) == 0, "%s %s -> %s: not bit-exact",
                  axes, from, to);
    int64_t remote = remote_bytes(&src, &dst, 4);
    int64_t shm = after.peer_shm - before.peer_shm, grpc = after.peer_grpc - before.peer_grpc;
    ck_assert_msg(shm == (via_shm ? remote : 0) && grpc == (via_shm ? 0 : remote),
                  "%s %s -> %s: %lld bytes between workers, %lld through shared memory, %lld "
                  "over gRPC",
                  axes, from, to, (long long)remote, (long long)shm, (long long)grpc);
    sm_array_free(back);
    ck_assert_int_eq(sm_client_delete(c, harness_id_ref(dst.id), err, sizeof err), SM_OK);
    ck_assert_int_eq(sm_client_delete(c, harness_id_ref(src.id), err, sizeof err), SM_OK);
    sm_array_info_free(&src);
    sm_array_info_free(&dst);
    sm_array_free(x);
    return remote;
}

/* Reshards over meshes (8,) and (4,2) of the cluster's 2 workers, and one
 * whose pieces are larger than a staging part (16 MiB: pulled in parts). */
static void reshards(const harness_cluster *h, sm_client *c, int via_shm)
{
    static const struct {
        const char *axes, *from, *to;
    } cases[] = {
        {"x=8", "P('x')", "P()"},
        {"x=8", "P('x')", "P(None, 'x')"},
        {"x=8", "P(None, 'x')", "P('x')"},
        {"x=8", "P()", "P('x')"}, /* every piece on the new shard's worker: nothing moves */
        {"x=4,y=2", "P('x', 'y')", "P('y', 'x')"},
        {"x=4,y=2", "P('x', 'y')", "P(None, 'y')"},
        {"x=4,y=2", "P(None, 'y')", "P(('x', 'y'))"},
        {"x=4,y=2", "P('y')", "P('x', None)"},
    };
    int64_t moved = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        moved += reshard_case(h, c, cases[i].axes, NULL, 0, cases[i].from, cases[i].to,
                              HARNESS_SHAPE(64, 40), via_shm);
    ck_assert_int_gt(moved, 0);
    /* 48 MiB over one device of each worker: 24 MiB pieces, pulled in two
     * parts (1024 rows, then 512) */
    sm_worker_info *w = NULL;
    int n = 0;
    char err[512];
    ck_assert_int_eq(sm_client_devices(c, &w, &n, err, sizeof err), SM_OK);
    ck_assert_int_eq(n, 2);
    int32_t devs[2] = {w[0].devices[0], w[1].devices[0]};
    free(w);
    ck_assert_int_eq(
        reshard_case(h, c, "x=2", devs, 2, "P('x')", "P()", HARNESS_SHAPE(3072, 4096), via_shm),
        2 * 24 << 20);
}

START_TEST(shm_reshards)
{
    /* the workers decide: a client that keeps to the streams changes nothing */
    sm_client *c = connect_to(g_two, 1);
    reshards(g_two, c, 1);
    sm_client_close(c);
}
END_TEST

/* Workers with a 16 MiB memory limit: the pages of a staging file count
 * against it, so a reshard whose new shards leave no room for them pulls
 * its pieces over the streams instead (and still succeeds), while one with
 * room goes through shared memory. */
START_TEST(shm_reshard_memory_limit)
{
    harness_cluster *h = harness_cluster_limited(2, 2, 16);
    harness_use_cluster_credential(h);
    sm_client *c = connect_to(h, 0);
    /* 2 MiB: per worker 1 MiB of source, 2 MiB of new shard (its two
     * devices share one), 0.5 MiB per staging file in use */
    ck_assert_int_gt(
        reshard_case(h, c, "x=4", NULL, 0, "P('x')", "P()", HARNESS_SHAPE(512, 1024), 1), 0);
    /* 10 MiB: per worker 5 MiB of source and 10 MiB of new shard; a 2.5
     * MiB staging file would pass the limit */
    ck_assert_int_eq(
        reshard_case(h, c, "x=4", NULL, 0, "P('x')", "P()", HARNESS_SHAPE(2560, 1024), 0),
        10 << 20);
    sm_client_close(c);
    harness_cluster_stop(h);
}
END_TEST

/* A reshard run on a thread. */
typedef struct {
    const harness_cluster *h;
    sm_err e;
    char err[1024];
} bg_reshard;

static void *bg_reshard_main(void *arg)
{
    bg_reshard *r = arg;
    sm_client *c = connect_to(r->h, 0);
    sm_mesh mesh;
    sm_sharding_ref sh = harness_sharding(&mesh, "x=8", NULL, 0, "P()");
    r->e =
        sm_client_reshard(c, (sm_array_ref){{0}, "src"}, &sh, "moved", NULL, r->err, sizeof r->err);
    sm_client_close(c);
    return NULL;
}

/* The files in /dev/shm that process pid holds a flock on (shmap's own
 * segments: its staging files among them; a segment it maps of another
 * process holds no lock of its), at most max. */
static int locked_segments(pid_t pid, char names[][SM_SHM_NAME_MAX], int max)
{
    unsigned long inodes[64];
    int ni = 0, n = 0;
    char line[256];
    FILE *f = fopen("/proc/locks", "r");
    while (f && fgets(line, sizeof line, f) && ni < 64) {
        int who = 0;
        unsigned maj = 0, min = 0;
        unsigned long ino = 0;
        if (sscanf(line, "%*d: FLOCK %*s %*s %d %x:%x:%lu", &who, &maj, &min, &ino) == 4 &&
            who == pid)
            inodes[ni++] = ino;
    }
    if (f)
        fclose(f);
    DIR *d = opendir("/dev/shm");
    for (struct dirent *e; d && (e = readdir(d));) {
        char path[300];
        struct stat st;
        snprintf(path, sizeof path, "/dev/shm/%s", e->d_name);
        if (strncmp(e->d_name, "shmap-", 6) || strlen(e->d_name) >= SM_SHM_NAME_MAX - 1 ||
            stat(path, &st))
            continue;
        for (int i = 0; i < ni && n < max; i++)
            if (inodes[i] == (unsigned long)st.st_ino) {
                snprintf(names[n++], SM_SHM_NAME_MAX, "/%s", e->d_name);
                break;
            }
    }
    if (d)
        closedir(d);
    return n;
}

/* The start of the holder tests on their own cluster h: a client with the
 * cluster's credential (*c), a first reshard that proves the pair (its
 * pieces through shared memory), then "src", an iota of shape s (seed)
 * with P('x') over x=8, uploaded; pids: the workers. Returns the iota. */
static sm_array *holder_src(harness_cluster *h, sm_client **c, sm_shape s, int seed, pid_t pids[2])
{
    char err[512];
    harness_use_cluster_credential(h);
    *c = connect_to(h, 0);
    reshard_case(h, *c, "x=8", NULL, 0, "P('x')", "P()", HARNESS_SHAPE(64, 40), 1);
    sm_mesh mesh;
    sm_sharding_ref sh = harness_sharding(&mesh, "x=8", NULL, 0, "P('x')");
    sm_array *x = harness_array_iota(SM_F32, &s, seed);
    ck_assert_int_eq(sm_client_put(*c, SM_F32, &s, x->data, &sh, "src", NULL, err, sizeof err),
                     SM_OK);
    ck_assert_int_eq(harness_worker_pids(h, pids, 2), 2);
    return x;
}

/* A worker killed while its peer pulls pieces from it through shared
 * memory: the reshard fails UNAVAILABLE naming it, the other worker lives
 * on, and the killed worker's staging files leave /dev/shm once the
 * coordinator sees it gone. */
START_TEST(shm_reshard_holder_killed)
{
    harness_cluster *h = harness_cluster_up(2, 4, "e2e_shmxfer");
    sm_client *c = NULL;
    pid_t pids[2];
    char err[512];
    sm_array *x = holder_src(h, &c, HARNESS_SHAPE(2048, 1024), 5, pids);
    char names[16][SM_SHM_NAME_MAX];
    int nnames = locked_segments(pids[1], names, 16);
    ck_assert_int_ge(nnames, 1); /* its staging files of the first reshard */
    /* stopped, it answers nothing: the reshard waits on it (its own
     * Assemble, and the other worker's pulls from it) */
    ck_assert_int_eq(kill(pids[1], SIGSTOP), 0);
    bg_reshard bg = {.h = h};
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, bg_reshard_main, &bg), 0);
    ck_assert_int_eq(harness_wait_state(c, (sm_array_ref){{0}, "moved"}, SM_ARRAY_PENDING, 10000),
                     SM_ARRAY_PENDING);
    harness_sleep_ms(300);
    ck_assert_int_eq(kill(pids[1], SIGKILL), 0);
    pthread_join(t, NULL);
    ck_assert_msg(bg.e == SM_EUNAVAILABLE, "%s: %s", sm_err_name(bg.e), bg.err);
    /* the sentence names the worker that died */
    ck_assert_int_eq(harness_wait_workers(c, 1, 20000, err, sizeof err), SM_OK);
    sm_worker_info *w = NULL;
    int n = 0, named = 0;
    ck_assert_int_eq(sm_client_devices(c, &w, &n, err, sizeof err), SM_OK);
    for (int i = 0; i < n; i++)
        if (!w[i].alive)
            named += strstr(bg.err, w[i].address) != NULL;
    free(w);
    ck_assert_msg(named == 1, "%s", bg.err);
    /* what the killed worker kept in /dev/shm goes with it */
    int left = nnames;
    for (int tries = 0; tries < 100 && left; tries++) {
        left = 0;
        for (int i = 0; i < nnames; i++)
            left += sm_shm_marked(names[i]);
        if (left)
            harness_sleep_ms(100);
    }
    ck_assert_msg(left == 0, "%d of the killed worker's %d shared-memory files are left", left,
                  nnames);
    sm_array_free(x);
    sm_client_close(c);
    harness_cluster_stop(h);
}
END_TEST

/* A worker that stops answering (SIGSTOP) while its peer pulls pieces from
 * it for a reshard onto the peer's devices alone: the peer's pulls end
 * before the coordinator's call to the peer does (its deadline, here 4 s),
 * so the reshard fails with a sentence naming the stopped worker, not only
 * the one that waited for it. Once the stopped worker runs again, so does
 * the next reshard. */
START_TEST(shm_reshard_holder_stopped)
{
    const char *const flags[] = {"--default-deadline-ms", "4000", "--lost-after-ms", "60000", NULL};
    harness_opts o = {.nworkers = 2, .devices_per_worker = 4, .coord_args = flags};
    harness_cluster *h = harness_cluster_up_opts(&o, "e2e_shmxfer");
    sm_client *c = NULL;
    pid_t pids[2];
    char err[1024];
    sm_array *x = holder_src(h, &c, HARNESS_SHAPE(512, 64), 3, pids);
    ck_assert_int_eq(kill(pids[1], SIGSTOP), 0);
    /* the stopped one is the worker whose heartbeats stop (every 500 ms) */
    harness_sleep_ms(1500);
    int n = 0;
    sm_worker_info *w = harness_workers(c, &n);
    ck_assert_int_eq(n, 2);
    int stopped = w[0].ms_since_heartbeat > w[1].ms_since_heartbeat ? 0 : 1;
    ck_assert_msg(w[stopped].ms_since_heartbeat >= 1000 && w[1 - stopped].ms_since_heartbeat < 1000,
                  "heartbeats %lld and %lld ms ago", (long long)w[0].ms_since_heartbeat,
                  (long long)w[1].ms_since_heartbeat);
    sm_mesh m2;
    sm_sharding_ref onto =
        harness_sharding(&m2, "x=4", w[1 - stopped].devices, w[1 - stopped].ndevices, "P()");
    int64_t t0 = sm_time_mono_ms();
    sm_err e = sm_client_reshard(c, (sm_array_ref){{0}, "src"}, &onto, NULL, NULL, err, sizeof err);
    int64_t took = sm_time_mono_ms() - t0;
    ck_assert_int_eq(kill(pids[1], SIGCONT), 0);
    ck_assert_msg(e != SM_OK && strstr(err, w[stopped].address), "%s after %lld ms: %s",
                  sm_err_name(e), (long long)took, err);
    ck_assert_msg(took < 4000, "%s after %lld ms: %s", sm_err_name(e), (long long)took, err);
    free(w);
    /* running again, it serves the next reshard */
    reshard_case(h, c, "x=8", NULL, 0, "P('x')", "P()", HARNESS_SHAPE(64, 40), 1);
    sm_array_free(x);
    sm_client_close(c);
    harness_cluster_stop(h);
}
END_TEST

START_TEST(shm_round_trips)
{
    sm_client *c = connect_to(g_two, 0);
    round_trips(g_two, c, 1);
    /* a rank-3 array, row boxes inside a buffer at an offset */
    sm_mesh mesh;
    sm_sharding_ref sh = harness_sharding(&mesh, "x=4,y=2", NULL, 0, "P('y', None, 'x')");
    sm_shape s = HARNESS_SHAPE(6, 5, 8);
    sm_array *x = harness_array_iota(SM_F64, &s, 3);
    char *buf = NULL, err[512];
    sm_array_info info;
    ck_assert_int_eq(sm_client_alloc(c, (size_t)x->nbytes + 4096, (void **)&buf, err, sizeof err),
                     SM_OK);
    memcpy(buf + 4096, x->data, (size_t)x->nbytes);
    ck_assert_int_eq(sm_client_put(c, SM_F64, &s, buf + 4096, &sh, NULL, &info, err, sizeof err),
                     SM_OK);
    memset(buf, 0, (size_t)x->nbytes + 4096);
    ck_assert_int_eq(sm_client_get_into(c, &info, buf + 8, (size_t)x->nbytes, err, sizeof err),
                     SM_OK);
    ck_assert_int_eq(memcmp(buf + 8, x->data, (size_t)x->nbytes), 0);
    sm_client_delete(c, harness_id_ref(info.id), err, sizeof err);
    sm_array_info_free(&info);
    sm_array_free(x);
    /* the buffers still allocated go at close, and their segments with them */
    char names[8][SM_SHM_NAME_MAX];
    ck_assert_int_eq(my_segments(names, 8), 1);
    sm_client_close(c);
    ck_assert_int_eq(my_segments(names, 8), 0);
}
END_TEST

/* Puts an iota array of shape s (f32) from ordinary memory with spec over
 * axes, fetches it back into ordinary memory twice (a buffer of the
 * caller's, a new array), compares bit-exact; returns the bytes the
 * workers moved through shared memory meanwhile. */
static int64_t staged_round_trip(const harness_cluster *h, sm_client *c, const char *axes,
                                 const char *spec, sm_shape s)
{
    sm_mesh mesh;
    sm_sharding_ref sh = harness_sharding(&mesh, axes, NULL, 0, spec);
    sm_array *x = harness_array_iota(SM_F32, &s, 5), *back = NULL;
    void *dst = malloc((size_t)x->nbytes);
    sm_array_info info;
    char err[512];
    int64_t before = shm_bytes(h, c);

    ck_assert_ptr_nonnull(dst);
    memset(dst, 0xa5, (size_t)x->nbytes);
    sm_err e = sm_client_put(c, SM_F32, &s, x->data, &sh, NULL, &info, err, sizeof err);
    ck_assert_msg(e == SM_OK, "put %s %s: %s", axes, spec, err);
    e = sm_client_get_into(c, &info, dst, (size_t)x->nbytes, err, sizeof err);
    ck_assert_msg(e == SM_OK, "get_into %s %s: %s", axes, spec, err);
    ck_assert_msg(memcmp(dst, x->data, (size_t)x->nbytes) == 0, "%s %s: not bit-exact", axes, spec);
    ck_assert_int_eq(sm_client_get(c, harness_id_ref(info.id), &back, err, sizeof err), SM_OK);
    ck_assert_msg(memcmp(back->data, x->data, (size_t)x->nbytes) == 0, "%s %s: get not bit-exact",
                  axes, spec);
    sm_array_free(back);
    ck_assert_int_eq(sm_client_delete(c, harness_id_ref(info.id), err, sizeof err), SM_OK);
    sm_array_info_free(&info);
    sm_array_free(x);
    free(dst);
    return shm_bytes(h, c) - before;
}

START_TEST(shm_staging)
{
    /* arrays in ordinary memory through the client's staging segments:
     * uploads and both kinds of download move through shared memory
     * (each at least the array's bytes), bit-exact, and every transfer
     * reuses one segment */
    static const struct {
        const char *axes, *spec;
    } cases[] = {
        {"x=8", "P('x')"},
        {"x=4,y=2", "P(None, 'y')"}, /* strided column boxes, replicas on both workers */
        {"x=8", "P()"},              /* replicated: one target spanning both workers */
    };
    sm_shape s = HARNESS_SHAPE(1024, 2048); /* 8 MiB, over CLIENT_STAGE_MIN */
    int64_t nbytes = (int64_t)1024 * 2048 * 4;
    char names[8][SM_SHM_NAME_MAX];
    sm_client *c = connect_staged(g_two, 0, 16);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int64_t moved = staged_round_trip(g_two, c, cases[i].axes, cases[i].spec, s);
        ck_assert_msg(moved >= 3 * nbytes, "%s %s: %lld bytes through shared memory", cases[i].axes,
                      cases[i].spec, (long long)moved);
    }
    ck_assert_int_eq(my_segments(names, 8), 1);
    /* sm_client_put_shards and sm_client_get_shard: each 8 MiB block
     * through the segment too (replicated: every device holds it whole) */
    sm_mesh mesh;
    sm_sharding_ref sh = harness_sharding(&mesh, "x=2", NULL, 0, "P()");
    sm_mesh_info mi;
    sm_array_info info;
    sm_array *x = harness_array_iota(SM_F32, &s, 9), *back = NULL;
    const sm_array *blocks[2] = {x, x};
    char err[512];
    int64_t before = shm_bytes(g_two, c);
    ck_assert_int_eq(sm_client_mesh_create(c, &mesh, 1, NULL, &mi, err, sizeof err), SM_OK);
    mesh = mi.mesh;
    sh.default_order = 0;
    sm_err e = sm_client_put_shards(c, SM_F32, &s, &sh, NULL, 2, mesh.devices, blocks, &info, err,
                                    sizeof err);
    ck_assert_msg(e == SM_OK, "put_shards: %s", err);
    e = sm_client_get_shard(c, harness_id_ref(info.id), mesh.devices[1], &back, err, sizeof err);
    ck_assert_msg(e == SM_OK, "get_shard: %s", err);
    ck_assert_int_eq(memcmp(back->data, x->data, (size_t)x->nbytes), 0);
    ck_assert_int_ge(shm_bytes(g_two, c) - before, 3 * nbytes);
    ck_assert_int_eq(sm_client_delete(c, harness_id_ref(info.id), err, sizeof err), SM_OK);
    sm_array_free(back);
    sm_array_free(x);
    sm_array_info_free(&info);
    ck_assert_int_eq(my_segments(names, 8), 1);
    /* a larger array: the idle 8 MiB segment makes room for a 12 MiB one
     * (16 MiB the bound); one larger than the bound streams */
    sm_shape s12 = HARNESS_SHAPE(1536, 2048), s20 = HARNESS_SHAPE(2560, 2048);
    ck_assert_int_ge(staged_round_trip(g_two, c, "x=8", "P('x')", s12), 3 * nbytes * 3 / 2);
    ck_assert_int_eq(my_segments(names, 8), 1);
    ck_assert_int_eq(staged_round_trip(g_two, c, "x=8", "P('x')", s20), 0);
    /* an array under CLIENT_STAGE_MIN streams */
    ck_assert_int_eq(staged_round_trip(g_two, c, "x=8", "P('x')", HARNESS_SHAPE(256, 1024)), 0);
    /* the staging segments go at close */
    sm_client_close(c);
    ck_assert_int_eq(my_segments(names, 8), 0);
    /* SHMAP_CLIENT_STAGE_MB sets it; a bad value, or a stage_mb out of
     * range, is INVALID_ARGUMENT naming it */
    sm_client_opts o = {.stage_mb = 3};
    setenv("SHMAP_CLIENT_STAGE_MB", "7", 1);
    ck_assert_int_eq(sm_client_opts_from_env(&o, err, sizeof err), SM_OK);
    ck_assert_int_eq(o.stage_mb, 7);
    setenv("SHMAP_CLIENT_STAGE_MB", "7x", 1);
    ck_assert_int_eq(sm_client_opts_from_env(&o, err, sizeof err), SM_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "SHMAP_CLIENT_STAGE_MB"));
    unsetenv("SHMAP_CLIENT_STAGE_MB");
    o = harness_client_opts(g_two);
    o.stage_mb = -1;
    ck_assert_int_eq(sm_client_connect(g_two->target, &o, &c, err, sizeof err), SM_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "stage_mb"));
    /* stage_mb 0, or no_shm (SHMAP_TRANSPORT=grpc): the streams */
    c = connect_staged(g_two, 0, 0);
    ck_assert_int_eq(staged_round_trip(g_two, c, "x=8", "P('x')", s), 0);
    sm_client_close(c);
    c = connect_staged(g_two, 1, 16);
    ck_assert_int_eq(staged_round_trip(g_two, c, "x=8", "P('x')", s), 0);
    ck_assert_int_eq(my_segments(names, 8), 0);
    sm_client_close(c);
}
END_TEST

START_TEST(shm_forced_off)
{
    /* SHMAP_TRANSPORT=grpc: the same transfers through the streams */
    setenv("SHMAP_TRANSPORT", "grpc", 1);
    sm_client_opts o = harness_client_opts(g_two);
    char err[512];
    ck_assert_int_eq(sm_client_opts_from_env(&o, err, sizeof err), SM_OK);
    unsetenv("SHMAP_TRANSPORT");
    ck_assert_int_eq(o.no_shm, 1);
    sm_client *c = connect_to(g_two, 1);
    round_trips(g_two, c, 0);
    sm_client_close(c);
}
END_TEST

START_TEST(shm_grpc_workers)
{
    /* workers run --transport grpc (SHMAP_TRANSPORT in their environment):
     * they refuse ShmProbe, so the client keeps to the streams */
    setenv("SHMAP_TRANSPORT", "grpc", 1);
    harness_cluster *h = harness_cluster_up(2, 4, "e2e_shmxfer");
    unsetenv("SHMAP_TRANSPORT");
    harness_use_cluster_credential(h);
    sm_client *c = connect_to(h, 0);
    round_trips(h, c, 0);
    /* and reshard pieces go over the GetShard streams */
    reshards(h, c, 0);
    sm_client_close(c);
    /* nor through a staging segment, from ordinary memory */
    c = connect_staged(h, 0, 16);
    ck_assert_int_eq(staged_round_trip(h, c, "x=8", "P('x')", HARNESS_SHAPE(1024, 2048)), 0);
    sm_client_close(c);
    harness_cluster_stop(h);
}
END_TEST

/* The address of a worker of the cluster and, in *dev, one of its
 * devices. */
static void a_worker(sm_client *c, char *addr, int32_t *dev)
{
    int n = 0;
    sm_worker_info *w = harness_workers(c, &n);
    ck_assert_int_ge(n, 1);
    snprintf(addr, SM_ADDR_MAX, "%s", w[0].address);
    *dev = w[0].devices[0];
    free(w);
}

/* A PutShard of one f32[4] shard of a fresh array from segment ref on
 * channel ch; returns its status (err its sentence). */
static sm_err put_ref(sm_rpc_channel *ch, int32_t dev, const sm_svc_shm_ref *ref, char *err,
                      size_t errlen)
{
    sm_svc_upload_stream *st = NULL;
    sm_svc_upload_msg m;
    sm_err e = sm_svc_upload_open(ch, 1, 10000, &st, err, errlen);
    if (e)
        return e;
    memset(&m, 0, sizeof m);
    m.has_header = 1;
    m.header.array_id.v = 987654321;
    m.header.ndevices = 1;
    m.header.devices = &dev;
    m.header.shape = HARNESS_SHAPE(4);
    m.header.dtype = SM_F32;
    m.header.total_bytes = 16;
    m.header.shm = *ref;
    m.last = 1;
    e = sm_svc_upload_send(st, &m, err, errlen);
    if (e) {
        sm_svc_upload_abort(st);
        return e;
    }
    return sm_svc_upload_finish(st, NULL, err, errlen);
}

START_TEST(shm_faults)
{
    sm_client *c = connect_to(g_two, 0);
    char addr[SM_ADDR_MAX], err[512];
    int32_t dev;
    a_worker(c, addr, &dev);
    sm_rpc_channel *ch = harness_channel(g_two, addr);
    sm_svc_shm_ref ref;
    memset(&ref, 0, sizeof ref);
    ref.global = HARNESS_SHAPE(4);
    ref.box = sm_index_full(&ref.global);

    /* a segment that does not exist: NOT_FOUND naming it */
    snprintf(ref.name, sizeof ref.name, "/shmap-c0-dead");
    sm_err e = put_ref(ch, dev, &ref, err, sizeof err);
    ck_assert_msg(e == SM_ENOTFOUND, "%s: %s", sm_err_name(e), err);
    ck_assert_ptr_nonnull(strstr(err, "/shmap-c0-dead"));
    /* a name outside the rules: INVALID_ARGUMENT before any shm_open */
    snprintf(ref.name, sizeof ref.name, "/../etc/passwd");
    e = put_ref(ch, dev, &ref, err, sizeof err);
    ck_assert_msg(e == SM_EINVAL, "%s: %s", sm_err_name(e), err);

    /* a segment shorter than the array: DATA_LOSS */
    float *p = NULL;
    ck_assert_int_eq(sm_client_alloc(c, 16, (void **)&p, err, sizeof err), SM_OK);
    char names[4][SM_SHM_NAME_MAX];
    ck_assert_int_eq(my_segments(names, 4), 1);
    snprintf(ref.name, sizeof ref.name, "%s", names[0]);
    ref.offset = 8;
    e = put_ref(ch, dev, &ref, err, sizeof err);
    ck_assert_msg(e == SM_EDATALOSS, "%s: %s", sm_err_name(e), err);
    ref.offset = 0;
    ck_assert_int_eq(put_ref(ch, dev, &ref, err, sizeof err), SM_OK);
    ck_assert_int_eq(
        sm_svc_worker_free_array(ch, 10000, (sm_array_id){987654321}, 0, NULL, err, sizeof err),
        SM_OK);
    sm_client_free(c, p);

    /* truncated under the worker after the client filled it: the upload
     * and the download both fail DATA_LOSS, and the workers live on */
    sm_mesh mesh;
    sm_sharding_ref sh = harness_sharding(&mesh, "x=8", NULL, 0, "P('x')");
    sm_shape s = HARNESS_SHAPE(256, 256);
    size_t nb = 256 * 256 * 4;
    void *buf = NULL;
    sm_array_info info;
    ck_assert_int_eq(sm_client_alloc(c, nb, &buf, err, sizeof err), SM_OK);
    memset(buf, 1, nb);
    ck_assert_int_eq(sm_client_put(c, SM_F32, &s, buf, &sh, NULL, &info, err, sizeof err), SM_OK);
    ck_assert_int_eq(my_segments(names, 4), 1);
    int fd = shm_open(names[0], O_RDWR, 0);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(ftruncate(fd, 4096), 0);
    close(fd);
    /* (the client must not touch the buffer past 4096 bytes now) */
    e = sm_client_put(c, SM_F32, &s, buf, &sh, NULL, NULL, err, sizeof err);
    ck_assert_msg(e == SM_EDATALOSS, "put: %s: %s", sm_err_name(e), err);
    e = sm_client_get_into(c, &info, buf, nb, err, sizeof err);
    ck_assert_msg(e == SM_EDATALOSS, "get_into: %s: %s", sm_err_name(e), err);
    sm_client_free(c, buf);
    sm_array *back = NULL;
    ck_assert_int_eq(sm_client_get(c, harness_id_ref(info.id), &back, err, sizeof err), SM_OK);
    ck_assert_int_eq(((unsigned char *)back->data)[nb - 1], 1);
    sm_array_free(back);
    sm_client_delete(c, harness_id_ref(info.id), err, sizeof err);
    sm_array_info_free(&info);

    /* a ShmRef to the coordinator: INVALID_ARGUMENT */
    sm_rpc_channel *coord = harness_channel(g_two, NULL);
    sm_svc_upload_stream *st = NULL;
    sm_svc_upload_msg m;
    memset(&m, 0, sizeof m);
    ck_assert_int_eq(sm_svc_upload_open(coord, 0, 10000, &st, err, sizeof err), SM_OK);
    m.has_header = 1;
    m.header.array_id.v = 1;
    m.header.shape = HARNESS_SHAPE(4);
    m.header.dtype = SM_F32;
    m.header.total_bytes = 16;
    m.header.shm = ref;
    m.last = 1;
    e = sm_svc_upload_send(st, &m, err, sizeof err);
    if (!e)
        e = sm_svc_upload_finish(st, NULL, err, sizeof err);
    else
        sm_svc_upload_abort(st);
    ck_assert_msg(e == SM_EINVAL, "%s: %s", sm_err_name(e), err);
    sm_rpc_channel_free(coord);
    sm_rpc_channel_free(ch);
    sm_client_close(c);
}
END_TEST

START_TEST(shm_tenant)
{
    if (!g_two->secure)
        return; /* tenants exist in secure mode only */
    /* a tenant's ShmRef: PERMISSION_DENIED */
    sm_client *c = connect_to(g_two, 0);
    char addr[SM_ADDR_MAX], err[512];
    int32_t dev;
    a_worker(c, addr, &dev);
    sm_client_close(c);
    sm_rpc_channel *ch = harness_channel(&g_tenant, addr);
    sm_svc_shm_ref ref;
    memset(&ref, 0, sizeof ref);
    snprintf(ref.name, sizeof ref.name, "/shmap-c0-dead");
    ref.global = HARNESS_SHAPE(4);
    ref.box = sm_index_full(&ref.global);
    sm_err e = put_ref(ch, dev, &ref, err, sizeof err);
    ck_assert_msg(e == SM_EPERM, "%s: %s", sm_err_name(e), err);
    sm_rpc_channel_free(ch);
    /* a tenant's client moves its sm_client_alloc buffers through the
     * streams, with its grants */
    c = connect_to(&g_tenant, 0);
    round_trips(g_two, c, 0);
    sm_client_close(c);
    /* and its arrays in ordinary memory too (no staging) */
    c = connect_staged(&g_tenant, 0, 16);
    ck_assert_int_eq(staged_round_trip(g_two, c, "x=8", "P('x')", HARNESS_SHAPE(1024, 2048)), 0);
    sm_client_close(c);
}
END_TEST

int main(void)
{
    return HARNESS_CLUSTER_SUITE("e2e_shmxfer", 240, cluster_up, cluster_down, {shm_round_trips},
                                 {shm_staging}, {shm_forced_off}, {shm_grpc_workers}, {shm_faults},
                                 {shm_tenant}, {shm_reshards}, {shm_reshard_holder_killed},
                                 {shm_reshard_holder_stopped}, {shm_reshard_memory_limit});
}
