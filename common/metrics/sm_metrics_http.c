/* sm_metrics_http: a Prometheus endpoint over libmicrohttpd (sm_metrics_http.h). */
#include "sm_metrics_http.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct sm_metrics_http {
    struct MHD_Daemon *d;
    sm_metrics_render_fn render;
    void *user;
};

void sm_metrics_help(sm_strbuf *b, const char *name, const char *type, const char *text)
{
    sm_strbuf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, text, name, type);
}

void sm_metrics_value(sm_strbuf *b, const char *name, const char *type, const char *text,
                      long long value)
{
    sm_metrics_help(b, name, type, text);
    sm_strbuf_printf(b, "%s %lld\n", name, value);
}

void sm_metrics_histogram(sm_strbuf *out, const char *name, const char *labels,
                          const double *bounds, const uint64_t *counts, int n, double sum)
{
    const char *sep = labels && *labels ? "," : "";
    if (!labels)
        labels = "";
    uint64_t cum = 0;
    for (int k = 0; k < n; k++) {
        cum += counts[k];
        sm_strbuf_printf(out, "%s_bucket{%s%sle=\"%g\"} %llu\n", name, labels, sep, bounds[k],
                         (unsigned long long)cum);
    }
    cum += counts[n];
    sm_strbuf_printf(out, "%s_bucket{%s%sle=\"+Inf\"} %llu\n", name, labels, sep,
                     (unsigned long long)cum);
    const char *open = *labels ? "{" : "", *close = *labels ? "}" : "";
    sm_strbuf_printf(out, "%s_sum%s%s%s %.6f\n%s_count%s%s%s %llu\n", name, open, labels, close,
                     sum, name, open, labels, close, (unsigned long long)cum);
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *c, const char *url,
                              const char *method, const char *version, const char *upload,
                              size_t *upload_size, void **con_cls)
{
    sm_metrics_http *m = cls;
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
    sm_err e = m->render(m->user, &b);
    const char *text = e ? "shmap: the metrics could not be read\n" : sm_strbuf_str(&b);
    r = MHD_create_response_from_buffer(strlen(text), (void *)text, MHD_RESPMEM_MUST_COPY);
    MHD_add_response_header(r, "Content-Type", "text/plain; version=0.0.4; charset=utf-8");
    rc = MHD_queue_response(c, e ? MHD_HTTP_INTERNAL_SERVER_ERROR : MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    sm_strbuf_free(&b);
    return rc;
}

sm_err sm_metrics_http_start(const char *addr, sm_metrics_render_fn render, void *user,
                             sm_metrics_http **out, int *port, char *err, size_t errlen)
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
    sm_metrics_http *m = calloc(1, sizeof *m);
    if (!m)
        return sm_fail(err, errlen, SM_ENOMEM, "out of memory starting the metrics endpoint");
    m->render = render;
    m->user = user;
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

void sm_metrics_http_stop(sm_metrics_http *m)
{
    if (!m)
        return;
    MHD_stop_daemon(m->d);
    free(m);
}
