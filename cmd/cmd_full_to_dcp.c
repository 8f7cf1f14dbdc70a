/*
 * cmd_full_to_dcp.c - `fsdpconv full-to-dcp`: options -> fc_full_to_dcp().
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "commands.h"
#include "fc_convert.h"
#include "opt.h"

enum { OPT_RULES = 256, OPT_OPTIM, OPT_OPTIM_SELECT, OPT_LAYOUT };

/* clang-format off */
static const struct fc_opt full_to_dcp_opts[] = {
    {0, 0, "select", "<key>", FC_OPT_RULE, "select", NULL,
     "take one subtree of a nested checkpoint (e.g. model)"},
    {0, 0, "strip-prefix", "<p>", FC_OPT_RULE, "strip-prefix", NULL,
     "remove <p> from keys that start with it (e.g. module.)"},
    {0, 0, "rename", "<re>=<repl>", FC_OPT_RULE | FC_OPT_REPEAT, "rename", NULL,
     "rewrite keys matching the regex; \\1..\\9 name groups"},
    {0, 0, "drop", "<re>", FC_OPT_RULE | FC_OPT_REPEAT, "drop", NULL,
     "leave out keys matching the regex"},
    {0, 0, "conv2d-to-linear", "<key>", FC_OPT_RULE | FC_OPT_REPEAT, "conv2d-to-linear", NULL,
     "reshape a [O,C,kh,kw] conv weight to [O, kh*kw*C] (BAGEL)"},
    {0, 0, "tie", "<dst>=<src>", FC_OPT_RULE | FC_OPT_REPEAT, "tie", NULL,
     "<dst> takes <src>'s data; stored once"},
    {0, 0, "dtype", "<dtype>", FC_OPT_RULE, "dtype", fc_opt_check_float_dtype,
     "cast floating tensors: float32, bfloat16, float16, float64"},
    {0, 0, "add-prefix", "<p>", FC_OPT_RULE, "add-prefix", NULL,
     "prefix every key (e.g. model. for get_state_dict apps)"},
    {0, 0, "replicate", "<re>", FC_OPT_RULE | FC_OPT_REPEAT, "replicate", NULL,
     "store matching tensors whole (buffers) instead of Shard(0)"},
    {OPT_RULES, 0, "rules", "<file>", 0, NULL, NULL,
     "the same rules from a file, one per line, # comments"},
    {OPT_OPTIM, 0, "optim", "<file>", 0, NULL, NULL,
     "a full optimizer state dict (FSDP1 FQN-keyed or torch.optim\n"
     "id-keyed) converted to get_state_dict's FSDP2 layout"},
    {OPT_OPTIM_SELECT, 0, "optim-select", "<key>", 0, NULL, NULL,
     "the optimizer's subtree in <file> or in <input> (e.g. optimizer)"},
    {0, 0, "optim-skip", "<re>", FC_OPT_RULE | FC_OPT_REPEAT, "optim-skip", NULL,
     "model tensors that are not optimizer parameters (frozen\n"
     "parameters, float buffers) when state is keyed by ids"},
    {OPT_LAYOUT, 0, "layout", "(torchtitan|app)", 0, NULL, NULL,
     "top-level keys: torchtitan (model., optimizer.) or app\n"
     "(app.model., app.optim.); default torchtitan with --optim"},
    {0, 0, NULL, NULL, 0, NULL, NULL, NULL},
};
/* clang-format on */

static const struct fc_operand full_to_dcp_operands[] = {
    {"<input>", "torch.save file, safetensors file, index.json, or a directory"},
    {NULL, NULL},
};

static const struct fc_cmd_spec full_to_dcp_spec = {
    "full-to-dcp",
    full_to_dcp_operands,
    1,
    1,
    {fc_cli_job_target_opts, full_to_dcp_opts, fc_cli_job_run_opts, NULL},
    NULL,
};

static int full_to_dcp_option(void *ctx, int id, const char *value)
{
    static const char *const layouts[] = {"torchtitan", "app"};
    struct fc_cli_job *job = ctx;
    switch (id) {
    case OPT_RULES: job->o->rules_file = value; return 0;
    case OPT_OPTIM: job->o->optim = value; return 0;
    case OPT_OPTIM_SELECT: job->o->optim_select = value; return 0;
    case OPT_LAYOUT: {
        int layout;
        if (fc_opt_choice("full-to-dcp", "--layout", value, layouts, 2, &layout) < 0)
            return -1;
        job->o->layout = layout + 1; /* enum fc_layout: 1 torchtitan, 2 app */
        return 0;
    }
    default: return fc_cli_job_option(ctx, id, value);
    }
}

int cmd_full_to_dcp(int argc, char **argv)
{
    struct fc_full_to_dcp_opts o = {.max_memory = (uint64_t)1 << 30, .compress = 0};
    struct fc_cli_job job = {&o, 0, 0, 1};
    struct fc_cmdline cl;
    const int st = fc_opt_parse(&full_to_dcp_spec, argc, argv, full_to_dcp_option, &job, &cl);
    if (st >= 0)
        return st;
    o.input = cl.operands[0];
    o.rules = cl.rules;
    o.nrules = cl.nrules;
    const int status = fc_cli_run_convert("full-to-dcp", &job);
    fc_cmdline_release(&cl);
    return status;
}
