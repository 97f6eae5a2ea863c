/* local: embedded worker processes. See local.h. */
#include "local.h"

#include <errno.h>
#include <libgen.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "relay.h"
#include "sm_log.h"
#include "sm_shm.h"
#include "sm_sys.h"
#include "sm_time.h"

extern char **environ;

typedef struct {
    sm_local *l;
    int index; /* process index */
    pid_t pid;
    int exited;
    pthread_t th;
    int watching;
} sm_local_child;

struct sm_local {
    sm_registry *reg;
    int call_deadline_ms;
    pthread_mutex_t mu;
    pthread_cond_t cv; /* CLOCK_MONOTONIC; signalled on every exit */
    int stopping;
    int n;
    sm_local_child *kids;
};

sm_err sm_local_default_binary(char *out, size_t len, char *err, size_t errlen)
{
    char self[4096], a[4200], b[4200];
    ssize_t k = readlink("/proc/self/exe", self, sizeof self - 1);
    if (k <= 0)
        return sm_fail(err, errlen, SM_ENOTFOUND,
                       "cannot read /proc/self/exe to find shmap-worker; pass --worker-binary");
    self[k] = 0;
    const char *dir = dirname(self);
    snprintf(a, sizeof a, "%s/shmap-worker", dir);
    snprintf(b, sizeof b, "%s/../worker/shmap-worker", dir);
    const char *pick = access(a, X_OK) == 0 ? a : access(b, X_OK) == 0 ? b : NULL;
    if (!pick)
        return sm_fail(err, errlen, SM_ENOTFOUND,
                       "no shmap-worker at %s or %s; pass --worker-binary", a, b);
    snprintf(out, len, "%s", pick);
    return SM_OK;
}

static void *sm_local_watch(void *arg)
{
    sm_local_child *c = arg;
    sm_local *l = c->l;
    int st = 0;
    pid_t got;
    while ((got = waitpid(c->pid, &st, 0)) < 0 && errno == EINTR)
        ;
    char why[96];
    if (got < 0)
        snprintf(why, sizeof why, "waitpid failed: %s", strerror(errno));
    else if (WIFEXITED(st))
        snprintf(why, sizeof why, "its process %d exited with status %d", (int)c->pid,
                 WEXITSTATUS(st));
    else if (WIFSIGNALED(st))
        snprintf(why, sizeof why, "its process %d was killed by signal %d", (int)c->pid,
                 WTERMSIG(st));
    else
        snprintf(why, sizeof why, "its process %d ended", (int)c->pid);
    pthread_mutex_lock(&l->mu);
    c->exited = 1;
    int stopping = l->stopping;
    pthread_cond_broadcast(&l->cv);
    pthread_mutex_unlock(&l->mu);
    /* the shared-memory files it kept, if it could not remove them itself
     * (killed): this process shares its /dev/shm */
    sm_shm_sweep(SM_SHM_SWEEP_AGE_S);
    if (stopping)
        return NULL;
    SM_WARN("local worker %d: %s", c->index, why);
    sm_reg_free *f = NULL;
    int nf = 0;
    sm_registry_worker_lose(l->reg, 0, c->index, why, &f, &nf);
    sm_relay_free(f, nf, l->call_deadline_ms);
    free(f);
    return NULL;
}

/* The variables the coordinator hands its local workers: its token and
 * TLS settings (each NULL or "" for none: an inherited value stays). */
#define LOCAL_NENV 5
static void sm_local_env_pairs(const sm_local_opts *o, const char *names[LOCAL_NENV],
                               const char *values[LOCAL_NENV])
{
    names[0] = "SHMAP_TOKEN";
    values[0] = o->token;
    names[1] = "SHMAP_TLS_CERT";
    values[1] = o->tls_cert;
    names[2] = "SHMAP_TLS_KEY";
    values[2] = o->tls_key;
    names[3] = "SHMAP_TLS_CA";
    values[3] = o->tls_ca;
    names[4] = "SHMAP_TLS_SERVER_NAME";
    values[4] = o->tls_server_name;
}

/* environ plus NAME=value for each pair of sm_local_env_pairs with a value
 * (replacing one already there); the strings are borrowed except those
 * new entries, owned[0..LOCAL_NENV) (free them, NULL ones too). */
static char **sm_local_env(const sm_local_opts *o, char *owned[LOCAL_NENV])
{
    const char *names[LOCAL_NENV], *values[LOCAL_NENV];
    size_t n = 0;
    sm_local_env_pairs(o, names, values);
    while (environ[n])
        n++;
    char **env = calloc(n + LOCAL_NENV + 1, sizeof *env);
    size_t k = 0;
    memset(owned, 0, LOCAL_NENV * sizeof *owned);
    if (!env)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        int replaced = 0;
        for (int p = 0; p < LOCAL_NENV; p++) {
            size_t nl = strlen(names[p]);
            if (values[p] && *values[p] && !strncmp(environ[i], names[p], nl) &&
                environ[i][nl] == '=')
                replaced = 1;
        }
        if (!replaced)
            env[k++] = environ[i];
    }
    for (int p = 0; p < LOCAL_NENV; p++) {
        if (!values[p] || !*values[p])
            continue;
        size_t len = strlen(names[p]) + strlen(values[p]) + 2;
        if (!(owned[p] = malloc(len))) {
            for (int q = 0; q < p; q++)
                free(owned[q]);
            free(env);
            return NULL;
        }
        snprintf(owned[p], len, "%s=%s", names[p], values[p]);
        env[k++] = owned[p];
    }
    return env;
}

static sm_err sm_local_spawn(const sm_local_opts *o, sm_local_child *c, char **env, char *err,
                             size_t errlen)
{
    char coord[64], devices[32], index[32], limit[32], state[4200];
    posix_spawnattr_t attr;
    sigset_t none, def;
    snprintf(coord, sizeof coord, "127.0.0.1:%d", o->coord_port);
    snprintf(devices, sizeof devices, "%d", o->devices);
    snprintf(index, sizeof index, "%d", c->index);
    char *argv[16] = {
        (char *)o->binary, "--coordinator",   coord, "--devices",         devices, "--listen",
        "127.0.0.1:0",     "--process-index", index, "--exit-with-parent"};
    int na = 10;
    /* The workers share this host: each may hold its part of 90% of the
     * memory, unless the operator set SHMAP_MEMORY_LIMIT_MB for them. */
    uint64_t mem = sm_sys_memory_bytes();
    if (!getenv("SHMAP_MEMORY_LIMIT_MB") && mem > 0) {
        uint64_t share = mem / 10 * 9 / (uint64_t)(o->nworkers > 0 ? o->nworkers : 1);
        snprintf(limit, sizeof limit, "%llu", (unsigned long long)(share >> 20 ? share >> 20 : 1));
        argv[na++] = "--memory-limit-mb";
        argv[na++] = limit;
    }
    /* With a state dir, each local worker keeps its own beside the
     * registry, so a restarted coordinator's workers come back with their
     * shards. */
    if (o->state_dir && *o->state_dir) {
        snprintf(state, sizeof state, "%.4000s/worker-%d", o->state_dir, c->index);
        argv[na++] = "--state-dir";
        argv[na++] = state;
    }
    sigemptyset(&none);
    sigemptyset(&def);
    sigaddset(&def, SIGTERM);
    sigaddset(&def, SIGINT);
    sigaddset(&def, SIGPIPE);
    posix_spawnattr_init(&attr);
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setsigdefault(&attr, &def);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    int rc = posix_spawn(&c->pid, o->binary, NULL, &attr, argv, env);
    posix_spawnattr_destroy(&attr);
    if (rc)
        return sm_fail(err, errlen, SM_EUNAVAILABLE, "cannot start worker '%s': %s", o->binary,
                       strerror(rc));
    SM_INFO("started local worker %d (pid %d): %s --devices %d", c->index, (int)c->pid, o->binary,
            o->devices);
    return SM_OK;
}

sm_err sm_local_start(const sm_local_opts *o, sm_registry *r, sm_local **out, char *err,
                      size_t errlen)
{
    sm_local *l = calloc(1, sizeof *l);
    char *owned[LOCAL_NENV] = {NULL};
    char **env = NULL;
    sm_err e = SM_OK;
    *out = NULL;
    if (!l)
        return sm_fail(err, errlen, SM_ENOMEM, "out of memory starting local workers");
    l->reg = r;
    l->call_deadline_ms = o->call_deadline_ms;
    pthread_mutex_init(&l->mu, NULL);
    sm_time_cond_init(&l->cv);
    l->kids = calloc((size_t)o->nworkers, sizeof *l->kids);
    env = sm_local_env(o, owned);
    if (!l->kids || !env) {
        e = sm_fail(err, errlen, SM_ENOMEM, "out of memory starting local workers");
        goto fail;
    }
    for (int k = 0; k < o->nworkers; k++) {
        sm_local_child *c = &l->kids[k];
        c->l = l;
        c->index = k;
        e = sm_local_spawn(o, c, env, err, errlen);
        if (e)
            goto fail;
        l->n++;
        c->watching = pthread_create(&c->th, NULL, sm_local_watch, c) == 0;
        if (!c->watching) {
            e = sm_fail(err, errlen, SM_ERESOURCE, "cannot start a thread to watch worker %d", k);
            goto fail;
        }
    }
    free(env);
    for (int p = 0; p < LOCAL_NENV; p++)
        free(owned[p]);
    *out = l;
    return SM_OK;
fail:
    free(env);
    for (int p = 0; p < LOCAL_NENV; p++)
        free(owned[p]);
    sm_local_stop(l, 2000);
    return e;
}

/* Waits until every child exited or the monotonic deadline passed; 1 if
 * all exited. Called with l->mu held. */
static int sm_local_wait_all(sm_local *l, const struct timespec *until)
{
    for (;;) {
        int all = 1;
        for (int k = 0; k < l->n; k++)
            all &= !l->kids[k].watching || l->kids[k].exited;
        if (all)
            return 1;
        if (pthread_cond_timedwait(&l->cv, &l->mu, until) == ETIMEDOUT)
            return 0;
    }
}

void sm_local_stop(sm_local *l, int grace_ms)
{
    struct timespec until;
    if (!l)
        return;
    pthread_mutex_lock(&l->mu);
    l->stopping = 1;
    for (int k = 0; k < l->n; k++)
        if (!l->kids[k].exited)
            kill(l->kids[k].pid, SIGTERM);
    until = sm_time_after_ms(CLOCK_MONOTONIC, grace_ms);
    if (!sm_local_wait_all(l, &until))
        for (int k = 0; k < l->n; k++)
            if (!l->kids[k].exited) {
                SM_WARN("local worker %d (pid %d) ignored SIGTERM for %d ms; killing it", k,
                        (int)l->kids[k].pid, grace_ms);
                kill(l->kids[k].pid, SIGKILL);
            }
    pthread_mutex_unlock(&l->mu);
    for (int k = 0; k < l->n; k++) {
        if (l->kids[k].watching)
            pthread_join(l->kids[k].th, NULL);
        else
            waitpid(l->kids[k].pid, NULL, 0);
    }
    sm_shm_sweep(SM_SHM_SWEEP_AGE_S); /* what workers killed on the way left */
    pthread_cond_destroy(&l->cv);
    pthread_mutex_destroy(&l->mu);
    free(l->kids);
    free(l);
}
