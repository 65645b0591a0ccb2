// run_quantized MODEL DATA OUT: loads a quantized model saved by versatil (from Python or the CLI) with
// the C++ library, runs it on DATA's 'test' inputs (a data file) under the engine its metadata names,
// and writes the outputs as OUT's 'calib', 'calib_0', ... (a data file): the C++ side of
// tests/python/check_python.py's "quantized in Python runs in LibTorch C++, and the other way".
#include <cstdio>

#include "versatil/libtorch.hpp"
#include "versatil/libtorch/files/data_file.hpp"

int main(int argc, char** argv) {
    using namespace versatil::libtorch;
    if (argc != 4) {
        std::fputs("usage: run_quantized MODEL DATA OUT\n", stderr);
        return 2;
    }
    try {
        loaded_model loaded = load_quantized(argv[1]);
        const data_file data = load_data_file(argv[2]);
        const engine_scope engine(loaded.engine);
        std::vector<c10::IValue> arguments(data.evaluation.begin(), data.evaluation.end());
        std::vector<at::Tensor> outputs;
        for (const named_output& output : flatten_output(loaded.module.forward(arguments)))
            outputs.push_back(output.tensor);
        save_data_file({.calibration = outputs}, argv[3]);
        return 0;
    } catch (const std::exception& failure) {
        std::fprintf(stderr, "run_quantized: %s\n", one_line(failure).c_str());
        return 1;
    }
}
