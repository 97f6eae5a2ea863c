/* sm_arena: a bump allocator for objects that share one lifetime (a program
 * owns its nodes). The arena owns every block it hands out; sm_arena_free
 * releases them all at once. Not thread-safe. */
#ifndef SM_ARENA_H
#define SM_ARENA_H

#include <stddef.h>

typedef struct sm_arena sm_arena;

/* Returns NULL when out of memory. block_size 0 picks 64 KiB. */
sm_arena *sm_arena_create(size_t block_size);
/* Zeroed memory aligned for any type, or NULL when out of memory. */
void *sm_arena_alloc(sm_arena *a, size_t n);
char *sm_arena_strdup(sm_arena *a, const char *s);
char *sm_arena_strndup(sm_arena *a, const char *s, size_t n);
/* Has sm_arena_free call fn(p) before it releases the blocks, the latest
 * registration first: for memory something else allocated that must live
 * as long as the arena. Returns 0, or -1 when out of memory (then fn is not
 * registered and the caller still owns p). */
int sm_arena_defer(sm_arena *a, void (*fn)(void *), void *p);
/* Runs the deferred calls, then frees every block. NULL is a no-op. */
void sm_arena_free(sm_arena *a);

#endif
