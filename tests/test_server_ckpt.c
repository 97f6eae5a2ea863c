/* Check suite for the checkpoint manifest (server/ckpt.c): a manifest the
 * coordinator writes parses back to the same array description, and every
 * kind of damage (not JSON, wrong format or version, unknown dtype, bad
 * shape, bad or overlapping or missing shards, unsafe file names, bad
 * checksums) is SM_EDATALOSS with a sentence naming the manifest. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt.h"
#include "suite_main.h"

#define N(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* A manifest of a (4, 6) f64 array saved with P('x') over mesh x=2: two
 * row blocks. */
static void manifest_2x(sm_ckpt_manifest *m)
{
    char err[256];
    sm_mesh mesh;
    sm_pspec p;
    memset(m, 0, sizeof *m);
    m->dtype = SM_F64;
    m->shape = (sm_shape){.rank = 2, .dims = {4, 6}};
    ck_assert_int_eq(sm_mesh_parse("x=2", NULL, 0, &mesh, err, sizeof err), SM_OK);
    ck_assert_int_eq(sm_pspec_parse("P('x')", &p, err, sizeof err), SM_OK);
    ck_assert_int_eq(sm_sharding_init(&m->sharding, &mesh, &p, &m->shape, err, sizeof err), SM_OK);
    m->nshards = 2;
    m->shards = calloc(2, sizeof *m->shards);
    for (int k = 0; k < 2; k++) {
        sm_ckpt_shard *s = &m->shards[k];
        sm_ckpt_file_name(k, s->file, sizeof s->file);
        s->index = (sm_index){.rank = 2, .r = {{2 * k, 2 * k + 2}, {0, 6}}};
        s->ndevices = 1;
        s->devices = malloc(sizeof *s->devices);
        s->devices[0] = k;
        s->bytes = 128 + 2 * 6 * 8;
        s->checksum = 0xfedcba9876543210ull + (uint64_t)k;
        s->chunk_bytes = 4 << 20;
        s->nchunks = 1;
        s->chunk_sums[0] = 0x0123456789abcdefull + (uint64_t)k;
    }
}

START_TEST(test_round_trip)
{
    sm_ckpt_manifest m, back;
    char err[512];
    manifest_2x(&m);
    char *text = sm_ckpt_manifest_format(&m);
    ck_assert_ptr_nonnull(text);
    ck_assert_msg(strstr(text, "\"dtype\": \"float64\""), "%s", text);
    ck_assert_msg(strstr(text, "\"xxh3_64\": \"fedcba9876543211\""), "%s", text);
    ck_assert_int_eq(sm_ckpt_manifest_parse(text, "/c/manifest.json", &back, err, sizeof err),
                     SM_OK);
    ck_assert_int_eq(back.dtype, SM_F64);
    ck_assert(sm_shape_equal(&back.shape, &m.shape));
    ck_assert_int_eq(back.nshards, 2);
    for (int k = 0; k < 2; k++) {
        ck_assert_str_eq(back.shards[k].file, m.shards[k].file);
        ck_assert(sm_index_equal(&back.shards[k].index, &m.shards[k].index));
        ck_assert_int_eq(back.shards[k].bytes, m.shards[k].bytes);
        ck_assert_uint_eq(back.shards[k].checksum, m.shards[k].checksum);
        ck_assert_int_eq(back.shards[k].ndevices, 1);
        ck_assert_int_eq(back.shards[k].devices[0], k);
        ck_assert_int_eq(back.shards[k].chunk_bytes, 4 << 20);
        ck_assert_int_eq(back.shards[k].nchunks, 1);
        ck_assert_uint_eq(back.shards[k].chunk_sums[0], m.shards[k].chunk_sums[0]);
    }
    ck_assert(sm_pspec_equal(&back.sharding.spec, &m.sharding.spec));
    ck_assert_int_eq(back.sharding.mesh.ndevices, 2);
    free(text);
    sm_ckpt_manifest_free(&back);
    sm_ckpt_manifest_free(&m);
}
END_TEST

/* A valid manifest's text with one piece replaced, and a word the refusal
 * must contain. */
static const struct {
    const char *from, *to, *needle;
} damage[] = {
    {"{", "[", "not JSON"},
    {"\"version\": 1", "\"version\": 2", "version 2"},
    {"shmap-checkpoint", "other", "format"},
    {"float64", "float128", "dtype"},
    {"\"shape\": [4, 6]", "\"shape\": [4, -6]", "shape"},
    {"\"shape\": [4, 6]", "\"shape\": [4, 6, 1]", "index"},
    {"[[2, 4], [0, 6]]", "[[1, 4], [0, 6]]", "overlap"},
    {"[[2, 4], [0, 6]]", "[[2, 3], [0, 6]]", "hold 18 of the 24"},
    {"[[2, 4], [0, 6]]", "[[2, 5], [0, 6]]", "inside"},
    {"\"shard-00001.npy\"", "\"../escape.npy\"", "plain file name"},
    {"\"shard-00001.npy\"", "\"shard-00000.npy\"", "share a file name"},
    {"\"xxh3_64\": \"fedcba9876543211\"", "\"xxh3_64\": \"fedcba98\"", "xxh3_64"},
    {"\"xxh3_64\": \"fedcba9876543211\"", "\"xxh3_64\": 7", "xxh3_64"},
    {"\"bytes\": 224, \"xxh3_64\": \"fedcba9876543211\"",
     "\"bytes\": -1, \"xxh3_64\": \"fedcba9876543211\"", "byte count"},
    {"\"shards\": [", "\"shards\": [], \"x\": [", "no shards"},
    {"\"chunk_bytes\": 4194304", "\"chunk_bytes\": 0", "chunk_bytes"},
    {"\"chunk_bytes\": 4194304", "\"chunk_bytes\": 100", "chunk_xxh3_64 list that fit"},
    {"[\"0123456789abcdf0\"]", "[\"0123456789abcdf0\", \"0123456789abcdf0\"]",
     "chunk_xxh3_64 list that fit"},
    {"[\"0123456789abcdf0\"]", "[\"0123456789abcdfX\"]", "chunk 0 of shard-00001.npy"},
};

START_TEST(test_damage_table)
{
    sm_ckpt_manifest m, back;
    char err[512] = "";
    manifest_2x(&m);
    char *text = sm_ckpt_manifest_format(&m);
    char *p = strstr(text, damage[_i].from);
    ck_assert_msg(p != NULL, "row %d: '%s' not in %s", _i, damage[_i].from, text);
    size_t n = strlen(text) + strlen(damage[_i].to) + 1;
    char *bad = malloc(n);
    snprintf(bad, n, "%.*s%s%s", (int)(p - text), text, damage[_i].to, p + strlen(damage[_i].from));
    sm_err e = sm_ckpt_manifest_parse(bad, "/c/manifest.json", &back, err, sizeof err);
    ck_assert_msg(e == SM_EDATALOSS, "row %d: %s (%s) for %s", _i, sm_err_name(e), err, bad);
    ck_assert_msg(strstr(err, "/c/manifest.json") && strstr(err, damage[_i].needle),
                  "row %d: '%s' lacks '%s'", _i, err, damage[_i].needle);
    ck_assert_int_eq(back.nshards, 0);
    ck_assert_ptr_null(back.shards);
    free(bad);
    free(text);
    sm_ckpt_manifest_free(&m);
}
END_TEST

static Suite *server_ckpt_suite(void)
{
    return SUITE_CASE(suite_create("server_ckpt"), "manifest", 0, NULL, {test_round_trip},
                      {test_damage_table, N(damage)});
}

int main(void)
{
    return suite_main(server_ckpt_suite());
}
