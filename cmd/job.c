/*
 * job.c - what full-to-dcp and reshard share after option parsing: the
 * mesh/threads checks, the progress bar, the multi-process start and end,
 * and printing the result.
 */
#include <inttypes.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "commands.h"
#include "fc_convert.h"
#include "opt.h"

int fc_cli_run_convert(const char *cmd, const char *usage, struct fc_full_to_dcp_opts *o,
                       const struct fc_cli_job_counts *n)
{
    const long world = n->world, nproc = n->nproc;
    long threads = n->threads;
    struct fc_full_to_dcp_result res;
    if (o->output == NULL && !o->dry_run)
        return fc_cli_usage_error(cmd, usage, "missing -o <dir>");
    if ((world > 0) == (o->shard > 0))
        return fc_cli_usage_error(cmd, usage, "give exactly one of --world-size and --mesh");
    if (o->max_memory < 4096)
        return fc_cli_usage_error(cmd, usage, "invalid value for --max-memory (must be >= 4KiB)");
    if (world > 0) {
        o->replicate = 1;
        o->shard = (int)world;
    }
    if (threads == 0) {
        const long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
        threads = ncpu < 1 ? 1 : ncpu > 8 ? 8 : ncpu;
    }
    o->threads = (int)threads;
    if (o->output == NULL)
        o->output = "(dry-run)";
    struct fc_cli_progress prog = {.active = 0};
    if (!o->dry_run && fc_cli_verbosity >= 0 && isatty(STDERR_FILENO)) {
        clock_gettime(CLOCK_MONOTONIC, &prog.start);
        o->progress = fc_cli_progress_draw;
        o->progress_ctx = &prog;
    }
    struct fc_comm *comm = NULL;
    int worker_exit = -1;
    if (!o->dry_run) {
        const int status = fc_cli_mp_start(nproc, o->engine, &comm, &worker_exit);
        if (status != FC_EXIT_OK || worker_exit >= 0)
            return worker_exit >= 0 ? worker_exit : status;
    }
    o->comm = comm;
    const int rc = fc_full_to_dcp(o, &res);
    if (rc < 0) {
        if (prog.active)
            fputc('\n', stderr);
        return fc_cli_mp_end(comm, fc_cli_report(rc));
    }
    for (size_t i = 0; i < res.nnotes; i++)
        fc_cli_note("%s: %s", cmd, res.notes[i]);
    if (o->dry_run)
        fputs(res.plan_text, stdout);
    else if (fc_cli_verbosity > 0)
        fc_cli_note("%s: wrote %s: %zu tensors, %zu values, %zu files, %" PRIu64 " bytes", cmd,
                    o->output, res.ntensors, res.nvalues, res.nfiles, res.bytes_written);
    fc_full_to_dcp_result_release(&res);
    return fc_cli_mp_end(comm, fflush(stdout) == 0 ? FC_EXIT_OK : FC_EXIT_FAILURE);
}

int fc_cli_job_option(const char *cmd, int c, const char *arg, struct fc_full_to_dcp_opts *o,
                      struct fc_cli_job_counts *n)
{
    switch (c) {
    case FC_JOB_OPT_WORLD:
        return fc_opt_int(cmd, "--world-size", arg, 1, 1 << 20, &n->world) < 0 ? -1 : 1;
    case FC_JOB_OPT_MESH:
        return fc_opt_mesh(cmd, "--mesh", arg, &o->replicate, &o->shard) < 0 ? -1 : 1;
    case FC_JOB_OPT_THREADS:
        return fc_opt_int(cmd, "--threads", arg, 1, 256, &n->threads) < 0 ? -1 : 1;
    case FC_JOB_OPT_NPROC: return fc_opt_int(cmd, "--nproc", arg, 1, 4096, &n->nproc) < 0 ? -1 : 1;
    case FC_JOB_OPT_ENGINE: return fc_opt_engine(cmd, "--engine", arg, &o->engine) < 0 ? -1 : 1;
    case FC_JOB_OPT_MAXMEM:
        return fc_opt_size(cmd, "--max-memory", arg, &o->max_memory) < 0 ? -1 : 1;
    case FC_JOB_OPT_COMPRESS:
        return fc_opt_compress(cmd, "--compress", arg, &o->compress) < 0 ? -1 : 1;
    case FC_JOB_OPT_DRY: o->dry_run = 1; return 1;
    case FC_JOB_OPT_FORCE: o->force = 1; return 1;
    default: return 0;
    }
}
