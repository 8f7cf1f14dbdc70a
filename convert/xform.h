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
    struct fc_regex_rule *optim_skips; /* model tensors that are no optimizer parameter */
    size_t noptim_skips;
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
    const struct fc_source *src; /* where the data comes from (the model or the optimizer file) */
    const struct fc_pv *value;   /* a value built by a transform (optimizer params), or NULL */
    char *key;
    struct fc_path_elem *path; /* planner_data path; keys owned */
    size_t path_len;
    enum fc_entry_kind kind;
    size_t entry;   /* source entry the data comes from */
    fc_dtype dtype; /* output dtype */
    int ndim;       /* output shape */
    int64_t shape[FC_MAX_DIMS];
    int conv2d;    /* op: [O,C,kh,kw] -> [O, kh*kw*C] (BAGEL) */
    long alias_of; /* -1, or an earlier spec holding the same bytes */
    int replicate; /* stored whole instead of Shard(0) */
};

struct fc_xform_result {
    struct fc_xspec *specs;
    size_t n;
    struct fc_pv **owned; /* values built by transforms, freed with the result */
    size_t nowned;
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

/*
 * fc_xform_rename_key() - apply the rules' strip-prefix and renames to one
 * key (used for optimizer FQNs, which name model keys).  *out is a new string,
 * or NULL when the key is unchanged.  Returns FC_OK or FC_ENOMEM.
 */
int fc_xform_rename_key(const struct fc_xform_rules *r, const char *key, char **out);

/* The checkpoint layouts of --layout (input-formats.md C.5). */
enum fc_layout {
    FC_LAYOUT_NONE,       /* keys as the transforms leave them */
    FC_LAYOUT_TORCHTITAN, /* model.<fqn>, optimizer.state.<fqn>.<name>,
                             optimizer.param_groups.<fqn>.<hp> */
    FC_LAYOUT_APP /* app.model.<fqn>, app.optim.state.<fqn>.<name>, app.optim.param_groups.<g>.<hp>
                   */
};

/*
 * fc_xform_add_optimizer() - turn a full optimizer state dict into the layout
 * torch.distributed.checkpoint.state_dict.get_state_dict gives FSDP2, and
 * prefix the model keys for `layout`.
 *
 * The optimizer comes from optim_src (a torch.save file; optim_select names
 * its subtree, e.g. "optimizer", or NULL for the root).  Its "state" is keyed
 * by FQN (FSDP1's full optim state dict; FQNs get the model's strip-prefix
 * and renames) or by integer ids (torch.optim), which are mapped to model
 * keys in parameter order: the model's floating tensors in order (a state
 * dict lists each module's parameters before its buffers, so this is
 * model.parameters() order once buffers are gone), skipping --replicate and
 * --optim-skip matches (buffers, frozen parameters) and ties.  Each state tensor must have its
 * parameter's shape (before conv2d-to-linear, whose permutation it then gets too); a mismatch is
 * FC_EINVAL naming both keys.  State tensors keep their dtype; 0-d ones (step) are stored whole;
 * the others are sharded like their parameter.  param_groups are written per group (app, with
 * "params" as FQN lists) or per parameter (torchtitan's flattened form).  Returns FC_OK, FC_EINVAL,
 * FC_ENOMEM.
 */
int fc_xform_add_optimizer(struct fc_xform_result *xr, const struct fc_xform_rules *rules,
                           const struct fc_source *optim_src, const char *optim_select,
                           enum fc_layout layout);

#endif
