/* Helpers shared by the Check suites that parse programs (tests/test_ir.c,
 * tests/test_exec*.c, tests/test_rpc_job.c), and program texts more than
 * one of them runs. Static inline; helpers that assert do so with Check. */
#ifndef SM_IR_TESTUTIL_H
#define SM_IR_TESTUTIL_H

#include <check.h>

#include "sm_ir.h"

/* Parses text (as "t.shmap") and verifies it (the replication check on
 * with check_vma); fails the test with the message and the text on an
 * error. The caller frees the program (sm_program_free). */
static inline sm_program *parse_ok(const char *text, int check_vma)
{
    sm_program *p = NULL;
    char err[1024] = "";
    sm_err e = sm_program_parse(text, "t.shmap", &p, err, sizeof err);
    ck_assert_msg(e == SM_OK, "parse failed: %s\n%s", err, text);
    e = sm_program_verify(p, check_vma, err, sizeof err);
    ck_assert_msg(e == SM_OK, "verify failed: %s\n%s", err, text);
    return p;
}

/* The collective matmul of the design notes (all-gather of the LHS by a
 * ring of ppermute overlapping the dots); accum depends on axis_index, so
 * the replication check must be off for out_specs=P(). */
#define PROG_COLLECTIVE_MATMUL                                                                     \
    "mesh i=4\n"                                                                                   \
    "shard_map collective_matmul(lhs: f32[16,8] @ P('i', None), rhs: f32[8,4] @ P()) -> P():\n"    \
    "    axis_size = psum(1, 'i')\n"                                                               \
    "    axis_index = jax.lax.axis_index(axis_name='i')\n"                                         \
    "    chunk_size = lhs.shape[0]\n"                                                              \
    "    accum = jnp.zeros((lhs.shape[0] * axis_size, rhs.shape[1]), dtype=lhs.dtype)\n"           \
    "    for i in range(0, axis_size - 1):\n"                                                      \
    "        update = lhs @ rhs\n"                                                                 \
    "        lhs = ppermute(lhs, axis_name='i',\n"                                                 \
    "                       perm=[(j, (j - 1) % axis_size) for j in range(axis_size)])\n"          \
    "        update_index = (((axis_index + i) % axis_size) * chunk_size, 0)\n"                    \
    "        accum = dynamic_update_slice(accum, update, update_index)\n"                          \
    "    update = lhs @ rhs\n"                                                                     \
    "    i = axis_size - 1\n"                                                                      \
    "    update_index = (((axis_index + i) % axis_size) * chunk_size, 0)\n"                        \
    "    accum = dynamic_update_slice(accum, update, update_index)\n"                              \
    "    return accum\n"

/* The ring of collective_matmul_allgather_lhs_contracting (examples/)
 * over mesh axis 'Y', up to its last step: a shard_map body on lhs and
 * rhs that leaves accum, lhs, rhs, idx, axis_size and chunk_size. */
#define PROG_CM_CONTRACTING_LOOP                                                                   \
    "    axis_size = jax.lax.axis_size('Y')\n"                                                     \
    "    idx = jax.lax.axis_index('Y')\n"                                                          \
    "    chunk_size = lhs.shape[1]\n"                                                              \
    "    accum = jnp.zeros((lhs.shape[0], rhs.shape[1]), dtype=lhs.dtype)\n"                       \
    "    accum = jax.lax.pvary(accum, ('X', 'Y'))\n"                                               \
    "    for i in range(axis_size - 1):\n"                                                         \
    "        rhs_chunk = jax.lax.dynamic_slice_in_dim(rhs, (idx + i) % axis_size * chunk_size, "   \
    "chunk_size)\n"                                                                                \
    "        update = lhs @ rhs_chunk\n"                                                           \
    "        lhs = jax.lax.ppermute(lhs, axis_name='Y', perm=[(j, (j - 1) % axis_size) for j in "  \
    "range(axis_size)])\n"                                                                         \
    "        accum = accum + update\n"

#endif
