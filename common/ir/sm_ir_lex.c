/* sm_ir_lex: tokenizer of the program text form. */
#include "sm_ir_lex.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    sm_tok *v;
    int n, cap;
} sm_toks;

static int sm_toks_push(sm_toks *t, sm_tok k)
{
    if (t->n == t->cap) {
        int nc = t->cap ? t->cap * 2 : 256;
        sm_tok *nv = realloc(t->v, sizeof *nv * (size_t)nc);
        if (!nv)
            return -1;
        t->v = nv;
        t->cap = nc;
    }
    t->v[t->n++] = k;
    return 0;
}

int sm_tok_is(const sm_tok *t, const char *s)
{
    return (t->kind == SM_TOK_OP || t->kind == SM_TOK_NAME) && (size_t)t->len == strlen(s) &&
           memcmp(t->text, s, (size_t)t->len) == 0;
}

static const char *const sm_ir_ops3[] = {"**", "//", "->", "==", "!=", "<=", ">=", NULL};

sm_err sm_ir_lex(const char *text, const char *file, sm_tok **out, int *n, char *err, size_t errlen)
{
    sm_toks t = {0};
    int indents[64] = {0}, nind = 1, depth = 0, line = 1;
    const char *s = text, *bol = text;
    int at_bol = 1;
    if (!file)
        file = "<text>";
#define SM_LEX_FAIL(col, ...)                                                                      \
    do {                                                                                           \
        char msg_[512];                                                                            \
        snprintf(msg_, sizeof msg_, __VA_ARGS__);                                                  \
        free(t.v);                                                                                 \
        return sm_fail(err, errlen, SM_EFORMAT, "%s:%d:%d: %s", file, line, (int)(col), msg_);     \
    } while (0)
#define SM_LEX_PUSH(tok)                                                                           \
    do {                                                                                           \
        if (sm_toks_push(&t, tok)) {                                                               \
            free(t.v);                                                                             \
            return sm_fail(err, errlen, SM_ENOMEM, "out of memory tokenizing %s", file);           \
        }                                                                                          \
    } while (0)
    for (;;) {
        if (at_bol && depth == 0) { /* measure indentation of a new logical line */
            const char *q = s;
            while (*q == ' ')
                q++;
            if (*q == '\t')
                SM_LEX_FAIL(q - bol + 1, "tab character in indentation; indent with 4 spaces");
            if (*q == '#' || *q == '\n' || *q == '\r' || *q == 0) { /* blank or comment line */
                while (*q && *q != '\n')
                    q++;
                if (!*q)
                    break;
                s = q + 1;
                bol = s;
                line++;
                continue;
            }
            int w = (int)(q - s);
            if (w > indents[nind - 1]) {
                if (w != indents[nind - 1] + 4)
                    SM_LEX_FAIL(w + 1, "indentation of %d spaces; expected %d (4 per level)", w,
                                indents[nind - 1] + 4);
                if (nind == 64)
                    SM_LEX_FAIL(w + 1, "too deeply nested");
                indents[nind++] = w;
                SM_LEX_PUSH(((sm_tok){SM_TOK_INDENT, q, 0, line, w + 1, 0, 0}));
            } else {
                while (w < indents[nind - 1]) {
                    nind--;
                    SM_LEX_PUSH(((sm_tok){SM_TOK_DEDENT, q, 0, line, w + 1, 0, 0}));
                }
                if (w != indents[nind - 1])
                    SM_LEX_FAIL(w + 1, "indentation of %d spaces does not match any outer level",
                                w);
            }
            s = q;
            at_bol = 0;
        }
        char c = *s;
        int col = (int)(s - bol) + 1;
        if (c == 0)
            break;
        if (c == '\t')
            SM_LEX_FAIL(col, "tab character; use spaces");
        if (c == ' ' || c == '\r') {
            s++;
            continue;
        }
        if (c == '#') {
            while (*s && *s != '\n')
                s++;
            continue;
        }
        if (c == '\\' && s[1] == '\n') { /* explicit line joining */
            s += 2;
            bol = s;
            line++;
            continue;
        }
        if (c == '\n') {
            if (depth == 0 && t.n > 0 && t.v[t.n - 1].kind != SM_TOK_NEWLINE)
                SM_LEX_PUSH(((sm_tok){SM_TOK_NEWLINE, s, 1, line, col, 0, 0}));
            s++;
            bol = s;
            line++;
            at_bol = depth == 0;
            continue;
        }
        sm_tok k = {.text = s, .line = line, .col = col};
        if (isalpha((unsigned char)c) || c == '_') {
            while (isalnum((unsigned char)*s) || *s == '_')
                s++;
            k.kind = SM_TOK_NAME;
        } else if (isdigit((unsigned char)c) || (c == '.' && isdigit((unsigned char)s[1]))) {
            const char *q = s;
            while (isdigit((unsigned char)*q) || *q == '_')
                q++;
            int is_float = *q == '.' || *q == 'e' || *q == 'E';
            char *end;
            errno = 0;
            if (is_float) {
                k.fval = strtod(s, &end);
                k.kind = SM_TOK_FLOAT;
            } else {
                long long v = strtoll(s, &end, 10);
                if (errno == ERANGE)
                    SM_LEX_FAIL(col, "integer literal out of range");
                k.ival = v;
                k.kind = SM_TOK_INT;
            }
            if (end == s || isalpha((unsigned char)*end) || *end == '_')
                SM_LEX_FAIL(col, "malformed number");
            s = end;
        } else if (c == '\'' || c == '"') {
            const char *q = s + 1;
            while (*q && *q != c && *q != '\n')
                q++;
            if (*q != c)
                SM_LEX_FAIL(col, "unterminated string");
            k.kind = SM_TOK_STRING;
            k.text = s + 1;
            k.len = (int)(q - s - 1);
            s = q + 1;
            SM_LEX_PUSH(k);
            continue;
        } else {
            k.kind = SM_TOK_OP;
            int len = 0;
            for (int i = 0; sm_ir_ops3[i]; i++)
                if (strncmp(s, sm_ir_ops3[i], 2) == 0)
                    len = 2;
            if (!len) {
                char ch[16];
                if (!strchr("()[]{},:=+-*/%@<>.&|^~", c))
                    SM_LEX_FAIL(col, "unexpected character %s%s", sm_ir_char_text(s, ch),
                                (unsigned char)c >= 0x80
                                    ? " (names and the rest of a program are ASCII)"
                                    : "");
                len = 1;
            }
            if (strchr("([{", c) && len == 1)
                depth++;
            if (strchr(")]}", c) && len == 1 && depth > 0)
                depth--;
            s += len;
        }
        k.len = (int)(s - k.text);
        SM_LEX_PUSH(k);
    }
    int line_end = line;
    if (t.n > 0 && t.v[t.n - 1].kind != SM_TOK_NEWLINE)
        SM_LEX_PUSH(((sm_tok){SM_TOK_NEWLINE, s, 0, line_end, (int)(s - bol) + 1, 0, 0}));
    while (nind > 1) {
        nind--;
        SM_LEX_PUSH(((sm_tok){SM_TOK_DEDENT, s, 0, line_end, 1, 0, 0}));
    }
    SM_LEX_PUSH(((sm_tok){SM_TOK_EOF, s, 0, line_end, (int)(s - bol) + 1, 0, 0}));
#undef SM_LEX_FAIL
#undef SM_LEX_PUSH
    *out = t.v;
    *n = t.n;
    return SM_OK;
}

const char *sm_ir_char_text(const char *s, char buf[16])
{
    const unsigned char *u = (const unsigned char *)s;
    int n = u[0] < 0x80             ? 1
            : (u[0] & 0xe0) == 0xc0 ? 2
            : (u[0] & 0xf0) == 0xe0 ? 3
            : (u[0] & 0xf8) == 0xf0 ? 4
                                    : 0;
    for (int i = 1; i < n; i++)
        if ((u[i] & 0xc0) != 0x80)
            n = 0;
    if (n == 0 || u[0] < 0x20 || u[0] == 0x7f)
        snprintf(buf, 16, "byte 0x%02X", u[0]);
    else
        snprintf(buf, 16, "'%.*s'", n, s);
    return buf;
}
