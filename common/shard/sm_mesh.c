/* sm_mesh: device meshes (see sm_mesh.h). */
#include "sm_mesh.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* 1 if name is a non-empty identifier ([A-Za-z_][A-Za-z0-9_]*). */
static int sm_mesh_is_ident(const char *name)
{
    if (!name || !(isalpha((unsigned char)name[0]) || name[0] == '_'))
        return 0;
    for (const char *c = name + 1; *c; c++)
        if (!(isalnum((unsigned char)*c) || *c == '_'))
            return 0;
    return 1;
}

sm_err sm_mesh_init(sm_mesh *m, int naxes, const char *const *names, const int64_t *sizes,
                    const int32_t *devices, int ndevices, char *err, size_t errlen)
{
    if (naxes < 1 || naxes > SM_MAX_AXES)
        return sm_fail(err, errlen, SM_EINVAL, "a mesh needs 1 to %d axes, got %d", SM_MAX_AXES,
                       naxes);
    int64_t total = 1;
    for (int a = 0; a < naxes; a++) {
        if (!sm_mesh_is_ident(names[a]))
            return sm_fail(err, errlen, SM_EINVAL,
                           "mesh axis name '%s' is not an identifier (letters, digits, '_', not "
                           "starting with a digit)",
                           names[a] ? names[a] : "");
        if (strlen(names[a]) >= SM_AXIS_NAME_MAX)
            return sm_fail(err, errlen, SM_EINVAL,
                           "mesh axis name '%.40s...' is longer than %d characters", names[a],
                           SM_AXIS_NAME_MAX - 1);
        for (int b = 0; b < a; b++)
            if (strcmp(names[a], names[b]) == 0)
                return sm_fail(err, errlen, SM_EINVAL, "mesh axis name '%s' appears more than once",
                               names[a]);
        if (sizes[a] < 1)
            return sm_fail(err, errlen, SM_EINVAL,
                           "mesh axis '%s' has size %lld; sizes must be >= 1", names[a],
                           (long long)sizes[a]);
        if (sizes[a] > SM_MAX_DEVICES || total * sizes[a] > SM_MAX_DEVICES)
            return sm_fail(err, errlen, SM_EINVAL,
                           "the mesh has more than %d devices (axis '%s' of size %lld)",
                           SM_MAX_DEVICES, names[a], (long long)sizes[a]);
        total *= sizes[a];
    }
    if (devices && ndevices != total)
        return sm_fail(err, errlen, SM_EINVAL,
                       "the mesh has %lld positions (the product of its axis sizes) but %d "
                       "devices were given",
                       (long long)total, ndevices);
    if (devices) {
        for (int i = 0; i < ndevices; i++) {
            if (devices[i] < 0)
                return sm_fail(err, errlen, SM_EINVAL,
                               "device id %d at mesh position %d is negative", (int)devices[i], i);
            for (int j = 0; j < i; j++)
                if (devices[j] == devices[i])
                    return sm_fail(err, errlen, SM_EINVAL,
                                   "device %d appears more than once in the mesh (positions %d "
                                   "and %d)",
                                   (int)devices[i], j, i);
        }
    }
    memset(m, 0, sizeof *m);
    m->naxes = naxes;
    for (int a = 0; a < naxes; a++) {
        snprintf(m->names[a], SM_AXIS_NAME_MAX, "%s", names[a]);
        m->sizes[a] = sizes[a];
    }
    m->ndevices = (int)total;
    for (int i = 0; i < m->ndevices; i++)
        m->devices[i] = devices ? devices[i] : i;
    return SM_OK;
}

/* The types of "axis_types=(Auto, Explicit)" from p (past the '('):
 * Auto or Explicit (also AxisType.Auto, lower case), separated by commas or
 * spaces, up to ')'. Returns the text after ')', or NULL with err set. */
static const char *sm_mesh_parse_types(const char *text, const char *p, uint32_t *auto_axes,
                                       int *ntypes, char *err, size_t errlen)
{
    int k = 0;
    for (;;) {
        while (*p == ' ' || *p == ',' || *p == '\t')
            p++;
        if (*p == ')')
            break;
        if (!*p) {
            sm_fail(err, errlen, SM_EINVAL, "mesh '%s': axis_types=( is not closed with ')'", text);
            return NULL;
        }
        const char *w = p;
        while (isalnum((unsigned char)*p) || *p == '_' || *p == '.')
            p++;
        size_t len = (size_t)(p - w);
        if (len > 9 && !strncmp(w, "AxisType.", 9)) {
            w += 9;
            len -= 9;
        }
        int is_auto = len == 4 && !strncasecmp(w, "auto", 4);
        if (!is_auto && !(len == 8 && !strncasecmp(w, "explicit", 8))) {
            sm_fail(err, errlen, SM_EINVAL,
                    "mesh '%s': axis_types takes Explicit or Auto per axis, got '%.*s' at column "
                    "%d",
                    text, (int)(len ? len : 1), w, (int)(w - text) + 1);
            return NULL;
        }
        if (k == SM_MAX_AXES) {
            sm_fail(err, errlen, SM_EINVAL, "mesh '%s': axis_types gives more than %d types", text,
                    SM_MAX_AXES);
            return NULL;
        }
        if (is_auto)
            *auto_axes |= 1u << k;
        k++;
    }
    *ntypes = k;
    return p + 1;
}

sm_err sm_mesh_parse(const char *text, const int32_t *devices, int ndevices, sm_mesh *m, char *err,
                     size_t errlen)
{
    char names[SM_MAX_AXES][SM_AXIS_NAME_MAX];
    const char *name_ptrs[SM_MAX_AXES];
    int64_t sizes[SM_MAX_AXES];
    int naxes = 0, ntypes = -1;
    uint32_t auto_axes = 0;
    const char *p = text ? text : "";

    for (;;) {
        while (*p == ' ' || *p == ',' || *p == '\t')
            p++;
        if (!*p)
            break;
        const char *start = p;
        if (!strncmp(p, "axis_types=(", 12)) {
            if (ntypes >= 0)
                return sm_fail(err, errlen, SM_EINVAL, "mesh '%s' gives axis_types twice", text);
            p = sm_mesh_parse_types(text, p + 12, &auto_axes, &ntypes, err, errlen);
            if (!p)
                return SM_EINVAL;
            continue;
        }
        if (ntypes >= 0)
            return sm_fail(err, errlen, SM_EINVAL,
                           "mesh '%s': axis_types comes after the axes (column %d)", text,
                           (int)(start - text) + 1);
        while (*p && *p != '=' && *p != ',' && *p != ' ' && *p != '\t')
            p++;
        size_t len = (size_t)(p - start);
        if (*p != '=')
            return sm_fail(err, errlen, SM_EINVAL,
                           "mesh '%s': expected name=size at column %d, e.g. \"i=4,j=2\"", text,
                           (int)(start - text) + 1);
        if (naxes == SM_MAX_AXES)
            return sm_fail(err, errlen, SM_EINVAL, "mesh '%s' has more than %d axes", text,
                           SM_MAX_AXES);
        if (len == 0 || len >= SM_AXIS_NAME_MAX)
            return sm_fail(err, errlen, SM_EINVAL,
                           "mesh '%s': axis name at column %d must have 1 to %d characters", text,
                           (int)(start - text) + 1, SM_AXIS_NAME_MAX - 1);
        memcpy(names[naxes], start, len);
        names[naxes][len] = 0;
        p++;
        const char *num = p;
        while (isdigit((unsigned char)*p))
            p++;
        if (p == num || (*p && *p != ',' && *p != ' ' && *p != '\t') || p - num > 9)
            return sm_fail(err, errlen, SM_EINVAL,
                           "mesh '%s': axis '%s' needs a positive integer size at column %d", text,
                           names[naxes], (int)(num - text) + 1);
        sizes[naxes] = strtoll(num, NULL, 10);
        name_ptrs[naxes] = names[naxes];
        naxes++;
    }
    if (naxes == 0)
        return sm_fail(err, errlen, SM_EINVAL, "mesh '%s' has no axes; write e.g. \"i=4,j=2\"",
                       text ? text : "");
    if (ntypes >= 0 && ntypes != naxes)
        return sm_fail(err, errlen, SM_EINVAL, "mesh '%s': axis_types gives %d types for %d axes",
                       text, ntypes, naxes);
    sm_err e = sm_mesh_init(m, naxes, name_ptrs, sizes, devices, ndevices, err, errlen);
    if (!e)
        m->auto_axes = auto_axes;
    return e;
}

sm_err sm_mesh_types_check(const sm_mesh *m, uint32_t auto_axes, const char *what, char *err,
                           size_t errlen)
{
    if (m->naxes < 32 && auto_axes >> m->naxes)
        return sm_fail(err, errlen, SM_EINVAL,
                       "%s marks axis %d Auto, but the mesh has %d axes (bit a is axis a)", what,
                       31 - __builtin_clz(auto_axes), m->naxes);
    return SM_OK;
}

sm_err sm_mesh_default_devices(int naxes, const int64_t *sizes, int nprocs, const int *proc_ndev,
                               const int32_t *proc_devices, int32_t *out, char *err, size_t errlen)
{
    int64_t total = 1;
    for (int a = 0; a < naxes; a++) {
        if (sizes[a] < 1 || sizes[a] > SM_MAX_DEVICES || total * sizes[a] > SM_MAX_DEVICES)
            return sm_fail(err, errlen, SM_EINVAL, "mesh axis %d has an invalid size %lld", a,
                           (long long)sizes[a]);
        total *= sizes[a];
    }
    int64_t have = 0;
    for (int p = 0; p < nprocs; p++) {
        if (proc_ndev[p] < 0)
            return sm_fail(err, errlen, SM_EINVAL, "process %d has a negative device count %d", p,
                           proc_ndev[p]);
        have += proc_ndev[p];
    }
    if (have != total)
        return sm_fail(err, errlen, SM_EINVAL,
                       "a mesh of %lld devices needs exactly that many devices, but the "
                       "processes own %lld",
                       (long long)total, (long long)have);
    /* Processes in order; inside one process, increasing id (insertion sort
     * of that process's run). Row-major filling then keeps the minor axis
     * inside a process whenever its size divides the per-process count. */
    int off = 0;
    for (int p = 0; p < nprocs; p++) {
        for (int i = 0; i < proc_ndev[p]; i++) {
            int32_t v = proc_devices[off + i];
            if (v < 0)
                return sm_fail(err, errlen, SM_EINVAL, "process %d lists a negative device id %d",
                               p, (int)v);
            for (int j = 0; j < off + i; j++)
                if (proc_devices[j] == v)
                    return sm_fail(err, errlen, SM_EINVAL, "device %d is listed more than once",
                                   (int)v);
            int k = off + i;
            while (k > off && out[k - 1] > v) {
                out[k] = out[k - 1];
                k--;
            }
            out[k] = v;
        }
        off += proc_ndev[p];
    }
    return SM_OK;
}

int sm_mesh_axis(const sm_mesh *m, const char *name)
{
    for (int a = 0; a < m->naxes; a++)
        if (strcmp(m->names[a], name) == 0)
            return a;
    return -1;
}

void sm_mesh_coords(const sm_mesh *m, int pos, int64_t *coords)
{
    int64_t rest = pos;
    for (int a = m->naxes - 1; a >= 0; a--) {
        coords[a] = rest % m->sizes[a];
        rest /= m->sizes[a];
    }
}

int sm_mesh_find_device(const sm_mesh *m, int32_t device)
{
    for (int i = 0; i < m->ndevices; i++)
        if (m->devices[i] == device)
            return i;
    return -1;
}

char *sm_mesh_format(const sm_mesh *m, char *buf, size_t len)
{
    size_t n = 0;
    if (!buf || len == 0)
        return buf;
    buf[0] = 0;
    n += (size_t)snprintf(buf, len, "Mesh(");
    for (int a = 0; a < m->naxes && n < len; a++)
        n += (size_t)snprintf(buf + n, len - n, "%s'%s': %lld", a ? ", " : "", m->names[a],
                              (long long)m->sizes[a]);
    if (m->auto_axes && n < len) {
        n += (size_t)snprintf(buf + n, len - n, ", axis_types=(");
        for (int a = 0; a < m->naxes && n < len; a++)
            n += (size_t)snprintf(buf + n, len - n, "%s%s", a ? ", " : "",
                                  m->auto_axes >> a & 1 ? "Auto" : "Explicit");
        if (n < len)
            n += (size_t)snprintf(buf + n, len - n, ")");
    }
    if (n < len)
        snprintf(buf + n, len - n, ")");
    return buf;
}
