// Runs a test body in one eager mode and restores the previous one after it.
#pragma once

#include "exec/executor.h"

namespace torchtpu::exec::testing {

class ModeScope {
 public:
  explicit ModeScope(Mode m) : previous_(mode()) { set_mode(m); }
  ~ModeScope() { set_mode(previous_); }

 private:
  Mode previous_;
};

}  // namespace torchtpu::exec::testing
