// The C++ API in a page: load a YAML model, give it weights, run it on named tensors.
//
//   build/examples/run_model configs/seed_mixed.yaml [--weights weights.safetensors]
//   TANDEM_SIM_GPUS=1 build/examples/run_model seed_mixed.yaml   (no GPU here; from any directory)
//
// Every input gets random values of the declared shape with batch = 4 (indices within
// the table that reads them); the outputs' shapes and first values are printed. Layers run
// where the model file puts them (seed_mixed.yaml: its GRU on cuda:0); model.to(cpu)
// would run them all on the cpu instead.
#include <CLI/CLI.hpp>
#include <cstdio>

#include "core/error.h"
#include "find_config.h"
#include "runtime/model.h"

int main(int argc, char** argv) {
  CLI::App app("Load a YAML model, give it weights and run it on random inputs of batch 4", "run_model");
  std::string path, weights;
  app.add_option("model", path, "the model's YAML file (also found in the source tree's configs/)")->required();
  app.add_option("--weights", weights, "a safetensors state_dict (default: torch's initialisation, seed 42)");
  CLI11_PARSE(app, argc, argv);
  try {
    tandem::Model model = tandem::Model::load(find_config(path));
    if (!weights.empty()) model.load_weights(weights);  // a PyTorch state_dict saved as safetensors
    else model.init_parameters(/*seed=*/42);            // torch's distributions, Tandem's generator

    // Inputs are tensors by graph-input name; here, random ones for batch = 4.
    tandem::Bindings sizes{{"batch", 4}};
    for (const std::string& symbol : model.graph().symbols()) sizes.emplace(symbol, 8);
    tandem::TensorMap inputs = model.random_inputs(sizes, /*seed=*/1);

    tandem::TensorMap outputs = model.forward(inputs);
    for (const auto& [name, tensor] : outputs) {
      std::printf("%s %s:", name.c_str(), tandem::shape_str(tensor.shape()).c_str());
      auto values = tensor.span<float>();
      for (size_t i = 0; i < values.size() && i < 6; ++i) std::printf(" %.4f", values[i]);
      std::printf("%s\n", values.size() > 6 ? " ..." : "");
    }
    return 0;
  } catch (const tandem::UserError& e) {  // bad file, shapes or weights: the message says which
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
}
