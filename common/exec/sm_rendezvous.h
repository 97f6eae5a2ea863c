/* sm_rendezvous: where the members of a collective that live in one process
 * meet, and the abort state of the job they belong to. Shared by
 * sm_comm_local (every member in-process) and the worker's comm_grpc (the
 * members on one worker).
 *
 * A slot is keyed by (sequence number, group leader members[0]). Each of its
 * size members joins with its own index, publishes its input and output
 * pointers and waits at a first barrier until all have arrived; members then
 * read each other's pointers freely until sm_rendezvous_leave, a second
 * barrier that keeps every pointer valid until all are done (the last member
 * out frees the slot). Between join and leave, sm_rendezvous_mid is a full
 * barrier that ORs a failure flag, and sm_rendezvous_publish /
 * sm_rendezvous_wait_shared hand one pointer from one member to the others.
 *
 * Aborts: the first sm_rendezvous_abort wins, wakes every waiter and calls the
 * on_abort hook; later joins fail at once with its code and sentence. A
 * member whose peers have not all arrived by its deadline aborts with
 * SM_ETIMEOUT and the sentence of the timeout_why hook.
 *
 * Ownership: sm_rendezvous_create returns a context owned by the caller,
 * freed by sm_rendezvous_free once no thread uses it; it copies the config
 * (whose names and user it borrows). All functions are thread-safe. */
#ifndef SM_RENDEZVOUS_H
#define SM_RENDEZVOUS_H

#include <time.h>

#include "sm_array.h"
#include "sm_comm.h"

/* What a member joins with. g is borrowed for the call. */
typedef struct {
    const sm_comm_group *g; /* members[0] keys the slot; rank names the caller */
    uint64_t seq;
    int size;                  /* members meeting in this process */
    int index;                 /* the caller's, in [0, size) */
    int kind;                  /* an index into the config's names; every member agrees */
    int64_t arg;               /* a size every member agrees on */
    const sm_comm_arrays *arr; /* the arrays of in and out, or NULL */
} sm_rendezvous_key;

/* One rendezvous. Members read in, out and shared between join and leave;
 * the other fields belong to sm_rendezvous. */
typedef struct sm_rendezvous_slot {
    const void **in;            /* per index; a NULL input reads as a non-NULL dummy */
    void **out;                 /* per index */
    const sm_comm_arrays **arr; /* per index: its key's arr (NULL: none) */
    const void *shared;         /* set by sm_rendezvous_publish */
    void *scratch;              /* a member's sm_array_scratch of scratch_len bytes from
                                 * scratch_pool, freed with the slot */
    size_t scratch_len;
    sm_array_pool *scratch_pool; /* borrowed; NULL: none */
    struct sm_rendezvous_slot *next;
    uint64_t seq;
    int leader, size, kind;
    int64_t arg;
    int arrived, finished, left, reduced, failed, pstate;
    int synced, sync_failed, sync_last; /* sm_rendezvous_sync */
    int sync_gen;                       /* counts the slot's syncs */
    int64_t spin_us;                    /* before a member sleeps: sm_spin_us of the whole group */
} sm_rendezvous_slot;

typedef struct {
    const char *const *names; /* kind -> collective name, for messages */
    /* Writes the sentence of a join that timed out at key k, missing being
     * the index of a member that has not arrived. Called with the lock held;
     * must not call into the rendezvous. */
    void (*timeout_why)(void *user, const sm_rendezvous_key *k, int missing, char *why, size_t len);
    /* Called once, without the lock, by the abort that wins. May be NULL. */
    void (*on_abort)(void *user, sm_err code, const char *why);
    void *user;
} sm_rendezvous_config;

typedef struct sm_rendezvous sm_rendezvous;

sm_err sm_rendezvous_create(const sm_rendezvous_config *cfg, sm_rendezvous **out, char *err,
                            size_t errlen);
void sm_rendezvous_free(sm_rendezvous *r);

/* Aborts with code and why (one sentence); returns 1 if this call won. */
int sm_rendezvous_abort(sm_rendezvous *r, sm_err code, const char *why);
/* SM_OK while not aborted; else the abort's code, with its sentence in why
 * (if why and len). */
sm_err sm_rendezvous_status(sm_rendezvous *r, char *why, size_t len);
/* SM_OK while not aborted; else the abort's code, with its sentence in err. */
sm_err sm_rendezvous_check(sm_rendezvous *r, char *err, size_t errlen);

/* First barrier: publishes in and out under k and waits for every member
 * until deadline (CLOCK_MONOTONIC). On success *slot is the slot, valid until
 * sm_rendezvous_leave. Fails with the abort's error once aborted (a timeout
 * aborts); with SM_EINVAL when members disagree on kind, size or arg (or an
 * index joins twice), which aborts with SM_ECANCELLED for the others; or with
 * SM_ENOMEM: the caller decides whether that aborts the job. */
sm_err sm_rendezvous_join(sm_rendezvous *r, const sm_rendezvous_key *k, const void *in, void *out,
                          const struct timespec *deadline, sm_rendezvous_slot **slot, char *err,
                          size_t errlen);
/* Waits until every member has called it; returns 1 if any passed failed.
 * Members must not block between join and mid. */
int sm_rendezvous_mid(sm_rendezvous *r, sm_rendezvous_slot *s, int failed);
/* A barrier among the members of s that can be passed any number of times
 * between join and leave: waits until every member has called it (the
 * same number of times) or the job is aborted; returns 1 if any member
 * passed failed, or on an abort. */
int sm_rendezvous_sync(sm_rendezvous *r, sm_rendezvous_slot *s, int failed);
/* Sets s->shared (ok) or marks it failed (!ok) and wakes the waiters. */
void sm_rendezvous_publish(sm_rendezvous *r, sm_rendezvous_slot *s, const void *shared, int ok);
/* Waits until s->shared is published or the job aborted; SM_OK if it was
 * published ok, else the abort's error. The publisher must not block for
 * long. */
sm_err sm_rendezvous_wait_shared(sm_rendezvous *r, sm_rendezvous_slot *s, char *err, size_t errlen);
/* A reduction among the members of slot s, in the tree of sm_comm.h over
 * their indices whoever computes which element, so results are bitwise the
 * same on every run. Called by every member, with its index, between join and
 * leave, after joining with an output that does not overlap any input.
 * All-reduce (scatter 0): inputs and outputs hold n elements of t; each
 * member reduces its share of the elements (n split evenly in index order)
 * and writes it to every member's output, block by block while the block is
 * in cache, so every member works and every output element is written once.
 * A failure on any member fails every member (this calls
 * sm_rendezvous_mid). Reduce-scatter (scatter 1): inputs hold size chunks of
 * n elements; the member reduces chunk index into its own output. Returns
 * SM_OK, or SM_EUNSUPPORTED (a dtype the reduction does not support) with a
 * sentence in err. */
sm_err sm_rendezvous_reduce(sm_rendezvous *r, sm_rendezvous_slot *s, int index, int scatter,
                            sm_dtype t, sm_kern_reduce_op op, int64_t n, char *err, size_t errlen);
/* Second barrier: waits until every member is done with the slot, then the
 * last one out frees it. Members must not block between join and leave for
 * longer than bounded waits. */
void sm_rendezvous_leave(sm_rendezvous *r, sm_rendezvous_slot *s);

#endif
