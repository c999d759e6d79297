// Grid sampling, 2-D and 3-D, and its backward. Each output point reads the input where the grid
// says ([-1, 1], x first): unnormalized to pixels, moved into range by the padding mode, and
// interpolated over taps: the 2^d corners around it (bilinear / trilinear), the nearest pixel, or
// 4x4 bicubic taps (2-D, padding applied per tap). A tap gathers a channels-last row of the input
// (zeros outside). The backward scatters grad_output times each tap's weight back into those rows
// (grad_input) and sums grad_output times each tap's value times its weight's slope (grad_grid),
// chained through the padding and unnormalization slopes as CPU's kernels do.
#include <array>
#include <optional>
#include <vector>

#include "aten/lowering.h"
#include "aten/ops/cubic.h"
#include "aten/ops/math.h"

namespace torchtpu::aten {
namespace {

using hlo::Builder;

enum Padding { kZeros = 0, kBorder = 1, kReflection = 2 };
enum Interpolation { kBilinear = 0, kNearest = 1, kBicubic = 2 };

// A coordinate and its derivative with respect to the one it was computed from.
struct Coordinate {
  Value at, slope;
};

// Folds u into [twice_low / 2, twice_high / 2] by reflecting at the edges (slope +-1).
Coordinate reflect(Math& m, const Value& u, double twice_low, double twice_high) {
  if (twice_low == twice_high) return {m.k(0, u), m.k(0, u)};
  double low = twice_low / 2, span = (twice_high - twice_low) / 2;
  Value shifted = m.sub(u, m.k(low, u));
  Value distance = m.b.unary(UnaryOp::kAbs, shifted);
  Value extra = m.b.binary(BinaryOp::kRemainder, distance, m.k(span, u));
  Value flips = m.b.unary(UnaryOp::kFloor, m.div(distance, m.k(span, u)));
  Value half = m.b.unary(UnaryOp::kFloor, m.mul(flips, m.k(0.5, u)));
  Value even = m.b.compare(Compare::kEQ, flips, m.mul(half, m.k(2, u)));
  Value at = m.b.select(even, m.add(extra, m.k(low, u)), m.add(m.sub(m.k(span, u), extra), m.k(low, u)));
  Value sign = m.b.select(m.b.compare(Compare::kLT, shifted, m.k(0, u)), m.k(-1, u), m.k(1, u));
  return {at, m.b.select(even, sign, m.mul(sign, m.k(-1, u)))};
}

// u with the padding mode applied (PyTorch's compute_coordinates): clipped to [0, size - 1]
// (slope 0 outside) after reflecting for reflection padding.
Coordinate padded(Math& m, const Value& u, int64_t size, int64_t padding, bool align) {
  if (padding == kZeros) return {u, m.k(1, u)};
  Coordinate c{u, m.k(1, u)};
  if (padding == kReflection) c = align ? reflect(m, u, 0, 2.0 * (size - 1)) : reflect(m, u, -1, 2.0 * size - 1);
  Value limit = m.k(static_cast<double>(size - 1), u);
  Value inside = m.b.binary(BinaryOp::kAnd, m.b.compare(Compare::kGE, c.at, m.k(0, u)), m.b.compare(Compare::kLE, c.at, limit));
  return {m.b.clamp(m.k(0, u), c.at, limit), m.b.select(inside, c.slope, m.k(0, u))};
}

// A grid value in [-1, 1] in pixels of a dimension of `size`.
Coordinate unnormalized(Math& m, const Value& g, int64_t size, bool align) {
  if (align) {
    double half = (static_cast<double>(size) - 1) / 2;
    return {m.mul(m.add(g, m.k(1, g)), m.k(half, g)), m.k(half, g)};
  }
  return {m.div(m.sub(m.mul(m.add(g, m.k(1, g)), m.k(static_cast<double>(size), g)), m.k(1, g)), m.k(2, g)),
          m.k(static_cast<double>(size) / 2, g)};
}

// One tap: integer-valued coordinates (x first), its weight and the weight's slope along each
// coordinate.
struct Tap {
  std::vector<Value> at;
  Value weight;
  std::vector<Value> slopes;
};

// The sampling of one call: the input as rows, the output points, the taps and the chain slopes
// from each tap coordinate back to the grid.
struct Sampler {
  Math m;
  int64_t spatial, points, channels;
  std::vector<int64_t> in;   // input spatial sizes, x (last) first
  Value rows;                // [N * prod(in), C]
  Value base;                // [points]: the first row of each point's batch element
  std::vector<Tap> taps;
  std::vector<Value> chain;  // per coordinate, [points]
  bool bicubic;
  std::array<Value, 4> cubic_x, cubic_y;  // bicubic: the taps' weights along x and y

  // input [N, C, *S], grid [N, *O, d]
  Sampler(Builder& b, const Value& input, const Value& grid, int64_t interpolation, int64_t padding, bool align,
          std::optional<DType> rounding = std::nullopt)
      : m{b, rounding}, spatial(input.type.rank() - 2), channels(input.type.dims[1]), bicubic(interpolation == kBicubic) {
    int64_t n = input.type.dims[0], pixels = 1;
    points = grid.type.element_count() / spatial;
    for (int64_t d = 0; d < spatial; ++d) in.push_back(input.type.dims[input.type.rank() - 1 - d]);
    for (int64_t size : in) pixels *= size;
    std::vector<int64_t> to_last{0};
    for (int64_t d = 2; d < input.type.rank(); ++d) to_last.push_back(d);
    to_last.push_back(1);
    rows = b.reshape(b.transpose(input, to_last), {n * pixels, channels});
    Value batch = b.reshape(b.iota({DType::kS64, {n, points / std::max<int64_t>(n, 1)}}, 0), {points});
    base = batch * b.constant_int(pixels, batch.type);
    Value flat = b.reshape(grid, {points, spatial});
    std::vector<Coordinate> u;
    for (int64_t k = 0; k < spatial; ++k)
      u.push_back(unnormalized(m, b.reshape(b.slice(flat, {0, k}, {points, k + 1}, {1, 1}), {points}), in[k], align));
    if (bicubic) {
      bicubic_taps(u, padding, align);
      return;
    }
    std::vector<Coordinate> g;
    for (int64_t k = 0; k < spatial; ++k) {
      g.push_back(padded(m, u[k].at, in[k], padding, align));
      chain.push_back(m.mul(g[k].slope, u[k].slope));
    }
    if (interpolation == kNearest) {
      Tap t{{}, m.k(1, g[0].at), {}};
      for (int64_t k = 0; k < spatial; ++k) {
        t.at.push_back(b.unary(UnaryOp::kRoundNearestEven, g[k].at));
        t.slopes.push_back(m.k(0, g[k].at));
      }
      taps.push_back(t);
    } else {
      corner_taps(g);
    }
  }

  // The 2^d corners around g, weighted by the products of 1 - frac or frac per coordinate.
  void corner_taps(const std::vector<Coordinate>& g) {
    std::vector<Value> low, frac;
    for (const Coordinate& c : g) {
      low.push_back(m.b.unary(UnaryOp::kFloor, c.at));
      frac.push_back(m.sub(c.at, low.back()));
    }
    for (int64_t corner = 0; corner < (int64_t{1} << spatial); ++corner) {
      Tap t;
      std::vector<Value> factors;
      for (int64_t k = 0; k < spatial; ++k) {
        bool high = (corner >> k) & 1;
        t.at.push_back(high ? m.add(low[k], m.k(1, low[k])) : low[k]);
        factors.push_back(high ? frac[k] : m.sub(m.k(1, frac[k]), frac[k]));
      }
      for (int64_t k = 0; k <= spatial; ++k) {  // the weight (k = spatial), then each slope
        Value product = k < spatial ? m.k(((corner >> k) & 1) ? 1 : -1, frac[0]) : m.k(1, frac[0]);
        for (int64_t j = 0; j < spatial; ++j)
          if (j != k) product = m.mul(product, factors[j]);
        if (k < spatial) t.slopes.push_back(product);
        else t.weight = product;
      }
      taps.push_back(t);
    }
  }

  // 4x4 taps at integer offsets -1..2 around the unpadded position, each padded on its own.
  void bicubic_taps(const std::vector<Coordinate>& u, int64_t padding, bool align) {
    Value x0 = m.b.unary(UnaryOp::kFloor, u[0].at), y0 = m.b.unary(UnaryOp::kFloor, u[1].at);
    cubic_x = cubic_weights(m, m.sub(u[0].at, x0));
    cubic_y = cubic_weights(m, m.sub(u[1].at, y0));
    auto sx = cubic_slopes(m, m.sub(u[0].at, x0)), sy = cubic_slopes(m, m.sub(u[1].at, y0));
    chain = {u[0].slope, u[1].slope};
    for (int j = 0; j < 4; ++j)
      for (int i = 0; i < 4; ++i) {
        Value xi = padded(m, m.add(x0, m.k(i - 1, x0)), in[0], padding, align).at;
        Value yj = padded(m, m.add(y0, m.k(j - 1, y0)), in[1], padding, align).at;
        taps.push_back({{xi, yj}, m.mul(cubic_x[i], cubic_y[j]), {m.mul(sx[i], cubic_y[j]), m.mul(cubic_x[i], sy[j])}});
      }
  }

  // The tap's input row per point, and whether it lies inside the input.
  std::pair<Value, Value> row_of(const Tap& t) {
    Builder& b = m.b;
    Value row = base, inside = b.constant(1, {DType::kBool, {points}});
    int64_t stride = 1;
    for (int64_t k = 0; k < spatial; ++k) {
      Value i = b.convert(t.at[k], DType::kS64);
      inside = b.binary(BinaryOp::kAnd, inside,
                        b.binary(BinaryOp::kAnd, b.compare(Compare::kGE, i, b.constant(0, i.type)),
                                 b.compare(Compare::kLT, i, b.constant_int(in[k], i.type))));
      Value clamped = b.clamp(b.constant(0, i.type), i, b.constant_int(in[k] - 1, i.type));
      row = row + clamped * b.constant_int(stride, i.type);
      stride *= in[k];
    }
    return {row, inside};
  }

  // The tap's values [points, C], zeros outside the input.
  Value sample(const Tap& t) {
    Builder& b = m.b;
    auto [row, inside] = row_of(t);
    Value picked = b.gather(rows, b.reshape(row, {points, 1}), {{1}, {0}, {0}, 1}, {1, channels}, {points, channels});
    return b.select(b.broadcast_in_dim(inside, picked.type.dims, {0}), picked, m.k(0, picked));
  }

  Value per_point(const Value& v) { return m.b.broadcast_in_dim(v, {points, channels}, {0}); }
};

// [points, C] back to [N, C, *O] (the grid's output shape).
Value to_output(Builder& b, const Value& v, const hlo::TensorType& grid) {
  std::vector<int64_t> dims(grid.dims.begin(), grid.dims.end() - 1), back{0};
  dims.push_back(v.type.dims[1]);
  back.push_back(static_cast<int64_t>(dims.size()) - 1);
  for (size_t d = 1; d + 1 < dims.size(); ++d) back.push_back(static_cast<int64_t>(d));
  return b.transpose(b.reshape(v, dims), back);
}

// The sampled values [points, C], summed in CPU's order: taps in corner order; bicubic as
// separable passes (each row of 4 taps along x, then the 4 rows along y).
Value interpolated(Sampler& s) {
  Math& m = s.m;
  auto weighted_sum = [&](const std::vector<Value>& values, const auto& weight) {
    Value sum = m.mul(s.per_point(weight(0)), values[0]);
    for (size_t i = 1; i < values.size(); ++i) sum = m.add(sum, m.mul(s.per_point(weight(i)), values[i]));
    return sum;
  };
  if (!s.bicubic) {
    std::vector<Value> values;
    for (const Tap& t : s.taps) values.push_back(s.sample(t));
    return weighted_sum(values, [&](size_t i) { return s.taps[i].weight; });
  }
  std::vector<Value> rows;
  for (size_t j = 0; j < 4; ++j) {
    std::vector<Value> row;
    for (size_t i = 0; i < 4; ++i) row.push_back(s.sample(s.taps[4 * j + i]));
    rows.push_back(weighted_sum(row, [&](size_t i) { return s.cubic_x[i]; }));
  }
  return weighted_sum(rows, [&](size_t j) { return s.cubic_y[j]; });
}

// grid_sampler_{2,3}d(input, grid, interpolation, padding, align_corners). CPU's bfloat16/float16
// kernels compute in the dtype: every step (coordinates, weights, each product and sum) is rounded
// to it, as here.
Values grid_sampler(LoweringContext& c) {
  DType dtype = c.out().dtype, acc = accumulator(dtype);
  Value input = cast(c.b, c.input_uncast(0), acc), grid = cast(c.b, c.input_uncast(1), acc);
  Sampler s(c.b, input, grid, c.arg(2).toInt(), c.arg(3).toInt(), c.arg(4).toBool(),
            low_precision(dtype));
  return {cast(c.b, to_output(c.b, interpolated(s), grid.type), dtype)};
}

// grid_sampler_{2,3}d_backward(grad_output, input, grid, interpolation, padding, align_corners,
// output_mask) -> (grad_input, grad_grid)
Values grid_sampler_backward(LoweringContext& c) {
  Builder& b = c.b;
  DType acc = accumulator(c.out(0).dtype);
  Value input = cast(b, c.input_uncast(1), acc), grid = cast(b, c.input_uncast(2), acc);
  Sampler s(b, input, grid, c.arg(3).toInt(), c.arg(4).toInt(), c.arg(5).toBool());
  Math& m = s.m;
  Value go = cast(b, c.input_uncast(0), acc);  // [N, C, *O] -> [points, C]
  std::vector<int64_t> to_last{0};
  for (int64_t d = 2; d < go.type.rank(); ++d) to_last.push_back(d);
  to_last.push_back(1);
  go = b.reshape(b.transpose(go, to_last), {s.points, s.channels});
  Value grad_rows = b.constant(0, s.rows.type);
  std::vector<Value> grad_coordinate(s.spatial, b.constant(0, {acc, {s.points}}));
  int64_t total_rows = s.rows.type.dims[0];
  for (const Tap& t : s.taps) {
    auto [row, inside] = s.row_of(t);
    Value target = b.select(inside, row, b.constant_int(total_rows, row.type));  // outside: dropped
    grad_rows = b.scatter(grad_rows, b.reshape(target, {s.points, 1}), m.mul(go, s.per_point(t.weight)),
                          {{1}, {0}, {0}, 1}, combine_with(BinaryOp::kAdd));
    Value along = m.sum(m.mul(go, s.sample(t)), {1});  // grad_output . tap value, per point
    for (int64_t k = 0; k < s.spatial; ++k) grad_coordinate[k] = m.add(grad_coordinate[k], m.mul(along, t.slopes[k]));
  }
  std::vector<int64_t> back{0, input.type.rank() - 1};
  for (int64_t d = 1; d + 1 < input.type.rank(); ++d) back.push_back(d);
  std::vector<int64_t> channels_last{input.type.dims[0]};
  for (int64_t d = 2; d < input.type.rank(); ++d) channels_last.push_back(input.type.dims[d]);
  channels_last.push_back(s.channels);
  Value grad_input = b.transpose(b.reshape(grad_rows, channels_last), back);
  std::vector<Value> columns;
  for (int64_t k = 0; k < s.spatial; ++k) columns.push_back(b.reshape(m.mul(grad_coordinate[k], s.chain[k]), {s.points, 1}));
  Value grad_grid = b.reshape(b.concatenate(columns, 1), grid.type.dims);
  return {cast(b, grad_input, c.out(0).dtype), cast(b, grad_grid, c.out(1).dtype)};
}

}  // namespace

TORCHTPU_LOWERINGS(grid_sample) {
  register_lowering({"grid_sampler_2d", "grid_sampler_2d.out", "grid_sampler_3d", "grid_sampler_3d.out"}, grid_sampler);
  register_lowering({"grid_sampler_2d_backward", "grid_sampler_2d_backward.out", "grid_sampler_3d_backward",
                     "grid_sampler_3d_backward.out"},
                    grid_sampler_backward);
}

}  // namespace torchtpu::aten
