/* Check suite for common/shard, part 2: NamedSharding applied to a shape —
 * devices_indices_map and replica ids against a brute-force reference,
 * shard shapes, the worked numbers of docs/semantics.md and the data loading
 * guide's layouts, type strings and diagrams. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sm_sharding.h"
#include "suite_main.h"

#define N(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* ---- brute-force reference -------------------------------------------- */

/* The reference works straight from the definitions, independently of the
 * library: coordinates by repeated division from the front, shard numbers
 * by summing coordinate * (product of the sizes of later axes in the
 * tuple), replica ids by counting earlier devices with the same box. */
typedef struct {
    int64_t start[SM_MAX_RANK], stop[SM_MAX_RANK];
    int replica;
} ref_slice;

static void ref_indices(const sm_mesh *m, const sm_pspec *p, const sm_shape *g, ref_slice *out)
{
    for (int pos = 0; pos < m->ndevices; pos++) {
        int64_t coords[SM_MAX_AXES], rest = pos, below = m->ndevices;
        for (int a = 0; a < m->naxes; a++) {
            below /= m->sizes[a];
            coords[a] = rest / below;
            rest %= below;
        }
        for (int d = 0; d < g->rank; d++) {
            int64_t n = 1, r = 0;
            const sm_pspec_entry *e = d < p->nentries ? &p->e[d] : NULL;
            for (int k = 0; e && k < e->naxes; k++) {
                int a = 0;
                while (strcmp(m->names[a], e->axes[k]) != 0)
                    a++;
                n *= m->sizes[a];
                int64_t weight = 1;
                for (int l = k + 1; l < e->naxes; l++) {
                    int b = 0;
                    while (strcmp(m->names[b], e->axes[l]) != 0)
                        b++;
                    weight *= m->sizes[b];
                }
                r += coords[a] * weight;
            }
            out[pos].start[d] = r * (g->dims[d] / n);
            out[pos].stop[d] = (r + 1) * (g->dims[d] / n);
        }
        out[pos].replica = 0;
        for (int q = 0; q < pos; q++) {
            int same = 1;
            for (int d = 0; d < g->rank; d++)
                same &= out[q].start[d] == out[pos].start[d] && out[q].stop[d] == out[pos].stop[d];
            out[pos].replica += same;
        }
    }
}

/* Compares the library's map with the reference for one sharding. */
static void check_against_ref(const sm_mesh *m, const sm_pspec *p, const sm_shape *g)
{
    sm_sharding s;
    char err[256], spec[128];
    sm_pspec_format(p, spec, sizeof spec);
    ck_assert_msg(sm_sharding_init(&s, m, p, g, err, sizeof err) == SM_OK, "%s: %s", spec, err);
    sm_device_slice *got = malloc(sizeof *got * (size_t)m->ndevices);
    ref_slice *want = malloc(sizeof *want * (size_t)m->ndevices);
    ck_assert_ptr_nonnull(got);
    ck_assert_ptr_nonnull(want);
    ck_assert_int_eq(sm_sharding_indices(&s, g, got, err, sizeof err), SM_OK);
    ref_indices(m, p, g, want);
    int distinct = 0;
    for (int pos = 0; pos < m->ndevices; pos++) {
        ck_assert_int_eq(got[pos].device, m->devices[pos]);
        ck_assert_int_eq(got[pos].pos, pos);
        ck_assert_int_eq(got[pos].index.rank, g->rank);
        for (int d = 0; d < g->rank; d++) {
            ck_assert_msg(got[pos].index.r[d].start == want[pos].start[d] &&
                              got[pos].index.r[d].stop == want[pos].stop[d],
                          "%s pos %d dim %d: got [%lld,%lld) want [%lld,%lld)", spec, pos, d,
                          (long long)got[pos].index.r[d].start, (long long)got[pos].index.r[d].stop,
                          (long long)want[pos].start[d], (long long)want[pos].stop[d]);
        }
        ck_assert_msg(got[pos].replica_id == want[pos].replica, "%s pos %d: replica %d want %d",
                      spec, pos, got[pos].replica_id, want[pos].replica);
        distinct += want[pos].replica == 0;
    }
    ck_assert_int_eq(sm_sharding_num_distinct(&s, g), distinct);
    ck_assert_int_eq(sm_sharding_is_fully_replicated(&s, g), distinct == 1); /* no zero dims here */
    /* the shard shape is the extent of every box */
    sm_shape ss;
    ck_assert_int_eq(sm_sharding_shard_shape(&s, g, &ss, err, sizeof err), SM_OK);
    for (int d = 0; d < g->rank; d++)
        ck_assert_int_eq(ss.dims[d], want[0].stop[d] - want[0].start[d]);
    free(got);
    free(want);
}

/* Meshes with identity and non-identity device orders. */
typedef struct {
    const char *mesh;
    int ndev;
    int32_t devs[8];
} ref_mesh;

static const ref_mesh ref_meshes[] = {
    {"x=8", 0, {0}},         {"x=8", 8, {3, 1, 7, 5, 0, 2, 6, 4}},
    {"i=4,j=2", 0, {0}},     {"i=4,j=2", 8, {0, 4, 1, 5, 2, 6, 3, 7}},
    {"x=2,y=4", 0, {0}},     {"x=2,y=4", 8, {7, 6, 5, 4, 3, 2, 1, 0}},
    {"a=2,b=2,c=2", 0, {0}}, {"a=2,b=2,c=2", 8, {5, 0, 3, 6, 1, 4, 7, 2}},
};

/* Every spec for ranks 1..3: each mesh axis goes unused or to one
 * dimension; inside a dimension the axes are in mesh order or reversed;
 * the spec is as long as needed, or padded to the rank with None. That
 * covers None, single axes, tuples in both orders, several sharded
 * dimensions and trailing unspecified dimensions. */
START_TEST(test_indices_vs_reference)
{
    const ref_mesh *rm = &ref_meshes[_i];
    sm_mesh m;
    char err[256];
    ck_assert_int_eq(
        sm_mesh_parse(rm->mesh, rm->ndev ? rm->devs : NULL, rm->ndev, &m, err, sizeof err), SM_OK);
    int checked = 0;
    for (int rank = 1; rank <= 3; rank++) {
        sm_shape g = {rank, {16, 24, 8}};
        int bins = rank + 1, combos = 1;
        for (int a = 0; a < m.naxes; a++)
            combos *= bins;
        for (int combo = 0; combo < combos; combo++) {
            for (int order = 0; order < 2; order++) {
                for (int pad = 0; pad < 2; pad++) {
                    sm_pspec p;
                    memset(&p, 0, sizeof p);
                    int code = combo, used_len = 0;
                    int bin_of[SM_MAX_AXES];
                    for (int a = 0; a < m.naxes; a++) {
                        bin_of[a] = code % bins;
                        code /= bins;
                        if (bin_of[a] > used_len)
                            used_len = bin_of[a];
                    }
                    for (int k = 0; k < m.naxes; k++) {
                        int a = order ? m.naxes - 1 - k : k;
                        if (bin_of[a] == 0)
                            continue;
                        sm_pspec_entry *e = &p.e[bin_of[a] - 1];
                        strcpy(e->axes[e->naxes++], m.names[a]);
                    }
                    p.nentries = pad ? rank : used_len;
                    /* also through the parser, from the formatted text */
                    char text[256];
                    sm_pspec q;
                    sm_pspec_format(&p, text, sizeof text);
                    ck_assert_int_eq(sm_pspec_parse(text, &q, err, sizeof err), SM_OK);
                    ck_assert(sm_pspec_equal(&p, &q));
                    check_against_ref(&m, &q, &g);
                    checked++;
                }
            }
        }
    }
    ck_assert_int_ge(checked, 36);
}
END_TEST

/* ---- the worked numbers ----------------------------------------------- */

/* One expected device row: device, [start,stop) x2, replica id. */
typedef struct {
    int32_t device;
    int64_t r0, s0, r1, s1;
    int replica;
} want_row;

typedef struct {
    const char *name;
    const char *mesh;
    int ndev;
    int32_t devs[8];
    const char *spec;
    int64_t shard0, shard1; /* expected shard shape */
    want_row rows[8];       /* in mesh order */
} guide_case;

/* The data loading guide's (64,128) array over 4 processes x 2 devices. */
static const guide_case guide_cases[] = {
    {"1-D column sharding",
     "x=8",
     0,
     {0},
     "P(None, 'x')",
     64,
     16,
     {{0, 0, 64, 0, 16, 0},
      {1, 0, 64, 16, 32, 0},
      {2, 0, 64, 32, 48, 0},
      {3, 0, 64, 48, 64, 0},
      {4, 0, 64, 64, 80, 0},
      {5, 0, 64, 80, 96, 0},
      {6, 0, 64, 96, 112, 0},
      {7, 0, 64, 112, 128, 0}}},
    {"1-D column sharding, permuted devices",
     "x=8",
     8,
     {0, 2, 4, 6, 1, 3, 5, 7},
     "P(None, 'x')",
     64,
     16,
     {{0, 0, 64, 0, 16, 0},
      {2, 0, 64, 16, 32, 0},
      {4, 0, 64, 32, 48, 0},
      {6, 0, 64, 48, 64, 0},
      {1, 0, 64, 64, 80, 0},
      {3, 0, 64, 80, 96, 0},
      {5, 0, 64, 96, 112, 0},
      {7, 0, 64, 112, 128, 0}}},
    {"2-D sharding",
     "x=4,y=2",
     0,
     {0},
     "P('x', 'y')",
     16,
     64,
     {{0, 0, 16, 0, 64, 0},
      {1, 0, 16, 64, 128, 0},
      {2, 16, 32, 0, 64, 0},
      {3, 16, 32, 64, 128, 0},
      {4, 32, 48, 0, 64, 0},
      {5, 32, 48, 64, 128, 0},
      {6, 48, 64, 0, 64, 0},
      {7, 48, 64, 64, 128, 0}}},
    {"full replication",
     "x=4,y=2",
     0,
     {0},
     "P()",
     64,
     128,
     {{0, 0, 64, 0, 128, 0},
      {1, 0, 64, 0, 128, 1},
      {2, 0, 64, 0, 128, 2},
      {3, 0, 64, 0, 128, 3},
      {4, 0, 64, 0, 128, 4},
      {5, 0, 64, 0, 128, 5},
      {6, 0, 64, 0, 128, 6},
      {7, 0, 64, 0, 128, 7}}},
    {"partial replication, replicas inside a process",
     "x=4,y=2",
     0,
     {0},
     "P(None, 'y')",
     64,
     64,
     {{0, 0, 64, 0, 64, 0},
      {1, 0, 64, 64, 128, 0},
      {2, 0, 64, 0, 64, 1},
      {3, 0, 64, 64, 128, 1},
      {4, 0, 64, 0, 64, 2},
      {5, 0, 64, 64, 128, 2},
      {6, 0, 64, 0, 64, 3},
      {7, 0, 64, 64, 128, 3}}},
    {"partial replication, replicas across processes",
     "r=4,s=2",
     8,
     {0, 4, 1, 5, 2, 6, 3, 7},
     "P('s')",
     32,
     128,
     {{0, 0, 32, 0, 128, 0},
      {4, 32, 64, 0, 128, 0},
      {1, 0, 32, 0, 128, 1},
      {5, 32, 64, 0, 128, 1},
      {2, 0, 32, 0, 128, 2},
      {6, 32, 64, 0, 128, 2},
      {3, 0, 32, 0, 128, 3},
      {7, 32, 64, 0, 128, 3}}},
};

START_TEST(test_guide_layouts)
{
    const guide_case *c = &guide_cases[_i];
    sm_mesh m;
    sm_pspec p;
    sm_sharding s;
    sm_shape g = {2, {64, 128}}, ss;
    sm_device_slice out[8];
    char err[256];
    ck_assert_int_eq(sm_mesh_parse(c->mesh, c->ndev ? c->devs : NULL, c->ndev, &m, err, sizeof err),
                     SM_OK);
    ck_assert_int_eq(sm_pspec_parse(c->spec, &p, err, sizeof err), SM_OK);
    ck_assert_int_eq(sm_sharding_init(&s, &m, &p, &g, err, sizeof err), SM_OK);
    ck_assert_int_eq(sm_sharding_shard_shape(&s, &g, &ss, err, sizeof err), SM_OK);
    ck_assert_msg(ss.rank == 2 && ss.dims[0] == c->shard0 && ss.dims[1] == c->shard1,
                  "%s: shard shape", c->name);
    ck_assert_int_eq(sm_sharding_indices(&s, &g, out, err, sizeof err), SM_OK);
    for (int i = 0; i < 8; i++) {
        const want_row *w = &c->rows[i];
        ck_assert_msg(out[i].device == w->device && out[i].index.r[0].start == w->r0 &&
                          out[i].index.r[0].stop == w->s0 && out[i].index.r[1].start == w->r1 &&
                          out[i].index.r[1].stop == w->s1 && out[i].replica_id == w->replica,
                      "%s: mesh position %d", c->name, i);
    }
}
END_TEST

/* docs/semantics.md, PartitionSpec: (64,128) over 8 devices sharded along dim 1 gives
 * (64,16) blocks; the matmul_basic operands on mesh (4,2). */
START_TEST(test_semantics_numbers)
{
    struct {
        const char *mesh, *spec;
        int64_t g0, g1, b0, b1;
        int distinct;
    } rows[] = {
        {"x=8", "P(None, 'x')", 64, 128, 64, 16, 8},
        {"i=4,j=2", "P('i','j')", 8, 16, 2, 8, 8},
        {"i=4,j=2", "P('j', None)", 16, 32, 8, 32, 2},
        {"i=4,j=2", "P('i', None)", 8, 32, 2, 32, 4},
        {"i=4,j=2", "P(None, 'j')", 12, 12, 12, 6, 2},
        {"x=2,y=4", "P(('x','y'))", 512, 1, 64, 1, 8},
    };
    for (int k = 0; k < N(rows); k++) {
        sm_mesh m;
        sm_pspec p;
        sm_sharding s;
        sm_shape g = {2, {rows[k].g0, rows[k].g1}}, b;
        char err[256];
        ck_assert_int_eq(sm_mesh_parse(rows[k].mesh, NULL, 0, &m, err, sizeof err), SM_OK);
        ck_assert_int_eq(sm_pspec_parse(rows[k].spec, &p, err, sizeof err), SM_OK);
        ck_assert_int_eq(sm_sharding_init(&s, &m, &p, &g, err, sizeof err), SM_OK);
        ck_assert_int_eq(sm_sharding_shard_shape(&s, &g, &b, err, sizeof err), SM_OK);
        ck_assert_int_eq(b.dims[0], rows[k].b0);
        ck_assert_int_eq(b.dims[1], rows[k].b1);
        ck_assert_int_eq(sm_sharding_num_distinct(&s, &g), rows[k].distinct);
    }
}
END_TEST

START_TEST(test_zero_size_and_scalar)
{
    /* A zero-size sharded dimension: all boxes are empty and equal, so the
     * devices along that axis are replicas (as JAX's hashed indices). */
    sm_mesh m;
    sm_pspec p;
    sm_sharding s;
    sm_shape g = {2, {0, 4}};
    sm_device_slice out[8];
    char err[256];
    ck_assert_int_eq(sm_mesh_parse("i=4,j=2", NULL, 0, &m, err, sizeof err), SM_OK);
    ck_assert_int_eq(sm_pspec_parse("P('i', 'j')", &p, err, sizeof err), SM_OK);
    check_against_ref(&m, &p, &g);
    ck_assert_int_eq(sm_sharding_init(&s, &m, &p, &g, err, sizeof err), SM_OK);
    ck_assert_int_eq(sm_sharding_num_distinct(&s, &g), 2);
    ck_assert_int_eq(sm_sharding_is_fully_replicated(&s, &g), 0);
    /* a scalar with P() is held whole by every device */
    sm_shape sc = {0, {0}};
    ck_assert_int_eq(sm_pspec_parse("P()", &p, err, sizeof err), SM_OK);
    ck_assert_int_eq(sm_sharding_init(&s, &m, &p, &sc, err, sizeof err), SM_OK);
    ck_assert_int_eq(sm_sharding_indices(&s, &sc, out, err, sizeof err), SM_OK);
    for (int i = 0; i < 8; i++) {
        ck_assert_int_eq(out[i].index.rank, 0);
        ck_assert_int_eq(out[i].replica_id, i);
    }
    ck_assert_int_eq(sm_sharding_is_fully_replicated(&s, &sc), 1);
    ck_assert_int_eq(sm_sharding_num_distinct(&s, &sc), 1);
    /* an axis of size 1 shards nothing */
    ck_assert_int_eq(sm_mesh_parse("i=1,j=8", NULL, 0, &m, err, sizeof err), SM_OK);
    ck_assert_int_eq(sm_pspec_parse("P('i')", &p, err, sizeof err), SM_OK);
    g = (sm_shape){2, {8, 8}};
    ck_assert_int_eq(sm_sharding_init(&s, &m, &p, &g, err, sizeof err), SM_OK);
    ck_assert_int_eq(sm_sharding_is_fully_replicated(&s, &g), 1);
}
END_TEST

START_TEST(test_index_errors)
{
    /* The shape-taking functions validate: each error path has its code. */
    sm_mesh m;
    sm_pspec p;
    sm_sharding s;
    sm_shape ok = {2, {8, 8}}, bad = {2, {6, 8}}, small = {1, {8}}, out;
    sm_device_slice sl[8];
    sm_strbuf b = {0};
    char err[256];
    ck_assert_int_eq(sm_mesh_parse("i=4,j=2", NULL, 0, &m, err, sizeof err), SM_OK);
    ck_assert_int_eq(sm_pspec_parse("P('i', 'j')", &p, err, sizeof err), SM_OK);
    ck_assert_int_eq(sm_sharding_init(&s, &m, &p, &ok, err, sizeof err), SM_OK);
    ck_assert_int_eq(sm_sharding_shard_shape(&s, &bad, &out, err, sizeof err), SM_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "dimension 0 of the array has size 6"));
    ck_assert_int_eq(sm_sharding_indices(&s, &small, sl, err, sizeof err), SM_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "has 2 entries but the array has rank 1"));
    ck_assert_int_eq(sm_sharding_diagram(&s, &bad, &b, err, sizeof err), SM_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "not divisible by 4"));
    ck_assert_uint_eq(b.len, 0);
    sm_strbuf_free(&b);
}
END_TEST

/* ---- type strings ------------------------------------------------------ */

typedef struct {
    const char *mesh, *spec;
    sm_dtype t;
    int rank;
    int64_t dims[3];
    const char *want;
} type_case;

static const type_case type_cases[] = {
    {"X=4,Y=2", "P('X', 'Y')", SM_F32, 2, {8, 2}, "f32[8@X,2@Y]"},
    {"X=4,Y=2", "P(('X', 'Y'))", SM_F32, 2, {8, 4}, "f32[8@(X,Y),4]"},
    {"X=4,Y=2", "P()", SM_F32, 2, {8, 4}, "f32[8,4]"},
    {"X=4,Y=2", "P(None, None)", SM_F32, 2, {8, 4}, "f32[8,4]"},
    {"X=4,Y=2", "P(('X',), None)", SM_I32, 2, {8, 4}, "i32[8@X,4]"},
    {"X=4,Y=2", "P(None, ('Y', 'X'))", SM_BF16, 3, {3, 8, 5}, "bf16[3,8@(Y,X),5]"},
    {"i=4,j=2", "P()", SM_F64, 0, {0}, "f64[]"},
    {"i=4,j=2", "P('j')", SM_BOOL, 1, {6}, "bool[6@j]"},
    {"i=4,j=2", "P('i', 'j')", SM_F32, 2, {64, 128}, "f32[64@i,128@j]"},
    /* Auto axes are not in a type (jax.typeof on an Auto mesh) */
    {"i=4,j=2,axis_types=(Auto,Explicit)", "P('i', 'j')", SM_F32, 2, {8, 4}, "f32[8,4@j]"},
    {"i=4,j=2,axis_types=(Auto,Auto)", "P('i', 'j')", SM_F32, 2, {8, 4}, "f32[8,4]"},
    {"i=4,j=2,axis_types=(Explicit,Auto)", "P(('i', 'j'))", SM_F32, 1, {8}, "f32[8@i]"},
    {"i=2,j=2,k=2,axis_types=(Explicit,Auto,Explicit)",
     "P(('i', 'j', 'k'))",
     SM_F32,
     1,
     {8},
     "f32[8@(i,k)]"},
    {"i=4,j=2,axis_types=(Explicit,Auto)", "P('i', unreduced={'j'})", SM_F32, 1, {8}, "f32[8@i]"},
};

START_TEST(test_type_strings)
{
    const type_case *c = &type_cases[_i];
    sm_mesh m;
    sm_pspec p;
    sm_sharding s;
    sm_shape g = {c->rank, {c->dims[0], c->dims[1], c->dims[2]}};
    char err[256], buf[128];
    ck_assert_int_eq(sm_mesh_parse(c->mesh, NULL, 0, &m, err, sizeof err), SM_OK);
    ck_assert_int_eq(sm_pspec_parse(c->spec, &p, err, sizeof err), SM_OK);
    ck_assert_int_eq(sm_sharding_init(&s, &m, &p, &g, err, sizeof err), SM_OK);
    ck_assert_str_eq(sm_sharding_type_str(&s, c->t, &g, buf, sizeof buf), c->want);
    /* truncation keeps the buffer terminated */
    char tiny[6];
    sm_sharding_type_str(&s, c->t, &g, tiny, sizeof tiny);
    ck_assert_uint_le(strlen(tiny), 5);
}
END_TEST

/* ---- diagrams ---------------------------------------------------------- */

static char *diagram(const char *mesh, const int32_t *devs, int ndev, const char *spec, int rank,
                     int64_t d0, int64_t d1, int64_t d2)
{
    sm_mesh m;
    sm_pspec p;
    sm_sharding s;
    sm_shape g = {rank, {d0, d1, d2}};
    sm_strbuf b = {0};
    char err[256];
    ck_assert_int_eq(sm_mesh_parse(mesh, devs, ndev, &m, err, sizeof err), SM_OK);
    ck_assert_int_eq(sm_pspec_parse(spec, &p, err, sizeof err), SM_OK);
    ck_assert_int_eq(sm_sharding_init(&s, &m, &p, &g, err, sizeof err), SM_OK);
    ck_assert_int_eq(sm_sharding_diagram(&s, &g, &b, err, sizeof err), SM_OK);
    return sm_strbuf_take(&b);
}

START_TEST(test_diagram_exact)
{
    /* matmul_basic's a: f32[8,16] P('i','j') on mesh (4,2) */
    char *d = diagram("i=4,j=2", NULL, 0, "P('i', 'j')", 2, 8, 16, 0);
    ck_assert_str_eq(d, "+------------------------+------------------------+\n"
                        "|                        |                        |\n"
                        "|         dev 0          |         dev 1          |\n"
                        "|                        |                        |\n"
                        "+------------------------+------------------------+\n"
                        "|                        |                        |\n"
                        "|         dev 2          |         dev 3          |\n"
                        "|                        |                        |\n"
                        "+------------------------+------------------------+\n"
                        "|                        |                        |\n"
                        "|         dev 4          |         dev 5          |\n"
                        "|                        |                        |\n"
                        "+------------------------+------------------------+\n"
                        "|                        |                        |\n"
                        "|         dev 6          |         dev 7          |\n"
                        "|                        |                        |\n"
                        "+------------------------+------------------------+\n");
    free(d);
    /* rank 1, replicated over the process axis: one row, ids increasing */
    int32_t devs[] = {0, 4, 1, 5, 2, 6, 3, 7};
    d = diagram("r=4,s=2", devs, 8, "P('s')", 1, 64, 0, 0);
    ck_assert_str_eq(
        d, "+--------------------------------------+--------------------------------------+\n"
           "|             dev 0,1,2,3              |             dev 4,5,6,7              |\n"
           "+--------------------------------------+--------------------------------------+\n");
    free(d);
}
END_TEST

START_TEST(test_diagram_shapes)
{
    /* replicated blocks are labelled with every holder */
    char *d = diagram("i=4,j=2", NULL, 0, "P('i')", 2, 8, 16, 0);
    ck_assert_ptr_nonnull(strstr(d, "dev 0,1"));
    ck_assert_ptr_nonnull(strstr(d, "dev 6,7"));
    ck_assert_ptr_null(strstr(d, "dev 1,"));
    free(d);
    /* full replication: one box with all devices */
    d = diagram("x=2,y=4", NULL, 0, "P()", 2, 8, 8, 0);
    ck_assert_ptr_nonnull(strstr(d, "dev 0,1,2,3,4,5,6,7"));
    int boxes = 0;
    for (const char *c = d; (c = strstr(c, "dev ")); c++)
        boxes++;
    ck_assert_int_eq(boxes, 1);
    free(d);
    /* every line of a grid has the same width, at most ~80 columns */
    d = diagram("x=4,y=2", NULL, 0, "P(None, 'x')", 2, 64, 128, 0);
    size_t width = strchr(d, '\n') - d;
    ck_assert_uint_le(width, 80);
    for (char *line = d; *line; line = strchr(line, '\n') + 1)
        ck_assert_uint_eq((size_t)(strchr(line, '\n') - line), width);
    free(d);
    /* rank 3: a listing, one line per distinct block */
    d = diagram("x=2,y=4", NULL, 0, "P('y', None, 'x')", 3, 8, 8, 8);
    ck_assert_str_eq(d, "[0:2, 0:8, 0:4]  dev 0\n"
                        "[0:2, 0:8, 4:8]  dev 4\n"
                        "[2:4, 0:8, 0:4]  dev 1\n"
                        "[2:4, 0:8, 4:8]  dev 5\n"
                        "[4:6, 0:8, 0:4]  dev 2\n"
                        "[4:6, 0:8, 4:8]  dev 6\n"
                        "[6:8, 0:8, 0:4]  dev 3\n"
                        "[6:8, 0:8, 4:8]  dev 7\n");
    free(d);
    /* a long device list is abbreviated and the picture stays ~80 wide */
    d = diagram("x=1024", NULL, 0, "P()", 1, 8, 0, 0);
    ck_assert_ptr_nonnull(strstr(d, "dev 0,1,2,"));
    ck_assert_ptr_nonnull(strstr(d, ",... (1024 devices)"));
    ck_assert_uint_le((size_t)(strchr(d, '\n') - d), 80);
    free(d);
    /* rank 0 */
    d = diagram("x=2,y=4", NULL, 0, "P()", 0, 0, 0, 0);
    ck_assert_str_eq(d, "[]  dev 0,1,2,3,4,5,6,7\n");
    free(d);
}
END_TEST

static Suite *shard_index_suite(void)
{
    return SUITE_CASE(
        suite_create("shard_index"), "index", 0, NULL, {test_indices_vs_reference, N(ref_meshes)},
        {test_guide_layouts, N(guide_cases)}, {test_semantics_numbers}, {test_zero_size_and_scalar},
        {test_index_errors}, {test_type_strings, N(type_cases)}, {test_diagram_exact},
        {test_diagram_shapes});
}

int main(void)
{
    return suite_main(shard_index_suite());
}
