/* sm_sys: see the header. */
#define _GNU_SOURCE
#include "sm_sys.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sm_file.h"

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

/* Called with a cgroup directory (v2: of the v2 hierarchy) by sm_sys_cgroups. */
typedef void (*sm_sys_visit)(const char *dir, int v2, void *arg);

/* Whether the comma-separated list ctrls (len bytes) names ctrl. */
static int sm_sys_names(const char *ctrls, size_t len, const char *ctrl)
{
    size_t n = strlen(ctrl);
    for (size_t i = 0; i < len;) {
        size_t k = i;
        while (k < len && ctrls[k] != ',')
            k++;
        if (k - i == n && !strncmp(ctrls + i, ctrl, n))
            return 1;
        i = k + 1;
    }
    return 0;
}

/* f on base + cg and on each of its ancestors below base. */
static void sm_sys_visit_up(const char *base, const char *cg, int v2, sm_sys_visit f, void *arg)
{
    char path[1100]; /* base: at most 63 bytes, cg at most 640 */
    snprintf(path, sizeof path, "%s%s", base, cg);
    size_t blen = strlen(base);
    for (size_t len = strlen(path); len > blen; len = strlen(path)) {
        if (path[len - 1] != '/')
            f(path, v2, arg);
        char *slash = strrchr(path + blen, '/');
        if (!slash)
            break;
        *slash = '\0';
    }
}

/* The cgroup directories whose limits bind this process, for controller
 * ctrl: its own cgroup and each ancestor in the v2 hierarchy
 * (/sys/fs/cgroup/...) and in the v1 hierarchies of ctrl (mounted at
 * /sys/fs/cgroup/<m> for each m of mounts), from /proc/self/cgroup; then
 * the roots themselves, all a container that mounts its own cgroup there
 * sees of its limits. Directories that do not exist are passed too: their
 * files do not open. */
static void sm_sys_cgroups(const char *ctrl, const char *const *mounts, size_t nmounts,
                           sm_sys_visit f, void *arg)
{
    /* "0::/path" (v2), "N:cpu,cpuacct:/path" (v1) */
    char *text = sm_sys_text("/proc/self/cgroup"), *save = NULL, base[64];
    for (char *line = text ? strtok_r(text, "\n", &save) : NULL; line;
         line = strtok_r(NULL, "\n", &save)) {
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2 || c2[1] != '/' || strlen(c2) > 640)
            continue;
        if (c2 == c1 + 1) {
            sm_sys_visit_up("/sys/fs/cgroup", c2 + 1, 1, f, arg);
        } else if (sm_sys_names(c1 + 1, (size_t)(c2 - c1 - 1), ctrl)) {
            for (size_t k = 0; k < nmounts; k++) {
                snprintf(base, sizeof base, "/sys/fs/cgroup/%s", mounts[k]);
                sm_sys_visit_up(base, c2 + 1, 0, f, arg);
            }
        }
    }
    free(text);
    f("/sys/fs/cgroup", 1, arg);
    for (size_t k = 0; k < nmounts; k++) {
        snprintf(base, sizeof base, "/sys/fs/cgroup/%s", mounts[k]);
        f(base, 0, arg);
    }
}

/* *(uint64_t *)arg lowered to the memory limit of dir (v2 memory.max, v1
 * memory.limit_in_bytes; "max", and v1's huge "no limit", change nothing). */
static void sm_sys_memory_visit(const char *dir, int v2, void *arg)
{
    uint64_t *mem = arg;
    char path[1200];
    snprintf(path, sizeof path, "%s/%s", dir, v2 ? "memory.max" : "memory.limit_in_bytes");
    char *text = sm_sys_text(path);
    unsigned long long v = 0;
    if (text && sscanf(text, "%llu", &v) == 1 && v > 0 && (*mem == 0 || v < *mem))
        *mem = v;
    free(text);
}

uint64_t sm_sys_memory_bytes(void)
{
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    uint64_t mem = pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : 0;
    static const char *const mounts[] = {"memory"};
    sm_sys_cgroups("memory", mounts, 1, sm_sys_memory_visit, &mem);
    return mem;
}

/* *(int *)arg lowered to the CPU quota of dir: v2 cpu.max, or v1
 * cpu.cfs_quota_us over cpu.cfs_period_us (a quota of -1 is none). */
static void sm_sys_cpus_visit(const char *dir, int v2, void *arg)
{
    int *n = arg;
    char path[1200], line[160];
    if (v2) {
        snprintf(path, sizeof path, "%s/cpu.max", dir);
        char *max = sm_sys_text(path);
        *n = sm_sys_cpus_quota(*n, max);
        free(max);
        return;
    }
    snprintf(path, sizeof path, "%s/cpu.cfs_quota_us", dir);
    char *quota = sm_sys_text(path);
    snprintf(path, sizeof path, "%s/cpu.cfs_period_us", dir);
    char *period = sm_sys_text(path);
    snprintf(line, sizeof line, "%.60s %.60s", quota ? quota : "", period ? period : "");
    free(quota);
    free(period);
    *n = sm_sys_cpus_quota(*n, line);
}

int sm_sys_cpus(void)
{
    cpu_set_t set;
    int n = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 0;
    if (n <= 0) {
        long online = sysconf(_SC_NPROCESSORS_ONLN);
        n = online > 0 ? (int)online : 1;
    }
    static const char *const mounts[] = {"cpu", "cpu,cpuacct", "cpuacct,cpu"};
    sm_sys_cgroups("cpu", mounts, sizeof mounts / sizeof *mounts, sm_sys_cpus_visit, &n);
    return n;
}
