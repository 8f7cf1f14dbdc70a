/*
 * tp.h - the tensor-parallel plan: which tensor dim each key shards over the
 * mesh's tp dim.
 *
 * A plan is a list of rules "REGEX=DIM" (--tp) or "REGEX DIM" lines of a
 * file (--tp-plan; '#' starts a comment, blank lines are ignored).  REGEX is
 * a regular expression as every key option takes it (fc_regex.h: PCRE2, like
 * Python's re.search; anchor it with ^ and $ to match whole keys); DIM is a
 * tensor dim (0, 1, ...) or "replicate".  A key no rule matches is replicated
 * over tp.  Every rule matching a key must say the same DIM, and DIM must be a
 * dim of the tensor; otherwise the key is refused with a message naming the
 * rule(s) and the key.  A rule that matches no key at all is an error
 * (fc_tp_plan_check_used()): a typo must not silently replicate a tensor.
 *
 * How torch's parallel styles map to dims (torch.distributed.tensor.parallel):
 * ColwiseParallel shards nn.Linear's weight [out, in] and bias on dim 0 and
 * nn.Embedding's weight [vocab, dim] on dim 1; RowwiseParallel shards
 * nn.Linear's weight on dim 1 (its bias is replicated) and nn.Embedding's
 * weight on dim 0; SequenceParallel leaves norm weights replicated.
 *
 * Ownership: a plan owns its rules (fc_tp_plan_release()).  Lookups count
 * each rule's hits, so a plan is used by one thread.
 */
#ifndef FC_TP_H
#define FC_TP_H

#include <stddef.h>

struct fc_regex;

struct fc_tp_rule {
    struct fc_regex *re; /* knows its pattern and its origin ("--tp", "FILE:LINE") */
    int dim;             /* -1: replicate */
    size_t hits;         /* keys matched so far */
};

struct fc_tp_plan {
    struct fc_tp_rule *rules;
    size_t n;
};

#define FC_TP_PLAN_INIT                                                                            \
    {                                                                                              \
        NULL, 0                                                                                    \
    }

/*
 * fc_tp_plan_add() - add "REGEX=DIM" (split at the last '=').  `where` names
 * the origin for messages.  Returns FC_OK, FC_EINVAL (no '=', empty regex, a
 * regex that does not compile, a DIM that is neither a dim nor "replicate"),
 * FC_ENOMEM.
 */
int fc_tp_plan_add(struct fc_tp_plan *p, const char *spec, const char *where);

/*
 * fc_tp_plan_load() - add the rules of a plan file ("REGEX DIM" per line,
 * split at the last run of blanks).  Returns fc_tp_plan_add()'s codes (the
 * message names FILE:LINE) plus FC_ENOENT/FC_EIO.
 */
int fc_tp_plan_load(struct fc_tp_plan *p, const char *path);

/* fc_tp_plan_parse() - the same on text[0, size), text[size] == '\0' (modified in place). */
int fc_tp_plan_parse(struct fc_tp_plan *p, char *text, size_t size, const char *name);

void fc_tp_plan_release(struct fc_tp_plan *p);

/*
 * fc_tp_plan_dim() - the tp dim of `key`, a tensor of ndim dims, into *dim_out
 * (-1: replicated over tp), counting the hits of the rules that match.
 * Returns 1 when a rule matched (the key's module is tensor-parallel: its
 * tensors are DTensors on the tp mesh even when replicated there), FC_OK (0)
 * when none did, or FC_EINVAL when two matching rules disagree, a matching
 * rule's DIM is >= ndim (the message names the rule(s) and the key) or a
 * pattern hits a regex limit.
 */
int fc_tp_plan_dim(struct fc_tp_plan *p, const char *key, int ndim, int *dim_out);

/* fc_tp_plan_check_used() - FC_EINVAL naming the first rule that matched no key. */
int fc_tp_plan_check_used(const struct fc_tp_plan *p);

#endif
