/* sm_sys: facts about the machine a process runs on. */
#ifndef SM_SYS_H
#define SM_SYS_H

#include <stdint.h>

/* The memory this process may use, in bytes: the host's physical memory, or
 * its cgroup's memory limit when lower (in a container); 0 if unknown. */
uint64_t sm_sys_memory_bytes(void);

#endif
