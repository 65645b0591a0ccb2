// The calibration methods (the calibration option) on the benchmark models: output SQNR and top-1
// on the held-out images per method, and the quantize time each takes, for the static
// configurations of both backends (xnnpack also with per-tensor weights).
//
//   calibration_methods OUT.json [--steps N] [--repeats N]
//
// As run for RESULTS.md, from the repository root (benchmarks/run's release build directory):
//   meson compile -C build-bench benchmarks/calibration_methods
//   build-bench/benchmarks/calibration_methods benchmarks/results/calibration_methods.json
//
// The models are trained as torch_models and accuracy_steps train them (benchmark_models.hpp; one
// thread), with the same calibration and evaluation images, so the runtime section's PyTorch
// figures apply to the same weights (each model's float top-1 is recorded to check that).
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "benchmark_models.hpp"

using namespace versatil;
using namespace versatil::libtorch;
using namespace versatil::benchmarks;
using json = nlohmann::json;

int main(int argc, char** argv) {
    const std::optional<benchmark_arguments> arguments = parse_benchmark_arguments(argc, argv, 1);
    if (!arguments) return 2;
    const auto& [out, steps, repeats] = *arguments;
    const std::vector<std::string> bases{"x86_inductor", "xnnpack", "xnnpack:per_tensor"};
    // "" is the backend's default (histogram); naming histogram gives the same observers.
    const std::vector<std::string> methods{"", "minmax", "moving_minmax", "percentile", "entropy", "auto"};
    try {
        at::set_num_threads(1);
        const benchmark_data loaded = load_benchmark_data();
        const auto& [train, test, calibration, evaluation] = loaded;
        std::string command = "build-bench/benchmarks/calibration_methods";
        for (int i = 1; i < argc; ++i) command += std::string(" ") + argv[i];
        const std::time_t now = std::time(nullptr);
        char date[32];
        std::strftime(date, sizeof date, "%Y-%m-%d %H:%M", std::gmtime(&now));
        json results = {{"command", command}, {"date", date}, {"steps", steps}, {"repeats", repeats}};
        for (const model_entry& entry : benchmark_models()) {
            ::torch::jit::Module model = entry.build();
            (void)train_model(model, entry, train, steps);
            const model_outputs reference = run_batches(model, evaluation);
            json model_json = {{"float_top1", top1_accuracy(reference, test.labels)}};
            std::printf("%s (float top-1 %.2f %%)\n", entry.name.c_str(), 100 * model_json["float_top1"].get<double>());
            const quantize_data data{calibration, evaluation, test.labels};
            for (const std::string& base : bases)
                for (const std::string& method : methods) {
                    const std::string spec = method.empty() ? base : with_options(base, "calibration=" + method);
                    const runtime_quantizer quantizer = whole_model(spec);
                    const auto [lowered, seconds] = quantize_timed(model, quantizer, data, repeats);
                    const engine_scope engine(engine_settings{lowered.plan.engine, 1, std::nullopt});
                    const model_outputs quantized = run_batches(lowered.module.deepcopy(), evaluation);
                    const json run = {{"spec", spec},
                                      {"base", base},
                                      {"method", method.empty() ? "histogram (default)" : method},
                                      {"sqnr_db", compare_outputs(reference, quantized).overall.sqnr_db},
                                      {"quantized_top1", top1_accuracy(quantized, test.labels)},
                                      {"quantize_seconds", median(seconds)}};
                    std::printf("  %-44s SQNR %6.2f dB  top-1 %.2f %%  quantize %.3f s\n", spec.c_str(),
                                run["sqnr_db"].get<double>(), 100 * run["quantized_top1"].get<double>(),
                                run["quantize_seconds"].get<double>());
                    std::fflush(stdout);
                    model_json["runs"].push_back(run);
                }
            results["models"][entry.name] = model_json;
        }
        std::ofstream(out) << results.dump(2) << '\n';
        return 0;
    } catch (const std::exception& failure) {
        std::fprintf(stderr, "calibration_methods: %s\n", failure.what());
        return 1;
    }
}
