/* sm_client: connecting, and the control-plane calls of libshmap (devices,
 * meshes, describe, list, reshard, delete). Transfers live in
 * client_put.c and client_get.c. */
#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "client_internal.h"
#include "shmap_job.h"
#include "sm_array.h"
#include "sm_rpc.h"
#include "sm_strbuf.h"

sm_array_ref sm_array_ref_parse(const char *text)
{
    sm_array_ref r = {.id = {0}, .name = text};
    const char *p = text;
    uint64_t v = 0;

    if (!text || !*text)
        return r;
    for (; *p; p++) {
        if (!isdigit((unsigned char)*p))
            return r;
        if (v > (UINT64_MAX - (uint64_t)(*p - '0')) / 10)
            return r; /* too long for an id: treat as a name */
        v = v * 10 + (uint64_t)(*p - '0');
    }
    if (v == 0)
        return r;
    r.id.v = v;
    r.name = NULL;
    return r;
}

/* Each block the client cache keeps (sm_client_opts.cache_mb) is kept at
 * most this long. */
#define CLIENT_CACHE_IDLE_MS 10000
#define CLIENT_CACHE_MB_MAX  ((int64_t)1 << 20)

/* *mb from the environment variable var, a whole number of MiB from 0 to
 * CLIENT_CACHE_MB_MAX (unset or empty: left alone). */
static sm_err client_env_mb(const char *var, int64_t *mb, char *err, size_t errlen)
{
    const char *v = getenv(var);
    char *end;
    if (!v || !*v)
        return SM_OK;
    errno = 0;
    long long n = strtoll(v, &end, 10);
    if (errno || *end || n < 0 || n > CLIENT_CACHE_MB_MAX)
        return sm_fail(err, errlen, SM_EINVAL,
                       "%s must be a whole number of MiB from 0 to 1048576, not '%.40s'", var, v);
    *mb = n;
    return SM_OK;
}

/* SHMAP_RELAY set and not "0"; SHMAP_TRANSPORT=grpc; SHMAP_CLIENT_CACHE_MB=N
 * and SHMAP_CLIENT_STAGE_MB=N (unset or empty: left alone). */
sm_err sm_client_opts_from_env(sm_client_opts *o, char *err, size_t errlen)
{
    const char *r = getenv("SHMAP_RELAY");
    if (r && *r && strcmp(r, "0") != 0)
        o->relay_only = 1;
    const char *tr = getenv("SHMAP_TRANSPORT");
    if (tr && !strcmp(tr, "grpc"))
        o->no_shm = 1;
    sm_err e = client_env_mb("SHMAP_CLIENT_CACHE_MB", &o->cache_mb, err, errlen);
    return e ? e : client_env_mb("SHMAP_CLIENT_STAGE_MB", &o->stage_mb, err, errlen);
}

/* Adds to a failed connect's sentence what TLS may have to do with it: a
 * plaintext client's connection to a TLS coordinator is simply closed, and
 * a TLS failure reads as gRPC's handshake error. */
static void client_tls_hint(const sm_client *c, sm_err e, char *err, size_t errlen)
{
    size_t n = err ? strlen(err) : 0;
    if (e != SM_EUNAVAILABLE || !err || n + 1 >= errlen)
        return;
    if (!c->tls)
        snprintf(err + n, errlen - n,
                 " (if the coordinator serves TLS, give the CA that signs its certificate: "
                 "--tls-ca or SHMAP_TLS_CA)");
    else if (strstr(err, "certificate verify failed") || strstr(err, "andshake") ||
             strstr(err, "peer certificate"))
        snprintf(err + n, errlen - n,
                 " (TLS: the coordinator's certificate must be signed by the CA given and name "
                 "the host dialled; a coordinator in plaintext refuses TLS clients too)");
}

sm_err sm_client_connect(const char *target, const sm_client_opts *opts, sm_client **out, char *err,
                         size_t errlen)
{
    sm_client *c;
    uint32_t version = 0;
    char server[128] = "";
    sm_err e;

    *out = NULL;
    if (!target || !*target)
        return sm_fail(err, errlen, SM_EINVAL, "no coordinator address was given");
    if (opts && (opts->cache_mb < 0 || opts->cache_mb > CLIENT_CACHE_MB_MAX))
        return sm_fail(err, errlen, SM_EINVAL,
                       "cache_mb must be a whole number of MiB from 0 to 1048576, not %lld",
                       (long long)opts->cache_mb);
    if (opts && (opts->stage_mb < 0 || opts->stage_mb > CLIENT_CACHE_MB_MAX))
        return sm_fail(err, errlen, SM_EINVAL,
                       "stage_mb must be a whole number of MiB from 0 to 1048576, not %lld",
                       (long long)opts->stage_mb);
    if (!(c = calloc(1, sizeof *c)))
        return sm_fail(err, errlen, SM_ENOMEM, "cannot allocate a client");
    if ((e = sm_array_pool_create(&c->arrays, err, errlen))) {
        free(c);
        return e;
    }
    if (opts && opts->cache_mb > 0)
        sm_array_pool_cache_set(c->arrays, (size_t)opts->cache_mb << 20, CLIENT_CACHE_IDLE_MS);
    c->timeout_ms = opts && opts->timeout_ms > 0 ? (int)opts->timeout_ms : 30000;
    if (opts) {
        c->progress = opts->progress;
        c->progress_user = opts->progress_user;
        c->relay_only = opts->relay_only != 0;
        c->no_shm = opts->no_shm != 0;
        if (opts->token && !(c->token = strdup(opts->token))) {
            sm_array_pool_free(c->arrays);
            free(c);
            return sm_fail(err, errlen, SM_ENOMEM, "cannot allocate a client");
        }
    }
    sm_rpc_init();
    if ((e = client_shm_create(
             c, (size_t)(opts ? opts->stage_mb : SM_CLIENT_STAGE_MB_DEFAULT) << 20, err, errlen)))
        goto fail;
    if (opts) {
        sm_rpc_tls_opts to = {opts->tls_cert, opts->tls_key, opts->tls_ca, NULL};
        if ((e = sm_rpc_tls_create(&to, &c->tls, err, errlen)))
            goto fail;
    }
    if (!(c->workers =
              sm_rpc_chans_create(c->token, c->tls, CLIENT_READY_MS, CLIENT_RETRY_S * 1000))) {
        e = sm_fail(err, errlen, SM_ENOMEM, "cannot allocate a client");
        goto fail;
    }
    if ((e = sm_rpc_channel_create_tls(target, opts ? opts->token : NULL, c->tls, &c->ch, err,
                                       errlen)))
        goto fail;
    int tenant = 0, grants = 0;
    if ((e = sm_svc_negotiate_relay(c->ch, 0, "libshmap", &version, server, sizeof server, &tenant,
                                    &grants, c->timeout_ms, err, errlen))) {
        client_tls_hint(c, e, err, errlen);
        goto fail;
    }
    /* workers take only the cluster's token, or the grants the coordinator
     * hands a tenant with the shards it describes */
    c->relay_only |= tenant && !grants;
    c->grants = tenant && grants;
    if (version != SHMAP_PROTOCOL_VERSION) {
        e = sm_fail(err, errlen, SM_EPRECONDITION,
                    "the coordinator at %s agreed on protocol version %u, but this client speaks "
                    "version %d",
                    target, version, SHMAP_PROTOCOL_VERSION);
        goto fail;
    }
    *out = c;
    return SM_OK;

fail:
    sm_client_close(c); /* frees what was made, and ends this sm_rpc_init */
    return e;
}

void sm_client_close(sm_client *c)
{
    if (!c)
        return;
    client_shm_close(c);
    sm_rpc_chans_free(c->workers);
    sm_rpc_channel_free(c->ch);
    sm_rpc_tls_free(c->tls);
    free(c->token);
    sm_array_pool_free(c->arrays);
    free(c);
    sm_rpc_shutdown();
}

sm_array_pool *sm_client_pool(sm_client *c)
{
    return c->arrays;
}

/* ---- worker channels (direct transfers) -------------------------------------- */

sm_rpc_channel *client_worker_channel(sm_client *c, const char *addr)
{
    sm_rpc_channel *ch = NULL;
    char err[256];

    if (c->relay_only || !addr || !*addr || strlen(addr) >= SM_ADDR_MAX)
        return NULL;
    /* Worker ports require a client certificate: without one, the relay
     * (a tenant's client needs none: its grants open the shards) */
    if (c->tls && !sm_rpc_tls_has_cert(c->tls) && !c->grants)
        return NULL;
    sm_rpc_chans_get(c->workers, addr, &ch, err, sizeof err);
    return ch;
}

void client_worker_unreachable(sm_client *c, const char *addr)
{
    if (addr)
        sm_rpc_chans_unreachable(c->workers, addr);
}

sm_err sm_client_devices(sm_client *c, sm_worker_info **out, int *n, char *err, size_t errlen)
{
    *out = NULL;
    *n = 0;
    return sm_svc_coord_list_devices(c->ch, c->timeout_ms, out, n, err, errlen);
}

sm_err sm_client_mesh_create(sm_client *c, const sm_mesh *mesh, int default_order, const char *name,
                             sm_mesh_info *out, char *err, size_t errlen)
{
    sm_mesh m = *mesh;
    if (default_order)
        m.ndevices = 0; /* no devices given: the service's default order */
    return sm_svc_coord_create_mesh(c->ch, c->timeout_ms, name, &m, default_order, out, err,
                                    errlen);
}

sm_err sm_client_mesh_get(sm_client *c, sm_mesh_id id, const char *name, sm_mesh_info *out,
                          char *err, size_t errlen)
{
    return sm_svc_coord_get_mesh(c->ch, c->timeout_ms, id, name, out, err, errlen);
}

sm_err sm_client_mesh_list(sm_client *c, sm_mesh_info **out, int *n, char *err, size_t errlen)
{
    *out = NULL;
    *n = 0;
    return sm_svc_coord_list_meshes(c->ch, c->timeout_ms, out, n, err, errlen);
}

sm_err sm_client_describe(sm_client *c, sm_array_ref ref, sm_array_info *out, char *err,
                          size_t errlen)
{
    memset(out, 0, sizeof *out);
    return sm_svc_coord_describe(c->ch, c->timeout_ms, ref, out, err, errlen);
}

sm_err sm_client_list(sm_client *c, sm_array_info **out, int *n, char *err, size_t errlen)
{
    *out = NULL;
    *n = 0;
    return sm_svc_coord_list_arrays(c->ch, c->timeout_ms, out, n, err, errlen);
}

/* 1 if sh names src's mesh inline, devices and all. */
static int client_same_mesh(const sm_array_info *src, const sm_sharding_ref *sh)
{
    const sm_mesh *a = &src->sharding.mesh, *b = sh->mesh;
    if (!b || sh->default_order || a->naxes != b->naxes || a->ndevices != b->ndevices)
        return 0;
    for (int k = 0; k < a->naxes; k++)
        if (strcmp(a->names[k], b->names[k]) || a->sizes[k] != b->sizes[k])
            return 0;
    return memcmp(a->devices, b->devices, sizeof *a->devices * (size_t)a->ndevices) == 0;
}

/* An unreduced array's value is the sum of its blocks, which the Reshard
 * call does not compute: `reshard(x, P(...))` runs as a jit job on the
 * array's mesh (its psum sums them), and a reshard to another mesh moves
 * that job's result on. */
static sm_err client_reshard_unreduced(sm_client *c, const sm_array_info *src,
                                       const sm_sharding_ref *sh, const char *new_name,
                                       sm_array_info *out, char *err, size_t errlen)
{
    const sm_mesh *m = &src->sharding.mesh;
    int direct = client_same_mesh(src, sh);
    sm_pspec target = src->sharding.spec; /* on another mesh: first reduced in place */
    target.nunreduced = 0;
    if (direct)
        target = sh->spec;
    char sp[400], tp[400], shp[200];
    sm_strbuf t = {0};
    sm_strbuf_printf(&t, "mesh");
    for (int k = 0; k < m->naxes; k++)
        sm_strbuf_printf(&t, " %s=%lld", m->names[k], (long long)m->sizes[k]);
    sm_strbuf_printf(&t, " devices=[");
    for (int d = 0; d < m->ndevices; d++)
        sm_strbuf_printf(&t, "%s%d", d ? ", " : "", (int)m->devices[d]);
    sm_strbuf_printf(&t, "]\njit reshard_unreduced(x: %s%s @ %s):\n    return reshard(x, %s)\n",
                     sm_dtype_name(src->dtype), sm_shape_format(&src->shape, shp, sizeof shp),
                     sm_pspec_format(&src->sharding.spec, sp, sizeof sp),
                     sm_pspec_format(&target, tp, sizeof tp));
    sm_program *p = NULL;
    sm_job_info info;
    memset(&info, 0, sizeof info);
    sm_err e = t.oom ? sm_fail(err, errlen, SM_ENOMEM, "out of memory")
                     : sm_program_parse(sm_strbuf_str(&t), "<reshard>", &p, err, errlen);
    sm_strbuf_free(&t);
    if (e)
        return e;
    const char *names[1] = {direct ? new_name : NULL};
    sm_array_ref arg = {.id = src->id};
    e = sm_job_run(c, p, 1, &arg, names, 1, 0, -1, &info, err, errlen);
    sm_program_free(p);
    if (!e && info.state != SM_JOB_DONE)
        e = sm_fail(err, errlen, SM_EINTERNAL, "reshard of unreduced array %llu: the job %s: %s",
                    (unsigned long long)src->id.v, sm_job_state_name(info.state), info.error);
    if (!e && info.noutputs != 1)
        e = sm_fail(err, errlen, SM_EINTERNAL, "reshard of unreduced array %llu: %d outputs",
                    (unsigned long long)src->id.v, info.noutputs);
    if (e) {
        sm_job_info_free(&info);
        return e;
    }
    sm_array_info *res = &info.outputs[0];
    if (direct) { /* the job's output is the result */
        if (out) {
            *out = *res;
            res->shards = NULL;
            res->nshards = 0;
            res->copies = NULL;
            res->ncopies = 0;
        }
        sm_job_info_free(&info);
        return SM_OK;
    }
    sm_array_ref mid = {.id = res->id};
    e = sm_client_reshard(c, mid, sh, new_name, out, err, errlen);
    char e2[256];
    sm_client_delete(c, mid, e2, sizeof e2);
    sm_job_info_free(&info);
    return e;
}

sm_err sm_client_replicate(sm_client *c, sm_array_ref ref, int replicas, sm_array_info *out,
                           char *err, size_t errlen)
{
    sm_svc_replicate_req req = {ref, replicas, 0};
    sm_array_info tmp;
    memset(&tmp, 0, sizeof tmp);
    /* Copies move data between workers: allow it the transfer deadline. */
    sm_err e = sm_svc_coord_replicate(c->ch, client_stream_deadline(c, (int64_t)1 << 30), &req,
                                      out ? out : &tmp, err, errlen);
    sm_array_info_free(&tmp);
    return e;
}

sm_err sm_client_reshard(sm_client *c, sm_array_ref ref, const sm_sharding_ref *sh,
                         const char *new_name, sm_array_info *out, char *err, size_t errlen)
{
    sm_svc_reshard_req req;
    sm_array_info tmp;
    sm_err e;

    /* an unreduced array is summed by a job (client_reshard_unreduced) */
    memset(&tmp, 0, sizeof tmp);
    if ((e = sm_client_describe(c, ref, &tmp, err, errlen)))
        return e;
    if (tmp.sharding.spec.nunreduced) {
        e = client_reshard_unreduced(c, &tmp, sh, new_name, out, err, errlen);
        sm_array_info_free(&tmp);
        return e;
    }
    sm_array_info_free(&tmp);
    memset(&req, 0, sizeof req);
    req.array = ref;
    req.sharding = *sh;
    req.name = new_name;
    memset(&tmp, 0, sizeof tmp);
    /* Resharding moves data between workers: allow it the transfer deadline. */
    e = sm_svc_coord_reshard(c->ch, client_stream_deadline(c, (int64_t)1 << 30), &req,
                             out ? out : &tmp, err, errlen);
    sm_array_info_free(&tmp);
    return e;
}

sm_err sm_client_delete(sm_client *c, sm_array_ref ref, char *err, size_t errlen)
{
    return sm_svc_coord_delete(c->ch, c->timeout_ms, ref, err, errlen);
}
