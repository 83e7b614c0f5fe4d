"""tandem.threads() and tandem.set_threads(): the cpu's threads from Python, as the CLI's
--threads sets them and `tandem devices` shows them (runtime/threads.h)."""
import subprocess
import sys

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


def test_torch_setting_its_threads_does_not_change_tandems(tmp_path):
    # torch sets the calling thread's OpenMP team when it is imported, and libgomp's setting
    # is shared by the process: Tandem computes with its own count regardless, and gives
    # torch's back after each call (python/src/compute_scope.h). A fresh process, so that
    # no earlier set_threads() chose for it.
    script = tmp_path / "torch_first.py"
    script.write_text(
        "import os, numpy, torch\n"
        "torch.set_num_threads(1)\n"
        "import tandem\n"
        "t = tandem.threads()\n"
        "expected = int(os.environ['OMP_NUM_THREADS']) if os.environ.get('OMP_NUM_THREADS') else t['usable_cores']\n"
        "assert t['threads'] == expected, t\n"
        "assert t['chosen_by'] != \"OpenMP's default\", t\n"
        "m = tandem.Model.from_yaml('name: m\\ninputs:\\n  x: {shape: [batch, 6]}\\nlayers:\\n"
        "  - {name: fc, op: linear, in_features: 6, out_features: 3}\\n')\n"
        "m.init_parameters(seed=1)\n"
        "x = numpy.random.default_rng().normal(size=(4, 6)).astype(numpy.float32)\n"
        "y = m(x)['fc']\n"
        "w, b = m.state_dict()['fc.weight'], m.state_dict()['fc.bias']\n"
        "assert numpy.allclose(y, x @ numpy.asarray(w).T + numpy.asarray(b), rtol=1e-5, atol=1e-5)\n"
        "assert torch.get_num_threads() == 1, torch.get_num_threads()\n"
        "print('ok', t['threads'])\n")
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.startswith("ok ")
