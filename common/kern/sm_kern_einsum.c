/* Two-operand einsum on the strided batched gemm engine.
 *
 * Each letter is a batch dim (both operands and the output), a free dim of A
 * (M) or of B (N), a contraction dim (K: both operands, not the output), or
 * a dim of one operand only, summed out first. M and N keep the output's
 * order, K keeps A's. Each group must collapse to one stride in each
 * operand; batch dims may have any strides. An operand whose groups don't
 * collapse, or whose strides gemm can't take, is transposed into canonical
 * order (batch, M, K) / (batch, K, N); an output that can't take the result
 * gets it through a canonical (batch, M, N) scratch and a transpose. */
#include <stdio.h>
#include <stdlib.h>

#include "sm_kern_impl.h"

typedef struct {
    char l[SM_MAX_RANK + 1];
    int n;
} ein_term;

typedef struct {
    ein_term a, b, o;
    int64_t size[128];
} ein_spec;

static int ein_letter(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

static int ein_pos(const ein_term *t, char c)
{
    for (int i = 0; i < t->n; i++)
        if (t->l[i] == c)
            return i;
    return -1;
}

/* Reads letters up to a stop char; SM_EINVAL/SM_EUNSUPPORTED on bad input. */
static sm_err ein_read_term(const char *spec, const char **p, ein_term *t, char *err, size_t errlen)
{
    t->n = 0;
    for (; **p && **p != ',' && **p != '-'; (*p)++) {
        char c = **p;
        if (c == ' ')
            continue;
        if (c == '.')
            return sm_fail(err, errlen, SM_EUNSUPPORTED, "einsum '%s': ellipsis is not supported",
                           spec);
        if (!ein_letter(c))
            return sm_fail(err, errlen, SM_EINVAL, "einsum '%s': bad character '%c'", spec, c);
        if (t->n == SM_MAX_RANK)
            return sm_fail(err, errlen, SM_EINVAL, "einsum '%s': a term exceeds rank %d", spec,
                           SM_MAX_RANK);
        if (ein_pos(t, c) >= 0)
            return sm_fail(err, errlen, SM_EUNSUPPORTED,
                           "einsum '%s': repeated index '%c' in one term is not supported", spec,
                           c);
        t->l[t->n++] = c;
    }
    t->l[t->n] = 0;
    return SM_OK;
}

static sm_err ein_parse(const char *spec, const sm_shape *as, const sm_shape *bs, ein_spec *s,
                        char *err, size_t errlen)
{
    const char *p = spec;
    sm_err e = ein_read_term(spec, &p, &s->a, err, errlen);
    if (e)
        return e;
    if (*p != ',')
        return sm_fail(err, errlen, SM_EINVAL, "einsum '%s': expected two operands", spec);
    p++;
    if ((e = ein_read_term(spec, &p, &s->b, err, errlen)))
        return e;
    if (*p == ',')
        return sm_fail(err, errlen, SM_EINVAL, "einsum '%s': expected two operands", spec);
    int explicit_out = 0;
    if (*p == '-') {
        if (p[1] != '>')
            return sm_fail(err, errlen, SM_EINVAL, "einsum '%s': expected '->'", spec);
        p += 2;
        explicit_out = 1;
        if ((e = ein_read_term(spec, &p, &s->o, err, errlen)))
            return e;
        if (*p)
            return sm_fail(err, errlen, SM_EINVAL, "einsum '%s': trailing '%c'", spec, *p);
    }
    const sm_shape *sh[2] = {as, bs};
    const ein_term *tm[2] = {&s->a, &s->b};
    for (int i = 0; i < 128; i++)
        s->size[i] = -1;
    for (int k = 0; k < 2; k++) {
        char b1[128];
        if (tm[k]->n != sh[k]->rank)
            return sm_fail(err, errlen, SM_EINVAL,
                           "einsum '%s': operand %d has shape %s but its term '%s' has %d indices",
                           spec, k, smk_fmt(sh[k], b1, sizeof b1), tm[k]->l, tm[k]->n);
        for (int i = 0; i < tm[k]->n; i++) {
            int c = tm[k]->l[i];
            if (s->size[c] >= 0 && s->size[c] != sh[k]->dims[i]) {
                char b2[128];
                return sm_fail(err, errlen, SM_EINVAL,
                               "einsum '%s': index '%c' has size %lld in %s and %lld in %s", spec,
                               c, (long long)s->size[c], smk_fmt(as, b1, sizeof b1),
                               (long long)sh[k]->dims[i], smk_fmt(bs, b2, sizeof b2));
            }
            s->size[c] = sh[k]->dims[i];
        }
    }
    if (!explicit_out) { /* letters used once, in alphabetical (ASCII) order */
        s->o.n = 0;
        for (int c = 0; c < 128; c++)
            if (s->size[c] >= 0 &&
                (ein_pos(&s->a, (char)c) >= 0) + (ein_pos(&s->b, (char)c) >= 0) == 1)
                s->o.l[s->o.n++] = (char)c;
        s->o.l[s->o.n] = 0;
    }
    for (int i = 0; i < s->o.n; i++)
        if (s->size[(int)s->o.l[i]] < 0)
            return sm_fail(err, errlen, SM_EINVAL,
                           "einsum '%s': output index '%c' is not in an operand", spec, s->o.l[i]);
    return SM_OK;
}

sm_err sm_kern_einsum_shape(const char *spec, const sm_shape *as, const sm_shape *bs, sm_shape *out,
                            char *err, size_t errlen)
{
    ein_spec s;
    sm_err e = ein_parse(spec, as, bs, &s, err, errlen);
    if (e)
        return e;
    out->rank = s.o.n;
    for (int i = 0; i < s.o.n; i++)
        out->dims[i] = s.size[(int)s.o.l[i]];
    return SM_OK;
}

/* An operand during planning: its term, data and per-letter strides. */
typedef struct {
    ein_term t;
    const void *data;
    void *owned; /* scratch to free, or NULL */
    int64_t st[128];
} ein_opnd;

static void ein_opnd_strides(ein_opnd *o, const int64_t *size)
{
    int64_t acc = 1;
    for (int i = o->t.n - 1; i >= 0; i--) {
        o->st[(int)o->t.l[i]] = acc;
        acc *= size[(int)o->t.l[i]];
    }
}

static sm_shape ein_shape(const ein_term *t, const int64_t *size)
{
    sm_shape s = {.rank = t->n};
    for (int i = 0; i < t->n; i++)
        s.dims[i] = size[(int)t->l[i]];
    return s;
}

/* Collapses a letter group of o to one (size, stride); 0 if not possible. */
static int ein_group(const ein_opnd *o, const char *g, int n, const int64_t *size, int64_t *gsz,
                     int64_t *gst)
{
    int64_t prev = -1;
    *gsz = 1;
    *gst = 1;
    for (int i = 0; i < n; i++) {
        int c = g[i];
        if (size[c] == 1)
            continue;
        if (prev >= 0 && o->st[prev] != o->st[c] * size[c])
            return 0;
        prev = c;
        *gsz *= size[c];
        *gst = o->st[c];
    }
    return 1;
}

/* A buffer for the elements of term over size, of dtype t; NULL when out
 * of memory. */
static void *ein_alloc(const ein_term *term, const int64_t *size, sm_dtype t)
{
    sm_shape s = ein_shape(term, size);
    int64_t numel = smk_numel(&s);
    return malloc(numel > 0 ? (size_t)numel * smk_elem(t) : 1);
}

/* Makes buf (taken) o's data, with the letters of term. */
static void ein_adopt(ein_opnd *o, void *buf, const ein_term *term, const int64_t *size)
{
    free(o->owned);
    o->owned = buf;
    o->data = buf;
    o->t = *term;
    ein_opnd_strides(o, size);
}

/* Replaces o by a copy transposed into the letter order want[0..n). */
static sm_err ein_canon(ein_opnd *o, sm_dtype t, const char *want, int n, const int64_t *size,
                        char *err, size_t errlen)
{
    sm_shape s = ein_shape(&o->t, size);
    int perm[SM_MAX_RANK];
    ein_term w = {.n = n};
    for (int i = 0; i < n; i++)
        perm[i] = ein_pos(&o->t, w.l[i] = want[i]);
    void *buf = ein_alloc(&o->t, size, t);
    if (!buf)
        return sm_fail(err, errlen, SM_ENOMEM, "no memory for an einsum operand copy");
    sm_err e = sm_kern_transpose(t, o->data, &s, perm, buf, err, errlen);
    if (e) {
        free(buf);
        return e;
    }
    ein_adopt(o, buf, &w, size);
    return SM_OK;
}

/* Sums o over its letters absent from both other terms. */
static sm_err ein_presum(ein_opnd *o, const ein_term *other, const ein_term *out, sm_dtype t,
                         const int64_t *size, char *err, size_t errlen)
{
    int axes[SM_MAX_RANK], na = 0;
    ein_term kept = {.n = 0};
    for (int i = 0; i < o->t.n; i++) {
        if (ein_pos(other, o->t.l[i]) < 0 && ein_pos(out, o->t.l[i]) < 0)
            axes[na++] = i;
        else
            kept.l[kept.n++] = o->t.l[i];
    }
    kept.l[kept.n] = 0;
    if (!na)
        return SM_OK;
    sm_shape s = ein_shape(&o->t, size);
    void *buf = ein_alloc(&kept, size, t);
    if (!buf)
        return sm_fail(err, errlen, SM_ENOMEM, "no memory for an einsum partial sum");
    sm_err e = sm_kern_reduce(SM_KERN_SUM, t, o->data, &s, axes, na, 0, buf, err, errlen);
    if (e) {
        free(buf);
        return e;
    }
    ein_adopt(o, buf, &kept, size);
    return SM_OK;
}

/* The letter groups of the plan. */
typedef struct {
    char bat[SM_MAX_RANK], m[SM_MAX_RANK], n[SM_MAX_RANK], k[SM_MAX_RANK];
    int nbat, nm, nn, nk;
} ein_groups;

/* The batch letters of gr, then x (nx letters), then y (ny), into out
 * (SM_MAX_RANK + 1 bytes, NUL-terminated): a gemm operand's canonical
 * order. Returns the count. */
static int ein_order(const ein_groups *gr, const char *x, int nx, const char *y, int ny, char *out)
{
    memcpy(out, gr->bat, (size_t)gr->nbat);
    memcpy(out + gr->nbat, x, (size_t)nx);
    memcpy(out + gr->nbat + nx, y, (size_t)ny);
    out[gr->nbat + nx + ny] = 0;
    return gr->nbat + nx + ny;
}

/* Sorts the letters of the (presummed) operands into groups. */
static void ein_make_groups(const ein_spec *s, const ein_opnd *A, const ein_opnd *B, ein_groups *gr)
{
    memset(gr, 0, sizeof *gr);
    for (int i = 0; i < s->o.n; i++) {
        char c = s->o.l[i];
        int ia = ein_pos(&A->t, c) >= 0, ib = ein_pos(&B->t, c) >= 0;
        if (ia && ib)
            gr->bat[gr->nbat++] = c;
        else if (ia)
            gr->m[gr->nm++] = c;
        else
            gr->n[gr->nn++] = c;
    }
    for (int i = 0; i < A->t.n; i++)
        if (ein_pos(&s->o, A->t.l[i]) < 0)
            gr->k[gr->nk++] = A->t.l[i];
}

/* Fills g from the operands; returns the bits (1 A, 2 B, 4 C) of operands
 * that need a canonical copy. */
static int ein_plan(const ein_groups *gr, const ein_opnd *A, const ein_opnd *B, const ein_opnd *C,
                    const int64_t *size, sm_dtype t, smk_gemm *g)
{
    int bad = 0;
    int64_t sz;
    memset(g, 0, sizeof *g);
    if (!ein_group(A, gr->m, gr->nm, size, &g->m, &g->sam) ||
        !ein_group(A, gr->k, gr->nk, size, &g->k, &g->sak))
        bad |= 1;
    if (!ein_group(B, gr->k, gr->nk, size, &sz, &g->sbk) ||
        !ein_group(B, gr->n, gr->nn, size, &g->n, &g->sbn))
        bad |= 2;
    if (!ein_group(C, gr->m, gr->nm, size, &sz, &g->scm) ||
        !ein_group(C, gr->n, gr->nn, size, &sz, &g->scn))
        bad |= 4;
    g->nb = gr->nbat;
    for (int i = 0; i < gr->nbat; i++) {
        int c = gr->bat[i];
        g->bdims[i] = size[c];
        g->bst[0][i] = A->st[c];
        g->bst[1][i] = B->st[c];
        g->bst[2][i] = C->st[c];
    }
    if (!bad)
        bad = smk_gemm_bad_layout(t, g);
    return bad;
}

int smk_einsum_copies(const char *spec, sm_dtype t, const sm_shape *as, const sm_shape *bs)
{
    ein_spec s;
    if (ein_parse(spec, as, bs, &s, NULL, 0))
        return -1;
    ein_opnd A = {.t = s.a}, B = {.t = s.b}, C = {.t = s.o};
    /* drop the letters a presum would remove; the result is dense */
    ein_opnd *ops[2] = {&A, &B};
    const ein_term *other[2] = {&s.b, &s.a};
    for (int k = 0; k < 2; k++) {
        ein_term kept = {.n = 0};
        for (int i = 0; i < ops[k]->t.n; i++)
            if (ein_pos(other[k], ops[k]->t.l[i]) >= 0 || ein_pos(&s.o, ops[k]->t.l[i]) >= 0)
                kept.l[kept.n++] = ops[k]->t.l[i];
        kept.l[kept.n] = 0;
        ops[k]->t = kept;
        ein_opnd_strides(ops[k], s.size);
    }
    ein_opnd_strides(&C, s.size);
    ein_groups gr;
    ein_make_groups(&s, &A, &B, &gr);
    smk_gemm g;
    return ein_plan(&gr, &A, &B, &C, s.size, t, &g);
}

sm_err sm_kern_einsum(const char *spec, sm_dtype t, const void *a, const sm_shape *as,
                      const void *b, const sm_shape *bs, void *out, char *err, size_t errlen)
{
    ein_spec s;
    sm_err e = ein_parse(spec, as, bs, &s, err, errlen);
    if (e)
        return e;
    if (t != SM_F32 && t != SM_F64 && t != SM_I32 && t != SM_I64)
        return sm_fail(err, errlen, SM_EUNSUPPORTED, "einsum does not support dtype %s",
                       sm_dtype_name(t));
    ein_opnd A = {.t = s.a, .data = a}, B = {.t = s.b, .data = b}, C = {.t = s.o, .data = out};
    void *cbuf = NULL;
    ein_opnd_strides(&A, s.size);
    ein_opnd_strides(&B, s.size);
    ein_opnd_strides(&C, s.size);
    if ((e = ein_presum(&A, &s.b, &s.o, t, s.size, err, errlen)) ||
        (e = ein_presum(&B, &s.a, &s.o, t, s.size, err, errlen)))
        goto fail;
    ein_groups gr;
    ein_make_groups(&s, &A, &B, &gr);
    smk_gemm g;
    int bad = ein_plan(&gr, &A, &B, &C, s.size, t, &g);
    char want[SM_MAX_RANK + 1];
    if ((bad & 1) && (e = ein_canon(&A, t, want, ein_order(&gr, gr.m, gr.nm, gr.k, gr.nk, want),
                                    s.size, err, errlen)))
        goto fail;
    if ((bad & 2) && (e = ein_canon(&B, t, want, ein_order(&gr, gr.k, gr.nk, gr.n, gr.nn, want),
                                    s.size, err, errlen)))
        goto fail;
    if (bad & 4) {
        C.t.n = ein_order(&gr, gr.m, gr.nm, gr.n, gr.nn, C.t.l);
        cbuf = ein_alloc(&C.t, s.size, t);
        if (!cbuf) {
            e = sm_fail(err, errlen, SM_ENOMEM, "no memory for an einsum result copy");
            goto fail;
        }
        C.data = cbuf;
        ein_opnd_strides(&C, s.size);
    }
    if (bad && ein_plan(&gr, &A, &B, &C, s.size, t, &g)) {
        e = sm_fail(err, errlen, SM_EINTERNAL, "einsum '%s': no gemm layout after copies", spec);
        goto fail;
    }
    if ((e = smk_gemm_run(t, &g, A.data, B.data, (void *)C.data, err, errlen)))
        goto fail;
    if (cbuf) {
        sm_shape cs = ein_shape(&C.t, s.size);
        int perm[SM_MAX_RANK];
        for (int i = 0; i < s.o.n; i++)
            perm[i] = ein_pos(&C.t, s.o.l[i]);
        e = sm_kern_transpose(t, cbuf, &cs, perm, out, err, errlen);
    }
fail:
    free(A.owned);
    free(B.owned);
    free(cbuf);
    return e;
}
