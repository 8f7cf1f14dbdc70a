/*
 * share.h - a write job cut into N shares that run anywhere and at any time
 * (--nproc, torchrun/srun/mpirun ranks, --part K/N array tasks), and the
 * commit that joins them.
 *
 * No coordination is needed to agree on where to write: every share derives
 * the staging directory "<target>.partial-job-<16 hex>-<N>" from the job's
 * identity (inputs' names, sizes and mtimes, options, rules and the whole
 * plan; fc_share_hash()) and its number of shares, so two different jobs
 * writing the same target never mix their files, and a rerun of the same job
 * finds its earlier work.
 *
 * Share K owns the rank files r with r % N == K.  It writes them, fsyncs
 * them, then records durably what it wrote: ".share-K-of-N" holds the plan
 * hash, every file's name, size and CRC-32 and, when items are compressed,
 * where each item landed.  A share whose record is already there and whose
 * files still match it is not redone (resume after a kill); one that fails
 * removes its files and leaves no record.  While a share runs it holds
 * flock(".share-K.lock"): a second copy of the same share refuses to start.
 *
 * The commit checks every share's record against the plan (hash, file set,
 * sizes on disk), takes every share's lock (none may still run), removes the
 * records and locks, and hands the directory to fc_stage_commit(): the
 * caller writes .metadata before that, the rename is atomic, --force never
 * loses both.
 */
#ifndef FC_SHARE_H
#define FC_SHARE_H

#include <stdint.h>

#include "exec.h"
#include "fc_buf.h"
#include "fc_io.h"
#include "plan.h"

struct fc_share {
    struct fc_stage stage; /* stage.path: the job's staging directory */
    uint64_t hash;
    int part; /* this share, or -1 for a commit */
    int nparts;
    int lock_fd;
    int *locks;  /* fc_share_collect(): every other share's lock, held */
    int resumed; /* fc_share_begin found this share's record valid */
};

/* fc_share_add_path() - append the identity of input `path` (size, mtime; a directory's entries).
 */
int fc_share_add_path(struct fc_buf *id, const char *path);

/*
 * fc_share_hash() - *out = the 64-bit hash of a job identity text: the first
 * 8 bytes of its SHA-256 (libcrypto), not a fast non-cryptographic hash, since
 * two different jobs writing the same OUT must never agree on a staging
 * directory.  Returns FC_OK or FC_ENOMEM.
 */
int fc_share_hash(const void *p, size_t n, uint64_t *out);

/*
 * fc_share_begin() - refuse an existing target (unless force), make or reuse
 * the staging directory of job `hash` and, for part >= 0, lock that share
 * and check for its record: sh->resumed says it is complete already (files
 * and sizes and CRCs match); otherwise its old files and record are removed.
 */
int fc_share_begin(struct fc_share *sh, const char *target, int force, uint64_t hash, int part,
                   int nparts, const struct fc_exec *ex);

/* fc_share_record() - after the executor wrote and fsynced this share's files: record them. */
int fc_share_record(struct fc_share *sh, const struct fc_exec *ex);

/* fc_share_discard() - a failed share: remove the files it owns (no record is left). */
void fc_share_discard(struct fc_share *sh, const struct fc_exec *ex);

/*
 * fc_share_collect() - before the commit: lock every share (FC_EINVAL while
 * one still runs), check every record against the plan (hash, files, sizes
 * on disk; FC_EINVAL naming the shares not written yet) and fill
 * ex->extents (when non-NULL) from them.
 */
int fc_share_collect(struct fc_share *sh, const struct fc_exec *ex);

/* fc_share_seal() - after .metadata, right before the rename: remove the records and locks. */
int fc_share_seal(struct fc_share *sh);

/* fc_share_release() - unlock; the staging directory stays (other shares, resume). */
void fc_share_release(struct fc_share *sh);

#endif
