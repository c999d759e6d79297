// Cross-replica collectives. Each is compiled with num_replicas = N and run on N devices at once.
#include "hlo/attributes.h"
#include "hlo/builder.h"

namespace torchtpu::hlo {
namespace {

int64_t group_size(const Builder::ReplicaGroups& groups) {
  require(!groups.empty() && !groups[0].empty(), "replica groups must not be empty");
  return static_cast<int64_t>(groups[0].size());
}

std::string groups_attr(const Builder::ReplicaGroups& groups) {
  return "replica_groups = " + i64_matrix(groups);
}

}  // namespace

Value Builder::all_reduce(const Value& x, const ReplicaGroups& groups, const RegionBody& combine) {
  std::string body = region(scalar_pairs({x}, false), combine);
  return emit("stablehlo.all_reduce", {x}, {x.type}, groups_attr(groups), {body})[0];
}

Value Builder::all_gather(const Value& x, int64_t dimension, const ReplicaGroups& groups) {
  TensorType type = x.type;
  require(dimension >= 0 && dimension < type.rank(), "all_gather dimension out of range");
  type.dims[dimension] *= group_size(groups);
  return emit1("stablehlo.all_gather", {x}, type,
               "all_gather_dim = " + i64_attr(dimension) + ", " + groups_attr(groups));
}

Value Builder::reduce_scatter(const Value& x, int64_t dimension, const ReplicaGroups& groups,
                              const RegionBody& combine) {
  TensorType type = x.type;
  int64_t n = group_size(groups);
  require(dimension >= 0 && dimension < type.rank() && type.dims[dimension] % n == 0,
          "reduce_scatter dimension must divide by the group size");
  type.dims[dimension] /= n;
  std::string body = region(scalar_pairs({x}, false), combine);
  return emit("stablehlo.reduce_scatter", {x}, {type},
              "scatter_dimension = " + i64_attr(dimension) + ", " + groups_attr(groups), {body})[0];
}

Value Builder::all_to_all(const Value& x, int64_t split_dimension, int64_t concat_dimension,
                          const ReplicaGroups& groups) {
  TensorType type = x.type;
  int64_t n = group_size(groups);
  require(type.dims.at(split_dimension) % n == 0, "all_to_all split dimension must divide by N");
  type.dims[split_dimension] /= n;
  type.dims.at(concat_dimension) *= n;
  return emit1("stablehlo.all_to_all", {x}, type,
               "split_dimension = " + i64_attr(split_dimension) +
                   ", concat_dimension = " + i64_attr(concat_dimension) +
                   ", split_count = " + i64_attr(n) + ", " + groups_attr(groups));
}

Value Builder::collective_permute(const Value& x,
                                  const std::vector<std::pair<int64_t, int64_t>>& pairs) {
  std::vector<std::vector<int64_t>> rows;
  for (auto [src, dst] : pairs) rows.push_back({src, dst});
  return emit1("stablehlo.collective_permute", {x}, x.type,
               "source_target_pairs = " + i64_matrix(rows));
}

}  // namespace torchtpu::hlo
