/*
 * fuzz_rules.c - the rules-file parser and the transform pipeline on
 * arbitrary text: parse, describe, then apply to the tiny fixture
 * (fixtures/full/tiny_vitlm.pt, found from the repository root where the
 * replay and libFuzzer scripts run).  A pipeline that succeeds must leave
 * unique keys, backward aliases with their target's dtype, shape and op
 * count, shapes that agree with the op lists, and tensors built by the
 * layout rules (stack, concat, split, unstack) that read whole.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fc_alloc.h"
#include "fc_buf.h"
#include "fc_error.h"
#include "fc_source.h"
#include "fc_strmap.h"
#include "xform.h"

#define FUZZ_TEXT_MAX ((size_t)1 << 16)

static void fuzz_check(const struct fc_xform_result *xr)
{
    struct fc_strmap keys = FC_STRMAP_INIT;
    for (size_t i = 0; i < xr->n; i++) {
        const struct fc_xspec *s = &xr->specs[i];
        if (fc_strmap_put(&keys, s->key, i, NULL) != 0) {
            fprintf(stderr, "dup %zu %s\n", i, s->key);
            for (size_t j = 0; j < xr->n; j++)
                fprintf(stderr, "  %zu %s\n", j, xr->specs[j].key);
            abort();
        }
        if (s->alias_of >= (long)i || (s->alias_of >= 0 && s->copy_of >= 0))
            abort();
        const struct fc_xspec *t = s->alias_of >= 0 ? &xr->specs[s->alias_of] : s;
        if (t->dtype != s->dtype || t->ndim != s->ndim || t->nops != s->nops ||
            memcmp(t->shape, s->shape, sizeof(s->shape)) != 0)
            abort();
        if (s->nops > FC_XFORM_MAX_OPS)
            abort();
        /* The op list reproduces the spec's dtype and shape from its entry. */
        const struct fc_entry *e = &s->src->entries[s->entry];
        if (s->kind != FC_ENTRY_TENSOR)
            continue;
        fc_dtype dt = e->t.dtype;
        int nd = e->t.ndim;
        int64_t shape[FC_MAX_DIMS];
        memcpy(shape, e->t.shape, sizeof(shape));
        for (size_t k = 0; k < s->nops; k++)
            fc_op_out(&s->ops[k], &dt, &nd, shape);
        if (dt != s->dtype || nd != s->ndim ||
            memcmp(shape, s->shape, sizeof(int64_t) * (size_t)nd) != 0)
            abort();
        /* A tensor the layout rules built reads whole from its parts (ASan watches). */
        if (s->src == xr->virt) {
            int64_t zero[FC_MAX_DIMS] = {0}, numel = 1;
            for (int d = 0; d < e->t.ndim; d++)
                numel *= e->t.shape[d];
            unsigned char *buf = fc_malloc((size_t)numel * fc_dtype_size(e->t.dtype) + 1);
            if (buf == NULL || fc_source_read_box(s->src, e, zero, e->t.shape, buf) != FC_OK)
                abort();
            fc_free(buf);
        }
    }
    fc_strmap_release(&keys);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct fc_source *src;
    static int tried;
    struct fc_xform_rules r;
    struct fc_xform_result xr;
    if (size > FUZZ_TEXT_MAX)
        return 0;
    if (!tried) {
        tried = 1;
        if (fc_source_open(&src, "fixtures/full/tiny_vitlm.pt", 0) != FC_OK)
            src = NULL;
    }
    char *text = fc_malloc(size + 1);
    if (text == NULL)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    memset(&r, 0, sizeof(r));
    if (fc_xform_rules_parse(&r, text, size, "fuzz") == FC_OK) {
        struct fc_buf b = FC_BUF_INIT((size_t)1 << 20);
        (void)fc_xform_rules_describe(&r, &b);
        fc_buf_release(&b);
        if (src != NULL && fc_xform_apply(src, &r, &xr) == FC_OK) {
            fuzz_check(&xr);
            fc_xform_result_release(&xr);
        }
    }
    fc_xform_rules_release(&r);
    fc_free(text);
    return 0;
}
