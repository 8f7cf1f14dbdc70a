/*
 * fc_pickle.h - a minimal pickle VM that executes nothing, and a writer.
 *
 * The reader turns a pickle stream into a tree of struct fc_pv nodes.  GLOBAL
 * names are never imported or called: they become symbols, and REDUCE/NEWOBJ/
 * BUILD become typed nodes, which the caller interprets.  Two profiles:
 *
 *   FC_PICKLE_WEIGHTS_ONLY  exactly what torch.load(weights_only=True) accepts
 *                           (opcodes and global allowlist, input-formats.md
 *                           A.4/A.8).  The torch rebuild helpers are interpreted
 *                           here into FC_PV_TENSOR nodes; OrderedDict(), set(),
 *                           _codecs.encode(), torch.Size() into plain values
 *                           (Counter(d) into a plain dict); torch.device(...)
 *                           is checked ((str[, int])) and kept as a CALL so it
 *                           re-pickles as a device.  Other allowlisted callables
 *                           (complex, _get_layout) stay CALL/OBJECT nodes.
 *                           Allowlisted tensor kinds we cannot convert
 *                           (quantized, sparse, nested, meta, wrapper
 *                           subclasses, conj/neg views, bare storages) and
 *                           anything else: FC_EFORMAT naming the opcode or
 *                           global and its byte offset.
 *   FC_PICKLE_SYMBOLIC      the wider opcode set of a DCP .metadata file
 *                           (protocols 2-5, FRAME, STACK_GLOBAL, MEMOIZE, ...;
 *                           dcp-format.md 2.4).  Every GLOBAL becomes an
 *                           FC_PV_GLOBAL symbol, REDUCE an FC_PV_CALL, NEWOBJ an
 *                           FC_PV_OBJECT; BUILD sets ->state on those.  The
 *                           caller (fc_dcp) interprets an allowlist of names.
 *
 * Ownership: every node of a tree lives in the struct fc_pickle arena that
 * produced it; nodes may be shared (the memo stores references), so the tree
 * is a DAG.  Free everything at once with fc_pickle_free().  The arena
 * allocates each node with only the union member its kind uses, so never copy
 * a whole struct fc_pv (copy the fields you need).  Strings (STR) are valid
 * UTF-8, except that lone surrogates pass as in Python's surrogatepass.
 *
 * Both profiles also turn the stdlib value constructors into plain values:
 * collections.OrderedDict() -> DICT (ordered), builtins.set/frozenset(list) ->
 * SET, _codecs.encode(str, 'latin1') and builtins.bytes()/bytearray() ->
 * BYTES (these are what pickle itself emits for those types).  Everything
 * else in FC_PICKLE_SYMBOLIC stays symbolic (torch.Size(...) is a CALL there).
 *
 * The result is checked after STOP: it is acyclic (a cycle made through the
 * memo is FC_EFORMAT), its nesting depth is at most FC_PICKLE_MAX_NESTING
 * (each node's ->height says how deep it goes), its size with every shared
 * subtree counted at each use is at most FC_PICKLE_MAX_EXPANDED(len) nodes
 * (FC_ECORRUPT otherwise: a few hundred bytes of memo references can describe
 * 2^40 nodes, and every consumer that walks or re-pickles the tree would
 * expand them), and dict keys that Python
 * would merge (equal str, bytes, int/bool or None keys) are merged: the first
 * key keeps its position and gets the last value, as in Python.  Sets are not
 * deduplicated.
 *
 * Limits (hardening, not in Python): input size, memo entries, MARK depth,
 * stack size, container length, string length (never more than the input),
 * memory (FC_ENOMEM beyond FC_PICKLE_MAX_ARENA(len)), LONG1/LONG4 width
 * (wider than 8 bytes and not representable as int64 is kept as FC_PV_BIGINT
 * bytes).
 */
#ifndef FC_PICKLE_H
#define FC_PICKLE_H

#include <stddef.h>
#include <stdint.h>

#include "fc_buf.h"
#include "fc_dtype.h"
#include "fc_tensor.h"

#define FC_PICKLE_MAX_INPUT     ((size_t)1 << 30)   /* bytes */
#define FC_PICKLE_MAX_MEMO      ((size_t)1 << 20)   /* memo keys < max(this, input length) */
#define FC_PICKLE_MAX_MARKS     10000               /* open MARKs */
#define FC_PICKLE_MAX_STACK     ((size_t)1 << 24)   /* stack entries, all MARK frames together */
#define FC_PICKLE_MAX_CONTAINER ((size_t)100000000) /* items of one list/tuple/set/dict */
#define FC_PICKLE_MAX_NESTING   1000                /* longest path from the root to a leaf */
/* Nodes of the expanded tree allowed for an input of len bytes (sharing-heavy, yet linear). */
#define FC_PICKLE_MAX_EXPANDED(len) (((uint64_t)1 << 20) + (uint64_t)16 * (len))
/* Arena bytes allowed for an input of len bytes. */
#define FC_PICKLE_MAX_ARENA(len) (((size_t)64 << 20) + (size_t)64 * (len))

enum fc_pv_kind {
    FC_PV_NONE,
    FC_PV_BOOL,
    FC_PV_INT,    /* fits int64 */
    FC_PV_BIGINT, /* u.str holds little-endian two's complement bytes */
    FC_PV_FLOAT,
    FC_PV_STR,   /* u.str, UTF-8, NUL-terminated */
    FC_PV_BYTES, /* u.str, raw bytes (also NUL-terminated for convenience) */
    FC_PV_LIST,
    FC_PV_TUPLE,
    FC_PV_SET,
    FC_PV_DICT,   /* insertion-ordered; u.dict.ordered marks an OrderedDict */
    FC_PV_GLOBAL, /* u.global: a symbol, never resolved */
    FC_PV_CALL,   /* REDUCE: u.call.callable(*u.call.args), .state from BUILD */
    FC_PV_OBJECT, /* NEWOBJ: cls.__new__(cls, *args), .state from BUILD */
    FC_PV_TENSOR  /* a torch tensor reference (weights-only profile only) */
};

struct fc_pv;

struct fc_pv_tensor {
    const char *storage_key;    /* record name suffix: data/<key> (no NUL inside) */
    const char *location;       /* "cpu", "cuda:0", ... (informational) */
    uint64_t storage_numel;     /* elements of the storage type (bytes if untyped) */
    int untyped_storage;        /* 1 when the storage was torch.storage.UntypedStorage */
    fc_dtype storage_dtype;     /* element type of the storage class; UINT8 if untyped */
    struct fc_tensor_desc desc; /* dtype, shape, stride, storage_offset (elements of dtype) */
    int requires_grad;
    int is_parameter; /* wrapped by _rebuild_parameter */
};

struct fc_pv {
    enum fc_pv_kind kind;
    uint32_t height;      /* 1 for leaves, 1 + max over children otherwise (set by the loader) */
    uint32_t offset : 31; /* byte offset of the opcode that created the node (input <= 1 GiB) */
    uint32_t shared : 1;  /* the memo holds it: reference counted (private to the loader) */
    uint32_t expanded;    /* nodes, each shared subtree counted at every use (set by the loader) */
    union {
        int b;
        int64_t i;
        double f;
        struct {
            const char *s;
            size_t len;
        } str;
        struct {
            struct fc_pv **items;
            size_t n;
            size_t alloc;
        } seq; /* LIST, TUPLE, SET */
        struct {
            struct fc_pv **keys;
            struct fc_pv **vals;
            size_t n;
            size_t alloc;
            int ordered;
            struct fc_pv *state; /* BUILD on an OrderedDict (the _metadata dict), or NULL */
        } dict;
        struct {
            const char *module; /* after Python-2 renaming (__builtin__ -> builtins) */
            const char *name;
        } global;
        struct {
            struct fc_pv *callable; /* FC_PV_CALL: the callable; FC_PV_OBJECT: the class */
            struct fc_pv *args;     /* a TUPLE */
            struct fc_pv *state;    /* from BUILD, or NULL */
        } call;
        struct fc_pv_tensor tensor;
    } u;
};

/*
 * FC_PICKLE_WEIGHTS_DTENSOR: FC_PICKLE_WEIGHTS_ONLY plus the DTensors of a
 * torch_checkpointing rank file (docs/torch-checkpointing.md):
 * _rebuild_from_type_v2(_rebuild_wrapper_subclass, DTensor, args, state)
 * becomes the tensor node of state['_local_tensor'] (the rank's shard; its
 * geometry comes from metadata.pkl), and exactly the classes a DTensorSpec
 * pickles (DTensorSpec, TensorMeta, ShardOrderEntry, DeviceMesh and its
 * layouts, Shard/_StridedShard/Replicate) may be made by NEWOBJ and BUILD
 * into OBJECT nodes, never called.
 */
enum fc_pickle_profile { FC_PICKLE_WEIGHTS_ONLY, FC_PICKLE_SYMBOLIC, FC_PICKLE_WEIGHTS_DTENSOR };

struct fc_pickle; /* the arena and the result */

/*
 * fc_pickle_load() - run the VM over data[0..len).
 *
 * `what` names the input in error messages (e.g. "model.pt: data.pkl").
 * On success *out is a new arena owned by the caller (free with
 * fc_pickle_free()) and fc_pickle_root(*out) the unpickled value.  On failure
 * *out is NULL.  data must stay valid only during the call.
 *
 * Returns FC_OK, FC_EFORMAT (opcode or global not allowed, unconvertible
 * tensor kind), FC_ECORRUPT (truncated, stack underflow, bad memo index,
 * missing STOP, limits exceeded), FC_ENOMEM.
 */
int fc_pickle_load(struct fc_pickle **out, const unsigned char *data, size_t len,
                   enum fc_pickle_profile profile, const char *what);
const struct fc_pv *fc_pickle_root(const struct fc_pickle *p);

/*
 * Hooks that let a consumer of a large pickle (a DCP .metadata of a million
 * chunks) keep memory proportional to what it keeps, not to the tree.
 *
 * dict_item() is called for every key/value pair about to enter a dict
 * (SETITEM, SETITEMS, DICT), with the dict and the finished key and value
 * (borrowed for the call).  It returns 1 when it took the pair: the dict never
 * holds it, and the loader frees every node of the pair that the memo will
 * not hand out again.  0 leaves the pair to the dict.  A negative FC_* code
 * (message set by the hook) stops the load with that code.  The loader then
 * applies its checks (cycles, depth, key merging) only to what is left.
 *
 * built() is called when BUILD has given an object made by NEWOBJ its state
 * (objects the memo holds excepted).  It returns 1 when it took the state:
 * the loader frees it and the object is left without state; 0 leaves it; a
 * negative FC_* code stops the load.  (Python batches dict items by 1000, so
 * a consumer of dict items alone would still hold 1000 values at a time.)
 *
 * window(), when not NULL, supplies the input: the loader reads data[from,
 * to) only after window(from, to, &ready) returned FC_OK, and never reads
 * before `from` again in the same pass (it reads the input twice: a scan of
 * the memo keys, then the run; the second pass starts again at 0).  The hook
 * sets *ready to the end of what it made readable (at least `to`; it comes
 * in as `to`), and the loader calls it again only to read past that, not for
 * every opcode.  An input read from a file in pieces keeps only that window
 * in memory.  A negative FC_* code (message set) stops the load.
 */
struct fc_pickle_hooks {
    int (*dict_item)(void *ctx, const struct fc_pv *dict, const struct fc_pv *key,
                     const struct fc_pv *value);
    int (*built)(void *ctx, const struct fc_pv *object);
    int (*window)(void *ctx, size_t from, size_t to, size_t *ready);
    void *ctx;
};

/* fc_pickle_load() with hooks (FC_PICKLE_SYMBOLIC only; NULL hooks: fc_pickle_load()). */
int fc_pickle_load_hooked(struct fc_pickle **out, const unsigned char *data, size_t len,
                          enum fc_pickle_profile profile, const char *what,
                          const struct fc_pickle_hooks *hooks);

/*
 * fc_pickle_globals() - every distinct global (module, name) the pickle named
 * with GLOBAL or STACK_GLOBAL, in the order it first named them, as
 * FC_PV_GLOBAL nodes of p; *out is borrowed from p.  Names only: nothing was
 * imported.  Returns the count.
 */
size_t fc_pickle_globals(const struct fc_pickle *p, const struct fc_pv *const **out);
void fc_pickle_free(struct fc_pickle *p); /* accepts NULL */

/*
 * Helpers for walking trees.  fc_pv_dict_get() returns the value of the last
 * str key equal to key (borrowed), or NULL when dict is not a DICT or has no
 * such key.  fc_pv_is_global() is 1 when v is the GLOBAL module.name.  Both
 * accept NULL for v/dict.
 */
const struct fc_pv *fc_pv_dict_get(const struct fc_pv *dict, const char *key); /* str keys */
int fc_pv_is_global(const struct fc_pv *v, const char *module, const char *name);

/*
 * fc_pv_kind_name() - the Python type name of a kind ("int", "dict", ...);
 * what the pickle builds rather than holds reads "global", "call result",
 * "object", "tensor" (for messages).
 */
const char *fc_pv_kind_name(enum fc_pv_kind k);

/*
 * fc_pv_repr() - append a short Python-like rendering of v to out (for
 * inspect): 3, 0.001, 'run', (0.9, 0.999), [1, 2], {'a': 1}, None, True,
 * b'ab', torch.bfloat16, <call collections.Counter>, <object m.C>,
 * <tensor float32 [2, 3]>.  At most max_bytes are appended; a longer rendering
 * ends in "..." (cut at a UTF-8 character boundary).  Nesting deeper than
 * FC_PICKLE_MAX_NESTING renders as "...".  Returns FC_OK or FC_ENOMEM.
 */
int fc_pv_repr(struct fc_buf *out, const struct fc_pv *v, size_t max_bytes);

/*
 * Writer: protocol-2 opcodes, no memo (every Python 3 unpickler and torch's
 * weights-only unpickler accept memo-free streams).  Each function appends to
 * a struct fc_buf and returns FC_OK or FC_ENOMEM; the few that can refuse
 * their arguments say so (FC_EINVAL).  The bytes are those Python's pickler
 * writes with protocol=2 minus the BINPUT opcodes: fc_pw_global() renames
 * builtins -> __builtin__ and copyreg -> copy_reg (fix_imports), fc_pw_int()
 * picks BININT1/BININT2/BININT/LONG1 exactly as Python does.
 */
int fc_pw_proto(struct fc_buf *b); /* 80 02 */
int fc_pw_stop(struct fc_buf *b);  /* . */
int fc_pw_mark(struct fc_buf *b);  /* ( */
int fc_pw_none(struct fc_buf *b);
int fc_pw_bool(struct fc_buf *b, int v);
int fc_pw_int(struct fc_buf *b, int64_t v); /* BININT1/BININT2/BININT/LONG1 */
int fc_pw_float(struct fc_buf *b, double v);
/* A tuple of n ints as Python writes it: EMPTY_TUPLE, TUPLE1..3, or MARK ... TUPLE. */
int fc_pw_int_tuple(struct fc_buf *b, const int64_t *v, int n); /* BINFLOAT */
int fc_pw_str(struct fc_buf *b, const char *s, size_t len); /* BINUNICODE; UTF-8; FC_EINVAL >4GiB */
/* LONG1 (LONG4 past 255 bytes) of n little-endian two's complement bytes */
int fc_pw_long_bytes(struct fc_buf *b, const unsigned char *le, size_t n);
/* _codecs.encode(<bytes decoded as latin1>, 'latin1') REDUCE, as Python writes bytes */
int fc_pw_bytes(struct fc_buf *b, const void *p, size_t len);
/* GLOBAL "c module\nname\n"; FC_EINVAL if a name is empty or holds '\n' */
int fc_pw_global(struct fc_buf *b, const char *module, const char *name);
int fc_pw_empty_tuple(struct fc_buf *b);
int fc_pw_tuple(struct fc_buf *b);          /* MARK ... TUPLE */
int fc_pw_tuple_n(struct fc_buf *b, int n); /* TUPLE1/2/3 for n in 1..3, else FC_EINVAL */
int fc_pw_empty_dict(struct fc_buf *b);
int fc_pw_setitems(struct fc_buf *b); /* MARK k v ... SETITEMS */
int fc_pw_setitem(struct fc_buf *b);  /* k v SETITEM */
int fc_pw_empty_list(struct fc_buf *b);
int fc_pw_appends(struct fc_buf *b); /* MARK x ... APPENDS */
int fc_pw_append(struct fc_buf *b);  /* x APPEND */
int fc_pw_reduce(struct fc_buf *b);
int fc_pw_newobj(struct fc_buf *b);
int fc_pw_build(struct fc_buf *b);
int fc_pw_binpersid(struct fc_buf *b);
/* Memo the object on top of the stack as idx / push memo idx (BINPUT, BINGET and their LONG_
 * forms): one object referenced twice.  A stream using them cannot go through fc_pw_memoize(). */
int fc_pw_put(struct fc_buf *b, uint32_t idx);
int fc_pw_get(struct fc_buf *b, uint32_t idx);

/*
 * fc_pw_value() - serialise a plain value tree (NONE, BOOL, INT, BIGINT,
 * FLOAT, STR, BYTES (as _codecs.encode(str, 'latin1')), LIST, TUPLE, SET,
 * DICT incl. OrderedDict, GLOBAL symbols, CALL and OBJECT nodes with their
 * state) so that a value read by fc_pickle_load() round-trips.  Tensors are
 * not handled here (FC_EINVAL).  Lists and dicts go out in batches of at most
 * 1000 items (APPEND/SETITEM for a single one), tuples of 1-3 items as
 * TUPLE1-3, sets as builtins.set(list), an OrderedDict as OrderedDict() +
 * SETITEMS + (state BUILD), b'' as _codecs.encode('', 'latin1') (Python
 * writes builtins.bytes(), which torch's weights-only unpickler refuses).
 * Without a memo, shared subtrees are written once per reference, so the
 * output of a loaded DAG can be much larger than its input: give b a cap.
 * Writes only the value: callers add fc_pw_proto() and fc_pw_stop().  The
 * same tree always gives the same bytes.  Returns
 * FC_OK, FC_ENOMEM, or FC_EINVAL (a tensor, a string over 4 GiB, a global
 * name with a newline, nesting deeper than FC_PICKLE_MAX_NESTING).
 */
int fc_pw_value(struct fc_buf *b, const struct fc_pv *v);

/*
 * fc_pw_value_with() - fc_pw_value(), except that each FC_PV_TENSOR node is
 * written by h->fn (a torch.save writer placing the tensor's storage in its
 * archive): a tuple holding a tensor is written as torch.save writes it.
 */
struct fc_pw_tensor_hook {
    int (*fn)(void *ctx, struct fc_buf *b, const struct fc_pv_tensor *t);
    void *ctx;
};
int fc_pw_value_with(struct fc_buf *b, const struct fc_pv *v, const struct fc_pw_tensor_hook *h);

/*
 * fc_pw_memoize() - copy a stream written with the fc_pw_* functions to out,
 * writing each repeated GLOBAL and string (longer than a memo fetch) once and
 * BINGET/LONG_BINGET afterwards.  Same objects on unpickling, up to identity
 * of equal strings.  Returns FC_OK, FC_EINVAL (an opcode fc_pw_* never
 * writes, or a truncated stream), FC_ENOMEM.
 */
int fc_pw_memoize(const unsigned char *in, size_t len, struct fc_buf *out);

#endif
