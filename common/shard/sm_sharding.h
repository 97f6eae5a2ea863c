/* sm_sharding: JAX's NamedSharding (mesh + PartitionSpec) applied to a
 * global shape: shard shapes, devices_indices_map, replica ids, type
 * strings, layout diagrams, and process-local data planning
 * (make_array_from_process_local_data). Value types unless said. */
#ifndef SM_SHARDING_H
#define SM_SHARDING_H

#include "sm_dtype.h"
#include "sm_err.h"
#include "sm_mesh.h"
#include "sm_pspec.h"
#include "sm_shape.h"
#include "sm_strbuf.h"

typedef struct {
    sm_mesh mesh;
    sm_pspec spec;
} sm_sharding;

/* One device's place in a sharded array. */
typedef struct {
    int32_t device;
    int pos;                     /* mesh position */
    int64_t coords[SM_MAX_AXES]; /* mesh coordinates */
    sm_index index;              /* [start, stop) per dimension */
    int replica_id;              /* 0.. among devices with the same index, mesh order */
} sm_device_slice;

/* Builds and validates (sm_pspec_check) a sharding for a global shape. */
sm_err sm_sharding_init(sm_sharding *s, const sm_mesh *m, const sm_pspec *p, const sm_shape *global,
                        char *err, size_t errlen);
/* Shard shape: global dims divided by their factors. */
sm_err sm_sharding_shard_shape(const sm_sharding *s, const sm_shape *global, sm_shape *out,
                               char *err, size_t errlen);
/* devices_indices_map: out[pos] for every mesh position (mesh.ndevices
 * entries, in mesh order). */
sm_err sm_sharding_indices(const sm_sharding *s, const sm_shape *global, sm_device_slice *out,
                           char *err, size_t errlen);
/* 1 if every device holds the whole array. */
int sm_sharding_is_fully_replicated(const sm_sharding *s, const sm_shape *global);
/* Number of distinct indices (= shards holding different data). */
int sm_sharding_num_distinct(const sm_sharding *s, const sm_shape *global);

/* Type string as JAX prints it: f32[8@X,2@Y], f32[8@(X,Y),4], f32[8,4];
 * axes of the mesh that are Auto are not in it (as jax.typeof). */
char *sm_sharding_type_str(const sm_sharding *s, sm_dtype t, const sm_shape *global, char *buf,
                           size_t len);

/* A text picture of the layout, like jax.debug.visualize_array_sharding:
 * for rank 1 and 2 a grid of boxes, one per distinct block, each labelled
 * with the devices holding it ("0,4" when replicated); for other ranks a
 * readable listing of blocks and their devices. Appends to out. The boxes
 * are drawn with '+', '-' and '|', about 80 columns wide (wider only when
 * the labels need it); labels read "dev 0,4" (ids increasing; a long list
 * ends ",... (N devices)"). Ranks 0 and >= 3 print one line per distinct
 * block, "[0:2, 0:8, 0:4]  dev 0,4", blocks in row-major order. */
sm_err sm_sharding_diagram(const sm_sharding *s, const sm_shape *global, sm_strbuf *out, char *err,
                           size_t errlen);

/* ---- process-local data (make_array_from_process_local_data) ---------- */

/* Which process owns each device: for process p, proc_ndev[p] device ids
 * starting at the running sum of proc_ndev in proc_devices. */
typedef struct {
    int nprocs;
    const int *proc_ndev;
    const int32_t *proc_devices;
} sm_proc_map;

/* One device's share of a process-local upload. */
typedef struct {
    int32_t device;
    int pos;               /* mesh position */
    sm_index global_index; /* its slice of the global array */
    sm_index local_slice;  /* where that slice is inside its process's local data */
} sm_local_device;

typedef struct {
    int process;
    sm_shape local_shape; /* the shape this process's local data must have */
    int ndevices;
    sm_local_device *devices; /* ndevices entries, in mesh order */
} sm_local_proc;

/* The plan for an upload; owned by the caller, freed by sm_local_plan_free. */
typedef struct {
    sm_shape global_shape;
    int nprocs;
    sm_local_proc *procs;
} sm_local_plan;

/* Plans a process-local upload in which every process supplies local data of
 * shape local_shape (JAX's rule: all processes pass the same local shape).
 * global_shape NULL means infer it. Rules (docs/semantics.md, building sharded arrays): a dimension
 * whose local size equals the global size is held whole; otherwise the local
 * data holds, in increasing global order, the distinct shard ranges the
 * process's devices need, and local size must be shard size * count. The
 * inferred global size is local * (number of distinct range sets among
 * processes); processes holding different numbers of ranges, or sets that do
 * not partition the dimension, make it non-uniform: inference fails (SM_EINVAL
 * asking for global_shape). With one process, global_shape must be absent or
 * equal local_shape. Every device of the mesh must belong to exactly one
 * process, and every listed device must be in the mesh. A process without
 * devices is allowed (it gets an empty device list and does not count in
 * inference). An explicit global_shape is checked as JAX does: each
 * dimension equals the local size, or the shard size times the number of
 * distinct shards the process's devices hold there. Errors are SM_EINVAL
 * (SM_EOVERFLOW if an inferred size overflows, SM_ENOMEM) with a sentence
 * naming the dimension and sizes; *out is NULL on failure. */
sm_err sm_local_plan_create(const sm_sharding *s, const sm_proc_map *procs,
                            const sm_shape *local_shape, const sm_shape *global_shape,
                            sm_local_plan **out, char *err, size_t errlen);
void sm_local_plan_free(sm_local_plan *p);

#endif
