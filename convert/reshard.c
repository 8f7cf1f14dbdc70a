/*
 * reshard.c - fc_reshard(): a DCP or per-rank safetensors checkpoint onto
 * another mesh.  It is the write job of full-to-dcp (write_job.h) with two
 * differences: only checkpoint directories are taken as inputs, and there
 * are no Hugging Face notes.
 */
#include "fc_convert.h"
#include "fc_error.h"
#include "write_job.h"

static int fc_reshard_check_input(const char *path, const struct fc_source *src)
{
    if (!(fc_source_caps(src) & FC_SOURCE_PICKLED)) /* a checkpoint layout, not one pickle */
        return FC_OK;
    return fc_error_set(FC_EFORMAT,
                        "%s: not a DCP or safetensors checkpoint (a %s input; use full-to-dcp)",
                        path, src->format);
}

int fc_reshard(const struct fc_full_to_dcp_opts *o, struct fc_full_to_dcp_result *res)
{
    static const struct fc_job_kind reshard = {fc_reshard_check_input, 0};
    return fc_write_job_run(o, &reshard, res);
}
