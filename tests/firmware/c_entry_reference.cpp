// What c_entry.c must print, from the host runtime (codegen::run_on_host on the synthetic
// graph): the same eight inputs of the same xorshift32 sequence, the same lines.
#include <cstdint>
#include <cstdio>
#include <vector>

#include "synthetic_graph.hpp"
#include "versatil/codegen/host_runner.hpp"

int main() {
    const auto lowered = versatil::codegen::lower(synthetic::graph(SYNTHETIC_SEED));
    const std::size_t input_size = lowered.tensors[static_cast<std::size_t>(lowered.input)].bytes();
    std::uint32_t state = 2463534242U;
    for (int sample = 0; sample < 8; ++sample) {
        std::vector<std::int8_t> input(input_size);
        for (auto& x : input) {
            state ^= state << 13;
            state ^= state >> 17;
            state ^= state << 5;
            x = static_cast<std::int8_t>(state >> 24);
        }
        const std::vector<std::int8_t> output = versatil::codegen::run_on_host(lowered, input);
        for (std::size_t start = 0; start < output.size(); start += 16) {
            std::printf("sample %d", sample);
            for (std::size_t c = start; c < start + 16 && c < output.size(); ++c) std::printf(" %d", output[c]);
            std::printf("\n");
        }
    }
    return 0;
}
