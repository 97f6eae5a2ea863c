/* cmd_ckpt: shmapctl save and load (checkpoints, docs/service.md). */
#include <stdio.h>
#include <string.h>

#include "cmd_online.h"

static const char save_help[] =
    "Usage: shmapctl save NAME|ID DIR [--json]\n"
    "\n"
    "Saves a ready array as a checkpoint: the workers holding it write its\n"
    "distinct shards straight into DIR in parallel (one .npy file per distinct\n"
    "shard, replicas once), then DIR/manifest.json (dtype, shape, sharding, each\n"
    "file's index box, size and xxHash3-64). No data passes through shmapctl or\n"
    "the coordinator, so DIR must be visible to every worker at the same path\n"
    "(the same host or a shared filesystem); a relative DIR is made absolute\n"
    "against the current directory. DIR is created if missing; one that holds a\n"
    "manifest already is refused. An interrupted save leaves no manifest.\n"
    "\n"
    "Options:\n"
    "      --json              print {array, dir, files, bytes}\n" CLI_CONN_HELP "\n"
    "Example:\n"
    "  shmapctl save grid /data/ckpt/grid\n";

int cli_cmd_save(int argc, char **argv)
{
    cli_args a;
    sm_client *c;
    char err[512];
    int64_t bytes = 0;
    int files = 0, rc;

    if ((rc = cli_args_parse(argc, argv, CLI_A_JSON, save_help, 2, 2, &a)))
        return rc < 0 ? CLI_EXIT_OK : rc;
    if ((rc = cli_conn_open(&a.cc, &c)))
        return rc;
    sm_err e =
        sm_client_save(c, sm_array_ref_parse(a.pos[0]), a.pos[1], &bytes, &files, err, sizeof err);
    sm_client_close(c);
    if (e)
        return cli_fail(CLI_EXIT_INVALID, "%s", err);
    if (a.json) {
        json_t *o = json_object();
        json_object_set_new(o, "array", json_string(a.pos[0]));
        json_object_set_new(o, "dir", json_string(a.pos[1]));
        json_object_set_new(o, "files", json_integer(files));
        json_object_set_new(o, "bytes", json_integer(bytes));
        return cli_print_json(o);
    }
    printf("saved %s into %s: %d file%s, %lld bytes\n", a.pos[0], a.pos[1], files,
           files == 1 ? "" : "s", (long long)bytes);
    return CLI_EXIT_OK;
}

static const char load_help[] =
    "Usage: shmapctl load DIR --mesh AXES|MESH [--devices IDS] --spec SPEC\n"
    "                     [--name NAME] [--json]\n"
    "\n"
    "Loads a checkpoint written by save as a new array with any sharding that\n"
    "fits its shape (not only the one it was saved with): each worker reads the\n"
    "stored files its devices need, checking every file's size, xxHash3-64 and\n"
    "header against the manifest first. A damaged checkpoint (a .npy file\n"
    "truncated, corrupted or missing, the manifest missing or malformed) is\n"
    "refused with DATA_LOSS naming the file. DIR is resolved as for save.\n"
    "\n"
    "Options:\n"
    "      --mesh AXES|MESH    inline mesh (i=4,j=2) or the name or id of a mesh\n"
    "      --devices IDS       device order of an inline mesh\n"
    "      --spec SPEC         PartitionSpec, e.g. \"P('i')\"\n"
    "      --name NAME         name of the new array\n"
    "      --json              print the new array's description as JSON\n" CLI_CONN_HELP "\n"
    "Example:\n"
    "  shmapctl load /data/ckpt/grid --mesh i=8 --spec \"P('i')\" --name grid2\n";

int cli_cmd_load(int argc, char **argv)
{
    cli_args a;
    sm_client *c;
    sm_array_info info;
    char err[512];
    int rc;

    if ((rc = cli_args_parse(argc, argv, CLI_A_JSON | CLI_A_SHARDING | CLI_A_NAME, load_help, 1, 1,
                             &a)))
        return rc < 0 ? CLI_EXIT_OK : rc;
    if ((rc = cli_sharding_build(argv[0], &a.sh)) || (rc = cli_conn_open(&a.cc, &c)))
        return rc;
    memset(&info, 0, sizeof info);
    sm_err e = sm_client_load(c, a.pos[0], &a.sh.ref, a.name, &info, err, sizeof err);
    sm_client_close(c);
    return cli_array_made(e, err, a.json, &info);
}
