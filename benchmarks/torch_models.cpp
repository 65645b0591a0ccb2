// The runtime benchmark, versatil's side: trains each model on Fashion-MNIST, quantizes it with
// every backend (static and dynamic) and measures what a user compares tools on: SQNR, top-1,
// size, float and quantized latency at batch 1 and 8 on one thread, and quantize time. It also
// writes what the Python peer (peer.py) needs to run the same models on the same data: each
// trained model (TorchScript), its float logits on the test images, and the data itself.
//
//   torch_models OUT_DIR [--steps N] [--test N] [--quick]
//
// Quantize times come from fresh child processes per configuration (`torch_models
// --time-quantization MODEL.pt SPEC TEST_COUNT [phases]`, see child_timing): the headline is
// the first quantization of a fresh process (cold, what every versatil-quantize run pays), the
// warm time of later ones beside it.
//
// OUT_DIR/data.pt            calib [256,1,28,28], test, test_labels (torch.load-able dict)
// OUT_DIR/<model>/model.pt   the trained float model;  reference.pt: its logits on `test`
// OUT_DIR/scaling/mlp_<L>.pt untrained MLPs of L linear layers, for quantize time vs depth
// OUT_DIR/loading/          a 90 MB MLP, for the cost of loading a file checked
// OUT_DIR/versatil.json      every measurement below, with that cost (load_model /
//                            load_quantized against plain torch::jit::load)
#include <torch/csrc/jit/serialization/pickle.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "benchmark_models.hpp"

using namespace versatil;
using namespace versatil::libtorch;
using namespace versatil::benchmarks;
using json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

// Quantize times are the lowest of 5 runs, on both sides: the same work every run, and what the
// shared VM adds is page faults and waits (the peer's MLP: 47 ms at best, 177 ms the median of
// 15 runs on the same data), which the lowest leaves out as latency_rounds does.
constexpr int quantize_repeats = 5;
// Cold times: the first quantization of each of this many fresh processes, the lowest (peer.py
// the same, one fresh Python process each).
constexpr int cold_processes = 3;
constexpr int latency_rounds = 3;  // the machine is shared: the quietest of 3 medians (peer.py does the same)

void write_pickle(const c10::IValue& value, const fs::path& path) {
    const std::vector<char> bytes = ::torch::jit::pickle_save(value);
    std::ofstream out(path, std::ios::binary);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!out) throw std::runtime_error("cannot write " + path.string());
}

// What quantize() runs before it measures anything: prepare, calibrate, convert and lower, or
// for dynamic targets the direct path (dynamic.hpp).
lowered_model quantize_steps(const ::torch::jit::Module& model, const runtime_quantizer& quantizer,
                             const std::vector<batch>& calibration) {
    return quantize_model(model, quantizer, quantize_data{calibration, {}, std::nullopt},
                          {.threads = 1, .per_layer = false, .progress = false});
}

// The lowest seconds of quantize_steps over `quantize_repeats` runs.
double quantize_seconds(const ::torch::jit::Module& model, const runtime_quantizer& quantizer,
                        const std::vector<batch>& calibration) {
    std::vector<double> seconds;
    for (int i = 0; i < quantize_repeats; ++i) {
        const auto start = std::chrono::steady_clock::now();
        const lowered_model lowered = quantize_steps(model, quantizer, calibration);
        seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
    return *std::min_element(seconds.begin(), seconds.end());
}

// One more quantization, timed phase by phase: where the quantize time goes. The direct dynamic
// path has no prepare, calibrate or convert: its whole time is under "lower". "per_layer" is the
// per-layer analysis quantize() runs after by default, on the first samples of `evaluation` its
// budget gives (static: from the converted model, dynamic: from the direct path's; static layers
// behind a value-changing op: each layer quantized alone). "float_forward" is no phase: the float model
// run over the calibration batches, what calibrating cannot take less than.
json phase_seconds(const ::torch::jit::Module& model, const runtime_quantizer& quantizer,
                   const std::vector<batch>& calibration, const std::vector<batch>& evaluation) {
    using clock = std::chrono::steady_clock;
    const auto since = [](clock::time_point start) { return std::chrono::duration<double>(clock::now() - start).count(); };
    const quantization_plan plan = plan_for(quantizer);
    lowering_options lowering;
    if (!calibration.empty()) lowering.sample = calibration.front();
    lowering.threads = 1;
    const auto per_layer = [&](const ::torch::jit::Module* converted) {
        return libtorch::detail::per_layer_sqnr(model, quantizer, converted, calibration, evaluation, 1);
    };
    auto start = clock::now();
    if (const std::optional<lowered_model> direct = lower_dynamic_directly(model, plan, lowering, calibration)) {
        const double lower_s = since(start);
        start = clock::now();
        json phases = {{"prepare", 0.0}, {"calibrate", 0.0}, {"convert", 0.0}, {"lower", lower_s}};
        try {
            (void)per_layer(nullptr);
            phases["per_layer"] = since(start);
        } catch (const std::exception&) {
            // as in cli_seconds: the per-layer analysis alone fails (recorded there)
        }
        return phases;
    }
    {
        const ::torch::NoGradGuard no_grad;
        ::torch::jit::Module float_model = model;
        for (const batch& inputs : calibration) (void)float_model.forward(inputs.arguments());  // warm-up
        start = clock::now();
        for (const batch& inputs : calibration) (void)float_model.forward(inputs.arguments());
    }
    const double float_forward_s = since(start);
    start = clock::now();
    prepared_model prepared = prepare(model, plan);
    const double prepare_s = since(start);
    start = clock::now();
    calibrate(prepared, calibration, {false});
    const double calibrate_s = since(start);
    start = clock::now();
    const converted_model converted = convert(prepared);
    const double convert_s = since(start);
    start = clock::now();
    const lowered_model lowered = lower(converted, lowering);
    const double lower_s = since(start);
    start = clock::now();
    (void)per_layer(&converted.module);
    return {{"prepare", prepare_s}, {"calibrate", calibrate_s}, {"convert", convert_s}, {"lower", lower_s},
            {"per_layer", since(start)}, {"float_forward", float_forward_s}};
}

// quantize() as versatil-quantize calls it on the same data, with and without the per-layer
// analysis (the CLI's default against --no-per-layer), and with the analysis on every evaluation
// sample (--per-layer-samples 0); median seconds of `quantize_repeats`, interleaved.
json cli_seconds(const ::torch::jit::Module& model, const runtime_quantizer& quantizer, const quantize_data& data) {
    std::vector<double> with, without, every_sample;
    for (int i = 0; i < quantize_repeats; ++i)
        for (std::vector<double>* times : {&with, &without, &every_sample}) {
            quantize_options options{.threads = 1, .per_layer = times != &without, .progress = false};
            if (times == &every_sample) options.per_layer_samples = 0;
            const auto start = std::chrono::steady_clock::now();
            (void)quantize(model, quantizer, data, options);
            times->push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
        }
    return {{"default", median(with)}, {"no_per_layer", median(without)}, {"every_sample", median(every_sample)}};
}

bool is_quantize_node(std::string_view kind) { return kind == "aten::quantize_per_tensor"; }
bool is_dequantize_node(std::string_view kind) { return kind == "aten::dequantize"; }

// median_latency_ms (median of one forward after warm-up), the lowest of `latency_rounds` rounds.
double latency_ms(const ::torch::jit::Module& model, const at::Tensor& input) {
    double best = std::numeric_limits<double>::infinity();
    for (int round = 0; round < latency_rounds; ++round) best = std::min(best, median_latency_ms(model, input));
    return best;
}

// Milliseconds to load `path`: plainly, checked in this process, and checked with the source
// compiled in a child process (the default; file_check.hpp). Medians of 7, interleaved.
json load_times(const fs::path& path, const std::function<void(compile_source)>& checked_load) {
    std::vector<double> plain, in_process, in_child;
    const auto milliseconds = [](const std::function<void()>& load) {
        const auto start = std::chrono::steady_clock::now();
        load();
        return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    };
    for (int i = 0; i < 7; ++i) {
        plain.push_back(milliseconds([&] { (void)::torch::jit::load(path.string()); }));
        in_process.push_back(milliseconds([&] { checked_load(compile_source::in_process); }));
        in_child.push_back(milliseconds([&] { checked_load(compile_source::in_child_process); }));
    }
    return {{"file", path.filename().string()}, {"bytes", fs::file_size(path)}, {"plain_ms", median(plain)},
            {"in_process_ms", median(in_process)}, {"in_child_ms", median(in_child)}};
}

// This process's resident memory: the fork behind a child-process load costs more the larger it is.
double resident_megabytes() {
    std::ifstream status("/proc/self/status");
    for (std::string line; std::getline(status, line);)
        if (line.starts_with("VmRSS:")) return std::stod(line.substr(6)) / 1024.0;
    return -1;
}

// Quantize times are measured in a process of their own, which loads the saved model.
// LibTorch 1.13's quantization passes append to a function-local static vector on every call of
// isSingleInputGeneralAtenFunction (torch/csrc/jit/passes/quantization/helper.cpp) and search it
// linearly, so each quantization in a process makes the next ones slower (mobilenet_cnn, 250 in
// a row: convert 10 -> 23 ms, prepare 20 -> 28 ms). In this process the last model would pay for
// the hundreds of quantizations before it; a fresh one times what a user's process sees at its
// first quantizations, and what every run of versatil-quantize sees. The peer's FX passes are
// Python and keep no such state.
json child_timing(const fs::path& model, const std::string& spec, int64_t test_count, bool phases) {
    const std::string command = fs::read_symlink("/proc/self/exe").string() + " --time-quantization '" + model.string() +
                                "' '" + spec + "' " + std::to_string(test_count) + (phases ? " phases" : "");
    FILE* pipe = popen(command.c_str(), "r");
    if (!pipe) throw std::runtime_error("cannot run " + command);
    std::string output;
    for (char buffer[4096]; const std::size_t n = std::fread(buffer, 1, sizeof buffer, pipe);) output.append(buffer, n);
    if (pclose(pipe) != 0) throw std::runtime_error("the timing process failed: " + command);
    return json::parse(output);
}

// The child's side: the first quantization of `spec` in this fresh process (cold_seconds: what
// a process pays once, LibTorch's lazy initializations and the observers' first compilation,
// included, as in every run of versatil-quantize), then the lowest of later ones (warm_seconds),
// and with `phases` phase_seconds, on the saved model and the benchmark's data, printed as JSON.
// Dynamic targets get the calibration data as versatil-quantize gives a data file's: their
// layers' weights are chosen on it (dynamic_weight_choice.hpp).
int time_quantization(const fs::path& model_path, const std::string& spec, int64_t test_count, bool phases) {
    at::set_num_threads(1);
    const dataset train = load_fashion_mnist(fashion_mnist_split::train, train_images);
    const dataset test = load_fashion_mnist(fashion_mnist_split::test, test_count);
    const std::vector<batch> calibration = batches_of(calibration_images(train), calibration_batch);
    const ::torch::jit::Module model = ::torch::jit::load(model_path.string());
    const runtime_quantizer quantizer = whole_model(spec);
    const auto start = std::chrono::steady_clock::now();
    (void)quantize_steps(model, quantizer, calibration);
    json timed = {{"cold_seconds", std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()},
                  {"warm_seconds", quantize_seconds(model, quantizer, calibration)}};
    if (phases) timed["phases"] = phase_seconds(model, quantizer, calibration, batches_of(test.images, evaluation_batch));
    std::printf("%s\n", timed.dump().c_str());
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc < 2) {
        std::fprintf(stderr, "usage: %s OUT_DIR [--steps N] [--test N] [--quick]\n", argv[0]);
        return 2;
    }
    if (std::strcmp(argv[1], "--time-quantization") == 0 && argc >= 5)
        return time_quantization(argv[2], argv[3], std::stol(argv[4]), argc > 5 && std::strcmp(argv[5], "phases") == 0);
    const fs::path out = argv[1];
    int64_t steps = 300, test_count = 2000;
    bool quick = false;
    for (int i = 2; i < argc; ++i) {
        if (std::strcmp(argv[i], "--steps") == 0 && i + 1 < argc) steps = std::stol(argv[++i]);
        else if (std::strcmp(argv[i], "--test") == 0 && i + 1 < argc) test_count = std::stol(argv[++i]);
        else if (std::strcmp(argv[i], "--quick") == 0) quick = true;
    }
    try {
        at::set_num_threads(1);  // one thread throughout: training (fastest here) and every timing
        fs::create_directories(out / "scaling");
        const dataset train = load_fashion_mnist(fashion_mnist_split::train, train_images);
        const dataset test = load_fashion_mnist(fashion_mnist_split::test, test_count);
        const at::Tensor calib = calibration_images(train);
        const std::vector<batch> calibration = batches_of(calib, calibration_batch);
        const std::vector<batch> evaluation = batches_of(test.images, evaluation_batch);
        {
            c10::Dict<std::string, at::Tensor> data;
            data.insert("calib", calib);
            data.insert("test", test.images);
            data.insert("test_labels", test.labels);
            write_pickle(data, out / "data.pt");
        }

        const std::vector<model_entry> models = benchmark_models();
        const std::vector<std::string> specs{"x86_inductor", "xnnpack", "x86_inductor:dynamic", "xnnpack:dynamic"};

        json results;
        results["config"] = {{"steps", steps},
                             {"train_images", train.images.size(0)},
                             {"test_images", test.images.size(0)},
                             {"calibration_images", calib.size(0)},
                             {"quantize_repeats", quantize_repeats},
                             {"cold_processes", cold_processes},
                             {"latency_rounds", latency_rounds},
                             {"threads", 1}};
        for (const model_entry& entry : models) {
            ::torch::jit::Module model = entry.build();
            const int64_t steps_run = quick ? std::min<int64_t>(steps, 20) : steps;
            const auto train_start = std::chrono::steady_clock::now();
            const training_result trained = train_model(model, entry, train, steps_run);
            const double train_seconds =
                std::chrono::duration<double>(std::chrono::steady_clock::now() - train_start).count();
            fs::create_directories(out / entry.name);
            model.save((out / entry.name / "model.pt").string());
            const model_outputs reference = run_batches(model, evaluation);
            write_pickle(reference.tensors.front(), out / entry.name / "reference.pt");
            const double float_top1 = top1_accuracy(reference, test.labels);
            std::printf("%-20s trained %lld steps in %.1f s, loss %.3f, float top-1 %.2f %%\n", entry.name.c_str(),
                        static_cast<long long>(steps_run), train_seconds, trained.final_loss, 100 * float_top1);
            std::fflush(stdout);

            json model_json = {{"train_seconds", train_seconds},
                               {"final_loss", trained.final_loss},
                               {"float_top1", float_top1},
                               {"float_bytes", serialized_bytes(model)}};
            // QAT (issue 4): one training step with fake quantization against the same float step,
            // batch 64, one thread; 5 warm-up steps, then the mean of 30.
            {
                const auto step_ms = [&](::torch::jit::Module module) {
                    training_options o;
                    o.batch_size = 64;
                    o.learning_rate = 1e-4;
                    o.num_threads = 1;
                    o.steps = 5;
                    (void)train_classifier(module, train.images, train.labels, o);
                    o.steps = 30;
                    const auto begin = std::chrono::steady_clock::now();
                    (void)train_classifier(module, train.images, train.labels, o);
                    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - begin).count() /
                           30.0;
                };
                json qat = {{"float_step_ms", step_ms(model.clone())}};
                for (const std::string backend : {"x86_inductor", "xnnpack"}) {
                    prepared_model prepared = prepare(model, whole_model(backend + ":qat"));
                    qat[backend + "_step_ms"] = step_ms(prepared.module);
                }
                std::printf("  QAT step: float %.1f ms, x86_inductor:qat %.1f ms, xnnpack:qat %.1f ms\n",
                            qat["float_step_ms"].get<double>(), qat["x86_inductor_step_ms"].get<double>(),
                            qat["xnnpack_step_ms"].get<double>());
                model_json["qat"] = qat;
            }
            for (const std::string& spec : specs) {
                const bool dynamic = spec.ends_with(":dynamic");
                const std::string backend = spec.substr(0, spec.find(':'));
                json run = {{"backend", backend}, {"mode", dynamic ? "dynamic" : "static"}};
                // Quantizes with `used` and fills `run`; throws what the LibTorch layer throws.
                const auto measure = [&](const std::string& used) {
                    run["spec"] = used;
                    const runtime_quantizer quantizer = whole_model(used);
                    // Dynamic targets with the calibration data, as versatil-quantize runs them on a data
                    // file that has some: each layer's weights are chosen on it (dynamic_weight_choice.hpp).
                    const std::vector<batch>& calib_used = calibration;
                    quantize_options q_options;
                    q_options.batch_size = 1;
                    q_options.threads = 1;
                    q_options.per_layer = false;
                    q_options.progress = false;
                    const quantization_result result =
                        quantize(model, quantizer, quantize_data{calib_used, evaluation, test.labels}, q_options);
                    const quantization_report& report = result.report;
                    run["engine"] = report.engine;
                    run["sqnr_db"] = report.sqnr_db;
                    run["max_abs_diff"] = report.max_abs_diff;
                    run["quantized_top1"] = report.quantized_accuracy.value_or(-1.0);
                    run["float_top1"] = report.float_accuracy.value_or(-1.0);
                    run["quantized_ops"] = report.quantized_ops;
                    run["quantizable_ops"] = report.quantizable_ops;
                    run["float_bytes"] = report.float_bytes;
                    run["quantized_bytes"] = report.quantized_bytes;
                    // Cold (the headline) and warm: the lowest over cold_processes fresh processes;
                    // the phases (warm) from the first.
                    std::vector<double> cold, warm;
                    for (int process = 0; process < cold_processes; ++process) {
                        const json timed = child_timing(out / entry.name / "model.pt", used, test_count, process == 0);
                        cold.push_back(timed["cold_seconds"].get<double>());
                        warm.push_back(timed["warm_seconds"].get<double>());
                        if (process == 0) run["phases"] = timed["phases"];
                    }
                    run["quantize_seconds"] = *std::min_element(cold.begin(), cold.end());
                    run["quantize_seconds_warm"] = *std::min_element(warm.begin(), warm.end());
                    // Should the per-layer analysis fail where the rest does not (it did for
                    // transformer_encoder under xnnpack:dynamic), that is recorded, not fatal.
                    try {
                        run["cli_seconds"] = cli_seconds(model, quantizer, quantize_data{calib_used, evaluation, test.labels});
                    } catch (const std::exception& failure) {
                        run["cli_error"] = one_line(failure);
                    }
                    // For peer.py, which times it in its own harness too (the same loop for both models).
                    result.model.module.save(
                        (out / entry.name / ("versatil_" + backend + "_" + (dynamic ? "dynamic" : "static") + ".pt"))
                            .string());
                    run["quantize_nodes"] = libtorch::detail::count_nodes(result.model.module, is_quantize_node);
                    run["dequantize_nodes"] = libtorch::detail::count_nodes(result.model.module, is_dequantize_node);
                    const engine_scope scope(engine_settings{result.model.plan.engine, 1, std::nullopt});
                    // A fresh copy per batch size: oneDNN keeps the primitive of its first input shape.
                    for (const int64_t batch : {int64_t{1}, int64_t{8}}) {
                        const at::Tensor input = test.images.slice(0, 0, batch).contiguous();
                        run["float_ms_b" + std::to_string(batch)] = latency_ms(model, input);
                        run["quantized_ms_b" + std::to_string(batch)] = latency_ms(result.model.module.deepcopy(), input);
                    }
                    std::printf("  %-22s SQNR %6.2f dB  top-1 %.2f %%  quantize %.3f s cold, %.3f warm  "
                                "b1 %.3f -> %.3f ms\n",
                                used.c_str(), report.sqnr_db, 100 * report.quantized_accuracy.value_or(0),
                                run["quantize_seconds"].get<double>(), run["quantize_seconds_warm"].get<double>(),
                                run["float_ms_b1"].get<double>(),
                                run["quantized_ms_b1"].get<double>());
                };
                try {
                    measure(spec);
                } catch (const std::exception& failure) {
                    std::printf("  %-22s FAILED: %s\n", spec.c_str(), one_line(failure).c_str());
                    run = {{"backend", backend}, {"mode", dynamic ? "dynamic" : "static"}, {"error", one_line(failure)}};
                    // The documented way out when the default xnnpack composition fails: per-tensor weights
                    // everywhere (what the peer's qnnpack qconfig uses too). Recorded as a fallback.
                    if (spec == "xnnpack") {
                        try {
                            measure("xnnpack:per_tensor");
                            run["fallback_from"] = spec;
                        } catch (const std::exception& again) {
                            std::printf("  %-22s FAILED: %s\n", "xnnpack:per_tensor", one_line(again).c_str());
                        }
                    }
                }
                std::fflush(stdout);
                model_json["runs"].push_back(run);
            }
            results["models"][entry.name] = model_json;
        }

        // Quantize time against depth: untrained MLPs of `linears` Linear layers, static x86_inductor.
        for (const int64_t linears : {2, 4, 8, 16, 32}) {
            ::torch::jit::Module model = mlp(1, 128, linears - 1);
            const fs::path saved = out / "scaling" / ("mlp_" + std::to_string(linears) + ".pt");
            model.save(saved.string());
            const double seconds = child_timing(saved, "x86_inductor", test_count, false)["warm_seconds"].get<double>();
            results["scaling"].push_back({{"linears", linears}, {"quantize_seconds", seconds}});
            std::printf("scaling: %2lld linear layers quantize in %.3f s\n", static_cast<long long>(linears), seconds);
            std::fflush(stdout);
        }

        // Loading: each trained model, one saved quantized model, and a 90 MB MLP.
        results["loading_resident_mb"] = resident_megabytes();
        for (const model_entry& entry : models) {
            const fs::path path = out / entry.name / "model.pt";
            results["loading"].push_back(load_times(path, [&](compile_source where) { (void)load_model(path, where); }));
            results["loading"].back()["model"] = entry.name;
        }
        {
            // Saved without metadata (for peer.py), so loaded as load_quantized would, under its engine.
            const fs::path quantized = out / "mobilenet_cnn" / "versatil_x86_inductor_static.pt";
            const engine_scope scope(engine_settings{at::QEngine::ONEDNN, 1, std::nullopt});
            results["loading"].push_back(
                load_times(quantized, [&](compile_source where) { (void)load_model(quantized, where); }));
            results["loading"].back()["model"] = "mobilenet_cnn, x86_inductor static";
            fs::create_directories(out / "loading");
            const fs::path large = out / "loading" / "mlp_2048x6.pt";
            mlp(1, 2048, 6).save(large.string());
            results["loading"].push_back(load_times(large, [&](compile_source where) { (void)load_model(large, where); }));
            results["loading"].back()["model"] = "MLP, 6 layers of 2048";
        }
        for (const json& load : results["loading"])
            std::printf("load %-36s %6.2f MB: torch::jit::load %.1f ms, checked %.1f ms, with child %.1f ms\n",
                        load["model"].get<std::string>().c_str(), load["bytes"].get<double>() / 1e6,
                        load["plain_ms"].get<double>(), load["in_process_ms"].get<double>(),
                        load["in_child_ms"].get<double>());

        std::ofstream(out / "versatil.json") << results.dump(2) << '\n';
        return 0;
    } catch (const std::exception& failure) {
        std::fprintf(stderr, "torch_models: %s\n", failure.what());
        return 1;
    }
}
