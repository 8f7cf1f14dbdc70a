/*
 * fuzz_tp_plan.c - the --tp-plan file parser and rule matching on arbitrary
 * text: parse the plan, then look up the tp dim of every key of the tiny
 * fixture (fixtures/full/tiny_vitlm.pt, found from the repository root where
 * the replay and libFuzzer scripts run) and of a few hostile keys.  A lookup
 * that succeeds must give "replicate" or a dim of the tensor; regexes run
 * under fc_regex's limits, so no pattern may hang or exhaust memory.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fc_alloc.h"
#include "fc_error.h"
#include "fc_source.h"
#include "tp.h"

#define FUZZ_TEXT_MAX ((size_t)1 << 14)

/* 0 when the lookup succeeded (and gave a valid dim); -1 on a refusal (a limit hit, say). */
static int fuzz_lookup(struct fc_tp_plan *plan, const char *key, int ndim)
{
    int dim = -2;
    if (fc_tp_plan_dim(plan, key, ndim, &dim) < 0)
        return -1;
    if (dim < -1 || dim >= ndim)
        abort();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char *const hostile[] = {"", "a", "layers.0.attention.wq.weight",
                                          "\xff\xfe.weight", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa!"};
    static struct fc_source *src;
    static int tried;
    struct fc_tp_plan plan = FC_TP_PLAN_INIT;
    if (size > FUZZ_TEXT_MAX)
        return 0;
    if (!tried) {
        tried = 1;
        if (fc_source_open(&src, "fixtures/full/tiny_vitlm.pt", 0) != FC_OK)
            src = NULL;
    }
    char *text = fc_malloc(size + 1);
    if (text == NULL)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    if (fc_tp_plan_parse(&plan, text, size, "fuzz") == FC_OK) {
        /* As the planner does: the first refusal ends the run. */
        int rc = 0;
        for (size_t i = 0; rc == 0 && src != NULL && i < src->nentries; i++)
            if (src->entries[i].kind == FC_ENTRY_TENSOR)
                rc = fuzz_lookup(&plan, src->entries[i].key, src->entries[i].t.ndim);
        for (size_t i = 0; rc == 0 && i < sizeof(hostile) / sizeof(hostile[0]); i++)
            rc = fuzz_lookup(&plan, hostile[i], 2);
        if (rc == 0)
            (void)fc_tp_plan_check_used(&plan);
    }
    fc_tp_plan_release(&plan);
    fc_free(text);
    return 0;
}
