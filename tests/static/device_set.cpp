#include "versatil/core/device.hpp"

namespace {
using namespace versatil;
using enum device_type;

constexpr device_set cpu_cuda{cpu, cuda};
constexpr device_set cuda_xpu{cuda, xpu};

static_assert(cpu_cuda.contains(cpu) && cpu_cuda.contains(cuda) && !cpu_cuda.contains(mps));
static_assert((cpu_cuda & cuda_xpu) == device_set{cuda});
static_assert((cpu_cuda | cuda_xpu) == device_set{cpu, cuda, xpu});
static_assert(cpu_cuda.intersection(device_set{mps}).empty());
static_assert(device_set{}.empty() && device_set{}.size() == 0);
static_assert(cpu_cuda.size() == 2 && device_set::all().size() == all_device_types.size());
static_assert(device_set{cpu, cpu} == device_set{cpu});
static_assert(!(cpu_cuda == cuda_xpu));
static_assert(to_string(cpu) == "cpu" && to_string(cuda) == "cuda" && to_string(mps) == "mps" &&
              to_string(xpu) == "xpu");
static_assert(parse_device_type("xpu") == xpu && !parse_device_type("tpu"));
static_assert(to_string(mcu) == "mcu" && parse_device_type("mcu") == mcu && device_set::all().contains(mcu));

constexpr int count_members(device_set set) {
    int count = 0;
    set.for_each([&count](device_type) { ++count; });
    return count;
}
static_assert(count_members(device_set{cpu, mps, xpu}) == 3);
}  // namespace
