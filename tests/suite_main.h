/* suite_main: the main() of a unit suite program, shared by the Check
 * suites that only run one suite and report (tests/test_server_*.c), and
 * TCASE_ADD_TESTS, which every suite uses to list its tests. */
#ifndef SM_SUITE_MAIN_H
#define SM_SUITE_MAIN_H

#include <check.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* Adds the n tests (TTest pointers, as START_TEST names them) to tc, in
 * order; with SM_TEST_ONLY=NAME set, only the test of that name (for
 * debugging one test). */
static inline void suite_add_tests(TCase *tc, const TTest *const *tests, size_t n)
{
    const char *only = getenv("SM_TEST_ONLY");
    for (size_t i = 0; i < n; i++)
        if (!only || !*only || strcmp(only, tests[i]->name) == 0)
            tcase_add_test(tc, tests[i]);
}

/* A suite named name holding one test case named tcase (in *tc) with a
 * timeout of timeout seconds (0: Check's default). */
static inline Suite *suite_create_one(const char *name, const char *tcase, int timeout, TCase **tc)
{
    Suite *s = suite_create(name);
    *tc = tcase_create(tcase);
    if (timeout)
        tcase_set_timeout(*tc, timeout);
    suite_add_tcase(s, *tc);
    return s;
}

/* TCASE_ADD_TESTS(tc, test_a, test_b, ...): tcase_add_test of each. */
#define TCASE_ADD_TESTS(tc, ...)                                                                   \
    suite_add_tests((tc), (const TTest *const[]){__VA_ARGS__},                                     \
                    sizeof((const TTest *const[]){__VA_ARGS__}) / sizeof(const TTest *))

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
