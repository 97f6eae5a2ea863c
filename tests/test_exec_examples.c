/* Check suite for common/exec: every examples/NAME.shmap is parsed, verified
 * (honouring its `# check_vma: false` directive), run with the local runner
 * on the inputs its .inputs file generates, and compared exactly with its
 * .expected value (all examples use integer-valued data, so the results are
 * exact whatever the summation order). */
#include <check.h>
#include <dirent.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sm_example.h"
#include "sm_exec.h"
#include "sm_exec_local.h"
#include "sm_lower.h"
#include "suite_main.h"

/* The seed examples that must exist (docs/semantics.md and the scaling book). */
static const char *const required[] = {
    "matmul_basic",
    "matmul_reduce_scatter",
    "f1",
    "f2",
    "f3",
    "f4",
    "f5",
    "collective_matmul_allgather",
    "collective_matmul_contracting",
    "slice_and_average",
    "shard_mean",
    "shard_roll",
};

static void examples_dir(char *buf, size_t len)
{
    const char *env = getenv("SM_EXAMPLES_DIR");
    if (env) {
        snprintf(buf, len, "%s", env);
        return;
    }
    char src[1024];
    snprintf(src, sizeof src, "%s", __FILE__);
    snprintf(buf, len, "%s/../examples", dirname(src));
}

static char *read_sidecar(const char *dir, const char *name, const char *ext)
{
    char path[2048], err[512];
    char *text = NULL;
    snprintf(path, sizeof path, "%s/%s%s", dir, name, ext);
    sm_err e = sm_example_read_file(path, &text, err, sizeof err);
    ck_assert_msg(e == SM_OK, "%s", err);
    return text;
}

/* Runs one example and compares with its expected values. */
static void run_example(const char *name)
{
    char dir[1024], err[2048] = "", path[2048];
    examples_dir(dir, sizeof dir);
    char *text = read_sidecar(dir, name, ".shmap");
    char *itext = read_sidecar(dir, name, ".inputs");
    char *etext = read_sidecar(dir, name, ".expected");
    snprintf(path, sizeof path, "%s.shmap", name);
    sm_program *p = NULL;
    sm_err e = sm_program_parse(text, path, &p, err, sizeof err);
    ck_assert_msg(e == SM_OK, "%s: parse: %s", name, err);
    e = sm_program_verify(p, sm_exec_text_check_vma(text), err, sizeof err);
    ck_assert_msg(e == SM_OK, "%s: verify: %s", name, err);
    if (p->kind == SM_PROG_JIT) { /* a global-view program runs lowered */
        sm_program *l = NULL;
        e = sm_lower(p, NULL, &l, err, sizeof err);
        ck_assert_msg(e == SM_OK, "%s: lower: %s", name, err);
        sm_program_free(p);
        p = l;
    }

    sm_array *in[16] = {0}, *out[8] = {0}, *want[8] = {0};
    ck_assert_int_le(p->nparams, 16);
    ck_assert_int_le(p->nreturns, 8);
    e = sm_example_inputs(itext, p, in, err, sizeof err);
    ck_assert_msg(e == SM_OK, "%s.inputs: %s", name, err);
    e = sm_example_expected(etext, p, in, want, err, sizeof err);
    ck_assert_msg(e == SM_OK, "%s.expected: %s", name, err);
    e = sm_exec_local_run(p, in, out, NULL, err, sizeof err);
    ck_assert_msg(e == SM_OK, "%s: run: %s", name, err);
    for (int r = 0; r < p->nreturns; r++) {
        char a[64], b[64];
        ck_assert_msg(out[r]->dtype == want[r]->dtype &&
                          sm_shape_equal(&out[r]->shape, &want[r]->shape),
                      "%s output %d: got %s%s, expected %s%s", name, r,
                      sm_dtype_name(out[r]->dtype), sm_shape_format(&out[r]->shape, a, sizeof a),
                      sm_dtype_name(want[r]->dtype), sm_shape_format(&want[r]->shape, b, sizeof b));
        ck_assert_msg(memcmp(out[r]->data, want[r]->data, (size_t)out[r]->nbytes) == 0,
                      "%s output %d differs from its expected value", name, r);
    }
    for (int i = 0; i < p->nparams; i++)
        sm_array_free(in[i]);
    for (int r = 0; r < p->nreturns; r++) {
        sm_array_free(out[r]);
        sm_array_free(want[r]);
    }
    sm_program_free(p);
    free(text);
    free(itext);
    free(etext);
}

START_TEST(test_required_example)
{
    run_example(required[_i]);
}
END_TEST

/* Every .shmap in examples/ has sidecars and passes (not only the required). */
START_TEST(test_all_examples)
{
    char dir[1024];
    examples_dir(dir, sizeof dir);
    DIR *d = opendir(dir);
    ck_assert_msg(d != NULL, "cannot open %s", dir);
    int n = 0;
    for (struct dirent *de; (de = readdir(d));) {
        size_t len = strlen(de->d_name);
        if (len < 7 || strcmp(de->d_name + len - 6, ".shmap"))
            continue;
        char name[256];
        snprintf(name, sizeof name, "%.*s", (int)(len - 6), de->d_name);
        run_example(name);
        n++;
    }
    closedir(d);
    ck_assert_int_ge(n, (int)(sizeof required / sizeof required[0]));
}
END_TEST

/* The numbers docs/semantics.md quotes, checked literally. */
START_TEST(test_slice_and_average_numbers)
{
    char err[1024] = "";
    sm_program *p = NULL;
    ck_assert_int_eq(sm_program_parse("mesh x=2 y=4\n"
                                      "shard_map s(x: i32[512] @ P(('x', 'y'))) -> P():\n"
                                      "    return jax.lax.pmean(x[:4], axis_name=('x', 'y'))\n",
                                      NULL, &p, err, sizeof err),
                     SM_OK);
    ck_assert_int_eq(sm_program_verify(p, 1, err, sizeof err), SM_OK);
    sm_array *x, *out;
    sm_shape s = {.rank = 1, .dims = {512}};
    ck_assert_int_eq(sm_array_create(SM_I32, &s, &x, err, sizeof err), SM_OK);
    for (int i = 0; i < 512; i++)
        ((int32_t *)x->data)[i] = i;
    ck_assert_msg(sm_exec_local_run(p, &x, &out, NULL, err, sizeof err) == SM_OK, "%s", err);
    ck_assert_int_eq(out->dtype, SM_F32);
    ck_assert_int_eq(out->shape.rank, 1);
    ck_assert_int_eq(out->shape.dims[0], 4);
    for (int i = 0; i < 4; i++)
        ck_assert_float_eq(((float *)out->data)[i], 224.0f + (float)i);
    sm_array_free(x);
    sm_array_free(out);
    sm_program_free(p);
}
END_TEST

/* The sidecar language's errors: code and line. */
typedef struct {
    const char *inputs, *expected;
    sm_err code;
    const char *want; /* substring of the message */
} sidecar_error;

static const sidecar_error sidecar_errors[] = {
    {"a = arange(128, f32\n", NULL, SM_EFORMAT, "line 1"},
    {"a = reshape(arange(128, f32), 8, 16)\n", NULL, SM_EFORMAT, "'b' has no line"},
    {"# c\na = arange(128, f32)\n", NULL, SM_EINVAL, "line 2: argument 'a' is f32[128]"},
    {"a = nope(3)\n", NULL, SM_EFORMAT, "unknown function 'nope'"},
    {"a = reshape(arange(128, f32), 8, 16)\nc = arange(4, f32)\n", NULL, SM_EFORMAT,
     "'c' is not a parameter"},
    {NULL, "matmul(a, b)\nmatmul(a, b)\n", SM_EFORMAT, "more expected values"},
    {NULL, "\n", SM_EFORMAT, "fewer expected values"},
    {NULL, "values(f32, 1, 2)\n", SM_EINVAL, "output 0 is f32[2], expected f32[8,32]"},
    {NULL, "matmul(a, q)\n", SM_EFORMAT, "unknown name 'q'"},
    {NULL, "reshape(a, 3, 3)\n", SM_EFORMAT, "element count"},
};

START_TEST(test_sidecar_errors)
{
    const sidecar_error *c = &sidecar_errors[_i];
    char err[1024] = "";
    sm_program *p = NULL;
    ck_assert_int_eq(sm_program_parse("mesh i=4 j=2\n"
                                      "shard_map m(a: f32[8,16] @ P('i', 'j'), b: f32[16,32] @ "
                                      "P('j', None)) -> P('i', None):\n"
                                      "    return psum(dot(a, b), 'j')\n",
                                      NULL, &p, err, sizeof err),
                     SM_OK);
    ck_assert_int_eq(sm_program_verify(p, 1, err, sizeof err), SM_OK);
    sm_array *in[2] = {0}, *want[1] = {(sm_array *)1};
    const char *good = "a = reshape(arange(128, f32), 8, 16)\nb = reshape(random(512, f32, 1), 16, "
                       "32)\n";
    sm_err e = sm_example_inputs(c->inputs ? c->inputs : good, p, in, err, sizeof err);
    if (c->inputs) {
        ck_assert_int_eq(e, c->code);
        ck_assert_ptr_null(in[0]);
    } else {
        ck_assert_msg(e == SM_OK, "%s", err);
        e = sm_example_expected(c->expected, p, in, want, err, sizeof err);
        ck_assert_int_eq(e, c->code);
        ck_assert_ptr_null(want[0]);
    }
    ck_assert_msg(strstr(err, c->want), "message '%s' lacks '%s'", err, c->want);
    sm_array_free(in[0]);
    sm_array_free(in[1]);
    sm_program_free(p);
}
END_TEST

/* The one reading of the `# check_vma` directive (sm_exec_text_check_vma),
 * which shmapctl run, shmapctl check and this suite all use: a leading
 * comment line whose text is `check_vma`, then `:` or `=`, then `false`
 * (any case) or `0`. */
static const struct {
    const char *text;
    int check;
} directives[] = {
    {"# check_vma: false\nx\n", 0},
    {"# a note\n#check_vma=False\n", 0},
    {"#  check_vma : FALSE\n", 0},
    {"# check_vma: 0\n", 0},
    {"# check_vma: true\n", 1},
    {"# see check_vma: false below\n", 1}, /* not the directive, a mention */
    {"\n# check_vma: false\n", 1},         /* not among the leading comment lines */
    {"mesh i=2\n# check_vma: false\n", 1},
    {"", 1},
};

START_TEST(test_check_vma_directive)
{
    ck_assert_msg(sm_exec_text_check_vma(directives[_i].text) == directives[_i].check, "%s",
                  directives[_i].text);
}
END_TEST

int main(void)
{
    return suite_main(
        SUITE_CASE(suite_create("exec_examples"), "examples", 60, NULL,
                   {test_required_example, (int)(sizeof required / sizeof required[0])},
                   {test_all_examples}, {test_slice_and_average_numbers},
                   {test_sidecar_errors, (int)(sizeof sidecar_errors / sizeof sidecar_errors[0])},
                   {test_check_vma_directive, (int)(sizeof directives / sizeof directives[0])}));
}
