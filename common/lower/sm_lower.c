/* sm_lower: global-view (jit) programs lowered to shard_map programs. */
#include "sm_lower.h"

#include "sm_ir_infer.h"

sm_err sm_lower(const sm_program *jit, const sm_lower_opts *opts, sm_program **out, char *err,
                size_t errlen)
{
    *out = NULL;
    return sm_fail(err, errlen, SM_EINTERNAL, "lowering is not written yet");
}

int sm_lower_count_collectives(const sm_program *p, int counts[SM_OP_COUNT])
{
    int n = 0;
    for (int k = 0; k < SM_OP_COUNT; k++)
        counts[k] = 0;
    for (int k = 0; k < p->nops; k++) {
        sm_vma_rule r = sm_op_vma_rule(p->ops[k].kind);
        if (r == SM_VMA_REMOVE || r == SM_VMA_ADD) {
            counts[p->ops[k].kind]++;
            n++;
        }
    }
    return n;
}
