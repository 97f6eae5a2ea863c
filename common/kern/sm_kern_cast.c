/* Conversion and creation kernels: astype for every pair of f32 f64 i32 i64
 * u8 bool, fill and iota. */
#include "sm_kern_impl.h"

typedef void (*smk_cvt_fn)(void *o, const void *x, int64_t n);

/* Element conversions by (from kind, to kind): F float, I integer, B bool.
 * Float to integer saturates with NaN -> 0 (XLA); LO/HI are the target's
 * range as floats (HI exclusive), MN/MX its limits. */
#define SMK_CVT_FF(FT, TT, x, LO, HI, MN, MX) ((TT)(x))
#define SMK_CVT_FI(FT, TT, x, LO, HI, MN, MX)                                                      \
    ((x) != (x) ? (TT)0 : (x) >= (FT)(HI) ? (TT)(MX) : (x) <= (FT)(LO) ? (TT)(MN) : (TT)(x))
#define SMK_CVT_FB(FT, TT, x, LO, HI, MN, MX) ((TT)((x) != 0))
#define SMK_CVT_IF                            SMK_CVT_FF
#define SMK_CVT_II                            SMK_CVT_FF
#define SMK_CVT_IB                            SMK_CVT_FB
#define SMK_CVT_BF                            SMK_CVT_FF
#define SMK_CVT_BI                            SMK_CVT_FF
#define SMK_CVT_BB                            SMK_CVT_FB

/* X(enum, tag, C type, kind, LO, HI, MN, MX) -- two copies so they nest. */
#define SMK_CVT_TYPES_A(X, ...)                                                                    \
    X(__VA_ARGS__, SM_F32, f32, float, F, 0, 0, 0, 0)                                              \
    X(__VA_ARGS__, SM_F64, f64, double, F, 0, 0, 0, 0)                                             \
    X(__VA_ARGS__, SM_I32, i32, int32_t, I, -2147483648.0, 2147483648.0, INT32_MIN, INT32_MAX)     \
    X(__VA_ARGS__, SM_I64, i64, int64_t, I, -9223372036854775808.0, 9223372036854775808.0,         \
      INT64_MIN, INT64_MAX)                                                                        \
    X(__VA_ARGS__, SM_U8, u8, uint8_t, I, 0.0, 256.0, 0, 255)                                      \
    X(__VA_ARGS__, SM_BOOL, bool, uint8_t, B, 0, 0, 0, 1)
#define SMK_CVT_TYPES_B(X)                                                                         \
    X(SM_F32, f32, float, F)                                                                       \
    X(SM_F64, f64, double, F)                                                                      \
    X(SM_I32, i32, int32_t, I)                                                                     \
    X(SM_I64, i64, int64_t, I)                                                                     \
    X(SM_U8, u8, uint8_t, I)                                                                       \
    X(SM_BOOL, bool, uint8_t, B)

#define SMK_CVT_DEF(FE, FN, FT, FK, TE, TN, TT, TK, LO, HI, MN, MX)                                \
    static inline void cvt_##FN##_##TN##_r(TT *restrict o, const FT *restrict xs, int64_t n)       \
    {                                                                                              \
        SMK_FOR(i, n, {                                                                            \
            FT x = xs[i];                                                                          \
            o[i] = SMK_CVT_##FK##TK(FT, TT, x, LO, HI, MN, MX);                                    \
        });                                                                                        \
    }                                                                                              \
    static void cvt_##FN##_##TN(void *o, const void *x, int64_t n)                                 \
    {                                                                                              \
        cvt_##FN##_##TN##_r(o, x, n);                                                              \
    }
#define SMK_CVT_FROM(FE, FN, FT, FK) SMK_CVT_TYPES_A(SMK_CVT_DEF, FE, FN, FT, FK)
SMK_CVT_TYPES_B(SMK_CVT_FROM)

#define SMK_CVT_CELL(FE, FN, FT, FK, TE, TN, TT, TK, LO, HI, MN, MX) [TE] = cvt_##FN##_##TN,
#define SMK_CVT_ROW(FE, FN, FT, FK)                                  [FE] = {SMK_CVT_TYPES_A(SMK_CVT_CELL, FE, FN, FT, FK)},
static const smk_cvt_fn cvt_table[SM_DTYPE_COUNT][SM_DTYPE_COUNT] = {SMK_CVT_TYPES_B(SMK_CVT_ROW)};

sm_err sm_kern_astype(sm_dtype from, const void *x, sm_dtype to, void *out, int64_t n, char *err,
                      size_t errlen)
{
    if ((unsigned)from >= SM_DTYPE_COUNT || (unsigned)to >= SM_DTYPE_COUNT || !cvt_table[from][to])
        return sm_fail(err, errlen, SM_EUNSUPPORTED, "astype from %s to %s is not supported",
                       sm_dtype_name(from), sm_dtype_name(to));
    if (n < 0)
        return sm_fail(err, errlen, SM_EINVAL, "astype of a negative count %lld", (long long)n);
    cvt_table[from][to](out, x, n);
    return SM_OK;
}

static void fill_4(uint32_t *restrict o, uint32_t v, int64_t n)
{
    SMK_FOR(i, n, { o[i] = v; });
}

static void fill_8(uint64_t *restrict o, uint64_t v, int64_t n)
{
    SMK_FOR(i, n, { o[i] = v; });
}

sm_err sm_kern_fill(sm_dtype t, void *out, int64_t n, const void *value, char *err, size_t errlen)
{
    size_t e = smk_elem(t);
    if (!e)
        return sm_fail(err, errlen, SM_EUNSUPPORTED, "fill does not support dtype %s",
                       sm_dtype_name(t));
    if (n <= 0)
        return n < 0
                   ? sm_fail(err, errlen, SM_EINVAL, "fill of a negative count %lld", (long long)n)
                   : SM_OK;
    switch (e) {
    case 1:
        memset(out, *(const uint8_t *)value, (size_t)n);
        break;
    case 2: {
        uint16_t v, *o = out;
        memcpy(&v, value, sizeof v);
        for (int64_t i = 0; i < n; i++)
            o[i] = v;
        break;
    }
    case 4: {
        uint32_t v;
        memcpy(&v, value, sizeof v);
        fill_4(out, v, n);
        break;
    }
    default: {
        uint64_t v;
        memcpy(&v, value, sizeof v);
        fill_8(out, v, n);
        break;
    }
    }
    return SM_OK;
}

#define SMK_IOTA_DEF(name, T)                                                                      \
    static void name(T *restrict o, int64_t outer, int64_t mid, int64_t inner)                     \
    {                                                                                              \
        for (int64_t a = 0; a < outer; a++)                                                        \
            for (int64_t j = 0; j < mid; j++) {                                                    \
                T v = (T)j;                                                                        \
                T *row = o + (a * mid + j) * inner;                                                \
                SMK_FOR(i, inner, { row[i] = v; });                                                \
            }                                                                                      \
    }
SMK_IOTA_DEF(iota_f32, float)
SMK_IOTA_DEF(iota_f64, double)
SMK_IOTA_DEF(iota_i32, int32_t)
SMK_IOTA_DEF(iota_i64, int64_t)
SMK_IOTA_DEF(iota_u8, uint8_t)

sm_err sm_kern_iota(sm_dtype t, const sm_shape *s, int axis, void *out, char *err, size_t errlen)
{
    int ax = smk_axis(axis, s->rank);
    if (ax < 0) {
        char b[128];
        return sm_fail(err, errlen, SM_EINVAL, "iota axis %d is out of range for shape %s", axis,
                       smk_fmt(s, b, sizeof b));
    }
    int64_t outer = 1, inner = 1, mid = s->dims[ax];
    for (int i = 0; i < ax; i++)
        outer *= s->dims[i];
    for (int i = ax + 1; i < s->rank; i++)
        inner *= s->dims[i];
    switch (t) {
    case SM_F32:
        iota_f32(out, outer, mid, inner);
        break;
    case SM_F64:
        iota_f64(out, outer, mid, inner);
        break;
    case SM_I32:
        iota_i32(out, outer, mid, inner);
        break;
    case SM_I64:
        iota_i64(out, outer, mid, inner);
        break;
    case SM_U8:
        iota_u8(out, outer, mid, inner);
        break;
    default:
        return sm_fail(err, errlen, SM_EUNSUPPORTED, "iota does not support dtype %s",
                       sm_dtype_name(t));
    }
    return SM_OK;
}
