/* put_get: the smallest libshmap program. It connects to a coordinator,
 * uploads an (8,16) float32 array sharded P('i','j') over an i=4,j=2 mesh,
 * asks the service how it is sharded, fetches it back and checks that every
 * value survived the trip.
 *
 *     shmap-coordinator --local-workers 2 --devices-per-worker 4 &
 *     build/examples/put_get [HOST:PORT]
 */
#include <stdio.h>
#include <string.h>

#include "shmap.h"

int main(int argc, char **argv)
{
    const char *target = argc > 1 ? argv[1] : "localhost:7070";
    char err[512], buf[256];
    sm_client *c = NULL;
    sm_array *x = NULL, *back = NULL;
    sm_array_info info;
    int rc = 1;

    memset(&info, 0, sizeof info);

    /* 1. Connect (negotiates the protocol version). */
    if (sm_client_connect(target, NULL, &c, err, sizeof err)) {
        fprintf(stderr, "put_get: %s\n", err);
        return 1;
    }

    /* 2. An (8,16) float32 array with x[r][k] = 100 r + k. */
    int64_t dims[2] = {8, 16};
    sm_shape shape;
    if (sm_shape_make(&shape, 2, dims, err, sizeof err) ||
        sm_array_create(SM_F32, &shape, &x, err, sizeof err))
        goto fail;
    float *v = x->data;
    for (int r = 0; r < 8; r++)
        for (int k = 0; k < 16; k++)
            v[r * 16 + k] = (float)(100 * r + k);

    /* 3. NamedSharding(Mesh(i=4, j=2), P('i', 'j')): the service picks the
     *    device order, so 'j' stays inside one worker. */
    sm_mesh mesh;
    sm_sharding_ref sh;
    memset(&sh, 0, sizeof sh);
    if (sm_mesh_parse("i=4,j=2", NULL, 0, &mesh, err, sizeof err) ||
        sm_pspec_parse("P('i', 'j')", &sh.spec, err, sizeof err))
        goto fail;
    sh.mesh = &mesh;
    sh.default_order = 1;

    /* 4. device_put: every device receives its (2,8) block. */
    if (sm_client_put(c, SM_F32, &shape, x->data, &sh, NULL, &info, err, sizeof err))
        goto fail;

    /* 5. How is it sharded? The JAX type string and devices_indices_map. */
    printf("array %llu: %s\n", (unsigned long long)info.id.v, info.type);
    for (int i = 0; i < info.nshards; i++)
        printf("  device %d on worker %u: %s\n", (int)info.shards[i].device,
               info.shards[i].worker_id.v, sm_index_format(&info.shards[i].index, buf, sizeof buf));

    /* 6. Fetch it back and compare bit for bit. */
    sm_array_ref ref = {.id = info.id, .name = NULL};
    if (sm_client_get(c, ref, &back, err, sizeof err))
        goto fail;
    if (back->nbytes != x->nbytes || memcmp(back->data, x->data, (size_t)x->nbytes) != 0) {
        fprintf(stderr, "put_get: the array came back different\n");
        goto done;
    }
    printf("round trip: %lld bytes identical\n", (long long)back->nbytes);

    /* 7. Delete it: the workers free its shards. */
    if (sm_client_delete(c, ref, err, sizeof err))
        goto fail;
    rc = 0;
    goto done;

fail:
    fprintf(stderr, "put_get: %s\n", err);
done:
    sm_array_info_free(&info);
    sm_array_free(x);
    sm_array_free(back);
    sm_client_close(c);
    return rc;
}
