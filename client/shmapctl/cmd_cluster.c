/* cmd_cluster: shmapctl devices and shmapctl mesh (create, ls, describe). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd_online.h"

static const char devices_help[] =
    "Usage: shmapctl devices [--json] [--target HOST:PORT] [--token TOKEN]\n"
    "\n"
    "Lists the workers of the service: address, process index, devices, bytes\n"
    "held per device, whether the worker is alive, and the workers it proved to\n"
    "share memory with (their collectives go through it; with the others, gRPC).\n"
    "\n"
    "Options:\n"
    "      --json              print a JSON list, one object per worker\n" CLI_CONN_HELP "\n"
    "Example:\n"
    "  shmapctl devices --target localhost:7070\n";

/* The options of devices (devices and name NULL: --json) and of mesh
 * (--json, --devices, --name), with the connection's into cc and --help:
 * -1 to go on, else the exit code after the help or a usage error. */
static int cluster_opts(int argc, char **argv, const char *help, cli_conn *cc, int *json,
                        const char **devices, const char **name)
{
    static const struct option devices_opts[] = {
        {"json", no_argument, NULL, OPT_JSON}, CLI_CONN_OPTIONS, {NULL, 0, NULL, 0}};
    static const struct option mesh_opts[] = {{"json", no_argument, NULL, OPT_JSON},
                                              {"devices", required_argument, NULL, OPT_DEVICES},
                                              {"name", required_argument, NULL, OPT_NAME},
                                              CLI_CONN_OPTIONS,
                                              {NULL, 0, NULL, 0}};
    int ch, rc;

    cli_conn_init(cc);
    optind = 1;
    while ((ch = getopt_long(argc, argv, ":h", devices ? mesh_opts : devices_opts, NULL)) != -1) {
        if (ch == OPT_JSON)
            *json = 1;
        else if (ch == OPT_DEVICES)
            *devices = optarg;
        else if (ch == OPT_NAME)
            *name = optarg;
        else if ((rc = cli_conn_common_opt(cc, ch, help, argv)))
            return rc < 0 ? CLI_EXIT_OK : rc;
    }
    return -1;
}

int cli_cmd_devices(int argc, char **argv)
{
    cli_conn cc;
    sm_client *c = NULL;
    sm_worker_info *w = NULL;
    int n = 0, json = 0, rc;
    char err[512];

    if ((rc = cluster_opts(argc, argv, devices_help, &cc, &json, NULL, NULL)) >= 0)
        return rc;
    if (optind < argc)
        return cli_usage(argv[0], "unexpected argument '%s'", argv[optind]);
    if ((rc = cli_conn_open(&cc, &c)))
        return rc;
    if (sm_client_devices(c, &w, &n, err, sizeof err)) {
        sm_client_close(c);
        return cli_fail(CLI_EXIT_INVALID, "%s", err);
    }
    if (json) {
        json_t *root = json_array();
        for (int i = 0; i < n; i++) {
            json_t *d = json_array(), *b = json_array(), *sp = json_array();
            for (int k = 0; k < w[i].ndevices; k++) {
                json_array_append_new(d, json_integer(w[i].devices[k]));
                json_array_append_new(b, json_integer(w[i].device_bytes[k]));
            }
            for (int k = 0; k < w[i].nshm_peers; k++)
                json_array_append_new(sp, json_integer(w[i].shm_peers[k].v));
            json_array_append_new(
                root,
                json_pack("{s:i, s:s, s:s, s:i, s:s, s:I, s:o, s:o, s:o}", "worker", (int)w[i].id.v,
                          "address", w[i].address, "host", w[i].host, "process_index",
                          w[i].process_index, "state", w[i].alive ? "alive" : "lost",
                          "ms_since_heartbeat", (json_int_t)w[i].ms_since_heartbeat, "devices", d,
                          "device_bytes", b, "shm_peers", sp));
        }
        rc = cli_print_json(root);
    } else {
        printf("%-7s %-22s %-8s %-6s %s\n", "worker", "address", "process", "state",
               "devices (bytes)");
        for (int i = 0; i < n; i++) {
            printf("%-7u %-22s %-8d %-6s", w[i].id.v, w[i].address, w[i].process_index,
                   w[i].alive ? "alive" : "lost");
            for (int k = 0; k < w[i].ndevices; k++)
                printf(" %d(%lld)", (int)w[i].devices[k], (long long)w[i].device_bytes[k]);
            printf("\n");
            if (w[i].nshm_peers) { /* the others it shares with go over gRPC */
                printf("        collectives through shared memory with worker");
                for (int k = 0; k < w[i].nshm_peers; k++)
                    printf("%s %u", k ? "," : (w[i].nshm_peers > 1 ? "s" : ""),
                           w[i].shm_peers[k].v);
                printf("\n");
            }
        }
        rc = CLI_EXIT_OK;
    }
    free(w);
    sm_client_close(c);
    return rc;
}

/* ---- mesh -------------------------------------------------------------------- */

static const char mesh_help[] =
    "Usage: shmapctl mesh create AXES [--devices IDS] [--name NAME] [--json]\n"
    "       shmapctl mesh ls [--json]\n"
    "       shmapctl mesh describe NAME|ID [--json]\n"
    "\n"
    "Creates, lists and describes device meshes on the service. AXES names the\n"
    "axes and their sizes (i=4,j=2), optionally with their types as JAX's\n"
    "AxisType (i=4,j=2,axis_types=(Auto,Explicit); Explicit when not given): a\n"
    "mesh that differs only in its types is another mesh. Without --devices the\n"
    "service picks its default device order (the minor axis inside one worker\n"
    "where it fits).\n"
    "\n"
    "Options:\n"
    "      --devices IDS       explicit device order, row-major (0,1,2,...)\n"
    "      --name NAME         a unique name other clients can use\n"
    "      --json              print JSON {id, name, axes, sizes, axis_types,\n"
    "                          devices}\n" CLI_CONN_HELP "\n"
    "Examples:\n"
    "  shmapctl mesh create i=4,j=2 --name m\n"
    "  shmapctl mesh create 'i=4,j=2,axis_types=(Auto,Auto)' --name auto\n"
    "  shmapctl mesh describe m --json\n";

static json_t *mesh_json(const sm_mesh_info *m)
{
    json_t *j = cli_json_mesh(&m->mesh);
    json_object_set_new(j, "id", json_integer((json_int_t)m->id.v));
    json_object_set_new(j, "name", m->name[0] ? json_string(m->name) : json_null());
    return j;
}

static void mesh_print(const sm_mesh_info *m)
{
    char mb[512];
    printf("%-5llu %-16s %s  devices", (unsigned long long)m->id.v, m->name[0] ? m->name : "-",
           sm_mesh_format(&m->mesh, mb, sizeof mb));
    for (int k = 0; k < m->mesh.ndevices; k++)
        printf("%s%d", k ? "," : " ", (int)m->mesh.devices[k]);
    printf("\n");
}

int cli_cmd_mesh(int argc, char **argv)
{
    cli_conn cc;
    sm_client *c = NULL;
    const char *devices = NULL, *name = NULL;
    int json = 0, rc;
    char err[512];
    sm_err e = SM_OK;

    if ((rc = cluster_opts(argc, argv, mesh_help, &cc, &json, &devices, &name)) >= 0)
        return rc;
    if (optind >= argc)
        return cli_usage(argv[0], "a subcommand is required: create, ls or describe");
    const char *sub = argv[optind++];
    int nargs = argc - optind;
    int want = strcmp(sub, "create") == 0     ? 1
               : strcmp(sub, "ls") == 0       ? 0
               : strcmp(sub, "describe") == 0 ? 1
                                              : -1;
    if (want < 0)
        return cli_usage(argv[0], "unknown subcommand '%s'; use create, ls or describe", sub);
    if (nargs != want)
        return cli_usage(argv[0], "mesh %s takes %s", sub, want ? "one argument" : "no argument");
    if (strcmp(sub, "create") != 0 && (devices || name))
        return cli_usage(argv[0], "--devices and --name go with mesh create");

    sm_mesh mesh;
    int32_t ids[SM_MAX_DEVICES];
    int nids = 0;
    if (strcmp(sub, "create") == 0) {
        if (devices && (e = cli_parse_ids(devices, ids, SM_MAX_DEVICES, &nids, err, sizeof err)))
            return cli_fail(CLI_EXIT_INVALID, "%s", err);
        if ((e = sm_mesh_parse(argv[optind], devices ? ids : NULL, nids, &mesh, err, sizeof err)))
            return cli_fail(CLI_EXIT_INVALID, "%s", err);
    }
    if ((rc = cli_conn_open(&cc, &c)))
        return rc;
    if (strcmp(sub, "ls") == 0) {
        sm_mesh_info *list = NULL;
        int n = 0;
        if (!(e = sm_client_mesh_list(c, &list, &n, err, sizeof err))) {
            if (json) {
                json_t *root = json_array();
                for (int i = 0; i < n; i++)
                    json_array_append_new(root, mesh_json(&list[i]));
                rc = cli_print_json(root);
            } else {
                printf("%-5s %-16s %s\n", "id", "name", "mesh");
                for (int i = 0; i < n; i++)
                    mesh_print(&list[i]);
            }
        }
        free(list);
    } else {
        sm_mesh_info info;
        memset(&info, 0, sizeof info);
        if (strcmp(sub, "create") == 0) {
            e = sm_client_mesh_create(c, &mesh, devices == NULL, name, &info, err, sizeof err);
        } else {
            sm_array_ref r = sm_array_ref_parse(argv[optind]);
            sm_mesh_id id = {r.id.v};
            e = sm_client_mesh_get(c, id, r.id.v ? NULL : argv[optind], &info, err, sizeof err);
        }
        if (!e) {
            if (json)
                rc = cli_print_json(mesh_json(&info));
            else
                mesh_print(&info);
        }
    }
    sm_client_close(c);
    if (e)
        return cli_fail(CLI_EXIT_INVALID, "%s", err);
    return rc;
}
