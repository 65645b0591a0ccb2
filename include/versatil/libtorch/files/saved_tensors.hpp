// Reading what torch.save writes for a dict of tensors ({"calib": x, "test": y}), without Python;
// C++'s torch::pickle_save writes the same format for a c10::Dict. The file is untrusted: its
// archive passes check_archive first (layout, CRC, pickle structure), its pickle then
// tensor_pickle_scan.hpp's allow-list (only the globals torch.save writes for tensors, a stack that
// never underflows, no memo entry read before it is stored). Only then is it run, here, by a small
// interpreter of just that subset: LibTorch 1.13's own unpickler knows no APPEND or SETITEM, so it
// cannot read torch.save({"calib": x}), whose one entry Python writes with SETITEM. Every tensor
// built must fit its storage, and every storage the bytes of its record.
#pragma once

#include <caffe2/serialize/inline_container.h>
#include <torch/script.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "versatil/libtorch/error.hpp"
#include "versatil/libtorch/files/file_check.hpp"
#include "versatil/libtorch/files/tensor_pickle_scan.hpp"

namespace versatil::libtorch {

// A file's values by name, in the file's order.
using named_values = std::vector<std::pair<std::string, c10::IValue>>;

// What a value read from a pickle was in Python, for messages: "a list", "an int".
inline std::string python_kind(const c10::IValue& value) {
    if (value.isTensor()) return "a tensor";
    if (value.isGenericDict()) return "a dict";
    if (value.isList()) return "a list";
    if (value.isTuple()) return "a tuple";
    if (value.isString()) return "a string";
    if (value.isBool()) return "a bool";
    if (value.isInt()) return "an int";
    if (value.isDouble()) return "a float";
    if (value.isNone()) return "None";
    return "a " + value.tagKind();
}

namespace detail {

// A stack entry of the pickle interpreter: a value, a MARK, or a global it names.
struct pickled {
    c10::IValue value{};
    std::string global{};  // "module.name" for a global
    bool mark = false;
};

// The element type of each of pickle::detail::storage_classes, in its order.
inline constexpr std::array<at::ScalarType, pickle::detail::storage_classes.size()> storage_element_types{
    at::kFloat, at::kDouble, at::kHalf, at::kBFloat16, at::kLong,
    at::kInt,   at::kShort,  at::kChar, at::kByte,     at::kBool};

// The element type a torch.save storage global names ("torch.FloatStorage").
inline std::optional<at::ScalarType> storage_scalar_type(std::string_view global) {
    const auto& classes = pickle::detail::storage_classes;
    const auto found = std::ranges::find(classes, global.starts_with("torch.") ? global.substr(6) : "");
    if (found == classes.end()) return std::nullopt;
    return storage_element_types[static_cast<std::size_t>(found - classes.begin())];
}

// Runs a pickle find_non_tensor_content accepted, reading storages from `reader`'s data/
// records. Throws std::runtime_error naming what does not fit torch.save's layout.
class tensor_unpickler {
public:
    tensor_unpickler(std::string_view bytes, caffe2::serialize::PyTorchStreamReader& reader)
        : bytes_(bytes), reader_(reader) {}

    c10::IValue run() {
        while (at_ < bytes_.size()) {
            const auto code = static_cast<unsigned char>(bytes_[at_++]);
            switch (code) {
                case 0x80: at_ += 1; break;  // PROTO
                case 0x95: at_ += 8; break;  // FRAME: a hint for buffered readers
                case '}': push(c10::impl::GenericDict(c10::StringType::get(), c10::AnyType::get())); break;
                case ']': push(c10::impl::GenericList(c10::AnyType::get())); break;
                case ')': push(c10::ivalue::Tuple::create(std::vector<c10::IValue>{})); break;
                case 'N': push(c10::IValue()); break;
                case 0x88: push(true); break;
                case 0x89: push(false); break;
                case 'K': push(static_cast<std::int64_t>(unsigned_bytes(1))); break;
                case 'M': push(static_cast<std::int64_t>(unsigned_bytes(2))); break;
                case 'J': push(static_cast<std::int64_t>(static_cast<std::int32_t>(unsigned_bytes(4)))); break;
                case 0x8a: push(long1()); break;
                case 'G': push(big_endian_double()); break;
                case 'X': push(text(4)); break;
                case 0x8c: push(text(1)); break;
                case 0x8d: push(text(8)); break;
                case '(': stack_.push_back({.mark = true}); break;
                case 't': push(c10::ivalue::Tuple::create(values_to_mark())); break;
                case 'l': push(list_of(values_to_mark())); break;
                case 0x85: case 0x86: case 0x87: push(c10::ivalue::Tuple::create(pop_values(code - 0x84U))); break;
                case 'e': append(values_to_mark()); break;
                case 'a': append(pop_values(1)); break;
                case 'u': set_items(values_to_mark()); break;
                case 's': set_items(pop_values(2)); break;
                case 'q': memo_[unsigned_bytes(1)] = top(); break;
                case 'r': memo_[unsigned_bytes(4)] = top(); break;
                case 0x94: memo_[next_memo_++] = top(); break;
                case 'h': stack_.push_back(memo_.at(unsigned_bytes(1))); break;
                case 'j': stack_.push_back(memo_.at(unsigned_bytes(4))); break;
                case 'c': stack_.push_back({.global = global_name()}); break;
                case 'Q': push(storage(pop_values(1).front())); break;
                case 'R': reduce(); break;
                case '.': return pop_values(1).front();
                default: fail("opcode " + std::to_string(code) + " is not read in data files");
            }
        }
        fail("the pickle ends without a STOP opcode");
    }

private:
    [[noreturn]] static void fail(const std::string& problem) { throw std::runtime_error(problem); }

    void push(c10::IValue value) { stack_.push_back({.value = std::move(value)}); }
    const pickled& top() const {
        if (stack_.empty()) fail("a memo entry is stored from an empty stack");
        return stack_.back();
    }
    std::uint64_t unsigned_bytes(std::size_t width) {
        if (width > bytes_.size() - at_) fail("an opcode runs past the end of the pickle");
        const std::uint64_t value = pickle::detail::little_endian(bytes_.substr(at_, width));
        at_ += width;
        return value;
    }
    std::int64_t long1() {
        const std::size_t width = unsigned_bytes(1);
        if (width > 8) fail("an integer of " + std::to_string(width) + " bytes does not fit 64 bits");
        std::uint64_t value = unsigned_bytes(width);
        if (width > 0 && width < 8 && (value >> (8 * width - 1)) != 0) value |= ~std::uint64_t{0} << (8 * width);
        return static_cast<std::int64_t>(value);
    }
    double big_endian_double() {
        std::uint64_t bits = 0;
        for (int i = 0; i < 8; ++i) bits = (bits << 8) | unsigned_bytes(1);
        double value = 0;
        std::memcpy(&value, &bits, sizeof value);
        return value;
    }
    std::string text(std::size_t width) {
        const std::uint64_t length = unsigned_bytes(width);
        if (length > bytes_.size() - at_) fail("a string runs past the end of the pickle");
        std::string value(bytes_.substr(at_, length));
        at_ += length;
        return value;
    }
    std::string global_name() {
        const std::size_t module_end = bytes_.find('\n', at_);
        const std::size_t name_end =
            module_end == std::string_view::npos ? module_end : bytes_.find('\n', module_end + 1);
        if (name_end == std::string_view::npos) fail("a global has no end of line");
        std::string name = std::string(bytes_.substr(at_, module_end - at_)) + "." +
                           std::string(bytes_.substr(module_end + 1, name_end - module_end - 1));
        at_ = name_end + 1;
        return name;
    }

    // The `count` values on top of the stack, popped, in stack order.
    std::vector<c10::IValue> pop_values(std::size_t count) {
        if (count > stack_.size()) fail("an opcode pops an empty stack");
        std::vector<c10::IValue> values;
        for (auto entry = stack_.end() - static_cast<std::ptrdiff_t>(count); entry != stack_.end(); ++entry) {
            if (entry->mark) fail("an opcode pops a MARK as a value");
            // A global taken as a value (a storage's type in its persistent id) is its name.
            values.push_back(entry->global.empty() ? std::move(entry->value) : c10::IValue(entry->global));
        }
        stack_.resize(stack_.size() - count);
        return values;
    }
    std::vector<c10::IValue> values_to_mark() {
        std::size_t count = 0;
        while (count < stack_.size() && !stack_[stack_.size() - 1 - count].mark) ++count;
        if (count == stack_.size()) fail("an opcode has no MARK");
        std::vector<c10::IValue> values = pop_values(count);
        stack_.pop_back();  // the MARK
        return values;
    }
    static c10::IValue list_of(const std::vector<c10::IValue>& values) {
        c10::impl::GenericList list(c10::AnyType::get());
        for (const c10::IValue& value : values) list.push_back(value);
        return list;
    }
    c10::IValue& container_below() {
        if (stack_.empty() || stack_.back().mark || !stack_.back().global.empty())
            fail("items are added to no list or dict");
        return stack_.back().value;
    }
    void append(const std::vector<c10::IValue>& values) {
        c10::IValue& list = container_below();
        if (!list.isList()) fail("items are appended to " + python_kind(list) + ", not a list");
        for (const c10::IValue& value : values) list.toList().push_back(value);
    }
    void set_items(const std::vector<c10::IValue>& keys_and_values) {
        c10::IValue& dict = container_below();
        if (!dict.isGenericDict()) fail("items are set in " + python_kind(dict) + ", not a dict");
        if (keys_and_values.size() % 2 != 0) fail("a dict is given a key without a value");
        for (std::size_t i = 0; i < keys_and_values.size(); i += 2) {
            if (!keys_and_values[i].isString())
                fail("a dict key is " + python_kind(keys_and_values[i]) + ": name each tensor with a string");
            dict.toGenericDict().insert_or_assign(keys_and_values[i], keys_and_values[i + 1]);
        }
    }

    // BINPERSID: ('storage', torch.<Type>Storage, key, location, element count) names record data/<key>.
    c10::IValue storage(const c10::IValue& id) {
        if (!id.isTuple() || id.toTupleRef().elements().size() != 5) fail("a persistent id is not a storage's");
        // A copy: GCC's -Warray-bounds misreads indexing a tuple's elements past its inline three.
        const std::vector<c10::IValue> fields = id.toTupleRef().elements().vec();
        if (!fields[0].isString() || fields[0].toStringRef() != "storage" || !fields[1].isString() ||
            !fields[2].isString() || !fields[4].isInt() || fields[4].toInt() < 0)
            fail("a persistent id is not a storage's");
        const std::optional<at::ScalarType> type = storage_scalar_type(fields[1].toStringRef());
        if (!type) fail("storage type " + fields[1].toStringRef() + " is not one a tensor is read from");
        const std::string& key = fields[2].toStringRef();
        if (const auto known = storages_.find(key); known != storages_.end()) return known->second;
        auto [data, size] = reader_.getRecord("data/" + key);
        std::uint64_t declared = 0;
        if (__builtin_mul_overflow(static_cast<std::uint64_t>(fields[4].toInt()), c10::elementSize(*type), &declared) ||
            declared > size)
            fail("storage '" + key + "' declares " + std::to_string(fields[4].toInt()) +
                 " elements; its record holds " + std::to_string(size) + " bytes");
        c10::Storage storage(c10::Storage::use_byte_size_t(), declared, std::move(data), nullptr, false);
        // The element type travels with the storage to the tensor built on it.
        const c10::IValue value(c10::ivalue::Tuple::create({c10::IValue(std::move(storage)),
                                                            c10::IValue(static_cast<std::int64_t>(*type))}));
        storages_.emplace(key, value);
        return value;
    }

    // REDUCE: OrderedDict() (a tensor's empty hooks), _rebuild_tensor_v2(storage, offset, size, stride, ...),
    // or restore_type_tag(dict, "Dict[str, ...]"), which C++'s torch::pickle_save wraps a dict in to
    // name its element types: the dict is kept as it is (the caller checks its values), and the type
    // string is only compared, never parsed.
    void reduce() {
        std::vector<c10::IValue> arguments = pop_values(1);
        if (stack_.empty() || stack_.back().global.empty()) fail("REDUCE calls something that is not a global");
        const std::string callee = std::move(stack_.back().global);
        stack_.pop_back();
        if (!arguments.front().isTuple()) fail("REDUCE's arguments are not a tuple");
        const auto& args = arguments.front().toTupleRef().elements();
        if (callee == "collections.OrderedDict" && args.empty())
            return push(c10::impl::GenericDict(c10::StringType::get(), c10::AnyType::get()));
        if (callee == "torch.jit._pickle.restore_type_tag") {
            if (args.size() != 2 || !args[0].isGenericDict() || !args[1].isString() ||
                !args[1].toStringRef().starts_with("Dict[str, "))
                fail("REDUCE calls " + callee + " with arguments other than a dict and its type, Dict[str, ...]");
            return push(args[0]);
        }
        if (callee != "torch._utils._rebuild_tensor_v2" || args.size() < 4 || !args[0].isTuple() || !args[1].isInt())
            fail("REDUCE calls " + callee + " with arguments torch.save never writes");
        // A storage as storage() above returns it: the storage and its element type.
        const auto& storage = args[0].toTupleRef().elements();
        if (storage.size() != 2 || !storage[0].isStorage() || !storage[1].isInt() ||
            std::ranges::find(storage_element_types, static_cast<at::ScalarType>(storage[1].toInt())) ==
                storage_element_types.end())
            fail("a tensor is built on something that is not a storage");
        const auto dimensions = [&](const c10::IValue& value) {
            if (!value.isTuple()) fail("a tensor's sizes or strides are not a tuple");
            std::vector<std::int64_t> numbers;
            for (const c10::IValue& number : value.toTupleRef().elements()) {
                if (!number.isInt() || number.toInt() < 0) fail("a tensor's size or stride is not a count");
                numbers.push_back(number.toInt());
            }
            return numbers;
        };
        const std::vector<std::int64_t> sizes = dimensions(args[2]), strides = dimensions(args[3]);
        if (sizes.size() != strides.size() || args[1].toInt() < 0) fail("a tensor's sizes and strides disagree");
        const auto type = static_cast<at::ScalarType>(storage.at(1).toInt());
        at::Tensor tensor = at::empty({0}, at::TensorOptions().dtype(type));
        // set_ refuses a view reaching past its storage; find_past_storage checks again after.
        tensor.set_(storage.at(0).toStorage(), args[1].toInt(), sizes, strides);
        push(tensor);
    }

    std::string_view bytes_;
    caffe2::serialize::PyTorchStreamReader& reader_;
    std::size_t at_ = 0;
    std::vector<pickled> stack_;
    std::unordered_map<std::uint64_t, pickled> memo_;
    std::uint64_t next_memo_ = 0;
    std::unordered_map<std::string, c10::IValue> storages_;
};

}  // namespace detail

// The dict torch.save wrote to `path` (an archive check_archive accepted and
// is_torch_save_archive recognised), as named values in the file's order: tensors, or
// whatever else the scan allows (the caller says what it takes).
inline named_values load_saved_dict(const std::filesystem::path& path, error_kind kind, std::string_view what) {
    const auto fail = [&](const std::string& problem) {
        throw error(kind, std::string(what) + " '" + path.string() + "' (a torch.save archive) " + problem);
    };
    c10::IValue value;
    try {
        caffe2::serialize::PyTorchStreamReader reader(path.string());
        const auto [pickle, size] = reader.getRecord("data.pkl");
        const std::string_view bytes(static_cast<const char*>(pickle.get()), size);
        if (const std::optional<std::string> problem = pickle::find_non_tensor_content(bytes))
            fail("is refused before it is read: " + *problem);
        value = detail::tensor_unpickler(bytes, reader).run();
    } catch (const error&) {
        throw;
    } catch (const std::exception& failure) {
        fail("cannot be read: " + one_line(failure));
    }
    if (!value.isGenericDict())
        fail("holds " + python_kind(value) + ", not a dict: save a dict of tensors, torch.save({\"calib\": x}, path)");
    named_values entries;
    for (const auto& entry : value.toGenericDict()) {
        std::string name = entry.key().toStringRef();
        if (auto problem = detail::find_past_storage(entry.value(), name)) fail("is corrupt: " + *problem);
        entries.emplace_back(std::move(name), entry.value());
    }
    return entries;
}

}  // namespace versatil::libtorch
