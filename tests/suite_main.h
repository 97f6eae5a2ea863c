/* suite_main: how the Check suites are put together and run: SUITE_CASE,
 * a test case of a suite as its fixture and a list of its tests, and
 * suite_run, which runs a suite and reports. */
#ifndef SM_SUITE_MAIN_H
#define SM_SUITE_MAIN_H

#include <check.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* One row of a test case's list: a test (as START_TEST names it), run once
 * (n 0) or as a loop test for _i = 0 .. n-1. */
typedef struct {
    const TTest *test;
    int n;
} suite_test;

/* A test case's fixture: setup and teardown around each test (checked 1)
 * or once around the whole case (checked 0), as Check's
 * tcase_add_checked_fixture and tcase_add_unchecked_fixture. */
typedef struct {
    SFun setup, teardown;
    int checked;
} suite_fixture;

#define SUITE_CHECKED(setup, teardown)   (&(const suite_fixture){(setup), (teardown), 1})
#define SUITE_UNCHECKED(setup, teardown) (&(const suite_fixture){(setup), (teardown), 0})

/* Adds to s a test case named tcase with a timeout of timeout seconds (0:
 * Check's default), the fixture fx (NULL: none) and the n tests, in order;
 * with SM_TEST_ONLY=NAME set, only the test of that name. Returns s. */
static inline Suite *suite_add_case(Suite *s, const char *tcase, int timeout,
                                    const suite_fixture *fx, const suite_test *tests, size_t n)
{
    const char *only = getenv("SM_TEST_ONLY");
    TCase *tc = tcase_create(tcase);
    if (timeout)
        tcase_set_timeout(tc, timeout);
    if (fx && fx->checked)
        tcase_add_checked_fixture(tc, fx->setup, fx->teardown);
    else if (fx)
        tcase_add_unchecked_fixture(tc, fx->setup, fx->teardown);
    for (size_t i = 0; i < n; i++) {
        if (only && *only && strcmp(only, tests[i].test->name) != 0)
            continue;
        if (tests[i].n)
            tcase_add_loop_test(tc, tests[i].test, 0, tests[i].n);
        else
            tcase_add_test(tc, tests[i].test);
    }
    suite_add_tcase(s, tc);
    return s;
}

/* SUITE_CASE(s, "tcase", timeout, fixture, {test_a}, {test_b, 4}, ...):
 * suite_add_case with the rows listed (test_b a loop test of 4). */
#define SUITE_CASE(s, tcase, timeout, fixture, ...)                                                \
    suite_add_case((s), (tcase), (timeout), (fixture), (const suite_test[]){__VA_ARGS__},          \
                   sizeof((const suite_test[]){__VA_ARGS__}) / sizeof(suite_test))

/* Runs every test of s (takes it), each in a child process or, with
 * nofork, all in this one (for suites whose processes or gRPC must not
 * fork), printing as CK_VERBOSITY says (default: failures and a summary);
 * returns the program's exit status: EXIT_SUCCESS when none failed. */
static inline int suite_run(Suite *s, int nofork)
{
    SRunner *sr = srunner_create(s);
    if (nofork)
        srunner_set_fork_status(sr, CK_NOFORK);
    srunner_run_all(sr, CK_ENV);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

/* suite_run of s with Check's fork mode (CK_FORK unless set otherwise). */
static inline int suite_main(Suite *s)
{
    return suite_run(s, 0);
}

#endif
