/* sm_comm: collective groups over a mesh (the vtable lives in sm_comm.h). */
#include "sm_comm.h"

#include <string.h>

const char *const sm_comm_kind_names[SM_COMM_NKINDS] = {
#define SM_COMM_KIND_NAME(kind, name) [kind] = name,
    SM_COMM_KINDS(SM_COMM_KIND_NAME)
#undef SM_COMM_KIND_NAME
};

sm_err sm_comm_group_make(const sm_mesh *m, int pos, int naxes,
                          const char (*axes)[SM_AXIS_NAME_MAX], int *members, sm_comm_group *g,
                          char *err, size_t errlen)
{
    int ax[SM_MAX_AXES];
    uint32_t seen = 0;
    if (naxes < 1 || naxes > m->naxes)
        return sm_fail(err, errlen, SM_EINVAL,
                       "a collective needs between 1 and %d mesh axis names, got %d", m->naxes,
                       naxes);
    if (pos < 0 || pos >= m->ndevices)
        return sm_fail(err, errlen, SM_EINVAL, "mesh position %d is outside the mesh of %d devices",
                       pos, m->ndevices);
    int size = 1;
    for (int k = 0; k < naxes; k++) {
        ax[k] = sm_mesh_axis(m, axes[k]);
        if (ax[k] < 0)
            return sm_fail(err, errlen, SM_EINVAL, "unknown mesh axis '%s'", axes[k]);
        if (seen & (1u << ax[k]))
            return sm_fail(err, errlen, SM_EINVAL, "mesh axis '%s' is named twice", axes[k]);
        seen |= 1u << ax[k];
        size *= (int)m->sizes[ax[k]];
    }
    int64_t c[SM_MAX_AXES];
    sm_mesh_coords(m, pos, c);
    int rank = 0;
    for (int k = 0; k < naxes; k++)
        rank = rank * (int)m->sizes[ax[k]] + (int)c[ax[k]];
    for (int r = 0; r < size; r++) {
        int rest = r;
        for (int k = naxes - 1; k >= 0; k--) {
            c[ax[k]] = rest % m->sizes[ax[k]];
            rest /= (int)m->sizes[ax[k]];
        }
        int p = 0;
        for (int a = 0; a < m->naxes; a++)
            p = p * (int)m->sizes[a] + (int)c[a];
        members[r] = p;
    }
    g->size = size;
    g->rank = rank;
    g->members = members;
    return SM_OK;
}
