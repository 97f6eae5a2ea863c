/* sm_ir_shard: the sharding rules of global-view (jit) programs — the
 * shard column of sm_ir_ops.def. Each rule follows JAX's (jax/_src/lax/
 * lax.py and slicing.py, the *_sharding_rule functions; docs/semantics.md, the global view)
 * for the type, and says how the op runs on blocks (sm_ir_shard_plan).
 *
 * Auto axes (the mesh's axis_types, or every axis inside auto_axes) never
 * make a rule fail: where JAX's rule would refuse, the service chooses a
 * layout instead (the first operand's, or replicated), and the lowering
 * moves data to it. */
#include "sm_ir_infer.h"

#include <stdio.h>
#include <string.h>

/* ---- layouts ---- */

void sm_ir_layout_of_spec(const sm_program *p, const sm_pspec *spec, sm_ir_layout *out)
{
    memset(out, 0, sizeof *out);
    for (int d = 0; d < spec->nentries && d < SM_MAX_RANK; d++)
        for (int j = 0; j < spec->e[d].naxes; j++) {
            int a = sm_mesh_axis(&p->mesh, spec->e[d].axes[j]);
            if (a >= 0)
                out->ax[d][out->n[d]++] = (uint8_t)a;
        }
}

void sm_ir_layout_to_spec(const sm_program *p, const sm_ir_layout *l, int rank, uint32_t hidden,
                          sm_pspec *out)
{
    memset(out, 0, sizeof *out);
    int last = 0;
    for (int d = 0; d < rank; d++) {
        sm_pspec_entry *e = &out->e[d];
        for (int j = 0; j < l->n[d]; j++)
            if (!(hidden & (1u << l->ax[d][j])))
                snprintf(e->axes[e->naxes++], SM_AXIS_NAME_MAX, "%s", p->mesh.names[l->ax[d][j]]);
        e->is_tuple = e->naxes > 1;
        if (e->naxes)
            last = d + 1;
    }
    out->nentries = last;
}

int sm_ir_layout_equal(const sm_ir_layout *a, const sm_ir_layout *b, int rank)
{
    for (int d = 0; d < rank; d++)
        if (a->n[d] != b->n[d] || memcmp(a->ax[d], b->ax[d], a->n[d]))
            return 0;
    return 1;
}

int64_t sm_ir_layout_factor(const sm_program *p, const sm_ir_layout *l, int d)
{
    int64_t f = 1;
    for (int j = 0; j < l->n[d]; j++)
        f *= p->mesh.sizes[l->ax[d][j]];
    return f;
}

static int sm_sh_dim_equal(const sm_ir_layout *a, int da, const sm_ir_layout *b, int db)
{
    return a->n[da] == b->n[db] && memcmp(a->ax[da], b->ax[db], a->n[da]) == 0;
}

static void sm_sh_dim_copy(sm_ir_layout *dst, int dd, const sm_ir_layout *src, int sd)
{
    dst->n[dd] = src->n[sd];
    memcpy(dst->ax[dd], src->ax[sd], src->n[sd]);
}

static uint32_t sm_sh_dim_mask(const sm_ir_layout *l, int d)
{
    uint32_t m = 0;
    for (int j = 0; j < l->n[d]; j++)
        m |= 1u << l->ax[d][j];
    return m;
}

/* "('X', None)": a layout as JAX prints tuple(spec) (hidden axes left out). */
static char *sm_sh_tuple_str(const sm_program *p, const sm_ir_layout *l, int rank, uint32_t hidden,
                             char *buf, size_t len)
{
    size_t o = 0;
    o += (size_t)snprintf(buf + o, len - o, "(");
    for (int d = 0; d < rank && o < len; d++) {
        int n = 0;
        for (int j = 0; j < l->n[d]; j++)
            n += !(hidden & (1u << l->ax[d][j]));
        if (d)
            o += (size_t)snprintf(buf + o, len - o, ", ");
        if (o >= len)
            break;
        if (!n) {
            o += (size_t)snprintf(buf + o, len - o, "None");
            continue;
        }
        if (n > 1)
            o += (size_t)snprintf(buf + o, len - o, "(");
        int k = 0;
        for (int j = 0; j < l->n[d] && o < len; j++)
            if (!(hidden & (1u << l->ax[d][j])))
                o += (size_t)snprintf(buf + o, len - o, "%s'%s'", k++ ? ", " : "",
                                      p->mesh.names[l->ax[d][j]]);
        if (n > 1 && o < len)
            o += (size_t)snprintf(buf + o, len - o, ")");
    }
    if (o < len)
        snprintf(buf + o, len - o, "%s)", rank == 1 ? "," : "");
    return buf;
}

/* One dimension's PartitionSpec entry as Python's str() prints it: X for
 * one axis, ('X', 'Y') for several, None. */
static char *sm_sh_entry_str(const sm_program *p, const sm_ir_layout *l, int d, char *buf,
                             size_t len)
{
    if (l->n[d] == 1) {
        snprintf(buf, len, "%s", p->mesh.names[l->ax[d][0]]);
        return buf;
    }
    sm_ir_layout one;
    memset(&one, 0, sizeof one);
    sm_sh_dim_copy(&one, 0, l, d);
    sm_sh_tuple_str(p, &one, 1, 0, buf, len); /* "(('X', 'Y'),)" or "(None,)" */
    size_t n = strlen(buf);
    if (n >= 4) { /* the entry inside */
        memmove(buf, buf + 1, n - 3);
        buf[n - 3] = '\0';
    }
    return buf;
}

/* The value's type as JAX prints it: f32[8@X,4]. */
static char *sm_sh_type_str(const sm_program *p, const sm_ir_value *v, char *buf, size_t len)
{
    size_t o = (size_t)snprintf(buf, len, "%s[", sm_dtype_name(v->dtype));
    for (int d = 0; d < v->shape.rank && o < len; d++) {
        o +=
            (size_t)snprintf(buf + o, len - o, "%s%lld", d ? "," : "", (long long)v->shape.dims[d]);
        int n = 0;
        for (int j = 0; j < v->layout.n[d]; j++)
            n += !(v->hidden & (1u << v->layout.ax[d][j]));
        if (!n || o >= len)
            continue;
        o += (size_t)snprintf(buf + o, len - o, n > 1 ? "@(" : "@");
        int k = 0;
        for (int j = 0; j < v->layout.n[d] && o < len; j++)
            if (!(v->hidden & (1u << v->layout.ax[d][j])))
                o += (size_t)snprintf(buf + o, len - o, "%s%s", k++ ? "," : "",
                                      p->mesh.names[v->layout.ax[d][j]]);
        if (n > 1 && o < len)
            o += (size_t)snprintf(buf + o, len - o, ")");
    }
    if (o < len)
        o += (size_t)snprintf(buf + o, len - o, "]");
    if (o < len)
        sm_ir_axes_suffix(p, 0, v->unreduced, v->ukind, v->reduced, buf + o, len - o);
    return buf;
}

char *sm_ir_jit_type_str(const sm_program *p, const sm_ir_value *v, char *buf, size_t len)
{
    return sm_sh_type_str(p, v, buf, len);
}

/* Layout of an attribute spec for a value of shape s: checked against the
 * mesh, the rank and divisibility. */
static sm_err sm_sh_spec(const sm_program *p, const sm_ir_op *op, const sm_pspec *spec,
                         const sm_shape *s, const char *what, sm_ir_layout *out, char *err,
                         size_t errlen)
{
    char w[200];
    snprintf(w, sizeof w, "%s: %s", sm_op_name(op->kind), what);
    sm_pspec plain = *spec; /* with_sharding_constraint's P.UNCONSTRAINED: checked as None */
    for (int d = 0; op->kind == SM_OP_WITH_SHARDING_CONSTRAINT && d < plain.nentries; d++)
        plain.e[d].unconstrained = 0;
    sm_err e = sm_pspec_check(&plain, &p->mesh, s, w, err, errlen);
    if (e)
        return e;
    sm_ir_layout_of_spec(p, spec, out);
    return SM_OK;
}

/* JAX's primitive of an elementwise op, as its broadcasting rule's
 * sentence names it (jnp.multiply binds lax.mul_p, "mul"). */
static const char *sm_sh_prim_name(sm_op_kind k)
{
    switch (k) {
    case SM_OP_SUBTRACT:
        return "sub";
    case SM_OP_MULTIPLY:
        return "mul";
    case SM_OP_DIVIDE:
    case SM_OP_FLOOR_DIVIDE:
        return "div";
    case SM_OP_MOD:
        return "rem";
    case SM_OP_MAXIMUM:
        return "max";
    case SM_OP_MINIMUM:
        return "min";
    case SM_OP_POWER:
        return "pow";
    case SM_OP_ARCTAN2:
        return "atan2";
    case SM_OP_EQUAL:
        return "eq";
    case SM_OP_NOT_EQUAL:
        return "ne";
    case SM_OP_LESS:
        return "lt";
    case SM_OP_LESS_EQUAL:
        return "le";
    case SM_OP_GREATER:
        return "gt";
    case SM_OP_GREATER_EQUAL:
        return "ge";
    case SM_OP_BITWISE_AND:
    case SM_OP_LOGICAL_AND:
        return "and";
    case SM_OP_BITWISE_OR:
    case SM_OP_LOGICAL_OR:
        return "or";
    case SM_OP_BITWISE_XOR:
    case SM_OP_LOGICAL_XOR:
        return "xor";
    default:
        return sm_op_name(k);
    }
}

/* Fails when a mesh axis names two dimensions of l, the layout of the
 * result out of op (JAX's primitive prim) of in, with JAX's sentence (its
 * DuplicateSpecError, raised as an illegally sharded result); axes in `fix`
 * are dropped from the later dimension instead. */
static sm_err sm_sh_no_twice(const sm_program *p, const sm_ir_op *op, const char *prim,
                             const sm_ir_value *const *in, const sm_ir_value *out, sm_ir_layout *l,
                             int rank, uint32_t fix, uint32_t hidden, char *err, size_t errlen)
{
    uint32_t seen = 0;
    for (int d = 0; d < rank; d++) {
        for (int j = 0; j < l->n[d]; j++) {
            uint32_t bit = 1u << l->ax[d][j];
            if (!(seen & bit)) {
                seen |= bit;
                continue;
            }
            if (!(fix & bit)) {
                sm_pspec sp;
                char s[300], ins[600], t[300];
                size_t o = 0;
                ins[0] = 0;
                for (int k = 0; k < op->noperands && o < sizeof ins; k++)
                    o += (size_t)snprintf(ins + o, sizeof ins - o, "%s%s", k ? ", " : "",
                                          sm_sh_type_str(p, in[k], t, sizeof t));
                sm_ir_value r = *out;
                r.layout = *l;
                r.hidden = hidden;
                sm_ir_layout_to_spec(p, l, rank, hidden, &sp);
                return sm_fail(err, errlen, SM_EINVAL,
                               "%s operation with inputs: %s produces an illegally sharded "
                               "result: %s. A single NamedSharding spec specification can map "
                               "every mesh axis to at most one positional dimension, but %s has "
                               "duplicate entries for %s. Use reshard, or out_sharding=, or "
                               "auto_axes to say how the result is sharded",
                               prim, ins, sm_sh_type_str(p, &r, t, sizeof t),
                               sm_pspec_format(&sp, s, sizeof s), p->mesh.names[l->ax[d][j]]);
            }
            memmove(&l->ax[d][j], &l->ax[d][j + 1], (size_t)(l->n[d] - j - 1));
            l->n[d]--;
            j--;
        }
    }
    return SM_OK;
}

uint32_t sm_ir_all_axes(const sm_program *p)
{
    return p->mesh.naxes >= 32 ? ~0u : (1u << p->mesh.naxes) - 1;
}

/* ---- rules ---- */

sm_err sm_ir_shard_none(const sm_program *p, const sm_ir_op *op, const sm_ir_value *const *in,
                        sm_ir_value *out, sm_ir_shard_plan *plan, char *err, size_t errlen)
{
    if (sm_op_vma_rule(op->kind) != SM_VMA_UNION || op->kind == SM_OP_PVARY)
        return sm_fail(err, errlen, SM_EINVAL,
                       "%s is a collective: it exists only in a shard_map body, which sees one "
                       "device's block. A jit body sees whole arrays: use reshard to move data, "
                       "or call a shard_map function from the jit body",
                       sm_op_name(op->kind));
    int replicated = 1; /* every operand whole on every device: so is the result */
    for (int k = 0; k < op->noperands; k++)
        for (int d = 0; d < in[k]->shape.rank; d++)
            replicated &= in[k]->layout.n[d] == 0;
    if (replicated || (out->hidden & sm_ir_all_axes(p)) == sm_ir_all_axes(p)) {
        /* replicated operands, or full auto sharding: run it on whole arrays */
        for (int k = 0; k < op->noperands; k++)
            memset(&plan->in[k], 0, sizeof plan->in[k]);
        return SM_OK;
    }
    return sm_fail(err, errlen, SM_EINVAL,
                   "sharding rule for %s is not implemented. You can work around this error by "
                   "dropping that operation into full auto sharding mode via: "
                   "auto_axes(fun, out_sharding=...), or reshard its operands to replicated first",
                   sm_op_name(op->kind));
}

/* Elementwise (after numpy broadcasting): per result dimension, the
 * operands' dimensions zipped to it agree on one sharding, or only one of
 * them is sharded (a size-1 broadcast dimension has no say). */
sm_err sm_ir_shard_elementwise(const sm_program *p, const sm_ir_op *op,
                               const sm_ir_value *const *in, sm_ir_value *out,
                               sm_ir_shard_plan *plan, char *err, size_t errlen)
{
    int R = out->shape.rank;
    sm_ir_layout *l = &out->layout;
    uint32_t autos = out->hidden;
    /* Over Auto axes the largest operand's layout wins, so the smaller
     * operands are the ones that move (stable: the first among equals). */
    int order[SM_OP_MAXARGS];
    int64_t size[SM_OP_MAXARGS];
    for (int k = 0; k < op->noperands; k++) {
        order[k] = k;
        size[k] = 1;
        for (int d = 0; d < in[k]->shape.rank; d++)
            size[k] *= in[k]->shape.dims[d];
        for (int q = k; q > 0 && size[order[q - 1]] < size[order[q]]; q--) {
            int t = order[q];
            order[q] = order[q - 1];
            order[q - 1] = t;
        }
    }
    for (int d = 0; d < R; d++) {
        int have = 0;
        for (int q = 0; q < op->noperands; q++) {
            const sm_ir_value *v = in[order[q]];
            int od = d - (R - v->shape.rank);
            if (od < 0 || (v->shape.dims[od] == 1 && v->layout.n[od] == 0))
                continue;
            if (v->layout.n[od] == 0)
                continue;
            if (!have) {
                sm_sh_dim_copy(l, d, &v->layout, od);
                have = 1;
            } else if (!sm_sh_dim_equal(l, d, &v->layout, od)) {
                uint32_t diff = sm_sh_dim_mask(l, d) ^ sm_sh_dim_mask(&v->layout, od);
                if ((diff & autos) == diff)
                    continue; /* Auto axes: keep the larger operand's */
                /* Explicit and Auto axes on one dimension (auto_axes over
                 * some axes): the Explicit rule on the Explicit ones, an
                 * operand sharded there wins over one that is not */
                uint32_t e1 = sm_sh_dim_mask(l, d) & ~autos;
                uint32_t e2 = sm_sh_dim_mask(&v->layout, od) & ~autos;
                if (autos && !e2)
                    continue;
                if (autos && !e1) {
                    sm_sh_dim_copy(l, d, &v->layout, od);
                    continue;
                }
                char specs[600];
                size_t o = 0;
                for (int j = 0; j < op->noperands && o < sizeof specs; j++) {
                    char t[200];
                    if (in[j]->shape.rank == 0)
                        continue;
                    o += (size_t)snprintf(specs + o, sizeof specs - o, "%s%s", o ? ", " : "",
                                          sm_sh_tuple_str(p, &in[j]->layout, in[j]->shape.rank,
                                                          in[j]->hidden, t, sizeof t));
                }
                return sm_fail(err, errlen, SM_EINVAL,
                               "%s got incompatible shardings for broadcasting: %s. Use reshard "
                               "on an operand, or auto_axes(fun, out_sharding=...)",
                               sm_sh_prim_name(op->kind), specs);
            }
        }
    }
    sm_err e = sm_sh_no_twice(p, op, sm_sh_prim_name(op->kind), in, out, l, R, autos, out->hidden,
                              err, errlen);
    if (e)
        return e;
    for (int k = 0; k < op->noperands; k++) {
        const sm_ir_value *v = in[k];
        for (int od = 0; od < v->shape.rank; od++) {
            int d = od + (R - v->shape.rank);
            if (v->shape.dims[od] == 1 && out->shape.dims[d] != 1)
                continue; /* broadcast: the block keeps size 1 */
            sm_sh_dim_copy(&plan->in[k], od, l, d);
        }
    }
    plan->local_layout = *l;
    return SM_OK;
}

/* zeros, ones, full, arange, const: unsharded unless out_sharding=. */
sm_err sm_ir_shard_fill(const sm_program *p, const sm_ir_op *op, const sm_ir_value *const *in,
                        sm_ir_value *out, sm_ir_shard_plan *plan, char *err, size_t errlen)
{
    if (!op->attrs.sharding)
        return SM_OK;
    sm_err e = sm_sh_spec(p, op, op->attrs.sharding, &out->shape, "out_sharding", &out->layout, err,
                          errlen);
    if (e || op->kind == SM_OP_ARANGE || op->kind == SM_OP_CONST)
        return e; /* arange: computed whole, then each device keeps its slice */
    plan->local_layout = out->layout;
    plan->local.ints.n = out->shape.rank;
    for (int d = 0; d < out->shape.rank; d++)
        plan->local.ints.v[d] = out->shape.dims[d] / sm_ir_layout_factor(p, &out->layout, d);
    return SM_OK;
}

/* ---- products ---- */

typedef struct {
    int rank[2];
    int letter[2][SM_MAX_RANK]; /* per operand dimension */
    int nout;
    int out[SM_MAX_RANK]; /* letter of each result dimension */
    int nletters;
} sm_sh_prod;

static int sm_sh_letter_in(const sm_sh_prod *g, int k, int c)
{
    for (int d = 0; d < g->rank[k]; d++)
        if (g->letter[k][d] == c)
            return d;
    return -1;
}

/* The letters of a dot, matmul or einsum (shapes already checked). */
static void sm_sh_prod_dims(const sm_ir_op *op, const sm_ir_value *const *in, sm_sh_prod *g)
{
    memset(g, 0, sizeof *g);
    int ra = in[0]->shape.rank, rb = op->noperands > 1 ? in[1]->shape.rank : 0;
    g->rank[0] = ra;
    g->rank[1] = rb;
    if (op->kind == SM_OP_EINSUM) {
        int id[128];
        for (int c = 0; c < 128; c++)
            id[c] = -1;
        const char *q = op->attrs.spec ? op->attrs.spec : "";
        int count[128] = {0};
        for (int k = 0; k < op->noperands; k++) {
            int d = 0;
            for (; *q && *q != ',' && *q != '-'; q++) {
                if (*q == ' ')
                    continue;
                int c = (unsigned char)*q & 127;
                if (id[c] < 0)
                    id[c] = g->nletters++;
                count[c]++;
                if (d < SM_MAX_RANK)
                    g->letter[k][d++] = id[c];
            }
            if (*q == ',')
                q++;
        }
        if (*q == '-') {
            for (q += 2; *q; q++)
                if (*q != ' ' && g->nout < SM_MAX_RANK)
                    g->out[g->nout++] = id[(unsigned char)*q & 127];
        } else { /* implicit: letters seen once, in alphabetical order */
            for (int c = 0; c < 128; c++)
                if (count[c] == 1 && g->nout < SM_MAX_RANK)
                    g->out[g->nout++] = id[c];
        }
        return;
    }
    if (op->kind == SM_OP_DOT) {
        int k = ra - 1, kb = rb == 1 ? 0 : rb - 2;
        for (int d = 0; d < ra; d++)
            g->letter[0][d] = d;
        g->nletters = ra;
        for (int d = 0; d < rb; d++)
            g->letter[1][d] = d == kb ? k : g->nletters++;
        for (int d = 0; d < ra - 1; d++)
            g->out[g->nout++] = d;
        for (int d = 0; d < rb; d++)
            if (d != kb)
                g->out[g->nout++] = g->letter[1][d];
        return;
    }
    /* matmul: batch dimensions aligned from the right; vectors promoted */
    int nb = (ra > 2 ? ra - 2 : 0) > (rb > 2 ? rb - 2 : 0) ? (ra > 2 ? ra - 2 : 0)
                                                           : (rb > 2 ? rb - 2 : 0);
    g->nletters = nb;
    for (int d = 0; d < nb; d++)
        g->out[g->nout++] = d;
    int ka = g->nletters++;
    if (ra >= 2) {
        for (int d = 0; d < ra - 2; d++)
            g->letter[0][d] = nb - (ra - 2) + d;
        g->letter[0][ra - 2] = g->nletters;
        g->out[g->nout++] = g->nletters++;
        g->letter[0][ra - 1] = ka;
    } else {
        g->letter[0][0] = ka;
    }
    if (rb >= 2) {
        for (int d = 0; d < rb - 2; d++)
            g->letter[1][d] = nb - (rb - 2) + d;
        g->letter[1][rb - 2] = ka;
        g->letter[1][rb - 1] = g->nletters;
        g->out[g->nout++] = g->nletters++;
    } else {
        g->letter[1][0] = ka;
    }
}

static int sm_sh_letter_out(const sm_sh_prod *g, int c)
{
    for (int d = 0; d < g->nout; d++)
        if (g->out[d] == c)
            return d;
    return -1;
}

/* dot / matmul / einsum (JAX's _dot_general_sharding_rule). */
sm_err sm_ir_shard_dot(const sm_program *p, const sm_ir_op *op, const sm_ir_value *const *in,
                       sm_ir_value *out, sm_ir_shard_plan *plan, char *err, size_t errlen)
{
    if (op->kind == SM_OP_DOT && (in[0]->shape.rank == 0 || in[1]->shape.rank == 0))
        return sm_ir_shard_elementwise(p, op, in, out, plan, err, errlen);
    sm_sh_prod g;
    sm_sh_prod_dims(op, in, &g);
    int nk = op->noperands;
    uint32_t autos = out->hidden;
    sm_ir_layout lc[2], rc[2]; /* contracting specs for the message */
    memset(lc, 0, sizeof lc);
    memset(rc, 0, sizeof rc);
    int ncontract = 0, contract_sharded = 0, batch_bad = 0;
    uint8_t cax[SM_MAX_AXES];
    int ncax = 0;
    int lsh[2 * SM_MAX_RANK];
    uint8_t lax_[2 * SM_MAX_RANK][SM_MAX_AXES];
    memset(lsh, 0, sizeof lsh);
    for (int c = 0; c < g.nletters && c < 2 * SM_MAX_RANK; c++) {
        int da = sm_sh_letter_in(&g, 0, c), db = nk > 1 ? sm_sh_letter_in(&g, 1, c) : -1;
        int od = sm_sh_letter_out(&g, c);
        const sm_ir_layout *A = &in[0]->layout, *B = nk > 1 ? &in[1]->layout : NULL;
        int a_sh = da >= 0 && A->n[da] && in[0]->shape.dims[da] != 1;
        int b_sh = db >= 0 && B->n[db] && in[1]->shape.dims[db] != 1;
        const sm_ir_layout *src = a_sh ? A : b_sh ? B : NULL;
        int sd = a_sh ? da : db;
        if (od < 0 && da >= 0 && db >= 0) { /* contracting */
            if (ncontract < SM_MAX_RANK) {
                if (da >= 0)
                    sm_sh_dim_copy(&lc[0], ncontract, A, da);
                if (db >= 0)
                    sm_sh_dim_copy(&rc[0], ncontract, B, db);
            }
            ncontract++;
            if (a_sh && b_sh) {
                uint32_t m = sm_sh_dim_mask(A, da) | sm_sh_dim_mask(B, db);
                if ((m & autos) != m)
                    contract_sharded = 1;
            }
        } else if (nk == 1 && od < 0 && da >= 0) {
            /* one operand's summed dimension (einsum('ab->b')): summed where
             * it lies, its axes the "contracting" ones of an unreduced result */
            if (ncontract < SM_MAX_RANK) {
                sm_sh_dim_copy(&lc[0], ncontract, A, da);
                sm_sh_dim_copy(&rc[0], ncontract, A, da);
            }
            ncontract++;
        } else if (a_sh && b_sh && !sm_sh_dim_equal(A, da, B, db)) {
            uint32_t diff = sm_sh_dim_mask(A, da) ^ sm_sh_dim_mask(B, db);
            if ((diff & autos) != diff)
                batch_bad = 1;
        }
        if (src) {
            lsh[c] = src->n[sd];
            memcpy(lax_[c], src->ax[sd], src->n[sd]);
        }
        if (od < 0 && src)
            for (int j = 0; j < src->n[sd] && ncax < SM_MAX_AXES; j++)
                cax[ncax++] = src->ax[sd][j];
    }
    if (batch_bad && !op->attrs.sharding) {
        char a[300], b[300];
        return sm_fail(err, errlen, SM_EINVAL,
                       "dot_general requires lhs batch dimensions and rhs batch dimensions to "
                       "have the same sharding, got %s and %s.",
                       sm_sh_tuple_str(p, &in[0]->layout, in[0]->shape.rank, 0, a, sizeof a),
                       sm_sh_tuple_str(p, &in[1]->layout, in[1]->shape.rank, 0, b, sizeof b));
    }
    if (contract_sharded && !op->attrs.sharding) {
        char a[300], b[300];
        return sm_fail(err, errlen, SM_EINVAL,
                       "Contracting dimensions are sharded and it is ambiguous how the output "
                       "should be sharded. Please specify the output sharding via the "
                       "out_sharding parameter. Got lhs_contracting_spec=%s and "
                       "rhs_contracting_spec=%s",
                       sm_sh_tuple_str(p, &lc[0], ncontract, 0, a, sizeof a),
                       sm_sh_tuple_str(p, &rc[0], ncontract, 0, b, sizeof b));
    }
    /* contracting axes must not shard a result dimension of the local product */
    uint32_t cmask = 0;
    for (int j = 0; j < ncax; j++)
        cmask |= 1u << cax[j];
    sm_ir_layout loc;
    memset(&loc, 0, sizeof loc);
    uint32_t used = cmask;
    for (int d = 0; d < g.nout; d++) {
        int c = g.out[d];
        for (int j = 0; c < 2 * SM_MAX_RANK && j < lsh[c]; j++) {
            uint32_t bit = 1u << lax_[c][j];
            if (used & bit)
                break; /* drop: an axis twice (the operand is gathered there) */
            used |= bit;
            loc.ax[d][loc.n[d]++] = lax_[c][j];
        }
        if (c < 2 * SM_MAX_RANK) {
            lsh[c] = loc.n[d];
            memcpy(lax_[c], loc.ax[d], loc.n[d]);
        }
    }
    /* every operand dimension takes its letter's layout */
    for (int k = 0; k < nk; k++)
        for (int d = 0; d < g.rank[k]; d++) {
            int c = g.letter[k][d];
            if (c >= 2 * SM_MAX_RANK || in[k]->shape.dims[d] == 1)
                continue;
            if (sm_sh_letter_out(&g, c) < 0 && ncax) { /* contracting */
                int in_both =
                    sm_sh_letter_in(&g, 0, c) >= 0 && (nk > 1 && sm_sh_letter_in(&g, 1, c) >= 0);
                if (!in_both && nk > 1)
                    continue; /* summed within one of two operands: gathered first */
            }
            plan->in[k].n[d] = (uint8_t)lsh[c];
            memcpy(plan->in[k].ax[d], lax_[c], (size_t)lsh[c]);
        }
    plan->local_layout = loc;
    /* the reduction that completes the local products */
    uint32_t pending = 0;
    for (int k = 0; k < nk; k++)
        for (int d = 0; d < g.rank[k]; d++) {
            int c = g.letter[k][d];
            if (sm_sh_letter_out(&g, c) < 0)
                pending |= sm_sh_dim_mask(&plan->in[k], d);
        }
    if (op->attrs.sharding) {
        sm_err e = sm_sh_spec(p, op, op->attrs.sharding, &out->shape, "out_sharding", &out->layout,
                              err, errlen);
        if (e)
            return e;
    } else { /* JAX's: batch, then lhs free, then rhs free dimensions keep theirs */
        sm_ir_layout jx;
        memset(&jx, 0, sizeof jx);
        for (int d = 0; d < g.nout; d++) {
            int c = g.out[d];
            for (int k = 0; k < nk; k++) {
                int od = sm_sh_letter_in(&g, k, c);
                if (od >= 0 && in[k]->shape.dims[od] != 1) {
                    sm_sh_dim_copy(&jx, d, &in[k]->layout, od);
                    break;
                }
            }
        }
        sm_err e = sm_sh_no_twice(p, op, "dot_general", in, out, &jx, g.nout, autos, out->hidden,
                                  err, errlen);
        if (e)
            return e;
        out->layout = jx;
    }
    if (out->unreduced) { /* out_sharding=P(..., unreduced=...): the partial sums stay */
        char a[300], b[300], u[300];
        if (!sm_ir_layout_equal(&lc[0], &rc[0], ncontract < SM_MAX_RANK ? ncontract : SM_MAX_RANK))
            return sm_fail(err, errlen, SM_EINVAL,
                           "lhs and rhs contracting dims should be sharded identically when "
                           "out_sharding provided to dot_general mentions unreduced_axes. Got "
                           "lhs_contracting_spec=%s, rhs_contracting_spec=%s",
                           sm_sh_tuple_str(p, &lc[0], ncontract, 0, a, sizeof a),
                           sm_sh_tuple_str(p, &rc[0], ncontract, 0, b, sizeof b));
        uint32_t cm = 0;
        for (int d = 0; d < ncontract && d < SM_MAX_RANK; d++)
            cm |= sm_sh_dim_mask(&lc[0], d);
        if (cm != out->unreduced)
            return sm_fail(err, errlen, SM_EINVAL,
                           "out_sharding's unreduced axes should be equal to the contracting "
                           "specs. Got unreduced axes=%s and contracting spec=%s",
                           sm_ir_axes_set_str(p, out->unreduced, u, sizeof u),
                           sm_sh_tuple_str(p, &lc[0], ncontract, 0, a, sizeof a));
        pending &= ~out->unreduced;
    }
    if (pending) {
        plan->npost = 0;
        for (int j = 0; j < ncax; j++)
            if (pending & (1u << cax[j]))
                plan->post_axes[plan->npost++] = cax[j];
        plan->post = SM_IR_POST_PSUM;
        /* a reduce-scatter when the result shards one dimension on exactly
         * these axes after its local ones */
        for (int d = 0; d < g.nout; d++) {
            const sm_ir_layout *o = &out->layout;
            if (o->n[d] != loc.n[d] + plan->npost || memcmp(o->ax[d], loc.ax[d], loc.n[d]) ||
                memcmp(o->ax[d] + loc.n[d], plan->post_axes, (size_t)plan->npost))
                continue;
            plan->post = SM_IR_POST_PSUM_SCATTER;
            plan->post_dim = d;
            break;
        }
    }
    return SM_OK;
}

/* ---- reductions ---- */

/* The reduced dimensions (red[d]) go from x's layout, or stay as unsharded
 * size-1 dimensions with keepdims; the rest keep theirs. Their mesh axes
 * become the post collective's, or with gather the operand is gathered
 * along them first (each device then reduces them whole). */
static void sm_sh_reduce_dims(const sm_ir_op *op, const sm_ir_value *x, const int *red, int gather,
                              sm_ir_value *out, sm_ir_shard_plan *plan)
{
    plan->in[0] = x->layout;
    int o = 0;
    for (int d = 0; d < x->shape.rank; d++) {
        if (red[d]) {
            for (int j = 0; !gather && j < x->layout.n[d] && plan->npost < SM_MAX_AXES; j++)
                plan->post_axes[plan->npost++] = x->layout.ax[d][j];
            if (gather)
                plan->in[0].n[d] = 0;
            if (op->attrs.keepdims)
                out->layout.n[o++] = 0;
            continue;
        }
        sm_sh_dim_copy(&out->layout, o++, &x->layout, d);
    }
    plan->local_layout = out->layout;
}

sm_err sm_ir_shard_reduce(const sm_program *p, const sm_ir_op *op, const sm_ir_value *const *in,
                          sm_ir_value *out, sm_ir_shard_plan *plan, char *err, size_t errlen)
{
    const sm_ir_value *x = in[0];
    int red[SM_MAX_RANK] = {0};
    sm_err e =
        sm_ir_axes_list(op, &op->attrs.ints, op->attrs.has_ints, x->shape.rank, red, err, errlen);
    if (e)
        return e;
    /* prod has no collective to complete it: it gathers */
    sm_sh_reduce_dims(op, x, red, op->kind == SM_OP_PROD, out, plan);
    if (plan->npost)
        plan->post = op->kind == SM_OP_SUM                            ? SM_IR_POST_PSUM
                     : op->kind == SM_OP_MEAN                         ? SM_IR_POST_PMEAN
                     : op->kind == SM_OP_MAX || op->kind == SM_OP_ANY ? SM_IR_POST_PMAX
                                                                      : SM_IR_POST_PMIN;
    return SM_OK;
}

/* argmax, argmin: JAX's rule (_argminmax_sharding_rule) deletes the
 * reduced dimension from the operand's spec; the lowering gathers the
 * operand along it (axis=None: along every dimension), so that each device
 * finds the index among all of its elements. */
sm_err sm_ir_shard_argminmax(const sm_program *p, const sm_ir_op *op, const sm_ir_value *const *in,
                             sm_ir_value *out, sm_ir_shard_plan *plan, char *err, size_t errlen)
{
    const sm_ir_value *x = in[0];
    int axis = sm_ir_op_axis(op, x->shape.rank), red[SM_MAX_RANK];
    for (int d = 0; d < x->shape.rank; d++)
        red[d] = axis < 0 || d == axis;
    sm_sh_reduce_dims(op, x, red, 1, out, plan);
    return SM_OK;
}

/* take, take_along_axis: JAX's gather rule (_gather_spec_computation). The
 * dimension taken from must be unsharded, and so must the indices but
 * where take_along_axis pairs them with a's other dimensions (those must
 * agree, or one side be unsharded); the result's dimensions keep a's and
 * the indices' shardings. Otherwise out_sharding= decides (JAX's
 * .at[...].get(out_sharding=)). Either way each device takes its result
 * block from the blocks that hold it: a whole along the dimension taken
 * from and laid out as the result elsewhere, the indices as the result's
 * dimensions they become (the lowering reshards both to that first). */
sm_err sm_ir_shard_take(const sm_program *p, const sm_ir_op *op, const sm_ir_value *const *in,
                        sm_ir_value *out, sm_ir_shard_plan *plan, char *err, size_t errlen)
{
    const sm_ir_value *a = in[0], *ix = in[1];
    int ra = a->shape.rank, ri = ix->shape.rank;
    int axis = sm_ir_op_axis(op, ra), ok = 1;
    if (axis < 0 && op->kind == SM_OP_TAKE_ALONG_AXIS)
        axis = 0; /* a 1-d arr */
    sm_ir_layout res = {{0}};
    for (int d = 0; d < ra; d++) /* the dimension taken from: whole */
        if (axis < 0 || d == axis)
            ok &= !(sm_sh_dim_mask(&a->layout, d) & ~a->hidden);
    if (op->kind == SM_OP_TAKE) {
        for (int d = 0; d < ri; d++)
            ok &= !(sm_sh_dim_mask(&ix->layout, d) & ~ix->hidden);
        int o = 0;
        for (int d = 0; axis >= 0 && d < axis; d++)
            sm_sh_dim_copy(&res, o++, &a->layout, d);
        o += ri;
        for (int d = axis + 1; axis >= 0 && d < ra; d++)
            sm_sh_dim_copy(&res, o++, &a->layout, d);
    } else {
        ok &= !(sm_sh_dim_mask(&ix->layout, axis) & ~ix->hidden);
        for (int d = 0; d < ra; d++) { /* batch dimensions: one sharding for both */
            if (d == axis || a->shape.dims[d] != ix->shape.dims[d])
                continue; /* (a broadcast dimension is whole) */
            if (a->layout.n[d] && ix->layout.n[d] &&
                !sm_sh_dim_equal(&a->layout, d, &ix->layout, d))
                ok = 0;
            sm_sh_dim_copy(&res, d, ix->layout.n[d] ? &ix->layout : &a->layout, d);
        }
    }
    sm_err e = SM_OK;
    if (op->attrs.sharding)
        e = sm_sh_spec(p, op, op->attrs.sharding, &out->shape, "out_sharding", &out->layout, err,
                       errlen);
    else if (ok)
        out->layout = res;
    else {
        char ta[300], ti[300];
        return sm_fail(err, errlen, SM_EINVAL,
                       "Use `.at[...].get(out_sharding=)` to provide output PartitionSpec for the "
                       "gather indexing as out sharding could not be resolved unambiguously (or "
                       "would require collectives on inputs). Got operand=%s, indices=%s",
                       sm_sh_type_str(p, a, ta, sizeof ta), sm_sh_type_str(p, ix, ti, sizeof ti));
    }
    if (e)
        return e;
    const sm_ir_layout *l = &out->layout;
    memset(&plan->in[0], 0, sizeof plan->in[0]);
    memset(&plan->in[1], 0, sizeof plan->in[1]);
    if (op->kind == SM_OP_TAKE) {
        for (int d = 0; axis >= 0 && d < ra; d++)
            if (d != axis)
                sm_sh_dim_copy(&plan->in[0], d, l, d < axis ? d : d - 1 + ri);
        for (int j = 0; j < ri; j++)
            sm_sh_dim_copy(&plan->in[1], j, l, axis < 0 ? j : axis + j);
    } else {
        for (int d = 0; d < ra; d++) {
            if (d != axis && a->shape.dims[d] == out->shape.dims[d])
                sm_sh_dim_copy(&plan->in[0], d, l, d);
            if (ix->shape.dims[d] == out->shape.dims[d])
                sm_sh_dim_copy(&plan->in[1], d, l, d);
        }
    }
    plan->local_layout = *l;
    return SM_OK;
}

/* segment_sum: a sum of data's rows into segments. The segments are whole
 * on every device; data's other dimensions keep their sharding; the
 * segment ids are laid out as data's leading dimensions, and where those
 * are sharded each device sums its rows and a psum over their mesh axes
 * completes the sums (as a sum over a sharded dimension). */
sm_err sm_ir_shard_segment_sum(const sm_program *p, const sm_ir_op *op,
                               const sm_ir_value *const *in, sm_ir_value *out,
                               sm_ir_shard_plan *plan, char *err, size_t errlen)
{
    const sm_ir_value *x = in[0], *ids = in[1];
    int k = ids->shape.rank;
    plan->in[0] = x->layout;
    memset(&plan->in[1], 0, sizeof plan->in[1]);
    memset(&out->layout, 0, sizeof out->layout);
    for (int d = 0; d < x->shape.rank; d++) {
        if (d >= k) {
            sm_sh_dim_copy(&out->layout, 1 + d - k, &x->layout, d);
            continue;
        }
        sm_sh_dim_copy(&plan->in[1], d, &x->layout, d);
        for (int j = 0; j < x->layout.n[d] && plan->npost < SM_MAX_AXES; j++)
            plan->post_axes[plan->npost++] = x->layout.ax[d][j];
    }
    if (plan->npost)
        plan->post = SM_IR_POST_PSUM;
    plan->local_layout = out->layout;
    return SM_OK;
}

/* scatter, scatter_add, _mul, _min, _max: JAX's rule for a scatter into
 * the operand's first dimension (_scatter_spec_computation with the
 * dimension numbers of x.at[indices]): the operand's first dimension, the
 * indices and the updates' query dimensions unsharded, and the updates'
 * other dimensions sharded as the operand's (or both unsharded); the
 * result has the operand's sharding. Anything else needs out_sharding=,
 * as JAX's sentence says: the operand and the updates are then resharded to
 * the result's layout with the first dimension whole (and the indices
 * whole), each device updates its block, and the result is resharded to
 * out_sharding. Over Auto axes (hidden) nothing is refused. */
sm_err sm_ir_shard_scatter(const sm_program *p, const sm_ir_op *op, const sm_ir_value *const *in,
                           sm_ir_value *out, sm_ir_shard_plan *plan, char *err, size_t errlen)
{
    const sm_ir_value *x = in[0], *ix = in[1], *u = in[2];
    int r = x->shape.rank, q = ix->shape.rank, ok = 1;
    ok &= !(sm_sh_dim_mask(&x->layout, 0) & ~x->hidden);
    for (int d = 0; d < q; d++) {
        ok &= !(sm_sh_dim_mask(&ix->layout, d) & ~ix->hidden);
        ok &= !(sm_sh_dim_mask(&u->layout, d) & ~u->hidden);
    }
    for (int d = 1; d < r; d++) {
        uint32_t mx = sm_sh_dim_mask(&x->layout, d) & ~x->hidden;
        uint32_t mu = sm_sh_dim_mask(&u->layout, q + d - 1) & ~u->hidden;
        ok &= mx == mu && (!mx || sm_sh_dim_equal(&x->layout, d, &u->layout, q + d - 1));
    }
    sm_err e = SM_OK;
    if (op->attrs.sharding) {
        e = sm_sh_spec(p, op, op->attrs.sharding, &out->shape, "out_sharding", &out->layout, err,
                       errlen);
    } else if (ok) {
        out->layout = x->layout;
        out->layout.n[0] = 0; /* (sharded over Auto axes only: gathered) */
    } else {
        char tx[300], ti[300], tu[300];
        sm_sh_type_str(p, ix, ti, sizeof ti);
        size_t n = strlen(ti);
        if (n >= 1 && n + 2 < sizeof ti) /* JAX's indices end in the index vector: [...,1] */
            snprintf(ti + n - 1, sizeof ti - (n - 1), "%s1]", q ? "," : "");
        return sm_fail(err, errlen, SM_EINVAL,
                       "Use `.at[...].set/add/mul/...(out_sharding=)` to provide output "
                       "PartitionSpec for the scatter update as out sharding could not be "
                       "resolved unambiguously (or would require collectives on inputs). Got "
                       "operand=%s, indices=%s, updates=%s",
                       sm_sh_type_str(p, x, tx, sizeof tx), ti,
                       sm_sh_type_str(p, u, tu, sizeof tu));
    }
    if (e)
        return e;
    sm_ir_layout l = out->layout; /* the blocks updated: the first dimension whole */
    l.n[0] = 0;
    plan->in[0] = l;
    memset(&plan->in[1], 0, sizeof plan->in[1]);
    memset(&plan->in[2], 0, sizeof plan->in[2]);
    for (int d = 1; d < r; d++)
        sm_sh_dim_copy(&plan->in[2], q + d - 1, &l, d);
    plan->local_layout = l;
    return SM_OK;
}

/* cumsum, cumprod, cummax, cummin: JAX's rule (_cumred_sharding_rule), and
 * sort, argsort (_sort_abstract_eval): the operand must not be sharded
 * along the axis; the result keeps its sharding. axis=None (the flattened
 * operand) is gathered whole. */
sm_err sm_ir_shard_cumulative(const sm_program *p, const sm_ir_op *op, const sm_ir_value *const *in,
                              sm_ir_value *out, sm_ir_shard_plan *plan, char *err, size_t errlen)
{
    const sm_ir_value *x = in[0];
    int axis = sm_ir_op_axis(op, x->shape.rank);
    if (axis < 0) {
        memset(&plan->in[0], 0, sizeof plan->in[0]);
        memset(&out->layout, 0, sizeof out->layout);
    } else if ((sm_sh_dim_mask(&x->layout, axis) & ~x->hidden) &&
               (op->kind == SM_OP_SORT || op->kind == SM_OP_ARGSORT)) {
        char m[400], t[300];
        sm_pspec sp;
        size_t o = 0;
        for (int a = 0; a < p->mesh.naxes && o < sizeof m; a++)
            o += (size_t)snprintf(m + o, sizeof m - o, "%s'%s': %lld", a ? ", " : "",
                                  p->mesh.names[a], (long long)p->mesh.sizes[a]);
        sm_ir_layout_to_spec(p, &x->layout, x->shape.rank, x->hidden, &sp);
        return sm_fail(err, errlen, SM_EINVAL,
                       "Arguments to sort must be unsharded over the sorting dimension. Got arg "
                       "sharding=NamedSharding(mesh=Mesh(%s), spec=%s) and sorting dimension=%d",
                       m, sm_pspec_format(&sp, t, sizeof t), axis);
    } else if (sm_sh_dim_mask(&x->layout, axis) & ~x->hidden) {
        char t[300];
        return sm_fail(err, errlen, SM_EINVAL,
                       "Input should be unsharded over the axis being reduced. Got input "
                       "type=%s and axis=%d",
                       sm_sh_type_str(p, x, t, sizeof t), axis);
    } else { /* (an axis sharded over Auto mesh axes only is gathered) */
        plan->in[0] = x->layout;
        plan->in[0].n[axis] = 0;
        out->layout = plan->in[0];
    }
    plan->local_layout = out->layout;
    return SM_OK;
}

/* ---- shape ops ---- */

static void sm_sh_block_shape(const sm_program *p, const sm_shape *s, const sm_ir_layout *l,
                              sm_ir_ints *out)
{
    out->n = s->rank;
    for (int d = 0; d < s->rank; d++)
        out->v[d] = s->dims[d] / sm_ir_layout_factor(p, l, d);
}

static sm_err sm_sh_reshape_error(const sm_program *p, const sm_ir_op *op, const sm_ir_value *x,
                                  const sm_shape *s, char *err, size_t errlen)
{
    char t[300], sh[200];
    return sm_fail(err, errlen, SM_EINVAL,
                   "This reshape is not supported. Please specify the sharding of the output via "
                   "the out_sharding argument of reshape. Got operand type: %s, new sizes: %s",
                   sm_sh_type_str(p, x, t, sizeof t), sm_ir_shape_str(s, sh, sizeof sh));
}

/* JAX's reshape rule: size-1 dimensions come and go; one dimension split
 * (its axes go to the split dimensions, most significant first, whole) or
 * adjacent dimensions merged (only the leading ones sharded). *direct is
 * set when the blocks reshape in place (the result block of every device is
 * its operand block, reshaped). */
static int sm_sh_reshape_rule(const sm_program *p, const sm_ir_value *x, const sm_shape *s,
                              sm_ir_layout *out, int *direct)
{
    memset(out, 0, sizeof *out);
    *direct = 1;
    int any = 0;
    for (int d = 0; d < x->shape.rank; d++)
        any |= x->layout.n[d] != 0;
    if (!any)
        return 0;
    /* walk both shapes, grouping dimensions with equal products */
    int i = 0, j = 0;
    const sm_shape *a = &x->shape;
    while (i < a->rank || j < s->rank) {
        if (i < a->rank && a->dims[i] == 1 && (j >= s->rank || s->dims[j] != 1)) {
            if (x->layout.n[i])
                return -1;
            i++;
            continue;
        }
        if (j < s->rank && s->dims[j] == 1 && (i >= a->rank || a->dims[i] != 1)) {
            j++;
            continue;
        }
        if (i >= a->rank || j >= s->rank)
            return -1;
        int i0 = i, j0 = j;
        int64_t pa = a->dims[i++], pb = s->dims[j++];
        while (pa != pb) {
            if (pa < pb) {
                if (i >= a->rank)
                    return -1;
                pa *= a->dims[i++];
            } else {
                if (j >= s->rank)
                    return -1;
                pb *= s->dims[j++];
            }
        }
        int na = i - i0, nb = j - j0;
        if (na == 1 && nb == 1) {
            sm_sh_dim_copy(out, j0, &x->layout, i0);
            continue;
        }
        if (na > 1 && nb > 1)
            return -1; /* neither a split nor a merge */
        if (na == 1) { /* split dimension i0 into j0..j-1 */
            int ax = 0;
            for (int o = j0; o < j; o++) {
                int64_t sz = s->dims[o];
                while (sz > 1 && ax < x->layout.n[i0]) {
                    int64_t asz = p->mesh.sizes[x->layout.ax[i0][ax]];
                    if (sz % asz)
                        return -1;
                    sz /= asz;
                    out->ax[o][out->n[o]++] = x->layout.ax[i0][ax++];
                }
                if (o > j0 && out->n[o])
                    *direct = 0;
            }
            if (ax < x->layout.n[i0])
                return -1;
            continue;
        }
        /* merge i0..i-1 into j0: the sharded ones must lead */
        int seen_none = 0;
        for (int d = i0; d < i; d++) {
            if (x->layout.n[d] && seen_none)
                return -1;
            if (!x->layout.n[d])
                seen_none = 1;
            for (int k = 0; k < x->layout.n[d]; k++)
                out->ax[j0][out->n[j0]++] = x->layout.ax[d][k];
            if (d > i0 && x->layout.n[d])
                *direct = 0;
        }
    }
    return 0;
}

sm_err sm_ir_shard_reshape(const sm_program *p, const sm_ir_op *op, const sm_ir_value *const *in,
                           sm_ir_value *out, sm_ir_shard_plan *plan, char *err, size_t errlen)
{
    const sm_ir_value *x = in[0];
    sm_ir_layout nat;
    int direct = 0;
    int ok = sm_sh_reshape_rule(p, x, &out->shape, &nat, &direct) == 0;
    if (op->attrs.sharding) {
        sm_err e = sm_sh_spec(p, op, op->attrs.sharding, &out->shape, "out_sharding", &out->layout,
                              err, errlen);
        if (e)
            return e;
    } else if (ok) {
        out->layout = nat;
    } else {
        uint32_t all = 0;
        for (int d = 0; d < x->shape.rank; d++)
            all |= sm_sh_dim_mask(&x->layout, d);
        if ((all & out->hidden) != all)
            return sm_sh_reshape_error(p, op, x, &out->shape, err, errlen);
        memset(&out->layout, 0, sizeof out->layout); /* Auto: computed whole */
    }
    if (ok && direct) { /* reshape the blocks in place */
        plan->in[0] = x->layout;
        plan->local_layout = nat;
    } /* else gather the operand, reshape it whole, keep each device's slice */
    if (op->kind == SM_OP_RESHAPE)
        sm_sh_block_shape(p, &out->shape, &plan->local_layout, &plan->local.ints);
    return SM_OK;
}

sm_err sm_ir_shard_transpose(const sm_program *p, const sm_ir_op *op, const sm_ir_value *const *in,
                             sm_ir_value *out, sm_ir_shard_plan *plan, char *err, size_t errlen)
{
    const sm_ir_value *x = in[0];
    int r = x->shape.rank;
    for (int d = 0; d < r; d++) {
        int src = op->attrs.has_ints ? (int)op->attrs.ints.v[d] : r - 1 - d;
        if (src < 0)
            src += r;
        if (src >= 0 && src < r)
            sm_sh_dim_copy(&out->layout, d, &x->layout, src);
    }
    plan->in[0] = x->layout;
    plan->local_layout = out->layout;
    return SM_OK;
}

sm_err sm_ir_shard_broadcast_to(const sm_program *p, const sm_ir_op *op,
                                const sm_ir_value *const *in, sm_ir_value *out,
                                sm_ir_shard_plan *plan, char *err, size_t errlen)
{
    const sm_ir_value *x = in[0];
    int R = out->shape.rank;
    for (int od = 0; od < x->shape.rank; od++) {
        int d = od + R - x->shape.rank;
        if (x->shape.dims[od] == out->shape.dims[d])
            sm_sh_dim_copy(&out->layout, d, &x->layout, od);
    }
    plan->in[0] = x->layout;
    plan->local_layout = out->layout;
    sm_sh_block_shape(p, &out->shape, &out->layout, &plan->local.ints);
    return SM_OK;
}

/* Slices, pads, rolls and updates (JAX's _get_sharding_for_varying_out_shape):
 * the result keeps the operand's sharding where the new size still divides;
 * the lowering gathers the dimensions the op changes, runs it whole along
 * them, and keeps each device's slice. */
sm_err sm_ir_shard_slice(const sm_program *p, const sm_ir_op *op, const sm_ir_value *const *in,
                         sm_ir_value *out, sm_ir_shard_plan *plan, char *err, size_t errlen)
{
    const sm_ir_value *x = in[0];
    int r = x->shape.rank;
    const char *what = op->kind == SM_OP_PAD                    ? "padding"
                       : op->kind == SM_OP_ROLL                 ? "roll"
                       : op->kind == SM_OP_REV                  ? "rev"
                       : op->kind == SM_OP_SLICE                ? "slicing"
                       : op->kind == SM_OP_DYNAMIC_UPDATE_SLICE ? "dynamic_update_slice"
                                                                : "dynamic_slice";
    int changed[SM_MAX_RANK] = {0};
    const sm_shape *upd = op->kind == SM_OP_DYNAMIC_UPDATE_SLICE ? &in[1]->shape : &out->shape;
    for (int d = 0; d < r && d < upd->rank; d++)
        changed[d] = upd->dims[d] != x->shape.dims[d];
    if (op->kind == SM_OP_ROLL) {
        if (!op->attrs.has_ints2)
            for (int d = 0; d < r; d++)
                changed[d] = 1; /* a roll of the flattened array */
        for (int k = 0; op->attrs.has_ints2 && k < op->attrs.ints2.n; k++) {
            int a;
            if (sm_ir_norm_axis(op->attrs.ints2.v[k], r, &a) == 0)
                changed[a] = 1;
        }
    }
    for (int k = 0; op->kind == SM_OP_REV && k < op->attrs.ints.n; k++) {
        int a; /* a dimension reversed: gathered, as a roll's (JAX keeps the sharding) */
        if (sm_ir_norm_axis(op->attrs.ints.v[k], r, &a) == 0)
            changed[a] = 1;
    }
    if (op->kind == SM_OP_DYNAMIC_UPDATE_SLICE) {
        if (!sm_ir_layout_equal(&x->layout, &in[1]->layout, r)) {
            uint32_t diff = 0;
            for (int d = 0; d < r; d++)
                diff |= sm_sh_dim_mask(&x->layout, d) ^ sm_sh_dim_mask(&in[1]->layout, d);
            if ((diff & out->hidden) != diff) {
                char a[300], b[300];
                return sm_fail(err, errlen, SM_EINVAL,
                               "dynamic_update_slice operand sharding must be equal to update "
                               "sharding, got operand sharding %s and update sharding %s.",
                               sm_sh_type_str(p, x, a, sizeof a),
                               sm_sh_type_str(p, in[1], b, sizeof b));
            }
        }
    }
    int all_one = 1;
    for (int d = 0; d < out->shape.rank; d++)
        all_one &= out->shape.dims[d] == 1;
    if (!all_one) {
        for (int d = 0; d < r; d++) {
            int64_t f = sm_ir_layout_factor(p, &x->layout, d);
            if (out->shape.dims[d] != x->shape.dims[d] && x->layout.n[d] &&
                out->shape.dims[d] % f) {
                if ((sm_sh_dim_mask(&x->layout, d) & out->hidden) == sm_sh_dim_mask(&x->layout, d))
                    continue; /* Auto: left unsharded */
                char t[300], sh[200], sp[200];
                return sm_fail(err, errlen, SM_EINVAL,
                               "%s on sharded dims where out dim (%lld) is not divisible by mesh "
                               "axes (%lld) with spec (%s) is not implemented. Got input type=%s "
                               "and output shape=%s",
                               what, (long long)out->shape.dims[d], (long long)f,
                               sm_sh_entry_str(p, &x->layout, d, sp, sizeof sp),
                               sm_sh_type_str(p, x, t, sizeof t),
                               sm_ir_shape_str(&out->shape, sh, sizeof sh));
            }
            if (!(out->shape.dims[d] % f))
                sm_sh_dim_copy(&out->layout, d, &x->layout, d);
        }
    }
    /* blocks: gathered where the op changes the dimension */
    for (int d = 0; d < r; d++) {
        if (changed[d])
            continue;
        sm_sh_dim_copy(&plan->in[0], d, &x->layout, d);
        sm_sh_dim_copy(&plan->local_layout, d, &x->layout, d);
        int64_t blk = x->shape.dims[d] / sm_ir_layout_factor(p, &x->layout, d);
        if (op->kind == SM_OP_SLICE && d < plan->local.ints2.n)
            plan->local.ints2.v[d] = plan->local.ints.v[d] + blk;
        if (op->kind == SM_OP_DYNAMIC_SLICE && d < plan->local.ints.n)
            plan->local.ints.v[d] = blk;
    }
    if (op->kind == SM_OP_DYNAMIC_SLICE_IN_DIM) {
        int a;
        if (sm_ir_norm_axis(op->attrs.axis, r, &a) == 0 && !changed[a])
            plan->local.ints.v[0] = x->shape.dims[a] / sm_ir_layout_factor(p, &x->layout, a);
    }
    if (op->kind == SM_OP_DYNAMIC_UPDATE_SLICE)
        plan->in[1] = plan->in[0];
    return SM_OK;
}

/* tile (JAX's _tile_abstract_eval): a dimension tiled more than once may
 * not be sharded (over Auto axes it is gathered for the local op); the
 * others keep their sharding, each device tiling its block. */
sm_err sm_ir_shard_tile(const sm_program *p, const sm_ir_op *op, const sm_ir_value *const *in,
                        sm_ir_value *out, sm_ir_shard_plan *plan, char *err, size_t errlen)
{
    const sm_ir_value *x = in[0];
    const sm_ir_ints *v = &op->attrs.ints;
    int r = x->shape.rank, R = out->shape.rank;
    for (int dx = 0; dx < r; dx++) {
        int d = dx + R - r, dv = d - (R - v->n);
        int64_t reps = dv >= 0 ? v->v[dv] : 1;
        uint32_t m = sm_sh_dim_mask(&x->layout, dx);
        if (reps != 1 && m) {
            if ((m & out->hidden) == m)
                continue; /* Auto: gathered */
            char t[300], rs[200];
            size_t o = 0;
            for (int k = 0; k < v->n; k++)
                o += (size_t)snprintf(rs + o, o < sizeof rs ? sizeof rs - o : 0, "%s%lld",
                                      k ? ", " : "", (long long)v->v[k]);
            return sm_fail(err, errlen, SM_EINVAL,
                           "Operand cannot be sharded on dimension %d when the tiling is "
                           "non-trivial. Got input type: %s with reps: (%s%s)",
                           dx, sm_sh_type_str(p, x, t, sizeof t), rs, v->n == 1 ? "," : "");
        }
        sm_sh_dim_copy(&out->layout, d, &x->layout, dx);
        sm_sh_dim_copy(&plan->in[0], dx, &x->layout, dx);
    }
    plan->local_layout = out->layout;
    return SM_OK;
}

/* concatenate: every operand with the same sharding (JAX), the
 * concatenation dimension gathered for the local op. */
sm_err sm_ir_shard_concatenate(const sm_program *p, const sm_ir_op *op,
                               const sm_ir_value *const *in, sm_ir_value *out,
                               sm_ir_shard_plan *plan, char *err, size_t errlen)
{
    int r = out->shape.rank, ax;
    if (sm_ir_norm_axis(op->attrs.axis, r, &ax))
        ax = 0;
    out->layout = in[0]->layout;
    for (int k = 1; k < op->noperands; k++) {
        if (sm_ir_layout_equal(&in[k]->layout, &in[0]->layout, r))
            continue;
        uint32_t diff = 0;
        for (int d = 0; d < r; d++)
            diff |= sm_sh_dim_mask(&in[0]->layout, d) ^ sm_sh_dim_mask(&in[k]->layout, d);
        if ((diff & out->hidden) == diff)
            continue;
        char ss[800];
        size_t o = 0;
        for (int j = 0; j < op->noperands && o < sizeof ss; j++) {
            sm_pspec sp;
            char s[200];
            sm_ir_layout_to_spec(p, &in[j]->layout, r, in[j]->hidden, &sp);
            o += (size_t)snprintf(ss + o, sizeof ss - o, "%s%s", j ? ", " : "",
                                  sm_pspec_format(&sp, s, sizeof s));
        }
        return sm_fail(err, errlen, SM_EINVAL,
                       "All operands should have the same sharding. Got shardings %s. Use "
                       "reshard on the operands first",
                       ss);
    }
    if (out->shape.dims[ax] % sm_ir_layout_factor(p, &out->layout, ax))
        out->layout.n[ax] = 0;
    for (int k = 0; k < op->noperands; k++) {
        plan->in[k] = out->layout;
        plan->in[k].n[ax] = 0;
    }
    plan->local_layout = plan->in[0];
    return SM_OK;
}

/* reshard and with_sharding_constraint: the spec is the new layout. */
sm_err sm_ir_shard_reshard(const sm_program *p, const sm_ir_op *op, const sm_ir_value *const *in,
                           sm_ir_value *out, sm_ir_shard_plan *plan, char *err, size_t errlen)
{
    if (!op->attrs.sharding)
        return sm_fail(err, errlen, SM_EINVAL, "%s needs a PartitionSpec", sm_op_name(op->kind));
    sm_pspec want = *op->attrs.sharding;
    if (op->kind == SM_OP_WITH_SHARDING_CONSTRAINT) {
        /* over Auto axes a constraint is a hint, and where its axes do not
         * divide a dimension JAX pads; here the dimension keeps the longest
         * run of them that divides it (the values are the same) */
        for (int d = 0; d < want.nentries && d < out->shape.rank; d++) {
            int64_t f = 1;
            for (int j = 0; j < want.e[d].naxes; j++) {
                int a = sm_mesh_axis(&p->mesh, want.e[d].axes[j]);
                if (a < 0 || !(out->hidden & (1u << a)) ||
                    out->shape.dims[d] % (f * p->mesh.sizes[a])) {
                    if (a >= 0 && (out->hidden & (1u << a)))
                        want.e[d].naxes = j;
                    break;
                }
                f *= p->mesh.sizes[a];
            }
        }
    }
    sm_err e = sm_sh_spec(p, op, &want, &out->shape, "sharding", &out->layout, err, errlen);
    if (e)
        return e;
    if (op->kind == SM_OP_WITH_SHARDING_CONSTRAINT) {
        /* the constraint pins Auto axes. JAX's: with every axis Explicit it
         * asserts the operand's sharding; with any Auto axis its spec may
         * name Auto axes only */
        uint32_t named = 0;
        for (int d = 0; d < out->shape.rank; d++)
            named |= sm_sh_dim_mask(&out->layout, d);
        char s[300], t[300];
        if (!(out->hidden & sm_ir_all_axes(p))) {
            for (int d = 0; d < out->shape.rank; d++)
                if (!sm_sh_dim_equal(&out->layout, d, &in[0]->layout, d)) {
                    sm_pspec xs, us;
                    sm_ir_layout_to_spec(p, &in[0]->layout, in[0]->shape.rank, 0, &xs);
                    sm_ir_layout_to_spec(p, &out->layout, out->shape.rank, 0, &us);
                    for (; xs.nentries < in[0]->shape.rank; xs.nentries++) /* JAX's: one entry */
                        memset(&xs.e[xs.nentries], 0, sizeof xs.e[0]);     /* per dimension */
                    for (; us.nentries < out->shape.rank; us.nentries++)
                        memset(&us.e[us.nentries], 0, sizeof us.e[0]);
                    sm_pspec_format(&xs, t, sizeof t);
                    sm_pspec_format(&us, s, sizeof s);
                    return sm_fail(err, errlen, SM_EINVAL,
                                   "`with_sharding_constraint` acts as an assert when all axes "
                                   "of mesh are of type `Explicit`. The array sharding: %s did "
                                   "not match the sharding provided: %s. Please use "
                                   "`jax.sharding.reshard` to shard your input to the sharding "
                                   "you want.",
                                   t, s);
                }
        } else if (named & ~out->hidden) {
            /* (the dimensions left UNCONSTRAINED keep the operand's: below) */
            size_t o = (size_t)snprintf(t, sizeof t, "Mesh(");
            for (int a = 0; a < p->mesh.naxes && o < sizeof t; a++)
                o += (size_t)snprintf(t + o, sizeof t - o, "%s'%s': %lld", a ? ", " : "",
                                      p->mesh.names[a], (long long)p->mesh.sizes[a]);
            for (int a = 0; a < p->mesh.naxes && o < sizeof t; a++)
                o += (size_t)snprintf(t + o, sizeof t - o, "%s%s", a ? ", " : ", axis_types=(",
                                      op->manual && (op->manual_axes & (1u << a)) ? "Manual"
                                      : out->hidden & (1u << a)                   ? "Auto"
                                                                                  : "Explicit");
            if (o < sizeof t)
                snprintf(t + o, sizeof t - o, "))");
            return sm_fail(err, errlen, SM_EINVAL,
                           "The spec of NamedSharding passed to with_sharding_constraint can only "
                           "refer to Auto axes of the mesh. Got spec=%s and mesh=%s. You "
                           "probably meant to use `reshard` API?",
                           sm_pspec_format(op->attrs.sharding, s, sizeof s), t);
        }
    }
    if (op->kind == SM_OP_WITH_SHARDING_CONSTRAINT && (out->hidden & sm_ir_all_axes(p))) {
        /* JAX's lowering on a mesh of Explicit and Auto axes: each dimension
         * laid out over the operand's Explicit axes (its type's), then the
         * constraint's Auto ones */
        for (int d = 0; d < out->shape.rank; d++) {
            uint8_t keep[SM_MAX_AXES];
            int n = 0;
            for (int j = 0; j < in[0]->layout.n[d]; j++)
                if (!(out->hidden & (1u << in[0]->layout.ax[d][j])))
                    keep[n++] = in[0]->layout.ax[d][j];
            if (!n)
                continue;
            if (n + out->layout.n[d] > SM_MAX_AXES)
                return sm_fail(err, errlen, SM_EINVAL, "with_sharding_constraint: too many axes");
            memmove(&out->layout.ax[d][n], out->layout.ax[d], (size_t)out->layout.n[d]);
            memcpy(out->layout.ax[d], keep, (size_t)n);
            out->layout.n[d] = (uint8_t)(out->layout.n[d] + n);
            if (out->shape.dims[d] % sm_ir_layout_factor(p, &out->layout, d)) {
                char s[300];
                return sm_fail(err, errlen, SM_EINVAL,
                               "with_sharding_constraint: dimension %d of size %lld is sharded "
                               "over its Explicit axes and then %s's, which do not divide it",
                               d, (long long)out->shape.dims[d],
                               sm_pspec_format(op->attrs.sharding, s, sizeof s));
            }
        }
    }
    /* P.UNCONSTRAINED: the dimension keeps the operand's layout (the axes
     * the spec names elsewhere left out) */
    const sm_pspec *sp = op->attrs.sharding;
    uint32_t used = 0;
    for (int d = 0; d < out->shape.rank; d++)
        used |= sm_sh_dim_mask(&out->layout, d);
    for (int d = 0; d < sp->nentries && d < out->shape.rank; d++) {
        if (!sp->e[d].unconstrained)
            continue;
        out->layout.n[d] = 0;
        for (int j = 0; j < in[0]->layout.n[d]; j++)
            if (!(used & (1u << in[0]->layout.ax[d][j])))
                out->layout.ax[d][out->layout.n[d]++] = in[0]->layout.ax[d][j];
        used |= sm_sh_dim_mask(&out->layout, d);
    }
    plan->in[0] = in[0]->layout;
    plan->local_layout = in[0]->layout;
    return SM_OK;
}

/* shard_map_in: the argument resharded to the in_spec becomes a block
 * varying over the spec's axes; shard_map_out: a block becomes the global
 * array its out_spec assembles. A shard_map Manual over some axes only
 * (op->manual_axes): the block keeps the argument's sharding over the
 * others (JAX's partial-manual types), laid out inside each block (the
 * spec's axes major), and the result is sharded over the spec's axes, then
 * the block's. */
sm_err sm_ir_shard_manual(const sm_program *p, const sm_ir_op *op, const sm_ir_value *const *in,
                          sm_ir_value *out, sm_ir_shard_plan *plan, char *err, size_t errlen)
{
    sm_ir_layout l;
    sm_ir_layout_of_spec(p, op->attrs.sharding, &l);
    uint32_t m = op->manual_axes;
    const sm_ir_value *x = in[0];
    if (op->kind == SM_OP_SHARD_MAP_IN) {
        out->vma = op->outer_axes ? x->vma : 0; /* nested: what the block varied over too */
        for (int d = 0; d < x->shape.rank; d++)
            out->vma |= sm_sh_dim_mask(&l, d);
        memset(&out->layout, 0, sizeof out->layout);
        plan->in[0] = l;
        if (!m)
            return SM_OK;
        out->hidden |= m;
        for (int d = 0; d < x->shape.rank; d++) {
            int64_t f = 1;
            sm_ir_layout keep = {{0}};
            for (int j = 0; j < x->layout.n[d]; j++) {
                int a = x->layout.ax[d][j];
                if (!(m & (1u << a))) {
                    keep.ax[0][keep.n[0]++] = (uint8_t)a;
                    f *= p->mesh.sizes[a];
                }
            }
            if (out->shape.dims[d] % f) {
                if (sm_sh_dim_mask(&keep, 0) & ~x->hidden) {
                    char ty[300];
                    return sm_fail(err, errlen, SM_EINVAL,
                                   "shard_map argument of type %s: its block's dimension %d "
                                   "has size %lld, which is not divisible by %lld, the product "
                                   "of the sizes of the mesh axes outside axis_names its type "
                                   "shards that dimension over; reshard it first",
                                   sm_sh_type_str(p, x, ty, sizeof ty), d,
                                   (long long)out->shape.dims[d], (long long)f);
                }
                keep.n[0] = 0; /* Auto axes only: the block is whole along them */
            }
            for (int j = 0; j < keep.n[0]; j++) {
                out->layout.ax[d][out->layout.n[d]++] = keep.ax[0][j];
                plan->in[0].ax[d][plan->in[0].n[d]++] = keep.ax[0][j];
            }
        }
        return SM_OK;
    }
    out->layout = l;
    for (int d = 0; m && d < x->shape.rank; d++)
        for (int j = 0; j < x->layout.n[d]; j++)
            out->layout.ax[d][out->layout.n[d]++] = x->layout.ax[d][j];
    if (op->outer_axes) /* nested: varies over what it did outside the shard_map's axes */
        out->vma = x->vma & ~(m & ~op->outer_axes);
    return SM_OK;
}

/* A collective (or axis_index, pvary, pcast) in the body of a shard_map
 * Manual over some axes: it acts on each device's part of the blocks, so
 * the dimensions it gathers, scatters or splits must be whole over the
 * other axes (Auto ones are made so; an Explicit one is refused, as
 * resharding it would change the value's type); the others keep their
 * sharding. */
sm_err sm_ir_shard_pcoll(const sm_program *p, const sm_ir_op *op, const sm_ir_value *const *in,
                         sm_ir_value *out, sm_ir_shard_plan *plan, char *err, size_t errlen)
{
    memset(&out->layout, 0, sizeof out->layout);
    if (op->noperands < 1)
        return SM_OK; /* axis_index, axis_size: a scalar */
    const sm_ir_value *x = in[0];
    int r = x->shape.rank, dims[2] = {-1, -1}, gone = -1, added = -1;
    switch (op->kind) {
    case SM_OP_ALL_GATHER:
        if (op->attrs.tiled)
            sm_ir_norm_axis(op->attrs.axis, r, &dims[0]);
        else
            sm_ir_norm_axis(op->attrs.axis, r + 1, &added);
        break;
    case SM_OP_PSUM_SCATTER:
        sm_ir_norm_axis(op->attrs.axis, r, &dims[0]);
        if (!op->attrs.tiled)
            gone = dims[0];
        break;
    case SM_OP_ALL_TO_ALL:
        sm_ir_norm_axis(op->attrs.axis, r, &dims[0]);
        sm_ir_norm_axis(op->attrs.axis2, r, &dims[1]);
        break;
    default:
        break;
    }
    plan->in[0] = x->layout;
    for (int k = 0; k < 2; k++) {
        int d = dims[k];
        if (d < 0 || d >= r || !x->layout.n[d])
            continue;
        uint32_t shown = sm_sh_dim_mask(&x->layout, d) & ~x->hidden;
        if (shown) {
            char ty[300];
            int a = __builtin_ctz(shown);
            return sm_fail(err, errlen, SM_EINVAL,
                           "%s: the operand of type %s is sharded over '%s' along dimension %d, "
                           "which the collective %s; inside a shard_map Manual over other axes "
                           "that dimension must be whole over '%s': reshard it first",
                           sm_op_name(op->kind),
                           sm_program_value_type(p, op->operands[0], ty, sizeof ty),
                           p->mesh.names[a], d,
                           op->kind == SM_OP_ALL_GATHER     ? "gathers"
                           : op->kind == SM_OP_PSUM_SCATTER ? "scatters"
                                                            : "splits or concatenates",
                           p->mesh.names[a]);
        }
        plan->in[0].n[d] = 0;
    }
    for (int d = 0, o = 0; d < r; d++, o++) {
        if (d == gone) {
            o--;
            continue;
        }
        if (o == added)
            o++;
        out->layout.n[o] = plan->in[0].n[d];
        memcpy(out->layout.ax[o], plan->in[0].ax[d], plan->in[0].n[d]);
    }
    plan->local_layout = out->layout;
    return SM_OK;
}

sm_err sm_ir_infer_manual(const sm_program *p, const sm_ir_op *op, const sm_ir_value *const *in,
                          sm_ir_value *out, char *err, size_t errlen)
{
    const sm_pspec *s = op->attrs.sharding;
    if (!s)
        return sm_fail(err, errlen, SM_EINVAL, "%s needs a PartitionSpec", sm_op_name(op->kind));
    sm_shape sh = in[0]->shape;
    if (op->kind == SM_OP_SHARD_MAP_IN) {
        sm_err e = sm_pspec_check(s, &p->mesh, &sh, "shard_map argument", err, errlen);
        if (e)
            return e;
        for (int d = 0; d < sh.rank; d++)
            sh.dims[d] /= sm_pspec_dim_factor(s, &p->mesh, d);
    } else {
        sm_err e = sm_pspec_check_mesh(s, &p->mesh, err, errlen);
        if (e)
            return e;
        if (s->nentries > sh.rank)
            return sm_fail(err, errlen, SM_EINVAL,
                           "shard_map result: out_spec has %d entries but the value has rank %d",
                           s->nentries, sh.rank);
        for (int d = 0; d < sh.rank; d++)
            sh.dims[d] *= sm_pspec_dim_factor(s, &p->mesh, d);
    }
    sm_ir_set(out, in[0]->dtype, &sh);
    out->weak = in[0]->weak;
    return SM_OK;
}
