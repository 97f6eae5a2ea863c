/* sm_ir_ops: the one op table of shmap programs (STYLE rule 4).
 *
 * Each row of SM_OP_LIST is one op:
 *   X(ENUM, "jax_name", min_operands, max_operands, infer_fn, vma_rule, "signature")
 * - infer_fn computes the result dtype and block shape from the operands and
 *   attributes (sm_ir_infer.c, sm_ir_infer_shape.c, sm_ir_infer_coll.c);
 * - vma_rule says how the set of mesh axes a value may vary over is derived
 *   (SEMANTICS.md §4, replication check);
 * - signature lists the call's parameters for the text form, with JAX's
 *   names, in order: `[?]name:KF` where ? marks an optional parameter, K is
 *   the kind and F the attribute field it fills:
 *     v  one array operand         V  the remaining positional arrays
 *     T  a tuple of arrays         D  a tuple of integer scalars (operands)
 *     A  mesh axis name(s)         t  a dtype
 *     i  an int into F: a=axis b=axis2 0/1/2=ints.v[0..2]
 *     l  an int or int tuple into F: L=ints M=ints2 (sets has_ints/has_ints2)
 *     b  a bool into F: t=tiled k=keepdims
 *     f  a number (value)          p  a list of (src, dst) pairs (perm)
 *     s  a string (einsum spec)    w  a pad width (stored as lo,hi per dim)
 * Adding an op: a row here, its kernel, its test row. */
#ifndef SM_IR_OPS_H
#define SM_IR_OPS_H

/* How an op's result varying-axes set follows from its operands'. */
typedef enum {
    SM_VMA_UNION,  /* local op: union of the operands' sets */
    SM_VMA_NONE,   /* constants, iota, axis_size: varies over no axis */
    SM_VMA_REMOVE, /* psum/pmean/pmax/pmin over A: removes A */
    SM_VMA_ADD,    /* all_gather, psum_scatter, ppermute, all_to_all, pvary: adds A */
    SM_VMA_SET     /* axis_index(A): exactly A */
} sm_vma_rule;

#define SM_OP_MAXARGS 64 /* most operands one op may take (concatenate) */

#define SM_OP_LIST(X)                                                                              \
    /* elementwise */                                                                              \
    X(SM_OP_ADD, "add", 2, 2, sm_ir_infer_binary, SM_VMA_UNION, "x:v y:v")                         \
    X(SM_OP_SUBTRACT, "subtract", 2, 2, sm_ir_infer_binary, SM_VMA_UNION, "x:v y:v")               \
    X(SM_OP_MULTIPLY, "multiply", 2, 2, sm_ir_infer_binary, SM_VMA_UNION, "x:v y:v")               \
    X(SM_OP_DIVIDE, "divide", 2, 2, sm_ir_infer_divide, SM_VMA_UNION, "x:v y:v")                   \
    X(SM_OP_MOD, "mod", 2, 2, sm_ir_infer_binary, SM_VMA_UNION, "x:v y:v")                         \
    X(SM_OP_MAXIMUM, "maximum", 2, 2, sm_ir_infer_binary, SM_VMA_UNION, "x:v y:v")                 \
    X(SM_OP_MINIMUM, "minimum", 2, 2, sm_ir_infer_binary, SM_VMA_UNION, "x:v y:v")                 \
    X(SM_OP_POWER, "power", 2, 2, sm_ir_infer_binary, SM_VMA_UNION, "x:v y:v")                     \
    X(SM_OP_NEGATIVE, "negative", 1, 1, sm_ir_infer_unary, SM_VMA_UNION, "x:v")                    \
    X(SM_OP_ABS, "abs", 1, 1, sm_ir_infer_unary, SM_VMA_UNION, "x:v")                              \
    X(SM_OP_EXP, "exp", 1, 1, sm_ir_infer_unary_float, SM_VMA_UNION, "x:v")                        \
    X(SM_OP_LOG, "log", 1, 1, sm_ir_infer_unary_float, SM_VMA_UNION, "x:v")                        \
    X(SM_OP_SIN, "sin", 1, 1, sm_ir_infer_unary_float, SM_VMA_UNION, "x:v")                        \
    X(SM_OP_COS, "cos", 1, 1, sm_ir_infer_unary_float, SM_VMA_UNION, "x:v")                        \
    X(SM_OP_TANH, "tanh", 1, 1, sm_ir_infer_unary_float, SM_VMA_UNION, "x:v")                      \
    X(SM_OP_SQRT, "sqrt", 1, 1, sm_ir_infer_unary_float, SM_VMA_UNION, "x:v")                      \
    X(SM_OP_RSQRT, "rsqrt", 1, 1, sm_ir_infer_unary_float, SM_VMA_UNION, "x:v")                    \
    X(SM_OP_LOGISTIC, "logistic", 1, 1, sm_ir_infer_unary_float, SM_VMA_UNION, "x:v")              \
    X(SM_OP_SIGN, "sign", 1, 1, sm_ir_infer_unary, SM_VMA_UNION, "x:v")                            \
    X(SM_OP_FLOOR, "floor", 1, 1, sm_ir_infer_unary, SM_VMA_UNION, "x:v")                          \
    X(SM_OP_CEIL, "ceil", 1, 1, sm_ir_infer_unary, SM_VMA_UNION, "x:v")                            \
    X(SM_OP_ROUND, "round", 1, 1, sm_ir_infer_unary, SM_VMA_UNION, "x:v")                          \
    X(SM_OP_EQUAL, "equal", 2, 2, sm_ir_infer_compare, SM_VMA_UNION, "x:v y:v")                    \
    X(SM_OP_NOT_EQUAL, "not_equal", 2, 2, sm_ir_infer_compare, SM_VMA_UNION, "x:v y:v")            \
    X(SM_OP_LESS, "less", 2, 2, sm_ir_infer_compare, SM_VMA_UNION, "x:v y:v")                      \
    X(SM_OP_LESS_EQUAL, "less_equal", 2, 2, sm_ir_infer_compare, SM_VMA_UNION, "x:v y:v")          \
    X(SM_OP_GREATER, "greater", 2, 2, sm_ir_infer_compare, SM_VMA_UNION, "x:v y:v")                \
    X(SM_OP_GREATER_EQUAL, "greater_equal", 2, 2, sm_ir_infer_compare, SM_VMA_UNION, "x:v y:v")    \
    X(SM_OP_WHERE, "where", 3, 3, sm_ir_infer_where, SM_VMA_UNION, "condition:v x:v y:v")          \
    X(SM_OP_ASTYPE, "astype", 1, 1, sm_ir_infer_astype, SM_VMA_UNION, "x:v dtype:t")               \
    /* creation */                                                                                 \
    X(SM_OP_ZEROS, "zeros", 0, 0, sm_ir_infer_fill, SM_VMA_NONE, "shape:lL ?dtype:t")              \
    X(SM_OP_ONES, "ones", 0, 0, sm_ir_infer_fill, SM_VMA_NONE, "shape:lL ?dtype:t")                \
    X(SM_OP_FULL, "full", 0, 0, sm_ir_infer_fill, SM_VMA_NONE, "shape:lL fill_value:f ?dtype:t")   \
    X(SM_OP_ARANGE, "arange", 0, 0, sm_ir_infer_arange, SM_VMA_NONE,                               \
      "start:i0 ?stop:i1 ?step:i2 ?dtype:t")                                                       \
    X(SM_OP_CONST, "const", 0, 0, sm_ir_infer_const, SM_VMA_NONE, "value:f ?dtype:t")              \
    /* products */                                                                                 \
    X(SM_OP_DOT, "dot", 2, 2, sm_ir_infer_dot, SM_VMA_UNION, "a:v b:v")                            \
    X(SM_OP_MATMUL, "matmul", 2, 2, sm_ir_infer_matmul, SM_VMA_UNION, "a:v b:v")                   \
    X(SM_OP_EINSUM, "einsum", 1, 2, sm_ir_infer_einsum, SM_VMA_UNION, "subscripts:s operands:V")   \
    /* reductions */                                                                               \
    X(SM_OP_SUM, "sum", 1, 1, sm_ir_infer_reduce, SM_VMA_UNION, "a:v ?axis:lL ?keepdims:bk")       \
    X(SM_OP_MEAN, "mean", 1, 1, sm_ir_infer_reduce, SM_VMA_UNION, "a:v ?axis:lL ?keepdims:bk")     \
    X(SM_OP_MAX, "max", 1, 1, sm_ir_infer_reduce, SM_VMA_UNION, "a:v ?axis:lL ?keepdims:bk")       \
    X(SM_OP_MIN, "min", 1, 1, sm_ir_infer_reduce, SM_VMA_UNION, "a:v ?axis:lL ?keepdims:bk")       \
    /* shape */                                                                                    \
    X(SM_OP_RESHAPE, "reshape", 1, 1, sm_ir_infer_reshape, SM_VMA_UNION, "a:v shape:lL")           \
    X(SM_OP_TRANSPOSE, "transpose", 1, 1, sm_ir_infer_transpose, SM_VMA_UNION, "a:v ?axes:lL")     \
    X(SM_OP_EXPAND_DIMS, "expand_dims", 1, 1, sm_ir_infer_expand_dims, SM_VMA_UNION,               \
      "a:v axis:lL")                                                                               \
    X(SM_OP_SQUEEZE, "squeeze", 1, 1, sm_ir_infer_squeeze, SM_VMA_UNION, "a:v ?axis:lL")           \
    X(SM_OP_BROADCAST_TO, "broadcast_to", 1, 1, sm_ir_infer_broadcast_to, SM_VMA_UNION,            \
      "array:v shape:lL")                                                                          \
    X(SM_OP_SLICE, "slice", 1, 1, sm_ir_infer_slice, SM_VMA_UNION,                                 \
      "operand:v start_indices:lL limit_indices:lM")                                               \
    X(SM_OP_DYNAMIC_SLICE, "dynamic_slice", 1, 1 + SM_MAX_RANK, sm_ir_infer_dynamic_slice,         \
      SM_VMA_UNION, "operand:v start_indices:D slice_sizes:lL")                                    \
    X(SM_OP_DYNAMIC_SLICE_IN_DIM, "dynamic_slice_in_dim", 2, 2, sm_ir_infer_dynamic_slice_in_dim,  \
      SM_VMA_UNION, "operand:v start_index:v slice_size:i0 ?axis:ia")                              \
    X(SM_OP_DYNAMIC_UPDATE_SLICE, "dynamic_update_slice", 2, 2 + SM_MAX_RANK,                      \
      sm_ir_infer_dynamic_update_slice, SM_VMA_UNION, "operand:v update:v start_indices:D")        \
    X(SM_OP_CONCATENATE, "concatenate", 1, SM_OP_MAXARGS, sm_ir_infer_concatenate, SM_VMA_UNION,   \
      "arrays:T ?axis:ia")                                                                         \
    X(SM_OP_PAD, "pad", 1, 1, sm_ir_infer_pad, SM_VMA_UNION, "array:v pad_width:w")                \
    X(SM_OP_TILE, "tile", 1, 1, sm_ir_infer_tile, SM_VMA_UNION, "A:v reps:lL")                     \
    X(SM_OP_ROLL, "roll", 1, 1, sm_ir_infer_roll, SM_VMA_UNION, "a:v shift:lL ?axis:lM")           \
    /* collectives */                                                                              \
    X(SM_OP_PSUM, "psum", 1, 1, sm_ir_infer_preduce, SM_VMA_REMOVE, "x:v axis_name:A")             \
    X(SM_OP_PMEAN, "pmean", 1, 1, sm_ir_infer_preduce, SM_VMA_REMOVE, "x:v axis_name:A")           \
    X(SM_OP_PMAX, "pmax", 1, 1, sm_ir_infer_preduce, SM_VMA_REMOVE, "x:v axis_name:A")             \
    X(SM_OP_PMIN, "pmin", 1, 1, sm_ir_infer_preduce, SM_VMA_REMOVE, "x:v axis_name:A")             \
    X(SM_OP_ALL_GATHER, "all_gather", 1, 1, sm_ir_infer_all_gather, SM_VMA_ADD,                    \
      "x:v axis_name:A ?axis:ia ?tiled:bt")                                                        \
    X(SM_OP_PSUM_SCATTER, "psum_scatter", 1, 1, sm_ir_infer_psum_scatter, SM_VMA_ADD,              \
      "x:v axis_name:A ?scatter_dimension:ia ?tiled:bt")                                           \
    X(SM_OP_PPERMUTE, "ppermute", 1, 1, sm_ir_infer_ppermute, SM_VMA_ADD,                          \
      "x:v axis_name:A perm:p")                                                                    \
    X(SM_OP_ALL_TO_ALL, "all_to_all", 1, 1, sm_ir_infer_all_to_all, SM_VMA_ADD,                    \
      "x:v axis_name:A split_axis:ia concat_axis:ib ?tiled:bt")                                    \
    X(SM_OP_AXIS_INDEX, "axis_index", 0, 0, sm_ir_infer_axis_scalar, SM_VMA_SET, "axis_name:A")    \
    X(SM_OP_AXIS_SIZE, "axis_size", 0, 0, sm_ir_infer_axis_scalar, SM_VMA_NONE, "axis_name:A")     \
    X(SM_OP_PVARY, "pvary", 1, 1, sm_ir_infer_pvary, SM_VMA_ADD, "x:v axis_name:A")

typedef enum {
#define SM_OP_ENUM(e, name, mn, mx, fn, vma, sig) e,
    SM_OP_LIST(SM_OP_ENUM)
#undef SM_OP_ENUM
        SM_OP_COUNT
} sm_op_kind;

#define SM_OP_COUNT_EXPECTED 66
_Static_assert(SM_OP_COUNT == SM_OP_COUNT_EXPECTED, "op table changed: update the count and tests");

#endif
