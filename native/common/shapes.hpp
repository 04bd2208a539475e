// Operator geometry parsed from the canonical descriptors (dlbench/ops.py) and validated, shared by
// every kernel family and by the naive references.
#pragma once

#include "protocol.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace dlbench {

using dim = std::int64_t;

// Conv: N C H W K kernel_shape_0 kernel_shape_1 pads_0..3 strides_0 strides_1 dilations_0 dilations_1
// group mode; pads in ONNX order top, left, bottom, right.
struct ConvShape {
    dim n = 1, c = 1, h = 1, w = 1, k = 1, kh = 1, kw = 1;
    dim pad_top = 0, pad_left = 0, pad_bottom = 0, pad_right = 0;
    dim stride_h = 1, stride_w = 1, dilation_h = 1, dilation_w = 1, groups = 1;
    int mode = 0;
    dim oh = 0, ow = 0;

    void finish(); // validate and compute oh, ow; throws RowError
    dim src_size() const { return n * c * h * w; }
    dim weights_size() const { return k * (c / groups) * kh * kw; }
    dim dst_size() const { return n * k * oh * ow; }
    std::string describe() const;
};
ConvShape parse_conv(const Params &p);
extern const std::vector<std::string> kConvParams;

// Gemm/MatMul: M K N transA transB batch; C[b] = op(A[b]) @ op(B[b]), op(A) MxK, op(B) KxN.
struct GemmShape {
    dim m = 1, k = 1, n = 1, batch = 1;
    bool trans_a = false, trans_b = false;
    void finish();
    std::string describe() const;
};
GemmShape parse_gemm(const Params &p);
extern const std::vector<std::string> kGemmParams;

// MaxPool/AveragePool: N C H W kernel_shape_0 kernel_shape_1 pads_0..3 strides_0 strides_1 mode.
struct PoolShape {
    dim n = 1, c = 1, h = 1, w = 1, kh = 1, kw = 1;
    dim pad_top = 0, pad_left = 0, pad_bottom = 0, pad_right = 0, stride_h = 1, stride_w = 1;
    int mode = 0;
    dim oh = 0, ow = 0;
    void finish();
    dim src_size() const { return n * c * h * w; }
    dim dst_size() const { return n * c * oh * ow; }
    std::string describe() const;
};
PoolShape parse_pool(const Params &p);
extern const std::vector<std::string> kPoolParams;

// BatchNormalization: N C H W epsilon momentum mode (0 fwd training, 1 bwd, 2 fwd inference).
struct BatchNormShape {
    dim n = 1, c = 1, h = 1, w = 1;
    double epsilon = 1e-5, momentum = 0.9;
    int mode = 0;
    void finish();
    dim size() const { return n * c * h * w; }
};
BatchNormShape parse_batchnorm(const Params &p);
extern const std::vector<std::string> kBatchNormParams;

// Relu (and other element-wise operators): N C H W mode (0 fwd, 1 bwd).
struct ElementwiseShape {
    dim n = 1, c = 1, h = 1, w = 1;
    int mode = 0;
    dim size() const { return n * c * h * w; }
};
ElementwiseShape parse_elementwise(const Params &p);
extern const std::vector<std::string> kElementwiseParams;

// Refuse problems whose buffers would not fit a sane allocation (guards against typos like 1e9).
void require_reasonable_size(dim elements, const std::string &what);

} // namespace dlbench
