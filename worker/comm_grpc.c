/* comm_grpc: collectives of one job across workers (see header). */
#include "comm_grpc.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sm_checksum.h"
#include "sm_rendezvous.h"

#define SM_CG_PROBE_MS 1000

typedef enum { SM_CG_AR, SM_CG_AG, SM_CG_RS, SM_CG_A2A, SM_CG_PERM } sm_cg_kind;

static const char *const sm_cg_names[] = {"all-reduce", "all-gather", "reduce-scatter",
                                          "all-to-all", "permute"};

struct sm_comm_grpc {
    sm_rendezvous *rv; /* the members on this worker, and the abort state */
    sm_job_id job;
    sm_mesh mesh;
    int nworkers, self;
    char (*addr)[SM_ADDR_MAX];
    int *pos_worker;
    struct timespec deadline;
    int probe_ms;
    sm_mailbox *box;
    const sm_comm_grpc_transport *tr;
    void *tr_user;
};

/* A group seen from this worker. */
typedef struct {
    int nlocal, li;              /* local members, the caller's local index */
    int nw;                      /* workers of the group */
    int lidx[SM_MAX_DEVICES];    /* rank -> local index, or -1 */
    int worker[SM_MAX_DEVICES];  /* rank -> worker */
    int order[SM_MAX_DEVICES];   /* workers by lowest member rank */
    int first[SM_MAX_DEVICES];   /* that lowest rank */
    int32_t dev[SM_MAX_DEVICES]; /* rank -> device id */
} sm_cg_layout;

static void sm_cg_layout_make(const sm_comm_grpc *c, const sm_comm_group *g, sm_cg_layout *L)
{
    L->nlocal = L->nw = 0;
    L->li = -1;
    for (int q = 0; q < g->size; q++) {
        int w = c->pos_worker[g->members[q]];
        L->worker[q] = w;
        L->dev[q] = c->mesh.devices[g->members[q]];
        L->lidx[q] = w == c->self ? L->nlocal++ : -1;
        int k = 0;
        while (k < L->nw && L->order[k] != w)
            k++;
        if (k == L->nw) {
            L->order[L->nw] = w;
            L->first[L->nw++] = q;
        }
    }
    L->li = L->lidx[g->rank];
}

/* ---- lifecycle and abort ---------------------------------------------------- */

static void sm_cg_timeout_why(void *user, const sm_rendezvous_key *k, int missing, char *why,
                              size_t len)
{
    const sm_comm_grpc *c = user;
    (void)missing;
    snprintf(why, len,
             "collective #%llu (%s) of job %llu timed out waiting for the other devices of this "
             "worker",
             (unsigned long long)k->seq, sm_cg_names[k->kind], (unsigned long long)c->job.v);
}

static void sm_cg_on_abort(void *user, sm_err code, const char *why)
{
    const sm_comm_grpc *c = user;
    sm_mailbox_abort(c->box, code, why);
}

sm_err sm_comm_grpc_create(const sm_comm_grpc_config *cfg, sm_comm_grpc **out, char *err,
                           size_t errlen)
{
    *out = NULL;
    sm_comm_grpc *c = calloc(1, sizeof *c);
    if (!c)
        return sm_fail(err, errlen, SM_ENOMEM, "out of memory for a job's comm");
    c->addr = calloc((size_t)cfg->nworkers, sizeof *c->addr);
    c->pos_worker = calloc((size_t)cfg->mesh->ndevices, sizeof *c->pos_worker);
    const sm_rendezvous_config rc = {.names = sm_cg_names,
                                     .timeout_why = sm_cg_timeout_why,
                                     .on_abort = sm_cg_on_abort,
                                     .user = c};
    if (!c->addr || !c->pos_worker || sm_rendezvous_create(&rc, &c->rv, err, errlen)) {
        free(c->addr);
        free(c->pos_worker);
        free(c);
        return sm_fail(err, errlen, SM_ENOMEM, "out of memory for a job's comm");
    }
    c->job = cfg->job;
    c->mesh = *cfg->mesh;
    c->nworkers = cfg->nworkers;
    c->self = cfg->self;
    for (int w = 0; w < cfg->nworkers; w++)
        snprintf(c->addr[w], SM_ADDR_MAX, "%s", cfg->workers[w].address);
    memcpy(c->pos_worker, cfg->pos_worker, (size_t)cfg->mesh->ndevices * sizeof *c->pos_worker);
    c->deadline = cfg->deadline;
    c->probe_ms = cfg->probe_ms > 0 ? cfg->probe_ms : SM_CG_PROBE_MS;
    c->box = cfg->box;
    c->tr = cfg->tr;
    c->tr_user = cfg->tr_user;
    *out = c;
    return SM_OK;
}

void sm_comm_grpc_free(sm_comm_grpc *c)
{
    if (!c)
        return;
    sm_rendezvous_free(c->rv);
    free(c->addr);
    free(c->pos_worker);
    free(c);
}

void sm_comm_grpc_fail(sm_comm_grpc *c, sm_err code, const char *why)
{
    sm_rendezvous_abort(c->rv, code, why);
}

sm_err sm_comm_grpc_status(sm_comm_grpc *c, char *why, size_t len)
{
    return sm_rendezvous_status(c->rv, why, len);
}

static void sm_cg_abort(void *ctx, const char *why)
{
    char msg[600];
    snprintf(msg, sizeof msg, "collective cancelled: %s", why);
    sm_comm_grpc_fail(ctx, SM_ECANCELLED, msg);
}

/* Aborts with a sentence built here and returns it as the error. */
static sm_err sm_cg_failf(sm_comm_grpc *c, sm_err code, char *err, size_t errlen, const char *fmt,
                          ...) __attribute__((format(printf, 5, 6)));
static sm_err sm_cg_failf(sm_comm_grpc *c, sm_err code, char *err, size_t errlen, const char *fmt,
                          ...)
{
    char why[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    sm_comm_grpc_fail(c, code, why);
    return sm_rendezvous_check(c->rv, err, errlen); /* the first abort's, if another won */
}

static int sm_cg_ms_left(const sm_comm_grpc *c)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    int64_t ms = (int64_t)(c->deadline.tv_sec - now.tv_sec) * 1000 +
                 (c->deadline.tv_nsec - now.tv_nsec) / 1000000;
    return ms < 1 ? 0 : ms > 0x7fffffff ? 0x7fffffff : (int)ms;
}

/* ---- local rendezvous ------------------------------------------------------- */

/* Joins the local members of g (sm_rendezvous_join) until the job's
 * deadline; members that disagree or run out of memory abort the job. */
static sm_err sm_cg_join(sm_comm_grpc *c, const sm_comm_group *g, const sm_cg_layout *L,
                         uint64_t seq, sm_cg_kind kind, int64_t arg, const void *in,
                         sm_rendezvous_slot **out, char *err, size_t errlen)
{
    const sm_rendezvous_key k = {
        .g = g, .seq = seq, .size = L->nlocal, .index = L->li, .kind = (int)kind, .arg = arg};
    sm_err e = sm_rendezvous_join(c->rv, &k, in, NULL, &c->deadline, out, err, errlen);
    if (e) /* a no-op once aborted: then this returns the abort's error */
        e = sm_cg_failf(c, SM_EINVAL, err, errlen, "%s", err);
    return e;
}

/* ---- moving blobs ------------------------------------------------------------ */

sm_err sm_comm_grpc_send_blob(const sm_comm_grpc_transport *tr, void *tr_user, const char *address,
                              int timeout_ms, const sm_svc_coll_msg *hdr,
                              const sm_comm_grpc_seg *segs, int nseg, char *err, size_t errlen)
{
    int64_t total = 0;
    for (int k = 0; k < nseg; k++)
        total += segs[k].len;
    sm_checksum *sum = sm_checksum_create();
    if (!sum)
        return sm_fail(err, errlen, SM_ENOMEM, "out of memory for a checksum");
    void *st = NULL;
    sm_err e = tr->open(tr_user, address, timeout_ms, &st, err, errlen);
    if (e)
        goto done;
    sm_svc_coll_msg m = *hdr;
    m.total_bytes = total;
    m.offset = 0;
    int k = 0;
    int64_t at = 0; /* within segs[k] */
    do {
        while (k < nseg && at == segs[k].len) {
            k++;
            at = 0;
        }
        int64_t n = k < nseg ? segs[k].len - at : 0;
        if (n > SM_SVC_CHUNK)
            n = SM_SVC_CHUNK;
        m.data = k < nseg ? (const char *)segs[k].data + at : NULL;
        m.len = (size_t)n;
        if (n)
            sm_checksum_update(sum, m.data, (size_t)n);
        at += n;
        m.last = m.offset + n == total;
        m.checksum = m.last ? sm_checksum_digest(sum) : 0;
        if ((e = tr->send(st, &m, err, errlen))) {
            tr->abort(st);
            goto done;
        }
        m.offset += n;
    } while (!m.last);
    e = tr->finish(st, err, errlen);
done:
    sm_checksum_free(sum);
    return e;
}

/* Pushes one blob to worker w; a failure aborts the job naming w. */
static sm_err sm_cg_push(sm_comm_grpc *c, int w, uint64_t seq, int32_t src, int32_t dst,
                         const sm_comm_grpc_seg *segs, int nseg, char *err, size_t errlen)
{
    char msg[400];
    sm_err e = sm_rendezvous_check(c->rv, err, errlen);
    if (e)
        return e;
    int ms = sm_cg_ms_left(c);
    if (ms == 0)
        return sm_cg_failf(c, SM_ETIMEOUT, err, errlen,
                           "job %llu reached its deadline before collective #%llu could send "
                           "to worker %s",
                           (unsigned long long)c->job.v, (unsigned long long)seq, c->addr[w]);
    sm_svc_coll_msg hdr = {
        .job_id = c->job, .seq = (uint32_t)seq, .src_device = src, .dst_device = dst};
    e = sm_comm_grpc_send_blob(c->tr, c->tr_user, c->addr[w], ms, &hdr, segs, nseg, msg,
                               sizeof msg);
    if (!e)
        return SM_OK;
    return sm_cg_failf(c, SM_EUNAVAILABLE, err, errlen,
                       "worker %s is unavailable: collective #%llu of job %llu could not send to "
                       "it: %s",
                       c->addr[w], (unsigned long long)seq, (unsigned long long)c->job.v, msg);
}

/* Waits for the blob of device src from worker w, probing w while waiting;
 * checks its length. */
static sm_err sm_cg_take(sm_comm_grpc *c, uint64_t seq, int32_t src, int w, int readers,
                         int64_t expect, sm_mailbox_blob **out, char *err, size_t errlen)
{
    char msg[400];
    for (;;) {
        struct timespec slice;
        clock_gettime(CLOCK_MONOTONIC, &slice);
        slice.tv_sec += c->probe_ms / 1000;
        slice.tv_nsec += (long)(c->probe_ms % 1000) * 1000000L;
        if (slice.tv_nsec >= 1000000000L) {
            slice.tv_sec++;
            slice.tv_nsec -= 1000000000L;
        }
        if (slice.tv_sec > c->deadline.tv_sec ||
            (slice.tv_sec == c->deadline.tv_sec && slice.tv_nsec > c->deadline.tv_nsec))
            slice = c->deadline;
        sm_err e = sm_mailbox_take(c->box, (uint32_t)seq, src, readers, &slice, out, err, errlen);
        if (e && e != SM_ETIMEOUT)
            return e;
        if (!e)
            break;
        if (sm_cg_ms_left(c) == 0)
            return sm_cg_failf(c, SM_ETIMEOUT, err, errlen,
                               "collective #%llu of job %llu timed out waiting for the block of "
                               "device %d from worker %s",
                               (unsigned long long)seq, (unsigned long long)c->job.v, src,
                               c->addr[w]);
        if (c->tr->probe(c->tr_user, c->addr[w], c->probe_ms, msg, sizeof msg) != SM_OK)
            return sm_cg_failf(c, SM_EUNAVAILABLE, err, errlen,
                               "worker %s is unavailable: it stopped answering while collective "
                               "#%llu of job %llu waited for device %d: %s",
                               c->addr[w], (unsigned long long)seq, (unsigned long long)c->job.v,
                               src, msg);
    }
    if ((*out)->len != expect) {
        int64_t got = (*out)->len;
        sm_mailbox_release(c->box, *out);
        *out = NULL;
        return sm_cg_failf(c, SM_EINVAL, err, errlen,
                           "collective #%llu of job %llu: device %d on worker %s sent %lld bytes, "
                           "expected %lld",
                           (unsigned long long)seq, (unsigned long long)c->job.v, src, c->addr[w],
                           (long long)got, (long long)expect);
    }
    return SM_OK;
}

/* ---- reductions ------------------------------------------------------------- */

/* A reduction whose members all live on this worker: they reduce among
 * themselves in shared memory (sm_rendezvous_reduce), every member doing
 * its share, with no scratch copy. */
static sm_err sm_cg_reduce_local(sm_comm_grpc *c, const sm_comm_group *g, uint64_t seq,
                                 sm_cg_kind kind, sm_dtype t, sm_kern_reduce_op op, const void *in,
                                 void *out, int64_t n, char *err, size_t errlen)
{
    const sm_rendezvous_key k = {
        .g = g, .seq = seq, .size = g->size, .index = g->rank, .kind = (int)kind, .arg = n};
    sm_rendezvous_slot *s;
    sm_err e = sm_rendezvous_join(c->rv, &k, in, out, &c->deadline, &s, err, errlen);
    if (e) /* as sm_cg_join */
        return sm_cg_failf(c, SM_EINVAL, err, errlen, "%s", err);
    e = sm_rendezvous_reduce(c->rv, s, g->rank, kind == SM_CG_RS, t, op, n, err, errlen);
    if (e)
        sm_cg_abort(c, err);
    sm_rendezvous_leave(c->rv, s);
    return e;
}

/* all_reduce (one chunk everyone needs) and reduce_scatter (size chunks,
 * rank r needs chunk r): partial per worker, combined in worker order. */
static sm_err sm_cg_reduce(sm_comm_grpc *c, const sm_comm_group *g, uint64_t seq, sm_cg_kind kind,
                           sm_dtype t, sm_kern_reduce_op op, const void *in, void *out, int64_t n,
                           char *err, size_t errlen)
{
    sm_cg_layout *L = malloc(sizeof *L);
    sm_comm_grpc_seg *segs = malloc((size_t)g->size * sizeof *segs);
    sm_rendezvous_slot *s = NULL;
    sm_err e;
    if (!L || !segs) {
        e = sm_cg_failf(c, SM_ENOMEM, err, errlen, "out of memory for collective #%llu",
                        (unsigned long long)seq);
        goto out;
    }
    sm_cg_layout_make(c, g, L);
    if (L->nw == 1) {
        e = sm_cg_reduce_local(c, g, seq, kind, t, op, in, out, n, err, errlen);
        goto out;
    }
    size_t el = sm_dtype_size(t);
    int64_t cb = n * (int64_t)el, nch = kind == SM_CG_RS ? g->size : 1;
    if ((e = sm_cg_join(c, g, L, seq, kind, n, in, &s, err, errlen)))
        goto out;
    if (L->li == 0) {
        const void *part = in;
        if (L->nlocal > 1) {
            if (!(s->scratch = malloc(nch * cb > 0 ? (size_t)(nch * cb) : 1))) {
                e = sm_cg_failf(c, SM_ENOMEM, err, errlen, "out of memory for collective #%llu",
                                (unsigned long long)seq);
            } else {
                memcpy(s->scratch, s->in[0], (size_t)(nch * cb));
                for (int l = 1; l < L->nlocal && !e; l++)
                    e = sm_kern_accumulate(t, s->scratch, s->in[l], nch * n, op, err, errlen);
                part = s->scratch;
            }
        }
        for (int k = 0; k < L->nw && !e; k++) {
            int w = L->order[k], nseg = 0;
            if (w == c->self)
                continue;
            if (kind == SM_CG_AR)
                segs[nseg++] = (sm_comm_grpc_seg){part, cb};
            else
                for (int q = 0; q < g->size; q++)
                    if (L->worker[q] == w)
                        segs[nseg++] = (sm_comm_grpc_seg){(const char *)part + q * cb, cb};
            e = sm_cg_push(c, w, seq, L->dev[g->rank], -1, segs, nseg, err, errlen);
        }
        if (e)
            sm_cg_abort(c, err);
        sm_rendezvous_publish(c->rv, s, part, !e);
    } else {
        e = sm_rendezvous_wait_shared(c->rv, s, err, errlen); /* the leader's sends are bounded */
    }
    int64_t chunk = kind == SM_CG_RS ? g->rank : 0;
    for (int k = 0; k < L->nw && !e; k++) {
        int w = L->order[k];
        const void *src;
        sm_mailbox_blob *b = NULL;
        if (w == c->self) {
            src = (const char *)s->shared + chunk * cb;
        } else {
            int64_t expect = kind == SM_CG_RS ? L->nlocal * cb : cb;
            if ((e = sm_cg_take(c, seq, L->dev[L->first[k]], w, L->nlocal, expect, &b, err,
                                errlen)))
                break;
            src = (const char *)b->data + (kind == SM_CG_RS ? L->li * cb : 0);
        }
        if (k == 0) {
            if (cb)
                memcpy(out, src, (size_t)cb);
        } else {
            e = sm_kern_accumulate(t, out, src, n, op, err, errlen);
        }
        if (b)
            sm_mailbox_release(c->box, b);
    }
    sm_rendezvous_leave(c->rv, s);
out:
    free(L);
    free(segs);
    return e;
}

static sm_err sm_cg_all_reduce(void *ctx, const sm_comm_group *g, uint64_t seq, sm_dtype t,
                               sm_kern_reduce_op op, const void *in, void *out, int64_t n,
                               char *err, size_t errlen)
{
    return sm_cg_reduce(ctx, g, seq, SM_CG_AR, t, op, in, out, n, err, errlen);
}

static sm_err sm_cg_reduce_scatter(void *ctx, const sm_comm_group *g, uint64_t seq, sm_dtype t,
                                   sm_kern_reduce_op op, const void *in, void *out, int64_t n,
                                   char *err, size_t errlen)
{
    return sm_cg_reduce(ctx, g, seq, SM_CG_RS, t, op, in, out, n, err, errlen);
}

/* ---- data movement --------------------------------------------------------- */

/* all_gather (chunk = nbytes, the whole input), all_to_all (chunk j of the
 * input goes to rank j) and permute (perm given) share one shape: push, join,
 * assemble from local inputs and received blobs, leave. */
static sm_err sm_cg_move(sm_comm_grpc *c, const sm_comm_group *g, uint64_t seq, sm_cg_kind kind,
                         const int64_t (*perm)[2], int npairs, const void *in, void *out,
                         int64_t cb, char *err, size_t errlen)
{
    sm_cg_layout *L = malloc(sizeof *L);
    sm_comm_grpc_seg *segs = malloc((size_t)g->size * sizeof *segs);
    sm_rendezvous_slot *s = NULL;
    sm_err e = SM_OK;
    int to = -1, from = -1; /* permute: the caller's destination and source ranks */
    if (!L || !segs) {
        e = sm_cg_failf(c, SM_ENOMEM, err, errlen, "out of memory for collective #%llu",
                        (unsigned long long)seq);
        goto out;
    }
    sm_cg_layout_make(c, g, L);
    int32_t me = L->dev[g->rank];
    if (kind == SM_CG_PERM) {
        for (int k = 0; k < npairs; k++) {
            if (perm[k][0] < 0 || perm[k][0] >= g->size || perm[k][1] < 0 ||
                perm[k][1] >= g->size) {
                e = sm_fail(err, errlen, SM_EINVAL,
                            "permute pair (%lld, %lld) is out of range for a group of %d",
                            (long long)perm[k][0], (long long)perm[k][1], g->size);
                goto out;
            }
            if (perm[k][0] == g->rank)
                to = (int)perm[k][1];
            if (perm[k][1] == g->rank)
                from = (int)perm[k][0];
        }
        if (to >= 0 && L->lidx[to] < 0) {
            segs[0] = (sm_comm_grpc_seg){in, cb};
            e = sm_cg_push(c, L->worker[to], seq, me, L->dev[to], segs, 1, err, errlen);
        }
    } else {
        for (int k = 0; k < L->nw && !e; k++) {
            int w = L->order[k], nseg = 0;
            if (w == c->self)
                continue;
            if (kind == SM_CG_AG)
                segs[nseg++] = (sm_comm_grpc_seg){in, cb};
            else
                for (int q = 0; q < g->size; q++)
                    if (L->worker[q] == w)
                        segs[nseg++] = (sm_comm_grpc_seg){(const char *)in + q * cb, cb};
            e = sm_cg_push(c, w, seq, me, -1, segs, nseg, err, errlen);
        }
    }
    if (e)
        goto out;
    if ((e = sm_cg_join(c, g, L, seq, kind, cb, in, &s, err, errlen)))
        goto out;
    for (int q = 0; q < g->size && !e; q++) {
        char *dst = (char *)out + (kind == SM_CG_PERM ? 0 : q * cb);
        if (kind == SM_CG_PERM && q != from)
            continue;
        if (L->lidx[q] >= 0) {
            const char *src = s->in[L->lidx[q]];
            if (kind == SM_CG_A2A)
                src += (int64_t)g->rank * cb;
            if (cb)
                memcpy(dst, src, (size_t)cb);
            continue;
        }
        sm_mailbox_blob *b;
        int readers = kind == SM_CG_PERM ? 1 : L->nlocal;
        int64_t expect = kind == SM_CG_A2A ? L->nlocal * cb : cb;
        if ((e = sm_cg_take(c, seq, L->dev[q], L->worker[q], readers, expect, &b, err, errlen)))
            break;
        if (cb)
            memcpy(dst, (const char *)b->data + (kind == SM_CG_A2A ? L->li * cb : 0), (size_t)cb);
        sm_mailbox_release(c->box, b);
    }
    if (!e && kind == SM_CG_PERM && from < 0 && cb)
        memset(out, 0, (size_t)cb);
    sm_rendezvous_leave(c->rv, s);
out:
    free(L);
    free(segs);
    return e;
}

static sm_err sm_cg_all_gather(void *ctx, const sm_comm_group *g, uint64_t seq, const void *in,
                               void *out, int64_t nbytes, char *err, size_t errlen)
{
    return sm_cg_move(ctx, g, seq, SM_CG_AG, NULL, 0, in, out, nbytes, err, errlen);
}

static sm_err sm_cg_all_to_all(void *ctx, const sm_comm_group *g, uint64_t seq, const void *in,
                               void *out, int64_t chunk, char *err, size_t errlen)
{
    return sm_cg_move(ctx, g, seq, SM_CG_A2A, NULL, 0, in, out, chunk, err, errlen);
}

static sm_err sm_cg_permute(void *ctx, const sm_comm_group *g, uint64_t seq,
                            const int64_t (*perm)[2], int npairs, const void *in, void *out,
                            int64_t nbytes, char *err, size_t errlen)
{
    return sm_cg_move(ctx, g, seq, SM_CG_PERM, perm, npairs, in, out, nbytes, err, errlen);
}

const sm_comm sm_comm_grpc_ops = {
    .name = "grpc",
    .all_reduce = sm_cg_all_reduce,
    .all_gather = sm_cg_all_gather,
    .reduce_scatter = sm_cg_reduce_scatter,
    .all_to_all = sm_cg_all_to_all,
    .permute = sm_cg_permute,
    .abort = sm_cg_abort,
};
