/* sm_sys: see the header. */
#include "sm_sys.h"

#include <stdio.h>
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
