// TorchScript building blocks made from C++ that LibTorch 1.13 and Python treat as torch.nn
// modules.
//
// Why this file exists: LibTorch 1.13's graph-mode quantization passes recognise modules by
// their exact torch.nn class names, with any `___torch_mangle_N` part ignored.
// FoldConvBatchNorm folds only `__torch__.torch.nn.modules.conv.Conv2d` followed by
// `__torch__.torch.nn.modules.batchnorm.BatchNorm2d`, and conv+relu fusion needs
// `__torch__.torch.nn.modules.activation.ReLU`. With other names nothing fails, but quality drops
// without warning (batch norm stays unfolded, ReLU runs on its own). So every block here has the
// torch.nn qualified class name and the attribute names of PyTorch's scripted module. A model
// saved from C++ then loads in Python's `torch.jit.load` like a scripted nn model.
//
// Conventions, all taken from PyTorch:
// - Parameters are initialised like PyTorch's defaults (kaiming-uniform, so every weight and bias
//   is drawn from U(-1/sqrt(fan_in), 1/sqrt(fan_in)); norms start at weight 1, bias 0), from an
//   explicit `seed`. The same seed gives the same tensors. Parameters require grad, as in
//   nn.Module.
// - A new module is in training mode (`training == true`), as an nn.Module is. The whole models in
//   models.hpp switch to eval mode.
// - A module without bias has, like a scripted nn module built with `bias=False`, a `bias`
//   parameter slot of type Optional[Tensor] that holds None.
// - Parents call children as `self.child.forward(x)`: `self.child(x)` does not compile in
//   TorchScript defined from C++.
// - Each TorchScript class is defined (compiled) once for each distinct signature (class name,
//   TorchScript source, attribute layout, child classes). Later instances share that class type,
//   as Python's scripting shares types. The passes in LibTorch that do not run in place
//   (FoldConvBatchNorm, InsertObservers/InsertQuantDeQuant with inplace=false, Finalize,
//   freeze_module) clone the types first. An *in-place* pass on one model changes the shared
//   class of every model built from it, in this process. That is also true in Python.
#pragma once

#include <torch/script.h>

#include <ATen/CPUGeneratorImpl.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "versatil/libtorch/error.hpp"

namespace versatil::libtorch {

// Qualified class names that LibTorch's passes match on (mangling ignored).
namespace torch_nn_class {
inline constexpr const char* conv2d = "__torch__.torch.nn.modules.conv.Conv2d";
inline constexpr const char* batch_norm2d = "__torch__.torch.nn.modules.batchnorm.BatchNorm2d";
inline constexpr const char* relu = "__torch__.torch.nn.modules.activation.ReLU";
inline constexpr const char* linear = "__torch__.torch.nn.modules.linear.Linear";
inline constexpr const char* flatten = "__torch__.torch.nn.modules.flatten.Flatten";
inline constexpr const char* max_pool2d = "__torch__.torch.nn.modules.pooling.MaxPool2d";
inline constexpr const char* adaptive_avg_pool2d = "__torch__.torch.nn.modules.pooling.AdaptiveAvgPool2d";
inline constexpr const char* layer_norm = "__torch__.torch.nn.modules.normalization.LayerNorm";
inline constexpr const char* sequential = "__torch__.torch.nn.modules.container.Sequential";
}  // namespace torch_nn_class

// Blocks that have no torch.nn counterpart live under this prefix.
inline constexpr const char* versatil_class_prefix = "__torch__.versatil.nn.";

// A named child of a container module, in call order.
using named_module = std::pair<std::string, ::torch::jit::Module>;

namespace detail {

// splitmix64: derives independent, well-mixed seeds for the parts of a model from one seed.
constexpr uint64_t mix_seed(uint64_t seed, uint64_t index) noexcept {
    uint64_t z = seed + 0x9E3779B97F4A7C15ULL * (index + 1);
    z = (z ^ (z >> 30U)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27U)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31U);
}

inline void require(bool condition, const std::string& message) {
    if (!condition) throw error(error_kind::invalid_argument, message);
}

// A tensor of `shape` drawn from U(-bound, bound) by a generator seeded with `seed`, requiring
// grad like an nn.Parameter.
inline at::Tensor uniform_parameter(at::IntArrayRef shape, double bound, uint64_t seed) {
    auto generator = at::make_generator<at::CPUGeneratorImpl>(seed);
    at::Tensor tensor = at::empty(shape, at::kFloat);
    tensor.uniform_(-bound, bound, generator);
    return tensor.requires_grad_(true);
}

inline at::Tensor constant_parameter(at::IntArrayRef shape, double value) {
    return at::full(shape, value, at::kFloat).requires_grad_(true);
}

// `weight` of `shape` and `bias` [shape[0]], each from U(-bound, bound), as nn.Conv2d and
// nn.Linear have them. Without `bias`, the way scripted nn modules have `bias=False`: a `bias`
// parameter slot of type Optional[Tensor] holding None (not listed by parameters()). 1.13's
// FoldConvBatchNorm puts the folded bias there. Without the slot it adds one to the *class*,
// which breaks every other instance sharing that class.
inline void register_weight_and_bias(::torch::jit::Module& module, at::IntArrayRef shape, double bound, uint64_t seed,
                                     bool bias) {
    module.register_parameter("weight", uniform_parameter(shape, bound, mix_seed(seed, 0)), false);
    if (bias)
        module.register_parameter("bias", uniform_parameter({shape[0]}, bound, mix_seed(seed, 1)), false);
    else
        module.register_attribute("bias", c10::OptionalType::create(c10::TensorType::get()), c10::IValue(),
                                  /*is_param=*/true);
}

// Instance state added to a module after its class exists: parameters, buffers, attributes.
// It must add the same names with the same types for every instance of one signature.
using state_initializer = std::function<void(::torch::jit::Module&)>;

struct module_class {
    std::shared_ptr<::torch::jit::CompilationUnit> unit;
    c10::ClassTypePtr type;
};

// Creates an instance of the class `qualified_name` described by `signature`. The first call for a
// signature creates the class (in its own compilation unit) and compiles `source` into it; later
// calls only create an object of that class. `children` are registered before the state.
inline ::torch::jit::Module instantiate(const std::string& qualified_name, const std::string& signature,
                                        const std::vector<named_module>& children,
                                        const state_initializer& add_state, const std::string& source) {
    static std::mutex mutex;
    static std::map<std::string, module_class> classes;

    std::ostringstream key;
    key << qualified_name << '\n' << signature << '\n' << source;
    for (const auto& [name, child] : children) key << '\n' << name << '@' << child.type().get();

    const auto populate = [&](::torch::jit::Module& module) {
        module.register_attribute("training", c10::BoolType::get(), true);
        for (const auto& [name, child] : children) module.register_module(name, child);
        if (add_state) add_state(module);
    };

    const std::lock_guard lock(mutex);
    if (auto found = classes.find(key.str()); found != classes.end()) {
        ::torch::jit::Module module(found->second.unit, found->second.type);
        populate(module);
        return module;
    }
    ::torch::jit::Module module{c10::QualifiedName(qualified_name)};
    populate(module);
    module.define(source);
    classes.emplace(key.str(), module_class{module._ivalue()->compilation_unit(), module.type()});
    return module;
}

// TorchScript code that calls `children` in order, each on the previous result.
inline std::string chained_forward_source(const std::vector<named_module>& children) {
    std::string source = "def forward(self, x: Tensor) -> Tensor:\n";
    for (const named_module& child : children)
        source += "    x = getattr(self, \"" + child.first + "\").forward(x)\n";
    return source + "    return x\n";
}

// TorchScript source of a list of `count` copies of `value`: 3 -> "[3, 3]".
inline std::string int_list_source(int64_t value, int count = 2) {
    std::string list = "[";
    for (int i = 0; i < count; ++i) list += (i ? ", " : "") + std::to_string(value);
    return list + "]";
}

// A double as TorchScript source that reads back exactly.
inline std::string float_literal(double value) {
    std::ostringstream out;
    out.precision(17);
    out << std::scientific << value;
    return out.str();
}

}  // namespace detail

struct conv2d_options {
    int64_t stride = 1;
    int64_t padding = 0;
    int64_t groups = 1;
    bool bias = true;
};

// nn.Conv2d(in_channels, out_channels, kernel, stride, padding, groups=groups, bias=bias):
// parameters `weight` [out, in/groups, k, k] and `bias` [out] (absent when bias is false).
inline ::torch::jit::Module conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel, uint64_t seed,
                                   const conv2d_options& options = {}) {
    detail::require(in_channels > 0 && out_channels > 0 && kernel > 0 && options.stride > 0 &&
                        options.padding >= 0 && options.groups > 0,
                    "conv2d: channels, kernel, stride and groups must be positive and padding non-negative");
    detail::require(in_channels % options.groups == 0 && out_channels % options.groups == 0,
                    "conv2d: groups (" + std::to_string(options.groups) + ") must divide in_channels (" +
                        std::to_string(in_channels) + ") and out_channels (" + std::to_string(out_channels) + ")");
    const int64_t fan_in = in_channels / options.groups * kernel * kernel;
    const double bound = 1.0 / std::sqrt(static_cast<double>(fan_in));
    const std::string source =
        "def forward(self, x: Tensor) -> Tensor:\n    return torch.conv2d(x, self.weight, self.bias, " +
        detail::int_list_source(options.stride) + ", " + detail::int_list_source(options.padding) + ", [1, 1], " +
        std::to_string(options.groups) + ")\n";
    return detail::instantiate(
        torch_nn_class::conv2d, options.bias ? "bias" : "no-bias", {},
        [&](::torch::jit::Module& module) {
            detail::register_weight_and_bias(module, {out_channels, in_channels / options.groups, kernel, kernel},
                                             bound, seed, options.bias);
        },
        source);
}

// nn.BatchNorm2d(channels): parameters weight, bias; buffers running_mean, running_var,
// num_batches_tracked; attributes eps = 1e-5, momentum = 0.1. In training mode it normalises with
// the batch statistics and updates the running ones; in eval mode it uses the running ones.
inline ::torch::jit::Module batch_norm2d(int64_t channels) {
    detail::require(channels > 0, "batch_norm2d: channels must be positive");
    static const std::string source = R"JIT(
def forward(self, x: Tensor) -> Tensor:
    if self.training:
        self.num_batches_tracked.add_(1)
    return torch.batch_norm(x, self.weight, self.bias, self.running_mean, self.running_var,
                            self.training, self.momentum, self.eps, False)
)JIT";
    return detail::instantiate(
        torch_nn_class::batch_norm2d, "", {},
        [&](::torch::jit::Module& module) {
            module.register_parameter("weight", detail::constant_parameter({channels}, 1.0), false);
            module.register_parameter("bias", detail::constant_parameter({channels}, 0.0), false);
            module.register_buffer("running_mean", at::zeros({channels}));
            module.register_buffer("running_var", at::ones({channels}));
            module.register_buffer("num_batches_tracked", at::zeros({}, at::kLong));
            module.register_attribute("eps", c10::FloatType::get(), 1e-5);
            module.register_attribute("momentum", c10::FloatType::get(), 0.1);
        },
        source);
}

// nn.ReLU().
inline ::torch::jit::Module relu() {
    return detail::instantiate(torch_nn_class::relu, "", {}, {},
                               "def forward(self, x: Tensor) -> Tensor:\n    return torch.relu(x)\n");
}

// nn.Linear(in_features, out_features, bias): parameters weight [out, in], bias [out].
inline ::torch::jit::Module linear(int64_t in_features, int64_t out_features, uint64_t seed, bool bias = true) {
    detail::require(in_features > 0 && out_features > 0, "linear: in_features and out_features must be positive");
    const double bound = 1.0 / std::sqrt(static_cast<double>(in_features));
    const std::string source =
        "def forward(self, x: Tensor) -> Tensor:\n    return torch.linear(x, self.weight, self.bias)\n";
    return detail::instantiate(
        torch_nn_class::linear, bias ? "bias" : "no-bias", {},
        [&](::torch::jit::Module& module) {
            detail::register_weight_and_bias(module, {out_features, in_features}, bound, seed, bias);
        },
        source);
}

// nn.Flatten(start_dim=1, end_dim=-1).
inline ::torch::jit::Module flatten(int64_t start_dim = 1, int64_t end_dim = -1) {
    return detail::instantiate(
        torch_nn_class::flatten, "", {},
        [&](::torch::jit::Module& module) {
            module.register_attribute("start_dim", c10::IntType::get(), start_dim);
            module.register_attribute("end_dim", c10::IntType::get(), end_dim);
        },
        "def forward(self, x: Tensor) -> Tensor:\n    return torch.flatten(x, self.start_dim, self.end_dim)\n");
}

// nn.MaxPool2d(kernel) (stride = kernel, no padding).
inline ::torch::jit::Module max_pool2d(int64_t kernel) {
    detail::require(kernel > 0, "max_pool2d: kernel must be positive");
    return detail::instantiate(torch_nn_class::max_pool2d, "", {}, {},
                               "def forward(self, x: Tensor) -> Tensor:\n    return torch.max_pool2d(x, " +
                                   detail::int_list_source(kernel) + ", " + detail::int_list_source(kernel) +
                                   ", [0, 0], [1, 1], False)\n");
}

// nn.AdaptiveAvgPool2d(output_size).
inline ::torch::jit::Module adaptive_avg_pool2d(int64_t output_size = 1) {
    detail::require(output_size > 0, "adaptive_avg_pool2d: output_size must be positive");
    return detail::instantiate(torch_nn_class::adaptive_avg_pool2d, "", {}, {},
                               "def forward(self, x: Tensor) -> Tensor:\n    return torch.adaptive_avg_pool2d(x, " +
                                   detail::int_list_source(output_size) + ")\n");
}

// nn.LayerNorm(features) over the last dimension: parameters weight, bias; attribute eps = 1e-5.
inline ::torch::jit::Module layer_norm(int64_t features) {
    detail::require(features > 0, "layer_norm: features must be positive");
    return detail::instantiate(
        torch_nn_class::layer_norm, "", {},
        [&](::torch::jit::Module& module) {
            module.register_parameter("weight", detail::constant_parameter({features}, 1.0), false);
            module.register_parameter("bias", detail::constant_parameter({features}, 0.0), false);
            module.register_attribute("eps", c10::FloatType::get(), 1e-5);
        },
        "def forward(self, x: Tensor) -> Tensor:\n    return torch.layer_norm(x, [" + std::to_string(features) +
            "], self.weight, self.bias, self.eps, False)\n");
}

// nn.Sequential(children...): children named "0", "1", ...; forward calls each in turn.
inline ::torch::jit::Module sequential(const std::vector<::torch::jit::Module>& children) {
    detail::require(!children.empty(), "sequential: needs at least one child");
    std::vector<named_module> named;
    for (const auto& child : children) named.emplace_back(std::to_string(named.size()), child);
    return detail::instantiate(torch_nn_class::sequential, "", named, {}, detail::chained_forward_source(named));
}

// A container of class `qualified_name` whose forward calls the named children in order, each on
// the previous result. For heads and stems that should have readable paths (`classifier.fc1`).
inline ::torch::jit::Module named_chain(const std::string& qualified_name, const std::vector<named_module>& children) {
    detail::require(!children.empty(), "named_chain: needs at least one child");
    return detail::instantiate(qualified_name, "", children, {}, detail::chained_forward_source(children));
}

// relu(x + y), the join of a residual block: `forward(x, y)`. Graph-mode quantization lowers it to
// quantized::add_relu.
inline ::torch::jit::Module add_relu() {
    return detail::instantiate(std::string(versatil_class_prefix) + "AddReLU", "", {}, {},
                               "def forward(self, x: Tensor, y: Tensor) -> Tensor:\n    return torch.relu(x + y)\n");
}

// A ResNet basic block: conv1 (3x3, stride) - bn1 - relu - conv2 (3x3) - bn2, plus the input (or
// `downsample`, a 1x1 strided conv + bn, when the shape changes), joined by add_relu.
// Children: conv1, bn1, relu, conv2, bn2, [downsample.0, downsample.1], add_relu.
inline ::torch::jit::Module residual_block(int64_t in_channels, int64_t out_channels, uint64_t seed,
                                           int64_t stride = 1) {
    const bool project = stride != 1 || in_channels != out_channels;
    std::vector<named_module> children{
        {"conv1", conv2d(in_channels, out_channels, 3, detail::mix_seed(seed, 0),
                         {.stride = stride, .padding = 1, .bias = false})},
        {"bn1", batch_norm2d(out_channels)},
        {"relu", relu()},
        {"conv2", conv2d(out_channels, out_channels, 3, detail::mix_seed(seed, 1), {.padding = 1, .bias = false})},
        {"bn2", batch_norm2d(out_channels)},
    };
    if (project)
        children.emplace_back("downsample", sequential({conv2d(in_channels, out_channels, 1, detail::mix_seed(seed, 2),
                                                               {.stride = stride, .bias = false}),
                                                        batch_norm2d(out_channels)}));
    children.emplace_back("add_relu", add_relu());
    const std::string source = std::string(R"JIT(
def forward(self, x: Tensor) -> Tensor:
    out = self.conv1.forward(x)
    out = self.bn1.forward(out)
    out = self.relu.forward(out)
    out = self.conv2.forward(out)
    out = self.bn2.forward(out)
)JIT") + (project ? "    return self.add_relu.forward(out, self.downsample.forward(x))\n"
                  : "    return self.add_relu.forward(out, x)\n");
    return detail::instantiate(std::string(versatil_class_prefix) + "ResidualBlock", "", children, {}, source);
}

// A MobileNet depthwise-separable block: depthwise 3x3 conv (groups = in_channels, stride) - bn1 -
// relu1 - pointwise 1x1 conv - bn2 - relu2. Children in that order.
inline ::torch::jit::Module depthwise_separable(int64_t in_channels, int64_t out_channels, uint64_t seed,
                                                int64_t stride = 1) {
    return named_chain(
        std::string(versatil_class_prefix) + "DepthwiseSeparable",
        {{"depthwise", conv2d(in_channels, in_channels, 3, detail::mix_seed(seed, 0),
                              {.stride = stride, .padding = 1, .groups = in_channels, .bias = false})},
         {"bn1", batch_norm2d(in_channels)},
         {"relu1", relu()},
         {"pointwise", conv2d(in_channels, out_channels, 1, detail::mix_seed(seed, 1), {.bias = false})},
         {"bn2", batch_norm2d(out_channels)},
         {"relu2", relu()}});
}

// Multi-head self-attention over x [N, T, dim] from four Linear children q_proj, k_proj, v_proj,
// out_proj: softmax(q k^T / sqrt(dim/heads)) v per head, heads concatenated, then out_proj.
inline ::torch::jit::Module self_attention(int64_t dim, int64_t heads, uint64_t seed) {
    detail::require(dim > 0 && heads > 0 && dim % heads == 0, "self_attention: heads (" + std::to_string(heads) +
                                                                  ") must divide dim (" + std::to_string(dim) + ")");
    const int64_t head_dim = dim / heads;
    const std::string shape = "[n, t, " + std::to_string(heads) + ", " + std::to_string(head_dim) + "]";
    const std::string source = "def forward(self, x: Tensor) -> Tensor:\n"
                               "    n = x.size(0)\n"
                               "    t = x.size(1)\n"
                               "    q = self.q_proj.forward(x).reshape(" + shape + ").transpose(1, 2)\n"
                               "    k = self.k_proj.forward(x).reshape(" + shape + ").transpose(1, 2)\n"
                               "    v = self.v_proj.forward(x).reshape(" + shape + ").transpose(1, 2)\n"
                               "    scores = torch.matmul(q, k.transpose(-2, -1)) * " +
                               detail::float_literal(1.0 / std::sqrt(static_cast<double>(head_dim))) + "\n"
                               "    weights = torch.softmax(scores, -1)\n"
                               "    context = torch.matmul(weights, v).transpose(1, 2).reshape([n, t, " +
                               std::to_string(dim) + "])\n"
                               "    return self.out_proj.forward(context)\n";
    return detail::instantiate(std::string(versatil_class_prefix) + "SelfAttention", "",
                               {{"q_proj", linear(dim, dim, detail::mix_seed(seed, 0))},
                                {"k_proj", linear(dim, dim, detail::mix_seed(seed, 1))},
                                {"v_proj", linear(dim, dim, detail::mix_seed(seed, 2))},
                                {"out_proj", linear(dim, dim, detail::mix_seed(seed, 3))}},
                               {}, source);
}

// A post-norm transformer encoder layer (nn.TransformerEncoderLayer's default order, without
// dropout): x = norm1(x + self_attn(x)); x = norm2(x + linear2(relu(linear1(x)))).
// Children: self_attn (q_proj, k_proj, v_proj, out_proj), norm1, linear1, relu, linear2, norm2.
inline ::torch::jit::Module encoder_block(int64_t dim, int64_t heads, int64_t feedforward, uint64_t seed) {
    detail::require(feedforward > 0, "encoder_block: feedforward must be positive");
    static const std::string source = R"JIT(
def forward(self, x: Tensor) -> Tensor:
    x = self.norm1.forward(x + self.self_attn.forward(x))
    hidden = self.relu.forward(self.linear1.forward(x))
    return self.norm2.forward(x + self.linear2.forward(hidden))
)JIT";
    return detail::instantiate(std::string(versatil_class_prefix) + "EncoderBlock", "",
                               {{"self_attn", self_attention(dim, heads, detail::mix_seed(seed, 0))},
                                {"norm1", layer_norm(dim)},
                                {"linear1", linear(dim, feedforward, detail::mix_seed(seed, 1))},
                                {"relu", relu()},
                                {"linear2", linear(feedforward, dim, detail::mix_seed(seed, 2))},
                                {"norm2", layer_norm(dim)}},
                               {}, source);
}

}  // namespace versatil::libtorch
