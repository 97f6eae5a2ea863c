/* sm_exec: the per-device interpreter of a verified shard_map program.
 *
 * One call runs the program's ops in order for one device (one mesh
 * position) on its input blocks, dispatching each op kind once to its
 * kernel (sm_kern.h) with numpy/JAX semantics: results have the dtype and
 * block shape the verifier gave their values (operands are converted with
 * sm_kern_astype where the types differ, e.g. weakly typed literals), and
 * collectives go through an sm_comm (docs/semantics.md, shard_map: psum/pmean/pmax/pmin,
 * all_gather axis/tiled, psum_scatter scatter_dimension/tiled, all_to_all
 * split_axis/concat_axis/tiled, ppermute perm, axis_index, axis_size).
 * Each intermediate buffer is freed right after its last use.
 *
 * Every device of a job must run the same program; collectives are numbered
 * per device in program order, which is the sequence number passed to the
 * comm. On any error the run calls comm->abort so peers blocked in a
 * collective are released, and returns the error with one sentence naming
 * the op ("file:line:col: " when the program has positions) and the
 * device. */
#ifndef SM_EXEC_H
#define SM_EXEC_H

#include "sm_array.h"
#include "sm_comm.h"
#include "sm_ir.h"

/* What a run needs to know about a program, computed once and shared by
 * every device: the op index after which each value is dead. Read-only
 * after creation, so one plan serves many threads. */
typedef struct sm_exec_plan sm_exec_plan;

/* Builds the plan of a verified program p (borrowed: it must outlive the
 * plan). *out is owned by the caller (sm_exec_plan_free). */
sm_err sm_exec_plan_create(const sm_program *p, sm_exec_plan **out, char *err, size_t errlen);
void sm_exec_plan_free(sm_exec_plan *plan);

/* Runs the program for mesh position mesh_pos. inputs: one block per
 * parameter with the parameter's dtype and block shape (borrowed; checked:
 * SM_EINVAL naming the parameter). outputs: p->nreturns slots receiving new
 * arrays owned by the caller (sm_array_free); all NULL on failure.
 * comm/comm_ctx: the job's collectives (borrowed). pool (borrowed; NULL:
 * none): where every value, output and scratch buffer of the run comes
 * from, so they count against its limit (a value past it fails the op
 * with SM_ENOMEM saying so); the outputs record it. Thread-safe for
 * distinct output arrays; the program and plan are only read. */
sm_err sm_exec_run_plan(const sm_exec_plan *plan, int mesh_pos, const sm_comm *comm, void *comm_ctx,
                        sm_array_pool *pool, sm_array *const *inputs, sm_array **outputs, char *err,
                        size_t errlen);

/* sm_exec_run_plan with a plan built for this call. */
sm_err sm_exec_run(const sm_program *p, int mesh_pos, const sm_comm *comm, void *comm_ctx,
                   sm_array_pool *pool, sm_array *const *inputs, sm_array **outputs, char *err,
                   size_t errlen);

/* 0 if the text form starts with the directive comment `# check_vma: false`
 * (optionally after other leading comment lines), else 1: the replication
 * check setting a .shmap file asks for. */
int sm_exec_text_check_vma(const char *text);

#endif
