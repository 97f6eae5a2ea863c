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

#define SM_OP_MAXARGS 64 /* most operands one op may take (concatenate) */

typedef enum {
#define SM_OP(e, name, mn, mx, infer, shard, vma, exec, kern, sig) e,
#include "sm_ir_ops.def"
#undef SM_OP
    SM_OP_COUNT
} sm_op_kind;

#define SM_OP_COUNT_EXPECTED 70
_Static_assert(SM_OP_COUNT == SM_OP_COUNT_EXPECTED, "op table changed: update the count and tests");

#endif
