/*
 * fuzz_dcp_metadata.c - DCP .metadata reader, and writer round trip.
 *
 * Read the input; on success run the coverage check, write the model, write
 * it again (same bytes), read the output back and compare field by field.
 * Any mismatch aborts (a finding).
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fc_buf.h"
#include "fc_dcp.h"

#include "../unit/dcp_meta_diff.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct fc_dcp_meta *m = NULL, *again = NULL;
    struct fc_buf a = FC_BUF_INIT((size_t)1 << 30), b = FC_BUF_INIT((size_t)1 << 30);
    struct fc_buf report = FC_BUF_INIT(1 << 20);

    if (fc_dcp_meta_read(&m, data, size, "fuzz.metadata") < 0)
        return 0;
    (void)fc_dcp_check(m, &report, NULL);
    if (fc_dcp_meta_write(&a, m) < 0 || fc_dcp_meta_write(&b, m) < 0)
        abort(); /* every model the reader returns must be writable */
    if (a.len != b.len || memcmp(a.data, b.data, a.len) != 0)
        abort(); /* nondeterministic writer */
    if (fc_dcp_meta_read(&again, a.data, a.len, "fuzz.rewritten") < 0)
        abort(); /* our own output must read back */
    if (fc_dcp_meta_diff(NULL, m, again) != 0)
        abort(); /* the round trip lost or changed something */
    fc_dcp_meta_free(again);
    fc_dcp_meta_free(m);
    fc_buf_release(&a);
    fc_buf_release(&b);
    fc_buf_release(&report);
    return 0;
}
