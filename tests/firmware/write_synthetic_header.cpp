// Writes the header of the synthetic graph (synthetic_graph.hpp) for a seed, as the exporter
// writes a model's: codegen::header_for; optionally with CHANNELS input channels and the input's
// LAYOUT (chw or hwc, channel-last). Run at build time by meson.
//   write_synthetic_header SEED NAMESPACE OUTPUT [CHANNELS LAYOUT]
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <string>

#include "synthetic_graph.hpp"
#include "versatil/codegen/header_writer.hpp"

int main(int argc, char** argv) {
    if (argc != 4 && !(argc == 6 && (std::string(argv[5]) == "chw" || std::string(argv[5]) == "hwc"))) {
        std::cerr << "usage: write_synthetic_header SEED NAMESPACE OUTPUT [CHANNELS chw|hwc]\n";
        return 2;
    }
    const int channels = argc == 6 ? std::atoi(argv[4]) : 1;
    const auto layout = argc == 6 && std::string(argv[5]) == "hwc" ? versatil::codegen::input_layout::hwc
                                                                    : versatil::codegen::input_layout::chw;
    const std::string text = versatil::codegen::header_for(
        synthetic::graph(static_cast<unsigned>(std::strtoul(argv[1], nullptr, 10)), channels), argv[2], layout);
    std::ofstream out(argv[3], std::ios::binary);
    out << text;
    return out.good() ? 0 : 1;
}
