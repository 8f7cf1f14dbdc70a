/*
 * keys.h - the check every output key passes before anything is written.
 *
 * torch reads a key back as a Python str, so a key must be UTF-8: other
 * bytes give a .metadata or .pt that neither torch nor our own reader loads.
 * Lone surrogates (a Python str can hold them, and pickle carries them with
 * surrogatepass) are refused too, since no UTF-8 text format (safetensors'
 * JSON header, an index) can hold them and no real model has them.
 * full-to-dcp, reshard and dcp-to-full run this on the result of the rules,
 * which every output key comes from.
 */
#ifndef FC_KEYS_H
#define FC_KEYS_H

#include <stddef.h>

#include "xform.h"

/*
 * fc_keys_check() - FC_OK when every key of xr is valid; else the first bad
 * one is FC_ECORRUPT naming the input that holds it, or FC_EINVAL naming the
 * input prefix or the first rule of r that made it (in: the inputs given to
 * fc_xform_apply_inputs, nin of them).  FC_ENOMEM.
 */
int fc_keys_check(const struct fc_xform_result *xr, const struct fc_xform_input *in, size_t nin,
                  const struct fc_xform_rules *r);

#endif
