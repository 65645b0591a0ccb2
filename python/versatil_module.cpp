// The Python module `versatil`: the CLI's one pipeline (quantize_to_target, export_firmware, save and
// load) called with Python's objects. A torch.jit.ScriptModule crosses as the torch::jit::Module it wraps
// (LibTorch's own pybind caster, libtorch_python), tensors as at::Tensor; nothing is copied. What is
// here is only the crossing: data forms into batches, the targets dict into target specs, the report
// into a dict, error kinds into exception classes. docs/python.md is the user's guide.
#include <torch/csrc/jit/python/pybind_utils.h>
#include <torch/script.h>

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <array>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "versatil/libtorch.hpp"
#include "versatil/libtorch/export/firmware.hpp"
#include "versatil/libtorch/plan/target_spec.hpp"

namespace py = pybind11;
using namespace versatil;
using namespace versatil::libtorch;

namespace {

constexpr std::array all_error_kinds{
    error_kind::invalid_argument,  error_kind::missing_module,           error_kind::unsupported_device,
    error_kind::unsupported_composition, error_kind::no_calibration_data, error_kind::no_training_data,
    error_kind::no_evaluation_data, error_kind::invalid_calibration_data, error_kind::invalid_model_file,
    error_kind::invalid_data_file, error_kind::io_error,                 error_kind::lowering_failed,
    error_kind::unsupported_model, error_kind::unsupported_export,       error_kind::machine_fault,
    error_kind::distributed_failure, error_kind::accuracy_target_unmet, error_kind::cancelled,
};

// versatil.Error, and one subclass per error kind ("invalid_argument": versatil.InvalidArgument).
// Created once at import; they live as long as the interpreter, as the module does.
PyObject* base_error = nullptr;
std::array<PyObject*, all_error_kinds.size()> kind_errors{};

std::string class_name(std::string_view kind) {
    std::string name;
    bool upper = true;
    for (const char c : kind) {
        if (c == '_') {
            upper = true;
            continue;
        }
        name += upper ? static_cast<char>(std::toupper(static_cast<unsigned char>(c))) : c;
        upper = false;
    }
    return name;
}

[[noreturn]] void fail(error_kind kind, const std::string& message) { throw error(kind, message); }

// The ScriptModule's C++ module; anything else is refused with the way to make one.
::torch::jit::Module script_module(const py::handle& model) {
    const py::object script_type = py::module_::import("torch.jit").attr("ScriptModule");
    if (!py::isinstance(model, script_type))
        fail(error_kind::invalid_argument,
             "model: a torch.jit.ScriptModule is needed (torch.jit.script(model) or torch.jit.trace(model, "
             "example)), not " + std::string(py::str(py::type::of(model).attr("__qualname__"))));
    return py::cast<::torch::jit::Module>(model.attr("_c"));
}

// The ScriptModule Python code sees for `module`, with versatil's metadata for versatil.save.
py::object python_module(const ::torch::jit::Module& module, const nlohmann::json& metadata) {
    py::object wrapped = py::module_::import("torch.jit._recursive").attr("wrap_cpp_module")(module);
    wrapped.attr("versatil_metadata") = py::module_::import("json").attr("loads")(metadata.dump());
    return wrapped;
}

std::size_t forward_arity(const ::torch::jit::Module& model) {
    return model.get_method("forward").function().getSchema().arguments().size() - 1;  // less self
}

bool is_tensor(const py::handle& value) { return THPVariable_Check(value.ptr()); }
at::Tensor tensor_of(const py::handle& value) { return THPVariable_Unpack(value.ptr()); }

struct python_data {
    std::vector<batch> batches;
    std::optional<at::Tensor> labels;  // from (inputs..., labels) items
};

// One item of an iterable: a tensor, or a tuple or list whose first `arity` items are the inputs, with
// an optional integer tensor after them, the batch's labels (a DataLoader's (images, labels)).
void add_item(const py::handle& item, std::size_t arity, const char* what, python_data& data,
              std::vector<at::Tensor>& labels) {
    if (is_tensor(item)) {
        data.batches.emplace_back(tensor_of(item));
        return;
    }
    const bool sequence = py::isinstance<py::tuple>(item) || py::isinstance<py::list>(item);
    const py::sequence items = sequence ? py::reinterpret_borrow<py::sequence>(item) : py::sequence();
    const bool labelled = sequence && items.size() == arity + 1 && is_tensor(items[arity]) &&
                          !at::isFloatingType(tensor_of(items[arity]).scalar_type());
    std::vector<at::Tensor> inputs;
    for (std::size_t i = 0; sequence && i < std::min(items.size(), arity); ++i)
        if (is_tensor(items[i])) inputs.push_back(tensor_of(items[i]));
    if (inputs.size() != arity || (items.size() != arity && !labelled))
        fail(error_kind::invalid_calibration_data,
             std::string(what) + " batch " + std::to_string(data.batches.size()) + ": a tensor, or a tuple of the " +
                 "model's " + std::to_string(arity) + " input tensor(s) optionally followed by integer labels, not " +
                 std::string(py::str(sequence ? py::repr(item) : py::type::of(item).attr("__qualname__")))
                     .substr(0, 120));
    data.batches.emplace_back(std::move(inputs));
    if (labelled) labels.push_back(tensor_of(items[arity]));
}

// A tensor (batched along dim 0) or a tuple of tensors, one per input, split as the CLI splits a data
// file; or any other iterable of batches (a list, a DataLoader), each item one batch.
python_data batches_from(const py::handle& given, std::size_t arity, const char* what) {
    python_data data;
    if (given.is_none()) return data;
    if (is_tensor(given)) {
        data.batches = split_batches(tensor_of(given), default_batch_rows);
        return data;
    }
    const auto all_tensors = [](const py::handle& items) {
        for (const py::handle item : items)
            if (!is_tensor(item)) return false;
        return true;
    };
    if (py::isinstance<py::tuple>(given) && py::len(given) > 0 && all_tensors(given)) {
        std::vector<at::Tensor> inputs;
        for (const py::handle item : given) inputs.push_back(tensor_of(item));
        if (inputs.size() != arity)
            fail(error_kind::invalid_calibration_data,
                 std::string(what) + ": a tuple of " + std::to_string(inputs.size()) + " tensors for a model with " +
                     std::to_string(arity) + " input(s)");
        data.batches = split_batches(inputs, default_batch_rows);
        return data;
    }
    if (!py::isinstance<py::iterable>(given))
        fail(error_kind::invalid_argument, std::string(what) + ": a tensor, a tuple of tensors or an iterable of "
                                                               "batches, not " +
                                               std::string(py::str(py::type::of(given).attr("__qualname__"))));
    std::vector<at::Tensor> labels;
    for (const py::handle item : given) add_item(item, arity, what, data, labels);
    if (!labels.empty() && labels.size() != data.batches.size())
        fail(error_kind::invalid_calibration_data, std::string(what) + ": some batches carry labels and some do not");
    if (!labels.empty()) data.labels = at::cat(labels);
    return data;
}

// The data the pipeline reads, from calibration, evaluation and labels as Python gives them.
quantize_data data_from(const ::torch::jit::Module& model, const py::handle& calibration,
                        const py::handle& evaluation, const std::optional<at::Tensor>& labels) {
    const std::size_t arity = forward_arity(model);
    quantize_data data;
    data.calibration = batches_from(calibration, arity, "calibration").batches;
    python_data held_out = batches_from(evaluation, arity, "evaluation");
    data.evaluation = std::move(held_out.batches);
    if (labels && held_out.labels)
        fail(error_kind::invalid_argument, "labels: given twice, as labels= and in the evaluation batches");
    data.evaluation_labels = labels ? labels : held_out.labels;
    if (data.evaluation_labels && data.evaluation.empty())
        fail(error_kind::no_evaluation_data, "labels: they label evaluation samples; give evaluation= too");
    return data;
}

// {"features": "xnnpack:per_tensor", "classifier": None} as the CLI's --target PATH=SPEC, None as none.
runtime_quantizer quantizer_from(const std::map<std::string, std::optional<std::string>>& targets) {
    std::vector<runtime_target> parsed;
    for (const auto& [path, spec] : targets) parsed.push_back(parse_target(path + "=" + spec.value_or("none")));
    auto quantizer = runtime_quantizer::compose(std::move(parsed));
    if (!quantizer) fail(error_kind::invalid_argument, quantizer.error().message);
    return std::move(*quantizer);
}

// The JSON report as a versatil.Report: a dict whose str() is the CLI's table.
py::object python_report(const quantization_report& report) {
    py::object fields = py::module_::import("json").attr("loads")(to_json(report).dump());
    py::object result = py::module_::import("versatil").attr("Report")(fields);
    result.attr("_table") = format_table(report);
    return result;
}

struct run_settings {
    bool per_layer = true;
    int threads = 1;
    std::optional<double> min_sqnr;
    std::optional<double> max_accuracy_drop;
    py::object progress = py::none();  // a callable (label, done, total), or None
};

// The pipeline with the GIL released. At each step it counts (a calibration batch, a training step, a
// layer analysed) the GIL is taken briefly to let Python act on a pending signal and to call the
// caller's progress callable; a KeyboardInterrupt, or an exception the callable raised, stops the run
// there (error_kind::cancelled unwinds it, nothing is written) and is raised as it was.
quantization_result run_pipeline(const ::torch::jit::Module& model, const runtime_quantizer& quantizer,
                                 const quantize_data& data, const run_settings& settings, const qat_options& qat) {
    const quantize_options options{.threads = settings.threads, .per_layer = settings.per_layer, .progress = true,
                                   .qat = qat};
    std::optional<quantization_result> result;
    try {
        const py::gil_scoped_release released;
        const progress_watch watch([&](std::string_view label, std::int64_t done, std::int64_t total) {
            const py::gil_scoped_acquire acquired;
            try {
                if (PyErr_CheckSignals() != 0) throw py::error_already_set();
                if (!settings.progress.is_none()) settings.progress(std::string(label), done, total);
            } catch (py::error_already_set& raised) {
                raised.restore();  // raised below, once the pipeline has unwound
                throw error(error_kind::cancelled, "cancelled at " + std::string(label) + " step " +
                                                       std::to_string(done) + " of " + std::to_string(total));
            }
        });
        result = quantize_to_target(model, quantizer, data, {settings.min_sqnr, settings.max_accuracy_drop}, options);
    } catch (const error& failure) {
        if (failure.kind() == error_kind::cancelled && PyErr_Occurred() != nullptr) throw py::error_already_set();
        throw;
    }
    if (PyErr_CheckSignals() != 0) throw py::error_already_set();
    return std::move(*result);
}

// (quantized ScriptModule, report), as every quantizing function returns them.
py::tuple python_result(const quantization_result& result) {
    return py::make_tuple(python_module(result.model.module, metadata_of(result.model)), python_report(result.report));
}

py::tuple quantize(const py::object& model, const py::object& calibration,
                   const std::map<std::string, std::optional<std::string>>& targets, const py::object& evaluation,
                   const std::optional<at::Tensor>& labels, const run_settings& settings) {
    const ::torch::jit::Module float_model = script_module(model);
    const runtime_quantizer quantizer = quantizer_from(targets);
    const quantize_data data = data_from(float_model, calibration, evaluation, labels);
    if (data.calibration.empty() && data.evaluation.empty() && !quantizer.is_qat())
        fail(error_kind::no_calibration_data, "no data: give calibration batches (a tensor, a tuple of tensors or an "
                                              "iterable of batches)");
    return python_result(run_pipeline(float_model, quantizer, data, settings, {}));
}

}  // namespace

PYBIND11_MODULE(versatil, m) {
    m.doc() = "versatil: quantize TorchScript models with versatil's backends, the CLI's pipeline from Python";
    m.attr("__version__") = std::string(versatil::version);
    py::module_::import("torch");  // LibTorch's casters for Tensor and ScriptModule

    base_error = PyErr_NewExceptionWithDoc("versatil.Error", "Every error versatil raises", PyExc_Exception, nullptr);
    m.attr("Error") = py::handle(base_error);
    for (std::size_t i = 0; i < all_error_kinds.size(); ++i) {
        const std::string name = class_name(to_string(all_error_kinds[i]));
        kind_errors[i] = PyErr_NewException(("versatil." + name).c_str(), base_error, nullptr);
        m.attr(name.c_str()) = py::handle(kind_errors[i]);
    }
    // Module-local: torch's own modules share pybind11's state and keep their translators.
    py::register_local_exception_translator([](std::exception_ptr thrown) {
        try {
            std::rethrow_exception(thrown);
        } catch (const py::error_already_set&) {
            throw;  // a Python exception (from a DataLoader, say) goes on as it was
        } catch (const py::builtin_exception&) {
            throw;
        } catch (const error& failure) {
            const auto at = std::ranges::find(all_error_kinds, failure.kind()) - all_error_kinds.begin();
            PyErr_SetString(kind_errors[static_cast<std::size_t>(at)], failure.what());
        } catch (const std::exception& failure) {
            // Not a failure the library foresaw: LibTorch's one line, as the CLI prints it.
            PyErr_SetString(base_error, ("internal error: " + one_line(failure)).c_str());
        }
    });

    // The report: a plain dict of the JSON report's fields, whose str() is the CLI's table.
    py::object report = py::module_::import("builtins").attr("type")(
        "Report", py::make_tuple(py::type::of(py::dict())),
        py::dict(py::arg("__module__") = "versatil",
                 py::arg("__doc__") = "The JSON report's fields as a dict; str() gives the CLI's table."));
    report.attr("__str__") = py::cpp_function(
        [](const py::object& self) -> py::object {
            if (py::hasattr(self, "_table")) return self.attr("_table");
            return py::module_::import("builtins").attr("dict").attr("__repr__")(self);  // a Report made in Python
        },
        py::is_method(report));
    m.attr("Report") = report;

    m.def(
        "quantize",
        [](const py::object& model, const py::object& calibration,
           const std::map<std::string, std::optional<std::string>>& targets, const py::object& evaluation,
           const std::optional<at::Tensor>& labels, bool per_layer, int threads, std::optional<double> min_sqnr,
           std::optional<double> max_accuracy_drop, const py::object& progress) {
            return quantize(model, calibration, targets, evaluation, labels,
                            {per_layer, threads, min_sqnr, max_accuracy_drop, progress});
        },
        py::arg("model"), py::arg("calibration"), py::kw_only(),
        py::arg("targets") = std::map<std::string, std::optional<std::string>>{{"", "xnnpack"}},
        py::arg("evaluation") = py::none(), py::arg("labels") = py::none(), py::arg("per_layer") = true,
        py::arg("threads") = 1, py::arg("min_sqnr") = py::none(), py::arg("max_accuracy_drop") = py::none(),
        py::arg("progress") = py::none(),
        "Quantizes a scripted or traced model; returns (quantized ScriptModule, report).");

    m.def(
        "train_qat",
        [](const py::object& model, const at::Tensor& train_inputs, const at::Tensor& train_labels,
           const std::map<std::string, std::optional<std::string>>& targets, const py::object& evaluation,
           const std::optional<at::Tensor>& labels, std::int64_t steps, double learning_rate, std::int64_t batch_size,
           std::optional<std::int64_t> freeze_observers_after, int threads, const py::object& progress) {
            const ::torch::jit::Module float_model = script_module(model);
            const runtime_quantizer quantizer = quantizer_from(targets);
            if (!quantizer.is_qat())
                fail(error_kind::invalid_argument, "train_qat: give QAT targets (the qat option, \"xnnpack:qat\")");
            quantize_data data = data_from(float_model, py::none(), evaluation, labels);
            data.train_inputs = train_inputs;
            data.train_labels = train_labels;
            qat_options qat;
            qat.training.steps = steps;
            qat.training.learning_rate = learning_rate;
            qat.training.batch_size = batch_size;
            qat.freeze_observers_after = freeze_observers_after.value_or(-1);
            return python_result(run_pipeline(float_model, quantizer, data, {false, threads, {}, {}, progress}, qat));
        },
        py::arg("model"), py::arg("train_inputs"), py::arg("train_labels"), py::kw_only(),
        py::arg("targets") = std::map<std::string, std::optional<std::string>>{{"", "xnnpack:qat"}},
        py::arg("evaluation") = py::none(), py::arg("labels") = py::none(), py::arg("steps") = 300,
        py::arg("learning_rate") = 1e-4, py::arg("batch_size") = qat_options{}.training.batch_size,
        py::arg("freeze_observers_after") = py::none(),
        py::arg("threads") = 1, py::arg("progress") = py::none(),
        "Trains QAT targets on (train_inputs, train_labels), then converts; returns (quantized ScriptModule, report).");

    m.def(
        "export_firmware",
        [](const py::object& model, const py::object& calibration, const std::string& path,
           const std::optional<std::string>& namespace_name,
           const std::map<std::string, std::optional<std::string>>& targets,
           const py::object& evaluation, const std::optional<at::Tensor>& labels, const std::string& input_layout,
           bool per_layer, int threads, const py::object& progress) {
            const ::torch::jit::Module float_model = script_module(model);
            const runtime_quantizer quantizer = quantizer_from(targets);
            if (!quantizer.supported_device_types().contains(device_type::mcu))
                fail(error_kind::invalid_argument,
                     "export_firmware writes firmware for a microcontroller: quantize for one (\"cortex_m\")");
            if (input_layout != "chw" && input_layout != "hwc")
                fail(error_kind::invalid_argument, "input_layout: \"chw\" or \"hwc\", not \"" + input_layout + "\"");
            const std::string name = namespace_name.value_or(std::filesystem::path(path).stem().string());
            try {
                codegen::check_namespace(name);
            } catch (const std::invalid_argument& failure) {
                fail(error_kind::invalid_argument,
                     std::string(failure.what()) + (namespace_name ? "" : "; name one with namespace="));
            }
            const quantize_data data = data_from(float_model, calibration, evaluation, labels);
            quantization_result result =
                run_pipeline(float_model, quantizer, data, {per_layer, threads, {}, {}, progress}, {});
            {
                const py::gil_scoped_release released;
                const firmware_export exported = export_firmware(
                    float_model, result.model, data.evaluation.empty() ? data.calibration : data.evaluation, name,
                    input_layout == "hwc" ? codegen::input_layout::hwc : codegen::input_layout::chw);
                result.report.firmware = exported.report;
                output_file header(path);
                header.write(exported.header);
                header.commit();
            }
            return python_result(result);
        },
        py::arg("model"), py::arg("calibration"), py::arg("path"), py::kw_only(), py::arg("namespace") = py::none(),
        py::arg("targets") = std::map<std::string, std::optional<std::string>>{{"", "cortex_m"}},
        py::arg("evaluation") = py::none(), py::arg("labels") = py::none(), py::arg("input_layout") = "chw",
        py::arg("per_layer") = true, py::arg("threads") = 1, py::arg("progress") = py::none(),
        "Quantizes for cortex_m and writes the C++ header for the firmware runtime; returns (quantized, report).");

    m.def(
        "save",
        [](const py::object& model, const std::string& path) {
            if (!py::hasattr(model, "versatil_metadata"))
                fail(error_kind::invalid_argument, "save: the model was not quantized by versatil (its metadata is "
                                                   "missing); torch.jit.save saves any ScriptModule");
            const std::string metadata = py::str(py::module_::import("json").attr("dumps")(
                model.attr("versatil_metadata"), py::arg("indent") = 2));
            const ::torch::jit::Module module = script_module(model);
            const py::gil_scoped_release released;
            save_module(module, path, {{metadata_file, metadata}});
        },
        py::arg("model"), py::arg("path"), "Writes a quantized model and its metadata, whole or not at all.");

    m.def(
        "load",
        [](const std::string& path) {
            std::optional<loaded_model> loaded;
            {
                const py::gil_scoped_release released;
                loaded = load_quantized(path);
            }
            return python_module(loaded->module, loaded->metadata);
        },
        py::arg("path"), "Loads a model saved by versatil.save or versatil-quantize --out, with its metadata.");

    m.def(
        "backends",
        [] {
            std::map<std::string, std::vector<std::string>> listed;
            for (const backend_descriptor* descriptor : builtin_backends)
                if (auto [entry, fresh] = listed.try_emplace(std::string(descriptor->name)); fresh)
                    for (const std::string_view option :
                         versatil::detail::known_options(builtin_backends, descriptor->name))
                        entry->second.emplace_back(option);
            return listed;
        },
        "Every backend of the catalogue with the options it accepts (a target's spec is BACKEND[:OPT[,OPT]]).");
}
