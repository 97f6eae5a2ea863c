/* sm_ir_print: the text form printer (re-parses to an equal program) and
 * the per-value type listing used by `shmapctl check`. */
#include "sm_ir_infer.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const sm_program *p;
    char **names; /* one per value, malloc'd */
} sm_namer;

static int sm_ir_reserved(const char *s)
{
    static const char *const words[] = {
        "None",   "True",      "False",         "P",          "PartitionSpec", "range", "for",
        "in",     "return",    "mesh",          "shard_map",  "jnp",           "np",    "lax",
        "jax",    "numpy",     "devices",       "inf",        "nan",           "jit",   "def",
        "square", "auto_axes", "NamedSharding", "axis_types", "explicit_axes", NULL};
    sm_op_kind k;
    sm_dtype t;
    for (int i = 0; words[i]; i++)
        if (strcmp(s, words[i]) == 0)
            return 1;
    return sm_op_lookup(s, &k) == 0 || sm_dtype_parse(s, &t) == 0;
}

static int sm_ir_ident(const char *s)
{
    if (!s || !(isalpha((unsigned char)*s) || *s == '_'))
        return 0;
    for (; *s; s++)
        if (!isalnum((unsigned char)*s) && *s != '_')
            return 0;
    return 1;
}

static int sm_ir_cmp_name(const void *a, const void *b)
{
    const char *const *x = a, *const *y = b;
    return strcmp(*x, *y);
}

/* 1 if s is prefix followed by digits only. */
static int sm_ir_is_generated(const char *s, const char *prefix)
{
    size_t n = strlen(prefix);
    if (strncmp(s, prefix, n) || !s[n])
        return 0;
    for (s += n; *s; s++)
        if (!isdigit((unsigned char)*s))
            return 0;
    return 1;
}

/* Picks printable unique names: a value keeps its source name when that is
 * unique among all values; others are PREFIX<id>. */
static int sm_namer_init(sm_namer *nm, const sm_program *p)
{
    nm->p = p;
    nm->names = calloc((size_t)(p->nvalues ? p->nvalues : 1), sizeof(char *));
    const char **sorted = calloc((size_t)(p->nvalues ? p->nvalues : 1), sizeof(char *));
    if (!nm->names || !sorted) {
        free(sorted);
        return -1;
    }
    int ns = 0;
    for (int v = 0; v < p->nvalues; v++)
        if (sm_ir_ident(p->values[v].name))
            sorted[ns++] = p->values[v].name;
    qsort(sorted, (size_t)ns, sizeof *sorted, sm_ir_cmp_name);
    char prefix[16] = "v";
    for (int again = 1; again && strlen(prefix) < 10;) {
        again = 0;
        for (int i = 0; i < p->nparams; i++)
            if (sm_ir_is_generated(p->params[i].name, prefix))
                again = 1;
        if (again)
            strcat(prefix, "_");
    }
    for (int v = 0; v < p->nvalues; v++) {
        const char *n = p->values[v].name;
        int keep = v < p->nparams;
        if (!keep && sm_ir_ident(n) && !sm_ir_reserved(n) && !sm_ir_is_generated(n, prefix)) {
            const char **hit = bsearch(&n, sorted, (size_t)ns, sizeof *sorted, sm_ir_cmp_name);
            keep = hit && !(hit > sorted && strcmp(hit[-1], n) == 0) &&
                   !(hit + 1 < sorted + ns && strcmp(hit[1], n) == 0);
        }
        char buf[64];
        if (keep)
            nm->names[v] = strdup(v < p->nparams ? p->params[v].name : n);
        else {
            snprintf(buf, sizeof buf, "%s%d", prefix, v);
            nm->names[v] = strdup(buf);
        }
        if (!nm->names[v]) {
            free(sorted);
            return -1;
        }
    }
    free(sorted);
    return 0;
}

static void sm_namer_free(sm_namer *nm)
{
    for (int v = 0; nm->names && v < nm->p->nvalues; v++)
        free(nm->names[v]);
    free(nm->names);
}

static void sm_ir_put_float(sm_strbuf *b, double f)
{
    char buf[64];
    snprintf(buf, sizeof buf, "%.17g", f);
    if (!strpbrk(buf, ".eEn"))
        strcat(buf, ".0");
    sm_strbuf_puts(b, buf);
}

static void sm_ir_put_ints(sm_strbuf *b, const int64_t *v, int n)
{
    sm_strbuf_puts(b, "(");
    for (int i = 0; i < n; i++)
        sm_strbuf_printf(b, "%s%lld", i ? ", " : "", (long long)v[i]);
    sm_strbuf_puts(b, n == 1 ? ",)" : ")");
}

static void sm_ir_put_axes(sm_strbuf *b, const sm_ir_attrs *a)
{
    if (a->naxes == 1) {
        sm_strbuf_printf(b, "'%s'", a->axes[0]);
        return;
    }
    sm_strbuf_puts(b, "(");
    for (int i = 0; i < a->naxes; i++)
        sm_strbuf_printf(b, "%s'%s'", i ? ", " : "", a->axes[i]);
    sm_strbuf_puts(b, a->naxes == 1 ? ",)" : ")");
}

/* Appends "op(args, kw=...)" for op. */
static void sm_ir_put_call(sm_strbuf *b, const sm_namer *nm, const sm_ir_op *op)
{
    sm_op_param pm[16];
    int np = sm_op_params(op->kind, pm, 16), next = 0, first = 1;
    const sm_ir_attrs *a = &op->attrs;
    sm_strbuf_printf(b, "%s(", sm_op_name(op->kind));
    for (int j = 0; j < np; j++) {
        const sm_op_param *q = &pm[j];
        int show = !q->optional;
        switch (q->kind) {
        case 'i':
            show |= q->field == 'a'   ? a->axis != 0
                    : q->field == 'b' ? a->axis2 != 0
                                      : q->field - '0' < a->ints.n;
            break;
        case 'l':
            show |= q->field == 'M' ? a->has_ints2 : q->field == 'N' ? a->has_ints3 : a->has_ints;
            break;
        case 'b':
            show |= q->field == 't' ? a->tiled : q->field == 'c' ? a->unchecked : a->keepdims;
            break;
        case 't':
            show = a->has_dtype;
            break;
        case 'S':
            show = a->sharding != NULL;
            break;
        case 's':
            show |= a->spec != NULL;
            break;
        case 'g':
            show = a->has_ints && a->has_ints2 && a->ints2.n == 1 && a->ints2.v[0] > 0;
            break;
        }
        if (!show)
            continue;
        sm_strbuf_puts(b, first ? "" : ", ");
        first = 0;
        if (q->optional || q->kind == 't')
            sm_strbuf_printf(b, "%s=", q->name);
        char spec[400];
        switch (q->kind) {
        case 'v':
            sm_strbuf_puts(b, nm->names[op->operands[next++]]);
            break;
        case 'V':
            for (int k = next; k < op->noperands; k++)
                sm_strbuf_printf(b, "%s%s", k > next ? ", " : "", nm->names[op->operands[k]]);
            next = op->noperands;
            break;
        case 'T':
        case 'D':
            sm_strbuf_puts(b, "(");
            for (int k = next; k < op->noperands; k++)
                sm_strbuf_printf(b, "%s%s", k > next ? ", " : "", nm->names[op->operands[k]]);
            sm_strbuf_puts(b, op->noperands - next == 1 ? ",)" : ")");
            next = op->noperands;
            break;
        case 'A':
            sm_ir_put_axes(b, a);
            break;
        case 't':
            sm_strbuf_puts(b, sm_dtype_name(a->dtype));
            break;
        case 'i':
            sm_strbuf_printf(b, "%lld",
                             (long long)(q->field == 'a'   ? a->axis
                                         : q->field == 'b' ? a->axis2
                                                           : a->ints.v[q->field - '0']));
            break;
        case 'l':
            if (q->field == 'M')
                sm_ir_put_ints(b, a->ints2.v, a->ints2.n);
            else if (q->field == 'N')
                sm_ir_put_ints(b, a->ints3.v, a->ints3.n);
            else
                sm_ir_put_ints(b, a->ints.v, a->ints.n);
            break;
        case 'b':
            sm_strbuf_puts(b, q->field == 'c' ? "False" : "True");
            break;
        case 'f':
            if (a->value_is_float)
                sm_ir_put_float(b, a->f);
            else
                sm_strbuf_printf(b, "%lld", (long long)a->i);
            break;
        case 'p':
            sm_strbuf_puts(b, "[");
            for (int k = 0; k < a->nperm; k++)
                sm_strbuf_printf(b, "%s(%lld, %lld)", k ? ", " : "", (long long)a->perm[k][0],
                                 (long long)a->perm[k][1]);
            sm_strbuf_puts(b, "]");
            break;
        case 's':
            sm_strbuf_printf(b, "'%s'", a->spec ? a->spec : "");
            break;
        case 'S':
            sm_strbuf_puts(b,
                           a->sharding ? sm_pspec_format(a->sharding, spec, sizeof spec) : "P()");
            break;
        case 'g': {
            int per = (int)(a->ints.n / a->ints2.v[0]);
            sm_strbuf_puts(b, "[");
            for (int k = 0; k < a->ints.n; k++)
                sm_strbuf_printf(b, "%s%lld%s",
                                 k % per ? ", "
                                 : k     ? ", ["
                                         : "[",
                                 (long long)a->ints.v[k], k % per == per - 1 ? "]" : "");
            sm_strbuf_puts(b, "]");
            break;
        }
        case 'w':
            sm_strbuf_puts(b, "(");
            for (int k = 0; k + 1 < a->ints.n; k += 2)
                sm_strbuf_printf(b, "%s(%lld, %lld)", k ? ", " : "", (long long)a->ints.v[k],
                                 (long long)a->ints.v[k + 1]);
            sm_strbuf_puts(b, a->ints.n == 2 ? ",)" : ")");
            break;
        }
    }
    sm_strbuf_puts(b, ")");
}

static void sm_ir_put_header(sm_strbuf *b, const sm_program *p)
{
    char buf[400];
    sm_strbuf_puts(b, "mesh");
    for (int a = 0; a < p->mesh.naxes; a++)
        sm_strbuf_printf(b, " %s=%lld", p->mesh.names[a], (long long)p->mesh.sizes[a]);
    if (p->has_devices) {
        sm_strbuf_puts(b, " devices=[");
        for (int d = 0; d < p->mesh.ndevices; d++)
            sm_strbuf_printf(b, "%s%d", d ? ", " : "", (int)p->mesh.devices[d]);
        sm_strbuf_puts(b, "]");
    }
    uint32_t types = p->kind == SM_PROG_JIT ? p->auto_axes : p->mesh.auto_axes;
    if (types) {
        sm_strbuf_puts(b, " axis_types=(");
        for (int a = 0; a < p->mesh.naxes; a++)
            sm_strbuf_printf(b, "%s%s", a ? ", " : "", types & (1u << a) ? "Auto" : "Explicit");
        sm_strbuf_puts(b, ")");
    }
    sm_strbuf_printf(b, "\n%s %s(", p->kind == SM_PROG_JIT ? "jit" : "shard_map", p->name);
    for (int i = 0; i < p->nparams; i++) {
        const sm_ir_param *pa = &p->params[i];
        sm_strbuf_printf(b, "%s%s: %s%s @ %s", i ? ", " : "", pa->name, sm_dtype_name(pa->dtype),
                         sm_ir_shape_str(&pa->global, buf, 200),
                         sm_pspec_format(&pa->spec, buf + 200, 200));
    }
    if (p->kind == SM_PROG_JIT && !p->has_out_shardings) {
        sm_strbuf_puts(b, "):\n");
        return;
    }
    sm_strbuf_puts(b, ") -> ");
    if (p->nreturns != 1)
        sm_strbuf_puts(b, "(");
    for (int k = 0; k < p->nreturns; k++)
        sm_strbuf_printf(b, "%s%s", k ? ", " : "", sm_pspec_format(&p->out_specs[k], buf, 400));
    if (p->nreturns != 1)
        sm_strbuf_puts(b, ")");
    if (p->kind != SM_PROG_JIT && p->manual_axes)
        sm_strbuf_printf(b, ", axis_names=%s", sm_ir_axes_set_str(p, p->manual_axes, buf, 400));
    if (p->kind != SM_PROG_JIT && p->unchecked)
        sm_strbuf_puts(b, ", check_vma=False");
    sm_strbuf_puts(b, ":\n");
}

/* Marks the ops of a jit program that are not plain global ops. */
static void sm_ir_put_region(sm_strbuf *b, const sm_program *p, const sm_ir_op *op)
{
    char set[300];
    if (op->manual && op->manual_axes)
        sm_strbuf_printf(b, "  # per-device over %s (a shard_map function's body)",
                         sm_ir_axes_set_str(p, op->manual_axes, set, sizeof set));
    else if (op->manual)
        sm_strbuf_puts(b, "  # per-device (a shard_map function's body)");
    else if (op->auto_mask)
        sm_strbuf_puts(b, "  # inside auto_axes");
    else if (op->explicit_mask)
        sm_strbuf_puts(b, "  # inside explicit_axes");
}

/* Prints a loop op (sm_ir_loop.c) as the text form writes loops, and
 * moves depth (the indentation): a carry is a name bound to its first value
 * before `while CARRY:`, the body rebinds every carry in one assignment at
 * its end, and each while_end value is bound to its carry's name after
 * the loop. Returns the index of the last op it printed. typed: describe's
 * " : type" after the carries. */
static int sm_ir_put_loop_op(sm_strbuf *b, const sm_namer *nm, const sm_program *p, int k,
                             int *depth, int typed)
{
    const sm_ir_op *op = &p->ops[k];
    char ty[400];
    sm_strbuf_printf(b, "%*s", 4 * *depth, "");
    switch (op->kind) {
    case SM_OP_WHILE_TEST:
        sm_strbuf_printf(b, "while %s:\n", nm->names[op->operands[0]]);
        ++*depth;
        return k;
    case SM_OP_WHILE_NEXT: {
        int j = k;
        while (j + 1 < p->nops && p->ops[j + 1].kind == SM_OP_WHILE_NEXT)
            j++;
        for (int q = k; q <= j; q++)
            sm_strbuf_printf(b, "%s%s", q > k ? ", " : "", nm->names[p->ops[q].operands[0]]);
        sm_strbuf_puts(b, " = ");
        for (int q = k; q <= j; q++)
            sm_strbuf_printf(b, "%s%s", q > k ? ", " : "", nm->names[p->ops[q].operands[1]]);
        sm_strbuf_puts(b, "\n");
        --*depth;
        return j;
    }
    default: /* while_carry, while_end: an alias */
        sm_strbuf_printf(b, "%s = %s", nm->names[op->result], nm->names[op->operands[0]]);
        if (typed)
            sm_strbuf_printf(b, " : %s", sm_program_value_type(p, op->result, ty, sizeof ty));
        sm_ir_put_region(b, p, op);
        sm_strbuf_puts(b, "\n");
        return k;
    }
}

sm_err sm_program_print(const sm_program *p, sm_strbuf *out)
{
    sm_namer nm;
    if (sm_namer_init(&nm, p)) {
        sm_namer_free(&nm);
        return SM_ENOMEM;
    }
    sm_ir_put_header(out, p);
    for (int k = 0, depth = 1; k < p->nops; k++) {
        if (sm_op_loop(p->ops[k].kind)) {
            k = sm_ir_put_loop_op(out, &nm, p, k, &depth, 0);
            continue;
        }
        sm_strbuf_printf(out, "%*s%s = ", 4 * depth, "", nm.names[p->ops[k].result]);
        sm_ir_put_call(out, &nm, &p->ops[k]);
        sm_ir_put_region(out, p, &p->ops[k]);
        sm_strbuf_puts(out, "\n");
    }
    sm_strbuf_puts(out, "    return ");
    for (int k = 0; k < p->nreturns; k++)
        sm_strbuf_printf(out, "%s%s", k ? ", " : "", nm.names[p->returns[k]]);
    sm_strbuf_puts(out, "\n");
    sm_namer_free(&nm);
    return out->oom ? SM_ENOMEM : SM_OK;
}

sm_err sm_program_describe(const sm_program *p, sm_strbuf *out)
{
    sm_namer nm;
    char ty[400], buf[400], gt[400];
    if (sm_namer_init(&nm, p)) {
        sm_namer_free(&nm);
        return SM_ENOMEM;
    }
    sm_ir_put_header(out, p);
    for (int i = 0; i < p->nparams; i++)
        sm_strbuf_printf(out, "    %s : %s\n", p->params[i].name,
                         sm_program_value_type(p, p->params[i].value, ty, sizeof ty));
    for (int k = 0, depth = 1; k < p->nops; k++) {
        if (sm_op_loop(p->ops[k].kind)) {
            k = sm_ir_put_loop_op(out, &nm, p, k, &depth, 1);
            continue;
        }
        sm_strbuf_printf(out, "%*s%s = ", 4 * depth, "", nm.names[p->ops[k].result]);
        sm_ir_put_call(out, &nm, &p->ops[k]);
        sm_strbuf_printf(out, " : %s", sm_program_value_type(p, p->ops[k].result, ty, sizeof ty));
        sm_ir_put_region(out, p, &p->ops[k]);
        sm_strbuf_puts(out, "\n");
    }
    for (int k = 0; p->kind == SM_PROG_JIT && k < p->nreturns; k++)
        sm_strbuf_printf(out, "    output %d: %s : %s\n", k, nm.names[p->returns[k]],
                         sm_program_output_type(p, k, ty, sizeof ty));
    for (int k = 0; p->kind != SM_PROG_JIT && k < p->nreturns; k++) {
        sm_ir_value v = p->values[p->returns[k]];
        v.shape = p->out_global ? p->out_global[k] : v.shape;
        sm_strbuf_printf(
            out, "    output %d: %s : %s @ %s -> global %s\n", k, nm.names[p->returns[k]],
            sm_program_value_type(p, p->returns[k], ty, sizeof ty),
            sm_pspec_format(&p->out_specs[k], buf, sizeof buf), sm_ir_type_str(&v, gt, sizeof gt));
    }
    sm_namer_free(&nm);
    return out->oom ? SM_ENOMEM : SM_OK;
}

char *sm_program_output_type(const sm_program *p, int k, char *buf, size_t len)
{
    sm_ir_value v = p->values[p->returns[k]];
    if (p->out_global)
        v.shape = p->out_global[k];
    sm_ir_layout_of_spec(p, &p->out_specs[k], &v.layout);
    v.hidden = p->kind == SM_PROG_JIT ? p->auto_axes : 0;
    return sm_ir_jit_type_str(p, &v, buf, len);
}
