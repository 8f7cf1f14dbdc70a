/*
 * xform_pipe.h - what the files of the rule pipeline share (xform.c and
 * xform_layout.c), not for use outside them: the pipeline's state and the
 * helpers the steps of the rules use on the specs.
 */
#ifndef FC_XFORM_PIPE_H
#define FC_XFORM_PIPE_H

#include "fc_strmap.h"
#include "xform.h"

struct fc_gone {
    char *key;
    const char *by; /* the label of the rule that renamed it away (borrowed from the rules) */
};

struct fc_pipe {
    struct fc_xform_result *out;
    struct fc_gone *gone;
    size_t ngone;
    size_t max_keys; /* fc_xform_key_cap() of the inputs */
};

/* Free what a spec owns (key, path, ops) and clear those fields. */
void fc_xspec_clear(struct fc_xspec *s);

/* Give spec a new key (taking ownership of newkey, freed on failure too); its path follows. */
int fc_xspec_rekey(struct fc_xspec *s, char *newkey);

/* FC_EINVAL naming the rule when one more key would pass the pipeline's key cap. */
int fc_pipe_room(const struct fc_pipe *p, const struct fc_rule *rule);

/* Record that rule renamed key away (later rules naming it are told which). */
int fc_pipe_gone(struct fc_pipe *p, const char *key, const struct fc_rule *rule);

/* Map every key to its spec index. */
int fc_key_index(const struct fc_xform_result *out, struct fc_strmap *m);

/* The tensor spec named key, or FC_EINVAL naming the rule (and what renamed key away). */
int fc_find_tensor(const struct fc_pipe *p, const struct fc_rule *rule, const char *key, long *idx);

/* FC_EINVAL naming the rule when two specs have the same key. */
int fc_check_unique(const struct fc_xform_result *out, const struct fc_rule *rule);

/* Keep the specs whose keep[] flag is set, renumbering aliases and copies. */
int fc_specs_compact(struct fc_xform_result *out, const unsigned char *keep);

/* FC_EINVAL naming the rule when spec i is tied to another (an op on one of a pair). */
int fc_check_untied(const struct fc_xform_result *out, const struct fc_rule *rule, long i);

#endif
