/* sm_array: dense host arrays with 64-byte aligned, zero-filled data. */
#include "sm_array.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#define SM_ARRAY_ALIGN 64

sm_err sm_array_create(sm_dtype t, const sm_shape *s, sm_array **out, char *err, size_t errlen)
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
        memset(a->data, 0, padded);
    }
    *out = a;
    return SM_OK;
nomem:
    free(a);
    return sm_fail(err, errlen, SM_ENOMEM, "cannot allocate an array of %" PRId64 " bytes", nbytes);
}

void sm_array_free(sm_array *a)
{
    if (!a)
        return;
    free(a->data);
    free(a);
}
