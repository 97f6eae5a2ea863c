/* Check suite for the offline shmapctl commands (sharding, plan-load),
 * driving the real binary named by $SHMAPCTL: --json output parsed with
 * jansson and checked value by value, the text output's type string and
 * diagram, --help, and the exit codes and one-sentence stderr of errors. */
#include <check.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "suite_main.h"

#define N(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* Runs shmapctl with args (NULL-terminated, without argv[0]), its output
 * captured; asserts it could be started. */
static harness_run run(const char *const *args)
{
    harness_run r;
    ck_assert_msg(harness_shmapctl(NULL, &r, args) == 0, "SHMAPCTL is not set or did not start");
    return r;
}

static json_t *run_json(const char *const *args)
{
    harness_run r = run(args);
    ck_assert_msg(r.code == 0, "exit %d, stderr: %s", r.code, r.err);
    ck_assert_str_eq(r.err, "");
    json_error_t je;
    json_t *j = json_loads(r.out, 0, &je);
    ck_assert_msg(j != NULL, "bad JSON (%s): %s", je.text, r.out);
    harness_run_free(&r);
    return j;
}

/* Value of a JSON path like "devices/3/index/1/0" (numbers index arrays). */
static json_t *at(json_t *j, const char *path)
{
    char buf[256];
    snprintf(buf, sizeof buf, "%s", path);
    char *save = NULL;
    for (char *t = strtok_r(buf, "/", &save); t && j; t = strtok_r(NULL, "/", &save))
        j = json_is_array(j) ? json_array_get(j, (size_t)atoi(t)) : json_object_get(j, t);
    ck_assert_msg(j != NULL, "no %s", path);
    return j;
}

/* Compares a JSON value with the compact text of an expected value. */
static void json_eq(json_t *j, const char *path, const char *want)
{
    json_error_t je;
    json_t *w = json_loads(want, JSON_DECODE_ANY, &je);
    ck_assert_msg(w != NULL, "bad expected JSON %s", want);
    json_t *v = at(j, path);
    char *got = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    ck_assert_msg(json_equal(v, w), "%s is %s, want %s", path, got, want);
    free(got);
    json_decref(w);
}

/* ---- sharding --json --------------------------------------------------- */

typedef struct {
    const char *args[16];
    const char *checks[12][2]; /* path, expected JSON */
} json_case;

static const json_case sharding_cases[] = {
    {{"sharding", "--mesh", "i=4,j=2", "--spec", "P('i','j')", "--shape", "8,16", "--json"},
     {{"type", "\"f32[8@i,16@j]\""},
      {"shard_shape", "[2, 8]"},
      {"fully_replicated", "false"},
      {"num_distinct", "8"},
      {"devices/3", "{\"device\": 3, \"coords\": [1, 1], \"index\": [[2, 4], [8, 16]], "
                    "\"replica_id\": 0}"},
      {"mesh", "{\"axes\": [\"i\", \"j\"], \"sizes\": [4, 2], \"axis_types\": [\"Explicit\", "
               "\"Explicit\"], \"devices\": [0,1,2,3,4,5,6,7]}"},
      {"spec", "\"P('i', 'j')\""}}},
    {{"sharding", "--mesh", "i=4,j=2,axis_types=(Auto,Explicit)", "--spec", "P('i')", "--shape",
      "8,16", "--json"},
     /* an Auto axis is not in the type (jax.typeof), though it shards the array */
     {{"type", "\"f32[8,16]\""},
      {"shard_shape", "[2, 16]"},
      {"mesh/axis_types", "[\"Auto\", \"Explicit\"]"}}},
    {{"sharding", "--mesh", "i=4,j=2", "--spec", "P('i')", "--shape", "8,16", "--json"},
     {{"type", "\"f32[8@i,16]\""},
      {"shard_shape", "[2, 16]"},
      {"devices/1", "{\"device\": 1, \"coords\": [0, 1], \"index\": [[0, 2], [0, 16]], "
                    "\"replica_id\": 1}"},
      {"devices/6/index", "[[6, 8], [0, 16]]"}}},
    /* replicas spread across processes (data loading guide) */
    {{"sharding", "--mesh", "r=4,s=2", "--devices", "0,4,1,5,2,6,3,7", "--spec", "P('s')",
      "--shape", "64,128", "--json"},
     {{"type", "\"f32[64@s,128]\""},
      {"shard_shape", "[32, 128]"},
      {"devices/1", "{\"device\": 4, \"coords\": [0, 1], \"index\": [[32, 64], [0, 128]], "
                    "\"replica_id\": 0}"},
      {"devices/2", "{\"device\": 1, \"coords\": [1, 0], \"index\": [[0, 32], [0, 128]], "
                    "\"replica_id\": 1}"},
      {"mesh/devices", "[0, 4, 1, 5, 2, 6, 3, 7]"}}},
    {{"sharding", "-m", "x=4,y=2", "-s", "P()", "--shape", "64,128", "--dtype", "i32", "--json"},
     {{"type", "\"i32[64,128]\""},
      {"fully_replicated", "true"},
      {"num_distinct", "1"},
      {"devices/7/replica_id", "7"},
      {"devices/7/index", "[[0, 64], [0, 128]]"}}},
    {{"sharding", "--mesh", "x=2,y=4", "--spec", "P(('x','y'),)", "--shape", "512", "--json"},
     {{"type", "\"f32[512@(x,y)]\""},
      {"shard_shape", "[64]"},
      {"devices/5/index", "[[320, 384]]"},
      {"devices/5/coords", "[1, 1]"}}},
    {{"sharding", "--mesh", "x=2,y=4", "--spec", "P(('y','x'),)", "--shape", "512", "--json"},
     {{"type", "\"f32[512@(y,x)]\""}, {"devices/5/index", "[[192, 256]]"}}},
    {{"sharding", "--mesh", "x=2", "--spec", "P()", "--shape", "", "--json"},
     {{"type", "\"f32[]\""}, {"shard_shape", "[]"}, {"devices/1/index", "[]"}}},
};

START_TEST(test_sharding_json)
{
    const json_case *c = &sharding_cases[_i];
    json_t *j = run_json(c->args);
    for (int k = 0; k < 12 && c->checks[k][0]; k++)
        json_eq(j, c->checks[k][0], c->checks[k][1]);
    /* every device appears once, in mesh order */
    ck_assert(json_is_array(at(j, "devices")));
    ck_assert_int_eq(json_array_size(at(j, "devices")), json_array_size(at(j, "mesh/devices")));
    for (size_t k = 0; k < json_array_size(at(j, "devices")); k++)
        ck_assert_int_eq(json_integer_value(json_object_get(
                             json_array_get(json_object_get(j, "devices"), k), "device")),
                         json_integer_value(json_array_get(at(j, "mesh/devices"), k)));
    json_decref(j);
}
END_TEST

/* ---- plan-load --json -------------------------------------------------- */

static const json_case plan_cases[] = {
    /* guide, 2-D sharding: each process loads a (16,128) row block */
    {{"plan-load", "--mesh", "x=4,y=2", "--spec", "P('x','y')", "--process-devices",
      "0,1;2,3;4,5;6,7", "--local-shape", "16,128", "--json"},
     {{"global_shape", "[64, 128]"},
      {"global_shape_inferred", "true"},
      {"processes/1/process", "1"},
      {"processes/1/local_shape", "[16, 128]"},
      {"processes/1/devices/1", "{\"device\": 3, \"global_index\": [[16, 32], [64, 128]], "
                                "\"local_slice\": [[0, 16], [64, 128]]}"}}},
    /* guide, 1-D columns */
    {{"plan-load", "--mesh", "x=8", "--spec", "P(None,'x')", "--process-devices", "0,1;2,3;4,5;6,7",
      "--local-shape", "64,32", "--json"},
     {{"global_shape", "[64, 128]"},
      {"processes/3/devices/0", "{\"device\": 6, \"global_index\": [[0, 64], [96, 112]], "
                                "\"local_slice\": [[0, 64], [0, 16]]}"}}},
    /* guide, replicas across processes: processes 2 and 3 load rows 32..64 */
    {{"plan-load", "--mesh", "r=4,s=2", "--devices", "0,4,1,5,2,6,3,7", "--spec", "P('s')",
      "--process-devices", "0,1;2,3;4,5;6,7", "--local-shape", "32,128", "--json"},
     {{"global_shape", "[64, 128]"},
      {"processes/2/devices/0", "{\"device\": 4, \"global_index\": [[32, 64], [0, 128]], "
                                "\"local_slice\": [[0, 32], [0, 128]]}"},
      {"processes/1/devices/1/global_index", "[[0, 32], [0, 128]]"}}},
    /* default device order from the processes */
    {{"plan-load", "--mesh", "x=4,y=2", "--spec", "P('x')", "--process-devices", "1,0;3,2;5,4;7,6",
      "--local-shape", "16,128", "--json"},
     {{"mesh/devices", "[0, 1, 2, 3, 4, 5, 6, 7]"},
      {"global_shape", "[64, 128]"},
      {"processes/0/devices", "[{\"device\": 0, \"global_index\": [[0, 16], [0, 128]], "
                              "\"local_slice\": [[0, 16], [0, 128]]}, {\"device\": 1, "
                              "\"global_index\": [[0, 16], [0, 128]], \"local_slice\": [[0, 16], "
                              "[0, 128]]}]"}}},
    /* the reference's non-uniform example with an explicit global shape */
    {{"plan-load", "--mesh", "x=2,y=4", "--devices", "0,1,2,3,6,4,5,7", "--spec", "P('x','y')",
      "--process-devices", "0,1;2,3;4,5;6,7", "--local-shape", "2,4", "--global-shape", "4,4",
      "--json"},
     {{"global_shape", "[4, 4]"},
      {"global_shape_inferred", "false"},
      {"processes/3/devices/1", "{\"device\": 7, \"global_index\": [[2, 4], [3, 4]], "
                                "\"local_slice\": [[0, 2], [3, 4]]}"}}},
    /* one process */
    {{"plan-load", "--mesh", "i=2", "--spec", "P('i')", "--process-devices", "0,1", "--local-shape",
      "8", "--json"},
     {{"global_shape", "[8]"},
      {"processes/0/devices/1", "{\"device\": 1, \"global_index\": [[4, 8]], \"local_slice\": "
                                "[[4, 8]]}"}}},
};

START_TEST(test_plan_json)
{
    const json_case *c = &plan_cases[_i];
    json_t *j = run_json(c->args);
    for (int k = 0; k < 12 && c->checks[k][0]; k++)
        json_eq(j, c->checks[k][0], c->checks[k][1]);
    json_decref(j);
}
END_TEST

/* ---- text output ------------------------------------------------------- */

START_TEST(test_text_output)
{
    const char *args[] = {"sharding",   "--mesh",  "i=4,j=2", "--spec",
                          "P('i','j')", "--shape", "8,16",    NULL};
    harness_run r = run(args);
    ck_assert_int_eq(r.code, 0);
    HARNESS_HAS(r.out, "f32[8@i,16@j]", "[2,8]");
    ck_assert_ptr_nonnull(strstr(r.out, "+------------------------+------------------------+\n"
                                        "|                        |                        |\n"
                                        "|         dev 0          |         dev 1          |\n"));
    ck_assert_ptr_nonnull(strstr(r.out, "[6:8, 8:16]"));
    harness_run_free(&r);

    const char *args2[] = {"sharding", "--mesh", "i=4,j=2", "--spec", "P('i')",
                           "--shape",  "8,16",   "--dtype", "bf16",   NULL};
    r = run(args2);
    ck_assert_int_eq(r.code, 0);
    HARNESS_HAS(r.out, "bf16[8@i,16]", "dev 6,7");
    harness_run_free(&r);

    const char *args3[] = {
        "plan-load",         "--mesh",          "x=4,y=2",       "--spec", "P('x','y')",
        "--process-devices", "0,1;2,3;4,5;6,7", "--local-shape", "16,128", NULL};
    r = run(args3);
    ck_assert_int_eq(r.code, 0);
    HARNESS_HAS(r.out, "[64,128] (inferred)", "process 3: local shape [16,128]", "[48:64, 64:128]");
    harness_run_free(&r);
}
END_TEST

START_TEST(test_help)
{
    const char *top[] = {"--help", NULL};
    harness_run r = run(top);
    ck_assert_int_eq(r.code, 0);
    HARNESS_HAS(r.out, "sharding", "plan-load");
    harness_run_free(&r);
    const char *cmds[][3] = {{"sharding", "--help", NULL},
                             {"plan-load", "--help", NULL},
                             {"help", "plan-load", NULL},
                             {"sharding", "-h", NULL}};
    for (int i = 0; i < N(cmds); i++) {
        r = run(cmds[i]);
        ck_assert_int_eq(r.code, 0);
        HARNESS_HAS(r.out, "Usage: shmapctl", "--mesh", "--spec", "--json", "Example");
        ck_assert_ptr_nonnull(
            strstr(r.out, strcmp(cmds[i][0], "sharding") == 0 ? "--shape" : "--local-shape"));
        harness_run_free(&r);
    }
}
END_TEST

/* ---- errors ------------------------------------------------------------ */

typedef struct {
    const char *args[16];
    int code;
    const char *words;
} err_case;

static const err_case err_cases[] = {
    {{"sharding", "--mesh", "i=4", "--spec", "P('i'", "--shape", "8"},
     1,
     "partition spec \"P('i'\": expected ',' or ')'"},
    {{"sharding", "--mesh", "i=4,j=2", "--spec", "P('k')", "--shape", "8"},
     1,
     "P('k') refers to mesh axis 'k', but the mesh has axes ('i', 'j')"},
    {{"sharding", "--mesh", "i=3", "--spec", "P('i')", "--shape", "8"},
     1,
     "dimension 0 of the array has size 8, which is not divisible by 3 (the product of mesh axes "
     "('i',) of sizes (3,))"},
    {{"sharding", "--mesh", "i=4", "--spec", "P('i','i')", "--shape", "8,8"},
     1,
     "mesh axis 'i' appears more than once in P('i', 'i')"},
    {{"sharding", "--mesh", "i=4", "--spec", "P('i', None)", "--shape", "8"},
     1,
     "has 2 entries but the array has rank 1"},
    {{"sharding", "--mesh", "i=4", "--devices", "0,1,2", "--spec", "P()", "--shape", "8"},
     1,
     "3 devices"},
    {{"sharding", "--mesh", "i=4", "--spec", "P()", "--shape", "8", "--dtype", "f33"},
     1,
     "--dtype 'f33' is not a dtype"},
    {{"sharding", "--mesh", "i=x", "--spec", "P()", "--shape", "8"}, 1, "positive integer size"},
    {{"plan-load", "--mesh", "x=2,y=4", "--devices", "0,1,2,3,6,4,5,7", "--spec", "P('x','y')",
      "--process-devices", "0,1;2,3;4,5;6,7", "--local-shape", "2,4"},
     1,
     "non-uniform along dimension 1"},
    {{"plan-load", "--mesh", "x=8", "--devices", "0,1,2,3,4,5,6,7", "--spec", "P('x')",
      "--process-devices", "0,1;2,3;4,5;6,9", "--local-shape", "2"},
     1,
     "device 9"},
    {{"plan-load", "--mesh", "x=8", "--spec", "P('x')", "--process-devices", "0,1;2,x",
      "--local-shape", "2"},
     1,
     "--process-devices"},
    {{"plan-load", "--mesh", "x=8", "--spec", "P(None,'x')", "--process-devices", "0,1;2,3;4,5;6,7",
      "--local-shape", "64,48", "--global-shape", "64,128"},
     1,
     "in dimension 1 the local size is 48"},
    {{"sharding", "--mesh", "i=4", "--shape", "8"}, 2, "--spec is required"},
    {{"sharding", "--spec", "P()", "--shape", "8"}, 2, "--mesh is required"},
    {{"sharding", "--mesh", "i=4", "--spec", "P()"}, 2, "--shape is required"},
    {{"plan-load", "--mesh", "x=8", "--spec", "P('x')", "--local-shape", "2"},
     2,
     "--process-devices is required"},
    {{"plan-load", "--mesh", "x=8", "--spec", "P('x')", "--process-devices", "0,1"},
     2,
     "--local-shape is required"},
    {{"sharding", "--mesh", "i=4", "--spec", "P()", "--shape", "8", "--bogus"},
     2,
     "unknown option '--bogus'"},
    {{"plan-load", "--mesh", "x=8", "--spec", "P()", "--shape", "8"}, 2, "unknown option"},
    {{"sharding", "--mesh"}, 2, "option '--mesh' needs a value"},
    {{"sharding", "--mesh", "i=4", "--spec", "P()", "--shape", "8", "extra"},
     2,
     "unexpected argument 'extra'"},
    {{"frobnicate"}, 2, "unknown command 'frobnicate'"},
    {{NULL}, 2, "Usage: shmapctl"},
};

START_TEST(test_errors)
{
    const err_case *c = &err_cases[_i];
    harness_run r = run(c->args);
    ck_assert_msg(r.code == c->code, "case %d: exit %d, stderr %s", _i, r.code, r.err);
    ck_assert_msg(strstr(r.err, c->words), "case %d: stderr \"%s\"", _i, r.err);
    ck_assert_str_eq(r.out, "");
    if (c->args[0]) {
        /* one line, prefixed */
        ck_assert_msg(strncmp(r.err, "shmapctl: ", 10) == 0, "stderr \"%s\"", r.err);
        ck_assert_ptr_eq(strchr(r.err, '\n'), r.err + strlen(r.err) - 1);
    }
    harness_run_free(&r);
}
END_TEST

START_TEST(test_non_uniform_hint)
{
    const char *args[] = {"plan-load",       "--mesh",        "x=2,y=4",    "--devices",
                          "0,1,2,3,6,4,5,7", "--spec",        "P('x','y')", "--process-devices",
                          "0,1;2,3;4,5;6,7", "--local-shape", "2,4",        NULL};
    harness_run r = run(args);
    ck_assert_int_eq(r.code, 1);
    ck_assert_ptr_nonnull(strstr(r.err, "--global-shape"));
    harness_run_free(&r);
}
END_TEST

/* run --local: a program on whole arrays in this process, its results
 * written into --out DIR, which it creates. */
START_TEST(test_run_local)
{
    const char *ex = getenv("SM_EXAMPLES");
    ck_assert_msg(ex && *ex, "SM_EXAMPLES is not set");
    char prog[4096], inputs[4096], dir[] = "/tmp/shmap-cli-XXXXXX", out[4200], file[4300];
    snprintf(prog, sizeof prog, "%s/slice_and_average.shmap", ex);
    snprintf(inputs, sizeof inputs, "%s/slice_and_average.inputs", ex);
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(out, sizeof out, "%s/results", dir);
    const char *args[] = {"run", "--local", prog, "--inputs", inputs, "--out", out, NULL};
    harness_run r = run(args);
    ck_assert_msg(r.code == 0, "exit %d: %s", r.code, r.err);
    ck_assert_msg(strstr(r.out, "[224, 225, 226, 227]"), "%s", r.out);
    snprintf(file, sizeof file, "%s/out0.npy", out);
    FILE *f = fopen(file, "rb");
    ck_assert_msg(f != NULL, "no %s", file);
    fclose(f);
    harness_run_free(&r);
    remove(file);
    rmdir(out);
    rmdir(dir);
}
END_TEST

static Suite *cli_offline_suite(void)
{
    return SUITE_CASE(suite_create("cli_offline"), "offline", 60, NULL,
                      {test_sharding_json, N(sharding_cases)}, {test_plan_json, N(plan_cases)},
                      {test_text_output}, {test_run_local}, {test_help},
                      {test_errors, N(err_cases)}, {test_non_uniform_hint});
}

int main(void)
{
    return suite_main(cli_offline_suite());
}
