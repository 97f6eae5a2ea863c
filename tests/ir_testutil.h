/* Helpers shared by the Check suites that parse programs (tests/test_ir.c,
 * tests/test_exec*.c). Static inline; helpers that assert do so with
 * Check. */
#ifndef SM_IR_TESTUTIL_H
#define SM_IR_TESTUTIL_H

#include <check.h>

#include "sm_ir.h"

/* Parses text (as "t.shmap") and verifies it (the replication check on
 * with check_vma); fails the test with the message and the text on an
 * error. The caller frees the program (sm_program_free). */
static inline sm_program *parse_ok(const char *text, int check_vma)
{
    sm_program *p = NULL;
    char err[1024] = "";
    sm_err e = sm_program_parse(text, "t.shmap", &p, err, sizeof err);
    ck_assert_msg(e == SM_OK, "parse failed: %s\n%s", err, text);
    e = sm_program_verify(p, check_vma, err, sizeof err);
    ck_assert_msg(e == SM_OK, "verify failed: %s\n%s", err, text);
    return p;
}

#endif
