// The policy layer's cost, against what it replaces: a virtual-dispatch composition written
// like the Python original (an abstract backend class, a composable quantizer holding a list of
// (module path, backend object) pairs), and raw setenv / unsetenv for environments.
//
// Three kinds of case, named by prefix:
//   constant/   the answer as a literal: the floor any implementation can reach
//   versatil/   the policy layer, as a user writes it
//   virtual/    the ABC-style baseline (virtual is fine here, never in include/)
// Every input that is meant to be known only at run time goes through
// benchmark::DoNotOptimize first, so neither side is folded away where it should not be; every
// result goes through DoNotOptimize so it is computed.
#include <benchmark/benchmark.h>

#include <array>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "versatil/versatil.hpp"

using namespace versatil;

namespace {

using model_quantizer =
    Quantizer<Target<"features", XNNPACK<>>, Target<"classifier", X86Inductor<>>, Exclude<"features.0">>;

// ---- the baseline: an ABC and a composable quantizer, as in Python ------------------------------

struct backend_base {
    virtual ~backend_base() = default;
    virtual std::string_view name() const = 0;
    virtual bool is_dynamic() const = 0;
    virtual const quantization_config& config() const = 0;
    virtual backend_quantizer create_quantizer(std::string_view module_path) const = 0;
};

template <class Policy>
struct virtual_backend final : backend_base {
    std::string_view name() const override { return Policy::name; }
    bool is_dynamic() const override { return Policy::is_dynamic; }
    const quantization_config& config() const override { return descriptor_of<Policy>.config; }
    backend_quantizer create_quantizer(std::string_view module_path) const override {
        return {&descriptor_of<Policy>, module_path};
    }
};

// ComposableQuantizer: targets held as objects, looked up by the longest containing path.
struct virtual_composable_quantizer {
    struct entry {
        std::string path;
        std::unique_ptr<backend_base> backend;  // nullptr: excluded
    };
    std::vector<entry> targets;

    static bool contains(std::string_view outer, std::string_view inner) {
        return outer.empty() || inner == outer ||
               (inner.size() > outer.size() && inner.starts_with(outer) && inner[outer.size()] == '.');
    }

    const backend_base* quantizer_for(std::string_view module_name) const {
        const entry* found = nullptr;
        for (const entry& target : targets)
            if (contains(target.path, module_name) && (!found || target.path.size() > found->path.size()))
                found = &target;
        return found ? found->backend.get() : nullptr;
    }
};

virtual_composable_quantizer make_virtual_quantizer() {
    virtual_composable_quantizer quantizer;
    quantizer.targets.push_back({"features", std::make_unique<virtual_backend<XNNPACK<>>>()});
    quantizer.targets.push_back({"classifier", std::make_unique<virtual_backend<X86Inductor<>>>()});
    quantizer.targets.push_back({"features.0", nullptr});
    return quantizer;
}

// Module names a model walk would ask about, hidden from the optimizer.
constexpr std::array<std::string_view, 6> module_names{"features.3.conv", "classifier.fc1", "features.0",
                                                       "features",        "classifier",     "head"};

// ---- queries whose answer is a constant ---------------------------------------------------------

void constant_backend_name(benchmark::State& state) {
    for (auto _ : state) {
        std::string_view name = "xnnpack";
        benchmark::DoNotOptimize(name);
    }
}
BENCHMARK(constant_backend_name)->Name("constant/backend_name");

void versatil_backend_name(benchmark::State& state) {
    for (auto _ : state) {
        std::string_view name = model_quantizer::backend_names[0];
        benchmark::DoNotOptimize(name);
    }
}
BENCHMARK(versatil_backend_name)->Name("versatil/backend_names[0]");

void versatil_quantizer_for_literal(benchmark::State& state) {
    for (auto _ : state) {
        // As a user writes it: a literal path, no constexpr forced.
        std::optional<backend_quantizer> found = model_quantizer::quantizer_for("features.3.conv");
        benchmark::DoNotOptimize(found);
    }
}
BENCHMARK(versatil_quantizer_for_literal)->Name("versatil/quantizer_for(literal)");

void versatil_config_query(benchmark::State& state) {
    for (auto _ : state) {
        int quant_max = model_quantizer::quantizer_for("classifier.fc1")->config().input_activation->quant_max;
        bool calibrate = model_quantizer::needs_calibration;
        benchmark::DoNotOptimize(quant_max);
        benchmark::DoNotOptimize(calibrate);
    }
}
BENCHMARK(versatil_config_query)->Name("versatil/config_query");

void virtual_backend_name(benchmark::State& state) {
    const virtual_composable_quantizer quantizer = make_virtual_quantizer();
    const backend_base* backend = quantizer.targets[0].backend.get();
    for (auto _ : state) {
        benchmark::DoNotOptimize(backend);  // the object is only known at run time, as in Python
        std::string_view name = backend->name();
        benchmark::DoNotOptimize(name);
    }
}
BENCHMARK(virtual_backend_name)->Name("virtual/backend->name()");

void virtual_quantizer_for_literal(benchmark::State& state) {
    const virtual_composable_quantizer quantizer = make_virtual_quantizer();
    for (auto _ : state) {
        const backend_base* found = quantizer.quantizer_for("features.3.conv");
        benchmark::DoNotOptimize(found);
    }
}
BENCHMARK(virtual_quantizer_for_literal)->Name("virtual/quantizer_for(literal)");

void virtual_config_query(benchmark::State& state) {
    const virtual_composable_quantizer quantizer = make_virtual_quantizer();
    for (auto _ : state) {
        int quant_max = quantizer.quantizer_for("classifier.fc1")->config().input_activation->quant_max;
        bool calibrate = false;
        for (const auto& target : quantizer.targets) calibrate |= target.backend && !target.backend->is_dynamic();
        benchmark::DoNotOptimize(quant_max);
        benchmark::DoNotOptimize(calibrate);
    }
}
BENCHMARK(virtual_config_query)->Name("virtual/config_query");

// ---- create_quantizer ---------------------------------------------------------------------------

void versatil_create_quantizer(benchmark::State& state) {
    std::string_view path = "features";
    for (auto _ : state) {
        benchmark::DoNotOptimize(path);
        backend_quantizer made = XNNPACK<>::create_quantizer(path);
        benchmark::DoNotOptimize(made);
    }
}
BENCHMARK(versatil_create_quantizer)->Name("versatil/create_quantizer(runtime path)");

void virtual_create_quantizer(benchmark::State& state) {
    const std::unique_ptr<backend_base> backend = std::make_unique<virtual_backend<XNNPACK<>>>();
    const backend_base* dispatch = backend.get();
    std::string_view path = "features";
    for (auto _ : state) {
        benchmark::DoNotOptimize(path);
        benchmark::DoNotOptimize(dispatch);
        backend_quantizer made = dispatch->create_quantizer(path);
        benchmark::DoNotOptimize(made);
    }
}
BENCHMARK(virtual_create_quantizer)->Name("virtual/create_quantizer(runtime path)");

// ---- target lookup for names known only at run time ---------------------------------------------

void versatil_lookup_runtime(benchmark::State& state) {
    std::size_t next = 0;
    for (auto _ : state) {
        std::string_view name = module_names[next++ % module_names.size()];
        benchmark::DoNotOptimize(name);
        std::optional<backend_quantizer> found = model_quantizer::quantizer_for(name);
        benchmark::DoNotOptimize(found);
    }
}
BENCHMARK(versatil_lookup_runtime)->Name("versatil/Quantizer::quantizer_for(runtime name)");

void versatil_runtime_quantizer_lookup(benchmark::State& state) {
    const runtime_quantizer quantizer = *runtime_quantizer::compose(
        {{"features", &descriptor_of<XNNPACK<>>}, {"classifier", &descriptor_of<X86Inductor<>>}, {"features.0", nullptr}});
    std::size_t next = 0;
    for (auto _ : state) {
        std::string_view name = module_names[next++ % module_names.size()];
        benchmark::DoNotOptimize(name);
        std::optional<backend_quantizer> found = quantizer.quantizer_for(name);
        benchmark::DoNotOptimize(found);
    }
}
BENCHMARK(versatil_runtime_quantizer_lookup)->Name("versatil/runtime_quantizer::quantizer_for(runtime name)");

void virtual_lookup_runtime(benchmark::State& state) {
    const virtual_composable_quantizer quantizer = make_virtual_quantizer();
    std::size_t next = 0;
    for (auto _ : state) {
        std::string_view name = module_names[next++ % module_names.size()];
        benchmark::DoNotOptimize(name);
        const backend_base* found = quantizer.quantizer_for(name);
        benchmark::DoNotOptimize(found);
    }
}
BENCHMARK(virtual_lookup_runtime)->Name("virtual/quantizer_for(runtime name)");

// ---- scoped environment enter + exit ------------------------------------------------------------
// X86Inductor sets CUDA_VISIBLE_DEVICES="" and TORCHINDUCTOR_FREEZING=1. The raw baseline does
// what a correct hand-written version must: remember the previous values, set, then restore
// (unset what was unset). Both run with the variables unset beforehand.

void versatil_environment_scope(benchmark::State& state) {
    for (auto _ : state) {
        const auto scope = X86Inductor<>::environment_context();
        benchmark::DoNotOptimize(&scope);
    }
}
BENCHMARK(versatil_environment_scope)->Name("versatil/environment_context enter+exit (process)");

void versatil_environment_scope_null(benchmark::State& state) {
    for (auto _ : state) {
        const auto scope = X86Inductor<>::environment_context<null_environment>();
        benchmark::DoNotOptimize(&scope);
    }
}
BENCHMARK(versatil_environment_scope_null)->Name("versatil/environment_context enter+exit (null store)");

void raw_setenv_unsetenv(benchmark::State& state) {
    static constexpr std::array<std::pair<const char*, const char*>, 2> variables{
        {{"CUDA_VISIBLE_DEVICES", ""}, {"TORCHINDUCTOR_FREEZING", "1"}}};
    for (auto _ : state) {
        std::array<std::optional<std::string>, 2> previous;
        for (std::size_t i = 0; i < variables.size(); ++i) {
            const char* value = std::getenv(variables[i].first);
            if (value) previous[i] = value;
            ::setenv(variables[i].first, variables[i].second, 1);
        }
        benchmark::DoNotOptimize(previous);
        for (std::size_t i = variables.size(); i-- > 0;) {
            if (previous[i])
                ::setenv(variables[i].first, previous[i]->c_str(), 1);
            else
                ::unsetenv(variables[i].first);
        }
    }
}
BENCHMARK(raw_setenv_unsetenv)->Name("raw/getenv+setenv+unsetenv (same two variables)");

}  // namespace

int main(int argc, char** argv) {
    ::unsetenv("CUDA_VISIBLE_DEVICES");
    ::unsetenv("TORCHINDUCTOR_FREEZING");
    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
}
