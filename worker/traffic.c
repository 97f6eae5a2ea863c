/* traffic: byte counters of the worker process (traffic.h). */
#include "traffic.h"

static uint64_t sm_traffic[SM_TRAFFIC_COUNT];

void sm_traffic_add(sm_traffic_kind k, int64_t bytes)
{
    if ((unsigned)k < SM_TRAFFIC_COUNT && bytes > 0)
        __atomic_add_fetch(&sm_traffic[k], (uint64_t)bytes, __ATOMIC_RELAXED);
}

void sm_traffic_get(uint64_t out[SM_TRAFFIC_COUNT])
{
    for (int k = 0; k < SM_TRAFFIC_COUNT; k++)
        out[k] = __atomic_load_n(&sm_traffic[k], __ATOMIC_RELAXED);
}
