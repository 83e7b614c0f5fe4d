// "tandem rnu": CLI11 says only "A subcommand is required"; name the word and the nearest command.
#include <string>
#include <vector>

#include "graph/text_similarity.h"
#include "runtime/cli/commands.h"

namespace tandem::cli {

std::optional<std::string> unknown_command(const CLI::App& app, int argc, const char* const* argv) {
  if (argc < 2 || argv[1][0] == '-') return std::nullopt;  // options and no arguments: CLI11 answers
  const std::string word = argv[1];
  std::vector<std::string> names;
  std::string listed;
  for (const CLI::App* sub : app.get_subcommands({})) {
    if (sub->get_name() == word) return std::nullopt;
    names.push_back(sub->get_name());
    listed += (listed.empty() ? "" : ", ") + sub->get_name();
  }
  return "'" + word + "' is not a tandem command" + did_you_mean(word, names) + "; the commands are " + listed +
         " (tandem COMMAND --help says more)";
}

}  // namespace tandem::cli
