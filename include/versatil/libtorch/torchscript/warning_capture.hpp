// LibTorch's warnings (TORCH_WARN, which its default handler prints through glog) gathered while
// a quantization runs, instead of flooding stderr: an op that warns on every call prints the same
// line thousands of times over calibration, evaluation and timing. The report shows each distinct
// text once, with how often it came.
#pragma once

#include <c10/util/Exception.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace versatil::libtorch {

struct libtorch_warning {
    std::string text;
    std::int64_t count = 0;
};

// While alive, the calling thread's LibTorch warnings come here rather than to the handler before
// it, which it restores when it ends (by return or by exception). LibTorch 1.13 keeps the handler
// per thread (set_warning_handler writes a thread_local): a warning raised on one of its intra-op
// threads still goes to stderr. Captures on one thread must nest, as scopes do.
class warning_capture : public c10::WarningHandler {
  public:
    warning_capture() : previous_(c10::Warning::get_warning_handler()) { c10::Warning::set_warning_handler(this); }
    ~warning_capture() override { c10::Warning::set_warning_handler(previous_); }
    warning_capture(const warning_capture&) = delete;
    warning_capture& operator=(const warning_capture&) = delete;

    // LibTorch's hook. The lock is for a caller that installs one capture on several threads.
    void process(const c10::SourceLocation&, const std::string& message, bool) override {
        const std::lock_guard lock(mutex_);
        if (++counts_[message] == 1) order_.push_back(message);
    }

    // Each distinct text once, in the order they first came, with its count.
    std::vector<libtorch_warning> folded() const {
        const std::lock_guard lock(mutex_);
        std::vector<libtorch_warning> warnings;
        for (const std::string& text : order_) warnings.push_back({text, counts_.at(text)});
        return warnings;
    }

  private:
    c10::WarningHandler* previous_;
    mutable std::mutex mutex_;
    std::map<std::string, std::int64_t> counts_;
    std::vector<std::string> order_;
};

}  // namespace versatil::libtorch
