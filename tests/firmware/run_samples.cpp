// Runs an exported model on embedded int8 samples and prints, per sample, the top-1 class (the
// first largest output) and every int8 output, sixteen to a line (console.hpp's lines hold 256
// characters). The same source builds for the MPS2 AN386 board and for the host, and both must
// print the same bytes (device.py); check_mlperf_tiny.py compares the outputs with LibTorch's.
//
//   -DVERSATIL_MODEL_HEADER='"model.hpp"' -DVERSATIL_MODEL_NAMESPACE=name
//   -DVERSATIL_SAMPLES_HEADER='"samples.hpp"' (embedded_samples::count, ::inputs[count][input_size])
#include <cstddef>
#include <cstdint>

#include VERSATIL_MODEL_HEADER
#include VERSATIL_SAMPLES_HEADER
#include "console.hpp"

namespace {

using model = VERSATIL_MODEL_NAMESPACE::model;

static_assert(sizeof embedded_samples::inputs[0] == model::input_size,
              "run_samples: the embedded samples are not the model's input size");

std::byte arena[model::arena_bytes];
std::int8_t output[model::output_size];

}  // namespace

int main() {
    for (int sample = 0; sample < embedded_samples::count; ++sample) {
        model::run(embedded_samples::inputs[sample], output, arena);
        std::size_t top1 = 0;
        for (std::size_t c = 1; c < model::output_size; ++c)
            if (output[c] > output[top1]) top1 = c;
        console::line() << "sample " << sample << " top1 " << static_cast<int>(top1) << "\n";
        for (std::size_t start = 0; start < model::output_size; start += 16) {
            console::line out;
            out << "outputs";
            for (std::size_t c = start; c < start + 16 && c < model::output_size; ++c) out << " " << output[c];
            out << "\n";
        }
    }
    return 0;
}
