/* bench_mpi_coll: the Open MPI anchors of shmap's collectives, one host.
 *
 * Per size S (bytes per rank, the larger of a rank's send and receive
 * buffers, as nccl-tests counts it) and f32 data:
 *   allreduce       MPI_Allreduce sum, S in and out        busbw factor 2(n-1)/n
 *   allgather       MPI_Allgather, S/n in, S out           (n-1)/n
 *   reduce_scatter  MPI_Reduce_scatter_block sum, S in     (n-1)/n
 *   alltoall        MPI_Alltoall, S/n to each rank         (n-1)/n
 *   ppermute        ring MPI_Sendrecv (to r+1, from r-1)   1
 * algbw = S / t, busbw = algbw * factor, t the median over iterations of the
 * slowest rank's time (each iteration starts after a barrier). Rank 0 prints
 * one table and SUMMARY lines tagged with --label (e.g. "shm", "tcp").
 *
 *   mpirun -np 4 bench_mpi_coll [--sizes 1,16,64] [--iters N] [--label L] */
#define _GNU_SOURCE
#include <getopt.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MPIB_MAX_ITERS 1000
#define MPIB_MAX_SIZES 16

typedef enum {
    MPIB_ALLREDUCE,
    MPIB_ALLGATHER,
    MPIB_REDUCE_SCATTER,
    MPIB_ALLTOALL,
    MPIB_PPERMUTE
} mpib_op;

static const char *const mpib_names[] = {"allreduce", "allgather", "reduce_scatter", "alltoall",
                                         "ppermute"};
#define MPIB_NOPS 5

static int mpib_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double mpib_factor(mpib_op op, int n)
{
    switch (op) {
    case MPIB_ALLREDUCE:
        return 2.0 * (n - 1) / n;
    case MPIB_PPERMUTE:
        return 1.0;
    default:
        return (double)(n - 1) / n;
    }
}

/* One collective over count = S / 4 floats per rank (a multiple of n). */
static int mpib_once(mpib_op op, float *send, float *recv, int count, int rank, int n)
{
    int part = count / n;
    switch (op) {
    case MPIB_ALLREDUCE:
        return MPI_Allreduce(send, recv, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    case MPIB_ALLGATHER:
        return MPI_Allgather(send, part, MPI_FLOAT, recv, part, MPI_FLOAT, MPI_COMM_WORLD);
    case MPIB_REDUCE_SCATTER:
        return MPI_Reduce_scatter_block(send, recv, part, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    case MPIB_ALLTOALL:
        return MPI_Alltoall(send, part, MPI_FLOAT, recv, part, MPI_FLOAT, MPI_COMM_WORLD);
    case MPIB_PPERMUTE:
        return MPI_Sendrecv(send, count, MPI_FLOAT, (rank + 1) % n, 7, recv, count, MPI_FLOAT,
                            (rank + n - 1) % n, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    }
    return MPI_ERR_OTHER;
}

static void mpib_usage(void)
{
    printf("usage: mpirun -np N bench_mpi_coll [--sizes MiB,MiB,...] [--iters I] [--label L]\n"
           "Open MPI allreduce, allgather, reduce_scatter, alltoall and ring sendrecv (f32),\n"
           "bus bandwidth with the nccl-tests factors; sizes are MiB per rank (default\n"
           "1,16,64); I iterations per size after 2 warm-up (default: 20 below 16 MiB, 8\n"
           "from 16 MiB, 5 from 64 MiB).\n");
}

int main(int argc, char **argv)
{
    const char *sizes_arg = "1,16,64", *label = "mpi";
    int iters_arg = 0;
    for (int k = 1; k < argc; k++)
        if (!strcmp(argv[k], "--help") || !strcmp(argv[k], "-h")) {
            mpib_usage();
            return 0;
        }
    static const struct option opts[] = {{"sizes", required_argument, 0, 's'},
                                         {"iters", required_argument, 0, 'i'},
                                         {"label", required_argument, 0, 'l'},
                                         {0, 0, 0, 0}};
    int o;
    while ((o = getopt_long(argc, argv, "s:i:l:", opts, NULL)) != -1) {
        switch (o) {
        case 's':
            sizes_arg = optarg;
            break;
        case 'i':
            iters_arg = atoi(optarg);
            break;
        case 'l':
            label = optarg;
            break;
        default:
            mpib_usage();
            return 2;
        }
    }
    if (iters_arg < 0 || iters_arg > MPIB_MAX_ITERS)
        iters_arg = 0;
    long sizes[MPIB_MAX_SIZES];
    int nsizes = 0;
    char *sz = strdup(sizes_arg);
    for (char *tok = strtok(sz, ","); tok && nsizes < MPIB_MAX_SIZES; tok = strtok(NULL, ","))
        if (atol(tok) > 0 && atol(tok) <= 1024)
            sizes[nsizes++] = atol(tok);
    free(sz);

    MPI_Init(&argc, &argv);
    int rank, n;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    char lib[MPI_MAX_LIBRARY_VERSION_STRING];
    int liblen = 0;
    MPI_Get_library_version(lib, &liblen);
    char *nl = strchr(lib, ',');
    if (nl)
        *nl = 0;
    if (rank == 0)
        printf("bench_mpi_coll [%s]: %d ranks, f32, %s; median over iterations, GB = 10^9 B, "
               "S = MiB per rank\n\n%-15s %6s %12s %12s %12s\n",
               label, n, lib, "op", "S MiB", "time us", "algbw GB/s", "busbw GB/s");

    int rc = 0;
    for (int si = 0; si < nsizes && !rc; si++) {
        size_t bytes = (size_t)sizes[si] << 20;
        int count = (int)(bytes / sizeof(float));
        count -= count % n;
        float *send = malloc((size_t)count * sizeof(float));
        float *recv = malloc((size_t)count * sizeof(float));
        if (!send || !recv) {
            fprintf(stderr, "bench_mpi_coll: out of memory\n");
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        for (int k = 0; k < count; k++) {
            send[k] = (float)((k + rank) % 101);
            recv[k] = 0;
        }
        int iters = iters_arg ? iters_arg : sizes[si] >= 64 ? 5 : sizes[si] >= 16 ? 8 : 20;
        double t[MPIB_MAX_ITERS];
        for (int op = 0; op < MPIB_NOPS && !rc; op++) {
            for (int it = -2; it < iters; it++) {
                MPI_Barrier(MPI_COMM_WORLD);
                double t0 = MPI_Wtime();
                if (mpib_once((mpib_op)op, send, recv, count, rank, n) != MPI_SUCCESS) {
                    rc = 1;
                    break;
                }
                double dt = MPI_Wtime() - t0, mx = 0;
                MPI_Allreduce(&dt, &mx, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
                if (it >= 0)
                    t[it] = mx;
            }
            if (rc || rank != 0)
                continue;
            qsort(t, (size_t)iters, sizeof t[0], mpib_cmp);
            double med = iters % 2 ? t[iters / 2] : 0.5 * (t[iters / 2 - 1] + t[iters / 2]);
            double algbw = (double)count * sizeof(float) / med / 1e9;
            double busbw = algbw * mpib_factor((mpib_op)op, n);
            printf("%-15s %6ld %12.1f %12.3f %12.3f\n", mpib_names[op], sizes[si], med * 1e6, algbw,
                   busbw);
            printf("SUMMARY|mpi_coll|%s %ld MiB, MPI %s %d ranks|%.4g|GB/s busbw|||||n/a\n",
                   mpib_names[op], sizes[si], label, n, busbw);
            fflush(stdout);
        }
        free(send);
        free(recv);
    }
    MPI_Finalize();
    return rc;
}
