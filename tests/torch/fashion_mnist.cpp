// The Fashion-MNIST loader against Debian's dataset-fashion-mnist files, and against damaged
// copies of them: each kind of damage must give an invalid_data_file error.
#include "doctest_with_torch.hpp"
#include "torch_test_helpers.hpp"
#include <zlib.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <string>
#include <unistd.h>
#include <vector>

#include "versatil/libtorch/demo/fashion_mnist.hpp"


namespace vt = versatil::libtorch;
using vt::fashion_mnist_split;

namespace {


std::vector<unsigned char> gunzip(const std::string& path) {
    gzFile file = gzopen(path.c_str(), "rb");
    REQUIRE(file != nullptr);
    std::vector<unsigned char> bytes;
    std::vector<unsigned char> chunk(1 << 16);
    for (int got = 0; (got = gzread(file, chunk.data(), static_cast<unsigned>(chunk.size()))) > 0;)
        bytes.insert(bytes.end(), chunk.begin(), chunk.begin() + got);
    gzclose(file);
    return bytes;
}

void gzip(const std::string& path, const std::vector<unsigned char>& bytes) {
    gzFile file = gzopen(path.c_str(), "wb");
    REQUIRE(file != nullptr);
    REQUIRE(gzwrite(file, bytes.data(), static_cast<unsigned>(bytes.size())) == static_cast<int>(bytes.size()));
    REQUIRE(gzclose(file) == Z_OK);
}

// A copy of the test split in `directory` whose image file has been changed by `damage` (applied to
// the decompressed bytes) and written back gzip-compressed.
void write_damaged_test_split(const std::filesystem::path& directory,
                              const std::function<void(std::vector<unsigned char>&)>& damage) {
    const auto images = vt::fashion_mnist_file(fashion_mnist_split::test, true, vt::default_fashion_mnist_directory);
    const auto labels = vt::fashion_mnist_file(fashion_mnist_split::test, false, vt::default_fashion_mnist_directory);
    std::filesystem::copy_file(labels, directory / std::filesystem::path(labels).filename());
    auto bytes = gunzip(images);
    damage(bytes);
    gzip((directory / std::filesystem::path(images).filename()).string(), bytes);
}

vt::error_kind load_error(const std::filesystem::path& directory, std::string* message = nullptr) {
    try {
        vt::load_fashion_mnist(fashion_mnist_split::test, -1, directory.string());
    } catch (const vt::error& failure) {
        if (message) *message = failure.what();
        return failure.kind();
    }
    FAIL("loading the damaged split did not fail");
    return vt::error_kind::io_error;
}

}  // namespace

TEST_CASE("the full splits load with their sizes, balanced labels and normalised pixels") {
    versatil::testing::require_fashion_mnist();
    const auto train = vt::load_fashion_mnist(fashion_mnist_split::train);
    const auto test = vt::load_fashion_mnist(fashion_mnist_split::test);
    CHECK(train.images.sizes() == at::IntArrayRef({60000, 1, 28, 28}));
    CHECK(test.images.sizes() == at::IntArrayRef({10000, 1, 28, 28}));
    CHECK((train.images.scalar_type() == at::kFloat));
    CHECK((train.labels.scalar_type() == at::kLong));
    CHECK(train.labels.sizes() == at::IntArrayRef({60000}));
    // Fashion-MNIST is balanced: 6000 training and 1000 test images per class.
    CHECK(at::equal(at::bincount(train.labels), at::full({10}, 6000, at::kLong)));
    CHECK(at::equal(at::bincount(test.labels), at::full({10}, 1000, at::kLong)));
    // The normalisation constants are the training split's statistics.
    CHECK(std::abs(train.images.mean().item<double>()) < 0.001);
    CHECK(train.images.std().item<double>() == doctest::Approx(1.0).epsilon(0.001));
    CHECK(train.images.min().item<double>() == doctest::Approx(-0.2860 / 0.3530));
    CHECK(train.images.max().item<double>() == doctest::Approx((1.0 - 0.2860) / 0.3530));
}

TEST_CASE("a limit loads the first examples of the split") {
    versatil::testing::require_fashion_mnist();
    const auto all = vt::load_fashion_mnist(fashion_mnist_split::test);
    const auto first = vt::load_fashion_mnist(fashion_mnist_split::test, 100);
    CHECK(first.images.size(0) == 100);
    CHECK(at::equal(first.images, all.images.slice(0, 0, 100)));
    CHECK(at::equal(first.labels, all.labels.slice(0, 0, 100)));
    CHECK(vt::load_fashion_mnist(fashion_mnist_split::test, 20000).images.size(0) == 10000);
    CHECK(vt::load_fashion_mnist(fashion_mnist_split::test, 0).images.size(0) == 0);
}

TEST_CASE("missing, truncated, mislabelled and corrupt files are invalid_data_file errors") {
    versatil::testing::require_fashion_mnist();
    std::string message;

    SUBCASE("a directory without the files") {
        const versatil::testing::scratch_directory directory("versatil-fmnist-");
        CHECK_FALSE(vt::fashion_mnist_available(directory.path.string()));
        CHECK(load_error(directory.path, &message) == vt::error_kind::invalid_data_file);
        CHECK(message.find("not found") != std::string::npos);
        CHECK(message.find("t10k-images-idx3-ubyte.gz") != std::string::npos);
    }
    SUBCASE("image data cut short") {
        const versatil::testing::scratch_directory directory("versatil-fmnist-");
        write_damaged_test_split(directory.path, [](auto& bytes) { bytes.resize(bytes.size() - 1000); });
        CHECK(load_error(directory.path, &message) == vt::error_kind::invalid_data_file);
        CHECK(message.find("truncated") != std::string::npos);
    }
    SUBCASE("a header cut short") {
        const versatil::testing::scratch_directory directory("versatil-fmnist-");
        write_damaged_test_split(directory.path, [](auto& bytes) { bytes.resize(10); });
        CHECK(load_error(directory.path, &message) == vt::error_kind::invalid_data_file);
        CHECK(message.find("truncated") != std::string::npos);
    }
    SUBCASE("a wrong magic number") {
        const versatil::testing::scratch_directory directory("versatil-fmnist-");
        write_damaged_test_split(directory.path, [](auto& bytes) { bytes[3] = 0x01; });
        CHECK(load_error(directory.path, &message) == vt::error_kind::invalid_data_file);
        CHECK(message.find("magic") != std::string::npos);
    }
    SUBCASE("an image count that does not match the labels") {
        const versatil::testing::scratch_directory directory("versatil-fmnist-");
        write_damaged_test_split(directory.path, [](auto& bytes) { bytes[6] = 0x00; });
        CHECK(load_error(directory.path, &message) == vt::error_kind::invalid_data_file);
        CHECK(message.find("labels for") != std::string::npos);
    }
    SUBCASE("data after the announced examples") {
        const versatil::testing::scratch_directory directory("versatil-fmnist-");
        write_damaged_test_split(directory.path, [](auto& bytes) { bytes.resize(bytes.size() + 784, 0); });
        CHECK(load_error(directory.path, &message) == vt::error_kind::invalid_data_file);
        CHECK(message.find("after the examples") != std::string::npos);
    }
    SUBCASE("corrupt compressed bytes") {
        const versatil::testing::scratch_directory directory("versatil-fmnist-");
        write_damaged_test_split(directory.path, [](auto&) {});
        const auto images = directory.path / "t10k-images-idx3-ubyte.gz";
        {
            // Flip bytes in the middle of the deflate stream of a valid file.
            std::FILE* file = std::fopen(images.c_str(), "r+b");
            REQUIRE(file != nullptr);
            REQUIRE(std::fseek(file, static_cast<long>(std::filesystem::file_size(images) / 2), SEEK_SET) == 0);
            const unsigned char garbage[16] = {0xde, 0xad, 0xbe, 0xef, 0xde, 0xad, 0xbe, 0xef,
                                               0xde, 0xad, 0xbe, 0xef, 0xde, 0xad, 0xbe, 0xef};
            REQUIRE(std::fwrite(garbage, 1, sizeof garbage, file) == sizeof garbage);
            std::fclose(file);
        }
        CHECK(load_error(directory.path, &message) == vt::error_kind::invalid_data_file);
        CHECK(message.find("t10k-images-idx3-ubyte.gz") != std::string::npos);
    }
}
