/* sm_pspec: PartitionSpec parsing, formatting and checks (see sm_pspec.h). */
#include "sm_pspec.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

/* Parser state over the spec text; col() is 1-based for messages. */
typedef struct {
    const char *text;
    const char *p;
    char *err;
    size_t errlen;
} sm_pspec_lexer;

static int sm_pspec_col(const sm_pspec_lexer *lx)
{
    return (int)(lx->p - lx->text) + 1;
}

static void sm_pspec_skip_ws(sm_pspec_lexer *lx)
{
    while (*lx->p == ' ' || *lx->p == '\t' || *lx->p == '\n' || *lx->p == '\r')
        lx->p++;
}

static sm_err sm_pspec_expected(sm_pspec_lexer *lx, const char *what)
{
    if (!*lx->p)
        return sm_fail(lx->err, lx->errlen, SM_EINVAL,
                       "partition spec \"%s\": expected %s at column %d, found the end", lx->text,
                       what, sm_pspec_col(lx));
    return sm_fail(lx->err, lx->errlen, SM_EINVAL,
                   "partition spec \"%s\": expected %s at column %d, found '%c'", lx->text, what,
                   sm_pspec_col(lx), *lx->p);
}

/* A quoted axis name 'x' or "x" into out. */
static sm_err sm_pspec_parse_name(sm_pspec_lexer *lx, char *out)
{
    char q = *lx->p;
    const char *start = lx->p + 1;
    const char *end = strchr(start, q);
    if (!end)
        return sm_fail(lx->err, lx->errlen, SM_EINVAL,
                       "partition spec \"%s\": unterminated axis name starting at column %d",
                       lx->text, sm_pspec_col(lx));
    size_t len = (size_t)(end - start);
    if (len == 0 || len >= SM_AXIS_NAME_MAX)
        return sm_fail(lx->err, lx->errlen, SM_EINVAL,
                       "partition spec \"%s\": axis name at column %d must have 1 to %d "
                       "characters",
                       lx->text, sm_pspec_col(lx), SM_AXIS_NAME_MAX - 1);
    memcpy(out, start, len);
    out[len] = 0;
    lx->p = end + 1;
    return SM_OK;
}

static int sm_pspec_at_word(const sm_pspec_lexer *lx, const char *word)
{
    size_t n = strlen(word);
    return strncmp(lx->p, word, n) == 0 && !isalnum((unsigned char)lx->p[n]) && lx->p[n] != '_';
}

/* Quoted names separated by commas (a trailing one allowed) up to close,
 * the opening bracket read, appended to names (*n of them). With no room
 * for one more (SM_MAX_AXES) sets *full and returns SM_EINVAL at that name
 * without a message: the caller says what overflowed. */
static sm_err sm_pspec_parse_names(sm_pspec_lexer *lx, char close, char (*names)[SM_AXIS_NAME_MAX],
                                   int *n, int *full)
{
    char want[32];
    for (;;) {
        sm_pspec_skip_ws(lx);
        if (*lx->p == close) {
            lx->p++;
            return SM_OK;
        }
        if (*lx->p != '\'' && *lx->p != '"') {
            snprintf(want, sizeof want, "a quoted axis name or '%c'", close);
            return sm_pspec_expected(lx, want);
        }
        if (*n == SM_MAX_AXES) {
            *full = 1;
            return SM_EINVAL;
        }
        sm_err rc = sm_pspec_parse_name(lx, names[*n]);
        if (rc)
            return rc;
        (*n)++;
        sm_pspec_skip_ws(lx);
        if (*lx->p == ',') {
            lx->p++;
        } else if (*lx->p != close) {
            snprintf(want, sizeof want, "',' or '%c'", close);
            return sm_pspec_expected(lx, want);
        }
    }
}

/* One entry: None | 'x' | ( [name {, name} [,]] ). */
static sm_err sm_pspec_parse_entry(sm_pspec_lexer *lx, sm_pspec_entry *e)
{
    memset(e, 0, sizeof *e);
    if (sm_pspec_at_word(lx, "None")) {
        lx->p += 4;
        return SM_OK;
    }
    static const char *const unc[] = {"UNCONSTRAINED", "P.UNCONSTRAINED",
                                      "PartitionSpec.UNCONSTRAINED"};
    for (size_t k = 0; k < sizeof unc / sizeof unc[0]; k++)
        if (sm_pspec_at_word(lx, unc[k])) {
            lx->p += strlen(unc[k]);
            e->unconstrained = 1;
            return SM_OK;
        }
    if (*lx->p == '\'' || *lx->p == '"') {
        e->naxes = 1;
        return sm_pspec_parse_name(lx, e->axes[0]);
    }
    if (*lx->p != '(')
        return sm_pspec_expected(lx, "None, a quoted axis name or a tuple of names");
    lx->p++;
    e->is_tuple = 1;
    int full = 0;
    sm_err rc = sm_pspec_parse_names(lx, ')', e->axes, &e->naxes, &full);
    if (full)
        return sm_fail(lx->err, lx->errlen, SM_EINVAL,
                       "partition spec \"%s\": the tuple at column %d has more than %d axes",
                       lx->text, sm_pspec_col(lx), SM_MAX_AXES);
    return rc;
}

/* unreduced={'y', 'z'} or reduced={'x'} (or =set()), after the entries. */
static sm_err sm_pspec_parse_axis_set(sm_pspec_lexer *lx, const char *word,
                                      char (*names)[SM_AXIS_NAME_MAX], int *n)
{
    char what[64];
    lx->p += strlen(word);
    sm_pspec_skip_ws(lx);
    if (*lx->p != '=') {
        snprintf(what, sizeof what, "'=' after %s", word);
        return sm_pspec_expected(lx, what);
    }
    lx->p++;
    sm_pspec_skip_ws(lx);
    if (strncmp(lx->p, "set()", 5) == 0 || strncmp(lx->p, "frozenset()", 11) == 0) {
        lx->p += *lx->p == 's' ? 5 : 11;
        return SM_OK;
    }
    if (*lx->p != '{')
        return sm_pspec_expected(lx, "'{' (a set of quoted mesh axis names)");
    lx->p++;
    int full = 0;
    sm_err rc = sm_pspec_parse_names(lx, '}', names, n, &full);
    if (full)
        return sm_fail(lx->err, lx->errlen, SM_EINVAL,
                       "partition spec \"%s\": more than %d %s axes", lx->text, SM_MAX_AXES, word);
    return rc;
}

const char *sm_pspec_kind_name(int kind)
{
    return kind == SM_UK_SUM ? "sum" : kind == SM_UK_MAX ? "max" : kind == SM_UK_MIN ? "min" : NULL;
}

int sm_pspec_kind_of(const char *s, size_t n)
{
    if (n > 14 && !strncmp(s, "UnreducedKind.", 14)) {
        s += 14;
        n -= 14;
    }
    for (int k = SM_UK_SUM; k <= SM_UK_MIN; k++)
        if (n == 3 && !strncmp(s, sm_pspec_kind_name(k), 3))
            return k;
    return -1;
}

/* unreduced_kind=max (or sum, min; quoted or UnreducedKind.max). */
static sm_err sm_pspec_parse_kind(sm_pspec_lexer *lx, sm_pspec *p)
{
    lx->p += strlen("unreduced_kind");
    sm_pspec_skip_ws(lx);
    if (*lx->p != '=')
        return sm_pspec_expected(lx, "'=' after unreduced_kind");
    lx->p++;
    sm_pspec_skip_ws(lx);
    char q = *lx->p == '\'' || *lx->p == '"' ? *lx->p : 0;
    const char *s = lx->p + (q ? 1 : 0), *e = s;
    while (*e && (*e == '_' || *e == '.' || (*e >= 'a' && *e <= 'z') || (*e >= 'A' && *e <= 'Z')))
        e++;
    int k = sm_pspec_kind_of(s, (size_t)(e - s));
    if (k < 0 || (q && *e != q))
        return sm_pspec_expected(lx, "sum, max or min after unreduced_kind=");
    p->unreduced_kind = k;
    lx->p = e + (q ? 1 : 0);
    return SM_OK;
}

sm_err sm_pspec_parse(const char *text, sm_pspec *out, char *err, size_t errlen)
{
    sm_pspec_lexer lx = {text ? text : "", text ? text : "", err, errlen};
    sm_pspec p;
    memset(&p, 0, sizeof p);
    sm_pspec_skip_ws(&lx);
    if (sm_pspec_at_word(&lx, "PartitionSpec"))
        lx.p += strlen("PartitionSpec");
    else if (sm_pspec_at_word(&lx, "P"))
        lx.p += 1;
    else
        return sm_pspec_expected(&lx, "P( or PartitionSpec(");
    sm_pspec_skip_ws(&lx);
    if (*lx.p != '(')
        return sm_pspec_expected(&lx, "'('");
    lx.p++;
    for (;;) {
        sm_pspec_skip_ws(&lx);
        if (*lx.p == ')') {
            lx.p++;
            break;
        }
        /* the keywords, after the entries: unreduced=, reduced=, unreduced_kind= */
        int kind = sm_pspec_at_word(&lx, "unreduced_kind"),
            ur = !kind && sm_pspec_at_word(&lx, "unreduced"),
            red = !kind && !ur && sm_pspec_at_word(&lx, "reduced");
        if (kind || ur || red) {
            sm_err rc = kind ? sm_pspec_parse_kind(&lx, &p)
                        : ur ? sm_pspec_parse_axis_set(&lx, "unreduced", p.unreduced, &p.nunreduced)
                             : sm_pspec_parse_axis_set(&lx, "reduced", p.reduced, &p.nreduced);
            if (rc)
                return rc;
            sm_pspec_skip_ws(&lx);
            if (*lx.p == ',')
                lx.p++;
            sm_pspec_skip_ws(&lx);
            if (*lx.p != ')' && !sm_pspec_at_word(&lx, "unreduced") &&
                !sm_pspec_at_word(&lx, "reduced") && !sm_pspec_at_word(&lx, "unreduced_kind"))
                return sm_pspec_expected(&lx, kind ? "')' after unreduced_kind=..."
                                              : ur ? "')' after unreduced={...}"
                                                   : "')' after reduced={...}");
            continue;
        }
        if (p.nentries == SM_MAX_RANK)
            return sm_fail(err, errlen, SM_EINVAL,
                           "partition spec \"%s\" has more than %d entries (the maximum rank)",
                           lx.text, SM_MAX_RANK);
        sm_err rc = sm_pspec_parse_entry(&lx, &p.e[p.nentries]);
        if (rc)
            return rc;
        p.nentries++;
        sm_pspec_skip_ws(&lx);
        if (*lx.p == ',')
            lx.p++;
        else if (*lx.p != ')')
            return sm_pspec_expected(&lx, "',' or ')'");
    }
    sm_pspec_skip_ws(&lx);
    if (*lx.p)
        return sm_pspec_expected(&lx, "the end of the spec");
    *out = p;
    return SM_OK;
}

/* Appends with snprintf semantics, tracking the used length. */
static void sm_pspec_put(char *buf, size_t len, size_t *n, const char *fmt, const char *s)
{
    if (*n >= len)
        return;
    int k = snprintf(buf + *n, len - *n, fmt, s);
    if (k > 0)
        *n += (size_t)k;
}

char *sm_pspec_format(const sm_pspec *p, char *buf, size_t len)
{
    size_t n = 0;
    if (!buf || len == 0)
        return buf;
    buf[0] = 0;
    sm_pspec_put(buf, len, &n, "%s", "P(");
    for (int i = 0; i < p->nentries; i++) {
        const sm_pspec_entry *e = &p->e[i];
        if (i)
            sm_pspec_put(buf, len, &n, "%s", ", ");
        /* JAX canonicalises () to None and ('x',) to 'x'. */
        if (e->unconstrained) {
            sm_pspec_put(buf, len, &n, "%s", "UNCONSTRAINED");
        } else if (e->naxes == 0) {
            sm_pspec_put(buf, len, &n, "%s", "None");
        } else if (e->naxes == 1) {
            sm_pspec_put(buf, len, &n, "'%s'", e->axes[0]);
        } else {
            sm_pspec_put(buf, len, &n, "%s", "(");
            for (int a = 0; a < e->naxes; a++)
                sm_pspec_put(buf, len, &n, a ? ", '%s'" : "'%s'", e->axes[a]);
            sm_pspec_put(buf, len, &n, "%s", ")");
        }
    }
    if (p->nentries == 1 && p->e[0].naxes > 1 && p->nunreduced == 0 && p->nreduced == 0)
        sm_pspec_put(buf, len, &n, "%s", ",");
    /* as JAX's repr: P('x', None, unreduced={'y'}, reduced={'z'}) */
    for (int set = 0; set < 2; set++) {
        int cnt = set ? p->nreduced : p->nunreduced;
        if (cnt <= 0)
            continue;
        sm_pspec_put(buf, len, &n, "%s", n > 2 ? ", " : "");
        sm_pspec_put(buf, len, &n, "%s", set ? "reduced={" : "unreduced={");
        for (int a = 0; a < cnt && a < SM_MAX_AXES; a++)
            sm_pspec_put(buf, len, &n, a ? ", '%s'" : "'%s'",
                         set ? p->reduced[a] : p->unreduced[a]);
        sm_pspec_put(buf, len, &n, "%s", "}");
    }
    if (p->unreduced_kind != SM_UK_SUM && sm_pspec_kind_name(p->unreduced_kind)) /* JAX's */
        sm_pspec_put(buf, len, &n, ", unreduced_kind=%s", sm_pspec_kind_name(p->unreduced_kind));
    sm_pspec_put(buf, len, &n, "%s", ")");
    return buf;
}

int sm_pspec_equal(const sm_pspec *a, const sm_pspec *b)
{
    if (a->nentries != b->nentries)
        return 0;
    for (int i = 0; i < a->nentries; i++) {
        if (a->e[i].naxes != b->e[i].naxes || !a->e[i].unconstrained != !b->e[i].unconstrained)
            return 0;
        for (int k = 0; k < a->e[i].naxes; k++)
            if (strcmp(a->e[i].axes[k], b->e[i].axes[k]) != 0)
                return 0;
    }
    if (a->nunreduced != b->nunreduced) /* as sets; check_mesh refuses repeats */
        return 0;
    if (a->nunreduced && a->unreduced_kind != b->unreduced_kind)
        return 0;
    for (int k = 0; k < a->nunreduced; k++)
        if (!sm_pspec_is_unreduced(b, a->unreduced[k]))
            return 0;
    if (a->nreduced != b->nreduced)
        return 0;
    for (int k = 0; k < a->nreduced; k++)
        if (!sm_pspec_is_reduced(b, a->reduced[k]))
            return 0;
    return 1;
}

int sm_pspec_has_unconstrained(const sm_pspec *p)
{
    for (int i = 0; i < p->nentries; i++)
        if (p->e[i].unconstrained)
            return 1;
    return 0;
}

int sm_pspec_is_reduced(const sm_pspec *p, const char *name)
{
    for (int k = 0; k < p->nreduced; k++)
        if (strcmp(p->reduced[k], name) == 0)
            return 1;
    return 0;
}

int sm_pspec_is_unreduced(const sm_pspec *p, const char *name)
{
    for (int k = 0; k < p->nunreduced; k++)
        if (strcmp(p->unreduced[k], name) == 0)
            return 1;
    return 0;
}

sm_err sm_pspec_check_reduced(const sm_pspec *p, const char *what, char *err, size_t errlen)
{
    char spec[300];
    if (p->nunreduced == 0)
        return SM_OK;
    return sm_fail(err, errlen, SM_EUNIMPLEMENTED,
                   "%s: %s is unreduced, but only a program's results hold partial sums (a "
                   "shard_map's out_specs, or a jit function's unreduced result)",
                   what ? what : "the array", sm_pspec_format(p, spec, sizeof spec));
}

sm_err sm_pspec_check_mesh(const sm_pspec *p, const sm_mesh *m, char *err, size_t errlen)
{
    char spec[256], names[256];
    for (int i = 0; i < p->nentries; i++) {
        for (int k = 0; k < p->e[i].naxes; k++) {
            const char *ax = p->e[i].axes[k];
            if (sm_mesh_axis(m, ax) < 0) {
                size_t n = 0;
                names[0] = 0;
                sm_pspec_put(names, sizeof names, &n, "%s", "(");
                for (int a = 0; a < m->naxes; a++)
                    sm_pspec_put(names, sizeof names, &n, a ? ", '%s'" : "'%s'", m->names[a]);
                sm_pspec_put(names, sizeof names, &n, "%s", m->naxes == 1 ? ",)" : ")");
                return sm_fail(err, errlen, SM_EINVAL,
                               "%s refers to mesh axis '%s', but the mesh has axes %s",
                               sm_pspec_format(p, spec, sizeof spec), ax, names);
            }
            /* Used before, in this entry or an earlier one? */
            for (int j = 0; j <= i; j++)
                for (int l = 0; l < (j == i ? k : p->e[j].naxes); l++)
                    if (strcmp(p->e[j].axes[l], ax) == 0)
                        return sm_fail(err, errlen, SM_EINVAL,
                                       "mesh axis '%s' appears more than once in %s", ax,
                                       sm_pspec_format(p, spec, sizeof spec));
        }
    }
    if (p->unreduced_kind != SM_UK_SUM &&
        (!sm_pspec_kind_name(p->unreduced_kind) || p->nunreduced == 0))
        return sm_fail(err, errlen, SM_EINVAL,
                       "`unreduced_kind` should be `None` when `unreduced` is an empty set. Got "
                       "%s",
                       sm_pspec_format(p, spec, sizeof spec));
    for (int set = 0; set < 2; set++) {
        const char *word = set ? "reduced" : "unreduced";
        int cnt = set ? p->nreduced : p->nunreduced;
        if (cnt < 0 || cnt > SM_MAX_AXES)
            return sm_fail(err, errlen, SM_EINVAL, "a partition spec has %d %s axes (0..%d)", cnt,
                           word, SM_MAX_AXES);
        for (int k = 0; k < cnt; k++) {
            const char *ax = set ? p->reduced[k] : p->unreduced[k];
            if (!memchr(ax, 0, SM_AXIS_NAME_MAX) || sm_mesh_axis(m, ax) < 0)
                return sm_fail(
                    err, errlen, SM_EINVAL, "%s: %s axis '%.*s' is not an axis of the mesh",
                    sm_pspec_format(p, spec, sizeof spec), word, SM_AXIS_NAME_MAX - 1, ax);
            for (int l = 0; l < k; l++)
                if (strcmp(set ? p->reduced[l] : p->unreduced[l], ax) == 0)
                    return sm_fail(err, errlen, SM_EINVAL,
                                   "mesh axis '%s' appears more than once in the %s axes of %s", ax,
                                   word, sm_pspec_format(p, spec, sizeof spec));
            for (int i = 0; i < p->nentries; i++)
                for (int j = 0; j < p->e[i].naxes; j++)
                    if (strcmp(p->e[i].axes[j], ax) == 0)
                        return sm_fail(err, errlen, SM_EINVAL,
                                       "partitions cannot overlap with %s axes passed to "
                                       "PartitionSpec. Got %s",
                                       word, sm_pspec_format(p, spec, sizeof spec));
            if (set && sm_pspec_is_unreduced(p, ax))
                return sm_fail(
                    err, errlen, SM_EINVAL,
                    "`unreduced` and `reduced` argument to PartitionSpec cannot overlap. "
                    "Got %s",
                    sm_pspec_format(p, spec, sizeof spec));
        }
    }
    return SM_OK;
}

int64_t sm_pspec_dim_factor(const sm_pspec *p, const sm_mesh *m, int dim)
{
    int64_t f = 1;
    if (dim < 0 || dim >= p->nentries)
        return 1;
    for (int k = 0; k < p->e[dim].naxes; k++) {
        int a = sm_mesh_axis(m, p->e[dim].axes[k]);
        if (a >= 0)
            f *= m->sizes[a];
    }
    return f;
}

sm_err sm_pspec_check(const sm_pspec *p, const sm_mesh *m, const sm_shape *shape, const char *what,
                      char *err, size_t errlen)
{
    char spec[256];
    sm_err rc = sm_pspec_check_mesh(p, m, err, errlen);
    if (rc)
        return rc;
    const char *name = what ? what : "the array";
    if (sm_pspec_has_unconstrained(p))
        return sm_fail(err, errlen, SM_EINVAL,
                       "%s: %s: P.UNCONSTRAINED leaves a dimension's sharding to the service, "
                       "which only with_sharding_constraint may do",
                       name, sm_pspec_format(p, spec, sizeof spec));
    if (shape->rank < 0 || shape->rank > SM_MAX_RANK)
        return sm_fail(err, errlen, SM_EINVAL, "%s has rank %d; ranks go from 0 to %d", name,
                       shape->rank, SM_MAX_RANK);
    for (int d = 0; d < shape->rank; d++)
        if (shape->dims[d] < 0)
            return sm_fail(err, errlen, SM_EINVAL, "dimension %d of %s has negative size %lld", d,
                           name, (long long)shape->dims[d]);
    if (p->nentries > shape->rank)
        return sm_fail(err, errlen, SM_EINVAL,
                       "%s has %d entries but %s has rank %d (a scalar needs P())",
                       sm_pspec_format(p, spec, sizeof spec), p->nentries, name, shape->rank);
    for (int d = 0; d < p->nentries; d++) {
        int64_t f = sm_pspec_dim_factor(p, m, d);
        if (f <= 1 || shape->dims[d] % f == 0)
            continue;
        char axes[160], sizes[160];
        size_t na = 0, ns = 0;
        axes[0] = sizes[0] = 0;
        sm_pspec_put(axes, sizeof axes, &na, "%s", "(");
        sm_pspec_put(sizes, sizeof sizes, &ns, "%s", "(");
        for (int k = 0; k < p->e[d].naxes; k++) {
            char num[32];
            snprintf(num, sizeof num, "%lld",
                     (long long)m->sizes[sm_mesh_axis(m, p->e[d].axes[k])]);
            sm_pspec_put(axes, sizeof axes, &na, k ? ", '%s'" : "'%s'", p->e[d].axes[k]);
            sm_pspec_put(sizes, sizeof sizes, &ns, k ? ", %s" : "%s", num);
        }
        const char *close = p->e[d].naxes == 1 ? ",)" : ")";
        sm_pspec_put(axes, sizeof axes, &na, "%s", close);
        sm_pspec_put(sizes, sizeof sizes, &ns, "%s", close);
        return sm_fail(err, errlen, SM_EINVAL,
                       "dimension %d of %s has size %lld, which is not divisible by %lld (the "
                       "product of mesh axes %s of sizes %s)",
                       d, name, (long long)shape->dims[d], (long long)f, axes, sizes);
    }
    return SM_OK;
}
