// The layout of a zip archive (a TorchScript file is one), checked before LibTorch reads it.
// LibTorch's reader trusts the sizes an archive declares: it allocates a record's declared
// size, then inflates into it. This check proves each record lies inside the file and declares
// a size its bytes can hold, so a corrupt size is an error here rather than a huge allocation
// there. Standard library only: the core's fuzzers and tests build it without LibTorch.
#pragma once

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <fstream>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace versatil::libtorch::zip {

// Where the bytes come from: an archive in memory (tests, fuzzers) or a file.
template <class Source>
concept ByteSource = requires(const Source& source, std::uint64_t offset, std::size_t length) {
    { source.size() } -> std::convertible_to<std::uint64_t>;
    // The `length` bytes at `offset`, or nullopt when they are not all inside the source.
    { source.read(offset, length) } -> std::same_as<std::optional<std::string>>;
};

class memory_bytes {
public:
    explicit memory_bytes(std::string_view bytes) : bytes_(bytes) {}
    std::uint64_t size() const { return bytes_.size(); }
    std::optional<std::string> read(std::uint64_t offset, std::size_t length) const {
        if (offset > bytes_.size() || length > bytes_.size() - offset) return std::nullopt;
        return std::string(bytes_.substr(offset, length));
    }

private:
    std::string_view bytes_;
};

class file_bytes {
public:
    explicit file_bytes(const std::string& path) : file_(path, std::ios::binary) {
        if (file_) {
            file_.seekg(0, std::ios::end);
            size_ = static_cast<std::uint64_t>(file_.tellg());
        }
    }
    bool is_open() const { return static_cast<bool>(file_); }
    std::uint64_t size() const { return size_; }
    std::optional<std::string> read(std::uint64_t offset, std::size_t length) const {
        if (offset > size_ || length > size_ - offset) return std::nullopt;
        std::string bytes(length, '\0');
        file_.clear();
        file_.seekg(static_cast<std::streamoff>(offset));
        file_.read(bytes.data(), static_cast<std::streamsize>(length));
        if (file_.gcount() != static_cast<std::streamsize>(length)) return std::nullopt;
        return bytes;
    }

private:
    mutable std::ifstream file_;
    std::uint64_t size_ = 0;
};

struct record {
    std::string name;
    std::uint16_t method = 0;  // 0 stored, 8 deflated
    std::uint64_t compressed_size = 0;
    std::uint64_t size = 0;  // uncompressed
    std::uint64_t data_offset = 0;
    std::uint64_t local_header_offset = 0;
    std::uint32_t crc32 = 0;  // of the uncompressed bytes, as the central directory declares it
};

// The records of an archive, or the first problem found (then `records` is incomplete).
struct layout {
    std::vector<record> records;
    std::string problem;
    bool ok() const { return problem.empty(); }
};

namespace detail {

// Little-endian fields of a byte string, as the zip format stores them.
inline std::uint64_t field(std::string_view bytes, std::size_t at, std::size_t width) {
    std::uint64_t value = 0;
    for (std::size_t i = width; i-- > 0;) value = (value << 8) | static_cast<unsigned char>(bytes[at + i]);
    return value;
}

constexpr std::uint32_t end_signature = 0x06054b50, zip64_end_signature = 0x06064b50,
                        zip64_locator_signature = 0x07064b50, central_signature = 0x02014b50,
                        local_signature = 0x04034b50;
constexpr std::size_t end_size = 22, zip64_locator_size = 20, zip64_end_size = 56, central_size = 46,
                      local_size = 30;
// Deflate emits at least one bit per 258 output bytes: no stream inflates more than 1032-fold.
constexpr std::uint64_t max_deflate_ratio = 1032;

struct directory {
    std::uint64_t offset = 0, size = 0, count = 0, end = 0;  // `end`: where the end records begin
};

template <ByteSource Source>
std::optional<directory> find_directory(const Source& source, std::string& problem) {
    const auto fail = [&problem](std::string text) -> std::optional<directory> {
        problem = std::move(text);
        return std::nullopt;
    };
    if (source.size() < end_size)
        return fail("it is " + std::to_string(source.size()) + " bytes long: too short to be a zip archive");
    // The end record sits at the end, followed by a comment of at most 65535 bytes.
    const std::uint64_t tail_size = std::min<std::uint64_t>(source.size(), end_size + 0xffff);
    const std::optional<std::string> tail = source.read(source.size() - tail_size, tail_size);
    std::optional<std::size_t> end_at;
    for (std::size_t at = tail ? tail->size() - end_size + 1 : 0; !end_at && at-- > 0;)
        if (field(*tail, at, 4) == end_signature && at + end_size + field(*tail, at + 20, 2) == tail->size())
            end_at = at;
    if (!end_at) return fail("it has no zip end record: not a zip archive, or truncated");
    const std::string_view end = std::string_view(*tail).substr(*end_at, end_size);
    directory found{field(end, 16, 4), field(end, 12, 4), field(end, 10, 2), source.size() - tail_size + *end_at};
    if (field(end, 4, 2) != 0 || field(end, 6, 2) != 0)
        return fail("it is a multi-disk zip archive");
    // A zip64 locator just before the end record points at the zip64 end record, whose fields
    // replace the 16- and 32-bit ones (PyTorch writes both).
    if (const auto locator = found.end >= zip64_locator_size
                                 ? source.read(found.end - zip64_locator_size, zip64_locator_size)
                                 : std::nullopt;
        locator && field(*locator, 0, 4) == zip64_locator_signature) {
        const std::uint64_t zip64_at = field(*locator, 8, 8), locator_at = found.end - zip64_locator_size;
        const auto zip64 = locator_at >= zip64_end_size && zip64_at <= locator_at - zip64_end_size
                               ? source.read(zip64_at, zip64_end_size)
                               : std::nullopt;
        if (!zip64 || field(*zip64, 0, 4) != zip64_end_signature)
            return fail("its zip64 end record is missing or corrupt");
        found = {field(*zip64, 48, 8), field(*zip64, 40, 8), field(*zip64, 32, 8), zip64_at};
    }
    if (found.offset > found.end || found.size > found.end - found.offset)
        return fail("its central directory (" + std::to_string(found.size) + " bytes at offset " +
                    std::to_string(found.offset) + ") lies outside the file");
    if (found.count > found.size / central_size)
        return fail("it declares " + std::to_string(found.count) + " records, more than its " +
                    std::to_string(found.size) + "-byte central directory can describe");
    return found;
}

// Sizes and offset saturated at 0xffffffff in a central entry are in its zip64 extra field,
// in this order, each present only when saturated.
inline bool read_zip64_extra(std::string_view extra, record& entry, std::uint64_t& header_offset) {
    for (std::size_t at = 0; at + 4 <= extra.size();) {
        const std::uint64_t id = field(extra, at, 2), length = field(extra, at + 2, 2);
        if (at + 4 + length > extra.size()) return false;
        if (id == 1) {
            std::size_t next = at + 4;
            for (std::uint64_t* value : {&entry.size, &entry.compressed_size, &header_offset}) {
                if (*value != 0xffffffff) continue;
                if (next + 8 > at + 4 + length) return false;
                *value = field(extra, next, 8);
                next += 8;
            }
            return true;
        }
        at += 4 + length;
    }
    return entry.size != 0xffffffff && entry.compressed_size != 0xffffffff && header_offset != 0xffffffff;
}

inline std::string describe(std::size_t index, const record& entry) {
    return "record " + std::to_string(index) + " ('" + entry.name + "')";
}

}  // namespace detail

// Every record: stored or deflated, not encrypted, its local header and data inside the file
// before the central directory, a stored size equal to the bytes it occupies, and a deflated
// size deflate can reach from its compressed bytes.
template <ByteSource Source>
layout read_layout(const Source& source) {
    using namespace detail;
    layout result;
    const auto fail = [&result](std::string problem) {
        result.problem = std::move(problem);
        return result;
    };
    const std::optional<directory> dir = find_directory(source, result.problem);
    if (!dir) return result;
    const std::optional<std::string> read = source.read(dir->offset, dir->size);
    if (!read) return fail("its central directory cannot be read");
    const std::string& central = *read;
    std::size_t at = 0;
    for (std::uint64_t index = 0; index < dir->count; ++index) {
        if (at + central_size > central.size() || field(central, at, 4) != central_signature)
            return fail("central directory entry " + std::to_string(index) + " is corrupt");
        const std::size_t name_length = field(central, at + 28, 2), extra_length = field(central, at + 30, 2),
                          comment_length = field(central, at + 32, 2);
        if (at + central_size + name_length + extra_length + comment_length > central.size())
            return fail("central directory entry " + std::to_string(index) + " runs past the directory");
        record entry{central.substr(at + central_size, name_length),
                     static_cast<std::uint16_t>(field(central, at + 10, 2)),
                     field(central, at + 20, 4),
                     field(central, at + 24, 4),
                     0,
                     0,
                     static_cast<std::uint32_t>(field(central, at + 16, 4))};
        std::uint64_t header_offset = field(central, at + 42, 4);
        const bool encrypted = field(central, at + 8, 2) & 1;
        const std::string_view extra = std::string_view(central).substr(at + central_size + name_length, extra_length);
        at += central_size + name_length + extra_length + comment_length;
        const std::string name = describe(index, entry);
        if (!read_zip64_extra(extra, entry, header_offset))
            return fail(name + " has a corrupt zip64 size field");
        if (encrypted) return fail(name + " is encrypted");
        if (entry.method != 0 && entry.method != 8)
            return fail(name + " uses compression method " + std::to_string(entry.method) +
                        "; only stored (0) and deflated (8) records can be read");
        if (entry.method == 0 && entry.size != entry.compressed_size)
            return fail(name + " is stored with " + std::to_string(entry.compressed_size) +
                        " bytes but declares " + std::to_string(entry.size));
        if (entry.method == 8 && (entry.size - std::min<std::uint64_t>(entry.size, 64)) / max_deflate_ratio >
                                     entry.compressed_size)
            return fail(name + " declares " + std::to_string(entry.size) + " bytes inflated from " +
                        std::to_string(entry.compressed_size) + ": more than deflate can produce");
        const std::optional<std::string> local =
            header_offset < dir->offset ? source.read(header_offset, local_size) : std::nullopt;
        if (!local || field(*local, 0, 4) != local_signature)
            return fail(name + " has no local header at offset " + std::to_string(header_offset));
        entry.local_header_offset = header_offset;
        entry.data_offset = header_offset + local_size + field(*local, 26, 2) + field(*local, 28, 2);
        if (entry.data_offset > dir->offset || entry.compressed_size > dir->offset - entry.data_offset)
            return fail(name + " (" + std::to_string(entry.compressed_size) + " bytes at offset " +
                        std::to_string(entry.data_offset) + ") runs past the end of the data");
        result.records.push_back(std::move(entry));
    }
    return result;
}

}  // namespace versatil::libtorch::zip
