/*
 * test_dcp.c - DCP .metadata model: reading what torch 2.15 wrote, writing what
 * torch reads, coverage checks, hostile inputs, allocation failures.
 *
 * fixtures/dcp/<name>/expected.json is torch's own view of <name>/.metadata
 * (fixtures/gen/gen_dcp.py); fixtures/dcp/variants/ holds the model_optim_ws2
 * Metadata re-pickled in the other forms a reader meets (protocols 2/3/5, enum
 * by name, legacy TensorProperties, pathlib._local, 5-tuple properties).
 *
 * Set FC_DCP_REWRITE_DIR=<dir> to have the rewrite test leave our pickle of
 * each fixture there as <name>.metadata; `gen_dcp.py compare` and
 * `gen_dcp.py verify` then check it against torch.
 */
#include "fc_test.h"

#include <jansson.h>
#include <unistd.h>

#include "fc_alloc.h"
#include "fc_buf.h"
#include "fc_chunks.h"
#include "fc_dcp.h"
#include "fc_pickle.h"

#include "dcp_meta_diff.h"

static const char *const fixture_names[] = {"model_ws2", "model_optim_ws2", "zstd_ws1"};
#define NFIXTURES (sizeof(fixture_names) / sizeof(fixture_names[0]))

static const char *const variant_names[] = {
    "protocol2",     "protocol3",         "protocol5",
    "enum_by_name",  "legacy_properties", "legacy_properties_enum_by_name",
    "pathlib_local", "str_checkpoint_id", "five_tuple",
};
#define NVARIANTS (sizeof(variant_names) / sizeof(variant_names[0]))

#define BUF_CAP ((size_t)1 << 30)

static unsigned char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    assert_int_equal(fseek(f, 0, SEEK_END), 0);
    const long n = ftell(f);
    assert_true(n >= 0);
    rewind(f);
    unsigned char *p = malloc((size_t)n + 1);
    assert_non_null(p);
    assert_int_equal(fread(p, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *len = (size_t)n;
    return p;
}

static struct fc_dcp_meta *load_fixture(const char *name)
{
    char rel[256];
    struct fc_dcp_meta *m = NULL;
    snprintf(rel, sizeof(rel), "dcp/%s/.metadata", name);
    assert_fc_ok(fc_dcp_meta_load(&m, fc_test_fixture(rel)));
    assert_non_null(m);
    return m;
}

static json_t *load_expected(const char *name)
{
    char rel[256];
    json_error_t err;
    snprintf(rel, sizeof(rel), "dcp/%s/expected.json", name);
    json_t *j = json_load_file(fc_test_fixture(rel), 0, &err);
    if (j == NULL)
        print_error("%s: %s\n", rel, err.text);
    assert_non_null(j);
    return j;
}

static void assert_dims(json_t *arr, const int64_t *v, int n)
{
    assert_true(json_is_array(arr));
    assert_int_equal(json_array_size(arr), (size_t)n);
    for (int d = 0; d < n; d++)
        assert_int_equal(json_integer_value(json_array_get(arr, (size_t)d)), v[d]);
}

static void assert_storage(json_t *js, const struct fc_dcp_storage *st)
{
    assert_non_null(st->relative_path);
    assert_string_equal(json_string_value(json_object_get(js, "relative_path")), st->relative_path);
    assert_int_equal(json_integer_value(json_object_get(js, "offset")), st->offset);
    assert_int_equal(json_integer_value(json_object_get(js, "length")), st->length);
    json_t *tr = json_object_get(js, "transforms");
    assert_int_equal(json_array_size(tr), st->ntransforms);
    for (size_t i = 0; i < st->ntransforms; i++)
        assert_string_equal(json_string_value(json_array_get(tr, i)), st->transforms[i]);
}

static void assert_path(json_t *jp, const struct fc_dcp_entry *e)
{
    if (json_is_null(jp)) {
        assert_null(e->path);
        return;
    }
    assert_non_null(e->path);
    assert_int_equal(json_array_size(jp), e->path_len);
    for (size_t i = 0; i < e->path_len; i++) {
        json_t *x = json_array_get(jp, i);
        if (json_is_integer(x)) {
            assert_true(e->path[i].is_index);
            assert_int_equal(json_integer_value(x), e->path[i].index);
        } else {
            assert_false(e->path[i].is_index);
            assert_string_equal(json_string_value(x), e->path[i].key);
        }
    }
}

/*
 * Every field of m against torch's view of the same file.  Strides are only
 * in torch's 6-tuple properties: our writer emits 5-tuples, so a re-read of
 * our output has none (with_strides = 0).
 */
static void assert_matches_torch(const struct fc_dcp_meta *m, json_t *j, int with_strides)
{
    json_t *entries = json_object_get(j, "entries");
    assert_int_equal(json_array_size(entries), m->nentries);
    assert_string_equal(json_string_value(json_object_get(j, "version")), m->version);
    assert_int_equal(json_is_true(json_object_get(j, "has_planner_data")), m->has_planner_data);
    json_t *sm = json_object_get(j, "storage_meta");
    assert_int_equal(!json_is_null(sm), m->has_storage_meta);
    assert_string_equal(json_string_value(json_object_get(sm, "checkpoint_id")), m->checkpoint_id);
    assert_string_equal(json_string_value(json_object_get(sm, "save_id")), m->save_id);
    assert_int_equal(json_array_size(json_object_get(sm, "modules")), m->nmodules);
    for (size_t i = 0; i < m->nentries; i++) {
        const struct fc_dcp_entry *e = &m->entries[i];
        json_t *je = json_array_get(entries, i);
        assert_string_equal(json_string_value(json_object_get(je, "fqn")), e->fqn);
        assert_int_equal(fc_dcp_meta_find(m, e->fqn), (long)i);
        assert_path(json_object_get(je, "path"), e);
        const char *kind = json_string_value(json_object_get(je, "kind"));
        if (strcmp(kind, "bytes") == 0) {
            assert_int_equal(e->kind, FC_DCP_BYTES);
            assert_storage(json_object_get(je, "storage"), &e->storage);
            continue;
        }
        assert_int_equal(e->kind, FC_DCP_TENSOR);
        assert_string_equal(json_string_value(json_object_get(je, "dtype")),
                            fc_dtype_name(e->dtype));
        assert_int_equal(json_array_size(json_object_get(je, "size")), (size_t)e->ndim);
        assert_dims(json_object_get(je, "size"), e->size, e->ndim);
        assert_int_equal(json_is_true(json_object_get(je, "requires_grad")), e->requires_grad);
        assert_int_equal(json_is_true(json_object_get(je, "pin_memory")), e->pin_memory);
        assert_int_equal(e->mem_format, FC_DCP_CONTIGUOUS_FORMAT);
        json_t *js = json_object_get(je, "strides");
        assert_int_equal(with_strides && !json_is_null(js), e->has_strides);
        if (e->has_strides)
            assert_dims(js, e->strides, e->ndim);
        json_t *chunks = json_object_get(je, "chunks");
        assert_int_equal(json_array_size(chunks), e->nchunks);
        for (size_t c = 0; c < e->nchunks; c++) {
            json_t *jc = json_array_get(chunks, c);
            assert_dims(json_object_get(jc, "offsets"), e->chunks[c].offsets, e->ndim);
            assert_dims(json_object_get(jc, "sizes"), e->chunks[c].sizes, e->ndim);
            assert_storage(json_object_get(jc, "storage"), &e->chunks[c].storage);
        }
    }
}

static void test_dcp_reads_every_fixture_as_torch_sees_it(void **state)
{
    (void)state;
    for (size_t f = 0; f < NFIXTURES; f++) {
        struct fc_dcp_meta *m = load_fixture(fixture_names[f]);
        json_t *j = load_expected(fixture_names[f]);
        assert_matches_torch(m, j, 1);
        assert_true(m->checkpoint_id_was_path); /* FileSystemWriter stores a PosixPath */
        assert_int_equal(m->orphan_storage, 0);
        assert_int_equal(m->planner_data_dropped, 0);
        assert_fc_ok(fc_dcp_check(m, NULL, NULL));
        json_decref(j);
        fc_dcp_meta_free(m);
    }
}

/* Spot checks of the interesting parts, independent of expected.json. */
static void test_dcp_fixture_has_uneven_and_empty_shards_and_optimizer_layout(void **state)
{
    (void)state;
    struct fc_dcp_meta *m = load_fixture("model_optim_ws2");
    long i = fc_dcp_meta_find(m, "model.emb.weight");
    assert_true(i >= 0);
    const struct fc_dcp_entry *e = &m->entries[i];
    assert_int_equal(e->dtype, FC_DTYPE_FLOAT32);
    assert_int_equal(e->nchunks, 2);
    assert_int_equal(e->size[0], 5);
    assert_int_equal(e->chunks[0].sizes[0] + e->chunks[1].sizes[0], 5);
    /* emb is keyed "emb.weight" inside the model dict: the path keeps the dot */
    assert_int_equal(e->path_len, 2);
    assert_string_equal(e->path[1].key, "emb.weight");

    i = fc_dcp_meta_find(m, "model.head.weight"); /* (1, 3) over 2 ranks: [1, 0] */
    assert_true(i >= 0);
    e = &m->entries[i];
    assert_int_equal(e->nchunks, 2);
    int found_empty = 0;
    for (size_t c = 0; c < e->nchunks; c++)
        if (e->chunks[c].sizes[0] == 0) {
            found_empty = 1;
            assert_int_equal(e->chunks[c].offsets[0], 1); /* empty shard: offset = dim size */
        }
    assert_true(found_empty);

    i = fc_dcp_meta_find(m, "model.proj.weight");
    assert_true(i >= 0);
    assert_int_equal(m->entries[i].dtype, FC_DTYPE_BFLOAT16);

    i = fc_dcp_meta_find(m, "optim.state.emb.weight.step");
    assert_true(i >= 0);
    e = &m->entries[i];
    assert_int_equal(e->kind, FC_DCP_TENSOR);
    assert_int_equal(e->ndim, 0);
    assert_int_equal(e->nchunks, 1);
    assert_null(e->chunks[0].offsets);

    i = fc_dcp_meta_find(m, "optim.param_groups.0.lr");
    assert_true(i >= 0);
    e = &m->entries[i];
    assert_int_equal(e->kind, FC_DCP_BYTES);
    assert_int_equal(e->path_len, 4);
    assert_string_equal(e->path[1].key, "param_groups");
    assert_true(e->path[2].is_index);
    assert_int_equal(e->path[2].index, 0);
    assert_true(fc_dcp_meta_find(m, "optim.param_groups.0.betas") >= 0);
    assert_true(fc_dcp_meta_find(m, "optim.param_groups.0.params") >= 0);
    fc_dcp_meta_free(m);

    m = load_fixture("zstd_ws1");
    i = fc_dcp_meta_find(m, "w");
    assert_true(i >= 0);
    assert_int_equal(m->entries[i].chunks[0].storage.ntransforms, 1);
    assert_string_equal(m->entries[i].chunks[0].storage.transforms[0], FC_DCP_TRANSFORM_ZSTD);
    fc_dcp_meta_free(m);
}

static void test_dcp_reads_every_pickle_variant_to_the_same_model(void **state)
{
    (void)state;
    struct fc_dcp_meta *base = load_fixture("model_optim_ws2");
    struct fc_buf diff = FC_BUF_INIT(1 << 20);
    for (size_t v = 0; v < NVARIANTS; v++) {
        char rel[256];
        struct fc_dcp_meta *m = NULL;
        snprintf(rel, sizeof(rel), "dcp/variants/%s.metadata", variant_names[v]);
        assert_fc_ok(fc_dcp_meta_load(&m, fc_test_fixture(rel)));
        fc_buf_clear(&diff);
        const int d = fc_dcp_meta_diff(&diff, base, m);
        if (d != 0)
            print_error("%s: %.*s\n", variant_names[v], (int)diff.len, (const char *)diff.data);
        assert_int_equal(d, 0);
        const int five = strcmp(variant_names[v], "five_tuple") == 0 ||
                         strncmp(variant_names[v], "legacy", 6) == 0;
        assert_int_equal(m->entries[0].has_strides, !five);
        assert_int_equal(m->checkpoint_id_was_path,
                         strcmp(variant_names[v], "str_checkpoint_id") != 0);
        fc_dcp_meta_free(m);
    }
    fc_buf_release(&diff);
    fc_dcp_meta_free(base);
}

/* Build a model with the builder API from torch's view (what full-to-dcp does). */
static struct fc_dcp_meta *build_from_expected(json_t *j)
{
    struct fc_dcp_meta *m = NULL;
    json_t *entries = json_object_get(j, "entries");
    assert_fc_ok(fc_dcp_meta_new(&m));
    for (size_t i = 0; i < json_array_size(entries); i++) {
        json_t *je = json_array_get(entries, i);
        const char *fqn = json_string_value(json_object_get(je, "fqn"));
        size_t ei;
        json_t *jp = json_object_get(je, "path");
        struct fc_path_elem path[16];
        if (strcmp(json_string_value(json_object_get(je, "kind")), "bytes") == 0) {
            json_t *js = json_object_get(je, "storage");
            assert_fc_ok(fc_dcp_meta_add_bytes(m, fqn, &ei));
            assert_fc_ok(fc_dcp_storage_set(m, &m->entries[ei].storage, json_string_value(json_object_get(js, "relative_path")),
                (uint64_t)json_integer_value(json_object_get(js, "offset")),
                (uint64_t)json_integer_value(json_object_get(js, "length"))));
            json_t *tr = json_object_get(js, "transforms");
            for (size_t t = 0; t < json_array_size(tr); t++)
                assert_fc_ok(fc_dcp_storage_add_transform(m, &m->entries[ei].storage, json_string_value(json_array_get(tr, t))));
        } else {
            int64_t size[FC_MAX_DIMS];
            json_t *jsz = json_object_get(je, "size");
            const int ndim = (int)json_array_size(jsz);
            for (int d = 0; d < ndim; d++)
                size[d] = json_integer_value(json_array_get(jsz, (size_t)d));
            const fc_dtype dt =
                fc_dtype_from_torch_name(json_string_value(json_object_get(je, "dtype")));
            assert_fc_ok(fc_dcp_meta_add_tensor(m, fqn, dt, ndim, size, &ei));
            json_t *chunks = json_object_get(je, "chunks");
            for (size_t c = 0; c < json_array_size(chunks); c++) {
                json_t *jc = json_array_get(chunks, c);
                int64_t off[FC_MAX_DIMS], sz[FC_MAX_DIMS];
                size_t ci;
                for (int d = 0; d < ndim; d++) {
                    off[d] = json_integer_value(
                        json_array_get(json_object_get(jc, "offsets"), (size_t)d));
                    sz[d] =
                        json_integer_value(json_array_get(json_object_get(jc, "sizes"), (size_t)d));
                }
                assert_fc_ok(fc_dcp_meta_add_chunk(m, ei, off, sz, &ci));
                json_t *js = json_object_get(jc, "storage");
                struct fc_dcp_storage *st = &m->entries[ei].chunks[ci].storage;
                assert_fc_ok(fc_dcp_storage_set(
                    m, st, json_string_value(json_object_get(js, "relative_path")),
                    (uint64_t)json_integer_value(json_object_get(js, "offset")),
                    (uint64_t)json_integer_value(json_object_get(js, "length"))));
                json_t *tr = json_object_get(js, "transforms");
                for (size_t t = 0; t < json_array_size(tr); t++)
                    assert_fc_ok(
                        fc_dcp_storage_add_transform(m, st, json_string_value(json_array_get(tr, t))));
            }
        }
        assert_true(json_array_size(jp) <= 16);
        for (size_t k = 0; k < json_array_size(jp); k++) {
            json_t *x = json_array_get(jp, k);
            path[k].is_index = json_is_integer(x);
            path[k].index = json_is_integer(x) ? json_integer_value(x) : 0;
            path[k].key = json_is_integer(x) ? NULL : json_string_value(x);
        }
        assert_fc_ok(fc_dcp_meta_set_path(m, ei, path, json_array_size(jp)));
    }
    json_t *sm = json_object_get(j, "storage_meta");
    assert_fc_ok(
        fc_dcp_meta_set_storage_meta(m, json_string_value(json_object_get(sm, "checkpoint_id")),
                                     json_string_value(json_object_get(sm, "save_id"))));
    return m;
}

static void test_dcp_builder_and_rewrite_give_the_same_bytes_for_every_fixture(void **state)
{
    (void)state;
    const char *dump = getenv("FC_DCP_REWRITE_DIR");
    for (size_t f = 0; f < NFIXTURES; f++) {
        struct fc_dcp_meta *read = load_fixture(fixture_names[f]), *again = NULL;
        json_t *j = load_expected(fixture_names[f]);
        struct fc_dcp_meta *built = build_from_expected(j);
        struct fc_buf a = FC_BUF_INIT(BUF_CAP), b = FC_BUF_INIT(BUF_CAP);
        const int d = fc_dcp_meta_diff(&a, read, built);
        if (d != 0)
            print_error("%s: %.*s\n", fixture_names[f], (int)a.len, (const char *)a.data);
        assert_int_equal(d, 0);
        fc_buf_clear(&a);
        assert_fc_ok(fc_dcp_meta_write(&a, read));
        assert_fc_ok(fc_dcp_meta_write(&b, built));
        assert_int_equal(a.len, b.len);
        assert_memory_equal(a.data, b.data, a.len);
        assert_fc_ok(fc_dcp_meta_read(&again, a.data, a.len, "rewritten"));
        assert_matches_torch(again, j, 0);
        if (dump != NULL && dump[0] != '\0') {
            char path[1024];
            snprintf(path, sizeof(path), "%s/%s.metadata", dump, fixture_names[f]);
            assert_fc_ok(fc_write_file_atomic(path, a.data, a.len));
        }
        fc_buf_release(&a);
        fc_buf_release(&b);
        fc_dcp_meta_free(again);
        fc_dcp_meta_free(built);
        fc_dcp_meta_free(read);
        json_decref(j);
    }
}

/* A synthetic model exercising batching, big ints, 0-d, empty chunks, long paths. */
static struct fc_dcp_meta *build_synthetic(void)
{
    struct fc_dcp_meta *m = NULL;
    size_t e, c;
    char name[64];
    assert_fc_ok(fc_dcp_meta_new(&m));

    const int64_t big[2] = {3000, 4};
    assert_fc_ok(fc_dcp_meta_add_tensor(m, "layers.0.w", FC_DTYPE_BFLOAT16, 2, big, &e));
    for (int64_t r = 0; r < 1500; r++) { /* 1500 chunks: crosses the 1000-item batch */
        const int64_t off[2] = {r * 2, 0}, sz[2] = {2, 4};
        assert_fc_ok(fc_dcp_meta_add_chunk(m, e, off, sz, &c));
        assert_fc_ok(fc_dcp_storage_set(m, &m->entries[e].chunks[c].storage, "__1_0.distcp",
                                        (uint64_t)r * 3000000000ULL, 1601));
    }
    const struct fc_path_elem p0[] = {{0, 0, "model"}, {0, 0, "layers"}, {1, 0, NULL}, {0, 0, "w"}};
    assert_fc_ok(fc_dcp_meta_set_path(m, e, p0, 4));

    assert_fc_ok(fc_dcp_meta_add_tensor(m, "step", FC_DTYPE_FLOAT32, 0, NULL, &e));
    assert_fc_ok(fc_dcp_meta_add_chunk(m, e, NULL, NULL, &c));
    assert_fc_ok(fc_dcp_storage_set(m, &m->entries[e].chunks[c].storage, "__0_0.distcp",
                                    (uint64_t)INT64_MAX - 10, 10));
    m->entries[e].requires_grad = 1;
    m->entries[e].mem_format = FC_DCP_CHANNELS_LAST;

    const int64_t one[1] = {1};
    assert_fc_ok(fc_dcp_meta_add_tensor(m, "tiny", FC_DTYPE_FLOAT8_E4M3FN, 1, one, &e));
    const int64_t o0[1] = {0}, o1[1] = {1}, s1[1] = {1}, s0[1] = {0};
    assert_fc_ok(fc_dcp_meta_add_chunk(m, e, o0, s1, &c));
    assert_fc_ok(fc_dcp_storage_set(m, &m->entries[e].chunks[c].storage, "__0_0.distcp", 0, 5));
    assert_fc_ok(fc_dcp_storage_add_transform(m, &m->entries[e].chunks[c].storage, "stream.zstd/1"));
    assert_fc_ok(fc_dcp_storage_add_transform(m, &m->entries[e].chunks[c].storage, "x@y/2"));
    assert_fc_ok(fc_dcp_meta_add_chunk(m, e, o1, s0, &c)); /* empty shard at offset = size */
    assert_fc_ok(fc_dcp_storage_set(m, &m->entries[e].chunks[c].storage, "__1_0.distcp", 2147483648ULL,
                                    4294967296ULL));

    for (int i = 0; i < 1200; i++) { /* 1200 bytes entries: batching of every dict */
        snprintf(name, sizeof(name), "optim.param_groups.%d.lr", i);
        assert_fc_ok(fc_dcp_meta_add_bytes(m, name, &e));
        assert_fc_ok(
            fc_dcp_storage_set(m, &m->entries[e].storage, "__0_0.distcp", (uint64_t)i * 1000, 999));
        const struct fc_path_elem p[] = {
            {0, 0, "optim"}, {0, 0, "param_groups"}, {1, i, NULL}, {0, 0, "lr"}};
        if (i % 2 == 0)
            assert_fc_ok(fc_dcp_meta_set_path(m, e, p, 4));
    }
    assert_fc_ok(fc_dcp_meta_set_storage_meta(m, "/ckpt/step-1", "uuid-1"));
    assert_fc_ok(fc_dcp_meta_add_module(m, "model"));
    assert_fc_ok(fc_dcp_meta_add_module(m, "optim"));
    return m;
}

static void test_dcp_writer_round_trips_and_is_deterministic(void **state)
{
    (void)state;
    struct fc_dcp_meta *m = build_synthetic(), *r = NULL, *r2 = NULL;
    struct fc_buf a = FC_BUF_INIT(BUF_CAP), b = FC_BUF_INIT(BUF_CAP), d = FC_BUF_INIT(1 << 16);
    assert_fc_ok(fc_dcp_check(m, NULL, NULL));
    assert_fc_ok(fc_dcp_meta_write(&a, m));
    assert_fc_ok(fc_dcp_meta_write(&b, m));
    assert_int_equal(a.len, b.len);
    assert_memory_equal(a.data, b.data, a.len);
    assert_fc_ok(fc_dcp_meta_read(&r, a.data, a.len, "synthetic"));
    const char *dump = getenv("FC_DCP_REWRITE_DIR");
    if (dump != NULL && dump[0] != '\0') {
        char path[1024];
        snprintf(path, sizeof(path), "%s/synthetic.metadata", dump);
        assert_fc_ok(fc_write_file_atomic(path, a.data, a.len));
    }
    const int rc = fc_dcp_meta_diff(&d, m, r);
    if (rc != 0)
        print_error("%.*s\n", (int)d.len, (const char *)d.data);
    assert_int_equal(rc, 0);
    assert_int_equal(r->entries[1].mem_format, FC_DCP_CHANNELS_LAST);
    assert_int_equal(r->entries[1].requires_grad, 1);
    assert_int_equal(r->entries[1].chunks[0].storage.offset, (uint64_t)INT64_MAX - 10);
    assert_int_equal(r->entries[0].chunks[1499].storage.offset, 1499 * 3000000000ULL);

    /* None forms: planner_data None, no storage_meta, no version */
    m->has_planner_data = 0;
    m->has_storage_meta = 0;
    assert_fc_ok(fc_dcp_meta_set_version(m, NULL));
    fc_buf_clear(&a);
    assert_fc_ok(fc_dcp_meta_write(&a, m));
    assert_fc_ok(fc_dcp_meta_read(&r2, a.data, a.len, "synthetic-none"));
    assert_int_equal(r2->has_planner_data, 0);
    assert_int_equal(r2->planner_data_ignored, 0);
    assert_int_equal(r2->has_storage_meta, 0);
    assert_null(r2->version);
    for (size_t i = 0; i < r2->nentries; i++)
        assert_null(r2->entries[i].path);
    fc_dcp_meta_free(r2);

    fc_buf_release(&a);
    fc_buf_release(&b);
    fc_buf_release(&d);
    fc_dcp_meta_free(r);
    fc_dcp_meta_free(m);
}

/*
 * Walk the writer's opcodes: protocol 2 only, no memo, no FRAME or
 * STACK_GLOBAL, and only the globals a restricted unpickler would allow
 * (dcp-format.md 7): no builtins.getattr, no pathlib.
 */
static int allowed_global(const char *mod, size_t ml, const char *name, size_t nl)
{
    static const char *const md[] = {"Metadata",
                                     "TensorStorageMetadata",
                                     "ChunkStorageMetadata",
                                     "BytesStorageMetadata",
                                     "TensorProperties",
                                     "MetadataIndex",
                                     "StorageMeta",
                                     "_MEM_FORMAT_ENCODING"};
    char m[128], n[128];
    if (ml >= sizeof(m) || nl >= sizeof(n))
        return 0;
    memcpy(m, mod, ml);
    m[ml] = '\0';
    memcpy(n, name, nl);
    n[nl] = '\0';
    if (strcmp(m, "torch.distributed.checkpoint.metadata") == 0) {
        for (size_t i = 0; i < sizeof(md) / sizeof(md[0]); i++)
            if (strcmp(n, md[i]) == 0)
                return 1;
        return 0;
    }
    if (strcmp(m, "torch.distributed.checkpoint.filesystem") == 0)
        return strcmp(n, "_StorageInfo") == 0;
    if (strcmp(m, "torch.serialization") == 0)
        return strcmp(n, "_get_layout") == 0;
    if (strcmp(m, "torch") == 0)
        return strcmp(n, "Size") == 0 || fc_dtype_from_torch_name(n) != FC_DTYPE_INVALID;
    return 0;
}

static void assert_plain_protocol2(const unsigned char *p, size_t len)
{
    size_t i = 2;
    assert_true(len >= 3 && p[0] == 0x80 && p[1] == 2 && p[len - 1] == '.');
    while (i < len - 1) {
        const unsigned char op = p[i++];
        switch (op) {
        case ')':
        case 0x81:
        case '}':
        case '(':
        case 'u':
        case ']':
        case 'e':
        case 't':
        case 0x85:
        case 0x86:
        case 0x87:
        case 'R':
        case 'b':
        case 'N':
        case 0x88:
        case 0x89: break;
        case 'K': i += 1; break;
        case 'M': i += 2; break;
        case 'J': i += 4; break;
        /* Memo opcodes of protocol 2 (the writer memoises repeated names): BINPUT, BINGET,
         * LONG_BINPUT, LONG_BINGET. */
        case 'q':
        case 'h': i += 1; break;
        case 'r':
        case 'j': i += 4; break;
        case 0x8a:
            assert_true(i < len);
            i += 1 + p[i];
            break;
        case 'X': {
            assert_true(i + 4 <= len);
            const uint32_t n = (uint32_t)p[i] | (uint32_t)p[i + 1] << 8 | (uint32_t)p[i + 2] << 16 |
                               (uint32_t)p[i + 3] << 24;
            i += 4 + n;
            break;
        }
        case 'c': {
            const unsigned char *nl1 = memchr(p + i, '\n', len - i);
            assert_non_null(nl1);
            const unsigned char *nl2 = memchr(nl1 + 1, '\n', len - (size_t)(nl1 + 1 - p));
            assert_non_null(nl2);
            if (!allowed_global((const char *)p + i, (size_t)(nl1 - (p + i)), (const char *)nl1 + 1,
                                (size_t)(nl2 - nl1 - 1)))
                print_error("global at %zu not allowed: %.*s\n", i, (int)(nl2 - (p + i)),
                            (const char *)p + i);
            assert_true(allowed_global((const char *)p + i, (size_t)(nl1 - (p + i)),
                                       (const char *)nl1 + 1, (size_t)(nl2 - nl1 - 1)));
            i = (size_t)(nl2 + 1 - p);
            break;
        }
        default: print_error("unexpected opcode 0x%02x at %zu\n", op, i - 1); fail();
        }
    }
    assert_int_equal(i, len - 1);
}

/*
 * fc_dcp_meta_load() reads a .metadata file through a 4 MiB window that the
 * pickle loader moves; one several windows long must give what reading the
 * same bytes whole gives.
 */
static void test_dcp_meta_load_through_the_window_matches_the_whole_read(void **state)
{
    (void)state;
    struct fc_dcp_meta *m = NULL, *whole = NULL, *windowed = NULL;
    struct fc_buf a = FC_BUF_INIT(BUF_CAP), d = FC_BUF_INIT(1 << 16);
    size_t e, c;
    char name[64], path[256];
    assert_fc_ok(fc_dcp_meta_new(&m));
    for (int t = 0; t < 100; t++) {
        const int64_t size[2] = {2000, 8};
        snprintf(name, sizeof(name), "layers.%d.mlp.weight", t);
        assert_fc_ok(fc_dcp_meta_add_tensor(m, name, FC_DTYPE_FLOAT32, 2, size, &e));
        for (int64_t r = 0; r < 1000; r++) {
            const int64_t off[2] = {r * 2, 0}, sz[2] = {2, 8};
            char rel[32];
            snprintf(rel, sizeof(rel), "__%d_0.distcp", (int)r);
            assert_fc_ok(fc_dcp_meta_add_chunk(m, e, off, sz, &c));
            assert_fc_ok(fc_dcp_storage_set(m, &m->entries[e].chunks[c].storage, rel,
                                            (uint64_t)t * 4096, 1024 + (uint64_t)r));
        }
    }
    assert_fc_ok(fc_dcp_meta_write(&a, m));
    assert_true(a.len > 2 * ((size_t)4 << 20));
    char *dir = fc_test_tmpdir();
    assert_non_null(dir);
    snprintf(path, sizeof(path), "%s/.metadata", dir);
    assert_fc_ok(fc_write_file_atomic(path, a.data, a.len));
    assert_fc_ok(fc_dcp_meta_read(&whole, a.data, a.len, "whole"));
    assert_fc_ok(fc_dcp_meta_load(&windowed, path));
    const int rc = fc_dcp_meta_diff(&d, whole, windowed);
    if (rc != 0)
        print_error("%.*s\n", (int)d.len, (const char *)d.data);
    assert_int_equal(rc, 0);
    assert_int_equal(windowed->nentries, 100);
    assert_int_equal(windowed->entries[99].nchunks, 1000);
    assert_int_equal(windowed->entries[99].chunks[999].storage.length, 1024 + 999);
    fc_test_rmdir(dir);
    fc_dcp_meta_free(m);
    fc_dcp_meta_free(whole);
    fc_dcp_meta_free(windowed);
    fc_buf_release(&a);
    fc_buf_release(&d);
}

static void test_dcp_writer_emits_protocol_2_with_allowlisted_globals(void **state)
{
    (void)state;
    struct fc_dcp_meta *m = build_synthetic();
    struct fc_buf a = FC_BUF_INIT(BUF_CAP);
    assert_fc_ok(fc_dcp_meta_write(&a, m));
    assert_plain_protocol2(a.data, a.len);
    fc_buf_release(&a);
    fc_dcp_meta_free(m);
    for (size_t f = 0; f < NFIXTURES; f++) {
        m = load_fixture(fixture_names[f]);
        assert_fc_ok(fc_dcp_meta_write(&a, m));
        assert_plain_protocol2(a.data, a.len);
        fc_buf_release(&a);
        fc_dcp_meta_free(m);
    }
}

static void test_dcp_writer_refuses_items_without_storage(void **state)
{
    (void)state;
    struct fc_dcp_meta *m = NULL;
    struct fc_buf a = FC_BUF_INIT(BUF_CAP);
    size_t e;
    const int64_t size[1] = {4}, off[1] = {0};
    assert_fc_ok(fc_dcp_meta_new(&m));
    assert_fc_ok(fc_dcp_meta_add_tensor(m, "w", FC_DTYPE_FLOAT32, 1, size, &e));
    assert_fc_ok(fc_dcp_meta_add_chunk(m, e, off, size, NULL));
    assert_fc_fails(fc_dcp_meta_write(&a, m), FC_EINVAL, "'w'");
    assert_fc_fails(fc_dcp_check(m, NULL, NULL), FC_ECORRUPT, "no storage");
    fc_buf_release(&a);
    assert_fc_ok(fc_dcp_meta_add_bytes(m, "b", &e));
    assert_fc_ok(fc_dcp_storage_set(m, &m->entries[0].chunks[0].storage, "f", 0, 1));
    assert_fc_fails(fc_dcp_meta_write(&a, m), FC_EINVAL, "'b'");
    fc_buf_release(&a);
    fc_dcp_meta_free(m);
}

static void test_dcp_builder_rejects_invalid_arguments(void **state)
{
    (void)state;
    struct fc_dcp_meta *m = NULL;
    size_t e;
    const int64_t size[FC_MAX_DIMS + 1] = {4}, neg[1] = {-1};
    assert_fc_ok(fc_dcp_meta_new(&m));
    assert_string_equal(m->version, FC_DCP_VERSION);
    assert_fc_ok(fc_dcp_meta_add_tensor(m, "w", FC_DTYPE_FLOAT32, 1, size, &e));
    assert_fc_fails(fc_dcp_meta_add_tensor(m, "w", FC_DTYPE_FLOAT32, 1, size, NULL), FC_EINVAL,
                    "duplicate");
    assert_fc_fails(fc_dcp_meta_add_bytes(m, "w", NULL), FC_EINVAL, "duplicate");
    assert_fc_fails(fc_dcp_meta_add_tensor(m, "x", FC_DTYPE_INVALID, 1, size, NULL), FC_EINVAL,
                    "dtype");
    assert_fc_fails(fc_dcp_meta_add_tensor(m, "x", FC_DTYPE_FLOAT32, FC_MAX_DIMS + 1, size, NULL),
                    FC_EINVAL, "dims");
    assert_fc_fails(fc_dcp_meta_add_tensor(m, "x", FC_DTYPE_FLOAT32, 1, neg, NULL), FC_EINVAL,
                    "negative");
    assert_fc_fails(fc_dcp_meta_add_chunk(m, e, neg, size, NULL), FC_EINVAL, "negative");
    assert_fc_ok(fc_dcp_meta_add_bytes(m, "b", &e));
    assert_fc_fails(fc_dcp_meta_add_chunk(m, e, size, size, NULL), FC_EINVAL, "not a tensor");
    assert_fc_fails(fc_dcp_meta_add_chunk(m, 99, size, size, NULL), FC_EINVAL, "not a tensor");
    struct fc_dcp_storage *st = &m->entries[e].storage;
    assert_fc_fails(fc_dcp_storage_set(m, st, "../x", 0, 1), FC_EINVAL, "file name");
    assert_fc_fails(fc_dcp_storage_set(m, st, "a/b", 0, 1), FC_EINVAL, "file name");
    assert_fc_fails(fc_dcp_storage_set(m, st, "..", 0, 1), FC_EINVAL, "file name");
    assert_fc_fails(fc_dcp_storage_set(m, st, "", 0, 1), FC_EINVAL, "file name");
    assert_fc_fails(fc_dcp_storage_set(m, st, "f", (uint64_t)INT64_MAX + 1, 1), FC_EINVAL, "int64");
    assert_fc_fails(fc_dcp_storage_add_transform(m, st, ""), FC_EINVAL, "empty");
    assert_fc_fails(fc_dcp_meta_set_path(m, e, NULL, 0), FC_EINVAL, "empty");
    const struct fc_path_elem nokey[1] = {{0, 0, NULL}};
    assert_fc_fails(fc_dcp_meta_set_path(m, e, nokey, 1), FC_EINVAL, "no key");
    assert_int_equal(fc_dcp_meta_find(m, "nope"), -1);
    assert_int_equal(fc_dcp_meta_find(m, "b"), 1);
    fc_dcp_meta_free(m);
    fc_dcp_meta_free(NULL);
}

/* ---- coverage check ---- */

static struct fc_dcp_meta *one_tensor(int ndim, const int64_t *size)
{
    struct fc_dcp_meta *m = NULL;
    assert_fc_ok(fc_dcp_meta_new(&m));
    assert_fc_ok(fc_dcp_meta_add_tensor(m, "t", FC_DTYPE_FLOAT32, ndim, size, NULL));
    return m;
}

static void add_box(struct fc_dcp_meta *m, const int64_t *off, const int64_t *size)
{
    size_t c;
    assert_fc_ok(fc_dcp_meta_add_chunk(m, 0, off, size, &c));
    assert_fc_ok(fc_dcp_storage_set(m, &m->entries[0].chunks[c].storage, "__0_0.distcp", 0, 1));
}

static void test_dcp_check_accepts_tilings_with_empty_shards(void **state)
{
    (void)state;
    /* L = 5 over 4 ranks: sizes [2, 2, 1, 0], offsets [0, 2, 4, 5] */
    const int64_t size[2] = {5, 3};
    struct fc_dcp_meta *m = one_tensor(2, size);
    const int64_t offs[4] = {0, 2, 4, 5}, lens[4] = {2, 2, 1, 0};
    for (int r = 3; r >= 0; r--) {
        const int64_t o[2] = {offs[r], 0}, s[2] = {lens[r], 3};
        add_box(m, o, s);
    }
    assert_fc_ok(fc_dcp_check(m, NULL, NULL));
    fc_dcp_meta_free(m);

    /* 2-D grid 3 x 4 of a (6, 8) tensor */
    const int64_t size2[2] = {6, 8};
    m = one_tensor(2, size2);
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 4; j++) {
            const int64_t o[2] = {2 * i, 2 * j}, s[2] = {2, 2};
            add_box(m, o, s);
        }
    assert_fc_ok(fc_dcp_check(m, NULL, NULL));
    fc_dcp_meta_free(m);

    /* 0-d tensor: one chunk; and a zero-element tensor with no chunks */
    m = one_tensor(0, NULL);
    add_box(m, NULL, NULL);
    assert_fc_ok(fc_dcp_check(m, NULL, NULL));
    fc_dcp_meta_free(m);
    const int64_t zero[1] = {0};
    m = one_tensor(1, zero);
    assert_fc_ok(fc_dcp_check(m, NULL, NULL));
    fc_dcp_meta_free(m);
}

static void test_dcp_check_takes_identical_boxes_for_replicas(void **state)
{
    (void)state;
    /* Rank-local metadata lists a replicated item once per rank: same box, other storage. */
    struct fc_dcp_meta *m = one_tensor(0, NULL);
    add_box(m, NULL, NULL);
    add_box(m, NULL, NULL);
    add_box(m, NULL, NULL);
    assert_fc_ok(fc_dcp_check(m, NULL, NULL));
    fc_dcp_meta_free(m);

    const int64_t size[2] = {5, 2}, o0[2] = {0, 0}, s0[2] = {3, 2}, o1[2] = {3, 0}, s1[2] = {2, 2};
    m = one_tensor(2, size);
    add_box(m, o0, s0);
    add_box(m, o1, s1);
    add_box(m, o1, s1);
    add_box(m, o0, s0);
    assert_fc_ok(fc_dcp_check(m, NULL, NULL));
    fc_dcp_meta_free(m);

    /* replicas do not hide a gap */
    m = one_tensor(2, size);
    add_box(m, o0, s0);
    add_box(m, o0, s0);
    assert_fc_fails(fc_dcp_check(m, NULL, NULL), FC_ECORRUPT,
                    "chunks of 't' leave [3:5, 0:2] uncovered");
    fc_dcp_meta_free(m);

    struct fc_box b[4] = {{o0, s0}, {o1, s1}, {o0, s0}, {o0, s1}};
    size_t first_of[4], nrep;
    assert_fc_ok(fc_chunks_replicas(2, b, 4, first_of, &nrep));
    assert_int_equal(nrep, 1);
    assert_int_equal(first_of[0], 0);
    assert_int_equal(first_of[1], 1);
    assert_int_equal(first_of[2], 0);
    assert_int_equal(first_of[3], 3); /* same offsets, other sizes: not a replica */
}

static void test_dcp_check_reports_overlaps_gaps_and_bounds(void **state)
{
    (void)state;
    const int64_t size[2] = {4, 4};
    struct fc_buf rep = FC_BUF_INIT(1 << 20);
    struct fc_dcp_meta *m = one_tensor(2, size);
    const int64_t o0[2] = {0, 0}, s0[2] = {3, 4}, o1[2] = {2, 0}, s1[2] = {2, 4};
    add_box(m, o0, s0);
    add_box(m, o1, s1); /* rows 2 overlap */
    assert_fc_fails(fc_dcp_check(m, &rep, NULL), FC_ECORRUPT,
                    "1 coverage problem; first: chunks of 't' overlap at [2:3, 0:4] (chunks "
                    "[0:3, 0:4] and [2:4, 0:4])");
    fc_dcp_meta_free(m);

    fc_buf_clear(&rep);
    m = one_tensor(2, size);
    const int64_t s2[2] = {2, 4};
    add_box(m, o0, s2); /* rows 2..3 missing */
    assert_fc_fails(fc_dcp_check(m, &rep, NULL), FC_ECORRUPT,
                    "chunks of 't' leave [2:4, 0:4] uncovered");
    fc_dcp_meta_free(m);

    /* the counts add up (4 + 4 + 8): a column twice, another never */
    fc_buf_clear(&rep);
    m = one_tensor(2, size);
    const int64_t a0[2] = {0, 0}, a1[2] = {0, 1}, a2[2] = {2, 0}, q[2] = {2, 2}, h[2] = {2, 4};
    add_box(m, a0, q);
    add_box(m, a1, q);
    add_box(m, a2, h);
    assert_fc_fails(fc_dcp_check(m, &rep, NULL), FC_ECORRUPT,
                    "chunks of 't' overlap at [0:2, 1:2] (chunks [0:2, 0:2] and [0:2, 1:3]) and "
                    "leave [0:2, 3:4] uncovered");
    fc_dcp_meta_free(m);

    fc_buf_clear(&rep);
    m = one_tensor(2, size);
    const int64_t o3[2] = {3, 0};
    add_box(m, o0, s0);
    add_box(m, o3, s2); /* 3 + 2 > 4 */
    assert_fc_fails(fc_dcp_check(m, &rep, NULL), FC_ECORRUPT,
                    "chunks of 't': [3:5, 0:4] lies outside the shape [4, 4]");
    assert_fc_ok(fc_buf_putc(&rep, '\0'));
    assert_string_equal((const char *)rep.data,
                        "chunks of 't': [3:5, 0:4] lies outside the shape [4, 4]\n");
    fc_dcp_meta_free(m);

    /* a chunk with the offsets of another but a smaller box: an overlap */
    fc_buf_clear(&rep);
    m = one_tensor(2, size);
    const int64_t full[2] = {4, 4};
    add_box(m, o0, full);
    add_box(m, o0, s2);
    assert_fc_fails(fc_dcp_check(m, &rep, NULL), FC_ECORRUPT,
                    "chunks of 't' overlap at [0:2, 0:4] (chunks [0:4, 0:4] and [0:2, 0:4])");
    fc_dcp_meta_free(m);

    /* one line per bad tensor, the count covers all, the report stops at 100 lines */
    fc_buf_clear(&rep);
    const int64_t wide[1] = {10};
    assert_fc_ok(fc_dcp_meta_new(&m));
    for (int t = 0; t < 120; t++) {
        char name[16];
        size_t e, c;
        snprintf(name, sizeof(name), "t%d", t);
        assert_fc_ok(fc_dcp_meta_add_tensor(m, name, FC_DTYPE_FLOAT32, 1, wide, &e));
        for (int i = 0; i < 9; i++) {
            const int64_t o[1] = {i < 8 ? i : 7}, s[1] = {i < 8 ? 1 : 2}; /* 7 twice, 9 never */
            assert_fc_ok(fc_dcp_meta_add_chunk(m, e, o, s, &c));
            assert_fc_ok(fc_dcp_storage_set(m, &m->entries[e].chunks[c].storage, "f", 0, 1));
        }
    }
    assert_fc_fails(fc_dcp_check(m, &rep, NULL), FC_ECORRUPT, "120 coverage problems");
    assert_non_null(strstr((const char *)rep.data,
                           "chunks of 't99' overlap at [7:8] (chunks [7:8] and "
                           "[7:9]) and leave [9:10] uncovered\n"));
    assert_non_null(strstr((const char *)rep.data, "\n... and 20 more lines\n"));
    fc_dcp_meta_free(m);
    fc_buf_release(&rep);
}

/* ---- hostile inputs ---- */

struct hopts {
    const char *root_module; /* default metadata module */
    const char *dtype;       /* "float32" */
    const char *layout;      /* "torch.strided" */
    int64_t memfmt;          /* 0 */
    int memfmt_name;         /* builtins.getattr form with this member name index + 1 */
    int chunk1_ndim;         /* 2 */
    int64_t size0;           /* 4 */
    int size_ndim;           /* 2 */
    const char *relpath;     /* "__0_0.distcp" */
    int drop_storage;        /* no storage item for chunk 1 */
    int dup_storage;         /* two storage items for chunk 0 */
    int bad_index_hint;      /* index hints point at the wrong chunk */
    int extra;               /* unknown fields with calls of os.system inside */
    int big_offset;          /* a 9-byte LONG1 storage offset */
    int neg_size;            /* chunk 0 size -1 */
    int planner_list;        /* planner_data['w'] is a list */
    int storage_list;        /* storage_data is a list */
    int props_tuple_len;     /* 5 */
    int orphan;              /* an extra storage item naming no entry */
    int dup_chunk;           /* chunk 1 has chunk 0's offsets */
};

static const struct hopts HDEFAULT = {"torch.distributed.checkpoint.metadata",
                                      "float32",
                                      "torch.strided",
                                      0,
                                      0,
                                      2,
                                      4,
                                      2,
                                      "__0_0.distcp",
                                      0,
                                      0,
                                      0,
                                      0,
                                      0,
                                      0,
                                      0,
                                      0,
                                      5,
                                      0,
                                      0};

#define MD "torch.distributed.checkpoint.metadata"

static void h_str(struct fc_buf *b, const char *s)
{
    assert_fc_ok(fc_pw_str(b, s, strlen(s)));
}

static void h_new(struct fc_buf *b, const char *mod, const char *name)
{
    assert_fc_ok(fc_pw_global(b, mod, name));
    assert_fc_ok(fc_pw_empty_tuple(b));
    assert_fc_ok(fc_pw_newobj(b));
}

static void h_size(struct fc_buf *b, int n, int64_t first, int64_t rest)
{
    assert_fc_ok(fc_pw_global(b, "torch", "Size"));
    assert_fc_ok(fc_pw_mark(b));
    for (int i = 0; i < n; i++)
        assert_fc_ok(fc_pw_int(b, i == 0 ? first : rest));
    assert_fc_ok(fc_pw_tuple(b));
    assert_fc_ok(fc_pw_tuple_n(b, 1));
    assert_fc_ok(fc_pw_reduce(b));
}

static void h_evil_call(struct fc_buf *b)
{
    assert_fc_ok(fc_pw_global(b, "os", "system"));
    h_str(b, "touch /tmp/fc_dcp_pwned");
    assert_fc_ok(fc_pw_tuple_n(b, 1));
    assert_fc_ok(fc_pw_reduce(b));
}

static void h_chunk(struct fc_buf *b, int ndim, int64_t off0, int64_t size0)
{
    h_new(b, MD, "ChunkStorageMetadata");
    assert_fc_ok(fc_pw_empty_dict(b));
    assert_fc_ok(fc_pw_mark(b));
    h_str(b, "offsets");
    h_size(b, ndim, off0, 0);
    h_str(b, "sizes");
    h_size(b, ndim, size0, 4);
    assert_fc_ok(fc_pw_setitems(b));
    assert_fc_ok(fc_pw_build(b));
}

static void h_key(struct fc_buf *b, const char *fqn, int64_t index, int ndim, int64_t off0)
{
    h_new(b, MD, "MetadataIndex");
    assert_fc_ok(fc_pw_empty_dict(b));
    assert_fc_ok(fc_pw_mark(b));
    h_str(b, "fqn");
    h_str(b, fqn);
    h_str(b, "index");
    if (index < 0) {
        assert_fc_ok(fc_pw_none(b));
    } else {
        assert_fc_ok(fc_pw_int(b, index));
        h_str(b, "offset");
        h_size(b, ndim, off0, 0);
    }
    assert_fc_ok(fc_pw_setitems(b));
    assert_fc_ok(fc_pw_build(b));
}

static void h_info(struct fc_buf *b, const struct hopts *o, int64_t off, int extra)
{
    h_new(b, "torch.distributed.checkpoint.filesystem", "_StorageInfo");
    assert_fc_ok(fc_pw_empty_dict(b));
    assert_fc_ok(fc_pw_mark(b));
    h_str(b, "relative_path");
    h_str(b, o->relpath);
    h_str(b, "offset");
    if (o->big_offset) {
        const unsigned char le[9] = {0, 0, 0, 0, 0, 0, 0, 0, 1};
        assert_fc_ok(fc_buf_putc(b, 0x8a));
        assert_fc_ok(fc_buf_putc(b, 9));
        assert_fc_ok(fc_buf_append(b, le, 9));
    } else {
        assert_fc_ok(fc_pw_int(b, off));
    }
    h_str(b, "length");
    assert_fc_ok(fc_pw_int(b, 100));
    if (extra) {
        h_str(b, "future_field");
        h_evil_call(b);
        h_str(b, "transform_descriptors");
        assert_fc_ok(fc_pw_none(b));
    }
    assert_fc_ok(fc_pw_setitems(b));
    assert_fc_ok(fc_pw_build(b));
}

/* Metadata{w: (size0, 4) float32 in two row chunks, b: bytes} with o's mutations. */
static void h_build(struct fc_buf *b, const struct hopts *o)
{
    static const char *const members[] = {"TORCH_CONTIGUOUS_FORMAT", "TORCH_CHANNELS_LAST",
                                          "TORCH_PRESERVE_FORMAT", "TORCH_BOGUS"};
    const int64_t half = o->size0 / 2;
    assert_fc_ok(fc_pw_proto(b));
    h_new(b, o->root_module, "Metadata");
    assert_fc_ok(fc_pw_empty_dict(b));
    assert_fc_ok(fc_pw_mark(b));
    h_str(b, "state_dict_metadata");
    assert_fc_ok(fc_pw_empty_dict(b));
    assert_fc_ok(fc_pw_mark(b));
    h_str(b, "w");
    h_new(b, MD, "TensorStorageMetadata");
    assert_fc_ok(fc_pw_empty_dict(b));
    assert_fc_ok(fc_pw_mark(b));
    h_str(b, "properties");
    h_new(b, MD, "TensorProperties");
    assert_fc_ok(fc_pw_mark(b));
    assert_fc_ok(fc_pw_global(b, "torch", o->dtype));
    assert_fc_ok(fc_pw_global(b, "torch.serialization", "_get_layout"));
    h_str(b, o->layout);
    assert_fc_ok(fc_pw_tuple_n(b, 1));
    assert_fc_ok(fc_pw_reduce(b));
    assert_fc_ok(fc_pw_bool(b, 0));
    if (o->memfmt_name) {
        assert_fc_ok(fc_pw_global(b, "builtins", "getattr"));
        assert_fc_ok(fc_pw_global(b, MD, "_MEM_FORMAT_ENCODING"));
        h_str(b, members[o->memfmt_name - 1]);
        assert_fc_ok(fc_pw_tuple_n(b, 2));
        assert_fc_ok(fc_pw_reduce(b));
    } else {
        assert_fc_ok(fc_pw_global(b, MD, "_MEM_FORMAT_ENCODING"));
        assert_fc_ok(fc_pw_int(b, o->memfmt));
        assert_fc_ok(fc_pw_tuple_n(b, 1));
        assert_fc_ok(fc_pw_reduce(b));
    }
    for (int i = 4; i < o->props_tuple_len; i++)
        assert_fc_ok(fc_pw_bool(b, 0));
    assert_fc_ok(fc_pw_tuple(b));
    assert_fc_ok(fc_pw_build(b));
    h_str(b, "size");
    h_size(b, o->size_ndim, o->size0, 4);
    h_str(b, "chunks");
    assert_fc_ok(fc_pw_empty_list(b));
    assert_fc_ok(fc_pw_mark(b));
    h_chunk(b, 2, 0, o->neg_size ? -1 : half);
    h_chunk(b, o->chunk1_ndim, o->dup_chunk ? 0 : half, o->size0 - half);
    assert_fc_ok(fc_pw_appends(b));
    if (o->extra) {
        h_str(b, "megatron_extra");
        h_evil_call(b);
    }
    assert_fc_ok(fc_pw_setitems(b));
    assert_fc_ok(fc_pw_build(b));
    h_str(b, "b");
    h_new(b, MD, "BytesStorageMetadata");
    assert_fc_ok(fc_pw_setitems(b));

    h_str(b, "planner_data");
    assert_fc_ok(fc_pw_empty_dict(b));
    assert_fc_ok(fc_pw_mark(b));
    h_str(b, "w");
    if (o->planner_list) {
        assert_fc_ok(fc_pw_empty_list(b));
    } else {
        h_str(b, "w");
        assert_fc_ok(fc_pw_tuple_n(b, 1));
    }
    h_str(b, "b");
    h_str(b, "b");
    assert_fc_ok(fc_pw_tuple_n(b, 1));
    assert_fc_ok(fc_pw_setitems(b));

    h_str(b, "storage_data");
    if (o->storage_list) {
        assert_fc_ok(fc_pw_empty_list(b));
    } else {
        assert_fc_ok(fc_pw_empty_dict(b));
        assert_fc_ok(fc_pw_mark(b));
        h_key(b, "w", o->bad_index_hint ? 1 : 0, 2, 0);
        h_info(b, o, 0, o->extra);
        if (!o->drop_storage) {
            h_key(b, "w", o->bad_index_hint ? 0 : 1, o->chunk1_ndim, half);
            h_info(b, o, 100, 0);
        }
        if (o->dup_storage) {
            h_key(b, "w", 5, 2, 0);
            h_info(b, o, 300, 0);
        }
        if (o->orphan) {
            h_key(b, "ghost", 0, 2, 0);
            h_info(b, o, 400, 0);
        }
        h_key(b, "b", -1, 0, 0);
        h_info(b, o, 200, 0);
        assert_fc_ok(fc_pw_setitems(b));
    }
    h_str(b, "storage_meta");
    assert_fc_ok(fc_pw_none(b));
    h_str(b, "version");
    h_str(b, "1.0.0");
    if (o->extra) {
        h_str(b, "mcore_data");
        h_evil_call(b);
    }
    assert_fc_ok(fc_pw_setitems(b));
    assert_fc_ok(fc_pw_build(b));
    assert_fc_ok(fc_pw_stop(b));
}

static int h_read(const struct hopts *o, struct fc_dcp_meta **out)
{
    struct fc_buf b = FC_BUF_INIT(1 << 20);
    h_build(&b, o);
    const int rc = fc_dcp_meta_read(out, b.data, b.len, "hostile.metadata");
    fc_buf_release(&b);
    return rc;
}

#define H_FAILS(field, value, code, needle)                                                        \
    do {                                                                                           \
        struct hopts o_ = HDEFAULT;                                                                \
        struct fc_dcp_meta *m_ = NULL;                                                             \
        o_.field = value;                                                                          \
        assert_fc_fails(h_read(&o_, &m_), code, needle);                                           \
        assert_null(m_);                                                                           \
    } while (0)

static void test_dcp_hand_built_metadata_reads_and_unknown_fields_are_skipped(void **state)
{
    (void)state;
    struct hopts o = HDEFAULT;
    struct fc_dcp_meta *m = NULL;
    assert_fc_ok(h_read(&o, &m));
    assert_int_equal(m->nentries, 2);
    assert_int_equal(m->entries[0].chunks[1].storage.offset, 100);
    assert_int_equal(m->entries[1].storage.offset, 200);
    assert_fc_ok(fc_dcp_check(m, NULL, NULL));
    fc_dcp_meta_free(m);

    o.extra = 1; /* Megatron-style extra keys, a future _StorageInfo field, None transforms */
    assert_fc_ok(h_read(&o, &m));
    assert_int_equal(m->entries[0].chunks[0].storage.ntransforms, 0);
    fc_dcp_meta_free(m);
    assert_int_equal(access("/tmp/fc_dcp_pwned", F_OK), -1);

    o = HDEFAULT;
    o.memfmt_name = 2; /* builtins.getattr(_MEM_FORMAT_ENCODING, 'TORCH_CHANNELS_LAST') */
    assert_fc_ok(h_read(&o, &m));
    assert_int_equal(m->entries[0].mem_format, FC_DCP_CHANNELS_LAST);
    fc_dcp_meta_free(m);

    o = HDEFAULT;
    o.bad_index_hint = 1; /* chunks are found by (fqn, offsets), not by the index hint */
    assert_fc_ok(h_read(&o, &m));
    assert_int_equal(m->entries[0].chunks[0].storage.offset, 0);
    assert_int_equal(m->entries[0].chunks[1].storage.offset, 100);
    fc_dcp_meta_free(m);

    o = HDEFAULT;
    o.planner_list = 1; /* a custom planner's data: not interpreted */
    assert_fc_ok(h_read(&o, &m));
    assert_int_equal(m->has_planner_data, 0);
    assert_int_equal(m->planner_data_ignored, 1);
    fc_dcp_meta_free(m);

    o = HDEFAULT;
    o.orphan = 1; /* torch never looks it up either */
    assert_fc_ok(h_read(&o, &m));
    assert_int_equal(m->orphan_storage, 1);
    fc_dcp_meta_free(m);

    o = HDEFAULT;
    o.props_tuple_len = 6; /* 6-tuple with strides=False: not a tuple */
    assert_fc_fails(h_read(&o, &m), FC_ECORRUPT, "strides");
}

static void test_dcp_reader_rejects_structurally_wrong_metadata(void **state)
{
    (void)state;
    H_FAILS(root_module, "collections", FC_EFORMAT, "expected torch.distributed");
    H_FAILS(dtype, "qint8", FC_EFORMAT, "unsupported dtype torch.qint8");
    H_FAILS(layout, "torch.sparse_coo", FC_EFORMAT, "layout");
    H_FAILS(memfmt, 7, FC_ECORRUPT, "memory format");
    H_FAILS(memfmt_name, 4, FC_ECORRUPT, "memory format");
    H_FAILS(chunk1_ndim, 1, FC_ECORRUPT, "the tensor has 2");
    H_FAILS(size0, -4, FC_ECORRUPT, "negative");
    H_FAILS(neg_size, 1, FC_ECORRUPT, "negative");
    H_FAILS(size_ndim, FC_MAX_DIMS + 1, FC_EFORMAT, "dims");
    H_FAILS(relpath, "../../etc/passwd", FC_ECORRUPT, "not a file name");
    H_FAILS(relpath, "", FC_ECORRUPT, "not a file name");
    H_FAILS(drop_storage, 1, FC_ECORRUPT, "chunk 1 (offsets [2, 0]) has no storage_data");
    H_FAILS(dup_storage, 1, FC_ECORRUPT, "duplicate storage_data key");
    H_FAILS(big_offset, 1, FC_ECORRUPT, "int64");
    H_FAILS(storage_list, 1, FC_EFORMAT, "storage_data");
    H_FAILS(props_tuple_len, 4, FC_ECORRUPT, "5- or 6-tuple");
    H_FAILS(dup_chunk, 1, FC_ECORRUPT, "same offsets");
}

static void test_dcp_reader_rejects_non_pickles_and_other_objects(void **state)
{
    (void)state;
    struct fc_dcp_meta *m = NULL;
    static const unsigned char none_pickle[] = {0x80, 2, 'N', '.'};
    static const unsigned char junk[] = "PK\x03\x04not a pickle";
    assert_fc_fails(fc_dcp_meta_read(&m, none_pickle, sizeof(none_pickle), "x/.metadata"),
                    FC_EFORMAT, "x/.metadata");
    assert_null(m);
    assert_true(fc_dcp_meta_read(&m, junk, sizeof(junk) - 1, "junk") < 0);
    assert_null(m);
    assert_true(fc_dcp_meta_read(&m, junk, 0, "empty") < 0);
    assert_null(m);
    assert_fc_fails(fc_dcp_meta_load(&m, "/nonexistent/.metadata"), FC_ENOENT, "nonexistent");
    assert_null(m);
}

static void test_dcp_reader_fails_cleanly_on_every_truncation(void **state)
{
    (void)state;
    size_t len;
    char rel[256];
    snprintf(rel, sizeof(rel), "dcp/model_ws2/.metadata");
    unsigned char *data = slurp(fc_test_fixture(rel), &len);
    for (size_t n = 0; n < len; n++) {
        unsigned char *copy = malloc(n + 1); /* exact size: ASan sees any over-read */
        assert_non_null(copy);
        memcpy(copy, data, n);
        struct fc_dcp_meta *m = NULL;
        const int rc = fc_dcp_meta_read(&m, copy, n, "truncated");
        if (rc != FC_ECORRUPT && rc != FC_EFORMAT)
            print_error("length %zu: %s %s\n", n, fc_err_name(rc), fc_error_last());
        assert_true(rc == FC_ECORRUPT || rc == FC_EFORMAT);
        assert_null(m);
        free(copy);
    }
    free(data);

    /* and our own output, protocol 2 with memoised names */
    struct fc_dcp_meta *m = load_fixture("zstd_ws1");
    struct fc_buf b = FC_BUF_INIT(BUF_CAP);
    assert_fc_ok(fc_dcp_meta_write(&b, m));
    fc_dcp_meta_free(m);
    for (size_t n = 0; n < b.len; n++) {
        m = NULL;
        const int rc = fc_dcp_meta_read(&m, b.data, n, "truncated");
        assert_true(rc == FC_ECORRUPT || rc == FC_EFORMAT);
        assert_null(m);
    }
    fc_buf_release(&b);
}

/* Every allocation of read, write and check may fail: FC_ENOMEM, no leak (ASan). */
static void test_dcp_survives_every_allocation_failure(void **state)
{
    (void)state;
    size_t len;
    unsigned char *data = slurp(fc_test_fixture("dcp/zstd_ws1/.metadata"), &len);
    unsigned long n;
    for (n = 1;; n++) {
        struct fc_dcp_meta *m = NULL;
        fc_alloc_fail_at(n);
        const int rc = fc_dcp_meta_read(&m, data, len, "alloc");
        const int fired = fc_alloc_failed();
        fc_alloc_fail_at(0);
        if (!fired) {
            assert_fc_ok(rc);
            fc_dcp_meta_free(m);
            break;
        }
        if (rc != FC_ENOMEM)
            print_error("allocation %lu: %s %s\n", n, fc_err_name(rc), fc_error_last());
        assert_int_equal(rc, FC_ENOMEM);
        assert_null(m);
    }
    assert_true(n > 10);

    struct fc_dcp_meta *m = NULL;
    assert_fc_ok(fc_dcp_meta_read(&m, data, len, "alloc"));
    for (n = 1;; n++) {
        struct fc_buf b = FC_BUF_INIT(BUF_CAP), rep = FC_BUF_INIT(1 << 20);
        fc_alloc_fail_at(n);
        const int rc1 = fc_dcp_meta_write(&b, m);
        const int rc2 = fc_dcp_check(m, &rep, NULL);
        const int fired = fc_alloc_failed();
        fc_alloc_fail_at(0);
        fc_buf_release(&b);
        fc_buf_release(&rep);
        if (!fired) {
            assert_fc_ok(rc1);
            assert_fc_ok(rc2);
            break;
        }
        assert_true(rc1 == FC_ENOMEM || rc2 == FC_ENOMEM);
    }
    fc_dcp_meta_free(m);

    for (n = 1;; n++) {
        fc_alloc_fail_at(n);
        struct fc_dcp_meta *s = NULL;
        size_t e, c;
        const int64_t size[2] = {4, 4}, off[2] = {0, 0};
        const struct fc_path_elem p[2] = {{0, 0, "a"}, {1, 3, NULL}};
        int rc = fc_dcp_meta_new(&s);
        if (rc == 0)
            rc = fc_dcp_meta_add_tensor(s, "w", FC_DTYPE_FLOAT32, 2, size, &e);
        if (rc == 0)
            rc = fc_dcp_meta_add_chunk(s, e, off, size, &c);
        if (rc == 0)
            rc = fc_dcp_storage_set(s, &s->entries[e].chunks[c].storage, "f", 0, 1);
        if (rc == 0)
            rc = fc_dcp_storage_add_transform(s, &s->entries[e].chunks[c].storage, "stream.zstd/1");
        if (rc == 0)
            rc = fc_dcp_meta_set_path(s, e, p, 2);
        if (rc == 0)
            rc = fc_dcp_meta_set_storage_meta(s, "id", "save");
        if (rc == 0)
            rc = fc_dcp_meta_add_module(s, "model");
        if (rc == 0)
            rc = fc_dcp_meta_set_version(s, "1.0.0");
        const int fired = fc_alloc_failed();
        fc_alloc_fail_at(0);
        fc_dcp_meta_free(s);
        if (!fired) {
            assert_fc_ok(rc);
            break;
        }
        assert_int_equal(rc, FC_ENOMEM);
    }
    free(data);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dcp_reads_every_fixture_as_torch_sees_it),
        cmocka_unit_test(test_dcp_fixture_has_uneven_and_empty_shards_and_optimizer_layout),
        cmocka_unit_test(test_dcp_reads_every_pickle_variant_to_the_same_model),
        cmocka_unit_test(test_dcp_builder_and_rewrite_give_the_same_bytes_for_every_fixture),
        cmocka_unit_test(test_dcp_writer_round_trips_and_is_deterministic),
        cmocka_unit_test(test_dcp_meta_load_through_the_window_matches_the_whole_read),
        cmocka_unit_test(test_dcp_writer_emits_protocol_2_with_allowlisted_globals),
        cmocka_unit_test(test_dcp_writer_refuses_items_without_storage),
        cmocka_unit_test(test_dcp_builder_rejects_invalid_arguments),
        cmocka_unit_test(test_dcp_check_accepts_tilings_with_empty_shards),
        cmocka_unit_test(test_dcp_check_takes_identical_boxes_for_replicas),
        cmocka_unit_test(test_dcp_check_reports_overlaps_gaps_and_bounds),
        cmocka_unit_test(test_dcp_hand_built_metadata_reads_and_unknown_fields_are_skipped),
        cmocka_unit_test(test_dcp_reader_rejects_structurally_wrong_metadata),
        cmocka_unit_test(test_dcp_reader_rejects_non_pickles_and_other_objects),
        cmocka_unit_test(test_dcp_reader_fails_cleanly_on_every_truncation),
        cmocka_unit_test(test_dcp_survives_every_allocation_failure),
    };
    return cmocka_run_group_tests_name("dcp", tests, NULL, NULL);
}
