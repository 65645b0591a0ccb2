// Classifies embedded Fashion-MNIST test images with an exported model (versatil-quantize
// --export, or codegen::header_for) and prints, per image, its label, the predicted class and
// the model's int8 outputs, then the count of correct predictions. The same source builds for
// the MPS2 AN386 board (Cortex-M4; text through semihosting) and for the host (stdout), and
// both print the same bytes: that is the device test (tests/firmware/device.py; with the exported
// Fashion-MNIST CNN, tests/firmware/check_export.py).
//
// Build with the model and the images chosen on the command line:
//   -DVERSATIL_MODEL_HEADER='"model.hpp"' -DVERSATIL_MODEL_NAMESPACE=fm
//   -DVERSATIL_IMAGES_HEADER='"images.hpp"' (examples/firmware/embed_images.py writes it)
//   -DVERSATIL_BOARD_MPS2_AN386 for the board (with mps2_an386/startup.cpp and the linker script)
//
// Images are embedded as the dataset's own bytes (784 per image) and quantized here through a
// 256-entry table the compiler computes from model::input_scale and input_zero_point (as
// ATen's quantize_per_tensor, on the normalisation the models were trained with): one images
// header serves every model, and no float arithmetic runs on the device.
#include <array>
#include <cstddef>
#include <cstdint>

#include VERSATIL_MODEL_HEADER
#include VERSATIL_IMAGES_HEADER
#include "console.hpp"
#include "versatil/math/quantize.hpp"

namespace {

using model = VERSATIL_MODEL_NAMESPACE::model;

static_assert(model::input_size == embedded_images::rows * embedded_images::columns,
              "classify: the model's input is not one 28x28 Fashion-MNIST image");

constexpr std::array<std::int8_t, 256> pixel_levels = [] {
    std::array<std::int8_t, 256> levels{};
    const versatil::math::quantization_params input{static_cast<float>(model::input_scale), model::input_zero_point};
    for (int p = 0; p < 256; ++p) {
        const float normalised = (static_cast<float>(p) / 255.0F - static_cast<float>(embedded_images::mean)) /
                                 static_cast<float>(embedded_images::std_dev);
        levels[static_cast<std::size_t>(p)] =
            static_cast<std::int8_t>(versatil::math::quantize(normalised, input, {-128, 127}));
    }
    return levels;
}();

std::byte arena[model::arena_bytes];
std::int8_t input[model::input_size];
std::int8_t output[model::output_size];

}  // namespace

int main() {
    int correct = 0;
    for (int image = 0; image < embedded_images::count; ++image) {
        for (std::size_t i = 0; i < model::input_size; ++i) input[i] = pixel_levels[embedded_images::pixels[image][i]];
        model::run(input, output, arena);
        std::size_t predicted = 0;
        for (std::size_t c = 1; c < model::output_size; ++c)
            if (output[c] > output[predicted]) predicted = c;
        correct += static_cast<int>(predicted) == embedded_images::labels[image] ? 1 : 0;
        console::line out;
        out << "image " << image << " label " << embedded_images::labels[image] << " predicted "
            << static_cast<int>(predicted) << " outputs";
        for (std::size_t c = 0; c < model::output_size; ++c) out << " " << output[c];
        out << "\n";
    }
    console::line() << "correct " << correct << " of " << embedded_images::count << "\n";
    console::line() << "arena " << static_cast<int>(model::arena_bytes) << " bytes\n";
    return 0;
}
