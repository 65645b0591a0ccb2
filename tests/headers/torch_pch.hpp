// LibTorch's headers, precompiled for the per-header translation units of the LibTorch layer.
#include <torch/script.h>
#include <torch/torch.h>
