// A layer as the arena planner sees it: which kernel, which tensors it reads and writes, and
// whether its output may share its input's bytes (a view such as flatten always does; an
// elementwise op may take over an input that dies there; a windowed per-channel op may too,
// starting in_place_lag levels before it). Built from a kernel's params, so the shapes the
// planner uses are the ones the kernel runs with; `consistent` checks them against the
// model's tensor table (the exported header static_asserts it per layer). A layer whose
// kernel needs scratch names a tensor of the table for it, alive during that layer only.
#pragma once

#include <cstddef>

#include "versatil/firmware/add.hpp"
#include "versatil/firmware/avg_pool2d.hpp"
#include "versatil/firmware/clamp.hpp"
#include "versatil/firmware/convolution/conv2d.hpp"
#include "versatil/firmware/data_movement/concat.hpp"
#include "versatil/firmware/data_movement/pad.hpp"
#include "versatil/firmware/data_movement/permute.hpp"
#include "versatil/firmware/elementwise/lookup.hpp"
#include "versatil/firmware/elementwise/mul.hpp"
#include "versatil/firmware/elementwise/softmax.hpp"
#include "versatil/firmware/in_place.hpp"
#include "versatil/firmware/fully_connected/linear.hpp"
#include "versatil/firmware/max_pool2d.hpp"
#include "versatil/firmware/shape.hpp"

namespace versatil::firmware {

enum class layer_kind : unsigned char {
    conv2d, linear, add, clamp, max_pool2d, avg_pool2d, flatten, lookup, mul, softmax, concat, permute, pad
};

inline constexpr int max_layer_inputs = max_concat_parts;

enum class aliasing : unsigned char {
    none,         // the output needs bytes of its own
    view,         // the output is the input's bytes (flatten)
    elementwise,  // element i read before element i is written: any input dying here can hold the output
    windowed,     // per channel, in order: input 0 can hold the output, starting `lag` levels earlier
};

struct layer {
    layer_kind kind{};
    int inputs[max_layer_inputs] = {-1, -1, -1, -1};
    int output = -1;
    shape input_shapes[max_layer_inputs] = {};
    shape output_shape;
    aliasing alias = aliasing::none;
    std::ptrdiff_t lag = 0;  // windowed: in_place_lag, or not_in_place
    bool geometry_ok = false;  // the kernel's own shapes agree (window, groups, element counts)
    int scratch = -1;                // the tensor the kernel works in, or none
    std::size_t scratch_bytes = 0;   // what the kernel needs of it

    constexpr int input_count() const noexcept {
        int count = 0;
        while (count < max_layer_inputs && inputs[count] >= 0) ++count;
        return count;
    }
};

// The layer, its kernel working in tensor `tensor` of at least `bytes` bytes.
constexpr layer with_scratch(layer l, int tensor, std::size_t bytes) noexcept {
    l.scratch = tensor;
    l.scratch_bytes = bytes;
    return l;
}

constexpr layer layer_of(const conv2d_params& p, int input, int output) noexcept {
    const bool depthwise = p.groups == p.input.channels && p.groups == p.output.channels;
    const bool ok = well_formed(p.win) && p.groups >= 1 && p.input.channels % p.groups == 0 &&
                    p.output.channels % p.groups == 0 && output_shape(p.input, p.win, p.output.channels) == p.output &&
                    p.output.elements() > 0;
    return {layer_kind::conv2d, {input, -1, -1, -1}, output, {p.input, {}}, p.output,
            depthwise ? aliasing::windowed : aliasing::none, depthwise ? in_place_lag(p.input, p.output, p.win) : 0, ok};
}

constexpr layer layer_of(const linear_params& p, int input, int output) noexcept {
    return {layer_kind::linear, {input, -1, -1, -1}, output, {{p.in_features, 1, 1}, {}}, {p.out_features, 1, 1},
            aliasing::none, 0, p.in_features > 0 && p.out_features > 0};
}

constexpr layer layer_of(const add_params& p, shape s, int input1, int input2, int output) noexcept {
    return {layer_kind::add, {input1, input2, -1, -1}, output, {s, s}, s, aliasing::elementwise, 0,
            p.elements == s.elements() && s.elements() > 0};
}

constexpr layer layer_of(const clamp_params& p, shape s, int input, int output) noexcept {
    return {layer_kind::clamp, {input, -1, -1, -1}, output, {s, {}}, s, aliasing::elementwise, 0,
            p.elements == s.elements() && s.elements() > 0};
}

constexpr layer layer_of(const max_pool2d_params& p, int input, int output) noexcept {
    return {layer_kind::max_pool2d, {input, -1, -1, -1}, output, {p.input, {}}, p.output, aliasing::windowed,
            in_place_lag(p.input, p.output, p.win),
            well_formed(p.win) && output_shape(p.input, p.win, p.input.channels) == p.output && p.output.elements() > 0};
}

constexpr layer layer_of(const avg_pool2d_params& p, int input, int output) noexcept {
    return {layer_kind::avg_pool2d, {input, -1, -1, -1}, output, {p.input, {}}, p.output, aliasing::windowed,
            in_place_lag(p.input, p.output, p.win),
            well_formed(p.win) && p.win.dilation_h == 1 && p.win.dilation_w == 1 &&
                output_shape(p.input, p.win, p.input.channels) == p.output && p.output.elements() > 0};
}

// {c, h, w} -> {c*h*w, 1, 1}: no kernel, the same bytes.
constexpr layer flatten_layer(shape input, int input_tensor, int output_tensor) noexcept {
    return {layer_kind::flatten, {input_tensor, -1, -1, -1}, output_tensor, {input, {}}, {input.elements(), 1, 1},
            aliasing::view, 0, input.elements() > 0};
}

// Any reshape (view, flatten, squeeze, unsqueeze) keeps the bytes in their order: no kernel.
constexpr layer reshape_layer(shape input, shape output, int input_tensor, int output_tensor) noexcept {
    return {layer_kind::flatten, {input_tensor, -1, -1, -1}, output_tensor, {input, {}}, output, aliasing::view, 0,
            input.elements() > 0 && input.elements() == output.elements()};
}

constexpr layer layer_of(const lookup_params& p, shape s, int input, int output) noexcept {
    return {layer_kind::lookup, {input, -1, -1, -1}, output, {s, {}}, s, aliasing::elementwise, 0,
            p.elements == s.elements() && s.elements() > 0};
}

// Only the first input has the output's shape: only it may hold the output (layer::alias).
constexpr layer layer_of(const mul_params& p, int input1, int input2, int output) noexcept {
    return {layer_kind::mul, {input1, input2, -1, -1}, output, {p.output, p.input2}, p.output, aliasing::elementwise,
            0, broadcastable(p) && p.output.elements() > 0};
}

constexpr layer layer_of(const softmax_params& p, int input, int output) noexcept {
    return {layer_kind::softmax, {input, -1, -1, -1}, output, {p.input, {}}, p.input, aliasing::none, 0,
            p.input.elements() > 0};
}

// A concatenation of the tensors `parts` into `output`, shapes read from the model's table:
// every part's runs must cover it exactly and the parts the output.
constexpr layer layer_of(const concat_params& p, const shape* tensors, const int* parts, int output) noexcept {
    layer l{layer_kind::concat, {-1, -1, -1, -1}, output, {}, tensors[output], aliasing::none, 0, false};
    int total = 0;
    bool ok = p.parts >= 1 && p.parts <= max_concat_parts && p.outer >= 1;
    for (int k = 0; ok && k < p.parts; ++k) {
        const shape part = tensors[parts[k]];
        l.inputs[k] = parts[k];
        l.input_shapes[k] = part;
        ok = p.run[k] >= 1 && p.run[k] * p.outer == part.elements();
        total += part.elements();
    }
    l.geometry_ok = ok && total == tensors[output].elements();
    return l;
}

constexpr layer layer_of(const pad_params& p, int input, int output) noexcept {
    return {layer_kind::pad, {input, -1, -1, -1}, output, {p.input, {}}, p.output, aliasing::none, 0, padding_fits(p)};
}

constexpr layer layer_of(const permute_params& p, int input, int output) noexcept {
    return {layer_kind::permute, {input, -1, -1, -1}, output, {p.input, {}}, p.output, aliasing::none, 0,
            axes_match(p) && p.input.elements() > 0};
}

// The layer's shapes are its tensors' shapes, and its own geometry holds.
constexpr bool consistent(const layer& l, const shape* tensors, std::size_t tensor_count) noexcept {
    const auto in_table = [&](int t) { return t >= 0 && static_cast<std::size_t>(t) < tensor_count; };
    if (!l.geometry_ok || !in_table(l.output) || !(tensors[l.output] == l.output_shape)) return false;
    for (int i = 0; i < l.input_count(); ++i)
        if (!in_table(l.inputs[i]) || !(tensors[l.inputs[i]] == l.input_shapes[i])) return false;
    if (l.scratch >= 0 && (!in_table(l.scratch) || tensors[l.scratch].bytes() < l.scratch_bytes)) return false;
    return true;
}

}  // namespace versatil::firmware
