#include "sm_info.h"

#include <stdlib.h>

const char *sm_array_state_name(sm_array_state s)
{
    switch (s) {
    case SM_ARRAY_PENDING:
        return "pending";
    case SM_ARRAY_READY:
        return "ready";
    case SM_ARRAY_FAILED:
        return "failed";
    case SM_ARRAY_LOST:
        return "lost";
    case SM_ARRAY_DEGRADED:
        return "degraded";
    }
    return "?";
}

void sm_array_info_free(sm_array_info *info)
{
    if (!info)
        return;
    free(info->shards);
    info->shards = NULL;
    info->nshards = 0;
    free(info->copies);
    info->copies = NULL;
    info->ncopies = 0;
}

void sm_array_info_list_free(sm_array_info *list, int n)
{
    if (!list)
        return;
    for (int i = 0; i < n; i++)
        sm_array_info_free(&list[i]);
    free(list);
}

const char *sm_job_state_name(sm_job_state s)
{
    switch (s) {
    case SM_JOB_QUEUED:
        return "queued";
    case SM_JOB_RUNNING:
        return "running";
    case SM_JOB_DONE:
        return "done";
    case SM_JOB_FAILED:
        return "failed";
    case SM_JOB_CANCELLED:
        return "cancelled";
    }
    return "?";
}

void sm_job_info_free(sm_job_info *info)
{
    if (!info)
        return;
    sm_array_info_list_free(info->outputs, info->noutputs);
    info->outputs = NULL;
    info->noutputs = 0;
}
