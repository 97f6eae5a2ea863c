/* sm_ir_lex: the tokenizer of the program text form (internal). Python-like:
 * NEWLINE ends a logical line (not inside brackets), INDENT/DEDENT mark
 * 4-space indentation, '#' starts a comment, tabs are an error. */
#ifndef SM_IR_LEX_H
#define SM_IR_LEX_H

#include <stddef.h>
#include <stdint.h>

#include "sm_err.h"

typedef enum {
    SM_TOK_EOF,
    SM_TOK_NEWLINE,
    SM_TOK_INDENT,
    SM_TOK_DEDENT,
    SM_TOK_NAME,
    SM_TOK_INT,
    SM_TOK_FLOAT,
    SM_TOK_STRING, /* text is the contents, without quotes */
    SM_TOK_OP      /* punctuation; text is the operator */
} sm_tok_kind;

typedef struct {
    sm_tok_kind kind;
    const char *text; /* into the source (or the string contents) */
    int len;
    int line, col; /* 1-based */
    int64_t ival;
    double fval;
} sm_tok;

/* Tokenizes text into a malloc'd array (*out, *n, ending with EOF); free()
 * it. Errors are SM_EFORMAT with "file:line:col: sentence". */
sm_err sm_ir_lex(const char *text, const char *file, sm_tok **out, int *n, char *err,
                 size_t errlen);

/* The character at s for an error sentence, into buf: quoted, the whole
 * UTF-8 sequence of a non-ASCII one (never a lone byte of it, which would
 * make the sentence invalid UTF-8), or "byte 0xNN" for a control byte or
 * a byte that starts no valid sequence. Returns buf. */
const char *sm_ir_char_text(const char *s, char buf[16]);

/* 1 if t is the operator or name s. */
int sm_tok_is(const sm_tok *t, const char *s);

#endif
