/* sm_time: see the header. */
#include "sm_time.h"

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
