/* cmd_online: what the online subcommands of shmapctl (cmd_cluster.c,
 * cmd_put.c, cmd_array.c) share: the connection options (--target / $SHMAP_TARGET,
 * --token / $SHMAP_TOKEN, --tls-ca/--tls-cert/--tls-key / $SHMAP_TLS_*), the sharding options
 * (--mesh, --devices, --spec), a progress bar, and printers for array descriptions. */
#ifndef CMD_ONLINE_H
#define CMD_ONLINE_H

#include <getopt.h>
#include <jansson.h>

#include "cli.h"
#include "shmap.h"

#define CLI_DEFAULT_TARGET "localhost:7070"

/* Long-option values shared by every online command (getopt_long codes). */
enum {
    OPT_TARGET = 1000,
    OPT_TOKEN,
    OPT_JSON,
    OPT_MESH,
    OPT_DEVICES,
    OPT_SPEC,
    OPT_NAME,
    OPT_SHAPE,
    OPT_DTYPE,
    OPT_PROCESS,
    OPT_GLOBAL_SHAPE,
    OPT_DEADLINE,
    OPT_DEVICE,
    OPT_REPLICAS,
    OPT_HELP,
    OPT_TLS_CA,
    OPT_TLS_CERT,
    OPT_TLS_KEY,
};

#define CLI_CONN_OPTIONS                                                                           \
    {"target", required_argument, NULL, OPT_TARGET},                                               \
        {"token", required_argument, NULL, OPT_TOKEN},                                             \
        {"tls-ca", required_argument, NULL, OPT_TLS_CA},                                           \
        {"tls-cert", required_argument, NULL, OPT_TLS_CERT},                                       \
        {"tls-key", required_argument, NULL, OPT_TLS_KEY},                                         \
    {                                                                                              \
        "help", no_argument, NULL, OPT_HELP                                                        \
    }

#define CLI_CONN_HELP                                                                              \
    "      --target HOST:PORT  coordinator address (env SHMAP_TARGET, default localhost:7070)\n"   \
    "      --token TOKEN       shared secret (env SHMAP_TOKEN)\n"                                  \
    "      --tls-ca FILE       TLS: the CA that signs the coordinator's certificate (env\n"        \
    "                          SHMAP_TLS_CA); unset: plaintext\n"                                  \
    "      --tls-cert FILE     with --tls-key: a client certificate of the cluster's CA (env\n"    \
    "                          SHMAP_TLS_CERT) for direct transfers to workers; without\n"         \
    "                          one, data goes through the coordinator\n"                           \
    "      --tls-key FILE      its private key (env SHMAP_TLS_KEY)\n"                              \
    "  -h, --help              show this help\n"

/* Connection settings of one invocation. */
typedef struct {
    const char *target;
    const char *token;
    const char *tls_ca, *tls_cert, *tls_key; /* NULL: none */
    int show_progress;                       /* stderr is a terminal */
    int64_t last_draw;                       /* progress bar state */
} cli_conn;

/* Fills target, token and TLS files from the environment (options
 * override later). */
void cli_conn_init(cli_conn *cc);
/* Takes a connection option (getopt code ch, value arg: --target, --token,
 * --tls-*) into cc; returns 1 if ch was one, else 0. */
int cli_conn_opt(cli_conn *cc, int ch, const char *arg);
/* What an online command's option loop does with an option ch (from
 * getopt_long with ":h", optarg its value) that is none of its own: a
 * connection option goes into cc (returns 0); -h or --help prints help on
 * stdout (returns -1); anything else is the usage error of
 * cli_getopt_error (returns its code). */
int cli_conn_common_opt(cli_conn *cc, int ch, const char *help, char **argv);
/* The value of option --opt of command cmd, a number of milliseconds from
 * 0 to max, into *out: 0, or after the usage error CLI_EXIT_USAGE. */
int cli_ms_opt(const char *cmd, const char *opt, const char *text, int64_t max, int64_t *out);
/* Connects; on failure prints the sentence and returns CLI_EXIT_INVALID
 * (*out NULL). The client draws a progress bar on stderr for transfers over
 * 8 MB when stderr is a terminal. */
int cli_conn_open(cli_conn *cc, sm_client **out);

/* The sharding options of put, put-shards, put-local and reshard. The ref
 * points into this struct. */
typedef struct {
    const char *mesh_text;
    const char *devices_text;
    const char *spec_text;
    sm_mesh mesh;
    int32_t devices[SM_MAX_DEVICES];
    sm_sharding_ref ref;
} cli_sharding;

/* Builds sh->ref from the texts: a mesh with '=' is inline ("i=4,j=2",
 * default device order unless --devices), all digits a mesh id, else a mesh
 * name. The spec is required. Errors: one sentence, returns
 * CLI_EXIT_USAGE (missing option) or CLI_EXIT_INVALID (bad value), else 0. */
int cli_sharding_build(const char *cmd, cli_sharding *sh);

/* Options of one online command, parsed by cli_args_parse. */
enum {
    CLI_A_JSON = 1 << 0,
    CLI_A_SHARDING = 1 << 1, /* --mesh --devices --spec */
    CLI_A_NAME = 1 << 2,
    CLI_A_SHAPE = 1 << 3,
    CLI_A_DTYPE = 1 << 4,
    CLI_A_PROCESS = 1 << 5,
    CLI_A_GLOBAL = 1 << 6,
    CLI_A_DEADLINE = 1 << 7,
    CLI_A_DEVICE = 1 << 8,
    CLI_A_REPLICAS = 1 << 9,
};

typedef struct {
    cli_conn cc;
    int json;
    cli_sharding sh;
    const char *name, *shape, *dtype, *global_shape;
    int process, has_process;
    int64_t deadline_ms;
    int32_t device;
    int has_device;
    int replicas; /* --replicas; 0: not given */
    int npos;
    char **pos; /* positional arguments (into argv) */
} cli_args;

/* Parses the options of argv (argv[0] is the command) allowed by the
 * CLI_A_* mask (connection options and --help are always allowed), and
 * checks that there are between min_pos and max_pos positional arguments.
 * Returns -1 after printing help (exit 0), a CLI_EXIT_* error code after
 * printing the error, or 0. */
int cli_args_parse(int argc, char **argv, unsigned allowed, const char *help, int min_pos,
                   int max_pos, cli_args *a);

/* JSON object of an array description: name, id, dtype, shape, shard_shape,
 * type, mesh {axes, sizes, devices}, mesh_id, spec, state, error, bytes,
 * devices [{device, worker, address, coords, index, replica_id, present}]. */
json_t *cli_json_array(const sm_array_info *a);
/* One line: "NAME (id N): TYPE, STATE". */
void cli_print_array_line(const sm_array_info *a);
/* The end of a command that makes an array (put, reshard, load): e's error
 * (exit CLI_EXIT_INVALID), else the new array as one line or, with json,
 * its JSON object, and *info freed. Returns the exit code. */
int cli_array_made(sm_err e, const char *err, int json, sm_array_info *info);
/* The full text description (describe), diagram included. */
int cli_print_array(const sm_array_info *a);
/* "name (id N)" or "id N" into buf. */
const char *cli_array_label(const sm_array_info *a, char *buf, size_t len);

/* Prints a job's description (state, timings, outputs when done, why it
 * failed or was cancelled), or with json the object {job, state,
 * queued_us, run_us, outputs: [{name, id, type, shape, dtype}], error}.
 * Returns CLI_EXIT_OK. */
int cli_job_report(const sm_job_info *info, int json);

#endif
