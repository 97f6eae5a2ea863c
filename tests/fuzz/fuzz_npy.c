/* fuzz_npy: libFuzzer target for the .npy header parser (the bytes of a
 * file a client uploads or a worker loads). */
#include <stdint.h>
#include <stdlib.h>

#include "sm_array.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    sm_npy_info info;
    char err[512] = "";
    sm_err e = sm_npy_parse_header(data, size, &info, err, sizeof err);
    if (e != SM_OK && !err[0])
        abort();
    return 0;
}
