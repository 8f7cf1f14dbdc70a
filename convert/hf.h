/*
 * hf.h - what full-to-dcp tells a user about a Hugging Face input directory.
 */
#ifndef FC_CONVERT_HF_H
#define FC_CONVERT_HF_H

#include "fc_convert.h"
#include "xform.h"

/*
 * fc_hf_tie_note() - save_pretrained leaves tied weights out (lm_head.weight
 * of Qwen2, Gemma, GPT-2; T5's encoder/decoder embed_tokens and lm_head,
 * all shared.weight), and dcp.load into the model then fails on the
 * cluster.  When an input's directory has a config.json and the converted
 * keys hold a tie's source but not its target, append to res->notes one
 * line naming the --tie options to add.  Returns FC_OK or FC_ENOMEM, or the
 * config's read errors.
 */
int fc_hf_tie_note(const struct fc_full_to_dcp_opts *o, const struct fc_xform_result *xr,
                   struct fc_full_to_dcp_result *res);

#endif
