/*
 * fc_buf.c - the capped growable buffer of fc_buf.h: doubling growth that
 * stops at the cap with FC_ENOMEM, so no input can make it grow without bound.
 */
#include "fc_buf.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "fc_alloc.h"
#include "fc_endian.h"
#include "fc_error.h"

void fc_buf_init(struct fc_buf *b, size_t cap)
{
    b->data = NULL;
    b->len = 0;
    b->alloc = 0;
    b->cap = cap;
}

void fc_buf_release(struct fc_buf *b)
{
    fc_free(b->data);
    b->data = NULL;
    b->len = 0;
    b->alloc = 0;
}

void fc_buf_clear(struct fc_buf *b)
{
    b->len = 0;
}

unsigned char *fc_buf_detach(struct fc_buf *b, size_t *len_out)
{
    unsigned char *d = b->data;
    if (len_out != NULL)
        *len_out = b->len;
    b->data = NULL;
    b->len = 0;
    b->alloc = 0;
    return d;
}

int fc_buf_reserve(struct fc_buf *b, size_t extra)
{
    size_t need;
    if (extra > b->cap || b->len > b->cap - extra)
        return fc_error_set(FC_ENOMEM, "buffer would exceed its cap of %zu bytes", b->cap);
    need = b->len + extra;
    if (need <= b->alloc)
        return FC_OK;
    size_t n = b->alloc < 64 ? 64 : b->alloc;
    while (n < need)
        n = n > b->cap / 2 ? b->cap : n * 2;
    unsigned char *p = fc_reallocarray(b->data, n, 1);
    if (p == NULL)
        return fc_error_set(FC_ENOMEM, "out of memory growing a buffer to %zu bytes", n);
    b->data = p;
    b->alloc = n;
    return FC_OK;
}

int fc_buf_append(struct fc_buf *b, const void *p, size_t n)
{
    if (n == 0)
        return FC_OK;
    FC_TRY(fc_buf_reserve(b, n));
    memcpy(b->data + b->len, p, n);
    b->len += n;
    return FC_OK;
}

int fc_buf_putc(struct fc_buf *b, unsigned char c)
{
    return fc_buf_append(b, &c, 1);
}

int fc_buf_puts(struct fc_buf *b, const char *s)
{
    return fc_buf_append(b, s, strlen(s));
}

int fc_buf_printf(struct fc_buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    const int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0)
        return fc_error_set(FC_ERROR, "formatting failed");
    FC_TRY(fc_buf_reserve(b, (size_t)n + 1));
    va_start(ap, fmt);
    vsnprintf((char *)b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
    return FC_OK;
}

int fc_buf_put_le16(struct fc_buf *b, uint16_t v)
{
    unsigned char t[2];
    fc_write_le16(t, v);
    return fc_buf_append(b, t, sizeof(t));
}

int fc_buf_put_le32(struct fc_buf *b, uint32_t v)
{
    unsigned char t[4];
    fc_write_le32(t, v);
    return fc_buf_append(b, t, sizeof(t));
}

int fc_buf_put_le64(struct fc_buf *b, uint64_t v)
{
    unsigned char t[8];
    fc_write_le64(t, v);
    return fc_buf_append(b, t, sizeof(t));
}

int fc_buf_fill(struct fc_buf *b, unsigned char c, size_t n)
{
    if (n == 0)
        return FC_OK;
    FC_TRY(fc_buf_reserve(b, n));
    memset(b->data + b->len, c, n);
    b->len += n;
    return FC_OK;
}
