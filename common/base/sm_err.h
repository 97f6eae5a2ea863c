/* sm_err: the one error enum of shmap, with its messages.
 *
 * Every fallible function returns an sm_err. Details go in a caller-provided
 * message buffer (char *err, size_t errlen) as one sentence naming the
 * offending value; sm_fail() writes that sentence and returns the code, so a
 * validator reads `return sm_fail(err, errlen, SM_EINVAL, "...", ...);`.
 * The list below is the single source of codes and their short texts. The
 * gRPC status each maps to is given once, in common/rpc. */
#ifndef SM_ERR_H
#define SM_ERR_H

#include <stddef.h>

#define SM_ERR_LIST(X)                                                                             \
    X(SM_OK, "ok")                                                                                 \
    X(SM_EINVAL, "invalid argument")                                                               \
    X(SM_ENOTFOUND, "not found")                                                                   \
    X(SM_EEXIST, "already exists")                                                                 \
    X(SM_ENOMEM, "out of memory")                                                                  \
    X(SM_EOVERFLOW, "size overflow")                                                               \
    X(SM_EIO, "input/output error")                                                                \
    X(SM_EFORMAT, "malformed data")                                                                \
    X(SM_EUNSUPPORTED, "not supported")                                                            \
    X(SM_EPRECONDITION, "failed precondition")                                                     \
    X(SM_EUNAVAILABLE, "unavailable")                                                              \
    X(SM_ETIMEOUT, "deadline exceeded")                                                            \
    X(SM_EDATALOSS, "data loss")                                                                   \
    X(SM_EAUTH, "unauthenticated")                                                                 \
    X(SM_EPERM, "permission denied")                                                               \
    X(SM_ECANCELLED, "cancelled")                                                                  \
    X(SM_ERESOURCE, "resource exhausted")                                                          \
    X(SM_EUNIMPLEMENTED, "not implemented")                                                        \
    X(SM_EINTERNAL, "internal error")

typedef enum {
#define SM_ERR_ENUM(name, text) name,
    SM_ERR_LIST(SM_ERR_ENUM)
#undef SM_ERR_ENUM
        SM_ERR_COUNT
} sm_err;

/* Short fixed text of a code ("invalid argument"); never NULL. */
const char *sm_strerror(sm_err e);

/* Enum name of a code ("SM_EINVAL"); never NULL. */
const char *sm_err_name(sm_err e);

/* Writes a printf-style sentence into err (if err != NULL and errlen > 0,
 * always NUL-terminated, truncated if needed, never inside a UTF-8
 * character: sm_utf8_trim) and returns code. */
sm_err sm_fail(char *err, size_t errlen, sm_err code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Cuts off a UTF-8 character the end of s left incomplete (a string cut
 * to fit a buffer), so that a sentence quoting a caller's text stays valid
 * UTF-8 when it was valid before the cut. */
void sm_utf8_trim(char *s);

/* SM_OK when s is text a name may be: valid UTF-8 (no overlong forms,
 * surrogates or code points past U+10FFFF) without control characters
 * (below 0x20, 0x7f). Else SM_EINVAL with a sentence naming `what`, the
 * byte and its offset. */
sm_err sm_text_check(const char *what, const char *s, char *err, size_t errlen);

#endif
