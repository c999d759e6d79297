#include "hlo/operators.h"

#include <stdexcept>

namespace torchtpu::hlo {

Builder& builder_of(const Value& v) {
  if (!v.builder) throw std::logic_error("hlo value " + v.name + " was made by no builder");
  return *v.builder;
}

Value constant_like(double value, const Value& like) { return builder_of(like).constant(value, like.type); }

namespace {

Value apply(BinaryOp op, const Value& a, const Value& b) { return builder_of(a).binary(op, a, b); }

}  // namespace

Value operator+(const Value& a, const Value& b) { return apply(BinaryOp::kAdd, a, b); }
Value operator-(const Value& a, const Value& b) { return apply(BinaryOp::kSubtract, a, b); }
Value operator*(const Value& a, const Value& b) { return apply(BinaryOp::kMultiply, a, b); }
Value operator/(const Value& a, const Value& b) { return apply(BinaryOp::kDivide, a, b); }
Value operator-(const Value& x) { return builder_of(x).unary(UnaryOp::kNegate, x); }

Value operator+(const Value& a, double b) { return a + constant_like(b, a); }
Value operator-(const Value& a, double b) { return a - constant_like(b, a); }
Value operator*(const Value& a, double b) { return a * constant_like(b, a); }
Value operator/(const Value& a, double b) { return a / constant_like(b, a); }
Value operator+(double a, const Value& b) { return constant_like(a, b) + b; }
Value operator-(double a, const Value& b) { return constant_like(a, b) - b; }
Value operator*(double a, const Value& b) { return constant_like(a, b) * b; }
Value operator/(double a, const Value& b) { return constant_like(a, b) / b; }

}  // namespace torchtpu::hlo
