// The dtype and float32 math of a CUDA benchmark (DLBENCH_DTYPE, DLBENCH_FP32_MATH), host conversions to
// the device's 16-bit formats, and the verify tolerance each precision earns.
#pragma once

#include "protocol.hpp"
#include "reference.hpp"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace dlbench::cuda {

enum class DType { f32, f16, bf16 };

struct Precision {
    DType dtype = DType::f32;
    bool tf32 = false; // float32 data, TF32 tensor cores allowed (float32 only)

    std::string label() const {
        if (dtype == DType::f16) return "float16";
        if (dtype == DType::bf16) return "bfloat16";
        return tf32 ? "float32 (TF32 math)" : "float32 (IEEE math)";
    }
    size_t element_bytes() const { return dtype == DType::f32 ? 4 : 2; }
};

// DLBENCH_DTYPE and DLBENCH_FP32_MATH as this kernel computes them; `framework_tf32`: what fp32_math=framework
// means for this operator (PyTorch's default: cuDNN convolutions may use TF32, matmuls may not).
inline Precision precision_from(const Settings &settings, bool framework_tf32) {
    Precision p;
    if (settings.dtype == "float32") {
        p.dtype = DType::f32;
    } else if (settings.dtype == "float16") {
        p.dtype = DType::f16;
    } else if (settings.dtype == "bfloat16") {
        p.dtype = DType::bf16;
    } else {
        throw FatalError(kExitUsage, "DLBENCH_DTYPE='" + settings.dtype + "' must be float32, float16 or bfloat16");
    }
    if (p.dtype == DType::f32)
        p.tf32 = settings.fp32_math == "tf32" || (settings.fp32_math == "framework" && framework_tf32);
    return p;
}

inline std::uint16_t float_to_bf16(float value) {
    std::uint32_t bits = 0;
    std::memcpy(&bits, &value, 4);
    if ((bits & 0x7fffffffu) > 0x7f800000u) return 0x7fc0; // NaN
    bits += 0x7fffu + ((bits >> 16) & 1u);                  // round to nearest even
    return static_cast<std::uint16_t>(bits >> 16);
}

inline float bf16_to_float(std::uint16_t value) {
    std::uint32_t bits = std::uint32_t(value) << 16;
    float out = 0;
    std::memcpy(&out, &bits, 4);
    return out;
}

inline std::uint16_t float_to_half(float value) {
    std::uint32_t x = 0;
    std::memcpy(&x, &value, 4);
    const std::uint32_t sign = (x >> 16) & 0x8000u;
    std::uint32_t magnitude = x & 0x7fffffffu;
    if (magnitude >= 0x7f800000u) return static_cast<std::uint16_t>(sign | 0x7c00u | (magnitude > 0x7f800000u ? 0x200u : 0));
    if (magnitude >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u); // rounds to infinity
    if (magnitude < 0x38800000u) { // below 2^-14: a subnormal half (units of 2^-24) or zero
        float absolute = 0;
        std::memcpy(&absolute, &magnitude, 4);
        return static_cast<std::uint16_t>(sign | static_cast<std::uint32_t>(std::nearbyint(absolute * 16777216.0f)));
    }
    magnitude += 0xc8000fffu + ((magnitude >> 13) & 1u); // exponent bias 127 -> 15, round to nearest even
    return static_cast<std::uint16_t>(sign | (magnitude >> 13));
}

inline float half_to_float(std::uint16_t value) {
    const std::uint32_t sign = std::uint32_t(value & 0x8000u) << 16;
    const std::uint32_t exponent = (value >> 10) & 0x1fu, mantissa = value & 0x3ffu;
    if (exponent == 0) {
        float small = std::ldexp(static_cast<float>(mantissa), -24);
        return sign ? -small : small;
    }
    std::uint32_t bits = exponent == 31 ? sign | 0x7f800000u | (mantissa << 13)
                                        : sign | ((exponent + 112u) << 23) | (mantissa << 13);
    float out = 0;
    std::memcpy(&out, &bits, 4);
    return out;
}

// `host` as the bytes of the dtype (float32 unchanged).
inline std::vector<unsigned char> encode(DType dtype, const reference::Tensor &host) {
    std::vector<unsigned char> bytes(host.size() * (dtype == DType::f32 ? 4 : 2));
    if (dtype == DType::f32) {
        if (!host.empty()) std::memcpy(bytes.data(), host.data(), bytes.size());
        return bytes;
    }
    for (size_t i = 0; i < host.size(); ++i) {
        std::uint16_t v = dtype == DType::f16 ? float_to_half(host[i]) : float_to_bf16(host[i]);
        std::memcpy(bytes.data() + 2 * i, &v, 2);
    }
    return bytes;
}

inline reference::Tensor decode(DType dtype, const std::vector<unsigned char> &bytes) {
    reference::Tensor out(bytes.size() / (dtype == DType::f32 ? 4 : 2));
    if (dtype == DType::f32) {
        if (!out.empty()) std::memcpy(out.data(), bytes.data(), out.size() * 4);
        return out;
    }
    for (size_t i = 0; i < out.size(); ++i) {
        std::uint16_t v = 0;
        std::memcpy(&v, bytes.data() + 2 * i, 2);
        out[i] = dtype == DType::f16 ? half_to_float(v) : bf16_to_float(v);
    }
    return out;
}

// The values the device holds after `encode`: the naive reference computes on these.
inline reference::Tensor rounded(DType dtype, const reference::Tensor &host) {
    return dtype == DType::f32 ? host : decode(dtype, encode(dtype, host));
}

struct Tolerance {
    double rtol, atol;
};

// What a correct kernel of this precision may differ from the double-accumulated reference on the verify
// problems (inputs in [-1, 1), sums of at most a few hundred products, the inputs already rounded to the
// dtype): IEEE float32 reorders sums; TF32 rounds each input to 10 mantissa bits; float16 and bfloat16 round
// the output to 10 and 7 mantissa bits (accumulating in float32).
inline Tolerance tolerance(const Precision &p) {
    if (p.dtype == DType::f16) return {5e-3, 1e-2};
    if (p.dtype == DType::bf16) return {2e-2, 3e-2};
    if (p.tf32) return {5e-3, 2e-2};
    return {1e-3, 1e-3};
}

} // namespace dlbench::cuda
