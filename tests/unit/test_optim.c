/*
 * test_optim.c - the optimizer converter (optim.c) on the torch-written
 * training fixture (fixtures/full/tiny_vitlm_train.pt: model + AdamW state
 * keyed by integer ids): id -> parameter mapping, state specs following
 * --copy / --resize-rows / --dtype, param_groups per layout.
 */
#include "fc_test.h"

#include "fc_source.h"
#include "xform.h"

static long find(const struct fc_xform_result *xr, const char *key)
{
    for (size_t i = 0; i < xr->n; i++)
        if (strcmp(xr->specs[i].key, key) == 0)
            return (long)i;
    return -1;
}

/* Model rules as the CLI tests give them, plus extra ones; then the optimizer in `layout`. */
static int convert(struct fc_source *src, const char *const (*extra)[2], size_t n,
                   enum fc_layout layout, struct fc_xform_result *xr)
{
    static const char *const base[][2] = {
        {"select", "model"}, {"optim-skip", "^vit_pos_embed$"}, {"optim-skip", "^temperature$"}};
    struct fc_xform_rules r;
    memset(&r, 0, sizeof(r));
    for (size_t i = 0; i < 3; i++)
        assert_fc_ok(fc_xform_rules_add(&r, base[i][0], base[i][1], "t"));
    for (size_t i = 0; i < n; i++)
        assert_fc_ok(fc_xform_rules_add(&r, extra[i][0], extra[i][1], "t"));
    assert_fc_ok(fc_xform_apply(src, &r, xr));
    const int rc = fc_xform_add_optimizer(xr, &r, src, "optimizer", layout);
    fc_xform_rules_release(&r);
    if (rc < 0)
        fc_xform_result_release(xr);
    return rc;
}

static void test_optim_state_follows_copy_resize_and_dtype(void **state)
{
    struct fc_source *src = NULL;
    struct fc_xform_result xr;
    (void)state;
    assert_fc_ok(fc_source_open(&src, fc_test_fixture("full/tiny_vitlm_train.pt"), 0));
    static const char *const rules[][2] = {{"copy", "^norm\\.(weight|bias)$=norm_moe_gen.\\1"},
                                           {"resize-rows", "connector.0.weight=16"},
                                           {"dtype", "bf16"}};
    assert_fc_ok(convert(src, rules, 3, FC_LAYOUT_TORCHTITAN, &xr));
    /* The copy's state is a copy of its parameter's state (same entry, no alias). */
    const long st = find(&xr, "optimizer.state.norm.weight.exp_avg");
    const long cp = find(&xr, "optimizer.state.norm_moe_gen.weight.exp_avg");
    assert_true(st >= 0 && cp >= 0);
    assert_int_equal(xr.specs[cp].entry, xr.specs[st].entry);
    assert_ptr_equal(xr.specs[cp].src, src);
    assert_int_equal(xr.specs[cp].alias_of, -1);
    assert_true(find(&xr, "optimizer.state.norm_moe_gen.bias.step") >= 0);
    assert_true(find(&xr, "optimizer.param_groups.norm_moe_gen.weight.lr") >= 0);
    assert_true(find(&xr, "model.norm_moe_gen.weight") >= 0);
    /* Resized parameter: state resized the same way with zero rows, kept in float32. */
    const long pr = find(&xr, "model.connector.0.weight");
    const long rs = find(&xr, "optimizer.state.connector.0.weight.exp_avg_sq");
    assert_int_equal(xr.specs[pr].shape[0], 16);
    assert_int_equal(xr.specs[pr].ops[0].fill, FC_FILL_MEAN);
    assert_int_equal(xr.specs[pr].dtype, FC_DTYPE_BFLOAT16);
    assert_int_equal(xr.specs[rs].shape[0], 16);
    assert_int_equal(xr.specs[rs].nops, 1);
    assert_int_equal(xr.specs[rs].ops[0].kind, FC_OP_RESIZE_ROWS);
    assert_int_equal(xr.specs[rs].ops[0].fill, FC_FILL_ZERO);
    assert_int_equal(xr.specs[rs].dtype, FC_DTYPE_FLOAT32);
    const long step = find(&xr, "optimizer.state.connector.0.weight.step");
    assert_int_equal(xr.specs[step].ndim, 0);
    assert_int_equal(xr.specs[step].nops, 0);
    fc_xform_result_release(&xr);
    fc_source_free(src);
}

static void test_optim_app_layout_lists_copies_in_their_group(void **state)
{
    struct fc_source *src = NULL;
    struct fc_xform_result xr;
    (void)state;
    assert_fc_ok(fc_source_open(&src, fc_test_fixture("full/tiny_vitlm_train.pt"), 0));
    static const char *const rules[][2] = {{"copy", "^norm\\.weight$=norm_moe_gen.weight"}};
    assert_fc_ok(convert(src, rules, 1, FC_LAYOUT_APP, &xr));
    const long p = find(&xr, "app.optim.param_groups.0.params");
    assert_true(p >= 0);
    const struct fc_pv *list = xr.specs[p].value;
    assert_non_null(list);
    size_t hits = 0, norm_at = 0, copy_at = 0;
    for (size_t i = 0; i < list->u.seq.n; i++) {
        const char *s = list->u.seq.items[i]->u.str.s;
        if (strcmp(s, "norm.weight") == 0)
            norm_at = i, hits++;
        if (strcmp(s, "norm_moe_gen.weight") == 0)
            copy_at = i, hits++;
    }
    assert_int_equal(hits, 2);
    assert_true(copy_at > norm_at);
    assert_int_equal(copy_at, list->u.seq.n - 1); /* copies after the group's parameters */
    assert_int_equal(xr.specs[p].path[3].is_index, 1);
    assert_true(find(&xr, "app.optim.state.norm_moe_gen.weight.exp_avg") >= 0);
    assert_true(find(&xr, "app.model.norm_moe_gen.weight") >= 0);
    fc_xform_result_release(&xr);
    fc_source_free(src);
}

static void test_optim_ids_need_the_parameter_order(void **state)
{
    struct fc_source *src = NULL;
    struct fc_xform_result xr;
    struct fc_xform_rules r;
    (void)state;
    assert_fc_ok(fc_source_open(&src, fc_test_fixture("full/tiny_vitlm_train.pt"), 0));
    memset(&r, 0, sizeof(r));
    assert_fc_ok(fc_xform_rules_add(&r, "select", "model", "t"));
    assert_fc_ok(fc_xform_apply(src, &r, &xr));
    /* Without --optim-skip the frozen vit_pos_embed takes id 0. */
    assert_fc_fails(fc_xform_add_optimizer(&xr, &r, src, "optimizer", FC_LAYOUT_TORCHTITAN),
                    FC_EINVAL, "does not have the shape of parameter 'vit_pos_embed'");
    fc_xform_result_release(&xr);
    assert_fc_ok(fc_xform_apply(src, &r, &xr));
    assert_fc_fails(fc_xform_add_optimizer(&xr, &r, src, "nope", FC_LAYOUT_APP), FC_EINVAL,
                    "no optimizer state dict under nope");
    fc_xform_result_release(&xr);
    fc_xform_rules_release(&r);
    fc_source_free(src);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_optim_state_follows_copy_resize_and_dtype),
        cmocka_unit_test(test_optim_app_layout_lists_copies_in_their_group),
        cmocka_unit_test(test_optim_ids_need_the_parameter_order),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
