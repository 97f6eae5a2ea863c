/* sm_exec_local: runs a whole shard_map job inside this process — every
 * mesh device as a thread, collectives through sm_comm_local — on GLOBAL
 * arrays, as jax.shard_map(f, mesh, in_specs, out_specs)(*args) does:
 *
 * - split: each device's input block is its slice of the global argument
 *   under the parameter's in_spec (sm_sharding_indices); devices with the
 *   same slice share one block;
 * - run: sm_exec_run_plan per device; OpenBLAS is set to one thread per
 *   device (sm_kern_set_threads(1), process-wide);
 * - assemble: output dimension d is block[d] * prod(sizes of out_spec[d]'s
 *   axes); the block of the device at coordinate c lands at
 *   mixed_radix(c[out_spec[d] axes]) along d; mesh axes an out_spec does not
 *   name are untiled: the block of coordinate 0 along them is taken.
 *
 * On failure the first device error that is not a consequence of another
 * (cancelled) is returned, naming the op and device. */
#ifndef SM_EXEC_LOCAL_H
#define SM_EXEC_LOCAL_H

#include "sm_exec.h"

typedef struct {
    double timeout_s; /* per collective; <= 0: SM_COMM_LOCAL_TIMEOUT_S */
} sm_exec_local_opts;

/* Runs verified program p on global inputs (one per parameter, with its
 * dtype and global shape; borrowed). outputs: p->nreturns slots that
 * receive new global arrays owned by the caller (sm_array_free), all NULL
 * on failure. Every block and output is allocated without a pool (no
 * cache, no limit: sm_array_create). opts may be NULL. Thread-safe for
 * distinct outputs (but it sets OpenBLAS's thread count for the whole
 * process). */
sm_err sm_exec_local_run(const sm_program *p, sm_array *const *inputs, sm_array **outputs,
                         const sm_exec_local_opts *opts, char *err, size_t errlen);

#endif
