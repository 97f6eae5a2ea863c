/* sm_comm: the collective interface the per-device executor talks to
 * (docs/architecture.md, "A job's path"). An implementation is a const
 * vtable (sm_comm) plus an opaque context: sm_comm_local.h moves data
 * between threads of one process; a gRPC implementation across worker
 * processes plugs in the same way.
 *
 * A group is the list of mesh positions taking part, in rank order (a
 * device's rank is the mixed radix of its coordinates over the named axes,
 * in the order written, the first most significant), plus the caller's
 * rank. Every member of a group calls the same op with the same group, the
 * same sizes and the same sequence number: the caller's count of
 * collectives issued so far in the job, identical on every device because
 * every device runs the same program. Groups of one sequence number are
 * disjoint, so (seq, members[0]) names one rendezvous.
 *
 * Buffers are dense; `in` is borrowed and must stay valid and unchanged
 * until the call returns; `out` is caller-allocated and must not overlap
 * `in`. Reductions are done in a fixed order (the pairwise tree over ranks
 * below), so results are bitwise identical on every run whatever the
 * thread timing, the transport or the split of the members over workers. Every op returns SM_OK, or
 * an error with one sentence in err: SM_ECANCELLED when the job was aborted (another member
 * failed), SM_ETIMEOUT when a peer did not arrive in time, SM_EINVAL when members disagree on sizes
 * (a bug in the caller).
 *
 * After a member fails outside the comm (a kernel error), it calls abort so
 * members blocked in a collective return instead of hanging. */
#ifndef SM_COMM_H
#define SM_COMM_H

#include <stddef.h>
#include <stdint.h>

#include "sm_array.h"
#include "sm_dtype.h"
#include "sm_err.h"
#include "sm_kern.h"
#include "sm_mesh.h"

/* The collectives, one row each in the order of the vtable below: the
 * kind and the name messages give it. Every implementation keys its
 * rendezvous and its messages on these. */
#define SM_COMM_KINDS(X)                                                                           \
    X(SM_COMM_ALL_REDUCE, "all-reduce")                                                            \
    X(SM_COMM_ALL_GATHER, "all-gather")                                                            \
    X(SM_COMM_REDUCE_SCATTER, "reduce-scatter")                                                    \
    X(SM_COMM_ALL_TO_ALL, "all-to-all")                                                            \
    X(SM_COMM_PERMUTE, "permute")

typedef enum {
#define SM_COMM_KIND_ENUM(kind, name) kind,
    SM_COMM_KINDS(SM_COMM_KIND_ENUM)
#undef SM_COMM_KIND_ENUM
        SM_COMM_NKINDS
} sm_comm_kind;

/* The name of each kind ("all-reduce"), indexed by sm_comm_kind. */
extern const char *const sm_comm_kind_names[SM_COMM_NKINDS];

typedef struct {
    int size;           /* number of members, >= 1 */
    int rank;           /* caller's rank, 0 <= rank < size */
    const int *members; /* mesh positions in rank order; borrowed */
} sm_comm_group;

/* The arrays whose data a collective's in and out are, through which an
 * implementation whose members meet in one process may share bytes
 * instead of copying them (sm_array_alias): a permute's output may become
 * its source's input, an all_gather's or all_reduce's output that of
 * another member of the process (every member's is the same). The caller reads out->data
 * after the call, which may no longer be the call's out. */
typedef struct {
    const sm_array *in; /* in->data is the call's in */
    sm_array *out;      /* out->data is the call's out */
} sm_comm_arrays;

/* 1 if the n members of an all_gather or all_reduce that meet in one process (arrs[i]:
 * member i's arrays, NULL if it gave none) may write one output, member
 * 0's, that the others then share (sm_array_alias cannot fail for them):
 * every member gave its arrays, all outputs are the same size and member
 * 0's has a block. Pure. */
int sm_comm_one_output(const sm_comm_arrays *const *arrs, int n);
/* Once that one output is written: member index's output shares member
 * 0's bytes (sm_array_alias) instead of its own; nothing for member 0. */
void sm_comm_share_output(const sm_comm_arrays *const *arrs, int index);

typedef struct sm_comm {
    const char *name;
    /* out[i] = in_0[i] op in_1[i] op ... (op sum, max or min, combined in
     * the tree below), n elements of t on every member. arr: the arrays of
     * in and out, or NULL (every member gives them, or none): members of
     * one process may then share one output. */
    sm_err (*all_reduce)(void *ctx, const sm_comm_group *g, uint64_t seq, sm_dtype t,
                         sm_kern_reduce_op op, const void *in, void *out, int64_t n,
                         const sm_comm_arrays *arr, char *err, size_t errlen);
    /* out = in_0 | in_1 | ... (rank-order concatenation); every member
     * gives nbytes, out holds size * nbytes. arr: the arrays of in and out,
     * or NULL (every member gives them, or none). */
    sm_err (*all_gather)(void *ctx, const sm_comm_group *g, uint64_t seq, const void *in, void *out,
                         int64_t nbytes, const sm_comm_arrays *arr, char *err, size_t errlen);
    /* in holds size chunks of n elements; member r gets the reduction (in
     * the tree below) of every member's chunk r, n elements. */
    sm_err (*reduce_scatter)(void *ctx, const sm_comm_group *g, uint64_t seq, sm_dtype t,
                             sm_kern_reduce_op op, const void *in, void *out, int64_t n, char *err,
                             size_t errlen);
    /* in holds size chunks of chunk_bytes; chunk j goes to rank j; out holds
     * the received chunks in source rank order. */
    sm_err (*all_to_all)(void *ctx, const sm_comm_group *g, uint64_t seq, const void *in, void *out,
                         int64_t chunk_bytes, char *err, size_t errlen);
    /* perm: npairs (src, dst) rank pairs, sources unique and destinations
     * unique. The member that is dst of a pair gets src's nbytes; a member
     * that is no destination gets zeros. arr: the arrays of in and out, or
     * NULL (every member gives them, or none). */
    sm_err (*permute)(void *ctx, const sm_comm_group *g, uint64_t seq, const int64_t (*perm)[2],
                      int npairs, const void *in, void *out, int64_t nbytes,
                      const sm_comm_arrays *arr, char *err, size_t errlen);
    /* Aborts the job: every member blocked now or later in a collective of
     * ctx returns SM_ECANCELLED with a sentence quoting why. The first abort
     * wins; later ones are ignored. Thread-safe. */
    void (*abort)(void *ctx, const char *why);
    /* SM_OK while the job runs; the abort's error and sentence once it was
     * aborted (a cancel, a deadline, a failed peer). Polled by the program's
     * while loops, which may run without a collective. May be NULL. */
    sm_err (*check)(void *ctx, char *err, size_t errlen);
} sm_comm;

/* ---- the reduction order ---------------------------------------------------------------------
 *
 * Every reduction of a collective (all_reduce, reduce_scatter) combines the
 * members' values in one fixed pairwise tree over the ranks [0, size),
 * whatever the implementation and however the members are spread over
 * threads, workers and hosts: a node [lo, hi) of more than one rank is
 * node [lo, mid) op node [mid, hi), mid = lo + the largest power of two
 * below hi - lo (so 8 ranks add as ((0+1)+(2+3))+((4+5)+(6+7)), and 6 as
 * ((0+1)+(2+3))+(4+5)). Results are bitwise identical for one group
 * whatever the transport and the split of the devices over workers. An
 * implementation reduces the largest nodes whose members it holds where
 * they are (sm_comm_tree_units) and combines those partials in the same
 * tree (sm_comm_tree_reduce). */

typedef struct {
    int lo, hi; /* the ranks [lo, hi) of a tree node */
} sm_comm_span;

/* The largest tree nodes within node [lo, hi) whose ranks r all have the
 * same owner[r], in rank order, into spans (room for hi - lo); returns
 * their count. owner is indexed by rank. Pure. */
int sm_comm_tree_units(int lo, int hi, const int *owner, sm_comm_span *spans);

/* A value taking part in a tree reduction: node [lo, hi)'s value, the n
 * elements from data (borrowed). */
typedef struct {
    int lo, hi;
    const void *data;
} sm_comm_leaf;

/* dst (n elements of t) = the value of tree node [lo, hi), from leaves:
 * tree nodes in rank order that partition [lo, hi). Works a block at a
 * time in cache; dst must overlap no leaf. Returns SM_OK; SM_EUNSUPPORTED
 * for a dtype the op does not support, SM_ENOMEM, or SM_EINVAL when the
 * leaves are no such partition (a bug in the caller), with a sentence in
 * err. Thread-safe. */
sm_err sm_comm_tree_reduce(sm_dtype t, sm_kern_reduce_op op, int lo, int hi,
                           const sm_comm_leaf *leaves, int nleaves, int64_t n, void *dst, char *err,
                           size_t errlen);

/* The group of mesh position pos over the named mesh axes (in the order
 * written): members (caller-provided, room for m->ndevices) receives the
 * positions sharing pos's coordinates on every other axis, in rank order.
 * SM_EINVAL for an unknown or repeated axis name. */
sm_err sm_comm_group_make(const sm_mesh *m, int pos, int naxes,
                          const char (*axes)[SM_AXIS_NAME_MAX], int *members, sm_comm_group *g,
                          char *err, size_t errlen);

#endif
