/* sm_example: the sidecar files of examples/NAME.shmap — NAME.inputs (how
 * to generate each argument) and NAME.expected (each output's expected
 * global value) — in the small expression language of examples/README.md:
 *
 *   arange(n, dtype)             0, 1, ... n-1
 *   random(n, dtype, seed)       n small integers in [-4, 4] (exact in any
 *                                float arithmetic), reproducible per seed
 *   values(dtype, v0, v1, ...)   an explicit list
 *   reshape(x, d0, ...)  transpose(x, p0, ...)  tile(x, r0, ...)
 *   roll(x, shift, axis)  sum(x, axis)  mean(x, axis)  astype(x, dtype)
 *   matmul(a, b)  add(a, b)  multiply(a, b)
 *
 * NAME.inputs has one `name = EXPR` line per parameter; NAME.expected has
 * one EXPR line per output, in return order, in which the parameter names
 * denote the generated inputs. `#` starts a comment. Results are computed
 * with sm_kern. Errors are SM_EFORMAT (or what a kernel reports) with
 * "line N: sentence". No state: thread-safe. */
#ifndef SM_EXAMPLE_H
#define SM_EXAMPLE_H

#include "sm_array.h"
#include "sm_ir.h"

/* Generates p's arguments from an .inputs text: inputs (p->nparams slots)
 * receive new arrays owned by the caller, checked against each parameter's
 * dtype and global shape; all NULL on failure. */
sm_err sm_example_inputs(const char *text, const sm_program *p, sm_array **inputs, char *err,
                         size_t errlen);

/* Evaluates an .expected text over the generated inputs (borrowed):
 * expected (p->nreturns slots) receive new arrays owned by the caller; all
 * NULL on failure. */
sm_err sm_example_expected(const char *text, const sm_program *p, sm_array *const *inputs,
                           sm_array **expected, char *err, size_t errlen);

/* Reads a whole file into a NUL-terminated buffer the caller frees;
 * SM_EIO naming the path. */
sm_err sm_example_read_file(const char *path, char **out, char *err, size_t errlen);

#endif
