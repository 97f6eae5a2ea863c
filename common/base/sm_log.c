#include "sm_log.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <sys/time.h>
#include <time.h>

static atomic_int sm_log_level_v = -1;
static atomic_int sm_log_format_v = -1;
static char sm_log_name_v[32] = "shmap";
static __thread char sm_log_rid[SM_LOG_RID_LEN];

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

int sm_log_format_parse(const char *s)
{
    if (!s)
        return -1;
    if (!strcasecmp(s, "text"))
        return SM_LOG_TEXT;
    if (!strcasecmp(s, "json"))
        return SM_LOG_JSON;
    return -1;
}

void sm_log_set_format(sm_log_format f)
{
    atomic_store(&sm_log_format_v, (int)f);
}

sm_err sm_log_configure(const char *level, const char *format, char *err, size_t errlen)
{
    static const char *const levels[] = {"error", "warn", "info", "debug"};
    int l = 0;
    while (l < 4 && strcmp(level ? level : "", levels[l]))
        l++;
    if (l == 4)
        return sm_fail(err, errlen, SM_EINVAL,
                       "--log-level must be error, warn, info or debug, got '%s'",
                       level ? level : "");
    int f = sm_log_format_parse(format);
    if (f < 0)
        return sm_fail(err, errlen, SM_EINVAL, "--log-format must be text or json, got '%s'",
                       format ? format : "");
    sm_log_set_level((sm_log_level)l);
    sm_log_set_format((sm_log_format)f);
    return SM_OK;
}

static int sm_log_format_get(void)
{
    int f = atomic_load(&sm_log_format_v);
    if (f < 0) {
        f = sm_log_format_parse(getenv("SHMAP_LOG_FORMAT"));
        if (f < 0)
            f = SM_LOG_TEXT;
        atomic_store(&sm_log_format_v, f);
    }
    return f;
}

void sm_log_set_request_id(const char *rid)
{
    snprintf(sm_log_rid, sizeof sm_log_rid, "%s", rid ? rid : "");
}

const char *sm_log_request_id(void)
{
    return sm_log_rid;
}

void sm_log_new_request_id(char out[SM_LOG_RID_LEN])
{
    uint64_t v = 0;
    if (getrandom(&v, sizeof v, GRND_NONBLOCK) != (ssize_t)sizeof v) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        v = ((uint64_t)ts.tv_sec * 1000000007u) ^ (uint64_t)ts.tv_nsec ^ (uint64_t)(uintptr_t)out;
    }
    snprintf(out, SM_LOG_RID_LEN, "%016llx", (unsigned long long)v);
}

/* s as the body of a JSON string into out (n bytes); returns out. */
static char *sm_log_json_str(const char *s, char *out, size_t n)
{
    size_t o = 0;
    for (; *s && o + 7 < n; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            out[o++] = '\\';
            out[o++] = (char)c;
        } else if (c < 0x20) {
            o += (size_t)snprintf(out + o, n - o, "\\u%04x", c);
        } else {
            out[o++] = (char)c;
        }
    }
    out[o] = 0;
    return out;
}

void sm_log(sm_log_level level, const char *fmt, ...)
{
    static const char *const tags[] = {"ERROR", "WARN", "INFO", "DEBUG"};
    static const char *const names[] = {"error", "warn", "info", "debug"};
    if (!sm_log_enabled(level))
        return;
    char msg[2048], line[4600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    struct timeval tv;
    gettimeofday(&tv, NULL);
    struct tm tm;
    gmtime_r(&tv.tv_sec, &tm);
    if (sm_log_format_get() == SM_LOG_JSON) {
        char m[4200], rid[64] = "";
        if (sm_log_rid[0])
            snprintf(rid, sizeof rid, ", \"request_id\": \"%s\"", sm_log_rid);
        snprintf(line, sizeof line,
                 "{\"time\": \"%04d-%02d-%02dT%02d:%02d:%02d.%03dZ\", \"level\": \"%s\", "
                 "\"process\": \"%s\"%s, \"msg\": \"%s\"}\n",
                 tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                 (int)(tv.tv_usec / 1000), names[level], sm_log_name_v, rid,
                 sm_log_json_str(msg, m, sizeof m));
    } else {
        snprintf(line, sizeof line, "%02d:%02d:%02d.%03d %s %s%s%s%s: %s\n", tm.tm_hour, tm.tm_min,
                 tm.tm_sec, (int)(tv.tv_usec / 1000), sm_log_name_v, tags[level],
                 sm_log_rid[0] ? " [" : "", sm_log_rid, sm_log_rid[0] ? "]" : "", msg);
    }
    /* one fputs per line keeps lines from different threads whole */
    size_t len = strlen(line);
    if (len && line[len - 1] != '\n' && len + 1 < sizeof line) {
        line[len] = '\n';
        line[len + 1] = 0;
    }
    fputs(line, stderr);
}
