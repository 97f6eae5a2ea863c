/* sm_ir_call: binds a call's arguments to an op's signature (sm_ir_ops.h)
 * and fills operands and attributes, then emits the op. */
#include "sm_ir_infer.h"
#include "sm_ir_parse.h"

#include <stdio.h>
#include <string.h>

static const char *sm_sig_names(const sm_op_param *ps, int n, char *buf, size_t len)
{
    size_t o = 0;
    buf[0] = 0;
    for (int i = 0; i < n; i++)
        o += (size_t)snprintf(buf + o, len > o ? len - o : 0, "%s%s", i ? ", " : "", ps[i].name);
    return buf;
}

static int sm_ps_int_list(sm_parser *ps, const char *op, const sm_op_param *pm, const sm_item *it,
                          sm_ir_ints *out)
{
    const sm_item *el = it->kind == SM_IT_TUPLE ? it->elems : it;
    int n = it->kind == SM_IT_TUPLE ? it->n : 1;
    if (n > SM_IR_MAX_INTS)
        return sm_ps_fail(ps, it->at, SM_EINVAL, "%s: %s has more than %d entries", op, pm->name,
                          SM_IR_MAX_INTS);
    char what[720];
    snprintf(what, sizeof what, "%s: %s", op, pm->name);
    out->n = n;
    for (int k = 0; k < n; k++)
        if (sm_ps_static_int(ps, &el[k], what, &out->v[k]))
            return -1;
    return 0;
}

static int sm_ps_axes(sm_parser *ps, const char *op, const sm_item *it, sm_ir_attrs *a)
{
    const sm_item *el = it->kind == SM_IT_TUPLE ? it->elems : it;
    int n = it->kind == SM_IT_TUPLE ? it->n : 1;
    if (n > SM_MAX_AXES)
        return sm_ps_fail(ps, it->at, SM_EINVAL, "%s: more than %d axis names", op, SM_MAX_AXES);
    for (int k = 0; k < n; k++) {
        if (el[k].kind != SM_IT_STR)
            return sm_ps_fail(ps, el[k].at, SM_EINVAL,
                              "%s: axis_name must be a mesh axis name like 'i' or a tuple of them",
                              op);
        if (strlen(el[k].s) >= SM_AXIS_NAME_MAX)
            return sm_ps_fail(ps, el[k].at, SM_EINVAL, "%s: axis name '%s' is too long", op,
                              el[k].s);
        snprintf(a->axes[k], SM_AXIS_NAME_MAX, "%s", el[k].s);
    }
    a->naxes = n;
    return 0;
}

static int sm_ps_pad_width(sm_parser *ps, const sm_item *it, int rank, sm_ir_attrs *a)
{
    int64_t lo[SM_MAX_RANK], hi[SM_MAX_RANK];
    const char *w = "pad: pad_width";
    if (it->kind != SM_IT_TUPLE) { /* n: n before and after every dimension */
        if (sm_ps_static_int(ps, it, w, &lo[0]))
            return -1;
        for (int d = 0; d < rank; d++)
            lo[d] = hi[d] = lo[0];
    } else if (it->n == 2 && it->elems[0].kind != SM_IT_TUPLE) { /* (lo, hi) for all */
        if (sm_ps_static_int(ps, &it->elems[0], w, &lo[0]) ||
            sm_ps_static_int(ps, &it->elems[1], w, &hi[0]))
            return -1;
        for (int d = 0; d < rank; d++)
            lo[d] = lo[0], hi[d] = hi[0];
    } else { /* ((lo, hi), ...) one per dimension, or one for all */
        if (it->n != rank && it->n != 1)
            return sm_ps_fail(ps, it->at, SM_EINVAL,
                              "pad: pad_width has %d pairs for an array of rank %d", it->n, rank);
        for (int d = 0; d < rank; d++) {
            const sm_item *pr = &it->elems[it->n == 1 ? 0 : d];
            if (pr->kind != SM_IT_TUPLE || pr->n != 2)
                return sm_ps_fail(ps, pr->at, SM_EINVAL,
                                  "pad: pad_width entries must be (before, after) pairs");
            if (sm_ps_static_int(ps, &pr->elems[0], w, &lo[d]) ||
                sm_ps_static_int(ps, &pr->elems[1], w, &hi[d]))
                return -1;
        }
    }
    a->ints.n = 2 * rank;
    for (int d = 0; d < rank; d++)
        a->ints.v[2 * d] = lo[d], a->ints.v[2 * d + 1] = hi[d];
    a->has_ints = 1;
    return 0;
}

static int sm_ps_perm(sm_parser *ps, const sm_item *it, sm_ir_attrs *a)
{
    if (it->kind != SM_IT_TUPLE)
        return sm_ps_fail(ps, it->at, SM_EINVAL,
                          "ppermute: perm must be a list of (source, destination) pairs");
    int64_t(*pp)[2] = sm_arena_alloc(ps->scratch, sizeof *pp * (size_t)(it->n ? it->n : 1));
    if (!pp)
        return sm_ps_fail(ps, it->at, SM_ENOMEM, "out of memory");
    for (int k = 0; k < it->n; k++) {
        const sm_item *pr = &it->elems[k];
        if (pr->kind != SM_IT_TUPLE || pr->n != 2)
            return sm_ps_fail(ps, pr->at, SM_EINVAL,
                              "ppermute: perm entry %d must be a (source, destination) pair", k);
        if (sm_ps_static_int(ps, &pr->elems[0], "ppermute: a perm source", &pp[k][0]) ||
            sm_ps_static_int(ps, &pr->elems[1], "ppermute: a perm destination", &pp[k][1]))
            return -1;
    }
    a->nperm = it->n;
    a->perm = (const int64_t(*)[2])pp;
    return 0;
}

/* axis_index_groups=[[0, 1], [2, 3]]: flattened into ints, the group count
 * into ints2.v[0]; the type rule checks them against the group. */
static int sm_ps_groups(sm_parser *ps, const char *op, const sm_item *it, sm_ir_attrs *a)
{
    if (it->kind != SM_IT_TUPLE || it->n < 1)
        return sm_ps_fail(ps, it->at, SM_EINVAL,
                          "%s: axis_index_groups must be a list of lists of axis indices", op);
    a->ints.n = 0;
    for (int g = 0; g < it->n; g++) {
        const sm_item *grp = &it->elems[g];
        if (grp->kind != SM_IT_TUPLE)
            return sm_ps_fail(ps, grp->at, SM_EINVAL,
                              "%s: axis_index_groups entry %d must be a list of axis indices", op,
                              g);
        for (int k = 0; k < grp->n; k++) {
            if (a->ints.n == SM_IR_MAX_INTS)
                return sm_ps_fail(ps, grp->at, SM_EINVAL,
                                  "%s: axis_index_groups lists more than %d indices", op,
                                  SM_IR_MAX_INTS);
            if (sm_ps_static_int(ps, &grp->elems[k], "an axis index", &a->ints.v[a->ints.n]))
                return -1;
            a->ints.n++;
        }
    }
    a->has_ints = 1;
    a->has_ints2 = 1;
    a->ints2.n = 1;
    a->ints2.v[0] = it->n;
    return 0;
}

/* Appends the array values of items to operands. */
static int sm_ps_operands(sm_parser *ps, const char *op, const sm_item *el, int n, int *operands,
                          int *nops)
{
    for (int k = 0; k < n; k++) {
        if (*nops == SM_OP_MAXARGS)
            return sm_ps_fail(ps, el[k].at, SM_EINVAL, "%s: more than %d operands", op,
                              SM_OP_MAXARGS);
        if (sm_ps_value(ps, &el[k], &operands[*nops]))
            return -1;
        (*nops)++;
    }
    return 0;
}

/* Converts one bound argument into operands / attributes. */
static int sm_ps_convert(sm_parser *ps, const char *op, const sm_op_param *pm, const sm_item *it,
                         sm_ir_attrs *a, int *operands, int *nops)
{
    int64_t v;
    char what[720];
    snprintf(what, sizeof what, "%s: %s", op, pm->name);
    if (it->kind == SM_IT_NONE && pm->optional && pm->kind != 'v')
        return 0;
    switch (pm->kind) {
    case 'v':
        return sm_ps_operands(ps, op, it, 1, operands, nops);
    case 'V':
    case 'T':
    case 'D':
        if (it->kind == SM_IT_TUPLE)
            return sm_ps_operands(ps, op, it->elems, it->n, operands, nops);
        if (pm->kind == 'T')
            return sm_ps_fail(ps, it->at, SM_EINVAL, "%s must be a tuple of arrays, got %s", what,
                              it->kind == SM_IT_VALUE ? "one array" : "something else");
        return sm_ps_operands(ps, op, it, 1, operands, nops);
    case 'A':
        return sm_ps_axes(ps, op, it, a);
    case 't':
        if (it->kind == SM_IT_DTYPE) {
            a->dtype = (sm_dtype)it->i;
        } else if (it->kind != SM_IT_STR || sm_dtype_parse(it->s, &a->dtype)) {
            return sm_ps_fail(ps, it->at, SM_EINVAL,
                              "%s must be a dtype (f32 f64 i32 i64 bool), got %s", what,
                              it->kind == SM_IT_STR ? it->s : "something else");
        }
        a->has_dtype = 1;
        return 0;
    case 'i':
        if (sm_ps_static_int(ps, it, what, &v))
            return -1;
        if (pm->field == 'a')
            a->axis = v;
        else if (pm->field == 'b')
            a->axis2 = v;
        else {
            int k = pm->field - '0';
            a->ints.v[k] = v;
            if (a->ints.n < k + 1)
                a->ints.n = k + 1;
        }
        return 0;
    case 'l':
        if (pm->field == 'M') {
            a->has_ints2 = 1;
            return sm_ps_int_list(ps, op, pm, it, &a->ints2);
        }
        if (pm->field == 'N') {
            a->has_ints3 = 1;
            return sm_ps_int_list(ps, op, pm, it, &a->ints3);
        }
        a->has_ints = 1;
        return sm_ps_int_list(ps, op, pm, it, &a->ints);
    case 'b':
        if (sm_ps_static_int(ps, it, what, &v))
            return -1;
        if (pm->field == 't')
            a->tiled = v != 0;
        else if (pm->field == 'c')
            a->unchecked = v == 0;
        else
            a->keepdims = v != 0;
        return 0;
    case 'f':
        if (it->kind == SM_IT_FLOAT) {
            a->value_is_float = 1;
            a->f = it->f;
        } else if (it->kind == SM_IT_INT || it->kind == SM_IT_BOOL) {
            a->i = it->i;
            if (it->kind == SM_IT_BOOL && !a->has_dtype) {
                a->has_dtype = 1;
                a->dtype = SM_BOOL;
            }
        } else {
            return sm_ps_fail(ps, it->at, SM_EINVAL, "%s must be a static number", what);
        }
        return 0;
    case 'p':
        return sm_ps_perm(ps, it, a);
    case 'g':
        return sm_ps_groups(ps, op, it, a);
    case 's':
        if (it->kind != SM_IT_STR)
            return sm_ps_fail(ps, it->at, SM_EINVAL, "%s must be a string", what);
        a->spec = it->s;
        return 0;
    case 'S':
        if (it->kind != SM_IT_SPEC)
            return sm_ps_fail(ps, it->at, SM_EINVAL, "%s must be a PartitionSpec P(...)", what);
        a->sharding = it->spec;
        return 0;
    case 'w':
        if (*nops < 1)
            return sm_ps_fail(ps, it->at, SM_EINVAL, "%s: no array to pad", what);
        return sm_ps_pad_width(ps, it, ps->p->values[operands[0]].shape.rank, a);
    }
    return sm_ps_fail(ps, it->at, SM_EINTERNAL, "%s: bad signature kind '%c'", what, pm->kind);
}

/* with_sharding_constraint(x, P(...)) in the body of a shard_map program
 * Manual over the axes bound only: the spec may name the other axes alone
 * (JAX's partial-auto shard_map); such a program's body runs replicated over
 * those (called from a jit body, its values are typed over them instead,
 * and the constraint is the jit op), so the constraint leaves x as it is. */
static int sm_ps_wsc_partial(sm_parser *ps, const sm_tok *at, const sm_arg *args, int nargs,
                             uint32_t bound, sm_item *out)
{
    const sm_item *x = NULL, *sp = NULL;
    for (int k = 0; k < nargs; k++) {
        const char *kw = args[k].kw;
        if ((kw && !strcmp(kw, "x")) || (!kw && k == 0))
            x = &args[k].v;
        else if ((kw && !strcmp(kw, "shardings")) || (!kw && k == 1))
            sp = &args[k].v;
        else
            return sm_ps_fail(ps, args[k].at, SM_EINVAL,
                              "with_sharding_constraint takes (x, shardings)");
    }
    if (!x || !sp || x->kind != SM_IT_VALUE || sp->kind != SM_IT_SPEC)
        return sm_ps_fail(ps, at, SM_EINVAL,
                          "with_sharding_constraint takes an array and a PartitionSpec P(...)");
    const sm_pspec *s = sp->spec;
    const sm_ir_value *v = &ps->p->values[x->i];
    if (v->weak)
        return sm_ps_fail(ps, x->at ? x->at : at, SM_EINVAL,
                          "with_sharding_constraint takes an array, not a Python scalar");
    sm_err e =
        sm_ir_spec_not_manual(ps->p, bound, s, "with_sharding_constraint", ps->err, ps->errlen);
    sm_pspec plain = *s; /* P.UNCONSTRAINED: checked as None */
    for (int d = 0; d < plain.nentries; d++)
        plain.e[d].unconstrained = 0;
    if (!e)
        e = sm_pspec_check(&plain, &ps->p->mesh, &v->shape, "with_sharding_constraint", ps->err,
                           ps->errlen);
    if (e)
        return sm_ps_fail_at(ps, sp->at ? sp->at : at, e);
    /* x as it is, as a value of its own (the caller names it): an astype to
     * its own dtype, which shares x's bytes */
    sm_ir_attrs a = {.has_dtype = 1, .dtype = v->dtype};
    int id = (int)x->i;
    return sm_ps_emit(ps, SM_OP_ASTYPE, &id, 1, &a, at, out);
}

int sm_ps_call_op(sm_parser *ps, sm_op_kind kind, const sm_tok *at, const sm_arg *args, int nargs,
                  sm_item *out)
{
    if (kind == SM_OP_WITH_SHARDING_CONSTRAINT && ps->p->kind != SM_PROG_JIT && ps->p->manual_axes)
        return sm_ps_wsc_partial(ps, at, args, nargs, ps->p->manual_axes, out);
    sm_op_param pms[16];
    int np = sm_op_params(kind, pms, 16);
    const char *op = sm_op_name(kind);
    if (sm_op_loop(kind))
        return sm_ps_fail(ps, at, SM_EINVAL,
                          "%s is not called: a loop is written 'while CONDITION:' with an "
                          "indented body",
                          op);
    const sm_arg *bound[16][SM_OP_MAXARGS];
    int nbound[16] = {0};
    char names[256];
    int pi = 0;
    for (int k = 0; k < nargs; k++) {
        const sm_arg *g = &args[k];
        if (!g->kw) {
            if (pi >= np)
                return sm_ps_fail(
                    ps, g->at, SM_EINVAL, "%s takes at most %d positional argument%s (%s), got %d",
                    op, np, np == 1 ? "" : "s", sm_sig_names(pms, np, names, sizeof names), nargs);
            if (nbound[pi] >= SM_OP_MAXARGS)
                return sm_ps_fail(ps, g->at, SM_EINVAL, "%s: too many arguments", op);
            bound[pi][nbound[pi]++] = g;
            if (pms[pi].kind != 'V')
                pi++;
            continue;
        }
        int j = 0;
        while (j < np && strcmp(pms[j].name, g->kw))
            j++;
        if (j == np)
            return sm_ps_fail(ps, g->at, SM_EINVAL,
                              "%s: unknown keyword argument '%s' (expected one of: %s)", op, g->kw,
                              sm_sig_names(pms, np, names, sizeof names));
        if (nbound[j])
            return sm_ps_fail(ps, g->at, SM_EINVAL, "%s: argument '%s' given twice", op, g->kw);
        bound[j][nbound[j]++] = g;
    }
    sm_ir_attrs a = {0};
    int operands[SM_OP_MAXARGS], nops = 0;
    for (int j = 0; j < np; j++) {
        if (!nbound[j] && !pms[j].optional && pms[j].kind != 'V')
            return sm_ps_fail(ps, at, SM_EINVAL, "%s: missing argument '%s' (%s takes %s)", op,
                              pms[j].name, op, sm_sig_names(pms, np, names, sizeof names));
        for (int k = 0; k < nbound[j]; k++)
            if (sm_ps_convert(ps, op, &pms[j], &bound[j][k]->v, &a, operands, &nops))
                return -1;
    }
    return sm_ps_emit(ps, kind, operands, nops, &a, at, out);
}
