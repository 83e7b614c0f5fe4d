#include "runtime/devices/backend_capabilities.h"

#include "backends/kernel.h"
#include "core/error.h"

namespace tandem {
namespace {

Shape concrete(const SymShape& shape, const Bindings& bindings) {
  Shape out;
  for (const Dim& d : shape) out.push_back(d.evaluate(bindings).value_or(1));
  return out;
}

// What the layer's kernel would be made for at these symbol values (an unbound one as 1).
KernelSpec kernel_spec_of(const Graph& graph, const Node& node, const Bindings& bindings) {
  KernelSpec spec;
  spec.op = node.op;
  spec.attrs = &node.attrs;
  spec.precision = layer_precision(graph, node);
  for (int v : node.inputs) spec.inputs.push_back({concrete(graph.values[v].type.shape, bindings), graph.values[v].type.dtype});
  for (const ParamSpec& p : node.params) spec.params.push_back({p.shape, p.dtype});
  spec.outputs.push_back({concrete(graph.values[node.output].type.shape, bindings), graph.values[node.output].type.dtype});
  return spec;
}

}  // namespace

void ask_backends(PlacementPolicy& policy, DeviceRegistry& registry) {
  policy.cannot_run = [&registry](Device device, const Graph& graph, const Node& node,
                                  const Bindings& bindings) -> std::string {
    if (node.schema->is_view || !registry.has(device)) return {};  // views run nowhere; placement names missing devices
    return registry.backend(device).cannot_run(kernel_spec_of(graph, node, bindings));
  };
  policy.runs_in = [&registry](Device device, const Graph& graph, const Node& node,
                               const Bindings& bindings) -> PrecisionChoice {
    const Precision asked = layer_precision(graph, node);
    if (node.schema->is_view || !registry.has(device) || asked == Precision::fp32) return {asked, {}};
    return registry.backend(device).runs_in(kernel_spec_of(graph, node, bindings));
  };
  // The kernel itself says (one source of truth). Made at the plan's shapes, which in
  // training are the step's: the cpu caches its primitives by shape, and the executor's
  // kernels reuse what these built.
  policy.backward_reads = [&registry](Device device, const Graph& graph, const Node& node,
                                      const Bindings& bindings) -> std::vector<bool> {
    if (node.schema->is_view || !registry.has(device)) return {};
    KernelChoice choice;
    try {
      choice = registry.backend(device).make_kernel(kernel_spec_of(graph, node, bindings));
    } catch (const UserError&) {
      return {};  // the executor's own kernel reports it, with the layer's name
    }
    if (!choice.kernel) return {};
    std::vector<bool> reads;
    for (size_t k = 0; k < node.inputs.size(); ++k) reads.push_back(choice.kernel->backward_reads_input(k));
    reads.push_back(choice.kernel->backward_reads_output());
    return reads;
  };
}

}  // namespace tandem
