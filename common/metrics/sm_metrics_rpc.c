/* sm_metrics_rpc: RPC latency histograms (sm_metrics_rpc.h). */
#include "sm_metrics_rpc.h"

#include <stdio.h>

#include "sm_metrics_http.h"

#define SM_METRICS_RPC_MAX 64 /* methods shown: more than either service has */

void sm_metrics_rpc(sm_rpc_server *rpc, sm_strbuf *b)
{
    sm_rpc_method_stats st[SM_METRICS_RPC_MAX];
    int n = sm_rpc_server_stats(rpc, st, SM_METRICS_RPC_MAX);
    sm_metrics_help(b, "shmap_rpc_duration_seconds", "histogram",
                    "Time each RPC method's calls took, from the handler's start to its end.");
    for (int k = 0; k < n && k < SM_METRICS_RPC_MAX; k++) {
        char labels[200];
        snprintf(labels, sizeof labels, "method=\"%s\"", st[k].path);
        sm_metrics_histogram(b, "shmap_rpc_duration_seconds", labels, sm_rpc_latency_bounds_s,
                             st[k].buckets, SM_RPC_LATENCY_NBUCKETS, st[k].sum_s);
    }
}
