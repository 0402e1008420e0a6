// pin.cpp — page-locking host memory for GPUs through the CUDA runtime, loaded with dlopen
// so that libcxlkit neither links CUDA nor pretends when it is absent.
#include <dlfcn.h>

#include <cerrno>
#include <mutex>

#include "cxlkit.h"

namespace cxk {
namespace {

// Signatures of the three CUDA runtime entry points used (cudaError_t is an int enum).
using GetDeviceCount = int (*)(int *);
using HostRegister = int (*)(void *, size_t, unsigned);
using HostUnregister = int (*)(void *);

struct Cuda {
    GetDeviceCount device_count = nullptr;
    HostRegister host_register = nullptr;
    HostUnregister host_unregister = nullptr;
    bool usable = false;
};

const Cuda &cuda() {
    static Cuda c;
    static std::once_flag once;
    std::call_once(once, [] {
        const char *names[] = {"libcudart.so", "libcudart.so.13", "libcudart.so.12",
                               "libcudart.so.11.0"};
        void *h = nullptr;
        for (const char *n : names)
            if ((h = dlopen(n, RTLD_NOW | RTLD_LOCAL))) break;
        if (!h) return;
        c.device_count = reinterpret_cast<GetDeviceCount>(dlsym(h, "cudaGetDeviceCount"));
        c.host_register = reinterpret_cast<HostRegister>(dlsym(h, "cudaHostRegister"));
        c.host_unregister = reinterpret_cast<HostUnregister>(dlsym(h, "cudaHostUnregister"));
        int n = 0;
        c.usable = c.device_count && c.host_register && c.host_unregister &&
                   c.device_count(&n) == 0 && n > 0;
    });
    return c;
}

constexpr unsigned kCudaHostRegisterPortable = 1;

}  // namespace
}  // namespace cxk

extern "C" {

int cxk_pin_available(void) { return cxk::cuda().usable ? 1 : -ENODEV; }

int cxk_pin(void *addr, size_t nbytes) {
    if (!addr || nbytes == 0) return -EINVAL;
    const auto &c = cxk::cuda();
    if (!c.usable) return -ENODEV;
    return c.host_register(addr, nbytes, cxk::kCudaHostRegisterPortable) == 0 ? 0 : -EIO;
}

int cxk_unpin(void *addr) {
    if (!addr) return -EINVAL;
    const auto &c = cxk::cuda();
    if (!c.usable) return -ENODEV;
    return c.host_unregister(addr) == 0 ? 0 : -EIO;
}

}  // extern "C"
