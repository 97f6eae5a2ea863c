/* segmap: mappings of clients' shared-memory segments and the copies
 * through them (see header). */
#define _GNU_SOURCE
#include "segmap.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>

#include "sm_block.h"
#include "sm_checksum.h"
#include "sm_shm.h"
#include "sm_time.h"
#include "sm_tpool.h"
#include "traffic.h"

/* Bytes copied between two checksum updates: the piece is still in the
 * cache (L2) when it is hashed. */
#define SEGMAP_PIECE (512 << 10)

typedef struct {
    sm_shm_seg seg; /* base NULL: a free slot */
    dev_t dev;
    ino_t ino;
    int refs;
    uint64_t used; /* the map's clock at its last use */
} segmap_entry;

struct sm_segmap {
    pthread_mutex_t mu;
    pthread_cond_t cv; /* wakes the sweeper to stop */
    pthread_t sweeper;
    int stop;
    segmap_entry e[SM_SEGMAP_MAX];
    uint64_t clock;
};

static void segmap_trim(sm_segmap *m, size_t keep_bytes);

/* Every SM_SEGMAP_SWEEP_MS: drops the mappings whose files went, so a
 * client's freed buffer does not stay alive here when no transfer
 * follows. */
static void *segmap_sweeper(void *arg)
{
    sm_segmap *m = arg;
    pthread_mutex_lock(&m->mu);
    while (!m->stop) {
        struct timespec ts = sm_time_after_ms(CLOCK_MONOTONIC, SM_SEGMAP_SWEEP_MS);
        pthread_cond_timedwait(&m->cv, &m->mu, &ts);
        if (!m->stop)
            segmap_trim(m, SM_SEGMAP_MAX_BYTES);
    }
    pthread_mutex_unlock(&m->mu);
    return NULL;
}

sm_err sm_segmap_create(sm_segmap **out, char *err, size_t errlen)
{
    sm_segmap *m = calloc(1, sizeof *m);
    if (!m)
        return sm_fail(err, errlen, SM_ENOMEM, "out of memory for the segment map");
    for (int i = 0; i < SM_SEGMAP_MAX; i++)
        m->e[i].seg.fd = -1;
    if (sm_tpool_thread_start(&m->mu, &m->cv, &m->sweeper, segmap_sweeper, m)) {
        free(m);
        return sm_fail(err, errlen, SM_ERESOURCE, "cannot start the segment map's sweeper");
    }
    *out = m;
    return SM_OK;
}

void sm_segmap_free(sm_segmap *m)
{
    if (!m)
        return;
    sm_tpool_thread_end(&m->mu, &m->cv, &m->stop, m->sweeper);
    for (int i = 0; i < SM_SEGMAP_MAX; i++)
        sm_shm_seg_close(&m->e[i].seg);
    free(m);
}

/* 1 if /dev/shm/<name> still is the file x maps. */
static int segmap_same_file(const segmap_entry *x)
{
    char path[SM_SHM_NAME_MAX + 16];
    struct stat st;
    snprintf(path, sizeof path, "/dev/shm%s", x->seg.name);
    return !stat(path, &st) && st.st_dev == x->dev && st.st_ino == x->ino;
}

/* Unmaps the idle mappings whose file went (unlinked or replaced), and
 * the least recently used idle ones while more than keep_bytes are mapped
 * or no slot is free. mu held. */
static void segmap_trim(sm_segmap *m, size_t keep_bytes)
{
    size_t total = 0;
    int nfree = 0;
    for (int i = 0; i < SM_SEGMAP_MAX; i++) {
        segmap_entry *x = &m->e[i];
        if (x->seg.base && !x->refs && !segmap_same_file(x))
            sm_shm_seg_close(&x->seg);
        if (x->seg.base)
            total += x->seg.len;
        else
            nfree++;
    }
    while (total > keep_bytes || nfree == 0) {
        segmap_entry *lru = NULL;
        for (int i = 0; i < SM_SEGMAP_MAX; i++)
            if (m->e[i].seg.base && !m->e[i].refs && (!lru || m->e[i].used < lru->used))
                lru = &m->e[i];
        if (!lru)
            return;
        total -= lru->seg.len;
        sm_shm_seg_close(&lru->seg);
        nfree++;
    }
}

/* A mapping of segment name holding at least need bytes, with a reference
 * the caller gives back with segmap_put. */
static sm_err segmap_get(sm_segmap *m, const char *name, size_t need, segmap_entry **out, char *err,
                         size_t errlen)
{
    sm_err e = SM_OK;
    pthread_mutex_lock(&m->mu);
    segmap_trim(m, SM_SEGMAP_MAX_BYTES > need ? SM_SEGMAP_MAX_BYTES - need : 0);
    segmap_entry *x = NULL;
    for (int i = 0; i < SM_SEGMAP_MAX && !x; i++)
        if (m->e[i].seg.base && !strcmp(m->e[i].seg.name, name))
            x = &m->e[i];
    if (x && (x->seg.len < need || !segmap_same_file(x))) { /* replaced, or grown since */
        if (x->refs) {
            e = sm_fail(err, errlen, SM_EUNAVAILABLE,
                        "shared-memory segment %s changed while a transfer was using it", name);
            goto done;
        }
        sm_shm_seg_close(&x->seg);
        x = NULL;
    }
    if (!x) {
        char path[SM_SHM_NAME_MAX + 16];
        struct stat st;
        for (int i = 0; i < SM_SEGMAP_MAX && !x; i++)
            if (!m->e[i].seg.base)
                x = &m->e[i];
        if (!x) {
            e = sm_fail(err, errlen, SM_ERESOURCE,
                        "%d clients' shared-memory segments are in use at once", SM_SEGMAP_MAX);
            goto done;
        }
        snprintf(path, sizeof path, "/dev/shm%s", name);
        size_t len = !stat(path, &st) && (size_t)st.st_size > need ? (size_t)st.st_size : need;
        if ((e = sm_shm_seg_open(name, len, &x->seg, err, errlen)))
            goto done;
        if (fstat(x->seg.fd, &st)) {
            sm_shm_seg_close(&x->seg);
            e = sm_fail(err, errlen, SM_EIO, "cannot stat shared-memory segment %s", name);
            goto done;
        }
        x->dev = st.st_dev;
        x->ino = st.st_ino;
        /* the client's file, not ours: no lock, so that sm_shm_sweep
         * removes it once the client is gone (killed); the mapping then
         * goes at the next transfer */
        (void)flock(x->seg.fd, LOCK_UN);
    }
    x->refs++;
    x->used = ++m->clock;
    *out = x;
done:
    pthread_mutex_unlock(&m->mu);
    return e;
}

static void segmap_put(sm_segmap *m, segmap_entry *x)
{
    pthread_mutex_lock(&m->mu);
    x->refs--;
    pthread_mutex_unlock(&m->mu);
}

void sm_segmap_stats(sm_segmap *m, int *n, size_t *bytes)
{
    *n = 0;
    *bytes = 0;
    pthread_mutex_lock(&m->mu);
    for (int i = 0; i < SM_SEGMAP_MAX; i++)
        if (m->e[i].seg.base) {
            (*n)++;
            *bytes += m->e[i].seg.len;
        }
    pthread_mutex_unlock(&m->mu);
}

/* ---- copies ------------------------------------------------------------------ */

/* One box copy between two row-major buffers, in pieces of about
 * SEGMAP_PIECE bytes, each hashed right after it was copied: from the
 * destination when dst_dense (the box is the whole destination), from the
 * source when src_dense, else row by row from the destination. */
typedef struct {
    char *dst;
    sm_shape dst_shape;
    int64_t dst_off[SM_MAX_RANK];
    const char *src;
    sm_shape src_shape;
    int64_t src_off[SM_MAX_RANK];
    int64_t ext[SM_MAX_RANK];
    int rank;
    size_t elem;
    int dst_dense, src_dense;
    sm_checksum *ck;
    char *err;
    size_t errlen;
} segmap_copy;

/* Hashes the rows of the box at off (extent ext) of buffer buf (shape s),
 * in row-major order. */
static void segmap_hash_rows(sm_checksum *ck, const char *buf, const sm_shape *s,
                             const int64_t *off, const int64_t *ext, int rank, size_t elem)
{
    int64_t idx[SM_MAX_RANK] = {0}, stride[SM_MAX_RANK];
    stride[rank - 1] = (int64_t)elem;
    for (int d = rank - 2; d >= 0; d--)
        stride[d] = stride[d + 1] * s->dims[d + 1];
    size_t row = (size_t)ext[rank - 1] * elem;
    for (;;) {
        int64_t at = 0;
        for (int d = 0; d < rank; d++)
            at += (off[d] + (d < rank - 1 ? idx[d] : 0)) * stride[d];
        sm_checksum_update(ck, buf + at, row);
        int d = rank - 2;
        while (d >= 0 && ++idx[d] == ext[d])
            idx[d--] = 0;
        if (d < 0)
            return;
    }
}

static sm_err segmap_copy_run(void *arg)
{
    segmap_copy *c = arg;
    int rank = c->rank;
    int64_t total = (int64_t)c->elem;
    for (int d = 0; d < rank; d++)
        total *= c->ext[d];
    if (total == 0)
        return SM_OK;
    if (rank == 0) {
        memcpy(c->dst, c->src, c->elem);
        sm_checksum_update(c->ck, c->dst, c->elem);
        return SM_OK;
    }
    /* k: the outermost dimension whose inner block (dims after k) fits a
     * piece; pieces are c rows of dimension k. */
    int64_t inner;
    int k = sm_block_split(c->ext, rank, c->elem, SEGMAP_PIECE, &inner);
    int64_t rows = SEGMAP_PIECE / inner > 0 ? SEGMAP_PIECE / inner : 1;
    int64_t idx[SM_MAX_RANK] = {0}, pos = 0;
    for (;;) {
        int64_t n = c->ext[k] - idx[k] < rows ? c->ext[k] - idx[k] : rows;
        int64_t so[SM_MAX_RANK], dof[SM_MAX_RANK], extent[SM_MAX_RANK], at[SM_MAX_RANK];
        sm_block_part(idx, c->ext, rank, k, n, at, extent);
        for (int d = 0; d < rank; d++) {
            so[d] = c->src_off[d] + at[d];
            dof[d] = c->dst_off[d] + at[d];
        }
        sm_err e = sm_block_copy(c->dst, &c->dst_shape, dof, c->src, &c->src_shape, so, extent,
                                 c->elem, c->err, c->errlen);
        if (e)
            return e;
        size_t len = (size_t)(n * inner);
        if (c->dst_dense)
            sm_checksum_update(c->ck, c->dst + pos, len);
        else if (c->src_dense)
            sm_checksum_update(c->ck, c->src + pos, len);
        else
            segmap_hash_rows(c->ck, c->dst, &c->dst_shape, dof, extent, rank, c->elem);
        pos += (int64_t)len;
        if (!sm_block_next(idx, c->ext, k, n))
            return SM_OK;
    }
}

/* Maps ref's segment, checks it holds the client's array (dtype t), and
 * runs the copy c (its client side filled in from the mapping: dst when
 * to_seg, else src) under the truncation guard. */
static sm_err segmap_run(sm_segmap *m, const sm_svc_shm_ref *ref, sm_dtype t, int to_seg,
                         segmap_copy *c, char *err, size_t errlen)
{
    int64_t abytes;
    segmap_entry *x = NULL;
    sm_err e;
    if ((e = sm_shape_nbytes(&ref->global, t, &abytes, err, errlen)))
        return e == SM_EOVERFLOW ? SM_EINVAL : e;
    if (ref->offset > INT64_MAX - abytes)
        return sm_fail(err, errlen, SM_EINVAL, "ShmRef offset %lld runs past 2^63 bytes",
                       (long long)ref->offset);
    size_t end = (size_t)(ref->offset + abytes);
    if ((e = segmap_get(m, ref->name, end, &x, err, errlen)))
        return e;
    if ((e = sm_shm_seg_check(&x->seg, end, err, errlen)))
        goto done;
    char *arr = (char *)x->seg.base + ref->offset;
    if (to_seg) {
        c->dst = arr;
        c->dst_shape = ref->global;
        for (int d = 0; d < ref->box.rank; d++)
            c->dst_off[d] = ref->box.r[d].start;
    } else {
        c->src = arr;
        c->src_shape = ref->global;
        for (int d = 0; d < ref->box.rank; d++)
            c->src_off[d] = ref->box.r[d].start;
    }
    c->err = err;
    c->errlen = errlen;
    int faulted = 0;
    e = sm_shm_guarded(segmap_copy_run, c, &faulted);
    if (faulted)
        e = sm_fail(err, errlen, SM_EDATALOSS,
                    "shared-memory segment %s was truncated during the copy (it no longer "
                    "holds the %zu bytes of the array)",
                    ref->name, end);
done:
    segmap_put(m, x);
    return e;
}

/* SM_EINVAL unless ref's box has shape s. */
static sm_err segmap_box_is(const sm_svc_shm_ref *ref, const sm_shape *s, char *err, size_t errlen)
{
    sm_shape bs = sm_index_shape(&ref->box);
    char a[96], b[96];
    if (ref->box.rank != ref->global.rank || !sm_shape_equal(&bs, s))
        return sm_fail(err, errlen, SM_EINVAL,
                       "the ShmRef box has shape %s where the transfer moves shape %s",
                       sm_shape_format(&bs, a, sizeof a), sm_shape_format(s, b, sizeof b));
    return SM_OK;
}

/* A copy between a segment and a shard, of the box want that ref must
 * name (segmap_box_is): c zeroed, its rank set and its checksum made. */
static sm_err segmap_copy_init(segmap_copy *c, const sm_svc_shm_ref *ref, const sm_shape *want,
                               char *err, size_t errlen)
{
    sm_err e = segmap_box_is(ref, want, err, errlen);
    if (e)
        return e;
    memset(c, 0, sizeof *c);
    if (!(c->ck = sm_checksum_create()))
        return sm_fail(err, errlen, SM_ENOMEM, "out of memory for a checksum");
    c->rank = want->rank;
    return SM_OK;
}

sm_err sm_segmap_gather(sm_segmap *m, const sm_svc_shm_ref *ref, sm_dtype t, sm_store_shard *dst,
                        uint64_t *sum, char *err, size_t errlen)
{
    segmap_copy c;
    sm_err e = segmap_copy_init(&c, ref, &dst->shape, err, errlen);
    if (e)
        return e;
    c.dst = dst->data;
    c.dst_shape = dst->shape;
    c.elem = sm_dtype_size(t);
    c.dst_dense = 1;
    for (int d = 0; d < c.rank; d++)
        c.ext[d] = dst->shape.dims[d];
    if (!(e = segmap_run(m, ref, t, 0, &c, err, errlen))) {
        *sum = sm_checksum_digest(c.ck);
        sm_traffic_add(SM_TRAFFIC_SHM_PUT_IN, dst->nbytes);
    }
    sm_checksum_free(c.ck);
    return e;
}

sm_err sm_segmap_scatter(sm_segmap *m, const sm_svc_shm_ref *ref, const sm_store_shard *src,
                         const sm_index *src_box, uint64_t *sum, char *err, size_t errlen)
{
    segmap_copy c;
    sm_shape want = sm_index_shape(src_box);
    sm_err e = segmap_copy_init(&c, ref, &want, err, errlen);
    if (e)
        return e;
    c.src = src->data;
    c.src_shape = src->shape;
    c.elem = sm_dtype_size(src->dtype);
    c.src_dense = sm_shape_equal(&want, &src->shape);
    c.dst_dense = sm_shape_equal(&want, &ref->global); /* a peer's staging: the box alone */
    int64_t nbytes = (int64_t)c.elem;
    for (int d = 0; d < c.rank; d++) {
        c.src_off[d] = src_box->r[d].start;
        c.ext[d] = want.dims[d];
        nbytes *= want.dims[d];
    }
    if (!(e = segmap_run(m, ref, src->dtype, 1, &c, err, errlen))) {
        *sum = sm_checksum_digest(c.ck);
        sm_traffic_add(SM_TRAFFIC_SHM_GET_OUT, nbytes);
        if (c.src_dense && src->has_checksum && *sum != src->checksum)
            e = sm_fail(err, errlen, SM_EDATALOSS,
                        "the shard's bytes hash to %016llx where %016llx was recorded when it "
                        "was stored",
                        (unsigned long long)*sum, (unsigned long long)src->checksum);
    }
    sm_checksum_free(c.ck);
    return e;
}

sm_err sm_segmap_unpack(const void *src, const sm_shape *box, size_t elem, void *dst,
                        const sm_shape *dst_shape, const int64_t *dst_off, const char *seg_name,
                        uint64_t *sum, char *err, size_t errlen)
{
    segmap_copy c;
    char b1[96], b2[96];
    if (box->rank != dst_shape->rank)
        return sm_fail(err, errlen, SM_EINVAL, "a %s block does not fit the destination %s",
                       sm_shape_format(box, b1, sizeof b1),
                       sm_shape_format(dst_shape, b2, sizeof b2));
    memset(&c, 0, sizeof c);
    c.dst = dst;
    c.dst_shape = *dst_shape;
    c.src = src;
    c.src_shape = *box;
    c.rank = box->rank;
    c.elem = elem;
    c.src_dense = 1;
    c.err = err;
    c.errlen = errlen;
    for (int d = 0; d < c.rank; d++) { /* the fit is sm_block_copy's to check */
        c.dst_off[d] = dst_off[d];
        c.ext[d] = box->dims[d];
    }
    if (!(c.ck = sm_checksum_create()))
        return sm_fail(err, errlen, SM_ENOMEM, "out of memory for a checksum");
    int faulted = 0;
    sm_err e = sm_shm_guarded(segmap_copy_run, &c, &faulted);
    if (faulted)
        e = sm_fail(err, errlen, SM_EDATALOSS,
                    "shared-memory segment %s was truncated during the copy out of it", seg_name);
    if (!e)
        *sum = sm_checksum_digest(c.ck);
    sm_checksum_free(c.ck);
    return e;
}
