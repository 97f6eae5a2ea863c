/* cmd_job: shmapctl job status|wait|cancel ID: a job submitted earlier
 * (shmapctl run --detach, or sm_job_submit) by its id; and the report of a
 * job that shmapctl run prints too (cli_job_report). */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd_online.h"
#include "shmap_job.h"

static const char job_help[] =
    "Usage: shmapctl job status ID [--json]\n"
    "       shmapctl job wait ID [--timeout-ms N] [--json]\n"
    "       shmapctl job cancel ID [--json]\n"
    "\n"
    "Follows a job submitted earlier (shmapctl run --detach prints its id).\n"
    "status describes it now: queued, running, done (with its outputs),\n"
    "failed or cancelled (with why). wait waits for it to end, at most N ms.\n"
    "cancel stops a queued or running job (its outputs are dropped) and\n"
    "describes it; a job that already ended stays as it is. The coordinator\n"
    "keeps an ended job's record for 10 minutes (--job-keep-s).\n"
    "\n"
    "Options:\n"
    "      --timeout-ms N       wait: stop waiting after N ms (the job goes on);\n"
    "                           default: until it ends\n"
    "      --json               print {job, state, queued_us, run_us, outputs: [{name,\n"
    "                           id, type, shape, dtype}], error}\n" CLI_CONN_HELP "\n"
    "Exit codes: 0 the job was described (wait: and it is done), 1 unknown job,\n"
    "or wait saw it fail, be cancelled or still run after N ms (one sentence on\n"
    "stderr), 2 usage error.\n"
    "\n"
    "Example:\n"
    "  shmapctl run examples/matmul_basic.shmap --arg a=A --arg b=B --detach\n"
    "  shmapctl job wait 7 --timeout-ms 60000\n";

static json_t *output_json(const sm_array_info *a)
{
    json_t *o = json_object();
    json_object_set_new(o, "name", json_string(a->name));
    json_object_set_new(o, "id", json_integer((json_int_t)a->id.v));
    json_object_set_new(o, "type", json_string(a->type));
    json_object_set_new(o, "shape", cli_json_shape(&a->shape));
    json_object_set_new(o, "dtype", json_string(sm_dtype_name(a->dtype)));
    return o;
}

int cli_job_report(const sm_job_info *info, int json)
{
    int ended = info->state == SM_JOB_DONE || info->state == SM_JOB_FAILED ||
                info->state == SM_JOB_CANCELLED;
    if (json) {
        json_t *root = json_object(), *outs = json_array();
        json_object_set_new(root, "job", json_integer((json_int_t)info->id.v));
        json_object_set_new(root, "state", json_string(sm_job_state_name(info->state)));
        json_object_set_new(root, "queued_us", json_integer(info->queued_us));
        json_object_set_new(root, "run_us", json_integer(info->run_us));
        for (int k = 0; k < info->noutputs; k++)
            json_array_append_new(outs, output_json(&info->outputs[k]));
        json_object_set_new(root, "outputs", outs);
        json_object_set_new(root, "error", info->error[0] ? json_string(info->error) : json_null());
        return cli_print_json(root);
    }
    if (info->state == SM_JOB_DONE)
        printf("job %llu done in %.3f s (queued %.3f s)\n", (unsigned long long)info->id.v,
               (double)info->run_us / 1e6, (double)info->queued_us / 1e6);
    else if (ended)
        printf("job %llu %s: %s\n", (unsigned long long)info->id.v, sm_job_state_name(info->state),
               info->error);
    else
        printf("job %llu %s\n", (unsigned long long)info->id.v, sm_job_state_name(info->state));
    for (int k = 0; k < info->noutputs; k++) {
        const sm_array_info *a = &info->outputs[k];
        char shape[128];
        size_t n = 0;
        shape[0] = 0;
        for (int d = 0; d < a->shape.rank && n < sizeof shape; d++)
            n += (size_t)snprintf(shape + n, sizeof shape - n, "%s%lld", d ? "," : "",
                                  (long long)a->shape.dims[d]);
        printf("output %d: %s (id %llu)  %s  shape [%s]  dtype %s\n", k, a->name[0] ? a->name : "-",
               (unsigned long long)a->id.v, a->type, shape, sm_dtype_name(a->dtype));
    }
    return CLI_EXIT_OK;
}

int cli_cmd_job(int argc, char **argv)
{
    enum { O_TIMEOUT = 2000 };
    static const struct option opts[] = {{"timeout-ms", required_argument, NULL, O_TIMEOUT},
                                         {"json", no_argument, NULL, OPT_JSON},
                                         CLI_CONN_OPTIONS,
                                         {NULL, 0, NULL, 0}};
    cli_conn cc;
    sm_client *c = NULL;
    int json = 0, ch, rc;
    int64_t timeout_ms = -1;
    char err[1024] = "";

    cli_conn_init(&cc);
    optind = 1;
    while ((ch = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
        rc = 0;
        if (ch == O_TIMEOUT)
            rc = cli_ms_opt(argv[0], "timeout-ms", optarg, INT64_MAX, &timeout_ms);
        else if (ch == OPT_JSON)
            json = 1;
        else
            rc = cli_conn_common_opt(&cc, ch, job_help, argv);
        if (rc)
            return rc < 0 ? CLI_EXIT_OK : rc;
    }
    if (optind >= argc)
        return cli_usage(argv[0], "a subcommand is required: status, wait or cancel");
    const char *sub = argv[optind++];
    if (strcmp(sub, "status") && strcmp(sub, "wait") && strcmp(sub, "cancel"))
        return cli_usage(argv[0], "unknown subcommand '%s': status, wait or cancel", sub);
    if (argc - optind != 1)
        return cli_usage(argv[0], "job %s takes one job id, got %d arguments", sub, argc - optind);
    const char *ids = argv[optind];
    char *end;
    errno = 0;
    unsigned long long id = strtoull(ids, &end, 10);
    if (errno || end == ids || *end || id == 0 || ids[0] == '-')
        return cli_usage(argv[0], "'%s' is not a job id (a positive number)", ids);
    if (timeout_ms >= 0 && strcmp(sub, "wait"))
        return cli_usage(argv[0], "--timeout-ms is an option of job wait, not job %s", sub);
    if ((rc = cli_conn_open(&cc, &c)))
        return rc;
    sm_job_info info;
    memset(&info, 0, sizeof info);
    sm_job_id jid = {id};
    sm_err e = !strcmp(sub, "status") ? sm_job_status(c, jid, &info, err, sizeof err)
               : !strcmp(sub, "wait") ? sm_job_wait(c, jid, timeout_ms, &info, err, sizeof err)
                                      : sm_job_cancel(c, jid, &info, err, sizeof err);
    if (e) {
        rc = cli_fail(CLI_EXIT_INVALID, "%s", err);
    } else {
        rc = cli_job_report(&info, json);
        if (!rc && !strcmp(sub, "wait") && info.state != SM_JOB_DONE) {
            if (info.state == SM_JOB_QUEUED || info.state == SM_JOB_RUNNING)
                rc = cli_fail(CLI_EXIT_INVALID, "job %llu is still %s after %lld ms", id,
                              sm_job_state_name(info.state), (long long)timeout_ms);
            else
                rc = cli_fail(CLI_EXIT_INVALID, "job %llu %s: %s", id,
                              sm_job_state_name(info.state), info.error);
        }
    }
    sm_job_info_free(&info);
    sm_client_close(c);
    return rc;
}
