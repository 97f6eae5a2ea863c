/* sm_exec_impl: internal interface between the interpreter loop (sm_exec.c)
 * and the op handlers (sm_exec_ops.c: local ops; sm_exec_coll.c:
 * collectives). Not part of the public API. */
#ifndef SM_EXEC_IMPL_H
#define SM_EXEC_IMPL_H

#include "sm_exec.h"

/* One device's run. */
typedef struct {
    const sm_program *p;
    int pos; /* mesh position */
    const sm_comm *comm;
    void *cctx;
    sm_array_pool *pool; /* values and scratch come from it (NULL: none) */
    uint64_t seq;        /* collectives issued so far */
    int *members;        /* scratch: room for p->mesh.ndevices positions */
} sm_exec_ctx;

/* A handler fills out (already allocated with the dtype and block shape of
 * the op's result value; zeroed unless sm_exec.c lists the op as writing
 * every element) from the operands in[0..op->noperands).
 * Messages need not name the op or device: the caller prefixes them. */
typedef sm_err (*sm_exec_fn)(sm_exec_ctx *x, const sm_ir_op *op, sm_array *const *in, sm_array *out,
                             char *err, size_t errlen);

#define SM_EXEC_HANDLERS(X)                                                                        \
    X(sm_exec_binary)                                                                              \
    X(sm_exec_unary)                                                                               \
    X(sm_exec_where)                                                                               \
    X(sm_exec_astype)                                                                              \
    X(sm_exec_bitcast)                                                                             \
    X(sm_exec_fill)                                                                                \
    X(sm_exec_arange)                                                                              \
    X(sm_exec_product)                                                                             \
    X(sm_exec_reduce)                                                                              \
    X(sm_exec_argminmax)                                                                           \
    X(sm_exec_cumulative)                                                                          \
    X(sm_exec_take)                                                                                \
    X(sm_exec_segment_sum)                                                                         \
    X(sm_exec_scatter)                                                                             \
    X(sm_exec_sort)                                                                                \
    X(sm_exec_reshape)                                                                             \
    X(sm_exec_transpose)                                                                           \
    X(sm_exec_broadcast_to)                                                                        \
    X(sm_exec_slice)                                                                               \
    X(sm_exec_dynamic_slice)                                                                       \
    X(sm_exec_dynamic_update_slice)                                                                \
    X(sm_exec_concatenate)                                                                         \
    X(sm_exec_pad)                                                                                 \
    X(sm_exec_tile)                                                                                \
    X(sm_exec_roll)                                                                                \
    X(sm_exec_rev)                                                                                 \
    X(sm_exec_coll) /* every collective, axis_index and axis_size */                               \
    X(sm_exec_none) /* the ops of global-view programs only: refused */                            \
    X(sm_exec_loop) /* while loops: run by the interpreter loop itself (sm_exec.c) */

#define SM_EXEC_DECL(fn)                                                                           \
    sm_err fn(sm_exec_ctx *x, const sm_ir_op *op, sm_array *const *in, sm_array *out, char *err,   \
              size_t errlen);
SM_EXEC_HANDLERS(SM_EXEC_DECL)
#undef SM_EXEC_DECL

/* The kernel enum of an op's row in sm_ir_ops.def (SM_KERN_ADD for add,
 * SM_KERN_EXP for exp, SM_KERN_SUM for sum ...), 0 when it has none. */
int sm_exec_kern_of(sm_op_kind k);

/* The data of a in dtype t: a->data itself when a has dtype t, else a new
 * converted copy stored in *tmp (free it with free()). */
sm_err sm_exec_as(const sm_array *a, sm_dtype t, const void **data, void **tmp, char *err,
                  size_t errlen);
/* The value of an integer (or bool) scalar array. */
int64_t sm_exec_scalar_int(const sm_array *a);
/* Number of elements of a. */
int64_t sm_exec_numel(const sm_array *a);

#endif
