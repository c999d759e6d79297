// Arithmetic operators on values: `a * b + 1` emits the same ops as builder.binary calls.
//
// Operands must have equal shapes and dtypes (no implicit broadcasting or promotion: lowerings
// decide both explicitly). A double operand becomes a constant shaped like the other operand, in
// its dtype. The value's own builder emits the op, so no builder is passed around.
#pragma once

#include "hlo/builder.h"

namespace torchtpu::hlo {

Value operator+(const Value& a, const Value& b);
Value operator-(const Value& a, const Value& b);
Value operator*(const Value& a, const Value& b);
Value operator/(const Value& a, const Value& b);
Value operator-(const Value& x);

Value operator+(const Value& a, double b);
Value operator-(const Value& a, double b);
Value operator*(const Value& a, double b);
Value operator/(const Value& a, double b);
Value operator+(double a, const Value& b);
Value operator-(double a, const Value& b);
Value operator*(double a, const Value& b);
Value operator/(double a, const Value& b);

// The builder that made `v`; throws std::logic_error for a value no builder made.
Builder& builder_of(const Value& v);
// A constant shaped like `like`.
Value constant_like(double value, const Value& like);

}  // namespace torchtpu::hlo
