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

/* Writes the pieces (head, data) to dir/name through dir/name.tmp: fsync,
 * rename. The checksum of everything written goes to *sum. */
static sm_err ckpt_file_write(const char *dir, const char *name, const void *head, size_t nhead,
                              const void *data, size_t ndata, uint64_t *sum, char *err,
                              size_t errlen)
{
    char path[CKPT_PATH], tmp[CKPT_PATH + 8];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    sm_checksum *ck = sm_checksum_create();
    if (!ck)
        return sm_fail(err, errlen, SM_ENOMEM, "out of memory writing %s", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    sm_err e = fd < 0 ? ckpt_errno(err, errlen, errno, "create", tmp) : SM_OK;
    if (!e && !(e = ckpt_write_all(fd, head, nhead, tmp, err, errlen)))
        sm_checksum_update(ck, head, nhead);
    for (size_t off = 0; !e && off < ndata; off += CKPT_IO) {
        size_t n = ndata - off < CKPT_IO ? ndata - off : CKPT_IO;
        if (!(e = ckpt_write_all(fd, (const char *)data + off, n, tmp, err, errlen)))
            sm_checksum_update(ck, (const char *)data + off, n);
    }
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
                            &out->checksum, err, errlen);
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
        e = ckpt_file_write(req->dir, SM_CKPT_MANIFEST, m, strlen(m), NULL, 0, &sum, err, errlen);
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

/* Reads file f into memory and checks it: *data (the data bytes, in the
 * landing shard's buffer or in *own, malloc'd with sm_array_data_alloc of
 * *nown bytes). */
static sm_err ckpt_file_read(const sm_svc_assemble_req *req, int f, sm_store_shard *landing,
                             void **data, void **own, size_t *nown, char *err, size_t errlen)
{
    const sm_svc_ckpt_file *cf = &req->files[f];
    char path[CKPT_PATH], b1[96], b2[96];
    unsigned char head[CKPT_HEAD];
    struct stat st;
    sm_npy_info info;
    sm_err e = SM_OK;
    snprintf(path, sizeof path, "%s/%s", req->ckpt_dir, cf->file);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return sm_fail(err, errlen, SM_EDATALOSS, "checkpoint file %s cannot be opened: %s", path,
                       strerror(errno));
    sm_checksum *ck = sm_checksum_create();
    if (!ck) {
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
    if (!e && (info.dtype != req->dtype || !ckpt_shape_eq(&info.shape, &cf->shape) ||
               info.data_offset + info.nbytes != cf->bytes || info.data_offset > (int64_t)nh))
        e = sm_fail(err, errlen, SM_EDATALOSS,
                    "checkpoint file %s holds %s%s, but the manifest says %s%s in %lld bytes", path,
                    sm_dtype_name(info.dtype), sm_shape_format(&info.shape, b1, sizeof b1),
                    sm_dtype_name(req->dtype), sm_shape_format(&cf->shape, b2, sizeof b2),
                    (long long)cf->bytes);
    size_t ndata = e ? 0 : (size_t)info.nbytes, early = e ? 0 : nh - (size_t)info.data_offset;
    char *dst = NULL;
    if (!e && landing) {
        dst = landing->data;
    } else if (!e && ndata) {
        if ((e = sm_array_scratch(ndata, "a checkpoint file", own, err, errlen)) == SM_OK) {
            *nown = ndata;
            dst = *own;
        }
    }
    if (!e) {
        sm_checksum_update(ck, head, nh);
        if (early)
            memcpy(dst, head + info.data_offset, early);
        for (size_t off = early; !e && off < ndata; off += CKPT_IO) {
            size_t n = ndata - off < CKPT_IO ? ndata - off : CKPT_IO;
            if (!(e = ckpt_read_all(fd, dst + off, n, path, err, errlen)))
                sm_checksum_update(ck, dst + off, n);
        }
    }
    if (!e && sm_checksum_digest(ck) != cf->checksum)
        e = sm_fail(err, errlen, SM_EDATALOSS,
                    "checkpoint file %s is corrupted: its xxHash3-64 is %016" PRIx64
                    ", the manifest says %016" PRIx64,
                    path, sm_checksum_digest(ck), cf->checksum);
    sm_checksum_free(ck);
    close(fd);
    *data = dst;
    return e;
}

sm_err sm_ckpt_load_pieces(const sm_svc_assemble_req *req, sm_store_shard **shards, char *err,
                           size_t errlen)
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
        void *data = NULL, *own = NULL;
        size_t nown = 0;
        sm_err e =
            ckpt_file_read(req, f, li >= 0 ? shards[li] : NULL, &data, &own, &nown, err, errlen);
        for (int i = 0; !e && i < req->nshards; i++) {
            const sm_svc_assemble_shard *s = &req->shards[i];
            for (int k = 0; !e && k < s->npieces; k++) {
                const sm_svc_piece *p = &s->pieces[k];
                int64_t src_off[SM_MAX_RANK], extent[SM_MAX_RANK];
                char inner[512];
                if (p->src_file != f + 1 || i == li) /* the landing shard holds it already */
                    continue;
                e = sm_handlers_check_box(&p->src_box, &cf->shape, inner, sizeof inner);
                for (int d = 0; !e && d < p->src_box.rank; d++) {
                    src_off[d] = p->src_box.r[d].start;
                    extent[d] = p->src_box.r[d].stop - p->src_box.r[d].start;
                }
                if (!e)
                    e = sm_block_copy(shards[i]->data, &shards[i]->shape, p->dst_offset, data,
                                      &cf->shape, src_off, extent, elem, inner, sizeof inner);
                if (e)
                    e = sm_fail(err, errlen, e, "piece %d of device %d from checkpoint file %s: %s",
                                k, (int)s->device, cf->file, inner);
            }
        }
        if (own)
            sm_array_data_free(own, nown);
        if (e)
            return e;
    }
    return SM_OK;
}
