#include "sm_err.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

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
        int n = vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
        if (n >= 0 && (size_t)n >= errlen)
            sm_utf8_trim(err);
    }
    return code;
}

void sm_utf8_trim(char *s)
{
    size_t n = strlen(s), k = n;
    while (k > 0 && n - k < 4 && ((unsigned char)s[k - 1] & 0xc0) == 0x80)
        k--; /* continuation bytes at the end */
    if (k == 0 || (unsigned char)s[k - 1] < 0xc0)
        return; /* ASCII, or no lead byte within reach */
    unsigned char lead = (unsigned char)s[k - 1];
    size_t want = (lead & 0xe0) == 0xc0 ? 2 : (lead & 0xf0) == 0xe0 ? 3 : 4;
    if (n - (k - 1) < want)
        s[k - 1] = '\0';
}

sm_err sm_text_check(const char *what, const char *s, char *err, size_t errlen)
{
    const unsigned char *p = (const unsigned char *)s;
    for (size_t i = 0; p[i];) {
        unsigned c = p[i];
        if (c < 0x20 || c == 0x7f)
            return sm_fail(err, errlen, SM_EINVAL,
                           "%s has a control character (0x%02x at byte %zu)", what, c, i);
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t n = (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3 : (c & 0xf8) == 0xf0 ? 4 : 0;
        uint32_t cp = n == 2 ? c & 0x1f : n == 3 ? c & 0x0f : c & 0x07;
        size_t k = 1;
        for (; n && k < n && (p[i + k] & 0xc0) == 0x80; k++)
            cp = cp << 6 | (p[i + k] & 0x3f);
        static const uint32_t least[] = {0, 0, 0x80, 0x800, 0x10000};
        if (!n || k < n || cp < least[n] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
            return sm_fail(err, errlen, SM_EINVAL, "%s is not valid UTF-8 (byte 0x%02x at %zu)",
                           what, c, i);
        i += n;
    }
    return SM_OK;
}
