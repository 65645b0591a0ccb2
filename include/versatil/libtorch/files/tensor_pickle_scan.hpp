// What a torch.save data file's pickle may do, checked before LibTorch's unpickler runs it. A
// pickle is a program: its globals name the functions it calls. A data file needs only the ones
// torch.save writes for tensors (the tensor rebuilder, the storage types, OrderedDict, and C++'s
// torch::pickle_save's type tag), so every other global (a model's classes, os.system) is refused,
// as are the opcodes that call without naming a global (INST, OBJ, NEWOBJ, the extension registry,
// STACK_GLOBAL). The scan also follows the stack and the memo: LibTorch's unpickler pops without
// looking, so an opcode that pops an empty stack, or fetches a memo entry never stored, is refused
// here. Run it after pickle_scan.hpp's find_problem, which proves every argument lies inside the
// pickle.
// Standard library only.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "versatil/libtorch/files/pickle_scan.hpp"

namespace versatil::libtorch::pickle {

namespace detail {

// The storage classes of module torch that torch.save names for a tensor's elements.
inline constexpr std::array<std::string_view, 10> storage_classes{
    "FloatStorage", "DoubleStorage", "HalfStorage", "BFloat16Storage", "LongStorage",
    "IntStorage",   "ShortStorage",  "CharStorage", "ByteStorage",     "BoolStorage"};

// The globals torch.save writes for a dict (or list) of tensors, and the one LibTorch's
// torch::pickle_save adds in C++: restore_type_tag(dict, "Dict[str, Tensor]"), which names the
// dict's element types (saved_tensors.hpp's interpreter checks its arguments and keeps the dict).
inline bool is_tensor_global(std::string_view module, std::string_view name) {
    if (module == "torch._utils") return name == "_rebuild_tensor_v2";
    if (module == "collections") return name == "OrderedDict";
    if (module == "torch.jit._pickle") return name == "restore_type_tag";
    return module == "torch" && std::ranges::find(storage_classes, name) != storage_classes.end();
}

// The stack as the scan follows it: values and MARKs, nothing more.
class stack_shape {
public:
    void push() { marks_.push_back(false); }
    void mark() { marks_.push_back(true); }
    // Pops `count` values (no MARK among them); false when the stack has fewer.
    bool pop(std::size_t count) {
        for (; count > 0; --count) {
            if (marks_.empty() || marks_.back()) return false;
            marks_.pop_back();
        }
        return true;
    }
    // Pops the values down to the topmost MARK and the MARK; false when there is none.
    bool pop_to_mark() {
        while (!marks_.empty() && !marks_.back()) marks_.pop_back();
        if (marks_.empty()) return false;
        marks_.pop_back();
        return true;
    }
    bool top_is_value() const { return !marks_.empty() && !marks_.back(); }
    bool holds_one_value() const { return marks_.size() == 1 && !marks_.front(); }

private:
    std::vector<bool> marks_;  // true: a MARK
};

}  // namespace detail

// The first thing in `bytes` (a pickle find_problem accepted) that a data file of tensors has
// no use for, or nullopt when it only builds tensors, strings, numbers and containers.
inline std::optional<std::string> find_non_tensor_content(std::string_view bytes) {
    using namespace detail;
    stack_shape stack;
    std::unordered_set<std::uint64_t> memo;
    std::uint64_t next_memo = 0;  // MEMOIZE's index
    std::size_t at = 0;
    while (at < bytes.size()) {
        const std::size_t start = at;
        const auto code = static_cast<unsigned char>(bytes[at++]);
        const std::string where = " at byte " + std::to_string(start);
        const std::optional<opcode> op = describe(code);
        if (!op) return "unknown pickle opcode " + std::to_string(code) + where;
        // The argument: its bytes after the opcode (a length prefix included).
        std::string_view operand;
        std::uint64_t number = 0;
        if (op->kind == argument::fixed || op->kind == argument::frame) {
            operand = bytes.substr(at, op->width);
            number = little_endian(operand);
        } else if (op->kind == argument::counted) {
            const std::uint64_t length = little_endian(bytes.substr(at, op->width));
            operand = bytes.substr(at, op->width + length);
        } else if (op->kind == argument::line || op->kind == argument::two_lines) {
            std::size_t end = bytes.find('\n', at);
            if (op->kind == argument::two_lines && end != std::string_view::npos) end = bytes.find('\n', end + 1);
            if (end == std::string_view::npos) return "pickle text argument" + where + " has no end of line";
            operand = bytes.substr(at, end + 1 - at);
        } else if (op->kind == argument::memo_put && op->width > 0) {
            operand = bytes.substr(at, op->width);
            number = little_endian(operand);
        }
        at += operand.size();
        const auto underflow = [&] { return "pickle opcode " + std::to_string(code) + where + " pops an empty stack"; };
        switch (code) {
            case 0x80: case 0x95: break;  // PROTO, FRAME
            case '}': case ']': case ')': case 'N': case 0x88: case 0x89:  // empty containers, None, booleans
            case 'K': case 'M': case 'J': case 0x8a: case 'G':             // integers, a float
            case 'X': case 0x8c: case 0x8d:                                // strings
                stack.push();
                break;
            case '(': stack.mark(); break;
            case 't': case 'l':  // TUPLE, LIST: the values above the MARK become one
                if (!stack.pop_to_mark()) return "pickle opcode" + where + " has no MARK";
                stack.push();
                break;
            case 'e': case 'u':  // APPENDS, SETITEMS into the container below the MARK
                if (!stack.pop_to_mark()) return "pickle opcode" + where + " has no MARK";
                if (!stack.top_is_value()) return underflow();
                break;
            case 0x85: case 0x86: case 0x87:  // TUPLE1..3
                if (!stack.pop(code - 0x84U)) return underflow();
                stack.push();
                break;
            case 'a':  // APPEND
                if (!stack.pop(1) || !stack.top_is_value()) return underflow();
                break;
            case 's':  // SETITEM
                if (!stack.pop(2) || !stack.top_is_value()) return underflow();
                break;
            case 'R':  // REDUCE: a global applied to a tuple
                if (!stack.pop(2)) return underflow();
                stack.push();
                break;
            case 'Q':  // BINPERSID: a storage from its record
                if (!stack.pop(1)) return underflow();
                stack.push();
                break;
            case 'q': case 'r':  // BINPUT, LONG_BINPUT
                if (!stack.top_is_value()) return underflow();
                memo.insert(number);
                break;
            case 0x94:  // MEMOIZE
                if (!stack.top_is_value()) return underflow();
                memo.insert(next_memo++);
                break;
            case 'h': case 'j':  // BINGET, LONG_BINGET
                if (!memo.contains(number))
                    return "pickle memo entry " + std::to_string(number) + where + " is read before it is stored";
                stack.push();
                break;
            case 'c': {  // GLOBAL: "module\nname\n"
                const std::size_t split = operand.find('\n');
                const std::string_view module = operand.substr(0, split);
                const std::string_view name = operand.substr(split + 1, operand.size() - split - 2);
                if (!is_tensor_global(module, name))
                    return "it calls " + std::string(module) + "." + std::string(name) +
                           ", which a file of tensors never needs (only tensors, strings, numbers, lists and dicts "
                           "are read)" +
                           (module == "__main__" || module.starts_with("torch.nn")
                                ? "; it looks like a model saved with torch.save, and a data file holds tensors"
                                : "");
                stack.push();
                break;
            }
            case '.':
                if (!stack.holds_one_value()) return "the pickle stops with a stack other than one value" + where;
                return std::nullopt;
            case 0x93:
                return "pickle opcode STACK_GLOBAL" + where +
                       " is not read in data files: save with torch.save's default pickle protocol";
            default:
                return "pickle opcode " + std::to_string(code) + where +
                       " does more than build tensors, strings, numbers, lists and dicts";
        }
    }
    return "the pickle ends without a STOP opcode";
}

}  // namespace versatil::libtorch::pickle
