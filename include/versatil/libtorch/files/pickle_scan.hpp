// A scan of a pickle's opcodes before LibTorch's unpickler runs them. The unpickler trusts two
// things a corrupt file controls: the lengths of strings and byte runs, and memo indices
// (LONG_BINPUT 0x656c6163 makes it grow its memo to 1.7 billion entries: a 26 GB request,
// found by the model-file fuzzer). The scan walks every opcode and its argument and names the
// first one that runs past the end or indexes a memo no pickler writes. It does not judge
// the objects built: the unpickler reports those. Standard library only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace versatil::libtorch::pickle {

namespace detail {

enum class argument {
    none,
    fixed,         // `width` bytes
    line,          // text up to a newline
    two_lines,     // GLOBAL and INST: module and name
    counted,       // a `width`-byte little-endian length, then that many bytes
    memo_put,      // a `width`-byte memo index (0 = as a text line)
    frame,         // an 8-byte frame length; the frame's opcodes follow inline
};

struct opcode {
    argument kind;
    std::size_t width = 0;
};

// Every opcode of pickle protocols 0 to 4 (the set LibTorch's PickleOpCode names).
constexpr std::optional<opcode> describe(unsigned char code) {
    switch (code) {
        case '(': case '.': case '0': case '1': case '2': case 'N': case 'Q': case 'R': case 'a': case 'b':
        case 'd': case '}': case 'e': case 'l': case ']': case 'o': case 's': case 't': case ')': case 'u':
        case 0x81: case 0x85: case 0x86: case 0x87: case 0x88: case 0x89: case 0x8f: case 0x90: case 0x91:
        case 0x92: case 0x93: case 0x94:
            return opcode{argument::none};
        case 'F': case 'I': case 'L': case 'P': case 'S': case 'V': case 'g':
            return opcode{argument::line};
        case 'c': case 'i': return opcode{argument::two_lines};
        case 'K': case 'h': case 0x82: case 0x80: return opcode{argument::fixed, 1};
        case 'M': case 0x83: return opcode{argument::fixed, 2};
        case 'J': case 'j': case 0x84: return opcode{argument::fixed, 4};
        case 'G': return opcode{argument::fixed, 8};
        case 0x8a: case 'U': case 'C': case 0x8c: return opcode{argument::counted, 1};
        case 0x8b: case 'T': case 'X': case 'B': return opcode{argument::counted, 4};
        case 0x8d: case 0x8e: return opcode{argument::counted, 8};
        case 'p': return opcode{argument::memo_put, 0};
        case 'q': return opcode{argument::memo_put, 1};
        case 'r': return opcode{argument::memo_put, 4};
        case 0x95: return opcode{argument::frame, 8};
        default: return std::nullopt;
    }
}

constexpr std::uint64_t little_endian(std::string_view bytes) {
    std::uint64_t value = 0;
    for (std::size_t i = bytes.size(); i-- > 0;) value = (value << 8) | static_cast<unsigned char>(bytes[i]);
    return value;
}

}  // namespace detail

// The first problem in `bytes` read as one pickle, or nullopt when every opcode up to STOP is
// known, its argument lies inside the pickle, and every memo index is below the pickle's size
// (a pickler numbers memo entries 0, 1, 2, ... and each PUT takes at least two bytes).
inline std::optional<std::string> find_problem(std::string_view bytes) {
    using namespace detail;
    std::size_t at = 0;
    while (at < bytes.size()) {
        const std::size_t start = at;
        const auto code = static_cast<unsigned char>(bytes[at++]);
        const std::string where = " at byte " + std::to_string(start);
        const std::optional<opcode> op = describe(code);
        if (!op) return "unknown pickle opcode " + std::to_string(code) + where;
        const std::size_t rest = bytes.size() - at;
        const auto line_end = [&](std::size_t from) { return bytes.find('\n', from); };
        switch (op->kind) {
            case argument::none:
                if (code == '.') return std::nullopt;
                break;
            case argument::fixed:
            case argument::frame:
                if (op->width > rest) return "pickle opcode" + where + " runs past the end";
                at += op->width;
                break;
            case argument::line:
            case argument::two_lines: {
                std::size_t end = line_end(at);
                if (end != std::string_view::npos && op->kind == argument::two_lines) end = line_end(end + 1);
                if (end == std::string_view::npos) return "pickle text argument" + where + " has no end of line";
                at = end + 1;
                break;
            }
            case argument::counted: {
                if (op->width > rest) return "pickle opcode" + where + " runs past the end";
                const std::uint64_t length = little_endian(bytes.substr(at, op->width));
                at += op->width;
                if (length > bytes.size() - at)
                    return "pickle string or bytes" + where + " declares " + std::to_string(length) + " bytes; " +
                           std::to_string(bytes.size() - at) + " remain";
                at += length;
                break;
            }
            case argument::memo_put: {
                std::uint64_t index = 0;
                if (op->width == 0) {
                    const std::size_t end = line_end(at);
                    if (end == std::string_view::npos || end == at)
                        return "pickle memo index" + where + " has no end of line";
                    for (; at < end; ++at) {
                        if (bytes[at] < '0' || bytes[at] > '9') return "pickle memo index" + where + " is not a number";
                        index = index * 10 + static_cast<std::uint64_t>(bytes[at] - '0');
                        if (index >= bytes.size()) break;
                    }
                    at = end + 1;
                } else {
                    if (op->width > rest) return "pickle opcode" + where + " runs past the end";
                    index = little_endian(bytes.substr(at, op->width));
                    at += op->width;
                }
                if (index >= bytes.size())
                    return "pickle memo index " + std::to_string(index) + where + " is beyond any a " +
                           std::to_string(bytes.size()) + "-byte pickle can use";
                break;
            }
        }
    }
    return "the pickle ends without a STOP opcode";
}

}  // namespace versatil::libtorch::pickle
