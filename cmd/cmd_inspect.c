/*
 * cmd_inspect.c - `fsdpconv inspect`: options, then one walk over the
 * selected entries that builds a row per entry, rendered by one of two
 * printers: a table or (through jansson) one JSON object.  The walk keeps
 * the two printers from each deciding what a row holds.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "cli.h"
#include "commands.h"
#include "fc_alloc.h"
#include "fc_buf.h"
#include "fc_convert.h"
#include "fc_dcp.h"
#include "fc_error.h"
#include "fc_pickle.h"
#include "opt.h"

enum { OPT_JSON = 256, OPT_KEY, OPT_CHECKSUM, OPT_VERIFY };

/* clang-format off */
static const struct fc_opt inspect_opts[] = {
    {OPT_JSON, 0, "json", NULL, 0, NULL, NULL, "print one JSON object instead of a table"},
    {OPT_KEY, 0, "key", "<regex>", 0, NULL, NULL,
     "only keys matching this regular expression (PCRE2)"},
    {OPT_CHECKSUM, 0, "checksum", NULL, 0, NULL, NULL,
     "SHA-256 of each tensor's logical C-contiguous little-endian bytes"},
    {OPT_VERIFY, 0, "verify", NULL, 0, NULL, NULL,
     "DCP, sharded safetensors: read every chunk, check it against its header (and CRC-32s)"},
    {0, 0, NULL, NULL, 0, NULL, NULL, NULL},
};
/* clang-format on */

static const struct fc_operand inspect_operands[] = {
    {"<path>", "a torch.save file, a safetensors file, a *.safetensors.index.json,\n"
               "a directory holding one of those, or a DCP checkpoint directory"},
    {NULL, NULL},
};

static const struct fc_cmd_spec inspect_spec = {
    "inspect", inspect_operands, 1, 1, inspect_opts, NULL,
};

struct inspect_cli {
    struct fc_inspect_opts o;
    int json;
};

static int inspect_option(void *ctx, int id, const char *value)
{
    struct inspect_cli *c = ctx;
    switch (id) {
    case OPT_JSON: c->json = 1; return FC_OK;
    case OPT_KEY: c->o.key_regex = value; return FC_OK;
    case OPT_CHECKSUM: c->o.checksum = 1; return FC_OK;
    case OPT_VERIFY: c->o.verify = 1; return FC_OK;
    default: return fc_opt_unknown(id);
    }
}

/* ---- the walk: one row per selected entry ---- */

struct inspect_row {
    const char *key;
    int is_tensor;
    /* tensors */
    fc_dtype dtype;
    int ndim;
    const int64_t *shape;
    uint64_t nbytes;
    const char *sha256;             /* --checksum, else NULL */
    const struct fc_storage *store; /* full checkpoints */
    const struct fc_dcp_entry *dcp; /* DCP: its chunks, or the bytes item's location */
    /* values */
    const char *type; /* NULL: a DCP value the source did not parse */
    char *repr;       /* owned */
};

struct inspect_rows {
    struct inspect_row *rows;
    size_t n;
    uint64_t total_bytes;
    size_t ntensors, nvalues;
};

/* Python's type name of a value; what the pickle builds (globals, calls, objects) is "object". */
static const char *fc_value_type(const struct fc_pv *v)
{
    switch (v->kind) {
    case FC_PV_GLOBAL:
    case FC_PV_CALL:
    case FC_PV_OBJECT:
    case FC_PV_TENSOR: return "object";
    default: return fc_pv_kind_name(v->kind);
    }
}

static int fc_value_row(struct inspect_row *row, const struct fc_entry *e)
{
    struct fc_buf b = FC_BUF_INIT(4096);
    int rc;
    if (e == NULL || (e->value == NULL && e->opaque == NULL))
        return FC_OK;
    if (e->opaque != NULL) {
        /* torch loads it only with weights_only=False: what it is, read symbolically */
        row->type = "opaque";
        rc = fc_opaque_describe(&b, e->opaque);
    } else {
        row->type = fc_value_type(e->value);
        rc = fc_pv_repr(&b, e->value, 200);
        if (rc == FC_OK)
            rc = fc_buf_putc(&b, '\0');
    }
    if (rc == FC_OK)
        row->repr = (char *)fc_buf_detach(&b, NULL);
    fc_buf_release(&b);
    return rc;
}

static int inspect_walk(const struct fc_inspect_opts *o, const struct fc_inspect_result *r,
                        struct inspect_rows *out)
{
    memset(out, 0, sizeof(*out));
    out->rows = fc_calloc(r->nselected > 0 ? r->nselected : 1, sizeof(*out->rows));
    if (out->rows == NULL)
        return FC_ENOMEM;
    for (size_t k = 0; k < r->nselected; k++) {
        const size_t i = r->selected[k];
        struct inspect_row *row = &out->rows[out->n++];
        if (r->dcp != NULL) {
            const struct fc_dcp_entry *e = &r->dcp->entries[i];
            row->key = e->fqn;
            row->dcp = e;
            row->is_tensor = e->kind == FC_DCP_TENSOR;
            if (row->is_tensor) {
                row->dtype = e->dtype;
                row->ndim = e->ndim;
                row->shape = e->size;
            } else {
                /* The value of a DCP bytes entry, when the source parsed it. */
                FC_TRY(fc_value_row(row, r->src != NULL ? &r->src->entries[i] : NULL));
            }
        } else {
            const struct fc_entry *e = &r->src->entries[i];
            row->key = e->key;
            row->is_tensor = e->kind == FC_ENTRY_TENSOR;
            if (row->is_tensor) {
                row->dtype = e->t.dtype;
                row->ndim = e->t.ndim;
                row->shape = e->t.shape;
                row->store = &r->src->storages[e->storage];
            } else {
                FC_TRY(fc_value_row(row, e));
            }
        }
        if (row->is_tensor) {
            row->nbytes = fc_shape_nbytes(row->shape, row->ndim, row->dtype);
            row->sha256 = o->checksum ? r->sha256[k] : NULL;
            out->total_bytes += row->nbytes;
            out->ntensors++;
        } else {
            out->nvalues++;
        }
    }
    return FC_OK;
}

static void inspect_rows_release(struct inspect_rows *rows)
{
    for (size_t i = 0; i < rows->n; i++)
        fc_free(rows->rows[i].repr);
    fc_free(rows->rows);
    memset(rows, 0, sizeof(*rows));
}

/* ---- table ---- */

static int fc_shape_string(struct fc_buf *b, const int64_t *shape, int ndim)
{
    fc_buf_clear(b);
    FC_TRY(fc_buf_putc(b, '['));
    for (int d = 0; d < ndim; d++)
        FC_TRY(fc_buf_printf(b, d == 0 ? "%" PRId64 : ", %" PRId64, shape[d]));
    FC_TRY(fc_buf_putc(b, ']'));
    return fc_buf_putc(b, '\0');
}

/* Full checkpoints: aligned columns, tensors first, then values. */
static int print_table_full(const char *path, const struct fc_inspect_result *r,
                            const struct inspect_rows *rows, int checksum, struct fc_buf *b)
{
    int wkey = 3, wdt = 5, wshape = 5, wbytes = 5;
    char tmp[64];
    for (size_t k = 0; k < rows->n; k++) {
        const struct inspect_row *row = &rows->rows[k];
        const int kl = (int)strlen(row->key);
        wkey = kl > wkey ? kl : wkey;
        if (!row->is_tensor)
            continue;
        FC_TRY(fc_shape_string(b, row->shape, row->ndim));
        wshape = (int)b->len - 1 > wshape ? (int)b->len - 1 : wshape;
        const int dl = (int)strlen(fc_dtype_name(row->dtype));
        wdt = dl > wdt ? dl : wdt;
        const int bl = snprintf(tmp, sizeof(tmp), "%" PRIu64, row->nbytes);
        wbytes = bl > wbytes ? bl : wbytes;
    }
    printf("%s (%s)\n", path, r->format);
    printf("%-*s  %-*s  %-*s  %*s  %s%s\n", wkey, "KEY", wdt, "DTYPE", wshape, "SHAPE", wbytes,
           "BYTES", "STORAGE", checksum ? "  SHA256" : "");
    for (size_t k = 0; k < rows->n; k++) {
        const struct inspect_row *row = &rows->rows[k];
        if (!row->is_tensor)
            continue;
        FC_TRY(fc_shape_string(b, row->shape, row->ndim));
        printf("%-*s  %-*s  %-*s  %*" PRIu64 "  %s%s%s%s\n", wkey, row->key, wdt,
               fc_dtype_name(row->dtype), wshape, (char *)b->data, wbytes, row->nbytes,
               row->store->name, row->store->nrefs > 1 ? " (shared)" : "", checksum ? "  " : "",
               checksum ? row->sha256 : "");
    }
    size_t nv = 0;
    for (size_t k = 0; k < rows->n; k++) {
        const struct inspect_row *row = &rows->rows[k];
        if (row->is_tensor)
            continue;
        if (nv++ == 0)
            printf("\n%-*s  %-*s  %s\n", wkey, "VALUE", wdt, "TYPE", "REPR");
        printf("%-*s  %-*s  %s\n", wkey, row->key, wdt, row->type, row->repr);
    }
    return FC_OK;
}

/* DCP, sharded safetensors: each tensor with its chunks, then values, files and the coverage check.
 */
static int print_table_dcp(const char *path, const struct fc_inspect_result *r,
                           const struct inspect_rows *rows, struct fc_buf *b)
{
    struct fc_buf ob = FC_BUF_INIT(4096);
    int rc = FC_OK;
    printf("%s (%s, version %s)\n", path, r->format,
           r->dcp->version != NULL ? r->dcp->version : "none");
    for (size_t k = 0; k < rows->n && rc == FC_OK; k++) {
        const struct inspect_row *row = &rows->rows[k];
        if (!row->is_tensor)
            continue;
        FC_TRY_GOTO(fc_shape_string(b, row->shape, row->ndim), rc, done);
        printf("%s  %s %s  %" PRIu64 " bytes  %zu chunks%s%s\n", row->key,
               fc_dtype_name(row->dtype), (char *)b->data, row->nbytes, row->dcp->nchunks,
               row->sha256 != NULL ? "  sha256 " : "", row->sha256 != NULL ? row->sha256 : "");
        for (size_t c = 0; c < row->dcp->nchunks; c++) {
            const struct fc_dcp_chunk *ch = &row->dcp->chunks[c];
            FC_TRY_GOTO(fc_shape_string(&ob, ch->offsets, row->ndim), rc, done);
            FC_TRY_GOTO(fc_shape_string(b, ch->sizes, row->ndim), rc, done);
            printf("    offsets %s  sizes %s  %s  [%" PRIu64 ", +%" PRIu64 ")%s%s\n",
                   (char *)ob.data, (char *)b->data, ch->storage.relative_path, ch->storage.offset,
                   ch->storage.length, ch->storage.ntransforms > 0 ? "  " : "",
                   ch->storage.ntransforms > 0 ? ch->storage.transforms[0] : "");
        }
        fc_buf_clear(&ob);
        FC_TRY_GOTO(fc_inspect_grid(row->dcp, &ob), rc, done);
        if (ob.len > 0)
            fwrite(ob.data, 1, ob.len, stdout);
    }
    size_t nv = 0;
    for (size_t k = 0; k < rows->n; k++) {
        const struct inspect_row *row = &rows->rows[k];
        if (row->is_tensor)
            continue;
        const struct fc_dcp_storage *st = &row->dcp->storage;
        printf("%s%s  %s  %s  [%" PRIu64 ", +%" PRIu64 ")\n", nv++ == 0 ? "\nVALUES\n" : "",
               row->key, row->repr != NULL ? row->repr : "(bytes)", st->relative_path, st->offset,
               st->length);
    }
    printf("\nFILES\n");
    for (size_t i = 0; i < r->nfiles; i++)
        printf("%s  %" PRIu64 " bytes\n", r->files[i], r->file_bytes[i]);
    if (r->coverage_problems == 0 && r->replicas > 0)
        printf("\ncoverage: ok (every element stored; %zu replica chunks repeat a box another "
               "rank saved)\n",
               r->replicas);
    else if (r->coverage_problems == 0)
        printf("\ncoverage: ok (every element stored exactly once)\n");
    else
        printf("\ncoverage: %zu problem%s\n%s", r->coverage_problems,
               r->coverage_problems == 1 ? "" : "s", r->coverage_report);
done:
    fc_buf_release(&ob);
    return rc;
}

static int print_table(const char *path, const struct fc_inspect_result *r,
                       const struct inspect_rows *rows, int checksum)
{
    struct fc_buf b = FC_BUF_INIT(4096);
    const int rc = r->dcp != NULL ? print_table_dcp(path, r, rows, &b)
                                  : print_table_full(path, r, rows, checksum, &b);
    fc_buf_release(&b);
    if (rc == FC_OK)
        printf("\n%zu tensors, %" PRIu64 " bytes, %zu values\n", rows->ntensors, rows->total_bytes,
               rows->nvalues);
    return rc;
}

/* ---- JSON (every jansson call checked) ---- */

static int fc_json_oom(void)
{
    return fc_error_set(FC_ENOMEM, "out of memory building JSON");
}

/* Set obj[key] = v, taking v's reference; fails cleanly when v is NULL. */
static int jset(json_t *obj, const char *key, json_t *v)
{
    if (v == NULL || json_object_set_new(obj, key, v) != 0)
        return fc_json_oom();
    return FC_OK;
}

static int japp(json_t *arr, json_t *v)
{
    if (v == NULL || json_array_append_new(arr, v) != 0)
        return fc_json_oom();
    return FC_OK;
}

static json_t *fc_json_ints(const int64_t *v, int n)
{
    json_t *a = json_array();
    for (int d = 0; a != NULL && d < n; d++) {
        if (json_array_append_new(a, json_integer(v[d])) != 0) {
            json_decref(a);
            return NULL;
        }
    }
    return a;
}

static int json_chunks(json_t *obj, const struct fc_dcp_entry *e)
{
    json_t *chunks = json_array();
    FC_TRY(jset(obj, "chunks", chunks));
    for (size_t c = 0; c < e->nchunks; c++) {
        const struct fc_dcp_chunk *ch = &e->chunks[c];
        json_t *co = json_object();
        FC_TRY(japp(chunks, co));
        FC_TRY(jset(co, "offsets", fc_json_ints(ch->offsets, e->ndim)));
        FC_TRY(jset(co, "sizes", fc_json_ints(ch->sizes, e->ndim)));
        FC_TRY(jset(co, "file", json_string(ch->storage.relative_path)));
        FC_TRY(jset(co, "offset", json_integer((json_int_t)ch->storage.offset)));
        FC_TRY(jset(co, "length", json_integer((json_int_t)ch->storage.length)));
        if (ch->storage.ntransforms > 0)
            FC_TRY(jset(co, "transform", json_string(ch->storage.transforms[0])));
    }
    return FC_OK;
}

static int json_row(json_t *arr, const struct inspect_row *row)
{
    json_t *obj = json_object();
    FC_TRY(japp(arr, obj));
    FC_TRY(jset(obj, "key", json_string(row->key)));
    if (row->is_tensor) {
        FC_TRY(jset(obj, "dtype", json_string(fc_dtype_name(row->dtype))));
        FC_TRY(jset(obj, "shape", fc_json_ints(row->shape, row->ndim)));
        FC_TRY(jset(obj, "nbytes", json_integer((json_int_t)row->nbytes)));
        if (row->store != NULL) {
            FC_TRY(jset(obj, "storage", json_string(row->store->name)));
            FC_TRY(jset(obj, "shared", json_boolean(row->store->nrefs > 1)));
        } else {
            FC_TRY(json_chunks(obj, row->dcp));
        }
        if (row->sha256 != NULL)
            FC_TRY(jset(obj, "sha256", json_string(row->sha256)));
        return FC_OK;
    }
    if (row->type != NULL) {
        FC_TRY(jset(obj, "type", json_string(row->type)));
        FC_TRY(jset(obj, "repr", json_string(row->repr)));
    }
    if (row->dcp != NULL) {
        const struct fc_dcp_storage *st = &row->dcp->storage;
        FC_TRY(jset(obj, "file", json_string(st->relative_path)));
        FC_TRY(jset(obj, "offset", json_integer((json_int_t)st->offset)));
        FC_TRY(jset(obj, "length", json_integer((json_int_t)st->length)));
    }
    return FC_OK;
}

static int json_dcp_tail(json_t *root, const struct fc_inspect_result *r)
{
    json_t *files = json_array(), *cov = json_object(), *problems = json_array();
    /* Attach first so that root owns them whatever fails next. */
    FC_TRY(jset(root, "files", files));
    FC_TRY(jset(root, "coverage", cov));
    for (size_t i = 0; i < r->nfiles; i++) {
        json_t *f = json_object();
        FC_TRY(japp(files, f));
        FC_TRY(jset(f, "name", json_string(r->files[i])));
        FC_TRY(jset(f, "bytes", json_integer((json_int_t)r->file_bytes[i])));
    }
    FC_TRY(jset(cov, "ok", json_boolean(r->coverage_problems == 0)));
    FC_TRY(jset(cov, "problems", problems));
    if (r->replicas > 0)
        FC_TRY(jset(cov, "replicas", json_integer((json_int_t)r->replicas)));
    for (const char *p = r->coverage_report; p != NULL && *p != '\0';) {
        const char *nl = strchr(p, '\n');
        const size_t len = nl != NULL ? (size_t)(nl - p) : strlen(p);
        FC_TRY(japp(problems, json_stringn(p, len)));
        p += len + (nl != NULL);
    }
    return FC_OK;
}

static int json_build(json_t *root, const char *path, const struct fc_inspect_result *r,
                      const struct inspect_rows *rows)
{
    json_t *tensors = json_array(), *values = json_array();
    FC_TRY(jset(root, "format", json_string(r->format)));
    FC_TRY(jset(root, "path", json_string(path)));
    if (r->dcp != NULL)
        FC_TRY(jset(root, "version",
                    r->dcp->version != NULL ? json_string(r->dcp->version) : json_null()));
    FC_TRY(jset(root, "tensors", tensors));
    FC_TRY(jset(root, "values", values));
    for (size_t k = 0; k < rows->n; k++)
        FC_TRY(json_row(rows->rows[k].is_tensor ? tensors : values, &rows->rows[k]));
    if (r->dcp != NULL)
        FC_TRY(json_dcp_tail(root, r));
    FC_TRY(jset(root, "total_tensors", json_integer((json_int_t)rows->ntensors)));
    FC_TRY(jset(root, "total_bytes", json_integer((json_int_t)rows->total_bytes)));
    return jset(root, "total_values", json_integer((json_int_t)rows->nvalues));
}

static int print_json(const char *path, const struct fc_inspect_result *r,
                      const struct inspect_rows *rows)
{
    json_t *root = json_object();
    int rc = root != NULL ? json_build(root, path, r, rows) : fc_json_oom();
    if (rc == FC_OK && (json_dumpf(root, stdout, JSON_INDENT(1) | JSON_ENSURE_ASCII) != 0 ||
                        fputc('\n', stdout) == EOF))
        rc = fc_error_set(FC_EIO, "writing JSON to stdout failed");
    json_decref(root);
    return rc;
}

int cmd_inspect(int argc, char **argv)
{
    struct inspect_cli c = {.o = FC_INSPECT_OPTS_INIT, .json = 0};
    struct fc_inspect_result r;
    struct inspect_rows rows = {NULL, 0, 0, 0, 0};
    struct fc_cmdline cl;
    const int st = fc_opt_parse(&inspect_spec, argc, argv, inspect_option, &c, &cl);
    if (st != FC_OK)
        return fc_cli_report(st);
    c.o.path = cl.operands[0];
    fc_cmdline_release(&cl);
    int rc = fc_inspect(&c.o, &r);
    if (rc < 0)
        return fc_cli_report(rc);
    rc = inspect_walk(&c.o, &r, &rows);
    if (rc == FC_OK)
        rc = c.json ? print_json(c.o.path, &r, &rows)
                    : print_table(c.o.path, &r, &rows, c.o.checksum);
    if (rc == FC_OK && r.coverage_problems > 0)
        rc = fc_error_set(FC_ECORRUPT,
                          "%s: %zu coverage problem%s (gaps, overlaps or missing "
                          "bytes)",
                          c.o.path, r.coverage_problems, r.coverage_problems == 1 ? "" : "s");
    inspect_rows_release(&rows);
    fc_inspect_result_release(&r);
    if (rc == FC_OK)
        rc = fc_cli_flush_stdout();
    return fc_cli_report(rc);
}
