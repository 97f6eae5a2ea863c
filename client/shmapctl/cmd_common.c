/* cmd_common: connection, sharding options, progress bar and array printers
 * shared by the online subcommands of shmapctl. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cmd_online.h"
#include "sm_strbuf.h"
#include "sm_time.h"

#define CLI_PROGRESS_MIN (8 * 1000 * 1000)

void cli_conn_init(cli_conn *cc)
{
    const char *t = getenv("SHMAP_TARGET"), *k = getenv("SHMAP_TOKEN");
    memset(cc, 0, sizeof *cc);
    cc->target = t && *t ? t : CLI_DEFAULT_TARGET;
    cc->token = k && *k ? k : NULL;
    cc->tls_ca = getenv("SHMAP_TLS_CA");
    cc->tls_cert = getenv("SHMAP_TLS_CERT");
    cc->tls_key = getenv("SHMAP_TLS_KEY");
    cc->show_progress = isatty(STDERR_FILENO);
}

int cli_conn_opt(cli_conn *cc, int ch, const char *arg)
{
    switch (ch) {
    case OPT_TARGET:
        cc->target = arg;
        return 1;
    case OPT_TOKEN:
        cc->token = arg;
        return 1;
    case OPT_TLS_CA:
        cc->tls_ca = arg;
        return 1;
    case OPT_TLS_CERT:
        cc->tls_cert = arg;
        return 1;
    case OPT_TLS_KEY:
        cc->tls_key = arg;
        return 1;
    default:
        return 0;
    }
}

/* Draws "[#####     ]  50%  12.0 / 24.0 MB" at most 10 times a second. */
static void cli_progress(void *user, int64_t done, int64_t total)
{
    cli_conn *cc = user;
    int64_t t = sm_time_mono_ms();
    const int width = 30;

    if (total < CLI_PROGRESS_MIN)
        return;
    if (done < total && t - cc->last_draw < 100)
        return;
    cc->last_draw = t;
    int fill = total > 0 ? (int)(done * width / total) : width;
    char bar[64];
    for (int i = 0; i < width; i++)
        bar[i] = i < fill ? '#' : ' ';
    bar[width] = 0;
    fprintf(stderr, "\r[%s] %3d%%  %.1f / %.1f MB", bar, (int)(done * 100 / (total ? total : 1)),
            (double)done / 1e6, (double)total / 1e6);
    if (done >= total)
        fputc('\n', stderr);
    fflush(stderr);
}

int cli_conn_open(cli_conn *cc, sm_client **out)
{
    sm_client_opts o = {.token = cc->token,
                        .timeout_ms = 30000,
                        .tls_ca = cc->tls_ca,
                        .tls_cert = cc->tls_cert,
                        .tls_key = cc->tls_key,
                        .stage_mb = SM_CLIENT_STAGE_MB_DEFAULT};
    char err[512];
    sm_err e;

    if (cc->show_progress) {
        o.progress = cli_progress;
        o.progress_user = cc;
    }
    if ((e = sm_client_opts_from_env(&o, err, sizeof err)) ||
        (e = sm_client_connect(cc->target, &o, out, err, sizeof err)))
        return cli_fail(CLI_EXIT_INVALID, "%s", err);
    return CLI_EXIT_OK;
}

int cli_sharding_build(const char *cmd, cli_sharding *sh)
{
    char err[512];
    int ndev = 0;
    sm_err e;

    memset(&sh->ref, 0, sizeof sh->ref);
    if (!sh->mesh_text)
        return cli_usage(cmd, "--mesh is required (axes like i=4,j=2, or a mesh name)");
    if (!sh->spec_text)
        return cli_usage(cmd, "--spec is required (a PartitionSpec like \"P('i', None)\")");
    if ((e = sm_pspec_parse(sh->spec_text, &sh->ref.spec, err, sizeof err)))
        return cli_fail(CLI_EXIT_INVALID, "%s", err);
    if (strchr(sh->mesh_text, '=')) {
        if (sh->devices_text && (e = cli_parse_ids(sh->devices_text, sh->devices, SM_MAX_DEVICES,
                                                   &ndev, err, sizeof err)))
            return cli_fail(CLI_EXIT_INVALID, "%s", err);
        if ((e = sm_mesh_parse(sh->mesh_text, sh->devices_text ? sh->devices : NULL, ndev,
                               &sh->mesh, err, sizeof err)))
            return cli_fail(CLI_EXIT_INVALID, "%s", err);
        sh->ref.mesh = &sh->mesh;
        sh->ref.default_order = sh->devices_text == NULL;
        return CLI_EXIT_OK;
    }
    if (sh->devices_text)
        return cli_usage(cmd,
                         "--devices goes with an inline mesh (--mesh i=4,j=2), not with the "
                         "mesh name '%s'",
                         sh->mesh_text);
    sm_array_ref r = sm_array_ref_parse(sh->mesh_text);
    if (r.id.v)
        sh->ref.mesh_id.v = r.id.v;
    else
        sh->ref.mesh_name = sh->mesh_text;
    return CLI_EXIT_OK;
}

static int parse_int(const char *cmd, const char *opt, const char *text, int64_t lo, int64_t hi,
                     int64_t *out)
{
    char *end;
    long long v = strtoll(text, &end, 10);
    if (!*text || *end || v < lo || v > hi)
        return cli_usage(cmd, "--%s needs an integer from %lld to %lld, not '%s'", opt,
                         (long long)lo, (long long)hi, text);
    *out = v;
    return 0;
}

int cli_args_parse(int argc, char **argv, unsigned allowed, const char *help, int min_pos,
                   int max_pos, cli_args *a)
{
    static const struct option opts[] = {
        {"json", no_argument, NULL, OPT_JSON},
        {"mesh", required_argument, NULL, OPT_MESH},
        {"devices", required_argument, NULL, OPT_DEVICES},
        {"spec", required_argument, NULL, OPT_SPEC},
        {"name", required_argument, NULL, OPT_NAME},
        {"shape", required_argument, NULL, OPT_SHAPE},
        {"dtype", required_argument, NULL, OPT_DTYPE},
        {"process", required_argument, NULL, OPT_PROCESS},
        {"global-shape", required_argument, NULL, OPT_GLOBAL_SHAPE},
        {"deadline-ms", required_argument, NULL, OPT_DEADLINE},
        {"device", required_argument, NULL, OPT_DEVICE},
        {"replicas", required_argument, NULL, OPT_REPLICAS},
        CLI_CONN_OPTIONS,
        {NULL, 0, NULL, 0}};
    static const struct {
        int opt;
        unsigned flag;
    } need[] = {{OPT_JSON, CLI_A_JSON},           {OPT_MESH, CLI_A_SHARDING},
                {OPT_DEVICES, CLI_A_SHARDING},    {OPT_SPEC, CLI_A_SHARDING},
                {OPT_NAME, CLI_A_NAME},           {OPT_SHAPE, CLI_A_SHAPE},
                {OPT_DTYPE, CLI_A_DTYPE},         {OPT_PROCESS, CLI_A_PROCESS},
                {OPT_GLOBAL_SHAPE, CLI_A_GLOBAL}, {OPT_DEADLINE, CLI_A_DEADLINE},
                {OPT_DEVICE, CLI_A_DEVICE},       {OPT_REPLICAS, CLI_A_REPLICAS}};
    const char *cmd = argv[0];
    int ch, idx, rc;
    int64_t v = 0;

    memset(a, 0, sizeof *a);
    cli_conn_init(&a->cc);
    optind = 1;
    while ((ch = getopt_long(argc, argv, ":h", opts, &idx)) != -1) {
        for (size_t k = 0; k < sizeof need / sizeof need[0]; k++)
            if (need[k].opt == ch && !(allowed & need[k].flag))
                return cli_usage(cmd, "%s does not take --%s", cmd, opts[idx].name);
        switch (ch) {
        case OPT_JSON:
            a->json = 1;
            break;
        case OPT_MESH:
            a->sh.mesh_text = optarg;
            break;
        case OPT_DEVICES:
            a->sh.devices_text = optarg;
            break;
        case OPT_SPEC:
            a->sh.spec_text = optarg;
            break;
        case OPT_NAME:
            a->name = optarg;
            break;
        case OPT_SHAPE:
            a->shape = optarg;
            break;
        case OPT_DTYPE:
            a->dtype = optarg;
            break;
        case OPT_GLOBAL_SHAPE:
            a->global_shape = optarg;
            break;
        case OPT_PROCESS:
            if ((rc = parse_int(cmd, "process", optarg, 0, SM_MAX_DEVICES, &v)))
                return rc;
            a->process = (int)v;
            a->has_process = 1;
            break;
        case OPT_DEADLINE:
            if ((rc = parse_int(cmd, "deadline-ms", optarg, 1, UINT32_MAX, &v)))
                return rc;
            a->deadline_ms = v;
            break;
        case OPT_DEVICE:
            if ((rc = parse_int(cmd, "device", optarg, 0, INT32_MAX, &v)))
                return rc;
            a->device = (int32_t)v;
            a->has_device = 1;
            break;
        case OPT_REPLICAS:
            if ((rc = parse_int(cmd, "replicas", optarg, 1, 2, &v)))
                return rc;
            a->replicas = (int)v;
            break;
        case 'h':
        case OPT_HELP:
            fputs(help, stdout);
            return -1;
        default:
            if (cli_conn_opt(&a->cc, ch, optarg))
                break;
            return cli_getopt_error(cmd, ch, argv);
        }
    }
    a->npos = argc - optind;
    a->pos = argv + optind;
    if (a->npos < min_pos)
        return cli_usage(cmd, "%s needs %d argument%s, got %d", cmd, min_pos,
                         min_pos == 1 ? "" : "s", a->npos);
    if (max_pos >= 0 && a->npos > max_pos)
        return cli_usage(cmd, "unexpected argument '%s'", a->pos[max_pos]);
    return 0;
}

const char *cli_array_label(const sm_array_info *a, char *buf, size_t len)
{
    if (a->name[0])
        snprintf(buf, len, "%s (id %llu)", a->name, (unsigned long long)a->id.v);
    else
        snprintf(buf, len, "id %llu", (unsigned long long)a->id.v);
    return buf;
}

json_t *cli_json_array(const sm_array_info *a)
{
    char spec[512];
    json_t *devs = json_array();

    for (int i = 0; i < a->nshards; i++) {
        const sm_shard_info *s = &a->shards[i];
        json_t *coords = json_array();
        for (int k = 0; k < a->sharding.mesh.naxes; k++)
            json_array_append_new(coords, json_integer(s->coords[k]));
        json_array_append_new(
            devs, json_pack("{s:i, s:i, s:s, s:o, s:o, s:i, s:b, s:b}", "device", (int)s->device,
                            "worker", (int)s->worker_id.v, "address", s->worker_address, "coords",
                            coords, "index", cli_json_index(&s->index), "replica_id", s->replica_id,
                            "present", s->present, "spilled", s->spilled));
    }
    json_t *copies = json_array();
    for (int i = 0; i < a->ncopies; i++) {
        const sm_shard_info *s = &a->copies[i];
        json_array_append_new(copies,
                              json_pack("{s:i, s:i, s:s, s:o, s:b}", "device", (int)s->device,
                                        "worker", (int)s->worker_id.v, "address", s->worker_address,
                                        "index", cli_json_index(&s->index), "present", s->present));
    }
    return json_pack("{s:s?, s:I, s:s, s:o, s:o, s:s, s:o, s:I, s:s?, s:s, s:s, s:s?, s:I, s:o, "
                     "s:o}",
                     "name", a->name[0] ? a->name : NULL, "id", (json_int_t)a->id.v, "dtype",
                     sm_dtype_name(a->dtype), "shape", cli_json_shape(&a->shape), "shard_shape",
                     cli_json_shape(&a->shard_shape), "type", a->type, "mesh",
                     cli_json_mesh(&a->sharding.mesh), "mesh_id", (json_int_t)a->mesh_id.v,
                     "mesh_name", a->mesh_name[0] ? a->mesh_name : NULL, "spec",
                     sm_pspec_format(&a->sharding.spec, spec, sizeof spec), "state",
                     sm_array_state_name(a->state), "error", a->error[0] ? a->error : NULL, "bytes",
                     (json_int_t)a->bytes, "devices", devs, "copies", copies);
}

int cli_array_made(sm_err e, const char *err, int json, sm_array_info *info)
{
    if (e)
        return cli_fail(CLI_EXIT_INVALID, "%s", err);
    int rc = CLI_EXIT_OK;
    if (json)
        rc = cli_print_json(cli_json_array(info));
    else
        cli_print_array_line(info);
    sm_array_info_free(info);
    return rc;
}

void cli_print_array_line(const sm_array_info *a)
{
    char label[256];
    printf("%s: %s, %s%s%s\n", cli_array_label(a, label, sizeof label), a->type,
           sm_array_state_name(a->state), a->error[0] ? ": " : "", a->error);
}

int cli_print_array(const sm_array_info *a)
{
    char label[256], s1[128], s2[128], mb[512], spec[512], ib[256], cb[128];
    sm_strbuf diagram = {0};
    char err[512];

    printf("array:       %s\n", cli_array_label(a, label, sizeof label));
    printf("type:        %s\n", a->type);
    printf("shape:       %s  dtype %s  shard shape %s  (%lld bytes)\n",
           sm_shape_format(&a->shape, s1, sizeof s1), sm_dtype_name(a->dtype),
           sm_shape_format(&a->shard_shape, s2, sizeof s2), (long long)a->bytes);
    printf("state:       %s%s%s\n", sm_array_state_name(a->state), a->error[0] ? ": " : "",
           a->error);
    printf("sharding:    NamedSharding(%s, %s)", sm_mesh_format(&a->sharding.mesh, mb, sizeof mb),
           sm_pspec_format(&a->sharding.spec, spec, sizeof spec));
    if (a->mesh_name[0])
        printf("  mesh %s (id %llu)", a->mesh_name, (unsigned long long)a->mesh_id.v);
    else if (a->mesh_id.v)
        printf("  mesh id %llu", (unsigned long long)a->mesh_id.v);
    printf("\n\n%-7s %-10s %-16s %-22s %-8s %s\n", "device", "coords", "index", "worker", "replica",
           "present");
    for (int i = 0; i < a->nshards; i++) {
        const sm_shard_info *s = &a->shards[i];
        size_t n = 0;
        cb[n++] = '(';
        for (int k = 0; k < a->sharding.mesh.naxes && n < sizeof cb - 24; k++)
            n += (size_t)snprintf(cb + n, sizeof cb - n, k ? ",%lld" : "%lld",
                                  (long long)s->coords[k]);
        snprintf(cb + n, sizeof cb - n, ")");
        char wb[SM_ADDR_MAX + 16];
        snprintf(wb, sizeof wb, "%u %s", s->worker_id.v, s->worker_address);
        printf("%-7d %-10s %-16s %-22s %-8d %s\n", (int)s->device, cb,
               sm_index_format(&s->index, ib, sizeof ib), wb, s->replica_id,
               s->present ? (s->spilled ? "yes (spilled to disk)" : "yes") : "no");
    }
    if (a->ncopies)
        printf("\ncopies (kept on other workers, read when the mesh's own shard is lost):\n"
               "%-7s %-16s %-22s %s\n",
               "device", "index", "worker", "present");
    for (int i = 0; i < a->ncopies; i++) {
        const sm_shard_info *s = &a->copies[i];
        char wb[SM_ADDR_MAX + 16];
        snprintf(wb, sizeof wb, "%u %s", s->worker_id.v, s->worker_address);
        printf("%-7d %-16s %-22s %s\n", (int)s->device, sm_index_format(&s->index, ib, sizeof ib),
               wb, s->present ? "yes" : "no");
    }
    if (sm_sharding_diagram(&a->sharding, &a->shape, &diagram, err, sizeof err) == SM_OK &&
        !diagram.oom)
        printf("\n%s", sm_strbuf_str(&diagram));
    sm_strbuf_free(&diagram);
    return CLI_EXIT_OK;
}
