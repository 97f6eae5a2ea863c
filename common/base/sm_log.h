/* sm_log: leveled logging to stderr, one line per call, safe from any thread.
 *
 * The level comes from the environment variable SHMAP_LOG (error, warn, info,
 * debug; default info) the first time anything is logged, or from
 * sm_log_set_level(), which main() may call once at start-up. The process
 * name set by sm_log_set_name() prefixes every line. These two settings are
 * the only process-wide state in common/. */
#ifndef SM_LOG_H
#define SM_LOG_H

typedef enum { SM_LOG_ERROR = 0, SM_LOG_WARN, SM_LOG_INFO, SM_LOG_DEBUG } sm_log_level;

void sm_log_set_level(sm_log_level level);
/* name is copied (at most 31 characters). */
void sm_log_set_name(const char *name);
int sm_log_enabled(sm_log_level level);
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
