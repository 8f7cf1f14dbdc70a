#!/bin/sh
# Enforce the layer rules of house-style.md by grepping #include lines.
set -u
bad=0
check() { # $1 files glob, $2 forbidden include regex, $3 message
    for f in $1; do
        [ -f "$f" ] || continue
        if grep -nE "^[[:space:]]*#[[:space:]]*include[[:space:]]*[\"<]($2)" "$f"; then
            echo "check-deps: $f: $3"
            bad=1
        fi
    done
}
check "lib/*/*.c lib/*/*.h" "fc_convert\.h|plan\.h|mesh\.h|exec\.h|xform\.h|fc_kernels\.h|cuda|nccl" "lib/ may not include convert/, kernels/ or CUDA headers"
# Inside lib/, the layers util <- pickle <- format <- source: a file may include the headers
# of its own folder and of the folders before it, never of one after it.
layers="util pickle format source"
above() { # the folders after $1 in $layers
    echo "$layers" | tr ' ' '\n' | sed -n "/^$1\$/,\$p" | sed 1d
}
for l in $layers; do
    higher=""
    for h in $(above "$l"); do
        for f in lib/"$h"/*.h; do
            [ -f "$f" ] || continue
            n=$(basename "$f" | sed 's/\./\\./g')
            higher="${higher:+$higher|}$n"
        done
    done
    [ -n "$higher" ] || continue
    check "lib/$l/*.c lib/$l/*.h" "$higher" "lib/$l/ may not include a header of a higher lib/ layer (util <- pickle <- format <- source)"
done
check "kernels/*.c kernels/*.h" "fc_(alloc|buf|io|pickle|zip|torchsave|safetensors|dcp|source)\.h|plan\.h|mesh\.h|fc_convert\.h|nccl" "kernels/ may include only fc_error.h, fc_dtype.h, fc_tensor.h from lib/"
check "$(ls convert/*.c convert/*.h | grep -v '^convert/comm_nccl\.c$')" "cuda_runtime|cuda\.h" "only convert/comm_nccl.c may include CUDA headers in convert/"
for f in convert/*.c convert/*.h; do
    case "$f" in convert/comm_nccl.c) continue ;; esac
    [ -f "$f" ] || continue
    if grep -nE '^[[:space:]]*#[[:space:]]*include[[:space:]]*[<"]nccl\.h' "$f"; then
        echo "check-deps: $f: only convert/comm_nccl.c may include nccl.h"; bad=1
    fi
done
check "convert/mesh.c convert/mesh.h convert/plan.c convert/plan.h" "fc_(pickle|zip|torchsave|safetensors|dcp|source)\.h" "the planner uses no format module"
check "cmd/*.c cmd/*.h" "[a-z_]*_internal\.h|plan\.h|mesh\.h|exec\.h|xform\.h" "cmd/ uses convert/fc_convert.h and lib/ public headers only"
[ "$bad" -eq 0 ] && echo "check-deps: ok"
exit $bad
