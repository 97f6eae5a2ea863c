/* harness_proc: children, logged programs and worker processes for the
 * test suites. */
#include "harness_proc.h"

#include <check.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

extern char **environ;

pid_t harness_spawn_log(char *const *argv, const char *log, int flags)
{
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t at;
    int trunc = flags & HARNESS_SPAWN_APPEND ? O_APPEND : O_TRUNC;
    pid_t pid = -1;
    int rc;

    posix_spawn_file_actions_init(&fa);
    posix_spawnattr_init(&at);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, log ? log : "/dev/null", O_WRONLY | O_CREAT | trunc,
                                     0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    if (flags & HARNESS_SPAWN_PGROUP) {
        posix_spawnattr_setpgroup(&at, 0);
        posix_spawnattr_setflags(&at, POSIX_SPAWN_SETPGROUP);
    }
    if (flags & HARNESS_SPAWN_PATH)
        rc = posix_spawnp(&pid, argv[0], &fa, &at, argv, environ);
    else
        rc = posix_spawn(&pid, argv[0], &fa, &at, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&at);
    return rc == 0 ? pid : -1;
}

const char *harness_worker_bin(void)
{
    const char *b = getenv("SHMAP_WORKER");
    return b && *b ? b : "../worker/shmap-worker";
}

pid_t harness_spawn_child(const char *const *argv, int quiet)
{
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (quiet) {
            int fd = open("/dev/null", O_WRONLY); /* async-signal-safe calls only */
            if (fd < 0 || dup2(fd, 1) < 0 || dup2(fd, 2) < 0)
                _exit(126);
        }
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    return pid;
}

pid_t harness_worker_spawn(const char *coord, int ndevices, const char *const *extra)
{
    char nd[16];
    const char *argv[40];
    int n = 0;
    snprintf(nd, sizeof nd, "%d", ndevices);
    argv[n++] = harness_worker_bin();
    argv[n++] = "--listen";
    argv[n++] = "127.0.0.1:0";
    argv[n++] = "--coordinator";
    argv[n++] = coord;
    argv[n++] = "--devices";
    argv[n++] = nd;
    argv[n++] = "--log-level";
    argv[n++] = getenv("SM_TEST_VERBOSE") ? "debug" : "warn";
    for (int k = 0; extra && extra[k] && n < 39; k++)
        argv[n++] = extra[k];
    argv[n] = NULL;
    ck_assert_msg(access(argv[0], X_OK) == 0, "worker binary %s not found (set SHMAP_WORKER)",
                  argv[0]);
    return harness_spawn_child(argv, 0);
}

int harness_wait_exit(pid_t pid, int ms)
{
    int status = 0;
    for (int t = 0; t <= ms / 20; t++) {
        if (waitpid(pid, &status, WNOHANG) == pid)
            return status;
        harness_sleep_ms(20);
    }
    return -1;
}

int harness_stop_pid(pid_t pid, int ms)
{
    kill(pid, SIGTERM);
    int status = harness_wait_exit(pid, ms);
    if (status == -1) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
    }
    return status;
}
