/* sm_example: a recursive-descent evaluator of the example sidecar
 * expressions (see header). */
#include "sm_example.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sm_file.h"
#include "sm_kern.h"

#define SM_EX_MAXARGS 64

typedef struct {
    const char *s; /* cursor */
    int line;
    const sm_program *p;
    sm_array *const *env; /* one per parameter, or NULL while generating */
    char *err;
    size_t errlen;
} sm_ex;

typedef struct {
    int kind; /* 0 array, 1 number, 2 dtype */
    sm_array *a;
    double num;
    sm_dtype t;
} sm_ex_val;

static sm_err sm_ex_fail(sm_ex *x, const char *what)
{
    return sm_fail(x->err, x->errlen, SM_EFORMAT, "line %d: %s", x->line, what);
}

static void sm_ex_skip(sm_ex *x)
{
    while (*x->s == ' ' || *x->s == '\t')
        x->s++;
}

static void sm_ex_val_free(sm_ex_val *v)
{
    if (v->kind == 0)
        sm_array_free(v->a);
    v->a = NULL;
}

static sm_err sm_ex_new(sm_ex *x, sm_dtype t, const sm_shape *s, sm_array **out)
{
    return sm_array_create(t, s, out, x->err, x->errlen);
}

static int64_t sm_ex_numel(const sm_shape *s)
{
    int64_t n = 1;
    for (int d = 0; d < s->rank; d++)
        n *= s->dims[d];
    return n;
}

/* Calls a function on evaluated arguments; *out gets a new array. */
static sm_err sm_ex_call(sm_ex *x, const char *fn, sm_ex_val *a, int n, sm_array **out)
{
    char msg[200];
    int na = 0, nn = 0, nt = 0;
    for (int i = 0; i < n; i++)
        na += a[i].kind == 0, nn += a[i].kind == 1, nt += a[i].kind == 2;
    sm_array *x0 = n > 0 && a[0].kind == 0 ? a[0].a : NULL;
    int64_t ints[SM_EX_MAXARGS];
    for (int i = 0; i < n; i++)
        ints[i] = (int64_t)a[i].num;
    static const char *const known[] = {"arange", "random", "values",  "reshape", "transpose",
                                        "tile",   "roll",   "sum",     "mean",    "astype",
                                        "matmul", "add",    "multiply"};
    int found = 0;
    for (size_t k = 0; k < sizeof known / sizeof known[0]; k++)
        found |= !strcmp(fn, known[k]);
    if (!found) {
        snprintf(msg, sizeof msg, "unknown function '%s'", fn);
        return sm_ex_fail(x, msg);
    }
    sm_err e;
    if (!strcmp(fn, "arange") || !strcmp(fn, "random")) {
        int want = fn[0] == 'a' ? 2 : 3;
        if (n != want || a[0].kind != 1 || a[1].kind != 2 || (want == 3 && a[2].kind != 1))
            return sm_ex_fail(x, fn[0] == 'a' ? "arange takes (n, dtype)"
                                              : "random takes (n, dtype, seed)");
        sm_shape s = {.rank = 1, .dims = {ints[0]}};
        int64_t *buf = malloc(sizeof(int64_t) * (size_t)(ints[0] + 1));
        if (!buf)
            return sm_fail(x->err, x->errlen, SM_ENOMEM, "out of memory");
        uint64_t st = (uint64_t)(want == 3 ? ints[2] : 0) * 2654435761u + 12345;
        for (int64_t k = 0; k < ints[0]; k++) {
            st = st * 6364136223846793005ull + 1442695040888963407ull;
            buf[k] = want == 2 ? k : (int64_t)((st >> 33) % 9) - 4;
        }
        e = sm_ex_new(x, a[1].t, &s, out);
        if (!e)
            e = sm_kern_astype(SM_I64, buf, a[1].t, (*out)->data, ints[0], x->err, x->errlen);
        free(buf);
        return e;
    }
    if (!strcmp(fn, "values")) {
        if (n < 1 || a[0].kind != 2 || nn != n - 1)
            return sm_ex_fail(x, "values takes (dtype, v0, v1, ...)");
        sm_shape s = {.rank = 1, .dims = {n - 1}};
        double buf[SM_EX_MAXARGS];
        for (int i = 1; i < n; i++)
            buf[i - 1] = a[i].num;
        e = sm_ex_new(x, a[0].t, &s, out);
        if (!e)
            e = sm_kern_astype(SM_F64, buf, a[0].t, (*out)->data, n - 1, x->err, x->errlen);
        return e;
    }
    if (!x0)
        return sm_fail(x->err, x->errlen, SM_EFORMAT,
                       "line %d: %s: expected an array as the first argument", x->line, fn);
    const sm_shape *xs = &x0->shape;
    sm_dtype t = x0->dtype;
    sm_shape os;
    if (!strcmp(fn, "reshape") || !strcmp(fn, "transpose") || !strcmp(fn, "tile")) {
        if (nn != n - 1 || n - 1 > SM_MAX_RANK)
            return sm_ex_fail(x, "expected an array then integers");
        if (fn[0] == 'r') {
            if ((e = sm_shape_make(&os, n - 1, ints + 1, x->err, x->errlen)))
                return e;
            if (sm_ex_numel(&os) != sm_ex_numel(xs))
                return sm_ex_fail(x, "reshape changes the element count");
            if ((e = sm_ex_new(x, t, &os, out)))
                return e;
            memcpy((*out)->data, x0->data, (size_t)x0->nbytes);
            return SM_OK;
        }
        if (fn[0] == 't' && fn[1] == 'r') {
            int perm[SM_MAX_RANK];
            if (n - 1 != xs->rank)
                return sm_ex_fail(x, "transpose needs one axis per dimension");
            os.rank = xs->rank;
            for (int d = 0; d < xs->rank; d++) {
                perm[d] = (int)ints[1 + d];
                if (perm[d] < 0 || perm[d] >= xs->rank)
                    return sm_ex_fail(x, "transpose axis out of range");
                os.dims[d] = xs->dims[perm[d]];
            }
            if ((e = sm_ex_new(x, t, &os, out)))
                return e;
            return sm_kern_transpose(t, x0->data, xs, perm, (*out)->data, x->err, x->errlen);
        }
        if ((e = sm_kern_tile_shape(xs, ints + 1, n - 1, &os, x->err, x->errlen)) ||
            (e = sm_ex_new(x, t, &os, out)))
            return e;
        return sm_kern_tile(t, x0->data, xs, ints + 1, n - 1, (*out)->data, x->err, x->errlen);
    }
    if (!strcmp(fn, "roll")) {
        if (n != 3 || nn != 2)
            return sm_ex_fail(x, "roll takes (x, shift, axis)");
        if ((e = sm_ex_new(x, t, xs, out)))
            return e;
        return sm_kern_roll(t, x0->data, xs, ints[1], (int)ints[2], (*out)->data, x->err,
                            x->errlen);
    }
    if (!strcmp(fn, "sum") || !strcmp(fn, "mean")) {
        if (n != 2 || nn != 1)
            return sm_ex_fail(x, "sum and mean take (x, axis)");
        int ax = (int)ints[1];
        sm_kern_reduce_op op = fn[0] == 's' ? SM_KERN_SUM : SM_KERN_MEAN;
        if ((e = sm_kern_reduce_shape(xs, &ax, 1, 0, &os, x->err, x->errlen)) ||
            (e = sm_ex_new(x, t, &os, out)))
            return e;
        return sm_kern_reduce(op, t, x0->data, xs, &ax, 1, 0, (*out)->data, x->err, x->errlen);
    }
    if (!strcmp(fn, "astype")) {
        if (n != 2 || a[1].kind != 2)
            return sm_ex_fail(x, "astype takes (x, dtype)");
        if ((e = sm_ex_new(x, a[1].t, xs, out)))
            return e;
        return sm_kern_astype(t, x0->data, a[1].t, (*out)->data, sm_ex_numel(xs), x->err,
                              x->errlen);
    }
    if (!strcmp(fn, "matmul") || !strcmp(fn, "add") || !strcmp(fn, "multiply")) {
        if (n != 2 || na != 2 || a[1].a->dtype != t)
            return sm_ex_fail(x, "matmul, add and multiply take two arrays of one dtype");
        const sm_shape *bs = &a[1].a->shape;
        if (!strcmp(fn, "matmul")) {
            if ((e = sm_kern_matmul_shape(xs, 0, bs, 0, &os, x->err, x->errlen)) ||
                (e = sm_ex_new(x, t, &os, out)))
                return e;
            return sm_kern_matmul(t, x0->data, xs, 0, a[1].a->data, bs, 0, (*out)->data, x->err,
                                  x->errlen);
        }
        if ((e = sm_kern_broadcast_shape(xs, bs, &os, x->err, x->errlen)) ||
            (e = sm_ex_new(x, t, &os, out)))
            return e;
        return sm_kern_binary(fn[0] == 'a' ? SM_KERN_ADD : SM_KERN_MULTIPLY, t, x0->data, xs,
                              a[1].a->data, bs, (*out)->data, x->err, x->errlen);
    }
    return sm_fail(x->err, x->errlen, SM_EINTERNAL, "line %d: '%s' has no evaluator", x->line, fn);
}

static sm_err sm_ex_expr(sm_ex *x, sm_ex_val *out)
{
    memset(out, 0, sizeof *out);
    sm_ex_skip(x);
    const char *s = x->s;
    if (*s == '-' || *s == '+' || *s == '.' || isdigit((unsigned char)*s)) {
        char *end;
        out->kind = 1;
        out->num = strtod(s, &end);
        if (end == s)
            return sm_ex_fail(x, "expected a number");
        x->s = end;
        return SM_OK;
    }
    char name[64];
    size_t n = 0;
    while ((isalnum((unsigned char)*s) || *s == '_') && n + 1 < sizeof name)
        name[n++] = *s++;
    name[n] = '\0';
    if (!n)
        return sm_ex_fail(x, "expected a name, a number or a call");
    x->s = s;
    sm_ex_skip(x);
    if (*x->s != '(') {
        for (int i = 0; x->env && i < x->p->nparams; i++) {
            if (!strcmp(x->p->params[i].name, name)) {
                const sm_array *src = x->env[i];
                sm_err e = sm_ex_new(x, src->dtype, &src->shape, &out->a);
                if (!e && src->nbytes)
                    memcpy(out->a->data, src->data, (size_t)src->nbytes);
                return e;
            }
        }
        if (sm_dtype_parse(name, &out->t) == 0) {
            out->kind = 2;
            return SM_OK;
        }
        char msg[128];
        snprintf(msg, sizeof msg, "unknown name '%s'", name);
        return sm_ex_fail(x, msg);
    }
    x->s++;
    sm_ex_val args[SM_EX_MAXARGS];
    int na = 0;
    sm_err e = SM_OK;
    sm_ex_skip(x);
    while (*x->s != ')') {
        if (na == SM_EX_MAXARGS) {
            e = sm_ex_fail(x, "too many arguments");
            goto done;
        }
        if ((e = sm_ex_expr(x, &args[na])))
            goto done;
        na++;
        sm_ex_skip(x);
        if (*x->s == ',') {
            x->s++;
            sm_ex_skip(x);
        } else if (*x->s != ')') {
            e = sm_ex_fail(x, "expected ',' or ')'");
            goto done;
        }
    }
    x->s++;
    e = sm_ex_call(x, name, args, na, &out->a);
done:
    for (int i = 0; i < na; i++)
        sm_ex_val_free(&args[i]);
    return e;
}

/* Next non-blank, non-comment line into buf; 0 at the end. */
static int sm_ex_next_line(const char **cur, int *line, char *buf, size_t len)
{
    while (**cur) {
        const char *s = *cur, *e = strchr(s, '\n');
        size_t n = e ? (size_t)(e - s) : strlen(s);
        *cur = e ? e + 1 : s + n;
        (*line)++;
        if (n >= len)
            n = len - 1;
        memcpy(buf, s, n);
        buf[n] = '\0';
        char *h = strchr(buf, '#');
        if (h)
            *h = '\0';
        for (char *q = buf; *q; q++)
            if (!isspace((unsigned char)*q))
                return 1;
    }
    return 0;
}

/* Evaluates a whole line (an array expression). */
static sm_err sm_ex_line(sm_ex *x, const char *text, sm_array **out)
{
    sm_ex_val v;
    x->s = text;
    sm_err e = sm_ex_expr(x, &v);
    if (e)
        return e;
    sm_ex_skip(x);
    if (*x->s || v.kind != 0) {
        sm_ex_val_free(&v);
        return sm_ex_fail(x, *x->s ? "unexpected text after the expression"
                                   : "expected an array expression");
    }
    *out = v.a;
    return SM_OK;
}

static sm_err sm_ex_check(sm_ex *x, const char *what, const sm_array *a, sm_dtype t,
                          const sm_shape *s)
{
    char g[64], w[64];
    if (a->dtype == t && sm_shape_equal(&a->shape, s))
        return SM_OK;
    return sm_fail(x->err, x->errlen, SM_EINVAL, "line %d: %s is %s%s, expected %s%s", x->line,
                   what, sm_dtype_name(a->dtype), sm_shape_format(&a->shape, g, sizeof g),
                   sm_dtype_name(t), sm_shape_format(s, w, sizeof w));
}

/* Frees the n arrays of a and leaves NULL in their place. */
static void sm_ex_arrays_clear(sm_array **a, int n)
{
    for (int i = 0; i < n; i++) {
        sm_array_free(a[i]);
        a[i] = NULL;
    }
}

sm_err sm_example_inputs(const char *text, const sm_program *p, sm_array **inputs, char *err,
                         size_t errlen)
{
    sm_ex x = {.p = p, .err = err, .errlen = errlen};
    char buf[4096], what[128];
    const char *cur = text;
    sm_err e = SM_OK;
    for (int i = 0; i < p->nparams; i++)
        inputs[i] = NULL;
    while (sm_ex_next_line(&cur, &x.line, buf, sizeof buf)) {
        char *eq = strchr(buf, '='), name[64];
        if (!eq || sscanf(buf, " %63[A-Za-z0-9_] =", name) != 1) {
            e = sm_ex_fail(&x, "expected `name = expression`");
            goto fail;
        }
        int i = 0;
        while (i < p->nparams && strcmp(p->params[i].name, name))
            i++;
        if (i == p->nparams || inputs[i]) {
            snprintf(what, sizeof what, "'%s' is not a parameter, or is given twice", name);
            e = sm_ex_fail(&x, what);
            goto fail;
        }
        if ((e = sm_ex_line(&x, eq + 1, &inputs[i])))
            goto fail;
        snprintf(what, sizeof what, "argument '%s'", name);
        if ((e = sm_ex_check(&x, what, inputs[i], p->params[i].dtype, &p->params[i].global)))
            goto fail;
    }
    for (int i = 0; i < p->nparams; i++)
        if (!inputs[i]) {
            snprintf(what, sizeof what, "argument '%s' has no line", p->params[i].name);
            e = sm_ex_fail(&x, what);
            goto fail;
        }
    return SM_OK;
fail:
    sm_ex_arrays_clear(inputs, p->nparams);
    return e;
}

sm_err sm_example_expected(const char *text, const sm_program *p, sm_array *const *inputs,
                           sm_array **expected, char *err, size_t errlen)
{
    sm_ex x = {.p = p, .env = inputs, .err = err, .errlen = errlen};
    char buf[4096], what[64];
    const char *cur = text;
    sm_err e = SM_OK;
    int r = 0;
    for (int k = 0; k < p->nreturns; k++)
        expected[k] = NULL;
    while (sm_ex_next_line(&cur, &x.line, buf, sizeof buf)) {
        if (r == p->nreturns) {
            e = sm_ex_fail(&x, "more expected values than the program has outputs");
            goto fail;
        }
        if ((e = sm_ex_line(&x, buf, &expected[r])))
            goto fail;
        const sm_ir_value *v = &p->values[p->returns[r]];
        snprintf(what, sizeof what, "output %d", r);
        if ((e = sm_ex_check(&x, what, expected[r], v->dtype, &p->out_global[r])))
            goto fail;
        r++;
    }
    if (r != p->nreturns) {
        e = sm_ex_fail(&x, "fewer expected values than the program has outputs");
        goto fail;
    }
    return SM_OK;
fail:
    sm_ex_arrays_clear(expected, p->nreturns);
    return e;
}

sm_err sm_example_read_file(const char *path, char **out, char *err, size_t errlen)
{
    return sm_file_read_text(path, 0, out, err, errlen);
}
