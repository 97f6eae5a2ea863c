/* client_ckpt: sm_client_save and sm_client_load (see shmap.h). The
 * workers move the data; the client names the directory and waits. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "client_internal.h"

/* How long a save or load may take at least (ms). */
#define CLIENT_CKPT_MS 600000

static int client_ckpt_deadline(const sm_client *c)
{
    return c->timeout_ms > CLIENT_CKPT_MS ? c->timeout_ms : CLIENT_CKPT_MS;
}

/* dir made absolute against the working directory, into buf. */
static sm_err client_ckpt_dir(const char *dir, char *buf, size_t len, char *err, size_t errlen)
{
    char cwd[PATH_MAX];
    if (!dir || !*dir)
        return sm_fail(err, errlen, SM_EINVAL, "no checkpoint directory given");
    if (dir[0] == '/') {
        if (snprintf(buf, len, "%s", dir) >= (int)len)
            return sm_fail(err, errlen, SM_EINVAL, "the checkpoint directory %s is too long", dir);
        return SM_OK;
    }
    if (!getcwd(cwd, sizeof cwd))
        return sm_fail(err, errlen, SM_EIO,
                       "cannot resolve the relative checkpoint directory %s: %s", dir,
                       strerror(errno));
    const char *rest = strncmp(dir, "./", 2) ? dir : dir + 2;
    if (snprintf(buf, len, "%s/%s", strcmp(cwd, "/") ? cwd : "", rest) >= (int)len)
        return sm_fail(err, errlen, SM_EINVAL, "the checkpoint directory %s/%s is too long", cwd,
                       rest);
    return SM_OK;
}

sm_err sm_client_save(sm_client *c, sm_array_ref ref, const char *dir, int64_t *bytes, int *files,
                      char *err, size_t errlen)
{
    char abs[PATH_MAX];
    sm_svc_save_reply rep;
    sm_err e = client_ckpt_dir(dir, abs, sizeof abs, err, errlen);
    if (e)
        return e;
    int ms = client_ckpt_deadline(c);
    sm_svc_save_req req = {ref, abs, (uint32_t)ms};
    if ((e = sm_svc_coord_save(c->ch, ms, &req, &rep, err, errlen)))
        return e;
    if (bytes)
        *bytes = rep.bytes;
    if (files)
        *files = rep.files;
    return SM_OK;
}

sm_err sm_client_load(sm_client *c, const char *dir, const sm_sharding_ref *sh, const char *name,
                      sm_array_info *out, char *err, size_t errlen)
{
    char abs[PATH_MAX];
    sm_array_info tmp;
    sm_err e = client_ckpt_dir(dir, abs, sizeof abs, err, errlen);
    if (e)
        return e;
    int ms = client_ckpt_deadline(c);
    sm_svc_load_req req = {abs, *sh, name, (uint32_t)ms};
    memset(&tmp, 0, sizeof tmp);
    e = sm_svc_coord_load(c->ch, ms, &req, out ? out : &tmp, err, errlen);
    sm_array_info_free(&tmp);
    return e;
}
