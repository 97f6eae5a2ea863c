/* sm_program: the part of shmap programs (common/ir, sm_ir.h) that libshmap
 * installs and keeps stable: an opaque program, the op attributes, and the
 * calls that parse, build, verify and print one. Ops are named by their JAX
 * name ("psum", "dot", "all_gather"; docs/programs.md lists them), never by
 * a number, so adding an op to the table changes nothing a program built
 * against an older libshmap relies on.
 *
 * Ownership: a program owns everything it points to, in one arena;
 * sm_program_free releases it. Not thread-safe; a verified program may be
 * read from many threads. Every fallible call returns sm_err and writes one
 * sentence into err[errlen]. */
#ifndef SM_PROGRAM_H
#define SM_PROGRAM_H

#include <stddef.h>
#include <stdint.h>

#include "sm_dtype.h"
#include "sm_err.h"
#include "sm_mesh.h"
#include "sm_pspec.h"
#include "sm_shape.h"
#include "sm_strbuf.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sm_program sm_program;

/* The program level of this build: what its executor runs of the op table.
 * A worker tells the coordinator its level when it registers; a coordinator
 * refuses a worker below its own, which would run some of the programs it
 * is sent wrongly. Raise it with an op or attribute whose absence an older
 * worker would not notice:
 *   0  workers from before levels existed;
 *   1  slice strides (attribute ints3), rev, floor_divide, sum/mean/prod
 *      dtype=, argmax, cumsum and the other ops of this level's table. */
#define SM_PROGRAM_LEVEL 1u

#define SM_IR_MAX_INTS (2 * SM_MAX_RANK)

typedef struct {
    int n;
    int64_t v[SM_IR_MAX_INTS];
} sm_ir_ints;

/* Attributes of one op; which fields an op reads is given by its signature
 * (docs/programs.md). A zeroed struct holds JAX's defaults (axis=0,
 * tiled=False, keepdims=False, no dtype, axis=None for reductions). */
typedef struct {
    sm_ir_ints ints;  /* shape, start_indices, axes, reps, shift, slice_size,
                         arange (start[, stop[, step]]), pad (lo, hi per dim) */
    sm_ir_ints ints2; /* limit_indices; roll axes */
    sm_ir_ints ints3; /* slice strides */
    int has_ints;     /* 0: not given (reduce over all, reverse transpose, squeeze all 1s) */
    int has_ints2;
    int has_ints3;
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
    int unchecked;      /* shard_map_out: its shard_map function has check_vma=False (no
                           replication check of the value against out_specs) */
    double f;
    int64_t i;
} sm_ir_attrs;

/* Creates an empty program over a copy of mesh. name may be NULL ("f").
 * On success *out owns its arena; free with sm_program_free. */
sm_err sm_program_create(const sm_mesh *mesh, const char *name, sm_program **out, char *err,
                         size_t errlen);
/* Releases p and everything it owns; NULL is a no-op. */
void sm_program_free(sm_program *p);

/* Adds a parameter: checks spec against mesh and global shape
 * (sm_pspec_check), computes its block shape and adds its value (varying
 * over the spec's axes). name is copied. *value_id may be NULL. */
sm_err sm_program_add_param(sm_program *p, const char *name, sm_dtype dtype, const sm_shape *global,
                            const sm_pspec *spec, int *value_id, char *err, size_t errlen);

/* Appends the op named op (its JAX name, as in the text form) over existing
 * values and infers its result type (dtype, block shape, varying axes).
 * attrs may be NULL (all defaults); it is copied (spec and perm too).
 * SM_EINVAL for a name that is no op, and for operands or attributes the
 * op refuses. On error nothing is added. */
sm_err sm_program_add_op(sm_program *p, const char *op, const int *operands, int n,
                         const sm_ir_attrs *attrs, int *value_id, char *err, size_t errlen);
/* Names a value (for messages and printing); name is copied. */
void sm_program_name_value(sm_program *p, int value_id, const char *name);

/* Sets the returned values and their out_specs (copied); checks each spec
 * against the mesh and the value's rank and computes the result global
 * shapes. Does not run the replication check (sm_program_verify does).
 * In a jit program out_specs are the result shardings (-> OUT_SHARDINGS);
 * NULL means each result keeps its type's sharding. */
sm_err sm_program_set_returns(sm_program *p, const int *values, const sm_pspec *out_specs, int n,
                              char *err, size_t errlen);

/* The number of parameters and of returned values of p. */
int sm_program_nparams(const sm_program *p);
int sm_program_nreturns(const sm_program *p);

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

#ifdef __cplusplus
}
#endif

#endif
