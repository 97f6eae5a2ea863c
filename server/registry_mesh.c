/* registry_mesh: meshes — default device order, explicit orders, lookup,
 * and the resolution of a sharding reference to a mesh. See registry.h. */
#include "registry_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sm_log.h"

/* ---- meshes --------------------------------------------------------------- */

sm_reg_mesh *sm_reg_mesh_find(sm_registry *r, uint64_t id, const char *name)
{
    for (int i = 0; i < r->nmeshes; i++) {
        sm_reg_mesh *m = r->meshes[i];
        /* by id: what the caller's tenant sees; by name: its own names */
        if (id ? m->id == id && sm_tenant_sees(m->tenant)
               : (name && *name && !strcmp(m->name, name) &&
                  !strcmp(m->tenant, sm_tenant_current())))
            return m;
    }
    return NULL;
}

/* The default device order for the sizes of m (see
 * sm_registry_mesh_create), into m->devices. */
static sm_err sm_reg_mesh_default(sm_registry *r, sm_mesh *m, char *err, size_t errlen)
{
    int64_t total = 1;
    for (int a = 0; a < m->naxes; a++)
        total *= m->sizes[a] > 0 ? m->sizes[a] : 1;
    sm_reg_worker *order[SM_MAX_DEVICES];
    int n = 0;
    for (int i = 0; i < r->nworkers && n < SM_MAX_DEVICES; i++)
        if (r->workers[i]->alive)
            order[n++] = r->workers[i];
    for (int i = 1; i < n; i++) /* insertion sort by process index */
        for (int k = i; k > 0 && order[k - 1]->process_index > order[k]->process_index; k--) {
            sm_reg_worker *t = order[k];
            order[k] = order[k - 1];
            order[k - 1] = t;
        }
    static const int zero = 0;
    int ndev[SM_MAX_DEVICES];
    int32_t devs[SM_MAX_DEVICES];
    int np = 0, have = 0, all = 0;
    for (int i = 0; i < n; i++)
        all += order[i]->ndevices;
    /* whole workers first, then the first devices of the next one (as
     * jax.make_mesh takes the first N devices) */
    for (np = 0; np < n && have < total; np++) {
        ndev[np] = order[np]->ndevices < total - have ? order[np]->ndevices : (int)(total - have);
        for (int k = 0; k < ndev[np] && have + k < SM_MAX_DEVICES; k++)
            devs[have + k] = order[np]->first_device + k;
        have += ndev[np];
    }
    if (have != total)
        return sm_fail(err, errlen, SM_EINVAL,
                       "a mesh of %lld devices needs that many devices, but the %d alive workers "
                       "have %d in all",
                       (long long)total, n, all);
    return sm_mesh_default_devices(m->naxes, m->sizes, np, np ? ndev : &zero, devs, m->devices, err,
                                   errlen);
}

/* Builds and checks the mesh to register (see sm_registry_mesh_create). */
static sm_err sm_reg_mesh_build(sm_registry *r, const sm_mesh *in, int default_order, sm_mesh *m,
                                char *err, size_t errlen)
{
    const char *names[SM_MAX_AXES];
    sm_mesh tmp = *in;
    sm_err rc;
    if (in->naxes < 1 || in->naxes > SM_MAX_AXES)
        return sm_fail(err, errlen, SM_EINVAL, "a mesh needs 1 to %d axes, not %d", SM_MAX_AXES,
                       in->naxes);
    for (int a = 0; a < in->naxes; a++)
        names[a] = in->names[a];
    if (default_order || in->ndevices == 0) {
        rc = sm_mesh_init(&tmp, in->naxes, names, in->sizes, NULL, 0, err, errlen);
        if (rc)
            return rc;
        rc = sm_reg_mesh_default(r, &tmp, err, errlen);
        if (rc)
            return rc;
    }
    rc = sm_mesh_init(m, in->naxes, names, in->sizes, tmp.devices, tmp.ndevices, err, errlen);
    if (rc || (rc = sm_mesh_types_check(m, in->auto_axes, "the mesh's axis types", err, errlen)))
        return rc;
    m->auto_axes = in->auto_axes;
    for (int i = 0; i < m->ndevices; i++)
        if (!sm_reg_worker_of_device(r, m->devices[i]))
            return sm_fail(err, errlen, SM_EINVAL,
                           "mesh position %d names device %d, which no worker has (devices are "
                           "0..%d)",
                           i, (int)m->devices[i], (int)r->next_device - 1);
    return SM_OK;
}

static void sm_reg_mesh_info(const sm_reg_mesh *m, sm_mesh_info *out)
{
    memset(out, 0, sizeof *out);
    out->id.v = m->id;
    snprintf(out->name, sizeof out->name, "%s", m->name);
    out->mesh = m->mesh;
}

static int sm_reg_mesh_same(const sm_mesh *a, const sm_mesh *b)
{
    if (a->naxes != b->naxes || a->ndevices != b->ndevices || a->auto_axes != b->auto_axes)
        return 0;
    for (int k = 0; k < a->naxes; k++)
        if (strcmp(a->names[k], b->names[k]) || a->sizes[k] != b->sizes[k])
            return 0;
    return !memcmp(a->devices, b->devices, sizeof a->devices[0] * (size_t)a->ndevices);
}

/* Registers m under name (may be ""); *out is the new record. */
static sm_err sm_reg_mesh_add(sm_registry *r, const char *name, const sm_mesh *m, sm_reg_mesh **out,
                              char *err, size_t errlen)
{
    sm_reg_mesh *rm = calloc(1, sizeof *rm);
    if (!rm || sm_reg_vec_push((void ***)&r->meshes, &r->nmeshes, &r->capmeshes, rm)) {
        free(rm);
        return sm_fail(err, errlen, SM_ENOMEM, "out of memory creating a mesh");
    }
    rm->id = r->next_mesh++;
    snprintf(rm->name, sizeof rm->name, "%s", name);
    snprintf(rm->tenant, sizeof rm->tenant, "%s", sm_tenant_current());
    rm->mesh = *m;
    sm_reg_save_mesh(r, rm);
    *out = rm;
    return SM_OK;
}

sm_err sm_registry_mesh_create(sm_registry *r, const char *name, const sm_mesh *mesh,
                               int default_order, sm_mesh_info *out, char *err, size_t errlen)
{
    sm_err rc;
    sm_mesh m;
    sm_reg_mesh *rm = NULL;
    char buf[256];
    name = name ? name : "";
    pthread_mutex_lock(&r->mu);
    if (*name) {
        rc = sm_reg_name_check("mesh", name, 64, err, errlen);
        if (rc)
            goto out;
        if (sm_reg_mesh_find(r, 0, name)) {
            rc = sm_fail(err, errlen, SM_EEXIST, "a mesh named '%s' already exists", name);
            goto out;
        }
    }
    rc = sm_reg_mesh_build(r, mesh, default_order, &m, err, errlen);
    if (rc)
        goto out;
    rc = sm_reg_mesh_add(r, name, &m, &rm, err, errlen);
    if (rc)
        goto out;
    sm_reg_mesh_info(rm, out);
    SM_INFO("mesh %llu%s%s created: %s", (unsigned long long)rm->id, *name ? " " : "", name,
            sm_mesh_format(&m, buf, sizeof buf));
out:
    pthread_mutex_unlock(&r->mu);
    return rc;
}

sm_err sm_registry_mesh_get(sm_registry *r, sm_mesh_id id, const char *name, sm_mesh_info *out,
                            char *err, size_t errlen)
{
    sm_err rc = SM_OK;
    pthread_mutex_lock(&r->mu);
    sm_reg_mesh *m = sm_reg_mesh_find(r, id.v, name);
    if (m)
        sm_reg_mesh_info(m, out);
    else if (id.v)
        rc = sm_fail(err, errlen, SM_ENOTFOUND, "mesh %llu does not exist",
                     (unsigned long long)id.v);
    else
        rc = sm_fail(err, errlen, SM_ENOTFOUND, "mesh '%s' does not exist", name ? name : "");
    pthread_mutex_unlock(&r->mu);
    return rc;
}

sm_err sm_registry_mesh_list(sm_registry *r, sm_mesh_info **out, int *n, char *err, size_t errlen)
{
    sm_err rc = SM_OK;
    pthread_mutex_lock(&r->mu);
    *n = 0;
    *out = calloc(r->nmeshes ? (size_t)r->nmeshes : 1, sizeof **out);
    if (!*out) {
        rc = sm_fail(err, errlen, SM_ENOMEM, "out of memory listing meshes");
    } else {
        for (int i = 0; i < r->nmeshes; i++)
            if (sm_tenant_sees(r->meshes[i]->tenant))
                sm_reg_mesh_info(r->meshes[i], &(*out)[(*n)++]);
    }
    pthread_mutex_unlock(&r->mu);
    return rc;
}

sm_err sm_reg_sharding_resolve(sm_registry *r, const sm_sharding_ref *ref, sm_sharding *out,
                               sm_reg_mesh **mesh, char *err, size_t errlen)
{
    sm_err rc;
    sm_reg_mesh *rm = NULL;
    if (ref->mesh) {
        sm_mesh m;
        rc = sm_reg_mesh_build(r, ref->mesh, ref->default_order, &m, err, errlen);
        if (rc)
            return rc;
        for (int i = 0; i < r->nmeshes && !rm; i++)
            if (sm_reg_mesh_same(&r->meshes[i]->mesh, &m) &&
                !strcmp(r->meshes[i]->tenant, sm_tenant_current()))
                rm = r->meshes[i];
        if (!rm) {
            rc = sm_reg_mesh_add(r, "", &m, &rm, err, errlen);
            if (rc)
                return rc;
        }
    } else if (ref->mesh_id.v || (ref->mesh_name && *ref->mesh_name)) {
        rm = sm_reg_mesh_find(r, ref->mesh_id.v, ref->mesh_name);
        if (!rm && ref->mesh_id.v)
            return sm_fail(err, errlen, SM_ENOTFOUND, "mesh %llu does not exist",
                           (unsigned long long)ref->mesh_id.v);
        if (!rm)
            return sm_fail(err, errlen, SM_ENOTFOUND, "mesh '%s' does not exist", ref->mesh_name);
    } else {
        return sm_fail(err, errlen, SM_EINVAL, "the sharding names no mesh");
    }
    out->mesh = rm->mesh;
    out->spec = ref->spec;
    *mesh = rm;
    return sm_pspec_check_mesh(&out->spec, &out->mesh, err, errlen);
}

sm_err sm_reg_mesh_workers(sm_registry *r, const sm_mesh *m, uint32_t *worker, char *err,
                           size_t errlen)
{
    for (int p = 0; p < m->ndevices; p++) {
        sm_reg_worker *w = sm_reg_worker_of_device(r, m->devices[p]);
        if (!w)
            return sm_fail(err, errlen, SM_EINVAL, "device %d does not exist", (int)m->devices[p]);
        if (!w->alive)
            return sm_fail(err, errlen, SM_EUNAVAILABLE,
                           "device %d is on worker %u at %s, which is lost", (int)m->devices[p],
                           w->id, w->address);
        worker[p] = w->id;
    }
    return SM_OK;
}
