// The accuracy steps the stage sequence runs, as a list known while compiling. A step is a type
// with `applies(const target_plan&)`, whether a target asks for it, and `run(model, calibration)`,
// whose model parameter places it in the sequence: a prepared_model& runs once calibrated (before
// convert), a converted_model& once converted (before lowering). A step that scores converted
// copies takes a third parameter, the sequence's convert stage (`run(model, calibration, convert)`):
// the sequence includes the steps, so no step includes the stages. A new step is its own header, its
// flag in the plan and an entry here: the sequence walks the list and names no step.
#pragma once

#include <boost/hana/for_each.hpp>
#include <boost/hana/tuple.hpp>
#include <boost/hana/type.hpp>

#include <algorithm>
#include <vector>

#include "versatil/libtorch/accuracy/adaround.hpp"
#include "versatil/libtorch/accuracy/bias_correction.hpp"
#include "versatil/libtorch/accuracy/gptq.hpp"
#include "versatil/libtorch/accuracy/output_ranges.hpp"

namespace versatil::libtorch {

inline constexpr auto accuracy_steps =
    boost::hana::tuple_t<gptq_step, adaround_step, output_ranges_step, bias_correction_step>;

namespace detail {

// Runs on `model` each step of `steps` that belongs at its point of the sequence and that a
// target of its plan asks for, in the list's order; `convert` goes to the steps that take it.
template <class Model, class Steps, class Convert>
void run_steps_at(Model& model, const std::vector<batch>& calibration, Steps steps, const Convert& convert) {
    boost::hana::for_each(steps, [&](auto step) {
        using step_type = typename decltype(step)::type;
        const auto asked = [&] {
            const auto& targets = model.plan.targets;
            const auto applies = [](const auto& target) { return step_type::applies(target.second); };
            return std::any_of(targets.begin(), targets.end(), applies);
        };
        if constexpr (requires { step_type::run(model, calibration); }) {
            if (asked()) step_type::run(model, calibration);
        } else if constexpr (requires { step_type::run(model, calibration, convert); }) {
            if (asked()) step_type::run(model, calibration, convert);
        }
    });
}

}  // namespace detail

}  // namespace versatil::libtorch
