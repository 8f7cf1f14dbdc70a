/*
 * commands.h - the subcommand entry points.  Each takes the argument vector
 * with the subcommand name as argv[0], parses it against its one option
 * table (opt.h) and the shared tables its command-table row names (main.c),
 * calls one convert/ entry point and returns the process exit status: it is
 * the command's top level, where fc_cli_report() turns codes into statuses.
 * `--help` prints its usage to stdout.
 */
#ifndef FC_COMMANDS_H
#define FC_COMMANDS_H

#include <stdio.h>

#include "opt.h"

int cmd_full_to_dcp(int argc, char **argv);
int cmd_inspect(int argc, char **argv);
int cmd_reshard(int argc, char **argv);
int cmd_dcp_to_full(int argc, char **argv);
int cmd_diff(int argc, char **argv);
int cmd_help(int argc, char **argv);

/*
 * The options of the FC_CMD_JOB commands, full-to-dcp and reshard (job.c):
 * the output and mesh (shown first in their usage) and the run options (shown
 * last).  Their ids are handled by fc_cli_job_option().
 */
extern const struct fc_opt fc_cli_job_target_opts[];
extern const struct fc_opt fc_cli_job_run_opts[];

/*
 * The transform rules every FC_CMD_RULES command takes (full-to-dcp, reshard,
 * dcp-to-full): rename, drop, copy, strip-wrappers, stack, concat, split,
 * unstack, resize-rows, dtype.
 * They run in command-line order with the command's other rules.
 */
extern const struct fc_opt fc_cli_pipeline_opts[];

#define FC_CLI_MAX_TP_RULES 256

/* The tensor-parallel help text full-to-dcp and reshard print after their options. */
#define FC_CLI_TP_EPILOG                                                                           \
    "Tensor parallelism (--mesh ...,tp=<t>): FSDP2 shards dim 0 over dp_shard; a --tp rule\n"      \
    "also shards a key over tp.  For nn.Linear (weight [out, in]) ColwiseParallel is dim 0\n"      \
    "(weight and bias), RowwiseParallel dim 1 (its bias is replicated); for nn.Embedding\n"        \
    "(weight [vocab, dim]) ColwiseParallel is dim 1, RowwiseParallel dim 0.  Norms under\n"        \
    "SequenceParallel, and keys no rule matches, are replicated over tp and stored once.\n"        \
    "torchtitan's Llama plan as a --tp-plan file:\n"                                               \
    "\n"                                                                                           \
    "    tok_embeddings\\.weight$        0   # RowwiseParallel (nn.Embedding)\n"                   \
    "    attention\\.w[qkv]\\.weight$     0   # ColwiseParallel\n"                                 \
    "    attention\\.wo\\.weight$         1   # RowwiseParallel\n"                                 \
    "    feed_forward\\.w[13]\\.weight$   0   # ColwiseParallel\n"                                 \
    "    feed_forward\\.w2\\.weight$      1   # RowwiseParallel\n"                                 \
    "    (^|\\.)output\\.weight$         0   # ColwiseParallel\n"                                  \
    "\n"                                                                                           \
    "    fsdpconv full-to-dcp --mesh shard=8,tp=8 --tp-plan llama.tp -o step-0 model.pt\n"         \
    "\n"                                                                                           \
    "A tp-sharded dim 0 that tp does not divide is refused (exit 2) where torch 2.15\n"            \
    "records boxes that disagree with the data (for dp_shard > 2, e.g. 7 rows on 3 x 2).\n"

/*
 * --no-verify and --io, for every FC_CMD_READS_DCP command (job.c):
 * fc_cli_verify_option() takes --no-verify (FC_OK) by setting
 * FC_SOURCE_NO_VERIFY in the command's *source_flags, which its convert/
 * options hand to every source they open, and --io by setting the process's
 * I/O mode (fc_cli_io_mode()); a command's callback hands it the ids it does
 * not handle itself, and any other id is an error.
 */
extern const struct fc_opt fc_cli_verify_opts[];
int fc_cli_verify_option(int id, const char *value, unsigned *source_flags);

/* Set the I/O mode from value (auto, buffered or direct); a usage error names opt. */
int fc_cli_io_mode(const char *opt, const char *value);

struct fc_cli_job {
    struct fc_full_to_dcp_opts *o;
    long world;                          /* --world-size, 0 = not given */
    long threads;                        /* --threads, 0 = default */
    long nproc;                          /* --nproc, 0 = not given */
    long part, nparts;                   /* --part K/N, nparts 0 = not given */
    long commit_parts;                   /* --commit-parts N, 0 = not given */
    const char *tp[FC_CLI_MAX_TP_RULES]; /* --tp REGEX=DIM, in command-line order */
    size_t ntp;
    /* the conversion to run: fc_reshard, or NULL for fc_full_to_dcp */
    int (*run)(const struct fc_full_to_dcp_opts *o, struct fc_full_to_dcp_result *res);
};

/* The defaults of the job options around opts (an FC_*_OPTS_INIT of fc_convert.h). */
#define FC_CLI_JOB_INIT(opts)                                                                      \
    {                                                                                              \
        .o = (opts), .world = 0, .threads = 0, .nproc = 0, .ntp = 0                                \
    }

/*
 * fc_cli_job_option() - take one of the shared options (an fc_opt_fn for
 * fc_opt_parse, ctx a struct fc_cli_job).  Returns FC_OK or an error, as
 * every fc_opt_fn.
 */
int fc_cli_job_option(void *ctx, int id, const char *value);

/*
 * fc_cli_run_convert() - job.c: the top level of a conversion job after its
 * options are parsed: finish them (world size or mesh, threads, progress) and
 * run job->run (fc_full_to_dcp() when NULL) as rank 0 of a multi-process job
 * or alone; returns the exit status.  A worker process of the job returns
 * here only when the job is over.
 */
int fc_cli_run_convert(struct fc_cli_job *job);

/* From main.c: run `<name> --help`, or print the command list. */
int fc_main_help_for(const char *name);
void fc_main_print_usage(FILE *f);

#endif
