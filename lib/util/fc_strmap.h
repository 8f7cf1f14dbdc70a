/*
 * fc_strmap.h - string -> index map (open addressing, FNV-1a), for key
 * lookups over models with tens of thousands of tensors, where linear scans
 * turn quadratic.
 *
 * Invariants: the map stores borrowed key pointers (the caller keeps them
 * alive and unchanged) and size_t values; load factor <= 1/2; lookups are
 * O(1) expected.  Not thread-safe for writes.
 */
#ifndef FC_STRMAP_H
#define FC_STRMAP_H

#include <stddef.h>

struct fc_strmap {
    const char **keys;
    size_t *vals;
    size_t cap; /* power of two, or 0 */
    size_t n;
};

#define FC_STRMAP_INIT                                                                             \
    {                                                                                              \
        NULL, NULL, 0, 0                                                                           \
    }

/*
 * fc_strmap_put() - map key to val.  When key is already present its value
 * is left unchanged and *existing (if not NULL) receives it; returns 1 then,
 * 0 after inserting, FC_ENOMEM on allocation failure.
 */
int fc_strmap_put(struct fc_strmap *m, const char *key, size_t val, size_t *existing);

/* fc_strmap_get() - 1 and *val when present, else 0. */
int fc_strmap_get(const struct fc_strmap *m, const char *key, size_t *val);

void fc_strmap_release(struct fc_strmap *m);

#endif
