/* sm_ir_ops: the op kinds of shmap programs, expanded from the one op
 * table sm_ir_ops.def (one row per op, every per-op fact in it), which says what each column means.
 */
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

/* How an op's unreduced axes (the mesh axes over which a value holds
 * partial sums) follow from its operands' (JAX's *_ur_rule functions). */
typedef enum {
    SM_UR_NONE,    /* no unreduced operand allowed: "unreduced rule for sin is not implemented" */
    SM_UR_KEEP,    /* linear in its one operand (astype, reshape, transpose, sum; a loop's
                      carries, whose next values must match): operand 0's kept */
    SM_UR_ADD,     /* add: both operands unreduced over the same axes, or neither */
    SM_UR_SAME,    /* linear in its data operands (concatenate; where's cases; scatter_add's
                    * operand and updates): all unreduced over the same axes, kept; where's
                    * condition and scatter_add's indices not unreduced */
    SM_UR_MUL,     /* multiply: bilinear; one operand unreduced over the axes the other is
                      reduced over (replicated, its cotangent unreduced): unreduced */
    SM_UR_DIV,     /* divide: the numerator unreduced over the axes the denominator is
                      reduced over: unreduced; an unreduced denominator refused */
    SM_UR_DOT,     /* products: no unreduced operand; out_sharding=P(unreduced=...) keeps the
                      contracting axes' partial sums instead of reducing them */
    SM_UR_PSUM,    /* psum, psum_scatter over A: the partial sums over A are summed */
    SM_UR_PCAST,   /* pcast(x, A, to='unreduced'): varying over A becomes unreduced over A */
    SM_UR_RESHARD, /* reshard, with_sharding_constraint: to the spec's unreduced axes (a subset;
                      the others are summed) */
    SM_UR_MANUAL   /* shard_map_in / _out: the in_spec's / out_spec's unreduced axes */
} sm_ur_rule;

#define SM_OP_MAXARGS 64 /* most operands one op may take (concatenate) */

typedef enum {
#define SM_OP(e, name, mn, mx, infer, shard, vma, ur, exec, kern, sig) e,
#include "sm_ir_ops.def"
#undef SM_OP
    SM_OP_COUNT
} sm_op_kind;

#define SM_OP_COUNT_EXPECTED 119
_Static_assert(SM_OP_COUNT == SM_OP_COUNT_EXPECTED, "op table changed: update the count and tests");

#endif
