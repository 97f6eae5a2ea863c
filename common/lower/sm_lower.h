/* sm_lower: turns a verified global-view (jit) program into the shard_map
 * program that runs it (docs/semantics.md, lowering): the same mesh,
 * the same parameters (global shapes, their shardings as in_specs), per-
 * device blocks of every value, and exactly the collectives the types
 * require — none for a program whose types need no communication.
 *
 * For each op it follows the op's sharding rule (the shard column of
 * sm_ir_ops.def, sm_ir_shard_plan): reshard every operand to the layout the
 * rule asks for, run the op on blocks, complete it with the rule's
 * collective (psum / pmean / pmax / pmin, or psum_scatter where the result
 * is sharded on the contracted axes), and reshard the result to its type's
 * layout. A reshard from one layout to another (sm_lower_reshard):
 *   - an axis leaving a dimension and joining another: all_to_all;
 *   - an axis leaving a dimension: all_gather (tiled), minor axes first;
 *   - an axis joining a dimension: a local slice at axis_index (no data
 *     moves);
 * so replicated -> sharded costs nothing, sharded -> replicated one
 * all_gather, and a sharding moved between dimensions one all_to_all.
 * Ops of a shard_map function called from the jit body are copied as they
 * are, after their arguments are resharded to its in_specs.
 *
 * The result is a shard_map program whose out_specs are the jit results'
 * shardings; run it with the replication check off (its gathered values
 * are replicated, though the static check cannot know). Pure: no I/O, no
 * globals; thread-safe. */
#ifndef SM_LOWER_H
#define SM_LOWER_H

#include "sm_ir.h"

typedef struct {
    /* 1: ignore every sharding and compute whole arrays on every device
     * (the reference the differential tests compare with) */
    int replicate_all;
} sm_lower_opts;

/* Lowers jit (verified, kind SM_PROG_JIT) into *out, a new shard_map
 * program the caller frees with sm_program_free; opts may be NULL. On
 * failure *out is NULL. */
sm_err sm_lower(const sm_program *jit, const sm_lower_opts *opts, sm_program **out, char *err,
                size_t errlen);

/* Counts the collectives of a (lowered) program by kind: counts[kind] for
 * each op kind. Returns the total. */
int sm_lower_count_collectives(const sm_program *p, int counts[SM_OP_COUNT]);

#endif
