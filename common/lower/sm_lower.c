/* sm_lower: global-view (jit) programs lowered to shard_map programs
 * (sm_lower.h says how). */
#include "sm_lower.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sm_arena.h"
#include "sm_ir_infer.h"

typedef struct {
    const sm_program *j;
    sm_program *o;
    int replicate_all;
    int *map;          /* jit value -> lowered value */
    sm_ir_layout *lay; /* jit value -> layout of its lowered value */
    char *err;
    size_t errlen;
    int line, col; /* position of the jit op being lowered */
} sm_lw;

static sm_err sm_lw_emit(sm_lw *w, sm_op_kind kind, const int *ops, int n, const sm_ir_attrs *a,
                         int *id)
{
    return sm_program_add_op_at(w->o, kind, ops, n, a, w->line, w->col, id, w->err, w->errlen);
}

static void sm_lw_axis(sm_lw *w, sm_ir_attrs *a, int axis)
{
    snprintf(a->axes[a->naxes++], SM_AXIS_NAME_MAX, "%s", w->j->mesh.names[axis]);
}

static int sm_lw_prefix(const sm_ir_layout *c, const sm_ir_layout *t, int d)
{
    return c->n[d] <= t->n[d] && memcmp(c->ax[d], t->ax[d], c->n[d]) == 0;
}

/* Moves the block *id of a value of global shape s from layout cur to tgt
 * (sm_lower.h: all_to_all, all_gather, local slices). */
static sm_err sm_lw_reshard(sm_lw *w, int *id, const sm_shape *s, const sm_ir_layout *from,
                            const sm_ir_layout *tgt)
{
    sm_ir_layout cur = *from;
    sm_err e;
    for (int d = 0; d < s->rank; d++) {
        while (!sm_lw_prefix(&cur, tgt, d)) {
            int a = cur.ax[d][cur.n[d] - 1], d2 = -1;
            for (int k = 0; k < s->rank && d2 < 0; k++)
                if (k != d && sm_lw_prefix(&cur, tgt, k) && cur.n[k] < tgt->n[k] &&
                    tgt->ax[k][cur.n[k]] == a)
                    d2 = k;
            sm_ir_attrs at = {0};
            sm_lw_axis(w, &at, a);
            at.tiled = 1;
            if (d2 >= 0) { /* a moves from d to d2 */
                at.axis = d2;
                at.axis2 = d;
                if ((e = sm_lw_emit(w, SM_OP_ALL_TO_ALL, id, 1, &at, id)))
                    return e;
                cur.ax[d2][cur.n[d2]++] = (uint8_t)a;
            } else {
                at.axis = d;
                if ((e = sm_lw_emit(w, SM_OP_ALL_GATHER, id, 1, &at, id)))
                    return e;
            }
            cur.n[d]--;
        }
    }
    for (int d = 0; d < s->rank; d++) {
        while (cur.n[d] < tgt->n[d]) {
            int a = tgt->ax[d][cur.n[d]];
            int64_t blk = s->dims[d] / sm_ir_layout_factor(w->j, &cur, d);
            int64_t nb = blk / w->j->mesh.sizes[a];
            sm_ir_attrs ai = {0}, ac = {.has_dtype = 1, .dtype = SM_I32, .i = nb}, am = {0};
            int idx, c, ops[2];
            sm_lw_axis(w, &ai, a);
            if ((e = sm_lw_emit(w, SM_OP_AXIS_INDEX, NULL, 0, &ai, &idx)) ||
                (e = sm_lw_emit(w, SM_OP_CONST, NULL, 0, &ac, &c)))
                return e;
            ops[0] = idx;
            ops[1] = c;
            if ((e = sm_lw_emit(w, SM_OP_MULTIPLY, ops, 2, &am, &ops[1])))
                return e;
            ops[0] = *id;
            sm_ir_attrs as = {.axis = d};
            as.ints.n = 1;
            as.ints.v[0] = nb;
            if ((e = sm_lw_emit(w, SM_OP_DYNAMIC_SLICE_IN_DIM, ops, 2, &as, id)))
                return e;
            cur.ax[d][cur.n[d]++] = (uint8_t)a;
        }
    }
    return SM_OK;
}

/* Sums the partial sums of block *id over the mesh axes in mask (a value
 * leaving some of its unreduced axes; of kind max or min (ukind), their
 * pmax or pmin); nothing when mask is 0 or the run is a whole-array
 * reference, whose blocks hold no partial results. */
static sm_err sm_lw_sum_unreduced(sm_lw *w, int *id, uint32_t mask, int ukind)
{
    if (!mask || w->replicate_all)
        return SM_OK;
    sm_ir_attrs pa = {0};
    for (int a = 0; a < w->j->mesh.naxes; a++)
        if (mask & (1u << a))
            sm_lw_axis(w, &pa, a);
    return sm_lw_emit(w,
                      ukind == SM_UK_MAX   ? SM_OP_PMAX
                      : ukind == SM_UK_MIN ? SM_OP_PMIN
                                           : SM_OP_PSUM,
                      id, 1, &pa, id);
}

/* Makes block *id (of dtype t) a partial sum over the mesh axes in mask,
 * as JAX's reshard to unreduced axes: the first device along them keeps
 * the value, the others hold zeros (their sum is the value). Nothing when
 * mask is 0 or in a whole-array reference run. */
static sm_err sm_lw_make_unreduced(sm_lw *w, int *id, uint32_t mask, sm_dtype t)
{
    if (!mask || w->replicate_all)
        return SM_OK;
    sm_ir_attrs ai = {0}, zi = {.has_dtype = 1, .dtype = SM_I32}, zt = {.has_dtype = 1, .dtype = t};
    sm_ir_attrs none = {0};
    for (int a = 0; a < w->j->mesh.naxes; a++)
        if (mask & (1u << a))
            sm_lw_axis(w, &ai, a);
    int ops[3];
    sm_err e;
    if ((e = sm_lw_emit(w, SM_OP_AXIS_INDEX, NULL, 0, &ai, &ops[0])) ||
        (e = sm_lw_emit(w, SM_OP_CONST, NULL, 0, &zi, &ops[1])) ||
        (e = sm_lw_emit(w, SM_OP_EQUAL, ops, 2, &none, &ops[0])) ||
        (e = sm_lw_emit(w, SM_OP_CONST, NULL, 0, &zt, &ops[2])))
        return e;
    ops[1] = *id;
    return sm_lw_emit(w, SM_OP_WHERE, ops, 3, &none, id);
}

/* Makes block *id (of dtype t, a value of global shape s laid out as *lay)
 * a partial sum over the mesh axes in mask that *lay shards a dimension
 * over last (least significant): each device puts its block where it lies
 * in zeros of the dimension's size without the axis (JAX's reshard of a
 * sharded value to unreduced: no data moves). Those axes leave *lay and
 * join *placed. */
static sm_err sm_lw_place_unreduced(sm_lw *w, int *id, const sm_shape *s, sm_ir_layout *lay,
                                    uint32_t mask, sm_dtype t, uint32_t *placed)
{
    sm_err e;
    for (int d = 0; d < s->rank; d++) {
        while (lay->n[d] > 0 && (mask & (1u << lay->ax[d][lay->n[d] - 1]))) {
            int a = lay->ax[d][lay->n[d] - 1];
            int64_t blk = s->dims[d] / sm_ir_layout_factor(w->j, lay, d);
            sm_ir_attrs az = {.has_dtype = 1, .dtype = t, .has_ints = 1}, ai = {0}, none = {0};
            az.ints.n = s->rank;
            for (int k = 0; k < s->rank; k++)
                az.ints.v[k] = s->dims[k] / sm_ir_layout_factor(w->j, lay, k);
            az.ints.v[d] = blk * w->j->mesh.sizes[a];
            sm_ir_attrs ac = {.has_dtype = 1, .dtype = SM_I32, .i = blk}, a0 = ac;
            a0.i = 0;
            int ops[2 + SM_MAX_RANK], idx, c, zero = -1;
            sm_lw_axis(w, &ai, a);
            if ((e = sm_lw_emit(w, SM_OP_ZEROS, NULL, 0, &az, &ops[0])) ||
                (e = sm_lw_emit(w, SM_OP_AXIS_INDEX, NULL, 0, &ai, &idx)) ||
                (e = sm_lw_emit(w, SM_OP_CONST, NULL, 0, &ac, &c)) ||
                (s->rank > 1 && (e = sm_lw_emit(w, SM_OP_CONST, NULL, 0, &a0, &zero))))
                return e;
            int prod[2] = {idx, c};
            if ((e = sm_lw_emit(w, SM_OP_MULTIPLY, prod, 2, &none, &idx)))
                return e;
            ops[1] = *id;
            for (int k = 0; k < s->rank; k++)
                ops[2 + k] = k == d ? idx : zero;
            if ((e = sm_lw_emit(w, SM_OP_DYNAMIC_UPDATE_SLICE, ops, 2 + s->rank, &none, id)))
                return e;
            lay->n[d]--;
            *placed |= 1u << a;
        }
    }
    return SM_OK;
}

static const sm_op_kind sm_lw_post_kind[] = {
    [SM_IR_POST_PSUM] = SM_OP_PSUM,
    [SM_IR_POST_PMEAN] = SM_OP_PMEAN,
    [SM_IR_POST_PMAX] = SM_OP_PMAX,
    [SM_IR_POST_PMIN] = SM_OP_PMIN,
    [SM_IR_POST_PSUM_SCATTER] = SM_OP_PSUM_SCATTER,
};

/* Lowers op. parts: SM_LW_OPERANDS moves its operands' blocks to the
 * layouts its rule asks for (their ids in ops), SM_LW_EMIT emits the op on
 * ops and moves its result; both for one op at a time. A loop's while_next
 * ops are lowered operands first for all of them, then emitted together:
 * nothing may stand between them (sm_ir_loops_check). */
enum { SM_LW_OPERANDS = 1, SM_LW_EMIT = 2 };

static sm_err sm_lw_op_parts(sm_lw *w, const sm_ir_op *op, int parts, int *ops)
{
    const sm_program *j = w->j;
    const sm_ir_value *rv = &j->values[op->result];
    sm_err e = SM_OK;
    int id;
    w->line = op->line;
    w->col = op->col;
    if (op->manual && op->kind == SM_OP_PCAST && sm_ir_gathers_invarying(op)) {
        /* to='unreduced': the blocks are the partial sums already; the
         * lowered program keeps them as values varying over the axes */
        w->map[op->result] = w->map[op->operands[0]];
        return SM_OK;
    }
    if (op->manual && !op->manual_axes) { /* a shard_map function's own op */
        for (int k = 0; k < op->noperands; k++)
            ops[k] = w->map[op->operands[k]];
        if ((e = sm_lw_emit(w, op->kind, ops, op->noperands, &op->attrs, &id)))
            return e;
        w->map[op->result] = id;
        return SM_OK;
    }
    if (op->kind == SM_OP_SHARD_MAP_OUT) {
        w->map[op->result] = w->map[op->operands[0]];
        w->lay[op->result] = w->replicate_all ? (sm_ir_layout){{0}} : rv->layout;
        return SM_OK;
    }
    sm_ir_value v = *rv;
    sm_ir_shard_plan *plan = malloc(sizeof *plan);
    if (!plan)
        return sm_fail(w->err, w->errlen, SM_ENOMEM, "out of memory lowering");
    if ((e = sm_ir_shard_op(j, op, &v, plan, w->err, w->errlen)))
        goto done;
    if (w->replicate_all) {
        memset(plan->in, 0, sizeof plan->in);
        memset(&plan->local_layout, 0, sizeof plan->local_layout);
        memset(&v.layout, 0, sizeof v.layout);
        plan->local = op->attrs;
        plan->local.sharding = NULL;
        plan->post = SM_IR_POST_NONE;
    }
    if (op->kind == SM_OP_SHARD_MAP_IN) {
        /* the block under the in_spec (partial-manual: each device's part of
         * it, laid out over the other axes inside the block) */
        id = w->map[op->operands[0]];
        const sm_ir_value *x = &j->values[op->operands[0]];
        if (!(e = sm_lw_reshard(w, &id, &x->shape, &w->lay[op->operands[0]], &plan->in[0]))) {
            w->map[op->result] = id;
            w->lay[op->result] = v.layout;
        }
        goto done;
    }
    uint32_t placed = 0; /* reshard to more unreduced axes the operand is sharded over */
    for (int k = 0; k < op->noperands && (parts & SM_LW_OPERANDS); k++) {
        int src = op->operands[k];
        sm_ir_layout from = w->lay[src];
        ops[k] = w->map[src];
        /* reshard to a spec without some of the operand's unreduced axes:
         * the partial sums over those are summed first */
        if ((op->kind == SM_OP_RESHARD || op->kind == SM_OP_WITH_SHARDING_CONSTRAINT) &&
            (e = sm_lw_sum_unreduced(w, &ops[k], j->values[src].unreduced & ~rv->unreduced,
                                     j->values[src].ukind)))
            goto done;
        if (op->kind == SM_OP_RESHARD && !w->replicate_all &&
            (e = sm_lw_place_unreduced(w, &ops[k], &j->values[src].shape, &from,
                                       rv->unreduced & ~j->values[src].unreduced, rv->dtype,
                                       &placed)))
            goto done;
        if (placed) /* the reshard moves the rest from where the blocks now lie */
            plan->in[k] = plan->local_layout = from;
        if ((e = sm_lw_reshard(w, &ops[k], &j->values[src].shape, &from, &plan->in[k])))
            goto done;
    }
    if (!(parts & SM_LW_EMIT))
        goto done;
    sm_ir_layout after = plan->local_layout;
    if (op->kind == SM_OP_RESHARD || op->kind == SM_OP_WITH_SHARDING_CONSTRAINT) {
        id = ops[0];
    } else if ((e = sm_lw_emit(w, op->kind, ops, op->noperands, &plan->local, &id))) {
        goto done;
    }
    if (plan->post != SM_IR_POST_NONE && plan->npost > 0) {
        sm_ir_attrs pa = {0};
        for (int k = 0; k < plan->npost; k++)
            sm_lw_axis(w, &pa, plan->post_axes[k]);
        if (plan->post == SM_IR_POST_PSUM_SCATTER) {
            pa.axis = plan->post_dim;
            pa.tiled = 1;
            for (int k = 0; k < plan->npost; k++)
                after.ax[plan->post_dim][after.n[plan->post_dim]++] = plan->post_axes[k];
        }
        if ((e = sm_lw_emit(w, sm_lw_post_kind[plan->post], &id, 1, &pa, &id)))
            goto done;
    }
    if ((e = sm_lw_reshard(w, &id, &rv->shape, &after, &v.layout)))
        goto done;
    if (op->kind == SM_OP_RESHARD && /* to more unreduced axes: zeros but on the first device */
        (e = sm_lw_make_unreduced(
             w, &id, rv->unreduced & ~j->values[op->operands[0]].unreduced & ~placed, rv->dtype)))
        goto done;
    w->map[op->result] = id;
    w->lay[op->result] = v.layout;
done:
    free(plan);
    return e;
}

static sm_err sm_lw_op(sm_lw *w, const sm_ir_op *op)
{
    int ops[SM_OP_MAXARGS];
    return sm_lw_op_parts(w, op, SM_LW_OPERANDS | SM_LW_EMIT, ops);
}

/* The while_next ops from k on (a loop's, in a row) lowered operands first,
 * then emitted; returns the index of the last, or -1 on failure (e). */
static int sm_lw_nexts(sm_lw *w, int k, sm_err *e)
{
    const sm_program *j = w->j;
    int r = k;
    while (r < j->nops && j->ops[r].kind == SM_OP_WHILE_NEXT)
        r++;
    int(*ops)[SM_OP_MAXARGS] = malloc(sizeof *ops * (size_t)(r - k));
    if (!ops) {
        *e = sm_fail(w->err, w->errlen, SM_ENOMEM, "out of memory lowering");
        return -1;
    }
    *e = SM_OK;
    for (int i = k; i < r && !*e; i++)
        *e = sm_lw_op_parts(w, &j->ops[i], SM_LW_OPERANDS, ops[i - k]);
    for (int i = k; i < r && !*e; i++)
        *e = sm_lw_op_parts(w, &j->ops[i], SM_LW_EMIT, ops[i - k]);
    free(ops);
    return *e ? -1 : r - 1;
}

sm_err sm_lower(const sm_program *jit, const sm_lower_opts *opts, sm_program **out, char *err,
                size_t errlen)
{
    *out = NULL;
    if (jit->kind != SM_PROG_JIT)
        return sm_fail(err, errlen, SM_EINVAL, "program '%s' is not a jit program", jit->name);
    sm_lw w = {.j = jit, .err = err, .errlen = errlen};
    w.replicate_all = opts && opts->replicate_all;
    sm_err e = sm_program_create(&jit->mesh, jit->name, &w.o, err, errlen);
    if (e)
        return e;
    w.o->has_devices = jit->has_devices;
    w.o->lowered = 1;
    for (int k = 0; k < jit->nops;
         k++) /* a function with check_vma=False: its results as they are */
        w.o->unchecked |= jit->ops[k].kind == SM_OP_SHARD_MAP_OUT && jit->ops[k].attrs.unchecked;
    w.o->filename = jit->filename ? sm_arena_strdup(w.o->arena, jit->filename) : NULL;
    w.map = calloc((size_t)jit->nvalues + 1, sizeof *w.map);
    w.lay = calloc((size_t)jit->nvalues + 1, sizeof *w.lay);
    int *rets = calloc((size_t)jit->nreturns + 1, sizeof *rets);
    sm_pspec *specs = calloc((size_t)jit->nreturns + 1, sizeof *specs);
    if (!w.map || !w.lay || !rets || !specs) {
        e = sm_fail(err, errlen, SM_ENOMEM, "out of memory lowering '%s'", jit->name);
        goto fail;
    }
    for (int i = 0; i < jit->nparams; i++) {
        const sm_ir_param *pa = &jit->params[i];
        sm_pspec none = {0};
        const sm_pspec *sp = w.replicate_all ? &none : &pa->spec;
        if ((e = sm_program_add_param(w.o, pa->name, pa->dtype, &pa->global, sp, &w.map[pa->value],
                                      err, errlen)))
            goto fail;
        if (!w.replicate_all)
            w.lay[pa->value] = jit->values[pa->value].layout;
    }
    for (int k = 0; k < jit->nops; k++) {
        const sm_ir_op *op = &jit->ops[k];
        if (op->kind == SM_OP_WHILE_NEXT && !(op->manual && !op->manual_axes)) {
            if ((k = sm_lw_nexts(&w, k, &e)) < 0)
                goto fail;
        } else if ((e = sm_lw_op(&w, op))) {
            goto fail;
        }
    }
    for (int k = 0; k < jit->nreturns; k++) {
        int v = jit->returns[k];
        sm_ir_layout t = {{0}};
        if (!w.replicate_all) {
            specs[k] = jit->out_specs[k];
            sm_ir_layout_of_spec(jit, &specs[k], &t);
        }
        rets[k] = w.map[v];
        w.line = jit->ret_line;
        w.col = jit->ret_col;
        /* -> OUT_SHARDINGS without some of the value's unreduced axes: summed */
        if ((e = sm_lw_sum_unreduced(
                 &w, &rets[k], jit->values[v].unreduced & ~sm_ir_spec_unreduced(jit, &specs[k]),
                 jit->values[v].ukind)))
            goto fail;
        if ((e = sm_lw_reshard(&w, &rets[k], &jit->values[v].shape, &w.lay[v], &t)) ||
            (e = sm_lw_make_unreduced(
                 &w, &rets[k], sm_ir_spec_unreduced(jit, &specs[k]) & ~jit->values[v].unreduced,
                 jit->values[v].dtype)))
            goto fail;
    }
    if ((e = sm_program_set_returns(w.o, rets, specs, jit->nreturns, err, errlen)) ||
        (e = sm_program_verify(w.o, 0, err, errlen)))
        goto fail;
    for (int v = 0; v < jit->nvalues; v++) /* the source names, where the value is the same */
        if (jit->values[v].name && !w.o->values[w.map[v]].name)
            sm_program_name_value(w.o, w.map[v], jit->values[v].name);
    *out = w.o;
    w.o = NULL;
fail:
    sm_program_free(w.o);
    free(w.map);
    free(w.lay);
    free(rets);
    free(specs);
    return e;
}

int sm_lower_count_collectives(const sm_program *p, int counts[SM_OP_COUNT])
{
    int n = 0;
    for (int k = 0; k < SM_OP_COUNT; k++)
        counts[k] = 0;
    for (int k = 0; k < p->nops; k++) {
        sm_vma_rule r = sm_op_vma_rule(p->ops[k].kind);
        if ((r == SM_VMA_REMOVE || r == SM_VMA_ADD) && p->ops[k].kind != SM_OP_PVARY) {
            counts[p->ops[k].kind]++;
            n++;
        }
    }
    return n;
}
