/*
 * cmd_full_to_dcp.c - `fsdpconv full-to-dcp`: options -> fc_full_to_dcp().
 */
#define _GNU_SOURCE
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "commands.h"
#include "fc_alloc.h"
#include "fc_convert.h"
#include "opt.h"

static const char usage[] =
    "usage: fsdpconv full-to-dcp -o <dir> (--world-size <n> | --mesh replicate=<r>,shard=<s>)\n"
    "                            [--select <key>] [--strip-prefix <p>] [--rename <re>=<repl>]...\n"
    "                            [--drop <re>]... [--conv2d-to-linear <key>]... [--tie "
    "<dst>=<src>]...\n"
    "                            [--dtype <dtype>] [--add-prefix <p>] [--replicate <re>]...\n"
    "                            [--rules <file>] [--dry-run] [--force] [--max-memory <size>]\n"
    "                            [--threads <n>] [--compress zstd[:<level>]] [--optim <file>]\n"
    "                            [--optim-select <key>] [--optim-skip <re>]...\n"
    "                            [--layout (torchtitan|app)] [--engine (cpu|cuda)] [--nproc <p>] "
    "<input>\n"
    "\n"
    "    <input>                  torch.save file, safetensors file, index.json, or a directory\n"
    "    -o, --output <dir>       DCP directory to create (written atomically)\n"
    "    --world-size <n>         FSDP2 on a 1-D mesh of n ranks: Shard(0), torch.chunk semantics\n"
    "    --mesh replicate=<r>,shard=<s>\n"
    "                             HSDP: (Replicate(), Shard(0)) over r x s ranks\n"
    "    --select <key>           take one subtree of a nested checkpoint (e.g. model)\n"
    "    --strip-prefix <p>       remove <p> from keys that start with it (e.g. module.)\n"
    "    --rename <re>=<repl>     rewrite keys matching the regex; \\1..\\9 name groups\n"
    "    --drop <re>              leave out keys matching the regex\n"
    "    --conv2d-to-linear <key> reshape a [O,C,kh,kw] conv weight to [O, kh*kw*C] (BAGEL)\n"
    "    --tie <dst>=<src>        <dst> takes <src>'s data; stored once\n"
    "    --dtype <dtype>          cast floating tensors: float32, bfloat16, float16, float64\n"
    "    --add-prefix <p>         prefix every key (e.g. model. for get_state_dict apps)\n"
    "    --replicate <re>         store matching tensors whole (buffers) instead of Shard(0)\n"
    "    --rules <file>           the same rules from a file, one per line, # comments\n"
    "    --dry-run                print the plan (boxes, files, offsets) and write nothing\n"
    "    --force                  replace an existing output directory\n"
    "    --max-memory <size>      cap on data buffers (default 1GiB)\n"
    "    --threads <n>            parallel writers (default: number of CPUs, at most 8)\n"
    "    --compress zstd[:<level>]\n"
    "                             zstd-compress every item (torch's stream.zstd/1 extension)\n"
    "    --optim <file>           a full optimizer state dict (FSDP1 FQN-keyed or torch.optim\n"
    "                             id-keyed) converted to get_state_dict's FSDP2 layout\n"
    "    --optim-select <key>     the optimizer's subtree in <file> or in <input> (e.g. "
    "optimizer)\n"
    "    --optim-skip <re>        model tensors that are not optimizer parameters (frozen\n"
    "                             parameters, float buffers) when state is keyed by ids\n"
    "    --layout <l>             top-level keys: torchtitan (model., optimizer.) or app\n"
    "                             (app.model., app.optim.); default torchtitan with --optim\n"
    "    --nproc <p>              worker processes (one per local GPU): rank 0 reads and\n"
    "                             transforms, every worker writes the rank files it owns\n"
    "    --engine <e>             kernels on cpu or cuda (default: cuda when built with CUDA\n"
    "                             and a GPU is visible, else cpu)\n"
    "    -h, --help               show this help\n";

enum {
    OPT_SELECT = 256,
    OPT_STRIP,
    OPT_RENAME,
    OPT_DROP,
    OPT_CONV,
    OPT_TIE,
    OPT_DTYPE,
    OPT_ADD,
    OPT_REPLICATE,
    OPT_OPTIM_SKIP,
    OPT_RULES,
    OPT_OPTIM,
    OPT_OPTIM_SELECT,
    OPT_LAYOUT
};

static int add_rule(struct fc_rule_arg **rules, size_t *n, const char *op, const char *arg)
{
    struct fc_rule_arg *r = fc_reallocarray(*rules, *n + 1, sizeof(**rules));
    if (r == NULL)
        return -1;
    r[*n] = (struct fc_rule_arg){op, arg};
    *rules = r;
    (*n)++;
    return 0;
}

int cmd_full_to_dcp(int argc, char **argv)
{
    static const struct option longopts[] = {
        FC_JOB_LONGOPTS,
        {"select", required_argument, NULL, OPT_SELECT},
        {"strip-prefix", required_argument, NULL, OPT_STRIP},
        {"rename", required_argument, NULL, OPT_RENAME},
        {"drop", required_argument, NULL, OPT_DROP},
        {"conv2d-to-linear", required_argument, NULL, OPT_CONV},
        {"tie", required_argument, NULL, OPT_TIE},
        {"dtype", required_argument, NULL, OPT_DTYPE},
        {"add-prefix", required_argument, NULL, OPT_ADD},
        {"replicate", required_argument, NULL, OPT_REPLICATE},
        {"optim-skip", required_argument, NULL, OPT_OPTIM_SKIP},
        {"rules", required_argument, NULL, OPT_RULES},
        {"optim", required_argument, NULL, OPT_OPTIM},
        {"optim-select", required_argument, NULL, OPT_OPTIM_SELECT},
        {"layout", required_argument, NULL, OPT_LAYOUT},
        {NULL, 0, NULL, 0},
    };
    static const char *const rule_ops[] = {
        [OPT_SELECT - OPT_SELECT] = "select",         [OPT_STRIP - OPT_SELECT] = "strip-prefix",
        [OPT_RENAME - OPT_SELECT] = "rename",         [OPT_DROP - OPT_SELECT] = "drop",
        [OPT_CONV - OPT_SELECT] = "conv2d-to-linear", [OPT_TIE - OPT_SELECT] = "tie",
        [OPT_DTYPE - OPT_SELECT] = "dtype",           [OPT_ADD - OPT_SELECT] = "add-prefix",
        [OPT_REPLICATE - OPT_SELECT] = "replicate",   [OPT_OPTIM_SKIP - OPT_SELECT] = "optim-skip",
    };
    struct fc_full_to_dcp_opts o = {
        .replicate = 0, .shard = 0, .max_memory = (uint64_t)1 << 30, .compress = 0};
    struct fc_rule_arg *rules = NULL;
    size_t nrules = 0;
    struct fc_cli_job_counts n = {0, 0, 1};
    fc_dtype dtype;
    int c, status;
    optind = 0;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "o:h", longopts, NULL)) != -1) {
        switch (c) {
        case 'o': o.output = optarg; break;
        case OPT_DTYPE:
            if (fc_opt_float_dtype("full-to-dcp", "--dtype", optarg, &dtype) < 0)
                goto usage_fail;
            /* fall through - recorded as a rule like the others */
        case OPT_SELECT:
        case OPT_STRIP:
        case OPT_RENAME:
        case OPT_DROP:
        case OPT_CONV:
        case OPT_TIE:
        case OPT_ADD:
        case OPT_REPLICATE:
        case OPT_OPTIM_SKIP:
            if (add_rule(&rules, &nrules, rule_ops[c - OPT_SELECT], optarg) < 0) {
                fc_free(rules);
                fputs("fsdpconv: full-to-dcp: out of memory\n", stderr);
                return FC_EXIT_FAILURE;
            }
            break;
        case OPT_RULES: o.rules_file = optarg; break;
        case OPT_OPTIM: o.optim = optarg; break;
        case OPT_OPTIM_SELECT: o.optim_select = optarg; break;
        case OPT_LAYOUT:
            if (strcmp(optarg, "torchtitan") == 0) {
                o.layout = 1;
            } else if (strcmp(optarg, "app") == 0) {
                o.layout = 2;
            } else {
                fprintf(stderr,
                        "fsdpconv: full-to-dcp: invalid value for --layout: '%s' "
                        "(expected torchtitan or app)\n",
                        optarg);
                goto usage_fail;
            }
            break;
        case 'h':
            fc_free(rules);
            fputs(usage, stdout);
            return FC_EXIT_OK;
        default:
            switch (fc_cli_job_option("full-to-dcp", c, optarg, &o, &n)) {
            case 1: continue;
            case -1: goto usage_fail;
            default: break;
            }
            fc_free(rules);
            return fc_cli_usage_error("full-to-dcp", usage, "unknown option or missing value: '%s'",
                                      argv[optind - 1]);
        }
    }
    if (argc - optind != 1) {
        fc_free(rules);
        return fc_cli_usage_error("full-to-dcp", usage,
                                  argc - optind == 0 ? "missing <input>" : "too many arguments");
    }
    o.input = argv[optind];
    o.rules = rules;
    o.nrules = nrules;
    status = fc_cli_run_convert("full-to-dcp", usage, &o, &n);
    fc_free(rules);
    return status;
usage_fail:
    fc_free(rules);
    fputs(usage, stderr);
    return FC_EXIT_USAGE;
}
