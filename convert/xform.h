/*
 * xform.h - post-init transforms, applied at plan time to tensor specs.
 *
 * A rule set (from flags or a --rules file) turns the source's entries into
 * output specs: names, shapes, dtypes, aliases and a per-tensor op chain
 * (conv2d->linear permute, cast) that the executor applies while streaming.
 * Both ops are row-local - rows [a, b) of the output come from rows [a, b) of
 * the input - which is what lets big tensors move in slabs.
 *
 * Steps run in a fixed order: select, strip-prefix, rename, drop,
 * conv2d-to-linear, tie, dtype, add-prefix; a key named by a step is the
 * name after the steps before it.  A rule naming something the input does
 * not have is FC_EINVAL (the CLI exits 2) with the key in the message.
 *
 * Invariants of a result: keys are unique; alias_of < own index; an alias has
 * the same dtype, shape and op chain as its target; specs own their strings.
 */
#ifndef FC_XFORM_H
#define FC_XFORM_H

#include <regex.h>
#include <stddef.h>
#include <stdint.h>

#include "fc_dtype.h"
#include "fc_source.h"

struct fc_regex_rule {
    char *pattern;
    char *repl; /* rename only: replacement with \0..\9 group references */
    regex_t re;
};

struct fc_tie_rule {
    char *dst;
    char *src;
};

struct fc_xform_rules {
    char *select;
    char *strip_prefix;
    char *add_prefix;
    struct fc_regex_rule *renames;
    size_t nrenames;
    struct fc_regex_rule *drops;
    size_t ndrops;
    char **conv2d;
    size_t nconv2d;
    struct fc_tie_rule *ties;
    size_t nties;
    fc_dtype dtype;                 /* FC_DTYPE_INVALID: keep every dtype */
    struct fc_regex_rule *replicas; /* keys stored whole (buffers): --replicate */
    size_t nreplicas;
};

/*
 * fc_xform_rules_add() - add one rule.  op is the flag name without dashes
 * ("select", "strip-prefix", "add-prefix", "rename", "drop",
 * "conv2d-to-linear", "tie", "dtype", "replicate"); arg its value.  `where`
 * names the origin for messages ("--rename", "rules.txt:3").
 * Returns FC_OK, FC_EINVAL (unknown op, bad regex, missing '=', bad dtype,
 * select/prefix given twice), FC_ENOMEM.
 */
int fc_xform_rules_add(struct fc_xform_rules *r, const char *op, const char *arg,
                       const char *where);

/*
 * fc_xform_rules_load() - read a rules file: one "op arg" per line, '#'
 * starts a comment, blank lines ignored ("rename ^module\.(.*)$=\1").
 * Returns fc_xform_rules_add()'s codes plus FC_ENOENT/FC_EIO.
 */
int fc_xform_rules_load(struct fc_xform_rules *r, const char *path);
void fc_xform_rules_release(struct fc_xform_rules *r);

struct fc_xspec {
    char *key;
    struct fc_path_elem *path; /* planner_data path; keys owned */
    size_t path_len;
    enum fc_entry_kind kind;
    size_t entry;              /* source entry the data comes from */
    fc_dtype dtype;            /* output dtype */
    int ndim;                  /* output shape */
    int64_t shape[FC_MAX_DIMS];
    int conv2d;                /* op: [O,C,kh,kw] -> [O, kh*kw*C] (BAGEL) */
    long alias_of;             /* -1, or an earlier spec holding the same bytes */
    int replicate;             /* stored whole instead of Shard(0) */
};

struct fc_xform_result {
    struct fc_xspec *specs;
    size_t n;
    char **notes; /* informational lines for the user (e.g. conv2d left alone) */
    size_t nnotes;
};

/*
 * fc_xform_apply() - run the rules over src's entries.  Tensors that share
 * storage, offset, shape and strides in the input (tied weights saved by
 * torch.save) and end with the same op chain become aliases automatically.
 * On success *out is owned by the caller (fc_xform_result_release).
 * Returns FC_OK, FC_EINVAL, FC_ENOMEM.
 */
int fc_xform_apply(const struct fc_source *src, const struct fc_xform_rules *r,
                   struct fc_xform_result *out);
void fc_xform_result_release(struct fc_xform_result *out);

#endif
