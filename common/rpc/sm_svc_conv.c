/* sm_svc_conv: every conversion between shmap.v1 messages and shmap's core
 * types (contract in sm_svc_internal.h). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sm_svc_internal.h"

/* ---- encoders ---------------------------------------------------------------- */

Shmap__V1__DType sm_svc_dtype_enc(sm_dtype t)
{
    return (Shmap__V1__DType)((int)t + 1);
}

Shmap__V1__Shape *sm_svc_shape_enc(sm_arena *a, const sm_shape *s)
{
    Shmap__V1__Shape *p = SM_SVC_NEW(a, Shmap__V1__Shape, shmap__v1__shape__init);
    if (!p)
        return NULL;
    p->n_dims = sm_svc_rank(s->rank);
    p->dims = (int64_t *)s->dims;
    return p;
}

Shmap__V1__Box *sm_svc_box_enc(sm_arena *a, const sm_index *ix)
{
    Shmap__V1__Box *p = SM_SVC_NEW(a, Shmap__V1__Box, shmap__v1__box__init);
    int64_t *v = sm_arena_alloc(a, 2 * SM_MAX_RANK * sizeof *v);
    if (!p || !v)
        return NULL;
    p->n_start = p->n_stop = sm_svc_rank(ix->rank);
    p->start = v;
    p->stop = v + SM_MAX_RANK;
    for (size_t d = 0; d < p->n_start; d++) {
        p->start[d] = ix->r[d].start;
        p->stop[d] = ix->r[d].stop;
    }
    return p;
}

Shmap__V1__Mesh *sm_svc_mesh_enc(sm_arena *a, uint64_t id, const char *name, const sm_mesh *m,
                                 int with_devices)
{
    Shmap__V1__Mesh *p = SM_SVC_NEW(a, Shmap__V1__Mesh, shmap__v1__mesh__init);
    if (!p)
        return NULL;
    p->id = id;
    p->name = (char *)(name ? name : "");
    if (!m)
        return p;
    p->axis_names = sm_arena_alloc(a, SM_MAX_AXES * sizeof *p->axis_names);
    if (!p->axis_names)
        return NULL;
    p->n_axis_names = p->n_axis_sizes = sm_svc_rank(m->naxes);
    for (size_t i = 0; i < p->n_axis_names; i++)
        p->axis_names[i] = (char *)m->names[i];
    p->axis_sizes = (int64_t *)m->sizes;
    p->auto_axes = m->auto_axes;
    if (with_devices) {
        p->n_devices = m->ndevices < 0                ? 0
                       : m->ndevices > SM_MAX_DEVICES ? SM_MAX_DEVICES
                                                      : (size_t)m->ndevices;
        p->devices = (int32_t *)m->devices;
    }
    return p;
}

/* A spec's set of axis names (unreduced=, reduced=) as a repeated string
 * field (pointing into names); -1 when out of memory. */
static int sm_svc_axis_set_enc(sm_arena *a, const char (*names)[SM_AXIS_NAME_MAX], int n,
                               char ***out, size_t *nout)
{
    if (n <= 0)
        return 0;
    *nout = sm_svc_rank(n < SM_MAX_AXES ? n : SM_MAX_AXES);
    if (!(*out = sm_arena_alloc(a, SM_MAX_AXES * sizeof **out)))
        return -1;
    for (size_t k = 0; k < *nout; k++)
        (*out)[k] = (char *)names[k];
    return 0;
}

Shmap__V1__PartitionSpec *sm_svc_pspec_enc(sm_arena *a, const sm_pspec *sp)
{
    Shmap__V1__PartitionSpec *p =
        SM_SVC_NEW(a, Shmap__V1__PartitionSpec, shmap__v1__partition_spec__init);
    if (!p)
        return NULL;
    p->n_entries = sm_svc_rank(sp->nentries);
    p->entries = sm_arena_alloc(a, SM_MAX_RANK * sizeof *p->entries);
    if (!p->entries)
        return NULL;
    for (size_t i = 0; i < p->n_entries; i++) {
        const sm_pspec_entry *e = &sp->e[i];
        Shmap__V1__SpecEntry *q = SM_SVC_NEW(a, Shmap__V1__SpecEntry, shmap__v1__spec_entry__init);
        char **axes = sm_arena_alloc(a, SM_MAX_AXES * sizeof *axes);
        if (!q || !axes)
            return NULL;
        q->n_axes = sm_svc_rank(e->naxes);
        q->axes = axes;
        for (size_t k = 0; k < q->n_axes; k++)
            axes[k] = (char *)e->axes[k];
        q->is_tuple = e->is_tuple != 0;
        q->unconstrained = e->unconstrained != 0;
        p->entries[i] = q;
    }
    if (sm_svc_axis_set_enc(a, sp->unreduced, sp->nunreduced, &p->unreduced, &p->n_unreduced) ||
        sm_svc_axis_set_enc(a, sp->reduced, sp->nreduced, &p->reduced, &p->n_reduced))
        return NULL;
    p->unreduced_kind = (uint32_t)(sp->unreduced_kind > 0 ? sp->unreduced_kind : 0);
    return p;
}

Shmap__V1__Sharding *sm_svc_sharding_ref_enc(sm_arena *a, const sm_sharding_ref *r)
{
    Shmap__V1__Sharding *p = SM_SVC_NEW(a, Shmap__V1__Sharding, shmap__v1__sharding__init);
    if (!p)
        return NULL;
    p->mesh = sm_svc_mesh_enc(a, r->mesh_id.v, r->mesh_name, r->mesh, !r->default_order);
    p->spec = sm_svc_pspec_enc(a, &r->spec);
    return p->mesh && p->spec ? p : NULL;
}

void sm_svc_array_ref_fill(sm_array_ref r, Shmap__V1__ArrayRef *p)
{
    shmap__v1__array_ref__init(p);
    p->id = r.id.v;
    p->name = (char *)(r.name ? r.name : "");
}

Shmap__V1__ArrayRef *sm_svc_array_ref_enc(sm_arena *a, sm_array_ref r)
{
    Shmap__V1__ArrayRef *p = sm_arena_alloc(a, sizeof *p);
    if (p)
        sm_svc_array_ref_fill(r, p);
    return p;
}

static Shmap__V1__ShardInfo *shard_info_enc(sm_arena *a, const sm_shard_info *s, int naxes)
{
    Shmap__V1__ShardInfo *p = SM_SVC_NEW(a, Shmap__V1__ShardInfo, shmap__v1__shard_info__init);
    if (!p)
        return NULL;
    p->device = s->device;
    p->worker_id = s->worker_id.v;
    p->worker_address = (char *)s->worker_address;
    p->n_coords = sm_svc_rank(naxes);
    p->coords = (int64_t *)s->coords;
    p->index = sm_svc_box_enc(a, &s->index);
    p->replica_id = s->replica_id;
    p->present = s->present != 0;
    p->spilled = s->spilled != 0;
    p->stored_as = s->stored_as;
    p->grant.len = s->grant_len > 0 ? (size_t)s->grant_len : 0;
    p->grant.data = (uint8_t *)s->grant;
    return p->index ? p : NULL;
}

/* The n entries of in encoded into *out, *nout of them; -1 out of memory. */
static int shard_infos_enc(sm_arena *a, const sm_shard_info *in, int n, int naxes,
                           Shmap__V1__ShardInfo ***out, size_t *nout)
{
    if (n <= 0)
        return 0;
    if (!(*out = sm_arena_alloc(a, (size_t)n * sizeof **out)))
        return -1;
    *nout = (size_t)n;
    for (int i = 0; i < n; i++)
        if (!((*out)[i] = shard_info_enc(a, &in[i], naxes)))
            return -1;
    return 0;
}

Shmap__V1__ArrayInfo *sm_svc_array_info_enc(sm_arena *a, const sm_array_info *in)
{
    Shmap__V1__ArrayInfo *p = SM_SVC_NEW(a, Shmap__V1__ArrayInfo, shmap__v1__array_info__init);
    Shmap__V1__Sharding *sh = SM_SVC_NEW(a, Shmap__V1__Sharding, shmap__v1__sharding__init);
    if (!p || !sh)
        return NULL;
    p->id = in->id.v;
    p->name = (char *)in->name;
    p->dtype = sm_svc_dtype_enc(in->dtype);
    p->shape = sm_svc_shape_enc(a, &in->shape);
    p->shard_shape = sm_svc_shape_enc(a, &in->shard_shape);
    sh->mesh = sm_svc_mesh_enc(a, in->mesh_id.v, in->mesh_name, &in->sharding.mesh, 1);
    sh->spec = sm_svc_pspec_enc(a, &in->sharding.spec);
    p->sharding = sh;
    p->type = (char *)in->type;
    p->state = (Shmap__V1__ArrayState)in->state;
    p->error = (char *)in->error;
    p->bytes = in->bytes;
    if (!p->shape || !p->shard_shape || !sh->mesh || !sh->spec)
        return NULL;
    int naxes = in->sharding.mesh.naxes;
    if (shard_infos_enc(a, in->shards, in->nshards, naxes, &p->shards, &p->n_shards) ||
        shard_infos_enc(a, in->copies, in->ncopies, naxes, &p->copies, &p->n_copies))
        return NULL;
    return p;
}

Shmap__V1__WorkerInfo *sm_svc_worker_info_enc(sm_arena *a, const sm_worker_info *w)
{
    Shmap__V1__WorkerInfo *p = SM_SVC_NEW(a, Shmap__V1__WorkerInfo, shmap__v1__worker_info__init);
    if (!p)
        return NULL;
    int n = w->ndevices < 0                       ? 0
            : w->ndevices > SM_MAX_WORKER_DEVICES ? SM_MAX_WORKER_DEVICES
                                                  : w->ndevices;
    p->id = w->id.v;
    p->address = (char *)w->address;
    p->host = (char *)w->host;
    p->process_index = w->process_index;
    p->n_devices = p->n_device_bytes = (size_t)n;
    p->devices = (int32_t *)w->devices;
    p->device_bytes = (int64_t *)w->device_bytes;
    p->state =
        w->alive ? SHMAP__V1__WORKER_STATE__WORKER_ALIVE : SHMAP__V1__WORKER_STATE__WORKER_LOST;
    p->ms_since_heartbeat = w->ms_since_heartbeat;
    p->n_shm_peers = w->nshm_peers < 0                  ? 0
                     : w->nshm_peers > SM_MAX_SHM_PEERS ? SM_MAX_SHM_PEERS
                                                        : (size_t)w->nshm_peers;
    if (!(p->shm_peers =
              sm_arena_alloc(a, (p->n_shm_peers ? p->n_shm_peers : 1) * sizeof *p->shm_peers)))
        return NULL;
    for (size_t k = 0; k < p->n_shm_peers; k++)
        p->shm_peers[k] = w->shm_peers[k].v;
    return p;
}

Shmap__V1__UploadTarget *sm_svc_target_enc(sm_arena *a, const sm_svc_upload_target *t)
{
    Shmap__V1__UploadTarget *p =
        SM_SVC_NEW(a, Shmap__V1__UploadTarget, shmap__v1__upload_target__init);
    if (!p)
        return NULL;
    p->n_devices = t->ndevices > 0 ? (size_t)t->ndevices : 0;
    p->devices = t->devices;
    p->global_index = sm_svc_box_enc(a, &t->global_index);
    p->local_slice = sm_svc_box_enc(a, &t->local_slice);
    return p->global_index && p->local_slice ? p : NULL;
}

/* ---- decoders ---------------------------------------------------------------- */

sm_err sm_svc_count_dec(size_t n, size_t max, const char *what, const char *unit, char *err,
                        size_t errlen)
{
    if (n > max)
        return sm_fail(err, errlen, SM_EINVAL, "%s has %zu %s; at most %zu are allowed", what, n,
                       unit, max);
    return SM_OK;
}

sm_err sm_svc_str_dec(const char *s, size_t cap, const char *what, char *buf, char *err,
                      size_t errlen)
{
    size_t n = s ? strlen(s) : 0;
    if (n >= cap)
        return sm_fail(err, errlen, SM_EINVAL, "%s is %zu bytes long; at most %zu are allowed",
                       what, n, cap - 1);
    if (buf) {
        if (n)
            memcpy(buf, s, n);
        buf[n] = 0;
    }
    return SM_OK;
}

sm_err sm_svc_dtype_dec(int v, const char *what, sm_dtype *out, char *err, size_t errlen)
{
    if (v < 1 || v > SM_DTYPE_COUNT)
        return sm_fail(err, errlen, SM_EINVAL, "%s is %d, which is not a known dtype (1 to %d)",
                       what, v, SM_DTYPE_COUNT);
    *out = (sm_dtype)(v - 1);
    return SM_OK;
}

sm_err sm_svc_shape_dec(const Shmap__V1__Shape *p, const char *what, sm_shape *out, char *err,
                        size_t errlen)
{
    memset(out, 0, sizeof *out);
    if (!p)
        return SM_OK;
    sm_err e = sm_svc_count_dec(p->n_dims, SM_MAX_RANK, what, "dimensions", err, errlen);
    if (e)
        return e;
    for (size_t d = 0; d < p->n_dims; d++) {
        if (p->dims[d] < 0)
            return sm_fail(err, errlen, SM_EINVAL,
                           "%s has dimension %zu of size %" PRId64 "; sizes must be >= 0", what, d,
                           p->dims[d]);
        out->dims[d] = p->dims[d];
    }
    out->rank = (int)p->n_dims;
    return SM_OK;
}

sm_err sm_svc_box_dec(const Shmap__V1__Box *p, const char *what, sm_index *out, char *err,
                      size_t errlen)
{
    memset(out, 0, sizeof *out);
    if (!p)
        return SM_OK;
    if (p->n_start != p->n_stop)
        return sm_fail(err, errlen, SM_EINVAL,
                       "%s has %zu start and %zu stop values; one of each per dimension", what,
                       p->n_start, p->n_stop);
    sm_err e = sm_svc_count_dec(p->n_start, SM_MAX_RANK, what, "dimensions", err, errlen);
    if (e)
        return e;
    for (size_t d = 0; d < p->n_start; d++) {
        if (p->start[d] < 0 || p->start[d] > p->stop[d])
            return sm_fail(err, errlen, SM_EINVAL,
                           "%s has the range [%" PRId64 ", %" PRId64 ") at dimension %zu; need 0 "
                           "<= start <= stop",
                           what, p->start[d], p->stop[d], d);
        out->r[d].start = p->start[d];
        out->r[d].stop = p->stop[d];
    }
    out->rank = (int)p->n_start;
    return SM_OK;
}

int sm_svc_mesh_is_ref(const Shmap__V1__Mesh *p)
{
    return p->n_axis_names == 0 && p->n_axis_sizes == 0 && p->n_devices == 0;
}

sm_err sm_svc_mesh_dec(const Shmap__V1__Mesh *p, const char *what, sm_mesh *out, int *default_order,
                       char *name, char *err, size_t errlen)
{
    char sub[160];
    sm_err e;
    if (!p)
        return sm_fail(err, errlen, SM_EINVAL, "%s is missing", what);
    snprintf(sub, sizeof sub, "%s.name", what);
    if ((e = sm_svc_str_dec(p->name, SM_SVC_MESH_NAME_MAX, sub, name, err, errlen)))
        return e;
    if (p->n_axis_names != p->n_axis_sizes)
        return sm_fail(err, errlen, SM_EINVAL, "%s has %zu axis names but %zu axis sizes", what,
                       p->n_axis_names, p->n_axis_sizes);
    if ((e = sm_svc_count_dec(p->n_axis_names, SM_MAX_AXES, what, "axes", err, errlen)) ||
        (e = sm_svc_count_dec(p->n_devices, SM_MAX_DEVICES, what, "devices", err, errlen)))
        return e;
    const char *names[SM_MAX_AXES];
    for (size_t i = 0; i < p->n_axis_names; i++) {
        snprintf(sub, sizeof sub, "%s.axis_names[%zu]", what, i);
        if ((e = sm_svc_str_dec(p->axis_names[i], SM_AXIS_NAME_MAX, sub, NULL, err, errlen)))
            return e;
        names[i] = p->axis_names[i];
    }
    char tmp[SM_SVC_ERRLEN];
    e = sm_mesh_init(out, (int)p->n_axis_names, names, p->axis_sizes,
                     p->n_devices ? p->devices : NULL, (int)p->n_devices, tmp, sizeof tmp);
    if (e)
        return sm_fail(err, errlen, e, "%s: %s", what, tmp);
    snprintf(sub, sizeof sub, "%s.auto_axes", what);
    if ((e = sm_mesh_types_check(out, p->auto_axes, sub, err, errlen)))
        return e;
    out->auto_axes = p->auto_axes;
    if (default_order)
        *default_order = p->n_devices == 0;
    return SM_OK;
}

sm_err sm_svc_mesh_info_dec(const Shmap__V1__Mesh *p, const char *what, sm_mesh_info *out,
                            char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    sm_err e = sm_svc_mesh_dec(p, what, &out->mesh, NULL, out->name, err, errlen);
    if (e)
        return e;
    out->id.v = p->id;
    return SM_OK;
}

/* A spec's set of axis names (unreduced=, reduced=: field) into names. */
static sm_err sm_svc_axis_set_dec(char **in, size_t n, const char *what, const char *field,
                                  char (*names)[SM_AXIS_NAME_MAX], int *count, char *err,
                                  size_t errlen)
{
    char unit[32], sub[300];
    sm_err e;
    snprintf(unit, sizeof unit, "%s axes", field);
    if ((e = sm_svc_count_dec(n, SM_MAX_AXES, what, unit, err, errlen)))
        return e;
    for (size_t k = 0; k < n; k++) {
        snprintf(sub, sizeof sub, "%s.%s[%zu]", what, field, k);
        if (!in[k] || !in[k][0])
            return sm_fail(err, errlen, SM_EINVAL, "%s is an empty axis name", sub);
        if ((e = sm_svc_str_dec(in[k], SM_AXIS_NAME_MAX, sub, names[k], err, errlen)))
            return e;
    }
    *count = (int)n;
    return SM_OK;
}

sm_err sm_svc_pspec_dec(const Shmap__V1__PartitionSpec *p, const char *what, sm_pspec *out,
                        char *err, size_t errlen)
{
    char sub[160];
    sm_err e;
    memset(out, 0, sizeof *out);
    if (!p)
        return SM_OK;
    if ((e = sm_svc_count_dec(p->n_entries, SM_MAX_RANK, what, "entries", err, errlen)))
        return e;
    for (size_t i = 0; i < p->n_entries; i++) {
        const Shmap__V1__SpecEntry *q = p->entries[i];
        snprintf(sub, sizeof sub, "%s.entries[%zu]", what, i);
        if ((e = sm_svc_count_dec(q->n_axes, SM_MAX_AXES, sub, "axes", err, errlen)))
            return e;
        for (size_t k = 0; k < q->n_axes; k++) {
            snprintf(sub, sizeof sub, "%s.entries[%zu].axes[%zu]", what, i, k);
            if (!q->axes[k] || !q->axes[k][0])
                return sm_fail(err, errlen, SM_EINVAL, "%s is an empty axis name", sub);
            if ((e = sm_svc_str_dec(q->axes[k], SM_AXIS_NAME_MAX, sub, out->e[i].axes[k], err,
                                    errlen)))
                return e;
        }
        out->e[i].naxes = (int)q->n_axes;
        out->e[i].is_tuple = q->is_tuple != 0;
        out->e[i].unconstrained = q->unconstrained != 0;
        if (out->e[i].unconstrained && q->n_axes)
            return sm_fail(err, errlen, SM_EINVAL,
                           "%s.entries[%zu] is unconstrained and names axes", what, i);
    }
    out->nentries = (int)p->n_entries;
    if ((e = sm_svc_axis_set_dec(p->unreduced, p->n_unreduced, what, "unreduced", out->unreduced,
                                 &out->nunreduced, err, errlen)) ||
        (e = sm_svc_axis_set_dec(p->reduced, p->n_reduced, what, "reduced", out->reduced,
                                 &out->nreduced, err, errlen)))
        return e;
    if (p->unreduced_kind > SM_UK_MIN)
        return sm_fail(err, errlen, SM_EINVAL, "%s.unreduced_kind is %u (0 sum, 1 max, 2 min)",
                       what, p->unreduced_kind);
    out->unreduced_kind = (int)p->unreduced_kind;
    return SM_OK;
}

sm_err sm_svc_sharding_ref_dec(const Shmap__V1__Sharding *p, const char *what, sm_mesh *mesh,
                               sm_sharding_ref *out, char *err, size_t errlen)
{
    char sub[160];
    sm_err e;
    memset(out, 0, sizeof *out);
    snprintf(sub, sizeof sub, "%s.mesh", what);
    if (!p || !p->mesh)
        return sm_fail(err, errlen, SM_EINVAL, "%s is missing", sub);
    const Shmap__V1__Mesh *m = p->mesh;
    if (sm_svc_mesh_is_ref(m)) {
        char subn[170];
        snprintf(subn, sizeof subn, "%s.name", sub);
        if ((e = sm_svc_str_dec(m->name, SM_SVC_MESH_NAME_MAX, subn, NULL, err, errlen)))
            return e;
        if (!m->id && !(m->name && m->name[0]))
            return sm_fail(err, errlen, SM_EINVAL,
                           "%s names no mesh: give axes inline, or an id or name", sub);
    } else {
        if ((e = sm_svc_mesh_dec(m, sub, mesh, &out->default_order, NULL, err, errlen)))
            return e;
        out->mesh = mesh;
    }
    out->mesh_id.v = m->id;
    out->mesh_name = m->name && m->name[0] ? m->name : NULL;
    snprintf(sub, sizeof sub, "%s.spec", what);
    return sm_svc_pspec_dec(p->spec, sub, &out->spec, err, errlen);
}

sm_err sm_svc_array_ref_dec(const Shmap__V1__ArrayRef *p, const char *what, sm_array_ref *out,
                            char *err, size_t errlen)
{
    char sub[160];
    out->id.v = p ? p->id : 0;
    out->name = p && p->name ? p->name : "";
    snprintf(sub, sizeof sub, "%s.name", what);
    return sm_svc_str_dec(out->name, SM_NAME_MAX, sub, NULL, err, errlen);
}

static sm_err shard_info_dec(const Shmap__V1__ShardInfo *p, const char *what, sm_shard_info *out,
                             char *err, size_t errlen)
{
    char sub[256];
    sm_err e;
    memset(out, 0, sizeof *out);
    out->device = p->device;
    out->worker_id.v = p->worker_id;
    out->replica_id = p->replica_id;
    out->present = p->present != 0;
    out->spilled = p->spilled != 0;
    out->stored_as = p->stored_as;
    if (p->grant.len > SM_SHARD_GRANT_MAX)
        return sm_fail(err, errlen, SM_EINVAL, "%s.grant has %zu bytes, more than a grant (%d)",
                       what, p->grant.len, SM_SHARD_GRANT_MAX);
    out->grant_len = (int)p->grant.len;
    sm_svc_copy(out->grant, p->grant.data, p->grant.len);
    snprintf(sub, sizeof sub, "%s.worker_address", what);
    if ((e = sm_svc_str_dec(p->worker_address, SM_ADDR_MAX, sub, out->worker_address, err, errlen)))
        return e;
    snprintf(sub, sizeof sub, "%s.coords", what);
    if ((e = sm_svc_count_dec(p->n_coords, SM_MAX_AXES, sub, "values", err, errlen)))
        return e;
    sm_svc_copy(out->coords, p->coords, p->n_coords * sizeof *p->coords);
    snprintf(sub, sizeof sub, "%s.index", what);
    return sm_svc_box_dec(p->index, sub, &out->index, err, errlen);
}

/* The n entries of list field what.field into *out (calloc), *nout of them;
 * on failure what was decoded stays for sm_array_info_free. */
static sm_err shard_infos_dec(Shmap__V1__ShardInfo *const *p, size_t n, const char *what,
                              const char *field, sm_shard_info **out, int *nout, char *err,
                              size_t errlen)
{
    char sub[160];
    snprintf(sub, sizeof sub, "%s.%s", what, field);
    sm_err e = sm_svc_count_dec(n, SM_MAX_DEVICES, sub, "entries", err, errlen);
    if (e)
        return e;
    if (n && !(*out = calloc(n, sizeof **out)))
        return sm_fail(err, errlen, SM_ENOMEM, "cannot allocate %zu shard infos", n);
    *nout = (int)n;
    for (size_t i = 0; i < n && !e; i++) {
        snprintf(sub, sizeof sub, "%s.%s[%zu]", what, field, i);
        e = shard_info_dec(p[i], sub, &(*out)[i], err, errlen);
    }
    return e;
}

sm_err sm_svc_array_info_dec(const Shmap__V1__ArrayInfo *p, const char *what, sm_array_info *out,
                             char *err, size_t errlen)
{
    char sub[160];
    sm_err e;
    memset(out, 0, sizeof *out);
    out->id.v = p->id;
    out->bytes = p->bytes;
    snprintf(out->type, sizeof out->type, "%s", p->type ? p->type : "");
    snprintf(out->error, sizeof out->error, "%s", p->error ? p->error : "");
    snprintf(sub, sizeof sub, "%s.name", what);
    if ((e = sm_svc_str_dec(p->name, SM_NAME_MAX, sub, out->name, err, errlen)))
        return e;
    snprintf(sub, sizeof sub, "%s.dtype", what);
    if ((e = sm_svc_dtype_dec(p->dtype, sub, &out->dtype, err, errlen)))
        return e;
    snprintf(sub, sizeof sub, "%s.shape", what);
    if ((e = sm_svc_shape_dec(p->shape, sub, &out->shape, err, errlen)))
        return e;
    snprintf(sub, sizeof sub, "%s.shard_shape", what);
    if ((e = sm_svc_shape_dec(p->shard_shape, sub, &out->shard_shape, err, errlen)))
        return e;
    if (p->state < SHMAP__V1__ARRAY_STATE__ARRAY_PENDING ||
        p->state > SHMAP__V1__ARRAY_STATE__ARRAY_DEGRADED)
        return sm_fail(err, errlen, SM_EINVAL, "%s.state is %d, which is not a known state", what,
                       (int)p->state);
    out->state = (sm_array_state)p->state;
    snprintf(sub, sizeof sub, "%s.sharding.mesh", what);
    if (!p->sharding)
        return sm_fail(err, errlen, SM_EINVAL, "%s is missing", sub);
    if ((e = sm_svc_mesh_dec(p->sharding->mesh, sub, &out->sharding.mesh, NULL, out->mesh_name, err,
                             errlen)))
        return e;
    out->mesh_id.v = p->sharding->mesh->id;
    snprintf(sub, sizeof sub, "%s.sharding.spec", what);
    if ((e = sm_svc_pspec_dec(p->sharding->spec, sub, &out->sharding.spec, err, errlen)))
        return e;
    if ((e = shard_infos_dec(p->shards, p->n_shards, what, "shards", &out->shards, &out->nshards,
                             err, errlen)) ||
        (e = shard_infos_dec(p->copies, p->n_copies, what, "copies", &out->copies, &out->ncopies,
                             err, errlen)))
        sm_array_info_free(out);
    return e;
}

sm_err sm_svc_worker_info_dec(const Shmap__V1__WorkerInfo *p, const char *what, sm_worker_info *out,
                              char *err, size_t errlen)
{
    char sub[160];
    sm_err e;
    memset(out, 0, sizeof *out);
    out->id.v = p->id;
    out->process_index = p->process_index;
    out->ms_since_heartbeat = p->ms_since_heartbeat;
    if ((e = sm_svc_count_dec(p->n_shm_peers, SM_MAX_SHM_PEERS, what, "shm_peers", err, errlen)))
        return e;
    out->nshm_peers = (int)p->n_shm_peers;
    for (size_t k = 0; k < p->n_shm_peers; k++)
        out->shm_peers[k].v = p->shm_peers[k];
    snprintf(out->host, sizeof out->host, "%s", p->host ? p->host : "");
    snprintf(sub, sizeof sub, "%s.address", what);
    if ((e = sm_svc_str_dec(p->address, SM_ADDR_MAX, sub, out->address, err, errlen)))
        return e;
    if (p->state != SHMAP__V1__WORKER_STATE__WORKER_ALIVE &&
        p->state != SHMAP__V1__WORKER_STATE__WORKER_LOST)
        return sm_fail(err, errlen, SM_EINVAL, "%s.state is %d, which is not a known state", what,
                       (int)p->state);
    out->alive = p->state == SHMAP__V1__WORKER_STATE__WORKER_ALIVE;
    if ((e = sm_svc_count_dec(p->n_devices, SM_MAX_WORKER_DEVICES, what, "devices", err, errlen)))
        return e;
    if (p->n_device_bytes && p->n_device_bytes != p->n_devices)
        return sm_fail(err, errlen, SM_EINVAL, "%s has %zu devices but %zu device_bytes", what,
                       p->n_devices, p->n_device_bytes);
    out->ndevices = (int)p->n_devices;
    sm_svc_copy(out->devices, p->devices, p->n_devices * sizeof *p->devices);
    sm_svc_copy(out->device_bytes, p->device_bytes, p->n_device_bytes * sizeof *p->device_bytes);
    return SM_OK;
}

sm_err sm_svc_target_dec(const Shmap__V1__UploadTarget *p, const char *what,
                         sm_svc_upload_target *out, char *err, size_t errlen)
{
    char sub[160];
    sm_err e;
    memset(out, 0, sizeof *out);
    if ((e = sm_svc_count_dec(p->n_devices, SM_MAX_DEVICES, what, "devices", err, errlen)))
        return e;
    snprintf(sub, sizeof sub, "%s.global_index", what);
    if ((e = sm_svc_box_dec(p->global_index, sub, &out->global_index, err, errlen)))
        return e;
    snprintf(sub, sizeof sub, "%s.local_slice", what);
    if ((e = sm_svc_box_dec(p->local_slice, sub, &out->local_slice, err, errlen)))
        return e;
    if (p->n_devices) {
        out->devices = malloc(p->n_devices * sizeof *out->devices);
        if (!out->devices)
            return sm_fail(err, errlen, SM_ENOMEM, "cannot allocate %zu device ids", p->n_devices);
        sm_svc_copy(out->devices, p->devices, p->n_devices * sizeof *p->devices);
    }
    out->ndevices = (int)p->n_devices;
    return SM_OK;
}
