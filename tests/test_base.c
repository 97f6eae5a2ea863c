/* Check suite for common/base: error texts, message buffers, strbuf, arena,
 * config, thread pool, hold, hash index. */
#define _GNU_SOURCE
#include <sched.h>
#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include "sm_hold.h"
#include <time.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sm_arena.h"
#include "sm_config.h"
#include "sm_err.h"
#include "sm_htab.h"
#include "sm_strbuf.h"
#include "sm_sys.h"
#include "sm_time.h"
#include "sm_tpool.h"
#include "suite_main.h"

START_TEST(test_err_texts)
{
    ck_assert_str_eq(sm_strerror(SM_OK), "ok");
    ck_assert_str_eq(sm_strerror(SM_EINVAL), "invalid argument");
    ck_assert_str_eq(sm_err_name(SM_ENOTFOUND), "SM_ENOTFOUND");
    ck_assert_str_eq(sm_strerror((sm_err)999), "unknown error");
    for (int e = 0; e < SM_ERR_COUNT; e++)
        ck_assert_ptr_nonnull(sm_strerror((sm_err)e));
}
END_TEST

START_TEST(test_fail_writes_message)
{
    char err[16];
    ck_assert_int_eq(sm_fail(err, sizeof err, SM_EINVAL, "axis '%s' is %d", "i", 4), SM_EINVAL);
    ck_assert_str_eq(err, "axis 'i' is 4");
    /* truncation keeps the buffer terminated */
    ck_assert_int_eq(sm_fail(err, sizeof err, SM_EIO, "%s", "a very long sentence indeed"), SM_EIO);
    ck_assert_uint_eq(strlen(err), sizeof err - 1);
    /* NULL buffer is allowed */
    ck_assert_int_eq(sm_fail(NULL, 0, SM_EDATALOSS, "x"), SM_EDATALOSS);
    /* cut short, never inside a UTF-8 character: 'é' is 2 bytes, '€' 3, an
     * emoji 4; err holds 15 bytes */
    sm_fail(err, sizeof err, SM_EINVAL, "name '%s'", "abcd\xc3\xa9");
    ck_assert_str_eq(err, "name 'abcd\xc3\xa9'");
    sm_fail(err, sizeof err, SM_EINVAL, "name '%s'", "abcd\xc3\xa9\xc3\xa9\xc3\xa9");
    ck_assert_str_eq(err, "name 'abcd\xc3\xa9\xc3\xa9");
    sm_fail(err, sizeof err, SM_EINVAL, "name '%s'", "a\xe2\x82\xac\xe2\x82\xac\xe2\x82\xac");
    ck_assert_str_eq(err, "name 'a\xe2\x82\xac\xe2\x82\xac");
    sm_fail(err, sizeof err, SM_EINVAL, "name '%s'", "abcdef\xf0\x9f\x98\x80");
    ck_assert_str_eq(err, "name 'abcdef");
    char s[] = "x\xe2\x82";
    sm_utf8_trim(s);
    ck_assert_str_eq(s, "x");
    char t[] = "x\xe2\x82\xac";
    sm_utf8_trim(t);
    ck_assert_str_eq(t, "x\xe2\x82\xac");
}
END_TEST

/* sm_text_check: valid UTF-8 of every length passes; overlong forms,
 * surrogates, code points past U+10FFFF, cut characters, stray
 * continuation bytes and control characters do not, naming the byte. */
START_TEST(test_text_check)
{
    static const char *const good[] = {"",
                                       "weights",
                                       "caf\xc3\xa9",
                                       "\xe2\x82\xac"
                                       "5",
                                       "\xf0\x9f\x98\x80 ok",
                                       "\xf4\x8f\xbf\xbf"};
    for (size_t k = 0; k < sizeof good / sizeof *good; k++)
        ck_assert_msg(sm_text_check("name", good[k], NULL, 0) == SM_OK, "good %zu", k);
    static const struct {
        const char *s, *msg;
    } bad[] = {
        {"a\nb", "name has a control character (0x0a at byte 1)"},
        {"\x7f", "control character (0x7f at byte 0)"},
        {"ab\xc0\x80", "name is not valid UTF-8 (byte 0xc0 at 2)"}, /* overlong NUL */
        {"\xe0\x80\xaf", "not valid UTF-8 (byte 0xe0 at 0)"},       /* overlong '/' */
        {"\xed\xa0\x80", "not valid UTF-8 (byte 0xed at 0)"},       /* a surrogate */
        {"\xf4\x90\x80\x80", "not valid UTF-8 (byte 0xf4 at 0)"},   /* past U+10FFFF */
        {"x\xe2\x82", "not valid UTF-8 (byte 0xe2 at 1)"},          /* cut short */
        {"\x80x", "not valid UTF-8 (byte 0x80 at 0)"},              /* stray */
        {"\xff", "not valid UTF-8 (byte 0xff at 0)"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
        char err[128] = "";
        ck_assert_int_eq(sm_text_check("name", bad[k].s, err, sizeof err), SM_EINVAL);
        ck_assert_msg(strstr(err, bad[k].msg), "bad %zu: %s", k, err);
    }
}
END_TEST

START_TEST(test_strbuf)
{
    sm_strbuf b = {0};
    ck_assert_str_eq(sm_strbuf_str(&b), "");
    for (int i = 0; i < 1000; i++)
        sm_strbuf_printf(&b, "%d,", i % 10);
    ck_assert_uint_eq(b.len, 2000);
    sm_strbuf_repeat(&b, '-', 3);
    sm_strbuf_puts(&b, "end");
    ck_assert_str_eq(sm_strbuf_str(&b) + 2000, "---end");
    char *s = sm_strbuf_take(&b);
    ck_assert_uint_eq(strlen(s), 2006);
    ck_assert_uint_eq(b.len, 0);
    free(s);
    sm_strbuf_free(&b);
}
END_TEST

START_TEST(test_arena)
{
    sm_arena *a = sm_arena_create(128);
    ck_assert_ptr_nonnull(a);
    char *big = sm_arena_alloc(a, 10000); /* larger than a block */
    ck_assert_ptr_nonnull(big);
    memset(big, 1, 10000);
    for (int i = 0; i < 100; i++) {
        double *d = sm_arena_alloc(a, sizeof(double) * 3);
        ck_assert_ptr_nonnull(d);
        ck_assert(((uintptr_t)d % _Alignof(double)) == 0);
        ck_assert(d[0] == 0.0 && d[2] == 0.0);
    }
    ck_assert_str_eq(sm_arena_strndup(a, "hello world", 5), "hello");
    sm_arena_free(a);
}
END_TEST

/* Deferred calls run at sm_arena_free, the latest first. */
static char arena_order[8];
static void arena_note(void *p)
{
    size_t n = strlen(arena_order);
    arena_order[n] = *(const char *)p;
    arena_order[n + 1] = 0;
}

START_TEST(test_arena_defer)
{
    arena_order[0] = 0;
    sm_arena *a = sm_arena_create(64);
    ck_assert_ptr_nonnull(a);
    ck_assert_int_eq(sm_arena_defer(a, arena_note, "a"), 0);
    ck_assert_ptr_nonnull(sm_arena_alloc(a, 1000));
    ck_assert_int_eq(sm_arena_defer(a, arena_note, "b"), 0);
    ck_assert_int_eq(sm_arena_defer(a, free, malloc(32)), 0); /* LeakSanitizer checks this one */
    ck_assert_str_eq(arena_order, "");
    sm_arena_free(a);
    ck_assert_str_eq(arena_order, "ba");
}
END_TEST

static const sm_config_row cfg_rows[] = {
    {"listen", 'l', SM_CFG_STRING, "0.0.0.0:7070", "SM_TEST_LISTEN", "Address to listen on."},
    {"devices", 0, SM_CFG_INT, "4", "SM_TEST_DEVICES", "Devices per worker."},
    {"verbose", 'v', SM_CFG_BOOL, "false", NULL, "Log more."},
};
#define NCFG (sizeof cfg_rows / sizeof cfg_rows[0])

START_TEST(test_config_precedence)
{
    sm_config_value v[NCFG];
    char err[256];
    char *argv0[] = {"prog", NULL};
    unsetenv("SM_TEST_LISTEN");
    setenv("SM_TEST_DEVICES", "8", 1);
    ck_assert_int_eq(sm_config_parse(cfg_rows, NCFG, v, 1, argv0, "usage", NULL, err, sizeof err),
                     SM_OK);
    ck_assert_str_eq(v[0].s, "0.0.0.0:7070");
    ck_assert_int_eq(v[0].set, 0);
    ck_assert_int_eq(v[1].i, 8); /* environment beats default */
    ck_assert_int_eq(v[1].set, 1);
    ck_assert_int_eq(v[2].i, 0);
    char *argv1[] = {"prog", "--devices", "2", "-v", "-l", "127.0.0.1:0", "pos", NULL};
    int first = 0;
    ck_assert_int_eq(sm_config_parse(cfg_rows, NCFG, v, 7, argv1, "usage", &first, err, sizeof err),
                     SM_OK);
    ck_assert_int_eq(v[1].i, 2); /* flag beats environment */
    ck_assert_int_eq(v[2].i, 1);
    ck_assert_str_eq(v[0].s, "127.0.0.1:0");
    ck_assert_int_eq(first, 6);
    unsetenv("SM_TEST_DEVICES");
}
END_TEST

START_TEST(test_config_errors)
{
    sm_config_value v[NCFG];
    char err[256];
    char *a1[] = {"prog", "--devices", "four", NULL};
    ck_assert_int_eq(sm_config_parse(cfg_rows, NCFG, v, 3, a1, "usage", NULL, err, sizeof err),
                     SM_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "--devices"));
    ck_assert_ptr_nonnull(strstr(err, "four"));
    char *a2[] = {"prog", "--bogus", NULL};
    ck_assert_int_eq(sm_config_parse(cfg_rows, NCFG, v, 2, a2, "usage", NULL, err, sizeof err),
                     SM_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "--bogus"));
    char *a3[] = {"prog", "extra", NULL};
    ck_assert_int_eq(sm_config_parse(cfg_rows, NCFG, v, 2, a3, "usage", NULL, err, sizeof err),
                     SM_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "extra"));
    setenv("SM_TEST_DEVICES", "x1", 1);
    char *a4[] = {"prog", NULL};
    ck_assert_int_eq(sm_config_parse(cfg_rows, NCFG, v, 1, a4, "usage", NULL, err, sizeof err),
                     SM_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "SM_TEST_DEVICES"));
    unsetenv("SM_TEST_DEVICES");
}
END_TEST

/* Tasks of one round meet at a barrier: each must run at once, whatever
 * the number of idle threads. */
typedef struct {
    pthread_barrier_t *meet;
    pthread_mutex_t *mu;
    int *ran;
} tpool_task;

static void tpool_task_main(void *arg)
{
    tpool_task *t = arg;
    pthread_barrier_wait(t->meet);
    pthread_mutex_lock(t->mu);
    (*t->ran)++;
    pthread_mutex_unlock(t->mu);
}

START_TEST(test_tpool)
{
    static const struct {
        int max_idle, ntasks, rounds;
    } rows[] = {
        {0, 1, 3},  /* no thread kept: a new one each time */
        {2, 6, 3},  /* more tasks than idle threads */
        {8, 4, 5},  /* every round on the same threads */
        {4, 16, 2}, /* grows past max_idle, then trims */
    };
    for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
        sm_tpool *p;
        char err[256];
        ck_assert_int_eq(sm_tpool_create(rows[r].max_idle, &p, err, sizeof err), SM_OK);
        for (int round = 0; round < rows[r].rounds; round++) {
            pthread_barrier_t meet;
            pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
            int ran = 0;
            tpool_task t = {&meet, &mu, &ran};
            pthread_barrier_init(&meet, NULL, (unsigned)rows[r].ntasks);
            sm_tpool_group g;
            sm_tpool_group_init(&g);
            for (int k = 0; k < rows[r].ntasks; k++)
                ck_assert_int_eq(sm_tpool_start(p, &g, tpool_task_main, &t), SM_OK);
            sm_tpool_group_wait(&g);
            ck_assert_int_eq(ran, rows[r].ntasks);
            pthread_barrier_destroy(&meet);
        }
        sm_tpool_free(p);
    }
    sm_tpool *p = NULL;
    char err[256];
    ck_assert_int_eq(sm_tpool_create(-1, &p, err, sizeof err), SM_EINVAL);
    ck_assert_ptr_null(p);
    ck_assert_ptr_nonnull(strstr(err, "-1"));
    sm_tpool_free(NULL);
}
END_TEST

/* sm_tpool_run: every index once, on up to width threads; after a failure
 * no index is handed out and the failure's code and sentence come back. */
typedef struct {
    pthread_mutex_t mu;
    int seen[64];
    int fail_at; /* -1: none */
    pthread_t threads[64];
    int nthreads;
} tpool_for;

static sm_err tpool_for_fn(void *user, int i, char *err, size_t errlen)
{
    tpool_for *f = user;
    pthread_mutex_lock(&f->mu);
    f->seen[i]++;
    int k = 0;
    while (k < f->nthreads && !pthread_equal(f->threads[k], pthread_self()))
        k++;
    if (k == f->nthreads)
        f->threads[f->nthreads++] = pthread_self();
    pthread_mutex_unlock(&f->mu);
    struct timespec ts = {0, 2 * 1000000L}; /* long enough for the others to take some */
    nanosleep(&ts, NULL);
    return i == f->fail_at ? sm_fail(err, errlen, SM_EIO, "index %d failed", i) : SM_OK;
}

START_TEST(test_tpool_run)
{
    static const struct {
        int with_pool, n, width, fail_at;
    } rows[] = {
        {0, 40, 4, -1}, {1, 40, 3, -1}, {0, 1, 8, -1}, {0, 0, 2, -1},
        {0, 40, 1, -1}, {0, 40, 4, 3},  {1, 40, 2, 0},
    };
    for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
        tpool_for f = {.mu = PTHREAD_MUTEX_INITIALIZER, .fail_at = rows[r].fail_at};
        sm_tpool *p = NULL;
        char err[256] = "";
        if (rows[r].with_pool)
            ck_assert_int_eq(sm_tpool_create(1, &p, err, sizeof err), SM_OK);
        sm_err e = sm_tpool_run(p, rows[r].n, rows[r].width, tpool_for_fn, &f, err, sizeof err);
        sm_tpool_free(p);
        int total = 0;
        for (int i = 0; i < rows[r].n; i++) {
            ck_assert_int_le(f.seen[i], 1);
            total += f.seen[i];
        }
        ck_assert_int_le(f.nthreads, rows[r].width);
        if (rows[r].fail_at < 0) {
            ck_assert_int_eq(e, SM_OK);
            ck_assert_int_eq(total, rows[r].n);
        } else {
            ck_assert_int_eq(e, SM_EIO);
            ck_assert_str_eq(err, rows[r].fail_at ? "index 3 failed" : "index 0 failed");
            ck_assert_int_lt(total, rows[r].n); /* stopped handing out indices */
        }
    }
}
END_TEST

/* sm_hold: every loan back ends at once; a loan still out after the wait
 * leaves the hold to its release, on another thread (leaks show under
 * the sanitizers). */
static void *late_release(void *h)
{
    struct timespec ts = {0, 50 * 1000000L};
    nanosleep(&ts, NULL);
    sm_hold_release(h);
    return NULL;
}

START_TEST(test_hold)
{
    ck_assert_int_eq(sm_hold_end(NULL, 10), 0);
    sm_hold *h = sm_hold_create();
    ck_assert_ptr_nonnull(h);
    sm_hold_take(h);
    sm_hold_take(h);
    sm_hold_release(h);
    sm_hold_release(h);
    ck_assert_int_eq(sm_hold_end(h, 1000), 0);

    h = sm_hold_create(); /* a release that comes within the wait */
    sm_hold_take(h);
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, late_release, h), 0);
    ck_assert_int_eq(sm_hold_end(h, 5000), 0);
    pthread_join(th, NULL);

    h = sm_hold_create(); /* one that comes after it */
    sm_hold_take(h);
    ck_assert_int_eq(pthread_create(&th, NULL, late_release, h), 0);
    ck_assert_int_eq(sm_hold_end(h, 1), 1);
    pthread_join(th, NULL); /* the release freed the hold */
}
END_TEST

/* sm_htab: random puts and removals against a table of what is present,
 * with well-mixed hashes and with hashes that collide (few values; one
 * value whose run wraps past the last slot), so removals shift runs back
 * across the end of the table. */
typedef struct {
    const char *name;
    uint64_t (*hash)(uint64_t key);
} htab_case;

static uint64_t htab_mixed(uint64_t key)
{
    return sm_htab_hash_u64(key);
}

static uint64_t htab_few(uint64_t key)
{
    return sm_htab_hash_u64(key % 7) | 15; /* 7 values, all near the end */
}

static uint64_t htab_one(uint64_t key)
{
    (void)key;
    return UINT64_MAX; /* the last slot of any table */
}

static const htab_case htab_cases[] = {
    {"mixed", htab_mixed},
    {"few", htab_few},
    {"one", htab_one},
};

static int htab_match(const void *item, const void *key)
{
    return *(const uint64_t *)item == *(const uint64_t *)key;
}

START_TEST(test_htab)
{
    const htab_case *c = &htab_cases[_i];
    enum { NKEYS = 600, NOPS = 20000 };
    static uint64_t keys[NKEYS];
    unsigned char in[NKEYS] = {0};
    size_t n = 0;
    uint64_t rng = 12345;
    sm_htab t = {0};
    for (int k = 0; k < NKEYS; k++)
        keys[k] = (uint64_t)k * 1000003u;
    uint64_t absent = 7;
    ck_assert_ptr_null(sm_htab_find(&t, c->hash(absent), htab_match, &absent));
    ck_assert_int_eq(sm_htab_del(&t, c->hash(absent), &absent), 0);
    for (int op = 0; op < NOPS; op++) {
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        int k = (int)(rng >> 33) % NKEYS;
        if (in[k]) {
            ck_assert_int_eq(sm_htab_del(&t, c->hash(keys[k]), &keys[k]), 1);
            ck_assert_int_eq(sm_htab_del(&t, c->hash(keys[k]), &keys[k]), 0);
            in[k] = 0;
            n--;
        } else {
            ck_assert_int_eq(sm_htab_reserve(&t, t.n + 1), SM_OK);
            sm_htab_put(&t, c->hash(keys[k]), &keys[k]);
            in[k] = 1;
            n++;
        }
        ck_assert_uint_eq(t.n, n);
        if (op % 97 && op < NOPS - 1)
            continue;
        for (int j = 0; j < NKEYS; j++) {
            uint64_t key = keys[j];
            ck_assert_msg(sm_htab_find(&t, c->hash(key), htab_match, &key) ==
                              (in[j] ? &keys[j] : NULL),
                          "%s: key %d after %d operations", c->name, j, op);
        }
    }
    ck_assert_uint_le(t.n * 2, t.cap);
    sm_htab_free(&t);
    ck_assert_uint_eq(t.cap, 0);
    ck_assert_ptr_null(sm_htab_find(&t, 1, htab_match, &absent));
    /* strings: equal texts hash alike, different ones (almost surely) not */
    ck_assert_uint_eq(sm_htab_hash_str("abc"), sm_htab_hash_str("abc"));
    ck_assert_uint_ne(sm_htab_hash_str("abc"), sm_htab_hash_str("abd"));
    ck_assert_uint_ne(sm_htab_hash_str(""), sm_htab_hash_str("a"));
}
END_TEST

/* sm_htab shrinking: a table grown to thousands of items halves its slots
 * as they are removed, down to SM_HTAB_MIN, and finds what stays at every
 * size (colliding hashes too). */
START_TEST(test_htab_shrink)
{
    const htab_case *c = &htab_cases[_i];
    enum { NKEYS = 2000, KEEP = 200 }; /* every KEEP-th key stays a while */
    static uint64_t keys[NKEYS];
    sm_htab t = {0};
    for (int k = 0; k < NKEYS; k++) {
        keys[k] = (uint64_t)k * 1000003u;
        ck_assert_int_eq(sm_htab_reserve(&t, t.n + 1), SM_OK);
        sm_htab_put(&t, c->hash(keys[k]), &keys[k]);
    }
    size_t grown = t.cap;
    ck_assert_uint_ge(grown, 2 * NKEYS);
    for (int k = 0; k < NKEYS; k++) {
        if (k % KEEP == 0)
            continue;
        ck_assert_int_eq(sm_htab_del(&t, c->hash(keys[k]), &keys[k]), 1);
        /* never more than needed: at most an eighth full only at the floor */
        ck_assert_uint_le(t.n * 2, t.cap);
        ck_assert_msg(t.cap == SM_HTAB_MIN || t.n * 8 > t.cap,
                      "%s: %zu slots for %zu items after removing key %d", c->name, t.cap, t.n, k);
    }
    ck_assert_uint_eq(t.n, NKEYS / KEEP);
    ck_assert_uint_lt(t.cap, grown / 16);
    for (int k = 0; k < NKEYS; k++) {
        uint64_t key = keys[k];
        ck_assert_msg(sm_htab_find(&t, c->hash(key), htab_match, &key) ==
                          (k % KEEP == 0 ? &keys[k] : NULL),
                      "%s: key %d after the shrink", c->name, k);
    }
    for (int k = 0; k < NKEYS; k += KEEP)
        ck_assert_int_eq(sm_htab_del(&t, c->hash(keys[k]), &keys[k]), 1);
    ck_assert_uint_eq(t.n, 0);
    ck_assert_uint_eq(t.cap, SM_HTAB_MIN);
    uint64_t key = keys[1]; /* the shrunk table takes items again */
    ck_assert_ptr_null(sm_htab_find(&t, c->hash(key), htab_match, &key));
    ck_assert_int_eq(sm_htab_reserve(&t, t.n + 1), SM_OK);
    sm_htab_put(&t, c->hash(key), &keys[1]);
    ck_assert_ptr_eq(sm_htab_find(&t, c->hash(key), htab_match, &key), &keys[1]);
    sm_htab_free(&t);
}
END_TEST

/* A deadline ms from now: normalised (nsec below 1e9), and as far off as
 * asked, on both clocks; a negative delay is now. */
START_TEST(test_time_after)
{
    const clockid_t clocks[] = {CLOCK_MONOTONIC, CLOCK_REALTIME};
    const int64_t delays[] = {0, 1, 999, 1000, 1999, 86400123, -5};
    for (size_t c = 0; c < 2; c++)
        for (size_t d = 0; d < sizeof delays / sizeof delays[0]; d++) {
            struct timespec t0, t1;
            clock_gettime(clocks[c], &t0);
            struct timespec at = sm_time_after_ms(clocks[c], delays[d]);
            clock_gettime(clocks[c], &t1);
            ck_assert(at.tv_nsec >= 0 && at.tv_nsec < 1000000000L);
            int64_t want = delays[d] < 0 ? 0 : delays[d] * 1000000;
            int64_t ns = (int64_t)(at.tv_sec - t0.tv_sec) * 1000000000 + (at.tv_nsec - t0.tv_nsec);
            int64_t took =
                (int64_t)(t1.tv_sec - t0.tv_sec) * 1000000000 + (t1.tv_nsec - t0.tv_nsec);
            ck_assert_msg(ns >= want && ns <= want + took, "clock %zu, %lld ms: %lld ns ahead", c,
                          (long long)delays[d], (long long)ns);
        }
}
END_TEST

/* The CPUs a process may keep busy: its affinity mask's, or fewer under
 * a cgroup's CPU quota (rounded up); none ever. */
START_TEST(test_sys_cpus)
{
    cpu_set_t set;
    ck_assert_int_eq(sched_getaffinity(0, sizeof set, &set), 0);
    int n = sm_sys_cpus();
    ck_assert_int_ge(n, 1);
    ck_assert_int_le(n, CPU_COUNT(&set));
    ck_assert_int_eq(sm_sys_cpus_quota(8, NULL), 8);
    ck_assert_int_eq(sm_sys_cpus_quota(8, ""), 8);
    ck_assert_int_eq(sm_sys_cpus_quota(8, "max 100000\n"), 8);
    ck_assert_int_eq(sm_sys_cpus_quota(8, "200000 100000\n"), 2);
    ck_assert_int_eq(sm_sys_cpus_quota(8, "150000 100000"), 2);
    ck_assert_int_eq(sm_sys_cpus_quota(8, "50000 100000"), 1);
    ck_assert_int_eq(sm_sys_cpus_quota(2, "800000 100000"), 2);
    ck_assert_int_eq(sm_sys_cpus_quota(8, "-1 100000"), 8); /* v1: no quota */
    ck_assert_int_eq(sm_sys_cpus_quota(8, "100000 0"), 8);
    ck_assert_int_eq(sm_sys_cpus_quota(0, NULL), 1);
}
END_TEST

/* Writes text to path; 0 on success. */
static int write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    int ok = fputs(text, f) >= 0;
    return fclose(f) == 0 && ok ? 0 : -1;
}

/* What measure returns in a child process moved into "inner", a cgroup
 * made inside a new cgroup of this host of the controller ctrl ("cpu" or
 * "memory") whose limit files (name, text pairs, v2's then v1's) are
 * written first: limits set on an ancestor, not on the process's own
 * cgroup. -1 when no such cgroup can be made here (not root, or no
 * hierarchy with the controller); the caller says so. */
static int64_t cgroup_measure(const char *ctrl, const char *const (*v2files)[2],
                              const char *const (*v1files)[2], int nfiles, int64_t (*measure)(void))
{
    char dir[128], inner[160], path[224], want[32];
    int v2 = access("/sys/fs/cgroup/cgroup.controllers", F_OK) == 0;
    snprintf(dir, sizeof dir, "/sys/fs/cgroup%s%s/shmap-test-%d", v2 ? "" : "/", v2 ? "" : ctrl,
             (int)getpid());
    snprintf(inner, sizeof inner, "%s/inner", dir);
    snprintf(want, sizeof want, "+%s", ctrl);
    if (geteuid() != 0 || (v2 && write_text("/sys/fs/cgroup/cgroup.subtree_control", want)) ||
        mkdir(dir, 0755))
        return -1;
    int ok = mkdir(inner, 0755) == 0;
    for (int k = 0; k < nfiles && ok; k++) {
        snprintf(path, sizeof path, "%s/%s", dir, (v2 ? v2files : v1files)[k][0]);
        ok = write_text(path, (v2 ? v2files : v1files)[k][1]) == 0;
    }
    int64_t n = -1;
    int fd[2] = {-1, -1};
    pid_t child = ok && pipe(fd) == 0 ? fork() : -1;
    if (child == 0) {
        char me[32];
        snprintf(path, sizeof path, "%s/cgroup.procs", inner);
        snprintf(me, sizeof me, "%d\n", (int)getpid());
        n = write_text(path, me) == 0 ? measure() : -2;
        (void)!write(fd[1], &n, sizeof n);
        _exit(0);
    }
    if (child > 0) {
        if (read(fd[0], &n, sizeof n) != (ssize_t)sizeof n)
            n = -3;
        waitpid(child, NULL, 0);
    }
    if (fd[0] >= 0) {
        close(fd[0]);
        close(fd[1]);
    }
    for (int i = 0; i < 100 && rmdir(inner) != 0 && errno == EBUSY;
         i++) /* once the child is gone */
        usleep(10000);
    rmdir(dir);
    ck_assert_msg(ok && child > 0, "cannot set up cgroup %s", dir);
    return n;
}

static int64_t measure_cpus(void)
{
    return sm_sys_cpus();
}

static int64_t measure_memory(void)
{
    return (int64_t)sm_sys_memory_bytes();
}

/* sm_sys_cpus in a child process of a cgroup inside one whose CPU quota
 * is half a CPU (v2 cpu.max, or v1 cpu.cfs_quota_us): 1, however many
 * CPUs its affinity mask holds. Needs root and a cgroup hierarchy with the
 * cpu controller; says so and checks nothing else without. */
START_TEST(test_sys_cpus_cgroup)
{
    static const char *const v2[][2] = {{"cpu.max", "50000 100000"}};
    static const char *const v1[][2] = {{"cpu.cfs_period_us", "100000"},
                                        {"cpu.cfs_quota_us", "50000"}};
    int64_t n = cgroup_measure(
        "cpu", v2, v1, access("/sys/fs/cgroup/cgroup.controllers", F_OK) ? 2 : 1, measure_cpus);
    if (n == -1) {
        fprintf(stderr, "test_sys_cpus_cgroup: no cgroup with a CPU quota can be made here\n");
        return;
    }
    ck_assert_msg(n == 1, "sm_sys_cpus under a quota of half a CPU: %lld", (long long)n);
}
END_TEST

/* sm_sys_memory_bytes in a child process of a cgroup inside one limited
 * to 256 MiB (v2 memory.max, or v1 memory.limit_in_bytes): 256 MiB, on a
 * host with more. Needs root and a cgroup hierarchy with the memory
 * controller; says so and checks nothing else without. */
START_TEST(test_sys_memory_cgroup)
{
    static const char *const v2[][2] = {{"memory.max", "268435456"}};
    static const char *const v1[][2] = {{"memory.limit_in_bytes", "268435456"}};
    uint64_t host = sm_sys_memory_bytes();
    int64_t n = cgroup_measure("memory", v2, v1, 1, measure_memory);
    if (n == -1 || host <= ((uint64_t)256 << 20)) {
        fprintf(stderr, "test_sys_memory_cgroup: no cgroup with a memory limit below this "
                        "process's can be made here\n");
        return;
    }
    ck_assert_msg(n == 256 << 20, "sm_sys_memory_bytes under a limit of 256 MiB: %lld",
                  (long long)n);
}
END_TEST

/* A spin: none for a group crowding the CPUs (more than twice as many
 * threads as this process may keep busy, sm_sys_cpus) or of 0 us; else the process's
 * (SM_SPIN_US_DEFAULT, or as set, clamped), and it ends once that time is
 * up, not before, not long after. */
START_TEST(test_spin)
{
    int ncpu = sm_sys_cpus();
    ck_assert_int_eq(sm_spin_us(1), SM_SPIN_US_DEFAULT);
    ck_assert_int_eq(sm_spin_us(2 * ncpu), SM_SPIN_US_DEFAULT);
    ck_assert_int_eq(sm_spin_us(2 * ncpu + 1), 0);
    sm_spin_set_us(0);
    ck_assert_int_eq(sm_spin_us(1), 0);
    sm_spin_set_us(250);
    ck_assert_int_eq(sm_spin_us(2), 250);
    ck_assert_int_eq(sm_spin_us(2 * ncpu + 1), 0);
    sm_spin_set_us(SM_SPIN_US_MAX + 1);
    ck_assert_int_eq(sm_spin_us(1), SM_SPIN_US_MAX);
    sm_spin_set_us(-5);
    ck_assert_int_eq(sm_spin_us(1), 0);
    sm_spin_set_us(SM_SPIN_US_DEFAULT);
    sm_spin none = sm_spin_start(0);
    ck_assert_int_eq(sm_spin_more(&none), 0);
    int64_t t0 = sm_time_mono_ns();
    sm_spin sp = sm_spin_start(2000);
    unsigned turns = 0;
    while (sm_spin_more(&sp))
        turns++;
    int64_t took = sm_time_mono_ns() - t0;
    ck_assert_msg(took >= 2000000 && took < 500000000, "a spin of 2 ms took %lld ns",
                  (long long)took);
    ck_assert_uint_gt(turns, 64);
}
END_TEST

int main(void)
{
    return suite_main(SUITE_CASE(
        suite_create("base"), "base", 0, NULL, {test_err_texts}, {test_fail_writes_message},
        {test_text_check}, {test_strbuf}, {test_arena}, {test_arena_defer},
        {test_config_precedence}, {test_config_errors}, {test_tpool}, {test_tpool_run}, {test_hold},
        {test_time_after}, {test_sys_cpus}, {test_sys_cpus_cgroup}, {test_sys_memory_cgroup},
        {test_spin}, {test_htab, (int)(sizeof htab_cases / sizeof htab_cases[0])},
        {test_htab_shrink, (int)(sizeof htab_cases / sizeof htab_cases[0])}));
}
