#!/usr/bin/python3
"""Checks that configs/transformer_encoder.yaml's module `encoder_layer`, as the oracle
builds it from Tandem's ops, is torch.nn.TransformerEncoderLayer itself: each repeat copy's
state_dict loads into torch's layer with no key missing or left over (strict), and both
compute the same, forward and gradients, in eval and in training mode (dropout 0).
The oracle cases then check Tandem against the op-by-op model.

    check_transformer_layer.py [CONFIG]      exit 0 when they agree
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import torch  # noqa: E402

import tandem_torch as tt  # noqa: E402


def main():
    cfg = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "..", "..", "configs", "transformer_encoder.yaml")
    torch.manual_seed(0)
    model, spec = tt.build_model(cfg)
    with torch.no_grad():  # move the zero-initialised biases so that every parameter matters
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))
    layers = []
    for k, block in model.encoder.named_children():
        ref = torch.nn.TransformerEncoderLayer(d_model=16, nhead=4, dim_feedforward=32, dropout=0.0,
                                               activation="relu", norm_first=False, batch_first=True)
        ref.load_state_dict(block.state_dict(), strict=True)
        layers.append(ref)
    ref_model = torch.nn.Sequential(*layers)
    worst = 0.0
    for training in (False, True):
        model.train(training)
        ref_model.train(training)
        x = torch.randn(3, 7, 16, requires_grad=True)
        ours = model({"x": x})["encoder"]
        x_ref = x.detach().clone().requires_grad_(True)
        theirs = ref_model(x_ref)
        g = torch.randn_like(ours)
        ours.backward(g)
        theirs.backward(g)
        worst = max(worst, (ours - theirs).abs().max().item(), (x.grad - x_ref.grad).abs().max().item())
        theirs_params = dict(ref_model.named_parameters())
        for name, p in model.encoder.named_parameters():
            worst = max(worst, (p.grad - theirs_params[name].grad).abs().max().item())
        model.zero_grad()
        ref_model.zero_grad()
    print("max abs difference vs torch.nn.TransformerEncoderLayer: %.3g" % worst)
    return 0 if worst < 1e-5 else 1


if __name__ == "__main__":
    sys.exit(main())
