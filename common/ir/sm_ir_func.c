/* sm_ir_func: the text form's builtins beyond the op table — P(...) and
 * NamedSharding as values, square, auto_axes(f, out_sharding=...),
 * explicit_axes(f, in_sharding=...) — and
 * calls of the file's own functions (inlined by sm_ps_call_fn). */
#include "sm_ir_parse.h"

#include <string.h>

#include "sm_ir_infer.h"

static int sm_ps_static_builtin(const char *name)
{
    static const char *const names[] = {
        "P", "PartitionSpec", "NamedSharding", "square", "auto_axes", "explicit_axes", NULL};
    for (int k = 0; names[k]; k++)
        if (strcmp(name, names[k]) == 0)
            return 1;
    return 0;
}

const sm_fn *sm_ps_find_fn(sm_parser *ps, const char *name)
{
    for (int k = 0; k < ps->nfns; k++) {
        if (strcmp(ps->fns[k].name, name) != 0)
            continue;
        sm_op_kind op;
        for (int a = 0; a < ps->nactive; a++)
            if (ps->active[a] == &ps->fns[k] &&
                (sm_op_lookup(name, &op) == 0 || sm_ps_static_builtin(name)))
                return NULL; /* its own name in its body: the op */
        return &ps->fns[k];
    }
    return NULL;
}

int sm_ps_builtin(sm_parser *ps, const char *name)
{
    return sm_ps_static_builtin(name) || sm_ps_find_fn(ps, name) != NULL;
}

/* P('X', None, ('Y', 'Z')) from call arguments. */
static int sm_ps_spec_of_args(sm_parser *ps, const sm_tok *at, const sm_arg *args, int n,
                              sm_item *out)
{
    sm_pspec *sp = sm_arena_alloc(ps->scratch, sizeof *sp);
    if (!sp)
        return sm_ps_fail(ps, at, SM_ENOMEM, "out of memory");
    memset(sp, 0, sizeof *sp);
    int npos = 0;
    for (int k = 0; k < n; k++) {
        const sm_item *v = &args[k].v;
        if (args[k].kw && strcmp(args[k].kw, "unreduced_kind") == 0) { /* (sm_ps_args) */
            int kind = v->kind == SM_IT_STR ? sm_pspec_kind_of(v->s, strlen(v->s)) : -1;
            if (kind < 0)
                return sm_ps_fail(ps, v->at ? v->at : at, SM_EINVAL,
                                  "unreduced_kind= takes sum, max or min");
            sp->unreduced_kind = kind;
            continue;
        }
        int red = args[k].kw && strcmp(args[k].kw, "reduced") == 0;
        if (red || (args[k].kw && strcmp(args[k].kw, "unreduced") == 0)) {
            /* unreduced={'y', 'z'}, reduced={'x'} */
            const char *word = red ? "reduced" : "unreduced";
            char(*names)[SM_AXIS_NAME_MAX] = red ? sp->reduced : sp->unreduced;
            int *cnt = red ? &sp->nreduced : &sp->nunreduced;
            const sm_item *el = v->kind == SM_IT_TUPLE ? v->elems : v;
            int m = v->kind == SM_IT_TUPLE ? v->n : 1;
            if (m > SM_MAX_AXES)
                return sm_ps_fail(ps, v->at, SM_EINVAL, "too many %s axes in P(...)", word);
            for (int j = 0; j < m; j++) {
                if (el[j].kind != SM_IT_STR || !el[j].s[0] || strlen(el[j].s) >= SM_AXIS_NAME_MAX)
                    return sm_ps_fail(ps, el[j].at ? el[j].at : at, SM_EINVAL,
                                      "%s= takes a set of axis names: %s={'y'}", word, word);
                memcpy(names[(*cnt)++], el[j].s, strlen(el[j].s) + 1);
            }
            continue;
        }
        if (args[k].kw)
            return sm_ps_fail(ps, args[k].at, SM_EINVAL, "P(...) takes no keyword '%s'",
                              args[k].kw);
        if (npos == SM_MAX_RANK)
            return sm_ps_fail(ps, at, SM_EINVAL, "P(...) has more than %d entries", SM_MAX_RANK);
        sm_pspec_entry *e = &sp->e[npos++];
        if (v->kind == SM_IT_STR && !strcmp(v->s, SM_PS_UNCONSTRAINED)) { /* (sm_ps_args) */
            e->unconstrained = 1;
            continue;
        }
        const sm_item *el = v->kind == SM_IT_TUPLE ? v->elems : v;
        int m = v->kind == SM_IT_TUPLE ? v->n : v->kind == SM_IT_NONE ? 0 : 1;
        e->is_tuple = v->kind == SM_IT_TUPLE;
        if (m > SM_MAX_AXES)
            return sm_ps_fail(ps, v->at, SM_EINVAL, "too many axis names in P(...)");
        for (int j = 0; j < m; j++) {
            if (el[j].kind != SM_IT_STR || !el[j].s[0] || strlen(el[j].s) >= SM_AXIS_NAME_MAX)
                return sm_ps_fail(ps, el[j].at ? el[j].at : at, SM_EINVAL,
                                  "expected None, an axis name or a tuple of axis names in "
                                  "P(...)");
            memcpy(e->axes[e->naxes++], el[j].s, strlen(el[j].s) + 1);
        }
    }
    sp->nentries = npos;
    *out = (sm_item){.kind = SM_IT_SPEC, .spec = sp, .at = at};
    return 0;
}

static int sm_ps_spec_kw(sm_parser *ps, const sm_tok *at, const sm_arg *args, int n, const char *kw,
                         int pos, const sm_pspec **out)
{
    *out = NULL;
    for (int k = 0; k < n; k++) {
        if ((args[k].kw && strcmp(args[k].kw, kw) == 0) || (!args[k].kw && k == pos)) {
            if (args[k].v.kind != SM_IT_SPEC)
                return sm_ps_fail(ps, args[k].at, SM_EINVAL, "%s must be a PartitionSpec P(...)",
                                  kw);
            *out = args[k].v.spec;
        }
    }
    return 0;
}

/* A call of f made by auto_axes (mode 1: its axes Auto, the results
 * resharded to out_sharding) or explicit_axes (mode 2: its axes Explicit in
 * a mesh where they are Auto, the array arguments resharded to in_sharding
 * first, the results' types hiding them again, their data where it lies),
 * as JAX's. */
static int sm_ps_call_axes(sm_parser *ps, const sm_item *fn, const sm_tok *at, const sm_arg *args,
                           int nargs, sm_item *out)
{
    const char *name = fn->s, *what = fn->mode == 1 ? "auto_axes" : "explicit_axes";
    const sm_fn *f = sm_ps_find_fn(ps, name);
    if (ps->p->kind != SM_PROG_JIT)
        return sm_ps_fail(ps, at, SM_EINVAL, "%s belongs to jit programs", what);
    uint32_t all = sm_ir_all_axes(ps->p);
    uint32_t mask = fn->i ? (uint32_t)fn->i : all; /* axes= */
    uint32_t sa = ps->auto_mask, se = ps->explicit_mask;
    int ns = fn->elems ? fn->n : 1;
    const sm_arg *call = args;
    if (fn->mode == 1) {
        ps->auto_mask = sa | mask;
        ps->explicit_mask = se & ~mask;
    } else {
        ps->explicit_mask = se | mask;
        ps->auto_mask = sa & ~mask;
        sm_arg *a2 = sm_arena_alloc(ps->scratch, sizeof *a2 * (size_t)(nargs ? nargs : 1));
        if (!a2)
            return sm_ps_fail(ps, at, SM_ENOMEM, "out of memory");
        int q = 0;
        for (int k = 0; k < nargs; k++) {
            a2[k] = args[k];
            if (args[k].kw || args[k].v.kind != SM_IT_VALUE)
                continue;
            const sm_pspec *sp = fn->elems ? (q < ns ? fn->elems[q].spec : NULL) : fn->spec;
            int id = (int)args[k].v.i;
            sm_ir_attrs a = {.sharding = sp};
            if (!sp || sm_ps_emit(ps, SM_OP_RESHARD, &id, 1, &a, at, &a2[k].v)) {
                ps->auto_mask = sa;
                ps->explicit_mask = se;
                return sp ? -1
                          : sm_ps_fail(ps, at, SM_EINVAL,
                                       "explicit_axes: in_sharding has %d shardings for more "
                                       "array arguments",
                                       ns);
            }
            q++;
        }
        call = a2;
    }
    sm_item r;
    sm_op_kind k;
    int rc = f ? sm_ps_call_fn(ps, f, at, call, nargs, &r)
             : sm_op_lookup(name, &k) == 0
                 ? sm_ps_call_op(ps, k, at, call, nargs, &r)
                 : sm_ps_fail(ps, at, SM_EINVAL, "unknown function '%s'", name);
    ps->auto_mask = sa;
    ps->explicit_mask = se;
    if (rc)
        return -1;
    int nr = r.kind == SM_IT_TUPLE ? r.n : 1;
    if (fn->mode == 1 && nr != ns) /* one sharding per result */
        return sm_ps_fail(ps, at, SM_EINVAL,
                          "auto_axes: '%s' returns %d value%s but out_sharding has %d sharding%s",
                          name, nr, nr == 1 ? "" : "s", ns, ns == 1 ? "" : "s");
    sm_item *el = sm_arena_alloc(ps->scratch, sizeof *el * (size_t)nr);
    if (!el)
        return sm_ps_fail(ps, at, SM_ENOMEM, "out of memory");
    for (int q = 0; q < nr; q++) {
        int id;
        if (sm_ps_value(ps, r.kind == SM_IT_TUPLE ? &r.elems[q] : &r, &id))
            return -1;
        sm_pspec here;
        sm_ir_attrs a = {.sharding =
                             fn->mode == 1 ? (fn->elems ? fn->elems[q].spec : fn->spec) : &here};
        if (fn->mode == 2) { /* its own layout: no data moves, the type hides the axes again */
            const sm_ir_value *v = &ps->p->values[id];
            sm_ir_layout_to_spec(ps->p, &v->layout, v->shape.rank, 0, &here);
        }
        if (sm_ps_emit(ps, SM_OP_RESHARD, &id, 1, &a, at, &el[q]))
            return -1;
    }
    if (r.kind != SM_IT_TUPLE) {
        *out = el[0];
        return 0;
    }
    *out = (sm_item){.kind = SM_IT_TUPLE, .n = nr, .elems = el, .at = at};
    return 0;
}

/* auto_axes(f, out_sharding=..., axes=...) (mode 1) or explicit_axes(f,
 * in_sharding=..., axes=...) (mode 2): the function item a call of which
 * runs f in that mode (sm_ps_call_axes). */
static int sm_ps_axes_fn(sm_parser *ps, int mode, const sm_tok *at, const sm_arg *args, int nargs,
                         sm_item *out)
{
    const char *what = mode == 1 ? "auto_axes" : "explicit_axes";
    const char *kw = mode == 1 ? "out_sharding" : "in_sharding";
    sm_op_kind k;
    if (nargs < 1 || args[0].kw || args[0].v.kind != SM_IT_FUNC ||
        (!sm_ps_find_fn(ps, args[0].v.s) && sm_op_lookup(args[0].v.s, &k)))
        return sm_ps_fail(ps, at, SM_EINVAL,
                          "%s takes an op or a function of this file: %s(f, %s=P(...))", what, what,
                          kw);
    /* axes=: the mesh axes made Auto or Explicit ('X' or a tuple of names; all by default) */
    int64_t mask = 0;
    for (int q = 1; q < nargs; q++) {
        if (!args[q].kw || strcmp(args[q].kw, "axes"))
            continue;
        const sm_item *v = &args[q].v;
        int na = v->kind == SM_IT_TUPLE ? v->n : 1;
        for (int j = 0; j < na; j++) {
            const sm_item *e = v->kind == SM_IT_TUPLE ? &v->elems[j] : v;
            int m = e->kind == SM_IT_STR ? sm_mesh_axis(&ps->p->mesh, e->s) : -1;
            if (e->kind != SM_IT_STR)
                return sm_ps_fail(ps, args[q].at, SM_EINVAL,
                                  "%s: axes must be a mesh axis name or a tuple of them", what);
            if (m < 0)
                return sm_ps_fail(ps, args[q].at, SM_EINVAL, "%s: '%s' is not an axis of the mesh",
                                  what, e->s);
            mask |= (int64_t)1 << m;
        }
        if (!mask)
            return sm_ps_fail(ps, args[q].at, SM_EINVAL, "%s: axes names no axis", what);
    }
    /* a tuple of specs: one per result (auto_axes) or array argument (explicit_axes) */
    for (int q = 1; q < nargs; q++) {
        const sm_item *v = &args[q].v;
        if (!(args[q].kw
                  ? !strcmp(args[q].kw, kw) || (mode == 1 && !strcmp(args[q].kw, "out_shardings"))
                  : q == 1) ||
            v->kind != SM_IT_TUPLE)
            continue;
        for (int j = 0; j < v->n; j++)
            if (v->elems[j].kind != SM_IT_SPEC)
                return sm_ps_fail(ps, args[q].at, SM_EINVAL,
                                  "%s must be a PartitionSpec P(...) or a tuple of them, one per "
                                  "%s",
                                  kw, mode == 1 ? "result" : "array argument");
        if (v->n < 1)
            break;
        *out = (sm_item){.kind = SM_IT_FUNC,
                         .s = args[0].v.s,
                         .elems = v->elems,
                         .n = v->n,
                         .i = mask,
                         .mode = mode,
                         .at = at};
        return 0;
    }
    const sm_pspec *sp = NULL;
    if (sm_ps_spec_kw(ps, at, args, nargs, kw, 1, &sp) ||
        (!sp && mode == 1 && sm_ps_spec_kw(ps, at, args, nargs, "out_shardings", 1, &sp)))
        return -1;
    if (!sp)
        return sm_ps_fail(ps, at, SM_EINVAL,
                          mode == 1 ? "auto_axes needs out_sharding=P(...): the sharding of its "
                                      "result (a tuple of them for a function with several "
                                      "results)"
                                    : "explicit_axes needs in_sharding=P(...): the sharding of "
                                      "its argument (a tuple of them for several)");
    *out = (sm_item){
        .kind = SM_IT_FUNC, .s = args[0].v.s, .spec = sp, .i = mask, .mode = mode, .at = at};
    return 0;
}

int sm_ps_call_builtin(sm_parser *ps, const sm_item *fn, const sm_tok *at, const sm_arg *args,
                       int nargs, sm_item *out)
{
    const char *name = fn->s;
    if (fn->kind == SM_IT_FUNC && fn->mode) /* auto_axes(f, ...)(args), explicit_axes(f, ...) */
        return sm_ps_call_axes(ps, fn, at, args, nargs, out);
    if (strcmp(name, "P") == 0 || strcmp(name, "PartitionSpec") == 0)
        return sm_ps_spec_of_args(ps, at, args, nargs, out);
    if (strcmp(name, "NamedSharding") == 0) { /* NamedSharding(mesh, P(...)): the job's mesh */
        const sm_pspec *sp;
        if (sm_ps_spec_kw(ps, at, args, nargs, "spec", 1, &sp))
            return -1;
        if (!sp)
            return sm_ps_fail(ps, at, SM_EINVAL, "NamedSharding(mesh, P(...)) needs a spec");
        *out = (sm_item){.kind = SM_IT_SPEC, .spec = sp, .at = at};
        return 0;
    }
    if (strcmp(name, "square") == 0) {
        if (nargs != 1 || args[0].kw)
            return sm_ps_fail(ps, at, SM_EINVAL, "square takes one array");
        int ops[2];
        if (sm_ps_value(ps, &args[0].v, &ops[0]))
            return -1;
        ops[1] = ops[0];
        return sm_ps_emit(ps, SM_OP_MULTIPLY, ops, 2, NULL, at, out);
    }
    if (strcmp(name, "auto_axes") == 0 || strcmp(name, "explicit_axes") == 0)
        return sm_ps_axes_fn(ps, name[0] == 'a' ? 1 : 2, at, args, nargs, out);
    const sm_fn *f = sm_ps_find_fn(ps, name);
    if (!f)
        return sm_ps_fail(ps, at, SM_EINVAL, "unknown function '%s'", name);
    return sm_ps_call_fn(ps, f, at, args, nargs, out);
}
