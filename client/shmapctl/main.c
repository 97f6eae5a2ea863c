/* shmapctl: subcommand dispatch. The command table comes from
 * CLI_COMMAND_LIST in cli.h, so adding a command adds no code here. */
#include <stdio.h>
#include <string.h>

#include "cli.h"

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

int main(int argc, char **argv)
{
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
