/*
 * write_job.h - the write job shared by full-to-dcp (full_to_dcp.c) and
 * reshard (reshard.c): inputs -> rules -> plan -> executor and sink ->
 * atomic commit.  The two commands differ only in what struct fc_job_kind
 * says.
 */
#ifndef FC_WRITE_JOB_H
#define FC_WRITE_JOB_H

#include "fc_convert.h"
#include "fc_source.h"

struct fc_job_kind {
    /* NULL, or FC_OK / an error naming `path` for an input the command does not take */
    int (*check_input)(const char *path, const struct fc_source *src);
    int hf_notes; /* note tied weights of Hugging Face inputs (fc_hf_tie_note) */
};

/* fc_write_job_run() - run one job of `kind`; returns and fills *res as fc_full_to_dcp(). */
int fc_write_job_run(const struct fc_full_to_dcp_opts *o, const struct fc_job_kind *kind,
                     struct fc_full_to_dcp_result *res);

#endif
