/* sm_mesh: a device mesh — named axes with sizes, and the device ids in
 * row-major mesh order (JAX's Mesh(devices.reshape(sizes), names)).
 * Value type (copy by assignment), no ownership. */
#ifndef SM_MESH_H
#define SM_MESH_H

#include <stdint.h>

#include "sm_err.h"
#include "sm_shape.h"

#define SM_MAX_AXES      SM_MAX_RANK
#define SM_AXIS_NAME_MAX 32 /* including the NUL */
#define SM_MAX_DEVICES   1024

typedef struct {
    int naxes;
    char names[SM_MAX_AXES][SM_AXIS_NAME_MAX];
    int64_t sizes[SM_MAX_AXES];
    int ndevices;                    /* product of sizes */
    int32_t devices[SM_MAX_DEVICES]; /* device id at each mesh position */
    /* Bit a set: axis a is of type Auto (JAX's AxisType.Auto); the others
     * are Explicit. Kept last: a mesh stored before it (schema 3) is a
     * prefix of this struct. sm_mesh_init clears it. */
    uint32_t auto_axes;
} sm_mesh;

/* Builds a mesh. devices == NULL means 0..n-1. Checks: 1..SM_MAX_AXES axes,
 * names are identifiers, unique and short enough; sizes >= 1; product <=
 * SM_MAX_DEVICES; ndevices == product; ids non-negative and distinct. Every
 * failure is SM_EINVAL with a sentence naming the value. */
sm_err sm_mesh_init(sm_mesh *m, int naxes, const char *const *names, const int64_t *sizes,
                    const int32_t *devices, int ndevices, char *err, size_t errlen);

/* Parses "i=4,j=2" (also space-separated, "i=4 j=2"), optionally followed
 * by the axes' types as JAX writes them, "i=4 j=2 axis_types=(Auto,
 * Explicit)" (one per axis; Explicit when not given); devices as in
 * sm_mesh_init. */
sm_err sm_mesh_parse(const char *text, const int32_t *devices, int ndevices, sm_mesh *m, char *err,
                     size_t errlen);

/* The default device order for a mesh of these sizes, given which devices
 * each process owns (proc_devices: for process p, proc_ndev[p] ids starting
 * at the running sum of proc_ndev). Keeps the minor (last) axis inside one
 * process where it can: processes are taken in order, each one's devices in
 * increasing id. out must hold the product of sizes; that product must equal
 * the total device count (SM_EINVAL otherwise). */
sm_err sm_mesh_default_devices(int naxes, const int64_t *sizes, int nprocs, const int *proc_ndev,
                               const int32_t *proc_devices, int32_t *out, char *err, size_t errlen);

/* SM_EINVAL with a sentence unless auto_axes names only axes of m (bits
 * below m->naxes); what names the value in the sentence. */
sm_err sm_mesh_types_check(const sm_mesh *m, uint32_t auto_axes, const char *what, char *err,
                           size_t errlen);

/* Axis position of name, or -1. */
int sm_mesh_axis(const sm_mesh *m, const char *name);
/* Mesh coordinates (one per axis) of mesh position pos. */
void sm_mesh_coords(const sm_mesh *m, int pos, int64_t *coords);
/* Mesh position of device id, or -1 if the mesh does not hold it. */
int sm_mesh_find_device(const sm_mesh *m, int32_t device);
/* "Mesh('i': 4, 'j': 2)" into buf, with ", axis_types=(Auto, Explicit)"
 * when an axis is Auto; returns buf. */
char *sm_mesh_format(const sm_mesh *m, char *buf, size_t len);

#endif
