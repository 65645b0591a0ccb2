// LibTorch's TorchScript headers, precompiled for the per-header translation units of the
// LibTorch layer. Only <torch/script.h>, which nearly every header includes: loading GCC's
// precompiled header is most of a small TU's time (an empty TU: 5.4 s with <torch/torch.h>
// beside it, 658 MB; 2.5 s without, 448 MB), and a header that needs the C++ front end's
// modules or optimisers must include them itself, which the per-header check then proves.
#include <torch/script.h>
