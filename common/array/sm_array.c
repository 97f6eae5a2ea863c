/* sm_array: dense host arrays with 64-byte aligned data, zero-filled unless
 * asked otherwise. */
#include "sm_array.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#define SM_ARRAY_ALIGN 64

/* sm_array_create (zero 1) or sm_array_create_uninit (zero 0). */
static sm_err sm_array_alloc(sm_dtype t, const sm_shape *s, int zero, sm_array **out, char *err,
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
        if (zero)
            memset(a->data, 0, padded);
        else /* only the padding past the data */
            memset((char *)a->data + nbytes, 0, padded - (size_t)nbytes);
    }
    *out = a;
    return SM_OK;
nomem:
    free(a);
    return sm_fail(err, errlen, SM_ENOMEM, "cannot allocate an array of %" PRId64 " bytes", nbytes);
}

sm_err sm_array_create(sm_dtype t, const sm_shape *s, sm_array **out, char *err, size_t errlen)
{
    return sm_array_alloc(t, s, 1, out, err, errlen);
}

sm_err sm_array_create_uninit(sm_dtype t, const sm_shape *s, sm_array **out, char *err,
                              size_t errlen)
{
    return sm_array_alloc(t, s, 0, out, err, errlen);
}

void sm_array_free(sm_array *a)
{
    if (!a)
        return;
    free(a->data);
    free(a);
}
