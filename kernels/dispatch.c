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
    static const char no_cuda[] = "device cuda requested, but this fsdpconv was built without "
                                  "CUDA support (rebuild with make CUDA=1)";
    static const char no_device[] = "device cuda requested, but no CUDA device is visible "
                                    "(check CUDA_VISIBLE_DEVICES)";
    int count = 0;
    int rc;

    if (requested == FC_ENGINE_CPU) {
        *out = FC_ENGINE_CPU;
        return FC_OK;
    }
    if (requested == FC_ENGINE_AUTO) {
        *out = fc_cuda_available() ? FC_ENGINE_CUDA : FC_ENGINE_CPU;
        return FC_OK;
    }
    if (requested != FC_ENGINE_CUDA)
        return fc_error_set(FC_EINVAL, "unknown engine %d", (int)requested);
    rc = fc_cuda_device_count(&count);
    if (rc == FC_ENOTSUP)
        return fc_error_set(FC_ENOTSUP, "%s", no_cuda);
    if (rc < 0)
        return rc; /* FC_ECUDA with the driver's reason, set by device_cuda.cu */
    if (count < 1)
        return fc_error_set(FC_ECUDA, "%s", no_device);
    *out = FC_ENGINE_CUDA;
    return FC_OK;
}
