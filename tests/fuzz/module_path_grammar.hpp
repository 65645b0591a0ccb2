// The module-path grammar of versatil/core/module_path.hpp written another way, as a regular
// expression: the reference fuzz_module_path holds the library to, and which
// tests/fuzz/grammar_names.cpp holds to every module name of the zoo's real models (torchvision's
// included) in the plain run, so a grammar that drifts from real names fails there in seconds.
#pragma once

#include <regex>
#include <string>

namespace versatil_fuzz {

// "" is the whole model; otherwise '.'-separated components, each an index without a leading
// zero or a name that does not start with a digit: letters, digits, '_' and '-' (torchvision's
// RegNet names its blocks "block1-0"; nn.Module.add_module takes any name without '.').
inline bool valid_by_regex(const std::string& path) {
    static const std::regex grammar(
        R"(((?:[A-Za-z_-][A-Za-z0-9_-]*|0|[1-9][0-9]*)(?:\.(?:[A-Za-z_-][A-Za-z0-9_-]*|0|[1-9][0-9]*))*)?)");
    return std::regex_match(path, grammar);
}

}  // namespace versatil_fuzz
