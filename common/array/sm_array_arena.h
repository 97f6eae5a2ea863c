/* sm_array_arena: an array pool's blocks in shared memory (internal; not
 * installed with sm_array.h). */
#ifndef SM_ARRAY_ARENA_H
#define SM_ARRAY_ARENA_H

#include "sm_array.h"

/* Blocks of 1 MiB and more come from arena first (sm_shm.h: a shared-memory
 * file other processes of the host can read them in), from private memory
 * when it has no room. The pool owns the arena from here on: it unlinks
 * its name in sm_array_pool_free and frees it with the pool. Set it before
 * the first allocation, once. */
typedef struct sm_shm_arena sm_shm_arena;
void sm_array_pool_arena_set(sm_array_pool *pool, sm_shm_arena *arena);
/* The pool's arena, or NULL (NULL pool ok). */
sm_shm_arena *sm_array_pool_arena(const sm_array_pool *pool);

#endif
