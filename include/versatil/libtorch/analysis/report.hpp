// What a quantization did and what it cost: targets, op counts, accuracy against the float
// model (overall, per layer, top-1), size, speed and quantize time. A struct, its JSON, and
// a table for people.
#pragma once

#include <nlohmann/json.hpp>
#include <torch/version.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "versatil/libtorch/plan/config_json.hpp"
#include "versatil/version.hpp"
#include "versatil/libtorch/torchscript/metrics.hpp"
#include "versatil/libtorch/torchscript/warning_capture.hpp"
#include "versatil/libtorch/plan/plan.hpp"

namespace versatil::libtorch {

struct target_report {
    std::string path;
    std::string backend;  // "none" for an exclude
    std::string options;
    // How its static activations were calibrated ("histogram (default)", "entropy"); empty when
    // nothing was (dynamic, QAT, an exclude).
    std::string calibration{};
};

// The model's output SQNR when this layer alone is quantized: the layer that loses the most
// accuracy has the lowest.
struct layer_sqnr {
    std::string name;
    double sqnr_db = 0.0;
};

// A conv or linear layer that runs in float in the quantized model, and why (float_layers.hpp).
struct float_layer {
    std::string name;  // module path; "(model)" for an op of the model's own forward
    std::string op;    // aten::conv2d, aten::linear, ...
    std::string reason;
};

// One step towards an accuracy target (accuracy_target.hpp): the layers kept in float so far
// and what the model quantized without them measured.
struct accuracy_target_step {
    std::vector<std::string> kept_in_float;
    double sqnr_db = 0.0;
    std::optional<double> quantized_accuracy;
    bool met = false;
};

// A model exported as firmware (export/firmware.hpp): the memory figures of its header and
// how the firmware runtime, run on the host, agrees with LibTorch's quantized model.
struct firmware_report {
    std::string namespace_name;
    std::string input_layout = "chw";          // the header's input order: chw, or hwc (channel-last)
    std::int64_t header_bytes = 0;
    std::int64_t arena_bytes = 0;              // the header's model::arena_bytes
    std::int64_t arena_lower_bound_bytes = 0;  // the largest set of tensors alive at once: no plan needs less
    std::int64_t greedy_planner_bytes = 0;     // a TFLite-Micro-style greedy-by-size planner, for comparison
    std::int64_t parameter_bytes = 0;          // weights, biases, multipliers and shifts
    std::int64_t stack_bytes = 0;              // run's worst stack use on a Cortex-M4 (codegen/stack_use.hpp)
    std::int64_t compared_samples = 0;
    std::int64_t compared_elements = 0;
    std::int64_t differing_elements = 0;  // int8 outputs where the runtime and LibTorch differ at all
    int max_lsb_diff = 0;                 // the largest difference of one int8 output
    double top1_agreement = 0.0;          // samples whose largest output is the same one
    double export_seconds = 0.0;          // extraction and code generation
};

struct quantization_report {
    // Where the report came from, for a reader who has only the JSON: the model file and the
    // command line (set by the CLI; empty for the C++ API), and the versions that made it.
    std::string model_path{};
    std::vector<std::string> command_line{};
    std::vector<target_report> targets;
    std::string engine;
    std::vector<adjustment> adjustments;

    std::int64_t quantized_ops = 0;
    std::int64_t quantizable_ops = 0;          // of quantizable_kind, at every call site
    std::string quantizable_kind = "conv/linear";  // "linear" for dynamic quantization
    std::vector<float_layer> float_layers;         // conv/linear layers left float, each with why
    // What a reader should not miss, such as most layers float (latency runs that disagree are
    // warned of from the spreads, which differ run to run).
    std::vector<std::string> warnings;
    std::vector<libtorch_warning> libtorch_warnings;  // what LibTorch warned while quantizing, folded

    std::int64_t evaluation_samples = 0;
    bool held_out = false;  // evaluated on data that calibration did not see
    double max_abs_diff = 0.0;
    double mean_abs_diff = 0.0;
    double sqnr_db = 0.0;                 // over all outputs together
    std::vector<output_comparison> outputs;  // each output's own, for models returning several
    std::vector<layer_sqnr> per_layer;
    std::int64_t per_layer_samples = 0;   // the evaluation samples the per-layer SQNRs are measured on

    std::int64_t float_bytes = 0;
    std::int64_t quantized_bytes = 0;

    std::int64_t batch_size = 1;
    int threads = 1;
    double float_ms = 0.0;      // medians of the timed runs
    double quantized_ms = 0.0;
    latency_spread float_latency{};  // p10 / median / p90 of the same runs
    latency_spread quantized_latency{};

    double quantize_seconds = 0.0;  // prepare + calibrate (or QAT training) + convert + lower
    std::optional<std::int64_t> qat_steps;  // QAT: training steps, their time and final loss
    std::optional<double> qat_seconds;
    std::optional<double> qat_final_loss;
    std::optional<double> float_accuracy;
    std::optional<double> quantized_accuracy;
    std::optional<firmware_report> firmware;  // set when the model was exported as firmware
    // Calibration or QAT across processes (libtorch/distributed/): how many took part, and the
    // calibration samples each rank observed, or for QAT the training examples each rank
    // trained on (steps x its slice of the batch); one entry, all samples, for one process.
    int world_size = 1;
    std::vector<std::int64_t> samples_per_rank;
    // An accuracy target (accuracy_target.hpp): what it asked ("" for none) and every step taken,
    // the last one the model reported on.
    std::string accuracy_target;
    std::vector<accuracy_target_step> target_steps;

    double compression_ratio() const { return static_cast<double>(float_bytes) / static_cast<double>(quantized_bytes); }
    double speedup() const { return float_ms / quantized_ms; }
};

// Whether a per-layer row stands for a layer the quantized model runs in float: its outputs are
// the float model's (no finite SQNR) and the report lists the layer, or a module holding it, as
// float. Attention's out_proj is one: nn.MultiheadAttention hands its weight to a function and
// never calls the module, so its row would otherwise read as quantized without loss.
inline bool stays_float(const quantization_report& report, const layer_sqnr& row) {
    return !std::isfinite(row.sqnr_db) && std::ranges::any_of(report.float_layers, [&](const float_layer& layer) {
               return row.name == layer.name || row.name.starts_with(layer.name + ".");
           });
}

namespace detail {
// JSON has no infinity: identical outputs give an SQNR of null.
inline nlohmann::json finite_or_null(double value) {
    return std::isfinite(value) ? nlohmann::json(value) : nlohmann::json(nullptr);
}
template <class T>
nlohmann::json value_or_null(const std::optional<T>& value) {
    return value ? nlohmann::json(*value) : nlohmann::json(nullptr);
}
}  // namespace detail

inline nlohmann::json to_json(const quantization_report& report) {
    nlohmann::json target_steps = nlohmann::json::array();
    for (const accuracy_target_step& step : report.target_steps)
        target_steps.push_back({{"kept_in_float", step.kept_in_float},
                                {"sqnr_db", detail::finite_or_null(step.sqnr_db)},
                                {"quantized_accuracy", detail::value_or_null(step.quantized_accuracy)},
                                {"met", step.met}});
    nlohmann::json targets = nlohmann::json::array();
    for (const target_report& t : report.targets)
        targets.push_back(
            {{"path", t.path}, {"backend", t.backend}, {"options", t.options}, {"calibration", t.calibration}});
    nlohmann::json adjustments = nlohmann::json::array();
    for (const adjustment& a : report.adjustments)
        adjustments.push_back({{"module", a.module_path}, {"change", a.change}});
    nlohmann::json outputs = nlohmann::json::array();
    for (const output_comparison& output : report.outputs)
        outputs.push_back({{"name", output.name},
                           {"sqnr_db", detail::finite_or_null(output.sqnr_db)},
                           {"max_abs_diff", output.max_abs_diff},
                           {"mean_abs_diff", output.mean_abs_diff}});
    nlohmann::json float_layers = nlohmann::json::array();
    for (const float_layer& layer : report.float_layers)
        float_layers.push_back({{"name", layer.name}, {"op", layer.op}, {"reason", layer.reason}});
    nlohmann::json libtorch_warnings = nlohmann::json::array();
    for (const libtorch_warning& warning : report.libtorch_warnings)
        libtorch_warnings.push_back({{"text", warning.text}, {"count", warning.count}});
    nlohmann::json per_layer = nlohmann::json::array();
    for (const layer_sqnr& layer : report.per_layer)
        per_layer.push_back({{"name", layer.name},
                             {"sqnr_db", detail::finite_or_null(layer.sqnr_db)},
                             {"float", stays_float(report, layer)}});
    nlohmann::json firmware = nullptr;
    if (const std::optional<firmware_report>& f = report.firmware)
        firmware = {{"namespace", f->namespace_name},
                    {"input_layout", f->input_layout},
                    {"header_bytes", f->header_bytes},
                    {"arena_bytes", f->arena_bytes},
                    {"arena_lower_bound_bytes", f->arena_lower_bound_bytes},
                    {"greedy_planner_bytes", f->greedy_planner_bytes},
                    {"parameter_bytes", f->parameter_bytes},
                    {"stack_bytes", f->stack_bytes},
                    {"compared_samples", f->compared_samples},
                    {"compared_elements", f->compared_elements},
                    {"differing_elements", f->differing_elements},
                    {"max_lsb_diff", f->max_lsb_diff},
                    {"top1_agreement", f->top1_agreement},
                    {"export_seconds", f->export_seconds}};
    nlohmann::json json{
        {"model_path", report.model_path.empty() ? nlohmann::json(nullptr) : nlohmann::json(report.model_path)},
        {"command_line", report.command_line},
        {"versatil_version", std::string(versatil::version)},
        {"libtorch_version", TORCH_VERSION},
        {"targets", targets},
        {"engine", report.engine},
        {"adjustments", adjustments},
        {"quantized_ops", report.quantized_ops},
        {"quantizable_ops", report.quantizable_ops},
        {"quantizable_kind", report.quantizable_kind},
        {"float_layers", float_layers},
        {"warnings", report.warnings},
        {"libtorch_warnings", libtorch_warnings},
        {"evaluation_samples", report.evaluation_samples},
        {"held_out", report.held_out},
        {"max_abs_diff", report.max_abs_diff},
        {"mean_abs_diff", report.mean_abs_diff},
        {"sqnr_db", detail::finite_or_null(report.sqnr_db)},
        {"outputs", outputs},
        {"per_layer", per_layer},
        {"per_layer_samples", report.per_layer_samples},
        {"float_bytes", report.float_bytes},
        {"quantized_bytes", report.quantized_bytes},
        {"compression_ratio", report.compression_ratio()},
        {"batch_size", report.batch_size},
        {"threads", report.threads},
        {"float_ms", report.float_ms},
        {"quantized_ms", report.quantized_ms},
        {"float_ms_p10", report.float_latency.p10_ms},
        {"float_ms_p90", report.float_latency.p90_ms},
        {"quantized_ms_p10", report.quantized_latency.p10_ms},
        {"quantized_ms_p90", report.quantized_latency.p90_ms},
        {"latency_runs", {report.float_latency.runs, report.quantized_latency.runs}},
        {"latency_unsteady", report.float_latency.unsteady() || report.quantized_latency.unsteady()},
        {"speedup", report.speedup()},
        {"quantize_seconds", report.quantize_seconds},
        {"qat_steps", detail::value_or_null(report.qat_steps)},
        {"qat_seconds", detail::value_or_null(report.qat_seconds)},
        {"qat_final_loss", detail::value_or_null(report.qat_final_loss)},
        {"float_accuracy", detail::value_or_null(report.float_accuracy)},
        {"quantized_accuracy", detail::value_or_null(report.quantized_accuracy)},
        {"firmware", firmware},
        {"world_size", report.world_size},
        {"samples_per_rank", report.samples_per_rank},
        {"accuracy_target",
         report.accuracy_target.empty() ? nlohmann::json(nullptr) : nlohmann::json(report.accuracy_target)},
        {"kept_in_float",
         report.target_steps.empty() ? std::vector<std::string>{} : report.target_steps.back().kept_in_float},
        {"target_steps", target_steps},
    };
    return json;
}

inline std::string format_table(const quantization_report& report) {
    std::string text;
    char line[512];
    const auto row = [&](const char* name, const std::string& value) {
        std::snprintf(line, sizeof line, "  %-22s %s\n", name, value.c_str());
        text += line;
    };
    const auto number = [](const char* format, double value) {
        char buffer[64];
        std::snprintf(buffer, sizeof buffer, format, value);
        return std::string(buffer);
    };
    const auto sqnr = [&](double db) { return std::isfinite(db) ? number("%.2f dB", db) : "identical"; };
    text += "targets\n";
    for (const target_report& t : report.targets) {
        const std::string spec = t.options.empty() ? t.backend : t.backend + ":" + t.options;
        row(t.path.empty() ? "(whole model)" : t.path.c_str(),
            t.calibration.empty() ? spec : spec + " (calibration: " + t.calibration + ")");
    }
    for (const adjustment& a : report.adjustments)
        row(("  " + (a.module_path.empty() ? std::string("(model)") : a.module_path)).c_str(), a.change);
    text += "result (" + report.engine + " engine)\n";
    row("quantized ops", std::to_string(report.quantized_ops) + " of " + std::to_string(report.quantizable_ops) + " " +
                             report.quantizable_kind);
    for (const float_layer& layer : report.float_layers)
        row(("  " + layer.name).c_str(), "float (" + layer.op + "): " + layer.reason);
    const std::string data = std::to_string(report.evaluation_samples) + " samples" +
                             (report.held_out ? ", held out" : ", calibration data (no held-out set given)");
    row("output SQNR", sqnr(report.sqnr_db) + " (" + data + ")");
    row("max / mean |diff|", number("%.5f", report.max_abs_diff) + " / " + number("%.5f", report.mean_abs_diff));
    for (const output_comparison& output : report.outputs)
        row(("  output " + output.name).c_str(),
            sqnr(output.sqnr_db) + ", max |diff| " + number("%.5f", output.max_abs_diff));
    if (report.float_accuracy && report.quantized_accuracy)
        row("top-1 float -> int8", number("%.2f %%", 100.0 * *report.float_accuracy) + " -> " +
                                       number("%.2f %%", 100.0 * *report.quantized_accuracy));
    row("size", number("%.1f KiB", report.float_bytes / 1024.0) + " -> " +
                    number("%.1f KiB", report.quantized_bytes / 1024.0) + " (" +
                    number("%.2fx smaller", report.compression_ratio()) + ")");
    row("latency", number("%.3f ms", report.float_ms) + " -> " + number("%.3f ms", report.quantized_ms) + " (" +
                       number("%.2fx", report.speedup()) + ", batch " + std::to_string(report.batch_size) + ", " +
                       std::to_string(report.threads) + " thread" + (report.threads == 1 ? "" : "s") + ")");
    const auto spread = [&](const latency_spread& runs) {
        return number("%.3f", runs.p10_ms) + " / " + number("%.3f", runs.median_ms) + " / " +
               number("%.3f ms", runs.p90_ms) + " (" + std::to_string(runs.runs) + " runs)";
    };
    row("  p10 / median / p90", "float " + spread(report.float_latency) + ", int8 " + spread(report.quantized_latency));
    row("quantize time", number("%.3f s", report.quantize_seconds));
    if (report.world_size > 1) {
        std::string samples;
        for (const std::int64_t count : report.samples_per_rank)
            samples += (samples.empty() ? "" : " / ") + std::to_string(count);
        row("processes", std::to_string(report.world_size) + (report.qat_steps ? " (training" : " (calibration") +
                             " samples per rank: " + samples + ")");
    }
    if (report.qat_steps)
        row("QAT training", std::to_string(*report.qat_steps) + " steps in " + number("%.2f s", *report.qat_seconds) +
                                ", final loss " + number("%.4f", *report.qat_final_loss));
    if (const std::optional<firmware_report>& f = report.firmware) {
        text += "firmware (namespace " + f->namespace_name + (f->input_layout == "hwc" ? ", input channel-last" : "") +
                ", header " + number("%.1f KiB", f->header_bytes / 1024.0) +
                ", exported in " + number("%.3f s", f->export_seconds) + ")\n";
        row("arena", std::to_string(f->arena_bytes) + " bytes (live-set lower bound " +
                         std::to_string(f->arena_lower_bound_bytes) + ", greedy planner " +
                         std::to_string(f->greedy_planner_bytes) + ")");
        row("parameters", std::to_string(f->parameter_bytes) + " bytes");
        row("stack", std::to_string(f->stack_bytes) + " bytes, run's worst on a Cortex-M4 (GCC 12, -Os/-O2)");
        row("runtime vs LibTorch", "top-1 agrees on " + number("%.2f %%", 100.0 * f->top1_agreement) + " of " +
                                       std::to_string(f->compared_samples) + " samples; max " +
                                       std::to_string(f->max_lsb_diff) + " LSB, " +
                                       std::to_string(f->differing_elements) + " of " +
                                       std::to_string(f->compared_elements) + " int8 outputs differ");
    }
    if (!report.target_steps.empty()) {
        text += "accuracy target (" + report.accuracy_target + "): layers kept in float, one more each step\n";
        for (const accuracy_target_step& step : report.target_steps) {
            std::string kept = step.kept_in_float.empty() ? "(none)" : "";
            for (const std::string& layer : step.kept_in_float) kept += (kept.empty() ? "" : ", ") + layer;
            std::string measured = sqnr(step.sqnr_db);
            if (step.quantized_accuracy) measured += ", top-1 " + number("%.2f %%", 100.0 * *step.quantized_accuracy);
            row((std::to_string(step.kept_in_float.size()) + " in float").c_str(),
                measured + (step.met ? " (met)" : "") + ": " + kept);
        }
    }
    for (const std::string& warning : report.warnings) text += "warning: " + warning + "\n";
    for (const libtorch_warning& warning : report.libtorch_warnings)
        text += "LibTorch warned " +
                (warning.count == 1 ? std::string("once") : std::to_string(warning.count) + " times") + ": " +
                warning.text + "\n";
    for (const auto& [side, runs] :
         {std::pair{"float", &report.float_latency}, std::pair{"int8", &report.quantized_latency}})
        if (runs->unsteady())
            text += std::string("warning: the ") + side + " model's timed runs disagree by more than 2x (p90 " +
                    number("%.3f ms", runs->p90_ms) + ", p10 " + number("%.3f ms", runs->p10_ms) +
                    "): its latency is this machine's noise as much as the model's; measure again on a quiet machine\n";
    if (!report.per_layer.empty()) {
        text += "per layer (output SQNR with only that layer quantized, worst first; " +
                std::to_string(report.per_layer_samples) + " samples)\n";
        for (const layer_sqnr& layer : report.per_layer)
            row(layer.name.c_str(),
                stays_float(report, layer) ? "float: not quantized (why above)" : sqnr(layer.sqnr_db));
    }
    return text;
}

}  // namespace versatil::libtorch
