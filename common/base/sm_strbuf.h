/* sm_strbuf: a growable NUL-terminated text buffer for printers, diagrams
 * and messages. A zeroed struct is an empty buffer. The buffer owns data;
 * sm_strbuf_free releases it. Allocation failure is sticky: once set, `oom`
 * stays 1 and further appends are ignored, so callers check once at the end. */
#ifndef SM_STRBUF_H
#define SM_STRBUF_H

#include <stddef.h>

typedef struct {
    char *data; /* NULL until the first append; then always NUL-terminated */
    size_t len;
    size_t cap;
    int oom;
} sm_strbuf;

void sm_strbuf_printf(sm_strbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void sm_strbuf_append(sm_strbuf *b, const char *s, size_t n);
void sm_strbuf_puts(sm_strbuf *b, const char *s);
/* Appends c n times. */
void sm_strbuf_repeat(sm_strbuf *b, char c, size_t n);
/* Returns the text ("" when empty); valid until the next append or free. */
const char *sm_strbuf_str(const sm_strbuf *b);
/* Hands the text to the caller (free() it); the buffer becomes empty. */
char *sm_strbuf_take(sm_strbuf *b);
void sm_strbuf_free(sm_strbuf *b);

#endif
