/*
 * hf.c - the --tie note for Hugging Face input directories.
 */
#include "hf.h"

#include <string.h>

#include "fc_alloc.h"
#include "fc_buf.h"
#include "fc_error.h"
#include "fc_hf.h"
#include "fc_io.h"
#include "fc_strmap.h"

/*
 * The ties transformers makes and save_pretrained therefore drops (the
 * models' _tied_weights_keys), as "dst = src" under any common key prefix
 * (BART's "model.", an --add-prefix).  by_config: only when config.json's
 * tie_word_embeddings is true or absent (its default); T5-style encoder and
 * decoder embeddings are always the shared one.
 */
static const struct {
    const char *dst, *src;
    int by_config;
} fc_hf_ties[] = {
    {"lm_head.weight", "model.embed_tokens.weight", 1},  /* Llama, Qwen2, Gemma, Mistral, ... */
    {"lm_head.weight", "transformer.wte.weight", 1},     /* GPT-2 */
    {"encoder.embed_tokens.weight", "shared.weight", 0}, /* T5, mT5, BART */
    {"decoder.embed_tokens.weight", "shared.weight", 0}, {"lm_head.weight", "shared.weight", 1},
};

/* The config.json of an input: in it when it is a directory, else beside it. */
static int fc_hf_input_config(const char *path, struct fc_hf_config *cfg)
{
    if (fc_path_is_dir(path) == 1)
        return fc_hf_config_load(path, cfg);
    const char *slash = strrchr(path, '/');
    char *dir = slash != NULL ? fc_strndup(path, (size_t)(slash - path) + 1) : fc_strdup(".");
    if (dir == NULL)
        return fc_error_set(FC_ENOMEM, "out of memory");
    const int rc = fc_hf_config_load(dir, cfg);
    fc_free(dir);
    return rc;
}

/* Append " --tie P+dst=P+src" for every tie whose source is a key (under some P) and target is not.
 */
static int fc_hf_missing_ties(const struct fc_xform_result *xr, const struct fc_strmap *keys,
                              int tie_words, struct fc_buf *out)
{
    for (size_t t = 0; t < sizeof(fc_hf_ties) / sizeof(fc_hf_ties[0]); t++) {
        if (fc_hf_ties[t].by_config && !tie_words)
            continue;
        const size_t sl = strlen(fc_hf_ties[t].src);
        for (size_t i = 0; i < xr->n; i++) {
            const char *k = xr->specs[i].key;
            const size_t kl = strlen(k);
            if (kl < sl || strcmp(k + kl - sl, fc_hf_ties[t].src) != 0 ||
                (kl > sl && k[kl - sl - 1] != '.'))
                continue;
            const int plen = (int)(kl - sl);
            struct fc_buf dst = FC_BUF_INIT((size_t)1 << 20);
            size_t v;
            int rc = fc_buf_printf(&dst, "%.*s%s", plen, k, fc_hf_ties[t].dst);
            if (rc == FC_OK)
                rc = fc_buf_putc(&dst, '\0');
            if (rc == FC_OK && !fc_strmap_get(keys, (const char *)dst.data, &v))
                rc = fc_buf_printf(out, " --tie %s=%s", (const char *)dst.data, k);
            fc_buf_release(&dst);
            FC_TRY(rc);
        }
    }
    return FC_OK;
}

static int fc_hf_add_note(struct fc_full_to_dcp_result *res, char *note)
{
    char **n = fc_reallocarray(res->notes, res->nnotes + 1, sizeof(*n));
    if (n == NULL) {
        fc_free(note);
        return fc_error_set(FC_ENOMEM, "out of memory");
    }
    res->notes = n;
    res->notes[res->nnotes++] = note;
    return FC_OK;
}

int fc_hf_tie_note(const struct fc_full_to_dcp_opts *o, const struct fc_xform_result *xr,
                   struct fc_full_to_dcp_result *res)
{
    const struct fc_input_arg one = {NULL, o->input};
    const struct fc_input_arg *in = o->ninputs > 0 ? o->inputs : &one;
    const size_t nin = o->ninputs > 0 ? o->ninputs : 1;
    struct fc_hf_config cfg;
    const char *where = NULL;
    int tie_words = 0;
    for (size_t i = 0; i < nin; i++) {
        FC_TRY(fc_hf_input_config(in[i].path, &cfg));
        if (!cfg.found)
            continue;
        where = where != NULL ? where : in[i].path;
        tie_words |= cfg.tie_word_embeddings != 0;
    }
    if (where == NULL)
        return FC_OK;
    struct fc_strmap keys = FC_STRMAP_INIT;
    struct fc_buf ties = FC_BUF_INIT((size_t)1 << 20);
    int rc = FC_OK;
    for (size_t i = 0; i < xr->n && rc == FC_OK; i++)
        rc = fc_strmap_put(&keys, xr->specs[i].key, i, NULL);
    if (rc == FC_OK)
        rc = fc_hf_missing_ties(xr, &keys, tie_words, &ties);
    if (rc == FC_OK && ties.len > 0) {
        struct fc_buf note = FC_BUF_INIT((size_t)1 << 20);
        rc = fc_buf_printf(&note,
                           "%s: its config.json ties weights that save_pretrained left out, so "
                           "dcp.load into the model would miss them; add%.*s",
                           where, (int)ties.len, (const char *)ties.data);
        if (rc == FC_OK)
            rc = fc_buf_putc(&note, '\0');
        if (rc == FC_OK)
            rc = fc_hf_add_note(res, (char *)fc_buf_detach(&note, NULL));
        fc_buf_release(&note);
    }
    fc_buf_release(&ties);
    fc_strmap_release(&keys);
    return rc;
}
