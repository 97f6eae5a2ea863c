/* Check suite for common/exec: every op of the op table run sharded (mesh
 * (4,2) or (8,)) and on a single device (the same program on a mesh of
 * size 1), with the local runner, on random integer-valued inputs; the
 * results must be bitwise equal (integer-valued data makes float sums exact
 * in any order; rows with a tolerance say so). A row may give a reference
 * body for the single-device run (e.g. a collective against the global
 * computation it stands for). The table must cover every op kind. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sm_exec_local.h"
#include "ir_testutil.h"
#include "suite_main.h"

typedef struct {
    const char *mesh;   /* sharded mesh */
    const char *params; /* parameter list */
    const char *out;    /* out_specs */
    const char *body;   /* returned expression */
    const char *ref;    /* single-device body, NULL: the same */
    double tol;         /* 0: bitwise */
} op_row;

#define M42 "i=4 j=2"
#define M8  "i=8"
#define XY  "x: f32[8,16] @ P('i', 'j'), y: f32[8,16] @ P('i', 'j')"
#define XI  "x: f32[8,16] @ P('i', None)"
#define NI  "n: i32[8,16] @ P('i', 'j'), m: i32[8,16] @ P('i', 'j')"
#define PIJ "P('i', 'j')"
#define XJ  "x: f32[8,16] @ P(None, 'j')"
#define XJS "P(None, 'j')"

static const op_row rows[] = {
    /* elementwise */
    {M42, XY, PIJ, "add(x, y)"},
    {M42, XY, PIJ, "subtract(x, y)"},
    {M42, XY, PIJ, "multiply(x, y)"},
    {M42, XY, PIJ, "divide(x, y + 9)"},
    {M42, XY, PIJ, "mod(x, y)"},
    {M42, XY, PIJ, "floor_divide(x, y + 9)"},
    {M42, NI, PIJ, "n // m - m // 3", "floor_divide(n, m) - floor_divide(m, 3)"},
    {M42, XY, PIJ, "maximum(x, y)"},
    {M42, XY, PIJ, "minimum(x, y)"},
    {M42, XY, PIJ, "power(x, abs(y))"},
    {M42, NI, PIJ, "n + m % 3 - n * m"},
    {M42, NI, PIJ, "divide(n, m)"},
    {M42, NI, PIJ, "power(n, abs(m))"},
    {M42, NI, PIJ, "n + 0.5"},
    {M42, NI, PIJ, "n * 2 - 1"},
    {M42, "x: f32[8,16] @ P('i', 'j'), b: f32[16] @ P('j')", PIJ, "x * b + 1"},
    {M42, XY, PIJ, "negative(x)"},
    {M42, XY, PIJ, "abs(x)"},
    {M42, XY, PIJ, "exp(x)"},
    {M42, XY, PIJ, "log(abs(x) + 1)"},
    {M42, XY, PIJ, "sin(x)"},
    {M42, XY, PIJ, "cos(x)"},
    {M42, XY, PIJ, "tanh(x)"},
    {M42, XY, PIJ, "sqrt(abs(x))"},
    {M42, XY, PIJ, "rsqrt(abs(x) + 1)"},
    {M42, XY, PIJ, "logistic(x)"},
    {M42, XY, PIJ, "sign(x)"},
    {M42, XY, PIJ, "floor(x / 3)"},
    {M42, XY, PIJ, "ceil(x / 3)"},
    {M42, XY, PIJ, "round(x / 2)"},
    {M42, NI, PIJ, "exp(n)"},
    {M42, XY, PIJ, "equal(x, y)"},
    {M42, XY, PIJ, "not_equal(x, y)"},
    {M42, XY, PIJ, "less(x, y)"},
    {M42, XY, PIJ, "less_equal(x, y)"},
    {M42, XY, PIJ, "greater(x, y)"},
    {M42, XY, PIJ, "greater_equal(x, 1)"},
    {M42, NI, PIJ, "n < 0.5"},
    {M42, XY, PIJ, "log1p(abs(x))"},
    {M42, XY, PIJ, "expm1(x / 8)"},
    {M42, XY, PIJ, "tan(x / 16)"},
    {M42, XY, PIJ, "erf(x / 4)"},
    {M42, XY, PIJ, "arcsin(x / 4) + arccos(y / 4) + arctan(x)"},
    {M42, XY, PIJ, "arctan2(x, y)"},
    {M42, NI, PIJ, "arctan2(n, m)"},
    {M42, XY, PIJ, "sinh(x / 2) + cosh(y / 2) + arcsinh(x)"},
    {M42, XY, PIJ, "arccosh(abs(x) + 1) + arctanh(y / 5) + cbrt(x)"},
    {M42, NI, PIJ, "(n & m) | (m ^ 3)", "bitwise_or(bitwise_and(n, m), bitwise_xor(m, 3))"},
    {M42, NI, PIJ, "~n + bitwise_not(m)", "-n - m - 2"},
    {M42, NI, PIJ, "n * (6 & 3) + (~2 | 8) + (5 ^ True)", "n * 2 - 3 + 4"},
    {M42, XY, PIJ, "logical_and(x > 0, y) | logical_or(x, y < 2)"},
    {M42, XY, PIJ, "logical_xor(x, y > 1) & logical_not(y)"},
    {M42, XY, PIJ, "where(x > y, x, y * 2)"},
    {M42, XY ", " NI, PIJ, "where(n > 0, x, m)"},
    {M42, XY, PIJ, "astype(x, i32)"},
    {M42, NI, PIJ, "astype(n, f64) / 7"},
    {M42, NI, PIJ, "astype(n, bool)"},
    {M42, XY, PIJ, "bitcast_convert_type(bitcast_convert_type(x, i32) + 1, f32)"},
    /* creation */
    {M42, XY, "P()", "zeros((2, 3), f32)"},
    {M42, XY, "P()", "ones((4,), i64)"},
    {M42, XY, "P()", "full((2, 2), 2.5, f64)"},
    {M42, XY, "P()", "arange(2, 11, 3, f32)"},
    {M42, XY, "P()", "arange(5)"},
    {M42, XY, "P()", "const(3.5, f64)"},
    {M42, XY, PIJ, "x + zeros((1, x.shape[1]), f32)"},
    /* products */
    {M42, "a: f32[8,16] @ P('i', None), b: f32[16,12] @ P(None, 'j')", PIJ, "dot(a, b)"},
    {M42, "a: i32[8,16] @ P('i', None), b: i32[16,12] @ P(None, 'j')", PIJ, "a @ b"},
    {M42, "a: f32[8,16] @ P('i', 'j'), b: f32[16,12] @ P('j', None)", "P('i', None)",
     "psum(dot(a, b), 'j')", "dot(a, b)"},
    {M42, "a: f32[4,8,16] @ P('i'), b: f32[4,16,6] @ P('i')", "P('i')", "matmul(a, b)"},
    {M42, "a: f32[8,16] @ P('i'), v: f32[16] @ P()", "P('i')", "matmul(a, v)"},
    {M42, "a: f64[8,16] @ P('i', None), b: f64[16,12] @ P(None, 'j')", PIJ,
     "einsum('ij,jk->ik', a, b)"},
    {M42, "a: f32[4,8,16] @ P('i'), b: f32[4,16,6] @ P('i')", "P('i')",
     "einsum('bij,bjk->bik', a, b)"},
    {M42, XY, "P('j', 'i')", "einsum('ij->ji', x)", "transpose(x)"},
    {M42, "s: f32[8,8] @ P()", "P()", "einsum('ii->i', s)",
     "sum(s * (reshape(arange(8), (8, 1)) == reshape(arange(8), (1, 8))), axis=1)"},
    {M42, XI, "P('i')", "einsum('ij->i', x)", "sum(x, axis=1)"},
    {M42, XY, PIJ, "einsum('...,...->...', x, y)", "einsum('ij,ij->ij', x, y)"},
    /* '...' broadcasts size 1 as numpy's: per device (1,8,16) against (2,16,6) */
    {M42, "a: f32[1,8,16] @ P(), b: f32[8,16,6] @ P('i')", "P('i')",
     "einsum('...ij,...jk->...ik', a, b)",
     "einsum('bij,bjk->bik', broadcast_to(a, (8, 8, 16)), b)"},
    {M42, "a: f32[8,1,16] @ P('i'), b: f32[3,16] @ P()", "P('i')", "einsum('...j,...j->...', a, b)",
     "sum(broadcast_to(a, (8, 3, 16)) * b, axis=2)"},
    /* reductions */
    {M42, XI, "P('i')", "sum(x, axis=1)"},
    {M42, XI, "P('i')", "mean(x, axis=-1)"},
    {M42, XI, "P('i')", "max(x, axis=1)"},
    {M42, XI, "P('i')", "min(x, axis=1, keepdims=True)"},
    {M42, XY, "P()", "psum(sum(x), ('i', 'j'))", "sum(x)"},
    {M42, XY, "P()", "pmax(max(x), ('j', 'i'))", "max(x)"},
    {M42, XY, "P(None, 'j')", "psum(sum(x, axis=0, keepdims=True), 'i')",
     "sum(x, axis=0, keepdims=True)"},
    {M42, "n: i32[8,16] @ P('i', None)", "P('i')", "mean(n, axis=1) + sum(n > 0, axis=1)"},
    {M42, "n: i32[8,16] @ P('i', None)", "P('i')", "sum(n, axis=1, dtype=f64) / 3"},
    {M42, XI, "P('i')", "prod(x / 8 + 1, axis=1)"},
    {M42, XY, "P()", "psum(astype(prod(x / 8 + 1), f64), ('i', 'j'))",
     "sum(astype(prod(reshape(x / 8 + 1, (4, 2, 2, 8)), axis=(1, 3)), f64))", 1e-12},
    {M42, XI, "P('i')", "any(x > 3, axis=1)"},
    {M42, XI, "P('i')", "all(x > -5, axis=1, keepdims=True)"},
    {M42, XI, "P('i')", "argmax(x, axis=1)"},
    {M42, XI, "P('i')", "argmin(x, axis=-1, keepdims=True)"},
    {M42, XI ", k: i32[5] @ P()", "P('i')", "take(x, k - 6, axis=1)"},
    /* segment sums of each block, completed across blocks (ids out of range dropped) */
    {M42, XI ", k: i32[8] @ P('i')", "P()", "psum(segment_sum(x, k - 1, 3), 'i')"},
    {M42, NI ", k: i32[8] @ P('i')", "P(None, 'j')", "psum(segment_sum(n * 2, k % 4, 4), 'i')"},
    /* scatters: each device updates its columns of every row named (the
     * indices are random: negative ones count from the end, repeated ones
     * apply in order, rows out of range are dropped) */
    {M42, XJ ", k: i32[6] @ P(), u: f32[6,16] @ P(None, 'j')", XJS, "scatter(x, k, u)"},
    {M42, XJ ", k: i32[2,3] @ P(), u: f32[2,3,16] @ P(None, None, 'j')", XJS,
     "scatter_add(x, k, u) + scatter_mul(x, k % 8, u / 4)"},
    {M42, XJ ", k: i32[6] @ P(), u: f32[6,16] @ P(None, 'j')", XJS,
     "scatter_min(x, k, u) - scatter_max(x, k - 4, u)"},
    {M42, "n: i32[8,16] @ P(None, 'j'), m: i32[8,16] @ P(None, 'j'), k: i32[8] @ P()", XJS,
     "scatter_add(n, k, m) * scatter_max(m, k, n) + scatter(n, k % 3, m)"},
    {M42, XI ", k: i32[8,3] @ P('i')", "P('i')", "take_along_axis(x, k, 1, mode='clip')"},
    {M42, XI ", k: i32[8,3] @ P('i')", "P('i')", "take_along_axis(x, k + 7, 1, mode='wrap')"},
    {M42, XI, "P('i')", "sort(round(x / 4))"},
    {M42, XI, "P('i')", "argsort(round(x / 4), axis=1)"},
    {M42, XI, "P('i')", "cumsum(x, axis=1)"},
    {M42, XI, "P('i')", "cumprod(x / 8, axis=1)"},
    {M42, XI, "P('i')", "cummax(x, axis=1)"},
    {M42, XI, "P('i')", "cummin(x, axis=1)"},
    /* shape */
    {M42, XI, "P('i')", "reshape(x, (-1, 4, 4))"},
    {M42, XY, "P('j', 'i')", "transpose(x, (1, 0))"},
    {M42, XY, "P(None, 'i', 'j')", "expand_dims(x, 0)"},
    {M42, XY, PIJ, "squeeze(expand_dims(x, 2), 2)"},
    {M42, "b: f32[16] @ P('j')", "P(None, 'j')", "broadcast_to(b, (3, b.shape[0]))"},
    {M42, XI, "P('i')", "x[:, 1:3]"},
    {M42, XI, "P('i')", "slice(x, (0, 4), (x.shape[0], 9))"},
    {M42, XI, "P('i')", "x[::2, 1:15:4]", "reshape(x, (4, 2, 16))[:, 0, 1:15:4]"},
    {M42, XI, "P('i')", "rev(x, (1,))"},
    {M42, XI, "P('i')", "x[:, 14::-3]"},
    {M42, XI, "P('i')", "dynamic_slice(x, (0, 2), (x.shape[0], 3))"},
    {M42, XI, "P('i')", "dynamic_slice_in_dim(x, 14, 5, axis=1)"},
    {M42, XI, "P('i')", "dynamic_update_slice(x, zeros((x.shape[0], 2), f32), (0, 3))"},
    {M42, XI ", y: f32[8,4] @ P('i')", "P('i')", "concatenate((x, y, x), axis=1)"},
    {M42, XI, "P('i')", "pad(x, ((0, 0), (1, 2)))"},
    {M42, XI, "P('i')", "tile(x, (1, 2))"},
    {M42, XI, "P('i')", "roll(x, 3, axis=1)"},
    {M42, "x: f32[4,6,8] @ P('i')", "P('i')", "roll(x, (1, -2), (1, 2))"},
    {M42, "x: f32[4,6,8] @ P()", "P()", "roll(x, 5)"},
    /* collectives, against the global computation they stand for */
    {M42, XY, "P(None, 'j')", "psum(x, 'i')", "sum(reshape(x, (4, 2, 16)), axis=0)"},
    {M42, XY, "P(None, 'j')", "pmean(x, 'i')", "mean(reshape(x, (4, 2, 16)), axis=0)"},
    {M42, XY, "P(None, 'j')", "pmax(x, 'i')", "max(reshape(x, (4, 2, 16)), axis=0)"},
    {M42, XY, "P(None, 'j')", "pmin(x, 'i')", "min(reshape(x, (4, 2, 16)), axis=0)"},
    {M42, XY, "P(None, 'j')", "all_gather(x, 'i', tiled=True)", "x"},
    {M42, XY, "P(None, None, 'j')", "all_gather(x, 'i')", "reshape(x, (4, 2, 16))"},
    {M42, XY, PIJ, "psum_scatter(all_gather(x, 'i', tiled=True), 'i', tiled=True)", "x * 4"},
    {M8, "x: f32[64,8] @ P('i')", "P('i')", "all_to_all(x, 'i', 0, 1, tiled=True)",
     "reshape(transpose(reshape(x, (8, 8, 8)), (1, 0, 2)), (8, 64))"},
    {M8, "x: f32[64,8] @ P('i')", "P('i')",
     "ppermute(x, 'i', [(k, (k + 1) % 8) for k in range(8)])", "roll(x, 8, axis=0)"},
    {M8, "x: f32[8,3] @ P('i')", "P('i')", "x + axis_index('i') * axis_size('i')",
     "x + reshape(arange(8), (8, 1)) * 8"},
    {M42, XY, PIJ, "pvary(x, 'i')", "x"},
    /* the partial sums of a sharded contraction, left pending, then summed */
    {M42, "a: f32[8,16] @ P('i', 'j'), b: f32[16,12] @ P('j', None)", "P('i', None)",
     "psum(pcast(dot(a, b), 'j', to='unreduced'), 'j')", "dot(a, b)"},
    /* non-integer data: float reassociation, compared with a tolerance */
    {M42, XY, "P(None, 'j')", "psum(x * 0.1, 'i')", "sum(reshape(x * 0.1, (4, 2, 16)), axis=0)",
     1e-6},
    {M42, "a: f32[8,16] @ P('i', 'j'), b: f32[16,12] @ P('j', None)", "P('i', None)",
     "psum(dot(a * 0.37, b), 'j')", "dot(a * 0.37, b)", 1e-5},
    /* empty blocks */
    {M42, XI, "P('i')", "psum(all_gather(x[:, 3:3], 'j', axis=1, tiled=True), 'j') * 2",
     "x[:, 3:3] * 4"},
    {M42, XI, "P('i')",
     "all_to_all(ppermute(expand_dims(x[:, 3:3], 2), 'j', [(0, 1)]), 'j', 1, 2, tiled=True)",
     "tile(expand_dims(x[:, 3:3], 2), (1, 1, 2))"},
};
#define NROWS ((int)(sizeof rows / sizeof rows[0]))

static void program_text(const op_row *r, int single, char *buf, size_t len)
{
    char mesh[64];
    snprintf(mesh, sizeof mesh, "%s", r->mesh);
    if (single)
        for (char *s = mesh; *s; s++)
            if (s > mesh && s[-1] == '=')
                *s = '1';
    snprintf(buf, len, "mesh %s\nshard_map f(%s) -> %s:\n    return %s\n", mesh, r->params, r->out,
             single && r->ref ? r->ref : r->body);
}

/* Random integer-valued inputs in [-4, 4] (in the parameter's dtype). */
static void make_inputs(const sm_program *p, int seed, sm_array **in)
{
    char err[256];
    uint64_t st = (uint64_t)seed * 2654435761u + 7;
    for (int i = 0; i < p->nparams; i++) {
        ck_assert_int_eq(
            sm_array_create(p->params[i].dtype, &p->params[i].global, &in[i], err, sizeof err),
            SM_OK);
        int64_t n = 1;
        for (int d = 0; d < in[i]->shape.rank; d++)
            n *= in[i]->shape.dims[d];
        for (int64_t k = 0; k < n; k++) {
            st = st * 6364136223846793005ull + 1442695040888963407ull;
            int v = (int)((st >> 33) % 9) - 4;
            switch (in[i]->dtype) {
            case SM_F32:
                ((float *)in[i]->data)[k] = (float)v;
                break;
            case SM_F64:
                ((double *)in[i]->data)[k] = v;
                break;
            case SM_I32:
                ((int32_t *)in[i]->data)[k] = v;
                break;
            case SM_I64:
                ((int64_t *)in[i]->data)[k] = v;
                break;
            default:
                ((uint8_t *)in[i]->data)[k] = (uint8_t)(v > 0);
                break;
            }
        }
    }
}

static int close_enough(const sm_array *a, const sm_array *b, double tol)
{
    int64_t n = a->nbytes / (int64_t)sm_dtype_size(a->dtype);
    for (int64_t k = 0; k < n; k++) {
        double x = a->dtype == SM_F32 ? ((float *)a->data)[k] : ((double *)a->data)[k];
        double y = b->dtype == SM_F32 ? ((float *)b->data)[k] : ((double *)b->data)[k];
        if (fabs(x - y) > tol * (1 + fabs(y)))
            return 0;
    }
    return 1;
}

START_TEST(test_op_sharded_vs_single)
{
    const op_row *r = &rows[_i];
    char ts[2048], t1[2048], err[1024] = "";
    program_text(r, 0, ts, sizeof ts);
    program_text(r, 1, t1, sizeof t1);
    sm_program *ps = parse_ok(ts, 0), *p1 = parse_ok(t1, 0);
    ck_assert_int_eq(ps->nparams, p1->nparams);
    sm_array *in[8] = {0}, *os = NULL, *o1 = NULL;
    make_inputs(ps, _i, in);
    ck_assert_msg(sm_exec_local_run(ps, in, &os, NULL, err, sizeof err) == SM_OK, "%s\n%s", err,
                  ts);
    ck_assert_msg(sm_exec_local_run(p1, in, &o1, NULL, err, sizeof err) == SM_OK, "%s\n%s", err,
                  t1);
    char a[64], b[64];
    ck_assert_msg(os->dtype == o1->dtype && sm_shape_equal(&os->shape, &o1->shape),
                  "sharded %s%s vs single %s%s\n%s", sm_dtype_name(os->dtype),
                  sm_shape_format(&os->shape, a, sizeof a), sm_dtype_name(o1->dtype),
                  sm_shape_format(&o1->shape, b, sizeof b), ts);
    if (r->tol > 0)
        ck_assert_msg(close_enough(os, o1, r->tol), "results differ beyond %g\n%s", r->tol, ts);
    else
        ck_assert_msg(os->nbytes == 0 || memcmp(os->data, o1->data, (size_t)os->nbytes) == 0,
                      "sharded and single-device results differ\n%s", ts);
    for (int i = 0; i < ps->nparams; i++)
        sm_array_free(in[i]);
    sm_array_free(os);
    sm_array_free(o1);
    sm_program_free(ps);
    sm_program_free(p1);
}
END_TEST

/* The table exercises every op kind of sm_ir_ops.h. */
START_TEST(test_table_covers_every_op)
{
    int seen[SM_OP_COUNT] = {0};
    for (int i = 0; i < NROWS; i++) {
        char t[2048];
        program_text(&rows[i], 0, t, sizeof t);
        sm_program *p = parse_ok(t, 0);
        for (int k = 0; k < p->nops; k++)
            seen[p->ops[k].kind] = 1;
        sm_program_free(p);
    }
    seen[SM_OP_AXIS_SIZE] = 1;            /* static in the text form: test_builder_axis_size */
    for (int k = 0; k < SM_OP_COUNT; k++) /* global-view only: test_lower; loops: test_while */
        seen[k] |= sm_op_global_only((sm_op_kind)k) || sm_op_loop((sm_op_kind)k);
    for (int k = 0; k < SM_OP_COUNT; k++)
        ck_assert_msg(seen[k], "no row runs op '%s'", sm_op_name((sm_op_kind)k));
}
END_TEST

/* Runs p on in (its outputs into out) on local devices, asserting it succeeds. */
static void run_local(const sm_program *p, sm_array *const *in, sm_array **out)
{
    char err[512];
    ck_assert_msg(sm_exec_local_run(p, in, out, NULL, err, sizeof err) == SM_OK, "%s", err);
}

/* A new array of dtype t and shape s holding the values v. */
static sm_array *array_of(sm_dtype t, sm_shape s, const void *v)
{
    sm_array *a = NULL;
    char err[512];
    ck_assert_int_eq(sm_array_create(t, &s, &a, err, sizeof err), SM_OK);
    memcpy(a->data, v, (size_t)a->nbytes);
    return a;
}

/* Frees the n arrays of a. */
static void free_all(sm_array **a, int n)
{
    for (int k = 0; k < n; k++)
        sm_array_free(a[k]);
}

/* Spot values: semantics the sharded-vs-single comparison cannot see. */
START_TEST(test_spot_values)
{
    sm_program *p =
        parse_ok("mesh i=2\n"
                 "shard_map f(n: i32[4] @ P('i')) -> (P('i'), P('i'), P('i'), P()):\n"
                 "    return n % 3, n / 2, round(n * 0.5), psum(1, 'i') + 0 * axis_index('i')\n",
                 0);
    sm_array *o[4];
    int32_t v[4] = {-7, -1, 5, 3};
    sm_array *n = array_of(SM_I32, (sm_shape){.rank = 1, .dims = {4}}, v);
    run_local(p, &n, o);
    const int32_t *mod = o[0]->data;
    ck_assert_int_eq(mod[0], 2); /* numpy: the divisor's sign */
    ck_assert_int_eq(mod[1], 2);
    ck_assert_int_eq(o[1]->dtype, SM_F32);
    ck_assert_float_eq(((float *)o[1]->data)[0], -3.5f);
    ck_assert_float_eq(((float *)o[2]->data)[0], -4.0f); /* half to even */
    ck_assert_float_eq(((float *)o[2]->data)[3], 2.0f);
    ck_assert_int_eq(((int32_t *)o[3]->data)[0], 2);
    free_all(o, 4);
    sm_array_free(n);
    sm_program_free(p);
}
END_TEST

/* A Python float literal meeting a float64 array is its float64 value (a
 * weak literal is materialized as float32; it must not pass through it):
 * in arithmetic, comparisons and where. */
START_TEST(test_float_literals_keep_float64)
{
    sm_program *p =
        parse_ok("mesh i=2\n"
                 "shard_map f(x: f64[2] @ P('i')) -> (P('i'), P('i'), P('i'), P('i')):\n"
                 "    return x * 0.1234567891234567, x < 0.1234567891234567, "
                 "where(x > 0, 0.1234567891234567, x), x * 0.5\n",
                 0);
    sm_array *o[4];
    double v[2] = {1.0, 0.1234567891234567};
    sm_array *x = array_of(SM_F64, (sm_shape){.rank = 1, .dims = {2}}, v);
    run_local(p, &x, o);
    ck_assert_int_eq(o[0]->dtype, SM_F64);
    ck_assert(((double *)o[0]->data)[0] == 0.1234567891234567);
    ck_assert_int_eq(((uint8_t *)o[1]->data)[1], 0); /* equal, not above its float32 */
    ck_assert(((double *)o[2]->data)[0] == 0.1234567891234567);
    ck_assert(((double *)o[3]->data)[1] == 0.1234567891234567 * 0.5);
    free_all(o, 4);
    sm_array_free(x);
    sm_program_free(p);
}
END_TEST

/* psum and pmean of bools, as JAX: summed as int32 ([True, False] over two
 * devices holding it gives [1, 1] and [0.5, 0.5]); pmax stays bool. */
START_TEST(test_bool_reductions)
{
    sm_program *p = parse_ok("mesh i=2\n"
                             "shard_map f(b: bool[4] @ P('i')) -> (P(), P(), P()):\n"
                             "    return psum(b, 'i'), pmean(b, 'i'), pmax(b, 'i')\n",
                             0);
    sm_array *o[3];
    uint8_t v[4] = {1, 0, 1, 1};
    sm_array *b = array_of(SM_BOOL, (sm_shape){.rank = 1, .dims = {4}}, v);
    ck_assert_int_eq(p->values[p->returns[0]].dtype, SM_I32);
    ck_assert_int_eq(p->values[p->returns[1]].dtype, SM_F32);
    ck_assert_int_eq(p->values[p->returns[2]].dtype, SM_BOOL);
    run_local(p, &b, o);
    ck_assert_int_eq(((int32_t *)o[0]->data)[0], 2);
    ck_assert_int_eq(((int32_t *)o[0]->data)[1], 1);
    ck_assert_float_eq(((float *)o[1]->data)[0], 1.0f);
    ck_assert_float_eq(((float *)o[1]->data)[1], 0.5f);
    ck_assert_int_eq(((uint8_t *)o[2]->data)[0], 1);
    ck_assert_int_eq(((uint8_t *)o[2]->data)[1], 1);
    free_all(o, 3);
    sm_array_free(b);
    sm_program_free(p);
}
END_TEST

/* JAX's shard_map_test: test_all_gather_with_axis_index_groups,
 * test_reduce_scatter_with_axis_index_groups, test_all_gather_invariant_basic. */
START_TEST(test_axis_index_groups)
{
    char err[512];
    sm_array *a, *o;
    sm_shape s = {.rank = 2, .dims = {8, 8}};
    ck_assert_int_eq(sm_array_create(SM_F32, &s, &a, err, sizeof err), SM_OK);
    float *av = a->data;
    for (int k = 0; k < 64; k++)
        av[k] = (float)k;
    sm_program *p =
        parse_ok("mesh x=2 y=2 z=2\n"
                 "shard_map fwd(a: f32[8,8] @ P('x', ('y', 'z'))) -> P('x', ('y', 'z')):\n"
                 "    return all_gather(a, ('y', 'z'), axis_index_groups=((0, 1), (2, 3)),"
                 " axis=-1, tiled=True)\n",
                 0);
    run_local(p, &a, &o);
    ck_assert_int_eq(o->shape.dims[1], 16);
    for (int r = 0; r < 8; r++) /* device (i, rank q) holds a[rows i, block q / 2] */
        for (int c = 0; c < 16; c++) {
            int q = c / 4, src = (q / 2) * 4 + c % 4;
            ck_assert_float_eq(((float *)o->data)[r * 16 + c], av[r * 8 + src]);
        }
    sm_array_free(o);
    sm_program_free(p);
    p = parse_ok(
        "mesh x=2 y=2 z=2\n"
        "shard_map fwd(a: f32[8,8] @ P(None, ('x', 'y', 'z'))) -> P(None, ('x', 'y', 'z')):\n"
        "    return psum_scatter(a, ('x', 'y', 'z'), scatter_dimension=0,"
        " axis_index_groups=((0, 2, 4, 6), (1, 3, 5, 7)), tiled=True)\n",
        0);
    run_local(p, &a, &o);
    ck_assert_int_eq(o->shape.dims[0], 2);
    for (int r = 0; r < 8; r++) { /* rank r: group r % 2, chunk r / 2 of the group's sum */
        for (int row = 0; row < 2; row++) {
            float want = 0;
            for (int m = r % 2; m < 8; m += 2)
                want += av[((r / 2) * 2 + row) * 8 + m];
            ck_assert_float_eq(((float *)o->data)[row * 8 + r], want);
        }
    }
    sm_array_free(o);
    sm_program_free(p);
    /* JAX's test_all_to_all_with_axis_index_groups: within groups {0, 2, 4, 6}
     * and {1, 3, 5, 7} of the 8 devices, member m's rows go to member m of
     * its group as column block */
    p = parse_ok("mesh x=8\n"
                 "shard_map fwd(a: f32[8,8] @ P('x', None)) -> P(None, 'x'):\n"
                 "    return all_to_all(a, 'x', 1, 0, axis_index_groups=((0, 2, 4, 6), "
                 "(1, 3, 5, 7)), tiled=True)\n",
                 0);
    run_local(p, &a, &o);
    ck_assert_int_eq(o->shape.dims[0], 4);
    ck_assert_int_eq(o->shape.dims[1], 16);
    for (int r = 0; r < 8; r++) /* device r (member r / 2 of group r % 2): its block */
        for (int row = 0; row < 4; row++)
            for (int c = 0; c < 2; c++) { /* row `row` from member row of its group */
                int src = 2 * row + r % 2;
                ck_assert_float_eq(((float *)o->data)[row * 16 + r * 2 + c],
                                   av[src * 8 + (r / 2) * 2 + c]);
            }
    sm_array_free(o);
    sm_program_free(p);
    /* groups that do not cover the ranks, or differ in size */
    char text[512];
    snprintf(text, sizeof text, "%s",
             "mesh x=4\nshard_map f(a: f32[8] @ P('x')) -> P('x'):\n"
             "    return psum(a, 'x', axis_index_groups=[[0, 1], [1, 2]])\n");
    ck_assert_int_eq(sm_program_parse(text, "t.shmap", &p, err, sizeof err), SM_EINVAL);
    ck_assert_msg(strstr(err, "each of the ranks 0..3 once"), "%s", err);
    /* psum within groups: the result still varies over the axis */
    p = parse_ok("mesh x=4\nshard_map f(a: f32[8] @ P('x')) -> P('x'):\n"
                 "    return psum(a, 'x', axis_index_groups=[[0, 1], [2, 3]])\n",
                 0);
    ck_assert_uint_eq(p->values[p->returns[0]].vma, 1);
    sm_array_free(a);
    sm_program_free(p);
    /* all_gather(..., to='invarying'): replicated, so out_specs P() passes the check */
    sm_shape s8 = {.rank = 1, .dims = {8}};
    ck_assert_int_eq(sm_array_create(SM_F32, &s8, &a, err, sizeof err), SM_OK);
    for (int k = 0; k < 8; k++)
        ((float *)a->data)[k] = (float)k;
    p = parse_ok("mesh x=4\nshard_map f(a: f32[8] @ P('x')) -> P():\n"
                 "    return all_gather(a, 'x', tiled=True, to='invarying')\n",
                 0);
    ck_assert_int_eq(sm_program_verify(p, 1, err, sizeof err), SM_OK);
    run_local(p, &a, &o);
    ck_assert_int_eq(memcmp(o->data, a->data, 32), 0);
    sm_array_free(o);
    sm_array_free(a);
    sm_program_free(p);
}
END_TEST

/* One value returned twice, and a parameter returned as it is. */
START_TEST(test_repeated_returns)
{
    sm_program *p =
        parse_ok("mesh i=4 j=2\n"
                 "shard_map f(x: f32[8,16] @ P('i', 'j')) -> (P('i', 'j'), P('i', 'j'), "
                 "P('i', 'j')):\n"
                 "    y = x * 2\n"
                 "    return y, x, y\n",
                 0);
    sm_array *in[1], *o[3];
    make_inputs(p, 1, in);
    run_local(p, in, o);
    ck_assert(memcmp(o[1]->data, in[0]->data, (size_t)in[0]->nbytes) == 0);
    ck_assert(memcmp(o[0]->data, o[2]->data, (size_t)o[0]->nbytes) == 0);
    for (int k = 0; k < 8 * 16; k++)
        ck_assert_float_eq(((float *)o[0]->data)[k], 2 * ((float *)in[0]->data)[k]);
    free_all(o, 3);
    sm_array_free(in[0]);
    sm_program_free(p);
}
END_TEST

/* Ops nothing returned depends on are skipped (XLA's dead code elimination):
 * a dead collective runs on no device, so a device run with no collectives
 * at all succeeds; the same collective returned needs them. */
START_TEST(test_dead_ops_skipped)
{
    static const char *const text[2] = {
        "mesh i=4 j=2\nshard_map f(x: f32[8,16] @ P('i', 'j')) -> P('i', 'j'):\n"
        "    d = psum(x, 'i')\n    e = d * 3\n    y = x * 2\n    return y\n",
        "mesh i=4 j=2\nshard_map f(x: f32[8,16] @ P('i', 'j')) -> P('i', 'j'):\n"
        "    d = psum(x, 'i')\n    e = d * 3\n    y = x * 2\n    return y + e\n"};
    for (int t = 0; t < 2; t++) {
        sm_program *p = parse_ok(text[t], 0);
        sm_shape blk = {.rank = 2, .dims = {2, 8}};
        float v[16];
        for (int k = 0; k < 16; k++)
            v[k] = (float)k;
        sm_array *in[1] = {array_of(SM_F32, blk, v)}, *out[1] = {NULL};
        char err[512] = "";
        sm_err e = sm_exec_run(p, 0, NULL, NULL, NULL, in, out, err, sizeof err);
        if (t == 0) {
            ck_assert_msg(e == SM_OK, "%s", err);
            for (int k = 0; k < 16; k++)
                ck_assert_float_eq(((float *)out[0]->data)[k], 2 * v[k]);
        } else {
            ck_assert_msg(e != SM_OK && strstr(err, "psum"), "%s", err);
        }
        sm_array_free(out[0]);
        sm_array_free(in[0]);
        sm_program_free(p);
    }
}
END_TEST

/* An explicit device order changes which device runs which block, not the
 * result; errors name the device id. */
START_TEST(test_device_order)
{
    const char *body = "shard_map f(x: f32[8,16] @ P('i', 'j')) -> (P(None, 'j'), P('i', 'j')):\n"
                       "    return psum(x, 'i'), ppermute(x, 'j', [(0, 1)]) + axis_index('i')\n";
    char t1[512], t2[512];
    snprintf(t1, sizeof t1, "mesh i=4 j=2\n%s", body);
    snprintf(t2, sizeof t2, "mesh i=4 j=2 devices=[7, 5, 3, 1, 6, 4, 2, 0]\n%s", body);
    sm_program *p1 = parse_ok(t1, 0), *p2 = parse_ok(t2, 0);
    sm_array *in[1], *a[2], *b[2];
    make_inputs(p1, 3, in);
    run_local(p1, in, a);
    run_local(p2, in, b);
    for (int r = 0; r < 2; r++) {
        ck_assert(memcmp(a[r]->data, b[r]->data, (size_t)a[r]->nbytes) == 0);
        sm_array_free(a[r]);
        sm_array_free(b[r]);
    }
    sm_array_free(in[0]);
    sm_program_free(p1);
    sm_program_free(p2);
}
END_TEST

/* axis_size as an op (the C builder; the text form folds it to a number). */
START_TEST(test_builder_axis_size)
{
    sm_mesh m;
    char err[512];
    const char *names[] = {"i", "j"};
    int64_t sizes[] = {4, 2};
    ck_assert_int_eq(sm_mesh_init(&m, 2, names, sizes, NULL, 8, err, sizeof err), SM_OK);
    sm_program *p;
    ck_assert_int_eq(sm_program_create(&m, "f", &p, err, sizeof err), SM_OK);
    sm_ir_attrs a = {.naxes = 2};
    strcpy(a.axes[0], "j");
    strcpy(a.axes[1], "i");
    int v, w;
    ck_assert_int_eq(sm_program_add_op(p, "axis_size", NULL, 0, &a, &v, err, sizeof err), SM_OK);
    ck_assert_int_eq(sm_program_add_op(p, "axis_index", NULL, 0, &a, &w, err, sizeof err), SM_OK);
    int ops[2] = {v, w};
    ck_assert_int_eq(sm_program_add_op(p, "multiply", ops, 2, NULL, &w, err, sizeof err), SM_OK);
    sm_pspec spec[2] = {{0}, {0}};
    int rets[2] = {v, w};
    ck_assert_int_eq(sm_program_set_returns(p, rets, spec, 2, err, sizeof err), SM_OK);
    ck_assert_msg(sm_program_verify(p, 0, err, sizeof err) == SM_OK, "%s", err);
    sm_array *o[2];
    run_local(p, NULL, o);
    ck_assert_int_eq(((int32_t *)o[0]->data)[0], 8);
    ck_assert_int_eq(((int32_t *)o[1]->data)[0], 0); /* device 0: rank 0 */
    sm_array_free(o[0]);
    sm_array_free(o[1]);
    sm_program_free(p);
}
END_TEST

/* A program text that must fail to parse or verify, with a message holding want. */
static void program_fails(const char *text, const char *want)
{
    sm_program *p = NULL;
    char err[1024] = "";
    sm_err e = sm_program_parse(text, "t.shmap", &p, err, sizeof err);
    if (!e)
        e = sm_program_verify(p, 1, err, sizeof err);
    sm_program_free(p);
    ck_assert_msg(e != SM_OK, "accepted:\n%s", text);
    ck_assert_msg(strstr(err, want), "error '%s' lacks '%s'", err, want);
}

/* while loops: a count known only as the loop runs, a condition over a
 * collective (every device runs the same turns), a device-dependent number
 * of turns without collectives, a body that swaps two carries, nested
 * loops, a loop that never runs, and the printed text parsing back to the
 * same program. */
START_TEST(test_while)
{
    sm_program *p = parse_ok(
        "mesh i=2\n"
        "shard_map f(x: f32[4] @ P('i'), n: i32[4] @ P('i')) -> (P('i'), P('i'), P('i'), P('i'), "
        "P('i'), P(), P('i'), P('i'), P('i')):\n"
        "    i = 0\n"
        "    acc = x\n"
        "    while i < 5:\n"
        "        acc = acc * 2\n"
        "        i = i + 1\n"
        "    t = x + 0\n"
        "    turns = 0\n"
        "    while pmax(max(abs(t)), 'i') > 1:\n"
        "        t = t / 2\n"
        "        turns = turns + 1\n"
        "    v = n\n"
        "    c = zeros((1,), dtype=i32)\n"
        "    while any(v > 1):\n"
        "        v = where(v > 1, v // 2, v)\n"
        "        c = c + 1\n"
        "    a, b, k = x, x * 0 - 1, 0\n"
        "    while k < 3:\n"
        "        a, b = b, a\n"
        "        k = k + 1\n"
        "    outer = zeros((1,), dtype=i32)\n"
        "    j = 0\n"
        "    while j < 3:\n"
        "        q = 0\n"
        "        while q < j:\n"
        "            outer = outer + 1\n"
        "            q = q + 1\n"
        "        j = j + 1\n"
        "    never = x\n"
        "    while i < 0:\n"
        "        never = never * 0\n"
        "    base = x * 3\n" /* read on every turn, as a carry's next value */
        "    z, m = x, 0\n"
        "    while m < 2:\n"
        "        z = base\n"
        "        m = m + 1\n"
        "    outer2 = zeros((1,), dtype=i32)\n"
        "    j2 = 0\n"
        "    while j2 < 3:\n"
        "        inc = j2 + 1\n" /* made in the outer body, read by the inner loop */
        "        q2 = 0\n"
        "        while q2 < 2:\n"
        "            outer2 = outer2 + inc\n"
        "            q2 = q2 + 1\n"
        "        j2 = j2 + 1\n"
        "    return acc, t, c, a, outer, turns, never, z + base, outer2\n",
        1);
    sm_array *o[9];
    float xv[4] = {1, -3, 0.5f, 12};
    int32_t nv[4] = {1, 2, 9, 40};
    sm_array *in[2] = {array_of(SM_F32, (sm_shape){.rank = 1, .dims = {4}}, xv),
                       array_of(SM_I32, (sm_shape){.rank = 1, .dims = {4}}, nv)};
    run_local(p, in, o);
    for (int k = 0; k < 4; k++) {
        ck_assert_float_eq(((float *)o[0]->data)[k], xv[k] * 32);
        ck_assert_float_eq(((float *)o[1]->data)[k], xv[k] / 16); /* 12 / 16 <= 1 */
        ck_assert_float_eq(((float *)o[3]->data)[k], -1);         /* swapped 3 times */
        ck_assert_float_eq(((float *)o[6]->data)[k], xv[k]);
        ck_assert_float_eq(((float *)o[7]->data)[k], xv[k] * 6);
    }
    ck_assert_int_eq(((int32_t *)o[8]->data)[0], 12); /* 2 * (1 + 2 + 3) */
    ck_assert_int_eq(((int32_t *)o[2]->data)[0], 1);  /* device 0: 1, 2 -> 1 turn */
    ck_assert_int_eq(((int32_t *)o[2]->data)[1], 5);  /* device 1: 9, 40 -> 40 needs 5 */
    ck_assert_int_eq(((int32_t *)o[4]->data)[0], 3);  /* 0 + 1 + 2 */
    ck_assert_int_eq(((int32_t *)o[5]->data)[0], 4);
    free_all(o, 9);
    free_all(in, 2);

    /* printed, the program parses back to itself */
    sm_strbuf b = {0};
    ck_assert_int_eq(sm_program_print(p, &b), SM_OK);
    sm_program *q = parse_ok(b.data, 1);
    ck_assert_msg(sm_program_equal(p, q), "printed differently:\n%s", b.data);
    ck_assert(strstr(b.data, "while "));
    sm_program_free(q);
    sm_strbuf_free(&b);
    sm_program_free(p);

    /* the sentences */
#define HDR "mesh i=2\nshard_map f(x: f32[4] @ P('i')) -> P('i'):\n"
    program_fails(HDR "    k = 0\n    while k < 3:\n        k = k + 0.5\n    return x\n",
                  "the carried value 'k' has type i32[]");
    program_fails(HDR "    k = 0\n    while k < 3:\n        y = x + 1\n    return x\n",
                  "rebinds no name bound before the loop");
    program_fails(HDR "    k = 0\n    while k < 3:\n        y = x + 1\n        k = k + 1\n"
                      "    return y\n",
                  "'y'");
    program_fails(HDR "    y = x\n    while y:\n        y = y + 1\n    return y\n",
                  "the condition must be a boolean scalar, but got f32[2]");
    program_fails(HDR "    y = psum(x, 'i')\n    while y[0] < 3:\n        y = y + x\n"
                      "    return y\n",
                  "the varying manual axes do not match. This might be fixed by applying "
                  "pvary(..., ('i',)) to the first value");
    program_fails(HDR "    y = x\n    while True:\n        y = y + 1\n    return y\n",
                  "must be an array computed from what the loop carries");
    program_fails(HDR "    return while_carry(x)\n", "while_carry is not called");
#undef HDR
}
END_TEST

/* What the check accepts runs: every elementwise op of the op table (its
 * signature "x:v" or "x:v y:v") on every dtype, each program the check
 * takes runs on a device without a kernel's refusal (uint8 arithmetic and
 * bool's + and * failed on the device, taken by the check). */
START_TEST(test_checked_elementwise_ops_run)
{
    static const sm_dtype types[] = {SM_F32, SM_F64, SM_I32, SM_I64, SM_U8, SM_BOOL, SM_F16};
    int ran = 0;
    for (int k = 0; k < SM_OP_COUNT; k++) {
        const char *sig = sm_op_signature((sm_op_kind)k);
        int binary = !strcmp(sig, "x:v y:v");
        if (!binary && strcmp(sig, "x:v"))
            continue;
        for (size_t d = 0; d < sizeof types / sizeof types[0]; d++) {
            const char *tn = sm_dtype_name(types[d]);
            char text[512], err[1024] = "";
            snprintf(text, sizeof text,
                     "mesh i=1 devices=[0]\nshard_map f(x: %s[4] @ P(), y: %s[4] @ P()) -> P():\n"
                     "    return %s(x%s)\n",
                     tn, tn, sm_op_name((sm_op_kind)k), binary ? ", y" : "");
            sm_program *p = NULL;
            if (sm_program_parse(text, "t.shmap", &p, err, sizeof err) ||
                sm_program_verify(p, 0, err, sizeof err)) {
                sm_program_free(p); /* refused by the check: fine */
                continue;
            }
            sm_shape s = {.rank = 1, .dims = {4}};
            sm_array *in[2] = {NULL, NULL}, *out[1] = {NULL};
            for (int a = 0; a < 2; a++)
                ck_assert_int_eq(sm_array_create(types[d], &s, &in[a], err, sizeof err), SM_OK);
            sm_err e = sm_exec_local_run(p, in, out, NULL, err, sizeof err);
            ck_assert_msg(e == SM_OK, "%s on %s: the check took it, the device refused: %s",
                          sm_op_name((sm_op_kind)k), tn, err);
            ran++;
            sm_array_free(out[0]);
            sm_array_free(in[0]);
            sm_array_free(in[1]);
            sm_program_free(p);
        }
    }
    ck_assert_int_gt(ran, 100);
}
END_TEST

/* The same for the rest of the op table: products, reductions, scans,
 * sorts, gathers and scatters, shape ops and collectives, each on every
 * dtype (x and y of it, k indices), so that a program the check takes
 * runs (products of bool and uint8 failed on the device, taken by the
 * check). Every expression runs on float32 at least. */
START_TEST(test_checked_ops_run)
{
    static const sm_dtype types[] = {SM_F32, SM_F64, SM_I32, SM_I64, SM_U8, SM_BOOL, SM_F16};
    static const char *const exprs[] = {
        "dot(x, y)",
        "matmul(x, y)",
        "einsum('ij,kj->ik', x, y)",
        "einsum('ij,jk->k', x, y)",
        "einsum('ij->j', x)",
        "einsum('ij,ij->ij', x, y)",
        "x * dot(x[0], y[1])",
        "sum(x, axis=0)",
        "prod(x, axis=1)",
        "max(x, axis=1)",
        "min(x, axis=0)",
        "mean(x, axis=1)",
        "any(x, axis=1)",
        "all(x, axis=0)",
        "argmax(x, axis=1)",
        "argmin(x, axis=0)",
        "cumsum(x, axis=1)",
        "cumprod(x, axis=0)",
        "cummax(x, axis=1)",
        "cummin(x, axis=0)",
        "sort(x, axis=1)",
        "argsort(x, axis=0)",
        "take(x, k, axis=0)",
        "take_along_axis(x, k, 1, mode='clip')",
        "segment_sum(x, k, 4)",
        "scatter(x, k[:, 0], y)",
        "scatter_add(x, k[:, 0], y)",
        "scatter_mul(x, k[:, 0], y)",
        "scatter_max(x, k[:, 0], y)",
        "scatter_min(x, k[:, 0], y)",
        "where(x > y, x, y)",
        "transpose(x)",
        "reshape(x, (2, 8))",
        "concatenate((x, y), 0)",
        "pad(x, ((0, 1), (2, 0)))",
        "tile(x, (2, 1))",
        "roll(x, 1, 1)",
        "rev(x, (0,))",
        "broadcast_to(x[0], (4, 4))",
        "x[1:3, ::2]",
        "dynamic_slice(x, (k[0, 0], 1), (2, 2))",
        "dynamic_update_slice(x, y[:2, :2], (1, k[0, 0]))",
        "psum(x, 'i')",
        "pmean(x, 'i')",
        "pmax(x, 'i')",
        "pmin(x, 'i')",
        "all_gather(x, 'i', axis=0, tiled=True)",
        "psum_scatter(x, 'i', scatter_dimension=0, tiled=True)",
        "all_to_all(x, 'i', 0, 1, tiled=True)",
        "ppermute(x, 'i', ((0, 1), (1, 0)))",
        "astype(x, 'float32') + astype(y, 'int32')",
    };
    int ran = 0;
    for (size_t q = 0; q < sizeof exprs / sizeof exprs[0]; q++) {
        int ran_f32 = 0;
        for (size_t d = 0; d < sizeof types / sizeof types[0]; d++) {
            const char *tn = sm_dtype_name(types[d]);
            char text[768], err[1024] = "";
            snprintf(text, sizeof text,
                     "mesh i=2\nshard_map f(x: %s[8,4] @ P('i'), y: %s[8,4] @ P('i'), "
                     "k: i32[8,4] @ P('i')) -> P('i'):\n"
                     "    return %s\n",
                     tn, tn, exprs[q]);
            sm_program *p = NULL;
            if (sm_program_parse(text, "t.shmap", &p, err, sizeof err) ||
                sm_program_verify(p, 0, err, sizeof err)) {
                ck_assert_msg(types[d] != SM_F32, "%s: refused on f32: %s", exprs[q], err);
                sm_program_free(p); /* refused by the check: fine */
                continue;
            }
            sm_shape s = {.rank = 2, .dims = {8, 4}};
            sm_array *in[3] = {NULL, NULL, NULL}, *out[1] = {NULL};
            for (int a = 0; a < 3; a++) {
                ck_assert_int_eq(
                    sm_array_create(a == 2 ? SM_I32 : types[d], &s, &in[a], err, sizeof err),
                    SM_OK);
                double v[32]; /* indices 0..3, bools both ways */
                for (int e = 0; e < 32; e++)
                    v[e] = (double)((e * 7 + a) % 4);
                ck_assert_int_eq(
                    sm_kern_astype(SM_F64, v, in[a]->dtype, in[a]->data, 32, err, sizeof err),
                    SM_OK);
            }
            sm_err e = sm_exec_local_run(p, in, out, NULL, err, sizeof err);
            ck_assert_msg(e == SM_OK, "%s on %s: the check took it, the device refused: %s",
                          exprs[q], tn, err);
            ran++;
            ran_f32 += types[d] == SM_F32;
            for (int a = 0; a < 3; a++)
                sm_array_free(in[a]);
            sm_array_free(out[0]);
            sm_program_free(p);
        }
        ck_assert_msg(ran_f32 == 1, "%s did not run on f32", exprs[q]);
    }
    ck_assert_int_gt(ran, 200);
}
END_TEST

/* The half floats run the scans, sorts, segment sums and scatters in
 * float32: each result is float32's on the same values, rounded once (they
 * were refused: "cumsum does not accept dtype float16"). The values are not
 * integers, so sums kept in the half float would round at every step; a
 * NaN and a -inf are among them (NaN sorts last, as for float32), and the
 * indices repeat (an element updated several times is rounded once). */
START_TEST(test_half_ops_round_float32)
{
    static const sm_dtype halves[] = {SM_F16, SM_BF16};
    static const char *const exprs[] = {
        "cumsum(x, axis=1)",
        "cumsum(x, axis=0)",
        "cumsum(x)",
        "cumprod(x, axis=0)",
        "cummax(x, axis=1)",
        "cummin(x, axis=0)",
        "sort(x, axis=1)",
        "sort(x, axis=0)",
        "argsort(x, axis=1)",
        "argsort(x, axis=0)",
        "segment_sum(x, k[:, 0], 3)",
        "segment_sum(y, k, 4)",
        "scatter(x, k[:, 0], y)",
        "scatter_add(x, k[:, 0], y)",
        "scatter_mul(x, k[:, 0], y)",
        "scatter_max(x, k[:, 0], y)",
        "scatter_min(x, k[:, 0], y)",
    };
    for (size_t q = 0; q < sizeof exprs / sizeof exprs[0]; q++)
        for (size_t h = 0; h < sizeof halves / sizeof halves[0]; h++) {
            sm_array *in[2][3], *out[2] = {NULL, NULL};
            sm_shape s = {.rank = 2, .dims = {8, 4}};
            char err[1024] = "";
            for (int r = 0; r < 2; r++) { /* r 0: the half float, r 1: float32 */
                sm_dtype t = r ? SM_F32 : halves[h];
                char text[512];
                snprintf(text, sizeof text,
                         "mesh i=1 devices=[0]\nshard_map f(x: %s[8,4] @ P(), y: %s[8,4] @ P(), "
                         "k: i32[8,4] @ P()) -> P():\n    return %s\n",
                         sm_dtype_name(t), sm_dtype_name(t), exprs[q]);
                sm_program *p = parse_ok(text, 0);
                for (int a = 0; a < 3; a++) {
                    double v[32];
                    for (int e = 0; e < 32; e++)
                        v[e] = a == 2 ? (e * 7) % 4 : ((e * 37 + a * 5) % 23) * 0.37 - 3.1;
                    v[13] = NAN;
                    v[22] = -INFINITY;
                    ck_assert_int_eq(
                        sm_array_create(a == 2 ? SM_I32 : t, &s, &in[r][a], err, sizeof err),
                        SM_OK);
                    if (a == 2 || !r) {
                        ck_assert_int_eq(sm_kern_astype(SM_F64, v, in[r][a]->dtype, in[r][a]->data,
                                                        32, err, sizeof err),
                                         SM_OK);
                    } else { /* float32 of the half float's values */
                        ck_assert_int_eq(sm_kern_astype(halves[h], in[0][a]->data, SM_F32,
                                                        in[r][a]->data, 32, err, sizeof err),
                                         SM_OK);
                    }
                }
                sm_err e = sm_exec_local_run(p, in[r], &out[r], NULL, err, sizeof err);
                ck_assert_msg(e == SM_OK, "%s on %s: %s", exprs[q], sm_dtype_name(t), err);
                sm_program_free(p);
            }
            int arg = out[1]->dtype == SM_I32;
            ck_assert_int_eq(out[0]->dtype, arg ? SM_I32 : halves[h]);
            int64_t n = out[1]->nbytes / (int64_t)sm_dtype_size(out[1]->dtype);
            unsigned char want[256];
            if (arg)
                memcpy(want, out[1]->data, (size_t)out[1]->nbytes);
            else
                ck_assert_int_eq(
                    sm_kern_astype(SM_F32, out[1]->data, halves[h], want, n, err, sizeof err),
                    SM_OK);
            ck_assert_msg(out[0]->nbytes == n * (int64_t)sm_dtype_size(out[0]->dtype) &&
                              memcmp(out[0]->data, want, (size_t)out[0]->nbytes) == 0,
                          "%s on %s: not float32's result rounded", exprs[q],
                          sm_dtype_name(halves[h]));
            for (int r = 0; r < 2; r++) {
                free_all(in[r], 3);
                sm_array_free(out[r]);
            }
        }
}
END_TEST

int main(void)
{
    return suite_main(SUITE_CASE(
        suite_create("exec"), "ops", 60, NULL, {test_op_sharded_vs_single, NROWS},
        {test_table_covers_every_op}, {test_spot_values}, {test_bool_reductions},
        {test_float_literals_keep_float64}, {test_axis_index_groups}, {test_builder_axis_size},
        {test_repeated_returns}, {test_dead_ops_skipped}, {test_device_order}, {test_while},
        {test_checked_elementwise_ops_run}, {test_checked_ops_run}, {test_half_ops_round_float32}));
}
