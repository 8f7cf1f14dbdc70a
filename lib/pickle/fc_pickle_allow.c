/*
 * fc_pickle_allow.c - which globals a pickle may name: the renames of old
 * module names, the weights-only allowlist (and what the symbolic profile
 * recognises), and the stdlib value constructors it interprets.
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

/* ---- names ---- */

/* torch._utils IMPORT_MAPPING / NAME_MAPPING (Python 2 spellings). */
void fc_rename_global(const char **module, const char **name)
{
    static const char *const names[][4] = {
        {"__builtin__", "xrange", "builtins", "range"},
        {"__builtin__", "reduce", "functools", "reduce"},
        {"__builtin__", "intern", "sys", "intern"},
        {"__builtin__", "unichr", "builtins", "chr"},
        {"__builtin__", "unicode", "builtins", "str"},
        {"__builtin__", "long", "builtins", "int"},
        {"itertools", "izip", "builtins", "zip"},
        {"itertools", "imap", "builtins", "map"},
        {"itertools", "ifilter", "builtins", "filter"},
        {"itertools", "ifilterfalse", "itertools", "filterfalse"},
        {"itertools", "izip_longest", "itertools", "zip_longest"},
        {"UserDict", "IterableUserDict", "collections", "UserDict"},
        {"UserList", "UserList", "collections", "UserList"},
        {"UserString", "UserString", "collections", "UserString"},
        {"__builtin__", "basestring", "builtins", "str"},
        {"exceptions", "StandardError", "builtins", "Exception"},
        {"UserDict", "UserDict", "collections", "UserDict"},
    };
    static const char *const modules[][2] = {
        {"__builtin__", "builtins"},
        {"copy_reg", "copyreg"},
        {"Queue", "queue"},
        {"repr", "reprlib"},
        {"_abcoll", "collections.abc"},
        {"UserDict", "collections"},
        {"UserList", "collections"},
        {"UserString", "collections"},
        {"whichdb", "dbm"},
        {"StringIO", "io"},
        {"cStringIO", "io"},
    };
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        if (strcmp(*module, names[i][0]) == 0 && strcmp(*name, names[i][1]) == 0) {
            *module = names[i][2];
            *name = names[i][3];
            return;
        }
    }
    for (size_t i = 0; i < sizeof(modules) / sizeof(modules[0]); i++) {
        if (strcmp(*module, modules[i][0]) == 0) {
            *module = modules[i][1];
            return;
        }
    }
}

static const struct fc_sym_entry fc_sym_table[] = {
    {"collections.OrderedDict", SYM_ORDEREDDICT, NULL},
    {"collections.Counter", SYM_COUNTER, NULL},
    {"torch.nn.parameter.Parameter", SYM_PARAMETER_TYPE, NULL},
    {"torch.serialization._get_layout", SYM_ALLOWED, NULL},
    {"torch.Size", SYM_SIZE, NULL},
    {"torch.Tensor", SYM_TENSOR_TYPE, NULL},
    {"torch.device", SYM_DEVICE, NULL},
    {"_codecs.encode", SYM_CODECS_ENCODE, NULL},
    {"builtins.bytearray", SYM_BYTEARRAY, NULL},
    {"builtins.set", SYM_SET, NULL},
    {"builtins.complex", SYM_ALLOWED, NULL},
    {"torch.storage.TypedStorage", SYM_STORAGE_UNTYPED, NULL},
    {"torch.storage.UntypedStorage", SYM_STORAGE_UNTYPED, NULL},
    {"torch.per_tensor_affine", SYM_ALLOWED, NULL},
    {"torch.per_tensor_symmetric", SYM_ALLOWED, NULL},
    {"torch.per_channel_affine", SYM_ALLOWED, NULL},
    {"torch.per_channel_symmetric", SYM_ALLOWED, NULL},
    {"torch.per_channel_affine_float_qparams", SYM_ALLOWED, NULL},
    {"torch._utils._rebuild_tensor", SYM_REBUILD_TENSOR, NULL},
    {"torch._utils._rebuild_tensor_v2", SYM_REBUILD_V2, NULL},
    {"torch._utils._rebuild_tensor_v3", SYM_REBUILD_V3, NULL},
    {"torch._utils._rebuild_parameter", SYM_REBUILD_PARAM, NULL},
    {"torch._utils._rebuild_parameter_with_state", SYM_REBUILD_PARAM_STATE, NULL},
    {"torch._tensor._rebuild_from_type_v2", SYM_REBUILD_FROM_TYPE_V2, NULL},
    {"torch._utils._rebuild_device_tensor_from_cpu_tensor", SYM_REBUILD_DEVICE_FROM_CPU, NULL},
    {"torch._utils._rebuild_qtensor", SYM_UNCONVERTIBLE, "a quantized tensor"},
    {"torch._utils._rebuild_sparse_tensor", SYM_UNCONVERTIBLE, "a sparse tensor"},
    {"torch._utils._rebuild_sparse_csr_tensor", SYM_UNCONVERTIBLE, "a sparse CSR tensor"},
    {"torch._utils._rebuild_nested_tensor", SYM_UNCONVERTIBLE, "a nested tensor"},
    {"torch._utils._rebuild_wrapper_subclass", SYM_UNCONVERTIBLE,
     "a tensor subclass without data (wrapper subclass)"},
    {"torch._utils._rebuild_meta_tensor_no_storage", SYM_UNCONVERTIBLE,
     "a meta tensor (it has no data)"},
    {"torch._utils._rebuild_device_tensor_from_numpy", SYM_UNCONVERTIBLE,
     "a device tensor saved through numpy"},
    /* What torch_checkpointing's rank files pickle with a DTensor (torch 2.11 - 2.15). */
    {"torch.distributed.tensor.DTensor", SYM_DTENSOR_TYPE, NULL},
    {"torch.distributed.tensor._api.DTensor", SYM_DTENSOR_TYPE, NULL},
    {"torch.distributed.tensor._dtensor_spec.DTensorSpec", SYM_DTENSOR_PART, NULL},
    {"torch.distributed.tensor._dtensor_spec.TensorMeta", SYM_DTENSOR_PART, NULL},
    {"torch.distributed.tensor._dtensor_spec.ShardOrderEntry", SYM_DTENSOR_PART, NULL},
    {"torch.distributed.device_mesh.DeviceMesh", SYM_DTENSOR_PART, NULL},
    {"torch.distributed._mesh_layout._MeshLayout", SYM_DTENSOR_PART, NULL},
    {"torch.distributed._mesh_layout._FlatLayout", SYM_DTENSOR_PART, NULL},
    {"torch.distributed.tensor.placement_types.Shard", SYM_DTENSOR_PART, NULL},
    {"torch.distributed.tensor.placement_types._StridedShard", SYM_DTENSOR_PART, NULL},
    {"torch.distributed.tensor.placement_types.Replicate", SYM_DTENSOR_PART, NULL},
};

static const char *const fc_torch_dtypes[] = {
    "bcomplex32",
    "bfloat16",
    "bits16",
    "bits1x8",
    "bits2x4",
    "bits4x2",
    "bits8",
    "bool",
    "complex128",
    "complex32",
    "complex64",
    "float16",
    "float32",
    "float4_e2m1fn_x2",
    "float64",
    "float8_e4m3fn",
    "float8_e4m3fnuz",
    "float8_e5m2",
    "float8_e5m2fnuz",
    "float8_e8m0fnu",
    "int1",
    "int16",
    "int2",
    "int3",
    "int32",
    "int4",
    "int5",
    "int6",
    "int64",
    "int7",
    "int8",
    "qint32",
    "qint8",
    "quint2x4",
    "quint4x2",
    "quint8",
    "uint1",
    "uint16",
    "uint2",
    "uint3",
    "uint32",
    "uint4",
    "uint5",
    "uint6",
    "uint64",
    "uint7",
    "uint8",
};

static const char *const fc_storage_names[] = {
    "BFloat16", "Bool",  "Byte", "Char", "ComplexDouble", "ComplexFloat",
    "Double",   "Float", "Half", "Int",  "Long",          "Short",
};

static const char *const fc_qstorage_names[] = {
    "QInt32", "QInt8", "QUInt2x4", "QUInt4x2", "QUInt8",
};

/* "Float" + "Storage" == s? */
static int fc_name_in(const char *s, const char *const *list, size_t n, const char *suffix)
{
    const size_t sl = strlen(suffix);
    const size_t len = strlen(s);
    if (len <= sl || strcmp(s + len - sl, suffix) != 0)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (strlen(list[i]) == len - sl && memcmp(list[i], s, len - sl) == 0)
            return 1;
    return 0;
}

/*
 * Classify "module.name" (torch compares the joined string, so a dotted name
 * matches too).  *entry is set for table entries.
 */
static enum fc_sym fc_sym_lookup(const char *full, const struct fc_sym_entry **entry)
{
    *entry = NULL;
    for (size_t i = 0; i < FC_COUNT(fc_sym_table); i++) {
        if (strcmp(full, fc_sym_table[i].full) == 0) {
            *entry = &fc_sym_table[i];
            return fc_sym_table[i].sym;
        }
    }
    if (strncmp(full, "torch.", 6) == 0) {
        const char *rest = full + 6;
        for (size_t i = 0; i < FC_COUNT(fc_torch_dtypes); i++)
            if (strcmp(rest, fc_torch_dtypes[i]) == 0)
                return SYM_DTYPE;
        if (fc_name_in(rest, fc_storage_names, FC_COUNT(fc_storage_names), "Storage") ||
            fc_name_in(rest, fc_qstorage_names, FC_COUNT(fc_qstorage_names), "Storage"))
            return SYM_STORAGE_CLASS;
        if (fc_name_in(rest, fc_storage_names, FC_COUNT(fc_storage_names), "Tensor") &&
            strncmp(rest, "Complex", 7) != 0)
            return SYM_TENSOR_CLASS;
        if (strncmp(rest, "cuda.", 5) == 0) {
            const char *c = rest + 5;
            if (fc_name_in(c, fc_storage_names, FC_COUNT(fc_storage_names), "Storage"))
                return SYM_STORAGE_CLASS;
            if (fc_name_in(c, fc_storage_names, FC_COUNT(fc_storage_names), "Tensor") &&
                strncmp(c, "Complex", 7) != 0)
                return SYM_TENSOR_CLASS;
            if (strncmp(c, "sparse.", 7) == 0)
                rest = c; /* torch.cuda.sparse.X -> checked as sparse.X below */
        }
        if (strncmp(rest, "sparse.", 7) == 0) {
            const char *c = rest + 7;
            if (fc_name_in(c, fc_storage_names, FC_COUNT(fc_storage_names), "Tensor") &&
                strncmp(c, "Complex", 7) != 0 && strcmp(c, "BoolTensor") != 0)
                return SYM_TENSOR_CLASS;
        }
    }
    return SYM_NOT_ALLOWED;
}

/* Symbols the symbolic profile turns into plain values (stdlib constructors). */
enum fc_sym fc_sym_symbolic(const struct fc_pv *g)
{
    static const struct {
        const char *module, *name;
        enum fc_sym sym;
    } t[] = {
        {"collections", "OrderedDict", SYM_ORDEREDDICT}, {"builtins", "set", SYM_SET},
        {"builtins", "frozenset", SYM_FROZENSET},        {"builtins", "bytes", SYM_BYTES},
        {"builtins", "bytearray", SYM_BYTEARRAY},        {"_codecs", "encode", SYM_CODECS_ENCODE},
    };
    if (g->kind != FC_PV_GLOBAL)
        return SYM_NOT_ALLOWED;
    for (size_t i = 0; i < FC_COUNT(t); i++)
        if (strcmp(g->u.global.module, t[i].module) == 0 &&
            strcmp(g->u.global.name, t[i].name) == 0)
            return t[i].sym;
    return SYM_NOT_ALLOWED;
}

/* Join module.name into buf (truncated names cannot be allowlisted). */
void fc_global_full(const struct fc_pv *g, char *buf, size_t cap)
{
    /* snprintf "%s.%s", without its cost on every REDUCE */
    const size_t ml = strlen(g->u.global.module), nl = strlen(g->u.global.name);
    size_t k = ml < cap - 1 ? ml : cap - 1;
    memcpy(buf, g->u.global.module, k);
    if (k < cap - 1)
        buf[k++] = '.';
    const size_t nk = nl < cap - 1 - k ? nl : cap - 1 - k;
    memcpy(buf + k, g->u.global.name, nk);
    buf[k + nk] = '\0';
}

enum fc_sym fc_sym_of(const struct fc_pv *g, const struct fc_sym_entry **entry)
{
    char full[256];
    *entry = NULL;
    if (g == NULL || g->kind != FC_PV_GLOBAL)
        return SYM_NOT_ALLOWED;
    fc_global_full(g, full, sizeof(full));
    return fc_sym_lookup(full, entry);
}

const char *fc_pv_kind_name(enum fc_pv_kind k)
{
    switch (k) {
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
    case FC_PV_GLOBAL: return "global";
    case FC_PV_CALL: return "call result";
    case FC_PV_OBJECT: return "object";
    case FC_PV_TENSOR: return "tensor";
    default: return "storage";
    }
}

/* ---- interpreting calls: stdlib value constructors ---- */

struct fc_pv *fc_arg(const struct fc_pv *args, size_t i)
{
    return args->u.seq.items[i];
}

/* _codecs.encode(str[, encoding[, 'strict']]) -> BYTES; NULL result with rc 0: not handled. */
static int fc_vm_codecs_encode(struct fc_vm *vm, const struct fc_pv *args, struct fc_pv **out)
{
    *out = NULL;
    const size_t n = args->u.seq.n;
    if (n < 1 || n > 3 || fc_arg(args, 0)->kind != FC_PV_STR)
        return FC_OK;
    const char *enc = "utf-8";
    if (n >= 2) {
        if (fc_arg(args, 1)->kind != FC_PV_STR)
            return FC_OK;
        enc = fc_arg(args, 1)->u.str.s;
    }
    if (n == 3 &&
        (fc_arg(args, 2)->kind != FC_PV_STR || strcmp(fc_arg(args, 2)->u.str.s, "strict")))
        return FC_OK;
    const unsigned char *s = (const unsigned char *)fc_arg(args, 0)->u.str.s;
    const size_t len = fc_arg(args, 0)->u.str.len;
    const int latin1 = !strcmp(enc, "latin1") || !strcmp(enc, "latin-1") ||
                       !strcmp(enc, "iso-8859-1") || !strcmp(enc, "iso8859-1");
    const int utf8 = !strcmp(enc, "utf-8") || !strcmp(enc, "utf8");
    const int ascii = !strcmp(enc, "ascii");
    if (!latin1 && !utf8 && !ascii)
        return FC_OK;
    if (utf8 || ascii) {
        if (fc_utf8_invalid_at(s, len, 0) != len)
            return FC_OK; /* lone surrogates: Python raises, leave symbolic */
        for (size_t i = 0; ascii && i < len; i++)
            if (s[i] >= 0x80)
                return FC_OK;
        *out = fc_vm_strnode(vm, FC_PV_BYTES, s, len);
        return *out == NULL ? FC_ENOMEM : FC_OK;
    }
    /* latin1: every code point must be < 256, i.e. 1-byte or C2/C3 lead bytes. */
    size_t nb = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < 0x80) {
            nb++;
        } else if ((s[i] == 0xc2 || s[i] == 0xc3) && i + 1 < len) {
            nb++;
            i++;
        } else {
            return FC_OK;
        }
    }
    struct fc_pv *v = fc_vm_node(vm, FC_PV_BYTES);
    if (v == NULL)
        return FC_ENOMEM;
    char *d = fc_arena_alloc(vm, nb + 1);
    if (d == NULL)
        return FC_ENOMEM;
    size_t k = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < 0x80) {
            d[k++] = (char)s[i];
        } else {
            d[k++] = (char)(((s[i] & 0x03u) << 6) | (s[i + 1] & 0x3fu));
            i++;
        }
    }
    d[k] = '\0';
    v->u.str.s = d;
    v->u.str.len = nb;
    *out = v;
    return FC_OK;
}

/*
 * OrderedDict(), set(list), frozenset(list), bytes(), bytearray(bytes),
 * _codecs.encode(str, enc): the values pickle itself emits for those types.
 * *out is NULL (rc FC_OK) when the arguments are not of that plain form.
 */
int fc_vm_stdlib_call(struct fc_vm *vm, enum fc_sym sym, const struct fc_pv *args,
                      struct fc_pv **out)
{
    const size_t n = args->u.seq.n;
    *out = NULL;
    switch (sym) {
    case SYM_ORDEREDDICT:
    case SYM_COUNTER: {
        if (n > 1 || (n == 1 && fc_arg(args, 0)->kind != FC_PV_DICT))
            return FC_OK;
        struct fc_pv *d = fc_vm_node(vm, FC_PV_DICT);
        if (d == NULL)
            return FC_ENOMEM;
        d->u.dict.ordered = sym == SYM_ORDEREDDICT;
        if (n == 1) {
            const struct fc_pv *src = fc_arg(args, 0);
            for (size_t i = 0; i < src->u.dict.n; i++)
                FC_TRY(fc_vm_dict_push(vm, d, src->u.dict.keys[i], src->u.dict.vals[i]));
        }
        *out = d;
        return FC_OK;
    }
    case SYM_SET:
    case SYM_FROZENSET: {
        if (n == 0) {
            *out = fc_vm_node(vm, FC_PV_SET);
            return *out == NULL ? FC_ENOMEM : FC_OK;
        }
        const struct fc_pv *src = fc_arg(args, 0);
        if (n != 1 ||
            (src->kind != FC_PV_LIST && src->kind != FC_PV_TUPLE && src->kind != FC_PV_SET))
            return FC_OK;
        *out = fc_vm_seq_from(vm, FC_PV_SET, src->u.seq.items, src->u.seq.n);
        return *out == NULL ? FC_ENOMEM : FC_OK;
    }
    case SYM_BYTES:
    case SYM_BYTEARRAY:
        if (n == 0) {
            *out = fc_vm_strnode(vm, FC_PV_BYTES, "", 0);
            return *out == NULL ? FC_ENOMEM : FC_OK;
        }
        if (n == 1 && fc_arg(args, 0)->kind == FC_PV_BYTES) {
            const struct fc_pv *b = fc_arg(args, 0);
            *out = fc_vm_strnode(vm, FC_PV_BYTES, b->u.str.s, b->u.str.len);
            return *out == NULL ? FC_ENOMEM : FC_OK;
        }
        if (n == 2 && fc_arg(args, 0)->kind == FC_PV_STR)
            return fc_vm_codecs_encode(vm, args, out); /* bytearray('ab', 'latin-1') */
        return FC_OK;
    case SYM_CODECS_ENCODE: return fc_vm_codecs_encode(vm, args, out);
    default: return FC_OK;
    }
}
