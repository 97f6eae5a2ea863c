/* sm_dtype: the dtype table, expanded from SM_DTYPE_LIST. */
#include "sm_dtype.h"

#include <string.h>

static const char *const sm_dtype_names[] = {
#define SM_DTYPE_NAME(e, s, l, sz, d) s,
    SM_DTYPE_LIST(SM_DTYPE_NAME)
#undef SM_DTYPE_NAME
};

static const char *const sm_dtype_long_names[] = {
#define SM_DTYPE_LONG(e, s, l, sz, d) l,
    SM_DTYPE_LIST(SM_DTYPE_LONG)
#undef SM_DTYPE_LONG
};

static const size_t sm_dtype_sizes[] = {
#define SM_DTYPE_SIZE(e, s, l, sz, d) sz,
    SM_DTYPE_LIST(SM_DTYPE_SIZE)
#undef SM_DTYPE_SIZE
};

_Static_assert(sizeof(sm_dtype_names) / sizeof(sm_dtype_names[0]) == SM_DTYPE_COUNT,
               "one name per dtype");
_Static_assert(sizeof(sm_dtype_sizes) / sizeof(sm_dtype_sizes[0]) == SM_DTYPE_COUNT,
               "one size per dtype");

static int sm_dtype_valid(sm_dtype t)
{
    return (int)t >= 0 && t < SM_DTYPE_COUNT;
}

const char *sm_dtype_name(sm_dtype t)
{
    return sm_dtype_valid(t) ? sm_dtype_names[t] : "?";
}

const char *sm_dtype_long_name(sm_dtype t)
{
    return sm_dtype_valid(t) ? sm_dtype_long_names[t] : "?";
}

size_t sm_dtype_size(sm_dtype t)
{
    return sm_dtype_valid(t) ? sm_dtype_sizes[t] : 0;
}

int sm_dtype_parse(const char *s, sm_dtype *out)
{
    if (!s || !out)
        return -1;
    for (int t = 0; t < SM_DTYPE_COUNT; t++) {
        if (strcmp(s, sm_dtype_names[t]) == 0 || strcmp(s, sm_dtype_long_names[t]) == 0) {
            *out = (sm_dtype)t;
            return 0;
        }
    }
    return -1;
}

int sm_dtype_is_float(sm_dtype t)
{
    return t == SM_F16 || t == SM_BF16 || t == SM_F32 || t == SM_F64;
}

int sm_dtype_is_int(sm_dtype t)
{
    return t == SM_I32 || t == SM_I64 || t == SM_U8;
}
