// The staged copies' private parts that tests reach (staged_copy.cpp; the public API is transfer.hpp).
#pragma once

#include <gpumem/transfer.hpp>

namespace gpumem::detail {

/**
 * @brief The configuration the environment asks for: the defaults, with GPUMEM_STAGING_CHUNK and
 * GPUMEM_COPY_THREADS applied where set and not empty. Read afresh on every call (get_transfer_config()
 * calls it once).
 * @throws gpumem::logic_error naming the variable and its value when one is malformed or out of range.
 */
[[nodiscard]] transfer_config transfer_config_from_environment();

}  // namespace gpumem::detail
