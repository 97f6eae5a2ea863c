/* Robustness suite for the real processes: one shmap-coordinator
 * ($SHMAP_COORDINATOR_BIN) with two local workers of four devices, fed bad
 * input over real sockets:
 *  - every unary method of both services (paths from proto/shmap.proto):
 *    N random byte strings (0..512 bytes) and N mutations of valid requests
 *    (fields replaced by reflection: 9+ dims, negative sizes, 2^62, 10 KB
 *    names, counts past the limits; bit flips, truncation, inserted bytes,
 *    huge and overlong varints, field numbers out of range, wrong wire
 *    types, lying lengths), also from 4 clients at once;
 *  - upload streams (Upload, PutShard) broken in 25 designed ways plus
 *    random, raw and mutated sequences; downloads of bad boxes, devices and
 *    arrays; Exchange messages for jobs nobody runs; streams abandoned
 *    midway; an array deleted while it is read and resharded;
 *  - unknown methods (UNIMPLEMENTED, fast) and oversized messages
 *    (RESOURCE_EXHAUSTED, sent over raw gRPC since sm_rpc refuses them).
 * Every call must end with a status (never a transport failure, never an OK
 * reply that does not parse) within 5 s; after every batch every process is
 * alive and answers Health, both workers are alive in ListDevices, an array
 * uploaded at the start still downloads bit-exact, a pending array that saw
 * only garbage is still pending (and at the end takes a correct upload), and
 * every job the fuzzing submitted ends. Sanitizer reports in the processes'
 * log fail the suite.
 *
 * Runs with CK_NOFORK (gRPC is not fork-safe): the cluster is started once
 * by the shared harness (tests/harness.c) in a process group of its own and
 * killed at exit or on a fatal signal. The parts: rpc_fuzz_mut.c (the
 * mutations), rpc_fuzz_req.c (the methods, their request templates and the
 * designed upload streams), rpc_fuzz_stream.c (the stream fuzzing) and this
 * file (the cluster, its invariants, the unary fuzzing, races and the
 * tests). The fixed seed is printed; SM_FUZZ_SEED overrides it,
 * SM_FUZZ_N the number of cases per method and kind (default 500),
 * SM_FUZZ_VERBOSE prints every stream's status. A failing case is printed
 * in hex with the coordinator's log. */
#include <check.h>
#include <errno.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/support/alloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness_svc.h"
#include "rpc_fuzz.h"
#include "sm_ir.h"
#include "sm_rpc_msg.h"
#include "sm_rpc_proto.h"
#include "sm_svc_job.h"
#include "sm_time.h"
#include "suite_main.h"

/* ---- the cluster (one per suite) ------------------------------------------- */

fuzz_cluster cl;
int32_t mesh_devs[8];

void print_log(void)
{
    char path[300], line[512];
    snprintf(path, sizeof path, "%s/coordinator.log", cl.h->dir);
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    fprintf(stderr, "---- coordinator log (last lines) ----\n");
    long keep = 0;
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    keep = size > 8192 ? size - 8192 : 0;
    fseek(f, keep, SEEK_SET);
    while (fgets(line, sizeof line, f))
        fputs(line, stderr);
    fclose(f);
}

static void cluster_kill(void)
{
    if (cl.h && cl.h->pid > 0)
        kill(-cl.h->pid, SIGKILL);
}

/* A crash or a kill of this process takes the cluster with it. */
static void on_fatal(int sig)
{
    cluster_kill();
    signal(sig, SIG_DFL);
    raise(sig);
}

/* 1 if pid exists and is not a zombie. */
static int proc_alive(pid_t pid)
{
    char path[64], buf[256];
    if (kill(pid, 0) != 0)
        return 0;
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char *p = strrchr(buf, ')');
    return p && p[1] == ' ' && p[2] != 'Z' && p[2] != 'X';
}

static int health(sm_rpc_channel *ch)
{
    Grpc__Health__V1__HealthCheckRequest rq = GRPC__HEALTH__V1__HEALTH_CHECK_REQUEST__INIT;
    ProtobufCMessage *rep = NULL;
    char err[256];
    sm_err e = sm_rpc_unary(ch, "/grpc.health.v1.Health/Check", &rq.base,
                            &grpc__health__v1__health_check_response__descriptor, &rep, 3000, err,
                            sizeof err);
    int ok = e == SM_OK && ((Grpc__Health__V1__HealthCheckResponse *)rep)->status ==
                               GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING;
    sm_rpc_msg_free(rep);
    return ok;
}

/* ---- test data -------------------------------------------------------------- */

sm_err upload(sm_array_id id, const int32_t *devs, int ndev, sm_shape shape, const void *data,
              size_t nbytes, size_t chunk, char *err, size_t errlen)
{
    return harness_svc_put(cl.coord, id, devs, ndev, shape, data, nbytes, chunk, NULL, err, errlen);
}

static sm_err create(const char *name, const char *spec, sm_svc_create_array_reply *rep, char *err,
                     size_t errlen)
{
    sm_svc_create_array_req req = {0};
    req.name = name;
    req.dtype = SM_F32;
    req.has_shape = 1;
    req.shape = (sm_shape){2, {16, 32}};
    req.sharding.mesh_name = "m";
    ck_assert_int_eq(sm_pspec_parse(spec, &req.sharding.spec, err, errlen), SM_OK);
    req.kind = SM_PUT_WHOLE;
    req.deadline_ms = 600000;
    return sm_svc_coord_create_array(cl.coord, CALL_MS, &req, rep, err, errlen);
}

static sm_array_state state_of(sm_array_id id)
{
    return harness_svc_state(cl.coord, (sm_array_ref){id, NULL}, NULL, 0);
}

/* Every shard of id holds the values of salt. */
static void check_values(sm_array_id id, float salt)
{
    harness_svc_check_values(cl.coord, (sm_array_ref){id, NULL}, salt);
}

/* The invariants after every batch: every process alive and serving, both
 * workers alive in the registry, the kept array bit-exact, the garbage
 * target still pending and no array named fz_pending listed as ready. */
static void check_cluster(const char *batch)
{
    char err[512];
    int64_t t0 = sm_time_mono_ms();
    if (!proc_alive(cl.h->pid) || waitpid(cl.h->pid, NULL, WNOHANG) != 0) {
        print_log();
        ck_abort_msg("after %s: the coordinator is gone", batch);
    }
    for (int w = 0; w < 2; w++) {
        if (!proc_alive(cl.wpid[w])) {
            print_log();
            ck_abort_msg("after %s: worker pid %d is gone", batch, (int)cl.wpid[w]);
        }
        ck_assert_msg(health(cl.wch[w]), "after %s: worker %s does not answer Health", batch,
                      cl.waddr[w]);
    }
    ck_assert_msg(health(cl.coord), "after %s: the coordinator does not answer Health", batch);
    sm_worker_info *wi = NULL;
    int nw = 0, alive = 0;
    ck_assert_msg(sm_svc_coord_list_devices(cl.coord, CALL_MS, &wi, &nw, err, sizeof err) == SM_OK,
                  "after %s: ListDevices: %s", batch, err);
    for (int i = 0; i < nw; i++)
        alive += (wi[i].id.v == cl.wid[0] || wi[i].id.v == cl.wid[1]) && wi[i].alive;
    free(wi);
    ck_assert_msg(alive == 2, "after %s: %d of the 2 workers alive", batch, alive);
    check_values(cl.keep, 0.5f);
    ck_assert_int_eq(state_of(cl.pending), SM_ARRAY_PENDING);
    sm_array_info *list;
    int n;
    ck_assert_int_eq(sm_svc_coord_list_arrays(cl.coord, CALL_MS, &list, &n, err, sizeof err),
                     SM_OK);
    for (int i = 0; i < n; i++)
        ck_assert_msg(
            !(strncmp(list[i].name, "fz_pending", 10) == 0 && list[i].state == SM_ARRAY_READY),
            "after %s: garbage array '%s' is ready", batch, list[i].name);
    sm_array_info_list_free(list, n);
    fprintf(stderr, "fuzz: %-28s ok (invariants checked in %lld ms)\n", batch,
            (long long)(sm_time_mono_ms() - t0));
}

static void cluster_start(void)
{
    static const char *const args[] = {"--log-level", "error", NULL};
    harness_opts o = {.nworkers = 2, .devices_per_worker = 4, .coord_args = args};
    const char *s = getenv("SM_FUZZ_SEED");
    const char *sn = getenv("SM_FUZZ_N");
    char err[512];
    memset(&cl, 0, sizeof cl);
    cl.seed = s && *s ? strtoull(s, NULL, 0) : 20261122;
    cl.n = sn && *sn ? atoi(sn) : 500;
    fprintf(stderr, "fuzz: seed %llu (SM_FUZZ_SEED), %d cases per kind (SM_FUZZ_N)\n",
            (unsigned long long)cl.seed, cl.n);
    sm_rpc_init();
    ck_assert_msg(harness_cluster_start(&o, &cl.h, err, sizeof err) == SM_OK, "%s", err);
    atexit(cluster_kill);
    static const int fatal[] = {SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGTERM, SIGINT, SIGHUP};
    for (size_t i = 0; i < sizeof fatal / sizeof fatal[0]; i++)
        signal(fatal[i], on_fatal);
    cl.coord = harness_svc_channel(cl.h);

    sm_worker_info *wi = NULL;
    int nw = 0;
    ck_assert_msg(sm_svc_coord_list_devices(cl.coord, CALL_MS, &wi, &nw, err, sizeof err) == SM_OK,
                  "%s", err);
    ck_assert_int_eq(nw, 2);
    for (int w = 0; w < 2; w++) {
        int k = wi[0].process_index == w ? 0 : 1;
        cl.wid[w] = wi[k].id.v;
        snprintf(cl.waddr[w], sizeof cl.waddr[w], "%s", wi[k].address);
        ck_assert_int_eq(wi[k].ndevices, 4);
        memcpy(cl.wdev[w], wi[k].devices, sizeof cl.wdev[w]);
        cl.wch[w] = harness_svc_dial(cl.waddr[w], NULL);
    }
    free(wi);
    ck_assert_int_eq(harness_worker_pids(cl.h, cl.wpid, 2), 2);

    sm_mesh_info mi = harness_svc_mesh(cl.coord, "m", "i=2,j=4");
    ck_assert_int_eq(mi.mesh.ndevices, 8);
    memcpy(mesh_devs, mi.mesh.devices, sizeof mesh_devs);
    /* the kept array, uploaded with correct messages */
    sm_svc_create_array_reply rep;
    ck_assert_msg(create("fz_keep", "P('i','j')", &rep, err, sizeof err) == SM_OK, "%s", err);
    for (int t = 0; t < rep.ntargets; t++) {
        size_t nb;
        float *d = harness_box_f32(&rep.targets[t].global_index, 0.5f, &nb);
        ck_assert_msg(upload(rep.array.id, rep.targets[t].devices, rep.targets[t].ndevices,
                             rep.array.shard_shape, d, nb, 100, err, sizeof err) == SM_OK,
                      "%s", err);
        free(d);
    }
    cl.keep = rep.array.id;
    sm_svc_create_array_reply_free(&rep);
    /* the garbage target: replicated, one target of all 8 devices */
    ck_assert_msg(create("fz_pending", "P()", &rep, err, sizeof err) == SM_OK, "%s", err);
    ck_assert_int_eq(rep.ntargets, 1);
    cl.pending = rep.array.id;
    sm_svc_create_array_reply_free(&rep);
    build_templates();
    check_cluster("start");
}

/* Ends the cluster and removes its dir (with the checkpoints written). */
static void cluster_stop(void)
{
    for (int w = 0; w < 2; w++)
        if (cl.wch[w])
            sm_rpc_channel_free(cl.wch[w]);
    if (cl.coord)
        sm_rpc_channel_free(cl.coord);
    cl.coord = cl.wch[0] = cl.wch[1] = NULL;
    harness_cluster_stop(cl.h);
    cl.h = NULL;
}

static sm_rpc_channel *chan(int worker)
{
    return worker ? cl.wch[0] : cl.coord;
}

static pid_t pid_of(int worker)
{
    return worker ? cl.wpid[0] : cl.h->pid;
}

int transport_failure(sm_err e, const char *err)
{
    static const char *const marks[] = {"Socket closed",
                                        "Connection reset",
                                        "failed to connect",
                                        "Broken pipe",
                                        "Stream removed",
                                        "RST_STREAM",
                                        "GOAWAY",
                                        "Transport closed",
                                        "Connection refused",
                                        "Endpoint read failed"};
    if (e != SM_EUNAVAILABLE && e != SM_EINTERNAL)
        return 0;
    const char *d = strstr(err, ": ");
    d = d ? d + 2 : err;
    for (size_t i = 0; i < sizeof marks / sizeof marks[0]; i++)
        if (strncmp(d, marks[i], strlen(marks[i])) == 0)
            return 1;
    return 0;
}

void judge(const char *path, int worker, sm_err e, const char *err, int64_t ms, const char *kind,
           const uint8_t *b, size_t n, int *codes)
{
    int status = sm_rpc_status_from_err(e);
    if (codes && status >= 0 && status < 17)
        codes[status]++;
    const char *why = NULL;
    if (ms >= PROMPT_MS) /* DEADLINE_EXCEEDED before then is the server's answer */
        why = "no answer within 5 s";
    else if (e == SM_EFORMAT)
        why = "an OK reply that does not parse";
    else if (transport_failure(e, err))
        why = "a transport failure";
    else if ((e == SM_EUNAVAILABLE || e == SM_EINTERNAL) && !proc_alive(pid_of(worker)))
        why = "the process died";
    if (!why)
        return;
    if (b)
        fuzz_hexdump(kind, b, n);
    print_log();
    ck_abort_msg("%s (%s): %s after %lld ms: %s", path, kind, why, (long long)ms, err);
}

/* Sends b as m's request; judges the answer. */
static void fuzz_unary(method *m, const uint8_t *b, size_t n, const char *kind)
{
    if (touches_kept(m, b, n)) {
        m->skipped++;
        return;
    }
    fuzz_raw_msg rm;
    ProtobufCMessage *rep = NULL;
    char err[1024] = "";
    int64_t t0 = sm_time_mono_ms();
    sm_err e = sm_rpc_unary(chan(m->worker), m->path, fuzz_raw_of(&rm, b, n), m->rep, &rep, CALL_MS,
                            err, sizeof err);
    sm_rpc_msg_free(rep);
    judge(m->path, m->worker, e, err, sm_time_mono_ms() - t0, kind, b, n, m->codes);
}

static void fuzz_random(int worker)
{
    fuzz_rng r = {cl.seed ^ (worker ? 0x5157u : 0xC00Du)};
    uint8_t b[MAX_RAW];
    for (int i = 0; i < nmethods; i++) {
        if (methods[i].worker != worker)
            continue;
        for (int k = 0; k < cl.n; k++) {
            size_t n = fuzz_below(&r, 4) == 0 ? fuzz_below(&r, 8) : fuzz_below(&r, MAX_RAW + 1);
            for (size_t j = 0; j < n; j++)
                b[j] = (uint8_t)fuzz_rnd(&r);
            fuzz_unary(&methods[i], b, n, "random bytes");
        }
    }
}

/* N mutations of every method's valid request: field values replaced by
 * reflection (9+ dims, negative sizes, 2^62, 10 KB names, ...), then zero to
 * three byte-level mutations (bit flips, truncation, huge varints, field
 * numbers out of range, wrong wire types, lying lengths). */
/* A mutation of one of m's valid requests into *x (malloc'd): field values
 * replaced by reflection (9+ dims, negative sizes, 2^62, 10 KB names, ...)
 * and/or byte-level mutations (bit flips, truncation, huge varints, field
 * numbers out of range, wrong wire types, lying lengths). Returns the kind.
 * Thread-safe (r is the caller's). */
static const char *make_mutant(fuzz_rng *r, const method *m, fuzz_buf *x)
{
    int t = (int)fuzz_below(r, (uint64_t)m->nt);
    /* mostly field-level (deeper into the handlers), some bytes */
    uint64_t mix = fuzz_below(r, 5);
    int nsem = mix < 3 ? 1 + (int)fuzz_below(r, 2) : mix == 3 ? 0 : 1;
    int nbyte = mix < 3 ? 0 : 1 + (int)fuzz_below(r, 3);
    ProtobufCMessage *p =
        nsem ? protobuf_c_message_unpack(m->req, NULL, m->ntmpl[t], m->tmpl[t]) : NULL;
    memset(x, 0, sizeof *x);
    if (p) {
        for (int s = 0; s < nsem; s++)
            fuzz_mutate_msg(r, p, 0);
        x->b = fuzz_pack(p, &x->n);
        sm_rpc_msg_free(p);
    } else {
        x->b = malloc(m->ntmpl[t] + 1);
        memcpy(x->b, m->tmpl[t], m->ntmpl[t]);
        x->n = m->ntmpl[t];
    }
    x->cap = x->n + 1;
    for (int s = 0; s < nbyte; s++)
        fuzz_mutate_bytes(r, x);
    return nbyte ? "mutated bytes" : "mutated fields";
}

/* The valid requests of every method of one service, then N mutations. */
static void fuzz_mutated(int worker)
{
    fuzz_rng r = {cl.seed ^ (worker ? 0xB17Eu : 0xFACEu)};
    for (int i = 0; i < nmethods; i++) {
        method *m = &methods[i];
        if (m->worker != worker)
            continue;
        /* the valid requests themselves are answered (may be refused) */
        for (int t = 0; t < m->nt; t++)
            fuzz_unary(m, m->tmpl[t], m->ntmpl[t], "valid template");
        for (int k = 0; k < cl.n; k++) {
            fuzz_buf x;
            const char *kind = make_mutant(&r, m, &x);
            if (x.n <= SM_RPC_MAX_MSG)
                fuzz_unary(m, x.b, x.n, kind);
            free(x.b);
        }
    }
}

/* ---- many clients at once --------------------------------------------------- */

typedef struct {
    pthread_t th;
    uint64_t seed;
    int n;
    char fail[1024]; /* the first failure, "" for none */
} conc_arg;

/* One of several concurrent clients: mutated requests to every method,
 * interleaved with downloads of the kept array, which must keep working. */
static void *conc_main(void *p)
{
    conc_arg *a = p;
    fuzz_rng r = {a->seed};
    for (int k = 0; k < a->n && !a->fail[0]; k++) {
        char err[1024] = "";
        int64_t t0 = sm_time_mono_ms();
        if (fuzz_below(&r, 6) == 0) {
            sm_svc_download_req req = {{cl.keep, NULL}, mesh_devs[fuzz_below(&r, 8)], 0, {0}};
            sm_svc_download_stream *st = NULL;
            sm_svc_chunk c;
            int end = 0;
            int64_t got = 0, total = -1;
            sm_err e = sm_svc_download_open(cl.coord, 0, &req, CALL_MS, &st, err, sizeof err);
            while (!e && !(e = sm_svc_download_recv(st, &c, &end, err, sizeof err)) && !end) {
                if (c.has_meta)
                    total = c.total_bytes;
                got += (int64_t)c.len;
            }
            sm_svc_download_free(st);
            if (e || got != total || got != 8 * 8 * 4)
                snprintf(
                    a->fail, sizeof a->fail,
                    "download of the kept array during the fuzzing: %lld of %lld bytes: %.400s",
                    (long long)got, (long long)total, err);
            continue;
        }
        method *m = &methods[fuzz_below(&r, nmethods)];
        fuzz_buf x;
        const char *kind = make_mutant(&r, m, &x);
        if (x.n <= SM_RPC_MAX_MSG && !touches_kept(m, x.b, x.n)) {
            fuzz_raw_msg rm;
            ProtobufCMessage *rep = NULL;
            sm_err e = sm_rpc_unary(chan(m->worker), m->path, fuzz_raw_of(&rm, x.b, x.n), m->rep,
                                    &rep, CALL_MS, err, sizeof err);
            sm_rpc_msg_free(rep);
            int64_t ms = sm_time_mono_ms() - t0;
            if (ms >= PROMPT_MS || e == SM_EFORMAT || transport_failure(e, err))
                snprintf(a->fail, sizeof a->fail, "%s (%s, concurrent): %lld ms: %.400s", m->path,
                         kind, (long long)ms, err);
        }
        free(x.b);
    }
    return NULL;
}

/* Mutated requests from 4 clients at once. */
static void fuzz_concurrent(void)
{
    enum { NTH = 4 };
    conc_arg a[NTH];
    for (int t = 0; t < NTH; t++) {
        memset(&a[t], 0, sizeof a[t]);
        a[t].seed = cl.seed ^ (0xC0C0u + (uint64_t)t);
        a[t].n = cl.n * 2;
        ck_assert_int_eq(pthread_create(&a[t].th, NULL, conc_main, &a[t]), 0);
    }
    for (int t = 0; t < NTH; t++)
        pthread_join(a[t].th, NULL);
    for (int t = 0; t < NTH; t++)
        if (a[t].fail[0]) {
            print_log();
            ck_abort_msg("client %d: %s", t, a[t].fail);
        }
}

static void print_codes(int worker)
{
    for (int i = 0; i < nmethods; i++) {
        const method *m = &methods[i];
        if (m->worker != worker)
            continue;
        char line[512];
        int len = snprintf(line, sizeof line, "fuzz: %-36s", m->path);
        for (int c = 0; c < 17; c++)
            if (m->codes[c])
                len += snprintf(line + len, sizeof line - (size_t)len, " %s=%d",
                                sm_rpc_status_name(c), m->codes[c]);
        if (m->skipped)
            snprintf(line + len, sizeof line - (size_t)len, " (skipped %d)", m->skipped);
        fprintf(stderr, "%s\n", line);
    }
}

/* ---- raw gRPC, for what sm_rpc refuses to send -------------------------------- */

/* Sends n bytes (b, or a repeated pattern) to path on target over a channel
 * without a send limit; returns the gRPC status and fills details. */
static int raw_grpc_call(const char *target, const char *path, const uint8_t *pat, size_t npat,
                         size_t n, char *details, size_t dlen)
{
    grpc_arg arg;
    arg.type = GRPC_ARG_INTEGER;
    arg.key = GRPC_ARG_MAX_SEND_MESSAGE_LENGTH;
    arg.value.integer = -1;
    grpc_channel_args ca = {1, &arg};
    grpc_channel_credentials *cr = grpc_insecure_credentials_create();
    grpc_channel *ch = grpc_channel_create(target, cr, &ca);
    grpc_channel_credentials_release(cr);
    grpc_completion_queue *cq = grpc_completion_queue_create_for_pluck(NULL);
    grpc_slice method = grpc_slice_from_copied_string(path);
    gpr_timespec dl =
        gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC), gpr_time_from_millis(CALL_MS, GPR_TIMESPAN));
    grpc_call *call =
        grpc_channel_create_call(ch, NULL, GRPC_PROPAGATE_DEFAULTS, cq, method, NULL, dl, NULL);
    grpc_slice_unref(method);
    grpc_slice payload = grpc_slice_malloc(n);
    uint8_t *p = GRPC_SLICE_START_PTR(payload);
    for (size_t i = 0; i < n; i++)
        p[i] = pat[i % npat];
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&payload, 1);
    grpc_slice_unref(payload);
    grpc_metadata_array init_md, trail;
    grpc_metadata_array_init(&init_md);
    grpc_metadata_array_init(&trail);
    grpc_byte_buffer *recv = NULL;
    grpc_status_code status = GRPC_STATUS_UNKNOWN;
    grpc_slice det = grpc_empty_slice();
    grpc_op ops[6];
    memset(ops, 0, sizeof ops);
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[1].op = GRPC_OP_SEND_MESSAGE;
    ops[1].data.send_message.send_message = bb;
    ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
    ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
    ops[3].data.recv_initial_metadata.recv_initial_metadata = &init_md;
    ops[4].op = GRPC_OP_RECV_MESSAGE;
    ops[4].data.recv_message.recv_message = &recv;
    ops[5].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    ops[5].data.recv_status_on_client.trailing_metadata = &trail;
    ops[5].data.recv_status_on_client.status = &status;
    ops[5].data.recv_status_on_client.status_details = &det;
    int tag;
    ck_assert_int_eq(grpc_call_start_batch(call, ops, 6, &tag, NULL), GRPC_CALL_OK);
    grpc_event ev = grpc_completion_queue_pluck(cq, &tag, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
    ck_assert_int_eq(ev.type, GRPC_OP_COMPLETE);
    char *d = grpc_slice_to_c_string(det);
    snprintf(details, dlen, "%s", d);
    gpr_free(d);
    if (recv)
        grpc_byte_buffer_destroy(recv);
    grpc_byte_buffer_destroy(bb);
    grpc_slice_unref(det);
    grpc_metadata_array_destroy(&init_md);
    grpc_metadata_array_destroy(&trail);
    grpc_call_unref(call);
    grpc_completion_queue_shutdown(cq);
    while (grpc_completion_queue_pluck(cq, NULL, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type !=
           GRPC_QUEUE_SHUTDOWN)
        ;
    grpc_completion_queue_destroy(cq);
    grpc_channel_destroy(ch);
    return (int)status;
}

/* ---- tests -------------------------------------------------------------------- */

START_TEST(test_raw_message_packs_exactly)
{
    fuzz_rng r = {cl.seed};
    for (int k = 0; k < 200; k++) {
        uint8_t b[64];
        size_t n = fuzz_below(&r, sizeof b + 1);
        for (size_t i = 0; i < n; i++)
            b[i] = (uint8_t)fuzz_rnd(&r);
        fuzz_raw_msg rm;
        size_t got;
        uint8_t *p = fuzz_pack(fuzz_raw_of(&rm, b, n), &got);
        ck_assert_uint_eq(got, n);
        ck_assert(memcmp(p, b, n) == 0);
        free(p);
    }
}
END_TEST

START_TEST(test_coordinator_random_bytes)
{
    fuzz_random(0);
    check_cluster("coordinator random bytes");
}
END_TEST

/* Every job the fuzzing submitted ends (DONE, FAILED or CANCELLED) within
 * 15 s: a bad program may fail, never run forever. */
static void check_jobs_end(void)
{
    int64_t until = sm_time_mono_ms() + 15000;
    int counts[6] = {0};
    for (uint64_t id = 1; id <= 4096; id++) {
        Shmap__V1__JobRef jr = SHMAP__V1__JOB_REF__INIT;
        jr.job_id = id;
        ProtobufCMessage *rep = NULL;
        char err[512];
        int state = 0;
        do {
            sm_rpc_msg_free(rep);
            rep = NULL;
            int64_t left = until - sm_time_mono_ms();
            jr.wait_ms = left > 1000 ? 1000 : left > 0 ? (uint32_t)left : 0;
            sm_err e =
                sm_rpc_unary(cl.coord, C_PATH("WaitJob"), &jr.base,
                             &shmap__v1__job_info__descriptor, &rep, CALL_MS, err, sizeof err);
            if (e == SM_ENOTFOUND)
                break;
            ck_assert_msg(e == SM_OK, "WaitJob %llu: %s", (unsigned long long)id, err);
            state = ((Shmap__V1__JobInfo *)rep)->state;
        } while ((state == SHMAP__V1__JOB_STATE__JOB_QUEUED ||
                  state == SHMAP__V1__JOB_STATE__JOB_RUNNING) &&
                 sm_time_mono_ms() < until);
        sm_rpc_msg_free(rep);
        if (!state)
            break; /* ids are dense: the first unknown one ends the list */
        counts[state >= 0 && state < 6 ? state : 0]++;
        ck_assert_msg(state != SHMAP__V1__JOB_STATE__JOB_QUEUED &&
                          state != SHMAP__V1__JOB_STATE__JOB_RUNNING,
                      "job %llu still %s after 15 s", (unsigned long long)id,
                      state == SHMAP__V1__JOB_STATE__JOB_QUEUED ? "queued" : "running");
    }
    fprintf(stderr, "fuzz: jobs submitted by the fuzzing: %d done, %d failed, %d cancelled\n",
            counts[SHMAP__V1__JOB_STATE__JOB_DONE], counts[SHMAP__V1__JOB_STATE__JOB_FAILED],
            counts[SHMAP__V1__JOB_STATE__JOB_CANCELLED]);
}

START_TEST(test_coordinator_mutated)
{
    fuzz_mutated(0);
    print_codes(0);
    check_jobs_end();
    check_cluster("coordinator mutations");
}
END_TEST

START_TEST(test_worker_random_bytes)
{
    fuzz_random(1);
    check_cluster("worker random bytes");
}
END_TEST

START_TEST(test_worker_mutated)
{
    fuzz_mutated(1);
    print_codes(1);
    check_cluster("worker mutations");
}
END_TEST

/* ---- races: an array deleted while it is read and resharded ------------------- */

typedef struct {
    sm_array_id id;
    int what; /* 0: download every shard, 1: delete, 2: reshard */
    int delay_us;
    char fail[1024];
} race_arg;

static void *race_main(void *p)
{
    race_arg *a = p;
    char err[1024] = "";
    int64_t t0 = sm_time_mono_ms();
    sm_err e = SM_OK;
    if (a->delay_us)
        usleep((useconds_t)a->delay_us);
    if (a->what == 0) {
        for (int d = 0; d < 8 && e != SM_ENOTFOUND; d++) {
            sm_svc_download_req req = {{a->id, NULL}, mesh_devs[d], 0, {0}};
            sm_svc_download_stream *st = NULL;
            sm_svc_chunk c;
            int end = 0;
            e = sm_svc_download_open(cl.coord, 0, &req, CALL_MS, &st, err, sizeof err);
            while (!e && !(e = sm_svc_download_recv(st, &c, &end, err, sizeof err)) && !end)
                ;
            sm_svc_download_free(st);
        }
    } else if (a->what == 1) {
        e = sm_svc_coord_delete(cl.coord, CALL_MS, (sm_array_ref){a->id, NULL}, err, sizeof err);
    } else {
        sm_svc_reshard_req rq = {0};
        sm_array_info info;
        rq.array.id = a->id;
        rq.sharding.mesh_name = "m";
        e = sm_pspec_parse("P(None, 'j')", &rq.sharding.spec, err, sizeof err);
        if (!e && !(e = sm_svc_coord_reshard(cl.coord, CALL_MS, &rq, &info, err, sizeof err))) {
            sm_svc_coord_delete(cl.coord, CALL_MS, (sm_array_ref){info.id, NULL}, err, sizeof err);
            sm_array_info_free(&info);
        }
    }
    int64_t ms = sm_time_mono_ms() - t0;
    if (ms >= PROMPT_MS || transport_failure(e, err) || e == SM_EFORMAT)
        snprintf(a->fail, sizeof a->fail, "race %d: %lld ms: %.400s", a->what, (long long)ms, err);
    return NULL;
}

/* An array made by resharding the kept one is downloaded, resharded and
 * deleted at once, many times. */
static void fuzz_races(void)
{
    char err[1024];
    fuzz_rng r = {cl.seed ^ 0x4ACEu};
    for (int k = 0; k < cl.n / 10 + 2; k++) {
        sm_svc_reshard_req rq = {0};
        sm_array_info info;
        rq.array.id = cl.keep;
        rq.sharding.mesh_name = "m";
        ck_assert_int_eq(sm_pspec_parse("P('j', 'i')", &rq.sharding.spec, err, sizeof err), SM_OK);
        ck_assert_msg(sm_svc_coord_reshard(cl.coord, CALL_MS, &rq, &info, err, sizeof err) == SM_OK,
                      "%s", err);
        race_arg a[3];
        pthread_t th[3];
        for (int t = 0; t < 3; t++) {
            memset(&a[t], 0, sizeof a[t]);
            a[t].id = info.id;
            a[t].what = t;
            a[t].delay_us = (int)fuzz_below(&r, 3000);
            ck_assert_int_eq(pthread_create(&th[t], NULL, race_main, &a[t]), 0);
        }
        for (int t = 0; t < 3; t++)
            pthread_join(th[t], NULL);
        sm_array_info_free(&info);
        for (int t = 0; t < 3; t++)
            if (a[t].fail[0]) {
                print_log();
                ck_abort_msg("%s", a[t].fail);
            }
    }
}

START_TEST(test_races)
{
    fuzz_races();
    check_cluster("delete while read/resharded");
}
END_TEST

START_TEST(test_concurrent_clients)
{
    fuzz_concurrent();
    check_cluster("concurrent clients");
}
END_TEST

START_TEST(test_upload_streams)
{
    fuzz_uploads();
    check_cluster("upload streams");
}
END_TEST

START_TEST(test_download_boxes)
{
    fuzz_downloads();
    check_cluster("download boxes");
}
END_TEST

START_TEST(test_exchange_unknown_jobs)
{
    fuzz_exchange();
    check_cluster("exchange");
}
END_TEST

START_TEST(test_aborted_streams)
{
    fuzz_aborts();
    check_cluster("aborted streams");
}
END_TEST

START_TEST(test_unknown_method)
{
    static const char *const paths[] = {"/shmap.v1.Coordinator/Nope",
                                        "/shmap.v1.Worker/Nope",
                                        "/nope.Svc/X",
                                        "/shmap.v1.Coordinator/",
                                        "/shmap.v1.Worker/Upload",
                                        "/shmap.v1.Coordinator/PutShard",
                                        "/x"};
    char err[1024];
    Shmap__V1__Empty empty = SHMAP__V1__EMPTY__INIT;
    for (int w = 0; w < 3; w++) {
        sm_rpc_channel *ch = w ? cl.wch[w - 1] : cl.coord;
        for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
            ProtobufCMessage *rep = NULL;
            int64_t t0 = sm_time_mono_ms();
            sm_err e = sm_rpc_unary(ch, paths[i], &empty.base, &shmap__v1__empty__descriptor, &rep,
                                    CALL_MS, err, sizeof err);
            int64_t ms = sm_time_mono_ms() - t0;
            sm_rpc_msg_free(rep);
            ck_assert_msg(e == SM_EUNIMPLEMENTED, "%s on %s: %s", paths[i],
                          w ? cl.waddr[w - 1] : "the coordinator", err);
            ck_assert_msg(ms < 1000, "%s took %lld ms", paths[i], (long long)ms);
        }
        /* and as a stream */
        fuzz_seq s = {0};
        fuzz_seq_add(&s, &empty.base);
        ck_assert_int_eq(run_cstream(ch, w > 0, "/shmap.v1.Nope/Stream", &s,
                                     &shmap__v1__empty__descriptor, -1, "unknown stream", err,
                                     sizeof err),
                         SM_EUNIMPLEMENTED);
        fuzz_seq_free(&s);
    }
    check_cluster("unknown methods");
}
END_TEST

START_TEST(test_oversized_message)
{
    char det[512], err[512];
    const uint8_t zero = 0x0a; /* field 1, length-delimited: whatever; it is too big */
    struct {
        const char *target, *path;
    } to[] = {{cl.h->target, C_PATH("CreateArray")},
              {cl.h->target, C_PATH("Upload")},
              {cl.waddr[0], W_PATH("Assemble")},
              {cl.waddr[1], W_PATH("PutShard")}};
    for (size_t i = 0; i < sizeof to / sizeof to[0]; i++) {
        int64_t t0 = sm_time_mono_ms();
        int st = raw_grpc_call(to[i].target, to[i].path, &zero, 1, SM_RPC_MAX_MSG + (1 << 20), det,
                               sizeof det);
        ck_assert_msg(st == GRPC_STATUS_RESOURCE_EXHAUSTED, "%s: %s: %s", to[i].path,
                      sm_rpc_status_name(st), det);
        ck_assert_int_lt(sm_time_mono_ms() - t0, PROMPT_MS);
    }
    /* sm_rpc itself refuses to send one */
    Shmap__V1__CreateArrayRequest ca = SHMAP__V1__CREATE_ARRAY_REQUEST__INIT;
    char *big = malloc(SM_RPC_MAX_MSG + 2);
    memset(big, 'n', SM_RPC_MAX_MSG + 1);
    big[SM_RPC_MAX_MSG + 1] = 0;
    ca.name = big;
    ProtobufCMessage *rep = NULL;
    ck_assert_int_eq(sm_rpc_unary(cl.coord, C_PATH("CreateArray"), &ca.base,
                                  &shmap__v1__create_array_reply__descriptor, &rep, CALL_MS, err,
                                  sizeof err),
                     SM_ERESOURCE);
    free(big);
    /* 1 MiB of empty sub-messages (each allocated when parsed): refused */
    static const uint8_t shards[] = {0x1a, 0x00}, args[] = {0x12, 0x00};
    int st = raw_grpc_call(cl.waddr[0], W_PATH("Assemble"), shards, 2, 1 << 20, det, sizeof det);
    ck_assert_msg(st != GRPC_STATUS_OK && st != GRPC_STATUS_UNAVAILABLE &&
                      st != GRPC_STATUS_DEADLINE_EXCEEDED,
                  "Assemble of 512k shards: %s: %s", sm_rpc_status_name(st), det);
    st = raw_grpc_call(cl.h->target, C_PATH("SubmitJob"), args, 2, 1 << 20, det, sizeof det);
    ck_assert_msg(st != GRPC_STATUS_OK && st != GRPC_STATUS_UNAVAILABLE &&
                      st != GRPC_STATUS_DEADLINE_EXCEEDED,
                  "SubmitJob of 512k args: %s: %s", sm_rpc_status_name(st), det);
    check_cluster("oversized messages");
}
END_TEST

/* What the fuzzing found that is fixed or bounded: a new shard larger than
 * the host's memory (4 TiB) is refused at once, not allocated. */
START_TEST(test_regressions)
{
    char err[1024];
    /* the first Assemble template (one 8x8 piece of the kept array) with a
     * shard of [2^20, 2^20] */
    const method *m = method_of(1, "Assemble");
    Shmap__V1__AssembleRequest *ar = (Shmap__V1__AssembleRequest *)protobuf_c_message_unpack(
        m->req, NULL, m->ntmpl[0], m->tmpl[0]);
    ck_assert_ptr_nonnull(ar);
    ck_assert_uint_eq(ar->n_shards, 1);
    ar->array_id = 4096;
    ar->shards[0]->shape->dims[0] = ar->shards[0]->shape->dims[1] = (int64_t)1 << 20;
    ProtobufCMessage *rep = NULL;
    int64_t t0 = sm_time_mono_ms();
    sm_err e = sm_rpc_unary(cl.wch[0], W_PATH("Assemble"), &ar->base,
                            &shmap__v1__assemble_reply__descriptor, &rep, CALL_MS, err, sizeof err);
    sm_rpc_msg_free(rep);
    sm_rpc_msg_free(&ar->base);
    ck_assert_msg(e == SM_ERESOURCE, "%s", err);
    ck_assert_int_lt(sm_time_mono_ms() - t0, 1000);
    check_cluster("regressions");
}
END_TEST

/* Last: the pending array that saw only garbage still takes a correct
 * upload (once the coordinator has seen every aborted stream end) and then
 * holds exactly that data. */
START_TEST(test_pending_still_usable)
{
    size_t nb;
    uint8_t *data = full_data(0.25f, &nb);
    char err[512];
    sm_err e;
    sm_shape shape = {2, {16, 32}};
    int64_t until = sm_time_mono_ms() + 5000;
    while ((e = upload(cl.pending, mesh_devs, 8, shape, data, nb, 300, err, sizeof err)) ==
               SM_EPRECONDITION &&
           sm_time_mono_ms() < until)
        harness_sleep_ms(50);
    ck_assert_msg(e == SM_OK, "%s", err);
    free(data);
    ck_assert_int_eq(state_of(cl.pending), SM_ARRAY_READY);
    check_values(cl.pending, 0.25f);
    check_values(cl.keep, 0.5f);
}
END_TEST

/* Sanitizer builds: the processes' reports (their stderr is the log) fail
 * the suite even when the process survived. */
START_TEST(test_no_sanitizer_reports)
{
    char path[300], line[1024];
    snprintf(path, sizeof path, "%s/coordinator.log", cl.h->dir);
    FILE *f = fopen(path, "r");
    ck_assert_ptr_nonnull(f);
    int bad = 0;
    while (fgets(line, sizeof line, f))
        bad |= strstr(line, "ERROR: AddressSanitizer") || strstr(line, "runtime error:") ||
               strstr(line, "ERROR: LeakSanitizer");
    fclose(f);
    if (bad)
        print_log();
    ck_assert_msg(!bad, "a process reported a sanitizer error (log above)");
}
END_TEST

static Suite *fuzz_suite(void)
{
    return SUITE_CASE(
        suite_create("rpc_fuzz_proc"), "fuzz", 600, SUITE_UNCHECKED(cluster_start, cluster_stop),
        {test_raw_message_packs_exactly}, {test_unknown_method}, {test_coordinator_random_bytes},
        {test_worker_random_bytes}, {test_coordinator_mutated}, {test_worker_mutated},
        {test_concurrent_clients}, {test_races}, {test_upload_streams}, {test_download_boxes},
        {test_exchange_unknown_jobs}, {test_aborted_streams}, {test_oversized_message},
        {test_regressions}, {test_pending_still_usable}, {test_no_sanitizer_reports});
}

int main(void)
{
    int rc = harness_run_suite(fuzz_suite());
    templates_free();
    return rc;
}
