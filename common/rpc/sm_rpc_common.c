/* sm_rpc_common: lifecycle, status mapping, channel arguments and deadlines. */
#include <dlfcn.h>
#include <inttypes.h>
#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <grpc/support/log.h>

#include "sm_log.h"
#include "sm_rpc_internal.h"
#include "sm_time.h"

/* Debian 12 builds abseil without NDEBUG, so every absl::Mutex that gRPC
 * takes also runs abseil's debug-only deadlock detector, which records each
 * lock in a global graph under a global lock (about 6% of an empty job's
 * round trip, and a contended lock between gRPC's threads). The detector
 * is off in abseil's release builds; this turns it off here too, through
 * abseil's own switch, SetMutexDeadlockDetectionMode(kIgnore), looked up at
 * run time under its Debian and its upstream names (nothing happens when
 * neither exists). SM_ABSL_DEADLOCK_DETECTION=1 keeps it on. */
static void absl_deadlock_detection_off(void)
{
    static const char *const names[] = {
        "_ZN4absl7debian329SetMutexDeadlockDetectionModeENS0_15OnDeadlockCycleE",
        "_ZN4absl12lts_2022062329SetMutexDeadlockDetectionModeENS0_15OnDeadlockCycleE",
        "_ZN4absl29SetMutexDeadlockDetectionModeENS_15OnDeadlockCycleE",
    };
    const char *keep = getenv("SM_ABSL_DEADLOCK_DETECTION");
    if (keep && *keep && strcmp(keep, "0") != 0)
        return;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        void *f = dlsym(RTLD_DEFAULT, names[i]);
        if (f) {
            void (*set_mode)(int) = (void (*)(int))f; /* enum class OnDeadlockCycle: kIgnore = 0 */
            set_mode(0);
            return;
        }
    }
}

/* Multi-MiB messages are allocated and freed on every chunk: keep them off
 * mmap (no map/unmap and page faults per message), and keep up to 512 MiB
 * of freed heap instead of trimming it, so the multi-MiB blocks of
 * successive jobs reuse memory that is already mapped (a first touch costs
 * a page fault per 4 KiB, slower than filling the page); but cap the malloc
 * arenas. gRPC and the handler pools run many threads; with one arena per
 * thread each one keeps its own freed chunks, and a relaying coordinator's
 * peak RSS grew with the size of the array it relayed (556 MiB for a 1 GiB
 * upload, against 150 MiB with two arenas). MALLOC_ARENA_MAX in the
 * environment still overrides the cap. */
void sm_rpc_malloc_tune(void)
{
    mallopt(M_MMAP_THRESHOLD, 64 << 20);
    mallopt(M_TRIM_THRESHOLD, 512 << 20);
    if (!getenv("MALLOC_ARENA_MAX"))
        mallopt(M_ARENA_MAX, 2);
}

/* gRPC's own log lines (a failed TLS handshake, say) as shmap's, in its
 * format and level filter: "grpc: MESSAGE (FILE:LINE)". */
static void grpc_log_line(gpr_log_func_args *a)
{
    sm_log_level level = a->severity == GPR_LOG_SEVERITY_ERROR  ? SM_LOG_ERROR
                         : a->severity == GPR_LOG_SEVERITY_INFO ? SM_LOG_INFO
                                                                : SM_LOG_DEBUG;
    if (!sm_log_enabled(level))
        return;
    const char *file = a->file ? strrchr(a->file, '/') : NULL;
    file = file ? file + 1 : a->file ? a->file : "?";
    sm_log(level, "grpc: %s (%s:%d)", a->message ? a->message : "", file, a->line);
}

void sm_rpc_log_through_sm(void)
{
    gpr_set_log_function(grpc_log_line);
}

void sm_rpc_init(void)
{
    absl_deadlock_detection_off();
    grpc_init();
}

void sm_rpc_shutdown(void)
{
    grpc_shutdown();
}

static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done;
} shut = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0};

static void *shutdown_main(void *arg)
{
    (void)arg;
    grpc_shutdown();
    pthread_mutex_lock(&shut.mu);
    shut.done = 1;
    pthread_cond_broadcast(&shut.cv);
    pthread_mutex_unlock(&shut.mu);
    return NULL;
}

void sm_rpc_shutdown_or_exit(int ms, int rc)
{
    pthread_t th;
    if (pthread_create(&th, NULL, shutdown_main, NULL) != 0) {
        grpc_shutdown();
        return;
    }
    pthread_detach(th);
    struct timespec until = sm_time_after_ms(CLOCK_REALTIME, ms);
    pthread_mutex_lock(&shut.mu);
    while (!shut.done && pthread_cond_timedwait(&shut.cv, &shut.mu, &until) == 0)
        ;
    int done = shut.done;
    pthread_mutex_unlock(&shut.mu);
    if (done)
        return;
    SM_WARN("gRPC did not finish shutting down within %d ms; exiting without it", ms);
    fflush(NULL);
    _exit(rc);
}

int sm_rpc_status_from_err(sm_err e)
{
    switch (e) {
    case SM_OK:
        return GRPC_STATUS_OK;
    case SM_EINVAL:
    case SM_EFORMAT:
        return GRPC_STATUS_INVALID_ARGUMENT;
    case SM_EOVERFLOW:
        return GRPC_STATUS_OUT_OF_RANGE;
    case SM_ENOTFOUND:
        return GRPC_STATUS_NOT_FOUND;
    case SM_EEXIST:
        return GRPC_STATUS_ALREADY_EXISTS;
    case SM_EPRECONDITION:
        return GRPC_STATUS_FAILED_PRECONDITION;
    case SM_ERESOURCE:
    case SM_ENOMEM:
        return GRPC_STATUS_RESOURCE_EXHAUSTED;
    case SM_EUNAVAILABLE:
        return GRPC_STATUS_UNAVAILABLE;
    case SM_ETIMEOUT:
        return GRPC_STATUS_DEADLINE_EXCEEDED;
    case SM_EDATALOSS:
        return GRPC_STATUS_DATA_LOSS;
    case SM_EAUTH:
        return GRPC_STATUS_UNAUTHENTICATED;
    case SM_EPERM:
        return GRPC_STATUS_PERMISSION_DENIED;
    case SM_ECANCELLED:
        return GRPC_STATUS_CANCELLED;
    case SM_EUNIMPLEMENTED:
        return GRPC_STATUS_UNIMPLEMENTED;
    default:
        return GRPC_STATUS_INTERNAL;
    }
}

sm_err sm_rpc_err_from_status(int status)
{
    switch (status) {
    case GRPC_STATUS_OK:
        return SM_OK;
    case GRPC_STATUS_CANCELLED:
        return SM_ECANCELLED;
    case GRPC_STATUS_INVALID_ARGUMENT:
        return SM_EINVAL;
    case GRPC_STATUS_DEADLINE_EXCEEDED:
        return SM_ETIMEOUT;
    case GRPC_STATUS_NOT_FOUND:
        return SM_ENOTFOUND;
    case GRPC_STATUS_ALREADY_EXISTS:
        return SM_EEXIST;
    case GRPC_STATUS_PERMISSION_DENIED:
        return SM_EPERM;
    case GRPC_STATUS_RESOURCE_EXHAUSTED:
        return SM_ERESOURCE;
    case GRPC_STATUS_FAILED_PRECONDITION:
    case GRPC_STATUS_ABORTED:
        return SM_EPRECONDITION;
    case GRPC_STATUS_OUT_OF_RANGE:
        return SM_EOVERFLOW;
    case GRPC_STATUS_UNIMPLEMENTED:
        return SM_EUNIMPLEMENTED;
    case GRPC_STATUS_UNAVAILABLE:
        return SM_EUNAVAILABLE;
    case GRPC_STATUS_DATA_LOSS:
        return SM_EDATALOSS;
    case GRPC_STATUS_UNAUTHENTICATED:
        return SM_EAUTH;
    default: /* UNKNOWN, INTERNAL, anything new */
        return SM_EINTERNAL;
    }
}

const char *sm_rpc_status_name(int status)
{
    static const char *const names[] = {
        "OK",
        "CANCELLED",
        "UNKNOWN",
        "INVALID_ARGUMENT",
        "DEADLINE_EXCEEDED",
        "NOT_FOUND",
        "ALREADY_EXISTS",
        "PERMISSION_DENIED",
        "RESOURCE_EXHAUSTED",
        "FAILED_PRECONDITION",
        "ABORTED",
        "OUT_OF_RANGE",
        "UNIMPLEMENTED",
        "INTERNAL",
        "UNAVAILABLE",
        "DATA_LOSS",
        "UNAUTHENTICATED",
    };
    if (status < 0 || (size_t)status >= sizeof names / sizeof names[0])
        return "UNKNOWN";
    return names[status];
}

void sm_rpc_msg_free(ProtobufCMessage *msg)
{
    if (msg)
        protobuf_c_message_free_unpacked(msg, NULL);
}

void sm_rpc_fill_args(grpc_arg *args, size_t *n)
{
    size_t i = 0;
    args[i].type = GRPC_ARG_INTEGER;
    args[i].key = GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH;
    args[i++].value.integer = SM_RPC_MAX_MSG;
    args[i].type = GRPC_ARG_INTEGER;
    args[i].key = GRPC_ARG_MAX_SEND_MESSAGE_LENGTH;
    args[i++].value.integer = SM_RPC_MAX_MSG;
    *n = i;
}

gpr_timespec sm_rpc_deadline(int ms)
{
    return gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC), gpr_time_from_millis(ms, GPR_TIMESPAN));
}
