#include "sm_tenant.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

static _Thread_local char sm_tenant_now[SM_TENANT_MAX];

void sm_tenant_set(const char *tenant)
{
    snprintf(sm_tenant_now, sizeof sm_tenant_now, "%s", tenant ? tenant : "");
}

const char *sm_tenant_current(void)
{
    return sm_tenant_now;
}

int sm_tenant_sees(const char *owner)
{
    return !sm_tenant_now[0] || !strcmp(sm_tenant_now, owner ? owner : "");
}

int sm_tenant_name_ok(const char *name)
{
    size_t n = strlen(name);
    if (n == 0 || n >= SM_TENANT_MAX)
        return 0;
    for (size_t k = 0; k < n; k++)
        if (!isalnum((unsigned char)name[k]) && !strchr("-_.", name[k]))
            return 0;
    return 1;
}
