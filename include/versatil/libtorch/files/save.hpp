// Saving and loading quantized models. A saved model is plain TorchScript: torch::jit::load
// and Python's torch.jit.load run it with no versatil code (under the engine its metadata
// names). Metadata (versatil version, engine, targets with their configs, adjustments) rides
// in the archive's extra files as `versatil.json`. Output goes through an output_file: whole
// or not at all, each write checked (output_file.hpp).
#pragma once

#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/serialization/export.h>
#include <torch/script.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <optional>
#include <string>
#include <system_error>

#include "versatil/libtorch/error.hpp"
#include "versatil/libtorch/files/file_check.hpp"
#include "versatil/libtorch/files/output_file.hpp"
#include "versatil/libtorch/plan/config_json.hpp"
#include "versatil/libtorch/plan/plan.hpp"
#include "versatil/libtorch/torchscript/engine.hpp"
#include "versatil/version.hpp"

namespace versatil::libtorch {

inline constexpr const char* metadata_file = "versatil.json";

inline nlohmann::json metadata_of(const lowered_model& model) {
    nlohmann::json targets = nlohmann::json::array();
    for (const target_info& target : model.plan.quantizer.target_infos()) targets.push_back(to_json(target));
    nlohmann::json adjustments = nlohmann::json::array();
    for (const adjustment& a : model.adjustments)
        adjustments.push_back({{"module", a.module_path}, {"change", a.change}});
    nlohmann::json backends = nlohmann::json::array();
    for (std::string_view name : model.plan.quantizer.backend_names()) backends.push_back(name);
    return {{"versatil_version", versatil::version}, {"engine", engine_name(model.plan.engine)},
            {"backends", backends},                  {"targets", targets},
            {"adjustments", adjustments}};
}

namespace detail {
inline bool same_file(const std::filesystem::path& a, const std::filesystem::path& b) {
    std::error_code ignored;
    if (std::filesystem::exists(a, ignored) && std::filesystem::exists(b, ignored))
        return std::filesystem::equivalent(a, b, ignored);
    return std::filesystem::weakly_canonical(a, ignored) == std::filesystem::weakly_canonical(b, ignored);
}
}  // namespace detail

// An io_error when `output` is `input_model` (under any spelling of its path).
inline void refuse_input_as_output(const std::filesystem::path& output,
                                   const std::optional<std::filesystem::path>& input_model) {
    if (input_model && detail::same_file(output, *input_model))
        throw error(error_kind::io_error, "the output path '" + output.string() +
                                              "' is the input model; write the quantized model to another file");
}

// Serializes `module` into a staged output; commit the output to publish it. LibTorch's
// archive writer is driven through a function that always reports success (checked_writer.hpp
// says why), so a full disk is reported by the output, never thrown from LibTorch's destructor.
inline void write_module(output_file& output, const ::torch::jit::Module& module,
                         const ::torch::jit::ExtraFilesMap& extra_files) {
    try {
        ::torch::jit::ExportModule(
            module,
            [&output](const void* data, std::size_t size) {
                output.write(data, size);
                return size;
            },
            extra_files);
    } catch (const std::exception& failure) {
        throw error(error_kind::io_error,
                    "cannot write '" + output.destination().string() + "': " + one_line(failure));
    }
}

inline void write_quantized(output_file& output, const lowered_model& model) {
    write_module(output, model.module, {{metadata_file, metadata_of(model).dump(2)}});
}

// Writes `module` to `output` whole or not at all; never over `input_model` when given.
inline void save_module(const ::torch::jit::Module& module, const std::filesystem::path& output,
                        const ::torch::jit::ExtraFilesMap& extra_files,
                        const std::optional<std::filesystem::path>& input_model = std::nullopt) {
    refuse_input_as_output(output, input_model);
    output_file file(output);
    write_module(file, module, extra_files);
    file.commit();
}

// Writes a lowered model and its metadata as save_module does.
inline void save(const lowered_model& model, const std::filesystem::path& output,
                 const std::optional<std::filesystem::path>& input_model = std::nullopt) {
    save_module(model.module, output, {{metadata_file, metadata_of(model).dump(2)}}, input_model);
}

namespace detail {
// The metadata of an archive check_archive(path) passed.
inline nlohmann::json read_checked_metadata(const std::filesystem::path& path) {
    try {
        caffe2::serialize::PyTorchStreamReader reader(path.string());
        const std::string record = std::string("extra/") + metadata_file;
        if (!reader.hasRecord(record))
            throw error(error_kind::invalid_model_file,
                        "'" + path.string() + "' holds no versatil metadata: it was not saved by versatil");
        auto [data, size] = reader.getRecord(record);
        return nlohmann::json::parse(static_cast<const char*>(data.get()), static_cast<const char*>(data.get()) + size);
    } catch (const error&) {
        throw;
    } catch (const std::exception& failure) {
        throw error(error_kind::invalid_model_file,
                    "'" + path.string() + "' is not a readable TorchScript archive: " + one_line(failure));
    }
}
}  // namespace detail

// A TorchScript file's versatil metadata, read without loading the model.
inline nlohmann::json read_metadata(const std::filesystem::path& path) {
    check_archive(path, error_kind::invalid_model_file, "model file");
    return detail::read_checked_metadata(path);
}

// A float TorchScript model, with a clear error for a missing, truncated or corrupt file
// (file_check.hpp says what is checked and why; `where` says where its source is compiled).
inline ::torch::jit::Module load_model(const std::filesystem::path& path,
                                       compile_source where = compile_source::in_child_process) {
    ::torch::jit::Module model = load_checked(path, error_kind::invalid_model_file, "model file", where);
    model.eval();
    return model;
}

struct loaded_model {
    ::torch::jit::Module module;  // run it with engine_scope(engine) active
    nlohmann::json metadata;
    at::QEngine engine;
};

// A model saved by `save`: its weights are packed for the engine its metadata names.
inline loaded_model load_quantized(const std::filesystem::path& path,
                                   compile_source where = compile_source::in_child_process) {
    check_archive(path, error_kind::invalid_model_file, "model file");
    nlohmann::json metadata = detail::read_checked_metadata(path);
    const at::QEngine engine = parse_engine_name(metadata.at("engine").get<std::string>());
    const engine_scope scope(engine);
    ::torch::jit::Module module =
        detail::load_checked_archive(path, error_kind::invalid_model_file, "model file", where);
    module.eval();
    return {std::move(module), std::move(metadata), engine};
}

}  // namespace versatil::libtorch
