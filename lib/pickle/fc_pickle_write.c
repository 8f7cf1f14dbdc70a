/*
 * fc_pickle_write.c - the protocol-2 pickle writer (fc_pw_*) and the
 * memoizer that rewrites a pickle with repeated names memoised.
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

/* ---- writer ---- */

static int fc_pw_op(struct fc_buf *b, unsigned char op)
{
    return fc_buf_putc(b, op);
}

int fc_pw_proto(struct fc_buf *b)
{
    const unsigned char p[2] = {OP_PROTO, 2};
    return fc_buf_append(b, p, sizeof(p));
}

int fc_pw_stop(struct fc_buf *b)
{
    return fc_pw_op(b, OP_STOP);
}
int fc_pw_mark(struct fc_buf *b)
{
    return fc_pw_op(b, OP_MARK);
}
int fc_pw_none(struct fc_buf *b)
{
    return fc_pw_op(b, OP_NONE);
}
int fc_pw_bool(struct fc_buf *b, int v)
{
    return fc_pw_op(b, v ? OP_NEWTRUE : OP_NEWFALSE);
}
int fc_pw_empty_tuple(struct fc_buf *b)
{
    return fc_pw_op(b, OP_EMPTY_TUPLE);
}
int fc_pw_tuple(struct fc_buf *b)
{
    return fc_pw_op(b, OP_TUPLE);
}
int fc_pw_empty_dict(struct fc_buf *b)
{
    return fc_pw_op(b, OP_EMPTY_DICT);
}
int fc_pw_setitems(struct fc_buf *b)
{
    return fc_pw_op(b, OP_SETITEMS);
}
int fc_pw_setitem(struct fc_buf *b)
{
    return fc_pw_op(b, OP_SETITEM);
}
int fc_pw_empty_list(struct fc_buf *b)
{
    return fc_pw_op(b, OP_EMPTY_LIST);
}
int fc_pw_appends(struct fc_buf *b)
{
    return fc_pw_op(b, OP_APPENDS);
}
int fc_pw_append(struct fc_buf *b)
{
    return fc_pw_op(b, OP_APPEND);
}
int fc_pw_reduce(struct fc_buf *b)
{
    return fc_pw_op(b, OP_REDUCE);
}
int fc_pw_newobj(struct fc_buf *b)
{
    return fc_pw_op(b, OP_NEWOBJ);
}
int fc_pw_build(struct fc_buf *b)
{
    return fc_pw_op(b, OP_BUILD);
}
int fc_pw_put(struct fc_buf *b, uint32_t idx)
{
    if (idx < 256) {
        FC_TRY(fc_pw_op(b, OP_BINPUT));
        return fc_buf_putc(b, (unsigned char)idx);
    }
    FC_TRY(fc_pw_op(b, OP_LONG_BINPUT));
    return fc_buf_put_le32(b, idx);
}
int fc_pw_get(struct fc_buf *b, uint32_t idx)
{
    if (idx < 256) {
        FC_TRY(fc_pw_op(b, OP_BINGET));
        return fc_buf_putc(b, (unsigned char)idx);
    }
    FC_TRY(fc_pw_op(b, OP_LONG_BINGET));
    return fc_buf_put_le32(b, idx);
}
int fc_pw_binpersid(struct fc_buf *b)
{
    return fc_pw_op(b, OP_BINPERSID);
}

int fc_pw_tuple_n(struct fc_buf *b, int n)
{
    if (n < 1 || n > 3)
        return fc_error_set(FC_EINVAL, "pickle writer: TUPLE%d does not exist", n);
    return fc_pw_op(b, (unsigned char)(OP_TUPLE1 + n - 1));
}

int fc_pw_long_bytes(struct fc_buf *b, const unsigned char *le, size_t n)
{
    if (n < 256) {
        const unsigned char h[2] = {OP_LONG1, (unsigned char)n};
        FC_TRY(fc_buf_append(b, h, sizeof(h)));
    } else {
        if (n > INT32_MAX)
            return fc_error_set(FC_EINVAL, "pickle writer: integer of %zu bytes is too large", n);
        FC_TRY(fc_pw_op(b, OP_LONG4));
        FC_TRY(fc_buf_put_le32(b, (uint32_t)n));
    }
    return fc_buf_append(b, le, n);
}

int fc_pw_int(struct fc_buf *b, int64_t v)
{
    if (v >= 0 && v <= 0xff) {
        const unsigned char t[2] = {OP_BININT1, (unsigned char)v};
        return fc_buf_append(b, t, sizeof(t));
    }
    if (v >= 0 && v <= 0xffff) {
        FC_TRY(fc_pw_op(b, OP_BININT2));
        return fc_buf_put_le16(b, (uint16_t)v);
    }
    if (v >= INT32_MIN && v <= INT32_MAX) {
        FC_TRY(fc_pw_op(b, OP_BININT));
        return fc_buf_put_le32(b, (uint32_t)(int32_t)v);
    }
    /* pickle.encode_long: (bit_length >> 3) + 1 bytes, minus a redundant 0xff. */
    const uint64_t u = (uint64_t)v;
    const uint64_t mag = v < 0 ? (uint64_t)0 - u : u;
    int bits = 0;
    while (bits < 64 && (mag >> bits) != 0)
        bits++;
    size_t n = (size_t)(bits >> 3) + 1;
    unsigned char le[9];
    for (size_t i = 0; i < 9; i++)
        le[i] = i < 8 ? (unsigned char)(u >> (8 * i)) : (v < 0 ? 0xff : 0x00);
    if (v < 0 && n > 1 && le[n - 1] == 0xff && (le[n - 2] & 0x80) != 0)
        n--;
    return fc_pw_long_bytes(b, le, n);
}

int fc_pw_int_tuple(struct fc_buf *b, const int64_t *v, int n)
{
    if (n == 0)
        return fc_pw_empty_tuple(b);
    if (n > 3)
        FC_TRY(fc_pw_mark(b));
    for (int i = 0; i < n; i++)
        FC_TRY(fc_pw_int(b, v[i]));
    return n > 3 ? fc_pw_tuple(b) : fc_pw_tuple_n(b, n);
}

int fc_pw_float(struct fc_buf *b, double v)
{
    unsigned char t[9];
    uint64_t u;
    memcpy(&u, &v, sizeof(u));
    t[0] = OP_BINFLOAT;
    for (int i = 0; i < 8; i++)
        t[1 + i] = (unsigned char)(u >> (56 - 8 * i));
    return fc_buf_append(b, t, sizeof(t));
}

int fc_pw_str(struct fc_buf *b, const char *s, size_t len)
{
    if (len > UINT32_MAX)
        return fc_error_set(FC_EINVAL, "pickle writer: string of %zu bytes is too long", len);
    FC_TRY(fc_pw_op(b, OP_BINUNICODE));
    FC_TRY(fc_buf_put_le32(b, (uint32_t)len));
    return fc_buf_append(b, s, len);
}

int fc_pw_bytes(struct fc_buf *b, const void *p, size_t len)
{
    const unsigned char *s = p;
    size_t n = len;
    for (size_t i = 0; i < len; i++)
        if (s[i] >= 0x80)
            n++;
    if (n < len || n > UINT32_MAX)
        return fc_error_set(FC_EINVAL, "pickle writer: bytes of %zu are too long", len);
    FC_TRY(fc_pw_global(b, "_codecs", "encode"));
    FC_TRY(fc_pw_op(b, OP_BINUNICODE));
    FC_TRY(fc_buf_put_le32(b, (uint32_t)n));
    FC_TRY(fc_buf_reserve(b, n));
    for (size_t i = 0; i < len; i++) {
        if (s[i] < 0x80) {
            b->data[b->len++] = s[i];
        } else {
            b->data[b->len++] = (unsigned char)(0xc0 | (s[i] >> 6));
            b->data[b->len++] = (unsigned char)(0x80 | (s[i] & 0x3f));
        }
    }
    FC_TRY(fc_pw_str(b, "latin1", 6));
    FC_TRY(fc_pw_op(b, OP_TUPLE2));
    return fc_pw_op(b, OP_REDUCE);
}

int fc_pw_global(struct fc_buf *b, const char *module, const char *name)
{
    if (module[0] == '\0' || name[0] == '\0' || strchr(module, '\n') != NULL ||
        strchr(name, '\n') != NULL)
        return fc_error_set(FC_EINVAL, "pickle writer: invalid global name");
    /*
     * Python's fix_imports for protocol < 3, except for the names the reader
     * would map to something else (__builtin__.long is builtins.int).
     */
    static const char *const py2_names[] = {"xrange",  "reduce", "intern",    "unichr",
                                            "unicode", "long",   "basestring"};
    int py2_name = 0;
    for (size_t i = 0; i < FC_COUNT(py2_names); i++)
        if (strcmp(name, py2_names[i]) == 0)
            py2_name = 1;
    if (strcmp(module, "builtins") == 0 && !py2_name)
        module = "__builtin__";
    else if (strcmp(module, "copyreg") == 0)
        module = "copy_reg";
    FC_TRY(fc_pw_op(b, OP_GLOBAL));
    FC_TRY(fc_buf_puts(b, module));
    FC_TRY(fc_buf_putc(b, '\n'));
    FC_TRY(fc_buf_puts(b, name));
    return fc_buf_putc(b, '\n');
}

#define FC_PW_BATCH 1000

static int fc_pw_value_at(struct fc_buf *b, const struct fc_pv *v, int depth,
                          const struct fc_pw_tensor_hook *h);

/* pickle._batch_appends: MARK ... APPENDS per 1000, a lone item with APPEND. */
static int fc_pw_batch_appends(struct fc_buf *b, struct fc_pv *const *items, size_t n, int depth,
                               const struct fc_pw_tensor_hook *h)
{
    for (size_t i = 0; i < n; i += FC_PW_BATCH) {
        const size_t k = n - i < FC_PW_BATCH ? n - i : FC_PW_BATCH;
        if (k == 1) {
            FC_TRY(fc_pw_value_at(b, items[i], depth + 1, h));
            FC_TRY(fc_pw_append(b));
            continue;
        }
        FC_TRY(fc_pw_mark(b));
        for (size_t j = 0; j < k; j++)
            FC_TRY(fc_pw_value_at(b, items[i + j], depth + 1, h));
        FC_TRY(fc_pw_appends(b));
    }
    return FC_OK;
}

static int fc_pw_batch_setitems(struct fc_buf *b, const struct fc_pv *d, int depth,
                                const struct fc_pw_tensor_hook *h)
{
    const size_t n = d->u.dict.n;
    for (size_t i = 0; i < n; i += FC_PW_BATCH) {
        const size_t k = n - i < FC_PW_BATCH ? n - i : FC_PW_BATCH;
        if (k > 1)
            FC_TRY(fc_pw_mark(b));
        for (size_t j = 0; j < k; j++) {
            FC_TRY(fc_pw_value_at(b, d->u.dict.keys[i + j], depth + 1, h));
            FC_TRY(fc_pw_value_at(b, d->u.dict.vals[i + j], depth + 1, h));
        }
        FC_TRY(k > 1 ? fc_pw_setitems(b) : fc_pw_setitem(b));
    }
    return FC_OK;
}

static int fc_pw_value_at(struct fc_buf *b, const struct fc_pv *v, int depth,
                          const struct fc_pw_tensor_hook *h)
{
    if (v == NULL)
        return fc_error_set(FC_EINVAL, "pickle writer: NULL value");
    if (depth > FC_PICKLE_MAX_NESTING)
        return fc_error_set(FC_EINVAL, "pickle writer: value nested deeper than %d levels",
                            FC_PICKLE_MAX_NESTING);
    switch (v->kind) {
    case FC_PV_NONE: return fc_pw_none(b);
    case FC_PV_BOOL: return fc_pw_bool(b, v->u.b);
    case FC_PV_INT: return fc_pw_int(b, v->u.i);
    case FC_PV_BIGINT: return fc_pw_long_bytes(b, (const unsigned char *)v->u.str.s, v->u.str.len);
    case FC_PV_FLOAT: return fc_pw_float(b, v->u.f);
    case FC_PV_STR: return fc_pw_str(b, v->u.str.s, v->u.str.len);
    case FC_PV_BYTES: return fc_pw_bytes(b, v->u.str.s, v->u.str.len);
    case FC_PV_LIST:
        FC_TRY(fc_pw_empty_list(b));
        return fc_pw_batch_appends(b, v->u.seq.items, v->u.seq.n, depth, h);
    case FC_PV_TUPLE: {
        const size_t n = v->u.seq.n;
        if (n == 0)
            return fc_pw_empty_tuple(b);
        if (n > 3)
            FC_TRY(fc_pw_mark(b));
        for (size_t i = 0; i < n; i++)
            FC_TRY(fc_pw_value_at(b, v->u.seq.items[i], depth + 1, h));
        return n > 3 ? fc_pw_tuple(b) : fc_pw_tuple_n(b, (int)n);
    }
    case FC_PV_SET:
        FC_TRY(fc_pw_global(b, "builtins", "set"));
        FC_TRY(fc_pw_empty_list(b));
        FC_TRY(fc_pw_batch_appends(b, v->u.seq.items, v->u.seq.n, depth, h));
        FC_TRY(fc_pw_tuple_n(b, 1));
        return fc_pw_reduce(b);
    case FC_PV_DICT:
        if (v->u.dict.ordered) {
            FC_TRY(fc_pw_global(b, "collections", "OrderedDict"));
            FC_TRY(fc_pw_empty_tuple(b));
            FC_TRY(fc_pw_reduce(b));
        } else {
            FC_TRY(fc_pw_empty_dict(b));
        }
        FC_TRY(fc_pw_batch_setitems(b, v, depth, h));
        if (v->u.dict.state != NULL) {
            FC_TRY(fc_pw_value_at(b, v->u.dict.state, depth + 1, h));
            FC_TRY(fc_pw_build(b));
        }
        return FC_OK;
    case FC_PV_GLOBAL: return fc_pw_global(b, v->u.global.module, v->u.global.name);
    case FC_PV_CALL:
    case FC_PV_OBJECT:
        if (v->u.call.args == NULL || v->u.call.args->kind != FC_PV_TUPLE)
            return fc_error_set(FC_EINVAL, "pickle writer: call arguments are not a tuple");
        FC_TRY(fc_pw_value_at(b, v->u.call.callable, depth + 1, h));
        FC_TRY(fc_pw_value_at(b, v->u.call.args, depth + 1, h));
        FC_TRY(v->kind == FC_PV_CALL ? fc_pw_reduce(b) : fc_pw_newobj(b));
        if (v->u.call.state != NULL) {
            FC_TRY(fc_pw_value_at(b, v->u.call.state, depth + 1, h));
            FC_TRY(fc_pw_build(b));
        }
        return FC_OK;
    case FC_PV_TENSOR:
        if (h != NULL)
            return h->fn(h->ctx, b, &v->u.tensor);
        /* fall through */
    default:
        return fc_error_set(FC_EINVAL, "pickle writer: a %s cannot be written as a plain value",
                            fc_pv_kind_name(v->kind));
    }
}

int fc_pw_value(struct fc_buf *b, const struct fc_pv *v)
{
    return fc_pw_value_at(b, v, 0, NULL);
}

int fc_pw_value_with(struct fc_buf *b, const struct fc_pv *v, const struct fc_pw_tensor_hook *h)
{
    return fc_pw_value_at(b, v, 0, h);
}

/*
 * fc_pw_memoize() - rewrite a stream made of the fc_pw_* opcodes so that
 * repeated GLOBALs and strings are written once and fetched from the memo
 * afterwards (BINPUT/BINGET, LONG_ forms past 255).  A DCP .metadata names
 * the same classes and field names for every chunk; memoised it is about
 * half the size and unpickles into shared nodes.
 */
int fc_pw_memoize(const unsigned char *in, size_t len, struct fc_buf *out)
{
    struct fc_strmap seen = FC_STRMAP_INIT;
    char **keys = NULL;
    size_t nkeys = 0, pos = 0;
    int rc = FC_OK;
    struct fc_vm reader; /* fc_op_decode() reads through a VM; no hooks, nothing is run */
    memset(&reader, 0, sizeof(reader));
    reader.data = in;
    reader.len = len;
    while (pos < len && rc == FC_OK) {
        const unsigned char op = in[pos];
        /*
         * Refused: a stream that already uses the memo (its keys would clash
         * with the ones given here) and FRAME (its length would no longer
         * match once repeats shrink to GETs).
         */
        if (fc_ops[op].name == NULL || (fc_ops[op].flags & (OPF_PUT | OPF_GET)) || op == OP_FRAME) {
            rc = fc_error_set(FC_EINVAL, "pickle memoizer: opcode 0x%02x at %zu not expected", op,
                              pos);
            goto done;
        }
        size_t end = pos + 1;
        struct fc_op_arg arg;
        if (fc_op_decode(&reader, op, pos, &end, &arg) != FC_OK) {
            rc = fc_error_set(FC_EINVAL, "pickle memoizer: truncated opcode at %zu", pos);
            goto done;
        }
        const size_t n = end - pos; /* opcode plus argument bytes */
        const int memo = op == OP_BINUNICODE || op == OP_GLOBAL;
        /* Short strings cost as much to fetch as to write; NUL-carrying ones cannot be keys. */
        if (memo && n > 6 && memchr(in + pos, '\0', n) == NULL) {
            char *key = fc_strndup((const char *)in + pos, n);
            size_t idx = 0;
            if (key == NULL) {
                rc = fc_error_set(FC_ENOMEM, "out of memory");
                goto done;
            }
            if (fc_strmap_get(&seen, key, &idx)) {
                fc_free(key);
                rc = idx < 256 ? fc_buf_putc(out, 'h') : fc_buf_putc(out, 'j');
                if (rc == FC_OK)
                    rc = idx < 256 ? fc_buf_putc(out, (unsigned char)idx)
                                   : fc_buf_put_le32(out, (uint32_t)idx);
                pos += n;
                continue;
            }
            char **k2 = fc_reallocarray(keys, nkeys + 1, sizeof(*keys));
            if (k2 == NULL) {
                fc_free(key);
                rc = fc_error_set(FC_ENOMEM, "out of memory");
                goto done;
            }
            keys = k2;
            keys[nkeys] = key;
            rc = fc_strmap_put(&seen, key, nkeys, NULL);
            if (rc < 0) {
                fc_free(key);
                goto done;
            }
            rc = fc_buf_append(out, in + pos, n);
            if (rc == FC_OK)
                rc = nkeys < 256 ? fc_buf_putc(out, 'q') : fc_buf_putc(out, 'r');
            if (rc == FC_OK)
                rc = nkeys < 256 ? fc_buf_putc(out, (unsigned char)nkeys)
                                 : fc_buf_put_le32(out, (uint32_t)nkeys);
            nkeys++;
        } else {
            rc = fc_buf_append(out, in + pos, n);
        }
        pos += n;
    }
done:
    for (size_t i = 0; i < nkeys; i++)
        fc_free(keys[i]);
    fc_free(keys);
    fc_strmap_release(&seen);
    return rc;
}
