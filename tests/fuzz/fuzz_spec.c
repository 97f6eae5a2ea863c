/* fuzz_spec: libFuzzer target for PartitionSpec and mesh text (what
 * shmapctl and the Python package pass), and the sharding built from them:
 * the input is "MESH|SPEC|SHAPE". */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sm_sharding.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 4096)
        return 0;
    char text[4097];
    memcpy(text, data, size);
    text[size] = '\0';
    char *spec = strchr(text, '|'), *shape = spec ? strchr(spec + 1, '|') : NULL;
    if (!spec || !shape)
        return 0;
    *spec++ = '\0';
    *shape++ = '\0';
    sm_mesh m;
    sm_pspec p;
    sm_shape s;
    char err[512];
    if (sm_mesh_parse(text, NULL, 0, &m, err, sizeof err) ||
        sm_pspec_parse(spec, &p, err, sizeof err) || sm_shape_parse(shape, &s, err, sizeof err))
        return 0;
    sm_sharding sh;
    if (sm_sharding_init(&sh, &m, &p, &s, err, sizeof err))
        return 0;
    sm_device_slice *sl = malloc(sizeof *sl * (size_t)m.ndevices);
    if (sl && sm_sharding_indices(&sh, &s, sl, err, sizeof err))
        abort(); /* a valid sharding has an index map */
    free(sl);
    char buf[512];
    sm_pspec_format(&p, buf, sizeof buf);
    return 0;
}
