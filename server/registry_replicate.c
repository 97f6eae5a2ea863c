/* registry_replicate: Replicate, a second copy of every block of a ready
 * array on another worker than the one the mesh keeps it on, so that the
 * array survives that worker's loss (DEGRADED, see registry_repair.c).
 * Placement here; the copies are made by the repair machinery. See
 * registry.h. */
#include "registry_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sm_log.h"

/* Places one copy of every block of a held by one worker only, on another
 * alive worker (the next ones in registration order, spread over their
 * devices). *out (malloc'd) and *n: the copies; SM_EUNAVAILABLE when no
 * other worker is alive. */
static sm_err sm_reg_copies_place(sm_registry *r, const sm_reg_array *a, sm_reg_copy **out, int *n,
                                  char *err, size_t errlen)
{
    sm_reg_copy *cp = calloc((size_t)a->n, sizeof *cp);
    int nc = 0, next = 0, *given = calloc((size_t)r->nworkers + 1, sizeof *given);
    *out = NULL;
    *n = 0;
    if (!cp || !given) {
        free(cp);
        free(given);
        return sm_fail(err, errlen, SM_ENOMEM, "out of memory placing copies");
    }
    for (int p = 0; p < a->n; p++) {
        int first = 1, spread = 0;
        for (int q = 0; q < a->n; q++)
            if (sm_index_equal(&a->slices[q].index, &a->slices[p].index)) {
                first &= q >= p;
                spread |= a->worker[q] != a->worker[p];
            }
        if (!first || spread) /* one copy per block; a block on two workers needs none */
            continue;
        int placed = 0;
        for (int t = 0; t < r->nworkers && !placed; t++) {
            int i = (next + t) % r->nworkers;
            const sm_reg_worker *w = r->workers[i];
            if (!w->alive || w->id == a->worker[p] || w->ndevices < 1)
                continue;
            cp[nc++] = (sm_reg_copy){p, w->id, w->first_device + given[i]++ % w->ndevices, 0};
            next = (i + 1) % r->nworkers;
            placed = 1;
        }
        if (!placed) {
            free(cp);
            free(given);
            return sm_fail(err, errlen, SM_EUNAVAILABLE,
                           "2 replicas need a second live worker, and worker %u is the only one "
                           "holding %s",
                           a->worker[p], a->name[0] ? a->name : "the array");
        }
    }
    free(given);
    *out = cp;
    *n = nc;
    return SM_OK;
}

sm_err sm_registry_replicate_begin(sm_registry *r, const sm_svc_replicate_req *req,
                                   sm_reg_repair **reps, int *nreps, sm_reg_free **frees,
                                   int *nfrees, char *err, size_t errlen)
{
    char label[SM_NAME_MAX + 16];
    sm_err e = SM_OK;
    *reps = NULL;
    *nreps = 0;
    pthread_mutex_lock(&r->mu);
    sm_reg_array *a;
    if ((e = sm_reg_array_get(r, req->array, &a, label, sizeof label, err, errlen)))
        goto out;
    if (req->replicas != 1 && req->replicas != 2) {
        e = sm_fail(err, errlen, SM_EINVAL,
                    "replicas must be 1 (the mesh's own devices) or 2 (a copy of every block on "
                    "a second worker), not %d",
                    req->replicas);
        goto out;
    }
    if (a->state != SM_ARRAY_READY) {
        e = sm_fail(err, errlen, SM_EPRECONDITION, "%s is %s; only a ready array is replicated%s%s",
                    label, sm_array_state_name(a->state), a->error[0] ? ": " : "", a->error);
        goto out;
    }
    if (req->replicas == 1) { /* drop the copies */
        if (a->repairing) {
            e = sm_fail(err, errlen, SM_EPRECONDITION,
                        "%s has copies being made right now; ask again once they are", label);
            goto out;
        }
        if (a->ncopies) {
            sm_reg_array only = *a;
            only.n = 0; /* the copies alone, which sm_reg_array_frees lists under their ids */
            sm_reg_array_frees(r, &only, 0, frees, nfrees);
            SM_INFO("%s: its %d copies dropped", label, a->ncopies);
        }
        free(a->copies);
        a->copies = NULL;
        a->ncopies = 0;
        sm_reg_save_copies(r, a);
        goto out;
    }
    if (a->ncopies) /* placed already: make what is missing */
        goto make;
    if ((e = sm_reg_copies_place(r, a, &a->copies, &a->ncopies, err, errlen)))
        goto out;
    sm_reg_save_copies(r, a);
    r->repair_hint = 1;
    SM_INFO("%s: %d copies placed on other workers", label, a->ncopies);
make:
    for (int k = 0; k < a->ncopies && !e; k++) {
        const sm_reg_worker *w = sm_reg_worker_by_id(r, a->copies[k].worker);
        if (!w || !w->alive)
            continue;
        e = sm_reg_repair_add(r, a, w, a->n + k, a->n + k + 1, reps, nreps, "planning copies", err,
                              errlen);
    }
out:
    pthread_mutex_unlock(&r->mu);
    return e;
}
