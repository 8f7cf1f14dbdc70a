/*
 * keys.c - output keys are strings torch can read back (keys.h).
 */
#include "keys.h"

#include <string.h>

#include "fc_alloc.h"
#include "fc_error.h"
#include "fc_source.h"

static int fc_key_ok(const char *key)
{
    const size_t n = strlen(key);
    return fc_utf8_invalid_at((const unsigned char *)key, n, 0) == n;
}

/* The text a rule puts into keys as written, for rules fc_xform_map_key() does not replay. */
static const char *fc_rule_new_text(const struct fc_rule *rule)
{
    switch (rule->kind) {
    case FC_RULE_ADD_PREFIX: return rule->a;
    case FC_RULE_COPY: return rule->b;
    default: return NULL;
    }
}

/* The first rule after which `start` is not a valid key (rules replayed one more at a time). */
static int fc_keys_culprit(const struct fc_xform_rules *r, const char *start,
                           const struct fc_rule **out)
{
    *out = NULL;
    for (size_t i = 0; i < r->n; i++) {
        const struct fc_xform_rules upto = {r->v, i + 1};
        const char *text = fc_rule_new_text(&r->v[i]);
        char *key;
        FC_TRY(fc_xform_map_key(&upto, start, &key));
        const int bad = (key != NULL && !fc_key_ok(key)) || (text != NULL && !fc_key_ok(text));
        fc_free(key);
        if (bad) {
            *out = &r->v[i];
            return FC_OK;
        }
    }
    return FC_OK;
}

/* Say where the bad key of spec s came from: its input, the input's prefix, or a rule. */
static int fc_keys_blame(const struct fc_xspec *s, const struct fc_xform_input *in, size_t nin,
                         const struct fc_xform_rules *r)
{
    const char *prefix = s->input < nin ? in[s->input].prefix : NULL;
    const char *orig = s->entry < s->src->nentries ? s->src->entries[s->entry].key : s->key;
    if (!fc_key_ok(orig))
        return fc_error_set(FC_ECORRUPT,
                            "%s: key '%s' is not valid UTF-8, which torch's keys (Python str) "
                            "must be",
                            s->src->path, orig);
    if (prefix != NULL && !fc_key_ok(prefix))
        return fc_error_set(FC_EINVAL,
                            "input prefix '%s' (%s) makes key '%s', which is not valid UTF-8 as "
                            "torch's keys (Python str) must be",
                            prefix, s->src->path, s->key);
    const size_t pl = prefix != NULL ? strlen(prefix) : 0, kl = strlen(orig);
    char *start = fc_malloc(pl + kl + 1);
    const struct fc_rule *rule = NULL;
    if (start == NULL)
        return fc_error_set(FC_ENOMEM, "out of memory");
    if (pl > 0)
        memcpy(start, prefix, pl);
    memcpy(start + pl, orig, kl + 1);
    const int rc = fc_keys_culprit(r, start, &rule);
    fc_free(start);
    FC_TRY(rc);
    return fc_error_set(FC_EINVAL,
                        "%s: makes key '%s', which is not valid UTF-8 as torch's keys (Python "
                        "str) must be",
                        rule != NULL ? rule->label : "the rules", s->key);
}

int fc_keys_check(const struct fc_xform_result *xr, const struct fc_xform_input *in, size_t nin,
                  const struct fc_xform_rules *r)
{
    for (size_t i = 0; i < xr->n; i++)
        if (!fc_key_ok(xr->specs[i].key))
            return fc_keys_blame(&xr->specs[i], in, nin, r);
    return FC_OK;
}
