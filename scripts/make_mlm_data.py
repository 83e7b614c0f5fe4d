#!/usr/bin/python3
"""Writes the synthetic masked-token dataset that configs/bert_mini.yaml trains on: a
safetensors file with three int64 tensors of shape [samples, seq]:

- `tokens`: each sequence repeats a random pattern of --min-period to --max-period tokens
  drawn from ids 2 .. vocab-1; about --mask-rate of its positions (at least one) are
  chosen for prediction and, as BERT does, 80% of those read MASK (id 1), 10% a random
  token and 10% their own token (--bert-mix 0.8,0.1,0.1; 1,0,0 masks them all);
- `positions`: 0 .. seq-1 in every row (the learned position embedding's indices);
- `targets`: the original token at the chosen positions, -100 (ignored) elsewhere.

    scripts/make_mlm_data.py OUT.safetensors [--samples 4096] [--seq 32] [--vocab 64]
                             [--min-period 2] [--max-period 6] [--mask-rate 0.15]
                             [--bert-mix 0.8,0.1,0.1] [--seed 0]

A chosen token is predictable from its context: the same token stands one period away
(unless that one is chosen too), so a model that finds the period scores it near
certainty, and one that only sees which tokens the sequence holds scores about
ln(period). Knowing nothing, ln(vocab - 2). Needs only the Python standard library.
Exit code 2 with a message on bad settings.
"""
import argparse
import random
import sys

from safetensors_writer import write_safetensors  # scripts/, beside this file

MASK = 1
IGNORE = -100


class DataError(Exception):
    pass


def corrupted(token, mix, vocab, rng):
    """What a chosen position reads: MASK, a random token or itself, with the odds of `mix`."""
    u = rng.random()
    if u < mix[0]:
        return MASK
    if u < mix[0] + mix[1]:
        return rng.randrange(2, vocab)
    return token


def sequences(samples, seq, vocab, min_period, max_period, mask_rate, mix, rng):
    """(tokens, positions, targets) as flat lists of samples·seq ints."""
    tokens, positions, targets = [], [], []
    n_chosen = max(1, round(mask_rate * seq))
    for _ in range(samples):
        period = rng.randint(min_period, max_period)
        pattern = [rng.randrange(2, vocab) for _ in range(period)]
        row = [pattern[i % period] for i in range(seq)]
        chosen = set(rng.sample(range(seq), n_chosen))
        tokens.extend(corrupted(t, mix, vocab, rng) if i in chosen else t for i, t in enumerate(row))
        positions.extend(range(seq))
        targets.extend(t if i in chosen else IGNORE for i, t in enumerate(row))
    return tokens, positions, targets


def parse_mix(text):
    """--bert-mix: three fractions (mask, random, keep) summing to 1."""
    try:
        mix = [float(x) for x in text.split(",")]
    except ValueError:
        mix = []
    if len(mix) != 3 or any(m < 0 for m in mix) or abs(sum(mix) - 1) > 1e-9:
        raise DataError("--bert-mix must be three non-negative fractions summing to 1 (mask, random, keep), got %r"
                        % text)
    return mix


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", metavar="OUT", help="the output file")
    ap.add_argument("--samples", type=int, default=4096, help="sequences to write")
    ap.add_argument("--seq", type=int, default=32, help="sequence length (the model's seq dimension)")
    ap.add_argument("--vocab", type=int, default=64, help="ids are below this (num_embeddings); 0 and 1 are reserved")
    ap.add_argument("--min-period", type=int, default=2, help="shortest repeated pattern")
    ap.add_argument("--max-period", type=int, default=6, help="longest repeated pattern")
    ap.add_argument("--mask-rate", type=float, default=0.15, help="fraction of positions chosen for prediction (at least one)")
    ap.add_argument("--bert-mix", default="0.8,0.1,0.1",
                    help="of the chosen positions, the fractions that read MASK, a random token, their own token")
    ap.add_argument("--seed", type=int, default=0, help="the generator's seed")
    args = ap.parse_args(argv)
    try:
        if args.samples < 1 or args.seq < 2:
            raise DataError("--samples must be positive and --seq at least 2")
        if args.vocab < 3:
            raise DataError("--vocab must be at least 3 (ids 0 and 1 are reserved, 1 is MASK)")
        if not 1 <= args.min_period <= args.max_period <= args.seq:
            raise DataError("need 1 <= --min-period <= --max-period <= --seq")
        if not 0.0 < args.mask_rate < 1.0:
            raise DataError("--mask-rate must be in (0, 1)")
        mix = parse_mix(args.bert_mix)
        rng = random.Random(args.seed)
        tokens, positions, targets = sequences(args.samples, args.seq, args.vocab, args.min_period,
                                               args.max_period, args.mask_rate, mix, rng)
        shape = [args.samples, args.seq]
        write_safetensors(args.out, {"tokens": (shape, tokens), "positions": (shape, positions),
                                     "targets": (shape, targets)},
                          {"seq": str(args.seq), "vocab": str(args.vocab), "mask_id": str(MASK),
                           "periods": "%d-%d" % (args.min_period, args.max_period),
                           "mask_rate": str(args.mask_rate), "bert_mix": ",".join("%g" % m for m in mix),
                           "seed": str(args.seed)})
    except (DataError, OSError) as e:
        print("make_mlm_data: %s" % e, file=sys.stderr)
        return 2
    chosen = sum(1 for t in targets if t != IGNORE)
    print("wrote %s: %d sequences of %d tokens, %d chosen for prediction" % (args.out, args.samples, args.seq, chosen))
    return 0


if __name__ == "__main__":
    sys.exit(main())
