#include "sm_file.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

sm_err sm_file_read_text(const char *path, size_t max, char **out, char *err, size_t errlen)
{
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f)
        return sm_fail(err, errlen, SM_EIO, "cannot open '%s': %s", path, strerror(errno));
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    sm_err e = SM_OK;
    while (buf) {
        n += fread(buf + n, 1, cap - n - 1, f);
        if (max && n > max) {
            e = sm_fail(err, errlen, SM_EINVAL, "'%s' is larger than %zu MiB", path, max >> 20);
            break;
        }
        if (n + 1 < cap)
            break;
        char *nb = realloc(buf, cap * 2);
        if (!nb)
            free(buf);
        buf = nb;
        cap *= 2;
    }
    if (!e && !buf)
        e = sm_fail(err, errlen, SM_ENOMEM, "out of memory reading '%s'", path);
    else if (!e && ferror(f))
        e = sm_fail(err, errlen, SM_EIO, "cannot read '%s': %s", path, strerror(errno));
    fclose(f);
    if (e) {
        free(buf);
        return e;
    }
    buf[n] = '\0';
    *out = buf;
    return SM_OK;
}
