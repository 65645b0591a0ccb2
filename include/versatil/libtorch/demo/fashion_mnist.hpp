// Fashion-MNIST from the gzip IDX files of Debian's dataset-fashion-mnist package, as tensors
// ready for the models of models.hpp. Training, calibration and accuracy tests need real images.
// Random tensors calibrate observers to ranges that no real input has, and they tell nothing
// about accuracy.
//
// The IDX format: a big-endian header (magic 0x00000803 for uint8 images with the count, the rows
// and the columns; 0x00000801 for uint8 labels with the count), then the raw bytes. Every header
// field and the length of the data are checked. A missing, truncated or corrupt file raises
// `error` with kind `invalid_data_file` and names the file.
#pragma once

#include <ATen/ATen.h>

#include <zlib.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include "versatil/libtorch/error.hpp"

namespace versatil::libtorch {

inline constexpr const char* default_fashion_mnist_directory = "/usr/share/datasets/fashion-mnist";
// Per-pixel statistics of the Fashion-MNIST training images scaled to [0, 1].
inline constexpr double fashion_mnist_mean = 0.2860;
inline constexpr double fashion_mnist_std = 0.3530;

enum class fashion_mnist_split { train, test };

struct dataset {
    at::Tensor images;  // float [N, 1, 28, 28], normalised with fashion_mnist_mean / fashion_mnist_std
    at::Tensor labels;  // int64 [N], class indices 0..9
};

namespace detail {

inline constexpr uint32_t idx_images_magic = 0x00000803;
inline constexpr uint32_t idx_labels_magic = 0x00000801;
inline constexpr int64_t fashion_mnist_side = 28;

struct gz_file_closer {
    void operator()(gzFile file) const noexcept { gzclose(file); }
};
using gz_file = std::unique_ptr<gzFile_s, gz_file_closer>;

[[noreturn]] inline void invalid_data(const std::string& path, const std::string& problem) {
    throw error(error_kind::invalid_data_file, "Fashion-MNIST file '" + path + "': " + problem);
}

// A reader of one gzip (or plain) IDX file that reports every short read as an invalid file.
class idx_reader {
public:
    explicit idx_reader(std::string path) : path_(std::move(path)) {
        if (!std::filesystem::is_regular_file(path_))
            invalid_data(path_,
                         "not found (install Debian's dataset-fashion-mnist or pass the directory that holds it)");
        file_.reset(gzopen(path_.c_str(), "rb"));
        if (!file_) invalid_data(path_, "cannot be opened");
    }

    void read(void* destination, int64_t bytes, const char* what) {
        auto* cursor = static_cast<unsigned char*>(destination);
        while (bytes > 0) {
            // gzread takes an unsigned int count; read in chunks well below its limit.
            const auto chunk = static_cast<unsigned>(std::min<int64_t>(bytes, int64_t{1} << 30));
            const int got = gzread(file_.get(), cursor, chunk);
            if (got < 0) {
                int code = 0;
                invalid_data(path_, std::string("corrupt gzip data while reading the ") + what + " (" +
                                        gzerror(file_.get(), &code) + ")");
            }
            if (got == 0) invalid_data(path_, std::string("truncated: the file ends inside the ") + what);
            cursor += got;
            bytes -= got;
        }
    }

    // After the last expected byte: reading on makes zlib check the gzip trailer (CRC and length),
    // and any byte left over means the header's sizes do not describe the file.
    void expect_end() {
        unsigned char extra = 0;
        const int got = gzread(file_.get(), &extra, 1);
        if (got < 0) {
            int code = 0;
            invalid_data(path_, std::string("corrupt gzip data (") + gzerror(file_.get(), &code) + ")");
        }
        if (got > 0) invalid_data(path_, "has data after the examples its header announces");
    }

    uint32_t read_big_endian_u32(const char* what) {
        std::array<unsigned char, 4> bytes{};
        read(bytes.data(), 4, what);
        return (uint32_t{bytes[0]} << 24U) | (uint32_t{bytes[1]} << 16U) | (uint32_t{bytes[2]} << 8U) |
               uint32_t{bytes[3]};
    }

    const std::string& path() const noexcept { return path_; }

private:
    std::string path_;
    gz_file file_;
};

inline std::string hex(uint32_t value) {
    char text[11];
    std::snprintf(text, sizeof text, "0x%08x", value);
    return text;
}

inline void expect_magic(idx_reader& reader, uint32_t expected, const char* kind) {
    const uint32_t magic = reader.read_big_endian_u32("header");
    if (magic != expected)
        invalid_data(reader.path(), std::string("magic number ") + hex(magic) + " is not the IDX " + kind + " magic " +
                                        hex(expected));
}

}  // namespace detail

inline std::string fashion_mnist_file(fashion_mnist_split split, bool images, const std::string& directory) {
    const char* prefix = split == fashion_mnist_split::train ? "train" : "t10k";
    return (std::filesystem::path(directory) /
            (std::string(prefix) + (images ? "-images-idx3-ubyte.gz" : "-labels-idx1-ubyte.gz")))
        .string();
}

// True when all four Fashion-MNIST files are present in `directory` (their content is checked only
// when loading).
inline bool fashion_mnist_available(const std::string& directory = default_fashion_mnist_directory) {
    for (const auto split : {fashion_mnist_split::train, fashion_mnist_split::test})
        for (const bool images : {true, false})
            if (!std::filesystem::is_regular_file(fashion_mnist_file(split, images, directory))) return false;
    return true;
}

// The first `limit` examples of `split` (all of them when limit < 0 or larger than the split), in
// file order. Images are float [N, 1, 28, 28], (pixel / 255 - 0.2860) / 0.3530; labels int64 [N].
// Headers are always checked; the gzip checksum and the exact length only when the whole split is
// read (a limit reads just the first examples, which is what makes it fast).
inline dataset load_fashion_mnist(fashion_mnist_split split, int64_t limit = -1,
                                  const std::string& directory = default_fashion_mnist_directory) {
    using namespace detail;
    idx_reader image_file(fashion_mnist_file(split, true, directory));
    idx_reader label_file(fashion_mnist_file(split, false, directory));

    expect_magic(image_file, idx_images_magic, "image");
    const int64_t image_count = image_file.read_big_endian_u32("header");
    const int64_t rows = image_file.read_big_endian_u32("header");
    const int64_t columns = image_file.read_big_endian_u32("header");
    if (rows != fashion_mnist_side || columns != fashion_mnist_side)
        invalid_data(image_file.path(),
                     "images are " + std::to_string(rows) + "x" + std::to_string(columns) + ", expected 28x28");

    expect_magic(label_file, idx_labels_magic, "label");
    const int64_t label_count = label_file.read_big_endian_u32("header");
    if (label_count != image_count)
        invalid_data(label_file.path(), std::to_string(label_count) + " labels for " + std::to_string(image_count) +
                                            " images in '" + image_file.path() + "'");
    const int64_t expected_count = split == fashion_mnist_split::train ? 60000 : 10000;
    if (image_count != expected_count)
        invalid_data(image_file.path(), std::to_string(image_count) + " images, the Fashion-MNIST " +
                                            (split == fashion_mnist_split::train ? "training" : "test") +
                                            " split has " + std::to_string(expected_count));

    const int64_t count = limit < 0 ? image_count : std::min(limit, image_count);
    at::Tensor pixels = at::empty({count, 1, rows, columns}, at::kByte);
    at::Tensor labels = at::empty({count}, at::kByte);
    image_file.read(pixels.data_ptr<uint8_t>(), pixels.numel(), "image data");
    label_file.read(labels.data_ptr<uint8_t>(), labels.numel(), "label data");
    if (count == image_count) {
        image_file.expect_end();
        label_file.expect_end();
    }
    if (count > 0 && labels.max().item<int64_t>() > 9)
        invalid_data(label_file.path(),
                     "label " + std::to_string(labels.max().item<int64_t>()) + " is not a class 0..9");

    at::Tensor images = (pixels.to(at::kFloat).div_(255.0).sub_(fashion_mnist_mean)).div_(fashion_mnist_std);
    return {images, labels.to(at::kLong)};
}

}  // namespace versatil::libtorch
