/* sm_ir: shmap programs — the per-device program of a shard_map job as a
 * list of SSA ops over typed values (dtype + block shape + the mesh axes the
 * value may vary over), with the mesh, parameters (global shapes + in_specs),
 * out_specs and returned values.
 *
 * Three ways in: the text form (sm_program_parse, docs/programs.md), the C builder
 * (sm_program_create / _add_param / _add_op / _set_returns), and protobuf
 * (common/rpc, through the builder). sm_program_verify checks any of them:
 * block shapes from in_specs, dtype and shape of every op (the op table,
 * sm_ir_ops.h), out_specs and result global shapes, and the replication check.
 *
 * The text form accepts, beyond docs/programs.md, what makes JAX code port line
 * by line: module prefixes (jnp.dot, jax.lax.psum, jax.P), method calls and
 * attributes of arrays (x.reshape(2, 3), x.astype(f32), x.sum(axis=0),
 * x.T, x.shape, x.ndim, x.dtype), `**`, `//` on static ints, tuple
 * unpacking (a, b = b, a), list comprehensions over range
 * ([(j, (j - 1) % n) for j in range(n)]), inf and nan, const(value, dtype)
 * and pvary(x, axes). As in JAX, axis_size(axes) and psum(<number>, axes)
 * are static Python numbers (so `for k in range(axis_size('i'))` works).
 * Basic indexing x[a:b, :, i] lowers to slice + squeeze.
 *
 * Two kinds of program share these types (docs/semantics.md: shard_map and the global view):
 * - SM_PROG_SHARD_MAP: the per-device program of a shard_map job; a
 *   value's shape is its block shape and vma its varying axes;
 * - SM_PROG_JIT: a global-view program (jax.jit with explicit or automatic
 *   sharding); a value's shape is its global shape and layout the mesh axes
 *   each dimension is sharded over (its type's sharding over Explicit axes,
 *   plus the layout the service chose over Auto axes). Ops marked manual
 *   come from a shard_map function called from the jit body and work on
 *   blocks, as in a shard_map program. sm_lower (common/lower) turns a
 *   verified jit program into a shard_map program.
 *
 * Ownership: a program owns everything it points to, in one arena;
 * sm_program_free releases it. Not thread-safe; a verified program may be
 * read from many threads. */
#ifndef SM_IR_H
#define SM_IR_H

#include <stdint.h>

#include "sm_dtype.h"
#include "sm_err.h"
#include "sm_ir_ops.h"
#include "sm_mesh.h"
#include "sm_pspec.h"
#include "sm_shape.h"
#include "sm_strbuf.h"

#define SM_IR_MAX_INTS (2 * SM_MAX_RANK)

typedef struct {
    int n;
    int64_t v[SM_IR_MAX_INTS];
} sm_ir_ints;

/* A jit value's layout: for each dimension, the mesh axes (indices into
 * the mesh, most significant first) it is sharded over. A mesh axis appears
 * at most once. Value type. */
typedef struct {
    uint8_t n[SM_MAX_RANK];
    uint8_t ax[SM_MAX_RANK][SM_MAX_AXES];
} sm_ir_layout;

typedef enum { SM_PROG_SHARD_MAP = 0, SM_PROG_JIT = 1 } sm_prog_kind;

/* Attributes of one op; which fields an op reads is given by its signature
 * in sm_ir_ops.h. A zeroed struct holds JAX's defaults (axis=0,
 * tiled=False, keepdims=False, no dtype, axis=None for reductions). */
typedef struct {
    sm_ir_ints ints;  /* shape, start_indices, axes, reps, shift, slice_size,
                         arange (start[, stop[, step]]), pad (lo, hi per dim) */
    sm_ir_ints ints2; /* limit_indices; roll axes */
    int has_ints;     /* 0: not given (reduce over all, reverse transpose, squeeze all 1s) */
    int has_ints2;
    int64_t axis;  /* axis, scatter_dimension, split_axis */
    int64_t axis2; /* concat_axis */
    int tiled;
    int keepdims;
    int naxes; /* mesh axis names (axis_name), in the order written */
    char axes[SM_MAX_AXES][SM_AXIS_NAME_MAX];
    int nperm; /* ppermute (src, dst) pairs; borrowed by add_op, arena-owned in a program */
    const int64_t (*perm)[2];
    int has_dtype;
    sm_dtype dtype;
    const char *spec; /* einsum subscripts; copied by add_op */
    /* out_sharding= / reshard / with_sharding_constraint / shard_map_in and
     * _out: the PartitionSpec (jit programs); copied by add_op, NULL if none */
    const sm_pspec *sharding;
    int value_is_float; /* const / full value: f if set, else i (bool is an int 0/1 + dtype) */
    double f;
    int64_t i;
} sm_ir_attrs;

typedef struct {
    sm_dtype dtype;
    sm_shape shape;     /* block shape */
    uint32_t vma;       /* bit a: may vary over mesh axis a */
    uint32_t unreduced; /* bit a: holds partial sums over mesh axis a (unreduced={...}) */
    int weak;           /* weakly typed (a Python scalar literal) */
    const char *name;   /* source name, or NULL */
    int def;            /* index of the defining op, or -1 for a parameter */
    /* jit programs: */
    sm_ir_layout layout; /* concrete layout over every mesh axis */
    uint32_t hidden;     /* mesh axes its type does not show (Auto axes) */
    int manual;          /* a block inside a shard_map call (shape is the block) */
} sm_ir_value;

typedef struct {
    sm_op_kind kind;
    int noperands;
    int *operands; /* value ids, each defined earlier */
    sm_ir_attrs attrs;
    int result;    /* value id */
    int line, col; /* source position; 0 when built in C */
    /* jit programs: */
    uint32_t auto_mask; /* mesh axes Auto at this op (auto_axes), beyond the mesh's */
    int manual;         /* a per-device op of a shard_map function called from jit */
} sm_ir_op;

typedef struct {
    const char *name;
    sm_dtype dtype;
    sm_shape global; /* the caller's array shape */
    sm_pspec spec;   /* in_spec */
    int value;       /* value id of the block */
} sm_ir_param;

typedef struct {
    sm_prog_kind kind;
    sm_mesh mesh;
    uint32_t auto_axes; /* jit: mesh axes of type Auto (axis_types=); the rest are Explicit */
    int has_devices;    /* the text named devices=[...] */
    const char *name;
    const char *filename; /* for messages; may be NULL */
    int nparams;
    sm_ir_param *params;
    int nvalues;
    sm_ir_value *values;
    int nops;
    sm_ir_op *ops;
    int nreturns;
    int *returns;          /* value ids */
    sm_pspec *out_specs;   /* one per return; jit: the result shardings (the value's
                              type's, or -> OUT_SHARDINGS when has_out_shardings) */
    int has_out_shardings; /* jit: the header gave -> OUT_SHARDINGS */
    int lowered; /* made by sm_lower (set before the params are added): an argument or result
                    unreduced over an axis is a block varying over it (each device holds its
                    own partial sum) */
    sm_shape *out_global;  /* result global shapes, set by set_returns/verify */
    int ret_line, ret_col; /* position of `return` in the text */
    /* private */
    struct sm_arena *arena;
    int cap_params, cap_values, cap_ops;
} sm_program;

/* Op table lookups. */
const char *sm_op_name(sm_op_kind k);                /* "psum"; "?" if invalid */
int sm_op_lookup(const char *name, sm_op_kind *out); /* 0 found, -1 unknown */
sm_vma_rule sm_op_vma_rule(sm_op_kind k);
sm_ur_rule sm_op_ur_rule(sm_op_kind k);
const char *sm_op_signature(sm_op_kind k);
void sm_op_arity(sm_op_kind k, int *min, int *max);
/* 1 for the ops of global-view programs only (reshard,
 * with_sharding_constraint, shard_map_in/_out): no shard_map body runs them. */
int sm_op_global_only(sm_op_kind k);

/* Creates an empty program over a copy of mesh. name may be NULL ("f").
 * On success *out owns its arena; free with sm_program_free. */
sm_err sm_program_create(const sm_mesh *mesh, const char *name, sm_program **out, char *err,
                         size_t errlen);
void sm_program_free(sm_program *p);
/* Makes p a global-view (jit) program with these Auto mesh axes (a mask
 * over p->mesh; 0: all Explicit). Call before the first parameter. */
sm_err sm_program_set_jit(sm_program *p, uint32_t auto_axes, char *err, size_t errlen);

/* Adds a parameter: checks spec against mesh and global shape
 * (sm_pspec_check), computes its block shape and adds its value (varying
 * over the spec's axes). name is copied. *value_id may be NULL. */
sm_err sm_program_add_param(sm_program *p, const char *name, sm_dtype dtype, const sm_shape *global,
                            const sm_pspec *spec, int *value_id, char *err, size_t errlen);

/* Appends an op over existing values and infers its result type (dtype,
 * block shape, varying axes). attrs may be NULL (all defaults); it is copied
 * (spec and perm too). On error nothing is added. */
sm_err sm_program_add_op(sm_program *p, sm_op_kind kind, const int *operands, int n,
                         const sm_ir_attrs *attrs, int *value_id, char *err, size_t errlen);
/* Like add_op, recording the source position for messages. */
sm_err sm_program_add_op_at(sm_program *p, sm_op_kind kind, const int *operands, int n,
                            const sm_ir_attrs *attrs, int line, int col, int *value_id, char *err,
                            size_t errlen);
/* Like add_op_at, for jit programs: manual marks a per-device op of a
 * shard_map function called from the jit body; auto_mask the mesh axes that
 * are Auto at this op (inside auto_axes) beyond the mesh's own. */
sm_err sm_program_add_op_jit(sm_program *p, sm_op_kind kind, const int *operands, int n,
                             const sm_ir_attrs *attrs, int line, int col, int manual,
                             uint32_t auto_mask, int *value_id, char *err, size_t errlen);
/* Names a value (for messages and printing); name is copied. */
void sm_program_name_value(sm_program *p, int value_id, const char *name);

/* Sets the returned values and their out_specs (copied); checks each spec
 * against the mesh and the value's rank and computes the result global
 * shapes. Does not run the replication check (sm_program_verify does).
 * In a jit program out_specs are the result shardings (-> OUT_SHARDINGS);
 * NULL means each result keeps its type's sharding. */
sm_err sm_program_set_returns(sm_program *p, const int *values, const sm_pspec *out_specs, int n,
                              char *err, size_t errlen);

/* Checks the whole program from scratch: parameters against the mesh, every
 * op in order (operands defined before use, arity, dtype/shape rules), the
 * returns and out_specs, and, if check_vma, that no output varies over a mesh
 * axis its out_spec does not name. Refreshes every value's type and
 * out_global. Messages start with "file:line:col: " when positions are known. */
sm_err sm_program_verify(sm_program *p, int check_vma, char *err, size_t errlen);

/* Parses the text form (docs/programs.md) and infers every type; `for` loops are
 * unrolled. A file may hold several functions (`def`, `shard_map`, `jit`);
 * the entry is the last `shard_map` or `jit` one. sm_program_parse_entry
 * names another (NULL: the last). filename is used in messages ("file:line:col: sentence"), may be
 * NULL ("<text>"). Does not run the replication check: call
 * sm_program_verify(p, check_vma, ...) next. SM_EFORMAT for syntax errors,
 * SM_EINVAL for type and shape errors. */
sm_err sm_program_parse(const char *text, const char *filename, sm_program **out, char *err,
                        size_t errlen);
sm_err sm_program_parse_entry(const char *text, const char *filename, const char *entry,
                              sm_program **out, char *err, size_t errlen);

/* Emits the text form of p (loops unrolled, every value named); it re-parses
 * to an equal program. Returns SM_ENOMEM if the buffer ran out. */
sm_err sm_program_print(const sm_program *p, sm_strbuf *out);
/* One line per parameter, op and output with its block type and varying
 * axes, e.g. "z = dot(a, b) : f32[2,32]{V:i,j}" (shmapctl check). */
sm_err sm_program_describe(const sm_program *p, sm_strbuf *out);
/* Type of a value as JAX prints it: "f32[2,32]{V:i}" ("f32[2,32]" when it
 * varies over no axis); in a jit program with its sharding, "f32[8@X,2048@Y]",
 * "f32[8@(X,Y),4]" (Auto axes not shown). Returns buf. */
char *sm_program_value_type(const sm_program *p, int value_id, char *buf, size_t len);
/* Type of output k as JAX prints the result array's: its global shape with
 * the result sharding, "f32[8@i,32]" (a shard_map program's out_spec, a jit
 * program's result sharding; Auto axes not shown). Returns buf. */
char *sm_program_output_type(const sm_program *p, int k, char *buf, size_t len);
/* 1 if a and b have the same mesh, params, ops, attributes, types and
 * returns (value names are ignored). */
int sm_program_equal(const sm_program *a, const sm_program *b);
/* 1 if a verified program is light: no op that may communicate (so no
 * device waits for another), no product, and at most max_bytes of values
 * per device. Running it costs less than waking a thread for it. */
int sm_program_light(const sm_program *p, int64_t max_bytes);

#endif
