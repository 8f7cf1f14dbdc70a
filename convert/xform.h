/*
 * xform.h - the transform pipeline, applied at plan time to tensor specs.
 *
 * Rules (from flags, in command-line order, and --rules files, line by line)
 * run one after the other over the keys of every input, each seeing the names
 * the ones before it produced, like `sed -e`.  They turn the inputs' entries
 * into output specs: names, planner_data paths, placements, aliases (ties)
 * and a per-tensor op list (ops.h: conv2d-to-linear, cast, resize-rows) that
 * the executor runs while streaming.
 *
 * A rule that matches nothing, names a key that is not there (the message
 * says which earlier rule renamed it away), would make two keys equal, more
 * keys than the cap below or a key over 64 KiB (fc_regex.c) is
 * FC_EINVAL (the CLI exits 2); the message starts with the rule's label
 * ("--rename '^a=b'" or "rules.txt:3") and names the key.
 *
 * Invariants of a result: keys are unique; alias_of < own index; an alias has
 * the same dtype, shape and op list as its target and reads the same bytes (the
 * same entry, or one sharing its torch.save storage); a copy (copy_of >= 0) is
 * never an alias; specs own their strings and op lists.
 */
#ifndef FC_XFORM_H
#define FC_XFORM_H

#include <stddef.h>
#include <stdint.h>

#include "fc_buf.h"
#include "fc_dtype.h"
#include "fc_regex.h"
#include "fc_source.h"
#include "ops.h"

/* Ops on one tensor at most (a resize, a conv2d, casts); more is a rules error. */
#define FC_XFORM_MAX_OPS 8

/*
 * The rules may make at most FC_XFORM_KEYS_PER_INPUT_KEY times the inputs'
 * keys, or FC_XFORM_MIN_KEY_CAP where that is more; a rule passing the cap is
 * FC_EINVAL naming it (doubling --copy rules would otherwise grow without end).
 */
#define FC_XFORM_KEYS_PER_INPUT_KEY 8
#define FC_XFORM_MIN_KEY_CAP        1000000

enum fc_rule_kind {
    FC_RULE_SELECT,         /* PREFIX: keep PREFIX.* and strip it */
    FC_RULE_STRIP_PREFIX,   /* PREFIX */
    FC_RULE_ADD_PREFIX,     /* PREFIX */
    FC_RULE_RENAME,         /* FROM=TO (regex, replacement) */
    FC_RULE_DROP,           /* REGEX */
    FC_RULE_COPY,           /* FROM=TO: an independent copy under TO */
    FC_RULE_TIE,            /* DST=SRC: DST stores SRC's bytes (dst = src) */
    FC_RULE_STRIP_WRAPPERS, /* FSDP1, activation-checkpoint, torch.compile, DDP names */
    FC_RULE_REPLICATE,      /* REGEX: stored whole instead of Shard(0) */
    FC_RULE_OPTIM_SKIP,     /* REGEX: no optimizer parameter (frozen, float buffer) */
    FC_RULE_OP,             /* appends an op (ops.c's table: conv2d-to-linear, dtype, ...) */
    FC_RULE_STACK,          /* REGEX=DST: matching keys, by their index group, along a new dim 0 */
    FC_RULE_CONCAT,         /* REGEX,B,...=DST:DIM: a key and its partners joined along DIM */
    FC_RULE_SPLIT,          /* REGEX=A,B,...:DIM[:N,...]: a key cut along DIM */
    FC_RULE_UNSTACK         /* REGEX=PATTERN: a key's slices along dim 0, {} their index */
};

/*
 * The layout rules (stack, concat, split, unstack; xform_layout.c): what
 * their argument says beyond the regex (rule->re, whose text is rule->a).
 */
struct fc_layout_args {
    char **names; /* templates (replacements of rule->re): concat's partners then DST,
                     split's outputs, stack's DST, unstack's PATTERN */
    size_t nnames;
    int dim;         /* concat, split: the dim (negative counts from the end) */
    int64_t *sizes;  /* split: the outputs' extents along dim, or NULL for equal parts */
    int index_group; /* stack: the group of rule->re holding the index */
};

struct fc_rule;
struct fc_pipe; /* xform.c: the specs and what the rules so far renamed away */

/* What a rule does to the specs (xform.c); each kind's is named in xform_rules.c's table. */
typedef int (*fc_rule_step_fn)(struct fc_pipe *p, const struct fc_rule *rule);

struct fc_rule {
    enum fc_rule_kind kind;
    fc_rule_step_fn step;
    char *label; /* "--rename '^a=b'" or "rules.txt:3", for messages */
    char *op;    /* the rule's name as written ("rename") */
    char *arg;   /* its argument as written */
    char *a, *b; /* pattern or key or prefix; replacement or SRC (tie) */
    struct fc_regex *re;
    struct fc_op append; /* FC_RULE_OP: the op it appends (kind and parameters; no input yet) */
    struct fc_layout_args *layout; /* the layout rules' parameters, owned; else NULL */
};

struct fc_xform_rules {
    struct fc_rule *v;
    size_t n;
};

/*
 * fc_xform_rules_add() - append one rule.  op is the flag name without dashes
 * ("select", "strip-prefix", "add-prefix", "rename", "drop", "copy", "tie",
 * "strip-wrappers", "replicate", "optim-skip", or the rule of an op in
 * ops.c's table: "conv2d-to-linear", "dtype", "resize-rows"); arg its value
 * (ignored by strip-wrappers).
 * `where` names the origin for messages ("--rename", "rules.txt:3").
 * Returns FC_OK, FC_EINVAL (unknown op, bad regex or replacement group,
 * missing '=', bad dtype or row count), FC_ENOMEM.
 */
int fc_xform_rules_add(struct fc_xform_rules *r, const char *op, const char *arg,
                       const char *where);

/*
 * fc_xform_rules_load() - append the rules of a file: one "op arg" per line,
 * '#' starts a comment, blank lines ignored ("rename ^module\.(.*)$=\1").
 * Returns fc_xform_rules_add()'s codes plus FC_ENOENT/FC_EIO, and FC_EINVAL
 * for a NUL byte in the file.
 */
int fc_xform_rules_load(struct fc_xform_rules *r, const char *path);

/*
 * fc_xform_rules_parse() - the same on text[0, size), text[size] == '\0' (modified in
 * place); `name` for messages.  A NUL inside the text is FC_EINVAL naming its line.
 */
int fc_xform_rules_parse(struct fc_xform_rules *r, char *text, size_t size, const char *name);
void fc_xform_rules_release(struct fc_xform_rules *r);

/* fc_xform_rules_describe() - the pipeline as parsed, one "rule N  op arg  (origin)" line each. */
int fc_xform_rules_describe(const struct fc_xform_rules *r, struct fc_buf *out);

/* 1 when some rule is of this kind. */
int fc_xform_rules_have(const struct fc_xform_rules *r, enum fc_rule_kind kind);

struct fc_xspec {
    const struct fc_source *src; /* where the data comes from (an input or the optimizer file) */
    const struct fc_pv *value;   /* a value built by a transform (optimizer params), or NULL */
    char *key;
    struct fc_path_elem *path; /* planner_data path; keys owned */
    size_t path_len;
    enum fc_entry_kind kind;
    size_t entry;   /* source entry the data comes from */
    size_t input;   /* which input (order of the command line) */
    fc_dtype dtype; /* output dtype, shape: the source entry's after ops */
    int ndim;
    int64_t shape[FC_MAX_DIMS];
    struct fc_op *ops; /* the op list, applied in order */
    size_t nops;
    long alias_of;  /* -1, or an earlier spec holding the same bytes */
    long copy_of;   /* -1, or the spec this one is a --copy of (its optimizer state follows) */
    int replicate;  /* stored whole instead of Shard(0) */
    int optim_skip; /* no optimizer parameter */
    long param_of;  /* -1, or the parameter whose placement this optimizer state takes */
};

struct fc_xform_result {
    struct fc_xspec *specs;
    size_t n;
    size_t cap;           /* specs allocated: fc_xform_push() grows it geometrically */
    struct fc_pv **owned; /* values built by transforms, freed with the result */
    size_t nowned;
    char **notes; /* informational lines for the user (e.g. conv2d left alone) */
    size_t nnotes;
    struct fc_source
        *virt; /* the tensors the layout rules built (fc_source_add_virtual), or NULL */
};

/* One input of a run: its keys get `prefix` (or nothing when NULL) before the rules run. */
struct fc_xform_input {
    const struct fc_source *src;
    const char *prefix;
};

/*
 * fc_xform_apply_inputs() - run the rules over the entries of every input.
 * A key that two inputs both have is FC_EINVAL naming it and both inputs.
 * Tensors of one input that share storage, offset, shape and strides (tied
 * weights saved by torch.save) and end with the same op list become aliases
 * automatically (copies excepted).  On success *out is owned by the caller
 * (fc_xform_result_release).  Returns FC_OK, FC_EINVAL, FC_ENOMEM.
 */
int fc_xform_apply_inputs(const struct fc_xform_input *in, size_t nin,
                          const struct fc_xform_rules *r, struct fc_xform_result *out);

/*
 * Debug builds (FC_DEBUG) check a result's invariants (above) where the
 * pipeline ends, as SQLite's pager asserts its state: fc_xform_broken() says
 * which one spec *at breaks first (NULL: none), fc_xform_assert_valid()
 * prints it and fails an assert.
 */
#ifdef FC_DEBUG
const char *fc_xform_broken(const struct fc_xform_result *xr, size_t *at);
void fc_xform_assert_valid(const struct fc_xform_result *xr);
#else
#define fc_xform_assert_valid(xr) ((void)0)
#endif

/* fc_xform_apply() - the same for one input without a prefix. */
int fc_xform_apply(const struct fc_source *src, const struct fc_xform_rules *r,
                   struct fc_xform_result *out);
void fc_xform_result_release(struct fc_xform_result *out);

/*
 * fc_xform_map_key() - the name the rules give one key of the model (used
 * for optimizer FQNs): select, strip-prefix, rename and strip-wrappers in
 * order; other rules leave names alone.  *out is a new string, or NULL when
 * the key is unchanged.  Returns FC_OK or FC_ENOMEM.
 */
int fc_xform_map_key(const struct fc_xform_rules *r, const char *key, char **out);

/* Deep copy of spec (key, path, op list) into *dst.  Returns FC_OK or FC_ENOMEM. */
int fc_xspec_dup(struct fc_xspec *dst, const struct fc_xspec *src);

/* Append a blank spec (alias_of = copy_of = -1) to xr; *out is its index. */
int fc_xform_push(struct fc_xform_result *xr, size_t *out);

/* Text of a path element: its key, or a list index in decimal (in tmp). */
const char *fc_path_elem_text(const struct fc_path_elem *e, char *tmp, size_t tmplen);

/* Append an op to spec s (its output dtype/shape follow).  FC_EINVAL past FC_XFORM_MAX_OPS. */
int fc_xspec_push_op(struct fc_xspec *s, const struct fc_op *op, const char *label);

/*
 * The steps of the rule kinds, for xform_rules.c's table: select; strip-prefix,
 * rename and strip-wrappers (rekey); add-prefix; drop; copy; tie; replicate
 * and optim-skip (mark); and the rules of the op table (op).
 */
int fc_step_select(struct fc_pipe *p, const struct fc_rule *rule);
int fc_step_rekey(struct fc_pipe *p, const struct fc_rule *rule);
int fc_step_add_prefix(struct fc_pipe *p, const struct fc_rule *rule);
int fc_step_drop(struct fc_pipe *p, const struct fc_rule *rule);
int fc_step_copy(struct fc_pipe *p, const struct fc_rule *rule);
int fc_step_tie(struct fc_pipe *p, const struct fc_rule *rule);
int fc_step_mark(struct fc_pipe *p, const struct fc_rule *rule);
int fc_step_op(struct fc_pipe *p, const struct fc_rule *rule);

/*
 * The layout rules (xform_layout.c): their parsers (rule->a and rule->b as
 * split at the last '='), their steps, and the release of their parameters.
 * A stacked, concatenated, split or unstacked tensor reads its parts' bytes
 * through a virtual tensor (fc_source_add_virtual(), xr->virt); the specs it
 * takes vanish.  Parts may carry casts (they commute); other ops must come
 * after the rule.  Tied parts are refused.
 */
int fc_parse_stack(struct fc_rule *rule);
int fc_parse_concat(struct fc_rule *rule);
int fc_parse_split(struct fc_rule *rule);
int fc_parse_unstack(struct fc_rule *rule);
int fc_step_stack(struct fc_pipe *p, const struct fc_rule *rule);
int fc_step_concat(struct fc_pipe *p, const struct fc_rule *rule);
int fc_step_split(struct fc_pipe *p, const struct fc_rule *rule);
int fc_step_unstack(struct fc_pipe *p, const struct fc_rule *rule);
void fc_layout_args_free(struct fc_layout_args *a); /* accepts NULL */

/* The label of the first layout rule of r, or NULL. */
const char *fc_xform_layout_rule(const struct fc_xform_rules *r);

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
 * parameter's source shape; a mismatch is FC_EINVAL naming both keys.  It then gets its
 * parameter's op list without casts (state keeps its dtype) and with resize fill rows zero; a
 * --copy of a parameter gets copies of its state.  0-d state (step) is stored whole; the rest is
 * sharded like its parameter.  After --stack, --concat, --split or --unstack
 * (id-keyed state only) the ids count the tensors the rules take, in input
 * order, and each built parameter's state is a virtual tensor of the same
 * parts read from those tensors' state; step is the first part's; parts from
 * two groups or with different state are FC_EINVAL.  param_groups are written per group (app, with
 * "params" as FQN lists) or per parameter (torchtitan's flattened form).  Returns FC_OK, FC_EINVAL,
 * FC_ENOMEM.
 */
int fc_xform_add_optimizer(struct fc_xform_result *xr, const struct fc_xform_rules *rules,
                           const struct fc_source *optim_src, const char *optim_select,
                           enum fc_layout layout);

#endif
