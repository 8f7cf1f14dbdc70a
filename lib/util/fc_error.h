/*
 * fc_error.h - error codes and the per-thread error message.
 *
 * Invariants: every fallible function in lib/, convert/ and kernels/ returns
 * FC_OK (0) or a negative enum fc_err.  The message describing a failure is
 * set exactly once, where the failure is detected, with fc_error_set(); callers
 * propagate the code with FC_TRY()/FC_TRY_GOTO() and never rewrite the message.
 * The message is stored per thread, so worker threads do not clobber each other.
 */
#ifndef FC_ERROR_H
#define FC_ERROR_H

#include <stddef.h>

enum fc_err {
    FC_OK = 0,
    FC_ERROR = -1,    /* generic failure */
    FC_ENOMEM = -2,   /* allocation failed or a size cap was exceeded */
    FC_EIO = -3,      /* read/write/open failed */
    FC_ENOENT = -4,   /* a named file, key or record does not exist */
    FC_EFORMAT = -5,  /* valid input we do not support */
    FC_ECORRUPT = -6, /* input violates its own format */
    FC_EINVAL = -7,   /* bad argument or impossible plan */
    FC_ECUDA = -8,    /* CUDA runtime failure */
    FC_ENCCL = -9,    /* NCCL failure */
    FC_ENOTSUP = -10  /* feature not built in */
};
typedef enum fc_err fc_err;

/*
 * fc_error_set() - record the message for the current failure and return code.
 *
 * The message is formatted with printf semantics and truncated to a fixed
 * buffer.  Returns `code` unchanged so that `return fc_error_set(...)` works.
 * It keeps every message on one line: control bytes and bytes that are not
 * UTF-8 (from file names, keys and rules) appear as \xNN.
 */
int fc_error_set(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/*
 * fc_utf8_seq_len() - length (1..4) of the valid UTF-8 character at p[0, n),
 * or 0 when none starts there (n >= 1).  The rules of Rust's str::from_utf8
 * (no overlongs, <= U+10FFFF); lone surrogates (ED A0..BF) pass only with
 * `surrogates`, as Python's pickle reads strings (surrogatepass).
 */
size_t fc_utf8_seq_len(const unsigned char *p, size_t n, int surrogates);

/* fc_utf8_invalid_at() - offset of the first byte of p[0, n) that is not valid UTF-8, or n. */
size_t fc_utf8_invalid_at(const unsigned char *p, size_t n, int surrogates);

/* fc_error_last() - the last message set on this thread ("" if none). */
const char *fc_error_last(void);

/* fc_error_clear() - forget the message of this thread. */
void fc_error_clear(void);

/* fc_err_name() - a short constant name for a code ("FC_ECORRUPT"). */
const char *fc_err_name(int code);

/*
 * fc_error_trace() - debug trace of an error unwinding through FC_TRY.
 * Prints "file:line -> CODE" to stderr when FSDPCONV_DEBUG is set to a
 * non-zero value; otherwise does nothing.  Returns code.
 */
int fc_error_trace(int code, const char *file, int line);

#define FC_TRY(expr)                                                                               \
    do {                                                                                           \
        const int fc_rc_ = (expr);                                                                 \
        if (fc_rc_ < 0)                                                                            \
            return fc_error_trace(fc_rc_, __FILE__, __LINE__);                                     \
    } while (0)

#define FC_TRY_GOTO(expr, rc, label)                                                               \
    do {                                                                                           \
        (rc) = (expr);                                                                             \
        if ((rc) < 0) {                                                                            \
            fc_error_trace((rc), __FILE__, __LINE__);                                              \
            goto label;                                                                            \
        }                                                                                          \
    } while (0)

#endif
