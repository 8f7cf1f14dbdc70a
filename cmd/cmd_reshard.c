/*
 * cmd_reshard.c - `fsdpconv reshard`: a DCP checkpoint at one world size or
 * mesh -> another, through the same plan/executor as full-to-dcp.
 */
#define _GNU_SOURCE
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "commands.h"
#include "fc_convert.h"
#include "opt.h"

static const char usage[] =
    "usage: fsdpconv reshard -o <dir> (--world-size <n> | --mesh replicate=<r>,shard=<s>)\n"
    "                        [--dtype <dtype>] [--replicate <re>]... [--compress zstd[:<level>]]\n"
    "                        [--decompress] [--dry-run] [--force] [--max-memory <size>]\n"
    "                        [--threads <n>] [--engine (cpu|cuda)] [--nproc <p>] <checkpoint-dir>\n"
    "\n"
    "    <checkpoint-dir>         a DCP directory (written by fsdpconv or by PyTorch)\n"
    "    -o, --output <dir>       DCP directory to create (written atomically)\n"
    "    --world-size <n>         FSDP2 on a 1-D mesh of n ranks: Shard(0), torch.chunk semantics\n"
    "    --mesh replicate=<r>,shard=<s>\n"
    "                             HSDP: (Replicate(), Shard(0)) over r x s ranks\n"
    "    --dtype <dtype>          cast floating tensors: float32, bfloat16, float16, float64\n"
    "    --replicate <re>         store matching tensors whole instead of Shard(0)\n"
    "    --compress zstd[:<level>]\n"
    "                             zstd-compress every item (torch's stream.zstd/1 extension)\n"
    "    --decompress             write plain items (default: keep the input's compression)\n"
    "    --dry-run                print the plan and write nothing\n"
    "    --force                  replace an existing output directory\n"
    "    --max-memory <size>      cap on data buffers (default 1GiB)\n"
    "    --threads <n>            parallel writers (default: number of CPUs, at most 8)\n"
    "    --nproc <p>              worker processes (one per local GPU): rank 0 reads and\n"
    "                             transforms, every worker writes the rank files it owns\n"
    "    --engine <e>             kernels on cpu or cuda (default: cuda when built with CUDA\n"
    "                             and a GPU is visible, else cpu)\n"
    "    -h, --help               show this help\n";

enum { OPT_DTYPE = 256, OPT_REPLICATE, OPT_DECOMPRESS };

int cmd_reshard(int argc, char **argv)
{
    static const struct option longopts[] = {
        FC_JOB_LONGOPTS,
        {"dtype", required_argument, NULL, OPT_DTYPE},
        {"replicate", required_argument, NULL, OPT_REPLICATE},
        {"decompress", no_argument, NULL, OPT_DECOMPRESS},
        {NULL, 0, NULL, 0},
    };
    struct fc_full_to_dcp_opts o = {
        .max_memory = (uint64_t)1 << 30, .compress = -1, .require_dcp = 1};
    struct fc_rule_arg rules[64];
    size_t nrules = 0;
    struct fc_cli_job_counts n = {0, 0, 1};
    fc_dtype dtype;
    int c;
    optind = 0;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "o:h", longopts, NULL)) != -1) {
        switch (c) {
        case 'o': o.output = optarg; break;
        case OPT_DTYPE:
            if (fc_opt_float_dtype("reshard", "--dtype", optarg, &dtype) < 0)
                goto usage_fail;
            /* fall through - recorded as a rule */
        case OPT_REPLICATE:
            if (nrules == sizeof(rules) / sizeof(rules[0]))
                return fc_cli_usage_error("reshard", usage, "too many rules");
            rules[nrules++] = (struct fc_rule_arg){c == OPT_DTYPE ? "dtype" : "replicate", optarg};
            break;
        case OPT_DECOMPRESS: o.compress = 0; break;
        case 'h': fputs(usage, stdout); return FC_EXIT_OK;
        default:
            switch (fc_cli_job_option("reshard", c, optarg, &o, &n)) {
            case 1: continue;
            case -1: goto usage_fail;
            default: break;
            }
            return fc_cli_usage_error("reshard", usage, "unknown option or missing value: '%s'",
                                      argv[optind - 1]);
        }
    }
    if (argc - optind != 1)
        return fc_cli_usage_error("reshard", usage,
                                  argc - optind == 0 ? "missing <checkpoint-dir>"
                                                     : "too many arguments");
    o.input = argv[optind];
    o.rules = rules;
    o.nrules = nrules;
    return fc_cli_run_convert("reshard", usage, &o, &n);
usage_fail:
    fputs(usage, stderr);
    return FC_EXIT_USAGE;
}
