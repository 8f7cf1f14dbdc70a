/*
 * fc_buf.h - growable byte buffer with a hard cap (curl's dynbuf).
 *
 * Invariants: `data` is NULL or points to `alloc` bytes of which `len` are
 * used; `len <= cap`.  A buffer never grows past `cap`: appends that would
 * return FC_ENOMEM with a message, so a hostile input cannot make us allocate
 * without bound.  After fc_buf_detach() the caller owns the memory.
 */
#ifndef FC_BUF_H
#define FC_BUF_H

#include <stddef.h>
#include <stdint.h>

struct fc_buf {
    unsigned char *data;
    size_t len;
    size_t alloc;
    size_t cap;
};

#define FC_BUF_INIT(capacity)                                                                      \
    {                                                                                              \
        NULL, 0, 0, (capacity)                                                                     \
    }

void fc_buf_init(struct fc_buf *b, size_t cap);
void fc_buf_release(struct fc_buf *b);                           /* free memory, back to empty */
void fc_buf_clear(struct fc_buf *b);                             /* len = 0, keep memory */
unsigned char *fc_buf_detach(struct fc_buf *b, size_t *len_out); /* caller frees with fc_free */

/* Each returns FC_OK or FC_ENOMEM (allocation failure or cap exceeded). */
int fc_buf_reserve(struct fc_buf *b, size_t extra);
int fc_buf_append(struct fc_buf *b, const void *p, size_t n);
int fc_buf_putc(struct fc_buf *b, unsigned char c);
int fc_buf_puts(struct fc_buf *b, const char *s);
int fc_buf_printf(struct fc_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int fc_buf_put_le16(struct fc_buf *b, uint16_t v);
int fc_buf_put_le32(struct fc_buf *b, uint32_t v);
int fc_buf_put_le64(struct fc_buf *b, uint64_t v);
int fc_buf_fill(struct fc_buf *b, unsigned char c, size_t n);

#endif
