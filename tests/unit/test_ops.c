/*
 * test_ops.c - the op table (convert/ops.c): every row is a whole op (rule,
 * steps, equality, option) reachable by its rule's name, and fc_op_same()
 * tells ops apart by what changes their bytes.
 */
#include "fc_test.h"

#include "ops.h"
#include "xform.h"

static void test_ops_every_row_is_a_whole_op(void **state)
{
    const struct fc_rule_option *opt;
    size_t n = 0;
    (void)state;
    for (size_t i = 0; (opt = fc_op_rule_option(i)) != NULL; i++, n++) {
        int kind = -1;
        const struct fc_op_def *def = fc_op_def_find(opt->name, &kind);
        assert_non_null(def);
        assert_int_equal(kind, (int)i);
        assert_ptr_equal(def, fc_op_def(kind));
        assert_ptr_equal(&def->opt, opt);
        assert_true(opt->value != NULL && opt->value[0] == '<');
        assert_true(opt->help != NULL && opt->help[0] != '\0');
        assert_true(def->form == NULL || strchr(def->form, '=') != NULL);
        assert_non_null(def->parse);
        assert_non_null(def->admit);
        assert_non_null(def->shape);
        assert_non_null(def->cpu);
        assert_non_null(def->cuda);
        assert_non_null(def->same);
    }
    assert_int_equal(n, 3);
    int kind = -1;
    assert_null(fc_op_def_find("rename", &kind)); /* a rule kind, not an op */
    assert_null(fc_op_def_find("nope", &kind));
}

/* Each op's rule, flag or file line, goes through the table: its parser says what is wrong. */
static void test_ops_rules_parse_through_the_table(void **state)
{
    struct fc_xform_rules r;
    (void)state;
    memset(&r, 0, sizeof(r));
    assert_fc_ok(fc_xform_rules_add(&r, "resize-rows", "a=b=12:zero", "--resize-rows"));
    assert_int_equal(r.v[0].kind, FC_RULE_OP);
    assert_int_equal(r.v[0].append.kind, FC_OP_RESIZE_ROWS);
    assert_string_equal(r.v[0].a, "a=b"); /* a key may hold '=': split at the last */
    assert_int_equal(r.v[0].append.rows, 12);
    assert_int_equal(r.v[0].append.fill, FC_FILL_ZERO);
    assert_fc_ok(fc_xform_rules_add(&r, "dtype", "fp16", "rules.txt:2"));
    assert_int_equal(r.v[1].append.kind, FC_OP_CAST);
    assert_int_equal(r.v[1].append.dtype, FC_DTYPE_FLOAT16);
    assert_fc_ok(fc_xform_rules_add(&r, "conv2d-to-linear", "patch.weight", "--conv2d-to-linear"));
    assert_int_equal(r.v[2].append.kind, FC_OP_CONV2D_TO_LINEAR);
    assert_fc_fails(fc_xform_rules_add(&r, "resize-rows", "a=lots", "--resize-rows"), FC_EINVAL,
                    "--resize-rows 'a=lots': 'lots' is no row count");
    assert_fc_fails(fc_xform_rules_add(&r, "resize-rows", "12", "rules.txt:4"), FC_EINVAL,
                    "rules.txt:4: needs the form KEY=N[:zero|mean]");
    assert_fc_fails(fc_xform_rules_add(&r, "dtype", "int8", "--dtype"), FC_EINVAL,
                    "--dtype 'int8': invalid dtype 'int8'");
    assert_fc_fails(fc_xform_rules_add(&r, "flatten", "x", "rules.txt:9"), FC_EINVAL,
                    "rules.txt:9: unknown rule 'flatten'");
    assert_int_equal(r.n, 3);
    fc_xform_rules_release(&r);
}

static struct fc_op resize_op(int64_t rows, unsigned char *fill_row)
{
    struct fc_op op = {.kind = FC_OP_RESIZE_ROWS, .in_dtype = FC_DTYPE_UINT8, .in_ndim = 2};
    op.in_shape[0] = 4;
    op.in_shape[1] = 3;
    op.rows = rows;
    op.fill = FC_FILL_MEAN;
    op.fill_row = fill_row;
    return op;
}

/* What fc_same_bytes relies on: equal ops make equal bytes, so one read serves both. */
static void test_ops_same_tells_ops_apart_by_their_bytes(void **state)
{
    unsigned char r1[3] = {1, 2, 3}, r2[3] = {1, 2, 3}, r3[3] = {1, 2, 4};
    (void)state;
    struct fc_op a = resize_op(6, r1), b = resize_op(6, r2);
    assert_true(fc_op_same(&a, &b)); /* equal fill rows in other buffers */
    b.fill_row = r3;
    assert_false(fc_op_same(&a, &b)); /* the mean row differs in its last byte */
    b.fill_row = NULL;
    assert_false(fc_op_same(&a, &b));
    b = resize_op(7, r2);
    assert_false(fc_op_same(&a, &b));
    b = resize_op(6, r2);
    b.fill = FC_FILL_ZERO;
    assert_false(fc_op_same(&a, &b));
    b = resize_op(6, r2);
    b.in_shape[1] = 4; /* another input: other rows */
    assert_false(fc_op_same(&a, &b));
    struct fc_op c = {.kind = FC_OP_CAST, .in_dtype = FC_DTYPE_FLOAT32, .dtype = FC_DTYPE_BFLOAT16};
    struct fc_op d = c;
    assert_true(fc_op_same(&c, &d));
    d.dtype = FC_DTYPE_FLOAT16;
    assert_false(fc_op_same(&c, &d));
    d = c;
    d.kind = FC_OP_CONV2D_TO_LINEAR;
    assert_false(fc_op_same(&c, &d));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ops_every_row_is_a_whole_op),
        cmocka_unit_test(test_ops_rules_parse_through_the_table),
        cmocka_unit_test(test_ops_same_tells_ops_apart_by_their_bytes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
