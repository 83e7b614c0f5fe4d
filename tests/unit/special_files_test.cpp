// Every path Tandem reads (model, weights, inputs, data, checkpoints) refuses what is not
// a regular file, by name, at once: a named pipe with no writer used to block open()
// forever, and /dev/zero never ends.
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "unit_test_support.h"

using tandem::testing::run_cli;

namespace {

std::string config(const std::string& name) { return std::string(TANDEM_SOURCE_DIR) + "/configs/" + name; }

/// A directory of named pipes, removed afterwards.
struct PipeDir {
  std::filesystem::path path = std::filesystem::temp_directory_path() /
                               ("tandem-pipes-" + std::to_string(getpid()));
  PipeDir() { std::filesystem::create_directories(path); }
  ~PipeDir() { std::filesystem::remove_all(path); }
  std::string fifo(const std::string& name) const {
    std::string p = (path / name).string();
    REQUIRE(::mkfifo(p.c_str(), 0600) == 0);
    return p;
  }
};

/// `tandem ARGS` exits 2 within 60 s, naming `path` and what it is.
void check_refused(const std::string& args, const std::string& path, const std::string& what) {
  INFO("tandem " << args);
  int code = 0;
  std::string out = run_cli(args, &code, 60);
  CHECK(code == 2);
  CHECK_THAT(out, Catch::Contains(path + ": cannot open: it is " + what + ", not a regular file"));
}

}  // namespace

TEST_CASE("named pipes are refused wherever a file is read", "[cli][files]") {
  PipeDir dir;
  const std::string mlp = config("seed_mlp.yaml"), digits = config("digits_mlp.yaml");
  const std::string fifo = "a named pipe (FIFO)";
  std::string p = dir.fifo("model.yaml");
  check_refused("check " + p, p, fifo);
  p = dir.fifo("weights.safetensors");
  check_refused("run " + mlp + " --weights " + p, p, fifo);
  p = dir.fifo("inputs.safetensors");
  check_refused("run " + mlp + " --inputs " + p, p, fifo);
  for (const char* name : {"data.csv", "data.csv.gz", "data.safetensors"}) {
    p = dir.fifo(name);
    check_refused("train " + digits + " --epochs 1 --data " + p, p, fifo);
  }
  p = dir.fifo("checkpoint.safetensors");
  check_refused("train " + digits + " --epochs 1 --resume " + p, p, fifo);
}

TEST_CASE("devices and directories are refused as files", "[cli][files]") {
  const std::string mlp = config("seed_mlp.yaml");
  check_refused("run " + mlp + " --weights /dev/zero", "/dev/zero", "a character device");
  check_refused("check /dev/null", "/dev/null", "a character device");
  check_refused("run " + mlp + " --inputs /tmp", "/tmp", "a directory");
}
