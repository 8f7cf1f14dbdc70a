/*
 * fc_convert.h - the entry points cmd/ calls.  Each takes a plain options
 * struct, does the whole job, and returns FC_OK or a negative fc_err with the
 * message set (fc_error_last()).  Nothing here prints or exits; results that
 * cmd/ renders come back in result structs owned by the caller.
 */
#ifndef FC_CONVERT_H
#define FC_CONVERT_H

#include <stddef.h>
#include <stdint.h>

#include "fc_dtype.h"
#include "fc_source.h"

/* ---- interruption ---- */

/*
 * fc_request_cancel() - what a signal asks (safe in a signal handler).
 * Before fc_cancel_polled(): remove the staging directory registered with
 * fc_cancel_staged() (empty until writing starts), print "interrupted" and
 * exit 1 at once, since parsing and planning poll nothing.  After it: set the
 * flag fc_cancel_requested() reads; conversions fail at the next slab with
 * "interrupted" (FC_ERROR) and remove their partial output like any other
 * failure.
 */
void fc_request_cancel(void);
int fc_cancel_requested(void);
void fc_cancel_staged(const char *dir); /* the empty staging dir, or NULL for none */
void fc_cancel_polled(void);            /* called just before the first byte is written */
/* Hold SIGINT/SIGTERM back while the staging dir is made and registered (no window where
 * it exists unregistered); release delivers a signal that came meanwhile. */
void fc_cancel_hold(void);
void fc_cancel_release(void);

/* ---- inspect ---- */

struct fc_inspect_opts {
    const char *path;
    const char *key_regex; /* PCRE2 regex over keys (lib/util/fc_regex.h), or NULL for all */
    int checksum;          /* compute SHA-256 of every selected tensor */
    int verify; /* DCP, sharded safetensors: read every chunk, check it against its header */
};

/* The defaults of inspect: every key, no checksums, no full read. */
#define FC_INSPECT_OPTS_INIT                                                                       \
    {                                                                                              \
        .key_regex = NULL, .checksum = 0, .verify = 0                                              \
    }

struct fc_dcp_meta;
struct fc_comm;

struct fc_inspect_result {
    /*
     * src: a full checkpoint, or the source a DCP or sharded safetensors
     * directory is read through (NULL when coverage fails); dcp: the chunks of
     * a DCP or sharded safetensors directory, shown and checked as DCP's.
     */
    struct fc_source *src;
    struct fc_dcp_meta *dcp;
    const char *format; /* "torch.save", "safetensors", "safetensors-index", "dcp",
                           "safetensors-sharded" */
    size_t *selected;   /* indices of the entries that match key_regex, in order */
    size_t nselected;
    char (*sha256)[65];    /* per selected entry when checksum was asked; "" for values */
    char *coverage_report; /* dcp set: one line per problem found, or NULL */
    size_t coverage_problems;
    size_t replicas; /* DCP: chunks whose box another chunk already stores (rank-local saves) */
    char **files;    /* dcp set: file names (.distcp, .safetensors) and their sizes */
    uint64_t *file_bytes;
    size_t nfiles;
};

/*
 * fc_inspect() - open opts->path (full checkpoint, DCP or sharded safetensors directory), select
 * entries and compute what was asked.  On success *r is filled and owned by
 * the caller (fc_inspect_result_release).  Returns FC_OK, FC_EINVAL (bad
 * regex), or the source's open/read errors.
 */
int fc_inspect(const struct fc_inspect_opts *opts, struct fc_inspect_result *r);
void fc_inspect_result_release(struct fc_inspect_result *r);

/*
 * fc_inspect_grid() - append the box grid of a DCP tensor cut on two dims
 * (FSDP2 x tensor parallelism on another dim): one line per piece of the
 * first cut dim, a column per piece of the second, each cell the rank of the
 * file storing that box ("-" none, "*" several).  Nothing when at most one
 * dim is cut (the chunk list says it); one line for more than two cut dims.
 * Returns FC_OK or FC_ENOMEM.
 */
struct fc_dcp_entry;
int fc_inspect_grid(const struct fc_dcp_entry *e, struct fc_buf *out);

/* SHA-256 (hex, NUL-terminated) of a tensor's logical C-contiguous bytes. */
int fc_tensor_sha256(const struct fc_source *src, const struct fc_entry *e, char hex_out[65]);

/* ---- full-to-dcp ---- */

/* One transform rule as given on the command line ("rename", "^module\.(.*)$=\1"). */
struct fc_rule_arg {
    const char *op;
    const char *arg;
};

/* Which commands offer an op's rule as an option. */
enum fc_rule_scope {
    FC_RULE_SCOPE_IMPORT,  /* full-to-dcp only: ops on tensors of full checkpoints */
    FC_RULE_SCOPE_PIPELINE /* every command with a rule pipeline */
};

/* The command-line option of a rule that appends an op (a row of convert/ops.c's table). */
struct fc_rule_option {
    const char *name;  /* the option without "--", which is also the rule's name ("dtype") */
    const char *value; /* placeholder ("<dtype>") */
    const char *help;  /* usage text; '\n' continues on the next line */
    enum fc_rule_scope scope;
    /* NULL, or a check of the value before the run: NULL when fine, else why not. */
    const char *(*check)(const char *value);
};

/* The option of the i-th op rule, in the table's order; NULL past the last. */
const struct fc_rule_option *fc_op_rule_option(size_t i);

/*
 * Progress callback: called from the calling thread about 5 times a second
 * while data moves, and once at the end with done == total.
 */
typedef void (*fc_progress_fn)(void *ctx, uint64_t done, uint64_t total);

/*
 * What full-to-dcp and reshard write: a DCP, one safetensors file per rank (st_sink.h), or a
 * torch_checkpointing checkpoint (tcp_sink.h).
 */
enum fc_out_format { FC_OUT_DCP, FC_OUT_SAFETENSORS, FC_OUT_TORCH_CHECKPOINTING };

/* One positional input: PATH, or PREFIX=PATH (every key gets PREFIX first). */
struct fc_input_arg {
    const char *prefix; /* NULL: none */
    const char *path;
};

struct fc_full_to_dcp_opts {
    unsigned source_flags;             /* fc_source_open() of every input: --no-verify */
    const char *input;                 /* the input when ninputs == 0 */
    const struct fc_input_arg *inputs; /* several inputs, in order */
    size_t ninputs;
    const char *output;
    enum fc_out_format format;
    int replicate; /* mesh: replicate x shard x tp; plain FSDP2: 1 x world x 1 */
    int shard;
    int tp;                      /* 0 or 1: no tensor parallelism */
    const char *const *tp_rules; /* --tp REGEX=DIM, in command-line order */
    size_t ntp_rules;
    const char *tp_plan;             /* --tp-plan FILE (its rules come first), or NULL */
    const struct fc_rule_arg *rules; /* in command-line order; op "rules": a --rules FILE */
    size_t nrules;
    int dry_run;
    int force;
    uint64_t max_memory; /* bytes of data buffers across all threads */
    int threads;
    int compress;               /* -1: keep the input's (DCP), 0: none, 1..22: zstd level */
    int rank_local;             /* --metadata rank-local: __{r}.metadata per rank, no .metadata */
    const char *optim;          /* --optim FILE: a full optimizer state dict, or NULL */
    const char *optim_select;   /* --optim-select KEY inside it (or inside input) */
    int layout;                 /* enum fc_layout of xform.h: 0 none, 1 torchtitan, 2 app */
    const char *mesh_device;    /* torch-checkpointing: --mesh-device (NULL: cuda) */
    const char *mesh_dim_names; /* torch-checkpointing: --mesh-dim-names a,b (NULL: torchtitan's) */
    const char *tcp_layout;     /* torch-checkpointing: --tcp-layout pt|safetensors (NULL: pt) */
    const char *torch_version;  /* torch-checkpointing pt: --torch-version 2.Y (NULL: newest) */
    int engine;                 /* enum fc_engine: 0 auto, 1 cpu, 2 cuda */
    struct fc_comm *comm;       /* multi-process job (convert/comm.h), or NULL */
    /*
     * Shares (convert/share.h): nparts > 0 writes share `part` (0-based) of
     * nparts into the job's staging directory, part -1 only commits the
     * nparts shares.  With comm, part is the rank and rank 0 commits once
     * every rank reported; without, the commit is a run of its own.
     */
    int part;
    int nparts;
    fc_progress_fn progress;
    void *progress_ctx;
};

/* --max-memory when not given: 1 GiB of data buffers, for every command that moves tensor data. */
#define FC_MAX_MEMORY_DEFAULT ((uint64_t)1 << 30)

/* The defaults of full-to-dcp: plain items, the engine chosen at run time. */
#define FC_FULL_TO_DCP_OPTS_INIT                                                                   \
    {                                                                                              \
        .max_memory = FC_MAX_MEMORY_DEFAULT, .compress = 0, .engine = 0                            \
    }

/* The defaults of reshard: the input's compression kept, only checkpoints as input. */
#define FC_RESHARD_OPTS_INIT                                                                       \
    {                                                                                              \
        .max_memory = FC_MAX_MEMORY_DEFAULT, .compress = -1, .engine = 0                           \
    }

struct fc_full_to_dcp_result {
    char *plan_text; /* --dry-run: the plan (fc_plan_describe format) */
    char **notes;    /* informational lines (e.g. "conv2d weight already 2-D") */
    size_t nnotes;
    uint64_t bytes_written;
    size_t nfiles;
    size_t ntensors;
    size_t nvalues;
    int resumed;  /* a share found already written by an earlier run (kept) */
    int reported; /* also on failure: a worker's outcome reached rank 0, which tells the user */
};

/*
 * fc_full_to_dcp() - convert a full checkpoint into a DCP directory.
 *
 * Everything is planned before any byte moves.  Output is written into
 * "<output>.partial-<pid>-<n>" beside the target: rank files, fsync, then
 * .metadata (tmp + rename), then the directory is renamed to <output>.  On
 * any failure the partial directory is removed and <output> is untouched; a
 * partial left by a killed run is removed by the next run.  An existing
 * <output> is refused (FC_EINVAL) unless opts->force.
 *
 * Returns FC_OK; FC_EINVAL (bad mesh, rule naming a missing key, existing
 * output); FC_ECORRUPT/FC_EFORMAT (bad input); FC_EIO (read/write failure,
 * ENOSPC); FC_ENOMEM.  *res is filled on success and owned by the caller
 * (fc_full_to_dcp_result_release).
 */
int fc_full_to_dcp(const struct fc_full_to_dcp_opts *opts, struct fc_full_to_dcp_result *res);
void fc_full_to_dcp_result_release(struct fc_full_to_dcp_result *res);

/*
 * fc_reshard() - fc_full_to_dcp() for a DCP or per-rank safetensors
 * checkpoint as input (FC_EFORMAT for any other input), written onto the
 * mesh of opts.  Same options, result and guarantees.
 */
int fc_reshard(const struct fc_full_to_dcp_opts *opts, struct fc_full_to_dcp_result *res);

/* ---- multi-process jobs (convert/comm.h has the protocol) ---- */

/*
 * fc_comm_fork() - `--nproc P`: fork P - 1 worker processes connected to
 * this one (rank 0) by socketpairs.  Returns in every process; check
 * fc_comm_rank().  Returns FC_OK, FC_EIO, FC_ENOMEM.
 */
int fc_comm_fork(struct fc_comm **out, int nproc);

/*
 * fc_comm_env() - join a job started by a launcher over TCP: the rank and
 * size from RANK/WORLD_SIZE (torchrun), else OMPI_COMM_WORLD_RANK/
 * OMPI_COMM_WORLD_SIZE (mpirun), else SLURM_PROCID/SLURM_NTASKS (srun); rank
 * 0 listens on MASTER_ADDR:MASTER_PORT, the others connect (60 s).  *out is
 * NULL when the size is unset or 1.  Every rank must see the output
 * directory at the same path (a shared filesystem).
 * Returns FC_OK, FC_EINVAL (bad variables), FC_EIO.
 */
int fc_comm_env(struct fc_comm **out);

/*
 * fc_comm_start_nccl() - collective, after fc_comm_fork/env: move the data
 * path to NCCL (GPU to GPU; LOCAL_RANK or rank mod devices picks the GPU)
 * when NCCL was built in, a GPU is visible and engine is not cpu (enum
 * fc_engine: 0 auto, 1 cpu, 2 cuda).  Otherwise a no-op: the sockets carry
 * everything.  Returns FC_OK, FC_ECUDA, FC_ENCCL.
 */
int fc_comm_start_nccl(struct fc_comm *c, int engine);

int fc_comm_rank(const struct fc_comm *c);
int fc_comm_size(const struct fc_comm *c);
/* Does the job move data over NCCL (rank 0 transforms, workers serve)? */
int fc_comm_uses_nccl(const struct fc_comm *c);

/*
 * fc_comm_serve() - an NCCL worker's whole life: write the files rank 0 sends until
 * the job ends.  FC_OK when the job succeeded everywhere, else an error.
 */
int fc_comm_serve(struct fc_comm *c);

/* fc_comm_done() - rank 0 tells every worker the outcome (they exit 0 or 1). */
void fc_comm_done(struct fc_comm *c, int ok);

/*
 * fc_comm_free() - close the connections; a forked rank 0 also waits for its
 * workers and returns FC_ERROR when one of them failed.  Accepts NULL.
 */
int fc_comm_free(struct fc_comm *c);

/* ---- dcp-to-full ---- */

enum fc_export_format { FC_EXPORT_AUTO, FC_EXPORT_SAFETENSORS, FC_EXPORT_TORCH };

struct fc_dcp_to_full_opts {
    unsigned source_flags;        /* fc_source_open() of the input: --no-verify */
    const char *input;            /* a DCP directory (or any checkpoint fsdpconv reads) */
    const char *output;           /* file (.safetensors, .pt/.bin/.pth) or directory (sharded) */
    enum fc_export_format format; /* AUTO: from the output name; a directory means safetensors */
    uint64_t max_shard_size; /* safetensors: > 0 writes shards + model.safetensors.index.json */
    const char *config_from; /* an HF model directory: output is a directory with its config */
    const struct fc_rule_arg *rules; /* select, strip-prefix, rename, drop, dtype, ... */
    size_t nrules;
    uint64_t max_memory;
    int force;
    fc_progress_fn progress;
    void *progress_ctx;
};

/* The defaults of dcp-to-full: the format from the output name, one file. */
#define FC_DCP_TO_FULL_OPTS_INIT                                                                   \
    {                                                                                              \
        .format = FC_EXPORT_AUTO, .max_shard_size = 0, .max_memory = FC_MAX_MEMORY_DEFAULT         \
    }

struct fc_dcp_to_full_result {
    const char *format; /* "safetensors" or "torch.save" (static) */
    size_t ntensors;
    size_t nvalues_dropped; /* safetensors holds tensors only */
    size_t nfiles;
    uint64_t bytes_written; /* the tensor files' sizes */
    size_t noptim;       /* optimizer state tensors written (a directory output without --select) */
    char optim_key[128]; /* the first of them */
};

/*
 * fc_dcp_to_full() - export to safetensors (one file, or shards of at most
 * max_shard_size bytes with an index) or to a torch.save file, streaming
 * tensor by tensor in row slabs under max_memory: the model is never held.
 * torch.save output nests keys by the checkpoint's planner_data (as
 * dcp_to_torch_save does) and keeps non-tensor values and tied storages.
 * With config_from the output is a directory that from_pretrained loads:
 * model.safetensors (or the shards), plus config.json and the tokenizer files
 * of that directory (fc_hf_copy_files); optimizer state is refused there
 * (FC_EINVAL naming --select).
 * Output is written beside the target and renamed into place when complete.
 * Returns FC_OK, FC_EINVAL (bad options, existing output without force),
 * FC_EFORMAT, FC_ECORRUPT, FC_EIO, FC_ENOMEM.
 */
int fc_dcp_to_full(const struct fc_dcp_to_full_opts *opts, struct fc_dcp_to_full_result *res);

/* ---- diff ---- */

enum fc_diff_kind {
    FC_DIFF_ONLY_A,      /* key only in A */
    FC_DIFF_ONLY_B,      /* key only in B */
    FC_DIFF_KIND,        /* tensor in one, value in the other */
    FC_DIFF_DTYPE,       /* same shape, different dtype (values compared as float64 if floating) */
    FC_DIFF_SHAPE,       /* different global shape */
    FC_DIFF_TENSOR_DATA, /* same dtype and shape, different bytes */
    FC_DIFF_VALUE        /* non-tensor values differ */
};

struct fc_diff_item {
    char *key;
    enum fc_diff_kind kind;
    char *detail;   /* human-readable specifics ("float32 vs bfloat16") */
    uint64_t ndiff; /* elements that differ (data) */
    uint64_t numel;
    double max_abs_diff; /* floating data; NaN when not computed */
};

struct fc_diff_opts {
    unsigned source_flags; /* fc_source_open() of both inputs: --no-verify */
    const char *a;
    const char *b;
    const char *key_regex; /* only keys matching it */
    uint64_t max_memory;
};

/* The defaults of diff: every key. */
#define FC_DIFF_OPTS_INIT                                                                          \
    {                                                                                              \
        .key_regex = NULL, .max_memory = FC_MAX_MEMORY_DEFAULT                                     \
    }

struct fc_diff_result {
    const char *format_a, *format_b;
    size_t ncompared; /* keys present in both */
    struct fc_diff_item *items;
    size_t nitems;
    /* internal: keeps the sources alive for format names */
    struct fc_source *src_a, *src_b;
};

/*
 * fc_diff() - compare two checkpoints of any supported formats key by key:
 * missing/extra keys, kind, dtype and shape mismatches, bitwise equality of
 * tensor data (streamed in slabs under max_memory) with the number of
 * differing elements and the max |a - b| for floating tensors, and equality of
 * non-tensor values.  res->nitems == 0 means equal.  Returns FC_OK (equal or
 * not), FC_EINVAL (bad regex), or the sources' errors.
 */
int fc_diff(const struct fc_diff_opts *opts, struct fc_diff_result *res);
void fc_diff_result_release(struct fc_diff_result *res);

#endif
