// The CPU backend: the forward's operations on this machine's cores, through the thread
// pool, with the kernels of this folder (AVX-512, AVX2 or scalar, chosen at run time).
#pragma once
#include <memory>

#include "core/threadpool.h"
#include "kernels/backend.h"

namespace ridge::kernels {

std::unique_ptr<Backend> make_cpu_backend(ThreadPool& pool);

}  // namespace ridge::kernels
