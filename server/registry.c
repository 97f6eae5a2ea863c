/* registry: workers, meshes, time and reaping. Arrays are in
 * registry_array.c, reshards in registry_reshard.c. See registry.h. */
#include "registry_int.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "sm_log.h"
#include "sm_rpc.h"

int sm_reg_vec_push(void ***v, int *n, int *cap, void *item)
{
    if (*n == *cap) {
        int nc = *cap ? *cap * 2 : 8;
        void **nv = realloc(*v, sizeof *nv * (size_t)nc);
        if (!nv)
            return -1;
        *v = nv;
        *cap = nc;
    }
    (*v)[(*n)++] = item;
    return 0;
}

/* A random 64-bit id for this coordinator run (never 0). */
static uint64_t sm_reg_new_epoch(void)
{
    uint64_t e = 0;
    if (getrandom(&e, sizeof e, 0) != (ssize_t)sizeof e || e == 0) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        e = ((uint64_t)ts.tv_sec << 32) ^ (uint64_t)ts.tv_nsec ^ ((uint64_t)getpid() << 16) ^ 1;
    }
    return e;
}

sm_err sm_registry_create(uint32_t default_deadline_ms, uint32_t heartbeat_ms, sm_registry **out,
                          char *err, size_t errlen)
{
    sm_registry *r = calloc(1, sizeof *r);
    *out = NULL;
    if (!r)
        return sm_fail(err, errlen, SM_ENOMEM, "out of memory creating the registry");
    pthread_mutex_init(&r->mu, NULL);
    r->default_deadline_ms = default_deadline_ms ? default_deadline_ms : 60000;
    r->heartbeat_ms = heartbeat_ms ? heartbeat_ms : 500;
    r->next_worker = 1;
    r->epoch = sm_reg_new_epoch();
    r->next_mesh = 1;
    r->next_array = 1;
    *out = r;
    return SM_OK;
}

void sm_registry_reserve(sm_registry *r, int nprocesses, int ndevices)
{
    pthread_mutex_lock(&r->mu);
    r->reserved_processes = nprocesses;
    r->reserved_devices = nprocesses * ndevices;
    pthread_mutex_unlock(&r->mu);
}

void sm_registry_free(sm_registry *r)
{
    if (!r)
        return;
    sm_registry_close_state(r);
    for (int i = 0; i < r->nworkers; i++) {
        if (r->workers[i]->ch)
            sm_rpc_channel_free(r->workers[i]->ch);
        free(r->workers[i]);
    }
    for (int i = 0; i < r->nmeshes; i++)
        free(r->meshes[i]);
    for (sm_reg_array *a = r->arrays, *next; a; a = next) {
        next = a->next;
        sm_reg_array_destroy(a);
    }
    free(r->workers);
    free(r->meshes);
    sm_htab_free(&r->array_ids);
    sm_htab_free(&r->array_names);
    pthread_mutex_destroy(&r->mu);
    free(r);
}

void sm_registry_set_limits(sm_registry *r, int64_t max_array_bytes, int max_name_len)
{
    pthread_mutex_lock(&r->mu);
    r->max_array_bytes = max_array_bytes > 0 ? max_array_bytes : 0;
    r->max_name_len = max_name_len > 0 && max_name_len < SM_NAME_MAX ? max_name_len : 0;
    pthread_mutex_unlock(&r->mu);
}

void sm_registry_set_tenants(sm_registry *r, sm_tenants *t)
{
    pthread_mutex_lock(&r->mu);
    r->tenants = t;
    pthread_mutex_unlock(&r->mu);
}

sm_err sm_reg_name_check(const char *what, const char *name, size_t max, char *err, size_t errlen)
{
    char w[32];
    snprintf(w, sizeof w, "%s name", what);
    sm_err e = sm_text_check(w, name, err, errlen);
    if (e)
        return e;
    size_t len = strlen(name), digits = 0;
    for (size_t i = 0; i < len; i++)
        digits += isdigit((unsigned char)name[i]) != 0;
    if (len >= max)
        return sm_fail(err, errlen, SM_EINVAL, "%s name '%.40s...' is longer than %zu characters",
                       what, name, max - 1);
    if (digits == len)
        return sm_fail(err, errlen, SM_EINVAL,
                       "%s name '%s' is made only of digits, which would read as an id; add a "
                       "letter",
                       what, name);
    return SM_OK;
}

sm_err sm_reg_array_name_check(const sm_registry *r, const char *name, char *err, size_t errlen)
{
    if (r->max_name_len > 0 && strlen(name) > (size_t)r->max_name_len)
        return sm_fail(err, errlen, SM_EINVAL,
                       "array name '%.40s...' is longer than %d characters, the most this "
                       "coordinator takes (--max-name-length)",
                       name, r->max_name_len);
    return sm_reg_name_check("array", name, SM_NAME_MAX, err, errlen);
}

/* ---- workers ------------------------------------------------------------ */

sm_reg_worker *sm_reg_worker_by_id(sm_registry *r, uint32_t id)
{
    for (int i = 0; i < r->nworkers; i++)
        if (r->workers[i]->id == id)
            return r->workers[i];
    return NULL;
}

sm_reg_worker *sm_reg_worker_of_device(sm_registry *r, int32_t device)
{
    for (int i = 0; i < r->nworkers; i++) {
        sm_reg_worker *w = r->workers[i];
        if (device >= w->first_device && device < w->first_device + w->ndevices)
            return w;
    }
    return NULL;
}

static sm_reg_worker *sm_reg_worker_alive_at(sm_registry *r, int process)
{
    for (int i = 0; i < r->nworkers; i++)
        if (r->workers[i]->alive && r->workers[i]->process_index == process)
            return r->workers[i];
    return NULL;
}

/* The first process index no alive worker holds, past the reserved ones. */
static int sm_reg_free_process(sm_registry *r)
{
    int p = r->reserved_processes;
    while (sm_reg_worker_alive_at(r, p))
        p++;
    return p;
}

int sm_reg_device_list(const sm_reg_array *a, const unsigned char *pick, char *buf, size_t len)
{
    int32_t *d = malloc(sizeof *d * (size_t)a->n);
    int count = 0;
    size_t n = 0;
    buf[0] = 0;
    if (!d)
        return 0;
    for (int p = 0; p < a->n; p++)
        if (pick[p]) {
            int k = count++;
            for (; k > 0 && d[k - 1] > a->slices[p].device; k--)
                d[k] = d[k - 1];
            d[k] = a->slices[p].device;
        }
    for (int k = 0; k < count && n < len; k++)
        n += (size_t)snprintf(buf + n, len - n, "%s%d", k ? "," : "", (int)d[k]);
    free(d);
    return count;
}

/* Marks w lost and updates every array with devices on it (see
 * sm_registry_worker_lose). */
static void sm_reg_worker_mark_lost(sm_registry *r, sm_reg_worker *w, const char *why,
                                    sm_reg_free **frees, int *nfrees)
{
    char label[SM_NAME_MAX + 16];
    w->alive = 0;
    SM_WARN("worker %u at %s (process %d) is lost: %s", w->id, w->address, w->process_index, why);
    sm_reg_tx_begin(r);
    for (sm_reg_array *a = r->arrays; a; a = a->next) {
        char devs[256];
        unsigned char gone[SM_MAX_DEVICES];
        int hit = 0;
        for (int p = 0; p < a->n; p++) {
            sm_reg_worker *o = sm_reg_worker_by_id(r, a->worker[p]);
            gone[p] = o && !o->alive;
            hit |= a->worker[p] == w->id;
        }
        if (hit)
            sm_reg_device_list(a, gone, devs, sizeof devs);
        if (!hit)
            continue;
        sm_reg_array_label(a, label, sizeof label);
        char msg[1024];
        if (a->state == SM_ARRAY_READY || a->state == SM_ARRAY_LOST ||
            a->state == SM_ARRAY_DEGRADED) {
            snprintf(msg, sizeof msg, "worker %u at %s: %s", w->id, w->address, why);
            sm_reg_array_update_health(r, a, msg);
        } else if (a->state == SM_ARRAY_PENDING) {
            snprintf(msg, sizeof msg, "%s failed: devices %s are gone (worker %u at %s: %s)", label,
                     devs, w->id, w->address, why);
            sm_reg_array_fail(r, a, msg, frees, nfrees);
        }
    }
    sm_reg_tx_end(r);
}

/* Worker ids a worker may ask for are below this. */
#define SM_REG_WORKER_ID_MAX (UINT32_C(1) << 31)

/* Frees one registration sends at most (the worker's shards of arrays that
 * are gone); past it the rest stay until it registers again. */
#define SM_REG_FREES_MAX 4096

/* Appends a free of (array, device) on w, joining a recent free of the
 * same array on w if there is one. */
static void sm_reg_free_one(sm_reg_worker *w, uint64_t array, int32_t device, sm_reg_free **frees,
                            int *nfrees)
{
    if (*nfrees >= SM_REG_FREES_MAX)
        return;
    for (int k = *nfrees > 16 ? *nfrees - 16 : 0; k < *nfrees; k++) {
        sm_reg_free *f = &(*frees)[k];
        if (f->array.v == array && f->t.worker_id == w->id &&
            f->t.ndevices < SM_MAX_WORKER_DEVICES) {
            f->t.devices[f->t.ndevices++] = device;
            return;
        }
    }
    sm_reg_free *nf = realloc(*frees, sizeof *nf * (size_t)(*nfrees + 1));
    if (!nf)
        return;
    *frees = nf;
    sm_reg_free *f = &nf[(*nfrees)++];
    memset(f, 0, sizeof *f);
    f->array.v = array;
    sm_reg_target_set(&f->t, w);
    f->t.ndevices = 1;
    f->t.devices[0] = device;
}

/* Takes back the shards w offers (req->held): a shard of a LOST or READY
 * array at a position of w's is marked present; an array whose every
 * position is present on an alive worker is READY again. The shards of
 * arrays this registry does not keep are freed. */
static void sm_reg_worker_adopt(sm_registry *r, sm_reg_worker *w, const sm_svc_register_req *req,
                                sm_reg_free **frees, int *nfrees)
{
    char label[SM_NAME_MAX + 16];
    int adopted = 0, ready = 0;
    for (sm_reg_array *a = r->arrays; a; a = a->next) {
        for (int p = 0; p < a->n; p++)
            if (a->worker[p] == w->id && a->state != SM_ARRAY_PENDING)
                a->filled[p] = 0;
        for (int k = 0; k < a->ncopies; k++)
            if (a->copies[k].worker == w->id) {
                a->copies[k].filled = 0; /* unless offered back below */
                r->repair_hint = 1;
            }
    }
    for (int k = 0; k < req->nheld; k++) {
        const sm_svc_held_shard *h = &req->held[k];
        sm_reg_array *a =
            sm_reg_array_find(r, (sm_array_ref){{SM_REG_COPY_OWNER(h->array)}, NULL}, NULL, 0);
        int p = a ? sm_reg_slot_find(a, h->array, h->device) : -1;
        int ok = a && p >= 0 && sm_reg_slot_worker(a, p) == w->id &&
                 (a->state == SM_ARRAY_LOST || a->state == SM_ARRAY_READY ||
                  a->state == SM_ARRAY_DEGRADED);
        if (ok && p >= a->n) { /* a copy: no checksum recorded, taken on the worker's word */
            a->copies[p - a->n].filled = 1;
            adopted++;
        } else if (ok && a->sums[p] && h->checksum && a->sums[p] != h->checksum) {
            SM_WARN("worker %u offers the shard of %s on device %d with checksum %016llx, not "
                    "the %016llx it was uploaded with; not taken back",
                    w->id, sm_reg_array_label(a, label, sizeof label), (int)h->device,
                    (unsigned long long)h->checksum, (unsigned long long)a->sums[p]);
            sm_reg_free_one(w, h->array, h->device, frees, nfrees);
        } else if (ok) {
            a->filled[p] = 1;
            adopted++;
        } else if (!a || a->state != SM_ARRAY_PENDING) {
            sm_reg_free_one(w, h->array, h->device, frees, nfrees);
        }
    }
    for (sm_reg_array *a = r->arrays; a; a = a->next) {
        if (a->state != SM_ARRAY_LOST && a->state != SM_ARRAY_READY &&
            a->state != SM_ARRAY_DEGRADED)
            continue;
        int mine = 0;
        for (int p = 0; p < a->n; p++)
            mine |= a->worker[p] == w->id;
        if (!mine)
            continue;
        sm_array_state was = a->state;
        char msg[512];
        snprintf(msg, sizeof msg, "worker %u at %s came back without some of its shards", w->id,
                 w->address);
        sm_reg_array_update_health(r, a, msg);
        ready += a->state == SM_ARRAY_READY && was != SM_ARRAY_READY;
    }
    if (req->nheld)
        SM_INFO("worker %u offered %d shard(s): %d adopted, %d array(s) ready again", w->id,
                req->nheld, adopted, ready);
}

/* The registered worker whose identity a registration asks for: same id,
 * device count and (if given) device ids; NULL if none. */
static sm_reg_worker *sm_reg_worker_claimed(sm_registry *r, const sm_svc_register_req *req)
{
    sm_reg_worker *o = req->worker_id.v ? sm_reg_worker_by_id(r, req->worker_id.v) : NULL;
    if (!o || o->ndevices != req->ndevices)
        return NULL;
    for (int k = 0; req->devices && k < req->ndevices; k++)
        if (req->devices[k] != o->first_device + k)
            return NULL;
    return o;
}

sm_err sm_registry_worker_add(sm_registry *r, const sm_svc_register_req *req, sm_rpc_channel *ch,
                              int64_t now_ms, sm_svc_register_reply *out, sm_reg_free **frees,
                              int *nfrees, char *err, size_t errlen)
{
    sm_err rc = SM_OK;
    sm_reg_worker *w = NULL;
    const char *addr = req->address ? req->address : "";
    int keep = 0;
    pthread_mutex_lock(&r->mu);
    sm_reg_tx_begin(r);
    if (!*addr || strlen(addr) >= SM_ADDR_MAX) {
        rc = sm_fail(err, errlen, SM_EINVAL, "worker address '%.60s' is empty or too long", addr);
        goto out;
    }
    if (req->ndevices < 1 || req->ndevices > SM_MAX_WORKER_DEVICES) {
        rc = sm_fail(err, errlen, SM_EINVAL, "a worker must have 1 to %d devices, not %d",
                     SM_MAX_WORKER_DEVICES, req->ndevices);
        goto out;
    }
    /* Device ids: a worker that asked for process index k gets k * ndevices
     * onward when no worker ever held those ids, so a cluster started with
     * explicit indices numbers its devices by process (process 1 of 4 x 2
     * holds devices 2 and 3) whatever the order of registration; otherwise
     * the next unused ids. Ids are never reused. */
    int64_t first = r->next_device;
    if (req->process_index < 0 && first < r->reserved_devices)
        first = r->reserved_devices;
    if (req->process_index >= 0) {
        int64_t base = (int64_t)req->process_index * req->ndevices;
        int taken = base + req->ndevices > SM_MAX_DEVICES;
        for (int i = 0; i < r->nworkers && !taken; i++) {
            const sm_reg_worker *o = r->workers[i];
            taken = base < o->first_device + o->ndevices && o->first_device < base + req->ndevices;
        }
        if (!taken)
            first = base;
    }
    if (first + req->ndevices > SM_MAX_DEVICES) {
        rc = sm_fail(err, errlen, SM_ERESOURCE,
                     "cannot give %d more devices: device ids would pass %d", req->ndevices,
                     SM_MAX_DEVICES);
        goto out;
    }
    /* A worker coming back takes its identity back, unless it is still
     * alive at another address: then a restarted process waits (retrying)
     * until its old self is marked lost, so that no stray registration
     * can take an alive worker's place. */
    sm_reg_worker *back = sm_reg_worker_claimed(r, req);
    if (back && back->alive && strcmp(back->address, addr)) {
        rc = sm_fail(err, errlen, SM_EEXIST,
                     "worker %u is alive at %s; a restarted worker gets its identity back once "
                     "its old self is marked lost (--lost-after-ms)",
                     back->id, back->address);
        goto out;
    }
    sm_reg_worker *holder =
        req->process_index >= 0 ? sm_reg_worker_alive_at(r, req->process_index) : NULL;
    if (holder && strcmp(holder->address, addr) != 0 && holder != back) {
        rc = sm_fail(err, errlen, SM_EEXIST, "process index %d is already held by worker %u at %s",
                     req->process_index, holder->id, holder->address);
        goto out;
    }
    if (back) {
        /* A worker coming back with its identity (the coordinator restarted
         * or lost it): same id and devices, its offered shards adopted. */
        for (int i = 0; i < r->nworkers; i++)
            if (r->workers[i] != back && r->workers[i]->alive &&
                !strcmp(r->workers[i]->address, addr))
                sm_reg_worker_mark_lost(r, r->workers[i],
                                        "another worker registered at its address", frees, nfrees);
        w = back;
        if (w->ch && w->ch != ch)
            sm_rpc_channel_free(w->ch);
        snprintf(w->address, sizeof w->address, "%s", addr);
        snprintf(w->host, sizeof w->host, "%s", req->host ? req->host : "");
        if (req->process_index >= 0)
            w->process_index = req->process_index;
        if (w->process_index < 0 || (sm_reg_worker_alive_at(r, w->process_index) &&
                                     sm_reg_worker_alive_at(r, w->process_index) != w))
            w->process_index = sm_reg_free_process(r);
        w->alive = 1;
        w->last_seen = now_ms;
        w->ch = ch;
        memset(w->device_bytes, 0, sizeof w->device_bytes);
        sm_reg_save_worker(r, w);
        sm_reg_worker_adopt(r, w, req, frees, nfrees);
        keep = 1;
        goto reply;
    }
    w = calloc(1, sizeof *w);
    if (!w || sm_reg_vec_push((void ***)&r->workers, &r->nworkers, &r->capworkers, w)) {
        free(w);
        rc = sm_fail(err, errlen, SM_ENOMEM, "out of memory registering a worker");
        goto out;
    }
    /* A worker restarted at the same address: its old self is gone. */
    for (int i = 0; i < r->nworkers - 1; i++)
        if (r->workers[i]->alive && !strcmp(r->workers[i]->address, addr))
            sm_reg_worker_mark_lost(r, r->workers[i], "it registered again", frees, nfrees);
    /* A new worker may ask for an id never handed out (--worker-id, below
     * SM_REG_WORKER_ID_MAX so that ids never wrap around). */
    uint32_t asked = req->worker_id.v;
    if (asked && asked >= r->next_worker && asked < SM_REG_WORKER_ID_MAX &&
        !sm_reg_worker_by_id(r, asked))
        r->next_worker = asked;
    w->id = r->next_worker++;
    snprintf(w->address, sizeof w->address, "%s", addr);
    snprintf(w->host, sizeof w->host, "%s", req->host ? req->host : "");
    w->process_index = req->process_index;
    if (w->process_index < 0)
        w->process_index = sm_reg_free_process(r);
    w->alive = 1;
    w->last_seen = now_ms;
    w->ndevices = req->ndevices;
    w->first_device = first;
    if (first + req->ndevices > r->next_device)
        r->next_device = first + req->ndevices;
    w->ch = ch;
    sm_reg_save_worker(r, w);
    /* A new identity: what it offers belongs to no array here, and the
     * reply (keep_shards 0) tells it to drop everything. */
reply:
    memset(out, 0, sizeof *out);
    out->worker_id.v = w->id;
    out->ndevices = w->ndevices;
    for (int k = 0; k < w->ndevices; k++)
        out->devices[k] = w->first_device + k;
    out->process_index = w->process_index;
    out->heartbeat_ms = r->heartbeat_ms;
    out->epoch = r->epoch;
    out->keep_shards = keep;
    SM_INFO("worker %u registered at %s: process %d, devices %d..%d", w->id, w->address,
            w->process_index, (int)w->first_device, (int)(w->first_device + w->ndevices - 1));
out:
    sm_reg_tx_end(r);
    pthread_mutex_unlock(&r->mu);
    return rc;
}

uint64_t sm_registry_epoch(const sm_registry *r)
{
    return r->epoch;
}

int sm_registry_worker_heartbeat(sm_registry *r, const sm_svc_heartbeat_req *req, int64_t now_ms)
{
    int known = 0;
    pthread_mutex_lock(&r->mu);
    sm_reg_worker *w = sm_reg_worker_by_id(r, req->worker_id.v);
    /* A heartbeat from another coordinator run names a worker of that run,
     * whatever worker holds the same id now. */
    if (w && w->alive && req->epoch == r->epoch) {
        known = 1;
        w->last_seen = now_ms;
        for (int k = 0; k < w->ndevices && k < req->ndevices; k++)
            w->device_bytes[k] = req->device_bytes[k];
        if (req->nspilled > 0 || w->spilled_any) { /* the list is whole: set it anew */
            for (sm_reg_array *a = r->arrays; a; a = a->next)
                for (int p = 0; p < a->n; p++)
                    if (a->worker[p] == w->id)
                        a->spilled[p] = 0;
            for (int k = 0; k < req->nspilled; k++) {
                sm_reg_array *a =
                    sm_reg_array_find(r, (sm_array_ref){{req->spilled[k].array}, NULL}, NULL, 0);
                int p = a ? sm_mesh_find_device(&a->sharding.mesh, req->spilled[k].device) : -1;
                if (p >= 0 && a->worker[p] == w->id)
                    a->spilled[p] = 1;
            }
            w->spilled_any = req->nspilled > 0;
        }
    }
    pthread_mutex_unlock(&r->mu);
    return known;
}

int sm_registry_worker_lose(sm_registry *r, uint32_t id, int process, const char *why,
                            sm_reg_free **frees, int *nfrees)
{
    int marked = 0;
    pthread_mutex_lock(&r->mu);
    sm_reg_worker *w = id ? sm_reg_worker_by_id(r, id) : sm_reg_worker_alive_at(r, process);
    if (w && w->alive) {
        sm_reg_worker_mark_lost(r, w, why, frees, nfrees);
        marked = 1;
    }
    pthread_mutex_unlock(&r->mu);
    return marked;
}

sm_err sm_registry_workers_list(sm_registry *r, int64_t now_ms, sm_worker_info **out, int *n,
                                char *err, size_t errlen)
{
    sm_err rc = SM_OK;
    pthread_mutex_lock(&r->mu);
    *out = calloc(r->nworkers ? (size_t)r->nworkers : 1, sizeof **out);
    *n = 0;
    if (!*out) {
        rc = sm_fail(err, errlen, SM_ENOMEM, "out of memory listing workers");
        goto out;
    }
    for (int i = 0; i < r->nworkers; i++) {
        const sm_reg_worker *w = r->workers[i];
        sm_worker_info *wi = &(*out)[i];
        wi->id.v = w->id;
        snprintf(wi->address, sizeof wi->address, "%s", w->address);
        snprintf(wi->host, sizeof wi->host, "%s", w->host);
        wi->process_index = w->process_index;
        wi->alive = w->alive;
        wi->ms_since_heartbeat = now_ms - w->last_seen;
        wi->ndevices = w->ndevices;
        for (int k = 0; k < w->ndevices; k++) {
            wi->devices[k] = w->first_device + k;
            wi->device_bytes[k] = w->device_bytes[k];
        }
        wi->nshm_peers = w->nshm_peers;
        for (int k = 0; k < w->nshm_peers; k++)
            wi->shm_peers[k].v = w->shm_peers[k];
    }
    *n = r->nworkers;
out:
    pthread_mutex_unlock(&r->mu);
    return rc;
}

int sm_registry_workers_alive(sm_registry *r)
{
    int n = 0;
    pthread_mutex_lock(&r->mu);
    for (int i = 0; i < r->nworkers; i++)
        n += r->workers[i]->alive;
    pthread_mutex_unlock(&r->mu);
    return n;
}

int sm_registry_worker_alive(sm_registry *r, uint32_t id)
{
    pthread_mutex_lock(&r->mu);
    const sm_reg_worker *w = sm_reg_worker_by_id(r, id);
    int alive = w && w->alive;
    pthread_mutex_unlock(&r->mu);
    return alive;
}

static void sm_reg_shm_peer_add(sm_reg_worker *w, uint32_t peer)
{
    for (int k = 0; k < w->nshm_peers; k++)
        if (w->shm_peers[k] == peer)
            return;
    if (w->nshm_peers < SM_MAX_SHM_PEERS)
        w->shm_peers[w->nshm_peers++] = peer;
}

void sm_registry_worker_shm_peer(sm_registry *r, uint32_t a, uint32_t b)
{
    pthread_mutex_lock(&r->mu);
    sm_reg_worker *wa = sm_reg_worker_by_id(r, a), *wb = sm_reg_worker_by_id(r, b);
    if (wa && wb) {
        sm_reg_shm_peer_add(wa, b);
        sm_reg_shm_peer_add(wb, a);
    }
    pthread_mutex_unlock(&r->mu);
}

/* ---- reaping ------------------------------------------------------------------ */

/* The deadline sentence of a pending array into msg. */
static void sm_reg_deadline_msg(sm_registry *r, const sm_reg_array *a, char *msg, size_t len)
{
    char label[SM_NAME_MAX + 16], list[256] = "";
    size_t n = 0;
    int count = 0;
    sm_reg_array_label(a, label, sizeof label);
    if (a->local) {
        for (int p = 0; p < a->nprocs; p++) {
            int missing = 0;
            for (int i = 0; i < a->n && !missing; i++) {
                sm_reg_worker *w = sm_reg_worker_by_id(r, a->worker[i]);
                missing = w && w->process_index == a->proc_index[p] && !a->filled[i];
            }
            if (missing && n < sizeof list) {
                n += (size_t)snprintf(list + n, sizeof list - n, "%s%d", count ? "," : "",
                                      a->proc_index[p]);
                count++;
            }
        }
        snprintf(msg, len, "%s failed: process%s %s never sent %s part%s before the %u ms deadline",
                 label, count > 1 ? "es" : "", list, count > 1 ? "their" : "its",
                 count > 1 ? "s" : "", a->deadline_ms);
        return;
    }
    unsigned char unfilled[SM_MAX_DEVICES];
    for (int i = 0; i < a->n; i++)
        unfilled[i] = !a->filled[i];
    count = sm_reg_device_list(a, unfilled, list, sizeof list);
    snprintf(msg, len, "%s failed: device%s %s never received data before the %u ms deadline",
             label, count > 1 ? "s" : "", list, a->deadline_ms);
}

void sm_registry_reap(sm_registry *r, int64_t now_ms, int64_t lost_after_ms, sm_reg_free **frees,
                      int *nfrees)
{
    pthread_mutex_lock(&r->mu);
    /* One transaction for what this pass changes, begun at its first
     * change: none (not even an empty one, which still costs the
     * database's lock and a commit) when nothing is due, as on almost
     * every pass. */
    int began = 0;
    for (sm_reg_array *a = r->arrays; a; a = a->next) {
        if (a->state != SM_ARRAY_PENDING || now_ms < a->deadline)
            continue;
        if (!began++)
            sm_reg_tx_begin(r);
        char msg[1024];
        sm_reg_deadline_msg(r, a, msg, sizeof msg);
        SM_WARN("%s", msg);
        sm_reg_array_fail(r, a, msg, frees, nfrees);
    }
    for (int i = 0; i < r->nworkers; i++) {
        sm_reg_worker *w = r->workers[i];
        if (w->alive && now_ms - w->last_seen > lost_after_ms) {
            if (!began++)
                sm_reg_tx_begin(r);
            char why[96];
            snprintf(why, sizeof why, "no heartbeat for %lld ms",
                     (long long)(now_ms - w->last_seen));
            sm_reg_worker_mark_lost(r, w, why, frees, nfrees);
        }
    }
    if (began)
        sm_reg_tx_end(r);
    pthread_mutex_unlock(&r->mu);
}
