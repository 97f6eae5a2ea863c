/* registry_repair: the health of arrays that were once ready (READY,
 * DEGRADED, LOST) as workers go and come back, and the repair that copies
 * a degraded array's missing shards back onto their returned worker from
 * live copies. See registry.h. */
#include "registry_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sm_log.h"

/* A failed repair is tried again after this long. */
#define SM_REG_REPAIR_RETRY_MS 1000

int sm_reg_slot_present(sm_registry *r, const sm_reg_array *a, int s)
{
    sm_reg_worker *w = sm_reg_worker_by_id(r, sm_reg_slot_worker(a, s));
    return sm_reg_slot_filled(a, s) && w && w->alive;
}

int sm_reg_slot_find(const sm_reg_array *a, uint64_t store_id, int32_t device)
{
    if (store_id == a->id)
        return sm_mesh_find_device(&a->sharding.mesh, device);
    if (!SM_REG_IS_COPY_ID(store_id) || SM_REG_COPY_OWNER(store_id) != a->id)
        return -1;
    for (int k = 0; k < a->ncopies; k++)
        if (a->copies[k].of == SM_REG_COPY_OF(store_id) && a->copies[k].device == device)
            return a->n + k;
    return -1;
}

/* A slot holding a present copy of slot p's block (p itself when present),
 * preferring one on worker prefer, then a mesh position; -1 if none. */
static int sm_reg_copy_of(sm_registry *r, const sm_reg_array *a, int p, uint32_t prefer)
{
    int best = -1;
    if (sm_reg_slot_present(r, a, p))
        return p;
    int block = sm_reg_slot_block(a, p);
    const sm_index *want = &a->slices[block].index;
    for (int q = 0; q < sm_reg_nslots(a); q++)
        if (q != p && sm_reg_slot_present(r, a, q) &&
            sm_index_equal(&a->slices[sm_reg_slot_block(a, q)].index, want) &&
            /* equal indices of an unreduced array hold different partial
             * sums: only the copies of the same device's block are copies */
            (!a->sharding.spec.nunreduced || sm_reg_slot_block(a, q) == block) &&
            (best < 0 ||
             (sm_reg_slot_worker(a, q) == prefer && sm_reg_slot_worker(a, best) != prefer)))
            best = q;
    return best;
}

sm_array_state sm_reg_array_health(sm_registry *r, const sm_reg_array *a)
{
    int all = 1;
    for (int p = 0; p < a->n; p++) {
        if (sm_reg_slot_present(r, a, p))
            continue;
        all = 0;
        if (sm_reg_copy_of(r, a, p, 0) < 0)
            return SM_ARRAY_LOST;
    }
    return all ? SM_ARRAY_READY : SM_ARRAY_DEGRADED;
}

void sm_reg_array_update_health(sm_registry *r, sm_reg_array *a, const char *why)
{
    char label[SM_NAME_MAX + 16], devs[256], msg[1024];
    unsigned char missing[SM_MAX_DEVICES];
    sm_array_state was = a->state, now = sm_reg_array_health(r, a);
    sm_reg_array_label(a, label, sizeof label);
    for (int p = 0; p < a->n; p++)
        missing[p] = !sm_reg_slot_present(r, a, p);
    int n = sm_reg_device_list(a, missing, devs, sizeof devs);
    const char *s = n > 1 ? "s" : "", *are = n > 1 ? "are" : "is";
    switch (now) {
    case SM_ARRAY_READY:
        a->error[0] = 0;
        if (was != SM_ARRAY_READY)
            SM_INFO("%s is ready again: every shard is back", label);
        break;
    case SM_ARRAY_DEGRADED:
        r->repair_hint = 1;
        snprintf(msg, sizeof msg,
                 "%s is degraded: device%s %s %s gone (%s); every block still has a copy on a "
                 "live worker, so it can be read and resharded, and the missing shards are "
                 "copied back when their worker returns",
                 label, s, devs, are, why);
        sm_reg_array_set_error(a, msg);
        if (was != SM_ARRAY_DEGRADED)
            SM_WARN("%s", msg);
        break;
    default:
        snprintf(msg, sizeof msg, "%s is lost: device%s %s %s gone (%s)", label, s, devs, are, why);
        sm_reg_array_set_error(a, msg);
        now = SM_ARRAY_LOST;
        break;
    }
    a->state = now;
    sm_reg_save_array(r, a);
}

void sm_reg_repair_release(sm_reg_repair *rep)
{
    if (rep->part.req.nshards)
        free(rep->part.req.shards[0].pieces); /* one block for all shards */
    free(rep->part.req.shards);
    free(rep->part.addrs);
}

void sm_registry_repairs_free(sm_reg_repair *reps, int n)
{
    for (int i = 0; reps && i < n; i++)
        sm_reg_repair_release(&reps[i]);
    free(reps);
}

/* The repair of a's slots on w whose shards are missing and have a live
 * copy, among its mesh positions (copies 0) or its copies (copies 1): one
 * Assemble of those devices under their store id, each from one live copy.
 * 0 when there is nothing to copy, 1 when *rep was filled, -1 out of
 * memory. */
int sm_reg_repair_build(sm_registry *r, const sm_reg_array *a, const sm_reg_worker *w, int from,
                        int to, sm_reg_repair *rep)
{
    int todo[SM_MAX_WORKER_DEVICES], src[SM_MAX_WORKER_DEVICES], n = 0;
    for (int p = from; p < to && n < SM_MAX_WORKER_DEVICES; p++) {
        if (sm_reg_slot_worker(a, p) != w->id || sm_reg_slot_filled(a, p))
            continue;
        int q = sm_reg_copy_of(r, a, p, w->id);
        if (q >= 0) {
            todo[n] = p;
            src[n++] = q;
        }
    }
    if (!n)
        return 0;
    memset(rep, 0, sizeof *rep);
    rep->array.v = a->id;
    sm_reg_assemble *pa = &rep->part;
    sm_reg_target_set(&pa->t, w);
    pa->req.array_id.v = sm_reg_slot_store_id(a, todo[0]);
    pa->req.dtype = a->dtype;
    pa->req.shards = calloc((size_t)n, sizeof *pa->req.shards);
    pa->addrs = calloc((size_t)n, sizeof *pa->addrs);
    sm_svc_piece *pieces = calloc((size_t)n, sizeof *pieces);
    if (!pa->req.shards || !pa->addrs || !pieces) {
        free(pa->req.shards);
        free(pa->addrs);
        free(pieces);
        return -1;
    }
    for (int k = 0; k < n; k++) {
        sm_svc_assemble_shard *sh = &pa->req.shards[pa->req.nshards++];
        uint32_t holder = sm_reg_slot_worker(a, src[k]);
        pa->t.devices[pa->t.ndevices++] = sm_reg_slot_device(a, todo[k]);
        sh->device = sm_reg_slot_device(a, todo[k]);
        sh->shape = a->shard_shape;
        sh->pieces = &pieces[k];
        sh->npieces = 1;
        if (holder != w->id)
            snprintf(pa->addrs[k], SM_ADDR_MAX, "%s", sm_reg_worker_by_id(r, holder)->address);
        pieces[k].src_address = pa->addrs[k];
        pieces[k].src_array.v = sm_reg_slot_store_id(a, src[k]);
        pieces[k].src_device = sm_reg_slot_device(a, src[k]);
        pieces[k].src_box.rank = a->shard_shape.rank;
        for (int d = 0; d < a->shard_shape.rank; d++)
            pieces[k].src_box.r[d].stop = a->shard_shape.dims[d];
    }
    return 1;
}

sm_err sm_reg_repair_add(sm_registry *r, sm_reg_array *a, const sm_reg_worker *w, int from, int to,
                         sm_reg_repair **reps, int *nreps, const char *what, char *err,
                         size_t errlen)
{
    sm_reg_repair rep, *grown;
    int got = sm_reg_repair_build(r, a, w, from, to, &rep);
    if (got == 0)
        return SM_OK;
    grown = got > 0 ? realloc(*reps, sizeof **reps * (size_t)(*nreps + 1)) : NULL;
    if (!grown) {
        if (got > 0)
            sm_reg_repair_release(&rep);
        return sm_fail(err, errlen, SM_ENOMEM, "out of memory %s", what);
    }
    *reps = grown;
    (*reps)[(*nreps)++] = rep;
    a->repairing++;
    return SM_OK;
}

sm_err sm_registry_repairs_begin(sm_registry *r, uint32_t worker_id, int64_t now_ms,
                                 sm_reg_repair **out, int *nout, char *err, size_t errlen)
{
    sm_err e = SM_OK;
    *out = NULL;
    *nout = 0;
    pthread_mutex_lock(&r->mu);
    sm_reg_worker *w = r->repair_hint ? sm_reg_worker_by_id(r, worker_id) : NULL;
    int candidates = 0;
    for (sm_reg_array *a = r->arrays; !e && w && w->alive && a; a = a->next) {
        if (a->state != SM_ARRAY_DEGRADED && (a->state != SM_ARRAY_READY || !a->ncopies))
            continue;
        int unfilled = a->state == SM_ARRAY_DEGRADED;
        for (int k = 0; !unfilled && k < a->ncopies; k++)
            unfilled = !a->copies[k].filled;
        candidates += unfilled;
        if (!unfilled || a->repairing || now_ms < a->repair_after)
            continue;
        /* the mesh's shards in one Assemble, then each copy (its own id) */
        for (int k = -1; k < a->ncopies && !e; k++)
            e = sm_reg_repair_add(r, a, w, k < 0 ? 0 : a->n + k, k < 0 ? a->n : a->n + k + 1, out,
                                  nout, "planning repairs", err, errlen);
    }
    if (w && w->alive && !e && !candidates)
        r->repair_hint = 0; /* nothing anywhere waits for a repair */
    pthread_mutex_unlock(&r->mu);
    return e;
}

int sm_registry_repair_end(sm_registry *r, const sm_reg_repair *rep, int64_t now_ms, int ok,
                           const char *why)
{
    char label[SM_NAME_MAX + 16];
    int keep = 1;
    pthread_mutex_lock(&r->mu);
    sm_reg_array *a = sm_reg_array_find(r, (sm_array_ref){rep->array, NULL}, NULL, 0);
    sm_reg_worker *w = sm_reg_worker_by_id(r, rep->part.t.worker_id);
    int copies = SM_REG_IS_COPY_ID(rep->part.req.array_id.v);
    if (!a) {
        SM_INFO("array %llu was deleted while its shards were copied",
                (unsigned long long)rep->array.v);
        keep = 0;
        goto out;
    }
    if (a->repairing > 0)
        a->repairing--;
    sm_reg_array_label(a, label, sizeof label);
    if (!ok) {
        a->repair_after = now_ms + SM_REG_REPAIR_RETRY_MS;
        SM_WARN("copying the missing %s of %s to worker %u failed (tried again in %d ms): %s",
                copies ? "copies" : "shards", label, rep->part.t.worker_id, SM_REG_REPAIR_RETRY_MS,
                why);
        goto out;
    }
    if ((a->state != SM_ARRAY_DEGRADED && a->state != SM_ARRAY_READY) || !w || !w->alive) {
        keep = 0;
        goto out;
    }
    for (int k = 0; k < rep->part.t.ndevices; k++) {
        int p = sm_reg_slot_find(a, rep->part.req.array_id.v, rep->part.t.devices[k]);
        if (p < 0 || sm_reg_slot_worker(a, p) != w->id)
            continue;
        if (p < a->n)
            a->filled[p] = 1;
        else
            a->copies[p - a->n].filled = 1;
    }
    SM_INFO("%s: %d %s copied to worker %u from live copies", label, rep->part.t.ndevices,
            copies ? "copies" : "shard(s)", w->id);
    if (a->state == SM_ARRAY_DEGRADED)
        sm_reg_array_update_health(r, a, "the others wait for their workers to return");
out:
    pthread_mutex_unlock(&r->mu);
    return keep;
}
