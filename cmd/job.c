/*
 * job.c - what the commands that run a conversion job (FC_CMD_JOB:
 * full-to-dcp, reshard) share: their common option tables and callback, the
 * transform-rule table of every converting command, --no-verify, and the
 * job's top level (mesh/threads checks, progress bar, multi-process start and
 * end, printing the result), written once so the two commands cannot drift.
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "commands.h"
#include "fc_convert.h"
#include "fc_error.h"
#include "fc_io.h"
#include "fc_source.h"
#include "opt.h"

enum {
    OPT_WORLD = 400,
    OPT_MESH,
    OPT_THREADS,
    OPT_NPROC,
    OPT_ENGINE,
    OPT_MAXMEM,
    OPT_COMPRESS,
    OPT_DRY,
    OPT_FORCE,
    OPT_FORMAT,
    OPT_TP,
    OPT_TP_PLAN,
    OPT_METADATA,
    OPT_PART,
    OPT_COMMIT_PARTS,
    OPT_MESH_DEVICE,
    OPT_MESH_DIM_NAMES,
    OPT_TCP_LAYOUT,
    OPT_TORCH_VERSION,
    OPT_NO_VERIFY = 500, /* apart from every command's own ids: the table joins any command */
    OPT_IO
};

/* clang-format off */
const struct fc_opt fc_cli_job_target_opts[] = {
    {'o', 'o', "output", "<dir>", FC_OPT_REQUIRED, NULL, NULL,
     "directory to create (written atomically)"},
    {OPT_WORLD, 0, "world-size", "<n>", FC_OPT_ONE_OF, NULL, NULL,
     "FSDP2 on a 1-D mesh of n ranks: Shard(0), torch.chunk semantics"},
    {OPT_MESH, 0, "mesh", "[replicate=<r>,]shard=<s>[,tp=<t>]", FC_OPT_ONE_OF, NULL, NULL,
     "mesh (dp_replicate, dp_shard, tp) of r x s x t ranks, rank\n"
     "((r*S)+s)*T+t: HSDP (Replicate(), Shard(0)); with tp, FSDP2\n"
     "over tensor parallelism as --tp/--tp-plan place each key"},
    {OPT_TP, 0, "tp", "<re>=<dim>", FC_OPT_REPEAT, NULL, NULL,
     "keys matching <re> are sharded on tensor dim <dim> over tp\n"
     "(or 'replicate'); keys no rule matches are replicated"},
    {OPT_TP_PLAN, 0, "tp-plan", "<file>", 0, NULL, NULL,
     "the same rules from a file: one '<re> <dim>' a line, # comments"},
    {OPT_FORMAT, 0, "format", "(dcp|safetensors|torch-checkpointing)", 0, NULL, NULL,
     "dcp (default), one safetensors file per rank for torch's\n"
     "HuggingFaceStorageReader (torch >= 2.8; tensors only), or\n"
     "torch-checkpointing: PyTorch's torch-checkpointing package's\n"
     "format (model_<rank>.pt or .safetensors, metadata.pkl)"},
    {OPT_MESH_DEVICE, 0, "mesh-device", "<type>", 0, NULL, NULL,
     "torch-checkpointing: the device type its metadata records for\n"
     "the mesh (default cuda, as a training run has)"},
    {OPT_MESH_DIM_NAMES, 0, "mesh-dim-names", "<a,b,...>", 0, NULL, NULL,
     "torch-checkpointing: the mesh's dim names (default torchtitan's:\n"
     "dp_replicate, dp_shard, tp for the dims the mesh has)"},
    {OPT_TCP_LAYOUT, 0, "tcp-layout", "(pt|safetensors)", 0, NULL, NULL,
     "torch-checkpointing: pt (default, the package's own): one\n"
     "torch.save file of DTensors per rank; safetensors: plain\n"
     "tensors per rank, no torch class in the files"},
    {OPT_TORCH_VERSION, 0, "torch-version", "<2.Y>", 0, NULL, NULL,
     "torch-checkpointing pt: the torch that loads it (>= 2.11;\n"
     "default the newest): its DeviceMesh pickle differs by release"},
    {OPT_METADATA, 0, "metadata", "(global|rank-local)", 0, NULL, NULL,
     "global (default): one .metadata; rank-local: one __{r}.metadata\n"
     "per rank instead, which dcp.load (torch >= 2.9) reads at the\n"
     "same mesh without planning collectives"},
    {0, 0, NULL, NULL, 0, NULL, NULL, NULL},
};

const struct fc_opt fc_cli_pipeline_opts[] = {
    {0, 0, "rename", "<from>=<to>", FC_OPT_RULE | FC_OPT_REPEAT, "rename", NULL,
     "rewrite keys matching the regex <from> (PCRE2, as Python's re)\n"
     "to <to>; \\1..\\9 and \\g<name> name groups"},
    {0, 0, "drop", "<re>", FC_OPT_RULE | FC_OPT_REPEAT, "drop", NULL,
     "leave out keys matching the regex"},
    {0, 0, "copy", "<from>=<to>", FC_OPT_RULE | FC_OPT_REPEAT, "copy", NULL,
     "every key matching <from> also appears as <to>: an\n"
     "independent tensor (rows read once, written to both)"},
    {0, 0, "strip-wrappers", NULL, FC_OPT_RULE | FC_OPT_REPEAT, "strip-wrappers", NULL,
     "remove _fsdp_wrapped_module., _checkpoint_wrapped_module.,\n"
     "_orig_mod. anywhere in a key and a leading module."},
    {0, 0, "stack", "<re>=<dst>", FC_OPT_RULE | FC_OPT_REPEAT, "stack", NULL,
     "keys matching <re> become the slices of <dst> along a new\n"
     "dim 0, in the order of the one group <dst> leaves out (their\n"
     "index: 0, 1, ...); transformers' MergeModulelist"},
    {0, 0, "concat", "<re>,<b>[,...]=<dst>:<dim>", FC_OPT_RULE | FC_OPT_REPEAT, "concat", NULL,
     "each key matching <re>, then <b>... (replacements of its\n"
     "match), joined along <dim> into <dst>; transformers' Concatenate"},
    {0, 0, "split", "<re>=<a>,<b>[,...]:<dim>[:<n>,...]", FC_OPT_RULE | FC_OPT_REPEAT, "split",
     NULL,
     "each key matching <re> cut along <dim> into <a>, <b>...: equal\n"
     "parts, or <n>,... long; transformers' Chunk"},
    {0, 0, "unstack", "<re>=<pattern>", FC_OPT_RULE | FC_OPT_REPEAT, "unstack", NULL,
     "each key matching <re> becomes its slices along dim 0, named\n"
     "<pattern> with {} the index; transformers' SplitModulelist"},
    FC_OPT_OP_RULES(FC_RULE_SCOPE_PIPELINE),
    {0, 0, NULL, NULL, 0, NULL, NULL, NULL},
};

const struct fc_opt fc_cli_job_run_opts[] = {
    {OPT_DRY, 0, "dry-run", NULL, 0, NULL, NULL,
     "print the plan (boxes, files, offsets) and write nothing"},
    {OPT_FORCE, 0, "force", NULL, 0, NULL, NULL, "replace an existing output directory"},
    {OPT_MAXMEM, 0, "max-memory", "<size>", 0, NULL, NULL, FC_OPT_MAX_MEMORY_HELP},
    {OPT_THREADS, 0, "threads", "<n>", 0, NULL, NULL,
     "parallel writers (default: number of CPUs, at most 8)"},
    {OPT_COMPRESS, 0, "compress", "zstd[:<level>]", 0, NULL, NULL,
     "zstd-compress every item (torch's stream.zstd/1 extension)"},
    {OPT_NPROC, 0, "nproc", "<p>", 0, NULL, NULL,
     "worker processes: each reads the input bytes of the rank\n"
     "files it owns (r % p) and writes them; rank 0 commits"},
    {OPT_PART, 0, "part", "<k>/<n>", 0, NULL, NULL,
     "write only share k (0..n-1) of n, e.g. one array task each;\n"
     "finish with the same command and --commit-parts n"},
    {OPT_COMMIT_PARTS, 0, "commit-parts", "<n>", 0, NULL, NULL,
     "check the n shares written with --part and commit the output"},
    {OPT_ENGINE, 0, "engine", "(cpu|cuda)", 0, NULL, NULL,
     "kernels on cpu or cuda (default: cuda when built with CUDA\n"
     "and a GPU is visible, else cpu)"},
    {0, 0, NULL, NULL, 0, NULL, NULL, NULL},
};

const struct fc_opt fc_cli_verify_opts[] = {
    {OPT_NO_VERIFY, 0, "no-verify", NULL, 0, NULL, NULL,
     "DCP input: read items without checking their CRC-32"},
    {OPT_IO, 0, "io", "(auto|direct|buffered)", 0, NULL, NULL,
     "tensor data through O_DIRECT (direct), the page cache\n"
     "(buffered), or direct from 256 KiB requests up (auto, the\n"
     "default; $FSDPCONV_IO sets another); buffered where the\n"
     "filesystem refuses O_DIRECT"},
    {0, 0, NULL, NULL, 0, NULL, NULL, NULL},
};
/* clang-format on */

int fc_cli_io_mode(const char *opt, const char *value)
{
    static const char *const modes[] = {"auto", "buffered", "direct"}; /* enum fc_io_mode */
    int m;
    FC_TRY(fc_opt_choice(opt, value, modes, 3, &m));
    fc_io_set_mode((enum fc_io_mode)m);
    return FC_OK;
}

int fc_cli_verify_option(int id, const char *value, unsigned *source_flags)
{
    if (id == OPT_IO)
        return fc_cli_io_mode("--io", value);
    if (id != OPT_NO_VERIFY)
        return fc_opt_unknown(id);
    *source_flags |= FC_SOURCE_NO_VERIFY;
    return FC_OK;
}

/* --part K/N: share K (0-based, as SLURM_ARRAY_TASK_ID and JOB_COMPLETION_INDEX count) of N. */
static int fc_cli_part(const char *value, struct fc_cli_job *j)
{
    const char *slash = strchr(value, '/');
    char k[24];
    if (slash == NULL || (size_t)(slash - value) >= sizeof(k))
        return fc_cli_usage("--part '%s': expected K/N, share K (0..N-1) of N", value);
    memcpy(k, value, (size_t)(slash - value));
    k[slash - value] = '\0';
    FC_TRY(fc_opt_int("--part N", slash + 1, 1, 1 << 16, &j->nparts));
    FC_TRY(fc_opt_int("--part K", k, 0, j->nparts - 1, &j->part));
    return FC_OK;
}

int fc_cli_job_option(void *ctx, int id, const char *value)
{
    struct fc_cli_job *j = ctx;
    switch (id) {
    case 'o': return fc_opt_output(value, &j->o->output);
    case OPT_WORLD: return fc_opt_int("--world-size", value, 1, 1 << 20, &j->world);
    case OPT_MESH: return fc_opt_mesh("--mesh", value, &j->o->replicate, &j->o->shard, &j->o->tp);
    case OPT_TP:
        if (j->ntp == FC_CLI_MAX_TP_RULES)
            return fc_cli_usage("more than %d --tp rules (use --tp-plan)", FC_CLI_MAX_TP_RULES);
        j->tp[j->ntp++] = value;
        return FC_OK;
    case OPT_TP_PLAN: j->o->tp_plan = value; return FC_OK;
    case OPT_THREADS: return fc_opt_int("--threads", value, 1, 256, &j->threads);
    case OPT_NPROC: return fc_opt_int("--nproc", value, 1, 4096, &j->nproc);
    case OPT_PART: return fc_cli_part(value, j);
    case OPT_COMMIT_PARTS: return fc_opt_int("--commit-parts", value, 1, 1 << 16, &j->commit_parts);
    case OPT_ENGINE: return fc_opt_engine("--engine", value, &j->o->engine);
    case OPT_MAXMEM: return fc_opt_max_memory(value, &j->o->max_memory);
    case OPT_COMPRESS: return fc_opt_compress("--compress", value, &j->o->compress);
    case OPT_DRY: j->o->dry_run = 1; return FC_OK;
    case OPT_FORCE: j->o->force = 1; return FC_OK;
    case OPT_FORMAT: {
        static const char *const formats[] = {"dcp", "safetensors",
                                              "torch-checkpointing"}; /* enum fc_out_format */
        int f = 0;
        const int rc = fc_opt_choice("--format", value, formats, 3, &f);
        j->o->format = (enum fc_out_format)f;
        return rc;
    }
    case OPT_METADATA: {
        static const char *const kinds[] = {"global", "rank-local"};
        return fc_opt_choice("--metadata", value, kinds, 2, &j->o->rank_local);
    }
    case OPT_MESH_DEVICE: j->o->mesh_device = value; return FC_OK;
    case OPT_MESH_DIM_NAMES: j->o->mesh_dim_names = value; return FC_OK;
    case OPT_TCP_LAYOUT: j->o->tcp_layout = value; return FC_OK;
    case OPT_TORCH_VERSION: j->o->torch_version = value; return FC_OK;
    default: return fc_cli_verify_option(id, value, &j->o->source_flags);
    }
}

int fc_cli_run_convert(struct fc_cli_job *job)
{
    struct fc_full_to_dcp_opts *o = job->o;
    const long world = job->world, nproc = job->nproc;
    long threads = job->threads;
    struct fc_full_to_dcp_result res;
    if (o->output == NULL && !o->dry_run)
        return fc_cli_report(fc_cli_usage("missing -o <dir>"));
    if ((world > 0) == (o->shard > 0))
        return fc_cli_report(fc_cli_usage("give exactly one of --world-size and --mesh"));
    if (world > 0) {
        o->replicate = 1;
        o->shard = (int)world;
    }
    if ((job->nparts > 0) + (job->commit_parts > 0) + (nproc > 0) > 1)
        return fc_cli_report(
            fc_cli_usage("give at most one of --part, --commit-parts and --nproc"));
    if (job->nparts > 0 || job->commit_parts > 0) {
        /* Shares run apart, maybe at other times: nothing to join, whatever the launcher says. */
        o->part = job->nparts > 0 ? (int)job->part : -1;
        o->nparts = (int)(job->nparts > 0 ? job->nparts : job->commit_parts);
    }
    o->tp_rules = job->tp;
    o->ntp_rules = job->ntp;
    if (threads == 0) {
        const long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
        threads = ncpu < 1 ? 1 : ncpu > 8 ? 8 : ncpu;
    }
    o->threads = (int)threads;
    if (o->output == NULL)
        o->output = "(dry-run)";
    struct fc_cli_progress prog;
    if (fc_cli_progress_start(&prog) && !o->dry_run) {
        o->progress = fc_cli_progress_draw;
        o->progress_ctx = &prog;
    }
    struct fc_comm *comm = NULL;
    int worker_exit = -1;
    if (!o->dry_run && o->nparts == 0) {
        const int rc = fc_cli_mp_start(nproc, o->engine, &comm, &worker_exit);
        if (rc < 0)
            return fc_cli_report(rc);
        if (worker_exit >= 0)
            return worker_exit;
    }
    o->comm = comm;
    if (comm != NULL && !fc_comm_uses_nccl(comm)) {
        /* Independent workers: rank r writes share r; rank 0 alone draws and reports. */
        o->part = fc_comm_rank(comm);
        o->nparts = fc_comm_size(comm);
        if (o->part != 0)
            o->progress = NULL;
    }
    const int rc = (job->run != NULL ? job->run : fc_full_to_dcp)(o, &res);
    if (rc < 0) {
        if (prog.active)
            fputc('\n', stderr);
        /* One message per failed job: rank 0 names a worker's failure (or that it is gone). */
        if (res.reported)
            return fc_cli_mp_end(comm, FC_EXIT_FAILURE);
        return fc_cli_mp_end(comm, fc_cli_report(rc));
    }
    for (size_t i = 0; i < res.nnotes; i++)
        fc_cli_note("%s", res.notes[i]);
    if (o->dry_run)
        fputs(res.plan_text, stdout);
    else if (comm != NULL && o->part > 0)
        ; /* a worker: rank 0 reports the job */
    else if (comm == NULL && o->nparts > 0 && o->part >= 0)
        fc_cli_note("%s share %d of %d of %s: %zu rank file%s, %.1f MiB; commit with "
                    "--commit-parts %d once every share is written",
                    res.resumed ? "kept the already written" : "wrote", o->part, o->nparts,
                    o->output, res.nfiles, res.nfiles == 1 ? "" : "s",
                    (double)res.bytes_written / 1048576.0, o->nparts);
    else
        fc_cli_summary(o->output,
                       o->format == FC_OUT_SAFETENSORS           ? "safetensors"
                       : o->format == FC_OUT_TORCH_CHECKPOINTING ? "torch-checkpointing"
                                                                 : "DCP",
                       res.ntensors, res.nvalues, res.bytes_written, res.nfiles, "rank file",
                       &prog.start);
    fc_full_to_dcp_result_release(&res);
    return fc_cli_mp_end(comm, fc_cli_report(fc_cli_flush_stdout()));
}
