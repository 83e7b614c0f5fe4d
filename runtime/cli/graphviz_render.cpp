#include "runtime/cli/graphviz_render.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string_view>
#include <vector>

#include "core/error.h"

extern char** environ;

namespace tandem::cli {

std::string find_dot_program() {
  const char* path = std::getenv("PATH");
  if (!path) return "";
  std::string_view dirs(path);
  size_t start = 0;
  while (start <= dirs.size()) {
    const size_t colon = std::min(dirs.find(':', start), dirs.size());
    std::string dir(dirs.substr(start, colon - start));
    start = colon + 1;
    const std::string candidate = (dir.empty() ? std::string(".") : dir) + "/dot";
    if (::access(candidate.c_str(), X_OK) == 0 && !std::filesystem::is_directory(candidate)) return candidate;
  }
  return "";
}

void require_dot_program(const std::string& flag) {
  if (!find_dot_program().empty()) return;
  throw UserError(flag + " needs Graphviz's 'dot' program, which is not on PATH; install Graphviz "
                  "(apt-get install graphviz, or scripts/setup.sh), or write the plan with --dot FILE and render it "
                  "elsewhere");
}

void render_dot(const std::string& dot_text, const std::string& format, const std::string& path, const std::string& flag) {
  const std::string dot = find_dot_program();
  if (dot.empty()) require_dot_program(flag);
  // dot reads the graph from a file of ours and writes its complaints to another, so that
  // neither a pipe's buffer nor the terminal gets in the way.
  char dot_file[] = "/tmp/tandem_plan_XXXXXX";
  const int fd = ::mkstemp(dot_file);
  if (fd < 0) throw UserError(flag + ": cannot make a temporary file for Graphviz in /tmp");
  ::close(fd);
  const std::string errors_file = std::string(dot_file) + ".err";
  {
    std::ofstream out(dot_file);
    out << dot_text;
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, errors_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  std::vector<std::string> args = {dot, "-T" + format, "-o", path, dot_file};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  const int spawned = posix_spawn(&pid, dot.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  int status = 0;
  if (spawned == 0) ::waitpid(pid, &status, 0);
  std::ifstream errors(errors_file);
  std::stringstream said;
  said << errors.rdbuf();
  std::remove(dot_file);
  std::remove(errors_file.c_str());
  if (spawned != 0) throw UserError(flag + ": could not start Graphviz's " + dot);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::string why = said.str();
    while (!why.empty() && (why.back() == '\n' || why.back() == ' ')) why.pop_back();
    throw UserError(flag + " '" + path + "': Graphviz's dot failed" + (why.empty() ? std::string() : ": " + why));
  }
}

}  // namespace tandem::cli
