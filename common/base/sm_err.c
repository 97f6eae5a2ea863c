#include "sm_err.h"

#include <stdarg.h>
#include <stdio.h>

static const char *const sm_err_texts[] = {
#define SM_ERR_TEXT(name, text) text,
    SM_ERR_LIST(SM_ERR_TEXT)
#undef SM_ERR_TEXT
};

static const char *const sm_err_names[] = {
#define SM_ERR_NAME(name, text) #name,
    SM_ERR_LIST(SM_ERR_NAME)
#undef SM_ERR_NAME
};

_Static_assert(sizeof(sm_err_texts) / sizeof(sm_err_texts[0]) == SM_ERR_COUNT,
               "one text per error code");

const char *sm_strerror(sm_err e)
{
    if ((int)e < 0 || e >= SM_ERR_COUNT)
        return "unknown error";
    return sm_err_texts[e];
}

const char *sm_err_name(sm_err e)
{
    if ((int)e < 0 || e >= SM_ERR_COUNT)
        return "SM_E?";
    return sm_err_names[e];
}

sm_err sm_fail(char *err, size_t errlen, sm_err code, const char *fmt, ...)
{
    if (err && errlen > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return code;
}
