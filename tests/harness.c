/* harness: real clusters, shmapctl runs and temp dirs for the e2e suites. */
#define _GNU_SOURCE
#include "harness.h"
#include "sm_time.h"
#include "suite_main.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

/* Process groups of the clusters still running, so a watchdog can end them
 * if a suite hangs (Check's timeouts do not apply in CK_NOFORK mode, and a
 * runner that kills the suite would leave the cluster behind). */
static pthread_mutex_t g_live_mu = PTHREAD_MUTEX_INITIALIZER;
static pid_t g_live[16], g_live_owner[16]; /* owner: the process that started it */
static int g_watchdog_started;

static void live_set(pid_t pid, int on)
{
    pthread_mutex_lock(&g_live_mu);
    for (int i = 0; i < 16; i++)
        if (on ? g_live[i] == 0 : g_live[i] == pid) {
            g_live[i] = on ? pid : 0;
            g_live_owner[i] = on ? getpid() : 0;
            break;
        }
    pthread_mutex_unlock(&g_live_mu);
}

/* At exit: the clusters this process started and did not stop (a test
 * whose assertion failed before its harness_cluster_stop) end with it. */
static void live_end(void)
{
    for (int i = 0; i < 16; i++)
        if (g_live[i] > 0 && g_live_owner[i] == getpid())
            kill(-g_live[i], SIGKILL);
}

static void *watchdog(void *arg)
{
    const char *env = getenv("SM_E2E_WATCHDOG_S");
    int secs = env && atoi(env) > 0 ? atoi(env) : 300;
    (void)arg;
    sleep((unsigned)secs);
    fprintf(stderr, "harness: the suite ran longer than %d s; ending its clusters\n", secs);
    pthread_mutex_lock(&g_live_mu);
    for (int i = 0; i < 16; i++)
        if (g_live[i] > 0)
            kill(-g_live[i], SIGKILL);
    _exit(1);
}

static void watchdog_start(void)
{
    pthread_t th;
    pthread_mutex_lock(&g_live_mu);
    if (!g_watchdog_started && pthread_create(&th, NULL, watchdog, NULL) == 0) {
        pthread_detach(th);
        g_watchdog_started = 1;
        atexit(live_end);
    }
    pthread_mutex_unlock(&g_live_mu);
}

int harness_shm_left(const char *prefix, const char *except, const char *who)
{
    DIR *d = opendir("/dev/shm");
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));) {
        size_t len = strlen(e->d_name), xl = except ? strlen(except) : 0;
        int excepted = except && len > xl && !strcmp(e->d_name + len - xl, except);
        if (!strncmp(e->d_name, prefix, strlen(prefix)) && !excepted) {
            fprintf(stderr, "%s: /dev/shm/%s is left\n", who, e->d_name);
            n++;
        }
    }
    if (d)
        closedir(d);
    return n;
}

void harness_sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

char *harness_tmpdir(void)
{
    const char *base = getenv("TMPDIR");
    char *p = NULL;
    if (asprintf(&p, "%s/shmap-e2e-XXXXXX", base && *base ? base : "/tmp") < 0)
        return NULL;
    if (!mkdtemp(p)) {
        free(p);
        return NULL;
    }
    return p;
}

static int rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

void harness_rmdir(char *path)
{
    if (!path)
        return;
    nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    free(path);
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    size_t len = 0, cap = 0;
    if (!f)
        return strdup("");
    for (;;) {
        if (len + 4096 + 1 > cap) {
            cap = cap ? cap * 2 : 8192;
            char *nb = realloc(buf, cap);
            if (!nb)
                break;
            buf = nb;
        }
        size_t n = fread(buf + len, 1, cap - len - 1, f);
        if (n == 0)
            break;
        len += n;
    }
    fclose(f);
    if (!buf)
        return strdup("");
    buf[len] = 0;
    return buf;
}

/* The variables through which a client (shmapctl, libshmap's callers) or
 * a coordinator finds its target and credentials: never inherited from the
 * suite's environment, set only as a cluster says. */
static const char *const g_cred_vars[] = {
    "SHMAP_TARGET=",   "SHMAP_TOKEN=",   "SHMAP_TOKENS=",         "SHMAP_TLS_CA=",
    "SHMAP_TLS_CERT=", "SHMAP_TLS_KEY=", "SHMAP_TLS_SERVER_NAME="};
#define N_CRED_VARS ((int)(sizeof g_cred_vars / sizeof g_cred_vars[0]))

static int is_cred_var(const char *entry)
{
    for (int k = 0; k < N_CRED_VARS; k++)
        if (!strncmp(entry, g_cred_vars[k], strlen(g_cred_vars[k])))
            return 1;
    return 0;
}

/* environ without the credential variables, plus those of h's clients
 * (h NULL: none; target NULL: no SHMAP_TARGET). */
static char **make_env(const harness_cluster *h, const char *target)
{
    size_t n = 0;
    while (environ[n])
        n++;
    char **env = calloc(n + N_CRED_VARS + 1, sizeof *env);
    size_t k = 0;
    if (!env)
        return NULL;
    for (size_t i = 0; i < n; i++)
        if (!is_cred_var(environ[i]))
            env[k++] = environ[i];
    const char *set[][2] = {{"SHMAP_TARGET", target},
                            {"SHMAP_TOKEN", h ? h->token : NULL},
                            {"SHMAP_TLS_CA", h ? h->tls_ca : NULL},
                            {"SHMAP_TLS_CERT", h ? h->tls_cert : NULL},
                            {"SHMAP_TLS_KEY", h ? h->tls_key : NULL}};
    for (size_t v = 0; v < sizeof set / sizeof set[0]; v++)
        if (set[v][1] && *set[v][1] && asprintf(&env[k], "%s=%s", set[v][0], set[v][1]) >= 0)
            k++;
    env[k] = NULL;
    return env;
}

static void free_env(char **env)
{
    if (!env)
        return;
    for (size_t i = 0; env[i]; i++)
        if (is_cred_var(env[i]))
            free(env[i]);
    free(env);
}

/* Spawns argv with stdout/stderr to files (NULL: inherit); new process
 * group if pgroup. */
static pid_t spawn(char *const *argv, char **env, const char *out, const char *errf, int pgroup)
{
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t at;
    pid_t pid = -1;

    posix_spawn_file_actions_init(&fa);
    posix_spawnattr_init(&at);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    if (out)
        posix_spawn_file_actions_addopen(&fa, 1, out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (errf)
        posix_spawn_file_actions_addopen(&fa, 2, errf, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (pgroup) {
        posix_spawnattr_setpgroup(&at, 0);
        posix_spawnattr_setflags(&at, POSIX_SPAWN_SETPGROUP);
    }
    if (posix_spawn(&pid, argv[0], &fa, &at, argv, env) != 0)
        pid = -1;
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&at);
    return pid;
}

static void dump_log(const harness_cluster *h)
{
    char path[512];
    snprintf(path, sizeof path, "%s/coordinator.log", h->dir);
    char *log = slurp(path);
    fprintf(stderr, "---- coordinator log (%s) ----\n%s---- end of log ----\n", path, log);
    free(log);
}

/* ---- secure mode ------------------------------------------------------- */

int harness_secure(void)
{
    const char *v = getenv("SM_TEST_SECURE");
    return v && !strcmp(v, "1");
}

static pthread_mutex_t g_sec_mu = PTHREAD_MUTEX_INITIALIZER;
static harness_secure_files g_sec;
static char *g_sec_dir; /* NULL until made */
static pid_t g_sec_pid; /* the process that made them */

/* At exit of the process that made them, not of a child Check forked. */
static void secure_files_remove(void)
{
    if (getpid() != g_sec_pid)
        return;
    harness_rmdir(g_sec_dir);
    g_sec_dir = NULL;
}

/* Runs argv (absolute path) with output to log; its exit status, -1 if it
 * could not start. */
static int run_wait(char *const *argv, const char *log)
{
    char **env = make_env(NULL, NULL);
    pid_t pid = spawn(argv, env, log, log, 0);
    int st = 0;
    free_env(env);
    if (pid < 0)
        return -1;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

const harness_secure_files *harness_secure_files_get(char *err, size_t errlen)
{
    const char *script = getenv("SM_TLS_CERTS");
    harness_secure_files *f = &g_sec;
    char certs[600], log[600];
    char *dir = NULL;

    pthread_mutex_lock(&g_sec_mu);
    if (g_sec_dir)
        goto done;
    if (!script || !*script) {
        sm_fail(err, errlen, SM_EUNAVAILABLE,
                "secure mode needs SM_TLS_CERTS (scripts/tls_certs.sh) in the environment");
        f = NULL;
        goto done;
    }
    if (!(dir = harness_tmpdir())) {
        sm_fail(err, errlen, SM_EIO, "cannot create a temp dir for secure mode's files");
        f = NULL;
        goto done;
    }
    snprintf(certs, sizeof certs, "%s/certs", dir);
    snprintf(log, sizeof log, "%s/tls_certs.log", dir);
    char *argv[] = {"/bin/bash", (char *)script, certs, "localhost", "127.0.0.1", NULL};
    int rc = run_wait(argv, log);
    if (rc != 0) {
        char *text = slurp(log);
        sm_fail(err, errlen, SM_EUNAVAILABLE, "%s exited %d (is openssl installed?): %s", script,
                rc, text);
        free(text);
        harness_rmdir(dir);
        f = NULL;
        goto done;
    }
    const struct {
        char *out;
        const char *name;
    } files[] = {{f->ca, "certs/ca.pem"},
                 {f->cert, "certs/cluster.pem"},
                 {f->key, "certs/cluster.key"},
                 {f->client_cert, "certs/client.pem"},
                 {f->client_key, "certs/client.key"},
                 {f->tokens, "tokens"}};
    for (size_t k = 0; k < sizeof files / sizeof files[0]; k++)
        snprintf(files[k].out, sizeof f->ca, "%s/%s", dir, files[k].name);
    FILE *t = fopen(f->tokens, "w");
    if (!t ||
        fprintf(t, "# the harness's tenants (secure mode)\n" HARNESS_TENANT " " HARNESS_TENANT_TOKEN
                   "\n" HARNESS_OTHER " " HARNESS_OTHER_TOKEN "\n") < 0 ||
        fclose(t) != 0) {
        sm_fail(err, errlen, SM_EIO, "cannot write %s", f->tokens);
        harness_rmdir(dir);
        f = NULL;
        goto done;
    }
    g_sec_dir = dir;
    g_sec_pid = getpid();
    atexit(secure_files_remove);
done:
    pthread_mutex_unlock(&g_sec_mu);
    return f;
}

/* Secure mode's flags for a coordinator (with --tokens) or a worker into
 * argv (room for max; the strings live as long as the process); sets h's
 * client credentials (a tenant's) and its cluster credential. Returns how
 * many, or -1 (err set) when the files cannot be made. */
static int secure_flags(harness_cluster *h, int coordinator, char **argv, int max, char *err,
                        size_t errlen)
{
    const harness_secure_files *f = harness_secure_files_get(err, errlen);
    if (!f)
        return -1;
    char *flags[] = {"--tls-cert", (char *)f->cert,  "--tls-key", (char *)f->key,
                     "--tls-ca",   (char *)f->ca,    "--token",   HARNESS_CLUSTER_TOKEN,
                     "--tokens",   (char *)f->tokens};
    int n = coordinator ? 10 : 8;
    if (n > max) {
        sm_fail(err, errlen, SM_EINVAL, "no room for secure mode's %d flags", n);
        return -1;
    }
    memcpy(argv, flags, (size_t)n * sizeof *argv);
    h->secure = 1;
    snprintf(h->token, sizeof h->token, "%s", HARNESS_TENANT_TOKEN);
    snprintf(h->tls_ca, sizeof h->tls_ca, "%s", f->ca);
    h->tls_cert[0] = h->tls_key[0] = 0; /* a client from outside: the CA alone */
    snprintf(h->cluster_token, sizeof h->cluster_token, "%s", HARNESS_CLUSTER_TOKEN);
    snprintf(h->cluster_cert, sizeof h->cluster_cert, "%s", f->client_cert);
    snprintf(h->cluster_key, sizeof h->cluster_key, "%s", f->client_key);
    return n;
}

int harness_secure_flags(harness_cluster *h, int coordinator, char **argv, int max)
{
    char err[512];
    if (!harness_secure())
        return 0;
    int n = secure_flags(h, coordinator, argv, max, err, sizeof err);
    ck_assert_msg(n >= 0, "secure mode: %s", err);
    return n;
}

void harness_use_cluster_credential(harness_cluster *h)
{
    snprintf(h->token, sizeof h->token, "%s", h->cluster_token);
    snprintf(h->tls_cert, sizeof h->tls_cert, "%s", h->cluster_cert);
    snprintf(h->tls_key, sizeof h->tls_key, "%s", h->cluster_key);
}

/* TLS credentials made once per set of files, kept until the process
 * ends (a channel borrows them for its whole life). */
static pthread_mutex_t g_tls_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t g_rpc_once = PTHREAD_ONCE_INIT;
static struct {
    char key[1600];
    sm_rpc_tls *tls;
} g_tls[16];

static sm_err tls_get(const harness_cluster *h, sm_rpc_tls **out, char *err, size_t errlen)
{
    char key[1600];
    sm_err e = SM_OK;
    *out = NULL;
    if (!h->tls_ca[0])
        return SM_OK;
    snprintf(key, sizeof key, "%s|%s|%s", h->tls_ca, h->tls_cert, h->tls_key);
    pthread_mutex_lock(&g_tls_mu);
    int k = 0;
    while (k < 16 && g_tls[k].tls && strcmp(g_tls[k].key, key))
        k++;
    if (k == 16)
        e = sm_fail(err, errlen, SM_ENOMEM, "more than 16 sets of TLS files");
    else if (!g_tls[k].tls) {
        sm_rpc_tls_opts o = {h->tls_cert[0] ? h->tls_cert : NULL, h->tls_key[0] ? h->tls_key : NULL,
                             h->tls_ca, NULL};
        if (!(e = sm_rpc_tls_create(&o, &g_tls[k].tls, err, errlen)))
            snprintf(g_tls[k].key, sizeof g_tls[k].key, "%s", key);
    }
    if (!e)
        *out = g_tls[k].tls;
    pthread_mutex_unlock(&g_tls_mu);
    return e;
}

sm_rpc_channel *harness_channel(const harness_cluster *h, const char *target)
{
    sm_rpc_channel *ch = NULL;
    sm_rpc_tls *tls = NULL;
    char err[512];
    pthread_once(&g_rpc_once, sm_rpc_init);
    sm_err e = tls_get(h, &tls, err, sizeof err);
    ck_assert_msg(e == SM_OK, "TLS files: %s", err);
    e = sm_rpc_channel_create_tls(target ? target : h->target, h->token[0] ? h->token : NULL, tls,
                                  &ch, err, sizeof err);
    ck_assert_msg(e == SM_OK, "channel to %s: %s", target ? target : h->target, err);
    return ch;
}

/* A secure cluster refuses a plaintext client and a wrong token, so a
 * suite in secure mode cannot pass with it off. Asked by shmapctl
 * processes: a failed connection in this process would leave gRPC's
 * reconnection work behind, which a suite's forked test could inherit
 * mid-way (gRPC is not fork-safe). */
static sm_err secure_check(const harness_cluster *h, char *err, size_t errlen)
{
    harness_cluster *k = malloc(sizeof *k);
    harness_run plain = {0}, wrong = {0};
    const char *const ls[] = {"ls", NULL};
    sm_err e = SM_OK;
    if (!k)
        return sm_fail(err, errlen, SM_ENOMEM, "out of memory");
    *k = *h;
    k->tls_ca[0] = 0;
    int rc1 = harness_shmapctl(k, &plain, ls);
    *k = *h;
    snprintf(k->token, sizeof k->token, "harness-no-such-token-0123456789");
    int rc2 = harness_shmapctl(k, &wrong, ls);
    if (rc1 || rc2 || plain.code == 0 || !strstr(plain.err, "UNAVAILABLE") || wrong.code == 0 ||
        !strstr(wrong.err, "UNAUTHENTICATED"))
        e = sm_fail(err, errlen, SM_EINVAL,
                    "secure mode is off: a plaintext client got exit %d (%s), a wrong token "
                    "exit %d (%s)",
                    plain.code, plain.err ? plain.err : "", wrong.code, wrong.err ? wrong.err : "");
    harness_run_free(&plain);
    harness_run_free(&wrong);
    free(k);
    return e;
}

sm_err harness_cluster_start(const harness_opts *o, harness_cluster **out, char *err, size_t errlen)
{
    const char *bin = getenv("SHMAP_COORDINATOR_BIN");
    harness_cluster *h;
    char portfile[512], logfile[512], nw[16], nd[16];
    char *dir;
    sm_client *c = NULL;
    sm_err e;

    *out = NULL;
    if (!bin || !*bin)
        return sm_fail(err, errlen, SM_EUNAVAILABLE, "SHMAP_COORDINATOR_BIN is not set");
    if (!(h = calloc(1, sizeof *h)) || !(dir = harness_tmpdir())) {
        free(h);
        return sm_fail(err, errlen, SM_EIO, "cannot create a temp dir");
    }
    snprintf(h->dir, sizeof h->dir, "%s", dir);
    free(dir);
    h->nworkers = o->nworkers;
    h->ndevices = o->nworkers * o->devices_per_worker;
    snprintf(portfile, sizeof portfile, "%s/port", h->dir);
    snprintf(logfile, sizeof logfile, "%s/coordinator.log", h->dir);
    snprintf(nw, sizeof nw, "%d", o->nworkers);
    snprintf(nd, sizeof nd, "%d", o->devices_per_worker);
    /* --exit-with-parent: a test that fails in Check's child process ends
     * it with _exit, past the atexit that stops its clusters (live_end) */
    char *argv[40] = {(char *)bin,
                      "--listen",
                      "127.0.0.1:0",
                      "--port-file",
                      portfile,
                      "--local-workers",
                      nw,
                      "--devices-per-worker",
                      nd,
                      "--exit-with-parent",
                      NULL};
    int na = 10;
    /* Secure mode fills in what the options leave out: all or nothing. */
    if ((o->secure || harness_secure()) && !o->token && !o->tls_cert && !o->tls_key && !o->tls_ca) {
        int k = secure_flags(h, 1, argv + na, 40 - na, err, errlen);
        if (k < 0) {
            harness_rmdir(strdup(h->dir));
            free(h);
            return SM_EUNAVAILABLE;
        }
        na += k;
    } else {
        /* The clients get what the cluster was given. */
        if (o->token) {
            snprintf(h->token, sizeof h->token, "%s", o->token);
            argv[na++] = "--token";
            argv[na++] = (char *)o->token;
        }
        const struct {
            const char *flag, *file;
            char *copy;
        } tls[] = {{"--tls-cert", o->tls_cert, h->tls_cert},
                   {"--tls-key", o->tls_key, h->tls_key},
                   {"--tls-ca", o->tls_ca, h->tls_ca}};
        for (int k = 0; k < 3; k++)
            if (tls[k].file) {
                snprintf(tls[k].copy, sizeof h->tls_cert, "%s", tls[k].file);
                argv[na++] = (char *)tls[k].flag;
                argv[na++] = (char *)tls[k].file;
            }
        snprintf(h->cluster_token, sizeof h->cluster_token, "%s", h->token);
        snprintf(h->cluster_cert, sizeof h->cluster_cert, "%s", h->tls_cert);
        snprintf(h->cluster_key, sizeof h->cluster_key, "%s", h->tls_key);
    }
    for (int k = 0; o->coord_args && o->coord_args[k] && na < 39; k++)
        argv[na++] = (char *)o->coord_args[k];
    argv[na] = NULL;
    char **env = make_env(NULL, NULL);
    watchdog_start();
    h->pid = spawn(argv, env, logfile, logfile, 1);
    free_env(env);
    if (h->pid > 0)
        live_set(h->pid, 1);
    if (h->pid < 0) {
        e = sm_fail(err, errlen, SM_EUNAVAILABLE, "cannot start %s", bin);
        goto fail;
    }
    int64_t until = sm_time_mono_ms() + 30000;
    while (!h->port) {
        FILE *f = fopen(portfile, "r");
        if (f) {
            char line[128] = "";
            if (fgets(line, sizeof line, f) && strchr(line, '\n')) {
                char *colon = strrchr(line, ':');
                h->port = atoi(colon ? colon + 1 : line);
            }
            fclose(f);
        }
        int st;
        if (waitpid(h->pid, &st, WNOHANG) == h->pid) {
            kill(-h->pid, SIGKILL); /* any worker it started */
            live_set(h->pid, 0);
            h->pid = -1;
            e = sm_fail(err, errlen, SM_EUNAVAILABLE, "the coordinator exited at start-up");
            goto fail;
        }
        if (!h->port) {
            if (sm_time_mono_ms() > until) {
                e = sm_fail(err, errlen, SM_ETIMEOUT, "the coordinator wrote no port file");
                goto fail;
            }
            harness_sleep_ms(20);
        }
    }
    snprintf(h->target, sizeof h->target, "%s:%d", o->target_host ? o->target_host : "127.0.0.1",
             h->port);
    if ((e = harness_connect(h, &c, err, errlen)))
        goto fail;
    e = harness_wait_workers(c, o->nworkers, (int)(until - sm_time_mono_ms()), err, errlen);
    sm_client_close(c);
    if (e)
        goto fail;
    if (h->secure && (e = secure_check(h, err, errlen)))
        goto fail;
    *out = h;
    return SM_OK;

fail:
    dump_log(h);
    harness_cluster_stop(h);
    return e;
}

sm_err harness_wait_workers(sm_client *c, int alive, int timeout_ms, char *err, size_t errlen)
{
    int64_t until = sm_time_mono_ms() + timeout_ms;
    int got = -1;
    sm_err e = SM_OK;
    for (;;) {
        sm_worker_info *w = NULL;
        int n = 0;
        e = sm_client_devices(c, &w, &n, err, errlen);
        if (!e) {
            got = 0;
            for (int i = 0; i < n; i++)
                got += w[i].alive;
        }
        free(w);
        if (got == alive)
            return SM_OK;
        if (sm_time_mono_ms() > until)
            break;
        harness_sleep_ms(50);
    }
    if (e)
        return e;
    return sm_fail(err, errlen, SM_ETIMEOUT, "%d workers were alive, not %d", got, alive);
}

void harness_cluster_stop(harness_cluster *h)
{
    if (!h)
        return;
    if (h->pid > 0) {
        int st;
        kill(h->pid, SIGTERM);
        int64_t until = sm_time_mono_ms() + 5000;
        while (waitpid(h->pid, &st, WNOHANG) == 0 && sm_time_mono_ms() < until)
            harness_sleep_ms(20);
        /* Whatever is left of the group (a stuck coordinator, its workers). */
        kill(-h->pid, SIGKILL);
        waitpid(h->pid, &st, WNOHANG);
        live_set(h->pid, 0);
    }
    harness_rmdir(strdup(h->dir));
    free(h);
}

harness_cluster *harness_cluster_up_opts(const harness_opts *o, const char *what)
{
    harness_cluster *h = NULL;
    char err[512];
    if (harness_cluster_start(o, &h, err, sizeof err)) {
        fprintf(stderr, "%s: %s\n", what, err);
        exit(1);
    }
    return h;
}

harness_cluster *harness_cluster_limited(int nworkers, int devices_per_worker, int limit_mb)
{
    harness_opts o = {.nworkers = nworkers, .devices_per_worker = devices_per_worker};
    harness_cluster *h = NULL;
    char err[1024], mb[16];
    snprintf(mb, sizeof mb, "%d", limit_mb);
    setenv("SHMAP_MEMORY_LIMIT_MB", mb, 1);
    sm_err e = harness_cluster_start(&o, &h, err, sizeof err);
    unsetenv("SHMAP_MEMORY_LIMIT_MB");
    ck_assert_msg(e == SM_OK, "start: %s", err);
    return h;
}

harness_cluster *harness_cluster_up(int nworkers, int devices_per_worker, const char *suite)
{
    harness_opts o = {.nworkers = nworkers, .devices_per_worker = devices_per_worker};
    return harness_cluster_up_opts(&o, suite);
}

void harness_cluster_down(harness_cluster **h)
{
    harness_cluster_stop(*h);
    *h = NULL;
}

sm_client_opts harness_client_opts(const harness_cluster *h)
{
    sm_client_opts o = {.token = h->token[0] ? h->token : NULL,
                        .timeout_ms = 30000,
                        .tls_cert = h->tls_cert[0] ? h->tls_cert : NULL,
                        .tls_key = h->tls_key[0] ? h->tls_key : NULL,
                        .tls_ca = h->tls_ca[0] ? h->tls_ca : NULL};
    return o;
}

sm_err harness_connect(const harness_cluster *h, sm_client **out, char *err, size_t errlen)
{
    sm_client_opts o = harness_client_opts(h);
    sm_err e = sm_client_opts_from_env(&o, err, errlen);
    return e ? e : sm_client_connect(h->target, &o, out, err, errlen);
}

sm_client *harness_client(const harness_cluster *h)
{
    sm_client *c = NULL;
    char err[512];
    sm_err e = harness_connect(h, &c, err, sizeof err);
    ck_assert_msg(e == SM_OK, "connect: %s", err);
    return c;
}

sm_array_ref harness_id_ref(sm_array_id id)
{
    sm_array_ref r = {.id = id, .name = NULL};
    return r;
}

int harness_run_suite(Suite *s)
{
    return suite_run(s, 1);
}

int harness_worker_pids(const harness_cluster *h, pid_t *out, int max)
{
    DIR *d = opendir("/proc");
    struct dirent *de;
    int n = 0;
    if (!d)
        return 0;
    while ((de = readdir(d)) && n < max) {
        char path[300], buf[512];
        if (de->d_name[0] < '0' || de->d_name[0] > '9')
            continue;
        snprintf(path, sizeof path, "/proc/%s/stat", de->d_name);
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        size_t len = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[len] = 0;
        char *rp = strrchr(buf, ')');
        char state;
        int ppid;
        if (rp && sscanf(rp + 1, " %c %d", &state, &ppid) == 2 && ppid == h->pid && state != 'Z')
            out[n++] = (pid_t)atoi(de->d_name);
    }
    closedir(d);
    return n;
}

sm_array_id harness_put(sm_client *c, const sm_array *x, const char *axes, const char *spec,
                        const char *name)
{
    sm_mesh mesh;
    sm_sharding_ref sh = harness_sharding(&mesh, axes, NULL, 0, spec);
    sm_array_info info;
    char err[512];
    sm_err e = sm_client_put(c, x->dtype, &x->shape, x->data, &sh, name, &info, err, sizeof err);
    ck_assert_msg(e == SM_OK, "put %s (%s %s): %s", name ? name : "", axes, spec, err);
    sm_array_id id = info.id;
    sm_array_info_free(&info);
    return id;
}

void harness_assert_get_at(int line, sm_client *c, sm_array_ref ref, const sm_array *want)
{
    sm_array *got = NULL;
    char err[512];
    ck_assert_msg(sm_client_get(c, ref, &got, err, sizeof err) == SM_OK, "line %d: get: %s", line,
                  err);
    ck_assert_msg(got->dtype == want->dtype && sm_shape_equal(&got->shape, &want->shape) &&
                      got->nbytes == want->nbytes,
                  "line %d: got %s of %lld bytes, want %s of %lld", line, sm_dtype_name(got->dtype),
                  (long long)got->nbytes, sm_dtype_name(want->dtype), (long long)want->nbytes);
    const unsigned char *p = got->data, *q = want->data;
    int64_t i = 0;
    if (want->nbytes && memcmp(p, q, (size_t)want->nbytes) != 0) { /* no data: NULL */
        while (p[i] == q[i])
            i++;
        ck_abort_msg("line %d: byte %lld of %lld differs: %u != %u", line, (long long)i,
                     (long long)want->nbytes, p[i], q[i]);
    }
    sm_array_free(got);
}

void harness_assert_get_delete_at(int line, sm_client *c, sm_array_info *info, const sm_array *want)
{
    char err[512];
    harness_assert_get_at(line, c, harness_id_ref(info->id), want);
    ck_assert_msg(sm_client_delete(c, harness_id_ref(info->id), err, sizeof err) == SM_OK,
                  "line %d: delete: %s", line, err);
    sm_array_info_free(info);
}

sm_program *harness_program(const char *text, const char *name)
{
    sm_program *p = NULL;
    char err[1024];
    ck_assert_msg(sm_program_parse(text, name, &p, err, sizeof err) == SM_OK, "%s: %s", name, err);
    return p;
}

sm_worker_info *harness_workers(sm_client *c, int *n)
{
    sm_worker_info *w = NULL;
    char err[512];
    ck_assert_msg(sm_client_devices(c, &w, n, err, sizeof err) == SM_OK, "devices: %s", err);
    return w;
}

int64_t harness_bytes_held(sm_client *c, int alive_only)
{
    int n = 0;
    int64_t sum = 0;
    sm_worker_info *w = harness_workers(c, &n);
    for (int i = 0; i < n; i++)
        for (int d = 0; (w[i].alive || !alive_only) && d < w[i].ndevices; d++)
            sum += w[i].device_bytes[d];
    free(w);
    return sum;
}

sm_err harness_first_worker(sm_client *c, char *out, size_t len, char *err, size_t errlen)
{
    sm_worker_info *w = NULL;
    int n = 0;
    sm_err e = sm_client_devices(c, &w, &n, err, errlen);
    if (!e && n < 1)
        e = sm_fail(err, errlen, SM_ENOTFOUND, "the cluster lists no worker");
    if (!e)
        snprintf(out, len, "%s", w[0].address);
    free(w);
    return e;
}

int harness_wait_state(sm_client *c, sm_array_ref ref, int state, int timeout_ms)
{
    int64_t until = sm_time_mono_ms() + timeout_ms;
    int got = 0;
    for (;;) {
        sm_array_info info;
        char err[512];
        if (sm_client_describe(c, ref, &info, err, sizeof err) == SM_OK) {
            got = (int)info.state;
            sm_array_info_free(&info);
        }
        if (got == state || sm_time_mono_ms() > until)
            return got;
        harness_sleep_ms(50);
    }
}

int harness_shmapctl(const harness_cluster *h, harness_run *r, const char *const *args)
{
    const char *bin = getenv("SHMAPCTL");
    char *dir = harness_tmpdir();
    char outp[512], errp[512];
    char *argv[64];
    int n = 0, st = 0;

    memset(r, 0, sizeof *r);
    r->code = -1;
    if (!bin || !dir) {
        harness_rmdir(dir);
        return -1;
    }
    argv[n++] = (char *)bin;
    for (int i = 0; args[i] && n < 63; i++)
        argv[n++] = (char *)args[i];
    argv[n] = NULL;
    snprintf(outp, sizeof outp, "%s/out", dir);
    snprintf(errp, sizeof errp, "%s/err", dir);
    char **env = make_env(h, h ? h->target : NULL);
    pid_t pid = spawn(argv, env, outp, errp, 0);
    free_env(env);
    if (pid < 0) {
        harness_rmdir(dir);
        return -1;
    }
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    r->code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    r->out = slurp(outp);
    r->err = slurp(errp);
    harness_rmdir(dir);
    return 0;
}

void harness_assert_has(const char *text, const char *const *words)
{
    for (int i = 0; words[i]; i++)
        ck_assert_msg(text && strstr(text, words[i]), "'%s' is not in: %s", words[i],
                      text ? text : "(null)");
}

void harness_run_free(harness_run *r)
{
    free(r->out);
    free(r->err);
    r->out = r->err = NULL;
}

sm_array *harness_array_iota(sm_dtype t, const sm_shape *s, uint64_t seed)
{
    sm_array *a = NULL;
    char err[256];
    if (sm_array_create(t, s, &a, err, sizeof err))
        abort();
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    unsigned char *p = a->data;
    for (int64_t i = 0; i < a->nbytes; i++) {
        /* splitmix64, one byte per step is plenty for test data */
        x += 0x9E3779B97F4A7C15ull;
        uint64_t z = x;
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        p[i] = (unsigned char)(z >> 56);
        if (t == SM_BOOL)
            p[i] &= 1;
    }
    return a;
}

sm_shape harness_shape_of(int rank, const int64_t *dims)
{
    sm_shape s = {.rank = rank};
    for (int i = 0; i < rank; i++)
        s.dims[i] = dims[i];
    return s;
}

sm_sharding_ref harness_sharding(sm_mesh *mesh, const char *axes, const int32_t *devices,
                                 int ndevices, const char *spec)
{
    sm_sharding_ref r;
    char err[256];
    memset(&r, 0, sizeof r);
    if (sm_mesh_parse(axes, devices, ndevices, mesh, err, sizeof err) ||
        sm_pspec_parse(spec, &r.spec, err, sizeof err)) {
        fprintf(stderr, "harness_sharding: %s\n", err);
        abort();
    }
    r.mesh = mesh;
    r.default_order = devices == NULL;
    return r;
}
