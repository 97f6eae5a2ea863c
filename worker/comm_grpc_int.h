/* comm_grpc_int: what comm_grpc.c shares with comm_grpc_shm.c, its
 * shared-memory half (not a public interface). */
#ifndef SM_WORKER_COMM_GRPC_INT_H
#define SM_WORKER_COMM_GRPC_INT_H

#include "comm_grpc.h"
#include "sm_rendezvous.h"

/* Short names of the collective kinds of sm_comm.h. */
typedef sm_comm_kind sm_cg_kind;
#define SM_CG_AR   SM_COMM_ALL_REDUCE
#define SM_CG_AG   SM_COMM_ALL_GATHER
#define SM_CG_RS   SM_COMM_REDUCE_SCATTER
#define SM_CG_A2A  SM_COMM_ALL_TO_ALL
#define SM_CG_PERM SM_COMM_PERMUTE

typedef struct sm_cg_shm sm_cg_shm;

struct sm_comm_grpc {
    sm_rendezvous *rv; /* the members on this worker, and the abort state */
    sm_job_id job;
    sm_mesh mesh;
    int nworkers, self;
    char (*addr)[SM_ADDR_MAX];
    int *pos_worker;
    int *pos_local; /* index of every mesh position among its worker's positions */
    uint32_t *domain;
    struct timespec deadline;
    int probe_ms;
    sm_mailbox *box;
    const sm_comm_grpc_transport *tr;
    void *tr_user;
    sm_cg_shm *shm; /* NULL: no worker of the job shares memory with this one */
    sm_shm_pool *shm_pool;
    sm_shm_views *shm_views;
    sm_array_pool *pool; /* borrowed: scratch and shared-memory pages count against it */
};

/* A group seen from this worker. */
typedef struct {
    int nlocal, li;              /* local members, the caller's local index */
    int nw;                      /* workers of the group */
    int shm;                     /* every worker of the group shares memory with this one */
    int lidx[SM_MAX_DEVICES];    /* rank -> local index, or -1 */
    int gidx[SM_MAX_DEVICES];    /* rank -> index among its worker's members of the group */
    int worker[SM_MAX_DEVICES];  /* rank -> worker */
    int order[SM_MAX_DEVICES];   /* workers by lowest member rank */
    int first[SM_MAX_DEVICES];   /* that lowest rank */
    int32_t dev[SM_MAX_DEVICES]; /* rank -> device id */
    /* The reduction's units (sm_comm_tree_units): the largest nodes of the
     * tree of sm_comm.h whose members live on one worker, in rank order. */
    int nu;
    sm_comm_span unit[SM_MAX_DEVICES];
    int uorder[SM_MAX_DEVICES]; /* unit -> worker order of its worker */
    int uidx[SM_MAX_DEVICES];   /* unit -> index among its worker's units */
    int nuw[SM_MAX_DEVICES];    /* worker order -> its units */
} sm_cg_layout;

sm_err sm_cg_failf(sm_comm_grpc *c, sm_err code, char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
int sm_cg_ms_left(const sm_comm_grpc *c);
sm_err sm_cg_join(sm_comm_grpc *c, const sm_comm_group *g, const sm_cg_layout *L, uint64_t seq,
                  sm_cg_kind kind, int64_t arg, const void *in, void *out,
                  const sm_comm_arrays *arr, sm_rendezvous_slot **slot, char *err, size_t errlen);
int sm_cg_self_order(const sm_comm_grpc *c, const sm_cg_layout *L);
/* dst (element lo at its start) = elements [lo, hi) of the partial of
 * unit u (all its members on this worker: the tree of sm_comm.h over their
 * inputs, in[] indexed by local index). */
sm_err sm_cg_unit_reduce(const sm_cg_layout *L, const void *const *in, int u, sm_dtype t,
                         sm_kern_reduce_op op, int64_t lo, int64_t hi, char *dst, char *err,
                         size_t errlen);
/* The leaves of the whole group's tree (sm_comm_tree_reduce) into leaves
 * (room for the group's size), in rank order: each unit of another worker
 * from remote[u], or, where direct (per rank; NULL: none) has its first
 * member, each of its members from direct[q] at byte off (its input where
 * it lies: the same tree, the same bits); each member of this worker from
 * its input in[l] at byte off. Returns their count. */
int sm_cg_leaves(const sm_cg_layout *L, const void *const *in, int64_t off,
                 const char *const *remote, const char *const *direct, sm_comm_leaf *leaves);

/* ---- comm_grpc_shm.c ---- */

/* Prepares the job's shared memory when another worker of the job shares
 * this worker's domain (c->shm stays NULL otherwise); this worker's
 * segment is made by the first collective that needs it. */
sm_err sm_cg_shm_create(sm_comm_grpc *c, uint64_t key, char *err, size_t errlen);
/* Unmaps and unlinks every segment of the job's domain; frees c->shm. */
void sm_cg_shm_free(sm_comm_grpc *c);
/* Tells the peers mapped to this worker's segment that the job aborted. */
void sm_cg_shm_abort(sm_comm_grpc *c, const char *why);
/* 1 if a collective of kind over L with nbytes per member (the larger of
 * its input and output) runs through shared memory: decided from values
 * every worker of the group shares, so they all decide alike. */
int sm_cg_shm_use(const sm_comm_grpc *c, const sm_comm_group *g, const sm_cg_layout *L,
                  sm_cg_kind kind, int64_t nbytes);
/* all_reduce (kind SM_CG_AR: n elements in, n out) or reduce_scatter
 * (SM_CG_RS: size * n in, n out) of t with op. */
sm_err sm_cg_shm_reduce(sm_comm_grpc *c, const sm_comm_group *g, const sm_cg_layout *L,
                        uint64_t seq, sm_cg_kind kind, sm_dtype t, sm_kern_reduce_op op,
                        const void *in, void *out, int64_t n, const sm_comm_arrays *arr,
                        sm_rendezvous_slot **fell, char *err, size_t errlen);
/* all_gather, all_to_all and permute (from: the caller's source rank or
 * -1; perm: the npairs (source, destination) pairs, checked in range;
 * arr: the arrays of in and out, or NULL, as sm_comm.h has them). It
 * and sm_cg_shm_reduce return
 * SM_ERESOURCE with *fell set to the members' joined slot when the
 * collective falls back to gRPC (a worker of the group lacks room in
 * shared memory, or under its memory limit): every member of every worker
 * of the group then goes on over gRPC with that slot. */
sm_err sm_cg_shm_move(sm_comm_grpc *c, const sm_comm_group *g, const sm_cg_layout *L, uint64_t seq,
                      sm_cg_kind kind, int from, const int64_t (*perm)[2], int npairs,
                      const void *in, void *out, int64_t cb, const sm_comm_arrays *arr,
                      sm_rendezvous_slot **fell, char *err, size_t errlen);

#endif
