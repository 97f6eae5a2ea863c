/* cmd_run: shmapctl run on the service — parses a .shmap program locally,
 * uploads .npy arguments with their parameter's sharding on the program's
 * mesh, submits the job (shmap_job.h), waits and prints the outputs.
 *
 * Entry point cli_run_service(argc, argv) (argv[0] = "run"); `run --local`
 * (cmd_program.c) runs in this process instead. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd_online.h"
#include "shmap_job.h"
#include "sm_exec.h"
#include "sm_file.h"
#include "sm_ir.h"

int cli_run_service(int argc, char **argv);

#define RUN_MAX 64

static const char run_service_help[] =
    "Usage: shmapctl run PROGRAM.shmap --arg PARAM=NAME|ID|FILE.npy ...\n"
    "                    [--entry NAME] [--out-name OUT=NAME ...] [--no-check-vma]\n"
    "                    [--timeout-ms N]\n"
    "                    [--deadline-ms N] [--detach] [--json] [--target HOST:PORT]\n"
    "                    [--token T]\n"
    "       shmapctl run --local PROGRAM.shmap ...   (in this process; see run --local --help)\n"
    "\n"
    "Runs a program (docs/programs.md) on the service: a shard_map function as\n"
    "jax.shard_map(f, mesh, in_specs, out_specs)(*args) does, a jit function as\n"
    "jax.jit(f)(*args) does (the service lowers it to a shard_map program with\n"
    "the collectives its types require; see shmapctl check --lowered). The\n"
    "function run is the file's last shard_map or jit one, or --entry NAME. It is\n"
    "parsed and verified here first (errors as \"file:line:col: sentence\"), then\n"
    "by the coordinator before anything runs. Every parameter needs an argument:\n"
    "an array on the service by name or id, or a .npy file, which is uploaded\n"
    "with that parameter's in_spec on the program's mesh (the service's default\n"
    "device order when the program names no devices) and deleted after the run.\n"
    "An argument laid out differently is resharded by the service first. Each\n"
    "returned value becomes a new array on the service, sharded as its out_spec\n"
    "(jit: its type) says; its name, id, type string, shape and dtype are printed.\n"
    "\n"
    "Options:\n"
    "      --entry NAME         run function NAME of the file\n"
    "      --arg PARAM=VALUE    the argument of parameter PARAM: an array name, an\n"
    "                           id (all digits) or a FILE.npy; repeatable\n"
    "      --out-name OUT=NAME  name output OUT (its index, 0-based, or the name of\n"
    "                           the returned value in the program); repeatable\n"
    "      --no-check-vma       turn the replication check off (check_vma=False); a\n"
    "                           file whose leading comments hold \"# check_vma: false\"\n"
    "                           turns it off too\n"
    "      --timeout-ms N       stop waiting after N ms (the job is cancelled);\n"
    "                           default: wait until it ends\n"
    "      --deadline-ms N      the service fails the job if not done by then\n"
    "      --detach             submit and print the job's id without waiting; follow\n"
    "                           it with shmapctl job status|wait|cancel ID (arguments\n"
    "                           must be arrays on the service, not .npy files)\n"
    "      --json               print {job, state, queued_us, run_us, outputs: [{name,\n"
    "                           id, type, shape, dtype}], error} (outputs in return\n"
    "                           order; with --detach {job, state})\n" CLI_CONN_HELP "\n"
    "Exit codes: 0 done, 1 invalid program or argument, or the job failed (one\n"
    "sentence on stderr), 2 usage error.\n"
    "\n"
    "Example:\n"
    "  shmapctl run examples/matmul_basic.shmap --arg a=a.npy --arg b=B --out-name 0=c\n";

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && !strcmp(s + n - m, suffix);
}

typedef struct {
    const char *path, *entry;
    int json, no_vma, detach;
    int64_t timeout_ms, deadline_ms;
    int nargs, nouts;
    char *args[RUN_MAX], *outs[RUN_MAX];
    cli_conn cc;
} run_opts;

static int run_parse(int argc, char **argv, run_opts *o)
{
    enum { O_ARG = 2000, O_OUT, O_NOVMA, O_TIMEOUT, O_DEADLINE, O_DETACH, O_ENTRY };
    static const struct option opts[] = {
        {"arg", required_argument, NULL, O_ARG},
        {"entry", required_argument, NULL, O_ENTRY},
        {"out-name", required_argument, NULL, O_OUT},
        {"no-check-vma", no_argument, NULL, O_NOVMA},
        {"timeout-ms", required_argument, NULL, O_TIMEOUT},
        {"deadline-ms", required_argument, NULL, O_DEADLINE},
        {"detach", no_argument, NULL, O_DETACH},
        {"json", no_argument, NULL, OPT_JSON},
        CLI_CONN_OPTIONS,
        {NULL, 0, NULL, 0},
    };
    int ch, idx;
    memset(o, 0, sizeof *o);
    o->timeout_ms = -1;
    cli_conn_init(&o->cc);
    optind = 1;
    while ((ch = getopt_long(argc, argv, ":h", opts, &idx)) != -1) {
        char *end;
        long long v;
        switch (ch) {
        case O_ARG:
        case O_OUT:
            if (!strchr(optarg, '=') || optarg[0] == '=')
                return cli_usage(argv[0], "--%s takes NAME=VALUE, got '%s'",
                                 ch == O_ARG ? "arg" : "out-name", optarg);
            if ((ch == O_ARG ? o->nargs : o->nouts) >= RUN_MAX)
                return cli_usage(argv[0], "at most %d --%s options", RUN_MAX,
                                 ch == O_ARG ? "arg" : "out-name");
            if (ch == O_ARG)
                o->args[o->nargs++] = optarg;
            else
                o->outs[o->nouts++] = optarg;
            break;
        case O_NOVMA:
            o->no_vma = 1;
            break;
        case O_ENTRY:
            o->entry = optarg;
            break;
        case O_DETACH:
            o->detach = 1;
            break;
        case O_TIMEOUT:
        case O_DEADLINE:
            errno = 0;
            v = strtoll(optarg, &end, 10);
            if (errno || end == optarg || *end || v < 0 || (ch == O_DEADLINE && v > UINT32_MAX))
                return cli_usage(argv[0], "--%s takes a number of milliseconds, got '%s'",
                                 ch == O_TIMEOUT ? "timeout-ms" : "deadline-ms", optarg);
            if (ch == O_TIMEOUT)
                o->timeout_ms = v;
            else
                o->deadline_ms = v;
            break;
        case OPT_JSON:
            o->json = 1;
            break;
        case 'h':
        case OPT_HELP:
            fputs(run_service_help, stdout);
            return -1;
        default:
            if (cli_conn_opt(&o->cc, ch, optarg))
                break;
            return cli_getopt_error(argv[0], ch, argv);
        }
    }
    if (argc - optind != 1)
        return cli_usage(argv[0],
                         argc - optind ? "give exactly one PROGRAM.shmap, got %d"
                                       : "missing PROGRAM.shmap%.0d",
                         argc - optind);
    o->path = argv[optind];
    if (o->detach && o->timeout_ms >= 0)
        return cli_usage(argv[0], "--detach does not wait, so it takes no --timeout-ms");
    return 0;
}

/* Resolves --out-name keys into names[] (one per output). */
static int run_out_names(const sm_program *p, const run_opts *o, const char **names)
{
    for (int k = 0; k < o->nouts; k++) {
        char *eq = strchr(o->outs[k], '=');
        size_t klen = (size_t)(eq - o->outs[k]);
        int r = -1;
        char *end;
        long v = strtol(o->outs[k], &end, 10);
        if (end == eq)
            r = v >= 0 && v < p->nreturns ? (int)v : -2;
        for (int i = 0; r == -1 && i < p->nreturns; i++) {
            const char *vn = p->values[p->returns[i]].name;
            if (vn && strlen(vn) == klen && !strncmp(vn, o->outs[k], klen))
                r = i;
        }
        if (r < 0)
            return cli_fail(CLI_EXIT_INVALID,
                            "--out-name %s: program '%s' has %d outputs and none is '%.*s'",
                            o->outs[k], p->name, p->nreturns, (int)klen, o->outs[k]);
        names[r] = eq + 1;
    }
    return 0;
}

int cli_run_service(int argc, char **argv)
{
    run_opts o;
    char err[2048] = "", *text = NULL;
    sm_program *p = NULL;
    sm_client *c = NULL;
    sm_array_ref refs[RUN_MAX];
    sm_array_id uploaded[RUN_MAX];
    const char *names[RUN_MAX];
    int have[RUN_MAX];
    sm_job_info info;
    int rc;
    memset(uploaded, 0, sizeof uploaded);
    memset(names, 0, sizeof names);
    memset(have, 0, sizeof have);
    memset(&info, 0, sizeof info);
    if ((rc = run_parse(argc, argv, &o)))
        return rc < 0 ? CLI_EXIT_OK : rc;
    if (sm_file_read_text(o.path, (size_t)64 << 20, &text, err, sizeof err))
        return cli_fail(CLI_EXIT_INVALID, "%s", err);
    int check_vma = !o.no_vma && sm_exec_text_check_vma(text);
    if (sm_program_parse_entry(text, o.path, o.entry, &p, err, sizeof err) ||
        sm_program_verify(p, check_vma, err, sizeof err)) {
        rc = cli_fail(CLI_EXIT_INVALID, "%s", err);
        goto done;
    }
    if (p->nparams > RUN_MAX || p->nreturns > RUN_MAX) {
        rc = cli_fail(CLI_EXIT_INVALID, "%s: more than %d parameters or outputs", o.path, RUN_MAX);
        goto done;
    }
    if ((rc = run_out_names(p, &o, names)))
        goto done;
    for (int k = 0; k < o.nargs; k++) {
        char *eq = strchr(o.args[k], '=');
        int i = 0;
        while (i < p->nparams && (strncmp(p->params[i].name, o.args[k], (size_t)(eq - o.args[k])) ||
                                  p->params[i].name[eq - o.args[k]]))
            i++;
        if (i == p->nparams) {
            rc = cli_fail(CLI_EXIT_INVALID, "--arg %s: program '%s' has no parameter '%.*s'",
                          o.args[k], p->name, (int)(eq - o.args[k]), o.args[k]);
            goto done;
        }
        if (have[i]) {
            rc = cli_usage(argv[0], "parameter '%s' has two --arg options", p->params[i].name);
            goto done;
        }
        have[i] = 1;
        refs[i] = sm_array_ref_parse(eq + 1);
    }
    for (int i = 0; i < p->nparams; i++) {
        if (!have[i]) {
            rc = cli_usage(argv[0], "parameter '%s' has no --arg", p->params[i].name);
            goto done;
        }
        if (o.detach && !refs[i].id.v && ends_with(refs[i].name, ".npy")) {
            rc = cli_usage(argv[0],
                           "--detach cannot take the file %s as argument '%s': run deletes the "
                           "arrays it uploads when the job ends; upload it with shmapctl put",
                           refs[i].name, p->params[i].name);
            goto done;
        }
    }
    if ((rc = cli_conn_open(&o.cc, &c)))
        goto done;
    /* .npy arguments: uploaded with the parameter's spec on the job's mesh. */
    for (int i = 0; i < p->nparams; i++) {
        if (refs[i].id.v || !ends_with(refs[i].name, ".npy"))
            continue;
        const sm_ir_param *pa = &p->params[i];
        sm_npy_info ni;
        if (sm_npy_read_info(refs[i].name, &ni, err, sizeof err)) {
            rc = cli_fail(CLI_EXIT_INVALID, "argument '%s': %s", pa->name, err);
            goto done;
        }
        if (ni.dtype != pa->dtype || !sm_shape_equal(&ni.shape, &pa->global)) {
            char have[128], want[128];
            rc = cli_fail(CLI_EXIT_INVALID,
                          "argument '%s': %s holds %s%s, but the parameter is %s%s", pa->name,
                          refs[i].name, sm_dtype_name(ni.dtype),
                          sm_shape_format(&ni.shape, have, sizeof have), sm_dtype_name(pa->dtype),
                          sm_shape_format(&pa->global, want, sizeof want));
            goto done;
        }
        sm_sharding_ref sh;
        memset(&sh, 0, sizeof sh);
        sh.mesh = &p->mesh;
        sh.default_order = !p->has_devices;
        sh.spec = p->params[i].spec;
        sm_array_info a;
        if (sm_client_put_file(c, refs[i].name, &sh, NULL, &a, err, sizeof err)) {
            rc = cli_fail(CLI_EXIT_INVALID, "argument '%s' (%s): %s", p->params[i].name,
                          refs[i].name, err);
            goto done;
        }
        uploaded[i] = a.id;
        refs[i] = (sm_array_ref){a.id, NULL};
        sm_array_info_free(&a);
    }
    if (o.detach) {
        sm_job_id jid = {0};
        if (sm_job_submit(c, p, p->nparams, refs, names, check_vma, (uint32_t)o.deadline_ms, &jid,
                          err, sizeof err)) {
            rc = cli_fail(CLI_EXIT_INVALID, "%s", err);
            goto done;
        }
        if (o.json) {
            json_t *root = json_object();
            json_object_set_new(root, "job", json_integer((json_int_t)jid.v));
            json_object_set_new(root, "state", json_string(sm_job_state_name(SM_JOB_QUEUED)));
            rc = cli_print_json(root);
        } else {
            printf("job %llu submitted; follow it with: shmapctl job wait %llu\n",
                   (unsigned long long)jid.v, (unsigned long long)jid.v);
            rc = CLI_EXIT_OK;
        }
        goto done;
    }
    /* Submit and wait in one round trip when the job ends soon. */
    if (sm_job_run(c, p, p->nparams, refs, names, check_vma, (uint32_t)o.deadline_ms, o.timeout_ms,
                   &info, err, sizeof err)) {
        if (info.id.v)
            rc = cli_fail(CLI_EXIT_INVALID, "job %llu: %s", (unsigned long long)info.id.v, err);
        else
            rc = cli_fail(CLI_EXIT_INVALID, "%s", err);
        goto done;
    }
    sm_job_id id = info.id;
    if (info.state == SM_JOB_QUEUED || info.state == SM_JOB_RUNNING) {
        sm_job_info_free(&info);
        sm_job_cancel(c, id, &info, err, sizeof err);
        rc = cli_fail(CLI_EXIT_INVALID, "job %llu did not end within %lld ms; it was cancelled",
                      (unsigned long long)id.v, (long long)o.timeout_ms);
        goto done;
    }
    if (info.state != SM_JOB_DONE) {
        rc = cli_fail(CLI_EXIT_INVALID, "job %llu %s: %s", (unsigned long long)id.v,
                      sm_job_state_name(info.state), info.error);
        goto done;
    }
    rc = cli_job_report(&info, o.json);
done:
    for (int i = 0; c && i < RUN_MAX; i++)
        if (uploaded[i].v)
            sm_client_delete(c, (sm_array_ref){uploaded[i], NULL}, err, sizeof err);
    sm_job_info_free(&info);
    sm_client_close(c);
    sm_program_free(p);
    free(text);
    return rc;
}
