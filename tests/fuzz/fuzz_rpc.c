/* fuzz_rpc: libFuzzer target for the decoding and validation of the Program
 * message every SubmitJob and RunJob request carries (protobuf-c unpacking,
 * then the checks that build a program from it). */
#include <stdint.h>
#include <stdlib.h>

#include "sm_svc_job.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    sm_program *p = NULL;
    char err[1024] = "";
    sm_err e = sm_svc_program_decode(data, size, &p, err, sizeof err);
    if (e == SM_OK) {
        sm_program_verify(p, 1, err, sizeof err);
        sm_program_free(p);
    } else if (!err[0]) {
        abort();
    }
    return 0;
}
