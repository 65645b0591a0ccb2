// Writes a lowered integer graph as one C++ header for the firmware runtime: constexpr int8
// weights, int32 biases, multipliers and shifts, each layer's kernel params, the tensor
// table and the layer list, the arena plan (planned here, stated as offsets, checked by the
// compiler: firmware/arena_check.hpp), static_asserts on every layer's shapes and array sizes,
// and `model`: sizes, io quantization, arena_bytes and run(), one kernel call per layer, so the
// compiler instantiates only the kernels the model uses.
#pragma once

#include <algorithm>
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
#include "versatil/codegen/stack_use.hpp"

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
    static constexpr const char* names[] = {"conv2d",  "linear", "add",     "clamp",  "max_pool2d", "avg_pool2d",
                                            "reshape", "lookup", "mul",     "softmax", "concat",    "permute",
                                            "pad"};
    if (std::holds_alternative<firmware::conv2d_params>(layer.params)) return firmware::name(layer.kernel);
    if (std::holds_alternative<firmware::linear_params>(layer.params)) return firmware::name(layer.linear_kernel);
    return names[layer.params.index()];
}

// The worst stack use of run on a Cortex-M4 (stack_use.hpp): its frame and its deepest kernel.
inline std::size_t run_stack_bytes(const lowered_graph& g) {
    std::size_t deepest = 0;
    for (const lowered_layer& layer : g.layers)
        if (!std::holds_alternative<view_params>(layer.params))  // a view: no call
            deepest = std::max(deepest, kernel_stack_bytes(kernel_name(layer)));
    return run_frame_stack_bytes + deepest;
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
    const std::string parameters = "VERSATIL_WEIGHTS_ALIGN VERSATIL_WEIGHTS_SECTION inline constexpr ";
    if (!layer.weights.empty())
        text += parameters + "std::int8_t weights_" + n + "[] = " +
                array_literal(layer.weights, 24, [](std::int8_t w) { return std::to_string(w); }) + ";\n";
    if (!layer.bias.empty())
        text += parameters + "std::int32_t bias_" + n + "[] = " +
                array_literal(layer.bias, 8, [](std::int32_t b) { return std::to_string(b); }) + ";\n";
    if (!layer.multipliers.empty())
        text += parameters + "versatil::math::fixed_point_multiplier multipliers_" + n + "[] = " +
                array_literal(layer.multipliers, 4, multiplier_literal) + ";\n";
    const auto int8_array = [&](const std::string& name, const std::vector<std::int8_t>& values) {
        return parameters + "std::int8_t " + name + "[] = " +
               array_literal(values, 24, [](std::int8_t v) { return std::to_string(v); }) + ";\n";
    };
    if (!layer.table.empty()) text += int8_array("table_" + n, layer.table);
    for (std::size_t k = 0; k < layer.part_tables.size(); ++k)
        if (!layer.part_tables[k].empty()) text += int8_array("table_" + n + "_" + std::to_string(k), layer.part_tables[k]);
    if (!layer.exp_table.empty())
        text += parameters + "std::uint32_t exp_table_" + n + "[] = " +
                array_literal(layer.exp_table, 8, [](std::uint32_t v) { return std::to_string(v) + "u"; }) + ";\n";
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
                       ", .multipliers = multipliers_" + n +
                       (p.input_channels_last ? ", .input_channels_last = true" : "") + "};\n";
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
            else if constexpr (std::is_same_v<P, firmware::lookup_params>)
                return head + "lookup_params layer_" + n + "{.elements = " + std::to_string(p.elements) +
                       ", .table = table_" + n + "};\n";
            else if constexpr (std::is_same_v<P, firmware::mul_params>)
                return head + "mul_params layer_" + n + "{.output = " + shape_literal(p.output) + ", .input2 = " +
                       shape_literal(p.input2) + ",\n    .input1_offset = " + std::to_string(p.input1_offset) +
                       ", .input2_offset = " + std::to_string(p.input2_offset) + ", .output_offset = " +
                       std::to_string(p.output_offset) + ",\n    .multiplier = " + multiplier_literal(p.multiplier) +
                       ", .range = " + range_literal(p.range) + "};\n";
            else if constexpr (std::is_same_v<P, firmware::softmax_params>)
                return head + "softmax_params layer_" + n + "{.input = " + shape_literal(p.input) +
                       ", .exp_table = exp_table_" + n + "};\n";
            else if constexpr (std::is_same_v<P, firmware::concat_params>) {
                std::string runs, tables, parts;
                for (std::size_t k = 0; k < layer.inputs.size(); ++k) {
                    const std::string sep = k == 0 ? "" : ", ";
                    runs += sep + std::to_string(p.run[k]);
                    tables += sep + (layer.part_tables[k].empty() ? "nullptr" : "table_" + n + "_" + std::to_string(k));
                }
                std::string indices;
                for (std::size_t k = 0; k < layer.inputs.size(); ++k) indices += (k == 0 ? "" : ", ") + std::to_string(layer.inputs[k]);
                return "inline constexpr int parts_" + n + "[] = {" + indices + "};\n" + head + "concat_params layer_" + n + "{.parts = " + std::to_string(p.parts) + ", .outer = " +
                       std::to_string(p.outer) + ", .run = {" + runs + "}, .tables = {" + tables + "}};\n";
            } else if constexpr (std::is_same_v<P, firmware::permute_params>)
                return head + "permute_params layer_" + n + "{.input = " + shape_literal(p.input) + ", .output = " +
                       shape_literal(p.output) + ", .axes = {" + std::to_string(p.axes[0]) + ", " +
                       std::to_string(p.axes[1]) + ", " + std::to_string(p.axes[2]) + "}};\n";
            else if constexpr (std::is_same_v<P, firmware::pad_params>)
                return head + "pad_params layer_" + n + "{.input = " + shape_literal(p.input) + ", .output = " +
                       shape_literal(p.output) + ", .before = {" + std::to_string(p.before[0]) + ", " +
                       std::to_string(p.before[1]) + ", " + std::to_string(p.before[2]) + "}, .value = " +
                       std::to_string(p.value) + "};\n";
            else
                return "";  // a view: no params
        },
        layer.params);
    return text;
}

// The C names of a namespace: "models::fm" gives functions models_fm_run and macros MODELS_FM_*.
inline std::string c_prefix(std::string_view namespace_name) {
    std::string prefix;
    for (std::size_t i = 0; i < namespace_name.size(); ++i) {
        if (namespace_name.substr(i, 2) == "::") {
            prefix += '_';
            ++i;
        } else {
            prefix += namespace_name[i];
        }
    }
    return prefix;
}

inline std::string upper(std::string text) {
    for (char& c : text) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    return text;
}

// What the header says of its use, and the placement macros' defaults (empty: where the
// compiler puts them).
inline std::string usage_and_placement(const std::string& ns, const std::string& c_name) {
    return "//\n"
           "// C++: " + ns + "::model::run(input, output, arena[, on_layer]) with the caller's arena of\n"
           "// model::arena_bytes, or run(input, output) in the header's own (" + ns + "::arena: one call at a\n"
           "// time). on_layer, if given, is called as on_layer(event, layer, module) before and after each\n"
           "// layer (versatil/firmware/layer_callback.hpp); without it the calls compile to nothing.\n"
           "// C (this file also compiles as C, where it declares only this): " + c_name + "_run(input, output)\n"
           "// runs in the header's arena, " + c_name + "_run_in_arena(input, output, arena) in the caller's, of\n"
           "// " + upper(c_name) + "_ARENA_BYTES; no heap, no exception. Exactly one C++ file defines them: it\n"
           "// defines VERSATIL_C_ENTRY_POINTS before it includes this header.\n"
           "// Placement: define any of these before including the header (each defaults to empty):\n"
           "//   VERSATIL_WEIGHTS_SECTION  the parameter arrays' (weights, biases, multipliers) section,\n"
           "//                             e.g. __attribute__((section(\".model_weights\")))\n"
           "//   VERSATIL_WEIGHTS_ALIGN    their alignment, e.g. alignas(16)\n"
           "//   VERSATIL_ARENA_SECTION    the header's arena's section,\n"
           "//                             e.g. __attribute__((section(\".model_arena\")))\n"
           "//   VERSATIL_ARENA_ALIGN      its alignment, e.g. alignas(16)\n"
           "#pragma once\n\n"
           "#ifndef VERSATIL_WEIGHTS_SECTION\n#define VERSATIL_WEIGHTS_SECTION\n#endif\n"
           "#ifndef VERSATIL_WEIGHTS_ALIGN\n#define VERSATIL_WEIGHTS_ALIGN\n#endif\n"
           "#ifndef VERSATIL_ARENA_SECTION\n#define VERSATIL_ARENA_SECTION\n#endif\n"
           "#ifndef VERSATIL_ARENA_ALIGN\n#define VERSATIL_ARENA_ALIGN\n#endif\n\n";
}

// The C part: sizes and quantization as macros, the entry points' declarations, and (in the
// one C++ file that asks for them) their definitions.
inline std::string c_interface(const lowered_graph& g, const std::string& ns, const std::string& c_name,
                               std::size_t arena_bytes) {
    const std::string macro = upper(c_name);
    const firmware::shape in_shape = g.tensors[static_cast<std::size_t>(g.input)];
    const firmware::shape out_shape = g.tensors[static_cast<std::size_t>(g.output)];
    return "/* The C interface: " + macro + "_INPUT_SIZE int8 levels in, " + macro + "_OUTPUT_SIZE out. */\n"
           "#include <stdint.h>\n\n"
           "#define " + macro + "_INPUT_SIZE " + std::to_string(in_shape.bytes()) + "\n"
           "#define " + macro + "_OUTPUT_SIZE " + std::to_string(out_shape.bytes()) + "\n"
           "#define " + macro + "_ARENA_BYTES " + std::to_string(arena_bytes) + "\n"
           "#define " + macro + "_INPUT_SCALE " + number(g.input_scale) + "\n"
           "#define " + macro + "_INPUT_ZERO_POINT (" + std::to_string(g.input_zero_point) + ")\n"
           "#define " + macro + "_OUTPUT_SCALE " + number(g.output_scale) + "\n"
           "#define " + macro + "_OUTPUT_ZERO_POINT (" + std::to_string(g.output_zero_point) + ")\n\n"
           "#ifdef __cplusplus\n"
           "static_assert(" + macro + "_INPUT_SIZE == " + ns + "::model::input_size &&\n              " + macro +
           "_OUTPUT_SIZE == " + ns + "::model::output_size &&\n              " + macro + "_ARENA_BYTES == " + ns +
           "::model::arena_bytes, \"" + ns + ": the C sizes differ from the model's\");\n"
           "extern \"C\" {\n#endif\n"
           "void " + c_name + "_run(const int8_t* input, int8_t* output);\n"
           "void " + c_name + "_run_in_arena(const int8_t* input, int8_t* output, void* arena);\n"
           "#ifdef __cplusplus\n}\n#endif\n\n"
           "#if defined(__cplusplus) && defined(VERSATIL_C_ENTRY_POINTS)\n"
           "extern \"C\" void " + c_name + "_run(const int8_t* input, int8_t* output) { " + ns +
           "::model::run(input, output); }\n"
           "extern \"C\" void " + c_name + "_run_in_arena(const int8_t* input, int8_t* output, void* arena) {\n"
           "    " + ns + "::model::run(input, output, static_cast<std::byte*>(arena));\n}\n"
           "#endif\n";
}

// The arena plan as literals, and the compiler's check of it: searching for a plan while
// compiling costs more than a compiler allows on a model of a hundred tensors; checking one
// costs a pass over the pairs of tensors.
inline std::string stated_plan(const host_plan& plan, const std::string& ns) {
    std::string text = "// The arena plan: offsets from the code generator's planner\n"
                       "// (versatil/firmware/arena_planner.hpp), checked by the compiler below\n"
                       "// (versatil/firmware/arena_check.hpp).\n"
                       "inline constexpr fw::arena_plan<tensor_count> plan = {{{";
    for (std::size_t t = 0; t < plan.tensors.size(); ++t)
        text += std::string(t % 6 == 0 ? "\n    " : " ") + "{" + (plan.tensors[t].external ? "true" : "false") + ", " +
                std::to_string(plan.tensors[t].offset) + "},";
    const firmware::plan_figures& f = plan.figures;
    return text + "\n}}, {" + std::to_string(f.arena_bytes) + ", " + std::to_string(f.lower_bound_bytes) + ", " +
           std::to_string(f.greedy_bytes) + "}};\n" +
           "static_assert(fw::misplaced_tensor(plan, tensors, layers, input_tensor, output_tensor) == -1, \"" + ns +
           ": the stated arena plan puts a tensor (the number compared with -1) on bytes another one still "
           "needs\");\n\n";
}

}  // namespace detail

// The worst stack use of the exported run on a Cortex-M4, as the header states it (model::stack_bytes).
inline std::size_t stack_bytes(const lowered_graph& g) { return detail::run_stack_bytes(g); }

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
    const std::string c_name = c_prefix(ns);
    const bool channels_last = g.layout == input_layout::hwc;

    std::string text =
        "// Generated by versatil::codegen::header_for: an int8 model as compile-time C++ for the versatil\n"
        "// firmware runtime (include/versatil/firmware/). Do not edit.\n"
        "// Input " + shape_literal(in_shape) + " (channels, height, width)" +
        (channels_last ? ", its levels channel-last (height, width, channels)" : "") + ", output " +
        shape_literal(out_shape) + "; " +
        std::to_string(g.layers.size()) + " layers; arena " + std::to_string(figures.arena_bytes) +
        " bytes (live-set lower bound " + std::to_string(figures.arena_lower_bound_bytes) + ", greedy planner " +
        std::to_string(figures.greedy_planner_bytes) + "); parameters " + std::to_string(figures.parameter_bytes) +
        " bytes.\n" + usage_and_placement(ns, c_name) +
        "#ifdef __cplusplus\n#include <cstddef>\n#include <cstdint>\n\n#include \"versatil/firmware/firmware.hpp\"\n\n"
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
        else if (std::holds_alternative<firmware::mul_params>(l.params))
            text += "    fw::layer_of(layer_" + n + ", " + tensor(l.inputs[0]) + ", " + tensor(l.inputs[1]) + ", " +
                    tensor(l.output) + "),\n";
        else if (std::holds_alternative<firmware::clamp_params>(l.params) ||
                 std::holds_alternative<firmware::lookup_params>(l.params))
            text += "    fw::layer_of(layer_" + n + ", tensors[" + tensor(l.output) + "], " + tensor(l.inputs[0]) + ", " +
                    tensor(l.output) + "),\n";
        else if (std::holds_alternative<firmware::concat_params>(l.params))
            text += "    fw::layer_of(layer_" + n + ", tensors, parts_" + n + ", " + tensor(l.output) + "),\n";
        else if (std::holds_alternative<view_params>(l.params))
            text += "    fw::reshape_layer(tensors[" + tensor(l.inputs[0]) + "], tensors[" + tensor(l.output) + "], " +
                    tensor(l.inputs[0]) + ", " + tensor(l.output) + "),\n";
        else if (l.scratch >= 0)
            text += "    fw::with_scratch(fw::layer_of(layer_" + n + ", " + tensor(l.inputs[0]) + ", " + tensor(l.output) +
                    "), " + tensor(l.scratch) + ", fw::scratch_bytes(fw::conv2d_kernel::" + firmware::name(l.kernel) +
                    ", layer_" + n + ")),\n";  // the headers' own figure: a header from another
                                                 // version fails consistent() if it does not fit
        else
            text += "    fw::layer_of(layer_" + n + ", " + tensor(l.inputs[0]) + ", " + tensor(l.output) + "),\n";
    }
    text += "};\n\n" + stated_plan(plan, ns);

    for (std::size_t i = 0; i < g.layers.size(); ++i) {
        const lowered_layer& l = g.layers[i];
        const std::string n = std::to_string(i), who = ns + ": layer " + n + " '" + l.module + "' (" + op_kind_name(l.source) + ")";
        text += "static_assert(fw::consistent(layers[" + n + "], tensors, tensor_count), \"" + who +
                ": its shapes do not match the model's tensors or its window\");\n";
        if (!l.weights.empty())
            text += "static_assert(sizeof weights_" + n + " == " + std::to_string(l.weights.size()) +
                    " && sizeof multipliers_" + n + " / sizeof multipliers_" + n + "[0] == " +
                    std::to_string(l.multipliers.size()) + ", \"" + who + ": parameter arrays of the wrong size\");\n";
        if (!std::holds_alternative<view_params>(l.params))
            text += "static_assert(!plan.tensors[" + tensor(l.output) + "].external, \"" + who +
                    ": writes into the caller's input\");\n";
    }
    bool im2col = false;
    for (const lowered_layer& l : g.layers) im2col = im2col || l.kernel == firmware::conv2d_kernel::conv2d_im2col;
    if (im2col)
        text += "static_assert(fw::conv2d_im2col_weight_layout == " + std::to_string(firmware::conv2d_im2col_weight_layout) +
                ", \"" + ns + ": exported for another weight order of conv2d_im2col than these headers' (export it again)\");\n";
    text += "\n}  // namespace detail\n\n";

    text += "// The header's own arena, for run(input, output) and the C entry points.\n"
            "VERSATIL_ARENA_ALIGN VERSATIL_ARENA_SECTION inline std::byte arena[detail::plan.figures.arena_bytes > 0 ? "
            "detail::plan.figures.arena_bytes : 1];\n\n"
            "struct model {\n"
            "    static constexpr std::size_t input_size = " + std::to_string(in_shape.bytes()) + ";\n"
            "    static constexpr std::size_t output_size = " + std::to_string(out_shape.bytes()) + ";\n"
            "    static constexpr std::size_t arena_bytes = detail::plan.figures.arena_bytes;\n"
            "    static constexpr std::size_t arena_lower_bound_bytes = detail::plan.figures.lower_bound_bytes;\n"
            "    static constexpr std::size_t greedy_planner_bytes = detail::plan.figures.greedy_bytes;\n"
            "    static constexpr std::size_t parameter_bytes = " + std::to_string(figures.parameter_bytes) + ";\n"
            "    // The stack run needs on a Cortex-M4 (GCC 12, -Os or -O2; versatil/codegen/stack_use.hpp).\n"
            "    static constexpr std::size_t stack_bytes = " + std::to_string(run_stack_bytes(g)) + ";\n"
            "    static constexpr double input_scale = " + number(g.input_scale) + ";\n"
            "    static constexpr std::int32_t input_zero_point = " + std::to_string(g.input_zero_point) + ";\n"
            "    static constexpr double output_scale = " + number(g.output_scale) + ";\n"
            "    static constexpr std::int32_t output_zero_point = " + std::to_string(g.output_zero_point) + ";\n"
            "    static constexpr versatil::firmware::shape input_shape" + shape_literal(in_shape) + ";\n"
            "    static constexpr versatil::firmware::shape output_shape" + shape_literal(out_shape) + ";\n"
            "    static constexpr std::size_t layer_count = " + std::to_string(g.layers.size()) + ";\n"
            "    static constexpr bool input_channels_last = " + (channels_last ? "true" : "false") + ";\n\n"
            "    // input: input_size int8 levels (" +
            (channels_last ? "height, width, channels" : "channels, height, width") + "); output: output_size levels;\n"
            "    // arena: arena_bytes bytes, any alignment, reused by every call; on_layer: see above.\n"
            "    template <class OnLayer = versatil::firmware::no_layer_callback>\n"
            "    static void run(const std::int8_t* input, std::int8_t* output, std::byte* arena,\n"
            "                    OnLayer&& on_layer = {}) noexcept {\n"
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
        const auto hook = [&](const char* event) {
            return "        on_layer(fw::layer_event::" + std::string(event) + ", " + n + ", \"" + l.module + "\");\n";
        };
        text += hook("starts");
        if (std::holds_alternative<view_params>(l.params)) {
            text += "        // layer " + n + ", " + l.module + ": reshape, the same bytes\n";
        } else if (std::holds_alternative<firmware::add_params>(l.params) ||
                   std::holds_alternative<firmware::mul_params>(l.params)) {
            text += std::string("        fw::") + kernel_name(l) + "(detail::layer_" + n + ", " + operand(l.inputs[0]) +
                    ", " + operand(l.inputs[1]) + ", a + " + place(l.output) + ");" + comment;
        } else if (std::holds_alternative<firmware::concat_params>(l.params)) {
            std::string parts;
            for (std::size_t k = 0; k < l.inputs.size(); ++k) parts += (k == 0 ? "" : ", ") + operand(l.inputs[k]);
            text += "        {\n            const std::int8_t* const parts[] = {" + parts + "};\n            fw::concat(detail::layer_" +
                    n + ", parts, a + " + place(l.output) + ");" + comment + "        }\n";
        } else {
            std::string scratch;
            if (l.kernel == firmware::conv2d_kernel::conv2d_im2col || l.kernel == firmware::conv2d_kernel::depthwise_conv2d_3x3)
                scratch = l.scratch >= 0 ? ", a + " + place(l.scratch) : std::string(", nullptr");
            text += std::string("        fw::") + kernel_name(l) + "(detail::layer_" + n + ", " + operand(l.inputs[0]) +
                    ", a + " + place(l.output) + scratch + ");" + comment;
        }
        text += hook("ends");
    }
    text += "        const std::int8_t* const result = " + operand(g.output) + ";\n"
            "        for (std::size_t i = 0; i < output_size; ++i) output[i] = result[i];\n"
            "    }\n\n"
            "    static void run(const std::int8_t* input, std::int8_t* output) noexcept {\n"
            "        run(input, output, arena);\n    }\n"
            "};\n\n"
            "static_assert(model::input_size == detail::tensors[detail::input_tensor].bytes() &&\n"
            "              model::output_size == detail::tensors[detail::output_tensor].bytes(),\n"
            "              \"" + ns + ": input or output size differs from the tensor table\");\n\n"
            "}  // namespace " + ns + "\n#endif  // __cplusplus\n\n" +
            c_interface(g, ns, c_name, figures.arena_bytes);
    return text;
}

inline std::string header_for(const integer_graph& graph, std::string_view namespace_name,
                              input_layout layout = input_layout::chw) {
    check_namespace(namespace_name);
    return header_for(lower(graph, layout), namespace_name);
}

}  // namespace versatil::codegen
