// The synthetic graph on a 3-channel image exported twice, channel-first (synthetic_rgb.hpp) and
// channel-last (synthetic_rgb_hwc.hpp: --export-input-layout hwc, the first convolution gathering
// the input in place): on the same images, the second model given each image transposed to
// (height, width, channels) must give the first model's bytes. Prints both models' outputs and
// exits 1 on a difference; the same source on the host and on the MPS2 AN386 (device.py compares
// the two). With the channel-first input the channel-last model must differ, or the test would
// not tell the layouts apart. check_export.py builds it with two models exported by the CLI:
//   -DVERSATIL_PLANAR_HEADER='"a.hpp"' -DVERSATIL_PLANAR_NAMESPACE=a (likewise VERSATIL_INTERLEAVED_*)
#include <cstddef>
#include <cstdint>

#ifndef VERSATIL_PLANAR_HEADER
#define VERSATIL_PLANAR_HEADER "synthetic_rgb.hpp"
#define VERSATIL_PLANAR_NAMESPACE synthetic_rgb
#define VERSATIL_INTERLEAVED_HEADER "synthetic_rgb_hwc.hpp"
#define VERSATIL_INTERLEAVED_NAMESPACE synthetic_rgb_hwc
#endif

#include VERSATIL_PLANAR_HEADER
#include VERSATIL_INTERLEAVED_HEADER
#include "console.hpp"

namespace {

using planar = VERSATIL_PLANAR_NAMESPACE::model;
using interleaved = VERSATIL_INTERLEAVED_NAMESPACE::model;
static_assert(!planar::input_channels_last && interleaved::input_channels_last);
static_assert(planar::input_size == interleaved::input_size && planar::input_shape == interleaved::input_shape);

constexpr int channels = planar::input_shape.channels, plane = planar::input_shape.plane();
std::byte arena[planar::arena_bytes > interleaved::arena_bytes ? planar::arena_bytes : interleaved::arena_bytes];
std::int8_t image[planar::input_size], transposed[planar::input_size];
std::int8_t expected[planar::output_size], output[planar::output_size], misread[planar::output_size];

}  // namespace

int main() {
    std::uint32_t state = 2463534242U;
    int differing = 0, told_apart = 0;
    for (int sample = 0; sample < 6; ++sample) {
        for (std::int8_t& x : image) {
            state ^= state << 13;
            state ^= state >> 17;
            state ^= state << 5;
            x = static_cast<std::int8_t>(state >> 24);
        }
        for (int c = 0; c < channels; ++c)
            for (int i = 0; i < plane; ++i) transposed[i * channels + c] = image[c * plane + i];
        planar::run(image, expected, arena);
        interleaved::run(transposed, output, arena);
        interleaved::run(image, misread, arena);
        console::line out;
        out << "sample " << sample;
        for (std::size_t i = 0; i < planar::output_size; ++i) {
            out << " " << output[i];
            differing += output[i] != expected[i] ? 1 : 0;
            told_apart += misread[i] != expected[i] ? 1 : 0;
        }
        out << "\n";
    }
    console::line() << "channel-last outputs differing from channel-first: " << differing
                    << "; misread (planar bytes to the channel-last model): " << told_apart << "\n";
    return differing == 0 && told_apart > 0 ? 0 : 1;
}
