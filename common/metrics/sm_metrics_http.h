/* sm_metrics_http: a Prometheus endpoint — GET /metrics over HTTP
 * (libmicrohttpd), answered with the text a render callback writes on
 * every scrape (the Prometheus text format, version 0.0.4); any other path
 * is 404. The coordinator and the workers each run one when given
 * --metrics-listen (server/metrics.c, worker/main.c). */
#ifndef SM_METRICS_HTTP_H
#define SM_METRICS_HTTP_H

#include <stdint.h>

#include "sm_err.h"
#include "sm_strbuf.h"

/* Writes every metric into out; called from the endpoint's own thread, so
 * it must be thread-safe with the rest of the process. */
typedef sm_err (*sm_metrics_render_fn)(void *user, sm_strbuf *out);

typedef struct sm_metrics_http sm_metrics_http;

/* Serves on addr ("host:port", an IPv4 address, 0.0.0.0 or localhost; port
 * 0 picks a free one, returned in *port). user is borrowed and must
 * outlive the endpoint. SM_EINVAL for a bad address, SM_EUNAVAILABLE when
 * it cannot be bound. Free with sm_metrics_http_stop. */
sm_err sm_metrics_http_start(const char *addr, sm_metrics_render_fn render, void *user,
                             sm_metrics_http **out, int *port, char *err, size_t errlen);
/* Stops serving (waits for a scrape in progress) and frees h; NULL ignored. */
void sm_metrics_http_stop(sm_metrics_http *h);

/* The --metrics-listen row of a program's sm_config table, read from the
 * environment variable env. */
#define SM_METRICS_CONFIG_ROW(env)                                                                 \
    {                                                                                              \
        "metrics-listen", 0, SM_CFG_STRING, NULL, env,                                             \
            "serve Prometheus metrics (GET /metrics) on HOST:PORT (port 0: a free one, "           \
            "logged); default: none"                                                               \
    }

/* "# HELP name text\n# TYPE name type\n" into out. */
void sm_metrics_help(sm_strbuf *out, const char *name, const char *type, const char *text);
/* A metric of one sample without labels: its help (sm_metrics_help), then
 * "name value\n". */
void sm_metrics_value(sm_strbuf *out, const char *name, const char *type, const char *text,
                      long long value);
/* The samples of one histogram series: name_bucket{labels,le="..."} for
 * each of the n upper bounds (counts[k]: observations in bucket k, not
 * cumulative; counts[n]: above the last bound), then +Inf, name_sum and
 * name_count. labels is "" or 'key="value",...' without braces. */
void sm_metrics_histogram(sm_strbuf *out, const char *name, const char *labels,
                          const double *bounds, const uint64_t *counts, int n, double sum);

#endif
