/* ckpt: a checkpoint's manifest. See ckpt.h. */
#include "ckpt.h"

#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sm_strbuf.h"

void sm_ckpt_file_name(int k, char *buf, size_t len)
{
    snprintf(buf, len, "shard-%05d.npy", k);
}

void sm_ckpt_manifest_free(sm_ckpt_manifest *m)
{
    if (!m)
        return;
    for (int k = 0; m->shards && k < m->nshards; k++)
        free(m->shards[k].devices);
    free(m->shards);
    memset(m, 0, sizeof *m);
}

static json_t *ckpt_ints(const int64_t *v, int n)
{
    json_t *a = json_array();
    for (int i = 0; a && i < n; i++)
        json_array_append_new(a, json_integer(v[i]));
    return a;
}

/* Appends one value as compact one-line JSON ("[0, 16]"); 0, or -1 when out
 * of memory. Takes v. */
static int ckpt_put(sm_strbuf *b, json_t *v)
{
    char *t = v ? json_dumps(v, JSON_ENCODE_ANY | JSON_PRESERVE_ORDER) : NULL;
    json_decref(v);
    if (!t)
        return -1;
    sm_strbuf_puts(b, t);
    free(t);
    return 0;
}

/* One key per line, one shard per line: a manifest a person can read. */
char *sm_ckpt_manifest_format(const sm_ckpt_manifest *m)
{
    char spec[512], sum[24];
    const sm_mesh *ms = &m->sharding.mesh;
    sm_strbuf b = {0};
    json_t *mesh = json_object(), *names = json_array(), *devs = json_array();
    int bad = !mesh || !names || !devs;
    for (int a = 0; !bad && a < ms->naxes; a++)
        json_array_append_new(names, json_string(ms->names[a]));
    for (int d = 0; !bad && d < ms->ndevices; d++)
        json_array_append_new(devs, json_integer(ms->devices[d]));
    if (!bad) {
        json_object_set_new(mesh, "axis_names", names);
        json_object_set_new(mesh, "axis_sizes", ckpt_ints(ms->sizes, ms->naxes));
        json_object_set_new(mesh, "devices", devs);
        names = devs = NULL;
    }
    sm_strbuf_printf(&b, "{\n  \"format\": \"%s\",\n  \"version\": %d,\n  \"dtype\": \"%s\",\n",
                     SM_CKPT_FORMAT, SM_CKPT_VERSION, sm_dtype_long_name(m->dtype));
    sm_strbuf_puts(&b, "  \"shape\": ");
    bad = bad || ckpt_put(&b, ckpt_ints(m->shape.dims, m->shape.rank));
    sm_strbuf_puts(&b, ",\n  \"mesh\": ");
    bad = bad || ckpt_put(&b, mesh);
    mesh = NULL;
    sm_strbuf_puts(&b, ",\n  \"spec\": ");
    bad = bad || ckpt_put(&b, json_string(sm_pspec_format(&m->sharding.spec, spec, sizeof spec)));
    sm_strbuf_puts(&b, ",\n  \"shards\": [\n");
    for (int k = 0; !bad && k < m->nshards; k++) {
        const sm_ckpt_shard *s = &m->shards[k];
        json_t *e = json_object(), *ix = json_array(), *dv = json_array();
        for (int d = 0; ix && d < s->index.rank; d++) {
            int64_t r[2] = {s->index.r[d].start, s->index.r[d].stop};
            json_array_append_new(ix, ckpt_ints(r, 2));
        }
        for (int d = 0; dv && d < s->ndevices; d++)
            json_array_append_new(dv, json_integer(s->devices[d]));
        json_t *cs = json_array();
        for (int c = 0; cs && c < s->nchunks && c < SM_CKPT_MAX_CHUNKS; c++) {
            snprintf(sum, sizeof sum, "%016" PRIx64, s->chunk_sums[c]);
            json_array_append_new(cs, json_string(sum));
        }
        snprintf(sum, sizeof sum, "%016" PRIx64, s->checksum);
        if (e) {
            json_object_set_new(e, "file", json_string(s->file));
            json_object_set_new(e, "index", ix);
            json_object_set_new(e, "devices", dv);
            json_object_set_new(e, "bytes", json_integer(s->bytes));
            json_object_set_new(e, "xxh3_64", json_string(sum));
            json_object_set_new(e, "chunk_bytes", json_integer(s->chunk_bytes));
            json_object_set_new(e, "chunk_xxh3_64", cs);
        } else {
            json_decref(ix);
            json_decref(dv);
            json_decref(cs);
        }
        sm_strbuf_puts(&b, "    ");
        bad = ckpt_put(&b, e);
        sm_strbuf_puts(&b, k + 1 < m->nshards ? ",\n" : "\n");
    }
    sm_strbuf_puts(&b, "  ]\n}\n");
    json_decref(mesh);
    json_decref(names);
    json_decref(devs);
    if (bad || b.oom) {
        sm_strbuf_free(&b);
        return NULL;
    }
    return sm_strbuf_take(&b);
}

/* ---- parsing ----------------------------------------------------------------- */

static sm_err bad(char *err, size_t errlen, const char *path, const char *what)
{
    return sm_fail(err, errlen, SM_EDATALOSS, "%s is malformed: %s", path, what);
}

/* An array of at most max integers >= lo into v; *n its length. */
static int ckpt_int_list(const json_t *a, int max, int64_t lo, int64_t *v, int *n)
{
    if (!json_is_array(a) || (int)json_array_size(a) > max)
        return -1;
    for (size_t i = 0; i < json_array_size(a); i++) {
        const json_t *x = json_array_get(a, i);
        if (!json_is_integer(x) || json_integer_value(x) < lo)
            return -1;
        v[i] = json_integer_value(x);
    }
    *n = (int)json_array_size(a);
    return 0;
}

static int ckpt_hex64(const char *s, uint64_t *out)
{
    uint64_t v = 0;
    if (!s || strlen(s) != 16)
        return -1;
    for (int i = 0; i < 16; i++) {
        char c = s[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (d < 0)
            return -1;
        v = v << 4 | (uint64_t)d;
    }
    *out = v;
    return 0;
}

static int ckpt_plain_name(const char *f)
{
    return f && *f && strlen(f) < SM_CKPT_FILE_MAX && !strchr(f, '/') && strcmp(f, ".") &&
           strcmp(f, "..");
}

/* The saved sharding, best effort (it is for people; a load names its own). */
static void ckpt_sharding_parse(const json_t *root, const sm_shape *shape, sm_sharding *out)
{
    const json_t *mesh = json_object_get(root, "mesh");
    const json_t *names = json_object_get(mesh, "axis_names");
    const char *spec = json_string_value(json_object_get(root, "spec"));
    const char *nm[SM_MAX_AXES];
    int64_t sizes[SM_MAX_AXES], dv[SM_MAX_DEVICES];
    int32_t devices[SM_MAX_DEVICES];
    int nsizes = 0, ndev = 0;
    char ignore[256];
    sm_mesh m;
    sm_pspec p;
    if (!json_is_array(names) || json_array_size(names) > SM_MAX_AXES || !spec ||
        ckpt_int_list(json_object_get(mesh, "axis_sizes"), SM_MAX_AXES, 1, sizes, &nsizes) ||
        ckpt_int_list(json_object_get(mesh, "devices"), SM_MAX_DEVICES, 0, dv, &ndev) ||
        (size_t)nsizes != json_array_size(names))
        return;
    for (int a = 0; a < nsizes; a++)
        if (!(nm[a] = json_string_value(json_array_get(names, (size_t)a))))
            return;
    for (int d = 0; d < ndev; d++)
        devices[d] = (int32_t)dv[d];
    if (sm_mesh_init(&m, nsizes, nm, sizes, devices, ndev, ignore, sizeof ignore) ||
        sm_pspec_parse(spec, &p, ignore, sizeof ignore))
        return;
    sm_sharding_init(out, &m, &p, shape, ignore, sizeof ignore);
}

static sm_err ckpt_shard_parse(const json_t *e, int k, const sm_ckpt_manifest *m, const char *path,
                               sm_ckpt_shard *s, char *err, size_t errlen)
{
    char what[160];
    const char *file = json_string_value(json_object_get(e, "file"));
    const json_t *ix = json_object_get(e, "index"), *bytes = json_object_get(e, "bytes");
    int64_t dv[SM_MAX_DEVICES];
    int ndev = 0;
    if (!json_is_object(e) || !ckpt_plain_name(file)) {
        snprintf(what, sizeof what, "shards[%d] has no plain file name", k);
        return bad(err, errlen, path, what);
    }
    snprintf(s->file, sizeof s->file, "%s", file);
    if (!json_is_array(ix) || json_array_size(ix) != (size_t)m->shape.rank) {
        snprintf(what, sizeof what, "the index of %s is not a list of %d [start, stop] pairs", file,
                 m->shape.rank);
        return bad(err, errlen, path, what);
    }
    s->index.rank = m->shape.rank;
    for (int d = 0; d < m->shape.rank; d++) {
        int64_t r[2];
        int n = 0;
        if (ckpt_int_list(json_array_get(ix, (size_t)d), 2, 0, r, &n) || n != 2 || r[0] > r[1] ||
            r[1] > m->shape.dims[d]) {
            snprintf(what, sizeof what,
                     "the index of %s in dimension %d is not a [start, stop] inside 0..%lld", file,
                     d, (long long)m->shape.dims[d]);
            return bad(err, errlen, path, what);
        }
        s->index.r[d].start = r[0];
        s->index.r[d].stop = r[1];
    }
    if (!json_is_integer(bytes) || json_integer_value(bytes) < 0 ||
        ckpt_hex64(json_string_value(json_object_get(e, "xxh3_64")), &s->checksum)) {
        snprintf(what, sizeof what, "%s has no byte count or no xxh3_64 of 16 hex digits", file);
        return bad(err, errlen, path, what);
    }
    s->bytes = json_integer_value(bytes);
    const json_t *cb = json_object_get(e, "chunk_bytes"), *cs = json_object_get(e, "chunk_xxh3_64");
    if (!json_is_integer(cb) || json_integer_value(cb) < 1 || !json_is_array(cs) ||
        json_array_size(cs) > SM_CKPT_MAX_CHUNKS ||
        (s->bytes + json_integer_value(cb) - 1) / json_integer_value(cb) !=
            (int64_t)json_array_size(cs)) {
        snprintf(what, sizeof what,
                 "%s has no chunk_bytes and chunk_xxh3_64 list that fit its %lld bytes", file,
                 (long long)s->bytes);
        return bad(err, errlen, path, what);
    }
    s->chunk_bytes = json_integer_value(cb);
    s->nchunks = (int)json_array_size(cs);
    for (int c = 0; c < s->nchunks; c++)
        if (ckpt_hex64(json_string_value(json_array_get(cs, (size_t)c)), &s->chunk_sums[c])) {
            snprintf(what, sizeof what, "chunk %d of %s has no xxh3_64 of 16 hex digits", c, file);
            return bad(err, errlen, path, what);
        }
    if (!ckpt_int_list(json_object_get(e, "devices"), SM_MAX_DEVICES, 0, dv, &ndev) && ndev &&
        (s->devices = malloc(sizeof *s->devices * (size_t)ndev))) {
        for (int d = 0; d < ndev; d++)
            s->devices[d] = (int32_t)dv[d];
        s->ndevices = ndev;
    }
    return SM_OK;
}

/* Every element of the shape in exactly one shard: the volumes add up and
 * no two boxes overlap. */
static sm_err ckpt_tiling_check(const sm_ckpt_manifest *m, const char *path, char *err,
                                size_t errlen)
{
    char what[256];
    int64_t total = 0, sum = 0;
    if (sm_shape_numel(&m->shape, &total, what, sizeof what))
        return bad(err, errlen, path, what);
    for (int k = 0; k < m->nshards; k++) {
        const sm_index *a = &m->shards[k].index;
        int64_t v = 1;
        for (int d = 0; d < a->rank; d++)
            v *= a->r[d].stop - a->r[d].start;
        sum += v;
        for (int j = 0; j < k && v; j++) {
            const sm_index *b = &m->shards[j].index;
            int overlap = 1;
            for (int d = 0; d < a->rank && overlap; d++)
                overlap = a->r[d].start < b->r[d].stop && b->r[d].start < a->r[d].stop;
            if (overlap || !strcmp(m->shards[j].file, m->shards[k].file)) {
                snprintf(what, sizeof what, "shards %s and %s %s", m->shards[j].file,
                         m->shards[k].file, overlap ? "overlap" : "share a file name");
                return bad(err, errlen, path, what);
            }
        }
    }
    if (sum != total) {
        snprintf(what, sizeof what, "its shards hold %lld of the %lld elements of the array",
                 (long long)sum, (long long)total);
        return bad(err, errlen, path, what);
    }
    return SM_OK;
}

sm_err sm_ckpt_manifest_parse(const char *text, const char *path, sm_ckpt_manifest *out, char *err,
                              size_t errlen)
{
    json_error_t je;
    char what[256];
    int64_t dims[SM_MAX_RANK];
    int rank = 0;
    sm_err e = SM_OK;
    memset(out, 0, sizeof *out);
    json_t *root = json_loads(text, 0, &je);
    if (!root) {
        snprintf(what, sizeof what, "not JSON (line %d: %s)", je.line, je.text);
        return bad(err, errlen, path, what);
    }
    const char *fmt = json_string_value(json_object_get(root, "format"));
    const char *dt = json_string_value(json_object_get(root, "dtype"));
    const json_t *ver = json_object_get(root, "version"), *shards = json_object_get(root, "shards");
    char ignore[128];
    if (!fmt || strcmp(fmt, SM_CKPT_FORMAT))
        e = bad(err, errlen, path, "its format is not \"" SM_CKPT_FORMAT "\"");
    else if (!json_is_integer(ver) || json_integer_value(ver) != SM_CKPT_VERSION)
        e = sm_fail(err, errlen, SM_EDATALOSS,
                    "%s has version %lld; this shmap reads version %d checkpoints", path,
                    (long long)json_integer_value(ver), SM_CKPT_VERSION);
    else if (!dt || sm_dtype_parse(dt, &out->dtype))
        e = bad(err, errlen, path, "it names no known dtype");
    else if (ckpt_int_list(json_object_get(root, "shape"), SM_MAX_RANK, 0, dims, &rank) ||
             sm_shape_make(&out->shape, rank, dims, ignore, sizeof ignore))
        e = bad(err, errlen, path, "its shape is not a list of at most 8 sizes");
    else if (!json_is_array(shards) || json_array_size(shards) < 1 ||
             json_array_size(shards) > SM_MAX_DEVICES)
        e = bad(err, errlen, path, "it lists no shards (or more than 1024)");
    else if (!(out->shards = calloc(json_array_size(shards), sizeof *out->shards)))
        e = sm_fail(err, errlen, SM_ENOMEM, "out of memory reading %s", path);
    for (size_t k = 0; !e && k < json_array_size(shards); k++) {
        e = ckpt_shard_parse(json_array_get(shards, k), (int)k, out, path, &out->shards[k], err,
                             errlen);
        out->nshards = (int)k + 1;
    }
    if (!e)
        e = ckpt_tiling_check(out, path, err, errlen);
    if (!e)
        ckpt_sharding_parse(root, &out->shape, &out->sharding);
    json_decref(root);
    if (e)
        sm_ckpt_manifest_free(out);
    return e;
}
