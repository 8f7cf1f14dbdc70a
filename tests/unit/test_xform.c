/*
 * test_xform.c - transform rules and plan-time specs, on the tiny ViT+LM
 * fixture written by torch (fixtures/full/tiny_vitlm.pt and its training
 * checkpoint).
 */
#include "fc_test.h"

#include "fc_source.h"
#include "xform.h"

static struct fc_source *open_fixture(const char *rel)
{
    struct fc_source *src = NULL;
    assert_fc_ok(fc_source_open(&src, fc_test_fixture(rel)));
    return src;
}

static long find(const struct fc_xform_result *xr, const char *key)
{
    for (size_t i = 0; i < xr->n; i++)
        if (strcmp(xr->specs[i].key, key) == 0)
            return (long)i;
    return -1;
}

static void test_xform_applies_steps_in_the_fixed_order(void **state)
{
    struct fc_source *src = open_fixture("full/tiny_vitlm_train.pt");
    struct fc_xform_rules r;
    struct fc_xform_result xr;
    (void)state;
    memset(&r, 0, sizeof(r));
    /* Given out of order on purpose: the steps still run select, ..., add-prefix. */
    assert_fc_ok(fc_xform_rules_add(&r, "add-prefix", "model.", "t"));
    assert_fc_ok(fc_xform_rules_add(&r, "dtype", "bf16", "t"));
    assert_fc_ok(fc_xform_rules_add(&r, "conv2d-to-linear", "patch_embed.weight", "t"));
    assert_fc_ok(fc_xform_rules_add(&r, "rename", "^blocks\\.([0-9]+)\\.=layers.\\1.", "t"));
    assert_fc_ok(fc_xform_rules_add(&r, "drop", "^connector\\.", "t"));
    assert_fc_ok(fc_xform_rules_add(&r, "select", "model", "t"));
    assert_fc_ok(fc_xform_apply(src, &r, &xr));
    const long conv = find(&xr, "model.patch_embed.weight");
    assert_true(conv >= 0);
    assert_int_equal(xr.specs[conv].ndim, 2);
    assert_int_equal(xr.specs[conv].shape[0], 8);
    assert_int_equal(xr.specs[conv].shape[1], 48);
    assert_true(xr.specs[conv].conv2d);
    assert_int_equal(xr.specs[conv].dtype, FC_DTYPE_BFLOAT16);
    assert_true(find(&xr, "model.layers.1.attn.qkv.weight") >= 0);
    assert_int_equal(find(&xr, "model.blocks.1.attn.qkv.weight"), -1);
    assert_int_equal(find(&xr, "model.connector.0.weight"), -1);
    assert_int_equal(find(&xr, "epoch"), -1); /* outside the selected subtree */
    /* Integer tensors keep their dtype; add-prefix "model." is its own path component. */
    const long pos = find(&xr, "model.position_ids");
    assert_int_equal(xr.specs[pos].dtype, FC_DTYPE_INT64);
    assert_int_equal(xr.specs[pos].path_len, 2);
    assert_string_equal(xr.specs[pos].path[0].key, "model");
    assert_string_equal(xr.specs[pos].path[1].key, "position_ids");
    /* lm_head shares embed_tokens' storage in the file: an automatic alias. */
    const long lm = find(&xr, "model.lm_head.weight"), emb = find(&xr, "model.embed_tokens.weight");
    assert_int_equal(xr.specs[lm].alias_of, emb);
    fc_xform_result_release(&xr);
    fc_xform_rules_release(&r);
    fc_source_free(src);
}

static void test_xform_tie_points_dst_at_src_either_way(void **state)
{
    struct fc_source *src = open_fixture("full/tiny_vitlm.pt");
    struct fc_xform_rules r;
    struct fc_xform_result xr;
    (void)state;
    /* DST after SRC, and DST before SRC (the alias direction flips, the data is SRC's). */
    static const char *const ties[] = {"norm.weight=blocks.0.norm1.weight",
                                       "blocks.0.norm2.weight=norm.bias", "new.key=norm.bias"};
    for (size_t t = 0; t < 3; t++) {
        memset(&r, 0, sizeof(r));
        assert_fc_ok(fc_xform_rules_add(&r, "tie", ties[t], "t"));
        assert_fc_ok(fc_xform_apply(src, &r, &xr));
        char dst[64], srck[64];
        const char *eq = strchr(ties[t], '=');
        snprintf(dst, sizeof(dst), "%.*s", (int)(eq - ties[t]), ties[t]);
        snprintf(srck, sizeof(srck), "%s", eq + 1);
        const long d = find(&xr, dst), s = find(&xr, srck);
        assert_true(d >= 0 && s >= 0);
        const long root_d = xr.specs[d].alias_of >= 0 ? xr.specs[d].alias_of : d;
        const long root_s = xr.specs[s].alias_of >= 0 ? xr.specs[s].alias_of : s;
        assert_int_equal(root_d, root_s);
        assert_int_equal(xr.specs[d].entry, xr.specs[s].entry);
        for (size_t i = 0; i < xr.n; i++)
            assert_true(xr.specs[i].alias_of < (long)i);
        fc_xform_result_release(&xr);
        fc_xform_rules_release(&r);
    }
    fc_source_free(src);
}

static void test_xform_rules_naming_missing_keys_are_usage_errors(void **state)
{
    struct fc_source *src = open_fixture("full/tiny_vitlm.pt");
    static const char *const bad[][3] = {
        {"select", "nope", "--select 'nope'"},
        {"strip-prefix", "module.", "--strip-prefix 'module.'"},
        {"rename", "^nope(.*)$=x\\1", "no key matches"},
        {"drop", "^nope", "--drop '^nope': no key matches"},
        {"conv2d-to-linear", "nope.weight", "no key 'nope.weight'"},
        {"conv2d-to-linear", "patch_embed.bias", "has 1 dims"},
        {"tie", "a=nope", "no key 'nope'"},
        {"rename", "^(norm)\\.(weight|bias)$=norm", "two keys become 'norm'"},
    };
    (void)state;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct fc_xform_rules r;
        struct fc_xform_result xr;
        memset(&r, 0, sizeof(r));
        assert_fc_ok(fc_xform_rules_add(&r, bad[i][0], bad[i][1], "t"));
        assert_fc_fails(fc_xform_apply(src, &r, &xr), FC_EINVAL, bad[i][2]);
        fc_xform_rules_release(&r);
    }
    struct fc_xform_rules r;
    memset(&r, 0, sizeof(r));
    assert_fc_fails(fc_xform_rules_add(&r, "frobnicate", "x", "rules.txt:3"), FC_EINVAL,
                    "rules.txt:3: unknown rule 'frobnicate'");
    assert_fc_fails(fc_xform_rules_add(&r, "rename", "(=x", "t"), FC_EINVAL,
                    "invalid regular expression");
    assert_fc_fails(fc_xform_rules_add(&r, "dtype", "int8", "t"), FC_EINVAL, "invalid dtype");
    fc_xform_rules_release(&r);
    fc_source_free(src);
}

static void test_xform_reads_a_rules_file_with_comments(void **state)
{
    struct fc_source *src = open_fixture("full/tiny_vitlm.pt");
    struct fc_xform_rules r;
    struct fc_xform_result xr;
    char *dir = fc_test_tmpdir();
    char path[256];
    (void)state;
    assert_non_null(dir);
    snprintf(path, sizeof(path), "%s/rules.txt", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("# BAGEL-style\n\n  drop ^extra\\.   # the dtype copies\n"
          "tie lm_head.weight=embed_tokens.weight\ndtype float16\n",
          f);
    fclose(f);
    memset(&r, 0, sizeof(r));
    assert_fc_ok(fc_xform_rules_load(&r, path));
    assert_int_equal(r.ndrops, 1);
    assert_int_equal(r.nties, 1);
    assert_int_equal(r.dtype, FC_DTYPE_FLOAT16);
    assert_fc_ok(fc_xform_apply(src, &r, &xr));
    assert_int_equal(find(&xr, "extra.qkv_bf16"), -1);
    fc_xform_result_release(&xr);
    fc_xform_rules_release(&r);
    f = fopen(path, "w");
    assert_non_null(f);
    fputs("drop\n", f);
    fclose(f);
    memset(&r, 0, sizeof(r));
    assert_fc_fails(fc_xform_rules_load(&r, path), FC_EINVAL, "rules.txt:1: rule 'drop' needs");
    fc_xform_rules_release(&r);
    fc_test_rmdir(dir);
    fc_source_free(src);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_xform_applies_steps_in_the_fixed_order),
        cmocka_unit_test(test_xform_tie_points_dst_at_src_either_way),
        cmocka_unit_test(test_xform_rules_naming_missing_keys_are_usage_errors),
        cmocka_unit_test(test_xform_reads_a_rules_file_with_comments),
    };
    return cmocka_run_group_tests_name("xform", tests, NULL, NULL);
}
