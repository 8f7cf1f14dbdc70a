/*
 * fc_hf.c - a Hugging Face model directory's side files: the fields of
 * config.json the tie hints need (jansson), and the copy of the config and
 * tokenizer files into an exported directory, never following a symlink out
 * of the source directory.
 */
#include "fc_hf.h"

#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fc_alloc.h"
#include "fc_error.h"
#include "fc_io.h"

#define FC_HF_CONFIG_CAP ((size_t)16 << 20)
#define FC_HF_FILE_CAP   ((size_t)1 << 30)

/* What transformers' save_pretrained and a tokenizer's save_pretrained write beside the weights. */
const char *const fc_hf_side_files[] = {
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "tokenizer.model",
    "spiece.model",
    "vocab.json",
    "vocab.txt",
    "merges.txt",
    "chat_template.jinja",
    "chat_template.json",
    "preprocessor_config.json",
    "processor_config.json",
    NULL,
};

int fc_hf_config_load(const char *dir, struct fc_hf_config *out)
{
    struct fc_file f = FC_FILE_INIT;
    unsigned char *text = NULL;
    json_error_t jerr;
    memset(out, 0, sizeof(*out));
    out->tie_word_embeddings = -1;
    char *path = fc_path_join(dir, "config.json");
    if (path == NULL)
        return fc_error_set(FC_ENOMEM, "out of memory");
    int rc = fc_file_open_read(&f, path);
    if (rc == FC_ENOENT) {
        fc_free(path);
        return FC_OK;
    }
    if (rc == FC_OK)
        rc = fc_file_read_alloc(&f, 0, (size_t)f.size, FC_HF_CONFIG_CAP, &text);
    fc_file_close(&f);
    json_t *root = rc == FC_OK ? json_loadb((const char *)text, (size_t)f.size, 0, &jerr) : NULL;
    if (rc == FC_OK && !json_is_object(root))
        rc = fc_error_set(FC_ECORRUPT, "%s: not a JSON object", path);
    if (rc == FC_OK) {
        const json_t *tie = json_object_get(root, "tie_word_embeddings");
        const json_t *mt = json_object_get(root, "model_type");
        out->found = 1;
        if (json_is_boolean(tie))
            out->tie_word_embeddings = json_is_true(tie);
        if (json_is_string(mt) && json_string_length(mt) < sizeof(out->model_type))
            memcpy(out->model_type, json_string_value(mt), json_string_length(mt) + 1);
    }
    json_decref(root);
    fc_free(text);
    fc_free(path);
    return rc;
}

/* path resolves inside rdir (a realpath): symlinks may point around inside it, not out. */
static int fc_hf_resolve_inside(const char *rdir, const char *path, char *resolved)
{
    if (realpath(path, resolved) == NULL)
        return errno == ENOENT
                   ? FC_ENOENT
                   : fc_error_set(FC_EIO, "%s: cannot resolve: %s", path, strerror(errno));
    const size_t n = strlen(rdir);
    if (strncmp(resolved, rdir, n) != 0 || (resolved[n] != '/' && strcmp(rdir, "/") != 0))
        return fc_error_set(FC_EINVAL, "%s: a symlink to %s, outside %s; copy the file in", path,
                            resolved, rdir);
    return FC_OK;
}

static int fc_hf_copy_one(const char *rdir, const char *dir, const char *dst, const char *name)
{
    char resolved[PATH_MAX];
    struct fc_file f = FC_FILE_INIT;
    unsigned char *data = NULL;
    char *src = fc_path_join(dir, name), *out = fc_path_join(dst, name);
    int rc = src == NULL || out == NULL ? fc_error_set(FC_ENOMEM, "out of memory") : FC_OK;
    if (rc == FC_OK)
        rc = fc_hf_resolve_inside(rdir, src, resolved);
    if (rc == FC_ENOENT && strcmp(name, "config.json") == 0)
        rc = fc_error_set(FC_EINVAL,
                          "%s: no config.json to copy (--config-from wants a "
                          "Hugging Face model directory)",
                          dir);
    if (rc == FC_OK) {
        rc = fc_file_open_read(&f, resolved);
        /* Name what the user wrote, not where it resolved. */
        if (rc == FC_ECORRUPT)
            rc = fc_error_set(FC_EINVAL, "%s: not a regular file", src);
    }
    if (rc == FC_OK)
        rc = fc_file_read_alloc(&f, 0, (size_t)f.size, FC_HF_FILE_CAP, &data);
    if (rc == FC_OK)
        rc = fc_write_file_atomic(out, data, (size_t)f.size);
    fc_file_close(&f);
    fc_free(data);
    fc_free(src);
    fc_free(out);
    return rc == FC_ENOENT ? FC_OK : rc;
}

int fc_hf_copy_files(const char *dir, const char *dst)
{
    char rdir[PATH_MAX];
    if (realpath(dir, rdir) == NULL)
        return fc_error_set(errno == ENOENT ? FC_EINVAL : FC_EIO, "%s: %s", dir, strerror(errno));
    for (size_t i = 0; fc_hf_side_files[i] != NULL; i++)
        FC_TRY(fc_hf_copy_one(rdir, dir, dst, fc_hf_side_files[i]));
    return FC_OK;
}
