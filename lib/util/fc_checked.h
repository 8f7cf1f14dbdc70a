/*
 * fc_checked.h - overflow-checked size arithmetic.
 *
 * Every size derived from untrusted input (shape products, offsets, lengths)
 * goes through these helpers.  They return 0 on success and -1 on overflow,
 * leaving *out unspecified on overflow; callers turn -1 into a FC_ECORRUPT or
 * FC_EINVAL message that names the input.
 */
#ifndef FC_CHECKED_H
#define FC_CHECKED_H

#include <stddef.h>
#include <stdint.h>

static inline int fc_mul_size(size_t a, size_t b, size_t *out)
{
    return __builtin_mul_overflow(a, b, out) ? -1 : 0;
}

static inline int fc_add_size(size_t a, size_t b, size_t *out)
{
    return __builtin_add_overflow(a, b, out) ? -1 : 0;
}

static inline int fc_mul_u64(uint64_t a, uint64_t b, uint64_t *out)
{
    return __builtin_mul_overflow(a, b, out) ? -1 : 0;
}

static inline int fc_add_u64(uint64_t a, uint64_t b, uint64_t *out)
{
    return __builtin_add_overflow(a, b, out) ? -1 : 0;
}

static inline int fc_mul_i64(int64_t a, int64_t b, int64_t *out)
{
    return __builtin_mul_overflow(a, b, out) ? -1 : 0;
}

static inline int fc_add_i64(int64_t a, int64_t b, int64_t *out)
{
    return __builtin_add_overflow(a, b, out) ? -1 : 0;
}

#endif
