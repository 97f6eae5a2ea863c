/* End-to-end durability suite: a coordinator with --state-dir and two
 * standalone workers (each in a process group of its own, so killing the
 * coordinator leaves them running), on free loopback ports. The
 * coordinator is killed with SIGKILL and started again on the same port
 * and state dir: ready arrays come back under the same id and name,
 * bit-exact, once the workers have registered again; arrays that were
 * still pending are failed; deleted ones stay deleted; new ids continue
 * after the old ones; the SQLite file passes its integrity check; a damaged
 * one is refused at start. */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "harness_proc.h"
#include "harness_svc.h"
#include "shmap_job.h"
#include "sm_log.h"
#include "sm_rpc.h"
#include "sm_svc.h"
#include "sm_time.h"
#include "suite_main.h"

#define NWORKERS 2
#define NDEV     4

/* The processes of one test (tests run one after another in this process). */
typedef struct {
    char *dir;
    int port;
    pid_t coord;
    pid_t workers[NWORKERS];
    harness_cluster h;         /* target only, for harness_client */
    int local;                 /* the coordinator starts its own 2 workers */
    const char *worker_mem_mb; /* the workers' --memory-limit-mb, NULL: default */
} durable_env;

static durable_env g;

static const char *bin(const char *env, const char *fallback)
{
    const char *b = getenv(env);
    return b && *b ? b : fallback;
}

/* Starts the coordinator (port 0 the first time, then the same port) and
 * returns its pid; waits for its port file when wait_port. */
static pid_t coord_spawn(int wait_port)
{
    char listen[64], portfile[512], state[512], log[512];
    snprintf(listen, sizeof listen, "127.0.0.1:%d", g.port);
    snprintf(portfile, sizeof portfile, "%s/port", g.dir);
    snprintf(state, sizeof state, "%s/state", g.dir);
    snprintf(log, sizeof log, "%s/coordinator.log", g.dir);
    unlink(portfile);
    char *argv[40] = {(char *)bin("SHMAP_COORDINATOR_BIN", "../server/shmap-coordinator"),
                      "--listen",
                      listen,
                      "--port-file",
                      portfile,
                      "--state-dir",
                      state,
                      "--heartbeat-ms",
                      "200",
                      "--lost-after-ms",
                      "1000",
                      "--exit-with-parent"}; /* a failed test's _exit takes it along */
    int n = 12;
    n += harness_secure_flags(&g.h, 1, argv + n, 20);
    if (g.local) {
        const char *more[] = {
            "--local-workers",      "2",
            "--devices-per-worker", "4",
            "--worker-binary",      bin("SHMAP_WORKER", "../worker/shmap-worker")};
        for (int k = 0; k < 6; k++)
            argv[n++] = (char *)more[k];
    }
    argv[n] = NULL;
    pid_t pid = harness_spawn_log(argv, log, HARNESS_SPAWN_PGROUP | HARNESS_SPAWN_APPEND);
    ck_assert_int_gt(pid, 0);
    if (!wait_port)
        return pid;
    int64_t until = sm_time_mono_ms() + 20000;
    int port = 0;
    while (!port && sm_time_mono_ms() < until) {
        FILE *f = fopen(portfile, "r");
        if (f) {
            if (fscanf(f, "%d", &port) != 1)
                port = 0;
            fclose(f);
        }
        ck_assert_msg(waitpid(pid, NULL, WNOHANG) == 0, "the coordinator exited at start");
        if (!port)
            harness_sleep_ms(20);
    }
    ck_assert_int_gt(port, 0);
    g.port = port;
    snprintf(g.h.target, sizeof g.h.target, "127.0.0.1:%d", port);
    return pid;
}

/* Starts worker k; with_state: with --state-dir DIR/worker<k>; id: with
 * --worker-id id unless 0; g.worker_mem_mb: with --memory-limit-mb unless
 * NULL. */
static pid_t worker_spawn_as(int k, int with_state, uint32_t id)
{
    char coord[64], idx[16], log[512], state[512], wid[16];
    snprintf(coord, sizeof coord, "127.0.0.1:%d", g.port);
    snprintf(idx, sizeof idx, "%d", k);
    snprintf(log, sizeof log, "%s/worker%d.log", g.dir, k);
    snprintf(state, sizeof state, "%s/worker%d", g.dir, k);
    snprintf(wid, sizeof wid, "%u", id);
    char *argv[32] = {(char *)bin("SHMAP_WORKER", "../worker/shmap-worker"),
                      "--coordinator",
                      coord,
                      "--devices",
                      "4",
                      "--listen",
                      "127.0.0.1:0",
                      "--process-index",
                      idx};
    int n = 9;
    n += harness_secure_flags(&g.h, 0, argv + n, 12);
    if (with_state) {
        argv[n++] = "--state-dir";
        argv[n++] = state;
    }
    if (id) {
        argv[n++] = "--worker-id";
        argv[n++] = wid;
    }
    if (g.worker_mem_mb) {
        argv[n++] = "--memory-limit-mb";
        argv[n++] = (char *)g.worker_mem_mb;
    }
    pid_t pid = harness_spawn_log(argv, log, HARNESS_SPAWN_PGROUP | HARNESS_SPAWN_APPEND);
    ck_assert_int_gt(pid, 0);
    return pid;
}

static pid_t worker_spawn_state(int k, int with_state)
{
    return worker_spawn_as(k, with_state, 0);
}

static pid_t worker_spawn(int k)
{
    return worker_spawn_state(k, 0);
}

/* Waits (20 s at most) until worker k's state dir holds n shard copies
 * (.sum files, written last). */
static void wait_copies(int k, int n)
{
    char path[512];
    int got = -1;
    if (g.local)
        snprintf(path, sizeof path, "%s/state/worker-%d/shards", g.dir, k);
    else
        snprintf(path, sizeof path, "%s/worker%d/shards", g.dir, k);
    for (int64_t until = sm_time_mono_ms() + 20000; got != n && sm_time_mono_ms() < until;
         harness_sleep_ms(20)) {
        DIR *d = opendir(path);
        struct dirent *de;
        got = 0;
        while (d && (de = readdir(d)))
            got += strstr(de->d_name, ".sum") && !strstr(de->d_name, ".tmp");
        if (d)
            closedir(d);
    }
    ck_assert_int_eq(got, n);
}

static void kill_wait(pid_t *pid)
{
    if (*pid > 0) {
        kill(*pid, SIGKILL);
        waitpid(*pid, NULL, 0);
        *pid = 0;
    }
}

static void env_setup(void)
{
    sm_log_set_level(SM_LOG_ERROR);
    memset(&g, 0, sizeof g);
    g.dir = harness_tmpdir();
    g.coord = coord_spawn(1);
    for (int k = 0; k < NWORKERS; k++)
        g.workers[k] = worker_spawn(k);
}

static void env_teardown(void)
{
    kill_wait(&g.coord);
    for (int k = 0; k < NWORKERS; k++)
        kill_wait(&g.workers[k]);
    if (getenv("SM_KEEP_LOGS"))
        fprintf(stderr, "e2e_durable: logs kept in %s\n", g.dir), free(g.dir);
    else
        harness_rmdir(g.dir);
    g.dir = NULL;
}

static void wait_alive(sm_client *c, int n)
{
    char err[512];
    sm_err e = harness_wait_workers(c, n, 20000, err, sizeof err);
    ck_assert_msg(e == SM_OK, "workers: %s", err);
}

/* Puts an iota array of shape 16x32 (f32) with spec over the (4,2) mesh. */
static sm_array_info put(sm_client *c, const char *name, const char *spec, uint64_t seed)
{
    sm_mesh mesh;
    sm_sharding_ref sh = harness_sharding(&mesh, "i=4,j=2", NULL, 0, spec);
    sm_shape s = HARNESS_SHAPE(16, 32);
    sm_array *a = harness_array_iota(SM_F32, &s, seed);
    sm_array_info info;
    char err[512];
    sm_err e = sm_client_put(c, SM_F32, &s, a->data, &sh, name, &info, err, sizeof err);
    ck_assert_msg(e == SM_OK, "put %s: %s", name ? name : "(unnamed)", err);
    sm_array_free(a);
    return info;
}

/* put, for callers that need no description. */
static void put_only(sm_client *c, const char *name, const char *spec, uint64_t seed)
{
    sm_array_info info = put(c, name, spec, seed);
    sm_array_info_free(&info);
}

/* The array's values equal the iota of seed, bit for bit. */
static void check_bits(sm_client *c, sm_array_ref ref, uint64_t seed)
{
    sm_shape s = HARNESS_SHAPE(16, 32);
    sm_array *want = harness_array_iota(SM_F32, &s, seed);
    harness_assert_get(c, ref, want);
    sm_array_free(want);
}

/* A pending array (created, never uploaded) over the (4,2) mesh. */
static sm_array_id create_pending(const char *name)
{
    sm_rpc_init();
    sm_rpc_channel *ch = harness_channel(&g.h, NULL);
    sm_svc_create_array_reply rep = harness_svc_create(ch, name, "i=4,j=2", "P('i', 'j')",
                                                       HARNESS_SHAPE(16, 32), SM_PUT_WHOLE, 600000);
    sm_array_id id = rep.array.id;
    sm_svc_create_array_reply_free(&rep);
    sm_rpc_channel_free(ch);
    return id;
}

static sm_array_info describe(sm_client *c, sm_array_ref ref, sm_err *e)
{
    sm_array_info info;
    char err[512];
    memset(&info, 0, sizeof info);
    *e = sm_client_describe(c, ref, &info, err, sizeof err);
    return info;
}

/* PRAGMA integrity_check of the state dir's database says ok. */
static void check_db(void)
{
    char path[512];
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    snprintf(path, sizeof path, "%s/state/registry.db", g.dir);
    ck_assert_int_eq(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    ck_assert_int_eq(sqlite3_prepare_v2(db, "PRAGMA integrity_check", -1, &st, NULL), SQLITE_OK);
    ck_assert_int_eq(sqlite3_step(st), SQLITE_ROW);
    ck_assert_str_eq((const char *)sqlite3_column_text(st, 0), "ok");
    sqlite3_finalize(st);
    sqlite3_close(db);
}

START_TEST(test_coordinator_kill9_restart)
{
    sm_client *c = harness_client(&g.h);
    wait_alive(c, NWORKERS);
    sm_array_info a = put(c, "alpha", "P('i', 'j')", 1);
    sm_array_info b = put(c, NULL, "P('i', None)", 2);
    sm_array_info gone = put(c, "gone", "P(None, 'j')", 3);
    char err[512];
    ck_assert_int_eq(sm_client_delete(c, (sm_array_ref){{0}, "gone"}, err, sizeof err), SM_OK);
    ck_assert_msg(sm_client_replicate(c, (sm_array_ref){{0}, "alpha"}, 2, NULL, err, sizeof err) ==
                      SM_OK,
                  "%s", err);
    sm_array_id pend = create_pending("half");
    sm_client_close(c);

    kill_wait(&g.coord);
    check_db();
    g.coord = coord_spawn(1);
    c = harness_client(&g.h);
    wait_alive(c, NWORKERS);

    ck_assert_int_eq(harness_wait_state(c, (sm_array_ref){{0}, "alpha"}, SM_ARRAY_READY, 20000),
                     SM_ARRAY_READY);
    ck_assert_int_eq(harness_wait_state(c, harness_id_ref(b.id), SM_ARRAY_READY, 20000),
                     SM_ARRAY_READY);
    sm_err e;
    sm_array_info a2 = describe(c, (sm_array_ref){{0}, "alpha"}, &e);
    ck_assert_int_eq(e, SM_OK);
    ck_assert_uint_eq(a2.id.v, a.id.v);
    ck_assert_str_eq(a2.type, a.type);
    /* its copies are known again, and present once the workers offered them */
    ck_assert_int_eq(a2.ncopies, 2 * NDEV);
    for (int k = 0; k < a2.ncopies; k++)
        ck_assert_int_eq(a2.copies[k].present, 1);
    sm_array_info_free(&a2);
    check_bits(c, (sm_array_ref){{0}, "alpha"}, 1);
    check_bits(c, harness_id_ref(b.id), 2);

    sm_array_info x = describe(c, (sm_array_ref){{0}, "gone"}, &e);
    ck_assert_int_eq(e, SM_ENOTFOUND);
    x = describe(c, harness_id_ref(pend), &e);
    ck_assert_int_eq(e, SM_OK);
    ck_assert_int_eq(x.state, SM_ARRAY_FAILED);
    ck_assert_msg(strstr(x.error, "coordinator restarted"), "error: %s", x.error);
    sm_array_info_free(&x);

    /* Ids are never reused, and the worker memory of the deleted array
     * is not held. */
    sm_array_info n = put(c, "after", "P('i', 'j')", 4);
    ck_assert_uint_gt(n.id.v, pend.v);
    check_bits(c, (sm_array_ref){{0}, "after"}, 4);

    /* A second restart keeps it all again. */
    sm_client_close(c);
    kill_wait(&g.coord);
    check_db();
    g.coord = coord_spawn(1);
    c = harness_client(&g.h);
    ck_assert_int_eq(harness_wait_state(c, (sm_array_ref){{0}, "after"}, SM_ARRAY_READY, 20000),
                     SM_ARRAY_READY);
    check_bits(c, (sm_array_ref){{0}, "after"}, 4);
    check_bits(c, (sm_array_ref){{0}, "alpha"}, 1);
    sm_array_info_free(&n);
    sm_array_info_free(&a);
    sm_array_info_free(&b);
    sm_array_info_free(&gone);
    sm_client_close(c);
}
END_TEST

/* A worker that was killed comes back empty (no state dir): its arrays
 * stay lost after a coordinator restart, and the others are ready. */
START_TEST(test_restart_with_a_worker_gone)
{
    sm_client *c = harness_client(&g.h);
    wait_alive(c, NWORKERS);
    sm_mesh mesh;
    int32_t devs0[NDEV] = {0, 1, 2, 3};
    sm_sharding_ref sh = harness_sharding(&mesh, "i=4", devs0, NDEV, "P('i')");
    sm_shape s = HARNESS_SHAPE(8, 4);
    sm_array *d = harness_array_iota(SM_F32, &s, 9);
    char err[512];
    ck_assert_int_eq(sm_client_put(c, SM_F32, &s, d->data, &sh, "on0", NULL, err, sizeof err),
                     SM_OK);
    put_only(c, "both", "P('i', 'j')", 5);
    sm_client_close(c);

    kill_wait(&g.coord);
    kill_wait(&g.workers[1]);
    g.coord = coord_spawn(1);
    g.workers[1] = worker_spawn(1);
    c = harness_client(&g.h);
    wait_alive(c, NWORKERS);
    ck_assert_int_eq(harness_wait_state(c, (sm_array_ref){{0}, "on0"}, SM_ARRAY_READY, 20000),
                     SM_ARRAY_READY);
    harness_assert_get(c, (sm_array_ref){{0}, "on0"}, d);
    sm_array_free(d);
    sm_err e;
    sm_array_info x = describe(c, (sm_array_ref){{0}, "both"}, &e);
    ck_assert_int_eq(e, SM_OK);
    ck_assert_int_eq(x.state, SM_ARRAY_LOST);
    sm_array_info_free(&x);
    sm_client_close(c);
}
END_TEST

static const char *heavy_text = "mesh i=8\n"
                                "shard_map heavy(a: f32[512,512] @ P('i'), w: f32[512,512] @ "
                                "P()) -> P('i'):\n"
                                "    z = a\n"
                                "    for k in range(400):\n"
                                "        z = tanh(dot(z, w))\n"
                                "    return z\n";

/* A job running (and one done) when the coordinator is killed: after the
 * restart the running one is FAILED ("coordinator restarted"), the done
 * one still DONE, its output ready; new job ids continue. */
START_TEST(test_jobs_across_restart)
{
    sm_client *c = harness_client(&g.h);
    wait_alive(c, NWORKERS);
    char err[1024];
    sm_mesh mesh;
    sm_shape s = HARNESS_SHAPE(512, 512);
    sm_array *a = harness_array_iota(SM_F32, &s, 7);
    for (int64_t i = 0; i < 512 * 512; i++)
        ((float *)a->data)[i] = (float)(i % 7) * 0.001f;
    sm_sharding_ref row = harness_sharding(&mesh, "i=8", NULL, 0, "P('i')");
    ck_assert_int_eq(sm_client_put(c, SM_F32, &s, a->data, &row, "a", NULL, err, sizeof err),
                     SM_OK);
    sm_mesh mesh2;
    sm_sharding_ref rep = harness_sharding(&mesh2, "i=8", NULL, 0, "P()");
    ck_assert_int_eq(sm_client_put(c, SM_F32, &s, a->data, &rep, "w", NULL, err, sizeof err),
                     SM_OK);
    sm_array_free(a);
    sm_program *p = harness_program(heavy_text, "heavy.shmap");
    sm_array_ref args[2] = {{{0}, "a"}, {{0}, "w"}};
    const char *names[1] = {"small"};
    sm_program *q = harness_program("mesh i=8\n"
                                    "shard_map twice(a: f32[512,512] @ P('i')) -> P('i'):\n"
                                    "    return a + a\n",
                                    "twice.shmap");
    sm_job_info done;
    ck_assert_msg(sm_job_run(c, q, 1, args, names, 1, 0, 60000, &done, err, sizeof err) == SM_OK,
                  "%s", err);
    ck_assert_int_eq(done.state, SM_JOB_DONE);
    sm_job_id running;
    ck_assert_int_eq(sm_job_submit(c, p, 2, args, NULL, 1, 0, &running, err, sizeof err), SM_OK);
    harness_sleep_ms(300);
    sm_job_info info;
    ck_assert_int_eq(sm_job_status(c, running, &info, err, sizeof err), SM_OK);
    int still = info.state == SM_JOB_RUNNING || info.state == SM_JOB_QUEUED;
    sm_job_info_free(&info);
    sm_client_close(c);
    kill_wait(&g.coord);
    g.coord = coord_spawn(1);
    c = harness_client(&g.h);
    ck_assert_int_eq(sm_job_status(c, running, &info, err, sizeof err), SM_OK);
    if (still) {
        ck_assert_int_eq(info.state, SM_JOB_FAILED);
        ck_assert_msg(strstr(info.error, "coordinator restarted"), "%s", info.error);
    } else {
        fprintf(stderr, "e2e_durable: the heavy job ended before the coordinator was killed\n");
    }
    sm_job_info_free(&info);
    ck_assert_int_eq(sm_job_status(c, done.id, &info, err, sizeof err), SM_OK);
    ck_assert_int_eq(info.state, SM_JOB_DONE);
    sm_job_info_free(&info);
    ck_assert_int_eq(harness_wait_state(c, (sm_array_ref){{0}, "small"}, SM_ARRAY_READY, 20000),
                     SM_ARRAY_READY);
    sm_job_info again;
    ck_assert_msg(sm_job_run(c, q, 1, args, NULL, 1, 0, 60000, &again, err, sizeof err) == SM_OK,
                  "%s", err);
    ck_assert_int_eq(again.state, SM_JOB_DONE);
    ck_assert_uint_gt(again.id.v, running.v);
    sm_job_info_free(&again);
    sm_job_info_free(&done);
    sm_program_free(p);
    sm_program_free(q);
    sm_client_close(c);
}
END_TEST

/* The addresses of the alive workers holding devices 0 and 4, "" if none. */
static void worker_addrs(sm_client *c, char out[2][SM_ADDR_MAX])
{
    int n = 0;
    out[0][0] = out[1][0] = 0;
    sm_worker_info *w = harness_workers(c, &n);
    for (int i = 0; i < n; i++)
        if (w[i].alive && (w[i].devices[0] == 0 || w[i].devices[0] == NDEV))
            snprintf(out[w[i].devices[0] == NDEV], SM_ADDR_MAX, "%s", w[i].address);
    free(w);
}

/* Workers with a state dir, killed with SIGKILL and started again (new
 * processes, new ports): they restore their shards from disk and offer
 * them; the arrays are ready again, bit-exact. A damaged copy is not
 * offered: its array stays lost. Then the coordinator and both workers
 * die together and come back. */
/* Waits until the alive workers holding devices 0 and NDEV are new
 * processes: their addresses differ from old's (for worker k when mask
 * has bit k). The killed processes count as alive until their heartbeats
 * are missed, so counting alive workers would not do. */
static void wait_new_addrs(sm_client *c, char old[2][SM_ADDR_MAX], int mask)
{
    char now[2][SM_ADDR_MAX];
    int64_t until = sm_time_mono_ms() + 20000;
    int fresh;
    do {
        harness_sleep_ms(50);
        worker_addrs(c, now);
        fresh = 1;
        for (int k = 0; k < 2; k++)
            if (mask >> k & 1)
                fresh = fresh && now[k][0] && strcmp(now[k], old[k]);
    } while (!fresh && sm_time_mono_ms() < until);
    for (int k = 0; k < 2; k++)
        if (mask >> k & 1)
            ck_assert_msg(now[k][0] && strcmp(now[k], old[k]),
                          "worker %d was not replaced (address '%s')", k, now[k]);
}

START_TEST(test_workers_with_state_dir)
{
    sm_client *c = harness_client(&g.h);
    char old[2][SM_ADDR_MAX];
    worker_addrs(c, old);
    for (int k = 0; k < NWORKERS; k++) {
        kill_wait(&g.workers[k]);
        g.workers[k] = worker_spawn_state(k, 1);
    }
    wait_new_addrs(c, old, 3); /* the puts go to the new processes, not the killed ones */
    put_only(c, "kept", "P('i', 'j')", 11);
    put_only(c, "rep", "P('i', None)", 12);
    wait_copies(0, 8);
    wait_copies(1, 8);
    worker_addrs(c, old);
    for (int k = 0; k < NWORKERS; k++) {
        kill_wait(&g.workers[k]);
        g.workers[k] = worker_spawn_state(k, 1);
    }
    /* the new processes took over the old identities (same devices) */
    wait_new_addrs(c, old, 3);
    ck_assert_int_eq(harness_wait_state(c, (sm_array_ref){{0}, "kept"}, SM_ARRAY_READY, 20000),
                     SM_ARRAY_READY);
    ck_assert_int_eq(harness_wait_state(c, (sm_array_ref){{0}, "rep"}, SM_ARRAY_READY, 20000),
                     SM_ARRAY_READY);
    check_bits(c, (sm_array_ref){{0}, "kept"}, 11);
    check_bits(c, (sm_array_ref){{0}, "rep"}, 12);

    /* everything at once */
    kill_wait(&g.coord);
    for (int k = 0; k < NWORKERS; k++)
        kill_wait(&g.workers[k]);
    g.coord = coord_spawn(1);
    for (int k = 0; k < NWORKERS; k++)
        g.workers[k] = worker_spawn_state(k, 1);
    sm_client_close(c);
    c = harness_client(&g.h);
    ck_assert_int_eq(harness_wait_state(c, (sm_array_ref){{0}, "kept"}, SM_ARRAY_READY, 20000),
                     SM_ARRAY_READY);
    check_bits(c, (sm_array_ref){{0}, "kept"}, 11);
    check_bits(c, (sm_array_ref){{0}, "rep"}, 12);

    /* one damaged copy: "kept" on worker 1 cannot come back */
    sm_err e;
    sm_array_info kept = describe(c, (sm_array_ref){{0}, "kept"}, &e);
    ck_assert_int_eq(e, SM_OK);
    kill_wait(&g.workers[1]);
    char path[512];
    snprintf(path, sizeof path, "%s/worker1/shards/%llu-%d.npy", g.dir,
             (unsigned long long)kept.id.v, (int)kept.shards[kept.nshards - 1].device);
    int fd = open(path, O_WRONLY);
    ck_assert_msg(fd >= 0, "%s: %s", path, strerror(errno));
    ck_assert_int_eq(pwrite(fd, "garbage!", 8, 200), 8);
    close(fd);
    worker_addrs(c, old);
    g.workers[1] = worker_spawn_state(1, 1);
    wait_new_addrs(c, old, 2);
    ck_assert_int_eq(harness_wait_state(c, (sm_array_ref){{0}, "rep"}, SM_ARRAY_READY, 20000),
                     SM_ARRAY_READY);
    sm_array_info x = describe(c, (sm_array_ref){{0}, "kept"}, &e);
    ck_assert_int_eq(x.state, SM_ARRAY_LOST);
    sm_array_info_free(&x);
    sm_array_info_free(&kept);
    /* deleting frees the copies too */
    char err[512];
    ck_assert_int_eq(sm_client_delete(c, (sm_array_ref){{0}, "rep"}, err, sizeof err), SM_OK);
    ck_assert_int_eq(sm_client_delete(c, (sm_array_ref){{0}, "kept"}, err, sizeof err), SM_OK);
    wait_copies(0, 0);
    sm_client_close(c);
}
END_TEST

/* A worker without a state dir, killed and started again, comes back
 * empty under a new identity: its arrays stay lost, naming the devices. */
START_TEST(test_worker_without_state_dir_lost)
{
    sm_client *c = harness_client(&g.h);
    wait_alive(c, NWORKERS);
    put_only(c, "w", "P('i', 'j')", 13);
    kill_wait(&g.workers[1]);
    g.workers[1] = worker_spawn(1);
    ck_assert_int_eq(harness_wait_state(c, (sm_array_ref){{0}, "w"}, SM_ARRAY_LOST, 20000),
                     SM_ARRAY_LOST);
    sm_err e;
    sm_array_info x = describe(c, (sm_array_ref){{0}, "w"}, &e);
    ck_assert_msg(strstr(x.error, "devices"), "%s", x.error);
    sm_array_info_free(&x);
    sm_client_close(c);
}
END_TEST

/* The id of the alive worker holding device dev (0 if none). */
static uint32_t worker_id_of(sm_client *c, int32_t dev)
{
    int n = 0;
    uint32_t id = 0;
    sm_worker_info *w = harness_workers(c, &n);
    for (int i = 0; i < n; i++)
        for (int d = 0; w[i].alive && d < w[i].ndevices; d++)
            if (w[i].devices[d] == dev)
                id = w[i].id.v;
    free(w);
    return id;
}

/* Device dev's shard of array ref equals block [r0:r0+rows, c0:c0+cols]
 * of the 16x32 iota of seed, bit for bit. */
static void check_shard(sm_client *c, sm_array_ref ref, int32_t dev, uint64_t seed, int r0,
                        int rows, int c0, int cols)
{
    sm_shape s = HARNESS_SHAPE(16, 32);
    sm_array *want = harness_array_iota(SM_F32, &s, seed), *got = NULL;
    char err[512];
    sm_err e = sm_client_get_shard(c, ref, dev, &got, err, sizeof err);
    ck_assert_msg(e == SM_OK, "get-shard %d: %s", (int)dev, err);
    ck_assert_int_eq(got->shape.dims[0], rows);
    ck_assert_int_eq(got->shape.dims[1], cols);
    for (int i = 0; i < rows; i++)
        ck_assert(!memcmp((float *)got->data + (size_t)i * (size_t)cols,
                          (float *)want->data + (size_t)(r0 + i) * 32 + c0,
                          sizeof(float) * (size_t)cols));
    sm_array_free(got);
    sm_array_free(want);
}

/* A replicated array outlives a worker's loss: it turns degraded, is read
 * and resharded from the live copies, and a job on its mesh is refused
 * UNAVAILABLE; the worker started again under its id (empty: no state dir)
 * gets the missing shards copied back from the live copies and the array
 * is ready, every device's shard bit-exact. An array with no copy of some
 * block elsewhere is lost, and stays lost. */
START_TEST(test_replicated_survives_worker_loss)
{
    sm_client *c = harness_client(&g.h);
    wait_alive(c, NWORKERS);
    sm_array_ref cols = {{0}, "cols"}, grid = {{0}, "grid"};
    put_only(c, "cols", "P(None, 'j')", 21); /* each column block on both workers */
    put_only(c, "grid", "P('i', 'j')", 22);
    char err[1024];
    sm_array_info rx;
    ck_assert_int_eq(sm_client_replicate(c, cols, 2, &rx, err, sizeof err), SM_OK);
    ck_assert_int_eq(rx.ncopies, 0); /* needs no copy */
    sm_array_info_free(&rx);
    uint32_t id1 = worker_id_of(c, NDEV);
    ck_assert_uint_gt(id1, 0);
    kill_wait(&g.workers[1]);
    ck_assert_int_eq(harness_wait_state(c, cols, SM_ARRAY_DEGRADED, 20000), SM_ARRAY_DEGRADED);
    ck_assert_int_eq(harness_wait_state(c, grid, SM_ARRAY_LOST, 20000), SM_ARRAY_LOST);
    sm_err e;
    sm_array_info x = describe(c, cols, &e);
    ck_assert_msg(strstr(x.error, "array 'cols' is degraded: devices 4,5,6,7 are gone"), "%s",
                  x.error);
    sm_array_info_free(&x);
    /* read, whole and by device, from the copies on worker 0 */
    check_bits(c, cols, 21);
    check_shard(c, cols, 1, 21, 0, 16, 16, 16);
    check_shard(c, cols, 5, 21, 0, 16, 16, 16); /* device 5's block, from device 1 */
    /* resharded onto the devices that are left */
    sm_mesh left;
    int32_t devs[4] = {0, 1, 2, 3};
    sm_sharding_ref rows = harness_sharding(&left, "k=4", devs, 4, "P('k')");
    ck_assert_msg(sm_client_reshard(c, cols, &rows, "rows", NULL, err, sizeof err) == SM_OK, "%s",
                  err);
    check_bits(c, (sm_array_ref){{0}, "rows"}, 21);
    /* a job needs every device of its mesh */
    sm_program *p = harness_program("mesh i=4 j=2\n"
                                    "shard_map f(x: f32[16,32] @ P(None, 'j')) -> P(None, 'j'):\n"
                                    "    return x + x\n",
                                    "f.shmap");
    sm_job_info done;
    e = sm_job_run(c, p, 1, &cols, NULL, 1, 0, 60000, &done, err, sizeof err);
    ck_assert_msg(e == SM_EUNAVAILABLE && strstr(err, "4"), "%s: %s", sm_err_name(e), err);
    /* back under its id, empty: the missing shards are copied back */
    g.workers[1] = worker_spawn_as(1, 0, id1);
    ck_assert_int_eq(harness_wait_state(c, cols, SM_ARRAY_READY, 20000), SM_ARRAY_READY);
    x = describe(c, cols, &e);
    ck_assert_str_eq(x.error, "");
    for (int k = 0; k < x.nshards; k++)
        ck_assert_int_eq(x.shards[k].present, 1);
    sm_array_info_free(&x);
    for (int32_t d = 0; d < 2 * NDEV; d++)
        check_shard(c, cols, d, 21, 0, 16, (d % 2) * 16, 16);
    check_bits(c, cols, 21);
    memset(&done, 0, sizeof done);
    ck_assert_msg(sm_job_run(c, p, 1, &cols, NULL, 1, 0, 60000, &done, err, sizeof err) == SM_OK,
                  "%s", err);
    ck_assert_int_eq(done.state, SM_JOB_DONE);
    sm_job_info_free(&done);
    sm_program_free(p);
    ck_assert_int_eq(harness_wait_state(c, grid, SM_ARRAY_LOST, 1000), SM_ARRAY_LOST);
    sm_client_close(c);
}
END_TEST

/* Workers with a state dir and a memory limit below what they are given:
 * the least recently used shards are spilled to disk and read back on use,
 * so every array stays ready and reads back bit-exact; describe shows the
 * spilled shards. */
START_TEST(test_spill_under_memory_limit)
{
    g.worker_mem_mb = "6";
    for (int k = 0; k < NWORKERS; k++) {
        kill_wait(&g.workers[k]);
        g.workers[k] = worker_spawn_state(k, 1);
    }
    sm_client *c = harness_client(&g.h);
    wait_alive(c, NWORKERS);
    /* 8 arrays of 4 MiB over (4,2): 2 MiB each per worker, 16 MiB in all */
    sm_mesh mesh;
    sm_sharding_ref sh = harness_sharding(&mesh, "i=4,j=2", NULL, 0, "P('i', 'j')");
    sm_shape s = HARNESS_SHAPE(1024, 1024);
    char err[1024], name[16];
    for (int k = 0; k < 8; k++) {
        sm_array *a = harness_array_iota(SM_F32, &s, 100 + (uint64_t)k);
        snprintf(name, sizeof name, "big%d", k);
        sm_err e = sm_client_put(c, SM_F32, &s, a->data, &sh, name, NULL, err, sizeof err);
        ck_assert_msg(e == SM_OK, "put %s: %s", name, err);
        sm_array_free(a);
    }
    /* the heartbeats report what is on disk only */
    int spilled = 0;
    for (int64_t until = sm_time_mono_ms() + 10000; !spilled && sm_time_mono_ms() < until;
         harness_sleep_ms(100))
        for (int k = 0; k < 8 && !spilled; k++) {
            sm_err e;
            snprintf(name, sizeof name, "big%d", k);
            sm_array_info x = describe(c, (sm_array_ref){{0}, name}, &e);
            ck_assert_int_eq(e, SM_OK);
            ck_assert_int_eq(x.state, SM_ARRAY_READY);
            for (int p = 0; p < x.nshards; p++)
                spilled += x.shards[p].spilled && x.shards[p].present;
            sm_array_info_free(&x);
        }
    ck_assert_int_gt(spilled, 0);
    for (int k = 7; k >= 0; k--) {
        sm_array *want = harness_array_iota(SM_F32, &s, 100 + (uint64_t)k), *got = NULL;
        snprintf(name, sizeof name, "big%d", k);
        sm_err e = sm_client_get(c, (sm_array_ref){{0}, name}, &got, err, sizeof err);
        ck_assert_msg(e == SM_OK, "get %s: %s", name, err);
        ck_assert(!memcmp(got->data, want->data, (size_t)want->nbytes));
        sm_array_free(got);
        sm_array_free(want);
    }
    sm_client_close(c);
    g.worker_mem_mb = NULL;
}
END_TEST

/* An array with 2 replicas (every block also on the other worker) outlives
 * the loss of either worker: degraded, read and resharded from the copies;
 * the worker started again under its id gets its shards and copies back.
 * Deleting it frees the copies too. */
START_TEST(test_replicas_survive_worker_loss)
{
    sm_client *c = harness_client(&g.h);
    wait_alive(c, NWORKERS);
    sm_array_ref grid = {{0}, "grid"}, plain = {{0}, "plain"};
    put_only(c, "grid", "P('i', 'j')", 31);
    put_only(c, "plain", "P('i', 'j')", 32);
    char err[1024];
    sm_array_info x;
    ck_assert_msg(sm_client_replicate(c, grid, 2, &x, err, sizeof err) == SM_OK, "%s", err);
    ck_assert_int_eq(x.ncopies, 2 * NDEV); /* every block is on one worker only */
    for (int k = 0; k < x.ncopies; k++) {
        ck_assert_int_eq(x.copies[k].present, 1);
        /* a copy lives on the other worker than its block's device */
        int of = -1;
        for (int p = 0; p < x.nshards; p++)
            if (sm_index_equal(&x.shards[p].index, &x.copies[k].index))
                of = p;
        ck_assert_int_ge(of, 0);
        ck_assert_uint_ne(x.copies[k].worker_id.v, x.shards[of].worker_id.v);
    }
    sm_array_info_free(&x);
    /* asking again changes nothing; 3 replicas are refused */
    ck_assert_int_eq(sm_client_replicate(c, grid, 2, NULL, err, sizeof err), SM_OK);
    ck_assert_int_eq(sm_client_replicate(c, grid, 3, NULL, err, sizeof err), SM_EINVAL);
    uint32_t id1 = worker_id_of(c, NDEV);
    kill_wait(&g.workers[1]);
    ck_assert_int_eq(harness_wait_state(c, grid, SM_ARRAY_DEGRADED, 20000), SM_ARRAY_DEGRADED);
    ck_assert_int_eq(harness_wait_state(c, plain, SM_ARRAY_LOST, 20000), SM_ARRAY_LOST);
    check_bits(c, grid, 31);
    check_shard(c, grid, 5, 31, 8, 4, 16, 16); /* device 5: rows 8:12, columns 16:32 */
    /* through the coordinator's relay too (a client that cannot reach workers) */
    sm_client_opts ro = harness_client_opts(&g.h);
    ro.relay_only = 1;
    sm_client *relay = NULL;
    ck_assert_int_eq(sm_client_connect(g.h.target, &ro, &relay, err, sizeof err), SM_OK);
    check_bits(relay, grid, 31);
    check_shard(relay, grid, 5, 31, 8, 4, 16, 16);
    sm_client_close(relay);
    sm_mesh left;
    int32_t devs[4] = {0, 1, 2, 3};
    sm_sharding_ref rows = harness_sharding(&left, "k=4", devs, 4, "P('k')");
    ck_assert_msg(sm_client_reshard(c, grid, &rows, "grid_rows", NULL, err, sizeof err) == SM_OK,
                  "%s", err);
    check_bits(c, (sm_array_ref){{0}, "grid_rows"}, 31);
    /* back, empty, under its id: shards and copies are made again */
    g.workers[1] = worker_spawn_as(1, 0, id1);
    ck_assert_int_eq(harness_wait_state(c, grid, SM_ARRAY_READY, 20000), SM_ARRAY_READY);
    int all = 0;
    for (int64_t until = sm_time_mono_ms() + 20000; !all && sm_time_mono_ms() < until;
         harness_sleep_ms(50)) {
        sm_err e;
        x = describe(c, grid, &e);
        all = x.ncopies == 2 * NDEV;
        for (int k = 0; k < x.ncopies; k++)
            all &= x.copies[k].present;
        sm_array_info_free(&x);
    }
    ck_assert_msg(all, "the copies on the returned worker were not made again");
    for (int32_t d = 0; d < 2 * NDEV; d++)
        check_shard(c, grid, d, 31, (d / 2) * 4, 4, (d % 2) * 16, 16);
    /* the other worker goes: the array is read from the copies made again */
    kill_wait(&g.workers[0]);
    ck_assert_int_eq(harness_wait_state(c, grid, SM_ARRAY_DEGRADED, 20000), SM_ARRAY_DEGRADED);
    check_bits(c, grid, 31);
    g.workers[0] = worker_spawn(0);
    wait_alive(c, NWORKERS);
    /* deleting the arrays frees their shards and copies on the workers */
    const char *names[] = {"grid", "plain", "grid_rows"};
    for (int k = 0; k < 3; k++)
        ck_assert_int_eq(sm_client_delete(c, (sm_array_ref){{0}, names[k]}, err, sizeof err),
                         SM_OK);
    int64_t held = -1;
    for (int64_t until = sm_time_mono_ms() + 20000; held != 0 && sm_time_mono_ms() < until;
         harness_sleep_ms(100))
        held = harness_bytes_held(c, 1);
    ck_assert_int_eq(held, 0);
    sm_client_close(c);
}
END_TEST

/* A put or reshard run on a thread while the coordinator is killed. */
typedef struct {
    int reshard; /* else a put */
    sm_err e;
} bg_op;

#define BIG_ROWS 8192
#define BIG_COLS 4096

static void *bg_main(void *arg)
{
    bg_op *op = arg;
    sm_client *c = NULL;
    char err[512];
    sm_mesh mesh;
    if ((op->e = harness_connect(&g.h, &c, err, sizeof err)))
        return NULL;
    if (op->reshard) {
        sm_sharding_ref sh = harness_sharding(&mesh, "i=4,j=2", NULL, 0, "P('j', 'i')");
        op->e =
            sm_client_reshard(c, (sm_array_ref){{0}, "src"}, &sh, "moved", NULL, err, sizeof err);
    } else {
        sm_sharding_ref sh = harness_sharding(&mesh, "i=4,j=2", NULL, 0, "P('i', 'j')");
        sm_shape s = HARNESS_SHAPE(BIG_ROWS, BIG_COLS);
        sm_array *a = harness_array_iota(SM_F32, &s, 21);
        op->e = sm_client_put(c, SM_F32, &s, a->data, &sh, "big", NULL, err, sizeof err);
        sm_array_free(a);
    }
    sm_client_close(c);
    return NULL;
}

/* Runs op in a thread and kills the coordinator once `name` is pending (or
 * op ended); once op ends, checks the database and starts the coordinator
 * again. Returns 1 if `name` was still pending. */
static int kill_during(sm_client *c, const char *name, bg_op *op)
{
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, bg_main, op), 0);
    int pending = 0;
    for (int64_t until = sm_time_mono_ms() + 20000; sm_time_mono_ms() < until;) {
        sm_err e;
        sm_array_info x = describe(c, (sm_array_ref){{0}, name}, &e);
        if (e == SM_OK) {
            pending = x.state == SM_ARRAY_PENDING;
            sm_array_info_free(&x);
            break;
        }
        harness_sleep_ms(1);
    }
    kill_wait(&g.coord);
    pthread_join(t, NULL);
    check_db();
    g.coord = coord_spawn(1);
    return pending;
}

/* The coordinator killed during an upload and during a reshard: after the
 * restart the interrupted array is failed (or, if it finished first,
 * ready and right), the others are ready and bit-exact, the database
 * passes its integrity check. */
START_TEST(test_kill_during_upload_and_reshard)
{
    sm_client *c = harness_client(&g.h);
    wait_alive(c, NWORKERS);
    put_only(c, "keep", "P('i', 'j')", 31);
    bg_op up = {0, SM_OK};
    int was = kill_during(c, "big", &up);
    sm_client_close(c);
    c = harness_client(&g.h);
    ck_assert_int_eq(harness_wait_state(c, (sm_array_ref){{0}, "keep"}, SM_ARRAY_READY, 20000),
                     SM_ARRAY_READY);
    check_bits(c, (sm_array_ref){{0}, "keep"}, 31);
    sm_err e;
    sm_array_info x = describe(c, (sm_array_ref){{0}, "big"}, &e);
    if (was) {
        ck_assert_int_ne(up.e, SM_OK);
        ck_assert_int_eq(e, SM_OK);
        ck_assert_int_eq(x.state, SM_ARRAY_FAILED);
        ck_assert_msg(strstr(x.error, "coordinator restarted"), "%s", x.error);
        sm_array_info_free(&x);
    } else if (e == SM_OK) {
        fprintf(stderr, "e2e_durable: the upload ended before the coordinator was killed\n");
        sm_array_info_free(&x);
    }

    /* a reshard */
    sm_mesh mesh;
    sm_sharding_ref sh = harness_sharding(&mesh, "i=4,j=2", NULL, 0, "P('i', 'j')");
    sm_shape s = HARNESS_SHAPE(BIG_ROWS, BIG_COLS);
    sm_array *a = harness_array_iota(SM_F32, &s, 22);
    char err[512];
    ck_assert_msg(sm_client_put(c, SM_F32, &s, a->data, &sh, "src", NULL, err, sizeof err) == SM_OK,
                  "%s", err);
    bg_op rs = {1, SM_OK};
    was = kill_during(c, "moved", &rs);
    sm_client_close(c);
    c = harness_client(&g.h);
    ck_assert_int_eq(harness_wait_state(c, (sm_array_ref){{0}, "src"}, SM_ARRAY_READY, 20000),
                     SM_ARRAY_READY);
    harness_assert_get(c, (sm_array_ref){{0}, "src"}, a);
    x = describe(c, (sm_array_ref){{0}, "moved"}, &e);
    if (was) {
        ck_assert_int_eq(e, SM_OK);
        ck_assert_int_eq(x.state, SM_ARRAY_FAILED);
        sm_array_info_free(&x);
    } else if (e == SM_OK) {
        fprintf(stderr, "e2e_durable: the reshard ended before the coordinator was killed\n");
        sm_array_info_free(&x);
    }
    check_bits(c, (sm_array_ref){{0}, "keep"}, 31);
    sm_array_free(a);
    sm_client_close(c);
}
END_TEST

/* The embedded default with a state dir: the coordinator killed with
 * SIGKILL takes its local workers with it (--exit-with-parent); started
 * again, its new local workers restore their shards from DIR/worker-K and
 * every ready array is back, bit-exact. */
START_TEST(test_local_workers_state_dir)
{
    kill_wait(&g.coord);
    for (int k = 0; k < NWORKERS; k++)
        kill_wait(&g.workers[k]);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s/state'", g.dir);
    ck_assert_int_eq(system(cmd), 0);
    g.local = 1;
    g.port = 0;
    g.coord = coord_spawn(1);
    sm_client *c = harness_client(&g.h);
    wait_alive(c, NWORKERS);
    put_only(c, "emb", "P('i', 'j')", 41);
    wait_copies(0, 4);
    wait_copies(1, 4);
    sm_client_close(c);
    kill_wait(&g.coord);
    g.port = 0;
    g.coord = coord_spawn(1);
    c = harness_client(&g.h);
    ck_assert_int_eq(harness_wait_state(c, (sm_array_ref){{0}, "emb"}, SM_ARRAY_READY, 20000),
                     SM_ARRAY_READY);
    check_bits(c, (sm_array_ref){{0}, "emb"}, 41);
    int n = 0;
    sm_worker_info *w = harness_workers(c, &n);
    int alive = 0;
    for (int i = 0; i < n; i++)
        alive += w[i].alive;
    free(w);
    ck_assert_int_eq(alive, NWORKERS); /* the old processes are gone, not doubled */
    ck_assert_int_eq(n, NWORKERS);
    sm_client_close(c);
}
END_TEST

/* A damaged database is refused at start with a sentence. */
START_TEST(test_damaged_db_refused)
{
    kill_wait(&g.coord);
    char path[512], log[512];
    snprintf(path, sizeof path, "%s/state/registry.db", g.dir);
    /* Overwrite the middle of the file (past the header) with junk. */
    int fd = open(path, O_WRONLY);
    ck_assert_int_ge(fd, 0);
    char junk[4096];
    memset(junk, 0x5a, sizeof junk);
    ck_assert_int_eq(pwrite(fd, junk, sizeof junk, 100), (ssize_t)sizeof junk);
    close(fd);
    snprintf(path, sizeof path, "%s/state/registry.db-wal", g.dir);
    unlink(path);
    g.coord = coord_spawn(0);
    int status = 0;
    int64_t until = sm_time_mono_ms() + 20000;
    while (waitpid(g.coord, &status, WNOHANG) == 0 && sm_time_mono_ms() < until)
        harness_sleep_ms(20);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) != 0, "the coordinator started");
    g.coord = 0;
    snprintf(log, sizeof log, "%s/coordinator.log", g.dir);
    FILE *f = fopen(log, "r");
    ck_assert_ptr_nonnull(f);
    static char text[65536];
    size_t n = fread(text, 1, sizeof text - 1, f);
    text[n] = 0;
    fclose(f);
    ck_assert_msg(strstr(text, "registry database") && strstr(text, "move it away"), "log: %s",
                  text);
}
END_TEST

static Suite *durable_suite(void)
{
    return SUITE_CASE(suite_create("e2e_durable"), "restart", 120,
                      SUITE_CHECKED(env_setup, env_teardown), {test_coordinator_kill9_restart},
                      {test_restart_with_a_worker_gone}, {test_jobs_across_restart},
                      {test_workers_with_state_dir}, {test_worker_without_state_dir_lost},
                      {test_replicated_survives_worker_loss}, {test_replicas_survive_worker_loss},
                      {test_spill_under_memory_limit}, {test_kill_during_upload_and_reshard},
                      {test_local_workers_state_dir}, {test_damaged_db_refused});
}

int main(void)
{
    return harness_run_suite(durable_suite());
}
