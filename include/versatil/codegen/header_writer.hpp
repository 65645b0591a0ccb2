// Writes a lowered integer graph as one C++ header for the firmware runtime: constexpr int8
// weights, int32 biases, multipliers and shifts, each layer's kernel params, the tensor
// table and the layer list, the arena plan computed from them while compiling (the same
// planner as plan_arena here), static_asserts on every layer's shapes and array sizes, and
// `model` (issue 11's API): sizes, io quantization, arena_bytes and run(), one kernel call
// per layer, so the compiler instantiates only the kernels the model uses.
#pragma once

#include <cctype>
#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <variant>
#include <vector>

#include "versatil/codegen/figures.hpp"
#include "versatil/codegen/integer_graph.hpp"
#include "versatil/codegen/lower.hpp"

namespace versatil::codegen {

namespace detail {

inline std::string number(double value) {
    char text[40];
    std::snprintf(text, sizeof text, "%.17g", value);
    return text;
}

inline std::string shape_literal(const firmware::shape& s) {
    return "{" + std::to_string(s.channels) + ", " + std::to_string(s.height) + ", " + std::to_string(s.width) + "}";
}

inline std::string window_literal(const firmware::window& w) {
    return "{" + std::to_string(w.kernel_h) + ", " + std::to_string(w.kernel_w) + ", " + std::to_string(w.stride_h) +
           ", " + std::to_string(w.stride_w) + ", " + std::to_string(w.padding_h) + ", " + std::to_string(w.padding_w) +
           ", " + std::to_string(w.dilation_h) + ", " + std::to_string(w.dilation_w) + "}";
}

inline std::string range_literal(const firmware::activation_range& r) {
    return "{" + std::to_string(r.min) + ", " + std::to_string(r.max) + "}";
}

inline std::string multiplier_literal(const math::fixed_point_multiplier& m) {
    return "{" + std::to_string(m.multiplier) + ", " + std::to_string(m.shift) + "}";
}

template <class T, class Format>
std::string array_literal(const std::vector<T>& values, std::size_t per_line, Format format) {
    std::string text = "{";
    for (std::size_t i = 0; i < values.size(); ++i) {
        text += i % per_line == 0 ? "\n    " : " ";
        text += format(values[i]);
        text += ",";
    }
    return text + "\n}";
}

inline bool is_identifier(std::string_view name) {
    static constexpr std::string_view keywords[] = {
        "alignas", "alignof", "and", "and_eq", "asm", "auto", "bitand", "bitor", "bool", "break", "case", "catch",
        "char", "char8_t", "char16_t", "char32_t", "class", "compl", "concept", "const", "consteval", "constexpr",
        "constinit", "const_cast", "continue", "co_await", "co_return", "co_yield", "decltype", "default", "delete",
        "do", "double", "dynamic_cast", "else", "enum", "explicit", "export", "extern", "false", "float", "for",
        "friend", "goto", "if", "inline", "int", "long", "mutable", "namespace", "new", "noexcept", "not", "not_eq",
        "nullptr", "operator", "or", "or_eq", "private", "protected", "public", "register", "reinterpret_cast",
        "requires", "return", "short", "signed", "sizeof", "static", "static_assert", "static_cast", "struct",
        "switch", "template", "this", "thread_local", "throw", "true", "try", "typedef", "typeid", "typename",
        "union", "unsigned", "using", "virtual", "void", "volatile", "wchar_t", "while", "xor", "xor_eq", "std"};
    if (name.empty() || std::isdigit(static_cast<unsigned char>(name[0])) || name.find("__") != std::string_view::npos ||
        (name[0] == '_' && name.size() > 1 && std::isupper(static_cast<unsigned char>(name[1]))))
        return false;
    for (char c : name)
        if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') return false;
    for (std::string_view keyword : keywords)
        if (name == keyword) return false;
    return true;
}

// The kernel a layer's call names: the convolution or linear kernel chosen for it, the op's own
// kernel otherwise.
inline const char* kernel_name(const lowered_layer& layer) {
    static constexpr const char* names[] = {"conv2d", "linear", "add", "clamp", "max_pool2d", "avg_pool2d", "flatten"};
    if (std::holds_alternative<firmware::conv2d_params>(layer.params)) return firmware::name(layer.kernel);
    if (std::holds_alternative<firmware::linear_params>(layer.params)) return firmware::name(layer.linear_kernel);
    return names[layer.params.index()];
}

inline bool overlaps(const firmware::placement& a, std::size_t a_bytes, const firmware::placement& b, std::size_t b_bytes) {
    return a.external == b.external && a.offset < b.offset + b_bytes && b.offset < a.offset + a_bytes;
}

// The declarations of one layer: its arrays and its params, named by its index.
inline std::string layer_definition(const lowered_layer& layer, std::size_t index) {
    const std::string n = std::to_string(index);
    std::string text = "// layer " + n + ": " + layer.module + " (" + op_kind_name(layer.source) + ")";
    for (const std::string& fused : layer.fused) text += ", clamp " + fused + " fused";
    if (std::holds_alternative<firmware::linear_params>(layer.params))
        text += std::string("; kernel ") + firmware::name(layer.linear_kernel);
    if (std::holds_alternative<firmware::conv2d_params>(layer.params))
        text += std::string("; kernel ") + firmware::name(layer.kernel) +
                (layer.kernel == firmware::conv2d_kernel::conv2d_im2col ? ", weights in its order" : "");
    text += "\n";
    const std::string bias = layer.bias.empty() ? "nullptr" : "bias_" + n;
    if (!layer.weights.empty())
        text += "inline constexpr std::int8_t weights_" + n + "[] = " +
                array_literal(layer.weights, 24, [](std::int8_t w) { return std::to_string(w); }) + ";\n";
    if (!layer.bias.empty())
        text += "inline constexpr std::int32_t bias_" + n + "[] = " +
                array_literal(layer.bias, 8, [](std::int32_t b) { return std::to_string(b); }) + ";\n";
    if (!layer.multipliers.empty())
        text += "inline constexpr versatil::math::fixed_point_multiplier multipliers_" + n + "[] = " +
                array_literal(layer.multipliers, 4, multiplier_literal) + ";\n";
    text += std::visit(
        [&](const auto& p) -> std::string {
            using P = std::decay_t<decltype(p)>;
            const std::string head = "inline constexpr fw::";
            if constexpr (std::is_same_v<P, firmware::conv2d_params>)
                return head + "conv2d_params layer_" + n + "{.input = " + shape_literal(p.input) +
                       ", .output = " + shape_literal(p.output) + ", .win = " + window_literal(p.win) +
                       ", .groups = " + std::to_string(p.groups) + ",\n    .input_offset = " +
                       std::to_string(p.input_offset) + ", .output_offset = " + std::to_string(p.output_offset) +
                       ", .range = " + range_literal(p.range) + ",\n    .weights = weights_" + n + ", .bias = " + bias +
                       ", .multipliers = multipliers_" + n + "};\n";
            else if constexpr (std::is_same_v<P, firmware::linear_params>)
                return head + "linear_params layer_" + n + "{.in_features = " + std::to_string(p.in_features) +
                       ", .out_features = " + std::to_string(p.out_features) + ",\n    .input_offset = " +
                       std::to_string(p.input_offset) + ", .output_offset = " + std::to_string(p.output_offset) +
                       ", .range = " + range_literal(p.range) + ",\n    .weights = weights_" + n + ", .bias = " + bias +
                       ", .multipliers = multipliers_" + n + "};\n";
            else if constexpr (std::is_same_v<P, firmware::add_params>)
                return head + "add_params layer_" + n + "{.elements = " + std::to_string(p.elements) +
                       ",\n    .input1_offset = " + std::to_string(p.input1_offset) + ", .input2_offset = " +
                       std::to_string(p.input2_offset) + ", .output_offset = " + std::to_string(p.output_offset) +
                       ",\n    .input1_multiplier = " + std::to_string(p.input1_multiplier) + ", .input2_multiplier = " +
                       std::to_string(p.input2_multiplier) + ", .shift = " + std::to_string(p.shift) +
                       ",\n    .range = " + range_literal(p.range) + "};\n";
            else if constexpr (std::is_same_v<P, firmware::clamp_params>)
                return head + "clamp_params layer_" + n + "{.elements = " + std::to_string(p.elements) +
                       ", .input_offset = " + std::to_string(p.input_offset) + ", .output_offset = " +
                       std::to_string(p.output_offset) + ",\n    .multiplier = " + multiplier_literal(p.multiplier) +
                       ", .range = " + range_literal(p.range) + "};\n";
            else if constexpr (std::is_same_v<P, firmware::max_pool2d_params>)
                return head + "max_pool2d_params layer_" + n + "{.input = " + shape_literal(p.input) +
                       ", .output = " + shape_literal(p.output) + ", .win = " + window_literal(p.win) +
                       ", .range = " + range_literal(p.range) + "};\n";
            else if constexpr (std::is_same_v<P, firmware::avg_pool2d_params>)
                return head + "avg_pool2d_params layer_" + n + "{.input = " + shape_literal(p.input) +
                       ", .output = " + shape_literal(p.output) + ", .win = " + window_literal(p.win) +
                       ",\n    .count_include_pad = " + (p.count_include_pad ? "true" : "false") +
                       ", .zero_point = " + std::to_string(p.zero_point) + ", .range = " + range_literal(p.range) + "};\n";
            else
                return "";  // flatten: no params
        },
        layer.params);
    return text;
}

}  // namespace detail

// Throws std::invalid_argument unless `name` can name the exported header's namespace: "fm"
// or "models::fm", identifiers joined by "::", no keyword, no reserved name. header_for
// checks it; a caller (the CLI) can check it before the work that leads there.
inline void check_namespace(std::string_view name) {
    std::string_view rest = name;
    for (;;) {
        const auto separator = rest.find("::");
        if (!detail::is_identifier(rest.substr(0, separator)))
            throw std::invalid_argument("versatil::codegen::header_for: namespace '" + std::string(name) +
                                        "' is not a C++ namespace name (identifiers joined by ::, no keyword)");
        if (separator == std::string_view::npos) return;
        rest.remove_prefix(separator + 2);
    }
}

inline std::string header_for(const lowered_graph& g, std::string_view namespace_name) {
    using namespace detail;
    check_namespace(namespace_name);
    const std::string ns(namespace_name);
    const host_plan plan = plan_arena(g);
    const firmware_figures figures = summarize(g);
    const firmware::shape in_shape = g.tensors[static_cast<std::size_t>(g.input)];
    const firmware::shape out_shape = g.tensors[static_cast<std::size_t>(g.output)];
    const auto tensor = [](int t) { return std::to_string(t); };
    const auto place = [&](int t) { return "plan.tensors[" + tensor(t) + "].offset"; };

    std::string text =
        "// Generated by versatil::codegen::header_for: an int8 model as compile-time C++ for the versatil\n"
        "// firmware runtime (include/versatil/firmware/). Do not edit.\n"
        "// Input " + shape_literal(in_shape) + " (channels, height, width), output " + shape_literal(out_shape) + "; " +
        std::to_string(g.layers.size()) + " layers; arena " + std::to_string(figures.arena_bytes) +
        " bytes (live-set lower bound " + std::to_string(figures.arena_lower_bound_bytes) + ", greedy planner " +
        std::to_string(figures.greedy_planner_bytes) + "); parameters " + std::to_string(figures.parameter_bytes) +
        " bytes.\n#pragma once\n\n#include <cstddef>\n#include <cstdint>\n\n#include \"versatil/firmware/firmware.hpp\"\n\n"
        "namespace " + ns + " {\nnamespace detail {\n\nnamespace fw = versatil::firmware;\n\n";
    for (std::size_t i = 0; i < g.layers.size(); ++i) text += layer_definition(g.layers[i], i) + "\n";

    text += "inline constexpr fw::shape tensors[] = {";
    for (std::size_t t = 0; t < g.tensors.size(); ++t) text += (t % 6 == 0 ? "\n    " : " ") + shape_literal(g.tensors[t]) + ",";
    text += "\n};\ninline constexpr int input_tensor = " + tensor(g.input) + ", output_tensor = " + tensor(g.output) +
            ";\ninline constexpr std::size_t tensor_count = sizeof tensors / sizeof tensors[0];\n\n"
            "inline constexpr fw::layer layers[] = {\n";
    for (std::size_t i = 0; i < g.layers.size(); ++i) {
        const lowered_layer& l = g.layers[i];
        const std::string n = std::to_string(i);
        if (std::holds_alternative<firmware::add_params>(l.params))
            text += "    fw::layer_of(layer_" + n + ", tensors[" + tensor(l.output) + "], " + tensor(l.inputs[0]) + ", " +
                    tensor(l.inputs[1]) + ", " + tensor(l.output) + "),\n";
        else if (std::holds_alternative<firmware::clamp_params>(l.params))
            text += "    fw::layer_of(layer_" + n + ", tensors[" + tensor(l.output) + "], " + tensor(l.inputs[0]) + ", " +
                    tensor(l.output) + "),\n";
        else if (std::holds_alternative<flatten_params>(l.params))
            text += "    fw::flatten_layer(tensors[" + tensor(l.inputs[0]) + "], " + tensor(l.inputs[0]) + ", " +
                    tensor(l.output) + "),\n";
        else if (l.scratch >= 0)
            text += "    fw::with_scratch(fw::layer_of(layer_" + n + ", " + tensor(l.inputs[0]) + ", " + tensor(l.output) +
                    "), " + tensor(l.scratch) + ", fw::scratch_bytes(fw::conv2d_kernel::" + firmware::name(l.kernel) +
                    ", layer_" + n + ")),\n";  // the headers' own figure: a header from another
                                                 // version fails consistent() if it does not fit
        else
            text += "    fw::layer_of(layer_" + n + ", " + tensor(l.inputs[0]) + ", " + tensor(l.output) + "),\n";
    }
    text += "};\n\n// The arena plan, computed by the compiler (versatil/firmware/arena_planner.hpp).\n"
            "inline constexpr auto plan = fw::plan_arena(tensors, layers, input_tensor, output_tensor);\n\n";

    for (std::size_t i = 0; i < g.layers.size(); ++i) {
        const lowered_layer& l = g.layers[i];
        const std::string n = std::to_string(i), who = ns + ": layer " + n + " '" + l.module + "' (" + op_kind_name(l.source) + ")";
        text += "static_assert(fw::consistent(layers[" + n + "], tensors, tensor_count), \"" + who +
                ": its shapes do not match the model's tensors or its window\");\n";
        if (!l.weights.empty())
            text += "static_assert(sizeof weights_" + n + " == " + std::to_string(l.weights.size()) +
                    " && sizeof multipliers_" + n + " / sizeof multipliers_" + n + "[0] == " +
                    std::to_string(l.multipliers.size()) + ", \"" + who + ": parameter arrays of the wrong size\");\n";
        if (!std::holds_alternative<flatten_params>(l.params))
            text += "static_assert(!plan.tensors[" + tensor(l.output) + "].external, \"" + who +
                    ": writes into the caller's input\");\n";
    }
    bool im2col = false;
    for (const lowered_layer& l : g.layers) im2col = im2col || l.kernel == firmware::conv2d_kernel::conv2d_im2col;
    if (im2col)
        text += "static_assert(fw::conv2d_im2col_weight_layout == " + std::to_string(firmware::conv2d_im2col_weight_layout) +
                ", \"" + ns + ": exported for another weight order of conv2d_im2col than these headers' (export it again)\");\n";
    text += "static_assert(plan.figures.arena_bytes == " + std::to_string(figures.arena_bytes) +
            ", \"" + ns + ": the compiler's arena plan differs from the code generator's\");\n\n}  // namespace detail\n\n";

    text += "struct model {\n"
            "    static constexpr std::size_t input_size = " + std::to_string(in_shape.bytes()) + ";\n"
            "    static constexpr std::size_t output_size = " + std::to_string(out_shape.bytes()) + ";\n"
            "    static constexpr std::size_t arena_bytes = detail::plan.figures.arena_bytes;\n"
            "    static constexpr std::size_t arena_lower_bound_bytes = detail::plan.figures.lower_bound_bytes;\n"
            "    static constexpr std::size_t greedy_planner_bytes = detail::plan.figures.greedy_bytes;\n"
            "    static constexpr std::size_t parameter_bytes = " + std::to_string(figures.parameter_bytes) + ";\n"
            "    static constexpr double input_scale = " + number(g.input_scale) + ";\n"
            "    static constexpr std::int32_t input_zero_point = " + std::to_string(g.input_zero_point) + ";\n"
            "    static constexpr double output_scale = " + number(g.output_scale) + ";\n"
            "    static constexpr std::int32_t output_zero_point = " + std::to_string(g.output_zero_point) + ";\n"
            "    static constexpr versatil::firmware::shape input_shape" + shape_literal(in_shape) + ";\n"
            "    static constexpr versatil::firmware::shape output_shape" + shape_literal(out_shape) + ";\n\n"
            "    // input: input_size int8 levels (channels, height, width); output: output_size levels;\n"
            "    // arena: arena_bytes bytes, any alignment, reused by every call.\n"
            "    static void run(const std::int8_t* input, std::int8_t* output, std::byte* arena) noexcept {\n"
            "        namespace fw = versatil::firmware;\n"
            "        using detail::plan;\n"
            "        std::int8_t* const a = reinterpret_cast<std::int8_t*>(arena);\n";
    const auto operand = [&](int t) {
        return (plan.tensors[static_cast<std::size_t>(t)].external ? "input + " : "a + ") + place(t);
    };
    for (std::size_t i = 0; i < g.layers.size(); ++i) {
        const lowered_layer& l = g.layers[i];
        const std::string n = std::to_string(i);
        const auto out_place = plan.tensors[static_cast<std::size_t>(l.output)];
        bool in_place = false;
        for (int t : l.inputs)
            in_place = in_place || overlaps(out_place, g.tensors[static_cast<std::size_t>(l.output)].bytes(),
                                            plan.tensors[static_cast<std::size_t>(t)], g.tensors[static_cast<std::size_t>(t)].bytes());
        const std::string comment = "  // " + l.module + (in_place ? ", in place" : "") + "\n";
        if (std::holds_alternative<flatten_params>(l.params)) {
            text += "        // layer " + n + ", " + l.module + ": flatten, the same bytes\n";
        } else if (std::holds_alternative<firmware::add_params>(l.params)) {
            text += "        fw::add(detail::layer_" + n + ", " + operand(l.inputs[0]) + ", " + operand(l.inputs[1]) +
                    ", a + " + place(l.output) + ");" + comment;
        } else {
            std::string scratch;
            if (l.kernel == firmware::conv2d_kernel::conv2d_im2col || l.kernel == firmware::conv2d_kernel::depthwise_conv2d_3x3)
                scratch = l.scratch >= 0 ? ", a + " + place(l.scratch) : std::string(", nullptr");
            text += std::string("        fw::") + kernel_name(l) + "(detail::layer_" + n + ", " + operand(l.inputs[0]) +
                    ", a + " + place(l.output) + scratch + ");" + comment;
        }
    }
    text += "        const std::int8_t* const result = " + operand(g.output) + ";\n"
            "        for (std::size_t i = 0; i < output_size; ++i) output[i] = result[i];\n"
            "    }\n};\n\n"
            "static_assert(model::input_size == detail::tensors[detail::input_tensor].bytes() &&\n"
            "              model::output_size == detail::tensors[detail::output_tensor].bytes(),\n"
            "              \"" + ns + ": input or output size differs from the tensor table\");\n\n"
            "}  // namespace " + ns + "\n";
    return text;
}

inline std::string header_for(const integer_graph& graph, std::string_view namespace_name) {
    check_namespace(namespace_name);
    return header_for(lower(graph), namespace_name);
}

}  // namespace versatil::codegen
