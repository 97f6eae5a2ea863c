/* sm_sys: facts about the machine a process runs on. */
#ifndef SM_SYS_H
#define SM_SYS_H

#include <stdint.h>

/* The memory this process may use, in bytes: the host's physical memory, or
 * the lowest memory limit of its cgroup and the cgroups above it when lower
 * (v2 memory.max, v1 memory.limit_in_bytes; a container's, also when it
 * sees its own cgroup as the root of the mounted hierarchy); 0 if
 * unknown. */
uint64_t sm_sys_memory_bytes(void);

/* The CPUs this process may keep busy: those of its affinity mask, or
 * fewer when a CPU quota allows fewer (cgroup v2 cpu.max, or v1
 * cpu.cfs_quota_us over cpu.cfs_period_us, of the process's own cgroup,
 * the cgroups above it, or the root of the mounted hierarchy, as a
 * container sees it), the lowest, rounded up; at least 1. */
int sm_sys_cpus(void);

/* The CPUs of affinity CPUs under the quota of a cgroup v2 cpu.max line
 * ("QUOTA PERIOD", or "max PERIOD" for none; NULL: none), rounded up, at
 * least 1. Pure. */
int sm_sys_cpus_quota(int affinity, const char *cpu_max);

#endif
