/* cmd_array: shmapctl get, get-shard, describe, reshard, rm and ls. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd_online.h"

static const char get_help[] =
    "Usage: shmapctl get NAME|ID OUT.npy\n"
    "\n"
    "Fetches a whole ready array into a .npy file. Each distinct shard is\n"
    "fetched once (from its lowest live replica) and written in place; only one\n"
    "shard is in memory at a time. A reference of only digits is an id.\n"
    "\n"
    "Options:\n" CLI_CONN_HELP "\n"
    "Example:\n"
    "  shmapctl get x out.npy\n";

static const char get_shard_help[] =
    "Usage: shmapctl get-shard NAME|ID --device D OUT.npy\n"
    "\n"
    "Fetches the shard one device holds into a .npy file (its shard shape).\n"
    "\n"
    "Options:\n"
    "      --device D          the device id\n" CLI_CONN_HELP "\n"
    "Example:\n"
    "  shmapctl get-shard x --device 3 shard3.npy\n";

/* get (shard 0: the whole array, written as it arrives) and get-shard
 * (shard 1: the shard of --device) into the .npy file named second. */
static int get_npy(int argc, char **argv, int shard)
{
    cli_args a;
    sm_client *c;
    sm_array *s = NULL;
    char err[512];
    int rc;

    if ((rc = cli_args_parse(argc, argv, shard ? CLI_A_DEVICE : 0,
                             shard ? get_shard_help : get_help, 2, 2, &a)))
        return rc < 0 ? CLI_EXIT_OK : rc;
    if (shard && !a.has_device)
        return cli_usage(argv[0], "--device is required");
    if ((rc = cli_conn_open(&a.cc, &c)))
        return rc;
    sm_array_ref r = sm_array_ref_parse(a.pos[0]);
    sm_err e = shard ? sm_client_get_shard(c, r, a.device, &s, err, sizeof err)
                     : sm_client_get_file(c, r, a.pos[1], err, sizeof err);
    sm_client_close(c);
    if (!e && shard)
        e = sm_npy_write(a.pos[1], s, err, sizeof err);
    sm_array_free(s);
    return e ? cli_fail(CLI_EXIT_INVALID, "%s", err) : CLI_EXIT_OK;
}

int cli_cmd_get(int argc, char **argv)
{
    return get_npy(argc, argv, 0);
}

int cli_cmd_get_shard(int argc, char **argv)
{
    return get_npy(argc, argv, 1);
}

static const char describe_help[] =
    "Usage: shmapctl describe NAME|ID [--json]\n"
    "\n"
    "Shows how an array is sharded: its JAX type string, shape, dtype, state,\n"
    "NamedSharding, every device's index [start, stop) with its worker and\n"
    "replica id, and a diagram of the layout.\n"
    "\n"
    "Options:\n"
    "      --json              print JSON: name, id, dtype, shape, type, mesh {axes,\n"
    "                          sizes, devices}, spec, state, devices [{device, worker,\n"
    "                          coords, index, replica_id}]\n" CLI_CONN_HELP "\n"
    "Example:\n"
    "  shmapctl describe x --json\n";

int cli_cmd_describe(int argc, char **argv)
{
    cli_args a;
    sm_client *c;
    sm_array_info info;
    char err[512];
    int rc;

    if ((rc = cli_args_parse(argc, argv, CLI_A_JSON, describe_help, 1, 1, &a)))
        return rc < 0 ? CLI_EXIT_OK : rc;
    if ((rc = cli_conn_open(&a.cc, &c)))
        return rc;
    sm_err e = sm_client_describe(c, sm_array_ref_parse(a.pos[0]), &info, err, sizeof err);
    sm_client_close(c);
    if (e)
        return cli_fail(CLI_EXIT_INVALID, "%s", err);
    rc = a.json ? cli_print_json(cli_json_array(&info)) : cli_print_array(&info);
    sm_array_info_free(&info);
    return rc;
}

static const char reshard_help[] =
    "Usage: shmapctl reshard NAME|ID --spec SPEC [--mesh AXES|MESH] [--devices IDS]\n"
    "                        [--name NEW] [--json]\n"
    "\n"
    "Creates a copy of an array with another sharding (jax.device_put(x, new));\n"
    "data moves worker to worker and the source is unchanged. Without --mesh the\n"
    "source's mesh is kept.\n"
    "\n"
    "Options:\n"
    "      --spec SPEC         the new PartitionSpec\n"
    "      --mesh AXES|MESH    the new mesh: inline (i=4,j=2) or a mesh name or id\n"
    "      --devices IDS       device order of an inline mesh\n"
    "      --name NEW          name of the new array\n"
    "      --json              print the new array's description as JSON\n" CLI_CONN_HELP "\n"
    "Example:\n"
    "  shmapctl reshard x --spec \"P(None, 'j')\" --name x2\n";

int cli_cmd_reshard(int argc, char **argv)
{
    cli_args a;
    sm_client *c;
    sm_array_info src, info;
    char err[512];
    int rc;
    sm_err e = SM_OK;

    if ((rc = cli_args_parse(argc, argv, CLI_A_JSON | CLI_A_SHARDING | CLI_A_NAME, reshard_help, 1,
                             1, &a)))
        return rc < 0 ? CLI_EXIT_OK : rc;
    if (a.sh.mesh_text) {
        if ((rc = cli_sharding_build(argv[0], &a.sh)))
            return rc;
    } else {
        if (a.sh.devices_text)
            return cli_usage(argv[0], "--devices goes with --mesh");
        if (!a.sh.spec_text)
            return cli_usage(argv[0], "--spec is required (the new PartitionSpec)");
        memset(&a.sh.ref, 0, sizeof a.sh.ref);
        if (sm_pspec_parse(a.sh.spec_text, &a.sh.ref.spec, err, sizeof err))
            return cli_fail(CLI_EXIT_INVALID, "%s", err);
    }
    if ((rc = cli_conn_open(&a.cc, &c)))
        return rc;
    sm_array_ref ref = sm_array_ref_parse(a.pos[0]);
    memset(&src, 0, sizeof src);
    memset(&info, 0, sizeof info);
    if (!a.sh.mesh_text) {
        /* Keep the source's mesh. */
        if (!(e = sm_client_describe(c, ref, &src, err, sizeof err))) {
            if (src.mesh_id.v) {
                a.sh.ref.mesh_id = src.mesh_id;
            } else {
                a.sh.mesh = src.sharding.mesh;
                a.sh.ref.mesh = &a.sh.mesh;
            }
        }
    }
    if (!e)
        e = sm_client_reshard(c, ref, &a.sh.ref, a.name, &info, err, sizeof err);
    sm_array_info_free(&src);
    sm_client_close(c);
    return cli_array_made(e, err, a.json, &info);
}

static const char rm_help[] =
    "Usage: shmapctl rm NAME|ID ...\n"
    "\n"
    "Deletes arrays: they leave the registry and their workers free the memory.\n"
    "\n"
    "Options:\n" CLI_CONN_HELP "\n"
    "Example:\n"
    "  shmapctl rm x\n";

int cli_cmd_rm(int argc, char **argv)
{
    cli_args a;
    sm_client *c;
    char err[512];
    int rc;

    if ((rc = cli_args_parse(argc, argv, 0, rm_help, 1, -1, &a)))
        return rc < 0 ? CLI_EXIT_OK : rc;
    if ((rc = cli_conn_open(&a.cc, &c)))
        return rc;
    for (int i = 0; i < a.npos && !rc; i++)
        if (sm_client_delete(c, sm_array_ref_parse(a.pos[i]), err, sizeof err))
            rc = cli_fail(CLI_EXIT_INVALID, "%s", err);
    sm_client_close(c);
    return rc;
}

static const char ls_help[] =
    "Usage: shmapctl ls [--json]\n"
    "\n"
    "Lists the arrays on the service: id, name, type string, state and sharding.\n"
    "\n"
    "Options:\n"
    "      --json              print a JSON list of array descriptions\n" CLI_CONN_HELP "\n"
    "Example:\n"
    "  shmapctl ls --json\n";

int cli_cmd_ls(int argc, char **argv)
{
    cli_args a;
    sm_client *c;
    sm_array_info *list = NULL;
    char err[512], spec[256], mb[512];
    int rc, n = 0;

    if ((rc = cli_args_parse(argc, argv, CLI_A_JSON, ls_help, 0, 0, &a)))
        return rc < 0 ? CLI_EXIT_OK : rc;
    if ((rc = cli_conn_open(&a.cc, &c)))
        return rc;
    sm_err e = sm_client_list(c, &list, &n, err, sizeof err);
    sm_client_close(c);
    if (e)
        return cli_fail(CLI_EXIT_INVALID, "%s", err);
    if (a.json) {
        json_t *root = json_array();
        for (int i = 0; i < n; i++)
            json_array_append_new(root, cli_json_array(&list[i]));
        rc = cli_print_json(root);
    } else {
        printf("%-6s %-16s %-24s %-8s %s\n", "id", "name", "type", "state", "sharding");
        for (int i = 0; i < n; i++)
            printf("%-6llu %-16s %-24s %-8s %s %s\n", (unsigned long long)list[i].id.v,
                   list[i].name[0] ? list[i].name : "-", list[i].type,
                   sm_array_state_name(list[i].state),
                   sm_mesh_format(&list[i].sharding.mesh, mb, sizeof mb),
                   sm_pspec_format(&list[i].sharding.spec, spec, sizeof spec));
    }
    sm_array_info_list_free(list, n);
    return rc;
}
