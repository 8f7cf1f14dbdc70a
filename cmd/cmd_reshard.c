/*
 * cmd_reshard.c - `fsdpconv reshard`: a DCP or safetensors checkpoint at one
 * world size or mesh -> another, run by fc_reshard() (the write job it shares
 * with full-to-dcp); only its own options (--replicate, --decompress) and its
 * defaults are here, the job options and the run are job.c's.
 */
#include <stdio.h>

#include "cli.h"
#include "commands.h"
#include "fc_convert.h"
#include "fc_error.h"
#include "opt.h"

enum { OPT_DECOMPRESS = 256 };

/* clang-format off */
static const struct fc_opt reshard_opts[] = {
    {0, 0, "replicate", "<re>", FC_OPT_RULE | FC_OPT_REPEAT, "replicate", NULL,
     "store matching tensors whole instead of Shard(0)"},
    {OPT_DECOMPRESS, 0, "decompress", NULL, 0, NULL, NULL,
     "write plain items (default: keep the input's compression)"},
    {0, 0, NULL, NULL, 0, NULL, NULL, NULL},
};
/* clang-format on */

static const struct fc_operand reshard_operands[] = {
    {"<checkpoint-dir>", "a DCP, safetensors or torch_checkpointing directory (written by\n"
                         "fsdpconv or by PyTorch)"},
    {NULL, NULL},
};

static const struct fc_cmd_spec reshard_spec = {
    "reshard",
    reshard_operands,
    1,
    1,
    reshard_opts,
    "Rules run in command-line order, each on the names the ones before it "
    "made.\n\n" FC_CLI_TP_EPILOG,
};

static int reshard_option(void *ctx, int id, const char *value)
{
    struct fc_cli_job *job = ctx;
    if (id == OPT_DECOMPRESS) {
        job->o->compress = 0;
        return FC_OK;
    }
    return fc_cli_job_option(ctx, id, value);
}

int cmd_reshard(int argc, char **argv)
{
    struct fc_full_to_dcp_opts o = FC_RESHARD_OPTS_INIT;
    struct fc_cli_job job = FC_CLI_JOB_INIT(&o);
    job.run = fc_reshard;
    struct fc_cmdline cl;
    const int rc = fc_opt_parse(&reshard_spec, argc, argv, reshard_option, &job, &cl);
    if (rc != FC_OK)
        return fc_cli_report(rc);
    o.input = cl.operands[0];
    o.rules = cl.rules;
    o.nrules = cl.nrules;
    const int status = fc_cli_run_convert(&job);
    fc_cmdline_release(&cl);
    return status;
}
