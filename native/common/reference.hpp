// Plain-loop reference implementations used by every verify mode, and the comparison helper.
// Layouts are the plain ONNX ones: NCHW activations, (K, C/group, kh, kw) weights, row-major matrices.
#pragma once

#include "shapes.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace dlbench::reference {

using Tensor = std::vector<float>;

// Deterministic values in [-1, 1) so verify failures reproduce.
Tensor random_tensor(dim size, std::uint32_t seed);

Tensor conv_forward(const ConvShape &s, const Tensor &src, const Tensor &weights);
Tensor conv_backward_data(const ConvShape &s, const Tensor &diff_dst, const Tensor &weights);
Tensor conv_backward_weights(const ConvShape &s, const Tensor &src, const Tensor &diff_dst);

// A is stored MxK (KxM when trans_a), B KxN (NxK when trans_b), C MxN; batches are contiguous.
Tensor gemm(const GemmShape &s, const Tensor &a, const Tensor &b);

// Average pooling excludes padded elements from the divisor (ONNX count_include_pad=0).
Tensor pool_forward(const PoolShape &s, bool max_pool, const Tensor &src);
// Max pooling routes each gradient to the first maximum of its window.
Tensor pool_backward(const PoolShape &s, bool max_pool, const Tensor &src, const Tensor &diff_dst);

struct BatchNormResult {
    Tensor dst, mean, variance, diff_scale, diff_shift;
};
// Training forward: batch statistics (biased variance); inference: the given mean/variance.
BatchNormResult batchnorm_forward(const BatchNormShape &s, const Tensor &src, const Tensor &scale,
                                  const Tensor &shift, const Tensor *mean, const Tensor *variance);
// Backward with batch statistics `mean`, `variance`: dst holds diff_src.
BatchNormResult batchnorm_backward(const BatchNormShape &s, const Tensor &src, const Tensor &diff_dst,
                                   const Tensor &scale, const Tensor &mean, const Tensor &variance);

Tensor relu_forward(const Tensor &src);
Tensor relu_backward(const Tensor &src, const Tensor &diff_dst);

// Print the largest error; true when every |got - want| <= atol + rtol * |want|.
bool compare(const std::string &what, const Tensor &got, const Tensor &want, double rtol = 1e-4,
             double atol = 1e-4);

} // namespace dlbench::reference
