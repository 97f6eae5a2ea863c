/* sm_sharding: NamedSharding index maps, replica ids and type strings (see
 * sm_sharding.h). The diagram is in sm_diagram.c, process-local planning in
 * sm_local.c. */
#include "sm_sharding.h"

#include <stdio.h>
#include <string.h>

sm_err sm_sharding_init(sm_sharding *s, const sm_mesh *m, const sm_pspec *p, const sm_shape *global,
                        char *err, size_t errlen)
{
    sm_err rc = sm_pspec_check(p, m, global, NULL, err, errlen);
    if (rc)
        return rc;
    s->mesh = *m;
    s->spec = *p;
    return SM_OK;
}

sm_err sm_sharding_shard_shape(const sm_sharding *s, const sm_shape *global, sm_shape *out,
                               char *err, size_t errlen)
{
    sm_err rc = sm_pspec_check(&s->spec, &s->mesh, global, NULL, err, errlen);
    if (rc)
        return rc;
    sm_shape r = *global;
    for (int d = 0; d < global->rank; d++)
        r.dims[d] = global->dims[d] / sm_pspec_dim_factor(&s->spec, &s->mesh, d);
    *out = r;
    return SM_OK;
}

/* Shard number along dim for a device at coords: mixed radix of its
 * coordinates over the dimension's axes, the first most significant. */
static int64_t sm_sharding_shard_of(const sm_sharding *s, int dim, const int64_t *coords)
{
    int64_t r = 0;
    if (dim >= s->spec.nentries)
        return 0;
    for (int k = 0; k < s->spec.e[dim].naxes; k++) {
        int a = sm_mesh_axis(&s->mesh, s->spec.e[dim].axes[k]);
        r = r * s->mesh.sizes[a] + coords[a];
    }
    return r;
}

sm_err sm_sharding_indices(const sm_sharding *s, const sm_shape *global, sm_device_slice *out,
                           char *err, size_t errlen)
{
    sm_err rc = sm_pspec_check(&s->spec, &s->mesh, global, NULL, err, errlen);
    if (rc)
        return rc;
    int64_t factor[SM_MAX_RANK];
    int used[SM_MAX_AXES] = {0}; /* mesh axes that select a distinct box */
    for (int d = 0; d < global->rank; d++) {
        factor[d] = sm_pspec_dim_factor(&s->spec, &s->mesh, d);
        if (d < s->spec.nentries && global->dims[d] > 0)
            for (int k = 0; k < s->spec.e[d].naxes; k++)
                used[sm_mesh_axis(&s->mesh, s->spec.e[d].axes[k])] = 1;
    }
    for (int pos = 0; pos < s->mesh.ndevices; pos++) {
        sm_device_slice *ds = &out[pos];
        memset(ds, 0, sizeof *ds);
        ds->device = s->mesh.devices[pos];
        ds->pos = pos;
        sm_mesh_coords(&s->mesh, pos, ds->coords);
        ds->index.rank = global->rank;
        for (int d = 0; d < global->rank; d++) {
            int64_t size = global->dims[d] / factor[d];
            int64_t r = sm_sharding_shard_of(s, d, ds->coords);
            ds->index.r[d].start = r * size;
            ds->index.r[d].stop = (r + 1) * size;
        }
        /* Devices with the same box differ only on the unused axes; in
         * mesh (row-major) order they come in the order of those
         * coordinates, so the replica id is their mixed radix. */
        int64_t rid = 0;
        for (int a = 0; a < s->mesh.naxes; a++)
            if (!used[a])
                rid = rid * s->mesh.sizes[a] + ds->coords[a];
        ds->replica_id = (int)rid;
    }
    return SM_OK;
}

int sm_sharding_is_fully_replicated(const sm_sharding *s, const sm_shape *global)
{
    if (s->spec.nunreduced) /* each device holds a different partial sum */
        return 0;
    for (int d = 0; d < global->rank; d++)
        if (sm_pspec_dim_factor(&s->spec, &s->mesh, d) > 1)
            return 0;
    return 1;
}

int sm_sharding_num_distinct(const sm_sharding *s, const sm_shape *global)
{
    int64_t n = 1;
    for (int d = 0; d < global->rank; d++)
        if (global->dims[d] > 0)
            n *= sm_pspec_dim_factor(&s->spec, &s->mesh, d);
    return (int)n;
}

/* Axis `name` of m is Auto: a type shows Explicit axes only (JAX's
 * modify_spec_for_auto_manual). */
static int sm_ts_auto(const sm_mesh *m, const char *name)
{
    int a = sm_mesh_axis(m, name);
    return a >= 0 && a < 32 && (m->auto_axes >> a & 1);
}

char *sm_sharding_type_str(const sm_sharding *s, sm_dtype t, const sm_shape *global, char *buf,
                           size_t len)
{
    size_t n = 0;
    if (!buf || len == 0)
        return buf;
    buf[0] = 0;
#define SM_TS_PUT(...)                                                                             \
    do {                                                                                           \
        if (n < len) {                                                                             \
            int k_ = snprintf(buf + n, len - n, __VA_ARGS__);                                      \
            if (k_ > 0)                                                                            \
                n += (size_t)k_;                                                                   \
        }                                                                                          \
    } while (0)
    SM_TS_PUT("%s[", sm_dtype_name(t));
    for (int d = 0; d < global->rank; d++) {
        SM_TS_PUT("%s%lld", d ? "," : "", (long long)global->dims[d]);
        const sm_pspec_entry *e = d < s->spec.nentries ? &s->spec.e[d] : NULL;
        const char *ax[SM_MAX_AXES];
        int na = 0;
        for (int k = 0; e && k < e->naxes; k++)
            if (!sm_ts_auto(&s->mesh, e->axes[k]))
                ax[na++] = e->axes[k];
        if (na == 1)
            SM_TS_PUT("@%s", ax[0]);
        for (int k = 0; na > 1 && k < na; k++)
            SM_TS_PUT("%s%s", k ? "," : "@(", ax[k]);
        if (na > 1)
            SM_TS_PUT(")");
    }
    SM_TS_PUT("]");
    /* unreduced, then reduced axes, in mesh order: f32[2@x,2]{U:y}, f32[4]{R:x} */
    int nu = 0, nr = 0;
    for (int a = 0; a < s->mesh.naxes; a++)
        if (sm_pspec_is_unreduced(&s->spec, s->mesh.names[a]) && !(s->mesh.auto_axes >> a & 1))
            SM_TS_PUT("%s%s",
                      nu++                                  ? ","
                      : s->spec.unreduced_kind == SM_UK_MAX ? "{U_max:"
                      : s->spec.unreduced_kind == SM_UK_MIN ? "{U_min:"
                                                            : "{U:",
                      s->mesh.names[a]);
    for (int a = 0; a < s->mesh.naxes; a++)
        if (sm_pspec_is_reduced(&s->spec, s->mesh.names[a]) && !(s->mesh.auto_axes >> a & 1))
            SM_TS_PUT("%s%s", nr++ ? "," : nu ? ", R:" : "{R:", s->mesh.names[a]);
    if (nu || nr)
        SM_TS_PUT("}");
#undef SM_TS_PUT
    return buf;
}
