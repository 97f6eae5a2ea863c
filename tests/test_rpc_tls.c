/* test_rpc_tls: sm_rpc_tls (reading and checking TLS files) and TLS
 * servers and channels in one process, on loopback, with certificates made
 * by scripts/tls_certs.sh (openssl) at start: every refusal of
 * sm_rpc_tls_create with its code and the file it names; PEM text instead
 * of paths; a server that requires client certificates; one that only
 * verifies them, whose cluster_only methods refuse callers without one;
 * which listen addresses count as loopback. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "sm_rpc_msg.h"
#include "sm_rpc_proto.h"
#include "suite_main.h"
#include "svc_testutil.h"

#define P_OPEN    "/shmap.test.Echo/Unary"
#define P_CLUSTER "/shmap.test.Echo/Upload" /* any other path; served unary here */

static char g_dir[] = "/tmp/shmap-tls-XXXXXX";
static char g_ca[300], g_cert[300], g_key[300], g_ccert[300], g_ckey[300], g_xcert[300],
    g_xkey[300], g_xca[300], g_notpem[300];

static char *slurp(const char *file)
{
    FILE *f = fopen(file, "r");
    char *buf = calloc(1, 65536);
    ck_assert(f && buf);
    buf[fread(buf, 1, 65535, f)] = 0;
    fclose(f);
    return buf;
}

static void certs_make(void)
{
    const char *script = getenv("SM_TLS_CERTS");
    char cmd[1024];
    if (!script || !mkdtemp(g_dir)) {
        fprintf(stderr, "test_rpc_tls: SM_TLS_CERTS is not set or no temp dir\n");
        exit(1);
    }
    snprintf(cmd, sizeof cmd, "bash '%s' %s/a >/dev/null && bash '%s' %s/b >/dev/null", script,
             g_dir, script, g_dir);
    if (system(cmd) != 0) {
        fprintf(stderr, "test_rpc_tls: %s failed (is openssl installed?)\n", script);
        exit(1);
    }
    snprintf(g_ca, sizeof g_ca, "%s/a/ca.pem", g_dir);
    snprintf(g_cert, sizeof g_cert, "%s/a/cluster.pem", g_dir);
    snprintf(g_key, sizeof g_key, "%s/a/cluster.key", g_dir);
    snprintf(g_ccert, sizeof g_ccert, "%s/a/client.pem", g_dir);
    snprintf(g_ckey, sizeof g_ckey, "%s/a/client.key", g_dir);
    snprintf(g_xca, sizeof g_xca, "%s/b/ca.pem", g_dir);
    snprintf(g_xcert, sizeof g_xcert, "%s/b/cluster.pem", g_dir);
    snprintf(g_xkey, sizeof g_xkey, "%s/b/cluster.key", g_dir);
    snprintf(g_notpem, sizeof g_notpem, "%s/notpem.txt", g_dir);
    FILE *f = fopen(g_notpem, "w");
    fputs("not a certificate\n", f);
    fclose(f);
}

START_TEST(test_create_rows)
{
    char missing[320];
    snprintf(missing, sizeof missing, "%s/none.pem", g_dir);
    const struct {
        const char *cert, *key, *ca;
        sm_err want;
        const char *words, *names; /* in the sentence */
        int has_cert;
    } rows[] = {
        {NULL, NULL, NULL, SM_OK, NULL, NULL, 0},
        {"", "", "", SM_OK, NULL, NULL, 0},
        {NULL, NULL, g_ca, SM_OK, NULL, NULL, 0},
        {g_cert, g_key, g_ca, SM_OK, NULL, NULL, 1},
        {g_ccert, g_ckey, g_ca, SM_OK, NULL, NULL, 1},
        {g_cert, NULL, g_ca, SM_EINVAL, "without its private key", NULL, 0},
        {NULL, g_key, g_ca, SM_EINVAL, "without its certificate", NULL, 0},
        {g_cert, g_key, NULL, SM_EINVAL, "CA certificate", NULL, 0},
        {g_cert, g_key, missing, SM_EIO, "cannot read the TLS CA file", missing, 0},
        {missing, g_key, g_ca, SM_EIO, "cannot read the TLS certificate file", missing, 0},
        {g_cert, missing, g_ca, SM_EIO, "cannot read the TLS key file", missing, 0},
        {g_cert, g_key, g_notpem, SM_EFORMAT, "holds no PEM certificate", g_notpem, 0},
        {g_notpem, g_key, g_ca, SM_EFORMAT, "holds no PEM certificate", g_notpem, 0},
        {g_cert, g_ca, g_ca, SM_EFORMAT, "holds no PEM private key", g_ca, 0},
        {g_cert, g_xkey, g_ca, SM_EINVAL, "is not the private key of the certificate", g_xkey, 0},
        {g_cert, g_ckey, g_ca, SM_EINVAL, "is not the private key of the certificate", g_cert, 0},
        /* a certificate of another CA: accepted (warned about) */
        {g_xcert, g_xkey, g_ca, SM_OK, NULL, NULL, 1},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        sm_rpc_tls_opts o = {rows[i].cert, rows[i].key, rows[i].ca, NULL};
        sm_rpc_tls *t = (sm_rpc_tls *)1;
        char err[512] = "";
        sm_err e = sm_rpc_tls_create(&o, &t, err, sizeof err);
        ck_assert_msg(e == rows[i].want, "row %zu: %s, want %s: %s", i, sm_err_name(e),
                      sm_err_name(rows[i].want), err);
        if (e) {
            ck_assert_ptr_null(t);
            ck_assert_msg(strstr(err, rows[i].words), "row %zu: %s", i, err);
            if (rows[i].names)
                ck_assert_msg(strstr(err, rows[i].names), "row %zu names no file: %s", i, err);
            continue;
        }
        int none = !(rows[i].ca && *rows[i].ca);
        ck_assert_msg(none ? t == NULL : t != NULL, "row %zu", i);
        ck_assert_int_eq(sm_rpc_tls_has_cert(t), rows[i].has_cert);
        if (none)
            ck_assert_str_eq(sm_rpc_tls_describe(t), "plaintext");
        else
            ck_assert_msg(strstr(sm_rpc_tls_describe(t), rows[i].ca), "row %zu: %s", i,
                          sm_rpc_tls_describe(t));
        sm_rpc_tls_free(t);
    }
}
END_TEST

/* The same files given as PEM text. */
START_TEST(test_create_pem_text)
{
    char *cert = slurp(g_cert), *key = slurp(g_key), *ca = slurp(g_ca), err[512];
    sm_rpc_tls_opts o = {cert, key, ca, "shmap-cluster"};
    sm_rpc_tls *t = NULL;
    ck_assert_msg(sm_rpc_tls_create(&o, &t, err, sizeof err) == SM_OK, "%s", err);
    ck_assert_int_eq(sm_rpc_tls_has_cert(t), 1);
    ck_assert_msg(strstr(sm_rpc_tls_describe(t), "(PEM text)"), "%s", sm_rpc_tls_describe(t));
    sm_rpc_tls_free(t);
    /* a key of another certificate, as text: refused without a path */
    char *xkey = slurp(g_xkey);
    o.key = xkey;
    ck_assert_int_eq(sm_rpc_tls_create(&o, &t, err, sizeof err), SM_EINVAL);
    ck_assert_msg(strstr(err, "'(PEM text)'"), "%s", err);
    free(cert);
    free(key);
    free(ca);
    free(xkey);
}
END_TEST

static void h_echo(sm_rpc_call *call, void *user)
{
    (void)user;
    ProtobufCMessage *m = svt_recv(call);
    if (!m)
        return;
    sm_rpc_finish(call, SM_OK, NULL, m);
    sm_rpc_msg_free(m);
}

/* A TLS server on a free loopback port with the two methods (P_CLUSTER
 * cluster_only); *target gets its address. */
static sm_rpc_server *server(int require, sm_rpc_tls **tls, char *target, size_t len)
{
    sm_rpc_tls_opts to = {g_cert, g_key, g_ca, NULL};
    sm_rpc_server *s = NULL;
    char err[512];
    ck_assert_int_eq(sm_rpc_tls_create(&to, tls, err, sizeof err), SM_OK);
    sm_rpc_server_opts o = {.addr = "127.0.0.1:0", .tls = *tls, .require_client_cert = require};
    ck_assert_msg(sm_rpc_server_create(&o, &s, err, sizeof err) == SM_OK, "%s", err);
    const sm_rpc_method rows[] = {
        {P_OPEN, SM_RPC_UNARY, &shmap__test__msg__descriptor, h_echo, NULL, 0},
        {P_CLUSTER, SM_RPC_UNARY, &shmap__test__msg__descriptor, h_echo, NULL, 1},
    };
    for (int i = 0; i < 2; i++)
        ck_assert_int_eq(sm_rpc_server_add(s, &rows[i], err, sizeof err), SM_OK);
    ck_assert_int_eq(sm_rpc_server_start(s, err, sizeof err), SM_OK);
    snprintf(target, len, "127.0.0.1:%d", sm_rpc_server_port(s));
    return s;
}

/* One unary call of path to target with the client's TLS files (ca NULL:
 * plaintext); err as the call gives it. */
static sm_err call(const char *target, const char *path, const char *ca, const char *cert,
                   const char *key, char *err, size_t errlen)
{
    sm_rpc_tls_opts to = {cert, key, ca, NULL};
    sm_rpc_tls *tls = NULL;
    sm_rpc_channel *ch = NULL;
    ck_assert_int_eq(sm_rpc_tls_create(&to, &tls, err, errlen), SM_OK);
    ck_assert_int_eq(sm_rpc_channel_create_tls(target, NULL, tls, &ch, err, errlen), SM_OK);
    Shmap__Test__Msg req = SHMAP__TEST__MSG__INIT;
    req.text = "hello";
    ProtobufCMessage *rep = NULL;
    sm_err e =
        sm_rpc_unary(ch, path, &req.base, &shmap__test__msg__descriptor, &rep, 5000, err, errlen);
    if (!e)
        ck_assert_str_eq(((Shmap__Test__Msg *)rep)->text, "hello");
    sm_rpc_msg_free(rep);
    sm_rpc_channel_free(ch);
    sm_rpc_tls_free(tls);
    return e;
}

/* require_client_cert 1 (a worker's port) and 0 (the coordinator's). */
START_TEST(test_server)
{
    int require = _i;
    sm_rpc_tls *tls = NULL;
    char target[64], err[1024];
    sm_rpc_server *s = server(require, &tls, target, sizeof target);
    const struct {
        const char *ca, *cert, *key;
        sm_err open, cluster; /* want on P_OPEN, P_CLUSTER */
    } rows[] = {
        {g_ca, g_ccert, g_ckey, SM_OK, SM_OK},                /* cluster client */
        {g_ca, g_cert, g_key, SM_OK, SM_OK},                  /* a peer */
        {g_ca, NULL, NULL, require ? SM_EUNAVAILABLE : SM_OK, /* CA only */
         require ? SM_EUNAVAILABLE : SM_EPERM},
        {NULL, NULL, NULL, SM_EUNAVAILABLE, SM_EUNAVAILABLE},      /* plaintext */
        {g_xca, NULL, NULL, SM_EUNAVAILABLE, SM_EUNAVAILABLE},     /* another CA */
        {g_ca, g_xcert, g_xkey, SM_EUNAVAILABLE, SM_EUNAVAILABLE}, /* its cert */
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        sm_err e = call(target, P_OPEN, rows[i].ca, rows[i].cert, rows[i].key, err, sizeof err);
        ck_assert_msg(e == rows[i].open, "require %d row %zu open: %s: %s", require, i,
                      sm_err_name(e), err);
        e = call(target, P_CLUSTER, rows[i].ca, rows[i].cert, rows[i].key, err, sizeof err);
        ck_assert_msg(e == rows[i].cluster, "require %d row %zu cluster: %s: %s", require, i,
                      sm_err_name(e), err);
        if (e == SM_EPERM)
            ck_assert_msg(strstr(err, "PERMISSION_DENIED: " P_CLUSTER " is for the cluster's") &&
                              strstr(err, "no client certificate signed by the cluster's CA"),
                          "%s", err);
    }
    sm_rpc_server_free(s);
    sm_rpc_tls_free(tls);
}
END_TEST

/* A TLS server needs a certificate of its own. */
START_TEST(test_server_needs_cert)
{
    sm_rpc_tls_opts to = {NULL, NULL, g_ca, NULL};
    sm_rpc_tls *tls = NULL;
    sm_rpc_server *s = NULL;
    char err[512];
    ck_assert_int_eq(sm_rpc_tls_create(&to, &tls, err, sizeof err), SM_OK);
    sm_rpc_server_opts o = {.addr = "127.0.0.1:0", .tls = tls};
    ck_assert_int_eq(sm_rpc_server_create(&o, &s, err, sizeof err), SM_EINVAL);
    ck_assert_msg(strstr(err, "needs a certificate and its key"), "%s", err);
    sm_rpc_tls_free(tls);
}
END_TEST

/* Where plaintext is logged as INFO (loopback) or WARN (anything else). */
START_TEST(test_loopback)
{
    const struct {
        const char *addr;
        int want;
    } rows[] = {{"127.0.0.1:7070", 1}, {"127.1.2.3:0", 1},
                {"localhost:7070", 1}, {"[::1]:7070", 1},
                {"0.0.0.0:7070", 0},   {"10.0.0.1:7070", 0},
                {"[::]:7070", 0},      {"localhost.x:1", 0},
                {"1270.0.0.1:1", 0},   {"", 0}};
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
        ck_assert_msg(sm_rpc_addr_is_loopback(rows[i].addr) == rows[i].want, "%s", rows[i].addr);
    ck_assert_int_eq(sm_rpc_addr_is_loopback(NULL), 0);
}
END_TEST

int main(void)
{
    certs_make();
    sm_rpc_init();
    Suite *s = SUITE_CASE(suite_create("rpc_tls"), "tls", 60, NULL, {test_create_rows},
                          {test_create_pem_text}, {test_server, 2}, {test_server_needs_cert},
                          {test_loopback});
    int rc = suite_run(s, 1); /* gRPC is not fork-safe */
    sm_rpc_shutdown();
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd) != 0)
        fprintf(stderr, "test_rpc_tls: could not remove %s\n", g_dir);
    return rc;
}
