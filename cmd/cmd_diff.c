/*
 * cmd_diff.c - `fsdpconv diff A B`: its options, the top level, and the two
 * printers of fc_diff()'s result (a table, or one JSON object).  Exit 0
 * when equal, 1 when different (FC_CMD_EXIT_DIFF: other failures exit 4).
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "cli.h"
#include "commands.h"
#include "fc_convert.h"
#include "fc_error.h"
#include "opt.h"

enum { OPT_JSON = 256, OPT_KEY, OPT_MAXMEM };

/* clang-format off */
static const struct fc_opt diff_opts[] = {
    {OPT_JSON, 0, "json", NULL, 0, NULL, NULL, "print one JSON object"},
    {OPT_KEY, 0, "key", "<regex>", 0, NULL, NULL, "compare only keys matching the regex"},
    {OPT_MAXMEM, 0, "max-memory", "<size>", 0, NULL, NULL, FC_OPT_MAX_MEMORY_HELP},
    {0, 0, NULL, NULL, 0, NULL, NULL, NULL},
};
/* clang-format on */

static const struct fc_operand diff_operands[] = {
    {"<a>", "the first checkpoint, in any supported format (torch.save,\n"
            "safetensors, index.json, directories, DCP directories)"},
    {"<b>", "the second checkpoint"},
    {NULL, NULL},
};

static const struct fc_cmd_spec diff_spec = {
    "diff",
    diff_operands,
    2,
    2,
    diff_opts,
    "Exit status: 0 equal, 1 different, 2 usage error, 3 invalid input, 4 other failure.\n",
};

struct diff_cli {
    struct fc_diff_opts o;
    int json;
};

static int diff_option(void *ctx, int id, const char *value)
{
    struct diff_cli *d = ctx;
    switch (id) {
    case OPT_JSON: d->json = 1; return FC_OK;
    case OPT_KEY: d->o.key_regex = value; return FC_OK;
    case OPT_MAXMEM: return fc_opt_max_memory(value, &d->o.max_memory);
    default: return fc_cli_verify_option(id, value, &d->o.source_flags);
    }
}

static const char *const kind_names[] = {
    [FC_DIFF_ONLY_A] = "only_in_a", [FC_DIFF_ONLY_B] = "only_in_b", [FC_DIFF_KIND] = "kind",
    [FC_DIFF_DTYPE] = "dtype",      [FC_DIFF_SHAPE] = "shape",      [FC_DIFF_TENSOR_DATA] = "data",
    [FC_DIFF_VALUE] = "value",
};

static void print_json(const struct fc_diff_opts *o, const struct fc_diff_result *r)
{
    json_t *root = json_object(), *items = json_array();
    json_object_set_new(root, "equal", json_boolean(r->nitems == 0));
    json_object_set_new(root, "a", json_string(o->a));
    json_object_set_new(root, "b", json_string(o->b));
    json_object_set_new(root, "format_a", json_string(r->format_a));
    json_object_set_new(root, "format_b", json_string(r->format_b));
    json_object_set_new(root, "compared", json_integer((json_int_t)r->ncompared));
    for (size_t i = 0; i < r->nitems; i++) {
        const struct fc_diff_item *it = &r->items[i];
        json_t *x = json_object();
        json_object_set_new(x, "key", json_string(it->key));
        json_object_set_new(x, "kind", json_string(kind_names[it->kind]));
        json_object_set_new(x, "detail", json_string(it->detail));
        if (it->kind == FC_DIFF_TENSOR_DATA || it->kind == FC_DIFF_DTYPE) {
            json_object_set_new(x, "ndiff", json_integer((json_int_t)it->ndiff));
            json_object_set_new(x, "numel", json_integer((json_int_t)it->numel));
            json_object_set_new(x, "max_abs_diff",
                                isnan(it->max_abs_diff)   ? json_null()
                                : isinf(it->max_abs_diff) ? json_string("inf")
                                                          : json_real(it->max_abs_diff));
        }
        json_array_append_new(items, x);
    }
    json_object_set_new(root, "differences", items);
    json_dumpf(root, stdout, JSON_INDENT(1) | JSON_ENSURE_ASCII);
    fputc('\n', stdout);
    json_decref(root);
}

static void print_table(const struct fc_diff_result *r)
{
    for (size_t i = 0; i < r->nitems; i++) {
        const struct fc_diff_item *it = &r->items[i];
        printf("%-9s  %s  %s", kind_names[it->kind], it->key, it->detail);
        if (!isnan(it->max_abs_diff))
            printf("  max|a-b| %.9g", it->max_abs_diff);
        putchar('\n');
    }
    printf("%zu keys compared, %zu differences: %s\n", r->ncompared, r->nitems,
           r->nitems == 0 ? "equal" : "different");
}

int cmd_diff(int argc, char **argv)
{
    struct diff_cli d = {.o = FC_DIFF_OPTS_INIT, .json = 0};
    struct fc_diff_result r;
    struct fc_cmdline cl;
    const int st = fc_opt_parse(&diff_spec, argc, argv, diff_option, &d, &cl);
    if (st != FC_OK)
        return fc_cli_report(st);
    d.o.a = cl.operands[0];
    d.o.b = cl.operands[1];
    fc_cmdline_release(&cl);
    const struct fc_diff_opts o = d.o;
    const int json = d.json;
    const int rc = fc_diff(&o, &r);
    if (rc < 0)
        return fc_cli_report(rc);
    if (json)
        print_json(&o, &r);
    else
        print_table(&r);
    const int equal = r.nitems == 0;
    fc_diff_result_release(&r);
    const int flushed = fc_cli_flush_stdout();
    if (flushed < 0)
        return fc_cli_report(flushed);
    return equal ? FC_EXIT_OK : FC_EXIT_FAILURE;
}
