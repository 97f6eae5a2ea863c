/* sm_ir_unreduced: the unreduced rules — the ur column of sm_ir_ops.def.
 *
 * A value unreduced over mesh axis a holds, on each device, a partial sum:
 * the value is the sum of the blocks along a (JAX's unreduced sharding,
 * P(..., unreduced={'a'}) and the U: of a type). No data moves to make one:
 * a product whose contracting dimension is sharded over a is unreduced over
 * a before its psum, and pcast(x, 'a', to='unreduced') says so of a block
 * inside a shard_map. The rules below are JAX's (jax/_src/lax/lax.py, the
 * *_ur_rule functions; jax/_src/lax/parallel.py, pcast), with JAX's
 * sentences: only linear ops pass partial sums on, and psum (or reshard to
 * a spec without the axis) completes them. */
#include "sm_ir_infer.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* The mesh axes of n names, as a mask (unknown names left out). */
static uint32_t sm_ir_names_mask(const sm_program *p, const char (*names)[SM_AXIS_NAME_MAX], int n)
{
    uint32_t m = 0;
    for (int k = 0; k < n && k < SM_MAX_AXES; k++) {
        int a = sm_mesh_axis(&p->mesh, names[k]);
        if (a >= 0)
            m |= 1u << a;
    }
    return m;
}

uint32_t sm_ir_spec_unreduced(const sm_program *p, const sm_pspec *s)
{
    return s ? sm_ir_names_mask(p, s->unreduced, s->nunreduced) : 0;
}

uint32_t sm_ir_spec_reduced(const sm_program *p, const sm_pspec *s)
{
    return s ? sm_ir_names_mask(p, s->reduced, s->nreduced) : 0;
}

char *sm_ir_axes_set_str(const sm_program *p, uint32_t m, char *buf, size_t len)
{
    size_t o = 0;
    if (!m) {
        snprintf(buf, len, "set()");
        return buf;
    }
    for (int a = 0; a < p->mesh.naxes; a++)
        if (m & (1u << a))
            o += (size_t)snprintf(buf + o, len > o ? len - o : 0, "%s'%s'", o ? ", " : "{",
                                  p->mesh.names[a]);
    snprintf(buf + o, len > o ? len - o : 0, "}");
    return buf;
}

static char *sm_ur_type(const sm_program *p, const sm_ir_value *v, char *buf, size_t len)
{
    uintptr_t at = (uintptr_t)v, lo = (uintptr_t)p->values;
    if (p->values && at >= lo && at < lo + sizeof *v * (size_t)p->nvalues)
        return sm_program_value_type(p, (int)((at - lo) / sizeof *v), buf, len);
    /* a value not in the program yet (the op's result) */
    if (p->kind == SM_PROG_JIT && !v->manual)
        return sm_ir_jit_type_str(p, v, buf, len);
    sm_ir_type_str(v, buf, len);
    size_t o = strlen(buf);
    sm_ir_axes_suffix(p, v->vma, v->unreduced, v->ukind, v->reduced, buf + o,
                      len > o ? len - o : 0);
    return buf;
}

/* pcast: every named axis must be in one state (varying, unreduced or
 * invarying), and (from, to) one of JAX's casts. */
static sm_err sm_ur_pcast(const sm_program *p, const sm_ir_op *op, const sm_ir_value *x,
                          sm_ir_value *out, uint32_t mask, char *err, size_t errlen)
{
    uint32_t vary = mask & x->vma, unred = mask & x->unreduced, red = mask & x->reduced,
             inv = mask & ~x->vma & ~x->unreduced & ~x->reduced;
    int nstates = !!vary + !!unred + !!red + !!inv;
    const char *to = op->attrs.spec ? op->attrs.spec : "";
    char t[300];
    if (nstates > 1) {
        char axes[200] = "", st[100] = "";
        size_t o = 0, so = 0;
        for (int i = 0; i < op->attrs.naxes; i++)
            o += (size_t)snprintf(axes + o, o < sizeof axes ? sizeof axes - o : 0, "%s'%s'",
                                  i ? ", " : "", op->attrs.axes[i]);
        const char *names[4] = {"varying", "unreduced", "reduced", "invarying"};
        const uint32_t sets[4] = {vary, unred, red, inv};
        for (int i = 0; i < 4; i++)
            if (sets[i])
                so += (size_t)snprintf(st + so, so < sizeof st ? sizeof st - so : 0, "%s'%s'",
                                       so ? ", " : "", names[i]);
        return sm_fail(err, errlen, SM_EINVAL,
                       "jax.lax.pcast can only accept axis_name which corresponds to one of "
                       "varying, unreduced, reduced or invarying state of the input. Got input "
                       "type: %s, axes: (%s%s) and input state: {%s}",
                       sm_ur_type(p, x, t, sizeof t), axes, op->attrs.naxes == 1 ? "," : "", st);
    }
    const char *from = vary ? "varying" : unred ? "unreduced" : red ? "reduced" : "invarying";
    out->reduced = x->reduced;
    if (!strcmp(from, "invarying") && !strcmp(to, "varying")) {
        out->unreduced = x->unreduced;
        return SM_OK;
    }
    if (!strcmp(from, "varying") && !strcmp(to, "unreduced")) {
        out->unreduced = x->unreduced | mask;
        return SM_OK;
    }
    if (!strcmp(from, "invarying") && !strcmp(to, "reduced")) { /* JAX's preduced */
        out->unreduced = x->unreduced;
        out->reduced = x->reduced | mask;
        return SM_OK;
    }
    if (!strcmp(from, "reduced") && !strcmp(to, "varying")) { /* JAX's reduced_vary_cast */
        out->unreduced = x->unreduced;
        out->reduced = x->reduced & ~mask;
        return SM_OK;
    }
    return sm_fail(err, errlen, SM_EINVAL, "Unsupported pcast from=%s, to='%s'", from, to);
}

sm_err sm_ir_unreduced_op(const sm_program *p, const sm_ir_op *op, const sm_ir_value *const *in,
                          sm_ir_value *out, uint32_t mask, char *err, size_t errlen)
{
    const char *name = sm_op_name(op->kind);
    uint32_t any = 0;
    for (int i = 0; i < op->noperands; i++)
        any |= in[i]->unreduced;
    uint32_t u0 = op->noperands > 0 ? in[0]->unreduced : 0;
    uint32_t u1 = op->noperands > 1 ? in[1]->unreduced : 0;
    char a[300], b[300];
    out->unreduced = 0;
    out->ukind = SM_UK_SUM;
    if (op->attrs.sharding) { /* its unreduced axes are read below */
        sm_err e = sm_pspec_check_mesh(op->attrs.sharding, &p->mesh, err, errlen);
        if (e)
            return e;
    }
    sm_ur_rule rule = sm_op_ur_rule(op->kind);
    /* partial maxima (minima) pass through reshard and shard_map's edges
     * only: every other rule is of partial sums (JAX's getu(..., kind=sum)) */
    for (int i = 0;
         rule != SM_UR_RESHARD && rule != SM_UR_MANUAL && rule != SM_UR_NONE && i < op->noperands;
         i++)
        if (in[i]->unreduced && in[i]->ukind != SM_UK_SUM)
            return sm_fail(err, errlen, SM_EINVAL,
                           "%s: Expected unreduced_kind=UnreducedKind.sum but got "
                           "UnreducedKind.%s. Got %s",
                           name, sm_pspec_kind_name(in[i]->ukind),
                           sm_ur_type(p, in[i], a, sizeof a));
    switch (rule) {
    case SM_UR_NONE:
        if (any)
            return sm_fail(err, errlen, SM_EUNIMPLEMENTED,
                           "unreduced rule for %s is not implemented (reduce the operand first: "
                           "psum in a shard_map, or reshard)",
                           name);
        return SM_OK;
    case SM_UR_KEEP:
        out->unreduced = u0;
        return SM_OK;
    case SM_UR_SAME: {
        /* the data operands, and the one that must not be unreduced */
        int ctl = op->kind == SM_OP_WHERE ? 0 : op->kind == SM_OP_SCATTER_ADD ? 1 : -1;
        int first = ctl == 0 ? 1 : 0;
        if (ctl >= 0 && in[ctl]->unreduced)
            return sm_fail(err, errlen, SM_EINVAL, "%s cannot be unreduced. Got %s",
                           op->kind == SM_OP_WHERE ? "select `which`" : "scatter indices",
                           sm_ur_type(p, in[ctl], a, sizeof a));
        for (int i = first; i < op->noperands; i++) {
            if (i == ctl || in[i]->unreduced == in[first]->unreduced)
                continue;
            if (op->kind == SM_OP_SCATTER_ADD)
                return sm_fail(err, errlen, SM_EINVAL,
                               "scatter operand and updates must be unreduced along the same "
                               "axes. Got operand sharding %s and updates sharding %s",
                               sm_ur_type(p, in[0], a, sizeof a),
                               sm_ur_type(p, in[2], b, sizeof b));
            return sm_fail(err, errlen, SM_EINVAL,
                           "%s: all operands should be unreduced along the same mesh axes. Got "
                           "%s and %s",
                           op->kind == SM_OP_WHERE ? "select" : name,
                           sm_ur_type(p, in[first], a, sizeof a),
                           sm_ur_type(p, in[i], b, sizeof b));
        }
        out->unreduced = in[first]->unreduced;
        return SM_OK;
    }
    case SM_UR_ADD:
        if (u0 && u1 && u0 != u1)
            return sm_fail(err, errlen, SM_EINVAL,
                           "lhs and rhs to `add` must be unreduced along the same mesh axes. Got "
                           "lhs=%s, rhs=%s",
                           sm_ir_axes_set_str(p, u0, a, sizeof a),
                           sm_ir_axes_set_str(p, u1, b, sizeof b));
        if (!u0 != !u1) {
            const char *l = u0 ? "lhs" : "rhs", *r = u0 ? "rhs" : "lhs";
            return sm_fail(err, errlen, SM_EINVAL,
                           "%s is unreduced while %s is not. `add` operation does not allow this "
                           "because there will be implicit communication. Please reduce %s via "
                           "`reshard` before calling `add`.",
                           l, r, l);
        }
        out->unreduced = u0;
        return SM_OK;
    case SM_UR_MUL:
        if (u0 && u1)
            return sm_fail(err, errlen, SM_EINVAL,
                           "lhs and rhs to `mul` cannot be unreduced since mul is bilinear. Got "
                           "lhs=%s, rhs=%s",
                           sm_ir_axes_set_str(p, u0, a, sizeof a),
                           sm_ir_axes_set_str(p, u1, b, sizeof b));
        /* linear in the unreduced operand when the other is reduced over
         * the same axes (replicated, its cotangent unreduced) */
        if (any && any != (u0 ? in[1] : in[0])->reduced)
            return sm_fail(err, errlen, SM_EINVAL,
                           "%s should be reduced along the same axes %s is unreduced on. Got "
                           "lhs=%s and rhs=%s",
                           u0 ? "RHS" : "LHS", u0 ? "LHS" : "RHS",
                           sm_ur_type(p, in[0], a, sizeof a), sm_ur_type(p, in[1], b, sizeof b));
        out->unreduced = any;
        return SM_OK;
    case SM_UR_DIV:
        if (u1)
            return sm_fail(err, errlen, SM_EINVAL,
                           "The denominator cannot be unreduced passed to `div`. Got y=%s",
                           sm_ur_type(p, in[1], b, sizeof b));
        if (u0 && u0 != in[1]->reduced)
            return sm_fail(err, errlen, SM_EINVAL,
                           "Denominator should be reduced along the same axes numerator is "
                           "unreduced on. Got x=%s, y=%s",
                           sm_ur_type(p, in[0], a, sizeof a), sm_ur_type(p, in[1], b, sizeof b));
        out->unreduced = u0;
        return SM_OK;
    case SM_UR_DOT:
        if (any)
            return sm_fail(err, errlen, SM_EINVAL,
                           "lhs or rhs passed to dot_general cannot be unreduced. Got lhs=%s and "
                           "rhs=%s",
                           sm_ur_type(p, in[0], a, sizeof a),
                           op->noperands > 1 ? sm_ur_type(p, in[1], b, sizeof b) : "None");
        /* the sharding rule checks out_sharding's unreduced axes against
         * the contracting dimensions (sm_ir_shard_dot) */
        out->unreduced = sm_ir_spec_unreduced(p, op->attrs.sharding);
        if (out->unreduced && op->attrs.sharding->unreduced_kind != SM_UK_SUM)
            return sm_fail(err, errlen, SM_EINVAL,
                           "`out_sharding` passed to `dot_general` can only contain unreduced of "
                           "kind `sum`. Got out_sharding=%s",
                           sm_pspec_format(op->attrs.sharding, a, sizeof a));
        return SM_OK;
    case SM_UR_PSUM:
        if ((u0 & mask) && sm_ir_has_groups(op))
            return sm_fail(err, errlen, SM_EUNIMPLEMENTED,
                           "%s of a value unreduced over %s with axis_index_groups is not "
                           "supported",
                           name, sm_ir_axes_set_str(p, u0 & mask, a, sizeof a));
        out->unreduced = u0 & ~mask;
        return SM_OK;
    case SM_UR_PCAST:
        return sm_ur_pcast(p, op, in[0], out, mask, err, errlen);
    case SM_UR_RESHARD: {
        uint32_t t = sm_ir_spec_unreduced(p, op->attrs.sharding);
        int tk = t ? op->attrs.sharding->unreduced_kind : SM_UK_SUM;
        if (u0 && t && tk != in[0]->ukind)
            return sm_fail(err, errlen, SM_EINVAL,
                           "The unreduced_kind of input and output sharding passed to "
                           "`jax.reshard` should be the same. Got input %s and out_sharding %s",
                           sm_ur_type(p, in[0], a, sizeof a),
                           sm_pspec_format(op->attrs.sharding, b, sizeof b));
        if ((t & ~u0) && tk != SM_UK_SUM) /* only zeros make partial sums of a whole value */
            return sm_fail(err, errlen, SM_EINVAL,
                           "out_sharding %s cannot be more unreduced than the input %s when its "
                           "unreduced_kind is not sum",
                           sm_pspec_format(op->attrs.sharding, b, sizeof b),
                           sm_ur_type(p, in[0], a, sizeof a));
        out->ukind = tk;
        /* reshard to more unreduced axes: the first device along them
         * keeps the value, the others hold zeros (JAX's; sm_lower) */
        if ((t & ~u0) && op->kind != SM_OP_RESHARD)
            return sm_fail(err, errlen, SM_EINVAL,
                           "%s: %s is not unreduced over %s, so it cannot be made so (unreduced "
                           "values come from dot_general with out_sharding=P(..., "
                           "unreduced={...}) or from a shard_map's out_specs)",
                           name, sm_ur_type(p, in[0], a, sizeof a),
                           sm_ir_axes_set_str(p, t & ~u0, b, sizeof b));
        out->unreduced = t; /* the others are summed (sm_lower) */
        return SM_OK;
    }
    case SM_UR_MANUAL: {
        const sm_pspec *s = op->attrs.sharding;
        uint32_t t = sm_ir_spec_unreduced(p, s);
        char sp[300];
        if (t != u0 && op->kind == SM_OP_SHARD_MAP_OUT && !op->attrs.unchecked)
            return sm_fail(err, errlen, SM_EINVAL,
                           "out_specs passed to shard_map should be equal to the unreduced "
                           "present on the out_aval. Got out_specs=%s and out_aval=%s",
                           s ? sm_pspec_format(s, sp, sizeof sp) : "None",
                           sm_ur_type(p, in[0], a, sizeof a));
        if (t != u0 && op->kind != SM_OP_SHARD_MAP_OUT) /* (out: check_vma=False, as it is) */
            return sm_fail(err, errlen, SM_EINVAL,
                           "in_specs passed to shard_map should be equal to the unreduced "
                           "present on the argument. Got in_specs=%s and argument=%s",
                           s ? sm_pspec_format(s, sp, sizeof sp) : "None",
                           sm_ur_type(p, in[0], a, sizeof a));
        int tk = t ? s->unreduced_kind : SM_UK_SUM;
        if (t && u0 == t && tk != in[0]->ukind &&
            (op->kind != SM_OP_SHARD_MAP_OUT || !op->attrs.unchecked))
            return sm_fail(err, errlen, SM_EINVAL,
                           "%s passed to shard_map should be equal to the unreduced_kind present "
                           "on the %s. Got %s=%s and %s=%s",
                           op->kind == SM_OP_SHARD_MAP_OUT ? "out_specs"
                                                           : "in_specs containing "
                                                             "unreduced_kind",
                           op->kind == SM_OP_SHARD_MAP_OUT ? "out_aval" : "in_aval",
                           op->kind == SM_OP_SHARD_MAP_OUT ? "out_specs" : "in_specs",
                           sm_pspec_format(s, sp, sizeof sp),
                           op->kind == SM_OP_SHARD_MAP_OUT ? "out_aval" : "in_aval",
                           sm_ur_type(p, in[0], a, sizeof a));
        out->unreduced = t;
        out->ukind = tk;
        return SM_OK;
    }
    }
    return SM_OK;
}

/* The mesh axes v is laid out (sharded) or varies over. */
static uint32_t sm_rd_sharded(const sm_ir_value *v)
{
    uint32_t m = v->vma;
    for (int d = 0; d < v->shape.rank; d++)
        for (int j = 0; j < v->layout.n[d]; j++)
            m |= 1u << v->layout.ax[d][j];
    return m;
}

/* JAX's default_nary_reduced_rule over in[first..n) (skip: an operand left
 * out, -1 for none): the operands reduced over some axes are reduced over
 * the same ones, and every other operand is partial over them too
 * (unreduced: a product's partial sums) — neither replicated (which would
 * need its cotangent summed) nor sharded or varying. A Python number
 * (weak) takes the others' type. */
/* The axes the operands in[first..n) (skip left out) reduced over some
 * are reduced over (*r); the index of the first one reduced over others, or
 * -1 when they agree. */
static int sm_rd_agree(const sm_ir_value *const *in, int first, int n, int skip, uint32_t *r)
{
    *r = 0;
    for (int i = first; i < n; i++) {
        if (i == skip || !in[i]->reduced)
            continue;
        if (*r && *r != in[i]->reduced)
            return i;
        *r = in[i]->reduced;
    }
    return -1;
}

static sm_err sm_rd_nary(const sm_program *p, const sm_ir_value *const *in, int first, int n,
                         int skip, uint32_t *out, char *err, size_t errlen)
{
    uint32_t r;
    char a[300], b[300], t[300];
    int bad = sm_rd_agree(in, first, n, skip, &r);
    if (bad >= 0)
        return sm_fail(err, errlen, SM_EINVAL,
                       "All inputs should be reduced across the same mesh axes. Got specs: {%s, "
                       "%s}",
                       sm_ir_axes_set_str(p, r, a, sizeof a),
                       sm_ir_axes_set_str(p, in[bad]->reduced, b, sizeof b));
    for (int i = first; r && i < n; i++) {
        const sm_ir_value *v = in[i];
        if (i == skip || (v->weak && v->shape.rank == 0))
            continue;
        uint32_t sh = sm_rd_sharded(v);
        uint32_t rep = sm_ir_all_axes(p) & ~(sh | v->unreduced | v->reduced);
        if (rep & r)
            return sm_fail(err, errlen, SM_EINVAL,
                           "Inputs cannot be replicated on the same axes that another input is "
                           "reduced on. Got input type: %s and reduced spec: %s",
                           sm_ur_type(p, v, t, sizeof t), sm_ir_axes_set_str(p, r, a, sizeof a));
        if (sh & r)
            return sm_fail(err, errlen, SM_EINVAL,
                           "Inputs cannot be sharded/varying on the same axes that another input "
                           "is reduced on. Reshard the input which is reduced to be sharded on "
                           "the mesh axes it is reduced on via `jax.sharding.reshard(inp, "
                           "jax.P(...))`. Got input type: %s and reduced spec: %s",
                           sm_ur_type(p, v, t, sizeof t), sm_ir_axes_set_str(p, r, a, sizeof a));
    }
    *out = r;
    return SM_OK;
}

/* JAX's _concatenate_reduced_rule: the operands reduced over some axes are
 * reduced over the same ones; the result is too. */
static sm_err sm_rd_same(const sm_program *p, const sm_op_kind k, const sm_ir_value *const *in,
                         int first, int n, int skip, uint32_t *out, char *err, size_t errlen)
{
    uint32_t r;
    char a[300], b[300];
    int bad = sm_rd_agree(in, first, n, skip, &r);
    if (bad >= 0)
        return sm_fail(err, errlen, SM_EINVAL,
                       "%s: All operands should be reduced along the same mesh axes. Got reduced "
                       "specs: {%s, %s}",
                       sm_op_name(k), sm_ir_axes_set_str(p, r, a, sizeof a),
                       sm_ir_axes_set_str(p, in[bad]->reduced, b, sizeof b));
    *out = r;
    return SM_OK;
}

sm_err sm_ir_reduced_op(const sm_program *p, const sm_ir_op *op, const sm_ir_value *const *in,
                        sm_ir_value *out, uint32_t mask, char *err, size_t errlen)
{
    const int n = op->noperands;
    const uint32_t r0 = n > 0 ? in[0]->reduced : 0;
    const sm_pspec *s = op->attrs.sharding;
    const uint32_t sr = sm_ir_spec_reduced(p, s);
    char a[300], b[300];
    sm_err e = SM_OK;
    if (p->lowered) { /* per-device blocks: a reduced value is the replicated block it is */
        out->reduced = 0;
        return SM_OK;
    }
    if (op->kind == SM_OP_PCAST) /* sm_ur_pcast */
        return SM_OK;
    out->reduced = r0;
    switch (op->kind) {
    case SM_OP_DOT: /* JAX's _dot_general_ur_rule does not propagate reduced */
    case SM_OP_MATMUL:
    case SM_OP_EINSUM:
        out->reduced = 0;
        return SM_OK;
    case SM_OP_ZEROS:
    case SM_OP_ONES:
    case SM_OP_FULL:
    case SM_OP_ARANGE:
    case SM_OP_CONST:
    case SM_OP_RESHARD: /* to the spec's reduced axes (the data stays replicated over them) */
    case SM_OP_WITH_SHARDING_CONSTRAINT:
        out->reduced = sr;
        return SM_OK;
    case SM_OP_ASTYPE:
    case SM_OP_BROADCAST_TO: /* JAX's broadcast_in_dim: its out_sharding's, else the operand's */
        out->reduced = s ? sr : r0;
        return SM_OK;
    case SM_OP_RESHAPE:
    case SM_OP_EXPAND_DIMS:
    case SM_OP_SQUEEZE:
        if (r0 && s && sr != r0)
            return sm_fail(err, errlen, SM_EINVAL,
                           "out_sharding passed to reshape must be reduced over the same mesh "
                           "axes as operand. Got out_sharding: %s and operand type: %s",
                           sm_pspec_format(s, a, sizeof a), sm_ur_type(p, in[0], b, sizeof b));
        if (!r0 && sr)
            return sm_fail(err, errlen, SM_EINVAL,
                           "out_sharding passed to `reshape` cannot contain reduced axes. Got %s",
                           sm_pspec_format(s, a, sizeof a));
        return SM_OK;
    case SM_OP_CONCATENATE:
        return sm_rd_same(p, op->kind, in, 0, n, -1, &out->reduced, err, errlen);
    case SM_OP_WHERE: /* JAX's _select_ur_rule: the cases' (the condition's does not matter) */
        return sm_rd_same(p, op->kind, in, 1, n, -1, &out->reduced, err, errlen);
    case SM_OP_DYNAMIC_UPDATE_SLICE: /* operand and update; the starts are indices */
        return sm_rd_same(p, op->kind, in, 0, 2, -1, &out->reduced, err, errlen);
    case SM_OP_SCATTER:
    case SM_OP_SCATTER_ADD:
    case SM_OP_SCATTER_MUL:
    case SM_OP_SCATTER_MIN:
    case SM_OP_SCATTER_MAX: /* operand and updates; the indices are not data */
        return sm_rd_same(p, op->kind, in, 0, n, 1, &out->reduced, err, errlen);
    case SM_OP_TAKE:
    case SM_OP_TAKE_ALONG_AXIS: /* JAX's _gather_reduced_rule */
        if (in[1]->reduced)
            return sm_fail(err, errlen, SM_EINVAL,
                           "gather indices cannot be reduced. Got indices sharding %s.",
                           sm_ur_type(p, in[1], a, sizeof a));
        out->reduced = r0 & ~sm_rd_sharded(in[1]);
        return SM_OK;
    case SM_OP_DYNAMIC_SLICE: /* the operand's: the starts are not data */
    case SM_OP_DYNAMIC_SLICE_IN_DIM:
    case SM_OP_SEGMENT_SUM:
    case SM_OP_WHILE_CARRY:
    case SM_OP_WHILE_TEST:
    case SM_OP_WHILE_NEXT:
    case SM_OP_WHILE_END:
        return SM_OK;
    case SM_OP_SHARD_MAP_IN: /* the in_spec (out_spec) says reduced= exactly when it is */
    case SM_OP_SHARD_MAP_OUT: {
        int is_out = op->kind == SM_OP_SHARD_MAP_OUT;
        if (sr != r0 && !(is_out && op->attrs.unchecked)) {
            if (s)
                sm_pspec_format(s, a, sizeof a);
            else
                snprintf(a, sizeof a, "%s", is_out ? "None" : "P()");
            sm_ur_type(p, in[0], b, sizeof b);
            return is_out ? sm_fail(err, errlen, SM_EINVAL,
                                    "out_specs passed to shard_map should be equal to the reduced "
                                    "present on the out_aval. Got out_specs=%s and out_aval=%s",
                                    a, b)
                          : sm_fail(err, errlen, SM_EINVAL,
                                    "in_specs containing reduced %s passed to shard_map should be "
                                    "equal to the reduced present on the in_aval %s",
                                    a, b);
        }
        out->reduced = sr;
        return SM_OK;
    }
    case SM_OP_ALL_GATHER:
        if (op->attrs.spec && !strcmp(op->attrs.spec, "reduced")) { /* JAX's all_gather_reduced */
            if (r0 & mask)
                return sm_fail(err, errlen, SM_EINVAL,
                               "all_gather_reduced's input cannot be reduced across the "
                               "axis_name. Got x=%s and axis_name=%s",
                               sm_ur_type(p, in[0], a, sizeof a),
                               sm_ir_axes_set_str(p, r0 & mask, b, sizeof b));
            out->reduced = r0 | mask;
            return SM_OK;
        }
        out->reduced = r0 & ~mask;
        return SM_OK;
    default:
        break;
    }
    if (sm_op_vma_rule(op->kind) != SM_VMA_UNION) { /* the other collectives */
        out->reduced = r0 & ~mask;
        return SM_OK;
    }
    if (n >= 2) { /* elementwise (and where): JAX's nary rule */
        if ((e = sm_rd_nary(p, in, 0, n, -1, &out->reduced, err, errlen)))
            return e;
        /* a product of partial sums and a value reduced over their axes is
         * partial sums (JAX's mul and div rules: the set difference) */
        out->reduced &= ~out->unreduced;
    }
    return SM_OK;
}
