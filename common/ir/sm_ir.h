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
 * read from many threads.
 *
 * libshmap installs sm_program.h, the stable part (an opaque program, ops
 * named by their JAX name); this header, the op table and sm_op_kind stay
 * inside the project, so adding an op renumbers nothing a user compiled. */
#ifndef SM_IR_H
#define SM_IR_H

#include <stdint.h>

#include "sm_dtype.h"
#include "sm_err.h"
#include "sm_ir_ops.h"
#include "sm_mesh.h"
#include "sm_pspec.h"
#include "sm_shape.h"
#include "sm_program.h"
#include "sm_strbuf.h"

/* A jit value's layout: for each dimension, the mesh axes (indices into
 * the mesh, most significant first) it is sharded over. A mesh axis appears
 * at most once. Value type. */
typedef struct {
    uint8_t n[SM_MAX_RANK];
    uint8_t ax[SM_MAX_RANK][SM_MAX_AXES];
} sm_ir_layout;

typedef enum { SM_PROG_SHARD_MAP = 0, SM_PROG_JIT = 1 } sm_prog_kind;

typedef struct {
    sm_dtype dtype;
    sm_shape shape;     /* block shape */
    uint32_t vma;       /* bit a: may vary over mesh axis a */
    uint32_t unreduced; /* bit a: holds partial sums over mesh axis a (unreduced={...}) */
    int ukind;          /* how the partial results make the value: SM_UK_SUM (partial sums),
                           SM_UK_MAX, SM_UK_MIN (JAX's unreduced_kind); SUM when none */
    uint32_t reduced;   /* bit a: replicated over mesh axis a, its cotangent unreduced over it
                           (reduced={...}); a type-level fact: the data is replicated */
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
    uint32_t auto_mask;     /* mesh axes Auto at this op (auto_axes), beyond the mesh's */
    uint32_t explicit_mask; /* mesh axes Explicit at this op (explicit_axes), Auto in the
                             * mesh: they show in its type */
    int manual;             /* a per-device op of a shard_map function called from jit */
    uint32_t outer_axes;    /* shard_map_in and _out of a shard_map function called from the
                             * body of another (nested): the axes Manual outside it (and
                             * manual_axes, explicit, those inside); 0 otherwise */
    uint32_t manual_axes;   /* per-device ops, shard_map_in and _out: the mesh axes Manual in
                             * that function's body (its axis_names); 0: every axis */
} sm_ir_op;

typedef struct {
    const char *name;
    sm_dtype dtype;
    sm_shape global; /* the caller's array shape */
    sm_pspec spec;   /* in_spec */
    int value;       /* value id of the block */
} sm_ir_param;

struct sm_program {
    sm_prog_kind kind;
    sm_mesh mesh;
    uint32_t auto_axes;   /* jit: mesh axes of type Auto (axis_types=); the rest are Explicit */
    int has_devices;      /* the text named devices=[...] */
    int unchecked;        /* shard_map: check_vma=False in its header (no replication check
                           * of its results against out_specs, as the file's # check_vma:
                           * false) */
    uint32_t manual_axes; /* shard_map: the mesh axes Manual in the body (axis_names=), the
                           * others left to the service (its body runs replicated over them);
                           * 0: every axis */
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
};

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
/* 1 for the four ops of a while loop (while_carry, while_test, while_next,
 * while_end): the text form writes them as `while COND:`, never as calls. */
int sm_op_loop(sm_op_kind k);

/* A while loop of a program: the op indices where its m carries
 * (while_carry), its test, its m while_next and its m while_end start;
 * parent: the index of the enclosing loop in the same list, -1 at top. */
typedef struct {
    int carry, test, next, end, m, parent;
} sm_ir_loop;

/* Checks the loops of p: each is m >= 1 consecutive while_carry, then a
 * while_test of one of its carries, the body, m consecutive while_next(carry
 * k, next k) and m consecutive while_end(carry k), carries in order, loops
 * nested whole; a value defined inside a loop is used only inside it (its
 * carries also by its while_end), no op reads a while_test or while_next,
 * and no output is a value of a loop's inside. When loops is not NULL
 * (room for p->nops) it receives them in the order of their first op, and
 * *n their count. Messages name the op's source position. */
sm_err sm_ir_loops_check(const sm_program *p, sm_ir_loop *loops, int *n, char *err, size_t errlen);

/* The public builder (sm_program.h) plus what only the service's own code
 * uses: ops named by sm_op_kind, source positions and jit programs. */

/* Makes p a global-view (jit) program with these Auto mesh axes (a mask
 * over p->mesh; 0: all Explicit). Call before the first parameter. */
sm_err sm_program_set_jit(sm_program *p, uint32_t auto_axes, char *err, size_t errlen);

/* sm_program_add_op with the op given by kind, recording the source
 * position for messages (0, 0 when built in C). */
sm_err sm_program_add_op_at(sm_program *p, sm_op_kind kind, const int *operands, int n,
                            const sm_ir_attrs *attrs, int line, int col, int *value_id, char *err,
                            size_t errlen);
/* Like add_op_at, for jit programs: manual marks a per-device op of a
 * shard_map function called from the jit body, manual_axes the axes Manual
 * in that function (0: every axis; also on its shard_map_in and
 * shard_map_out ops), outer_axes those Manual around a nested shard_map's
 * shard_map_in and shard_map_out (sm_ir_op); auto_mask the mesh axes that
 * are Auto at this op (inside auto_axes) beyond the mesh's own,
 * explicit_mask those Explicit at it (inside explicit_axes) though the
 * mesh's are Auto. */
sm_err sm_program_add_op_jit(sm_program *p, sm_op_kind kind, const int *operands, int n,
                             const sm_ir_attrs *attrs, int line, int col, int manual,
                             uint32_t manual_axes, uint32_t outer_axes, uint32_t auto_mask,
                             uint32_t explicit_mask, int *value_id, char *err, size_t errlen);

/* einsum's '...' written out (numpy's broadcasting of the dimensions it
 * covers, aligned to the right; unused letters; the implicit output
 * '...' first): op's subscripts replaced in p's arena. Called by the
 * builder, so a program holds letters only. */
sm_err sm_ir_einsum_ellipsis(sm_program *p, sm_ir_op *op, char *err, size_t errlen);

/* 1 if a and b have the same mesh, params, ops, attributes, types and
 * returns (value names are ignored). */
int sm_program_equal(const sm_program *a, const sm_program *b);
/* 1 if a verified program is light: no loop, no op that may communicate (so no
 * device waits for another), no product, and at most max_bytes of values
 * per device. Running it costs less than waking a thread for it. */
int sm_program_light(const sm_program *p, int64_t max_bytes);

#endif
