/*
 * fc_hf.h - the files of a Hugging Face model directory besides its weights:
 * config.json as far as fsdpconv needs it, and the config/tokenizer files
 * that from_pretrained reads, copied into an exported directory.
 */
#ifndef FC_HF_H
#define FC_HF_H

struct fc_hf_config {
    int found;               /* dir/config.json exists */
    int tie_word_embeddings; /* 1 true, 0 false, -1 absent (transformers' default: true) */
    char model_type[64];     /* "" when absent */
};

/*
 * fc_hf_config_load() - read dir/config.json (at most 16 MiB).  No file is
 * FC_OK with found = 0.  Returns FC_OK, FC_ECORRUPT (not a JSON object),
 * FC_EIO, FC_ENOMEM.
 */
int fc_hf_config_load(const char *dir, struct fc_hf_config *out);

/*
 * The files fc_hf_copy_files() copies when present, config.json first (it is
 * required); NULL-terminated.
 */
extern const char *const fc_hf_side_files[];

/*
 * fc_hf_copy_files() - copy dir's config.json (required: FC_EINVAL without
 * it) and whichever other fc_hf_side_files exist into dst (each written to a
 * temporary, fsynced and renamed).  A file that is not a regular file, or a
 * symlink that resolves outside dir, is FC_EINVAL naming it: nothing read
 * reaches outside the directory given.  Each file is at most 1 GiB.
 * Returns FC_OK, FC_EINVAL, FC_EIO, FC_ENOMEM.
 */
int fc_hf_copy_files(const char *dir, const char *dst);

#endif
