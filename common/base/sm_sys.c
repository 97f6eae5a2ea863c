/* sm_sys: see the header. */
#define _GNU_SOURCE
#include "sm_sys.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sm_file.h"

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

/* The text of a small file of /proc or /sys (malloc'd), or NULL. */
static char *sm_sys_text(const char *path)
{
    char *text = NULL, ignore[64];
    return sm_file_read_text(path, 1 << 16, &text, ignore, sizeof ignore) ? NULL : text;
}

/* n under the quota of a cgroup v2 cpu.max file. */
static int sm_sys_cpus_v2(int n, const char *path)
{
    char *max = sm_sys_text(path);
    n = sm_sys_cpus_quota(n, max);
    free(max);
    return n;
}

/* n under the quota of the cgroup v1 directory dir (cpu.cfs_quota_us over
 * cpu.cfs_period_us; a quota of -1 is none). */
static int sm_sys_cpus_v1(int n, const char *dir)
{
    char path[1100], line[160]; /* dir: at most 1023 bytes */
    snprintf(path, sizeof path, "%s/cpu.cfs_quota_us", dir);
    char *quota = sm_sys_text(path);
    snprintf(path, sizeof path, "%s/cpu.cfs_period_us", dir);
    char *period = sm_sys_text(path);
    snprintf(line, sizeof line, "%.60s %.60s", quota ? quota : "", period ? period : "");
    free(quota);
    free(period);
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
    /* the process's own cgroups: "0::/path" (v2), "N:cpu,cpuacct:/path" (v1) */
    char *text = sm_sys_text("/proc/self/cgroup"), *save = NULL, path[1024];
    for (char *line = text ? strtok_r(text, "\n", &save) : NULL; line;
         line = strtok_r(NULL, "\n", &save)) {
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2 || c2[1] != '/' || strlen(c2) > 640)
            continue;
        const char *cg = strcmp(c2 + 1, "/") ? c2 + 1 : "";
        if (c2 == c1 + 1) { /* v2 */
            snprintf(path, sizeof path, "/sys/fs/cgroup%s/cpu.max", cg);
            n = sm_sys_cpus_v2(n, path);
        } else if (sm_sys_names_cpu(c1 + 1, (size_t)(c2 - c1 - 1))) { /* v1 */
            static const char *const mounts[] = {"cpu", "cpu,cpuacct", "cpuacct,cpu"};
            for (size_t k = 0; k < sizeof mounts / sizeof *mounts; k++) {
                snprintf(path, sizeof path, "/sys/fs/cgroup/%s%s", mounts[k], cg);
                n = sm_sys_cpus_v1(n, path);
            }
        }
    }
    free(text);
    /* a container's own, at the root of what it mounts */
    n = sm_sys_cpus_v2(n, "/sys/fs/cgroup/cpu.max");
    return sm_sys_cpus_v1(n, "/sys/fs/cgroup/cpu");
}
