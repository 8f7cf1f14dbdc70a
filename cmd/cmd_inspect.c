/*
 * cmd_inspect.c - `fsdpconv inspect`: options, then render fc_inspect()'s
 * result as a table or as one JSON object.
 */
#define _GNU_SOURCE
#include <getopt.h>
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

static const char usage[] =
    "usage: fsdpconv inspect [--json] [--key <regex>] [--checksum] [--verify] <path>\n"
    "\n"
    "    <path>            a torch.save file, a safetensors file, a *.safetensors.index.json,\n"
    "                      a directory holding one of those, or a DCP checkpoint directory\n"
    "    --json            print one JSON object instead of a table\n"
    "    --key <regex>     only keys matching this POSIX extended regular expression\n"
    "    --checksum        SHA-256 of each tensor's logical C-contiguous little-endian bytes\n"
    "    --verify          DCP: read every item and check lengths, shapes and CRC-32s\n"
    "    -h, --help        show this help\n";

enum { OPT_JSON = 256, OPT_KEY, OPT_CHECKSUM, OPT_VERIFY };

static const char *fc_value_type(const struct fc_pv *v)
{
    switch (v->kind) {
    case FC_PV_NONE: return "None";
    case FC_PV_BOOL: return "bool";
    case FC_PV_INT:
    case FC_PV_BIGINT: return "int";
    case FC_PV_FLOAT: return "float";
    case FC_PV_STR: return "str";
    case FC_PV_BYTES: return "bytes";
    case FC_PV_LIST: return "list";
    case FC_PV_TUPLE: return "tuple";
    case FC_PV_SET: return "set";
    case FC_PV_DICT: return "dict";
    case FC_PV_GLOBAL:
    case FC_PV_CALL:
    case FC_PV_OBJECT:
    case FC_PV_TENSOR: return "object";
    }
    return "object";
}

static int fc_shape_string(struct fc_buf *b, const int64_t *shape, int ndim)
{
    FC_TRY(fc_buf_putc(b, '['));
    for (int d = 0; d < ndim; d++)
        FC_TRY(fc_buf_printf(b, d == 0 ? "%" PRId64 : ", %" PRId64, shape[d]));
    FC_TRY(fc_buf_putc(b, ']'));
    return fc_buf_putc(b, '\0');
}

static int fc_repr_string(struct fc_buf *b, const struct fc_pv *v)
{
    FC_TRY(fc_pv_repr(b, v, 200));
    return fc_buf_putc(b, '\0');
}

static int print_json(const struct fc_inspect_opts *o, const struct fc_inspect_result *r)
{
    const struct fc_source *src = r->src;
    json_t *root = json_object();
    json_t *tensors = json_array();
    json_t *values = json_array();
    uint64_t total_bytes = 0;
    size_t ntensors = 0, nvalues = 0;
    int rc = FC_OK;
    if (root == NULL || tensors == NULL || values == NULL) {
        rc = fc_error_set(FC_ENOMEM, "out of memory building JSON");
        goto done;
    }
    json_object_set_new(root, "format", json_string(r->format));
    json_object_set_new(root, "path", json_string(o->path));
    for (size_t k = 0; k < r->nselected; k++) {
        const struct fc_entry *e = &src->entries[r->selected[k]];
        json_t *obj = json_object();
        json_object_set_new(obj, "key", json_string(e->key));
        if (e->kind == FC_ENTRY_TENSOR) {
            const struct fc_storage *st = &src->storages[e->storage];
            json_t *shape = json_array();
            for (int d = 0; d < e->t.ndim; d++)
                json_array_append_new(shape, json_integer(e->t.shape[d]));
            json_object_set_new(obj, "dtype", json_string(fc_dtype_name(e->t.dtype)));
            json_object_set_new(obj, "shape", shape);
            json_object_set_new(obj, "nbytes", json_integer((json_int_t)fc_entry_nbytes(e)));
            json_object_set_new(obj, "storage", json_string(st->name));
            json_object_set_new(obj, "shared", json_boolean(st->nrefs > 1));
            if (o->checksum)
                json_object_set_new(obj, "sha256", json_string(r->sha256[k]));
            json_array_append_new(tensors, obj);
            total_bytes += fc_entry_nbytes(e);
            ntensors++;
        } else {
            struct fc_buf b = FC_BUF_INIT(4096);
            rc = fc_repr_string(&b, e->value);
            json_object_set_new(obj, "type", json_string(fc_value_type(e->value)));
            json_object_set_new(obj, "repr", json_string(rc == FC_OK ? (char *)b.data : ""));
            fc_buf_release(&b);
            json_array_append_new(values, obj);
            nvalues++;
            if (rc < 0)
                goto done;
        }
    }
    json_object_set(root, "tensors", tensors);
    json_object_set(root, "values", values);
    json_object_set_new(root, "total_tensors", json_integer((json_int_t)ntensors));
    json_object_set_new(root, "total_bytes", json_integer((json_int_t)total_bytes));
    json_object_set_new(root, "total_values", json_integer((json_int_t)nvalues));
    if (json_dumpf(root, stdout, JSON_INDENT(1) | JSON_ENSURE_ASCII) != 0) {
        rc = fc_error_set(FC_EIO, "writing JSON to stdout failed");
        goto done;
    }
    fputc('\n', stdout);
done:
    json_decref(tensors);
    json_decref(values);
    json_decref(root);
    return rc;
}

static int print_table(const struct fc_inspect_opts *o, const struct fc_inspect_result *r)
{
    const struct fc_source *src = r->src;
    int wkey = 3, wdt = 5, wshape = 5, wbytes = 5;
    uint64_t total_bytes = 0;
    size_t ntensors = 0, nvalues = 0;
    char tmp[64];
    for (size_t k = 0; k < r->nselected; k++) {
        const struct fc_entry *e = &src->entries[r->selected[k]];
        const int kl = (int)strlen(e->key);
        wkey = kl > wkey ? kl : wkey;
        if (e->kind != FC_ENTRY_TENSOR)
            continue;
        struct fc_buf b = FC_BUF_INIT(4096);
        FC_TRY(fc_shape_string(&b, e->t.shape, e->t.ndim));
        wshape = (int)b.len - 1 > wshape ? (int)b.len - 1 : wshape;
        fc_buf_release(&b);
        const int dl = (int)strlen(fc_dtype_name(e->t.dtype));
        wdt = dl > wdt ? dl : wdt;
        const int bl = snprintf(tmp, sizeof(tmp), "%" PRIu64, fc_entry_nbytes(e));
        wbytes = bl > wbytes ? bl : wbytes;
    }
    printf("%s (%s)\n", o->path, r->format);
    printf("%-*s  %-*s  %-*s  %*s  %s%s\n", wkey, "KEY", wdt, "DTYPE", wshape, "SHAPE", wbytes,
           "BYTES", "STORAGE", o->checksum ? "  SHA256" : "");
    for (size_t k = 0; k < r->nselected; k++) {
        const struct fc_entry *e = &src->entries[r->selected[k]];
        if (e->kind != FC_ENTRY_TENSOR)
            continue;
        const struct fc_storage *st = &src->storages[e->storage];
        struct fc_buf b = FC_BUF_INIT(4096);
        FC_TRY(fc_shape_string(&b, e->t.shape, e->t.ndim));
        printf("%-*s  %-*s  %-*s  %*" PRIu64 "  %s%s%s%s\n", wkey, e->key, wdt,
               fc_dtype_name(e->t.dtype), wshape, (char *)b.data, wbytes, fc_entry_nbytes(e),
               st->name, st->nrefs > 1 ? " (shared)" : "", o->checksum ? "  " : "",
               o->checksum ? r->sha256[k] : "");
        fc_buf_release(&b);
        total_bytes += fc_entry_nbytes(e);
        ntensors++;
    }
    for (size_t k = 0; k < r->nselected; k++) {
        const struct fc_entry *e = &src->entries[r->selected[k]];
        if (e->kind != FC_ENTRY_VALUE)
            continue;
        if (nvalues++ == 0)
            printf("\n%-*s  %-*s  %s\n", wkey, "VALUE", wdt, "TYPE", "REPR");
        struct fc_buf b = FC_BUF_INIT(4096);
        FC_TRY(fc_repr_string(&b, e->value));
        printf("%-*s  %-*s  %s\n", wkey, e->key, wdt, fc_value_type(e->value), (char *)b.data);
        fc_buf_release(&b);
    }
    printf("\n%zu tensors, %" PRIu64 " bytes, %zu values\n", ntensors, total_bytes, nvalues);
    return FC_OK;
}

static json_t *fc_json_ints(const int64_t *v, int n)
{
    json_t *a = json_array();
    for (int d = 0; d < n; d++)
        json_array_append_new(a, json_integer(v[d]));
    return a;
}

/* The value of a DCP bytes entry, when the source parsed it. */
static const struct fc_pv *fc_dcp_value(const struct fc_inspect_result *r, size_t i)
{
    return r->src != NULL ? r->src->entries[i].value : NULL;
}

static uint64_t fc_dcp_nbytes(const struct fc_dcp_entry *e)
{
    int64_t n = 0;
    if (fc_shape_numel(e->size, e->ndim, &n) < 0)
        return 0;
    return (uint64_t)n * fc_dtype_size(e->dtype);
}

static int print_json_dcp(const struct fc_inspect_opts *o, const struct fc_inspect_result *r)
{
    const struct fc_dcp_meta *m = r->dcp;
    json_t *root = json_object();
    json_t *tensors = json_array(), *values = json_array(), *files = json_array();
    json_t *problems = json_array();
    uint64_t total = 0;
    size_t nt = 0, nv = 0;
    int rc = FC_OK;
    json_object_set_new(root, "format", json_string("dcp"));
    json_object_set_new(root, "path", json_string(o->path));
    json_object_set_new(root, "version",
                        m->version != NULL ? json_string(m->version) : json_null());
    for (size_t k = 0; k < r->nselected; k++) {
        const size_t i = r->selected[k];
        const struct fc_dcp_entry *e = &m->entries[i];
        json_t *obj = json_object();
        json_object_set_new(obj, "key", json_string(e->fqn));
        if (e->kind == FC_DCP_TENSOR) {
            json_t *chunks = json_array();
            json_object_set_new(obj, "dtype", json_string(fc_dtype_name(e->dtype)));
            json_object_set_new(obj, "shape", fc_json_ints(e->size, e->ndim));
            json_object_set_new(obj, "nbytes", json_integer((json_int_t)fc_dcp_nbytes(e)));
            for (size_t c = 0; c < e->nchunks; c++) {
                const struct fc_dcp_chunk *ch = &e->chunks[c];
                json_t *co = json_object();
                json_object_set_new(co, "offsets", fc_json_ints(ch->offsets, e->ndim));
                json_object_set_new(co, "sizes", fc_json_ints(ch->sizes, e->ndim));
                json_object_set_new(co, "file", json_string(ch->storage.relative_path));
                json_object_set_new(co, "offset", json_integer((json_int_t)ch->storage.offset));
                json_object_set_new(co, "length", json_integer((json_int_t)ch->storage.length));
                if (ch->storage.ntransforms > 0)
                    json_object_set_new(co, "transform", json_string(ch->storage.transforms[0]));
                json_array_append_new(chunks, co);
            }
            json_object_set_new(obj, "chunks", chunks);
            if (o->checksum)
                json_object_set_new(obj, "sha256", json_string(r->sha256[k]));
            json_array_append_new(tensors, obj);
            total += fc_dcp_nbytes(e);
            nt++;
        } else {
            const struct fc_pv *v = fc_dcp_value(r, i);
            if (v != NULL) {
                struct fc_buf b = FC_BUF_INIT(4096);
                rc = fc_repr_string(&b, v);
                json_object_set_new(obj, "type", json_string(fc_value_type(v)));
                json_object_set_new(obj, "repr", json_string(rc == FC_OK ? (char *)b.data : ""));
                fc_buf_release(&b);
            }
            json_object_set_new(obj, "file", json_string(e->storage.relative_path));
            json_object_set_new(obj, "offset", json_integer((json_int_t)e->storage.offset));
            json_object_set_new(obj, "length", json_integer((json_int_t)e->storage.length));
            json_array_append_new(values, obj);
            nv++;
        }
    }
    for (size_t i = 0; i < r->nfiles; i++) {
        json_t *f = json_object();
        json_object_set_new(f, "name", json_string(r->files[i]));
        json_object_set_new(f, "bytes", json_integer((json_int_t)r->file_bytes[i]));
        json_array_append_new(files, f);
    }
    json_t *cov = json_object();
    for (const char *p = r->coverage_report; p != NULL && *p != '\0';) {
        const char *nl = strchr(p, '\n');
        const size_t len = nl != NULL ? (size_t)(nl - p) : strlen(p);
        json_array_append_new(problems, json_stringn(p, len));
        p += len + (nl != NULL);
    }
    json_object_set_new(cov, "ok", json_boolean(r->coverage_problems == 0));
    json_object_set(cov, "problems", problems);
    json_object_set(root, "tensors", tensors);
    json_object_set(root, "values", values);
    json_object_set(root, "files", files);
    json_object_set_new(root, "coverage", cov);
    json_object_set_new(root, "total_tensors", json_integer((json_int_t)nt));
    json_object_set_new(root, "total_bytes", json_integer((json_int_t)total));
    json_object_set_new(root, "total_values", json_integer((json_int_t)nv));
    if (json_dumpf(root, stdout, JSON_INDENT(1) | JSON_ENSURE_ASCII) != 0)
        rc = fc_error_set(FC_EIO, "writing JSON to stdout failed");
    fputc('\n', stdout);
    json_decref(tensors);
    json_decref(values);
    json_decref(files);
    json_decref(problems);
    json_decref(root);
    return rc;
}

static int print_table_dcp(const struct fc_inspect_opts *o, const struct fc_inspect_result *r)
{
    const struct fc_dcp_meta *m = r->dcp;
    uint64_t total = 0;
    size_t nt = 0, nv = 0;
    printf("%s (dcp, version %s)\n", o->path, m->version != NULL ? m->version : "none");
    for (size_t k = 0; k < r->nselected; k++) {
        const struct fc_dcp_entry *e = &m->entries[r->selected[k]];
        if (e->kind != FC_DCP_TENSOR)
            continue;
        struct fc_buf b = FC_BUF_INIT(4096);
        FC_TRY(fc_shape_string(&b, e->size, e->ndim));
        printf("%s  %s %s  %" PRIu64 " bytes  %zu chunks%s%s\n", e->fqn, fc_dtype_name(e->dtype),
               (char *)b.data, fc_dcp_nbytes(e), e->nchunks, o->checksum ? "  sha256 " : "",
               o->checksum ? r->sha256[k] : "");
        fc_buf_release(&b);
        for (size_t c = 0; c < e->nchunks; c++) {
            const struct fc_dcp_chunk *ch = &e->chunks[c];
            struct fc_buf ob = FC_BUF_INIT(4096), sb = FC_BUF_INIT(4096);
            FC_TRY(fc_shape_string(&ob, ch->offsets, e->ndim));
            FC_TRY(fc_shape_string(&sb, ch->sizes, e->ndim));
            printf("    offsets %s  sizes %s  %s  [%" PRIu64 ", +%" PRIu64 ")%s%s\n",
                   (char *)ob.data, (char *)sb.data, ch->storage.relative_path, ch->storage.offset,
                   ch->storage.length, ch->storage.ntransforms > 0 ? "  " : "",
                   ch->storage.ntransforms > 0 ? ch->storage.transforms[0] : "");
            fc_buf_release(&ob);
            fc_buf_release(&sb);
        }
        total += fc_dcp_nbytes(e);
        nt++;
    }
    for (size_t k = 0; k < r->nselected; k++) {
        const size_t i = r->selected[k];
        const struct fc_dcp_entry *e = &m->entries[i];
        if (e->kind != FC_DCP_BYTES)
            continue;
        const struct fc_pv *v = fc_dcp_value(r, i);
        struct fc_buf b = FC_BUF_INIT(4096);
        if (v != NULL)
            FC_TRY(fc_repr_string(&b, v));
        printf("%s%s  %s  %s  [%" PRIu64 ", +%" PRIu64 ")\n", nv++ == 0 ? "\nVALUES\n" : "", e->fqn,
               v != NULL ? (char *)b.data : "(bytes)", e->storage.relative_path, e->storage.offset,
               e->storage.length);
        fc_buf_release(&b);
    }
    printf("\nFILES\n");
    for (size_t i = 0; i < r->nfiles; i++)
        printf("%s  %" PRIu64 " bytes\n", r->files[i], r->file_bytes[i]);
    if (r->coverage_problems == 0)
        printf("\ncoverage: ok (every element stored exactly once)\n");
    else
        printf("\ncoverage: %zu problems\n%s", r->coverage_problems, r->coverage_report);
    printf("\n%zu tensors, %" PRIu64 " bytes, %zu values\n", nt, total, nv);
    return FC_OK;
}

int cmd_inspect(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"json", no_argument, NULL, OPT_JSON},
        {"key", required_argument, NULL, OPT_KEY},
        {"checksum", no_argument, NULL, OPT_CHECKSUM},
        {"verify", no_argument, NULL, OPT_VERIFY},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    struct fc_inspect_opts o = {.path = NULL};
    struct fc_inspect_result r;
    int json = 0, c;
    optind = 0;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (c) {
        case OPT_JSON: json = 1; break;
        case OPT_KEY: o.key_regex = optarg; break;
        case OPT_CHECKSUM: o.checksum = 1; break;
        case OPT_VERIFY: o.verify = 1; break;
        case 'h': fputs(usage, stdout); return FC_EXIT_OK;
        default:
            return fc_cli_usage_error("inspect", usage, "unknown option or missing value: '%s'",
                                      argv[optind - 1]);
        }
    }
    if (argc - optind != 1)
        return fc_cli_usage_error("inspect", usage,
                                  argc - optind == 0 ? "missing <path>" : "too many arguments");
    o.path = argv[optind];
    int rc = fc_inspect(&o, &r);
    if (rc < 0)
        return fc_cli_report(rc);
    if (r.dcp != NULL)
        rc = json ? print_json_dcp(&o, &r) : print_table_dcp(&o, &r);
    else
        rc = json ? print_json(&o, &r) : print_table(&o, &r);
    if (rc == FC_OK && r.coverage_problems > 0)
        rc = fc_error_set(FC_ECORRUPT,
                          "%s: %zu coverage problems (gaps, overlaps or missing "
                          "bytes)",
                          o.path, r.coverage_problems);
    fc_inspect_result_release(&r);
    if (rc == FC_OK && fflush(stdout) != 0)
        rc = fc_error_set(FC_EIO, "writing to stdout failed");
    return fc_cli_report(rc);
}
