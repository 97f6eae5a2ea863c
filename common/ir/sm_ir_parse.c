/* sm_ir_parse: the text form's file structure — mesh line, shard_map
 * header with parameters and out_specs, body statements, `for` unrolling
 * and `return` — plus the parser's shared helpers. */
#include "sm_ir_parse.h"

#include "sm_ir_infer.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int sm_ps_fail(sm_parser *ps, const sm_tok *at, sm_err code, const char *fmt, ...)
{
    if (ps->code)
        return -1;
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    ps->code = sm_fail(ps->err, ps->errlen, code, "%s:%d:%d: %s", ps->file, at ? at->line : 0,
                       at ? at->col : 0, msg);
    return -1;
}

int sm_ps_fail_at(sm_parser *ps, const sm_tok *at, sm_err code)
{
    char msg[768];
    snprintf(msg, sizeof msg, "%s", ps->err && ps->errlen ? ps->err : "error");
    return sm_ps_fail(ps, at, code, "%s", msg);
}

const sm_tok *sm_ps_peek(sm_parser *ps)
{
    return &ps->t[ps->pos];
}

const sm_tok *sm_ps_next(sm_parser *ps)
{
    const sm_tok *t = &ps->t[ps->pos];
    if (t->kind != SM_TOK_EOF)
        ps->pos++;
    return t;
}

int sm_ps_accept(sm_parser *ps, const char *s)
{
    if (sm_tok_is(sm_ps_peek(ps), s)) {
        ps->pos++;
        return 1;
    }
    return 0;
}

static const char *sm_ps_tok_desc(const sm_tok *t, char *buf, size_t len)
{
    switch (t->kind) {
    case SM_TOK_EOF:
        return "end of file";
    case SM_TOK_NEWLINE:
        return "end of line";
    case SM_TOK_INDENT:
        return "an indented block";
    case SM_TOK_DEDENT:
        return "the end of an indented block";
    default:
        snprintf(buf, len, "'%.*s'", t->len > 40 ? 40 : t->len, t->text);
        return buf;
    }
}

int sm_ps_expect(sm_parser *ps, const char *s, const char *context)
{
    if (sm_ps_accept(ps, s))
        return 0;
    char d[64];
    return sm_ps_fail(ps, sm_ps_peek(ps), SM_EFORMAT, "expected '%s' %s, got %s", s, context,
                      sm_ps_tok_desc(sm_ps_peek(ps), d, sizeof d));
}

static int sm_ps_expect_kind(sm_parser *ps, sm_tok_kind k, const char *what, const char *context)
{
    if (sm_ps_peek(ps)->kind == k) {
        ps->pos++;
        return 0;
    }
    char d[64];
    return sm_ps_fail(ps, sm_ps_peek(ps), SM_EFORMAT, "expected %s %s, got %s", what, context,
                      sm_ps_tok_desc(sm_ps_peek(ps), d, sizeof d));
}

char *sm_ps_text(sm_parser *ps, const sm_tok *t)
{
    return sm_arena_strndup(ps->scratch, t->text, (size_t)t->len);
}

/* FNV-1a of the name, a bucket of the names' table. */
static unsigned sm_ps_bucket(const char *name, int len)
{
    uint32_t h = 2166136261u;
    for (int i = 0; i < len; i++)
        h = (h ^ (unsigned char)name[i]) * 16777619u;
    return h & (SM_PS_BUCKETS - 1);
}

sm_item *sm_ps_lookup(sm_parser *ps, const char *name, int len)
{
    if (!ps->heads)
        return NULL;
    for (int i = ps->heads[sm_ps_bucket(name, len)]; i >= 0; i = ps->syms[i].chain)
        if (ps->syms[i].len == len && memcmp(ps->syms[i].name, name, (size_t)len) == 0)
            return &ps->syms[i].item;
    return NULL;
}

int sm_ps_bind(sm_parser *ps, const char *name, const sm_item *it)
{
    int len = (int)strlen(name);
    sm_item *old = sm_ps_lookup(ps, name, len);
    if (old) {
        *old = *it;
        return 0;
    }
    if (!ps->heads) {
        if (!(ps->heads = malloc(sizeof *ps->heads * SM_PS_BUCKETS)))
            return sm_ps_fail(ps, sm_ps_peek(ps), SM_ENOMEM, "out of memory");
        for (int b = 0; b < SM_PS_BUCKETS; b++)
            ps->heads[b] = -1;
    }
    if (ps->nsyms == ps->capsyms) {
        int nc = ps->capsyms ? ps->capsyms * 2 : 64;
        sm_sym *ns = realloc(ps->syms, sizeof *ns * (size_t)nc);
        if (!ns)
            return sm_ps_fail(ps, sm_ps_peek(ps), SM_ENOMEM, "out of memory");
        ps->syms = ns;
        ps->capsyms = nc;
    }
    unsigned b = sm_ps_bucket(name, len);
    ps->syms[ps->nsyms] = (sm_sym){.name = name, .len = len, .chain = ps->heads[b], .item = *it};
    ps->heads[b] = ps->nsyms++;
    return 0;
}

void sm_ps_unbind_to(sm_parser *ps, int n)
{
    for (; ps->nsyms > n; ps->nsyms--) {
        const sm_sym *y = &ps->syms[ps->nsyms - 1];
        ps->heads[sm_ps_bucket(y->name, y->len)] = y->chain;
    }
}

int sm_ps_at_unconstrained(sm_parser *ps)
{
    const sm_tok *t = sm_ps_peek(ps);
    if (sm_tok_is(t, "UNCONSTRAINED"))
        return 1;
    return (sm_tok_is(t, "P") || sm_tok_is(t, "PartitionSpec")) &&
                   sm_tok_is(&ps->t[ps->pos + 1], ".") &&
                   sm_tok_is(&ps->t[ps->pos + 2], "UNCONSTRAINED")
               ? 3
               : 0;
}

const sm_tok *sm_ps_kind_word(sm_parser *ps)
{
    if (sm_tok_is(sm_ps_peek(ps), "UnreducedKind") && sm_tok_is(&ps->t[ps->pos + 1], "."))
        ps->pos += 2;
    return sm_ps_peek(ps);
}

/* One spec entry: None, 'x', or a tuple of names. */
static int sm_ps_pspec_entry(sm_parser *ps, sm_pspec_entry *e)
{
    const sm_tok *t = sm_ps_peek(ps);
    memset(e, 0, sizeof *e);
    if (sm_ps_accept(ps, "None"))
        return 0;
    int unc = sm_ps_at_unconstrained(ps);
    if (unc) { /* P.UNCONSTRAINED, as JAX prints it */
        ps->pos += unc;
        e->unconstrained = 1;
        return 0;
    }
    if (t->kind == SM_TOK_STRING) {
        ps->pos++;
        if (t->len < 1 || t->len >= SM_AXIS_NAME_MAX)
            return sm_ps_fail(ps, t, SM_EINVAL, "axis name '%.*s' is empty or too long", t->len,
                              t->text);
        memcpy(e->axes[0], t->text, (size_t)t->len);
        e->naxes = 1;
        return 0;
    }
    if (!sm_ps_accept(ps, "("))
        return sm_ps_fail(ps, t, SM_EFORMAT,
                          "expected None, an axis name or a tuple of axis names in P(...)");
    e->is_tuple = 1;
    while (!sm_ps_accept(ps, ")")) {
        t = sm_ps_peek(ps);
        if (t->kind != SM_TOK_STRING)
            return sm_ps_fail(ps, t, SM_EFORMAT, "expected an axis name in a P(...) tuple");
        if (e->naxes == SM_MAX_AXES || t->len < 1 || t->len >= SM_AXIS_NAME_MAX)
            return sm_ps_fail(ps, t, SM_EINVAL, "too many or too long axis names in P(...)");
        memcpy(e->axes[e->naxes++], t->text, (size_t)t->len);
        ps->pos++;
        if (!sm_tok_is(sm_ps_peek(ps), ")") && sm_ps_expect(ps, ",", "between axis names"))
            return -1;
    }
    return 0;
}

int sm_ps_pspec(sm_parser *ps, sm_pspec *out)
{
    memset(out, 0, sizeof *out);
    const sm_tok *t = sm_ps_peek(ps);
    while ((sm_tok_is(sm_ps_peek(ps), "jax") || sm_tok_is(sm_ps_peek(ps), "sharding") ||
            sm_tok_is(sm_ps_peek(ps), "shd")) &&
           sm_tok_is(&ps->t[ps->pos + 1], ".")) /* jax.P, jax.sharding.PartitionSpec */
        ps->pos += 2;
    if (!sm_ps_accept(ps, "P") && !sm_ps_accept(ps, "PartitionSpec"))
        return sm_ps_fail(ps, t, SM_EFORMAT, "expected a PartitionSpec P(...)");
    if (sm_ps_expect(ps, "(", "after P"))
        return -1;
    while (!sm_ps_accept(ps, ")")) {
        if (sm_tok_is(sm_ps_peek(ps), "unreduced_kind")) { /* unreduced_kind=max */
            ps->pos++;
            if (sm_ps_expect(ps, "=", "after unreduced_kind"))
                return -1;
            const sm_tok *k = sm_ps_kind_word(ps);
            int kind = k->kind == SM_TOK_STRING || k->kind == SM_TOK_NAME
                           ? sm_pspec_kind_of(k->text, (size_t)k->len)
                           : -1;
            if (kind < 0)
                return sm_ps_fail(ps, k, SM_EINVAL,
                                  "expected sum, max or min after unreduced_kind=");
            out->unreduced_kind = kind;
            ps->pos++;
            if (!sm_tok_is(sm_ps_peek(ps), ")") && sm_ps_expect(ps, ",", "after unreduced_kind"))
                return -1;
            continue;
        }
        int red = sm_tok_is(sm_ps_peek(ps), "reduced");
        if (red || sm_tok_is(sm_ps_peek(ps), "unreduced")) { /* unreduced={'y'}, reduced={'x'} */
            const char *word = red ? "reduced" : "unreduced";
            char(*names)[SM_AXIS_NAME_MAX] = red ? out->reduced : out->unreduced;
            int *n = red ? &out->nreduced : &out->nunreduced;
            char what[64];
            ps->pos++;
            snprintf(what, sizeof what, "after %s", word);
            if (sm_ps_expect(ps, "=", what) ||
                sm_ps_expect(ps, "{",
                             red ? "to start the set of reduced axes"
                                 : "to start the set of unreduced axes"))
                return -1;
            while (!sm_ps_accept(ps, "}")) {
                const sm_tok *a = sm_ps_peek(ps);
                if (a->kind != SM_TOK_STRING || a->len < 1 || a->len >= SM_AXIS_NAME_MAX)
                    return sm_ps_fail(ps, a, SM_EINVAL, "expected a quoted axis name in %s=", word);
                if (*n == SM_MAX_AXES)
                    return sm_ps_fail(ps, a, SM_EINVAL, "more than %d %s axes", SM_MAX_AXES, word);
                memcpy(names[*n], a->text, (size_t)a->len);
                names[(*n)++][a->len] = 0;
                ps->pos++;
                if (!sm_tok_is(sm_ps_peek(ps), "}") &&
                    sm_ps_expect(ps, ",",
                                 red ? "between reduced axis names"
                                     : "between unreduced axis names"))
                    return -1;
            }
            if (!sm_tok_is(sm_ps_peek(ps), ")") &&
                sm_ps_expect(ps, ",", red ? "after reduced={...}" : "after unreduced={...}"))
                return -1;
            continue;
        }
        if (out->nentries == SM_MAX_RANK)
            return sm_ps_fail(ps, sm_ps_peek(ps), SM_EINVAL, "P(...) has more than %d entries",
                              SM_MAX_RANK);
        if (sm_ps_pspec_entry(ps, &out->e[out->nentries++]))
            return -1;
        if (!sm_tok_is(sm_ps_peek(ps), ")") && sm_ps_expect(ps, ",", "between P(...) entries"))
            return -1;
    }
    return 0;
}

static int sm_ps_int_tok(sm_parser *ps, const char *context, int64_t *v)
{
    const sm_tok *t = sm_ps_peek(ps);
    if (t->kind != SM_TOK_INT)
        return sm_ps_expect_kind(ps, SM_TOK_INT, "an integer", context);
    ps->pos++;
    *v = t->ival;
    return 0;
}

/* mesh i=4 j=2 [devices=[...]] */
static int sm_ps_mesh(sm_parser *ps, sm_mesh *m, int *has_devices)
{
    const sm_tok *start = sm_ps_peek(ps);
    if (!sm_ps_accept(ps, "mesh"))
        return sm_ps_fail(ps, start, SM_EFORMAT, "expected the mesh line ('mesh i=4 j=2') first");
    char names[SM_MAX_AXES][SM_AXIS_NAME_MAX];
    const char *np[SM_MAX_AXES];
    int64_t sizes[SM_MAX_AXES] = {0};
    int32_t *devs = NULL;
    int n = 0, ndev = 0;
    while (sm_ps_peek(ps)->kind == SM_TOK_NAME) {
        const sm_tok *t = sm_ps_next(ps);
        if (sm_ps_expect(ps, "=", "after a mesh axis name"))
            return -1;
        if (sm_tok_is(t, "axis_types")) { /* (Explicit, Auto, ...), in mesh order */
            if (sm_ps_expect(ps, "(", "to start the axis types"))
                return -1;
            int k = 0;
            while (!sm_ps_accept(ps, ")")) {
                const sm_tok *a = sm_ps_next(ps);
                while (
                    (sm_tok_is(a, "jax") || sm_tok_is(a, "sharding") || sm_tok_is(a, "AxisType")) &&
                    sm_ps_accept(ps, "."))
                    a = sm_ps_next(ps);
                if (sm_tok_is(a, "Auto")) {
                    ps->mesh_auto |= 1u << k;
                } else if (!sm_tok_is(a, "Explicit")) {
                    return sm_ps_fail(ps, a, SM_EINVAL,
                                      "axis_types takes Explicit or Auto per mesh axis, got "
                                      "'%.*s' (Manual axes come from calling a shard_map "
                                      "function)",
                                      a->len, a->text);
                }
                if (++k > SM_MAX_AXES)
                    return sm_ps_fail(ps, a, SM_EINVAL, "too many axis types");
                if (!sm_tok_is(sm_ps_peek(ps), ")") && sm_ps_expect(ps, ",", "between axis types"))
                    return -1;
            }
            ps->mesh_ntypes = k;
            continue;
        }
        if (sm_tok_is(t, "devices")) {
            devs = sm_arena_alloc(ps->scratch, sizeof(int32_t) * SM_MAX_DEVICES);
            if (!devs || sm_ps_expect(ps, "[", "to start the device list"))
                return -1;
            while (!sm_ps_accept(ps, "]")) {
                int64_t d = 0;
                if (ndev == SM_MAX_DEVICES)
                    return sm_ps_fail(ps, sm_ps_peek(ps), SM_EINVAL, "more than %d devices",
                                      SM_MAX_DEVICES);
                if (sm_ps_int_tok(ps, "in the device list", &d))
                    return -1;
                devs[ndev++] = (int32_t)d;
                if (!sm_tok_is(sm_ps_peek(ps), "]") && sm_ps_expect(ps, ",", "between devices"))
                    return -1;
            }
            *has_devices = 1;
            continue;
        }
        if (n == SM_MAX_AXES)
            return sm_ps_fail(ps, t, SM_EINVAL, "a mesh has at most %d axes", SM_MAX_AXES);
        snprintf(names[n], SM_AXIS_NAME_MAX, "%.*s", t->len, t->text);
        np[n] = names[n];
        if (sm_ps_int_tok(ps, "as the axis size", &sizes[n]))
            return -1;
        n++;
    }
    if (sm_ps_expect_kind(ps, SM_TOK_NEWLINE, "end of line", "after the mesh axes"))
        return -1;
    sm_err e = sm_mesh_init(m, n, np, sizes, devs, devs ? ndev : 0, ps->err, ps->errlen);
    if (e)
        return sm_ps_fail_at(ps, start, e);
    if (ps->mesh_ntypes && ps->mesh_ntypes != n)
        return sm_ps_fail(ps, start, SM_EINVAL, "axis_types gives %d types for %d mesh axes",
                          ps->mesh_ntypes, n);
    m->auto_axes = ps->mesh_auto; /* the mesh's own, for either kind of program */
    return 0;
}

/* A parameter's declaration: name: f32[8,16] @ P('i','j'). */
typedef struct {
    const sm_tok *name;
    sm_dtype t;
    sm_shape g;
    sm_pspec spec;
} sm_ps_decl;

static int sm_ps_param_decl(sm_parser *ps, sm_ps_decl *d)
{
    const sm_tok *nt = sm_ps_peek(ps);
    d->name = nt;
    if (sm_ps_expect_kind(ps, SM_TOK_NAME, "a parameter name", "in the parameter list") ||
        sm_ps_expect(ps, ":", "after the parameter name"))
        return -1;
    const sm_tok *dt = sm_ps_peek(ps);
    sm_dtype t;
    if (dt->kind != SM_TOK_NAME || sm_dtype_parse(sm_ps_text(ps, dt), &t))
        return sm_ps_fail(ps, dt, SM_EFORMAT, "expected a dtype (f32 f64 i32 i64 bool), got '%.*s'",
                          dt->len, dt->text);
    ps->pos++;
    sm_shape g = {0};
    if (sm_ps_expect(ps, "[", "to start the global shape"))
        return -1;
    while (!sm_ps_accept(ps, "]")) {
        if (g.rank == SM_MAX_RANK)
            return sm_ps_fail(ps, sm_ps_peek(ps), SM_EINVAL, "rank above %d", SM_MAX_RANK);
        if (sm_ps_int_tok(ps, "as a dimension", &g.dims[g.rank]))
            return -1;
        if (g.dims[g.rank++] < 0)
            return sm_ps_fail(ps, dt, SM_EINVAL, "negative dimension");
        if (!sm_tok_is(sm_ps_peek(ps), "]") && sm_ps_expect(ps, ",", "between dimensions"))
            return -1;
    }
    if (sm_ps_expect(ps, "@", "before the parameter's PartitionSpec") || sm_ps_pspec(ps, &d->spec))
        return -1;
    d->t = t;
    d->g = g;
    return 0;
}

static int sm_ps_param(sm_parser *ps)
{
    sm_ps_decl d;
    if (sm_ps_param_decl(ps, &d))
        return -1;
    int id;
    char *name = sm_ps_text(ps, d.name);
    sm_err e = sm_program_add_param(ps->p, name, d.t, &d.g, &d.spec, &id, ps->err, ps->errlen);
    if (e)
        return sm_ps_fail_at(ps, d.name, e);
    sm_item it = {.kind = SM_IT_VALUE, .i = id, .at = d.name};
    return sm_ps_bind(ps, name, &it);
}

static int sm_ps_block(sm_parser *ps, int top, int *returned);

/* Finds the token index just past the block starting at INDENT index i. */
static int sm_ps_block_end(sm_parser *ps, int i)
{
    int depth = 0;
    for (; i < ps->nt; i++) {
        if (ps->t[i].kind == SM_TOK_INDENT)
            depth++;
        else if (ps->t[i].kind == SM_TOK_DEDENT && --depth == 0)
            return i + 1;
        else if (ps->t[i].kind == SM_TOK_EOF)
            return i;
    }
    return i;
}

static int sm_ps_for(sm_parser *ps)
{
    const sm_tok *var = sm_ps_peek(ps);
    if (sm_ps_expect_kind(ps, SM_TOK_NAME, "a loop variable", "after 'for'") ||
        sm_ps_expect(ps, "in", "after the loop variable") ||
        sm_ps_expect(ps, "range", "('for k in range(N):' is the only loop form)"))
        return -1;
    int64_t start, stop, step;
    if (sm_ps_range(ps, &start, &stop, &step) || sm_ps_expect(ps, ":", "after range(...)") ||
        sm_ps_expect_kind(ps, SM_TOK_NEWLINE, "end of line", "after ':'"))
        return -1;
    if (sm_ps_peek(ps)->kind != SM_TOK_INDENT)
        return sm_ps_expect_kind(ps, SM_TOK_INDENT, "an indented loop body", "after 'for'");
    int body = ps->pos, end = sm_ps_block_end(ps, ps->pos);
    char *name = sm_ps_text(ps, var);
    int64_t iters = 0;
    for (int64_t k = start; step > 0 ? k < stop : k > stop; k += step) {
        if (++iters > 100000)
            return sm_ps_fail(ps, var, SM_EINVAL, "loop unrolls to more than 100000 iterations");
        sm_item it = {.kind = SM_IT_INT, .i = k, .at = var};
        if (sm_ps_bind(ps, name, &it))
            return -1;
        ps->pos = body + 1;
        int returned = 0;
        if (sm_ps_block(ps, 0, &returned))
            return -1;
    }
    ps->pos = end;
    return 0;
}

/* The names a block assigns (`a, b = ...` at the start of any of its
 * statements, nested blocks too) that are bound before it, each once, in
 * order of first assignment: what a loop over the block carries. Returns
 * their count (names: malloc'd, the caller frees it), or -1 out of memory. */
static int sm_ps_assigned(sm_parser *ps, int from, int to, const sm_tok ***out)
{
    int n = 0, cap = 0;
    const sm_tok **names = NULL;
    for (int i = from; i < to; i++) {
        const sm_tok *t = &ps->t[i];
        if (t->kind != SM_TOK_NEWLINE && t->kind != SM_TOK_INDENT && t->kind != SM_TOK_DEDENT)
            continue;
        int j = i + 1, k0 = j;
        while (j < to && ps->t[j].kind == SM_TOK_NAME && j + 1 < to &&
               sm_tok_is(&ps->t[j + 1], ","))
            j += 2;
        if (j + 1 >= to || ps->t[j].kind != SM_TOK_NAME || !sm_tok_is(&ps->t[j + 1], "="))
            continue;
        for (int q = k0; q <= j; q += 2) {
            const sm_tok *nt = &ps->t[q];
            int seen = !sm_ps_lookup(ps, nt->text, nt->len); /* first bound in the body */
            for (int r = 0; r < n && !seen; r++)
                seen = names[r]->len == nt->len &&
                       memcmp(names[r]->text, nt->text, (size_t)nt->len) == 0;
            if (seen)
                continue;
            if (n == cap) {
                const sm_tok **g = realloc(names, sizeof *g * (size_t)(cap = cap ? 2 * cap : 16));
                if (!g) {
                    free(names);
                    return -1;
                }
                names = g;
            }
            names[n++] = nt;
        }
    }
    *out = names;
    return n;
}

/* `while COND:` with an indented body (after `while`). The names the body
 * rebinds that are bound before the loop are what it carries (each a
 * while_carry of its value before the loop, a while_next of its value at
 * the end of the body, a while_end after); a name first bound inside the
 * body is not bound after it. COND is tested before each turn: when it is
 * one of the carried names the loop tests that carry, otherwise it is
 * computed before the loop and again at the end of the body, as one more
 * carry. */
static int sm_ps_while_carried(sm_parser *ps, const sm_tok *wt, int cond, int i, int body, int end,
                               const sm_tok **names, int na, const sm_tok **cn, int *ids,
                               sm_item *carry, int *next);

static int sm_ps_while(sm_parser *ps, const sm_tok *wt)
{
    int cond = ps->pos, depth = 0, i = ps->pos;
    for (; i < ps->nt && ps->t[i].kind != SM_TOK_EOF; i++) { /* the ':' ending the header */
        const sm_tok *t = &ps->t[i];
        if (t->kind == SM_TOK_NEWLINE)
            break;
        if (sm_tok_is(t, "(") || sm_tok_is(t, "[") || sm_tok_is(t, "{"))
            depth++;
        else if (sm_tok_is(t, ")") || sm_tok_is(t, "]") || sm_tok_is(t, "}"))
            depth--;
        else if (depth == 0 && sm_tok_is(t, ":") && i + 1 < ps->nt &&
                 ps->t[i + 1].kind == SM_TOK_NEWLINE)
            break;
    }
    if (i == cond || i >= ps->nt || !sm_tok_is(&ps->t[i], ":"))
        return sm_ps_fail(ps, wt, SM_EFORMAT, "expected 'while CONDITION:' and an indented body");
    ps->pos = i + 1;
    if (sm_ps_expect_kind(ps, SM_TOK_NEWLINE, "end of line", "after ':'"))
        return -1;
    if (sm_ps_peek(ps)->kind != SM_TOK_INDENT)
        return sm_ps_expect_kind(ps, SM_TOK_INDENT, "an indented loop body", "after 'while'");
    int body = ps->pos, end = sm_ps_block_end(ps, ps->pos);
    const sm_tok **names = NULL;
    int na = sm_ps_assigned(ps, body, end, &names);
    if (na < 0)
        return sm_ps_fail(ps, wt, SM_ENOMEM, "out of memory");
    /* per carry (and one more for the condition): its name, first value,
     * carry value and next value */
    const sm_tok **cn = malloc(sizeof *cn * (size_t)(na + 1));
    int *ids = malloc(sizeof *ids * (size_t)(na + 1)),
        *next = malloc(sizeof *next * (size_t)(na + 1));
    sm_item *carry = malloc(sizeof *carry * (size_t)(na + 1));
    int rc = !cn || !ids || !next || !carry
                 ? sm_ps_fail(ps, wt, SM_ENOMEM, "out of memory")
                 : sm_ps_while_carried(ps, wt, cond, i, body, end, names, na, cn, ids, carry, next);
    free(names);
    free(cn);
    free(ids);
    free(next);
    free(carry);
    return rc;
}

/* sm_ps_while once the header is read and the body's assigned names known. */
static int sm_ps_while_carried(sm_parser *ps, const sm_tok *wt, int cond, int i, int body, int end,
                               const sm_tok **names, int na, const sm_tok **cn, int *ids,
                               sm_item *carry, int *next)
{
    int nc = 0, test = -1;
    for (int k = 0; k < na; k++) {
        sm_item *it = sm_ps_lookup(ps, names[k]->text, names[k]->len);
        if (it->kind != SM_IT_VALUE && it->kind != SM_IT_INT && it->kind != SM_IT_FLOAT &&
            it->kind != SM_IT_BOOL)
            return sm_ps_fail(ps, names[k], SM_EINVAL,
                              "'%.*s' is rebound in the while loop's body, but before the loop "
                              "it is not an array or a number: a loop carries arrays",
                              names[k]->len, names[k]->text);
        if (i == cond + 1 && ps->t[cond].kind == SM_TOK_NAME && ps->t[cond].len == names[k]->len &&
            memcmp(ps->t[cond].text, names[k]->text, (size_t)names[k]->len) == 0)
            test = nc;
        if (sm_ps_value(ps, it, &ids[nc]))
            return -1;
        sm_item v = {.kind = SM_IT_VALUE, .i = ids[nc], .at = names[k]}; /* a number: an array */
        if (sm_ps_bind(ps, sm_ps_text(ps, names[k]), &v))
            return -1;
        cn[nc++] = names[k];
    }
    if (nc == 0)
        return sm_ps_fail(ps, wt, SM_EINVAL,
                          "the while loop's body rebinds no name bound before the loop, so its "
                          "condition can never change (a loop carries the names its body "
                          "assigns)");
    if (test < 0) { /* the condition as one more carry, computed before the loop */
        sm_item c;
        ps->pos = cond;
        if (sm_ps_expr(ps, &c))
            return -1;
        if (c.kind != SM_IT_VALUE)
            return sm_ps_fail(ps, &ps->t[cond], SM_EINVAL,
                              "the condition of a while loop must be an array computed from "
                              "what the loop carries (a static one would loop forever or never)");
        ids[nc] = (int)c.i;
        cn[nc] = NULL;
        test = nc++;
    }
    for (int k = 0; k < nc; k++) {
        if (sm_ps_emit(ps, SM_OP_WHILE_CARRY, &ids[k], 1, NULL, wt, &carry[k]))
            return -1;
        if (cn[k] && sm_ps_bind(ps, sm_ps_text(ps, cn[k]), &carry[k]))
            return -1;
        if (cn[k])
            sm_program_name_value(ps->p, (int)carry[k].i, sm_ps_text(ps, cn[k]));
    }
    int cid = (int)carry[test].i, nsyms = ps->nsyms;
    sm_item ti;
    if (sm_ps_emit(ps, SM_OP_WHILE_TEST, &cid, 1, NULL, &ps->t[cond], &ti))
        return -1;
    ps->pos = body + 1;
    int returned = 0;
    if (sm_ps_block(ps, 0, &returned))
        return -1;
    for (int k = 0; k < nc; k++) {
        sm_item v;
        if (cn[k]) {
            v = *sm_ps_lookup(ps, cn[k]->text, cn[k]->len);
        } else {
            ps->pos = cond; /* the condition again, on the carries' next values */
            if (sm_ps_expr(ps, &v))
                return -1;
        }
        if (sm_ps_value(ps, &v, &next[k]))
            return -1;
    }
    for (int k = 0; k < nc; k++) {
        int ops[2] = {(int)carry[k].i, next[k]};
        sm_item r;
        if (sm_ps_emit(ps, SM_OP_WHILE_NEXT, ops, 2, NULL, cn[k] ? cn[k] : &ps->t[cond], &r))
            return -1;
    }
    sm_ps_unbind_to(ps, nsyms); /* the names first bound in the body end with it */
    for (int k = 0; k < nc; k++) {
        sm_item r;
        int c = (int)carry[k].i;
        if (sm_ps_emit(ps, SM_OP_WHILE_END, &c, 1, NULL, wt, &r))
            return -1;
        if (cn[k] && sm_ps_bind(ps, sm_ps_text(ps, cn[k]), &r))
            return -1;
    }
    ps->pos = end;
    return 0;
}

/* name[, name...] = expr[, expr...] */
static int sm_ps_assign(sm_parser *ps)
{
    const sm_tok **names = NULL;
    int n = 0, cap = 0;
    do {
        if (!(names = sm_ps_room(ps, (void *)names, sizeof *names, n, &cap)))
            return sm_ps_fail(ps, sm_ps_peek(ps), SM_ENOMEM, "out of memory");
        names[n] = sm_ps_peek(ps);
        if (sm_ps_expect_kind(ps, SM_TOK_NAME, "a name", "to assign to"))
            return -1;
        n++;
    } while (sm_ps_accept(ps, ","));
    const sm_tok *eq = sm_ps_peek(ps);
    if (sm_ps_expect(ps, "=", "after the assigned name"))
        return -1;
    sm_item v;
    if (sm_ps_expr_list(ps, &v))
        return -1;
    if (n > 1 && (v.kind != SM_IT_TUPLE || v.n != n))
        return sm_ps_fail(ps, eq, SM_EINVAL, "cannot unpack into %d names: the right side is %s", n,
                          v.kind == SM_IT_TUPLE ? "a tuple of another length" : "one value");
    for (int k = 0; k < n; k++) {
        sm_item *it = n > 1 ? &v.elems[k] : &v;
        char *name = sm_ps_text(ps, names[k]);
        if (it->kind == SM_IT_VALUE && !ps->p->values[it->i].name)
            sm_program_name_value(ps->p, (int)it->i, name);
        if (sm_ps_bind(ps, name, it))
            return -1;
    }
    return sm_ps_expect_kind(ps, SM_TOK_NEWLINE, "end of line", "after the expression");
}

static int sm_ps_return(sm_parser *ps, const sm_tok *rt)
{
    sm_item v;
    if (sm_ps_expr_list(ps, &v) ||
        sm_ps_expect_kind(ps, SM_TOK_NEWLINE, "end of line", "after the returned values"))
        return -1;
    if (ps->calls > 0) { /* an inlined call: its value */
        ps->ret = v;
        return 0;
    }
    int n = v.kind == SM_IT_TUPLE ? v.n : 1;
    int *ids = sm_arena_alloc(ps->scratch, sizeof(int) * (size_t)n);
    if (!ids)
        return sm_ps_fail(ps, rt, SM_ENOMEM, "out of memory");
    for (int k = 0; k < n; k++)
        if (sm_ps_value(ps, v.kind == SM_IT_TUPLE ? &v.elems[k] : &v, &ids[k]))
            return -1;
    if (ps->p->kind == SM_PROG_JIT && !ps->p->has_out_shardings) { /* the types' shardings */
        ps->p->ret_line = rt->line;
        ps->p->ret_col = rt->col;
        sm_err e = sm_program_set_returns(ps->p, ids, NULL, n, ps->err, ps->errlen);
        return e ? sm_ps_fail_at(ps, rt, e) : 0;
    }
    if (n != ps->p->nreturns)
        return sm_ps_fail(ps, rt, SM_EINVAL,
                          "return gives %d value%s but the header declares %d out_spec%s", n,
                          n == 1 ? "" : "s", ps->p->nreturns, ps->p->nreturns == 1 ? "" : "s");
    ps->p->ret_line = rt->line;
    ps->p->ret_col = rt->col;
    sm_err e = sm_program_set_returns(ps->p, ids, ps->p->out_specs, n, ps->err, ps->errlen);
    return e ? sm_ps_fail_at(ps, rt, e) : 0;
}

/* Statements up to the block's DEDENT (or EOF at top level). */
static int sm_ps_block(sm_parser *ps, int top, int *returned)
{
    for (;;) {
        const sm_tok *t = sm_ps_peek(ps);
        if (t->kind == SM_TOK_DEDENT) {
            ps->pos++;
            break;
        }
        if (t->kind == SM_TOK_EOF)
            break;
        if (*returned)
            return sm_ps_fail(ps, t, SM_EFORMAT, "statement after 'return'");
        if (t->kind == SM_TOK_INDENT)
            return sm_ps_fail(ps, t, SM_EFORMAT, "unexpected indentation");
        if (sm_ps_accept(ps, "for")) {
            if (sm_ps_for(ps))
                return -1;
        } else if (sm_ps_accept(ps, "while")) {
            if (sm_ps_while(ps, t))
                return -1;
        } else if (sm_ps_accept(ps, "return")) {
            if (!top)
                return sm_ps_fail(ps, t, SM_EFORMAT, "'return' inside a loop body");
            if (sm_ps_return(ps, t))
                return -1;
            *returned = 1;
        } else if (t->kind == SM_TOK_NAME) {
            if (sm_ps_assign(ps))
                return -1;
        } else {
            char d[64];
            return sm_ps_fail(ps, t, SM_EFORMAT,
                              "expected a statement ('name = ...', 'for', 'while' or 'return'), "
                              "got %s",
                              sm_ps_tok_desc(t, d, sizeof d));
        }
    }
    if (top && !*returned)
        return sm_ps_fail(ps, sm_ps_peek(ps), SM_EFORMAT, "the body must end with 'return'");
    return 0;
}

/* `-> P(...)` or `-> (P(...), ...)`: up to max specs into specs. */
/* The out_specs (one, or a parenthesized list of any length) into *specs,
 * allocated in the scratch arena. */
static int sm_ps_out_specs(sm_parser *ps, sm_pspec **specs, int *n)
{
    int cap = 0;
    *n = 0;
    if (!(*specs = sm_ps_room(ps, NULL, sizeof **specs, 0, &cap)))
        return sm_ps_fail(ps, sm_ps_peek(ps), SM_ENOMEM, "out of memory");
    if (sm_ps_accept(ps, "(")) {
        while (!sm_ps_accept(ps, ")")) {
            if (!(*specs = sm_ps_room(ps, *specs, sizeof **specs, *n, &cap)))
                return sm_ps_fail(ps, sm_ps_peek(ps), SM_ENOMEM, "out of memory");
            if (sm_ps_pspec(ps, &(*specs)[(*n)++]))
                return -1;
            if (!sm_tok_is(sm_ps_peek(ps), ")") && sm_ps_expect(ps, ",", "between out_specs"))
                return -1;
        }
        return 0;
    }
    if (sm_ps_pspec(ps, &(*specs)[0]))
        return -1;
    *n = 1;
    return 0;
}

/* A shard_map header's `, axis_names={'i', ...}` after its out_specs (a
 * set, tuple or list of axis names, or one name): *mask gets those mesh
 * axes, 0 when empty or every axis (a shard_map Manual over the whole
 * mesh). The position is past `axis_names`. */
static int sm_ps_axis_names(sm_parser *ps, uint32_t *mask)
{
    *mask = 0;
    if (sm_ps_expect(ps, "=", "after axis_names"))
        return -1;
    const char *close = NULL;
    int frozen = sm_tok_is(sm_ps_peek(ps), "frozenset") && sm_tok_is(&ps->t[ps->pos + 1], "(");
    if (frozen) /* frozenset({'i'}), as JAX's tests write it */
        ps->pos += 2;
    if (sm_ps_accept(ps, "{"))
        close = "}";
    else if (sm_ps_accept(ps, "("))
        close = ")";
    else if (sm_ps_accept(ps, "["))
        close = "]";
    while (1) {
        const sm_tok *a = sm_ps_peek(ps);
        if (close && sm_ps_accept(ps, close))
            break;
        if (a->kind != SM_TOK_STRING)
            return sm_ps_fail(ps, a, SM_EFORMAT,
                              "expected a quoted mesh axis name in axis_names= (a set of them: "
                              "axis_names={'i', 'j'})");
        char name[SM_AXIS_NAME_MAX];
        snprintf(name, sizeof name, "%.*s", a->len, a->text);
        int ax = a->len < SM_AXIS_NAME_MAX ? sm_mesh_axis(&ps->p->mesh, name) : -1;
        if (ax < 0)
            return sm_ps_fail(ps, a, SM_EINVAL,
                              "axis_names: unknown axis name '%s': the mesh has no such axis",
                              name);
        *mask |= 1u << ax;
        ps->pos++;
        if (!close)
            break;
        if (!sm_tok_is(sm_ps_peek(ps), close) && sm_ps_expect(ps, ",", "between axis names"))
            return -1;
    }
    if (frozen && sm_ps_expect(ps, ")", "after frozenset({...}"))
        return -1;
    uint32_t all = sm_ir_all_axes(ps->p);
    if (*mask == all)
        *mask = 0;
    return 0;
}

/* A shard_map header's options after its out_specs, in any order, each
 * once: `, axis_names=...` (sm_ps_axis_names; *mask, 0 when absent) and
 * `, check_vma=False` (or True; *unchecked, 0 when absent). */
static int sm_ps_header_opts(sm_parser *ps, uint32_t *mask, int *unchecked)
{
    int seen_axes = 0, seen_vma = 0;
    *mask = 0;
    *unchecked = 0;
    while (sm_tok_is(sm_ps_peek(ps), ",")) {
        const sm_tok *o = &ps->t[ps->pos + 1];
        if (sm_tok_is(o, "axis_names") && !seen_axes) {
            ps->pos += 2;
            seen_axes = 1;
            if (sm_ps_axis_names(ps, mask))
                return -1;
        } else if (sm_tok_is(o, "check_vma") && !seen_vma) {
            ps->pos += 2;
            seen_vma = 1;
            if (sm_ps_expect(ps, "=", "after check_vma"))
                return -1;
            const sm_tok *v = sm_ps_peek(ps);
            if (!sm_tok_is(v, "True") && !sm_tok_is(v, "False"))
                return sm_ps_fail(ps, v, SM_EFORMAT, "check_vma= takes True or False");
            *unchecked = sm_tok_is(v, "False");
            ps->pos++;
        } else {
            return sm_ps_fail(ps, o, SM_EFORMAT,
                              "expected axis_names= or check_vma= after a shard_map's out_specs "
                              "(each once)");
        }
    }
    return 0;
}

/* The axis_names= of shard_map function f's header (sm_ps_axis_names),
 * read ahead of its parameters; the position is left as it was. */
static int sm_ps_fn_axis_names(sm_parser *ps, const sm_fn *f, uint32_t *mask)
{
    int saved = ps->pos, depth = 0, rc = 0, unchecked;
    *mask = 0;
    ps->pos = f->hdr + 1;
    do { /* past the parameter list */
        const sm_tok *t = sm_ps_next(ps);
        if (t->kind == SM_TOK_EOF || t->kind == SM_TOK_INDENT)
            break;
        depth += sm_tok_is(t, "(") || sm_tok_is(t, "[") || sm_tok_is(t, "{");
        depth -= sm_tok_is(t, ")") || sm_tok_is(t, "]") || sm_tok_is(t, "}");
    } while (depth > 0);
    sm_pspec *specs;
    int n;
    if (sm_ps_accept(ps, "->"))
        rc = sm_ps_out_specs(ps, &specs, &n) || sm_ps_header_opts(ps, mask, &unchecked);
    ps->pos = saved;
    return rc ? -1 : 0;
}

/* Records every top-level function: `def`, `shard_map` or `jit` NAME ...:
 * with an indented body. */
static int sm_ps_scan_fns(sm_parser *ps)
{
    int i = ps->pos;
    while (ps->t[i].kind != SM_TOK_EOF) {
        const sm_tok *t = &ps->t[i];
        sm_fn_kind k;
        if (t->kind == SM_TOK_NEWLINE) {
            i++;
            continue;
        }
        if (sm_tok_is(t, "def"))
            k = SM_FN_DEF;
        else if (sm_tok_is(t, "shard_map"))
            k = SM_FN_SHARD_MAP;
        else if (sm_tok_is(t, "jit"))
            k = SM_FN_JIT;
        else
            return sm_ps_fail(
                ps, t, SM_EFORMAT,
                "expected 'shard_map NAME(PARAMS) -> OUT_SPECS:', 'jit NAME(PARAMS):' "
                "or 'def NAME(PARAMS):'");
        const sm_tok *nt = &ps->t[i + 1];
        if (nt->kind != SM_TOK_NAME) {
            ps->pos = i + 1;
            return sm_ps_expect_kind(ps, SM_TOK_NAME, "the function name", "after its kind");
        }
        int j = i + 2;
        while (ps->t[j].kind != SM_TOK_INDENT && ps->t[j].kind != SM_TOK_EOF &&
               ps->t[j].kind != SM_TOK_DEDENT)
            j++;
        if (ps->nfns == SM_PS_MAX_FNS)
            return sm_ps_fail(ps, t, SM_EINVAL, "more than %d functions in one file",
                              SM_PS_MAX_FNS);
        char *name = sm_ps_text(ps, nt);
        if (sm_ps_find_fn(ps, name))
            return sm_ps_fail(ps, nt, SM_EINVAL, "function '%s' is defined twice", name);
        ps->fns[ps->nfns++] = (sm_fn){.kind = k, .name = name, .hdr = i + 1, .body = j};
        if (ps->t[j].kind != SM_TOK_INDENT)
            break; /* the header is malformed: parsing it will say how */
        i = sm_ps_block_end(ps, j);
    }
    return 0;
}

/* The entry's header after its name, then its body. */
static int sm_ps_entry(sm_parser *ps, const sm_fn *f, const sm_mesh *mesh, int has_devices)
{
    ps->pos = f->hdr;
    ps->active[0] = f;
    ps->nactive = 1;
    const sm_tok *nt = sm_ps_next(ps);
    sm_err e = sm_program_create(mesh, f->name, &ps->p, ps->err, ps->errlen);
    if (e)
        return sm_ps_fail_at(ps, nt, e);
    ps->p->has_devices = has_devices;
    ps->p->filename = sm_arena_strdup(ps->p->arena, ps->file);
    if (f->kind == SM_FN_JIT && (e = sm_program_set_jit(ps->p, ps->mesh_auto, ps->err, ps->errlen)))
        return sm_ps_fail_at(ps, nt, e);
    if (sm_ps_expect(ps, "(", "after the program name"))
        return -1;
    while (!sm_ps_accept(ps, ")")) {
        if (sm_ps_param(ps))
            return -1;
        if (!sm_tok_is(sm_ps_peek(ps), ")") && sm_ps_expect(ps, ",", "between parameters"))
            return -1;
    }
    sm_pspec *specs = NULL;
    int n = 0;
    if (f->kind == SM_FN_JIT) {
        if (sm_ps_accept(ps, "->")) {
            if (sm_ps_out_specs(ps, &specs, &n))
                return -1;
            ps->p->has_out_shardings = 1;
        }
    } else if (sm_ps_expect(ps, "->", "before the out_specs") || sm_ps_out_specs(ps, &specs, &n) ||
               sm_ps_header_opts(ps, &ps->p->manual_axes, &ps->p->unchecked)) {
        return -1;
    }
    for (int i = 0; i < ps->p->nparams && ps->p->manual_axes; i++) /* their in_specs */
        if ((e = sm_ir_spec_manual(ps->p, ps->p->manual_axes, &ps->p->params[i].spec, "in_specs", i,
                                   ps->err, ps->errlen)))
            return sm_ps_fail_at(ps, nt, e);
    ps->p->out_specs = sm_arena_alloc(ps->p->arena, sizeof(sm_pspec) * (size_t)(n ? n : 1));
    if (!ps->p->out_specs)
        return sm_ps_fail(ps, nt, SM_ENOMEM, "out of memory");
    if (n)
        memcpy(ps->p->out_specs, specs, sizeof(sm_pspec) * (size_t)n);
    ps->p->nreturns = n; /* the declared count until `return` sets the values */
    if (sm_ps_expect(ps, ":", "after the out_specs") ||
        sm_ps_expect_kind(ps, SM_TOK_NEWLINE, "end of line", "after ':'"))
        return -1;
    if (sm_ps_peek(ps)->kind != SM_TOK_INDENT)
        return sm_ps_expect_kind(ps, SM_TOK_INDENT, "an indented body", "after the header");
    ps->pos++;
    int returned = 0;
    return sm_ps_block(ps, 1, &returned);
}

static int sm_ps_file(sm_parser *ps)
{
    sm_mesh mesh;
    int has_devices = 0;
    if (sm_ps_mesh(ps, &mesh, &has_devices) || sm_ps_scan_fns(ps))
        return -1;
    const sm_fn *f = NULL;
    if (ps->entry) {
        f = sm_ps_find_fn(ps, ps->entry);
        if (!f || f->kind == SM_FN_DEF)
            return sm_ps_fail(ps, sm_ps_peek(ps), SM_EINVAL,
                              "the file has no shard_map or jit function '%s' to run", ps->entry);
    } else {
        for (int k = 0; k < ps->nfns; k++)
            if (ps->fns[k].kind != SM_FN_DEF)
                f = &ps->fns[k];
        if (!f)
            return sm_ps_fail(ps, sm_ps_peek(ps), SM_EFORMAT,
                              "expected 'shard_map NAME(PARAMS) -> OUT_SPECS:' or 'jit "
                              "NAME(PARAMS):' (the file has no function to run)");
    }
    return sm_ps_entry(ps, f, &mesh, has_devices);
}

/* Binds one parameter of f's header to an argument at the current token;
 * for shard_map functions, the argument enters the per-device region. */
static int sm_ps_call_param(sm_parser *ps, const sm_fn *f, const sm_tok *at, const sm_item *arg,
                            sm_item *bound)
{
    if (f->kind == SM_FN_DEF) {
        const sm_tok *nt = sm_ps_peek(ps);
        if (sm_ps_expect_kind(ps, SM_TOK_NAME, "a parameter name", "in the parameter list"))
            return -1;
        if (sm_ps_accept(ps, ":")) /* an annotation: skipped */
            while (!sm_tok_is(sm_ps_peek(ps), ",") && !sm_tok_is(sm_ps_peek(ps), ")") &&
                   sm_ps_peek(ps)->kind != SM_TOK_EOF)
                ps->pos++;
        *bound = *arg;
        bound->at = arg->at ? arg->at : nt;
        return 0;
    }
    sm_ps_decl d;
    if (sm_ps_param_decl(ps, &d))
        return -1;
    int id;
    if (sm_ps_value(ps, arg, &id))
        return -1;
    const sm_ir_value *v = &ps->p->values[id];
    char want[300], got[300];
    if (v->dtype != d.t || !sm_shape_equal(&v->shape, &d.g)) {
        sm_ir_value w = {.dtype = d.t, .shape = d.g};
        return sm_ps_fail(ps, arg->at ? arg->at : at, SM_EINVAL,
                          "%s: argument '%.*s' is %s, but the function declares %s", f->name,
                          d.name->len, d.name->text,
                          sm_program_value_type(ps->p, id, got, sizeof got),
                          sm_ir_type_str(&w, want, sizeof want));
    }
    sm_ir_attrs a = {.sharding = &d.spec};
    sm_op_kind k = f->kind == SM_FN_SHARD_MAP ? SM_OP_SHARD_MAP_IN : SM_OP_RESHARD;
    int saved = ps->manual;
    uint32_t saved_axes = ps->manual_axes, saved_outer = ps->outer_axes;
    ps->manual = f->kind == SM_FN_SHARD_MAP && ps->edge_outer; /* nested: from a block */
    if (ps->manual) {
        ps->manual_axes = ps->edge_inner;
        ps->outer_axes = ps->edge_outer;
    }
    int rc = sm_ps_emit(ps, k, &id, 1, &a, arg->at ? arg->at : at, bound);
    ps->manual = saved;
    ps->manual_axes = saved_axes;
    ps->outer_axes = saved_outer;
    if (!rc && v->name)
        sm_program_name_value(ps->p, (int)bound->i, v->name);
    return rc;
}

int sm_ps_call_fn(sm_parser *ps, const sm_fn *f, const sm_tok *at, const sm_arg *args, int nargs,
                  sm_item *out)
{
    for (int a = 0; a < ps->nactive; a++)
        if (ps->active[a] == f)
            return sm_ps_fail(ps, at, SM_EINVAL, "'%s' calls itself: programs have no recursion",
                              f->name);
    if (ps->calls >= SM_PS_MAX_CALLS)
        return sm_ps_fail(ps, at, SM_EINVAL, "calls nest deeper than %d", SM_PS_MAX_CALLS);
    if (f->kind != SM_FN_DEF && ps->p->kind != SM_PROG_JIT)
        return sm_ps_fail(ps, at, SM_EINVAL,
                          "'%s' is a %s function: only a jit body calls shard_map and jit "
                          "functions",
                          f->name, f->kind == SM_FN_JIT ? "jit" : "shard_map");
    if (f->kind == SM_FN_SHARD_MAP && ps->manual && !ps->manual_axes)
        return sm_ps_fail(ps, at, SM_EINVAL,
                          "a shard_map function Manual over every mesh axis cannot call "
                          "another one (no axis is left for it)");
    uint32_t callee_axes = 0, saved_axes = ps->manual_axes;
    uint32_t saved_eo = ps->edge_outer, saved_ei = ps->edge_inner, eo = 0, ei = 0;
    if (f->kind == SM_FN_SHARD_MAP && sm_ps_fn_axis_names(ps, f, &callee_axes))
        return -1;
    if (f->kind == SM_FN_SHARD_MAP && ps->manual) { /* nested in a partial-manual body */
        uint32_t all = sm_ir_all_axes(ps->p);
        uint32_t want = callee_axes ? callee_axes : all & ~ps->manual_axes;
        if (want & ps->manual_axes) {
            char a[300], b[300];
            return sm_ps_fail(ps, at, SM_EINVAL,
                              "%s: its axis_names %s name axes already Manual in the shard_map "
                              "around it (axis_names=%s)",
                              f->name, sm_ir_axes_set_str(ps->p, want, a, sizeof a),
                              sm_ir_axes_set_str(ps->p, ps->manual_axes, b, sizeof b));
        }
        eo = ps->manual_axes;
        ei = want | eo;
        callee_axes = ei == all ? 0 : ei;
    }
    int saved_pos = ps->pos, saved_n = ps->nsyms, saved_manual = ps->manual;
    sm_sym *saved = malloc(sizeof *saved * (size_t)(saved_n ? saved_n : 1));
    if (!saved)
        return sm_ps_fail(ps, at, SM_ENOMEM, "out of memory");
    memcpy(saved, ps->syms, sizeof *saved * (size_t)saved_n);
    int rc = -1, na = 0;
    if (f->kind == SM_FN_SHARD_MAP) {
        ps->manual_axes = callee_axes; /* its shard_map_in, body and shard_map_out */
        ps->edge_outer = eo;
        ps->edge_inner = ei;
    }
    ps->pos = f->hdr + 1;
    if (sm_ps_expect(ps, "(", "after the function name"))
        goto done;
    while (!sm_ps_accept(ps, ")")) {
        if (na >= nargs || args[na].kw) {
            rc = sm_ps_fail(ps, at, SM_EINVAL, "%s: missing argument %d (arguments are positional)",
                            f->name, na + 1);
            goto done;
        }
        sm_item b;
        const sm_tok *pt = sm_ps_peek(ps);
        if (sm_ps_call_param(ps, f, at, &args[na].v, &b) || sm_ps_bind(ps, sm_ps_text(ps, pt), &b))
            goto done;
        na++;
        if (!sm_tok_is(sm_ps_peek(ps), ")") && sm_ps_expect(ps, ",", "between parameters"))
            goto done;
    }
    if (na != nargs) {
        rc = sm_ps_fail(ps, at, SM_EINVAL, "%s takes %d argument%s, got %d", f->name, na,
                        na == 1 ? "" : "s", nargs);
        goto done;
    }
    sm_pspec *specs = NULL;
    int nout = 0;
    uint32_t again;
    int unchecked = 0;
    if (sm_ps_accept(ps, "->") &&
        (sm_ps_out_specs(ps, &specs, &nout) || sm_ps_header_opts(ps, &again, &unchecked)))
        goto done;
    ps->pos = f->body + 1;
    ps->calls++;
    ps->active[ps->nactive++] = f;
    if (f->kind == SM_FN_SHARD_MAP)
        ps->manual = 1;
    int returned = 0;
    ps->ret = (sm_item){.kind = SM_IT_NONE};
    int brc = sm_ps_block(ps, 1, &returned);
    ps->nactive--;
    ps->calls--;
    ps->manual = saved_manual;
    if (brc)
        goto done;
    sm_item r = ps->ret;
    if (f->kind != SM_FN_DEF && nout) {
        int n = r.kind == SM_IT_TUPLE ? r.n : 1;
        if (n != nout) {
            rc = sm_ps_fail(ps, at, SM_EINVAL, "%s returns %d value%s but declares %d out_spec%s",
                            f->name, n, n == 1 ? "" : "s", nout, nout == 1 ? "" : "s");
            goto done;
        }
        sm_item *el = r.kind == SM_IT_TUPLE ? r.elems : &r;
        if (eo) { /* nested: back into the block of the shard_map around it */
            ps->manual_axes = ei;
            ps->outer_axes = eo;
        }
        for (int k = 0; k < n; k++) {
            int id;
            sm_ir_attrs a = {.sharding = &specs[k],
                             .unchecked = f->kind == SM_FN_SHARD_MAP && unchecked};
            if (sm_ps_value(ps, &el[k], &id) ||
                sm_ps_emit(ps, f->kind == SM_FN_SHARD_MAP ? SM_OP_SHARD_MAP_OUT : SM_OP_RESHARD,
                           &id, 1, &a, at, &el[k])) {
                ps->outer_axes = 0;
                goto done;
            }
        }
        ps->outer_axes = 0;
    }
    *out = r;
    rc = 0;
done:
    if (ps->nsyms >= saved_n) { /* the caller's names as they were */
        sm_ps_unbind_to(ps, saved_n);
        memcpy(ps->syms, saved, sizeof *saved * (size_t)saved_n);
    }
    free(saved);
    ps->pos = saved_pos;
    ps->manual = saved_manual;
    ps->manual_axes = saved_axes;
    ps->edge_outer = saved_eo;
    ps->edge_inner = saved_ei;
    return rc;
}

sm_err sm_program_parse(const char *text, const char *filename, sm_program **out, char *err,
                        size_t errlen)
{
    return sm_program_parse_entry(text, filename, NULL, out, err, errlen);
}

sm_err sm_program_parse_entry(const char *text, const char *filename, const char *entry,
                              sm_program **out, char *err, size_t errlen)
{
    sm_parser ps = {.file = filename ? filename : "<text>", .err = err, .errlen = errlen};
    ps.entry = entry;
    sm_tok *toks = NULL;
    int nt = 0;
    *out = NULL;
    sm_err e = sm_ir_lex(text, ps.file, &toks, &nt, err, errlen);
    if (e)
        return e;
    ps.t = toks;
    ps.nt = nt;
    ps.scratch = sm_arena_create(0);
    if (!ps.scratch) {
        free(toks);
        return sm_fail(err, errlen, SM_ENOMEM, "out of memory parsing %s", ps.file);
    }
    if (sm_ps_file(&ps)) {
        e = ps.code ? ps.code : SM_EINTERNAL;
        sm_program_free(ps.p);
        ps.p = NULL;
    }
    free(toks);
    free(ps.syms);
    free(ps.heads);
    sm_arena_free(ps.scratch);
    *out = ps.p;
    return e;
}
