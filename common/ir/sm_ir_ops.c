/* sm_ir_ops: the op table expanded (names, arity, rules, signatures), the
 * shared type helpers of the rules, and sm_ir_infer_op, which runs one op's
 * rule and derives its varying axes. */
#include "sm_ir_infer.h"

#include <stdio.h>
#include <string.h>

typedef struct {
    const char *name;
    int min, max;
    sm_ir_infer_fn infer;
    sm_ir_shard_fn shard;
    sm_vma_rule vma;
    sm_ur_rule ur;
    const char *sig;
} sm_op_info;

static const sm_op_info sm_ops[] = {
#define SM_OP(e, name, mn, mx, infer, shard, vma, ur, exec, kern, sig)                             \
    {name, mn, mx, infer, shard, vma, ur, sig},
#include "sm_ir_ops.def"
#undef SM_OP
};
_Static_assert(sizeof(sm_ops) / sizeof(sm_ops[0]) == SM_OP_COUNT, "one row per op");

static int sm_op_valid(sm_op_kind k)
{
    return (int)k >= 0 && k < SM_OP_COUNT;
}

const char *sm_op_name(sm_op_kind k)
{
    return sm_op_valid(k) ? sm_ops[k].name : "?";
}

int sm_op_lookup(const char *name, sm_op_kind *out)
{
    for (int k = 0; k < SM_OP_COUNT; k++) {
        if (strcmp(name, sm_ops[k].name) == 0) {
            *out = (sm_op_kind)k;
            return 0;
        }
    }
    return -1;
}

sm_vma_rule sm_op_vma_rule(sm_op_kind k)
{
    return sm_op_valid(k) ? sm_ops[k].vma : SM_VMA_UNION;
}

sm_ur_rule sm_op_ur_rule(sm_op_kind k)
{
    return sm_op_valid(k) ? sm_ops[k].ur : SM_UR_NONE;
}

const char *sm_op_signature(sm_op_kind k)
{
    return sm_op_valid(k) ? sm_ops[k].sig : "";
}

void sm_op_arity(sm_op_kind k, int *min, int *max)
{
    *min = sm_op_valid(k) ? sm_ops[k].min : 0;
    *max = sm_op_valid(k) ? sm_ops[k].max : 0;
}

int sm_op_global_only(sm_op_kind k)
{
    return k == SM_OP_RESHARD || k == SM_OP_WITH_SHARDING_CONSTRAINT || k == SM_OP_SHARD_MAP_IN ||
           k == SM_OP_SHARD_MAP_OUT;
}

int sm_op_loop(sm_op_kind k)
{
    return k == SM_OP_WHILE_CARRY || k == SM_OP_WHILE_TEST || k == SM_OP_WHILE_NEXT ||
           k == SM_OP_WHILE_END;
}

int sm_op_params(sm_op_kind kind, sm_op_param *out, int max)
{
    const char *sig = sm_op_signature(kind);
    int n = 0;
    while (*sig && n < max) {
        sm_op_param *p = &out[n++];
        memset(p, 0, sizeof *p);
        if (*sig == '?') {
            p->optional = 1;
            sig++;
        }
        for (int k = 0; *sig && *sig != ':' && k < 31; k++)
            p->name[k] = *sig++;
        if (*sig == ':')
            sig++;
        p->kind = *sig ? *sig++ : 0;
        p->field = (*sig && *sig != ' ') ? *sig++ : 0;
        while (*sig == ' ')
            sig++;
    }
    return n;
}

void sm_ir_attrs_normalize(sm_ir_op *op)
{
    sm_op_param pm[16];
    int n = sm_op_params(op->kind, pm, 16);
    for (int j = 0; j < n; j++) {
        if (pm[j].optional)
            continue;
        if ((pm[j].kind == 'l' && pm[j].field == 'L') || pm[j].kind == 'w')
            op->attrs.has_ints = 1;
        if (pm[j].kind == 'l' && pm[j].field == 'M')
            op->attrs.has_ints2 = 1;
    }
}

char *sm_ir_shape_str(const sm_shape *s, char *buf, size_t len)
{
    size_t o = 0;
    o += (size_t)snprintf(buf + o, len > o ? len - o : 0, "[");
    for (int d = 0; d < s->rank; d++)
        o += (size_t)snprintf(buf + o, len > o ? len - o : 0, "%s%lld", d ? "," : "",
                              (long long)s->dims[d]);
    snprintf(buf + o, len > o ? len - o : 0, "]");
    return buf;
}

char *sm_ir_type_str(const sm_ir_value *v, char *buf, size_t len)
{
    char sh[200];
    snprintf(buf, len, "%s%s", sm_dtype_name(v->dtype), sm_ir_shape_str(&v->shape, sh, sizeof sh));
    return buf;
}

void sm_ir_set(sm_ir_value *out, sm_dtype t, const sm_shape *s)
{
    out->dtype = t;
    out->shape = *s;
    out->weak = 0;
}

int sm_ir_norm_axis(int64_t axis, int rank, int *out)
{
    if (axis < -rank || axis >= rank)
        return -1;
    *out = (int)(axis < 0 ? axis + rank : axis);
    return 0;
}

int sm_ir_broadcast(const sm_shape *a, const sm_shape *b, sm_shape *out)
{
    sm_shape r = {.rank = a->rank > b->rank ? a->rank : b->rank};
    for (int d = 0; d < r.rank; d++) {
        int da = d - (r.rank - a->rank), db = d - (r.rank - b->rank);
        int64_t x = da >= 0 ? a->dims[da] : 1, y = db >= 0 ? b->dims[db] : 1;
        if (x != y && x != 1 && y != 1)
            return -1;
        r.dims[d] = x == 1 ? y : x;
    }
    *out = r;
    return 0;
}

/* 0 bool, 1 integer, 2 float: the kinds of JAX's promotion lattice. */
static int sm_ir_kind(sm_dtype t)
{
    return t == SM_BOOL ? 0 : sm_dtype_is_float(t) ? 2 : 1;
}

sm_dtype sm_ir_promote(sm_dtype a, int aw, sm_dtype b, int bw, int *weak)
{
    int ka = sm_ir_kind(a), kb = sm_ir_kind(b);
    *weak = aw && bw;
    if (aw != bw) { /* a weak scalar takes the other side's type unless it is of a higher kind */
        sm_dtype w = aw ? a : b, s = aw ? b : a;
        int kw = aw ? ka : kb, ks = aw ? kb : ka;
        if (kw <= ks)
            return s;
        return kw == 2 ? SM_F32 : w == SM_BOOL ? s : SM_I32;
    }
    if (a == b)
        return a;
    if (ka != kb)
        return ka > kb ? a : b;
    if (ka == 2) {
        if ((a == SM_F16 && b == SM_BF16) || (a == SM_BF16 && b == SM_F16))
            return SM_F32;
        return sm_dtype_size(a) >= sm_dtype_size(b) ? a : b;
    }
    return sm_dtype_size(a) >= sm_dtype_size(b) ? a : b; /* u8 < i32 < i64 */
}

sm_err sm_ir_axes_resolve(const sm_program *p, const sm_ir_op *op, uint32_t *mask, int64_t *n,
                          char *err, size_t errlen)
{
    const sm_ir_attrs *a = &op->attrs;
    const char *name = sm_op_name(op->kind);
    if (a->naxes < 1)
        return sm_fail(err, errlen, SM_EINVAL, "%s: expected at least one mesh axis name", name);
    *mask = 0;
    *n = 1;
    for (int i = 0; i < a->naxes; i++) {
        int ax = sm_mesh_axis(&p->mesh, a->axes[i]);
        if (ax < 0)
            return sm_fail(err, errlen, SM_EINVAL,
                           "%s: unknown axis name '%s': the mesh has no such axis", name,
                           a->axes[i]);
        if (*mask & (1u << ax))
            return sm_fail(err, errlen, SM_EINVAL, "%s: axis '%s' is named twice", name,
                           a->axes[i]);
        *mask |= 1u << ax;
        *n *= p->mesh.sizes[ax];
    }
    return SM_OK;
}

/* Attributes from the builder or the wire are checked before any rule reads them. */
static sm_err sm_ir_attrs_check(const sm_ir_op *op, char *err, size_t errlen)
{
    const sm_ir_attrs *a = &op->attrs;
    const char *name = sm_op_name(op->kind);
    const sm_ir_ints *lists[3] = {&a->ints, &a->ints2, &a->ints3};
    for (int l = 0; l < 3; l++) {
        if (lists[l]->n < 0 || lists[l]->n > SM_IR_MAX_INTS)
            return sm_fail(err, errlen, SM_EINVAL, "%s: an integer list has %d entries (0..%d)",
                           name, lists[l]->n, SM_IR_MAX_INTS);
        for (int i = 0; i < lists[l]->n; i++)
            if (lists[l]->v[i] > SM_IR_MAX_DIM || lists[l]->v[i] < -SM_IR_MAX_DIM)
                return sm_fail(err, errlen, SM_EINVAL, "%s: integer attribute %lld is too large",
                               name, (long long)lists[l]->v[i]);
    }
    if (a->axis > SM_IR_MAX_DIM || a->axis < -SM_IR_MAX_DIM || a->axis2 > SM_IR_MAX_DIM ||
        a->axis2 < -SM_IR_MAX_DIM)
        return sm_fail(err, errlen, SM_EINVAL, "%s: axis attribute out of range", name);
    if (a->naxes < 0 || a->naxes > SM_MAX_AXES)
        return sm_fail(err, errlen, SM_EINVAL, "%s: %d axis names (0..%d)", name, a->naxes,
                       SM_MAX_AXES);
    for (int i = 0; i < a->naxes; i++)
        if (!memchr(a->axes[i], 0, SM_AXIS_NAME_MAX))
            return sm_fail(err, errlen, SM_EINVAL, "%s: axis name %d is too long", name, i);
    if (a->nperm < 0 || (a->nperm > 0 && !a->perm))
        return sm_fail(err, errlen, SM_EINVAL, "%s: bad perm list", name);
    if (a->has_dtype && ((int)a->dtype < 0 || a->dtype >= SM_DTYPE_COUNT))
        return sm_fail(err, errlen, SM_EINVAL, "%s: unknown dtype %d", name, (int)a->dtype);
    return SM_OK;
}

/* A jit program's shard_map_in and shard_map_out of a shard_map function
 * Manual over some of the mesh's axes (op->manual_axes): its specs name only
 * those (JAX's sentences). */
static sm_err sm_ir_manual_edge(const sm_program *p, const sm_ir_op *op, char *err, size_t errlen)
{
    if ((op->kind != SM_OP_SHARD_MAP_IN && op->kind != SM_OP_SHARD_MAP_OUT) || !op->manual_axes ||
        !op->attrs.sharding)
        return SM_OK;
    if (op->outer_axes & ~op->manual_axes)
        return sm_fail(err, errlen, SM_EINVAL, "%s: the axes Manual around it must be Manual in it",
                       sm_op_name(op->kind));
    return sm_ir_spec_manual(p, op->manual_axes & ~op->outer_axes, op->attrs.sharding,
                             op->kind == SM_OP_SHARD_MAP_IN ? "in_specs" : "out_specs", -1, err,
                             errlen);
}

sm_err sm_ir_infer_op(const sm_program *p, const sm_ir_op *op, int limit, sm_ir_value *out,
                      char *err, size_t errlen)
{
    if (!sm_op_valid(op->kind))
        return sm_fail(err, errlen, SM_EINVAL, "unknown op kind %d", (int)op->kind);
    const sm_op_info *info = &sm_ops[op->kind];
    sm_err ae = sm_ir_attrs_check(op, err, errlen);
    if (ae)
        return ae;
    if (op->noperands < info->min || op->noperands > info->max) {
        if (info->min == info->max)
            return sm_fail(err, errlen, SM_EINVAL, "%s takes %d array operand%s, got %d",
                           info->name, info->min, info->min == 1 ? "" : "s", op->noperands);
        return sm_fail(err, errlen, SM_EINVAL, "%s takes %d to %d array operands, got %d",
                       info->name, info->min, info->max, op->noperands);
    }
    int jit = p->kind == SM_PROG_JIT;
    int global_only = sm_op_global_only(op->kind);
    if (!jit && (global_only || op->attrs.sharding))
        return sm_fail(err, errlen, SM_EINVAL,
                       "%s%s belongs to global-view (jit) programs; a shard_map body works on "
                       "blocks and moves data with collectives",
                       info->name, global_only ? "" : ": out_sharding=");
    /* a shard_map Manual over some axes only types its values over the
     * others as a jit body does: reshard and with_sharding_constraint act
     * on those */
    int partial = jit && op->manual && op->manual_axes;
    int nested = partial && op->outer_axes &&
                 (op->kind == SM_OP_SHARD_MAP_IN || op->kind == SM_OP_SHARD_MAP_OUT);
    if (jit && op->manual && global_only && !nested &&
        !(partial && (op->kind == SM_OP_RESHARD || op->kind == SM_OP_WITH_SHARDING_CONSTRAINT)))
        return sm_fail(err, errlen, SM_EINVAL, "%s cannot be used inside a shard_map function",
                       info->name);
    if (jit && op->manual && op->attrs.sharding && !partial)
        return sm_fail(err, errlen, SM_EINVAL,
                       "%s: out_sharding= cannot be used inside a shard_map function", info->name);
    const sm_ir_value *in[SM_OP_MAXARGS];
    uint32_t vma = 0;
    for (int i = 0; i < op->noperands; i++) {
        int id = op->operands[i];
        if (id < 0 || id >= limit)
            return sm_fail(err, errlen, SM_EINVAL,
                           "%s: operand %d refers to value %d, which is not defined before it",
                           info->name, i, id);
        in[i] = &p->values[id];
        vma |= in[i]->vma;
        /* a block may only feed per-device ops (and shard_map_out); a global
         * value only global ops (and shard_map_in) */
        int want_manual = op->kind == SM_OP_SHARD_MAP_OUT  ? 1
                          : op->kind == SM_OP_SHARD_MAP_IN ? nested
                                                           : op->manual;
        if (jit && in[i]->manual != want_manual)
            return sm_fail(err, errlen, SM_EINVAL,
                           "%s: operand %d is %s, but the op is %s (values cross a shard_map "
                           "function's boundary only as its arguments and results)",
                           info->name, i, in[i]->manual ? "a per-device block" : "a global array",
                           op->manual ? "per-device" : "global");
    }
    sm_err e = jit ? sm_ir_manual_edge(p, op, err, errlen) : SM_OK;
    if (e || (e = info->infer(p, op, in, out, err, errlen)))
        return e;
    out->manual = jit && (op->manual || op->kind == SM_OP_SHARD_MAP_IN);
    int64_t numel = 1;
    for (int d = 0; d < out->shape.rank; d++) {
        if (out->shape.dims[d] > SM_IR_MAX_DIM ||
            __builtin_mul_overflow(numel, out->shape.dims[d], &numel)) {
            char sh[200];
            return sm_fail(err, errlen, SM_EINVAL, "%s: result shape %s is too large", info->name,
                           sm_ir_shape_str(&out->shape, sh, sizeof sh));
        }
    }
    uint32_t mask = 0;
    int64_t n = 1;
    if (info->vma != SM_VMA_UNION && !(info->vma == SM_VMA_NONE && op->attrs.naxes == 0)) {
        if ((e = sm_ir_axes_resolve(p, op, &mask, &n, err, errlen)))
            return e;
        uint32_t bound = jit ? (op->manual ? op->manual_axes : 0) : p->manual_axes;
        for (int a = 0; bound && a < p->mesh.naxes; a++)
            if ((mask & ~bound) & (1u << a)) {
                char set[300];
                return sm_fail(err, errlen, SM_EINVAL,
                               "%s: unbound axis name: %s (the shard_map's axis_names are %s: "
                               "only those axes are Manual in its body; the others are the "
                               "service's to lay out)",
                               info->name, p->mesh.names[a],
                               sm_ir_axes_set_str(p, bound, set, sizeof set));
            }
    }
    switch (info->vma) {
    case SM_VMA_UNION:
        out->vma = vma;
        break;
    case SM_VMA_NONE:
        out->vma = 0;
        break;
    case SM_VMA_REMOVE: /* within axis_index_groups the groups still differ */
        out->vma = sm_ir_has_groups(op) ? vma : vma & ~mask;
        break;
    case SM_VMA_ADD:
        out->vma = sm_ir_gathers_invarying(op) ? vma & ~mask : vma | mask;
        break;
    case SM_VMA_SET:
        out->vma = mask;
        break;
    }
    if ((e = sm_ir_unreduced_op(p, op, in, out, mask, err, errlen)) ||
        (e = sm_ir_reduced_op(p, op, in, out, mask, err, errlen)))
        return e;
    if (jit && !op->manual) {
        out->vma = 0;
        if ((e = sm_ir_shard_op(p, op, out, NULL, err, errlen)))
            return e;
        /* a value laid out over an axis is not reduced over it (a gather
         * of a reduced operand at sharded indices: JAX's auto mode) */
        for (int d = 0; d < out->shape.rank; d++)
            for (int k = 0; k < out->layout.n[d]; k++)
                out->reduced &= ~(1u << out->layout.ax[d][k]);
        return SM_OK;
    }
    if (partial)
        return sm_ir_shard_op(p, op, out, NULL, err, errlen);
    return SM_OK;
}

sm_err sm_ir_shard_op(const sm_program *p, const sm_ir_op *op, sm_ir_value *out,
                      sm_ir_shard_plan *plan, char *err, size_t errlen)
{
    const sm_ir_value *in[SM_OP_MAXARGS];
    for (int i = 0; i < op->noperands; i++)
        in[i] = &p->values[op->operands[i]];
    sm_ir_shard_plan local;
    if (!plan)
        plan = &local;
    memset(plan, 0, sizeof *plan);
    plan->local = op->attrs;
    plan->local.sharding = NULL;
    memset(&out->layout, 0, sizeof out->layout);
    out->hidden = (p->auto_axes | op->auto_mask) & ~op->explicit_mask;
    if (op->manual && op->manual_axes) { /* in a shard_map Manual over some axes only */
        int edge = op->kind == SM_OP_SHARD_MAP_IN || op->kind == SM_OP_SHARD_MAP_OUT;
        /* never in a layout there (a nested shard_map's result: the axes around it) */
        out->hidden |= op->kind == SM_OP_SHARD_MAP_OUT ? op->outer_axes : op->manual_axes;
        sm_err e = edge || !op->attrs.sharding
                       ? SM_OK
                       : sm_ir_spec_not_manual(p, op->manual_axes, op->attrs.sharding,
                                               sm_op_name(op->kind), err, errlen);
        if (e)
            return e;
        /* the collectives' rule; the creation ops (SM_VMA_NONE) take their
         * own, their out_sharding over the other axes */
        sm_vma_rule r = sm_op_vma_rule(op->kind);
        if (r != SM_VMA_UNION && r != SM_VMA_NONE)
            return sm_ir_shard_pcoll(p, op, in, out, plan, err, errlen);
    }
    return sm_ops[op->kind].shard(p, op, in, out, plan, err, errlen);
}
