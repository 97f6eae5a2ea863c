/* sm_shm: shared-memory segments, probes, pools and sweeps (see header). */
#define _GNU_SOURCE
#include "sm_shm.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdlib.h>
#include <limits.h>
#include <linux/futex.h>
#include <stdio.h>
#include <string.h>
#include <dirent.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define SM_SHM_PROBE_PREFIX "/shmap-probe-"
#define SM_SHM_PROBE_MAGIC  UINT64_C(0x65626f72706d6873) /* "shmprobe" */

/* 1 if name is "/shmap-" followed by lowercase hex digits and dashes only
 * (and, with probe, starts with the probe prefix). */
static int sm_shm_name_ok(const char *name, int probe)
{
    const char *pre = probe ? SM_SHM_PROBE_PREFIX : "/shmap-";
    size_t n = strlen(name), k = strlen(pre);
    if (n <= k || n >= SM_SHM_NAME_MAX || strncmp(name, pre, k))
        return 0;
    for (size_t i = k; i < n; i++)
        if (!((name[i] >= '0' && name[i] <= '9') || (name[i] >= 'a' && name[i] <= 'f') ||
              name[i] == '-'))
            return 0;
    return 1;
}

int sm_shm_name_valid(const char *name)
{
    return sm_shm_name_ok(name, 0);
}

static uint64_t sm_shm_random(void)
{
    uint64_t v = 0;
    while (v == 0)
        if (getrandom(&v, sizeof v, 0) != (ssize_t)sizeof v) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            v = ((uint64_t)ts.tv_nsec << 20) ^ (uint64_t)ts.tv_sec ^ ((uint64_t)getpid() << 40);
        }
    return v;
}

sm_err sm_shm_probe_create(char *name, uint64_t *cookie, char *err, size_t errlen)
{
    uint64_t v[2] = {SM_SHM_PROBE_MAGIC, sm_shm_random()};
    snprintf(name, SM_SHM_NAME_MAX, SM_SHM_PROBE_PREFIX "%016llx%016llx",
             (unsigned long long)sm_shm_random(), (unsigned long long)sm_shm_random());
    int fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0)
        return sm_fail(err, errlen, SM_EIO, "cannot create shared-memory segment %s: %s", name,
                       strerror(errno));
    if (write(fd, v, sizeof v) != (ssize_t)sizeof v) {
        int en = errno;
        close(fd);
        shm_unlink(name);
        return sm_fail(err, errlen, SM_EIO, "cannot write shared-memory segment %s: %s", name,
                       strerror(en));
    }
    close(fd);
    *cookie = v[1];
    return SM_OK;
}

sm_err sm_shm_probe_read(const char *name, uint64_t *cookie, char *err, size_t errlen)
{
    if (!sm_shm_name_ok(name, 1))
        return sm_fail(err, errlen, SM_EINVAL, "'%s' is not the name of a shmap probe segment",
                       name);
    int fd = shm_open(name, O_RDONLY | O_CLOEXEC, 0);
    if (fd < 0)
        return sm_fail(err, errlen, errno == ENOENT ? SM_ENOTFOUND : SM_EIO,
                       "cannot open shared-memory segment %s: %s", name, strerror(errno));
    uint64_t v[2] = {0, 0};
    void *p = mmap(NULL, sizeof v, PROT_READ, MAP_SHARED, fd, 0);
    struct stat st;
    sm_err e = SM_OK;
    if (fstat(fd, &st) || st.st_size < (off_t)sizeof v || p == MAP_FAILED)
        e = sm_fail(err, errlen, SM_EDATALOSS, "shared-memory segment %s is too short", name);
    else
        memcpy(v, p, sizeof v); /* read through the mapping: what a collective does */
    if (p != MAP_FAILED)
        munmap(p, sizeof v);
    close(fd);
    shm_unlink(name);
    if (!e && v[0] != SM_SHM_PROBE_MAGIC)
        e = sm_fail(err, errlen, SM_EDATALOSS, "shared-memory segment %s is not a probe", name);
    if (!e)
        *cookie = v[1];
    return e;
}

sm_err sm_shm_probe_drop(const char *name, char *err, size_t errlen)
{
    if (!sm_shm_name_ok(name, 1))
        return sm_fail(err, errlen, SM_EINVAL, "'%s' is not the name of a shmap probe segment",
                       name);
    sm_shm_unlink(name);
    return SM_OK;
}

static sm_err sm_shm_seg_map(int fd, const char *name, size_t len, sm_shm_seg *s, char *err,
                             size_t errlen)
{
    (void)flock(fd, LOCK_SH); /* held while mapped: sm_shm_sweep leaves the segment alone */
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
    if (p == MAP_FAILED) {
        int en = errno;
        close(fd);
        return sm_fail(err, errlen, SM_ENOMEM,
                       "cannot map shared-memory segment %s (%zu bytes): %s", name, len,
                       strerror(en));
    }
    snprintf(s->name, sizeof s->name, "%s", name);
    s->fd = fd;
    s->base = p;
    s->len = len;
    return SM_OK;
}

/* Clears s (no segment yet) and checks that name is a shmap segment's. */
static sm_err sm_shm_seg_start(const char *name, sm_shm_seg *s, char *err, size_t errlen)
{
    memset(s, 0, sizeof *s);
    s->fd = -1;
    if (!sm_shm_name_ok(name, 0))
        return sm_fail(err, errlen, SM_EINVAL, "'%s' is not the name of a shmap segment", name);
    return SM_OK;
}

sm_err sm_shm_seg_create(const char *name, size_t len, sm_shm_seg *s, char *err, size_t errlen)
{
    sm_err e = sm_shm_seg_start(name, s, err, errlen);
    if (e)
        return e;
    int fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0)
        return sm_fail(err, errlen, errno == EEXIST ? SM_EEXIST : SM_EIO,
                       "cannot create shared-memory segment %s: %s", name, strerror(errno));
    if (ftruncate(fd, (off_t)len)) {
        int en = errno;
        close(fd);
        shm_unlink(name);
        return sm_fail(err, errlen, SM_ERESOURCE, "cannot size shared-memory segment %s: %s", name,
                       strerror(en));
    }
    if ((e = sm_shm_seg_map(fd, name, len, s, err, errlen)))
        shm_unlink(name);
    return e;
}

sm_err sm_shm_seg_open(const char *name, size_t len, sm_shm_seg *s, char *err, size_t errlen)
{
    sm_err e = sm_shm_seg_start(name, s, err, errlen);
    if (e)
        return e;
    int fd = shm_open(name, O_RDWR | O_CLOEXEC, 0);
    if (fd < 0)
        return sm_fail(err, errlen, errno == ENOENT ? SM_ENOTFOUND : SM_EIO,
                       "cannot open shared-memory segment %s: %s", name, strerror(errno));
    struct stat st;
    if (!fstat(fd, &st) && st.st_size == 0) { /* created, not yet sized by its owner */
        close(fd);
        return sm_fail(err, errlen, SM_ENOTFOUND, "shared-memory segment %s is not ready yet",
                       name);
    }
    if (fstat(fd, &st) || st.st_size < (off_t)len) {
        close(fd);
        return sm_fail(err, errlen, SM_EDATALOSS,
                       "shared-memory segment %s holds %lld bytes, expected %zu", name,
                       (long long)st.st_size, len);
    }
    return sm_shm_seg_map(fd, name, len, s, err, errlen);
}

sm_err sm_shm_seg_check(const sm_shm_seg *s, size_t end, char *err, size_t errlen)
{
    struct stat st;
    if (fstat(s->fd, &st) || st.st_size < (off_t)end)
        return sm_fail(err, errlen, SM_EDATALOSS,
                       "shared-memory segment %s was truncated to %lld bytes under its readers "
                       "(needed %zu)",
                       s->name, (long long)st.st_size, end);
    return SM_OK;
}

sm_err sm_shm_seg_reserve(const sm_shm_seg *s, size_t off, size_t len, char *err, size_t errlen)
{
    int rc;
    while ((rc = fallocate(s->fd, 0, (off_t)off, (off_t)len)) && errno == EINTR)
        ;
    if (!rc || errno == EOPNOTSUPP) /* no fallocate here: the pages come as they are written */
        return SM_OK;
    return sm_fail(err, errlen, SM_ERESOURCE,
                   "no room in /dev/shm for %zu bytes of shared-memory %s%s: %s (give /dev/shm "
                   "more room, or run the workers with --transport grpc)",
                   len, s->name[0] ? "segment " : "file kept between jobs", s->name,
                   strerror(errno));
}

void sm_shm_seg_close(sm_shm_seg *s)
{
    if (s->base)
        munmap(s->base, s->len);
    if (s->fd >= 0)
        close(s->fd);
    s->base = NULL;
    s->fd = -1;
}

sm_err sm_shm_mark(const char *name, int *fd, char *err, size_t errlen)
{
    *fd = -1;
    if (!sm_shm_name_ok(name, 0))
        return sm_fail(err, errlen, SM_EINVAL, "'%s' is not the name of a shmap segment", name);
    int f = shm_open(name, O_CREAT | O_RDWR | O_CLOEXEC, 0600);
    if (f < 0)
        return sm_fail(err, errlen, SM_EIO, "cannot create marker %s in /dev/shm: %s", name,
                       strerror(errno));
    (void)flock(f, LOCK_SH); /* held while open: sm_shm_sweep leaves it alone */
    *fd = f;
    return SM_OK;
}

int sm_shm_marked(const char *name)
{
    int fd = shm_open(name, O_RDONLY | O_CLOEXEC, 0);
    if (fd < 0)
        return 0;
    close(fd);
    return 1;
}

void sm_shm_unlink(const char *name)
{
    (void)shm_unlink(name); /* ENOENT: already gone */
}

int sm_shm_sweep(int min_age_s)
{
    DIR *d = opendir("/dev/shm");
    int n = 0;
    time_t now = time(NULL);
    for (struct dirent *e; d && (e = readdir(d));) {
        char name[SM_SHM_NAME_MAX + 1];
        if (strlen(e->d_name) >= SM_SHM_NAME_MAX)
            continue;
        snprintf(name, sizeof name, "/%s", e->d_name);
        int probe = sm_shm_name_ok(name, 1);
        if (!probe && !sm_shm_name_ok(name, 0))
            continue;
        int fd = shm_open(name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC, 0);
        struct stat st;
        if (fd < 0)
            continue;
        /* old enough not to be in the making (a pool file is locked before
         * it has a name: any age), and no process holds it */
        size_t nl = strlen(name);
        int pooled = nl > 4 && !strcmp(name + nl - 4, "-fff");
        if (!fstat(fd, &st) && (pooled || now - st.st_ctime >= min_age_s) &&
            (probe || flock(fd, LOCK_EX | LOCK_NB) == 0)) {
            shm_unlink(name);
            n++;
        }
        close(fd);
    }
    if (d)
        closedir(d);
    return n;
}

/* ---- pool -------------------------------------------------------------------- */

#define SM_SHM_POOL_MAX 16

typedef struct {
    sm_shm_seg seg; /* name: the pool name */
    int taken;
} sm_shm_pool_file;

struct sm_shm_pool {
    pthread_mutex_t mu;
    sm_shm_pool_file f[SM_SHM_POOL_MAX];
    int n;
};

sm_err sm_shm_pool_create(sm_shm_pool **out, char *err, size_t errlen)
{
    sm_shm_pool *p = calloc(1, sizeof *p);
    if (!p)
        return sm_fail(err, errlen, SM_ENOMEM, "out of memory for a shared-memory pool");
    pthread_mutex_init(&p->mu, NULL);
    *out = p;
    return SM_OK;
}

void sm_shm_pool_free(sm_shm_pool *p)
{
    if (!p)
        return;
    for (int i = 0; i < p->n; i++) {
        shm_unlink(p->f[i].seg.name);
        sm_shm_seg_close(&p->f[i].seg);
    }
    pthread_mutex_destroy(&p->mu);
    free(p);
}

/* A new file "/shmap-<random>-fff" of len bytes (sparse), locked before it
 * has a name, mapped into s. */
static sm_err sm_shm_file_new(size_t len, sm_shm_seg *s, char *err, size_t errlen)
{
    char name[SM_SHM_NAME_MAX], path[SM_SHM_NAME_MAX + 16], proc[64];
    snprintf(name, sizeof name, "/shmap-%016llx-fff", (unsigned long long)sm_shm_random());
    snprintf(path, sizeof path, "/dev/shm%s", name);
    int fd = open("/dev/shm", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0)
        return sm_fail(err, errlen, SM_EIO, "cannot create a shared-memory file in /dev/shm: %s",
                       strerror(errno));
    (void)flock(fd, LOCK_SH);
    snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
    if (ftruncate(fd, (off_t)len) || linkat(AT_FDCWD, proc, AT_FDCWD, path, AT_SYMLINK_FOLLOW)) {
        int en = errno;
        close(fd);
        return sm_fail(err, errlen, SM_EIO, "cannot make shared-memory file %s: %s", name,
                       strerror(en));
    }
    sm_err e = sm_shm_seg_map(fd, name, len, s, err, errlen); /* closes fd on failure */
    if (e)
        shm_unlink(name);
    return e;
}

/* A new pool file of len bytes (mu held). */
static sm_err sm_shm_pool_new(sm_shm_pool_file *f, size_t len, char *err, size_t errlen)
{
    return sm_shm_file_new(len, &f->seg, err, errlen);
}

sm_err sm_shm_pool_take(sm_shm_pool *p, size_t len, sm_shm_seg *out, char *err, size_t errlen)
{
    sm_err e = SM_OK;
    pthread_mutex_lock(&p->mu);
    int i = 0;
    while (i < p->n && p->f[i].taken)
        i++;
    if (i == p->n && p->n == SM_SHM_POOL_MAX) {
        e = sm_fail(err, errlen, SM_ERESOURCE, "%d shared-memory files in use at once",
                    SM_SHM_POOL_MAX);
    } else if (i == p->n) {
        if (!(e = sm_shm_pool_new(&p->f[i], len, err, errlen)))
            p->n++;
    } else if (p->f[i].seg.len >= len) { /* as it was left: truncated since, it grows back */
        struct stat st;
        if (fstat(p->f[i].seg.fd, &st) || (st.st_size < (off_t)p->f[i].seg.len &&
                                           ftruncate(p->f[i].seg.fd, (off_t)p->f[i].seg.len)))
            e = sm_fail(err, errlen, SM_EIO, "cannot resize shared-memory file %s: %s",
                        p->f[i].seg.name, strerror(errno));
    } else { /* grown: sparse, the pages kept */
        sm_shm_seg *s = &p->f[i].seg;
        void *q = MAP_FAILED;
        if (!ftruncate(s->fd, (off_t)len))
            q = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, s->fd, 0);
        if (q == MAP_FAILED) {
            e = sm_fail(err, errlen, SM_ENOMEM, "cannot grow shared-memory file %s: %s", s->name,
                        strerror(errno));
        } else {
            munmap(s->base, s->len);
            s->base = q;
            s->len = len;
        }
    }
    if (!e) {
        p->f[i].taken = 1;
        *out = p->f[i].seg;
        out->name[0] = 0;
    }
    pthread_mutex_unlock(&p->mu);
    return e;
}

static sm_shm_pool_file *sm_shm_pool_find(sm_shm_pool *p, const sm_shm_seg *s)
{
    for (int i = 0; i < p->n; i++)
        if (p->f[i].seg.fd == s->fd && p->f[i].taken)
            return &p->f[i];
    return NULL;
}

sm_err sm_shm_pool_name(sm_shm_pool *p, sm_shm_seg *s, const char *name, char *err, size_t errlen)
{
    char from[SM_SHM_NAME_MAX + 16], to[SM_SHM_NAME_MAX + 16];
    if (!sm_shm_name_ok(name, 0))
        return sm_fail(err, errlen, SM_EINVAL, "'%s' is not the name of a shmap segment", name);
    pthread_mutex_lock(&p->mu);
    sm_shm_pool_file *f = sm_shm_pool_find(p, s);
    snprintf(from, sizeof from, "/dev/shm%s", f ? f->seg.name : "");
    pthread_mutex_unlock(&p->mu);
    snprintf(to, sizeof to, "/dev/shm%s", name);
    if (!f || link(from, to))
        return sm_fail(err, errlen, f && errno == EEXIST ? SM_EEXIST : SM_EIO,
                       "cannot name shared-memory file %s: %s", name,
                       f ? strerror(errno) : "not taken from the pool");
    snprintf(s->name, sizeof s->name, "%s", name);
    return SM_OK;
}

void sm_shm_pool_file_name(sm_shm_pool *p, const sm_shm_seg *s, char *name)
{
    pthread_mutex_lock(&p->mu);
    sm_shm_pool_file *f = sm_shm_pool_find(p, s);
    snprintf(name, SM_SHM_NAME_MAX, "%s", f ? f->seg.name : "");
    pthread_mutex_unlock(&p->mu);
}

void sm_shm_pool_give(sm_shm_pool *p, sm_shm_seg *s)
{
    if (s->name[0])
        (void)shm_unlink(s->name);
    pthread_mutex_lock(&p->mu);
    sm_shm_pool_file *f = sm_shm_pool_find(p, s);
    int idle = 0;
    for (int i = 0; i < p->n; i++)
        idle += !p->f[i].taken;
    struct stat st;
    if (f && (idle >= SM_SHM_POOL_KEEP || fstat(f->seg.fd, &st) ||
              st.st_size < (off_t)f->seg.len)) { /* enough kept, or truncated: this one goes */
        shm_unlink(f->seg.name);
        sm_shm_seg_close(&f->seg);
        *f = p->f[--p->n];
    } else if (f) {
        f->taken = 0;
    }
    pthread_mutex_unlock(&p->mu);
    s->base = NULL; /* the pool's */
    s->fd = -1;
}

/* ---- arenas -------------------------------------------------------------------- */

typedef struct {
    size_t off, len;
} sm_shm_range;

struct sm_shm_arena {
    pthread_mutex_t mu;
    sm_shm_seg seg;
    size_t top;         /* never taken from here up */
    size_t reserve;     /* sm_shm_arena_reserve_set */
    size_t used;        /* bytes of the blocks taken (atomic) */
    sm_shm_range *free; /* released ranges below top, by offset, none adjacent */
    int nfree, cap;
};

sm_err sm_shm_arena_create(size_t span, sm_shm_arena **out, char *err, size_t errlen)
{
    sm_shm_arena *a = calloc(1, sizeof *a);
    *out = NULL;
    if (!a)
        return sm_fail(err, errlen, SM_ENOMEM, "out of memory for a shared-memory arena");
    sm_err e = sm_shm_file_new(span, &a->seg, err, errlen);
    if (e) {
        free(a);
        return e;
    }
    pthread_mutex_init(&a->mu, NULL);
    *out = a;
    return SM_OK;
}

void sm_shm_arena_reserve_set(sm_shm_arena *a, size_t bytes)
{
    pthread_mutex_lock(&a->mu);
    a->reserve = bytes;
    pthread_mutex_unlock(&a->mu);
}

void sm_shm_arena_unlink(sm_shm_arena *a)
{
    if (!a)
        return;
    pthread_mutex_lock(&a->mu);
    if (a->seg.name[0])
        shm_unlink(a->seg.name);
    a->seg.name[0] = 0;
    pthread_mutex_unlock(&a->mu);
}

void sm_shm_arena_free(sm_shm_arena *a)
{
    if (!a)
        return;
    sm_shm_arena_unlink(a);
    sm_shm_seg_close(&a->seg);
    pthread_mutex_destroy(&a->mu);
    free(a->free);
    free(a);
}

size_t sm_shm_arena_used(const sm_shm_arena *a)
{
    return a ? __atomic_load_n(&a->used, __ATOMIC_RELAXED) : 0;
}

const char *sm_shm_arena_name(const sm_shm_arena *a)
{
    return a->seg.name;
}

size_t sm_shm_arena_span(const sm_shm_arena *a)
{
    return a->seg.len;
}

/* Puts [off, off + len) back among the free ranges, merged with its
 * neighbours (mu held); 0 if there was no memory to record it (the range
 * is then lost to the arena, not to the system). */
static int sm_shm_arena_put_locked(sm_shm_arena *a, size_t off, size_t len)
{
    int i = 0;
    while (i < a->nfree && a->free[i].off < off)
        i++;
    int left = i > 0 && a->free[i - 1].off + a->free[i - 1].len == off;
    int right = i < a->nfree && off + len == a->free[i].off;
    if (left && right) {
        a->free[i - 1].len += len + a->free[i].len;
        memmove(&a->free[i], &a->free[i + 1], (size_t)(a->nfree - i - 1) * sizeof *a->free);
        a->nfree--;
    } else if (left) {
        a->free[i - 1].len += len;
    } else if (right) {
        a->free[i].off = off;
        a->free[i].len += len;
    } else {
        if (a->nfree == a->cap) {
            int cap = a->cap ? a->cap * 2 : 16;
            sm_shm_range *r = realloc(a->free, (size_t)cap * sizeof *r);
            if (!r)
                return 0;
            a->free = r;
            a->cap = cap;
        }
        memmove(&a->free[i + 1], &a->free[i], (size_t)(a->nfree - i) * sizeof *a->free);
        a->free[i] = (sm_shm_range){off, len};
        a->nfree++;
    }
    if (a->nfree && a->free[a->nfree - 1].off + a->free[a->nfree - 1].len == a->top) {
        a->top = a->free[a->nfree - 1].off; /* the last range: back under top */
        a->nfree--;
    }
    return 1;
}

void *sm_shm_arena_take(sm_shm_arena *a, size_t len)
{
    size_t off = SIZE_MAX;
    struct statvfs v;
    pthread_mutex_lock(&a->mu);
    size_t reserve = a->reserve;
    pthread_mutex_unlock(&a->mu);
    if (reserve &&
        (fstatvfs(a->seg.fd, &v) || (uint64_t)v.f_bavail * v.f_frsize < (uint64_t)len + reserve))
        return NULL; /* what is left of /dev/shm is kept for segments and staging */
    pthread_mutex_lock(&a->mu);
    for (int i = 0; i < a->nfree; i++) /* first fit */
        if (a->free[i].len >= len) {
            off = a->free[i].off;
            a->free[i].off += len;
            a->free[i].len -= len;
            if (!a->free[i].len) {
                memmove(&a->free[i], &a->free[i + 1], (size_t)(a->nfree - i - 1) * sizeof *a->free);
                a->nfree--;
            }
            break;
        }
    if (off == SIZE_MAX && len <= a->seg.len - a->top) {
        off = a->top;
        a->top += len;
    }
    pthread_mutex_unlock(&a->mu);
    if (off == SIZE_MAX)
        return NULL;
    int rc;
    while ((rc = fallocate(a->seg.fd, 0, (off_t)off, (off_t)len)) && errno == EINTR)
        ;
    if (rc) { /* no room in /dev/shm: the range goes back, the caller does without */
        (void)fallocate(a->seg.fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)off,
                        (off_t)len);
        pthread_mutex_lock(&a->mu);
        (void)sm_shm_arena_put_locked(a, off, len);
        pthread_mutex_unlock(&a->mu);
        return NULL;
    }
    __atomic_add_fetch(&a->used, len, __ATOMIC_RELAXED);
    return (char *)a->seg.base + off;
}

void sm_shm_arena_release(sm_shm_arena *a, void *p, size_t len)
{
    size_t off = (size_t)((char *)p - (char *)a->seg.base);
    (void)fallocate(a->seg.fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)off, (off_t)len);
    pthread_mutex_lock(&a->mu);
    (void)sm_shm_arena_put_locked(a, off, len);
    pthread_mutex_unlock(&a->mu);
    __atomic_sub_fetch(&a->used, len, __ATOMIC_RELAXED);
}

int sm_shm_arena_holds(const sm_shm_arena *a, const void *p, size_t n, uint64_t *off)
{
    if (!a)
        return 0;
    uintptr_t b = (uintptr_t)a->seg.base, q = (uintptr_t)p;
    if (q < b || q - b > a->seg.len || n > a->seg.len - (q - b))
        return 0;
    *off = (uint64_t)(q - b);
    return 1;
}

/* ---- views of other processes' arenas ------------------------------------------ */

#define SM_SHM_VIEWS_MAX 64

typedef struct {
    char name[SM_SHM_NAME_MAX];
    char *base;
    size_t span;
    dev_t dev;
    ino_t ino;
    int refs;
} sm_shm_view;

struct sm_shm_views {
    pthread_mutex_t mu;
    sm_shm_view v[SM_SHM_VIEWS_MAX];
    int n;
};

sm_err sm_shm_views_create(sm_shm_views **out, char *err, size_t errlen)
{
    sm_shm_views *v = calloc(1, sizeof *v);
    *out = v;
    if (!v)
        return sm_fail(err, errlen, SM_ENOMEM, "out of memory for shared-memory views");
    pthread_mutex_init(&v->mu, NULL);
    return SM_OK;
}

void sm_shm_views_free(sm_shm_views *v)
{
    if (!v)
        return;
    for (int i = 0; i < v->n; i++)
        munmap(v->v[i].base, v->v[i].span);
    pthread_mutex_destroy(&v->mu);
    free(v);
}

/* Drops view i (unused; mu held). */
static void sm_shm_view_drop_locked(sm_shm_views *v, int i)
{
    munmap(v->v[i].base, v->v[i].span);
    v->v[i] = v->v[--v->n];
}

/* 1 if the file of view w is gone or another file has its name. */
static int sm_shm_view_stale(const sm_shm_view *w)
{
    int fd = shm_open(w->name, O_RDONLY | O_CLOEXEC, 0);
    struct stat st;
    int stale = fd < 0 || fstat(fd, &st) || st.st_dev != w->dev || st.st_ino != w->ino;
    if (fd >= 0)
        close(fd);
    return stale;
}

static void sm_shm_views_prune_locked(sm_shm_views *v)
{
    for (int i = v->n - 1; i >= 0; i--)
        if (!v->v[i].refs && sm_shm_view_stale(&v->v[i]))
            sm_shm_view_drop_locked(v, i);
}

void sm_shm_views_prune(sm_shm_views *v)
{
    pthread_mutex_lock(&v->mu);
    sm_shm_views_prune_locked(v);
    pthread_mutex_unlock(&v->mu);
}

sm_err sm_shm_view_get(sm_shm_views *v, const char *name, size_t span, const char **base, char *err,
                       size_t errlen)
{
    *base = NULL;
    if (!sm_shm_name_ok(name, 0))
        return sm_fail(err, errlen, SM_EINVAL, "'%s' is not the name of a shmap segment", name);
    sm_err e = SM_OK;
    pthread_mutex_lock(&v->mu);
    for (int i = 0; i < v->n; i++)
        if (!strcmp(v->v[i].name, name) && v->v[i].span == span) {
            v->v[i].refs++;
            *base = v->v[i].base;
            pthread_mutex_unlock(&v->mu);
            return SM_OK;
        }
    sm_shm_views_prune_locked(v); /* a miss: a peer is new, maybe one died */
    for (int i = v->n - 1; v->n == SM_SHM_VIEWS_MAX && i >= 0; i--)
        if (!v->v[i].refs)
            sm_shm_view_drop_locked(v, i);
    int fd = shm_open(name, O_RDONLY | O_CLOEXEC, 0);
    struct stat st;
    void *p = MAP_FAILED;
    if (v->n == SM_SHM_VIEWS_MAX)
        e = sm_fail(err, errlen, SM_ERESOURCE, "%d shared-memory views in use at once",
                    SM_SHM_VIEWS_MAX);
    else if (fd < 0)
        e = sm_fail(err, errlen, errno == ENOENT ? SM_ENOTFOUND : SM_EIO,
                    "cannot open shared-memory file %s: %s", name, strerror(errno));
    else if (fstat(fd, &st) || st.st_size < (off_t)span)
        e = sm_fail(err, errlen, SM_EDATALOSS,
                    "shared-memory file %s holds %lld bytes, expected %zu", name,
                    (long long)st.st_size, span);
    else if ((p = mmap(NULL, span, PROT_READ, MAP_SHARED | MAP_NORESERVE, fd, 0)) == MAP_FAILED)
        e = sm_fail(err, errlen, SM_ENOMEM, "cannot map shared-memory file %s (%zu bytes): %s",
                    name, span, strerror(errno));
    if (fd >= 0)
        close(fd); /* the mapping keeps the file; no lock: the sweep may remove its name */
    if (!e) {
        sm_shm_view *w = &v->v[v->n++];
        snprintf(w->name, sizeof w->name, "%s", name);
        w->base = p;
        w->span = span;
        w->dev = st.st_dev;
        w->ino = st.st_ino;
        w->refs = 1;
        *base = p;
    }
    pthread_mutex_unlock(&v->mu);
    return e;
}

void sm_shm_view_put(sm_shm_views *v, const char *base)
{
    pthread_mutex_lock(&v->mu);
    for (int i = 0; i < v->n; i++)
        if (v->v[i].base == base) {
            v->v[i].refs--;
            break;
        }
    pthread_mutex_unlock(&v->mu);
}

/* ---- guard against truncation -------------------------------------------------- */

/* The only way into a signal handler: the guarded call running on this
 * thread, if any. */
static __thread sigjmp_buf *sm_shm_guard_jb;
static struct sigaction sm_shm_bus_prev;
static pthread_once_t sm_shm_bus_once = PTHREAD_ONCE_INIT;

static void sm_shm_bus(int sig, siginfo_t *si, void *uc)
{
    (void)si;
    (void)uc;
    sigjmp_buf *jb = sm_shm_guard_jb;
    if (jb) {
        sm_shm_guard_jb = NULL;
        siglongjmp(*jb, 1);
    }
    /* not a guarded access: the previous disposition, which the faulting
     * instruction meets when it runs again */
    sigaction(sig, &sm_shm_bus_prev, NULL);
}

static void sm_shm_bus_install(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = sm_shm_bus;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGBUS, &sa, &sm_shm_bus_prev);
}

sm_err sm_shm_guarded(sm_err (*fn)(void *arg), void *arg, int *faulted)
{
    sigjmp_buf jb;
    pthread_once(&sm_shm_bus_once, sm_shm_bus_install);
    *faulted = 0;
    if (sigsetjmp(jb, 1)) {
        *faulted = 1;
        return SM_EDATALOSS;
    }
    sm_shm_guard_jb = &jb;
    sm_err e = fn(arg);
    sm_shm_guard_jb = NULL;
    return e;
}

void sm_shm_futex_wait(uint32_t *word, uint32_t val, int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    syscall(SYS_futex, word, FUTEX_WAIT, val, &ts, NULL, 0);
}

void sm_shm_futex_wake(uint32_t *word)
{
    syscall(SYS_futex, word, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}
