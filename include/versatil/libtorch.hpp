// The LibTorch layer: quantize TorchScript models with the core's backends, measure the result,
// save it. Header-only, on top of LibTorch. Its rooms, in the order a model passes them
// (docs/layout.md): plan/, stages/ (with observers/, passes/, accuracy/), analysis/, files/;
// torchscript/ serves them all; export/ (firmware), distributed/ and demo/ are not included here.
#pragma once

#include "versatil/libtorch/accuracy/bias_correction.hpp"
#include "versatil/libtorch/accuracy/equalize.hpp"
#include "versatil/libtorch/accuracy/adaround.hpp"
#include "versatil/libtorch/accuracy/gptq.hpp"
#include "versatil/libtorch/analysis/accuracy_target.hpp"
#include "versatil/libtorch/analysis/measure.hpp"
#include "versatil/libtorch/analysis/report.hpp"
#include "versatil/libtorch/error.hpp"
#include "versatil/libtorch/files/cleanup_on_signals.hpp"
#include "versatil/libtorch/files/output_file.hpp"
#include "versatil/libtorch/files/save.hpp"
#include "versatil/libtorch/observers/observers.hpp"
#include "versatil/libtorch/passes/inference_graph.hpp"
#include "versatil/libtorch/passes/shared_types.hpp"
#include "versatil/libtorch/plan/backend_lowering.hpp"
#include "versatil/libtorch/plan/plan.hpp"
#include "versatil/libtorch/stages/calibrate.hpp"
#include "versatil/libtorch/stages/convert.hpp"
#include "versatil/libtorch/stages/lower.hpp"
#include "versatil/libtorch/stages/prepare.hpp"
#include "versatil/libtorch/stages/sequence.hpp"
#include "versatil/libtorch/torchscript/batch.hpp"
#include "versatil/libtorch/torchscript/engine.hpp"
#include "versatil/libtorch/torchscript/layer_graph.hpp"
#include "versatil/libtorch/torchscript/layer_ops.hpp"
#include "versatil/libtorch/torchscript/metrics.hpp"
#include "versatil/versatil.hpp"
