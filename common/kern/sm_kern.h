/* sm_kern: the compute kernels of a worker, independent of the IR.
 *
 * Every kernel works on dense row-major host buffers described by a dtype and
 * an sm_shape; inputs are `const void *` and are borrowed, outputs are
 * caller-allocated buffers of the documented shape (use the *_shape helpers
 * to size them). No kernel allocates memory it returns; a few allocate and
 * free scratch internally (failing with SM_ENOMEM). Kernels keep no state
 * and are thread-safe on disjoint outputs; outputs must not alias inputs
 * unless stated. Results are deterministic: the same inputs give bitwise
 * identical outputs on every run (fixed summation order; only the float
 * products go through OpenBLAS, whose order depends on its core type and
 * thread count).
 *
 * Dtypes: f32 f64 i32 i64 u8 bool as listed per kernel; anything else
 * (f16, bf16, an op that has no meaning for a dtype) fails with
 * SM_EUNSUPPORTED. Shape errors fail with SM_EINVAL and a sentence naming
 * the shapes. The IR decides dtypes: arithmetic kernels take operands and
 * produce a result of one dtype (comparisons produce bool); mixed dtypes are
 * converted first with sm_kern_astype.
 *
 * Integer arithmetic wraps (two's complement) instead of overflowing.
 * Integer divide truncates toward zero (lax.div); mod follows numpy (the
 * result has the divisor's sign); x / 0 and x % 0 give 0 for integers. */
#ifndef SM_KERN_H
#define SM_KERN_H

#include <stddef.h>
#include <stdint.h>

#include "sm_dtype.h"
#include "sm_err.h"
#include "sm_shape.h"

/* ---- elementwise ---------------------------------------------------------------------------- */

/* X(ENUM, name, ints): ints is 1 when the op accepts i32 and i64 (floor,
 * ceil and round are the identity there) besides f32 and f64; 2 when it
 * accepts only the integers, u8 and bool (bitwise_not: ~x, not for bool). */
#define SM_KERN_UNARY_LIST(X)                                                                      \
    X(SM_KERN_NEGATIVE, "negative", 1)                                                             \
    X(SM_KERN_ABS, "abs", 1)                                                                       \
    X(SM_KERN_SIGN, "sign", 1)                                                                     \
    X(SM_KERN_FLOOR, "floor", 1)                                                                   \
    X(SM_KERN_CEIL, "ceil", 1)                                                                     \
    X(SM_KERN_ROUND, "round", 1)                                                                   \
    X(SM_KERN_EXP, "exp", 0)                                                                       \
    X(SM_KERN_LOG, "log", 0)                                                                       \
    X(SM_KERN_SIN, "sin", 0)                                                                       \
    X(SM_KERN_COS, "cos", 0)                                                                       \
    X(SM_KERN_TANH, "tanh", 0)                                                                     \
    X(SM_KERN_SQRT, "sqrt", 0)                                                                     \
    X(SM_KERN_RSQRT, "rsqrt", 0)                                                                   \
    X(SM_KERN_LOGISTIC, "logistic", 0)                                                             \
    X(SM_KERN_LOG1P, "log1p", 0)                                                                   \
    X(SM_KERN_EXPM1, "expm1", 0)                                                                   \
    X(SM_KERN_TAN, "tan", 0)                                                                       \
    X(SM_KERN_ERF, "erf", 0)                                                                       \
    X(SM_KERN_ARCSIN, "arcsin", 0)                                                                 \
    X(SM_KERN_ARCCOS, "arccos", 0)                                                                 \
    X(SM_KERN_ARCTAN, "arctan", 0)                                                                 \
    X(SM_KERN_SINH, "sinh", 0)                                                                     \
    X(SM_KERN_COSH, "cosh", 0)                                                                     \
    X(SM_KERN_ARCSINH, "arcsinh", 0)                                                               \
    X(SM_KERN_ARCCOSH, "arccosh", 0)                                                               \
    X(SM_KERN_ARCTANH, "arctanh", 0)                                                               \
    X(SM_KERN_CBRT, "cbrt", 0)                                                                     \
    X(SM_KERN_BITWISE_NOT, "bitwise_not", 2)

typedef enum {
#define SM_KERN_UNARY_ENUM(e, name, ints) e,
    SM_KERN_UNARY_LIST(SM_KERN_UNARY_ENUM)
#undef SM_KERN_UNARY_ENUM
        SM_KERN_UNARY_COUNT
} sm_kern_unary_op;

/* X(ENUM, name, kind): kind 0 arithmetic (f32 f64 i32 i64, result of the
 * operands' dtype), 1 comparison (also u8 and bool, result bool), 2
 * maximum/minimum (also u8 and bool), 3 bitwise (i32 i64 u8 bool only; on
 * bool the logical op), 4 float only (f32 f64). */
#define SM_KERN_BINARY_LIST(X)                                                                     \
    X(SM_KERN_ADD, "add", 0)                                                                       \
    X(SM_KERN_SUBTRACT, "subtract", 0)                                                             \
    X(SM_KERN_MULTIPLY, "multiply", 0)                                                             \
    X(SM_KERN_DIVIDE, "divide", 0)                                                                 \
    X(SM_KERN_MOD, "mod", 0)                                                                       \
    X(SM_KERN_FLOOR_DIVIDE, "floor_divide", 0)                                                     \
    X(SM_KERN_POWER, "power", 0)                                                                   \
    X(SM_KERN_ARCTAN2, "arctan2", 4)                                                               \
    X(SM_KERN_MAXIMUM, "maximum", 2)                                                               \
    X(SM_KERN_MINIMUM, "minimum", 2)                                                               \
    X(SM_KERN_EQUAL, "equal", 1)                                                                   \
    X(SM_KERN_NOT_EQUAL, "not_equal", 1)                                                           \
    X(SM_KERN_LESS, "less", 1)                                                                     \
    X(SM_KERN_LESS_EQUAL, "less_equal", 1)                                                         \
    X(SM_KERN_GREATER, "greater", 1)                                                               \
    X(SM_KERN_GREATER_EQUAL, "greater_equal", 1)                                                   \
    X(SM_KERN_BITWISE_AND, "bitwise_and", 3)                                                       \
    X(SM_KERN_BITWISE_OR, "bitwise_or", 3)                                                         \
    X(SM_KERN_BITWISE_XOR, "bitwise_xor", 3)

typedef enum {
#define SM_KERN_BINARY_ENUM(e, name, kind) e,
    SM_KERN_BINARY_LIST(SM_KERN_BINARY_ENUM)
#undef SM_KERN_BINARY_ENUM
        SM_KERN_BINARY_COUNT
} sm_kern_binary_op;

/* Names ("negative", "add"); "?" for an invalid value. */
const char *sm_kern_unary_name(sm_kern_unary_op op);
const char *sm_kern_binary_name(sm_kern_binary_op op);
/* 1 if the binary op produces bool (a comparison). */
int sm_kern_binary_is_compare(sm_kern_binary_op op);

/* out = op(x), elementwise; x and out have dtype t and shape s and must not
 * overlap. Float ops: round is half to even (numpy), sign keeps -0 and NaN,
 * logistic is 1 / (1 + exp(-x)). */
sm_err sm_kern_unary(sm_kern_unary_op op, sm_dtype t, const sm_shape *s, const void *x, void *out,
                     char *err, size_t errlen);

/* The numpy broadcast of shapes a and b into *out (SM_EINVAL naming both
 * when a dimension differs and neither is 1). */
sm_err sm_kern_broadcast_shape(const sm_shape *a, const sm_shape *b, sm_shape *out, char *err,
                               size_t errlen);

/* out = op(a, b) with numpy broadcasting; a and b have dtype t, out has dtype
 * t (bool for comparisons) and the broadcast shape, and must not overlap a
 * or b. Floats: maximum/minimum propagate NaN; mod is numpy's (fmod adjusted
 * to the divisor's sign). */
sm_err sm_kern_binary(sm_kern_binary_op op, sm_dtype t, const void *a, const sm_shape *as,
                      const void *b, const sm_shape *bs, void *out, char *err, size_t errlen);

/* out = cond ? a : b with 3-way numpy broadcasting. cond is bool; a, b and
 * out have dtype t (any dtype: elements are moved by size). *os receives the broadcast
 * shape when os != NULL (computed before anything is written). */
sm_err sm_kern_where(sm_dtype t, const void *cond, const sm_shape *cs, const void *a,
                     const sm_shape *as, const void *b, const sm_shape *bs, void *out, sm_shape *os,
                     char *err, size_t errlen);

/* out (dtype to) = x (dtype from), n elements, for every pair of f32 f64 i32
 * i64 u8 bool. Float to integer truncates toward zero; NaN gives 0 and
 * out-of-range values saturate (XLA). Integer to narrower integer wraps. To
 * bool is != 0 (NaN is true). out must not overlap x. */
sm_err sm_kern_astype(sm_dtype from, const void *x, sm_dtype to, void *out, int64_t n, char *err,
                      size_t errlen);

/* ---- creation ------------------------------------------------------------------------------- */

/* Sets n elements of out (dtype t, any dtype) to *value (one element of t,
 * e.g. converted from a literal with sm_kern_astype). */
sm_err sm_kern_fill(sm_dtype t, void *out, int64_t n, const void *value, char *err, size_t errlen);
/* out[idx] = idx[axis] for every index of shape s (lax.iota / broadcasted
 * iota); arange(n) is s = [n], axis 0. Dtypes f32 f64 i32 i64 u8 (wraps). */
sm_err sm_kern_iota(sm_dtype t, const sm_shape *s, int axis, void *out, char *err, size_t errlen);

/* ---- reductions ----------------------------------------------------------------------------- */

#define SM_KERN_REDUCE_LIST(X)                                                                     \
    X(SM_KERN_SUM, "sum")                                                                          \
    X(SM_KERN_MEAN, "mean")                                                                        \
    X(SM_KERN_MAX, "max")                                                                          \
    X(SM_KERN_MIN, "min")                                                                          \
    X(SM_KERN_PROD, "prod")                                                                        \
    X(SM_KERN_ANY, "any")                                                                          \
    X(SM_KERN_ALL, "all")

typedef enum {
#define SM_KERN_REDUCE_ENUM(e, name) e,
    SM_KERN_REDUCE_LIST(SM_KERN_REDUCE_ENUM)
#undef SM_KERN_REDUCE_ENUM
        SM_KERN_REDUCE_COUNT
} sm_kern_reduce_op;

const char *sm_kern_reduce_name(sm_kern_reduce_op op);

/* Shape of reducing xs over axes[0..naxes) (negative axes count from the
 * end; naxes == 0 reduces nothing; pass axes == NULL and naxes == -1 for all
 * axes). SM_EINVAL for an axis out of range or repeated. */
sm_err sm_kern_reduce_shape(const sm_shape *xs, const int *axes, int naxes, int keepdims,
                            sm_shape *out, char *err, size_t errlen);

/* out = op over the axes of x (as sm_kern_reduce_shape). sum and prod: f32
 * f64 i32 i64 u8 (integers wrap; f32 accumulates in f64 in a fixed blocked
 * order); mean: f32 f64; max/min: every dtype but f16/bf16, NaN propagates;
 * any/all: bool. Empty reductions give the identity (0, 1, -inf/+inf or the
 * integer limits, false for any and true for all; mean gives NaN). */
sm_err sm_kern_reduce(sm_kern_reduce_op op, sm_dtype t, const void *x, const sm_shape *xs,
                      const int *axes, int naxes, int keepdims, void *out, char *err,
                      size_t errlen);

/* jax.ops.segment_sum: out (nseg rows of `inner` elements, zeroed here)
 * gets, for each of the nlead rows of x, that row added to row ids[i];
 * rows whose id is outside [0, nseg) are dropped. Rows are added in index
 * order. f32 f64 i32 i64 (integers wrap). */
sm_err sm_kern_segment_sum(sm_dtype t, const void *x, int64_t nlead, int64_t inner,
                           const int64_t *ids, int64_t nseg, void *out, char *err, size_t errlen);

/* Index of the largest (is_max) or smallest element of x along axis (-1:
 * over all of x, flattened), first where tied; a NaN counts as beyond every
 * number (the first NaN wins), as numpy and JAX have it. out is int32 with
 * x's shape less that axis (axis -1: one element). Every dtype but
 * f16/bf16; SM_EINVAL when the axis is empty. */
sm_err sm_kern_argminmax(int is_max, sm_dtype t, const void *x, const sm_shape *xs, int axis,
                         void *out, char *err, size_t errlen);

/* out = the running op (sum, prod, max, min) of x along axis (-1: over all
 * of x, flattened; out then has numel(x) elements), accumulated in t in
 * index order (numpy's cumsum, cumprod, and maximum/minimum.accumulate;
 * NaN propagates in max/min). sum and prod: f32 f64 i32 i64 u8 (integers
 * wrap); max and min: those and bool. */
sm_err sm_kern_cumulative(sm_kern_reduce_op op, sm_dtype t, const void *x, const sm_shape *xs,
                          int axis, void *out, char *err, size_t errlen);

/* dst[i] = op(dst[i], src[i]) for i < n, op sum/max/min (not mean), dtypes as
 * for sm_kern_reduce. dst and src must not overlap. For collectives. */
sm_err sm_kern_accumulate(sm_dtype t, void *dst, const void *src, int64_t n, sm_kern_reduce_op op,
                          char *err, size_t errlen);
/* dst[i] = op(a[i], b[i]) for i < n: the same values as copying a to dst and
 * accumulating b, in one pass. dst must not overlap a or b. */
sm_err sm_kern_combine(sm_dtype t, void *dst, const void *a, const void *b, int64_t n,
                       sm_kern_reduce_op op, char *err, size_t errlen);
/* x[i] *= factor for i < n (f32 f64; f16 bf16 in float32, rounded once). */
sm_err sm_kern_scale(sm_dtype t, void *x, int64_t n, double factor, char *err, size_t errlen);
/* x[i] /= d for i < n, dtypes as sm_kern_scale: pmean is psum then this
 * (JAX divides by the size, not a multiply by its inverse). */
sm_err sm_kern_divide_by(sm_dtype t, void *x, int64_t n, double d, char *err, size_t errlen);

/* ---- products ------------------------------------------------------------------------------- */

/* numpy matmul of a and b (rank >= 1, batch dims broadcast), dtypes f32 f64
 * (OpenBLAS gemm) and i32 i64 (loops, wrapping). trans_a says a's last two
 * dims are stored transposed (a is used as swapaxes(a, -1, -2)); likewise
 * trans_b; ignored for rank-1 operands. No copy is made: transposes fold
 * into the gemm call. Every element of out is written (zeros for an empty
 * contraction), so out need not be zeroed first; likewise for dot. */
sm_err sm_kern_matmul_shape(const sm_shape *as, int trans_a, const sm_shape *bs, int trans_b,
                            sm_shape *out, char *err, size_t errlen);
sm_err sm_kern_matmul(sm_dtype t, const void *a, const sm_shape *as, int trans_a, const void *b,
                      const sm_shape *bs, int trans_b, void *out, char *err, size_t errlen);

/* jnp.dot: rank 0 multiplies; otherwise contracts a's last dim with b's
 * second-to-last (its only dim when rank 1); out shape is a.shape[:-1] +
 * b.shape[:-2] + b.shape[-1:]. Dtypes as sm_kern_matmul. */
sm_err sm_kern_dot_shape(const sm_shape *as, const sm_shape *bs, sm_shape *out, char *err,
                         size_t errlen);
sm_err sm_kern_dot(sm_dtype t, const void *a, const sm_shape *as, const void *b, const sm_shape *bs,
                   void *out, char *err, size_t errlen);

/* Two-operand einsum: "ij,jk->ik", or implicit output ("ij,jk"). Letters
 * a-z A-Z; a letter may appear once per operand; sizes must agree. Letters
 * in one operand only and not in the output are summed first. Maps to
 * (batch, free, contraction) dims and strided gemm calls; an operand is
 * copied (transposed) only when its layout can't be expressed by gemm
 * transposes and leading dims. Dtypes as sm_kern_matmul. */
sm_err sm_kern_einsum_shape(const char *spec, const sm_shape *as, const sm_shape *bs, sm_shape *out,
                            char *err, size_t errlen);
sm_err sm_kern_einsum(const char *spec, sm_dtype t, const void *a, const sm_shape *as,
                      const void *b, const sm_shape *bs, void *out, char *err, size_t errlen);

/* ---- shape ops (any dtype incl. f16/bf16: elements are moved by size) ---------------------- */

/* out = x reshaped (a copy of numel elements; the counts must agree); out
 * may be x. */
sm_err sm_kern_reshape(sm_dtype t, const void *x, const sm_shape *xs, const sm_shape *os, void *out,
                       char *err, size_t errlen);
/* out = transpose(x, perm); out shape dims[i] = xs.dims[perm[i]]. */
sm_err sm_kern_transpose(sm_dtype t, const void *x, const sm_shape *xs, const int *perm, void *out,
                         char *err, size_t errlen);
/* out = x[start:limit:strides] per dim (strides NULL means all 1, each >= 1;
 * 0 <= start <= limit <= dim); out dims are ceil((limit - start) / stride). */
sm_err sm_kern_slice(sm_dtype t, const void *x, const sm_shape *xs, const int64_t *start,
                     const int64_t *limit, const int64_t *strides, void *out, char *err,
                     size_t errlen);
/* out (shape os) = broadcast_to(x, os) (numpy rules). */
sm_err sm_kern_broadcast_to(sm_dtype t, const void *x, const sm_shape *xs, const sm_shape *os,
                            void *out, char *err, size_t errlen);
/* out = x padded with zeros, low[d] before and high[d] after dim d (>= 0). */
sm_err sm_kern_pad(sm_dtype t, const void *x, const sm_shape *xs, const int64_t *low,
                   const int64_t *high, void *out, char *err, size_t errlen);
/* out = concatenate(xs[0..n), axis); all same rank and dims but axis. */
sm_err sm_kern_concatenate(sm_dtype t, int n, const void *const *x, const sm_shape *xs, int axis,
                           void *out, char *err, size_t errlen);
/* out = np.tile(x, reps[0..nreps)); out rank is max(rank, nreps). */
sm_err sm_kern_tile_shape(const sm_shape *xs, const int64_t *reps, int nreps, sm_shape *out,
                          char *err, size_t errlen);
sm_err sm_kern_tile(sm_dtype t, const void *x, const sm_shape *xs, const int64_t *reps, int nreps,
                    void *out, char *err, size_t errlen);
/* out = lax.rev(x, dimensions): x reversed along each dimension d with
 * rev[d] set (rank entries). */
sm_err sm_kern_rev(sm_dtype t, const void *x, const sm_shape *xs, const int *rev, void *out,
                   char *err, size_t errlen);
/* out = np.roll(x, shift, axis); axis SM_KERN_AXIS_NONE rolls the flattened
 * array. Any shift, negative included. */
#define SM_KERN_AXIS_NONE (-1000)
sm_err sm_kern_roll(sm_dtype t, const void *x, const sm_shape *xs, int64_t shift, int axis,
                    void *out, char *err, size_t errlen);
/* out = lax.dynamic_slice(x, start, sizes): each start is clamped into
 * [0, dim - size] so the slice fits (XLA); sizes[d] <= dims[d]. */
sm_err sm_kern_dynamic_slice(sm_dtype t, const void *x, const sm_shape *xs, const int64_t *start,
                             const int64_t *sizes, void *out, char *err, size_t errlen);
/* out = lax.dynamic_update_slice(x, upd, start), starts clamped likewise;
 * out has x's shape and may be x (in-place update). */
sm_err sm_kern_dynamic_update_slice(sm_dtype t, const void *x, const sm_shape *xs, const void *upd,
                                    const sm_shape *us, const int64_t *start, void *out, char *err,
                                    size_t errlen);

/* How a gather treats an index outside [0, n) after a negative one gained n
 * once (numpy's): clamp it (what JAX's indexing does), wrap it modulo n, or
 * give the fill value: NaN, the integer minimum, 255 for u8, true for bool
 * (jnp.take's default). An empty axis gives the fill value in every mode. */
typedef enum { SM_KERN_GATHER_FILL, SM_KERN_GATHER_CLIP, SM_KERN_GATHER_WRAP } sm_kern_gather_mode;

/* x.at[ids].set/add/multiply/min/max(upd) on the rows of out (nrows rows
 * of `inner` elements, holding the operand): for each i of the nids in
 * index order, row ids[i] (a negative one counts from the end once) becomes
 * upd's row i (set) or op(row, upd's row i) (op: SM_KERN_ADD, _MULTIPLY,
 * _MINIMUM, _MAXIMUM, with sm_kern_binary's dtypes and semantics); rows
 * outside [0, nrows) are dropped. Set moves rows by size (any dtype), so
 * the last of repeated ids wins. */
sm_err sm_kern_scatter(int set, sm_kern_binary_op op, sm_dtype t, void *out, int64_t nrows,
                       int64_t inner, const int64_t *ids, int64_t nids, const void *upd, char *err,
                       size_t errlen);

/* out = jnp.take(x, idx, axis): x's shape with dimension axis replaced by
 * idx's (idx: int64 of shape is). Rows move by size (any dtype). */
sm_err sm_kern_take(sm_dtype t, const void *x, const sm_shape *xs, int axis, const int64_t *idx,
                    const sm_shape *is, sm_kern_gather_mode mode, void *out, char *err,
                    size_t errlen);
/* out = jnp.take_along_axis(x, idx, axis): idx has x's rank; out's
 * dimension axis is idx's, the others x's and idx's broadcast; each element
 * x at its position with the axis coordinate from idx. */
sm_err sm_kern_take_along_axis(sm_dtype t, const void *x, const sm_shape *xs, int axis,
                               const int64_t *idx, const sm_shape *is, sm_kern_gather_mode mode,
                               void *out, char *err, size_t errlen);

/* jnp.sort / jnp.argsort along axis: out (x's dtype, NULL for none) gets
 * each row sorted ascending, idx (int32, NULL for none) the positions the
 * sorted elements came from. Stable (equal elements keep their order);
 * NaN after every number, as numpy and JAX sort. Every dtype but
 * f16/bf16. */
sm_err sm_kern_sort(sm_dtype t, const void *x, const sm_shape *xs, int axis, void *out,
                    int32_t *idx, char *err, size_t errlen);

/* ---- OpenBLAS setup ------------------------------------------------------------------------- */

/* The best OPENBLAS_CORETYPE for this CPU: "Cooperlake" (AVX-512 F BW VL DQ
 * and BF16), "SkylakeX" (AVX-512 F BW VL DQ), "Haswell" (AVX2 and FMA), or
 * NULL. Static strings. */
const char *sm_kern_best_coretype(void);
/* Call first thing in main. If OPENBLAS_CORETYPE is unset and the best core
 * type differs from the one OpenBLAS picked (unless that one already uses
 * AVX-512), sets it and re-executes /proc/self/exe with argv (OpenBLAS picks
 * its kernels when the library loads, before main); a marker variable
 * (SM_KERN_REEXEC) makes this happen at most once. Returns 0 when nothing
 * was needed or possible (also when exec fails; the process continues with
 * auto-detection); does not return when the exec succeeds. Not thread-safe
 * (environment). */
int sm_kern_coretype_setup(int argc, char **argv);
/* Name of the OpenBLAS kernel set in use ("SkylakeX", "Haswell"...). */
const char *sm_kern_corename(void);
/* openblas_set_num_threads(n) (n >= 1). */
void sm_kern_set_threads(int n);

#endif
