/* shmapctl: subcommand dispatch. The command table comes from
 * CLI_COMMAND_LIST in cli.h, so adding a command adds no code here. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "sm_rpc.h"

typedef struct {
    const char *name;
    const char *summary;
    int (*run)(int argc, char **argv);
} cli_command;

#define CLI_ROW(fn, name, summary) {name, summary, cli_cmd_##fn},
static const cli_command cli_commands[] = {CLI_COMMAND_LIST(CLI_ROW)};
#undef CLI_ROW

#define CLI_NCOMMANDS ((int)(sizeof cli_commands / sizeof cli_commands[0]))

static void cli_print_usage(FILE *f)
{
    fprintf(f, "Usage: shmapctl <command> [options]\n"
               "       shmapctl <command> --help\n"
               "       shmapctl help <command>\n"
               "\n"
               "shmapctl talks to a shmap service and answers questions about\n"
               "NamedShardings offline, exactly as JAX would.\n"
               "\n"
               "Commands:\n");
    for (int i = 0; i < CLI_NCOMMANDS; i++)
        fprintf(f, "  %-14s %s\n", cli_commands[i].name, cli_commands[i].summary);
    fprintf(f, "\n"
               "Global options (before or after the command): --target HOST:PORT\n"
               "(env SHMAP_TARGET, default localhost:7070), --token TOKEN (env SHMAP_TOKEN),\n"
               "--tls-ca FILE (env SHMAP_TLS_CA: TLS to a coordinator whose certificate this CA\n"
               "signs; unset: plaintext), --tls-cert FILE and --tls-key FILE (env SHMAP_TLS_CERT,\n"
               "SHMAP_TLS_KEY: a client certificate of the cluster's CA, for direct transfers\n"
               "to workers; without one, data goes through the coordinator).\n"
               "\n"
               "Exit codes: 0 success, 1 invalid input, 2 usage error.\n"
               "Example:\n"
               "  shmapctl sharding --mesh i=4,j=2 --spec \"P('i','j')\" --shape 8,16\n");
}

static const cli_command *cli_find(const char *name)
{
    for (int i = 0; i < CLI_NCOMMANDS; i++)
        if (strcmp(cli_commands[i].name, name) == 0)
            return &cli_commands[i];
    return NULL;
}

/* Global options before the command: --target/--token/--tls-* (also
 * --target=X) set SHMAP_TARGET/SHMAP_TOKEN/SHMAP_TLS_* for the command, so both
 * `shmapctl --target H:P devices` and `shmapctl devices --target H:P` work.
 * Returns how many arguments were consumed, or -1 after a usage error. */
static int cli_global_options(int argc, char **argv)
{
    static const struct {
        const char *opt, *env;
    } globals[] = {{"--target", "SHMAP_TARGET"},
                   {"--token", "SHMAP_TOKEN"},
                   {"--tls-ca", "SHMAP_TLS_CA"},
                   {"--tls-cert", "SHMAP_TLS_CERT"},
                   {"--tls-key", "SHMAP_TLS_KEY"}};
    int k = 1;
    while (k < argc && argv[k][0] == '-') {
        int matched = 0;
        for (size_t g = 0; g < sizeof globals / sizeof globals[0]; g++) {
            size_t n = strlen(globals[g].opt);
            if (strncmp(argv[k], globals[g].opt, n) != 0)
                continue;
            const char *v = NULL;
            if (argv[k][n] == '=')
                v = argv[k] + n + 1;
            else if (argv[k][n] == 0 && k + 1 < argc)
                v = argv[++k];
            else if (argv[k][n] == 0) {
                cli_fail(CLI_EXIT_USAGE, "option %s needs a value", globals[g].opt);
                return -1;
            } else
                continue;
            setenv(globals[g].env, v, 1);
            matched = 1;
            break;
        }
        if (!matched)
            break;
        k++;
    }
    return k - 1;
}

int main(int argc, char **argv)
{
    sm_rpc_malloc_tune();
    sm_rpc_log_through_sm();
    int used = cli_global_options(argc, argv);
    if (used < 0)
        return CLI_EXIT_USAGE;
    argv[used] = argv[0];
    argc -= used;
    argv += used;
    if (argc < 2) {
        cli_print_usage(stderr);
        return CLI_EXIT_USAGE;
    }
    const char *name = argv[1];
    if (strcmp(name, "--help") == 0 || strcmp(name, "-h") == 0 ||
        (strcmp(name, "help") == 0 && argc == 2)) {
        cli_print_usage(stdout);
        return CLI_EXIT_OK;
    }
    if (strcmp(name, "help") == 0) {
        const cli_command *c = cli_find(argv[2]);
        if (!c)
            return cli_fail(CLI_EXIT_USAGE,
                            "unknown command '%s'; run 'shmapctl --help' for the list", argv[2]);
        char *help_argv[] = {argv[2], "--help", NULL};
        return c->run(2, help_argv);
    }
    const cli_command *c = cli_find(name);
    if (!c)
        return cli_fail(CLI_EXIT_USAGE, "unknown command '%s'; run 'shmapctl --help' for the list",
                        name);
    return c->run(argc - 1, argv + 1);
}
