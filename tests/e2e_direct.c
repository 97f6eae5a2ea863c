/* e2e_direct: direct transfers between client and workers against a real
 * cluster (coordinator + 2 worker processes on loopback): round trips over
 * the direct path and with the relay forced (SHMAP_RELAY=1 and
 * sm_client_opts.relay_only), CommitShards refused when the worker does not
 * hold the shard or holds other bytes (sm_svc calls driven directly), and
 * the fallback to the relay when a worker address cannot be reached. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client_internal.h"
#include "harness.h"
#include "harness_svc.h"
#include "sm_checksum.h"
#include "sm_rpc.h"
#include "suite_main.h"

#define DEAD_ADDR "127.0.0.1:1"

static harness_cluster *g_two;

static void cluster_up(void)
{
    g_two = harness_cluster_up(2, 4, "e2e_direct");
    /* direct transfers talk to worker ports: the cluster's credential */
    harness_use_cluster_credential(g_two);
}

static void cluster_down(void)
{
    harness_cluster_down(&g_two);
}

static sm_client *connect_opts(int relay_only)
{
    sm_client_opts o = harness_client_opts(g_two);
    sm_client *c = NULL;
    char err[512];
    o.relay_only = relay_only;
    sm_err e = sm_client_opts_from_env(&o, err, sizeof err);
    if (!e)
        e = sm_client_connect(g_two->target, &o, &c, err, sizeof err);
    ck_assert_msg(e == SM_OK, "connect: %s", err);
    return c;
}

/* Puts x with spec over mesh x=8 (or x=4,y=2), gets it back and one shard,
 * compares bit-exact, deletes. */
static void round_trip(sm_client *c, const char *axes, const char *spec)
{
    sm_mesh mesh;
    sm_sharding_ref sh = harness_sharding(&mesh, axes, NULL, 0, spec);
    sm_shape s = HARNESS_SHAPE(64, 40);
    sm_array *x = harness_array_iota(SM_F32, &s, 7), *back = NULL, *shard = NULL;
    sm_array_info info;
    char err[512];

    sm_err e = sm_client_put(c, SM_F32, &s, x->data, &sh, NULL, &info, err, sizeof err);
    ck_assert_msg(e == SM_OK, "put %s %s: %s", axes, spec, err);
    ck_assert_int_eq(info.state, SM_ARRAY_READY);
    /* The put's description (taken from the commit) is what Describe says. */
    sm_array_info d;
    e = sm_client_describe(c, harness_id_ref(info.id), &d, err, sizeof err);
    ck_assert_msg(e == SM_OK, "describe: %s", err);
    ck_assert_int_eq(d.state, info.state);
    ck_assert_int_eq(d.bytes, info.bytes);
    ck_assert_int_eq(d.dtype, info.dtype);
    ck_assert(sm_shape_equal(&d.shape, &info.shape));
    ck_assert(sm_shape_equal(&d.shard_shape, &info.shard_shape));
    ck_assert_str_eq(d.type, info.type);
    ck_assert_str_eq(d.name, info.name);
    ck_assert_int_eq(d.nshards, info.nshards);
    for (int k = 0; k < d.nshards; k++) {
        ck_assert_int_eq(d.shards[k].device, info.shards[k].device);
        ck_assert_int_eq(d.shards[k].present, info.shards[k].present);
        ck_assert_int_eq(d.shards[k].replica_id, info.shards[k].replica_id);
        ck_assert_str_eq(d.shards[k].worker_address, info.shards[k].worker_address);
        ck_assert(sm_index_equal(&d.shards[k].index, &info.shards[k].index));
    }
    sm_array_info_free(&d);
    e = sm_client_get(c, harness_id_ref(info.id), &back, err, sizeof err);
    ck_assert_msg(e == SM_OK, "get: %s", err);
    ck_assert_int_eq(memcmp(back->data, x->data, (size_t)x->nbytes), 0);
    const sm_shard_info *si = &info.shards[info.nshards - 1];
    e = sm_client_get_shard(c, harness_id_ref(info.id), si->device, &shard, err, sizeof err);
    ck_assert_msg(e == SM_OK, "get_shard: %s", err);
    client_box b;
    ck_assert_int_eq(client_box_init(&b, &x->shape, &si->index, SM_F32, err, sizeof err), SM_OK);
    ck_assert_int_eq(b.nbytes, shard->nbytes);
    void *want = malloc((size_t)b.nbytes + 1);
    client_box_gather(&b, x->data, 0, want, (size_t)b.nbytes);
    ck_assert_int_eq(memcmp(shard->data, want, (size_t)b.nbytes), 0);
    free(want);
    sm_array_free(shard);
    sm_array_free(back);
    ck_assert_int_eq(sm_client_delete(c, harness_id_ref(info.id), err, sizeof err), SM_OK);
    sm_array_info_free(&info);
    sm_array_free(x);
}

static void round_trips(sm_client *c)
{
    round_trip(c, "x=8", "P('x')");
    round_trip(c, "x=4,y=2", "P('x', 'y')");
    round_trip(c, "x=8", "P()");              /* one target spanning both workers */
    round_trip(c, "x=4,y=2", "P(None, 'y')"); /* replicas on both workers */
}

START_TEST(direct_round_trips)
{
    sm_client *c = connect_opts(0);
    ck_assert_int_eq(c->relay_only, 0);
    round_trips(c);
    /* Both workers were reached directly, one cached channel each. */
    int unreachable = -1;
    ck_assert_int_eq(sm_rpc_chans_count(c->workers, &unreachable), 2);
    ck_assert_int_eq(unreachable, 0);
    sm_client_close(c);
}
END_TEST

START_TEST(relay_forced)
{
    /* By the option. */
    sm_client *c = connect_opts(1);
    round_trips(c);
    ck_assert_int_eq(sm_rpc_chans_count(c->workers, NULL), 0); /* never opened a worker channel */
    sm_client_close(c);
    /* By the environment. */
    setenv("SHMAP_RELAY", "1", 1);
    c = connect_opts(0);
    unsetenv("SHMAP_RELAY");
    ck_assert_int_eq(c->relay_only, 1);
    round_trips(c);
    ck_assert_int_eq(sm_rpc_chans_count(c->workers, NULL), 0);
    sm_client_close(c);
    /* The library itself reads no environment: without
     * sm_client_opts_from_env the variable changes nothing. */
    sm_client_opts o = harness_client_opts(g_two); /* token and TLS files, nothing else */
    char err[512];
    setenv("SHMAP_RELAY", "1", 1);
    sm_err e = sm_client_connect(g_two->target, &o, &c, err, sizeof err);
    unsetenv("SHMAP_RELAY");
    ck_assert_msg(e == SM_OK, "connect: %s", err);
    ck_assert_int_eq(c->relay_only, 0);
    sm_client_close(c);
}
END_TEST

/* Sends a 16-byte shard of array id to device d of the worker at ch. */
static void put_shard(sm_rpc_channel *ch, sm_array_id id, int32_t d, const float *data)
{
    harness_upload_req u = {.to_worker = 1,
                            .array = id,
                            .devices = &d,
                            .ndevices = 1,
                            .dtype = SM_F32,
                            .shape = HARNESS_SHAPE(1, 4),
                            .data = data,
                            .nbytes = 16};
    char err[512];
    sm_err e = harness_upload(ch, &u, NULL, err, sizeof err);
    ck_assert_msg(e == SM_OK, "PutShard: %s", err);
}

START_TEST(commit_verified)
{
    sm_rpc_channel *ch = NULL, *wch = NULL;
    sm_svc_create_array_reply r;
    sm_svc_upload_reply rep;
    sm_svc_shard_state st;
    char err[512];
    sm_err e;
    float data[4] = {1, 2, 3, 4};

    ch = harness_channel(g_two, NULL);
    r = harness_svc_create(ch, NULL, "x=8", "P('x')", HARNESS_SHAPE(8, 4), SM_PUT_SHARDS, 0);
    sm_array_id id = r.array.id;
    int32_t d = r.array.shards[0].device;
    wch = harness_channel(g_two, r.array.shards[0].worker_address);
    sm_svc_commit_req c = {id, 1, &d, sm_checksum_oneshot(data, 16), 16};

    /* Nothing was sent: refused. */
    memset(&rep, 0, sizeof rep);
    e = sm_svc_coord_commit_shards(ch, 10000, &c, &rep, err, sizeof err);
    ck_assert_msg(e == SM_EPRECONDITION, "%d: %s", e, err);
    ck_assert_ptr_nonnull(strstr(err, "holds no shard"));

    /* Other bytes than committed: refused and the worker's copy dropped. */
    put_shard(wch, id, d, data);
    c.checksum ^= 1;
    e = sm_svc_coord_commit_shards(ch, 10000, &c, &rep, err, sizeof err);
    ck_assert_msg(e == SM_EDATALOSS, "%d: %s", e, err);
    c.checksum ^= 1;
    ck_assert_int_eq(sm_svc_worker_shard_info(wch, 10000, id, 1, &d, &st, err, sizeof err), SM_OK);
    ck_assert_int_eq(st.present, 0);

    /* A wrong size is refused before any worker is asked. */
    put_shard(wch, id, d, data);
    c.bytes = 12;
    ck_assert_int_eq(sm_svc_coord_commit_shards(ch, 10000, &c, &rep, err, sizeof err), SM_EINVAL);
    c.bytes = 16;

    /* The worker records the checksum it verified. */
    ck_assert_int_eq(sm_svc_worker_shard_info(wch, 10000, id, 1, &d, &st, err, sizeof err), SM_OK);
    ck_assert_int_eq(st.present, 1);
    ck_assert_int_eq(st.bytes, 16);
    ck_assert_uint_eq(st.checksum, c.checksum);

    /* The right bytes: filled, the array still pending for the others. */
    e = sm_svc_coord_commit_shards(ch, 10000, &c, &rep, err, sizeof err);
    ck_assert_msg(e == SM_OK, "commit: %s", err);
    ck_assert_int_eq(rep.bytes, 16);
    ck_assert_int_eq(rep.array_ready, 0);
    e = sm_svc_coord_commit_shards(ch, 10000, &c, &rep, err, sizeof err);
    ck_assert_int_eq(e, SM_EPRECONDITION); /* already has its data */

    sm_array_info info;
    memset(&info, 0, sizeof info);
    ck_assert_int_eq(sm_svc_coord_describe(ch, 10000, harness_id_ref(id), &info, err, sizeof err),
                     SM_OK);
    ck_assert_int_eq(info.state, SM_ARRAY_PENDING);
    ck_assert_int_eq(info.shards[0].present, 1);
    ck_assert_int_eq(info.shards[1].present, 0);
    sm_array_info_free(&info);

    /* An unknown array, and one that is not pending, are refused. */
    c.array_id.v = id.v + 1000;
    ck_assert_int_eq(sm_svc_coord_commit_shards(ch, 10000, &c, &rep, err, sizeof err),
                     SM_ENOTFOUND);
    ck_assert_int_eq(sm_svc_coord_delete(ch, 10000, harness_id_ref(id), err, sizeof err), SM_OK);
    sm_svc_create_array_reply_free(&r);
    sm_rpc_channel_free(wch);
    sm_rpc_channel_free(ch);
}
END_TEST

/* Deletes the array r created, frees r and the channels (ch, the two
 * worker_of opened). */
static void created_end(sm_rpc_channel *ch, sm_rpc_channel **wch, sm_svc_create_array_reply *r)
{
    char err[512];
    ck_assert_int_eq(sm_svc_coord_delete(ch, 10000, harness_id_ref(r->array.id), err, sizeof err),
                     SM_OK);
    sm_svc_create_array_reply_free(r);
    for (int w = 0; w < 2; w++)
        sm_rpc_channel_free(wch[w]);
    sm_rpc_channel_free(ch);
}

/* The worker channel of device d of array a (opened once per address). */
static sm_rpc_channel *worker_of(const sm_array_info *a, int32_t d, sm_rpc_channel **chs)
{
    for (int k = 0; k < a->nshards; k++) {
        if (a->shards[k].device != d)
            continue;
        int w = a->shards[k].worker_id.v == a->shards[0].worker_id.v ? 0 : 1;
        if (!chs[w])
            chs[w] = harness_channel(g_two, a->shards[k].worker_address);
        return chs[w];
    }
    ck_abort_msg("device %d holds no shard", (int)d);
    return NULL;
}

/* Whether device d of array a holds a shard on its worker. */
static int worker_has(const sm_array_info *a, int32_t d, sm_rpc_channel **chs)
{
    sm_svc_shard_state st;
    char err[512];
    ck_assert_int_eq(
        sm_svc_worker_shard_info(worker_of(a, d, chs), 10000, a->id, 1, &d, &st, err, sizeof err),
        SM_OK);
    return st.present;
}

static int described_present(sm_rpc_channel *ch, sm_array_id id, int *ready)
{
    sm_array_info info;
    char err[512];
    int n = 0;
    memset(&info, 0, sizeof info);
    ck_assert_int_eq(sm_svc_coord_describe(ch, 10000, harness_id_ref(id), &info, err, sizeof err),
                     SM_OK);
    for (int k = 0; k < info.nshards; k++)
        n += info.shards[k].present;
    *ready = info.state == SM_ARRAY_READY;
    sm_array_info_free(&info);
    return n;
}

START_TEST(commit_batched)
{
    sm_rpc_channel *ch = NULL, *wch[2] = {NULL, NULL};
    sm_svc_create_array_reply r;
    sm_svc_upload_reply rep;
    sm_svc_commit_target t[8];
    char err[512];
    sm_err e;
    float data[4] = {5, 6, 7, 8};
    uint64_t sum = sm_checksum_oneshot(data, 16);
    int ready = 0;

    ch = harness_channel(g_two, NULL);
    r = harness_svc_create(ch, NULL, "x=8", "P('x')", HARNESS_SHAPE(8, 4), SM_PUT_SHARDS, 0);
    ck_assert_int_eq(r.ntargets, 8);
    sm_array_id id = r.array.id;
    for (int i = 0; i < 8; i++)
        t[i] = (sm_svc_commit_target){1, r.targets[i].devices, sum, 16};
    for (int i = 0; i < 3; i++)
        put_shard(worker_of(&r.array, t[i].devices[0], wch), id, t[i].devices[0], data);
    sm_svc_commit_req c = {.array_id = id, .ntargets = 3, .targets = t};

    /* A device named by two targets: refused, nothing filled. */
    t[1].devices = t[0].devices;
    memset(&rep, 0, sizeof rep);
    e = sm_svc_coord_commit_shards(ch, 10000, &c, &rep, err, sizeof err);
    ck_assert_msg(e == SM_EINVAL, "%d: %s", e, err);
    ck_assert_ptr_nonnull(strstr(err, "named by two targets"));
    t[1].devices = r.targets[1].devices;
    ck_assert_int_eq(described_present(ch, id, &ready), 0);

    /* Both forms at once: refused. */
    c.ndevices = 1;
    c.devices = t[0].devices;
    e = sm_svc_coord_commit_shards(ch, 10000, &c, &rep, err, sizeof err);
    ck_assert_msg(e == SM_EINVAL, "%d: %s", e, err);
    c.ndevices = 0;
    c.devices = NULL;

    /* A bad second target (a wrong size): refused before any worker is asked. */
    t[1].bytes = 12;
    ck_assert_int_eq(sm_svc_coord_commit_shards(ch, 10000, &c, &rep, err, sizeof err), SM_EINVAL);
    t[1].bytes = 16;
    ck_assert_int_eq(described_present(ch, id, &ready), 0);
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(worker_has(&r.array, t[i].devices[0], wch), 1);

    /* A checksum mismatch in the middle target: none is filled, and every
     * worker copy of the commit is dropped. */
    t[1].checksum ^= 1;
    e = sm_svc_coord_commit_shards(ch, 10000, &c, &rep, err, sizeof err);
    ck_assert_msg(e == SM_EDATALOSS, "%d: %s", e, err);
    t[1].checksum ^= 1;
    ck_assert_int_eq(described_present(ch, id, &ready), 0);
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(worker_has(&r.array, t[i].devices[0], wch), 0);

    /* A target not sent: refused, nothing filled. */
    for (int i = 0; i < 2; i++)
        put_shard(worker_of(&r.array, t[i].devices[0], wch), id, t[i].devices[0], data);
    e = sm_svc_coord_commit_shards(ch, 10000, &c, &rep, err, sizeof err);
    ck_assert_msg(e == SM_EPRECONDITION, "%d: %s", e, err);
    ck_assert_int_eq(described_present(ch, id, &ready), 0);

    /* Sent and committed together: filled, the array pending; the rest
     * complete it. */
    for (int i = 0; i < 8; i++)
        if (!worker_has(&r.array, t[i].devices[0], wch))
            put_shard(worker_of(&r.array, t[i].devices[0], wch), id, t[i].devices[0], data);
    e = sm_svc_coord_commit_shards(ch, 10000, &c, &rep, err, sizeof err);
    ck_assert_msg(e == SM_OK, "commit: %s", err);
    ck_assert_int_eq(rep.bytes, 48);
    ck_assert_int_eq(rep.array_ready, 0);
    ck_assert_int_eq(described_present(ch, id, &ready), 3);
    ck_assert_int_eq(ready, 0);
    c.targets = t + 2; /* overlaps the committed target 2 */
    c.ntargets = 6;
    ck_assert_int_eq(sm_svc_coord_commit_shards(ch, 10000, &c, &rep, err, sizeof err),
                     SM_EPRECONDITION);
    ck_assert_int_eq(described_present(ch, id, &ready), 3);
    c.targets = t + 3;
    c.ntargets = 5;
    /* Targets 3..7 span both workers, asked at once: the second worker's
     * missing shard and its wrong bytes are found and named. */
    int32_t last = t[7].devices[0];
    ck_assert(worker_of(&r.array, last, wch) != worker_of(&r.array, t[3].devices[0], wch));
    ck_assert_int_eq(sm_svc_worker_free_array(worker_of(&r.array, last, wch), 10000, id, 1, &last,
                                              err, sizeof err),
                     SM_OK);
    e = sm_svc_coord_commit_shards(ch, 10000, &c, &rep, err, sizeof err);
    ck_assert_msg(e == SM_EPRECONDITION, "%d: %s", e, err);
    char want[64];
    snprintf(want, sizeof want, "on device %d;", (int)last);
    ck_assert_msg(strstr(err, want), "%s", err);
    ck_assert_int_eq(described_present(ch, id, &ready), 3);
    for (int i = 3; i < 8; i++) { /* a failed commit drops every copy it named */
        ck_assert_int_eq(worker_has(&r.array, t[i].devices[0], wch), 0);
        put_shard(worker_of(&r.array, t[i].devices[0], wch), id, t[i].devices[0], data);
    }
    t[7].checksum ^= 1;
    e = sm_svc_coord_commit_shards(ch, 10000, &c, &rep, err, sizeof err);
    ck_assert_msg(e == SM_EDATALOSS, "%d: %s", e, err);
    snprintf(want, sizeof want, "device %d of array", (int)last);
    ck_assert_msg(strstr(err, want), "%s", err);
    t[7].checksum ^= 1;
    ck_assert_int_eq(described_present(ch, id, &ready), 3);
    for (int i = 3; i < 8; i++) {
        ck_assert_int_eq(worker_has(&r.array, t[i].devices[0], wch), 0);
        put_shard(worker_of(&r.array, t[i].devices[0], wch), id, t[i].devices[0], data);
    }
    e = sm_svc_coord_commit_shards(ch, 10000, &c, &rep, err, sizeof err);
    ck_assert_msg(e == SM_OK, "commit: %s", err);
    ck_assert_int_eq(rep.array_ready, 1);
    ck_assert_int_eq(described_present(ch, id, &ready), 8);
    ck_assert_int_eq(ready, 1);

    created_end(ch, wch, &r);
}
END_TEST

/* How send_targets spoils a batched PutShard stream. */
enum { SPOIL_NONE, SPOIL_SIZE, SPOIL_SUM, SPOIL_DEVICE, SPOIL_ARRAY, SPOIL_CUT };

/* Sends n 16-byte targets (device devs[k], data + 4k) of array id in one
 * PutShard stream to ch, target `at` spoiled as `how`. */
static sm_err send_targets(sm_rpc_channel *ch, sm_array_id id, const int32_t *devs, int n,
                           const float *data, int at, int how, sm_svc_upload_reply *r)
{
    sm_svc_upload_stream *st = NULL;
    sm_svc_upload_msg m;
    char err[512];
    sm_err e = sm_svc_upload_open(ch, 1, 10000, &st, err, sizeof err);
    ck_assert_int_eq(e, SM_OK);
    for (int k = 0; k < n && !e; k++) {
        int32_t d = how == SPOIL_DEVICE && k == at ? devs[0] : devs[k];
        memset(&m, 0, sizeof m);
        m.has_header = 1;
        m.header.array_id.v = id.v + (how == SPOIL_ARRAY && k == at ? 1 : 0);
        m.header.ndevices = 1;
        m.header.devices = &d;
        m.header.shape = HARNESS_SHAPE(1, 4);
        m.header.dtype = SM_F32;
        m.header.total_bytes = how == SPOIL_SIZE && k == at ? 12 : 16;
        e = sm_svc_upload_send(st, &m, err, sizeof err);
        if (e || (how == SPOIL_CUT && k == at))
            break;
        memset(&m, 0, sizeof m);
        m.data = data + 4 * k;
        m.len = 16;
        m.last = 1;
        m.checksum = sm_checksum_oneshot(data + 4 * k, 16) ^ (how == SPOIL_SUM && k == at);
        e = sm_svc_upload_send(st, &m, err, sizeof err);
    }
    memset(r, 0, sizeof *r);
    sm_err f = sm_svc_upload_finish(st, r, err, sizeof err);
    return f ? f : e;
}

/* One PutShard stream carrying several targets: acknowledged one by one,
 * stored all together or not at all. */
START_TEST(put_batched)
{
    sm_rpc_channel *ch = NULL, *wch[2] = {NULL, NULL};
    sm_svc_create_array_reply r;
    sm_svc_upload_reply rep;
    char err[512];
    sm_err e;
    float data[16];
    int32_t devs[4];
    sm_svc_commit_target t[4];
    int n = 0, ready = 0;

    for (int k = 0; k < 16; k++)
        data[k] = (float)(k * 3 + 1);
    ch = harness_channel(g_two, NULL);
    r = harness_svc_create(ch, NULL, "x=8", "P('x')", HARNESS_SHAPE(8, 4), SM_PUT_SHARDS, 0);
    sm_array_id id = r.array.id;
    for (int k = 0; k < r.array.nshards && n < 4; k++)
        if (r.array.shards[k].worker_id.v == r.array.shards[0].worker_id.v)
            devs[n++] = r.array.shards[k].device;
    ck_assert_int_eq(n, 4);
    sm_rpc_channel *w = worker_of(&r.array, devs[0], wch);

    /* Spoiled streams: refused, and none of their targets is kept. */
    static const struct {
        int how, at;
        sm_err want;
    } bad[] = {
        {SPOIL_SIZE, 1, SM_EINVAL},   /* a bad second target */
        {SPOIL_SUM, 1, SM_EDATALOSS}, /* a checksum mismatch in the middle target */
        {SPOIL_DEVICE, 2, SM_EINVAL}, /* a device in two targets */
        {SPOIL_ARRAY, 1, SM_EINVAL},  /* a target of another array */
        {SPOIL_CUT, 2, SM_EINVAL},    /* the last target without its data */
    };
    for (size_t b = 0; b < sizeof bad / sizeof bad[0]; b++) {
        e = send_targets(w, id, devs, 3, data, bad[b].at, bad[b].how, &rep);
        ck_assert_msg(e == bad[b].want, "spoil %d: %d", bad[b].how, e);
        for (int k = 0; k < 3; k++)
            ck_assert_msg(!worker_has(&r.array, devs[k], wch), "spoil %d kept device %d",
                          bad[b].how, (int)devs[k]);
    }

    /* A good one: every target acknowledged with its bytes and checksum. */
    e = send_targets(w, id, devs, 4, data, -1, SPOIL_NONE, &rep);
    ck_assert_msg(e == SM_OK, "PutShard: %d", e);
    ck_assert_int_eq(rep.ntargets, 4);
    ck_assert_int_eq(rep.bytes, 64);
    for (int k = 0; k < 4; k++) {
        ck_assert_int_eq(rep.target_bytes[k], 16);
        ck_assert_uint_eq(rep.target_checksum[k], sm_checksum_oneshot(data + 4 * k, 16));
        ck_assert_int_eq(worker_has(&r.array, devs[k], wch), 1);
        t[k] = (sm_svc_commit_target){1, &devs[k], rep.target_checksum[k], 16};
    }
    sm_svc_commit_req c = {.array_id = id, .ntargets = 4, .targets = t};
    e = sm_svc_coord_commit_shards(ch, 10000, &c, &rep, err, sizeof err);
    ck_assert_msg(e == SM_OK, "commit: %s", err);
    ck_assert_int_eq(described_present(ch, id, &ready), 4);

    created_end(ch, wch, &r);
}
END_TEST

/* Several shards of one worker in one GetShard stream, and the checks. */
START_TEST(download_batched)
{
    sm_client *c = connect_opts(0);
    sm_mesh mesh;
    sm_sharding_ref sh = harness_sharding(&mesh, "x=8", NULL, 0, "P('x')");
    sm_shape s = HARNESS_SHAPE(16, 8);
    sm_array *x = harness_array_iota(SM_F32, &s, 5), *back = NULL;
    sm_array_info info;
    int32_t dev[8];
    sm_index box[8];
    char err[512];

    sm_err e = sm_client_put(c, SM_F32, &s, x->data, &sh, NULL, &info, err, sizeof err);
    ck_assert_msg(e == SM_OK, "put: %s", err);
    ck_assert_int_eq(sm_array_create(SM_F32, &s, &back, err, sizeof err), SM_OK);
    for (int round = 0; round < 2; round++) { /* straight, then through the relay */
        memset(back->data, 0, (size_t)back->nbytes);
        for (int w = 0; w < 2; w++) {
            uint32_t wid = info.shards[w ? info.nshards - 1 : 0].worker_id.v;
            const char *addr = NULL;
            int n = 0;
            for (int k = 0; k < info.nshards; k++)
                if (info.shards[k].worker_id.v == wid) {
                    dev[n] = info.shards[k].device;
                    box[n++] = info.shards[k].index;
                    addr = round ? DEAD_ADDR : info.shards[k].worker_address;
                }
            ck_assert_int_gt(n, 1);
            e = client_download_boxes(c, addr, info.id, n, dev, box, NULL, SM_F32, back->data, &s,
                                      NULL, err, sizeof err);
            ck_assert_msg(e == SM_OK, "download of worker %u: %s", wid, err);
            if (round == 0 && w == 0) {
                /* a second shard of another shape than expected */
                sm_index b1 = box[1];
                box[1].r[1].stop--;
                e = client_download_boxes(c, addr, info.id, n, dev, box, NULL, SM_F32, back->data,
                                          &s, NULL, err, sizeof err);
                ck_assert_msg(e == SM_EDATALOSS, "%d: %s", e, err);
                ck_assert_ptr_nonnull(strstr(err, "was expected"));
                box[1] = b1;
            }
        }
        ck_assert_int_eq(memcmp(back->data, x->data, (size_t)x->nbytes), 0);
    }
    /* The put's description fetches it without a Describe; once deleted,
     * the same description fails. */
    sm_array *again = NULL;
    e = sm_client_get_described(c, &info, &again, err, sizeof err);
    ck_assert_msg(e == SM_OK, "get_described: %s", err);
    ck_assert_int_eq(memcmp(again->data, x->data, (size_t)x->nbytes), 0);
    /* Into the caller's buffer: it must be the array's size exactly. */
    memset(again->data, 0, (size_t)again->nbytes);
    e = sm_client_get_into(c, &info, again->data, (size_t)again->nbytes - 4, err, sizeof err);
    ck_assert_msg(e == SM_EINVAL && strstr(err, "the buffer given for it holds"), "%d: %s", e, err);
    e = sm_client_get_into(c, &info, NULL, (size_t)again->nbytes, err, sizeof err);
    ck_assert_msg(e == SM_EINVAL, "%d: %s", e, err);
    e = sm_client_get_into(c, &info, again->data, (size_t)again->nbytes, err, sizeof err);
    ck_assert_msg(e == SM_OK, "get_into: %s", err);
    ck_assert_int_eq(memcmp(again->data, x->data, (size_t)x->nbytes), 0);
    sm_array_free(again);
    ck_assert_int_eq(sm_client_delete(c, harness_id_ref(info.id), err, sizeof err), SM_OK);
    again = NULL;
    ck_assert_int_ne(sm_client_get_described(c, &info, &again, err, sizeof err), SM_OK);
    ck_assert_ptr_null(again);
    sm_array_info_free(&info);
    sm_array_free(back);
    sm_array_free(x);
    sm_client_close(c);
}
END_TEST

START_TEST(fallback_unreachable_worker)
{
    sm_client *c = connect_opts(0);
    sm_svc_create_array_reply r;
    char err[512], real[SM_ADDR_MAX];
    sm_err e;
    sm_array_info info;
    sm_shape s = HARNESS_SHAPE(16, 8);
    sm_array *x = harness_array_iota(SM_F32, &s, 3), *back = NULL;

    ck_assert_ptr_null(client_worker_channel(c, DEAD_ADDR));
    ck_assert_ptr_null(client_worker_channel(c, DEAD_ADDR)); /* cached verdict */

    r = harness_svc_create(c->ch, NULL, "x=4,y=2", "P('x')", s, SM_PUT_WHOLE, 0);
    snprintf(real, sizeof real, "%s", r.array.shards[0].worker_address);
    ck_assert_ptr_nonnull(client_worker_channel(c, real));
    /* Every worker advertised where the client cannot reach it: the
     * targets go through the relay. */
    for (int k = 0; k < r.array.nshards; k++)
        snprintf(r.array.shards[k].worker_address, SM_ADDR_MAX, "%s", DEAD_ADDR);
    for (int i = 0; i < r.ntargets; i++) {
        const sm_svc_upload_target *t = &r.targets[i];
        e = client_upload_box(c, &r.array, r.array.id, t->ndevices, t->devices, SM_F32, x->data,
                              &x->shape, &t->global_index, NULL, NULL, err, sizeof err);
        ck_assert_msg(e == SM_OK, "upload target %d: %s", i, err);
    }
    /* The relay committed every target: nothing was held back. */
    ck_assert_int_eq(sm_client_describe(c, harness_id_ref(r.array.id), &info, err, sizeof err),
                     SM_OK);
    ck_assert_int_eq(info.state, SM_ARRAY_READY);
    sm_array_info_free(&info);
    ck_assert_int_eq(sm_array_create(SM_F32, &s, &back, err, sizeof err), SM_OK);
    memset(back->data, 0, (size_t)back->nbytes);
    for (int k = 0; k < r.array.nshards; k++) {
        const sm_shard_info *si = &r.array.shards[k];
        e = client_download_box(c, DEAD_ADDR, r.array.id, si->device, NULL, SM_F32, back->data, &s,
                                &si->index, NULL, err, sizeof err);
        ck_assert_msg(e == SM_OK, "download device %d: %s", (int)si->device, err);
    }
    ck_assert_int_eq(memcmp(back->data, x->data, (size_t)x->nbytes), 0);
    ck_assert_int_eq(sm_client_delete(c, harness_id_ref(r.array.id), err, sizeof err), SM_OK);
    sm_svc_create_array_reply_free(&r);
    sm_array_free(back);
    sm_array_free(x);
    sm_client_close(c);
}
END_TEST

int main(void)
{
    return HARNESS_CLUSTER_SUITE("e2e_direct", 120, cluster_up, cluster_down, {direct_round_trips},
                                 {relay_forced}, {commit_verified}, {commit_batched},
                                 {download_batched}, {put_batched}, {fallback_unreachable_worker});
}
