/* e2e_streams: the coordinator's limit on the streams one client keeps
 * open (--max-client-streams), on a real cluster started with a limit of
 * 2: a libshmap client's relayed put of 2 shards passes; a client holding
 * two Upload streams open is refused a third and a Download
 * (RESOURCE_EXHAUSTED, naming the flag and the limit) while another client
 * (a shmapctl process) downloads; once one of the two ends the first
 * client may open one again. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "harness.h"
#include "suite_main.h"
#include "shmap.pb-c.h"
#include "sm_rpc.h"
#include "sm_rpc_msg.h"

#define UPLOAD   "/shmap.v1.Coordinator/Upload"
#define DOWNLOAD "/shmap.v1.Coordinator/Download"
#define LIMIT    2

static harness_cluster *g;

static void cluster_up(void)
{
    const char *more[] = {"--max-client-streams", "2", NULL};
    harness_opts o = {.nworkers = 1, .devices_per_worker = 2, .coord_args = more};
    g = harness_cluster_up_opts(&o, "e2e_streams");
}

static void cluster_down(void)
{
    harness_cluster_down(&g);
}

/* Opens an Upload stream on ch (sends nothing: the coordinator waits for
 * its first message, so the stream stays open). */
static sm_rpc_stream *open_upload(sm_rpc_channel *ch)
{
    sm_rpc_stream *st = NULL;
    char err[512];
    ck_assert_msg(sm_rpc_cstream_open(ch, UPLOAD, 20000, &st, err, sizeof err) == SM_OK, "%s", err);
    return st;
}

/* Half-closes an Upload stream without a message and returns its status
 * (err holds its sentence): the coordinator refuses an empty upload, or
 * refused the stream at once. */
static sm_err finish_upload(sm_rpc_stream *st, char *err, size_t errlen)
{
    ProtobufCMessage *reply = NULL;
    sm_err e = sm_rpc_cstream_finish(st, &shmap__v1__upload_reply__descriptor, &reply, err, errlen);
    sm_rpc_msg_free(reply);
    return e;
}

static sm_rpc_channel *channel(void)
{
    return harness_channel(g, NULL);
}

START_TEST(test_limit_per_client)
{
    char err[1024];

    /* a libshmap client relaying a 2-shard put through the coordinator (2
     * Upload streams at most): within the limit */
    sm_client_opts o = harness_client_opts(g);
    o.timeout_ms = 20000;
    o.relay_only = 1;
    sm_client *c = NULL;
    ck_assert_msg(sm_client_connect(g->target, &o, &c, err, sizeof err) == SM_OK, "%s", err);
    sm_mesh mesh;
    sm_sharding_ref sh = harness_sharding(&mesh, "i=2", NULL, 0, "P('i')");
    sm_shape s = HARNESS_SHAPE(4, 4);
    sm_array *x = harness_array_iota(SM_F32, &s, 1);
    sm_array_info info;
    ck_assert_msg(sm_client_put(c, SM_F32, &s, x->data, &sh, "s", &info, err, sizeof err) == SM_OK,
                  "put: %s", err);
    sm_array_info_free(&info);
    sm_array_free(x);
    sm_client_close(c);

    /* This process's channels share one connection: one client. */
    sm_rpc_channel *a = channel();
    sm_rpc_stream *held[LIMIT];
    for (int k = 0; k < LIMIT; k++)
        held[k] = open_upload(a);
    harness_sleep_ms(300); /* both arrived and wait for their first message */

    /* a third Upload, and a Download: refused */
    sm_err e = finish_upload(open_upload(a), err, sizeof err);
    ck_assert_msg(e == SM_ERESOURCE, "a third stream gave %s: %s", sm_err_name(e), err);
    ck_assert_msg(strstr(err, "RESOURCE_EXHAUSTED") && strstr(err, "--max-client-streams 2") &&
                      strstr(err, "already has 2 streams open"),
                  "%s", err);
    Shmap__V1__DownloadRequest dreq = SHMAP__V1__DOWNLOAD_REQUEST__INIT;
    sm_rpc_stream *dl = NULL;
    ProtobufCMessage *m = NULL;
    ck_assert_int_eq(sm_rpc_sstream_open(a, DOWNLOAD, &dreq.base, 20000, &dl, err, sizeof err),
                     SM_OK);
    e = sm_rpc_sstream_recv(dl, &shmap__v1__data_chunk__descriptor, &m, err, sizeof err);
    sm_rpc_msg_free(m);
    sm_rpc_stream_free(dl);
    ck_assert_msg(e == SM_ERESOURCE, "a download gave %s: %s", sm_err_name(e), err);

    /* another client (a shmapctl process, its own connection) downloads
     * through the coordinator meanwhile */
    setenv("SHMAP_RELAY", "1", 1);
    harness_run r;
    char out[600];
    snprintf(out, sizeof out, "%s/s.npy", g->dir);
    ck_assert_int_eq(harness_shmapctl(g, &r, (const char *const[]){"get", "s", out, NULL}), 0);
    unsetenv("SHMAP_RELAY");
    ck_assert_msg(r.code == 0, "another client's get: exit %d: %s", r.code, r.err);
    harness_run_free(&r);

    /* one of the two ends: this client may open one again */
    sm_rpc_stream_free(held[0]); /* cancels it */
    for (int tries = 0;; tries++) {
        e = finish_upload(open_upload(a), err, sizeof err);
        if (e != SM_ERESOURCE)
            break;
        ck_assert_msg(tries < 50, "still refused after a stream ended: %s", err);
        harness_sleep_ms(50);
    }
    ck_assert_msg(e != SM_OK, "an empty upload gave OK");
    sm_rpc_stream_free(held[1]);
    sm_rpc_channel_free(a);
}
END_TEST

int main(void)
{
    return harness_run_suite(SUITE_CASE(suite_create("e2e_streams"), "streams", 60,
                                        SUITE_UNCHECKED(cluster_up, cluster_down),
                                        {test_limit_per_client}));
}
