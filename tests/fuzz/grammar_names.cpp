// The module-path grammars against real names, in the plain run: every submodule path of the
// zoo's models (module_names.txt, written by tests/zoo/make_zoo.py --module-names from
// torchvision's classes and the hand-written models) must be valid for the library and for the
// fuzzer's independent regular expression, and the two must agree on every one-character edit
// of those names. A grammar change either way fails here in seconds rather than in a fuzzer's
// random 20 seconds.
#include <doctest/doctest.h>

#include <algorithm>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "module_path_grammar.hpp"
#include "versatil/core/module_path.hpp"

namespace {

std::vector<std::string> real_names() {
    std::ifstream file(VERSATIL_MODULE_NAMES);
    REQUIRE_MESSAGE(file, "cannot read " VERSATIL_MODULE_NAMES);
    std::vector<std::string> names;
    for (std::string line; std::getline(file, line);) names.push_back(line);
    return names;
}

// One of each kind of character either grammar may treat differently: letters, digits (a
// leading zero too), the separators '_' '-' '.', and characters neither accepts.
constexpr char probes[] = {'a', 'Z', '0', '1', '9', '_', '-', '.', ' ', '/', ':', '$', '\0', '\x7f', '\xe9'};

}  // namespace

TEST_CASE("every module name of the zoo's models is a valid path, for the library and the fuzzer's grammar") {
    const std::vector<std::string> names = real_names();
    // The list is the zoo's: torchvision's RegNet (a '-' in "block1-0"), indices, nesting.
    REQUIRE(names.size() > 1000);
    CHECK(std::find(names.begin(), names.end(), "trunk_output.block1.block1-0") != names.end());
    for (const std::string& name : names) {
        INFO(name);
        CHECK(versatil::is_valid_module_path(name));
        CHECK(versatil_fuzz::valid_by_regex(name));
    }
}

TEST_CASE("the library and the fuzzer's grammar agree on every one-character edit of a real name") {
    std::set<std::string> edits{""};
    for (const std::string& name : real_names()) {
        for (std::size_t i = 0; i <= name.size(); ++i) {
            if (i < name.size()) edits.insert(name.substr(0, i) + name.substr(i + 1));  // deleted
            for (char c : probes) {
                edits.insert(name.substr(0, i) + c + name.substr(i));  // inserted
                if (i < name.size()) edits.insert(name.substr(0, i) + c + name.substr(i + 1));  // replaced
            }
        }
    }
    std::size_t valid = 0, disagreements = 0;
    for (const std::string& path : edits) {
        const bool library = versatil::is_valid_module_path(path);
        valid += library ? 1 : 0;
        if (library != versatil_fuzz::valid_by_regex(path) && ++disagreements <= 10)
            FAIL_CHECK("library says " << (library ? "valid" : "invalid") << ", the regex the opposite: \"" << path
                                       << "\"");
    }
    CHECK(disagreements == 0);
    // Both outcomes are exercised, so agreement is not agreement on one answer.
    CHECK(valid > edits.size() / 10);
    CHECK(edits.size() - valid > edits.size() / 10);
}
