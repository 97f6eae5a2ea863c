/* Check suite for common/shard, part 3: planning process-local uploads
 * (make_array_from_process_local_data): inferred and explicit global
 * shapes for 1, 2, 4 and 8 processes, the data loading guide's layouts, the
 * reference's non-uniform 4x4 examples, and every error path. Each
 * successful plan is also checked by rebuilding every process's local data
 * from the rule of docs/semantics.md (building sharded arrays) and comparing, element by element,
 * what each device would receive with its slice of the global array. */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sm_sharding.h"
#include "suite_main.h"

#define N(a) ((int)(sizeof(a) / sizeof((a)[0])))

typedef struct {
    const char *name;
    const char *mesh;
    int ndev;
    int32_t devs[8]; /* mesh order; ndev == 0: 0..n-1 */
    const char *spec;
    int nprocs;
    int proc_ndev[8];
    int32_t proc_devs[8];
    int rank;
    int64_t local[2];
    int has_global;
    int64_t global[2];
    sm_err code;
    int64_t want[2];    /* global shape, on success */
    const char *words;  /* key words of the message, on failure */
    const char *words2; /* optional */
} plan_case;

/* clang-format off */
#define P4x2 4, {2, 2, 2, 2}, {0, 1, 2, 3, 4, 5, 6, 7}
#define SEED1 "x=2,y=4", 8, {0, 1, 2, 3, 6, 4, 5, 7}, "P('x', 'y')", P4x2, 2
#define SEED2 "x=2,y=4", 8, {0, 2, 1, 3, 4, 6, 5, 7}, "P('x', 'y')", P4x2, 2
#define SEED2B "a=2,b=2,c=2", 0, {0}, "P('a', 'b')", P4x2, 2

static const plan_case plan_cases[] = {
    /* the data loading guide: (64,128) over 4 processes x 2 devices */
    {"1-D columns", "x=8", 0, {0}, "P(None, 'x')", P4x2, 2, {64, 32}, 0, {0}, SM_OK, {64, 128}},
    {"1-D columns, explicit", "x=8", 0, {0}, "P(None, 'x')", P4x2, 2, {64, 32}, 1, {64, 128},
     SM_OK, {64, 128}},
    {"1-D columns, permuted", "x=8", 8, {0, 2, 4, 6, 1, 3, 5, 7}, "P(None, 'x')", P4x2, 2,
     {64, 32}, 0, {0}, SM_OK, {64, 128}},
    {"2-D", "x=4,y=2", 0, {0}, "P('x', 'y')", P4x2, 2, {16, 128}, 0, {0}, SM_OK, {64, 128}},
    {"replicated", "x=4,y=2", 0, {0}, "P()", P4x2, 2, {64, 128}, 0, {0}, SM_OK, {64, 128}},
    {"replicas inside a process (columns)", "x=4,y=2", 0, {0}, "P(None, 'y')", P4x2, 2, {64, 128},
     0, {0}, SM_OK, {64, 128}},
    {"replicas inside a process (rows)", "x=4,y=2", 0, {0}, "P('x')", P4x2, 2, {16, 128}, 0, {0},
     SM_OK, {64, 128}},
    {"replicas across processes", "r=4,s=2", 8, {0, 4, 1, 5, 2, 6, 3, 7}, "P('s')", P4x2, 2,
     {32, 128}, 0, {0}, SM_OK, {64, 128}},
    /* other process counts */
    {"8 processes", "x=8", 0, {0}, "P('x')", 8, {1, 1, 1, 1, 1, 1, 1, 1}, {0, 1, 2, 3, 4, 5, 6, 7},
     2, {8, 128}, 0, {0}, SM_OK, {64, 128}},
    {"8 processes, 2-D", "x=2,y=4", 0, {0}, "P('x', 'y')", 8, {1, 1, 1, 1, 1, 1, 1, 1},
     {7, 6, 5, 4, 3, 2, 1, 0}, 2, {32, 32}, 0, {0}, SM_OK, {64, 128}},
    {"2 processes", "i=2,j=4", 0, {0}, "P('i', 'j')", 2, {4, 4}, {0, 1, 2, 3, 4, 5, 6, 7}, 2,
     {32, 128}, 0, {0}, SM_OK, {64, 128}},
    {"2 processes, column-major", "i=2,j=4", 0, {0}, "P('i', 'j')", 2, {4, 4},
     {0, 4, 1, 5, 2, 6, 3, 7}, 2, {64, 64}, 0, {0}, SM_OK, {64, 128}},
    {"2 processes, diagonal", "x=2,y=2", 0, {0}, "P('x', 'y')", 2, {2, 2}, {0, 3, 1, 2}, 2, {4, 4},
     0, {0}, SM_OK, {4, 4}},
    {"a process without devices", "x=4", 0, {0}, "P('x')", 3, {2, 0, 2}, {0, 1, 2, 3}, 1, {4}, 0,
     {0}, SM_OK, {8}},
    {"scalar", "x=2", 0, {0}, "P()", 2, {1, 1}, {0, 1}, 0, {0}, 0, {0}, SM_OK, {0}},
    {"1 process", "x=4,y=2", 0, {0}, "P('x', 'y')", 1, {8}, {0, 1, 2, 3, 4, 5, 6, 7}, 2, {64, 128},
     0, {0}, SM_OK, {64, 128}},
    {"1 process, explicit", "x=4,y=2", 0, {0}, "P('x', 'y')", 1, {8}, {0, 1, 2, 3, 4, 5, 6, 7}, 2,
     {64, 128}, 1, {64, 128}, SM_OK, {64, 128}},
    {"global equals local", "x=8", 0, {0}, "P(None, 'x')", P4x2, 2, {64, 128}, 1, {64, 128}, SM_OK,
     {64, 128}},
    /* the reference's first non-uniform example: rows uniform, columns not */
    {"seed 1, inferred", SEED1, {2, 4}, 0, {0}, SM_EINVAL, {0}, "non-uniform along dimension 1",
     "pass global_shape"},
    {"seed 1, (4,4)", SEED1, {2, 4}, 1, {4, 4}, SM_OK, {4, 4}},
    {"seed 1, (2,4)", SEED1, {2, 4}, 1, {2, 4}, SM_OK, {2, 4}},
    {"seed 1, (8,4)", SEED1, {2, 4}, 1, {8, 4}, SM_EINVAL, {0}, "in dimension 0 the local size is 2",
     "global size 8 or the 4 elements process 0 addresses"},
    {"seed 1, (4,12)", SEED1, {2, 4}, 1, {4, 12}, SM_EINVAL, {0}, "in dimension 1",
     "the 6 elements"},
    {"seed 1, local (2,2)", SEED1, {2, 2}, 1, {4, 4}, SM_OK, {4, 4}},
    /* the second example: uniform in both dimensions */
    {"seed 2, inferred", SEED2, {2, 2}, 0, {0}, SM_OK, {4, 4}},
    {"seed 2, (4,4)", SEED2, {2, 2}, 1, {4, 4}, SM_OK, {4, 4}},
    {"seed 2, (2,4)", SEED2, {2, 2}, 1, {2, 4}, SM_OK, {2, 4}},
    {"seed 2, (4,2)", SEED2, {2, 2}, 1, {4, 2}, SM_EINVAL, {0},
     "dimension 1 of the global array has size 2, which is not divisible by 4"},
    {"seed 2, (2,2)", SEED2, {2, 2}, 1, {2, 2}, SM_EINVAL, {0}, "not divisible by 4"},
    {"seed 2 as 2x2 blocks, inferred", SEED2B, {2, 2}, 0, {0}, SM_OK, {4, 4}},
    {"seed 2 as 2x2 blocks, (2,2)", SEED2B, {2, 2}, 1, {2, 2}, SM_OK, {2, 2}},
    {"seed 2 as 2x2 blocks, (2,4)", SEED2B, {2, 2}, 1, {2, 4}, SM_OK, {2, 4}},
    {"seed 2 as 2x2 blocks, (4,2)", SEED2B, {2, 2}, 1, {4, 2}, SM_OK, {4, 2}},
    {"seed 2 as 2x2 blocks, (4,4)", SEED2B, {2, 2}, 1, {4, 4}, SM_OK, {4, 4}},
    /* processes holding different numbers of shards */
    {"3+5 devices, inferred", "x=8", 0, {0}, "P('x')", 2, {3, 5}, {0, 1, 2, 3, 4, 5, 6, 7}, 1,
     {8}, 0, {0}, SM_EINVAL, {0}, "non-uniform along dimension 0", "global_shape"},
    {"3+5 devices, whole", "x=8", 0, {0}, "P('x')", 2, {3, 5}, {0, 1, 2, 3, 4, 5, 6, 7}, 1, {8}, 1,
     {8}, SM_OK, {8}},
    {"3+5 devices, partial", "x=8", 0, {0}, "P('x')", 2, {3, 5}, {0, 1, 2, 3, 4, 5, 6, 7}, 1, {3},
     1, {8}, SM_EINVAL, {0}, "process 1 addresses (5 shards of 1)", "local size is 3"},
    {"non-uniform in both dimensions", "x=2,y=2", 0, {0}, "P('x', 'y')", 2, {1, 3}, {0, 1, 2, 3},
     2, {2, 2}, 0, {0}, SM_EINVAL, {0}, "dimensions 0, 1", NULL},
    /* errors */
    {"inferred size overflows", "x=8", 0, {0}, "P('x')", P4x2, 1, {INT64_MAX / 2}, 0, {0},
     SM_EOVERFLOW, {0}, "global size of dimension 0", "overflows"},
    {"negative local size", "x=8", 0, {0}, "P('x')", P4x2, 2, {-2, 4}, 0, {0}, SM_EINVAL, {0},
     "dimension 0 of the local data has negative size -2"},
    {"one process, other global", "x=4,y=2", 0, {0}, "P('x')", 1, {8}, {0, 1, 2, 3, 4, 5, 6, 7},
     2, {16, 128}, 1, {64, 128}, SM_EINVAL, {0}, "with one process",
     "equal the local shape [16,128], got [64,128]"},
    {"device not in mesh", "x=8", 0, {0}, "P('x')", 4, {2, 2, 2, 2}, {0, 1, 2, 3, 4, 5, 6, 9}, 1,
     {2}, 0, {0}, SM_EINVAL, {0}, "device 9 of process 3 is not in the mesh"},
    {"device twice", "x=8", 0, {0}, "P('x')", 4, {2, 2, 2, 2}, {0, 1, 2, 3, 4, 5, 6, 1}, 1, {2}, 0,
     {0}, SM_EINVAL, {0}, "device 1 belongs to both process 0 and process 3"},
    {"device missing", "x=8", 0, {0}, "P('x')", 4, {2, 2, 2, 1}, {0, 1, 2, 3, 4, 5, 6}, 1, {2}, 0,
     {0}, SM_EINVAL, {0}, "device 7 of the mesh belongs to no process"},
    {"negative count", "x=8", 0, {0}, "P('x')", 2, {-1, 8}, {0, 1, 2, 3, 4, 5, 6, 7}, 1, {2}, 0,
     {0}, SM_EINVAL, {0}, "negative device count"},
    {"no process", "x=8", 0, {0}, "P('x')", 0, {0}, {0}, 1, {2}, 0, {0}, SM_EINVAL, {0},
     "needs 1 to 1024 processes, got 0"},
    {"rank mismatch", "x=8", 0, {0}, "P('x')", P4x2, 2, {2, 4}, 1, {16}, SM_EINVAL, {0},
     "different ranks"},
    {"spec too long", "x=8", 0, {0}, "P(None, 'x')", P4x2, 1, {16}, 0, {0}, SM_EINVAL, {0},
     "has 2 entries but the local data has rank 1"},
    {"unknown axis", "x=8", 0, {0}, "P('y')", P4x2, 1, {16}, 0, {0}, SM_EINVAL, {0},
     "refers to mesh axis 'y'"},
    {"explicit global not divisible", "x=8", 0, {0}, "P(None, 'x')", P4x2, 2, {64, 32}, 1,
     {64, 132}, SM_EINVAL, {0}, "dimension 1 of the global array has size 132",
     "not divisible by 8"},
    {"inferred global not divisible", "x=8", 0, {0}, "P(None, 'x')", P4x2, 2, {64, 33}, 0, {0},
     SM_EINVAL, {0}, "has size 132, which is not divisible by 8"},
    {"local size wrong", "x=8", 0, {0}, "P(None, 'x')", P4x2, 2, {64, 48}, 1, {64, 128}, SM_EINVAL,
     {0}, "the 32 elements process 0 addresses (2 shards of 16)", "local size is 48"},
};
/* clang-format on */

/* Global coordinate of local position i along dim d of process p's data,
 * by the rule: whole dimension, or the concatenation in increasing order
 * of the distinct shard ranges the process's devices need. */
static int64_t local_to_global(const sm_local_proc *lp, const sm_shape *g, int d, int64_t i)
{
    if (lp->local_shape.dims[d] == g->dims[d])
        return i;
    int64_t starts[SM_MAX_DEVICES];
    int n = 0;
    int64_t shard = lp->devices[0].global_index.r[d].stop - lp->devices[0].global_index.r[d].start;
    for (int k = 0; k < lp->ndevices; k++) {
        int64_t s = lp->devices[k].global_index.r[d].start, j = n;
        int dup = 0;
        for (int q = 0; q < n; q++)
            dup |= starts[q] == s;
        if (dup)
            continue;
        while (j > 0 && starts[j - 1] > s) {
            starts[j] = starts[j - 1];
            j--;
        }
        starts[j] = s;
        n++;
    }
    return starts[i / shard] + i % shard;
}

/* Every device must receive, from its process's local data, exactly its
 * slice of the global array (element value = row-major global offset). */
static void check_plan_data(const sm_local_plan *plan)
{
    const sm_shape *g = &plan->global_shape;
    for (int p = 0; p < plan->nprocs; p++) {
        const sm_local_proc *lp = &plan->procs[p];
        for (int k = 0; k < lp->ndevices; k++) {
            const sm_local_device *ld = &lp->devices[k];
            ck_assert_int_eq(ld->local_slice.rank, g->rank);
            int64_t ext[2] = {1, 1};
            for (int d = 0; d < g->rank; d++) {
                ext[d] = ld->global_index.r[d].stop - ld->global_index.r[d].start;
                ck_assert_int_eq(ld->local_slice.r[d].stop - ld->local_slice.r[d].start, ext[d]);
                ck_assert_int_ge(ld->local_slice.r[d].start, 0);
                ck_assert_int_le(ld->local_slice.r[d].stop, lp->local_shape.dims[d]);
            }
            for (int64_t a = 0; a < ext[0]; a++) {
                for (int64_t b = 0; b < (g->rank > 1 ? ext[1] : 1); b++) {
                    int64_t la = ld->local_slice.r[0].start + a;
                    int64_t ga = local_to_global(lp, g, 0, la);
                    ck_assert_int_eq(ga, ld->global_index.r[0].start + a);
                    if (g->rank > 1) {
                        int64_t lb = ld->local_slice.r[1].start + b;
                        ck_assert_int_eq(local_to_global(lp, g, 1, lb),
                                         ld->global_index.r[1].start + b);
                    }
                }
            }
        }
    }
}

static sm_err make_plan(const plan_case *c, sm_local_plan **plan, char *err, size_t errlen)
{
    sm_mesh m;
    sm_pspec p;
    sm_sharding s;
    ck_assert_int_eq(sm_mesh_parse(c->mesh, c->ndev ? c->devs : NULL, c->ndev, &m, err, errlen),
                     SM_OK);
    ck_assert_int_eq(sm_pspec_parse(c->spec, &p, err, errlen), SM_OK);
    s.mesh = m;
    s.spec = p;
    sm_proc_map pm = {c->nprocs, c->proc_ndev, c->proc_devs};
    sm_shape local = {c->rank, {c->local[0], c->local[1]}};
    sm_shape global = {c->rank, {c->global[0], c->global[1]}};
    if (c->has_global && c->rank == 2 && c->global[1] == 0)
        global = (sm_shape){1, {c->global[0]}}; /* the rank-mismatch row */
    return sm_local_plan_create(&s, &pm, &local, c->has_global ? &global : NULL, plan, err, errlen);
}

START_TEST(test_plan_table)
{
    const plan_case *c = &plan_cases[_i];
    sm_local_plan *plan = (sm_local_plan *)1;
    char err[512] = "";
    sm_err rc = make_plan(c, &plan, err, sizeof err);
    ck_assert_msg(rc == c->code, "%s: got %s (%s)", c->name, sm_err_name(rc), err);
    if (rc != SM_OK) {
        ck_assert_ptr_null(plan);
        ck_assert_msg(strstr(err, c->words), "%s: \"%s\"", c->name, err);
        if (c->words2)
            ck_assert_msg(strstr(err, c->words2), "%s: \"%s\"", c->name, err);
        return;
    }
    ck_assert_int_eq(plan->global_shape.rank, c->rank);
    for (int d = 0; d < c->rank; d++)
        ck_assert_msg(plan->global_shape.dims[d] == c->want[d], "%s: global dim %d is %lld",
                      c->name, d, (long long)plan->global_shape.dims[d]);
    ck_assert_int_eq(plan->nprocs, c->nprocs);
    int off = 0;
    for (int p = 0; p < plan->nprocs; p++) {
        ck_assert_int_eq(plan->procs[p].process, p);
        ck_assert_int_eq(plan->procs[p].ndevices, c->proc_ndev[p]);
        for (int d = 0; d < c->rank; d++)
            ck_assert_int_eq(plan->procs[p].local_shape.dims[d], c->local[d]);
        /* devices in mesh order, each one of this process */
        for (int k = 0; k < plan->procs[p].ndevices; k++) {
            const sm_local_device *ld = &plan->procs[p].devices[k];
            int mine = 0;
            for (int q = 0; q < c->proc_ndev[p]; q++)
                mine |= c->proc_devs[off + q] == ld->device;
            ck_assert(mine);
            if (k)
                ck_assert_int_gt(ld->pos, plan->procs[p].devices[k - 1].pos);
        }
        off += c->proc_ndev[p];
    }
    check_plan_data(plan);
    sm_local_plan_free(plan);
}
END_TEST

/* Exact device rows of a few plans: device, global [a,b) x2, local [a,b) x2. */
typedef struct {
    int32_t device;
    int64_t g[4], l[4];
} dev_row;

static void expect_rows(int ci, int p, const dev_row *rows, int n)
{
    sm_local_plan *plan;
    char err[512];
    ck_assert_int_eq(make_plan(&plan_cases[ci], &plan, err, sizeof err), SM_OK);
    ck_assert_int_eq(plan->procs[p].ndevices, n);
    for (int k = 0; k < n; k++) {
        const sm_local_device *ld = &plan->procs[p].devices[k];
        ck_assert_int_eq(ld->device, rows[k].device);
        for (int d = 0; d < 2; d++) {
            ck_assert_int_eq(ld->global_index.r[d].start, rows[k].g[2 * d]);
            ck_assert_int_eq(ld->global_index.r[d].stop, rows[k].g[2 * d + 1]);
            ck_assert_int_eq(ld->local_slice.r[d].start, rows[k].l[2 * d]);
            ck_assert_int_eq(ld->local_slice.r[d].stop, rows[k].l[2 * d + 1]);
        }
    }
    sm_local_plan_free(plan);
}

static int case_index(const char *name)
{
    for (int i = 0; i < N(plan_cases); i++)
        if (strcmp(plan_cases[i].name, name) == 0)
            return i;
    ck_abort_msg("no case %s", name);
    return -1;
}

START_TEST(test_plan_rows)
{
    /* guide, 1-D columns: process 1 holds columns 32..64 */
    dev_row cols[] = {{2, {0, 64, 32, 48}, {0, 64, 0, 16}}, {3, {0, 64, 48, 64}, {0, 64, 16, 32}}};
    expect_rows(case_index("1-D columns"), 1, cols, 2);
    /* permuted: process 0's devices hold columns 0..16 and 64..80 */
    dev_row perm[] = {{0, {0, 64, 0, 16}, {0, 64, 0, 16}}, {1, {0, 64, 64, 80}, {0, 64, 16, 32}}};
    expect_rows(case_index("1-D columns, permuted"), 0, perm, 2);
    /* 2-D: process 3 holds rows 48..64, both column halves */
    dev_row twod[] = {{6, {48, 64, 0, 64}, {0, 16, 0, 64}},
                      {7, {48, 64, 64, 128}, {0, 16, 64, 128}}};
    expect_rows(case_index("2-D"), 3, twod, 2);
    /* replicas across processes: processes 2 and 3 load the second half */
    dev_row spread2[] = {{4, {32, 64, 0, 128}, {0, 32, 0, 128}},
                         {5, {32, 64, 0, 128}, {0, 32, 0, 128}}};
    expect_rows(case_index("replicas across processes"), 2, spread2, 2);
    dev_row spread1[] = {{2, {0, 32, 0, 128}, {0, 32, 0, 128}},
                         {3, {0, 32, 0, 128}, {0, 32, 0, 128}}};
    expect_rows(case_index("replicas across processes"), 1, spread1, 2);
    /* seed 1 with global (4,4): process 3 holds devices 6 and 7 at
     * columns 0 and 3 of rows 2..4, columns held whole */
    dev_row seed1[] = {{6, {2, 4, 0, 1}, {0, 2, 0, 1}}, {7, {2, 4, 3, 4}, {0, 2, 3, 4}}};
    expect_rows(case_index("seed 1, (4,4)"), 3, seed1, 2);
    /* seed 1, local (2,2): columns 0 and 3 packed together */
    dev_row seed1b[] = {{6, {2, 4, 0, 1}, {0, 2, 0, 1}}, {7, {2, 4, 3, 4}, {0, 2, 1, 2}}};
    expect_rows(case_index("seed 1, local (2,2)"), 3, seed1b, 2);
    /* seed 2: process 0 has devices 0 and 1 at columns 0 and 2 */
    dev_row seed2[] = {{0, {0, 2, 0, 1}, {0, 2, 0, 1}}, {1, {0, 2, 2, 3}, {0, 2, 1, 2}}};
    expect_rows(case_index("seed 2, inferred"), 0, seed2, 2);
    /* diagonal: each process needs every row and column range */
    dev_row diag[] = {{1, {0, 2, 2, 4}, {0, 2, 2, 4}}, {2, {2, 4, 0, 2}, {2, 4, 0, 2}}};
    expect_rows(case_index("2 processes, diagonal"), 1, diag, 2);
}
END_TEST

static Suite *shard_local_suite(void)
{
    return SUITE_CASE(suite_create("shard_local"), "local", 0, NULL,
                      {test_plan_table, N(plan_cases)}, {test_plan_rows});
}

int main(void)
{
    return suite_main(shard_local_suite());
}
