/* sm_ir_build: the program object, the C builder API and the verifier. */
#include "sm_arena.h"
#include "sm_ir_infer.h"

#include <stdio.h>
#include <string.h>

/* Grows an arena array of elem-sized items to hold at least need. The first
 * allocation is about 4 KiB (2 to 16 items): parameters and ops are large
 * (a PartitionSpec, op attributes) and most programs have few of them, so a
 * small program stays a few pages, which matters when every job decodes one. */
static int sm_ir_grow(sm_arena *a, void **arr, int *cap, int need, size_t elem)
{
    if (need <= *cap)
        return 0;
    int first = (int)(4096 / elem);
    int nc = *cap ? *cap * 2 : first < 2 ? 2 : first > 16 ? 16 : first;
    while (nc < need)
        nc *= 2;
    void *n = sm_arena_alloc(a, (size_t)nc * elem);
    if (!n)
        return -1;
    if (*arr)
        memcpy(n, *arr, (size_t)*cap * elem);
    *arr = n;
    *cap = nc;
    return 0;
}

sm_err sm_program_create(const sm_mesh *mesh, const char *name, sm_program **out, char *err,
                         size_t errlen)
{
    sm_arena *a = sm_arena_create(0);
    sm_program *p = a ? sm_arena_alloc(a, sizeof *p) : NULL;
    if (!p) {
        sm_arena_free(a);
        return sm_fail(err, errlen, SM_ENOMEM, "out of memory creating a program");
    }
    p->arena = a;
    if (mesh)
        p->mesh = *mesh;
    p->name = sm_arena_strdup(a, name ? name : "f");
    *out = p;
    return SM_OK;
}

sm_err sm_program_set_jit(sm_program *p, uint32_t auto_axes, char *err, size_t errlen)
{
    if (p->nparams || p->nops)
        return sm_fail(err, errlen, SM_EINVAL, "a program becomes jit before its first parameter");
    if (p->mesh.naxes < 32 && (auto_axes >> p->mesh.naxes))
        return sm_fail(err, errlen, SM_EINVAL, "axis_types names %d axes but the mesh has %d",
                       32 - __builtin_clz(auto_axes), p->mesh.naxes);
    p->kind = SM_PROG_JIT;
    p->auto_axes = auto_axes;
    p->mesh.auto_axes = auto_axes; /* its mesh's types (kept by the program it lowers to) */
    return SM_OK;
}

void sm_program_free(sm_program *p)
{
    if (p)
        sm_arena_free(p->arena);
}

static sm_err sm_ir_new_value(sm_program *p, int *id, char *err, size_t errlen)
{
    if (sm_ir_grow(p->arena, (void **)&p->values, &p->cap_values, p->nvalues + 1,
                   sizeof(sm_ir_value)))
        return sm_fail(err, errlen, SM_ENOMEM, "out of memory adding a value");
    *id = p->nvalues;
    memset(&p->values[*id], 0, sizeof(sm_ir_value));
    return SM_OK;
}

/* Block shape and varying axes of a parameter. */
static sm_err sm_ir_param_block(const sm_program *p, const sm_ir_param *pa, sm_ir_value *v,
                                char *err, size_t errlen)
{
    char what[300];
    snprintf(what, sizeof what, "argument '%s'", pa->name);
    if ((int)pa->dtype < 0 || pa->dtype >= SM_DTYPE_COUNT)
        return sm_fail(err, errlen, SM_EINVAL, "%s has an unknown dtype %d", what, (int)pa->dtype);
    if (pa->global.rank < 0 || pa->global.rank > SM_MAX_RANK)
        return sm_fail(err, errlen, SM_EINVAL, "%s has rank %d (0..%d)", what, pa->global.rank,
                       SM_MAX_RANK);
    int64_t numel = 1;
    for (int d = 0; d < pa->global.rank; d++)
        if (pa->global.dims[d] < 0 || pa->global.dims[d] > SM_IR_MAX_DIM ||
            __builtin_mul_overflow(numel, pa->global.dims[d], &numel))
            return sm_fail(err, errlen, SM_EINVAL,
                           "%s: dimension %d (%lld) is negative or too large", what, d,
                           (long long)pa->global.dims[d]);
    sm_err e = sm_pspec_check(&pa->spec, &p->mesh, &pa->global, what, err, errlen);
    if (e)
        return e;
    v->dtype = pa->dtype;
    uint32_t u = sm_ir_spec_unreduced(p, &pa->spec);
    v->unreduced = p->lowered ? 0 : u;
    v->ukind = v->unreduced ? pa->spec.unreduced_kind : SM_UK_SUM;
    v->reduced = p->lowered ? 0 : sm_ir_spec_reduced(p, &pa->spec);
    v->shape = pa->global;
    v->vma = 0;
    v->weak = 0;
    if (p->kind == SM_PROG_JIT) { /* the body sees the global array */
        sm_ir_layout_of_spec(p, &pa->spec, &v->layout);
        v->hidden = p->auto_axes;
        v->manual = 0;
        return SM_OK;
    }
    if ((e = sm_ir_spec_manual(p, p->manual_axes, &pa->spec, "in_specs", pa->value, err, errlen)))
        return e;
    for (int d = 0; d < pa->global.rank; d++)
        v->shape.dims[d] = pa->global.dims[d] / sm_pspec_dim_factor(&pa->spec, &p->mesh, d);
    for (int k = 0; k < pa->spec.nentries; k++)
        for (int j = 0; j < pa->spec.e[k].naxes; j++)
            v->vma |= 1u << sm_mesh_axis(&p->mesh, pa->spec.e[k].axes[j]);
    if (p->lowered)
        v->vma |= u;
    return SM_OK;
}

sm_err sm_program_add_param(sm_program *p, const char *name, sm_dtype dtype, const sm_shape *global,
                            const sm_pspec *spec, int *value_id, char *err, size_t errlen)
{
    if (!name || !*name)
        return sm_fail(err, errlen, SM_EINVAL, "a parameter needs a name");
    for (int i = 0; i < p->nparams; i++)
        if (strcmp(p->params[i].name, name) == 0)
            return sm_fail(err, errlen, SM_EINVAL, "parameter '%s' is declared twice", name);
    if (p->nops > 0)
        return sm_fail(err, errlen, SM_EINVAL, "parameter '%s' added after the first op", name);
    sm_ir_param pa = {.dtype = dtype, .global = *global, .spec = *spec, .value = p->nvalues};
    pa.name = sm_arena_strdup(p->arena, name);
    sm_ir_value v = {.name = pa.name, .def = -1};
    sm_err e = pa.name ? SM_OK : sm_fail(err, errlen, SM_ENOMEM, "out of memory");
    if (!e)
        e = sm_ir_param_block(p, &pa, &v, err, errlen);
    if (e)
        return e;
    if (sm_ir_grow(p->arena, (void **)&p->params, &p->cap_params, p->nparams + 1,
                   sizeof(sm_ir_param)))
        return sm_fail(err, errlen, SM_ENOMEM, "out of memory adding a parameter");
    int id;
    if ((e = sm_ir_new_value(p, &id, err, errlen)))
        return e;
    p->values[id] = v;
    p->nvalues++;
    p->params[p->nparams++] = pa;
    if (value_id)
        *value_id = id;
    return SM_OK;
}

sm_err sm_program_add_op_at(sm_program *p, sm_op_kind kind, const int *operands, int n,
                            const sm_ir_attrs *attrs, int line, int col, int *value_id, char *err,
                            size_t errlen)
{
    return sm_program_add_op_jit(p, kind, operands, n, attrs, line, col, 0, 0, 0, 0, 0, value_id,
                                 err, errlen);
}

sm_err sm_program_add_op_jit(sm_program *p, sm_op_kind kind, const int *operands, int n,
                             const sm_ir_attrs *attrs, int line, int col, int manual,
                             uint32_t manual_axes, uint32_t outer_axes, uint32_t auto_mask,
                             uint32_t explicit_mask, int *value_id, char *err, size_t errlen)
{
    static const sm_ir_attrs none;
    if (n < 0 || n > SM_OP_MAXARGS)
        return sm_fail(err, errlen, SM_EINVAL, "%s: %d operands is too many", sm_op_name(kind), n);
    sm_ir_op op = {.kind = kind, .noperands = n, .attrs = attrs ? *attrs : none};
    op.line = line;
    op.col = col;
    op.manual = manual;
    op.manual_axes = manual_axes;
    op.outer_axes = outer_axes;
    op.auto_mask = auto_mask;
    op.explicit_mask = explicit_mask;
    op.operands = sm_arena_alloc(p->arena, sizeof(int) * (size_t)(n ? n : 1));
    if (!op.operands)
        return sm_fail(err, errlen, SM_ENOMEM, "out of memory adding an op");
    if (n)
        memcpy(op.operands, operands, sizeof(int) * (size_t)n);
    if (op.attrs.spec && !(op.attrs.spec = sm_arena_strdup(p->arena, op.attrs.spec)))
        return sm_fail(err, errlen, SM_ENOMEM, "out of memory adding an op");
    if (op.attrs.sharding) {
        sm_pspec *sp = sm_arena_alloc(p->arena, sizeof *sp);
        if (!sp)
            return sm_fail(err, errlen, SM_ENOMEM, "out of memory adding an op");
        *sp = *op.attrs.sharding;
        op.attrs.sharding = sp;
    }
    if (op.attrs.nperm > 0 && op.attrs.perm) {
        int64_t(*pp)[2] = sm_arena_alloc(p->arena, sizeof *pp * (size_t)op.attrs.nperm);
        if (!pp)
            return sm_fail(err, errlen, SM_ENOMEM, "out of memory adding an op");
        memcpy(pp, op.attrs.perm, sizeof *pp * (size_t)op.attrs.nperm);
        op.attrs.perm = (const int64_t(*)[2])pp;
    }
    sm_ir_attrs_normalize(&op);
    if (kind == SM_OP_EINSUM && op.attrs.spec && strstr(op.attrs.spec, "...")) {
        sm_err ee = sm_ir_einsum_ellipsis(p, &op, err, errlen);
        if (ee)
            return ee;
    }
    sm_ir_value v = {.def = p->nops};
    sm_err e = sm_ir_infer_op(p, &op, p->nvalues, &v, err, errlen);
    if (e)
        return e;
    if (sm_ir_grow(p->arena, (void **)&p->ops, &p->cap_ops, p->nops + 1, sizeof(sm_ir_op)))
        return sm_fail(err, errlen, SM_ENOMEM, "out of memory adding an op");
    int id;
    if ((e = sm_ir_new_value(p, &id, err, errlen)))
        return e;
    op.result = id;
    p->values[id] = v;
    p->nvalues++;
    p->ops[p->nops++] = op;
    if (value_id)
        *value_id = id;
    return SM_OK;
}

sm_err sm_ir_einsum_ellipsis(sm_program *p, sm_ir_op *op, char *err, size_t errlen)
{
    const char *spec = op->attrs.spec;
    int used[128] = {0}, n = op->noperands;
    for (const char *q = spec; *q; q++)
        used[(unsigned char)*q & 127] = 1;
    char pool[53];
    int np = 0;
    for (int c = 'A'; c <= 'Z'; c++)
        if (!used[c])
            pool[np++] = (char)c;
    for (int c = 'a'; c <= 'z'; c++)
        if (!used[c])
            pool[np++] = (char)c;
    const char *arrow = strstr(spec, "->");
    size_t in_len = arrow ? (size_t)(arrow - spec) : strlen(spec);
    /* each input term's letters, whether it has '...' and its letters before it */
    int ell[SM_OP_MAXARGS + 1] = {0}, nlet[SM_OP_MAXARGS + 1] = {0}, nt = 0, most = 0;
    int before[SM_OP_MAXARGS + 1] = {0};
    for (size_t i = 0; i <= in_len && nt <= n; i++) {
        if (i == in_len || spec[i] == ',') {
            nt++;
            continue;
        }
        if (spec[i] == '.') {
            if (i + 2 >= in_len + 1 || strncmp(spec + i, "...", 3) || ell[nt])
                return sm_fail(err, errlen, SM_EINVAL,
                               "einsum: subscripts '%s': '.' only as one '...' per operand", spec);
            ell[nt] = 1;
            before[nt] = nlet[nt];
            i += 2;
        } else if (spec[i] != ' ') {
            nlet[nt]++;
        }
    }
    if (nt != n)
        return sm_fail(err, errlen, SM_EINVAL,
                       "einsum: subscripts '%s' name %d operands, %d are given", spec, nt, n);
    for (int k = 0; k < n; k++) {
        int id = op->operands[k];
        if (id < 0 || id >= p->nvalues)
            return SM_OK; /* the operand check that follows says why */
        int r = p->values[id].shape.rank - nlet[k];
        if (ell[k] && r < 0)
            return sm_fail(err, errlen, SM_EINVAL,
                           "einsum: subscripts '%s' name more dimensions than operand %d has", spec,
                           k);
        if (ell[k] && r > most)
            most = r;
    }
    if (most > np)
        return sm_fail(err, errlen, SM_EINVAL, "einsum: subscripts '%s': too many dimensions",
                       spec);
    /* '...' of an operand of rank r: the last r of the `most` letters (numpy aligns
     * them to the right). numpy broadcasts them: where one operand's dimension
     * has size 1 and another's more, the size-1 one gets a letter of its own,
     * summed away (a sum over one element). */
    int64_t bsize[52] = {0};
    for (int q = 0; q < n; q++) {
        const sm_ir_value *v = &p->values[op->operands[q]];
        int r = ell[q] ? v->shape.rank - nlet[q] : 0;
        for (int d = most - r; d < most; d++) {
            int64_t z = v->shape.dims[before[q] + d - (most - r)];
            if (z != 1)
                bsize[d] = z;
        }
    }
    int fresh = most;
    char out[512];
    size_t o = 0;
    int k = 0;
#define PUT(ch)                                                                                    \
    do {                                                                                           \
        if (o + 1 >= sizeof out)                                                                   \
            return sm_fail(err, errlen, SM_EINVAL, "einsum: subscripts '%s' are too long", spec);  \
        out[o++] = (ch);                                                                           \
    } while (0)
    for (size_t i = 0; i < in_len; i++) {
        if (spec[i] == ',') {
            k++;
            PUT(',');
        } else if (spec[i] == '.') {
            const sm_ir_value *v = &p->values[op->operands[k]];
            int r = v->shape.rank - nlet[k];
            for (int d = most - r; d < most; d++) {
                int64_t z = v->shape.dims[before[k] + d - (most - r)];
                if (z == 1 && bsize[d] > 1) {
                    if (fresh >= np)
                        return sm_fail(err, errlen, SM_EINVAL,
                                       "einsum: subscripts '%s': too many dimensions", spec);
                    PUT(pool[fresh++]);
                } else {
                    PUT(pool[d]);
                }
            }
            i += 2;
        } else if (spec[i] != ' ') {
            PUT(spec[i]);
        }
    }
    PUT('-');
    PUT('>');
    if (arrow) {
        for (const char *q = arrow + 2; *q; q++) {
            if (*q == '.') {
                if (strncmp(q, "...", 3))
                    return sm_fail(err, errlen, SM_EINVAL,
                                   "einsum: subscripts '%s': '.' only as '...'", spec);
                for (int d = 0; d < most; d++)
                    PUT(pool[d]);
                q += 2;
            } else if (*q != ' ') {
                PUT(*q);
            }
        }
    } else { /* numpy's implicit output: '...', then the letters met once, in order */
        int count[128] = {0};
        for (size_t i = 0; i < in_len; i++)
            if ((spec[i] >= 'a' && spec[i] <= 'z') || (spec[i] >= 'A' && spec[i] <= 'Z'))
                count[(unsigned char)spec[i]]++;
        for (int d = 0; d < most; d++)
            PUT(pool[d]);
        for (int c = 'A'; c <= 'z'; c++)
            if (count[c] == 1)
                PUT((char)c);
    }
#undef PUT
    out[o] = '\0';
    if (!(op->attrs.spec = sm_arena_strdup(p->arena, out)))
        return sm_fail(err, errlen, SM_ENOMEM, "out of memory adding an op");
    return SM_OK;
}

sm_err sm_program_add_op(sm_program *p, const char *op, const int *operands, int n,
                         const sm_ir_attrs *attrs, int *value_id, char *err, size_t errlen)
{
    sm_op_kind kind;
    if (!op || sm_op_lookup(op, &kind) != 0)
        return sm_fail(err, errlen, SM_EINVAL,
                       "no op is named '%.64s' (docs/programs.md lists them)", op ? op : "(null)");
    return sm_program_add_op_at(p, kind, operands, n, attrs, 0, 0, value_id, err, errlen);
}

int sm_program_nparams(const sm_program *p)
{
    return p->nparams;
}

int sm_program_nreturns(const sm_program *p)
{
    return p->nreturns;
}

void sm_program_name_value(sm_program *p, int value_id, const char *name)
{
    if (value_id >= 0 && value_id < p->nvalues && name)
        p->values[value_id].name = sm_arena_strdup(p->arena, name);
}

/* "output 0 ('z')" for messages. */
static const char *sm_ir_output_name(const sm_program *p, int k, char *buf, size_t len)
{
    const sm_ir_value *v = &p->values[p->returns[k]];
    if (v->name)
        snprintf(buf, len, "output %d ('%s')", k, v->name);
    else
        snprintf(buf, len, "output %d", k);
    return buf;
}

/* Checks out_spec k and computes the result global shape. */
static sm_err sm_ir_check_out(sm_program *p, int k, char *err, size_t errlen)
{
    const sm_ir_value *v = &p->values[p->returns[k]];
    const sm_pspec *s = &p->out_specs[k];
    char what[300], sp[300];
    sm_ir_output_name(p, k, what, sizeof what);
    sm_err e = sm_pspec_check_mesh(s, &p->mesh, err, errlen);
    if (e) {
        char inner[400];
        snprintf(inner, sizeof inner, "%s", err ? err : "");
        return sm_fail(err, errlen, e, "%s: out_spec %s: %s", what,
                       sm_pspec_format(s, sp, sizeof sp), inner);
    }
    if (p->kind != SM_PROG_JIT && (e = sm_ir_spec_manual(p, p->manual_axes, s, "out_specs",
                                                         p->nreturns > 1 ? k : -1, err, errlen)))
        return e;
    if (s->nentries > v->shape.rank)
        return sm_fail(err, errlen, SM_EINVAL,
                       "%s: out_spec %s has %d entries but the value has rank %d%s", what,
                       sm_pspec_format(s, sp, sizeof sp), s->nentries, v->shape.rank,
                       v->shape.rank == 0 ? " (a scalar needs P())" : "");
    uint32_t u = sm_ir_spec_unreduced(p, s);
    char ty[300];
    if (p->lowered ? (u & ~(v->vma | v->unreduced)) != 0 && !p->unchecked
                   : p->kind != SM_PROG_JIT && u != v->unreduced && !p->unchecked)
        return sm_fail(err, errlen, SM_EINVAL,
                       "out_specs passed to shard_map should be equal to the unreduced present "
                       "on the out_aval. Got out_specs=%s and out_aval=%s",
                       sm_pspec_format(s, sp, sizeof sp),
                       sm_program_value_type(p, p->returns[k], ty, sizeof ty));
    if (!p->lowered && p->kind != SM_PROG_JIT && !p->unchecked && u && u == v->unreduced &&
        s->unreduced_kind != v->ukind)
        return sm_fail(err, errlen, SM_EINVAL,
                       "out_specs passed to shard_map should be equal to the unreduced_kind "
                       "present on the out_aval. Got out_specs=%s and out_aval=%s",
                       sm_pspec_format(s, sp, sizeof sp),
                       sm_program_value_type(p, p->returns[k], ty, sizeof ty));
    if (!p->lowered && p->kind != SM_PROG_JIT && !p->unchecked &&
        sm_ir_spec_reduced(p, s) != v->reduced)
        return sm_fail(err, errlen, SM_EINVAL,
                       "out_specs passed to shard_map should be equal to the reduced present on "
                       "the out_aval. Got out_specs=%s and out_aval=%s",
                       sm_pspec_format(s, sp, sizeof sp),
                       sm_program_value_type(p, p->returns[k], ty, sizeof ty));
    /* -> OUT_SHARDINGS naming more unreduced axes than the value's: made
     * so, as reshard does (sm_lower); reduced axes are the type's only */
    if (p->kind == SM_PROG_JIT) { /* the result sharding of a global array */
        if (v->manual)
            return sm_fail(err, errlen, SM_EINVAL, "%s is a per-device block, not a global array",
                           what);
        p->out_global[k] = v->shape;
        char w[320];
        snprintf(w, sizeof w, "%s: out_sharding", what);
        return sm_pspec_check(s, &p->mesh, &v->shape, w, err, errlen);
    }
    p->out_global[k] = v->shape;
    for (int d = 0; d < v->shape.rank; d++)
        p->out_global[k].dims[d] *= sm_pspec_dim_factor(s, &p->mesh, d);
    return SM_OK;
}

sm_err sm_program_set_returns(sm_program *p, const int *values, const sm_pspec *out_specs, int n,
                              char *err, size_t errlen)
{
    if (n < 1)
        return sm_fail(err, errlen, SM_EINVAL, "a program must return at least one value");
    for (int k = 0; k < n; k++)
        if (values[k] < 0 || values[k] >= p->nvalues)
            return sm_fail(err, errlen, SM_EINVAL, "output %d refers to undefined value %d", k,
                           values[k]);
    int *r = sm_arena_alloc(p->arena, sizeof(int) * (size_t)n);
    sm_pspec *s = sm_arena_alloc(p->arena, sizeof(sm_pspec) * (size_t)n);
    sm_shape *g = sm_arena_alloc(p->arena, sizeof(sm_shape) * (size_t)n);
    if (!r || !s || !g)
        return sm_fail(err, errlen, SM_ENOMEM, "out of memory setting returns");
    memcpy(r, values, sizeof(int) * (size_t)n);
    if (out_specs) {
        memcpy(s, out_specs, sizeof(sm_pspec) * (size_t)n);
    } else { /* jit: each result keeps its type's sharding */
        for (int k = 0; k < n; k++) {
            const sm_ir_value *v = &p->values[values[k]];
            sm_ir_layout_to_spec(p, &v->layout, v->shape.rank, 0, &s[k]);
            for (int a = 0; a < p->mesh.naxes; a++)
                if (v->unreduced & (1u << a))
                    snprintf(s[k].unreduced[s[k].nunreduced++], SM_AXIS_NAME_MAX, "%s",
                             p->mesh.names[a]);
            s[k].unreduced_kind = v->unreduced ? v->ukind : SM_UK_SUM;
            for (int a = 0; a < p->mesh.naxes; a++)
                if (v->reduced & (1u << a))
                    snprintf(s[k].reduced[s[k].nreduced++], SM_AXIS_NAME_MAX, "%s",
                             p->mesh.names[a]);
        }
    }
    int *old_r = p->returns, old_n = p->nreturns;
    sm_pspec *old_s = p->out_specs;
    sm_shape *old_g = p->out_global;
    p->returns = r;
    p->out_specs = s;
    p->out_global = g;
    p->nreturns = n;
    for (int k = 0; k < n; k++) {
        sm_err e = sm_ir_check_out(p, k, err, errlen);
        if (e) { /* a failed call changes nothing */
            p->returns = old_r;
            p->out_specs = old_s;
            p->out_global = old_g;
            p->nreturns = old_n;
            return e;
        }
    }
    return SM_OK;
}

/* Prefixes err with "file:line:col: " when line is known. */
static sm_err sm_ir_at(const sm_program *p, int line, int col, sm_err e, char *err, size_t errlen)
{
    if (!e || !err || errlen == 0 || line <= 0)
        return e;
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", err);
    return sm_fail(err, errlen, e, "%s:%d:%d: %s", p->filename ? p->filename : "<text>", line, col,
                   msg);
}

/* The mesh axes a spec names, as a mask (the spec checked against the mesh). */
static uint32_t sm_ir_spec_axes(const sm_program *p, const sm_pspec *s)
{
    uint32_t named = sm_ir_spec_unreduced(p, s); /* lowered: blocks varying over them */
    for (int d = 0; d < s->nentries; d++)
        for (int j = 0; j < s->e[d].naxes; j++)
            named |= 1u << sm_mesh_axis(&p->mesh, s->e[d].axes[j]);
    return named;
}

/* The first mesh axis in mask that spec s names (in its order), or -1. */
static int sm_ir_spec_axis_in(const sm_program *p, const sm_pspec *s, uint32_t mask)
{
    for (int d = 0; d < s->nentries; d++)
        for (int j = 0; j < s->e[d].naxes; j++) {
            int a = sm_mesh_axis(&p->mesh, s->e[d].axes[j]);
            if (a >= 0 && (mask & (1u << a)))
                return a;
        }
    return -1;
}

sm_err sm_ir_spec_not_manual(const sm_program *p, uint32_t manual, const sm_pspec *s,
                             const char *what, char *err, size_t errlen)
{
    int a = sm_ir_spec_axis_in(p, s, manual);
    if (a < 0)
        return SM_OK;
    char sb[300], set[300];
    return sm_fail(err, errlen, SM_EINVAL,
                   "%s: the sharding %s names '%s', a manual axis of the shard_map around it "
                   "(axis_names=%s); it may name only the axes the shard_map leaves out",
                   what, sm_pspec_format(s, sb, sizeof sb), p->mesh.names[a],
                   sm_ir_axes_set_str(p, manual, set, sizeof set));
}

sm_err sm_ir_spec_manual(const sm_program *p, uint32_t manual, const sm_pspec *s, const char *what,
                         int index, char *err, size_t errlen)
{
    uint32_t all = sm_ir_all_axes(p);
    if (!manual || (manual & all) == all)
        return SM_OK;
    char set[300], sp[300], at[32] = "";
    sm_ir_axes_set_str(p, manual, set, sizeof set);
    if (index >= 0)
        snprintf(at, sizeof at, "[%d]", index);
    if (s->nunreduced || s->nreduced)
        return sm_fail(err, errlen, SM_EUNIMPLEMENTED,
                       "unreduced/reduced can only be passed to %s when shard_map is in full "
                       "manual mode. Got manual_axes: frozenset(%s), specs: %s",
                       what, set, sm_pspec_format(s, sp, sizeof sp));
    int a = sm_ir_spec_axis_in(p, s, ~manual);
    if (a >= 0)
        return sm_fail(err, errlen, SM_EINVAL,
                       "shard_map %s argument must refer to an axis marked as manual "
                       "(frozenset(%s)), but: %s%s refers to '%s'. Check the %s values passed "
                       "to shard_map.",
                       what, set, what, at, p->mesh.names[a], what);
    return SM_OK;
}

/* The replication check's refusal: what varies over the mesh axes in bad,
 * which its out_spec s does not name; every such axis is named, in mesh
 * order, as JAX's message does ({y,z}). */
static sm_err sm_ir_vma_fail(const sm_program *p, const char *what, const sm_pspec *s, uint32_t bad,
                             char *err, size_t errlen)
{
    char set[300] = "", tup[300] = "", sp[300];
    size_t o = 0, t = 0;
    int n = 0;
    for (int a = 0; a < p->mesh.naxes; a++) {
        if (!(bad & (1u << a)))
            continue;
        o += (size_t)snprintf(set + o, o < sizeof set ? sizeof set - o : 0, "%s%s", n ? "," : "",
                              p->mesh.names[a]);
        t += (size_t)snprintf(tup + t, t < sizeof tup ? sizeof tup - t : 0, "%s'%s'", n ? ", " : "",
                              p->mesh.names[a]);
        n++;
    }
    sm_pspec_format(s, sp, sizeof sp);
    if (n == 1)
        return sm_fail(err, errlen, SM_EINVAL,
                       "%s varies over mesh axis %s, but its out_spec %s does not name %s (reduce "
                       "it over %s, e.g. with psum, or name %s in the out_spec; or pass "
                       "check_vma=False)",
                       what, tup, sp, tup, tup, tup);
    return sm_fail(err, errlen, SM_EINVAL,
                   "%s varies over mesh axes {%s}, but its out_spec %s names none of them "
                   "(reduce it over (%s), e.g. with psum, or name them in the out_spec; or pass "
                   "check_vma=False)",
                   what, set, sp, tup);
}

sm_err sm_program_verify(sm_program *p, int check_vma, char *err, size_t errlen)
{
    sm_err e;
    if (p->mesh.naxes < 1 || p->mesh.naxes > SM_MAX_AXES)
        return sm_fail(err, errlen, SM_EINVAL, "the program has no mesh");
    for (int i = 0; i < p->nparams; i++) {
        sm_ir_param *pa = &p->params[i];
        if (pa->value != i)
            return sm_fail(err, errlen, SM_EINVAL, "parameter '%s' is not value %d", pa->name, i);
        if ((e = sm_ir_param_block(p, pa, &p->values[i], err, errlen)))
            return e;
    }
    if (p->nvalues != p->nparams + p->nops)
        return sm_fail(err, errlen, SM_EINVAL, "the program has %d values for %d params and %d ops",
                       p->nvalues, p->nparams, p->nops);
    for (int k = 0; k < p->nops; k++) {
        sm_ir_op *op = &p->ops[k];
        if (op->result != p->nparams + k)
            return sm_fail(err, errlen, SM_EINVAL, "op %d (%s) defines value %d, expected %d", k,
                           sm_op_name(op->kind), op->result, p->nparams + k);
        sm_ir_value *v = &p->values[op->result];
        if ((e = sm_ir_infer_op(p, op, op->result, v, err, errlen)))
            return sm_ir_at(p, op->line, op->col, e, err, errlen);
        v->def = k;
    }
    if ((e = sm_ir_loops_check(p, NULL, NULL, err, errlen)))
        return e;
    if (p->nreturns < 1)
        return sm_fail(err, errlen, SM_EINVAL, "the program returns nothing");
    for (int k = 0; k < p->nreturns; k++) {
        if (p->returns[k] < 0 || p->returns[k] >= p->nvalues)
            return sm_fail(err, errlen, SM_EINVAL, "output %d refers to undefined value %d", k,
                           p->returns[k]);
        if ((e = sm_ir_check_out(p, k, err, errlen)))
            return sm_ir_at(p, p->ret_line, p->ret_col, e, err, errlen);
    }
    for (int k = 0; check_vma && p->kind == SM_PROG_JIT && k < p->nops; k++) {
        /* the replication check of every shard_map function the jit body calls */
        const sm_ir_op *op = &p->ops[k];
        if (op->kind != SM_OP_SHARD_MAP_OUT || !op->attrs.sharding || op->attrs.unchecked)
            continue; /* (check_vma=False in its shard_map function's header) */
        const sm_pspec *s = op->attrs.sharding; /* (nested: over its own axes) */
        uint32_t bad = p->values[op->operands[0]].vma & ~sm_ir_spec_axes(p, s) & ~op->outer_axes;
        if (!bad)
            continue;
        char ty[300], what[400];
        snprintf(what, sizeof what, "a shard_map result of type %s",
                 sm_program_value_type(p, op->operands[0], ty, sizeof ty));
        e = sm_ir_vma_fail(p, what, s, bad, err, errlen);
        return sm_ir_at(p, op->line, op->col, e, err, errlen);
    }
    for (int k = 0; check_vma && !p->unchecked && p->kind != SM_PROG_JIT && k < p->nreturns; k++) {
        const sm_pspec *s = &p->out_specs[k];
        uint32_t bad = p->values[p->returns[k]].vma & ~sm_ir_spec_axes(p, s);
        if (!bad)
            continue;
        char name[300], ty[300], what[700];
        snprintf(what, sizeof what, "%s of type %s", sm_ir_output_name(p, k, name, sizeof name),
                 sm_program_value_type(p, p->returns[k], ty, sizeof ty));
        e = sm_ir_vma_fail(p, what, s, bad, err, errlen);
        return sm_ir_at(p, p->ret_line, p->ret_col, e, err, errlen);
    }
    return SM_OK;
}

char *sm_program_value_type(const sm_program *p, int value_id, char *buf, size_t len)
{
    const sm_ir_value *v = &p->values[value_id];
    if (p->kind == SM_PROG_JIT && !v->manual)
        return sm_ir_jit_type_str(p, v, buf, len);
    int laid = 0; /* a block of a shard_map Manual over some axes, sharded over others */
    for (int d = 0; p->kind == SM_PROG_JIT && d < v->shape.rank; d++)
        laid |= v->layout.n[d] > 0;
    if (laid)
        sm_ir_jit_type_str(p, v, buf, len);
    else
        sm_ir_type_str(v, buf, len);
    size_t o = strlen(buf);
    if (o < len)
        sm_ir_axes_suffix(p, v->vma, v->unreduced, v->ukind, v->reduced, buf + o, len - o);
    return buf;
}

char *sm_ir_axes_suffix(const sm_program *p, uint32_t vma, uint32_t unreduced, int ukind,
                        uint32_t reduced, char *buf, size_t len)
{
    size_t o = 0;
    if (len)
        buf[0] = 0;
    const uint32_t sets[3] = {vma, unreduced, reduced};
    const char *const tags[3] = {"V",
                                 ukind == SM_UK_MAX   ? "U_max"
                                 : ukind == SM_UK_MIN ? "U_min"
                                                      : "U",
                                 "R"};
    for (int s = 0; s < 3; s++) {
        int first = 1;
        for (int a = 0; a < p->mesh.naxes; a++) {
            if (!(sets[s] & (1u << a)))
                continue;
            if (first)
                o += (size_t)snprintf(buf + o, len > o ? len - o : 0, "%s%s:%s", o ? ", " : "{",
                                      tags[s], p->mesh.names[a]);
            else
                o += (size_t)snprintf(buf + o, len > o ? len - o : 0, ",%s", p->mesh.names[a]);
            first = 0;
        }
    }
    if (o)
        snprintf(buf + o, len > o ? len - o : 0, "}");
    return buf;
}

static int sm_ir_attrs_equal(const sm_ir_attrs *a, const sm_ir_attrs *b)
{
    if (memcmp(&a->ints, &b->ints, sizeof a->ints) ||
        memcmp(&a->ints2, &b->ints2, sizeof a->ints2) ||
        memcmp(&a->ints3, &b->ints3, sizeof a->ints3))
        return 0;
    if (a->has_ints != b->has_ints || a->has_ints2 != b->has_ints2 ||
        a->has_ints3 != b->has_ints3 || a->axis != b->axis || a->axis2 != b->axis2 ||
        a->tiled != b->tiled || a->keepdims != b->keepdims || a->unchecked != b->unchecked ||
        a->naxes != b->naxes || a->nperm != b->nperm || a->has_dtype != b->has_dtype ||
        (a->has_dtype && a->dtype != b->dtype) || a->value_is_float != b->value_is_float ||
        a->i != b->i || (a->f != b->f && !(a->f != a->f && b->f != b->f)))
        return 0;
    for (int i = 0; i < a->naxes; i++)
        if (strcmp(a->axes[i], b->axes[i]))
            return 0;
    if (a->nperm && memcmp(a->perm, b->perm, sizeof *a->perm * (size_t)a->nperm))
        return 0;
    if (!a->spec != !b->spec || (a->spec && strcmp(a->spec, b->spec)))
        return 0;
    if (!a->sharding != !b->sharding || (a->sharding && !sm_pspec_equal(a->sharding, b->sharding)))
        return 0;
    return 1;
}

int sm_program_equal(const sm_program *a, const sm_program *b)
{
    if (a->kind != b->kind || a->auto_axes != b->auto_axes ||
        a->mesh.auto_axes != b->mesh.auto_axes || a->has_out_shardings != b->has_out_shardings ||
        a->lowered != b->lowered || a->manual_axes != b->manual_axes ||
        a->unchecked != b->unchecked)
        return 0;
    if (a->mesh.naxes != b->mesh.naxes || a->nparams != b->nparams || a->nops != b->nops ||
        a->nvalues != b->nvalues || a->nreturns != b->nreturns || strcmp(a->name, b->name))
        return 0;
    for (int i = 0; i < a->mesh.naxes; i++)
        if (strcmp(a->mesh.names[i], b->mesh.names[i]) || a->mesh.sizes[i] != b->mesh.sizes[i])
            return 0;
    if (a->has_devices != b->has_devices ||
        (a->has_devices &&
         memcmp(a->mesh.devices, b->mesh.devices, sizeof(int32_t) * (size_t)a->mesh.ndevices)))
        return 0;
    for (int i = 0; i < a->nparams; i++) {
        const sm_ir_param *x = &a->params[i], *y = &b->params[i];
        if (strcmp(x->name, y->name) || x->dtype != y->dtype ||
            !sm_shape_equal(&x->global, &y->global) || !sm_pspec_equal(&x->spec, &y->spec))
            return 0;
    }
    for (int k = 0; k < a->nops; k++) {
        const sm_ir_op *x = &a->ops[k], *y = &b->ops[k];
        if (x->kind != y->kind || x->noperands != y->noperands || x->result != y->result ||
            memcmp(x->operands, y->operands, sizeof(int) * (size_t)x->noperands) ||
            !sm_ir_attrs_equal(&x->attrs, &y->attrs) || x->manual != y->manual ||
            x->manual_axes != y->manual_axes || x->outer_axes != y->outer_axes ||
            x->auto_mask != y->auto_mask || x->explicit_mask != y->explicit_mask)
            return 0;
    }
    for (int v = 0; v < a->nvalues; v++) {
        const sm_ir_value *x = &a->values[v], *y = &b->values[v];
        if (x->dtype != y->dtype || !sm_shape_equal(&x->shape, &y->shape) || x->vma != y->vma ||
            x->unreduced != y->unreduced || x->ukind != y->ukind || x->reduced != y->reduced ||
            x->weak != y->weak || x->manual != y->manual || x->hidden != y->hidden ||
            !sm_ir_layout_equal(&x->layout, &y->layout, x->shape.rank))
            return 0;
    }
    for (int k = 0; k < a->nreturns; k++)
        if (a->returns[k] != b->returns[k] || !sm_pspec_equal(&a->out_specs[k], &b->out_specs[k]))
            return 0;
    return 1;
}

int sm_program_light(const sm_program *p, int64_t max_bytes)
{
    int64_t bytes = 0;
    for (int k = 0; k < p->nops; k++) {
        sm_op_kind kind = p->ops[k].kind;
        sm_vma_rule r = sm_op_vma_rule(kind);
        if (r == SM_VMA_REMOVE || r == SM_VMA_ADD || kind == SM_OP_DOT || kind == SM_OP_MATMUL ||
            kind == SM_OP_EINSUM || sm_op_loop(kind))
            return 0;
    }
    for (int v = 0; v < p->nvalues; v++) {
        int64_t n;
        if (sm_shape_numel(&p->values[v].shape, &n, NULL, 0))
            return 0;
        bytes += n * (int64_t)sm_dtype_size(p->values[v].dtype);
        if (bytes > max_bytes)
            return 0;
    }
    return 1;
}
