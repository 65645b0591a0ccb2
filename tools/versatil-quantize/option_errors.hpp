// What versatil-quantize says when its command line is wrong: one readable line, exit status 2 (as for any
// bad input), and for a misspelt option the nearest one CLI11 knows. CLI11's own messages exit with codes
// of its own (105, 109, ...), print validator ranges as 300-digit numbers and say nothing of near misses.
#pragma once

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace versatil_quantize {

// Edit distance with adjacent transpositions counted as one edit ("--modle" is one from "--model"),
// case-insensitive ("--rank" is "--RANK").
inline std::size_t edit_distance(std::string_view a, std::string_view b) {
    const auto same = [](char x, char y) { return std::tolower(static_cast<unsigned char>(x)) ==
                                                  std::tolower(static_cast<unsigned char>(y)); };
    std::vector<std::vector<std::size_t>> d(a.size() + 1, std::vector<std::size_t>(b.size() + 1));
    for (std::size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
    for (std::size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
    for (std::size_t i = 1; i <= a.size(); ++i)
        for (std::size_t j = 1; j <= b.size(); ++j) {
            d[i][j] =
                std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (same(a[i - 1], b[j - 1]) ? 0 : 1)});
            if (i > 1 && j > 1 && same(a[i - 1], b[j - 2]) && same(a[i - 2], b[j - 1]))
                d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
        }
    return d[a.size()][b.size()];
}

// The long option names the app knows ("--model", ...), help and version included.
inline std::vector<std::string> option_names(const CLI::App& app) {
    std::vector<std::string> names;
    for (const CLI::Option* option : app.get_options())
        for (const std::string& name : option->get_lnames()) names.push_back("--" + name);
    return names;
}

// The known option `given` most likely meant: the nearest within a third of its length (at least
// one edit), or one that contains it or that it contains ("--export-layout" and "--export").
inline std::optional<std::string> nearest_option(std::string_view given, const std::vector<std::string>& known) {
    std::optional<std::string> best;
    std::size_t best_distance = std::max<std::size_t>(1, (given.size() - 2) / 3) + 1;
    for (const std::string& name : known) {
        const std::size_t distance = edit_distance(given, name);
        if (distance < best_distance) best = name, best_distance = distance;
    }
    if (best) return best;
    for (const std::string& name : known)
        if (given.size() > 3 && (name.find(given) != std::string::npos || given.find(name) != std::string_view::npos))
            return name;
    return std::nullopt;
}

// The first argument that looks like an option and is none the app knows ("--modle" of "--modle=x").
inline std::optional<std::string> first_unknown_option(int argc, const char* const* argv, const CLI::App& app) {
    const std::vector<std::string> known = option_names(app);
    for (int i = 1; i < argc; ++i) {
        const std::string_view argument = argv[i];
        if (!argument.starts_with("-") || argument == "-" || argument == "--") continue;
        char* number_end = nullptr;
        std::strtod(argv[i], &number_end);
        if (*number_end == '\0') continue;  // a negative number is a value
        const std::string name(argument.substr(0, argument.find('=')));
        if (name != "-h" && std::ranges::find(known, name) == known.end()) return name;
    }
    return std::nullopt;
}

// The one line a parse error becomes (without the program's prefix). The error's type, not its
// name: CLI11 names an ExtrasError after the app.
inline std::string describe_parse_error(const CLI::ParseError& failure, int argc, const char* const* argv,
                                        const CLI::App& app) {
    std::string message = failure.what();
    std::ranges::replace(message, '\n', ' ');
    if (dynamic_cast<const CLI::ExtrasError*>(&failure)) {
        if (const auto unknown = first_unknown_option(argc, argv, app)) {
            const auto near = nearest_option(*unknown, option_names(app));
            return "unknown option '" + *unknown + "'" + (near ? "; did you mean " + *near + "?" : "") +
                   " (--help lists the options)";
        }
        // Not an option: a value where none belongs ("--verbose yes", a flag given a value).
        return message + " (every value follows its option: --model M.pt)";
    }
    const std::string option = message.substr(0, message.find(':'));
    const bool names_option = option.starts_with("--") && option.find(' ') == std::string::npos;
    if (dynamic_cast<const CLI::ArgumentMismatch*>(&failure) && names_option)
        return option + " needs a value (" + option + " VALUE; --help says what it takes)";
    constexpr std::string_view unconverted = "Could not convert: ";  // "Could not convert: --min-sqnr = abc"
    if (dynamic_cast<const CLI::ConversionError*>(&failure) && message.starts_with(unconverted)) {
        const std::string rest = message.substr(unconverted.size());
        const std::size_t equals = rest.find(" = ");
        if (equals != std::string::npos)
            return rest.substr(0, equals) + " takes a number, not '" + rest.substr(equals + 3) + "'";
    }
    return message;
}

// A check for a whole number of at least `minimum`: its message names the bound, not the type's range.
inline CLI::Validator at_least(long long minimum) {
    return CLI::Validator(
        [minimum](std::string& text) -> std::string {
            std::size_t used = 0;
            long long value = 0;
            try {
                value = std::stoll(text, &used);
            } catch (const std::exception&) {
                used = 0;
            }
            if (used == 0 || used != text.size()) return "takes a whole number, not '" + text + "'";
            if (value < minimum) return "must be at least " + std::to_string(minimum) + ", not " + text;
            return {};
        },
        "");
}

// A check for a number above zero.
inline CLI::Validator above_zero() {
    return CLI::Validator(
        [](std::string& text) -> std::string {
            std::size_t used = 0;
            double value = 0;
            try {
                value = std::stod(text, &used);
            } catch (const std::exception&) {
                used = 0;
            }
            if (used == 0 || used != text.size()) return "takes a number, not '" + text + "'";
            if (!(value > 0)) return "must be above 0, not " + text;
            return {};
        },
        "");
}

}  // namespace versatil_quantize
