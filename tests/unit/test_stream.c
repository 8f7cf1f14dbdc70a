/*
 * test_stream.c - the executor's data path (stream.c walking an op list):
 * cast, conv2d-to-linear permute, resize-rows fill, in slabs of every size,
 * on whole boxes and Shard(0)/partial boxes, against references computed here
 * from the raw input rows and the kernels (tested against torch themselves).
 */
#include "fc_test.h"

#include "fc_kernels.h"
#include "fc_source.h"
#include "stream.h"
#include "xform.h"

struct collect {
    unsigned char *p;
    size_t n, cap;
};

static int collect_put(void *ctx, const void *p, size_t n)
{
    struct collect *c = ctx;
    assert_true(c->n + n <= c->cap);
    memcpy(c->p + c->n, p, n);
    c->n += n;
    return FC_OK;
}

/* The spec reading entry `key` of src, with ops pushed by the rules (through xform). */
static void spec_from_rules(struct fc_source *src, const char *const (*rules)[2], size_t n,
                            const char *key, struct fc_xform_result *xr, struct fc_xspec **out)
{
    struct fc_xform_rules r;
    memset(&r, 0, sizeof(r));
    for (size_t i = 0; i < n; i++)
        assert_fc_ok(fc_xform_rules_add(&r, rules[i][0], rules[i][1], "t"));
    assert_fc_ok(fc_xform_apply(src, &r, xr));
    fc_xform_rules_release(&r);
    *out = NULL;
    for (size_t i = 0; i < xr->n; i++)
        if (strcmp(xr->specs[i].key, key) == 0)
            *out = &xr->specs[i];
    assert_non_null(*out);
}

/* The whole input tensor of entry `key`, C order. */
static unsigned char *read_entry(struct fc_source *src, const char *key, const struct fc_entry **e)
{
    *e = NULL;
    for (size_t i = 0; i < src->nentries; i++)
        if (strcmp(src->entries[i].key, key) == 0)
            *e = &src->entries[i];
    assert_non_null(*e);
    int64_t off[FC_MAX_DIMS] = {0};
    size_t n = fc_dtype_size((*e)->t.dtype);
    for (int d = 0; d < (*e)->t.ndim; d++)
        n *= (size_t)(*e)->t.shape[d];
    unsigned char *buf = malloc(n + 1);
    assert_fc_ok(fc_source_read_box(src, *e, off, (*e)->t.shape, buf));
    return buf;
}

/* Stream box (off, size) of spec with a budget of `budget` bytes into a fresh buffer. */
static struct collect stream(const struct fc_source *src, const struct fc_xspec *s,
                             const int64_t *off, const int64_t *size, uint64_t budget)
{
    struct fc_slabs slabs;
    struct collect c = {NULL, 0, 1 << 16};
    memset(&slabs, 0, sizeof(slabs));
    c.p = malloc(c.cap);
    assert_fc_ok(fc_stream_box(src, s, off, size, budget, &slabs, collect_put, &c));
    fc_slabs_release(&slabs);
    return c;
}

static void test_stream_casts_and_permutes_in_any_slab_size(void **state)
{
    struct fc_source *src = NULL;
    struct fc_xform_result xr;
    struct fc_xspec *s;
    const struct fc_entry *e;
    (void)state;
    assert_fc_ok(fc_source_open(&src, fc_test_fixture("full/tiny_vitlm.pt"), 0));
    static const char *const rules[][2] = {{"conv2d-to-linear", "patch_embed.weight"},
                                           {"dtype", "bf16"}};
    spec_from_rules(src, rules, 2, "patch_embed.weight", &xr, &s);
    unsigned char *in = read_entry(src, "patch_embed.weight", &e); /* [8, 3, 4, 4] f32 */
    float perm[8 * 48];
    uint16_t want[8 * 48];
    const int64_t shape4[4] = {8, 3, 4, 4};
    assert_fc_ok(fc_kern_conv2d_to_linear(perm, in, 4, shape4, 0, 8));
    assert_fc_ok(fc_kern_cast(FC_DTYPE_BFLOAT16, want, FC_DTYPE_FLOAT32, perm, 8 * 48));
    /* Differs from casting the unpermuted weight: the permute really ran. */
    uint16_t unperm[8 * 48];
    assert_fc_ok(fc_kern_cast(FC_DTYPE_BFLOAT16, unperm, FC_DTYPE_FLOAT32, in, 8 * 48));
    assert_memory_not_equal(want, unperm, sizeof(want));
    const uint64_t budgets[] = {1, 700, 2000, 1 << 20}; /* one row per slab .. all at once */
    for (size_t b = 0; b < 4; b++) {
        /* Shard(0) boxes: rows [3, 8) alone, and the whole tensor. */
        const int64_t off[2] = {3, 0}, size[2] = {5, 48}, zero[2] = {0, 0};
        struct collect c = stream(src, s, off, size, budgets[b]);
        assert_int_equal(c.n, 5 * 48 * 2);
        assert_memory_equal(c.p, want + 3 * 48, c.n);
        free(c.p);
        c = stream(src, s, zero, s->shape, budgets[b]);
        assert_memory_equal(c.p, want, sizeof(want));
        free(c.p);
    }
    free(in);
    fc_xform_result_release(&xr);
    fc_source_free(src);
}

static void test_stream_resize_fills_zero_or_the_float64_mean(void **state)
{
    struct fc_source *src = NULL;
    struct fc_xform_result xr;
    struct fc_xspec *s;
    const struct fc_entry *e;
    (void)state;
    assert_fc_ok(fc_source_open(&src, fc_test_fixture("full/tiny_vitlm.pt"), 0));
    /* embed_tokens [11, 8] f32 -> 14 rows of the mean, then bf16 (mean rounded to f32 first). */
    static const char *const rules[][2] = {{"copy", "^embed_tokens\\.weight$=emb2"},
                                           {"resize-rows", "emb2=14"},
                                           {"dtype", "bf16"}};
    spec_from_rules(src, rules, 3, "emb2", &xr, &s);
    struct fc_slabs slabs;
    memset(&slabs, 0, sizeof(slabs));
    assert_fc_ok(fc_stream_fill_means(&xr, 64, &slabs)); /* slabs of one row */
    fc_slabs_release(&slabs);
    float *in = (float *)read_entry(src, "embed_tokens.weight", &e);
    float full[14 * 8];
    memcpy(full, in, 11 * 8 * sizeof(float));
    for (int c = 0; c < 8; c++) {
        double sum = 0;
        for (int r = 0; r < 11; r++)
            sum += in[r * 8 + c];
        for (int r = 11; r < 14; r++)
            full[r * 8 + c] = (float)(sum / 11.0);
    }
    uint16_t want[14 * 8];
    assert_fc_ok(fc_kern_cast(FC_DTYPE_BFLOAT16, want, FC_DTYPE_FLOAT32, full, 14 * 8));
    /* A box across the old end, one row per slab; and a partial trailing box (cols 2..5). */
    const int64_t off[2] = {9, 0}, size[2] = {5, 8};
    struct collect c = stream(src, s, off, size, 1);
    assert_int_equal(c.n, 5 * 8 * 2);
    assert_memory_equal(c.p, want + 9 * 8, c.n);
    free(c.p);
    const int64_t poff[2] = {10, 2}, psize[2] = {3, 3};
    c = stream(src, s, poff, psize, 1 << 20);
    for (int r = 0; r < 3; r++)
        assert_memory_equal(c.p + r * 3 * 2, want + (10 + r) * 8 + 2, 3 * 2);
    free(c.p);
    fc_xform_result_release(&xr);
    /* :zero, and truncation to fewer rows. */
    static const char *const zero[][2] = {{"resize-rows", "norm.weight=10:zero"},
                                          {"resize-rows", "embed_tokens.weight=4"}};
    spec_from_rules(src, zero, 2, "norm.weight", &xr, &s);
    const int64_t z0[1] = {0}, zs[1] = {10};
    c = stream(src, s, z0, zs, 8);
    float *nw = (float *)read_entry(src, "norm.weight", &e);
    assert_memory_equal(c.p, nw, 8 * 4);
    assert_int_equal(((const float *)c.p)[8], 0.0f);
    assert_int_equal(((const float *)c.p)[9], 0.0f);
    free(nw);
    free(c.p);
    for (size_t i = 0; i < xr.n; i++)
        if (strcmp(xr.specs[i].key, "embed_tokens.weight") == 0)
            s = &xr.specs[i];
    const int64_t t0[2] = {0, 0};
    c = stream(src, s, t0, s->shape, 1 << 20);
    assert_int_equal(c.n, 4 * 8 * 4);
    assert_memory_equal(c.p, in, c.n);
    free(c.p);
    free(in);
    fc_xform_result_release(&xr);
    fc_source_free(src);
}

/*
 * Rows bigger than the budget (a stacked expert bigger than --max-memory):
 * with only casts, a box streams in runs of a later dim, the same bytes in
 * the same order at every budget, whole tensor or a box partial in every dim.
 */
static void test_stream_cuts_rows_bigger_than_the_budget(void **state)
{
    struct fc_source *src = NULL;
    struct fc_xform_result xr;
    struct fc_xspec *s;
    const struct fc_entry *e;
    (void)state;
    assert_fc_ok(fc_source_open(&src, fc_test_fixture("safetensors/tiny_vitlm.safetensors"), 0));
    static const char *const rules[][2] = {
        {"stack", "^blocks\\.(\\d+)\\.attn\\.qkv\\.weight$=qkv"}, {"dtype", "bf16"}};
    spec_from_rules(src, rules, 2, "qkv", &xr, &s); /* [2, 24, 8], f32 -> bf16 */
    uint16_t want[2 * 24 * 8];
    for (int b = 0; b < 2; b++) {
        char key[64];
        snprintf(key, sizeof(key), "blocks.%d.attn.qkv.weight", b);
        unsigned char *in = read_entry(src, key, &e);
        assert_fc_ok(fc_kern_cast(FC_DTYPE_BFLOAT16, want + b * 24 * 8, FC_DTYPE_FLOAT32, in,
                                  24 * 8));
        free(in);
    }
    /* A row is 1536 bytes of slabs, a dim-1 index 64, an element 8. */
    const uint64_t budgets[] = {1, 8, 50, 64, 700, 1536, 1 << 20};
    for (size_t b = 0; b < sizeof(budgets) / sizeof(budgets[0]); b++) {
        const int64_t zero[3] = {0, 0, 0}, off[3] = {1, 3, 2}, size[3] = {1, 10, 5};
        struct collect c = stream(src, s, zero, s->shape, budgets[b]);
        assert_int_equal(c.n, sizeof(want));
        assert_memory_equal(c.p, want, sizeof(want));
        free(c.p);
        c = stream(src, s, off, size, budgets[b]);
        assert_int_equal(c.n, 10 * 5 * 2);
        for (int r = 0; r < 10; r++)
            assert_memory_equal(c.p + r * 5 * 2, want + 24 * 8 + (3 + r) * 8 + 2, 5 * 2);
        free(c.p);
    }
    fc_xform_result_release(&xr);
    fc_source_free(src);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stream_casts_and_permutes_in_any_slab_size),
        cmocka_unit_test(test_stream_resize_fills_zero_or_the_float64_mean),
        cmocka_unit_test(test_stream_cuts_rows_bigger_than_the_budget),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
