/* sm_exec: the interpreter loop — plan (last uses), input checks, one
 * dispatch per op, buffer lifetimes, outputs, error wording. */
#include "sm_exec_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "sm_array_share.h"
#include "sm_copy.h"

struct sm_exec_plan {
    const sm_program *p;
    int *last_use;       /* per value: index of the last op reading it; nops if returned */
    sm_ir_loop *loop;    /* the program's while loops (sm_ir_loops_check) */
    int *loop_of;        /* per op: its loop's index when it is a loop op */
    int *exit_free;      /* per loop, from exit_at[L] to exit_at[L + 1]: the values defined */
    int *exit_at;        /* before it that die in it, freed when it ends */
    unsigned char *dead; /* per op: nothing returned depends on its result (it is skipped) */
};

/* Marks the ops whose results nothing returned depends on (XLA's dead code
 * elimination, as JAX's programs get it: a grad program's forward value,
 * its collectives included, is not computed when only the gradient is
 * returned). Loop ops are always kept, and so is what they read. Every
 * device runs the same program, so every device skips the same
 * collectives. */
static void sm_exec_plan_dead(sm_exec_plan *plan, unsigned char *live)
{
    const sm_program *p = plan->p;
    memset(live, 0, (size_t)p->nvalues);
    for (int r = 0; r < p->nreturns; r++)
        live[p->returns[r]] = 1;
    for (int k = p->nops - 1; k >= 0; k--) {
        const sm_ir_op *op = &p->ops[k];
        plan->dead[k] = !sm_op_loop(op->kind) && !live[op->result];
        for (int i = 0; !plan->dead[k] && i < op->noperands; i++)
            live[op->operands[i]] = 1;
    }
}

/* A value used inside a loop but defined before it lives until the loop's
 * last while_next: the body reads it again on every turn. */
static int sm_exec_plan_loops(sm_exec_plan *plan, int nloops)
{
    const sm_program *p = plan->p;
    for (int L = 0; L < nloops; L++) {
        const sm_ir_loop *l = &plan->loop[L];
        int b = l->next + l->m - 1;
        for (int k = l->carry; k <= b; k++) {
            const sm_ir_op *op = &p->ops[k];
            if (sm_op_loop(op->kind))
                plan->loop_of[k] = L;
            for (int i = 0; k >= l->test && i < op->noperands; i++) { /* inits: read once */
                int v = op->operands[i];
                if (p->values[v].def < l->carry && plan->last_use[v] < b)
                    plan->last_use[v] = b;
            }
        }
        for (int k = l->end; k < l->end + l->m; k++)
            plan->loop_of[k] = L;
    }
    /* The ops a loop's last turn skips (its while_next ops but the first)
     * never free what dies there: a value from before the loop that the
     * loop reads last is freed when the loop ends. */
    if (!(plan->exit_at = calloc((size_t)nloops + 1, sizeof(int))) ||
        !(plan->exit_free = malloc(sizeof(int) * (size_t)(p->nvalues + 1))))
        return -1;
    /* two passes over the values (a counting sort by loop): each value that
     * dies at a loop's last while_next, made before that loop */
    for (int pass = 0; pass < 2; pass++) {
        for (int v = p->nparams; v < p->nvalues; v++) {
            int k = plan->last_use[v];
            if (k >= p->nops || p->ops[k].kind != SM_OP_WHILE_NEXT)
                continue;
            int L = plan->loop_of[k];
            const sm_ir_loop *l = &plan->loop[L];
            if (k != l->next + l->m - 1 || p->values[v].def >= l->carry)
                continue;
            if (pass)
                plan->exit_free[plan->exit_at[L]++] = v; /* exit_at[L]: a cursor */
            else
                plan->exit_at[L + 1]++; /* counted */
        }
        if (!pass) /* exit_at[L]: where loop L's values start */
            for (int L = 0; L < nloops; L++)
                plan->exit_at[L + 1] += plan->exit_at[L];
    }
    /* the cursors ended where each next loop starts: shifted back */
    for (int L = nloops; L > 0; L--)
        plan->exit_at[L] = plan->exit_at[L - 1];
    plan->exit_at[0] = 0;
    return 0;
}

sm_err sm_exec_plan_create(const sm_program *p, sm_exec_plan **out, char *err, size_t errlen)
{
    *out = NULL;
    sm_exec_plan *plan = calloc(1, sizeof *plan);
    if (!plan || !(plan->last_use = malloc(sizeof(int) * (size_t)(p->nvalues + 1)))) {
        free(plan);
        return sm_fail(err, errlen, SM_ENOMEM, "out of memory planning program '%s'",
                       p->name ? p->name : "f");
    }
    plan->p = p;
    int nloops = 0;
    sm_err e;
    if (!(plan->loop = malloc(sizeof *plan->loop * (size_t)(p->nops + 1))) ||
        !(plan->loop_of = malloc(sizeof(int) * (size_t)(p->nops + 1)))) {
        sm_exec_plan_free(plan);
        return sm_fail(err, errlen, SM_ENOMEM, "out of memory planning program '%s'",
                       p->name ? p->name : "f");
    }
    if ((e = sm_ir_loops_check(p, plan->loop, &nloops, err, errlen))) {
        sm_exec_plan_free(plan);
        return e;
    }
    unsigned char *live = malloc((size_t)p->nvalues + 1);
    if (!live || !(plan->dead = malloc((size_t)p->nops + 1))) {
        free(live);
        sm_exec_plan_free(plan);
        return sm_fail(err, errlen, SM_ENOMEM, "out of memory planning program '%s'",
                       p->name ? p->name : "f");
    }
    sm_exec_plan_dead(plan, live);
    free(live);
    for (int v = 0; v < p->nvalues; v++)
        plan->last_use[v] = p->values[v].def; /* dead values go right after their op */
    for (int k = 0; k < p->nops; k++)
        for (int i = 0; !plan->dead[k] && i < p->ops[k].noperands; i++)
            plan->last_use[p->ops[k].operands[i]] = k;
    for (int r = 0; r < p->nreturns; r++)
        plan->last_use[p->returns[r]] = p->nops;
    if (sm_exec_plan_loops(plan, nloops)) {
        sm_exec_plan_free(plan);
        return sm_fail(err, errlen, SM_ENOMEM, "out of memory planning program '%s'",
                       p->name ? p->name : "f");
    }
    *out = plan;
    return SM_OK;
}

void sm_exec_plan_free(sm_exec_plan *plan)
{
    if (plan) {
        free(plan->last_use);
        free(plan->loop);
        free(plan->loop_of);
        free(plan->exit_free);
        free(plan->exit_at);
        free(plan->dead);
        free(plan);
    }
}

/* The handler and kernel of every op kind, from the op table's exec and
 * kern columns (sm_ir_ops.def). */
static const struct {
    sm_exec_fn fn;
    int kern;
} sm_exec_rows[] = {
#define SM_OP(e, name, mn, mx, infer, shard, vma, ur, exec, kern, sig) {exec, kern},
#include "sm_ir_ops.def"
#undef SM_OP
};
_Static_assert(sizeof(sm_exec_rows) / sizeof(sm_exec_rows[0]) == SM_OP_COUNT, "one row per op");

static sm_exec_fn sm_exec_fn_of(sm_op_kind k)
{
    return (int)k >= 0 && k < SM_OP_COUNT ? sm_exec_rows[k].fn : NULL;
}

int sm_exec_kern_of(sm_op_kind k)
{
    return (int)k >= 0 && k < SM_OP_COUNT ? sm_exec_rows[k].kern : 0;
}

sm_err sm_exec_none(sm_exec_ctx *x, const sm_ir_op *op, sm_array *const *in, sm_array *out,
                    char *err, size_t errlen)
{
    return sm_fail(err, errlen, SM_EINVAL,
                   "%s belongs to global-view programs, which run once lowered to shard_map",
                   sm_op_name(op->kind));
}

/* 1 if the handler of kind writes every element of its result, so the
 * result need not be zero-filled first (a pass over its memory as long as
 * the op's own, for a copy or an elementwise op): dot and matmul
 * (sm_kern_matmul writes all of out, zeros for an empty contraction); the
 * elementwise, creation and shape ops, whose kernels loop over every
 * element of the result (pad zeroes its own border first); and the
 * collectives that exchange data (sm_comm fills all of out, zeros for a
 * ppermute member that is no destination, or a staging buffer then
 * transposed into out). einsum and the reductions keep the zero-fill.
 * Sanitizer builds fill such a result with 0xa5 instead (sm_array.c), so a
 * kernel that leaves an element unwritten fails the bitwise tests. */
static int sm_exec_writes_all(sm_op_kind k)
{
    static const sm_exec_fn all[] = {
        sm_exec_binary,       sm_exec_unary,   sm_exec_where,         sm_exec_astype,
        sm_exec_fill,         sm_exec_arange,  sm_exec_reshape,       sm_exec_transpose,
        sm_exec_broadcast_to, sm_exec_slice,   sm_exec_dynamic_slice, sm_exec_dynamic_update_slice,
        sm_exec_concatenate,  sm_exec_pad,     sm_exec_tile,          sm_exec_roll,
        sm_exec_coll,         sm_exec_bitcast,
    };
    if (k == SM_OP_DOT || k == SM_OP_MATMUL)
        return 1;
    sm_exec_fn fn = sm_exec_fn_of(k);
    for (size_t i = 0; fn && i < sizeof all / sizeof all[0]; i++)
        if (fn == all[i])
            return 1;
    return 0;
}

/* "file:line:col: " or "" into buf. */
static const char *sm_exec_where_str(const sm_program *p, int line, int col, char *buf, size_t len)
{
    if (line > 0)
        snprintf(buf, len, "%s:%d:%d: ", p->filename ? p->filename : "<text>", line, col);
    else
        buf[0] = '\0';
    return buf;
}

sm_err sm_exec_loop(sm_exec_ctx *x, const sm_ir_op *op, sm_array *const *in, sm_array *out,
                    char *err, size_t errlen)
{
    return sm_fail(err, errlen, SM_EINVAL, "%s runs only as part of a while loop",
                   sm_op_name(op->kind));
}

/* The buffer of value v for a new owner at op k: v's own when this is its
 * last use and it owns one, else its bytes shared (or a copy of a view's). */
static sm_err sm_exec_handover(const sm_exec_plan *plan, sm_array_pool *pool, sm_array **vals,
                               unsigned char *owned, int v, int k, sm_array **out, char *err,
                               size_t errlen)
{
    const sm_program *p = plan->p;
    const sm_ir_op *op = &p->ops[k];
    /* a next value from before the loop is read again on the next turn */
    int again =
        op->kind == SM_OP_WHILE_NEXT && p->values[v].def < plan->loop[plan->loop_of[k]].test;
    if (owned[v] && plan->last_use[v] == k && !again) {
        *out = vals[v];
        vals[v] = NULL;
        owned[v] = 0;
        return SM_OK;
    }
    const sm_array *a = vals[v];
    sm_err e = sm_array_create_in(pool, a->dtype, &a->shape, 0, out, err, errlen);
    if (!e && a->nbytes && !sm_array_alias(*out, a, 0))
        sm_copy((*out)->data, a->data, (size_t)a->nbytes);
    return e;
}

/* Runs loop op k (sm_ir_loop.c) and sets *next to the op to run after it:
 * the test goes on into the body or jumps past the loop's while_next ops;
 * the first while_next gives every carry its next value at once (so a
 * body that swaps two carries works) and goes back to the test. */
static sm_err sm_exec_loop_op(sm_exec_ctx *x, const sm_exec_plan *plan, int k, sm_array **vals,
                              unsigned char *owned, int *next, char *err, size_t errlen)
{
    const sm_program *p = plan->p;
    const sm_ir_op *op = &p->ops[k];
    const sm_ir_loop *l = &plan->loop[plan->loop_of[k]];
    sm_err e;
    *next = k + 1;
    switch (op->kind) {
    case SM_OP_WHILE_CARRY:
    case SM_OP_WHILE_END:
        if ((e = sm_exec_handover(plan, x->pool, vals, owned, op->operands[0], k, &vals[op->result],
                                  err, errlen)))
            return e;
        owned[op->result] = 1;
        if (plan->last_use[op->result] == k) { /* a carry nothing reads after the loop */
            sm_array_free(vals[op->result]);
            vals[op->result] = NULL;
            owned[op->result] = 0;
        }
        return SM_OK;
    case SM_OP_WHILE_TEST:
        if (x->comm && x->comm->check && (e = x->comm->check(x->cctx, err, errlen)))
            return e; /* cancelled, a deadline, a failed peer: the loop may hold no collective */
        if (!*(const unsigned char *)vals[op->operands[0]]->data) {
            *next = l->end;
            for (int i = plan->exit_at[plan->loop_of[k]]; i < plan->exit_at[plan->loop_of[k] + 1];
                 i++) {
                int v = plan->exit_free[i];
                if (owned[v]) {
                    sm_array_free(vals[v]);
                    vals[v] = NULL;
                    owned[v] = 0;
                }
            }
        }
        return SM_OK;
    case SM_OP_WHILE_NEXT: {
        sm_array *nv[SM_OP_MAXARGS];
        int m = l->m;
        sm_array **got = m <= SM_OP_MAXARGS ? nv : calloc((size_t)m, sizeof *got);
        if (!got)
            return sm_fail(err, errlen, SM_ENOMEM, "out of memory");
        e = SM_OK;
        int j = 0;
        for (; j < m && !e; j++)
            e = sm_exec_handover(plan, x->pool, vals, owned, p->ops[l->next + j].operands[1],
                                 l->next + j, &got[j], err, errlen);
        if (e)
            j--;
        for (int i = 0; i < j; i++) {
            int c = p->ops[l->carry + i].result;
            if (e) {
                sm_array_free(got[i]);
                continue;
            }
            sm_array_free(vals[c]);
            vals[c] = got[i];
            owned[c] = 1;
        }
        if (got != nv)
            free(got);
        *next = l->test;
        return e;
    }
    default:
        return sm_fail(err, errlen, SM_EINVAL, "not a loop op");
    }
}

static sm_err sm_exec_check_inputs(const sm_program *p, sm_array *const *inputs, char *err,
                                   size_t errlen)
{
    for (int i = 0; i < p->nparams; i++) {
        const sm_ir_param *pa = &p->params[i];
        const sm_ir_value *v = &p->values[pa->value];
        const sm_array *a = inputs ? inputs[i] : NULL;
        char want[64], got[64];
        if (!a)
            return sm_fail(err, errlen, SM_EINVAL, "argument '%s' is missing", pa->name);
        if (a->dtype != v->dtype || !sm_shape_equal(&a->shape, &v->shape))
            return sm_fail(err, errlen, SM_EINVAL,
                           "argument '%s' block is %s%s, expected %s%s (its block under the "
                           "in_spec)",
                           pa->name, sm_dtype_name(a->dtype),
                           sm_shape_format(&a->shape, got, sizeof got), sm_dtype_name(v->dtype),
                           sm_shape_format(&v->shape, want, sizeof want));
    }
    return SM_OK;
}

sm_err sm_exec_run_plan(const sm_exec_plan *plan, int mesh_pos, const sm_comm *comm, void *comm_ctx,
                        sm_array_pool *pool, sm_array *const *inputs, sm_array **outputs, char *err,
                        size_t errlen)
{
    const sm_program *p = plan->p;
    sm_err e = SM_OK;
    char msg[1024] = "", where[300], head[400] = "", full[1500];
    int dev = mesh_pos >= 0 && mesh_pos < p->mesh.ndevices ? p->mesh.devices[mesh_pos] : -1;
    sm_array **vals = calloc((size_t)p->nvalues + 1, sizeof *vals);
    unsigned char *owned = calloc((size_t)p->nvalues + 1, 1);
    sm_exec_ctx x = {.p = p, .pos = mesh_pos, .comm = comm, .cctx = comm_ctx, .pool = pool};
    x.members = malloc(sizeof(int) * (size_t)p->mesh.ndevices);
    for (int r = 0; r < p->nreturns; r++)
        outputs[r] = NULL;
    if (!vals || !owned || !x.members) {
        e = sm_fail(msg, sizeof msg, SM_ENOMEM, "out of memory");
        goto fail;
    }
    if (dev < 0) {
        e = sm_fail(msg, sizeof msg, SM_EINVAL, "mesh position %d is outside the mesh of %d",
                    mesh_pos, p->mesh.ndevices);
        goto fail;
    }
    if ((e = sm_exec_check_inputs(p, inputs, msg, sizeof msg)))
        goto fail;
    for (int i = 0; i < p->nparams; i++)
        vals[p->params[i].value] = inputs[i];

    for (int k = 0; k < p->nops; k++) {
        const sm_ir_op *op = &p->ops[k];
        const sm_ir_value *rv = &p->values[op->result];
        if (sm_op_loop(op->kind)) {
            int next;
            if ((e = sm_exec_loop_op(&x, plan, k, vals, owned, &next, msg, sizeof msg))) {
                sm_exec_where_str(p, op->line, op->col, where, sizeof where);
                snprintf(head, sizeof head, "%swhile loop on device %d (mesh position %d): ", where,
                         dev, mesh_pos);
                goto fail;
            }
            k = next - 1;
            continue;
        }
        if (plan->dead[k])
            continue;
        sm_array *in[SM_OP_MAXARGS + 1];
        for (int i = 0; i < op->noperands && i <= SM_OP_MAXARGS; i++)
            in[i] = vals[op->operands[i]];
        sm_exec_fn fn = sm_exec_fn_of(op->kind);
        sm_array *out = NULL;
        /* an op that writes all of its output needs no zero-fill first */
        int zero = !sm_exec_writes_all(op->kind);
        if (!fn) {
            e = sm_fail(msg, sizeof msg, SM_EUNIMPLEMENTED, "no kernel for this op");
        } else if (!(e = sm_array_create_in(pool, rv->dtype, &rv->shape, zero, &out, msg,
                                            sizeof msg))) {
            e = fn(&x, op, in, out, msg, sizeof msg);
        }
        if (e) {
            sm_array_free(out);
            sm_exec_where_str(p, op->line, op->col, where, sizeof where);
            snprintf(head, sizeof head, "%s'%s' on device %d (mesh position %d): ", where,
                     sm_op_name(op->kind), dev, mesh_pos);
            goto fail;
        }
        vals[op->result] = out;
        owned[op->result] = 1;
        /* Free every operand (and a dead result) whose last use this was. */
        for (int i = -1; i < op->noperands; i++) {
            int v = i < 0 ? op->result : op->operands[i];
            if (owned[v] && plan->last_use[v] == k) {
                sm_array_free(vals[v]);
                vals[v] = NULL;
                owned[v] = 0;
            }
        }
    }
    for (int r = 0; r < p->nreturns; r++) {
        int v = p->returns[r];
        if (owned[v]) { /* hand the buffer over */
            outputs[r] = vals[v];
            vals[v] = NULL;
            owned[v] = 0;
            continue;
        }
        const sm_array *a = vals[v];
        for (int q = 0; !a && q < r; q++) /* handed over to an earlier output */
            if (p->returns[q] == v)
                a = outputs[q];
        if ((e = sm_array_create_in(pool, a->dtype, &a->shape, 0, &outputs[r], msg, sizeof msg)))
            goto fail;
        if (a->nbytes && !sm_array_alias(outputs[r], a, 0))
            sm_copy(outputs[r]->data, a->data, (size_t)a->nbytes);
    }
    goto done;

fail:
    for (int r = 0; r < p->nreturns; r++) {
        sm_array_free(outputs[r]);
        outputs[r] = NULL;
    }
    if (!msg[0])
        snprintf(msg, sizeof msg, "%s", sm_strerror(e));
    if (!head[0])
        snprintf(head, sizeof head, "device %d (mesh position %d): ", dev, mesh_pos);
    snprintf(full, sizeof full, "%s%s", head, msg);
    sm_fail(err, errlen, e, "%s", full);
    if (comm && comm->abort && e != SM_ECANCELLED && e != SM_ETIMEOUT)
        comm->abort(comm_ctx, full);
done:
    if (vals)
        for (int v = 0; v < p->nvalues; v++)
            if (owned[v])
                sm_array_free(vals[v]);
    free(vals);
    free(owned);
    free(x.members);
    return e;
}

sm_err sm_exec_run(const sm_program *p, int mesh_pos, const sm_comm *comm, void *comm_ctx,
                   sm_array_pool *pool, sm_array *const *inputs, sm_array **outputs, char *err,
                   size_t errlen)
{
    sm_exec_plan *plan;
    sm_err e = sm_exec_plan_create(p, &plan, err, errlen);
    if (e) {
        for (int r = 0; r < p->nreturns; r++)
            outputs[r] = NULL;
        if (comm && comm->abort)
            comm->abort(comm_ctx, err);
        return e;
    }
    e = sm_exec_run_plan(plan, mesh_pos, comm, comm_ctx, pool, inputs, outputs, err, errlen);
    sm_exec_plan_free(plan);
    return e;
}

int sm_exec_text_check_vma(const char *text)
{
    const char *s = text;
    while (*s == '#') {
        const char *q = s + 1;
        while (*q == ' ' || *q == '\t')
            q++;
        if (strncmp(q, "check_vma", 9) == 0) {
            q += 9;
            while (*q == ' ' || *q == '\t')
                q++;
            if (*q == ':' || *q == '=') {
                q++;
                while (*q == ' ' || *q == '\t')
                    q++;
                if (strncasecmp(q, "false", 5) == 0 || *q == '0')
                    return 0;
            }
        }
        s = strchr(s, '\n');
        if (!s)
            break;
        s++;
    }
    return 1;
}
