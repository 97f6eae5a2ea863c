/* Check suite for common/array: dtypes, shapes, index boxes, block copies
 * and host arrays. The .npy files have their own suite (test_array_npy.c). */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sm_block.h"
#include "sm_copy.h"
#include "sm_array.h"
#include "sm_dtype.h"
#include "sm_shape.h"
#include "suite_main.h"

#define ERRLEN 256
#define T40    ((int64_t)1 << 40)

/* ---- dtypes ---- */

static const struct {
    sm_dtype t;
    const char *name, *long_name;
    size_t size;
    int is_float, is_int;
} dtype_rows[] = {
    {SM_F32, "f32", "float32", 4, 1, 0}, {SM_F64, "f64", "float64", 8, 1, 0},
    {SM_I32, "i32", "int32", 4, 0, 1},   {SM_I64, "i64", "int64", 8, 0, 1},
    {SM_U8, "u8", "uint8", 1, 0, 1},     {SM_BOOL, "bool", "bool", 1, 0, 0},
    {SM_F16, "f16", "float16", 2, 1, 0}, {SM_BF16, "bf16", "bfloat16", 2, 1, 0},
};
_Static_assert(sizeof dtype_rows / sizeof dtype_rows[0] == SM_DTYPE_COUNT, "one row per dtype");

START_TEST(test_dtype_table)
{
    for (size_t i = 0; i < sizeof dtype_rows / sizeof dtype_rows[0]; i++) {
        sm_dtype t = dtype_rows[i].t, p = SM_DTYPE_COUNT;
        ck_assert_str_eq(sm_dtype_name(t), dtype_rows[i].name);
        ck_assert_str_eq(sm_dtype_long_name(t), dtype_rows[i].long_name);
        ck_assert_uint_eq(sm_dtype_size(t), dtype_rows[i].size);
        ck_assert_int_eq(sm_dtype_is_float(t), dtype_rows[i].is_float);
        ck_assert_int_eq(sm_dtype_is_int(t), dtype_rows[i].is_int);
        ck_assert_int_eq(sm_dtype_parse(dtype_rows[i].name, &p), 0);
        ck_assert_int_eq(p, t);
        p = SM_DTYPE_COUNT;
        ck_assert_int_eq(sm_dtype_parse(dtype_rows[i].long_name, &p), 0);
        ck_assert_int_eq(p, t);
    }
    ck_assert_str_eq(sm_dtype_name(SM_DTYPE_COUNT), "?");
    ck_assert_str_eq(sm_dtype_name((sm_dtype)-1), "?");
    ck_assert_str_eq(sm_dtype_long_name(SM_DTYPE_COUNT), "?");
    ck_assert_uint_eq(sm_dtype_size(SM_DTYPE_COUNT), 0);
}
END_TEST

START_TEST(test_dtype_parse_unknown)
{
    static const char *const bad[] = {"", "F32", "float", "f 32", "float33", "int", "?", "bool "};
    sm_dtype p = SM_F64;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ck_assert_int_eq(sm_dtype_parse(bad[i], &p), -1);
        ck_assert_int_eq(p, SM_F64);
    }
    ck_assert_int_eq(sm_dtype_parse(NULL, &p), -1);
}
END_TEST

/* ---- shapes ---- */

static const struct {
    int rank;
    int64_t dims[SM_MAX_RANK + 1];
    sm_err code;
} make_rows[] = {
    {0, {0}, SM_OK},
    {1, {5}, SM_OK},
    {2, {0, 7}, SM_OK},
    {8, {1, 2, 3, 4, 5, 6, 7, 8}, SM_OK},
    {2, {3, -1}, SM_EINVAL},
    {1, {INT64_MIN}, SM_EINVAL},
    {9, {1, 1, 1, 1, 1, 1, 1, 1, 1}, SM_EINVAL},
    {-1, {0}, SM_EINVAL},
};

START_TEST(test_shape_make)
{
    for (size_t i = 0; i < sizeof make_rows / sizeof make_rows[0]; i++) {
        char err[ERRLEN] = "";
        sm_shape s = {.rank = 77};
        sm_err e = sm_shape_make(&s, make_rows[i].rank, make_rows[i].dims, err, sizeof err);
        ck_assert_msg(e == make_rows[i].code, "row %zu: got %s (%s)", i, sm_err_name(e), err);
        if (e) {
            ck_assert_int_eq(s.rank, 77); /* untouched on failure */
            ck_assert(strlen(err) > 0);
            continue;
        }
        ck_assert_int_eq(s.rank, make_rows[i].rank);
        for (int d = 0; d < s.rank; d++)
            ck_assert_int_eq(s.dims[d], make_rows[i].dims[d]);
    }
    char err[ERRLEN];
    sm_shape s;
    ck_assert_int_eq(sm_shape_make(&s, 2, (int64_t[]){3, -4}, err, sizeof err), SM_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "-4"));
}
END_TEST

static const struct {
    int rank;
    int64_t dims[SM_MAX_RANK];
    sm_dtype t;
    sm_err numel_code, nbytes_code;
    int64_t numel, nbytes;
    const char *word; /* in the message of the first failure */
} size_rows[] = {
    {0, {0}, SM_F32, SM_OK, SM_OK, 1, 4, NULL},
    {2, {8, 16}, SM_F64, SM_OK, SM_OK, 128, 1024, NULL},
    {3, {4, 0, 5}, SM_I32, SM_OK, SM_OK, 0, 0, NULL},
    {1, {7}, SM_BF16, SM_OK, SM_OK, 7, 14, NULL},
    {8, {2, 2, 2, 2, 2, 2, 2, 2}, SM_U8, SM_OK, SM_OK, 256, 256, NULL},
    {2, {T40, T40}, SM_F32, SM_EOVERFLOW, SM_EOVERFLOW, 0, 0, "[1099511627776,1099511627776]"},
    {2,
     {(int64_t)1 << 31, (int64_t)1 << 31},
     SM_F64,
     SM_OK,
     SM_EOVERFLOW,
     (int64_t)1 << 62,
     0,
     "f64"},
    {1, {INT64_MAX}, SM_U8, SM_OK, SM_OK, INT64_MAX, INT64_MAX, NULL},
    {1, {INT64_MAX}, SM_F16, SM_OK, SM_EOVERFLOW, INT64_MAX, 0, "bytes"},
    {3, {T40, 0, T40}, SM_F32, SM_OK, SM_OK, 0, 0, NULL}, /* zero before overflow */
    {2, {3, -2}, SM_F32, SM_EINVAL, SM_EINVAL, 0, 0, "-2"},
    {2, {3, 4}, SM_DTYPE_COUNT, SM_OK, SM_EINVAL, 12, 0, "dtype"},
};

START_TEST(test_shape_sizes)
{
    for (size_t i = 0; i < sizeof size_rows / sizeof size_rows[0]; i++) {
        sm_shape s = {.rank = size_rows[i].rank};
        memcpy(s.dims, size_rows[i].dims, sizeof s.dims);
        char err[ERRLEN] = "";
        int64_t n = -1, nb = -1;
        sm_err e = sm_shape_numel(&s, &n, err, sizeof err);
        ck_assert_msg(e == size_rows[i].numel_code, "row %zu numel: %s (%s)", i, sm_err_name(e),
                      err);
        if (!e)
            ck_assert_int_eq(n, size_rows[i].numel);
        else
            ck_assert_ptr_nonnull(strstr(err, size_rows[i].word));
        e = sm_shape_nbytes(&s, size_rows[i].t, &nb, err, sizeof err);
        ck_assert_msg(e == size_rows[i].nbytes_code, "row %zu nbytes: %s (%s)", i, sm_err_name(e),
                      err);
        if (!e)
            ck_assert_int_eq(nb, size_rows[i].nbytes);
        else
            ck_assert_msg(strstr(err, size_rows[i].word), "row %zu: '%s'", i, err);
    }
}
END_TEST

START_TEST(test_shape_strides)
{
    sm_shape s = {.rank = 4, .dims = {2, 3, 0, 5}};
    int64_t st[SM_MAX_RANK];
    ck_assert_int_eq(sm_shape_strides(&s, st, NULL, 0), SM_OK);
    ck_assert_int_eq(st[3], 1);
    ck_assert_int_eq(st[2], 5);
    ck_assert_int_eq(st[1], 5);
    ck_assert_int_eq(st[0], 15);
    sm_shape big = {.rank = 2, .dims = {T40, T40}};
    ck_assert_int_eq(sm_shape_strides(&big, st, NULL, 0), SM_EOVERFLOW);
}
END_TEST

static const struct {
    const char *text;
    sm_err code;
    int rank;
    int64_t dims[SM_MAX_RANK];
} parse_rows[] = {
    {"8,16", SM_OK, 2, {8, 16}},
    {"[8,16]", SM_OK, 2, {8, 16}},
    {"(8, 16)", SM_OK, 2, {8, 16}},
    {"  [ 8 , 16 ]  ", SM_OK, 2, {8, 16}},
    {"(3,)", SM_OK, 1, {3}},
    {"7", SM_OK, 1, {7}},
    {"[0,5]", SM_OK, 2, {0, 5}},
    {"", SM_OK, 0, {0}},
    {"[]", SM_OK, 0, {0}},
    {"()", SM_OK, 0, {0}},
    {" ( ) ", SM_OK, 0, {0}},
    {"[1,2,3,4,5,6,7,8]", SM_OK, 8, {1, 2, 3, 4, 5, 6, 7, 8}},
    {"[1,2,3,4,5,6,7,8,9]", SM_EINVAL, 0, {0}},
    {"[8,-16]", SM_EINVAL, 0, {0}},
    {"[8;16]", SM_EINVAL, 0, {0}},
    {"[8,16", SM_EINVAL, 0, {0}},
    {"(8,16]", SM_EINVAL, 0, {0}},
    {"[8,16]x", SM_EINVAL, 0, {0}},
    {"[8 16]", SM_EINVAL, 0, {0}},
    {"[,]", SM_EINVAL, 0, {0}},
    {"[a]", SM_EINVAL, 0, {0}},
    {"[99999999999999999999]", SM_EOVERFLOW, 0, {0}},
};

START_TEST(test_shape_parse)
{
    for (size_t i = 0; i < sizeof parse_rows / sizeof parse_rows[0]; i++) {
        char err[ERRLEN] = "";
        sm_shape s = {.rank = 77};
        sm_err e = sm_shape_parse(parse_rows[i].text, &s, err, sizeof err);
        ck_assert_msg(e == parse_rows[i].code, "'%s': got %s (%s)", parse_rows[i].text,
                      sm_err_name(e), err);
        if (e) {
            ck_assert_int_eq(s.rank, 77);
            ck_assert_msg(strstr(err, parse_rows[i].text), "message '%s' names no text", err);
            continue;
        }
        ck_assert_int_eq(s.rank, parse_rows[i].rank);
        for (int d = 0; d < s.rank; d++)
            ck_assert_int_eq(s.dims[d], parse_rows[i].dims[d]);
    }
}
END_TEST

static const struct {
    int rank;
    int64_t dims[SM_MAX_RANK];
    const char *text;
} format_rows[] = {
    {0, {0}, "[]"},
    {1, {3}, "[3]"},
    {2, {8, 16}, "[8,16]"},
    {3, {0, 1, 9223372036854775807}, "[0,1,9223372036854775807]"},
    {8, {1, 2, 3, 4, 5, 6, 7, 8}, "[1,2,3,4,5,6,7,8]"},
};

START_TEST(test_shape_format)
{
    for (size_t i = 0; i < sizeof format_rows / sizeof format_rows[0]; i++) {
        sm_shape s = {.rank = format_rows[i].rank}, back;
        memcpy(s.dims, format_rows[i].dims, sizeof s.dims);
        char buf[200];
        ck_assert_ptr_eq(sm_shape_format(&s, buf, sizeof buf), buf);
        ck_assert_str_eq(buf, format_rows[i].text);
        ck_assert_int_eq(sm_shape_parse(buf, &back, NULL, 0), SM_OK);
        ck_assert(sm_shape_equal(&s, &back));
    }
    /* A short buffer truncates but stays terminated. */
    sm_shape s = {.rank = 2, .dims = {1000, 2000}};
    char small[6];
    sm_shape_format(&s, small, sizeof small);
    ck_assert_str_eq(small, "[1000");
}
END_TEST

START_TEST(test_shape_equal)
{
    sm_shape a = {.rank = 2, .dims = {3, 4}}, b = a, c = {.rank = 3, .dims = {3, 4, 1}};
    sm_shape d = {.rank = 2, .dims = {3, 5}}, s0 = {0}, s1 = {0};
    b.dims[5] = 99; /* unused entries do not count */
    ck_assert(sm_shape_equal(&a, &b));
    ck_assert(!sm_shape_equal(&a, &c));
    ck_assert(!sm_shape_equal(&a, &d));
    ck_assert(sm_shape_equal(&s0, &s1));
}
END_TEST

/* ---- index boxes ---- */

START_TEST(test_index)
{
    sm_index ix = {.rank = 2, .r = {{0, 2}, {0, 16}}};
    char buf[200];
    ck_assert_str_eq(sm_index_format(&ix, buf, sizeof buf), "[0:2, 0:16]");
    sm_index s0 = {0};
    ck_assert_str_eq(sm_index_format(&s0, buf, sizeof buf), "[]");
    sm_index one = {.rank = 1, .r = {{4, 8}}};
    ck_assert_str_eq(sm_index_format(&one, buf, sizeof buf), "[4:8]");

    sm_shape s = {.rank = 2, .dims = {2, 16}};
    sm_index full = sm_index_full(&s);
    ck_assert(sm_index_equal(&full, &ix));
    sm_shape back = sm_index_shape(&full);
    ck_assert(sm_shape_equal(&back, &s));
    sm_index other = ix;
    other.r[1].start = 1;
    ck_assert(!sm_index_equal(&other, &ix));
    other = ix;
    other.rank = 1;
    ck_assert(!sm_index_equal(&other, &ix));
    sm_shape scalar = {0};
    sm_index fs = sm_index_full(&scalar);
    ck_assert_int_eq(fs.rank, 0);
    ck_assert(sm_index_equal(&fs, &s0));
    sm_shape box = sm_index_shape(&one);
    ck_assert_int_eq(box.rank, 1);
    ck_assert_int_eq(box.dims[0], 4);
}
END_TEST

/* sm_index_check: a box lies in a shape, or a sentence names both. */
START_TEST(test_index_check)
{
    static const struct {
        sm_index box;
        sm_shape shape;
        sm_err want;
        const char *msg;
    } rows[] = {
        {{.rank = 2, .r = {{0, 2}, {0, 16}}}, {.rank = 2, .dims = {2, 16}}, SM_OK, ""},
        {{.rank = 2, .r = {{1, 1}, {3, 9}}}, {.rank = 2, .dims = {2, 16}}, SM_OK, ""},
        {{0}, {0}, SM_OK, ""},
        {{.rank = 1, .r = {{0, 2}}},
         {.rank = 2, .dims = {2, 16}},
         SM_EINVAL,
         "box [0:2] has rank 1 but the shard [2,16] has rank 2"},
        {{.rank = 2, .r = {{0, 2}, {8, 17}}},
         {.rank = 2, .dims = {2, 16}},
         SM_EINVAL,
         "box [0:2, 8:17] does not fit the shard [2,16] (dimension 1)"},
        {{.rank = 1, .r = {{-1, 1}}}, {.rank = 1, .dims = {4}}, SM_EINVAL, "(dimension 0)"},
        {{.rank = 1, .r = {{3, 2}}}, {.rank = 1, .dims = {4}}, SM_EINVAL, "(dimension 0)"},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        char err[256] = "";
        ck_assert_int_eq(sm_index_check(&rows[i].box, &rows[i].shape, "shard", err, sizeof err),
                         rows[i].want);
        ck_assert_msg(strstr(err, rows[i].msg), "row %zu: %s", i, err);
    }
}
END_TEST

/* ---- block copy ---- */

static uint64_t rnd(uint64_t *st)
{
    *st ^= *st << 13;
    *st ^= *st >> 7;
    *st ^= *st << 17;
    return *st;
}

static int64_t lin(const sm_shape *s, const int64_t *ix)
{
    int64_t k = 0;
    for (int d = 0; d < s->rank; d++)
        k = k * s->dims[d] + ix[d];
    return k;
}

/* The reference: one element at a time. */
static void naive_copy(char *dst, const sm_shape *ds, const int64_t *doff, const char *src,
                       const sm_shape *ss, const int64_t *soff, const int64_t *ext, size_t elem)
{
    int64_t n = 1;
    for (int d = 0; d < ds->rank; d++)
        n *= ext[d];
    for (int64_t k = 0; k < n; k++) {
        int64_t rem = k, si[SM_MAX_RANK] = {0}, di[SM_MAX_RANK] = {0};
        for (int d = ds->rank - 1; d >= 0; d--) {
            int64_t c = rem % ext[d];
            rem /= ext[d];
            si[d] = soff[d] + c;
            di[d] = doff[d] + c;
        }
        memcpy(dst + lin(ds, di) * (int64_t)elem, src + lin(ss, si) * (int64_t)elem, elem);
    }
}

static const size_t elem_sizes[] = {1, 2, 3, 4, 8, 12, 16};

START_TEST(test_block_copy_random)
{
    uint64_t st = 0x9e3779b97f4a7c15ull;
    int rank = _i; /* loop test over ranks 0..4 */
    for (size_t ei = 0; ei < sizeof elem_sizes / sizeof elem_sizes[0]; ei++) {
        size_t elem = elem_sizes[ei];
        for (int iter = 0; iter < 300; iter++) {
            sm_shape ss = {.rank = rank}, ds = {.rank = rank};
            int64_t soff[SM_MAX_RANK], doff[SM_MAX_RANK], ext[SM_MAX_RANK];
            /* Sometimes the inner dims are whole in both, to exercise merged runs. */
            int whole_from = (int)(rnd(&st) % (uint64_t)(rank + 1));
            for (int d = 0; d < rank; d++) {
                ss.dims[d] = 1 + (int64_t)(rnd(&st) % 7);
                ds.dims[d] = 1 + (int64_t)(rnd(&st) % 7);
                int64_t lim = ss.dims[d] < ds.dims[d] ? ss.dims[d] : ds.dims[d];
                ext[d] = (int64_t)(rnd(&st) % (uint64_t)(lim + 1));
                if (ext[d] == 0 && rnd(&st) % 4)
                    ext[d] = 1; /* zero extents now and then, not often */
                if (d >= whole_from && iter % 2)
                    ss.dims[d] = ds.dims[d] = ext[d] = lim;
                soff[d] = (int64_t)(rnd(&st) % (uint64_t)(ss.dims[d] - ext[d] + 1));
                doff[d] = (int64_t)(rnd(&st) % (uint64_t)(ds.dims[d] - ext[d] + 1));
            }
            int64_t sn, dn;
            ck_assert_int_eq(sm_shape_numel(&ss, &sn, NULL, 0), SM_OK);
            ck_assert_int_eq(sm_shape_numel(&ds, &dn, NULL, 0), SM_OK);
            size_t sb = (size_t)sn * elem, db = (size_t)dn * elem;
            char *src = malloc(sb), *got = malloc(db), *want = malloc(db);
            for (size_t i = 0; i < sb; i++)
                src[i] = (char)rnd(&st);
            for (size_t i = 0; i < db; i++)
                got[i] = want[i] = (char)rnd(&st);
            char err[ERRLEN] = "";
            sm_err e = sm_block_copy(got, &ds, doff, src, &ss, soff, ext, elem, err, sizeof err);
            ck_assert_msg(e == SM_OK, "rank %d elem %zu iter %d: %s", rank, elem, iter, err);
            naive_copy(want, &ds, doff, src, &ss, soff, ext, elem);
            ck_assert_msg(memcmp(got, want, db) == 0, "rank %d elem %zu iter %d differs", rank,
                          elem, iter);
            free(src);
            free(got);
            free(want);
        }
    }
}
END_TEST

START_TEST(test_block_copy_large_rows)
{
    /* A column slice and a row slice of a 64x512 f64 array: one strided, one merged. */
    sm_shape g = {.rank = 2, .dims = {64, 512}}, cs = {.rank = 2, .dims = {64, 128}};
    sm_shape rs = {.rank = 2, .dims = {16, 512}};
    double *a = malloc(64 * 512 * sizeof *a), *c = calloc(64 * 128, sizeof *c);
    double *r = calloc(16 * 512, sizeof *r);
    for (int i = 0; i < 64 * 512; i++)
        a[i] = i;
    ck_assert_int_eq(sm_block_copy(c, &cs, (int64_t[]){0, 0}, a, &g, (int64_t[]){0, 256},
                                   (int64_t[]){64, 128}, sizeof *a, NULL, 0),
                     SM_OK);
    ck_assert_int_eq(sm_block_copy(r, &rs, (int64_t[]){0, 0}, a, &g, (int64_t[]){32, 0},
                                   (int64_t[]){16, 512}, sizeof *a, NULL, 0),
                     SM_OK);
    for (int i = 0; i < 64; i++)
        for (int j = 0; j < 128; j++)
            ck_assert(c[i * 128 + j] == (double)(i * 512 + 256 + j));
    for (int i = 0; i < 16 * 512; i++)
        ck_assert(r[i] == (double)(32 * 512 + i));
    free(a);
    free(c);
    free(r);
}
END_TEST

static const struct {
    const char *what;
    int src_rank, dst_rank;
    int64_t sdims[3], ddims[3], soff[3], doff[3], ext[3];
    size_t elem;
    sm_err code;
    const char *word;
} copy_err_rows[] = {
    {"rank mismatch", 2, 3, {4, 4}, {4, 4, 1}, {0}, {0}, {1, 1, 1}, 4, SM_EINVAL, "rank"},
    {"source overrun", 2, 2, {4, 4}, {8, 8}, {2, 0}, {0}, {3, 4}, 4, SM_EINVAL, "source"},
    {"destination overrun", 2, 2, {8, 8}, {4, 4}, {0}, {0, 2}, {4, 3}, 4, SM_EINVAL, "destination"},
    {"negative offset", 1, 1, {4}, {4}, {-1}, {0}, {2}, 4, SM_EINVAL, "offset -1"},
    {"negative extent", 1, 1, {4}, {4}, {2}, {0}, {-1}, 4, SM_EINVAL, "negative"},
    {"huge offset", 1, 1, {4}, {4}, {INT64_MAX}, {0}, {2}, 4, SM_EINVAL, "source"},
    {"zero element size", 1, 1, {4}, {4}, {0}, {0}, {1}, 0, SM_EINVAL, "element size"},
    {"negative dim", 1, 1, {-4}, {4}, {0}, {0}, {0}, 4, SM_EINVAL, "negative"},
    {"byte overflow", 2, 2, {T40, 1 << 23}, {1, 1}, {0}, {0}, {1, 1}, 2, SM_EOVERFLOW, "2^63"},
};

/* sm_block_split, sm_block_next and sm_block_part: the parts of a walk cover every
 * element of the box once, in row-major order, each within cap bytes
 * unless it is a single element. */
static const struct {
    int rank;
    int64_t ext[3];
    int64_t cap;
    int want_k;
    int64_t want_inner;
} split_rows[] = {
    {2, {8, 6}, 1 << 20, 0, 24}, /* fits whole: rows of dimension 0 */
    {2, {8, 6}, 50, 0, 24},      /* two rows a part */
    {2, {8, 6}, 20, 1, 4},       /* a row does not fit: elements of dimension 1 */
    {3, {3, 5, 7}, 140, 0, 140}, /* one [5, 7] block a part */
    {3, {3, 5, 7}, 100, 1, 28},  /* rows of dimension 1 */
    {3, {3, 5, 7}, 3, 2, 4},     /* not even one element: one at a time */
    {1, {10}, 16, 0, 4},         /* rank 1: elements of dimension 0 */
};

START_TEST(test_block_split_walk)
{
    int64_t inner = 0;
    int k = sm_block_split(split_rows[_i].ext, split_rows[_i].rank, 4, split_rows[_i].cap, &inner);
    ck_assert_int_eq(k, split_rows[_i].want_k);
    ck_assert_int_eq(inner, split_rows[_i].want_inner);
    int64_t rows = split_rows[_i].cap / inner > 0 ? split_rows[_i].cap / inner : 1;
    int64_t idx[3] = {0}, seen = 0, total = 1, next = 0;
    for (int d = 0; d < split_rows[_i].rank; d++)
        total *= split_rows[_i].ext[d];
    int parts = 0;
    for (int more = 1; more; parts++) {
        int64_t left = split_rows[_i].ext[k] - idx[k], n = left < rows ? left : rows;
        int64_t start[3], extent[3], at = 0, count = 1; /* at: its first element, row-major */
        sm_block_part(idx, split_rows[_i].ext, split_rows[_i].rank, k, n, start, extent);
        for (int d = 0; d < split_rows[_i].rank; d++) {
            at = at * split_rows[_i].ext[d] + start[d];
            count *= extent[d];
        }
        ck_assert_int_eq(at, next);
        ck_assert_int_eq(count, n * inner / 4);
        ck_assert(n * inner <= split_rows[_i].cap || n * inner == 4);
        next = at + n * inner / 4;
        seen += n * inner / 4;
        more = sm_block_next(idx, split_rows[_i].ext, k, n);
    }
    ck_assert_int_eq(seen, total);
    ck_assert_int_gt(parts, 0);
}
END_TEST

START_TEST(test_block_copy_errors)
{
    for (size_t i = 0; i < sizeof copy_err_rows / sizeof copy_err_rows[0]; i++) {
        sm_shape ss = {.rank = copy_err_rows[i].src_rank}, ds = {.rank = copy_err_rows[i].dst_rank};
        memcpy(ss.dims, copy_err_rows[i].sdims, sizeof copy_err_rows[i].sdims);
        memcpy(ds.dims, copy_err_rows[i].ddims, sizeof copy_err_rows[i].ddims);
        char src[1024] = {1}, dst[1024] = {0}, zero[1024] = {0}, err[ERRLEN] = "";
        sm_err e = sm_block_copy(dst, &ds, copy_err_rows[i].doff, src, &ss, copy_err_rows[i].soff,
                                 copy_err_rows[i].ext, copy_err_rows[i].elem, err, sizeof err);
        ck_assert_msg(e == copy_err_rows[i].code, "%s: got %s (%s)", copy_err_rows[i].what,
                      sm_err_name(e), err);
        ck_assert_msg(strstr(err, copy_err_rows[i].word), "%s: message '%s'", copy_err_rows[i].what,
                      err);
        ck_assert(memcmp(dst, zero, sizeof dst) == 0);
    }
    /* Rank 0 copies one element; a zero extent touches nothing, not even NULL. */
    sm_shape s0 = {0}, s1 = {.rank = 1, .dims = {4}};
    double x = 2.5, y = 0;
    ck_assert_int_eq(sm_block_copy(&y, &s0, NULL, &x, &s0, NULL, NULL, sizeof x, NULL, 0), SM_OK);
    ck_assert(y == 2.5);
    ck_assert_int_eq(sm_block_copy(NULL, &s1, (int64_t[]){4}, NULL, &s1, (int64_t[]){1},
                                   (int64_t[]){0}, 4, NULL, 0),
                     SM_OK);
    ck_assert_int_eq(sm_block_copy(&y, &s1, NULL, &x, &s1, NULL, NULL, 4, NULL, 0), SM_EINVAL);
}
END_TEST

/* ---- host arrays ---- */

static const struct {
    sm_dtype t;
    int rank;
    int64_t dims[4];
    sm_err code;
    int64_t nbytes;
} create_rows[] = {
    {SM_F32, 2, {3, 5}, SM_OK, 60},         {SM_F64, 0, {0}, SM_OK, 8},
    {SM_U8, 3, {1, 1, 1}, SM_OK, 1},        {SM_BF16, 1, {100}, SM_OK, 200},
    {SM_I64, 2, {0, 9}, SM_OK, 0},          {SM_F32, 2, {T40, T40}, SM_EOVERFLOW, 0},
    {SM_F32, 1, {-1}, SM_EINVAL, 0},        {SM_DTYPE_COUNT, 1, {3}, SM_EINVAL, 0},
#ifndef __SANITIZE_ADDRESS__ /* ASan aborts on such requests instead of failing them */
    {SM_U8, 1, {T40 * 1024}, SM_ENOMEM, 0}, /* 2^50 bytes cannot be had */
#endif
};

START_TEST(test_array_create)
{
    for (size_t i = 0; i < sizeof create_rows / sizeof create_rows[0]; i++) {
        sm_shape s = {.rank = create_rows[i].rank};
        memcpy(s.dims, create_rows[i].dims, sizeof create_rows[i].dims);
        sm_array *a = (sm_array *)&s; /* must stay untouched on failure */
        char err[ERRLEN] = "";
        sm_err e = sm_array_create(create_rows[i].t, &s, &a, err, sizeof err);
        ck_assert_msg(e == create_rows[i].code, "row %zu: got %s (%s)", i, sm_err_name(e), err);
        if (e) {
            ck_assert_ptr_eq(a, (sm_array *)&s);
            ck_assert(strlen(err) > 0);
            continue;
        }
        ck_assert_int_eq(a->nbytes, create_rows[i].nbytes);
        ck_assert_int_eq(a->dtype, create_rows[i].t);
        ck_assert(sm_shape_equal(&a->shape, &s));
        if (a->nbytes == 0) {
            ck_assert_ptr_null(a->data);
        } else {
            ck_assert_ptr_nonnull(a->data);
            ck_assert_uint_eq((uintptr_t)a->data % 64, 0);
            for (int64_t b = 0; b < a->nbytes; b++)
                ck_assert_int_eq(((unsigned char *)a->data)[b], 0);
        }
        sm_array_free(a);
    }
    sm_array_free(NULL);
}
END_TEST

static void copy_as_cached(void *dst, const void *src, size_t n)
{
    sm_copy_as(dst, src, n, 0);
}

static void copy_as_streamed(void *dst, const void *src, size_t n)
{
    sm_copy_as(dst, src, n, 1);
}

/* sm_copy_stream, sm_copy and sm_copy_as (either way) copy exactly n bytes
 * for every size and alignment, around sm_copy_stream's 4 KiB switch to
 * streamed stores and sm_copy's SM_COPY_STREAM_MIN, and write nothing past
 * them; sm_copy_streams streams only runs past what the caches keep. */
START_TEST(test_copy_stream)
{
    void (*const fns[])(void *, const void *, size_t) = {sm_copy_stream, sm_copy, copy_as_cached,
                                                         copy_as_streamed};
    const char *const names[] = {"sm_copy_stream", "sm_copy", "sm_copy_as cached",
                                 "sm_copy_as streamed"};
    ck_assert_int_eq(sm_copy_streams(0), 0);
    ck_assert_int_eq(sm_copy_streams((size_t)1 << 20), 0);
    ck_assert_int_eq(sm_copy_streams(SM_COPY_HOT_MAX + 1), 1);
    ck_assert_int_eq(sm_copy_streams(SIZE_MAX), 1);
    const size_t sizes[] = {0,
                            1,
                            15,
                            63,
                            4095,
                            4096,
                            4097,
                            4096 + 63,
                            70001,
                            1 << 20,
                            SM_COPY_STREAM_MIN - 1,
                            SM_COPY_STREAM_MIN,
                            SM_COPY_STREAM_MIN + 4097};
    size_t cap = SM_COPY_STREAM_MIN + 4097 + 64;
    uint8_t *src = malloc(cap), *dst = malloc(cap + 64);
    ck_assert_ptr_nonnull(src);
    ck_assert_ptr_nonnull(dst);
    for (size_t k = 0; k < cap; k++)
        src[k] = (uint8_t)(k * 37u + (k >> 9));
    for (int fn = 0; fn < 4; fn++)
        for (size_t z = 0; z < sizeof sizes / sizeof *sizes; z++)
            for (size_t da = 0; da < 17; da += 5)
                for (size_t sa = 0; sa < 17; sa += 8) {
                    size_t n = sizes[z];
                    memset(dst, 0xee, cap + 64);
                    fns[fn](dst + da, src + sa, n);
                    ck_assert_msg(memcmp(dst + da, src + sa, n) == 0,
                                  "%s: n %zu, dst +%zu, src +%zu", names[fn], n, da, sa);
                    for (size_t k = 0; k < da; k++)
                        ck_assert_int_eq(dst[k], 0xee);
                    for (size_t k = da + n; k < da + n + 64; k++)
                        ck_assert_int_eq(dst[k], 0xee);
                }
    free(src);
    free(dst);
}
END_TEST

/* Whether p[0..n) are all zero. */
static int all_zero(const void *p, size_t n)
{
    const uint8_t *b = p;
    for (size_t k = 0; k < n; k++)
        if (b[k])
            return 0;
    return 1;
}

/* A new pool, owned by the caller (sm_array_pool_free). */
static sm_array_pool *pool_new(void)
{
    sm_array_pool *pool = NULL;
    char err[128];
    ck_assert_int_eq(sm_array_pool_create(&pool, err, sizeof err), SM_OK);
    return pool;
}

/* Array data of 1 MiB and more: freed blocks are kept (up to the limit)
 * and handed out again for the same size class, zero-filled when asked,
 * with the padding past the data zero; nothing is kept by default or
 * beyond the limit, and a trim with no idle time returns everything. */
START_TEST(test_data_cache)
{
    sm_array_pool *P = pool_new();
    sm_array_pool_info ci;
    sm_array_pool_stats(P, &ci);
    ck_assert_uint_eq(ci.max_bytes, 0);  /* the default keeps nothing */
    const size_t n = (3 << 20) + 100005; /* 3.25 MiB blocks */
    uint8_t *p = sm_array_data_alloc(P, n, 1);
    ck_assert_ptr_nonnull(p);
    ck_assert_uint_eq((uintptr_t)p % 64, 0);
    ck_assert(all_zero(p, (n + 63) & ~(size_t)63)); /* the data and its padding */
    memset(p, 0x5a, n);
    sm_array_data_free(P, p, n);
    sm_array_pool_stats(P, &ci);
    ck_assert_uint_eq(ci.held_bytes, 0);

    sm_array_pool_cache_set(P, (size_t)8 << 20, 60000);
    p = sm_array_data_alloc(P, n, 0);
    memset(p, 0x5a, n);
    sm_array_data_free(P, p, n);
    sm_array_pool_stats(P, &ci);
    ck_assert_uint_ge(ci.held_bytes, n);
    int64_t hits = ci.hits;
    /* a size of the same class gets the kept block: zeroed if asked */
    uint8_t *q = sm_array_data_alloc(P, n - 1000, 1);
    ck_assert_ptr_eq(q, p);
    ck_assert(all_zero(q, n - 1000));
    sm_array_pool_stats(P, &ci);
    ck_assert_int_eq(ci.hits, hits + 1);
    ck_assert_uint_eq(ci.held_bytes, 0);
    /* uninitialised: the data is the caller's, the padding is zero */
    memset(q, 0x77, n - 1000);
    sm_array_data_free(P, q, n - 1000);
    q = sm_array_data_alloc(P, n - 1001, 0);
    ck_assert_ptr_eq(q, p);
    ck_assert(all_zero(q + n - 1001, ((n - 1001 + 63) & ~(size_t)63) - (n - 1001)));
    /* another size class is a fresh block */
    uint8_t *r = sm_array_data_alloc(P, (size_t)2 << 20, 0);
    ck_assert_ptr_nonnull(r);
    ck_assert_ptr_ne(r, q);
    sm_array_data_free(P, q, n - 1001);
    sm_array_data_free(P, r, (size_t)2 << 20);
    sm_array_pool_stats(P, &ci);
    ck_assert_uint_le(ci.held_bytes, (size_t)8 << 20);
    ck_assert_uint_ge(ci.held_bytes, ((size_t)2 << 20) + n);
    /* a block larger than the limit is never kept */
    size_t big = (size_t)9 << 20;
    uint8_t *b = sm_array_data_alloc(P, big, 0);
    ck_assert_ptr_nonnull(b);
    b[big - 1] = 1;
    sm_array_data_free(P, b, big);
    sm_array_pool_stats(P, &ci);
    ck_assert_uint_le(ci.held_bytes, (size_t)8 << 20);
    /* a lower limit gives back the excess, a trim with no idle time all */
    sm_array_pool_cache_set(P, (size_t)3 << 20, 60000);
    sm_array_pool_stats(P, &ci);
    ck_assert_uint_le(ci.held_bytes, (size_t)3 << 20);
    sm_array_pool_cache_set(P, (size_t)8 << 20, 0);
    sm_array_pool_trim(P);
    sm_array_pool_stats(P, &ci);
    ck_assert_uint_eq(ci.held_bytes, 0);
    /* arrays go through the same blocks */
    sm_array_pool_cache_set(P, (size_t)8 << 20, 60000);
    sm_shape sh = {.rank = 2, .dims = {1024, 1024}};
    sm_array *a = NULL;
    char err[256];
    ck_assert_int_eq(sm_array_create_in(P, SM_F32, &sh, 0, &a, err, sizeof err), SM_OK);
    ck_assert_ptr_eq(a->pool, P);
    void *ad = a->data;
    memset(ad, 0x11, (size_t)a->nbytes);
    sm_array_free(a);
    ck_assert_int_eq(sm_array_create_in(P, SM_F32, &sh, 1, &a, err, sizeof err), SM_OK);
    ck_assert_ptr_eq(a->data, ad);
    ck_assert(all_zero(a->data, (size_t)a->nbytes));
    sm_array_free(a);
    sm_array_pool_free(P);
}
END_TEST

/* A memory limit: array data beyond it is refused (NULL, and an array
 * create says why), kept blocks are given back to make room, and freeing
 * makes room again. */
START_TEST(test_data_limit)
{
    const size_t mib = (size_t)1 << 20;
    sm_array_pool *P = pool_new();
    sm_array_pool_info ci;
    char why[200], err[300];
    sm_array_pool_limit_set(P, 8 * mib);
    sm_array_pool_cache_set(P, 8 * mib, 60000);
    uint8_t *a = sm_array_data_alloc(P, 5 * mib, 0);
    ck_assert_ptr_nonnull(a);
    ck_assert_int_eq(sm_array_pool_refused(P, 2 * mib, why, sizeof why), 0);
    ck_assert_int_eq(sm_array_pool_refused(P, 4 * mib, why, sizeof why), 1);
    ck_assert_msg(strstr(why, "limit of 8 MiB"), "%s", why);
    ck_assert_ptr_null(sm_array_data_alloc(P, 4 * mib, 0));
    uint8_t *small = sm_array_data_alloc(P, 1000, 1); /* small blocks count too */
    ck_assert_ptr_nonnull(small);
    sm_array_pool_stats(P, &ci);
    ck_assert_uint_eq(ci.limit_bytes, 8 * mib);
    ck_assert_uint_eq(ci.live_bytes, 5 * mib + 1024);
    sm_array_data_free(P, small, 1000);
    /* an array create past the limit: SM_ENOMEM saying so */
    sm_shape sh = {.rank = 1, .dims = {(int64_t)mib}}; /* 4 MiB of f32 */
    sm_array *arr = NULL;
    ck_assert_int_eq(sm_array_create_in(P, SM_F32, &sh, 1, &arr, err, sizeof err), SM_ENOMEM);
    ck_assert_msg(strstr(err, "beyond this process's limit"), "%s", err);
    /* freed into the cache: a block of another size gets the room */
    sm_array_data_free(P, a, 5 * mib);
    sm_array_pool_stats(P, &ci);
    ck_assert_uint_eq(ci.live_bytes, 0);
    ck_assert_uint_ge(ci.held_bytes, 5 * mib);
    uint8_t *b = sm_array_data_alloc(P, 7 * mib, 0);
    ck_assert_ptr_nonnull(b);
    sm_array_pool_stats(P, &ci);
    ck_assert_uint_le(ci.held_bytes + ci.live_bytes, 8 * mib);
    sm_array_data_free(P, b, 7 * mib);
    ck_assert_int_eq(sm_array_create_in(P, SM_F32, &sh, 1, &arr, err, sizeof err), SM_OK);
    sm_array_free(arr);
    /* no limit again */
    sm_array_pool_limit_set(P, 0);
    ck_assert_int_eq(sm_array_pool_refused(P, SIZE_MAX / 2, why, sizeof why), 0);
    sm_array_pool_free(P);
}
END_TEST

/* Two pools in one process keep apart: each has its own limit, its own
 * count (charges included) and its own kept blocks, and a block or an
 * array freed goes back to the pool it came from. No pool (NULL) keeps,
 * counts and limits nothing. A pool given up while one of its arrays is
 * in use lives until that array is freed (the sanitizer build checks that
 * nothing is used after it is freed, or leaked). */
START_TEST(test_pools_apart)
{
    const size_t mib = (size_t)1 << 20;
    sm_array_pool *A = pool_new(), *B = pool_new();
    sm_array_pool_info ai, bi;
    char why[200], err[300];
    sm_array_pool_limit_set(A, 4 * mib);
    sm_array_pool_limit_set(B, 16 * mib);
    sm_array_pool_cache_set(A, 16 * mib, 60000);
    sm_array_pool_cache_set(B, 16 * mib, 60000);
    /* A's limit refuses what B's allows */
    uint8_t *a3 = sm_array_data_alloc(A, 3 * mib, 0);
    ck_assert_ptr_nonnull(a3);
    ck_assert_ptr_null(sm_array_data_alloc(A, 2 * mib, 0));
    ck_assert_int_eq(sm_array_pool_refused(A, 2 * mib, why, sizeof why), 1);
    ck_assert_msg(strstr(why, "limit of 4 MiB"), "%s", why);
    ck_assert_int_eq(sm_array_pool_refused(B, 2 * mib, why, sizeof why), 0);
    uint8_t *b6 = sm_array_data_alloc(B, 6 * mib, 0);
    ck_assert_ptr_nonnull(b6);
    ck_assert_int_eq(sm_array_pool_charge(A, 2 * mib, why, sizeof why), 1);
    ck_assert_int_eq(sm_array_pool_charge(B, 2 * mib, why, sizeof why), 0);
    sm_array_pool_stats(A, &ai);
    sm_array_pool_stats(B, &bi);
    ck_assert_uint_eq(ai.limit_bytes, 4 * mib);
    ck_assert_uint_eq(bi.limit_bytes, 16 * mib);
    ck_assert_uint_eq(ai.live_bytes, 3 * mib);
    ck_assert_uint_eq(bi.live_bytes, 8 * mib);
    ck_assert_uint_eq(ai.other_bytes, 0);
    ck_assert_uint_eq(bi.other_bytes, 2 * mib);
    sm_array_pool_uncharge(B, 2 * mib);
    /* a block freed is kept by its own pool only */
    sm_array_data_free(A, a3, 3 * mib);
    sm_array_pool_stats(A, &ai);
    sm_array_pool_stats(B, &bi);
    ck_assert_uint_ge(ai.held_bytes, 3 * mib);
    ck_assert_uint_eq(bi.held_bytes, 0);
    int64_t bmiss = bi.misses, bhits = bi.hits;
    uint8_t *b3 = sm_array_data_alloc(B, 3 * mib, 0); /* B has none of that size: fresh */
    ck_assert_ptr_nonnull(b3);
    ck_assert_ptr_ne(b3, a3);
    sm_array_pool_stats(B, &bi);
    ck_assert_int_eq(bi.hits, bhits);
    ck_assert_int_eq(bi.misses, bmiss + 1);
    uint8_t *a3b = sm_array_data_alloc(A, 3 * mib, 0); /* A's own kept block */
    ck_assert_ptr_eq(a3b, a3);
    sm_array_data_free(B, b3, 3 * mib);
    sm_array_data_free(B, b6, 6 * mib);
    sm_array_data_free(A, a3b, 3 * mib);
    /* an array records its pool, and sm_array_free gives the data back there */
    sm_shape sh = {.rank = 1, .dims = {(int64_t)mib / 2}}; /* 2 MiB of f32 */
    sm_array *x = NULL, *y = NULL;
    ck_assert_int_eq(sm_array_create_in(B, SM_F32, &sh, 1, &x, err, sizeof err), SM_OK);
    ck_assert_ptr_eq(x->pool, B);
    sm_array_pool_stats(A, &ai);
    size_t aheld = ai.held_bytes;
    sm_array_pool_stats(B, &bi);
    size_t bheld = bi.held_bytes;
    sm_array_free(x);
    sm_array_pool_stats(A, &ai);
    sm_array_pool_stats(B, &bi);
    ck_assert_uint_eq(ai.held_bytes, aheld);
    ck_assert_uint_ge(bi.held_bytes, bheld + 2 * mib);
    ck_assert_uint_eq(bi.live_bytes, 0);
    /* no pool: plain allocation, nothing counted or kept */
    uint8_t *z = sm_array_data_alloc(NULL, 2 * mib, 1);
    ck_assert_ptr_nonnull(z);
    ck_assert(all_zero(z, 2 * mib));
    ck_assert_int_eq(sm_array_pool_refused(NULL, SIZE_MAX / 2, why, sizeof why), 0);
    ck_assert_int_eq(sm_array_pool_charge(NULL, SIZE_MAX / 2, why, sizeof why), 0);
    sm_array_pool_stats(NULL, &ai);
    ck_assert_uint_eq(ai.live_bytes + ai.held_bytes + ai.limit_bytes, 0);
    sm_array_data_free(NULL, z, 2 * mib);
    ck_assert_int_eq(sm_array_create(SM_F32, &sh, &x, err, sizeof err), SM_OK);
    ck_assert_ptr_null(x->pool);
    sm_array_free(x);
    /* A given up with an array of it in use: the array stays valid */
    ck_assert_int_eq(sm_array_create_in(A, SM_F32, &sh, 0, &y, err, sizeof err), SM_OK);
    sm_array_pool_free(A);
    memset(y->data, 0x3c, (size_t)y->nbytes);
    sm_array_free(y);
    sm_array_pool_free(B);
}
END_TEST

int main(void)
{

    return suite_main(SUITE_CASE(
        suite_create("array"), "array", 0, NULL, {test_dtype_table}, {test_dtype_parse_unknown},
        {test_shape_make}, {test_shape_sizes}, {test_shape_strides}, {test_shape_parse},
        {test_shape_format}, {test_shape_equal}, {test_index}, {test_index_check},
        {test_block_copy_random, 5}, {test_block_copy_large_rows},
        {test_block_split_walk, (int)(sizeof split_rows / sizeof split_rows[0])},
        {test_block_copy_errors}, {test_array_create}, {test_copy_stream}, {test_data_cache},
        {test_data_limit}, {test_pools_apart}));
}
