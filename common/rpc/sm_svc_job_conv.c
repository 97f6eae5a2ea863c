/* sm_svc_job_conv: sm_program <-> the protobuf Program message, and the
 * job conversions the job adapters share (JobInfo, PeerDevices).
 *
 * Encoding numbers values as the wire wants them: the parameters first
 * (0 .. nparams-1), then one result per op in op order, whatever ids the
 * program used. Decoding replays the message through the IR builder
 * (sm_program_create / _add_param / _add_op_at / _set_returns), so a decoded
 * program is type-checked; every field is validated first and a bad one is
 * SM_EINVAL naming it ("Program.ops[3].operands[1] is 9; ...").
 *
 * sm_svc_program_enc/dec are shared with sm_svc_job.c and
 * sm_svc_job_worker.c through sm_svc_internal.h. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sm_svc_internal.h"
#include "sm_svc_job.h"

/* Limits of a decoded program. */
#define SM_SVC_MAX_PARAMS  1024
#define SM_SVC_MAX_OPS     (1 << 20)
#define SM_SVC_MAX_RETURNS 1024
#define SM_SVC_MAX_PERM    SM_MAX_DEVICES
#define SM_SVC_SPEC_MAX    256
#define SM_SVC_FILE_MAX    4096

/* ---- encoding ------------------------------------------------------------------- */

static Shmap__V1__IrAttrs *attrs_enc(sm_arena *a, const sm_ir_attrs *at)
{
    Shmap__V1__IrAttrs *q = SM_SVC_NEW(a, Shmap__V1__IrAttrs, shmap__v1__ir_attrs__init);
    if (!q)
        return NULL;
    int ni = at->ints.n < 0 ? 0 : at->ints.n > SM_IR_MAX_INTS ? SM_IR_MAX_INTS : at->ints.n;
    int ni2 = at->ints2.n < 0 ? 0 : at->ints2.n > SM_IR_MAX_INTS ? SM_IR_MAX_INTS : at->ints2.n;
    q->n_ints = (size_t)ni;
    q->ints = (int64_t *)at->ints.v;
    q->has_ints = at->has_ints != 0;
    q->n_ints2 = (size_t)ni2;
    q->ints2 = (int64_t *)at->ints2.v;
    q->has_ints2 = at->has_ints2 != 0;
    int ni3 = at->ints3.n < 0 ? 0 : at->ints3.n > SM_IR_MAX_INTS ? SM_IR_MAX_INTS : at->ints3.n;
    q->n_ints3 = (size_t)ni3;
    q->ints3 = (int64_t *)at->ints3.v;
    q->has_ints3 = at->has_ints3 != 0;
    q->axis = at->axis;
    q->axis2 = at->axis2;
    q->tiled = at->tiled != 0;
    q->keepdims = at->keepdims != 0;
    q->unchecked = at->unchecked != 0;
    q->n_axes = sm_svc_rank(at->naxes);
    if (q->n_axes) {
        if (!(q->axes = sm_arena_alloc(a, q->n_axes * sizeof *q->axes)))
            return NULL;
        for (size_t k = 0; k < q->n_axes; k++)
            q->axes[k] = (char *)at->axes[k];
    }
    if (at->nperm > 0 && at->perm) {
        if (!(q->perm = sm_arena_alloc(a, 2 * (size_t)at->nperm * sizeof *q->perm)))
            return NULL;
        for (int k = 0; k < at->nperm; k++) {
            q->perm[2 * k] = at->perm[k][0];
            q->perm[2 * k + 1] = at->perm[k][1];
        }
        q->n_perm = 2 * (size_t)at->nperm;
    }
    q->has_dtype = at->has_dtype != 0;
    if (at->has_dtype)
        q->dtype = sm_svc_dtype_enc(at->dtype);
    q->spec = (char *)(at->spec ? at->spec : "");
    q->value_is_float = at->value_is_float != 0;
    q->f = at->f;
    q->i = at->i;
    return q;
}

/* The Program message of p, in arena memory; NULL when out of memory. */
Shmap__V1__Program *sm_svc_program_enc(sm_arena *a, const sm_program *p)
{
    Shmap__V1__Program *m = sm_arena_alloc(a, sizeof *m);
    int *map = sm_arena_alloc(a, (size_t)(p->nvalues > 0 ? p->nvalues : 1) * sizeof *map);
    if (!m || !map)
        return NULL;
    shmap__v1__program__init(m);
    m->name = (char *)(p->name ? p->name : "");
    m->filename = (char *)(p->filename ? p->filename : "");
    if (!(m->mesh = sm_svc_mesh_enc(a, 0, NULL, &p->mesh, p->has_devices)))
        return NULL;
    m->jit = p->kind == SM_PROG_JIT;
    m->auto_axes = p->auto_axes;
    m->has_out_shardings = p->has_out_shardings != 0;
    m->lowered = p->lowered != 0;
    m->manual_axes = p->kind == SM_PROG_JIT ? 0 : p->manual_axes;
    m->unchecked = p->kind != SM_PROG_JIT && p->unchecked;
    for (int v = 0; v < p->nvalues; v++)
        map[v] = -1;
    for (int i = 0; i < p->nparams; i++)
        if (p->params[i].value >= 0 && p->params[i].value < p->nvalues)
            map[p->params[i].value] = i;
    for (int k = 0; k < p->nops; k++)
        if (p->ops[k].result >= 0 && p->ops[k].result < p->nvalues)
            map[p->ops[k].result] = p->nparams + k;
#define MAP(v) ((v) >= 0 && (v) < p->nvalues ? map[(v)] : -1)
    if (p->nparams > 0) {
        m->params = sm_arena_alloc(a, (size_t)p->nparams * sizeof *m->params);
        if (!m->params)
            return NULL;
        m->n_params = (size_t)p->nparams;
    }
    for (int i = 0; i < p->nparams; i++) {
        const sm_ir_param *pa = &p->params[i];
        Shmap__V1__IrParam *q = SM_SVC_NEW(a, Shmap__V1__IrParam, shmap__v1__ir_param__init);
        if (!q)
            return NULL;
        q->name = (char *)(pa->name ? pa->name : "");
        q->dtype = sm_svc_dtype_enc(pa->dtype);
        q->global = sm_svc_shape_enc(a, &pa->global);
        q->spec = sm_svc_pspec_enc(a, &pa->spec);
        if (!q->global || !q->spec)
            return NULL;
        m->params[i] = q;
    }
    if (p->nops > 0) {
        m->ops = sm_arena_alloc(a, (size_t)p->nops * sizeof *m->ops);
        if (!m->ops)
            return NULL;
        m->n_ops = (size_t)p->nops;
    }
    for (int k = 0; k < p->nops; k++) {
        const sm_ir_op *op = &p->ops[k];
        Shmap__V1__IrOp *q = SM_SVC_NEW(a, Shmap__V1__IrOp, shmap__v1__ir_op__init);
        if (!q)
            return NULL;
        q->op = (char *)sm_op_name(op->kind);
        if (op->noperands > 0) {
            q->operands = sm_arena_alloc(a, (size_t)op->noperands * sizeof *q->operands);
            if (!q->operands)
                return NULL;
            q->n_operands = (size_t)op->noperands;
            for (int j = 0; j < op->noperands; j++)
                q->operands[j] = MAP(op->operands[j]);
        }
        if (!(q->attrs = attrs_enc(a, &op->attrs)))
            return NULL;
        const char *vn =
            op->result >= 0 && op->result < p->nvalues ? p->values[op->result].name : NULL;
        q->name = (char *)(vn ? vn : "");
        q->line = op->line;
        q->col = op->col;
        q->manual = op->manual != 0;
        q->manual_axes = op->manual_axes;
        q->outer_axes = op->outer_axes;
        q->auto_mask = op->auto_mask;
        q->explicit_mask = op->explicit_mask;
        if (op->attrs.sharding) {
            q->has_sharding = 1;
            if (!(q->sharding = sm_svc_pspec_enc(a, op->attrs.sharding)))
                return NULL;
        }
        m->ops[k] = q;
    }
    if (p->nreturns > 0) {
        m->returns = sm_arena_alloc(a, (size_t)p->nreturns * sizeof *m->returns);
        m->out_specs = sm_arena_alloc(a, (size_t)p->nreturns * sizeof *m->out_specs);
        if (!m->returns || !m->out_specs)
            return NULL;
        m->n_returns = m->n_out_specs = (size_t)p->nreturns;
        for (int k = 0; k < p->nreturns; k++) {
            m->returns[k] = MAP(p->returns[k]);
            if (!(m->out_specs[k] = sm_svc_pspec_enc(a, &p->out_specs[k])))
                return NULL;
        }
    }
#undef MAP
    return m;
}

/* ---- decoding ------------------------------------------------------------------- */

static sm_err attrs_dec(const Shmap__V1__IrAttrs *q, const char *what, sm_ir_attrs *at,
                        int64_t (**perm)[2], char *err, size_t errlen)
{
    char sub[300];
    sm_err e;
    memset(at, 0, sizeof *at);
    *perm = NULL;
    if (!q)
        return SM_OK;
    snprintf(sub, sizeof sub, "%s.ints", what);
    if ((e = sm_svc_count_dec(q->n_ints, SM_IR_MAX_INTS, sub, "values", err, errlen)))
        return e;
    snprintf(sub, sizeof sub, "%s.ints2", what);
    if ((e = sm_svc_count_dec(q->n_ints2, SM_IR_MAX_INTS, sub, "values", err, errlen)))
        return e;
    snprintf(sub, sizeof sub, "%s.ints3", what);
    if ((e = sm_svc_count_dec(q->n_ints3, SM_IR_MAX_INTS, sub, "values", err, errlen)))
        return e;
    snprintf(sub, sizeof sub, "%s.axes", what);
    if ((e = sm_svc_count_dec(q->n_axes, SM_MAX_AXES, sub, "names", err, errlen)))
        return e;
    at->ints.n = (int)q->n_ints;
    sm_svc_copy(at->ints.v, q->ints, q->n_ints * sizeof *q->ints);
    at->ints2.n = (int)q->n_ints2;
    sm_svc_copy(at->ints2.v, q->ints2, q->n_ints2 * sizeof *q->ints2);
    at->ints3.n = (int)q->n_ints3;
    sm_svc_copy(at->ints3.v, q->ints3, q->n_ints3 * sizeof *q->ints3);
    at->has_ints = q->has_ints != 0;
    at->has_ints2 = q->has_ints2 != 0;
    at->has_ints3 = q->has_ints3 != 0;
    at->axis = q->axis;
    at->axis2 = q->axis2;
    at->tiled = q->tiled != 0;
    at->keepdims = q->keepdims != 0;
    at->unchecked = q->unchecked != 0;
    for (size_t k = 0; k < q->n_axes; k++) {
        snprintf(sub, sizeof sub, "%s.axes[%zu]", what, k);
        if (!q->axes[k] || !q->axes[k][0])
            return sm_fail(err, errlen, SM_EINVAL, "%s is an empty axis name", sub);
        if ((e = sm_svc_str_dec(q->axes[k], SM_AXIS_NAME_MAX, sub, at->axes[k], err, errlen)))
            return e;
    }
    at->naxes = (int)q->n_axes;
    if (q->n_perm % 2)
        return sm_fail(err, errlen, SM_EINVAL,
                       "%s.perm has %zu values; it holds (src, dst) pairs, so the count must be "
                       "even",
                       what, q->n_perm);
    snprintf(sub, sizeof sub, "%s.perm", what);
    if ((e = sm_svc_count_dec(q->n_perm / 2, SM_SVC_MAX_PERM, sub, "pairs", err, errlen)))
        return e;
    if (q->n_perm) {
        int64_t(*pp)[2] = malloc(q->n_perm / 2 * sizeof *pp);
        if (!pp)
            return sm_fail(err, errlen, SM_ENOMEM, "cannot allocate %zu perm pairs", q->n_perm / 2);
        for (size_t k = 0; k < q->n_perm / 2; k++) {
            pp[k][0] = q->perm[2 * k];
            pp[k][1] = q->perm[2 * k + 1];
        }
        at->nperm = (int)(q->n_perm / 2);
        at->perm = (const int64_t(*)[2])pp;
        *perm = pp;
    }
    at->has_dtype = q->has_dtype != 0;
    if (q->has_dtype) {
        snprintf(sub, sizeof sub, "%s.dtype", what);
        if ((e = sm_svc_dtype_dec(q->dtype, sub, &at->dtype, err, errlen)))
            return e;
    }
    snprintf(sub, sizeof sub, "%s.spec", what);
    if ((e = sm_svc_str_dec(q->spec, SM_SVC_SPEC_MAX, sub, NULL, err, errlen)))
        return e;
    at->spec = q->spec && q->spec[0] ? q->spec : NULL;
    at->value_is_float = q->value_is_float != 0;
    at->f = q->f;
    at->i = q->i;
    return SM_OK;
}

static sm_err param_dec(sm_program *p, const Shmap__V1__IrParam *q, size_t i, const char *what,
                        char *err, size_t errlen)
{
    char sub[200], tmp[SM_SVC_ERRLEN];
    sm_dtype t;
    sm_shape global;
    sm_pspec spec;
    sm_err e;
    snprintf(sub, sizeof sub, "%s.params[%zu].name", what, i);
    if ((e = sm_svc_str_dec(q->name, SM_NAME_MAX, sub, NULL, err, errlen)))
        return e;
    if (!q->name || !q->name[0])
        return sm_fail(err, errlen, SM_EINVAL, "%s is empty; every parameter needs a name", sub);
    snprintf(sub, sizeof sub, "%s.params[%zu].dtype", what, i);
    if ((e = sm_svc_dtype_dec(q->dtype, sub, &t, err, errlen)))
        return e;
    snprintf(sub, sizeof sub, "%s.params[%zu].global", what, i);
    if ((e = sm_svc_shape_dec(q->global, sub, &global, err, errlen)))
        return e;
    snprintf(sub, sizeof sub, "%s.params[%zu].spec", what, i);
    if ((e = sm_svc_pspec_dec(q->spec, sub, &spec, err, errlen)))
        return e;
    if ((e = sm_program_add_param(p, q->name, t, &global, &spec, NULL, tmp, sizeof tmp)))
        return sm_fail(err, errlen, e, "%s.params[%zu] ('%s'): %s", what, i, q->name, tmp);
    return SM_OK;
}

static sm_err op_dec(sm_program *p, const Shmap__V1__IrOp *q, size_t k, const char *what, char *err,
                     size_t errlen)
{
    char sub[200], tmp[SM_SVC_ERRLEN];
    sm_op_kind kind;
    sm_err e;
    snprintf(sub, sizeof sub, "%s.ops[%zu]", what, k);
    if (!q->op || sm_op_lookup(q->op, &kind) != 0)
        return sm_fail(err, errlen, SM_EINVAL, "%s.op is '%.64s', which is not a known op", sub,
                       q->op ? q->op : "");
    int mn, mx;
    sm_op_arity(kind, &mn, &mx);
    if (q->n_operands < (size_t)mn || q->n_operands > (size_t)mx)
        return sm_fail(err, errlen, SM_EINVAL, "%s (%s) has %zu operands; it takes %d to %d", sub,
                       q->op, q->n_operands, mn, mx);
    int ops[SM_OP_MAXARGS];
    for (size_t j = 0; j < q->n_operands; j++) {
        if (q->operands[j] < 0 || q->operands[j] >= p->nvalues)
            return sm_fail(err, errlen, SM_EINVAL,
                           "%s.operands[%zu] is %d; only values 0 to %d are defined before this "
                           "op",
                           sub, j, (int)q->operands[j], p->nvalues - 1);
        ops[j] = q->operands[j];
    }
    char asub[220];
    snprintf(asub, sizeof asub, "%s.attrs", sub);
    sm_ir_attrs at;
    int64_t(*perm)[2];
    if ((e = attrs_dec(q->attrs, asub, &at, &perm, err, errlen)))
        return e;
    char nsub[220];
    snprintf(nsub, sizeof nsub, "%s.name", sub);
    if ((e = sm_svc_str_dec(q->name, SM_NAME_MAX, nsub, NULL, err, errlen))) {
        free(perm);
        return e;
    }
    sm_pspec sharding;
    if (q->has_sharding) {
        char ssub[220];
        snprintf(ssub, sizeof ssub, "%s.sharding", sub);
        if ((e = sm_svc_pspec_dec(q->sharding, ssub, &sharding, err, errlen))) {
            free(perm);
            return e;
        }
        at.sharding = &sharding;
    }
    int id;
    e = sm_program_add_op_jit(p, kind, ops, (int)q->n_operands, &at, q->line, q->col,
                              q->manual != 0, q->manual_axes, q->outer_axes, q->auto_mask,
                              q->explicit_mask, &id, tmp, sizeof tmp);
    free(perm);
    if (e)
        return sm_fail(err, errlen, e, "%s (%s): %s", sub, q->op, tmp);
    if (q->name && q->name[0])
        sm_program_name_value(p, id, q->name);
    return SM_OK;
}

/* Decodes m into a new program (*out, freed with sm_program_free). The mesh
 * must be inline; no devices means the default order (has_devices = 0). */
sm_err sm_svc_program_dec(const Shmap__V1__Program *m, const char *what, sm_program **out,
                          char *err, size_t errlen)
{
    char sub[200], tmp[SM_SVC_ERRLEN];
    sm_err e;
    *out = NULL;
    if (!m)
        return sm_fail(err, errlen, SM_EINVAL, "%s is missing", what);
    snprintf(sub, sizeof sub, "%s.name", what);
    if ((e = sm_svc_str_dec(m->name, SM_NAME_MAX, sub, NULL, err, errlen)))
        return e;
    snprintf(sub, sizeof sub, "%s.filename", what);
    if ((e = sm_svc_str_dec(m->filename, SM_SVC_FILE_MAX, sub, NULL, err, errlen)))
        return e;
    snprintf(sub, sizeof sub, "%s.mesh", what);
    if (m->mesh && sm_svc_mesh_is_ref(m->mesh))
        return sm_fail(err, errlen, SM_EINVAL,
                       "%s has no axes; a program's mesh must be given inline with its axes", sub);
    if ((e = sm_svc_count_dec(m->n_params, SM_SVC_MAX_PARAMS, what, "params", err, errlen)) ||
        (e = sm_svc_count_dec(m->n_ops, SM_SVC_MAX_OPS, what, "ops", err, errlen)) ||
        (e = sm_svc_count_dec(m->n_returns, SM_SVC_MAX_RETURNS, what, "returns", err, errlen)))
        return e;
    if (m->n_out_specs != m->n_returns)
        return sm_fail(err, errlen, SM_EINVAL,
                       "%s has %zu returns but %zu out_specs; one spec per returned value", what,
                       m->n_returns, m->n_out_specs);
    if (m->n_returns == 0)
        return sm_fail(err, errlen, SM_EINVAL, "%s returns nothing; a program returns a value",
                       what);
    sm_mesh *mesh = malloc(sizeof *mesh);
    sm_pspec *specs = malloc(m->n_returns * sizeof *specs);
    int *rets = malloc(m->n_returns * sizeof *rets);
    sm_program *p = NULL;
    int default_order = 0;
    if (!mesh || !specs || !rets) {
        e = sm_fail(err, errlen, SM_ENOMEM, "cannot allocate a program");
        goto fail;
    }
    if ((e = sm_svc_mesh_dec(m->mesh, sub, mesh, &default_order, NULL, err, errlen)))
        goto fail;
    if ((e = sm_program_create(mesh, m->name && m->name[0] ? m->name : NULL, &p, tmp,
                               sizeof tmp))) {
        e = sm_fail(err, errlen, e, "%s: %s", what, tmp);
        goto fail;
    }
    p->has_devices = !default_order;
    if (m->jit && (e = sm_program_set_jit(p, m->auto_axes, tmp, sizeof tmp))) {
        e = sm_fail(err, errlen, e, "%s.auto_axes: %s", what, tmp);
        goto fail;
    }
    p->has_out_shardings = m->jit && m->has_out_shardings;
    p->lowered = !m->jit && m->lowered;
    p->manual_axes = m->jit ? 0 : m->manual_axes & (uint32_t)((UINT64_C(1) << mesh->naxes) - 1);
    p->unchecked = !m->jit && m->unchecked;
    if (m->filename && m->filename[0] && !(p->filename = sm_arena_strdup(p->arena, m->filename))) {
        e = sm_fail(err, errlen, SM_ENOMEM, "cannot allocate a program");
        goto fail;
    }
    for (size_t i = 0; i < m->n_params; i++)
        if ((e = param_dec(p, m->params[i], i, what, err, errlen)))
            goto fail;
    for (size_t k = 0; k < m->n_ops; k++)
        if ((e = op_dec(p, m->ops[k], k, what, err, errlen)))
            goto fail;
    for (size_t k = 0; k < m->n_returns; k++) {
        if (m->returns[k] < 0 || m->returns[k] >= p->nvalues) {
            e = sm_fail(err, errlen, SM_EINVAL,
                        "%s.returns[%zu] is %d; only values 0 to %d are defined", what, k,
                        (int)m->returns[k], p->nvalues - 1);
            goto fail;
        }
        rets[k] = m->returns[k];
        snprintf(sub, sizeof sub, "%s.out_specs[%zu]", what, k);
        if ((e = sm_svc_pspec_dec(m->out_specs[k], sub, &specs[k], err, errlen)))
            goto fail;
    }
    if ((e = sm_program_set_returns(p, rets, specs, (int)m->n_returns, tmp, sizeof tmp))) {
        e = sm_fail(err, errlen, e, "%s.returns: %s", what, tmp);
        goto fail;
    }
    free(mesh);
    free(specs);
    free(rets);
    *out = p;
    return SM_OK;
fail:
    sm_program_free(p);
    free(mesh);
    free(specs);
    free(rets);
    return e;
}

/* ---- public byte form ------------------------------------------------------------- */

sm_err sm_svc_program_encode(const sm_program *p, uint8_t **out, size_t *len, char *err,
                             size_t errlen)
{
    *out = NULL;
    *len = 0;
    sm_arena *a = sm_arena_create(0);
    Shmap__V1__Program *m = a ? sm_svc_program_enc(a, p) : NULL;
    size_t n = m ? protobuf_c_message_get_packed_size(&m->base) : 0;
    uint8_t *buf = m ? malloc(n ? n : 1) : NULL;
    if (!buf) {
        sm_arena_free(a);
        return sm_fail(err, errlen, SM_ENOMEM, "out of memory encoding a program");
    }
    protobuf_c_message_pack(&m->base, buf);
    sm_arena_free(a);
    *out = buf;
    *len = n;
    return SM_OK;
}

sm_err sm_svc_program_decode(const uint8_t *buf, size_t len, sm_program **out, char *err,
                             size_t errlen)
{
    *out = NULL;
    Shmap__V1__Program *m = shmap__v1__program__unpack(NULL, len, buf);
    if (!m)
        return sm_fail(err, errlen, SM_EFORMAT, "the %zu bytes are not a Program message", len);
    sm_err e = sm_svc_program_dec(m, "Program", out, err, errlen);
    shmap__v1__program__free_unpacked(m, NULL);
    return e;
}
