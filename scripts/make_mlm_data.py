#!/usr/bin/python3
"""Writes the synthetic masked-token dataset that configs/bert_mini.yaml trains on: a
safetensors file with three int64 tensors of shape [samples, seq]:

- `tokens`: each sequence repeats a random pattern of --min-period to --max-period tokens
  drawn from ids 2 .. vocab-1, with about --mask-rate of its positions (at least one)
  replaced by MASK (id 1);
- `positions`: 0 .. seq-1 in every row (the learned position embedding's indices);
- `targets`: the original token at the masked positions, -100 (ignored) elsewhere.

    scripts/make_mlm_data.py OUT.safetensors [--samples 4096] [--seq 32] [--vocab 64]
                             [--min-period 2] [--max-period 6] [--mask-rate 0.15] [--seed 0]

A masked token is predictable from its context: the same token stands one period away
(unless that one is masked too), so a model that finds the period scores it near
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


def sequences(samples, seq, vocab, min_period, max_period, mask_rate, rng):
    """(tokens, positions, targets) as flat lists of samples·seq ints."""
    tokens, positions, targets = [], [], []
    n_mask = max(1, round(mask_rate * seq))
    for _ in range(samples):
        period = rng.randint(min_period, max_period)
        pattern = [rng.randrange(2, vocab) for _ in range(period)]
        row = [pattern[i % period] for i in range(seq)]
        masked = set(rng.sample(range(seq), n_mask))
        tokens.extend(MASK if i in masked else t for i, t in enumerate(row))
        positions.extend(range(seq))
        targets.extend(t if i in masked else IGNORE for i, t in enumerate(row))
    return tokens, positions, targets


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", metavar="OUT", help="the output file")
    ap.add_argument("--samples", type=int, default=4096, help="sequences to write")
    ap.add_argument("--seq", type=int, default=32, help="sequence length (the model's seq dimension)")
    ap.add_argument("--vocab", type=int, default=64, help="ids are below this (num_embeddings); 0 and 1 are reserved")
    ap.add_argument("--min-period", type=int, default=2, help="shortest repeated pattern")
    ap.add_argument("--max-period", type=int, default=6, help="longest repeated pattern")
    ap.add_argument("--mask-rate", type=float, default=0.15, help="fraction of positions masked (at least one)")
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
        rng = random.Random(args.seed)
        tokens, positions, targets = sequences(args.samples, args.seq, args.vocab, args.min_period,
                                               args.max_period, args.mask_rate, rng)
        shape = [args.samples, args.seq]
        write_safetensors(args.out, {"tokens": (shape, tokens), "positions": (shape, positions),
                                     "targets": (shape, targets)},
                          {"seq": str(args.seq), "vocab": str(args.vocab), "mask_id": str(MASK),
                           "periods": "%d-%d" % (args.min_period, args.max_period),
                           "mask_rate": str(args.mask_rate), "seed": str(args.seed)})
    except (DataError, OSError) as e:
        print("make_mlm_data: %s" % e, file=sys.stderr)
        return 2
    masked = sum(1 for t in targets if t != IGNORE)
    print("wrote %s: %d sequences of %d tokens, %d masked" % (args.out, args.samples, args.seq, masked))
    return 0


if __name__ == "__main__":
    sys.exit(main())
