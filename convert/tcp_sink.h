/*
 * tcp_sink.h - the torch_checkpointing sink: the plan written as PyTorch's
 * torch-checkpointing package saves a fully_shard / parallelize_module model
 * with CheckpointManager and ItemSpec(resharder=DefaultResharder(),
 * layout=LayoutInfo("model_{rank}.safetensors", SafetensorsSerialization()))
 * (docs/torch-checkpointing.md): item "model", one safetensors file per rank
 * holding that rank's unpadded local shard of every tensor (empty ones
 * included, as the package writes them) keyed by its FQN, and a
 * metadata.pkl naming each tensor's mesh, placements and ranks.
 *
 * Every rank's file holds its whole local state, replicas included
 * (fc_plan_store_at_holders()).  Keys that all start with "model." (what
 * fsdpconv reads from a torch_checkpointing checkpoint, torchtitan's DCP
 * layout) lose that prefix; other keys are the item's FQNs as they are.
 *
 * The mesh is recorded as torch records it: device type (default "cuda"),
 * shape, ranks in row-major order, dimension names (default torchtitan's:
 * dp_replicate, dp_shard, tp).  A tensor fully_shard leaves on a submesh
 * (replicated over tp and placed by no tp rule: the dp submesh of each tp
 * coordinate) gets one group
 * per submesh; a tensor stored whole (0-d, --replicate) is a plain tensor to
 * the package: Replicate() over a 1-D mesh of the world with no names.
 *
 * Only the items and the metadata differ from the safetensors sink; the
 * directory is staged and committed, metadata last, as every output.
 */
#ifndef FC_TCP_SINK_H
#define FC_TCP_SINK_H

#include <stddef.h>

#include "exec.h"
#include "fc_buf.h"
#include "plan.h"
#include "fc_zip.h"
#include "st_sink.h"

/*
 * The torch releases the package supports (2.11 on), and the DeviceMesh each
 * pickles (docs/torch-checkpointing.md): 2.11 and 2.12 a _MeshLayout of
 * shape and stride; 2.13 and 2.14 one of _FlatLayout axes; 2.15 on that and
 * _preserve_rank_order.
 */
#define FC_TCP_TORCH_MIN_MINOR 11
enum fc_tcp_mesh_form { FC_TCP_MESH_2_11 = 0, FC_TCP_MESH_2_13, FC_TCP_MESH_2_15 };

enum fc_tcp_layout {
    FC_TCP_LAYOUT_PT = 0,     /* the package's default: <item>_<rank>.pt (torch.save) */
    FC_TCP_LAYOUT_SAFETENSORS /* LayoutInfo("model_{rank}.safetensors", ...) */
};

/* One model_<rank>.pt: its archive's records (tcp_pt.c). */
struct fc_tcp_pt_file {
    struct fc_buf pkl;           /* data.pkl */
    struct fc_zipw_record *recs; /* in archive order; storages streamed or the rank map */
    size_t nrecs;
    char *names;      /* "data/<k>" record names, FC_TCP_PT_NAME bytes each */
    size_t *item_rec; /* per item of the file, in plan order: its storage record */
    char serial[48];  /* .data/serialization_id */
};

struct fc_tcp_pt {
    const struct fc_plan *plan; /* borrowed: the plan laid out */
    struct fc_tcp_pt_file *files;
    size_t nfiles;
    unsigned char *rank_map; /* int32 0 .. world-1, the DeviceMesh's rank map storage */
};

/* The checkpoint's items: the model, and the optimizer's state when the keys hold it. */
enum { FC_TCP_ITEM_MODEL = 0, FC_TCP_ITEM_OPTIMIZER, FC_TCP_MAX_ITEMS };

struct fc_xspec;

struct fc_tcp_sink {
    enum fc_tcp_layout layout;
    int nitems;                     /* 1: item "model"; 2: "model" and "optimizer" */
    int *item_of;                   /* per plan tensor: its item */
    const struct fc_xspec **groups; /* optimizer: its param_groups values (borrowed) */
    size_t ngroups_values;
    struct fc_buf groups_pkl;        /* optimizer: the pickled param_groups list (tcp_pt.c) */
    size_t *fqn_order;               /* optimizer: per plan tensor, its FQN's first appearance */
    size_t world;                    /* ranks (files per item) */
    enum fc_tcp_mesh_form mesh_form; /* pt: the DeviceMesh pickle of --torch-version */
    int optim_nested;              /* optimizer: get_state_dict's nested dict, else its flat one */
    struct fc_tcp_pt pt;           /* pt: the rank files' archives */
    struct fc_st_sink st;          /* safetensors: the per-file headers (the safetensors sink's) */
    const char *device;            /* mesh device type */
    char *names[FC_MESH_MAX_DIMS]; /* per plan mesh dim */
    size_t strip;                  /* model: bytes of the "model." prefix every key has, or 0 */
    const int *tp_ruled;           /* see fc_tcp_sink_layout() (borrowed) */
};

/*
 * fc_tcp_sink_layout() - lay plan out as the package's rank files and build
 * their headers.  tp_ruled (by plan tensor tag; NULL without tp): a tp rule
 * placed the tensor, so parallelize_module made it a DTensor on the tp mesh
 * even when it is replicated there (a RowwiseParallel bias).  device: --mesh-device or NULL
 * ("cuda"); dim_names:
 * --mesh-dim-names ("a,b,c", one per mesh dim) or NULL (torchtitan's).  The
 * plan must hold no values.  Returns FC_OK, FC_EINVAL (bad names, a value),
 * FC_EFORMAT (a dtype safetensors cannot hold), FC_ENOMEM.
 */
int fc_tcp_sink_layout(struct fc_tcp_sink *sink, struct fc_plan *plan, const int *tp_ruled,
                       const char *device, const char *dim_names, const char *layout,
                       const char *torch_version);

/*
 * fc_tcp_sink_add_group_value() - keep value spec s, an "optimizer.param_groups.*"
 * entry, for the optimizer item's param_groups (before fc_tcp_sink_layout();
 * s must outlive the sink).  Returns FC_OK or FC_ENOMEM.
 */
int fc_tcp_sink_add_group_value(struct fc_tcp_sink *sink, const struct fc_xspec *s);

/*
 * The path of plan tensor t inside its item: "emb.weight" in "model";
 * "state", "<fqn>", "exp_avg" in "optimizer" (optimizer_transform_pre's form).
 * elems[] point into t's key; lens[] are their lengths.  Returns the count.
 */
int fc_tcp_sink_path(const struct fc_tcp_sink *sink, const struct fc_plan *plan, size_t t,
                     const char **elems, size_t *lens);

/* The global tensor of plan tensor t: dtype, shape and contiguous strides into *d. */
void fc_tcp_global_desc(const struct fc_plan_tensor *t, struct fc_tensor_desc *d);

/* --torch-version "2.Y" (NULL: the newest) into *form.  FC_OK or FC_EINVAL. */
int fc_tcp_parse_torch_version(const char *s, enum fc_tcp_mesh_form *form);

/* tcp_pt.c: lay the plan out as model_<rank>.pt archives; the executor's view of them. */
int fc_tcp_pt_layout(struct fc_tcp_sink *sink, struct fc_plan *plan);
struct fc_sink fc_tcp_pt_sink(const struct fc_tcp_sink *sink);
void fc_tcp_pt_release(struct fc_tcp_pt *pt);

/* Write dir/metadata.pkl (fsynced, renamed into place): the last file of the checkpoint. */
int fc_tcp_sink_write_metadata(const struct fc_tcp_sink *sink, const struct fc_plan *plan,
                               const char *dir);

void fc_tcp_sink_release(struct fc_tcp_sink *sink);

/* The executor's view of the sink (borrows it; after fc_tcp_sink_layout()). */
struct fc_sink fc_tcp_sink_sink(const struct fc_tcp_sink *sink);

#endif
