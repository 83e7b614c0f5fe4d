"""tandem.threads() and tandem.set_threads(): the cpu's threads from Python, as the CLI's
--threads sets them and `tandem devices` shows them (runtime/threads.h)."""
import numpy
import pytest

import tandem


def test_threads_are_set_reported_and_bounded(tmp_path):
    start = tandem.threads()
    assert start["threads"] >= 1 and start["usable_cores"] >= 1
    # the package chose a short spin before OpenMP loaded (ctest sets no policy)
    assert start["wait_policy"] == "spin 1000 rounds, then sleep (GOMP_SPINCOUNT=1000)"
    model_file = tmp_path / "m.yaml"
    model_file.write_text("name: m\ninputs:\n  x: {shape: [batch, 6]}\nlayers:\n"
                          "  - {name: fc, op: linear, in_features: 6, out_features: 3}\n")
    x = numpy.random.default_rng().normal(size=(5, 6)).astype(numpy.float32)
    outputs = []
    for threads in (1, 2):
        tandem.set_threads(threads)
        assert tandem.threads()["threads"] == threads
        assert tandem.threads()["chosen_by"] == "set_threads()"
        model = tandem.Model.load(str(model_file))
        model.init_parameters(seed=3)
        outputs.append(model(x)["fc"])
    assert numpy.allclose(outputs[0], outputs[1], rtol=1e-6, atol=1e-6)
    for bad in (0, -1, 5000):
        with pytest.raises(tandem.ModelError, match="set_threads"):
            tandem.set_threads(bad)
