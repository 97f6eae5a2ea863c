/* ckpt: a worker's side of checkpoints. See ckpt.h. */
#include "ckpt.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sm_array.h"
#include "sm_checksum.h"
#include "sm_log.h"

#define CKPT_PATH 4352
/* Reads and writes move at most this much per system call. */
#define CKPT_IO (8 << 20)
/* The first read of a stored file, enough for any header shmap writes. */
#define CKPT_HEAD 4096

static sm_err ckpt_errno(char *err, size_t errlen, int en, const char *what, const char *path)
{
    sm_err code = en == EACCES || en == EPERM || en == EROFS ? SM_EPERM
                  : en == ENOSPC || en == EDQUOT             ? SM_ERESOURCE
                                                 : SM_EPRECONDITION; /* the directory's state */
    return sm_fail(err, errlen, code, "cannot %s %s: %s", what, path, strerror(en));
}

/* mkdir -p. */
static sm_err ckpt_mkdirs(const char *dir, char *err, size_t errlen)
{
    char p[CKPT_PATH];
    struct stat st;
    if (snprintf(p, sizeof p, "%s", dir) >= (int)sizeof p)
        return sm_fail(err, errlen, SM_EINVAL, "the path %s is too long", dir);
    for (char *s = p + 1;; s++) {
        if (*s != '/' && *s)
            continue;
        char c = *s;
        *s = 0;
        if (mkdir(p, 0755) != 0 && errno != EEXIST)
            return ckpt_errno(err, errlen, errno, "create the directory", p);
        *s = c;
        if (!c)
            break;
    }
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return sm_fail(err, errlen, SM_EINVAL, "%s is not a directory", dir);
    return SM_OK;
}

static sm_err ckpt_fsync_dir(const char *dir, char *err, size_t errlen)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd < 0)
        return ckpt_errno(err, errlen, errno, "open the directory", dir);
    int rc = fsync(fd);
    int en = errno;
    close(fd);
    return rc ? ckpt_errno(err, errlen, en, "sync the directory", dir) : SM_OK;
}

static sm_err ckpt_write_all(int fd, const void *p, size_t n, const char *path, char *err,
                             size_t errlen)
{
    const char *c = p;
    while (n) {
        ssize_t w = write(fd, c, n < CKPT_IO ? n : CKPT_IO);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return ckpt_errno(err, errlen, w < 0 ? errno : EIO, "write", path);
        c += w;
        n -= (size_t)w;
    }
    return SM_OK;
}

/* The xxHash3-64 of a file's chunks, fed its bytes in order from pos:
 * when a chunk is complete its digest is stored in sums[k] (writing) or
 * compared with it (reading: *bad set to the first chunk that differs). */
typedef struct {
    sm_checksum *ck;
    int64_t pos, chunk, bytes; /* next file offset; chunk size; file size */
    uint64_t *sums;
    const uint64_t *want;
    int bad;      /* -1, or the first chunk whose digest differs */
    uint64_t got; /* that chunk's digest */
} ckpt_chunks;

static void ckpt_chunks_feed(ckpt_chunks *c, const void *p, size_t n)
{
    const char *b = p;
    while (n) {
        int64_t k = c->pos / c->chunk, end = (k + 1) * c->chunk;
        if (end > c->bytes)
            end = c->bytes;
        size_t take = (size_t)(end - c->pos) < n ? (size_t)(end - c->pos) : n;
        sm_checksum_update(c->ck, b, take);
        b += take;
        n -= take;
        c->pos += (int64_t)take;
        if (c->pos == end) {
            uint64_t d = sm_checksum_digest(c->ck);
            if (c->sums)
                c->sums[k] = d;
            if (c->want && d != c->want[k] && c->bad < 0) {
                c->bad = (int)k;
                c->got = d;
            }
            sm_checksum_reset(c->ck);
        }
    }
}

/* The chunk size of a file of `bytes`: 4 MiB, or more (whole MiB) so that
 * there are at most SM_SVC_CKPT_CHUNKS. */
static int64_t ckpt_chunk_size(int64_t bytes)
{
    int64_t c = 4 << 20, per = (bytes + SM_SVC_CKPT_CHUNKS - 1) / SM_SVC_CKPT_CHUNKS;
    if (per > c)
        c = (per + (1 << 20) - 1) / (1 << 20) * (1 << 20);
    return c;
}

/* Writes the pieces (head, data) to dir/name through dir/name.tmp: fsync,
 * rename. The checksum of everything written goes to *sum and, when out is
 * not NULL, the chunks' to out (chunk_bytes, nchunks, chunk_sums). */
static sm_err ckpt_file_write(const char *dir, const char *name, const void *head, size_t nhead,
                              const void *data, size_t ndata, uint64_t *sum, sm_svc_ckpt_file *out,
                              char *err, size_t errlen)
{
    char path[CKPT_PATH], tmp[CKPT_PATH + 8];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    int64_t bytes = (int64_t)(nhead + ndata);
    sm_checksum *ck = sm_checksum_create();
    ckpt_chunks cc = {sm_checksum_create(),
                      0,
                      ckpt_chunk_size(bytes),
                      bytes,
                      out ? out->chunk_sums : NULL,
                      NULL,
                      -1,
                      0};
    if (!ck || !cc.ck) {
        sm_checksum_free(ck);
        sm_checksum_free(cc.ck);
        return sm_fail(err, errlen, SM_ENOMEM, "out of memory writing %s", path);
    }
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    sm_err e = fd < 0 ? ckpt_errno(err, errlen, errno, "create", tmp) : SM_OK;
    if (!e && !(e = ckpt_write_all(fd, head, nhead, tmp, err, errlen))) {
        sm_checksum_update(ck, head, nhead);
        ckpt_chunks_feed(&cc, head, nhead);
    }
    for (size_t off = 0; !e && off < ndata; off += CKPT_IO) {
        size_t n = ndata - off < CKPT_IO ? ndata - off : CKPT_IO;
        if (!(e = ckpt_write_all(fd, (const char *)data + off, n, tmp, err, errlen))) {
            sm_checksum_update(ck, (const char *)data + off, n);
            ckpt_chunks_feed(&cc, (const char *)data + off, n);
        }
    }
    if (out) {
        out->chunk_bytes = cc.chunk;
        out->nchunks = (int)((bytes + cc.chunk - 1) / cc.chunk);
    }
    sm_checksum_free(cc.ck);
    if (!e && fsync(fd) != 0)
        e = ckpt_errno(err, errlen, errno, "sync", tmp);
    if (fd >= 0 && close(fd) != 0 && !e)
        e = ckpt_errno(err, errlen, errno, "close", tmp);
    if (!e && rename(tmp, path) != 0)
        e = ckpt_errno(err, errlen, errno, "rename into place", tmp);
    if (e && fd >= 0)
        unlink(tmp);
    *sum = sm_checksum_digest(ck);
    sm_checksum_free(ck);
    return e;
}

/* Writes one device's shard; out gets its size and checksum. */
static sm_err ckpt_shard_write(sm_handlers *h, const sm_svc_ckpt_write_req *req,
                               const sm_svc_ckpt_file *f, sm_svc_ckpt_file *out, char *err,
                               size_t errlen)
{
    sm_store_shard *sh = NULL;
    char head[CKPT_HEAD];
    size_t nhead = 0;
    sm_err e = sm_store_get(h->store, req->array_id, f->device, &sh, err, errlen);
    if (e)
        return e;
    if (sh->dtype == SM_BF16)
        e = sm_fail(err, errlen, SM_EUNIMPLEMENTED,
                    "array %llu is bf16, which numpy (and so a checkpoint's .npy files) cannot "
                    "hold; cast it to f32 first",
                    (unsigned long long)req->array_id.v);
    if (!e)
        e = sm_npy_format_header(sh->dtype, &sh->shape, head, sizeof head, &nhead, err, errlen);
    if (!e)
        e = ckpt_file_write(req->dir, f->file, head, nhead, sh->data, (size_t)sh->nbytes,
                            &out->checksum, out, err, errlen);
    if (!e)
        out->bytes = (int64_t)nhead + sh->nbytes;
    sm_store_shard_release(sh);
    return e;
}

sm_err sm_ckpt_write(sm_handlers *h, const sm_svc_ckpt_write_req *req, sm_svc_ckpt_file *out,
                     char *err, size_t errlen)
{
    char mpath[CKPT_PATH];
    struct stat st;
    sm_err e = ckpt_mkdirs(req->dir, err, errlen);
    if (e)
        return e;
    snprintf(mpath, sizeof mpath, "%s/%s", req->dir, SM_CKPT_MANIFEST);
    if (stat(mpath, &st) == 0)
        return sm_fail(err, errlen, SM_EEXIST,
                       "%s already holds a checkpoint (%s); remove it or save to another "
                       "directory",
                       req->dir, mpath);
    if (req->nfiles == 0) {
        uint64_t sum;
        const char *m = req->manifest ? req->manifest : "";
        e = ckpt_file_write(req->dir, SM_CKPT_MANIFEST, m, strlen(m), NULL, 0, &sum, NULL, err,
                            errlen);
    }
    for (int k = 0; !e && k < req->nfiles; k++)
        e = ckpt_shard_write(h, req, &req->files[k], &out[k], err, errlen);
    if (!e)
        e = ckpt_fsync_dir(req->dir, err, errlen);
    if (!e)
        SM_DEBUG("wrote %d checkpoint file(s) of array %llu into %s", req->nfiles,
                 (unsigned long long)req->array_id.v, req->dir);
    return e;
}

sm_err sm_ckpt_manifest_read(const char *dir, char **text, char *err, size_t errlen)
{
    char path[CKPT_PATH];
    struct stat st;
    *text = NULL;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return sm_fail(err, errlen, SM_ENOTFOUND, "there is no checkpoint directory %s", dir);
    snprintf(path, sizeof path, "%s/%s", dir, SM_CKPT_MANIFEST);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT)
        return sm_fail(err, errlen, SM_EDATALOSS,
                       "%s is missing: the save that wrote %s did not finish, or it is not a "
                       "checkpoint",
                       path, dir);
    if (fd < 0 || fstat(fd, &st) != 0) {
        char why[512];
        sm_err e = ckpt_errno(why, sizeof why, errno, "read", path);
        if (fd >= 0)
            close(fd);
        return sm_fail(err, errlen, e == SM_EPRECONDITION ? SM_EDATALOSS : e, "%s", why);
    }
    sm_err e = SM_OK;
    size_t n = (size_t)st.st_size, got = 0;
    char *buf = NULL;
    if (st.st_size > (4 << 20) - 1)
        e = sm_fail(err, errlen, SM_EDATALOSS,
                    "%s is %lld bytes long, more than a manifest can be (4 MiB)", path,
                    (long long)st.st_size);
    else if (!(buf = malloc(n + 1)))
        e = sm_fail(err, errlen, SM_ENOMEM, "out of memory reading %s", path);
    while (!e && got < n) {
        ssize_t r = read(fd, buf + got, n - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            e = sm_fail(err, errlen, SM_EDATALOSS, "cannot read %s: %s", path,
                        r < 0 ? strerror(errno) : "it ended early");
        else
            got += (size_t)r;
    }
    close(fd);
    if (!e && memchr(buf, 0, n))
        e = sm_fail(err, errlen, SM_EDATALOSS, "%s holds a NUL byte: it is not a manifest", path);
    if (e) {
        free(buf);
        return e;
    }
    buf[n] = 0;
    *text = buf;
    return SM_OK;
}

/* ---- load ------------------------------------------------------------------ */

static int ckpt_shape_eq(const sm_shape *a, const sm_shape *b)
{
    if (a->rank != b->rank)
        return 0;
    for (int d = 0; d < a->rank; d++)
        if (a->dims[d] != b->dims[d])
            return 0;
    return 1;
}

/* A piece that takes file f whole into a new shard of the file's shape: the
 * file's data can be read straight into that shard. Returns the shard
 * index, or -1. */
static int ckpt_landing(const sm_svc_assemble_req *req, int f)
{
    const sm_shape *fs = &req->files[f].shape;
    for (int i = 0; i < req->nshards; i++) {
        const sm_svc_assemble_shard *s = &req->shards[i];
        if (!ckpt_shape_eq(&s->shape, fs))
            continue;
        for (int k = 0; k < s->npieces; k++) {
            const sm_svc_piece *p = &s->pieces[k];
            int whole = p->src_file == f + 1 && p->src_box.rank == fs->rank;
            for (int d = 0; whole && d < fs->rank; d++)
                whole = p->src_box.r[d].start == 0 && p->src_box.r[d].stop == fs->dims[d] &&
                        p->dst_offset[d] == 0;
            if (whole)
                return i;
        }
    }
    return -1;
}

int sm_ckpt_shard_is_landing(const sm_svc_assemble_req *req, int i)
{
    const sm_svc_assemble_shard *s = &req->shards[i];
    for (int k = 0; k < s->npieces; k++) {
        int f = s->pieces[k].src_file - 1;
        if (f >= 0 && f < req->nfiles && ckpt_landing(req, f) == i)
            return 1;
    }
    return 0;
}

static sm_err ckpt_read_all(int fd, void *p, size_t n, const char *path, char *err, size_t errlen)
{
    char *c = p;
    while (n) {
        ssize_t r = read(fd, c, n < CKPT_IO ? n : CKPT_IO);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return sm_fail(err, errlen, SM_EDATALOSS, "cannot read %s: %s", path,
                           r < 0 ? strerror(errno) : "it is shorter than it was a moment ago");
        c += r;
        n -= (size_t)r;
    }
    return SM_OK;
}

/* The rows [*lo, *hi) of file f (along its first dimension) that req's
 * pieces take; all of them for a rank-0 file or a landing one. */
static void ckpt_rows(const sm_svc_assemble_req *req, int f, int landing, int64_t *lo, int64_t *hi)
{
    const sm_shape *fs = &req->files[f].shape;
    if (fs->rank == 0 || landing) {
        *lo = 0;
        *hi = fs->rank ? fs->dims[0] : 1;
        return;
    }
    *lo = fs->dims[0];
    *hi = 0;
    for (int i = 0; i < req->nshards; i++)
        for (int k = 0; k < req->shards[i].npieces; k++) {
            const sm_svc_piece *p = &req->shards[i].pieces[k];
            if (p->src_file != f + 1 || p->src_box.rank != fs->rank)
                continue;
            if (p->src_box.r[0].start < *lo)
                *lo = p->src_box.r[0].start;
            if (p->src_box.r[0].stop > *hi)
                *hi = p->src_box.r[0].stop;
        }
    if (*lo < 0)
        *lo = 0;
    if (*hi > fs->dims[0])
        *hi = fs->dims[0];
    if (*hi < *lo)
        *hi = *lo;
}

/* What was read of a file: rows [lo, hi) of it as an array of shape
 * `shape` (the file's, with hi - lo rows) at `data`. */
typedef struct {
    int64_t lo, hi;
    sm_shape shape;
    const char *data;
} ckpt_view;

/* Reads the part of file f that req's pieces need, whole chunks of it, and
 * checks it: the file's size, its .npy header against the manifest entry,
 * and the xxHash3-64 of every chunk read. The rows needed land in the
 * landing shard's buffer (all of them) or in *own (sm_array_scratch from
 * pool, *nown bytes). */
static sm_err ckpt_file_read(sm_array_pool *pool, const sm_svc_assemble_req *req, int f,
                             sm_store_shard *landing, ckpt_view *v, void **own, size_t *nown,
                             char *err, size_t errlen)
{
    const sm_svc_ckpt_file *cf = &req->files[f];
    char path[CKPT_PATH], b1[96], b2[96];
    unsigned char head[CKPT_HEAD];
    struct stat st;
    sm_npy_info info;
    sm_err e = SM_OK;
    snprintf(path, sizeof path, "%s/%s", req->ckpt_dir, cf->file);
    if (cf->nchunks < 1 || cf->chunk_bytes < 1 ||
        (cf->bytes + cf->chunk_bytes - 1) / cf->chunk_bytes != cf->nchunks)
        return sm_fail(err, errlen, SM_EINVAL,
                       "checkpoint file %s comes with %d chunk checksums for %lld bytes in "
                       "chunks of %lld",
                       path, cf->nchunks, (long long)cf->bytes, (long long)cf->chunk_bytes);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return sm_fail(err, errlen, SM_EDATALOSS, "checkpoint file %s cannot be opened: %s", path,
                       strerror(errno));
    ckpt_chunks cc = {
        sm_checksum_create(), 0, cf->chunk_bytes, cf->bytes, NULL, cf->chunk_sums, -1, 0};
    if (!cc.ck) {
        close(fd);
        return sm_fail(err, errlen, SM_ENOMEM, "out of memory reading %s", path);
    }
    posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL); /* a hint: more read-ahead */
    if (fstat(fd, &st) != 0)
        e = sm_fail(err, errlen, SM_EDATALOSS, "cannot stat %s: %s", path, strerror(errno));
    else if ((int64_t)st.st_size != cf->bytes)
        e = sm_fail(err, errlen, SM_EDATALOSS,
                    "checkpoint file %s is %s: it has %lld bytes, the manifest says %lld", path,
                    (int64_t)st.st_size < cf->bytes ? "truncated" : "damaged (too long)",
                    (long long)st.st_size, (long long)cf->bytes);
    size_t nh = cf->bytes < CKPT_HEAD ? (size_t)cf->bytes : CKPT_HEAD;
    if (!e)
        e = ckpt_read_all(fd, head, nh, path, err, errlen);
    if (!e && sm_npy_parse_header(head, nh, &info, b1, sizeof b1))
        e = sm_fail(err, errlen, SM_EDATALOSS, "checkpoint file %s has a damaged .npy header: %s",
                    path, b1);
    if (!e && sm_npy_layout_issue(&info)) /* shmap writes neither */
        e = sm_fail(err, errlen, SM_EDATALOSS, "checkpoint file %s: %s", path,
                    sm_npy_layout_issue(&info));
    if (!e && (info.dtype != req->dtype || !ckpt_shape_eq(&info.shape, &cf->shape) ||
               info.data_offset + info.nbytes != cf->bytes || info.data_offset > (int64_t)nh))
        e = sm_fail(err, errlen, SM_EDATALOSS,
                    "checkpoint file %s holds %s%s, but the manifest says %s%s in %lld bytes", path,
                    sm_dtype_name(info.dtype), sm_shape_format(&info.shape, b1, sizeof b1),
                    sm_dtype_name(req->dtype), sm_shape_format(&cf->shape, b2, sizeof b2),
                    (long long)cf->bytes);
    if (e)
        goto out;
    /* the rows needed, as file offsets, widened to whole chunks */
    int64_t d0 = info.data_offset, lo, hi;
    ckpt_rows(req, f, landing != NULL, &lo, &hi);
    int64_t rows = cf->shape.rank ? cf->shape.dims[0] : 1;
    int64_t rb = rows ? info.nbytes / rows : 0; /* bytes of one row */
    int64_t want_lo = d0 + lo * rb, want_hi = d0 + hi * rb;
    int64_t start = want_lo / cc.chunk * cc.chunk;
    int64_t end = want_hi == want_lo ? start : (want_hi + cc.chunk - 1) / cc.chunk * cc.chunk;
    if (end > cf->bytes)
        end = cf->bytes;
    /* the data part of [start, end) lands at buf[0 ..) */
    int64_t a = start > d0 ? start - d0 : 0, b = end > d0 ? end - d0 : 0;
    char *buf = NULL;
    if (landing)
        buf = landing->data; /* a = 0, b = all of the data */
    else if (b > a && (e = sm_array_scratch(pool, (size_t)(b - a), "a checkpoint file", own, err,
                                            errlen)) == SM_OK) {
        *nown = (size_t)(b - a);
        buf = *own;
    }
    if (e)
        goto out;
    cc.pos = start;
    if (lseek(fd, (off_t)start, SEEK_SET) != (off_t)start) {
        e = sm_fail(err, errlen, SM_EDATALOSS, "cannot seek in %s: %s", path, strerror(errno));
        goto out;
    }
    if (start < d0) { /* the header, again: its chunk is checked too */
        if (!(e = ckpt_read_all(fd, head, (size_t)(d0 - start), path, err, errlen)))
            ckpt_chunks_feed(&cc, head, (size_t)(d0 - start));
    }
    for (int64_t off = a; !e && off < b; off += CKPT_IO) {
        size_t n = b - off < CKPT_IO ? (size_t)(b - off) : CKPT_IO;
        if (!(e = ckpt_read_all(fd, buf + (off - a), n, path, err, errlen)))
            ckpt_chunks_feed(&cc, buf + (off - a), n);
    }
    if (!e && cc.bad >= 0) {
        int64_t cs = (int64_t)cc.bad * cc.chunk, ce = cs + cc.chunk;
        e = sm_fail(err, errlen, SM_EDATALOSS,
                    "checkpoint file %s is corrupted: its bytes [%lld, %lld) have xxHash3-64 "
                    "%016" PRIx64 ", the manifest says %016" PRIx64,
                    path, (long long)cs, (long long)(ce < cf->bytes ? ce : cf->bytes), cc.got,
                    cf->chunk_sums[cc.bad]);
    }
    if (!e) {
        v->lo = lo;
        v->hi = hi;
        v->shape = cf->shape;
        if (v->shape.rank)
            v->shape.dims[0] = hi - lo;
        v->data = buf ? buf + (d0 + lo * rb - d0 - a) : NULL;
    }
out:
    sm_checksum_free(cc.ck);
    close(fd);
    return e;
}

sm_err sm_ckpt_load_pieces(sm_array_pool *pool, const sm_svc_assemble_req *req,
                           sm_store_shard **shards, char *err, size_t errlen)
{
    size_t elem = sm_dtype_size(req->dtype);
    for (int f = 0; f < req->nfiles; f++) {
        const sm_svc_ckpt_file *cf = &req->files[f];
        int used = 0;
        for (int i = 0; i < req->nshards && !used; i++)
            for (int k = 0; k < req->shards[i].npieces && !used; k++)
                used = req->shards[i].pieces[k].src_file == f + 1;
        if (!used)
            continue;
        int li = ckpt_landing(req, f);
        void *own = NULL;
        size_t nown = 0;
        ckpt_view v;
        sm_err e =
            ckpt_file_read(pool, req, f, li >= 0 ? shards[li] : NULL, &v, &own, &nown, err, errlen);
        for (int i = 0; !e && i < req->nshards; i++) {
            const sm_svc_assemble_shard *s = &req->shards[i];
            for (int k = 0; !e && k < s->npieces; k++) {
                const sm_svc_piece *p = &s->pieces[k];
                int64_t src_off[SM_MAX_RANK], extent[SM_MAX_RANK];
                char inner[512];
                if (p->src_file != f + 1 || i == li) /* the landing shard holds it already */
                    continue;
                e = sm_index_check(&p->src_box, &cf->shape, "shard", inner, sizeof inner);
                for (int d = 0; !e && d < p->src_box.rank; d++) {
                    src_off[d] = p->src_box.r[d].start - (d == 0 ? v.lo : 0);
                    extent[d] = p->src_box.r[d].stop - p->src_box.r[d].start;
                }
                if (!e)
                    e = sm_block_copy(shards[i]->data, &shards[i]->shape, p->dst_offset, v.data,
                                      &v.shape, src_off, extent, elem, inner, sizeof inner);
                if (e)
                    e = sm_fail(err, errlen, e, "piece %d of device %d from checkpoint file %s: %s",
                                k, (int)s->device, cf->file, inner);
            }
        }
        if (own)
            sm_array_data_free(pool, own, nown);
        if (e)
            return e;
    }
    return SM_OK;
}
