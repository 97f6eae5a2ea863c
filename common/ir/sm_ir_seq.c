/* sm_ir_seq: tuples, lists and list comprehensions of the text form, and
 * basic indexing of arrays (x[a:b:c, :, i, None] lowers to slice, squeeze and
 * expand_dims). */
#include "sm_ir_parse.h"

#include <string.h>

/* A slice bound or step of an index: a static integer. */
static int sm_ps_index_int(sm_parser *ps, const char *what, int64_t *v)
{
    sm_item e;
    if (sm_ps_expr(ps, &e))
        return -1;
    if (e.kind == SM_IT_VALUE)
        return sm_ps_fail(ps, e.at, SM_EINVAL,
                          "index must be static; use dynamic_slice for a computed index");
    return sm_ps_static_int(ps, &e, what, v);
}

/* x[a:b:c, :, i, None] on an array, as numpy indexes: rev the dimensions a
 * negative step walks backwards, slice (strided where a step is given),
 * squeeze the integer-indexed dims, then expand_dims where None adds one. */
int sm_ps_index_value(sm_parser *ps, const sm_tok *at, sm_item *x)
{
    const sm_ir_value *v = &ps->p->values[x->i];
    sm_shape s = v->shape;
    sm_ir_attrs sl = {.has_ints = 1, .has_ints2 = 1}, sq = {.has_ints = 1}, ex = {.has_ints = 1},
                rv = {.has_ints = 1}; /* dimensions a negative step reverses first */
    sl.ints.n = sl.ints2.n = sl.ints3.n = s.rank;
    for (int d = 0; d < s.rank; d++)
        sl.ints.v[d] = 0, sl.ints2.v[d] = s.dims[d], sl.ints3.v[d] = 1;
    int d = 0, o = 0, changed = 0; /* o: dims of the result so far */
    do {
        if (sm_tok_is(sm_ps_peek(ps), "]"))
            break;
        const sm_tok *et = sm_ps_peek(ps);
        if (sm_tok_is(et, "None")) { /* a new axis of size 1 */
            ps->pos++;
            if (ex.ints.n == SM_IR_MAX_INTS || s.rank + ex.ints.n >= SM_MAX_RANK)
                return sm_ps_fail(ps, et, SM_EINVAL, "too many new axes for rank %d", s.rank);
            ex.ints.v[ex.ints.n++] = o++;
            continue;
        }
        if (d >= s.rank)
            return sm_ps_fail(ps, et, SM_EINVAL, "too many indices for an array of rank %d",
                              s.rank);
        int64_t n = s.dims[d], lo = 0, hi = n, step = 1, is_int = 0;
        int has_lo = 0, has_hi = 0;
        if (!sm_tok_is(et, ":")) {
            if (sm_ps_index_int(ps, "an index", &lo))
                return -1;
            has_lo = 1;
            is_int = !sm_tok_is(sm_ps_peek(ps), ":");
        }
        if (sm_ps_accept(ps, ":")) {
            const sm_tok *t = sm_ps_peek(ps);
            if (!sm_tok_is(t, ",") && !sm_tok_is(t, "]") && !sm_tok_is(t, ":")) {
                if (sm_ps_index_int(ps, "a slice bound", &hi))
                    return -1;
                has_hi = 1;
            }
            if (sm_ps_accept(ps, ":")) {
                t = sm_ps_peek(ps);
                if (!sm_tok_is(t, ",") && !sm_tok_is(t, "]") &&
                    sm_ps_index_int(ps, "a slice step", &step))
                    return -1;
                if (step == 0)
                    return sm_ps_fail(ps, t, SM_EINVAL, "slice step cannot be zero");
            }
        }
        if (is_int) {
            int64_t i = lo < 0 ? lo + n : lo;
            if (i < 0 || i >= n)
                return sm_ps_fail(ps, at, SM_EINVAL,
                                  "index %lld is out of bounds for dimension %d of size %lld",
                                  (long long)lo, d, (long long)n);
            lo = i;
            hi = i + 1;
            sq.ints.v[sq.ints.n++] = d;
        } else if (step > 0) { /* Python's bounds: negative from the end, clamped */
            lo = !has_lo ? 0 : lo < 0 ? (lo + n < 0 ? 0 : lo + n) : (lo > n ? n : lo);
            hi = !has_hi ? n : hi < 0 ? (hi + n < 0 ? 0 : hi + n) : (hi > n ? n : hi);
            if (hi < lo)
                hi = lo;
            o++;
        } else { /* a negative step: the same elements from the dimension reversed */
            int64_t a = !has_lo  ? n - 1
                        : lo < 0 ? (lo + n < 0 ? -1 : lo + n)
                                 : (lo >= n ? n - 1 : lo);
            int64_t b = !has_hi ? -1 : hi < 0 ? (hi + n < 0 ? -1 : hi + n) : (hi >= n ? n - 1 : hi);
            lo = n - 1 - a;
            hi = n - 1 - b;
            if (hi < lo)
                hi = lo;
            step = -step;
            rv.ints.v[rv.ints.n++] = d;
            o++;
        }
        sl.ints.v[d] = lo;
        sl.ints2.v[d] = hi;
        sl.ints3.v[d] = step;
        sl.has_ints3 |= step != 1;
        changed |= lo != 0 || hi != s.dims[d] || step != 1;
        d++;
    } while (sm_ps_accept(ps, ","));
    if (sm_ps_expect(ps, "]", "to close the index"))
        return -1;
    if (!sl.has_ints3) /* no step: printed and compared as slice(x, start, limit) */
        memset(&sl.ints3, 0, sizeof sl.ints3);
    int id = (int)x->i;
    if (rv.ints.n && sm_ps_emit(ps, SM_OP_REV, &id, 1, &rv, at, x))
        return -1;
    id = (int)x->i;
    if (changed && sm_ps_emit(ps, SM_OP_SLICE, &id, 1, &sl, at, x))
        return -1;
    id = (int)x->i;
    if (sq.ints.n && sm_ps_emit(ps, SM_OP_SQUEEZE, &id, 1, &sq, at, x))
        return -1;
    id = (int)x->i;
    if (ex.ints.n && sm_ps_emit(ps, SM_OP_EXPAND_DIMS, &id, 1, &ex, at, x))
        return -1;
    return 0;
}

static int sm_ps_comprehension(sm_parser *ps, int elem_pos, int for_pos, const sm_tok *open,
                               sm_item *out);

/* Index of a `for` at the top level of the list starting at pos, or -1. */
static int sm_ps_find_for(sm_parser *ps, int pos)
{
    for (int depth = 0; pos < ps->nt && ps->t[pos].kind != SM_TOK_EOF; pos++) {
        const sm_tok *t = &ps->t[pos];
        if (sm_tok_is(t, "(") || sm_tok_is(t, "["))
            depth++;
        else if (sm_tok_is(t, ")") || sm_tok_is(t, "]")) {
            if (depth-- == 0)
                return -1;
        } else if (depth == 0 && sm_tok_is(t, "for"))
            return pos;
    }
    return -1;
}

void *sm_ps_room(sm_parser *ps, void *arr, size_t elem, int n, int *cap)
{
    if (arr && n < *cap)
        return arr;
    int nc = *cap > 0 ? *cap * 2 : 8;
    void *na = sm_arena_alloc(ps->scratch, elem * (size_t)nc);
    if (na && arr)
        memcpy(na, arr, elem * (size_t)n);
    if (na)
        *cap = nc;
    return na;
}

/* Tuple or list body after '(' or '[' up to close; `(x)` is x. */
int sm_ps_seq(sm_parser *ps, const sm_tok *open, const char *close, int is_list, sm_item *out)
{
    int cap = 8, n = 0, comma = 0;
    sm_item *el = sm_arena_alloc(ps->scratch, sizeof *el * (size_t)cap);
    int start = ps->pos, for_pos = is_list ? sm_ps_find_for(ps, start) : -1;
    if (for_pos >= 0)
        return sm_ps_comprehension(ps, start, for_pos, open, out);
    while (!sm_ps_accept(ps, close)) {
        if (!(el = sm_ps_room(ps, el, sizeof *el, n, &cap)))
            return sm_ps_fail(ps, open, SM_ENOMEM, "out of memory");
        if (sm_ps_expr(ps, &el[n++]))
            return -1;
        if (sm_tok_is(sm_ps_peek(ps), close))
            continue;
        if (sm_ps_expect(ps, ",", is_list ? "between list items" : "between tuple items"))
            return -1;
        comma = 1;
    }
    if (!is_list && n == 1 && !comma) {
        *out = el[0];
        return 0;
    }
    *out = (sm_item){.kind = SM_IT_TUPLE, .n = n, .elems = el, .is_list = is_list, .at = open};
    return 0;
}

/* [EXPR for NAME in range(...)]: EXPR is re-read for every NAME. */
static int sm_ps_comprehension(sm_parser *ps, int elem_pos, int for_pos, const sm_tok *open,
                               sm_item *out)
{
    ps->pos = for_pos + 1;
    const sm_tok *var = sm_ps_peek(ps);
    if (var->kind != SM_TOK_NAME)
        return sm_ps_fail(ps, var, SM_EFORMAT, "expected a loop variable after 'for'");
    ps->pos++;
    int64_t a, b, step;
    if (sm_ps_expect(ps, "in", "in a comprehension") ||
        sm_ps_expect(ps, "range", "(only 'for NAME in range(...)' is supported)") ||
        sm_ps_range(ps, &a, &b, &step) || sm_ps_expect(ps, "]", "to close the comprehension"))
        return -1;
    int end = ps->pos;
    char *name = sm_ps_text(ps, var);
    sm_item *saved = sm_ps_lookup(ps, name, (int)strlen(name)), keep = {0};
    if (saved)
        keep = *saved;
    int64_t cnt = step > 0 ? (b > a ? (b - a + step - 1) / step : 0)
                           : (a > b ? (a - b - step - 1) / -step : 0);
    if (cnt > 100000)
        return sm_ps_fail(ps, open, SM_EINVAL, "comprehension longer than 100000 items");
    sm_item *el = sm_arena_alloc(ps->scratch, sizeof *el * (size_t)(cnt ? cnt : 1));
    if (!el)
        return sm_ps_fail(ps, open, SM_ENOMEM, "out of memory");
    int n = 0;
    for (int64_t k = a; step > 0 ? k < b : k > b; k += step) {
        sm_item kv = {.kind = SM_IT_INT, .i = k, .at = var};
        ps->pos = elem_pos;
        if (sm_ps_bind(ps, name, &kv) || sm_ps_expr(ps, &el[n++]))
            return -1;
        if (ps->pos != for_pos)
            return sm_ps_fail(ps, sm_ps_peek(ps), SM_EFORMAT,
                              "expected 'for' after the comprehension's expression");
    }
    if (saved)
        *sm_ps_lookup(ps, name, (int)strlen(name)) = keep;
    ps->pos = end;
    *out = (sm_item){.kind = SM_IT_TUPLE, .n = n, .elems = el, .is_list = 1, .at = open};
    return 0;
}
