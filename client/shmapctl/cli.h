/* shmapctl: the command line. Declarations shared by main.c (dispatch) and
 * the cmd_*.c files (one file per group of subcommands).
 *
 * Adding a subcommand is one row in CLI_COMMAND_LIST plus its function
 * cli_cmd_<fn>(argc, argv) in a cmd_*.c file. The function gets argv[0] =
 * the command name and the command's own options after it; it answers
 * --help on stdout with exit 0 and returns one of the CLI_EXIT_* codes.
 * Errors are one sentence on stderr prefixed "shmapctl: " (cli_fail). */
#ifndef SM_CLI_H
#define SM_CLI_H

#include <getopt.h>
#include <jansson.h>
#include <stdint.h>

#include "sm_sharding.h"

enum {
    CLI_EXIT_OK = 0,
    CLI_EXIT_INVALID = 1, /* invalid input: bad spec, not divisible, ... */
    CLI_EXIT_USAGE = 2,   /* usage: unknown option, missing option, ... */
};

/* X(fn, name, one-line summary) */
#define CLI_COMMAND_LIST(X)                                                                        \
    X(sharding, "sharding", "show how a NamedSharding lays out an array (offline)")                \
    X(plan_load, "plan-load",                                                                      \
      "plan make_array_from_process_local_data: global shape and local slices (offline)")          \
    X(devices, "devices", "list the workers, their devices and the bytes they hold")               \
    X(mesh, "mesh", "create, list and describe device meshes")                                     \
    X(put, "put", "upload a .npy array with a NamedSharding (device_put)")                         \
    X(put_shards, "put-shards", "build an array from one .npy shard per device")                   \
    X(put_local, "put-local", "send one process's part of a process-local upload")                 \
    X(get, "get", "fetch a whole array into a .npy file")                                          \
    X(get_shard, "get-shard", "fetch one device's shard into a .npy file")                         \
    X(describe, "describe", "show an array's type string, index map and layout")                   \
    X(reshard, "reshard", "copy an array to another sharding")                                     \
    X(save, "save", "save an array as a checkpoint directory (workers write it)")                  \
    X(load, "load", "load a checkpoint directory onto any sharding")                               \
    X(rm, "rm", "delete arrays and free their shards")                                             \
    X(ls, "ls", "list the arrays on the service")                                                  \
    X(check, "check", "parse and verify a shard_map program and print each value's block type")    \
    X(run, "run", "run a shard_map program (--local: in this process) on .npy arguments")          \
    X(job, "job", "follow a submitted job: status, wait, cancel")

#define CLI_DECLARE(fn, name, summary) int cli_cmd_##fn(int argc, char **argv);
CLI_COMMAND_LIST(CLI_DECLARE)
#undef CLI_DECLARE

/* Prints "shmapctl: <sentence>\n" on stderr; returns code. */
int cli_fail(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* A usage error of command cmd: the sentence, then a pointer to --help.
 * Returns CLI_EXIT_USAGE. */
int cli_usage(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Reports what getopt_long returned for an unknown option ('?') or a
 * missing argument (':'), given optstring starting with ':'. Returns
 * CLI_EXIT_USAGE. */
int cli_getopt_error(const char *cmd, int c, char **argv);

/* What cli_getopt returns after printing the help. */
#define CLI_OPT_HELP (-2)
/* The next option of a command's argv by opts (getopt_long with ":h", its
 * own messages off; first: 1 on the first call, which starts over): the
 * option, -1 at the end, CLI_OPT_HELP after printing help to stdout for
 * -h or --help, or ':' / '?' for cli_getopt_error. */
int cli_getopt(int argc, char **argv, const struct option *opts, const char *help, int first);

/* Parses "0,1,2,3" into out (at most max ids); *n gets the count. */
sm_err cli_parse_ids(const char *text, int32_t *out, int max, int *n, char *err, size_t errlen);

/* Which devices each process owns, parsed from "0,1;2,3;4,5;6,7". */
typedef struct {
    int nprocs;
    int ndev[SM_MAX_DEVICES];
    int32_t devs[SM_MAX_DEVICES];
    int total;
} cli_procs;

sm_err cli_parse_procs(const char *text, cli_procs *out, char *err, size_t errlen);

/* Parses a shape option ("8,16", "[8,16]", "" for a scalar); the message
 * names the option. */
sm_err cli_parse_shape(const char *opt, const char *text, sm_shape *out, char *err, size_t errlen);

/* JSON builders; each returns a new reference (NULL on allocation
 * failure). */
json_t *cli_json_shape(const sm_shape *s);
json_t *cli_json_index(const sm_index *ix); /* [[start, stop], ...] */
json_t *cli_json_mesh(const sm_mesh *m);    /* {axes, sizes, devices} */

/* Prints root (one line, keys in insertion order) on stdout and releases
 * it. Returns CLI_EXIT_OK, or CLI_EXIT_INVALID if root is NULL. */
int cli_print_json(json_t *root);

#endif
