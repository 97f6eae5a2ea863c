/* sm_ir_expr: expressions of the text form. Static Python values fold;
 * array values emit ops. Precedence as in Python: comparison < + - <
 * * / // % @ < unary - < ** < call, index, attribute. */
#include "sm_ir_infer.h"
#include "sm_ir_parse.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

static const char *sm_it_desc(const sm_item *it)
{
    static const char *const names[] = {"None",       "an int",         "a float",  "a bool",
                                        "a string",   "a tuple",        "an array", "a dtype",
                                        "a function", "a PartitionSpec"};
    return it->kind == SM_IT_TUPLE && it->is_list ? "a list" : names[it->kind];
}

static int sm_it_is_num(const sm_item *it)
{
    return it->kind == SM_IT_INT || it->kind == SM_IT_FLOAT || it->kind == SM_IT_BOOL;
}

int sm_ps_static_int(sm_parser *ps, const sm_item *it, const char *what, int64_t *out)
{
    if (it->kind == SM_IT_INT || it->kind == SM_IT_BOOL) {
        *out = it->i;
        return 0;
    }
    return sm_ps_fail(ps, it->at, SM_EINVAL, "%s must be a static integer, got %s", what,
                      sm_it_desc(it));
}

int sm_ps_emit(sm_parser *ps, sm_op_kind kind, const int *operands, int n, const sm_ir_attrs *attrs,
               const sm_tok *at, sm_item *out)
{
    int id;
    if (ps->p->nops >= SM_PS_MAX_OPS)
        return sm_ps_fail(ps, at, SM_ERESOURCE, "the program unrolls to more than %d ops",
                          SM_PS_MAX_OPS);
    sm_err e = sm_program_add_op_jit(ps->p, kind, operands, n, attrs, at->line, at->col, ps->manual,
                                     ps->manual_axes, ps->outer_axes, ps->auto_mask,
                                     ps->explicit_mask, &id, ps->err, ps->errlen);
    if (e)
        return sm_ps_fail_at(ps, at, e);
    *out = (sm_item){.kind = SM_IT_VALUE, .i = id, .at = at};
    return 0;
}

int sm_ps_value(sm_parser *ps, const sm_item *it, int *id)
{
    if (it->kind == SM_IT_VALUE) {
        *id = (int)it->i;
        return 0;
    }
    if (!sm_it_is_num(it))
        return sm_ps_fail(ps, it->at, SM_EINVAL, "expected an array or a number, got %s",
                          sm_it_desc(it));
    sm_ir_attrs a = {0};
    if (it->kind == SM_IT_FLOAT) {
        a.value_is_float = 1;
        a.f = it->f;
    } else {
        a.i = it->i;
    }
    if (it->kind == SM_IT_BOOL) {
        a.has_dtype = 1;
        a.dtype = SM_BOOL;
    }
    sm_item v;
    if (sm_ps_emit(ps, SM_OP_CONST, NULL, 0, &a, it->at, &v))
        return -1;
    *id = (int)v.i;
    return 0;
}

static double sm_it_f(const sm_item *it)
{
    return it->kind == SM_IT_FLOAT ? it->f : (double)it->i;
}

static int64_t sm_floordiv(int64_t a, int64_t b)
{
    int64_t q = a / b;
    return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

/* Folds a binary operator over two static numbers (Python semantics). */
static int sm_ps_fold(sm_parser *ps, const sm_tok *op, const sm_item *a, const sm_item *b,
                      sm_item *out)
{
    int fl = a->kind == SM_IT_FLOAT || b->kind == SM_IT_FLOAT;
    double x = sm_it_f(a), y = sm_it_f(b);
    int64_t i = a->i, j = b->i;
    *out = (sm_item){.kind = fl ? SM_IT_FLOAT : SM_IT_INT, .at = op};
    int cmp = -2;
    int ovf = 0;
    if (sm_tok_is(op, "&") || sm_tok_is(op, "|") || sm_tok_is(op, "^")) {
        if (fl)
            return sm_ps_fail(ps, op, SM_EINVAL, "'%.*s' needs integers or bools, got a float",
                              op->len, op->text);
        out->i = sm_tok_is(op, "&") ? i & j : sm_tok_is(op, "|") ? i | j : i ^ j;
        if (a->kind == SM_IT_BOOL && b->kind == SM_IT_BOOL)
            out->kind = SM_IT_BOOL;
        return 0;
    }
    if (sm_tok_is(op, "+")) {
        out->f = x + y, ovf = !fl && __builtin_add_overflow(i, j, &out->i);
    } else if (sm_tok_is(op, "-")) {
        out->f = x - y, ovf = !fl && __builtin_sub_overflow(i, j, &out->i);
    } else if (sm_tok_is(op, "*")) {
        out->f = x * y, ovf = !fl && __builtin_mul_overflow(i, j, &out->i);
    } else if (sm_tok_is(op, "/")) {
        if (y == 0)
            return sm_ps_fail(ps, op, SM_EINVAL, "division by zero");
        out->kind = SM_IT_FLOAT;
        out->f = x / y;
    } else if (sm_tok_is(op, "//") || sm_tok_is(op, "%")) {
        if (y == 0)
            return sm_ps_fail(ps, op, SM_EINVAL, "division by zero");
        int div = sm_tok_is(op, "//");
        if (fl)
            out->f = div ? floor(x / y) : x - floor(x / y) * y;
        else if (j == -1)
            out->i = div ? (ovf = i == INT64_MIN, -(i + (i == INT64_MIN))) : 0;
        else
            out->i = div ? sm_floordiv(i, j) : i - sm_floordiv(i, j) * j;
    } else if (sm_tok_is(op, "**")) {
        if (!fl && j >= 0) {
            int64_t r = 1, base = i;
            for (int64_t e = j; e > 0 && !ovf; e >>= 1) {
                if (e & 1)
                    ovf = __builtin_mul_overflow(r, base, &r);
                if (e > 1 && !ovf)
                    ovf = __builtin_mul_overflow(base, base, &base);
            }
            out->i = r;
        } else {
            out->kind = SM_IT_FLOAT;
            out->f = pow(x, y);
        }
    } else if (sm_tok_is(op, "==")) {
        cmp = fl ? x == y : i == j;
    } else if (sm_tok_is(op, "!=")) {
        cmp = fl ? x != y : i != j;
    } else if (sm_tok_is(op, "<")) {
        cmp = fl ? x < y : i < j;
    } else if (sm_tok_is(op, "<=")) {
        cmp = fl ? x <= y : i <= j;
    } else if (sm_tok_is(op, ">")) {
        cmp = fl ? x > y : i > j;
    } else if (sm_tok_is(op, ">=")) {
        cmp = fl ? x >= y : i >= j;
    } else {
        return sm_ps_fail(ps, op, SM_EINVAL, "'%.*s' needs an array operand", op->len, op->text);
    }
    if (cmp != -2) {
        out->kind = SM_IT_BOOL;
        out->i = cmp;
    }
    if (ovf || (out->kind == SM_IT_INT && (out->i > SM_PS_MAX_INT || out->i < -SM_PS_MAX_INT)))
        return sm_ps_fail(ps, op, SM_EINVAL, "integer overflow in a static expression");
    return 0;
}

static int sm_ps_binop(sm_parser *ps, const sm_tok *op, const sm_item *a, const sm_item *b,
                       sm_item *out)
{
    if (sm_it_is_num(a) && sm_it_is_num(b))
        return sm_ps_fold(ps, op, a, b, out);
    static const struct {
        const char *tok;
        sm_op_kind kind;
    } map[] = {{"+", SM_OP_ADD},           {"-", SM_OP_SUBTRACT},
               {"*", SM_OP_MULTIPLY},      {"/", SM_OP_DIVIDE},
               {"%", SM_OP_MOD},           {"@", SM_OP_MATMUL},
               {"//", SM_OP_FLOOR_DIVIDE}, {"**", SM_OP_POWER},
               {"==", SM_OP_EQUAL},        {"!=", SM_OP_NOT_EQUAL},
               {"<", SM_OP_LESS},          {"<=", SM_OP_LESS_EQUAL},
               {">", SM_OP_GREATER},       {">=", SM_OP_GREATER_EQUAL},
               {"&", SM_OP_BITWISE_AND},   {"|", SM_OP_BITWISE_OR},
               {"^", SM_OP_BITWISE_XOR}};
    for (size_t k = 0; k < sizeof map / sizeof map[0]; k++) {
        if (!sm_tok_is(op, map[k].tok))
            continue;
        sm_arg args[2] = {{NULL, *a, a->at}, {NULL, *b, b->at}};
        return sm_ps_call_op(ps, map[k].kind, op, args, 2, out);
    }
    return sm_ps_fail(ps, op, SM_EINVAL, "'%.*s' needs static numbers", op->len, op->text);
}

static int sm_ps_unary(sm_parser *ps, sm_item *out);

/* Call arguments after '(' up to ')'. */
static int sm_ps_args(sm_parser *ps, sm_arg **args, int *nargs)
{
    int cap = 0, n = 0;
    sm_arg *a = sm_ps_room(ps, NULL, sizeof *a, 0, &cap);
    if (!a)
        return sm_ps_fail(ps, sm_ps_peek(ps), SM_ENOMEM, "out of memory");
    while (!sm_ps_accept(ps, ")")) {
        if (!(a = sm_ps_room(ps, a, sizeof *a, n, &cap)))
            return sm_ps_fail(ps, sm_ps_peek(ps), SM_ENOMEM, "out of memory");
        const sm_tok *t = sm_ps_peek(ps);
        a[n].kw = NULL;
        a[n].at = t;
        if (t->kind == SM_TOK_NAME && sm_tok_is(&ps->t[ps->pos + 1], "=")) {
            a[n].kw = sm_ps_text(ps, t);
            ps->pos += 2;
        } else if (n > 0 && a[n - 1].kw) {
            return sm_ps_fail(ps, t, SM_EFORMAT, "positional argument after a keyword argument");
        }
        /* a spec's words as JAX prints them, taken as strings (sm_ps_spec_of_args):
         * P(UNCONSTRAINED, 'y', ..., unreduced_kind=max) */
        const sm_tok *w = NULL;
        const char *word = NULL;
        int unc = a[n].kw ? 0 : sm_ps_at_unconstrained(ps);
        if (unc) {
            w = sm_ps_peek(ps);
            word = SM_PS_UNCONSTRAINED;
            ps->pos += unc;
        } else if (a[n].kw && !strcmp(a[n].kw, "unreduced_kind") &&
                   sm_ps_peek(ps)->kind == SM_TOK_NAME) {
            w = sm_ps_kind_word(ps);
            word = sm_ps_text(ps, w);
            ps->pos++;
        }
        if (word) {
            memset(&a[n].v, 0, sizeof a[n].v);
            a[n].v.kind = SM_IT_STR;
            a[n].v.s = word;
            a[n].v.at = w;
        } else if (sm_ps_expr(ps, &a[n].v)) {
            return -1;
        }
        n++;
        if (!sm_tok_is(sm_ps_peek(ps), ")") && sm_ps_expect(ps, ",", "between arguments"))
            return -1;
    }
    *args = a;
    *nargs = n;
    return 0;
}

int sm_ps_range(sm_parser *ps, int64_t *start, int64_t *stop, int64_t *step)
{
    const sm_tok *at = sm_ps_peek(ps);
    sm_arg *args;
    int n;
    if (sm_ps_expect(ps, "(", "after range") || sm_ps_args(ps, &args, &n))
        return -1;
    int64_t v[3] = {0, 0, 1};
    if (n < 1 || n > 3 || args[0].kw)
        return sm_ps_fail(ps, at, SM_EINVAL, "range takes 1 to 3 positional integers");
    for (int k = 0; k < n; k++)
        if (sm_ps_static_int(ps, &args[k].v, "a range bound", &v[n == 1 ? 1 : k]))
            return -1;
    if (v[2] == 0)
        return sm_ps_fail(ps, at, SM_EINVAL, "range step must not be zero");
    for (int k = 0; k < 3; k++)
        if (v[k] > SM_PS_MAX_INT || v[k] < -SM_PS_MAX_INT)
            return sm_ps_fail(ps, at, SM_EINVAL, "range bound %lld is too large", (long long)v[k]);
    *start = v[0], *stop = v[1], *step = v[2];
    return 0;
}

static int sm_ps_call(sm_parser *ps, const sm_item *fn, const sm_item *self, sm_item *out);

/* Calls, indexing and attributes after an atom. */
static int sm_ps_postfix(sm_parser *ps, sm_item *it)
{
    for (;;) {
        const sm_tok *t = sm_ps_peek(ps);
        if (sm_tok_is(t, "(")) {
            if (it->kind != SM_IT_FUNC)
                return sm_ps_fail(ps, t, SM_EINVAL, "%s is not callable", sm_it_desc(it));
            ps->pos++;
            if (sm_ps_call(ps, it, NULL, it))
                return -1;
        } else if (sm_tok_is(t, "[")) {
            ps->pos++;
            if (it->kind == SM_IT_VALUE) {
                if (sm_ps_index_value(ps, t, it))
                    return -1;
                continue;
            }
            sm_item ix;
            int64_t i;
            if (it->kind != SM_IT_TUPLE)
                return sm_ps_fail(ps, t, SM_EINVAL, "%s cannot be indexed", sm_it_desc(it));
            if (sm_ps_expr(ps, &ix) || sm_ps_static_int(ps, &ix, "a tuple index", &i) ||
                sm_ps_expect(ps, "]", "to close the index"))
                return -1;
            if (i < -it->n || i >= it->n)
                return sm_ps_fail(ps, t, SM_EINVAL, "tuple index %lld out of range (length %d)",
                                  (long long)i, it->n);
            *it = it->elems[i < 0 ? i + it->n : i];
        } else if (sm_tok_is(t, ".")) {
            ps->pos++;
            const sm_tok *nt = sm_ps_peek(ps);
            if (nt->kind != SM_TOK_NAME || it->kind != SM_IT_VALUE)
                return sm_ps_fail(ps, nt, SM_EFORMAT, "expected an attribute of an array");
            ps->pos++;
            const sm_ir_value *v = &ps->p->values[it->i];
            if (sm_tok_is(nt, "shape")) {
                sm_item tup = {.kind = SM_IT_TUPLE, .n = v->shape.rank, .at = nt};
                tup.elems = sm_arena_alloc(ps->scratch, sizeof(sm_item) * SM_MAX_RANK);
                for (int d = 0; d < v->shape.rank; d++)
                    tup.elems[d] = (sm_item){.kind = SM_IT_INT, .i = v->shape.dims[d], .at = nt};
                *it = tup;
            } else if (sm_tok_is(nt, "ndim")) {
                *it = (sm_item){.kind = SM_IT_INT, .i = v->shape.rank, .at = nt};
            } else if (sm_tok_is(nt, "dtype")) {
                *it = (sm_item){.kind = SM_IT_DTYPE, .i = v->dtype, .at = nt};
            } else if (sm_tok_is(nt, "T")) {
                int id = (int)it->i;
                if (sm_ps_emit(ps, SM_OP_TRANSPOSE, &id, 1, NULL, nt, it))
                    return -1;
            } else {
                sm_item self = *it, fn = {.kind = SM_IT_FUNC, .s = sm_ps_text(ps, nt), .at = nt};
                if (sm_ps_expect(ps, "(", "after a method name") || sm_ps_call(ps, &fn, &self, it))
                    return -1;
            }
        } else {
            return 0;
        }
    }
}

static int sm_ps_is_module(const sm_tok *t)
{
    return sm_tok_is(t, "jnp") || sm_tok_is(t, "np") || sm_tok_is(t, "lax") ||
           sm_tok_is(t, "jax") || sm_tok_is(t, "numpy") || sm_tok_is(t, "sharding");
}

static int sm_ps_atom(sm_parser *ps, sm_item *out)
{
    const sm_tok *t = sm_ps_next(ps);
    *out = (sm_item){.at = t};
    switch (t->kind) {
    case SM_TOK_INT:
        out->kind = SM_IT_INT;
        out->i = t->ival;
        return 0;
    case SM_TOK_FLOAT:
        out->kind = SM_IT_FLOAT;
        out->f = t->fval;
        return 0;
    case SM_TOK_STRING:
        out->kind = SM_IT_STR;
        out->s = sm_ps_text(ps, t);
        return 0;
    case SM_TOK_NAME:
        break;
    default:
        if (sm_tok_is(t, "("))
            return sm_ps_seq(ps, t, ")", 0, out);
        if (sm_tok_is(t, "["))
            return sm_ps_seq(ps, t, "]", 1, out);
        if (sm_tok_is(t, "{")) /* a set of axis names: P(..., unreduced={'y'}) */
            return sm_ps_seq(ps, t, "}", 1, out);
        return sm_ps_fail(ps, t, SM_EFORMAT, "expected an expression, got '%.*s'", t->len, t->text);
    }
    sm_item *bound = sm_ps_lookup(ps, t->text, t->len);
    sm_op_kind k;
    if (bound && sm_tok_is(sm_ps_peek(ps), "(") && bound->kind != SM_IT_FUNC &&
        sm_op_lookup(sm_ps_text(ps, t), &k) == 0)
        bound = NULL; /* a value named like an op does not hide the op in calls */
    if (bound) {
        *out = *bound;
        out->at = t;
        return 0;
    }
    while (sm_ps_is_module(t) && sm_tok_is(sm_ps_peek(ps), ".") &&
           ps->t[ps->pos + 1].kind == SM_TOK_NAME) { /* jnp.dot, jax.lax.psum */
        ps->pos++;
        t = sm_ps_next(ps);
    }
    sm_dtype dt;
    char *name = sm_ps_text(ps, t);
    if (strcmp(name, "None") == 0) {
        out->kind = SM_IT_NONE;
    } else if (strcmp(name, "inf") == 0 || strcmp(name, "nan") == 0) { /* jnp.inf, jnp.nan */
        out->kind = SM_IT_FLOAT;
        out->f = name[0] == 'i' ? HUGE_VAL : NAN;
    } else if (strcmp(name, "True") == 0 || strcmp(name, "False") == 0) {
        out->kind = SM_IT_BOOL;
        out->i = name[0] == 'T';
    } else if (sm_dtype_parse(name, &dt) == 0) {
        out->kind = SM_IT_DTYPE;
        out->i = dt;
    } else if (sm_op_lookup(name, &k) == 0 || strcmp(name, "range") == 0 ||
               sm_ps_builtin(ps, name)) {
        out->kind = SM_IT_FUNC;
        out->s = name;
    } else if (sm_tok_is(sm_ps_peek(ps), "(")) {
        return sm_ps_fail(ps, t, SM_EINVAL, "unknown op '%s'", name);
    } else {
        return sm_ps_fail(ps, t, SM_EINVAL, "name '%s' is not defined", name);
    }
    out->at = t;
    return 0;
}

/* fn one level deeper in the expression (at: the token to blame when that
 * is too deep). */
static int sm_ps_nested(sm_parser *ps, const sm_tok *at, int (*fn)(sm_parser *, sm_item *),
                        sm_item *out)
{
    if (ps->depth >= SM_PS_MAX_DEPTH)
        return sm_ps_fail(ps, at, SM_EINVAL, "expression nested too deeply");
    ps->depth++;
    int r = fn(ps, out);
    ps->depth--;
    return r;
}

static int sm_ps_power(sm_parser *ps, sm_item *out)
{
    if (sm_ps_atom(ps, out) || sm_ps_postfix(ps, out))
        return -1;
    const sm_tok *op = sm_ps_peek(ps);
    if (!sm_tok_is(op, "**"))
        return 0;
    ps->pos++;
    sm_item r, a = *out;
    if (sm_ps_nested(ps, op, sm_ps_unary, &r))
        return -1;
    return sm_ps_binop(ps, op, &a, &r, out);
}

static int sm_ps_unary(sm_parser *ps, sm_item *out)
{
    const sm_tok *op = sm_ps_peek(ps);
    if (sm_tok_is(op, "+")) {
        ps->pos++;
        return sm_ps_nested(ps, op, sm_ps_unary, out);
    }
    if (!sm_tok_is(op, "-") && !sm_tok_is(op, "~"))
        return sm_ps_power(ps, out);
    ps->pos++;
    sm_item x;
    if (sm_ps_nested(ps, op, sm_ps_unary, &x))
        return -1;
    if (sm_tok_is(op, "~")) { /* Python's ~ of an int or bool is -x - 1 */
        if (x.kind == SM_IT_INT || x.kind == SM_IT_BOOL) {
            *out = (sm_item){.kind = SM_IT_INT, .i = ~x.i, .at = op};
            return 0;
        }
        if (x.kind == SM_IT_FLOAT)
            return sm_ps_fail(ps, op, SM_EINVAL, "'~' needs integers or bools, got a float");
        sm_arg a = {NULL, x, x.at};
        return sm_ps_call_op(ps, SM_OP_BITWISE_NOT, op, &a, 1, out);
    }
    if (x.kind == SM_IT_INT || x.kind == SM_IT_BOOL) {
        if (x.i == INT64_MIN)
            return sm_ps_fail(ps, op, SM_EINVAL, "integer overflow in a static expression");
        *out = (sm_item){.kind = SM_IT_INT, .i = -x.i, .at = op};
        return 0;
    }
    if (x.kind == SM_IT_FLOAT) {
        *out = (sm_item){.kind = SM_IT_FLOAT, .f = -x.f, .at = op};
        return 0;
    }
    sm_arg a = {NULL, x, x.at};
    return sm_ps_call_op(ps, SM_OP_NEGATIVE, op, &a, 1, out);
}

static int sm_ps_term(sm_parser *ps, sm_item *out)
{
    if (sm_ps_unary(ps, out))
        return -1;
    for (;;) {
        const sm_tok *op = sm_ps_peek(ps);
        if (!sm_tok_is(op, "*") && !sm_tok_is(op, "/") && !sm_tok_is(op, "//") &&
            !sm_tok_is(op, "%") && !sm_tok_is(op, "@"))
            return 0;
        ps->pos++;
        sm_item r, a = *out;
        if (sm_ps_unary(ps, &r) || sm_ps_binop(ps, op, &a, &r, out))
            return -1;
    }
}

static int sm_ps_arith(sm_parser *ps, sm_item *out)
{
    if (sm_ps_term(ps, out))
        return -1;
    for (;;) {
        const sm_tok *op = sm_ps_peek(ps);
        if (!sm_tok_is(op, "+") && !sm_tok_is(op, "-"))
            return 0;
        ps->pos++;
        sm_item r, a = *out;
        if (sm_ps_term(ps, &r) || sm_ps_binop(ps, op, &a, &r, out))
            return -1;
    }
}

/* Python's bitwise operators, above the comparisons: | over ^ over & over
 * the arithmetic. */
static int sm_ps_bits(sm_parser *ps, sm_item *out, int level)
{
    static const char *const ops[] = {"|", "^", "&"};
    int (*next)(sm_parser *, sm_item *, int) = level < 2 ? sm_ps_bits : NULL;
    if (next ? next(ps, out, level + 1) : sm_ps_arith(ps, out))
        return -1;
    for (;;) {
        const sm_tok *op = sm_ps_peek(ps);
        if (!sm_tok_is(op, ops[level]))
            return 0;
        ps->pos++;
        sm_item r, a = *out;
        if ((next ? next(ps, &r, level + 1) : sm_ps_arith(ps, &r)) ||
            sm_ps_binop(ps, op, &a, &r, out))
            return -1;
    }
}

static int sm_ps_expr_inner(sm_parser *ps, sm_item *out);

int sm_ps_expr(sm_parser *ps, sm_item *out)
{
    return sm_ps_nested(ps, sm_ps_peek(ps), sm_ps_expr_inner, out);
}

static int sm_ps_expr_inner(sm_parser *ps, sm_item *out)
{
    if (sm_ps_bits(ps, out, 0))
        return -1;
    const sm_tok *op = sm_ps_peek(ps);
    static const char *const cmps[] = {"==", "!=", "<", "<=", ">", ">="};
    for (int k = 0; k < 6; k++) {
        if (!sm_tok_is(op, cmps[k]))
            continue;
        ps->pos++;
        sm_item r, a = *out;
        return sm_ps_bits(ps, &r, 0) || sm_ps_binop(ps, op, &a, &r, out);
    }
    return 0;
}

int sm_ps_expr_list(sm_parser *ps, sm_item *out)
{
    const sm_tok *at = sm_ps_peek(ps);
    if (sm_ps_expr(ps, out))
        return -1;
    if (!sm_tok_is(sm_ps_peek(ps), ","))
        return 0;
    int cap = 0, n = 1;
    sm_item *el = sm_ps_room(ps, NULL, sizeof *el, 0, &cap);
    if (!el)
        return sm_ps_fail(ps, at, SM_ENOMEM, "out of memory");
    el[0] = *out;
    while (sm_ps_accept(ps, ",")) {
        if (sm_ps_peek(ps)->kind == SM_TOK_NEWLINE)
            break;
        if (!(el = sm_ps_room(ps, el, sizeof *el, n, &cap)))
            return sm_ps_fail(ps, at, SM_ENOMEM, "out of memory");
        if (sm_ps_expr(ps, &el[n++]))
            return -1;
    }
    *out = (sm_item){.kind = SM_IT_TUPLE, .n = n, .elems = el, .at = at};
    return 0;
}

/* A call of fn (op or builtin); self is the receiver of a method call. */
static int sm_ps_call(sm_parser *ps, const sm_item *fn, const sm_item *self, sm_item *out)
{
    const sm_tok *at = fn->at;
    sm_arg *args, *all;
    int n;
    if (sm_ps_args(ps, &args, &n))
        return -1;
    if (self) { /* x.op(args) is op(x, args); x.reshape(2, 3) packs the shape */
        all = sm_arena_alloc(ps->scratch, sizeof *all * (size_t)(n + 1));
        all[0] = (sm_arg){NULL, *self, self->at};
        memcpy(all + 1, args, sizeof *args * (size_t)n);
        args = all;
        n++;
        int npos = 0;
        while (npos < n && !args[npos].kw)
            npos++;
        if ((strcmp(fn->s, "reshape") == 0 || strcmp(fn->s, "transpose") == 0) && npos > 2) {
            sm_item tup = {.kind = SM_IT_TUPLE, .n = npos - 1, .at = args[1].at};
            tup.elems = sm_arena_alloc(ps->scratch, sizeof(sm_item) * (size_t)npos);
            for (int k = 1; k < npos; k++)
                tup.elems[k - 1] = args[k].v;
            args[1].v = tup;
            memmove(args + 2, args + npos, sizeof *args * (size_t)(n - npos));
            n -= npos - 2;
        }
    }
    sm_op_kind kind;
    if (strcmp(fn->s, "range") == 0)
        return sm_ps_fail(ps, at, SM_EINVAL, "range(...) is only allowed in 'for' loops");
    if (sm_ps_builtin(ps, fn->s) || (fn->kind == SM_IT_FUNC && fn->mode))
        return sm_ps_call_builtin(ps, fn, at, args, n, out);
    if (sm_op_lookup(fn->s, &kind))
        return sm_ps_fail(ps, at, SM_EINVAL, "unknown op '%s'", fn->s);
    /* Python-level folds JAX does too: axis_size and psum of a static number. */
    if ((kind == SM_OP_AXIS_SIZE && n >= 1) ||
        (kind == SM_OP_PSUM && n == 2 && sm_it_is_num(&args[0].v) && !args[1].kw)) {
        const sm_item *ax = &args[kind == SM_OP_PSUM ? 1 : 0].v;
        int64_t size = 1;
        int nax = ax->kind == SM_IT_TUPLE ? ax->n : 1;
        for (int k = 0; k < nax; k++) {
            const sm_item *a = ax->kind == SM_IT_TUPLE ? &ax->elems[k] : ax;
            int m = a->kind == SM_IT_STR ? sm_mesh_axis(&ps->p->mesh, a->s) : -1;
            if (m < 0)
                return sm_ps_fail(
                    ps, a->at, SM_EINVAL, "%s: unknown axis name %s%s%s: the mesh has no such axis",
                    sm_op_name(kind), a->kind == SM_IT_STR ? "'" : "",
                    a->kind == SM_IT_STR ? a->s : sm_it_desc(a), a->kind == SM_IT_STR ? "'" : "");
            uint32_t bound = ps->p->kind == SM_PROG_JIT ? (ps->manual ? ps->manual_axes : 0)
                                                        : ps->p->manual_axes;
            if (bound && !(bound & (1u << m))) {
                char set[300];
                return sm_ps_fail(ps, a->at, SM_EINVAL,
                                  "%s: unbound axis name: %s (the shard_map's axis_names are "
                                  "%s: only those axes are Manual in its body)",
                                  sm_op_name(kind), a->s,
                                  sm_ir_axes_set_str(ps->p, bound, set, sizeof set));
            }
            size *= ps->p->mesh.sizes[m];
        }
        if (kind == SM_OP_AXIS_SIZE) {
            *out = (sm_item){.kind = SM_IT_INT, .i = size, .at = at};
            return 0;
        }
        sm_item nv = {.kind = SM_IT_INT, .i = size, .at = at};
        sm_tok mul = {.kind = SM_TOK_OP, .text = "*", .len = 1, .line = at->line, .col = at->col};
        if (sm_ps_fold(ps, &mul, &args[0].v, &nv, out))
            return -1;
        out->at = at;
        return 0;
    }
    return sm_ps_call_op(ps, kind, at, args, n, out);
}
