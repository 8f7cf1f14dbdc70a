/*
 * cmd_full_to_dcp.c - `fsdpconv full-to-dcp`: its own options (the
 * full-checkpoint rules, --optim, --layout) and its [<prefix>=]<input>
 * operands; the job options and the run are job.c's, shared with reshard.
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "commands.h"
#include "fc_alloc.h"
#include "fc_convert.h"
#include "fc_error.h"
#include "opt.h"

enum { OPT_OPTIM = 256, OPT_OPTIM_SELECT, OPT_LAYOUT };

/* clang-format off */
static const struct fc_opt full_to_dcp_opts[] = {
    {0, 0, "select", "<key>", FC_OPT_RULE | FC_OPT_REPEAT, "select", NULL,
     "take one subtree of a nested checkpoint (e.g. model)"},
    {0, 0, "strip-prefix", "<p>", FC_OPT_RULE | FC_OPT_REPEAT, "strip-prefix", NULL,
     "remove <p> from keys that start with it (e.g. module.)"},
    FC_OPT_OP_RULES(FC_RULE_SCOPE_IMPORT),
    {0, 0, "tie", "<dst>=<src>", FC_OPT_RULE | FC_OPT_REPEAT, "tie", NULL,
     "<dst> = <src>: <dst> stores <src>'s bytes (once); an existing\n"
     "<dst> must have <src>'s dtype and shape"},
    {0, 0, "add-prefix", "<p>", FC_OPT_RULE | FC_OPT_REPEAT, "add-prefix", NULL,
     "prefix every key (e.g. model. for get_state_dict apps)"},
    {0, 0, "replicate", "<re>", FC_OPT_RULE | FC_OPT_REPEAT, "replicate", NULL,
     "store matching tensors whole (buffers) instead of Shard(0)"},
    {0, 0, "rules", "<file>", FC_OPT_RULE | FC_OPT_REPEAT, "rules", NULL,
     "rules from a file, one \"op arg\" per line, # comments;\n"
     "they run where the option stands"},
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
    {"[<prefix>=]<input>...", "torch.save file, safetensors file, index.json, or a directory;\n"
                              "<prefix> (no '/') goes before every key of that input\n"
                              "(a path with '=' in it: write it as ./path)"},
    {NULL, NULL},
};

static const struct fc_cmd_spec full_to_dcp_spec = {
    "full-to-dcp",
    full_to_dcp_operands,
    1,
    -1,
    full_to_dcp_opts,
    "Rules run in command-line order, each on the names the ones before it made\n"
    "(like sed -e).  Directions: --tie <dst>=<src> assigns, like dst = src;\n"
    "--rename and --copy read <from>=<to>.\n\n" FC_CLI_TP_EPILOG,
};

/* "PREFIX=PATH" or "PATH" ("./a=b" and "/a=b" are paths); FC_OK or an error. */
static int parse_input(const char *arg, struct fc_input_arg *in, char **owned)
{
    const char *eq = strchr(arg, '=');
    *owned = NULL;
    in->prefix = NULL;
    in->path = arg;
    if (eq == NULL || arg[0] == '/' || strncmp(arg, "./", 2) == 0)
        return FC_OK;
    if (eq == arg || memchr(arg, '/', (size_t)(eq - arg)) != NULL || eq[1] == '\0')
        return fc_cli_usage("input '%s': expected PREFIX=PATH with a PREFIX without '/' (a path "
                            "with '=' in it: write it as ./path)",
                            arg);
    *owned = fc_strndup(arg, (size_t)(eq - arg));
    if (*owned == NULL)
        return fc_error_set(FC_ENOMEM, "out of memory");
    in->prefix = *owned;
    in->path = eq + 1;
    return FC_OK;
}

static int full_to_dcp_option(void *ctx, int id, const char *value)
{
    static const char *const layouts[] = {"torchtitan", "app"};
    struct fc_cli_job *job = ctx;
    switch (id) {
    case OPT_OPTIM: job->o->optim = value; return FC_OK;
    case OPT_OPTIM_SELECT: job->o->optim_select = value; return FC_OK;
    case OPT_LAYOUT: {
        int layout;
        FC_TRY(fc_opt_choice("--layout", value, layouts, 2, &layout));
        job->o->layout = layout + 1; /* enum fc_layout: 1 torchtitan, 2 app */
        return FC_OK;
    }
    default: return fc_cli_job_option(ctx, id, value);
    }
}

int cmd_full_to_dcp(int argc, char **argv)
{
    struct fc_full_to_dcp_opts o = FC_FULL_TO_DCP_OPTS_INIT;
    struct fc_cli_job job = FC_CLI_JOB_INIT(&o);
    struct fc_cmdline cl;
    int rc = fc_opt_parse(&full_to_dcp_spec, argc, argv, full_to_dcp_option, &job, &cl);
    if (rc != FC_OK)
        return fc_cli_report(rc);
    const size_t n = (size_t)cl.noperands;
    struct fc_input_arg *in = fc_calloc(n, sizeof(*in));
    char **prefixes = fc_calloc(n, sizeof(*prefixes));
    int status;
    rc = in != NULL && prefixes != NULL ? FC_OK : fc_error_set(FC_ENOMEM, "out of memory");
    for (size_t i = 0; rc == FC_OK && i < n; i++)
        rc = parse_input(cl.operands[i], &in[i], &prefixes[i]);
    if (rc != FC_OK) {
        status = fc_cli_report(rc);
        goto done;
    }
    o.input = in[0].path;
    o.inputs = in;
    o.ninputs = n;
    o.rules = cl.rules;
    o.nrules = cl.nrules;
    status = fc_cli_run_convert(&job);
done:
    for (size_t i = 0; prefixes != NULL && i < n; i++)
        fc_free(prefixes[i]);
    fc_free(prefixes);
    fc_free(in);
    fc_cmdline_release(&cl);
    return status;
}
