/* client_put: the upload calls of libshmap (device_put of a whole array or
 * .npy file, per-device shards, a per-index callback, and process-local
 * data). Every one is CreateArray, then PutShard streams straight to the
 * workers (one per worker for all the targets it alone holds, two streams
 * in flight at once; one relayed Upload stream per target where a worker
 * cannot be reached), then one CommitShards for all the targets sent
 * straight. */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "client_internal.h"
#include "sm_tpool.h"

/* Uploads of one CreateArray reply: target i gets the box of src chosen by
 * box_of (global_index or local_slice). */
typedef struct {
    sm_client *c;
    const sm_svc_create_array_reply *r;
    sm_dtype dtype;
    const void *src;
    sm_shape src_shape;
    int local;  /* 1: boxes are local_slice, else global_index */
    int *order; /* task i uploads targets order[first[i] .. first[i + 1]) */
    int *first;
    client_progress prog;
    client_commits later;
} upload_job;

static const sm_index *job_box(const upload_job *j, int i)
{
    return j->local ? &j->r->targets[i].local_slice : &j->r->targets[i].global_index;
}

static sm_err upload_task(void *user, int i, char *err, size_t errlen)
{
    upload_job *j = user;
    client_up_target tg[SM_SVC_MAX_BATCH];
    int n = j->first[i + 1] - j->first[i];
    for (int k = 0; k < n; k++) {
        int x = j->order[j->first[i] + k];
        tg[k] =
            (client_up_target){j->r->targets[x].ndevices, j->r->targets[x].devices, job_box(j, x)};
    }
    return client_upload_boxes(j->c, &j->r->array, j->r->array.id, n, tg, j->dtype, j->src,
                               &j->src_shape, &j->prog, &j->later, err, errlen);
}

/* The worker holding every device of target t, or a key of t's own
 * (uploaded alone) when its devices are on several workers. */
static uint32_t target_key(const sm_svc_create_array_reply *r, int i)
{
    const sm_svc_upload_target *t = &r->targets[i];
    uint32_t w = UINT32_MAX;
    for (int k = 0; k < t->ndevices; k++)
        for (int s = 0; s < r->array.nshards; s++) {
            if (r->array.shards[s].device != t->devices[k])
                continue;
            if (w != UINT32_MAX && w != r->array.shards[s].worker_id.v)
                return 0x80000000u | (uint32_t)i;
            w = r->array.shards[s].worker_id.v;
        }
    return w == UINT32_MAX ? 0x80000000u | (uint32_t)i : w;
}

static sm_err upload_all(sm_client *c, const sm_svc_create_array_reply *r, sm_dtype t,
                         const void *src, const sm_shape *src_shape, int local, int *ready,
                         char *err, size_t errlen)
{
    upload_job j = {
        .c = c, .r = r, .dtype = t, .src = src, .src_shape = *src_shape, .local = local};
    int64_t total = 0;
    sm_err e;

    for (int i = 0; i < r->ntargets; i++) {
        sm_shape s = sm_index_shape(job_box(&j, i));
        int64_t nb = 0;
        if ((e = sm_shape_nbytes(&s, t, &nb, err, errlen)))
            return e;
        total += nb;
    }
    /* One task (one PutShard stream) per worker for the targets it alone
     * holds, one per target spanning workers; two tasks in flight. */
    j.order = malloc(sizeof *j.order * ((size_t)r->ntargets + 1));
    j.first = malloc(sizeof *j.first * ((size_t)r->ntargets + 2));
    uint32_t *key = calloc((size_t)r->ntargets + 1, sizeof *key);
    int ntasks = -1;
    if (j.order && j.first && key) {
        for (int i = 0; i < r->ntargets; i++)
            key[i] = target_key(r, i);
        ntasks = client_group_by(key, r->ntargets, SM_SVC_MAX_BATCH, j.order, j.first);
    }
    free(key);
    if (ntasks < 0 || (e = client_commits_init(&j.later, r->ntargets, err, errlen))) {
        free(j.order);
        free(j.first);
        return ntasks < 0 ? sm_fail(err, errlen, SM_ENOMEM, "out of memory") : e;
    }
    /* From ordinary memory to workers on this host: through a staging
     * segment, which the workers copy out of */
    int64_t srcbytes = 0;
    void *stage = NULL;
    if (!sm_shape_nbytes(src_shape, t, &srcbytes, err, errlen) &&
        (stage = client_stage_take(c, &r->array, 0, src, srcbytes))) {
        memcpy(stage, src, (size_t)srcbytes);
        j.src = stage;
    }
    client_progress_init(&j.prog, c, total);
    e = sm_tpool_run(NULL, ntasks, 2, upload_task, &j, err, errlen);
    client_progress_destroy(&j.prog);
    client_stage_give(c, stage);
    /* Every target arrived: one commit fills them all. */
    if (!e)
        e = client_commits_send(c, r->array.id, &j.later, ready, err, errlen);
    client_commits_destroy(&j.later);
    free(j.order);
    free(j.first);
    return e;
}

/* Describes the array just uploaded into out (if not NULL). */
static sm_err describe_id(sm_client *c, sm_array_id id, sm_array_info *out, char *err,
                          size_t errlen)
{
    sm_array_ref ref = {.id = id, .name = NULL};
    if (!out)
        return SM_OK;
    return sm_client_describe(c, ref, out, err, errlen);
}

/* The description of the array of r that the last commit completed, without
 * asking for it: what CreateArray said, every shard now present. */
static void take_info(sm_svc_create_array_reply *r, sm_array_info *out)
{
    if (!out)
        return;
    *out = r->array;
    out->state = SM_ARRAY_READY;
    for (int k = 0; k < out->nshards; k++)
        out->shards[k].present = 1;
    r->array.shards = NULL;
    r->array.nshards = 0;
    r->array.copies = NULL;
    r->array.ncopies = 0;
}

static sm_err check_data(sm_dtype dtype, const sm_shape *shape, const void *data, int64_t *nbytes,
                         char *err, size_t errlen)
{
    sm_err e;
    if (sm_dtype_size(dtype) == 0)
        return sm_fail(err, errlen, SM_EINVAL, "dtype %d is not a known dtype", (int)dtype);
    if ((e = sm_shape_nbytes(shape, dtype, nbytes, err, errlen)))
        return e;
    if (*nbytes > 0 && !data)
        return sm_fail(err, errlen, SM_EINVAL, "no data was given for a %lld-byte array",
                       (long long)*nbytes);
    return SM_OK;
}

static void create_req_init(sm_svc_create_array_req *q, sm_put_kind kind, sm_dtype dtype,
                            const sm_shape *shape, const sm_sharding_ref *sh, const char *name)
{
    memset(q, 0, sizeof *q);
    q->name = name;
    q->dtype = dtype;
    q->kind = kind;
    if (shape) {
        q->has_shape = 1;
        q->shape = *shape;
    }
    q->sharding = *sh;
}

sm_err sm_client_put(sm_client *c, sm_dtype dtype, const sm_shape *shape, const void *data,
                     const sm_sharding_ref *sh, const char *name, sm_array_info *out, char *err,
                     size_t errlen)
{
    sm_svc_create_array_req q;
    sm_svc_create_array_reply r;
    int64_t nbytes;
    int ready = 0;
    sm_err e;

    if ((e = check_data(dtype, shape, data, &nbytes, err, errlen)))
        return e;
    create_req_init(&q, SM_PUT_WHOLE, dtype, shape, sh, name);
    memset(&r, 0, sizeof r);
    if ((e = sm_svc_coord_create_array(c->ch, c->timeout_ms, &q, &r, err, errlen)))
        return e;
    if ((e = upload_all(c, &r, dtype, data, shape, 0, &ready, err, errlen))) {
        client_discard(c, r.array.id);
        goto done;
    }
    if (ready)
        take_info(&r, out);
    else
        e = describe_id(c, r.array.id, out, err, errlen);
done:
    sm_svc_create_array_reply_free(&r);
    return e;
}

sm_err sm_client_put_file(sm_client *c, const char *path, const sm_sharding_ref *sh,
                          const char *name, sm_array_info *out, char *err, size_t errlen)
{
    sm_npy_info info;
    struct stat stb;
    void *map = MAP_FAILED;
    size_t maplen = 0;
    int fd = -1;
    sm_err e;

    if ((e = sm_npy_read_info(path, &info, err, errlen)))
        return e;
    if (sm_npy_layout_issue(&info)) { /* converted in memory, then sent as any array */
        sm_array *a = NULL;
        if (!(e = sm_npy_read(path, &a, err, errlen)))
            e = sm_client_put(c, a->dtype, &a->shape, a->data, sh, name, out, err, errlen);
        sm_array_free(a);
        return e;
    }
    if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0 || fstat(fd, &stb) < 0) {
        e = sm_fail(err, errlen, SM_EIO, "cannot open %s", path);
        goto done;
    }
    maplen = (size_t)(info.data_offset + info.nbytes);
    if ((int64_t)stb.st_size < info.data_offset + info.nbytes) {
        e = sm_fail(err, errlen, SM_EFORMAT, "%s holds %lld bytes, fewer than its header says",
                    path, (long long)stb.st_size);
        goto done;
    }
    map = mmap(NULL, maplen, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map == MAP_FAILED) {
        e = sm_fail(err, errlen, SM_EIO, "cannot map %s into memory", path);
        goto done;
    }
    (void)madvise(map, maplen, MADV_SEQUENTIAL);
    e = sm_client_put(c, info.dtype, &info.shape, (const char *)map + info.data_offset, sh, name,
                      out, err, errlen);
done:
    if (map != MAP_FAILED)
        munmap(map, maplen);
    if (fd >= 0)
        close(fd);
    return e;
}

/* client_upload_box of the whole block a to target t of r, through a
 * staging segment where the client lends one (client_stage_take). */
static sm_err upload_block(sm_client *c, sm_svc_create_array_reply *r,
                           const sm_svc_upload_target *t, const sm_array *a, client_progress *prog,
                           client_commits *later, char *err, size_t errlen)
{
    sm_index full = sm_index_full(&a->shape);
    void *stage = client_stage_take(c, &r->array, 0, a->data, a->nbytes);
    if (stage)
        memcpy(stage, a->data, (size_t)a->nbytes);
    sm_err e =
        client_upload_box(c, &r->array, r->array.id, t->ndevices, t->devices, a->dtype,
                          stage ? stage : a->data, &a->shape, &full, prog, later, err, errlen);
    client_stage_give(c, stage);
    return e;
}

sm_err sm_client_put_shards(sm_client *c, sm_dtype dtype, const sm_shape *global,
                            const sm_sharding_ref *sh, const char *name, int nshards,
                            const int32_t *devices, const sm_array *const *shards,
                            sm_array_info *out, char *err, size_t errlen)
{
    sm_svc_create_array_req q;
    sm_svc_create_array_reply r;
    int *which = NULL;
    char s1[128], s2[128];
    sm_err e;

    for (int k = 0; k < nshards; k++) {
        if (!shards[k])
            return sm_fail(err, errlen, SM_EINVAL, "device %d was given no shard", (int)devices[k]);
        for (int m = 0; m < k; m++)
            if (devices[m] == devices[k])
                return sm_fail(err, errlen, SM_EINVAL, "device %d was given two shards",
                               (int)devices[k]);
    }
    create_req_init(&q, SM_PUT_SHARDS, dtype, global, sh, name);
    memset(&r, 0, sizeof r);
    if ((e = sm_svc_coord_create_array(c->ch, c->timeout_ms, &q, &r, err, errlen)))
        return e;
    if (!(which = calloc((size_t)r.ntargets + 1, sizeof *which))) {
        e = sm_fail(err, errlen, SM_ENOMEM, "out of memory");
        goto fail;
    }
    /* Match every target (one device each) with its shard, checking shapes. */
    for (int i = 0; i < r.ntargets; i++) {
        const sm_svc_upload_target *t = &r.targets[i];
        sm_shape want = sm_index_shape(&t->global_index);
        int k = 0;
        while (k < nshards && (t->ndevices < 1 || devices[k] != t->devices[0]))
            k++;
        if (k == nshards) {
            e = sm_fail(err, errlen, SM_EINVAL,
                        "device %d of the mesh was given no shard; every device needs one",
                        t->ndevices > 0 ? (int)t->devices[0] : -1);
            goto fail;
        }
        if (shards[k]->dtype != dtype || !sm_shape_equal(&shards[k]->shape, &want)) {
            e = sm_fail(err, errlen, SM_EINVAL,
                        "the shard for device %d is %s%s, but the sharding needs %s%s there",
                        (int)devices[k], sm_dtype_name(shards[k]->dtype),
                        sm_shape_format(&shards[k]->shape, s1, sizeof s1), sm_dtype_name(dtype),
                        sm_shape_format(&want, s2, sizeof s2));
            goto fail;
        }
        which[i] = k;
    }
    if (nshards > r.ntargets) {
        for (int k = 0; k < nshards; k++) {
            int found = 0;
            for (int i = 0; i < r.ntargets && !found; i++)
                found = which[i] == k;
            if (!found) {
                e = sm_fail(err, errlen, SM_EINVAL, "device %d is not in the mesh of the sharding",
                            (int)devices[k]);
                goto fail;
            }
        }
    }
    client_progress prog;
    client_commits later;
    int64_t total = 0;
    for (int i = 0; i < r.ntargets; i++)
        total += shards[which[i]]->nbytes;
    if ((e = client_commits_init(&later, r.ntargets, err, errlen)))
        goto fail;
    client_progress_init(&prog, c, total);
    for (int i = 0; i < r.ntargets && !e; i++)
        e = upload_block(c, &r, &r.targets[i], shards[which[i]], &prog, &later, err, errlen);
    client_progress_destroy(&prog);
    if (!e)
        e = client_commits_send(c, r.array.id, &later, NULL, err, errlen);
    client_commits_destroy(&later);
    if (e)
        goto fail;
    e = describe_id(c, r.array.id, out, err, errlen);
    free(which);
    sm_svc_create_array_reply_free(&r);
    return e;

fail:
    client_discard(c, r.array.id);
    free(which);
    sm_svc_create_array_reply_free(&r);
    return e;
}

sm_err sm_client_put_callback(sm_client *c, sm_dtype dtype, const sm_shape *global,
                              const sm_sharding_ref *sh, const char *name, sm_index_callback cb,
                              void *user, sm_array_info *out, char *err, size_t errlen)
{
    sm_svc_create_array_req q;
    sm_svc_create_array_reply r;
    client_progress prog;
    client_commits later;
    int64_t total;
    char s1[128], s2[128];
    sm_err e;

    if (!cb)
        return sm_fail(err, errlen, SM_EINVAL, "no callback was given");
    if ((e = sm_shape_nbytes(global, dtype, &total, err, errlen)))
        return e;
    create_req_init(&q, SM_PUT_WHOLE, dtype, global, sh, name);
    memset(&r, 0, sizeof r);
    if ((e = sm_svc_coord_create_array(c->ch, c->timeout_ms, &q, &r, err, errlen)))
        return e;
    if ((e = client_commits_init(&later, r.ntargets, err, errlen))) {
        client_discard(c, r.array.id);
        sm_svc_create_array_reply_free(&r);
        return e;
    }
    client_progress_init(&prog, c, total);
    /* One call of cb per distinct index, in the caller's thread. */
    for (int i = 0; i < r.ntargets && !e; i++) {
        const sm_svc_upload_target *t = &r.targets[i];
        sm_shape want = sm_index_shape(&t->global_index);
        sm_array *blk = cb(user, &t->global_index);
        if (!blk) {
            e = sm_fail(err, errlen, SM_EINVAL, "the callback returned no data for index %s",
                        sm_index_format(&t->global_index, s1, sizeof s1));
            break;
        }
        if (blk->dtype != dtype || !sm_shape_equal(&blk->shape, &want)) {
            e = sm_fail(err, errlen, SM_EINVAL,
                        "the callback returned a %s%s block for index %s, which needs %s%s",
                        sm_dtype_name(blk->dtype), sm_shape_format(&blk->shape, s1, sizeof s1),
                        sm_index_format(&t->global_index, s2, sizeof s2), sm_dtype_name(dtype),
                        sm_shape_format(&want, s2, sizeof s2));
        } else {
            e = upload_block(c, &r, t, blk, &prog, &later, err, errlen);
        }
        sm_array_free(blk);
    }
    client_progress_destroy(&prog);
    if (!e)
        e = client_commits_send(c, r.array.id, &later, NULL, err, errlen);
    client_commits_destroy(&later);
    if (e)
        client_discard(c, r.array.id);
    else
        e = describe_id(c, r.array.id, out, err, errlen);
    sm_svc_create_array_reply_free(&r);
    return e;
}

sm_err sm_client_put_local(sm_client *c, int process, const sm_array *local,
                           const sm_sharding_ref *sh, const char *name, const sm_shape *global,
                           int64_t deadline_ms, sm_array_info *out, char *err, size_t errlen)
{
    sm_svc_create_array_req q;
    sm_svc_create_array_reply r;
    sm_err e;

    if (!name || !*name)
        return sm_fail(err, errlen, SM_EINVAL,
                       "a process-local upload needs a name, which its parts meet by");
    if (!local)
        return sm_fail(err, errlen, SM_EINVAL, "no local data was given");
    if (deadline_ms < 0 || deadline_ms > UINT32_MAX)
        return sm_fail(err, errlen, SM_EINVAL, "deadline of %lld ms is out of range",
                       (long long)deadline_ms);
    create_req_init(&q, SM_PUT_LOCAL, local->dtype, global, sh, name);
    q.process = process;
    q.local_shape = local->shape;
    q.deadline_ms = (uint32_t)deadline_ms;
    memset(&r, 0, sizeof r);
    if ((e = sm_svc_coord_create_array(c->ch, c->timeout_ms, &q, &r, err, errlen)))
        return e;
    /* The other processes' parts may still come: a failure here leaves the
     * array pending until its deadline rather than deleting it. */
    if (!(e = upload_all(c, &r, local->dtype, local->data, &local->shape, 1, NULL, err, errlen)))
        e = describe_id(c, r.array.id, out, err, errlen);
    sm_svc_create_array_reply_free(&r);
    return e;
}
