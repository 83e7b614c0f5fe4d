// Every flag's value is read strictly (runtime/cli/strict_values.h) and every refusal exits
// 2 naming the flag and what is wrong: CLI11 alone took "-1" as a seed of 2^64 - 1, clamped
// numbers past 64 bits, read "010" as octal and "inf" as a learning rate.
#include <catch2/catch.hpp>

#include <string>

#include "unit_test_support.h"

using tandem::testing::run_cli;

namespace {

std::string config(const std::string& name) { return std::string(TANDEM_SOURCE_DIR) + "/configs/" + name; }

}  // namespace

TEST_CASE("bad flag values exit 2 naming the flag and the value", "[cli][values]") {
  const std::string run = "run " + config("seed_mlp.yaml"), train = "train " + config("digits_mlp.yaml");
  struct Case {
    std::string args, message;
  } cases[] = {
      {train + " --lr inf", "error: --lr: 'inf' is not a finite number"},
      {train + " --lr nan", "error: --lr: 'nan' is not a finite number"},
      {train + " --lr 0x1p3", "error: --lr: '0x1p3' is not a finite number"},
      {train + " --validation-split nan", "error: --validation-split: 'nan' is not a finite number"},
      {train + " --seed -1", "error: --seed: '-1' is not a whole number >= 0"},
      {train + " --seed 18446744073709551616", "error: --seed: '18446744073709551616' is too large (at most 18446744073709551615)"},
      {run + " --seed 0x10", "error: --seed: '0x10' is not a whole number >= 0"},
      {run + " --batch 20000000000000000000", "error: --batch: '20000000000000000000' is too large (at most 9223372036854775807)"},
      {run + " --batch 3.0", "error: --batch: '3.0' is not a whole number"},
      {run + " --batch ' 3'", "error: --batch: ' 3' is not a whole number"},
      {run + " --repeat 1e3", "error: --repeat: '1e3' is not a whole number"},
      {train + " --epochs 99999999999999999999", "error: --epochs: '99999999999999999999' is too large"},
      {train + " --bench-steps -5", "error: --bench-steps: Value -5 not in range 1 to 1000000"},
      {train + " --bench-steps 0", "error: --bench-steps: Value 0 not in range 1 to 1000000"},
      {train + " --epochs 1 --bind seq=3", "error: --bind applies to --bench-steps only"},
      {run + " --sim-gpu-memory ''", "error: --sim-gpu-memory: an empty value is not allowed"},
      {run + " --weights ''", "error: --weights: an empty value is not allowed"},
      {"check ''", "error: model: an empty value is not allowed"},
      {run + " --place =cpu", "error: --place '=cpu' must be PATTERN=DEVICE with one '='"},
      {run + " --place 'block1=cpu=cuda:0'", "error: --place 'block1=cpu=cuda:0' must be PATTERN=DEVICE with one '='"},
      {run + " --place block1=gpu", "error: --place 'block1=gpu' must be PATTERN=DEVICE"},
      {run + " --place blok1=cpu",
       "error: --place 'blok1=cpu': the pattern matches no layer or block of model 'seed_mlp' (did you mean 'block1'?); "
       "its layers and blocks: block1, block2, block3"},
      {"plan " + config("seed_nested_dp.yaml") + " --sim-gpus 2 --place 'enc*=cpu'",
       "error: --place 'enc*=cpu': the pattern matches no layer or block"},
      {"rnu " + config("seed_mlp.yaml"),
       "error: 'rnu' is not a tandem command (did you mean 'run'?); the commands are check, run, train, evaluate, predict, devices, plan"},
      {"'ru\x01n'", "error: 'ru\\x01n' is not a tandem command (did you mean 'run'?)"},
      {run + " '--we\x1bights' x", "--we\\x1bights"},
  };
  for (const Case& c : cases) {
    INFO("tandem " << c.args);
    int code = 0;
    std::string out = run_cli(c.args, &code, 60);
    CHECK(code == 2);
    CHECK_THAT(out, Catch::Contains(c.message));
    CHECK(out.find('\x1b') == std::string::npos);
    CHECK(out.find('\x01') == std::string::npos);
  }
}

TEST_CASE("numbers are read in plain decimal, and good values still work", "[cli][values]") {
  int code = 0;
  // "010" is ten, not octal eight: the same output as --seed 10
  std::string a = run_cli("run " + config("seed_mlp.yaml") + " --seed 010 --json", &code, 60);
  REQUIRE(code == 0);
  std::string b = run_cli("run " + config("seed_mlp.yaml") + " --seed 10 --json", &code, 60);
  REQUIRE(code == 0);
  CHECK(a == b);
  std::string out = run_cli("run " + config("seed_mlp.yaml") + " --seed 18446744073709551615 --batch 2 --repeat 1", &code, 60);
  CHECK(code == 0);
  CHECK_THAT(out, Catch::Contains("seed 18446744073709551615"));
  out = run_cli("run " + config("seed_mlp.yaml") + " --place 'block*=cpu' --sim-gpus 1", &code, 60);
  CHECK(code == 0);
}
