/* Check suite for common/shard, part 1: meshes and PartitionSpecs (parsing,
 * formatting, validation against a mesh and a shape, and every error path
 * with its code and the key words of its message). Index maps are in
 * test_shard_index.c, process-local planning in test_shard_local.c. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "sm_mesh.h"
#include "sm_pspec.h"
#include "sm_sharding.h"
#include "suite_main.h"

/* ---- meshes ---------------------------------------------------------- */

typedef struct {
    const char *text;
    int ndev;           /* 0: devices NULL */
    int32_t devs[8];    /* explicit order, when ndev > 0 */
    sm_err code;        /* expected result */
    const char *words;  /* on success: sm_mesh_format; on failure: key words */
    const char *words2; /* optional second key phrase */
} mesh_case;

static const mesh_case mesh_cases[] = {
    {"i=4,j=2", 0, {0}, SM_OK, "Mesh('i': 4, 'j': 2)", NULL},
    {"i=4 j=2", 0, {0}, SM_OK, "Mesh('i': 4, 'j': 2)", NULL},
    {" x=8 ", 0, {0}, SM_OK, "Mesh('x': 8)", NULL},
    {"a=2,b=2,c=2", 8, {7, 6, 5, 4, 3, 2, 1, 0}, SM_OK, "Mesh('a': 2, 'b': 2, 'c': 2)", NULL},
    {"data=1", 0, {0}, SM_OK, "Mesh('data': 1)", NULL},
    {"", 0, {0}, SM_EINVAL, "no axes", NULL},
    {"i", 0, {0}, SM_EINVAL, "expected name=size", "column 1"},
    {"i=x", 0, {0}, SM_EINVAL, "positive integer size", "'i'"},
    {"i=0", 0, {0}, SM_EINVAL, "'i' has size 0", NULL},
    {"i=4,i=2", 0, {0}, SM_EINVAL, "'i' appears more than once", NULL},
    {"1i=4", 0, {0}, SM_EINVAL, "'1i' is not an identifier", NULL},
    {"i-j=4", 0, {0}, SM_EINVAL, "'i-j' is not an identifier", NULL},
    {"i=2048", 0, {0}, SM_EINVAL, "more than 1024 devices", NULL},
    {"i=64,j=32", 0, {0}, SM_EINVAL, "more than 1024 devices", "'j'"},
    {"a=1,b=1,c=1,d=1,e=1,f=1,g=1,h=1,k=1", 0, {0}, SM_EINVAL, "more than 8 axes", NULL},
    {"i=4", 3, {0, 1, 2}, SM_EINVAL, "4 positions", "3 devices"},
    {"i=4", 4, {0, 1, 1, 2}, SM_EINVAL, "device 1 appears more than once", NULL},
    {"i=2", 2, {0, -3}, SM_EINVAL, "device id -3", "negative"},
    {"abcdefghijabcdefghijabcdefghijabc=2", 0, {0}, SM_EINVAL, "1 to 31 characters", NULL},
    /* axis types, as JAX writes them; all Explicit is not written back */
    {"i=4 j=2 axis_types=(Auto, Explicit)",
     0,
     {0},
     SM_OK,
     "Mesh('i': 4, 'j': 2, axis_types=(Auto, Explicit))",
     NULL},
    {"i=4,j=2,axis_types=(explicit,AxisType.Auto)",
     0,
     {0},
     SM_OK,
     "Mesh('i': 4, 'j': 2, axis_types=(Explicit, Auto))",
     NULL},
    {"i=4 axis_types=(Explicit)", 0, {0}, SM_OK, "Mesh('i': 4)", NULL},
    {"i=4 axis_types=(Auto, Auto)", 0, {0}, SM_EINVAL, "gives 2 types for 1 axes", NULL},
    {"i=4 axis_types=(Manual)", 0, {0}, SM_EINVAL, "Explicit or Auto", "'Manual' at column 17"},
    {"i=4 axis_types=(Auto", 0, {0}, SM_EINVAL, "not closed", NULL},
    {"axis_types=(Auto) i=4", 0, {0}, SM_EINVAL, "comes after the axes", "column 19"},
    {"i=4 axis_types=(Auto) axis_types=(Auto)", 0, {0}, SM_EINVAL, "axis_types twice", NULL},
};

START_TEST(test_mesh_parse_table)
{
    const mesh_case *c = &mesh_cases[_i];
    sm_mesh m;
    char err[256] = "", buf[256];
    sm_err rc = sm_mesh_parse(c->text, c->ndev ? c->devs : NULL, c->ndev, &m, err, sizeof err);
    ck_assert_msg(rc == c->code, "mesh \"%s\": got %s (%s)", c->text, sm_err_name(rc), err);
    if (rc == SM_OK) {
        ck_assert_str_eq(sm_mesh_format(&m, buf, sizeof buf), c->words);
        for (int i = 0; i < m.ndevices; i++)
            ck_assert_int_eq(m.devices[i], c->ndev ? c->devs[i] : i);
    } else {
        ck_assert_msg(strstr(err, c->words), "mesh \"%s\": message \"%s\"", c->text, err);
        if (c->words2)
            ck_assert_msg(strstr(err, c->words2), "mesh \"%s\": message \"%s\"", c->text, err);
    }
}
END_TEST

START_TEST(test_mesh_init_and_lookup)
{
    const char *names[] = {"x", "y", "z"};
    int64_t sizes[] = {2, 3, 4};
    sm_mesh m;
    char err[256];
    ck_assert_int_eq(sm_mesh_init(&m, 3, names, sizes, NULL, 0, err, sizeof err), SM_OK);
    ck_assert_int_eq(m.ndevices, 24);
    ck_assert_int_eq(sm_mesh_axis(&m, "y"), 1);
    ck_assert_int_eq(sm_mesh_axis(&m, "w"), -1);
    /* row-major: position 23 is (1, 2, 3), position 5 is (0, 1, 1) */
    int64_t c[3];
    sm_mesh_coords(&m, 23, c);
    ck_assert(c[0] == 1 && c[1] == 2 && c[2] == 3);
    sm_mesh_coords(&m, 5, c);
    ck_assert(c[0] == 0 && c[1] == 1 && c[2] == 1);
    ck_assert_int_eq(sm_mesh_find_device(&m, 17), 17);
    ck_assert_int_eq(sm_mesh_find_device(&m, 24), -1);

    int32_t devs[] = {10, 20, 30, 40};
    const char *n2[] = {"i", "j"};
    int64_t s2[] = {2, 2};
    ck_assert_int_eq(sm_mesh_init(&m, 2, n2, s2, devs, 4, err, sizeof err), SM_OK);
    ck_assert_int_eq(sm_mesh_find_device(&m, 30), 2);
    ck_assert_int_eq(sm_mesh_init(&m, 0, n2, s2, NULL, 0, err, sizeof err), SM_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "1 to 8 axes"));
    /* a failed init leaves the mesh as it was */
    ck_assert_int_eq(m.ndevices, 4);
    ck_assert_int_eq(m.devices[0], 10);
}
END_TEST

/* Default device order: processes in order, each one's ids increasing. */
typedef struct {
    int naxes;
    int64_t sizes[3];
    int nprocs;
    int ndev[8];
    int32_t devs[16];
    sm_err code;
    int32_t want[16];
    const char *words;
} defdev_case;

static const defdev_case defdev_cases[] = {
    /* 4 processes x 2 devices, mesh (4,2): each row is one process */
    {2, {4, 2}, 4, {2, 2, 2, 2}, {0, 1, 2, 3, 4, 5, 6, 7}, SM_OK, {0, 1, 2, 3, 4, 5, 6, 7}, NULL},
    /* processes list their devices out of order and with odd ids */
    {2, {2, 2}, 2, {2, 2}, {11, 3, 9, 2}, SM_OK, {3, 11, 2, 9}, NULL},
    /* mesh (2,4) over 4 x 2: the minor axis of 4 spans 2 processes */
    {2, {2, 4}, 4, {2, 2, 2, 2}, {1, 0, 3, 2, 5, 4, 7, 6}, SM_OK, {0, 1, 2, 3, 4, 5, 6, 7}, NULL},
    {1,
     {8},
     8,
     {1, 1, 1, 1, 1, 1, 1, 1},
     {7, 6, 5, 4, 3, 2, 1, 0},
     SM_OK,
     {7, 6, 5, 4, 3, 2, 1, 0},
     NULL},
    {2, {4, 2}, 2, {2, 2}, {0, 1, 2, 3}, SM_EINVAL, {0}, "8 devices"},
    {1, {2}, 2, {1, 1}, {3, 3}, SM_EINVAL, {0}, "device 3 is listed more than once"},
    {1, {2}, 2, {-1, 3}, {0, 1}, SM_EINVAL, {0}, "negative device count"},
    {1, {2}, 1, {2}, {0, -1}, SM_EINVAL, {0}, "negative device id"},
    {1, {0}, 1, {0}, {0}, SM_EINVAL, {0}, "invalid size 0"},
};

START_TEST(test_mesh_default_devices)
{
    const defdev_case *c = &defdev_cases[_i];
    int32_t out[16];
    char err[256] = "";
    sm_err rc = sm_mesh_default_devices(c->naxes, c->sizes, c->nprocs, c->ndev, c->devs, out, err,
                                        sizeof err);
    ck_assert_msg(rc == c->code, "case %d: %s (%s)", _i, sm_err_name(rc), err);
    if (rc != SM_OK) {
        ck_assert_msg(strstr(err, c->words), "case %d: \"%s\"", _i, err);
        return;
    }
    int64_t n = 1;
    for (int a = 0; a < c->naxes; a++)
        n *= c->sizes[a];
    for (int i = 0; i < n; i++)
        ck_assert_int_eq(out[i], c->want[i]);
}
END_TEST

/* ---- PartitionSpec parsing and formatting ------------------------------ */

typedef struct {
    const char *text;
    const char *formatted;
    int nentries;
    int naxes[4]; /* per entry */
} pspec_case;

static const pspec_case pspec_cases[] = {
    {"P()", "P()", 0, {0}},
    {"P(None)", "P(None)", 1, {0}},
    {"P(())", "P(None)", 1, {0}},
    {"P('i')", "P('i')", 1, {1}},
    {"P(\"i\",)", "P('i')", 1, {1}},
    {"P(('i',))", "P('i')", 1, {1}},
    {"P('i', None)", "P('i', None)", 2, {1, 0}},
    {"  P ( None ,'j' ) ", "P(None, 'j')", 2, {0, 1}},
    {"P(('x','y'),)", "P(('x', 'y'),)", 1, {2}},
    {"P(('x', 'y'))", "P(('x', 'y'),)", 1, {2}},
    {"P(('y','x'), 'z', None)", "P(('y', 'x'), 'z', None)", 3, {2, 1, 0}},
    {"PartitionSpec('data', 'model')", "P('data', 'model')", 2, {1, 1}},
    {"P(None, None, ('a','b','c'))", "P(None, None, ('a', 'b', 'c'))", 3, {0, 0, 3}},
    /* unreduced axes, printed as JAX's repr prints them */
    {"P('x', None, unreduced={'y'})", "P('x', None, unreduced={'y'})", 2, {1, 0}},
    {"P(unreduced={'x', \"z\"})", "P(unreduced={'x', 'z'})", 0, {0}},
    {"P(('x','y'), unreduced={'z'},)", "P(('x', 'y'), unreduced={'z'})", 1, {2}},
    {"P('x', unreduced=set())", "P('x')", 1, {1}},
    /* the kind of the partial results (JAX's UnreducedKind; sum is not printed) */
    {"P(None, unreduced={'x'}, unreduced_kind=max)",
     "P(None, unreduced={'x'}, unreduced_kind=max)",
     1,
     {0}},
    {"P(unreduced={'x'}, unreduced_kind='min')", "P(unreduced={'x'}, unreduced_kind=min)", 0, {0}},
    {"P(unreduced={'x'}, unreduced_kind=UnreducedKind.sum)", "P(unreduced={'x'})", 0, {0}},
    /* P.UNCONSTRAINED (with_sharding_constraint's) */
    {"P(P.UNCONSTRAINED, 'y')", "P(UNCONSTRAINED, 'y')", 2, {0, 1}},
    {"P(UNCONSTRAINED)", "P(UNCONSTRAINED)", 1, {0}},
    /* reduced axes (JAX's reduced=), after unreduced ones */
    {"P(None, reduced={'x'})", "P(None, reduced={'x'})", 1, {0}},
    {"P(reduced={'y'}, unreduced={'x'})", "P(unreduced={'x'}, reduced={'y'})", 0, {0}},
    {"P(('x','y'), reduced={'z'})", "P(('x', 'y'), reduced={'z'})", 1, {2}},
};

START_TEST(test_pspec_parse_table)
{
    const pspec_case *c = &pspec_cases[_i];
    sm_pspec p, q;
    char err[256] = "", buf[256];
    ck_assert_msg(sm_pspec_parse(c->text, &p, err, sizeof err) == SM_OK, "%s: %s", c->text, err);
    ck_assert_int_eq(p.nentries, c->nentries);
    for (int i = 0; i < c->nentries; i++)
        ck_assert_int_eq(p.e[i].naxes, c->naxes[i]);
    ck_assert_str_eq(sm_pspec_format(&p, buf, sizeof buf), c->formatted);
    /* the formatted text parses back to an equal spec */
    ck_assert_int_eq(sm_pspec_parse(buf, &q, err, sizeof err), SM_OK);
    ck_assert(sm_pspec_equal(&p, &q));
}
END_TEST

typedef struct {
    const char *text;
    const char *words;
    const char *words2;
} pspec_err_case;

static const pspec_err_case pspec_err_cases[] = {
    {"", "expected P( or PartitionSpec(", "found the end"},
    {"('i',)", "expected P( or PartitionSpec(", "column 1"},
    {"Q('i')", "expected P(", "column 1"},
    {"P", "expected '('", "column 2"},
    {"P('i'", "expected ',' or ')'", "found the end"},
    {"P('i' 'j')", "expected ',' or ')'", "column 7"},
    {"P(i)", "expected None, a quoted axis name or a tuple", "column 3"},
    {"P('i)", "unterminated axis name", "column 3"},
    {"P('')", "1 to 31 characters", "column 3"},
    {"P(('i' 'j'))", "expected ',' or ')'", "column 8"},
    {"P((None,))", "expected a quoted axis name or ')'", "column 4"},
    {"P('i') x", "expected the end of the spec", "column 8"},
    {"P(None,None,None,None,None,None,None,None,None)", "more than 8 entries", NULL},
    {"P(Nonesuch)", "expected None, a quoted axis name", "column 3"},
    {"P(unreduced='x')", "expected '{'", "column 13"},
    {"P(unreduced={'x'}, 'y')", "expected ')' after unreduced={...}", "column 20"},
    {"P(unreduced={x})", "expected a quoted axis name or '}'", "column 14"},
};

START_TEST(test_pspec_parse_errors)
{
    const pspec_err_case *c = &pspec_err_cases[_i];
    sm_pspec p;
    char err[256] = "";
    ck_assert_int_eq(sm_pspec_parse(c->text, &p, err, sizeof err), SM_EINVAL);
    ck_assert_msg(strstr(err, c->words), "\"%s\": \"%s\"", c->text, err);
    if (c->words2)
        ck_assert_msg(strstr(err, c->words2), "\"%s\": \"%s\"", c->text, err);
}
END_TEST

START_TEST(test_pspec_equal)
{
    sm_pspec a, b;
    char err[128];
    ck_assert_int_eq(sm_pspec_parse("P(('x',), None)", &a, err, sizeof err), SM_OK);
    ck_assert_int_eq(sm_pspec_parse("P('x', ())", &b, err, sizeof err), SM_OK);
    ck_assert(sm_pspec_equal(&a, &b)); /* JAX canonicalises both the same way */
    ck_assert_int_eq(sm_pspec_parse("P('x')", &b, err, sizeof err), SM_OK);
    ck_assert(!sm_pspec_equal(&a, &b)); /* P('x', None) and P('x') differ in length */
    ck_assert_int_eq(sm_pspec_parse("P(('x','y'))", &a, err, sizeof err), SM_OK);
    ck_assert_int_eq(sm_pspec_parse("P(('y','x'))", &b, err, sizeof err), SM_OK);
    ck_assert(!sm_pspec_equal(&a, &b)); /* axis order matters */
    ck_assert_int_eq(sm_pspec_parse("P('x', unreduced={'y', 'z'})", &a, err, sizeof err), SM_OK);
    ck_assert_int_eq(sm_pspec_parse("P('x', unreduced={'z', 'y'})", &b, err, sizeof err), SM_OK);
    ck_assert(sm_pspec_equal(&a, &b)); /* a set */
    ck_assert_int_eq(sm_pspec_parse("P('x', unreduced={'z'})", &b, err, sizeof err), SM_OK);
    ck_assert(!sm_pspec_equal(&a, &b));
    ck_assert_int_eq(sm_pspec_parse("P('x')", &b, err, sizeof err), SM_OK);
    ck_assert(!sm_pspec_equal(&a, &b));
    /* an unreduced sharding: its type, and its index map is the reduced one's */
    sm_mesh m;
    sm_sharding sh, plain;
    sm_shape s = {.rank = 1, .dims = {8}};
    const char *names[] = {"x", "y", "z"};
    const int64_t sizes[] = {2, 2, 2};
    char ty[128];
    ck_assert_int_eq(sm_mesh_init(&m, 3, names, sizes, NULL, 0, err, sizeof err), SM_OK);
    ck_assert_int_eq(sm_sharding_init(&sh, &m, &a, &s, err, sizeof err), SM_OK);
    ck_assert_str_eq(sm_sharding_type_str(&sh, SM_F32, &s, ty, sizeof ty), "f32[8@x]{U:y,z}");
    ck_assert_int_eq(sm_pspec_parse("P('x')", &b, err, sizeof err), SM_OK);
    ck_assert_int_eq(sm_sharding_init(&plain, &m, &b, &s, err, sizeof err), SM_OK);
    sm_device_slice u8[8], p8[8];
    ck_assert_int_eq(sm_sharding_indices(&sh, &s, u8, err, sizeof err), SM_OK);
    ck_assert_int_eq(sm_sharding_indices(&plain, &s, p8, err, sizeof err), SM_OK);
    for (int d = 0; d < 8; d++)
        ck_assert(sm_index_equal(&u8[d].index, &p8[d].index));
    ck_assert_int_eq(sm_pspec_check_reduced(&a, "an upload", err, sizeof err), SM_EUNIMPLEMENTED);
    ck_assert_msg(strstr(err, "only a program's results hold partial sums"), "%s", err);
    ck_assert_int_eq(sm_pspec_check_mesh(&a, &m, err, sizeof err), SM_OK);
    ck_assert_int_eq(sm_pspec_parse("P('x', unreduced={'x'})", &a, err, sizeof err), SM_OK);
    ck_assert_int_eq(sm_pspec_check_mesh(&a, &m, err, sizeof err), SM_EINVAL);
    ck_assert_msg(strstr(err, "partitions cannot overlap with unreduced axes"), "%s", err);
    ck_assert_int_eq(sm_pspec_parse("P(unreduced={'w'})", &a, err, sizeof err), SM_OK);
    ck_assert_int_eq(sm_pspec_check_mesh(&a, &m, err, sizeof err), SM_EINVAL);
    ck_assert_msg(strstr(err, "unreduced axis 'w' is not an axis of the mesh"), "%s", err);
    /* a reduced sharding: laid out as replicated over its reduced axes, its
     * type says R:, an upload may be reduced; the sets compare as sets */
    ck_assert_int_eq(sm_pspec_parse("P('x', reduced={'z', 'y'})", &a, err, sizeof err), SM_OK);
    ck_assert_int_eq(sm_pspec_parse("P('x', reduced={'y', 'z'})", &b, err, sizeof err), SM_OK);
    ck_assert(sm_pspec_equal(&a, &b));
    ck_assert_int_eq(sm_sharding_init(&sh, &m, &a, &s, err, sizeof err), SM_OK);
    ck_assert_str_eq(sm_sharding_type_str(&sh, SM_F32, &s, ty, sizeof ty), "f32[8@x]{R:y,z}");
    ck_assert_int_eq(sm_sharding_indices(&sh, &s, u8, err, sizeof err), SM_OK);
    for (int d = 0; d < 8; d++)
        ck_assert(sm_index_equal(&u8[d].index, &p8[d].index));
    ck_assert_int_eq(sm_pspec_check_reduced(&a, "an upload", err, sizeof err), SM_OK);
    ck_assert_int_eq(sm_pspec_parse("P('x')", &b, err, sizeof err), SM_OK);
    ck_assert(!sm_pspec_equal(&a, &b));
    ck_assert_int_eq(sm_pspec_parse("P(unreduced={'x'}, reduced={'y'})", &a, err, sizeof err),
                     SM_OK);
    ck_assert_int_eq(sm_sharding_init(&sh, &m, &a, &s, err, sizeof err), SM_OK);
    ck_assert_str_eq(sm_sharding_type_str(&sh, SM_F32, &s, ty, sizeof ty), "f32[8]{U:x, R:y}");
    ck_assert_int_eq(sm_pspec_parse("P('x', reduced={'x'})", &a, err, sizeof err), SM_OK);
    ck_assert_int_eq(sm_pspec_check_mesh(&a, &m, err, sizeof err), SM_EINVAL);
    ck_assert_msg(strstr(err, "partitions cannot overlap with reduced axes"), "%s", err);
    ck_assert_int_eq(sm_pspec_parse("P(unreduced={'y'}, reduced={'y'})", &a, err, sizeof err),
                     SM_OK);
    ck_assert_int_eq(sm_pspec_check_mesh(&a, &m, err, sizeof err), SM_EINVAL);
    ck_assert_msg(strstr(err, "`unreduced` and `reduced` argument to PartitionSpec cannot overlap"),
                  "%s", err);
    /* the kind: compared, in the type string (JAX's U_max:), only with unreduced axes */
    ck_assert_int_eq(sm_pspec_parse("P(unreduced={'x'}, unreduced_kind=max)", &a, err, sizeof err),
                     SM_OK);
    ck_assert_int_eq(sm_pspec_parse("P(unreduced={'x'})", &b, err, sizeof err), SM_OK);
    ck_assert(!sm_pspec_equal(&a, &b));
    ck_assert_int_eq(sm_sharding_init(&sh, &m, &a, &s, err, sizeof err), SM_OK);
    ck_assert_str_eq(sm_sharding_type_str(&sh, SM_F32, &s, ty, sizeof ty), "f32[8]{U_max:x}");
    ck_assert_int_eq(sm_pspec_parse("P('x', unreduced_kind=max)", &a, err, sizeof err), SM_OK);
    ck_assert_int_eq(sm_pspec_check_mesh(&a, &m, err, sizeof err), SM_EINVAL);
    ck_assert_msg(strstr(err, "`unreduced_kind` should be `None` when `unreduced` is an empty set"),
                  "%s", err);
    ck_assert_int_eq(sm_pspec_parse("P(unreduced={'x'}, unreduced_kind=avg)", &a, err, sizeof err),
                     SM_EINVAL);
}
END_TEST

/* ---- checks against a mesh and a shape -------------------------------- */

typedef struct {
    const char *mesh;
    const char *spec;
    int rank;
    int64_t dims[3];
    const char *what;
    sm_err code;
    const char *msg; /* exact message, or NULL */
    const char *words;
} check_case;

static const check_case check_cases[] = {
    {"i=4,j=2", "P('i','j')", 2, {8, 16}, NULL, SM_OK, NULL, NULL},
    {"i=4,j=2", "P(('i','j'))", 1, {8}, NULL, SM_OK, NULL, NULL},
    {"i=4,j=2", "P()", 0, {0}, NULL, SM_OK, NULL, NULL},
    {"i=4,j=2", "P(None, None)", 2, {3, 5}, NULL, SM_OK, NULL, NULL},
    {"i=4,j=2", "P('j')", 3, {2, 3, 5}, NULL, SM_OK, NULL, NULL},
    {"i=4,j=2", "P('i')", 1, {0}, NULL, SM_OK, NULL, NULL}, /* 0 is divisible */
    {"i=3",
     "P(None, 'i')",
     2,
     {4, 16},
     "argument 'a'",
     SM_EINVAL,
     "dimension 1 of argument 'a' has size 16, which is not divisible by 3 (the product of mesh "
     "axes ('i',) of sizes (3,))",
     NULL},
    {"i=4,j=2",
     "P(('j','i'))",
     1,
     {12},
     NULL,
     SM_EINVAL,
     "dimension 0 of the array has size 12, which is not divisible by 8 (the product of mesh axes "
     "('j', 'i') of sizes (2, 4))",
     NULL},
    {"i=4,j=2",
     "P('i', 'i')",
     2,
     {8, 8},
     NULL,
     SM_EINVAL,
     "mesh axis 'i' appears more than once in P('i', 'i')",
     NULL},
    {"i=4,j=2",
     "P(('i','j'), 'j')",
     2,
     {8, 8},
     NULL,
     SM_EINVAL,
     "mesh axis 'j' appears more than once in P(('i', 'j'), 'j')",
     NULL},
    {"i=4,j=2",
     "P(('j','j'))",
     1,
     {8},
     NULL,
     SM_EINVAL,
     "mesh axis 'j' appears more than once in P(('j', 'j'),)",
     NULL},
    {"i=4,j=2",
     "P('k')",
     1,
     {8},
     NULL,
     SM_EINVAL,
     "P('k') refers to mesh axis 'k', but the mesh has axes ('i', 'j')",
     NULL},
    {"x=8",
     "P(None, ('x', 'q'))",
     2,
     {8, 8},
     NULL,
     SM_EINVAL,
     "P(None, ('x', 'q')) refers to mesh axis 'q', but the mesh has axes ('x',)",
     NULL},
    {"i=4,j=2",
     "P('i', 'j', None)",
     2,
     {8, 8},
     NULL,
     SM_EINVAL,
     "P('i', 'j', None) has 3 entries but the array has rank 2 (a scalar needs P())",
     NULL},
    {"i=4,j=2", "P(None)", 0, {0}, "output 0", SM_EINVAL, NULL, "output 0 has rank 0"},
    {"i=4,j=2",
     "P()",
     2,
     {-1, 4},
     NULL,
     SM_EINVAL,
     "dimension 0 of the array has negative size -1",
     NULL},
    {"i=4,j=2",
     "P()",
     9,
     {1, 1, 1},
     "argument 'x'",
     SM_EINVAL,
     NULL,
     "argument 'x' has rank 9; ranks go from 0 to 8"},
};

START_TEST(test_pspec_check_table)
{
    const check_case *c = &check_cases[_i];
    sm_mesh m;
    sm_pspec p;
    sm_shape s = {c->rank, {c->dims[0], c->dims[1], c->dims[2]}};
    char err[512] = "";
    ck_assert_int_eq(sm_mesh_parse(c->mesh, NULL, 0, &m, err, sizeof err), SM_OK);
    ck_assert_int_eq(sm_pspec_parse(c->spec, &p, err, sizeof err), SM_OK);
    sm_err rc = sm_pspec_check(&p, &m, &s, c->what, err, sizeof err);
    ck_assert_msg(rc == c->code, "%s on %s: %s (%s)", c->spec, c->mesh, sm_err_name(rc), err);
    if (c->msg)
        ck_assert_str_eq(err, c->msg);
    if (c->words)
        ck_assert_msg(strstr(err, c->words), "\"%s\"", err);
    /* sm_sharding_init reports the same failures */
    sm_sharding sh;
    ck_assert_int_eq(sm_sharding_init(&sh, &m, &p, &s, err, sizeof err), c->code);
}
END_TEST

START_TEST(test_pspec_check_mesh_and_factor)
{
    sm_mesh m;
    sm_pspec p;
    char err[256];
    ck_assert_int_eq(sm_mesh_parse("a=2,b=3,c=4", NULL, 0, &m, err, sizeof err), SM_OK);
    ck_assert_int_eq(sm_pspec_parse("P(('c','a'), None, 'b')", &p, err, sizeof err), SM_OK);
    ck_assert_int_eq(sm_pspec_check_mesh(&p, &m, err, sizeof err), SM_OK);
    ck_assert_int_eq(sm_pspec_dim_factor(&p, &m, 0), 8);
    ck_assert_int_eq(sm_pspec_dim_factor(&p, &m, 1), 1);
    ck_assert_int_eq(sm_pspec_dim_factor(&p, &m, 2), 3);
    ck_assert_int_eq(sm_pspec_dim_factor(&p, &m, 5), 1); /* past the spec */
    ck_assert_int_eq(sm_pspec_parse("P('a', 'd')", &p, err, sizeof err), SM_OK);
    ck_assert_int_eq(sm_pspec_check_mesh(&p, &m, err, sizeof err), SM_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "mesh axis 'd'"));
    ck_assert_ptr_nonnull(strstr(err, "('a', 'b', 'c')"));
}
END_TEST

static Suite *shard_suite(void)
{
#define N(a) ((int)(sizeof(a) / sizeof((a)[0])))
    return SUITE_CASE(suite_create("shard"), "mesh_pspec", 0, NULL,
                      {test_mesh_parse_table, N(mesh_cases)}, {test_mesh_init_and_lookup},
                      {test_mesh_default_devices, N(defdev_cases)},
                      {test_pspec_parse_table, N(pspec_cases)},
                      {test_pspec_parse_errors, N(pspec_err_cases)}, {test_pspec_equal},
                      {test_pspec_check_table, N(check_cases)}, {test_pspec_check_mesh_and_factor});
#undef N
}

int main(void)
{
    return suite_main(shard_suite());
}
