/* sm_log: leveled logging to stderr, one line per call, safe from any thread.
 *
 * The level comes from the environment variable SHMAP_LOG (error, warn, info,
 * debug; default info) the first time anything is logged, or from
 * sm_log_set_level(), which main() may call once at start-up. The process
 * name set by sm_log_set_name() prefixes every line. These two settings are
 * the only process-wide state in common/, with the format (text or JSON:
 * SHMAP_LOG_FORMAT or sm_log_set_format) and each thread's request id.
 *
 * Text lines read "12:00:00.123 shmap-coordinator INFO [rid]: sentence";
 * JSON lines are one object each: {"time": "2026-11-25T12:00:00.123Z",
 * "level": "info", "process": "shmap-coordinator", "request_id": "...",
 * "msg": "..."} ("request_id" only when the thread serves a request). */
#ifndef SM_LOG_H
#define SM_LOG_H

#include <stddef.h>

#include "sm_err.h"

typedef enum { SM_LOG_ERROR = 0, SM_LOG_WARN, SM_LOG_INFO, SM_LOG_DEBUG } sm_log_level;
typedef enum { SM_LOG_TEXT = 0, SM_LOG_JSON = 1 } sm_log_format;

/* A request id: 16 hex digits and the NUL. */
#define SM_LOG_RID_LEN 17

void sm_log_set_level(sm_log_level level);
/* name is copied (at most 31 characters). */
void sm_log_set_name(const char *name);
int sm_log_enabled(sm_log_level level);
void sm_log_set_format(sm_log_format f);
/* Parses "text" or "json"; -1 if neither. */
int sm_log_format_parse(const char *s);

/* The two rows of a program's sm_config table for its logs, in this
 * order: --log-level (SHMAP_LOG) and --log-format (SHMAP_LOG_FORMAT).
 * Written after the designator of the first:
 *   [CFG_LOG_LEVEL] = SM_LOG_CONFIG_ROWS, */
#define SM_LOG_CONFIG_ROWS                                                                         \
    {                                                                                              \
        "log-level", 0,           SM_CFG_STRING,                                                   \
        "info",      "SHMAP_LOG", "Log level: error, warn, info or debug."},                       \
    {                                                                                              \
        "log-format", 0, SM_CFG_STRING, "text", "SHMAP_LOG_FORMAT",                                \
            "Log lines as text or json (one JSON object a line, with the request id that "         \
            "follows a call from client to coordinator to workers)."                               \
    }
/* Sets the level and the format from the values of those two rows (main,
 * at start-up). SM_EINVAL with a sentence naming the flag and the value,
 * and nothing set, when either is not one of its names. */
sm_err sm_log_configure(const char *level, const char *format, char *err, size_t errlen);

/* The request this thread serves: set by the RPC server around a handler
 * (from the caller's x-shmap-request-id, or a new one) and by whoever runs
 * work for a request on another thread; sent on by every call this thread
 * makes, so one id follows a request from client to coordinator to
 * workers. NULL or "" clears it; ids longer than 16 characters are cut. */
void sm_log_set_request_id(const char *rid);
/* This thread's request id, "" if none. */
const char *sm_log_request_id(void);
/* A new random id (16 hex digits) into out. */
void sm_log_new_request_id(char out[SM_LOG_RID_LEN]);
void sm_log(sm_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define SM_ERROR(...) sm_log(SM_LOG_ERROR, __VA_ARGS__)
#define SM_WARN(...)  sm_log(SM_LOG_WARN, __VA_ARGS__)
#define SM_INFO(...)  sm_log(SM_LOG_INFO, __VA_ARGS__)
#define SM_DEBUG(...)                                                                              \
    do {                                                                                           \
        if (sm_log_enabled(SM_LOG_DEBUG))                                                          \
            sm_log(SM_LOG_DEBUG, __VA_ARGS__);                                                     \
    } while (0)

#endif
