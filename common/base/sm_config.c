#include "sm_config.h"

#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

static sm_err sm_config_set(const sm_config_row *row, sm_config_value *v, const char *text,
                            const char *source, char *err, size_t errlen)
{
    v->s = text;
    v->set = 1;
    if (row->type == SM_CFG_INT) {
        char *end = NULL;
        errno = 0;
        long long x = strtoll(text, &end, 10);
        if (errno || !end || end == text || *end)
            return sm_fail(err, errlen, SM_EINVAL, "%s expects an integer, got '%s'", source, text);
        v->i = x;
    } else if (row->type == SM_CFG_BOOL) {
        if (!strcmp(text, "1") || !strcmp(text, "true") || !strcmp(text, "yes") ||
            !strcmp(text, "on"))
            v->i = 1;
        else if (!strcmp(text, "0") || !strcmp(text, "false") || !strcmp(text, "no") ||
                 !strcmp(text, "off"))
            v->i = 0;
        else
            return sm_fail(err, errlen, SM_EINVAL, "%s expects true or false, got '%s'", source,
                           text);
    }
    return SM_OK;
}

void sm_config_print_help(const sm_config_row *rows, size_t n, const char *usage, FILE *out)
{
    fprintf(out, "%s\n\nOptions:\n", usage);
    for (size_t k = 0; k < n; k++) {
        const sm_config_row *r = &rows[k];
        char flag[64];
        if (r->short_name)
            snprintf(flag, sizeof flag, "-%c, --%s%s", r->short_name, r->name,
                     r->type == SM_CFG_BOOL ? "" : " VALUE");
        else
            snprintf(flag, sizeof flag, "    --%s%s", r->name,
                     r->type == SM_CFG_BOOL ? "" : " VALUE");
        fprintf(out, "  %-30s %s", flag, r->help);
        if (r->def)
            fprintf(out, " (default: %s)", r->def);
        if (r->env)
            fprintf(out, " [env %s]", r->env);
        fputc('\n', out);
    }
    fprintf(out, "  %-30s %s\n", "-h, --help", "Print this help and exit.");
}

sm_err sm_config_parse(const sm_config_row *rows, size_t n, sm_config_value *vals, int argc,
                       char **argv, const char *usage, int *first_positional, char *err,
                       size_t errlen)
{
    sm_err rc = SM_OK;
    struct option *opts = calloc(n + 2, sizeof *opts);
    char shorts[2 * 64 + 4];
    size_t ns = 0;
    if (!opts)
        return sm_fail(err, errlen, SM_ENOMEM, "out of memory parsing options");
    shorts[ns++] = '+'; /* stop at the first positional argument */
    shorts[ns++] = ':';
    shorts[ns++] = 'h';
    for (size_t k = 0; k < n; k++) {
        vals[k] = (sm_config_value){0};
        if (rows[k].def) {
            rc = sm_config_set(&rows[k], &vals[k], rows[k].def, rows[k].name, err, errlen);
            if (rc)
                goto fail;
            vals[k].set = 0;
        }
        const char *e = rows[k].env ? getenv(rows[k].env) : NULL;
        if (e && *e) {
            char src[96];
            snprintf(src, sizeof src, "environment variable %s", rows[k].env);
            rc = sm_config_set(&rows[k], &vals[k], e, src, err, errlen);
            if (rc)
                goto fail;
        }
        opts[k].name = rows[k].name;
        opts[k].has_arg = rows[k].type == SM_CFG_BOOL ? no_argument : required_argument;
        opts[k].val = 256 + (int)k;
        if (rows[k].short_name && ns + 2 < sizeof shorts - 1) {
            shorts[ns++] = rows[k].short_name;
            if (rows[k].type != SM_CFG_BOOL)
                shorts[ns++] = ':';
        }
    }
    opts[n].name = "help";
    opts[n].val = 'h';
    shorts[ns] = 0;

    optind = 1;
    opterr = 0;
    for (;;) {
        int li = -1;
        int c = getopt_long(argc, argv, shorts, opts, &li);
        if (c == -1)
            break;
        if (c == 'h') {
            sm_config_print_help(rows, n, usage, stdout);
            rc = SM_ECANCELLED;
            goto fail;
        }
        if (c == '?' || c == ':') {
            const char *bad = argv[optind - 1];
            rc = sm_fail(err, errlen, SM_EINVAL,
                         c == ':' ? "option %s needs a value (see --help)"
                                  : "unknown option %s (see --help)",
                         bad);
            goto fail;
        }
        size_t k = (size_t)-1;
        if (c >= 256)
            k = (size_t)(c - 256);
        else
            for (size_t j = 0; j < n; j++)
                if (rows[j].short_name == c)
                    k = j;
        if (k >= n)
            continue;
        char src[96];
        snprintf(src, sizeof src, "--%s", rows[k].name);
        if (rows[k].type == SM_CFG_BOOL) {
            vals[k].i = 1;
            vals[k].s = "true";
            vals[k].set = 1;
        } else {
            rc = sm_config_set(&rows[k], &vals[k], optarg, src, err, errlen);
            if (rc)
                goto fail;
        }
    }
    if (first_positional)
        *first_positional = optind;
    else if (optind < argc)
        rc = sm_fail(err, errlen, SM_EINVAL, "unexpected argument '%s' (see --help)", argv[optind]);
fail:
    free(opts);
    return rc;
}
