// expect-error: versatil::Backend: the type lacks 'supported_device_types'
#include "versatil/versatil.hpp"
using namespace versatil;
struct deviceless {
    static constexpr std::string_view name = "deviceless";
    static constexpr bool is_dynamic = false, is_qat = false;
    static backend_quantizer create_quantizer(std::string_view);
    static void environment_context();
    static void activate_environment();
};
static_assert(!Target<"head", deviceless>::is_exclude);
