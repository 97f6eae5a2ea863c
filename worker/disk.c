#define _GNU_SOURCE /* gettid */
#include "disk.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <sys/resource.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "sm_array.h"
#include "sm_checksum.h"
#include "sm_log.h"
#include "sm_time.h"
#include "sm_tpool.h"

#define SM_DISK_DIR  4000 /* longest state dir path, with its NUL */
#define SM_DISK_PATH 4200
/* A shard's copy is written this long after it was stored, so that the
 * temporaries of reshards and jobs, and results deleted at once, are
 * dropped before anything is written. */
#define SM_DISK_DELAY_MS 50
/* Empty files kept in spare/ for the next copies: an idle writer makes them
 * ahead of need, and a dropped shard's files go there (emptied) instead of
 * being removed. Making a file costs more CPU than writing megabytes into
 * it on a filesystem with many recently freed inodes (ext4 without a
 * journal searches past each of them), and the idle time is the place for
 * it. Each copy takes two (its .npy and its .sum). Up to SM_DISK_SPARES are
 * made; dropped files are kept up to twice as many. */
#define SM_DISK_SPARES         128
#define SM_DISK_SPARE_MAKE     16  /* made per idle look at the queue */
#define SM_DISK_SPARE_QUIET_MS 250 /* ... once nothing was queued for this long */

typedef struct sm_disk_op {
    struct sm_disk_op *next;
    uint64_t array;
    int32_t device;
    sm_store_shard *sh;  /* a reference; NULL: remove the files */
    struct timespec due; /* CLOCK_MONOTONIC: not before */
} sm_disk_op;

struct sm_disk {
    char dir[SM_DISK_DIR];
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;   /* work queued, or stopping */
    pthread_cond_t idle; /* the queue emptied */
    sm_disk_op *head, *tail;
    int busy; /* the thread is working on an op */
    int stopping;
    int flushing; /* sm_disk_flush waits: no delay */
    /* spare/N for the N in spare[0..nspare): touched by the writer thread
     * only, after sm_disk_open */
    struct timespec tick;   /* CLOCK_MONOTONIC: the writer sleeps at least until then */
    int64_t last_queued_ms; /* sm_time_mono_ms of the last sm_disk_queue */
    uint32_t spare[2 * SM_DISK_SPARES];
    int nspare;
    uint32_t spare_next; /* the next N to make */
};

static void sm_disk_paths(const sm_disk *d, uint64_t array, int32_t device, char *npy, char *sum)
{
    snprintf(npy, SM_DISK_PATH, "%s/shards/%" PRIu64 "-%d.npy", d->dir, array, (int)device);
    snprintf(sum, SM_DISK_PATH, "%s/shards/%" PRIu64 "-%d.sum", d->dir, array, (int)device);
}

static void sm_disk_spare_path(const sm_disk *d, uint32_t n, char *out)
{
    snprintf(out, SM_DISK_PATH, "%s/spare/%" PRIu32, d->dir, n);
}

/* Takes a spare file for a copy: 1 and its path in out, or 0 if none is
 * left. */
static int sm_disk_spare_take(sm_disk *d, char *out)
{
    if (d->nspare == 0)
        return 0;
    sm_disk_spare_path(d, d->spare[--d->nspare], out);
    return 1;
}

/* Removes path, keeping its inode as an emptied spare while there is room. */
static void sm_disk_spare_give(sm_disk *d, const char *path)
{
    char spare[SM_DISK_PATH];
    if (d->nspare < 2 * SM_DISK_SPARES) {
        uint32_t n = d->spare_next++;
        sm_disk_spare_path(d, n, spare);
        if (truncate(path, 0) == 0 && rename(path, spare) == 0) {
            d->spare[d->nspare++] = n;
            return;
        }
    }
    unlink(path);
}

/* Makes up to SM_DISK_SPARE_MAKE spare files while there is room. */
static void sm_disk_spare_make(sm_disk *d)
{
    char spare[SM_DISK_PATH];
    for (int k = 0; k < SM_DISK_SPARE_MAKE && d->nspare < SM_DISK_SPARES; k++) {
        uint32_t n = d->spare_next++;
        sm_disk_spare_path(d, n, spare);
        int fd = open(spare, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        if (fd < 0)
            return;
        close(fd);
        d->spare[d->nspare++] = n;
    }
}

/* Writes text to path through a temporary file (a spare, if d has one)
 * and a rename. Not synced: a killed process loses nothing the kernel
 * holds, and after a power loss a copy whose data did not reach the disk
 * fails its checksum when read back and is dropped, as a damaged one is.
 * d is NULL outside the writer thread. */
static int sm_disk_write_small(sm_disk *d, const char *path, const char *text)
{
    char tmp[SM_DISK_PATH + 16];
    if (!d || !sm_disk_spare_take(d, tmp))
        snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f)
        return -1;
    int bad = fputs(text, f) < 0;
    bad |= fflush(f) != 0;
    bad |= fclose(f) != 0;
    if (bad || rename(tmp, path) != 0) {
        unlink(tmp);
        return -1;
    }
    return 0;
}

static void sm_disk_do(sm_disk *d, const sm_disk_op *op)
{
    char npy[SM_DISK_PATH], sum[SM_DISK_PATH], err[512], text[32];
    sm_disk_paths(d, op->array, op->device, npy, sum);
    if (!op->sh) {
        sm_disk_spare_give(d, sum); /* first: a shard without its .sum is never restored */
        sm_disk_spare_give(d, npy);
        return;
    }
    unlink(sum);
    const sm_store_shard *sh = op->sh;
    if (sh->dtype == SM_BF16)
        return;
    sm_array view = {.dtype = sh->dtype,
                     .shape = sh->shape,
                     .nbytes = sh->nbytes,
                     .data = sh->nbytes ? sh->data : NULL};
    uint64_t c =
        sh->has_checksum ? sh->checksum : sm_checksum_oneshot(sh->data, (size_t)sh->nbytes);
    snprintf(text, sizeof text, "%016" PRIx64 "\n", c);
    char spare[SM_DISK_PATH];
    int have_spare = sm_disk_spare_take(d, spare);
    if (sm_npy_write_direct(npy, have_spare ? spare : NULL, &view, err, sizeof err)) {
        if (have_spare)
            unlink(spare);
        SM_WARN("shard of array %" PRIu64 " on device %d not copied to disk: %s", op->array,
                (int)op->device, err);
        return;
    }
    if (sm_disk_write_small(d, sum, text))
        SM_WARN("shard of array %" PRIu64 " on device %d not copied to disk: cannot write %s: %s",
                op->array, (int)op->device, sum, strerror(errno));
}

static int ts_before(const struct timespec *a, const struct timespec *b)
{
    return a->tv_sec < b->tv_sec || (a->tv_sec == b->tv_sec && a->tv_nsec < b->tv_nsec);
}

static void *sm_disk_main(void *arg)
{
    sm_disk *d = arg;
    /* The copies are background work: this thread yields the cores to
     * uploads and jobs (nice 10: a small share under load, all of an idle
     * core; best effort). */
    (void)setpriority(PRIO_PROCESS, (id_t)gettid(), 10);
    pthread_mutex_lock(&d->mu);
    for (;;) {
        /* Idle, it looks at the queue every SM_DISK_DELAY_MS: storing a
         * shard then never wakes it (a wake-up per job cost the job path a
         * context switch), and no copy is due sooner anyway. */
        while (!d->head && !d->stopping) {
            struct timespec next = sm_time_after_ms(CLOCK_MONOTONIC, SM_DISK_DELAY_MS);
            /* Spares are made only when nothing was stored or dropped for
             * SM_DISK_SPARE_QUIET_MS: a stream of jobs empties the queue
             * between them (their outputs are dropped before they are
             * due), and making files then would take the cores from it. */
            if (pthread_cond_timedwait(&d->cv, &d->mu, &next) == ETIMEDOUT && !d->head &&
                d->nspare < SM_DISK_SPARES &&
                sm_time_mono_ms() - d->last_queued_ms >= SM_DISK_SPARE_QUIET_MS) {
                pthread_mutex_unlock(&d->mu);
                sm_disk_spare_make(d);
                pthread_mutex_lock(&d->mu);
            }
        }
        sm_disk_op *op = d->head;
        if (!op)
            break; /* stopping with nothing queued */
        /* Wait until it is due, and at least SM_DISK_DELAY_MS after the
         * thread last went to sleep: woken, it writes every copy due by
         * then, so a stream of jobs costs it about 20 wake-ups a second
         * rather than one per shard (most of which, their shards dropped
         * meanwhile, would find nothing to do). The lock is released
         * meanwhile: a drop may take op out of the queue and free it
         * (without waking this thread), so op is only used again if it is
         * still the head. */
        if (!d->stopping && !d->flushing) {
            struct timespec now;
            clock_gettime(CLOCK_MONOTONIC, &now);
            if (ts_before(&now, &op->due)) {
                if (ts_before(&d->tick, &now))
                    d->tick = sm_time_after_ms(CLOCK_MONOTONIC, SM_DISK_DELAY_MS);
                struct timespec until = ts_before(&op->due, &d->tick) ? d->tick : op->due;
                pthread_cond_timedwait(&d->cv, &d->mu, &until);
                continue; /* look again: the head may have gone, others are due */
            }
        }
        d->head = op->next;
        if (!d->head)
            d->tail = NULL;
        d->busy = 1;
        pthread_mutex_unlock(&d->mu);
        sm_disk_do(d, op);
        sm_store_shard_release(op->sh);
        free(op);
        pthread_mutex_lock(&d->mu);
        d->busy = 0;
        if (!d->head)
            pthread_cond_broadcast(&d->idle);
    }
    pthread_cond_broadcast(&d->idle);
    pthread_mutex_unlock(&d->mu);
    return NULL;
}

static void sm_disk_queue(sm_disk *d, uint64_t array, int32_t device, sm_store_shard *sh)
{
    sm_disk_op *op = calloc(1, sizeof *op);
    if (!op) {
        SM_WARN("out of memory: the shard of array %" PRIu64 " on device %d is not copied to disk",
                array, (int)device);
        return;
    }
    op->array = array;
    op->device = device;
    op->sh = sh ? sm_store_shard_ref(sh) : NULL;
    op->due = sm_time_after_ms(CLOCK_MONOTONIC, SM_DISK_DELAY_MS);
    sm_disk_op *stale = NULL;
    int64_t now_ms = sm_time_mono_ms();
    pthread_mutex_lock(&d->mu);
    d->last_queued_ms = now_ms;
    /* A shard dropped before its copy was written (a reshard's or a job's
     * temporary) is not written at all. */
    for (sm_disk_op **p = &d->head, *prev = NULL; !sh && *p;) {
        sm_disk_op *o = *p;
        if (o->sh && o->array == array && o->device == device) {
            *p = o->next;
            if (d->tail == o)
                d->tail = prev;
            o->next = stale;
            stale = o;
        } else {
            prev = o;
            p = &o->next;
        }
    }
    int was_empty = !d->head;
    if (!sh && stale) {
        /* its copy was never written, so there is nothing to remove (a shard
         * is stored once per array and device; were an older copy left, the
         * next registration frees it, its array being gone) */
        free(op);
        op = NULL;
    } else {
        if (d->tail)
            d->tail->next = op;
        else
            d->head = op;
        d->tail = op;
    }
    /* no wake-up: the thread looks at the queue every SM_DISK_DELAY_MS */
    (void)was_empty;
    pthread_mutex_unlock(&d->mu);
    while (stale) {
        sm_disk_op *next = stale->next;
        sm_store_shard_release(stale->sh);
        free(stale);
        stale = next;
    }
}

static void sm_disk_on_put(void *user, uint64_t array, int32_t device, sm_store_shard *sh)
{
    sm_disk_queue(user, array, device, sh);
}

static void sm_disk_on_drop(void *user, uint64_t array, int32_t device)
{
    sm_disk_queue(user, array, device, NULL);
}

static const sm_store_observer sm_disk_obs = {sm_disk_on_put, sm_disk_on_drop};

const sm_store_observer *sm_disk_observer(void)
{
    return &sm_disk_obs;
}

void sm_disk_flush(sm_disk *d)
{
    pthread_mutex_lock(&d->mu);
    d->flushing++;
    pthread_cond_signal(&d->cv);
    while (d->head || d->busy)
        pthread_cond_wait(&d->idle, &d->mu);
    d->flushing--;
    pthread_mutex_unlock(&d->mu);
}

static void sm_disk_sp_flush(void *user)
{
    sm_disk_flush(user);
}

/* A complete copy: nothing queued for it, and its .sum (written last) is
 * there. */
static int sm_disk_sp_saved(void *user, uint64_t array, int32_t device)
{
    sm_disk *d = user;
    char npy[SM_DISK_PATH], sum[SM_DISK_PATH];
    int queued = 0;
    pthread_mutex_lock(&d->mu);
    for (const sm_disk_op *o = d->head; o && !queued; o = o->next)
        queued = o->array == array && o->device == device;
    queued |= d->busy;
    pthread_mutex_unlock(&d->mu);
    if (queued)
        return 0;
    sm_disk_paths(d, array, device, npy, sum);
    return access(sum, R_OK) == 0 && access(npy, R_OK) == 0;
}

/* Reads a copy's data straight into sh, checking its header against sh and
 * its data against the .sum. */
static sm_err sm_disk_sp_load(void *user, uint64_t array, int32_t device, sm_store_shard *sh,
                              char *err, size_t errlen)
{
    sm_disk *d = user;
    char npy[SM_DISK_PATH], sum[SM_DISK_PATH], inner[256];
    unsigned long long want = 0;
    sm_npy_info info;
    sm_disk_paths(d, array, device, npy, sum);
    FILE *f = fopen(sum, "r");
    int have = f && fscanf(f, "%llx", &want) == 1;
    if (f)
        fclose(f);
    if (!have)
        return sm_fail(err, errlen, SM_EDATALOSS,
                       "the spilled shard of array %" PRIu64 " on device %d has no readable "
                       "checksum file %s",
                       array, (int)device, sum);
    sm_err e = sm_npy_read_info(npy, &info, inner, sizeof inner);
    if (e)
        return sm_fail(err, errlen, SM_EDATALOSS, "the spilled shard %s: %s", npy, inner);
    if (info.dtype != sh->dtype || !sm_shape_equal(&info.shape, &sh->shape) ||
        sm_npy_layout_issue(&info))
        return sm_fail(err, errlen, SM_EDATALOSS,
                       "the spilled shard %s does not hold the shard's dtype and shape", npy);
    f = fopen(npy, "rb");
    int ok = f && fseek(f, (long)info.data_offset, SEEK_SET) == 0 &&
             (sh->nbytes == 0 || fread(sh->data, 1, (size_t)sh->nbytes, f) == (size_t)sh->nbytes);
    if (f)
        fclose(f);
    if (!ok)
        return sm_fail(err, errlen, SM_EDATALOSS, "cannot read the spilled shard %s: %s", npy,
                       strerror(errno));
    uint64_t got = sm_checksum_oneshot(sh->data, (size_t)sh->nbytes);
    if (got != (uint64_t)want)
        return sm_fail(err, errlen, SM_EDATALOSS,
                       "the spilled shard %s is damaged: its data's checksum is %016" PRIx64
                       ", %s says %016llx",
                       npy, got, sum, want);
    return SM_OK;
}

static const sm_store_spiller sm_disk_sp = {sm_disk_sp_flush, sm_disk_sp_saved, sm_disk_sp_load};

const sm_store_spiller *sm_disk_spiller(void)
{
    return &sm_disk_sp;
}

static int sm_disk_mkdir(const char *path)
{
    return mkdir(path, 0700) == 0 || errno == EEXIST ? 0 : -1;
}

/* Takes the spare files an earlier run left (emptied, as they may be
 * half-written copies) and removes what is not one. */
static void sm_disk_spare_adopt(sm_disk *d)
{
    char path[SM_DISK_PATH + 16];
    snprintf(path, sizeof path, "%s/spare", d->dir);
    DIR *dir = opendir(path);
    if (!dir)
        return;
    struct dirent *de;
    while ((de = readdir(dir))) {
        unsigned long n;
        int used = 0;
        if (de->d_name[0] == '.')
            continue;
        char file[SM_DISK_PATH * 2];
        snprintf(file, sizeof file, "%s/%s", path, de->d_name);
        if (sscanf(de->d_name, "%lu%n", &n, &used) == 1 && used == (int)strlen(de->d_name) &&
            n < UINT32_MAX && d->nspare < 2 * SM_DISK_SPARES && truncate(file, 0) == 0) {
            d->spare[d->nspare++] = (uint32_t)n;
            if ((uint32_t)n >= d->spare_next)
                d->spare_next = (uint32_t)n + 1;
        } else {
            unlink(file);
        }
    }
    closedir(dir);
}

sm_err sm_disk_open(const char *dir, sm_disk **out, char *err, size_t errlen)
{
    char shards[SM_DISK_PATH + 16];
    *out = NULL;
    if (strlen(dir) >= SM_DISK_DIR)
        return sm_fail(err, errlen, SM_EINVAL, "the state dir path '%.60s...' is too long", dir);
    snprintf(shards, sizeof shards, "%s/shards", dir);
    if (sm_disk_mkdir(dir) || sm_disk_mkdir(shards))
        return sm_fail(err, errlen, SM_EIO, "cannot create the state dir %s: %s", shards,
                       strerror(errno));
    snprintf(shards, sizeof shards, "%s/spare", dir);
    if (sm_disk_mkdir(shards))
        return sm_fail(err, errlen, SM_EIO, "cannot create the state dir %s: %s", shards,
                       strerror(errno));
    sm_disk *d = calloc(1, sizeof *d);
    if (!d)
        return sm_fail(err, errlen, SM_ENOMEM, "out of memory opening the state dir");
    snprintf(d->dir, sizeof d->dir, "%s", dir);
    sm_disk_spare_adopt(d);
    pthread_cond_init(&d->idle, NULL);
    if (sm_tpool_thread_start(&d->mu, &d->cv, &d->thread, sm_disk_main, d)) {
        pthread_cond_destroy(&d->idle);
        free(d);
        return sm_fail(err, errlen, SM_ERESOURCE, "cannot start the state dir's writer thread");
    }
    *out = d;
    return SM_OK;
}

void sm_disk_free(sm_disk *d)
{
    if (!d)
        return;
    sm_tpool_thread_end(&d->mu, &d->cv, &d->stopping, d->thread);
    pthread_cond_destroy(&d->idle);
    free(d);
}

int sm_disk_identity_load(sm_disk *d, uint32_t *worker_id, int *ndevices, int32_t *devices)
{
    char path[SM_DISK_PATH + 16];
    snprintf(path, sizeof path, "%s/identity", d->dir);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    unsigned id = 0;
    int n = 0, ok = fscanf(f, "worker %u devices %d", &id, &n) == 2 && id > 0 && n >= 1 &&
                    n <= SM_MAX_WORKER_DEVICES;
    for (int k = 0; ok && k < n; k++) {
        int v;
        ok = fscanf(f, "%d", &v) == 1 && v >= 0;
        devices[k] = v;
    }
    fclose(f);
    if (!ok) {
        SM_WARN("the identity file %s is unreadable; registering as a new worker", path);
        return 0;
    }
    *worker_id = id;
    *ndevices = n;
    return 1;
}

void sm_disk_identity_save(sm_disk *d, uint32_t worker_id, int ndevices, const int32_t *devices)
{
    char path[SM_DISK_PATH + 16], text[16 * SM_MAX_WORKER_DEVICES + 64];
    size_t n = (size_t)snprintf(text, sizeof text, "worker %u devices %d\n", worker_id, ndevices);
    for (int k = 0; k < ndevices && n < sizeof text; k++)
        n += (size_t)snprintf(text + n, sizeof text - n, "%d\n", (int)devices[k]);
    snprintf(path, sizeof path, "%s/identity", d->dir);
    if (sm_disk_write_small(NULL, path, text))
        SM_WARN("cannot write the identity file %s: %s", path, strerror(errno));
}

/* Restores one shard from its files; 1 if it went into the store. */
static int sm_disk_restore_one(sm_disk *d, sm_store *st, uint64_t array, int32_t device)
{
    char npy[SM_DISK_PATH], sum[SM_DISK_PATH], err[512];
    sm_array *a = NULL;
    sm_store_shard *sh = NULL;
    unsigned long long want = 0;
    sm_disk_paths(d, array, device, npy, sum);
    FILE *f = fopen(sum, "r");
    int have = f && fscanf(f, "%llx", &want) == 1;
    if (f)
        fclose(f);
    if (!have) {
        SM_WARN("%s has no checksum file (an interrupted copy); removed", npy);
        goto drop;
    }
    if (sm_store_check_device(st, device, err, sizeof err)) {
        SM_WARN("%s is of device %d, which is not this worker's; removed", npy, (int)device);
        goto drop;
    }
    if (sm_npy_read_in(sm_store_pool(st), npy, &a, err, sizeof err)) {
        SM_WARN("%s; removed", err);
        goto drop;
    }
    uint64_t got = sm_checksum_oneshot(a->data, (size_t)a->nbytes);
    if (got != (uint64_t)want) {
        SM_WARN("%s is damaged: its data's checksum is %016" PRIx64 ", %s says %016llx; removed",
                npy, got, sum, want);
        goto drop;
    }
    if (sm_store_shard_adopt(&a, &sh, err, sizeof err)) {
        SM_WARN("cannot restore %s: %s", npy, err);
        sm_array_free(a);
        return 0;
    }
    sh->has_checksum = 1;
    sh->checksum = got;
    if (sm_store_put(st, sm_store_epoch(st), (sm_array_id){array}, 1, &device, &sh, err,
                     sizeof err)) {
        SM_WARN("cannot restore %s: %s", npy, err);
        sm_store_shard_release(sh);
        return 0;
    }
    return 1;
drop:
    sm_array_free(a);
    unlink(sum);
    unlink(npy);
    return 0;
}

int sm_disk_restore(sm_disk *d, sm_store *st)
{
    char path[SM_DISK_PATH + 16];
    int n = 0;
    snprintf(path, sizeof path, "%s/shards", d->dir);
    DIR *dir = opendir(path);
    if (!dir)
        return 0;
    struct dirent *de;
    while ((de = readdir(dir))) {
        unsigned long long array;
        int device, used = 0;
        if (sscanf(de->d_name, "%llu-%d.npy%n", &array, &device, &used) != 2 ||
            used != (int)strlen(de->d_name)) {
            if (strstr(de->d_name, ".tmp")) {
                char tmp[SM_DISK_PATH * 2];
                snprintf(tmp, sizeof tmp, "%s/%s", path, de->d_name);
                unlink(tmp);
            }
            continue;
        }
        n += sm_disk_restore_one(d, st, array, device);
    }
    closedir(dir);
    return n;
}
