/* sm_shape: shapes, index boxes and strided block copies over row-major
 * buffers. Value types, no ownership. */
#ifndef SM_SHAPE_H
#define SM_SHAPE_H

#include <stddef.h>
#include <stdint.h>

#include "sm_dtype.h"
#include "sm_err.h"

#define SM_MAX_RANK 8

typedef struct {
    int rank; /* 0..SM_MAX_RANK; 0 is a scalar */
    int64_t dims[SM_MAX_RANK];
} sm_shape;

/* A half-open range [start, stop) along one dimension. */
typedef struct {
    int64_t start, stop;
} sm_range;

/* A box: one range per dimension (a device's slice of a global array). */
typedef struct {
    int rank;
    sm_range r[SM_MAX_RANK];
} sm_index;

/* Builds a shape; fails with SM_EINVAL for rank > SM_MAX_RANK or a negative
 * dimension. */
sm_err sm_shape_make(sm_shape *out, int rank, const int64_t *dims, char *err, size_t errlen);
/* Element count, overflow-checked (SM_EOVERFLOW names the shape). */
sm_err sm_shape_numel(const sm_shape *s, int64_t *out, char *err, size_t errlen);
/* Byte count of a dense array of s in dtype t, overflow-checked. */
sm_err sm_shape_nbytes(const sm_shape *s, sm_dtype t, int64_t *out, char *err, size_t errlen);
/* Row-major element strides of s into strides[0..rank-1] (the last is 1; a
 * zero dimension counts as 1). Fails like sm_shape_numel. */
sm_err sm_shape_strides(const sm_shape *s, int64_t *strides, char *err, size_t errlen);
int sm_shape_equal(const sm_shape *a, const sm_shape *b);
/* Formats "[8,16]" ("[]" for a scalar) into buf; returns buf. */
char *sm_shape_format(const sm_shape *s, char *buf, size_t len);
/* Parses "8,16" or "[8,16]" or "(8, 16)"; "" / "[]" / "()" is a scalar. */
sm_err sm_shape_parse(const char *text, sm_shape *out, char *err, size_t errlen);
/* Shape of a box (stop - start per dimension). */
sm_shape sm_index_shape(const sm_index *ix);
int sm_index_equal(const sm_index *a, const sm_index *b);
/* Formats "[0:2, 0:16]" into buf; returns buf. */
char *sm_index_format(const sm_index *ix, char *buf, size_t len);
/* The whole-array box of s. */
sm_index sm_index_full(const sm_shape *s);
/* Checks that box lies in shape (same rank, 0 <= start <= stop <= dim);
 * SM_EINVAL naming both otherwise, the shape called `what` ("shard"). */
sm_err sm_index_check(const sm_index *box, const sm_shape *shape, const char *what, char *err,
                      size_t errlen);

/* Copies a box of `extent` elements (per dimension, rank dims) of size elem
 * from src (row-major, shape src_shape) at offset src_off to dst (row-major,
 * shape dst_shape) at offset dst_off. Shapes must have the same rank; the box
 * must fit in both (checked: SM_EINVAL). Contiguous inner runs are copied
 * with memcpy. Rank 0 copies one element. src and dst must not overlap; a
 * zero extent copies nothing (the buffers may then be NULL). */
sm_err sm_block_copy(void *dst, const sm_shape *dst_shape, const int64_t *dst_off, const void *src,
                     const sm_shape *src_shape, const int64_t *src_off, const int64_t *extent,
                     size_t elem, char *err, size_t errlen);

#endif
