// Test helper: GoogleTest prints a buffer_state by its published name ("HOST_DIRTY") instead of its bytes.
#pragma once

#include <gpumem/buffer/buffer_state.hpp>

#include <ostream>

namespace gpumem {

// Found by GoogleTest through argument-dependent lookup, so it lives in the enum's namespace.
inline void PrintTo(buffer_state state, std::ostream* os) { *os << to_string(state); }

}  // namespace gpumem
