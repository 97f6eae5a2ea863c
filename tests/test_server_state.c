/* Check suite for the registry's state dir (server/registry_state.c), with
 * a real SQLite file and no network: what a registry recorded comes back
 * in the next one opened on the same dir (ready arrays LOST until their
 * worker offers its shards back, pending ones FAILED, deleted ones gone,
 * ids continuing, the worker's identity and its offered shards adopted),
 * and every way of refusing a state dir (damaged file, a second
 * coordinator on it, another layout) gives its code and sentence. */
#include <check.h>
#include <fcntl.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "registry.h"
#include "sm_log.h"
#include "sm_time.h"
#include "server_testutil.h"
#include "suite_main.h"

#define N(a) ((int)(sizeof(a) / sizeof((a)[0])))

static const sm_shape g4 = {1, {4}};
static char dir[64];

static void dir_setup(void)
{
    sm_log_set_level(SM_LOG_ERROR);
    snprintf(dir, sizeof dir, "/tmp/sm_state.XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
}

static void dir_teardown(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
}

static sm_registry *reg_open(sm_err want, const char *msg)
{
    sm_registry *r;
    char err[512] = "";
    ck_assert_int_eq(sm_registry_create(60000, 500, &r, err, sizeof err), SM_OK);
    sm_err e = sm_registry_open_state(r, dir, err, sizeof err);
    ck_assert_msg(e == want, "open: %d, %s", (int)e, err);
    if (msg)
        ck_assert_msg(strstr(err, msg), "%s", err);
    if (e) {
        sm_registry_free(r);
        return NULL;
    }
    return r;
}

/* Registers worker (id 0: new) with one device at addr, offering held. */
static sm_svc_register_reply reg_worker(sm_registry *r, uint32_t id, const sm_svc_held_shard *held,
                                        int nheld)
{
    sm_svc_register_req req = {"127.0.0.1:9000", 1, -1, "host", {id}, NULL, nheld, held};
    sm_svc_register_reply rep;
    sm_reg_free *f = NULL;
    int nf = 0;
    char err[256];
    ck_assert_msg(sm_registry_worker_add(r, &req, NULL, T0, &rep, &f, &nf, err, sizeof err) ==
                      SM_OK,
                  "%s", err);
    free(f);
    return rep;
}

static sm_array_id reg_put(sm_registry *r, const char *name, int fill)
{
    sm_svc_create_array_req req = st_create_req(name, "m", NULL, g4, SM_PUT_WHOLE, 0);
    sm_svc_create_array_reply rep;
    char err[256];
    ck_assert_msg(sm_registry_array_create(r, &req, T0, &rep, err, sizeof err) == SM_OK, "%s", err);
    sm_array_id id = rep.array.id;
    sm_svc_create_array_reply_free(&rep);
    if (fill) {
        int32_t dev = 0;
        sm_svc_upload_header h = {id, 1, &dev, g4, SM_F32, 16};
        sm_reg_target *t;
        int nt, ready;
        int64_t left;
        ck_assert_int_eq(sm_registry_upload_begin(r, &h, T0, &t, &nt, &left, err, sizeof err),
                         SM_OK);
        free(t);
        ck_assert_int_eq(sm_registry_upload_end(r, id, &dev, 1, 1, &ready, err, sizeof err), SM_OK);
    }
    return id;
}

static sm_array_state state_of(sm_registry *r, const char *name, char *error, size_t len)
{
    sm_array_info info;
    char err[256];
    ck_assert_msg(
        sm_registry_array_describe(r, (sm_array_ref){{0}, name}, &info, err, sizeof err) == SM_OK,
        "%s", err);
    sm_array_state s = info.state;
    if (error)
        snprintf(error, len, "%s", info.error);
    sm_array_info_free(&info);
    return s;
}

/* A registry with worker 1 (device 0) and mesh "m" of the given axes. */
static sm_registry *open_with_mesh(const char *axes, sm_mesh_info *mi)
{
    sm_registry *r = reg_open(SM_OK, NULL);
    char err[256];
    reg_worker(r, 0, NULL, 0);
    sm_mesh m;
    ck_assert_int_eq(sm_mesh_parse(axes, NULL, 0, &m, err, sizeof err), SM_OK);
    ck_assert_int_eq(sm_registry_mesh_create(r, "m", &m, 1, mi, err, sizeof err), SM_OK);
    return r;
}

/* A registry with worker 1 (device 0), mesh "m", ready "r1" and "r2",
 * pending "p", "d" created and deleted; closed. */
static sm_array_id record_first_run(void)
{
    sm_mesh_info mi;
    sm_registry *r = open_with_mesh("i=1", &mi);
    char err[256];
    sm_array_id r1 = reg_put(r, "r1", 1);
    int32_t dev0 = 0;
    sm_registry_upload_checksum(r, r1, &dev0, 1, 0xabc);
    reg_put(r, "r2", 1);
    reg_put(r, "p", 0);
    reg_put(r, "d", 1);
    sm_reg_free *f = NULL;
    int nf = 0;
    ck_assert_int_eq(
        sm_registry_array_delete(r, (sm_array_ref){{0}, "d"}, &f, &nf, err, sizeof err), SM_OK);
    free(f);
    sm_registry_free(r);
    return r1;
}

START_TEST(test_restart_recovers)
{
    sm_array_id r1 = record_first_run();
    sm_registry *r = reg_open(SM_OK, NULL);
    char error[512], err[256];
    /* before the worker is back */
    ck_assert_int_eq(state_of(r, "r1", error, sizeof error), SM_ARRAY_LOST);
    ck_assert_msg(strstr(error, "register again"), "%s", error);
    ck_assert_int_eq(state_of(r, "p", error, sizeof error), SM_ARRAY_FAILED);
    ck_assert_msg(strstr(error, "coordinator restarted"), "%s", error);
    sm_array_info info;
    ck_assert_int_eq(
        sm_registry_array_describe(r, (sm_array_ref){{0}, "d"}, &info, err, sizeof err),
        SM_ENOTFOUND);
    ck_assert_int_eq(sm_registry_workers_alive(r), 0);
    /* worker 1 comes back offering r1's shard with another checksum: not
     * taken; then with the one it was uploaded with (and only that) */
    sm_svc_held_shard bad[] = {{r1.v, 0, 0xdef}};
    sm_svc_register_reply rep = reg_worker(r, 1, bad, N(bad));
    ck_assert_uint_eq(rep.worker_id.v, 1);
    ck_assert_int_eq(rep.devices[0], 0);
    ck_assert_int_eq(state_of(r, "r1", NULL, 0), SM_ARRAY_LOST);
    sm_svc_held_shard held[] = {{r1.v, 0, 0xabc}, {999, 0, 0}};
    rep = reg_worker(r, 1, held, N(held));
    ck_assert_uint_eq(rep.worker_id.v, 1);
    ck_assert_int_eq(rep.keep_shards, 1);
    ck_assert_int_eq(state_of(r, "r1", NULL, 0), SM_ARRAY_READY);
    ck_assert_int_eq(state_of(r, "r2", NULL, 0), SM_ARRAY_LOST);
    /* ids continue past the ones recorded (a block ahead): never reused */
    sm_array_id next = reg_put(r, "n", 0);
    ck_assert_uint_gt(next.v, 4); /* 4 arrays were created before */
    /* a new worker gets a new id, and drops what it held */
    rep = reg_worker(r, 0, held, N(held));
    ck_assert_uint_eq(rep.worker_id.v, 2);
    ck_assert_int_eq(rep.keep_shards, 0);
    sm_registry_free(r);
    /* and all of that survives one more restart */
    r = reg_open(SM_OK, NULL);
    ck_assert_int_eq(state_of(r, "n", NULL, 0), SM_ARRAY_FAILED);
    ck_assert_int_eq(state_of(r, "r1", NULL, 0), SM_ARRAY_LOST);
    rep = reg_worker(r, 0, NULL, 0);
    ck_assert_uint_eq(rep.worker_id.v, 3);
    sm_registry_free(r);
}
END_TEST

/* Refusals: each row damages the state dir one way, or holds it. */
typedef struct {
    const char *name;
    void (*spoil)(void);
    sm_err want;
    const char *msg;
} refusal_row;

static void spoil_bytes(void)
{
    char path[128], junk[4096];
    snprintf(path, sizeof path, "%s/registry.db", dir);
    int fd = open(path, O_WRONLY);
    ck_assert_int_ge(fd, 0);
    memset(junk, 0x5a, sizeof junk);
    ck_assert_int_eq(pwrite(fd, junk, sizeof junk, 100), (ssize_t)sizeof junk);
    close(fd);
}

static void spoil_layout(void)
{
    char path[128];
    sqlite3 *db;
    snprintf(path, sizeof path, "%s/registry.db", dir);
    ck_assert_int_eq(sqlite3_open(path, &db), SQLITE_OK);
    ck_assert_int_eq(sqlite3_exec(db, "UPDATE layout SET mesh = 1", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(db);
}

static sm_registry *holder;

static void spoil_held(void)
{
    holder = reg_open(SM_OK, NULL);
}

static const refusal_row refusals[] = {
    {"damaged", spoil_bytes, SM_EDATALOSS, "move it away to start empty"},
    {"layout", spoil_layout, SM_EPRECONDITION, "another format"},
    {"held", spoil_held, SM_EPRECONDITION, "in use by another shmap-coordinator"},
};

START_TEST(test_refusals)
{
    const refusal_row *row = &refusals[_i];
    record_first_run();
    row->spoil();
    reg_open(row->want, row->msg);
    sm_registry_free(holder);
    holder = NULL;
}
END_TEST

START_TEST(test_no_state_dir_is_a_noop)
{
    sm_registry *r;
    char err[256];
    uint64_t last = 1;
    sm_reg_job *jobs = (sm_reg_job *)&last;
    int n = 1;
    ck_assert_int_eq(sm_registry_create(60000, 500, &r, err, sizeof err), SM_OK);
    sm_registry_job_save(r, 7, 1, "", NULL);
    ck_assert_int_eq(sm_registry_jobs_restore(r, &last, &jobs, &n, err, sizeof err), SM_OK);
    ck_assert_uint_eq(last, 0);
    ck_assert_int_eq(n, 0);
    ck_assert_ptr_null(jobs);
    sm_registry_free(r);
}
END_TEST

/* Closes *r and opens the state dir again (*r the new registry); returns
 * the job records it restores (n of them, last: the last job id handed
 * out), asserting that succeeds. The caller frees them. */
static sm_reg_job *jobs_after_reopen(sm_registry **r, uint64_t *last, int *n)
{
    sm_reg_job *jobs = NULL;
    char err[256];
    sm_registry_free(*r);
    *r = reg_open(SM_OK, NULL);
    ck_assert_int_eq(sm_registry_jobs_restore(*r, last, &jobs, n, err, sizeof err), SM_OK);
    return jobs;
}

START_TEST(test_jobs_records)
{
    sm_registry *r = reg_open(SM_OK, NULL);
    sm_registry_job_save(r, 1, 3, "", "acme");
    sm_registry_job_save(r, 2, 2, "", NULL);
    sm_registry_job_save(r, 2, 4, "job 2 failed: x", "");
    uint64_t last;
    int n;
    sm_reg_job *jobs = jobs_after_reopen(&r, &last, &n);
    ck_assert_uint_ge(last, 2); /* job ids continue past what was handed out */
    ck_assert_int_eq(n, 2);
    ck_assert_int_eq(jobs[1].state, 4);
    ck_assert_str_eq(jobs[1].error, "job 2 failed: x");
    ck_assert_str_eq(jobs[0].tenant, "acme"); /* a tenant's job stays its tenant's */
    ck_assert_str_eq(jobs[1].tenant, "");
    free(jobs);
    sm_registry_free(r);
}
END_TEST

static long long file_size(const char *name)
{
    char path[128];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return stat(path, &st) == 0 ? (long long)st.st_size : -1;
}

/* Commits only append to the write-ahead log: more of them than SQLite's
 * own checkpoint threshold (1000 pages) leave registry.db as it was; the
 * reaper's sm_registry_checkpoint copies the log in once no change came
 * for a moment, and not before. What was committed survives either way. */
START_TEST(test_checkpoint_when_quiet)
{
    sm_registry *r = reg_open(SM_OK, NULL);
    long long db0 = file_size("registry.db");
    ck_assert_int_ge(db0, 0);
    for (uint64_t id = 1; id <= 1500; id++)
        sm_registry_job_save(r, id, 3, "", NULL);
    ck_assert_int_gt(file_size("registry.db-wal"), 1000LL * 4096);
    ck_assert_int_eq(file_size("registry.db"), db0); /* no commit made a checkpoint */
    int64_t now = sm_time_mono_ms();
    sm_registry_checkpoint(r, now); /* the last change was just now: not quiet */
    ck_assert_int_eq(file_size("registry.db"), db0);
    sm_registry_checkpoint(r, now + 1000);
    ck_assert_int_gt(file_size("registry.db"), db0);
    uint64_t last;
    int n;
    sm_reg_job *jobs = jobs_after_reopen(&r, &last, &n);
    ck_assert_int_eq(n, 1500);
    ck_assert_int_eq(jobs[1499].state, 3);
    free(jobs);
    sm_registry_free(r);
}
END_TEST

static uint32_t array_auto_axes(sm_registry *r, const char *name)
{
    sm_array_info info;
    char err[256];
    ck_assert_msg(
        sm_registry_array_describe(r, (sm_array_ref){{0}, name}, &info, err, sizeof err) == SM_OK,
        "%s", err);
    uint32_t a = info.sharding.mesh.auto_axes;
    sm_array_info_free(&info);
    return a;
}

static uint32_t mesh_auto_axes(sm_registry *r, const char *name)
{
    sm_mesh_info mi;
    char err[256];
    ck_assert_msg(sm_registry_mesh_get(r, (sm_mesh_id){0}, name, &mi, err, sizeof err) == SM_OK,
                  "%s", err);
    return mi.mesh.auto_axes;
}

/* Rewrites the database as schema 3 wrote it: the word a mesh keeps its
 * axis types in held padding (here, bits set), and an array's sharding
 * ended at its spec. */
static void make_schema3(void)
{
    char path[128];
    sqlite3 *db;
    sqlite3_stmt *st;
    snprintf(path, sizeof path, "%s/registry.db", dir);
    ck_assert_int_eq(sqlite3_open(path, &db), SQLITE_OK);
    ck_assert_int_eq(sqlite3_prepare_v2(db, "SELECT id, mesh FROM meshes", -1, &st, NULL),
                     SQLITE_OK);
    int n = 0;
    while (sqlite3_step(st) == SQLITE_ROW) {
        sm_mesh m;
        ck_assert_int_eq(sqlite3_column_bytes(st, 1), (int)sizeof m);
        memcpy(&m, sqlite3_column_blob(st, 1), sizeof m);
        m.auto_axes = 0xa5a5a5a5u;
        sqlite3_stmt *up;
        ck_assert_int_eq(
            sqlite3_prepare_v2(db, "UPDATE meshes SET mesh = ? WHERE id = ?", -1, &up, NULL),
            SQLITE_OK);
        sqlite3_bind_blob(up, 1, &m, sizeof m, SQLITE_TRANSIENT);
        sqlite3_bind_int64(up, 2, sqlite3_column_int64(st, 0));
        ck_assert_int_eq(sqlite3_step(up), SQLITE_DONE);
        sqlite3_finalize(up);
        n++;
    }
    sqlite3_finalize(st);
    ck_assert_int_gt(n, 0);
    ck_assert_int_eq(sqlite3_exec(db,
                                  "UPDATE layout SET schema = 3;"
                                  "UPDATE arrays SET sharding = substr(sharding, 1,"
                                  " length(sharding) - 4)",
                                  NULL, NULL, NULL),
                     SQLITE_OK);
    sqlite3_close(db);
}

static long long layout_schema(void)
{
    char path[128];
    sqlite3 *db;
    sqlite3_stmt *st;
    snprintf(path, sizeof path, "%s/registry.db", dir);
    ck_assert_int_eq(sqlite3_open(path, &db), SQLITE_OK);
    ck_assert_int_eq(sqlite3_prepare_v2(db, "SELECT schema FROM layout", -1, &st, NULL), SQLITE_OK);
    ck_assert_int_eq(sqlite3_step(st), SQLITE_ROW);
    long long v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    sqlite3_close(db);
    return v;
}

/* A mesh's axis types are part of it: a mesh that differs only in them is
 * another mesh, and they survive a restart on the mesh and on the arrays
 * made on it. A database of schema 3 (meshes without types) loads with
 * every mesh Explicit and is recorded as the current schema. */
START_TEST(test_mesh_types_survive)
{
    sm_mesh_info mi;
    sm_registry *r = open_with_mesh("i=1 axis_types=(Auto)", &mi);
    char err[256];
    ck_assert_uint_eq(mi.mesh.auto_axes, 1);
    reg_put(r, "a", 1);
    /* the same mesh inline, Explicit: another mesh; Auto: this one */
    for (int k = 0; k < 2; k++) {
        sm_mesh in;
        ck_assert_int_eq(
            sm_mesh_parse(k ? "i=1 axis_types=(Auto)" : "i=1", NULL, 0, &in, err, sizeof err),
            SM_OK);
        sm_svc_create_array_req req = st_create_req(k ? "b" : "e", NULL, NULL, g4, SM_PUT_WHOLE, 0);
        req.sharding.mesh = &in;
        sm_svc_create_array_reply rep;
        ck_assert_msg(sm_registry_array_create(r, &req, T0, &rep, err, sizeof err) == SM_OK, "%s",
                      err);
        ck_assert_uint_eq(rep.array.mesh_id.v, k ? mi.id.v : mi.id.v + 1);
        ck_assert_uint_eq(rep.array.sharding.mesh.auto_axes, (uint32_t)k);
        sm_svc_create_array_reply_free(&rep);
    }
    sm_registry_free(r);
    ck_assert_int_eq(layout_schema(), 4);
    r = reg_open(SM_OK, NULL);
    ck_assert_uint_eq(mesh_auto_axes(r, "m"), 1);
    ck_assert_uint_eq(array_auto_axes(r, "a"), 1);
    ck_assert_uint_eq(array_auto_axes(r, "e"), 0);
    sm_registry_free(r);
    make_schema3();
    r = reg_open(SM_OK, NULL);
    ck_assert_uint_eq(mesh_auto_axes(r, "m"), 0);
    ck_assert_uint_eq(array_auto_axes(r, "a"), 0);
    sm_registry_free(r);
    ck_assert_int_eq(layout_schema(), 4);
    r = reg_open(SM_OK, NULL); /* and it stays so */
    ck_assert_uint_eq(mesh_auto_axes(r, "m"), 0);
    sm_registry_free(r);
}
END_TEST

static Suite *state_suite(void)
{
    return SUITE_CASE(suite_create("server_state"), "state", 0,
                      SUITE_CHECKED(dir_setup, dir_teardown), {test_restart_recovers},
                      {test_refusals, N(refusals)}, {test_no_state_dir_is_a_noop},
                      {test_jobs_records}, {test_checkpoint_when_quiet}, {test_mesh_types_survive});
}

int main(void)
{
    return suite_main(state_suite());
}
