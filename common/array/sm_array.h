/* sm_array: a dense row-major host array (dtype, shape, owned data), the
 * pools its data comes from (sm_array_pool: a cache of freed blocks and a
 * memory limit, owned by whoever made it), and .npy files (format
 * versions 1.0, 2.0 and 3.0, little-endian, C order). Anything else
 * (big-endian, Fortran order, object dtypes, truncated data) is refused
 * with SM_EFORMAT or SM_EUNSUPPORTED and a sentence naming it. */
#ifndef SM_ARRAY_H
#define SM_ARRAY_H

#include <stdint.h>
#include <stdio.h>

#include "sm_dtype.h"
#include "sm_err.h"
#include "sm_shape.h"

/* A pool of array memory (sm_array_pool_create below): where array data
 * comes from, with a cache of freed blocks and a memory limit. Every
 * function that takes a pool takes NULL too: plain allocation, nothing
 * kept, nothing counted, no limit. */
typedef struct sm_array_pool sm_array_pool;

/* The counted block of memory an array's data lies in: arrays made by
 * sm_array_create* own one each, and arrays aliasing them share it (inside
 * shmap: a worker's job values share bytes instead of copying them); its
 * memory goes back to its pool with the last of them. Opaque. */
typedef struct sm_array_block sm_array_block;

typedef struct {
    sm_dtype dtype;
    sm_shape shape;
    int64_t nbytes;
    void *data;            /* 64-byte aligned; NULL only when nbytes == 0. Bytes
                            * other arrays may share (block): never written
                            * once the array holding them is made */
    sm_array_pool *pool;   /* where data came from (sm_array_free gives it back
                            * there); NULL: no pool */
    sm_array_block *block; /* the counted block data lies in (sm_array_create*).
                            * An array made by hand, a view of memory someone
                            * else owns, has NULL (nothing may alias it), or
                            * the block of that memory when its owner holds
                            * one, uncounted: aliases of the view count
                            * themselves and may outlive it and the owner */
} sm_array;

/* Allocates a zero-filled array with no pool; *out is owned by the caller
 * (sm_array_free). */
sm_err sm_array_create(sm_dtype t, const sm_shape *s, sm_array **out, char *err, size_t errlen);
/* sm_array_create without the zero fill, for callers that write every
 * byte before reading any: the contents are undefined until then.
 * Sanitizer builds fill it with 0xa5 bytes, so that a caller that leaves
 * some unwritten shows up in tests. */
sm_err sm_array_create_uninit(sm_dtype t, const sm_shape *s, sm_array **out, char *err,
                              size_t errlen);
/* sm_array_create (zero set) or sm_array_create_uninit (zero 0) with the
 * data from pool (NULL: none), which the array records: it counts against
 * the pool's limit (SM_ENOMEM naming it) and goes back to the pool when
 * the array is freed. */
sm_err sm_array_create_in(sm_array_pool *pool, sm_dtype t, const sm_shape *s, int zero,
                          sm_array **out, char *err, size_t errlen);
/* Frees the array and gives its data back to its pool, once no other
 * array shares it. NULL ok. */
void sm_array_free(sm_array *a);

/* memcpy for bulk data written now and read much later (a received chunk
 * landing in a shard): from 4 KiB up, the stores bypass the cache, which
 * spares reading each destination line first (about 1.4x memcpy into cold
 * memory here). dst and src must not overlap. */
void sm_copy_stream(void *dst, const void *src, size_t n);

/* n bytes (n may be 0) for array data from pool (NULL: none), 64-byte
 * aligned, zero-filled if zero, freed with sm_array_data_free(pool, p, n)
 * (the same pool and n); NULL if out of memory or past the pool's limit.
 * Blocks of 1 MiB and more are mappings of their own, kept when freed for
 * a later block of about the same size (sm_array_pool_cache_set); fresh
 * ones of 8 MiB and more are prefaulted (mapped at once rather than page
 * by page on first write), for data that is about to be written in full.
 * Thread-safe. */
void *sm_array_data_alloc(sm_array_pool *pool, size_t n, int zero);
void sm_array_data_free(sm_array_pool *pool, void *p, size_t n);
/* n bytes of scratch for work on array data (a collective's staging, a
 * temporary the size of an operand) into *out: sm_array_data_alloc from
 * pool, so it counts against the pool's limit like array data and reuses
 * kept blocks. SM_ENOMEM with a sentence naming what (and the limit, when
 * that is why). Free with sm_array_data_free(pool, *out, n). */
sm_err sm_array_scratch(sm_array_pool *pool, size_t n, const char *what, void **out, char *err,
                        size_t errlen);

/* ---- pools -----------------------------------------------------------------
 * A pool belongs to whoever creates it (a worker's main(), a client): the
 * process holds no array memory state of its own, so two pools in one
 * process never see each other's blocks, cache or limit. Every function
 * below is thread-safe. */

/* A new pool that keeps nothing and has no limit; *out is owned by the
 * caller (sm_array_pool_free). SM_ENOMEM if there is no memory for it. */
sm_err sm_array_pool_create(sm_array_pool **out, char *err, size_t errlen);
/* Gives up the owner's hold: kept blocks go back to the system at once,
 * blocks freed later are not kept, and the pool itself is freed with the
 * last block still in use (so arrays may outlive their pool's owner, and
 * sm_array_free stays valid for them). The caller's sm_array_pool_charge
 * bytes must have been given back before. NULL ok. */
void sm_array_pool_free(sm_array_pool *pool);

/* How much freed array memory (blocks of 1 MiB and more) the pool keeps
 * for reuse: at most max_bytes, each block for at most idle_ms after it was
 * freed (checked on every free and on sm_array_pool_trim). A new pool
 * keeps nothing. An owner that frees and allocates large arrays over and
 * over (a worker's shards and job values) skips the page faults of fresh
 * memory, which cost more here than moving the bytes. */
void sm_array_pool_cache_set(sm_array_pool *pool, size_t max_bytes, int idle_ms);
/* Returns the blocks kept longer than idle_ms to the system. */
void sm_array_pool_trim(sm_array_pool *pool);
typedef struct {
    size_t max_bytes, held_bytes;   /* the cache's size; kept now */
    int64_t hits, misses;           /* allocations of 1 MiB and more served kept / fresh */
    size_t limit_bytes, live_bytes; /* sm_array_pool_limit_set; array data in use (and
                                     * sm_array_pool_charge's) */
    size_t other_bytes;             /* of live_bytes: sm_array_pool_charge's */
} sm_array_pool_info;
/* A snapshot of the pool's counts into *out (all zero for NULL). */
void sm_array_pool_stats(sm_array_pool *pool, sm_array_pool_info *out);

/* The most array data (its sm_array_data_alloc blocks, counted whole, kept
 * ones included) the pool may hold; 0 (a new pool's): no limit. Beyond it
 * sm_array_data_alloc returns NULL (giving back kept blocks first), and
 * sm_array_create_in fails with SM_ENOMEM saying so. */
void sm_array_pool_limit_set(sm_array_pool *pool, size_t bytes);
/* 1, with a sentence in why, if n more bytes of array data would pass the
 * pool's limit now; 0 otherwise (no pool, no limit, or room). */
int sm_array_pool_refused(sm_array_pool *pool, size_t n, char *why, size_t whylen);
/* Memory its owner holds outside array data that counts against the
 * pool's limit (a worker's shared-memory pages): charges n bytes and
 * returns 0; or returns 1, charging nothing, with a sentence in why, if
 * they would pass the limit (no pool: always 0). Give them back with
 * sm_array_pool_uncharge(pool, n). */
int sm_array_pool_charge(sm_array_pool *pool, size_t n, char *why, size_t whylen);
void sm_array_pool_uncharge(sm_array_pool *pool, size_t n);

/* The header of a .npy file: what it holds and where its data starts. */
typedef struct {
    sm_dtype dtype;
    sm_shape shape;
    int64_t nbytes;      /* data bytes */
    int64_t data_offset; /* header length, in bytes, from the start of the file */
    int fortran;         /* the data is column-major (fortran_order True, rank 2 and more) */
    int swapped;         /* the data is big-endian ('>' descr of 2 bytes and more) */
} sm_npy_info;

/* Why the data of a .npy file cannot be read as it lies, as this machine's
 * C-ordered little-endian array (column-major, big-endian), or NULL when
 * it can. sm_npy_read converts such data; readers of the raw bytes refuse
 * it with this sentence. */
const char *sm_npy_layout_issue(const sm_npy_info *info);

/* Header lengths above this are refused (SM_EFORMAT) before anything is
 * allocated for them. */
#define SM_NPY_MAX_HEADER (1 << 20)

/* Parses a .npy header from the first `len` bytes of a file (len >= 10; the
 * whole header must be present: SM_EFORMAT otherwise, saying how many bytes
 * are needed). */
sm_err sm_npy_parse_header(const void *buf, size_t len, sm_npy_info *out, char *err, size_t errlen);
/* Writes the header for (t, s) into buf (version 1.0 unless it needs 2.0);
 * *written is its length (a multiple of 64). buf needs at most 4096 bytes
 * for any shape. */
sm_err sm_npy_format_header(sm_dtype t, const sm_shape *s, void *buf, size_t cap, size_t *written,
                            char *err, size_t errlen);
/* Reads a whole .npy file; *out is owned by the caller (sm_array_free).
 * The file must hold exactly the data its header describes (SM_EFORMAT
 * names the expected and actual sizes); a file that cannot be opened or read
 * is SM_EIO. Every message names the path. Never yields bf16 ('<V2' is
 * refused). Column-major (fortran_order True, as numpy saves a transposed
 * array) and big-endian data come back C-ordered in this machine's byte
 * order. */
sm_err sm_npy_read(const char *path, sm_array **out, char *err, size_t errlen);
/* sm_npy_read with the array's data from pool (sm_array_create_in). */
sm_err sm_npy_read_in(sm_array_pool *pool, const char *path, sm_array **out, char *err,
                      size_t errlen);
/* Reads only the header of a .npy file (for streaming the data later). For a
 * regular file the data size is checked too, as sm_npy_read does. */
sm_err sm_npy_read_info(const char *path, sm_npy_info *out, char *err, size_t errlen);
/* Writes a whole .npy file (replacing it). The data goes to a temporary file
 * beside path that is then renamed over it, so a failed write leaves any old
 * file untouched. bf16 is SM_EUNSUPPORTED (numpy has no such dtype). Borrows
 * a. */
sm_err sm_npy_write(const char *path, const sm_array *a, char *err, size_t errlen);
/* sm_npy_write for background copies: the header is padded to 4096 bytes
 * (a valid .npy: numpy reads any header length) and the bytes go to the
 * disk with O_DIRECT, without a copy into the page cache, which on a busy
 * machine costs several times the CPU of the write itself (where the
 * filesystem has no O_DIRECT, tmpfs, they go through the page cache).
 * spare, if not NULL, is an existing file on path's filesystem that is
 * written over and renamed to path, in place of a new temporary file:
 * making a file can cost more than writing megabytes into it. */
sm_err sm_npy_write_direct(const char *path, const char *spare, const sm_array *a, char *err,
                           size_t errlen);

#endif
