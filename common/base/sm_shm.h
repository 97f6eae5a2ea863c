/* sm_shm: shared-memory segments between the worker processes of one host
 * (worker/comm_grpc_shm.c), the probe that proves two processes share them
 * (Worker.ShmProbe), the files a worker keeps between jobs, and the sweep
 * of what killed processes left. Pure C (POSIX shm, flock, futex); the
 * coordinator uses the sweep only.
 *
 * Segment names are "/shmap-" plus lowercase hex and dashes, so a name
 * from the network can never reach outside /dev/shm. A probe segment
 * holds a magic number and a random 64-bit cookie; its reader unlinks it.
 * A job segment (comm_grpc_shm.c) is created by its owner and opened by
 * its peers; every process unlinks it once all peers have it mapped, and
 * again (a no-op by then) when the job ends, so no job name outlives the
 * job, even when a worker dies. Files a worker keeps between jobs
 * (sm_shm_pool) go when it stops; what a killed worker leaves is removed
 * by the next sm_shm_sweep on the host (at a worker's start, after a job
 * that failed, and every --shm-sweep-s seconds on every worker), and so
 * is what a killed client leaves.
 *
 * Ownership: an sm_shm_seg is the caller's, closed with sm_shm_seg_close
 * (which unmaps; it never unlinks). Threads: every function is
 * thread-safe; a segment's memory is synchronized by its users. */
#ifndef SM_SHM_H
#define SM_SHM_H

#include <stddef.h>
#include <stdint.h>

#include "sm_err.h"

#define SM_SHM_NAME_MAX 64
/* The layout of job segments (worker/comm_grpc_shm.c) and array memory this
 * build speaks: 2, the header naming the worker's arena and the inputs'
 * descriptors. Workers that answer the shared-memory proof with another
 * number are not put in one domain (gRPC between them). */
#define SM_SHM_PROTOCOL 2

typedef struct {
    char name[SM_SHM_NAME_MAX];
    int fd;
    void *base;
    size_t len;
} sm_shm_seg;

/* 1 if name is a shmap segment's ("/shmap-" plus lowercase hex and
 * dashes, shorter than SM_SHM_NAME_MAX): a name from the network is
 * checked so before it reaches shm_open. */
int sm_shm_name_valid(const char *name);

/* Creates a probe segment with a random cookie; writes its name (room for
 * SM_SHM_NAME_MAX) and the cookie. */
sm_err sm_shm_probe_create(char *name, uint64_t *cookie, char *err, size_t errlen);
/* Maps the probe segment name, reads its cookie and unlinks it.
 * SM_EINVAL for a name that is not a probe segment's; SM_ENOTFOUND when
 * there is none (another host, another /dev/shm). */
sm_err sm_shm_probe_read(const char *name, uint64_t *cookie, char *err, size_t errlen);
/* Unlinks the probe segment name if it still exists; SM_EINVAL for a name
 * that is not a probe segment's. */
sm_err sm_shm_probe_drop(const char *name, char *err, size_t errlen);

/* Creates the segment name of len bytes (sparse: memory is used as it is
 * written) and maps it; SM_EEXIST if it exists. */
sm_err sm_shm_seg_create(const char *name, size_t len, sm_shm_seg *s, char *err, size_t errlen);
/* Opens and maps the existing segment name, which must hold len bytes
 * (SM_EDATALOSS if shorter); SM_ENOTFOUND if it does not exist yet, or
 * its owner has not sized it yet (empty). */
sm_err sm_shm_seg_open(const char *name, size_t len, sm_shm_seg *s, char *err, size_t errlen);
/* SM_OK if the segment still holds at least end bytes; SM_EDATALOSS with
 * a sentence if it was truncated under its readers (reading past its end
 * would fault). */
sm_err sm_shm_seg_check(const sm_shm_seg *s, size_t end, char *err, size_t errlen);
/* Allocates the pages of bytes [off, off + len) of the segment now
 * (fallocate), so writing them cannot fault: SM_ERESOURCE with a sentence
 * when /dev/shm has no room for them. */
sm_err sm_shm_seg_reserve(const sm_shm_seg *s, size_t off, size_t len, char *err, size_t errlen);
void sm_shm_seg_close(sm_shm_seg *s);
/* A marker: an empty file named name (a segment name), holding no pages,
 * for a fact every process of the host can see. On SM_OK *fd holds it
 * open with a shared flock (so sm_shm_sweep leaves it alone) until the
 * caller closes it; else SM_EIO with a sentence. */
sm_err sm_shm_mark(const char *name, int *fd, char *err, size_t errlen);
/* 1 if the marker (or any file) name exists. */
int sm_shm_marked(const char *name);
/* Unlinks name if it exists (ENOENT is not an error). */
void sm_shm_unlink(const char *name);
/* Unlinks what crashed processes left in /dev/shm: shmap job segments no
 * process holds (every process that maps one holds a shared flock on it
 * until it unmaps it) and probe segments, both older than min_age_s (so
 * that none in the making goes; SM_SHM_SWEEP_AGE_S in the service), and
 * pool files no process holds, whatever their age.
 * Returns how many it removed. */
#define SM_SHM_SWEEP_AGE_S 10
int sm_shm_sweep(int min_age_s);

/* A worker's pool of segment files kept between jobs with their pages, so
 * a job's first collective does not allocate and zero its memory again.
 * A pooled file is named "/shmap-<random>-fff" for its whole life (made
 * unnamed, locked, then linked, so the sweep never sees it unlocked while
 * its process lives); a job gives it its own name with a hard link.
 * Thread-safe. */
typedef struct sm_shm_pool sm_shm_pool;
#define SM_SHM_POOL_KEEP 4 /* idle files kept */
sm_err sm_shm_pool_create(sm_shm_pool **out, char *err, size_t errlen);
/* Unmaps and unlinks every file; none may be taken. NULL ok. */
void sm_shm_pool_free(sm_shm_pool *p);
/* A mapped file of at least len bytes (an idle one, grown if needed, or a
 * new one), not yet named for a job: out->name is "". */
sm_err sm_shm_pool_take(sm_shm_pool *p, size_t len, sm_shm_seg *out, char *err, size_t errlen);
/* Names a taken file name too (a hard link); SM_EEXIST if it exists. */
sm_err sm_shm_pool_name(sm_shm_pool *p, sm_shm_seg *s, const char *name, char *err, size_t errlen);
/* Gives a taken file back: unlinks its job name if any, keeps the file
 * and its mapping for the next job (at most SM_SHM_POOL_KEEP idle). */
void sm_shm_pool_give(sm_shm_pool *p, sm_shm_seg *s);
/* Writes into name (room for SM_SHM_NAME_MAX) the pool name of the taken
 * file s: its name for as long as it lives, for a file lent to other
 * processes as it is (a worker's reshard staging) instead of named for a
 * job; "" if s was not taken from p. s is unchanged (its name stays the
 * job's, if any). */
void sm_shm_pool_file_name(sm_shm_pool *p, const sm_shm_seg *s, char *name);

/* A process's array memory in one shared-memory file, so that other
 * processes of the host read its blocks where they lie (a worker's
 * collective inputs, comm_grpc_shm.c). The file is "/shmap-<random>-fff"
 * like a pool file (locked before it has a name, so the sweep leaves it
 * alone while its process lives and removes it after), sparse, span
 * bytes, mapped whole. A block is a range of it whose pages are allocated
 * (fallocate) when it is taken, so writing it cannot fault, and given back
 * to the system (a hole punched) when it is released. Thread-safe. */
typedef struct sm_shm_arena sm_shm_arena;
sm_err sm_shm_arena_create(size_t span, sm_shm_arena **out, char *err, size_t errlen);
/* From now on the arena takes no block that would leave less than bytes
 * free in /dev/shm (room kept for job segments and clients' staging);
 * 0, the default: any block /dev/shm has room for. */
void sm_shm_arena_reserve_set(sm_shm_arena *a, size_t bytes);
/* Unlinks its name (blocks in use stay valid; no other process can map
 * it from now on). NULL ok. */
void sm_shm_arena_unlink(sm_shm_arena *a);
/* Unlinks and unmaps it: no block may be in use. NULL ok. */
void sm_shm_arena_free(sm_shm_arena *a);
const char *sm_shm_arena_name(const sm_shm_arena *a);
/* Bytes of its blocks taken and not released (0 for NULL). */
size_t sm_shm_arena_used(const sm_shm_arena *a);
size_t sm_shm_arena_span(const sm_shm_arena *a);
/* A block of len bytes (a multiple of 4096), its pages allocated and
 * reading as zeros; NULL if the span or /dev/shm has no room for it. */
void *sm_shm_arena_take(sm_shm_arena *a, size_t len);
/* Gives the block p of len bytes (as taken) back to the system. */
void sm_shm_arena_release(sm_shm_arena *a, void *p, size_t len);
/* 1 if [p, p + n) lies in the arena (NULL: none), with *off its offset
 * in the file; else 0. */
int sm_shm_arena_holds(const sm_shm_arena *a, const void *p, size_t n, uint64_t *off);

/* Views of other processes' arenas, mapped read-only and kept between
 * uses (mapping pages in again costs more than reading them). A view
 * holds no lock, so the sweep removes the file of an arena whose process
 * died; the view, which keeps its pages, is dropped at the next miss or
 * sm_shm_views_prune once nobody uses it. Thread-safe. */
typedef struct sm_shm_views sm_shm_views;
sm_err sm_shm_views_create(sm_shm_views **out, char *err, size_t errlen);
/* Unmaps every view: none may be in use. NULL ok. */
void sm_shm_views_free(sm_shm_views *v);
/* The arena file name (span bytes) mapped read-only at *base, with a
 * reference the caller drops with sm_shm_view_put. SM_EINVAL for a name
 * that is not a segment's, SM_ENOTFOUND if there is none, SM_EDATALOSS if
 * it holds fewer than span bytes. */
sm_err sm_shm_view_get(sm_shm_views *v, const char *name, size_t span, const char **base, char *err,
                       size_t errlen);
void sm_shm_view_put(sm_shm_views *v, const char *base);
/* Drops the unused views whose file is gone or replaced. */
void sm_shm_views_prune(sm_shm_views *v);

/* Runs fn(arg) and returns what it returns; if it touches a page of a
 * shared-memory segment that another process truncated under it (SIGBUS),
 * it is cut short there instead: returns SM_EDATALOSS with *faulted = 1.
 * fn must not hold a lock or own memory it would leak when cut short, or
 * call a guarded function itself. The handler is installed on the first
 * call; a SIGBUS outside a guarded call gets the previous handler. */
sm_err sm_shm_guarded(sm_err (*fn)(void *arg), void *arg, int *faulted);

/* Futex on a 32-bit word of a shared segment (across processes): waits up
 * to ms while *word == val; wakes every waiter. */
void sm_shm_futex_wait(uint32_t *word, uint32_t val, int ms);
void sm_shm_futex_wake(uint32_t *word);

#endif
