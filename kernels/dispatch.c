/*
 * dispatch.c - choose the engine that runs the kernels.
 *
 * Why it is explicit: `--device cuda` on a machine without CUDA must fail with
 * a clear message instead of silently running on the CPU, while the default
 * (auto) quietly uses whatever is there.  The CUDA side is reached only through
 * fc_cuda_device_count(), which cuda_stub.c answers with FC_ENOTSUP in CPU-only
 * builds, so this file needs no #ifdef.
 */
#include "fc_kernels.h"

const char *fc_engine_name(fc_engine engine)
{
    switch (engine) {
    case FC_ENGINE_AUTO: return "auto";
    case FC_ENGINE_CPU: return "cpu";
    case FC_ENGINE_CUDA: return "cuda";
    default: return "invalid";
    }
}

int fc_engine_resolve(fc_engine requested, fc_engine *out)
{
    int count = 0;
    int rc;

    switch (requested) {
    case FC_ENGINE_CPU:
        *out = FC_ENGINE_CPU;
        return FC_OK;
    case FC_ENGINE_AUTO:
        *out = fc_cuda_available() ? FC_ENGINE_CUDA : FC_ENGINE_CPU;
        return FC_OK;
    case FC_ENGINE_CUDA:
        rc = fc_cuda_device_count(&count);
        if (rc == FC_ENOTSUP)
            return fc_error_set(FC_ENOTSUP, "device cuda requested, but this fsdpconv was built "
                                "without CUDA support (rebuild with make CUDA=1)");
        if (rc < 0)
            return rc; /* FC_ECUDA with the driver's reason, set by device_cuda.cu */
        if (count < 1)
            return fc_error_set(FC_ECUDA, "device cuda requested, but no CUDA device is visible "
                                "(check CUDA_VISIBLE_DEVICES)");
        *out = FC_ENGINE_CUDA;
        return FC_OK;
    default:
        return fc_error_set(FC_EINVAL, "unknown engine %d", (int)requested);
    }
}
