/* client_get: the download calls of libshmap. The array is described, each
 * distinct index is fetched once from its lowest live replica (straight from
 * its worker where reachable, one stream per worker, else through the
 * coordinator) and scattered straight into the result (memory or a mapped
 * .npy file), two workers at a time. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "client_internal.h"
#include "sm_tpool.h"

/* The shards to fetch, grouped by worker: group g is pick[first[g] ..
 * first[g + 1]). */
typedef struct {
    sm_client *c;
    const sm_array_info *info;
    sm_shard_info *all; /* info's shards, then its copies (owned) */
    int n, ngroups;
    int *pick;  /* positions in all, one per distinct index */
    int *first; /* ngroups + 1 */
    void *dst;
    void *out; /* the caller's memory (from its page), where dst is a staging segment */
    size_t outlen;
    client_progress prog;
} fetch_job;

static const char *ref_text(const sm_array_info *info, char *buf, size_t len)
{
    if (info->name[0])
        snprintf(buf, len, "'%s' (id %llu)", info->name, (unsigned long long)info->id.v);
    else
        snprintf(buf, len, "%llu", (unsigned long long)info->id.v);
    return buf;
}

static sm_err check_ready(const sm_array_info *info, char *err, size_t errlen)
{
    char rb[200];
    if (info->state == SM_ARRAY_READY || info->state == SM_ARRAY_DEGRADED)
        return SM_OK; /* a degraded array is read from its live copies */
    return sm_fail(err, errlen, SM_EPRECONDITION,
                   "array %s is %s; only a ready array can be read%s%s",
                   ref_text(info, rb, sizeof rb), sm_array_state_name(info->state),
                   info->error[0] ? ": " : "", info->error);
}

/* A whole array is read from one shard per index: an unreduced array's
 * value is the sum of its shards, which a read does not compute. */
static sm_err check_reduced(const sm_array_info *info, char *err, size_t errlen)
{
    char rb[200], sp[300];
    if (!info->sharding.spec.nunreduced)
        return SM_OK;
    return sm_fail(err, errlen, SM_EPRECONDITION,
                   "array %s is unreduced (%s): its value is the sum of its devices' blocks; "
                   "reshard it to a sharding without unreduced axes to read it, or read one "
                   "device's partial sum (get-shard)",
                   ref_text(info, rb, sizeof rb),
                   sm_pspec_format(&info->sharding.spec, sp, sizeof sp));
}

/* info's shards followed by its copies, in one malloc'd list of *n. */
static sm_shard_info *all_shards(const sm_array_info *info, int *n)
{
    *n = info->nshards + info->ncopies;
    sm_shard_info *all = malloc(((size_t)*n + 1) * sizeof *all);
    if (all && info->nshards)
        memcpy(all, info->shards, (size_t)info->nshards * sizeof *all);
    if (all && info->ncopies)
        memcpy(all + info->nshards, info->copies, (size_t)info->ncopies * sizeof *all);
    return all;
}

/* Whether a is a better source of its block than b: present first, then
 * the mesh's own shards (copies only stand in for lost ones), then the
 * lowest replica id. */
static int better_source(const sm_shard_info *a, const sm_shard_info *b)
{
    if (a->present != b->present)
        return a->present;
    if ((a->stored_as != 0) != (b->stored_as != 0))
        return a->stored_as == 0;
    return a->replica_id < b->replica_id;
}

/* Chooses, for every distinct index, the best source (better_source). */
static sm_err pick_shards(const sm_array_info *info, const sm_shard_info *all, int nall, int **out,
                          int *n, char *err, size_t errlen)
{
    int *pick = malloc(((size_t)nall + 1) * sizeof *pick);
    int np = 0;
    char ib[256], rb[200];

    if (!pick)
        return sm_fail(err, errlen, SM_ENOMEM, "out of memory");
    for (int i = 0; i < nall; i++) {
        int k = 0;
        while (k < np && !sm_index_equal(&all[pick[k]].index, &all[i].index))
            k++;
        if (k == np)
            pick[np++] = i;
        else if (better_source(&all[i], &all[pick[k]]))
            pick[k] = i;
    }
    for (int k = 0; k < np; k++)
        if (!all[pick[k]].present) {
            const sm_index *lost = &all[pick[k]].index;
            free(pick);
            return sm_fail(err, errlen, SM_EUNAVAILABLE,
                           "no live device holds index %s of array %s",
                           sm_index_format(lost, ib, sizeof ib), ref_text(info, rb, sizeof rb));
        }
    *out = pick;
    *n = np;
    return SM_OK;
}

/* Fetches the shards of group i, from one worker, in one stream. */
static sm_err fetch_task(void *user, int i, char *err, size_t errlen)
{
    fetch_job *j = user;
    int n = j->first[i + 1] - j->first[i];
    int32_t dev[SM_MAX_WORKER_DEVICES];
    sm_index box[SM_MAX_WORKER_DEVICES];
    const sm_shard_info *sh[SM_MAX_WORKER_DEVICES];
    unsigned char grants[SM_MAX_WORKER_DEVICES * SM_GRANT_LEN];
    const sm_shard_info *s = &j->all[j->pick[j->first[i]]];
    for (int k = 0; k < n; k++) {
        sh[k] = &j->all[j->pick[j->first[i] + k]];
        dev[k] = sh[k]->device;
        box[k] = sh[k]->index;
    }
    sm_array_id id = s->stored_as ? (sm_array_id){s->stored_as} : j->info->id;
    return client_download_boxes(j->c, s->worker_address, id, n, dev, box,
                                 client_grants(j->c, n, sh, grants), j->info->dtype, j->dst,
                                 &j->info->shape, &j->prog, err, errlen);
}

/* fetch_task when the workers write into a staging segment: index 0
 * maps the pages of the caller's memory meanwhile (a new array's page
 * faults would otherwise come one by one in the copy out of the
 * segment, after the workers are done), the others fetch. */
static sm_err fetch_staged_task(void *user, int i, char *err, size_t errlen)
{
    fetch_job *j = user;
    if (i > 0)
        return fetch_task(user, i - 1, err, errlen);
    (void)madvise(j->out, j->outlen, MADV_POPULATE_WRITE);
    return SM_OK;
}

/* Groups j->pick by worker, at most SM_MAX_WORKER_DEVICES shards a group. */
static sm_err group_by_worker(fetch_job *j, char *err, size_t errlen)
{
    uint32_t *wid = malloc(sizeof *wid * ((size_t)j->n + 1));
    int *order = malloc(sizeof *order * ((size_t)j->n + 1));
    int *pick = malloc(sizeof *pick * ((size_t)j->n + 1));
    j->first = malloc(sizeof *j->first * ((size_t)j->n + 2));
    j->ngroups = -1;
    if (wid && order && pick && j->first) {
        for (int k = 0; k < j->n; k++) /* a group reads one array id: each copy apart */
            wid[k] = j->all[j->pick[k]].stored_as ? UINT32_C(0x80000000) | (uint32_t)k
                                                  : j->all[j->pick[k]].worker_id.v;
        j->ngroups = client_group_by(wid, j->n, SM_MAX_WORKER_DEVICES, order, j->first);
        for (int k = 0; k < j->n; k++)
            pick[k] = j->pick[order[k]];
        memcpy(j->pick, pick, sizeof *pick * (size_t)j->n);
    }
    free(wid);
    free(order);
    free(pick);
    if (j->ngroups < 0) {
        free(j->first);
        j->first = NULL;
        return sm_fail(err, errlen, SM_ENOMEM, "out of memory");
    }
    return SM_OK;
}

/* Fetches the whole array described by info into dst (row-major, global
 * shape). */
static sm_err fetch_all(sm_client *c, const sm_array_info *info, void *dst, char *err,
                        size_t errlen)
{
    fetch_job j = {.c = c, .info = info, .dst = dst};
    int64_t total = 0;
    sm_err e;

    if ((e = check_ready(info, err, errlen)) || (e = check_reduced(info, err, errlen)))
        return e;
    if ((e = sm_shape_nbytes(&info->shape, info->dtype, &total, err, errlen)))
        return e;
    int nall = 0;
    if (!(j.all = all_shards(info, &nall)))
        return sm_fail(err, errlen, SM_ENOMEM, "out of memory");
    if ((e = pick_shards(info, j.all, nall, &j.pick, &j.n, err, errlen))) {
        free(j.all);
        return e;
    }
    /* One stream per worker, the workers' streams in flight at once. */
    if ((e = group_by_worker(&j, err, errlen))) {
        free(j.pick);
        free(j.all);
        return e;
    }
    /* Into ordinary memory from workers on this host: through a staging
     * segment, which the workers write into, copied out after */
    void *stage = client_stage_take(c, info, 1, dst, total);
    client_progress_init(&j.prog, c, total);
    if (stage) {
        j.dst = stage;
        j.out = (void *)((uintptr_t)dst & ~(uintptr_t)(sysconf(_SC_PAGESIZE) - 1));
        j.outlen = (size_t)total + (size_t)((char *)dst - (char *)j.out);
        e = sm_tpool_run(NULL, j.ngroups + 1, 3, fetch_staged_task, &j, err, errlen);
    } else {
        e = sm_tpool_run(NULL, j.ngroups, 2, fetch_task, &j, err, errlen);
    }
    client_progress_destroy(&j.prog);
    if (stage && !e)
        memcpy(dst, stage, (size_t)total);
    client_stage_give(c, stage);
    free(j.pick);
    free(j.first);
    free(j.all);
    return e;
}

sm_err sm_client_get_described(sm_client *c, const sm_array_info *info, sm_array **out, char *err,
                               size_t errlen)
{
    sm_array *a = NULL;
    sm_err e;

    *out = NULL;
    if ((e = check_ready(info, err, errlen)))
        return e;
    if ((e = sm_array_create_in(c->arrays, info->dtype, &info->shape, 0, &a, err, errlen)))
        return e;
    if ((e = fetch_all(c, info, a->data, err, errlen))) {
        sm_array_free(a);
        return e;
    }
    *out = a;
    return SM_OK;
}

sm_err sm_client_get_into(sm_client *c, const sm_array_info *info, void *dst, size_t dstlen,
                          char *err, size_t errlen)
{
    int64_t nbytes = 0;
    char ref[200];
    sm_err e;

    if ((e = check_ready(info, err, errlen)) ||
        (e = sm_shape_nbytes(&info->shape, info->dtype, &nbytes, err, errlen)))
        return e;
    if ((uint64_t)nbytes != (uint64_t)dstlen)
        return sm_fail(err, errlen, SM_EINVAL,
                       "array %s holds %lld bytes; the buffer given for it holds %zu",
                       ref_text(info, ref, sizeof ref), (long long)nbytes, dstlen);
    if (nbytes > 0 && !dst)
        return sm_fail(err, errlen, SM_EINVAL, "no buffer was given to fetch array %s into",
                       ref_text(info, ref, sizeof ref));
    return fetch_all(c, info, dst, err, errlen);
}

sm_err sm_client_get(sm_client *c, sm_array_ref ref, sm_array **out, char *err, size_t errlen)
{
    sm_array_info info;
    sm_err e;

    *out = NULL;
    if ((e = sm_client_describe(c, ref, &info, err, errlen)))
        return e;
    e = sm_client_get_described(c, &info, out, err, errlen);
    sm_array_info_free(&info);
    return e;
}

sm_err sm_client_get_file(sm_client *c, sm_array_ref ref, const char *path, char *err,
                          size_t errlen)
{
    sm_array_info info;
    char hdr[4096], *tmp = NULL;
    size_t hlen = 0, maplen = 0;
    int64_t nbytes = 0;
    void *map = MAP_FAILED;
    int fd = -1;
    sm_err e;

    if ((e = sm_client_describe(c, ref, &info, err, errlen)))
        return e;
    if ((e = check_ready(&info, err, errlen)) ||
        (e = sm_shape_nbytes(&info.shape, info.dtype, &nbytes, err, errlen)) ||
        (e = sm_npy_format_header(info.dtype, &info.shape, hdr, sizeof hdr, &hlen, err, errlen)))
        goto done;
    /* Written beside path and renamed over it, so a failure leaves no half
     * file. */
    size_t tlen = strlen(path) + 16;
    if (!(tmp = malloc(tlen))) {
        e = sm_fail(err, errlen, SM_ENOMEM, "out of memory");
        goto done;
    }
    snprintf(tmp, tlen, "%s.partXXXXXX", path);
    if ((fd = mkstemp(tmp)) < 0) {
        free(tmp);
        tmp = NULL;
        e = sm_fail(err, errlen, SM_EIO, "cannot create a file beside %s", path);
        goto done;
    }
    (void)fchmod(fd, 0644);
    maplen = hlen + (size_t)nbytes;
    if (pwrite(fd, hdr, hlen, 0) != (ssize_t)hlen || ftruncate(fd, (off_t)maplen) < 0) {
        e = sm_fail(err, errlen, SM_EIO, "cannot write %zu bytes to %s", maplen, path);
        goto done;
    }
    map = mmap(NULL, maplen, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (map == MAP_FAILED) {
        e = sm_fail(err, errlen, SM_EIO, "cannot map %s into memory", path);
        goto done;
    }
    if ((e = fetch_all(c, &info, (char *)map + hlen, err, errlen)))
        goto done;
    if (munmap(map, maplen) < 0 || close(fd) < 0) {
        map = MAP_FAILED;
        fd = -1;
        e = sm_fail(err, errlen, SM_EIO, "cannot write %s", path);
        goto done;
    }
    map = MAP_FAILED;
    fd = -1;
    if (rename(tmp, path) < 0) {
        e = sm_fail(err, errlen, SM_EIO, "cannot rename the downloaded data to %s", path);
        goto done;
    }
    free(tmp);
    tmp = NULL;
done:
    if (map != MAP_FAILED)
        munmap(map, maplen);
    if (fd >= 0)
        close(fd);
    if (tmp) {
        unlink(tmp);
        free(tmp);
    }
    sm_array_info_free(&info);
    return e;
}

sm_err sm_client_get_shard(sm_client *c, sm_array_ref ref, int32_t device, sm_array **out,
                           char *err, size_t errlen)
{
    sm_array_info info;
    sm_array *a = NULL;
    const sm_shard_info *s = NULL;
    client_progress prog;
    char rb[200];
    sm_err e;

    *out = NULL;
    if ((e = sm_client_describe(c, ref, &info, err, errlen)))
        return e;
    if ((e = check_ready(&info, err, errlen)))
        goto done;
    for (int i = 0; i < info.nshards && !s; i++)
        if (info.shards[i].device == device)
            s = &info.shards[i];
    if (!s) {
        e = sm_fail(err, errlen, SM_EINVAL, "device %d holds no shard of array %s", (int)device,
                    ref_text(&info, rb, sizeof rb));
        goto done;
    }
    /* a lost shard is read from a live copy of the same block, if any (not
     * for an unreduced array: its devices' blocks are not copies) */
    for (int i = 0;
         !s->present && !info.sharding.spec.nunreduced && i < info.nshards + info.ncopies; i++) {
        const sm_shard_info *o =
            i < info.nshards ? &info.shards[i] : &info.copies[i - info.nshards];
        if (o->present && sm_index_equal(&o->index, &s->index))
            s = o;
    }
    if (!s->present) {
        e = sm_fail(err, errlen, SM_EUNAVAILABLE,
                    "the shard of array %s on device %d is lost with its worker",
                    ref_text(&info, rb, sizeof rb), (int)device);
        goto done;
    }
    sm_shape shape = sm_index_shape(&s->index);
    sm_index full = sm_index_full(&shape);
    if ((e = sm_array_create_in(c->arrays, info.dtype, &shape, 0, &a, err, errlen)))
        goto done;
    client_progress_init(&prog, c, a->nbytes);
    unsigned char grant[SM_GRANT_LEN];
    void *stage = client_stage_take(c, &info, 1, a->data, a->nbytes);
    e = client_download_box(c, s->worker_address,
                            s->stored_as ? (sm_array_id){s->stored_as} : info.id, s->device,
                            client_grants(c, 1, &s, grant), info.dtype, stage ? stage : a->data,
                            &shape, &full, &prog, err, errlen);
    if (stage && !e)
        memcpy(a->data, stage, (size_t)a->nbytes);
    client_stage_give(c, stage);
    client_progress_destroy(&prog);
    if (e) {
        sm_array_free(a);
        goto done;
    }
    *out = a;
done:
    sm_array_info_free(&info);
    return e;
}
