/* OpenBLAS setup: picking a core type for CPUs the installed OpenBLAS does
 * not recognise (Debian 12's 0.3.21 runs Zen 5 on its Haswell kernels), and
 * thread count. */
#include <cblas.h>
#include <cpuid.h>
#include <stdlib.h>
#include <strings.h>
#include <unistd.h>

#include "sm_kern_impl.h"

#define SMK_REEXEC_ENV "SM_KERN_REEXEC"

const char *sm_kern_best_coretype(void)
{
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq")) {
        /* AVX512_BF16: CPUID leaf 7 subleaf 1, EAX bit 5 (gcc 12 has no
         * __builtin_cpu_supports name for it). */
        unsigned a, b, c, d;
        if (__get_cpuid_max(0, NULL) >= 7 && __get_cpuid_count(7, 1, &a, &b, &c, &d) &&
            (a & (1u << 5)))
            return "Cooperlake";
        return "SkylakeX";
    }
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        return "Haswell";
    return NULL;
}

/* 1 for OpenBLAS kernel sets that already use AVX-512 (switching among them
 * only changes bf16 paths, not f32/f64 gemm). */
static int coretype_is_avx512(const char *name)
{
    return !strcasecmp(name, "SkylakeX") || !strcasecmp(name, "Cooperlake") ||
           !strcasecmp(name, "SapphireRapids");
}

int sm_kern_coretype_setup(int argc, char **argv)
{
    (void)argc;
    if (getenv("OPENBLAS_CORETYPE") || getenv(SMK_REEXEC_ENV))
        return 0;
    const char *best = sm_kern_best_coretype();
    const char *cur = sm_kern_corename();
    if (!best || !argv || !argv[0] || !strcasecmp(best, cur) || coretype_is_avx512(cur))
        return 0;
    if (setenv("OPENBLAS_CORETYPE", best, 1) || setenv(SMK_REEXEC_ENV, "1", 1))
        return 0;
    execv("/proc/self/exe", argv);
    /* exec failed: carry on with OpenBLAS's own detection, and don't let a
     * child believe the core type was chosen for it */
    unsetenv("OPENBLAS_CORETYPE");
    return 0;
}

const char *sm_kern_corename(void)
{
    const char *n = openblas_get_corename();
    return n ? n : "?";
}

void sm_kern_set_threads(int n)
{
    openblas_set_num_threads(n < 1 ? 1 : n);
}
