/* Check suite for common/exec collectives: every collective with every
 * keyword (tiled/untiled, axis, scatter_dimension, split_axis/concat_axis
 * positions, single and tuple axes in both orders, full and partial
 * ppermute perms) on meshes (8,), (4,2) and (2,2,2), each device's result
 * compared bitwise with a reference computed here from the devices' input
 * blocks (integer-valued f32 data, so any reduction order gives the same
 * bits); determinism;
 * a failing device releases its peers; a missing peer times out. */
#include <check.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sm_comm_local.h"
#include "sm_exec_local.h"
#include "ir_testutil.h"
#include "suite_main.h"

/* ---- the case table ---- */

typedef enum {
    K_PSUM,
    K_PMAX,
    K_PMIN,
    K_PMEAN,
    K_GATHER,
    K_SCATTER,
    K_A2A,
    K_PERM,
    K_INDEX,
    K_SIZE
} kind;

typedef struct {
    kind k;
    int a, b;  /* axis / scatter_dimension / split_axis; concat_axis */
    int tiled; /* or, for ppermute: 0 ring, 1 partial, 2 reverse */
} variant;

static const variant variants[] = {
    {K_PSUM},
    {K_PMAX},
    {K_PMIN},
    {K_PMEAN},
    {K_GATHER, 0, 0, 0},
    {K_GATHER, 1, 0, 0},
    {K_GATHER, 3, 0, 0},
    {K_GATHER, -1, 0, 0},
    {K_GATHER, 0, 0, 1},
    {K_GATHER, 1, 0, 1},
    {K_GATHER, 2, 0, 1},
    {K_GATHER, -1, 0, 1},
    {K_SCATTER, 0, 0, 1},
    {K_SCATTER, 1, 0, 1},
    {K_SCATTER, 2, 0, 1},
    {K_SCATTER, -1, 0, 1},
    {K_SCATTER, 0, 0, 0},
    {K_SCATTER, 1, 0, 0},
    {K_SCATTER, 2, 0, 0},
    {K_A2A, 0, 0, 1},
    {K_A2A, 0, 1, 1},
    {K_A2A, 1, 0, 1},
    {K_A2A, 2, 1, 1},
    {K_A2A, 1, 2, 1},
    {K_A2A, 2, 2, 1},
    {K_A2A, 0, 2, 1},
    {K_A2A, 0, 0, 0},
    {K_A2A, 0, 2, 0},
    {K_A2A, 2, 0, 0},
    {K_A2A, 1, 1, 0},
    {K_A2A, 1, 2, 0},
    {K_PERM, 0, 0, 0},
    {K_PERM, 0, 0, 1},
    {K_PERM, 0, 0, 2},
    {K_INDEX},
    {K_SIZE},
};
#define NVARIANTS ((int)(sizeof variants / sizeof variants[0]))

typedef struct {
    const char *mesh; /* "i=4 j=2" */
    const char *all;  /* every axis, for the in/out specs: "'i', 'j'" */
    const char *axes; /* the collective's axes, as written */
} group_case;

static const group_case groups[] = {
    {"i=8", "'i'", "'i'"},
    {"i=8", "'i'", "('i',)"},
    {"i=4 j=2", "'i', 'j'", "'i'"},
    {"i=4 j=2", "'i', 'j'", "'j'"},
    {"i=4 j=2", "'i', 'j'", "('i', 'j')"},
    {"i=4 j=2", "'i', 'j'", "('j', 'i')"},
    {"i=2 j=2 k=2", "'i', 'j', 'k'", "'j'"},
    {"i=2 j=2 k=2", "'i', 'j', 'k'", "('k', 'i')"},
    {"i=2 j=2 k=2", "'i', 'j', 'k'", "('i', 'j', 'k')"},
    {"i=2 j=2 k=2", "'i', 'j', 'k'", "('j', 'k', 'i')"},
};
#define NGROUPS ((int)(sizeof groups / sizeof groups[0]))

/* ---- reference helpers ---- */

/* The group of pos: members[rank] in rank order, *rank, and the size;
 * computed independently of sm_comm_group_make. */
static int ref_group(const sm_program *p, const char *axes_text, int pos, int *members, int *rank)
{
    int ax[SM_MAX_AXES], nax = 0;
    for (const char *s = axes_text; *s; s++) {
        if (*s != '\'')
            continue;
        char name[SM_AXIS_NAME_MAX];
        int n = 0;
        for (s++; *s != '\''; s++)
            name[n++] = *s;
        name[n] = '\0';
        ax[nax++] = sm_mesh_axis(&p->mesh, name);
    }
    int64_t c[SM_MAX_AXES], q[SM_MAX_AXES];
    sm_mesh_coords(&p->mesh, pos, c);
    int size = 1;
    for (int k = 0; k < nax; k++)
        size *= (int)p->mesh.sizes[ax[k]];
    for (int other = 0; other < p->mesh.ndevices; other++) {
        sm_mesh_coords(&p->mesh, other, q);
        int same = 1;
        for (int a = 0; a < p->mesh.naxes; a++) {
            int named = 0;
            for (int k = 0; k < nax; k++)
                named |= ax[k] == a;
            if (!named && q[a] != c[a])
                same = 0;
        }
        if (!same)
            continue;
        int r = 0;
        for (int k = 0; k < nax; k++)
            r = r * (int)p->mesh.sizes[ax[k]] + (int)q[ax[k]];
        members[r] = other;
        if (other == pos)
            *rank = r;
    }
    return size;
}

static int64_t flat(const sm_shape *s, const int64_t *idx)
{
    int64_t f = 0;
    for (int d = 0; d < s->rank; d++)
        f = f * s->dims[d] + idx[d];
    return f;
}

static void unflat(const sm_shape *s, int64_t f, int64_t *idx)
{
    for (int d = s->rank - 1; d >= 0; d--) {
        idx[d] = f % s->dims[d];
        f /= s->dims[d];
    }
}

static int norm(int a, int rank)
{
    return a < 0 ? a + rank : a;
}

/* Reference result of device pos: out (shape os) from blocks X[q] (shape bs). */
static void reference(const variant *v, const float *const *X, const sm_shape *bs, const int *m,
                      int n, int rank, const sm_shape *os, float *out)
{
    int64_t numel = 1, idx[SM_MAX_RANK + 1], src[SM_MAX_RANK + 1];
    for (int d = 0; d < os->rank; d++)
        numel *= os->dims[d];
    int R = bs->rank;
    for (int64_t f = 0; f < numel; f++) {
        unflat(os, f, idx);
        float val = 0;
        switch (v->k) {
        case K_PSUM:
        case K_PMEAN:
            val = X[m[0]][f];
            for (int r = 1; r < n; r++)
                val += X[m[r]][f];
            if (v->k == K_PMEAN)
                val = val / (float)n;
            break;
        case K_PMAX:
        case K_PMIN:
            val = X[m[0]][f];
            for (int r = 1; r < n; r++)
                val = v->k == K_PMAX ? (X[m[r]][f] > val ? X[m[r]][f] : val)
                                     : (X[m[r]][f] < val ? X[m[r]][f] : val);
            break;
        case K_GATHER: {
            int a = norm(v->a, v->tiled ? R : R + 1), j;
            if (v->tiled) {
                memcpy(src, idx, sizeof(int64_t) * (size_t)R);
                j = (int)(idx[a] / bs->dims[a]);
                src[a] = idx[a] % bs->dims[a];
            } else {
                j = (int)idx[a];
                for (int d = 0, k = 0; d <= R; d++)
                    if (d != a)
                        src[k++] = idx[d];
            }
            val = X[m[j]][flat(bs, src)];
            break;
        }
        case K_SCATTER: {
            int d0 = norm(v->a, R);
            int64_t c = bs->dims[d0] / n;
            if (v->tiled) {
                memcpy(src, idx, sizeof(int64_t) * (size_t)R);
                src[d0] = rank * c + idx[d0];
            } else {
                for (int d = 0, k = 0; d < R; d++)
                    src[d] = d == d0 ? rank : idx[k++];
            }
            val = X[m[0]][flat(bs, src)];
            for (int r = 1; r < n; r++)
                val += X[m[r]][flat(bs, src)];
            break;
        }
        case K_A2A: {
            int sa = norm(v->a, R), ca = norm(v->b, R), j;
            if (v->tiled) {
                int64_t c = bs->dims[sa] / n, cca = ca == sa ? c : bs->dims[ca];
                memcpy(src, idx, sizeof(int64_t) * (size_t)R);
                j = (int)(idx[ca] / cca);
                src[ca] = idx[ca] % cca;
                src[sa] += rank * c;
            } else {
                int64_t rest[SM_MAX_RANK];
                j = (int)idx[ca];
                for (int d = 0, k = 0; d < R; d++)
                    if (d != ca)
                        rest[k++] = idx[d];
                for (int d = 0, k = 0; d < R; d++)
                    src[d] = d == sa ? rank : rest[k++];
            }
            val = X[m[j]][flat(bs, src)];
            break;
        }
        case K_PERM: {
            int from = -1;
            for (int s = 0; s < n; s++) {
                int dst = v->tiled == 0 ? (s + 1) % n : v->tiled == 2 ? n - 1 - s : s + n / 2;
                if (v->tiled == 1 && (s >= n / 2 || n < 2))
                    continue;
                if (dst == rank)
                    from = s;
            }
            val = from < 0 ? 0.0f : X[m[from]][f];
            break;
        }
        case K_INDEX:
            val = (float)rank;
            break;
        case K_SIZE:
            val = (float)n;
            break;
        }
        out[f] = val;
    }
}

/* The collective's expression for the program text. */
static void expr(const variant *v, const char *axes, int n, char *buf, size_t len)
{
    const char *names[] = {"psum", "pmax", "pmin", "pmean"};
    char perm[512] = "[";
    switch (v->k) {
    case K_PSUM:
    case K_PMAX:
    case K_PMIN:
    case K_PMEAN:
        snprintf(buf, len, "%s(x, %s)", names[v->k], axes);
        break;
    case K_GATHER:
        snprintf(buf, len, "all_gather(x, %s, axis=%d, tiled=%s)", axes, v->a,
                 v->tiled ? "True" : "False");
        break;
    case K_SCATTER:
        snprintf(buf, len, "psum_scatter(x, %s, scatter_dimension=%d, tiled=%s)", axes, v->a,
                 v->tiled ? "True" : "False");
        break;
    case K_A2A:
        snprintf(buf, len, "all_to_all(x, %s, %d, %d, tiled=%s)", axes, v->a, v->b,
                 v->tiled ? "True" : "False");
        break;
    case K_PERM:
        for (int s = 0; s < n; s++) {
            int dst = v->tiled == 0 ? (s + 1) % n : v->tiled == 2 ? n - 1 - s : s + n / 2;
            if (v->tiled == 1 && s >= n / 2)
                continue;
            size_t o = strlen(perm);
            snprintf(perm + o, sizeof perm - o, "%s(%d, %d)", o > 1 ? ", " : "", s, dst);
        }
        strcat(perm, "]");
        snprintf(buf, len, "ppermute(x, %s, perm=%s)", axes, perm);
        break;
    case K_INDEX:
        snprintf(buf, len, "zeros((1,), f32) + axis_index(%s)", axes);
        break;
    case K_SIZE:
        snprintf(buf, len, "zeros((1,), f32) + axis_size(%s)", axes);
        break;
    }
}

/* Parses and verifies (replication check off: outputs are tiled over every
 * axis anyway). */
/* 1 if the axes, as written, name two axes of more than one device in
 * another order than the mesh's (mesh "i=4 j=2", axes "('j', 'i')"). */
static int perm_out_of_order(const char *mesh, const char *axes)
{
    int last = -1;
    for (const char *a = axes; *a; a++) {
        if (*a != '\'')
            continue;
        const char *m = mesh;
        while (*m && !(m[0] == a[1] && m[1] == '='))
            m++;
        a += 2;
        if (!*m || atoi(m + 2) == 1)
            continue;
        int pos = (int)(m - mesh);
        if (pos < last)
            return 1;
        last = pos;
    }
    return 0;
}

static int group_size_of(const char *mesh, const char *axes)
{
    int n = 1;
    for (const char *s = mesh; *s; s++)
        if (*s == '=' && strchr(axes, s[-1]))
            n *= atoi(s + 1);
    return n;
}

START_TEST(test_collective)
{
    const group_case *g = &groups[_i / NVARIANTS];
    const variant *v = &variants[_i % NVARIANTS];
    int n = group_size_of(g->mesh, g->axes);
    int nd = group_size_of(g->mesh, "ijk");
    int64_t bd[3] = {8, 16, 24};
    if (v->k == K_SCATTER && !v->tiled)
        bd[norm(v->a, 3)] = n;
    if (v->k == K_A2A && !v->tiled)
        bd[norm(v->a, 3)] = n;
    char text[2048], e[512];
    expr(v, g->axes, n, e, sizeof e);
    snprintf(text, sizeof text,
             "mesh %s\n"
             "shard_map f(x: f32[%lld,%lld,%lld] @ P((%s,))) -> P((%s,)):\n"
             "    y = %s\n"
             "    return y\n",
             g->mesh, (long long)(bd[0] * nd), (long long)bd[1], (long long)bd[2], g->all, g->all,
             e);
    if (v->k == K_PERM && perm_out_of_order(g->mesh, g->axes)) {
        /* as JAX (raise_on_ppermute_sort_diff): refused before anything runs */
        sm_program *q = NULL;
        char msg[1024] = "";
        sm_err pe = sm_program_parse(text, "t.shmap", &q, msg, sizeof msg);
        ck_assert_int_eq(pe, SM_EINVAL);
        ck_assert_msg(strstr(msg, "in the same order as the axis_names declared on the mesh"), "%s",
                      msg);
        return;
    }
    sm_program *p = parse_ok(text, 0);
    sm_array *x, *out;
    char err[1024] = "";
    ck_assert_int_eq(sm_array_create(SM_F32, &p->params[0].global, &x, err, sizeof err), SM_OK);
    int64_t total = bd[0] * bd[1] * bd[2] * nd;
    uint64_t st = (uint64_t)_i * 7919 + 1;
    for (int64_t k = 0; k < total; k++) {
        st = st * 6364136223846793005ull + 1442695040888963407ull;
        ((float *)x->data)[k] = (float)((int)((st >> 33) % 17) - 8);
    }
    sm_exec_local_opts o = {.timeout_s = 20};
    ck_assert_msg(sm_exec_local_run(p, &x, &out, &o, err, sizeof err) == SM_OK, "%s\n%s", err,
                  text);
    sm_shape bs = {.rank = 3, .dims = {bd[0], bd[1], bd[2]}};
    const sm_shape *os = &p->values[p->returns[0]].shape;
    int64_t bn = bd[0] * bd[1] * bd[2], on = 1;
    for (int d = 0; d < os->rank; d++)
        on *= os->dims[d];
    const float *X[SM_MAX_DEVICES];
    for (int q = 0; q < nd; q++)
        X[q] = (const float *)x->data + q * bn;
    float *want = malloc(sizeof(float) * (size_t)on);
    for (int pos = 0; pos < nd; pos++) {
        int members[SM_MAX_DEVICES], rank = -1;
        int size = ref_group(p, g->axes, pos, members, &rank);
        ck_assert_int_eq(size, n);
        reference(v, X, &bs, members, n, rank, os, want);
        const float *got = (const float *)out->data + pos * on;
        int64_t f = 0; /* first mismatch (one assert: Check's asserts cost a syscall) */
        while (f < on && memcmp(&got[f], &want[f], sizeof(float)) == 0)
            f++;
        ck_assert_msg(f == on, "device %d element %lld: got %g, expected %g\n%s", pos, (long long)f,
                      f < on ? got[f] : 0.0, f < on ? want[f] : 0.0, text);
    }
    free(want);
    sm_array_free(x);
    sm_array_free(out);
    sm_program_free(p);
}
END_TEST

/* ---- determinism, failures, timeouts ---- */

static sm_program *psum_program(void)
{
    return parse_ok("mesh i=4 j=2\n"
                    "shard_map f(x: f32[64,33] @ P(('i', 'j'))) -> P():\n"
                    "    y = psum(x * 1.37, ('j', 'i'))\n"
                    "    z = psum_scatter(y, 'i', scatter_dimension=0, tiled=True)\n"
                    "    return pmean(all_gather(z, 'i', tiled=True), ('i', 'j'))\n",
                    0);
}

START_TEST(test_deterministic)
{
    sm_program *p = psum_program();
    sm_array *x, *a, *b;
    char err[1024];
    ck_assert_int_eq(sm_array_create(SM_F32, &p->params[0].global, &x, err, sizeof err), SM_OK);
    for (int k = 0; k < 64 * 33; k++)
        ((float *)x->data)[k] = 1.0f / (float)(k + 3) + (float)(k % 7) * 1e-3f;
    ck_assert_msg(sm_exec_local_run(p, &x, &a, NULL, err, sizeof err) == SM_OK, "%s", err);
    ck_assert_msg(sm_exec_local_run(p, &x, &b, NULL, err, sizeof err) == SM_OK, "%s", err);
    ck_assert_int_eq(a->nbytes, b->nbytes);
    ck_assert(memcmp(a->data, b->data, (size_t)a->nbytes) == 0);
    sm_array_free(x);
    sm_array_free(a);
    sm_array_free(b);
    sm_program_free(p);
}
END_TEST

typedef struct {
    const sm_program *p;
    sm_comm_local *comm;
    sm_array_pool *pool; /* its values' memory, or NULL */
    int pos;
    sm_array *in;
    sm_array *out[14];
    sm_err e;
    char err[1024];
} dev_run;

static void *dev_main(void *arg)
{
    dev_run *d = arg;
    d->e = sm_exec_run(d->p, d->pos, &sm_comm_local_ops, d->comm, d->pool, &d->in, d->out, d->err,
                       sizeof d->err);
    return NULL;
}

/* Runs devices [0, nrun) of an 8-device program as threads; device bad (if
 * >= 0) runs program q instead of p, or gets a wrong block if q is NULL;
 * its values come from a pool limited to limit bytes if limit > 0. */
static void run_devices_in(const sm_program *p, const sm_program *q, int bad, int nrun,
                           double timeout, size_t limit, dev_run *d)
{
    sm_comm_local *comm;
    sm_array_pool *pool = NULL;
    char err[256];
    ck_assert_int_eq(sm_comm_local_create(timeout, &comm, err, sizeof err), SM_OK);
    if (limit > 0) {
        ck_assert_int_eq(sm_array_pool_create(&pool, err, sizeof err), SM_OK);
        sm_array_pool_limit_set(pool, limit);
    }
    pthread_t th[8];
    for (int pos = 0; pos < nrun; pos++) {
        d[pos] = (dev_run){.p = pos == bad && q ? q : p,
                           .comm = comm,
                           .pool = pos == bad ? pool : NULL,
                           .pos = pos};
        sm_shape s = p->values[p->params[0].value].shape;
        if (pos == bad && !q)
            s.dims[0]++;
        ck_assert_int_eq(sm_array_create(SM_F32, &s, &d[pos].in, err, sizeof err), SM_OK);
        ck_assert_int_eq(pthread_create(&th[pos], NULL, dev_main, &d[pos]), 0);
    }
    for (int pos = 0; pos < nrun; pos++) {
        pthread_join(th[pos], NULL);
        sm_array_free(d[pos].in);
        for (int r = 0; r < 14; r++)
            sm_array_free(d[pos].out[r]);
    }
    sm_comm_local_free(comm);
    sm_array_pool_free(pool);
}

static void run_devices(const sm_program *p, const sm_program *q, int bad, int nrun, double timeout,
                        dev_run *d)
{
    run_devices_in(p, q, bad, nrun, timeout, 0, d);
}

START_TEST(test_bad_input_releases_peers)
{
    sm_program *p = psum_program();
    dev_run d[8];
    run_devices(p, NULL, 3, 8, 30, d);
    ck_assert_int_eq(d[3].e, SM_EINVAL);
    ck_assert_msg(strstr(d[3].err, "argument 'x'") && strstr(d[3].err, "device 3"), "%s", d[3].err);
    for (int pos = 0; pos < 8; pos++)
        if (pos != 3) {
            ck_assert_int_eq(d[pos].e, SM_ECANCELLED);
            ck_assert_msg(strstr(d[pos].err, "argument 'x'"), "%s", d[pos].err);
            ck_assert_ptr_null(d[pos].out[0]);
        }
    sm_program_free(p);
}
END_TEST

START_TEST(test_kernel_error_releases_peers)
{
    sm_program *p = psum_program();
    /* device 5 fails in an op before its first collective: its memory limit (4 KiB) refuses
     * the 64 KiB of the product's result, as a worker's --memory-limit would */
    sm_program *q = parse_ok("mesh i=4 j=2\n"
                             "shard_map f(x: f32[64,33] @ P(('i', 'j'))) -> P():\n"
                             "    b = matmul(transpose(x), x)\n"
                             "    y = psum(x + b[0], ('j', 'i'))\n"
                             "    return y\n",
                             0);
    dev_run d[8];
    run_devices_in(p, q, 5, 8, 30, 4096, d);
    ck_assert_int_eq(d[5].e, SM_ENOMEM);
    ck_assert_msg(strstr(d[5].err, "t.shmap:3:") && strstr(d[5].err, "'matmul'") &&
                      strstr(d[5].err, "device 5") && strstr(d[5].err, "limit"),
                  "%s", d[5].err);
    for (int pos = 0; pos < 8; pos++)
        if (pos != 5)
            ck_assert_msg(d[pos].e == SM_ECANCELLED && strstr(d[pos].err, "'matmul'"), "%s",
                          d[pos].err);
    sm_program_free(p);
    sm_program_free(q);
}
END_TEST

START_TEST(test_missing_peer_times_out)
{
    sm_program *p = psum_program();
    dev_run d[8];
    run_devices(p, NULL, -1, 7, 0.2, d); /* device 7 never runs */
    for (int pos = 0; pos < 7; pos++) {
        ck_assert_int_eq(d[pos].e, SM_ETIMEOUT);
        ck_assert_msg(strstr(d[pos].err, "timed out"), "%s", d[pos].err);
    }
    sm_program_free(p);
}
END_TEST

START_TEST(test_local_run_reports_op)
{
    /* the devices at i = 3 turn in their loop until the job ends; the others' psum over 'i'
     * times out waiting for them, the error the run reports */
    sm_program *p = parse_ok("mesh i=4 j=2\n"
                             "shard_map f(x: f32[64,33] @ P(('i', 'j'))) -> P():\n"
                             "    c = axis_index('i')\n"
                             "    while c == 3:\n"
                             "        c = c + 0\n"
                             "    y = psum(x, 'i')\n"
                             "    return psum(y, 'j')\n",
                             0);
    sm_array *x, *out = (sm_array *)1;
    char err[1024];
    ck_assert_int_eq(sm_array_create(SM_F32, &p->params[0].global, &x, err, sizeof err), SM_OK);
    const sm_exec_local_opts o = {.timeout_s = 0.3};
    sm_err e = sm_exec_local_run(p, &x, &out, &o, err, sizeof err);
    ck_assert_int_eq(e, SM_ETIMEOUT);
    ck_assert_ptr_null(out);
    ck_assert_msg(strstr(err, "t.shmap:6:") && strstr(err, "'psum'") && strstr(err, "device") &&
                      strstr(err, "timed out"),
                  "%s", err);
    /* (a kernel the device lacked for a dtype the check took, a product of bools, was the
     * failure here: every op of a checked program has its kernels now, test_exec) */
    /* wrong global shape */
    sm_array *bad;
    sm_shape s = {.rank = 2, .dims = {64, 32}};
    ck_assert_int_eq(sm_array_create(SM_F32, &s, &bad, err, sizeof err), SM_OK);
    ck_assert_int_eq(sm_exec_local_run(p, &bad, &out, NULL, err, sizeof err), SM_EINVAL);
    ck_assert_msg(strstr(err, "argument 'x'"), "%s", err);
    sm_array_free(bad);
    sm_array_free(x);
    sm_program_free(p);
}
END_TEST

/* ---- the comm on its own ---- */

START_TEST(test_group_make)
{
    sm_mesh m;
    char err[256];
    const char *names[] = {"i", "j", "k"};
    int64_t sizes[] = {2, 3, 4};
    ck_assert_int_eq(sm_mesh_init(&m, 3, names, sizes, NULL, 24, err, sizeof err), SM_OK);
    int members[24];
    sm_comm_group g;
    const char ax[2][SM_AXIS_NAME_MAX] = {"k", "i"};
    /* position 17 = (1, 1, 1): group over (k, i) holds (i, 1, k), rank k * 2 + i */
    ck_assert_int_eq(sm_comm_group_make(&m, 17, 2, ax, members, &g, err, sizeof err), SM_OK);
    ck_assert_int_eq(g.size, 8);
    ck_assert_int_eq(g.rank, 1 * 2 + 1);
    ck_assert_int_eq(members[0], 0 * 12 + 1 * 4 + 0);
    ck_assert_int_eq(members[1], 1 * 12 + 1 * 4 + 0);
    ck_assert_int_eq(members[7], 1 * 12 + 1 * 4 + 3);
    const char bad[2][SM_AXIS_NAME_MAX] = {"k", "z"};
    ck_assert_int_eq(sm_comm_group_make(&m, 0, 2, bad, members, &g, err, sizeof err), SM_EINVAL);
    ck_assert_msg(strstr(err, "'z'"), "%s", err);
    const char twice[2][SM_AXIS_NAME_MAX] = {"j", "j"};
    ck_assert_int_eq(sm_comm_group_make(&m, 0, 2, twice, members, &g, err, sizeof err), SM_EINVAL);
    ck_assert_int_eq(sm_comm_group_make(&m, 24, 1, ax, members, &g, err, sizeof err), SM_EINVAL);
}
END_TEST

typedef struct {
    sm_comm_local *c;
    int rank;
    int64_t n; /* elements this member claims */
    float in[8], out[64];
    sm_err e;
    char err[512];
} comm_member;

static void *comm_member_main(void *arg)
{
    comm_member *m = arg;
    static const int members[4] = {0, 1, 2, 3};
    sm_comm_group g = {.size = 4, .rank = m->rank, .members = members};
    m->e = sm_comm_local_ops.all_reduce(m->c, &g, 0, SM_F32, SM_KERN_SUM, m->in, m->out, m->n, NULL,
                                        m->err, sizeof m->err);
    return NULL;
}

/* all_reduce and reduce_scatter straight on the comm, with sizes the mesh
 * cases do not reach: fewer elements than members, shares that do not
 * divide, several blocks per share; every dtype kind and op, compared
 * bitwise with the reduction tree of sm_comm.h done here (and, for groups
 * of more than 4 with inputs whose sum shows its order, not equal to a
 * reduction in rank order). */
typedef struct {
    int size;
    int64_t n;
    sm_dtype t;
    sm_kern_reduce_op op;
    int scatter;
} reduce_case;

static const reduce_case reduce_cases[] = {
    {2, 0, SM_F32, SM_KERN_SUM, 0},     {2, 1, SM_F32, SM_KERN_SUM, 0},
    {3, 2, SM_F32, SM_KERN_SUM, 0},     {3, 40007, SM_F32, SM_KERN_SUM, 0},
    {4, 70001, SM_F64, SM_KERN_SUM, 0}, {2, 33333, SM_I32, SM_KERN_SUM, 0},
    {4, 20000, SM_F32, SM_KERN_MAX, 0}, {3, 9999, SM_I64, SM_KERN_MIN, 0},
    {1, 1000, SM_F32, SM_KERN_SUM, 0},  {3, 17000, SM_F32, SM_KERN_SUM, 1},
    {2, 5, SM_F64, SM_KERN_MAX, 1},     {4, 0, SM_F32, SM_KERN_SUM, 1},
    {8, 30011, SM_F32, SM_KERN_SUM, 0}, {6, 4001, SM_F64, SM_KERN_SUM, 1},
    {7, 9001, SM_F32, SM_KERN_SUM, 1},  {5, 20000, SM_F32, SM_KERN_SUM, 0},
};
#define NREDUCE ((int)(sizeof reduce_cases / sizeof reduce_cases[0]))

typedef struct {
    const reduce_case *rc;
    sm_comm_local *c;
    int rank;
    void *in, *out;
    sm_err e;
    char err[512];
} reduce_member;

static void *reduce_member_main(void *arg)
{
    reduce_member *m = arg;
    static const int members[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    sm_comm_group g = {.size = m->rc->size, .rank = m->rank, .members = members};
    const sm_comm *ops = &sm_comm_local_ops;
    if (m->rc->scatter)
        m->e = ops->reduce_scatter(m->c, &g, 0, m->rc->t, m->rc->op, m->in, m->out, m->rc->n,
                                   m->err, sizeof m->err);
    else
        m->e = ops->all_reduce(m->c, &g, 0, m->rc->t, m->rc->op, m->in, m->out, m->rc->n, NULL,
                               m->err, sizeof m->err);
    return NULL;
}

/* Element k of member r's input, as a double: exact in every dtype used
 * for groups of up to 4; past that, of magnitudes from 1e-3 to 1e7, so
 * the order of a sum shows in its last bits. */
static double reduce_input(int size, int r, int64_t k)
{
    double v = (double)((k * 7 + r * 13) % 23) - 11.0 + (r == 1 ? 0.25 : 0.0);
    if (size > 4)
        v = (v + 0.1 * r) * pow(10.0, (double)((k * 5 + r * 3) % 11) - 3.0);
    return v;
}

/* dst = the reduction of members [lo, hi)'s values (src[r] + off bytes, n
 * elements) in the order sm_comm.h promises: [lo, mid) op [mid, hi), mid =
 * lo + the largest power of two below hi - lo. */
static void reduce_tree(const reduce_case *rc, void *const *src, size_t off, int lo, int hi,
                        void *dst)
{
    size_t len = (size_t)rc->n * sm_dtype_size(rc->t);
    char err[128];
    if (hi - lo == 1) {
        memcpy(dst, (char *)src[lo] + off, len);
        return;
    }
    int p = 1;
    while (2 * p < hi - lo)
        p *= 2;
    void *right = malloc(len + 1);
    reduce_tree(rc, src, off, lo, lo + p, dst);
    reduce_tree(rc, src, off, lo + p, hi, right);
    ck_assert_int_eq(sm_kern_accumulate(rc->t, dst, right, rc->n, rc->op, err, sizeof err), SM_OK);
    free(right);
}

static void reduce_store(sm_dtype t, void *p, int64_t k, double v)
{
    if (t == SM_F32)
        ((float *)p)[k] = (float)v;
    else if (t == SM_F64)
        ((double *)p)[k] = v;
    else if (t == SM_I32)
        ((int32_t *)p)[k] = (int32_t)v;
    else
        ((int64_t *)p)[k] = (int64_t)v;
}

START_TEST(test_comm_reduce_sizes)
{
    const reduce_case *rc = &reduce_cases[_i];
    size_t el = sm_dtype_size(rc->t);
    int64_t nin = rc->scatter ? rc->n * rc->size : rc->n;
    sm_comm_local *c;
    char err[256];
    ck_assert_int_eq(sm_comm_local_create(20, &c, err, sizeof err), SM_OK);
    reduce_member m[8];
    pthread_t th[8];
    void *ins[8];
    for (int r = 0; r < rc->size; r++) {
        m[r] = (reduce_member){.rc = rc, .c = c, .rank = r};
        m[r].in = malloc((size_t)nin * el + 1);
        m[r].out = malloc((size_t)rc->n * el + 1);
        for (int64_t k = 0; k < nin; k++)
            reduce_store(rc->t, m[r].in, k,
                         reduce_input(rc->size, r, k) * (rc->t == SM_I32 ? 1 : 1.5));
        ins[r] = m[r].in;
        memset(m[r].out, 0x5a, (size_t)rc->n * el); /* every element must be written */
        ck_assert_int_eq(pthread_create(&th[r], NULL, reduce_member_main, &m[r]), 0);
    }
    for (int r = 0; r < rc->size; r++)
        pthread_join(th[r], NULL);
    void *want = malloc((size_t)rc->n * el + 1), *flat = malloc((size_t)rc->n * el + 1);
    for (int r = 0; r < rc->size; r++) {
        ck_assert_msg(m[r].e == SM_OK, "case %d rank %d: %s", _i, r, m[r].err);
        int64_t off = rc->scatter ? r * rc->n : 0;
        if (rc->n) /* the reference: the tree over ranks */
            reduce_tree(rc, ins, (size_t)off * el, 0, rc->size, want);
        ck_assert_msg(memcmp(m[r].out, want, (size_t)rc->n * el) == 0, "case %d rank %d differs",
                      _i, r);
        if (rc->size > 4 && rc->n) { /* where the order shows, rank order gives other bits */
            memcpy(flat, (char *)m[0].in + (size_t)off * el, (size_t)rc->n * el);
            for (int q = 1; q < rc->size; q++)
                ck_assert_int_eq(sm_kern_accumulate(rc->t, flat, (char *)m[q].in + (size_t)off * el,
                                                    rc->n, rc->op, err, sizeof err),
                                 SM_OK);
            ck_assert_msg(memcmp(flat, want, (size_t)rc->n * el) != 0,
                          "case %d: the inputs do not show the order of the sum", _i);
        }
    }
    for (int r = 0; r < rc->size; r++) {
        free(m[r].in);
        free(m[r].out);
    }
    free(want);
    free(flat);
    sm_comm_local_free(c);
}
END_TEST

/* The units of a reduction (sm_comm_tree_units): the largest tree nodes
 * whose ranks share an owner, for layouts of 8 and 6 ranks; a leaf set
 * that is no partition of the tree is refused (SM_EINVAL). */
typedef struct {
    int size;
    int owner[8];
    const char *want; /* "lo-hi lo-hi ..." */
} units_case;

static const units_case units_cases[] = {
    {8, {0, 0, 0, 0, 0, 0, 0, 0}, "0-8"},
    {8, {0, 0, 0, 0, 1, 1, 1, 1}, "0-4 4-8"},
    {8, {0, 0, 1, 1, 2, 2, 3, 3}, "0-2 2-4 4-6 6-8"},
    {8, {0, 1, 0, 1, 0, 1, 0, 1}, "0-1 1-2 2-3 3-4 4-5 5-6 6-7 7-8"},
    {8, {0, 0, 0, 1, 1, 1, 1, 1}, "0-2 2-3 3-4 4-8"},
    {6, {0, 0, 0, 1, 1, 1}, "0-2 2-3 3-4 4-6"},
    {6, {0, 0, 0, 0, 1, 1}, "0-4 4-6"},
    {1, {5}, "0-1"},
};

START_TEST(test_comm_tree_units)
{
    for (size_t i = 0; i < sizeof units_cases / sizeof units_cases[0]; i++) {
        const units_case *uc = &units_cases[i];
        sm_comm_span sp[8];
        int n = sm_comm_tree_units(0, uc->size, uc->owner, sp);
        char got[128] = "";
        for (int k = 0; k < n; k++)
            snprintf(got + strlen(got), sizeof got - strlen(got), "%s%d-%d", k ? " " : "", sp[k].lo,
                     sp[k].hi);
        ck_assert_msg(!strcmp(got, uc->want), "case %zu: %s, want %s", i, got, uc->want);
    }
    float a[4] = {1, 2, 3, 4}, out[1];
    char err[256];
    const sm_comm_leaf bad[2] = {{0, 1, &a[0]}, {1, 3, &a[1]}}; /* [1, 3) is no node of 3 ranks */
    ck_assert_int_eq(
        sm_comm_tree_reduce(SM_F32, SM_KERN_SUM, 0, 3, bad, 2, 1, out, err, sizeof err), SM_EINVAL);
    ck_assert_msg(strstr(err, "tree"), "%s", err);
    const sm_comm_leaf good[3] = {{0, 2, &a[0]}, {2, 3, &a[2]}, {3, 4, &a[3]}};
    ck_assert_int_eq(
        sm_comm_tree_reduce(SM_F32, SM_KERN_SUM, 0, 4, good, 3, 1, out, err, sizeof err), SM_OK);
    ck_assert(out[0] == 1 + 3 + 4); /* leaf [0, 2) holds 1: the reduction of its ranks */
}
END_TEST

/* Members that disagree on sizes fail (SM_EINVAL) instead of reading past a
 * peer's buffer; an aborted context fails every later collective. */
START_TEST(test_comm_mismatch_and_abort)
{
    sm_comm_local *c;
    char err[256];
    ck_assert_int_eq(sm_comm_local_create(5, &c, err, sizeof err), SM_OK);
    comm_member m[4];
    pthread_t th[4];
    for (int r = 0; r < 4; r++) {
        m[r] = (comm_member){.c = c, .rank = r, .n = r == 2 ? 8 : 4};
        ck_assert_int_eq(pthread_create(&th[r], NULL, comm_member_main, &m[r]), 0);
    }
    int einval = 0, cancelled = 0;
    for (int r = 0; r < 4; r++) {
        pthread_join(th[r], NULL);
        einval += m[r].e == SM_EINVAL;
        cancelled += m[r].e == SM_ECANCELLED;
    }
    ck_assert_int_eq(einval, 1);
    ck_assert_int_eq(einval + cancelled, 4);
    sm_comm_local_free(c);

    ck_assert_int_eq(sm_comm_local_create(5, &c, err, sizeof err), SM_OK);
    sm_comm_local_ops.abort(c, "device 9 failed");
    sm_comm_local_ops.abort(c, "ignored");
    m[0] = (comm_member){.c = c, .rank = 0, .n = 4};
    comm_member_main(&m[0]);
    ck_assert_int_eq(m[0].e, SM_ECANCELLED);
    ck_assert_msg(strstr(m[0].err, "device 9 failed"), "%s", m[0].err);
    sm_comm_local_free(c);
}
END_TEST

/* Values that hold the same bytes share them instead of copying, among
 * devices run in one process: a ppermute's output is its source's input,
 * every device's all_gather or psum output is one (not a pmean's, divided
 * after the sum), a reshape, an astype to its own dtype, a broadcast_to
 * adding size-1 dimensions, a transpose moving only size-1 dimensions and
 * a slice or dynamic_slice of whole
 * rows at a 64-byte boundary are their operand's bytes; a slice of
 * columns, or of rows at another boundary, is a copy of its own. Every
 * result still has the values of the reference. */
START_TEST(test_moves_share_bytes)
{
    sm_program *p = parse_ok(
        "mesh x=4\n"
        "shard_map f(v: f32[32,16] @ P('x')) -> (P('x'), P(), P('x'), P('x'), P('x'), P('x'), "
        "P(), P(), P('x'), P('x'), P('x'), P('x'), P(None, 'x'), P('x')):\n"
        "    z = ppermute(v, 'x', perm=[(0, 1), (1, 2), (2, 3), (3, 0)])\n"
        "    g = all_gather(v, 'x', tiled=True)\n"
        "    s = slice(g, (4, 0), (8, 16))\n"
        "    r = reshape(v, (16, 8))\n"
        "    c = slice(g, (0, 0), (8, 8))\n"
        "    o = slice(r, (1, 0), (3, 8))\n"
        "    return z, g, s, r, c, o, psum(v, 'x'), pmean(v, 'x'), astype(v, 'f32'), "
        "broadcast_to(r, (1, 16, 8)), dynamic_slice(g, (axis_index('x') * 8 + 20, 0), (8, "
        "16)), dynamic_slice(g, (0, axis_index('x')), (8, 4)), "
        "transpose(reshape(v, (1, 128)), (1, 0)), transpose(v, (1, 0))\n",
        0);
    sm_comm_local *comm;
    char err[256];
    ck_assert_int_eq(sm_comm_local_create(10, &comm, err, sizeof err), SM_OK);
    dev_run d[4];
    pthread_t th[4];
    for (int pos = 0; pos < 4; pos++) {
        d[pos] = (dev_run){.p = p, .comm = comm, .pos = pos};
        sm_shape bs = {.rank = 2, .dims = {8, 16}};
        ck_assert_int_eq(sm_array_create(SM_F32, &bs, &d[pos].in, err, sizeof err), SM_OK);
        for (int k = 0; k < 8 * 16; k++)
            ((float *)d[pos].in->data)[k] = (float)(pos * 1000 + k);
    }
    for (int pos = 0; pos < 4; pos++)
        ck_assert_int_eq(pthread_create(&th[pos], NULL, dev_main, &d[pos]), 0);
    for (int pos = 0; pos < 4; pos++)
        pthread_join(th[pos], NULL);
    for (int pos = 0; pos < 4; pos++) {
        ck_assert_msg(d[pos].e == SM_OK, "device %d: %s", pos, d[pos].err);
        sm_array *const *o = d[pos].out;
        const sm_array *src = d[(pos + 3) % 4].in;
        /* ppermute: the source's input itself */
        ck_assert_ptr_eq(o[0]->block, src->block);
        ck_assert_ptr_eq(o[0]->data, src->data);
        /* all_gather: one output for the four */
        ck_assert_ptr_eq(o[1]->block, d[0].out[1]->block);
        for (int q = 0; q < 4; q++)
            ck_assert(memcmp((char *)o[1]->data + q * 512, d[q].in->data, 512) == 0);
        /* rows 4..8 of the gathered: 256 bytes in, shared */
        ck_assert_ptr_eq(o[2]->block, o[1]->block);
        ck_assert_ptr_eq(o[2]->data, (char *)o[1]->data + 256);
        /* a reshape: the input's bytes */
        ck_assert_ptr_eq(o[3]->block, d[pos].in->block);
        /* columns; rows from byte 32 of the reshape: copies */
        ck_assert_ptr_ne(o[4]->block, o[1]->block);
        for (int i = 0; i < 8; i++)
            ck_assert(memcmp((float *)o[4]->data + i * 8, (float *)o[1]->data + i * 16, 32) == 0);
        ck_assert_ptr_ne(o[5]->block, o[3]->block);
        ck_assert(memcmp(o[5]->data, (char *)d[pos].in->data + 32, 64) == 0);
        /* astype to its own dtype, broadcast_to adding a size-1 dimension */
        ck_assert_ptr_eq(o[8]->block, d[pos].in->block);
        ck_assert_ptr_eq(o[9]->block, d[pos].in->block);
        /* dynamic_slice of whole rows (the start clamped to row 24): shared;
         * of columns: a copy */
        ck_assert_ptr_eq(o[10]->block, o[1]->block);
        ck_assert_ptr_eq(o[10]->data, (char *)o[1]->data + (pos ? 24 * 64 : 20 * 64));
        ck_assert_ptr_ne(o[11]->block, o[1]->block);
        for (int i = 0; i < 8; i++)
            ck_assert(
                !memcmp((float *)o[11]->data + 4 * i, (float *)o[1]->data + 16 * i + pos, 16));
        /* a transpose moving a size-1 dimension only: shared; a real one not */
        ck_assert_ptr_eq(o[12]->block, d[pos].in->block);
        ck_assert_ptr_ne(o[13]->block, d[pos].in->block);
        for (int k = 0; k < 8 * 16; k++)
            ck_assert(((float *)o[13]->data)[k] ==
                      ((float *)d[pos].in->data)[(k % 8) * 16 + k / 8]);
        /* psum: one output for the four; pmean divides each after: its own */
        ck_assert_ptr_eq(o[6]->block, d[0].out[6]->block);
        ck_assert_int_eq(o[7]->block == d[0].out[7]->block, pos == 0);
        for (int k = 0; k < 8 * 16; k++) {
            float sum = (float)(6000 + 4 * k);
            ck_assert(((float *)o[6]->data)[k] == sum && ((float *)o[7]->data)[k] == sum / 4);
        }
    }
    /* freed in any order: the shared bytes live until the last holder */
    for (int pos = 0; pos < 4; pos++)
        sm_array_free(d[pos].in);
    for (int pos = 0; pos < 4; pos++)
        for (int r = 0; r < 14; r++) {
            if (r == 1) /* device 1's block, whose input is freed */
                for (int k = 0; k < 8 * 16; k++)
                    ck_assert(((float *)d[pos].out[r]->data)[128 + k] == (float)(1000 + k));
            sm_array_free(d[pos].out[r]);
        }
    sm_comm_local_free(comm);
    sm_program_free(p);
}
END_TEST

int main(void)
{
    Suite *s = SUITE_CASE(suite_create("exec_coll"), "collectives", 120, NULL,
                          {test_collective, NGROUPS * NVARIANTS});
    SUITE_CASE(s, "failures", 60, NULL, {test_deterministic}, {test_bad_input_releases_peers},
               {test_kernel_error_releases_peers}, {test_missing_peer_times_out},
               {test_local_run_reports_op}, {test_group_make}, {test_comm_mismatch_and_abort},
               {test_comm_reduce_sizes, NREDUCE}, {test_comm_tree_units});
    SUITE_CASE(s, "sharing", 60, NULL, {test_moves_share_bytes});
    return suite_main(s);
}
