#include "sm_log.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/time.h>
#include <time.h>

static atomic_int sm_log_level_v = -1;
static char sm_log_name_v[32] = "shmap";

static int sm_log_level_from_env(void)
{
    const char *s = getenv("SHMAP_LOG");
    if (!s)
        return SM_LOG_INFO;
    if (!strcasecmp(s, "error"))
        return SM_LOG_ERROR;
    if (!strcasecmp(s, "warn") || !strcasecmp(s, "warning"))
        return SM_LOG_WARN;
    if (!strcasecmp(s, "debug"))
        return SM_LOG_DEBUG;
    return SM_LOG_INFO;
}

void sm_log_set_level(sm_log_level level)
{
    atomic_store(&sm_log_level_v, (int)level);
}

void sm_log_set_name(const char *name)
{
    snprintf(sm_log_name_v, sizeof sm_log_name_v, "%s", name ? name : "shmap");
}

int sm_log_enabled(sm_log_level level)
{
    int cur = atomic_load(&sm_log_level_v);
    if (cur < 0) {
        cur = sm_log_level_from_env();
        atomic_store(&sm_log_level_v, cur);
    }
    return (int)level <= cur;
}

void sm_log(sm_log_level level, const char *fmt, ...)
{
    static const char *const tags[] = {"ERROR", "WARN", "INFO", "DEBUG"};
    if (!sm_log_enabled(level))
        return;
    char line[2048];
    struct timeval tv;
    gettimeofday(&tv, NULL);
    struct tm tm;
    gmtime_r(&tv.tv_sec, &tm);
    int n = snprintf(line, sizeof line, "%02d:%02d:%02d.%03d %s %s: ", tm.tm_hour, tm.tm_min,
                     tm.tm_sec, (int)(tv.tv_usec / 1000), sm_log_name_v, tags[level]);
    va_list ap;
    va_start(ap, fmt);
    if (n > 0 && (size_t)n < sizeof line)
        vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
    va_end(ap);
    /* one fputs per line keeps lines from different threads whole */
    size_t len = strlen(line);
    if (len + 1 < sizeof line) {
        line[len] = '\n';
        line[len + 1] = 0;
    }
    fputs(line, stderr);
}
