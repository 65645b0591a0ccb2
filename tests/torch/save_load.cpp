// Saving and loading: a quantized model saved by versatil runs in plain LibTorch and in
// Python with identical outputs, carries its metadata, and is written whole or not at all.
// Bad files get clear errors and are left as they were.
#include "doctest_with_torch.hpp"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <tuple>

#include "../runtime/archive_surgery.hpp"
#include "torch_test_helpers.hpp"
#include "versatil/libtorch.hpp"
#include "versatil/libtorch/files/data_file.hpp"
#include "versatil/libtorch/demo/models.hpp"

using namespace versatil;
using namespace versatil::libtorch;
namespace fs = std::filesystem;

namespace {

using versatil::testing::backend;
using versatil::testing::compose;
using versatil::testing::run;
using versatil::testing::scratch_directory;

// The bytes of a file, as the archive-surgery helpers read them.
std::string bytes_of(const fs::path& path) { return versatil::testing::read_bytes(path); }

// The CNN quantized with its last layer kept in float: a file that holds both kinds of layer.
lowered_model partly_quantized_cnn(std::string_view spec) {
    return quantize_model(small_cnn_mlp(0), compose({{"", backend(spec)}, {"classifier.fc2", nullptr}}),
                          {versatil::testing::smooth_batches(4, 16, 1)});
}

}  // namespace

TEST_CASE("a saved model reloads with identical outputs, through versatil and through plain LibTorch") {
    const scratch_directory scratch;
    const at::Tensor input = versatil::testing::smooth_images(8, 9);
    for (const std::string spec : {"x86_inductor", "xnnpack", "xnnpack:dynamic"}) {
        CAPTURE(spec);
        const lowered_model model = partly_quantized_cnn(spec);
        const fs::path file = scratch.path / "model.pt";
        save(model, file);
        at::Tensor expected;
        {
            const engine_scope scope(model.plan.engine);
            expected = run(model.module, input);
        }
        const loaded_model loaded = load_quantized(file);
        CHECK(engine_name(loaded.engine) == engine_name(model.plan.engine));
        {
            const engine_scope scope(loaded.engine);
            CHECK(at::equal(run(loaded.module, input), expected));
        }
        // No versatil code: the engine the metadata names, then torch::jit::load.
        at::globalContext().setQEngine(model.plan.engine);
        const ::torch::jit::Module plain = ::torch::jit::load(file.string());
        CHECK(at::equal(run(plain, input), expected));
        at::globalContext().setQEngine(at::QEngine::ONEDNN);
    }
}

// The observers' statistics are versatil operators (observer_ops.hpp); convert removes the
// observers, so a saved model refers to none of them and loads in a Python that never heard of them.
TEST_CASE("Python's torch.jit.load runs a saved model with identical outputs, without versatil's operators") {
    versatil::testing::require_python_torch();
    const scratch_directory scratch;
    for (const std::string spec : {"xnnpack", "x86_inductor", "x86_inductor:dynamic"}) {
        CAPTURE(spec);
        const lowered_model model = partly_quantized_cnn(spec);
        save(model, scratch.path / "model.pt");
        const at::Tensor input = versatil::testing::smooth_images(4, 3);
        at::Tensor expected;
        {
            const engine_scope scope(model.plan.engine);
            expected = run(model.module, input);
        }
        save_data_file({.calibration = {input}, .evaluation = {expected}}, scratch.path / "io.pt");
        const std::string script =
            "import json, sys, torch\n"
            "d, engine = sys.argv[1], sys.argv[2]\n"
            "torch.backends.quantized.engine = engine\n"
            "extra = {'versatil.json': ''}\n"
            "m = torch.jit.load(d + '/model.pt', _extra_files=extra)\n"
            "assert json.loads(extra['versatil.json'])['engine'] == engine\n"
            "assert 'versatil::' not in str(m.inlined_graph), 'the saved model calls a versatil operator'\n"
            "assert 'ops.versatil' not in m.code, 'the saved model calls a versatil operator'\n"
            "io = torch.jit.load(d + '/io.pt')\n"
            "out = m(io.calib)\n"
            "sys.exit(0 if torch.equal(out, io.test) else 1)\n";
        std::ofstream(scratch.path / "check.py") << script;
        const std::string command = std::string(versatil::testing::torch_python) + " " +
                                    (scratch.path / "check.py").string() + " " + scratch.path.string() + " " +
                                    engine_name(model.plan.engine);
        CHECK(std::system(command.c_str()) == 0);
    }
}

TEST_CASE("metadata records the version, engine, backends and targets, and reads back without loading") {
    const scratch_directory scratch;
    save(partly_quantized_cnn("xnnpack:per_tensor"), scratch.path / "model.pt");
    const nlohmann::json metadata = read_metadata(scratch.path / "model.pt");
    CHECK(metadata.at("versatil_version") == std::string(versatil::version));
    CHECK(metadata.at("engine") == "qnnpack");
    CHECK(metadata.at("backends") == nlohmann::json::array({"xnnpack"}));
    REQUIRE(metadata.at("targets").size() == 2);
    CHECK(metadata["targets"][0]["spec"] == "xnnpack:per_tensor");
    CHECK(metadata["targets"][0]["config"]["weight"]["qscheme"] == "per_tensor_symmetric");
    CHECK(metadata["targets"][1]["path"] == "classifier.fc2");
    CHECK(metadata["targets"][1]["backend"] == "none");
}

TEST_CASE("a save that cannot complete leaves nothing behind and never touches the input") {
    const scratch_directory scratch;
    const lowered_model model = partly_quantized_cnn("x86_inductor");
    const fs::path input = scratch.path / "input.pt";
    small_cnn_mlp(0).save(input.string());
    const std::string input_bytes = bytes_of(input);

    try {
        save(model, input, input);
        FAIL("must refuse to overwrite the input");
    } catch (const error& failure) {
        CHECK(failure.kind() == error_kind::io_error);
        CHECK(std::string(failure.what()).find("is the input model") != std::string::npos);
    }
    CHECK(bytes_of(input) == input_bytes);
    // the same file through another spelling of its path
    CHECK_THROWS_AS(save(model, scratch.path / "." / "input.pt", input), error);

    CHECK_THROWS_AS(save(model, scratch.path / "missing-dir" / "q.pt"), error);
    CHECK_THROWS_AS(save(model, scratch.path), error);  // a directory
    CHECK(scratch.files() == std::vector<std::string>{"input.pt"});

    // An existing output is replaced whole.
    save(model, scratch.path / "q.pt");
    save(model, scratch.path / "q.pt");
    CHECK(scratch.files() == std::vector<std::string>{"input.pt", "q.pt"});
}

TEST_CASE("corrupt and truncated model files get a clear error and stay unchanged") {
    const scratch_directory scratch;
    const fs::path garbage = scratch.path / "garbage.pt", truncated = scratch.path / "truncated.pt";
    std::ofstream(garbage, std::ios::binary) << "this is not a TorchScript archive";
    small_cnn_mlp(0).save(truncated.string());
    const std::string whole = bytes_of(truncated);
    std::ofstream(truncated, std::ios::binary | std::ios::trunc) << whole.substr(0, whole.size() / 2);
    for (const fs::path& path : {garbage, truncated, scratch.path / "absent.pt"}) {
        CAPTURE(path);
        const std::string before = fs::exists(path) ? bytes_of(path) : "";
        try {
            (void)load_model(path);
            FAIL("must throw");
        } catch (const error& failure) {
            CHECK(failure.kind() == error_kind::invalid_model_file);
            CHECK(std::string(failure.what()).find(path.string()) != std::string::npos);
        }
        CHECK_THROWS_AS(read_metadata(path), error);
        if (fs::exists(path)) CHECK(bytes_of(path) == before);
    }
    // A float model is valid TorchScript but has no versatil metadata.
    small_cnn_mlp(0).save((scratch.path / "float.pt").string());
    CHECK_THROWS_WITH_AS(read_metadata(scratch.path / "float.pt"), doctest::Contains("not saved by versatil"), error);
}

// Files that lie or are damaged: without the checks, each would make LibTorch allocate what the
// file asks for, hand out a tensor reaching past its storage, run on damaged weights, or crash.
TEST_CASE("lying, damaged and crashing model or data files are rejected and the process lives on") {
    using versatil::testing::overwrite;
    const scratch_directory scratch;
    const fs::path model_path = scratch.path / "model.pt";
    small_cnn_mlp(0).save(model_path.string());
    const std::string model = bytes_of(model_path);

    // The fuzzer's finding, rebuilt: a memo index of 2^30 (LibTorch would grow its memo to 16 GB).
    std::string memo = model;
    const versatil::libtorch::zip::record pickle = versatil::testing::find_record(model, "/data.pkl");
    const std::size_t put = memo.find("trainingq", pickle.data_offset) + 8;  // BINPUT after a field name
    REQUIRE(put < pickle.data_offset + pickle.size);
    memo[put] = 'r';  // LONG_BINPUT: 4-byte index
    overwrite(memo, put + 1, 1U << 30, 4);
    versatil::testing::refresh_crc(memo, "/data.pkl");

    std::string stored_size = model;
    overwrite(stored_size, versatil::testing::central_entry(model, "/data.pkl") + 24, 0x7fffffff, 4);

    // A data file whose [3, 7] tensor claims 99 rows: 2 KB of reach over an 84-byte storage.
    const fs::path data_path = scratch.path / "data.pt";
    save_data_file({.calibration = {at::zeros({3, 7})}}, data_path);
    std::string rows = bytes_of(data_path);
    const std::size_t sizes = rows.find("(K\x03K\x07t");  // MARK 3 7 TUPLE
    REQUIRE(sizes != std::string::npos);
    rows[sizes + 2] = 99;
    versatil::testing::refresh_crc(rows, "/data.pkl");

    // The same file, its storage declared as 99 floats over the record's 21: LibTorch sizes the
    // storage from the pickle, so the tensor fits a storage whose bytes are not there.
    std::string numel = bytes_of(data_path);
    const std::size_t count = numel.find("K\x15tQ");  // BININT1 21, TUPLE, BINPERSID
    REQUIRE(count != std::string::npos);
    numel[count + 1] = 99;
    versatil::testing::refresh_crc(numel, "/data.pkl");

    // One flipped bit in a weight, the archive otherwise intact.
    std::string damaged = model;
    damaged.at(versatil::testing::find_record(model, "/data/0").data_offset) ^= 0x10;

    // Source text on which LibTorch 1.13's compiler reads uninitialised memory (an unannotated
    // class attribute): it segfaults, or now and then throws. The fuzzer's finding, written by
    // tests/fuzz/make_corpus.py with valid CRCs; only the child process compiles it.
    const std::string crashing = versatil::testing::read_bytes(
        fs::path(VERSATIL_SOURCE_ROOT) / "tests/fuzz/corpus/model_file/untyped_class_attribute.pt");

    for (const auto& [name, bytes, expected] : std::vector<std::tuple<std::string, std::string, std::string>>{
             {"memo.pt", memo, "pickle memo index 1073741824"},
             {"stored_size.pt", stored_size, "declares 2147483647"},
             {"rows.pt", rows, "reaches past its 84-byte storage"},
             {"numel.pt", numel, "declares a 396-byte storage over"},
             {"damaged.pt", damaged, "record 'data/0' fails its CRC-32 check"},
             {"crashing.pt", crashing, "is not a valid TorchScript file: LibTorch c"}}) {
        CAPTURE(name);
        const fs::path path = scratch.path / name;
        versatil::testing::write_bytes(path, bytes);
        std::vector<std::function<void()>> loads{[&] { (void)load_model(path); }, [&] { (void)load_data_file(path); }};
        // Without the child process every other check still runs (not on the crashing source:
        // that would crash this test, which is the point of the child).
        if (name != "crashing.pt") loads.emplace_back([&] { (void)load_model(path, compile_source::in_process); });
        for (const auto& load : loads) {
            try {
                load();
                FAIL("must throw");
            } catch (const error& failure) {
                const std::string message = failure.what();
                CAPTURE(message);
                CHECK((failure.kind() == error_kind::invalid_model_file ||
                       failure.kind() == error_kind::invalid_data_file));
                CHECK(std::string(failure.what()).find(path.string()) != std::string::npos);
                CHECK(std::string(failure.what()).find(expected) != std::string::npos);
            }
        }
        if (name != "rows.pt" && name != "numel.pt" && name != "crashing.pt")
            CHECK_THROWS_WITH_AS(read_metadata(path), doctest::Contains(expected.c_str()), error);
        CHECK(bytes_of(path) == bytes);
    }
    // The child's re-saved copies are gone, whatever happened to them.
    const std::string copies = "versatil-load-" + std::to_string(::getpid()) + "-";
    for (const auto& entry : fs::directory_iterator(fs::temp_directory_path()))
        CHECK_FALSE(entry.path().filename().string().starts_with(copies));
}

TEST_CASE("data files round-trip and bad ones are rejected") {
    const scratch_directory scratch;
    const at::Tensor calib = at::randn({6, 1, 28, 28}), test = at::randn({4, 1, 28, 28});
    const at::Tensor labels = at::tensor({0, 1, 2, 3}, at::kLong);
    save_data_file({{calib}, {test}, labels}, scratch.path / "data.pt");
    const data_file data = load_data_file(scratch.path / "data.pt");
    CHECK(at::equal(data.calibration.at(0), calib));
    CHECK(at::equal(data.evaluation.at(0), test));
    CHECK(at::equal(*data.evaluation_labels, labels));
    CHECK_FALSE(data.train_inputs.has_value());

    std::ofstream(scratch.path / "bad.pt") << "not a data file";
    CHECK_THROWS_WITH_AS(load_data_file(scratch.path / "bad.pt"),
                         doctest::Contains("not a readable TorchScript archive"), error);
    save_data_file({{calib}, {test}, at::tensor({0, 1}, at::kLong)},
                   scratch.path / "short_labels.pt");
    CHECK_THROWS_WITH_AS(load_data_file(scratch.path / "short_labels.pt"),
                         doctest::Contains("'test_labels' has 2 rows"), error);
    save_data_file({{calib}, {test}, at::tensor({0.F, 1.F, 2.F, 3.F})},
                   scratch.path / "float_labels.pt");
    CHECK_THROWS_WITH_AS(load_data_file(scratch.path / "float_labels.pt"), doctest::Contains("int64"), error);
}

TEST_CASE("a dict of tensors written by torch.save reads as the TorchScript data file of the same tensors") {
    versatil::testing::require_python_torch();
    const scratch_directory scratch;
    // Python writes each form: one entry (pickled with SETITEM, which LibTorch's own unpickler
    // cannot read), several inputs, a view into a larger storage, and a TorchScript copy.
    const std::string script =
        "import os, sys, torch\n"
        "d = sys.argv[1]\n"
        "torch.manual_seed(0)\n"
        "calib, test = torch.randn(6, 1, 28, 28), torch.randn(4, 1, 28, 28)\n"
        "labels = torch.tensor([3, 1, 4, 1])\n"
        "wide = torch.arange(24, dtype=torch.float64).reshape(4, 6)\n"
        "tensors = {'calib': calib, 'test': test, 'test_labels': labels}\n"
        "torch.save(tensors, d + '/saved.pt')\n"
        "torch.save({'calib': calib}, d + '/one.pt')\n"
        "torch.save({'calib_0': wide[:, 1], 'calib_1': calib[:4].half()}, d + '/inputs.pt')\n"
        "class D(torch.nn.Module):\n"
        "    def __init__(self, tensors):\n"
        "        super().__init__()\n"
        "        for k, v in tensors.items(): self.register_buffer(k, v)\n"
        "    def forward(self): return None\n"
        "torch.jit.save(torch.jit.script(D(tensors)), d + '/scripted.pt')\n"
        "torch.save({'calibration': calib, 'test': test}, d + '/misnamed.pt')\n"
        "torch.save({'calib': [calib]}, d + '/nested.pt')\n"
        "class Hostile:\n"
        "    def __reduce__(self): return (os.system, ('touch ' + d + '/ran',))\n"
        "torch.save({'calib': Hostile()}, d + '/hostile.pt')\n"
        "class Net(torch.nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.fc = torch.nn.Linear(4, 2)\n"
        "    def forward(self, x): return self.fc(x)\n"
        "torch.save(Net(), d + '/pickled_model.pt')\n";
    std::ofstream(scratch.path / "make.py") << script;
    REQUIRE(std::system((std::string(versatil::testing::torch_python) + " " + (scratch.path / "make.py").string() +
                         " " + scratch.path.string()).c_str()) == 0);

    const data_file saved = load_data_file(scratch.path / "saved.pt");
    const data_file scripted = load_data_file(scratch.path / "scripted.pt");
    REQUIRE(saved.calibration.size() == 1);
    CHECK(at::equal(saved.calibration[0], scripted.calibration.at(0)));
    CHECK(at::equal(saved.evaluation.at(0), scripted.evaluation.at(0)));
    CHECK(at::equal(*saved.evaluation_labels, *scripted.evaluation_labels));
    CHECK(at::equal(load_data_file(scratch.path / "one.pt").calibration.at(0), scripted.calibration.at(0)));
    const data_file inputs = load_data_file(scratch.path / "inputs.pt");
    REQUIRE(inputs.calibration.size() == 2);
    // wide[:, 1] of arange(24) as 4 x 6: 1, 7, 13, 19 (a strided view of the first row's storage).
    CHECK(at::equal(inputs.calibration[0], at::tensor({1.0, 7.0, 13.0, 19.0}, at::kDouble)));
    CHECK(at::equal(inputs.calibration[1], scripted.calibration.at(0).slice(0, 0, 4).to(at::kHalf)));

    // Each refusal names what is wrong; the hostile pickle is refused before anything runs it.
    CHECK_THROWS_WITH_AS(load_data_file(scratch.path / "misnamed.pt"),
                         doctest::Contains("holds 'calibration', a name versatil does not read. It holds 'calibration' "
                                           "[6, 1, 28, 28] Float, 'test' [4, 1, 28, 28] Float. The names it reads: "
                                           "'calib' calibration samples"),
                         error);
    CHECK_THROWS_WITH_AS(load_data_file(scratch.path / "nested.pt"),
                         doctest::Contains("'calib' holds a list; every value of a data file is a tensor"), error);
    CHECK_THROWS_WITH_AS(load_data_file(scratch.path / "hostile.pt"),
                         doctest::Contains("is refused before it is read: it calls posix.system"), error);
    CHECK_FALSE(fs::exists(scratch.path / "ran"));
    CHECK_THROWS_WITH_AS(load_data_file(scratch.path / "pickled_model.pt"),
                         doctest::Contains("it calls __main__.Net, which a file of tensors never needs"), error);
    CHECK_THROWS_WITH_AS(load_model(scratch.path / "pickled_model.pt"),
                         doctest::Contains("was written by torch.save (a pickled Python object), not as TorchScript: "
                                           "script it with torch.jit.script"),
                         error);
}

TEST_CASE("a dict of tensors written by C++'s torch::pickle_save reads as the tensors it holds") {
    const scratch_directory scratch;
    const auto write = [&](const c10::IValue& value, const std::string& name) {
        const std::vector<char> bytes = ::torch::pickle_save(value);
        versatil::testing::write_bytes(scratch.path / name, std::string(bytes.begin(), bytes.end()));
        return scratch.path / name;
    };
    // A C++ user's data file: LibTorch wraps the dict in restore_type_tag(dict, "Dict[str, Tensor]").
    ::torch::manual_seed(0);
    const at::Tensor calib = ::torch::randn({6, 1, 28, 28}), test = ::torch::randn({4, 1, 28, 28});
    const at::Tensor labels = ::torch::tensor({3, 1, 4, 1}, at::kLong);
    c10::Dict<std::string, at::Tensor> tensors;
    tensors.insert("calib", calib);
    tensors.insert("test", test);
    tensors.insert("test_labels", labels);
    const fs::path saved = write(tensors, "saved.pt");
    const data_file read = load_data_file(saved);
    REQUIRE(read.calibration.size() == 1);
    CHECK(at::equal(read.calibration[0], calib));
    CHECK(at::equal(read.evaluation.at(0), test));
    CHECK(at::equal(*read.evaluation_labels, labels));
    // LibTorch's own reader of the same bytes agrees.
    const std::string bytes = bytes_of(saved);
    CHECK(at::equal(::torch::pickle_load({bytes.begin(), bytes.end()}).toGenericDict().at("calib").toTensor(),
                    read.calibration[0]));

    // What else pickle_save writes is refused by name: a dict keyed by ints, a dict of lists (its
    // tensor-list builder is not on the scan's allow-list). The type tag is compared, never parsed:
    // the same file with its tag saying "Dict[int, Tensor]" is refused before any tensor is kept.
    c10::Dict<std::int64_t, at::Tensor> by_number;
    by_number.insert(0, calib);
    CHECK_THROWS_WITH_AS(load_data_file(write(by_number, "by_number.pt")),
                         doctest::Contains("a dict key is an int: name each tensor with a string"), error);
    c10::Dict<std::string, c10::List<at::Tensor>> of_lists;
    of_lists.insert("calib", c10::List<at::Tensor>({calib}));
    CHECK_THROWS_WITH_AS(load_data_file(write(of_lists, "of_lists.pt")),
                         doctest::Contains("it calls torch.jit._pickle.build_tensorlist, which a file of tensors"),
                         error);
    std::string mistagged = bytes_of(saved);
    const std::size_t tag = mistagged.find("Dict[str, Tensor]");
    REQUIRE(tag != std::string::npos);
    mistagged.replace(tag, 17, "Dict[int, Tensor]");
    versatil::testing::refresh_crc(mistagged, "/data.pkl");
    versatil::testing::write_bytes(scratch.path / "mistagged.pt", mistagged);
    CHECK_THROWS_WITH_AS(load_data_file(scratch.path / "mistagged.pt"),
                         doctest::Contains("restore_type_tag with arguments other than a dict and its type"), error);
}
