/*
 * fc_test.h - helpers shared by the cmocka unit tests.
 *
 * fc_test_fixture(rel) gives the path of a file under fixtures/ (from
 * $FC_FIXTURES, else the source tree's fixtures/ compiled in);
 * fc_test_tmpdir() makes a scratch directory removed by fc_test_rmdir();
 * assert_fc_ok(expr) prints fc_error_last() when expr fails.
 */
#ifndef FC_TEST_H
#define FC_TEST_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "fc_error.h"
#include "fc_io.h"

#ifndef FC_SOURCE_DIR
#define FC_SOURCE_DIR "."
#endif

static inline const char *fc_test_fixture(const char *rel)
{
    static char path[4096];
    const char *root = getenv("FC_FIXTURES");
    if (root != NULL && root[0] != '\0')
        snprintf(path, sizeof(path), "%s/%s", root, rel);
    else
        snprintf(path, sizeof(path), "%s/fixtures/%s", FC_SOURCE_DIR, rel);
    return path;
}

static inline char *fc_test_tmpdir(void)
{
    static char tmpl[64];
    snprintf(tmpl, sizeof(tmpl), "/tmp/fc_test_XXXXXX");
    return mkdtemp(tmpl);
}

static inline void fc_test_rmdir(const char *dir)
{
    if (dir != NULL)
        (void)fc_remove_tree(dir);
}

#define assert_fc_ok(expr)                                                                         \
    do {                                                                                           \
        const int fc_t_rc_ = (expr);                                                               \
        if (fc_t_rc_ != 0)                                                                         \
            print_error("%s failed: %s: %s\n", #expr, fc_err_name(fc_t_rc_), fc_error_last());     \
        assert_int_equal(fc_t_rc_, 0);                                                             \
    } while (0)

/* Assert that expr fails with code and that the message contains needle. */
#define assert_fc_fails(expr, code, needle)                                                        \
    do {                                                                                           \
        const int fc_t_rc_ = (expr);                                                               \
        if (fc_t_rc_ != (code) || strstr(fc_error_last(), (needle)) == NULL)                       \
            print_error("%s: got %s '%s', want %s containing '%s'\n", #expr,                       \
                        fc_err_name(fc_t_rc_), fc_error_last(), fc_err_name(code), (needle));      \
        assert_int_equal(fc_t_rc_, (code));                                                        \
        assert_non_null(strstr(fc_error_last(), (needle)));                                        \
    } while (0)

#endif
