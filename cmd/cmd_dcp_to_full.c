/*
 * cmd_dcp_to_full.c - `fsdpconv dcp-to-full`: export a DCP checkpoint to
 * safetensors or torch.save.
 */
#define _GNU_SOURCE
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "commands.h"
#include "fc_convert.h"
#include "opt.h"

static const char usage[] =
    "usage: fsdpconv dcp-to-full -o <output> [--format (safetensors|torch)]\n"
    "                            [--max-shard-size <size>] [--dtype <dtype>] [--select <key>]\n"
    "                            [--strip-prefix <p>] [--force] [--max-memory <size>]\n"
    "                            <checkpoint-dir>\n"
    "\n"
    "    <checkpoint-dir>         a DCP directory (written by fsdpconv or by PyTorch)\n"
    "    -o, --output <output>    model.safetensors, model.pt, or a directory for shards\n"
    "    --format <f>             safetensors or torch (default: from the output name;\n"
    "                             .pt/.pth/.bin mean torch, anything else safetensors)\n"
    "    --max-shard-size <size>  write safetensors shards of at most <size> bytes plus\n"
    "                             model.safetensors.index.json into the <output> directory\n"
    "    --dtype <dtype>          cast floating tensors: float32, bfloat16, float16, float64\n"
    "    --select <key>           export one subtree (e.g. model)\n"
    "    --strip-prefix <p>       remove <p> from keys that start with it\n"
    "    --force                  replace an existing output\n"
    "    --max-memory <size>      cap on data buffers (default 1GiB)\n"
    "    -h, --help               show this help\n";

enum { OPT_FORMAT = 256, OPT_SHARD, OPT_DTYPE, OPT_SELECT, OPT_STRIP, OPT_FORCE, OPT_MAXMEM };

int cmd_dcp_to_full(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"output", required_argument, NULL, 'o'},
        {"format", required_argument, NULL, OPT_FORMAT},
        {"max-shard-size", required_argument, NULL, OPT_SHARD},
        {"dtype", required_argument, NULL, OPT_DTYPE},
        {"select", required_argument, NULL, OPT_SELECT},
        {"strip-prefix", required_argument, NULL, OPT_STRIP},
        {"force", no_argument, NULL, OPT_FORCE},
        {"max-memory", required_argument, NULL, OPT_MAXMEM},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    struct fc_dcp_to_full_opts o = {.max_memory = (uint64_t)1 << 30};
    struct fc_dcp_to_full_result res;
    struct fc_rule_arg rules[16]; /* three single-valued flags; repeats are refused later */
    size_t nrules = 0;
    fc_dtype dtype;
    int c;
    optind = 0;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "o:h", longopts, NULL)) != -1) {
        switch (c) {
        case 'o': o.output = optarg; break;
        case OPT_FORMAT:
            if (strcmp(optarg, "safetensors") == 0) {
                o.format = FC_EXPORT_SAFETENSORS;
            } else if (strcmp(optarg, "torch") == 0) {
                o.format = FC_EXPORT_TORCH;
            } else {
                fprintf(stderr,
                        "fsdpconv: dcp-to-full: invalid value for --format: '%s' "
                        "(expected safetensors or torch)\n",
                        optarg);
                goto usage_fail;
            }
            break;
        case OPT_SHARD:
            if (fc_opt_size("dcp-to-full", "--max-shard-size", optarg, &o.max_shard_size) < 0)
                goto usage_fail;
            if (o.max_shard_size == 0) {
                fputs("fsdpconv: dcp-to-full: invalid value for --max-shard-size (must be > 0)\n",
                      stderr);
                goto usage_fail;
            }
            break;
        case OPT_DTYPE:
            if (fc_opt_float_dtype("dcp-to-full", "--dtype", optarg, &dtype) < 0)
                goto usage_fail;
            /* fall through - recorded as a rule */
        case OPT_SELECT:
        case OPT_STRIP:
            if (nrules == sizeof(rules) / sizeof(rules[0]))
                return fc_cli_usage_error("dcp-to-full", usage, "too many options");
            rules[nrules++] = (struct fc_rule_arg){c == OPT_DTYPE    ? "dtype"
                                                   : c == OPT_SELECT ? "select"
                                                                     : "strip-prefix",
                                                   optarg};
            break;
        case OPT_FORCE: o.force = 1; break;
        case OPT_MAXMEM:
            if (fc_opt_size("dcp-to-full", "--max-memory", optarg, &o.max_memory) < 0)
                goto usage_fail;
            break;
        case 'h': fputs(usage, stdout); return FC_EXIT_OK;
        default:
            return fc_cli_usage_error("dcp-to-full", usage, "unknown option or missing value: '%s'",
                                      argv[optind - 1]);
        }
    }
    if (argc - optind != 1)
        return fc_cli_usage_error("dcp-to-full", usage,
                                  argc - optind == 0 ? "missing <checkpoint-dir>"
                                                     : "too many arguments");
    if (o.output == NULL)
        return fc_cli_usage_error("dcp-to-full", usage, "missing -o <output>");
    if (o.max_memory < 4096) {
        fputs("fsdpconv: dcp-to-full: invalid value for --max-memory (must be >= 4KiB)\n", stderr);
        goto usage_fail;
    }
    o.input = argv[optind];
    o.rules = rules;
    o.nrules = nrules;
    struct fc_cli_progress prog = {.active = 0};
    if (fc_cli_verbosity >= 0 && isatty(STDERR_FILENO)) {
        clock_gettime(CLOCK_MONOTONIC, &prog.start);
        o.progress = fc_cli_progress_draw;
        o.progress_ctx = &prog;
    }
    const int rc = fc_dcp_to_full(&o, &res);
    if (rc < 0)
        return fc_cli_report(rc);
    if (res.nvalues_dropped > 0)
        fc_cli_note("dcp-to-full: %zu non-tensor values are not stored (safetensors holds "
                    "tensors only; use a .pt output to keep them)",
                    res.nvalues_dropped);
    if (fc_cli_verbosity > 0)
        fc_cli_note("dcp-to-full: wrote %s: %zu tensors in %zu files, %" PRIu64 " bytes", o.output,
                    res.ntensors, res.nfiles, res.bytes_written);
    return FC_EXIT_OK;
usage_fail:
    fputs(usage, stderr);
    return FC_EXIT_USAGE;
}
