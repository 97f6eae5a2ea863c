/* metrics: the coordinator's Prometheus endpoint (metrics.h). */
#include "metrics.h"
#include "sm_time.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct sm_metrics {
    sm_metrics_http *http;
    sm_registry *reg;
    sm_cjobs *jobs;
    sm_rpc_server *rpc;
};

sm_err sm_metrics_render(sm_registry *reg, sm_cjobs *jobs, sm_rpc_server *rpc, sm_strbuf *b)
{
    char err[512];
    sm_worker_info *w = NULL;
    sm_array_info *a = NULL;
    int nw = 0, na = 0;
    sm_err e = sm_registry_workers_list(reg, sm_time_mono_ms(), &w, &nw, err, sizeof err);
    if (!e)
        e = sm_registry_array_list(reg, &a, &na, err, sizeof err);
    if (e) {
        free(w);
        return e;
    }
    sm_metrics_help(b, "shmap_build_info", "gauge", "The coordinator's version.");
    sm_strbuf_printf(b, "shmap_build_info{version=\"%s\"} 1\n", SM_VERSION);
    int alive = 0;
    for (int i = 0; i < nw; i++)
        alive += w[i].alive != 0;
    sm_metrics_help(b, "shmap_workers", "gauge", "Registered workers by state.");
    sm_strbuf_printf(b, "shmap_workers{state=\"alive\"} %d\nshmap_workers{state=\"lost\"} %d\n",
                     alive, nw - alive);
    int ndev = 0;
    for (int i = 0; i < nw; i++)
        ndev += w[i].alive ? w[i].ndevices : 0;
    sm_metrics_value(b, "shmap_devices", "gauge", "Devices of the alive workers.", ndev);
    sm_metrics_help(b, "shmap_device_used_bytes", "gauge",
                    "Bytes of shards each device holds, as its worker last reported.");
    for (int i = 0; i < nw; i++)
        for (int d = 0; w[i].alive && d < w[i].ndevices; d++)
            sm_strbuf_printf(b, "shmap_device_used_bytes{device=\"%d\",worker=\"%u\"} %lld\n",
                             (int)w[i].devices[d], w[i].id.v, (long long)w[i].device_bytes[d]);
    static const sm_array_state states[] = {SM_ARRAY_PENDING, SM_ARRAY_READY, SM_ARRAY_FAILED,
                                            SM_ARRAY_LOST, SM_ARRAY_DEGRADED};
    enum { NSTATES = sizeof states / sizeof *states };
    int64_t count[NSTATES + 1] = {0}, bytes[NSTATES + 1] = {0};
    for (int i = 0; i < na; i++)
        if (a[i].state >= SM_ARRAY_PENDING && a[i].state <= SM_ARRAY_DEGRADED) {
            count[a[i].state]++;
            bytes[a[i].state] += a[i].bytes;
        }
    sm_metrics_help(b, "shmap_arrays", "gauge", "Arrays by state.");
    for (int k = 0; k < NSTATES; k++)
        sm_strbuf_printf(b, "shmap_arrays{state=\"%s\"} %lld\n", sm_array_state_name(states[k]),
                         (long long)count[states[k]]);
    sm_metrics_help(b, "shmap_array_bytes", "gauge",
                    "Bytes of one full copy of the arrays, by state.");
    for (int k = 0; k < NSTATES; k++)
        sm_strbuf_printf(b, "shmap_array_bytes{state=\"%s\"} %lld\n",
                         sm_array_state_name(states[k]), (long long)bytes[states[k]]);
    if (jobs) {
        sm_cjobs_stats s;
        sm_cjobs_stats_get(jobs, &s);
        sm_metrics_help(b, "shmap_jobs", "gauge", "Jobs waiting to start and running.");
        sm_strbuf_printf(b, "shmap_jobs{state=\"queued\"} %d\nshmap_jobs{state=\"running\"} %d\n",
                         s.queued, s.running);
        sm_metrics_value(b, "shmap_jobs_submitted_total", "counter",
                         "Jobs accepted since the start.", (long long)s.submitted);
        sm_metrics_help(b, "shmap_jobs_ended_total", "counter",
                        "Jobs ended since the start, by state.");
        static const sm_job_state ends[] = {SM_JOB_DONE, SM_JOB_FAILED, SM_JOB_CANCELLED};
        for (int k = 0; k < 3; k++)
            sm_strbuf_printf(b, "shmap_jobs_ended_total{state=\"%s\"} %llu\n",
                             sm_job_state_name(ends[k]), (unsigned long long)s.ended[ends[k]]);
        sm_metrics_help(b, "shmap_job_run_seconds", "histogram",
                        "Time from a job's start to its end.");
        sm_metrics_histogram(b, "shmap_job_run_seconds", "", s.buckets_s, s.run_hist,
                             SM_CJOBS_NBUCKETS, s.run_sum_s);
    }
    if (rpc)
        sm_metrics_rpc(rpc, b);
    free(w);
    sm_array_info_list_free(a, na);
    return b->oom ? SM_ENOMEM : SM_OK;
}

static sm_err render(void *user, sm_strbuf *out)
{
    sm_metrics *m = user;
    return sm_metrics_render(m->reg, m->jobs, m->rpc, out);
}

sm_err sm_metrics_start(const char *addr, sm_registry *reg, sm_cjobs *jobs, sm_rpc_server *rpc,
                        sm_metrics **out, int *port, char *err, size_t errlen)
{
    *out = NULL;
    sm_metrics *m = calloc(1, sizeof *m);
    if (!m)
        return sm_fail(err, errlen, SM_ENOMEM, "out of memory starting the metrics endpoint");
    m->reg = reg;
    m->jobs = jobs;
    m->rpc = rpc;
    sm_err e = sm_metrics_http_start(addr, render, m, &m->http, port, err, errlen);
    if (e) {
        free(m);
        return e;
    }
    *out = m;
    return SM_OK;
}

void sm_metrics_stop(sm_metrics *m)
{
    if (!m)
        return;
    sm_metrics_http_stop(m->http);
    free(m);
}
