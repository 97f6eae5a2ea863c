/* shmapctl: helpers shared by the commands (see cli.h). */
#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

int cli_fail(int code, const char *fmt, ...)
{
    va_list ap;
    fputs("shmapctl: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return code;
}

int cli_usage(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "shmapctl: %s: ", cmd);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "; run 'shmapctl %s --help' for usage\n", cmd);
    return CLI_EXIT_USAGE;
}

int cli_getopt(int argc, char **argv, const struct option *opts, const char *help, int first)
{
    if (first) {
        optind = 1;
        opterr = 0;
    }
    int c = getopt_long(argc, argv, ":h", opts, NULL);
    if (c != 'h')
        return c;
    fputs(help, stdout);
    return CLI_OPT_HELP;
}

int cli_getopt_error(const char *cmd, int c, char **argv)
{
    const char *arg = argv[optind - 1];
    if (c == ':')
        return cli_usage(cmd, "option '%s' needs a value", arg);
    if (optopt)
        return cli_usage(cmd, "unknown option '-%c'", optopt);
    return cli_usage(cmd, "unknown option '%s'", arg);
}

sm_err cli_parse_ids(const char *text, int32_t *out, int max, int *n, char *err, size_t errlen)
{
    const char *p = text;
    int k = 0;
    for (;;) {
        while (*p == ' ')
            p++;
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 0 || v > INT32_MAX)
            return sm_fail(err, errlen, SM_EINVAL,
                           "device list \"%s\" needs non-negative integers at column %d", text,
                           (int)(p - text) + 1);
        if (k == max)
            return sm_fail(err, errlen, SM_EINVAL, "device list \"%s\" has more than %d ids", text,
                           max);
        out[k++] = (int32_t)v;
        p = end;
        while (*p == ' ')
            p++;
        if (!*p)
            break;
        if (*p != ',')
            return sm_fail(err, errlen, SM_EINVAL,
                           "device list \"%s\": expected ',' at column %d, found '%c'", text,
                           (int)(p - text) + 1, *p);
        p++;
    }
    *n = k;
    return SM_OK;
}

sm_err cli_parse_procs(const char *text, cli_procs *out, char *err, size_t errlen)
{
    char buf[8192];
    if (strlen(text) >= sizeof buf)
        return sm_fail(err, errlen, SM_EINVAL, "the process device list is too long");
    snprintf(buf, sizeof buf, "%s", text);
    memset(out, 0, sizeof *out);
    char *save = NULL;
    int nparts = 0;
    for (char *s = buf;; s = NULL) {
        char *part = strtok_r(s, ";", &save);
        if (!part)
            break;
        if (out->nprocs == SM_MAX_DEVICES)
            return sm_fail(err, errlen, SM_EINVAL, "more than %d processes", SM_MAX_DEVICES);
        int n = 0;
        char sub[256];
        sm_err rc = cli_parse_ids(part, out->devs + out->total, SM_MAX_DEVICES - out->total, &n,
                                  sub, sizeof sub);
        if (rc)
            return sm_fail(err, errlen, rc, "process %d in \"%s\": %s", nparts, text, sub);
        out->ndev[out->nprocs++] = n;
        out->total += n;
        nparts++;
    }
    if (out->nprocs == 0)
        return sm_fail(err, errlen, SM_EINVAL,
                       "process device list \"%s\" is empty; write e.g. \"0,1;2,3\"", text);
    return SM_OK;
}

sm_err cli_parse_shape(const char *opt, const char *text, sm_shape *out, char *err, size_t errlen)
{
    char sub[256];
    sm_err rc = sm_shape_parse(text, out, sub, sizeof sub);
    if (rc)
        return sm_fail(err, errlen, rc, "%s \"%s\" is not a shape: %s", opt, text, sub);
    return SM_OK;
}

json_t *cli_json_shape(const sm_shape *s)
{
    json_t *a = json_array();
    for (int d = 0; a && d < s->rank; d++)
        json_array_append_new(a, json_integer(s->dims[d]));
    return a;
}

json_t *cli_json_index(const sm_index *ix)
{
    json_t *a = json_array();
    for (int d = 0; a && d < ix->rank; d++)
        json_array_append_new(
            a, json_pack("[II]", (json_int_t)ix->r[d].start, (json_int_t)ix->r[d].stop));
    return a;
}

json_t *cli_json_mesh(const sm_mesh *m)
{
    json_t *axes = json_array(), *sizes = json_array(), *devs = json_array();
    for (int a = 0; a < m->naxes; a++) {
        json_array_append_new(axes, json_string(m->names[a]));
        json_array_append_new(sizes, json_integer(m->sizes[a]));
    }
    json_t *types = json_array();
    for (int a = 0; a < m->naxes; a++)
        json_array_append_new(types, json_string(m->auto_axes >> a & 1 ? "Auto" : "Explicit"));
    for (int i = 0; i < m->ndevices; i++)
        json_array_append_new(devs, json_integer(m->devices[i]));
    return json_pack("{s:o, s:o, s:o, s:o}", "axes", axes, "sizes", sizes, "axis_types", types,
                     "devices", devs);
}

int cli_print_json(json_t *root)
{
    if (!root)
        return cli_fail(CLI_EXIT_INVALID, "out of memory building the JSON output");
    char *text = json_dumps(root, JSON_PRESERVE_ORDER);
    json_decref(root);
    if (!text)
        return cli_fail(CLI_EXIT_INVALID, "out of memory formatting the JSON output");
    puts(text);
    free(text);
    return CLI_EXIT_OK;
}
