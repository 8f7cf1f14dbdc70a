/*
 * fc_alloc.h - the only way lib/, convert/ and kernels/ allocate heap memory.
 *
 * Element-count APIs with overflow checks (NCCL's ncclCalloc idea) and a test
 * hook that makes the Nth allocation from now fail, so unit tests can walk every
 * allocation-failure path of a parser and check that nothing leaks (run them
 * under ASan).  The functions do not set an error message: callers report
 * FC_ENOMEM with their own context.
 */
#ifndef FC_ALLOC_H
#define FC_ALLOC_H

#include <stddef.h>

void *fc_malloc(size_t nbytes);                  /* NULL on failure */
void *fc_calloc(size_t nelem, size_t elem_size); /* zeroed; NULL on overflow/failure */
void *fc_reallocarray(void *p, size_t nelem, size_t elem_size); /* p kept on failure */
void fc_free(void *p);                                          /* accepts NULL */
char *fc_strdup(const char *s);                                 /* NULL on failure */
char *fc_strndup(const char *s, size_t n); /* copies at most n bytes, NUL-terminates */

/*
 * fc_alloc_fail_at() - test hook: the n-th allocation after this call fails
 * (n = 1 is the next one); 0 disables.  Not thread-safe; tests only.
 */
void fc_alloc_fail_at(unsigned long n);

/* fc_alloc_failed() - whether the hook has fired since it was armed. */
int fc_alloc_failed(void);

#endif
