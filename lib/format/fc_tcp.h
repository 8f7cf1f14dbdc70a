/*
 * fc_tcp.h - the metadata of a torch_checkpointing checkpoint (PyTorch's
 * torch-checkpointing package; docs/torch-checkpointing.md): metadata.pkl
 * parsed into items, tensor paths, meshes and placements, and the shard
 * geometry of a rank, as torch's _compute_local_shape_and_global_offset
 * computes it.
 *
 * metadata.pkl is pickle.dumps(DistributedMetadata.to_dict()): builtin values
 * only.  It is read with the symbolic VM and a pickle naming any global is
 * refused (the package's own metadata names none).  Every file path it holds
 * is checked to stay inside the checkpoint directory.
 */
#ifndef FC_TCP_H
#define FC_TCP_H

#include <stddef.h>
#include <stdint.h>

#include "fc_dtype.h"
#include "fc_path.h"
#include "fc_tensor.h"

#define FC_TCP_METADATA     "metadata.pkl"
#define FC_TCP_MAX_METADATA ((size_t)1 << 30) /* bytes of metadata.pkl we read */
#define FC_TCP_MAX_WORLD    ((int64_t)1 << 20)

enum fc_tcp_place { FC_TCP_REPLICATE, FC_TCP_SHARD, FC_TCP_STRIDED_SHARD };

struct fc_tcp_placement {
    enum fc_tcp_place kind;
    int dim;              /* Shard/StridedShard: the tensor dim */
    int64_t split_factor; /* StridedShard */
};

struct fc_tcp_mesh {
    char *device_type;
    int ndim;
    int64_t shape[FC_MAX_DIMS];
    int64_t *ranks; /* mesh_data: the global ranks in mesh order, prod(shape) of them */
    size_t nranks;
    int64_t *pos;     /* nworld entries: a rank's index in ranks, or -1 (O(1) lookups) */
    int64_t nworld;   /* the checkpoint's world_size */
    char **dim_names; /* ndim names, or NULL (mesh_dim_names None) */
};

/* One group of ranks sharing a path's sharding metadata (DTensorShardingMetadata). */
struct fc_tcp_group {
    fc_dtype dtype;
    int ndim;
    int64_t shape[FC_MAX_DIMS];
    const struct fc_tcp_mesh *mesh; /* owned by the meta (pickle-shared meshes are one) */
    struct fc_tcp_placement place[FC_MAX_DIMS]; /* mesh->ndim of them */
    int64_t *ranks;                             /* the ranks holding it */
    size_t nranks;
};

/* A tensor leaf of an item: its nested path and the groups describing it. */
struct fc_tcp_path {
    char *key;                  /* "<item>.<path elements joined with '.'>" */
    struct fc_path_elem *elems; /* item name first, then the nested path */
    size_t nelems;
    struct fc_tcp_group *groups;
    size_t ngroups;
};

/* Where rank r keeps an item: a file inside the checkpoint directory. */
struct fc_tcp_file {
    char *name;      /* relative path, checked: no absolute path, no '..', no empty part */
    int safetensors; /* SafetensorsSerialization, else TorchSerialization */
};

struct fc_tcp_item {
    char *name;
    struct fc_tcp_path *paths;
    size_t npaths;
    struct fc_tcp_file *files; /* world_size of them, by rank */
};

struct fc_tcp_meta {
    int64_t world_size;
    struct fc_tcp_item *items;
    size_t nitems;
    struct fc_tcp_mesh **meshes;
    size_t nmeshes;
};

/*
 * fc_tcp_meta_parse() - parse metadata.pkl bytes (`what` names them in
 * messages).  Version "2.0" only; DTensorShardingMetadata only; every rank
 * 0..world_size-1 must have a layout for every item, no two (item, rank)
 * pairs one file.  On success *out is owned by the caller.  Returns FC_OK,
 * FC_ECORRUPT (not the schema, a path leaving the directory), FC_EFORMAT
 * (a global, another version or sharding type), FC_ENOMEM.
 */
int fc_tcp_meta_parse(struct fc_tcp_meta **out, const unsigned char *data, size_t len,
                      const char *what);
/* fc_tcp_meta_parse() of dir/metadata.pkl; FC_ENOENT when it is absent. */
int fc_tcp_meta_load(struct fc_tcp_meta **out, const char *dir);
void fc_tcp_meta_free(struct fc_tcp_meta *m); /* accepts NULL */

/* 1 when dir holds a metadata.pkl file (a torch_checkpointing checkpoint), else 0. */
int fc_tcp_is_dir(const char *dir);

/*
 * fc_tcp_local_box() - the box of group g's tensor that `rank` holds (its
 * unpadded local shard): off[]/size[] get g->ndim values.  FC_EFORMAT when the
 * shard is not one box (a StridedShard that leaves it in pieces), FC_ECORRUPT
 * when rank is not in g's mesh; `where` (the checkpoint) and `key` (the
 * tensor) name them in messages.
 */
int fc_tcp_local_box(const struct fc_tcp_group *g, int64_t rank, int64_t *off, int64_t *size,
                     const char *where, const char *key);

#endif
