/*
 * cmd_dcp_to_full.c - `fsdpconv dcp-to-full`: its options and top level:
 * export a DCP (or sharded safetensors) checkpoint to one safetensors or
 * torch.save file, shards, or a from_pretrained directory (fc_dcp_to_full()).
 */
#include <stdio.h>

#include "cli.h"
#include "commands.h"
#include "fc_convert.h"
#include "fc_error.h"
#include "opt.h"

enum { OPT_FORMAT = 256, OPT_SHARD, OPT_FORCE, OPT_MAXMEM, OPT_CONFIG_FROM };

/* clang-format off */
static const struct fc_opt dcp_to_full_opts[] = {
    {'o', 'o', "output", "<output>", FC_OPT_REQUIRED, NULL, NULL,
     "model.safetensors, model.pt, or a directory for shards"},
    {OPT_FORMAT, 0, "format", "(safetensors|torch)", 0, NULL, NULL,
     "safetensors or torch (default: from the output name;\n"
     ".pt/.pth/.bin mean torch, anything else safetensors)"},
    {OPT_SHARD, 0, "max-shard-size", "<size>", 0, NULL, NULL,
     "write safetensors files of at most <size> bytes, header\n"
     "included (a bigger tensor gets a file of its own), plus\n"
     "model.safetensors.index.json into the <output> directory;\n"
     "5GB is 5e9 bytes (as Hugging Face), 5GiB and 5G 5*2^30"},
    {OPT_CONFIG_FROM, 0, "config-from", "<hf-dir>", 0, NULL, NULL,
     "<output> becomes a directory from_pretrained loads: the\n"
     "weights plus <hf-dir>'s config.json, generation config and\n"
     "tokenizer files (optimizer state is refused)"},
    {0, 0, "select", "<key>", FC_OPT_RULE | FC_OPT_REPEAT, "select", NULL,
     "export one subtree (e.g. model)"},
    {0, 0, "strip-prefix", "<p>", FC_OPT_RULE | FC_OPT_REPEAT, "strip-prefix", NULL,
     "remove <p> from keys that start with it"},
    {OPT_FORCE, 0, "force", NULL, 0, NULL, NULL, "replace an existing output"},
    {OPT_MAXMEM, 0, "max-memory", "<size>", 0, NULL, NULL, FC_OPT_MAX_MEMORY_HELP},
    {0, 0, NULL, NULL, 0, NULL, NULL, NULL},
};
/* clang-format on */

static const struct fc_operand dcp_to_full_operands[] = {
    {"<checkpoint-dir>", "a DCP, safetensors or torch_checkpointing directory (written by\n"
                         "fsdpconv or by PyTorch)"},
    {NULL, NULL},
};

static const struct fc_cmd_spec dcp_to_full_spec = {
    "dcp-to-full",
    dcp_to_full_operands,
    1,
    1,
    dcp_to_full_opts,
    "Rules run in command-line order, each on the names the ones before it made.",
};

static int dcp_to_full_option(void *ctx, int id, const char *value)
{
    static const char *const formats[] = {"safetensors", "torch"};
    struct fc_dcp_to_full_opts *o = ctx;
    int f;
    switch (id) {
    case 'o': return fc_opt_output(value, &o->output);
    case OPT_FORMAT:
        FC_TRY(fc_opt_choice("--format", value, formats, 2, &f));
        o->format = f == 0 ? FC_EXPORT_SAFETENSORS : FC_EXPORT_TORCH;
        return FC_OK;
    case OPT_SHARD: return fc_opt_size("--max-shard-size", value, 1, &o->max_shard_size);
    case OPT_FORCE: o->force = 1; return FC_OK;
    case OPT_CONFIG_FROM: o->config_from = value; return FC_OK;
    case OPT_MAXMEM: return fc_opt_max_memory(value, &o->max_memory);
    default: return fc_cli_verify_option(id, value, &o->source_flags);
    }
}

int cmd_dcp_to_full(int argc, char **argv)
{
    struct fc_dcp_to_full_opts o = FC_DCP_TO_FULL_OPTS_INIT;
    struct fc_dcp_to_full_result res;
    struct fc_cmdline cl;
    const int st = fc_opt_parse(&dcp_to_full_spec, argc, argv, dcp_to_full_option, &o, &cl);
    if (st != FC_OK)
        return fc_cli_report(st);
    if (o.output == NULL) {
        fc_cmdline_release(&cl);
        return fc_cli_report(fc_cli_usage("missing -o <output>"));
    }
    o.input = cl.operands[0];
    o.rules = cl.rules;
    o.nrules = cl.nrules;
    struct fc_cli_progress prog;
    if (fc_cli_progress_start(&prog)) {
        o.progress = fc_cli_progress_draw;
        o.progress_ctx = &prog;
    }
    const int rc = fc_dcp_to_full(&o, &res);
    fc_cmdline_release(&cl);
    if (rc < 0)
        return fc_cli_report(rc);
    if (res.nvalues_dropped > 0)
        fc_cli_note("%zu non-tensor values are not stored (safetensors holds "
                    "tensors only; use a .pt output to keep them)",
                    res.nvalues_dropped);
    if (res.noptim > 0)
        fc_cli_note("%s holds %zu optimizer state tensors (e.g. '%s') beside the model; --select "
                    "model exports the model alone",
                    o.output, res.noptim, res.optim_key);
    fc_cli_summary(o.output, res.format, res.ntensors, 0, res.bytes_written, res.nfiles, "file",
                   &prog.start);
    return FC_EXIT_OK;
}
