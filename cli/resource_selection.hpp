// Which replayable resources a command runs (`--resource a,b` and `--simulate`): shared by `gpumem replay`,
// `gpumem report`, `gpumem bench` and `gpumem demo`, so they accept and reject the same names with the same
// messages.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gpumem::cli {

/**
 * @brief The resources named in `list` (comma-separated; repeats dropped), or with no list every replayable
 * resource (only the simulatable ones with `simulate`), in registry order.
 * @throws std::invalid_argument for an unknown name, an empty list, or a resource that cannot be simulated
 *         when `simulate`; the message lists the valid names.
 */
[[nodiscard]] std::vector<std::string> select_replay_resources(std::optional<std::string_view> list, bool simulate);

}  // namespace gpumem::cli
