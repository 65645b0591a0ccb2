// expect-error: versatil::Backend: the type lacks 'create_quantizer
#include "versatil/versatil.hpp"
using namespace versatil;
struct incomplete {
    static constexpr std::string_view name = "incomplete";
    static constexpr bool is_dynamic = false, is_qat = false;
    static constexpr device_set supported_device_types{device_type::cpu};
    static void environment_context();
    static void activate_environment();
};
static_assert(!Target<"head", incomplete>::is_exclude);
