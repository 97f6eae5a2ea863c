/* Check suite for the .npy reader and writer of common/array: round trips,
 * header versions and spellings, malformed files, and (when numpy is
 * installed) files exchanged with numpy itself. */
#include <check.h>
#include <dirent.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sm_array.h"
#include "suite_main.h"

#define ERRLEN 512

/* The temporary directory of this run, made by main() and removed there. */
static char tmpdir[64];

static void path_of(char *out, size_t cap, const char *name)
{
    snprintf(out, cap, "%s/%s", tmpdir, name);
}

static void remove_tree(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        char p[512];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        unlink(p);
    }
    closedir(d);
    rmdir(dir);
}

static void write_bytes(const char *path, const void *b, size_t n)
{
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(b, 1, n, f), n);
    ck_assert_int_eq(fclose(f), 0);
}

static long file_size(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? (long)st.st_size : -1;
}

/* Builds a .npy image: preamble of version major.0, the dict text padded
 * with spaces and '\n' to a multiple of `align` bytes (1 for no padding),
 * then data_len bytes of data. Returns the length; out must be large. */
static size_t make_npy(unsigned char *out, int major, const char *dict, size_t align,
                       size_t data_len)
{
    size_t pre = major == 1 ? 10 : 12, dl = strlen(dict);
    size_t total = (pre + dl + 1 + align - 1) / align * align;
    size_t hl = total - pre;
    memcpy(out, "\x93NUMPY", 6);
    out[6] = (unsigned char)major;
    out[7] = 0;
    for (size_t i = 0; i < pre - 8; i++)
        out[8 + i] = (unsigned char)(hl >> (8 * i));
    memcpy(out + pre, dict, dl);
    memset(out + pre + dl, ' ', total - pre - dl - 1);
    out[total - 1] = '\n';
    for (size_t i = 0; i < data_len; i++)
        out[total + i] = (unsigned char)(i * 7 + 1);
    return total + data_len;
}

/* ---- round trips ---- */

static const struct {
    int rank;
    int64_t dims[4];
} rt_shapes[] = {
    {0, {0}},       {1, {1}},          {1, {17}},         {1, {0}},
    {2, {3, 5}},    {2, {0, 4}},       {2, {4, 0}},       {3, {2, 3, 4}},
    {3, {5, 0, 2}}, {4, {2, 1, 3, 2}}, {4, {1, 1, 1, 1}}, {4, {3, 2, 0, 7}},
};

START_TEST(test_npy_roundtrip)
{
    uint64_t st = 12345;
    char path[256], err[ERRLEN] = "";
    path_of(path, sizeof path, "rt.npy");
    for (int t = 0; t < SM_DTYPE_COUNT; t++) {
        if (t == SM_BF16)
            continue;
        for (size_t i = 0; i < sizeof rt_shapes / sizeof rt_shapes[0]; i++) {
            sm_shape s;
            ck_assert_int_eq(sm_shape_make(&s, rt_shapes[i].rank, rt_shapes[i].dims, NULL, 0),
                             SM_OK);
            sm_array *a, *b = NULL;
            ck_assert_int_eq(sm_array_create((sm_dtype)t, &s, &a, err, sizeof err), SM_OK);
            unsigned char *p = a->data;
            for (int64_t k = 0; k < a->nbytes; k++) {
                st = st * 6364136223846793005ull + 1442695040888963407ull;
                p[k] = t == SM_BOOL ? (unsigned char)(st >> 63) : (unsigned char)(st >> 56);
            }
            sm_err e = sm_npy_write(path, a, err, sizeof err);
            ck_assert_msg(e == SM_OK, "%s rank %d: %s", sm_dtype_name(t), s.rank, err);
            sm_npy_info info;
            ck_assert_int_eq(sm_npy_read_info(path, &info, err, sizeof err), SM_OK);
            ck_assert_int_eq(info.dtype, t);
            ck_assert(sm_shape_equal(&info.shape, &s));
            ck_assert_int_eq(info.nbytes, a->nbytes);
            ck_assert_int_eq(info.data_offset % 64, 0);
            ck_assert_int_eq(file_size(path), info.data_offset + a->nbytes);
            e = sm_npy_read(path, &b, err, sizeof err);
            ck_assert_msg(e == SM_OK, "%s rank %d: %s", sm_dtype_name(t), s.rank, err);
            ck_assert_int_eq(b->dtype, t);
            ck_assert(sm_shape_equal(&b->shape, &s));
            ck_assert_int_eq(b->nbytes, a->nbytes);
            if (a->nbytes)
                ck_assert(memcmp(a->data, b->data, (size_t)a->nbytes) == 0);
            sm_array_free(a);
            sm_array_free(b);
        }
    }
}
END_TEST

/* sm_npy_write_direct: a 4 KiB header, the data whole whether its memory is
 * page-aligned or not and whatever its length, on a filesystem with O_DIRECT
 * (the test's directory) and on one without (tmpfs, when /dev/shm is one). */
START_TEST(test_npy_write_direct)
{
    static const int64_t lens[] = {0, 1, 4095, 4096, 4099, (3 << 20) + 5, 5 << 20};
    char dir_shm[] = "/dev/shm/sm_npy_test.XXXXXX", err[ERRLEN] = "";
    const char *dirs[] = {tmpdir, mkdtemp(dir_shm)};
    size_t cap = (size_t)(5 << 20) + 8192;
    unsigned char *buf = aligned_alloc(4096, cap);
    ck_assert_ptr_nonnull(buf);
    for (size_t k = 0; k < cap; k++)
        buf[k] = (unsigned char)(k * 2654435761u >> 13);
    for (size_t d = 0; d < 2; d++) {
        if (!dirs[d])
            continue;
        char path[256];
        snprintf(path, sizeof path, "%s/direct.npy", dirs[d]);
        for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) {
            for (int off = 0; off <= 4; off += 4) { /* page-aligned data, and not */
                sm_array view = {.dtype = SM_U8, .nbytes = lens[i], .data = buf + off};
                ck_assert_int_eq(sm_shape_make(&view.shape, 1, &lens[i], NULL, 0), SM_OK);
                /* into a new temporary file, then into an existing longer one */
                char spare[300];
                snprintf(spare, sizeof spare, "%s/spare", dirs[d]);
                write_bytes(spare, buf, 8192);
                ck_assert_msg(
                    sm_npy_write_direct(path, off ? spare : NULL, &view, err, sizeof err) == SM_OK,
                    "%s", err);
                ck_assert_int_eq(access(spare, F_OK), off ? -1 : 0); /* renamed to path */
                sm_npy_info info;
                ck_assert_int_eq(sm_npy_read_info(path, &info, err, sizeof err), SM_OK);
                ck_assert_int_eq(info.data_offset, d == 0 ? 4096 : info.data_offset);
                ck_assert_int_eq(file_size(path), info.data_offset + lens[i]);
                sm_array *b = NULL;
                ck_assert_msg(sm_npy_read(path, &b, err, sizeof err) == SM_OK, "%s", err);
                ck_assert_int_eq(b->nbytes, lens[i]);
                if (lens[i])
                    ck_assert_msg(memcmp(b->data, buf + off, (size_t)lens[i]) == 0,
                                  "%s: %" PRId64 " bytes at offset %d differ", dirs[d], lens[i],
                                  off);
                sm_array_free(b);
            }
        }
        unlink(path);
    }
    if (dirs[1])
        rmdir(dirs[1]);
    free(buf);
}
END_TEST

START_TEST(test_npy_bf16_refused)
{
    char path[256], err[ERRLEN] = "";
    path_of(path, sizeof path, "bf16.npy");
    sm_shape s = {.rank = 1, .dims = {4}};
    sm_array *a;
    ck_assert_int_eq(sm_array_create(SM_BF16, &s, &a, NULL, 0), SM_OK);
    ck_assert_int_eq(sm_npy_write(path, a, err, sizeof err), SM_EUNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(err, "bf16"));
    ck_assert_int_eq(access(path, F_OK), -1);
    sm_array_free(a);
}
END_TEST

START_TEST(test_npy_write_replaces)
{
    char path[256], err[ERRLEN] = "";
    path_of(path, sizeof path, "replace.npy");
    sm_shape s1 = {.rank = 1, .dims = {1000}}, s2 = {.rank = 2, .dims = {2, 2}};
    sm_array *a, *b, *c;
    ck_assert_int_eq(sm_array_create(SM_F64, &s1, &a, NULL, 0), SM_OK);
    ck_assert_int_eq(sm_array_create(SM_I32, &s2, &b, NULL, 0), SM_OK);
    ((int32_t *)b->data)[3] = -7;
    ck_assert_int_eq(sm_npy_write(path, a, err, sizeof err), SM_OK);
    ck_assert_int_eq(sm_npy_write(path, b, err, sizeof err), SM_OK);
    ck_assert_int_eq(sm_npy_read(path, &c, err, sizeof err), SM_OK);
    ck_assert_int_eq(c->dtype, SM_I32);
    ck_assert_int_eq(((int32_t *)c->data)[3], -7);
    sm_array_free(c);
    /* A failed write leaves the old file and no temporary behind. */
    sm_array bad = *b;
    bad.nbytes = 3;
    ck_assert_int_eq(sm_npy_write(path, &bad, err, sizeof err), SM_EINVAL);
    ck_assert_int_eq(sm_npy_read(path, &c, err, sizeof err), SM_OK);
    ck_assert_int_eq(c->dtype, SM_I32);
    sm_array_free(c);
    int files = 0;
    DIR *d = opendir(tmpdir);
    for (struct dirent *e; (e = readdir(d));)
        files += strncmp(e->d_name, "replace.npy", 11) == 0;
    closedir(d);
    ck_assert_int_eq(files, 1);
    /* A directory that does not exist is an I/O error naming the path. */
    path_of(path, sizeof path, "no/such/dir/x.npy");
    ck_assert_int_eq(sm_npy_write(path, a, err, sizeof err), SM_EIO);
    ck_assert_ptr_nonnull(strstr(err, path));
    sm_array_free(a);
    sm_array_free(b);
}
END_TEST

/* ---- header versions and spellings ---- */

static const struct {
    int major;
    size_t align;
    const char *dict;
    sm_dtype t;
    int rank;
    int64_t dims[3];
} hdr_rows[] = {
    {1, 64, "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }", SM_F32, 2, {3, 4}},
    {2, 64, "{'descr': '<f8', 'fortran_order': False, 'shape': (5,), }", SM_F64, 1, {5}},
    {3, 64, "{'descr': '<i4', 'fortran_order': False, 'shape': (2, 3), }", SM_I32, 2, {2, 3}},
    {1, 16, "{'shape': (3,), 'fortran_order': False, 'descr': '<i8'}", SM_I64, 1, {3}},
    {1, 1, "{\"descr\":\"|u1\",\"fortran_order\":False,\"shape\":(2,3)}", SM_U8, 2, {2, 3}},
    {2,
     1,
     "{ 'fortran_order' : False ,\n 'descr' : '|b1' , 'shape' : ( 4 , ) , }",
     SM_BOOL,
     1,
     {4}},
    {1, 64, "{'descr': '<f2', 'fortran_order': False, 'shape': (), }", SM_F16, 0, {0}},
    {1, 64, "{'descr': '=u1', 'fortran_order': False, 'shape': (0, 2), }", SM_U8, 2, {0, 2}},
    {1, 64, "{'descr': '|i4', 'fortran_order': False, 'shape': (1,), }", SM_I32, 1, {1}},
    {1, 64, "{'descr': '<f4', 'fortran_order': False, 'shape': (2L, 1L), }", SM_F32, 2, {2, 1}},
    {3, 64, "{'descr': '<f4', 'fortran_order': True, 'shape': (6,), }", SM_F32, 1, {6}},
    {2, 64, "{'descr': '>u1', 'fortran_order': False, 'shape': (2, 1, 1), }", SM_U8, 3, {2, 1, 1}},
};

START_TEST(test_npy_header_versions)
{
    char path[256], err[ERRLEN] = "";
    path_of(path, sizeof path, "hdr.npy");
    for (size_t i = 0; i < sizeof hdr_rows / sizeof hdr_rows[0]; i++) {
        sm_shape s = {.rank = hdr_rows[i].rank};
        memcpy(s.dims, hdr_rows[i].dims, sizeof hdr_rows[i].dims);
        int64_t nb;
        ck_assert_int_eq(sm_shape_nbytes(&s, hdr_rows[i].t, &nb, NULL, 0), SM_OK);
        unsigned char img[1024];
        size_t n =
            make_npy(img, hdr_rows[i].major, hdr_rows[i].dict, hdr_rows[i].align, (size_t)nb);
        write_bytes(path, img, n);
        sm_array *a = NULL;
        sm_err e = sm_npy_read(path, &a, err, sizeof err);
        ck_assert_msg(e == SM_OK, "row %zu: %s", i, err);
        ck_assert_int_eq(a->dtype, hdr_rows[i].t);
        ck_assert(sm_shape_equal(&a->shape, &s));
        ck_assert_int_eq(a->nbytes, nb);
        if (nb)
            ck_assert(memcmp(a->data, img + n - nb, (size_t)nb) == 0);
        sm_array_free(a);
        /* The header alone parses from memory too. */
        sm_npy_info info;
        ck_assert_int_eq(sm_npy_parse_header(img, n - (size_t)nb, &info, err, sizeof err), SM_OK);
        ck_assert_int_eq(info.data_offset, (int64_t)(n - (size_t)nb));
    }
}
END_TEST

START_TEST(test_npy_format_header)
{
    char err[ERRLEN] = "";
    unsigned char buf[4096];
    size_t len;
    sm_shape big = {.rank = 8};
    for (int d = 0; d < 8; d++)
        big.dims[d] = d == 7 ? INT64_MAX : 1;
    ck_assert_int_eq(sm_npy_format_header(SM_U8, &big, buf, sizeof buf, &len, err, sizeof err),
                     SM_OK);
    ck_assert_uint_eq(len % 64, 0);
    ck_assert_int_eq(buf[6], 1);
    ck_assert_int_eq(buf[len - 1], '\n');
    sm_npy_info info;
    ck_assert_int_eq(sm_npy_parse_header(buf, len, &info, err, sizeof err), SM_OK);
    ck_assert(sm_shape_equal(&info.shape, &big));
    ck_assert_int_eq(info.nbytes, INT64_MAX);
    /* Too small a buffer, bf16, and bad shapes. */
    ck_assert_int_eq(sm_npy_format_header(SM_U8, &big, buf, 64, &len, err, sizeof err), SM_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "64"));
    sm_shape s = {.rank = 1, .dims = {3}};
    ck_assert_int_eq(sm_npy_format_header(SM_BF16, &s, buf, sizeof buf, &len, err, sizeof err),
                     SM_EUNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(err, "bf16"));
    s.dims[0] = -3;
    ck_assert_int_eq(sm_npy_format_header(SM_F32, &s, buf, sizeof buf, &len, err, sizeof err),
                     SM_EINVAL);
    /* A header shorter than its own length field says how much it needs. */
    s.dims[0] = 3;
    ck_assert_int_eq(sm_npy_format_header(SM_F32, &s, buf, sizeof buf, &len, err, sizeof err),
                     SM_OK);
    ck_assert_int_eq(sm_npy_parse_header(buf, len - 1, &info, err, sizeof err), SM_EFORMAT);
    char need[32];
    snprintf(need, sizeof need, "%zu bytes", len);
    ck_assert_msg(strstr(err, need), "'%s' lacks '%s'", err, need);
    ck_assert_int_eq(sm_npy_parse_header(buf, 9, &info, err, sizeof err), SM_EFORMAT);
    ck_assert_ptr_nonnull(strstr(err, "10 bytes"));
}
END_TEST

/* ---- malformed files ---- */

enum { RAW, DICT };
static const struct {
    const char *what;
    int kind;         /* RAW: the bytes below as they are; DICT: make_npy */
    const char *raw;  /* RAW */
    size_t raw_len;   /* RAW */
    int major;        /* DICT */
    const char *dict; /* DICT */
    long data_len;    /* DICT */
    sm_err code;
    const char *word;
} bad_rows[] = {
    {"bad magic", RAW, "\x93NUMPZ\x01\x00\x10\x00{}", 12, 0, NULL, 0, SM_EFORMAT, "magic"},
    {"text file", RAW, "hello, world\n", 13, 0, NULL, 0, SM_EFORMAT, "magic"},
    {"empty file", RAW, "", 0, 0, NULL, 0, SM_EFORMAT, "truncated"},
    {"short preamble", RAW, "\x93NUMPY\x01", 7, 0, NULL, 0, SM_EFORMAT, "truncated header"},
    {"truncated header", RAW, "\x93NUMPY\x01\x00\x76\x00{'descr': '<f4', ", 28, 0, NULL, 0,
     SM_EFORMAT, "truncated header"},
    {"header over limit", RAW, "\x93NUMPY\x02\x00\x00\x00\x00\x40{", 13, 0, NULL, 0, SM_EFORMAT,
     "limit"},
    {"version 4.0", RAW, "\x93NUMPY\x04\x00\x10\x00{}", 12, 0, NULL, 0, SM_EUNSUPPORTED,
     "version 4.0"},
    {"version 1.1", RAW, "\x93NUMPY\x01\x01\x10\x00{}", 12, 0, NULL, 0, SM_EUNSUPPORTED,
     "version 1.1"},
    {"truncated data", DICT, NULL, 0, 1,
     "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }", 40, SM_EFORMAT,
     "needs 48 bytes but the file holds 40"},
    {"extra data", DICT, NULL, 0, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }",
     52, SM_EFORMAT, "needs 48 bytes but the file holds 52"},
    {"no data", DICT, NULL, 0, 2, "{'descr': '<i8', 'fortran_order': False, 'shape': (), }", 0,
     SM_EFORMAT, "truncated data"},
    {"big-endian, truncated", DICT, NULL, 0, 1,
     "{'descr': '>f4', 'fortran_order': False, 'shape': (3,), }", 11, SM_EFORMAT, "truncated"},
    {"fortran order, truncated", DICT, NULL, 0, 1,
     "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }", 23, SM_EFORMAT, "truncated"},
    {"object dtype", DICT, NULL, 0, 1, "{'descr': '|O', 'fortran_order': False, 'shape': (3,), }",
     24, SM_EUNSUPPORTED, "object"},
    {"complex descr", DICT, NULL, 0, 1, "{'descr': '<c8', 'fortran_order': False, 'shape': (3,), }",
     24, SM_EUNSUPPORTED, "unknown descr '<c8'"},
    {"void descr", DICT, NULL, 0, 1, "{'descr': '<V2', 'fortran_order': False, 'shape': (3,), }", 6,
     SM_EUNSUPPORTED, "unknown descr '<V2'"},
    {"native f4", DICT, NULL, 0, 1, "{'descr': '=f4', 'fortran_order': False, 'shape': (3,), }", 12,
     SM_EUNSUPPORTED, "'=f4'"},
    {"structured", DICT, NULL, 0, 1,
     "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (3,), }", 12, SM_EUNSUPPORTED,
     "structured"},
    {"missing shape", DICT, NULL, 0, 1, "{'descr': '<f4', 'fortran_order': False, }", 4, SM_EFORMAT,
     "missing key 'shape'"},
    {"missing descr", DICT, NULL, 0, 3, "{'fortran_order': False, 'shape': (1,)}", 4, SM_EFORMAT,
     "missing key 'descr'"},
    {"missing fortran_order", DICT, NULL, 0, 1, "{'descr': '<f4', 'shape': (1,)}", 4, SM_EFORMAT,
     "missing key 'fortran_order'"},
    {"negative shape", DICT, NULL, 0, 1,
     "{'descr': '<f4', 'fortran_order': False, 'shape': (3, -1), }", 0, SM_EFORMAT, "negative"},
    {"unknown key", DICT, NULL, 0, 1,
     "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'extra': 1}", 4, SM_EFORMAT,
     "unknown key 'extra'"},
    {"repeated key", DICT, NULL, 0, 1,
     "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (1,)}", 4, SM_EFORMAT,
     "repeats key 'descr'"},
    {"not a dict", DICT, NULL, 0, 1, "['descr', '<f4']", 4, SM_EFORMAT, "dict"},
    {"text after dict", DICT, NULL, 0, 1,
     "{'descr': '<f4', 'fortran_order': False, 'shape': (1,)} x", 4, SM_EFORMAT, "after"},
    {"fortran_order not bool", DICT, NULL, 0, 1,
     "{'descr': '<f4', 'fortran_order': 0, 'shape': (1,)}", 4, SM_EFORMAT, "True or False"},
    {"unterminated string", DICT, NULL, 0, 1, "{'descr': '<f4", 4, SM_EFORMAT, "unterminated"},
    {"shape not tuple", DICT, NULL, 0, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': 3}", 4,
     SM_EFORMAT, "tuple"},
    {"shape overflow", DICT, NULL, 0, 1,
     "{'descr': '<f4', 'fortran_order': False, 'shape': (1099511627776, 1099511627776), }", 0,
     SM_EOVERFLOW, "[1099511627776,1099511627776]"},
    {"shape entry too big", DICT, NULL, 0, 1,
     "{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,), }", 0, SM_EFORMAT,
     "2^63-1"},
    {"rank 9", DICT, NULL, 0, 1,
     "{'descr': '|u1', 'fortran_order': False, 'shape': (1,1,1,1,1,1,1,1,1), }", 1, SM_EUNSUPPORTED,
     "8 dimensions"},
};

START_TEST(test_npy_malformed)
{
    char path[256];
    path_of(path, sizeof path, "bad.npy");
    for (size_t i = 0; i < sizeof bad_rows / sizeof bad_rows[0]; i++) {
        unsigned char img[1024];
        size_t n;
        if (bad_rows[i].kind == RAW) {
            memcpy(img, bad_rows[i].raw, bad_rows[i].raw_len);
            n = bad_rows[i].raw_len;
        } else {
            n = make_npy(img, bad_rows[i].major, bad_rows[i].dict, 64,
                         (size_t)bad_rows[i].data_len);
        }
        write_bytes(path, img, n);
        char err[ERRLEN] = "", err2[ERRLEN] = "";
        sm_array *a = NULL;
        sm_npy_info info;
        sm_err e = sm_npy_read(path, &a, err, sizeof err);
        ck_assert_msg(e == bad_rows[i].code, "%s: got %s (%s)", bad_rows[i].what, sm_err_name(e),
                      err);
        ck_assert_ptr_null(a);
        ck_assert_msg(strstr(err, bad_rows[i].word), "%s: '%s' lacks '%s'", bad_rows[i].what, err,
                      bad_rows[i].word);
        ck_assert_msg(strstr(err, path), "%s: '%s' does not name the file", bad_rows[i].what, err);
        /* Reading the header alone refuses the same files the same way. */
        ck_assert_int_eq(sm_npy_read_info(path, &info, err2, sizeof err2), e);
        ck_assert_str_eq(err2, err);
    }
}
END_TEST

START_TEST(test_npy_not_found)
{
    char path[256], err[ERRLEN] = "";
    path_of(path, sizeof path, "missing.npy");
    sm_array *a = NULL;
    sm_npy_info info;
    ck_assert_int_eq(sm_npy_read(path, &a, err, sizeof err), SM_EIO);
    ck_assert_ptr_nonnull(strstr(err, path));
    ck_assert_ptr_nonnull(strstr(err, "No such file"));
    ck_assert_ptr_null(a);
    ck_assert_int_eq(sm_npy_read_info(path, &info, err, sizeof err), SM_EIO);
    ck_assert_ptr_nonnull(strstr(err, path));
    /* A directory opens but cannot be read as a file. */
    ck_assert_int_eq(sm_npy_read(tmpdir, &a, err, sizeof err), SM_EIO);
    ck_assert_ptr_nonnull(strstr(err, tmpdir));
}
END_TEST

/* ---- exchange with numpy ---- */

/* The Python that has numpy: $SM_PYTHON, python3 or the system's, or NULL. */
static const char *numpy_python(void)
{
    static const char *const cands[] = {"python3", "/usr/bin/python3"};
    const char *env = getenv("SM_PYTHON");
    char cmd[512];
    if (env && *env) {
        snprintf(cmd, sizeof cmd, "'%s' -c 'import numpy' >/dev/null 2>&1", env);
        return system(cmd) == 0 ? env : NULL;
    }
    for (size_t i = 0; i < sizeof cands / sizeof cands[0]; i++) {
        snprintf(cmd, sizeof cmd, "%s -c 'import numpy' >/dev/null 2>&1", cands[i]);
        if (system(cmd) == 0)
            return cands[i];
    }
    return NULL;
}

/* Element k of the test pattern, per dtype, exactly representable in each. */
static double pattern(sm_dtype t, int64_t k)
{
    switch (t) {
    case SM_F32:
    case SM_F64:
        return (double)(k - 5) / 4.0;
    case SM_I32:
        return (double)((k - 6) * 100000);
    case SM_I64:
        return (double)((k - 6) * 1000000000000LL);
    case SM_U8:
        return (double)((k * 37) % 256);
    case SM_BOOL:
        return (double)(k % 3 == 0);
    default:
        return 0;
    }
}

static double element(const sm_array *a, int64_t k)
{
    switch (a->dtype) {
    case SM_F32:
        return ((const float *)a->data)[k];
    case SM_F64:
        return ((const double *)a->data)[k];
    case SM_I32:
        return ((const int32_t *)a->data)[k];
    case SM_I64:
        return (double)((const int64_t *)a->data)[k];
    case SM_U8:
    case SM_BOOL:
        return ((const uint8_t *)a->data)[k];
    default:
        return -1;
    }
}

static void set_element(sm_array *a, int64_t k, double v)
{
    switch (a->dtype) {
    case SM_F32:
        ((float *)a->data)[k] = (float)v;
        break;
    case SM_F64:
        ((double *)a->data)[k] = v;
        break;
    case SM_I32:
        ((int32_t *)a->data)[k] = (int32_t)v;
        break;
    case SM_I64:
        ((int64_t *)a->data)[k] = (int64_t)v;
        break;
    default:
        ((uint8_t *)a->data)[k] = (uint8_t)v;
        break;
    }
}

static const char numpy_script[] =
    "import sys, numpy as np\n"
    "d = sys.argv[1]\n"
    "names = ['float32', 'float64', 'int32', 'int64', 'uint8', 'bool']\n"
    "def pattern(name, n):\n"
    "    k = np.arange(n)\n"
    "    if name.startswith('float'): return (k - 5) / 4.0\n"
    "    if name == 'int32': return (k - 6) * 100000\n"
    "    if name == 'int64': return (k - 6) * 1000000000000\n"
    "    if name == 'uint8': return (k * 37) % 256\n"
    "    return k % 3 == 0\n"
    "shape = (3, 4, 2)\n"
    "if sys.argv[2] == 'write':\n"
    "    for n in names:\n"
    "        np.save(f'{d}/np_{n}.npy', pattern(n, 24).astype(n).reshape(shape))\n"
    "        a = pattern(n, 24).astype(n).reshape(shape)\n"
    "        np.save(f'{d}/npf_{n}.npy', np.asfortranarray(a))  # fortran_order True\n"
    "        np.save(f'{d}/npb_{n}.npy', a.astype(a.dtype.newbyteorder('>')))\n"
    "    np.save(f'{d}/np_scalar.npy', np.float64(-2.5))\n"
    "    np.save(f'{d}/np_empty.npy', np.zeros((0, 3), np.int32))\n"
    "    np.save(f'{d}/np_f16.npy', np.array([1.5, -2.0], np.float16))\n"
    "else:\n"
    "    for n in names:\n"
    "        a = np.load(f'{d}/sm_{n}.npy')\n"
    "        assert a.dtype == np.dtype(n) and a.shape == shape, (n, a.dtype, a.shape)\n"
    "        assert (a == pattern(n, 24).astype(n).reshape(shape)).all(), n\n"
    "    s = np.load(f'{d}/sm_scalar.npy')\n"
    "    assert s.shape == () and s.dtype == np.float64 and s == -2.5, s\n"
    "    e = np.load(f'{d}/sm_empty.npy')\n"
    "    assert e.shape == (0, 3) and e.dtype == np.int32, e.shape\n";

/* Reads path, which must hold the 24 elements of pattern(t) in shape. */
static void read_pattern(const char *path, sm_dtype t, const sm_shape *shape)
{
    char err[ERRLEN] = "";
    sm_array *a;
    ck_assert_msg(sm_npy_read(path, &a, err, sizeof err) == SM_OK, "%s", err);
    ck_assert_int_eq(a->dtype, t);
    ck_assert(sm_shape_equal(&a->shape, shape));
    for (int64_t k = 0; k < 24; k++)
        ck_assert_msg(element(a, k) == pattern(t, k), "%s[%" PRId64 "]", path, k);
    sm_array_free(a);
}

START_TEST(test_npy_numpy_exchange)
{
    const char *py = numpy_python();
    if (!py) {
        printf("test_npy_numpy_exchange: numpy is not installed; skipped\n");
        return;
    }
    static const sm_dtype types[] = {SM_F32, SM_F64, SM_I32, SM_I64, SM_U8, SM_BOOL};
    char script[256], cmd[1024], path[256], err[ERRLEN] = "";
    path_of(script, sizeof script, "exchange.py");
    write_bytes(script, numpy_script, sizeof numpy_script - 1);
    snprintf(cmd, sizeof cmd, "%s %s %s write", py, script, tmpdir);
    ck_assert_int_eq(system(cmd), 0);
    sm_shape shape = {.rank = 3, .dims = {3, 4, 2}};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        char name[64];
        snprintf(name, sizeof name, "np_%s.npy", sm_dtype_long_name(types[i]));
        path_of(path, sizeof path, name);
        sm_array *a;
        read_pattern(path, types[i], &shape);
        /* The same array saved column-major and big-endian: read in C order
         * and this machine's byte order; the header says how it lies. */
        for (int v = 0; v < 2; v++) {
            snprintf(name, sizeof name, "%s_%s.npy", v ? "npb" : "npf",
                     sm_dtype_long_name(types[i]));
            path_of(path, sizeof path, name);
            sm_npy_info info;
            ck_assert_msg(sm_npy_read_info(path, &info, err, sizeof err) == SM_OK, "%s", err);
            ck_assert_int_eq(info.fortran, v == 0);
            ck_assert_int_eq(info.swapped, v == 1 && sm_dtype_size(types[i]) > 1);
            ck_assert_int_eq(sm_npy_layout_issue(&info) != NULL, info.fortran || info.swapped);
            read_pattern(path, types[i], &shape);
        }
        /* Now ours, for numpy to check. */
        ck_assert_int_eq(sm_array_create(types[i], &shape, &a, NULL, 0), SM_OK);
        for (int64_t k = 0; k < 24; k++)
            set_element(a, k, pattern(types[i], k));
        snprintf(name, sizeof name, "sm_%s.npy", sm_dtype_long_name(types[i]));
        path_of(path, sizeof path, name);
        /* f32 as the workers' disk copies write it (4 KiB header, O_DIRECT) */
        ck_assert_int_eq(types[i] == SM_F32 ? sm_npy_write_direct(path, NULL, a, err, sizeof err)
                                            : sm_npy_write(path, a, err, sizeof err),
                         SM_OK);
        sm_array_free(a);
    }
    sm_array *a;
    path_of(path, sizeof path, "np_scalar.npy");
    ck_assert_int_eq(sm_npy_read(path, &a, err, sizeof err), SM_OK);
    ck_assert_int_eq(a->shape.rank, 0);
    ck_assert(((double *)a->data)[0] == -2.5);
    path_of(path, sizeof path, "sm_scalar.npy");
    ck_assert_int_eq(sm_npy_write(path, a, err, sizeof err), SM_OK);
    sm_array_free(a);
    path_of(path, sizeof path, "np_empty.npy");
    ck_assert_int_eq(sm_npy_read(path, &a, err, sizeof err), SM_OK);
    ck_assert_int_eq(a->nbytes, 0);
    path_of(path, sizeof path, "sm_empty.npy");
    ck_assert_int_eq(sm_npy_write(path, a, err, sizeof err), SM_OK);
    sm_array_free(a);
    path_of(path, sizeof path, "np_f16.npy");
    ck_assert_int_eq(sm_npy_read(path, &a, err, sizeof err), SM_OK);
    ck_assert_int_eq(a->dtype, SM_F16);
    ck_assert_uint_eq(((uint16_t *)a->data)[0], 0x3e00); /* 1.5 */
    ck_assert_uint_eq(((uint16_t *)a->data)[1], 0xc000); /* -2.0 */
    sm_array_free(a);
    snprintf(cmd, sizeof cmd, "%s %s %s check", py, script, tmpdir);
    ck_assert_int_eq(system(cmd), 0);
}
END_TEST

int main(void)
{
    snprintf(tmpdir, sizeof tmpdir, "%s", "/tmp/sm_npy_test.XXXXXX");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return EXIT_FAILURE;
    }
    int rc = suite_main(SUITE_CASE(suite_create("array_npy"), "npy", 60, NULL, {test_npy_roundtrip},
                                   {test_npy_write_direct}, {test_npy_bf16_refused},
                                   {test_npy_write_replaces}, {test_npy_header_versions},
                                   {test_npy_format_header}, {test_npy_malformed},
                                   {test_npy_not_found}, {test_npy_numpy_exchange}));
    remove_tree(tmpdir);
    return rc;
}
