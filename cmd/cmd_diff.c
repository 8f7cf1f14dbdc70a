/*
 * cmd_diff.c - `fsdpconv diff A B`: exit 0 when equal, 1 when different.
 */
#define _GNU_SOURCE
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "cli.h"
#include "commands.h"
#include "fc_convert.h"
#include "fc_error.h"
#include "opt.h"

static const char usage[] =
    "usage: fsdpconv diff [--json] [--key <regex>] [--max-memory <size>] <a> <b>\n"
    "\n"
    "    <a>, <b>              checkpoints in any supported format (torch.save, safetensors,\n"
    "                          index.json, directories, DCP directories)\n"
    "    --json                print one JSON object\n"
    "    --key <regex>         compare only keys matching the regex\n"
    "    --max-memory <size>   cap on data buffers (default 1GiB)\n"
    "    -h, --help            show this help\n"
    "\n"
    "Exit status: 0 equal, 1 different, 2 usage error, 3 invalid input, 4 other failure.\n";

enum { OPT_JSON = 256, OPT_KEY, OPT_MAXMEM };

static const char *const kind_names[] = {
    [FC_DIFF_ONLY_A] = "only_in_a", [FC_DIFF_ONLY_B] = "only_in_b", [FC_DIFF_KIND] = "kind",
    [FC_DIFF_DTYPE] = "dtype",      [FC_DIFF_SHAPE] = "shape",      [FC_DIFF_TENSOR_DATA] = "data",
    [FC_DIFF_VALUE] = "value",
};

/* diff keeps 1 for "different": every failure exits with 2, 3 or 4. */
static int diff_failure(int rc)
{
    const int status = fc_cli_report(rc);
    return status == FC_EXIT_FAILURE ? 4 : status;
}

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
    static const struct option longopts[] = {
        {"json", no_argument, NULL, OPT_JSON},
        {"key", required_argument, NULL, OPT_KEY},
        {"max-memory", required_argument, NULL, OPT_MAXMEM},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    struct fc_diff_opts o = {.max_memory = (uint64_t)1 << 30};
    struct fc_diff_result r;
    int json = 0, c;
    optind = 0;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (c) {
        case OPT_JSON: json = 1; break;
        case OPT_KEY: o.key_regex = optarg; break;
        case OPT_MAXMEM:
            if (fc_opt_size("diff", "--max-memory", optarg, &o.max_memory) < 0 ||
                o.max_memory < 4096) {
                fputs(usage, stderr);
                return FC_EXIT_USAGE;
            }
            break;
        case 'h': fputs(usage, stdout); return FC_EXIT_OK;
        default:
            return fc_cli_usage_error("diff", usage, "unknown option or missing value: '%s'",
                                      argv[optind - 1]);
        }
    }
    if (argc - optind != 2)
        return fc_cli_usage_error("diff", usage, "need exactly two checkpoints <a> <b>");
    o.a = argv[optind];
    o.b = argv[optind + 1];
    const int rc = fc_diff(&o, &r);
    if (rc < 0)
        return diff_failure(rc);
    if (json)
        print_json(&o, &r);
    else
        print_table(&r);
    const int equal = r.nitems == 0;
    fc_diff_result_release(&r);
    if (fflush(stdout) != 0)
        return diff_failure(fc_error_set(FC_EIO, "writing to stdout failed"));
    return equal ? FC_EXIT_OK : FC_EXIT_FAILURE;
}
