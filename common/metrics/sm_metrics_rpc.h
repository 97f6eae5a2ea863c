/* sm_metrics_rpc: an RPC server's per-method latency, as Prometheus
 * histograms, for the coordinator's and the workers' endpoints. */
#ifndef SM_METRICS_RPC_H
#define SM_METRICS_RPC_H

#include "sm_rpc.h"
#include "sm_strbuf.h"

/* shmap_rpc_duration_seconds{method="/shmap.v1.Coordinator/Describe",le=...}:
 * each method's calls, from the handler's start to its end (a stream's
 * whole life), over sm_rpc_latency_bounds_s. */
void sm_metrics_rpc(sm_rpc_server *rpc, sm_strbuf *out);

#endif
