/* sm_comm_local: in-process collectives over shared memory (see header). */
#include "sm_comm_local.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sm_array_share.h"
#include "sm_copy.h"
#include "sm_rendezvous.h"
#include "sm_time.h"

struct sm_comm_local {
    sm_rendezvous *rv;
    double timeout_s;
};

static void sm_cl_timeout_why(void *user, const sm_rendezvous_key *k, int missing, char *why,
                              size_t len)
{
    const sm_comm_local *c = user;
    snprintf(why, len,
             "collective #%llu (%s over %d devices) timed out after %g s waiting for rank %d "
             "(mesh position %d)",
             (unsigned long long)k->seq, sm_comm_kind_names[k->kind], k->size, c->timeout_s,
             missing, missing >= 0 ? k->g->members[missing] : -1);
}

sm_err sm_comm_local_create(double timeout_s, sm_comm_local **out, char *err, size_t errlen)
{
    *out = NULL;
    sm_comm_local *c = calloc(1, sizeof *c);
    if (!c)
        return sm_fail(err, errlen, SM_ENOMEM, "out of memory for an in-process comm context");
    const sm_rendezvous_config rc = {
        .names = sm_comm_kind_names, .timeout_why = sm_cl_timeout_why, .user = c};
    sm_err e = sm_rendezvous_create(&rc, &c->rv, err, errlen);
    if (e) {
        free(c);
        return e;
    }
    c->timeout_s = timeout_s > 0 ? timeout_s : SM_COMM_LOCAL_TIMEOUT_S;
    *out = c;
    return SM_OK;
}

void sm_comm_local_free(sm_comm_local *c)
{
    if (!c)
        return;
    sm_rendezvous_free(c->rv);
    free(c);
}

static void sm_cl_abort(void *ctx, const char *why)
{
    sm_comm_local *c = ctx;
    char msg[600];
    snprintf(msg, sizeof msg, "collective cancelled: %s", why);
    sm_rendezvous_abort(c->rv, SM_ECANCELLED, msg);
}

static sm_err sm_cl_check(void *ctx, char *err, size_t errlen)
{
    return sm_rendezvous_check(((sm_comm_local *)ctx)->rv, err, errlen);
}

/* First barrier (sm_rendezvous_join) with this job's timeout; members that
 * disagree or run out of memory cancel the job. */
static sm_err sm_cl_join(sm_comm_local *c, const sm_comm_group *g, uint64_t seq, sm_comm_kind kind,
                         int64_t arg, const void *in, void *dst, const sm_comm_arrays *arr,
                         sm_rendezvous_slot **out, char *err, size_t errlen)
{
    struct timespec dl = sm_time_after_ms(CLOCK_MONOTONIC, (int64_t)(c->timeout_s * 1000.0));
    const sm_rendezvous_key k = {.g = g,
                                 .seq = seq,
                                 .size = g->size,
                                 .index = g->rank,
                                 .kind = (int)kind,
                                 .arg = arg,
                                 .arr = arr};
    sm_err e = sm_rendezvous_join(c->rv, &k, in, dst, &dl, out, err, errlen);
    if (e)
        sm_cl_abort(c, err); /* a no-op once aborted */
    return e;
}

/* Each member reduces its share of the elements (in the tree of
 * sm_comm.h, so the result is the same as reducing everything at once) and writes it to
 * every member's output (sm_rendezvous_reduce): an all_reduce, or with
 * scatter a reduce_scatter. A failed reduction fails every member. */
static sm_err sm_cl_reduce(sm_comm_local *c, const sm_comm_group *g, uint64_t seq, int scatter,
                           sm_dtype t, sm_kern_reduce_op op, const void *in, void *out, int64_t n,
                           const sm_comm_arrays *arr, char *err, size_t errlen)
{
    sm_rendezvous_slot *s;
    sm_err e = sm_cl_join(c, g, seq, scatter ? SM_COMM_REDUCE_SCATTER : SM_COMM_ALL_REDUCE, n, in,
                          out, arr, &s, err, errlen);
    if (e)
        return e;
    e = sm_rendezvous_reduce(c->rv, s, g->rank, scatter, t, op, n, err, errlen);
    sm_rendezvous_leave(c->rv, s);
    return e;
}

static sm_err sm_cl_all_reduce(void *ctx, const sm_comm_group *g, uint64_t seq, sm_dtype t,
                               sm_kern_reduce_op op, const void *in, void *out, int64_t n,
                               const sm_comm_arrays *arr, char *err, size_t errlen)
{
    return sm_cl_reduce(ctx, g, seq, 0, t, op, in, out, n, arr, err, errlen);
}

static sm_err sm_cl_reduce_scatter(void *ctx, const sm_comm_group *g, uint64_t seq, sm_dtype t,
                                   sm_kern_reduce_op op, const void *in, void *out, int64_t n,
                                   char *err, size_t errlen)
{
    return sm_cl_reduce(ctx, g, seq, 1, t, op, in, out, n, NULL, err, errlen);
}

/* all_gather (kind SM_COMM_ALL_GATHER: every member's input) or
 * all_to_all (SM_COMM_ALL_TO_ALL: chunk rank of every member's input):
 * chunk bytes from each member r into out at r * chunk. An all_gather
 * whose members all give their arrays writes one output, member 0's, each
 * member an equal share of its bytes, and the others share it
 * (sm_array_alias) once every share is written (sm_rendezvous_leave waits
 * for them). */
static sm_err sm_cl_collect(sm_comm_local *c, const sm_comm_group *g, uint64_t seq,
                            sm_comm_kind kind, const void *in, void *out, int64_t chunk,
                            const sm_comm_arrays *arr, char *err, size_t errlen)
{
    sm_rendezvous_slot *s;
    sm_err e = sm_cl_join(c, g, seq, kind, chunk, in, out, arr, &s, err, errlen);
    if (e)
        return e;
    size_t at = kind == SM_COMM_ALL_TO_ALL ? (size_t)g->rank * (size_t)chunk : 0;
    int one = kind == SM_COMM_ALL_GATHER && chunk > 0 && sm_comm_one_output(s->arr, s->size);
    size_t total = (size_t)s->size * (size_t)chunk;
    int stream = sm_copy_streams((one ? 1 : (size_t)g->size) * total);
    size_t lo = one ? total * (size_t)g->rank / (size_t)s->size : 0;
    size_t hi = one ? total * (size_t)(g->rank + 1) / (size_t)s->size : total;
    char *dst = one ? s->out[0] : out;
    for (int r = 0; r < s->size && chunk > 0; r++) {
        size_t a = (size_t)r * (size_t)chunk, b = a + (size_t)chunk;
        a = a > lo ? a : lo;
        b = b < hi ? b : hi;
        if (a < b)
            sm_copy_as(dst + a, (const char *)s->in[r] + at + (a - (size_t)r * (size_t)chunk),
                       b - a, stream);
    }
    if (one)
        sm_comm_share_output(s->arr, g->rank);
    sm_rendezvous_leave(c->rv, s);
    return SM_OK;
}

static sm_err sm_cl_all_gather(void *ctx, const sm_comm_group *g, uint64_t seq, const void *in,
                               void *out, int64_t nbytes, const sm_comm_arrays *arr, char *err,
                               size_t errlen)
{
    return sm_cl_collect(ctx, g, seq, SM_COMM_ALL_GATHER, in, out, nbytes, arr, err, errlen);
}

static sm_err sm_cl_all_to_all(void *ctx, const sm_comm_group *g, uint64_t seq, const void *in,
                               void *out, int64_t chunk, char *err, size_t errlen)
{
    return sm_cl_collect(ctx, g, seq, SM_COMM_ALL_TO_ALL, in, out, chunk, NULL, err, errlen);
}

static sm_err sm_cl_permute(void *ctx, const sm_comm_group *g, uint64_t seq,
                            const int64_t (*perm)[2], int npairs, const void *in, void *out,
                            int64_t nbytes, const sm_comm_arrays *arr, char *err, size_t errlen)
{
    sm_comm_local *c = ctx;
    sm_rendezvous_slot *s;
    int src = -1;
    for (int k = 0; k < npairs; k++) {
        if (perm[k][0] < 0 || perm[k][0] >= g->size || perm[k][1] < 0 || perm[k][1] >= g->size)
            return sm_fail(err, errlen, SM_EINVAL,
                           "permute pair (%lld, %lld) is out of range for a group of %d",
                           (long long)perm[k][0], (long long)perm[k][1], g->size);
        if (perm[k][1] == g->rank)
            src = (int)perm[k][0];
    }
    sm_err e = sm_cl_join(c, g, seq, SM_COMM_PERMUTE, nbytes, in, out, arr, &s, err, errlen);
    if (e)
        return e;
    if (nbytes > 0) {
        if (src >= 0 && arr && s->arr[src] && sm_array_alias(arr->out, s->arr[src]->in, 0))
            ; /* the source's bytes, shared */
        else if (src >= 0)
            sm_copy_as(out, s->in[src], (size_t)nbytes,
                       sm_copy_streams((size_t)g->size * (size_t)nbytes));
        else
            memset(out, 0, (size_t)nbytes);
    }
    sm_rendezvous_leave(c->rv, s);
    return SM_OK;
}

const sm_comm sm_comm_local_ops = {
    .name = "local",
    .all_reduce = sm_cl_all_reduce,
    .all_gather = sm_cl_all_gather,
    .reduce_scatter = sm_cl_reduce_scatter,
    .all_to_all = sm_cl_all_to_all,
    .permute = sm_cl_permute,
    .abort = sm_cl_abort,
    .check = sm_cl_check,
};
