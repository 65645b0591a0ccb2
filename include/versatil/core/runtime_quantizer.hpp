// Composition of targets whose paths are known only at run time (a config file, a command
// line): the same rules as Quantizer<...>, reported as a composition_error instead of a
// compile error. Still no dynamic dispatch: each target points at a backend's constexpr
// descriptor.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "versatil/core/backend_quantizer.hpp"
#include "versatil/core/composition.hpp"
#include "versatil/core/composition_error.hpp"
#include "versatil/core/result.hpp"
#include "versatil/environment/scoped_environment.hpp"

namespace versatil {

struct runtime_target {
    std::string path;
    const backend_descriptor* backend = nullptr;  // nullptr: exclude, the module stays float
};

class runtime_quantizer {
public:
    static result<runtime_quantizer, composition_error> compose(std::vector<runtime_target> targets) {
        runtime_quantizer quantizer(std::move(targets));
        if (const composition_check check = check_composition(quantizer.infos_); !check)
            return describe(check, quantizer.infos_);
        return quantizer;
    }

    runtime_quantizer(const runtime_quantizer& other) : runtime_quantizer(other.targets_) {}
    runtime_quantizer(runtime_quantizer&&) noexcept = default;  // moves buffers: the views stay valid
    runtime_quantizer& operator=(runtime_quantizer other) noexcept {
        targets_.swap(other.targets_);
        infos_.swap(other.infos_);
        return *this;
    }
    ~runtime_quantizer() = default;

    const std::vector<runtime_target>& targets() const noexcept { return targets_; }
    std::span<const target_info> target_infos() const noexcept { return infos_; }

    std::vector<backend_quantizer> quantizers() const {
        std::vector<backend_quantizer> result;
        for (const target_info& target : infos_)
            if (!target.is_exclude()) result.push_back({target.backend, target.path});
        return result;
    }

    std::vector<std::string_view> backend_names() const {
        std::vector<std::string_view> names;
        for (const target_info& target : infos_)
            if (!target.is_exclude()) names.push_back(target.backend->name);
        return names;
    }

    bool is_dynamic() const noexcept { return all_dynamic(infos_); }
    bool is_qat() const noexcept { return all_qat(infos_); }
    bool needs_calibration() const noexcept { return versatil::needs_calibration(infos_); }
    device_set supported_device_types() const noexcept { return common_devices(infos_); }

    std::optional<backend_quantizer> quantizer_for(std::string_view module_name) const noexcept {
        const std::optional<std::size_t> index = find_target(infos_, module_name);
        if (!index || infos_[*index].is_exclude()) return std::nullopt;
        return backend_quantizer{infos_[*index].backend, infos_[*index].path};
    }

    std::vector<environment_assignment> environment() const {
        std::vector<environment_assignment> result;
        for_each_environment_assignment(infos_, [&result](const environment_assignment& a) { result.push_back(a); });
        return result;
    }

    // One scope for every distinct backend environment. The scope holds views of the
    // backends' constexpr assignments, not of this object, so it may outlive it.
    template <EnvironmentStore Store = default_environment>
    [[nodiscard]] scoped_environment<Store> environment_context() const {
        return scoped_environment<Store>(environment());
    }

    template <EnvironmentStore Store = default_environment>
    bool activate_environment() const {
        return activate<Store>(environment());
    }

private:
    explicit runtime_quantizer(std::vector<runtime_target> targets) : targets_(std::move(targets)) {
        infos_.reserve(targets_.size());
        for (const runtime_target& target : targets_) infos_.push_back({target.path, target.backend});
    }

    std::vector<runtime_target> targets_;
    std::vector<target_info> infos_;  // views into targets_
};

}  // namespace versatil
