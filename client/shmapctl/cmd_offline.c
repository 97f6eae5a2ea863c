/* shmapctl: the offline commands, which need no server.
 *   sharding   — type string, shard shape, devices_indices_map with mesh
 *                coordinates and replica ids, and the layout diagram.
 *   plan-load  — make_array_from_process_local_data planning: the global
 *                shape and, per process, each device's global index and
 *                local slice. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

/* Options shared by both commands, as given on the command line. */
typedef struct {
    const char *mesh, *devices, *spec, *shape, *dtype, *procs, *local, *global;
    int json;
} cli_offline_opts;

enum { OPT_SHAPE = 256, OPT_DTYPE, OPT_PROCS, OPT_LOCAL, OPT_GLOBAL, OPT_JSON };

static const char sharding_help[] =
    "Usage: shmapctl sharding --mesh AXES --spec SPEC --shape DIMS [options]\n"
    "\n"
    "Shows how a NamedSharding (mesh + PartitionSpec) lays out an array of the\n"
    "given global shape, as JAX's devices_indices_map, jax.typeof and\n"
    "jax.debug.visualize_array_sharding would. Needs no server.\n"
    "\n"
    "Options:\n"
    "  -m, --mesh AXES      mesh axes and sizes, e.g. i=4,j=2 (required)\n"
    "  -d, --devices IDS    device ids in mesh (row-major) order, e.g. 0,2,4,6,1,3,5,7;\n"
    "                       default 0,1,...,n-1\n"
    "  -s, --spec SPEC      PartitionSpec, e.g. \"P('i', None)\" or \"P(('i','j'),)\" (required)\n"
    "      --shape DIMS     global shape, e.g. 8,16; \"\" for a scalar (required)\n"
    "      --dtype T        element type for the type string (f32, f64, i32, i64, u8,\n"
    "                       bool, f16, bf16; default f32)\n"
    "      --json           print JSON: type, dtype, global_shape, shard_shape,\n"
    "                       fully_replicated, num_distinct, mesh {axes, sizes,\n"
    "                       axis_types, devices}, spec, devices [{device, coords,\n"
    "                       index [[start, stop], ...],\n"
    "                       replica_id}] and diagram\n"
    "  -h, --help           show this help\n"
    "\n"
    "Exit codes: 0 success, 1 invalid input (bad spec, not divisible, ...), 2 usage error.\n"
    "\n"
    "Example:\n"
    "  shmapctl sharding --mesh i=4,j=2 --spec \"P('i','j')\" --shape 8,16\n";

static const char plan_load_help[] =
    "Usage: shmapctl plan-load --mesh AXES --spec SPEC --process-devices LISTS\n"
    "                          --local-shape DIMS [--global-shape DIMS] [options]\n"
    "\n"
    "Plans make_array_from_process_local_data: every process supplies local data\n"
    "of the same shape holding only what its own devices need. Prints the global\n"
    "shape (inferred unless given) and, for every process, each of its devices'\n"
    "global index and the slice of the local data it receives. Fails when the\n"
    "sharding is non-uniform and no global shape is given. Needs no server.\n"
    "\n"
    "Options:\n"
    "  -m, --mesh AXES              mesh axes and sizes, e.g. x=4,y=2 (required)\n"
    "  -d, --devices IDS            device ids in mesh order; default: the processes'\n"
    "                               devices in process order, each process's ids\n"
    "                               increasing (keeps the minor axis inside a process)\n"
    "  -s, --spec SPEC              PartitionSpec, e.g. \"P('x', 'y')\" (required)\n"
    "  -p, --process-devices LISTS  devices of each process, processes separated by\n"
    "                               ';', e.g. \"0,1;2,3;4,5;6,7\" (required)\n"
    "      --local-shape DIMS       shape of each process's local data (required)\n"
    "      --global-shape DIMS      global shape; each dimension must equal the local\n"
    "                               size or what the process's devices address\n"
    "      --json                   print JSON: global_shape, global_shape_inferred,\n"
    "                               mesh, spec, processes [{process, local_shape,\n"
    "                               devices [{device, global_index, local_slice}]}]\n"
    "                               with indices as [[start, stop], ...]\n"
    "  -h, --help                   show this help\n"
    "\n"
    "Exit codes: 0 success, 1 invalid input (non-uniform, bad shape, ...), 2 usage error.\n"
    "\n"
    "Example (data loading guide, 4 processes x 2 devices, 2-D sharding):\n"
    "  shmapctl plan-load --mesh x=4,y=2 --spec \"P('x','y')\" \\\n"
    "      --process-devices \"0,1;2,3;4,5;6,7\" --local-shape 16,128\n";

/* Parses the options of cmd; returns -1 to go on, else an exit code. */
static int cli_offline_getopt(const char *cmd, const char *help, int argc, char **argv,
                              cli_offline_opts *o)
{
    static const struct option sharding_opts[] = {
        {"mesh", required_argument, NULL, 'm'},
        {"devices", required_argument, NULL, 'd'},
        {"spec", required_argument, NULL, 's'},
        {"shape", required_argument, NULL, OPT_SHAPE},
        {"dtype", required_argument, NULL, OPT_DTYPE},
        {"json", no_argument, NULL, OPT_JSON},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    static const struct option plan_opts[] = {
        {"mesh", required_argument, NULL, 'm'},
        {"devices", required_argument, NULL, 'd'},
        {"spec", required_argument, NULL, 's'},
        {"process-devices", required_argument, NULL, 'p'},
        {"local-shape", required_argument, NULL, OPT_LOCAL},
        {"global-shape", required_argument, NULL, OPT_GLOBAL},
        {"json", no_argument, NULL, OPT_JSON},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int is_plan = strcmp(cmd, "plan-load") == 0;
    memset(o, 0, sizeof *o);
    optind = 1;
    opterr = 0;
    for (;;) {
        int c = getopt_long(argc, argv, is_plan ? ":m:d:s:p:h" : ":m:d:s:h",
                            is_plan ? plan_opts : sharding_opts, NULL);
        if (c == -1)
            break;
        switch (c) {
        case 'm':
            o->mesh = optarg;
            break;
        case 'd':
            o->devices = optarg;
            break;
        case 's':
            o->spec = optarg;
            break;
        case 'h':
            fputs(help, stdout);
            return CLI_EXIT_OK;
        case OPT_JSON:
            o->json = 1;
            break;
        case OPT_SHAPE:
            o->shape = optarg;
            break;
        case OPT_DTYPE:
            o->dtype = optarg;
            break;
        case 'p':
            o->procs = optarg;
            break;
        case OPT_LOCAL:
            o->local = optarg;
            break;
        case OPT_GLOBAL:
            o->global = optarg;
            break;
        default:
            return cli_getopt_error(cmd, c, argv);
        }
    }
    if (optind < argc)
        return cli_usage(cmd, "unexpected argument '%s'", argv[optind]);
    if (!o->mesh)
        return cli_usage(cmd, "--mesh is required");
    if (!o->spec)
        return cli_usage(cmd, "--spec is required");
    if (!is_plan && !o->shape)
        return cli_usage(cmd, "--shape is required");
    if (is_plan && !o->procs)
        return cli_usage(cmd, "--process-devices is required");
    if (is_plan && !o->local)
        return cli_usage(cmd, "--local-shape is required");
    return -1;
}

/* Builds the mesh and spec from the options. With procs and no
 * --devices, the mesh takes the default device order of those processes. */
static int cli_offline_sharding(const cli_offline_opts *o, const cli_procs *procs, sm_sharding *s)
{
    char err[512];
    int32_t devs[SM_MAX_DEVICES];
    int ndev = 0;
    sm_mesh probe;
    if (o->devices && cli_parse_ids(o->devices, devs, SM_MAX_DEVICES, &ndev, err, sizeof err))
        return cli_fail(CLI_EXIT_INVALID, "--devices: %s", err);
    if (sm_mesh_parse(o->mesh, NULL, 0, &probe, err, sizeof err))
        return cli_fail(CLI_EXIT_INVALID, "%s", err);
    if (!o->devices && procs) {
        if (sm_mesh_default_devices(probe.naxes, probe.sizes, procs->nprocs, procs->ndev,
                                    procs->devs, devs, err, sizeof err))
            return cli_fail(CLI_EXIT_INVALID, "%s", err);
        ndev = probe.ndevices;
    }
    if (sm_mesh_parse(o->mesh, ndev ? devs : NULL, ndev, &s->mesh, err, sizeof err))
        return cli_fail(CLI_EXIT_INVALID, "%s", err);
    if (sm_pspec_parse(o->spec, &s->spec, err, sizeof err))
        return cli_fail(CLI_EXIT_INVALID, "%s", err);
    if (sm_pspec_check_mesh(&s->spec, &s->mesh, err, sizeof err))
        return cli_fail(CLI_EXIT_INVALID, "%s", err);
    return -1;
}

static void cli_print_mesh_and_spec(const sm_sharding *s)
{
    char buf[512];
    printf("mesh          %s, devices [", sm_mesh_format(&s->mesh, buf, sizeof buf));
    for (int i = 0; i < s->mesh.ndevices; i++)
        printf("%s%d", i ? ", " : "", (int)s->mesh.devices[i]);
    printf("]\nspec          %s\n", sm_pspec_format(&s->spec, buf, sizeof buf));
}

static int cli_sharding_text(const sm_sharding *s, const sm_shape *g, sm_dtype t,
                             const sm_device_slice *ix, const char *diagram)
{
    char buf[512];
    sm_shape ss;
    sm_sharding_shard_shape(s, g, &ss, NULL, 0);
    printf("type          %s\n", sm_sharding_type_str(s, t, g, buf, sizeof buf));
    cli_print_mesh_and_spec(s);
    printf("shard shape   %s\n", sm_shape_format(&ss, buf, sizeof buf));
    int nd = sm_sharding_num_distinct(s, g);
    printf("replicated    %s (%d distinct shard%s on %d devices)\n\n",
           sm_sharding_is_fully_replicated(s, g) ? "fully" : "no", nd, nd == 1 ? "" : "s",
           s->mesh.ndevices);
    int wc = 6, wi = 5;
    for (int i = 0; i < s->mesh.ndevices; i++) {
        int n = 2;
        for (int a = 0; a < s->mesh.naxes; a++)
            n += snprintf(NULL, 0, "%s%lld", a ? ", " : "", (long long)ix[i].coords[a]);
        if (n > wc)
            wc = n;
        n = (int)strlen(sm_index_format(&ix[i].index, buf, sizeof buf));
        if (n > wi)
            wi = n;
    }
    printf("%6s  %-*s  %-*s  %s\n", "device", wc, "coords", wi, "index", "replica");
    for (int i = 0; i < s->mesh.ndevices; i++) {
        char coords[256];
        size_t n = (size_t)snprintf(coords, sizeof coords, "(");
        for (int a = 0; a < s->mesh.naxes && n < sizeof coords; a++)
            n += (size_t)snprintf(coords + n, sizeof coords - n, "%s%lld", a ? ", " : "",
                                  (long long)ix[i].coords[a]);
        if (n < sizeof coords)
            snprintf(coords + n, sizeof coords - n, ")");
        printf("%6d  %-*s  %-*s  %d\n", (int)ix[i].device, wc, coords, wi,
               sm_index_format(&ix[i].index, buf, sizeof buf), ix[i].replica_id);
    }
    printf("\n%s", diagram);
    return CLI_EXIT_OK;
}

static int cli_sharding_json(const sm_sharding *s, const sm_shape *g, sm_dtype t,
                             const sm_device_slice *ix, const char *diagram)
{
    char type[512], spec[512];
    sm_shape ss;
    sm_sharding_shard_shape(s, g, &ss, NULL, 0);
    json_t *devs = json_array();
    for (int i = 0; devs && i < s->mesh.ndevices; i++) {
        json_t *coords = json_array();
        for (int a = 0; coords && a < s->mesh.naxes; a++)
            json_array_append_new(coords, json_integer(ix[i].coords[a]));
        json_array_append_new(
            devs, json_pack("{s:i, s:o, s:o, s:i}", "device", (int)ix[i].device, "coords", coords,
                            "index", cli_json_index(&ix[i].index), "replica_id", ix[i].replica_id));
    }
    json_t *root = json_pack(
        "{s:s, s:s, s:o, s:o, s:b, s:i, s:o, s:s, s:o, s:s}", "type",
        sm_sharding_type_str(s, t, g, type, sizeof type), "dtype", sm_dtype_name(t), "global_shape",
        cli_json_shape(g), "shard_shape", cli_json_shape(&ss), "fully_replicated",
        sm_sharding_is_fully_replicated(s, g), "num_distinct", sm_sharding_num_distinct(s, g),
        "mesh", cli_json_mesh(&s->mesh), "spec", sm_pspec_format(&s->spec, spec, sizeof spec),
        "devices", devs, "diagram", diagram);
    return cli_print_json(root);
}

int cli_cmd_sharding(int argc, char **argv)
{
    cli_offline_opts o;
    sm_sharding s;
    sm_shape g;
    sm_dtype t = SM_F32;
    sm_device_slice *ix = NULL;
    sm_strbuf diagram = {0};
    char err[512];
    int rc = cli_offline_getopt("sharding", sharding_help, argc, argv, &o);
    if (rc >= 0)
        return rc;
    rc = cli_offline_sharding(&o, NULL, &s);
    if (rc >= 0)
        return rc;
    if (cli_parse_shape("--shape", o.shape, &g, err, sizeof err))
        return cli_fail(CLI_EXIT_INVALID, "%s", err);
    if (o.dtype && sm_dtype_parse(o.dtype, &t) != 0)
        return cli_fail(CLI_EXIT_INVALID,
                        "--dtype '%s' is not a dtype (use f32, f64, i32, i64, u8, bool, f16 or "
                        "bf16)",
                        o.dtype);
    if (sm_pspec_check(&s.spec, &s.mesh, &g, NULL, err, sizeof err))
        return cli_fail(CLI_EXIT_INVALID, "%s", err);
    ix = malloc(sizeof *ix * (size_t)s.mesh.ndevices);
    if (!ix)
        return cli_fail(CLI_EXIT_INVALID, "out of memory");
    if (sm_sharding_indices(&s, &g, ix, err, sizeof err) ||
        sm_sharding_diagram(&s, &g, &diagram, err, sizeof err)) {
        rc = cli_fail(CLI_EXIT_INVALID, "%s", err);
        goto fail;
    }
    if (o.json)
        rc = cli_sharding_json(&s, &g, t, ix, sm_strbuf_str(&diagram));
    else
        rc = cli_sharding_text(&s, &g, t, ix, sm_strbuf_str(&diagram));
fail:
    free(ix);
    sm_strbuf_free(&diagram);
    return rc;
}

static int cli_plan_text(const sm_sharding *s, const sm_local_plan *plan, int inferred)
{
    char buf[512], lb[512];
    printf("global shape  %s (%s)\n", sm_shape_format(&plan->global_shape, buf, sizeof buf),
           inferred ? "inferred" : "given");
    cli_print_mesh_and_spec(s);
    for (int p = 0; p < plan->nprocs; p++) {
        const sm_local_proc *lp = &plan->procs[p];
        printf("\nprocess %d: local shape %s\n", lp->process,
               sm_shape_format(&lp->local_shape, buf, sizeof buf));
        int wg = 12;
        for (int k = 0; k < lp->ndevices; k++) {
            int n = (int)strlen(sm_index_format(&lp->devices[k].global_index, buf, sizeof buf));
            if (n > wg)
                wg = n;
        }
        printf("  %6s  %-*s  %s\n", "device", wg, "global index", "local slice");
        for (int k = 0; k < lp->ndevices; k++) {
            const sm_local_device *ld = &lp->devices[k];
            printf("  %6d  %-*s  %s\n", (int)ld->device, wg,
                   sm_index_format(&ld->global_index, buf, sizeof buf),
                   sm_index_format(&ld->local_slice, lb, sizeof lb));
        }
    }
    return CLI_EXIT_OK;
}

static int cli_plan_json(const sm_sharding *s, const sm_local_plan *plan, int inferred)
{
    char spec[512];
    json_t *procs = json_array();
    for (int p = 0; procs && p < plan->nprocs; p++) {
        const sm_local_proc *lp = &plan->procs[p];
        json_t *devs = json_array();
        for (int k = 0; devs && k < lp->ndevices; k++) {
            const sm_local_device *ld = &lp->devices[k];
            json_array_append_new(devs, json_pack("{s:i, s:o, s:o}", "device", (int)ld->device,
                                                  "global_index", cli_json_index(&ld->global_index),
                                                  "local_slice", cli_json_index(&ld->local_slice)));
        }
        json_array_append_new(procs,
                              json_pack("{s:i, s:o, s:o}", "process", lp->process, "local_shape",
                                        cli_json_shape(&lp->local_shape), "devices", devs));
    }
    json_t *root =
        json_pack("{s:o, s:b, s:o, s:s, s:o}", "global_shape", cli_json_shape(&plan->global_shape),
                  "global_shape_inferred", inferred, "mesh", cli_json_mesh(&s->mesh), "spec",
                  sm_pspec_format(&s->spec, spec, sizeof spec), "processes", procs);
    return cli_print_json(root);
}

int cli_cmd_plan_load(int argc, char **argv)
{
    cli_offline_opts o;
    sm_sharding s;
    sm_shape local, global;
    cli_procs *procs = NULL;
    sm_local_plan *plan = NULL;
    char err[512];
    int rc = cli_offline_getopt("plan-load", plan_load_help, argc, argv, &o);
    if (rc >= 0)
        return rc;
    procs = malloc(sizeof *procs);
    if (!procs)
        return cli_fail(CLI_EXIT_INVALID, "out of memory");
    if (cli_parse_procs(o.procs, procs, err, sizeof err)) {
        rc = cli_fail(CLI_EXIT_INVALID, "--process-devices: %s", err);
        goto fail;
    }
    rc = cli_offline_sharding(&o, procs, &s);
    if (rc >= 0)
        goto fail;
    if (cli_parse_shape("--local-shape", o.local, &local, err, sizeof err) ||
        (o.global && cli_parse_shape("--global-shape", o.global, &global, err, sizeof err))) {
        rc = cli_fail(CLI_EXIT_INVALID, "%s", err);
        goto fail;
    }
    sm_proc_map pm = {procs->nprocs, procs->ndev, procs->devs};
    if (sm_local_plan_create(&s, &pm, &local, o.global ? &global : NULL, &plan, err, sizeof err)) {
        /* Name the option the library's "pass global_shape" stands for. */
        int hint = !o.global && strstr(err, "pass global_shape") != NULL;
        rc = cli_fail(CLI_EXIT_INVALID, "%s%s", err, hint ? " (--global-shape)" : "");
        goto fail;
    }
    rc = o.json ? cli_plan_json(&s, plan, !o.global) : cli_plan_text(&s, plan, !o.global);
fail:
    sm_local_plan_free(plan);
    free(procs);
    return rc;
}
