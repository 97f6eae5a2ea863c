#include "sm_strbuf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int sm_strbuf_reserve(sm_strbuf *b, size_t extra)
{
    if (b->oom)
        return 0;
    size_t need = b->len + extra + 1;
    if (need <= b->cap)
        return 1;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < need)
        cap *= 2;
    char *p = realloc(b->data, cap);
    if (!p) {
        b->oom = 1;
        return 0;
    }
    b->data = p;
    b->cap = cap;
    return 1;
}

void sm_strbuf_append(sm_strbuf *b, const char *s, size_t n)
{
    if (!sm_strbuf_reserve(b, n))
        return;
    memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = 0;
}

void sm_strbuf_puts(sm_strbuf *b, const char *s)
{
    sm_strbuf_append(b, s, strlen(s));
}

void sm_strbuf_repeat(sm_strbuf *b, char c, size_t n)
{
    if (!sm_strbuf_reserve(b, n))
        return;
    memset(b->data + b->len, c, n);
    b->len += n;
    b->data[b->len] = 0;
}

void sm_strbuf_printf(sm_strbuf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0 || !sm_strbuf_reserve(b, (size_t)n))
        return;
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

const char *sm_strbuf_str(const sm_strbuf *b)
{
    return b->data ? b->data : "";
}

char *sm_strbuf_take(sm_strbuf *b)
{
    char *s = b->data;
    if (!s) {
        s = malloc(1);
        if (s)
            s[0] = 0;
    }
    b->data = NULL;
    b->len = b->cap = 0;
    b->oom = 0;
    return s;
}

void sm_strbuf_free(sm_strbuf *b)
{
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
    b->oom = 0;
}
