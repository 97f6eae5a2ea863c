/* sm_array: dense host arrays with 64-byte aligned, zero-filled data. */
#include "sm_array.h"
#include "sm_array_share.h"
#include "sm_copy.h"

#include <inttypes.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#if defined(__x86_64__)
#include <emmintrin.h>
#endif

#define SM_ARRAY_ALIGN 64

struct sm_array_block {
    int refs; /* atomic: the arrays (and store shards) holding it */
    sm_array_pool *pool;
    void *base; /* as sm_array_data_alloc gave it */
    size_t len;
};

/* The SM_ENOMEM sentence of n bytes for what that could not be had. */
static sm_err nomem(sm_array_pool *pool, size_t n, const char *what, char *err, size_t errlen)
{
    char why[160];
    if (sm_array_pool_refused(pool, n, why, sizeof why))
        return sm_fail(err, errlen, SM_ENOMEM, "cannot allocate %s of %zu bytes: %s", what, n, why);
    return sm_fail(err, errlen, SM_ENOMEM, "cannot allocate %s of %zu bytes", what, n);
}

sm_err sm_array_scratch(sm_array_pool *pool, size_t n, const char *what, void **out, char *err,
                        size_t errlen)
{
    *out = sm_array_data_alloc(pool, n, 0);
    return *out ? SM_OK : nomem(pool, n, what, err, errlen);
}

sm_err sm_array_create_in(sm_array_pool *pool, sm_dtype t, const sm_shape *s, int zero,
                          sm_array **out, char *err, size_t errlen)
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
        goto fail;
    a->dtype = t;
    a->shape = *s;
    a->nbytes = nbytes;
    a->pool = pool;
    if (nbytes > 0) {
        if (!(a->data = sm_array_data_alloc(pool, (size_t)nbytes, zero)))
            goto fail;
        if (!(a->block = sm_array_block_new(pool, a->data, (size_t)nbytes))) {
            sm_array_data_free(pool, a->data, (size_t)nbytes);
            goto fail;
        }
    }
#if defined(__SANITIZE_ADDRESS__)
    /* Sanitizer builds: a caller that leaves bytes unwritten shows up in the
     * bitwise tests. */
    if (!zero && nbytes > 0)
        memset(a->data, 0xa5, (size_t)nbytes);
#endif
    *out = a;
    return SM_OK;
fail:
    free(a);
    return nomem(pool, (size_t)nbytes, "an array", err, errlen);
}

sm_err sm_array_create(sm_dtype t, const sm_shape *s, sm_array **out, char *err, size_t errlen)
{
    return sm_array_create_in(NULL, t, s, 1, out, err, errlen);
}

sm_err sm_array_create_uninit(sm_dtype t, const sm_shape *s, sm_array **out, char *err,
                              size_t errlen)
{
    return sm_array_create_in(NULL, t, s, 0, out, err, errlen);
}

sm_array_block *sm_array_block_new(sm_array_pool *pool, void *p, size_t n)
{
    sm_array_block *b = malloc(sizeof *b);
    if (b)
        *b = (sm_array_block){.refs = 1, .pool = pool, .base = p, .len = n};
    return b;
}

sm_array_block *sm_array_block_get(sm_array_block *b)
{
    __atomic_add_fetch(&b->refs, 1, __ATOMIC_RELAXED);
    return b;
}

void sm_array_block_put(sm_array_block *b)
{
    if (b && __atomic_sub_fetch(&b->refs, 1, __ATOMIC_ACQ_REL) == 0) {
        sm_array_data_free(b->pool, b->base, b->len);
        free(b);
    }
}

int sm_array_block_refs(const sm_array_block *b)
{
    return __atomic_load_n(&b->refs, __ATOMIC_ACQUIRE);
}

size_t sm_array_block_len(const sm_array_block *b)
{
    return b->len;
}

void sm_array_free(sm_array *a)
{
    if (!a)
        return;
    if (a->block)
        sm_array_block_put(a->block);
    else
        sm_array_data_free(a->pool, a->data, (size_t)a->nbytes);
    free(a);
}

int sm_array_alias(sm_array *dst, const sm_array *src, int64_t offset)
{
    if (!src->block || offset < 0 || offset % SM_ARRAY_ALIGN || offset > src->nbytes ||
        dst->nbytes > src->nbytes - offset)
        return 0;
    sm_array_block *b = sm_array_block_get(src->block);
    if (dst->block)
        sm_array_block_put(dst->block);
    else
        sm_array_data_free(dst->pool, dst->data, (size_t)dst->nbytes);
    dst->block = b;
    dst->pool = b->pool;
    dst->data = dst->nbytes ? (char *)src->data + offset : NULL;
    return 1;
}

size_t sm_array_held(const sm_array *a)
{
    return a->block ? a->block->len : (size_t)a->nbytes;
}

sm_array_block *sm_array_take(sm_array *a, void **data)
{
    sm_array_block *b = a->block;
    *data = a->data;
    a->data = NULL;
    a->block = NULL;
    return b;
}

void sm_copy_stream(void *dst, const void *src, size_t n)
{
#if defined(__x86_64__)
    if (n >= 4096) {
        char *d = dst;
        const char *s = src;
        size_t head = (16 - ((uintptr_t)d & 15)) & 15;
        memcpy(d, s, head);
        d += head;
        s += head;
        n -= head;
        for (; n >= 64; n -= 64, d += 64, s += 64) {
            __m128i a = _mm_loadu_si128((const __m128i *)s);
            __m128i b = _mm_loadu_si128((const __m128i *)(s + 16));
            __m128i c = _mm_loadu_si128((const __m128i *)(s + 32));
            __m128i e = _mm_loadu_si128((const __m128i *)(s + 48));
            _mm_stream_si128((__m128i *)d, a);
            _mm_stream_si128((__m128i *)(d + 16), b);
            _mm_stream_si128((__m128i *)(d + 32), c);
            _mm_stream_si128((__m128i *)(d + 48), e);
        }
        memcpy(d, s, n);
        _mm_sfence(); /* the streamed stores are visible before what follows */
        return;
    }
#endif
    memcpy(dst, src, n);
}

int sm_copy_streams(size_t total)
{
    static size_t hot; /* 0 until known */
    size_t h = __atomic_load_n(&hot, __ATOMIC_RELAXED);
    if (!h) {
        long llc = sysconf(_SC_LEVEL3_CACHE_SIZE);
        h = llc > 0 && (size_t)llc * 2 < SM_COPY_HOT_MAX ? (size_t)llc * 2 : SM_COPY_HOT_MAX;
        __atomic_store_n(&hot, h, __ATOMIC_RELAXED);
    }
    return total > h;
}

void sm_copy_as(void *dst, const void *src, size_t n, int stream)
{
    if (stream)
        sm_copy_stream(dst, src, n);
    else
        memcpy(dst, src, n);
}

void sm_copy(void *dst, const void *src, size_t n)
{
    if (n < SM_COPY_STREAM_MIN)
        memcpy(dst, src, n);
    else
        sm_copy_stream(dst, src, n);
}
