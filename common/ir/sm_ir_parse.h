/* sm_ir_parse: internal state of the text-form parser, shared by the
 * statement parser (sm_ir_parse.c), the expression evaluator
 * (sm_ir_expr.c) and call binding (sm_ir_call.c).
 *
 * The parser evaluates while it parses: static Python values (ints, floats,
 * strings, tuples, dtypes) are folded; array values emit ops into the
 * program as they are met, so types are known at once (x.shape works) and
 * every type error carries the position of the expression that caused it.
 * `for` bodies and comprehensions are unrolled by re-reading their tokens. */
#ifndef SM_IR_PARSE_H
#define SM_IR_PARSE_H

#include "sm_arena.h"
#include "sm_ir.h"
#include "sm_ir_lex.h"

typedef enum {
    SM_IT_NONE,
    SM_IT_INT,
    SM_IT_FLOAT,
    SM_IT_BOOL,
    SM_IT_STR,
    SM_IT_TUPLE,
    SM_IT_VALUE, /* an array value of the program: i is its id */
    SM_IT_DTYPE, /* i is the sm_dtype */
    SM_IT_FUNC,  /* an op, builtin or function of the file, s */
    SM_IT_SPEC   /* a PartitionSpec, spec */
} sm_item_kind;

typedef struct sm_item {
    sm_item_kind kind;
    int64_t i;
    double f;
    const char *s; /* NUL-terminated, scratch-owned */
    int n;         /* tuple length */
    int is_list;
    struct sm_item *elems;
    const sm_pspec *spec; /* SM_IT_SPEC; SM_IT_FUNC of auto_axes: its out_sharding (of
                           * explicit_axes: its in_sharding) */
    int mode;             /* SM_IT_FUNC: 1 auto_axes(f, ...), 2 explicit_axes(f, ...) */
    const sm_tok *at;     /* where it was written */
} sm_item;

typedef struct {
    const char *name;
    int len;   /* strlen(name) */
    int chain; /* the entry bound before it in its hash bucket; -1: none */
    sm_item item;
} sm_sym;

/* A function of the file: `def`, `shard_map` or `jit`. */
typedef enum { SM_FN_DEF, SM_FN_SHARD_MAP, SM_FN_JIT } sm_fn_kind;
typedef struct {
    sm_fn_kind kind;
    const char *name;
    int hdr;  /* token index of its name */
    int body; /* token index of the INDENT that opens its body */
} sm_fn;

#define SM_PS_MAX_FNS   64
#define SM_PS_MAX_CALLS 32 /* nested inlined calls */

typedef struct {
    const sm_tok *t;
    int nt, pos;
    sm_fn fns[SM_PS_MAX_FNS];
    int nfns;
    uint32_t mesh_auto;   /* axis_types: the Auto axes */
    int mesh_ntypes;      /* how many axis_types were written */
    const char *entry;    /* the function to run; NULL: the last shard_map or jit */
    int manual;           /* emitting the ops of a shard_map function called from jit */
    uint32_t manual_axes; /* ... Manual over these axes only (its axis_names=); 0: every
                           * axis */
    uint32_t outer_axes;  /* emitting a nested shard_map's shard_map_in or _out: the axes
                           * Manual around it (sm_ir_op.outer_axes); 0 otherwise */
    uint32_t edge_outer;  /* calling a shard_map function from the body of another: the
                           * axes Manual around it, 0 otherwise; edge_inner: those
                           * Manual inside it (explicit, every axis included) */
    uint32_t edge_inner;
    uint32_t auto_mask;                       /* inside auto_axes: its axes */
    uint32_t explicit_mask;                   /* inside explicit_axes: its axes */
    int calls;                                /* depth of inlined calls; `return` gives ret then */
    const sm_fn *active[SM_PS_MAX_CALLS + 1]; /* the entry and the calls being inlined */
    int nactive;
    sm_item ret;
    sm_program *p;
    const char *file;
    char *err;
    size_t errlen;
    sm_err code; /* first error, SM_OK while none */
    sm_arena *scratch;
    int depth;    /* expression nesting, bounded */
    sm_sym *syms; /* malloc'd; a name at most once */
    int nsyms, capsyms;
    int *heads; /* SM_PS_BUCKETS: the newest entry of each bucket; -1: none */
} sm_parser;

#define SM_PS_BUCKETS 1024 /* of the names' hash table (a power of two) */

#define SM_PS_MAX_DEPTH 200                /* nested expressions */
#define SM_PS_MAX_OPS   1000000            /* ops one program may unroll to */
#define SM_PS_MAX_INT   ((int64_t)1 << 52) /* static ints and range bounds */

/* Records the first error as "file:line:col: sentence"; returns -1. */
int sm_ps_fail(sm_parser *ps, const sm_tok *at, sm_err code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Wraps an error already written to ps->err by the builder with the position. */
int sm_ps_fail_at(sm_parser *ps, const sm_tok *at, sm_err code);

const sm_tok *sm_ps_peek(sm_parser *ps);
const sm_tok *sm_ps_next(sm_parser *ps);
/* Consumes operator/name s if next; returns 1 if it did. */
int sm_ps_accept(sm_parser *ps, const char *s);
/* Consumes s or fails with "expected s". */
int sm_ps_expect(sm_parser *ps, const char *s, const char *context);

/* Symbol table: lookup returns NULL when unbound; bind overwrites. */
sm_item *sm_ps_lookup(sm_parser *ps, const char *name, int len);
int sm_ps_bind(sm_parser *ps, const char *name, const sm_item *it);
/* Unbinds the names bound since the table held n (a scope's end). */
void sm_ps_unbind_to(sm_parser *ps, int n);
/* NUL-terminated scratch copy of a token's text. */
char *sm_ps_text(sm_parser *ps, const sm_tok *t);

/* Expressions: one expression, or a comma list as a tuple. */
int sm_ps_expr(sm_parser *ps, sm_item *out);
int sm_ps_expr_list(sm_parser *ps, sm_item *out);
/* A list of n elements of size elem in the scratch arena, with room for
 * at least one more: *arr as it is, or copied into one twice *cap (NULL
 * out of memory). For the parser's lists of any length. */
void *sm_ps_room(sm_parser *ps, void *arr, size_t elem, int n, int *cap);
/* Evaluates `range(...)` arguments after `range`: start, stop, step. */
int sm_ps_range(sm_parser *ps, int64_t *start, int64_t *stop, int64_t *step);
/* The array value of an item: a value, or a scalar literal made a const op. */
int sm_ps_value(sm_parser *ps, const sm_item *it, int *id);
/* A static int (ints and bools), failing with what names the use. */
int sm_ps_static_int(sm_parser *ps, const sm_item *it, const char *what, int64_t *out);

/* x[...] after '[' on an array item (replaced by the result). */
int sm_ps_index_value(sm_parser *ps, const sm_tok *at, sm_item *x);
/* Tuple or list body after open up to close (a list may be a
 * comprehension); `(x)` is x. */
int sm_ps_seq(sm_parser *ps, const sm_tok *open, const char *close, int is_list, sm_item *out);

/* One call argument: keyword (NULL for positional) and value. */
typedef struct {
    const char *kw;
    sm_item v;
    const sm_tok *at;
} sm_arg;

/* Emits op kind called at `at` with args bound by its signature; the
 * result is an SM_IT_VALUE item. */
int sm_ps_call_op(sm_parser *ps, sm_op_kind kind, const sm_tok *at, const sm_arg *args, int nargs,
                  sm_item *out);
/* Emits op kind over operand values with attrs, at `at`. */
int sm_ps_emit(sm_parser *ps, sm_op_kind kind, const int *operands, int n, const sm_ir_attrs *attrs,
               const sm_tok *at, sm_item *out);
/* Builtins beyond the op table (sm_ir_func.c): P / PartitionSpec,
 * NamedSharding, square, auto_axes, and the functions of the file. */
int sm_ps_builtin(sm_parser *ps, const char *name);
int sm_ps_call_builtin(sm_parser *ps, const sm_item *fn, const sm_tok *at, const sm_arg *args,
                       int nargs, sm_item *out);
/* The function of the file called name, or NULL; inside that function's
 * own body (the text form has no recursion) its name means the op or
 * builtin of that name where there is one (`jit sum(x): return sum(x)`). */
const sm_fn *sm_ps_find_fn(sm_parser *ps, const char *name);
/* Inlines a call of f (sm_ir_parse.c): binds its parameters to args, reads
 * its body again and gives what it returns (a value or a tuple). */
int sm_ps_call_fn(sm_parser *ps, const sm_fn *f, const sm_tok *at, const sm_arg *args, int nargs,
                  sm_item *out);

/* Parses P(...) / PartitionSpec(...) at the current token. */
int sm_ps_pspec(sm_parser *ps, sm_pspec *out);
/* The words of a spec written as JAX prints it: the number of tokens of
 * UNCONSTRAINED or P.UNCONSTRAINED at the current token (0 if none); and
 * after unreduced_kind=, the kind's name token (UnreducedKind. skipped). */
int sm_ps_at_unconstrained(sm_parser *ps);
const sm_tok *sm_ps_kind_word(sm_parser *ps);
/* The string item sm_ps_args makes of a P(...) argument UNCONSTRAINED,
 * which sm_ps_spec_of_args turns into that entry. */
#define SM_PS_UNCONSTRAINED "P.UNCONSTRAINED"

#endif
