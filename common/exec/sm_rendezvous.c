/* sm_rendezvous: in-process meeting points of collectives (see header). */
#include "sm_rendezvous.h"

#include "sm_array.h"
#include "sm_time.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Bytes of each operand per pass of sm_rendezvous_reduce: the inputs' block
 * and the combined block stay in L2 while the block is copied out. */
#define SM_RENDEZVOUS_BLOCK_BYTES (64 * 1024)

struct sm_rendezvous {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    sm_rendezvous_config cfg;
    sm_rendezvous_slot *slots;
    int aborted;
    sm_err code;
    char why[600];
};

sm_err sm_rendezvous_create(const sm_rendezvous_config *cfg, sm_rendezvous **out, char *err,
                            size_t errlen)
{
    *out = NULL;
    sm_rendezvous *r = calloc(1, sizeof *r);
    if (!r)
        return sm_fail(err, errlen, SM_ENOMEM, "out of memory for a collective rendezvous");
    pthread_mutex_init(&r->mu, NULL);
    sm_time_cond_init(&r->cv);
    r->cfg = *cfg;
    *out = r;
    return SM_OK;
}

static void sm_rendezvous_slot_free(sm_rendezvous_slot *s)
{
    if (s) {
        free(s->in);
        free(s->out);
        free(s->arr);
        if (s->scratch)
            sm_array_data_free(s->scratch_pool, s->scratch, s->scratch_len);
        free(s);
    }
}

void sm_rendezvous_free(sm_rendezvous *r)
{
    if (!r)
        return;
    for (sm_rendezvous_slot *s = r->slots, *n; s; s = n) {
        n = s->next;
        sm_rendezvous_slot_free(s);
    }
    pthread_cond_destroy(&r->cv);
    pthread_mutex_destroy(&r->mu);
    free(r);
}

/* The counters and the generation members wait on are written with atomic
 * stores under mu, and read without it by this spin: before a member
 * sleeps on the condition variable (the caller holds mu), it releases mu
 * and polls a while (sm_spin) until *word reaches stop or the rendezvous is
 * aborted, since the others usually arrive within microseconds and a
 * wake-up costs more; then it takes mu again and waits as before. */
static void sm_rendezvous_spin(sm_rendezvous *r, const sm_rendezvous_slot *s, const int *word,
                               int stop)
{
    if (s->spin_us == 0 || __atomic_load_n(word, __ATOMIC_ACQUIRE) == stop)
        return;
    pthread_mutex_unlock(&r->mu);
    sm_spin sp = sm_spin_start(s->spin_us);
    while (__atomic_load_n(word, __ATOMIC_ACQUIRE) != stop &&
           !__atomic_load_n(&r->aborted, __ATOMIC_ACQUIRE) && sm_spin_more(&sp))
        ;
    pthread_mutex_lock(&r->mu);
}

/* Sets the abort state (caller holds mu); returns 1 if this call set it. */
static int sm_rendezvous_abort_locked(sm_rendezvous *r, sm_err code, const char *why)
{
    if (r->aborted)
        return 0;
    __atomic_store_n(&r->aborted, 1, __ATOMIC_RELEASE); /* read by sm_rendezvous_spin */
    r->code = code;
    snprintf(r->why, sizeof r->why, "%s", why);
    pthread_cond_broadcast(&r->cv);
    return 1;
}

int sm_rendezvous_abort(sm_rendezvous *r, sm_err code, const char *why)
{
    pthread_mutex_lock(&r->mu);
    int set = sm_rendezvous_abort_locked(r, code, why);
    pthread_mutex_unlock(&r->mu);
    if (set && r->cfg.on_abort)
        r->cfg.on_abort(r->cfg.user, code, why);
    return set;
}

sm_err sm_rendezvous_status(sm_rendezvous *r, char *why, size_t len)
{
    pthread_mutex_lock(&r->mu);
    sm_err e = r->aborted ? r->code : SM_OK;
    if (why && len)
        snprintf(why, len, "%s", r->aborted ? r->why : "");
    pthread_mutex_unlock(&r->mu);
    return e;
}

/* The abort's error; the caller holds mu and the job is aborted. */
static sm_err sm_rendezvous_fail_locked(sm_rendezvous *r, char *err, size_t errlen)
{
    return sm_fail(err, errlen, r->code, "%s", r->why);
}

sm_err sm_rendezvous_check(sm_rendezvous *r, char *err, size_t errlen)
{
    pthread_mutex_lock(&r->mu);
    sm_err e = r->aborted ? sm_rendezvous_fail_locked(r, err, errlen) : SM_OK;
    pthread_mutex_unlock(&r->mu);
    return e;
}

/* The slot of k, created if new; NULL when out of memory. Caller holds mu. */
static sm_rendezvous_slot *sm_rendezvous_slot_get(sm_rendezvous *r, const sm_rendezvous_key *k)
{
    sm_rendezvous_slot *s = r->slots;
    while (s && !(s->seq == k->seq && s->leader == k->g->members[0]))
        s = s->next;
    if (s)
        return s;
    s = calloc(1, sizeof *s);
    if (s)
        s->in = calloc((size_t)k->size, sizeof *s->in);
    if (s && s->in)
        s->out = calloc((size_t)k->size, sizeof *s->out);
    if (s && s->out)
        s->arr = calloc((size_t)k->size, sizeof *s->arr);
    if (!s || !s->in || !s->out || !s->arr) {
        sm_rendezvous_slot_free(s);
        return NULL;
    }
    s->seq = k->seq;
    s->leader = k->g->members[0];
    s->size = k->size;
    s->kind = k->kind;
    s->arg = k->arg;
    s->spin_us = sm_spin_us(k->g->size);
    s->next = r->slots;
    r->slots = s;
    return s;
}

sm_err sm_rendezvous_join(sm_rendezvous *r, const sm_rendezvous_key *k, const void *in, void *out,
                          const struct timespec *deadline, sm_rendezvous_slot **slot, char *err,
                          size_t errlen)
{
    const char *const *names = r->cfg.names;
    sm_err e = SM_OK;
    pthread_mutex_lock(&r->mu);
    if (r->aborted) {
        e = sm_rendezvous_fail_locked(r, err, errlen);
        goto done;
    }
    sm_rendezvous_slot *s = sm_rendezvous_slot_get(r, k);
    if (!s) {
        e = sm_fail(err, errlen, SM_ENOMEM, "out of memory for a collective rendezvous");
        goto done;
    }
    if (s->size != k->size || s->kind != k->kind || s->arg != k->arg || s->in[k->index]) {
        char msg[560], why[600];
        snprintf(msg, sizeof msg,
                 "collective #%llu: members disagree (%s of %d members, size %lld, vs %s of %d "
                 "members, size %lld, rank %d)",
                 (unsigned long long)k->seq, names[s->kind], s->size, (long long)s->arg,
                 names[k->kind], k->size, (long long)k->arg, k->g->rank);
        e = sm_fail(err, errlen, SM_EINVAL, "%s", msg);
        /* Aborted here, under the lock, so that members arriving after this
         * one see the abort (cancelled) instead of disagreeing too. */
        snprintf(why, sizeof why, "collective cancelled: %s", msg);
        if (sm_rendezvous_abort_locked(r, SM_ECANCELLED, why) && r->cfg.on_abort) {
            pthread_mutex_unlock(&r->mu);
            r->cfg.on_abort(r->cfg.user, SM_ECANCELLED, why);
            return e;
        }
        goto done;
    }
    s->in[k->index] = in ? in : (const void *)s; /* a zero-size input may be NULL */
    s->out[k->index] = out;
    s->arr[k->index] = k->arr;
    if (__atomic_add_fetch(&s->arrived, 1, __ATOMIC_RELEASE) == s->size)
        pthread_cond_broadcast(&r->cv);
    else if (!r->aborted)
        sm_rendezvous_spin(r, s, &s->arrived, s->size);
    while (s->arrived < s->size && !r->aborted) {
        if (pthread_cond_timedwait(&r->cv, &r->mu, deadline) == ETIMEDOUT && s->arrived < s->size &&
            !r->aborted) {
            int missing = -1;
            for (int i = 0; i < s->size && missing < 0; i++)
                if (!s->in[i])
                    missing = i;
            char why[600];
            r->cfg.timeout_why(r->cfg.user, k, missing, why, sizeof why);
            sm_rendezvous_abort_locked(r, SM_ETIMEOUT, why);
            if (r->cfg.on_abort) {
                pthread_mutex_unlock(&r->mu);
                r->cfg.on_abort(r->cfg.user, SM_ETIMEOUT, why);
                pthread_mutex_lock(&r->mu);
            }
        }
    }
    if (s->arrived < s->size) { /* aborted before everyone arrived */
        s->in[k->index] = NULL;
        e = sm_rendezvous_fail_locked(r, err, errlen);
        goto done;
    }
    *slot = s;
done:
    pthread_mutex_unlock(&r->mu);
    return e;
}

int sm_rendezvous_mid(sm_rendezvous *r, sm_rendezvous_slot *s, int failed)
{
    pthread_mutex_lock(&r->mu);
    s->failed |= failed;
    if (__atomic_add_fetch(&s->reduced, 1, __ATOMIC_RELEASE) == s->size)
        pthread_cond_broadcast(&r->cv);
    else
        sm_rendezvous_spin(r, s, &s->reduced, s->size);
    while (s->reduced < s->size)
        pthread_cond_wait(&r->cv, &r->mu);
    failed = s->failed;
    pthread_mutex_unlock(&r->mu);
    return failed;
}

int sm_rendezvous_sync(sm_rendezvous *r, sm_rendezvous_slot *s, int failed)
{
    pthread_mutex_lock(&r->mu);
    int gen = s->sync_gen;
    s->sync_failed |= failed;
    if (++s->synced == s->size) {
        s->synced = 0;
        __atomic_store_n(&s->sync_gen, gen + 1, __ATOMIC_RELEASE);
        failed = s->sync_last = s->sync_failed;
        s->sync_failed = 0;
        pthread_cond_broadcast(&r->cv);
    } else {
        if (!r->aborted)
            sm_rendezvous_spin(r, s, &s->sync_gen, gen + 1);
        while (s->sync_gen == gen && !r->aborted)
            pthread_cond_wait(&r->cv, &r->mu);
        failed = s->sync_gen == gen ? 1 : s->sync_last; /* aborted before all arrived: 1 */
    }
    failed |= r->aborted;
    pthread_mutex_unlock(&r->mu);
    return failed;
}

void sm_rendezvous_publish(sm_rendezvous *r, sm_rendezvous_slot *s, const void *shared, int ok)
{
    pthread_mutex_lock(&r->mu);
    s->shared = shared;
    s->pstate = ok ? 1 : -1;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

sm_err sm_rendezvous_wait_shared(sm_rendezvous *r, sm_rendezvous_slot *s, char *err, size_t errlen)
{
    sm_err e = SM_OK;
    pthread_mutex_lock(&r->mu);
    while (s->pstate == 0 && !r->aborted)
        pthread_cond_wait(&r->cv, &r->mu);
    if (s->pstate != 1 && r->aborted)
        e = sm_rendezvous_fail_locked(r, err, errlen);
    else if (s->pstate != 1)
        e = sm_fail(err, errlen, SM_ECANCELLED, "collective #%llu failed on a peer",
                    (unsigned long long)s->seq);
    pthread_mutex_unlock(&r->mu);
    return e;
}

void sm_rendezvous_leave(sm_rendezvous *r, sm_rendezvous_slot *s)
{
    pthread_mutex_lock(&r->mu);
    if (__atomic_add_fetch(&s->finished, 1, __ATOMIC_RELEASE) == s->size)
        pthread_cond_broadcast(&r->cv);
    else
        sm_rendezvous_spin(r, s, &s->finished, s->size);
    while (s->finished < s->size)
        pthread_cond_wait(&r->cv, &r->mu);
    if (++s->left == s->size) {
        for (sm_rendezvous_slot **pp = &r->slots; *pp; pp = &(*pp)->next) {
            if (*pp == s) {
                *pp = s->next;
                break;
            }
        }
        sm_rendezvous_slot_free(s);
    }
    pthread_mutex_unlock(&r->mu);
}

/* Elements [lo, hi) of the reduction of the members' inputs (read from
 * element off + lo on) in the tree of sm_comm.h, written to out (which
 * receives element lo at its start) and, if all, copied block by block
 * from there to the same elements of every member's output but self's. */
static sm_err sm_rendezvous_reduce_range(const sm_rendezvous_slot *s, sm_dtype t,
                                         sm_kern_reduce_op op, int64_t off, int64_t lo, int64_t hi,
                                         void *out, int self, int all, char *err, size_t errlen)
{
    size_t el = sm_dtype_size(t);
    int64_t blk = SM_RENDEZVOUS_BLOCK_BYTES / (int64_t)el;
    sm_comm_leaf *leaf = malloc((size_t)s->size * sizeof *leaf);
    if (!leaf)
        return sm_fail(err, errlen, SM_ENOMEM, "out of memory for a reduction");
    sm_err e = SM_OK;
    for (int64_t b = lo; b < hi && !e; b += blk) {
        int64_t m = hi - b < blk ? hi - b : blk;
        size_t src = (size_t)(off + b) * el, dst = (size_t)(b - lo) * el, len = (size_t)m * el;
        char *d = (char *)out + dst;
        for (int q = 0; q < s->size; q++)
            leaf[q] = (sm_comm_leaf){q, q + 1, (const char *)s->in[q] + src};
        e = sm_comm_tree_reduce(t, op, 0, s->size, leaf, s->size, m, d, err, errlen);
        for (int q = 0; all && !e && q < s->size; q++)
            if (q != self)
                memcpy((char *)s->out[q] + (size_t)b * el, d, len);
    }
    free(leaf);
    return e;
}

sm_err sm_rendezvous_reduce(sm_rendezvous *r, sm_rendezvous_slot *s, int index, int scatter,
                            sm_dtype t, sm_kern_reduce_op op, int64_t n, char *err, size_t errlen)
{
    if (scatter)
        return sm_rendezvous_reduce_range(s, t, op, (int64_t)index * n, 0, n, s->out[index], index,
                                          0, err, errlen);
    /* with every member's arrays, one output, member 0's, that the others
     * share once every part is in (sm_rendezvous_mid) */
    int one = n > 0 && sm_comm_one_output(s->arr, s->size);
    int64_t lo = n * index / s->size, hi = n * (index + 1) / s->size;
    char *mine =
        (char *)(one ? s->arr[0]->out->data : s->out[index]) + (size_t)lo * sm_dtype_size(t);
    sm_err e = sm_rendezvous_reduce_range(s, t, op, 0, lo, hi, mine, index, !one, err, errlen);
    if (sm_rendezvous_mid(r, s, e != SM_OK) && !e) /* every member fails alike */
        e = sm_fail(err, errlen, SM_EUNSUPPORTED, "%s of %s failed on a peer",
                    r->cfg.names[s->kind], sm_dtype_name(t));
    if (!e && one)
        sm_comm_share_output(s->arr, index);
    return e;
}
