/* sm_dtype: element types. One X-macro row per dtype gives its enum, short
 * name (as in type strings), numpy-style long name, element size and .npy
 * descr. Names are parsed case-sensitively; both "f32" and "float32" work. */
#ifndef SM_DTYPE_H
#define SM_DTYPE_H

#include <stddef.h>

/* X(ENUM, short, long, size, npy_descr) */
#define SM_DTYPE_LIST(X)                                                                           \
    X(SM_F32, "f32", "float32", 4, "<f4")                                                          \
    X(SM_F64, "f64", "float64", 8, "<f8")                                                          \
    X(SM_I32, "i32", "int32", 4, "<i4")                                                            \
    X(SM_I64, "i64", "int64", 8, "<i8")                                                            \
    X(SM_U8, "u8", "uint8", 1, "|u1")                                                              \
    X(SM_BOOL, "bool", "bool", 1, "|b1")                                                           \
    X(SM_F16, "f16", "float16", 2, "<f2")                                                          \
    X(SM_BF16, "bf16", "bfloat16", 2, "<V2")

typedef enum {
#define SM_DTYPE_ENUM(e, s, l, sz, d) e,
    SM_DTYPE_LIST(SM_DTYPE_ENUM)
#undef SM_DTYPE_ENUM
        SM_DTYPE_COUNT
} sm_dtype;

/* Short name ("f32"), or "?" for an invalid value. */
const char *sm_dtype_name(sm_dtype t);
/* Long name ("float32"), or "?". */
const char *sm_dtype_long_name(sm_dtype t);
/* Element size in bytes, 0 for an invalid value. */
size_t sm_dtype_size(sm_dtype t);
/* Parses a short or long name; returns 0 on success, -1 if unknown. */
int sm_dtype_parse(const char *s, sm_dtype *out);
/* 1 for f16 bf16 f32 f64. */
int sm_dtype_is_float(sm_dtype t);
/* 1 for i32 i64 u8. */
int sm_dtype_is_int(sm_dtype t);

#endif
