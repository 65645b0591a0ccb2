// The files a versatil-quantize run names, checked before any work starts: an input that is a directory
// is called one, and every output (--out, --report, --export) is staged at once, so a missing or
// unwritable directory, an output that is an input or another output fails in a second, not after the
// run (a MobileNet's 40 s). The staged temporaries are what the run later writes and commits.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "versatil/libtorch/error.hpp"
#include "versatil/libtorch/files/output_file.hpp"
#include "versatil/libtorch/files/save.hpp"

namespace versatil_quantize {

using versatil::libtorch::error;
using versatil::libtorch::error_kind;

// A file the command line names, with the option that named it.
struct named_file {
    std::string option;  // "--model"
    std::string path;
};

// An input given as a directory is named as one (LibTorch would say it does not exist).
inline void check_input(const named_file& input, error_kind kind) {
    std::error_code ignored;
    if (std::filesystem::is_directory(input.path, ignored))
        throw error(kind, input.option + " '" + input.path + "' is a directory; give the file in it (a .pt that " +
                              (input.option == "--model" ? "torch.jit.save wrote)" : "holds the tensors)"));
}

// The outputs a run writes, each staged beside its destination when constructed, after checking that
// none is an input or another output under any spelling of its path (symlinks, "..").
struct staged_outputs {
    std::optional<versatil::libtorch::output_file> model, report, header;

    staged_outputs(const std::optional<std::string>& out_path, const std::optional<std::string>& report_path,
                   const std::optional<std::string>& export_path, const std::vector<named_file>& inputs) {
        std::vector<named_file> outputs;
        if (out_path) outputs.push_back({"--out", *out_path});
        if (report_path) outputs.push_back({"--report", *report_path});
        if (export_path) outputs.push_back({"--export", *export_path});
        for (std::size_t i = 0; i < outputs.size(); ++i) {
            for (const named_file& input : inputs)
                if (versatil::libtorch::detail::same_file(outputs[i].path, input.path))
                    throw error(error_kind::io_error,
                                "the output path '" + outputs[i].path + "' (" + outputs[i].option + ") is the input " +
                                    (input.option == "--model" ? "model" : "data file") + "; write to another file");
            for (std::size_t j = 0; j < i; ++j)
                if (versatil::libtorch::detail::same_file(outputs[i].path, outputs[j].path))
                    throw error(error_kind::io_error, outputs[j].option + " and " + outputs[i].option +
                                                          " name the same file '" + outputs[i].path +
                                                          "'; give each output its own");
        }
        if (out_path) model.emplace(*out_path);
        if (report_path) report.emplace(*report_path);
        if (export_path) header.emplace(*export_path);
    }
};

}  // namespace versatil_quantize
