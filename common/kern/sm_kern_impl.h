/* sm_kern_impl: helpers shared by the kernel files of common/kern; not part
 * of the public API (prefix smk_).
 *
 * SMK_FOR writes a loop gcc vectorizes at -O2 (whose "very cheap" cost model
 * only vectorizes loops with a known trip count): a main part in blocks of
 * SMK_VW iterations with a constant-count inner loop, then a scalar tail.
 *
 * smk_loop walks up to SMK_NOPS operands over a common index space given as
 * dims and per-operand element strides (0 for a broadcast dim): the outer
 * dims with an odometer, the last dim as a contiguous or strided run that the
 * caller's typed inner loop handles. */
#ifndef SM_KERN_IMPL_H
#define SM_KERN_IMPL_H

#include <stdint.h>
#include <string.h>

#include "sm_kern.h"

#define SMK_VW 16

#define SMK_FOR(i, n, ...)                                                                         \
    do {                                                                                           \
        int64_t i##_b = 0, i##_n = (n);                                                            \
        for (; i##_b + SMK_VW <= i##_n; i##_b += SMK_VW)                                           \
            for (int i##_k = 0; i##_k < SMK_VW; i##_k++) {                                         \
                int64_t i = i##_b + i##_k;                                                         \
                __VA_ARGS__                                                                        \
            }                                                                                      \
        for (int64_t i = i##_b; i < i##_n; i++) {                                                  \
            __VA_ARGS__                                                                            \
        }                                                                                          \
    } while (0)

/* Doubled rank: tile views an array as (reps, dim) pairs. */
#define SMK_MAX_RANK (2 * SM_MAX_RANK)
#define SMK_NOPS     4

typedef struct {
    int rank; /* >= 1 after smk_loop_collapse */
    int nops;
    int64_t dims[SMK_MAX_RANK];
    int64_t st[SMK_NOPS][SMK_MAX_RANK];
} smk_loop;

typedef struct {
    int64_t idx[SMK_MAX_RANK];
    int64_t off[SMK_NOPS];
    int64_t outer; /* number of inner runs */
    int64_t inner; /* length of each run (dims[rank - 1]) */
} smk_cursor;

/* Drops size-1 dims and merges dims that are contiguous for every operand;
 * leaves rank >= 1. */
void smk_loop_collapse(smk_loop *l);
/* Starts a walk; returns the number of runs (0 if the space is empty). */
int64_t smk_cursor_init(const smk_loop *l, smk_cursor *c);
/* Advances to the next run's offsets. */
static inline void smk_cursor_next(const smk_loop *l, smk_cursor *c)
{
    for (int d = l->rank - 2; d >= 0; d--) {
        c->idx[d]++;
        for (int k = 0; k < l->nops; k++)
            c->off[k] += l->st[k][d];
        if (c->idx[d] < l->dims[d])
            return;
        for (int k = 0; k < l->nops; k++)
            c->off[k] -= l->st[k][d] * l->dims[d];
        c->idx[d] = 0;
    }
}

/* Row-major element strides of s into st[0..rank), right-aligned when rank >
 * s->rank (missing leading dims get stride 0); dims of size 1 get stride 0,
 * so the result broadcasts. */
void smk_strides(const sm_shape *s, int rank, int64_t *st);
/* Element count (no overflow check: shapes given to kernels describe
 * existing buffers). */
int64_t smk_numel(const sm_shape *s);
/* Element size of t (every dtype is movable by size), 0 for an invalid one.
 * Arithmetic kernels check their dtype tables before relying on it. */
size_t smk_elem(sm_dtype t);
/* Formats a shape for messages. */
const char *smk_fmt(const sm_shape *s, char *buf, size_t len);
/* Strided copy: walks l (op 0 = dst, op 1 = src) copying elem-size
 * elements. */
void smk_copy_loop(smk_loop *l, char *dst, const char *src, size_t elem);
/* Normalizes axis into [0, rank); -1 if out of range. */
int smk_axis(int axis, int rank);

/* Internal strided batched gemm (sm_kern_gemm.c). Index spaces: batch dims
 * (with per-operand strides, 0 = broadcast), m, n, k; element strides of A
 * (m, k), B (k, n) and C (m, n). Returns SM_EUNSUPPORTED only via err for
 * bad dtypes; *layout_ok = 0 (and nothing done) when a float operand's
 * strides can't be expressed as a BLAS (trans, ld) pair. */
typedef struct {
    int nb;
    int64_t bdims[SMK_MAX_RANK];
    int64_t bst[3][SMK_MAX_RANK]; /* A, B, C batch strides */
    int64_t m, n, k;
    int64_t sam, sak, sbk, sbn, scm, scn;
} smk_gemm;

/* Which operand (1 A, 2 B, 4 C bits) has a layout gemm can't express for t. */
int smk_gemm_bad_layout(sm_dtype t, const smk_gemm *g);
sm_err smk_gemm_run(sm_dtype t, smk_gemm *g, const void *a, const void *b, void *c, char *err,
                    size_t errlen);

/* Which operands (1 A, 2 B, 4 C) sm_kern_einsum would copy for this spec
 * and shapes (-1 if the spec is invalid); for tests. */
int smk_einsum_copies(const char *spec, sm_dtype t, const sm_shape *as, const sm_shape *bs);

#endif
