/* sm_ir_infer: internal interface of the type rules behind the op table.
 * Each rule reads the operand values and the op's attributes and writes the
 * result dtype, block shape and weak flag (the varying axes are derived from
 * the table's vma rule by sm_ir_infer_op). Messages name the op, the operand
 * types and what was expected. Not part of the public API. */
#ifndef SM_IR_INFER_H
#define SM_IR_INFER_H

#include "sm_ir.h"

/* Largest dimension size and largest magnitude of an integer attribute: keeps
 * every shape computation far from int64 overflow. */
#define SM_IR_MAX_DIM ((int64_t)1 << 40)

typedef sm_err (*sm_ir_infer_fn)(const sm_program *p, const sm_ir_op *op,
                                 const sm_ir_value *const *in, sm_ir_value *out, char *err,
                                 size_t errlen);

#define SM_OP_DECL(e, name, mn, mx, fn, vma, sig)                                                  \
    sm_err fn(const sm_program *p, const sm_ir_op *op, const sm_ir_value *const *in,               \
              sm_ir_value *out, char *err, size_t errlen);
SM_OP_LIST(SM_OP_DECL)
#undef SM_OP_DECL

/* One parameter of an op's signature (sm_ir_ops.h). */
typedef struct {
    char name[32];
    char kind, field; /* see sm_ir_ops.h */
    int optional;
} sm_op_param;

/* Parses kind's signature into out (at most max); returns the count. */
int sm_op_params(sm_op_kind kind, sm_op_param *out, int max);
/* Sets has_ints / has_ints2 for the int lists an op always takes, so a
 * program built in C equals its printed and re-parsed form. */
void sm_ir_attrs_normalize(sm_ir_op *op);

/* Checks arity and operand ids (< limit), runs the op's rule and derives
 * the varying axes. out->name and out->def are left as they are. */
sm_err sm_ir_infer_op(const sm_program *p, const sm_ir_op *op, int limit, sm_ir_value *out,
                      char *err, size_t errlen);

/* "f32[2,8]" for a value (no varying axes). */
char *sm_ir_type_str(const sm_ir_value *v, char *buf, size_t len);
/* "[2,8]". */
char *sm_ir_shape_str(const sm_shape *s, char *buf, size_t len);
/* JAX type promotion of two operands with weak types; *weak gets the result's. */
sm_dtype sm_ir_promote(sm_dtype a, int aw, sm_dtype b, int bw, int *weak);
/* numpy broadcasting; 0 ok, -1 incompatible. */
int sm_ir_broadcast(const sm_shape *a, const sm_shape *b, sm_shape *out);
/* Normalises axis (negative counts from the end) against rank; -1 if out of range. */
int sm_ir_norm_axis(int64_t axis, int rank, int *out);
/* Resolves attrs->axes to mesh axes: a bitmask and the group size n. Unknown
 * or repeated names are SM_EINVAL naming the op. */
sm_err sm_ir_axes_resolve(const sm_program *p, const sm_ir_op *op, uint32_t *mask, int64_t *n,
                          char *err, size_t errlen);
/* Marks in red[] the dimensions listed in v (all of them when !has);
 * negative axes count from the end; out of range or repeated: SM_EINVAL. */
sm_err sm_ir_axes_list(const sm_ir_op *op, const sm_ir_ints *v, int has, int rank, int *red,
                       char *err, size_t errlen);
/* Result with dtype t and shape s, not weak. */
void sm_ir_set(sm_ir_value *out, sm_dtype t, const sm_shape *s);

#endif
