/* cmd_put: shmapctl put, put-shards and put-local (uploads). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd_online.h"

/* Prints the result of an upload and releases the client. */
static int put_report(sm_client *c, sm_err e, const char *err, int json, sm_array_info *info)
{
    sm_client_close(c);
    return cli_array_made(e, err, json, info);
}

static const char put_help[] =
    "Usage: shmapctl put FILE.npy --mesh AXES|MESH [--devices IDS] --spec SPEC\n"
    "                    [--name NAME] [--replicas 2] [--json]\n"
    "\n"
    "Uploads a whole .npy array with a NamedSharding (jax.device_put): every\n"
    "device receives its slice. The file is streamed, never read whole.\n"
    "\n"
    "Options:\n"
    "      --mesh AXES|MESH    inline mesh (i=4,j=2) or the name or id of a mesh\n"
    "      --devices IDS       device order of an inline mesh (default: the service's)\n"
    "      --spec SPEC         PartitionSpec, e.g. \"P('i', 'j')\"\n"
    "      --name NAME         unique name other clients can attach to\n"
    "      --replicas 2        also keep a copy of every block that one worker alone\n"
    "                          holds on another worker, so the array survives the\n"
    "                          loss of either (default 1: the mesh's own devices)\n"
    "      --json              print the array's description as JSON\n" CLI_CONN_HELP "\n"
    "Example:\n"
    "  shmapctl put x.npy --mesh i=4,j=2 --spec \"P('i','j')\" --name x --replicas 2\n";

int cli_cmd_put(int argc, char **argv)
{
    cli_args a;
    sm_client *c;
    sm_array_info info;
    char err[512];
    int rc;

    if ((rc = cli_args_parse(argc, argv, CLI_A_JSON | CLI_A_SHARDING | CLI_A_NAME | CLI_A_REPLICAS,
                             put_help, 1, 1, &a)))
        return rc < 0 ? CLI_EXIT_OK : rc;
    if ((rc = cli_sharding_build(argv[0], &a.sh)) || (rc = cli_conn_open(&a.cc, &c)))
        return rc;
    memset(&info, 0, sizeof info);
    sm_err e = sm_client_put_file(c, a.pos[0], &a.sh.ref, a.name, &info, err, sizeof err);
    if (!e && a.replicas == 2) {
        sm_array_ref ref = {info.id, NULL};
        char why[400];
        sm_array_info_free(&info);
        if ((e = sm_client_replicate(c, ref, 2, &info, why, sizeof why)))
            snprintf(err, sizeof err,
                     "array %llu was uploaded, but its copies were not all made (the service "
                     "keeps trying): %s",
                     (unsigned long long)ref.id.v, why);
    }
    return put_report(c, e, err, a.json, &info);
}

static const char put_shards_help[] =
    "Usage: shmapctl put-shards --mesh AXES|MESH [--devices IDS] --spec SPEC\n"
    "                           --shape SHAPE --dtype DTYPE [--name NAME] [--json]\n"
    "                           DEVICE=FILE.npy ...\n"
    "\n"
    "Builds an array from one shard per device\n"
    "(jax.make_array_from_single_device_arrays). Every device of the mesh needs\n"
    "a file, and every file must hold exactly that device's shard shape.\n"
    "\n"
    "Options:\n"
    "      --mesh AXES|MESH    inline mesh (i=4,j=2) or the name or id of a mesh\n"
    "      --devices IDS       device order of an inline mesh\n"
    "      --spec SPEC         PartitionSpec, e.g. \"P('i')\"\n"
    "      --shape SHAPE       global shape, e.g. 8,16\n"
    "      --dtype DTYPE       element type (f32, f64, i32, i64, u8, bool, f16)\n"
    "      --name NAME         unique name\n"
    "      --json              print the array's description as JSON\n" CLI_CONN_HELP "\n"
    "Example:\n"
    "  shmapctl put-shards --mesh i=2 --spec \"P('i')\" --shape 4,4 --dtype f32 \\\n"
    "      0=top.npy 1=bottom.npy\n";

int cli_cmd_put_shards(int argc, char **argv)
{
    cli_args a;
    sm_client *c;
    sm_array_info info;
    sm_shape global;
    sm_dtype dtype;
    int32_t *devs = NULL;
    sm_array **shards = NULL;
    char err[512];
    int rc, n;
    sm_err e;

    if ((rc = cli_args_parse(argc, argv,
                             CLI_A_JSON | CLI_A_SHARDING | CLI_A_NAME | CLI_A_SHAPE | CLI_A_DTYPE,
                             put_shards_help, 1, -1, &a)))
        return rc < 0 ? CLI_EXIT_OK : rc;
    if (!a.shape)
        return cli_usage(argv[0], "--shape is required (the global shape, e.g. 8,16)");
    if (!a.dtype)
        return cli_usage(argv[0], "--dtype is required (e.g. f32)");
    if (sm_dtype_parse(a.dtype, &dtype) != 0)
        return cli_fail(CLI_EXIT_INVALID,
                        "'%s' is not a dtype; use f32, f64, i32, i64, u8, bool "
                        "or f16",
                        a.dtype);
    if (cli_parse_shape("shape", a.shape, &global, err, sizeof err))
        return cli_fail(CLI_EXIT_INVALID, "%s", err);
    if ((rc = cli_sharding_build(argv[0], &a.sh)))
        return rc;
    n = a.npos;
    devs = calloc((size_t)n, sizeof *devs);
    shards = calloc((size_t)n, sizeof *shards);
    if (!devs || !shards) {
        rc = cli_fail(CLI_EXIT_INVALID, "out of memory");
        goto done;
    }
    for (int k = 0; k < n; k++) {
        char *eq = strchr(a.pos[k], '='), *end;
        long d = eq ? strtol(a.pos[k], &end, 10) : -1;
        if (!eq || end != eq || eq == a.pos[k] || d < 0 || d > INT32_MAX) {
            rc = cli_usage(argv[0], "'%s' is not DEVICE=FILE.npy", a.pos[k]);
            goto done;
        }
        devs[k] = (int32_t)d;
        if (sm_npy_read(eq + 1, &shards[k], err, sizeof err)) {
            rc = cli_fail(CLI_EXIT_INVALID, "%s", err);
            goto done;
        }
    }
    if ((rc = cli_conn_open(&a.cc, &c)))
        goto done;
    memset(&info, 0, sizeof info);
    e = sm_client_put_shards(c, dtype, &global, &a.sh.ref, a.name, n, devs,
                             (const sm_array *const *)shards, &info, err, sizeof err);
    rc = put_report(c, e, err, a.json, &info);
done:
    for (int k = 0; shards && k < n; k++)
        sm_array_free(shards[k]);
    free(shards);
    free(devs);
    return rc;
}

static const char put_local_help[] =
    "Usage: shmapctl put-local FILE.npy --process K --name NAME --mesh AXES|MESH\n"
    "                          [--devices IDS] --spec SPEC [--global-shape SHAPE]\n"
    "                          [--deadline-ms N] [--json]\n"
    "\n"
    "Sends process K's part of an array built from per-process local data\n"
    "(jax.make_array_from_process_local_data). Every process sends its own part\n"
    "under the same name; the array becomes ready when all parts have arrived,\n"
    "and fails if one has not arrived by the deadline. Returns once this part is\n"
    "accepted.\n"
    "\n"
    "Options:\n"
    "      --process K         the process index whose devices receive this data\n"
    "      --name NAME         the array's name (the parts meet by name)\n"
    "      --mesh AXES|MESH    inline mesh (i=4,j=2) or the name or id of a mesh\n"
    "      --devices IDS       device order of an inline mesh\n"
    "      --spec SPEC         PartitionSpec, e.g. \"P('x', 'y')\"\n"
    "      --global-shape S    the global shape (default: inferred)\n"
    "      --deadline-ms N     how long the array waits for every part (default 60000)\n"
    "      --json              print the array's description as JSON\n" CLI_CONN_HELP "\n"
    "Example:\n"
    "  shmapctl put-local part1.npy --process 1 --name batch --mesh x=4,y=2 \\\n"
    "      --spec \"P('x', 'y')\"\n";

int cli_cmd_put_local(int argc, char **argv)
{
    cli_args a;
    sm_client *c;
    sm_array_info info;
    sm_array *local = NULL;
    sm_shape global;
    char err[512];
    int rc;

    if ((rc = cli_args_parse(argc, argv,
                             CLI_A_JSON | CLI_A_SHARDING | CLI_A_NAME | CLI_A_PROCESS |
                                 CLI_A_GLOBAL | CLI_A_DEADLINE,
                             put_local_help, 1, 1, &a)))
        return rc < 0 ? CLI_EXIT_OK : rc;
    if (!a.has_process)
        return cli_usage(argv[0], "--process is required (the process index of this part)");
    if (!a.name)
        return cli_usage(argv[0], "--name is required (the parts of the array meet by name)");
    if (a.global_shape && cli_parse_shape("global-shape", a.global_shape, &global, err, sizeof err))
        return cli_fail(CLI_EXIT_INVALID, "%s", err);
    if ((rc = cli_sharding_build(argv[0], &a.sh)))
        return rc;
    if (sm_npy_read(a.pos[0], &local, err, sizeof err))
        return cli_fail(CLI_EXIT_INVALID, "%s", err);
    if ((rc = cli_conn_open(&a.cc, &c))) {
        sm_array_free(local);
        return rc;
    }
    memset(&info, 0, sizeof info);
    sm_err e =
        sm_client_put_local(c, a.process, local, &a.sh.ref, a.name, a.global_shape ? &global : NULL,
                            a.deadline_ms, &info, err, sizeof err);
    sm_array_free(local);
    return put_report(c, e, err, a.json, &info);
}
