// Collectives across the devices of this process: one StableHLO collective replicated over the
// participating devices (replica i runs on devices[i] with inputs[i]), executed by XLA.
//
// This is how ranks that are threads of one process communicate (and, on GPU/TPU, the shape a
// multi-process collective takes too). A collective is always its own program: it first executes
// whatever the deferred modes hold, so ranks whose fused windows differ still meet here.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "exec/buffer_ref.h"
#include "graph/device_value.h"

namespace torchtpu::exec {

enum class CollectiveKind { kAllReduce, kAllGather, kReduceScatter, kAllToAll, kPermute };
enum class ReduceKind { kSum, kProduct, kMin, kMax, kBitAnd, kBitOr, kBitXor };

struct Collective {
  CollectiveKind kind;
  ReduceKind reduce = ReduceKind::kSum;                 // all_reduce, reduce_scatter
  std::vector<std::pair<int64_t, int64_t>> permutation;  // kPermute: (source, target) replicas
};

// Runs `c` over the flat contents of `inputs` (one storage per replica, all of one dtype and
// length, each on its own device). Returns each replica's result value (materialized, pending on
// the device): all_reduce and collective_permute keep the length, all_gather multiplies it by the
// replica count, reduce_scatter divides it, all_to_all exchanges equal chunks. A replica that is no
// permutation target receives zeros. `what` names the collective in errors.
std::vector<graph::ValuePtr> run_collective(const Collective& c, const std::vector<BufferRef*>& inputs,
                                            DType dtype, const std::string& what);

}  // namespace torchtpu::exec
