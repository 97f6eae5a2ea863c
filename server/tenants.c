/* tenants: see tenants.h. */
#include "tenants.h"

#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sm_grant.h"
#include "sm_log.h"
#include "sm_tenant.h"

/* Tokens shorter than this are refused: a guessable secret is none. */
#define SM_TENANT_TOKEN_MIN 16
#define SM_TENANT_TOKEN_MAX 256

typedef struct {
    char name[SM_TENANT_MAX];
    char token[SM_TENANT_TOKEN_MAX];
    size_t token_len;
    sm_tenant_quota quota;
} sm_tenant_entry;

struct sm_tenants {
    pthread_mutex_t mu;
    char *path;
    sm_tenant_entry *v;
    int n;
};

static int parse_size(const char *s, int64_t *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    int64_t mul = 1;
    if (errno || end == s || v < 0)
        return -1;
    if (*end == 'K' || *end == 'k')
        mul = 1 << 10, end++;
    else if (*end == 'M' || *end == 'm')
        mul = 1 << 20, end++;
    else if (*end == 'G' || *end == 'g')
        mul = (int64_t)1 << 30, end++;
    if (*end || (mul > 1 && v > INT64_MAX / mul))
        return -1;
    *out = v * mul;
    return 0;
}

/* Parses the file into the list *v of *n (malloc'd). */
static sm_err parse_file(const char *path, sm_tenant_entry **v, int *n, char *err, size_t errlen)
{
    FILE *f = fopen(path, "r");
    char line[1024];
    int lineno = 0, cap = 0;
    sm_err e = SM_OK;
    *v = NULL;
    *n = 0;
    if (!f)
        return sm_fail(err, errlen, SM_EIO, "cannot read the tokens file %s: %s", path,
                       strerror(errno));
    while (!e && fgets(line, sizeof line, f)) {
        lineno++;
        char *hash = strchr(line, '#');
        if (hash)
            *hash = 0;
        char *words[8];
        int nw = 0;
        for (char *w = strtok(line, " \t\r\n"); w && nw < 8; w = strtok(NULL, " \t\r\n"))
            words[nw++] = w;
        if (!nw)
            continue;
        sm_tenant_entry t;
        memset(&t, 0, sizeof t);
        if (nw < 2) {
            e = sm_fail(err, errlen, SM_EINVAL,
                        "%s:%d: a line is TENANT TOKEN [max-bytes=N] [max-jobs=N]", path, lineno);
            break;
        }
        if (!sm_tenant_name_ok(words[0])) {
            e = sm_fail(err, errlen, SM_EINVAL,
                        "%s:%d: '%.40s' is not a tenant name (1 to %d letters, digits, '-', '_' "
                        "or '.')",
                        path, lineno, words[0], SM_TENANT_MAX - 1);
            break;
        }
        size_t tl = strlen(words[1]);
        if (tl < SM_TENANT_TOKEN_MIN || tl >= SM_TENANT_TOKEN_MAX) {
            e = sm_fail(err, errlen, SM_EINVAL,
                        "%s:%d: tenant %s's token has %zu characters; a token needs %d to %d", path,
                        lineno, words[0], tl, SM_TENANT_TOKEN_MIN, SM_TENANT_TOKEN_MAX - 1);
            break;
        }
        snprintf(t.name, sizeof t.name, "%s", words[0]);
        memcpy(t.token, words[1], tl);
        t.token_len = tl;
        for (int k = 2; !e && k < nw; k++) {
            int64_t x;
            if (!strncmp(words[k], "max-bytes=", 10) && !parse_size(words[k] + 10, &x))
                t.quota.max_bytes = x;
            else if (!strncmp(words[k], "max-jobs=", 9) && !parse_size(words[k] + 9, &x) &&
                     x <= 1000000)
                t.quota.max_jobs = (int)x;
            else
                e = sm_fail(err, errlen, SM_EINVAL,
                            "%s:%d: '%.60s' is not max-bytes=N[K|M|G] or max-jobs=N", path, lineno,
                            words[k]);
        }
        for (int k = 0; !e && k < *n; k++) {
            if (!strcmp((*v)[k].name, t.name))
                e = sm_fail(err, errlen, SM_EINVAL, "%s:%d: tenant %s is listed twice", path,
                            lineno, t.name);
            else if ((*v)[k].token_len == tl && !memcmp((*v)[k].token, t.token, tl))
                e = sm_fail(err, errlen, SM_EINVAL,
                            "%s:%d: tenant %s has the token of tenant %s; each needs its own", path,
                            lineno, t.name, (*v)[k].name);
        }
        if (e)
            break;
        if (*n == cap) {
            sm_tenant_entry *g = realloc(*v, sizeof *g * (size_t)(cap ? cap * 2 : 8));
            if (!g) {
                e = sm_fail(err, errlen, SM_ENOMEM, "out of memory reading %s", path);
                break;
            }
            *v = g;
            cap = cap ? cap * 2 : 8;
        }
        (*v)[(*n)++] = t;
    }
    fclose(f);
    if (!e && !*n)
        e = sm_fail(err, errlen, SM_EINVAL, "%s lists no tenant", path);
    if (e) {
        free(*v);
        *v = NULL;
        *n = 0;
    }
    return e;
}

sm_err sm_tenants_load(const char *path, sm_tenants **out, char *err, size_t errlen)
{
    sm_tenants *t = calloc(1, sizeof *t);
    *out = NULL;
    if (!t || !(t->path = strdup(path))) {
        free(t);
        return sm_fail(err, errlen, SM_ENOMEM, "out of memory");
    }
    sm_err e = parse_file(path, &t->v, &t->n, err, errlen);
    if (e) {
        free(t->path);
        free(t);
        return e;
    }
    pthread_mutex_init(&t->mu, NULL);
    *out = t;
    return SM_OK;
}

sm_err sm_tenants_reload(sm_tenants *t, char *err, size_t errlen)
{
    sm_tenant_entry *v;
    int n;
    sm_err e = parse_file(t->path, &v, &n, err, errlen);
    if (e)
        return e;
    pthread_mutex_lock(&t->mu);
    sm_tenant_entry *old = t->v;
    t->v = v;
    t->n = n;
    pthread_mutex_unlock(&t->mu);
    free(old);
    return SM_OK;
}

void sm_tenants_free(sm_tenants *t)
{
    if (!t)
        return;
    pthread_mutex_destroy(&t->mu);
    free(t->v);
    free(t->path);
    free(t);
}

int sm_tenants_count(sm_tenants *t)
{
    pthread_mutex_lock(&t->mu);
    int n = t->n;
    pthread_mutex_unlock(&t->mu);
    return n;
}

int sm_tenants_authenticate(void *user, const unsigned char *token, size_t len, char *tenant)
{
    sm_tenants *t = user;
    int found = -1;
    pthread_mutex_lock(&t->mu);
    /* every tenant's token is compared, in time that depends on the lengths
     * only, so the time taken says nothing about which matched */
    for (int k = 0; k < t->n; k++) {
        const sm_tenant_entry *x = &t->v[k];
        unsigned diff = x->token_len != len;
        for (size_t i = 0; i < x->token_len; i++)
            diff |= (unsigned)(x->token[i] ^ (i < len ? token[i] : 0));
        if (!diff)
            found = k;
    }
    if (found >= 0)
        snprintf(tenant, SM_TENANT_MAX, "%s", t->v[found].name);
    pthread_mutex_unlock(&t->mu);
    return found >= 0;
}

int sm_tenants_holder(sm_tenants *t, const char *tenant, unsigned char out[32])
{
    int found = -1;
    if (!t || !tenant)
        return -1;
    pthread_mutex_lock(&t->mu);
    for (int k = 0; k < t->n && found < 0; k++)
        if (!strcmp(t->v[k].name, tenant)) {
            sm_grant_holder(t->v[k].token, t->v[k].token_len, out);
            found = 0;
        }
    pthread_mutex_unlock(&t->mu);
    return found;
}

sm_tenant_quota sm_tenants_quota(sm_tenants *t, const char *tenant)
{
    sm_tenant_quota q = {0, 0};
    if (!t || !tenant || !*tenant)
        return q;
    pthread_mutex_lock(&t->mu);
    for (int k = 0; k < t->n; k++)
        if (!strcmp(t->v[k].name, tenant))
            q = t->v[k].quota;
    pthread_mutex_unlock(&t->mu);
    return q;
}
