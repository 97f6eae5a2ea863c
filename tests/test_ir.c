/* Check suite for common/ir: the seed programs of docs/semantics.md in the
 * text form (block types, varying axes, result global shapes), print/parse
 * round trips, and the error table (every parse and type error kind, with
 * its code, position and key words). Op-by-op rows are in test_ir_ops.c. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sm_ir.h"
#include "ir_testutil.h"
#include "suite_main.h"

/* Type of the value bound to name (the last value with that name). */
static const char *type_of(const sm_program *p, const char *name, char *buf, size_t len)
{
    for (int v = p->nvalues - 1; v >= 0; v--)
        if (p->values[v].name && strcmp(p->values[v].name, name) == 0)
            return sm_program_value_type(p, v, buf, len);
    return "<none>";
}

static void assert_roundtrip(const sm_program *p)
{
    sm_strbuf b = {0}, b2 = {0};
    ck_assert_int_eq(sm_program_print(p, &b), SM_OK);
    sm_program *q = NULL;
    char err[1024] = "";
    sm_err e = sm_program_parse(sm_strbuf_str(&b), "printed.shmap", &q, err, sizeof err);
    ck_assert_msg(e == SM_OK, "re-parse failed: %s\n%s", err, sm_strbuf_str(&b));
    ck_assert_int_eq(sm_program_verify(q, 0, err, sizeof err), SM_OK);
    ck_assert_msg(sm_program_equal(p, q), "round trip differs:\n%s", sm_strbuf_str(&b));
    ck_assert_int_eq(sm_program_print(q, &b2), SM_OK);
    ck_assert_str_eq(sm_strbuf_str(&b), sm_strbuf_str(&b2));
    sm_program_free(q);
    sm_strbuf_free(&b);
    sm_strbuf_free(&b2);
}

typedef struct {
    const char *name;
    const char *text;
    int check_vma;
    /* expected types, "name=type" pairs separated by ';' */
    const char *types;
    const char *out_type; /* "f32[8,32]": dtype and global shape of output 0 */
} seed_case;

static const seed_case seeds[] = {
    {"matmul_basic",
     "# The shard_map design note's first example.\n"
     "mesh i=4 j=2\n"
     "shard_map matmul_basic(a: f32[8,16] @ P('i','j'), b: f32[16,32] @ P('j', None)) -> P('i', "
     "None):\n"
     "    z = dot(a, b)\n"
     "    return psum(z, 'j')\n",
     1, "a=f32[2,8]{V:i,j};b=f32[8,32]{V:j};z=f32[2,32]{V:i,j}", "f32[8,32]"},
    {"matmul_reduce_scatter",
     "mesh i=4 j=2\n"
     "shard_map matmul_reduce_scatter(a: f32[8,16] @ P('i','j'), b: f32[16,32] @ P('j', None)) "
     "-> P('i', 'j'):\n"
     "    z = dot(a, b)\n"
     "    r = psum_scatter(z, 'j', scatter_dimension=1, tiled=True)\n"
     "    return r\n",
     1, "z=f32[2,32]{V:i,j};r=f32[2,16]{V:i,j}", "f32[8,32]"},
    {"f1",
     "mesh i=4 j=2\n"
     "shard_map f1(x: i32[12,12] @ P('i', None)) -> P('i', 'j'):\n"
     "    return x\n",
     1, "x=i32[3,12]{V:i}", "i32[12,24]"},
    {"f2",
     "mesh i=4 j=2\n"
     "shard_map f2(x: i32[12,24] @ P('i', 'j')) -> P('i', 'j'):\n"
     "    return x\n",
     1, "x=i32[3,12]{V:i,j}", "i32[12,24]"},
    {"f3",
     "mesh i=4 j=2\n"
     "shard_map f3(x: i32[12,12] @ P('i', 'j')) -> P('i', None):\n"
     "    y = psum(x, 'j')\n"
     "    return y\n",
     1, "x=i32[3,6]{V:i,j};y=i32[3,6]{V:i}", "i32[12,6]"},
    {"f4",
     "mesh i=4 j=2\n"
     "shard_map f4(x: i32[12,12] @ P('i', 'j')) -> P(None, 'j'):\n"
     "    y = jax.lax.psum(x, 'i')\n"
     "    return y\n",
     1, "y=i32[3,6]{V:j}", "i32[3,12]"},
    {"f5",
     "mesh i=4 j=2\n"
     "shard_map f5(x: i32[12,12] @ P('i', 'j')) -> P(None, None):\n"
     "    y = psum(x, ('i', 'j'))\n"
     "    return y\n",
     1, "y=i32[3,6]", "i32[3,6]"},
    {"collective_matmul_allgather",
     "# design note: ring of ppermute overlapping dot; accum depends on axis_index,\n"
     "# so (as in JAX) the replication check must be off for "
     "out_specs=P().\n" PROG_COLLECTIVE_MATMUL,
     0, "lhs=f32[4,8]{V:i};update=f32[4,4]{V:i};accum=f32[16,4]{V:i};axis_index=i32[]{V:i}",
     "f32[16,4]"},
    {"collective_matmul_contracting",
     "mesh X=2 Y=4\n"
     "shard_map cm(lhs: f32[8,16] @ jax.P('X','Y'), rhs: f32[16,8] @ P(None,'Y')) -> "
     "jax.sharding.PartitionSpec('X','Y'):\n" PROG_CM_CONTRACTING_LOOP "    i = axis_size - 1\n"
     "    rhs_chunk = jax.lax.dynamic_slice_in_dim(rhs, (idx + i) % axis_size * chunk_size, "
     "chunk_size)\n"
     "    update = lhs @ rhs_chunk\n"
     "    out = accum + update\n"
     "    return out\n",
     1, "lhs=f32[4,4]{V:X,Y};rhs=f32[16,2]{V:Y};rhs_chunk=f32[4,2]{V:Y};out=f32[4,2]{V:X,Y}",
     "f32[8,8]"},
    {"slice_and_average",
     "mesh x=2 y=4\n"
     "shard_map slice_and_average(x: i32[512] @ P(('x', 'y'))) -> P():\n"
     "    return jax.lax.pmean(x[:4], axis_name=('x', 'y'))\n",
     1, "x=i32[64]{V:x,y}", "f32[4]"},
    {"two_outputs_devices",
     "mesh i=2 j=2 devices=[3, 2, 1, 0]\n"
     "shard_map two(a: f64[4,4] @ P('i'), s: f32[] @ P()) -> (P('i'), P()):\n"
     "    t = a * 2 + s\n"
     "    m = pmax(sum(t), 'i')\n"
     "    return t, m\n",
     1, "t=f64[2,4]{V:i};m=f64[]", "f64[4,4]"},
    {"axis_index_groups and to='invarying' (JAX's shard_map_test)",
     "mesh x=2 y=2 z=2\n"
     "shard_map f(a: f32[8,8] @ P('x', ('y', 'z'))) -> (P('x', ('y', 'z')), P('x')):\n"
     "    g = all_gather(a, ('y', 'z'), axis_index_groups=((0, 1), (2, 3)), axis=-1, tiled=True)\n"
     "    s = psum(a, ('y', 'z'), axis_index_groups=[[0, 3], [1, 2]])\n"
     "    i = all_gather(s[:, 0:1], ('y', 'z'), axis=1, tiled=True, to='invarying')\n"
     "    return g, i\n",
     1, "g=f32[4,4]{V:x,y,z};s=f32[4,2]{V:x,y,z};i=f32[4,4]{V:x}", "f32[8,16]"},
};

START_TEST(test_seed_types)
{
    const seed_case *c = &seeds[_i];
    sm_program *p = parse_ok(c->text, c->check_vma);
    char buf[256], want[1024];
    snprintf(want, sizeof want, "%s", c->types);
    for (char *tok = strtok(want, ";"); tok; tok = strtok(NULL, ";")) {
        char *eq = strchr(tok, '=');
        *eq = 0;
        ck_assert_msg(strcmp(type_of(p, tok, buf, sizeof buf), eq + 1) == 0,
                      "%s: value %s has type %s, expected %s", c->name, tok, buf, eq + 1);
    }
    sm_ir_value out = p->values[p->returns[0]];
    out.shape = p->out_global[0];
    out.vma = 0;
    char got[256];
    snprintf(got, sizeof got, "%s", sm_dtype_name(out.dtype));
    char sh[128];
    sm_shape_format(&out.shape, sh, sizeof sh);
    strncat(got, sh, sizeof got - strlen(got) - 1);
    for (char *s = got; *s; s++) /* sm_shape_format may print spaces */
        if (*s == ' ')
            memmove(s, s + 1, strlen(s));
    ck_assert_msg(strcmp(got, c->out_type) == 0, "%s: output global type %s, expected %s", c->name,
                  got, c->out_type);
    assert_roundtrip(p);
    sm_strbuf d = {0};
    ck_assert_int_eq(sm_program_describe(p, &d), SM_OK);
    ck_assert_ptr_nonnull(strstr(sm_strbuf_str(&d), "output 0"));
    sm_strbuf_free(&d);
    sm_program_free(p);
}
END_TEST

START_TEST(test_matmul_basic_details)
{
    sm_program *p = parse_ok(seeds[0].text, 1);
    ck_assert_int_eq(p->nparams, 2);
    ck_assert_int_eq(p->nops, 2);
    ck_assert_int_eq(p->ops[0].kind, SM_OP_DOT);
    ck_assert_int_eq(p->ops[1].kind, SM_OP_PSUM);
    ck_assert_int_eq(p->ops[0].line, 4);
    ck_assert_int_eq(p->values[p->params[0].value].shape.dims[1], 8);
    ck_assert_int_eq(p->out_global[0].dims[0], 8);
    ck_assert_int_eq(p->out_global[0].dims[1], 32);
    sm_strbuf d = {0};
    ck_assert_int_eq(sm_program_describe(p, &d), SM_OK);
    ck_assert_msg(strstr(sm_strbuf_str(&d), "z = dot(a, b) : f32[2,32]{V:i,j}"), "%s",
                  sm_strbuf_str(&d));
    sm_strbuf_free(&d);
    sm_program_free(p);
}
END_TEST

START_TEST(test_loop_unrolls)
{
    /* 3 iterations of 2 ops each; the rebinding of x is seen by the next one */
    sm_program *p = parse_ok("mesh i=2\n"
                             "shard_map f(x: f32[4] @ P('i')) -> P('i'):\n"
                             "    for k in range(3):\n"
                             "        x = x * k\n"
                             "    return x\n",
                             1);
    ck_assert_int_eq(p->nops, 6);
    ck_assert_int_eq(p->ops[1].operands[0], 0);
    ck_assert_int_eq(p->ops[3].operands[0], p->ops[1].result);
    ck_assert_int_eq(p->ops[4].attrs.i, 2);
    assert_roundtrip(p);
    sm_program_free(p);
}
END_TEST

START_TEST(test_nested_loops)
{
    sm_program *p = parse_ok("mesh i=4\n"
                             "shard_map nested(x: f32[16] @ P('i')) -> P('i'):\n"
                             "    acc = zeros((1,))\n"
                             "    for a in range(2):\n"
                             "        for b in range(a, 3):\n"
                             "            acc = acc + x[b:b + 1] * (a * 10 + b)\n"
                             "        # an empty loop is fine\n"
                             "        for c in range(0):\n"
                             "            acc = acc + 1\n"
                             "    return acc\n",
                             1);
    ck_assert_int_eq(p->nops,
                     1 + 5 * 4); /* zeros, then slice, const, multiply, add per iteration */
    ck_assert_int_eq(p->ops[p->nops - 3].attrs.i, 12); /* last iteration: a=1, b=2 */
    char buf[64];
    ck_assert_str_eq(type_of(p, "acc", buf, sizeof buf), "f32[1]{V:i}");
    assert_roundtrip(p);
    sm_program_free(p);
}
END_TEST

START_TEST(test_weak_types)
{
    sm_program *p = parse_ok("mesh i=2\n"
                             "shard_map f(x: i32[4] @ P('i'), y: f64[4] @ P('i'), "
                             "b: bool[4] @ P('i')) -> P('i'):\n"
                             "    a = x + 1\n"
                             "    c = x * 1.5\n"
                             "    d = y + 1\n"
                             "    e = 2.0 * 3\n"
                             "    g = x / 2\n"
                             "    h = b + 1\n"
                             "    k = x > 0\n"
                             "    m = pmean(x, 'i')\n"
                             "    n = astype(x, f64) + x\n"
                             "    return a\n",
                             1);
    char buf[128];
    ck_assert_str_eq(type_of(p, "a", buf, sizeof buf), "i32[2]{V:i}");
    ck_assert_str_eq(type_of(p, "c", buf, sizeof buf), "f32[2]{V:i}");
    ck_assert_str_eq(type_of(p, "d", buf, sizeof buf), "f64[2]{V:i}");
    ck_assert_str_eq(type_of(p, "g", buf, sizeof buf), "f32[2]{V:i}");
    ck_assert_str_eq(type_of(p, "h", buf, sizeof buf), "i32[2]{V:i}");
    ck_assert_str_eq(type_of(p, "k", buf, sizeof buf), "bool[2]{V:i}");
    ck_assert_str_eq(type_of(p, "m", buf, sizeof buf), "f32[2]");
    ck_assert_str_eq(type_of(p, "n", buf, sizeof buf), "f64[2]{V:i}");
    sm_program_free(p);
}
END_TEST

START_TEST(test_roundtrip_oddities)
{
    /* names that look like ops or generated names, inf/nan, bools, negative numbers */
    sm_program *p = parse_ok("mesh i=2\n"
                             "shard_map odd(sum: f32[4] @ P('i'), v1: f32[4] @ P()) -> (P('i'), "
                             "P()):\n"
                             "    max = sum(sum) + v1[0]\n"
                             "    a = full((2,), -jnp.inf) * nan\n"
                             "    b = where(True, a, -1.5e-7)\n"
                             "    c = const(True)\n"
                             "    d = transpose(reshape(arange(6), (2, 3)), (1, 0))\n"
                             "    return max * sum, b + c\n",
                             0);
    assert_roundtrip(p);
    sm_program_free(p);
    /* a shard_map program keeps its mesh's axis types (its results' mesh) */
    p = parse_ok("mesh i=2 j=2 axis_types=(Auto, Explicit)\n"
                 "shard_map t(x: f32[4] @ P('i')) -> P('i'):\n"
                 "    return x * 2\n",
                 0);
    ck_assert_uint_eq(p->mesh.auto_axes, 1);
    sm_strbuf b = {0};
    ck_assert_int_eq(sm_program_print(p, &b), SM_OK);
    ck_assert_msg(strstr(sm_strbuf_str(&b), "mesh i=2 j=2 axis_types=(Auto, Explicit)\n"), "%s",
                  sm_strbuf_str(&b));
    sm_strbuf_free(&b);
    assert_roundtrip(p);
    sm_program_free(p);
}
END_TEST

START_TEST(test_describe)
{
    sm_program *p = parse_ok(seeds[4].text, 1); /* f3 */
    sm_strbuf d = {0};
    ck_assert_int_eq(sm_program_describe(p, &d), SM_OK);
    const char *s = sm_strbuf_str(&d);
    ck_assert_msg(strstr(s, "    x : i32[3,6]{V:i,j}\n"), "%s", s);
    ck_assert_msg(strstr(s, "    y = psum(x, 'j') : i32[3,6]{V:i}\n"), "%s", s);
    ck_assert_msg(strstr(s, "output 0: y : i32[3,6]{V:i} @ P('i', None) -> global i32[12,6]"), "%s",
                  s);
    sm_strbuf_free(&d);
    sm_program_free(p);
}
END_TEST

/* sm_program_light: no communicating op, no product, values within the
 * byte bound. */
static const struct {
    const char *text;
    int64_t max_bytes;
    int light;
} light_cases[] = {
    {"mesh i=8\nshard_map f(x: f32[8] @ P('i')) -> P('i'):\n    return x\n", 64, 1},
    {"mesh i=4\nshard_map f(x: f32[8,16] @ P('i')) -> P('i'):\n    return tanh(x * 2) + 1\n",
     1 << 16, 1},
    /* 2x16 f32 blocks: x, x * 2 and the result are 384 bytes */
    {"mesh i=4\nshard_map f(x: f32[8,16] @ P('i')) -> P('i'):\n    return x * 2 + 1\n", 383, 0},
    {"mesh i=4\nshard_map f(x: f32[8,16] @ P('i')) -> P():\n    return psum(x, 'i')\n", 1 << 16, 0},
    {"mesh i=4\nshard_map f(x: f32[8,16] @ P('i')) -> P(None, 'i'):\n"
     "    return all_to_all(x, 'i', 1, 0, tiled=True)\n",
     1 << 16, 0},
    {"mesh i=4\nshard_map f(x: f32[8,8] @ P('i')) -> P('i'):\n    return dot(x, x.T)\n", 1 << 16,
     0},
};

START_TEST(test_light)
{
    sm_program *p = parse_ok(light_cases[_i].text, 1);
    ck_assert_int_eq(sm_program_light(p, light_cases[_i].max_bytes), light_cases[_i].light);
    sm_program_free(p);
}
END_TEST

START_TEST(test_vma_off_accepts)
{
    const char *text = "mesh i=4 j=2\n"
                       "shard_map f(x: f32[8,4] @ P('i', 'j')) -> P('i', None):\n"
                       "    return x\n";
    sm_program *p = NULL;
    char err[1024];
    ck_assert_int_eq(sm_program_parse(text, "v.shmap", &p, err, sizeof err), SM_OK);
    ck_assert_int_eq(sm_program_verify(p, 0, err, sizeof err), SM_OK);
    ck_assert_int_eq(p->out_global[0].dims[1], 2);
    ck_assert_int_eq(sm_program_verify(p, 1, err, sizeof err), SM_EINVAL);
    ck_assert_msg(strstr(err, "v.shmap:3:5:") && strstr(err, "output 0 ('x')") &&
                      strstr(err, "'j'") && strstr(err, "P('i', None)"),
                  "%s", err);
    sm_program_free(p);
}
END_TEST

typedef struct {
    const char *what;
    const char *text;
    sm_err code;
    const char *words[4]; /* substrings the message must hold */
} error_case;

#define HDR "mesh i=4 j=2\nshard_map f(x: f32[8,16] @ P('i', None)) -> P('i', None):\n"

static const error_case errors[] = {
    {"replication check: every offending axis, as JAX names them",
     "mesh i=2 j=2 k=2\nshard_map f(x: f32[8] @ P(('i', 'j', 'k'),)) -> P('i'):\n"
     "    return x * 2\n",
     SM_EINVAL,
     {"varies over mesh axes {j,k}", "out_spec P('i') names none of them", "check_vma=False"}},
    {"ppermute axes out of mesh order (JAX raise_on_ppermute_sort_diff)",
     "mesh i=4 j=2\nshard_map f(x: f32[8] @ P(('i', 'j'),)) -> P(('i', 'j'),):\n"
     "    return ppermute(x, ('j', 'i'), perm=[(0, 1), (1, 0)])\n",
     SM_EINVAL,
     {"t.shmap:3:", "ppermute over ('j', 'i')", "in the same order as the axis_names declared"}},
    {"missing paren",
     "mesh i=4\nshard_map f(x: f32[4] @ P('i') -> P('i'):\n    return x\n",
     SM_EFORMAT,
     {"t.shmap:2:", "expected ','"}},
    {"tab indent",
     "mesh i=4\nshard_map f(x: f32[4] @ P('i')) -> P('i'):\n\treturn x\n",
     SM_EFORMAT,
     {"t.shmap:3:1:", "tab"}},
    {"bad indent",
     "mesh i=4\nshard_map f(x: f32[4] @ P('i')) -> P('i'):\n  return x\n",
     SM_EFORMAT,
     {"t.shmap:3:3:", "indentation of 2"}},
    {"no mesh",
     "shard_map f(x: f32[4] @ P('i')) -> P('i'):\n    return x\n",
     SM_EFORMAT,
     {"t.shmap:1:1:", "mesh"}},
    {"bad char", HDR "    y = x $ 2\n    return y\n", SM_EFORMAT, {"t.shmap:3:11:", "'$'"}},
    {"non-ASCII name (the whole character quoted, not its first byte)",
     HDR "    \xcf\x83 = x * 2\n    return x\n",
     SM_EFORMAT,
     {"t.shmap:3:5:", "unexpected character '\xcf\x83'", "are ASCII"}},
    {"control byte",
     HDR "    y = x \x01 2\n    return y\n",
     SM_EFORMAT,
     {"t.shmap:3:11:", "byte 0x01"}},
    {"a byte that starts no UTF-8 sequence",
     HDR "    y = x \xff 2\n    return y\n",
     SM_EFORMAT,
     {"t.shmap:3:11:", "byte 0xFF"}},
    {"slice step zero",
     HDR "    y = x[::0]\n    return y\n",
     SM_EINVAL,
     {"t.shmap:3:", "step cannot be zero"}},
    {"rev of a dimension out of range",
     HDR "    y = rev(x, (2,))\n    return y\n",
     SM_EINVAL,
     {"dimension 2 is out of range"}},
    {"rev of a dimension twice",
     HDR "    y = rev(x, (1, -1))\n    return y\n",
     SM_EINVAL,
     {"dimension 1 twice"}},
    {"slice strides not positive",
     HDR "    y = slice(x, (0, 0), (2, 16), strides=(1, 0))\n    return y\n",
     SM_EINVAL,
     {"strides must be positive, got 0 for dimension 1"}},
    {"slice strides of the wrong length",
     HDR "    y = slice(x, (0, 0), (2, 16), strides=(1,))\n    return y\n",
     SM_EINVAL,
     {"expected strides of length 2, got 1"}},
    {"einsum subscript not a letter",
     HDR "    y = einsum('i\xc3\xa9->i', x)\n    return y\n",
     SM_EINVAL,
     {"unexpected character '\xc3\xa9'", "only letters"}},
    {"unterminated string",
     HDR "    y = psum(x, 'i)\n    return y\n",
     SM_EFORMAT,
     {"t.shmap:3:", "unterminated"}},
    {"missing return", HDR "    y = x\n", SM_EFORMAT, {"end with 'return'"}},
    {"after return", HDR "    return x\n    y = x\n", SM_EFORMAT, {"t.shmap:4:5:", "after"}},
    {"bad expression",
     HDR "    y = x + )\n    return y\n",
     SM_EFORMAT,
     {"t.shmap:3:13:", "expected an expression"}},
    {"unknown dtype",
     "mesh i=4\nshard_map f(x: f16x[4] @ P('i')) -> P('i'):\n    return x\n",
     SM_EFORMAT,
     {"t.shmap:2:16:", "dtype"}},
    {"undefined name", HDR "    return q\n", SM_EINVAL, {"t.shmap:3:12:", "'q' is not defined"}},
    {"unknown op",
     HDR "    y = frobnicate(x)\n    return y\n",
     SM_EINVAL,
     {"t.shmap:3:9:", "unknown op 'frobnicate'"}},
    {"missing operand",
     HDR "    y = add(x)\n    return y\n",
     SM_EINVAL,
     {"t.shmap:3:9:", "add", "missing argument 'y'"}},
    {"too many operands",
     HDR "    y = exp(x, x)\n    return y\n",
     SM_EINVAL,
     {"t.shmap:3:", "exp takes at most 1"}},
    {"unknown keyword",
     HDR "    y = all_gather(x, 'i', axes=0)\n    return y\n",
     SM_EINVAL,
     {"t.shmap:3:", "unknown keyword argument 'axes'", "all_gather"}},
    {"dot mismatch",
     HDR "    y = dot(x, x)\n    return y\n",
     SM_EINVAL,
     {"t.shmap:3:9:", "dot", "f32[2,16] and f32[2,16]", "expected"}},
    {"broadcast mismatch",
     HDR "    y = x + zeros((3,))\n    return y\n",
     SM_EINVAL,
     {"t.shmap:3:", "add", "f32[2,16] and f32[3]", "broadcast"}},
    {"not divisible",
     "mesh i=4\nshard_map f(x: f32[6,4] @ P('i')) -> P('i'):\n    return x\n",
     SM_EINVAL,
     {"t.shmap:2:", "'x'", "6", "4"}},
    {"unknown spec axis",
     "mesh i=4\nshard_map f(x: f32[8] @ P('k')) -> P('i'):\n    return x\n",
     SM_EINVAL,
     {"t.shmap:2:", "'k'"}},
    {"duplicate spec axis",
     "mesh i=4 j=2\nshard_map f(x: f32[8,8] @ P('i', 'i')) -> P('i'):\n    return x\n",
     SM_EINVAL,
     {"t.shmap:2:", "'i'"}},
    {"vma violation",
     HDR "    y = pvary(x, 'j')\n    return y\n",
     SM_EINVAL,
     {"t.shmap:4:5:", "output 0 ('y')", "mesh axis 'j'", "check_vma"}},
    {"unknown collective axis",
     HDR "    y = psum(x, 'k')\n    return y\n",
     SM_EINVAL,
     {"t.shmap:3:9:", "psum", "unknown axis name 'k'"}},
    {"perm duplicate source",
     HDR "    y = ppermute(x, 'i', perm=[(0, 1), (0, 2)])\n    return y\n",
     SM_EINVAL,
     {"t.shmap:3:9:", "ppermute", "duplicate source 0"}},
    {"perm duplicate destination",
     HDR "    y = ppermute(x, 'i', perm=[(0, 1), (2, 1)])\n    return y\n",
     SM_EINVAL,
     {"ppermute", "duplicate destination 1"}},
    {"perm out of range",
     HDR "    y = ppermute(x, 'i', perm=[(0, 4)])\n    return y\n",
     SM_EINVAL,
     {"ppermute", "destination 4 out of range [0, 4)"}},
    {"psum_scatter untiled size",
     HDR "    y = psum_scatter(x, 'i')\n    return y\n",
     SM_EINVAL,
     {"psum_scatter", "f32[2,16]", "size 2 but must equal the 4 devices of 'i'"}},
    {"psum_scatter tiled size",
     HDR "    y = psum_scatter(x, 'i', scatter_dimension=0, tiled=True)\n    return y\n",
     SM_EINVAL,
     {"psum_scatter", "not divisible by the 4 devices"}},
    {"all_to_all split size",
     HDR "    y = all_to_all(x, 'i', 0, 1)\n    return y\n",
     SM_EINVAL,
     {"all_to_all", "split_axis 0 has size 2 but must equal the 4 devices"}},
    {"all_gather axis",
     HDR "    y = all_gather(x, 'i', axis=5)\n    return y\n",
     SM_EINVAL,
     {"all_gather", "axis 5 is out of range"}},
    {"out spec rank",
     HDR "    y = psum(sum(x), 'i')\n    return y\n",
     SM_EINVAL,
     {"t.shmap:4:5:", "output 0 ('y')", "rank 0", "P()"}},
    {"out spec axis",
     "mesh i=4\nshard_map f(x: f32[8] @ P('i')) -> P('z'):\n    return x\n",
     SM_EINVAL,
     {"t.shmap:3:5:", "output 0", "'z'"}},
    {"return count",
     HDR "    return x, x\n",
     SM_EINVAL,
     {"t.shmap:3:5:", "2 values", "1 out_spec"}},
    {"slice range",
     HDR "    y = slice(x, (0, 0), (3, 16))\n    return y\n",
     SM_EINVAL,
     {"slice", "[0, 3)", "[0, 2]"}},
    {"reshape size",
     HDR "    y = reshape(x, (5, 7))\n    return y\n",
     SM_EINVAL,
     {"reshape", "32 elements", "[5,7]"}},
    {"index out of bounds",
     HDR "    y = x[2]\n    return y\n",
     SM_EINVAL,
     {"t.shmap:3:10:", "index 2 is out of bounds"}},
    {"dynamic index",
     HDR "    y = x[axis_index('i')]\n    return y\n",
     SM_EINVAL,
     {"dynamic_slice"}},
    {"shift operator", HDR "    y = x >> 2\n    return y\n", SM_EFORMAT, {"'>'"}},
    {"loop return",
     HDR "    for k in range(2):\n        return x\n",
     SM_EFORMAT,
     {"t.shmap:4:9:", "inside a loop"}},
    {"range arg",
     HDR "    for k in range(x):\n        y = x\n    return x\n",
     SM_EINVAL,
     {"t.shmap:3:20:", "static integer"}},
    {"unpack", HDR "    a, b = x\n    return a\n", SM_EINVAL, {"cannot unpack into 2 names"}},
    {"einsum",
     HDR "    y = einsum('ij,jk->ik', x, x)\n    return y\n",
     SM_EINVAL,
     {"einsum", "index 'j' has size 16 and 2"}},
    {"header colon",
     "mesh i=4\nshard_map f(x: f32[4] @ P('i')) -> P('i')\n    return x\n",
     SM_EFORMAT,
     {"t.shmap:2:42:", "expected ':'"}},
    {"spec syntax",
     "mesh i=4\nshard_map f(x: f32[4] @ P(i)) -> P('i'):\n    return x\n",
     SM_EFORMAT,
     {"t.shmap:2:27:", "axis name"}},
    {"no spec",
     "mesh i=4\nshard_map f(x: f32[4]) -> P('i'):\n    return x\n",
     SM_EFORMAT,
     {"t.shmap:2:22:", "'@'"}},
    {"mesh size",
     "mesh i=four\nshard_map f(x: f32[4] @ P()) -> P():\n    return x\n",
     SM_EFORMAT,
     {"t.shmap:1:8:", "integer"}},
    {"mesh duplicate axis",
     "mesh i=4 i=2\nshard_map f(x: f32[4] @ P()) -> P():\n    return x\n",
     SM_EINVAL,
     {"t.shmap:1:1:", "'i'"}},
    {"device count",
     "mesh i=2 devices=[0]\nshard_map f(x: f32[4] @ P()) -> P():\n    return x\n",
     SM_EINVAL,
     {"t.shmap:1:1:", "2"}},
    {"spec longer than rank",
     "mesh i=2\nshard_map f(s: f32[] @ P('i')) -> P():\n    return s\n",
     SM_EINVAL,
     {"t.shmap:2:13:", "'s'", "P()"}},
    {"duplicate param",
     "mesh i=4\nshard_map f(x: f32[4] @ P(), x: f32[4] @ P()) -> P():\n    return x\n",
     SM_EINVAL,
     {"t.shmap:2:30:", "'x'", "twice"}},
    {"keyword twice",
     HDR "    y = all_gather(x, 'i', axis=0, axis=1)\n    return y\n",
     SM_EINVAL,
     {"all_gather", "'axis' given twice"}},
    {"positional after keyword",
     HDR "    y = all_gather(x, axis_name='i', 0)\n    return y\n",
     SM_EFORMAT,
     {"t.shmap:3:38:", "positional argument after a keyword"}},
    {"bad dtype keyword",
     HDR "    y = astype(x, 'float8')\n    return y\n",
     SM_EINVAL,
     {"astype: dtype must be a dtype", "float8"}},
    {"axis name type",
     HDR "    y = psum(x, 0)\n    return y\n",
     SM_EINVAL,
     {"t.shmap:3:17:", "psum: axis_name must be a mesh axis name"}},
    {"static overflow",
     HDR "    y = x * (2 ** 62 * 4)\n    return y\n",
     SM_EINVAL,
     {"t.shmap:3:", "integer overflow"}},
    {"nested too deep",
     HDR "    y = ((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((("
         "((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((("
         "((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((x"
         "\n    return y\n",
     SM_EINVAL,
     {"nested too deeply"}},
    {"loop too long",
     HDR "    for k in range(200000):\n        x = x\n    return x\n",
     SM_EINVAL,
     {"t.shmap:3:9:", "100000 iterations"}},
    {"loop form",
     HDR "    for k in (1, 2):\n        x = x\n    return x\n",
     SM_EFORMAT,
     {"t.shmap:3:14:", "'range'"}},
    {"not callable",
     HDR "    y = x(1)\n    return y\n",
     SM_EINVAL,
     {"t.shmap:3:10:", "not callable"}},
    {"reduce axis",
     HDR "    y = sum(x, axis=2)\n    return y\n",
     SM_EINVAL,
     {"sum: axis 2 is out of range for an operand of rank 2"}},
    {"concatenate shapes",
     HDR "    y = concatenate((x, x.T))\n    return y\n",
     SM_EINVAL,
     {"concatenate", "f32[2,16] and f32[16,2]", "axis 0"}},
    {"matmul batch",
     HDR "    y = matmul(zeros((2, 2, 16)), zeros((3, 16, 2)))\n    return y\n",
     SM_EINVAL,
     {"matmul", "batch"}},
    {"huge shape",
     HDR "    y = zeros((1099511627776, 1099511627776))\n    return y\n",
     SM_EINVAL,
     {"zeros", "too large"}},
    {"dus dtype",
     HDR "    y = dynamic_update_slice(x, ones((1, 1), i32), (0, 0))\n    return y\n",
     SM_EINVAL,
     {"dynamic_update_slice", "same dtype"}},
};

/* 1 if s is valid UTF-8 (what a Python client decodes a sentence as). */
static int utf8_valid(const char *s)
{
    const unsigned char *u = (const unsigned char *)s;
    while (*u) {
        int n = *u < 0x80             ? 0
                : (*u & 0xe0) == 0xc0 ? 1
                : (*u & 0xf0) == 0xe0 ? 2
                : (*u & 0xf8) == 0xf0 ? 3
                                      : -1;
        if (n < 0)
            return 0;
        u++;
        for (; n > 0; n--, u++)
            if ((*u & 0xc0) != 0x80)
                return 0;
    }
    return 1;
}

START_TEST(test_errors)
{
    const error_case *c = &errors[_i];
    sm_program *p = NULL;
    char err[1024] = "";
    sm_err e = sm_program_parse(c->text, "t.shmap", &p, err, sizeof err);
    if (e == SM_OK) {
        e = sm_program_verify(p, 1, err, sizeof err);
        sm_program_free(p);
    } else {
        ck_assert_ptr_null(p);
    }
    if (getenv("SHOW_ERRORS"))
        printf("%-28s %s\n", c->what, err);
    ck_assert_msg(e == c->code, "%s: got %s (%s), expected %s", c->what, sm_err_name(e), err,
                  sm_err_name(c->code));
    for (int k = 0; k < 4 && c->words[k]; k++)
        ck_assert_msg(strstr(err, c->words[k]), "%s: message \"%s\" lacks \"%s\"", c->what, err,
                      c->words[k]);
    ck_assert_msg(utf8_valid(err), "%s: message \"%s\" is not valid UTF-8", c->what, err);
}
END_TEST

/* The text form's lists have no fixed length: a jit returning 200 values
 * (a model's parameters), a 100-name unpacking, a shard_map with 100
 * out_specs (they stopped at 64: "more than 64 items"). */
START_TEST(test_long_lists)
{
    sm_strbuf b = {0};
    sm_strbuf_printf(&b, "mesh i=2\ndef many(x):\n    return ");
    for (int k = 0; k < 100; k++)
        sm_strbuf_printf(&b, "%sx + %d", k ? ", " : "", k);
    sm_strbuf_printf(&b, "\nshard_map g(x: f32[4] @ P('i')) -> (");
    for (int k = 0; k < 100; k++)
        sm_strbuf_printf(&b, "%sP('i')", k ? ", " : "");
    sm_strbuf_printf(&b, "):\n    return many(x)\njit f(x: f32[4] @ P('i')):\n    ");
    for (int k = 0; k < 100; k++)
        sm_strbuf_printf(&b, "%sa%d", k ? ", " : "", k);
    sm_strbuf_printf(&b, " = g(x)\n    return ");
    for (int k = 0; k < 200; k++)
        sm_strbuf_printf(&b, "%sa%d", k ? ", " : "", k % 100);
    sm_strbuf_printf(&b, "\n");
    sm_program *p = parse_ok(sm_strbuf_str(&b), 1);
    ck_assert_int_eq(sm_program_nreturns(p), 200);
    sm_program_free(p);
    char err[1024] = "";
    ck_assert_int_eq(sm_program_parse_entry(sm_strbuf_str(&b), "t.shmap", "g", &p, err, sizeof err),
                     SM_OK);
    ck_assert_int_eq(sm_program_verify(p, 1, err, sizeof err), SM_OK);
    ck_assert_int_eq(sm_program_nreturns(p), 100);
    assert_roundtrip(p); /* printed with its 100 out_specs, parsed back */
    sm_program_free(p);
    sm_strbuf_free(&b);
}
END_TEST

Suite *ir_suite(void)
{
    Suite *s = SUITE_CASE(
        suite_create("ir"), "seeds", 0, NULL, {test_seed_types, sizeof seeds / sizeof seeds[0]},
        {test_matmul_basic_details}, {test_loop_unrolls}, {test_weak_types}, {test_nested_loops},
        {test_vma_off_accepts}, {test_roundtrip_oddities}, {test_describe}, {test_long_lists},
        {test_light, sizeof light_cases / sizeof light_cases[0]});
    return SUITE_CASE(s, "errors", 0, NULL, {test_errors, sizeof errors / sizeof errors[0]});
}

int main(void)
{
    return suite_main(ir_suite());
}
