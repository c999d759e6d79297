#include "exec/byte_size.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>

namespace torchtpu::exec {

std::optional<int64_t> parse_byte_size(const std::string& text) {
  static const std::map<std::string, double> kUnits = {
      {"", 1},     {"b", 1},        {"kb", 1e3},     {"mb", 1e6},     {"gb", 1e9},         {"tb", 1e12},
      {"kib", 1024.0}, {"mib", 1048576.0}, {"gib", 1073741824.0}, {"tib", 1099511627776.0}};
  const char* begin = text.c_str();
  char* end = nullptr;
  double number = std::strtod(begin, &end);
  if (end == begin || !std::isfinite(number) || number < 0) return std::nullopt;
  std::string unit;
  for (const char* c = end; *c; ++c)
    if (!std::isspace(static_cast<unsigned char>(*c))) unit += static_cast<char>(std::tolower(*c));
  auto it = kUnits.find(unit);
  if (it == kUnits.end() || number * it->second > 9.2e18) return std::nullopt;
  return static_cast<int64_t>(number * it->second);
}

std::string format_bytes(int64_t bytes) {
  static const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB"};
  if (bytes < 1024) return std::to_string(bytes) + " B";
  double value = static_cast<double>(bytes) / 1024;
  int unit = 0;
  while (value >= 1024 && unit < 3) value /= 1024, ++unit;
  char out[32];
  std::snprintf(out, sizeof(out), "%.2f %s", value, kUnits[unit]);
  return out;
}

}  // namespace torchtpu::exec
