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

/* What a jit op's sharding rule decides, beyond the result's layout
 * (out->layout): the layout each operand must have for the op to run on
 * blocks, the op as it runs on blocks, and the collective that completes
 * it. sm_lower reshards every operand k to in[k], runs `local` (the op
 * with block-sized attributes) giving a block laid out as `local_layout`,
 * applies `post` over post_axes (psum_scatter: tiled, along post_dim), and
 * reshards the result from there to out->layout. */
typedef enum {
    SM_IR_POST_NONE,
    SM_IR_POST_PSUM,
    SM_IR_POST_PMEAN,
    SM_IR_POST_PMAX,
    SM_IR_POST_PMIN,
    SM_IR_POST_PSUM_SCATTER
} sm_ir_post;

typedef struct {
    sm_ir_layout in[SM_OP_MAXARGS];
    sm_ir_attrs local;
    sm_ir_layout local_layout;
    sm_ir_post post;
    int npost;
    uint8_t post_axes[SM_MAX_AXES]; /* mesh axis indices, in group order */
    int post_dim;
} sm_ir_shard_plan;

typedef sm_err (*sm_ir_shard_fn)(const sm_program *p, const sm_ir_op *op,
                                 const sm_ir_value *const *in, sm_ir_value *out,
                                 sm_ir_shard_plan *plan, char *err, size_t errlen);

#define SM_OP(e, name, mn, mx, infer, shard, vma, ur, exec, kern, sig)                             \
    sm_err infer(const sm_program *p, const sm_ir_op *op, const sm_ir_value *const *in,            \
                 sm_ir_value *out, char *err, size_t errlen);                                      \
    sm_err shard(const sm_program *p, const sm_ir_op *op, const sm_ir_value *const *in,            \
                 sm_ir_value *out, sm_ir_shard_plan *plan, char *err, size_t errlen);
#include "sm_ir_ops.def"
#undef SM_OP

/* The one axis of argmax, argmin and the cumulative ops, normalised
 * against rank; -1 for axis=None (over the flattened operand). */
int sm_ir_op_axis(const sm_ir_op *op, int rank);

/* take / take_along_axis's mode: 0 fill (the default), 1 clip (also
 * promise_in_bounds), 2 wrap, -1 for anything else. */
int sm_ir_gather_mode(const sm_ir_op *op);

/* Runs op's sharding rule in jit program p (operand types already in
 * p->values; out has the inferred dtype and global shape): sets
 * out->layout and out->hidden and fills plan (may be NULL). Messages are
 * JAX's sentences. */
sm_err sm_ir_shard_op(const sm_program *p, const sm_ir_op *op, sm_ir_value *out,
                      sm_ir_shard_plan *plan, char *err, size_t errlen);
/* The sharding rule of a collective (axis_index, pvary, pcast) in the
 * body of a shard_map Manual over some mesh axes only. */
sm_err sm_ir_shard_pcoll(const sm_program *p, const sm_ir_op *op, const sm_ir_value *const *in,
                         sm_ir_value *out, sm_ir_shard_plan *plan, char *err, size_t errlen);
/* Every axis of p's mesh, as a mask. */
uint32_t sm_ir_all_axes(const sm_program *p);
/* Layout of spec over p's mesh (spec checked by the caller). */
void sm_ir_layout_of_spec(const sm_program *p, const sm_pspec *spec, sm_ir_layout *out);
/* PartitionSpec of a layout, showing only the axes not in hidden. */
void sm_ir_layout_to_spec(const sm_program *p, const sm_ir_layout *l, int rank, uint32_t hidden,
                          sm_pspec *out);
int sm_ir_layout_equal(const sm_ir_layout *a, const sm_ir_layout *b, int rank);
/* A jit value's type as JAX prints it: "f32[8@X,2048@Y]". */
char *sm_ir_jit_type_str(const sm_program *p, const sm_ir_value *v, char *buf, size_t len);
/* "{V:i,j, U:k, R:l}": the varying, unreduced and reduced axes a type string
 * ends with ("" when all are empty), in mesh order; unreduced of a kind
 * other than sum is JAX's U_max:k, U_min:k. */
char *sm_ir_axes_suffix(const sm_program *p, uint32_t vma, uint32_t unreduced, int ukind,
                        uint32_t reduced, char *buf, size_t len);
/* Runs op's unreduced rule (the ur column of sm_ir_ops.def): sets
 * out->unreduced from the operands', or refuses with JAX's sentence; then
 * the reduced rule (JAX's *_reduced_rule: out->reduced; none in a lowered
 * program, where reduced values are the replicated blocks they are). mask:
 * the mesh axes the op names (collectives, pcast). */
sm_err sm_ir_unreduced_op(const sm_program *p, const sm_ir_op *op, const sm_ir_value *const *in,
                          sm_ir_value *out, uint32_t mask, char *err, size_t errlen);
sm_err sm_ir_reduced_op(const sm_program *p, const sm_ir_op *op, const sm_ir_value *const *in,
                        sm_ir_value *out, uint32_t mask, char *err, size_t errlen);
/* "{'x', 'y'}": mesh axes as a Python set, in mesh order ("set()" if none). */
char *sm_ir_axes_set_str(const sm_program *p, uint32_t m, char *buf, size_t len);
/* shard_map's check of one of its in_specs or out_specs (what: "in_specs"
 * or "out_specs"; index >= 0 is written after it) against the axes Manual
 * in its body (manual: 0, or every axis, passes): JAX's ValueError when s
 * names another mesh axis, its NotImplementedError for unreduced= in a
 * partial-manual shard_map. */
sm_err sm_ir_spec_manual(const sm_program *p, uint32_t manual, const sm_pspec *s, const char *what,
                         int index, char *err, size_t errlen);
/* A sharding inside a shard_map Manual over the axes in manual (what: the op
 * taking it) may name only the others: the refusal when it names one. */
sm_err sm_ir_spec_not_manual(const sm_program *p, uint32_t manual, const sm_pspec *s,
                             const char *what, char *err, size_t errlen);
/* The mesh axes of a spec's unreduced={...}, as a mask (unknown names left out). */
uint32_t sm_ir_spec_unreduced(const sm_program *p, const sm_pspec *s);
/* The mesh axes of a spec's reduced={...}, as a mask (unknown names left out). */
uint32_t sm_ir_spec_reduced(const sm_program *p, const sm_pspec *s);
/* Number of shards along dim d (product of its axes' sizes). */
int64_t sm_ir_layout_factor(const sm_program *p, const sm_ir_layout *l, int d);

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

/* 1 if a psum, pmean, pmax, pmin, all_gather or psum_scatter acts within
 * axis_index_groups (attrs.ints flattened, attrs.ints2.v[0] groups). */
int sm_ir_has_groups(const sm_ir_op *op);
/* 1 for all_gather(..., to='invarying' or 'reduced') (JAX's
 * all_gather_invariant, all_gather_reduced) and pcast(..., to='unreduced' or
 * 'reduced'): the result varies over none of the op's axes. */
int sm_ir_gathers_invarying(const sm_ir_op *op);

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
