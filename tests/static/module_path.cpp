#include "versatil/core/module_path.hpp"

namespace {
using namespace versatil;
using enum path_rule;

// Syntax: "" or identifiers / indices joined by '.'.
static_assert(is_valid_module_path(""));
static_assert(is_valid_module_path("encoder") && is_valid_module_path("encoder.layers.0.attn"));
static_assert(is_valid_module_path("_private") && is_valid_module_path("layers.10") && is_valid_module_path("0"));
static_assert(check_module_path(".encoder").rule == component_must_not_be_empty);
static_assert(check_module_path("encoder.").rule == component_must_not_be_empty);
static_assert(check_module_path("encoder..0").rule == component_must_not_be_empty);
static_assert(check_module_path("encoder..0").position == 8);
static_assert(check_module_path("encoder.block/1").rule == component_must_be_identifier);
static_assert(is_valid_module_path("trunk_output.block1.block1-0"));  // torchvision's RegNet
static_assert(check_module_path("enc oder").rule == component_must_be_identifier);
static_assert(check_module_path("layers.0abc").rule == identifier_must_not_start_with_digit);
static_assert(check_module_path("layers.01").rule == index_must_not_have_leading_zero);

// contains: the path itself, its descendants, and everything for the whole model.
static_assert(contains("", "anything.at.all") && contains("", ""));
static_assert(contains("encoder", "encoder") && contains("encoder", "encoder.0.attn"));
static_assert(!contains("encoder", "encoder2") && !contains("encoder", "encode") && !contains("encoder.0", "encoder"));
static_assert(!contains("layers.1", "layers.10"));

// overlaps: same path, either is the whole model, or nested either way.
static_assert(overlaps("a", "a") && overlaps("", "a") && overlaps("a", "") && overlaps("a", "a.b") &&
              overlaps("a.b", "a"));
static_assert(!overlaps("a", "b") && !overlaps("a.b", "a.c") && !overlaps("layers.1", "layers.10"));

static_assert(depth("") == 0 && depth("a") == 1 && depth("a.0.b") == 3);
}  // namespace
