/* Conversion and creation kernels: astype for every pair of f32 f64 i32 i64
 * u8 bool f16 bf16 (the half floats through float32, rounded to nearest
 * even), fill and iota. */
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

/* float32 -> IEEE half, rounded to nearest even (overflow to inf, NaN
 * kept quiet). */
static uint16_t smk_f32_to_f16(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000, mant = x & 0x7fffff;
    int32_t e = (int32_t)((x >> 23) & 0xff);
    if (e == 0xff)
        return (uint16_t)(sign | 0x7c00 | (mant ? 0x200 | (mant >> 13) : 0));
    e = e - 127 + 15;
    if (e >= 0x1f)
        return (uint16_t)(sign | 0x7c00);
    if (e <= 0) { /* a subnormal half, or zero */
        if (e < -10)
            return (uint16_t)sign;
        mant |= 0x800000;
        uint32_t shift = (uint32_t)(14 - e), h = mant >> shift;
        uint32_t rem = mant & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (h & 1)))
            h++;
        return (uint16_t)(sign | h);
    }
    uint32_t h = ((uint32_t)e << 10) | (mant >> 13), rem = mant & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (h & 1)))
        h++; /* a carry into the exponent is right, up to inf */
    return (uint16_t)(sign | h);
}

static float smk_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 0x1f, mant = h & 0x3ffu, x;
    if (e == 0x1f) {
        x = sign | 0x7f800000 | (mant << 13);
    } else if (e == 0) {
        if (!mant) {
            x = sign;
        } else { /* subnormal: mant * 2^-24, normalized */
            int k = -1;
            do {
                k++;
                mant <<= 1;
            } while (!(mant & 0x400));
            x = sign | ((uint32_t)(127 - 15 - k) << 23) | ((mant & 0x3ff) << 13);
        }
    } else {
        x = sign | ((e + 112) << 23) | (mant << 13);
    }
    float f;
    memcpy(&f, &x, 4);
    return f;
}

/* float32 -> bfloat16, rounded to nearest even (NaN kept quiet). */
static uint16_t smk_f32_to_bf16(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffff) > 0x7f800000)
        return (uint16_t)((x >> 16) | 0x40);
    return (uint16_t)((x + 0x7fff + ((x >> 16) & 1)) >> 16);
}

static float smk_bf16_to_f32(uint16_t h)
{
    uint32_t x = (uint32_t)h << 16;
    float f;
    memcpy(&f, &x, 4);
    return f;
}

/* astype from or to a half float: a block at a time through float32. */
static sm_err smk_astype_half(sm_dtype from, const void *x, sm_dtype to, void *out, int64_t n,
                              char *err, size_t errlen)
{
    int fh = from == SM_F16 || from == SM_BF16, th = to == SM_F16 || to == SM_BF16;
    if ((!fh && !cvt_table[from][SM_F32]) || (!th && !cvt_table[SM_F32][to]))
        return sm_fail(err, errlen, SM_EUNSUPPORTED, "astype from %s to %s is not supported",
                       sm_dtype_name(from), sm_dtype_name(to));
    float buf[1024];
    size_t fe = sm_dtype_size(from), te = sm_dtype_size(to);
    for (int64_t at = 0; at < n; at += 1024) {
        int64_t m = n - at < 1024 ? n - at : 1024;
        const char *src = (const char *)x + at * (int64_t)fe;
        char *dst = (char *)out + at * (int64_t)te;
        if (fh) {
            const uint16_t *hs = (const uint16_t *)src;
            for (int64_t i = 0; i < m; i++)
                buf[i] = from == SM_F16 ? smk_f16_to_f32(hs[i]) : smk_bf16_to_f32(hs[i]);
        } else {
            cvt_table[from][SM_F32](buf, src, m);
        }
        if (th) {
            uint16_t *hd = (uint16_t *)dst;
            for (int64_t i = 0; i < m; i++)
                hd[i] = to == SM_F16 ? smk_f32_to_f16(buf[i]) : smk_f32_to_bf16(buf[i]);
        } else {
            cvt_table[SM_F32][to](dst, buf, m);
        }
    }
    return SM_OK;
}

sm_err sm_kern_astype(sm_dtype from, const void *x, sm_dtype to, void *out, int64_t n, char *err,
                      size_t errlen)
{
    if ((unsigned)from < SM_DTYPE_COUNT && (unsigned)to < SM_DTYPE_COUNT && n >= 0 &&
        (from == SM_F16 || from == SM_BF16 || to == SM_F16 || to == SM_BF16)) {
        if (from == to) {
            memcpy(out, x, (size_t)n * 2);
            return SM_OK;
        }
        return smk_astype_half(from, x, to, out, n, err, errlen);
    }
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
