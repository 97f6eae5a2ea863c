/* registry_state: the registry in SQLite under --state-dir (registry.db,
 * WAL). Tables: counters (the next ids), workers, meshes, arrays and jobs
 * (ended jobs' records and the ids of running ones). Meshes, shapes and
 * shardings are stored as the bytes of their C structs, so the file is
 * tied to a build's layout: the layout sizes are stored with it and a
 * mismatch refuses to start. See registry.h. */
#include "registry_int.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "sm_log.h"
#include "sm_time.h"

/* Bumped when the tables or the stored struct layouts change. 3: an
 * array's sharding packed (sm_reg_sharding_pack); 4: meshes' axis types
 * (sm_mesh.auto_axes). */
#define SM_REG_SCHEMA 4

static const char sm_reg_schema[] =
    "CREATE TABLE IF NOT EXISTS counters(k INTEGER PRIMARY KEY CHECK (k = 0),"
    " next_worker INTEGER, next_device INTEGER, next_mesh INTEGER, next_array INTEGER,"
    " next_job INTEGER);"
    "CREATE TABLE IF NOT EXISTS layout(k INTEGER PRIMARY KEY CHECK (k = 0), schema INTEGER,"
    " mesh INTEGER, shape INTEGER, sharding INTEGER);"
    "CREATE TABLE IF NOT EXISTS workers(id INTEGER PRIMARY KEY, address TEXT, host TEXT,"
    " process_index INTEGER, ndevices INTEGER, first_device INTEGER);"
    "CREATE TABLE IF NOT EXISTS meshes(id INTEGER PRIMARY KEY, name TEXT, mesh BLOB);"
    "CREATE TABLE IF NOT EXISTS arrays(id INTEGER PRIMARY KEY, name TEXT, dtype INTEGER,"
    " shape BLOB, mesh_id INTEGER, mesh_name TEXT, sharding BLOB, state INTEGER, error TEXT,"
    " workers BLOB, sums BLOB);"
    "CREATE TABLE IF NOT EXISTS jobs(id INTEGER PRIMARY KEY, state INTEGER, error TEXT);"
    "CREATE TABLE IF NOT EXISTS copies(array_id INTEGER, k INTEGER, of INTEGER, worker INTEGER,"
    " device INTEGER, PRIMARY KEY (array_id, k));"
    "CREATE TABLE IF NOT EXISTS owners(kind INTEGER, id INTEGER, tenant TEXT,"
    " PRIMARY KEY (kind, id));";

/* owners.kind: what a tenant owns (a row only for tenants' records) */
enum { SM_REG_OWNS_ARRAY = 0, SM_REG_OWNS_MESH = 1, SM_REG_OWNS_JOB = 2 };

/* Records (kind, id)'s tenant, if it has one. 0 on success. */
static int sm_reg_save_owner(sm_registry *r, int kind, uint64_t id, const char *tenant);

static void sm_reg_stmts_free(sm_registry *r)
{
    for (size_t k = 0; k < sizeof r->stmts / sizeof r->stmts[0]; k++) {
        sqlite3_finalize(r->stmts[k].st);
        r->stmts[k].sql = NULL;
        r->stmts[k].st = NULL;
    }
}

static void sm_reg_db_log(sm_registry *r, const char *what)
{
    SM_ERROR("the registry database could not %s: %s; this change will not survive a restart", what,
             sqlite3_errmsg(r->db));
    if (r->tx_depth)
        r->tx_failed = 1;
}

static int sm_reg_exec(sm_registry *r, const char *sql)
{
    return sqlite3_exec(r->db, sql, NULL, NULL, NULL) == SQLITE_OK ? 0 : -1;
}

/* A query read once (at open): prepared into *st, 0 on success, -1 if
 * SQLite refused it. */
static int sm_reg_prepare(sm_registry *r, const char *sql, sqlite3_stmt **st)
{
    return sqlite3_prepare_v2(r->db, sql, -1, st, NULL) == SQLITE_OK ? 0 : -1;
}

static int sm_reg_run(sm_registry *r, const char *sql, const char *fmt, ...);

/* Every registry change ends with a commit on the request's path, so
 * BEGIN and COMMIT are prepared once, as the statements are (sm_reg_run),
 * instead of parsed each time. */
void sm_reg_tx_begin(sm_registry *r)
{
    if (!r->db)
        return;
    if (r->tx_depth++ == 0) {
        r->tx_failed = 0;
        if (sm_reg_run(r, "BEGIN IMMEDIATE", ""))
            sm_reg_db_log(r, "begin a transaction");
    }
}

void sm_reg_tx_end(sm_registry *r)
{
    if (!r->db || --r->tx_depth > 0)
        return;
    if (sm_reg_run(r, "COMMIT", "")) {
        sm_reg_db_log(r, "commit");
        sm_reg_run(r, "ROLLBACK", "");
    }
}

/* Checkpoints (copying the write-ahead log into the database, with an
 * fdatasync of each) take milliseconds on a slow disk. SQLite makes one
 * inside the commit that takes the log past 1000 pages, so one change in
 * a few hundred waited for it. Instead the commit only notes the log's
 * size and the reaper checkpoints (sm_registry_checkpoint) once the
 * registry has been quiet for a moment, or the log has grown large; a
 * commit still checkpoints itself past a hard limit, should the reaper
 * fall behind. Durability is unchanged: a commit is in the log either
 * way, and the log is replayed at open. */
#define SM_REG_WAL_QUIET_MS     100
#define SM_REG_WAL_IDLE_PAGES   256   /* checkpoint in a quiet moment from this size */
#define SM_REG_WAL_BUSY_PAGES   16384 /* 64 MiB: checkpoint even when never quiet */
#define SM_REG_WAL_COMMIT_PAGES 65536 /* 256 MiB: the commit checkpoints itself */

static int sm_reg_wal_hook(void *arg, sqlite3 *db, const char *name, int pages)
{
    sm_registry *r = arg;
    r->wal_pages = pages;
    r->wal_change_ms = sm_time_mono_ms();
    if (pages >= SM_REG_WAL_COMMIT_PAGES &&
        sqlite3_wal_checkpoint_v2(db, name, SQLITE_CHECKPOINT_PASSIVE, NULL, NULL) == SQLITE_OK)
        r->wal_pages = 0;
    return SQLITE_OK;
}

void sm_registry_checkpoint(sm_registry *r, int64_t now_ms)
{
    pthread_mutex_lock(&r->mu);
    if (r->db && !r->tx_depth &&
        (r->wal_pages >= SM_REG_WAL_BUSY_PAGES ||
         (r->wal_pages >= SM_REG_WAL_IDLE_PAGES &&
          now_ms - r->wal_change_ms >= SM_REG_WAL_QUIET_MS))) {
        if (sqlite3_wal_checkpoint_v2(r->db, NULL, SQLITE_CHECKPOINT_PASSIVE, NULL, NULL) ==
            SQLITE_OK)
            r->wal_pages = 0;
        else
            sm_reg_db_log(r, "copy its log into the database (a checkpoint)");
    }
    pthread_mutex_unlock(&r->mu);
}

/* Runs sql with the values bound by the caller's format: 'i' int64, 't'
 * text, 'b' blob (pointer then size_t). 0 on success. */
static int sm_reg_run(sm_registry *r, const char *sql, const char *fmt, ...)
{
    sqlite3_stmt *st = NULL;
    va_list ap;
    int rc = -1, k = 0, cached = 0;
    for (; k < (int)(sizeof r->stmts / sizeof r->stmts[0]) && r->stmts[k].sql; k++)
        if (r->stmts[k].sql == sql) {
            st = r->stmts[k].st;
            cached = 1;
            break;
        }
    if (!st &&
        sqlite3_prepare_v3(r->db, sql, -1, SQLITE_PREPARE_PERSISTENT, &st, NULL) != SQLITE_OK)
        return -1;
    if (!cached && k < (int)(sizeof r->stmts / sizeof r->stmts[0])) {
        r->stmts[k].sql = sql;
        r->stmts[k].st = st;
        cached = 1;
    }
    va_start(ap, fmt);
    for (int k = 0; fmt[k]; k++) {
        if (fmt[k] == 'i') {
            sqlite3_bind_int64(st, k + 1, va_arg(ap, int64_t));
        } else if (fmt[k] == 't') {
            sqlite3_bind_text(st, k + 1, va_arg(ap, const char *), -1, SQLITE_TRANSIENT);
        } else {
            const void *p = va_arg(ap, const void *);
            size_t n = va_arg(ap, size_t);
            sqlite3_bind_blob(st, k + 1, p, (int)n, SQLITE_TRANSIENT);
        }
    }
    va_end(ap);
    if (sqlite3_step(st) == SQLITE_DONE)
        rc = 0;
    if (cached) {
        sqlite3_reset(st);
        sqlite3_clear_bindings(st);
    } else {
        sqlite3_finalize(st);
    }
    return rc;
}

/* Mesh, array and job ids are recorded a block ahead of what is handed
 * out, so that most changes need not rewrite the counters; a restart
 * continues past the block (ids are never reused; some are skipped). */
#define SM_REG_ID_BLOCK 4096

static int sm_reg_ids_current(const sm_registry *r)
{
    return r->ids_saved && r->next_worker == r->saved_worker && r->next_device == r->saved_device &&
           r->next_mesh <= r->saved_mesh_hw && r->next_array <= r->saved_array_hw;
}

static int sm_reg_save_counters(sm_registry *r)
{
    if (sm_reg_ids_current(r))
        return 0;
    uint64_t mesh_hw = r->next_mesh + SM_REG_ID_BLOCK, array_hw = r->next_array + SM_REG_ID_BLOCK;
    int rc = sm_reg_run(r,
                        "INSERT OR REPLACE INTO counters(k, next_worker, next_device, next_mesh,"
                        " next_array, next_job) VALUES (0, ?, ?, ?, ?,"
                        " COALESCE((SELECT next_job FROM counters WHERE k = 0), 1))",
                        "iiii", (int64_t)r->next_worker, (int64_t)r->next_device, (int64_t)mesh_hw,
                        (int64_t)array_hw);
    if (!rc) {
        r->ids_saved = 1;
        r->saved_worker = r->next_worker;
        r->saved_device = r->next_device;
        r->saved_mesh_hw = mesh_hw;
        r->saved_array_hw = array_hw;
    }
    return rc;
}

void sm_reg_save_ids(sm_registry *r)
{
    if (!r->db || sm_reg_ids_current(r))
        return;
    sm_reg_tx_begin(r);
    if (sm_reg_save_counters(r))
        sm_reg_db_log(r, "record the id counters");
    sm_reg_tx_end(r);
}

/* An array's sharding as its row stores it: the mesh's axes, its devices
 * (only as many as it has) and the spec's text, a few hundred bytes where
 * the struct takes kilobytes (every change of the array rewrites its row). */
#define SM_REG_PACK_MAX (64 + SM_MAX_AXES * (SM_AXIS_NAME_MAX + 8) + SM_MAX_DEVICES * 4 + 1024)
static size_t sm_reg_sharding_pack(const sm_sharding *s, unsigned char *out)
{
    size_t o = 0;
    int32_t n = s->mesh.naxes, nd = s->mesh.ndevices;
    memcpy(out + o, &n, 4);
    o += 4;
    for (int k = 0; k < n; k++) {
        memcpy(out + o, s->mesh.names[k], SM_AXIS_NAME_MAX);
        o += SM_AXIS_NAME_MAX;
        memcpy(out + o, &s->mesh.sizes[k], 8);
        o += 8;
    }
    memcpy(out + o, &nd, 4);
    o += 4;
    memcpy(out + o, s->mesh.devices, 4 * (size_t)nd);
    o += 4 * (size_t)nd;
    sm_pspec_format(&s->spec, (char *)out + o, 1024);
    o += strlen((char *)out + o) + 1;
    /* after the spec's NUL, so that a record of schema 3 reads as Explicit */
    memcpy(out + o, &s->mesh.auto_axes, 4);
    return o + 4;
}

static int sm_reg_sharding_unpack(const unsigned char *in, size_t len, sm_sharding *s)
{
    size_t o = 0;
    int32_t n, nd;
    char err[256];
    memset(s, 0, sizeof *s);
    if (len < 4)
        return -1;
    memcpy(&n, in, 4);
    o = 4;
    if (n < 1 || n > SM_MAX_AXES || len < o + (size_t)n * (SM_AXIS_NAME_MAX + 8) + 4)
        return -1;
    s->mesh.naxes = n;
    for (int k = 0; k < n; k++) {
        memcpy(s->mesh.names[k], in + o, SM_AXIS_NAME_MAX);
        s->mesh.names[k][SM_AXIS_NAME_MAX - 1] = 0;
        o += SM_AXIS_NAME_MAX;
        memcpy(&s->mesh.sizes[k], in + o, 8);
        o += 8;
    }
    memcpy(&nd, in + o, 4);
    o += 4;
    if (nd < 1 || nd > SM_MAX_DEVICES || len < o + 4 * (size_t)nd + 1)
        return -1;
    s->mesh.ndevices = nd;
    memcpy(s->mesh.devices, in + o, 4 * (size_t)nd);
    o += 4 * (size_t)nd;
    const unsigned char *nul = memchr(in + o, 0, len - o);
    if (!nul)
        return -1;
    size_t rest = len - (size_t)(nul + 1 - in); /* 4: the axis types; 0: schema 3 */
    if (rest == 4)
        memcpy(&s->mesh.auto_axes, nul + 1, 4);
    if ((rest != 4 && rest != 0) ||
        sm_mesh_types_check(&s->mesh, s->mesh.auto_axes, "", err, sizeof err))
        return -1;
    return sm_pspec_parse((const char *)in + o, &s->spec, err, sizeof err) == SM_OK ? 0 : -1;
}

void sm_reg_save_array(sm_registry *r, const sm_reg_array *a)
{
    if (!r->db)
        return;
    unsigned char packed[SM_REG_PACK_MAX];
    size_t np = sm_reg_sharding_pack(&a->sharding, packed);
    sm_reg_tx_begin(r);
    if (sm_reg_save_counters(r) ||
        sm_reg_run(r,
                   "INSERT OR REPLACE INTO arrays(id, name, dtype, shape, mesh_id, mesh_name,"
                   " sharding, state, error, workers, sums)"
                   " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                   "itibitbitbb", (int64_t)a->id, a->name, (int64_t)a->dtype, &a->shape,
                   sizeof a->shape, (int64_t)a->mesh_id, a->mesh_name, packed, np,
                   (int64_t)a->state, a->error, a->worker, sizeof *a->worker * (size_t)a->n,
                   a->sums, sizeof *a->sums * (size_t)a->n) ||
        sm_reg_save_owner(r, SM_REG_OWNS_ARRAY, a->id, a->tenant))
        sm_reg_db_log(r, "record an array");
    sm_reg_tx_end(r);
}

void sm_reg_save_array_gone(sm_registry *r, uint64_t id)
{
    if (!r->db)
        return;
    sm_reg_tx_begin(r);
    if (sm_reg_run(r, "DELETE FROM arrays WHERE id = ?", "i", (int64_t)id) ||
        sm_reg_run(r, "DELETE FROM copies WHERE array_id = ?", "i", (int64_t)id) ||
        (r->tenants &&
         sm_reg_run(r, "DELETE FROM owners WHERE kind = 0 AND id = ?", "i", (int64_t)id)))
        sm_reg_db_log(r, "remove an array");
    sm_reg_tx_end(r);
}

static int sm_reg_save_owner(sm_registry *r, int kind, uint64_t id, const char *tenant)
{
    if (!tenant || !*tenant)
        return 0;
    return sm_reg_run(r, "INSERT OR REPLACE INTO owners(kind, id, tenant) VALUES (?, ?, ?)", "iit",
                      (int64_t)kind, (int64_t)id, tenant);
}

/* The stored tenants of arrays, meshes (and jobs), in (kind, id) order. */
typedef struct {
    int kind;
    uint64_t id;
    char tenant[SM_TENANT_MAX];
} sm_reg_owner;

static sm_err sm_reg_load_owners(sm_registry *r, sm_reg_owner **out, int *n)
{
    sqlite3_stmt *st = NULL;
    int cap = 0;
    *out = NULL;
    *n = 0;
    if (sm_reg_prepare(r, "SELECT kind, id, tenant FROM owners ORDER BY kind, id", &st))
        return SM_EIO;
    while (sqlite3_step(st) == SQLITE_ROW) {
        if (*n == cap) {
            sm_reg_owner *g = realloc(*out, sizeof *g * (size_t)(cap ? cap * 2 : 64));
            if (!g) {
                sqlite3_finalize(st);
                return SM_ENOMEM;
            }
            *out = g;
            cap = cap ? cap * 2 : 64;
        }
        const unsigned char *t = sqlite3_column_text(st, 2);
        sm_reg_owner *o = &(*out)[(*n)++];
        o->kind = sqlite3_column_int(st, 0);
        o->id = (uint64_t)sqlite3_column_int64(st, 1);
        snprintf(o->tenant, sizeof o->tenant, "%s", t ? (const char *)t : "");
    }
    sqlite3_finalize(st);
    return SM_OK;
}

/* The stored tenant of (kind, id), "" if none. */
static const char *sm_reg_owner_of(const sm_reg_owner *v, int n, int kind, uint64_t id)
{
    int lo = 0, hi = n;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (v[mid].kind < kind || (v[mid].kind == kind && v[mid].id < id))
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < n && v[lo].kind == kind && v[lo].id == id ? v[lo].tenant : "";
}

void sm_reg_save_copies(sm_registry *r, const sm_reg_array *a)
{
    if (!r->db)
        return;
    sm_reg_tx_begin(r);
    int bad = sm_reg_run(r, "DELETE FROM copies WHERE array_id = ?", "i", (int64_t)a->id);
    for (int k = 0; !bad && k < a->ncopies; k++)
        bad = sm_reg_run(
            r, "INSERT INTO copies(array_id, k, of, worker, device) VALUES (?, ?, ?, ?, ?)",
            "iiiii", (int64_t)a->id, (int64_t)k, (int64_t)a->copies[k].of,
            (int64_t)a->copies[k].worker, (int64_t)a->copies[k].device);
    if (bad)
        sm_reg_db_log(r, "record an array's copies");
    sm_reg_tx_end(r);
}

/* Gives the loaded arrays their copies (none present until their workers
 * offer them back). */
static sm_err sm_reg_load_copies(sm_registry *r)
{
    sqlite3_stmt *st = NULL;
    if (sm_reg_prepare(r, "SELECT array_id, of, worker, device FROM copies ORDER BY array_id, k",
                       &st))
        return SM_EIO;
    sm_err e = SM_OK;
    while (!e && sqlite3_step(st) == SQLITE_ROW) {
        sm_reg_array *a = sm_reg_array_find(
            r, (sm_array_ref){{(uint64_t)sqlite3_column_int64(st, 0)}, NULL}, NULL, 0);
        int of = sqlite3_column_int(st, 1);
        if (!a || of < 0 || of >= a->n || a->ncopies >= SM_MAX_DEVICES)
            continue;
        sm_reg_copy *grown = realloc(a->copies, sizeof *grown * (size_t)(a->ncopies + 1));
        if (!grown) {
            e = SM_ENOMEM;
            break;
        }
        a->copies = grown;
        a->copies[a->ncopies++] = (sm_reg_copy){of, (uint32_t)sqlite3_column_int64(st, 2),
                                                (int32_t)sqlite3_column_int(st, 3), 0};
        r->repair_hint = 1; /* made again if its worker comes back without it */
    }
    sqlite3_finalize(st);
    return e;
}

void sm_reg_save_worker(sm_registry *r, const sm_reg_worker *w)
{
    if (!r->db)
        return;
    sm_reg_tx_begin(r);
    if (sm_reg_save_counters(r) ||
        sm_reg_run(r,
                   "INSERT OR REPLACE INTO workers(id, address, host, process_index, ndevices,"
                   " first_device) VALUES (?, ?, ?, ?, ?, ?)",
                   "ittiii", (int64_t)w->id, w->address, w->host, (int64_t)w->process_index,
                   (int64_t)w->ndevices, (int64_t)w->first_device))
        sm_reg_db_log(r, "record a worker");
    sm_reg_tx_end(r);
}

void sm_reg_save_mesh(sm_registry *r, const sm_reg_mesh *m)
{
    if (!r->db)
        return;
    sm_reg_tx_begin(r);
    if (sm_reg_save_counters(r) ||
        sm_reg_run(r, "INSERT OR REPLACE INTO meshes(id, name, mesh) VALUES (?, ?, ?)", "itb",
                   (int64_t)m->id, m->name, &m->mesh, sizeof m->mesh) ||
        sm_reg_save_owner(r, SM_REG_OWNS_MESH, m->id, m->tenant))
        sm_reg_db_log(r, "record a mesh");
    sm_reg_tx_end(r);
}

/* ---- opening and loading ----------------------------------------------- */

static sm_err sm_reg_db_fail(sm_registry *r, const char *path, const char *what, char *err,
                             size_t errlen)
{
    return sm_fail(err, errlen, SM_EIO, "cannot %s the registry database %s: %s", what, path,
                   r->db ? sqlite3_errmsg(r->db) : "out of memory");
}

/* Checks the stored layout against this build's (or records it). */
static sm_err sm_reg_layout_check(sm_registry *r, const char *path, char *err, size_t errlen)
{
    sqlite3_stmt *st = NULL;
    int64_t want[4] = {SM_REG_SCHEMA, sizeof(sm_mesh), sizeof(sm_shape), sizeof(sm_sharding)};
    sm_err e = SM_OK;
    if (sm_reg_prepare(r, "SELECT schema, mesh, shape, sharding FROM layout", &st))
        return sm_reg_db_fail(r, path, "read", err, errlen);
    if (sqlite3_step(st) == SQLITE_ROW) {
        /* Schema 3 differs only in the word a mesh now keeps its axis types
         * in, which was padding: loaded as Explicit (sm_reg_load_meshes). */
        int from3 = sqlite3_column_int64(st, 0) == 3;
        for (int k = from3; k < 4 && !e; k++)
            if (sqlite3_column_int64(st, k) != want[k])
                e = sm_fail(err, errlen, SM_EPRECONDITION,
                            "the registry database %s was written by a shmap-coordinator of "
                            "another format (layout field %d is %lld, this build needs %lld); "
                            "start it with a new --state-dir",
                            path, k, (long long)sqlite3_column_int64(st, k), (long long)want[k]);
        sqlite3_finalize(st);
        if (!e && from3) {
            r->mesh_types_unset = 1;
            if (sm_reg_run(r, "UPDATE layout SET schema = ? WHERE k = 0", "i", want[0]))
                return sm_reg_db_fail(r, path, "write", err, errlen);
            SM_INFO("registry database %s: updated from schema 3 to %d (meshes' axis types, "
                    "Explicit for the meshes it holds)",
                    path, SM_REG_SCHEMA);
        }
        return e;
    }
    sqlite3_finalize(st);
    if (sm_reg_run(r, "INSERT INTO layout(k, schema, mesh, shape, sharding) VALUES (0, ?, ?, ?, ?)",
                   "iiii", want[0], want[1], want[2], want[3]))
        return sm_reg_db_fail(r, path, "write", err, errlen);
    return SM_OK;
}

static sm_err sm_reg_in_use(const char *path, char *err, size_t errlen)
{
    return sm_fail(err, errlen, SM_EPRECONDITION,
                   "the registry database %s is in use by another shmap-coordinator", path);
}

static sm_err sm_reg_integrity(sm_registry *r, const char *path, char *err, size_t errlen)
{
    sqlite3_stmt *st = NULL;
    char first[256] = "";
    int rows = 0, rc;
    if (sm_reg_prepare(r, "PRAGMA integrity_check", &st))
        return sqlite3_errcode(r->db) == SQLITE_BUSY
                   ? sm_reg_in_use(path, err, errlen)
                   : sm_fail(err, errlen, SM_EDATALOSS,
                             "the registry database %s is damaged and was not started from (%s); "
                             "move it away to start empty, or restore a copy",
                             path, sqlite3_errmsg(r->db));
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        const unsigned char *t = sqlite3_column_text(st, 0);
        if (!rows++)
            snprintf(first, sizeof first, "%s", t ? (const char *)t : "");
    }
    sqlite3_finalize(st);
    if (rc == SQLITE_BUSY)
        return sm_reg_in_use(path, err, errlen);
    if (rc != SQLITE_DONE || rows != 1 || strcmp(first, "ok"))
        return sm_fail(err, errlen, SM_EDATALOSS,
                       "the registry database %s fails its integrity check (%s); move it away "
                       "to start empty, or restore a copy",
                       path, rc != SQLITE_DONE ? sqlite3_errmsg(r->db) : first);
    return SM_OK;
}

static sm_err sm_reg_load_counters(sm_registry *r)
{
    sqlite3_stmt *st = NULL;
    if (sm_reg_prepare(r, "SELECT next_worker, next_device, next_mesh, next_array FROM counters",
                       &st))
        return SM_EIO;
    if (sqlite3_step(st) == SQLITE_ROW) {
        r->next_worker = (uint32_t)sqlite3_column_int64(st, 0);
        r->next_device = (int32_t)sqlite3_column_int64(st, 1);
        r->next_mesh = (uint64_t)sqlite3_column_int64(st, 2);
        r->next_array = (uint64_t)sqlite3_column_int64(st, 3);
    }
    sqlite3_finalize(st);
    return SM_OK;
}

static sm_err sm_reg_load_workers(sm_registry *r, int64_t now_ms)
{
    sqlite3_stmt *st = NULL;
    sm_err e = SM_OK;
    if (sm_reg_prepare(r,
                       "SELECT id, address, host, process_index, ndevices, first_device"
                       " FROM workers ORDER BY id",
                       &st))
        return SM_EIO;
    while (!e && sqlite3_step(st) == SQLITE_ROW) {
        sm_reg_worker *w = calloc(1, sizeof *w);
        if (!w || sm_reg_vec_push((void ***)&r->workers, &r->nworkers, &r->capworkers, w)) {
            free(w);
            e = SM_ENOMEM;
            break;
        }
        const unsigned char *addr = sqlite3_column_text(st, 1), *host = sqlite3_column_text(st, 2);
        w->id = (uint32_t)sqlite3_column_int64(st, 0);
        snprintf(w->address, sizeof w->address, "%s", addr ? (const char *)addr : "");
        snprintf(w->host, sizeof w->host, "%s", host ? (const char *)host : "");
        w->process_index = sqlite3_column_int(st, 3);
        w->ndevices = sqlite3_column_int(st, 4);
        w->first_device = sqlite3_column_int(st, 5);
        w->last_seen = now_ms;
        if (w->ndevices < 1 || w->ndevices > SM_MAX_WORKER_DEVICES)
            w->ndevices = 1;
        if (w->id >= r->next_worker)
            r->next_worker = w->id + 1;
        if (w->first_device + w->ndevices > r->next_device)
            r->next_device = w->first_device + w->ndevices;
    }
    sqlite3_finalize(st);
    return e;
}

static sm_err sm_reg_load_meshes(sm_registry *r, const sm_reg_owner *own, int nown)
{
    sqlite3_stmt *st = NULL;
    sm_err e = SM_OK;
    if (sm_reg_prepare(r, "SELECT id, name, mesh FROM meshes ORDER BY id", &st))
        return SM_EIO;
    while (!e && sqlite3_step(st) == SQLITE_ROW) {
        if (sqlite3_column_bytes(st, 2) != (int)sizeof(sm_mesh))
            continue;
        sm_reg_mesh *m = calloc(1, sizeof *m);
        if (!m || sm_reg_vec_push((void ***)&r->meshes, &r->nmeshes, &r->capmeshes, m)) {
            free(m);
            e = SM_ENOMEM;
            break;
        }
        const unsigned char *name = sqlite3_column_text(st, 1);
        m->id = (uint64_t)sqlite3_column_int64(st, 0);
        snprintf(m->name, sizeof m->name, "%s", name ? (const char *)name : "");
        snprintf(m->tenant, sizeof m->tenant, "%s",
                 sm_reg_owner_of(own, nown, SM_REG_OWNS_MESH, m->id));
        memcpy(&m->mesh, sqlite3_column_blob(st, 2), sizeof m->mesh);
        if (r->mesh_types_unset) { /* stored by schema 3: that word was padding */
            m->mesh.auto_axes = 0;
            sm_reg_save_mesh(r, m);
        }
        if (m->id >= r->next_mesh)
            r->next_mesh = m->id + 1;
    }
    sqlite3_finalize(st);
    return e;
}

/* One stored array back as a record; NULL (logged) when the row is bad. */
static sm_reg_array *sm_reg_load_array(sm_registry *r, sqlite3_stmt *st, int64_t now_ms)
{
    char err[512];
    sm_shape shape;
    sm_sharding s;
    sm_reg_mesh rm = {0};
    sm_reg_array *a = NULL;
    uint64_t id = (uint64_t)sqlite3_column_int64(st, 0);
    if (sqlite3_column_bytes(st, 3) != (int)sizeof shape ||
        sm_reg_sharding_unpack(sqlite3_column_blob(st, 6), (size_t)sqlite3_column_bytes(st, 6),
                               &s)) {
        SM_ERROR("array %llu in the registry database has a bad record; skipped",
                 (unsigned long long)id);
        return NULL;
    }
    memcpy(&shape, sqlite3_column_blob(st, 3), sizeof shape);
    const unsigned char *name = sqlite3_column_text(st, 1), *mname = sqlite3_column_text(st, 5),
                        *error = sqlite3_column_text(st, 8);
    rm.id = (uint64_t)sqlite3_column_int64(st, 4);
    snprintf(rm.name, sizeof rm.name, "%s", mname ? (const char *)mname : "");
    int bytes = sqlite3_column_bytes(st, 9);
    if (s.mesh.ndevices < 1 || s.mesh.ndevices > SM_MAX_DEVICES ||
        bytes != (int)sizeof(uint32_t) * s.mesh.ndevices) {
        SM_ERROR("array %llu in the registry database has a bad device list; skipped",
                 (unsigned long long)id);
        return NULL;
    }
    if (sm_reg_array_new(r, name ? (const char *)name : "", (sm_dtype)sqlite3_column_int(st, 2), &s,
                         &rm, &shape, sqlite3_column_blob(st, 9), now_ms, 0, &a, err, sizeof err)) {
        SM_ERROR("array %llu in the registry database does not load: %s", (unsigned long long)id,
                 err);
        return NULL;
    }
    a->id = id;
    if (sqlite3_column_bytes(st, 10) == (int)sizeof *a->sums * a->n)
        memcpy(a->sums, sqlite3_column_blob(st, 10), sizeof *a->sums * (size_t)a->n);
    a->state = (sm_array_state)sqlite3_column_int(st, 7);
    sm_reg_array_set_error(a, error ? (const char *)error : "");
    return a;
}

static sm_err sm_reg_load_arrays(sm_registry *r, int64_t now_ms, const sm_reg_owner *own, int nown)
{
    sqlite3_stmt *st = NULL;
    sm_err e = SM_OK;
    char err[256];
    if (sm_reg_prepare(r,
                       "SELECT id, name, dtype, shape, mesh_id, mesh_name, sharding, state,"
                       " error, workers, sums FROM arrays ORDER BY id",
                       &st))
        return SM_EIO;
    uint64_t next = r->next_array;
    while (!e && sqlite3_step(st) == SQLITE_ROW) {
        sm_reg_array *a = sm_reg_load_array(r, st, now_ms);
        if (!a)
            continue;
        char label[SM_NAME_MAX + 16], msg[1024];
        sm_reg_array_label(a, label, sizeof label);
        /* Nothing is known to be held until the workers offer it back. */
        if (a->state == SM_ARRAY_READY || a->state == SM_ARRAY_LOST ||
            a->state == SM_ARRAY_DEGRADED) {
            snprintf(msg, sizeof msg,
                     "%s waits for its workers to register again after the coordinator "
                     "restarted",
                     label);
            a->state = SM_ARRAY_LOST;
            sm_reg_array_set_error(a, msg);
        } else if (a->state == SM_ARRAY_PENDING) {
            snprintf(msg, sizeof msg,
                     "%s failed: the coordinator restarted before all of its "
                     "data arrived",
                     label);
            a->state = SM_ARRAY_FAILED;
            sm_reg_array_set_error(a, msg);
        }
        uint64_t keep = a->id;
        r->next_array = keep; /* sm_reg_array_insert hands out next_array */
        snprintf(a->tenant, sizeof a->tenant, "%s",
                 sm_reg_owner_of(own, nown, SM_REG_OWNS_ARRAY, a->id));
        sm_tenant_set(a->tenant); /* names are unique per tenant */
        if (a->name[0] && sm_reg_array_find(r, (sm_array_ref){{0}, a->name}, NULL, 0))
            a->name[0] = 0;
        sm_tenant_set(NULL);
        if (sm_reg_array_insert(r, a, err, sizeof err)) {
            sm_reg_array_destroy(a);
            e = SM_ENOMEM;
        }
        if (keep + 1 > next)
            next = keep + 1;
    }
    sqlite3_finalize(st);
    r->next_array = next;
    return e;
}

sm_err sm_registry_open_state(sm_registry *r, const char *dir, char *err, size_t errlen)
{
    char path[4200];
    sm_err e;
    if (mkdir(dir, 0700) != 0 && errno != EEXIST)
        return sm_fail(err, errlen, SM_EIO, "cannot create the state dir %s: %s", dir,
                       strerror(errno));
    snprintf(path, sizeof path, "%s/registry.db", dir);
    if (sqlite3_open_v2(path, &r->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL) !=
        SQLITE_OK) {
        e = sm_reg_db_fail(r, path, "open", err, errlen);
        goto fail;
    }
    sqlite3_busy_timeout(r->db, 2000);
    if ((e = sm_reg_integrity(r, path, err, errlen)))
        goto fail;
    /* One coordinator per state dir: the exclusive lock is taken by the
     * first write below and kept until the database is closed. */
    if (sm_reg_exec(r, "PRAGMA locking_mode = EXCLUSIVE") ||
        sm_reg_exec(r, "PRAGMA journal_mode = WAL") ||
        sm_reg_exec(r, "PRAGMA synchronous = NORMAL") || sm_reg_run(r, "BEGIN IMMEDIATE", "")) {
        e = sqlite3_errcode(r->db) == SQLITE_BUSY ? sm_reg_in_use(path, err, errlen)
                                                  : sm_reg_db_fail(r, path, "set up", err, errlen);
        goto fail;
    }
    r->tx_depth = 1; /* every write below joins this transaction */
    if (sm_reg_exec(r, sm_reg_schema)) {
        e = sm_reg_db_fail(r, path, "create the tables of", err, errlen);
        goto fail;
    }
    if ((e = sm_reg_layout_check(r, path, err, errlen)))
        goto fail;
    int64_t now = sm_time_mono_ms();
    sm_reg_owner *own = NULL;
    int nown = 0;
    pthread_mutex_lock(&r->mu);
    e = sm_reg_load_counters(r);
    if (!e)
        e = sm_reg_load_workers(r, now);
    if (!e)
        e = sm_reg_load_owners(r, &own, &nown);
    if (!e)
        e = sm_reg_load_meshes(r, own, nown);
    if (!e)
        e = sm_reg_load_arrays(r, now, own, nown);
    free(own);
    if (!e)
        e = sm_reg_load_copies(r);
    /* The arrays were written back as they were listed (their new states);
     * the counters too. */
    if (!e && sm_reg_save_counters(r))
        e = SM_EIO;
    pthread_mutex_unlock(&r->mu);
    if (e || r->tx_failed) {
        e = e == SM_ENOMEM ? sm_fail(err, errlen, SM_ENOMEM, "out of memory loading %s", path)
                           : sm_reg_db_fail(r, path, "load", err, errlen);
        goto fail;
    }
    r->tx_depth = 0;
    if (sm_reg_run(r, "COMMIT", "")) {
        e = sm_reg_db_fail(r, path, "write", err, errlen);
        goto fail;
    }
    sqlite3_wal_hook(r->db, sm_reg_wal_hook, r); /* in place of SQLite's own checkpoints */
    SM_INFO("registry state in %s: %d workers, %d meshes, %d arrays known from before; next "
            "array id %llu",
            path, r->nworkers, r->nmeshes, r->narrays, (unsigned long long)r->next_array);
    return SM_OK;
fail:
    r->tx_depth = 0;
    sm_reg_stmts_free(r);
    sqlite3_close(r->db);
    r->db = NULL;
    return e;
}

void sm_registry_close_state(sm_registry *r)
{
    if (r && r->db) {
        sm_reg_stmts_free(r);
        sqlite3_close(r->db);
        r->db = NULL;
    }
}

/* ---- jobs' records --------------------------------------------------------- */

/* Records kept in the database beyond the newest id; older ones are
 * dropped when the jobs are restored. */
#define SM_REG_JOBS_KEPT 100000

void sm_reg_job_save_locked(sm_registry *r, uint64_t id, int state, const char *error,
                            const char *tenant)
{
    if (r->db) {
        sm_reg_tx_begin(r);
        int bad = sm_reg_run(r, "INSERT OR REPLACE INTO jobs(id, state, error) VALUES (?, ?, ?)",
                             "iit", (int64_t)id, (int64_t)state, error ? error : "") ||
                  sm_reg_save_owner(r, SM_REG_OWNS_JOB, id, tenant);
        if (!bad && id + 1 > r->saved_job_hw) { /* a block of job ids ahead, as the others */
            bad = sm_reg_run(
                r, "UPDATE counters SET next_job = MAX(COALESCE(next_job, 1), ?) WHERE k = 0", "i",
                (int64_t)(id + 1 + SM_REG_ID_BLOCK));
            if (!bad)
                r->saved_job_hw = id + 1 + SM_REG_ID_BLOCK;
        }
        if (bad)
            sm_reg_db_log(r, "record a job");
        sm_reg_tx_end(r);
    }
}

int sm_registry_job_id_kept(sm_registry *r, uint64_t id)
{
    pthread_mutex_lock(&r->mu);
    int kept = !r->db || id + 1 <= r->saved_job_hw;
    pthread_mutex_unlock(&r->mu);
    return kept;
}

void sm_registry_job_save(sm_registry *r, uint64_t id, int state, const char *error,
                          const char *tenant)
{
    pthread_mutex_lock(&r->mu);
    sm_reg_job_save_locked(r, id, state, error, tenant);
    pthread_mutex_unlock(&r->mu);
}

sm_err sm_registry_jobs_restore(sm_registry *r, uint64_t *last_id, sm_reg_job **out, int *n,
                                char *err, size_t errlen)
{
    sqlite3_stmt *st = NULL;
    sm_err e = SM_OK;
    int cap = 0;
    *last_id = 0;
    *out = NULL;
    *n = 0;
    pthread_mutex_lock(&r->mu);
    if (!r->db)
        goto out;
    if (!sm_reg_prepare(r, "SELECT COALESCE(next_job, 1) FROM counters", &st)) {
        if (sqlite3_step(st) == SQLITE_ROW && sqlite3_column_int64(st, 0) > 1)
            *last_id = (uint64_t)sqlite3_column_int64(st, 0) - 1;
        sqlite3_finalize(st);
    }
    if (*last_id > SM_REG_JOBS_KEPT &&
        (sm_reg_run(r, "DELETE FROM jobs WHERE id <= ?", "i",
                    (int64_t)(*last_id - SM_REG_JOBS_KEPT)) ||
         sm_reg_run(r, "DELETE FROM owners WHERE kind = 2 AND id <= ?", "i",
                    (int64_t)(*last_id - SM_REG_JOBS_KEPT))))
        sm_reg_db_log(r, "drop old jobs' records");
    if (sm_reg_prepare(r,
                       "SELECT j.id, j.state, j.error, o.tenant FROM jobs j LEFT JOIN owners o"
                       " ON o.kind = 2 AND o.id = j.id ORDER BY j.id",
                       &st)) {
        e = sm_fail(err, errlen, SM_EIO, "cannot read jobs' records: %s", sqlite3_errmsg(r->db));
        goto out;
    }
    while (sqlite3_step(st) == SQLITE_ROW) {
        if (*n == cap) {
            int nc = cap ? 2 * cap : 16;
            sm_reg_job *v = realloc(*out, sizeof *v * (size_t)nc);
            if (!v) {
                e = sm_fail(err, errlen, SM_ENOMEM, "out of memory reading jobs' records");
                break;
            }
            *out = v;
            cap = nc;
        }
        sm_reg_job *jr = &(*out)[(*n)++];
        const unsigned char *t = sqlite3_column_text(st, 2);
        const unsigned char *tn = sqlite3_column_text(st, 3);
        jr->id = (uint64_t)sqlite3_column_int64(st, 0);
        jr->state = sqlite3_column_int(st, 1);
        snprintf(jr->error, sizeof jr->error, "%s", t ? (const char *)t : "");
        snprintf(jr->tenant, sizeof jr->tenant, "%s", tn ? (const char *)tn : "");
        if (jr->id > *last_id)
            *last_id = jr->id;
    }
    sqlite3_finalize(st);
out:
    if (e) {
        free(*out);
        *out = NULL;
        *n = 0;
    }
    pthread_mutex_unlock(&r->mu);
    return e;
}
