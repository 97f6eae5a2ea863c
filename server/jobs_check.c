/* jobs_check: the pure checks of the job manager (see jobs.h): output
 * names, arguments against parameters, sharding comparison, the default
 * device order and the workers of a mesh. No registry, no network. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jobs.h"

/* "f32[8,16]" into buf. */
static const char *type_str(sm_dtype t, const sm_shape *s, char *buf, size_t len)
{
    size_t o = (size_t)snprintf(buf, len, "%s[", sm_dtype_name(t));
    for (int d = 0; d < s->rank && o < len; d++)
        o += (size_t)snprintf(buf + o, len - o, "%s%lld", d ? "," : "", (long long)s->dims[d]);
    if (o < len)
        snprintf(buf + o, len - o, "]");
    return buf;
}

sm_err sm_cjobs_check_out_names(const sm_program *p, int n, const char *const *names, char *err,
                                size_t errlen)
{
    if (n < 0 || n > p->nreturns)
        return sm_fail(err, errlen, SM_EINVAL,
                       "the job names %d outputs but program '%s' returns %d value%s", n, p->name,
                       p->nreturns, p->nreturns == 1 ? "" : "s");
    for (int k = 0; k < n; k++) {
        const char *s = names ? names[k] : NULL;
        if (!s || !*s)
            continue;
        if (strlen(s) >= SM_NAME_MAX)
            return sm_fail(err, errlen, SM_EINVAL,
                           "output %d's name is %zu bytes long; at most %d are allowed", k,
                           strlen(s), SM_NAME_MAX - 1);
        char what[32];
        snprintf(what, sizeof what, "output %d's name", k);
        sm_err e = sm_text_check(what, s, err, errlen);
        if (e)
            return e;
        if (strspn(s, "0123456789") == strlen(s))
            return sm_fail(err, errlen, SM_EINVAL,
                           "output %d's name '%s' is all digits, which would read as an array id",
                           k, s);
        for (int i = 0; i < k; i++)
            if (names[i] && !strcmp(names[i], s))
                return sm_fail(err, errlen, SM_EINVAL,
                               "outputs %d and %d are both named '%s'; names must be unique", i, k,
                               s);
    }
    return SM_OK;
}

sm_err sm_cjobs_check_arg(const sm_program *p, int k, const sm_array_info *a, char *err,
                          size_t errlen)
{
    const sm_ir_param *pa = &p->params[k];
    char label[SM_NAME_MAX + 32], want[128], got[128];
    if (a->name[0])
        snprintf(label, sizeof label, "array %llu ('%s')", (unsigned long long)a->id.v, a->name);
    else
        snprintf(label, sizeof label, "array %llu", (unsigned long long)a->id.v);
    if (a->state == SM_ARRAY_DEGRADED) /* a job needs every device of the mesh */
        return sm_fail(err, errlen, SM_EUNAVAILABLE,
                       "argument %d for parameter '%s' is %s, which is degraded; a job runs "
                       "on every device of its mesh, so it waits until they are back: %s",
                       k, pa->name, label, a->error);
    if (a->state != SM_ARRAY_READY)
        return sm_fail(err, errlen, SM_EINVAL,
                       "argument %d for parameter '%s' is %s, which is %s, not ready%s%s", k,
                       pa->name, label, sm_array_state_name(a->state), a->error[0] ? ": " : "",
                       a->error);
    if (a->dtype != pa->dtype || !sm_shape_equal(&a->shape, &pa->global))
        return sm_fail(err, errlen, SM_EINVAL,
                       "argument %d for parameter '%s' is %s of type %s, but the parameter is "
                       "%s",
                       k, pa->name, label, type_str(a->dtype, &a->shape, got, sizeof got),
                       type_str(pa->dtype, &pa->global, want, sizeof want));
    return SM_OK;
}

static int entry_same(const sm_pspec *a, const sm_pspec *b, int d)
{
    int na = d < a->nentries ? a->e[d].naxes : 0, nb = d < b->nentries ? b->e[d].naxes : 0;
    if (na != nb)
        return 0;
    for (int k = 0; k < na; k++)
        if (strcmp(a->e[d].axes[k], b->e[d].axes[k]))
            return 0;
    return 1;
}

int sm_cjobs_sharding_same(const sm_sharding *s, const sm_mesh *m, const sm_pspec *spec)
{
    const sm_mesh *h = &s->mesh;
    if (h->naxes != m->naxes || h->ndevices != m->ndevices)
        return 0;
    for (int a = 0; a < m->naxes; a++)
        if (strcmp(h->names[a], m->names[a]) || h->sizes[a] != m->sizes[a])
            return 0;
    if (memcmp(h->devices, m->devices, sizeof m->devices[0] * (size_t)m->ndevices))
        return 0;
    int n = s->spec.nentries > spec->nentries ? s->spec.nentries : spec->nentries;
    for (int d = 0; d < n; d++)
        if (!entry_same(&s->spec, spec, d))
            return 0;
    if (s->spec.nunreduced != spec->nunreduced) /* the same partial sums, or none */
        return 0;
    for (int k = 0; k < spec->nunreduced; k++)
        if (!sm_pspec_is_unreduced(&s->spec, spec->unreduced[k]))
            return 0;
    if (spec->nunreduced && s->spec.unreduced_kind != spec->unreduced_kind)
        return 0;
    return 1;
}

/* Sorts order[0..k) (indices into w) by the workers' process index. */
static void by_process_index(const sm_worker_info *w, int *order, int k)
{
    for (int i = 1; i < k; i++)
        for (int j = i; j > 0 && w[order[j - 1]].process_index > w[order[j]].process_index; j--) {
            int t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
}

/* Indices of the alive workers of w, sorted by process index, into order. */
static int alive_order(const sm_worker_info *w, int n, int *order)
{
    int k = 0;
    for (int i = 0; i < n; i++)
        if (w[i].alive)
            order[k++] = i;
    by_process_index(w, order, k);
    return k;
}

sm_err sm_cjobs_default_devices(sm_mesh *m, const sm_worker_info *w, int n, char *err,
                                size_t errlen)
{
    int64_t total = 1;
    for (int a = 0; a < m->naxes; a++)
        total *= m->sizes[a];
    int *order = malloc((size_t)(n > 0 ? n : 1) * sizeof *order);
    int *ndev = malloc((size_t)(n > 0 ? n : 1) * sizeof *ndev);
    int32_t *devs = malloc(SM_MAX_DEVICES * sizeof *devs);
    sm_err e = SM_OK;
    if (!order || !ndev || !devs) {
        e = sm_fail(err, errlen, SM_ENOMEM, "out of memory ordering devices");
        goto out;
    }
    int k = alive_order(w, n, order), np = 0, have = 0, all = 0;
    for (int i = 0; i < k; i++)
        all += w[order[i]].ndevices;
    /* whole workers first, then the first devices of the next one (as
     * jax.make_mesh takes the first N devices) */
    for (np = 0; np < k && have < total; np++) {
        const sm_worker_info *x = &w[order[np]];
        ndev[np] = x->ndevices < total - have ? x->ndevices : (int)(total - have);
        for (int d = 0; d < ndev[np] && have + d < SM_MAX_DEVICES; d++)
            devs[have + d] = x->devices[d];
        have += ndev[np];
    }
    if (have != total) {
        /* short because workers are lost: the job waits for them */
        char lost[256] = "";
        size_t used = 0;
        int nlost = 0;
        for (int i = 0; i < n; i++)
            for (int d = 0; !w[i].alive && d < w[i].ndevices && used < sizeof lost - 16; d++) {
                used += (size_t)snprintf(lost + used, sizeof lost - used, "%s%d", nlost ? "," : "",
                                         (int)w[i].devices[d]);
                nlost++;
            }
        if (all + nlost >= total)
            e = sm_fail(err, errlen, SM_EUNAVAILABLE,
                        "the program's mesh has %lld devices and names none, but the %d alive "
                        "workers have only %d devices in all: devices %s are on lost workers, "
                        "and the job can run when they are back",
                        (long long)total, k, all, lost);
        else
            e = sm_fail(err, errlen, SM_EINVAL,
                        "the program's mesh has %lld devices and names none, but the %d alive "
                        "workers have only %d devices in all",
                        (long long)total, k, all);
        goto out;
    }
    e = sm_mesh_default_devices(m->naxes, m->sizes, np, ndev, devs, m->devices, err, errlen);
    if (!e)
        m->ndevices = (int)total;
out:
    free(order);
    free(ndev);
    free(devs);
    return e;
}

sm_err sm_cjobs_peers(const sm_mesh *m, const sm_worker_info *w, int n, sm_svc_peer **peers,
                      uint32_t **wids, int *npeers, char *err, size_t errlen)
{
    *peers = NULL;
    *wids = NULL;
    *npeers = 0;
    int *order = malloc((size_t)(n > 0 ? n : 1) * sizeof *order);
    int *used = calloc((size_t)(n > 0 ? n : 1), sizeof *used);
    sm_svc_peer *pl = calloc((size_t)(n > 0 ? n : 1), sizeof *pl);
    uint32_t *ids = calloc((size_t)(n > 0 ? n : 1), sizeof *ids);
    sm_err e = SM_OK;
    if (!order || !used || !pl || !ids) {
        e = sm_fail(err, errlen, SM_ENOMEM, "out of memory listing the job's workers");
        goto fail;
    }
    for (int pos = 0; pos < m->ndevices; pos++) {
        int32_t dev = m->devices[pos];
        int owner = -1;
        for (int i = 0; i < n && owner < 0; i++)
            for (int d = 0; d < w[i].ndevices; d++)
                if (w[i].devices[d] == dev && (owner < 0 || w[i].alive))
                    owner = i;
        if (owner < 0) {
            e = sm_fail(err, errlen, SM_EINVAL,
                        "mesh position %d names device %d, which no worker has", pos, (int)dev);
            goto fail;
        }
        if (!w[owner].alive) {
            e = sm_fail(err, errlen, SM_EUNAVAILABLE,
                        "device %d of the job's mesh is on worker %u at %s, which is lost",
                        (int)dev, w[owner].id.v, w[owner].address);
            goto fail;
        }
        used[owner] = 1;
    }
    int k = 0, np = 0;
    for (int i = 0; i < n; i++)
        if (used[i])
            order[k++] = i;
    by_process_index(w, order, k);
    for (int i = 0; i < k; i++) {
        const sm_worker_info *x = &w[order[i]];
        sm_svc_peer *p = &pl[np];
        snprintf(p->address, sizeof p->address, "%s", x->address);
        for (int d = 0; d < x->ndevices; d++)
            if (sm_mesh_find_device(m, x->devices[d]) >= 0)
                p->devices[p->ndevices++] = x->devices[d];
        ids[np++] = x->id.v;
    }
    free(order);
    free(used);
    *peers = pl;
    *wids = ids;
    *npeers = np;
    return SM_OK;
fail:
    free(order);
    free(used);
    free(pl);
    free(ids);
    return e;
}
