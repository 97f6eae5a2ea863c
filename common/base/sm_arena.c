#include "sm_arena.h"

#include <stdalign.h>
#include <stdlib.h>
#include <string.h>

typedef struct sm_arena_block {
    struct sm_arena_block *next;
    size_t used;
    size_t cap;
    alignas(max_align_t) unsigned char data[];
} sm_arena_block;

typedef struct sm_arena_defer_row {
    struct sm_arena_defer_row *next;
    void (*fn)(void *);
    void *p;
} sm_arena_defer_row;

struct sm_arena {
    sm_arena_block *head;
    sm_arena_defer_row *deferred; /* latest first; the rows live in the blocks */
    size_t block_size;
};

sm_arena *sm_arena_create(size_t block_size)
{
    sm_arena *a = calloc(1, sizeof *a);
    if (!a)
        return NULL;
    a->block_size = block_size ? block_size : 64 * 1024;
    return a;
}

void *sm_arena_alloc(sm_arena *a, size_t n)
{
    const size_t al = alignof(max_align_t);
    n = (n + al - 1) & ~(al - 1);
    if (n == 0)
        n = al;
    sm_arena_block *b = a->head;
    if (!b || b->cap - b->used < n) {
        size_t cap = n > a->block_size ? n : a->block_size;
        b = malloc(sizeof *b + cap);
        if (!b)
            return NULL;
        b->used = 0;
        b->cap = cap;
        b->next = a->head;
        a->head = b;
    }
    void *p = b->data + b->used;
    b->used += n;
    memset(p, 0, n);
    return p;
}

char *sm_arena_strndup(sm_arena *a, const char *s, size_t n)
{
    char *p = sm_arena_alloc(a, n + 1);
    if (!p)
        return NULL;
    memcpy(p, s, n);
    p[n] = 0;
    return p;
}

char *sm_arena_strdup(sm_arena *a, const char *s)
{
    return sm_arena_strndup(a, s, strlen(s));
}

int sm_arena_defer(sm_arena *a, void (*fn)(void *), void *p)
{
    sm_arena_defer_row *r = sm_arena_alloc(a, sizeof *r);
    if (!r)
        return -1;
    r->fn = fn;
    r->p = p;
    r->next = a->deferred;
    a->deferred = r;
    return 0;
}

void sm_arena_free(sm_arena *a)
{
    if (!a)
        return;
    for (sm_arena_defer_row *r = a->deferred; r; r = r->next)
        r->fn(r->p);
    sm_arena_block *b = a->head;
    while (b) {
        sm_arena_block *n = b->next;
        free(b);
        b = n;
    }
    free(a);
}
