/* suite_main: the main() of a unit suite program, shared by the Check
 * suites that only run one suite and report (tests/test_server_*.c). */
#ifndef SM_SUITE_MAIN_H
#define SM_SUITE_MAIN_H

#include <check.h>
#include <stdlib.h>

/* Runs every test of s (takes it) and returns the
 * program's exit status: EXIT_SUCCESS when none failed. */
static inline int suite_main(Suite *s)
{
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

#endif
