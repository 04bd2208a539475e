// Shared CUDA plumbing for the GPU benchmarks: status checks that turn library errors into row errors,
// the device check (exit code kExitNoDevice without a GPU), device buffers and event timing.
#pragma once

#include "protocol.hpp"
#include "reference.hpp"

#include <cuda_runtime.h>

#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

namespace dlbench::cuda {

inline void check_cuda(cudaError_t status, const std::string &what) {
    if (status != cudaSuccess)
        throw RowError(what + ": " + cudaGetErrorName(status) + " (" + cudaGetErrorString(status) + ")");
}

// Needs a usable CUDA device (the dtype is checked by precision_from).
inline void setup_gpu(const std::string &program, const Settings &) {
    int count = 0;
    cudaError_t status = cudaGetDeviceCount(&count);
    if (status != cudaSuccess || count == 0)
        throw FatalError(kExitNoDevice,
                         program + " needs an NVIDIA GPU, and this machine has none usable (" +
                             (status != cudaSuccess ? std::string(cudaGetErrorString(status)) : "0 devices") +
                             "); run it on a machine with a GPU and driver");
    check_cuda(cudaSetDevice(0), "cudaSetDevice(0)");
}

// Bytes free on the current device.
inline double available_device_bytes() {
    size_t free_bytes = 0, total_bytes = 0;
    check_cuda(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo");
    return static_cast<double>(free_bytes);
}

// An owning device buffer of floats.
class DeviceBuffer {
public:
    DeviceBuffer() = default;
    explicit DeviceBuffer(size_t count) : count_(count) {
        if (count > 0) check_cuda(cudaMalloc(&data_, count * sizeof(float)), "cudaMalloc of " + std::to_string(count) + " floats");
    }
    explicit DeviceBuffer(const reference::Tensor &host) : DeviceBuffer(host.size()) { upload(host); }
    DeviceBuffer(const DeviceBuffer &) = delete;
    DeviceBuffer &operator=(const DeviceBuffer &) = delete;
    DeviceBuffer(DeviceBuffer &&other) noexcept : data_(other.data_), count_(other.count_) { other.data_ = nullptr; }
    DeviceBuffer &operator=(DeviceBuffer &&other) noexcept {
        std::swap(data_, other.data_);
        std::swap(count_, other.count_);
        return *this;
    }
    ~DeviceBuffer() {
        if (data_ != nullptr) cudaFree(data_);
    }
    float *get() const { return static_cast<float *>(data_); }
    size_t size() const { return count_; }
    void upload(const reference::Tensor &host) {
        check_cuda(cudaMemcpy(data_, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice), "upload");
    }
    reference::Tensor download() const {
        reference::Tensor host(count_);
        check_cuda(cudaMemcpy(host.data(), data_, count_ * sizeof(float), cudaMemcpyDeviceToHost), "download");
        return host;
    }

private:
    void *data_ = nullptr;
    size_t count_ = 0;
};

// An owning raw device allocation (workspaces, tensors of any dtype).
class DeviceBytes {
public:
    DeviceBytes() = default;
    explicit DeviceBytes(size_t bytes) : bytes_(bytes) {
        if (bytes > 0) check_cuda(cudaMalloc(&data_, bytes), "cudaMalloc of " + std::to_string(bytes) + " bytes");
    }
    explicit DeviceBytes(const std::vector<unsigned char> &host) : DeviceBytes(host.size()) {
        if (!host.empty())
            check_cuda(cudaMemcpy(data_, host.data(), host.size(), cudaMemcpyHostToDevice), "upload");
    }
    DeviceBytes(const DeviceBytes &) = delete;
    DeviceBytes &operator=(const DeviceBytes &) = delete;
    DeviceBytes(DeviceBytes &&other) noexcept : data_(other.data_), bytes_(other.bytes_) { other.data_ = nullptr; }
    DeviceBytes &operator=(DeviceBytes &&other) noexcept {
        std::swap(data_, other.data_);
        std::swap(bytes_, other.bytes_);
        return *this;
    }
    ~DeviceBytes() {
        if (data_ != nullptr) cudaFree(data_);
    }
    void *get() const { return data_; }
    size_t size() const { return bytes_; }
    std::vector<unsigned char> download() const {
        std::vector<unsigned char> host(bytes_);
        if (bytes_ > 0) check_cuda(cudaMemcpy(host.data(), data_, bytes_, cudaMemcpyDeviceToHost), "download");
        return host;
    }

private:
    void *data_ = nullptr;
    size_t bytes_ = 0;
};

// Time `launch()` (asynchronous work on the default stream) with CUDA events around each repetition.
template <typename F> TimeStats time_with_events(const Settings &settings, F &&launch) {
    cudaEvent_t start = nullptr, stop = nullptr;
    check_cuda(cudaEventCreate(&start), "cudaEventCreate");
    check_cuda(cudaEventCreate(&stop), "cudaEventCreate");
    struct Cleanup {
        cudaEvent_t a, b;
        ~Cleanup() {
            cudaEventDestroy(a);
            cudaEventDestroy(b);
        }
    } cleanup{start, stop};
    return measure_repetitions(settings, [&] {
        check_cuda(cudaEventRecord(start), "cudaEventRecord");
        launch();
        check_cuda(cudaEventRecord(stop), "cudaEventRecord");
        check_cuda(cudaEventSynchronize(stop), "kernel execution");
        float ms = 0.0f;
        check_cuda(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
        return static_cast<double>(ms);
    });
}

} // namespace dlbench::cuda
