/*
 * fc_pickle_internal.h - what the files of lib/pickle/ share; nothing outside
 * lib/pickle/ includes it.
 *
 * The pickle VM is cut in parts around this header: the opcode table and its
 * argument decoder (fc_pickle_ops.c), the VM proper - arena, nodes, stack,
 * memo, the opcode loop (fc_pickle_vm.c) - the weights-only allowlist and the
 * stdlib constructors (fc_pickle_allow.c), the torch rebuilds and the opcodes
 * that build objects (fc_pickle_torch.c), the post-STOP check and the public
 * load (fc_pickle.c), fc_pv_repr() (fc_pickle_repr.c) and the protocol-2
 * writer (fc_pickle_write.c).
 *
 * Nodes are allocated with only the union member their kind uses (a tensor
 * node is ~330 bytes, an int 24), so a struct fc_pv is never copied whole.
 */
#ifndef FC_PICKLE_INTERNAL_H
#define FC_PICKLE_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "fc_pickle.h"
#include "fc_strmap.h"

/* ---- opcodes ---- */

enum {
    OP_MARK = 0x28,            /* ( */
    OP_STOP = 0x2e,            /* . */
    OP_POP = 0x30,             /* 0 */
    OP_POP_MARK = 0x31,        /* 1 */
    OP_DUP = 0x32,             /* 2 */
    OP_FLOAT = 0x46,           /* F */
    OP_INT = 0x49,             /* I */
    OP_BININT = 0x4a,          /* J */
    OP_BININT1 = 0x4b,         /* K */
    OP_LONG = 0x4c,            /* L */
    OP_BININT2 = 0x4d,         /* M */
    OP_NONE = 0x4e,            /* N */
    OP_PERSID = 0x50,          /* P */
    OP_BINPERSID = 0x51,       /* Q */
    OP_REDUCE = 0x52,          /* R */
    OP_STRING = 0x53,          /* S */
    OP_BINSTRING = 0x54,       /* T */
    OP_SHORT_BINSTRING = 0x55, /* U */
    OP_UNICODE = 0x56,         /* V */
    OP_BINUNICODE = 0x58,      /* X */
    OP_APPEND = 0x61,          /* a */
    OP_BUILD = 0x62,           /* b */
    OP_GLOBAL = 0x63,          /* c */
    OP_DICT = 0x64,            /* d */
    OP_EMPTY_DICT = 0x7d,      /* } */
    OP_APPENDS = 0x65,         /* e */
    OP_GET = 0x67,             /* g */
    OP_BINGET = 0x68,          /* h */
    OP_INST = 0x69,            /* i */
    OP_LONG_BINGET = 0x6a,     /* j */
    OP_LIST = 0x6c,            /* l */
    OP_EMPTY_LIST = 0x5d,      /* ] */
    OP_OBJ = 0x6f,             /* o */
    OP_PUT = 0x70,             /* p */
    OP_BINPUT = 0x71,          /* q */
    OP_LONG_BINPUT = 0x72,     /* r */
    OP_SETITEM = 0x73,         /* s */
    OP_TUPLE = 0x74,           /* t */
    OP_EMPTY_TUPLE = 0x29,     /* ) */
    OP_SETITEMS = 0x75,        /* u */
    OP_BINFLOAT = 0x47,        /* G */
    OP_PROTO = 0x80,
    OP_NEWOBJ = 0x81,
    OP_EXT1 = 0x82,
    OP_EXT2 = 0x83,
    OP_EXT4 = 0x84,
    OP_TUPLE1 = 0x85,
    OP_TUPLE2 = 0x86,
    OP_TUPLE3 = 0x87,
    OP_NEWTRUE = 0x88,
    OP_NEWFALSE = 0x89,
    OP_LONG1 = 0x8a,
    OP_LONG4 = 0x8b,
    OP_BINBYTES = 0x42,       /* B */
    OP_SHORT_BINBYTES = 0x43, /* C */
    OP_SHORT_BINUNICODE = 0x8c,
    OP_BINUNICODE8 = 0x8d,
    OP_BINBYTES8 = 0x8e,
    OP_EMPTY_SET = 0x8f,
    OP_ADDITEMS = 0x90,
    OP_FROZENSET = 0x91,
    OP_NEWOBJ_EX = 0x92,
    OP_STACK_GLOBAL = 0x93,
    OP_MEMOIZE = 0x94,
    OP_FRAME = 0x95,
    OP_BYTEARRAY8 = 0x96,
    OP_NEXT_BUFFER = 0x97,
    OP_READONLY_BUFFER = 0x98
};

/*
 * The one description of the opcodes: name, how the argument after the
 * opcode byte is laid out, which profile allows it and its memo role.  The
 * VM, the memo pre-scan and the writer's memoizer all decode arguments
 * through fc_op_decode() with it.
 */
enum fc_op_argkind {
    ARG_NONE,
    ARG_FIXED1, /* fixed-size argument of 1, 2, 4 or 8 bytes (value read little-endian) */
    ARG_FIXED2,
    ARG_FIXED4,
    ARG_FIXED8,
    ARG_LEN1, /* a 1, 4 or 8 byte little-endian length, then that many bytes */
    ARG_LEN4,
    ARG_LEN8,
    ARG_LINE, /* one newline-terminated line */
    ARG_LINE2 /* two of them */
};

enum {
    OPF_WEIGHTS_ONLY = 1, /* exactly the opcodes torch's weights-only unpickler implements (A.4) */
    OPF_SYMBOLIC = 2,     /* the DCP .metadata set (dcp-format.md 2.4) */
    OPF_PUT = 4,          /* stores the top of the stack under the argument's key */
    OPF_GET = 8,          /* pushes the value stored under the argument's key */
    OPF_SIGNED_LEN = 16   /* the 4-byte length is signed: above INT32_MAX is negative */
};

struct fc_op_info {
    const char *name; /* NULL: not an opcode */
    unsigned char arg;
    unsigned char flags;
};

extern const struct fc_op_info fc_ops[256];

/* The argument of one opcode, as fc_op_decode() found it in the input. */
struct fc_op_arg {
    const unsigned char *s;  /* fixed: its bytes; length-prefixed: the payload; line: the first */
    size_t n;                /* bytes at s (a line without its newline) */
    const unsigned char *s2; /* ARG_LINE2: the second line, n2 bytes */
    size_t n2;
    uint64_t u; /* fixed: the little-endian value; length-prefixed: the length */
};

/* Why fc_op_decode() could not decode an argument (positive: not an error yet). */
enum fc_op_short {
    OP_SHORT_FIXED = 1, /* the fixed part (argument or length) is cut off */
    OP_SHORT_PAYLOAD,   /* the length-prefixed bytes are cut off */
    OP_SHORT_LINE,      /* a line has no newline */
    OP_SHORT_NEGATIVE   /* a signed length is negative */
};

/* Whether the profile allows op (BINPERSID is weights-only; the .metadata set adds many). */
static inline int fc_op_allowed(unsigned op, enum fc_pickle_profile profile)
{
    return (fc_ops[op & 0xff].flags &
            (profile == FC_PICKLE_WEIGHTS_ONLY ? OPF_WEIGHTS_ONLY : OPF_SYMBOLIC)) != 0;
}

/* ---- arena ---- */

struct fc_arena_chunk {
    struct fc_arena_chunk *next;
    size_t size; /* usable bytes after the header */
    size_t used;
};

#define FC_ARENA_HDR   ((sizeof(struct fc_arena_chunk) + 15) & ~(size_t)15)
#define FC_ARENA_CHUNK ((size_t)64 << 10)

/*
 * Blocks come in size classes so that freed ones can be reused (a consumer
 * that takes dict items as they are built frees their subtrees, and grown
 * arrays free their old copy): multiples of 8 up to FC_ARENA_SMALL, powers of
 * two above.  A freed block goes on its class's free list and is only given
 * back to the system by fc_pickle_free().
 */
#define FC_ARENA_SMALL   ((size_t)512)
#define FC_ARENA_CLASSES (FC_ARENA_SMALL / 8 + 64) /* the powers of two reach SIZE_MAX */

struct fc_pickle {
    struct fc_arena_chunk *chunks; /* head is the chunk being filled */
    size_t arena_bytes;
    size_t arena_cap;
    void *free_blocks[FC_ARENA_CLASSES]; /* per size class: freed blocks, linked through word 0 */
    const struct fc_pv *root;
    const struct fc_pv **globals; /* distinct GLOBAL/STACK_GLOBAL names, first use first */
    size_t nglobals, globals_alloc;
    struct fc_strmap global_names; /* "module name" (arena strings) -> index in globals */
};

/* Internal node kind for a persistent-id storage; never left in a result. */
#define FC_PV_STORAGE_ ((enum fc_pv_kind)(FC_PV_TENSOR + 1))

/* ---- VM state ---- */

struct fc_vm {
    struct fc_pickle *p;
    const unsigned char *data;
    size_t len;
    size_t pos;
    enum fc_pickle_profile profile; /* WEIGHTS_ONLY or SYMBOLIC (WEIGHTS_DTENSOR sets dtensor) */
    int dtensor;                    /* FC_PICKLE_WEIGHTS_DTENSOR */
    const char *what;
    uint64_t op_off; /* offset of the opcode being run */
    unsigned op;
    struct fc_op_arg arg; /* its argument (fc_vm_decode_arg) */
    struct fc_pv **stack;
    size_t sp;
    size_t stack_alloc;
    size_t *marks;
    size_t nmarks;
    size_t marks_alloc;
    /*
     * The memo keeps only the values that a later GET fetches: a pre-scan of
     * the opcodes (fc_vm_prescan) marks those keys in memo_used, and
     * memo_rank[w] counts the marked keys below word w, so a fetched key's
     * value sits at memo[rank].  Everything else a pickle memoises (nearly
     * every object) has one owner, so a consumer may free it.  A value the
     * memo holds is reference counted (struct fc_pv.shared): its placements
     * plus the memo's hold, which ends at the key's only GET (keys fetched
     * more than once are held to the end).  memo_set marks
     * the keys set so far: MEMOIZE's next key is their count, len(memo) in
     * Python.
     */
    uint64_t *memo_used, *memo_multi, *memo_set; /* multi: fetched more than once */
    uint32_t *memo_rank;
    size_t memo_words, multi_words, set_words; /* 64-bit words of each bitmap (memo_rank: used) */
    struct fc_pv **memo;                       /* one slot per fetched key */
    size_t memo_n;
    size_t memo_limit; /* keys at or beyond this are refused */
    int aliased;       /* DUP seen: a node may sit in two places, so nothing is freed */
    const struct fc_pickle_hooks *hooks;
    size_t window_to; /* hooks->window made data[.., window_to) readable */
    struct fc_pv *root;
};

int fc_vm_err(struct fc_vm *vm, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* ---- the allowlist ---- */

/* What an allowlisted (or, in the symbolic profile, recognised) global is. */
enum fc_sym {
    SYM_NOT_ALLOWED = 0,
    SYM_ALLOWED, /* allowlisted, no special meaning: stays symbolic */
    SYM_ORDEREDDICT,
    SYM_COUNTER,
    SYM_SET,
    SYM_FROZENSET, /* not allowlisted by torch; symbolic profile only */
    SYM_BYTES,     /* idem */
    SYM_BYTEARRAY,
    SYM_CODECS_ENCODE,
    SYM_SIZE,
    SYM_DEVICE,
    SYM_TENSOR_TYPE,
    SYM_PARAMETER_TYPE,
    SYM_TENSOR_CLASS, /* torch.FloatTensor, torch.cuda.sparse.LongTensor, ... */
    SYM_STORAGE_CLASS,
    SYM_STORAGE_UNTYPED,
    SYM_DTYPE,
    SYM_REBUILD_TENSOR,
    SYM_REBUILD_V2,
    SYM_REBUILD_V3,
    SYM_REBUILD_PARAM,
    SYM_REBUILD_PARAM_STATE,
    SYM_REBUILD_FROM_TYPE_V2,
    SYM_REBUILD_DEVICE_FROM_CPU,
    SYM_UNCONVERTIBLE,
    SYM_DTENSOR_TYPE, /* torch.distributed.tensor.DTensor (FC_PICKLE_WEIGHTS_DTENSOR only) */
    SYM_DTENSOR_PART  /* a class a DTensorSpec pickles: NEWOBJ only (idem) */
};

struct fc_sym_entry {
    const char *full;
    enum fc_sym sym;
    const char *what; /* SYM_UNCONVERTIBLE: what kind of tensor it rebuilds */
};

#define FC_COUNT(a) (sizeof(a) / sizeof((a)[0]))

/* ---- the opcode table and argument decoder (fc_pickle_ops.c) ---- */

int fc_op_decode(struct fc_vm *vm, unsigned op, size_t op_off, size_t *pos, struct fc_op_arg *a);
int fc_parse_dec(const unsigned char *s, size_t n, int64_t *out);
int fc_vm_decode_arg(struct fc_vm *vm);
struct fc_pv *fc_vm_long(struct fc_vm *vm, const unsigned char *b, size_t n);

/* ---- the VM: arena, nodes, stack, memo and the opcode loop (fc_pickle_vm.c) ---- */

void *fc_arena_alloc(struct fc_vm *vm, size_t n);
int fc_bit_set(uint64_t **bits, size_t *nwords, uint64_t k);
int fc_bit_test(const uint64_t *bits, size_t nwords, uint64_t k);
int fc_vm_dict_push(struct fc_vm *vm, struct fc_pv *d, struct fc_pv *k, struct fc_pv *v);
int fc_vm_find_newline(struct fc_vm *vm, size_t from, size_t pos, size_t *nl);
void fc_vm_free_tree(struct fc_vm *vm, struct fc_pv *v, int depth);
struct fc_pv *fc_vm_int(struct fc_vm *vm, int64_t i);
int fc_vm_memo_mark_set(struct fc_vm *vm, uint64_t key);
struct fc_pv *fc_vm_node(struct fc_vm *vm, enum fc_pv_kind kind);
const char *fc_vm_opname(const struct fc_vm *vm);
int fc_vm_pop(struct fc_vm *vm, struct fc_pv **out);
int fc_vm_push(struct fc_vm *vm, struct fc_pv *v);
struct fc_pv *fc_vm_seq_from(struct fc_vm *vm, enum fc_pv_kind kind, struct fc_pv *const *items,
                             size_t n);
int fc_vm_step(struct fc_vm *vm, int *done);
char *fc_vm_strdup(struct fc_vm *vm, const void *s, size_t n);
struct fc_pv *fc_vm_strnode(struct fc_vm *vm, enum fc_pv_kind kind, const void *s, size_t n);
int fc_vm_top(struct fc_vm *vm, struct fc_pv **out);
int fc_vm_window(struct fc_vm *vm, size_t from, size_t to);

/* ---- the allowlist and the stdlib constructors (fc_pickle_allow.c) ---- */

struct fc_pv *fc_arg(const struct fc_pv *args, size_t i);
void fc_global_full(const struct fc_pv *g, char *buf, size_t cap);
void fc_rename_global(const char **module, const char **name);
enum fc_sym fc_sym_of(const struct fc_pv *g, const struct fc_sym_entry **entry);
enum fc_sym fc_sym_symbolic(const struct fc_pv *g);
int fc_vm_stdlib_call(struct fc_vm *vm, enum fc_sym sym, const struct fc_pv *args,
                      struct fc_pv **out);

/* ---- the torch rebuilds and the opcodes that build objects (fc_pickle_torch.c) ---- */

int fc_op_binpersid(struct fc_vm *vm);
int fc_op_build(struct fc_vm *vm);
int fc_op_global(struct fc_vm *vm, const unsigned char *mod, size_t mlen, const unsigned char *name,
                 size_t nlen);
int fc_op_newobj(struct fc_vm *vm, struct fc_pv *cls, struct fc_pv *args);
int fc_op_reduce(struct fc_vm *vm);

#endif
