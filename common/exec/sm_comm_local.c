/* sm_comm_local: in-process collectives over shared memory (see header). */
#include "sm_comm_local.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef enum {
    SM_CL_ALL_REDUCE,
    SM_CL_ALL_GATHER,
    SM_CL_REDUCE_SCATTER,
    SM_CL_ALL_TO_ALL,
    SM_CL_PERMUTE
} sm_cl_kind;

static const char *const sm_cl_names[] = {"all-reduce", "all-gather", "reduce-scatter",
                                          "all-to-all", "permute"};

/* One rendezvous: a group at one sequence number. */
typedef struct sm_cl_slot {
    struct sm_cl_slot *next;
    uint64_t seq;
    int leader; /* members[0] */
    int size;
    sm_cl_kind kind;
    int64_t arg;     /* size argument every member must agree on */
    int arrived;     /* members that published their input */
    int finished;    /* members done reading their peers' inputs */
    int left;        /* members gone after the second barrier */
    int broken;      /* a member left the first barrier early: never completes */
    int reduced;     /* all-reduce: members done with their own chunk */
    int failed;      /* all-reduce: a member's reduction failed */
    const void **in; /* per rank */
    void **out;      /* per rank (all-reduce: peers copy reduced chunks) */
} sm_cl_slot;

struct sm_comm_local {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    double timeout_s;
    sm_cl_slot *slots;
    int aborted;
    sm_err abort_code;
    char abort_why[512];
};

sm_err sm_comm_local_create(double timeout_s, sm_comm_local **out, char *err, size_t errlen)
{
    *out = NULL;
    sm_comm_local *c = calloc(1, sizeof *c);
    if (!c)
        return sm_fail(err, errlen, SM_ENOMEM, "out of memory for an in-process comm context");
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, &ca);
    pthread_condattr_destroy(&ca);
    c->timeout_s = timeout_s > 0 ? timeout_s : SM_COMM_LOCAL_TIMEOUT_S;
    *out = c;
    return SM_OK;
}

static void sm_cl_slot_free(sm_cl_slot *s)
{
    if (s) {
        free(s->in);
        free(s->out);
        free(s);
    }
}

void sm_comm_local_free(sm_comm_local *c)
{
    if (!c)
        return;
    for (sm_cl_slot *s = c->slots, *n; s; s = n) {
        n = s->next;
        sm_cl_slot_free(s);
    }
    pthread_cond_destroy(&c->cv);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

/* Sets the abort state; the caller holds mu. */
static void sm_cl_abort_locked(sm_comm_local *c, sm_err code, const char *why)
{
    if (c->aborted)
        return;
    c->aborted = 1;
    c->abort_code = code;
    snprintf(c->abort_why, sizeof c->abort_why, "%s", why);
    pthread_cond_broadcast(&c->cv);
}

static void sm_cl_abort(void *ctx, const char *why)
{
    sm_comm_local *c = ctx;
    pthread_mutex_lock(&c->mu);
    sm_cl_abort_locked(c, SM_ECANCELLED, why);
    pthread_mutex_unlock(&c->mu);
}

static sm_err sm_cl_aborted_fail(sm_comm_local *c, char *err, size_t errlen)
{
    if (c->abort_code == SM_ETIMEOUT)
        return sm_fail(err, errlen, SM_ETIMEOUT, "%s", c->abort_why);
    return sm_fail(err, errlen, SM_ECANCELLED, "collective cancelled: %s", c->abort_why);
}

static void sm_cl_unlink(sm_comm_local *c, sm_cl_slot *s)
{
    for (sm_cl_slot **pp = &c->slots; *pp; pp = &(*pp)->next) {
        if (*pp == s) {
            *pp = s->next;
            break;
        }
    }
    sm_cl_slot_free(s);
}

/* First barrier: publishes in and waits for every member. On success *out
 * is the slot, whose inputs stay valid until sm_cl_leave. */
static sm_err sm_cl_join(sm_comm_local *c, const sm_comm_group *g, uint64_t seq, sm_cl_kind kind,
                         int64_t arg, const void *in, void *dst, sm_cl_slot **out, char *err,
                         size_t errlen)
{
    sm_err e = SM_OK;
    struct timespec dl;
    clock_gettime(CLOCK_MONOTONIC, &dl);
    double whole = (double)(int64_t)c->timeout_s;
    dl.tv_sec += (time_t)whole;
    dl.tv_nsec += (long)((c->timeout_s - whole) * 1e9);
    if (dl.tv_nsec >= 1000000000L) {
        dl.tv_sec++;
        dl.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&c->mu);
    if (c->aborted) {
        e = sm_cl_aborted_fail(c, err, errlen);
        goto done;
    }
    sm_cl_slot *s = c->slots;
    while (s && !(s->seq == seq && s->leader == g->members[0]))
        s = s->next;
    if (!s) {
        s = calloc(1, sizeof *s);
        if (s)
            s->in = calloc((size_t)g->size, sizeof *s->in);
        if (s && s->in)
            s->out = calloc((size_t)g->size, sizeof *s->out);
        if (!s || !s->in || !s->out) {
            sm_cl_slot_free(s);
            e = sm_fail(err, errlen, SM_ENOMEM, "out of memory for a collective rendezvous");
            sm_cl_abort_locked(c, SM_ECANCELLED, err);
            goto done;
        }
        s->seq = seq;
        s->leader = g->members[0];
        s->size = g->size;
        s->kind = kind;
        s->arg = arg;
        s->next = c->slots;
        c->slots = s;
    }
    if (s->size != g->size || s->kind != kind || s->arg != arg || s->in[g->rank]) {
        e = sm_fail(err, errlen, SM_EINVAL,
                    "collective #%llu: members disagree (%s of %d members, size %lld, vs %s of "
                    "%d members, size %lld, rank %d)",
                    (unsigned long long)seq, sm_cl_names[s->kind], s->size, (long long)s->arg,
                    sm_cl_names[kind], g->size, (long long)arg, g->rank);
        sm_cl_abort_locked(c, SM_ECANCELLED, err);
        goto done;
    }
    s->in[g->rank] = in ? in : (const void *)s; /* a zero-size input may be NULL */
    s->out[g->rank] = dst;
    s->arrived++;
    if (s->arrived == s->size)
        pthread_cond_broadcast(&c->cv);
    while (s->arrived < s->size && !c->aborted) {
        int rc = pthread_cond_timedwait(&c->cv, &c->mu, &dl);
        if (rc == ETIMEDOUT && s->arrived < s->size && !c->aborted) {
            int missing = -1;
            for (int r = 0; r < s->size && missing < 0; r++)
                if (!s->in[r])
                    missing = r;
            char why[400];
            snprintf(why, sizeof why,
                     "collective #%llu (%s over %d devices) timed out after %g s waiting for "
                     "rank %d (mesh position %d)",
                     (unsigned long long)seq, sm_cl_names[kind], s->size, c->timeout_s, missing,
                     missing >= 0 ? g->members[missing] : -1);
            sm_cl_abort_locked(c, SM_ETIMEOUT, why);
        }
    }
    if (s->arrived < s->size) { /* aborted before everyone arrived */
        s->broken = 1;
        s->in[g->rank] = NULL;
        e = sm_cl_aborted_fail(c, err, errlen);
        goto done;
    }
    *out = s;
done:
    pthread_mutex_unlock(&c->mu);
    return e;
}

/* Second barrier: waits until every member has read its peers' inputs (no
 * member can block while reading, so this never hangs), then the last one
 * out frees the slot. */
static void sm_cl_leave(sm_comm_local *c, sm_cl_slot *s)
{
    pthread_mutex_lock(&c->mu);
    s->finished++;
    if (s->finished == s->size)
        pthread_cond_broadcast(&c->cv);
    while (s->finished < s->size)
        pthread_cond_wait(&c->cv, &c->mu);
    if (++s->left == s->size)
        sm_cl_unlink(c, s);
    pthread_mutex_unlock(&c->mu);
}

/* Middle barrier of the all-reduce: every member has reduced its own chunk
 * into its own output (members past the first barrier never block, so this
 * never hangs). */
static int sm_cl_mid(sm_comm_local *c, sm_cl_slot *s, int failed)
{
    pthread_mutex_lock(&c->mu);
    s->failed |= failed;
    if (++s->reduced == s->size)
        pthread_cond_broadcast(&c->cv);
    while (s->reduced < s->size)
        pthread_cond_wait(&c->cv, &c->mu);
    failed = s->failed;
    pthread_mutex_unlock(&c->mu);
    return failed;
}

/* out[0..n) = reduction in rank order of in[r] + off elements. */
static sm_err sm_cl_reduce(const sm_cl_slot *s, sm_dtype t, sm_kern_reduce_op op, int64_t off,
                           void *out, int64_t n, char *err, size_t errlen)
{
    size_t el = sm_dtype_size(t);
    if (n == 0)
        return SM_OK;
    memcpy(out, (const char *)s->in[0] + (size_t)off * el, (size_t)n * el);
    for (int r = 1; r < s->size; r++) {
        sm_err e = sm_kern_accumulate(t, out, (const char *)s->in[r] + (size_t)off * el, n, op, err,
                                      errlen);
        if (e)
            return e;
    }
    return SM_OK;
}

/* Chunk r of n elements split over size members: [*lo, *hi). */
static void sm_cl_chunk(int64_t n, int size, int r, int64_t *lo, int64_t *hi)
{
    *lo = n * r / size;
    *hi = n * (r + 1) / size;
}

/* Each member reduces its own chunk (in rank order, so the result is the
 * same as reducing everything in rank order) into its own output, then
 * copies the other chunks from its peers' outputs. A failed reduction
 * fails every member. */
static sm_err sm_cl_all_reduce(void *ctx, const sm_comm_group *g, uint64_t seq, sm_dtype t,
                               sm_kern_reduce_op op, const void *in, void *out, int64_t n,
                               char *err, size_t errlen)
{
    sm_comm_local *c = ctx;
    sm_cl_slot *s;
    sm_err e = sm_cl_join(c, g, seq, SM_CL_ALL_REDUCE, n, in, out, &s, err, errlen);
    if (e)
        return e;
    size_t el = sm_dtype_size(t);
    int64_t lo, hi;
    sm_cl_chunk(n, s->size, g->rank, &lo, &hi);
    e = sm_cl_reduce(s, t, op, lo, (char *)out + (size_t)lo * el, hi - lo, err, errlen);
    if (sm_cl_mid(c, s, e != SM_OK) && !e) /* every member fails alike */
        e = sm_fail(err, errlen, SM_EUNSUPPORTED, "all-reduce of %s failed on a peer",
                    sm_dtype_name(t));
    for (int r = 0; r < s->size && !e; r++) {
        sm_cl_chunk(n, s->size, r, &lo, &hi);
        if (r != g->rank && hi > lo)
            memcpy((char *)out + (size_t)lo * el, (const char *)s->out[r] + (size_t)lo * el,
                   (size_t)(hi - lo) * el);
    }
    sm_cl_leave(c, s);
    return e;
}

static sm_err sm_cl_reduce_scatter(void *ctx, const sm_comm_group *g, uint64_t seq, sm_dtype t,
                                   sm_kern_reduce_op op, const void *in, void *out, int64_t n,
                                   char *err, size_t errlen)
{
    sm_comm_local *c = ctx;
    sm_cl_slot *s;
    sm_err e = sm_cl_join(c, g, seq, SM_CL_REDUCE_SCATTER, n, in, out, &s, err, errlen);
    if (e)
        return e;
    e = sm_cl_reduce(s, t, op, (int64_t)g->rank * n, out, n, err, errlen);
    sm_cl_leave(c, s);
    return e;
}

static sm_err sm_cl_all_gather(void *ctx, const sm_comm_group *g, uint64_t seq, const void *in,
                               void *out, int64_t nbytes, char *err, size_t errlen)
{
    sm_comm_local *c = ctx;
    sm_cl_slot *s;
    sm_err e = sm_cl_join(c, g, seq, SM_CL_ALL_GATHER, nbytes, in, out, &s, err, errlen);
    if (e)
        return e;
    for (int r = 0; r < s->size && nbytes > 0; r++)
        memcpy((char *)out + (size_t)r * (size_t)nbytes, s->in[r], (size_t)nbytes);
    sm_cl_leave(c, s);
    return SM_OK;
}

static sm_err sm_cl_all_to_all(void *ctx, const sm_comm_group *g, uint64_t seq, const void *in,
                               void *out, int64_t chunk, char *err, size_t errlen)
{
    sm_comm_local *c = ctx;
    sm_cl_slot *s;
    sm_err e = sm_cl_join(c, g, seq, SM_CL_ALL_TO_ALL, chunk, in, out, &s, err, errlen);
    if (e)
        return e;
    for (int r = 0; r < s->size && chunk > 0; r++)
        memcpy((char *)out + (size_t)r * (size_t)chunk,
               (const char *)s->in[r] + (size_t)g->rank * (size_t)chunk, (size_t)chunk);
    sm_cl_leave(c, s);
    return SM_OK;
}

static sm_err sm_cl_permute(void *ctx, const sm_comm_group *g, uint64_t seq,
                            const int64_t (*perm)[2], int npairs, const void *in, void *out,
                            int64_t nbytes, char *err, size_t errlen)
{
    sm_comm_local *c = ctx;
    sm_cl_slot *s;
    int src = -1;
    for (int k = 0; k < npairs; k++) {
        if (perm[k][0] < 0 || perm[k][0] >= g->size || perm[k][1] < 0 || perm[k][1] >= g->size)
            return sm_fail(err, errlen, SM_EINVAL,
                           "permute pair (%lld, %lld) is out of range for a group of %d",
                           (long long)perm[k][0], (long long)perm[k][1], g->size);
        if (perm[k][1] == g->rank)
            src = (int)perm[k][0];
    }
    sm_err e = sm_cl_join(c, g, seq, SM_CL_PERMUTE, nbytes, in, out, &s, err, errlen);
    if (e)
        return e;
    if (nbytes > 0) {
        if (src >= 0)
            memcpy(out, s->in[src], (size_t)nbytes);
        else
            memset(out, 0, (size_t)nbytes);
    }
    sm_cl_leave(c, s);
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
};
