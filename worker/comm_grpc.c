/* comm_grpc: collectives of one job across workers (see header). */
#include "comm_grpc_int.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sm_array.h"
#include "sm_array_share.h"
#include "sm_checksum.h"
#include "sm_hold.h"
#include "sm_log.h"
#include "sm_rendezvous.h"
#include "sm_time.h"
#include "traffic.h"

#define SM_CG_PROBE_MS 1000

static void sm_cg_layout_make(const sm_comm_grpc *c, const sm_comm_group *g, sm_cg_layout *L)
{
    int count[SM_MAX_DEVICES]; /* members so far, per worker order */
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
            count[k] = 0;
        }
        L->gidx[q] = count[k]++;
    }
    L->li = L->lidx[g->rank];
    L->nu = sm_comm_tree_units(0, g->size, L->worker, L->unit);
    for (int k = 0; k < L->nw; k++)
        L->nuw[k] = 0;
    for (int u = 0; u < L->nu; u++) {
        int k = 0;
        while (L->order[k] != L->worker[L->unit[u].lo])
            k++;
        L->uorder[u] = k;
        L->uidx[u] = L->nuw[k]++;
    }
    L->shm = c->shm && L->nw > 1;
    for (int k = 0; k < L->nw && L->shm; k++)
        L->shm = c->domain[L->order[k]] == c->domain[c->self];
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
             (unsigned long long)k->seq, sm_comm_kind_names[k->kind], (unsigned long long)c->job.v);
}

static void sm_cg_on_abort(void *user, sm_err code, const char *why)
{
    sm_comm_grpc *c = user;
    sm_mailbox_abort(c->box, code, why);
    sm_cg_shm_abort(c, why);
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
    c->pos_local = calloc((size_t)cfg->mesh->ndevices, sizeof *c->pos_local);
    c->domain = calloc((size_t)cfg->nworkers, sizeof *c->domain);
    const sm_rendezvous_config rc = {.names = sm_comm_kind_names,
                                     .timeout_why = sm_cg_timeout_why,
                                     .on_abort = sm_cg_on_abort,
                                     .user = c};
    if (!c->addr || !c->pos_worker || !c->pos_local || !c->domain ||
        sm_rendezvous_create(&rc, &c->rv, err, errlen)) {
        free(c->addr);
        free(c->pos_worker);
        free(c->pos_local);
        free(c->domain);
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
    c->shm_pool = cfg->shm_pool;
    c->shm_views = cfg->shm_views;
    c->pool = cfg->pool;
    int seen[SM_MAX_DEVICES] = {0};
    for (int pos = 0; pos < c->mesh.ndevices; pos++) {
        int w = c->pos_worker[pos];
        c->pos_local[pos] = w >= 0 && w < SM_MAX_DEVICES ? seen[w]++ : 0;
    }
    for (int w = 0; w < cfg->nworkers; w++)
        c->domain[w] = cfg->shm_domain ? cfg->shm_domain[w] : 0;
    sm_err e = sm_cg_shm_create(c, cfg->shm_key, err, errlen);
    if (e) { /* failing the job: a worker that went over gRPC alone would wait for its peers */
        sm_comm_grpc_free(c);
        return e;
    }
    *out = c;
    return SM_OK;
}

void sm_comm_grpc_free(sm_comm_grpc *c)
{
    if (!c)
        return;
    sm_cg_shm_free(c);
    sm_rendezvous_free(c->rv);
    free(c->addr);
    free(c->pos_worker);
    free(c->pos_local);
    free(c->domain);
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

static sm_err sm_cg_check(void *ctx, char *err, size_t errlen)
{
    return sm_rendezvous_check(((sm_comm_grpc *)ctx)->rv, err, errlen);
}

/* Aborts with a sentence built here and returns it as the error. */
sm_err sm_cg_failf(sm_comm_grpc *c, sm_err code, char *err, size_t errlen, const char *fmt, ...)
{
    char why[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    sm_comm_grpc_fail(c, code, why);
    return sm_rendezvous_check(c->rv, err, errlen); /* the first abort's, if another won */
}

int sm_cg_ms_left(const sm_comm_grpc *c)
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
sm_err sm_cg_join(sm_comm_grpc *c, const sm_comm_group *g, const sm_cg_layout *L, uint64_t seq,
                  sm_cg_kind kind, int64_t arg, const void *in, void *out,
                  const sm_comm_arrays *arr, sm_rendezvous_slot **slot, char *err, size_t errlen)
{
    const sm_rendezvous_key k = {.g = g,
                                 .seq = seq,
                                 .size = L->nlocal,
                                 .index = L->li,
                                 .kind = (int)kind,
                                 .arg = arg,
                                 .arr = arr};
    sm_err e = sm_rendezvous_join(c->rv, &k, in, out, &c->deadline, slot, err, errlen);
    if (e) /* a no-op once aborted: then this returns the abort's error */
        e = sm_cg_failf(c, SM_EINVAL, err, errlen, "%s", err);
    return e;
}

/* ---- moving blobs ------------------------------------------------------------ */

/* How long a send waits, once its stream has ended, for the transport to
 * let go of the chunks it sent without a copy. After an acknowledged blob
 * that takes milliseconds; only a connection whose peer stopped reading
 * keeps its unsent bytes referenced until it closes. */
#define SM_CG_HOLD_MS 5000

sm_err sm_comm_grpc_send_blob(const sm_comm_grpc_transport *tr, void *tr_user, const char *address,
                              int timeout_ms, const sm_svc_coll_msg *hdr,
                              const sm_comm_grpc_seg *segs, int nseg, char *err, size_t errlen)
{
    int64_t total = 0;
    for (int k = 0; k < nseg; k++)
        total += segs[k].len;
    sm_checksum *sum = sm_checksum_create();
    sm_hold *h = sum ? sm_hold_create() : NULL;
    if (!h) {
        sm_checksum_free(sum);
        return sm_fail(err, errlen, SM_ENOMEM, "out of memory for a checksum");
    }
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
        m.release = n ? sm_hold_release : NULL; /* sent without a copy */
        m.release_arg = h;
        if (n)
            sm_hold_take(h);
        if ((e = tr->send(st, &m, err, errlen))) {
            tr->abort(st);
            goto done;
        }
        sm_traffic_add(SM_TRAFFIC_COLL_OUT, n);
        m.offset += n;
    } while (!m.last);
    e = tr->finish(st, err, errlen);
done:
    sm_checksum_free(sum);
    int held = sm_hold_end(h, SM_CG_HOLD_MS);
    if (held)
        SM_WARN("a collective stream to %s ended while the network still referenced %d of its "
                "chunks (peer not reading)",
                address, held);
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

/* Waits for the blob of device src for dst (-1: any device of this worker)
 * from worker w, probing w while waiting; checks its length, and that no
 * element of align bytes straddles two of its pieces. */
static sm_err sm_cg_take(sm_comm_grpc *c, uint64_t seq, int32_t src, int32_t dst, int w,
                         int readers, int64_t expect, int64_t align, sm_mailbox_blob **out,
                         char *err, size_t errlen)
{
    char msg[400];
    for (;;) {
        struct timespec slice = sm_time_after_ms(CLOCK_MONOTONIC, c->probe_ms);
        if (slice.tv_sec > c->deadline.tv_sec ||
            (slice.tv_sec == c->deadline.tv_sec && slice.tv_nsec > c->deadline.tv_nsec))
            slice = c->deadline;
        sm_err e =
            sm_mailbox_take(c->box, (uint32_t)seq, src, dst, readers, &slice, out, err, errlen);
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
    if (align > 1 && !sm_mailbox_blob_aligned(*out, align)) {
        sm_mailbox_release(c->box, *out);
        *out = NULL;
        return sm_cg_failf(c, SM_EINVAL, err, errlen,
                           "collective #%llu of job %llu: device %d on worker %s sent chunks that "
                           "split its %lld-byte elements",
                           (unsigned long long)seq, (unsigned long long)c->job.v, src, c->addr[w],
                           (long long)align);
    }
    return SM_OK;
}

/* ---- reductions ------------------------------------------------------------- */

/* A reduction whose members all live on this worker: they reduce among
 * themselves in shared memory (sm_rendezvous_reduce), every member doing
 * its share, with no scratch copy. */
static sm_err sm_cg_reduce_local(sm_comm_grpc *c, const sm_comm_group *g, const sm_cg_layout *L,
                                 uint64_t seq, sm_cg_kind kind, sm_dtype t, sm_kern_reduce_op op,
                                 const void *in, void *out, int64_t n, const sm_comm_arrays *arr,
                                 char *err, size_t errlen)
{
    sm_rendezvous_slot *s;
    sm_err e = sm_cg_join(c, g, L, seq, kind, n, in, out, arr, &s, err, errlen);
    if (e)
        return e;
    e = sm_rendezvous_reduce(c->rv, s, g->rank, kind == SM_CG_RS, t, op, n, err, errlen);
    if (e)
        sm_cg_abort(c, err);
    sm_rendezvous_leave(c->rv, s);
    return e;
}

/* The failure of a collective that ran out of memory; it aborts the job. */
static sm_err sm_cg_oom(sm_comm_grpc *c, uint64_t seq, char *err, size_t errlen)
{
    return sm_cg_failf(c, SM_ENOMEM, err, errlen, "out of memory for collective #%llu",
                       (unsigned long long)seq);
}

/* The start all_reduce (kind SM_CG_AR) and reduce_scatter (SM_CG_RS)
 * share: fills L; with one worker in the group the whole collective runs
 * here (sm_cg_reduce_local), and where the group's workers share memory
 * it runs there (sm_cg_shm_reduce). Returns 1 when the collective is done,
 * with its result in *e; 0 when the caller goes on over gRPC, with *s the
 * members' joined slot when shared memory fell back, else *s untouched. */
static int sm_cg_reduce_start(sm_comm_grpc *c, const sm_comm_group *g, sm_cg_layout *L,
                              uint64_t seq, sm_cg_kind kind, sm_dtype t, sm_kern_reduce_op op,
                              const void *in, void *out, int64_t n, const sm_comm_arrays *arr,
                              sm_rendezvous_slot **s, sm_err *e, char *err, size_t errlen)
{
    sm_cg_layout_make(c, g, L);
    if (L->nw == 1) {
        *e = sm_cg_reduce_local(c, g, L, seq, kind, t, op, in, out, n, arr, err, errlen);
        return 1;
    }
    int64_t nbytes = n * (int64_t)sm_dtype_size(t) * (kind == SM_CG_RS ? g->size : 1);
    if (sm_cg_shm_use(c, g, L, kind, nbytes)) {
        *e = sm_cg_shm_reduce(c, g, L, seq, kind, t, op, in, out, n, arr, s, err, errlen);
        if (!*s) /* else it falls back, joined */
            return 1;
        *e = SM_OK;
    }
    return 0;
}

/* The error of a member whose peers failed (one of them aborted the job). */
static sm_err sm_cg_peer_failed(sm_comm_grpc *c, uint64_t seq, char *err, size_t errlen)
{
    sm_err e = sm_rendezvous_check(c->rv, err, errlen);
    return e ? e
             : sm_fail(err, errlen, SM_ECANCELLED, "collective #%llu failed on another device",
                       (unsigned long long)seq);
}

/* Part k of n elements split over nw workers: [sm_cg_part(n, nw, k),
 * sm_cg_part(n, nw, k + 1)). */
static int64_t sm_cg_part(int64_t n, int nw, int k)
{
    return n * k / nw;
}

/* The order of this worker among the group's workers. */
int sm_cg_self_order(const sm_comm_grpc *c, const sm_cg_layout *L)
{
    int k = 0;
    while (L->order[k] != c->self)
        k++;
    return k;
}

/* dst (element lo at its start) = elements [lo, hi) of unit u's partial,
 * its members (all on this worker) reduced from the local inputs in[] in
 * the tree of sm_comm.h. */
sm_err sm_cg_unit_reduce(const sm_cg_layout *L, const void *const *in, int u, sm_dtype t,
                         sm_kern_reduce_op op, int64_t lo, int64_t hi, char *dst, char *err,
                         size_t errlen)
{
    int64_t el = (int64_t)sm_dtype_size(t);
    const sm_comm_span U = L->unit[u];
    sm_comm_leaf leaf[SM_MAX_DEVICES];
    if (hi <= lo)
        return SM_OK;
    for (int q = U.lo; q < U.hi; q++)
        leaf[q - U.lo] = (sm_comm_leaf){q, q + 1, (const char *)in[L->lidx[q]] + lo * el};
    return sm_comm_tree_reduce(t, op, U.lo, U.hi, leaf, U.hi - U.lo, hi - lo, dst, err, errlen);
}

int sm_cg_leaves(const sm_cg_layout *L, const void *const *in, int64_t off,
                 const char *const *remote, const char *const *direct, sm_comm_leaf *leaves)
{
    int k = 0;
    for (int u = 0; u < L->nu; u++) {
        const sm_comm_span U = L->unit[u];
        if (L->lidx[U.lo] < 0 && direct && direct[U.lo]) {
            for (int q = U.lo; q < U.hi; q++)
                leaves[k++] = (sm_comm_leaf){q, q + 1, direct[q] + off};
            continue;
        }
        if (L->lidx[U.lo] < 0) {
            leaves[k++] = (sm_comm_leaf){U.lo, U.hi, remote[u]};
            continue;
        }
        for (int q = U.lo; q < U.hi; q++)
            leaves[k++] = (sm_comm_leaf){q, q + 1, (const char *)in[L->lidx[q]] + off};
    }
    return k;
}

/* Where this worker's unit u's partial lives: the input of a unit of one
 * member, else the output of its first member. */
static const char *sm_cg_unit_data(const sm_cg_layout *L, const sm_rendezvous_slot *s, int u)
{
    const sm_comm_span U = L->unit[u];
    int l = L->lidx[U.lo];
    return U.hi - U.lo == 1 ? (const char *)s->in[l] : (const char *)s->out[l];
}

/* The leader's share of all_reduce across workers: the partials of this
 * worker's units (sm_cg_unit_data) hold every element but this worker's
 * part. Worker order k reduces part k: every other worker sends it the
 * part of each of its units' partials (one blob, units in rank order,
 * received straight into one buffer), and it reduces them with its own
 * members' inputs in the tree of sm_comm.h, into acc's part; then every
 * worker sends its reduced part to the others, which receive it straight
 * into acc. Once the reduce-scatter's sends are done (the network no
 * longer reads the partials), acc's other parts are offered to the
 * mailbox; the offers are withdrawn before return, whatever happened. */
static sm_err sm_cg_ar_net(sm_comm_grpc *c, const sm_comm_group *g, const sm_cg_layout *L,
                           const sm_rendezvous_slot *s, uint64_t seq, sm_dtype t,
                           sm_kern_reduce_op op, char *acc, int64_t n, char *err, size_t errlen)
{
    int64_t el = (int64_t)sm_dtype_size(t);
    int32_t me = L->dev[g->rank];
    int ks = sm_cg_self_order(c, L), nw = L->nw, nmine = L->nuw[ks];
    int64_t a = sm_cg_part(n, nw, ks), m = sm_cg_part(n, nw, ks + 1) - a;
    int64_t *at = malloc((size_t)nw * sizeof *at); /* per worker order: its blob in recv */
    const char **remote = malloc((size_t)L->nu * sizeof *remote);
    sm_comm_grpc_seg *segs = malloc((size_t)nmine * sizeof *segs);
    sm_comm_leaf *leaves = malloc((size_t)g->size * sizeof *leaves);
    char *recv = NULL;
    size_t recv_len = (size_t)((L->nu - nmine) * m * el);
    char what[64];
    snprintf(what, sizeof what, "the parts of collective #%llu", (unsigned long long)seq);
    sm_err e = SM_OK;
    if (!at || !remote || !segs || !leaves)
        e = sm_fail(err, errlen, SM_ENOMEM, "out of memory for collective #%llu",
                    (unsigned long long)seq);
    else if (recv_len)
        e = sm_array_scratch(c->pool, recv_len, what, (void **)&recv, err, errlen);
    if (e)
        goto done;
    int64_t off = 0;
    for (int k = 0; k < nw; k++) { /* the partials of this worker's part, straight into recv */
        at[k] = off;
        if (k == ks)
            continue;
        if (m > 0)
            (void)sm_mailbox_expect(c->box, (uint32_t)seq, L->dev[L->first[k]], me, recv + off,
                                    L->nuw[k] * m * el);
        off += L->nuw[k] * m * el;
    }
    for (int k = 0; k < nw && !e; k++) { /* reduce-scatter: part k of every unit to worker k */
        int64_t ak = sm_cg_part(n, nw, k), mk = sm_cg_part(n, nw, k + 1) - ak;
        int nseg = 0;
        if (k == ks)
            continue;
        for (int u = 0; u < L->nu; u++)
            if (L->uorder[u] == ks)
                segs[nseg++] = (sm_comm_grpc_seg){sm_cg_unit_data(L, s, u) + ak * el, mk * el};
        e = sm_cg_push(c, L->order[k], seq, me, L->dev[L->first[k]], segs, nseg, err, errlen);
    }
    for (int k = 0; k < nw && !e; k++) { /* the parts to come, straight into acc */
        int64_t ak = sm_cg_part(n, nw, k), mk = sm_cg_part(n, nw, k + 1) - ak;
        if (k != ks && mk > 0) /* else (or out of memory) they come as pieces */
            (void)sm_mailbox_expect(c->box, (uint32_t)seq, L->dev[L->first[k]], -1, acc + ak * el,
                                    mk * el);
    }
    for (int k = 0; k < nw && !e; k++) {
        sm_mailbox_blob *b = NULL;
        if (k == ks)
            continue;
        if ((e = sm_cg_take(c, seq, L->dev[L->first[k]], me, L->order[k], 1, L->nuw[k] * m * el, el,
                            &b, err, errlen)))
            break;
        sm_mailbox_blob_copy(b, 0, recv + at[k], L->nuw[k] * m * el); /* none if in place */
        sm_mailbox_release(c->box, b);
    }
    for (int k = 0; k < nw; k++)
        if (k != ks && m > 0)
            sm_mailbox_unexpect(c->box, (uint32_t)seq, L->dev[L->first[k]], me);
    if (!e) {
        for (int u = 0; u < L->nu; u++)
            remote[u] = recv + at[L->uorder[u]] + L->uidx[u] * m * el;
        int nl = sm_cg_leaves(L, (const void *const *)s->in, a * el, remote, NULL, leaves);
        e = sm_comm_tree_reduce(t, op, 0, g->size, leaves, nl, m, acc + a * el, err, errlen);
    }
    sm_comm_grpc_seg seg = {acc + a * el, m * el};
    for (int k = 0; k < nw && !e; k++) /* all-gather: the reduced part to every worker */
        if (k != ks)
            e = sm_cg_push(c, L->order[k], seq, me, -1, &seg, 1, err, errlen);
    for (int k = 0; k < nw && !e; k++) {
        sm_mailbox_blob *b = NULL;
        int64_t ak = sm_cg_part(n, nw, k), mk = sm_cg_part(n, nw, k + 1) - ak;
        if (k == ks)
            continue;
        if ((e = sm_cg_take(c, seq, L->dev[L->first[k]], -1, L->order[k], 1, mk * el, 1, &b, err,
                            errlen)))
            break;
        sm_mailbox_blob_copy(b, 0, acc + ak * el, mk * el); /* none if received in place */
        sm_mailbox_release(c->box, b);
    }
    for (int k = 0; k < nw; k++)
        if (k != ks)
            sm_mailbox_unexpect(c->box, (uint32_t)seq, L->dev[L->first[k]], -1);
done:
    if (recv)
        sm_array_data_free(c->pool, recv, recv_len);
    free(at);
    free(remote);
    free(segs);
    free(leaves);
    return e;
}

/* Copies the first n elements (el bytes each) of src into the outputs of
 * local indices 1..nlocal-1, the caller's share of that copying. */
static void sm_cg_fan_out(const sm_rendezvous_slot *s, const sm_cg_layout *L, const char *src,
                          int64_t n, int64_t el)
{
    int64_t total = (int64_t)(L->nlocal - 1) * n;
    int64_t a = total * L->li / L->nlocal, b = total * (L->li + 1) / L->nlocal;
    for (int l = 1; l < L->nlocal; l++) {
        int64_t lo = (l - 1) * n, hi = l * n;
        lo = lo > a ? lo : a;
        hi = hi < b ? hi : b;
        if (hi > lo)
            memcpy((char *)s->out[l] + (lo - (l - 1) * n) * el, src + (lo - (l - 1) * n) * el,
                   (size_t)((hi - lo) * el));
    }
}

/* all_reduce: the local members reduce the partials of this worker's
 * units (sm_comm_tree_units) but for this worker's part, a slice of each
 * each; across workers the leader reduce-scatters and all-gathers
 * (sm_cg_ar_net) into its output; then the local members copy the
 * leader's output into the others' outputs, a share each, or, when they
 * all gave their arrays, share it. */
static sm_err sm_cg_all_reduce(void *ctx, const sm_comm_group *g, uint64_t seq, sm_dtype t,
                               sm_kern_reduce_op op, const void *in, void *out, int64_t n,
                               const sm_comm_arrays *arr, char *err, size_t errlen)
{
    sm_comm_grpc *c = ctx;
    sm_cg_layout *L = malloc(sizeof *L);
    sm_rendezvous_slot *s = NULL;
    sm_err e = SM_OK;
    if (!L)
        return sm_cg_oom(c, seq, err, errlen);
    if (sm_cg_reduce_start(c, g, L, seq, SM_CG_AR, t, op, in, out, n, arr, &s, &e, err, errlen))
        goto out;
    int64_t el = (int64_t)sm_dtype_size(t);
    if (!s && (e = sm_cg_join(c, g, L, seq, SM_CG_AR, n, in, out, arr, &s, err, errlen)))
        goto out;
    char *acc = s->out[0];
    int ks = sm_cg_self_order(c, L);
    int64_t pa = sm_cg_part(n, L->nw, ks), pb = sm_cg_part(n, L->nw, ks + 1);
    int64_t r = n - (pb - pa); /* the rest, a slice of each unit's partial each */
    int64_t lo = r * L->li / L->nlocal, hi = r * (L->li + 1) / L->nlocal;
    for (int u = 0; u < L->nu && !e; u++) {
        if (L->uorder[u] != ks || L->unit[u].hi - L->unit[u].lo == 1)
            continue;
        char *dst = (char *)sm_cg_unit_data(L, s, u);
        const void *const *ins = (const void *const *)s->in;
        int64_t x = lo < pa ? lo : pa, y = hi < pa ? hi : pa;
        e = sm_cg_unit_reduce(L, ins, u, t, op, x, y, dst + x * el, err, errlen);
        x = (lo > pa ? lo : pa) + pb - pa, y = hi + pb - pa;
        if (!e && hi > pa)
            e = sm_cg_unit_reduce(L, ins, u, t, op, x, y, dst + x * el, err, errlen);
    }
    if (e)
        e = sm_cg_failf(c, e, err, errlen, "%s", err);
    if (sm_rendezvous_mid(c->rv, s, e != SM_OK) && !e)
        e = sm_cg_peer_failed(c, seq, err, errlen);
    if (!e && L->li == 0) {
        if (n > 0 && (e = sm_cg_ar_net(c, g, L, s, seq, t, op, acc, n, err, errlen)))
            e = sm_cg_failf(c, e, err, errlen, "%s", err); /* releases the peers (if not yet) */
        sm_rendezvous_publish(c->rv, s, acc, !e);
    } else if (!e) {
        e = sm_rendezvous_wait_shared(c->rv, s, err, errlen); /* the leader's sends are bounded */
    }
    if (!e && n > 0 && sm_comm_one_output(s->arr, L->nlocal))
        sm_comm_share_output(s->arr, L->li);
    else if (!e && n > 0)
        sm_cg_fan_out(s, L, acc, n, el);
    sm_rendezvous_leave(c->rv, s);
out:
    free(L);
    return e;
}

/* reduce_scatter (size chunks, rank r needs chunk r): the leader reduces
 * the partials of this worker's units (sm_comm_tree_units) of the other
 * workers' members' chunks and pushes every other worker one blob: its
 * members' chunks of every unit's partial, units in rank order; each
 * member then reduces its chunk of the other workers' partials with its
 * worker's inputs in the tree of sm_comm.h. */
static sm_err sm_cg_reduce_scatter(void *ctx, const sm_comm_group *g, uint64_t seq, sm_dtype t,
                                   sm_kern_reduce_op op, const void *in, void *out, int64_t n,
                                   char *err, size_t errlen)
{
    sm_comm_grpc *c = ctx;
    sm_cg_layout *L = malloc(sizeof *L);
    sm_comm_grpc_seg *segs = NULL;
    sm_comm_leaf *leaves = malloc((size_t)g->size * sizeof *leaves);
    const char **part = malloc((size_t)g->size * sizeof *part); /* per unit: its partial */
    char *rbuf = NULL;
    sm_rendezvous_slot *s = NULL;
    sm_err e = SM_OK;
    if (!L || !leaves || !part) {
        e = sm_cg_oom(c, seq, err, errlen);
        goto out;
    }
    if (sm_cg_reduce_start(c, g, L, seq, SM_CG_RS, t, op, in, out, n, NULL, &s, &e, err, errlen))
        goto out;
    size_t el = sm_dtype_size(t);
    int64_t cb = n * (int64_t)el, nch = g->size;
    int ks = sm_cg_self_order(c, L), nrem = L->nu - L->nuw[ks];
    segs = malloc((size_t)L->nuw[ks] * (size_t)g->size * sizeof *segs);
    if (!segs || !(rbuf = malloc((size_t)(nrem * cb) + 1))) {
        e = sm_cg_oom(c, seq, err, errlen);
        if (s)
            sm_rendezvous_leave(c->rv, s);
        goto out;
    }
    if (!s && (e = sm_cg_join(c, g, L, seq, SM_CG_RS, n, in, NULL, NULL, &s, err, errlen)))
        goto out;
    if (L->li == 0) {
        int nmulti = 0;
        for (int u = 0; u < L->nu; u++)
            nmulti += L->uorder[u] == ks && L->unit[u].hi - L->unit[u].lo > 1;
        if (nmulti) {
            char what[64];
            snprintf(what, sizeof what, "the partials of collective #%llu",
                     (unsigned long long)seq);
            s->scratch_len = (size_t)(nmulti * nch * cb);
            s->scratch_pool = c->pool;
            if ((e = sm_array_scratch(c->pool, s->scratch_len, what, &s->scratch, err, errlen))) {
                s->scratch_len = 0;
                e = sm_cg_failf(c, e, err, errlen, "%s", err);
            }
        }
        for (int u = 0, j = 0; u < L->nu && !e; u++) {
            if (L->uorder[u] != ks)
                continue;
            if (L->unit[u].hi - L->unit[u].lo == 1) {
                part[u] = s->in[L->lidx[L->unit[u].lo]];
                continue;
            }
            char *p = (char *)s->scratch + (size_t)(j++ * nch * cb);
            part[u] = p;
            for (int q = 0; q < g->size && !e; q++)
                if (L->lidx[q] < 0)
                    e = sm_cg_unit_reduce(L, (const void *const *)s->in, u, t, op, q * n,
                                          (q + 1) * n, p + q * cb, err, errlen);
        }
        if (e)
            e = sm_cg_failf(c, e, err, errlen, "%s", err);
        for (int k = 0; k < L->nw && !e; k++) {
            int w = L->order[k], nseg = 0;
            if (w == c->self)
                continue;
            for (int u = 0; u < L->nu; u++)
                for (int q = 0; q < g->size && L->uorder[u] == ks; q++)
                    if (L->worker[q] == w)
                        segs[nseg++] = (sm_comm_grpc_seg){part[u] + q * cb, cb};
            e = sm_cg_push(c, w, seq, L->dev[g->rank], -1, segs, nseg, err, errlen);
        }
        if (e)
            sm_cg_abort(c, err);
        sm_rendezvous_publish(c->rv, s, s->scratch, !e);
    } else {
        e = sm_rendezvous_wait_shared(c->rv, s, err, errlen); /* the leader's sends are bounded */
    }
    int64_t at = 0; /* the other workers' partials of the caller's chunk, into rbuf */
    for (int k = 0; k < L->nw && !e; k++) {
        sm_mailbox_blob *b = NULL;
        if (k == ks)
            continue;
        if ((e = sm_cg_take(c, seq, L->dev[L->first[k]], -1, L->order[k], L->nlocal,
                            L->nuw[k] * L->nlocal * cb, (int64_t)el, &b, err, errlen)))
            break;
        for (int u = 0; u < L->nu; u++)
            if (L->uorder[u] == k) {
                sm_mailbox_blob_copy(b, (L->uidx[u] * L->nlocal + L->li) * cb, rbuf + at, cb);
                part[u] = rbuf + at;
                at += cb;
            }
        sm_mailbox_release(c->box, b);
    }
    if (!e) {
        int nl = sm_cg_leaves(L, (const void *const *)s->in, g->rank * cb, part, NULL, leaves);
        e = sm_comm_tree_reduce(t, op, 0, g->size, leaves, nl, n, out, err, errlen);
        if (e)
            e = sm_cg_failf(c, e, err, errlen, "%s", err);
    }
    sm_rendezvous_leave(c->rv, s);
out:
    free(L);
    free(segs);
    free(leaves);
    free(part);
    free(rbuf);
    return e;
}

/* ---- data movement --------------------------------------------------------- */

/* all_gather (chunk = nbytes, the whole input), all_to_all (chunk j of the
 * input goes to rank j) and permute (perm given) share one shape: push, join,
 * assemble from local inputs and received blobs, leave. */
static sm_err sm_cg_move(sm_comm_grpc *c, const sm_comm_group *g, uint64_t seq, sm_cg_kind kind,
                         const int64_t (*perm)[2], int npairs, const void *in, void *out,
                         int64_t cb, const sm_comm_arrays *arr, char *err, size_t errlen)
{
    sm_cg_layout *L = malloc(sizeof *L);
    sm_comm_grpc_seg *segs = malloc((size_t)g->size * sizeof *segs);
    sm_rendezvous_slot *s = NULL;
    sm_err e = SM_OK;
    int to = -1, from = -1; /* permute: the caller's destination and source ranks */
    if (!L || !segs) {
        e = sm_cg_oom(c, seq, err, errlen);
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
    }
    if (sm_cg_shm_use(c, g, L, kind, kind == SM_CG_PERM ? cb : (int64_t)g->size * cb)) {
        e = sm_cg_shm_move(c, g, L, seq, kind, from, perm, npairs, in, out, cb, arr, &s, err,
                           errlen);
        if (!s) /* else it falls back, joined */
            goto out;
        e = SM_OK;
    }
    if (kind == SM_CG_PERM) {
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
    if (e) {
        if (s)
            sm_rendezvous_leave(c->rv, s);
        goto out;
    }
    if (!s && (e = sm_cg_join(c, g, L, seq, kind, cb, in, NULL, arr, &s, err, errlen)))
        goto out;
    for (int q = 0; q < g->size && !e; q++) {
        char *dst = (char *)out + (kind == SM_CG_PERM ? 0 : q * cb);
        if (kind == SM_CG_PERM && q != from)
            continue;
        if (L->lidx[q] >= 0) {
            const char *src = s->in[L->lidx[q]];
            const sm_comm_arrays *qa = s->arr[L->lidx[q]];
            if (kind == SM_CG_A2A)
                src += (int64_t)g->rank * cb;
            if (kind == SM_CG_PERM && arr && qa && sm_array_alias(arr->out, qa->in, 0))
                continue; /* a source on this worker: its bytes, shared */
            if (cb)
                memcpy(dst, src, (size_t)cb);
            continue;
        }
        sm_mailbox_blob *b;
        int readers = kind == SM_CG_PERM ? 1 : L->nlocal;
        int64_t expect = kind == SM_CG_A2A ? L->nlocal * cb : cb;
        int32_t to_dev = kind == SM_CG_PERM ? me : -1;
        if ((e = sm_cg_take(c, seq, L->dev[q], to_dev, L->worker[q], readers, expect, 1, &b, err,
                            errlen)))
            break;
        sm_mailbox_blob_copy(b, kind == SM_CG_A2A ? L->li * cb : 0, dst, cb);
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
                               void *out, int64_t nbytes, const sm_comm_arrays *arr, char *err,
                               size_t errlen)
{
    return sm_cg_move(ctx, g, seq, SM_CG_AG, NULL, 0, in, out, nbytes, arr, err, errlen);
}

static sm_err sm_cg_all_to_all(void *ctx, const sm_comm_group *g, uint64_t seq, const void *in,
                               void *out, int64_t chunk, char *err, size_t errlen)
{
    return sm_cg_move(ctx, g, seq, SM_CG_A2A, NULL, 0, in, out, chunk, NULL, err, errlen);
}

static sm_err sm_cg_permute(void *ctx, const sm_comm_group *g, uint64_t seq,
                            const int64_t (*perm)[2], int npairs, const void *in, void *out,
                            int64_t nbytes, const sm_comm_arrays *arr, char *err, size_t errlen)
{
    return sm_cg_move(ctx, g, seq, SM_CG_PERM, perm, npairs, in, out, nbytes, arr, err, errlen);
}

const sm_comm sm_comm_grpc_ops = {
    .name = "grpc",
    .all_reduce = sm_cg_all_reduce,
    .all_gather = sm_cg_all_gather,
    .reduce_scatter = sm_cg_reduce_scatter,
    .all_to_all = sm_cg_all_to_all,
    .permute = sm_cg_permute,
    .abort = sm_cg_abort,
    .check = sm_cg_check,
};
