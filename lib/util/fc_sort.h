/*
 * fc_sort.h - stable sort of an index array with a context comparator.
 *
 * C11's qsort has no context argument (so comparators would read globals)
 * and leaves the order of equal elements unspecified (plans and reports must
 * be deterministic).  fc_sort_idx() is a merge sort: O(n log n), stable, one
 * scratch array of n indices.
 */
#ifndef FC_SORT_H
#define FC_SORT_H

#include <stddef.h>

/* <0, 0 or >0 as element a sorts before, with or after element b. */
typedef int (*fc_sort_cmp_fn)(const void *ctx, size_t a, size_t b);

/* fc_sort_idx() - sort v[0..n) with cmp(ctx, ...).  Returns FC_OK or FC_ENOMEM. */
int fc_sort_idx(size_t *v, size_t n, fc_sort_cmp_fn cmp, const void *ctx);

#endif
