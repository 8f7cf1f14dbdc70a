/*
 * fc_pickle_repr.c - fc_pv_repr(): a value tree printed as Python prints it.
 */
#include "fc_pickle.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fc_alloc.h"
#include "fc_checked.h"
#include "fc_endian.h"
#include "fc_error.h"
#include "fc_pickle_internal.h"
#include "fc_strmap.h"

/* ---- fc_pv_repr ---- */

struct fc_repr {
    struct fc_buf *out;
    size_t start;
    size_t max;
    int truncated;
    int rc;
};

static void fc_repr_put(struct fc_repr *r, const void *s, size_t n)
{
    if (r->truncated || r->rc < 0)
        return;
    const size_t used = r->out->len - r->start;
    const size_t avail = r->max - used;
    if (n > avail) {
        r->truncated = 1;
        n = avail;
    }
    const int rc = fc_buf_append(r->out, s, n);
    if (rc < 0)
        r->rc = rc;
}

static void fc_repr_puts(struct fc_repr *r, const char *s)
{
    fc_repr_put(r, s, strlen(s));
}

/* Python's repr(float): shortest round-trip digits, exponent form outside 1e-4 <= |x| < 1e16. */
static void fc_format_float(char *out, size_t cap, double v)
{
    if (isnan(v)) {
        snprintf(out, cap, "nan");
        return;
    }
    if (isinf(v)) {
        snprintf(out, cap, v > 0 ? "inf" : "-inf");
        return;
    }
    char e[40];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(e, sizeof(e), "%.*e", prec - 1, v);
        if (strtod(e, NULL) == v)
            break;
    }
    /* e is "[-]d[.ddd]e(+|-)XX" */
    const char *p = e;
    int neg = 0;
    if (*p == '-') {
        neg = 1;
        p++;
    }
    char digits[24];
    size_t nd = 0;
    while (*p != 'e' && *p != '\0') {
        if (*p != '.' && nd + 1 < sizeof(digits))
            digits[nd++] = *p;
        p++;
    }
    digits[nd] = '\0';
    while (nd > 1 && digits[nd - 1] == '0')
        digits[--nd] = '\0';
    long ex = 0;
    if (*p == 'e') {
        char *end = NULL;
        ex = strtol(p + 1, &end, 10);
    }
    size_t k = 0;
    char buf[64];
#define FC_PUTC(c)                                                                                 \
    do {                                                                                           \
        if (k + 1 < sizeof(buf))                                                                   \
            buf[k++] = (c);                                                                        \
    } while (0)
    if (neg)
        FC_PUTC('-');
    if (ex >= -4 && ex < 16) {
        if (ex >= 0) {
            for (long i = 0; i <= ex; i++)
                FC_PUTC((size_t)i < nd ? digits[i] : '0');
            FC_PUTC('.');
            if ((size_t)ex + 1 < nd) {
                for (size_t i = (size_t)ex + 1; i < nd; i++)
                    FC_PUTC(digits[i]);
            } else {
                FC_PUTC('0');
            }
        } else {
            FC_PUTC('0');
            FC_PUTC('.');
            for (long i = 0; i < -ex - 1; i++)
                FC_PUTC('0');
            for (size_t i = 0; i < nd; i++)
                FC_PUTC(digits[i]);
        }
        buf[k] = '\0';
    } else {
        FC_PUTC(digits[0]);
        if (nd > 1) {
            FC_PUTC('.');
            for (size_t i = 1; i < nd; i++)
                FC_PUTC(digits[i]);
        }
        buf[k] = '\0';
        snprintf(buf + k, sizeof(buf) - k, "e%c%02ld", ex < 0 ? '-' : '+', ex < 0 ? -ex : ex);
    }
#undef FC_PUTC
    snprintf(out, cap, "%s", buf);
}

/* Decimal rendering of a little-endian two's complement integer of at most 64 bytes. */
static void fc_repr_bigint(struct fc_repr *r, const unsigned char *b, size_t n)
{
    if (n > 64) {
        char t[64];
        snprintf(t, sizeof(t), "<int of %zu bytes>", n);
        fc_repr_puts(r, t);
        return;
    }
    unsigned char mag[64];
    const int neg = n > 0 && (b[n - 1] & 0x80);
    unsigned carry = 1;
    for (size_t i = 0; i < n; i++) {
        unsigned x = b[i];
        if (neg) {
            x = (~x & 0xffu) + carry;
            carry = x >> 8;
            x &= 0xffu;
        }
        mag[i] = (unsigned char)x;
    }
    char dig[160];
    size_t nd = 0;
    size_t len = n;
    while (len > 0 && mag[len - 1] == 0)
        len--;
    while (len > 0) {
        unsigned rem = 0;
        for (size_t i = len; i-- > 0;) {
            const unsigned cur = (rem << 8) | mag[i];
            mag[i] = (unsigned char)(cur / 10);
            rem = cur % 10;
        }
        dig[nd++] = (char)('0' + rem);
        while (len > 0 && mag[len - 1] == 0)
            len--;
    }
    if (nd == 0)
        dig[nd++] = '0';
    if (neg)
        fc_repr_put(r, "-", 1);
    char out[160];
    for (size_t i = 0; i < nd; i++)
        out[i] = dig[nd - 1 - i];
    fc_repr_put(r, out, nd);
}

static void fc_repr_str(struct fc_repr *r, const struct fc_pv *v, int bytes)
{
    const unsigned char *s = (const unsigned char *)v->u.str.s;
    const size_t n = v->u.str.len;
    char q = '\'';
    if (memchr(s, '\'', n) != NULL && memchr(s, '"', n) == NULL)
        q = '"';
    if (bytes)
        fc_repr_put(r, "b", 1);
    fc_repr_put(r, &q, 1);
    size_t run = 0; /* bytes copied verbatim in one go */
    for (size_t i = 0; i < n && !r->truncated; i++) {
        const unsigned char c = s[i];
        const char *esc = NULL;
        char hex[8];
        if (c == '\\')
            esc = "\\\\";
        else if (c == (unsigned char)q)
            esc = q == '\'' ? "\\'" : "\\\"";
        else if (c == '\n')
            esc = "\\n";
        else if (c == '\r')
            esc = "\\r";
        else if (c == '\t')
            esc = "\\t";
        else if (c < 0x20 || c == 0x7f || (bytes && c >= 0x80)) {
            snprintf(hex, sizeof(hex), "\\x%02x", c);
            esc = hex;
        }
        if (esc == NULL) {
            run++;
            continue;
        }
        fc_repr_put(r, s + i - run, run);
        run = 0;
        fc_repr_puts(r, esc);
    }
    fc_repr_put(r, s + n - run, run);
    fc_repr_put(r, &q, 1);
}

static void fc_repr_global_name(struct fc_repr *r, const struct fc_pv *g)
{
    if (g != NULL && g->kind == FC_PV_GLOBAL) {
        fc_repr_puts(r, g->u.global.module);
        fc_repr_put(r, ".", 1);
        fc_repr_puts(r, g->u.global.name);
    } else {
        fc_repr_put(r, "?", 1);
    }
}

static void fc_repr_value(struct fc_repr *r, const struct fc_pv *v, int depth)
{
    char t[64];
    if (r->truncated || r->rc < 0)
        return;
    if (depth > FC_PICKLE_MAX_NESTING) {
        fc_repr_puts(r, "...");
        return;
    }
    switch (v->kind) {
    case FC_PV_NONE: fc_repr_puts(r, "None"); return;
    case FC_PV_BOOL: fc_repr_puts(r, v->u.b ? "True" : "False"); return;
    case FC_PV_INT:
        snprintf(t, sizeof(t), "%" PRId64, v->u.i);
        fc_repr_puts(r, t);
        return;
    case FC_PV_BIGINT: fc_repr_bigint(r, (const unsigned char *)v->u.str.s, v->u.str.len); return;
    case FC_PV_FLOAT:
        fc_format_float(t, sizeof(t), v->u.f);
        fc_repr_puts(r, t);
        return;
    case FC_PV_STR: fc_repr_str(r, v, 0); return;
    case FC_PV_BYTES: fc_repr_str(r, v, 1); return;
    case FC_PV_LIST:
    case FC_PV_TUPLE:
    case FC_PV_SET: {
        const size_t n = v->u.seq.n;
        if (v->kind == FC_PV_SET && n == 0) {
            fc_repr_puts(r, "set()");
            return;
        }
        fc_repr_puts(r, v->kind == FC_PV_LIST ? "[" : v->kind == FC_PV_TUPLE ? "(" : "{");
        for (size_t i = 0; i < n && !r->truncated; i++) {
            if (i > 0)
                fc_repr_puts(r, ", ");
            fc_repr_value(r, v->u.seq.items[i], depth + 1);
        }
        if (v->kind == FC_PV_TUPLE && n == 1)
            fc_repr_puts(r, ",");
        fc_repr_puts(r, v->kind == FC_PV_LIST ? "]" : v->kind == FC_PV_TUPLE ? ")" : "}");
        return;
    }
    case FC_PV_DICT:
        if (v->u.dict.ordered)
            fc_repr_puts(r, "OrderedDict(");
        fc_repr_puts(r, "{");
        for (size_t i = 0; i < v->u.dict.n && !r->truncated; i++) {
            if (i > 0)
                fc_repr_puts(r, ", ");
            fc_repr_value(r, v->u.dict.keys[i], depth + 1);
            fc_repr_puts(r, ": ");
            fc_repr_value(r, v->u.dict.vals[i], depth + 1);
        }
        fc_repr_puts(r, "}");
        if (v->u.dict.ordered)
            fc_repr_puts(r, ")");
        return;
    case FC_PV_GLOBAL: fc_repr_global_name(r, v); return;
    case FC_PV_CALL:
        if (v->u.call.callable->kind == FC_PV_GLOBAL && v->u.call.args != NULL &&
            v->u.call.args->kind == FC_PV_TUPLE && v->u.call.state == NULL) {
            /* Render as Python source: torch.device('cuda', 0). */
            fc_repr_global_name(r, v->u.call.callable);
            fc_repr_puts(r, "(");
            for (size_t i = 0; i < v->u.call.args->u.seq.n; i++) {
                if (i > 0)
                    fc_repr_puts(r, ", ");
                fc_repr_value(r, v->u.call.args->u.seq.items[i], depth + 1);
            }
            fc_repr_puts(r, ")");
            return;
        }
        /* fall through */
    case FC_PV_OBJECT:
        fc_repr_puts(r, v->kind == FC_PV_CALL ? "<call " : "<object ");
        fc_repr_global_name(r, v->u.call.callable);
        fc_repr_puts(r, ">");
        return;
    case FC_PV_TENSOR: {
        const struct fc_tensor_desc *d = &v->u.tensor.desc;
        fc_repr_puts(r, v->u.tensor.is_parameter ? "<parameter " : "<tensor ");
        fc_repr_puts(r, fc_dtype_name(d->dtype));
        fc_repr_puts(r, " [");
        for (int i = 0; i < d->ndim && i < FC_MAX_DIMS; i++) {
            snprintf(t, sizeof(t), i == 0 ? "%" PRId64 : ", %" PRId64, d->shape[i]);
            fc_repr_puts(r, t);
        }
        fc_repr_puts(r, "]>");
        return;
    }
    default: fc_repr_puts(r, "<storage>"); return;
    }
}

int fc_pv_repr(struct fc_buf *out, const struct fc_pv *v, size_t max_bytes)
{
    struct fc_repr r = {out, out->len, max_bytes, 0, FC_OK};
    if (v == NULL)
        fc_repr_puts(&r, "NULL");
    else
        fc_repr_value(&r, v, 0);
    if (r.rc < 0) {
        out->len = r.start;
        return r.rc;
    }
    if (!r.truncated)
        return FC_OK;
    if (max_bytes < 3) {
        out->len = r.start;
        return fc_buf_append(out, "...", max_bytes);
    }
    size_t cut = max_bytes - 3;
    if (cut > out->len - r.start)
        cut = out->len - r.start;
    while (cut > 0 && (out->data[r.start + cut] & 0xc0) == 0x80)
        cut--;
    out->len = r.start + cut;
    return fc_buf_append(out, "...", 3);
}
