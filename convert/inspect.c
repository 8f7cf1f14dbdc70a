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
#include "fc_chunks.h"
#include "fc_convert.h"
#include "fc_dcp.h"
#include "fc_error.h"
#include "fc_regex.h"
#include "fc_safetensors.h"
#include "fc_strmap.h"
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
    rc = fc_source_verify_rest(src); /* the tensor's chunks were read in row slabs */
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

/* The files of dir named *suffix (.distcp, .safetensors) and their sizes, sorted by name. */
static int fc_inspect_list_files(const char *dir, const char *suffix, struct fc_inspect_result *r)
{
    const size_t slen = suffix != NULL ? strlen(suffix) : 0;
    DIR *d = opendir(dir);
    if (d == NULL)
        return fc_error_set(FC_EIO, "%s: cannot open directory: %s", dir, strerror(errno));
    int rc = FC_OK;
    const struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        const size_t len = strlen(de->d_name);
        if (suffix == NULL ? de->d_name[0] == '.'
                           : len < slen || strcmp(de->d_name + len - slen, suffix) != 0)
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

/* The coverage check of r->dcp and the byte ranges of its items, into r's report. */
static int fc_inspect_coverage(struct fc_inspect_result *r)
{
    struct fc_buf rep = FC_BUF_INIT((size_t)64 << 20);
    int rc = FC_OK;
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
done:
    fc_buf_release(&rep);
    return rc;
}

/*
 * Select the entries of r->dcp that re matches; with r->src open, read every
 * selected tensor (its SHA-256 kept with --checksum) when read_all, else only
 * with --checksum.
 */
static int fc_inspect_select_chunked(const struct fc_inspect_opts *opts,
                                     struct fc_inspect_result *r, const struct fc_regex *re,
                                     int read_all)
{
    r->selected = fc_calloc(r->dcp->nentries + 1, sizeof(*r->selected));
    r->sha256 = fc_calloc(r->dcp->nentries + 1, sizeof(*r->sha256));
    if (r->selected == NULL || r->sha256 == NULL)
        return fc_error_set(FC_ENOMEM, "out of memory");
    for (size_t i = 0; i < r->dcp->nentries; i++) {
        const struct fc_dcp_entry *e = &r->dcp->entries[i];
        const int wanted = re == NULL ? 1 : fc_regex_search(re, e->fqn);
        FC_TRY(wanted);
        if (wanted == 0)
            continue;
        if (r->src != NULL && e->kind == FC_DCP_TENSOR && (read_all || opts->checksum)) {
            /* Every element read as a load reads it (CRC-32s, stored shapes); the chunks'
             * tiling was proven by fc_dcp_check() and again when the source opened. */
            char scratch[65];
            FC_TRY(fc_tensor_sha256(r->src, &r->src->entries[i],
                                    opts->checksum ? r->sha256[r->nselected] : scratch));
        }
        r->selected[r->nselected++] = i;
    }
    return FC_OK;
}

static int fc_inspect_dcp(const struct fc_inspect_opts *opts, struct fc_inspect_result *r,
                          const struct fc_regex *re)
{
    /* .metadata, or the rank-local __{r}.metadata files of a save without collectives. */
    FC_TRY(fc_dcp_meta_load_dir(&r->dcp, opts->path));
    r->format = "dcp";
    FC_TRY(fc_inspect_list_files(opts->path, ".distcp", r));
    FC_TRY(fc_inspect_coverage(r));
    if (opts->verify && r->coverage_problems == 0)
        FC_TRY(fc_inspect_verify_crcs(opts->path, r->dcp));
    int compressed = 0;
    for (size_t i = 0; i < r->dcp->nentries; i++) {
        const struct fc_dcp_entry *e = &r->dcp->entries[i];
        for (size_t c = 0; c < e->nchunks; c++)
            compressed |= e->chunks[c].storage.ntransforms > 0;
        compressed |= e->storage.ntransforms > 0;
    }
    /* The source parses every item: values get their repr, blobs get checked. */
    if ((opts->checksum || opts->verify || !compressed) && r->coverage_problems == 0)
        FC_TRY(fc_source_open_dcp_meta(&r->src, opts->path, r->dcp, 0));
    if (opts->verify && r->src != NULL)
        FC_TRY(fc_source_verify_replicas(r->src));
    /* Reading every element also proves the chunks tile the tensor (and checks CRC-32s). */
    return fc_inspect_select_chunked(opts, r, re, 1);
}

/* Chunks of sharded safetensors are read this many bytes at a time by --verify. */
#define FC_INSPECT_VERIFY_SLAB ((size_t)8 << 20)

/* The open file fi of r->files (opened on first use into fs[fi]). */
static int fc_inspect_file(const char *dir, const struct fc_inspect_result *r, struct fc_file *fs,
                           size_t fi, const struct fc_file **out)
{
    if (fs[fi].path == NULL) {
        char *p = fc_path_join(dir, r->files[fi]);
        if (p == NULL)
            return fc_error_set(FC_ENOMEM, "out of memory");
        const int rc = fc_file_open_read(&fs[fi], p);
        fc_free(p);
        FC_TRY(rc);
    }
    *out = &fs[fi];
    return FC_OK;
}

/* Read [off, off+len) of f slab by slab; with g, compare it with [goff, goff+len) of g. */
static int fc_inspect_read_range(const struct fc_file *f, uint64_t off, const struct fc_file *g,
                                 uint64_t goff, uint64_t len, unsigned char *buf, const char *key)
{
    for (uint64_t done = 0; done < len;) {
        const size_t n =
            len - done < FC_INSPECT_VERIFY_SLAB ? (size_t)(len - done) : FC_INSPECT_VERIFY_SLAB;
        FC_TRY(fc_file_pread(f, buf, n, off + done));
        if (g != NULL) {
            FC_TRY(fc_file_pread(g, buf + FC_INSPECT_VERIFY_SLAB, n, goff + done));
            if (memcmp(buf, buf + FC_INSPECT_VERIFY_SLAB, n) != 0)
                return fc_error_set(FC_ECORRUPT,
                                    "%s: tensor '%s': replicas differ: the chunk here has the box "
                                    "of the one in %s but other bytes",
                                    f->path, key, g->path);
        }
        done += n;
    }
    return FC_OK;
}

/* Index of relative_path in r->files (sorted), or -1. */
static long fc_inspect_file_index(const struct fc_inspect_result *r, const char *name)
{
    char *const *hit =
        r->nfiles == 0 ? NULL : bsearch(&name, r->files, r->nfiles, sizeof(*r->files), fc_cmp_name);
    return hit != NULL ? (long)(hit - r->files) : -1;
}

/*
 * One chunk of a sharded safetensors file against the header parsed again
 * (which holds its bytes inside the file, numel * element size long), then
 * its bytes read.
 */
static int fc_inspect_verify_chunk(const struct fc_dcp_entry *e, const struct fc_dcp_chunk *ch,
                                   const struct fc_st_tensor *t, const struct fc_file *f,
                                   unsigned char *buf)
{
    int same = ch->storage.offset == t->data_offset && ch->storage.length == t->nbytes &&
               e->dtype == t->dtype && e->ndim == t->ndim;
    for (int d = 0; same && d < e->ndim; d++)
        same = ch->sizes[d] == t->shape[d] && ch->offsets[d] == t->saved_offsets[d];
    if (!same)
        return fc_error_set(FC_ECORRUPT,
                            "%s: tensor '%s' no longer has the dtype, shape, saved_offsets and "
                            "byte range read when the checkpoint was opened",
                            f->path, e->fqn);
    return fc_inspect_read_range(f, t->data_offset, NULL, 0, t->nbytes, buf, e->fqn);
}

/* Every chunk of file fi against that file's header, parsed afresh. */
static int fc_inspect_verify_st_file(const struct fc_dcp_meta *m, const struct fc_file *f,
                                     const char *name, size_t *cursor, unsigned char *buf)
{
    struct fc_safetensors *st = NULL;
    int rc = FC_OK;
    /* The parse checks the header again, the tensors' byte ranges tiling the file included. */
    FC_TRY(fc_safetensors_open(&st, f));
    for (size_t k = 0; rc == FC_OK && k < fc_safetensors_count(st); k++) {
        const struct fc_st_tensor *t = fc_safetensors_at(st, k);
        const long ei = fc_dcp_meta_find(m, t->name);
        /* Chunks were listed file by file: this file's chunk of t is the entry's next one. */
        const struct fc_dcp_entry *e = ei >= 0 ? &m->entries[ei] : NULL;
        if (e == NULL || cursor[ei] >= e->nchunks ||
            strcmp(e->chunks[cursor[ei]].storage.relative_path, name) != 0)
            rc = fc_error_set(FC_ECORRUPT,
                              "%s: tensor '%s' was not there when the checkpoint "
                              "was opened",
                              f->path, t->name);
        else
            rc = fc_inspect_verify_chunk(e, &e->chunks[cursor[ei]++], t, f, buf);
    }
    fc_safetensors_free(st);
    return rc;
}

/* Chunks with the same box in several files (reads take the last file's) must hold the same bytes.
 */
static int fc_inspect_verify_st_replicas(const char *dir, const struct fc_inspect_result *r,
                                         struct fc_file *fs, unsigned char *buf)
{
    int rc = FC_OK;
    for (size_t i = 0; rc == FC_OK && i < r->dcp->nentries; i++) {
        const struct fc_dcp_entry *e = &r->dcp->entries[i];
        struct fc_box *boxes = fc_calloc(e->nchunks + 1, sizeof(*boxes));
        size_t *first_of = fc_calloc(e->nchunks + 1, sizeof(*first_of)), nrep = 0;
        if (boxes == NULL || first_of == NULL)
            rc = fc_error_set(FC_ENOMEM, "out of memory");
        for (size_t c = 0; rc == FC_OK && c < e->nchunks; c++)
            boxes[c] = (struct fc_box){e->chunks[c].offsets, e->chunks[c].sizes};
        if (rc == FC_OK)
            rc = fc_chunks_replicas(e->ndim, boxes, e->nchunks, first_of, &nrep);
        for (size_t c = 0; rc == FC_OK && nrep > 0 && c < e->nchunks; c++) {
            const struct fc_dcp_storage *a = &e->chunks[first_of[c]].storage;
            const struct fc_dcp_storage *b = &e->chunks[c].storage;
            const struct fc_file *fa, *fb;
            if (first_of[c] == c)
                continue;
            rc = fc_inspect_file(dir, r, fs, (size_t)fc_inspect_file_index(r, a->relative_path),
                                 &fa);
            if (rc == FC_OK)
                rc = fc_inspect_file(dir, r, fs, (size_t)fc_inspect_file_index(r, b->relative_path),
                                     &fb);
            if (rc == FC_OK)
                rc = fc_inspect_read_range(fb, b->offset, fa, a->offset, b->length, buf, e->fqn);
        }
        fc_free(boxes);
        fc_free(first_of);
    }
    return rc;
}

/*
 * --verify of a sharded safetensors directory: each file's header is parsed
 * again and must list, in order, the chunks the checkpoint was opened with
 * (dtype, shape, saved_offsets, byte range inside the file, ranges tiling
 * the file without overlap); every chunk's bytes are read; replicas compared.
 */
static int fc_inspect_verify_sharded(const char *dir, const struct fc_inspect_result *r)
{
    const struct fc_dcp_meta *m = r->dcp;
    struct fc_file *fs = fc_calloc(r->nfiles + 1, sizeof(*fs));
    size_t *cursor = fc_calloc(m->nentries + 1, sizeof(*cursor));
    unsigned char *buf = fc_malloc(2 * FC_INSPECT_VERIFY_SLAB);
    int rc = FC_OK;
    if (fs == NULL || cursor == NULL || buf == NULL) {
        rc = fc_error_set(FC_ENOMEM, "out of memory");
        goto done;
    }
    for (size_t i = 0; i < r->nfiles; i++)
        fs[i] = (struct fc_file)FC_FILE_INIT;
    for (size_t i = 0; rc == FC_OK && i < r->nfiles; i++) {
        const struct fc_file *f;
        rc = fc_inspect_file(dir, r, fs, i, &f);
        if (rc == FC_OK)
            rc = fc_inspect_verify_st_file(m, f, r->files[i], cursor, buf);
    }
    for (size_t i = 0; rc == FC_OK && i < m->nentries; i++) {
        if (cursor[i] != m->entries[i].nchunks)
            rc = fc_error_set(FC_ECORRUPT,
                              "%s: tensor '%s': chunk in %s is gone since the checkpoint was "
                              "opened",
                              dir, m->entries[i].fqn,
                              m->entries[i].chunks[cursor[i]].storage.relative_path);
    }
    if (rc == FC_OK)
        rc = fc_inspect_verify_st_replicas(dir, r, fs, buf);
done:
    for (size_t i = 0; fs != NULL && i < r->nfiles; i++)
        fc_file_close(&fs[i]);
    fc_free(fs);
    fc_free(cursor);
    fc_free(buf);
    return rc;
}

/*
 * --verify of a torch_checkpointing directory: every torch.save rank file
 * holding chunks is a zip whose records' CRC-32s cover the whole storages,
 * FSDP2's padding included, which reading the chunks never touches.
 */
static int fc_inspect_verify_pt_files(const char *dir, const struct fc_dcp_meta *m)
{
    struct fc_strmap seen = FC_STRMAP_INIT;
    int rc = FC_OK;
    for (size_t i = 0; rc == FC_OK && i < m->nentries; i++) {
        const struct fc_dcp_entry *e = &m->entries[i];
        for (size_t c = 0; rc == FC_OK && e->kind == FC_DCP_TENSOR && c < e->nchunks; c++) {
            const char *name = e->chunks[c].storage.relative_path;
            const size_t len = name != NULL ? strlen(name) : 0;
            size_t v = 0;
            if (len < 3 || strcmp(name + len - 3, ".pt") != 0 || fc_strmap_get(&seen, name, &v))
                continue;
            rc = fc_strmap_put(&seen, name, 1, NULL);
            struct fc_file f = FC_FILE_INIT;
            struct fc_zip_reader *zr = NULL;
            char *p = fc_path_join(dir, name);
            if (rc == FC_OK && p == NULL)
                rc = fc_error_set(FC_ENOMEM, "out of memory");
            if (rc == FC_OK)
                rc = fc_file_open_read(&f, p);
            if (rc == FC_OK)
                rc = fc_zip_reader_open(&zr, &f, 0, f.size, p);
            for (size_t k = 0; rc == FC_OK && k < fc_zip_count(zr); k++)
                rc = fc_zip_verify_crc(zr, fc_zip_entry_at(zr, k));
            fc_zip_reader_free(zr);
            fc_file_close(&f);
            fc_free(p);
        }
    }
    fc_strmap_release(&seen);
    return rc < 0 ? rc : FC_OK;
}

/*
 * A sharded safetensors directory (r->src open): its chunks as DCP metadata,
 * so that it is shown and checked as a DCP is.  Tensors are read only for
 * --checksum: without CRC-32s, reading proves nothing the coverage check and
 * --verify do not.
 */
static int fc_inspect_sharded(const struct fc_inspect_opts *opts, struct fc_inspect_result *r,
                              const struct fc_regex *re)
{
    /* torch_checkpointing: its metadata names the files; --verify reads every shard. */
    const int listed = (fc_source_caps(r->src) & FC_SOURCE_LISTED) != 0;
    FC_TRY(fc_source_sharded_meta(r->src, &r->dcp));
    FC_TRY(fc_inspect_list_files(opts->path, listed ? NULL : ".safetensors", r));
    FC_TRY(fc_inspect_coverage(r));
    if (listed && opts->verify && r->coverage_problems == 0)
        FC_TRY(fc_inspect_verify_pt_files(opts->path, r->dcp));
    if (listed && r->coverage_problems == 0)
        return fc_inspect_select_chunked(opts, r, re, opts->verify);
    if (opts->verify && r->coverage_problems == 0)
        FC_TRY(fc_inspect_verify_sharded(opts->path, r));
    if (r->coverage_problems > 0) {
        /* Reads would fail on the gaps the report lists. */
        fc_source_free(r->src);
        r->src = NULL;
    }
    return fc_inspect_select_chunked(opts, r, re, 0);
}

int fc_inspect(const struct fc_inspect_opts *opts, struct fc_inspect_result *r)
{
    struct fc_regex *re = NULL;
    int rc = FC_OK;
    memset(r, 0, sizeof(*r));
    if (opts->key_regex != NULL)
        FC_TRY(fc_regex_compile(&re, opts->key_regex, "--key"));
    if (fc_source_is_dcp_dir(opts->path) == 1) {
        rc = fc_inspect_dcp(opts, r, re);
        goto done;
    }
    /* Tiling problems of a sharded directory are reported below, as a DCP's are. */
    FC_TRY_GOTO(fc_source_open(&r->src, opts->path, FC_SOURCE_UNTILED_OK), rc, done);
    r->format = r->src->format;
    if (fc_source_caps(r->src) & FC_SOURCE_CHUNKS) { /* sharded safetensors: DCP went above */
        rc = fc_inspect_sharded(opts, r, re);
        goto done;
    }
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

/*
 * The rank of a "__{r}_0.distcp" file name, or of a sharded safetensors file
 * "shard-{r+1:05d}-model-...safetensors" (torch's HuggingFaceStorageWriter
 * numbers ranks from 1, as we do), or -1 for any other name.
 */
static int fc_grid_rank(const char *name)
{
    int r = -1, n = 0;
    if (sscanf(name, "__%d_0.distcp%n", &r, &n) == 1 && name[n] == '\0')
        return r;
    if (sscanf(name, "shard-%d-model-%n", &r, &n) == 1 && n > 0 && r > 0)
        return r - 1;
    return -1;
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
