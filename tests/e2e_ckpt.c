/* e2e_ckpt: checkpoints through real clusters (coordinator + worker
 * processes on loopback, real files in a temp dir): an array saved on mesh
 * (4, 2) by 2 workers loads bit-exact onto (8,), (2, 2, 2) and a 1-worker
 * cluster; replicated shardings save each distinct shard once; the files
 * are plain .npy files a reader of the manifest can open by hand; damaged
 * checkpoints (truncated, corrupted, missing file, missing or malformed
 * manifest, a save that failed or was cut short by kill -9) are refused
 * with DATA_LOSS naming the file and leave nothing behind; a worker reads
 * and checks only the chunks of a file its devices need; shmapctl save
 * and load. */
#include <check.h>
#include <jansson.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"
#include "suite_main.h"

/* Clusters shared by the suite: 2 workers x 4 devices and 1 worker x 8. */
static harness_cluster *g_two, *g_one;
static char *g_tmp;

static void clusters_up(void)
{
    g_two = harness_cluster_up(2, 4, "e2e_ckpt");
    g_one = harness_cluster_up(1, 8, "e2e_ckpt");
    /* only the cluster's credential may name checkpoint directories */
    harness_use_cluster_credential(g_two);
    harness_use_cluster_credential(g_one);
    g_tmp = harness_tmpdir();
}

static void clusters_down(void)
{
    harness_cluster_stop(g_two);
    harness_cluster_stop(g_one);
    harness_rmdir(g_tmp);
    g_two = g_one = NULL;
    g_tmp = NULL;
}

/* A fresh path under the suite's temp dir (not created). */
static const char *ckpt_path(const char *name)
{
    static char buf[8][600];
    static int next;
    char *p = buf[next++ % 8];
    snprintf(p, sizeof buf[0], "%s/%s", g_tmp, name);
    return p;
}

/* Loads dir with (axes, spec) as name, checks it is x bit-exact and that
 * it has the sharding asked for, deletes it. */
static void load_check(sm_client *c, const char *dir, const sm_array *x, const char *axes,
                       const char *spec, const char *name)
{
    sm_mesh mesh;
    sm_sharding_ref sh = harness_sharding(&mesh, axes, NULL, 0, spec);
    sm_array_info info;
    char err[512];
    sm_err e = sm_client_load(c, dir, &sh, name, &info, err, sizeof err);
    ck_assert_msg(e == SM_OK, "load %s onto %s %s: %s", dir, axes, spec, err);
    ck_assert_int_eq(info.state, SM_ARRAY_READY);
    ck_assert(sm_pspec_equal(&info.sharding.spec, &sh.spec));
    ck_assert_int_eq(info.sharding.mesh.ndevices, mesh.ndevices);
    if (name)
        ck_assert_str_eq(info.name, name);
    harness_assert_get_delete(c, &info, x);
}

/* Loads dir expecting failure code want with `needle` in the sentence. */
static void load_fails(sm_client *c, const char *dir, sm_err want, const char *needle,
                       const char *name)
{
    sm_mesh mesh;
    sm_sharding_ref sh = harness_sharding(&mesh, "i=8", NULL, 0, "P('i')");
    sm_array_info info;
    char err[512] = "";
    memset(&info, 0, sizeof info);
    sm_err e = sm_client_load(c, dir, &sh, name, &info, err, sizeof err);
    ck_assert_msg(e == want, "load %s: %s (%s), want %s", dir, sm_err_name(e), err,
                  sm_err_name(want));
    ck_assert_msg(strstr(err, needle), "load %s: '%s' does not name '%s'", dir, err, needle);
    sm_array_info_free(&info);
    if (name) { /* a failed load leaves no array behind */
        ck_assert_int_eq(sm_client_describe(c, (sm_array_ref){{0}, name}, &info, err, sizeof err),
                         SM_ENOTFOUND);
    }
}

static json_t *manifest_load(const char *dir)
{
    char path[700];
    json_error_t je;
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    json_t *m = json_load_file(path, 0, &je);
    ck_assert_msg(m != NULL, "%s: %s", path, je.text);
    return m;
}

/* Reads the checkpoint as a numpy user would: for each manifest entry,
 * the .npy file holds exactly x's slice at its index. Returns the number
 * of .npy files. */
static int check_by_hand(const char *dir, const sm_array *x)
{
    json_t *m = manifest_load(dir);
    json_t *shards = json_object_get(m, "shards");
    size_t elem = sm_dtype_size(x->dtype);
    char err[512];
    ck_assert_str_eq(json_string_value(json_object_get(m, "format")), "shmap-checkpoint");
    ck_assert_str_eq(json_string_value(json_object_get(m, "dtype")), sm_dtype_long_name(x->dtype));
    for (size_t k = 0; k < json_array_size(shards); k++) {
        json_t *s = json_array_get(shards, k), *ix = json_object_get(s, "index");
        char path[700];
        sm_array *a = NULL;
        int64_t off[SM_MAX_RANK], ext[SM_MAX_RANK], zero[SM_MAX_RANK] = {0};
        snprintf(path, sizeof path, "%s/%s", dir, json_string_value(json_object_get(s, "file")));
        ck_assert_msg(sm_npy_read(path, &a, err, sizeof err) == SM_OK, "%s", err);
        struct stat st;
        ck_assert_int_eq(stat(path, &st), 0);
        ck_assert_int_eq(st.st_size, json_integer_value(json_object_get(s, "bytes")));
        sm_array *want = NULL;
        ck_assert_int_eq(sm_array_create(x->dtype, &a->shape, &want, err, sizeof err), SM_OK);
        for (int d = 0; d < x->shape.rank; d++) {
            off[d] = json_integer_value(json_array_get(json_array_get(ix, (size_t)d), 0));
            ext[d] = json_integer_value(json_array_get(json_array_get(ix, (size_t)d), 1)) - off[d];
            ck_assert_int_eq(ext[d], a->shape.dims[d]);
        }
        ck_assert_int_eq(sm_block_copy(want->data, &want->shape, zero, x->data, &x->shape, off, ext,
                                       elem, err, sizeof err),
                         SM_OK);
        ck_assert_msg(memcmp(want->data, a->data, (size_t)a->nbytes) == 0,
                      "%s is not the slice its manifest entry names", path);
        sm_array_free(a);
        sm_array_free(want);
    }
    int n = (int)json_array_size(shards);
    json_decref(m);
    return n;
}

static void save_ok(sm_client *c, sm_array_ref ref, const char *dir, int want_files)
{
    char err[512];
    int64_t bytes = 0;
    int files = 0;
    sm_err e = sm_client_save(c, ref, dir, &bytes, &files, err, sizeof err);
    ck_assert_msg(e == SM_OK, "save into %s: %s", dir, err);
    ck_assert_int_eq(files, want_files);
    ck_assert_int_gt(bytes, 0);
}

/* Puts x on mesh x=4,y=2 with spec as name (NULL: none) and saves it, by
 * name or id, into dir (save_ok: want_files files); returns its id. */
static sm_array_id put_saved(sm_client *c, const sm_array *x, const char *spec, const char *name,
                             const char *dir, int want_files)
{
    sm_array_id id = harness_put(c, x, "x=4,y=2", spec, name);
    save_ok(c, name ? (sm_array_ref){{0}, name} : harness_id_ref(id), dir, want_files);
    return id;
}

/* Saved on (4, 2) by 2 workers, loaded onto other meshes, specs and the
 * 1-worker cluster, bit-exact each time. */
START_TEST(save_load_any_sharding)
{
    sm_shape s = HARNESS_SHAPE(64, 96);
    sm_array *x = harness_array_iota(SM_F32, &s, 7);
    sm_client *c = harness_client(g_two), *c1 = harness_client(g_one);
    const char *dir = ckpt_path("grid");
    put_saved(c, x, "P('x', 'y')", "grid", dir, 8);
    ck_assert_int_eq(check_by_hand(dir, x), 8);
    load_check(c, dir, x, "i=8", "P('i')", "rows");
    load_check(c, dir, x, "i=8", "P(None, 'i')", NULL);
    load_check(c, dir, x, "a=2,b=2,c=2", "P('a', ('b', 'c'))", NULL);
    load_check(c, dir, x, "a=2,b=2,c=2", "P(('c', 'a'), 'b')", NULL);
    load_check(c, dir, x, "x=4,y=2", "P('x', 'y')", "same"); /* the saved sharding */
    load_check(c, dir, x, "x=4,y=2", "P()", NULL);           /* replicated everywhere */
    load_check(c1, dir, x, "i=8", "P('i')", "one_worker");
    load_check(c1, dir, x, "i=2,j=4", "P('j', 'i')", NULL);
    load_check(c1, dir, x, "i=3", "P(None, 'i')", NULL); /* 3 devices of 8, 96 = 3 x 32 */
    sm_client_close(c);
    sm_client_close(c1);
    sm_array_free(x);
}
END_TEST

/* Replicated and partly replicated shardings write each distinct shard
 * once. */
START_TEST(replicated_written_once)
{
    static const struct {
        const char *spec;
        int files;
    } rows[] = {{"P()", 1}, {"P('x', None)", 4}, {"P(None, 'y')", 2}};
    sm_shape s = HARNESS_SHAPE(32, 16);
    sm_array *x = harness_array_iota(SM_I32, &s, 11);
    sm_client *c = harness_client(g_two);
    char name[32], err[512];
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        snprintf(name, sizeof name, "rep%zu", i);
        const char *dir = ckpt_path(name);
        sm_array_id id = put_saved(c, x, rows[i].spec, NULL, dir, rows[i].files);
        ck_assert_int_eq(check_by_hand(dir, x), rows[i].files);
        json_t *m = manifest_load(dir);
        json_t *sh = json_object_get(m, "shards");
        int devices = 0; /* every device is listed with the shard it held */
        for (size_t k = 0; k < json_array_size(sh); k++)
            devices += (int)json_array_size(json_object_get(json_array_get(sh, k), "devices"));
        ck_assert_int_eq(devices, 8);
        ck_assert_str_eq(json_string_value(json_object_get(m, "spec")), rows[i].spec);
        json_decref(m);
        load_check(c, dir, x, "i=8", "P('i')", NULL);
        load_check(c, dir, x, "x=4,y=2", rows[i].spec, NULL);
        ck_assert_int_eq(sm_client_delete(c, harness_id_ref(id), err, sizeof err), SM_OK);
    }
    sm_client_close(c);
    sm_array_free(x);
}
END_TEST

/* Every dtype a .npy file can hold round-trips. */
START_TEST(dtypes)
{
    static const sm_dtype ts[] = {SM_F64, SM_I64, SM_U8, SM_BOOL, SM_F16};
    sm_dtype t = ts[_i];
    sm_shape s = HARNESS_SHAPE(16, 8);
    sm_array *x = harness_array_iota(t, &s, 100 + (uint64_t)_i);
    sm_client *c = harness_client(g_two);
    char name[32];
    snprintf(name, sizeof name, "dtype_%s", sm_dtype_name(t));
    const char *dir = ckpt_path(name);
    put_saved(c, x, "P('x', 'y')", name, dir, 8);
    load_check(c, dir, x, "a=2,b=2,c=2", "P('c', ('a', 'b'))", NULL);
    sm_client_close(c);
    sm_array_free(x);
}
END_TEST

/* Loading under another name; names stay unique; the source stays. */
START_TEST(load_names)
{
    sm_shape s = HARNESS_SHAPE(8, 8);
    sm_array *x = harness_array_iota(SM_F32, &s, 3);
    sm_client *c = harness_client(g_two);
    sm_mesh mesh;
    sm_sharding_ref sh = harness_sharding(&mesh, "i=8", NULL, 0, "P('i')");
    sm_array_info info;
    char err[512];
    const char *dir = ckpt_path("names");
    put_saved(c, x, "P('x', 'y')", "named_src", dir, 8);
    ck_assert_int_eq(sm_client_load(c, dir, &sh, "named_copy", &info, err, sizeof err), SM_OK);
    ck_assert_str_eq(info.name, "named_copy");
    sm_array_info_free(&info);
    ck_assert_int_eq(sm_client_load(c, dir, &sh, "named_src", &info, err, sizeof err), SM_EEXIST);
    ck_assert_msg(strstr(err, "named_src"), "%s", err);
    ck_assert_int_eq(
        sm_client_describe(c, (sm_array_ref){{0}, "named_src"}, &info, err, sizeof err), SM_OK);
    ck_assert_int_eq(info.sharding.mesh.naxes, 2);
    sm_array_info_free(&info);
    harness_assert_get(c, (sm_array_ref){{0}, "named_copy"}, x);
    sm_client_close(c);
    sm_array_free(x);
}
END_TEST

/* Copies src's files into a new checkpoint dir dst (to damage one copy). */
static void copy_dir(const char *src, const char *dst)
{
    char cmd[1600];
    snprintf(cmd, sizeof cmd, "cp -r '%s' '%s'", src, dst);
    ck_assert_int_eq(system(cmd), 0);
}

/* A copy of the checkpoint good, as name (to damage), whose file file's
 * path goes into path (700 bytes); returns the copy's directory. */
static const char *damaged_copy(const char *good, const char *name, const char *file, char *path)
{
    const char *dir = ckpt_path(name);
    copy_dir(good, dir);
    snprintf(path, 700, "%s/%s", dir, file);
    return dir;
}

/* A damaged checkpoint is refused with DATA_LOSS naming the file. */
START_TEST(damaged_refused)
{
    sm_shape s = HARNESS_SHAPE(64, 64);
    sm_array *x = harness_array_iota(SM_F32, &s, 5);
    sm_client *c = harness_client(g_two);
    char path[700];
    const char *good = ckpt_path("good");
    put_saved(c, x, "P('x', 'y')", "damage_src", good, 8);

    /* a file cut short */
    const char *trunc = damaged_copy(good, "truncated", "shard-00005.npy", path);
    ck_assert_int_eq(truncate(path, 1000), 0);
    load_fails(c, trunc, SM_EDATALOSS, "shard-00005.npy is truncated", "from_trunc");

    /* one data byte changed */
    const char *flip = damaged_copy(good, "corrupted", "shard-00002.npy", path);
    FILE *f = fopen(path, "r+b");
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(fseek(f, 1000, SEEK_SET), 0);
    int b = fgetc(f);
    ck_assert_int_eq(fseek(f, 1000, SEEK_SET), 0);
    fputc(b ^ 0x40, f);
    fclose(f);
    load_fails(c, flip, SM_EDATALOSS, "shard-00002.npy is corrupted", "from_flip");

    /* a shard file deleted */
    const char *gone = damaged_copy(good, "file_missing", "shard-00007.npy", path);
    ck_assert_int_eq(unlink(path), 0);
    load_fails(c, gone, SM_EDATALOSS, "shard-00007.npy", "from_gone");

    /* the manifest deleted */
    const char *nomf = damaged_copy(good, "no_manifest", "manifest.json", path);
    ck_assert_int_eq(unlink(path), 0);
    load_fails(c, nomf, SM_EDATALOSS, "manifest.json is missing", "from_nomf");

    /* the manifest cut in half */
    const char *badmf = damaged_copy(good, "bad_manifest", "manifest.json", path);
    ck_assert_int_eq(truncate(path, 300), 0);
    load_fails(c, badmf, SM_EDATALOSS, "manifest.json is malformed", "from_badmf");

    /* a manifest entry dropped */
    const char *hole = damaged_copy(good, "hole", "manifest.json", path);
    json_t *m = manifest_load(hole);
    json_array_remove(json_object_get(m, "shards"), 3);
    ck_assert_int_eq(json_dump_file(m, path, 0), 0);
    json_decref(m);
    load_fails(c, hole, SM_EDATALOSS, "of the 4096 elements", NULL);

    load_fails(c, ckpt_path("never_saved"), SM_ENOTFOUND, "never_saved", NULL);
    /* the good copy still loads, under a name a failed load did not take */
    load_check(c, good, x, "i=8", "P('i')", "from_trunc");
    sm_client_close(c);
    sm_array_free(x);
}
END_TEST

/* A save that fails part way leaves no manifest, so the directory never
 * loads; a directory holding a checkpoint is not overwritten. */
START_TEST(interrupted_save_incomplete)
{
    sm_shape s = HARNESS_SHAPE(16, 16);
    sm_array *x = harness_array_iota(SM_F32, &s, 9);
    sm_client *c = harness_client(g_two);
    char path[700], err[512];
    const char *dir = ckpt_path("interrupted");
    sm_array_id id = harness_put(c, x, "x=4,y=2", "P('x', 'y')", NULL);
    /* a directory where one worker's temporary file must go: its write fails */
    snprintf(path, sizeof path, "%s/shard-00006.npy.tmp", dir);
    ck_assert_int_eq(mkdir(dir, 0755), 0);
    ck_assert_int_eq(mkdir(path, 0755), 0);
    sm_err e = sm_client_save(c, harness_id_ref(id), dir, NULL, NULL, err, sizeof err);
    ck_assert_msg(e == SM_EPRECONDITION && strstr(err, "shard-00006.npy.tmp"), "%s: %s",
                  sm_err_name(e), err);
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    ck_assert_int_ne(access(path, F_OK), 0);
    load_fails(c, dir, SM_EDATALOSS, "manifest.json is missing", NULL);

    const char *done = ckpt_path("done");
    save_ok(c, harness_id_ref(id), done, 8);
    e = sm_client_save(c, harness_id_ref(id), done, NULL, NULL, err, sizeof err);
    ck_assert_msg(e == SM_EEXIST && strstr(err, "already holds a checkpoint"), "%s", err);
    load_check(c, done, x, "i=4", "P(None, 'i')", NULL);

    ck_assert_int_eq(sm_client_save(c, (sm_array_ref){{0}, "no_such_array"}, ckpt_path("x"), NULL,
                                    NULL, err, sizeof err),
                     SM_ENOTFOUND);
    /* bf16 has no numpy dtype: refused before anything is written */
    sm_array *h = harness_array_iota(SM_BF16, &s, 1);
    sm_array_id hid = harness_put(c, h, "x=4,y=2", "P('x', 'y')", NULL);
    const char *bf = ckpt_path("bf16");
    e = sm_client_save(c, harness_id_ref(hid), bf, NULL, NULL, err, sizeof err);
    ck_assert_msg(e == SM_EUNIMPLEMENTED && strstr(err, "bf16"), "%s: %s", sm_err_name(e), err);
    ck_assert_int_ne(access(bf, F_OK), 0);
    sm_array_free(h);
    sm_client_close(c);
    sm_array_free(x);
}
END_TEST

/* "worker N at" of the worker holding device d. */
static void worker_of(sm_client *c, int32_t d, char *buf, size_t len)
{
    int n = 0;
    buf[0] = 0;
    sm_worker_info *w = harness_workers(c, &n);
    for (int i = 0; i < n; i++)
        for (int k = 0; k < w[i].ndevices; k++)
            if (w[i].devices[k] == d)
                snprintf(buf, len, "worker %u at", w[i].id.v);
    free(w);
    ck_assert_msg(buf[0], "no worker holds device %d", (int)d);
}

/* Flips one byte of path at offset off. */
static void flip_byte(const char *path, long off)
{
    FILE *f = fopen(path, "r+b");
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(fseek(f, off, SEEK_SET), 0);
    int b = fgetc(f);
    ck_assert_int_eq(fseek(f, off, SEEK_SET), 0);
    fputc(b ^ 0x10, f);
    fclose(f);
}

/* A file is checked (and read) in chunks: a worker reads only the chunks
 * holding the rows its devices need. One 16 MiB file (a replicated array),
 * 5 chunks of 4 MiB; mesh (2,) over device 0 (worker A) and device 4
 * (worker B): A needs the first half of the rows, B the second. A damaged
 * byte in chunk 3 trips B alone, one in chunk 0 A alone. */
START_TEST(chunks_read_where_needed)
{
    sm_shape s = HARNESS_SHAPE(2048, 2048);
    sm_array *x = harness_array_iota(SM_F32, &s, 21);
    sm_client *c = harness_client(g_two);
    const int32_t devs[] = {0, 4};
    char path[700], wa[64], wb[64], err[512];
    const char *dir = ckpt_path("chunks");
    sm_array_id id = put_saved(c, x, "P()", NULL, dir, 1);
    json_t *m = manifest_load(dir);
    json_t *e = json_array_get(json_object_get(m, "shards"), 0);
    ck_assert_int_eq(json_integer_value(json_object_get(e, "chunk_bytes")), 4 << 20);
    ck_assert_int_eq(json_array_size(json_object_get(e, "chunk_xxh3_64")), 5);
    json_decref(m);
    sm_mesh mesh;
    sm_sharding_ref sh = harness_sharding(&mesh, "i=2", devs, 2, "P('i')");
    sm_array_info info;
    ck_assert_int_eq(sm_client_load(c, dir, &sh, NULL, &info, err, sizeof err), SM_OK);
    harness_assert_get_delete(c, &info, x);
    load_check(c, dir, x, "a=2,b=2,c=2", "P('a', ('b', 'c'))", NULL);

    worker_of(c, 0, wa, sizeof wa);
    worker_of(c, 4, wb, sizeof wb);
    snprintf(path, sizeof path, "%s/shard-00000.npy", dir);
    flip_byte(path, (3L << 22) + 12345); /* chunk 3: rows of B only */
    memset(&info, 0, sizeof info);
    sm_err r = sm_client_load(c, dir, &sh, NULL, &info, err, sizeof err);
    ck_assert_msg(r == SM_EDATALOSS && strstr(err, wb) && !strstr(err, wa) &&
                      strstr(err, "bytes [12582912, 16777216)"),
                  "%s: %s", sm_err_name(r), err);
    flip_byte(path, (3L << 22) + 12345); /* repaired */
    flip_byte(path, 5000);               /* chunk 0: rows of A only */
    r = sm_client_load(c, dir, &sh, NULL, &info, err, sizeof err);
    ck_assert_msg(r == SM_EDATALOSS && strstr(err, wa) && !strstr(err, wb) &&
                      strstr(err, "bytes [0, 4194304)"),
                  "%s: %s", sm_err_name(r), err);
    ck_assert_int_eq(sm_client_delete(c, harness_id_ref(id), err, sizeof err), SM_OK);
    sm_client_close(c);
    sm_array_free(x);
}
END_TEST

typedef struct {
    sm_client *c;
    sm_array_id id;
    const char *dir;
    sm_err e;
    char err[512];
} save_job;

static void *save_thread(void *arg)
{
    save_job *j = arg;
    j->e = sm_client_save(j->c, harness_id_ref(j->id), j->dir, NULL, NULL, j->err, sizeof j->err);
    return NULL;
}

/* A save cut short by kill -9: one worker is held in the middle of its
 * writes (its temporary file is a FIFO nobody reads, so its open blocks),
 * the other has written its files; then the workers are killed. The save
 * fails, the directory has no manifest, and a load of it is refused. */
START_TEST(killed_save_incomplete)
{
    harness_opts o = {.nworkers = 2, .devices_per_worker = 4};
    harness_cluster *h = NULL;
    char err[512], path[700];
    ck_assert_msg(harness_cluster_start(&o, &h, err, sizeof err) == SM_OK, "%s", err);
    harness_use_cluster_credential(h);
    sm_client *c = harness_client(h), *c2 = harness_client(g_two);
    sm_shape s = HARNESS_SHAPE(64, 64);
    sm_array *x = harness_array_iota(SM_F32, &s, 23);
    const char *dir = ckpt_path("killed");
    ck_assert_int_eq(mkdir(dir, 0755), 0);
    snprintf(path, sizeof path, "%s/shard-00006.npy.tmp", dir);
    ck_assert_int_eq(mkfifo(path, 0644), 0);
    save_job j = {.c = c, .id = harness_put(c, x, "x=4,y=2", "P('x', 'y')", NULL), .dir = dir};
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, save_thread, &j), 0);
    snprintf(path, sizeof path, "%s/shard-00003.npy", dir); /* the other worker's last */
    for (int t = 0; t < 500 && access(path, F_OK) != 0; t++)
        usleep(10000);
    ck_assert_msg(access(path, F_OK) == 0, "the save did not start");
    usleep(100000);
    pid_t w[4];
    int n = harness_worker_pids(h, w, 4);
    ck_assert_int_eq(n, 2);
    for (int k = 0; k < n; k++)
        ck_assert_int_eq(kill(w[k], SIGKILL), 0);
    pthread_join(th, NULL);
    ck_assert_msg(j.e == SM_EUNAVAILABLE || j.e == SM_ECANCELLED || j.e == SM_ETIMEOUT, "%s: %s",
                  sm_err_name(j.e), j.err);
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    ck_assert_int_ne(access(path, F_OK), 0);
    load_fails(c2, dir, SM_EDATALOSS, "manifest.json is missing", NULL);
    sm_client_close(c);
    sm_client_close(c2);
    harness_cluster_stop(h);
    sm_array_free(x);
}
END_TEST

/* A relative directory is resolved against the caller's working directory. */
START_TEST(relative_dir)
{
    sm_shape s = HARNESS_SHAPE(8, 4);
    sm_array *x = harness_array_iota(SM_F32, &s, 13);
    sm_client *c = harness_client(g_two);
    char cwd[4096], abs[700];
    ck_assert_ptr_nonnull(getcwd(cwd, sizeof cwd));
    ck_assert_int_eq(chdir(g_tmp), 0);
    put_saved(c, x, "P('x')", NULL, "rel/ckpt", 4);
    snprintf(abs, sizeof abs, "%s/rel/ckpt/manifest.json", g_tmp);
    ck_assert_int_eq(access(abs, R_OK), 0);
    load_check(c, "./rel/ckpt", x, "i=2", "P('i')", NULL);
    ck_assert_int_eq(chdir(cwd), 0);
    sm_client_close(c);
    sm_array_free(x);
}
END_TEST

static harness_run ctl(int want, const char *const *args)
{
    harness_run r;
    ck_assert_int_eq(harness_shmapctl(g_two, &r, args), 0);
    ck_assert_msg(r.code == want, "shmapctl %s: exit %d, want %d; stderr: %s", args[0], r.code,
                  want, r.err);
    return r;
}

/* shmapctl save and load, text and JSON, and a refusal. */
START_TEST(cli_save_load)
{
    sm_shape s = HARNESS_SHAPE(32, 8);
    sm_array *x = harness_array_iota(SM_F64, &s, 17);
    sm_client *c = harness_client(g_two);
    char npy[700], back[700], err[512];
    const char *dir = ckpt_path("cli");
    snprintf(npy, sizeof npy, "%s/cli_x.npy", g_tmp);
    snprintf(back, sizeof back, "%s/cli_back.npy", g_tmp);
    ck_assert_int_eq(sm_npy_write(npy, x, err, sizeof err), SM_OK);
    harness_run r = ctl(0, (const char *const[]){"put", npy, "--mesh", "x=4,y=2", "--spec",
                                                 "P('x', 'y')", "--name", "cli_x", NULL});
    harness_run_free(&r);
    r = ctl(0, (const char *const[]){"save", "cli_x", dir, "--json", NULL});
    json_error_t je;
    json_t *j = json_loads(r.out, 0, &je);
    ck_assert_msg(j != NULL, "not JSON: %s", r.out);
    ck_assert_int_eq(json_integer_value(json_object_get(j, "files")), 8);
    ck_assert_int_eq(json_integer_value(json_object_get(j, "bytes")),
                     8 * (128 + 8 * 4 * 8)); /* header + an [8, 4] f64 block each */
    json_decref(j);
    harness_run_free(&r);
    r = ctl(0, (const char *const[]){"load", dir, "--mesh", "a=2,b=2,c=2", "--spec",
                                     "P(('a', 'b'), 'c')", "--name", "cli_back", NULL});
    ck_assert_msg(strstr(r.out, "cli_back") && strstr(r.out, "ready"), "%s", r.out);
    harness_run_free(&r);
    r = ctl(0, (const char *const[]){"get", "cli_back", back, NULL});
    harness_run_free(&r);
    sm_array *got = NULL;
    ck_assert_int_eq(sm_npy_read(back, &got, err, sizeof err), SM_OK);
    ck_assert_int_eq(memcmp(got->data, x->data, (size_t)x->nbytes), 0);
    sm_array_free(got);
    r = ctl(
        0, (const char *const[]){"load", dir, "--mesh", "i=8", "--spec", "P('i')", "--json", NULL});
    j = json_loads(r.out, 0, &je);
    ck_assert_msg(j != NULL, "not JSON: %s", r.out);
    ck_assert_str_eq(json_string_value(json_object_get(j, "type")), "f64[32@i,8]");
    json_decref(j);
    harness_run_free(&r);
    /* damaged: DATA_LOSS naming the file, exit 1, one line */
    char path[700];
    snprintf(path, sizeof path, "%s/shard-00000.npy", dir);
    ck_assert_int_eq(truncate(path, 64), 0);
    r = ctl(1, (const char *const[]){"load", dir, "--mesh", "i=8", "--spec", "P('i')", NULL});
    ck_assert_msg(strstr(r.err, "DATA_LOSS") && strstr(r.err, "shard-00000.npy"), "%s", r.err);
    harness_run_free(&r);
    r = ctl(2, (const char *const[]){"load", dir, "--spec", "P('i')", NULL}); /* no --mesh */
    harness_run_free(&r);
    r = ctl(1, (const char *const[]){"save", "cli_x", dir, NULL}); /* holds a checkpoint */
    ck_assert_msg(strstr(r.err, "ALREADY_EXISTS"), "%s", r.err);
    harness_run_free(&r);
    sm_client_close(c);
    sm_array_free(x);
}
END_TEST

int main(void)
{
    return HARNESS_CLUSTER_SUITE("e2e_ckpt", 120, clusters_up, clusters_down,
                                 {save_load_any_sharding}, {replicated_written_once}, {dtypes, 5},
                                 {load_names}, {damaged_refused}, {interrupted_save_incomplete},
                                 {chunks_read_where_needed}, {killed_save_incomplete},
                                 {relative_dir}, {cli_save_load});
}
