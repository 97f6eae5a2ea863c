/* sm_npy: reading and writing .npy files (format versions 1.0, 2.0, 3.0).
 *
 * A .npy file is the magic "\x93NUMPY", a major and minor version byte, the
 * header length (2 bytes little-endian in 1.0, 4 bytes in 2.0 and 3.0), a
 * Python dict literal {'descr': ..., 'fortran_order': ..., 'shape': (...)}
 * padded with spaces and ended by '\n', then the raw data. */
#define _GNU_SOURCE /* O_DIRECT */
#include "sm_array.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "sm_npy assumes a little-endian host"
#endif

#define SM_NPY_MAGIC     "\x93NUMPY"
#define SM_NPY_MAGIC_LEN 6
#define SM_NPY_ALIGN     64
#define SM_NPY_BLOCK     4096 /* O_DIRECT's alignment of buffers, offsets, lengths */
#define SM_NPY_BOUNCE    (1 << 20)
#define SM_SHAPE_TEXT    200
#define SM_MSG           512

static const char *const sm_npy_descrs[] = {
#define SM_DTYPE_DESCR(e, s, l, sz, d) d,
    SM_DTYPE_LIST(SM_DTYPE_DESCR)
#undef SM_DTYPE_DESCR
};

/* Reads the preamble of b: *pre is its length and *total the length of the
 * whole header (preamble + dict). */
static sm_err sm_npy_preamble(const unsigned char *b, size_t len, size_t *pre, size_t *total,
                              char *err, size_t errlen)
{
    size_t m = len < SM_NPY_MAGIC_LEN ? len : SM_NPY_MAGIC_LEN;
    if (memcmp(b, SM_NPY_MAGIC, m) != 0)
        return sm_fail(err, errlen, SM_EFORMAT,
                       "bad magic: the data does not start with \\x93NUMPY, so it is not a "
                       ".npy file");
    if (len < 10)
        return sm_fail(err, errlen, SM_EFORMAT,
                       "truncated header: a .npy preamble needs 10 bytes but only %zu are present",
                       len);
    int major = b[6], minor = b[7];
    uint32_t hl;
    if (major == 1 && minor == 0) {
        *pre = 10;
        hl = (uint32_t)b[8] | (uint32_t)b[9] << 8;
    } else if ((major == 2 || major == 3) && minor == 0) {
        if (len < 12)
            return sm_fail(err, errlen, SM_EFORMAT,
                           "truncated header: a version %d.0 .npy preamble needs 12 bytes but "
                           "only %zu are present",
                           major, len);
        *pre = 12;
        hl = (uint32_t)b[8] | (uint32_t)b[9] << 8 | (uint32_t)b[10] << 16 | (uint32_t)b[11] << 24;
    } else {
        return sm_fail(err, errlen, SM_EUNSUPPORTED,
                       ".npy format version %d.%d is not supported (1.0, 2.0 and 3.0 are)", major,
                       minor);
    }
    if (hl > SM_NPY_MAX_HEADER)
        return sm_fail(err, errlen, SM_EFORMAT,
                       "header length %" PRIu32 " exceeds the limit of %d bytes", hl,
                       SM_NPY_MAX_HEADER);
    *total = *pre + hl;
    return SM_OK;
}

/* A bounded cursor over the header dict text. */
typedef struct {
    const char *p, *end;
} sm_cur;

static void sm_cur_space(sm_cur *c)
{
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r'))
        c->p++;
}

static int sm_cur_peek(const sm_cur *c)
{
    return c->p < c->end ? (unsigned char)*c->p : -1;
}

static int sm_cur_word(sm_cur *c, const char *w)
{
    size_t n = strlen(w);
    if ((size_t)(c->end - c->p) < n || memcmp(c->p, w, n) != 0)
        return 0;
    c->p += n;
    return 1;
}

static sm_err sm_cur_string(sm_cur *c, char *out, size_t cap, char *err, size_t errlen)
{
    int q = sm_cur_peek(c);
    if (q != '\'' && q != '"')
        return sm_fail(err, errlen, SM_EFORMAT,
                       "header dict has '%c' where a quoted string belongs", q < 0 ? '?' : q);
    const char *s = ++c->p;
    while (c->p < c->end && *c->p != q && *c->p != '\\')
        c->p++;
    if (c->p == c->end || *c->p != q)
        return sm_fail(err, errlen, SM_EFORMAT, "header dict has an unterminated string");
    size_t n = (size_t)(c->p - s);
    c->p++;
    if (n >= cap)
        return sm_fail(err, errlen, SM_EFORMAT, "header dict has a string of %zu bytes", n);
    memcpy(out, s, n);
    out[n] = '\0';
    return SM_OK;
}

/* Parses "(3, 4)", "(3,)" or "()"; Python 2 "3L" suffixes are accepted. */
static sm_err sm_cur_shape(sm_cur *c, sm_shape *out, char *err, size_t errlen)
{
    sm_shape s = {0};
    if (!sm_cur_word(c, "("))
        return sm_fail(err, errlen, SM_EFORMAT, "header 'shape' is not a tuple");
    for (;;) {
        sm_cur_space(c);
        if (sm_cur_word(c, ")"))
            break;
        int neg = sm_cur_word(c, "-");
        int ch = sm_cur_peek(c);
        if (ch < '0' || ch > '9')
            return sm_fail(err, errlen, SM_EFORMAT,
                           "header 'shape' has '%c' where a number belongs", ch < 0 ? '?' : ch);
        int64_t v = 0;
        while ((ch = sm_cur_peek(c)) >= '0' && ch <= '9') {
            if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, ch - '0', &v))
                return sm_fail(err, errlen, SM_EFORMAT, "header 'shape' has an entry above 2^63-1");
            c->p++;
        }
        sm_cur_word(c, "L");
        if (neg)
            return sm_fail(err, errlen, SM_EFORMAT, "header 'shape' has a negative entry -%" PRId64,
                           v);
        if (s.rank == SM_MAX_RANK)
            return sm_fail(err, errlen, SM_EUNSUPPORTED,
                           "header 'shape' has more than %d dimensions", SM_MAX_RANK);
        s.dims[s.rank++] = v;
        sm_cur_space(c);
        if (sm_cur_word(c, ")"))
            break;
        if (!sm_cur_word(c, ","))
            return sm_fail(err, errlen, SM_EFORMAT, "header 'shape' is not a tuple of integers");
    }
    *out = s;
    return SM_OK;
}

/* Maps a descr such as '<f4' to a dtype (*swapped: '>' on a type of 2
 * bytes and more); bf16 is never produced. */
static sm_err sm_npy_descr_dtype(const char *descr, sm_dtype *out, int *swapped, char *err,
                                 size_t errlen)
{
    char order = descr[0];
    const char *code = descr + 1;
    if (order != '<' && order != '>' && order != '|' && order != '=') {
        order = '=';
        code = descr;
    }
    if (code[0] == 'O')
        return sm_fail(err, errlen, SM_EUNSUPPORTED,
                       "object dtype '%s' (Python objects) cannot be read from .npy", descr);
    for (int t = 0; t < SM_DTYPE_COUNT; t++) {
        if (t == SM_BF16 || strcmp(code, sm_npy_descrs[t] + 1) != 0)
            continue;
        if (sm_dtype_size((sm_dtype)t) > 1 && order == '=')
            return sm_fail(err, errlen, SM_EUNSUPPORTED,
                           "descr '%s' has no explicit byte order; expected '<%s'", descr, code);
        *out = (sm_dtype)t;
        *swapped = sm_dtype_size((sm_dtype)t) > 1 && order == '>';
        return SM_OK;
    }
    return sm_fail(err, errlen, SM_EUNSUPPORTED,
                   "unknown descr '%s': supported are <f2 <f4 <f8 <i4 <i8 |u1 |b1 (and '>' ones)",
                   descr);
}

const char *sm_npy_layout_issue(const sm_npy_info *info)
{
    return info->fortran   ? "fortran_order True (column-major data) is not read here; save a "
                             "C-contiguous array"
           : info->swapped ? "big-endian data is not read here; save the array little-endian "
                             "('<')"
                           : NULL;
}

sm_err sm_npy_parse_header(const void *buf, size_t len, sm_npy_info *out, char *err, size_t errlen)
{
    if (!buf || !out)
        return sm_fail(err, errlen, SM_EINVAL, "header buffer or output is NULL");
    const unsigned char *b = buf;
    size_t pre, total;
    sm_err e = sm_npy_preamble(b, len, &pre, &total, err, errlen);
    if (e)
        return e;
    if (total > len)
        return sm_fail(err, errlen, SM_EFORMAT,
                       "truncated header: it needs %zu bytes but only %zu are present", total, len);

    sm_cur c = {(const char *)b + pre, (const char *)b + total};
    char key[32], descr[64] = "";
    int have_descr = 0, have_fortran = 0, have_shape = 0, fortran = 0;
    sm_shape shape = {0};
    sm_cur_space(&c);
    if (!sm_cur_word(&c, "{"))
        return sm_fail(err, errlen, SM_EFORMAT, "header is not a Python dict literal");
    for (;;) {
        sm_cur_space(&c);
        if (sm_cur_word(&c, "}"))
            break;
        if ((e = sm_cur_string(&c, key, sizeof key, err, errlen)))
            return e;
        sm_cur_space(&c);
        if (!sm_cur_word(&c, ":"))
            return sm_fail(err, errlen, SM_EFORMAT, "header key '%s' is not followed by ':'", key);
        sm_cur_space(&c);
        int *seen;
        if (strcmp(key, "descr") == 0) {
            seen = &have_descr;
            if (sm_cur_peek(&c) == '[')
                return sm_fail(err, errlen, SM_EUNSUPPORTED,
                               "structured dtypes (a list descr) are not supported");
            e = sm_cur_string(&c, descr, sizeof descr, err, errlen);
        } else if (strcmp(key, "fortran_order") == 0) {
            seen = &have_fortran;
            if (sm_cur_word(&c, "True"))
                fortran = 1;
            else if (!sm_cur_word(&c, "False"))
                e = sm_fail(err, errlen, SM_EFORMAT, "header 'fortran_order' is not True or False");
        } else if (strcmp(key, "shape") == 0) {
            seen = &have_shape;
            e = sm_cur_shape(&c, &shape, err, errlen);
        } else {
            return sm_fail(err, errlen, SM_EFORMAT, "header dict has unknown key '%s'", key);
        }
        if (e)
            return e;
        if (*seen)
            return sm_fail(err, errlen, SM_EFORMAT, "header dict repeats key '%s'", key);
        *seen = 1;
        sm_cur_space(&c);
        if (!sm_cur_word(&c, ",") && sm_cur_peek(&c) != '}')
            return sm_fail(err, errlen, SM_EFORMAT, "header dict has no ',' or '}' after key '%s'",
                           key);
    }
    sm_cur_space(&c);
    if (c.p != c.end)
        return sm_fail(err, errlen, SM_EFORMAT, "header has text after its dict");
    if (!have_descr || !have_fortran || !have_shape)
        return sm_fail(err, errlen, SM_EFORMAT, "header dict is missing key '%s'",
                       !have_descr     ? "descr"
                       : !have_fortran ? "fortran_order"
                                       : "shape");

    sm_dtype t = SM_F32;
    int swapped = 0;
    if ((e = sm_npy_descr_dtype(descr, &t, &swapped, err, errlen)))
        return e;
    sm_npy_info info = {.dtype = t,
                        .shape = shape,
                        .data_offset = (int64_t)total,
                        .fortran = fortran && shape.rank > 1, /* the same as C order below */
                        .swapped = swapped};
    if ((e = sm_shape_nbytes(&shape, t, &info.nbytes, err, errlen)))
        return e;
    *out = info;
    return SM_OK;
}

/* The header of an array of type t and shape s, its length a multiple of
 * align (64, as numpy writes; SM_NPY_BLOCK for direct writes). */
static sm_err sm_npy_header(sm_dtype t, const sm_shape *s, size_t align, void *buf, size_t cap,
                            size_t *written, char *err, size_t errlen)
{
    if (!buf || !written)
        return sm_fail(err, errlen, SM_EINVAL, "header buffer or length output is NULL");
    if (t == SM_BF16)
        return sm_fail(err, errlen, SM_EUNSUPPORTED,
                       "bf16 has no numpy dtype, so a bf16 array cannot be written to .npy; "
                       "convert it to f32 first");
    int64_t nbytes;
    sm_err e = sm_shape_nbytes(s, t, &nbytes, err, errlen);
    if (e)
        return e;
    char dims[SM_SHAPE_TEXT] = "";
    size_t n = 0;
    for (int d = 0; d < s->rank; d++)
        n += (size_t)snprintf(dims + n, sizeof dims - n, "%s%" PRId64, d ? ", " : "", s->dims[d]);
    if (s->rank == 1)
        snprintf(dims + n, sizeof dims - n, ",");
    char dict[SM_SHAPE_TEXT + 100];
    int dl = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }",
                      sm_npy_descrs[t], dims);
    size_t pre = 10;
    size_t total = (pre + (size_t)dl + 1 + align - 1) / align * align;
    if (total - pre > 65535) {
        pre = 12;
        total = (pre + (size_t)dl + 1 + align - 1) / align * align;
    }
    if (cap < total)
        return sm_fail(err, errlen, SM_EINVAL,
                       "the .npy header needs %zu bytes but the buffer holds %zu", total, cap);
    unsigned char *b = buf;
    size_t hl = total - pre;
    memcpy(b, SM_NPY_MAGIC, SM_NPY_MAGIC_LEN);
    b[6] = pre == 10 ? 1 : 2;
    b[7] = 0;
    for (size_t i = 0; i < pre - 8; i++)
        b[8 + i] = (unsigned char)(hl >> (8 * i));
    memcpy(b + pre, dict, (size_t)dl);
    memset(b + pre + dl, ' ', total - pre - (size_t)dl - 1);
    b[total - 1] = '\n';
    *written = total;
    return SM_OK;
}

sm_err sm_npy_format_header(sm_dtype t, const sm_shape *s, void *buf, size_t cap, size_t *written,
                            char *err, size_t errlen)
{
    return sm_npy_header(t, s, SM_NPY_ALIGN, buf, cap, written, err, errlen);
}

/* Opens path and reads its header; *fp is left just past the header. For a
 * regular file the data size is checked against the shape here. Messages do
 * not name the path; the public wrappers add it. */
static sm_err sm_npy_open(const char *path, FILE **fp, sm_npy_info *info, char *err, size_t errlen)
{
    sm_err e;
    unsigned char pre[12], *hdr = NULL;
    size_t plen, total;
    FILE *f = fopen(path, "rb");
    if (!f)
        return sm_fail(err, errlen, SM_EIO, "cannot open the file (%s)", strerror(errno));
    size_t got = fread(pre, 1, sizeof pre, f);
    if (ferror(f)) {
        e = sm_fail(err, errlen, SM_EIO, "cannot read the file (%s)", strerror(errno));
        goto fail;
    }
    if ((e = sm_npy_preamble(pre, got, &plen, &total, err, errlen)))
        goto fail;
    if (!(hdr = malloc(total > got ? total : got))) {
        e = sm_fail(err, errlen, SM_ENOMEM, "cannot allocate %zu bytes for the header", total);
        goto fail;
    }
    memcpy(hdr, pre, got);
    if (total > got) {
        got += fread(hdr + got, 1, total - got, f);
        if (ferror(f)) {
            e = sm_fail(err, errlen, SM_EIO, "cannot read the file (%s)", strerror(errno));
            goto fail;
        }
    }
    if ((e = sm_npy_parse_header(hdr, got < total ? got : total, info, err, errlen)))
        goto fail;
    if (fseeko(f, (off_t)total, SEEK_SET) != 0) {
        e = sm_fail(err, errlen, SM_EIO, "cannot seek past the header (%s)", strerror(errno));
        goto fail;
    }
    struct stat st;
    if (fstat(fileno(f), &st) == 0 && S_ISREG(st.st_mode)) {
        int64_t have = (int64_t)st.st_size - (int64_t)total;
        if (have != info->nbytes) {
            char sb[SM_SHAPE_TEXT];
            e = sm_fail(err, errlen, SM_EFORMAT,
                        "%s data: shape %s of %s needs %" PRId64
                        " bytes but the file holds %" PRId64,
                        have < info->nbytes ? "truncated" : "oversized",
                        sm_shape_format(&info->shape, sb, sizeof sb), sm_dtype_name(info->dtype),
                        info->nbytes, have);
            goto fail;
        }
    }
    free(hdr);
    *fp = f;
    return SM_OK;
fail:
    free(hdr);
    fclose(f);
    return e;
}

/* Prefixes msg with the path into err. */
static sm_err sm_npy_path_fail(const char *path, sm_err e, const char *msg, char *err,
                               size_t errlen)
{
    return sm_fail(err, errlen, e, "'%s': %s", path, msg);
}

sm_err sm_npy_read_info(const char *path, sm_npy_info *out, char *err, size_t errlen)
{
    if (!path || !out)
        return sm_fail(err, errlen, SM_EINVAL, "path or output is NULL");
    char msg[SM_MSG];
    FILE *f;
    sm_npy_info info;
    sm_err e = sm_npy_open(path, &f, &info, msg, sizeof msg);
    if (e)
        return sm_npy_path_fail(path, e, msg, err, errlen);
    fclose(f);
    *out = info;
    return SM_OK;
}

sm_err sm_npy_read(const char *path, sm_array **out, char *err, size_t errlen)
{
    return sm_npy_read_in(NULL, path, out, err, errlen);
}

/* Reverses the bytes of n elements of el bytes each, in place. */
static void sm_npy_swap(void *data, int64_t n, size_t el)
{
    unsigned char *p = data;
    for (int64_t i = 0; i < n; i++, p += el)
        for (size_t k = 0; k < el / 2; k++) {
            unsigned char t = p[k];
            p[k] = p[el - 1 - k];
            p[el - 1 - k] = t;
        }
}

/* Copies column-major src of shape s (elements of el bytes) into dst in C
 * order: dst walks its indices in order, src follows with its strides. */
static void sm_npy_from_fortran(const char *src, char *dst, const sm_shape *s, size_t el)
{
    int64_t fs[SM_MAX_RANK], idx[SM_MAX_RANK] = {0}, n = 1, off = 0;
    for (int d = 0; d < s->rank; d++) {
        fs[d] = n;
        n *= s->dims[d];
    }
    for (int64_t i = 0; i < n; i++) {
        memcpy(dst + (size_t)i * el, src + (size_t)off * el, el);
        for (int d = s->rank - 1; d >= 0; d--) {
            off += fs[d];
            if (++idx[d] < s->dims[d])
                break;
            off -= fs[d] * s->dims[d];
            idx[d] = 0;
        }
    }
}

sm_err sm_npy_read_in(sm_array_pool *pool, const char *path, sm_array **out, char *err,
                      size_t errlen)
{
    if (!path || !out)
        return sm_fail(err, errlen, SM_EINVAL, "path or output is NULL");
    char msg[SM_MSG];
    FILE *f = NULL;
    sm_array *a = NULL;
    sm_npy_info info;
    sm_err e = sm_npy_open(path, &f, &info, msg, sizeof msg);
    if (e)
        return sm_npy_path_fail(path, e, msg, err, errlen);
    if ((e = sm_array_create_in(pool, info.dtype, &info.shape, 1, &a, msg, sizeof msg)))
        goto fail;
    size_t got = a->nbytes ? fread(a->data, 1, (size_t)a->nbytes, f) : 0;
    if (ferror(f)) {
        e = sm_fail(msg, sizeof msg, SM_EIO, "cannot read the data (%s)", strerror(errno));
        goto fail;
    }
    /* Not reached for regular files, whose size sm_npy_open checked. */
    if ((int64_t)got != a->nbytes || fgetc(f) != EOF) {
        e = sm_fail(msg, sizeof msg, SM_EFORMAT,
                    "%s data: the shape needs %" PRId64 " bytes but the stream held %s%zu",
                    (int64_t)got != a->nbytes ? "truncated" : "oversized", a->nbytes,
                    (int64_t)got != a->nbytes ? "" : "more than ", got);
        goto fail;
    }
    fclose(f);
    f = NULL;
    if (info.swapped)
        sm_npy_swap(a->data, a->nbytes / (int64_t)sm_dtype_size(a->dtype), sm_dtype_size(a->dtype));
    if (info.fortran) { /* into C order, through a second array */
        sm_array *c = NULL;
        if ((e = sm_array_create_in(pool, info.dtype, &info.shape, 0, &c, msg, sizeof msg)))
            goto fail;
        sm_npy_from_fortran(a->data, c->data, &info.shape, sm_dtype_size(a->dtype));
        sm_array_free(a);
        a = c;
    }
    *out = a;
    return SM_OK;
fail:
    sm_array_free(a);
    if (f)
        fclose(f);
    return sm_npy_path_fail(path, e, msg, err, errlen);
}

/* Writes all n bytes to fd. */
static int sm_write_all(int fd, const void *buf, size_t n)
{
    const char *p = buf;
    while (n > 0) {
        size_t chunk = n < ((size_t)1 << 30) ? n : ((size_t)1 << 30);
        ssize_t w = write(fd, p, chunk);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Writes the header and the data to fd, opened with O_DIRECT: whole blocks
 * from SM_NPY_BLOCK-aligned memory, the data's own pages where they are
 * aligned, a bounce buffer for the rest and for the last block (zero-padded,
 * the file then cut to its length). */
static int sm_npy_write_blocks(int fd, const void *hdr, size_t hlen, const sm_array *a)
{
    unsigned char *bounce = NULL;
    if (posix_memalign((void **)&bounce, SM_NPY_BLOCK, SM_NPY_BOUNCE) != 0)
        return -1;
    memcpy(bounce, hdr, hlen); /* hlen is a multiple of SM_NPY_BLOCK */
    int bad = sm_write_all(fd, bounce, hlen) != 0;
    const unsigned char *p = a->data;
    size_t left = (size_t)a->nbytes;
    while (!bad && left > 0) {
        size_t n = left < SM_NPY_BOUNCE ? left : SM_NPY_BOUNCE;
        if ((uintptr_t)p % SM_NPY_BLOCK == 0 && n >= SM_NPY_BLOCK) {
            n -= n % SM_NPY_BLOCK;
            bad = sm_write_all(fd, p, n) != 0;
        } else {
            size_t whole = (n + SM_NPY_BLOCK - 1) / SM_NPY_BLOCK * SM_NPY_BLOCK;
            memcpy(bounce, p, n);
            memset(bounce + n, 0, whole - n);
            bad = sm_write_all(fd, bounce, whole) != 0;
        }
        p += n;
        left -= n;
    }
    free(bounce);
    return bad || ftruncate(fd, (off_t)(hlen + (size_t)a->nbytes)) != 0 ? -1 : 0;
}

static sm_err sm_npy_write_file(const char *path, const char *spare, const sm_array *a, int direct,
                                char *err, size_t errlen)
{
    if (!path || !a)
        return sm_fail(err, errlen, SM_EINVAL, "path or array is NULL");
    char msg[SM_MSG];
    unsigned char hdr[SM_NPY_BLOCK];
    size_t hlen;
    int64_t nbytes;
    sm_err e = sm_npy_header(a->dtype, &a->shape, direct ? SM_NPY_BLOCK : SM_NPY_ALIGN, hdr,
                             sizeof hdr, &hlen, msg, sizeof msg);
    if (e == SM_EINVAL && direct) /* a header longer than a block: write it as numpy does */
        return sm_npy_write_file(path, spare, a, 0, err, errlen);
    if (e)
        return sm_npy_path_fail(path, e, msg, err, errlen);
    if ((e = sm_shape_nbytes(&a->shape, a->dtype, &nbytes, msg, sizeof msg)))
        return sm_npy_path_fail(path, e, msg, err, errlen);
    if (nbytes != a->nbytes || (nbytes > 0 && !a->data))
        return sm_fail(err, errlen, SM_EINVAL,
                       "'%s': the array's %" PRId64 " data bytes do not match its shape (%" PRId64
                       " bytes)",
                       path, a->nbytes, nbytes);

    /* Write a temporary file next to path and rename it over path, so a
     * failed write leaves any previous file untouched. */
    size_t tlen = strlen(spare ? spare : path) + 64;
    char *tmp = malloc(tlen);
    int fd = -1;
    if (!tmp)
        return sm_fail(err, errlen, SM_ENOMEM, "'%s': cannot allocate a temporary name", path);
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    int flags = O_WRONLY | O_CLOEXEC | (direct ? O_DIRECT : 0);
    for (int attempt = 0; attempt < 100 && fd < 0; attempt++) {
        if (spare)
            snprintf(tmp, tlen, "%s", spare);
        else
            snprintf(tmp, tlen, "%s.tmp%ld.%lx", path, (long)getpid(),
                     (unsigned long)ts.tv_nsec + (unsigned long)attempt);
        fd = open(tmp, spare ? flags : flags | O_CREAT | O_EXCL, 0666);
        if (fd < 0 && direct && errno == EINVAL) { /* the filesystem has no O_DIRECT (tmpfs) */
            free(tmp);
            return sm_npy_write_file(path, spare, a, 0, err, errlen);
        }
        if (fd < 0 && (spare || errno != EEXIST))
            break;
    }
    if (fd < 0) {
        e = sm_fail(err, errlen, SM_EIO, "'%s': cannot create the file (%s)", path,
                    strerror(errno));
        free(tmp);
        return e;
    }
    if (direct
            ? sm_npy_write_blocks(fd, hdr, hlen, a) != 0
            : (sm_write_all(fd, hdr, hlen) != 0 || sm_write_all(fd, a->data, (size_t)nbytes) != 0 ||
               (spare && ftruncate(fd, (off_t)(hlen + (size_t)nbytes)) != 0))) {
        e = sm_fail(err, errlen, SM_EIO, "'%s': cannot write the file (%s)", path, strerror(errno));
        goto fail;
    }
    int rc = close(fd);
    fd = -1;
    if (rc != 0 || rename(tmp, path) != 0) {
        e = sm_fail(err, errlen, SM_EIO, "'%s': cannot write the file (%s)", path, strerror(errno));
        goto fail;
    }
    free(tmp);
    return SM_OK;
fail:
    if (fd >= 0)
        close(fd);
    unlink(tmp);
    free(tmp);
    return e;
}

sm_err sm_npy_write(const char *path, const sm_array *a, char *err, size_t errlen)
{
    return sm_npy_write_file(path, NULL, a, 0, err, errlen);
}

sm_err sm_npy_write_direct(const char *path, const char *spare, const sm_array *a, char *err,
                           size_t errlen)
{
    return sm_npy_write_file(path, spare, a, 1, err, errlen);
}
