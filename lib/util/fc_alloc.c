/*
 * fc_alloc.c - the allocator of fc_alloc.h: overflow-checked element counts
 * and the fail-the-Nth-allocation hook the unit tests walk failure paths with.
 */
#include "fc_alloc.h"

#include <stdlib.h>
#include <string.h>

#include "fc_checked.h"

static unsigned long fc_alloc_countdown;
static int fc_alloc_fired;

void fc_alloc_fail_at(unsigned long n)
{
    fc_alloc_countdown = n;
    fc_alloc_fired = 0;
}

int fc_alloc_failed(void)
{
    return fc_alloc_fired;
}

/* Returns 1 when the test hook says this allocation must fail. */
static int fc_alloc_should_fail(void)
{
    if (fc_alloc_countdown == 0)
        return 0;
    if (--fc_alloc_countdown == 0) {
        fc_alloc_fired = 1;
        return 1;
    }
    return 0;
}

void *fc_malloc(size_t nbytes)
{
    if (fc_alloc_should_fail())
        return NULL;
    return malloc(nbytes == 0 ? 1 : nbytes);
}

void *fc_calloc(size_t nelem, size_t elem_size)
{
    size_t total;
    if (fc_mul_size(nelem, elem_size, &total) < 0)
        return NULL;
    if (fc_alloc_should_fail())
        return NULL;
    return calloc(total == 0 ? 1 : total, 1);
}

void *fc_reallocarray(void *p, size_t nelem, size_t elem_size)
{
    size_t total;
    if (fc_mul_size(nelem, elem_size, &total) < 0)
        return NULL;
    if (fc_alloc_should_fail())
        return NULL;
    return realloc(p, total == 0 ? 1 : total);
}

void fc_free(void *p)
{
    free(p);
}

char *fc_strndup(const char *s, size_t n)
{
    const size_t len = strnlen(s, n);
    char *d = fc_malloc(len + 1);
    if (d == NULL)
        return NULL;
    memcpy(d, s, len);
    d[len] = '\0';
    return d;
}

char *fc_strdup(const char *s)
{
    return fc_strndup(s, strlen(s));
}
