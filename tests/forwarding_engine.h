// The tests' decorator base: the engine ForwardingEngine (server/engine/
// forwarding_engine.h) over an engine it owns, so that a test engine
// overrides only the calls it records or changes, or the parts it has.
#pragma once

#include <memory>
#include <utility>

#include "server/engine/forwarding_engine.h"

namespace overlap {

namespace internal {
// Holds the wrapped engine; a base listed before engine::ForwardingEngine, so
// that it is built first.
struct OwnedEngine {
  explicit OwnedEngine(std::unique_ptr<engine::Engine> engine) : owned(std::move(engine)) {}
  std::unique_ptr<engine::Engine> owned;
};
}  // namespace internal

class ForwardingEngine : private internal::OwnedEngine, public engine::ForwardingEngine {
 public:
  explicit ForwardingEngine(std::unique_ptr<engine::Engine> inner)
      : internal::OwnedEngine(std::move(inner)), engine::ForwardingEngine(*owned) {}

 protected:
  engine::Engine& inner() { return *owned; }
};

}  // namespace overlap
