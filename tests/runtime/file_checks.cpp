// The checks run before LibTorch reads a file: the zip layout (every record inside the file,
// with a size its bytes can hold) and the pickle scan (every argument inside the pickle, no
// memo index a pickler never writes). Real archives from the fuzz corpus, each broken in one
// field, must be rejected with a message naming that field; the intact ones must pass.
#include <doctest/doctest.h>

#include <string>

#include "archive_surgery.hpp"
#include "versatil/libtorch/files/pickle_scan.hpp"
#include "versatil/libtorch/files/tensor_pickle_scan.hpp"
#include "versatil/libtorch/files/zip_layout.hpp"

using namespace versatil::libtorch;
using versatil::testing::central_entry;
using versatil::testing::overwrite;
using namespace std::string_view_literals;

namespace {

const std::filesystem::path corpus = std::filesystem::path(VERSATIL_SOURCE_ROOT) / "tests/fuzz/corpus/model_file";

std::string layout_problem(const std::string& archive) { return zip::read_layout(zip::memory_bytes(archive)).problem; }

std::string pickle_problem(std::string_view pickle) { return pickle::find_problem(pickle).value_or(""); }

std::string tensor_pickle_problem(std::string_view pickle) {
    return pickle::find_non_tensor_content(pickle).value_or("");
}

}  // namespace

TEST_CASE("archives PyTorch wrote pass, in memory and from the file, with every record found") {
    for (const char* name : {"model.pt", "model_with_metadata.pt", "data.pt"}) {
        CAPTURE(name);
        const std::string archive = versatil::testing::read_bytes(corpus / name);
        const zip::layout in_memory = zip::read_layout(zip::memory_bytes(archive));
        const zip::layout from_file = zip::read_layout(zip::file_bytes((corpus / name).string()));
        REQUIRE(in_memory.ok());
        REQUIRE(from_file.ok());
        REQUIRE(in_memory.records.size() == from_file.records.size());
        bool saw_data_pickle = false;
        for (const zip::record& record : in_memory.records) {
            CAPTURE(record.name);
            CHECK(record.data_offset + record.compressed_size <= archive.size());
            if (record.method != 0) continue;
            CHECK(versatil::testing::crc32(std::string_view(archive).substr(record.data_offset, record.size)) ==
                  record.crc32);
            if (!record.name.ends_with("pkl")) continue;
            saw_data_pickle |= record.name.ends_with("/data.pkl");
            CHECK(pickle_problem(std::string_view(archive).substr(record.data_offset, record.size)).empty());
        }
        CHECK(saw_data_pickle);
        CHECK(in_memory.records.back().name.ends_with("/version"));
    }
}

TEST_CASE("a broken zip layout is named before anything is allocated for it") {
    const std::string archive = versatil::testing::read_bytes(corpus / "model.pt");
    CHECK(layout_problem("") == "it is 0 bytes long: too short to be a zip archive");
    CHECK(layout_problem(archive.substr(0, archive.size() / 2)).find("no zip end record") != std::string::npos);
    CHECK(layout_problem(std::string(64, 'x')).find("no zip end record") != std::string::npos);

    const std::size_t data_pickle = central_entry(archive, "/data.pkl");
    const std::size_t source = central_entry(archive, "code/__torch__.py");  // deflated
    struct broken {
        const char* what;
        std::size_t at, width;
        std::uint64_t value;
        const char* expected;
    };
    for (const broken& edit : {
             broken{"stored size larger than its bytes", data_pickle + 24, 4, 0x7fffffff,
                    "is stored with 354 bytes but declares 2147483647"},
             broken{"deflated size no stream reaches", source + 24, 4, 0x7fffffff, "more than deflate can produce"},
             broken{"compressed size past the data", source + 20, 4, 1 << 20, "runs past the end of the data"},
             broken{"local header offset", data_pickle + 42, 4, 3, "has no local header at offset 3"},
             broken{"unknown compression method", data_pickle + 10, 2, 12, "uses compression method 12"},
             broken{"encrypted", data_pickle + 8, 2, 1, "is encrypted"},
             broken{"central directory signature", data_pickle, 4, 0, "central directory entry 2 is corrupt"},
         }) {
        std::string corrupt = archive;
        overwrite(corrupt, edit.at, edit.value, edit.width);
        const std::string problem = layout_problem(corrupt);
        CAPTURE(std::string(edit.what));
        CAPTURE(problem);
        CHECK(problem.find(edit.expected) != std::string::npos);
    }

    // PyTorch writes zip64 end records; their directory fields are the ones read.
    const std::size_t zip64 = archive.rfind("PK\x06\x06");
    REQUIRE(zip64 != std::string::npos);
    std::string outside = archive;
    overwrite(outside, zip64 + 48, archive.size() + 10, 8);
    CHECK(layout_problem(outside).find("lies outside the file") != std::string::npos);
    std::string too_many = archive;
    overwrite(too_many, zip64 + 32, 1'000'000'000, 8);
    CHECK(layout_problem(too_many).find("declares 1000000000 records") != std::string::npos);
    std::string lost_zip64 = archive;
    overwrite(lost_zip64, zip64, 0, 4);
    CHECK(layout_problem(lost_zip64) == "its zip64 end record is missing or corrupt");
}

TEST_CASE("the pickle scan accepts what picklers write and names each way a pickle can lie") {
    // protocol 2: an empty list memoized as 0, fetched back, in a tuple
    CHECK(pickle_problem("\x80\x02]q\x00h\x00\x86."sv) == "");
    CHECK(pickle_problem("(p0\nX\x02\x00\x00\x00hit."sv) == "");  // text PUT, BINUNICODE
    CHECK(pickle_problem("cmodule\nname\n.") == "");
    CHECK(pickle_problem("\x80\x02r\x00\x00\x00\x40."sv) ==
          "pickle memo index 1073741824 at byte 2 is beyond any a 8-byte pickle can use");
    CHECK(pickle_problem("(p99999999999999999999\n.").find("memo index") != std::string::npos);
    CHECK(pickle_problem("(pzero\n.") == "pickle memo index at byte 1 is not a number");
    CHECK(pickle_problem("X\xff\xff\xff\x7f."sv) ==
          "pickle string or bytes at byte 0 declares 2147483647 bytes; 1 remain");
    CHECK(pickle_problem("\x8d\x00\x00\x00\x00\x00\x00\x00\x01"sv).find("declares") !=
          std::string::npos);
    CHECK(pickle_problem("J\x01\x02") == "pickle opcode at byte 0 runs past the end");
    CHECK(pickle_problem("cmodule\n") == "pickle text argument at byte 0 has no end of line");
    CHECK(pickle_problem("\x00."sv) == "unknown pickle opcode 0 at byte 0");
    CHECK(pickle_problem("]") == "the pickle ends without a STOP opcode");
    CHECK(pickle_problem("") == "the pickle ends without a STOP opcode");
}

TEST_CASE("the fuzzer's 26 GB memo index is caught in the pickle, its archive being intact") {
    const std::string archive = versatil::testing::read_bytes(corpus / "memo_index_26gb.pt");
    REQUIRE(zip::read_layout(zip::memory_bytes(archive)).ok());
    const zip::record data = versatil::testing::find_record(archive, "/data.pkl");
    CHECK(pickle_problem(std::string_view(archive).substr(data.data_offset, data.size)).find("memo index") !=
          std::string::npos);
}

TEST_CASE("torch.save's and torch::pickle_save's pickles of tensors pass the data-file scan; more is named") {
    // data.pkl of torch.save({"calib": torch.zeros(2, 3)}), Debian's python3-torch 1.13.
    const std::string_view saved =
        "\x80\x02}q\x00X\x05\x00\x00\x00" "calibq\x01" "ctorch._utils\x0a_rebuild_tensor_v2\x0aq\x02((X\x07\x00\x00"
        "\x00storageq\x03" "ctorch\x0a" "FloatStorage\x0aq\x04X\x01\x00\x00\x00" "0q\x05X\x03\x00\x00\x00" "cpuq\x06K"
        "\x06tq\x07QK\x00K\x02K\x03\x86q\x08K\x03K\x01\x86q\x09\x89" "ccollections\x0aOrderedDict\x0aq\x0a)Rq\x0btq"
        "\x0cRq\x0ds."sv;
    REQUIRE(saved.size() == 170);
    CHECK(pickle_problem(saved) == "");
    CHECK(tensor_pickle_problem(saved) == "");
    // data.pkl of C++'s torch::pickle_save(c10::Dict<std::string, at::Tensor>{{"calib", torch::zeros({2, 3})}}),
    // LibTorch 1.13: the dict wrapped in restore_type_tag(dict, "Dict[str, Tensor]").
    const std::string_view pickle_saved =
        "\x80\x02" "ctorch.jit._pickle\x0arestore_type_tag\x0aq\x00}(X\x05\x00\x00\x00" "calibq\x01" "ctorch."
        "_utils\x0a_rebuild_tensor_v2\x0aq\x02((X\x07\x00\x00\x00storageq\x03" "ctorch\x0a" "FloatStorage\x0a"
        "q\x04X\x01\x00\x00\x00" "0q\x05X\x03\x00\x00\x00" "cpuq\x06K\x06tQq\x07K\x00(K\x02K\x03t(K\x03K\x01t"
        "\x89" "ccollections\x0aOrderedDict\x0aq\x08)RtRuX\x11\x00\x00\x00" "Dict[str, Tensor]q\x09\x86Rq\x0a"
        "."sv;
    REQUIRE(pickle_saved.size() == 227);
    CHECK(pickle_problem(pickle_saved) == "");
    CHECK(tensor_pickle_problem(pickle_saved) == "");
    // Its other helpers build lists of ints or tensors, which no data file needs.
    CHECK(tensor_pickle_problem("\x80\x02" "ctorch.jit._pickle\nbuild_intlist\n]\x85R."sv).starts_with(
        "it calls torch.jit._pickle.build_intlist, which a file of tensors never needs"));
    // What pickle.dumps of an object whose __reduce__ returns (os.system, ("id",)) holds.
    CHECK(tensor_pickle_problem("\x80\x02" "cposix\nsystem\nX\x02\x00\x00\x00id\x85R."sv).starts_with(
        "it calls posix.system, which a file of tensors never needs"));
    CHECK(tensor_pickle_problem("\x80\x02" "c__main__\nNet\n)\x81."sv).find("a model saved with torch.save") !=
          std::string::npos);
    // The stack and the memo: LibTorch's unpickler pops and fetches without looking.
    CHECK(tensor_pickle_problem("\x80\x02R."sv) == "pickle opcode 82 at byte 2 pops an empty stack");
    CHECK(tensor_pickle_problem("(\x85."sv) == "pickle opcode 133 at byte 1 pops an empty stack");
    CHECK(tensor_pickle_problem("]e."sv) == "pickle opcode at byte 1 has no MARK");
    CHECK(tensor_pickle_problem("\x80\x02h\x05."sv) == "pickle memo entry 5 at byte 2 is read before it is stored");
    CHECK(tensor_pickle_problem("K\x01K\x02."sv) == "the pickle stops with a stack other than one value at byte 4");
    // Opcodes that call or build without a global from the allow-list.
    CHECK(tensor_pickle_problem("})b."sv).starts_with("pickle opcode 98 at byte 2 does more than build tensors"));
    CHECK(tensor_pickle_problem("\x8c\x02os\x8c\x06system\x93."sv).find("STACK_GLOBAL") != std::string::npos);
    CHECK(tensor_pickle_problem("(i__main__\nNet\n."sv).find("does more than build tensors") != std::string::npos);
}
