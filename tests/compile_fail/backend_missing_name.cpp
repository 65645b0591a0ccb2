// expect-error: versatil::Backend: the type lacks 'name'
#include "versatil/versatil.hpp"
using namespace versatil;
struct nameless : backend_policy<nameless> {
    static constexpr bool is_dynamic = false, is_qat = false;
    static constexpr device_set supported_device_types{device_type::cpu};
};
static_assert(!Target<"head", nameless>::is_exclude);
