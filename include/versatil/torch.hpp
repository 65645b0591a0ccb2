// The LibTorch layer: quantize TorchScript models with the core's backends (prepare,
// calibrate, convert, lower), measure the result, save it. Header-only, on top of LibTorch.
#pragma once

#include "versatil/torch/calibrate.hpp"
#include "versatil/torch/convert.hpp"
#include "versatil/torch/engine.hpp"
#include "versatil/torch/error.hpp"
#include "versatil/torch/lower.hpp"
#include "versatil/torch/measure.hpp"
#include "versatil/torch/observers.hpp"
#include "versatil/torch/prepare.hpp"
#include "versatil/torch/quantize.hpp"
#include "versatil/torch/report.hpp"
#include "versatil/torch/save.hpp"
#include "versatil/versatil.hpp"
