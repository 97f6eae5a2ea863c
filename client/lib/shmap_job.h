/* shmap_job: shard_map jobs through libshmap (it includes shmap.h).
 *
 * A job runs a program (sm_program.h: an opaque sm_program, parsed with
 * sm_program_parse or built with sm_program_create / _add_param / _add_op,
 * which names each op by its JAX name, / _set_returns) on arrays that live
 * on the service, as jax.shard_map(f, mesh, in_specs, out_specs)(*args)
 * does. The service verifies the program (shapes, dtypes, specs and,
 * unless turned off, the replication check) and the arguments before
 * anything runs, reshards an argument whose sharding is not (program mesh,
 * in_spec) into a temporary copy, runs the program on every device of the
 * mesh and records each returned value as a new sharded array (sharding
 * (mesh, out_spec)). The outputs stay on the workers until deleted
 * (sm_client_delete).
 *
 * The program's mesh is the job's mesh: its devices as written
 * (devices=[...]) or, when it names none, the service's default order.
 *
 * Conventions as in shmap.h: every call returns sm_err and writes one
 * sentence into err on failure; sm_job_info is filled by the library and
 * released with sm_job_info_free. Thread-safe on a shared client. */
#ifndef SHMAP_JOB_H
#define SHMAP_JOB_H

#include <stdint.h>

#include "shmap.h"
#include "sm_program.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Submits a job and returns at once with its id in *out.
 * - p: the program (borrowed; it need not be verified).
 * - args[0..nargs): one array per parameter, in order (by id or name);
 *   each must be ready, with the parameter's dtype and global shape.
 * - out_names: NULL, or sm_program_nreturns(p) entries naming the outputs
 *   (NULL or "" entries stay unnamed); names must be unique on the service.
 * - check_vma: 1 runs the replication check (JAX's default), 0 turns it off.
 * - deadline_ms: the job fails with "deadline" if not done by then (0: none).
 * Errors before anything runs: SM_EINVAL (the verifier's
 * "file:line:col: sentence", an argument that does not match its parameter,
 * a bad output name), SM_ENOTFOUND (unknown argument), SM_EEXIST (output
 * name taken), SM_EUNAVAILABLE (a mesh device's worker is lost). Nothing
 * is created on the service when submit fails. */
sm_err sm_job_submit(sm_client *c, const sm_program *p, int nargs, const sm_array_ref *args,
                     const char *const *out_names, int check_vma, uint32_t deadline_ms,
                     sm_job_id *out, char *err, size_t errlen);

/* Waits for job id to end (DONE, FAILED or CANCELLED), at most timeout_ms
 * (< 0: no limit), then describes it into *out: state, error (why it
 * FAILED or was CANCELLED: the first failing worker's sentence), the
 * outputs in return order when DONE, and queued_us / run_us. Returns SM_OK
 * whenever the job could be described, also when it failed or is still
 * running after timeout_ms: out->state says which. SM_ENOTFOUND for an
 * unknown job, and for one whose record the coordinator dropped (it keeps
 * an ended job's record for --job-keep-s, the newest --job-keep-max; the
 * sentence says so). */
sm_err sm_job_wait(sm_client *c, sm_job_id id, int64_t timeout_ms, sm_job_info *out, char *err,
                   size_t errlen);

/* Submits a job and waits for it to end, in one round trip when the job
 * ends within the coordinator's longest wait (10 s; longer waits go on
 * with WaitJob as sm_job_wait does): sm_job_submit followed by
 * sm_job_wait(timeout_ms), with the errors of both. On SM_OK *out
 * describes the job (out->id is its id), ended or, after timeout_ms
 * (< 0: no limit), still QUEUED or RUNNING. An error while waiting for a
 * job that was submitted leaves its id in out->id (0 when nothing was
 * submitted), for sm_job_status or sm_job_cancel. */
sm_err sm_job_run(sm_client *c, const sm_program *p, int nargs, const sm_array_ref *args,
                  const char *const *out_names, int check_vma, uint32_t deadline_ms,
                  int64_t timeout_ms, sm_job_info *out, char *err, size_t errlen);

/* Describes job id now, without waiting. SM_ENOTFOUND as sm_job_wait. */
sm_err sm_job_status(sm_client *c, sm_job_id id, sm_job_info *out, char *err, size_t errlen);

/* Cancels a queued or running job (the workers stop it, its outputs are
 * dropped, its state becomes CANCELLED) and describes it; a job that
 * already ended is left as it is. */
sm_err sm_job_cancel(sm_client *c, sm_job_id id, sm_job_info *out, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif

#endif
