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

/* ---- inspect ---- */

struct fc_inspect_opts {
    const char *path;
    const char *key_regex; /* POSIX extended regex over keys, or NULL for all */
    int checksum;          /* compute SHA-256 of every selected tensor */
    int verify;            /* DCP: read every item, check lengths, shapes and CRCs */
};

struct fc_dcp_meta;

struct fc_inspect_result {
    /* Exactly one of src (full checkpoint) and dcp (DCP directory) is set. */
    struct fc_source *src;
    struct fc_dcp_meta *dcp;
    const char *format;    /* "torch.save", "safetensors", "safetensors-index", "dcp" */
    size_t *selected;      /* indices of the entries that match key_regex, in order */
    size_t nselected;
    char (*sha256)[65];    /* per selected entry when checksum was asked; "" for values */
    char *coverage_report; /* DCP: one line per problem found, or NULL */
    size_t coverage_problems;
    char **files;          /* DCP: file names and their sizes */
    uint64_t *file_bytes;
    size_t nfiles;
};

/*
 * fc_inspect() - open opts->path (full checkpoint or DCP directory), select
 * entries and compute what was asked.  On success *r is filled and owned by
 * the caller (fc_inspect_result_release).  Returns FC_OK, FC_EINVAL (bad
 * regex), or the source's open/read errors.
 */
int fc_inspect(const struct fc_inspect_opts *opts, struct fc_inspect_result *r);
void fc_inspect_result_release(struct fc_inspect_result *r);

/* SHA-256 (hex, NUL-terminated) of a tensor's logical C-contiguous bytes. */
int fc_tensor_sha256(const struct fc_source *src, const struct fc_entry *e, char hex_out[65]);

#endif
