// expect-error: backend_declares_is_qat
// A function constrained on the Backend concept: the diagnostic names the missing member's concept.
#include "versatil/versatil.hpp"
using namespace versatil;
struct no_qat_flag {
    static constexpr std::string_view name = "no_qat_flag";
    static constexpr bool is_dynamic = false;
    static constexpr device_set supported_device_types{device_type::cpu};
};
template <Backend B>
constexpr std::string_view name_of() { return B::name; }
static_assert(name_of<no_qat_flag>() == "no_qat_flag");
