/* Check suite for common/ir, op by op: one table row per op (a small valid
 * program and the expected block type of its result, with varying axes),
 * a print/parse round trip of every row, a check that every op of the table
 * has a row, and the C builder API. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sm_ir.h"
#include "suite_main.h"

/* Parameters every row can use (mesh i=4 j=2):
 *   x f32[8,16] @ P('i', None) -> block f32[2,16]{V:i}
 *   y f32[16,4] @ P()          -> block f32[16,4]
 *   k i32[8]    @ P('i')       -> block i32[2]{V:i}
 *   c bool[8,16] @ P('i', None)-> block bool[2,16]{V:i} */
#define PARAMS                                                                                     \
    "x: f32[8,16] @ P('i', None), y: f32[16,4] @ P(), k: i32[8] @ P('i'), "                        \
    "c: bool[8,16] @ P('i', None)"

typedef struct {
    const char *expr; /* the returned expression */
    const char *type; /* its block type */
} op_case;

static const op_case ops[] = {
    /* elementwise */
    {"add(x, 1)", "f32[2,16]{V:i}"},
    {"subtract(x, y[:, 0])", "f32[2,16]{V:i}"},
    {"multiply(x, 2.0)", "f32[2,16]{V:i}"},
    {"divide(k, 2)", "f32[2]{V:i}"},
    {"mod(k, 3)", "i32[2]{V:i}"},
    /* an int literal beyond int32 is a weak int64: its bits survive */
    {"astype(k, i64) & 4294967295", "i64[2]{V:i}"},
    {"4294967296", "i64[]"},
    {"divide(k, 4294967296)", "f32[2]{V:i}"}, /* true division: the literal is a float */
    {"maximum(x, 0.0)", "f32[2,16]{V:i}"},
    {"minimum(k, 1)", "i32[2]{V:i}"},
    {"power(x, 2)", "f32[2,16]{V:i}"},
    {"x ** 2", "f32[2,16]{V:i}"},
    {"negative(x)", "f32[2,16]{V:i}"},
    {"-k", "i32[2]{V:i}"},
    {"abs(k)", "i32[2]{V:i}"},
    {"exp(k)", "f32[2]{V:i}"},
    {"log(x)", "f32[2,16]{V:i}"},
    {"sin(y)", "f32[16,4]"},
    {"cos(y)", "f32[16,4]"},
    {"tanh(x)", "f32[2,16]{V:i}"},
    {"sqrt(x)", "f32[2,16]{V:i}"},
    {"rsqrt(x)", "f32[2,16]{V:i}"},
    {"logistic(x)", "f32[2,16]{V:i}"},
    {"sign(k)", "i32[2]{V:i}"},
    {"floor(x)", "f32[2,16]{V:i}"},
    {"ceil(x)", "f32[2,16]{V:i}"},
    {"round(x)", "f32[2,16]{V:i}"},
    {"equal(x, 1.0)", "bool[2,16]{V:i}"},
    {"not_equal(k, 0)", "bool[2]{V:i}"},
    {"less(x, y[:, 0][0])", "bool[2,16]{V:i}"},
    {"less_equal(x, 0)", "bool[2,16]{V:i}"},
    {"greater(k, 1)", "bool[2]{V:i}"},
    {"greater_equal(x, 2)", "bool[2,16]{V:i}"},
    {"x >= 2", "bool[2,16]{V:i}"},
    {"log1p(x)", "f32[2,16]{V:i}"},
    {"expm1(k)", "f32[2]{V:i}"},
    {"tan(y)", "f32[16,4]"},
    {"arctan2(y, y)", "f32[16,4]"},
    {"arcsin(y)", "f32[16,4]"},
    {"arccos(y)", "f32[16,4]"},
    {"arctan(y)", "f32[16,4]"},
    {"sinh(y)", "f32[16,4]"},
    {"cosh(y)", "f32[16,4]"},
    {"arcsinh(y)", "f32[16,4]"},
    {"arccosh(y)", "f32[16,4]"},
    {"arctanh(y)", "f32[16,4]"},
    {"cbrt(y)", "f32[16,4]"},
    {"erf(x)", "f32[2,16]{V:i}"},
    {"bitwise_and(k, 6)", "i32[2]{V:i}"},
    {"bitwise_or(c, True)", "bool[2,16]{V:i}"},
    {"bitwise_xor(k, k)", "i32[2]{V:i}"},
    {"bitwise_not(c)", "bool[2,16]{V:i}"},
    {"~k & 3 | k ^ 1", "i32[2]{V:i}"},
    {"logical_and(x, c)", "bool[2,16]{V:i}"},
    {"logical_or(k, 0)", "bool[2]{V:i}"},
    {"logical_xor(y, 1.5)", "bool[16,4]"},
    {"logical_not(x)", "bool[2,16]{V:i}"},
    {"where(c, x, 0.0)", "f32[2,16]{V:i}"},
    {"astype(k, f64)", "f64[2]{V:i}"},
    {"k.astype('float32')", "f32[2]{V:i}"},
    {"bitcast_convert_type(k, f32)", "f32[2]{V:i}"},
    /* creation */
    {"zeros((3, 4), dtype=f32)", "f32[3,4]"},
    {"ones(5)", "f32[5]"},
    {"full((2, 2), 7)", "i32[2,2]"},
    {"full((2,), 1.5, dtype=f64)", "f64[2]"},
    {"arange(10)", "i32[10]"},
    {"arange(2, 10, 3, dtype=f32)", "f32[3]"},
    {"const(3.0)", "f32[]"},
    {"const(3, dtype=i64)", "i64[]"},
    /* products */
    {"dot(x, y)", "f32[2,4]{V:i}"},
    {"matmul(x, y)", "f32[2,4]{V:i}"},
    {"x @ y", "f32[2,4]{V:i}"},
    {"einsum('ij,jk->ik', x, y)", "f32[2,4]{V:i}"},
    {"einsum('ij->j', x)", "f32[16]{V:i}"},
    /* '...' written out as numpy reads it (unused letters, aligned right) */
    {"einsum('...j,jk->...k', x, y)", "f32[2,4]{V:i}"},
    {"einsum('i...,i...', x, x)", "f32[16]{V:i}"},
    /* reductions */
    {"sum(x)", "f32[]{V:i}"},
    {"sum(x, axis=1)", "f32[2]{V:i}"},
    {"mean(k)", "f32[]{V:i}"},
    {"max(x, axis=0, keepdims=True)", "f32[1,16]{V:i}"},
    {"prod(x, axis=1)", "f32[2]{V:i}"},
    {"prod(c, axis=0)", "i32[16]{V:i}"},
    {"sum(k, dtype=f64)", "f64[]{V:i}"},
    {"any(x > 0, axis=1, keepdims=True)", "bool[2,1]{V:i}"},
    {"all(c)", "bool[]{V:i}"},
    {"argmax(x, axis=1)", "i32[2]{V:i}"},
    {"argmin(x, 0, True)", "i32[1,16]{V:i}"},
    {"argmax(y)", "i32[]"},
    {"take(y, k, axis=0)", "f32[2,4]{V:i}"},
    {"take(x, k)", "f32[2]{V:i}"},
    {"take(y, k % 4, 1, mode='clip')", "f32[16,2]{V:i}"},
    {"segment_sum(x, k, 5)", "f32[5,16]{V:i}"},
    {"scatter(y, k, x[:, :4])", "f32[16,4]{V:i}"},
    {"scatter_add(y, k % 16, zeros((2, 4), f32))", "f32[16,4]{V:i}"},
    {"scatter_mul(y, zeros((3, 2), i32), ones((3, 2, 4), f32))", "f32[16,4]"},
    {"scatter_min(x, k, x)", "f32[2,16]{V:i}"},
    {"scatter_max(c, k, c)", "bool[2,16]{V:i}"},
    {"take_along_axis(x, astype(x, i32) % 16, axis=1)", "f32[2,16]{V:i}"},
    {"take_along_axis(y, zeros((1, 4), i32), 0, mode='wrap')", "f32[1,4]"},
    {"sort(x)", "f32[2,16]{V:i}"},
    {"argsort(y, axis=0)", "i32[16,4]"},
    {"cumsum(x, axis=1)", "f32[2,16]{V:i}"},
    {"cumsum(c, axis=-1)", "i32[2,16]{V:i}"},
    {"cumprod(k, dtype=f32)", "f32[2]{V:i}"},
    {"cummax(y)", "f32[64]"},
    {"cummin(x, axis=0)", "f32[2,16]{V:i}"},
    /* the half floats: scans, sorts, segment sums and scatters keep them */
    {"cumsum(astype(x, f16), axis=1)", "f16[2,16]{V:i}"},
    {"cumprod(k, dtype=f16)", "f16[2]{V:i}"},
    {"cummax(astype(y, bf16))", "bf16[64]"},
    {"sort(astype(x, f16))", "f16[2,16]{V:i}"},
    {"argsort(astype(y, bf16), axis=0)", "i32[16,4]"},
    {"segment_sum(astype(x, f16), k, 5)", "f16[5,16]{V:i}"},
    {"scatter_add(astype(y, f16), k % 16, zeros((2, 4), f16))", "f16[16,4]{V:i}"},
    {"scatter_min(astype(x, bf16), k, astype(x, bf16))", "bf16[2,16]{V:i}"},
    {"min(x, axis=(0, -1))", "f32[]{V:i}"},
    /* shape */
    {"reshape(x, (4, 8))", "f32[4,8]{V:i}"},
    {"x.reshape(-1, 2)", "f32[16,2]{V:i}"},
    {"transpose(x)", "f32[16,2]{V:i}"},
    {"transpose(reshape(x, (2, 4, 4)), (1, 2, 0))", "f32[4,4,2]{V:i}"},
    {"x.T", "f32[16,2]{V:i}"},
    {"expand_dims(x, 0)", "f32[1,2,16]{V:i}"},
    {"squeeze(expand_dims(x, 1), 1)", "f32[2,16]{V:i}"},
    {"broadcast_to(k, (3, 2))", "i32[3,2]{V:i}"},
    {"slice(x, (0, 4), (2, 8))", "f32[2,4]{V:i}"},
    {"dynamic_slice(x, (0, axis_index('j')), (2, 8))", "f32[2,8]{V:i,j}"},
    {"dynamic_slice_in_dim(x, 1, 4, axis=1)", "f32[2,4]{V:i}"},
    {"dynamic_update_slice(x, zeros((1, 4)), (1, 2))", "f32[2,16]{V:i}"},
    {"concatenate((x, x), axis=1)", "f32[2,32]{V:i}"},
    {"pad(x, ((1, 1), (0, 2)))", "f32[4,18]{V:i}"},
    {"pad(k, 3)", "i32[8]{V:i}"},
    {"tile(k, (2, 3))", "i32[2,6]{V:i}"},
    {"roll(x, 1, axis=0)", "f32[2,16]{V:i}"},
    {"x[0]", "f32[16]{V:i}"},
    {"x[:, 2:5]", "f32[2,3]{V:i}"},
    {"x[1:, -4:]", "f32[1,4]{V:i}"},
    {"x[-1, 3]", "f32[]{V:i}"},
    {"floor_divide(x, 2)", "f32[2,16]{V:i}"},
    {"k // 3", "i32[2]{V:i}"},
    {"rev(x, (1,))", "f32[2,16]{V:i}"},
    {"x[::-1, 14:2:-3]", "f32[2,4]{V:i}"},
    {"x[::2, 1::3]", "f32[1,5]{V:i}"},
    {"x[:, 3:14:5]", "f32[2,3]{V:i}"},
    {"slice(x, (0, 1), (2, 16), strides=(1, 4))", "f32[2,4]{V:i}"},
    {"x[None, 0, ::8, None]", "f32[1,2,1]{V:i}"},
    {"x[None]", "f32[1,2,16]{V:i}"},
    /* collectives */
    {"psum(x, 'i')", "f32[2,16]"},
    {"pmean(k, 'i')", "f32[2]"},
    {"pmax(x, ('i', 'j'))", "f32[2,16]"},
    {"pmin(x, 'j')", "f32[2,16]{V:i}"},
    {"all_gather(x, 'i')", "f32[4,2,16]{V:i}"},
    {"all_gather(x, 'j', axis=1, tiled=True)", "f32[2,32]{V:i,j}"},
    {"all_gather(k, 'j', axis=1)", "i32[2,2]{V:i,j}"},
    {"psum_scatter(x, 'j', scatter_dimension=1, tiled=True)", "f32[2,8]{V:i,j}"},
    {"psum_scatter(x, 'j')", "f32[16]{V:i,j}"},
    {"ppermute(x, 'i', perm=[(0, 1), (1, 2), (2, 3), (3, 0)])", "f32[2,16]{V:i}"},
    {"ppermute(x, 'j', [(0, 1)])", "f32[2,16]{V:i,j}"},
    {"all_to_all(x, 'j', 1, 0, tiled=True)", "f32[4,8]{V:i,j}"},
    {"all_to_all(reshape(x, (2, 2, 8)), 'j', 0, 2)", "f32[2,8,2]{V:i,j}"},
    {"axis_index('j')", "i32[]{V:j}"},
    {"axis_index(('i', 'j'))", "i32[]{V:i,j}"},
    {"x * axis_size('j')", "f32[2,16]{V:i}"},
    {"pvary(y, 'j')", "f32[16,4]{V:j}"},
    {"pcast(y, 'j', to='varying')", "f32[16,4]{V:j}"},
    {"psum(pcast(x * 2, 'i', to='unreduced'), 'i')", "f32[2,16]"},
    {"psum_scatter(pcast(pvary(x, 'j'), 'j', to='unreduced'), 'j', tiled=True)",
     "f32[1,16]{V:i,j}"},
};

static sm_program *parse_row(const op_case *c, char *text, size_t len)
{
    snprintf(text, len,
             "mesh i=4 j=2\n"
             "shard_map row(" PARAMS ") -> P():\n"
             "    r = %s\n"
             "    return r\n",
             c->expr);
    sm_program *p = NULL;
    char err[1024] = "";
    sm_err e = sm_program_parse(text, "row.shmap", &p, err, sizeof err);
    ck_assert_msg(e == SM_OK, "%s: %s", c->expr, err);
    e = sm_program_verify(p, 0, err, sizeof err);
    ck_assert_msg(e == SM_OK, "%s: %s", c->expr, err);
    return p;
}

START_TEST(test_op_row)
{
    const op_case *c = &ops[_i];
    char text[1024], ty[256];
    sm_program *p = parse_row(c, text, sizeof text);
    sm_program_value_type(p, p->returns[0], ty, sizeof ty);
    ck_assert_msg(strcmp(ty, c->type) == 0, "%s: got %s, expected %s", c->expr, ty, c->type);
    /* round trip */
    sm_strbuf b = {0};
    ck_assert_int_eq(sm_program_print(p, &b), SM_OK);
    sm_program *q = NULL;
    char err[1024] = "";
    ck_assert_msg(sm_program_parse(sm_strbuf_str(&b), "printed", &q, err, sizeof err) == SM_OK,
                  "%s: re-parse: %s\n%s", c->expr, err, sm_strbuf_str(&b));
    ck_assert_int_eq(sm_program_verify(q, 0, err, sizeof err), SM_OK);
    ck_assert_msg(sm_program_equal(p, q), "%s: round trip differs\n%s", c->expr, sm_strbuf_str(&b));
    sm_program_free(q);
    sm_strbuf_free(&b);
    sm_program_free(p);
}
END_TEST

/* Every op of the table is produced by some row (axis_size folds to a
 * static int in the text, as in JAX, so it is covered by the builder). */
START_TEST(test_every_op_has_a_row)
{
    int seen[SM_OP_COUNT] = {0};
    seen[SM_OP_AXIS_SIZE] = 1;
    for (size_t r = 0; r < sizeof ops / sizeof ops[0]; r++) {
        char text[1024];
        sm_program *p = parse_row(&ops[r], text, sizeof text);
        for (int k = 0; k < p->nops; k++)
            seen[p->ops[k].kind] = 1;
        sm_program_free(p);
    }
    for (int k = 0; k < SM_OP_COUNT; k++) /* global-view only: test_lower; loops below */
        seen[k] |= sm_op_global_only((sm_op_kind)k) || sm_op_loop((sm_op_kind)k);
    for (int k = 0; k < SM_OP_COUNT; k++)
        ck_assert_msg(seen[k], "op %s has no test row", sm_op_name((sm_op_kind)k));
    sm_op_kind kind;
    ck_assert_int_eq(sm_op_lookup("psum_scatter", &kind), 0);
    ck_assert_int_eq(kind, SM_OP_PSUM_SCATTER);
    ck_assert_int_eq(sm_op_lookup("nope", &kind), -1);
    ck_assert_int_eq(sm_op_vma_rule(SM_OP_AXIS_INDEX), SM_VMA_SET);
    ck_assert_str_eq(sm_op_name(SM_OP_COUNT), "?");
}
END_TEST

static sm_program *builder_program(void)
{
    char err[512];
    sm_mesh m;
    const char *names[] = {"i", "j"};
    int64_t sizes[] = {4, 2};
    ck_assert_int_eq(sm_mesh_init(&m, 2, names, sizes, NULL, 0, err, sizeof err), SM_OK);
    sm_program *p;
    ck_assert_int_eq(sm_program_create(&m, "built", &p, err, sizeof err), SM_OK);
    return p;
}

START_TEST(test_builder_matmul_basic)
{
    char err[512];
    sm_program *p = builder_program();
    sm_shape sa = {2, {8, 16}}, sb = {2, {16, 32}};
    sm_pspec pa, pb, po;
    ck_assert_int_eq(sm_pspec_parse("P('i','j')", &pa, err, sizeof err), SM_OK);
    ck_assert_int_eq(sm_pspec_parse("P('j', None)", &pb, err, sizeof err), SM_OK);
    ck_assert_int_eq(sm_pspec_parse("P('i', None)", &po, err, sizeof err), SM_OK);
    int a, b, z, s;
    ck_assert_int_eq(sm_program_add_param(p, "a", SM_F32, &sa, &pa, &a, err, sizeof err), SM_OK);
    ck_assert_int_eq(sm_program_add_param(p, "b", SM_F32, &sb, &pb, &b, err, sizeof err), SM_OK);
    int ab[2] = {a, b};
    ck_assert_int_eq(sm_program_add_op(p, "dot", ab, 2, NULL, &z, err, sizeof err), SM_OK);
    sm_ir_attrs at = {.naxes = 1, .axes = {"j"}};
    ck_assert_int_eq(sm_program_add_op(p, "psum", &z, 1, &at, &s, err, sizeof err), SM_OK);
    /* axis_size has no text spelling (it folds); build it here */
    int n;
    sm_ir_attrs ai = {.naxes = 1, .axes = {"i"}};
    ck_assert_int_eq(sm_program_add_op(p, "axis_size", NULL, 0, &ai, &n, err, sizeof err), SM_OK);
    char ty[128];
    ck_assert_str_eq(sm_program_value_type(p, n, ty, sizeof ty), "i32[]");
    ck_assert_int_eq(sm_program_set_returns(p, &s, &po, 1, err, sizeof err), SM_OK);
    ck_assert_int_eq(sm_program_verify(p, 1, err, sizeof err), SM_OK);
    ck_assert_str_eq(sm_program_value_type(p, z, ty, sizeof ty), "f32[2,32]{V:i,j}");
    ck_assert_int_eq(p->out_global[0].dims[0], 8);
    ck_assert_int_eq(p->out_global[0].dims[1], 32);
    /* the printed text re-parses to an equal program */
    sm_strbuf buf = {0};
    ck_assert_int_eq(sm_program_print(p, &buf), SM_OK);
    sm_program *q;
    ck_assert_msg(sm_program_parse(sm_strbuf_str(&buf), NULL, &q, err, sizeof err) == SM_OK, "%s",
                  err);
    ck_assert_int_eq(q->nops, 2); /* axis_size folds in the text */
    sm_program_free(q);
    sm_strbuf_free(&buf);
    sm_program_free(p);
}
END_TEST

START_TEST(test_builder_errors)
{
    char err[512];
    sm_program *p = builder_program();
    sm_shape sx = {1, {6}};
    sm_pspec pi;
    ck_assert_int_eq(sm_pspec_parse("P('i')", &pi, err, sizeof err), SM_OK);
    int x;
    ck_assert_int_eq(sm_program_add_param(p, "x", SM_F32, &sx, &pi, &x, err, sizeof err),
                     SM_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "'x'"));
    sx.dims[0] = 8;
    ck_assert_int_eq(sm_program_add_param(p, "x", SM_F32, &sx, &pi, &x, err, sizeof err), SM_OK);
    ck_assert_int_eq(sm_program_add_param(p, "x", SM_F32, &sx, &pi, &x, err, sizeof err),
                     SM_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "twice"));
    int r, bad = 7;
    ck_assert_int_eq(sm_program_add_op(p, "exp", &bad, 1, NULL, &r, err, sizeof err), SM_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "not defined before"));
    ck_assert_int_eq(sm_program_add_op(p, "add", &x, 1, NULL, &r, err, sizeof err), SM_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "add takes 2 array operands, got 1"));
    int64_t perm[2][2] = {{0, 1}, {1, 1}};
    sm_ir_attrs at = {.naxes = 1, .axes = {"i"}, .nperm = 2, .perm = (const int64_t(*)[2])perm};
    ck_assert_int_eq(sm_program_add_op(p, "ppermute", &x, 1, &at, &r, err, sizeof err), SM_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "duplicate destination 1"));
    /* ops are named by their JAX name; a name that is no op is refused */
    ck_assert_int_eq(sm_program_add_op(p, "psum_all", &x, 1, NULL, &r, err, sizeof err), SM_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "no op is named 'psum_all'"));
    ck_assert_int_eq(sm_program_add_op(p, NULL, &x, 1, NULL, &r, err, sizeof err), SM_EINVAL);
    /* bitcast_convert_type only between dtypes of one width */
    sm_ir_attrs wide = {.has_dtype = 1, .dtype = SM_F64};
    ck_assert_int_eq(
        sm_program_add_op(p, "bitcast_convert_type", &x, 1, &wide, &r, err, sizeof err),
        SM_EUNIMPLEMENTED);
    ck_assert_ptr_nonnull(strstr(err, "from f32 to f64 is not supported"));
    ck_assert_int_eq(p->nops, 0); /* failed adds change nothing */
    ck_assert_int_eq(sm_program_nparams(p), 1);
    ck_assert_int_eq(sm_program_nreturns(p), 0);
    ck_assert_int_eq(p->nvalues, 1);
    ck_assert_int_eq(sm_program_verify(p, 1, err, sizeof err), SM_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "returns nothing"));
    sm_program_free(p);
}
END_TEST

START_TEST(test_builder_verify_catches_edits)
{
    /* a program changed after building (as a decoder might produce) is re-checked */
    char err[512];
    sm_program *p = builder_program();
    sm_shape sx = {2, {8, 4}};
    sm_pspec ps, po, bad;
    ck_assert_int_eq(sm_pspec_parse("P('i', 'j')", &ps, err, sizeof err), SM_OK);
    ck_assert_int_eq(sm_pspec_parse("P('i')", &po, err, sizeof err), SM_OK);
    ck_assert_int_eq(sm_pspec_parse("P('q')", &bad, err, sizeof err), SM_OK);
    int x, e1, e2;
    ck_assert_int_eq(sm_program_add_param(p, "x", SM_F32, &sx, &ps, &x, err, sizeof err), SM_OK);
    ck_assert_int_eq(sm_program_add_op(p, "exp", &x, 1, NULL, &e1, err, sizeof err), SM_OK);
    ck_assert_int_eq(sm_program_add_op(p, "log", &e1, 1, NULL, &e2, err, sizeof err), SM_OK);
    ck_assert_int_eq(sm_program_set_returns(p, &e2, &bad, 1, err, sizeof err), SM_EINVAL);
    ck_assert_msg(strstr(err, "output 0") && strstr(err, "'q'"), "%s", err);
    ck_assert_int_eq(sm_program_set_returns(p, &e2, &po, 1, err, sizeof err), SM_OK);
    ck_assert_int_eq(sm_program_verify(p, 1, err, sizeof err), SM_EINVAL);
    ck_assert_msg(strstr(err, "mesh axis 'j'"), "%s", err);
    ck_assert_int_eq(sm_program_verify(p, 0, err, sizeof err), SM_OK);
    ck_assert_int_eq(p->out_global[0].dims[0], 8);
    ck_assert_int_eq(p->out_global[0].dims[1], 2);
    p->ops[0].operands[0] = e2; /* forward reference */
    ck_assert_int_eq(sm_program_verify(p, 0, err, sizeof err), SM_EINVAL);
    ck_assert_msg(strstr(err, "exp: operand 0 refers to value 2, which is not defined before it"),
                  "%s", err);
    p->ops[0].operands[0] = x;
    p->ops[1].kind = SM_OP_SUM;
    p->ops[1].attrs.has_ints = 1;
    p->ops[1].attrs.ints.n = 1;
    p->ops[1].attrs.ints.v[0] = 1;
    ck_assert_int_eq(sm_program_verify(p, 0, err, sizeof err), SM_OK);
    char ty[64];
    ck_assert_str_eq(sm_program_value_type(p, e2, ty, sizeof ty), "f32[2]{V:i,j}");
    p->ops[1].attrs.naxes = 99; /* garbage from the wire */
    ck_assert_int_eq(sm_program_verify(p, 0, err, sizeof err), SM_EINVAL);
    ck_assert_msg(strstr(err, "axis names"), "%s", err);
    sm_program_free(p);
}
END_TEST

#define LOOP_TEXT                                                                                  \
    "mesh i=4 j=2\n"                                                                               \
    "shard_map f(x: f32[8] @ P('i')) -> P('i'):\n"                                                 \
    "    k = 0\n"                                                                                  \
    "    while k < 3:\n"                                                                           \
    "        x = x * 2\n"                                                                          \
    "        k = k + 1\n"                                                                          \
    "    y = x + 1\n"                                                                              \
    "    return y\n"

/* LOOP_TEXT parsed, the index of its first op of kind, and the check of
 * the program after an edit: refused with a message holding want. */
static sm_program *loop_program(void)
{
    char err[512];
    sm_program *p;
    ck_assert_msg(sm_program_parse(LOOP_TEXT, NULL, &p, err, sizeof err) == SM_OK, "%s", err);
    ck_assert_int_eq(sm_program_verify(p, 1, err, sizeof err), SM_OK);
    return p;
}

static int first_op(const sm_program *p, sm_op_kind kind)
{
    for (int k = 0; k < p->nops; k++)
        if (p->ops[k].kind == kind)
            return k;
    ck_abort_msg("no %s", sm_op_name(kind));
    return -1;
}

static void refused(sm_program *p, const char *want)
{
    char err[512];
    ck_assert_int_eq(sm_program_verify(p, 1, err, sizeof err), SM_EINVAL);
    ck_assert_msg(strstr(err, want), "'%s' lacks '%s'", err, want);
    sm_program_free(p);
}

/* A loop's shape in the op list is checked whatever made the program (a
 * decoder, the builder): the carries, test, nexts and ends in order, and
 * no value of a loop's inside read outside it. */
START_TEST(test_loop_structure)
{
    sm_program *p = loop_program();
    int n = 0;
    char err[512];
    sm_ir_loop loops[64];
    ck_assert_int_eq(sm_ir_loops_check(p, loops, &n, err, sizeof err), SM_OK);
    ck_assert_int_eq(n, 1);
    ck_assert_int_eq(loops[0].m, 3); /* x, k and the condition */
    ck_assert_int_eq(p->ops[loops[0].test].kind, SM_OP_WHILE_TEST);
    ck_assert_int_eq(loops[0].parent, -1);
    ck_assert(!sm_program_light(p, 1 << 30)); /* a loop may run long */
    sm_program_free(p);

    p = loop_program(); /* nexts in another order than the carries */
    int nx = first_op(p, SM_OP_WHILE_NEXT);
    int *tmp = p->ops[nx].operands;
    p->ops[nx].operands = p->ops[nx + 1].operands;
    p->ops[nx + 1].operands = tmp;
    refused(p, "while_next 0 of a loop must give carry 0 its next value");

    p = loop_program(); /* a body value returned */
    p->returns[0] = p->ops[first_op(p, SM_OP_MULTIPLY)].result;
    refused(p, "output 0 is a value defined inside a while loop");

    p = loop_program(); /* a body value read after the loop */
    p->ops[p->nops - 1].operands[0] = p->ops[first_op(p, SM_OP_MULTIPLY)].result;
    refused(p, "add reads a value defined inside a while loop, outside it");

    p = loop_program(); /* the test of a value that is no carry */
    p->ops[first_op(p, SM_OP_WHILE_TEST)].operands[0] = p->ops[first_op(p, SM_OP_LESS)].result;
    refused(p, "while_test: operand 0 is not a while_carry value");

    p = loop_program(); /* one while_next short */
    sm_ir_op *op = &p->ops[first_op(p, SM_OP_WHILE_NEXT) + 2];
    op->kind = SM_OP_NEGATIVE;
    op->noperands = 1;
    op->operands[0] = p->ops[first_op(p, SM_OP_MULTIPLY)].result;
    refused(p, "a loop has 3 carries but 2 while_next ops before this negative");

    p = loop_program(); /* a carry that changes dtype */
    p->ops[nx].operands[1] = p->ops[first_op(p, SM_OP_WHILE_TEST) + 1].result; /* const 2 */
    refused(p, "while loop: the carried value 'x' has type f32[2]{V:i}, but the body gives it "
               "the next value of type i32[]");

    /* built op by op: a loop left open */
    p = builder_program();
    sm_shape sc = {1, {8}};
    sm_pspec pi;
    ck_assert_int_eq(sm_pspec_parse("P('i')", &pi, err, sizeof err), SM_OK);
    int c, a, w, tt;
    ck_assert_int_eq(sm_program_add_param(p, "c", SM_BOOL, &sc, &pi, &c, err, sizeof err), SM_OK);
    ck_assert_int_eq(sm_program_add_op(p, "any", &c, 1, NULL, &a, err, sizeof err), SM_OK);
    ck_assert_int_eq(sm_program_add_op(p, "while_carry", &a, 1, NULL, &w, err, sizeof err), SM_OK);
    ck_assert_int_eq(sm_program_add_op(p, "while_test", &w, 1, NULL, &tt, err, sizeof err), SM_OK);
    ck_assert_int_eq(sm_program_set_returns(p, &c, &pi, 1, err, sizeof err), SM_OK);
    refused(p, "a while loop is not closed");
}
END_TEST

Suite *ir_ops_suite(void)
{
    Suite *s = SUITE_CASE(suite_create("ir_ops"), "ops", 0, NULL,
                          {test_op_row, sizeof ops / sizeof ops[0]}, {test_every_op_has_a_row});
    return SUITE_CASE(s, "builder", 0, NULL, {test_builder_matmul_basic}, {test_builder_errors},
                      {test_builder_verify_catches_edits}, {test_loop_structure});
}

int main(void)
{
    return suite_main(ir_ops_suite());
}
