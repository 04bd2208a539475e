// Parsing and validation of operator geometry from canonical descriptors.
#include "shapes.hpp"

#include <sstream>

namespace dlbench {

const std::vector<std::string> kConvParams = {
    "N", "C", "H", "W", "K", "kernel_shape_0", "kernel_shape_1", "pads_0", "pads_1", "pads_2", "pads_3",
    "strides_0", "strides_1", "dilations_0", "dilations_1", "group", "mode"};
const std::vector<std::string> kGemmParams = {"M", "K", "N", "transA", "transB", "batch"};
const std::vector<std::string> kPoolParams = {"N",      "C",      "H",      "W",         "kernel_shape_0",
                                              "kernel_shape_1", "pads_0", "pads_1", "pads_2", "pads_3",
                                              "strides_0", "strides_1", "mode"};
const std::vector<std::string> kBatchNormParams = {"N", "C", "H", "W", "epsilon", "momentum", "mode"};
const std::vector<std::string> kElementwiseParams = {"N", "C", "H", "W", "mode"};

namespace {
constexpr dim kMaxElements = dim(1) << 32; // 16 GiB of float32 per tensor

int parse_mode(const Params &p, int modes) {
    auto mode = p.integer("mode");
    require(mode >= 0 && mode < modes, "mode=" + std::to_string(mode) + " must be 0.." + std::to_string(modes - 1));
    return static_cast<int>(mode);
}

bool parse_flag(const Params &p, const std::string &name) {
    auto value = p.integer(name);
    require(value == 0 || value == 1, name + "=" + std::to_string(value) + " must be 0 or 1");
    return value == 1;
}
} // namespace

void require_reasonable_size(dim elements, const std::string &what) {
    require(elements > 0 && elements <= kMaxElements,
            what + " has " + std::to_string(elements) + " elements, over the limit of " +
                std::to_string(kMaxElements));
}

void ConvShape::finish() {
    require(c % groups == 0, "C=" + std::to_string(c) + " is not divisible by group=" + std::to_string(groups));
    require(k % groups == 0, "K=" + std::to_string(k) + " is not divisible by group=" + std::to_string(groups));
    dim eff_h = dilation_h * (kh - 1) + 1, eff_w = dilation_w * (kw - 1) + 1;
    dim padded_h = h + pad_top + pad_bottom, padded_w = w + pad_left + pad_right;
    require(eff_h <= padded_h && eff_w <= padded_w,
            "kernel " + std::to_string(eff_h) + "x" + std::to_string(eff_w) +
                " (with dilation) is larger than the padded input " + std::to_string(padded_h) + "x" +
                std::to_string(padded_w));
    oh = (padded_h - eff_h) / stride_h + 1;
    ow = (padded_w - eff_w) / stride_w + 1;
    require_reasonable_size(src_size(), "input");
    require_reasonable_size(weights_size(), "weights");
    require_reasonable_size(dst_size(), "output");
}

std::string ConvShape::describe() const {
    std::ostringstream s;
    s << "N" << n << " C" << c << " H" << h << " W" << w << " K" << k << " k" << kh << "x" << kw << " pad"
      << pad_top << "," << pad_left << "," << pad_bottom << "," << pad_right << " s" << stride_h << "x"
      << stride_w << " d" << dilation_h << "x" << dilation_w << " g" << groups << " mode" << mode;
    return s.str();
}

ConvShape parse_conv(const Params &p) {
    ConvShape s;
    s.n = p.positive("N");
    s.c = p.positive("C");
    s.h = p.positive("H");
    s.w = p.positive("W");
    s.k = p.positive("K");
    s.kh = p.positive("kernel_shape_0");
    s.kw = p.positive("kernel_shape_1");
    s.pad_top = p.non_negative("pads_0");
    s.pad_left = p.non_negative("pads_1");
    s.pad_bottom = p.non_negative("pads_2");
    s.pad_right = p.non_negative("pads_3");
    s.stride_h = p.positive("strides_0");
    s.stride_w = p.positive("strides_1");
    s.dilation_h = p.positive("dilations_0");
    s.dilation_w = p.positive("dilations_1");
    s.groups = p.positive("group");
    s.mode = parse_mode(p, 3);
    s.finish();
    return s;
}

void GemmShape::finish() {
    require_reasonable_size(batch * m * k, "A");
    require_reasonable_size(batch * k * n, "B");
    require_reasonable_size(batch * m * n, "C");
}

std::string GemmShape::describe() const {
    std::ostringstream s;
    s << "M" << m << " K" << k << " N" << n << " tA" << trans_a << " tB" << trans_b << " batch" << batch;
    return s.str();
}

GemmShape parse_gemm(const Params &p) {
    GemmShape s;
    s.m = p.positive("M");
    s.k = p.positive("K");
    s.n = p.positive("N");
    s.trans_a = parse_flag(p, "transA");
    s.trans_b = parse_flag(p, "transB");
    s.batch = p.positive("batch");
    s.finish();
    return s;
}

void PoolShape::finish() {
    require(pad_top < kh && pad_bottom < kh && pad_left < kw && pad_right < kw,
            "pads must be smaller than the kernel " + std::to_string(kh) + "x" + std::to_string(kw));
    dim padded_h = h + pad_top + pad_bottom, padded_w = w + pad_left + pad_right;
    require(kh <= padded_h && kw <= padded_w,
            "kernel " + std::to_string(kh) + "x" + std::to_string(kw) + " is larger than the padded input " +
                std::to_string(padded_h) + "x" + std::to_string(padded_w));
    oh = (padded_h - kh) / stride_h + 1;
    ow = (padded_w - kw) / stride_w + 1;
    require_reasonable_size(src_size(), "input");
    require_reasonable_size(dst_size(), "output");
}

std::string PoolShape::describe() const {
    std::ostringstream s;
    s << "N" << n << " C" << c << " H" << h << " W" << w << " k" << kh << "x" << kw << " pad" << pad_top << ","
      << pad_left << "," << pad_bottom << "," << pad_right << " s" << stride_h << "x" << stride_w << " mode"
      << mode;
    return s.str();
}

PoolShape parse_pool(const Params &p) {
    PoolShape s;
    s.n = p.positive("N");
    s.c = p.positive("C");
    s.h = p.positive("H");
    s.w = p.positive("W");
    s.kh = p.positive("kernel_shape_0");
    s.kw = p.positive("kernel_shape_1");
    s.pad_top = p.non_negative("pads_0");
    s.pad_left = p.non_negative("pads_1");
    s.pad_bottom = p.non_negative("pads_2");
    s.pad_right = p.non_negative("pads_3");
    s.stride_h = p.positive("strides_0");
    s.stride_w = p.positive("strides_1");
    s.mode = parse_mode(p, 2);
    s.finish();
    return s;
}

void BatchNormShape::finish() {
    require(epsilon > 0, "epsilon=" + std::to_string(epsilon) + " must be > 0");
    require_reasonable_size(size(), "input");
}

BatchNormShape parse_batchnorm(const Params &p) {
    BatchNormShape s;
    s.n = p.positive("N");
    s.c = p.positive("C");
    s.h = p.positive("H");
    s.w = p.positive("W");
    s.epsilon = p.real("epsilon");
    s.momentum = p.real("momentum");
    s.mode = parse_mode(p, 3);
    s.finish();
    return s;
}

ElementwiseShape parse_elementwise(const Params &p) {
    ElementwiseShape s;
    s.n = p.positive("N");
    s.c = p.positive("C");
    s.h = p.positive("H");
    s.w = p.positive("W");
    s.mode = parse_mode(p, 2);
    require_reasonable_size(s.size(), "input");
    return s;
}

} // namespace dlbench
