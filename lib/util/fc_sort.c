/*
 * fc_sort.c - the stable merge sort of index arrays with a context comparator
 * (fc_sort.h says why not qsort).
 */
#include "fc_sort.h"

#include <string.h>

#include "fc_alloc.h"
#include "fc_error.h"

static void fc_msort(size_t *v, size_t *tmp, size_t n, fc_sort_cmp_fn cmp, const void *ctx)
{
    if (n < 2)
        return;
    const size_t half = n / 2;
    fc_msort(v, tmp, half, cmp, ctx);
    fc_msort(v + half, tmp, n - half, cmp, ctx);
    size_t i = 0, j = half, k = 0;
    while (i < half && j < n)
        tmp[k++] = cmp(ctx, v[j], v[i]) < 0 ? v[j++] : v[i++];
    while (i < half)
        tmp[k++] = v[i++];
    while (j < n)
        tmp[k++] = v[j++];
    memcpy(v, tmp, n * sizeof(*v));
}

int fc_sort_idx(size_t *v, size_t n, fc_sort_cmp_fn cmp, const void *ctx)
{
    if (n < 2)
        return FC_OK;
    size_t *tmp = fc_calloc(n, sizeof(*tmp));
    if (tmp == NULL)
        return fc_error_set(FC_ENOMEM, "out of memory sorting %zu elements", n);
    fc_msort(v, tmp, n, cmp, ctx);
    fc_free(tmp);
    return FC_OK;
}
