/*
 * diff.c - compare two checkpoints key by key, streaming tensor data.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fc_alloc.h"
#include "fc_buf.h"
#include "fc_convert.h"
#include "fc_error.h"
#include "fc_regex.h"
#include "fc_kernels.h"
#include "fc_pickle.h"

void fc_diff_result_release(struct fc_diff_result *res)
{
    for (size_t i = 0; i < res->nitems; i++) {
        fc_free(res->items[i].key);
        fc_free(res->items[i].detail);
    }
    fc_free(res->items);
    fc_source_free(res->src_a);
    fc_source_free(res->src_b);
    memset(res, 0, sizeof(*res));
}

static int fc_diff_add(struct fc_diff_result *res, const char *key, enum fc_diff_kind kind,
                       const char *detail, uint64_t ndiff, uint64_t numel, double maxabs)
{
    struct fc_diff_item *it = fc_reallocarray(res->items, res->nitems + 1, sizeof(*it));
    if (it == NULL)
        return fc_error_set(FC_ENOMEM, "out of memory");
    res->items = it;
    it[res->nitems] =
        (struct fc_diff_item){fc_strdup(key), kind, fc_strdup(detail), ndiff, numel, maxabs};
    if (it[res->nitems].key == NULL || it[res->nitems].detail == NULL) {
        fc_free(it[res->nitems].key);
        fc_free(it[res->nitems].detail);
        return fc_error_set(FC_ENOMEM, "out of memory");
    }
    res->nitems++;
    return FC_OK;
}

struct fc_keyref {
    const char *key;
    size_t index;
};

static int fc_cmp_keyref(const void *x, const void *y)
{
    return strcmp(((const struct fc_keyref *)x)->key, ((const struct fc_keyref *)y)->key);
}

static struct fc_keyref *fc_sorted_keys(const struct fc_source *s)
{
    struct fc_keyref *k = fc_calloc(s->nentries + 1, sizeof(*k));
    if (k == NULL)
        return NULL;
    for (size_t i = 0; i < s->nentries; i++)
        k[i] = (struct fc_keyref){s->entries[i].key, i};
    qsort(k, s->nentries, sizeof(*k), fc_cmp_keyref);
    return k;
}

static int fc_repr_of(const struct fc_pv *v, struct fc_buf *b)
{
    fc_buf_clear(b);
    FC_TRY(fc_pv_repr(b, v, (size_t)1 << 20));
    return fc_buf_putc(b, '\0');
}

/* Compare two tensors of the same shape row slab by row slab. */
static int fc_diff_tensors(const struct fc_source *sa, const struct fc_entry *ea,
                           const struct fc_source *sb, const struct fc_entry *eb, uint64_t budget,
                           struct fc_diff_result *res)
{
    const int ndim = ea->t.ndim;
    const size_t za = fc_dtype_size(ea->t.dtype), zb = fc_dtype_size(eb->t.dtype);
    const struct fc_dtype_info *ia = fc_dtype_info(ea->t.dtype), *ib = fc_dtype_info(eb->t.dtype);
    const int floating = ia->is_floating && ib->is_floating;
    const int same_dtype = ea->t.dtype == eb->t.dtype;
    int64_t row = 1, numel = 0;
    for (int d = 1; d < ndim; d++)
        row *= ea->t.shape[d];
    (void)fc_shape_numel(ea->t.shape, ndim, &numel);
    const int64_t rows = ndim == 0 ? 1 : ea->t.shape[0];
    const uint64_t per_row = (uint64_t)row * (za + zb + (floating ? 16 : 0));
    /* A budget larger than the tensor (--max-memory 1TB) buys one slab of the whole tensor. */
    const uint64_t fit = per_row == 0 ? (uint64_t)rows : budget / per_row;
    const int64_t step = fit < 1 ? 1 : fit > (uint64_t)rows ? (rows < 1 ? 1 : rows) : (int64_t)fit;
    const size_t cap = (size_t)((ndim == 0 ? 1 : step) * row);
    unsigned char *a = fc_malloc(cap * za + 1), *b = fc_malloc(cap * zb + 1);
    double *fa = floating ? fc_malloc(cap * sizeof(double) + 1) : NULL;
    double *fb = floating ? fc_malloc(cap * sizeof(double) + 1) : NULL;
    uint64_t ndiff = 0;
    double maxabs = 0;
    int rc = FC_OK;
    int64_t off[FC_MAX_DIMS] = {0}, size[FC_MAX_DIMS];
    if (a == NULL || b == NULL || (floating && (fa == NULL || fb == NULL))) {
        rc = fc_error_set(FC_ENOMEM, "out of memory comparing '%s'", ea->key);
        goto done;
    }
    memcpy(size, ea->t.shape, sizeof(size));
    for (int64_t r = 0; r < rows && row > 0; r += step) {
        const int64_t n = rows - r < step ? rows - r : step;
        const int64_t nelem = ndim == 0 ? 1 : n * row;
        if (ndim > 0) {
            off[0] = r;
            size[0] = n;
        }
        FC_TRY_GOTO(fc_source_read_box(sa, ea, off, size, a), rc, done);
        FC_TRY_GOTO(fc_source_read_box(sb, eb, off, size, b), rc, done);
        if (same_dtype && memcmp(a, b, (size_t)nelem * za) == 0)
            continue;
        if (floating) {
            FC_TRY_GOTO(fc_kern_cast(FC_DTYPE_FLOAT64, fa, ea->t.dtype, a, nelem), rc, done);
            FC_TRY_GOTO(fc_kern_cast(FC_DTYPE_FLOAT64, fb, eb->t.dtype, b, nelem), rc, done);
            for (int64_t i = 0; i < nelem; i++) {
                const int nan_a = isnan(fa[i]), nan_b = isnan(fb[i]);
                if (fa[i] == fb[i] || (nan_a && nan_b)) {
                    /* Same value; a bit difference (NaN payload, -0) still counts below. */
                    if (same_dtype && memcmp(a + (size_t)i * za, b + (size_t)i * zb, za) != 0)
                        ndiff++;
                    continue;
                }
                ndiff++;
                const double d = nan_a || nan_b ? INFINITY : fabs(fa[i] - fb[i]);
                maxabs = d > maxabs ? d : maxabs;
            }
        } else if (same_dtype) {
            for (int64_t i = 0; i < nelem; i++)
                ndiff += memcmp(a + (size_t)i * za, b + (size_t)i * za, za) != 0;
        } else {
            ndiff += (uint64_t)nelem; /* different non-float dtypes: not comparable */
        }
    }
    if (!same_dtype) {
        char detail[128];
        snprintf(detail, sizeof(detail), "%s vs %s", fc_dtype_name(ea->t.dtype),
                 fc_dtype_name(eb->t.dtype));
        rc = fc_diff_add(res, ea->key, FC_DIFF_DTYPE, detail, ndiff, (uint64_t)numel,
                         floating ? maxabs : NAN);
    } else if (ndiff > 0) {
        char detail[128];
        snprintf(detail, sizeof(detail), "%llu of %lld elements differ", (unsigned long long)ndiff,
                 (long long)numel);
        rc = fc_diff_add(res, ea->key, FC_DIFF_TENSOR_DATA, detail, ndiff, (uint64_t)numel,
                         floating ? maxabs : NAN);
    }
done:
    fc_free(a);
    fc_free(b);
    fc_free(fa);
    fc_free(fb);
    return rc;
}

static int fc_diff_pair(const struct fc_diff_opts *o, struct fc_diff_result *res,
                        const struct fc_entry *ea, const struct fc_entry *eb, struct fc_buf *ra,
                        struct fc_buf *rb)
{
    char detail[512];
    if (ea->kind != eb->kind)
        return fc_diff_add(res, ea->key, FC_DIFF_KIND,
                           ea->kind == FC_ENTRY_TENSOR ? "tensor vs value" : "value vs tensor", 0,
                           0, NAN);
    if (ea->kind == FC_ENTRY_VALUE && (ea->opaque != NULL || eb->opaque != NULL)) {
        /* Values torch loads only with weights_only=False are never unpickled: their
         * stored bytes must be equal. */
        fc_buf_clear(ra);
        fc_buf_clear(rb);
        FC_TRY(fc_source_value_blob(res->src_a, ea, ra));
        FC_TRY(fc_source_value_blob(res->src_b, eb, rb));
        if (ea->opaque != NULL && eb->opaque != NULL && ra->len == rb->len &&
            memcmp(ra->data, rb->data, ra->len) == 0)
            return FC_OK;
        snprintf(detail, sizeof(detail), "opaque values: %s%zu stored bytes vs %s%zu",
                 ea->opaque != NULL ? "" : "(not opaque) ", ra->len,
                 eb->opaque != NULL ? "" : "(not opaque) ", rb->len);
        return fc_diff_add(res, ea->key, FC_DIFF_VALUE, detail, 0, 0, NAN);
    }
    if (ea->kind == FC_ENTRY_VALUE) {
        FC_TRY(fc_repr_of(ea->value, ra));
        FC_TRY(fc_repr_of(eb->value, rb));
        if (strcmp((char *)ra->data, (char *)rb->data) == 0)
            return FC_OK;
        snprintf(detail, sizeof(detail), "%.240s vs %.240s", (char *)ra->data, (char *)rb->data);
        return fc_diff_add(res, ea->key, FC_DIFF_VALUE, detail, 0, 0, NAN);
    }
    int same_shape = ea->t.ndim == eb->t.ndim;
    for (int d = 0; same_shape && d < ea->t.ndim; d++)
        same_shape = ea->t.shape[d] == eb->t.shape[d];
    if (!same_shape) {
        struct fc_buf sa = FC_BUF_INIT(4096), sb = FC_BUF_INIT(4096);
        for (int d = 0; d < ea->t.ndim; d++)
            (void)fc_buf_printf(&sa, d ? ", %lld" : "%lld", (long long)ea->t.shape[d]);
        for (int d = 0; d < eb->t.ndim; d++)
            (void)fc_buf_printf(&sb, d ? ", %lld" : "%lld", (long long)eb->t.shape[d]);
        (void)fc_buf_putc(&sa, '\0');
        (void)fc_buf_putc(&sb, '\0');
        snprintf(detail, sizeof(detail), "[%s] vs [%s]", sa.data ? (char *)sa.data : "",
                 sb.data ? (char *)sb.data : "");
        fc_buf_release(&sa);
        fc_buf_release(&sb);
        return fc_diff_add(res, ea->key, FC_DIFF_SHAPE, detail, 0, 0, NAN);
    }
    return fc_diff_tensors(res->src_a, ea, res->src_b, eb, o->max_memory / 2, res);
}

int fc_diff(const struct fc_diff_opts *o, struct fc_diff_result *res)
{
    struct fc_regex *re = NULL;
    int rc = FC_OK;
    struct fc_keyref *ka = NULL, *kb = NULL;
    struct fc_buf ra = FC_BUF_INIT((size_t)1 << 30), rb = FC_BUF_INIT((size_t)1 << 30);
    memset(res, 0, sizeof(*res));
    if (o->key_regex != NULL)
        FC_TRY(fc_regex_compile(&re, o->key_regex, "--key"));
    FC_TRY_GOTO(fc_source_open(&res->src_a, o->a, o->source_flags), rc, done);
    FC_TRY_GOTO(fc_source_open(&res->src_b, o->b, o->source_flags), rc, done);
    res->format_a = res->src_a->format;
    res->format_b = res->src_b->format;
    ka = fc_sorted_keys(res->src_a);
    kb = fc_sorted_keys(res->src_b);
    if (ka == NULL || kb == NULL) {
        rc = fc_error_set(FC_ENOMEM, "out of memory");
        goto done;
    }
    size_t i = 0, j = 0;
    const size_t na = res->src_a->nentries, nb = res->src_b->nentries;
    while (i < na || j < nb) {
        const int c = i == na ? 1 : j == nb ? -1 : strcmp(ka[i].key, kb[j].key);
        const char *key = c <= 0 ? ka[i].key : kb[j].key;
        const int wanted = re == NULL ? 1 : fc_regex_search(re, key);
        if (wanted < 0) {
            rc = wanted;
            goto done;
        }
        if (c < 0) {
            if (wanted)
                FC_TRY_GOTO(fc_diff_add(res, key, FC_DIFF_ONLY_A, "only in A", 0, 0, NAN), rc,
                            done);
            i++;
        } else if (c > 0) {
            if (wanted)
                FC_TRY_GOTO(fc_diff_add(res, key, FC_DIFF_ONLY_B, "only in B", 0, 0, NAN), rc,
                            done);
            j++;
        } else {
            if (wanted) {
                res->ncompared++;
                FC_TRY_GOTO(fc_diff_pair(o, res, &res->src_a->entries[ka[i].index],
                                         &res->src_b->entries[kb[j].index], &ra, &rb),
                            rc, done);
            }
            i++;
            j++;
        }
    }
    /* Chunks the comparisons read only in part (a pair that differs stops early). */
    FC_TRY_GOTO(fc_source_verify_rest(res->src_a), rc, done);
    FC_TRY_GOTO(fc_source_verify_rest(res->src_b), rc, done);
done:
    fc_regex_free(re);
    fc_free(ka);
    fc_free(kb);
    fc_buf_release(&ra);
    fc_buf_release(&rb);
    if (rc < 0)
        fc_diff_result_release(res);
    return rc;
}
