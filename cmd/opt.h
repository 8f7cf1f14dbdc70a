/*
 * opt.h - checked parsers for option values (zstd readU32FromCharChecked,
 * curl's ban on raw strtol).  Each returns 0 and sets *out, or -1 after
 * printing "fsdpconv: <cmd>: invalid value for <opt>: '<s>' (<why>)".
 */
#ifndef FC_OPT_H
#define FC_OPT_H

#include <stdint.h>

#include "fc_dtype.h"

/* Integer in [min, max]. */
int fc_opt_int(const char *cmd, const char *opt, const char *s, long min, long max, long *out);
/* Size with optional suffix: 512, 64K, 2M, 1G, 2GiB, 1.5GB (K/M/G/T are powers of 1024). */
int fc_opt_size(const char *cmd, const char *opt, const char *s, uint64_t *out);
/* Floating dtype name for --dtype (float32/fp32/bf16/...); floating types only. */
int fc_opt_float_dtype(const char *cmd, const char *opt, const char *s, fc_dtype *out);
/* "replicate=R,shard=S" (either order; both >= 1). */
int fc_opt_mesh(const char *cmd, const char *opt, const char *s, int *replicate, int *shard);

/* "zstd" or "zstd:<level>" (1..22; default 3) -> *level. */
int fc_opt_compress(const char *cmd, const char *opt, const char *s, int *level);

/* "cpu", "cuda" or "auto" -> 1, 2, 0 (enum fc_engine). */
int fc_opt_engine(const char *cmd, const char *opt, const char *s, int *engine);

#endif
