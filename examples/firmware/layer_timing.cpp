// Times each layer of an exported model on the board: model::run with a per-layer callback
// (versatil/firmware/layer_callback.hpp) that reads the SysTick when a layer starts and when it
// ends. Under QEMU with -icount shift=0 the SysTick counts instructions (40 a tick:
// mps2_an386/instruction_counter.hpp); on a real board the same code counts core clock ticks.
// The callback keeps the figures and they are printed after the run, so the printing is not
// timed; the run without a callback must give the same outputs.
//
//   -DVERSATIL_MODEL_HEADER='"model.hpp"' -DVERSATIL_MODEL_NAMESPACE=name -DVERSATIL_BOARD_MPS2_AN386
#include <cstddef>
#include <cstdint>

#include VERSATIL_MODEL_HEADER
#include "console.hpp"
#include "mps2_an386/instruction_counter.hpp"

namespace {

using model = VERSATIL_MODEL_NAMESPACE::model;
using counter = mps2_an386::instruction_counter;

struct layer_timer {
    std::uint32_t started = 0;
    int instructions[model::layer_count] = {};
    const char* modules[model::layer_count] = {};

    void operator()(versatil::firmware::layer_event event, std::size_t layer, const char* module) noexcept {
        const std::uint32_t now = counter::now();
        if (event == versatil::firmware::layer_event::starts) {
            started = now;
        } else {
            instructions[layer] = counter::instructions_between(started, now);
            modules[layer] = module;
        }
    }
};

std::byte arena[model::arena_bytes];
std::int8_t input[model::input_size], plain_output[model::output_size], timed_output[model::output_size];
layer_timer timer;

}  // namespace

int main() {
    for (std::size_t i = 0; i < model::input_size; ++i) input[i] = static_cast<std::int8_t>(i * 37 % 256);
    const counter systick;
    model::run(input, plain_output, arena);
    const std::uint32_t before = counter::now();
    model::run(input, timed_output, arena, timer);
    const int total = counter::instructions_between(before, counter::now());

    int sum = 0;
    for (std::size_t layer = 0; layer < model::layer_count; ++layer) {
        console::line() << "layer " << static_cast<int>(layer) << " " << timer.modules[layer] << " "
                        << timer.instructions[layer] << "\n";
        sum += timer.instructions[layer];
    }
    console::line() << "layers " << sum << " of run " << total << "\n";
    bool same = true;
    for (std::size_t i = 0; i < model::output_size; ++i) same = same && plain_output[i] == timed_output[i];
    console::line() << "outputs " << (same ? "equal" : "differ") << " without the callback\n";
    return same ? 0 : 1;
}
