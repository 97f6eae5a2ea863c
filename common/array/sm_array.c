/* sm_array: dense host arrays with 64-byte aligned, zero-filled data. */
#include "sm_array.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#define SM_ARRAY_ALIGN 64

/* sm_array_create (fill 0) and sm_array_create_uninit (fill -1: none). */
static sm_err sm_array_alloc(sm_dtype t, const sm_shape *s, int fill, sm_array **out, char *err,
                             size_t errlen)
{
    sm_array *a = NULL;
    int64_t nbytes;
    if (!out)
        return sm_fail(err, errlen, SM_EINVAL, "output array pointer is NULL");
    sm_err e = sm_shape_nbytes(s, t, &nbytes, err, errlen);
    if (e)
        return e;
    if ((uint64_t)nbytes > SIZE_MAX - SM_ARRAY_ALIGN)
        return sm_fail(err, errlen, SM_EOVERFLOW, "array of %" PRId64 " bytes exceeds size_t",
                       nbytes);
    a = calloc(1, sizeof *a);
    if (!a)
        goto nomem;
    a->dtype = t;
    a->shape = *s;
    a->nbytes = nbytes;
    if (nbytes > 0) {
        size_t padded = ((size_t)nbytes + SM_ARRAY_ALIGN - 1) & ~(size_t)(SM_ARRAY_ALIGN - 1);
        if (posix_memalign(&a->data, SM_ARRAY_ALIGN, padded) != 0) {
            a->data = NULL;
            goto nomem;
        }
        if (fill >= 0)
            memset(a->data, fill, padded);
    }
    *out = a;
    return SM_OK;
nomem:
    free(a);
    return sm_fail(err, errlen, SM_ENOMEM, "cannot allocate an array of %" PRId64 " bytes", nbytes);
}

sm_err sm_array_create(sm_dtype t, const sm_shape *s, sm_array **out, char *err, size_t errlen)
{
    return sm_array_alloc(t, s, 0, out, err, errlen);
}

sm_err sm_array_create_uninit(sm_dtype t, const sm_shape *s, sm_array **out, char *err,
                              size_t errlen)
{
#if defined(__SANITIZE_ADDRESS__)
    return sm_array_alloc(t, s, 0xa5, out, err, errlen);
#else
    return sm_array_alloc(t, s, -1, out, err, errlen);
#endif
}

void sm_array_free(sm_array *a)
{
    if (!a)
        return;
    free(a->data);
    free(a);
}
