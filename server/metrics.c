/* metrics: the coordinator's Prometheus endpoint (metrics.h). */
#include "metrics.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct sm_metrics {
    struct MHD_Daemon *d;
    sm_registry *reg;
    sm_cjobs *jobs;
};

static void help(sm_strbuf *b, const char *name, const char *type, const char *text)
{
    sm_strbuf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, text, name, type);
}

sm_err sm_metrics_render(sm_registry *reg, sm_cjobs *jobs, sm_strbuf *b)
{
    char err[512];
    sm_worker_info *w = NULL;
    sm_array_info *a = NULL;
    int nw = 0, na = 0;
    sm_err e = sm_registry_workers_list(reg, sm_registry_now_ms(), &w, &nw, err, sizeof err);
    if (!e)
        e = sm_registry_array_list(reg, &a, &na, err, sizeof err);
    if (e) {
        free(w);
        return e;
    }
    help(b, "shmap_build_info", "gauge", "The coordinator's version.");
    sm_strbuf_printf(b, "shmap_build_info{version=\"%s\"} 1\n", SM_VERSION);
    int alive = 0;
    for (int i = 0; i < nw; i++)
        alive += w[i].alive != 0;
    help(b, "shmap_workers", "gauge", "Registered workers by state.");
    sm_strbuf_printf(b, "shmap_workers{state=\"alive\"} %d\nshmap_workers{state=\"lost\"} %d\n",
                     alive, nw - alive);
    help(b, "shmap_devices", "gauge", "Devices of the alive workers.");
    int ndev = 0;
    for (int i = 0; i < nw; i++)
        ndev += w[i].alive ? w[i].ndevices : 0;
    sm_strbuf_printf(b, "shmap_devices %d\n", ndev);
    help(b, "shmap_device_used_bytes", "gauge",
         "Bytes of shards each device holds, as its worker last reported.");
    for (int i = 0; i < nw; i++)
        for (int d = 0; w[i].alive && d < w[i].ndevices; d++)
            sm_strbuf_printf(b, "shmap_device_used_bytes{device=\"%d\",worker=\"%u\"} %lld\n",
                             (int)w[i].devices[d], w[i].id, (long long)w[i].device_bytes[d]);
    static const sm_array_state states[] = {SM_ARRAY_PENDING, SM_ARRAY_READY, SM_ARRAY_FAILED,
                                            SM_ARRAY_LOST};
    int64_t count[5] = {0}, bytes[5] = {0};
    for (int i = 0; i < na; i++)
        if (a[i].state >= SM_ARRAY_PENDING && a[i].state <= SM_ARRAY_LOST) {
            count[a[i].state]++;
            bytes[a[i].state] += a[i].bytes;
        }
    help(b, "shmap_arrays", "gauge", "Arrays by state.");
    for (int k = 0; k < 4; k++)
        sm_strbuf_printf(b, "shmap_arrays{state=\"%s\"} %lld\n", sm_array_state_name(states[k]),
                         (long long)count[states[k]]);
    help(b, "shmap_array_bytes", "gauge", "Bytes of one full copy of the arrays, by state.");
    for (int k = 0; k < 4; k++)
        sm_strbuf_printf(b, "shmap_array_bytes{state=\"%s\"} %lld\n",
                         sm_array_state_name(states[k]), (long long)bytes[states[k]]);
    if (jobs) {
        sm_cjobs_stats s;
        sm_cjobs_stats_get(jobs, &s);
        help(b, "shmap_jobs", "gauge", "Jobs waiting to start and running.");
        sm_strbuf_printf(b, "shmap_jobs{state=\"queued\"} %d\nshmap_jobs{state=\"running\"} %d\n",
                         s.queued, s.running);
        help(b, "shmap_jobs_submitted_total", "counter", "Jobs accepted since the start.");
        sm_strbuf_printf(b, "shmap_jobs_submitted_total %llu\n", (unsigned long long)s.submitted);
        help(b, "shmap_jobs_ended_total", "counter", "Jobs ended since the start, by state.");
        static const sm_job_state ends[] = {SM_JOB_DONE, SM_JOB_FAILED, SM_JOB_CANCELLED};
        for (int k = 0; k < 3; k++)
            sm_strbuf_printf(b, "shmap_jobs_ended_total{state=\"%s\"} %llu\n",
                             sm_job_state_name(ends[k]), (unsigned long long)s.ended[ends[k]]);
        help(b, "shmap_job_run_seconds", "histogram", "Time from a job's start to its end.");
        uint64_t cum = 0;
        for (int k = 0; k < SM_CJOBS_NBUCKETS; k++) {
            cum += s.run_hist[k];
            sm_strbuf_printf(b, "shmap_job_run_seconds_bucket{le=\"%g\"} %llu\n", s.buckets_s[k],
                             (unsigned long long)cum);
        }
        cum += s.run_hist[SM_CJOBS_NBUCKETS];
        sm_strbuf_printf(b,
                         "shmap_job_run_seconds_bucket{le=\"+Inf\"} %llu\n"
                         "shmap_job_run_seconds_sum %.6f\nshmap_job_run_seconds_count %llu\n",
                         (unsigned long long)cum, s.run_sum_s, (unsigned long long)cum);
    }
    free(w);
    sm_array_info_list_free(a, na);
    return b->oom ? SM_ENOMEM : SM_OK;
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *c, const char *url,
                              const char *method, const char *version, const char *upload,
                              size_t *upload_size, void **con_cls)
{
    sm_metrics *m = cls;
    struct MHD_Response *r;
    enum MHD_Result rc;
    if (strcmp(method, "GET") != 0 || strcmp(url, "/metrics") != 0) {
        static const char nf[] = "shmap: only GET /metrics is served here\n";
        r = MHD_create_response_from_buffer(sizeof nf - 1, (void *)nf, MHD_RESPMEM_PERSISTENT);
        rc = MHD_queue_response(c, MHD_HTTP_NOT_FOUND, r);
        MHD_destroy_response(r);
        return rc;
    }
    sm_strbuf b = {0};
    sm_err e = sm_metrics_render(m->reg, m->jobs, &b);
    const char *text = e ? "shmap: the metrics could not be read\n" : sm_strbuf_str(&b);
    r = MHD_create_response_from_buffer(strlen(text), (void *)text, MHD_RESPMEM_MUST_COPY);
    MHD_add_response_header(r, "Content-Type", "text/plain; version=0.0.4; charset=utf-8");
    rc = MHD_queue_response(c, e ? MHD_HTTP_INTERNAL_SERVER_ERROR : MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    sm_strbuf_free(&b);
    return rc;
}

sm_err sm_metrics_start(const char *addr, sm_registry *reg, sm_cjobs *jobs, sm_metrics **out,
                        int *port, char *err, size_t errlen)
{
    *out = NULL;
    char host[256];
    const char *colon = strrchr(addr, ':');
    if (!colon || colon == addr || (size_t)(colon - addr) >= sizeof host)
        return sm_fail(err, errlen, SM_EINVAL, "--metrics-listen takes HOST:PORT, got '%s'", addr);
    memcpy(host, addr, (size_t)(colon - addr));
    host[colon - addr] = '\0';
    char *end;
    long p = strtol(colon + 1, &end, 10);
    if (*end || p < 0 || p > 65535)
        return sm_fail(err, errlen, SM_EINVAL, "--metrics-listen: bad port in '%s'", addr);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)p)};
    if (!strcmp(host, "0.0.0.0") || !strcmp(host, "*"))
        sa.sin_addr.s_addr = htonl(INADDR_ANY);
    else if (!strcmp(host, "localhost"))
        sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    else if (inet_pton(AF_INET, host, &sa.sin_addr) != 1)
        return sm_fail(err, errlen, SM_EINVAL,
                       "--metrics-listen: '%s' is not an IPv4 address (or localhost)", host);
    sm_metrics *m = calloc(1, sizeof *m);
    if (!m)
        return sm_fail(err, errlen, SM_ENOMEM, "out of memory starting the metrics endpoint");
    m->reg = reg;
    m->jobs = jobs;
    m->d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG, (uint16_t)p, NULL,
                            NULL, handle, m, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa,
                            MHD_OPTION_CONNECTION_LIMIT, (unsigned)64,
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)10, MHD_OPTION_END);
    if (!m->d) {
        free(m);
        return sm_fail(err, errlen, SM_EUNAVAILABLE,
                       "cannot serve metrics on %s (address in use or not this host's)", addr);
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(m->d, MHD_DAEMON_INFO_BIND_PORT);
    *port = di ? di->port : (int)p;
    *out = m;
    return SM_OK;
}

void sm_metrics_stop(sm_metrics *m)
{
    if (!m)
        return;
    MHD_stop_daemon(m->d);
    free(m);
}
