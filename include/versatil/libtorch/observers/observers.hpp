// Observers for LibTorch 1.13's graph-mode quantization passes, one per observer_kind of a
// quantization_spec. The passes (InsertObservers / InsertQuantDeQuant) need TorchScript
// modules, not C++ objects: they copy the observer into the model, call its `forward` while
// calibrating and its `calculate_qparams` when inserting quantize ops, and read the int
// attributes `dtype`, `qscheme` and `ch_axis`. So each observer is TorchScript defined from
// C++, compiled once per kind; make_observer deep-copies that prototype (same class type, no
// compilation) into a compilation unit of its own (private_clone.hpp: what clones it later
// lands there, not in the prototypes' unit) and writes the spec's values into it.
//
// The statistics follow torch.ao.quantization.observer (PyTorch 1.13), and the entropy
// observer's TensorRT's HistogramCalibrator, and run as compiled operators that forward calls
// (observer_ops.hpp, entropy_histogram.hpp). The qparams follow
// versatil::math::choose_qparams exactly, which is PyTorch's _calculate_qparams except that a
// range too wide for float32 gives the largest finite scale, not infinity.
#pragma once

#include <torch/csrc/jit/runtime/graph_executor.h>
#include <torch/script.h>

#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "versatil/core/quantization_spec.hpp"
#include "versatil/libtorch/error.hpp"
#include "versatil/libtorch/observers/histogram_ranges.hpp"
#include "versatil/libtorch/observers/observer_ops.hpp"
#include "versatil/libtorch/observers/observer_state.hpp"
#include "versatil/libtorch/torchscript/private_clone.hpp"

namespace versatil::libtorch {

namespace detail {

// A method of `module` that is one call of operator `op` (observer_ops.hpp), built as a graph:
// TorchScript source compiled from C++ cannot name operators outside aten. Its arguments are
// the method's tensor inputs (`inputs`), attributes of self ("self.NAME") or integer literals;
// its results are stored into attributes (`store`; the method then returns its first input, as
// an observer's forward does) or, with `store` empty, returned as a tuple of `results`.
struct operator_method {
    std::string name;
    const char* op;
    std::vector<std::string> inputs;
    std::vector<std::string> arguments;
    std::vector<std::string> store{};
    std::size_t results = 0;
};

inline void define_operator_method(::torch::jit::Module& module, const operator_method& method) {
    auto graph = std::make_shared<::torch::jit::Graph>();
    ::torch::jit::Value* self = graph->addInput("self")->setType(module.type());
    std::map<std::string, ::torch::jit::Value*, std::less<>> inputs;
    for (const std::string& input : method.inputs)
        inputs[input] = graph->addInput(input)->setType(c10::TensorType::get());
    std::vector<::torch::jit::Value*> arguments;
    for (const std::string& argument : method.arguments) {
        if (argument.starts_with("self."))
            arguments.push_back(graph->insertGetAttr(self, argument.substr(5)));
        else if (const auto input = inputs.find(argument); input != inputs.end())
            arguments.push_back(input->second);
        else
            arguments.push_back(graph->insertConstant(std::int64_t{std::stoll(argument)}));
    }
    const std::size_t results = method.store.empty() ? method.results : method.store.size();
    ::torch::jit::Node* call =
        graph->insertNode(graph->create(c10::Symbol::fromQualString(method.op), arguments, results));
    for (::torch::jit::Value* result : call->outputs()) result->setType(c10::TensorType::get());
    if (method.store.empty()) {
        graph->registerOutput(graph->insertNode(graph->createTuple(call->outputs()))->output());
    } else {
        for (std::size_t i = 0; i < results; ++i)
            graph->insertNode(graph->createSetAttr(self, method.store[i], call->output(i)));
        graph->registerOutput(inputs.at(method.inputs.front()));
    }
    auto* function = module._ivalue()->compilation_unit()->create_function(
        c10::QualifiedName(*module.type()->name(), method.name), graph);
    module.type()->addMethod(function);
}

// The qparams every class shares: _choose_qparams is versatil::math::choose_qparams,
// elementwise over 0-d (per tensor) or 1-d (per channel) min/max; 1-d results, as PyTorch's.
inline const operator_method choose_qparams_method{
    "_choose_qparams", "versatil::choose_qparams", {"min_val", "max_val"},
    {"min_val", "max_val", "self.quant_min", "self.quant_max", "self.symmetric", "self.unsigned_dtype", "self.eps"},
    {}, 2};

// _unobserved_qparams is PyTorch's fallback for an observer that saw nothing (LibTorch asks
// anyway, e.g. for the activation observer of a dynamic model).
inline constexpr std::string_view unobserved_qparams_source = R"JIT(
def _unobserved_qparams(self) -> Tuple[Tensor, Tensor]:
    return torch.ones([1]), torch.zeros([1]).long()
)JIT";

// What every per-tensor statistic shares: reset (min = inf and max = -inf, so min > max says
// "unobserved"), and qparams from the running min / max.
inline constexpr std::string_view per_tensor_range_source = R"JIT(
def _reset_range(self):
    self.min_val = torch.full([1], float("inf")).reshape([])
    self.max_val = torch.full([1], float("-inf")).reshape([])

def calculate_qparams(self) -> Tuple[Tensor, Tensor]:
    return self._choose_qparams(self.min_val, self.max_val)
)JIT";

// What every per-channel statistic shares: reset (empty min/max means nothing observed yet;
// the channel count comes with the first batch), and qparams from the running min / max.
inline constexpr std::string_view per_channel_range_source = R"JIT(
def _reset_range(self):
    self.min_val = torch.zeros([0])
    self.max_val = torch.zeros([0])

def calculate_qparams(self) -> Tuple[Tensor, Tensor]:
    if self.min_val.numel() == 0:
        return self._unobserved_qparams()
    return self._choose_qparams(self.min_val, self.max_val)
)JIT";

// The min / max observers skip a parameter they have seen unchanged
// (observer_ops::observe_min_max_once_per_version); a reset forgets it, so the next batch
// observes it again.
inline constexpr bool skips_seen_parameters(observer_kind kind) {
    return kind == observer_kind::min_max || kind == observer_kind::per_channel_min_max;
}

inline constexpr std::string_view reset_range_and_observed_source = R"JIT(
def reset_min_max_vals(self):
    self._reset_range()
    self.observed = torch.zeros([0])
)JIT";

inline constexpr std::string_view reset_range_source = R"JIT(
def reset_min_max_vals(self):
    self._reset_range()
)JIT";

// The histogram's own reset, and its qparams: PyTorch's L2 range search, then _choose_qparams.
inline constexpr std::string_view histogram_reset_source = R"JIT(
def reset_min_max_vals(self):
    self.min_val = torch.full([1], float("inf")).reshape([])
    self.max_val = torch.full([1], float("-inf")).reshape([])
    self.histogram = torch.zeros([self.bins])
)JIT";

inline const operator_method histogram_qparams_method{
    "calculate_qparams", "versatil::histogram_qparams", {},
    {"self.min_val", "self.max_val", "self.histogram", "self.dst_nbins", "self.quant_min", "self.quant_max",
     "self.symmetric", "self.unsigned_dtype", "self.eps"},
    {}, 2};

// Dynamic quantization takes the range at run time; the observer only carries dtype and
// qscheme for the passes.
inline constexpr std::string_view placeholder_source = R"JIT(
def forward(self, x_orig: Tensor) -> Tensor:
    return x_orig

def reset_min_max_vals(self):
    pass

def calculate_qparams(self) -> Tuple[Tensor, Tensor]:
    return self._unobserved_qparams()
)JIT";

// The calibration methods' range choices over the same histogram (histogram_ranges.hpp). The
// auto observer also keeps what its candidates and their errors need: the true range with the
// entropy observer's histogram, the moving-average range, a sample of the values, the
// extreme values and their count; and the qparams a step chose among its candidates, when one
// did (chosen_scale > 0: calibration=output, accuracy/output_ranges.hpp).
inline operator_method histogram_range_qparams_method(observer_kind kind) {
    if (kind == observer_kind::histogram_auto)
        return {"calculate_qparams", "versatil::histogram_auto_qparams", {},
                {"self.min_val", "self.max_val", "self.histogram", "self.seen_min", "self.seen_max", "self.moving_min",
                 "self.moving_max", "self.entropy_histogram", "self.samples", "self.sample_rate",
                 "self.lowest", "self.highest", "self.seen_count",
                 "self.dst_nbins", "self.quant_min", "self.quant_max", "self.symmetric", "self.unsigned_dtype",
                 "self.eps", "self.chosen_scale", "self.chosen_zero_point"},
                {}, 2};
    if (kind == observer_kind::histogram_entropy)
        return {"calculate_qparams", "versatil::entropy_qparams", {},
                {"self.min_val", "self.max_val", "self.histogram", "self.quant_min", "self.quant_max", "self.symmetric",
                 "self.unsigned_dtype", "self.eps"},
                {}, 2};
    return {"calculate_qparams", "versatil::percentile_qparams", {},
            {"self.min_val", "self.max_val", "self.histogram", "self.quant_min", "self.quant_max", "self.symmetric",
             "self.unsigned_dtype", "self.eps"},
            {}, 2};
}

// The entropy observer's histogram grows with the range (entropy_histogram.hpp): empty until a
// value is seen.
inline constexpr std::string_view entropy_reset_source = R"JIT(
def reset_min_max_vals(self):
    self.min_val = torch.full([1], float("inf")).reshape([])
    self.max_val = torch.full([1], float("-inf")).reshape([])
    self.histogram = torch.zeros([0]).double()
)JIT";

inline constexpr std::string_view histogram_auto_reset_source = R"JIT(
def reset_min_max_vals(self):
    self.min_val = torch.full([1], float("inf")).reshape([])
    self.max_val = torch.full([1], float("-inf")).reshape([])
    self.histogram = torch.zeros([self.bins])
    self.seen_min = torch.full([1], float("inf")).reshape([])
    self.seen_max = torch.full([1], float("-inf")).reshape([])
    self.moving_min = torch.full([1], float("inf")).reshape([])
    self.moving_max = torch.full([1], float("-inf")).reshape([])
    self.entropy_histogram = torch.zeros([0]).double()
    self.samples = torch.zeros([0])
    self.sample_rate = torch.ones([1]).long().reshape([])
    self.lowest = torch.zeros([0])
    self.highest = torch.zeros([0])
    self.seen_count = torch.zeros([1]).long().reshape([])
    self.chosen_scale = 0.0
)JIT";

inline constexpr int histogram_bins = 2048;
inline constexpr int histogram_upsample_rate = 128;

inline std::string class_name(observer_kind kind) {
    const auto base = [kind]() -> std::string_view {
        switch (kind) {
            case observer_kind::min_max: return "MinMaxObserver";
            case observer_kind::moving_average_min_max: return "MovingAverageMinMaxObserver";
            case observer_kind::per_channel_min_max: return "PerChannelMinMaxObserver";
            case observer_kind::moving_average_per_channel_min_max: return "MovingAveragePerChannelMinMaxObserver";
            case observer_kind::histogram: return "HistogramObserver";
            case observer_kind::histogram_percentile: return "HistogramPercentileObserver";
            case observer_kind::histogram_entropy: return "HistogramEntropyObserver";
            case observer_kind::histogram_auto: return "HistogramAutoObserver";
            // Not "PlaceholderObserver": InsertQuantDeQuant treats any class whose name
            // contains that as PyTorch's fp16 placeholder and crashes on ours (SIGSEGV in
            // Graph::createGetAttr, seen with 1.13.1).
            case observer_kind::placeholder: return "DynamicQuantizationObserver";
            case observer_kind::derived: break;  // nothing to observe (see make_observer)
        }
        throw error(error_kind::invalid_argument, "make_observer: unknown observer kind");
    }();
    return "__torch__.versatil.observers." + std::string(base);
}

// The statistics of each kind as method `name` (forward for an observer, _observe for a
// fake-quantize module that calls it before quantizing), one operator call that records what
// the observed value adds: MinMaxObserver's running range, MovingAverageMinMaxObserver's
// (later batches move it by averaging_constant), per tensor or per channel along ch_axis; and
// PyTorch 1.13's HistogramObserver, with one deliberate fix: 1.13 passes int(min_val) and
// int(max_val) as torch.histc's range, which truncates the range toward zero and drops every
// value outside it from the histogram while min_val/max_val keep the true range (fixed upstream
// in PyTorch 2.0, which passes the float bounds, as this does); the entropy observer's are
// TensorRT's fixed-width histogram beside the running range (entropy_histogram.hpp). Per-tensor kinds
// pass ch_axis -1 whatever the attribute holds.
inline operator_method statistics_method(observer_kind kind, const std::string& name) {
    if (kind == observer_kind::histogram_auto)
        return {
            name,
            "versatil::observe_histogram_auto",
            {"x_orig"},
            {"x_orig", "self.min_val", "self.max_val", "self.histogram", "self.upsample_rate", "self.seen_min",
             "self.seen_max", "self.moving_min", "self.moving_max", "self.averaging_constant", "self.entropy_histogram",
             "self.samples", "self.sample_rate", "self.lowest", "self.highest", "self.seen_count"},
            {"min_val", "max_val", "histogram", "seen_min", "seen_max", "moving_min", "moving_max", "entropy_histogram",
             "samples", "sample_rate", "lowest", "highest", "seen_count"}};
    if (kind == observer_kind::histogram_entropy)
        return {name, "versatil::observe_entropy_histogram", {"x_orig"},
                {"x_orig", "self.min_val", "self.max_val", "self.histogram"},
                {"min_val", "max_val", "histogram"}};
    if (is_histogram(kind))
        return {name, "versatil::observe_histogram", {"x_orig"},
                {"x_orig", "self.min_val", "self.max_val", "self.histogram", "self.upsample_rate"},
                {"min_val", "max_val", "histogram"}};
    const std::string axis = is_per_channel(kind) ? "self.ch_axis" : "-1";
    if (is_moving_average(kind))
        return {name, "versatil::observe_moving_average", {"x_orig"},
                {"x_orig", "self.min_val", "self.max_val", axis, "self.averaging_constant"}, {"min_val", "max_val"}};
    return {name, "versatil::observe_min_max", {"x_orig"},
            {"x_orig", "self.min_val", "self.max_val", axis, "self.observes_parameter", "self.observed",
             "self.observed_version"},
            {"min_val", "max_val", "observed", "observed_version"}};
}

// Defines the methods every observer-like class of `kind` shares: the qparams helpers, the
// statistics as method `statistics_name`, reset_min_max_vals and calculate_qparams.
inline void define_observer_methods(::torch::jit::Module& module, observer_kind kind,
                                    const std::string& statistics_name) {
    define_operator_method(module, choose_qparams_method);
    module.define(std::string(unobserved_qparams_source));
    if (kind == observer_kind::placeholder) {
        module.define(std::string(placeholder_source));
        return;
    }
    define_operator_method(module, statistics_method(kind, statistics_name));
    if (is_histogram(kind)) {
        define_operator_method(module, kind == observer_kind::histogram ? histogram_qparams_method
                                                                         : histogram_range_qparams_method(kind));
        module.define(std::string(kind == observer_kind::histogram_auto      ? histogram_auto_reset_source
                                  : kind == observer_kind::histogram_entropy ? entropy_reset_source
                                                                             : histogram_reset_source));
    } else {
        module.define(std::string(is_per_channel(kind) ? per_channel_range_source : per_tensor_range_source));
        module.define(std::string(skips_seen_parameters(kind) ? reset_range_and_observed_source : reset_range_source));
    }
}

// A module of class `name` with the attributes of the observer interface that a spec sets
// (write_spec), shared by observers and fake-quantize modules.
inline ::torch::jit::Module module_with_spec_attributes(const std::string& name, observer_kind kind) {
    ::torch::jit::Module module{c10::QualifiedName(name)};
    module.register_attribute("dtype", c10::IntType::get(), std::int64_t{0});
    module.register_attribute("qscheme", c10::IntType::get(), std::int64_t{0});
    module.register_attribute("ch_axis", c10::IntType::get(), std::int64_t{-1});
    module.register_attribute("quant_min", c10::IntType::get(), std::int64_t{0});
    module.register_attribute("quant_max", c10::IntType::get(), std::int64_t{255});
    module.register_attribute("eps", c10::FloatType::get(), double{default_eps});
    module.register_attribute("symmetric", c10::BoolType::get(), false);
    module.register_attribute("unsigned_dtype", c10::BoolType::get(), true);
    if (is_moving_average(kind) || kind == observer_kind::histogram_auto)
        module.register_attribute("averaging_constant", c10::FloatType::get(), double{default_averaging_constant});
    return module;
}

// A module of class `name` with an observer's attributes and its kind's statistics buffers.
inline ::torch::jit::Module observer_with_state(const std::string& name, observer_kind kind) {
    ::torch::jit::Module observer = module_with_spec_attributes(name, kind);
    if (kind == observer_kind::histogram_auto) {
        for (const char* values : {"seen_min", "seen_max", "moving_min", "moving_max", "samples", "lowest", "highest"})
            observer.register_buffer(values, ::torch::zeros({0}));
        observer.register_buffer("sample_rate", ::torch::ones({}, ::torch::kLong));
        observer.register_buffer("entropy_histogram", ::torch::zeros({0}, ::torch::kDouble));
        observer.register_buffer("seen_count", ::torch::zeros({}, ::torch::kLong));
        // Attributes, not buffers: a choice made after calibrating, not a statistic to merge.
        observer.register_attribute("chosen_scale", c10::FloatType::get(), 0.0);
        observer.register_attribute("chosen_zero_point", c10::IntType::get(), std::int64_t{0});
    }
    using observer_state::histogram_layout;
    if (observer_state::histogram_of(kind) == histogram_layout::entropy_grid) {
        observer.register_buffer(observer_state::histogram, ::torch::zeros({0}, ::torch::kDouble));
    } else if (observer_state::histogram_of(kind) == histogram_layout::over_range) {
        observer.register_attribute("bins", c10::IntType::get(), std::int64_t{histogram_bins});
        observer.register_attribute("upsample_rate", c10::IntType::get(), std::int64_t{histogram_upsample_rate});
        observer.register_attribute("dst_nbins", c10::IntType::get(), std::int64_t{256});
        observer.register_buffer(observer_state::histogram, ::torch::zeros({histogram_bins}));
    }
    if (observer_state::has_range(kind)) {
        observer.register_buffer(observer_state::min_val, ::torch::zeros({0}));
        observer.register_buffer(observer_state::max_val, ::torch::zeros({0}));
    }
    if (skips_seen_parameters(kind)) {
        // Attributes, not buffers: `observed` refers to a weight of the model, not to state.
        observer.register_attribute("observes_parameter", c10::BoolType::get(), false);
        observer.register_attribute("observed", c10::TensorType::get(), ::torch::zeros({0}));
        observer.register_attribute("observed_version", c10::TensorType::get(), ::torch::zeros({}, ::torch::kLong));
    }
    return observer;
}

// Compiles the class of one kind, with fresh statistics (reset_min_max_vals). The attribute
// values are overwritten per spec.
inline ::torch::jit::Module compile_observer_prototype(observer_kind kind) {
    ::torch::jit::Module observer = observer_with_state(class_name(kind), kind);
    define_observer_methods(observer, kind, "forward");
    observer.eval();
    observer.run_method("reset_min_max_vals");
    return observer;
}

// One compilation at a time, as when every kind compiled in one static's initializer: the
// TorchScript front end is not documented as safe to run on two threads at once.
inline std::mutex& prototype_compilation() {
    static std::mutex one_at_a_time;
    return one_at_a_time;
}

// One compilation per class per process, for observers and fake-quantize modules alike: the
// prototype of `kind`, compiled on its first use (a function-local static, so thread-safe),
// that make_observer and make_fake_quantize deep-copy (same class type, no compilation). The
// operators their code calls are registered first. Each kind on its own, so that a process
// compiles the classes it uses only (about 1 ms each once LibTorch's front end has started).
// The compilation runs the prototype's reset once, without the graph executor's optimizations:
// a process's first optimized run costs some 40 ms of LibTorch's own set-up (docs/benchmarks.md).
template <::torch::jit::Module (*compile)(observer_kind), observer_kind kind>
const ::torch::jit::Module& prototype_of() {
    static const ::torch::jit::Module prototype = [] {
        const std::lock_guard<std::mutex> lock(prototype_compilation());
        const ::torch::jit::GraphOptimizerEnabledGuard unoptimized(false);
        register_observer_ops();
        register_histogram_range_ops();
        return compile(kind);
    }();
    return prototype;
}

// The prototype of `kind`, one of `kinds`.
template <::torch::jit::Module (*compile)(observer_kind), observer_kind... kinds>
const ::torch::jit::Module& prototype(observer_kind kind) {
    const ::torch::jit::Module* found = nullptr;
    ((kind == kinds && (found = &prototype_of<compile, kinds>())) || ...);
    if (!found) throw error(error_kind::invalid_argument, "make_observer: unknown observer kind");
    return *found;
}

inline c10::ScalarType quantized_scalar_type(dtype value) {
    switch (value) {
        case dtype::uint8: return c10::ScalarType::QUInt8;
        case dtype::int8: return c10::ScalarType::QInt8;
        case dtype::int32: return c10::ScalarType::QInt32;
        case dtype::float32: break;
    }
    throw error(error_kind::invalid_argument, "make_observer: float32 is not a quantized dtype");
}

inline c10::QScheme torch_qscheme(qscheme value) {
    switch (value) {
        case qscheme::per_tensor_affine: return c10::kPerTensorAffine;
        case qscheme::per_tensor_symmetric: return c10::kPerTensorSymmetric;
        case qscheme::per_channel_affine: return c10::kPerChannelAffine;
        case qscheme::per_channel_symmetric: return c10::kPerChannelSymmetric;
    }
    throw error(error_kind::invalid_argument, "make_observer: unknown qscheme");
}

// 2 ** bits of the dtype: the number of quantized levels HistogramObserver's error model
// spreads over the chosen range (PyTorch uses the dtype's width, not quant_min/quant_max).
inline std::int64_t destination_bins(dtype value) {
    return value == dtype::int32 ? std::int64_t{1} << 32 : std::int64_t{1} << 8;
}

// The spec's values into a module of the observer interface (shared with fake_quantize.hpp).
inline void write_spec(::torch::jit::Module& module, const quantization_spec& spec) {
    module.setattr("dtype", static_cast<std::int64_t>(quantized_scalar_type(spec.dtype)));
    module.setattr("qscheme", static_cast<std::int64_t>(torch_qscheme(spec.qscheme)));
    module.setattr("ch_axis", std::int64_t{is_per_channel(spec.qscheme) ? spec.ch_axis : -1});
    module.setattr("quant_min", std::int64_t{spec.quant_min});
    module.setattr("quant_max", std::int64_t{spec.quant_max});
    module.setattr("eps", double{spec.eps});
    module.setattr("symmetric", is_symmetric(spec.qscheme));
    module.setattr("unsigned_dtype", spec.dtype == dtype::uint8);
    if (is_moving_average(spec.observer) || spec.observer == observer_kind::histogram_auto)
        module.setattr("averaging_constant", double{spec.averaging_constant});
}

}  // namespace detail

// An observer module for one spec, in the form LibTorch 1.13's graph-mode passes expect:
// int attributes dtype (ScalarType code), qscheme (QScheme code), ch_axis, quant_min,
// quant_max; float eps; forward(x) records statistics and returns x itself;
// calculate_qparams() -> (scale float32, zero_point int64), both 1-d.
inline ::torch::jit::Module make_observer(const quantization_spec& spec) {
    if (const spec_rule rule = first_violated_rule(spec); rule != spec_rule::ok)
        throw error(error_kind::invalid_argument,
                    "make_observer: invalid quantization spec: " + std::string(to_string(rule)));
    if (spec.observer == observer_kind::derived)
        throw error(
            error_kind::invalid_argument,
            "make_observer: a derived spec (an int32 bias) takes its scale from other tensors and has no observer");
    if (spec.is_fake_quantize)
        throw error(error_kind::invalid_argument,
                    "make_observer: the spec asks for fake quantization (QAT); observers here are for "
                    "post-training quantization, so use a spec with is_fake_quantize = false");

    using enum observer_kind;
    ::torch::jit::Module observer = in_own_unit(
        detail::prototype<detail::compile_observer_prototype, min_max, moving_average_min_max, per_channel_min_max,
                                   moving_average_per_channel_min_max, histogram, histogram_percentile,
                                   histogram_entropy, histogram_auto, placeholder>(spec.observer)
            .deepcopy());
    detail::write_spec(observer, spec);
    if (is_histogram(spec.observer) && spec.observer != observer_kind::histogram_entropy)
        observer.setattr("dst_nbins", detail::destination_bins(spec.dtype));
    return observer;
}

// `observer` (or a fake-quantize module) marked as the observer of a weight, which LibTorch's
// passes call on the same parameter every batch: a min / max observer then skips it while it is
// unchanged (observer_ops::observe_min_max_once_per_version); other kinds observe every call.
inline ::torch::jit::Module observing_parameters(::torch::jit::Module observer) {
    if (observer.hasattr("observes_parameter")) observer.setattr("observes_parameter", true);
    return observer;
}

}  // namespace versatil::libtorch
