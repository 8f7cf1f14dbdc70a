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
    assert_fc_ok(fc_source_open(&src, fc_test_fixture(rel), 0));
    return src;
}

static long find(const struct fc_xform_result *xr, const char *key)
{
    for (size_t i = 0; i < xr->n; i++)
        if (strcmp(xr->specs[i].key, key) == 0)
            return (long)i;
    return -1;
}

static void test_xform_applies_rules_in_the_given_order(void **state)
{
    struct fc_source *src = open_fixture("full/tiny_vitlm_train.pt");
    struct fc_xform_rules r;
    struct fc_xform_result xr;
    (void)state;
    memset(&r, 0, sizeof(r));
    /* Each rule sees the names the ones before it made (PCRE2: \d works). */
    assert_fc_ok(fc_xform_rules_add(&r, "select", "model", "t"));
    assert_fc_ok(fc_xform_rules_add(&r, "rename", "^blocks\\.(\\d+)\\.=layers.\\1.", "t"));
    assert_fc_ok(fc_xform_rules_add(&r, "drop", "^connector\\.", "t"));
    assert_fc_ok(fc_xform_rules_add(&r, "conv2d-to-linear", "patch_embed.weight", "t"));
    assert_fc_ok(fc_xform_rules_add(&r, "dtype", "bf16", "t"));
    assert_fc_ok(fc_xform_rules_add(&r, "add-prefix", "model.", "t"));
    assert_fc_ok(fc_xform_apply(src, &r, &xr));
    const long conv = find(&xr, "model.patch_embed.weight");
    assert_true(conv >= 0);
    assert_int_equal(xr.specs[conv].ndim, 2);
    assert_int_equal(xr.specs[conv].shape[0], 8);
    assert_int_equal(xr.specs[conv].shape[1], 48);
    assert_int_equal(xr.specs[conv].nops, 2);
    assert_int_equal(xr.specs[conv].ops[0].kind, FC_OP_CONV2D_TO_LINEAR);
    assert_int_equal(xr.specs[conv].ops[1].kind, FC_OP_CAST);
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
    /* The same rules in the old fixed order's reverse: add-prefix first hides "blocks." */
    memset(&r, 0, sizeof(r));
    assert_fc_ok(fc_xform_rules_add(&r, "add-prefix", "x.", "--add-prefix"));
    assert_fc_ok(fc_xform_rules_add(&r, "select", "model", "--select"));
    assert_fc_fails(fc_xform_apply(src, &r, &xr), FC_EINVAL, "--select 'model': the input has no");
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
        char where[64];
        snprintf(where, sizeof(where), "--%s", bad[i][0]);
        assert_fc_ok(fc_xform_rules_add(&r, bad[i][0], bad[i][1], where));
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

static const char *path_line(const char *path, int line)
{
    static char buf[300];
    snprintf(buf, sizeof(buf), "%s:%d", path, line);
    return buf;
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
    assert_int_equal(r.n, 3);
    assert_int_equal(r.v[0].kind, FC_RULE_DROP);
    assert_string_equal(r.v[0].label, path_line(path, 3));
    assert_int_equal(r.v[1].kind, FC_RULE_TIE);
    assert_int_equal(r.v[2].kind, FC_RULE_OP);
    assert_int_equal(r.v[2].append.kind, FC_OP_CAST);
    assert_int_equal(r.v[2].append.dtype, FC_DTYPE_FLOAT16);
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

/* Apply rules given as {op, arg} pairs (where "--op") to one input; returns apply's code. */
static int apply_rules(struct fc_source *src, const char *const (*rules)[2], size_t n,
                       struct fc_xform_result *xr)
{
    struct fc_xform_rules r;
    memset(&r, 0, sizeof(r));
    int rc = FC_OK;
    for (size_t i = 0; i < n && rc == FC_OK; i++) {
        char where[64];
        snprintf(where, sizeof(where), "--%s", rules[i][0]);
        rc = fc_xform_rules_add(&r, rules[i][0], rules[i][1], where);
    }
    if (rc == FC_OK)
        rc = fc_xform_apply(src, &r, xr);
    fc_xform_rules_release(&r);
    return rc;
}

static void test_xform_copy_makes_independent_tensors_later_rules_see(void **state)
{
    struct fc_source *src = open_fixture("full/tiny_vitlm.pt");
    struct fc_xform_result xr;
    (void)state;
    /* MoT-style: every block's attention gets a _moe_gen copy; then only copies are resized. */
    static const char *const rules[][2] = {
        {"copy", "^(blocks\\.\\d+)\\.attn\\.(?P<p>qkv|proj)\\.(weight|bias)$=\\1.attn.\\g<p>_moe_gen.\\3"},
        {"copy", "^lm_head\\.weight$=ema.lm_head.weight"},
        {"resize-rows", "ema.lm_head.weight=16:zero"},
        {"dtype", "bf16"},
    };
    assert_fc_ok(apply_rules(src, rules, 4, &xr));
    const long q = find(&xr, "blocks.1.attn.qkv.weight");
    const long c = find(&xr, "blocks.1.attn.qkv_moe_gen.weight");
    assert_true(q >= 0 && c >= 0);
    assert_int_equal(xr.specs[c].copy_of, q);
    assert_int_equal(xr.specs[c].alias_of, -1);
    assert_int_equal(xr.specs[c].entry, xr.specs[q].entry);
    assert_int_equal(xr.specs[c].dtype, FC_DTYPE_BFLOAT16); /* the later --dtype reached it */
    assert_true(find(&xr, "blocks.0.attn.proj_moe_gen.bias") >= 0);
    /* lm_head is tied to embed_tokens in the file; its copy is not, and only it grew. */
    const long lm = find(&xr, "lm_head.weight"), ema = find(&xr, "ema.lm_head.weight");
    assert_true(xr.specs[lm].alias_of >= 0);
    assert_int_equal(xr.specs[ema].alias_of, -1);
    assert_int_equal(xr.specs[ema].shape[0], 16);
    assert_int_equal(xr.specs[lm].shape[0], 11);
    assert_int_equal(xr.specs[ema].ops[0].kind, FC_OP_RESIZE_ROWS);
    assert_int_equal(xr.specs[ema].ops[0].fill, FC_FILL_ZERO);
    fc_xform_result_release(&xr);
    fc_source_free(src);
}

static void test_xform_bad_rules_name_the_rule_and_the_key(void **state)
{
    struct fc_source *src = open_fixture("full/tiny_vitlm.pt");
    struct fc_xform_result xr;
    (void)state;
    static const struct {
        const char *rules[3][2];
        size_t n;
        const char *msg;
    } bad[] = {
        {{{"copy", "^norm\\.weight$=norm.bias"}}, 1,
         "--copy '^norm\\.weight$=norm.bias': the copy of 'norm.weight' would be 'norm.bias', "
         "which exists"},
        {{{"copy", "^nope$=x"}}, 1, "no key matches '^nope$'"},
        {{{"resize-rows", "temperature=4"}}, 1, "'temperature' is 0-d"},
        {{{"resize-rows", "position_ids=4"}}, 1, "'position_ids' (int64, 1 rows) has no mean row"},
        {{{"tie", "new.key=norm.bias"}, {"resize-rows", "new.key=20"}}, 2,
         "--resize-rows 'new.key=20': 'new.key' is tied to 'norm.bias'"},
        {{{"tie", "norm.weight=embed_tokens.weight"}}, 1,
         "--tie 'norm.weight=embed_tokens.weight': 'norm.weight' already exists"},
        {{{"rename", "^norm\\.=final_norm."}, {"drop", "^norm\\.bias$"}}, 2,
         "--drop '^norm\\.bias$': no key matches"},
        {{{"rename", "^norm\\.=final_norm."}, {"conv2d-to-linear", "norm.weight"}}, 2,
         "--conv2d-to-linear 'norm.weight': no key 'norm.weight' (an earlier rule, --rename "
         "'^norm\\.=final_norm.', renamed it)"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_fc_fails(apply_rules(src, bad[i].rules, bad[i].n, &xr), FC_EINVAL, bad[i].msg);
    struct fc_xform_rules r;
    memset(&r, 0, sizeof(r));
    assert_fc_fails(fc_xform_rules_add(&r, "rename", "^(a)=\\2", "--rename"), FC_EINVAL,
                    "refers to a group");
    assert_fc_fails(fc_xform_rules_add(&r, "resize-rows", "x=4:avg", "--resize-rows"), FC_EINVAL,
                    "no row count");
    fc_xform_rules_release(&r);
    fc_source_free(src);
}

static void test_xform_strip_wrappers_and_several_inputs(void **state)
{
    struct fc_source *a = open_fixture("full/tiny_vitlm.pt");
    struct fc_source *b = open_fixture("full/tiny_vitlm.pt");
    struct fc_xform_rules r;
    struct fc_xform_result xr;
    (void)state;
    memset(&r, 0, sizeof(r));
    /* Wrapper names come from the prefixes here: whole components only, "module." at the start. */
    const struct fc_xform_input in[] = {
        {a, "module._fsdp_wrapped_module.vit._orig_mod."},
        {b, "llm._checkpoint_wrapped_module."}};
    assert_fc_ok(fc_xform_rules_add(&r, "strip-wrappers", "", "--strip-wrappers"));
    assert_fc_ok(fc_xform_apply_inputs(in, 2, &r, &xr));
    assert_int_equal(xr.n, 2 * a->nentries);
    const long v = find(&xr, "vit.blocks.0.attn.qkv.weight");
    const long l = find(&xr, "llm.blocks.0.attn.qkv.weight");
    assert_true(v >= 0 && l >= 0);
    assert_int_equal(xr.specs[v].input, 0);
    assert_int_equal(xr.specs[l].input, 1);
    assert_ptr_equal(xr.specs[l].src, b);
    /* Ties found by storage stay inside their own input. */
    const long lm = find(&xr, "llm.lm_head.weight");
    assert_int_equal(xr.specs[lm].alias_of, find(&xr, "llm.embed_tokens.weight"));
    fc_xform_result_release(&xr);
    /* The same key from two inputs. */
    const struct fc_xform_input same[] = {{a, "x."}, {b, "x."}};
    assert_fc_fails(fc_xform_apply_inputs(same, 2, &r, &xr), FC_EINVAL,
                    "key 'x.vit_pos_embed' is in two inputs");
    fc_xform_rules_release(&r);
    fc_source_free(a);
    fc_source_free(b);
}

#ifdef FC_DEBUG
/* Debug builds check a result's invariants (xform.h): each broken by hand is named. */
static void test_xform_debug_check_names_each_broken_invariant(void **state)
{
    struct fc_source *src = open_fixture("full/tiny_vitlm.pt");
    struct fc_xform_result xr;
    size_t at = 0;
    static const char *const rules[][2] = {{"tie", "new.key=norm.bias"},
                                           {"copy", "^norm\\.weight$=norm.w2"}};
    (void)state;
    assert_fc_ok(apply_rules(src, rules, 2, &xr));
    assert_null(fc_xform_broken(&xr, &at));
    const long tie = find(&xr, "new.key"), copy = find(&xr, "norm.w2");
    const long lm = find(&xr, "lm_head.weight"), bias = find(&xr, "norm.bias");
    assert_true(tie >= 0 && copy >= 0 && lm >= 0 && bias >= 0);
    assert_int_equal(xr.specs[tie].alias_of, bias);
    struct fc_xspec *t = &xr.specs[tie];
    /* Each case breaks one thing, checks the message and where, and puts it back. */
    char *key = t->key;
    t->key = xr.specs[0].key;
    assert_string_equal(fc_xform_broken(&xr, &at), "a key twice");
    assert_int_equal(at, tie);
    t->key = key;
    t->alias_of = tie;
    assert_string_equal(fc_xform_broken(&xr, &at), "alias_of is not an earlier spec");
    t->alias_of = bias;
    t->shape[0]++;
    assert_string_equal(fc_xform_broken(&xr, &at),
                        "an alias has another dtype or shape than its target");
    t->shape[0]--;
    t->entry = xr.specs[lm].entry;
    assert_string_equal(fc_xform_broken(&xr, &at), "an alias reads other bytes than its target");
    t->entry = xr.specs[bias].entry;
    const struct fc_op cast = {.kind = FC_OP_CAST, .dtype = FC_DTYPE_FLOAT32};
    assert_fc_ok(fc_xspec_push_op(t, &cast, "t")); /* float32 -> float32: dtype stays */
    assert_string_equal(fc_xform_broken(&xr, &at), "an alias has another op list than its target");
    fc_ops_free(t->ops, t->nops);
    t->ops = NULL;
    t->nops = 0;
    xr.specs[copy].alias_of = 0;
    assert_string_equal(fc_xform_broken(&xr, &at), "a copy is an alias");
    assert_int_equal(at, copy);
    xr.specs[copy].alias_of = -1;
    assert_null(fc_xform_broken(&xr, &at));
    fc_xform_result_release(&xr);
    fc_source_free(src);
}
#endif

/*
 * Every box of a tensor the layout rules build reads the input bytes it
 * should: the two ViT blocks' qkv [24, 8] stacked (qkv [2, 24, 8]), split on
 * dim 1 (q, k, v [2, 8, 8]), q and v joined on dim 2 (qv [2, 8, 16]) and
 * unstacked (qv.0, qv.1 [8, 16]): a virtual tensor of virtual tensors, read
 * at every offset and extent in every dim (boxes narrower than the parts
 * past dim 0 take the row-at-a-time path), against the inputs read whole.
 */
static float layout_qv(const float *qkv, int e, int r, int c)
{
    return qkv[(size_t)e * 24 * 8 + (size_t)(c < 8 ? r : 16 + r) * 8 + (size_t)(c % 8)];
}

static void check_every_box(const struct fc_xspec *s, const float *qkv, int lead)
{
    const int64_t n0 = s->ndim == 3 ? s->shape[0] : 1, n1 = s->shape[s->ndim - 2],
                  n2 = s->shape[s->ndim - 1];
    const int e0 = lead; /* the unstacked slice's index, or -1 */
    float *buf = malloc(sizeof(float) * 2 * 8 * 16);
    assert_non_null(buf);
    for (int64_t o0 = 0; o0 < n0; o0++)
        for (int64_t z0 = 0; o0 + z0 <= n0; z0++)
            for (int64_t o1 = 0; o1 < n1; o1++)
                for (int64_t z1 = 1; o1 + z1 <= n1; z1++)
                    for (int64_t o2 = 0; o2 < n2; o2++)
                        for (int64_t z2 = 1; o2 + z2 <= n2; z2++) {
                            int64_t off[3] = {o0, o1, o2}, size[3] = {z0, z1, z2};
                            const int k = s->ndim == 3 ? 0 : 1;
                            memset(buf, 0xff, sizeof(float) * 2 * 8 * 16);
                            assert_fc_ok(fc_source_read_box(s->src, &s->src->entries[s->entry],
                                                            off + k, size + k, buf));
                            size_t i = 0;
                            for (int64_t a = o0; a < o0 + (k ? 1 : z0); a++)
                                for (int64_t b = o1; b < o1 + z1; b++)
                                    for (int64_t c = o2; c < o2 + z2; c++, i++)
                                        assert_true(buf[i] == layout_qv(qkv, k ? e0 : (int)a,
                                                                        (int)b, (int)c));
                        }
    free(buf);
}

static void test_xform_layout_rules_read_every_box_from_their_parts(void **state)
{
    struct fc_source *src = open_fixture("safetensors/tiny_vitlm.safetensors");
    struct fc_xform_rules r;
    struct fc_xform_result xr;
    float qkv[2 * 24 * 8];
    const int64_t zero[2] = {0, 0}, whole[2] = {24, 8};
    (void)state;
    memset(&r, 0, sizeof(r));
    for (int e = 0; e < 2; e++) {
        char key[64];
        snprintf(key, sizeof(key), "blocks.%d.attn.qkv.weight", e);
        const long i = fc_source_find(src, key);
        assert_true(i >= 0);
        assert_fc_ok(fc_source_read_box(src, &src->entries[i], zero, whole, qkv + e * 24 * 8));
    }
    assert_fc_ok(fc_xform_rules_add(&r, "stack", "^blocks\\.(\\d+)\\.attn\\.qkv\\.weight$=qkv", "t"));
    assert_fc_ok(fc_xform_rules_add(&r, "split", "^qkv$=q,k,v:1", "t"));
    assert_fc_ok(fc_xform_rules_add(&r, "concat", "^q$,v=qv:-1", "t"));
    assert_fc_ok(fc_xform_rules_add(&r, "copy", "^qv$=qv2", "t"));
    assert_fc_ok(fc_xform_rules_add(&r, "unstack", "^qv2$=qv.{}", "t"));
    assert_fc_ok(fc_xform_apply(src, &r, &xr));
    assert_int_equal(find(&xr, "blocks.0.attn.qkv.weight"), -1);
    assert_int_equal(find(&xr, "q"), -1);
    assert_true(find(&xr, "k") >= 0);
    const struct fc_xspec *qv = &xr.specs[find(&xr, "qv")];
    assert_int_equal(qv->ndim, 3);
    assert_int_equal(qv->shape[0], 2);
    assert_int_equal(qv->shape[1], 8);
    assert_int_equal(qv->shape[2], 16);
    check_every_box(qv, qkv, -1);
    for (int e = 0; e < 2; e++) {
        const struct fc_xspec *sl = &xr.specs[find(&xr, e == 0 ? "qv.0" : "qv.1")];
        assert_int_equal(sl->ndim, 2);
        check_every_box(sl, qkv, e);
    }
    fc_xform_result_release(&xr);
    fc_xform_rules_release(&r);
    fc_source_free(src);
}

/* A cast before a stack is carried to the stacked tensor, with the stacked shape. */
static void test_xform_stack_carries_casts(void **state)
{
    struct fc_source *src = open_fixture("safetensors/tiny_vitlm.safetensors");
    struct fc_xform_rules r;
    struct fc_xform_result xr;
    (void)state;
    memset(&r, 0, sizeof(r));
    assert_fc_ok(fc_xform_rules_add(&r, "dtype", "bf16", "t"));
    assert_fc_ok(fc_xform_rules_add(&r, "stack", "^blocks\\.(\\d+)\\.attn\\.qkv\\.weight$=qkv", "t"));
    assert_fc_ok(fc_xform_apply(src, &r, &xr));
    const struct fc_xspec *s = &xr.specs[find(&xr, "qkv")];
    assert_int_equal(s->dtype, FC_DTYPE_BFLOAT16);
    assert_int_equal(s->nops, 1);
    assert_int_equal(s->ops[0].kind, FC_OP_CAST);
    assert_int_equal(s->ops[0].in_dtype, FC_DTYPE_FLOAT32);
    assert_int_equal(s->ops[0].in_ndim, 3);
    assert_int_equal(s->ops[0].in_shape[0], 2);
    assert_int_equal(s->src->entries[s->entry].t.dtype, FC_DTYPE_FLOAT32);
    fc_xform_result_release(&xr);
    fc_xform_rules_release(&r);
    fc_source_free(src);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_xform_applies_rules_in_the_given_order),
        cmocka_unit_test(test_xform_tie_points_dst_at_src_either_way),
        cmocka_unit_test(test_xform_rules_naming_missing_keys_are_usage_errors),
        cmocka_unit_test(test_xform_reads_a_rules_file_with_comments),
        cmocka_unit_test(test_xform_copy_makes_independent_tensors_later_rules_see),
        cmocka_unit_test(test_xform_bad_rules_name_the_rule_and_the_key),
        cmocka_unit_test(test_xform_strip_wrappers_and_several_inputs),
        cmocka_unit_test(test_xform_layout_rules_read_every_box_from_their_parts),
        cmocka_unit_test(test_xform_stack_carries_casts),
#ifdef FC_DEBUG
        cmocka_unit_test(test_xform_debug_check_names_each_broken_invariant),
#endif
    };
    return cmocka_run_group_tests_name("xform", tests, NULL, NULL);
}
