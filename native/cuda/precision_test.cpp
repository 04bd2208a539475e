// The host conversions to float16 and bfloat16 the GPU kernels upload their data with: exact round trips,
// round-to-nearest-even, overflow, subnormals, NaN. Runs without a GPU.
#include "precision.hpp"

#include <cmath>
#include <cstdio>

using namespace dlbench::cuda;

namespace {
int failures = 0;

void expect(bool ok, const char *what, double value, unsigned got, unsigned want) {
    if (ok) return;
    ++failures;
    std::printf("FAIL %s(%.9g): got 0x%04x, want 0x%04x\n", what, value, got, want);
}

void half_is(float value, unsigned want) { expect(float_to_half(value) == want, "float_to_half", value, float_to_half(value), want); }
void bf16_is(float value, unsigned want) { expect(float_to_bf16(value) == want, "float_to_bf16", value, float_to_bf16(value), want); }
} // namespace

int main() {
    half_is(1.0f, 0x3c00);
    half_is(-2.0f, 0xc000);
    half_is(65504.0f, 0x7bff);
    half_is(65519.0f, 0x7bff);
    half_is(65520.0f, 0x7c00);         // halfway to 2^16 rounds to even: infinity
    half_is(1.0f + std::ldexp(1.0f, -11), 0x3c00);     // tie, even mantissa stays
    half_is(1.0f + 3 * std::ldexp(1.0f, -11), 0x3c02); // tie, odd mantissa rounds up
    half_is(std::ldexp(1.0f, -24), 0x0001);            // smallest subnormal
    half_is(std::ldexp(1.0f, -25), 0x0000);            // tie with zero: even
    half_is(std::ldexp(1.0f, -14), 0x0400);            // smallest normal
    half_is(std::ldexp(1023.0f, -24) + std::ldexp(1.0f, -25), 0x0400); // largest subnormal + half unit: even
    half_is(INFINITY, 0x7c00);
    expect((float_to_half(NAN) & 0x7fff) > 0x7c00, "float_to_half", NAN, float_to_half(NAN), 0x7e00);
    bf16_is(1.0f, 0x3f80);
    bf16_is(1.0f + std::ldexp(1.0f, -8), 0x3f80);
    bf16_is(1.0f + 3 * std::ldexp(1.0f, -8), 0x3f82);
    bf16_is(-0.5f, 0xbf00);
    expect((float_to_bf16(NAN) & 0x7fff) > 0x7f80, "float_to_bf16", NAN, float_to_bf16(NAN), 0x7fc0);
    for (unsigned bits = 0; bits < 0x10000; ++bits) { // every finite value survives the round trip
        auto h = static_cast<std::uint16_t>(bits);
        if ((bits & 0x7c00) != 0x7c00) half_is(half_to_float(h), bits);
        if ((bits & 0x7f80) != 0x7f80) bf16_is(bf16_to_float(h), bits);
    }
    if (failures == 0) std::printf("float16/bfloat16 conversions: ok\n");
    return failures == 0 ? 0 : 1;
}
