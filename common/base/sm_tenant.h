/* sm_tenant: whose request a thread serves. A coordinator with tenants
 * (--tokens) knows each call's tenant by its token; the RPC server sets it
 * around the handler, and whoever runs work for a request on another thread
 * (a job) sets it there. The registry and the job table keep what each
 * tenant makes apart by it. "" is the cluster itself (its own processes,
 * or a client holding the cluster's token): it sees everything. */
#ifndef SM_TENANT_H
#define SM_TENANT_H

/* A tenant's name: letters, digits, '-', '_' and '.', at most this long
 * with its NUL. */
#define SM_TENANT_MAX 32

/* Sets this thread's tenant (NULL or "": the cluster); truncated to fit. */
void sm_tenant_set(const char *tenant);
/* This thread's tenant, "" for the cluster. */
const char *sm_tenant_current(void);
/* Whether what tenant owner made is visible to this thread's tenant: the
 * cluster sees everything, a tenant only its own. */
int sm_tenant_sees(const char *owner);
/* 1 if name is a valid tenant name (see SM_TENANT_MAX). */
int sm_tenant_name_ok(const char *name);

#endif
