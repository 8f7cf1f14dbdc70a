/*
 * inspect.c - open a checkpoint, select keys, checksum tensors.
 */
#include <dirent.h>
#include <stdlib.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "fc_alloc.h"
#include "fc_buf.h"
#include "fc_convert.h"
#include "fc_dcp.h"
#include "fc_error.h"
#include "fc_regex.h"
#include "fc_zip.h"

/* Checksums read at most this many bytes at a time, so memory stays flat. */
#define FC_INSPECT_SLAB ((uint64_t)64 << 20)

int fc_tensor_sha256(const struct fc_source *src, const struct fc_entry *e, char hex_out[65])
{
    const struct fc_tensor_desc *t = &e->t;
    const size_t esz = fc_dtype_size(t->dtype);
    int64_t off[FC_MAX_DIMS] = {0}, size[FC_MAX_DIMS];
    int64_t row_elems = 1;
    unsigned char digest[32];
    unsigned char *buf = NULL;
    int rc = FC_OK;
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    if (md == NULL || EVP_DigestInit_ex(md, EVP_sha256(), NULL) != 1) {
        rc = fc_error_set(FC_ENOMEM, "%s: cannot initialise SHA-256", src->path);
        goto done;
    }
    memcpy(size, t->shape, sizeof(size));
    for (int d = 1; d < t->ndim; d++)
        row_elems *= t->shape[d];
    const uint64_t row_bytes = (uint64_t)row_elems * esz;
    const int64_t rows = t->ndim == 0 ? 1 : t->shape[0];
    int64_t step = rows;
    if (t->ndim > 0 && row_bytes > 0 && (uint64_t)rows * row_bytes > FC_INSPECT_SLAB)
        step =
            (int64_t)(FC_INSPECT_SLAB / row_bytes) > 0 ? (int64_t)(FC_INSPECT_SLAB / row_bytes) : 1;
    const uint64_t cap = t->ndim == 0 ? esz : (uint64_t)step * row_bytes;
    if (row_bytes > 0 || t->ndim == 0) {
        buf = fc_malloc((size_t)cap);
        if (buf == NULL) {
            rc = fc_error_set(FC_ENOMEM, "%s: out of memory checksumming '%s'", src->path, e->key);
            goto done;
        }
    }
    for (int64_t r = 0; buf != NULL && r < rows; r += step) {
        const int64_t n = rows - r < step ? rows - r : step;
        if (t->ndim > 0) {
            off[0] = r;
            size[0] = n;
        }
        FC_TRY_GOTO(fc_source_read_box(src, e, off, size, buf), rc, done);
        const size_t nbytes = t->ndim == 0 ? esz : (size_t)((uint64_t)n * row_bytes);
        if (EVP_DigestUpdate(md, buf, nbytes) != 1) {
            rc = fc_error_set(FC_ERROR, "%s: SHA-256 update failed", src->path);
            goto done;
        }
    }
    if (EVP_DigestFinal_ex(md, digest, NULL) != 1) {
        rc = fc_error_set(FC_ERROR, "%s: SHA-256 final failed", src->path);
        goto done;
    }
    for (int i = 0; i < 32; i++) {
        static const char hex[] = "0123456789abcdef";
        hex_out[2 * i] = hex[digest[i] >> 4];
        hex_out[2 * i + 1] = hex[digest[i] & 15];
    }
    hex_out[64] = '\0';
done:
    fc_free(buf);
    EVP_MD_CTX_free(md);
    return rc;
}

void fc_inspect_result_release(struct fc_inspect_result *r)
{
    fc_source_free(r->src);
    fc_dcp_meta_free(r->dcp);
    fc_free(r->selected);
    fc_free(r->sha256);
    fc_free(r->coverage_report);
    for (size_t i = 0; i < r->nfiles; i++)
        fc_free(r->files[i]);
    fc_free(r->files);
    fc_free(r->file_bytes);
    memset(r, 0, sizeof(*r));
}

static int fc_cmp_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The .distcp files of a DCP directory and their sizes, sorted by name. */
static int fc_inspect_list_files(const char *dir, struct fc_inspect_result *r)
{
    DIR *d = opendir(dir);
    if (d == NULL)
        return fc_error_set(FC_EIO, "%s: cannot open directory: %s", dir, strerror(errno));
    int rc = FC_OK;
    const struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        const size_t len = strlen(de->d_name);
        if (len < 7 || strcmp(de->d_name + len - 7, ".distcp") != 0)
            continue;
        char **f = fc_reallocarray(r->files, r->nfiles + 1, sizeof(*f));
        if (f == NULL) {
            rc = fc_error_set(FC_ENOMEM, "out of memory");
            break;
        }
        r->files = f;
        f[r->nfiles] = fc_strdup(de->d_name);
        if (f[r->nfiles] == NULL) {
            rc = fc_error_set(FC_ENOMEM, "out of memory");
            break;
        }
        r->nfiles++;
    }
    closedir(d);
    FC_TRY(rc);
    if (r->nfiles > 1) /* files is NULL when there are none, which qsort does not accept */
        qsort(r->files, r->nfiles, sizeof(*r->files), fc_cmp_name);
    r->file_bytes = fc_calloc(r->nfiles + 1, sizeof(*r->file_bytes));
    if (r->file_bytes == NULL)
        return fc_error_set(FC_ENOMEM, "out of memory");
    for (size_t i = 0; i < r->nfiles; i++) {
        char *p = fc_path_join(dir, r->files[i]);
        struct stat st;
        if (p == NULL)
            return fc_error_set(FC_ENOMEM, "out of memory");
        if (stat(p, &st) == 0)
            r->file_bytes[i] = (uint64_t)st.st_size;
        fc_free(p);
    }
    return FC_OK;
}

static int fc_problem(struct fc_buf *rep, size_t *count, const char *fmt, const char *a,
                      const char *b, uint64_t x, uint64_t y)
{
    (*count)++;
    FC_TRY(fc_buf_printf(rep, fmt, a, b, x, y));
    return fc_buf_putc(rep, '\n');
}

/* Every item's byte range must lie inside its file. */
static int fc_inspect_check_ranges(const struct fc_inspect_result *r, struct fc_buf *rep,
                                   size_t *count)
{
    for (size_t i = 0; i < r->dcp->nentries; i++) {
        const struct fc_dcp_entry *e = &r->dcp->entries[i];
        const size_t n = e->kind == FC_DCP_TENSOR ? e->nchunks : 1;
        for (size_t c = 0; c < n; c++) {
            const struct fc_dcp_storage *st =
                e->kind == FC_DCP_TENSOR ? &e->chunks[c].storage : &e->storage;
            if (st->relative_path == NULL)
                continue;
            /* r->files is sorted by name: a million items over 1000 files stay cheap. */
            char *const *hit = r->nfiles == 0 ? NULL
                                              : bsearch(&st->relative_path, r->files, r->nfiles,
                                                        sizeof(*r->files), fc_cmp_name);
            const long fi = hit != NULL ? (long)(hit - r->files) : -1;
            if (fi < 0) {
                (*count)++;
                FC_TRY(fc_buf_printf(rep, "'%s': file %s is missing\n", e->fqn, st->relative_path));
            } else if (st->offset + st->length > r->file_bytes[fi] ||
                       st->offset + st->length < st->offset) {
                FC_TRY(fc_problem(
                    rep, count, "'%s': item in %s ends at %" PRIu64 " past the file end %" PRIu64,
                    e->fqn, st->relative_path, st->offset + st->length, r->file_bytes[fi]));
            }
        }
    }
    return FC_OK;
}

/* --verify: open every item as a zip and check the CRC-32 of every record. */
static int fc_inspect_verify_crcs(const char *dir, const struct fc_dcp_meta *m)
{
    int rc = FC_OK;
    for (size_t i = 0; rc == FC_OK && i < m->nentries; i++) {
        const struct fc_dcp_entry *e = &m->entries[i];
        const size_t n = e->kind == FC_DCP_TENSOR ? e->nchunks : 1;
        for (size_t c = 0; rc == FC_OK && c < n; c++) {
            const struct fc_dcp_storage *st =
                e->kind == FC_DCP_TENSOR ? &e->chunks[c].storage : &e->storage;
            if (st->ntransforms > 0)
                continue; /* checked after decompression by the source */
            struct fc_file f = FC_FILE_INIT;
            struct fc_zip_reader *zr = NULL;
            char *p = fc_path_join(dir, st->relative_path);
            char what[768];
            if (p == NULL)
                return fc_error_set(FC_ENOMEM, "out of memory");
            snprintf(what, sizeof(what), "%s @ %" PRIu64 " (item '%s')", p, st->offset, e->fqn);
            rc = fc_file_open_read(&f, p);
            fc_free(p);
            if (rc == FC_OK)
                rc = fc_zip_reader_open(&zr, &f, st->offset, st->length, what);
            for (size_t k = 0; rc == FC_OK && k < fc_zip_count(zr); k++)
                rc = fc_zip_verify_crc(zr, fc_zip_entry_at(zr, k));
            fc_zip_reader_free(zr);
            fc_file_close(&f);
        }
    }
    return rc;
}

static int fc_inspect_dcp(const struct fc_inspect_opts *opts, struct fc_inspect_result *r,
                          const struct fc_regex *re)
{
    struct fc_buf rep = FC_BUF_INIT((size_t)64 << 20);
    int rc = FC_OK;
    /* .metadata, or the rank-local __{r}.metadata files of a save without collectives. */
    FC_TRY(fc_dcp_meta_load_dir(&r->dcp, opts->path));
    r->format = "dcp";
    FC_TRY_GOTO(fc_inspect_list_files(opts->path, r), rc, done);
    if (fc_dcp_check(r->dcp, &rep, &r->replicas) < 0) {
        /* Problems are in rep; count its lines. */
        for (size_t i = 0; i < rep.len; i++)
            r->coverage_problems += rep.data[i] == '\n';
        if (r->coverage_problems == 0)
            r->coverage_problems = 1;
    }
    FC_TRY_GOTO(fc_inspect_check_ranges(r, &rep, &r->coverage_problems), rc, done);
    FC_TRY_GOTO(fc_buf_putc(&rep, '\0'), rc, done);
    r->coverage_report = (char *)fc_buf_detach(&rep, NULL);
    if (opts->verify && r->coverage_problems == 0)
        FC_TRY_GOTO(fc_inspect_verify_crcs(opts->path, r->dcp), rc, done);
    int compressed = 0;
    for (size_t i = 0; i < r->dcp->nentries; i++) {
        const struct fc_dcp_entry *e = &r->dcp->entries[i];
        for (size_t c = 0; c < e->nchunks; c++)
            compressed |= e->chunks[c].storage.ntransforms > 0;
        compressed |= e->storage.ntransforms > 0;
    }
    /* The source parses every item: values get their repr, blobs get checked. */
    if ((opts->checksum || opts->verify || !compressed) && r->coverage_problems == 0)
        FC_TRY_GOTO(fc_source_open_dcp_meta(&r->src, opts->path, r->dcp), rc, done);
    if (opts->verify && r->src != NULL)
        FC_TRY_GOTO(fc_source_verify_replicas(r->src), rc, done);
    r->selected = fc_calloc(r->dcp->nentries + 1, sizeof(*r->selected));
    r->sha256 = fc_calloc(r->dcp->nentries + 1, sizeof(*r->sha256));
    if (r->selected == NULL || r->sha256 == NULL) {
        rc = fc_error_set(FC_ENOMEM, "out of memory");
        goto done;
    }
    for (size_t i = 0; i < r->dcp->nentries; i++) {
        const struct fc_dcp_entry *e = &r->dcp->entries[i];
        const int wanted = re == NULL ? 1 : fc_regex_search(re, e->fqn);
        if (wanted < 0) {
            rc = wanted;
            goto done;
        }
        if (wanted == 0)
            continue;
        if (r->src != NULL && e->kind == FC_DCP_TENSOR) {
            /* Every element read as a load reads it (CRC-32s, stored shapes); the chunks'
             * tiling was proven by fc_dcp_check() and again when the source opened. */
            char scratch[65];
            FC_TRY_GOTO(fc_tensor_sha256(r->src, &r->src->entries[i],
                                         opts->checksum ? r->sha256[r->nselected] : scratch),
                        rc, done);
        }
        r->selected[r->nselected++] = i;
    }
done:
    fc_buf_release(&rep);
    return rc;
}

/* A DCP directory: .metadata, rank-local __{r}.metadata, or .distcp files (then incomplete). */
static int fc_dir_looks_like_dcp(const char *dir)
{
    DIR *d = opendir(dir);
    int yes = 0;
    const struct dirent *de;
    if (d == NULL)
        return 0;
    while (!yes && (de = readdir(d)) != NULL) {
        const size_t n = strlen(de->d_name);
        yes = strcmp(de->d_name, ".metadata") == 0 ||
              (n > 7 && strcmp(de->d_name + n - 7, ".distcp") == 0) ||
              (n > 11 && strncmp(de->d_name, "__", 2) == 0 &&
               strcmp(de->d_name + n - 9, ".metadata") == 0);
    }
    closedir(d);
    return yes;
}

int fc_inspect(const struct fc_inspect_opts *opts, struct fc_inspect_result *r)
{
    struct fc_regex *re = NULL;
    int rc = FC_OK;
    memset(r, 0, sizeof(*r));
    if (opts->key_regex != NULL)
        FC_TRY(fc_regex_compile(&re, opts->key_regex, "--key"));
    if (fc_path_is_dir(opts->path) == 1 && fc_dir_looks_like_dcp(opts->path)) {
        rc = fc_inspect_dcp(opts, r, re);
        goto done;
    }
    FC_TRY_GOTO(fc_source_open(&r->src, opts->path), rc, done);
    r->format = r->src->format;
    r->selected = fc_calloc(r->src->nentries, sizeof(*r->selected));
    r->sha256 = fc_calloc(r->src->nentries, sizeof(*r->sha256));
    if (r->selected == NULL || r->sha256 == NULL) {
        rc = fc_error_set(FC_ENOMEM, "%s: out of memory", opts->path);
        goto done;
    }
    for (size_t i = 0; i < r->src->nentries; i++) {
        const struct fc_entry *e = &r->src->entries[i];
        const int wanted = re == NULL ? 1 : fc_regex_search(re, e->key);
        if (wanted < 0) {
            rc = wanted;
            goto done;
        }
        if (wanted == 0)
            continue;
        if (opts->checksum && e->kind == FC_ENTRY_TENSOR)
            FC_TRY_GOTO(fc_tensor_sha256(r->src, e, r->sha256[r->nselected]), rc, done);
        r->selected[r->nselected++] = i;
    }
done:
    fc_regex_free(re);
    if (rc < 0)
        fc_inspect_result_release(r);
    return rc;
}

static int fc_cmp_i64(const void *a, const void *b)
{
    const int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* The rank of a "__{r}_0.distcp" file name, or -1 for any other name. */
static int fc_grid_rank(const char *name)
{
    int r = -1, n = 0;
    if (sscanf(name, "__%d_0.distcp%n", &r, &n) != 1 || name[n] != '\0')
        return -1;
    return r;
}

/* Sorted distinct starts and ends of the non-empty chunks along dim d, into edges. */
static size_t fc_grid_edges(const struct fc_dcp_entry *e, int d, int64_t *edges)
{
    size_t n = 0;
    edges[n++] = 0;
    edges[n++] = e->size[d];
    for (size_t c = 0; c < e->nchunks; c++) {
        const struct fc_dcp_chunk *ch = &e->chunks[c];
        int empty = 0;
        for (int k = 0; k < e->ndim; k++)
            empty |= ch->sizes[k] == 0;
        if (!empty) {
            edges[n++] = ch->offsets[d];
            edges[n++] = ch->offsets[d] + ch->sizes[d];
        }
    }
    qsort(edges, n, sizeof(*edges), fc_cmp_i64);
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        if (m == 0 || edges[i] != edges[m - 1])
            edges[m++] = edges[i];
    }
    return m;
}

/* The file rank storing the cell at (row, col) of the cut dims, "-" none, "*" several. */
static int fc_grid_cell(struct fc_buf *out, const struct fc_dcp_entry *e, const int *dims, int ncut,
                        const int64_t *at, int width)
{
    int found = -2;
    for (size_t c = 0; c < e->nchunks; c++) {
        const struct fc_dcp_chunk *ch = &e->chunks[c];
        int in = 1;
        for (int k = 0; k < e->ndim; k++)
            in &= ch->sizes[k] > 0;
        for (int i = 0; in && i < ncut; i++)
            in = at[i] >= ch->offsets[dims[i]] && at[i] < ch->offsets[dims[i]] + ch->sizes[dims[i]];
        if (in)
            found = found == -2 ? fc_grid_rank(ch->storage.relative_path) : -3;
    }
    char cell[16];
    if (found >= 0)
        snprintf(cell, sizeof(cell), "%d", found);
    else
        snprintf(cell, sizeof(cell), "%s", found == -2 ? "-" : "*");
    return fc_buf_printf(out, " %*s", width, cell);
}

int fc_inspect_grid(const struct fc_dcp_entry *e, struct fc_buf *out)
{
    int dims[FC_MAX_DIMS], ncut = 0;
    int64_t *edges[2] = {NULL, NULL};
    size_t nedges[2] = {0, 0};
    int rc = FC_OK;
    if (e->kind != FC_DCP_TENSOR || e->ndim == 0 || e->nchunks < 2)
        return FC_OK;
    int64_t *tmp = fc_calloc(2 * e->nchunks + 2, sizeof(*tmp));
    if (tmp == NULL)
        return fc_error_set(FC_ENOMEM, "out of memory");
    for (int d = 0; d < e->ndim; d++) {
        if (fc_grid_edges(e, d, tmp) > 2)
            dims[ncut++] = d;
    }
    fc_free(tmp);
    if (ncut != 2) /* one cut dim: the chunk lines say it all */
        return ncut < 2 ? FC_OK : fc_buf_printf(out, "    grid: cut on %d dims\n", ncut);
    for (int i = 0; i < 2; i++) {
        edges[i] = fc_calloc(2 * e->nchunks + 2, sizeof(int64_t));
        if (edges[i] == NULL) {
            rc = fc_error_set(FC_ENOMEM, "out of memory");
            goto done;
        }
        nedges[i] = fc_grid_edges(e, dims[i], edges[i]);
    }
    /* One line per piece of the first cut dim, one column per piece of the second. */
    FC_TRY_GOTO(
        fc_buf_printf(out, "    grid (file rank per box): dim %d x dim %d\n", dims[0], dims[1]), rc,
        done);
    const size_t cols = nedges[1] - 1;
    FC_TRY_GOTO(fc_buf_printf(out, "    %14s", ""), rc, done);
    for (size_t j = 0; j < cols; j++) {
        char h[48];
        snprintf(h, sizeof(h), "[%" PRId64 ":%" PRId64 ")", edges[1][j], edges[1][j + 1]);
        FC_TRY_GOTO(fc_buf_printf(out, " %12s", h), rc, done);
    }
    FC_TRY_GOTO(fc_buf_puts(out, "\n"), rc, done);
    for (size_t i = 0; i + 1 < nedges[0]; i++) {
        char h[48];
        snprintf(h, sizeof(h), "[%" PRId64 ":%" PRId64 ")", edges[0][i], edges[0][i + 1]);
        FC_TRY_GOTO(fc_buf_printf(out, "    %14s", h), rc, done);
        for (size_t j = 0; j < cols; j++) {
            const int64_t at[2] = {edges[0][i], edges[1][j]};
            FC_TRY_GOTO(fc_grid_cell(out, e, dims, 2, at, 12), rc, done);
        }
        FC_TRY_GOTO(fc_buf_puts(out, "\n"), rc, done);
    }
done:
    fc_free(edges[0]);
    fc_free(edges[1]);
    return rc;
}
