/* sm_config: a program's settings as a table of rows (name, type, default,
 * environment variable, help) that feeds both command-line flags and
 * environment variables, and prints --help. Precedence: flag > environment >
 * default. The caller owns the table (usually a static const array of rows in
 * main.c) and an sm_config_values array of the same length that receives the
 * values; strings in it point into argv, the environment or the defaults and
 * live as long as those do. */
#ifndef SM_CONFIG_H
#define SM_CONFIG_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "sm_err.h"

typedef enum { SM_CFG_STRING, SM_CFG_INT, SM_CFG_BOOL } sm_config_type;

typedef struct {
    const char *name; /* flag name without dashes: "listen" → --listen */
    char short_name;  /* 0 for none */
    sm_config_type type;
    const char *def;  /* default as text; NULL = unset */
    const char *env;  /* environment variable, or NULL */
    const char *help; /* one sentence */
} sm_config_row;

typedef struct {
    const char *s; /* the text (NULL if unset) */
    int64_t i;     /* SM_CFG_INT value, or 1/0 for SM_CFG_BOOL */
    int set;       /* 1 if given by flag or environment */
} sm_config_value;

/* Fills vals[0..n) from defaults, the environment and argv (getopt_long;
 * a bool flag takes no argument). --help / -h prints usage to stdout and
 * returns SM_ECANCELLED so main can exit 0. Positional arguments are left in
 * argv at *first_positional (may be NULL if none are allowed: then a
 * positional argument is an error). Errors (unknown flag, bad integer) are
 * SM_EINVAL with a sentence naming the flag or variable. */
sm_err sm_config_parse(const sm_config_row *rows, size_t n, sm_config_value *vals, int argc,
                       char **argv, const char *usage, int *first_positional, char *err,
                       size_t errlen);

/* Prints "usage" then one line per row (flag, env, default, help). */
void sm_config_print_help(const sm_config_row *rows, size_t n, const char *usage, FILE *out);

#endif
