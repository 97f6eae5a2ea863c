/* harness_proc: processes for the test suites, beside the clusters of
 * tests/harness.c: children that die with the suite (PR_SET_PDEATHSIG),
 * programs started with their output in a log, shmap-worker processes
 * started against a coordinator address (a fake one served by the suite or
 * a real one), and stops that report how a process ended. Helpers that
 * assert do so with Check. Not thread-safe. */
#ifndef HARNESS_PROC_H
#define HARNESS_PROC_H

#include <sys/types.h>

/* $SHMAP_WORKER, else ../worker/shmap-worker (the build's tests/ directory
 * is the working directory of ctest). */
const char *harness_worker_bin(void);

/* Flags of harness_spawn_log. */
enum {
    HARNESS_SPAWN_PGROUP = 1, /* a process group of its own */
    HARNESS_SPAWN_APPEND = 2, /* append to the log (else truncate it) */
    HARNESS_SPAWN_PATH = 4,   /* argv[0] is looked up in PATH */
};

/* posix_spawn of argv (NULL-terminated) with stdin from /dev/null and
 * stdout and stderr into log (NULL: /dev/null), as flags say. Safe after
 * gRPC is initialised (no fork handlers run). Returns the pid, or -1 if it
 * could not start. */
pid_t harness_spawn_log(char *const *argv, const char *log, int flags);

/* Forks and execs argv (NULL-terminated; argv[0] a path) with
 * PR_SET_PDEATHSIG, so the child dies with this process even if a test
 * aborts; with quiet its stdout and stderr go to /dev/null. Asserts the fork
 * worked; returns the pid (an exec failure exits 127). */
pid_t harness_spawn_child(const char *const *argv, int quiet);

/* Starts `shmap-worker --listen 127.0.0.1:0 --coordinator coord --devices
 * ndevices --log-level L` (L is debug when SM_TEST_VERBOSE is set, else
 * warn) plus extra (NULL-terminated; NULL: none). The worker gets
 * PR_SET_PDEATHSIG, so it dies with this process even if a test aborts.
 * Asserts that the binary exists and the fork worked; returns its pid. */
pid_t harness_worker_spawn(const char *coord, int ndevices, const char *const *extra);

/* Waits at most ms for the child pid to exit; returns its wait status, or
 * -1 if it still runs. */
int harness_wait_exit(pid_t pid, int ms);

/* SIGTERM to the child pid, waits at most ms, then SIGKILL. Returns the wait
 * status of an exit within ms, or -1 when SIGKILL was needed. */
int harness_stop_pid(pid_t pid, int ms);

#endif
