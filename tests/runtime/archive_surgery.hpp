// Surgery on real TorchScript archives for the file-check tests: find a record, overwrite a
// field in place. Standard library only, shared by the core and LibTorch-layer tests.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <string_view>

#include "versatil/libtorch/files/zip_layout.hpp"

namespace versatil::testing {

inline std::string read_bytes(const std::filesystem::path& path) {
    std::ifstream in(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

inline void write_bytes(const std::filesystem::path& path, const std::string& bytes) {
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

// Writes `value` little-endian over `width` bytes at `at`.
inline void overwrite(std::string& bytes, std::size_t at, std::uint64_t value, std::size_t width) {
    for (std::size_t i = 0; i < width; ++i, value >>= 8) bytes.at(at + i) = static_cast<char>(value & 0xff);
}

// The offset of the central-directory entry of the record whose name ends with `suffix`.
inline std::size_t central_entry(const std::string& archive, std::string_view suffix) {
    for (std::size_t at = archive.find("PK\x01\x02"); at != std::string::npos;
         at = archive.find("PK\x01\x02", at + 1)) {
        const auto name_length = static_cast<std::size_t>(static_cast<unsigned char>(archive.at(at + 28)) |
                                                          static_cast<unsigned char>(archive.at(at + 29)) << 8);
        if (std::string_view(archive).substr(at + 46, name_length).ends_with(suffix)) return at;
    }
    throw std::invalid_argument("no record ending in '" + std::string(suffix) + "'");
}

// CRC-32 (zip's polynomial), bit by bit: slow and obviously right, for test-sized records.
inline std::uint32_t crc32(std::string_view bytes) {
    std::uint32_t crc = 0xffffffff;
    for (const char byte : bytes) {
        crc ^= static_cast<unsigned char>(byte);
        for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ (0xedb88320U & (0U - (crc & 1U)));
    }
    return ~crc;
}

// The record whose name ends with `suffix`: where its bytes are, their sizes and CRC.
inline versatil::libtorch::zip::record find_record(const std::string& archive, std::string_view suffix) {
    const auto layout = versatil::libtorch::zip::read_layout(versatil::libtorch::zip::memory_bytes(archive));
    for (const auto& record : layout.records)
        if (record.name.ends_with(suffix)) return record;
    throw std::invalid_argument("no record ending in '" + std::string(suffix) + "': " + layout.problem);
}

// Declares `crc` for `record`, in the central directory and the local header.
inline void set_crc(std::string& archive, const versatil::libtorch::zip::record& record, std::uint32_t crc) {
    overwrite(archive, central_entry(archive, record.name) + 16, crc, 4);
    overwrite(archive, record.local_header_offset + 14, crc, 4);
}

// Makes the stored record whose name ends with `suffix` declare the CRC of its bytes: an edit
// to it is then a lie inside an intact archive.
inline void refresh_crc(std::string& archive, std::string_view suffix) {
    const versatil::libtorch::zip::record record = find_record(archive, suffix);
    set_crc(archive, record, crc32(std::string_view(archive).substr(record.data_offset, record.size)));
}

}  // namespace versatil::testing
