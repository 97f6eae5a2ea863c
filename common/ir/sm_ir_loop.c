/* sm_ir_loop: while loops in programs — the type and sharding rules of the
 * four loop ops, and the check of a loop's shape in the op list (sm_ir.h).
 *
 *   c_1 .. c_m = while_carry(init_k)    the values the loop carries
 *   t = while_test(c_j)                 a bool scalar carry: false ends the loop
 *   ... the body ...
 *   while_next(c_k, next_k), k = 1..m   each carry's value for the next test
 *   r_k = while_end(c_k), k = 1..m      each carry's value after the loop
 *
 * A carry keeps one type for the whole loop: its first value's dtype, shape
 * and sharding (jit) or varying axes (shard_map), as JAX's while_loop asks
 * of body_fun's output. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sm_ir_infer.h"

static sm_err sm_lp_type_fail(const sm_program *p, const sm_ir_value *c, const sm_ir_value *n,
                              const char *why, char *err, size_t errlen)
{
    char a[300], b[300];
    return sm_fail(err, errlen, SM_EINVAL,
                   "while loop: the carried value%s%s%s has type %s, but the body gives it the "
                   "next value of type %s: %s",
                   c->name ? " '" : "", c->name ? c->name : "", c->name ? "'" : "",
                   sm_program_value_type(p, (int)(c - p->values), a, sizeof a),
                   sm_program_value_type(p, (int)(n - p->values), b, sizeof b), why);
}

sm_err sm_ir_infer_loop(const sm_program *p, const sm_ir_op *op, const sm_ir_value *const *in,
                        sm_ir_value *out, char *err, size_t errlen)
{
    const sm_ir_value *x = in[0];
    int carry_in = x->def >= 0 && x->def < p->nops && p->ops[x->def].kind == SM_OP_WHILE_CARRY;
    if (op->kind != SM_OP_WHILE_CARRY && !carry_in)
        return sm_fail(err, errlen, SM_EINVAL, "%s: operand 0 is not a while_carry value",
                       sm_op_name(op->kind));
    sm_ir_set(out, x->dtype, &x->shape);
    out->weak = x->weak;
    if (op->kind == SM_OP_WHILE_TEST && (x->dtype != SM_BOOL || x->shape.rank != 0)) {
        char ty[300];
        return sm_fail(err, errlen, SM_EINVAL,
                       "while loop: the condition must be a boolean scalar, but got %s",
                       sm_program_value_type(p, (int)(x - p->values), ty, sizeof ty));
    }
    if (op->kind != SM_OP_WHILE_NEXT)
        return SM_OK;
    const sm_ir_value *n = in[1];
    if (n->dtype != x->dtype || !sm_shape_equal(&n->shape, &x->shape))
        return sm_lp_type_fail(p, x, n, "a loop-carried value keeps its dtype and shape", err,
                               errlen);
    if (!p->lowered && (n->unreduced != x->unreduced || n->reduced != x->reduced))
        return sm_lp_type_fail(p, x, n,
                               "a loop-carried value keeps its unreduced and reduced axes "
                               "(reshard the next value, or the first one)",
                               err, errlen);
    uint32_t extra = n->vma & ~x->vma;
    if (p->kind == SM_PROG_JIT && (!op->manual || op->manual_axes)) {
        /* the types' shardings (over Explicit axes; in a shard_map Manual over
         * some axes, over the others); Auto axes are the service's */
        uint32_t hidden = (p->auto_axes | op->auto_mask | op->manual_axes) & ~op->explicit_mask;
        sm_pspec a, b;
        sm_ir_layout_to_spec(p, &x->layout, x->shape.rank, hidden, &a);
        sm_ir_layout_to_spec(p, &n->layout, n->shape.rank, hidden, &b);
        if (!sm_pspec_equal(&a, &b))
            return sm_lp_type_fail(p, x, n,
                                   "a loop-carried value keeps its sharding (reshard the next "
                                   "value, or the first one)",
                                   err, errlen);
    }
    if ((p->kind != SM_PROG_JIT || op->manual) && extra && !p->lowered) {
        char why[400];
        size_t o = (size_t)snprintf(why, sizeof why,
                                    "the varying manual axes do not match. This might be fixed "
                                    "by applying pvary(..., (");
        for (int a = 0, c = 0; a < p->mesh.naxes; a++)
            if (extra & (1u << a))
                o += (size_t)snprintf(why + o, o < sizeof why ? sizeof why - o : 0, "%s'%s'",
                                      c++ ? ", " : "", p->mesh.names[a]);
        snprintf(why + o, o < sizeof why ? sizeof why - o : 0, "%s)) to the first value",
                 __builtin_popcount(extra) == 1 ? "," : "");
        return sm_lp_type_fail(p, x, n, why, err, errlen);
    }
    return SM_OK;
}

sm_err sm_ir_shard_loop(const sm_program *p, const sm_ir_op *op, const sm_ir_value *const *in,
                        sm_ir_value *out, sm_ir_shard_plan *plan, char *err, size_t errlen)
{
    /* a carry keeps its first value's layout: every operand comes as it */
    out->layout = in[0]->layout;
    plan->local_layout = in[0]->layout;
    for (int k = 0; k < op->noperands; k++)
        plan->in[k] = in[0]->layout;
    return SM_OK;
}

/* "file:line:col: " before a message of op k. */
static sm_err sm_lp_fail(const sm_program *p, int k, char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static sm_err sm_lp_fail(const sm_program *p, int k, char *err, size_t errlen, const char *fmt, ...)
{
    char msg[600], at[300] = "";
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    const sm_ir_op *op = k >= 0 && k < p->nops ? &p->ops[k] : NULL;
    if (op && op->line > 0)
        snprintf(at, sizeof at, "%s:%d:%d: ", p->filename ? p->filename : "<text>", op->line,
                 op->col);
    return sm_fail(err, errlen, SM_EINVAL, "%s%s", at, msg);
}

sm_err sm_ir_loops_check(const sm_program *p, sm_ir_loop *loops, int *n, char *err, size_t errlen)
{
    int nl = 0, cap = 0, top = -1; /* top: the innermost open loop */
    sm_ir_loop *l = loops;
    int *in = malloc(sizeof(int) * (size_t)(p->nops + 1)); /* innermost loop of each op */
    sm_err e = SM_OK;
    if (n)
        *n = 0;
    if (!in)
        return sm_fail(err, errlen, SM_ENOMEM, "out of memory checking loops");
    if (!l) { /* the caller wants the check only */
        cap = 16;
        if (!(l = malloc(sizeof *l * (size_t)cap))) {
            free(in);
            return sm_fail(err, errlen, SM_ENOMEM, "out of memory checking loops");
        }
    }
    int nexts = 0, ends = 0; /* of the loop on top, seen so far */
    for (int k = 0; k < p->nops && !e; k++) {
        const sm_ir_op *op = &p->ops[k];
        sm_ir_loop *t = top >= 0 ? &l[top] : NULL;
        if (t && t->test < 0 && op->kind != SM_OP_WHILE_CARRY && op->kind != SM_OP_WHILE_TEST) {
            e = sm_lp_fail(p, k, err, errlen,
                           "a loop's while_carry ops must be followed by its "
                           "while_test");
            break;
        }
        if (t && t->next >= 0 && nexts < t->m && op->kind != SM_OP_WHILE_NEXT) {
            e = sm_lp_fail(p, k, err, errlen,
                           "a loop has %d carries but %d while_next ops before this %s", t->m,
                           nexts, sm_op_name(op->kind));
            break;
        }
        if (t && nexts == t->m && op->kind != SM_OP_WHILE_END) {
            e = sm_lp_fail(p, k, err, errlen,
                           "a loop's while_next ops must be followed by its %d while_end ops",
                           t->m);
            break;
        }
        switch (op->kind) {
        case SM_OP_WHILE_CARRY:
            if (t && t->test < 0) { /* one more carry of the loop being opened */
                t->m++;
                break;
            }
            if (!loops && nl == cap) {
                sm_ir_loop *g = realloc(l, sizeof *l * (size_t)(cap *= 2));
                if (!g) {
                    e = sm_fail(err, errlen, SM_ENOMEM, "out of memory checking loops");
                    break;
                }
                l = g;
            }
            l[nl] =
                (sm_ir_loop){.carry = k, .test = -1, .next = -1, .end = -1, .m = 1, .parent = top};
            top = nl++;
            nexts = ends = 0;
            break;
        case SM_OP_WHILE_TEST: {
            int c = p->values[op->operands[0]].def;
            if (!t || t->test >= 0)
                e = sm_lp_fail(p, k, err, errlen, "while_test outside the carries of a loop");
            else if (c < t->carry || c >= t->carry + t->m)
                e = sm_lp_fail(p, k, err, errlen, "while_test must test one of its loop's carries");
            else
                t->test = k;
            break;
        }
        case SM_OP_WHILE_NEXT:
            if (!t || t->test < 0 || (t->next >= 0 && nexts == t->m)) {
                e = sm_lp_fail(p, k, err, errlen, "while_next outside a loop's body");
                break;
            }
            if (t->next < 0)
                t->next = k;
            if (p->values[op->operands[0]].def != t->carry + nexts)
                e = sm_lp_fail(p, k, err, errlen,
                               "while_next %d of a loop must give carry %d its next value", nexts,
                               nexts);
            nexts++;
            break;
        case SM_OP_WHILE_END:
            if (!t || nexts != t->m) {
                e = sm_lp_fail(p, k, err, errlen, "while_end outside a loop's end");
                break;
            }
            if (t->end < 0)
                t->end = k;
            if (p->values[op->operands[0]].def != t->carry + ends)
                e = sm_lp_fail(p, k, err, errlen, "while_end %d of a loop must end carry %d", ends,
                               ends);
            if (++ends == t->m) { /* closed: back to the enclosing loop's state */
                in[k] = t->parent;
                top = t->parent;
                nexts = ends = 0; /* the enclosing loop is inside its body */
                continue;
            }
            break;
        default:
            break;
        }
        /* the ends of a loop belong to its parent; everything else to top */
        in[k] = op->kind == SM_OP_WHILE_END && t ? t->parent : top;
    }
    if (!e && top >= 0)
        e = sm_lp_fail(p, l[top].carry, err, errlen, "a while loop is not closed");
    /* Scopes: a value from inside loop L is read only inside L, or by L's
     * while_end when it is one of L's carries. */
    for (int k = 0; k < p->nops && !e; k++) {
        const sm_ir_op *op = &p->ops[k];
        for (int i = 0; i < op->noperands && !e; i++) {
            int d = p->values[op->operands[i]].def;
            if (d < 0)
                continue;
            sm_op_kind dk = p->ops[d].kind;
            if (dk == SM_OP_WHILE_TEST || dk == SM_OP_WHILE_NEXT) {
                e = sm_lp_fail(p, k, err, errlen, "%s reads the result of a %s",
                               sm_op_name(op->kind), sm_op_name(dk));
                break;
            }
            int L = in[d]; /* a carry's: its own loop */
            if (L < 0)
                continue;
            if (dk == SM_OP_WHILE_CARRY && op->kind == SM_OP_WHILE_END && k >= l[L].end &&
                k < l[L].end + l[L].m)
                continue;
            int b = l[L].next + l[L].m;
            if (k < l[L].carry || k >= b)
                e = sm_lp_fail(p, k, err, errlen,
                               "%s reads a value defined inside a while loop, outside it",
                               sm_op_name(op->kind));
        }
    }
    for (int r = 0; r < p->nreturns && !e; r++) {
        int d = p->values[p->returns[r]].def;
        if (d >= 0 && in[d] >= 0)
            e = sm_fail(err, errlen, SM_EINVAL, "output %d is a value defined inside a while loop",
                        r);
    }
    if (!e && n)
        *n = nl;
    if (l != loops)
        free(l);
    free(in);
    return e;
}
