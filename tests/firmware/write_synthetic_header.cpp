// Writes the header of the synthetic graph (synthetic_graph.hpp) for a seed, as the exporter
// writes a model's: codegen::header_for. Run at build time by meson.
//   write_synthetic_header SEED NAMESPACE OUTPUT
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>

#include "synthetic_graph.hpp"
#include "versatil/codegen/header_writer.hpp"

int main(int argc, char** argv) {
    if (argc != 4) {
        std::cerr << "usage: write_synthetic_header SEED NAMESPACE OUTPUT\n";
        return 2;
    }
    const std::string text = versatil::codegen::header_for(synthetic::graph(static_cast<unsigned>(std::strtoul(argv[1], nullptr, 10))), argv[2]);
    std::ofstream out(argv[3], std::ios::binary);
    out << text;
    return out.good() ? 0 : 1;
}
