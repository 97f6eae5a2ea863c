/* test_lower: global-view (jit) programs — the types JAX gives them (with
 * their shardings), the programs JAX refuses, the collectives the lowering
 * chooses, and differential runs: every lowered program run on its mesh
 * (sm_exec_local_run, every device a thread) against the same program
 * computed on whole arrays on every device, bit for bit on integers. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sm_exec_local.h"
#include "sm_lower.h"
#include "suite_main.h"

/* JAX's test_nested_partial_auto_1d: a shard_map over 'y' called from the
 * body of one over 'x'; inside, blocks vary over both, psum over the outer axis */
#define NESTED_1D                                                                                  \
    "mesh x=2 y=2 z=2\n"                                                                           \
    "shard_map g(x: f32[2,8] @ P(None, 'y')) -> P(None, 'y'), axis_names={'y'}:\n"                 \
    "    inner = x * x + psum(x, 'x')\n    return inner\n"                                         \
    "shard_map h(x: f32[4,8] @ P('x', None)) -> P('x', None), axis_names={'x'}:\n"                 \
    "    back = g(x)\n    return back\n"                                                           \
    "jit f(x: f32[4,8] @ P('x', 'y')):\n    r = h(x)\n    return r\n"

static sm_program *parse_ok(const char *text)
{
    char err[1024] = "";
    sm_program *p = NULL;
    sm_err e = sm_program_parse(text, "t.shmap", &p, err, sizeof err);
    ck_assert_msg(e == SM_OK, "parse failed: %s\n%s", err, text);
    e = sm_program_verify(p, 1, err, sizeof err);
    ck_assert_msg(e == SM_OK, "verify failed: %s", err);
    return p;
}

static int value_named(const sm_program *p, const char *name)
{
    for (int v = p->nvalues - 1; v >= 0; v--)
        if (p->values[v].name && strcmp(p->values[v].name, name) == 0)
            return v;
    return -1;
}

/* ---- types (what jax.typeof prints) ---- */

typedef struct {
    const char *text;
    const char *value;
    const char *type;
} type_case;

static const type_case types[] = {
    /* explicit-sharding guide: propagation through + */
    {"mesh X=2 Y=4\njit add_arrays(x: i32[4,1] @ P('X', None), y: i32[1,8] @ P(None, 'Y')):\n"
     "    ans = x + y\n    return ans\n",
     "ans", "i32[4@X,8@Y]"},
    {"mesh X=2 Y=4\njit f(x: f32[8,16] @ P('X', 'Y')):\n    z = jnp.sin(x)\n    return z\n", "z",
     "f32[8@X,16@Y]"},
    {"mesh X=2 Y=4\njit f(x: f32[8,16] @ P(('X', 'Y'),)):\n    return x\n", "x", "f32[8@(X,Y),16]"},
    /* an op without a sharding rule takes whole (replicated) operands */
    {"mesh X=2 Y=4\njit f(x: f32[3,2] @ P()):\n    t = jnp.tile(x, (2, 3))\n    return t\n", "t",
     "f32[6,6]"},
    /* scaling book: out_sharding chooses the reduce-scatter */
    {"mesh X=2 Y=2\njit m(In: f32[8,2048] @ P('X','Y'), W: f32[2048,8192] @ P('Y', None)):\n"
     "    o = einsum('bd,df->bf', square(In), W, out_sharding=P('X','Y'))\n    return o\n",
     "o", "f32[8@X,8192@Y]"},
    {"mesh X=2 Y=2\njit m(In: f32[8,2048] @ P('X','Y'), W: f32[2048,8192] @ P('Y', None)):\n"
     "    o = einsum('bd,df->bf', In, W, out_sharding=P('X', None))\n    return o\n",
     "o", "f32[8@X,8192]"},
    {"mesh X=2 Y=4\njit d(a: f32[8,16] @ P('X', None), b: f32[16,32] @ P(None, 'Y')):\n"
     "    c = a @ b\n    return c\n",
     "c", "f32[8@X,32@Y]"},
    /* a contraction sharded on one side only: JAX keeps the free dimension's X */
    {"mesh X=2 Y=4\njit d(a: f32[8,16] @ P('X', None), b: f32[16,4] @ P('X', None)):\n"
     "    c = a @ b\n    return c\n",
     "c", "f32[8@X,4]"},
    {"mesh X=2 Y=4\njit s(a: f32[8,16] @ P('X', 'Y')):\n    t = jnp.sum(a, axis=1)\n    return t\n",
     "t", "f32[8@X]"},
    {"mesh X=2 Y=4\njit s(a: f32[8,16] @ P('X', 'Y')):\n    t = a.T\n    return t\n", "t",
     "f32[16@Y,8@X]"},
    {"mesh X=2 Y=4\njit r(a: f32[8,16] @ P('X', None)):\n    t = a.reshape(8, 4, 4)\n"
     "    return t\n",
     "t", "f32[8@X,4,4]"},
    {"mesh X=2 Y=4\njit r(a: f32[8,4] @ P('X', 'Y')):\n    t = a.reshape(32)\n    return t\n", "t",
     "f32[32@(X,Y)]"},
    {"mesh X=2 Y=4\njit r(a: f32[8,16] @ P('X', None)):\n    t = reshard(a, P(None, 'Y'))\n"
     "    return t\n",
     "t", "f32[8,16@Y]"},
    {"mesh X=2 Y=4\njit z():\n    t = jnp.zeros((8, 4), f32, out_sharding=P('X'))\n    return t\n",
     "t", "f32[8@X,4]"},
    {"mesh X=2 Y=4\njit z(a: i32[8,16] @ P('X', 'Y')):\n    t = a[2:6, :]\n    return t\n", "t",
     "i32[4@X,16@Y]"},
    /* shape ops keep what they can */
    {"mesh X=2 Y=4\njit f(a: i32[8,16] @ P('X', 'Y')):\n    t = jnp.roll(a, 3, axis=1)\n"
     "    return t\n",
     "t", "i32[8@X,16@Y]"},
    {"mesh X=2 Y=4\njit f(a: i32[8,16] @ P('X', 'Y')):\n    t = jnp.pad(a, ((0, 0), (4, 4)))\n"
     "    return t\n",
     "t", "i32[8@X,24@Y]"},
    {"mesh X=2 Y=4\njit f(a: i32[8,16] @ P('X', None), b: i32[8,16] @ P('X', None)):\n"
     "    t = jnp.concatenate((a, b), axis=1)\n    return t\n",
     "t", "i32[8@X,32]"},
    {"mesh X=2 Y=4\njit f(a: i32[8,16] @ P(None, 'Y'), b: i32[8,16] @ P(None, 'Y')):\n"
     "    t = jnp.concatenate((a, b), axis=1)\n    return t\n",
     "t", "i32[8,32@Y]"},
    {"mesh X=2 Y=4\njit f(a: i32[8,16] @ P('X', 'Y')):\n    t = jnp.expand_dims(a, 0)\n"
     "    u = jnp.squeeze(t, 0)\n    return u\n",
     "t", "i32[1,8@X,16@Y]"},
    {"mesh X=2 Y=4\njit f(a: i32[16] @ P('Y')):\n    t = jnp.broadcast_to(a, (8, 16))\n"
     "    return t\n",
     "t", "i32[8,16@Y]"},
    {"mesh X=2 Y=4\njit f(a: i32[8,16] @ P('X', 'Y')):\n"
     "    t = jax.lax.dynamic_slice_in_dim(a, 2, 8, axis=1)\n    return t\n",
     "t", "i32[8@X,8@Y]"},
    {"mesh X=2 Y=4\njit f(a: i32[8,16] @ P('X', 'Y')):\n    t = a[:, 4:8]\n    return t\n", "t",
     "i32[8@X,4@Y]"},
    {"mesh X=2 Y=4\njit f():\n    t = jnp.arange(16, out_sharding=P('Y'))\n    return t\n", "t",
     "i32[16@Y]"},
    {"mesh X=2 Y=4\njit f(a: f32[8,16] @ P('X', 'Y')):\n    t = jnp.mean(a)\n    return t\n", "t",
     "f32[]"},
    /* argmax deletes the reduced dimension from the spec (JAX's
     * _argminmax_sharding_rule); prod and any reduce as sum does; the
     * cumulative ops keep the operand's sharding */
    {"mesh X=2 Y=4\njit f(a: f32[8,16] @ P('X', 'Y')):\n    t = jnp.argmax(a, axis=1)\n"
     "    return t\n",
     "t", "i32[8@X]"},
    {"mesh X=2 Y=4\njit f(a: f32[8,16] @ P('X', 'Y')):\n    t = jnp.argmin(a, 0, keepdims=True)\n"
     "    return t\n",
     "t", "i32[1,16@Y]"},
    {"mesh X=2 Y=4\njit f(a: f32[8,16] @ P('X', 'Y')):\n    t = jnp.prod(a / 4, axis=0)\n"
     "    return t\n",
     "t", "f32[16@Y]"},
    {"mesh X=2 Y=4\njit f(a: i32[8,16] @ P('X', 'Y')):\n"
     "    t = jnp.any(a > 0, axis=1) & jnp.all(a < 9, axis=1)\n    return t\n",
     "t", "bool[8@X]"},
    {"mesh X=2 Y=4\njit f(a: i32[8,16] @ P(None, 'Y')):\n    t = jnp.cumsum(a, axis=0)\n"
     "    return t\n",
     "t", "i32[8,16@Y]"},
    {"mesh X=2 Y=4\njit f(a: f32[8,16] @ P('X', 'Y')):\n    t = jnp.cummax(a)\n    return t\n", "t",
     "f32[128]"},
    {"mesh X=2 Y=4\njit f(a: f32[8,16] @ P('X', None)):\n    t = jnp.argsort(a)\n    return t\n",
     "t", "i32[8@X,16]"},
    {"mesh X=2 Y=4\njit f(a: i32[8,16] @ P('X', 'Y')):\n    t = ~a ^ (a | 3)\n    return t\n", "t",
     "i32[8@X,16@Y]"},
    /* gathers (JAX's _gather_spec_computation): an embedding lookup keeps
     * the table's feature sharding; take_along_axis pairs the batch
     * dimensions; out_sharding= decides where the rule cannot */
    {"mesh X=2 Y=4\njit f(e: f32[16,8] @ P(None, 'Y'), t: i32[4,3] @ P()):\n"
     "    h = jnp.take(e, t, axis=0)\n    return h\n",
     "h", "f32[4,3,8@Y]"},
    {"mesh X=2 Y=4\njit f(lp: f32[8,16] @ P('X', None), y: i32[8,1] @ P('X', None)):\n"
     "    g = jnp.take_along_axis(lp, y, axis=1)\n    return g\n",
     "g", "f32[8@X,1]"},
    {"mesh X=2 Y=4\njit f(e: f32[16,8] @ P('X', 'Y'), t: i32[4] @ P('X')):\n"
     "    h = jnp.take(e, t, axis=0, out_sharding=P('X', 'Y'))\n    return h\n",
     "h", "f32[4@X,8@Y]"},
    /* segment sums: the segments whole, data's other dimensions as they were */
    {"mesh X=2 Y=4\njit f(g: f32[8,3,16] @ P('X', None, 'Y'), t: i32[8,3] @ P('X')):\n"
     "    e = segment_sum(g, t, 10)\n    return e\n",
     "e", "f32[10,16@Y]"},
    /* scatters: the operand's sharding where JAX's rule lays it out alone, or
     * out_sharding's */
    {"mesh X=2 Y=4\njit f(x: f32[8,16] @ P(None, 'Y'), t: i32[4] @ P(), u: f32[4,16] @ "
     "P(None, 'Y')):\n    e = scatter_add(x, t, u)\n    return e\n",
     "e", "f32[8,16@Y]"},
    {"mesh X=2 Y=4\njit f(x: f32[8,16] @ P('X', 'Y'), t: i32[2,2] @ P('X'), u: f32[2,2,16] @ "
     "P('X')):\n    e = scatter(x, t, u, out_sharding=P('X', 'Y'))\n    return e\n",
     "e", "f32[8@X,16@Y]"},
    /* a function named like an op: in its own body the name is the op's
     * (the text form has no recursion) */
    {"mesh X=2 Y=4\njit sum(a: f32[8,16] @ P('X', 'Y')):\n    t = jnp.sum(a, axis=1)\n"
     "    return t\n",
     "t", "f32[8@X]"},
    {"mesh X=2 Y=4\ndef max(a):\n    return jnp.max(a, axis=0) * 2\n"
     "jit f(a: f32[8,16] @ P('X', 'Y')):\n    t = max(a)\n    return t\n",
     "t", "f32[16@Y]"},
    /* Auto axes never show in a type */
    {"mesh X=2 Y=4 axis_types=(Explicit, Auto)\njit f(x: f32[8,16] @ P('X', 'Y')):\n"
     "    z = x * 2\n    return z\n",
     "z", "f32[8@X,16]"},
    /* with_sharding_constraint over the Auto axis of a mesh of an Explicit
     * one keeps the operand's Explicit sharding in the type (JAX's
     * test_wsc_mix_axis_types; it dropped X) */
    {"mesh X=4 Y=2 axis_types=(Explicit, Auto)\njit f(x: f32[8,2] @ P('X', None)):\n"
     "    z = with_sharding_constraint(x, P('Y'))\n    return z\n",
     "z", "f32[8@X,2]"},
    /* the axis-twice error's auto_axes fix */
    {"mesh X=2 Y=4\ndef add2(x, y):\n    return x + y\n"
     "jit f(x: f32[4,4] @ P('X', None), y: f32[4,4] @ P(None, 'X')):\n"
     "    z = auto_axes(add2, out_sharding=P('X', None))(x, y)\n    return z\n",
     "z", "f32[4@X,4]"},
    /* a function with several results: one sharding each */
    {"mesh X=2 Y=4\ndef two(x, y):\n    return x + y, x * y\n"
     "jit f(x: f32[4,4] @ P('X', None), y: f32[4,4] @ P(None, 'X')):\n"
     "    z, w = auto_axes(two, out_sharding=(P('X', None), P(None, 'Y')))(x, y)\n"
     "    return w\n",
     "w", "f32[4,4@Y]"},
    /* axes=: those axes Auto, the Explicit rules on the others (an operand sharded on an
     * Explicit axis wins over one unsharded there) */
    {"mesh X=2 Y=2\ndef h(a, b):\n    c = a + b\n    return c\n"
     "jit f(x: f32[4,4] @ P('X', 'Y'), y: f32[4,4] @ P(None, 'X')):\n"
     "    r = auto_axes(h, out_sharding=P('Y', 'X'), axes='X')(x, y)\n    return r\n",
     "c", "f32[4,4@Y]"},
    /* explicit_axes: in a mesh of Auto axes, its axes Explicit inside (the arguments
     * resharded to in_sharding first), hidden again after */
    {"mesh X=2 Y=2 axis_types=(Auto, Auto)\ndef h(a, b):\n    c = a + b\n    return c\n"
     "jit f(x: f32[4,4] @ P('X', None), y: f32[4,4] @ P(None, 'X')):\n"
     "    r = explicit_axes(h, axes='X', in_sharding=(P('X', None), P('X', None)))(x, y)\n"
     "    s = r * 2\n    return s\n",
     "c", "f32[4@X,4]"},
    {"mesh X=2 Y=2 axis_types=(Auto, Auto)\ndef h(a, b):\n    c = a + b\n    return c\n"
     "jit f(x: f32[4,4] @ P('X', None), y: f32[4,4] @ P(None, 'X')):\n"
     "    r = explicit_axes(h, in_sharding=P(None, 'Y'))(x, y)\n    s = r * 2\n    return s\n",
     "r", "f32[4,4]"},
    /* a shard_map Manual over some axes (axis_names=): blocks over those, typed over the
     * others as a jit body's values (a sharding constraint pins an Auto one) */
    {"mesh i=4 j=2 axis_types=(Explicit, Auto)\n"
     "shard_map g(x: f32[8,4] @ P('i')) -> P('i'), axis_names={'i'}:\n"
     "    y = with_sharding_constraint(x, P(None, 'j'))\n    s = psum(y, 'i')\n"
     "    return y * axis_size('i') - s + axis_index('i')\n"
     "jit f(x: f32[8,4] @ P('i', 'j')):\n    r = g(reshard(x, P('i', None)))\n    return r\n",
     "y", "f32[2,4]{V:i}"},
    {"mesh i=4 j=2\nshard_map g(x: f32[8,4] @ P('i')) -> P('i'), axis_names={'i'}:\n"
     "    y = x * 2\n    return y\njit f(x: f32[8,4] @ P('i', 'j')):\n    r = g(x)\n"
     "    return r\n",
     "y", "f32[2,4@j]{V:i}"},
    {"mesh i=4 j=2\nshard_map g(x: f32[8,4] @ P('i')) -> P('i'), axis_names={'i'}:\n"
     "    y = x * 2\n    return y\njit f(x: f32[8,4] @ P('i', 'j')):\n    r = g(x)\n"
     "    return r\n",
     "r", "f32[8@i,4@j]"},
    /* a creation op there takes its out_sharding over the other axes (it
     * went through the collectives' rule and came out replicated: JAX's
     * test_manual_mode_mix_map's lax.map buffer) */
    {"mesh i=4 j=2\nshard_map g(x: f32[8,4] @ P('i')) -> P('i'), axis_names={'i'}:\n"
     "    z = zeros((2, 4), out_sharding=P(None, 'j'))\n    return z + x\n"
     "jit f(x: f32[8,4] @ P('i', 'j')):\n    r = g(x)\n    return r\n",
     "z", "f32[2,4@j]"},
    /* reduced (JAX's P(reduced=...)): replicated, the cotangent unreduced */
    {"mesh x=2\njit f(w: f32[8] @ P(None, reduced={'x'})):\n    y = jnp.sin(w) * 2\n"
     "    return y\n",
     "y", "f32[8]{R:x}"},
    {"mesh x=2 y=2\njit f(w: f32[8] @ P(None, reduced={'x', 'y'})):\n"
     "    y = jnp.reshape(w, (2, 4))\n    return y\n",
     "y", "f32[2,4]{R:x,y}"},
    {"mesh x=2\njit f(w: f32[8,2] @ P(None, None, reduced={'x'}), i: i32[4] @ P()):\n"
     "    g = jnp.take(w, i, axis=0)\n    return g\n",
     "g", "f32[4,2]{R:x}"},
    {"mesh x=2\njit f(w: f32[8] @ P('x')):\n    r = reshard(w, P(reduced={'x'}))\n"
     "    m = jnp.max(r, axis=0)\n    return m\n",
     "m", "f32[]{R:x}"},
    {"mesh x=2\njit f(w: f32[8] @ P(None, reduced={'x'})):\n    s = reshard(w, P('x'))\n"
     "    return s\n",
     "s", "f32[8@x]"},
    {"mesh x=2\nshard_map f(w: f32[8] @ P('x')) -> P(reduced={'x'}):\n"
     "    g = all_gather(w, 'x', tiled=True, to='reduced')\n    return jnp.max(g, axis=0)\n",
     "g", "f32[8]{R:x}"},
    {"mesh x=2\nshard_map f(w: f32[8] @ P()) -> P(reduced={'x'}):\n"
     "    r = pcast(w, 'x', to='reduced')\n    return r\n",
     "r", "f32[8]{R:x}"},
    {"mesh x=2\nshard_map f(w: f32[8] @ P(reduced={'x'})) -> P('x'):\n"
     "    v = pcast(w, 'x', to='varying')\n    return v\n",
     "v", "f32[8]{V:x}"},
    /* nested (NESTED_1D) */
    {NESTED_1D, "inner", "f32[2,4]{V:x,y}"},
    {NESTED_1D, "back", "f32[2,8@y]{V:x}"},
    {NESTED_1D, "r", "f32[4@x,8@y]"},
    /* JAX's test_partial_auto_explicit_multi_explicit */
    {"mesh i=2 j=1 k=2 l=2\n"
     "shard_map g(x: f32[4,2,2,4] @ P('i', 'j')) -> P('i', 'j', None, None), "
     "axis_names={'i', 'j'}:\n    out = x.T\n    return out\n"
     "jit f(x: f32[4,2,2,4] @ P('i', 'j', 'k', 'l')):\n    r = g(x)\n    return r\n",
     "out", "f32[4@l,2@k,2,2]{V:i,j}"},
    {"mesh i=2 j=1 k=2 l=2\n"
     "shard_map g(x: f32[4,2,2,4] @ P('i', 'j')) -> P('i', 'j', None, None), "
     "axis_names={'i', 'j'}:\n    out = x.T\n    return out\n"
     "jit f(x: f32[4,2,2,4] @ P('i', 'j', 'k', 'l')):\n    r = g(x)\n    return r\n",
     "r", "f32[8@(i,l),2@(j,k),2,2]"},
    {"mesh i=4 j=2 axis_types=(Explicit, Auto)\n"
     "shard_map g(x: f32[8,4] @ P('i'), w: f32[4] @ P()) -> P('i'), axis_names={'i'}:\n"
     "    t = jnp.dot(x, w)\n    return jnp.cumsum(t) + pmax(t, 'i')\n"
     "jit f(x: f32[8,4] @ P('i', 'j'), w: f32[4] @ P()):\n    r = g(x, w) * 2\n    return r\n",
     "r", "f32[8@i]"},
};

START_TEST(test_types)
{
    const type_case *c = &types[_i];
    sm_program *p = parse_ok(c->text);
    int v = value_named(p, c->value);
    ck_assert_msg(v >= 0, "no value %s", c->value);
    char t[256];
    sm_program_value_type(p, v, t, sizeof t);
    ck_assert_msg(strcmp(t, c->type) == 0, "%s: type %s, expected %s", c->value, t, c->type);
    sm_program_free(p);
}
END_TEST

/* A jit program prints in the text form and re-parses to an equal program
 * (those with inlined shard_map, auto_axes or explicit_axes calls print
 * their per-device, Auto and Explicit ops marked with comments, and are not
 * re-parsed). */
START_TEST(test_print_roundtrip)
{
    const type_case *c = &types[_i];
    sm_program *p = parse_ok(c->text), *q = NULL;
    int plain = 1;
    for (int k = 0; k < p->nops; k++)
        plain &= !p->ops[k].manual && !p->ops[k].auto_mask && !p->ops[k].explicit_mask;
    sm_strbuf sb = {0};
    ck_assert_int_eq(sm_program_print(p, &sb), SM_OK);
    if (plain) {
        char err[1024];
        sm_err e = sm_program_parse(sm_strbuf_str(&sb), "t.shmap", &q, err, sizeof err);
        ck_assert_msg(e == SM_OK, "re-parse: %s\n%s", err, sm_strbuf_str(&sb));
        ck_assert_msg(sm_program_equal(p, q), "printed program differs:\n%s", sm_strbuf_str(&sb));
        sm_program_free(q);
    }
    sm_strbuf_free(&sb);
    sm_program_free(p);
}
END_TEST

/* ---- refusals, with JAX's sentences ---- */

typedef struct {
    const char *text;
    const char *words[3];
} error_case;

static const error_case errors[] = {
    {"mesh X=2 Y=2 axis_types=(Auto, Auto)\n"
     "jit f(x: f32[4,4] @ P('X', None), y: f32[4,4] @ P(None, 'X')):\n"
     "    z = explicit_axes(add, in_sharding=(P('X', None), P(None, 'X')))(x, y)\n"
     "    return z\n",
     {"t.shmap:3:", "duplicate entries for X"}},
    {"mesh X=2 Y=2 axis_types=(Auto, Auto)\n"
     "jit f(x: f32[4,4] @ P('X', None), y: f32[4,4] @ P(None, 'X')):\n"
     "    z = explicit_axes(add, in_sharding=(P('X', None),))(x, y)\n    return z\n",
     {"t.shmap:3:", "explicit_axes: in_sharding has 1 shardings for more array arguments"}},
    {"mesh X=2 Y=2 axis_types=(Auto, Auto)\njit f(x: f32[4,4] @ P('X', None)):\n"
     "    z = explicit_axes(sin, axes='X')(x)\n    return z\n",
     {"t.shmap:3:", "explicit_axes needs in_sharding=P(...)"}},
    /* with_sharding_constraint: JAX's assert with every axis Explicit, and its refusal of a
     * spec naming an Explicit axis otherwise */
    {"mesh X=2 Y=2\njit f(x: f32[4,4] @ P('X', None)):\n"
     "    y = with_sharding_constraint(x, P(None, 'Y'))\n    return y\n",
     {"t.shmap:3:", "`with_sharding_constraint` acts as an assert when all axes of mesh are of "
                    "type `Explicit`. The array sharding: P('X', None) did not match the sharding "
                    "provided: P(None, 'Y')."}},
    {"mesh X=2 Y=2 axis_types=(Explicit, Auto)\njit f(x: f32[4,4] @ P('X', None)):\n"
     "    y = with_sharding_constraint(x, P('X', 'Y'))\n    return y\n",
     {"The spec of NamedSharding passed to with_sharding_constraint can only refer to Auto axes "
      "of the mesh. Got spec=P('X', 'Y') and mesh=Mesh('X': 2, 'Y': 2, axis_types=(Explicit, "
      "Auto)). You probably meant to use `reshard` API?"}},
    {"mesh X=2 Y=4\ndef two(x, y):\n    return x + y, x * y\n"
     "jit f(x: f32[4,4] @ P('X', None), y: f32[4,4] @ P(None, 'X')):\n"
     "    z, w = auto_axes(two, out_sharding=P('X', None))(x, y)\n    return w\n",
     {"t.shmap:5:", "auto_axes: 'two' returns 2 values but out_sharding has 1 sharding"}},
    {"mesh X=2 Y=4\n"
     "jit f(x: f32[4,4] @ P('X', None), y: f32[4,4] @ P(None, 'X')):\n"
     "    z = auto_axes(add, out_sharding=(P('X'), 'Y'))(x, y)\n    return z\n",
     {"t.shmap:3:", "out_sharding must be a PartitionSpec P(...) or a tuple of them"}},
    {"mesh X=2 Y=4\njit f(x: f32[4,4] @ P('X', None)):\n"
     "    z = auto_axes(sin, out_sharding=P('X'), axes=('X', 'Z'))(x)\n    return z\n",
     {"t.shmap:3:", "auto_axes: 'Z' is not an axis of the mesh"}},
    {"mesh X=2 Y=2\n"
     "jit f(x: f32[4,4] @ P('X', 'Y'), y: f32[4,4] @ P(None, 'X')):\n"
     "    z = auto_axes(add, out_sharding=P('X'), axes='Y')(x, y)\n    return z\n",
     {"t.shmap:3:", "duplicate entries for X"}},
    {"mesh X=2 Y=2\njit m(In: f32[8,2048] @ P('X','Y'), W: f32[2048,8192] @ P('Y', None)):\n"
     "    return einsum('bd,df->bf', In, W)\n",
     {"t.shmap:3:", "Contracting dimensions are sharded and it is ambiguous",
      "lhs_contracting_spec=('Y',) and rhs_contracting_spec=('Y',)"}},
    {"mesh X=2 Y=4\njit f(x: f32[4,4] @ P('X', None), y: f32[4,4] @ P(None, 'X')):\n"
     "    return x + y\n",
     {"at most one positional dimension", "duplicate entries for X", "auto_axes"}},
    {"mesh X=2 Y=4\njit f(x: f32[8] @ P('X'), y: f32[8] @ P('Y')):\n    return x + y\n",
     {"add got incompatible shardings for broadcasting", "('X',), ('Y',)"}},
    {"mesh X=2 Y=4\njit f(x: f32[8] @ P('X'), y: f32[8] @ P('Y')):\n    return x * y\n",
     {"mul got incompatible shardings for broadcasting", "('X',), ('Y',)"}},
    {"mesh X=2 Y=2\njit f(x: f32[8,2] @ P('X', None), y: f32[2,8] @ P(None, 'X')):\n"
     "    return einsum('ab,bc->ac', x, y)\n",
     {"dot_general operation with inputs: f32[8@X,2], f32[2,8@X] produces an illegally sharded "
      "result: f32[8@X,8@X]",
      "duplicate entries for X"}},
    {"mesh X=2 Y=4\njit f(x: f32[8] @ P('X'), y: f32[8] @ P('Y')):\n    return maximum(x, y)\n",
     {"max got incompatible shardings for broadcasting"}},
    {"mesh X=2 Y=4\njit f(x: f32[8] @ P('X')):\n    return psum(x, 'X')\n",
     {"psum is a collective", "shard_map"}},
    {"mesh X=2 Y=4\njit f(x: f32[8, 6] @ P('X', None)):\n    return x[0:3, :]\n",
     {"slicing on sharded dims where out dim (3) is not divisible by mesh axes (2) with spec "
      "(X) is not implemented. Got input type=f32[8@X,6] and output shape=[3,6]"}},
    {"mesh X=2 Y=4\njit f(x: f32[16, 6] @ P(('X', 'Y'), None)):\n    return x[0:4, :]\n",
     {"slicing on sharded dims where out dim (4) is not divisible by mesh axes (8) with spec "
      "(('X', 'Y')) is not implemented. Got input type=f32[16@(X,Y),6] and output shape=[4,6]"}},
    {"mesh X=2 Y=4\njit f(x: f32[8, 4] @ P('X', None)):\n    return x.reshape(4, 8)\n",
     {"This reshape is not supported", "out_sharding"}},
    {"mesh X=2 Y=4\njit f(x: f32[8] @ P('X'), y: f32[8] @ P(None)):\n"
     "    return jnp.concatenate((x, y))\n",
     {"All operands should have the same sharding"}},
    {"mesh X=2 Y=4\njit f(x: f32[8] @ P('X')):\n    return jnp.tile(x, 2)\n",
     {"Operand cannot be sharded on dimension 0 when the tiling is non-trivial",
      "f32[8@X] with reps: (2,)"}},
    {"mesh i=4\nshard_map f(x: f32[8] @ P('i')) -> P('i'):\n    return reshard(x, P())\n",
     {"reshard belongs to global-view (jit) programs"}},
    {"mesh X=2 Y=4\njit f(x: f32[6] @ P('X')):\n    return reshard(x, P('Y'))\n",
     {"not divisible", "6"}},
    /* the replication check of a shard_map function called from jit */
    {"mesh X=2 Y=4\nshard_map g(a: f32[8,8] @ P('X', 'Y')) -> P('X', None):\n    return a * 2\n"
     "jit f(x: f32[8,8] @ P('X', 'Y')):\n    return g(x)\n",
     {"t.shmap:5:", "varies over mesh axis 'Y'", "check_vma=False"}},
    {"mesh X=2 Y=4\nshard_map g(a: f32[8,8] @ P('X', 'Y')) -> P('X', None):\n    return a\n"
     "jit f(x: f32[8,8] @ P('X', 'Y')):\n    return g(x, x)\n",
     {"g takes 1 argument, got 2"}},
    {"mesh X=2 Y=4\nshard_map g(a: f32[8,8] @ P('X', 'Y')) -> P('X', None):\n    return a\n"
     "jit f(x: f32[4,8] @ P('X', 'Y')):\n    return g(x)\n",
     {"argument 'a' is f32[4@X,8@Y], but the function declares f32[8,8]"}},
    {"mesh X=2 Y=4\nshard_map g(a: f32[8,8] @ P('X', 'Y')) -> P('X', 'Y'):\n    return a\n"
     "shard_map f(x: f32[8,8] @ P('X', 'Y')) -> P('X', 'Y'):\n    return g(x)\n",
     {"only a jit body calls shard_map and jit functions"}},
    /* P.UNCONSTRAINED: with_sharding_constraint's only */
    {"mesh X=2 Y=2 axis_types=(Auto, Auto)\njit f(x: f32[4,4] @ P('X', None)):\n"
     "    return reshard(x, P(UNCONSTRAINED, 'Y'))\n",
     {"P.UNCONSTRAINED leaves a dimension's sharding to the service, which only "
      "with_sharding_constraint may do"}},
    {"mesh X=2\njit f(x: f32[4,4] @ P(UNCONSTRAINED, None)):\n    return x\n",
     {"P(UNCONSTRAINED, None)", "only with_sharding_constraint may do"}},
    /* reduced values (JAX's default_nary_reduced_rule and the others) */
    {"mesh x=2\njit f(w: f32[8] @ P(None, reduced={'x'}), r: f32[8] @ P()):\n"
     "    return w * r\n",
     {"Inputs cannot be replicated on the same axes that another input is reduced on",
      "Got input type: f32[8] and reduced spec: {'x'}"}},
    {"mesh x=2\njit f(w: f32[8] @ P(None, reduced={'x'}), s: f32[8] @ P('x')):\n"
     "    return s + w\n",
     {"Inputs cannot be sharded/varying on the same axes that another input is reduced on",
      "f32[8@x]"}},
    {"mesh x=2 y=2\njit f(a: f32[8] @ P(None, reduced={'x'}), b: f32[8] @ P(None, "
     "reduced={'y'})):\n    return a - b\n",
     {"All inputs should be reduced across the same mesh axes", "{'x'}, {'y'}"}},
    {"mesh X=2\njit f(x: f32[2,2] @ P(None, 'X'), y: f32[2,2] @ P('X', None)):\n"
     "    z = jnp.einsum('ab,bc->ac', x, y, out_sharding=P(unreduced={'X'}))\n"
     "    return reshard(x, P(None, None, reduced={'X'})) / z\n",
     {"The denominator cannot be unreduced passed to `div`", "y=f32[2,2]{U:X}"}},
    {"mesh X=2\njit f(x: f32[2,2] @ P(None, 'X'), y: f32[2,2] @ P('X', None)):\n"
     "    z = jnp.einsum('ab,bc->ac', x, y, out_sharding=P(unreduced={'X'}))\n"
     "    return z * y.T\n",
     {"RHS should be reduced along the same axes LHS is unreduced on"}},
    {"mesh x=2\njit f(w: f32[8] @ P(None, reduced={'x'})):\n"
     "    return jnp.reshape(w, (2, 4), out_sharding=P(None, None))\n",
     {"out_sharding passed to reshape must be reduced over the same mesh axes as operand"}},
    {"mesh x=2\njit f(w: f32[8] @ P('x', reduced={'x'})):\n    return w\n",
     {"partitions cannot overlap with reduced axes"}},
    {"mesh x=2\njit f(w: f32[8] @ P(None, unreduced={'x'}, reduced={'x'})):\n    return w\n",
     {"`unreduced` and `reduced` argument to PartitionSpec cannot overlap"}},
    {"mesh x=2\njit f(w: f32[8] @ P(None, reduced={'x'})):\n    k = 0\n    while k < 3:\n"
     "        w = reshard(w, P())\n        k = k + 1\n    return w\n",
     {"while loop: the carried value 'w' has type f32[8]{R:x}, but the body gives it the next "
      "value of type f32[8]",
      "keeps its unreduced and reduced axes"}},
    {"mesh x=2\nshard_map g(w: f32[8] @ P()) -> P():\n    return w\n"
     "jit f(w: f32[8] @ P(None, reduced={'x'})):\n    return g(w)\n",
     {"in_specs containing reduced P() passed to shard_map should be equal to the reduced "
      "present on the in_aval",
      "f32[8]{R:x}"}},
    {"mesh x=2\nshard_map f(w: f32[8] @ P(reduced={'x'})) -> P():\n    return w * 2\n",
     {"out_specs passed to shard_map should be equal to the reduced present on the out_aval",
      "out_aval=f32[8]{R:x}"}},
    {"mesh x=2\nshard_map f(w: f32[8] @ P('x')) -> P(reduced={'x'}):\n"
     "    return all_gather(all_gather(w, 'x', tiled=True, to='reduced'), 'x', tiled=True, "
     "to='reduced')\n",
     {"all_gather_reduced's input cannot be reduced across the axis_name"}},
    /* unreduced values of the kind max */
    {"mesh x=2\nshard_map m(a: f32[4,2] @ P('x', None)) -> P(None, unreduced={'x'}, "
     "unreduced_kind=max), check_vma=False:\n    return jnp.max(a, axis=0)\n"
     "jit f(a: f32[4,2] @ P('x', None)):\n    u = m(a)\n    return reshard(u + u, P())\n",
     {"add: Expected unreduced_kind=UnreducedKind.sum but got UnreducedKind.max",
      "f32[2]{U_max:x}"}},
    {"mesh x=2\njit f(a: f32[4] @ P('x')):\n"
     "    return reshard(a, P(unreduced={'x'}, unreduced_kind=max))\n",
     {"cannot be more unreduced than the input"}},
    {"mesh x=2\nshard_map m(a: f32[4,2] @ P('x', None)) -> P(None, unreduced={'x'}, "
     "unreduced_kind=max), check_vma=False:\n    return jnp.max(a, axis=0)\n"
     "jit f(a: f32[4,2] @ P('x', None)):\n    u = m(a)\n"
     "    return reshard(u, P(unreduced={'x'}))\n",
     {"The unreduced_kind of input and output sharding passed to `jax.reshard` should be the "
      "same"}},
    {"mesh X=2\njit f(x: f32[2,2] @ P(None, 'X'), y: f32[2,2] @ P('X', None)):\n"
     "    return jnp.einsum('ab,bc->ac', x, y, out_sharding=P(unreduced={'X'}, "
     "unreduced_kind=UnreducedKind.min))\n",
     {"`out_sharding` passed to `dot_general` can only contain unreduced of kind `sum`"}},
    /* unreduced values (JAX's *_ur_rule sentences) */
    {"mesh x=2\nshard_map s(a: f32[4,6] @ P(unreduced={'x'})) -> P():\n    return jnp.sin(a)\n"
     "jit f(x: f32[4,2] @ P(None, 'x'), y: f32[2,6] @ P('x', None)):\n"
     "    z = jnp.einsum('ab,bc->ac', x, y, out_sharding=P(unreduced={'x'}))\n    return s(z)\n",
     {"t.shmap:3:", "unreduced rule for sin is not implemented"}},
    {"mesh x=2 y=2\nshard_map f(a: f32[2,4] @ P('x', None), b: f32[4,2] @ P(None, None)) "
     "-> P('x', None, unreduced={'y'}):\n    return jnp.einsum('ab,bc->ac', a, b)\n"
     "jit g(a: f32[2,4] @ P('x', None), b: f32[4,2] @ P(None, None)):\n    return f(a, b)\n",
     {"out_specs passed to shard_map should be equal to the unreduced present on the out_aval",
      "out_specs=P('x', None, unreduced={'y'})", "out_aval=f32[1,2]{V:x}"}},
    {"mesh X=2\njit f(x: f32[4,2] @ P(None, 'X'), y: f32[2,6] @ P('X', None)):\n"
     "    z = jnp.einsum('ab,bc->ac', x, y, out_sharding=P(unreduced={'X'}))\n"
     "    return reshard(z + 1, P())\n",
     {"lhs is unreduced while rhs is not", "Please reduce lhs via `reshard`"}},
    {"mesh X=2\njit f(x: f32[4,2] @ P(None, 'X'), y: f32[2,6] @ P('X', None)):\n"
     "    z = jnp.einsum('ab,bc->ac', x, y, out_sharding=P(unreduced={'X'}))\n"
     "    return reshard(z * z, P())\n",
     {"lhs and rhs to `mul` cannot be unreduced since mul is bilinear"}},
    {"mesh X=2\njit f(x: f32[4,2] @ P(None, 'X'), y: f32[2,6] @ P('X', None)):\n"
     "    z = jnp.einsum('ab,bc->ac', x, y, out_sharding=P(unreduced={'X'}))\n"
     "    return reshard(z @ y.T, P())\n",
     {"lhs or rhs passed to dot_general cannot be unreduced"}},
    {"mesh X=2 Y=2\njit f(x: f32[4,2] @ P(None, 'X'), y: f32[2,6] @ P('X', None)):\n"
     "    z = jnp.einsum('ab,bc->ac', x, y, out_sharding=P(unreduced={'Y'}))\n"
     "    return reshard(z, P())\n",
     {"out_sharding's unreduced axes should be equal to the contracting specs",
      "unreduced axes={'Y'} and contracting spec=('X',)"}},
    {"mesh X=2 Y=2\njit f(x: f32[4,2] @ P(None, 'X'), y: f32[2,6] @ P('Y', None)):\n"
     "    z = jnp.einsum('ab,bc->ac', x, y, out_sharding=P(unreduced={'X'}))\n"
     "    return reshard(z, P())\n",
     {"contracting dims should be sharded identically",
      "lhs_contracting_spec=('X',), rhs_contracting_spec=('Y',)"}},
    {"mesh X=2\njit f(x: f32[4,2] @ P(None, None, unreduced={'X'})):\n    return x @ x.T\n",
     {"lhs or rhs passed to dot_general cannot be unreduced", "f32[4,2]{U:X}"}},
    {"mesh X=2\njit f(x: f32[4,2] @ P('X')):\n    return reshard(x, P('X', unreduced={'X'}))\n",
     {"partitions cannot overlap", "unreduced"}},
    {"mesh X=2\njit f(x: f32[4,2] @ P(None, 'X'), y: f32[2,6] @ P('X', None), w: f32[4,6] @ "
     "P()):\n    z = jnp.einsum('ab,bc->ac', x, y, out_sharding=P(unreduced={'X'}))\n"
     "    return reshard(jnp.concatenate([z, w]), P())\n",
     {"concatenate: all operands should be unreduced along the same mesh axes", "f32[4,6]{U:X}"}},
    {"mesh X=2\njit f(x: f32[4,2] @ P()):\n"
     "    return with_sharding_constraint(x, P(unreduced={'X'}))\n",
     {"is not unreduced over {'X'}, so it cannot be made so"}},
    {"mesh i=2 j=2\nshard_map f(x: f32[4,2] @ P('i')) -> P('i'):\n"
     "    return psum(pcast(x, ('i', 'j'), to='unreduced'), 'j')\n",
     {"pcast can only accept axis_name which corresponds to one of",
      "input state: {'varying', 'invarying'}"}},
    {"mesh i=2 j=2\nshard_map f(x: f32[4,2] @ P('i')) -> P('i'):\n"
     "    return pcast(x, 'j', to='unreduced')\n",
     {"Unsupported pcast from=invarying, to='unreduced'"}},
    {"mesh i=2 j=2\nshard_map f(x: f32[4,2] @ P('i')) -> P():\n"
     "    return pmax(pcast(x, 'i', to='unreduced'), 'i')\n",
     {"unreduced rule for pmax is not implemented"}},
    {"mesh i=2 j=2\nshard_map f(x: f32[4,2] @ P('i')) -> P():\n"
     "    return pcast(x, 'i', to='unreduced')\n",
     {"out_specs passed to shard_map should be equal to the unreduced", "out_aval=f32[2,2]{U:i}"}},
    {"mesh X=2 Y=4\njit f(x: f32[8,16] @ P('X', 'Y')):\n    return jnp.cumsum(x, axis=1)\n",
     {"Input should be unsharded over the axis being reduced",
      "Got input type=f32[8@X,16@Y] and axis=1"}},
    {"mesh X=2 Y=4\njit f(x: f32[8] @ P('X')):\n    return x & x\n",
     {"bitwise_and does not accept dtype float32. Accepted dtypes are subtypes of integer, bool."}},
    {"mesh X=2 Y=4\njit f(x: f32[8] @ P('X')):\n    return jnp.argmax(x, axis=(0, 1))\n",
     {"argmax: axis must be an integer or None, got 2 axes"}},
    {"mesh X=2 Y=4\njit f(x: f32[8,0] @ P('X')):\n    return jnp.argmin(x, axis=1)\n",
     {"attempt to get argmin of an empty sequence"}},
    {"mesh X=2 Y=4\njit f(e: f32[16,8] @ P('X', None), t: i32[4] @ P()):\n"
     "    return jnp.take(e, t, axis=0)\n",
     {"Use `.at[...].get(out_sharding=)` to provide output PartitionSpec for the gather indexing",
      "Got operand=f32[16@X,8], indices=i32[4]"}},
    {"mesh X=2 Y=4\njit f(e: f32[16,8] @ P(), t: i32[4] @ P('X')):\n"
     "    return jnp.take(e, t, axis=0)\n",
     {"could not be resolved unambiguously", "indices=i32[4@X]"}},
    /* a Python int takes the integer array's dtype (JAX's OverflowError sentence) */
    {"mesh X=2 Y=4\njit f(x: i32[8] @ P('X')):\n    return x + 2147483648\n",
     {"t.shmap:3:", "Python int 2147483648 too large to convert to int32"}},
    {"mesh X=2 Y=4\njit f(x: u8[8] @ P('X')):\n    return x < -1\n",
     {"Python int -1 too large to convert to uint8"}},
    {"mesh X=2 Y=4\njit f(x: i32[8] @ P('X')):\n    return x & 4294967295\n",
     {"Python int 4294967295 too large to convert to int32"}},
    {"mesh X=2 Y=4\njit f(x: i32[8] @ P('X')):\n    return jnp.where(x > 0, x, 1099511627776)\n",
     {"Python int 1099511627776 too large to convert to int32"}},
    {"mesh X=2 Y=4\njit f(x: u8[8] @ P('X')):\n    return jnp.where(x > 0, 256, x)\n",
     {"Python int 256 too large to convert to uint8"}},
    /* JAX's scatter rule: the first dimension, the indices and the updates'
     * query dimensions whole, the updates' other dimensions as the operand's */
    {"mesh X=2 Y=4\njit f(x: f32[8,16] @ P('X'), t: i32[4] @ P(), u: f32[4,16] @ P()):\n"
     "    return scatter_add(x, t, u)\n",
     {"Use `.at[...].set/add/mul/...(out_sharding=)` to provide output PartitionSpec for the "
      "scatter update as out sharding could not be resolved unambiguously (or would require "
      "collectives on inputs). Got operand=f32[8@X,16], indices=i32[4,1], updates=f32[4,16]"}},
    {"mesh X=2 Y=4\njit f(x: f32[8,16] @ P(None, 'Y'), t: i32[4] @ P(), u: f32[4,16] @ P()):\n"
     "    return scatter(x, t, u)\n",
     {"could not be resolved unambiguously", "operand=f32[8,16@Y], indices=i32[4,1], "
                                             "updates=f32[4,16]"}},
    {"mesh X=2 Y=4\njit f(x: f32[8,16] @ P(), t: i32[4] @ P('X'), u: f32[4,16] @ P()):\n"
     "    return scatter_max(x, t, u)\n",
     {"could not be resolved unambiguously", "indices=i32[4@X,1], updates=f32[4,16]"}},
    {"mesh X=2 Y=4\njit f(x: f32[8,16] @ P(), t: i32[4] @ P(), u: f32[4,16] @ P('X')):\n"
     "    return scatter_min(x, t, u)\n",
     {"could not be resolved unambiguously", "updates=f32[4@X,16]"}},
    {"mesh X=2 Y=4\njit f(x: bool[8,16] @ P(), t: i32[4] @ P(), u: bool[4,16] @ P()):\n"
     "    return scatter_mul(x, t, u)\n",
     {"scatter_mul does not take bool operands, got bool[8,16]"}},
    {"mesh X=2 Y=4\njit f(x: f32[8,16] @ P(), t: i32[4] @ P(), u: f32[4,8] @ P()):\n"
     "    return scatter(x, t, u)\n",
     {"scatter: updates f32[4,8] must have the operand's dtype and the indices' shape followed "
      "by the operand's dimensions after the first (operand f32[8,16], indices i32[4])"}},
    {"mesh X=2 Y=4\njit f(x: f32[8,16] @ P(), t: f32[4] @ P(), u: f32[4,16] @ P()):\n"
     "    return scatter(x, t, u)\n",
     {"scatter: indices must be an integer array, got f32[4]"}},
    {"mesh X=2 Y=4\njit f(e: f32[16,8] @ P(), t: f32[4] @ P()):\n    return jnp.take(e, t)\n",
     {"take: indices must be an integer array, got f32[4]"}},
    {"mesh X=2 Y=4\njit f(e: f32[16,8] @ P(), t: i32[4] @ P()):\n"
     "    return jnp.take(e, t, mode='raise')\n",
     {"mode must be 'fill', 'clip', 'wrap' or 'promise_in_bounds', got 'raise'"}},
    {"mesh X=2 Y=4\ndef g(x):\n    return g(x) + 1\njit f(x: f32[8] @ P('X')):\n"
     "    return g(x)\n",
     {"'g' calls itself: programs have no recursion"}},
    {"mesh X=2 Y=4\njit f(x: f32[8,16] @ P('X', 'Y')):\n    return jnp.sort(x)\n",
     {"Arguments to sort must be unsharded over the sorting dimension. Got arg "
      "sharding=NamedSharding(mesh=Mesh('X': 2, 'Y': 4), spec=P('X', 'Y')) and sorting "
      "dimension=1"}},
    {"mesh X=2 Y=4\njit f(x: bool[8] @ P('X')):\n    return jnp.cummax(x)\n",
     {"cummax does not accept dtype bool. Accepted dtypes are subtypes of number."}},
    {"mesh X=2 Y=4\njit f(x: bool[8] @ P('X')):\n    return x - x\n",
     {"sub does not accept dtype bool. Accepted dtypes are subtypes of number."}},
    {"mesh X=2 Y=4\njit f(x: bool[8] @ P('X')):\n    return -x\n",
     {"neg does not accept dtype bool. Accepted dtypes are subtypes of number."}},
    {"mesh X=2 Y=4\njit f(x: f32[8,16] @ P('X', None)):\n    k = 0\n    while k < 3:\n"
     "        x = reshard(x, P(None, 'Y'))\n        k = k + 1\n    return x\n",
     {"t.shmap:5:9: while loop: the carried value 'x' has type f32[8@X,16], but the body gives "
      "it the next value of type f32[8,16@Y]: a loop-carried value keeps its sharding"}},
    /* shard_map(axis_names=): JAX's sentences for a spec or a collective naming another axis */
    {"mesh i=4 j=2\nshard_map g(x: f32[8,4] @ P('i')) -> P('i'), axis_names={'i'}:\n"
     "    return psum(x, 'j')\n",
     {"t.shmap:3:12: psum: unbound axis name: j", "axis_names are {'i'}"}},
    {"mesh i=4 j=2\nshard_map g(x: f32[8,4] @ P('i')) -> P('i'), axis_names=frozenset({'i'}):\n"
     "    return x * axis_size(('i', 'j'))\n",
     {"axis_size: unbound axis name: j"}},
    {"mesh i=4 j=2\nshard_map g(x: f32[8,4] @ P('i', 'j')) -> P('i'), axis_names={'i'}:\n"
     "    return x\n",
     {"shard_map in_specs argument must refer to an axis marked as manual (frozenset({'i'})), "
      "but: in_specs[0] refers to 'j'. Check the in_specs values passed to shard_map."}},
    {"mesh i=4 j=2\nshard_map g(x: f32[8,4] @ P('i')) -> P('i', 'j'), axis_names=('i',):\n"
     "    return x\n",
     {"shard_map out_specs argument must refer to an axis marked as manual", "out_specs refers "
                                                                             "to 'j'"}},
    /* nested shard_maps: over axes not Manual around them */
    {"mesh i=2 j=2\nshard_map g(x: f32[2,8] @ P('i')) -> P('i'), axis_names={'i'}:\n"
     "    return x\nshard_map h(x: f32[4,8] @ P('i')) -> P('i'), axis_names={'i'}:\n"
     "    return g(x)\njit f(x: f32[4,8] @ P('i')):\n    return h(x)\n",
     {"g: its axis_names {'i'} name axes already Manual in the shard_map around it"}},
    {"mesh i=2 j=2\nshard_map g(x: f32[2,8] @ P('j')) -> P('j'), axis_names={'j'}:\n"
     "    return x\nshard_map h(x: f32[4,8] @ P('i')) -> P('i'):\n"
     "    return g(x)\njit f(x: f32[4,8] @ P('i')):\n    return h(x)\n",
     {"a shard_map function Manual over every mesh axis cannot call another one"}},
    {"mesh i=2 j=2\nshard_map g(x: f32[2,8] @ P('i')) -> P('i'), axis_names={'j'}:\n"
     "    return x\nshard_map h(x: f32[4,8] @ P('i')) -> P('i'), axis_names={'i'}:\n"
     "    return g(x)\njit f(x: f32[4,8] @ P('i')):\n    return h(x)\n",
     {"shard_map in_specs argument must refer to an axis marked as manual (frozenset({'j'}))"}},
    {"mesh i=2 j=2\nshard_map g(x: f32[2,8] @ P(None, 'j')) -> P(), axis_names={'j'}:\n"
     "    return x\nshard_map h(x: f32[4,8] @ P('i')) -> P('i'), axis_names={'i'}:\n"
     "    return g(x)\njit f(x: f32[4,8] @ P('i')):\n    return h(x)\n",
     {"varies over mesh axis 'j'"}},
    /* ... a block cannot keep a sharding it is too small for */
    {"mesh i=4 j=4\nshard_map g(x: f32[4,16] @ P('i')) -> P('i'), axis_names={'i'}:\n"
     "    return x\njit f(x: f32[4,16] @ P('j', 'i')):\n    return g(x)\n",
     {"shard_map argument of type f32[4@j,16@i]: its block's dimension 0 has size 1, which is "
      "not divisible by 4"}},
    /* ... the body's types keep the other axes' shardings, and their rules hold: a loop
     * carry keeps its sharding, its manual axes' variance too */
    {"mesh i=4 j=2\nshard_map g(x: f32[8,4] @ P('i')) -> P('i'), axis_names={'i'}:\n"
     "    k = 0\n    while k < 2:\n        x = reshard(x * 2, P())\n        k = k + 1\n"
     "    return x\njit f(x: f32[8,4] @ P('i', 'j')):\n    return g(x)\n",
     {"the carried value 'x' has type f32[2,4@j]{V:i}, but the body gives it the next value of "
      "type f32[2,4]{V:i}: a loop-carried value keeps its sharding"}},
    {"mesh i=4 j=2\nshard_map g(x: f32[8,4] @ P('i')) -> P('i'), axis_names={'i'}:\n"
     "    s = psum(x, 'i')\n    k = 0\n    while k < 2:\n        s = s + x\n        k = k + 1\n"
     "    return s\njit f(x: f32[8,4] @ P('i', 'j')):\n    return g(x)\n",
     {"the varying manual axes do not match"}},

    {"mesh i=4 j=2\nshard_map g(x: f32[8,4] @ P('i')) -> P('i'), axis_names={'i'}:\n"
     "    return all_gather(x, 'i', axis=1, tiled=True)\n"
     "jit f(x: f32[8,4] @ P('i', 'j')):\n    return g(x)\n",
     {"all_gather: the operand of type f32[2,4@j]{V:i} is sharded over 'j' along dimension 1, "
      "which the collective gathers"}},
    {"mesh i=4 j=2\nshard_map g(x: f32[8,4] @ P('i'), w: f32[4,4] @ P()) -> P('i'), "
     "axis_names={'i'}:\n    return jnp.dot(x, w)\n"
     "jit f(x: f32[8,4] @ P('i', 'j'), w: f32[4,4] @ P('j', None)):\n    return g(x, w)\n",
     {"Contracting dimensions are sharded and it is ambiguous how the output should be "
      "sharded"}},
    {"mesh i=4 j=2\nshard_map g(x: f32[8,4] @ P('i')) -> P('i', 'j'), axis_names={'i'}:\n"
     "    return x * 2\njit f(x: f32[8,4] @ P('i')):\n    return g(x)\n",
     {"shard_map out_specs argument must refer to an axis marked as manual"}},
    {"mesh i=4 j=2\nshard_map g(x: f32[8,4] @ P('i')) -> P('i'), axis_names={'i'}:\n"
     "    return with_sharding_constraint(x, P('i'))\n",
     {"with_sharding_constraint: the sharding P('i') names 'i', a manual axis of the shard_map"}},
    {"mesh i=4 j=2\nshard_map g(x: f32[8,4] @ P('i')) -> P('i'), axis_names={'k'}:\n"
     "    return x\n",
     {"axis_names: unknown axis name 'k': the mesh has no such axis"}},
    {"mesh i=4 j=2\nshard_map g(x: f32[8,4] @ P('i', unreduced={'j'})) -> P('i'), "
     "axis_names={'i'}:\n    return x\n",
     {"unreduced/reduced can only be passed to in_specs when shard_map is in full manual mode"}},

};

START_TEST(test_errors)
{
    const error_case *c = &errors[_i];
    char err[1024] = "";
    sm_program *p = NULL;
    sm_err e = sm_program_parse(c->text, "t.shmap", &p, err, sizeof err);
    if (e == SM_OK)
        e = sm_program_verify(p, 1, err, sizeof err);
    ck_assert_msg(e != SM_OK, "accepted:\n%s", c->text);
    for (int k = 0; k < 3 && c->words[k]; k++)
        ck_assert_msg(strstr(err, c->words[k]), "message \"%s\" lacks \"%s\"", err, c->words[k]);
    sm_program_free(p);
}
END_TEST

/* A shard_map Manual over some of the mesh's axes: its values (its body
 * runs replicated over the others, collectives over its own axes), its
 * axis_names printed in the header and re-parsed. */
START_TEST(test_partial_manual)
{
    /* x's type keeps its sharding over j inside the body: each device holds
     * its part of the block; all_gather over i along the rows, whole over j */
    sm_program *p = parse_ok(
                   "mesh i=4 j=2\nshard_map g(x: f32[8,4] @ P('i')) -> P('i'), axis_names={'i'}:\n"
                   "    s = psum(x, 'i')\n    a = all_gather(x, 'i', axis=0, tiled=True)\n"
                   "    return x * axis_size('i') - s + jnp.sum(a, axis=0) + axis_index('i')\n"
                   "jit f(x: f32[8,4] @ P('i', 'j')):\n    return g(x)\n"),
               *l = NULL;
    char err[1024];
    ck_assert_int_eq(sm_lower(p, NULL, &l, err, sizeof err), SM_OK);
    sm_shape s = {.rank = 2, .dims = {8, 4}};
    sm_array *x = NULL, *out[1] = {0};
    ck_assert_int_eq(sm_array_create(SM_F32, &s, &x, err, sizeof err), SM_OK);
    float *xv = x->data;
    for (int i = 0; i < 32; i++)
        xv[i] = (float)(i * i % 17);
    sm_err e = sm_exec_local_run(l, &x, out, NULL, err, sizeof err);
    ck_assert_msg(e == SM_OK, "%s", err);
    const float *o = out[0]->data;
    for (int r = 0; r < 8; r++)
        for (int c = 0; c < 4; c++) {
            float sum = 0, col = 0;
            for (int b = 0; b < 4; b++)
                sum += xv[(2 * b + r % 2) * 4 + c];
            for (int q = 0; q < 8; q++)
                col += xv[q * 4 + c];
            ck_assert_float_eq(o[r * 4 + c], xv[r * 4 + c] * 4 - sum + col + (float)(r / 2));
        }
    sm_strbuf lw = {0};
    sm_program_print(l, &lw); /* x stays where it lies: no collective over j */
    ck_assert_msg(!strstr(strstr(sm_strbuf_str(&lw), ":\n"), "'j'"), "%s", sm_strbuf_str(&lw));
    sm_strbuf_free(&lw);
    sm_array_free(out[0]);
    sm_array_free(x);
    sm_program_free(l);
    sm_program_free(p);

    /* nested: x * x + psum(x, 'x') in a shard_map over 'y' inside one over 'x' */
    p = parse_ok(NESTED_1D);
    ck_assert_int_eq(sm_lower(p, NULL, &l, err, sizeof err), SM_OK);
    ck_assert_int_eq(
        sm_array_create(SM_F32, &(sm_shape){.rank = 2, .dims = {4, 8}}, &x, err, sizeof err),
        SM_OK);
    xv = x->data;
    for (int i = 0; i < 32; i++)
        xv[i] = (float)(i % 7 + i / 9);
    e = sm_exec_local_run(l, &x, out, NULL, err, sizeof err);
    ck_assert_msg(e == SM_OK, "%s", err);
    o = out[0]->data;
    for (int r = 0; r < 4; r++)
        for (int c = 0; c < 8; c++)
            ck_assert_float_eq(o[r * 8 + c], xv[r * 8 + c] * xv[r * 8 + c] + xv[(r % 2) * 8 + c] +
                                                 xv[(r % 2 + 2) * 8 + c]);
    sm_array_free(out[0]);
    sm_array_free(x);
    sm_program_free(l);
    sm_program_free(p);

    /* JAX's test_partial_auto_explicit_multi_explicit, its values */
    p = parse_ok("mesh i=2 j=1 k=2 l=2\n"
                 "shard_map g(x: f32[4,2,2,4] @ P('i', 'j')) -> P('i', 'j', None, None), "
                 "axis_names={'i', 'j'}:\n    return x.T\n"
                 "jit f(x: f32[4,2,2,4] @ P('i', 'j', 'k', 'l')):\n    return g(x)\n");
    ck_assert_int_eq(sm_lower(p, NULL, &l, err, sizeof err), SM_OK);
    sm_shape s4 = {.rank = 4, .dims = {4, 2, 2, 4}};
    ck_assert_int_eq(sm_array_create(SM_F32, &s4, &x, err, sizeof err), SM_OK);
    xv = x->data;
    for (int i = 0; i < 64; i++)
        xv[i] = (float)i;
    e = sm_exec_local_run(l, &x, out, NULL, err, sizeof err);
    ck_assert_msg(e == SM_OK, "%s", err);
    ck_assert_int_eq(out[0]->shape.dims[0], 8);
    o = out[0]->data;
    for (int b = 0; b < 2; b++) /* block b of i: its block's transpose */
        for (int a0 = 0; a0 < 4; a0++)
            for (int a1 = 0; a1 < 2; a1++)
                for (int a2 = 0; a2 < 2; a2++)
                    for (int a3 = 0; a3 < 2; a3++)
                        ck_assert_float_eq(o[(((4 * b + a0) * 2 + a1) * 2 + a2) * 2 + a3],
                                           xv[(((2 * b + a3) * 2 + a2) * 2 + a1) * 4 + a0]);
    sm_array_free(out[0]);
    sm_array_free(x);
    sm_program_free(l);
    sm_program_free(p);

    sm_program *q = NULL, *q2 = NULL;
    q = parse_ok("mesh i=4 j=2\nshard_map g(x: f32[8,4] @ P('i')) -> (P('i'), P()), "
                 "axis_names={'i'}:\n    return x * 2, psum(x, 'i')\n");
    ck_assert_uint_eq(q->manual_axes, 1u);
    sm_strbuf sb = {0};
    ck_assert_int_eq(sm_program_print(q, &sb), SM_OK);
    ck_assert_msg(strstr(sm_strbuf_str(&sb), "-> (P('i'), P()), axis_names={'i'}:\n"), "%s",
                  sm_strbuf_str(&sb));
    ck_assert_int_eq(sm_program_parse(sm_strbuf_str(&sb), "t.shmap", &q2, err, sizeof err), SM_OK);
    ck_assert(sm_program_equal(q, q2));
    sm_strbuf_free(&sb);
    sm_program_free(q2);
    sm_program_free(q);
    /* every axis named: a shard_map Manual over the whole mesh, as without axis_names */
    q = parse_ok("mesh i=4 j=2\nshard_map g(x: f32[8,4] @ P('i')) -> P('i'), "
                 "axis_names=('j', 'i'):\n    return psum(x, 'j')\n");
    ck_assert_uint_eq(q->manual_axes, 0u);
    sm_program_free(q);
}
END_TEST

/* check_vma=False in a shard_map's header: no replication check of that
 * function's results (of no other's), printed and read back; the value
 * returned is one device's (device 0's, its block's column sums here). */
START_TEST(test_check_vma_header)
{
    const char *two = "mesh i=4\n"
                      "shard_map g(x: f32[8,4] @ P('i')) -> P(), check_vma=False:\n"
                      "    return jnp.sum(x, axis=0, keepdims=True)\n"
                      "shard_map h(x: f32[8,4] @ P('i')) -> P():\n"
                      "    return psum(jnp.sum(x, axis=0, keepdims=True), 'i')\n"
                      "jit f(x: f32[8,4] @ P('i')):\n    return g(x), h(x)\n";
    sm_program *p = parse_ok(two), *l = NULL, *q = NULL;
    char err[1024];
    int outs = 0;
    for (int k = 0; k < p->nops; k++)
        if (p->ops[k].kind == SM_OP_SHARD_MAP_OUT)
            ck_assert_int_eq(p->ops[k].attrs.unchecked, outs++ == 0);
    sm_strbuf sb = {0};
    ck_assert_int_eq(sm_program_print(p, &sb), SM_OK);
    ck_assert_msg(strstr(sm_strbuf_str(&sb), ", P(), check_vma=False)"), "%s", sm_strbuf_str(&sb));
    ck_assert_int_eq(sm_lower(p, NULL, &l, err, sizeof err), SM_OK);
    sm_array *x = NULL, *out[2] = {0};
    ck_assert_int_eq(
        sm_array_create(SM_F32, &(sm_shape){.rank = 2, .dims = {8, 4}}, &x, err, sizeof err),
        SM_OK);
    float *xv = x->data;
    for (int i = 0; i < 32; i++)
        xv[i] = (float)(i % 5);
    sm_err e = sm_exec_local_run(l, &x, out, NULL, err, sizeof err);
    ck_assert_msg(e == SM_OK, "%s", err);
    for (int c = 0; c < 4; c++) {
        float all = 0;
        for (int r = 0; r < 8; r++)
            all += xv[r * 4 + c];
        ck_assert_float_eq(((float *)out[0]->data)[c], xv[c] + xv[4 + c]);
        ck_assert_float_eq(((float *)out[1]->data)[c], all);
    }
    sm_array_free(out[0]);
    sm_array_free(out[1]);
    sm_array_free(x);
    sm_program_free(l);
    sm_strbuf_free(&sb);
    sm_program_free(p);

    /* JAX's unreduced bitcast with check_vma=False: partial sums returned as
     * they are (out_specs P()), each device's block its own: device 0's */
    p = parse_ok("mesh x=2\n"
                 "shard_map g(x: i32[4] @ P('x')) -> P(unreduced={'x'}):\n"
                 "    return pcast(x, 'x', to='unreduced')\n"
                 "shard_map h(x: i32[2] @ P(unreduced={'x'})) -> P(), check_vma=False:\n"
                 "    return x\n"
                 "jit f(a: i32[4] @ P('x')):\n    return h(g(a))\n");
    ck_assert_int_eq(sm_lower(p, NULL, &l, err, sizeof err), SM_OK);
    ck_assert_int_eq(
        sm_array_create(SM_I32, &(sm_shape){.rank = 1, .dims = {4}}, &x, err, sizeof err), SM_OK);
    for (int i = 0; i < 4; i++)
        ((int32_t *)x->data)[i] = 10 + i;
    e = sm_exec_local_run(l, &x, out, NULL, err, sizeof err);
    ck_assert_msg(e == SM_OK, "%s", err);
    ck_assert_int_eq(((int32_t *)out[0]->data)[0], 10);
    ck_assert_int_eq(((int32_t *)out[0]->data)[1], 11);
    sm_array_free(out[0]);
    sm_array_free(x);
    sm_program_free(l);
    sm_program_free(p);

    /* without it, the same function is refused; the other keeps its check */
    const char *bad[] = {
        "mesh i=4\nshard_map g(x: f32[8,4] @ P('i')) -> P():\n"
        "    return jnp.sum(x, axis=0, keepdims=True)\n"
        "jit f(x: f32[8,4] @ P('i')):\n    return g(x)\n",
        "mesh i=4\nshard_map g(x: f32[8,4] @ P('i')) -> P(), check_vma=False:\n    return x\n"
        "shard_map h(x: f32[8,4] @ P('i')) -> P():\n    return x\n"
        "jit f(x: f32[8,4] @ P('i')):\n    return g(x), h(x)\n"};
    for (int k = 0; k < 2; k++) {
        ck_assert_int_eq(sm_program_parse(bad[k], "t.shmap", &q, err, sizeof err), SM_OK);
        ck_assert_int_eq(sm_program_verify(q, 1, err, sizeof err), SM_EINVAL);
        ck_assert_msg(strstr(err, "varies over mesh axis 'i'"), "%s", err);
        sm_program_free(q);
    }

    /* the entry's header: the program's flag, with axis_names= in either order */
    p = parse_ok("mesh i=4 j=2\nshard_map g(x: f32[8] @ P('i')) -> P(), check_vma=False, "
                 "axis_names={'i'}:\n    return x * 2\n");
    ck_assert_int_eq(p->unchecked, 1);
    ck_assert_uint_eq(p->manual_axes, 1u);
    sm_strbuf_free(&sb);
    ck_assert_int_eq(sm_program_print(p, &sb), SM_OK);
    ck_assert_msg(strstr(sm_strbuf_str(&sb), "-> P(), axis_names={'i'}, check_vma=False:\n"), "%s",
                  sm_strbuf_str(&sb));
    ck_assert_int_eq(sm_program_parse(sm_strbuf_str(&sb), "t.shmap", &q, err, sizeof err), SM_OK);
    ck_assert(sm_program_equal(p, q));
    sm_program_free(q);
    sm_strbuf_free(&sb);
    sm_program_free(p);

    const char *wrong[][2] = {
        {"mesh i=4\nshard_map g(x: f32[8] @ P('i')) -> P('i'), check_vma=maybe:\n    return x\n",
         "check_vma= takes True or False"},
        {"mesh i=4\nshard_map g(x: f32[8] @ P('i')) -> P('i'), check_vma=False, "
         "check_vma=True:\n    return x\n",
         "expected axis_names= or check_vma="},
    };
    for (int k = 0; k < 2; k++) {
        ck_assert_int_ne(sm_program_parse(wrong[k][0], "t.shmap", &q, err, sizeof err), SM_OK);
        ck_assert_msg(strstr(err, wrong[k][1]), "%s", err);
    }
}
END_TEST

/* The entry: the last shard_map or jit function, or the one named. */
START_TEST(test_entry)
{
    static const char text[] = "mesh X=2 Y=4\n"
                               "def twice(v):\n    return v * 2\n"
                               "shard_map g(a: f32[8,8] @ P('X', 'Y')) -> P('X', 'Y'):\n"
                               "    return twice(a)\n"
                               "jit f(x: f32[8,8] @ P('X', None)):\n    return g(x)\n";
    char err[1024] = "";
    sm_program *p = NULL;
    ck_assert_int_eq(sm_program_parse_entry(text, "t.shmap", NULL, &p, err, sizeof err), SM_OK);
    ck_assert_str_eq(p->name, "f");
    ck_assert_int_eq(p->kind, SM_PROG_JIT);
    sm_program_free(p);
    ck_assert_int_eq(sm_program_parse_entry(text, "t.shmap", "g", &p, err, sizeof err), SM_OK);
    ck_assert_str_eq(p->name, "g");
    ck_assert_int_eq(p->kind, SM_PROG_SHARD_MAP);
    ck_assert_int_eq(p->nops, 2); /* the helper inlined: a constant and a multiply */
    sm_program_free(p);
    ck_assert_int_ne(sm_program_parse_entry(text, "t.shmap", "twice", &p, err, sizeof err), SM_OK);
    ck_assert_msg(strstr(err, "no shard_map or jit function 'twice'"), "%s", err);
    ck_assert_int_ne(sm_program_parse_entry(text, "t.shmap", "main", &p, err, sizeof err), SM_OK);
}
END_TEST

/* ---- the collectives a lowering chooses ---- */

typedef struct {
    const char *text;
    int all_gather, all_to_all, psum, psum_scatter, pmax;
} lower_case;

static const lower_case lowers[] = {
    /* with_sharding_constraint's P.UNCONSTRAINED keeps the dimension's
     * layout (X, no gather; JAX leaves it to the compiler); Y slices */
    {"mesh X=2 Y=2 axis_types=(Auto, Auto)\njit f(x: f32[4,4] @ P('X', None)):\n"
     "    return with_sharding_constraint(x * 2, P(P.UNCONSTRAINED, 'Y'))\n",
     0, 0, 0, 0, 0},
    /* on a mesh of an Explicit X and an Auto Y, the constraint's Y goes
     * after the operand's X in the dimension (JAX's lowering): each device
     * slices its block, no collective (it was laid out over Y alone) */
    {"mesh X=2 Y=2 axis_types=(Explicit, Auto)\njit f(x: f32[8,4] @ P('X', None)):\n"
     "    return with_sharding_constraint(x * 2, P('Y'))\n",
     0, 0, 0, 0, 0},
    /* a constraint over Auto axes that do not divide the dimension (JAX
     * pads): it keeps the run of them that divides (X), no collective; it
     * was refused as not divisible */
    {"mesh X=4 Y=2 axis_types=(Auto, Auto)\njit f(x: f32[4] @ P()):\n"
     "    return with_sharding_constraint(x * 2, P(('X', 'Y')))\n",
     0, 0, 0, 0, 0},
    /* ... pinned to None instead, X is gathered */
    {"mesh X=2 Y=2 axis_types=(Auto, Auto)\njit f(x: f32[4,4] @ P('X', None)):\n"
     "    return with_sharding_constraint(x * 2, P(None, 'Y'))\n",
     1, 0, 0, 0, 0},
    /* a while loop: the condition's reduction of a sharded value runs before
     * the loop and at the end of every turn (two psums in the text) */
    {"mesh X=2 Y=4\njit f(x: f32[8,16] @ P('X', None), w: f32[16,16] @ P()):\n"
     "    k = 0\n    s = sum(x * x)\n"
     "    while (s < 50.0) & (k < 4):\n"
     "        x = tanh(x @ w) * 3\n        s = sum(x * x)\n        k = k + 1\n"
     "    return x\n",
     0, 0, 2, 0, 0},
    /* over Auto axes the body's product comes out sharded over Y too: the
     * carry goes back to its layout before the next turn (an all_gather) */
    {"mesh X=2 Y=4 axis_types=(Auto, Auto)\n"
     "jit f(x: f32[8,16] @ P('X', None), w: f32[16,16] @ P(None, 'Y')):\n"
     "    k = 0\n    while k < 3:\n        x = x @ w\n        k = k + 1\n    return x\n",
     1, 0, 0, 0, 0},
    /* two carries that both go back to their layouts: both all_gathers
     * come before the loop's while_next ops, which stand together (a scan
     * over xs sharded on Auto axes was refused: 'a loop has 3 carries but
     * 1 while_next ops before this all_gather') */
    {"mesh X=2 Y=4 axis_types=(Auto, Auto)\n"
     "jit f(x: f32[8,16] @ P('X', None), y: f32[8,16] @ P('X', None), "
     "w: f32[16,16] @ P(None, 'Y')):\n"
     "    k = 0\n    while k < 3:\n        x = x @ w\n        y = tanh(y @ w)\n"
     "        k = k + 1\n    return x + y\n",
     2, 0, 0, 0, 0},
    /* tile along the unsharded dimension: each device tiles its block (JAX's
     * test_tile; it was refused, no rule) */
    {"mesh X=2 Y=4\njit f(x: f32[8,6] @ P('X', None)):\n    return jnp.tile(x, (1, 3)) * 2\n", 0, 0,
     0, 0, 0},
    /* segment sums over a batch sharded on X: each device sums its rows, a
     * psum completes them (the embedding's gradient of a data-parallel step) */
    {"mesh X=2 Y=4\njit f(g: f32[8,3,16] @ P('X', None, 'Y'), t: i32[8,3] @ P('X')):\n"
     "    return segment_sum(g, t, 10)\n",
     0, 0, 1, 0, 0},
    /* no communication: propagation through + and elementwise chains */
    {"mesh X=2 Y=4\njit f(x: i32[4,1] @ P('X', None), y: i32[1,8] @ P(None, 'Y')):\n"
     "    return x + y\n",
     0, 0, 0, 0, 0},
    {"mesh X=2 Y=4\njit f(a: f32[8,16] @ P('X', None), b: f32[16,32] @ P(None, 'Y')):\n"
     "    return jnp.exp(a @ b) * 2\n",
     0, 0, 0, 0, 0},
    /* replicated -> sharded: a local slice */
    {"mesh X=2 Y=4\njit f(x: f32[8,16] @ P()):\n    return reshard(x, P('X', 'Y'))\n", 0, 0, 0, 0,
     0},
    /* sharded -> replicated: all_gather */
    {"mesh X=2 Y=4\njit f(x: f32[8,16] @ P('X', None)):\n    return reshard(x, P())\n", 1, 0, 0, 0,
     0},
    /* a sharding moved to another dimension: all_to_all */
    {"mesh X=2 Y=4\njit f(x: f32[8,16] @ P('X', None)):\n    return reshard(x, P(None, 'X'))\n", 0,
     1, 0, 0, 0},
    /* out_sharding on the contracted axis: reduce-scatter, else all-reduce */
    {"mesh X=2 Y=2\njit m(In: f32[8,64] @ P('X','Y'), W: f32[64,32] @ P('Y', None)):\n"
     "    return einsum('bd,df->bf', In, W, out_sharding=P('X','Y'))\n",
     0, 0, 0, 1, 0},
    {"mesh X=2 Y=2\njit m(In: f32[8,64] @ P('X','Y'), W: f32[64,32] @ P('Y', None)):\n"
     "    return einsum('bd,df->bf', In, W, out_sharding=P('X', None))\n",
     0, 0, 1, 0, 0},
    /* reductions over sharded dimensions */
    {"mesh X=2 Y=4\njit s(a: f32[8,16] @ P('X', 'Y')):\n    return jnp.max(a, axis=1)\n", 0, 0, 0,
     0, 1},
    /* prod and argmax gather their operand along the reduced dimension;
     * any completes with a pmax */
    {"mesh X=2 Y=4\njit s(a: f32[8,16] @ P('X', 'Y')):\n    return jnp.prod(a, axis=1)\n", 1, 0, 0,
     0, 0},
    {"mesh X=2 Y=4\njit s(a: f32[8,16] @ P('X', 'Y')):\n    return jnp.argmax(a, axis=1)\n", 1, 0,
     0, 0, 0},
    {"mesh X=2 Y=4\njit s(a: f32[8,16] @ P('X', 'Y')):\n    return jnp.any(a > 1, axis=1)\n", 0, 0,
     0, 0, 1},
    /* take with sharded indices and out_sharding=: each device takes its
     * block with its own indices, no communication; a table sharded along
     * the taken dimension is gathered */
    {"mesh X=2 Y=4\njit s(e: f32[16,8] @ P(None, 'Y'), t: i32[8] @ P('X')):\n"
     "    return jnp.take(e, t, axis=0, out_sharding=P('X', 'Y'))\n",
     0, 0, 0, 0, 0},
    {"mesh X=2 Y=4\njit s(e: f32[16,8] @ P('Y', None), t: i32[8] @ P('X')):\n"
     "    return jnp.take(e, t, axis=0, out_sharding=P('X', None))\n",
     1, 0, 0, 0, 0},
    /* Auto axes: the larger operand keeps its layout, the bias moves */
    {"mesh X=2 Y=4 axis_types=(Auto, Auto)\n"
     "jit f(b: f32[1,16] @ P(None, 'X'), x: f32[8,16] @ P('X', 'Y')) -> P('X', 'Y'):\n"
     "    return b + x\n",
     1, 0, 0, 0, 0},
    /* -> OUT_SHARDINGS */
    {"mesh X=2 Y=4\njit s(a: f32[8,16] @ P('X', 'Y')) -> P():\n    return a + 1\n", 2, 0, 0, 0, 0},
};

START_TEST(test_lowering)
{
    const lower_case *c = &lowers[_i];
    sm_program *p = parse_ok(c->text), *l = NULL;
    char err[1024] = "";
    sm_err e = sm_lower(p, NULL, &l, err, sizeof err);
    ck_assert_msg(e == SM_OK, "lower: %s", err);
    sm_program_free(p); /* the lowered program owns all it points to */
    p = NULL;
    ck_assert_str_eq(l->filename, "t.shmap");
    int n[SM_OP_COUNT];
    sm_lower_count_collectives(l, n);
    sm_strbuf sb = {0};
    sm_program_print(l, &sb);
    ck_assert_msg(n[SM_OP_ALL_GATHER] == c->all_gather && n[SM_OP_ALL_TO_ALL] == c->all_to_all &&
                      n[SM_OP_PSUM] == c->psum && n[SM_OP_PSUM_SCATTER] == c->psum_scatter &&
                      n[SM_OP_PMAX] == c->pmax,
                  "collectives differ (ag %d a2a %d psum %d rs %d pmax %d) in\n%s",
                  n[SM_OP_ALL_GATHER], n[SM_OP_ALL_TO_ALL], n[SM_OP_PSUM], n[SM_OP_PSUM_SCATTER],
                  n[SM_OP_PMAX], sb.data ? sb.data : "");
    sm_strbuf_free(&sb);
    sm_program_free(l);
    sm_program_free(p);
}
END_TEST

/* ---- unreduced values: JAX's shard_map tests with unreduced ---- */

typedef struct {
    const char *text;
    const char *value, *type;        /* a value of the program and its type */
    int psum, psum_scatter, gathers; /* the lowered program's collectives */
    int nout;
    float out[8]; /* the result for inputs arange(n).reshape(shape) */
} unreduced_case;

static const unreduced_case unreduced[] = {
    /* test_matmul_unreduced: the shard_map's result is unreduced over y,
     * and reshard sums it (one psum, no more) */
    {"mesh x=2 y=2\n"
     "shard_map f(a: f32[2,4] @ P('x', 'y'), b: f32[4,2] @ P('y', None)) -> P('x', None, "
     "unreduced={'y'}):\n"
     "    c = jnp.einsum('ab,bc->ac', a, b)\n    c = jax.lax.pcast(c, 'y', to='unreduced')\n"
     "    return c\n"
     "jit g(a: f32[2,4] @ P('x', 'y'), b: f32[4,2] @ P('y', None)):\n    out = f(a, b)\n"
     "    r = jax.sharding.reshard(out, P('x', None))\n    return r\n",
     "out",
     "f32[2@x,2]{U:y}",
     1,
     0,
     0,
     4,
     {28, 34, 76, 98}},
    /* test_scalar_to_unreduced, test_replicated_sharded_unreduced_roundtrip:
     * to unreduced axes the first device along them keeps the value and
     * the others hold zeros (no collective), back one psum */
    {"mesh x=2\njit f(x: f32[2,2] @ P()):\n    u = reshard(x, P(unreduced={'x'}))\n"
     "    r = reshard(u, P())\n    return r\n",
     "u",
     "f32[2,2]{U:x}",
     1,
     0,
     0,
     4,
     {0, 1, 2, 3}},
    /* test_sharded_unreduced_roundtrip: each device puts its block where
     * it lies in zeros (no collective, as JAX's); back a psum and each
     * device's slice */
    {"mesh x=2 y=2\njit f(x: f32[4,2] @ P('x', 'y')):\n"
     "    u = reshard(x, P(None, 'y', unreduced={'x'}))\n    r = reshard(u, P('x', 'y'))\n"
     "    return r\n",
     "u",
     "f32[4,2@y]{U:x}",
     1,
     0,
     0,
     8,
     {0, 1, 2, 3, 4, 5, 6, 7}},
    /* ... over both axes of a dimension: each put in place, minor first */
    {"mesh x=2 y=2\njit f(x: f32[8] @ P(('x', 'y'),)):\n"
     "    u = reshard(x, P(None, unreduced={'x', 'y'}))\n    r = reshard(u, P())\n"
     "    return r\n",
     "u",
     "f32[8]{U:x,y}",
     1,
     0,
     0,
     8,
     {0, 1, 2, 3, 4, 5, 6, 7}},
    /* a one-operand einsum's sum over a sharded dimension left unreduced
     * (JAX's test_unreduced_einsum_lowers_to_reduce_sum): summed where the
     * rows lie, no gather; the reshard's psum completes it */
    {"mesh X=2\njit f(x: f32[4,2] @ P('X', None)):\n"
     "    s = jnp.einsum('ab->b', x, out_sharding=P(None, unreduced={'X'}))\n"
     "    return reshard(s, P())\n",
     "s",
     "f32[2]{U:X}",
     1,
     0,
     0,
     2,
     {12, 16}},
    /* unreduced of the kind max (JAX's test_reduce_max_min_unreduced_basic):
     * each device's max, taken as it is (check_vma=False); the reshard is
     * their pmax */
    {"mesh x=2\nshard_map m(a: f32[4,2] @ P('x', None)) -> P(None, unreduced={'x'}, "
     "unreduced_kind=max), check_vma=False:\n    return jnp.max(a, axis=0)\n"
     "jit f(a: f32[4,2] @ P('x', None)):\n    u = m(a)\n    r = reshard(u, P())\n    return r\n",
     "u",
     "f32[2]{U_max:x}",
     0,
     0,
     0,
     2,
     {6, 7}},
    /* reduced (JAX's test_reduced_sin_fwd_mul_bwd's backward): partial sums
     * times a value reduced over their axes stay partial sums, no
     * collective; the reshard sums them */
    {"mesh X=2\njit f(x: f32[2,2] @ P(None, 'X'), y: f32[2,2] @ P('X', None), "
     "w: f32[2,2] @ P(None, None, reduced={'X'})):\n"
     "    z = jnp.einsum('ab,bc->ac', x, y, out_sharding=P(unreduced={'X'}))\n"
     "    m = z * jnp.cos(w) / jnp.exp(w * 0)\n    return reshard(m, P())\n",
     "m",
     "f32[2,2]{U:X}",
     1,
     0,
     0,
     4,
     {2.0f, 1.6209068f, -2.496881f, -10.889917f}},
    /* test_concat_unreduced: concatenate is linear: partial sums of the
     * concatenation, summed by the reshard (one psum) */
    {"mesh X=2\njit f(x: f32[2,2] @ P(None, 'X'), y: f32[2,2] @ P('X', None)):\n"
     "    z = jnp.einsum('ab,bc->ac', x, y, out_sharding=P(unreduced={'X'}))\n"
     "    c = jnp.concatenate([z, z])\n    r = reshard(c, P())\n    return r\n",
     "c",
     "f32[4,2]{U:X}",
     1,
     0,
     0,
     8,
     {2, 3, 6, 11, 2, 3, 6, 11}},
    /* test_unreduced_psum_fwd_preduced_bwd (forward) */
    {"mesh x=2\nshard_map ar(x: f32[2,6] @ P(unreduced={'x'})) -> P():\n"
     "    out = jax.lax.psum(x, 'x')\n    return out\n"
     "jit f(x: f32[2,4] @ P(None, 'x'), y: f32[4,6] @ P('x', None)):\n"
     "    z = jnp.einsum('ab,bc->ac', x, y, out_sharding=P(unreduced={'x'}))\n"
     "    return ar(z).sum()\n",
     "z",
     "f32[2,6]{U:x}",
     1,
     0,
     0,
     1,
     {2292}},
    /* test_unreduced_psum_scatter_fwd_all_gather_reduced_bwd (forward) */
    {"mesh x=2\nshard_map rs(a: f32[4,6] @ P(unreduced={'x'})) -> P('x', None):\n"
     "    out = jax.lax.psum_scatter(a, axis_name='x', tiled=True)\n    return out\n"
     "jit f(x: f32[4,2] @ P(None, 'x'), y: f32[2,6] @ P('x', None)):\n"
     "    z = jnp.einsum('ab,bc->ac', x, y, out_sharding=P(unreduced={'x'}))\n"
     "    return rs(z).sum()\n",
     "z",
     "f32[4,6]{U:x}",
     1,
     1,
     0,
     1,
     {996}},
    /* global view only: partial sums added, then summed by reshard */
    {"mesh X=2 Y=2\njit f(x: f32[2,4] @ P(None, 'X'), y: f32[4,2] @ P('X', 'Y')):\n"
     "    z = jnp.einsum('ab,bc->ac', x, y, out_sharding=P(None, 'Y', unreduced={'X'}))\n"
     "    w = z + z\n    return reshard(w.T, P())\n",
     "w",
     "f32[2,2@Y]{U:X}",
     1,
     0,
     1,
     4,
     {56, 152, 68, 196}},
};

START_TEST(test_unreduced)
{
    const unreduced_case *c = &unreduced[_i];
    sm_program *p = parse_ok(c->text), *l = NULL;
    char err[1024] = "", t[256];
    int v = value_named(p, c->value);
    ck_assert_msg(v >= 0, "no value %s", c->value);
    sm_program_value_type(p, v, t, sizeof t);
    ck_assert_msg(strcmp(t, c->type) == 0, "%s: type %s, expected %s", c->value, t, c->type);
    ck_assert_msg(sm_lower(p, NULL, &l, err, sizeof err) == SM_OK, "lower: %s", err);
    int n[SM_OP_COUNT];
    sm_lower_count_collectives(l, n);
    sm_strbuf sb = {0};
    sm_program_print(l, &sb);
    ck_assert_msg(n[SM_OP_PSUM] == c->psum && n[SM_OP_PSUM_SCATTER] == c->psum_scatter &&
                      n[SM_OP_ALL_GATHER] + n[SM_OP_ALL_TO_ALL] == c->gathers,
                  "collectives differ (psum %d rs %d ag %d a2a %d) in\n%s", n[SM_OP_PSUM],
                  n[SM_OP_PSUM_SCATTER], n[SM_OP_ALL_GATHER], n[SM_OP_ALL_TO_ALL], sb.data);
    sm_array *in[4] = {0}, *out[4] = {0};
    for (int i = 0; i < p->nparams; i++) {
        ck_assert_int_eq(sm_array_create(SM_F32, &p->params[i].global, &in[i], err, sizeof err),
                         SM_OK);
        for (int64_t k = 0; k < in[i]->nbytes / 4; k++)
            ((float *)in[i]->data)[k] = (float)k;
    }
    ck_assert_msg(sm_exec_local_run(l, in, out, NULL, err, sizeof err) == SM_OK, "run: %s\n%s", err,
                  sb.data);
    ck_assert_int_eq(out[0]->nbytes, 4 * c->nout);
    for (int k = 0; k < c->nout; k++)
        ck_assert_msg(fabs(((float *)out[0]->data)[k] - c->out[k]) <= 1e-5 * (1 + fabs(c->out[k])),
                      "[%d]: %g, expected %g\n%s", k, ((float *)out[0]->data)[k], c->out[k],
                      sb.data);
    for (int i = 0; i < p->nparams; i++)
        sm_array_free(in[i]);
    sm_array_free(out[0]);
    sm_strbuf_free(&sb);
    sm_program_free(l);
    sm_program_free(p);
}
END_TEST

/* ---- differential runs ---- */

static uint64_t rng_next(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* Small integers, exact in every dtype and every summation order. */
static sm_array *random_input(sm_dtype t, const sm_shape *s, uint64_t *rng)
{
    sm_array *a;
    char err[256];
    ck_assert_int_eq(sm_array_create(t, s, &a, err, sizeof err), SM_OK);
    int64_t n = 1;
    for (int d = 0; d < s->rank; d++)
        n *= s->dims[d];
    for (int64_t i = 0; i < n; i++) {
        int v = (int)(rng_next(rng) % 9) - 4;
        switch (t) {
        case SM_F32:
            ((float *)a->data)[i] = (float)v;
            break;
        case SM_F64:
            ((double *)a->data)[i] = v;
            break;
        case SM_I32:
            ((int32_t *)a->data)[i] = v;
            break;
        case SM_I64:
            ((int64_t *)a->data)[i] = v;
            break;
        default:
            ((uint8_t *)a->data)[i] = (uint8_t)(v > 0);
        }
    }
    return a;
}

/* Runs p lowered and p computed whole on every device; compares. Returns 0
 * when both ran and agree. */
static void differential(const sm_program *p, uint64_t seed)
{
    char err[1024] = "";
    sm_program *l = NULL, *ref = NULL;
    sm_lower_opts whole = {.replicate_all = 1};
    sm_err e = sm_lower(p, NULL, &l, err, sizeof err);
    ck_assert_msg(e == SM_OK, "lower: %s", err);
    ck_assert_int_eq(sm_lower(p, &whole, &ref, err, sizeof err), SM_OK);
    sm_array *in[16] = {0}, *a[16] = {0}, *b[16] = {0};
    uint64_t rng = seed * 2654435761u + 1;
    for (int i = 0; i < p->nparams; i++)
        in[i] = random_input(p->params[i].dtype, &p->params[i].global, &rng);
    e = sm_exec_local_run(l, in, a, NULL, err, sizeof err);
    sm_strbuf sb = {0};
    sm_program_print(l, &sb);
    ck_assert_msg(e == SM_OK, "run lowered: %s\n%s", err, sb.data ? sb.data : "");
    ck_assert_msg(sm_exec_local_run(ref, in, b, NULL, err, sizeof err) == SM_OK, "run whole: %s",
                  err);
    for (int k = 0; k < p->nreturns; k++) {
        ck_assert_int_eq(a[k]->dtype, b[k]->dtype);
        ck_assert(sm_shape_equal(&a[k]->shape, &b[k]->shape));
        ck_assert_int_eq(a[k]->nbytes, b[k]->nbytes);
        int exact = !sm_dtype_is_float(a[k]->dtype) ||
                    memcmp(a[k]->data, b[k]->data, (size_t)a[k]->nbytes) == 0;
        if (!exact) { /* floats: within the rounding of another reduction order */
            int64_t n = a[k]->nbytes / (int64_t)sm_dtype_size(a[k]->dtype);
            for (int64_t i = 0; i < n; i++) {
                double x =
                    a[k]->dtype == SM_F32 ? ((float *)a[k]->data)[i] : ((double *)a[k]->data)[i];
                double y =
                    b[k]->dtype == SM_F32 ? ((float *)b[k]->data)[i] : ((double *)b[k]->data)[i];
                ck_assert_msg(fabs(x - y) <= 1e-4 * (1 + fabs(y)), "output %d [%lld]: %g vs %g\n%s",
                              k, (long long)i, x, y, sb.data ? sb.data : "");
            }
        } else {
            ck_assert_msg(memcmp(a[k]->data, b[k]->data, (size_t)a[k]->nbytes) == 0,
                          "output %d differs\n%s", k, sb.data ? sb.data : "");
        }
        sm_array_free(a[k]);
        sm_array_free(b[k]);
    }
    sm_strbuf_free(&sb);
    for (int i = 0; i < p->nparams; i++)
        sm_array_free(in[i]);
    sm_program_free(l);
    sm_program_free(ref);
}

START_TEST(test_differential_cases)
{
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        sm_program *p = parse_ok(types[i].text);
        int blocks = 0; /* a shard_map body's collectives: the whole-array run has no blocks */
        for (int k = 0; k < p->nops; k++)
            blocks |= p->ops[k].manual &&
                      (sm_op_vma_rule(p->ops[k].kind) != SM_VMA_UNION || p->ops[k].manual_axes);
        if (!blocks && p->kind == SM_PROG_JIT) /* (shard_map programs are not lowered) */
            differential(p, i + 1);
        sm_program_free(p);
    }
    for (size_t i = 0; i < sizeof lowers / sizeof lowers[0]; i++) {
        sm_program *p = parse_ok(lowers[i].text);
        differential(p, i + 100);
        sm_program_free(p);
    }
}
END_TEST

/* Random well-typed programs: elementwise chains with broadcasting,
 * reductions, products with every placement of shardings, reshape,
 * transpose and reshard, on meshes (8,), (4,2), (2,2,2). */
static const char *const meshes[] = {"mesh a=8", "mesh a=4 b=2", "mesh a=2 b=2 c=2"};
static const char *const mesh_axes[][3] = {{"a"}, {"a", "b"}, {"a", "b", "c"}};
static const int mesh_naxes[] = {1, 2, 3};

static void random_spec(uint64_t *rng, int m, int rank, char *out, size_t len)
{
    int used[3] = {0};
    size_t o = (size_t)snprintf(out, len, "P(");
    for (int d = 0; d < rank; d++) {
        int pick = (int)(rng_next(rng) % (unsigned)(mesh_naxes[m] + 2)) - 2;
        if (pick >= 0 && !used[pick]) {
            used[pick] = 1;
            o += (size_t)snprintf(out + o, len - o, "%s'%s'", d ? ", " : "", mesh_axes[m][pick]);
        } else {
            o += (size_t)snprintf(out + o, len - o, "%sNone", d ? ", " : "");
        }
    }
    snprintf(out + o, len - o, ")");
}

START_TEST(test_differential_random)
{
    uint64_t rng = 0x9e3779b97f4a7c15ull;
    int ran = 0, refused = 0;
    static const char *const bodies[] = {
        "    t = x + y\n    u = jnp.maximum(t, 0) * 3\n    return u\n",
        "    t = jnp.sum(x * y, axis=0)\n    return t\n",
        "    t = x @ y.T\n    return t\n",
        "    t = einsum('ij,kj->ik', x, y, out_sharding=%s)\n    return t\n",
        "    t = jnp.max(x - y, axis=1, keepdims=True)\n    return t\n",
        "    t = (x + y).reshape(4, 2, 8)\n    return t\n",
        "    t = reshard(x, %s) + y\n    return t.T\n",
        "    t = jnp.sum(x, axis=1) + jnp.sum(y, axis=1)\n    return t\n",
        "    t = jnp.where(x > y, x, y)\n    return t\n",
        "    t = jnp.mean(x.astype(f32), axis=0)\n    return t\n",
        "    t = jnp.argmax(x - y, axis=0) + jnp.argmin(x, axis=1)\n    return t\n",
        "    t = jnp.cumsum(x, axis=1) + jnp.prod(y, axis=1, keepdims=True)\n    return t\n",
        "    t = jnp.logical_and(x > 0, y < 3) | jnp.any(x > y, axis=0)\n    return t\n",
        /* auto_axes over one axis: Explicit rules on the others */
        "    t = auto_axes(add, out_sharding=%s, axes='a')(x, y)\n    return t * 2\n",
        "    t = auto_axes(matmul, out_sharding=%s, axes=('a',))(x, y.T)\n    return t\n",
        /* explicit_axes: the arguments resharded to in_sharding first */
        "    t = explicit_axes(add, in_sharding=%s, axes='a')(x, y)\n    return t\n",
    };
    const int nbodies = (int)(sizeof bodies / sizeof bodies[0]);
    for (int iter = 0; iter < 300; iter++) {
        int m = iter % 3;
        const char *dt = iter % 2 ? "i32" : "f32";
        char sx[64], sy[64], so[64], body[256], text[1024];
        random_spec(&rng, m, 2, sx, sizeof sx);
        random_spec(&rng, m, 2, sy, sizeof sy);
        random_spec(&rng, m, 2, so, sizeof so);
        snprintf(body, sizeof body, bodies[iter % nbodies], so);
        snprintf(text, sizeof text, "%s\njit f(x: %s[8,8] @ %s, y: %s[8,8] @ %s):\n%s", meshes[m],
                 dt, sx, dt, sy, body);
        char err[1024];
        sm_program *p = NULL;
        sm_err e = sm_program_parse(text, "r.shmap", &p, err, sizeof err);
        if (e == SM_OK)
            e = sm_program_verify(p, 1, err, sizeof err);
        if (e != SM_OK) { /* a program JAX refuses too: the message says why */
            ck_assert_msg(strstr(err, "shard") || strstr(err, "Contracting") ||
                              strstr(err, "duplicate") || strstr(err, "reshape"),
                          "unexpected refusal: %s\n%s", err, text);
            refused++;
            sm_program_free(p);
            continue;
        }
        differential(p, (uint64_t)iter + 1000);
        sm_program_free(p);
        ran++;
    }
    printf("random jit programs: %d lowered and equal to the whole-array run, %d refused\n", ran,
           refused);
    ck_assert_msg(ran >= 160, "only %d of 260 random programs type-checked (%d refused)", ran,
                  refused);
}
END_TEST

/* Bad input of any kind: mutated programs (bytes changed, lines cut,
 * tokens swapped) are refused with a message or accepted and lowered;
 * nothing crashes (the sanitizer build runs this too). */
START_TEST(test_mutations)
{
    static const char *const toks[] = {"P(",         ")",
                                       "(",          "'X'",
                                       "jit ",       "def ",
                                       "return ",    ",",
                                       "auto_axes(", "explicit_axes(",
                                       "reshard(",   "->",
                                       ":",          "\n    ",
                                       "@",          "out_sharding=",
                                       "shard_map ", "None",
                                       "8",          "[",
                                       "]"};
    uint64_t rng = 12345;
    int accepted = 0;
    for (int iter = 0; iter < 3000; iter++) {
        const char *base = types[iter % (sizeof types / sizeof types[0])].text;
        char buf[2048];
        snprintf(buf, sizeof buf, "%s", base);
        size_t n = strlen(buf);
        for (int m = 0; m < 1 + (int)(rng_next(&rng) % 3); m++) {
            size_t at = n ? rng_next(&rng) % n : 0;
            switch (rng_next(&rng) % 3) {
            case 0: /* change a byte */
                buf[at] = (char)(32 + rng_next(&rng) % 95);
                break;
            case 1: /* cut the rest */
                buf[at] = 0;
                n = at;
                break;
            default: { /* insert a token */
                const char *t = toks[rng_next(&rng) % (sizeof toks / sizeof toks[0])];
                size_t tl = strlen(t);
                if (n + tl + 1 < sizeof buf) {
                    memmove(buf + at + tl, buf + at, n - at + 1);
                    memcpy(buf + at, t, tl);
                    n += tl;
                }
            }
            }
        }
        char err[1024];
        sm_program *p = NULL, *l = NULL;
        sm_err e = sm_program_parse(buf, "m.shmap", &p, err, sizeof err);
        if (e == SM_OK)
            e = sm_program_verify(p, 1, err, sizeof err);
        if (e == SM_OK && p->kind == SM_PROG_JIT) {
            e = sm_lower(p, NULL, &l, err, sizeof err);
            ck_assert_msg(e == SM_OK, "a verified program failed to lower: %s\n%s", err, buf);
            accepted++;
        } else if (e != SM_OK) {
            ck_assert_msg(err[0], "refused without a message:\n%s", buf);
        }
        sm_program_free(l);
        sm_program_free(p);
    }
    ck_assert_int_gt(accepted, 0);
}
END_TEST

static Suite *lower_suite(void)
{
    return SUITE_CASE(suite_create("lower"), "jit", 240, NULL,
                      {test_types, (int)(sizeof types / sizeof types[0])},
                      {test_print_roundtrip, (int)(sizeof types / sizeof types[0])},
                      {test_errors, (int)(sizeof errors / sizeof errors[0])}, {test_entry},
                      {test_partial_manual}, {test_check_vma_header},
                      {test_unreduced, (int)(sizeof unreduced / sizeof unreduced[0])},
                      {test_lowering, (int)(sizeof lowers / sizeof lowers[0])},
                      {test_differential_cases}, {test_differential_random}, {test_mutations});
}

int main(void)
{
    return suite_main(lower_suite());
}
