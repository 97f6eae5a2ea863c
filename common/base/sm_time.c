/* sm_time: see the header. */
#define _GNU_SOURCE
#include "sm_time.h"

#include <sched.h>

#include "sm_sys.h"

int sm_time_cond_init(pthread_cond_t *cv)
{
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    int rc = pthread_cond_init(cv, &ca);
    pthread_condattr_destroy(&ca);
    return rc;
}

struct timespec sm_time_after_ms(clockid_t clock, int64_t ms)
{
    struct timespec t;
    clock_gettime(clock, &t);
    if (ms < 0)
        ms = 0;
    t.tv_sec += (time_t)(ms / 1000);
    t.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (t.tv_nsec >= 1000000000L) {
        t.tv_sec++;
        t.tv_nsec -= 1000000000L;
    }
    return t;
}

int64_t sm_time_mono_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

int64_t sm_time_mono_us(void)
{
    return sm_time_mono_ns() / 1000;
}

int64_t sm_time_mono_ms(void)
{
    return sm_time_mono_ns() / 1000000;
}

static int64_t sm_spin_set = SM_SPIN_US_DEFAULT;

void sm_spin_set_us(int64_t us)
{
    __atomic_store_n(&sm_spin_set,
                     us < 0                ? 0
                     : us > SM_SPIN_US_MAX ? SM_SPIN_US_MAX
                                           : us,
                     __ATOMIC_RELAXED);
}

int64_t sm_spin_us(int threads)
{
    static int ncpu; /* 0 until known: sm_sys_cpus at the first call */
    int n = __atomic_load_n(&ncpu, __ATOMIC_RELAXED);
    if (!n) {
        n = sm_sys_cpus();
        __atomic_store_n(&ncpu, n, __ATOMIC_RELAXED);
    }
    return threads <= 2 * n ? __atomic_load_n(&sm_spin_set, __ATOMIC_RELAXED) : 0;
}

sm_spin sm_spin_start(int64_t us)
{
    sm_spin s = {us > 0 ? sm_time_mono_ns() + us * 1000 : 0, 0};
    return s;
}

int sm_spin_more(sm_spin *s)
{
    if (s->until_ns == 0)
        return 0;
    if (++s->turns % 64) {
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#elif defined(__aarch64__)
        __asm__ __volatile__("yield");
#endif
        return 1;
    }
    if (sm_time_mono_ns() >= s->until_ns)
        return 0;
    sched_yield();
    return 1;
}
