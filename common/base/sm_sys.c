/* sm_sys: see the header. */
#define _GNU_SOURCE
#include "sm_sys.h"

#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

uint64_t sm_sys_memory_bytes(void)
{
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    uint64_t mem = pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : 0;
    static const char *limits[] = {"/sys/fs/cgroup/memory.max",
                                   "/sys/fs/cgroup/memory/memory.limit_in_bytes"};
    for (size_t k = 0; k < sizeof limits / sizeof *limits; k++) {
        FILE *f = fopen(limits[k], "r");
        unsigned long long v = 0;
        if (!f)
            continue;
        if (fscanf(f, "%llu", &v) == 1 && v > 0 && (mem == 0 || v < mem))
            mem = v; /* "max" (no limit) does not parse */
        fclose(f);
    }
    return mem;
}

int sm_sys_cpus_quota(int affinity, const char *cpu_max)
{
    long long quota = 0, period = 0;
    int n = affinity > 0 ? affinity : 1;
    if (cpu_max && sscanf(cpu_max, "%lld %lld", &quota, &period) == 2 && quota > 0 &&
        period > 0) { /* "max PERIOD" does not parse: no quota */
        long long q = (quota + period - 1) / period;
        if (q < n)
            n = (int)q;
    }
    return n;
}

/* The first line of path into buf, without its newline ("" if unreadable). */
static void sm_sys_read_line(const char *path, char *buf, size_t len)
{
    FILE *f = fopen(path, "r");
    buf[0] = 0;
    if (f) {
        if (!fgets(buf, (int)len, f))
            buf[0] = 0;
        fclose(f);
    }
    buf[strcspn(buf, "\n")] = 0;
}

/* n under the quota of the cgroup v1 directory dir (cpu.cfs_quota_us over
 * cpu.cfs_period_us; a quota of -1 is none). */
static int sm_sys_cpus_v1(int n, const char *dir)
{
    char path[1100], quota[64], period[64], line[160]; /* dir: at most 1023 bytes */
    snprintf(path, sizeof path, "%s/cpu.cfs_quota_us", dir);
    sm_sys_read_line(path, quota, sizeof quota);
    snprintf(path, sizeof path, "%s/cpu.cfs_period_us", dir);
    sm_sys_read_line(path, period, sizeof period);
    snprintf(line, sizeof line, "%s %s", quota, period);
    return sm_sys_cpus_quota(n, line);
}

/* 1 if the comma-separated list ctrls names the cpu controller. */
static int sm_sys_names_cpu(const char *ctrls, size_t len)
{
    for (size_t i = 0; i < len;) {
        size_t k = i;
        while (k < len && ctrls[k] != ',')
            k++;
        if (k - i == 3 && !strncmp(ctrls + i, "cpu", 3))
            return 1;
        i = k + 1;
    }
    return 0;
}

int sm_sys_cpus(void)
{
    cpu_set_t set;
    int n = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 0;
    if (n <= 0) {
        long online = sysconf(_SC_NPROCESSORS_ONLN);
        n = online > 0 ? (int)online : 1;
    }
    char line[640], path[1024], max[128];
    /* the process's own cgroups: "0::/path" (v2), "N:cpu,cpuacct:/path" (v1) */
    FILE *f = fopen("/proc/self/cgroup", "r");
    while (f && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2 || c2[1] != '/')
            continue;
        const char *cg = strcmp(c2 + 1, "/") ? c2 + 1 : "";
        if (c2 == c1 + 1) { /* v2 */
            snprintf(path, sizeof path, "/sys/fs/cgroup%s/cpu.max", cg);
            sm_sys_read_line(path, max, sizeof max);
            n = sm_sys_cpus_quota(n, max);
        } else if (sm_sys_names_cpu(c1 + 1, (size_t)(c2 - c1 - 1))) { /* v1 */
            static const char *const mounts[] = {"cpu", "cpu,cpuacct", "cpuacct,cpu"};
            for (size_t k = 0; k < sizeof mounts / sizeof *mounts; k++) {
                snprintf(path, sizeof path, "/sys/fs/cgroup/%s%s", mounts[k], cg);
                n = sm_sys_cpus_v1(n, path);
            }
        }
    }
    if (f)
        fclose(f);
    /* a container's own, at the root of what it mounts */
    sm_sys_read_line("/sys/fs/cgroup/cpu.max", max, sizeof max);
    n = sm_sys_cpus_quota(n, max);
    return sm_sys_cpus_v1(n, "/sys/fs/cgroup/cpu");
}
