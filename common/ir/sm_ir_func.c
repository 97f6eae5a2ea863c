/* sm_ir_func: the text form's builtins beyond the op table — P(...) and
 * NamedSharding as values, square, auto_axes(f, out_sharding=...) — and
 * calls of the file's own functions (inlined by sm_ps_call_fn). */
#include "sm_ir_parse.h"

#include <string.h>

static int sm_ps_static_builtin(const char *name)
{
    static const char *const names[] = {"P",      "PartitionSpec", "NamedSharding",
                                        "square", "auto_axes",     NULL};
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
        if (args[k].kw && strcmp(args[k].kw, "unreduced") == 0) { /* unreduced={'y', 'z'} */
            const sm_item *el = v->kind == SM_IT_TUPLE ? v->elems : v;
            int m = v->kind == SM_IT_TUPLE ? v->n : 1;
            if (m > SM_MAX_AXES)
                return sm_ps_fail(ps, v->at, SM_EINVAL, "too many unreduced axes in P(...)");
            for (int j = 0; j < m; j++) {
                if (el[j].kind != SM_IT_STR || !el[j].s[0] || strlen(el[j].s) >= SM_AXIS_NAME_MAX)
                    return sm_ps_fail(ps, el[j].at ? el[j].at : at, SM_EINVAL,
                                      "unreduced= takes a set of axis names: unreduced={'y'}");
                memcpy(sp->unreduced[sp->nunreduced++], el[j].s, strlen(el[j].s) + 1);
            }
            continue;
        }
        if (args[k].kw)
            return sm_ps_fail(ps, args[k].at, SM_EINVAL, "P(...) takes no keyword '%s'",
                              args[k].kw);
        if (npos == SM_MAX_RANK)
            return sm_ps_fail(ps, at, SM_EINVAL, "P(...) has more than %d entries", SM_MAX_RANK);
        sm_pspec_entry *e = &sp->e[npos++];
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

int sm_ps_call_builtin(sm_parser *ps, const sm_item *fn, const sm_tok *at, const sm_arg *args,
                       int nargs, sm_item *out)
{
    const char *name = fn->s;
    if (fn->spec || fn->elems) { /* auto_axes(f, out_sharding=...)(args) */
        const sm_fn *f = sm_ps_find_fn(ps, name);
        if (ps->p->kind != SM_PROG_JIT)
            return sm_ps_fail(ps, at, SM_EINVAL, "auto_axes belongs to jit programs");
        uint32_t saved = ps->auto_mask;
        ps->auto_mask = fn->i                     ? saved | (uint32_t)fn->i /* axes= */
                        : ps->p->mesh.naxes >= 32 ? ~0u
                                                  : (1u << ps->p->mesh.naxes) - 1;
        sm_item r;
        sm_op_kind k;
        int rc = f ? sm_ps_call_fn(ps, f, at, args, nargs, &r)
                 : sm_op_lookup(name, &k) == 0
                     ? sm_ps_call_op(ps, k, at, args, nargs, &r)
                     : sm_ps_fail(ps, at, SM_EINVAL, "unknown function '%s'", name);
        ps->auto_mask = saved;
        if (rc)
            return -1;
        int nr = r.kind == SM_IT_TUPLE ? r.n : 1, ns = fn->elems ? fn->n : 1;
        if (nr != ns) /* one sharding per result */
            return sm_ps_fail(ps, at, SM_EINVAL,
                              "auto_axes: '%s' returns %d value%s but out_sharding has %d "
                              "sharding%s",
                              name, nr, nr == 1 ? "" : "s", ns, ns == 1 ? "" : "s");
        if (!fn->elems) {
            int id;
            if (sm_ps_value(ps, &r, &id))
                return -1;
            sm_ir_attrs a = {.sharding = fn->spec};
            return sm_ps_emit(ps, SM_OP_RESHARD, &id, 1, &a, at, out);
        }
        sm_item *el = sm_arena_alloc(ps->scratch, sizeof *el * (size_t)nr);
        if (!el)
            return sm_ps_fail(ps, at, SM_ENOMEM, "out of memory");
        for (int k = 0; k < nr; k++) {
            int id;
            if (sm_ps_value(ps, &r.elems[k], &id))
                return -1;
            sm_ir_attrs a = {.sharding = fn->elems[k].spec};
            if (sm_ps_emit(ps, SM_OP_RESHARD, &id, 1, &a, at, &el[k]))
                return -1;
        }
        *out = (sm_item){.kind = SM_IT_TUPLE, .n = nr, .elems = el, .at = at};
        return 0;
    }
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
    if (strcmp(name, "auto_axes") == 0) {
        const sm_pspec *sp = NULL;
        sm_op_kind k;
        if (nargs < 1 || args[0].kw || args[0].v.kind != SM_IT_FUNC ||
            (!sm_ps_find_fn(ps, args[0].v.s) && sm_op_lookup(args[0].v.s, &k)))
            return sm_ps_fail(ps, at, SM_EINVAL,
                              "auto_axes takes an op or a function of this file: auto_axes(f, "
                              "out_sharding=P(...))");
        /* axes=: the mesh axes made Auto ('X' or a tuple of names; all by default) */
        int64_t mask = 0;
        for (int k = 1; k < nargs; k++) {
            if (!args[k].kw || strcmp(args[k].kw, "axes"))
                continue;
            const sm_item *v = &args[k].v;
            int na = v->kind == SM_IT_TUPLE ? v->n : 1;
            for (int j = 0; j < na; j++) {
                const sm_item *e = v->kind == SM_IT_TUPLE ? &v->elems[j] : v;
                int m = e->kind == SM_IT_STR ? sm_mesh_axis(&ps->p->mesh, e->s) : -1;
                if (e->kind != SM_IT_STR)
                    return sm_ps_fail(ps, args[k].at, SM_EINVAL,
                                      "auto_axes: axes must be a mesh axis name or a tuple of "
                                      "them");
                if (m < 0)
                    return sm_ps_fail(ps, args[k].at, SM_EINVAL,
                                      "auto_axes: '%s' is not an axis of the mesh", e->s);
                mask |= (int64_t)1 << m;
            }
            if (!mask)
                return sm_ps_fail(ps, args[k].at, SM_EINVAL, "auto_axes: axes names no axis");
        }
        /* a tuple of specs, one per result of a function with several */
        for (int k = 1; k < nargs; k++) {
            const sm_item *v = &args[k].v;
            if (!(args[k].kw
                      ? !strcmp(args[k].kw, "out_sharding") || !strcmp(args[k].kw, "out_shardings")
                      : k == 1) ||
                v->kind != SM_IT_TUPLE)
                continue;
            for (int j = 0; j < v->n; j++)
                if (v->elems[j].kind != SM_IT_SPEC)
                    return sm_ps_fail(ps, args[k].at, SM_EINVAL,
                                      "out_sharding must be a PartitionSpec P(...) or a tuple "
                                      "of them, one per result");
            if (v->n < 1)
                break;
            *out = (sm_item){.kind = SM_IT_FUNC,
                             .s = args[0].v.s,
                             .elems = v->elems,
                             .n = v->n,
                             .i = mask,
                             .at = at};
            return 0;
        }
        if (sm_ps_spec_kw(ps, at, args, nargs, "out_sharding", 1, &sp) ||
            (!sp && sm_ps_spec_kw(ps, at, args, nargs, "out_shardings", 1, &sp)))
            return -1;
        if (!sp)
            return sm_ps_fail(ps, at, SM_EINVAL,
                              "auto_axes needs out_sharding=P(...): the sharding of its result "
                              "(a tuple of them for a function with several results)");
        *out = (sm_item){.kind = SM_IT_FUNC, .s = args[0].v.s, .spec = sp, .i = mask, .at = at};
        return 0;
    }
    const sm_fn *f = sm_ps_find_fn(ps, name);
    if (!f)
        return sm_ps_fail(ps, at, SM_EINVAL, "unknown function '%s'", name);
    return sm_ps_call_fn(ps, f, at, args, nargs, out);
}
