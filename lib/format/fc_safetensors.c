/*
 * fc_safetensors.c - safetensors header reader and model.safetensors.index.json
 * loader.
 *
 * The header is read with one pread (never the tensor data), checked for
 * UTF-8, parsed with jansson and validated against the reference reader's
 * rules (input-formats.md B.2).  Where we are stricter than the reference
 * (duplicate keys, a header that does not start with '{', NUL in names) the
 * header comment in fc_safetensors.h says so.
 *
 * Tensor order: jansson >= 2.8 iterates objects in insertion order, and with
 * JSON_REJECT_DUPLICATES insertion order is the order of the keys in the
 * header text, so tensors are listed in JSON order.
 *
 * Error precedence: a header that violates the format is FC_ECORRUPT even if
 * it also holds a tensor we cannot represent; FC_EFORMAT (F6_*, odd F4 last
 * dimension, more than FC_MAX_DIMS dims, shapes whose strides overflow
 * int64) is reported only once the whole header has been validated.
 */
#include "fc_safetensors.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "fc_alloc.h"
#include "fc_buf.h"
#include "fc_checked.h"
#include "fc_endian.h"
#include "fc_error.h"

#define FC_ST_MAX_HEADER 100000000u         /* MAX_HEADER_SIZE of the reference */
#define FC_ST_INDEX_MAX  ((size_t)64 << 20) /* largest index.json we read */
#define FC_ST_META_KEY   "__metadata__"

#if JANSSON_VERSION_HEX < 0x020b00
#error "jansson >= 2.11 is required (json_error_code, insertion-ordered objects)"
#endif

struct fc_st_meta {
    const char *key;
    const char *value;
};

struct fc_safetensors {
    const struct fc_file *file;
    uint64_t header_nbytes;
    struct fc_st_tensor *tensors;
    size_t ntensors;
    struct fc_st_meta *meta;
    size_t nmeta;
    char *strings; /* every name, key and value above, NUL-terminated */
    int sharded;   /* __metadata__ has DCP_SHARDING_INFO */
};

/* Safetensors dtype spellings (the reference Dtype enum) and their bit widths. */
static const struct {
    const char *name;
    unsigned bits;
} fc_st_dtypes[] = {
    {"BOOL", 8},        {"F4", 4},      {"F6_E2M3", 6}, {"F6_E3M2", 6}, {"U8", 8},
    {"I8", 8},          {"F8_E5M2", 8}, {"F8_E4M3", 8}, {"F8_E8M0", 8}, {"F8_E4M3FNUZ", 8},
    {"F8_E5M2FNUZ", 8}, {"I16", 16},    {"U16", 16},    {"F16", 16},    {"BF16", 16},
    {"I32", 32},        {"U32", 32},    {"F32", 32},    {"C64", 64},    {"F64", 64},
    {"I64", 64},        {"U64", 64},
};

/* Index into fc_st_dtypes, or -1 for a string the reference does not know. */
static int fc_st_dtype_lookup(const char *name)
{
    for (size_t i = 0; i < sizeof(fc_st_dtypes) / sizeof(fc_st_dtypes[0]); i++)
        if (strcmp(fc_st_dtypes[i].name, name) == 0)
            return (int)i;
    return -1;
}

static const char *fc_st_json_type(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a real number";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    case JSON_NULL: return "null";
    }
    return "an unknown JSON value";
}

/* Append formatted text to buf[cap] at *len, truncating silently. */
static void fc_st_appendf(char *buf, size_t cap, size_t *len, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void fc_st_appendf(char *buf, size_t cap, size_t *len, const char *fmt, ...)
{
    va_list ap;
    if (*len + 1 >= cap)
        return;
    va_start(ap, fmt);
    const int w = vsnprintf(buf + *len, cap - *len, fmt, ap);
    va_end(ap);
    if (w < 0)
        return;
    *len = (size_t)w >= cap - *len ? cap - 1 : *len + (size_t)w;
}

/* "[2, 3]" for a JSON shape array (elements already checked to be integers). */
static const char *fc_st_shape_str(char *buf, size_t cap, const json_t *shape)
{
    size_t len = 0;
    const size_t n = json_array_size(shape);
    buf[0] = '\0';
    fc_st_appendf(buf, cap, &len, "[");
    for (size_t i = 0; i < n; i++) {
        if (len + 24 >= cap) {
            fc_st_appendf(buf, cap, &len, "...");
            break;
        }
        fc_st_appendf(buf, cap, &len, "%s%" JSON_INTEGER_FORMAT, i ? ", " : "",
                      json_integer_value(json_array_get(shape, i)));
    }
    fc_st_appendf(buf, cap, &len, "]");
    return buf;
}

/* Map a jansson parse error to our codes: OOM, NUL we cannot represent, or corrupt. */
static int fc_st_json_error(const json_error_t *jerr, const char *path, const char *what,
                            uint64_t base)
{
    const enum json_error_code code = json_error_code(jerr);
    const uint64_t off = base + (uint64_t)(jerr->position > 0 ? jerr->position : 0);
    if (code == json_error_out_of_memory)
        return fc_error_set(FC_ENOMEM, "%s: %s: out of memory parsing JSON", path, what);
    return fc_error_set(code == json_error_null_character || code == json_error_null_byte_in_key
                            ? FC_EFORMAT
                            : FC_ECORRUPT,
                        "%s: %s: invalid JSON at file offset %" PRIu64 " (line %d, column %d): %s",
                        path, what, off, jerr->line, jerr->column, jerr->text);
}

/* One tensor entry as parsed, before the tiling checks. */
struct fc_st_span {
    uint64_t begin;
    uint64_t end;
    size_t idx;
};

static int fc_st_span_cmp(const void *a, const void *b)
{
    const struct fc_st_span *x = a, *y = b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end)
        return x->end < y->end ? -1 : 1;
    return x->idx < y->idx ? -1 : (x->idx > y->idx);
}

/* State shared by the per-entry checks of one header. */
struct fc_st_parse {
    const char *path;
    uint64_t data_start;
    int format_pending; /* a FC_EFORMAT problem was found; reported after validation */
    char format_msg[512];
};

/* Read a non-negative JSON integer; 0 when v is one, -1 otherwise. */
static int fc_st_get_u64(const json_t *v, uint64_t *out)
{
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return -1;
    *out = (uint64_t)json_integer_value(v);
    return 0;
}

/*
 * Validate one tensor entry (key name, value v) and fill t and span.  name
 * points into the caller's string table.
 */
/*
 * The dims of jshape into t->shape (the first FC_MAX_DIMS of them).  numel as
 * the reference computes it: left to right in 64 bits, so that [2^40, 2^40]
 * overflows but [0, 2^62, 2^62] does not (*overflow).  strides_numel is the
 * product of max(dim, 1), which must fit int64 for any strides to exist
 * (*strides_overflow); a zero-size tensor with enormous other dims fails only
 * that.
 */
static int fc_st_parse_shape(const char *path, const char *name, const json_t *jshape,
                             struct fc_st_tensor *t, uint64_t *numel_out, int *overflow_out,
                             int *strides_overflow_out)
{
    const size_t ndim = json_array_size(jshape);
    uint64_t numel = 1;
    int64_t strides_numel = 1;
    int overflow = 0, strides_overflow = 0;
    for (size_t d = 0; d < ndim; d++) {
        uint64_t dim;
        if (fc_st_get_u64(json_array_get(jshape, d), &dim) < 0)
            return fc_error_set(FC_ECORRUPT,
                                "%s: safetensors header: tensor '%s': shape[%zu] is not a "
                                "non-negative integer",
                                path, name, d);
        if (!overflow && fc_mul_u64(numel, dim, &numel) < 0)
            overflow = 1;
        if (!strides_overflow &&
            fc_mul_i64(strides_numel, dim == 0 ? 1 : (int64_t)dim, &strides_numel) < 0)
            strides_overflow = 1;
        if (d < FC_MAX_DIMS)
            t->shape[d] = (int64_t)dim;
    }
    *numel_out = numel;
    *overflow_out = overflow;
    *strides_overflow_out = strides_overflow;
    return FC_OK;
}

/* data_offsets: two non-negative integers, the end not before the begin. */
static int fc_st_parse_offsets(const char *path, const char *name, const json_t *joffs,
                               struct fc_st_span *span)
{
    if (!json_is_array(joffs) || json_array_size(joffs) != 2)
        return fc_error_set(FC_ECORRUPT,
                            "%s: safetensors header: tensor '%s': data_offsets is not an array of "
                            "two integers",
                            path, name);
    if (fc_st_get_u64(json_array_get(joffs, 0), &span->begin) < 0 ||
        fc_st_get_u64(json_array_get(joffs, 1), &span->end) < 0)
        return fc_error_set(FC_ECORRUPT,
                            "%s: safetensors header: tensor '%s': data_offsets are not "
                            "non-negative integers",
                            path, name);
    if (span->end < span->begin)
        return fc_error_set(FC_ECORRUPT,
                            "%s: safetensors header: tensor '%s': data_offsets [%" PRIu64
                            ", %" PRIu64 ") end before they begin",
                            path, name, span->begin, span->end);
    return FC_OK;
}

/*
 * What keeps tensor t from being a torch tensor (too many dims, strides that
 * overflow, an odd F4 shape, a dtype torch lacks) becomes the pending
 * FC_EFORMAT message of ps; F4 is viewed as torch.float4_e2m1fn_x2.
 */
static void fc_st_torch_view(struct fc_st_parse *ps, struct fc_st_tensor *t, const char *name,
                             const char *dname, const json_t *jshape, int strides_overflow)
{
    const char *const path = ps->path;
    const size_t ndim = json_array_size(jshape);
    char shape_buf[160];
    /* Once one FC_EFORMAT problem is pending the open fails: keep its message. */
    if (ps->format_pending)
        return;
    const int is_f4 = strcmp(dname, "F4") == 0;
    const char *const prefix = "safetensors header: tensor";
    fc_st_shape_str(shape_buf, sizeof(shape_buf), jshape);
    ps->format_pending = 1;
    if (ndim > FC_MAX_DIMS) {
        snprintf(ps->format_msg, sizeof(ps->format_msg),
                 "%s: %s '%.200s': shape %s has %zu dimensions; at most %d are supported", path,
                 prefix, name, shape_buf, ndim, FC_MAX_DIMS);
    } else if (strides_overflow) {
        snprintf(ps->format_msg, sizeof(ps->format_msg),
                 "%s: %s '%.200s': shape %s is too large: its strides overflow int64", path, prefix,
                 name, shape_buf);
    } else if (is_f4 && (ndim == 0 || t->shape[ndim - 1] % 2 != 0)) {
        snprintf(ps->format_msg, sizeof(ps->format_msg),
                 "%s: %s '%.200s': dtype F4 shape %s cannot be viewed as torch.float4_e2m1fn_x2 "
                 "(needs an even last dimension)",
                 path, prefix, name, shape_buf);
    } else if (is_f4) {
        /* safetensors stores torch.float4_e2m1fn_x2 as F4 with the last dim doubled. */
        t->dtype = FC_DTYPE_FLOAT4_E2M1FN_X2;
        t->shape[ndim - 1] /= 2;
        ps->format_pending = 0;
    } else if (t->dtype == FC_DTYPE_INVALID) {
        snprintf(ps->format_msg, sizeof(ps->format_msg),
                 "%s: %s '%.200s': dtype %s has no torch equivalent", path, prefix, name, dname);
    } else {
        ps->format_pending = 0;
    }
}

static int fc_st_parse_tensor(struct fc_st_parse *ps, const char *name, const json_t *v,
                              struct fc_st_tensor *t, struct fc_st_span *span)
{
    const char *const path = ps->path;
    char shape_buf[160];

    if (!json_is_object(v))
        return fc_error_set(FC_ECORRUPT,
                            "%s: safetensors header: tensor '%s': entry is %s, not an object", path,
                            name, fc_st_json_type(v));
    const json_t *const jdtype = json_object_get(v, "dtype");
    const json_t *const jshape = json_object_get(v, "shape");
    const json_t *const joffs = json_object_get(v, "data_offsets");
    if (jdtype == NULL || jshape == NULL || joffs == NULL)
        return fc_error_set(FC_ECORRUPT, "%s: safetensors header: tensor '%s': missing field '%s'",
                            path, name,
                            jdtype == NULL   ? "dtype"
                            : jshape == NULL ? "shape"
                                             : "data_offsets");
    if (!json_is_string(jdtype))
        return fc_error_set(FC_ECORRUPT,
                            "%s: safetensors header: tensor '%s': dtype is %s, not a string", path,
                            name, fc_st_json_type(jdtype));
    const char *const dname = json_string_value(jdtype);
    const int di = fc_st_dtype_lookup(dname);
    if (di < 0)
        return fc_error_set(FC_ECORRUPT, "%s: safetensors header: tensor '%s': unknown dtype '%s'",
                            path, name, dname);
    if (!json_is_array(jshape))
        return fc_error_set(FC_ECORRUPT,
                            "%s: safetensors header: tensor '%s': shape is %s, not an array", path,
                            name, fc_st_json_type(jshape));
    const size_t ndim = json_array_size(jshape);

    uint64_t numel = 0;
    int overflow = 0, strides_overflow = 0;
    FC_TRY(fc_st_parse_shape(path, name, jshape, t, &numel, &overflow, &strides_overflow));
    FC_TRY(fc_st_parse_offsets(path, name, joffs, span));

    uint64_t nbits;
    if (overflow || fc_mul_u64(numel, fc_st_dtypes[di].bits, &nbits) < 0)
        return fc_error_set(FC_ECORRUPT,
                            "%s: safetensors header: tensor '%s': shape %s of %s overflows 64 "
                            "bits",
                            path, name, fc_st_shape_str(shape_buf, sizeof(shape_buf), jshape),
                            dname);
    if (nbits % 8 != 0)
        return fc_error_set(FC_ECORRUPT,
                            "%s: safetensors header: tensor '%s': shape %s of %s is %" PRIu64
                            " bits, not a whole number of bytes",
                            path, name, fc_st_shape_str(shape_buf, sizeof(shape_buf), jshape),
                            dname, nbits);
    if (span->end - span->begin != nbits / 8)
        return fc_error_set(FC_ECORRUPT,
                            "%s: safetensors header: tensor '%s': shape %s of %s needs %" PRIu64
                            " bytes but data_offsets [%" PRIu64 ", %" PRIu64 ") hold %" PRIu64,
                            path, name, fc_st_shape_str(shape_buf, sizeof(shape_buf), jshape),
                            dname, nbits / 8, span->begin, span->end, span->end - span->begin);

    t->name = name;
    t->st_dtype = fc_st_dtypes[di].name;
    t->dtype = fc_dtype_from_safetensors(dname);
    t->ndim = ndim <= FC_MAX_DIMS ? (int)ndim : 0;
    t->nbytes = span->end - span->begin;
    t->data_offset = ps->data_start + span->begin; /* <= 8 + 1e8 + INT64_MAX: no overflow */

    fc_st_torch_view(ps, t, name, dname, jshape, strides_overflow);
    return FC_OK;
}

/* Check __metadata__ and add its string sizes to *nbytes. */
static int fc_st_check_metadata(const char *path, json_t *v, size_t *count, size_t *nbytes)
{
    if (json_is_null(v))
        return FC_OK; /* serde reads null as an absent Option */
    if (!json_is_object(v))
        return fc_error_set(FC_ECORRUPT,
                            "%s: safetensors header: __metadata__ is %s, not an object of strings",
                            path, fc_st_json_type(v));
    for (void *it = json_object_iter(v); it != NULL; it = json_object_iter_next(v, it)) {
        const char *const k = json_object_iter_key(it);
        json_t *const mv = json_object_iter_value(it);
        if (!json_is_string(mv))
            return fc_error_set(FC_ECORRUPT,
                                "%s: safetensors header: __metadata__['%s'] is %s, not a string",
                                path, k, fc_st_json_type(mv));
        if (fc_add_size(*nbytes, strlen(k) + json_string_length(mv) + 2, nbytes) < 0)
            return fc_error_set(FC_ENOMEM, "%s: safetensors header too large", path);
        (*count)++;
    }
    return FC_OK;
}

/* Append s (with its NUL) to the string table and return where it landed. */
static char *fc_st_put(char *strings, size_t *used, const char *s, size_t len)
{
    char *const dst = strings + *used;
    memcpy(dst, s, len);
    dst[len] = '\0';
    *used += len + 1;
    return dst;
}

/* The tiling rules of B.2 over the spans sorted by (begin, end). */
static int fc_st_check_tiling(const struct fc_st_parse *ps, const struct fc_safetensors *st,
                              struct fc_st_span *spans, const struct fc_file *f)
{
    const char *const path = ps->path;
    uint64_t prev_end = 0, total;
    const char *prev_name = NULL;

    qsort(spans, st->ntensors, sizeof(*spans), fc_st_span_cmp);
    for (size_t i = 0; i < st->ntensors; i++) {
        const struct fc_st_span *const s = &spans[i];
        const char *const name = st->tensors[s->idx].name;
        if (s->begin == prev_end) {
            /* Name the tensor that owns the bytes up to prev_end, not a zero-size one. */
            if (s->end > s->begin || prev_name == NULL)
                prev_name = name;
            prev_end = s->end;
            continue;
        }
        if (prev_name == NULL)
            return fc_error_set(FC_ECORRUPT,
                                "%s: safetensors header: tensor '%s': data_offsets [%" PRIu64
                                ", %" PRIu64 ") leave a gap of %" PRIu64
                                " bytes at the start of the data buffer",
                                path, name, s->begin, s->end, s->begin);
        if (s->begin < prev_end)
            return fc_error_set(FC_ECORRUPT,
                                "%s: safetensors header: tensor '%s': data_offsets [%" PRIu64
                                ", %" PRIu64
                                ") overlap the previous tensor '%s' ending at %" PRIu64,
                                path, name, s->begin, s->end, prev_name, prev_end);
        return fc_error_set(FC_ECORRUPT,
                            "%s: safetensors header: tensor '%s': data_offsets [%" PRIu64
                            ", %" PRIu64 ") leave a gap of %" PRIu64
                            " bytes after the previous tensor '%s' ending at %" PRIu64,
                            path, name, s->begin, s->end, s->begin - prev_end, prev_name, prev_end);
    }
    if (fc_add_u64(ps->data_start, prev_end, &total) < 0 || total > f->size)
        return fc_error_set(FC_ECORRUPT,
                            "%s: safetensors: tensor '%s' ends at file offset %" PRIu64
                            " but the file has only %" PRIu64 " bytes (truncated?)",
                            path, prev_name, ps->data_start + prev_end, f->size);
    if (total < f->size)
        return fc_error_set(FC_ECORRUPT,
                            "%s: safetensors: %" PRIu64 " unexpected bytes after the %s at file "
                            "offset %" PRIu64,
                            path, f->size - total, prev_name != NULL ? "last tensor" : "header",
                            total);
    return FC_OK;
}

/*
 * DCP_SHARDING_INFO (torch's distributed HF checkpoints): JSON {name:
 * {"saved_offsets": [...]}} giving where each tensor of this file sits in
 * its global tensor.  torch's reader fails with a KeyError on a tensor
 * missing from it; we name the tensor instead.
 */
static int fc_st_parse_sharding(const char *path, struct fc_safetensors *st)
{
    const char *text = fc_safetensors_metadata(st, FC_ST_SHARDING_KEY);
    json_error_t jerr;
    int rc = FC_OK;
    if (text == NULL)
        return FC_OK;
    json_t *root = json_loads(text, JSON_REJECT_DUPLICATES, &jerr);
    if (root == NULL || !json_is_object(root)) {
        rc = fc_error_set(FC_ECORRUPT, "%s: __metadata__.%s is not a JSON object", path,
                          FC_ST_SHARDING_KEY);
        goto done;
    }
    for (size_t i = 0; i < st->ntensors; i++) {
        struct fc_st_tensor *t = &st->tensors[i];
        const json_t *offs = json_object_get(json_object_get(root, t->name), "saved_offsets");
        if (!json_is_array(offs) || json_array_size(offs) != (size_t)t->ndim) {
            rc = fc_error_set(FC_ECORRUPT,
                              "%s: __metadata__.%s has no saved_offsets list of %d integers "
                              "for tensor '%s'",
                              path, FC_ST_SHARDING_KEY, t->ndim, t->name);
            goto done;
        }
        for (int d = 0; d < t->ndim; d++) {
            const json_t *v = json_array_get(offs, (size_t)d);
            const json_int_t o = json_is_integer(v) ? json_integer_value(v) : -1;
            if (o < 0 || o > INT64_MAX - t->shape[d]) {
                rc = fc_error_set(FC_ECORRUPT,
                                  "%s: __metadata__.%s: tensor '%s' saved_offsets[%d] is not an "
                                  "integer in [0, 2^63 - size)",
                                  path, FC_ST_SHARDING_KEY, t->name, d);
                goto done;
            }
            t->saved_offsets[d] = (int64_t)o;
        }
    }
    st->sharded = 1;
done:
    json_decref(root);
    return rc;
}

/*
 * The header of safetensors file f (path names it): its length checked against
 * the file, then its bytes as valid UTF-8 JSON whose top level is an object
 * (*root_out, the caller's); *n_out is the header's length.
 */
static int fc_st_read_header(const struct fc_file *f, const char *path, uint64_t *n_out,
                             json_t **root_out)
{
    int rc = FC_OK;
    unsigned char lenbuf[8];
    unsigned char *hdr = NULL;
    json_t *root = NULL;
    json_error_t jerr;

    if (f->size < 8)
        return fc_error_set(FC_ECORRUPT,
                            "%s: safetensors: file is %" PRIu64
                            " bytes, too small for the 8-byte header length",
                            path, f->size);
    FC_TRY(fc_file_pread(f, lenbuf, sizeof(lenbuf), 0));
    const uint64_t n = fc_read_le64(lenbuf);
    unsigned char brace = 0;
    if ((n > FC_ST_MAX_HEADER || n > f->size - 8) &&
        (f->size == 8 || fc_file_pread(f, &brace, 1, 8) < 0 || brace != '{'))
        return fc_error_set(FC_ECORRUPT,
                            "%s: not a safetensors file (no header length and JSON header at its "
                            "start)",
                            path);
    if (n > FC_ST_MAX_HEADER)
        return fc_error_set(
            FC_ECORRUPT, "%s: safetensors: header length %" PRIu64 " exceeds the limit of %u bytes",
            path, n, FC_ST_MAX_HEADER);
    if (n > f->size - 8)
        return fc_error_set(FC_ECORRUPT,
                            "%s: safetensors: header length %" PRIu64
                            " runs past the end of the file (%" PRIu64 " bytes)",
                            path, n, f->size);
    FC_TRY_GOTO(fc_file_read_alloc(f, 8, (size_t)n, FC_ST_MAX_HEADER, &hdr), rc, done);

    const size_t bad = fc_utf8_invalid_at(hdr, (size_t)n, 0);
    if (bad != (size_t)n) {
        rc = fc_error_set(FC_ECORRUPT,
                          "%s: safetensors header: invalid UTF-8 (byte 0x%02x) at file offset "
                          "%" PRIu64,
                          path, hdr[bad], 8 + (uint64_t)bad);
        goto done;
    }
    if (n == 0 || hdr[0] != '{') {
        rc = fc_error_set(FC_ECORRUPT, "%s: safetensors header: does not start with '{'", path);
        goto done;
    }
    root = json_loadb((const char *)hdr, (size_t)n, JSON_REJECT_DUPLICATES, &jerr);
    if (root == NULL) {
        rc = fc_st_json_error(&jerr, path, "safetensors header", 8);
        goto done;
    }
    if (!json_is_object(root)) {
        rc = fc_error_set(FC_ECORRUPT, "%s: safetensors header: not a JSON object", path);
        goto done;
    }
    *root_out = root;
    *n_out = n;
    root = NULL;

done:
    json_decref(root);
    fc_free(hdr);
    return rc;
}

/* Pass 1 over the header: count tensors, metadata items and string bytes; check __metadata__. */
static int fc_st_count(const char *path, json_t *root, size_t *ntensors_out, size_t *nmeta_out,
                       size_t *strbytes_out)
{
    size_t ntensors = 0, nmeta = 0, strbytes = 0;
    for (void *it = json_object_iter(root); it != NULL; it = json_object_iter_next(root, it)) {
        const char *const key = json_object_iter_key(it);
        json_t *const v = json_object_iter_value(it);
        if (strcmp(key, FC_ST_META_KEY) == 0) {
            FC_TRY(fc_st_check_metadata(path, v, &nmeta, &strbytes));
            continue;
        }
        ntensors++;
        if (fc_add_size(strbytes, strlen(key) + 1, &strbytes) < 0) {
            return fc_error_set(FC_ENOMEM, "%s: safetensors header too large", path);
        }
    }
    *ntensors_out = ntensors;
    *nmeta_out = nmeta;
    *strbytes_out = strbytes;
    return FC_OK;
}

int fc_safetensors_open(struct fc_safetensors **out, const struct fc_file *f)
{
    int rc = FC_OK;
    const char *const path = f->path != NULL ? f->path : "(unnamed)";
    uint64_t n = 0;
    json_t *root = NULL;
    struct fc_safetensors *st = NULL;
    struct fc_st_span *spans = NULL;
    struct fc_st_parse ps;

    *out = NULL;
    FC_TRY(fc_st_read_header(f, path, &n, &root));
    size_t ntensors = 0, nmeta = 0, strbytes = 0;
    FC_TRY_GOTO(fc_st_count(path, root, &ntensors, &nmeta, &strbytes), rc, done);

    st = fc_calloc(1, sizeof(*st));
    if (st == NULL)
        goto nomem;
    st->file = f;
    st->header_nbytes = n;
    st->tensors = fc_calloc(ntensors, sizeof(*st->tensors));
    st->meta = fc_calloc(nmeta, sizeof(*st->meta));
    st->strings = fc_malloc(strbytes);
    spans = fc_calloc(ntensors, sizeof(*spans));
    if (st->tensors == NULL || st->meta == NULL || st->strings == NULL || spans == NULL)
        goto nomem;

    /* Pass 2: copy names, validate each tensor entry in JSON order. */
    memset(&ps, 0, sizeof(ps));
    ps.path = path;
    ps.data_start = 8 + n;
    size_t used = 0;
    for (void *it = json_object_iter(root); it != NULL; it = json_object_iter_next(root, it)) {
        const char *const key = json_object_iter_key(it);
        json_t *const v = json_object_iter_value(it);
        if (strcmp(key, FC_ST_META_KEY) == 0) {
            if (json_is_null(v))
                continue;
            for (void *mit = json_object_iter(v); mit != NULL;
                 mit = json_object_iter_next(v, mit)) {
                const char *const mk = json_object_iter_key(mit);
                json_t *const mv = json_object_iter_value(mit);
                struct fc_st_meta *const m = &st->meta[st->nmeta++];
                m->key = fc_st_put(st->strings, &used, mk, strlen(mk));
                m->value =
                    fc_st_put(st->strings, &used, json_string_value(mv), json_string_length(mv));
            }
            continue;
        }
        const size_t i = st->ntensors++;
        const char *const name = fc_st_put(st->strings, &used, key, strlen(key));
        spans[i].idx = i;
        FC_TRY_GOTO(fc_st_parse_tensor(&ps, name, v, &st->tensors[i], &spans[i]), rc, done);
    }
    json_decref(root);
    root = NULL;

    FC_TRY_GOTO(fc_st_check_tiling(&ps, st, spans, f), rc, done);
    FC_TRY_GOTO(fc_st_parse_sharding(path, st), rc, done);
    if (ps.format_pending) {
        rc = fc_error_set(FC_EFORMAT, "%s", ps.format_msg);
        goto done;
    }
    *out = st;
    st = NULL;
    goto done;

nomem:
    rc = fc_error_set(FC_ENOMEM, "%s: safetensors header: out of memory", path);
done:
    fc_free(spans);
    fc_safetensors_free(st);
    json_decref(root);
    return rc;
}

void fc_safetensors_free(struct fc_safetensors *st)
{
    if (st == NULL)
        return;
    fc_free(st->tensors);
    fc_free(st->meta);
    fc_free(st->strings);
    fc_free(st);
}

size_t fc_safetensors_count(const struct fc_safetensors *st)
{
    return st->ntensors;
}

const struct fc_st_tensor *fc_safetensors_at(const struct fc_safetensors *st, size_t i)
{
    return i < st->ntensors ? &st->tensors[i] : NULL;
}

const char *fc_safetensors_metadata(const struct fc_safetensors *st, const char *key)
{
    for (size_t i = 0; i < st->nmeta; i++)
        if (strcmp(st->meta[i].key, key) == 0)
            return st->meta[i].value;
    return NULL;
}

size_t fc_safetensors_metadata_count(const struct fc_safetensors *st)
{
    return st->nmeta;
}

int fc_safetensors_metadata_at(const struct fc_safetensors *st, size_t i, const char **key_out,
                               const char **value_out)
{
    if (i >= st->nmeta)
        return FC_ENOENT;
    *key_out = st->meta[i].key;
    *value_out = st->meta[i].value;
    return FC_OK;
}

int fc_safetensors_is_sharded(const struct fc_safetensors *st)
{
    return st->sharded;
}

uint64_t fc_safetensors_data_start(const struct fc_safetensors *st)
{
    return 8 + st->header_nbytes;
}

/* ---- model.safetensors.index.json ---- */

/* Shard names must stay inside the index's directory. */
static int fc_st_index_check_file(const char *path, const char *key, const char *file)
{
    const char *why = NULL;
    if (file[0] == '\0')
        why = "is empty";
    else if (file[0] == '.')
        why = "starts with '.'";
    else if (strchr(file, '/') != NULL || strchr(file, '\\') != NULL)
        why = "contains a path separator";
    if (why == NULL)
        return FC_OK;
    return fc_error_set(FC_ECORRUPT,
                        "%s: weight_map['%s']: shard file name '%s' %s; only plain file names in "
                        "the index's directory are allowed",
                        path, key, file, why);
}

int fc_st_index_load(struct fc_st_index *out, const char *index_path)
{
    int rc = FC_OK;
    struct fc_file f = FC_FILE_INIT;
    unsigned char *buf = NULL;
    json_t *root = NULL, *seen = NULL;
    json_error_t jerr;
    size_t used = 0;

    memset(out, 0, sizeof(*out));
    FC_TRY(fc_file_open_read(&f, index_path));
    if (f.size > FC_ST_INDEX_MAX) {
        rc = fc_error_set(FC_ECORRUPT,
                          "%s: index file is %" PRIu64 " bytes, more than the limit of %zu",
                          index_path, f.size, FC_ST_INDEX_MAX);
        goto done;
    }
    FC_TRY_GOTO(fc_file_read_alloc(&f, 0, (size_t)f.size, FC_ST_INDEX_MAX, &buf), rc, done);
    root = json_loadb((const char *)buf, (size_t)f.size, JSON_REJECT_DUPLICATES, &jerr);
    if (root == NULL) {
        rc = fc_st_json_error(&jerr, index_path, "index", 0);
        goto done;
    }
    fc_free(buf);
    buf = NULL;
    if (!json_is_object(root)) {
        rc = fc_error_set(FC_ECORRUPT, "%s: index is %s, not a JSON object", index_path,
                          fc_st_json_type(root));
        goto done;
    }
    const json_t *const meta = json_object_get(root, "metadata");
    if (meta != NULL && !json_is_object(meta) && !json_is_null(meta)) {
        rc = fc_error_set(FC_ECORRUPT, "%s: index: metadata is %s, not an object", index_path,
                          fc_st_json_type(meta));
        goto done;
    }
    if (json_is_object(meta)) {
        const json_t *const ts = json_object_get(meta, "total_size");
        if (json_is_integer(ts) && json_integer_value(ts) >= 0) {
            out->total_size = (uint64_t)json_integer_value(ts);
            out->has_total_size = 1;
        }
    }
    json_t *const wm = json_object_get(root, "weight_map");
    if (wm == NULL) {
        rc = fc_error_set(FC_ECORRUPT, "%s: index: missing 'weight_map'", index_path);
        goto done;
    }
    if (!json_is_object(wm)) {
        rc = fc_error_set(FC_ECORRUPT, "%s: index: weight_map is %s, not an object", index_path,
                          fc_st_json_type(wm));
        goto done;
    }

    /* Pass 1: validate, count distinct files (jansson object as a hash set). */
    seen = json_object();
    if (seen == NULL)
        goto nomem;
    size_t nkeys = 0, nfiles = 0, strbytes = 0;
    for (void *it = json_object_iter(wm); it != NULL; it = json_object_iter_next(wm, it)) {
        const char *const key = json_object_iter_key(it);
        json_t *const v = json_object_iter_value(it);
        if (!json_is_string(v)) {
            rc = fc_error_set(FC_ECORRUPT, "%s: weight_map['%s'] is %s, not a file name string",
                              index_path, key, fc_st_json_type(v));
            goto done;
        }
        const char *const file = json_string_value(v);
        FC_TRY_GOTO(fc_st_index_check_file(index_path, key, file), rc, done);
        if (fc_add_size(strbytes, strlen(key) + 1, &strbytes) < 0)
            goto nomem;
        if (json_object_get(seen, file) == NULL) {
            if (json_object_set_new(seen, file, json_integer((json_int_t)nfiles)) < 0)
                goto nomem;
            nfiles++;
            if (fc_add_size(strbytes, strlen(file) + 1, &strbytes) < 0)
                goto nomem;
        }
        nkeys++;
    }

    out->keys = fc_calloc(nkeys, sizeof(*out->keys));
    out->key_file = fc_calloc(nkeys, sizeof(*out->key_file));
    out->files = fc_calloc(nfiles, sizeof(*out->files));
    out->strings = fc_malloc(strbytes);
    if (out->keys == NULL || out->key_file == NULL || out->files == NULL || out->strings == NULL)
        goto nomem;

    /* Pass 2: fill, files in order of first appearance. */
    for (void *it = json_object_iter(wm); it != NULL; it = json_object_iter_next(wm, it)) {
        const char *const key = json_object_iter_key(it);
        json_t *const v = json_object_iter_value(it);
        const char *const file = json_string_value(v);
        const size_t id = (size_t)json_integer_value(json_object_get(seen, file));
        if (id == out->nfiles)
            out->files[out->nfiles++] = fc_st_put(out->strings, &used, file, strlen(file));
        out->keys[out->nkeys] = fc_st_put(out->strings, &used, key, strlen(key));
        out->key_file[out->nkeys++] = id;
    }
    goto done;

nomem:
    rc = fc_error_set(FC_ENOMEM, "%s: index: out of memory", index_path);
done:
    if (rc < 0)
        fc_st_index_release(out);
    json_decref(seen);
    json_decref(root);
    fc_free(buf);
    fc_file_close(&f);
    return rc;
}

void fc_st_index_release(struct fc_st_index *idx)
{
    fc_free(idx->files);
    fc_free(idx->keys);
    fc_free(idx->key_file);
    fc_free(idx->strings);
    memset(idx, 0, sizeof(*idx));
}

/* Every safetensors writer's check of a tensor name: the format reserves "__metadata__". */
static int fc_st_check_name(const char *name)
{
    if (strcmp(name, FC_ST_META_KEY) == 0)
        return fc_error_set(FC_EINVAL,
                            "tensor name '%s' cannot be written to a safetensors header: the "
                            "format reserves it (rename it with --rename)",
                            name);
    return FC_OK;
}

int fc_safetensors_write_header(struct fc_buf *out, const struct fc_st_tensor *t, size_t n,
                                const char *const *meta, size_t nmeta, size_t align)
{
    json_t *root = json_object();
    json_t *md = json_object();
    char *text = NULL;
    uint64_t off = 0;
    int rc = FC_OK;
    if (root == NULL || md == NULL) {
        rc = fc_error_set(FC_ENOMEM, "out of memory");
        goto done;
    }
    for (size_t i = 0; i < nmeta; i++)
        json_object_set_new(md, meta[2 * i], json_string(meta[2 * i + 1]));
    if (nmeta > 0)
        json_object_set(root, "__metadata__", md);
    for (size_t i = 0; i < n; i++) {
        const struct fc_dtype_info *info = fc_dtype_info(t[i].dtype);
        FC_TRY_GOTO(fc_st_check_name(t[i].name), rc, done);
        if (info == NULL || info->safetensors_name == NULL) {
            rc = fc_error_set(FC_EFORMAT, "tensor '%s': safetensors has no dtype for %s", t[i].name,
                              fc_dtype_name(t[i].dtype));
            goto done;
        }
        json_t *e = json_object(), *shape = json_array(), *offs = json_array();
        for (int d = 0; d < t[i].ndim; d++)
            json_array_append_new(shape, json_integer(t[i].shape[d]));
        json_array_append_new(offs, json_integer((json_int_t)off));
        json_array_append_new(offs, json_integer((json_int_t)(off + t[i].nbytes)));
        json_object_set_new(e, "dtype", json_string(info->safetensors_name));
        json_object_set_new(e, "shape", shape);
        json_object_set_new(e, "data_offsets", offs);
        if (json_object_set_new(root, t[i].name, e) != 0) {
            rc = fc_error_set(FC_EINVAL, "tensor name '%s' cannot be written to JSON", t[i].name);
            goto done;
        }
        off += t[i].nbytes;
    }
    text = json_dumps(root, JSON_COMPACT | JSON_ENSURE_ASCII);
    if (text == NULL) {
        rc = fc_error_set(FC_ENOMEM, "out of memory");
        goto done;
    }
    /* Pad with spaces so the byte buffer (after the 8-byte length) starts align-aligned;
     * the reference writer aligns to 8. */
    const size_t len = strlen(text);
    const size_t padded = (8 + len + align - 1) / align * align - 8;
    FC_TRY_GOTO(fc_buf_put_le64(out, (uint64_t)padded), rc, done);
    FC_TRY_GOTO(fc_buf_append(out, text, len), rc, done);
    FC_TRY_GOTO(fc_buf_fill(out, ' ', padded - len), rc, done);
done:
    free(text);
    json_decref(md);
    json_decref(root);
    return rc;
}

int fc_safetensors_write_sharded_header(struct fc_buf *out, const struct fc_st_tensor *t, size_t n,
                                        size_t align)
{
    json_t *info = json_object();
    char *text = NULL;
    int rc = FC_OK;
    if (info == NULL)
        return fc_error_set(FC_ENOMEM, "out of memory");
    for (size_t i = 0; i < n; i++) {
        FC_TRY_GOTO(fc_st_check_name(t[i].name), rc, done);
        json_t *e = json_object(), *offs = json_array();
        for (int d = 0; d < t[i].ndim; d++)
            json_array_append_new(offs, json_integer(t[i].saved_offsets[d]));
        json_object_set_new(e, "saved_offsets", offs);
        if (json_object_set_new(info, t[i].name, e) != 0) {
            rc = fc_error_set(FC_EINVAL,
                              "tensor name '%s' cannot be written to a safetensors "
                              "header",
                              t[i].name);
            goto done;
        }
    }
    text = json_dumps(info, JSON_COMPACT | JSON_ENSURE_ASCII);
    if (text == NULL) {
        rc = fc_error_set(FC_ENOMEM, "out of memory");
        goto done;
    }
    /* What torch's HuggingFaceStorageWriter(save_distributed=True) puts in every file. */
    const char *const meta[] = {FC_ST_SHARDING_KEY, text, "DCP_VERSION", "1.0", "format", "pt"};
    rc = fc_safetensors_write_header(out, t, n, meta, 3, align);
done:
    free(text);
    json_decref(info);
    return rc;
}

int fc_st_index_write(struct fc_buf *out, uint64_t total_size, const char *const *keys,
                      const char *const *files, size_t n)
{
    json_t *root = json_object(), *md = json_object(), *wm = json_object();
    char *text = NULL;
    int rc = FC_OK;
    if (root == NULL || md == NULL || wm == NULL) {
        rc = fc_error_set(FC_ENOMEM, "out of memory");
        goto done;
    }
    json_object_set_new(md, "total_size", json_integer((json_int_t)total_size));
    for (size_t i = 0; i < n; i++)
        json_object_set_new(wm, keys[i], json_string(files[i]));
    json_object_set(root, "metadata", md);
    json_object_set(root, "weight_map", wm);
    text = json_dumps(root, JSON_INDENT(2) | JSON_ENSURE_ASCII);
    if (text == NULL) {
        rc = fc_error_set(FC_ENOMEM, "out of memory");
        goto done;
    }
    FC_TRY_GOTO(fc_buf_puts(out, text), rc, done);
    FC_TRY_GOTO(fc_buf_putc(out, '\n'), rc, done);
done:
    free(text);
    json_decref(md);
    json_decref(wm);
    json_decref(root);
    return rc;
}
