/* metrics: the coordinator's Prometheus endpoint (--metrics-listen). Serves
 * GET /metrics in the Prometheus text format (version 0.0.4) over HTTP
 * with libmicrohttpd: workers alive and lost, bytes held per device, arrays
 * and their bytes by state, jobs queued, running and ended by state, and a
 * histogram of job run times, and one of each RPC method's latency. Every scrape reads the registry
 * and the jobs' counters afresh; nothing is cached. */
#ifndef SM_METRICS_H
#define SM_METRICS_H

#include "jobs.h"
#include "registry.h"
#include "sm_rpc.h"
#include "sm_metrics_http.h"
#include "sm_metrics_rpc.h"
#include "sm_strbuf.h"

typedef struct sm_metrics sm_metrics;

/* Renders every metric into out (shmap_ prefix, Prometheus conventions). */
sm_err sm_metrics_render(sm_registry *reg, sm_cjobs *jobs, sm_rpc_server *rpc, sm_strbuf *out);

/* Starts the endpoint on addr ("host:port"; port 0 picks a free one) over
 * reg, jobs and rpc (borrowed; they outlive the endpoint; jobs and rpc may
 * be NULL). *port gets the bound port. Free with sm_metrics_stop. */
sm_err sm_metrics_start(const char *addr, sm_registry *reg, sm_cjobs *jobs, sm_rpc_server *rpc,
                        sm_metrics **out, int *port, char *err, size_t errlen);
/* Stops serving and frees m; NULL is ignored. */
void sm_metrics_stop(sm_metrics *m);

#endif
