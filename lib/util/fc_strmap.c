/*
 * fc_strmap.c - the open-addressing string -> index map of fc_strmap.h
 * (FNV-1a, linear probing, load factor at most 1/2).
 */
#include "fc_strmap.h"

#include <stdint.h>
#include <string.h>

#include "fc_alloc.h"
#include "fc_error.h"

static uint64_t fc_strmap_hash(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s != '\0'; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static size_t fc_strmap_slot(const struct fc_strmap *m, const char *key, int *found)
{
    size_t i = (size_t)fc_strmap_hash(key) & (m->cap - 1);
    while (m->keys[i] != NULL) {
        if (strcmp(m->keys[i], key) == 0) {
            *found = 1;
            return i;
        }
        i = (i + 1) & (m->cap - 1);
    }
    *found = 0;
    return i;
}

static int fc_strmap_grow(struct fc_strmap *m)
{
    const size_t cap = m->cap == 0 ? 64 : m->cap * 2;
    struct fc_strmap g = {fc_calloc(cap, sizeof(*g.keys)), fc_calloc(cap, sizeof(*g.vals)), cap, 0};
    if (g.keys == NULL || g.vals == NULL) {
        fc_free(g.keys);
        fc_free(g.vals);
        return fc_error_set(FC_ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < m->cap; i++) {
        if (m->keys[i] == NULL)
            continue;
        int found;
        const size_t s = fc_strmap_slot(&g, m->keys[i], &found);
        g.keys[s] = m->keys[i];
        g.vals[s] = m->vals[i];
        g.n++;
    }
    fc_strmap_release(m);
    *m = g;
    return FC_OK;
}

int fc_strmap_put(struct fc_strmap *m, const char *key, size_t val, size_t *existing)
{
    int found;
    if ((m->n + 1) * 2 > m->cap)
        FC_TRY(fc_strmap_grow(m));
    const size_t s = fc_strmap_slot(m, key, &found);
    if (found) {
        if (existing != NULL)
            *existing = m->vals[s];
        return 1;
    }
    m->keys[s] = key;
    m->vals[s] = val;
    m->n++;
    return 0;
}

int fc_strmap_get(const struct fc_strmap *m, const char *key, size_t *val)
{
    int found;
    if (m->cap == 0)
        return 0;
    const size_t s = fc_strmap_slot(m, key, &found);
    if (found && val != NULL)
        *val = m->vals[s];
    return found;
}

void fc_strmap_release(struct fc_strmap *m)
{
    fc_free(m->keys);
    fc_free(m->vals);
    m->keys = NULL;
    m->vals = NULL;
    m->cap = 0;
    m->n = 0;
}
